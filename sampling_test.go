package kakeya

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/pick"
)

func TestSamplerGreedy(t *testing.T) {
	s, err := NewSampler(SamplingOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Sample([]float32{0.1, 3, -2, 2.9}, nil); got != 1 {
		t.Fatalf("greedy picked %d, want 1", got)
	}
}

func TestSamplerRepetitionPenalty(t *testing.T) {
	s, _ := NewSampler(SamplingOptions{RepetitionPenalty: 2})
	logits := []float32{1, 3, -2, 2}
	// Token 1 seen: 3/2 = 1.5 < 2, so token 3 wins; token 2 seen: -2*2 = -4.
	if got := s.Sample(logits, []int{1, 2, 1}); got != 3 {
		t.Fatalf("picked %d, want 3", got)
	}
	want := []float32{1, 1.5, -4, 2}
	for i := range want {
		if logits[i] != want[i] {
			t.Fatalf("penalized logits %v, want %v", logits, want)
		}
	}
}

// TestSamplerDistribution draws many samples and compares the frequencies
// with the probabilities the options imply.
func TestSamplerDistribution(t *testing.T) {
	logits := []float32{2, 1, 0, -1, 0.5}
	softmax := func(temp float64, keep []int) map[int]float64 {
		sum := 0.0
		p := map[int]float64{}
		for _, i := range keep {
			p[i] = math.Exp(float64(logits[i]) / temp)
			sum += p[i]
		}
		for i := range p {
			p[i] /= sum
		}
		return p
	}
	tests := []struct {
		name string
		opt  SamplingOptions
		want map[int]float64
	}{
		{"temp1", SamplingOptions{Temperature: 1}, softmax(1, []int{0, 1, 2, 3, 4})},
		{"temp0.5", SamplingOptions{Temperature: 0.5}, softmax(0.5, []int{0, 1, 2, 3, 4})},
		{"topk2", SamplingOptions{Temperature: 1, TopK: 2}, softmax(1, []int{0, 1})},
		// Probabilities at T=1 by id: .563 .207 .076 .028 .126.
		// Top-p .7 keeps ids 0 and 1 (.770); top-p .8 adds id 4 (.896).
		{"topp0.7", SamplingOptions{Temperature: 1, TopP: 0.7}, softmax(1, []int{0, 1})},
		{"topp0.8", SamplingOptions{Temperature: 1, TopP: 0.8}, softmax(1, []int{0, 1, 4})},
		// Min-p .2 keeps p >= .113: ids 0, 1, 4; min-p .3 keeps p >= .169: ids 0, 1.
		{"minp0.2", SamplingOptions{Temperature: 1, MinP: 0.2}, softmax(1, []int{0, 1, 4})},
		{"minp0.3", SamplingOptions{Temperature: 1, MinP: 0.3}, softmax(1, []int{0, 1})},
		// Top-k 3 renormalises to .628 .231 .141, so top-p .8 keeps ids 0 and 1.
		{"topk3-topp0.8", SamplingOptions{Temperature: 1, TopK: 3, TopP: 0.8}, softmax(1, []int{0, 1})},
	}
	const draws = 40000
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opt.Seed = 7
			s, err := NewSampler(tt.opt)
			if err != nil {
				t.Fatal(err)
			}
			count := map[int]int{}
			row := make([]float32, len(logits))
			for range draws {
				copy(row, logits)
				count[s.Sample(row, nil)]++
			}
			for id, n := range count {
				if _, ok := tt.want[id]; !ok {
					t.Errorf("token %d drawn %d times, should be excluded", id, n)
				}
			}
			for id, p := range tt.want {
				got := float64(count[id]) / draws
				if math.Abs(got-p) > 4*math.Sqrt(p*(1-p)/draws)+1e-3 {
					t.Errorf("token %d: frequency %.4f, want %.4f", id, got, p)
				}
			}
		})
	}
}

