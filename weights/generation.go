package weights

import (
	"encoding/json"
	"errors"
	"fmt"
)

// GenerationConfig is the part of a Hugging Face generation_config.json the
// loader reads: its token ids, which transformers' generate() uses in
// preference to config.json's (it stops on every eos_token_id, for
// instance), so they must be tokens of the model too.
type GenerationConfig struct {
	BOSTokenID  int   // -1 when the file names none
	EOSTokenIDs []int // empty when the file names none
	PadTokenID  int   // -1 when the file names none
}

// rawGeneration mirrors generation_config.json; other keys (sampling
// defaults, max_length, ...) are not read.
type rawGeneration struct {
	BOSTokenID json.RawMessage `json:"bos_token_id"`
	EOSTokenID json.RawMessage `json:"eos_token_id"`
	PadTokenID json.RawMessage `json:"pad_token_id"`
}

// ParseGenerationConfig parses generation_config.json content and checks
// its token ids against vocabSize, the model's vocab_size from config.json;
// name (usually the file path) prefixes every error.
func ParseGenerationConfig(data []byte, name string, vocabSize int) (*GenerationConfig, error) {
	g, err := parseGeneration(data)
	if err == nil {
		err = g.Validate(vocabSize)
	}
	if err != nil {
		return nil, fmt.Errorf("weights: %s: %w", name, err)
	}
	return g, nil
}

func parseGeneration(data []byte) (*GenerationConfig, error) {
	var r rawGeneration
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("invalid JSON: %v", err)
	}
	g := &GenerationConfig{BOSTokenID: -1, PadTokenID: -1}
	var err error
	if r.BOSTokenID != nil {
		if g.BOSTokenID, err = parseID("bos_token_id", r.BOSTokenID); err != nil {
			return nil, err
		}
	}
	if r.EOSTokenID != nil {
		if g.EOSTokenIDs, err = parseIDs(r.EOSTokenID); err != nil {
			return nil, fmt.Errorf("eos_token_id %s: %v", r.EOSTokenID, err)
		}
	}
	if r.PadTokenID != nil {
		if g.PadTokenID, err = parseID("pad_token_id", r.PadTokenID); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Validate checks that every token id is a row of a vocabulary of
// vocabSize tokens (config.json's vocab_size); bos_token_id and
// pad_token_id may also be -1, none.
func (g *GenerationConfig) Validate(vocabSize int) error {
	if g == nil {
		return errors.New("no generation configuration")
	}
	if err := checkTokenID("bos_token_id", g.BOSTokenID, vocabSize, true, "config.json"); err != nil {
		return err
	}
	if err := checkTokenIDs("eos_token_id", g.EOSTokenIDs, vocabSize, "config.json"); err != nil {
		return err
	}
	return checkTokenID("pad_token_id", g.PadTokenID, vocabSize, true, "config.json")
}
