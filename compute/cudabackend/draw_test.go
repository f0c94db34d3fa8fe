package cudabackend

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kakeya-ai/kakeya"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/internal/mathx"
	"github.com/kakeya-ai/kakeya/pick"
)

// draw_rows draws what the host Sampler draws from the same uniform: two
// samplers of one seed, one sampling on the host (Sample) and one giving
// its uniforms to the device (DrawRow), pick the same token for every row
// at every temperature and min-p, over short rows and rows of Qwen2.5's
// 151,936 tokens, peaked and flat rows, rows with masked (-Inf) tokens
// and ties. The device sums the weights in another order than the host,
// so a token may differ only where the uniform falls within a rounding
// of the boundary between the two tokens; such a row is checked to be
// one against the host's own float64 walk, and counted (none are
// expected: a rounding boundary is ~1e-16 of the weight wide).
func TestDrawMatchesSampler(t *testing.T) {
	needKernels(t, "draw_rows")
	b, _ := newFakeBackend(t, Options{})
	r := rand.New(rand.NewPCG(5, 6))
	inf := float32(math.Inf(1))
	type tc struct {
		name  string
		cols  int
		rows  int
		scale float64 // logits' spread
		opt   kakeya.SamplingOptions
		row   func(i int, x []float32)
	}
	cases := []tc{
		{"one token", 1, 4, 1, kakeya.SamplingOptions{Temperature: 1}, nil},
		{"short", 7, 16, 1, kakeya.SamplingOptions{Temperature: 0.8}, nil},
		{"block", 256, 16, 2, kakeya.SamplingOptions{Temperature: 1}, nil},
		{"block plus one", 257, 16, 2, kakeya.SamplingOptions{Temperature: 0.7, MinP: 0.05}, nil},
		{"flat", 4096, 8, 0.01, kakeya.SamplingOptions{Temperature: 1}, nil},
		{"peaked", 4096, 8, 8, kakeya.SamplingOptions{Temperature: 0.5}, nil},
		{"hot", 5000, 8, 3, kakeya.SamplingOptions{Temperature: 5}, nil},
		{"cold", 5000, 8, 3, kakeya.SamplingOptions{Temperature: 0.05}, nil},
		{"min-p", 4096, 8, 3, kakeya.SamplingOptions{Temperature: 1, MinP: 0.1}, nil},
		{"min-p 1", 999, 8, 3, kakeya.SamplingOptions{Temperature: 1, MinP: 1}, nil},
		{"top-k at vocab", 300, 8, 2, kakeya.SamplingOptions{Temperature: 1, TopK: 300, TopP: 1}, nil},
		{"masked", 3000, 8, 2, kakeya.SamplingOptions{Temperature: 0.9}, func(i int, x []float32) {
			for j := range x {
				if j%3 != i%3 {
					x[j] = -inf
				}
			}
		}},
		{"ties", 2000, 8, 1, kakeya.SamplingOptions{Temperature: 1, MinP: 0.2}, func(i int, x []float32) {
			for j := range x {
				x[j] = float32(r.IntN(4))
			}
		}},
		{"Qwen2.5 vocab", 151936, 4, 4, kakeya.SamplingOptions{Temperature: 0.7}, nil},
		{"Qwen2.5 vocab, min-p", 151936, 2, 4, kakeya.SamplingOptions{Temperature: 1, MinP: 0.05}, nil},
	}
	boundary := 0
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.opt.Seed = uint64(ci)
			host, err := kakeya.NewSampler(c.opt)
			if err != nil {
				t.Fatal(err)
			}
			dev, _ := kakeya.NewSampler(c.opt)
			x := make([]float32, c.rows*c.cols)
			for i := range x {
				x[i] = float32(r.NormFloat64() * c.scale)
			}
			if c.row != nil {
				for i := range c.rows {
					c.row(i, x[i*c.cols:(i+1)*c.cols])
				}
			}
			draws := make([]compute.DrawRow, c.rows)
			want := make([]int, c.rows)
			for i := range c.rows {
				row := append([]float32(nil), x[i*c.cols:(i+1)*c.cols]...)
				want[i] = host.Sample(row, nil)
				d, ok := dev.DrawRow(c.cols)
				if !ok {
					t.Fatalf("DrawRow declines %+v", c.opt)
				}
				draws[i] = d
			}
			ids, bad := make([]int, c.rows), make([]int, c.rows)
			b.Draw(ids, bad, upload(b, x), c.cols, draws)
			if err := b.Err(); err != nil {
				t.Fatal(err)
			}
			for i := range c.rows {
				row := x[i*c.cols : (i+1)*c.cols]
				if bad[i] != pick.FirstNonFinite(row) {
					t.Errorf("row %d: first non-finite at %d, want %d", i, bad[i], pick.FirstNonFinite(row))
				}
				if ids[i] == want[i] {
					continue
				}
				if !atBoundary(row, draws[i], ids[i], want[i]) {
					t.Errorf("row %d (u %v): device drew %d, the host Sampler %d", i, draws[i].U, ids[i], want[i])
				} else {
					boundary++
					t.Logf("row %d: device %d, host %d: at a rounding boundary", i, ids[i], want[i])
				}
			}
		})
	}
	if boundary > 0 {
		t.Logf("%d draws at a rounding boundary", boundary)
	}
}

// atBoundary reports whether the draws a and b of row with d differ only
// by rounding: the host's float64 walk puts u times the sum within 1e-12
// of the sum from the cumulative weight at the end of the lower token.
func atBoundary(row []float32, d compute.DrawRow, a, b int) bool {
	maxL := float64(row[pick.ArgMax(row)])
	inv := 1 / float64(d.Temperature)
	w := make([]float64, len(row))
	sum := 0.0
	for i, l := range row {
		v := mathx.ExpWeight((float64(l) - maxL) * inv)
		if v < d.MinP || !(v > 0) {
			v = 0
		}
		w[i] = float64(v)
		sum += w[i]
	}
	lo := min(a, b)
	cum := 0.0
	for i := range lo + 1 {
		cum += w[i]
	}
	return math.Abs(cum-d.U*sum) <= 1e-12*sum
}

// A non-finite row reports its first NaN or ±Inf as argmax does, and a
// row of NaN only draws -1.
func TestDrawNonFinite(t *testing.T) {
	needKernels(t, "draw_rows")
	b, _ := newFakeBackend(t, Options{})
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	const cols = 600
	x := make([]float32, 3*cols)
	for i := range x {
		x[i] = float32(i%17) / 4
	}
	x[123], x[400] = nan, inf
	for j := range cols {
		x[cols+j] = nan
	}
	x[2*cols+599] = -inf
	ids, bad := make([]int, 3), make([]int, 3)
	d := compute.DrawRow{U: 0.5, Temperature: 1}
	b.Draw(ids, bad, upload(b, x), cols, []compute.DrawRow{d, d, d})
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
	if bad[0] != 123 || bad[1] != 0 || bad[2] != 599 {
		t.Errorf("first non-finite %v, want [123 0 599]", bad)
	}
	if ids[1] != -1 {
		t.Errorf("a row of NaN only drew %d, want -1", ids[1])
	}
	if ids[2] < 0 || ids[2] >= 599 {
		t.Errorf("a row with a -Inf logit drew %d, want a finite one's", ids[2])
	}
}