func TestSamplerSeedReproducible(t *testing.T) {
	logits := []float32{1, 1.1, 0.9, 1.05, 0.2, 0.3}
	run := func(seed uint64) []int {
		s, _ := NewSampler(SamplingOptions{Temperature: 1, Seed: seed})
		var out []int
		row := make([]float32, len(logits))
		for range 50 {
			copy(row, logits)
			out = append(out, s.Sample(row, nil))
		}
		return out
	}
	a, b, c := run(1), run(1), run(2)
	if !equalInts(a, b) {
		t.Fatal("same seed gave different draws")
	}
	if equalInts(a, c) {
		t.Fatal("different seeds gave the same 50 draws")
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSamplingOptionsValidate(t *testing.T) {
	bad := []SamplingOptions{
		{Temperature: -1},
		{TopK: -1},
		{TopP: 1.5},
		{MinP: -0.1},
		{RepetitionPenalty: -1},
		{RepeatLastN: -3},
		{Temperature: float32(math.NaN())},
	}
	for _, o := range bad {
		if _, err := NewSampler(o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
}

func TestSamplerAllocs(t *testing.T) {
	logits := make([]float32, 1000)
	for i := range logits {
		logits[i] = float32(i%37) * 0.1
	}
	for _, o := range []SamplingOptions{
		{Temperature: 0.8, TopK: 40, TopP: 0.95, RepetitionPenalty: 1.1},
		{Temperature: 0.8, TopP: 0.95, RepetitionPenalty: 1.1},
		{Temperature: 1, MinP: 0.05},
	} {
		s, _ := NewSampler(o)
		hist := []int{1, 2, 3, 4}
		row := make([]float32, len(logits))
		s.Sample(row, hist)
		allocs := testing.AllocsPerRun(20, func() {
			copy(row, logits)
			s.Sample(row, hist)
		})
		if allocs != 0 {
			t.Errorf("%+v: Sample allocates %v times per call", o, allocs)
		}
	}
}

// BenchmarkSample draws from a Qwen2.5-sized vocabulary (151,936 logits,
// normal with standard deviation 3, a trained model's spread) under the
// option sets a server sees: the OpenAI API's defaults (temperature 1,
// no top-k, top-p 1), a typical top-p, and llama.cpp's top-k 40.
func BenchmarkSample(b *testing.B) {
	const vocab = 151936
	r := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, vocab)
	for i := range logits {
		logits[i] = float32(3 * r.NormFloat64())
	}
	for _, bc := range []struct {
		name string
		opt  SamplingOptions
	}{
		{"temp1", SamplingOptions{Temperature: 1}},
		{"temp0.8-topp0.95", SamplingOptions{Temperature: 0.8, TopP: 0.95}},
		{"temp0.8-minp0.05", SamplingOptions{Temperature: 0.8, MinP: 0.05}},
		{"topk40-topp0.95", SamplingOptions{Temperature: 0.8, TopK: 40, TopP: 0.95}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s, err := NewSampler(bc.opt)
			if err != nil {
				b.Fatal(err)
			}
			row := make([]float32, vocab)
			for b.Loop() {
				copy(row, logits)
				s.Sample(row, nil)
			}
		})
	}
}

// On a larger vocabulary with masked (-Inf) entries, the draws without a
// top-k (sampleAll: weights in index order, top-p sorting only the top
// octaves) keep to the tokens a float64 sort-based reference keeps, at
// its frequencies.
func TestSamplerLargeVocab(t *testing.T) {
	const vocab, draws = 1500, 6000
	r := rand.New(rand.NewPCG(5, 6))
	logits := make([]float32, vocab)
	for i := range logits {
		logits[i] = float32(3 * r.NormFloat64())
		if i%7 == 3 {
			logits[i] = float32(math.Inf(-1)) // masked, as a grammar does
		}
	}
	// reference returns the kept tokens' probabilities: sorted by
	// descending logit, softmax in float64, min-p then top-p.
	reference := func(o SamplingOptions) map[int]float64 {
		ids := make([]int, 0, vocab)
		for i, l := range logits {
			if !math.IsInf(float64(l), -1) {
				ids = append(ids, i)
			}
		}
		slices.SortFunc(ids, func(a, b int) int { return cmp.Compare(logits[b], logits[a]) })
		w := make([]float64, len(ids))
		sum := 0.0
		for k, id := range ids {
			w[k] = math.Exp(float64(logits[id]-logits[ids[0]]) / float64(o.Temperature))
			sum += w[k]
		}
		n := len(ids)
		for n > 1 && w[n-1] < float64(o.MinP)*w[0] {
			sum -= w[n-1]
			n--
		}
		if o.TopP > 0 && o.TopP < 1 {
			cum := 0.0
			for k := range n {
				if cum += w[k]; cum >= float64(o.TopP)*sum {
					n, sum = k+1, cum
					break
				}
			}
		}
		p := map[int]float64{}
		for k := range n {
			p[ids[k]] = w[k] / sum
		}
		return p
	}
	for _, o := range []SamplingOptions{
		{Temperature: 1},
		{Temperature: 0.8, TopP: 0.9},
		{Temperature: 1.3, MinP: 0.01},
		{Temperature: 0.7, MinP: 0.002, TopP: 0.8},
		{Temperature: 0.5, TopP: 0.3},
	} {
		t.Run(fmt.Sprintf("T%v-p%v-minp%v", o.Temperature, o.TopP, o.MinP), func(t *testing.T) {
			want := reference(o)
			o.Seed = 11
			s, err := NewSampler(o)
			if err != nil {
				t.Fatal(err)
			}
			count := map[int]int{}
			row := make([]float32, vocab)
			for range draws {
				copy(row, logits)
				count[s.Sample(row, nil)]++
			}
			for id, n := range count {
				if _, ok := want[id]; !ok {
					t.Fatalf("token %d (logit %v) drawn %d times, outside the %d kept", id, logits[id], n, len(want))
				}
			}
			for id, p := range want {
				if got := float64(count[id]) / draws; math.Abs(got-p) > 4*math.Sqrt(p*(1-p)/draws)+1e-3 {
					t.Errorf("token %d: frequency %.4f, want %.4f", id, got, p)
				}
			}
		})
	}
}

// DrawRow hands out the same draw until Drawn, so that a step planned
// with it and dropped draws the same token when planned again, and
// declines what needs the logits on the host; its uniforms are Sample's
// random numbers, so the draws of pick.Draw from them are Sample's tokens.
func TestSamplerDrawRow(t *testing.T) {
	const vocab = 300
	for _, tc := range []struct {
		opt SamplingOptions
		ok  bool
	}{
		{SamplingOptions{Temperature: 0.7, MinP: 0.1}, true},
		{SamplingOptions{Temperature: 1, TopK: vocab, TopP: 1}, true},
		{SamplingOptions{Temperature: 1, RepetitionPenalty: 1}, true},
		{SamplingOptions{}, false},
		{SamplingOptions{Temperature: 1, TopK: vocab - 1}, true},
		{SamplingOptions{Temperature: 1, TopP: 0.95}, true},
		{SamplingOptions{Temperature: 0.7, TopK: 40, TopP: 0.9, MinP: 0.05}, true},
		{SamplingOptions{Temperature: 1, RepetitionPenalty: 1.1}, false},
	} {
		s, err := NewSampler(tc.opt)
		if err != nil {
			t.Fatal(err)
		}
		if s.Drawable(vocab) != tc.ok {
			t.Errorf("%+v: Drawable %v, want %v", tc.opt, !tc.ok, tc.ok)
		}
		d, ok := s.DrawRow(vocab)
		if ok != tc.ok {
			t.Errorf("%+v: DrawRow ok %v, want %v", tc.opt, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		if d2, _ := s.DrawRow(vocab); d2 != d {
			t.Errorf("%+v: a second DrawRow before Drawn gave %+v, want %+v", tc.opt, d2, d)
		}
		wantK := int32(tc.opt.TopK)
		if tc.opt.TopK >= vocab {
			wantK = 0 // off: the whole row
		}
		if d.Temperature != tc.opt.Temperature || d.MinP != tc.opt.MinP || d.TopP != tc.opt.TopP || d.TopK != wantK || !(d.U >= 0 && d.U < 1) {
			t.Errorf("%+v: draw %+v", tc.opt, d)
		}
		// The draws from the uniforms are Sample's tokens.
		host, _ := NewSampler(tc.opt)
		r := rand.New(rand.NewPCG(1, 2))
		for i := range 50 {
			logits := make([]float32, vocab)
			for j := range logits {
				logits[j] = float32(r.NormFloat64() * 2)
			}
			want := host.Sample(slices.Clone(logits), nil)
			f := pick.Filter{TopK: int(d.TopK), TopP: d.TopP, MinP: d.MinP}
			var sc pick.Scratch
			if got := pick.DrawFiltered(logits, d.Temperature, f, d.U, &sc); got != want {
				t.Errorf("%+v, token %d: pick.DrawFiltered from DrawRow's uniform %d, Sample %d", tc.opt, i, got, want)
			}
			s.Drawn()
			d, _ = s.DrawRow(vocab)
		}
	}
	// A top-k the device cannot sort keeps the logits path.
	for _, k := range []int{compute.MaxDrawTopK, compute.MaxDrawTopK + 1, 5000} {
		s, _ := NewSampler(SamplingOptions{Temperature: 1, TopK: k})
		if _, ok := s.DrawRow(5000); ok != (k <= compute.MaxDrawTopK || k >= 5000) {
			t.Errorf("top-k %d of 5000: DrawRow ok %v", k, ok)
		}
	}
}
