package calibrate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kernels/cpu"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/tokenizer"
	"github.com/kakeya-ai/kakeya/weights"
)

// invFreq returns the RoPE inverse frequencies of a head of dim d without
// rope_scaling, computed in float32 as Hugging Face (and package model) do.
func invFreq(d int, theta float64) []float32 {
	inv := make([]float32, d/2)
	base := float64(float32(theta))
	for i := range inv {
		inv[i] = 1 / float32(math.Pow(base, float64(float32(2*i)/float32(d))))
	}
	return inv
}

// ropeTables returns cos and sin of pos·inv for positions [0, n), d/2
// values per position, the angle in float32 as in the model.
func ropeTables(inv []float32, n int) (cos, sin []float32) {
	half := len(inv)
	cos, sin = make([]float32, n*half), make([]float32, n*half)
	for p := 0; p < n; p++ {
		for i, f := range inv {
			a := float64(float32(p) * f)
			cos[p*half+i] = float32(math.Cos(a))
			sin[p*half+i] = float32(math.Sin(a))
		}
	}
	return cos, sin
}

// randomSPD returns a random symmetric positive definite d x d matrix.
func randomSPD(r *rand.Rand, d int) []float64 {
	a := make([]float64, d*d)
	for i := range a {
		a[i] = r.NormFloat64()
	}
	cov := make([]float64, d*d)
	for i := 0; i < d; i++ {
		for j := 0; j < d; j++ {
			for k := 0; k < d; k++ {
				cov[i*d+j] += a[i*d+k] * a[j*d+k]
			}
		}
	}
	return cov
}

// TestRopeAverageBruteForce compares RopeAverage with the mean of R Σ Rᵀ
// built from explicit d x d rotation matrices, one offset at a time.
func TestRopeAverageBruteForce(t *testing.T) {
	for _, tc := range []struct {
		d     int
		theta float64
		span  int
	}{{8, 1e4, 1}, {8, 1e4, 37}, {16, 1e6, 200}, {64, 1e4, 64}} {
		r := rand.New(rand.NewPCG(uint64(tc.d), uint64(tc.span)))
		cov := randomSPD(r, tc.d)
		inv := invFreq(tc.d, tc.theta)
		got, err := RopeAverage(cov, tc.d, inv, tc.span)
		if err != nil {
			t.Fatal(err)
		}
		d, h := tc.d, tc.d/2
		want := make([]float64, d*d)
		rot := make([]float64, d*d)
		tmp := make([]float64, d*d)
		for delta := 0; delta < tc.span; delta++ {
			clear(rot)
			for a := 0; a < h; a++ {
				ang := float64(float32(delta) * inv[a])
				c, s := math.Cos(ang), math.Sin(ang)
				// x'_a = c x_a - s x_{a+h}; x'_{a+h} = s x_a + c x_{a+h}.
				rot[a*d+a], rot[a*d+a+h] = c, -s
				rot[(a+h)*d+a], rot[(a+h)*d+a+h] = s, c
			}
			clear(tmp)
			for i := 0; i < d; i++ { // tmp = R Σ
				for k := 0; k < d; k++ {
					for j := 0; j < d; j++ {
						tmp[i*d+j] += rot[i*d+k] * cov[k*d+j]
					}
				}
			}
			for i := 0; i < d; i++ { // want += tmp Rᵀ
				for j := 0; j < d; j++ {
					var s float64
					for k := 0; k < d; k++ {
						s += tmp[i*d+k] * rot[j*d+k]
					}
					want[i*d+j] += s / float64(tc.span)
				}
			}
		}
		for i := range want {
			if math.Abs(got[i]-want[i]) > 1e-9*(1+math.Abs(want[i])) {
				t.Fatalf("d=%d span=%d: [%d][%d] = %v, brute force %v", d, tc.span, i/d, i%d, got[i], want[i])
			}
		}
		if tc.span == 1 {
			for i := range cov {
				if math.Abs(got[i]-cov[i]) > 1e-12*(1+math.Abs(cov[i])) {
					t.Fatalf("span 1 (Δ = 0 only) changed [%d][%d]: %v -> %v", i/d, i%d, cov[i], got[i])
				}
			}
		}
	}
}

