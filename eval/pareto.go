package eval

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/kakeya-ai/kakeya/internal/outfile"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

// paretoPoint is one configuration on the ratio–KL plane.
type paretoPoint struct {
	name      string
	ratio, kl float64
}

// paretoPoints returns the configurations that can stand on a log-KL axis
// (compressed, with a positive, finite KL), and the names of those that
// cannot (KL 0: bit-exact with the reference at this precision).
func (r *Report) paretoPoints() (pts []paretoPoint, off []string) {
	for _, c := range r.Configs {
		ratio, kl := float64(c.Ratio), float64(c.MeanKL)
		if c.Config.IsReference() || math.IsNaN(ratio) || ratio <= 0 {
			continue
		}
		if !(kl > 0) || math.IsInf(kl, 0) {
			off = append(off, c.Config.Name)
			continue
		}
		pts = append(pts, paretoPoint{c.Config.Name, ratio, kl})
	}
	return pts, off
}

// frontier returns the points no other point beats on both axes (a higher
// or equal ratio with a lower or equal KL, one of them strictly), by
// ratio ascending.
func frontier(pts []paretoPoint) []paretoPoint {
	s := slices.Clone(pts)
	// By ratio descending, then KL ascending: a point is on the frontier
	// when its KL is below every KL seen at a higher ratio.
	slices.SortFunc(s, func(a, b paretoPoint) int {
		if c := cmp.Compare(b.ratio, a.ratio); c != 0 {
			return c
		}
		return cmp.Compare(a.kl, b.kl)
	})
	var out []paretoPoint
	best := math.Inf(1)
	for _, p := range s {
		if p.kl < best {
			out = append(out, p)
			best = p.kl
		}
	}
	slices.Reverse(out)
	return out
}

// WritePareto draws the report's configurations as whole-cache ratio
// against mean KL (log scale), one labelled marker per configuration and
// the Pareto frontier as a line, and writes the PNG to path as
// outfile.Write does (a regular file atomically).
// Configurations with KL 0 cannot be drawn on a log axis and are named in
// the caption.
func (r *Report) WritePareto(path, title string) error {
	pts, off := r.paretoPoints()
	if len(pts) == 0 {
		return fmt.Errorf("eval: pareto plot: no configuration with a positive KL to draw")
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "whole-cache ratio vs bf16 (higher is smaller)"
	p.Y.Label.Text = "mean KL(ref ‖ config), log scale"
	if len(off) > 0 {
		p.X.Label.Text += fmt.Sprintf("\nKL 0, not drawn: %v", off)
	}
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: 1}
	p.Add(plotter.NewGrid())

	xys := make(plotter.XYs, len(pts))
	labels := make([]string, len(pts))
	for i, q := range pts {
		xys[i] = plotter.XY{X: q.ratio, Y: q.kl}
		labels[i] = q.name
	}
	front := frontier(pts)
	fxy := make(plotter.XYs, len(front))
	for i, q := range front {
		fxy[i] = plotter.XY{X: q.ratio, Y: q.kl}
	}
	line, err := plotter.NewLine(fxy)
	if err != nil {
		return fmt.Errorf("eval: pareto plot: %w", err)
	}
	line.Color = color.RGBA{R: 200, G: 60, B: 40, A: 255}
	line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	scatter, err := plotter.NewScatter(xys)
	if err != nil {
		return fmt.Errorf("eval: pareto plot: %w", err)
	}
	scatter.GlyphStyle.Shape = draw.CircleGlyph{}
	scatter.GlyphStyle.Radius = vg.Points(3)
	scatter.GlyphStyle.Color = color.RGBA{B: 160, A: 255}
	lab, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return fmt.Errorf("eval: pareto plot: %w", err)
	}
	for i := range lab.TextStyle {
		lab.TextStyle[i].Font.Size = vg.Points(7)
		lab.TextStyle[i].XAlign = draw.XLeft
	}
	lab.Offset = vg.Point{X: vg.Points(4), Y: vg.Points(-3)}
	p.Add(line, scatter, lab)
	p.Legend.Add("Pareto frontier", line)
	p.Legend.Top = true
	// Fix the ranges (a single point, or equal KLs, would give an empty
	// log range), with room on the right for the labels.
	lo, hi := math.Inf(1), 0.0
	xlo, xhi := math.Inf(1), 0.0
	for _, q := range pts {
		lo, hi = min(lo, q.kl), max(hi, q.kl)
		xlo, xhi = min(xlo, q.ratio), max(xhi, q.ratio)
	}
	p.Y.Min, p.Y.Max = lo/2, hi*2
	p.X.Min, p.X.Max = xlo*0.95, xhi*1.15

	wt, err := p.WriterTo(9*vg.Inch, 6*vg.Inch, "png")
	if err != nil {
		return fmt.Errorf("eval: pareto plot: %w", err)
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		return fmt.Errorf("eval: pareto plot: %w", err)
	}
	if err := outfile.WriteFile(path, buf.Bytes()); err != nil {
		return fmt.Errorf("eval: pareto plot: %w", err)
	}
	return nil
}

// ReadReportPoints reads the configurations of a JSON report (WriteJSON)
// back, enough of each to draw it: name, spec, whole-cache ratio and mean
// KL. Plots of old reports can then be redrawn without rerunning them.
func ReadReportPoints(path string) (*Report, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	var in struct {
		Model    string `json:"model"`
		Data     string `json:"data"`
		Passages int    `json:"passages"`
		Tokens   int    `json:"scored_tokens"`
		Configs  []struct {
			Config struct {
				Name string `json:"name"`
				Spec string `json:"spec"`
			} `json:"config"`
			Ratio  *float64 `json:"kv_ratio_vs_bf16"`
			MeanKL *float64 `json:"mean_kl"`
		} `json:"configs"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("eval: %s: %w", path, err)
	}
	if len(in.Configs) == 0 {
		return nil, fmt.Errorf("eval: %s: no configurations", path)
	}
	r := &Report{Model: in.Model, Data: in.Data, Passages: in.Passages, Tokens: in.Tokens}
	for _, c := range in.Configs {
		var spec kvconfig.Spec // the reference's is empty
		if c.Config.Spec != "" {
			if spec, err = kvconfig.Parse(c.Config.Spec); err != nil {
				return nil, fmt.Errorf("eval: %s: configuration %s: %w", path, c.Config.Name, err)
			}
		}
		cr := ConfigReport{Config: Config{Name: c.Config.Name, Spec: spec}, Ratio: Float(math.NaN()), MeanKL: Float(math.NaN())}
		if c.Ratio != nil {
			cr.Ratio = Float(*c.Ratio)
		}
		if c.MeanKL != nil {
			cr.MeanKL = Float(*c.MeanKL)
		}
		r.Configs = append(r.Configs, cr)
	}
	return r, nil
}
