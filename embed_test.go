package kakeya

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/weights"
)

// Embed's last-token vector is the hidden state the classifier reads: times
// the model's output matrix (read from its safetensors here) it gives the
// logits Engine.Logits returns for the text's last position. Its mean
// vector is the mean of those rows over the positions (checked through
// the logits too: the classifier is linear); normalized vectors are the
// same directions at unit length; the texts' order and batching do not
// change a text's vector.
func TestEmbed(t *testing.T) {
	dir := shareddata.File(t, "models", "ref-qwen2-6m")
	e, err := Load(context.Background(), dir, Options{Threads: 1, KVMemory: 64 << 20, MatMul: "f32"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cfg := e.Model().Config()
	st, err := weights.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	name := "lm_head.weight"
	if cfg.TieWordEmbeddings {
		name = "model.embed_tokens.weight"
	}
	tn, err := st.Tensor(name)
	if err != nil {
		t.Fatal(err)
	}
	head, err := tn.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	h, vocab := cfg.HiddenSize, cfg.VocabSize
	classify := func(x []float64) []float64 {
		out := make([]float64, vocab)
		for r := range out {
			var s float64
			for c, w := range head[r*h : (r+1)*h] {
				s += float64(w) * x[c]
			}
			out[r] = s
		}
		return out
	}
	// A text longer than one prefill chunk, so that pooling spans chunks.
	texts := []string{"The capital of France is Paris.", strings.Repeat("Once upon a time there was a girl. ", 80)}
	ctx := context.Background()
	for _, pool := range []Pooling{PoolLast, PoolMean} {
		vecs, tokens, err := e.Embed(ctx, texts, EmbedOptions{Pooling: pool})
		if err != nil {
			t.Fatal(err)
		}
		for i, text := range texts {
			ids, logits, err := e.Logits(ctx, text, GenerateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if tokens[i] != len(ids) || len(vecs[i]) != h {
				t.Fatalf("%v text %d: %d tokens and %d values, want %d and %d", pool, i, tokens[i], len(vecs[i]), len(ids), h)
			}
			if i == 1 && len(ids) <= prefillChunk {
				t.Fatalf("text 1 is %d tokens, not longer than a chunk (%d)", len(ids), prefillChunk)
			}
			want := make([]float64, vocab) // the logits the vector should give
			rows := logits[len(logits)-1:]
			if pool == PoolMean {
				rows = logits
			}
			for _, row := range rows {
				for j, v := range row {
					want[j] += float64(v) / float64(len(rows))
				}
			}
			x := make([]float64, h)
			for j, v := range vecs[i] {
				x[j] = float64(v)
			}
			var d, scale float64
			for j, v := range classify(x) {
				d, scale = max(d, math.Abs(v-want[j])), max(scale, math.Abs(want[j]))
			}
			if d > 1e-4*scale {
				t.Errorf("%v text %d: the vector's logits differ from Engine.Logits' by %.3g (max %.3g)", pool, i, d, scale)
			}
			t.Logf("%v text %d (%d tokens): logits max abs diff %.3g of %.3g", pool, i, len(ids), d, scale)
		}
		// Normalized: the same direction at unit length; one text alone
		// gets the vector it got among others.
		norm, _, err := e.Embed(ctx, texts[1:], EmbedOptions{Pooling: pool, Normalize: true})
		if err != nil {
			t.Fatal(err)
		}
		var ss, dot float64
		for j, v := range norm[0] {
			ss += float64(v) * float64(v)
			dot += float64(v) * float64(vecs[1][j])
		}
		var n1 float64
		for _, v := range vecs[1] {
			n1 += float64(v) * float64(v)
		}
		if math.Abs(ss-1) > 1e-5 || math.Abs(dot/math.Sqrt(n1)-1) > 1e-5 {
			t.Errorf("%v normalized: |v|² %.7f, cosine with the raw vector %.7f; want 1 and 1", pool, ss, dot/math.Sqrt(n1))
		}
	}
	for _, tt := range []struct {
		texts []string
		opt   EmbedOptions
		want  string
	}{
		{[]string{"a", strings.Repeat("a ", 3000)}, EmbedOptions{}, "text 1"},
		{[]string{"a"}, EmbedOptions{Pooling: 7}, "Pooling"},
	} {
		if _, _, err := e.Embed(ctx, tt.texts, tt.opt); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Embed %.20q %+v: %v, want an error naming %s", tt.texts, tt.opt, err, tt.want)
		}
	}
}
