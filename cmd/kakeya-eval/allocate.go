package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/eval"
	"github.com/kakeya-ai/kakeya/internal/cli"
	"github.com/kakeya-ai/kakeya/internal/kvflags"
	"github.com/kakeya-ai/kakeya/internal/outfile"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
	"github.com/kakeya-ai/kakeya/weights"
)

const sensUsage = `usage: kakeya-eval sensitivity --model DIR|HF_ID --out FILE [flags]

Measures what each layer's keys and each layer's values can take: for every
layer side and every codec of --choices, the mean KL divergence from the
uncompressed cache, and the bytes, when only that side is compressed (every
other side keeps bf16 blocks), over passages of calibration text (the
passages protocol of kakeya-eval ppl). kakeya-eval allocate turns the file
into a per-layer policy.

The cache flags other than the codecs (--block-size, --hot-window, --sinks,
--precond, --calib-codebooks, --cache-type) apply to every measurement, as
they will to the policy: measure with the settings you will run.

Flags:
`

const allocUsage = `usage: kakeya-eval allocate --sensitivity FILE (--target-ratio R | --like SPEC) --out FILE

Picks per layer and side (keys, values) one codec measured by kakeya-eval
sensitivity, or bf16, so that the whole cache is at least R times smaller
than bf16 (as the sensitivity run accounted its bytes) at the least
predicted KL (the sum of the chosen sides' measured KL). --like SPEC aims at
the ratio the codec SPEC reaches on every side. The policy file is what
kakeya-run and kakeya-eval ppl take with --kv-policy FILE (or
policy=FILE in a --config).

Flags:
`

// choicesUsage describes --choices and its default (kvplan.DefaultChoices).
const choicesUsage = "codec `SPECS` to measure, separated by spaces (default: int8 int4, and kakeya-pc:rate=1.5 kakeya-pc:rate=2 kakeya-pc:rate=3 kakeya-pc:rate=4 unless --calib has no principal components: codecs every device encodes itself; kakeya-block only when named here)"

