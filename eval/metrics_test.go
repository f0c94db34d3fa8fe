package eval

import (
	"math"
	"testing"

	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestNLL(t *testing.T) {
	tests := []struct {
		name   string
		logits []float32
		target int
		want   float64
	}{
		// uniform over 3: -log(1/3) = log 3
		{"uniform", []float32{0, 0, 0}, 1, 1.0986122886681098},
		// lse = 3 + log(1 + e^-1 + e^-2) = 3.4076059644443806; NLL = lse - 3
		{"ramp top", []float32{1, 2, 3}, 2, 0.4076059644443806},
		{"ramp bottom", []float32{1, 2, 3}, 0, 2.4076059644443806},
		// lse = 1e4 + log(1 + e^-1e4 + e^-2e4) = 1e4 exactly in float64
		{"extreme winner", []float32{1e4, -1e4, 0}, 0, 0},
		{"extreme loser", []float32{1e4, -1e4, 0}, 1, 2e4},
		{"extreme middle", []float32{1e4, -1e4, 0}, 2, 1e4},
		// -Inf logits carry no mass but do not break the sum
		{"minus inf", []float32{float32(math.Inf(-1)), 0, 0}, 1, math.Ln2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NLL(tt.logits, tt.target)
			if err != nil {
				t.Fatal(err)
			}
			if !near(got, tt.want, 1e-12*math.Max(1, tt.want)) {
				t.Errorf("NLL = %.17g, want %.17g", got, tt.want)
			}
		})
	}
}

func TestNLLErrors(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	ninf := float32(math.Inf(-1))
	tests := []struct {
		name   string
		logits []float32
		target int
	}{
		{"empty", nil, 0},
		{"target high", []float32{0, 0}, 2},
		{"target negative", []float32{0, 0}, -1},
		{"nan", []float32{0, nan, 0}, 0},
		{"plus inf", []float32{0, inf}, 0},
		{"all minus inf", []float32{ninf, ninf}, 0},
	}
	for _, tt := range tests {
		if got, err := NLL(tt.logits, tt.target); err == nil {
			t.Errorf("%s: NLL = %v, want an error", tt.name, got)
		}
	}
}

func TestKL(t *testing.T) {
	ln2 := float32(math.Ln2)
	tests := []struct {
		name     string
		ref, alt []float32
		want     float64
		tol      float64
	}{
		{"identical", []float32{1, 2, 3}, []float32{1, 2, 3}, 0, 0},
		{"shifted logits are the same distribution", []float32{1, 2, 3}, []float32{101, 102, 103}, 0, 1e-12},
		// p = (1/3,1/3,1/3), q = (1/4,1/2,1/4):
		// KL = 1/3 [log(4/3) + log(2/3) + log(4/3)] = log(32/27)/3
		{"uniform vs peaked", []float32{0, 0, 0}, []float32{0, ln2, 0}, math.Log(32.0/27) / 3, 1e-7},
		// p = (1,0,0) to float64 precision; log q_0 = -1e4
		{"extreme", []float32{1e4, 0, 0}, []float32{0, 1e4, 0}, 1e4, 1e-9},
	}
	var sc Scorer
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := sc.KL(tt.ref, tt.alt)
			if err != nil {
				t.Fatal(err)
			}
			if !near(got, tt.want, tt.tol) {
				t.Errorf("KL = %.17g, want %.17g", got, tt.want)
			}
			if f, err := KL(tt.ref, tt.alt); err != nil || f != got {
				t.Errorf("package KL = %v, %v; Scorer.KL %v", f, err, got)
			}
		})
	}
	if _, err := sc.KL([]float32{0, 0}, []float32{0}); err == nil {
		t.Error("KL of rows of different lengths: want an error")
	}
	if _, err := KL([]float32{0, 0}, []float32{0}); err == nil {
		t.Error("package KL of rows of different lengths: want an error")
	}
}

