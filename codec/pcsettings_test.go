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
// and CodeBytes is the codes section's length. The entropy-coded format's
// settings hold its rANS tables, from which checkECSettings decodes.
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
	for _, uniform := range []bool{false, true} {
		for _, n := range []int{64, 13} {
			t.Run(fmt.Sprintf("entropy/n%d/uniform %v", n, uniform), func(t *testing.T) {
				o := DefaultKakeyaPCOptions()
				o.Entropy, o.Uniform, o.Block = true, uniform, n
				o.StreamLayout = 1 // what the settings describe to the CUDA kernel
				k, err := NewKakeyaPC(o, st, nil)
				if err != nil {
					t.Fatal(err)
				}
				checkECSettings(t, k, blocks[1][:n*d], n, d)
			})
		}
	}
}

// checkECSettings decodes a kakeya_pc_ec block of k knowing its bytes only
// through k's PCSettings (the rANS tables, the options' levels) and the
// format's layout and derived quantities, as the CUDA kernel does: 8
// lanes, each lane's refill word found by counting the lanes before it
// that need one, and compares the rows with KakeyaPC.Decode's.
func checkECSettings(t *testing.T, k *KakeyaPC, x []float32, n, d int) {
	t.Helper()
	pc := k.Settings().PC
	if pc == nil || !pc.Entropy || len(pc.RANS) != len(pc.Levels) {
		t.Fatalf("entropy-coded settings %+v", pc)
	}
	if _, ok := pc.MaxLen(n, d); ok {
		t.Error("MaxLen bounds an entropy-coded block")
	}
	enc, err := k.Encode(nil, x, n, d)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float32, n*d)
	if err := k.Decode(want, enc, n, d); err != nil {
		t.Fatal(err)
	}
	f := k.Format()
	var v Vars
	if err := f.ReadFields(enc, &v); err != nil {
		t.Fatal(err)
	}
	l := f.Layout(&v)
	lanes, scale, word := 0, 0, 0
	for _, q := range f.Derived {
		switch q.Name {
		case "lanes":
			lanes = q.Value.Eval(&v)
		case "scale_bits":
			scale = q.Value.Eval(&v)
		case "word_bits":
			word = q.Value.Eval(&v)
		}
	}
	m := len(pc.Stored)
	if l.Size() != len(enc) || v[VarMeans] != m || enc[3] != pc.Param || lanes != 8 {
		t.Fatalf("layout of %d bytes for a block of %d, %d means (settings %d), parameter %d (%d), %d lanes", l.Size(), len(enc), v[VarMeans], m, enc[3], pc.Param, lanes)
	}
	means, scales := enc[l.Off(pcMeans):], enc[l.Off(pcScales):]
	codes := enc[l.Off(pcCodes) : l.Off(pcCodes)+l.Len(pcCodes)]
	var opts []int // each coded component's option
	var idx []int  // and its stored index
	for kk, w := range pc.Widths {
		if w > 0 {
			opts, idx = append(opts, w), append(idx, kk)
		}
	}
	c := len(opts)
	if c != v[VarCoded] {
		t.Fatalf("%d coded components, the block says %d", c, v[VarCoded])
	}
	lat := make([]float64, m*n) // component kk of row i at kk*n+i
	for kk := range m {
		for i := range n {
			lat[kk*n+i] = float64(getF16(means[2*kk:]))
		}
	}
	x8 := make([]uint32, lanes)
	for i := range x8 {
		x8[i] = binary.LittleEndian.Uint32(codes[4*i:])
	}
	pos, mask := 4*lanes, uint32(1)<<scale-1
	for k0 := 0; k0 < c*n; k0 += lanes {
		need := make([]bool, lanes)
		for ln := range lanes {
			sym := k0 + ln
			if sym >= c*n {
				continue
			}
			ti, i := sym/n, sym%n
			tab := pc.RANS[opts[ti]]
			s := tab.Slot[x8[ln]&mask]
			lat[idx[ti]*n+i] += float64(getF16(scales[2*ti:])) * float64(pc.Levels[opts[ti]][s])
			x8[ln] = tab.Freq[s]*(x8[ln]>>scale) + x8[ln]&mask - tab.Start[s]
			need[ln] = x8[ln] < 1<<word
		}
		for ln := range lanes { // the words, in lane order
			if need[ln] {
				x8[ln] = x8[ln]<<word | uint32(binary.LittleEndian.Uint16(codes[pos:]))
				pos += 2
			}
		}
	}
	if pos != len(codes) {
		t.Errorf("read %d of the stream's %d bytes", pos, len(codes))
	}
	for i := range n {
		for a := range d {
			g := float64(pc.Mean[a])
			for kk := range m {
				g += lat[kk*n+i] * float64(pc.Basis[kk*d+a])
			}
			if w := float64(want[i*d+a]); math.Abs(g-w) > 1e-4*(1+math.Abs(w)) {
				t.Fatalf("row %d col %d: %v from the settings, %v decoded", i, a, g, w)
			}
		}
	}
}