// TestRopeAverageIsAttentionError checks the convention against the RoPE
// kernel itself: for one query q and key error e, the mean over offsets of
// the squared post-RoPE score error equals eᵀ RopeAverage(q qᵀ) e.
func TestRopeAverageIsAttentionError(t *testing.T) {
	const d, span, pk = 16, 50, 3
	r := rand.New(rand.NewPCG(5, 6))
	q, e := make([]float32, d), make([]float32, d)
	for i := range q {
		q[i], e[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
	}
	inv := invFreq(d, 1e4)
	cos, sin := ropeTables(inv, pk+span)
	h := d / 2
	ek := slices.Clone(e)
	cpu.RoPE(ek, cos[pk*h:(pk+1)*h], sin[pk*h:(pk+1)*h])
	var want float64
	for delta := 0; delta < span; delta++ {
		pq := pk + delta
		qr := slices.Clone(q)
		cpu.RoPE(qr, cos[pq*h:(pq+1)*h], sin[pq*h:(pq+1)*h])
		var s float64
		for i := range qr {
			s += float64(qr[i]) * float64(ek[i])
		}
		want += s * s / span
	}
	outer := make([]float64, d*d)
	for i := range q {
		for j := range q {
			outer[i*d+j] = float64(q[i]) * float64(q[j])
		}
	}
	m, err := RopeAverage(outer, d, inv, span)
	if err != nil {
		t.Fatal(err)
	}
	var got float64
	for i := range e {
		for j := range e {
			got += float64(e[i]) * m[i*d+j] * float64(e[j])
		}
	}
	if math.Abs(got-want) > 1e-4*want {
		t.Fatalf("eᵀ M e = %v, mean squared score error through RoPE = %v", got, want)
	}
}

func TestRopeAverageErrors(t *testing.T) {
	inv := []float32{1, 0.1}
	for _, tc := range []struct {
		cov  []float64
		d    int
		inv  []float32
		span int
	}{
		{make([]float64, 16), 4, inv, 0},
		{make([]float64, 15), 4, inv, 5},
		{make([]float64, 9), 3, inv, 5},
		{make([]float64, 16), 4, []float32{1}, 5},
	} {
		if _, err := RopeAverage(tc.cov, tc.d, tc.inv, tc.span); err == nil {
			t.Errorf("d=%d len=%d inv=%d span=%d: no error", tc.d, len(tc.cov), len(tc.inv), tc.span)
		}
	}
}

// storiesIDs returns the tokens of the start of the TinyStories validation
// text and the stories260K directory.
func storiesIDs(t *testing.T, n int) ([]int, string) {
	t.Helper()
	dir := shareddata.File(t, "models", "stories260K")
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(shareddata.File(t, "data", "tinystories", "val.txt"))
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode(string(raw[:min(len(raw), 8*n)]), false)
	if len(ids) < n {
		t.Fatalf("%d tokens, want %d", len(ids), n)
	}
	return ids[:n], dir
}

// observedCov recomputes each (layer, kv head) query second moment with the
// Observe hook, independently of Run, over the same windows.
func observedCov(t *testing.T, dir string, ids []int, ctx int) (covs [][]float64, cfg *weights.Config) {
	t.Helper()
	var sums [][]float64
	var count []int
	var heads, kvh, d int
	cpu, err := cpubackend.NewMatMul(1, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	m, err := model.Load(dir, model.Options{Backend: cpu, Observe: func(layer, _, n int, q, _ []float32) {
		for r := 0; r < n; r++ {
			for h := 0; h < heads; h++ {
				i := layer*kvh + h/(heads/kvh)
				v := q[(r*heads+h)*d : (r*heads+h+1)*d]
				for a := range v {
					for b := range v {
						sums[i][a*d+b] += float64(v[a]) * float64(v[b])
					}
				}
				count[i]++
			}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cfg = m.Config()
	heads, kvh, d = cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim
	sums, count = make([][]float64, cfg.NumLayers*kvh), make([]int, cfg.NumLayers*kvh)
	for i := range sums {
		sums[i] = make([]float64, d*d)
	}
	for i := 0; i < len(ids); i += ctx - 1 {
		w := append([]int{cfg.BOSTokenID}, ids[i:min(len(ids), i+ctx-1)]...)
		s, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Forward(w, false); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	for i := range sums {
		for j := range sums[i] {
			sums[i][j] /= float64(count[i])
		}
	}
	return sums, cfg
}

func TestRunStories260K(t *testing.T) {
	const ctx, ridge = 100, 1e-2
	ids, dir := storiesIDs(t, 400)
	want, cfg := observedCov(t, dir, ids, ctx)
	d := cfg.HeadDim
	inv := invFreq(d, cfg.RopeTheta)
	for _, ropeAvg := range []bool{false, true} {
		opt := Options{Ctx: ctx, Ridge: ridge, RopeAveraged: ropeAvg, Bits: []int{2, 3}, Threads: 1}
		var progress []Progress
		opt.Progress = func(p Progress) { progress = append(progress, p) }
		cal, err := Run(context.Background(), dir, ids, opt)
		if err != nil {
			t.Fatal(err)
		}
		if err := cal.Validate(cfg.NumLayers, cfg.NumKVHeads, d); err != nil {
			t.Fatal(err)
		}
		// 400 ids in windows of BOS + 99: 5 windows, 405 tokens; one call
		// before the first window, then one after each.
		wantProgress := []Progress{{0, 5, 0, 405}, {1, 5, 100, 405}, {2, 5, 200, 405}, {3, 5, 300, 405}, {4, 5, 400, 405}, {5, 5, 405, 405}}
		if !slices.Equal(progress, wantProgress) {
			t.Errorf("progress calls %v, want %v", progress, wantProgress)
		}
		if cal.Meta["tokens"] != "405" || cal.Meta["rope_averaged"] != map[bool]string{false: "false", true: "true"}[ropeAvg] {
			t.Errorf("meta %v", cal.Meta)
		}
		for i, L := range cal.Chol {
			sigma := want[i]
			if ropeAvg {
				if sigma, err = RopeAverage(sigma, d, inv, ctx); err != nil {
					t.Fatal(err)
				}
			}
			tr := 0.0
			for a := 0; a < d; a++ {
				tr += sigma[a*d+a]
			}
			for a := 0; a < d; a++ {
				for b := 0; b < d; b++ {
					var llt float64
					for k := 0; k < d; k++ {
						llt += float64(L[a*d+k]) * float64(L[b*d+k])
					}
					w := sigma[a*d+b]
					if a == b {
						w += ridge * tr / float64(d)
					}
					if math.Abs(llt-w) > 1e-4*tr/float64(d) {
						t.Fatalf("rope-avg %v layer %d kv head %d: (L Lᵀ)[%d][%d] = %v, want Σ + ridge = %v",
							ropeAvg, i/cfg.NumKVHeads, i%cfg.NumKVHeads, a, b, llt, w)
					}
				}
			}
		}
		for _, bits := range []int{2, 3} {
			for _, cb := range []*codec.Codebook{cal.KCodebooks[bits], cal.VCodebooks[bits]} {
				if cb == nil || cb.Bits() != bits {
					t.Fatalf("codebook b%d missing or wrong: %v", bits, cb)
				}
				// Unit-variance residuals: the outer levels sit near the
				// Gaussian ones, not at some other scale.
				top := cb.Levels[len(cb.Levels)-1]
				if top < 0.8 || top > 4 {
					t.Errorf("codebook b%d top level %v for unit-variance residuals", bits, top)
				}
			}
		}
		again, err := Run(context.Background(), dir, ids, opt)
		if err != nil {
			t.Fatal(err)
		}
		for i := range cal.Chol {
			if !slices.Equal(cal.Chol[i], again.Chol[i]) {
				t.Fatalf("second run differs at layer %d kv head %d", i/cal.KVHeads, i%cal.KVHeads)
			}
		}
		if !slices.Equal(cal.KCodebooks[3].Levels, again.KCodebooks[3].Levels) {
			t.Fatal("second run trained another key codebook")
		}
	}
}

func TestRunErrors(t *testing.T) {
	ids, dir := storiesIDs(t, 50)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		dir  string
		ids  []int
		opt  Options
		want string
	}{
		{"no ids", dir, nil, Options{}, "tokens"},
		{"window too long", dir, ids, Options{Ctx: 10000}, "window"},
		{"bad bits", dir, ids, Options{Bits: []int{5}}, "bits"},
		{"missing model", filepath.Join(t.TempDir(), "nope"), ids, Options{}, "nope"},
		{"bad id", dir, []int{1, 2, 100000}, Options{}, "out of range"},
	} {
		if _, err := Run(ctx, tc.dir, tc.ids, tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Run(cctx, dir, ids, Options{}); err == nil {
		t.Error("cancelled context: no error")
	}
}

// TestRunTooFewTokens checks the up-front minimum for codebooks: one
// full KV block in some window. Exactly Need ids train them; one fewer is a
// TooFewTokensError that gives both counts, before any forward pass.
func TestRunTooFewTokens(t *testing.T) {
	ids, dir := storiesIDs(t, 64)
	for _, tc := range []struct {
		name string
		opt  Options
		need int
	}{
		{"defaults", Options{Bits: []int{2, 3, 4}}, 15},               // BOS + 15 = one 16-token block
		{"window of one block", Options{Ctx: 16, Bits: []int{2}}, 15}, // the same in a window of 16
		{"block of 32", Options{Ctx: 40, BlockSize: 32, Bits: []int{4}}, 31},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opt.Threads = 1
			var calls int
			tc.opt.Progress = func(Progress) { calls++ }
			_, err := Run(context.Background(), dir, ids[:tc.need-1], tc.opt)
			var few *TooFewTokensError
			if !errors.As(err, &few) {
				t.Fatalf("%d ids: error %v, want a TooFewTokensError", tc.need-1, err)
			}
			if few.Tokens != tc.need-1 || few.Need != tc.need || few.Blocks != 1 || !few.BOS || !slices.Equal(few.Bits, tc.opt.Bits) {
				t.Errorf("error %+v, want %d tokens of %d needed, 1 block", few, tc.need-1, tc.need)
			}
			for _, want := range []string{fmt.Sprintf("%d tokens", tc.need-1), fmt.Sprintf("at least %d", tc.need)} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if calls != 0 {
				t.Errorf("%d progress calls: the check must come before the run", calls)
			}
			cal, err := Run(context.Background(), dir, ids[:tc.need], tc.opt)
			if err != nil {
				t.Fatalf("%d ids: %v", tc.need, err)
			}
			for _, b := range tc.opt.Bits {
				if cal.KCodebooks[b] == nil || cal.VCodebooks[b] == nil {
					t.Errorf("%d ids: no %d-bit codebooks", tc.need, b)
				}
			}
		})
	}
	// MaxTokens counts: the error gives the tokens left.
	_, err := Run(context.Background(), dir, ids, Options{MaxTokens: 10, Bits: []int{2}, Threads: 1})
	if few := (*TooFewTokensError)(nil); !errors.As(err, &few) || few.Tokens != 10 {
		t.Errorf("MaxTokens 10: error %v, want a TooFewTokensError for 10 tokens", err)
	}
	// A window shorter than a block can never give samples.
	_, err = Run(context.Background(), dir, ids, Options{Ctx: 8, Bits: []int{2}, Threads: 1})
	if err == nil || !strings.Contains(err.Error(), "window of 8 tokens holds no full KV block of 16") {
		t.Errorf("ctx 8: error %v", err)
	}
	// Without codebooks two tokens do.
	if _, err := Run(context.Background(), dir, ids[:1], Options{Ctx: 8, Threads: 1}); err != nil {
		t.Errorf("no codebooks, BOS + 1 token: %v", err)
	}
}

func TestMinCalibTokens(t *testing.T) {
	for _, tc := range []struct {
		blocks, ctx, bs int
		bos             bool
		want            int
	}{
		{1, 512, 16, true, 15},
		{1, 512, 16, false, 16},
		{32, 512, 16, true, 511},      // one full window
		{33, 512, 16, true, 511 + 15}, // and BOS + 15 in the next
		{3, 40, 16, true, 39 + 15},    // 2 blocks per window of BOS + 39, then BOS + 15
		{3, 40, 16, false, 40 + 16},
	} {
		if got := minCalibTokens(tc.blocks, tc.ctx, tc.bs, tc.bos); got != tc.want {
			t.Errorf("minCalibTokens(%d, %d, %d, %v) = %d, want %d", tc.blocks, tc.ctx, tc.bs, tc.bos, got, tc.want)
		}
		// Cross-check against the windows themselves.
		ids := make([]int, tc.want)
		bos := -1
		if tc.bos {
			bos = 1
		}
		count := func(ids []int) (full int) {
			for _, w := range splitWindows(ids, tc.ctx, bos) {
				full += len(w) / tc.bs
			}
			return full
		}
		if full := count(ids); full < tc.blocks {
			t.Errorf("%d ids give %d full blocks, want %d", tc.want, full, tc.blocks)
		}
		if full := count(ids[:tc.want-1]); full >= tc.blocks {
			t.Errorf("%d ids already give %d full blocks", tc.want-1, full)
		}
	}
}

func TestCodebookBlocks(t *testing.T) {
	for _, tc := range []struct {
		name         string
		kakeya       *codec.KakeyaOptions
		bits         []int
		heads, bs, d int
		want         int
		err          bool
	}{
		// stories260K: 20 heads x 16 rows x 8 coordinates, no outlier fits
		// under a threshold of 3 (8/9 < 1).
		{name: "stories260K", bits: []int{2, 3, 4}, heads: 20, bs: 16, d: 8, want: 1},
		{name: "default outliers cap", bits: []int{4}, heads: 1, bs: 1, d: 2, want: 8}, // 2 per row
		{name: "pow2 padding", bits: []int{4}, heads: 1, bs: 1, d: 3, want: 4},         // p = 4
		{name: "low threshold", kakeya: &codec.KakeyaOptions{OutlierThreshold: 0.5, MaxOutliers: 1}, bits: []int{4}, heads: 1, bs: 1, d: 2, want: 16},
		{name: "big head", kakeya: &codec.KakeyaOptions{OutlierThreshold: 3, MaxOutliers: 4}, bits: []int{4}, heads: 1, bs: 1, d: 64, want: 1}, // 64-4 per row
		{name: "all exact", kakeya: &codec.KakeyaOptions{OutlierThreshold: 0.5, MaxOutliers: 4}, bits: []int{2}, heads: 1, bs: 1, d: 2, err: true},
	} {
		got, err := codebookBlocks(Options{Bits: tc.bits, BlockSize: tc.bs, Kakeya: tc.kakeya}, tc.heads, tc.d)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("%s: codebookBlocks = %d, %v; want %d (error %v)", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func TestSaveLoad(t *testing.T) {
	ids, dir := storiesIDs(t, 200)
	cal, err := Run(context.Background(), dir, ids, Options{Ctx: 64, Bits: []int{2, 4}, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	cal.Meta["data_sha256"] = "abc"
	path := filepath.Join(t.TempDir(), "calib.safetensors")
	if err := Save(path, cal); err != nil {
		t.Fatal(err)
	}
	cfg, err := weights.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Load(path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.Layers != cal.Layers || got.KVHeads != cal.KVHeads || got.HeadDim != cal.HeadDim || got.Model != "stories260K" {
		t.Fatalf("loaded %d x %d x %d %q", got.Layers, got.KVHeads, got.HeadDim, got.Model)
	}
	for i := range cal.Chol {
		if !slices.Equal(got.Chol[i], cal.Chol[i]) {
			t.Fatalf("factor %d differs after the round trip", i)
		}
	}
	for _, bits := range []int{2, 4} {
		if !slices.Equal(got.KCodebooks[bits].Levels, cal.KCodebooks[bits].Levels) ||
			!slices.Equal(got.VCodebooks[bits].Levels, cal.VCodebooks[bits].Levels) {
			t.Fatalf("codebooks b%d differ after the round trip", bits)
		}
	}
	for k, v := range cal.Meta {
		if got.Meta[k] != v {
			t.Errorf("meta %s = %q after the round trip, want %q", k, got.Meta[k], v)
		}
	}

	// Mismatches against other shapes name the file and the field.
	tiny := filepath.Join(t.TempDir(), "qwen2")
	if err := testmodel.Write(tiny, testmodel.Qwen2Tiny); err != nil {
		t.Fatal(err)
	}
	qcfg, err := weights.LoadConfig(tiny)
	if err != nil {
		t.Fatal(err)
	}
	kv, hd := *cfg, *cfg
	kv.NumKVHeads = 2
	hd.HeadDim = 16
	garbage := filepath.Join(t.TempDir(), "garbage.safetensors")
	if err := os.WriteFile(garbage, []byte("not a safetensors file at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	partial := *cal
	partial.Chol = slices.Clone(cal.Chol)
	partial.Chol[7] = nil
	partialPath := filepath.Join(t.TempDir(), "partial.safetensors")
	if err := Save(partialPath, &partial); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		path string
		cfg  *weights.Config
		want string
	}{
		{"qwen2 layers", path, qcfg, "has 5 layers, model has 2"},
		{"kv heads", path, &kv, "has 4 kv heads, model has 2"},
		{"head_dim", path, &hd, "has 8 head_dim, model has 16"},
		{"missing file", filepath.Join(t.TempDir(), "none.safetensors"), cfg, "none.safetensors"},
		{"not safetensors", garbage, cfg, "garbage.safetensors"},
		{"missing factor", partialPath, cfg, "no Cholesky factor for layer 1 kv head 3"},
	} {
		_, err := Load(tc.path, tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
		if err != nil && !strings.Contains(err.Error(), filepath.Base(tc.path)) {
			t.Errorf("%s: error %v does not name the file", tc.name, err)
		}
	}
	if err := Save(filepath.Join(t.TempDir(), "x"), &codec.Calibration{Layers: 1, KVHeads: 1, HeadDim: 2, Chol: [][]float32{{1, 0, 0, -1}}}); err == nil {
		t.Error("saving an invalid calibration: no error")
	}
}

// planWindows caps and cuts the ids, counts the tokens fed, spreads the
// codebook samples over every block with its stride, and refuses too few
// tokens for the codebooks before any forward pass.
func TestPlanWindows(t *testing.T) {
	ids := make([]int, 100)
	for i := range ids {
		ids[i] = 10 + i
	}
	const heads, d = 2, 8
	for _, tc := range []struct {
		name       string
		ids        []int
		o          Options
		bos        int
		wantLens   []int // window lengths
		wantTokens int
		wantStride int
		wantErr    string
		wantTooFew *TooFewTokensError
	}{
		{name: "no codebooks", ids: ids, o: Options{Ctx: 40, BlockSize: 16}, bos: 1,
			wantLens: []int{40, 40, 23}, wantTokens: 103, wantStride: 1},
		{name: "no BOS", ids: ids, o: Options{Ctx: 40, BlockSize: 16}, bos: -1,
			wantLens: []int{40, 40, 20}, wantTokens: 100, wantStride: 1},
		{name: "capped", ids: ids, o: Options{Ctx: 40, BlockSize: 16, MaxTokens: 50}, bos: 1,
			wantLens: []int{40, 12}, wantTokens: 52, wantStride: 1},
		// 2+2+1 full blocks of 2 heads, 16 rows of 8: 1280 values over 100 samples.
		{name: "sampled", ids: ids, o: Options{Ctx: 40, BlockSize: 16, Bits: []int{1}, CodebookSamples: 100}, bos: 1,
			wantLens: []int{40, 40, 23}, wantTokens: 103, wantStride: 13},
		{name: "every block", ids: ids, o: Options{Ctx: 40, BlockSize: 16, Bits: []int{1}, CodebookSamples: 1 << 20}, bos: 1,
			wantLens: []int{40, 40, 23}, wantTokens: 103, wantStride: 1},
		{name: "one token", ids: ids[:1], o: Options{Ctx: 40, BlockSize: 16}, bos: -1,
			wantErr: "calibrate: 1 tokens, want at least 2 per window"},
		{name: "no full block", ids: ids[:10], o: Options{Ctx: 40, BlockSize: 16, Bits: []int{1, 4}, CodebookSamples: 100}, bos: 1,
			wantTooFew: &TooFewTokensError{Tokens: 10, Bits: []int{1, 4}, BlockSize: 16, BOS: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := planWindows(tc.ids, tc.o, tc.bos, heads, d)
			switch {
			case tc.wantErr != "":
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			case tc.wantTooFew != nil:
				var tf *TooFewTokensError
				if !errors.As(err, &tf) {
					t.Fatalf("err = %v, want a TooFewTokensError", err)
				}
				need, err := codebookBlocks(tc.o, heads, d)
				if err != nil {
					t.Fatal(err)
				}
				want := *tc.wantTooFew
				want.Blocks, want.Need = need, minCalibTokens(need, tc.o.Ctx, tc.o.BlockSize, true)
				if !reflect.DeepEqual(*tf, want) {
					t.Errorf("got %+v, want %+v", *tf, want)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			var lens []int
			for _, w := range p.windows {
				lens = append(lens, len(w))
				if tc.bos >= 0 && w[0] != tc.bos {
					t.Errorf("window starts with %d, want BOS %d", w[0], tc.bos)
				}
			}
			if !slices.Equal(lens, tc.wantLens) || p.tokens != tc.wantTokens || p.stride != tc.wantStride {
				t.Errorf("windows %v, %d tokens, stride %d; want %v, %d, %d", lens, p.tokens, p.stride, tc.wantLens, tc.wantTokens, tc.wantStride)
			}
		})
	}
}

// TestRunPCA: the keys' mean and within-block variance (the trace of the
// within-block covariance, Σ Var) per layer and KV head agree with sums
// over the keys the Observe hook sees, independently of Run; the values'
// statistics are complete, and both survive Save and Load.
func TestRunPCA(t *testing.T) {
	const ctx, bs = 64, 16
	ids, dir := storiesIDs(t, 200)
	cal, err := Run(context.Background(), dir, ids, Options{Ctx: ctx, BlockSize: bs, PCA: true, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := weights.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	layers, kvh, d := cfg.NumLayers, cfg.NumKVHeads, cfg.HeadDim
	if err := cal.Validate(layers, kvh, d); err != nil {
		t.Fatal(err)
	}
	if len(cal.KPCA) != layers*kvh || len(cal.VPCA) != layers {
		t.Fatalf("%d key and %d value statistics", len(cal.KPCA), len(cal.VPCA))
	}
	// Independently: the keys of each window's full blocks, as Observe
	// sees them (before RoPE, as the cache stores them).
	keys := make([][]float32, layers) // one window's keys, position-major
	cpu, err := cpubackend.NewMatMul(1, "f32")
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	m, err := model.Load(dir, model.Options{Backend: cpu, Observe: func(layer, start, n int, _, k []float32) {
		need := (start + n) * kvh * d
		if len(keys[layer]) < need {
			keys[layer] = append(keys[layer], make([]float32, need-len(keys[layer]))...)
		}
		copy(keys[layer][start*kvh*d:], k[:n*kvh*d])
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	sum := make([][]float64, layers*kvh)
	within := make([]float64, layers*kvh)
	for i := range sum {
		sum[i] = make([]float64, d)
	}
	rows, blocks := 0, 0
	for _, w := range splitWindows(ids, ctx, cfg.BOSTokenID) {
		s, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Forward(w, false); err != nil {
			t.Fatal(err)
		}
		s.Close()
		full := len(w) / bs
		rows += full * bs
		blocks += full
		for l := 0; l < layers; l++ {
			for h := 0; h < kvh; h++ {
				i := l*kvh + h
				for b := 0; b < full; b++ {
					mean := make([]float64, d)
					for r := b * bs; r < (b+1)*bs; r++ {
						for a, v := range keys[l][(r*kvh+h)*d : (r*kvh+h+1)*d] {
							mean[a] += float64(v) / bs
							sum[i][a] += float64(v)
						}
					}
					for r := b * bs; r < (b+1)*bs; r++ {
						for a, v := range keys[l][(r*kvh+h)*d : (r*kvh+h+1)*d] {
							within[i] += (float64(v) - mean[a]) * (float64(v) - mean[a])
						}
					}
				}
			}
		}
	}
	if got := cal.Meta["pca_blocks"]; got != strconv.Itoa(blocks*kvh) {
		t.Errorf("meta pca_blocks %s, want %d blocks x %d kv heads", got, blocks, kvh)
	}
	for i, st := range cal.KPCA {
		var tr float64
		for j, v := range st.Var {
			tr += float64(v)
			if j > 0 && v > st.Var[j-1] {
				t.Errorf("layer %d kv head %d: variances not decreasing at %d", i/kvh, i%kvh, j)
			}
		}
		want := within[i] / float64(rows)
		if math.Abs(tr-want) > 1e-4*want {
			t.Errorf("layer %d kv head %d: Σ Var = %v, the keys' within-block variance is %v", i/kvh, i%kvh, tr, want)
		}
		for a := 0; a < d; a++ {
			if mu := sum[i][a] / float64(rows); math.Abs(float64(st.Mean[a])-mu) > 1e-5*(1+math.Abs(mu)) {
				t.Fatalf("layer %d kv head %d: mean[%d] = %v, want %v", i/kvh, i%kvh, a, st.Mean[a], mu)
			}
		}
	}
	path := filepath.Join(t.TempDir(), "pca.safetensors")
	if err := Save(path, cal); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cal.KPCA {
		for _, p := range [][2][]float32{{got.KPCA[i].Basis, cal.KPCA[i].Basis}, {got.KPCA[i].Between, cal.KPCA[i].Between}} {
			if !slices.Equal(p[0], p[1]) {
				t.Fatalf("key statistics %d differ after the round trip", i)
			}
		}
	}
	for l := range cal.VPCA {
		if !slices.Equal(got.VPCA[l].Var, cal.VPCA[l].Var) || !slices.Equal(got.VPCA[l].Mean, cal.VPCA[l].Mean) {
			t.Fatalf("value statistics %d differ after the round trip", l)
		}
	}
}
