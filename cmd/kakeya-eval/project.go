package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/kakeya-ai/kakeya/calibrate"
	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
	"github.com/kakeya-ai/kakeya/weights"
)

const projectUsage = `usage: kakeya-eval project [flags]

Projects the whole-cache ratio against a bf16 cache at long contexts, byte
for byte from the block sizes the codecs write (kvplan.CacheBytes, the
accounting of kvcache.Config.BytesFor for the CPU store), for model shapes,
without running a model. Sliding layers count the blocks their window
still sees: hot beside full layers (the Gemma shapes, whose full layers
the codec codes), through the codec where every layer slides (Mistral);
the bf16 reference has the same windows, or with --against all none (a
bf16 cache of every position). Prints
a Markdown table: one row per shape, codec,
block and hot window (--windows) and boundary setting, one column per
--tokens. An entry of --kv is one codec spec for keys and values, K/V
for a codec per side (kakeya-pc:coded=16/kakeya-pc), or kakeya, the kakeya
preset's codecs (` + kvconfig.PresetKCodec + `/` + kvconfig.PresetVCodec + `). A kakeya-pc or kvtc spec without block= gets the row's block
size, so that its allocation charges its per-block costs to the blocks it
codes, as a cache of that block size allocates it.

kakeya-pc's and kvtc's blocks depend on their calibration mostly through
the allocation, which fills the rate's budget (entropy-coded blocks also
vary a little with their data: the projection counts the size of one
Gaussian probe block): a shape --calib fits uses that calibration's
statistics; other shapes get synthetic ones (a spectrum falling 64-fold
over the head dim), marked "synthetic" in the table.

Flags:
`

// projectShapes are the shapes --shapes names, from the models'
// config.json: layers, KV heads, head_dim.
var projectShapes = map[string][3]int{
	"ref-qwen2-6m": {6, 2, 64},
	"qwen2.5-0.5b": {24, 2, 64},
	"qwen3-0.6b":   {28, 8, 128},
	"llama-3-8b":   {32, 8, 128},
	"gemma2-2b":    {26, 4, 256},
	"gemma3-1b":    {26, 1, 256},
	"gemma3-4b":    {34, 4, 256},
	"mistral-7b":   {32, 8, 128},
}

// projectSliding are the sliding layers of the shapes that have them:
// the window, and every pattern-th layer full (Gemma 2: even layers
// slide; Gemma 3: five of six; 0: none, Mistral's every layer slides),
// as the models' config.json say.
var projectSliding = map[string]struct{ window, pattern int }{
	"gemma2-2b":  {4096, 2},
	"gemma3-1b":  {512, 6},
	"gemma3-4b":  {1024, 6},
	"mistral-7b": {4096, 0},
}

// shapeOf returns the cache shape of a --shapes entry, with its sliding
// windows.
func shapeOf(name string, sh [3]int) kvcache.Shape {
	m := kvcache.Shape{Layers: sh[0], KVHeads: sh[1], HeadDim: sh[2]}
	if sl, ok := projectSliding[name]; ok {
		m.Windows = make([]int, sh[0])
		for i := range m.Windows {
			if sl.pattern == 0 || (i+1)%sl.pattern != 0 {
				m.Windows[i] = sl.window
			}
		}
	}
	return m
}

type projectFlags struct {
	shapes, kv, windows, tokens, boundary, calib, model, against string
	bytes                                                        bool
}

