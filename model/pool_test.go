package model

import (
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/kvcache"
)

// A sequence that attaches a prefix cached in a pool by another sequence
// gives the logits of a cold prefill bit for bit, for plain and encoded
// blocks, and the pool holds nothing once both close and it is evicted.
func TestPoolPrefixReuseLogits(t *testing.T) {
	const bs = 4
	b := cpuBackend(t, 2, "")
	m := load(t, tinyModels(t)["qwen2"], Options{Backend: b, BlockSize: bs})
	vocab := m.Config().VocabSize
	plainLayers := make([]kvcache.LayerCodecs, m.Config().NumLayers)
	for i := range plainLayers {
		plainLayers[i] = kvcache.LayerCodecs{K: []codec.Codec{codec.Int8{}}, V: codec.Int8{}}
	}
	for _, tc := range []struct {
		name   string
		policy kvcache.Policy
		reused int
		batch  bool // the first sequence is fed by batched steps
	}{
		{"f32", kvcache.Policy{}, 32, false},
		{"bf16", kvcache.Policy{HotBF16: true}, 32, false},
		{"int8 window8 sinks4", kvcache.Policy{Layers: plainLayers, HotWindow: 8, Sinks: 4}, 28, false},
		// Batched steps register the blocks they fill as Forward does. (Only
		// uncompressed here: under a compressing policy, blocks written by
		// decode steps hold the writer's history, not a cold prefill's; see
		// Sequence.AttachPrefix.)
		{"f32 batched", kvcache.Policy{}, 32, true},
		{"bf16 batched", kvcache.Policy{HotBF16: true}, 32, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool, err := kvcache.NewPool(kvcache.PoolConfig{Store: b.NewBlockStore(bs, m.headDim, tc.policy.HotBF16),
				BlockSize: bs, HeadDim: m.headDim, HotBF16: tc.policy.HotBF16, Budget: 64 << 20})
			if err != nil {
				t.Fatal(err)
			}
			first := testIDs(40, vocab)
			prompt := append(append([]int(nil), first[:34]...), 3, 5, 7)
			a, err := m.NewSequenceOpts(SequenceOptions{Cache: tc.policy, Pool: pool})
			if err != nil {
				t.Fatal(err)
			}
			closeOther := func() {}
			if !tc.batch {
				if _, err := a.Forward(first, false); err != nil {
					t.Fatal(err)
				}
			} else {
				// A prefill step, then decode steps beside another
				// sequence: Batch.Forward registers the blocks too.
				bt, err := m.NewBatch(64)
				if err != nil {
					t.Fatal(err)
				}
				other, err := m.NewSequenceOpts(SequenceOptions{Cache: tc.policy, Pool: pool})
				if err != nil {
					t.Fatal(err)
				}
				// Closed before the pool is checked empty below.
				closeOther = other.Close
				if err := bt.Forward([]BatchItem{{Seq: a, IDs: first[:21]}, {Seq: other, IDs: first[30:33]}}); err != nil {
					t.Fatal(err)
				}
				for i := 21; i < len(first); i++ {
					if err := bt.Forward([]BatchItem{{Seq: a, IDs: first[i : i+1]}, {Seq: other, IDs: []int{1}}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			s, err := m.NewSequenceOpts(SequenceOptions{Cache: tc.policy, Pool: pool})
			if err != nil {
				t.Fatal(err)
			}
			r, err := s.AttachPrefix(prompt)
			if err != nil {
				t.Fatal(err)
			}
			if r != tc.reused {
				t.Fatalf("AttachPrefix reused %d tokens, want %d", r, tc.reused)
			}
			got, err := s.Forward(prompt[r:], false)
			if err != nil {
				t.Fatal(err)
			}
			cold, err := m.NewSequenceOpts(SequenceOptions{Cache: tc.policy})
			if err != nil {
				t.Fatal(err)
			}
			defer cold.Close()
			want, err := cold.Forward(prompt, false)
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("logit %d = %v after reusing %d tokens, %v cold", i, got[i], r, want[i])
				}
			}
			if gs, ws := s.KVStats(), cold.KVStats(); gs.Bytes() != ws.Bytes() || gs.Compressed != ws.Compressed {
				t.Errorf("KV stats %+v, cold %+v", gs, ws)
			}
			if len(tc.policy.Layers) > 0 && s.KVStats().Compressed == 0 {
				t.Error("no block encoded: the encoded case checks nothing")
			}
			a.Close()
			s.Close()
			closeOther()
			pool.Evict()
			if st := pool.Stats(); st.Used != 0 || st.Referenced != 0 {
				t.Errorf("after Close and Evict: %s, want empty", st)
			}
		})
	}
}