func runSensitivity(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := pplFlags{cmd: "sensitivity", mode: eval.ModePassages}
	var choices string
	fs := newFlagSet("sensitivity", sensUsage, stderr)
	fs.StringVar(&f.model, "model", "", "model directory (config.json, safetensors, tokenizer.json), Hugging Face id or GGUF file")
	fs.StringVar(&f.data, "data", "", "calibration text (default $KAKEYA_SHARED/data/wikitext-2/valid.txt)")
	fs.IntVar(&f.ctx, "ctx", 0, "prefix tokens per passage (0: min(1024, model context - n-eval))")
	fs.IntVar(&f.nEval, "n-eval", 64, "scored tokens per passage")
	fs.IntVar(&f.passages, "passages", 8, "passages (0: all of --data)")
	fs.StringVar(&f.docs, "docs", "", "use only documents FROM:TO of --data (as ppl --docs)")
	fs.StringVar(&f.docSep, "doc-sep", "auto", "document separator for --docs: blank, line or auto")
	fs.StringVar(&choices, "choices", "", choicesUsage)
	fs.StringVar(&f.calib, "calib", "", "calibration file: preconditioned keys and calibrated codebooks, as ppl --calib")
	fs.StringVar(&f.calibCache, "calib-cache", "", "directory of the automatic calibrations, as ppl's: kakeya-pc choices without --calib are calibrated on the model here, once per model (default: the user cache directory's kakeya/calib)")
	fs.StringVar(&f.out, "out", "", "write the sensitivity JSON here (required)")
	fs.IntVar(&f.threads, "threads", 0, "compute threads per model (0: GOMAXPROCS)")
	fs.IntVar(&f.workers, "workers", 1, "passages evaluated at once")
	fs.StringVar(&f.device, "device", "cpu", "compute device")
	f.maxInput = cli.DefaultMaxInput
	fs.Var(&f.maxInput, "max-input", cli.MaxInputUsage)
	kvflags.Register(fs, &f.cache)
	if err := parse(fs, sensUsage, args, stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("sensitivity: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("sensitivity: unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	if f.out == "" {
		return errors.New("sensitivity: --out is required")
	}
	if f.cache.Compressed() || f.cache.KBits != 0 || f.cache.VBits != 0 || f.cache.Boundary != "" {
		return errors.New("sensitivity: the codecs are --choices; drop --kv-codec, --k-codec, --v-codec, the bit widths, --boundary and --layer-codecs")
	}
	specs := strings.Fields(choices)
	if !flagSet(fs, "choices") {
		pca, err := calibrationHasPCA(f.calib)
		if err != nil {
			return fmt.Errorf("sensitivity: --calib: %w", err)
		}
		specs = kvplan.DefaultChoices(pca)
		if !pca {
			fmt.Fprintf(stderr, "sensitivity: %s has no principal components (kakeya-eval calibrate --pca): measuring %s, without kakeya-pc\n", f.calib, strings.Join(specs, " "))
		}
	}
	if len(specs) == 0 {
		return errors.New("sensitivity: --choices is empty")
	}
	for i, s := range specs {
		sp, err := codec.ParseSpec(s)
		if err == nil {
			_, err = codec.New(sp)
		}
		if err != nil {
			return fmt.Errorf("sensitivity: --choices %q: %w", s, err)
		}
		specs[i] = sp.String()
	}
	if f.data == "" {
		f.data = sharedFile("data", "wikitext-2", "valid.txt")
	}
	var layers int
	var sides map[string]kvplan.SensitivityEntry
	configsFor := func(n int) ([]eval.Config, error) {
		var cs []eval.Config
		layers = n
		cs, sides = sensitivityConfigs(n, specs)
		return cs, nil
	}
	r, run, err := evaluate(ctx, &f, configsFor, stderr)
	var intr interrupted
	if err != nil && ctx.Err() != nil && !errors.As(err, &intr) {
		return interrupted("sensitivity: interrupted before scoring began; nothing written")
	}
	if err != nil {
		return kvflags.Error(err)
	}
	sens, err := sensitivityOf(r, layers, sides)
	if err != nil {
		return fmt.Errorf("sensitivity: %w", err)
	}
	data, err := json.MarshalIndent(sens, "", " ")
	if err != nil {
		return err
	}
	if err := outfile.WriteFile(f.out, append(data, '\n')); err != nil {
		return fmt.Errorf("sensitivity: %w", err)
	}
	fmt.Fprintf(stdout, "sensitivity: %d layers x 2 sides x %d codecs, %d passages, %d scored tokens, %.1fs (run %.1fs)\n",
		layers, len(specs), r.Passages, r.Tokens, r.Seconds, run.Seconds())
	return writeSensitivityTable(stdout, sens, specs)
}

// flagSet reports whether the command line set flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// calibrationHasPCA reports whether the calibration file at path holds
// principal components (kakeya-pc's statistics). Without a file (path
// empty) a kakeya-pc configuration gets the automatic calibration, which
// has them.
func calibrationHasPCA(path string) (bool, error) {
	if path == "" {
		return true, nil
	}
	st, err := weights.OpenFile(path)
	if err != nil {
		return false, err
	}
	defer st.Close()
	return slices.ContainsFunc(st.Names(), func(n string) bool { return strings.Contains(n, ".pca.") }), nil
}

// sideName names side kv (0 keys, 1 values) in configuration names.
func sideName(kv int) string { return [2]string{"k", "v"}[kv] }

// sensitivityConfigs returns the configurations of a sensitivity run: every
// side bf16 (the byte baseline), then one per layer side and codec with
// only that side compressed, and by name the layer side and codec each of
// those measures.
func sensitivityConfigs(layers int, specs []string) ([]eval.Config, map[string]kvplan.SensitivityEntry) {
	plan := func(layer, kv int, spec string) string {
		p := make([]kvconfig.LayerPlan, layers)
		for l := range p {
			p[l] = kvconfig.LayerPlan{K: "none", V: "none"}
		}
		if layer >= 0 {
			if kv == 0 {
				p[layer].K = spec
			} else {
				p[layer].V = spec
			}
		}
		return kvconfig.FormatLayerCodecs(p)
	}
	cs := []eval.Config{{Name: "bf16", Spec: kvconfig.Spec{Layers: plan(-1, 0, "")}}}
	sides := map[string]kvplan.SensitivityEntry{}
	for l := range layers {
		for kv := range 2 {
			for _, s := range specs {
				name := fmt.Sprintf("L%d.%s=%s", l, sideName(kv), s)
				cs = append(cs, eval.Config{Name: name, Spec: kvconfig.Spec{Layers: plan(l, kv, s)}})
				sides[name] = kvplan.SensitivityEntry{Layer: l, KV: kv, Spec: s}
			}
		}
	}
	return cs, sides
}

// sensitivityOf reads a sensitivity run's report, whose configurations
// sides names: each side's bytes are the configuration's bytes on that side
// less the other layers' bf16 bytes.
func sensitivityOf(r *eval.Report, layers int, sides map[string]kvplan.SensitivityEntry) (kvplan.Sensitivity, error) {
	byName := map[string]eval.ConfigReport{}
	for _, c := range r.Configs {
		byName[c.Config.Name] = c
	}
	base, ok := byName["bf16"]
	if !ok || layers <= 0 || base.KV.K != base.KV.V || base.KV.K%int64(layers) != 0 {
		return kvplan.Sensitivity{}, fmt.Errorf("the bf16 baseline holds %d key and %d value bytes over %d layers", base.KV.K, base.KV.V, layers)
	}
	side := base.KV.K / int64(layers)
	s := kvplan.Sensitivity{Format: kvplan.SensitivityFormat, Layers: layers, SideBF16: side, BF16: base.KV.BF16,
		Settings: map[string]any{
			"model": r.Model, "model_sha256": r.ModelSHA256, "data": r.Data, "data_sha256": r.DataSHA256, "docs": r.Docs,
			"ctx": r.Ctx, "n_eval": r.NEval, "passages": r.Passages, "scored_tokens": r.Tokens,
			"calib": r.Calib, "calib_sha256": r.CalibSHA256, "cache": base.Config.Settings, "engine_version": r.Engine,
		}}
	for _, c := range r.Configs {
		e, ok := sides[c.Config.Name]
		if !ok {
			continue
		}
		held := c.KV.K
		if e.KV == 1 {
			held = c.KV.V
		}
		e.Bytes, e.KL = held-int64(layers-1)*side, float64(c.MeanKL)
		s.Entries = append(s.Entries, e)
	}
	return s, nil
}

// writeSensitivityTable prints one row per layer side: each codec's KL and
// bits per value.
func writeSensitivityTable(w io.Writer, s kvplan.Sensitivity, specs []string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "layer\tside\t")
	for _, sp := range specs {
		fmt.Fprintf(tw, "%s KL\tbits\t", sp)
	}
	fmt.Fprintln(tw)
	at := map[[2]int]map[string]kvplan.SensitivityEntry{}
	for _, e := range s.Entries {
		key := [2]int{e.Layer, e.KV}
		if at[key] == nil {
			at[key] = map[string]kvplan.SensitivityEntry{}
		}
		at[key][e.Spec] = e
	}
	for l := range s.Layers {
		for kv := range 2 {
			fmt.Fprintf(tw, "%d\t%s\t", l, sideName(kv))
			for _, sp := range specs {
				e := at[[2]int{l, kv}][sp]
				fmt.Fprintf(tw, "%.6f\t%.2f\t", e.KL, 16*float64(e.Bytes)/float64(s.SideBF16))
			}
			fmt.Fprintln(tw)
		}
	}
	return tw.Flush()
}

func runAllocate(_ context.Context, args []string, stdout, stderr io.Writer) error {
	var sensPath, like, out string
	var ratio float64
	fs := newFlagSet("allocate", allocUsage, stderr)
	fs.StringVar(&sensPath, "sensitivity", "", "sensitivity `FILE` (kakeya-eval sensitivity)")
	fs.Float64Var(&ratio, "target-ratio", 0, "whole-cache ratio `R` to reach (bf16 bytes / bytes)")
	fs.StringVar(&like, "like", "", "aim at the whole-cache ratio of codec `SPEC` on every side")
	fs.StringVar(&out, "out", "", "write the policy file here (required)")
	if err := parse(fs, allocUsage, args, stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("allocate: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("allocate: unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	switch {
	case sensPath == "":
		return errors.New("allocate: --sensitivity is required")
	case out == "":
		return errors.New("allocate: --out is required")
	case (ratio == 0) == (like == ""):
		return errors.New("allocate: give one of --target-ratio and --like")
	}
	if err := outfile.Check(out); err != nil {
		return fmt.Errorf("allocate: --out: %w", err)
	}
	sens, err := readSensitivity(sensPath)
	if err != nil {
		return fmt.Errorf("allocate: %w", err)
	}
	if like != "" {
		if ratio, err = uniformRatio(sens, like); err != nil {
			return fmt.Errorf("allocate: --like %s: %w", like, err)
		}
	}
	p, err := kvplan.PlanFor(sens, ratio)
	if err != nil {
		return fmt.Errorf("allocate: %s: %w", sensPath, err)
	}
	p.Source = sensPath
	data, err := json.MarshalIndent(p, "", " ")
	if err != nil {
		return err
	}
	if err := outfile.WriteFile(out, append(data, '\n')); err != nil {
		return fmt.Errorf("allocate: %w", err)
	}
	fmt.Fprintf(stdout, "allocate: target %.3fx, plan %.3fx (%d of %d bf16 bytes), predicted KL %.6f\n", ratio, p.Ratio, p.Bytes, sens.BF16, p.PredictedKL)
	for l, lp := range p.Layers {
		fmt.Fprintf(stdout, "  layer %d: k %s, v %s\n", l, lp.K, lp.V)
	}
	return nil
}

// readSensitivity reads a sensitivity file.
func readSensitivity(path string) (kvplan.Sensitivity, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return kvplan.Sensitivity{}, err
	}
	var s kvplan.Sensitivity
	if err := json.Unmarshal(raw, &s); err != nil {
		return kvplan.Sensitivity{}, fmt.Errorf("%s: %w", path, err)
	}
	if s.Format != kvplan.SensitivityFormat {
		return kvplan.Sensitivity{}, fmt.Errorf("%s: format %q, want %q", path, s.Format, kvplan.SensitivityFormat)
	}
	return s, nil
}

// uniformRatio returns the whole-cache ratio of spec on every side, from
// the bytes the sensitivity run measured for it.
func uniformRatio(s kvplan.Sensitivity, spec string) (float64, error) {
	sp, err := codec.ParseSpec(spec)
	if err != nil {
		return 0, err
	}
	want := sp.String()
	var bytes int64
	seen := map[[2]int]bool{}
	for _, e := range s.Entries {
		if e.Spec == want && !seen[[2]int{e.Layer, e.KV}] {
			seen[[2]int{e.Layer, e.KV}] = true
			bytes += e.Bytes
		}
	}
	if len(seen) != 2*s.Layers || bytes <= 0 {
		return 0, fmt.Errorf("measured on %d of %d layer sides", len(seen), 2*s.Layers)
	}
	return float64(s.BF16) / float64(bytes), nil
}
