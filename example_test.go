package kakeya_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/kakeya-ai/kakeya"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

// Streaming generation through the Engine API: load a model directory (or a
// Hugging Face id), then receive text as it is produced.
func ExampleEngine_Generate() {
	shared := shareddata.Path() // the shared data set
	ctx := context.Background()
	eng, err := kakeya.Load(ctx, filepath.Join(shared, "models", "stories260K"), kakeya.Options{})
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
	shared := shareddata.Path() // the shared data set
	ctx := context.Background()
	eng, err := kakeya.Load(ctx, filepath.Join(shared, "models", "stories260K"), kakeya.Options{
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

// Structured output: the generation is constrained to JSON that the
// schema accepts, and stops where the document closes.
func ExampleGenerateOptions_jsonSchema() {
	shared := shareddata.Path() // the shared data set
	ctx := context.Background()
	eng, err := kakeya.Load(ctx, filepath.Join(shared, "models", "stories260K"), kakeya.Options{})
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
