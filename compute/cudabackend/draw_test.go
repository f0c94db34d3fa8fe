package cudabackend

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kakeya-ai/kakeya"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/internal/mathx"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/model"
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
	needKernels(t, "draw_rows", "draw_split")
	// One block a row (rows of Qwen2.5's vocabulary go to draw_split by
	// themselves, at most 4 at once), and every row over 5 blocks.
	for _, parts := range []int{0, 5} {
		t.Run(fmt.Sprintf("parts %d", parts), func(t *testing.T) {
			b, _ := newFakeBackend(t, Options{drawParts: parts})
			drawMatchesSampler(t, b)
		})
	}
}

func drawMatchesSampler(t *testing.T, b *Backend) {
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
		// Top-k: the host's candidates and arithmetic, so the same token.
		{"top-k 1", 500, 8, 2, kakeya.SamplingOptions{Temperature: 1, TopK: 1}, nil},
		{"top-k 40", 4096, 16, 3, kakeya.SamplingOptions{Temperature: 0.8, TopK: 40}, nil},
		{"top-k at vocab less one", 300, 8, 1, kakeya.SamplingOptions{Temperature: 2, TopK: 299}, nil},
		{"top-k 50, top-p 0.9, min-p", 5000, 16, 2, kakeya.SamplingOptions{Temperature: 0.7, TopK: 50, TopP: 0.9, MinP: 0.05}, nil},
		{"top-k, min-p 1", 999, 8, 3, kakeya.SamplingOptions{Temperature: 1, TopK: 20, MinP: 1}, nil},
		{"top-k ties at the k-th", 2000, 8, 1, kakeya.SamplingOptions{Temperature: 1, TopK: 10}, func(i int, x []float32) {
			for j := range x {
				x[j] = float32(r.IntN(6)) // ~333 tokens share each value
			}
		}},
		{"top-k signed zeros", 600, 8, 1, kakeya.SamplingOptions{Temperature: 0.5, TopK: 7}, func(i int, x []float32) {
			for j := range x {
				x[j] = float32(-1 - r.IntN(3))
				if j%5 == i%5 {
					x[j] = float32(math.Copysign(0, float64(j%2)-0.5))
				}
			}
		}},
		{"top-k over masked", 3000, 8, 2, kakeya.SamplingOptions{Temperature: 0.9, TopK: 64}, func(i int, x []float32) {
			for j := range x {
				if j%100 != i {
					x[j] = -inf // 30 tokens left, fewer than k
				}
			}
		}},
		{"top-k 1024, Qwen2.5 vocab", 151936, 2, 4, kakeya.SamplingOptions{Temperature: 1.1, TopK: 1024, TopP: 0.95}, nil},
		{"top-k 40, Qwen2.5 vocab", 151936, 2, 4, kakeya.SamplingOptions{Temperature: 0.7, TopK: 40, TopP: 0.9, MinP: 0.02}, nil},
		// Top-p without top-k: the same weights, sums associated otherwise.
		{"top-p 0.9", 4096, 16, 3, kakeya.SamplingOptions{Temperature: 0.8, TopP: 0.9}, nil},
		{"top-p 0.01", 4096, 8, 3, kakeya.SamplingOptions{Temperature: 1, TopP: 0.01}, nil},
		{"top-p, min-p", 5000, 16, 2, kakeya.SamplingOptions{Temperature: 1.2, TopP: 0.5, MinP: 0.1}, nil},
		{"top-p, top-k at vocab", 300, 8, 2, kakeya.SamplingOptions{Temperature: 1, TopK: 300, TopP: 0.7}, nil},
		{"top-p flat", 4096, 8, 0.01, kakeya.SamplingOptions{Temperature: 1, TopP: 0.95}, nil},
		{"top-p ties", 2000, 16, 1, kakeya.SamplingOptions{Temperature: 1, TopP: 0.6}, func(i int, x []float32) {
			for j := range x {
				x[j] = float32(r.IntN(4)) // the cut falls inside a group of equal weights
			}
		}},
		{"top-p one token", 1, 4, 1, kakeya.SamplingOptions{Temperature: 1, TopP: 0.5}, nil},
		{"top-p masked", 3000, 8, 2, kakeya.SamplingOptions{Temperature: 0.9, TopP: 0.8}, func(i int, x []float32) {
			for j := range x {
				if j%3 != i%3 {
					x[j] = -inf
				}
			}
		}},
		{"top-p 0.95, Qwen2.5 vocab", 151936, 4, 4, kakeya.SamplingOptions{Temperature: 0.7, TopP: 0.95}, nil},
		{"top-p 0.9 hot, Qwen2.5 vocab", 151936, 2, 2, kakeya.SamplingOptions{Temperature: 1.5, TopP: 0.9, MinP: 0.001}, nil},
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
				dev.Drawn()
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
				if draws[i].TopK > 0 || !atBoundary(row, draws[i], ids[i], want[i]) {
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
// of the sum from the cumulative weight at the end of the lower token (in
// index order; with top-p, in descending weight, or top-p times the sum
// within 1e-12 of the sum from a cumulative weight, where the cut may
// fall otherwise).
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
	order := make([]int, len(row))
	for i := range order {
		order[i] = i
	}
	topP := d.TopP > 0 && d.TopP < 1
	if topP {
		slices.SortStableFunc(order, func(i, j int) int { return cmp.Compare(w[j], w[i]) })
	}
	total, cut := sum, len(order)
	if topP {
		cum := 0.0
		for k, i := range order {
			cum += w[i]
			if math.Abs(cum-float64(d.TopP)*sum) <= 1e-12*sum {
				return true // the cut itself is at a rounding boundary
			}
			if cum >= float64(d.TopP)*sum {
				total, cut = cum, k+1
				break
			}
		}
	}
	cum := 0.0
	for _, i := range order[:cut] {
		cum += w[i]
		if i == a || i == b {
			break
		}
	}
	return math.Abs(cum-d.U*total) <= 1e-12*sum
}

// At temperature 0 a row's draw is its arg max, in the same launch as
// sampled rows.
func TestDrawGreedyRows(t *testing.T) {
	needKernels(t, "draw_rows")
	b, _ := newFakeBackend(t, Options{})
	r := rand.New(rand.NewPCG(7, 8))
	const rows, cols = 6, 3001
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(r.IntN(50)) / 8 // ties
	}
	draws := make([]compute.DrawRow, rows)
	for i := range draws {
		draws[i] = compute.DrawRow{U: r.Float64(), Temperature: float32(i % 2), MinP: 0.1}
	}
	ids, bad := make([]int, rows), make([]int, rows)
	b.Draw(ids, bad, upload(b, x), cols, draws)
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
	for i, d := range draws {
		row := append([]float32(nil), x[i*cols:(i+1)*cols]...)
		want := pick.ArgMax(row)
		if d.Temperature > 0 {
			want = pick.Draw(row, d.Temperature, d.MinP, d.U)
		}
		if ids[i] != want || bad[i] != -1 {
			t.Errorf("row %d (temperature %v): token %d, first non-finite %d; want %d, -1", i, d.Temperature, ids[i], bad[i], want)
		}
	}
}

