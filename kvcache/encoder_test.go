package kvcache

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
)

// encodingStore is a host block store that encodes the parts of one codec
// itself (compute.PartEncoder), as the CUDA store does on the device, and
// counts how the cache encodes: by EncodePart or by SetEncoded.
type encodingStore struct {
	compute.BlockStore
	n, d      int
	own       string // the codec it encodes itself
	byEncoder []string
	bySet     []string
}

func (s *encodingStore) AttendsEncoded(dec compute.Decoder) bool {
	return s.BlockStore.(compute.EncodedAttention).AttendsEncoded(dec)
}

func (s *encodingStore) SetEncoded(p compute.Part, enc []byte, dec compute.Decoder) error {
	s.bySet = append(s.bySet, dec.Name())
	return s.BlockStore.SetEncoded(p, enc, dec)
}

func (s *encodingStore) EncodedLen(dec compute.Decoder) (int, bool) {
	if dec.Name() != s.own {
		return 0, false
	}
	enc, err := s.encode(nil, dec)
	return len(enc), err == nil
}

// encode encodes p's rows (or, without p, zeros) by dec.
func (s *encodingStore) encode(p compute.Part, dec compute.Decoder) ([]byte, error) {
	x := make([]float32, s.n*s.d)
	if p != nil {
		if err := s.BlockStore.Read(x, p); err != nil {
			return nil, err
		}
	}
	cd, ok := dec.(interface {
		Encode(dst []byte, x []float32, n, d int) ([]byte, error)
	})
	if !ok {
		return nil, fmt.Errorf("%s cannot encode", dec.Name())
	}
	return cd.Encode(nil, x, s.n, s.d)
}

func (s *encodingStore) EncodePart(p compute.Part, dec compute.Decoder) error {
	s.byEncoder = append(s.byEncoder, dec.Name())
	enc, err := s.encode(p, dec)
	if err != nil {
		return err
	}
	return s.BlockStore.SetEncoded(p, enc, dec)
}

// batchingStore is an encodingStore that also takes several parts at
// once (compute.PartsEncoder), recording each call's parts.
type batchingStore struct {
	*encodingStore
	calls []int
}

func (s *batchingStore) EncodeParts(ps []compute.Part, decs []compute.Decoder) error {
	s.calls = append(s.calls, len(ps))
	for i := range ps {
		if err := s.EncodePart(ps[i], decs[i]); err != nil {
			return err
		}
	}
	return nil
}

