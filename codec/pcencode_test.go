package codec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/kernels/cpu"
)

// pcEncodeCases are the kakeya-pc settings whose encoded bytes
// TestKakeyaPCEncodeGolden pins: Lloyd–Max at three rates and query
// weighted, uniform, entropy-constrained (both stream layouts, two
// rates) and kvtc.
var pcEncodeCases = []KakeyaPCOptions{
	{Rate: 1.5, MaxBits: pcMaxBits, Block: 64},
	{Rate: 2.5, MaxBits: pcMaxBits, Block: 64},
	{Rate: 4, MaxBits: pcMaxBits, Block: 64},
	{Rate: 2.5, MaxBits: pcMaxBits, Block: 64, QueryWeighted: true},
	{Rate: 2.5, MaxBits: 4, Block: 64, Uniform: true},
	{Rate: 2, MaxBits: pcMaxBits, Block: 64, Entropy: true},
	{Rate: 2.5, MaxBits: pcMaxBits, Block: 64, Entropy: true},
	{Rate: 2.5, MaxBits: pcMaxBits, Block: 64, Entropy: true, StreamLayout: 1},
	{Rate: 4, MaxBits: pcMaxBits, Block: 64, Entropy: true},
	{Rate: 2.5, MaxBits: pcMaxBits, Block: 64, Entropy: true, Uniform: true},
}

// pcEncodeInputs returns the blocks TestKakeyaPCEncodeGolden encodes for
// a codec of dimension d, with the statistics they were calibrated on:
// key-like and value-like blocks of 64 rows, a short block, Student-t
// rows, a block whose rows are all alike (constant components), and one
// of exact zeros.
func pcEncodeInputs(d int) (*PCAStats, []float32, [][]float32) {
	acc := NewPCAAccumulator(d)
	for s := range 32 {
		if err := acc.AddBlock(synth(keyLike, 64, d, 1, uint64(s+100)), 64); err != nil {
			panic(err)
		}
	}
	st, err := acc.Stats()
	if err != nil {
		panic(err)
	}
	w := make([]float32, d)
	for j := range w {
		w[j] = float32(1 + j%5)
	}
	in := [][]float32{
		synth(keyLike, 64, d, 1, 1),
		synth(keyLike, 64, d, 1, 2),
		synth(valueLike, 64, d, 1, 3),
		synth(keyLike, 17, d, 1, 4),
		synth(studentT, 64, d, 1, 5),
	}
	same := make([]float32, 64*d)
	for i := range 64 {
		copy(same[i*d:], in[0][:d])
	}
	return st, w, append(in, same, make([]float32, 64*d))
}

// pcEncodeGolden holds the SHA-256 of every block pcEncodeCases and
// pcEncodeInputs give (d = 64 and 128, in that order), computed before
// the scale search changed, by the rotation y = U(x - μ) each build
// computes: the AVX2 dot products (GOEXPERIMENT=simd, every amd64 level
// from avx2 up) or the scalar loop.
var pcEncodeGolden = map[string]string{
	"amd64/avx2":   "ac0f3e9878af05123317a7e12d5521ef8e385e66e8c845336c3316650065fdef",
	"amd64/scalar": "f54a70df696cc0cd7ed82b2ae13b7a7349ce9064a3afb6e1eb3a1a64f83b437e",
}

