package kvplan

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/internal/kvflags"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

// testCalibration returns a calibration whose Cholesky factors are 2*I.
func testCalibration(layers, kvHeads, d int) *codec.Calibration {
	cal := &codec.Calibration{Layers: layers, KVHeads: kvHeads, HeadDim: d, Model: "test"}
	for range layers * kvHeads {
		L := make([]float32, d*d)
		for i := range d {
			L[i*d+i] = 2
		}
		cal.Chol = append(cal.Chol, L)
	}
	return cal
}

// codecNames lists each layer's codecs as "K|V" names ("-" for none).
func codecNames(p kvcache.Policy, layers, kvHeads int) []string {
	var out []string
	for l := range layers {
		var ks []string
		for h := range kvHeads {
			k := "-"
			if c := p.KCodec(l, h); c != nil {
				k = c.Name()
			}
			if !slices.Contains(ks, k) {
				ks = append(ks, k)
			}
		}
		v := "-"
		if c := p.VCodec(l); c != nil {
			v = c.Name()
		}
		out = append(out, strings.Join(ks, "/")+"|"+v)
	}
	return out
}

func TestNewPolicy(t *testing.T) {
	shape := kvcache.Shape{Layers: 5, KVHeads: 2, HeadDim: 4, MaxContext: 512}
	cal := testCalibration(5, 2, 4)
	noChol := testCalibration(5, 2, 4)
	noChol.Chol[3] = nil // layer 1, head 1
	cb, err := codec.GaussianCodebook(2)
	if err != nil {
		t.Fatal(err)
	}
	cal.KCodebooks = map[int]*codec.Codebook{2: cb}
	cal.VCodebooks = map[int]*codec.Codebook{2: cb}
	const kk = "kakeya-b2-r4v0.95c4-o3x4"
	plain := []string{"-|-", "-|-", "-|-", "-|-", "-|-"}
	tests := []struct {
		name  string
		spec  kvconfig.Spec
		cal   *codec.Calibration
		shape *kvcache.Shape
		want  []string
		st    kvconfig.Settings
		err   string
	}{
		{name: "zero", spec: kvconfig.Spec{}, want: plain, st: kvconfig.Settings{BlockSize: 16, CacheType: "bf16"}},
		{name: "uncompressed ignores the cache settings", spec: kvconfig.Spec{HotWindow: 8, Boundary: "1", CacheType: "f32"}, want: plain,
			st: kvconfig.Settings{BlockSize: 16, CacheType: "f32"}},
		{name: "kv int8 at the defaults", spec: kvconfig.Spec{KV: "int8"},
			want: []string{"bf16|bf16", "int8|int8", "int8|int8", "int8|int8", "bf16|bf16"},
			st:   kvconfig.Settings{K: "int8", V: "int8", BlockSize: 64, HotWindow: 64, Boundary: []int{0, 4}, CacheType: "bf16"}},
		{name: "no boundary, no hot window", spec: kvconfig.Spec{KV: "int8", Boundary: "none", HotWindow: -1, BlockSize: 32},
			want: []string{"int8|int8", "int8|int8", "int8|int8", "int8|int8", "int8|int8"},
			st:   kvconfig.Settings{K: "int8", V: "int8", BlockSize: 32, CacheType: "bf16"}},
		{name: "boundary", spec: kvconfig.Spec{K: "int8", V: "int4", Boundary: "0,-1,2", HotWindow: 8, Sinks: 2},
			want: []string{"bf16|bf16", "int8|int4", "bf16|bf16", "int8|int4", "bf16|bf16"},
			st:   kvconfig.Settings{K: "int8", V: "int4", BlockSize: 64, HotWindow: 8, Sinks: 2, Boundary: []int{0, 2, 4}, CacheType: "bf16"}},
		{name: "k only", spec: kvconfig.Spec{K: "bf16", Boundary: "none"}, want: []string{"bf16|-", "bf16|-", "bf16|-", "bf16|-", "bf16|-"},
			st: kvconfig.Settings{K: "bf16", BlockSize: 64, HotWindow: 64, CacheType: "bf16"}},
		{name: "precond with a calibration by default", spec: kvconfig.Spec{KV: "int8", Boundary: "-5", Codebooks: kvconfig.Off}, cal: cal,
			want: []string{"bf16|bf16", "pre+int8|int8", "pre+int8|int8", "pre+int8|int8", "pre+int8|int8"},
			st:   kvconfig.Settings{K: "int8", V: "int8", BlockSize: 64, HotWindow: 64, Boundary: []int{0}, Precondition: true, CacheType: "bf16"}},
		{name: "precond off", spec: kvconfig.Spec{KV: "int8", Boundary: "none", Precondition: kvconfig.Off}, cal: cal,
			want: []string{"int8|int8", "int8|int8", "int8|int8", "int8|int8", "int8|int8"},
			st:   kvconfig.Settings{K: "int8", V: "int8", BlockSize: 64, HotWindow: 64, CacheType: "bf16"}},
		{name: "values only: nothing to precondition", spec: kvconfig.Spec{V: "int8", Boundary: "none"}, cal: cal,
			want: []string{"-|int8", "-|int8", "-|int8", "-|int8", "-|int8"},
			st:   kvconfig.Settings{V: "int8", BlockSize: 64, HotWindow: 64, CacheType: "bf16"}},
		{name: "block clamped to a short context", spec: kvconfig.Spec{KV: "int8", Boundary: "none"}, shape: &kvcache.Shape{Layers: 5, KVHeads: 2, HeadDim: 4, MaxContext: 48},
			want: []string{"int8|int8", "int8|int8", "int8|int8", "int8|int8", "int8|int8"},
			st:   kvconfig.Settings{K: "int8", V: "int8", BlockSize: 48, HotWindow: 48, CacheType: "bf16"}},
		{name: "block longer than the context", spec: kvconfig.Spec{KV: "int8", BlockSize: 1000000}, err: "--block-size 1000000 exceeds the context of 512 tokens"},
		{name: "boundary past the end", spec: kvconfig.Spec{K: "int8", Boundary: "7"}, err: `--boundary "7": layer 7 outside a model of 5 layers`},
		{name: "boundary before the start", spec: kvconfig.Spec{K: "int8", Boundary: "-6"}, err: "layer -6 outside a model of 5 layers"},
		{name: "precond without calibration", spec: kvconfig.Spec{K: "int8", Precondition: kvconfig.On}, err: "--precond needs a calibration"},
		{name: "precond, K uncompressed", spec: kvconfig.Spec{V: "int8", Precondition: kvconfig.On}, cal: cal, err: "keys are uncompressed"},
		{name: "calibration of another model", spec: kvconfig.Spec{K: "int8"}, cal: testCalibration(4, 2, 4),
			err: "calibration for \"test\" is for 4 layers x 2 kv heads x head_dim 4, model has 5 x 2 x 4"},
		{name: "missing factor", spec: kvconfig.Spec{K: "int8"}, cal: noChol, err: "no Cholesky factor for layer 1 kv head 1"},
		{name: "bad codec", spec: kvconfig.Spec{K: "kakeya-block:b=9"}, err: "--k-codec"},
		// Unwhitened keys keep the Gaussian codebook: the key codebook was
		// fitted to whitened ones.
		{name: "codebooks", spec: kvconfig.Spec{KV: "kakeya-block:b=2", Boundary: "0", Precondition: kvconfig.Off}, cal: cal,
			want: []string{"bf16|bf16", kk + "|" + kk + "-cal", kk + "|" + kk + "-cal", kk + "|" + kk + "-cal", kk + "|" + kk + "-cal"},
			st:   kvconfig.Settings{K: "kakeya-block:b=2", V: "kakeya-block:b=2", BlockSize: 64, HotWindow: 64, Boundary: []int{0}, Codebooks: true, CacheType: "bf16"}},
		{name: "codebooks, precond", spec: kvconfig.Spec{K: "kakeya-block:b=2", V: "int8", Boundary: "0"}, cal: cal,
			want: []string{"bf16|bf16", "pre+" + kk + "-cal|int8", "pre+" + kk + "-cal|int8", "pre+" + kk + "-cal|int8", "pre+" + kk + "-cal|int8"},
			st:   kvconfig.Settings{K: "kakeya-block:b=2", V: "int8", BlockSize: 64, HotWindow: 64, Boundary: []int{0}, Precondition: true, Codebooks: true, CacheType: "bf16"}},
		{name: "codebooks off", spec: kvconfig.Spec{K: "kakeya-block:b=2", V: "int8", Boundary: "0", Codebooks: kvconfig.Off}, cal: cal,
			want: []string{"bf16|bf16", "pre+" + kk + "|int8", "pre+" + kk + "|int8", "pre+" + kk + "|int8", "pre+" + kk + "|int8"},
			st:   kvconfig.Settings{K: "kakeya-block:b=2", V: "int8", BlockSize: 64, HotWindow: 64, Boundary: []int{0}, Precondition: true, CacheType: "bf16"}},
		// Auto codebooks skip a width the calibration lacks; asked for, it is an error.
		{name: "auto codebook of other bits", spec: kvconfig.Spec{V: "kakeya-block:b=3", Boundary: "none"}, cal: cal,
			want: []string{"-|kakeya-b3-r4v0.95c4-o3x4", "-|kakeya-b3-r4v0.95c4-o3x4", "-|kakeya-b3-r4v0.95c4-o3x4", "-|kakeya-b3-r4v0.95c4-o3x4", "-|kakeya-b3-r4v0.95c4-o3x4"},
			st:   kvconfig.Settings{V: "kakeya-block:b=3", BlockSize: 64, HotWindow: 64, CacheType: "bf16"}},
		{name: "codebook of other bits", spec: kvconfig.Spec{V: "kakeya-block:b=3", Codebooks: kvconfig.On}, cal: cal, err: "no 3-bit codebook (it has [2]"},
		{name: "codebooks without calibration", spec: kvconfig.Spec{V: "kakeya-block:b=2", Codebooks: kvconfig.On}, err: "--calib-codebooks needs a calibration"},
		// A per-layer plan: none stores bf16 blocks, as a boundary layer
		// does; keys coded by any codec are preconditioned, bf16 keys not.
		{name: "per-layer plan", spec: kvconfig.Spec{Layers: "none/none|int8/int4|kakeya-block:b=2/none|none/int8|int4/kakeya-block:b=2"}, cal: cal,
			want: []string{"bf16|bf16", "pre+int8|int4", "pre+" + kk + "-cal|bf16", "bf16|int8", "pre+int4|" + kk + "-cal"},
			st: kvconfig.Settings{BlockSize: 64, HotWindow: 64, Precondition: true, Codebooks: true, CacheType: "bf16",
				Layers: []kvconfig.LayerPlan{{K: "none", V: "none"}, {K: "int8", V: "int4"}, {K: "kakeya-block:b=2", V: "none"}, {K: "none", V: "int8"}, {K: "int4", V: "kakeya-block:b=2"}}}},
		{name: "per-layer plan, values only", spec: kvconfig.Spec{Layers: "none/int8|none/int8|none/int8|none/int8|none/int8"}, cal: cal,
			want: []string{"bf16|int8", "bf16|int8", "bf16|int8", "bf16|int8", "bf16|int8"},
			st: kvconfig.Settings{BlockSize: 64, HotWindow: 64, CacheType: "bf16",
				Layers: []kvconfig.LayerPlan{{K: "none", V: "int8"}, {K: "none", V: "int8"}, {K: "none", V: "int8"}, {K: "none", V: "int8"}, {K: "none", V: "int8"}}}},
		{name: "per-layer plan of another depth", spec: kvconfig.Spec{Layers: "none/int8|int8/int8"}, err: "--layer-codecs names 2 layers, the model has 5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := shape
			if tt.shape != nil {
				m = *tt.shape
			}
			p, st, err := NewPolicy(tt.spec, m, tt.cal)
			if tt.err != "" {
				if err == nil || !strings.Contains(kvflags.Error(err).Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := codecNames(p, m.Layers, m.KVHeads); !slices.Equal(got, tt.want) {
				t.Errorf("codecs %v, want %v", got, tt.want)
			}
			if st.String() != tt.st.String() || !slices.Equal(st.Boundary, tt.st.Boundary) {
				t.Errorf("settings %+v, want %+v", st, tt.st)
			}
			if p.HotWindow != st.HotWindow || p.Sinks != st.Sinks || p.HotBF16 != (st.CacheType == "bf16") {
				t.Errorf("policy hot %d sinks %d bf16 %v disagrees with settings %+v", p.HotWindow, p.Sinks, p.HotBF16, st)
			}
			if st.Precondition && len(p.Layers[1].K) != m.KVHeads {
				t.Errorf("preconditioned layer has %d K codecs, want one per KV head", len(p.Layers[1].K))
			}
		})
	}
}

// NewPolicy's settings carry the warning of Settings.NothingCompressed
// for the model's context.
func TestNewPolicyWarning(t *testing.T) {
	const msg = "nothing will be compressed: with --hot-window %d, --sinks %d and %d-token blocks the first block is encoded once a sequence holds %s, and sequences here hold at most %d; lower --hot-window or --sinks (or --block-size)"
	m := kvcache.Shape{Layers: 3, KVHeads: 2, HeadDim: 8, MaxContext: 256}
	for _, tt := range []struct {
		spec kvconfig.Spec
		want string
	}{
		{kvconfig.Spec{KV: "int8"}, ""},
		{kvconfig.Spec{}, ""},
		{kvconfig.Spec{KV: "int8", HotWindow: 192}, ""},
		{kvconfig.Spec{KV: "int8", HotWindow: 193}, fmt.Sprintf(msg, 193, 0, 64, "257 tokens", 256)},
		{kvconfig.Spec{KV: "int8", HotWindow: 1 << 20}, fmt.Sprintf(msg, 1<<20, 0, 64, "1048640 tokens", 256)},
		{kvconfig.Spec{KV: "int8", Sinks: 256}, fmt.Sprintf(msg, 64, 256, 64, "384 tokens", 256)},
		{kvconfig.Spec{KV: "int8", BlockSize: 256}, fmt.Sprintf(msg, 256, 0, 256, "512 tokens", 256)},
	} {
		_, st, err := NewPolicy(tt.spec, m, nil)
		if err != nil {
			t.Fatalf("%+v: %v", tt.spec, err)
		}
		got := ""
		if st.Warning != nil {
			got = kvflags.Error(st.Warning).Error()
		}
		if got != tt.want {
			t.Errorf("%+v: Warning %q\nwant %q", tt.spec, got, tt.want)
		}
	}
}

// FuzzNewPolicy checks that no valid parsed Spec makes NewPolicy panic,
// that its errors name a setting, and that it warns exactly when the hot
// window and sinks leave nothing to compress.
func FuzzNewPolicy(f *testing.F) {
	for _, s := range []string{
		"kv=int8", "k=kakeya-block:b=3,rank=4,v=int4,boundary=0;-1,block=64,hot=64,sinks=4,precond=1,cb=0",
		"kv-codec=kakeya,k-bits=2,v-bits=4,block-size=32,hot-window=0,calib-codebooks=1,cache-type=f32",
		"kv=int8,k=none,boundary=none", "k=int4:group=32,seed=7,v=int4-rot", "kv=int8,boundary=5",
		"kv=int8,hot=256", "kv=int8,sinks=300,block=16", "layers=int8/none|none/int4|int8/int8", "block=300",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		s, err := kvconfig.Parse(text)
		if err != nil || s.Validate() != nil {
			return
		}
		const ctx = 256
		_, st, err := NewPolicy(s, kvcache.Shape{Layers: 3, KVHeads: 2, HeadDim: 8, MaxContext: ctx}, nil)
		if err != nil {
			if !strings.Contains(kvflags.Error(err).Error(), "--") {
				t.Fatalf("NewPolicy(%+v): error %q names no setting", s, err)
			}
			return
		}
		// The warning is given exactly when no block is encoded within the
		// context.
		if first := st.FirstEncoded(); st.Compressed() && (st.Warning == nil) != (first <= ctx) {
			t.Fatalf("NewPolicy(%+v): warning %q with the first block encoded at %d tokens of %d", s, st.Warning, first, ctx)
		}
	})
}