func TestScorerAndStats(t *testing.T) {
	var sc Scorer
	ref := []float32{1, 2, 3}
	alt := []float32{3, 2, 1}
	var a, b Stats
	// Reference against itself: KL 0 and agreement.
	if err := sc.Score(&a, ref, ref, 2); err != nil {
		t.Fatal(err)
	}
	if a.N != 1 || a.Top1 != 1 || a.KL != 0 || !near(a.NLL, 0.4076059644443806, 1e-12) {
		t.Errorf("self score = %+v", a)
	}
	// Reversed distribution: NLL of token 2 under alt is 2.4076...; argmax differs.
	if err := sc.Score(&b, ref, alt, 2); err != nil {
		t.Fatal(err)
	}
	// KL(p || reverse p) = sum p_i (l_i - l_{2-i}) = (p2 - p0) * 2 with
	// p0 = e^-2/s, p2 = 1/s, s = 1 + e^-1 + e^-2.
	s := 1 + math.Exp(-1) + math.Exp(-2)
	wantKL := 2 * (1 - math.Exp(-2)) / s
	if b.N != 1 || b.Top1 != 0 || !near(b.KL, wantKL, 1e-7) || !near(b.NLL, 2.4076059644443806, 1e-12) {
		t.Errorf("reversed score = %+v, want KL %v", b, wantKL)
	}

	// Totals are sums, not means of means: one passage of 1 token with NLL
	// 1 and one of 3 tokens with NLL 3 each give mean (1+9)/4 = 2.5.
	p1 := Stats{NLL: 1, N: 1, KL: 0.5, Top1: 1}
	p2 := Stats{NLL: 9, N: 3, KL: 0.3, Top1: 2}
	var tot Stats
	tot.Add(p1)
	tot.Add(p2)
	if tot.N != 4 || tot.MeanNLL() != 2.5 || tot.PPL() != math.Exp(2.5) || !near(tot.MeanKL(), 0.2, 1e-15) || tot.Top1Rate() != 75 {
		t.Errorf("totals %+v: mean NLL %v, PPL %v, KL %v, top-1 %v", tot, tot.MeanNLL(), tot.PPL(), tot.MeanKL(), tot.Top1Rate())
	}
	if got := DeltaPPL(10, 10.5); !near(got, 5, 1e-12) {
		t.Errorf("DeltaPPL(10, 10.5) = %v, want 5", got)
	}

	if err := sc.Score(&b, ref, alt, 3); err == nil {
		t.Error("target outside vocabulary: want an error")
	}
}

func TestScorerAllocs(t *testing.T) {
	var sc Scorer
	var st Stats
	ref := make([]float32, 1000)
	alt := make([]float32, 1000)
	for i := range ref {
		ref[i] = float32(i%17) * 0.3
		alt[i] = float32(i%13) * 0.3
	}
	sc.Score(&st, ref, alt, 5) // warm the scratch
	if n := testing.AllocsPerRun(10, func() { sc.Score(&st, ref, alt, 5) }); n != 0 {
		t.Errorf("Score allocates %v times per call, want 0", n)
	}
}

func TestJudge(t *testing.T) {
	tests := []struct {
		dppl, top1 float64
		want       Verdict
	}{
		{0, 100, VerdictAccept},
		{1, 95, VerdictAccept},
		{-1, 95, VerdictAccept},
		{0.5, 94.99, VerdictMarginal},
		{1.01, 99, VerdictMarginal},
		{-3, 90, VerdictMarginal},
		{3, 90, VerdictMarginal},
		{3.01, 99, VerdictReject},
		{0, 89.99, VerdictReject},
		{-5, 100, VerdictReject},
		{math.NaN(), 100, VerdictReject},
		{0, math.NaN(), VerdictReject},
	}
	for _, tt := range tests {
		if got := Judge(tt.dppl, tt.top1); got != tt.want {
			t.Errorf("Judge(%v, %v) = %s, want %s", tt.dppl, tt.top1, got, tt.want)
		}
	}
}

// A compressed configuration whose settings encode no block of the longest
// sequence is graded "nothing compressed", whatever its figures.
func TestGradeNothingCompressed(t *testing.T) {
	st := func(hot, sinks int) *kvconfig.Settings {
		return &kvconfig.Settings{K: "int8", V: "int8", BlockSize: 16, HotWindow: hot, Sinks: sinks}
	}
	for _, tt := range []struct {
		c       Config
		longest int
		want    Verdict
	}{
		{Config{Name: "hot47", Spec: kvconfig.Spec{KV: "int8"}, Settings: st(47, 0)}, 63, VerdictAccept},
		{Config{Name: "hot48", Spec: kvconfig.Spec{KV: "int8"}, Settings: st(48, 0)}, 63, VerdictNothingCompressed},
		{Config{Name: "sinks", Spec: kvconfig.Spec{KV: "int8"}, Settings: st(0, 63)}, 63, VerdictNothingCompressed},
		{Config{Name: "unknown settings", Spec: kvconfig.Spec{KV: "int8"}}, 63, VerdictAccept},
		{Config{Name: "uncompressed", Settings: &kvconfig.Settings{BlockSize: 16}}, 63, VerdictAccept},
	} {
		if got := Grade(tt.c, tt.longest, 0, 100); got != tt.want {
			t.Errorf("%s: Grade = %q, want %q", tt.c.Name, got, tt.want)
		}
	}
	if n := LongestFed([]Unit{{Tokens: make([]int, 64)}, {Tokens: make([]int, 10)}}); n != 63 {
		t.Errorf("LongestFed = %d, want 63", n)
	}
}
