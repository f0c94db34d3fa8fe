package kvcache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	"github.com/kakeya-ai/kakeya/tensor"
)

// rawCodec stores float32 bits as they are: lossless, 4 bytes a value.
type rawCodec struct{}

func (rawCodec) Name() string { return "raw-f32" }

func (rawCodec) Encode(dst []byte, x []float32, n, d int) ([]byte, error) {
	for _, f := range x[:n*d] {
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(f))
	}
	return dst, nil
}

func (rawCodec) Decode(dst []float32, src []byte, n, d int) error {
	if len(src) != 4*n*d {
		return fmt.Errorf("raw-f32: %d bytes for %dx%d", len(src), n, d)
	}
	for i := range dst[:n*d] {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
	return nil
}

func TestAppendReadBack(t *testing.T) {
	const layers, kvh, d, total = 2, 3, 4, 37
	for _, tc := range []struct {
		name   string
		bs     int
		policy Policy
	}{
		{"hot bs1", 1, Policy{}},
		{"hot bs16", 16, Policy{}},
		{"raw bs4 window5 sinks3", 4, Policy{HotWindow: 5, Sinks: 3, Layers: []LayerCodecs{{K: []codec.Codec{rawCodec{}}, V: rawCodec{}}}}},
		{"raw bs8 K only per head", 8, Policy{Layers: []LayerCodecs{{}, {K: []codec.Codec{nil, rawCodec{}, rawCodec{}}}}}},
		{"bf16 hot bs4", 4, Policy{HotBF16: true}},
		{"bf16 hot, raw bs4 window5 sinks3", 4, Policy{HotBF16: true, HotWindow: 5, Sinks: 3, Layers: []LayerCodecs{{K: []codec.Codec{rawCodec{}}, V: rawCodec{}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{Layers: layers, KVHeads: kvh, HeadDim: d, BlockSize: tc.bs, MaxTokens: 64, Policy: tc.policy,
				Store: backend.NewBlockStore(tc.bs, d, tc.policy.HotBF16)})
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(1, 2))
			want := make([][]float32, layers)
			for l := range want {
				want[l] = make([]float32, 2*total*kvh*d)
				for i := range want[l] {
					want[l][i] = r.Float32()
				}
			}
			// A bf16 cache holds, and its codecs see, the values rounded.
			stored := want
			if tc.policy.HotBF16 {
				stored = make([][]float32, layers)
				for l := range want {
					stored[l] = make([]float32, len(want[l]))
					for i, v := range want[l] {
						stored[l][i] = tensor.BF16ToF32(tensor.F32ToBF16(v))
					}
				}
			}
			row := kvh * d
			for round := 0; round < 2; round++ { // the second round reuses memory after Reset
				// Append in uneven chunks.
				for pos := 0; pos < total; {
					n := min(1+pos%5, total-pos)
					for l := 0; l < layers; l++ {
						k := want[l][pos*row : (pos+n)*row]
						v := want[l][(total+pos)*row : (total+pos+n)*row]
						if err := c.Append(l, compute.Wrap(k), compute.Wrap(v), n); err != nil {
							t.Fatal(err)
						}
					}
					pos += n
				}
				if c.Len() != total {
					t.Fatalf("Len = %d, want %d", c.Len(), total)
				}
				scratch := make([]float32, tc.bs*d)
				for l := 0; l < layers; l++ {
					for b := 0; b < c.NumBlocks(l); b++ {
						for h := 0; h < kvh; h++ {
							kb := scratch
							if err := c.Read(kb, l, h, b, 0); err != nil {
								t.Fatal(err)
							}
							for i := 0; i < tc.bs && b*tc.bs+i < total; i++ {
								pos := b*tc.bs + i
								for j := 0; j < d; j++ {
									if got, w := kb[i*d+j], stored[l][pos*row+h*d+j]; got != w {
										t.Fatalf("K layer %d pos %d head %d [%d] = %v, want %v", l, pos, h, j, got, w)
									}
								}
							}
							vb := scratch
							if err := c.Read(vb, l, h, b, 1); err != nil {
								t.Fatal(err)
							}
							for i := 0; i < tc.bs && b*tc.bs+i < total; i++ {
								pos := b*tc.bs + i
								if got, w := vb[i*d], stored[l][(total+pos)*row+h*d]; got != w {
									t.Fatalf("V layer %d pos %d head %d = %v, want %v", l, pos, h, got, w)
								}
							}
						}
					}
				}
				st := c.Stats()
				if want := int64(layers * total * 2 * kvh * d * 2); st.BF16 != want {
					t.Errorf("BF16 = %d, want %d", st.BF16, want)
				}
				// Every allocated part holds a whole block: 4 bytes a value
				// encoded by the raw codec or hot as float32, 2 hot as bf16.
				hotSize := int64(4)
				if tc.policy.HotBF16 {
					hotSize = 2
				}
				var bytes int64
				for l := 0; l < layers; l++ {
					for b := 0; b < c.NumBlocks(l); b++ {
						for h := 0; h < kvh; h++ {
							for kv := 0; kv < 2; kv++ {
								size := hotSize
								if c.Encoded(l, h, b, kv) {
									size = 4
								}
								bytes += size * int64(tc.bs*d)
							}
						}
					}
				}
				if st.Bytes() != bytes {
					t.Errorf("Bytes = %d, want %d", st.Bytes(), bytes)
				}
				c.Reset()
				if c.Len() != 0 || c.Stats().Bytes() != 0 {
					t.Errorf("after Reset: Len %d, Bytes %d", c.Len(), c.Stats().Bytes())
				}
			}
		})
	}
}

func TestEncodeSchedule(t *testing.T) {
	// Block size 4, hot window 5, 2 sinks: after 20 tokens blocks 1 and 2 are
	// encoded (block 0 holds sinks; blocks 3, 4 overlap the newest 5 tokens).
	c, err := New(Config{Layers: 1, KVHeads: 1, HeadDim: 2, BlockSize: 4, MaxTokens: 32,
		Policy: Policy{HotWindow: 5, Sinks: 2, Layers: []LayerCodecs{{K: []codec.Codec{rawCodec{}}, V: rawCodec{}}}},
		Store:  backend.NewBlockStore(4, 2, false)})
	if err != nil {
		t.Fatal(err)
	}
	x := compute.Wrap(make([]float32, 2*20))
	if err := c.Append(0, x, x, 20); err != nil {
		t.Fatal(err)
	}
	for b, want := range []bool{false, true, true, false, false} {
		for kv := 0; kv < 2; kv++ {
			if got := c.Encoded(0, 0, b, kv); got != want {
				t.Errorf("block %d kv %d encoded = %v, want %v", b, kv, got, want)
			}
		}
	}
	st := c.Stats().Layers[0]
	if st.KCompressed != 2*4*2*4 || st.KHot != 3*4*2*4 {
		t.Errorf("K bytes: compressed %d hot %d", st.KCompressed, st.KHot)
	}
	// The raw codec keeps f32, twice bf16: codec ratio 0.5 over the two
	// encoded blocks (K and V), whatever the hot blocks hold.
	all := c.Stats()
	if all.CompressedBF16 != 2*2*4*2*2 || all.CodecRatio() != 0.5 {
		t.Errorf("encoded bf16 bytes %d, codec ratio %v; want 64, 0.5", all.CompressedBF16, all.CodecRatio())
	}
	c.Reset()
	if st := c.Stats(); st.CompressedBF16 != 0 || st.CodecRatio() != 0 {
		t.Errorf("after Reset: encoded bf16 bytes %d, codec ratio %v", st.CompressedBF16, st.CodecRatio())
	}
}

func TestErrors(t *testing.T) {
	store := backend.NewBlockStore(4, 2, false)
	if _, err := New(Config{Layers: 1, KVHeads: 2, HeadDim: 4, BlockSize: 0, MaxTokens: 8, Store: store}); err == nil {
		t.Error("BlockSize 0: no error")
	}
	if _, err := New(Config{Layers: 1, KVHeads: 2, HeadDim: 4, BlockSize: 4, MaxTokens: 8}); err == nil || !strings.Contains(err.Error(), "no block store") {
		t.Errorf("no store: err = %v", err)
	}
	if _, err := New(Config{Layers: 1, KVHeads: 2, HeadDim: 4, BlockSize: 4, MaxTokens: 8, Store: store,
		Policy: Policy{Layers: []LayerCodecs{{K: []codec.Codec{rawCodec{}, rawCodec{}, rawCodec{}}}}}}); err == nil {
		t.Error("3 K codecs for 2 heads: no error")
	}
	c, err := New(Config{Layers: 1, KVHeads: 1, HeadDim: 2, BlockSize: 4, MaxTokens: 8, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	x := compute.Wrap(make([]float32, 2*9))
	if err := c.Append(0, x, x, 9); !errors.Is(err, ErrFull) {
		t.Errorf("overflow: err = %v, want ErrFull", err)
	}
	if err := c.Append(0, x.Slice(0, 3), x, 2); err == nil {
		t.Error("short K: no error")
	}
}

// A store whose backend does not attend over encoded blocks keeps them
// hot: the cache still runs its schedule, but nothing is encoded.
func TestStoreWithoutEncodedAttention(t *testing.T) {
	c, err := New(Config{Layers: 1, KVHeads: 1, HeadDim: 2, BlockSize: 4, MaxTokens: 32,
		Policy: Policy{Layers: []LayerCodecs{{K: []codec.Codec{rawCodec{}}, V: rawCodec{}}}},
		Store:  plainStore{backend.NewBlockStore(4, 2, false)}})
	if err != nil {
		t.Fatal(err)
	}
	x := compute.Wrap(make([]float32, 2*20))
	if err := c.Append(0, x, x, 20); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Compressed != 0 || st.Hot != 5*2*4*2*4 {
		t.Errorf("stats %+v: want every block hot", st)
	}
}

// plainStore hides the store's EncodedAttention.
type plainStore struct{ compute.BlockStore }

// backend provides the block stores of these tests.
var backend = cpubackend.New(1)

// A store that refuses a part (a pool out of budget) fails Append with its
// error; the blocks made so far go back to it.
func TestStoreOutOfRoom(t *testing.T) {
	st := &budgetStore{BlockStore: backend.NewBlockStore(4, 2, false), left: 5}
	c, err := New(Config{Layers: 1, KVHeads: 2, HeadDim: 2, BlockSize: 4, MaxTokens: 32, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	x := compute.Wrap(make([]float32, 4*12))
	// The first block takes 4 parts (2 heads x K, V); the second gets 1.
	err = c.Append(0, x, x, 8)
	if err == nil || !strings.Contains(err.Error(), "layer 0 block 1: out of budget") {
		t.Fatalf("err = %v", err)
	}
	if st.live != 4 || c.NumBlocks(0) != 1 || c.Len() != 4 {
		t.Errorf("%d live parts, %d blocks, %d tokens; want 4, 1, 4", st.live, c.NumBlocks(0), c.Len())
	}
	c.Reset()
	if st.live != 0 {
		t.Errorf("after Reset %d parts live", st.live)
	}
}

// budgetStore hands out at most left parts.
type budgetStore struct {
	compute.BlockStore
	left, live int
}

func (s *budgetStore) NewPart() (compute.Part, error) {
	if s.left == 0 {
		return nil, errors.New("out of budget")
	}
	s.left--
	s.live++
	return s.BlockStore.NewPart()
}

func (s *budgetStore) Release(p compute.Part) {
	s.live--
	s.BlockStore.Release(p)
}

// Stats counts the bytes the store really holds: a block the store
// declines (no EncodedAttention) or keeps hot with its decoded values
// (compute.HotDecoded, as the CUDA store does for codecs its kernels cannot
// read) is hot, only codec bytes the store keeps are compressed.
func TestStatsCountHeldBytes(t *testing.T) {
	const bs, d, tokens = 4, 2, 20
	const blocks, hotPart, rawPart = tokens / bs, 2 * bs * d, 4 * bs * d // bf16 hot, raw-f32 encoded
	for _, tc := range []struct {
		name            string
		store           compute.BlockStore
		hot, compressed int64
	}{
		{"cpu", backend.NewBlockStore(bs, d, true), 0, 2 * blocks * rawPart},
		{"no EncodedAttention", plainStore{backend.NewBlockStore(bs, d, true)}, 2 * blocks * hotPart, 0},
		{"hot decoded", &decodedStore{BlockStore: backend.NewBlockStore(bs, d, true), n: bs, d: d}, 2 * blocks * hotPart, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{Layers: 1, KVHeads: 1, HeadDim: d, BlockSize: bs, MaxTokens: 32,
				Policy: Policy{HotBF16: true, Layers: []LayerCodecs{{K: []codec.Codec{rawCodec{}}, V: rawCodec{}}}},
				Store:  tc.store})
			if err != nil {
				t.Fatal(err)
			}
			x := make([]float32, tokens*d)
			for i := range x {
				x[i] = float32(i)
			}
			if err := c.Append(0, compute.Wrap(x), compute.Wrap(x), tokens); err != nil {
				t.Fatal(err)
			}
			st := c.Stats()
			var bf16 int64
			if tc.compressed > 0 {
				bf16 = 2 * blocks * hotPart
			}
			if st.Hot != tc.hot || st.Compressed != tc.compressed || st.CompressedBF16 != bf16 {
				t.Errorf("Hot %d, Compressed %d, CompressedBF16 %d; want %d, %d, %d", st.Hot, st.Compressed, st.CompressedBF16, tc.hot, tc.compressed, bf16)
			}
			if l := st.Layers[0]; l.KHot+l.VHot != st.Hot || l.KCompressed+l.VCompressed != st.Compressed || l.KHot != l.VHot {
				t.Errorf("layer stats %+v do not add up to %+v", l, st)
			}
			// Whatever the store holds, the values read back are the ones
			// written (raw-f32 is lossless; bf16 rounds nothing here).
			got := make([]float32, bs*d)
			for b := range blocks {
				if err := c.Read(got, 0, 0, b, 1); err != nil {
					t.Fatal(err)
				}
				for i, v := range got {
					if want := x[b*bs*d+i]; v != want {
						t.Fatalf("block %d value %d = %v, want %v", b, i, v, want)
					}
				}
			}
		})
	}
}

// decodedStore accepts every codec but keeps each block hot, holding its
// decoded values, as the CUDA store does for codecs its kernels cannot
// read.
type decodedStore struct {
	compute.BlockStore
	n, d int // a part's rows and their width
}

// decodedPart is a part of a decodedStore.
type decodedPart struct {
	compute.Part
	decoded bool
}

func (p *decodedPart) HotDecoded() bool { return p.decoded }

func (s *decodedStore) AttendsEncoded(compute.Decoder) bool { return true }

func (s *decodedStore) NewPart() (compute.Part, error) {
	p, err := s.BlockStore.NewPart()
	if err != nil {
		return nil, err
	}
	return &decodedPart{Part: p}, nil
}

func (s *decodedStore) Write(p compute.Part, row int, src compute.Buffer, stride, rows int) {
	s.BlockStore.Write(p.(*decodedPart).Part, row, src, stride, rows)
}

func (s *decodedStore) Read(dst []float32, p compute.Part) error {
	return s.BlockStore.Read(dst, p.(*decodedPart).Part)
}

// SetEncoded decodes enc into the part's hot rows.
func (s *decodedStore) SetEncoded(p compute.Part, enc []byte, dec compute.Decoder) error {
	dp := p.(*decodedPart)
	rows := make([]float32, s.n*s.d)
	if err := dec.Decode(rows, enc, s.n, s.d); err != nil {
		return err
	}
	s.BlockStore.Write(dp.Part, 0, compute.Wrap(rows), s.d, s.n)
	dp.decoded = true
	return nil
}

func (s *decodedStore) Release(p compute.Part) { s.BlockStore.Release(p.(*decodedPart).Part) }
