package model

import (
	"slices"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/weights"
)

func TestParseLayers(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		err  string
	}{
		{"0,1,-2,-1", []int{0, 1, -2, -1}, ""},
		{"0;-1", []int{0, -1}, ""},
		{" 3 , 4 ", []int{3, 4}, ""},
		{"", nil, ""},
		{"none", nil, ""},
		{"0,,1", nil, `"" is not an integer`},
		{"a", nil, `"a" is not an integer`},
		{"1,-1,1", nil, "layer 1 listed twice"},
	}
	for _, tt := range tests {
		got, err := ParseLayers(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseLayers(%q) = %v, %v; want an error containing %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ParseLayers(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestCacheSpecValidate(t *testing.T) {
	tests := []struct {
		spec CacheSpec
		err  string
	}{
		{CacheSpec{}, ""},
		{CacheSpec{K: "kakeya:b=3,rank=4", V: "int4", Boundary: []int{0, -1}, HotWindow: 64, Sinks: 4}, ""},
		{CacheSpec{K: "int8", Precondition: true}, ""},
		{CacheSpec{HotWindow: -1}, "must not be negative"},
		{CacheSpec{Sinks: -4}, "must not be negative"},
		{CacheSpec{Boundary: []int{1, 1}}, "boundary layer 1 listed twice"},
		{CacheSpec{K: "int5"}, `K codec: codec: unknown codec "int5"`},
		{CacheSpec{V: "int8:b=3"}, "V codec"},
		{CacheSpec{K: "kakeya:rank=x"}, "rank"},
		{CacheSpec{V: "int8", Precondition: true}, "K is uncompressed"},
	}
	for _, tt := range tests {
		err := tt.spec.Validate()
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%+v: Validate() = %v, want %q", tt.spec, err, tt.err)
		}
	}
}

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

// names lists each layer's codecs as "K|V" names ("-" for none).
func names(p kvcache.Policy, layers, kvHeads int) []string {
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
	cfg := &weights.Config{NumLayers: 5, NumKVHeads: 2, HeadDim: 4}
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
	tests := []struct {
		name string
		spec CacheSpec
		cal  *codec.Calibration
		want []string
		err  string
	}{
		{name: "uncompressed", spec: CacheSpec{HotWindow: 8}, want: []string{"-|-", "-|-", "-|-", "-|-", "-|-"}},
		{name: "kv int8", spec: CacheSpec{K: "int8", V: "int8"}, want: []string{"int8|int8", "int8|int8", "int8|int8", "int8|int8", "int8|int8"}},
		{name: "boundary", spec: CacheSpec{K: "int8", V: "int4", Boundary: []int{0, -1, 2}},
			want: []string{"bf16|bf16", "int8|int4", "bf16|bf16", "int8|int4", "bf16|bf16"}},
		{name: "k only", spec: CacheSpec{K: "bf16"}, want: []string{"bf16|-", "bf16|-", "bf16|-", "bf16|-", "bf16|-"}},
		{name: "precond", spec: CacheSpec{K: "int8", V: "int8", Boundary: []int{-5}, Precondition: true}, cal: cal,
			want: []string{"bf16|bf16", "pre+int8|int8", "pre+int8|int8", "pre+int8|int8", "pre+int8|int8"}},
		// A calibration is ignored when nothing is preconditioned.
		{name: "cal unused", spec: CacheSpec{V: "int8"}, cal: testCalibration(1, 1, 2), want: []string{"-|int8", "-|int8", "-|int8", "-|int8", "-|int8"}},
		{name: "boundary past the end", spec: CacheSpec{K: "int8", Boundary: []int{7}}, err: "boundary layer 7 outside a model of 5 layers"},
		{name: "boundary before the start", spec: CacheSpec{K: "int8", Boundary: []int{-6}}, err: "boundary layer -6 outside a model of 5 layers"},
		{name: "precond without calibration", spec: CacheSpec{K: "int8", Precondition: true}, err: "needs a calibration"},
		{name: "precond, K uncompressed", spec: CacheSpec{V: "int8", Precondition: true}, cal: cal, err: "K is uncompressed"},
		{name: "calibration of another model", spec: CacheSpec{K: "int8", Precondition: true}, cal: testCalibration(4, 2, 4),
			err: "calibration for \"test\" is for 4 layers x 2 kv heads x head_dim 4, model has 5 x 2 x 4"},
		{name: "missing factor", spec: CacheSpec{K: "int8", Precondition: true}, cal: noChol, err: "no Cholesky factor for layer 1 kv head 1"},
		{name: "bad codec", spec: CacheSpec{K: "kakeya:b=9"}, err: "K codec"},
		// Unwhitened keys keep the Gaussian codebook: the key codebook was
		// fitted to whitened ones.
		{name: "codebooks", spec: CacheSpec{K: "kakeya:b=2", V: "kakeya:b=2", Boundary: []int{0}, Codebooks: true}, cal: cal,
			want: []string{"bf16|bf16", kk + "|" + kk + "-cal", kk + "|" + kk + "-cal", kk + "|" + kk + "-cal", kk + "|" + kk + "-cal"}},
		{name: "codebooks, precond", spec: CacheSpec{K: "kakeya:b=2", V: "int8", Boundary: []int{0}, Precondition: true, Codebooks: true}, cal: cal,
			want: []string{"bf16|bf16", "pre+" + kk + "-cal|int8", "pre+" + kk + "-cal|int8", "pre+" + kk + "-cal|int8", "pre+" + kk + "-cal|int8"}},
		{name: "codebooks without calibration", spec: CacheSpec{V: "kakeya:b=2", Codebooks: true}, err: "codebooks need a calibration"},
		{name: "codebooks, nothing compressed", spec: CacheSpec{Codebooks: true}, cal: cal, err: "K and V are uncompressed"},
		{name: "codebook of other bits", spec: CacheSpec{V: "kakeya:b=3", Codebooks: true}, cal: cal, err: "no 3-bit codebook (it has [2]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPolicy(cfg, tt.spec, tt.cal)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := names(p, cfg.NumLayers, cfg.NumKVHeads); !slices.Equal(got, tt.want) {
				t.Errorf("codecs %v, want %v", got, tt.want)
			}
			if p.HotWindow != tt.spec.HotWindow || p.Sinks != tt.spec.Sinks {
				t.Errorf("hot %d sinks %d, want %d %d", p.HotWindow, p.Sinks, tt.spec.HotWindow, tt.spec.Sinks)
			}
			if tt.spec.Precondition && len(p.Layers[1].K) != cfg.NumKVHeads {
				t.Errorf("preconditioned layer has %d K codecs, want one per KV head", len(p.Layers[1].K))
			}
		})
	}
}