// Build works from what Check read: it does not read the Spec's text
// again, so the codecs it builds are Check's whatever the text says now.
func TestBuildFromChecked(t *testing.T) {
	c, err := kvconfig.Spec{K: "int8", V: "int4", Boundary: "1"}.Check()
	if err != nil {
		t.Fatal(err)
	}
	c.Spec.K, c.Spec.V, c.Spec.Boundary = "not a codec", "nor this", "x"
	m := kvcache.Shape{Layers: 3, KVHeads: 2, HeadDim: 8, MaxContext: 256}
	p, st, err := Build(c, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := codecNames(p, m.Layers, m.KVHeads), []string{"int8|int4", "bf16|bf16", "int8|int4"}; !slices.Equal(got, want) {
		t.Errorf("codecs %v, want %v", got, want)
	}
	if st.K != "int8" || st.V != "int4" || !slices.Equal(st.Boundary, []int{1}) {
		t.Errorf("settings %+v, want k=int8 v=int4 boundary [1]", st)
	}
}

// pcCalibration adds to cal principal components along the coordinate
// axes whose variances differ by layer, so each layer's allocation does.
func pcCalibration(cal *codec.Calibration) {
	d := cal.HeadDim
	stats := func(scale float32) *codec.PCAStats {
		st := &codec.PCAStats{Mean: make([]float32, d), Basis: make([]float32, d*d), Var: make([]float32, d), Between: make([]float32, d)}
		for j := range d {
			st.Basis[j*d+j] = 1
			st.Var[j] = scale / float32(1+j*j)
		}
		return st
	}
	for i := range cal.Layers * cal.KVHeads {
		cal.KPCA = append(cal.KPCA, stats(float32(1+i)))
	}
	for l := range cal.Layers {
		cal.VPCA = append(cal.VPCA, stats(float32(1+l)))
	}
}

// TestKakeyaPCPolicy: kakeya-pc builds one value codec per layer and one
// key codec per layer and KV head from the calibration's statistics, never
// whitens its keys, weighs them by the queries with qw, and needs a
// calibration with principal components; kvtc (the same codec, uniform
// and entropy coded) is built alike.
func TestKakeyaPCPolicy(t *testing.T) {
	const layers, kvHeads, d = 3, 2, 8
	m := kvcache.Shape{Layers: layers, KVHeads: kvHeads, HeadDim: d, MaxContext: 256}
	cal := testCalibration(layers, kvHeads, d)
	// Queries only along the last axis of layer 0 head 0: with qw its keys'
	// bits go there.
	for i := range d * d {
		cal.Chol[0][i] = 0
	}
	for i := range d {
		cal.Chol[0][i*d+i] = 1e-3
	}
	cal.Chol[0][d*d-1] = 10
	pcCalibration(cal)
	for _, tc := range []struct {
		name string
		qw   bool
	}{{"kakeya-pc", false}, {"kakeya-pc", true}, {"kvtc", false}, {"kvtc", true}} {
		qw := tc.qw
		spec := kvconfig.Spec{KV: fmt.Sprintf("%s:rate=3,block=16,qw=%v", tc.name, qw), Boundary: "none", BlockSize: 16}
		p, st, err := NewPolicy(spec, m, cal)
		if err != nil {
			t.Fatal(err)
		}
		if st.Precondition {
			t.Error("kakeya-pc keys preconditioned")
		}
		var allocs [][]int
		for l := range layers {
			v, ok := p.VCodec(l).(*codec.KakeyaPC)
			if !ok || !v.Calibrated() {
				t.Fatalf("layer %d value codec %T", l, p.VCodec(l))
			}
			if o := v.Options(); o.Entropy != (tc.name == "kvtc") || o.Uniform != (tc.name == "kvtc") {
				t.Errorf("%s: layer %d value codec options %+v", tc.name, l, o)
			}
			allocs = append(allocs, v.Allocation())
			for h := range kvHeads {
				k, ok := p.KCodec(l, h).(*codec.KakeyaPC)
				if !ok || !k.Calibrated() {
					t.Fatalf("layer %d kv head %d key codec %T", l, h, p.KCodec(l, h))
				}
				allocs = append(allocs, k.Allocation())
			}
		}
		// Layer 0's keys: by variance the first axis gets the most bits;
		// weighted by queries along the last axis only, the last does.
		k0 := allocs[1]
		if qw && !(k0[d-1] > k0[0]) || !qw && !(k0[0] > k0[d-1]) {
			t.Errorf("%s qw=%v: layer 0 head 0 key allocation %v", tc.name, qw, k0)
		}
		// The statistics differ only in scale, and so do the allocations'
		// inputs: the codecs are built per layer side, each its own.
		if p.VCodec(0) == p.VCodec(1) || p.KCodec(0, 0) == p.KCodec(0, 1) {
			t.Error("layer sides share one codec")
		}
	}
	for _, c := range []*codec.Calibration{nil, testCalibration(layers, kvHeads, d)} {
		_, _, err := NewPolicy(kvconfig.Spec{KV: "kakeya-pc", Boundary: "none"}, m, c)
		if err == nil || !strings.Contains(err.Error(), "calibrate --pca") {
			t.Errorf("calibration %v without principal components: %v", c != nil, err)
		}
	}
}

// TestPresetPolicy: the kakeya preset builds kakeya-pc at the preset's rates
// (keys 1.3, values 2.5) on every layer, the keys capped at a quarter of the head dimension's
// components (2 of 8 here) in codes of at most 5 bits and the values not, its settings naming the preset and both sides' codecs; it needs a calibration
// with principal components (the engine makes one when none is given), and
// NeedsPCA says so, with the block size to measure them over.
func TestPresetPolicy(t *testing.T) {
	const layers, kvHeads, d = 3, 2, 8
	m := kvcache.Shape{Layers: layers, KVHeads: kvHeads, HeadDim: d, MaxContext: 256}
	cal := testCalibration(layers, kvHeads, d)
	pcCalibration(cal)
	p, st, err := NewPolicy(kvconfig.Spec{KV: "kakeya"}, m, cal)
	if err != nil {
		t.Fatal(err)
	}
	if st.K != kvconfig.PresetKCodec || st.V != kvconfig.PresetVCodec || st.BlockSize != 64 || st.HotWindow != 32 ||
		len(st.Boundary) != 0 || st.Preset != kvconfig.PresetName || st.Precondition {
		t.Errorf("preset settings %+v", st)
	}
	for l := range layers {
		for h := range kvHeads {
			if k, ok := p.KCodec(l, h).(*codec.KakeyaPC); !ok || k.Options().Rate != 1.3 || k.Options().CodedFrac != 0.25 || k.Options().MaxBits != 5 ||
				len(k.Settings().PC.Coded()) > d/4 || slices.Max(k.Settings().PC.Coded()) > 5 {
				t.Errorf("layer %d head %d key codec %T, want kakeya-pc at rate 1.3 coding at most %d components (codedfrac=0.25) in at most 5 bits", l, h, p.KCodec(l, h), d/4)
			}
		}
		if v, ok := p.VCodec(l).(*codec.KakeyaPC); !ok || v.Options().Rate != 2.5 || v.Options().MaxCoded != 0 || v.Options().CodedFrac != 0 || v.Options().MaxBits != 6 {
			t.Errorf("layer %d value codec %T, want kakeya-pc at rate 2.5, uncapped", l, p.VCodec(l))
		}
	}
	if !strings.HasPrefix(st.String(), "k=kakeya-pc:codedfrac=0.25,maxbits=5,rate=1.3 v=kakeya-pc:rate=2.5 ") {
		t.Errorf("settings line %q does not name both sides' codecs", st)
	}
	if _, _, err := NewPolicy(kvconfig.Spec{KV: "kakeya"}, m, nil); err == nil || !strings.Contains(err.Error(), "calibrate --pca") {
		t.Errorf("preset without a calibration: %v", err)
	}
	for _, tt := range []struct {
		spec    kvconfig.Spec
		maxCtx  int
		block   int
		need    bool
		errWant string
	}{
		{kvconfig.Spec{KV: "kakeya"}, 256, 64, true, ""},
		{kvconfig.Spec{KV: "kakeya", BlockSize: 32}, 256, 32, true, ""},
		{kvconfig.Spec{Layers: "int8/none|kvtc/int8"}, 256, 64, true, ""},
		{kvconfig.Spec{KV: "kakeya-block:b=3"}, 256, 0, false, ""},
		{kvconfig.Spec{}, 256, 0, false, ""},
		{kvconfig.Spec{KV: "kakeya"}, 48, 0, false, "Spec.BlockSize 64 exceeds the context of 48 tokens"},
	} {
		c, err := tt.spec.Check()
		if err != nil {
			t.Fatal(err)
		}
		block, need, err := NeedsPCA(c, tt.maxCtx)
		if tt.errWant != "" {
			if err == nil || !strings.Contains(err.Error(), tt.errWant) {
				t.Errorf("NeedsPCA(%+v, %d): %v, want an error containing %q", tt.spec, tt.maxCtx, err, tt.errWant)
			}
			continue
		}
		if err != nil || block != tt.block || need != tt.need {
			t.Errorf("NeedsPCA(%+v, %d) = %d, %v, %v; want %d, %v", tt.spec, tt.maxCtx, block, need, err, tt.block, tt.need)
		}
	}
}

// A model whose every layer slides (Mistral) keeps the codec plan: each
// layer codes, no layer is listed as kept hot, and the projection counts
// a layer's window of blocks, those past the hot window encoded.
func TestAllSlidingCoded(t *testing.T) {
	m := kvcache.Shape{Layers: 3, KVHeads: 1, HeadDim: 32, MaxContext: 4096, Windows: []int{64, 64, 64}}
	p, st, err := NewPolicy(kvconfig.Spec{KV: "int8", BlockSize: 16, HotWindow: 16, Boundary: "none"}, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	for l := range m.Layers {
		if p.VCodec(l) == nil || p.KCodec(l, 0) == nil {
			t.Errorf("layer %d: not coded", l)
		}
	}
	if len(st.Sliding) != 0 {
		t.Errorf("settings list sliding layers %v as hot", st.Sliding)
	}
	got, err := CacheBytes(p, m, 16, 4096)
	if err != nil {
		t.Fatal(err)
	}
	// Per layer and side: the window's 4 blocks (keys 4032..4095), of
	// which 3 left the hot window (int8: 16 + 16*32/32*34 = 560 bytes)
	// and one is hot (16*32*2 = 1024).
	if want := int64(3 * 2 * (3*560 + 1024)); got != want {
		t.Errorf("int8 cache of 4096 tokens: %d bytes, want %d", got, want)
	}
}

// Sliding layers keep their blocks hot whatever the codec: the codec is
// for the full layers, and the settings list the sliding ones; the
// projection counts the sliding layers' window.
func TestSlidingLayersHot(t *testing.T) {
	m := kvcache.Shape{Layers: 6, KVHeads: 1, HeadDim: 32, MaxContext: 4096, Windows: []int{64, 64, 0, 64, 64, 0}}
	p, st, err := NewPolicy(kvconfig.Spec{KV: "int8", Boundary: "none"}, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	for l := range m.Layers {
		coded := p.VCodec(l) != nil && p.KCodec(l, 0) != nil
		if coded != (m.Windows[l] == 0) {
			t.Errorf("layer %d (window %d): coded %t", l, m.Windows[l], coded)
		}
	}
	if !slices.Equal(st.Sliding, []int{0, 1, 3, 4}) {
		t.Errorf("settings list sliding layers %v", st.Sliding)
	}
	full, err := CacheBytes(kvcache.Policy{HotBF16: true}, kvcache.Shape{Layers: 6, KVHeads: 1, HeadDim: 32}, 16, 4096)
	if err != nil {
		t.Fatal(err)
	}
	slid, err := CacheBytes(kvcache.Policy{HotBF16: true}, m, 16, 4096)
	if err != nil {
		t.Fatal(err)
	}
	// Per layer and side 16*32*2 bytes a block: 256 blocks for a full
	// layer, SlidingBlocks(4096, 64, 16, 1) = 4 for a sliding one (keys
	// 4032..4095, which the next query, at 4096, still sees from 4033).
	if want := int64(2*256+4*4) * 2 * 16 * 32 * 2; slid != want || full != int64(6*256)*2*16*32*2 {
		t.Errorf("bf16 cache of 4096 tokens: %d bytes with windows (want %d), %d without", slid, want, full)
	}
}

// TestPCBlockFollowsCache: kakeya-pc and kvtc allocate for the cache's
// own block size unless the spec names block=, so a cache's bytes are
// those of its codecs written with block=<its block size> (what
// kakeya-eval project counts), and a spec's explicit block= is kept.
func TestPCBlockFollowsCache(t *testing.T) {
	const layers, kvHeads, d, tokens = 2, 2, 64, 1023
	m := kvcache.Shape{Layers: layers, KVHeads: kvHeads, HeadDim: d, MaxContext: 4096}
	cal := testCalibration(layers, kvHeads, d)
	pcCalibration(cal)
	withBlock := func(spec string, n int) string {
		name, params, _ := strings.Cut(spec, ":")
		return fmt.Sprintf("%s:block=%d,%s", name, n, params)
	}
	policy := func(k, v string, bs int) (kvcache.Policy, int64) {
		t.Helper()
		p, _, err := NewPolicy(kvconfig.Spec{K: k, V: v, BlockSize: bs, Boundary: "none"}, m, cal)
		if err != nil {
			t.Fatalf("%s / %s, blocks of %d: %v", k, v, bs, err)
		}
		n, err := CacheBytes(p, m, bs, tokens)
		if err != nil {
			t.Fatal(err)
		}
		return p, n
	}
	blocks := func(p kvcache.Policy) []int {
		var out []int
		for l := range layers {
			for h := range kvHeads {
				out = append(out, p.KCodec(l, h).(*codec.KakeyaPC).Options().Block)
			}
			out = append(out, p.VCodec(l).(*codec.KakeyaPC).Options().Block)
		}
		return out
	}
	for _, kv := range [][2]string{
		{kvconfig.PresetKCodec, kvconfig.PresetVCodec},
		{"kakeya-pc:rate=2.5", "kakeya-pc:rate=2.4,ec=true"},
		{"kvtc:rate=2", "kvtc:rate=2"},
	} {
		k, v := kv[0], kv[1]
		for _, bs := range []int{16, 32, 48, 64, 128} {
			p, got := policy(k, v, bs)
			for i, b := range blocks(p) {
				if b != bs {
					t.Errorf("%s / %s, blocks of %d: codec %d allocates for blocks of %d", k, v, bs, i, b)
				}
			}
			if _, want := policy(withBlock(k, bs), withBlock(v, bs), bs); got != want {
				t.Errorf("%s / %s, blocks of %d: %d bytes, with block=%d written %d", k, v, bs, got, bs, want)
			}
			p64, got64 := policy(withBlock(k, 64), withBlock(v, 64), bs)
			for i, b := range blocks(p64) {
				if b != 64 {
					t.Errorf("%s / %s with block=64, blocks of %d: codec %d allocates for blocks of %d", k, v, bs, i, b)
				}
			}
			// At another block size the allocation's budget moves: the
			// per-block means and scales are charged to other rows.
			if bs != 64 && got == got64 {
				t.Errorf("%s / %s, blocks of %d: %d bytes, the same as allocated for blocks of 64", k, v, bs, got)
			}
		}
	}
	// The preset at blocks of 32 (kv=kakeya, block 32): its codecs
	// allocate for 32.
	p, _, err := NewPolicy(kvconfig.Spec{KV: "kakeya", BlockSize: 32}, m, cal)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range blocks(p) {
		if b != 32 {
			t.Errorf("the preset at blocks of 32: codec %d allocates for blocks of %d", i, b)
		}
	}
}