// TestKakeyaPCEncodeGolden pins the bytes kakeya-pc encodes: a faster
// encoder must write exactly the blocks it wrote before.
func TestKakeyaPCEncodeGolden(t *testing.T) {
	h := sha256.New()
	blocks := 0
	for _, d := range []int{64, 128} {
		st, w, in := pcEncodeInputs(d)
		for _, o := range pcEncodeCases {
			var wt []float32
			if o.QueryWeighted {
				wt = w
			}
			k, err := NewKakeyaPC(o, st, wt)
			if err != nil {
				t.Fatal(err)
			}
			for i, x := range in {
				enc, err := k.Encode(nil, x, len(x)/d, d)
				if err != nil {
					t.Fatalf("%s d=%d block %d: %v", k.Name(), d, i, err)
				}
				fmt.Fprintf(h, "%s/%d/%d:%d:", k.Name(), d, i, len(enc))
				h.Write(enc)
				blocks++
			}
		}
	}
	got := hex.EncodeToString(h.Sum(nil))
	key := runtime.GOARCH + "/" + pcEncodePath()
	want, ok := pcEncodeGolden[key]
	if !ok {
		t.Skipf("no golden hash recorded for %s (this run's is %s over %d blocks)", key, got, blocks)
	}
	if got != want {
		t.Errorf("%s: the %d encoded blocks hash to %s, want %s: the encoder's bytes changed", key, blocks, got, want)
	}
}

// pcEncodePath names the rotation kernel Encode runs: "avx2" where the Go
// loops are AVX2's (GOEXPERIMENT=simd, every amd64 level from avx2 up),
// else "scalar".
func pcEncodePath() string {
	if strings.HasPrefix(cpu.Features(), "avx2") {
		return "avx2"
	}
	return "scalar"
}

// codeComponentRef is the scale search as it was before its cells were
// found by table (quantizeBounds' binary search per value, every trial
// scale's codes found again for the best): what codeComponent must equal
// bit for bit, codes, scale and slack.
func (k *KakeyaPC) codeComponentRef(codes []uint8, stride int, sc *pcScratch, t, j, n, d int, slack *float64) float32 {
	b := int(k.width[t])
	m := sc.means[j]
	var ss float64
	for i := 0; i < n; i++ {
		r := float64(sc.y[i*d+j] - m)
		ss += r * r
	}
	rms := float32(math.Sqrt(ss / float64(n)))
	best, bestErr := float32(0), math.Inf(1)
	lv, bd := k.tab.levels[b], k.tab.bounds[b]
	steps := pcScaleSteps[:]
	var ecCost []float32
	ecBudget, bestLen := 0.0, math.Inf(1)
	if k.opt.Entropy && !k.opt.Uniform {
		steps = pcECSQScales[:]
		ecCost, ecBudget = k.ans[t].cost, float64(n)*k.ans[t].bits+*slack
	}
	for _, f := range steps {
		s := roundF16(rms * f)
		if !(s > 0) {
			continue
		}
		inv := 1 / s
		var e, l float64
		for i := 0; i < n; i++ {
			r := sc.y[i*d+j] - m
			q := quantizeBounds(bd, r*inv)
			v := lv[q] * s
			e += float64(r-v) * float64(r-v)
			if ecCost != nil {
				l += float64(ecCost[q])
			}
		}
		better := e < bestErr
		if ecCost != nil {
			fits, bestFits := l <= ecBudget, bestLen <= ecBudget
			better = fits && (!bestFits || e < bestErr) || !fits && !bestFits && l < bestLen
		}
		if better {
			best, bestErr, bestLen = s, e, l
		}
	}
	if ecCost != nil && best != 0 {
		*slack = ecBudget - bestLen
	}
	if best == 0 {
		for i := 0; i < n; i++ {
			codes[i*stride] = uint8(len(lv) / 2)
		}
		return 0
	}
	inv := 1 / best
	for i := 0; i < n; i++ {
		codes[i*stride] = uint8(quantizeBounds(bd, (sc.y[i*d+j]-m)*inv))
	}
	return best
}

