package kvconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/kakeya-ai/kakeya/codec"
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
// K/V pair per layer from layer 0, e.g. "none/none|kakeya-block:b=2/int4|none/int8".
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
			if _, err := codec.Parse(side.spec); err != nil {
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
// it (kvplan.PlanFor) and the kv-policy setting reads it: the codecs of every layer, and
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

// ReadPlan reads and checks the policy file at path through p.ReadFile.
func (p Parser) ReadPlan(path string) (Plan, error) {
	if p.ReadFile == nil {
		return Plan{}, fmt.Errorf("policy file %s: this parser reads no files", path)
	}
	raw, err := p.ReadFile(path)
	if err != nil {
		return Plan{}, fmt.Errorf("policy file: %w", err)
	}
	pl, err := ParsePlan(raw)
	if err != nil {
		return Plan{}, fmt.Errorf("policy file %s: %w", path, err)
	}
	return pl, nil
}

// ParsePlan reads and checks the JSON of a policy file: its format, and
// every layer's codecs.
func ParsePlan(data []byte) (Plan, error) {
	var p Plan
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Plan{}, err
	}
	if p.Format != PlanFormat {
		return Plan{}, fmt.Errorf("format %q, want %q", p.Format, PlanFormat)
	}
	if len(p.Layers) == 0 {
		return Plan{}, errors.New("no layers")
	}
	if _, err := ParseLayerCodecs(FormatLayerCodecs(p.Layers)); err != nil {
		return Plan{}, err
	}
	return p, nil
}

// ParseLayers reads a list of layer indices separated by commas or
// semicolons, e.g. "0,1,-2,-1" (negative from the end). "" and "none" give
// no layers; a repeated layer is an error.
func ParseLayers(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.EqualFold(s, "none") {
		return nil, nil
	}
	var out []int
	seen := map[int]bool{}
	for _, f := range strings.Split(strings.ReplaceAll(s, ";", ","), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("layer list %q: %q is not an integer", s, f)
		}
		if seen[n] {
			return nil, fmt.Errorf("layer list %q: layer %d listed twice", s, n)
		}
		seen[n] = true
		out = append(out, n)
	}
	return out, nil
}