// A non-finite row reports its first NaN or ±Inf as argmax does, and a
// row of NaN only draws -1.
func TestDrawNonFinite(t *testing.T) {
	needKernels(t, "draw_rows", "draw_split")
	for _, parts := range []int{0, 3} { // one block a row, and three
		t.Run(fmt.Sprintf("parts %d", parts), func(t *testing.T) {
			b, _ := newFakeBackend(t, Options{drawParts: parts})
			drawNonFinite(t, b)
		})
	}
}

func drawNonFinite(t *testing.T, b *Backend) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	const cols = 600
	x := make([]float32, 4*cols)
	for i := range x {
		x[i] = float32(i%17) / 4
	}
	x[123], x[400] = nan, inf
	for j := range cols {
		x[cols+j] = nan
		x[3*cols+j] = -inf
	}
	x[2*cols+599] = -inf
	for _, d := range []compute.DrawRow{
		{U: 0.5, Temperature: 1},
		{U: 0.5, Temperature: 1, TopK: 5},
		{U: 0.5, Temperature: 1, TopP: 0.9},
		{U: 0.5, Temperature: 1, TopK: 5, TopP: 0.9, MinP: 0.1},
	} {
		ids, bad := make([]int, 4), make([]int, 4)
		b.Draw(ids, bad, upload(b, x), cols, []compute.DrawRow{d, d, d, d})
		if err := b.Err(); err != nil {
			t.Fatal(err)
		}
		if bad[0] != 123 || bad[1] != 0 || bad[2] != 599 || bad[3] != 0 {
			t.Errorf("%+v: first non-finite %v, want [123 0 599 0]", d, bad)
		}
		if ids[0] < 0 || ids[0] >= cols {
			t.Errorf("%+v: a row with NaN and +Inf drew %d", d, ids[0])
		}
		if ids[1] != -1 {
			t.Errorf("%+v: a row of NaN only drew %d, want -1", d, ids[1])
		}
		// A -Inf among finite logits, and a row of -Inf only: the host's.
		var sc pick.Scratch
		for _, i := range []int{2, 3} {
			row := slices.Clone(x[i*cols : (i+1)*cols])
			f := pick.Filter{TopK: int(d.TopK), TopP: d.TopP, MinP: d.MinP}
			if want := pick.DrawFiltered(row, d.Temperature, f, d.U, &sc); ids[i] != want {
				t.Errorf("%+v: row %d drew %d, the host %d", d, i, ids[i], want)
			}
		}
	}
}

