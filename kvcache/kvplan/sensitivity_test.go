package kvplan

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	"github.com/kakeya-ai/kakeya/internal/kvflags"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

var backend = cpubackend.New(1)

func TestReadPlan(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, text, err string
	}{
		{"ok", `{"format": "kakeya-kv-plan/1", "layers": [{"k": "none", "v": "int8"}, {"k": "kakeya-block:b=3,rank=4", "v": "bf16"}], "predicted_kl": 0.001}`, ""},
		{"format", `{"format": "plan/0", "layers": [{"k": "none", "v": "int8"}]}`, `format "plan/0", want "kakeya-kv-plan/1"`},
		{"unknown field", `{"format": "kakeya-kv-plan/1", "layer": []}`, `unknown field "layer"`},
		{"no layers", `{"format": "kakeya-kv-plan/1", "layers": []}`, "no layers"},
		{"bad codec", `{"format": "kakeya-kv-plan/1", "layers": [{"k": "int9", "v": "none"}]}`, `layer 0 key codec "int9"`},
		{"empty side", `{"format": "kakeya-kv-plan/1", "layers": [{"k": "int8"}]}`, "empty value codec"},
		{"not json", `layers: 1`, "invalid character"},
	}
	for _, tt := range tests {
		path := filepath.Join(dir, tt.name+".json")
		if err := os.WriteFile(path, []byte(tt.text), 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := ReadPlan(path)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), path) {
				t.Errorf("%s: err = %v, want one naming %s and containing %q", tt.name, err, path, tt.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		// The tools' --kv-policy reads the file into the per-layer form.
		var s kvconfig.Spec
		if err := kvflags.Parser().Set(&s, "kv-policy", path); err != nil {
			t.Fatal(err)
		}
		if want := "none/int8|kakeya-block:b=3,rank=4/none"; s.Layers != want || kvconfig.FormatLayerCodecs(p.Layers) != want {
			t.Errorf("policy %s read as %q (spec %q), want %q", path, kvconfig.FormatLayerCodecs(p.Layers), s.Layers, want)
		}
	}
}

// fillCache appends n tokens of random keys and values to every layer.
func fillCache(t *testing.T, c *kvcache.Cache, n int, seed uint64) {
	t.Helper()
	cfg := c.Config()
	r := rand.New(rand.NewPCG(seed, 1))
	row := cfg.KVHeads * cfg.HeadDim
	for l := range cfg.Layers {
		k, v := make([]float32, n*row), make([]float32, n*row)
		for i := range k {
			k[i], v[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
		}
		if err := c.Append(l, compute.Wrap(k), compute.Wrap(v), n); err != nil {
			t.Fatal(err)
		}
	}
}

// PlanFor meets its byte budget exactly as the cache accounts the bytes:
// sensitivities whose bytes are those real caches held, allocated at
// several ratios, give plans whose caches hold the bytes the plan
// predicts, never more than the budget, at the least cost brute force
// finds.
func TestPlanForMeetsBudget(t *testing.T) {
	const layers, kvh, d, bs, tokens = 3, 2, 32, 8, 40
	shape := kvcache.Shape{Layers: layers, KVHeads: kvh, HeadDim: d, MaxContext: 64}
	cacheBytes := func(spec kvconfig.Spec) (kvcache.Stats, [][2]int64) {
		t.Helper()
		pol, st, err := NewPolicy(spec, shape, nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := kvcache.New(kvcache.Config{Layers: layers, KVHeads: kvh, HeadDim: d, BlockSize: st.BlockSize, MaxTokens: 64, Policy: pol,
			Store: backend.NewBlockStore(st.BlockSize, d, pol.HotBF16)})
		if err != nil {
			t.Fatal(err)
		}
		fillCache(t, c, tokens, 7)
		s := c.Stats()
		sides := make([][2]int64, layers)
		for l, ls := range s.Layers {
			sides[l] = [2]int64{ls.KHot + ls.KCompressed, ls.VHot + ls.VCompressed}
		}
		return s, sides
	}
	one := func(layer, kv int, spec string) string {
		plan := make([]kvconfig.LayerPlan, layers)
		for l := range plan {
			plan[l] = kvconfig.LayerPlan{K: "none", V: "none"}
		}
		if kv == 0 {
			plan[layer].K = spec
		} else {
			plan[layer].V = spec
		}
		return kvconfig.FormatLayerCodecs(plan)
	}
	base, baseSides := cacheBytes(kvconfig.Spec{Layers: one(0, 0, "none"), BlockSize: bs, HotWindow: bs})
	sens := Sensitivity{Format: SensitivityFormat, Layers: layers, SideBF16: baseSides[0][0], BF16: base.BF16}
	if 2*layers*sens.SideBF16 != base.Bytes() {
		t.Fatalf("an all-bf16 plan holds %d bytes (side %d), bf16 cache %d", base.Bytes(), sens.SideBF16, base.BF16)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for l := range layers {
		for kv := range 2 {
			for _, spec := range []string{"int8", "int4", "kakeya-block:b=2"} {
				_, sides := cacheBytes(kvconfig.Spec{Layers: one(l, kv, spec), BlockSize: bs, HotWindow: bs})
				sens.Entries = append(sens.Entries, SensitivityEntry{Layer: l, KV: kv, Spec: spec, Bytes: sides[l][kv], KL: r.Float64()})
			}
		}
	}
	items, err := sens.Items()
	if err != nil {
		t.Fatal(err)
	}
	for _, ratio := range []float64{1, 1.2, 1.5, 1.8, 2.1} {
		p, err := PlanFor(sens, ratio)
		if err != nil {
			t.Fatalf("ratio %v: %v", ratio, err)
		}
		budget := int64(float64(sens.BF16) / ratio)
		got, _ := cacheBytes(kvconfig.Spec{Layers: kvconfig.FormatLayerCodecs(p.Layers), BlockSize: bs, HotWindow: bs})
		if got.Bytes() != p.Bytes || p.Bytes > budget {
			t.Errorf("ratio %v: plan %s predicts %d bytes (budget %d), its cache holds %d", ratio, kvconfig.FormatLayerCodecs(p.Layers), p.Bytes, budget, got.Bytes())
		}
		if want, _, _ := brute(items, budget); p.PredictedKL > want+1e-12 {
			t.Errorf("ratio %v: predicted KL %v, brute force finds %v", ratio, p.PredictedKL, want)
		}
		if p.Ratio < ratio {
			t.Errorf("ratio %v: plan ratio %v", ratio, p.Ratio)
		}
	}
	if _, err := PlanFor(sens, 100); err == nil || !strings.Contains(err.Error(), "the smallest measured codecs reach only") {
		t.Errorf("ratio 100: err = %v", err)
	}
	if _, err := PlanFor(sens, 0.5); err == nil || !strings.Contains(err.Error(), "target ratio 0.5: want a finite ratio >= 1") {
		t.Errorf("ratio 0.5: err = %v", err)
	}
}
