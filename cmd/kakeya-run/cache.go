package main

import (
	"flag"
	"fmt"
	"path/filepath"

	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/tokenizer"
)

// cacheFlags are the KV cache settings of a run.
type cacheFlags struct {
	blockSize, maxContext int
}

func (c *cacheFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&c.blockSize, "block-size", 16, "tokens per KV cache block")
	fs.IntVar(&c.maxContext, "ctx", 0, "context length in tokens (0 = the model's, at most 32768)")
}

func (c *cacheFlags) options() (model.Options, error) {
	if c.blockSize <= 0 {
		return model.Options{}, fmt.Errorf("--block-size %d must be > 0", c.blockSize)
	}
	if c.maxContext < 0 {
		return model.Options{}, fmt.Errorf("--ctx %d must be >= 0", c.maxContext)
	}
	return model.Options{BlockSize: c.blockSize, MaxContext: c.maxContext}, nil
}

func loadTokenizer(dir string) (*tokenizer.Tokenizer, error) {
	return tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
}