// quantizeBounds returns the number of bounds below x, by binary search:
// the reference the cell tables must equal.
func quantizeBounds(bounds []float32, x float32) int {
	lo, hi := 0, len(bounds)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if x > bounds[mid] {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// TestPCCodeComponent holds codeComponent to the reference search on
// every coded component of every pcEncodeCases codec, over key-like,
// heavy-tailed, scaled and degenerate coefficients, the slack carried
// from component to component as Encode carries it.
func TestPCCodeComponent(t *testing.T) {
	const d = 64
	st, w, _ := pcEncodeInputs(d)
	r := rand.New(rand.NewPCG(3, 7))
	for _, o := range pcEncodeCases {
		var wt []float32
		if o.QueryWeighted {
			wt = w
		}
		k, err := NewKakeyaPC(o, st, wt)
		if err != nil {
			t.Fatal(err)
		}
		for trial := range 12 {
			n := []int{64, 64, 17, 1, 3, 64}[trial%6]
			sc := &pcScratch{y: make([]float32, n*d), means: make([]float32, d)}
			for i := range sc.y {
				switch trial % 4 {
				case 0:
					sc.y[i] = float32(r.NormFloat64())
				case 1:
					sc.y[i] = float32(studentTSample(r, 2)) * 10
				case 2:
					sc.y[i] = float32(r.NormFloat64()) * 1e-3
				default:
					sc.y[i] = float32(r.IntN(5)-2) / 4 // ties and constants
				}
			}
			for j := range sc.means {
				sc.means[j] = roundF16(float32(r.NormFloat64()) / 8)
			}
			if trial == 11 { // a constant component: scale 0
				for i := range n {
					sc.y[i*d+k.codedIdx[0]] = sc.means[k.codedIdx[0]]
				}
			}
			c := len(k.codedIdx)
			got, want := make([]uint8, c*n), make([]uint8, c*n)
			slackGot, slackWant := float64(trial), float64(trial)
			for tc, j := range k.codedIdx {
				sg := k.codeComponent(got[tc*n:], 1, sc, tc, j, n, d, &slackGot)
				sw := k.codeComponentRef(want[tc*n:], 1, sc, tc, j, n, d, &slackWant)
				if math.Float32bits(sg) != math.Float32bits(sw) || math.Float64bits(slackGot) != math.Float64bits(slackWant) {
					t.Fatalf("%s trial %d component %d: scale %v slack %v, want %v and %v", k.Name(), trial, tc, sg, slackGot, sw, slackWant)
				}
				for i := range n {
					if got[tc*n+i] != want[tc*n+i] {
						t.Fatalf("%s trial %d component %d row %d: code %d, want %d", k.Name(), trial, tc, i, got[tc*n+i], want[tc*n+i])
					}
				}
			}
		}
	}
}

// TestCellIndex holds every family's cell index to the binary search of
// its bounds: on a sweep across the bounds, at each bound and the floats
// next to it, far out and at the infinities and NaN; and every option has
// a one-compare grid (cpu.CellGrid), which the encoder's kernel reads.
func TestCellIndex(t *testing.T) {
	for _, tab := range []func() (*pcTables, error){gaussianTables, uniformTables, ecsqTables} {
		tb, err := tab()
		if err != nil {
			t.Fatal(err)
		}
		for b := 1; b <= tb.n; b++ {
			bd, c := tb.bounds[b], tb.cells[b]
			if c.grid == nil {
				// Every option's cells are a grid step wide or more:
				// the one-compare path (and the encoder's kernel) runs.
				t.Errorf("option %d of %d bounds: no cpu.CellGrid", b, len(bd))
			}
			xs := []float32{float32(math.Inf(-1)), float32(math.Inf(1)), float32(math.NaN()), 0, float32(math.Copysign(0, -1)), 1e30, -1e30, math.MaxFloat32, -math.MaxFloat32}
			for _, v := range bd {
				xs = append(xs, v, math.Nextafter32(v, float32(math.Inf(-1))), math.Nextafter32(v, float32(math.Inf(1))), -v)
			}
			lo, hi := bd[0]-1, bd[len(bd)-1]+1
			for i := range 20001 {
				xs = append(xs, lo+(hi-lo)*float32(i)/20000)
			}
			for _, x := range xs {
				if got, want := c.cell(x), quantizeBounds(bd, x); got != want {
					t.Fatalf("option %d of %d bounds: cell(%v) = %d, want %d", b, len(bd), x, got, want)
				}
			}
		}
	}
}
