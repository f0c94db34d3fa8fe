package model

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
)

func TestCacheShape(t *testing.T) {
	m := load(t, tinyModels(t)["qwen3"], Options{Backend: cpuBackend(t, 1, ""), MaxContext: 96})
	c := m.Config()
	want := kvcache.Shape{Layers: c.NumLayers, KVHeads: c.NumKVHeads, HeadDim: m.headDim, MaxContext: 96}
	if got := m.CacheShape(); !reflect.DeepEqual(got, want) || got.HeadDim <= 0 {
		t.Errorf("CacheShape() = %+v, want %+v", got, want)
	}
}

// A sequence given a policy must compute exactly what a model loaded with
// that policy computes, and a per-sequence block size what a model loaded
// with that block size computes.
func TestNewSequenceWith(t *testing.T) {
	dir := tinyModels(t)["llama3"]
	spec := kvconfig.Spec{K: "int8", V: "int4", Boundary: "-1", BlockSize: 8, HotWindow: 8, Sinks: 2, CacheType: "f32"}
	plain := load(t, dir, Options{Backend: cpuBackend(t, 2, ""), BlockSize: 8})
	pol, _, err := kvplan.NewPolicy(spec, plain.CacheShape(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := testIDs(60, plain.Config().VocabSize)
	for _, tc := range []struct {
		name  string
		block int // 0: the model's
		want  *Model
	}{
		{"same block size", 0, load(t, dir, Options{Backend: cpuBackend(t, 2, ""), BlockSize: 8, Cache: pol})},
		{"own block size", 16, load(t, dir, Options{Backend: cpuBackend(t, 2, ""), BlockSize: 16, Cache: pol})},
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
