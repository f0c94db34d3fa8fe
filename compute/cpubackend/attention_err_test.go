package cpubackend

import (
	"errors"
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
)

// errCorrupt is what brokenDecoder's Decode returns.
var errCorrupt = errors.New("corrupt block")

// brokenDecoder fails every decode, as a block whose bytes were corrupted.
type brokenDecoder struct{}

func (brokenDecoder) Name() string { return "broken" }

func (brokenDecoder) Decode([]float32, []byte, int, int) error { return errCorrupt }

// layer is one KV head's blocks as attention reads them.
type layer struct {
	n     int
	parts [][2]compute.Part
}

func (l *layer) Len() int                              { return l.n }
func (l *layer) Part(head, block, kv int) compute.Part { return l.parts[block][kv] }

// Attention over a block that does not decode fails, and the backend
// records the failure as compute's contract asks: Err returns it from then
// on, and a new attention is refused with it. Before it, Err is nil.
func TestAttentionFailureIsRecorded(t *testing.T) {
	const bs, d, blocks = 4, 8, 2
	b := New(1)
	defer b.Close()
	p := compute.AttentionParams{Heads: 1, KVHeads: 1, HeadDim: d, BlockSize: bs, MaxContext: bs * blocks}
	attn, err := b.NewAttention(p)
	if err != nil {
		t.Fatal(err)
	}
	store := b.NewBlockStore(bs, d, false)
	x := make([]float32, bs*d)
	for i := range x {
		x[i] = float32(i%7) / 7
	}
	kv := &layer{n: bs * blocks}
	for range blocks {
		var parts [2]compute.Part
		for i := range parts {
			if parts[i], err = store.NewPart(); err != nil {
				t.Fatal(err)
			}
			store.Write(parts[i], 0, compute.Wrap(x), d, bs)
		}
		kv.parts = append(kv.parts, parts)
	}
	// RoPE by angle 0 at every position.
	ones := make([]float32, bs*blocks*d/2)
	for i := range ones {
		ones[i] = 1
	}
	cos, sin := compute.Wrap(ones), compute.Wrap(make([]float32, len(ones)))
	out, q := b.Alloc(bs*blocks*d), compute.Wrap(append(append([]float32(nil), x...), x...))
	if err := attn.Forward(out, q, bs*blocks, 0, kv, cos, sin); err != nil {
		t.Fatalf("hot blocks: %v", err)
	}
	if err := b.Err(); err != nil {
		t.Fatalf("Err after a good forward: %v", err)
	}

	// The first block's values become bytes that no longer decode.
	if err := store.SetEncoded(kv.parts[0][1], []byte{1, 2, 3}, brokenDecoder{}); err != nil {
		t.Fatal(err)
	}
	if err := attn.Forward(out, q, bs*blocks, 0, kv, cos, sin); !errors.Is(err, errCorrupt) {
		t.Fatalf("Forward over a corrupt block returned %v, want %v", err, errCorrupt)
	}
	if err := b.Err(); !errors.Is(err, errCorrupt) {
		t.Errorf("Err = %v, want the attention's failure %v", err, errCorrupt)
	}
	if _, err := b.NewAttention(p); !errors.Is(err, errCorrupt) {
		t.Errorf("NewAttention after the failure returned %v, want %v", err, errCorrupt)
	}
}
