package eval

import (
	"fmt"
	"math"

	"github.com/kakeya-ai/kakeya/internal/mathx"
	"github.com/kakeya-ai/kakeya/pick"
)

// LogSumExp returns log(sum(exp(x))) over a logits row, computed in float64
// around the row maximum so that logits of any magnitude stay finite. It
// fails on an empty row, a NaN or a +Inf, or a row that is all -Inf.
func LogSumExp(logits []float32) (float64, error) {
	if len(logits) == 0 {
		return 0, fmt.Errorf("eval: empty logits row")
	}
	m := math.Inf(-1)
	for i, x := range logits {
		v := float64(x)
		if math.IsNaN(v) || math.IsInf(v, 1) {
			return 0, fmt.Errorf("eval: logits row has %v at index %d", x, i)
		}
		if v > m {
			m = v
		}
	}
	if math.IsInf(m, -1) {
		return 0, fmt.Errorf("eval: logits row is all -Inf")
	}
	var s float64
	for _, x := range logits {
		s += mathx.Exp(float64(x) - m)
	}
	return m + math.Log(s), nil
}

// LogSoftmax writes the log-probabilities of a logits row into dst, which
// must hold at least len(logits) values, and returns dst[:len(logits)].
func LogSoftmax(dst []float64, logits []float32) ([]float64, error) {
	if len(dst) < len(logits) {
		return nil, fmt.Errorf("eval: log-softmax buffer holds %d values, row has %d", len(dst), len(logits))
	}
	lse, err := LogSumExp(logits)
	if err != nil {
		return nil, err
	}
	dst = dst[:len(logits)]
	for i, x := range logits {
		dst[i] = float64(x) - lse
	}
	return dst, nil
}

// NLL returns the negative log-likelihood -log softmax(logits)[target] in
// nats.
func NLL(logits []float32, target int) (float64, error) {
	if target < 0 || target >= len(logits) {
		return 0, fmt.Errorf("eval: target token %d outside vocabulary of %d", target, len(logits))
	}
	lse, err := LogSumExp(logits)
	if err != nil {
		return 0, err
	}
	return lse - float64(logits[target]), nil
}

// PPL returns exp of a mean negative log-likelihood in nats.
func PPL(meanNLL float64) float64 { return math.Exp(meanNLL) }

// DeltaPPL returns the relative perplexity change of alt over ref in
// percent: 100*(alt/ref - 1).
func DeltaPPL(ref, alt float64) float64 { return 100 * (alt/ref - 1) }

// Stats accumulates teacher-forced metrics as sums and counts, so that the
// totals over many passages are exact rather than means of means.
type Stats struct {
	NLL  float64 `json:"nll_sum"` // sum of NLL in nats over scored tokens
	N    int     `json:"count"`   // scored tokens
	KL   float64 `json:"kl_sum"`  // sum of KL(ref || this) in nats
	Top1 int     `json:"top1"`    // positions whose argmax equals the reference argmax
}

// Add adds the sums and counts of o to s.
func (s *Stats) Add(o Stats) {
	s.NLL += o.NLL
	s.N += o.N
	s.KL += o.KL
	s.Top1 += o.Top1
}

// MeanNLL returns the mean NLL in nats per token (NaN when empty).
func (s Stats) MeanNLL() float64 { return s.NLL / float64(s.N) }

// PPL returns the perplexity exp(mean NLL).
func (s Stats) PPL() float64 { return PPL(s.MeanNLL()) }

// MeanKL returns the mean KL(ref || this) per position in nats.
func (s Stats) MeanKL() float64 { return s.KL / float64(s.N) }

// Top1Rate returns the top-1 agreement with the reference in percent.
func (s Stats) Top1Rate() float64 { return 100 * float64(s.Top1) / float64(s.N) }

// A Scorer scores logits rows against a reference row. It keeps the
// log-softmax scratch of the last vocabulary size seen, so scoring
// allocates nothing once warm. A Scorer is not safe for concurrent use.
type Scorer struct {
	ref, alt []float64
}