// A store that encodes a codec's parts itself is asked to (EncodePart),
// the others' parts go through the host (SetEncoded); the cache and a
// pool over that store count the same bytes, and read the same values,
// as over a store that encodes nothing itself. A store that takes several
// parts at once (compute.PartsEncoder) gets the parts each append of a
// layer fills in one call, the same bytes.
func TestPartEncoder(t *testing.T) {
	const layers, kvh, d, bs, tokens = 2, 2, 32, 4, 19
	policy := Policy{HotWindow: 4}
	for range layers {
		policy.Layers = append(policy.Layers, LayerCodecs{K: []codec.Codec{mustCodec(t, "int8")}, V: mustCodec(t, "int4")})
	}
	encoded := layers * kvh * ((tokens - 4) / bs) // parts per side
	for _, pooled := range []bool{false, true} {
		t.Run(fmt.Sprintf("pool %v", pooled), func(t *testing.T) {
			var reads [3][]float32
			var stats [3]Stats
			var pools [3]PoolStats
			for i, own := range []string{"", "int8", "int8"} {
				store := &encodingStore{BlockStore: backend.NewBlockStore(bs, d, false), n: bs, d: d, own: own}
				var bstore *batchingStore
				var st compute.BlockStore = store
				if i == 2 {
					bstore = &batchingStore{encodingStore: store}
					st = bstore
				}
				cfg := Config{Layers: layers, KVHeads: kvh, HeadDim: d, BlockSize: bs, MaxTokens: 64, Policy: policy, Store: st}
				var pool *Pool
				if pooled {
					var err error
					pool, err = NewPool(PoolConfig{Store: st, BlockSize: bs, HeadDim: d, Budget: 1 << 20})
					if err != nil {
						t.Fatal(err)
					}
					cfg.Store, cfg.Pool = nil, pool
				}
				c, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				if err := appendTokens(c, seq(tokens, 1), 0); err != nil {
					t.Fatal(err)
				}
				wantEnc, wantSet := []string(nil), slices.Repeat([]string{"int8", "int4"}, encoded)
				if own == "int8" {
					wantEnc, wantSet = slices.Repeat([]string{"int8"}, encoded), slices.Repeat([]string{"int4"}, encoded)
				}
				slices.Sort(wantSet)
				slices.Sort(store.bySet)
				if !slices.Equal(store.byEncoder, wantEnc) || !slices.Equal(store.bySet, wantSet) {
					t.Fatalf("store encoding %q: %d parts by EncodePart (%v), %d by SetEncoded; want %d and %d",
						own, len(store.byEncoder), store.byEncoder, len(store.bySet), len(wantEnc), len(wantSet))
				}
				if bstore != nil {
					// One call per layer's append: the keys' parts of every
					// block that left the hot window.
					if want := slices.Repeat([]int{encoded / layers}, layers); !slices.Equal(bstore.calls, want) {
						t.Fatalf("EncodeParts calls of %v parts, want %v", bstore.calls, want)
					}
				}
				x := make([]float32, bs*d)
				for l := range layers {
					for h := range kvh {
						for b := range tokens / bs {
							for kv := range 2 {
								if err := c.Read(x, l, h, b, kv); err != nil {
									t.Fatal(err)
								}
								reads[i] = append(reads[i], x...)
							}
						}
					}
				}
				stats[i] = c.Stats()
				if pool != nil {
					pools[i] = pool.Stats()
				}
			}
			if !slices.Equal(reads[0], reads[1]) || !slices.Equal(reads[0], reads[2]) {
				t.Errorf("blocks encoded by the store read back otherwise than the host's")
			}
			if !reflect.DeepEqual(stats[0], stats[1]) || !reflect.DeepEqual(stats[0], stats[2]) {
				t.Errorf("cache stats %+v and %+v (batched), over a store that encodes nothing %+v", stats[1], stats[2], stats[0])
			}
			if pooled && pools[2].Used != pools[1].Used {
				t.Errorf("pool stats %+v batched, %+v one by one", pools[2], pools[1])
			}
			if stats[1].Compressed == 0 {
				t.Errorf("no compressed bytes: %+v", stats[1])
			}
			if pooled && (pools[0].Used != pools[1].Used || pools[0].ByFormat["int8"] != pools[1].ByFormat["int8"] || pools[1].ByFormat["int8"] == 0) {
				t.Errorf("pool stats %+v, over a store that encodes nothing %+v", pools[1], pools[0])
			}
		})
	}
}

// HostEncoded names the layer sides a store that encodes parts itself
// leaves to the host (each block read back, encoded, copied in): the
// sides whose codec it cannot encode, keys named once per layer whatever
// the KV heads; none over a store that encodes nothing itself, where the
// host is the only way.
func TestHostEncoded(t *testing.T) {
	const kvh, d, bs = 2, 32, 4
	i8, i4 := mustCodec(t, "int8"), mustCodec(t, "int4")
	policy := Policy{HotWindow: 4, Layers: []LayerCodecs{
		{K: []codec.Codec{i8}, V: i8},
		{K: []codec.Codec{i8, i4}, V: nil}, // the second KV head's keys int4
		{},                                 // uncompressed
		{K: []codec.Codec{i4}, V: i4},
	}}
	for _, c := range []struct {
		name  string
		store compute.BlockStore
		want  []HostSide
	}{
		{"encodes int8", &encodingStore{BlockStore: backend.NewBlockStore(bs, d, false), n: bs, d: d, own: "int8"},
			[]HostSide{{Layer: 1, KV: 0, Codec: "int4"}, {Layer: 3, KV: 0, Codec: "int4"}, {Layer: 3, KV: 1, Codec: "int4"}}},
		{"encodes int4", &encodingStore{BlockStore: backend.NewBlockStore(bs, d, false), n: bs, d: d, own: "int4"},
			[]HostSide{{Layer: 0, KV: 0, Codec: "int8"}, {Layer: 0, KV: 1, Codec: "int8"}, {Layer: 1, KV: 0, Codec: "int8"}}},
		{"encodes nothing itself", backend.NewBlockStore(bs, d, false), nil},
	} {
		if got := policy.HostEncoded(kvh, c.store); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: HostEncoded = %+v, want %+v", c.name, got, c.want)
		}
	}
}
