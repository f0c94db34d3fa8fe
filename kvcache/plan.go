package kvcache

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
)

// PlanFormat names the policy-file format ReadPlan reads.
const PlanFormat = "kakeya-kv-plan/1"

// A LayerPlan is the codec of one layer's keys and of its values, as codec
// spec strings; "none" keeps a side's full blocks as bf16, as a boundary
// layer does.
type LayerPlan struct {
	K string `json:"k"`
	V string `json:"v"`
}

// ParseLayerCodecs reads per-layer codecs written as "K/V|K/V|...", one
// K/V pair per layer from layer 0, e.g. "none/none|kakeya:b=2/int4|none/int8".
// "none" (or "bf16") keeps a side uncompressed.
func ParseLayerCodecs(s string) ([]LayerPlan, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []LayerPlan
	for i, f := range strings.Split(s, "|") {
		k, v, ok := strings.Cut(f, "/")
		if !ok {
			return nil, fmt.Errorf("layer %d %q: want K/V, the key and value codecs separated by /", i, f)
		}
		lp := LayerPlan{K: planSide(k), V: planSide(v)}
		for _, side := range []struct{ name, spec string }{{"key", lp.K}, {"value", lp.V}} {
			if side.spec == "" {
				return nil, fmt.Errorf("layer %d %q: empty %s codec (write none to keep it uncompressed)", i, f, side.name)
			}
			if side.spec == "none" {
				continue
			}
			if _, err := newCodec(side.spec); err != nil {
				return nil, fmt.Errorf("layer %d %s codec %q: %w", i, side.name, side.spec, err)
			}
		}
		out = append(out, lp)
	}
	return out, nil
}

// planSide trims one side of a layer entry and writes an uncompressed side
// as "none".
func planSide(v string) string {
	v = strings.TrimSpace(v)
	if strings.EqualFold(v, "none") || strings.EqualFold(v, "bf16") {
		return "none"
	}
	return v
}

// FormatLayerCodecs writes layers in the form ParseLayerCodecs reads.
func FormatLayerCodecs(layers []LayerPlan) string {
	parts := make([]string, len(layers))
	for i, l := range layers {
		parts[i] = planSide(l.K) + "/" + planSide(l.V)
	}
	return strings.Join(parts, "|")
}

// A Plan is a per-layer cache policy file, as kakeya-eval allocate writes
// it and the tools' --kv-policy reads it: the codecs of every layer, and
// what the allocation that made it aimed at and predicted.
type Plan struct {
	Format string      `json:"format"`
	Layers []LayerPlan `json:"layers"`
	// TargetRatio is the whole-cache ratio (bf16 bytes / bytes) asked for;
	// Ratio and Bytes what the chosen codecs take as the sensitivity run
	// accounted them; PredictedKL the sum of the chosen sides' measured KL.
	TargetRatio float64 `json:"target_ratio,omitempty"`
	Ratio       float64 `json:"ratio,omitempty"`
	Bytes       int64   `json:"bytes,omitempty"`
	PredictedKL float64 `json:"predicted_kl,omitempty"`
	// Source names the sensitivity file the plan was allocated from.
	Source string `json:"source,omitempty"`
}

// ReadPlan reads and checks a policy file.
func ReadPlan(path string) (Plan, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Plan{}, fmt.Errorf("policy file: %w", err)
	}
	var p Plan
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Plan{}, fmt.Errorf("policy file %s: %w", path, err)
	}
	if p.Format != PlanFormat {
		return Plan{}, fmt.Errorf("policy file %s: format %q, want %q", path, p.Format, PlanFormat)
	}
	if len(p.Layers) == 0 {
		return Plan{}, fmt.Errorf("policy file %s: no layers", path)
	}
	if _, err := ParseLayerCodecs(FormatLayerCodecs(p.Layers)); err != nil {
		return Plan{}, fmt.Errorf("policy file %s: %w", path, err)
	}
	return p, nil
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
func PlanFor(s Sensitivity, targetRatio float64) (Plan, error) {
	if !(targetRatio >= 1) || math.IsInf(targetRatio, 0) {
		return Plan{}, fmt.Errorf("target ratio %v: want a finite ratio >= 1", targetRatio)
	}
	items, err := s.Items()
	if err != nil {
		return Plan{}, err
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
			return Plan{}, fmt.Errorf("target ratio %v: the smallest measured codecs reach only %.3fx", targetRatio, float64(s.BF16)/float64(least))
		}
		return Plan{}, err
	}
	p := Plan{Format: PlanFormat, Layers: make([]LayerPlan, s.Layers), TargetRatio: targetRatio, Bytes: bytes, PredictedKL: cost}
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

// errPlanConflict is returned by Validate when a per-layer plan is combined
// with settings it replaces.
var errPlanConflict = settingErrorf("{layer-codecs}{or-kv-policy} sets every layer's codecs: drop {kv-codec}, {k-codec}, {v-codec}, {k-bits}, {v-bits} and {boundary}")
