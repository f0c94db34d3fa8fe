package codec

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/kernels/cpu"
)

// TestKakeyaPCRuns: ScoreRun gives DecodeRotated and cpu.ScoreBlock of
// each block bit for bit, and AddWeightedRun AddWeighted's sums within
// rounding, for runs of 1 to 37 blocks (more than one kernel call's
// pcRunChunk) starting and ending inside blocks, fixed-width and entropy
// coded in both stream layouts; a corrupt block anywhere is an error, and
// AddWeightedRun's sums stay as they were.
func TestKakeyaPCRuns(t *testing.T) {
	const n, d, m = 64, 64, 3
	rng := rand.New(rand.NewPCG(9, 12))
	st := pcStats(t, pcBlocks(rng, 24, n, d), n, d)
	const most = 37
	x := pcBlocks(rand.New(rand.NewPCG(9, 13)), most, n, d)
	cos, sin := make([]float32, most*n*d/2), make([]float32, most*n*d/2)
	for i := range cos {
		cos[i], sin[i] = float32(math.Cos(0.01*float64(i))), float32(math.Sin(0.01*float64(i)))
	}
	lds := most * n
	q, w := make([]float32, m*d), make([]float32, m*lds)
	for i := range q {
		q[i] = float32(rng.NormFloat64())
	}
	for i := range w {
		w[i] = rng.Float32() / float32(lds/2) // rows summing to about 1, as probabilities do
	}
	for _, name := range []string{"fixed", "ec1", "ec2", "ec2r1.95", "coded8"} {
		o := DefaultKakeyaPCOptions()
		switch name {
		case "ec1", "ec2":
			o.Entropy, o.StreamLayout = true, int(name[2]-'0')
		case "ec2r1.95":
			// Rate 1.95, the entropy-coded rate kakeya-bench measures:
			// more components at 0.5 and 1 bit, whose middle level,
			// exactly zero, most of their rows take.
			o.Entropy, o.StreamLayout, o.Rate = true, 2, 1.95
		case "coded8":
			o.MaxCoded = 8
		}
		k, err := NewKakeyaPC(o, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		src := make([][]byte, most)
		for j := range src {
			if src[j], err = k.Encode(nil, x[j], n, d); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range []struct{ nb, r0, r1 int }{{1, 0, n}, {1, 5, 9}, {2, 63, 1}, {4, 10, 50}, {16, 0, n}, {17, 3, 60}, {37, 0, n}, {33, 1, 2}} {
			what := fmt.Sprintf("%s: %d blocks, rows %d to %d", name, tc.nb, tc.r0, tc.r1)
			run := src[:tc.nb]
			rows := func(j int) (int, int) {
				lo, hi := 0, n
				if j == 0 {
					lo = tc.r0
				}
				if j == tc.nb-1 {
					hi = tc.r1
				}
				return lo, hi
			}
			// Keys: bit for bit, with and without the blocks checked
			// beforehand (the odd runs).
			checked := tc.nb%2 == 1
			got, want := make([]float32, m*lds), make([]float32, m*lds)
			if err := k.ScoreRun(got, lds, q, m, run, n, d, cos, sin, 0.125, tc.r0, tc.r1, checked, src); err != nil { // src: blocks to prefetch, never read
				t.Fatalf("%s: %v", what, err)
			}
			rot := make([]float32, n*d)
			for j, b := range run {
				lo, hi := rows(j)
				if err := k.DecodeRotated(rot, b, n, d, cos[j*n*d/2:], sin[j*n*d/2:]); err != nil {
					t.Fatal(err)
				}
				cpu.ScoreBlock(want[j*n+lo:], lds, q, m, rot[lo*d:hi*d], hi-lo, d, 0.125)
			}
			if !bitsEqual(got, want) {
				t.Fatalf("%s: ScoreRun differs from the blocks' scores", what)
			}
			// Values: within rounding.
			sum, ref := make([]float32, m*d), make([]float32, m*d)
			for i := range sum {
				sum[i] = float32(i % 7)
				ref[i] = sum[i]
			}
			if err := k.AddWeightedRun(sum, m, w, lds, run, n, d, tc.r0, tc.r1, checked); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			for j, b := range run {
				lo, hi := rows(j)
				if err := k.AddWeighted(ref, m, w[j*n:], lds, b, n, d, lo, hi); err != nil {
					t.Fatal(err)
				}
			}
			for i := range ref {
				if diff := math.Abs(float64(sum[i] - ref[i])); !(diff <= 1e-5*(1+math.Abs(float64(ref[i])))) {
					t.Fatalf("%s: AddWeightedRun value %d = %v, block by block %v", what, i, sum[i], ref[i])
				}
			}
			// A corrupt block: an error, the sums untouched.
			if tc.nb < 4 {
				continue
			}
			for _, j := range []int{0, tc.nb / 2, tc.nb - 1} {
				bad := make([][]byte, tc.nb)
				copy(bad, run)
				bad[j] = append([]byte(nil), run[j]...)
				bad[j][len(bad[j])-3] ^= 0x40
				before := append([]float32(nil), sum...)
				if err := k.AddWeightedRun(sum, m, w, lds, bad, n, d, tc.r0, tc.r1, false); err == nil || !bitsEqual(sum, before) {
					t.Fatalf("%s: corrupt block %d: %v, sums changed %v", what, j, err, !bitsEqual(sum, before))
				}
				if err := k.ScoreRun(got, lds, q, m, bad, n, d, cos, sin, 0.125, tc.r0, tc.r1, false, nil); err == nil || !strings.Contains(err.Error(), "kakeya-pc") {
					t.Fatalf("%s: corrupt block %d: %v", what, j, err)
				}
				if err := k.CheckBlock(bad[j], n, d); err == nil || !strings.Contains(err.Error(), "kakeya-pc") {
					t.Fatalf("%s: CheckBlock of corrupt block %d: %v", what, j, err)
				}
				// Checked runs read the header and fields still.
				bad[j] = append([]byte(nil), run[j]...)
				bad[j][2] ^= 0x10
				if err := k.AddWeightedRun(sum, m, w, lds, bad, n, d, tc.r0, tc.r1, true); err == nil || !bitsEqual(sum, before) {
					t.Fatalf("%s: checked run, corrupt header of block %d: %v, sums changed %v", what, j, err, !bitsEqual(sum, before))
				}
				if err := k.ScoreRun(got, lds, q, m, bad, n, d, cos, sin, 0.125, tc.r0, tc.r1, true, nil); err == nil || !strings.Contains(err.Error(), "kakeya-pc") {
					t.Fatalf("%s: checked run, corrupt header of block %d: %v", what, j, err)
				}
			}
		}
	}
}

// TestKakeyaPCPrepareLat: prepareLat, the runs' path for entropy-coded
// blocks of stream layout 2, gives parseRun's latents and fields (those
// of parseBlocks) bit for bit, for runs of 1 to 9 blocks (whole groups
// of MaxBlocks and what is left); a CRC-32C that does not match counts
// only where the run is not checked. It turns down every block it must
// not take, which prepareRun then reads through parseRun, naming what is
// wrong: another stream layout (read there), a header field or count
// changed, a block cut short or one byte long, a stream cut short, and a
// non-finite scale.
func TestKakeyaPCPrepareLat(t *testing.T) {
	const n, d, most = 64, 64, 9
	rng := rand.New(rand.NewPCG(9, 14))
	st := pcStats(t, pcBlocks(rng, 24, n, d), n, d)
	x := pcBlocks(rand.New(rand.NewPCG(9, 15)), most, n, d)
	codecs := make([]*KakeyaPC, 3)
	for _, layout := range []int{1, 2} {
		o := DefaultKakeyaPCOptions()
		o.Entropy, o.StreamLayout = true, layout
		var err error
		if codecs[layout], err = NewKakeyaPC(o, st, nil); err != nil {
			t.Fatal(err)
		}
	}
	k := codecs[2]
	c, mc := len(k.codedIdx), len(k.meanIdx)
	stored := mc - rans2Hidden(mc)
	encode := func(k *KakeyaPC) [][]byte {
		src := make([][]byte, most)
		for j := range src {
			var err error
			if src[j], err = k.Encode(nil, x[j], n, d); err != nil {
				t.Fatal(err)
			}
		}
		return src
	}
	src, src1 := encode(k), encode(codecs[1])
	newRun := func(nb int) (*pcRunScratch, *cpu.PCRun) {
		rs := &pcRunScratch{fields: make([]float32, nb*(mc+c)), lat: make([]float32, nb*c*n+pcLatRows(c)*n)}
		return rs, &cpu.PCRun{N: n, D: d, C: c, M: mc, Lat: rs.lat[:nb*c*n], Fields: rs.fields}
	}
	for nb := 1; nb <= most; nb++ {
		for _, checked := range []bool{false, true} {
			rs, run := newRun(nb)
			if !k.prepareLat(rs, run, src[:nb], n, d, checked) {
				t.Fatalf("%d blocks, checked %v: prepareLat turned them down", nb, checked)
			}
			rs2, ref := newRun(nb)
			if err := k.parseRun(rs2, ref, src[:nb], n, d); err != nil {
				t.Fatalf("%d blocks: parseRun: %v", nb, err)
			}
			if !bitsEqual(run.Lat, ref.Lat) || !bitsEqual(run.Fields, ref.Fields) {
				t.Fatalf("%d blocks, checked %v: latents or fields differ from parseBlocks'", nb, checked)
			}
		}
		// Layout 1: turned down, read by parseRun.
		rs, run := newRun(nb)
		if k.prepareLat(rs, run, src1[:nb], n, d, true) {
			t.Fatalf("%d blocks of layout 1: prepareLat took them", nb)
		}
		if _, err := k.prepareRun(rs, src1[:nb], n, d, true); err != nil {
			t.Fatalf("%d blocks of layout 1: %v", nb, err)
		}
	}
	// A wrong CRC-32C: turned down unchecked, read as it was checked.
	const nb = 6
	for _, j := range []int{0, 3, nb - 1} {
		bad := slices.Clone(src[:nb])
		bad[j] = flip(src[j], 12)
		rs, run := newRun(nb)
		if k.prepareLat(rs, run, bad, n, d, false) {
			t.Errorf("block %d with a wrong CRC-32C, unchecked: prepareLat took it", j)
		}
		if !k.prepareLat(rs, run, bad, n, d, true) {
			t.Errorf("block %d with a wrong CRC-32C, checked: prepareLat turned it down", j)
		}
	}
	putU16 := func(b []byte, i, v int) { binary.LittleEndian.PutUint16(b[i:], uint16(v)) }
	for _, tc := range []struct {
		what string
		edit func([]byte) []byte
	}{
		{"magic", func(b []byte) []byte { b[0] ^= 1; return b }},
		{"codec id", func(b []byte) []byte { b[2] ^= 1; return b }},
		{"n", func(b []byte) []byte { b[4]++; return b }},
		{"d", func(b []byte) []byte { b[8]++; return b }},
		{"tag", func(b []byte) []byte { b[10] ^= 1; return b }},
		{"means", func(b []byte) []byte { putU16(b, 16, stored+1); return b }},
		{"coded", func(b []byte) []byte { putU16(b, 18, c-1); return b }},
		{"code_bytes", func(b []byte) []byte { b[20]++; return b }},
		{"one byte long", func(b []byte) []byte { return append(b, 0) }},
		{"cut short", func(b []byte) []byte { return b[:len(b)-2] }},
		{"stream cut short", func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[20:], binary.LittleEndian.Uint32(b[20:])-2)
			return b[:len(b)-2]
		}},
		{"infinite scale", func(b []byte) []byte { putU16(b, headerLen+8+2*stored+2*(c/2), 0x7c00); return b }},
	} {
		for _, j := range []int{0, 4, nb - 1} {
			bad := slices.Clone(src[:nb])
			bad[j] = tc.edit(slices.Clone(src[j]))
			seal(bad[j]) // the CRC-32C matches: the other checks must catch it
			rs, run := newRun(nb)
			if k.prepareLat(rs, run, bad, n, d, true) {
				t.Errorf("%s, block %d: prepareLat took it", tc.what, j)
			}
			if _, err := k.prepareRun(rs, bad, n, d, true); err == nil || !strings.Contains(err.Error(), "kakeya-pc") {
				t.Errorf("%s, block %d: prepareRun: %v", tc.what, j, err)
			}
		}
	}
}

