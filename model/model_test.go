package model

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	"github.com/kakeya-ai/kakeya/eval"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/pick"
	"github.com/kakeya-ai/kakeya/weights"
)

// cpuBackend returns a CPU backend of threads threads and matmul
// precision, closed when the test ends.
func cpuBackend(t testing.TB, threads int, matmul string) compute.Backend {
	t.Helper()
	b, err := cpubackend.NewMatMul(threads, matmul)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func load(t testing.TB, dir string, opt Options) *Model {
	t.Helper()
	m, err := Load(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// decode feeds ids one at a time and returns every position's logits.
func decode(t testing.TB, m *Model, ids []int) [][]float32 {
	t.Helper()
	rows, _ := decodeWith(t, m, SequenceOptions{Cache: m.policy}, ids)
	return rows
}

// decodeWith is decode on a sequence with options o; it also returns the
// cache's final byte accounting.
func decodeWith(t testing.TB, m *Model, o SequenceOptions, ids []int) ([][]float32, kvcache.Stats) {
	t.Helper()
	s, err := m.NewSequenceOpts(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var rows [][]float32
	for _, id := range ids {
		l, err := s.Forward([]int{id}, false)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, append([]float32(nil), l...))
	}
	return rows, s.KVStats()
}

func maxAbsDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

func maxAbs(a []float32) float64 {
	var d float64
	for _, v := range a {
		d = max(d, math.Abs(float64(v)))
	}
	return d
}

// The two real models against logits computed by independent
// implementations: stories260K (Llama, head_dim 8) against llama2.c's
// run.c, ref-qwen2-6m (Qwen2 with biases and GQA, head_dim 64, BF16)
// against a PyTorch transcription of Hugging Face's modeling_qwen2.py in
// fp32. Prefill and token by token, within 1e-3.
func TestRealModelsReference(t *testing.T) {
	for _, tc := range []struct {
		model, golden, by string
		positions         int
	}{
		{"stories260K", "stories260K_runc_logits.txt", "llama2.c", 12},
		{"ref-qwen2-6m", "ref-qwen2-6m_logits.txt", "PyTorch", 64},
	} {
		t.Run(tc.model, func(t *testing.T) {
			ids, want := reference(t, tc.golden)
			if len(ids) != tc.positions {
				t.Fatalf("%s has %d lines, want %d", tc.golden, len(ids), tc.positions)
			}
			m := load(t, shareddata.File(t, "models", tc.model), Options{Backend: cpuBackend(t, 2, "f32")})
			prefill, err := m.Logits(ids)
			if err != nil {
				t.Fatal(err)
			}
			for name, got := range map[string][][]float32{"decode": decode(t, m, ids), "prefill": prefill} {
				var worst float64
				for p := range ids {
					if len(got[p]) != len(want[p]) {
						t.Fatalf("%s: position %d: %d logits, want %d", name, p, len(got[p]), len(want[p]))
					}
					worst = max(worst, maxAbsDiff(got[p], want[p]))
				}
				t.Logf("%s: max abs error vs %s %.3g", name, tc.by, worst)
				if worst > 1e-3 {
					t.Errorf("%s: max abs error vs %s %.3g, want <= 1e-3", name, tc.by, worst)
				}
			}
		})
	}
}

// tinyModels writes the testmodel presets once per test.
func tinyModels(t testing.TB) map[string]string {
	t.Helper()
	dirs := map[string]string{}
	for name, spec := range map[string]testmodel.Spec{
		"qwen2":  testmodel.Qwen2Tiny,
		"llama3": testmodel.Llama3Tiny,
		"qwen3":  testmodel.Qwen3Tiny,
	} {
		dir := filepath.Join(t.TempDir(), name)
		if err := testmodel.Write(dir, spec); err != nil {
			t.Fatal(err)
		}
		dirs[name] = dir
	}
	return dirs
}

// testIDs returns n deterministic token ids below vocab.
func testIDs(n, vocab int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = (i*7919 + 13) % vocab
	}
	ids[0] = 1
	return ids
}

// Prefill, token-by-token decode and mixed chunks give the same logits bit
// for bit: every matrix product computes a token's outputs by one
// arithmetic whatever the batch, and attention every score and sum by one
// wherever the query sits. (A tolerance would not do: with bf16
// activations, the default, a last-bit difference before a rounding moves
// a logit by ~1e-3.) TestKernelLevels reruns this at every kernel level.
func TestPrefillMatchesDecode(t *testing.T) {
	dirs := tinyModels(t)
	dirs["stories260K"] = "" // from the shared data set, located in the subtest
	for name, dir := range dirs {
		t.Run(name, func(t *testing.T) {
			if dir == "" {
				dir = shareddata.File(t, "models", "stories260K")
			}
			m := load(t, dir, Options{Backend: cpuBackend(t, 2, "")})
			ids := testIDs(40, m.Config().VocabSize)
			dec := decode(t, m, ids)
			pre, err := m.Logits(ids)
			if err != nil {
				t.Fatal(err)
			}
			for p := range ids {
				if i := firstBitDiff(pre[p], dec[p]); i >= 0 {
					t.Errorf("position %d, logit %d: prefill %v, decode %v", p, i, pre[p][i], dec[p][i])
				}
			}
			// Mixed chunks agree with decode too.
			s, _ := m.NewSequence()
			defer s.Close()
			for _, r := range [][2]int{{0, 17}, {17, 18}, {18, 40}} {
				got, err := s.Forward(ids[r[0]:r[1]], false)
				if err != nil {
					t.Fatal(err)
				}
				if i := firstBitDiff(got, dec[r[1]-1]); i >= 0 {
					t.Errorf("chunk %v: last row's logit %d is %v, decode's %v", r, i, got[i], dec[r[1]-1][i])
				}
			}
		})
	}
}

// firstBitDiff returns the first index where a and b differ in any bit, or
// -1 if they are identical.
func firstBitDiff(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// Neither the block size nor the thread count changes a logit: every sum
// runs in a fixed order.
func TestBlockSizesAndThreadsIdentical(t *testing.T) {
	dirs := tinyModels(t)
	dirs["stories260K"] = "" // from the shared data set, located in the subtest
	for name, dir := range dirs {
		t.Run(name, func(t *testing.T) {
			if dir == "" {
				dir = shareddata.File(t, "models", "stories260K")
			}
			var first [][]float32
			for _, c := range []struct{ bs, threads int }{{1, 1}, {16, 2}, {256, 3}, {7, 1}} {
				bs := c.bs
				m := load(t, dir, Options{Backend: cpuBackend(t, c.threads, ""), BlockSize: bs})
				ids := testIDs(37, m.Config().VocabSize)
				got, err := m.Logits(ids)
				if err != nil {
					t.Fatal(err)
				}
				if first == nil {
					first = got
					continue
				}
				for p := range got {
					for i := range got[p] {
						if got[p][i] != first[p][i] {
							t.Fatalf("block size %d, %d threads: position %d logit %d = %v, block size 1 on 1 thread gave %v", bs, c.threads, p, i, got[p][i], first[p][i])
						}
					}
				}
			}
		})
	}
}

func TestLosslessCodecBitIdentical(t *testing.T) {
	dir := tinyModels(t)["qwen2"]
	plain := load(t, dir, Options{Backend: cpuBackend(t, 2, ""), BlockSize: 4})
	ids := testIDs(50, plain.Config().VocabSize)
	want := decode(t, plain, ids)
	layers := make([]kvcache.LayerCodecs, plain.Config().NumLayers)
	for i := range layers {
		layers[i] = kvcache.LayerCodecs{K: []codec.Codec{codec.Identity{}}, V: codec.Identity{}}
	}
	m := load(t, dir, Options{Backend: cpuBackend(t, 2, ""), BlockSize: 4, Cache: kvcache.Policy{Layers: layers, HotWindow: 8, Sinks: 4}})
	s, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for p, id := range ids {
		got, err := s.Forward([]int{id}, false)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if got[i] != want[p][i] {
				t.Fatalf("position %d logit %d = %v through the codec, %v without", p, i, got[i], want[p][i])
			}
		}
	}
	st := s.KVStats()
	if st.Compressed == 0 {
		t.Errorf("no block was encoded: %+v", st)
	}
	t.Logf("KV bytes %d (hot %d, compressed %d), bf16 %d", st.Bytes(), st.Hot, st.Compressed, st.BF16)
}

func TestLlama3InvFreq(t *testing.T) {
	dir := tinyModels(t)["llama3"]
	m := load(t, dir, Options{Backend: cpuBackend(t, 1, "")})
	spec := testmodel.Llama3Tiny
	rs := spec.RopeScaling
	got := m.InvFreq()
	d := spec.HeadDim
	var kept, smoothed, divided int
	for i := 0; i < d/2; i++ {
		base := 1 / math.Pow(spec.RopeTheta, float64(2*i)/float64(d))
		wavelen := 2 * math.Pi / base
		want := base
		switch lo, hi := float64(rs.OriginalMaxPositionEmbeddings)/rs.LowFreqFactor, float64(rs.OriginalMaxPositionEmbeddings)/rs.HighFreqFactor; {
		case wavelen < hi:
			kept++
		case wavelen > lo:
			want = base / rs.Factor
			divided++
		default:
			s := (float64(rs.OriginalMaxPositionEmbeddings)/wavelen - rs.LowFreqFactor) / (rs.HighFreqFactor - rs.LowFreqFactor)
			want = (1-s)*base/rs.Factor + s*base
			smoothed++
		}
		if math.Abs(float64(got[i])-want) > 1e-6*want {
			t.Errorf("inv_freq[%d] = %v, want %v", i, got[i], want)
		}
	}
	if kept == 0 || smoothed == 0 || divided == 0 {
		t.Errorf("the preset exercises kept %d, smoothed %d, divided %d frequencies: want each > 0", kept, smoothed, divided)
	}
}

func TestLoadErrors(t *testing.T) {
	good := tinyModels(t)["qwen2"]
	st, err := weights.Open(good)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// rewrite copies the good checkpoint with edit applied to its tensors.
	rewrite := func(t *testing.T, edit func([]weights.Tensor) []weights.Tensor) string {
		dir := t.TempDir()
		var ts []weights.Tensor
		for _, n := range st.Names() {
			tn, err := st.Tensor(n)
			if err != nil {
				t.Fatal(err)
			}
			ts = append(ts, *tn)
		}
		if err := weights.WriteFile(filepath.Join(dir, "model.safetensors"), edit(ts), nil); err != nil {
			t.Fatal(err)
		}
		cfg, _ := os.ReadFile(filepath.Join(good, "config.json"))
		os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)
		return dir
	}
	for _, tc := range []struct {
		name string
		dir  func(t *testing.T) string
		want []string
	}{
		{"missing tensor", func(t *testing.T) string {
			return rewrite(t, func(ts []weights.Tensor) []weights.Tensor {
				var out []weights.Tensor
				for _, x := range ts {
					if x.Name != "model.layers.1.mlp.up_proj.weight" {
						out = append(out, x)
					}
				}
				return out
			})
		}, []string{"model.layers.1.mlp.up_proj.weight", "missing"}},
		{"shape mismatch", func(t *testing.T) string {
			return rewrite(t, func(ts []weights.Tensor) []weights.Tensor {
				for i, x := range ts {
					if x.Name == "model.layers.0.self_attn.k_proj.weight" {
						ts[i].Shape = []int{x.Shape[1], x.Shape[0]}
					}
				}
				return ts
			})
		}, []string{"model.layers.0.self_attn.k_proj.weight", "[224 32]", "num_key_value_heads*head_dim=32, hidden_size=224"}},
		// config.json sizes are checked against the tensors present before
		// anything proportional to them is allocated.
		{"a billion layers", func(t *testing.T) string {
			return withConfig(t, rewrite(t, func(ts []weights.Tensor) []weights.Tensor { return ts }), "num_hidden_layers", 1000000000)
		}, []string{"num_hidden_layers"}},
		{"more layers than tensors", func(t *testing.T) string {
			return withConfig(t, rewrite(t, func(ts []weights.Tensor) []weights.Tensor { return ts }), "num_hidden_layers", 3)
		}, []string{"num_hidden_layers", "3"}},
		{"vocabulary larger than the embedding", func(t *testing.T) string {
			return withConfig(t, rewrite(t, func(ts []weights.Tensor) []weights.Tensor { return ts }), "vocab_size", 1<<20)
		}, []string{"model.embed_tokens.weight", "vocab_size"}},
		{"gpt2", func(t *testing.T) string {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type": "gpt2", "n_embd": 64}`), 0o644)
			return dir
		}, []string{"gpt2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Load(tc.dir(t), Options{Backend: cpuBackend(t, 1, "")})
			if err == nil {
				m.Close()
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// withConfig sets one integer field of dir's config.json and returns dir.
func withConfig(t *testing.T, dir, field string, v int) string {
	t.Helper()
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg[field] = v
	if data, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestForwardErrors(t *testing.T) {
	m := load(t, tinyModels(t)["llama3"], Options{Backend: cpuBackend(t, 1, ""), MaxContext: 10})
	s, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Forward(testIDs(11, 256), false); err == nil || !strings.Contains(err.Error(), "model: the prompt is 11 tokens, more than the context of 10: raise Options.MaxContext (this model allows up to 65536) or shorten the prompt") {
		t.Errorf("overflow: err = %v", err)
	}
	if _, err := s.Forward(testIDs(6, 256), false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Forward(testIDs(5, 256), false); err == nil || !strings.Contains(err.Error(), "the prompt is 11 tokens, more than the context of 10") {
		t.Errorf("overflow after 6 tokens: err = %v", err)
	}
	if _, err := s.Forward([]int{256}, false); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("id 256 of vocab 256: err = %v", err)
	}
	if s.Len() != 6 {
		t.Errorf("Len = %d after rejected calls, want 6", s.Len())
	}
	s.Reset()
	if s.Len() != 0 {
		t.Errorf("Len = %d after Reset", s.Len())
	}
}

func TestDecodeAllocatesNothing(t *testing.T) {
	m := load(t, tinyModels(t)["qwen2"], Options{Backend: cpuBackend(t, 2, ""), BlockSize: 256})
	s, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Forward(testIDs(20, 256), false); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(50, func() {
		if _, err := s.Forward([]int{5}, false); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("decode step allocates %v times, want 0", allocs)
	}
}

func TestLongPromptChunks(t *testing.T) {
	// 600 tokens cross the 512-token prefill chunk.
	m := load(t, tinyModels(t)["llama3"], Options{Backend: cpuBackend(t, 2, "")})
	ids := testIDs(600, m.Config().VocabSize)
	pre, err := m.Logits(ids)
	if err != nil {
		t.Fatal(err)
	}
	dec := decode(t, m, ids)
	for _, p := range []int{0, 511, 512, 513, 599} {
		if d, scale := maxAbsDiff(pre[p], dec[p]), maxAbs(dec[p]); d > 1e-4*scale {
			t.Errorf("position %d: prefill vs decode max abs diff %.3g, row max %.3g", p, d, scale)
		}
	}
}

func TestClosedSequence(t *testing.T) {
	m := load(t, tinyModels(t)["qwen3"], Options{Backend: cpuBackend(t, 1, "")})
	s, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Reset()
	if _, err := s.Forward([]int{1}, false); err == nil {
		t.Error("Forward on a closed sequence: no error")
	}
	if s.Len() != 0 || s.KVStats().Bytes() != 0 {
		t.Error("closed sequence reports tokens or bytes")
	}
}

func TestObserve(t *testing.T) {
	dir := tinyModels(t)["qwen3"]
	var calls []string
	var k0 []float32 // layer 1 keys as observed
	m := load(t, dir, Options{Backend: cpuBackend(t, 1, ""), BlockSize: 256, Observe: func(layer, start, n int, q, k []float32) {
		calls = append(calls, fmt.Sprintf("%d:%d+%d:%d/%d", layer, start, n, len(q), len(k)))
		if layer == 1 {
			k0 = append(k0, k...)
		}
	}})
	s, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, chunk := range [][]int{{1, 2, 3}, {4}} {
		if _, err := s.Forward(chunk, false); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"0:0+3:384/192", "1:0+3:384/192", "0:3+1:128/64", "1:3+1:128/64"}
	if fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Errorf("calls %v, want %v", calls, want)
	}
	// The observed keys are what the cache holds (pre-RoPE).
	for h := 0; h < 2; h++ {
		kb, _, err := s.KVBlock(1, h, 0)
		if err != nil {
			t.Fatal(err)
		}
		for p := 0; p < 4; p++ {
			for j := 0; j < 32; j++ {
				if kb[p*32+j] != k0[p*64+h*32+j] {
					t.Fatalf("cache K[1][%d] pos %d [%d] = %v, observed %v", h, p, j, kb[p*32+j], k0[p*64+h*32+j])
				}
			}
		}
	}
}

// With the CPU backend's matmul precision "bf16", the default (""), the activations that
// multiply bf16 weights are rounded to bf16 (llama.cpp's arithmetic):
// ref-qwen2-6m's logits then stay within bf16 rounding of PyTorch's fp32
// ones (KL and top-1 below), prefill and token by token; "f32" is exact
// (TestRealModelsReference pins it).
func TestMatMulPrecisionReference(t *testing.T) {
	ids, want := reference(t, "ref-qwen2-6m_logits.txt")
	var bf16 [][]float32
	for _, tc := range []struct {
		matmul        string
		maxAbs, maxKL float64
	}{
		// Seen: 2.4e-5 and 4e-11; 0.022 and 1.2e-5.
		{"f32", 1e-3, 1e-7},
		{"bf16", 0.05, 1e-4},
		{"", 0.05, 1e-4},
	} {
		m := load(t, shareddata.File(t, "models", "ref-qwen2-6m"), Options{Backend: cpuBackend(t, 2, tc.matmul)})
		prefill, err := m.Logits(ids)
		if err != nil {
			t.Fatal(err)
		}
		if tc.matmul == "bf16" {
			bf16 = prefill
		}
		if tc.matmul == "" {
			// The default is bf16, bit for bit.
			for p := range ids {
				if d := maxAbsDiff(prefill[p], bf16[p]); d != 0 {
					t.Errorf("default precision, position %d: %g from bf16's logits, want 0", p, d)
				}
			}
		}
		for name, got := range map[string][][]float32{"decode": decode(t, m, ids), "prefill": prefill} {
			var worst, worstKL float64
			top1 := 0
			for p := range ids {
				worst = max(worst, maxAbsDiff(got[p], want[p]))
				kl, err := eval.KL(want[p], got[p])
				if err != nil {
					t.Fatal(err)
				}
				worstKL = max(worstKL, kl)
				if pick.ArgMax(got[p]) == pick.ArgMax(want[p]) {
					top1++
				}
			}
			t.Logf("%s %s: max abs error %.3g, max KL %.3g, top-1 %d/%d", tc.matmul, name, worst, worstKL, top1, len(ids))
			if worst > tc.maxAbs || worstKL > tc.maxKL || top1 < len(ids)-1 {
				t.Errorf("%s %s: max abs error %.3g (want <= %g), max KL %.3g (<= %g), top-1 %d/%d (>= %d)",
					tc.matmul, name, worst, tc.maxAbs, worstKL, tc.maxKL, top1, len(ids), len(ids)-1)
			}
		}
	}
}
