package kakeya_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kakeya-ai/kakeya"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

// modelDir is the examples' model: stories260K from the shared data set
// ($KAKEYA_SHARED, else ../shared beside the repository).
func modelDir() string {
	shared := os.Getenv("KAKEYA_SHARED")
	if shared == "" {
		shared = filepath.Join("..", "shared")
	}
	return filepath.Join(shared, "models", "stories260K")
}

// Streaming generation through the Engine API: load a model directory (or a
// Hugging Face id), then receive text as it is produced.
func ExampleEngine_Generate() {
	ctx := context.Background()
	eng, err := kakeya.Load(ctx, modelDir(), kakeya.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()

	var out strings.Builder
	res, err := eng.Generate(ctx, "Once upon a time", kakeya.GenerateOptions{
		MaxTokens: 12, // greedy: the zero SamplingOptions
	}, func(piece string) error {
		out.WriteString(piece) // e.g. print it and flush
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%q %d %s\n", out.String(), res.GeneratedTokens, res.StopReason)
	// Output:
	// ", there was a little girl named Lily. She" 12 length
}

// A compressed KV cache on an Engine: the settings of kakeya-run's cache
// flags, with the same defaults, as a kvconfig.Spec.
func ExampleOptions_cache() {
	ctx := context.Background()
	eng, err := kakeya.Load(ctx, modelDir(), kakeya.Options{
		Cache: kvconfig.Spec{KV: "int8", BlockSize: 16}, // like --kv-codec int8 --block-size 16
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()
	res, err := eng.Generate(ctx, "Once upon a time", kakeya.GenerateOptions{MaxTokens: 60}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(eng.CacheSettings())
	fmt.Println(res.KV.Tokens, res.KV.Compressed > 0)
	// Output:
	// k=int8 v=int8 block 16, hot 16, boundary 0;4, bf16 hot blocks
	// 64 true
}

// Streaming generation as an iterator: each piece of text as it comes,
// then the result. Breaking out of the loop ends the generation.
func ExampleEngine_Stream() {
	ctx := context.Background()
	eng, err := kakeya.Load(ctx, modelDir(), kakeya.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()
	var out strings.Builder
	for tok, err := range eng.Stream(ctx, "Once upon a time", kakeya.GenerateOptions{MaxTokens: 12}) {
		if err != nil {
			fmt.Println(err)
			return
		}
		out.WriteString(tok.Text)
		if tok.Result != nil {
			fmt.Printf("%q %d %s\n", out.String(), tok.Result.GeneratedTokens, tok.Result.StopReason)
		}
	}
	// Output:
	// ", there was a little girl named Lily. She" 12 length
}

// The model and its tokenizer as data: no lower package's types.
func ExampleEngine_ModelInfo() {
	eng, err := kakeya.Load(context.Background(), modelDir(), kakeya.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()
	info := eng.ModelInfo()
	fmt.Println(info.Type, info.Layers, info.HiddenSize, info.VocabSize)
	ids := eng.Encode("Once upon a time", true)
	fmt.Println(ids, eng.Decode(ids, true))
	// Output:
	// llama 5 64 512
	// [1 403 407 261 378] Once upon a time
}

// Structured output: the generation is constrained to JSON that the
// schema accepts, and stops where the document closes.
func ExampleGenerateOptions_jsonSchema() {
	ctx := context.Background()
	eng, err := kakeya.Load(ctx, modelDir(), kakeya.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()
	res, err := eng.Generate(ctx, "Once upon a time", kakeya.GenerateOptions{
		MaxTokens:  100,
		JSONSchema: []byte(`{"type": "object", "properties": {"mood": {"enum": ["happy", "sad"]}, "age": {"type": "integer"}}, "required": ["mood", "age"], "additionalProperties": false}`),
	}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	var v struct {
		Mood string
		Age  int
	}
	fmt.Println(json.Unmarshal([]byte(res.Text), &v) == nil, res.StopReason)
	// Output:
	// true eos
}