// FuzzKakeyaPCRunResealed edits one block of a run of entropy-coded
// blocks behind a valid checksum (reaching the checks past the CRC-32C)
// and requires of ScoreRun, checked or not, an error exactly where a block
// fails DecodeRotated, and otherwise DecodeRotated's scores bit for bit;
// of AddWeightedRun an error there too, with the sums untouched; never a
// panic.
func FuzzKakeyaPCRunResealed(f *testing.F) {
	f.Add(uint8(0), uint16(4), []byte{0xff})
	f.Add(uint8(2), uint16(2), []byte{0x00, 0x7c})
	f.Add(uint8(4), uint16(0), []byte{1})
	f.Add(uint8(1), uint16(8), []byte{0x30, 0x00, 0x00, 0x00})
	f.Add(uint8(3), uint16(200), []byte{0x12, 0x34})
	const n, d, m, nb = 64, 64, 2, 5
	rng := rand.New(rand.NewPCG(9, 17))
	st := pcStats(f, pcBlocks(rng, 24, n, d), n, d)
	x := pcBlocks(rand.New(rand.NewPCG(9, 18)), nb, n, d)
	o := DefaultKakeyaPCOptions()
	o.Entropy, o.StreamLayout = true, 2
	k, err := NewKakeyaPC(o, st, nil)
	if err != nil {
		f.Fatal(err)
	}
	src := make([][]byte, nb)
	for j := range src {
		if src[j], err = k.Encode(nil, x[j], n, d); err != nil {
			f.Fatal(err)
		}
	}
	cos, sin := make([]float32, nb*n*d/2), make([]float32, nb*n*d/2)
	for i := range cos {
		cos[i], sin[i] = float32(math.Cos(0.01*float64(i))), float32(math.Sin(0.01*float64(i)))
	}
	q, w := make([]float32, m*d), make([]float32, m*nb*n)
	for i := range q {
		q[i] = float32(rng.NormFloat64())
	}
	for i := range w {
		w[i] = rng.Float32() / (nb * n)
	}
	f.Fuzz(func(t *testing.T, which uint8, at uint16, patch []byte) {
		j := int(which) % nb
		b := slices.Clone(src[j])
		off := headerLen + int(at)%(len(b)-headerLen)
		for i, p := range patch {
			if off+i < len(b) {
				b[off+i] = p
			}
		}
		seal(b)
		run := slices.Clone(src)
		run[j] = b
		want := make([]float32, m*nb*n)
		rot := make([]float32, n*d)
		var werr error
		for i, blk := range run {
			if werr = k.DecodeRotated(rot, blk, n, d, cos[i*n*d/2:], sin[i*n*d/2:]); werr != nil {
				break
			}
			cpu.ScoreBlock(want[i*n:], nb*n, q, m, rot, n, d, 0.125)
		}
		for _, checked := range []bool{false, true} {
			got := make([]float32, m*nb*n)
			err := k.ScoreRun(got, nb*n, q, m, run, n, d, cos, sin, 0.125, 0, n, checked, run)
			if (err == nil) != (werr == nil) || err == nil && !bitsEqual(got, want) {
				t.Fatalf("block %d edited at %d, checked %v: ScoreRun %v, DecodeRotated %v (scores equal %v)", j, off, checked, err, werr, bitsEqual(got, want))
			}
			sum := make([]float32, m*d)
			err = k.AddWeightedRun(sum, m, w, nb*n, run, n, d, 0, n, checked)
			if (err == nil) != (werr == nil) || err != nil && !bitsEqual(sum, make([]float32, m*d)) {
				t.Fatalf("block %d edited at %d, checked %v: AddWeightedRun %v, DecodeRotated %v", j, off, checked, err, werr)
			}
		}
	})
}
