package kvplan

import (
	"fmt"
	"math"
	"os"

	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

// ReadPlan reads and checks the policy file at path (kakeya-eval allocate
// writes them; the kv-policy setting reads them).
func ReadPlan(path string) (kvconfig.Plan, error) {
	return kvconfig.Parser{ReadFile: os.ReadFile}.ReadPlan(path)
}

// SensitivityFormat names the file format of a Sensitivity.
const SensitivityFormat = "kakeya-kv-sensitivity/1"

// Sensitivity is what a sensitivity run measured on calibration text: for
// every layer side and candidate codec, the harm (mean KL divergence from
// the uncompressed cache) and the bytes when only that side is compressed
// so, every other side holding bf16 blocks. Bytes are the cache's own
// accounting, summed over the run's passages.
type Sensitivity struct {
	Format string `json:"format"`
	Layers int    `json:"layers"`
	// SideBF16 is one layer side's bytes when kept uncompressed (full
	// blocks stored as bf16 with their codec header, as a boundary layer's
	// are; the same for every side); BF16 is the plain bf16 cache the
	// whole-cache ratio is taken against.
	SideBF16 int64 `json:"side_bf16_bytes"`
	BF16     int64 `json:"bf16_bytes"`
	// Entries lists the measurements.
	Entries []SensitivityEntry `json:"entries"`
	// Settings records how the run was made (informational).
	Settings map[string]any `json:"settings,omitempty"`
}

// A SensitivityEntry is one layer side compressed with one codec.
type SensitivityEntry struct {
	Layer int     `json:"layer"`
	KV    int     `json:"kv"` // 0 keys, 1 values
	Spec  string  `json:"spec"`
	Bytes int64   `json:"bytes"`
	KL    float64 `json:"kl"`
}

// Items returns the allocation problem of s: per layer side, keeping it
// bf16 (cost 0) or any codec measured for it. A measured KL below zero
// (sampling noise around a harmless codec) counts as 0.
func (s Sensitivity) Items() ([]Item, error) {
	if s.Layers <= 0 || s.SideBF16 <= 0 {
		return nil, fmt.Errorf("sensitivity: %d layers, %d bf16 bytes per side", s.Layers, s.SideBF16)
	}
	items := make([]Item, 2*s.Layers)
	for i := range items {
		items[i] = Item{Layer: i / 2, KV: i % 2, Choices: []Choice{{Spec: "none", Bytes: s.SideBF16}}}
	}
	for _, e := range s.Entries {
		if e.Layer < 0 || e.Layer >= s.Layers || (e.KV != 0 && e.KV != 1) {
			return nil, fmt.Errorf("sensitivity: entry layer %d kv %d outside %d layers", e.Layer, e.KV, s.Layers)
		}
		if e.Bytes <= 0 || math.IsNaN(e.KL) || math.IsInf(e.KL, 0) {
			return nil, fmt.Errorf("sensitivity: layer %d %s %s: bytes %d, KL %v", e.Layer, kvName(e.KV), e.Spec, e.Bytes, e.KL)
		}
		it := &items[2*e.Layer+e.KV]
		it.Choices = append(it.Choices, Choice{Spec: e.Spec, Bytes: e.Bytes, Cost: max(e.KL, 0)})
	}
	return items, nil
}

// PlanFor allocates the plan of least predicted KL whose whole cache is at
// least targetRatio times smaller than bf16, as s accounted the bytes.
func PlanFor(s Sensitivity, targetRatio float64) (kvconfig.Plan, error) {
	if !(targetRatio >= 1) || math.IsInf(targetRatio, 0) {
		return kvconfig.Plan{}, fmt.Errorf("target ratio %v: want a finite ratio >= 1", targetRatio)
	}
	items, err := s.Items()
	if err != nil {
		return kvconfig.Plan{}, err
	}
	budget := int64(math.Floor(float64(s.BF16) / targetRatio))
	pick, cost, bytes, err := Allocate(items, budget)
	if err != nil {
		var least int64
		for _, it := range items {
			m := it.Choices[0].Bytes
			for _, c := range it.Choices {
				m = min(m, c.Bytes)
			}
			least += m
		}
		if least > 0 {
			return kvconfig.Plan{}, fmt.Errorf("target ratio %v: the smallest measured codecs reach only %.3fx", targetRatio, float64(s.BF16)/float64(least))
		}
		return kvconfig.Plan{}, err
	}
	p := kvconfig.Plan{Format: kvconfig.PlanFormat, Layers: make([]kvconfig.LayerPlan, s.Layers), TargetRatio: targetRatio, Bytes: bytes, PredictedKL: cost}
	if bytes > 0 {
		p.Ratio = float64(s.BF16) / float64(bytes)
	}
	for i, it := range items {
		spec := it.Choices[pick[i]].Spec
		if it.KV == 0 {
			p.Layers[it.Layer].K = spec
		} else {
			p.Layers[it.Layer].V = spec
		}
	}
	return p, nil
}

// kvName names a side, 0 keys and 1 values.
func kvName(kv int) string {
	if kv == 0 {
		return "K"
	}
	return "V"
}

// DefaultChoices returns the codecs a sensitivity run measures when it is
// not told which (kakeya-eval sensitivity without --choices): int8 and
// int4 and, where the calibration has principal components (pca),
// kakeya-pc at the fixed rates 1.5, 2, 3 and 4 bits a value, the rates
// whose per-layer plans were the best configurations measured on
// ref-qwen2-6m (docs/results/2026-11-26-per-component-bits.md: the 6x
// whole-cache plan at KL 0.00015, the plan at uniform rate 2's ratio at a
// tenth of its KL). Every one of them is encoded where the cache lives,
// on the CUDA device too (enc_int8, enc_int4, enc_pc), so a plan made of
// them makes one host wait a decode step there. kakeya-block, whose
// blocks a GPU reads back and encodes on the host, is measured only when
// --choices names it.
func DefaultChoices(pca bool) []string {
	c := []string{"int8", "int4"}
	if pca {
		c = append(c, "kakeya-pc:rate=1.5", "kakeya-pc:rate=2", "kakeya-pc:rate=3", "kakeya-pc:rate=4")
	}
	return c
}