func runProject(args []string, stdout, stderr io.Writer) error {
	var f projectFlags
	fs := newFlagSet("project", projectUsage, stderr)
	fs.StringVar(&f.shapes, "shapes", "qwen2.5-0.5b,qwen3-0.6b,llama-3-8b", "model shapes, comma-separated: "+strings.Join(shapeNames(), ", ")+", or LAYERSxKVHEADSxHEADDIM")
	fs.StringVar(&f.kv, "kv", "fp8 int4 kakeya-block:b=2 kakeya-pc:rate=2.5", "codec `SPECS` for keys and values, separated by spaces: a spec, K/V (a codec per side) or kakeya (the preset's codecs)")
	fs.StringVar(&f.windows, "windows", "64:64,32:32,16:16", "block and hot window sizes in tokens, BLOCK:HOT, comma-separated")
	fs.StringVar(&f.tokens, "tokens", "8192,32768,131072", "context lengths in tokens, comma-separated")
	fs.StringVar(&f.boundary, "boundary", "none,0;-1", `boundary settings, comma-separated, layers within one joined by ";" ("none": every layer coded)`)
	fs.StringVar(&f.calib, "calib", "", "calibration file whose statistics kakeya-pc uses for the shape it fits (with --model)")
	fs.StringVar(&f.model, "model", "", "the model directory whose config.json --calib is checked against")
	fs.StringVar(&f.against, "against", "window", "the bf16 reference of the ratios: window (a cache of the same sliding windows) or all (of every position)")
	fs.BoolVar(&f.bytes, "bytes", false, "print the bytes the cache holds beside each ratio, in MiB")
	if err := parse(fs, projectUsage, args, stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("project: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("project: unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	if err := writeProjection(stdout, &f); err != nil {
		return fmt.Errorf("project: %w", err)
	}
	return nil
}

func shapeNames() []string {
	return []string{"ref-qwen2-6m", "qwen2.5-0.5b", "qwen3-0.6b", "llama-3-8b", "gemma2-2b", "gemma3-1b", "gemma3-4b", "mistral-7b"}
}

// The largest shape and context kakeya-eval project takes: past every
// model's (its arithmetic and the synthetic calibration's head_dim^2
// basis stay small), and what keeps the counts from overflowing.
const (
	maxProjectLayers  = 1024
	maxProjectKVHeads = 1024
	maxProjectHeadDim = 1024
	maxProjectHeads   = 16384 // layers x kv heads
	maxProjectTokens  = 1 << 30
	maxProjectBlock   = 4096 // tokens; its probe blocks take block x head_dim values
)

// parseShape reads a name of projectShapes or LAYERSxKVHEADSxHEADDIM.
func parseShape(s string) ([3]int, error) {
	if sh, ok := projectShapes[s]; ok {
		return sh, nil
	}
	var sh [3]int
	parts := strings.Split(s, "x")
	if len(parts) != 3 {
		return sh, fmt.Errorf("--shapes %q: not one of %s, nor LAYERSxKVHEADSxHEADDIM", s, strings.Join(shapeNames(), ", "))
	}
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v <= 0 {
			return sh, fmt.Errorf("--shapes %q: %q is not a positive integer", s, p)
		}
		if most := [3]int{maxProjectLayers, maxProjectKVHeads, maxProjectHeadDim}[i]; v > most {
			return sh, fmt.Errorf("--shapes %q: %s %d is past the most this takes, %d", s, [3]string{"layers", "kv heads", "head_dim"}[i], v, most)
		}
		sh[i] = v
	}
	if sh[0]*sh[1] > maxProjectHeads {
		return sh, fmt.Errorf("--shapes %q: %d layers x %d kv heads is past the most this takes, %d heads (each gets its own codec)", s, sh[0], sh[1], maxProjectHeads)
	}
	return sh, nil
}

// parseInts reads a comma-separated list of integers in [lo, hi].
func parseInts(flag, s string, lo, hi int) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || v < lo || v > hi {
			return nil, fmt.Errorf("%s %q: %q is not an integer from %d to %d", flag, s, p, lo, hi)
		}
		out = append(out, v)
	}
	return out, nil
}

// writeProjection prints the table f asks for.
func writeProjection(w io.Writer, f *projectFlags) error {
	windows, err := parseWindows(f.windows)
	if err != nil {
		return err
	}
	tokens, err := parseInts("--tokens", f.tokens, 1, maxProjectTokens)
	if err != nil {
		return err
	}
	if f.against != "window" && f.against != "all" {
		return fmt.Errorf("--against %q: want window or all", f.against)
	}
	var real *codec.Calibration
	if f.calib != "" {
		if f.model == "" {
			return errors.New("--calib needs --model, the model directory it was made for")
		}
		cfg, err := weights.LoadConfig(f.model)
		if err != nil {
			return fmt.Errorf("--model: %w", err)
		}
		if real, err = calibrate.Load(f.calib, cfg); err != nil {
			return fmt.Errorf("--calib: %w", err)
		}
	}
	fmt.Fprintf(w, "| model | layers x kv heads x head_dim | codec | block | hot | boundary |")
	for _, n := range tokens {
		fmt.Fprintf(w, " %s |", tokenLabel(n))
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "| --- | --- | --- | --- | --- | --- |"+strings.Repeat(" --- |", len(tokens))+"\n")
	for _, name := range strings.Split(f.shapes, ",") {
		name = strings.TrimSpace(name)
		sh, err := parseShape(name)
		if err != nil {
			return err
		}
		cal, synthetic := real, false
		if cal == nil || cal.Layers != sh[0] || cal.KVHeads != sh[1] || cal.HeadDim != sh[2] {
			cal, synthetic = syntheticCalibration(sh[0], sh[1], sh[2]), true
		}
		for _, kv := range strings.Fields(f.kv) {
			for _, bnd := range strings.Split(f.boundary, ",") {
				for _, win := range windows {
					block, hot := win[0], win[1]
					sp, err := projectSpec(kv)
					if err != nil {
						return err
					}
					sp.BlockSize, sp.HotWindow, sp.Boundary = block, hot, strings.ReplaceAll(bnd, ";", ",")
					if hot == 0 {
						sp.HotWindow = -1 // none: 0 in a Spec means one block
					}
					pr, err := kvplan.ProjectSpec(sp, shapeOf(name, sh), cal, tokens)
					if err != nil {
						return fmt.Errorf("%s %s: %w", name, kv, err)
					}
					label := kv
					if synthetic && (principal(sp.K) || principal(sp.V)) {
						label += " (synthetic)"
					}
					fmt.Fprintf(w, "| %s | %dx%dx%d | %s | %d | %d | %s |", name, sh[0], sh[1], sh[2], label, block, hot, bnd)
					for _, x := range pr {
						if f.against == "all" {
							// A bf16 cache of every position: the shape
							// without its windows.
							all := kvcache.Shape{Layers: sh[0], KVHeads: sh[1], HeadDim: sh[2]}
							if x.BF16, err = kvplan.CacheBytes(kvcache.Policy{HotBF16: true}, all, block, x.Tokens); err != nil {
								return fmt.Errorf("%s: %w", name, err)
							}
						}
						fmt.Fprintf(w, " %.2fx", x.Ratio())
						if f.bytes {
							fmt.Fprintf(w, " (%.1f MiB)", float64(x.Bytes)/(1<<20))
						}
						fmt.Fprint(w, " |")
					}
					fmt.Fprintln(w)
				}
			}
		}
	}
	return nil
}

