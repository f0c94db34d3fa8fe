package codec

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// A kernel that knows a block's bytes only through PCSettings (the layout
// of formats.h, CodeBit for where each code lies) decodes what
// KakeyaPC.Decode does: the settings say everything the bytes do not.
// Every block is at most MaxLen bytes, for any calibration of the rate,
// and CodeBytes is the codes section's length. The entropy-coded format
// has no settings (no kernel reads it).
func TestPCSettings(t *testing.T) {
	const d = 32
	rng := rand.New(rand.NewPCG(4, 5))
	blocks := pcBlocks(rng, 12, 64, d)
	st := pcStats(t, blocks, 64, d)
	for _, c := range []struct {
		rate    float64
		n       int
		uniform bool
	}{{0.5, 64, false}, {1.5, 64, false}, {2.5, 64, false}, {4, 64, true}, {6, 64, false}, {2.5, 24, false}, {2, 13, false}} {
		t.Run(fmt.Sprintf("r%g/n%d/uniform %v", c.rate, c.n, c.uniform), func(t *testing.T) {
			o := DefaultKakeyaPCOptions()
			o.Rate, o.Block, o.Uniform = c.rate, c.n, c.uniform
			k, err := NewKakeyaPC(o, st, nil)
			if err != nil {
				t.Fatal(err)
			}
			pc := k.Settings().PC
			if pc == nil {
				t.Fatal("no PCSettings")
			}
			m := len(pc.Stored)
			if len(pc.Basis) != m*d || len(pc.Widths) != m || len(pc.Mean) != d {
				t.Fatalf("%d stored components, %d basis values, %d widths, %d mean values", m, len(pc.Basis), len(pc.Widths), len(pc.Mean))
			}
			x := blocks[0][:c.n*d]
			enc, err := k.Encode(nil, x, c.n, d)
			if err != nil {
				t.Fatal(err)
			}
			if bound, ok := pc.MaxLen(c.n, d); ok != (c.n%8 == 0) || ok && len(enc) > bound {
				t.Errorf("block of %d bytes, MaxLen %d (%v)", len(enc), bound, ok)
			}
			f := k.Format()
			coded := pc.Coded()
			rowBits := 0
			for _, w := range coded {
				rowBits += w
			}
			l := f.Layout(&Vars{VarN: c.n, VarD: d, VarMeans: m, VarCoded: len(coded), VarRowBits: rowBits, VarCodeBytes: pc.CodeBytes(c.n)})
			if l.Size() != len(enc) || enc[3] != pc.Param || binary.LittleEndian.Uint16(enc[10:]) != pc.Tag {
				t.Fatalf("layout of %d bytes, block of %d; parameter byte %d, tag %#x; settings say %d, %#x", l.Size(), len(enc), enc[3], binary.LittleEndian.Uint16(enc[10:]), pc.Param, pc.Tag)
			}
			means, scales, codes := enc[l.Off(pcMeans):], enc[l.Off(pcScales):], enc[l.Off(pcCodes):]
			want := make([]float32, c.n*d)
			if err := k.Decode(want, enc, c.n, d); err != nil {
				t.Fatal(err)
			}
			for i := range c.n {
				row := make([]float64, d)
				for a := range d {
					row[a] = float64(pc.Mean[a])
				}
				ti := 0
				for kk, w := range pc.Widths {
					y := float64(getF16(means[2*kk:]))
					if w > 0 {
						bit := pc.CodeBit(ti, i, c.n)
						v := uint16(codes[bit>>3])
						if bit>>3+1 < len(codes) {
							v |= uint16(codes[bit>>3+1]) << 8
						}
						code := int(v>>(bit&7)) & (1<<w - 1)
						y += float64(getF16(scales[2*ti:])) * float64(pc.Levels[w][code])
						ti++
					}
					for a := range d {
						row[a] += y * float64(pc.Basis[kk*d+a])
					}
				}
				for a := range d {
					if g, w := row[a], float64(want[i*d+a]); math.Abs(g-w) > 1e-4*(1+math.Abs(w)) {
						t.Fatalf("row %d col %d: %v from the settings, %v decoded", i, a, g, w)
					}
				}
			}
		})
	}
	o := DefaultKakeyaPCOptions()
	o.Entropy = true
	k, err := NewKakeyaPC(o, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if k.Settings().PC != nil {
		t.Error("the entropy-coded format has PCSettings")
	}
}
