// Package kakeya is the embedding API of the Kakeya inference engine: it
// loads a model (the Llama family, Gemma 2 and Gemma 3) with its
// tokenizer, from a local directory, a GGUF file or a Hugging Face id, and
// generates text over a paged and optionally compressed KV cache.
//
//	eng, err := kakeya.Load(ctx, "Qwen/Qwen2.5-0.5B-Instruct", kakeya.Options{
//		Cache: kvconfig.Spec{KV: "kakeya"}, // the kakeya preset, calibrated on first load
//	})
//	if err != nil {
//		return err
//	}
//	defer eng.Close()
//	res, err := eng.Generate(ctx, "Why is the sky blue?", kakeya.GenerateOptions{
//		MaxTokens: 200,
//		Chat:      true,
//	}, func(piece string) error {
//		_, err := os.Stdout.WriteString(piece)
//		return err
//	})
//
// The forward pass itself lives in package model, KV cache calibration in
// package calibrate.
package kakeya
