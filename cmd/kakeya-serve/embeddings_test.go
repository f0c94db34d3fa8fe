package main

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya"
)

// decodeEmbedRequest takes a string or a list of strings and
// encoding_format float or base64; anything else is a 400 naming the
// field.
func TestDecodeEmbedRequest(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		input      []string
		base64     bool
		param      string // of the 400, "" for none
	}{
		{"string", `{"input": "hi", "model": "ref"}`, []string{"hi"}, false, ""},
		{"list", `{"input": ["a", "b"], "encoding_format": "float", "user": "u"}`, []string{"a", "b"}, false, ""},
		{"base64", `{"input": ["a"], "encoding_format": "base64", "dimensions": null}`, []string{"a"}, true, ""},
		{"unknown field ignored", `{"input": "a", "x_unknown": 1}`, []string{"a"}, false, ""},
		{"no input", `{"model": "ref"}`, nil, false, "input"},
		{"null input", `{"input": null}`, nil, false, "input"},
		{"empty string", `{"input": ""}`, nil, false, "input"},
		{"empty list", `{"input": []}`, nil, false, "input"},
		{"an empty string in the list", `{"input": ["a", ""]}`, nil, false, "input"},
		{"token ids", `{"input": [1, 2, 3]}`, nil, false, "input"},
		{"too many", `{"input": [` + strings.Repeat(`"a", `, maxEmbedInputs) + `"a"]}`, nil, false, "input"},
		{"bad format", `{"input": "a", "encoding_format": "fp16"}`, nil, false, "encoding_format"},
		{"bad dimensions", `{"input": "a", "dimensions": "8"}`, nil, false, "dimensions"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := decodeEmbedRequest([]byte(tt.body), &params{})
			if tt.param != "" {
				if err == nil || err.status != 400 || err.param != tt.param {
					t.Fatalf("got %+v, %+v; want the 400 of %s", r, err, tt.param)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(r.input, "|") != strings.Join(tt.input, "|") || r.base64 != tt.base64 {
				t.Errorf("got %+v", r)
			}
		})
	}
}

// /v1/embeddings gives each input the reference engine's vector for it
// (Engine.Embed, last-token or, with --pooling mean, mean pooling, unit
// length), as floats or base64, with the tokens counted; a text past the
// context and a wrong dimensions are 400s.
func TestEmbeddings(t *testing.T) {
	ref := reference(t)
	texts := []string{"The capital of France is Paris.", "Once upon a time"}
	for _, pool := range []kakeya.Pooling{kakeya.PoolLast, kakeya.PoolMean} {
		t.Run(pool.String(), func(t *testing.T) {
			s := startServer(t, "--pooling", pool.String())
			want, tokens, err := ref.Embed(context.Background(), texts, kakeya.EmbedOptions{Pooling: pool, Normalize: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, format := range []string{"float", "base64"} {
				body, _ := json.Marshal(map[string]any{"model": "ref", "input": texts, "encoding_format": format})
				code, b := s.post(t, "/v1/embeddings", string(body))
				if code != 200 {
					t.Fatalf("%s: status %d: %s", format, code, b)
				}
				var resp struct {
					Object string `json:"object"`
					Model  string `json:"model"`
					Data   []struct {
						Object    string          `json:"object"`
						Index     int             `json:"index"`
						Embedding json.RawMessage `json:"embedding"`
					} `json:"data"`
					Usage embedUsage `json:"usage"`
				}
				if err := json.Unmarshal(b, &resp); err != nil {
					t.Fatal(err)
				}
				if resp.Object != "list" || resp.Model != "ref" || len(resp.Data) != len(texts) ||
					resp.Usage.PromptTokens != tokens[0]+tokens[1] || resp.Usage.TotalTokens != resp.Usage.PromptTokens {
					t.Fatalf("%s: %s", format, b)
				}
				for i, d := range resp.Data {
					var got []float32
					if format == "float" {
						if err := json.Unmarshal(d.Embedding, &got); err != nil {
							t.Fatal(err)
						}
					} else {
						var enc string
						if err := json.Unmarshal(d.Embedding, &enc); err != nil {
							t.Fatal(err)
						}
						raw, err := base64.StdEncoding.DecodeString(enc)
						if err != nil || len(raw)%4 != 0 {
							t.Fatalf("base64 %q: %v", enc[:min(20, len(enc))], err)
						}
						for j := 0; j < len(raw); j += 4 {
							got = append(got, math.Float32frombits(binary.LittleEndian.Uint32(raw[j:])))
						}
					}
					if d.Object != "embedding" || d.Index != i || len(got) != len(want[i]) {
						t.Fatalf("%s data[%d]: object %q index %d, %d values, want %d", format, i, d.Object, d.Index, len(got), len(want[i]))
					}
					for j := range got {
						if math.Abs(float64(got[j]-want[i][j])) > 1e-6 {
							t.Fatalf("%s data[%d][%d] = %g, Engine.Embed %g", format, i, j, got[j], want[i][j])
						}
					}
				}
			}
		})
	}
	s := startServer(t)
	for _, tt := range []struct {
		name, body, param, code string
	}{
		{"past the context", `{"input": ["a", "` + strings.Repeat("a ", 2100) + `"]}`, "input", "context_length_exceeded"},
		{"dimensions", `{"input": "a", "dimensions": 3}`, "dimensions", ""},
		{"another model", `{"input": "a", "model": "gpt"}`, "model", "model_not_found"},
	} {
		code, b := s.post(t, "/v1/embeddings", tt.body)
		_, _, param, ecode := checkError(t, b)
		if code/100 != 4 || deref(param) != tt.param || tt.code != "" && deref(ecode) != tt.code {
			t.Errorf("%s: %d %s, want a 4xx naming %s", tt.name, code, b, tt.param)
		}
	}
	if v := s.metric(t, `vllm:prompt_tokens_total{model_name="ref"}`); v != 0 {
		t.Errorf("prompt tokens %g counted for failed embeddings", v)
	}
}