// Sampled generation with the tokens drawn on the device (model.Batch's
// Draw items) is the CPU's drawn by pick.Draw from the same uniforms,
// token for token, on every tiny architecture; a decode step reads back
// its token and nothing else (one copy out of 8 bytes) and is one
// replayed graph, so the step's graph ends with the draw and its new
// uniform rides in the step's parameters. A second sequence, greedy, in
// the same steps gets its arg max from the same launch.
func TestDrawOnDevice(t *testing.T) {
	needKernels(t, "draw_rows", "norm_qkv_bf16", "attn_split")
	const prompt, tokens = 6, 12
	for name, dir := range tinyArchitectures(t) {
		t.Run(name, func(t *testing.T) {
			cpuM := loadModel(t, dir, model.Options{Backend: cpuF32(t, 1), MaxContext: 64})
			ids := testIDs(prompt, cpuM.Config().VocabSize)
			r := rand.New(rand.NewPCG(9, 10))
			draws := make([]compute.DrawRow, tokens)
			for i := range draws {
				draws[i] = compute.DrawRow{U: r.Float64(), Temperature: 1.3, MinP: 0.01}
				switch i % 3 { // the same graph draws with each filter
				case 1:
					draws[i].TopK, draws[i].TopP = 8, 0.9
				case 2:
					draws[i].TopP = 0.7
				}
			}
			var sc pick.Scratch
			s, err := cpuM.NewSequence()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var want []int
			l, err := s.Forward(ids, false)
			for i := range tokens {
				if err != nil {
					t.Fatal(err)
				}
				d := draws[i]
				f := pick.Filter{TopK: int(d.TopK), TopP: d.TopP, MinP: d.MinP}
				want = append(want, pick.DrawFiltered(append([]float32(nil), l...), d.Temperature, f, d.U, &sc))
				l, err = s.Forward(want[len(want)-1:], false)
			}

			// One block a row, and (a row of 3 blocks: draw_split_max
			// and draw_split, a graph node pair) the split draw.
			for _, parts := range []int{0, 3} {
				lastKernel := "draw_rows"
				if parts > 1 {
					lastKernel = "draw_split"
				}
				gpu, f := newFakeBackend(t, Options{drawParts: parts})
				gpu.Launches()
				m := loadModel(t, dir, model.Options{Backend: gpu, MaxContext: 64})
				if !m.DeviceDraw() {
					t.Fatal("the CUDA backend's model does not draw on the device")
				}
				bt, err := m.NewBatch(16)
				if err != nil {
					t.Fatal(err)
				}
				g, err := m.NewSequence()
				if err != nil {
					t.Fatal(err)
				}
				defer g.Close()
				items := []model.BatchItem{{Seq: g, IDs: ids, Draw: &draws[0]}}
				var got []int
				for i := range tokens {
					items[0].Draw = &draws[i]
					before := gpu.Launches()
					if err := bt.Forward(items); err != nil {
						t.Fatal(err)
					}
					st := gpu.Launches().Sub(before)
					it := items[0]
					if it.Logits != nil || it.NonFinite != -1 {
						t.Fatalf("token %d: logits %d values, first non-finite at %d; want none and -1", i, len(it.Logits), it.NonFinite)
					}
					if i > 0 && st.CopiesOut != 1 {
						t.Errorf("decode step %d: %d copies out, want the token's alone", i, st.CopiesOut)
					}
					if i >= 2 && prompt+i < 16 && (st.Graphs != 1 || st.Kernels != 0) {
						t.Errorf("decode step %d: %+v, want one graph launch", i, st)
					}
					if last := f.launched[len(f.launched)-1]; last != lastKernel {
						t.Errorf("step %d ends with %s, want the draw", i, last)
					}
					got = append(got, it.Token)
					items[0].IDs = got[len(got)-1:]
				}
				if !slices.Equal(got, want) {
					t.Errorf("drawn tokens on the device %v, the CPU's %v", got, want)
				}
			}
		})
	}
}