// Score adds one position to st: the NLL of target under alt, KL(ref ||
// alt) and whether both rows have the same argmax. Passing the same slice
// as ref and alt scores the reference itself (KL 0, top-1 agreement).
func (sc *Scorer) Score(st *Stats, ref, alt []float32, target int) error {
	if len(ref) != len(alt) {
		return fmt.Errorf("eval: reference row has %d logits, compared row %d", len(ref), len(alt))
	}
	nll, err := NLL(alt, target)
	if err != nil {
		return err
	}
	same := len(ref) > 0 && &ref[0] == &alt[0]
	var kl float64
	if !same {
		kl, err = sc.KL(ref, alt)
		if err != nil {
			return err
		}
	}
	st.NLL += nll
	st.N++
	st.KL += kl
	if same || pick.ArgMax(ref) == pick.ArgMax(alt) {
		st.Top1++
	}
	return nil
}

// KL returns KL(ref || alt) in nats for two logits rows of the same
// length, as Scorer.KL does, for a caller with a row or two to compare.
func KL(ref, alt []float32) (float64, error) {
	var sc Scorer
	return sc.KL(ref, alt)
}

// KL returns KL(ref || alt) = sum p_ref (log p_ref - log p_alt) in nats
// for two logits rows of the same length.
func (sc *Scorer) KL(ref, alt []float32) (float64, error) {
	if len(ref) != len(alt) {
		return 0, fmt.Errorf("eval: reference row has %d logits, compared row %d", len(ref), len(alt))
	}
	if cap(sc.ref) < len(ref) {
		sc.ref = make([]float64, len(ref))
		sc.alt = make([]float64, len(ref))
	}
	lr, err := LogSoftmax(sc.ref[:cap(sc.ref)], ref)
	if err != nil {
		return 0, fmt.Errorf("reference: %w", err)
	}
	la, err := LogSoftmax(sc.alt[:cap(sc.alt)], alt)
	if err != nil {
		return 0, err
	}
	var kl float64
	for i, l := range lr {
		p := mathx.Exp(l)
		if p == 0 {
			continue // 0 * log 0 = 0, even where alt gives the token no mass
		}
		kl += p * (l - la[i])
	}
	// KL is non-negative; rounding can leave a few ulps below zero for
	// near-identical rows.
	return math.Max(kl, 0), nil
}

// Verdict grades a configuration against the reference.
type Verdict string

// Verdicts, from best to worst; the reference row gets VerdictRef, and a
// compressed configuration whose cache encoded no block (its hot window and
// sinks covered every sequence) VerdictNothingCompressed: its figures are
// the reference's and grade nothing.
const (
	VerdictRef               Verdict = "ref"
	VerdictAccept            Verdict = "ACCEPT"
	VerdictMarginal          Verdict = "MARGINAL"
	VerdictReject            Verdict = "REJECT"
	VerdictNothingCompressed Verdict = "nothing compressed"
)

// Grade returns the verdict of configuration c, scored against the
// reference on sequences of at most longest tokens:
// VerdictNothingCompressed when c's settings in effect (c.Settings, filled
// in by the tool) name a codec but encode no block of such a sequence (see
// kvconfig.Settings.NothingCompressed), else Judge's verdict.
func Grade(c Config, longest int, deltaPPL, top1 float64) Verdict {
	if c.Settings != nil && c.Settings.NothingCompressed(longest) != nil {
		return VerdictNothingCompressed
	}
	return Judge(deltaPPL, top1)
}

// LongestFed returns the most tokens Run feeds one sequence over units:
// all of a unit's tokens but the last, which is only a target.
func LongestFed(units []Unit) int {
	n := 0
	for _, u := range units {
		n = max(n, len(u.Tokens)-1)
	}
	return n
}

// Judge returns ACCEPT when |ΔPPL| <= 1% and top-1 >= 95%, MARGINAL when
// |ΔPPL| <= 3% and top-1 >= 90%, and REJECT otherwise (NaN included).
// Both arguments are in percent.
func Judge(deltaPPL, top1 float64) Verdict {
	d := math.Abs(deltaPPL)
	switch {
	case d <= 1 && top1 >= 95:
		return VerdictAccept
	case d <= 3 && top1 >= 90:
		return VerdictMarginal
	}
	return VerdictReject
}