// parseWindows reads "64:64,32:16" as block and hot window pairs.
func parseWindows(s string) ([][2]int, error) {
	var out [][2]int
	for _, p := range strings.Split(s, ",") {
		b, h, ok := strings.Cut(strings.TrimSpace(p), ":")
		block, err1 := strconv.Atoi(b)
		hot, err2 := strconv.Atoi(h)
		if !ok || err1 != nil || err2 != nil || block < 1 || block > maxProjectBlock || hot < 0 || hot > maxProjectTokens {
			return nil, fmt.Errorf("--windows %q: %q is not BLOCK:HOT with BLOCK from 1 to %d and HOT from 0 to %d", s, p, maxProjectBlock, maxProjectTokens)
		}
		out = append(out, [2]int{block, hot})
	}
	return out, nil
}

// principal reports whether the codec spec s names a codec in a
// calibrated principal basis (codec.Registration.Principal).
func principal(s string) bool { return codec.IsPrincipal(s) }

// projectSpec returns the cache settings of a --kv entry: the codecs of
// keys and values (K/V one per side, kakeya the preset's) and no
// preconditioning. A kakeya-pc or kvtc spec without block= allocates for
// the row's block size, as a cache of that block size allocates it
// (kvplan.Build).
func projectSpec(kv string) (kvconfig.Spec, error) {
	k, v, ok := strings.Cut(kv, "/")
	switch {
	case strings.EqualFold(kv, kvconfig.PresetName):
		k, v = kvconfig.PresetKCodec, kvconfig.PresetVCodec
	case !ok:
		v = k
	case k == "" || v == "":
		return kvconfig.Spec{}, fmt.Errorf("--kv %q: want K/V, a codec spec on each side of /", kv)
	}
	for _, s := range []string{k, v} {
		if _, err := codec.ParseSpec(s); err != nil {
			return kvconfig.Spec{}, fmt.Errorf("--kv: %w", err)
		}
	}
	return kvconfig.Spec{K: k, V: v, Precondition: kvconfig.Off}, nil
}

// tokenLabel writes 8192 as "8k" and 1000 as "1000".
func tokenLabel(n int) string {
	if n%1024 == 0 {
		return strconv.Itoa(n/1024) + "k"
	}
	return strconv.Itoa(n)
}

// syntheticCalibration returns identity query factors and, per layer
// side, principal components along the axes whose standard deviations
// fall geometrically 64-fold over d, with between-block variances a tenth
// of the within-block ones.
func syntheticCalibration(layers, kvHeads, d int) *codec.Calibration {
	st := &codec.PCAStats{Mean: make([]float32, d), Basis: make([]float32, d*d), Var: make([]float32, d), Between: make([]float32, d)}
	for j := 0; j < d; j++ {
		st.Basis[j*d+j] = 1
		sd := math.Pow(2, -6*float64(j)/float64(d))
		st.Var[j] = float32(sd * sd)
		st.Between[j] = st.Var[j] / 10
	}
	cal := &codec.Calibration{Layers: layers, KVHeads: kvHeads, HeadDim: d, Model: "synthetic"}
	eye := make([]float32, d*d)
	for i := 0; i < d; i++ {
		eye[i*d+i] = 1
	}
	for range layers * kvHeads {
		cal.Chol = append(cal.Chol, eye)
		cal.KPCA = append(cal.KPCA, st)
	}
	for range layers {
		cal.VPCA = append(cal.VPCA, st)
	}
	return cal
}