// A step of a drawn and a greedy item draws on the device in one launch
// (the greedy row at temperature 0); on the host, with an item that asks
// for logits, the same tokens.
func TestDrawMixedStep(t *testing.T) {
	needKernels(t, "draw_rows", "norm_qkv_bf16", "attn_split")
	for name, dir := range tinyArchitectures(t) {
		t.Run(name, func(t *testing.T) {
			gpu, _ := newFakeBackend(t, Options{})
			m := loadModel(t, dir, model.Options{Backend: gpu, MaxContext: 64})
			ids := testIDs(5, m.Config().VocabSize)
			bt, err := m.NewBatch(32)
			if err != nil {
				t.Fatal(err)
			}
			seqs := make([]*model.Sequence, 3)
			for i := range seqs {
				if seqs[i], err = m.NewSequence(); err != nil {
					t.Fatal(err)
				}
				defer seqs[i].Close()
			}
			d := compute.DrawRow{U: 0.37, Temperature: 0.8}
			items := []model.BatchItem{{Seq: seqs[0], IDs: ids, Draw: &d}, {Seq: seqs[1], IDs: ids, Greedy: true}}
			if err := bt.Forward(items); err != nil {
				t.Fatal(err)
			}
			dev := []int{items[0].Token, items[1].Token}
			if items[0].Logits != nil || items[1].Logits != nil {
				t.Fatal("a step of greedy and drawn items read back logits")
			}
			// On the host: a third item asks for its logits.
			for _, s := range seqs[:2] {
				s.Reset()
			}
			items = append(items[:2], model.BatchItem{Seq: seqs[2], IDs: ids})
			items[0].IDs, items[1].IDs = ids, ids
			if err := bt.Forward(items); err != nil {
				t.Fatal(err)
			}
			logits := items[2].Logits
			if items[0].Token != dev[0] || items[1].Token != dev[1] {
				t.Errorf("host tokens %d, %d; device %v", items[0].Token, items[1].Token, dev)
			}
			if want := pick.ArgMax(logits); items[1].Token != want {
				t.Errorf("greedy token %d, want %d", items[1].Token, want)
			}
			if want := pick.Draw(append([]float32(nil), logits...), d.Temperature, d.MinP, d.U); items[0].Token != want {
				t.Errorf("drawn token %d, want %d (the same prompt's logits)", items[0].Token, want)
			}
		})
	}
}

// Seeded sampled generation through the engine on the emulated device,
// its tokens drawn there, writes the CPU engine's text, token for token,
// with one copy out (the tokens) per decode step.
func TestGenerateDrawnOnEmulatedDevice(t *testing.T) {
	needKernels(t, "draw_rows", "attn_split")
	dir := shareddata.File(t, "models", "stories260K")
	ctx := context.Background()
	gen := func(b compute.Backend, opt kakeya.GenerateOptions) string {
		e, err := kakeya.Load(ctx, dir, kakeya.Options{Backend: b})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		res, err := e.Generate(ctx, "Once upon a time", opt, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.Text
	}
	for _, opt := range []kakeya.SamplingOptions{{Temperature: 0.8, Seed: 5}, {Temperature: 1.2, MinP: 0.05, Seed: 6}} {
		o := kakeya.GenerateOptions{MaxTokens: 40, Sampling: opt}
		want := gen(cpuF32(t, 1), o)
		gpu, f := newFakeBackend(t, Options{})
		gpu.Launches()
		got := gen(gpu, o)
		st := gpu.Launches()
		if got != want {
			t.Errorf("%+v: text on the device %q, the CPU's %q", opt, got, want)
		}
		if n := launchesOf(f.launched, "draw_rows"); n < 39 || f.launched[len(f.launched)-1] != "draw_rows" {
			t.Errorf("%+v: %d draw_rows launches, the last kernel %s; want one per token, last", opt, n, f.launched[len(f.launched)-1])
		}
		if st.CopiesOut > 45 {
			t.Errorf("%+v: %d copies out for 40 tokens, want about one per step", opt, st.CopiesOut)
		}
	}
}

// launchesOf returns how many of names are name.
func launchesOf(names []string, name string) int {
	n := 0
	for _, s := range names {
		if s == name {
			n++
		}
	}
	return n
}