// A sequence given a policy must compute exactly what a model loaded with
// that policy computes, and a per-sequence block size what a model loaded
// with that block size computes.
func TestNewSequenceWith(t *testing.T) {
	dir := tinyModels(t)["llama3"]
	spec := CacheSpec{K: "int8", V: "int4", Boundary: []int{-1}, HotWindow: 8, Sinks: 2}
	plain := load(t, dir, Options{Threads: 2, BlockSize: 8})
	pol, err := plain.Policy(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := testIDs(60, plain.Config().VocabSize)
	for _, tc := range []struct {
		name  string
		block int // 0: the model's
		want  *Model
	}{
		{"same block size", 0, load(t, dir, Options{Threads: 2, BlockSize: 8, Cache: pol})},
		{"own block size", 16, load(t, dir, Options{Threads: 2, BlockSize: 16, Cache: pol})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := decode(t, tc.want, ids)
			s, err := plain.NewSequenceOpts(SequenceOptions{Cache: pol, BlockSize: tc.block})
			if tc.block == 0 {
				s, err = plain.NewSequenceWith(pol)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for p, id := range ids {
				got, err := s.Forward([]int{id}, false)
				if err != nil {
					t.Fatal(err)
				}
				if d := maxAbsDiff(got, want[p]); d != 0 {
					t.Fatalf("position %d: logits differ by %g from the model loaded with the policy", p, d)
				}
			}
			st := s.KVStats()
			if st.Compressed == 0 || st.CodecRatio() <= 1 {
				t.Errorf("KV stats %+v: want encoded blocks smaller than bf16", st)
			}
		})
	}
	// The model's own sequences stay uncompressed.
	s, err := plain.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Forward(ids, false); err != nil {
		t.Fatal(err)
	}
	if st := s.KVStats(); st.Compressed != 0 {
		t.Errorf("NewSequence after NewSequenceWith: %d compressed bytes, want 0", st.Compressed)
	}
	if _, err := plain.NewSequenceOpts(SequenceOptions{BlockSize: -1}); err == nil || !strings.Contains(err.Error(), "block size -1") {
		t.Errorf("block size -1: err = %v", err)
	}
	bad := kvcache.Policy{Layers: make([]kvcache.LayerCodecs, 3)}
	if _, err := plain.NewSequenceWith(bad); err == nil || !strings.Contains(err.Error(), "policy names 3 layers") {
		t.Errorf("policy for 3 layers on a 2-layer model: err = %v", err)
	}
}
