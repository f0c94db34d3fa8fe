package codec

import (
	"fmt"
	"math"
	"math/rand/v2"
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
	for _, name := range []string{"fixed", "ec1", "ec2", "coded8"} {
		o := DefaultKakeyaPCOptions()
		switch name {
		case "ec1", "ec2":
			o.Entropy, o.StreamLayout = true, int(name[2]-'0')
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
			if err := k.ScoreRun(got, lds, q, m, run, n, d, cos, sin, 0.125, tc.r0, tc.r1, checked); err != nil {
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
				if err := k.ScoreRun(got, lds, q, m, bad, n, d, cos, sin, 0.125, tc.r0, tc.r1, false); err == nil || !strings.Contains(err.Error(), "kakeya-pc") {
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
				if err := k.ScoreRun(got, lds, q, m, bad, n, d, cos, sin, 0.125, tc.r0, tc.r1, true); err == nil || !strings.Contains(err.Error(), "kakeya-pc") {
					t.Fatalf("%s: checked run, corrupt header of block %d: %v", what, j, err)
				}
			}
		}
	}
}
