package cudabackend

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya"
	"github.com/kakeya-ai/kakeya/calibrate"
	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/eval"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/pick"
)

// greedyRun decodes steps tokens greedily after prompt in a cache of sp
// and returns the tokens and every decode step's logits.
func greedyRun(t *testing.T, m *model.Model, sp kvconfig.Spec, prompt []int, steps int) ([]int, [][]float32) {
	t.Helper()
	p, _, err := kvplan.NewPolicy(sp, m.CacheShape(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.NewSequenceOpts(model.SequenceOptions{Cache: p, BlockSize: sp.BlockSize})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := s.Forward(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	var toks []int
	var logits [][]float32
	for range steps {
		tok := pick.ArgMax(l)
		toks = append(toks, tok)
		if l, err = s.Forward([]int{tok}, false); err != nil {
			t.Fatal(err)
		}
		logits = append(logits, append([]float32(nil), l...))
	}
	return toks, logits
}

// A per-layer plan of the codecs the allocator picks among (int4, int2,
// int8 and kakeya-block:b=3 layers; int4 and int8 encoded on the device,
// kakeya-block on the host) decodes on emulated CUDA as on the CPU:
// greedy tokens equal, logits within 1e-3 of their scale, and the
// cache's bytes the same.
func TestAllocatorPlanMatchesCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("emulates every kernel of a forward pass per token")
	}
	needKernels(t, "enc_int4", "enc_int8", "attn_split", "attn_combine")
	dir := filepath.Join(t.TempDir(), "qwen2")
	if err := testmodel.Write(dir, testmodel.Qwen2Tiny); err != nil {
		t.Fatal(err)
	}
	cpuM, gpuM, gpu, _ := cpuAndFake(t, dir, 64)
	prompt := testIDs(6, cpuM.Config().VocabSize)
	for _, layers := range []string{
		"int4-k/int4|kakeya-block:b=3/kakeya-block:b=3",
		"int2-k/int4|int8/int2",
	} {
		sp := kvconfig.Spec{Layers: layers, BlockSize: 4, HotWindow: 4, CacheType: "bf16"}
		const steps = 10 // positions 6..15: blocks fill every fourth step
		want, wl := greedyRun(t, cpuM, sp, prompt, steps)
		got, gl := greedyRun(t, gpuM, sp, prompt, steps)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: greedy token %d is %d on CUDA, %d on the CPU (CUDA %v, CPU %v)", layers, i, got[i], want[i], got, want)
			}
		}
		var worst float64
		for i := range wl {
			d, tol := maxAbsDiff(gl[i], wl[i]), 1e-3*max(1, maxAbs(wl[i]))
			kl, err := eval.KL(wl[i], gl[i])
			if err != nil {
				t.Fatal(err)
			}
			if math.IsNaN(d) || d > tol {
				t.Errorf("%s: decode step %d: max abs logit difference %.3g (tolerance %.3g, KL %.3g), CUDA vs CPU", layers, i, d, tol, kl)
			}
			worst = max(worst, d/tol)
		}
		t.Logf("%s: %d greedy tokens equal; worst logit difference %.2g of the tolerance", layers, steps, worst)
	}
	if err := gpu.Err(); err != nil {
		t.Fatal(err)
	}
}

// defaultPlan returns the per-layer plan kakeya-eval allocate makes at a
// ratio of 3 from a sensitivity run over kvplan.DefaultChoices(true) (the
// default --choices with principal components in the calibration) on a
// model of layers layers, from measured-looking bytes and KLs of a 2-layer
// model (a layer side: 1,000 bytes in bf16; int8 530, int4 290, kakeya-pc
// at 1.5 to 4 bits 110 to 250): layer 0's keys want int8, its values
// int4, layer 1 takes kakeya-pc on both sides.
func defaultPlan(t *testing.T) kvconfig.Plan {
	t.Helper()
	bytes := map[string]int64{"int8": 530, "int4": 290, "kakeya-pc:rate=1.5": 110, "kakeya-pc:rate=2": 135, "kakeya-pc:rate=3": 190, "kakeya-pc:rate=4": 250}
	kl := func(layer, kv int, spec string) float64 {
		pc := strings.HasPrefix(spec, "kakeya-pc")
		switch {
		case layer == 0 && kv == 0: // keys that want 8 bits
			return map[bool]float64{true: 1, false: 0.5}[pc] * map[bool]float64{true: 0, false: 1}[spec == "int8"]
		case layer == 0: // values that take int4
			return map[string]float64{"int8": 0.3, "int4": 0.01}[spec] + map[bool]float64{true: 0.5}[pc]
		}
		return map[bool]float64{true: 0, false: 0.001}[pc] // layer 1: kakeya-pc costs nothing
	}
	sens := kvplan.Sensitivity{Format: kvplan.SensitivityFormat, Layers: 2, SideBF16: 1000, BF16: 4000}
	for l := range 2 {
		for kv := range 2 {
			for _, spec := range kvplan.DefaultChoices(true) {
				sens.Entries = append(sens.Entries, kvplan.SensitivityEntry{Layer: l, KV: kv, Spec: spec, Bytes: bytes[spec], KL: kl(l, kv, spec)})
			}
		}
	}
	plan, err := kvplan.PlanFor(sens, 3)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// A decode step in a cache whose every layer encodes on the device (int4
// per channel and per token, int2, int8, sides kept uncompressed (a
// plan's "none": bf16, encoded in place), fixed-rate kakeya-pc: among them
// a plan allocated from kakeya-eval sensitivity's default choices; also
// with a calibration's query factors, int8 and int4 keys preconditioned,
// whitened on the device by enc_whiten; the kakeya preset under such a
// calibration, whose keys are weighed by the queries, not whitened; and
// kakeya-pc keys, fixed-rate and entropy-coded, preconditioned by a
// policy built by hand, prePCPolicy) makes
// one host wait, the logits' copy back, also in the steps that fill a
// block and encode it: the encoders run in the step's stream, nothing is
// read back. So do sides kept uncompressed (a plan's "none", a boundary
// layer) over float32 hot rows (--cache-type f32), which enc_bf16 rounds
// into bf16 slots on the device (over bf16 rows they are encoded in
// place, no launch). Where a layer's keys and values share a codec (int8/int8,
// kakeya-pc), whitened keys or not, a filling step makes one encoder
// launch per layer: as many as enc_whiten's. A kakeya-block layer,
// encoded on the host, still reads each filled part back (the test logs
// it).
func TestPlanDecodeOneHostWait(t *testing.T) {
	needKernels(t, "enc_int4", "enc_int8", "enc_pc", "enc_pcec", "enc_whiten", "norm_qkv_bf16", "attn_split", "attn_split_pre", "attn_split_pc", "attn_combine")
	dir := filepath.Join(t.TempDir(), "qwen2")
	if err := testmodel.Write(dir, testmodel.Qwen2Tiny); err != nil {
		t.Fatal(err)
	}
	plan := defaultPlan(t)
	defaults := kvconfig.FormatLayerCodecs(plan.Layers)
	for _, want := range []string{"int8", "int4", "kakeya-pc:rate="} {
		if !strings.Contains(defaults, want) {
			t.Fatalf("the default choices' plan %s holds no %s layer side", defaults, want)
		}
	}
	const prompt, steps, bs = 3, 9, 4 // positions 3..11: blocks fill at 7 and 11
	for _, c := range []struct {
		layers string
		device bool   // every layer encodes on the device
		pre    bool   // a calibration with query factors: int8 and int4 keys preconditioned
		wrap   bool   // kakeya-pc keys preconditioned by hand (prePCPolicy)
		shared string // the codec every layer's keys and values share: one encoder launch a layer and filling step
		f32    bool   // float32 hot rows
		// With boundary set, the cache is layers (one codec) with those
		// boundary layers kept bf16, not a per-layer plan.
		boundary string
	}{
		{"int4-k/int4|int8/int2", true, false, false, "", false, ""},
		{"int2-k/int2|int4/int4-k", true, false, false, "", false, ""},
		{defaults, true, false, false, "", false, ""},
		{"int4-k/int4|int8/int2", true, true, false, "", false, ""},
		{"int8/int4|int2-k/int8", true, true, false, "", false, ""},
		{"int8/int8|int8/int8", true, true, false, "enc_int8", false, ""},
		{defaults, true, true, false, "", false, ""},
		{"kakeya", true, true, false, "enc_pc", false, ""}, // the preset: keys weighed by the queries, not whitened
		{"kakeya-pc:rate=2.5/kakeya-pc:rate=2.5|kakeya-pc:rate=2.5/kakeya-pc:rate=2.5", true, true, true, "enc_pc", false, ""},
		{"kakeya-pc:ec=true/kakeya-pc:ec=true|kakeya-pc:ec=true/kakeya-pc:ec=true", true, true, true, "enc_pcec", false, ""},
		{"none/int4|int8/none", true, false, false, "", false, ""}, // the allocator's "none": bf16 encoded in place
		// The same over float32 hot rows, and a boundary layer over
		// them: bf16 encoded by enc_bf16.
		{"none/int4|int8/none", true, false, false, "", true, ""},
		{"int4", true, false, false, "", true, "0"},
		{"int4-k/int4|kakeya-block:b=3/kakeya-block:b=3", false, false, false, "", false, ""},
	} {
		hot := map[bool]string{false: "bf16", true: "f32"}[c.f32]
		sp := kvconfig.Spec{Layers: c.layers, BlockSize: bs, HotWindow: bs, CacheType: hot}
		switch {
		case c.layers == "kakeya":
			sp = kvconfig.Spec{KV: "kakeya", BlockSize: bs, HotWindow: bs}
		case c.boundary != "":
			sp = kvconfig.Spec{KV: c.layers, Boundary: c.boundary, BlockSize: bs, HotWindow: bs, CacheType: hot}
		}
		name := fmt.Sprintf("%s (%s hot rows)", c.layers, hot)
		if c.boundary != "" {
			name = fmt.Sprintf("%s, boundary layers %s (%s hot rows)", c.layers, c.boundary, hot)
		}
		pcCal := strings.Contains(c.layers, "kakeya-pc") || c.layers == "kakeya"
		var cal func(*model.Model) *codec.Calibration
		if pcCal || c.pre {
			cal = func(m *model.Model) *codec.Calibration {
				var cal *codec.Calibration
				if pcCal {
					cal = synthPCACalibration(m, 1)
				}
				if c.pre {
					rc := randCalibration(t, m, 2)
					if cal == nil {
						cal = rc
					}
					cal.Chol = rc.Chol
				}
				return cal
			}
		}
		pol := func(m *model.Model) kvcache.Policy {
			if c.wrap {
				return prePCPolicy(t, m, sp, cal(m))
			}
			p, _, err := kvplan.NewPolicy(sp, m.CacheShape(), cal(m))
			if err != nil {
				t.Fatal(err)
			}
			if _, whitened := p.KCodec(0, 0).(*codec.Preconditioned); c.layers == "kakeya" && whitened {
				t.Fatalf("the preset's keys are preconditioned by a calibration's query factors")
			}
			return p
		}
		if cal == nil {
			pol = func(m *model.Model) kvcache.Policy {
				p, _, err := kvplan.NewPolicy(sp, m.CacheShape(), nil)
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
		}
		_, calls, gpu := stepRunPolicy(t, dir, Options{}, sp.BlockSize, pol, prompt, steps)
		fills, most := 0, int64(0)
		for i, st := range calls {
			pos := prompt + i
			fill := (pos+1)%bs == 0 && pos+1 > bs // the step completes a block past the hot window
			waits := st.Waits()
			most = max(most, waits)
			if fill {
				fills++
			}
			if c.device && (waits != 1 || st.CopiesOut != 1) {
				t.Errorf("%s: decode step %d (position %d, fills a block %v): %d host waits (%+v), want 1: the logits' copy back", name, i, pos, fill, waits, st)
			}
		}
		if err := gpu.Err(); err != nil {
			t.Fatal(err)
		}
		f := gpu.drv.(*launchCounter).driver.(*fakeDriver)
		enc4, enc8, encPC, whiten := kernelCount(f, "enc_int4"), kernelCount(f, "enc_int8"), kernelCount(f, "enc_pc"), kernelCount(f, "enc_whiten")
		encEC, encBF16 := kernelCount(f, "enc_pcec"), kernelCount(f, "enc_bf16")
		t.Logf("%s (preconditioned keys %v, kakeya-pc keys wrapped %v): %d decode steps, %d filling a block; at most %d host waits a step; %d enc_int4, %d enc_int8, %d enc_pc, %d enc_pcec, %d enc_whiten and %d enc_bf16 launches",
			name, c.pre, c.wrap, steps, fills, most, enc4, enc8, encPC, encEC, whiten, encBF16)
		// bf16 sides over float32 rows: one enc_bf16 launch a layer that
		// holds any (its keys and values together) and filling step;
		// none over bf16 rows.
		bf16Layers := 0
		if c.boundary != "" {
			bf16Layers = len(strings.Split(c.boundary, ","))
		} else {
			for _, l := range strings.Split(c.layers, "|") {
				if strings.Contains(l, "none") {
					bf16Layers++
				}
			}
		}
		if want := map[bool]int{true: fills * bf16Layers}[c.f32]; encBF16 != want {
			t.Errorf("%s: %d enc_bf16 launches over %d filling steps, %d layers with bf16 sides; want %d", name, encBF16, fills, bf16Layers, want)
		}
		// The preset's kakeya-pc keys are never whitened, whatever the
		// calibration.
		if whitened := c.pre && c.layers != "kakeya"; whitened != (whiten > 0) {
			t.Errorf("%s (preconditioned keys %v): %d enc_whiten launches", name, c.pre, whiten)
		}
		if c.shared != "" {
			// A layer's keys and values in one launch, the prompt's
			// fills (none: it holds no full block past the window)
			// and each filling step's.
			layers := 2
			if n := kernelCount(f, c.shared); n != fills*layers || whiten > 0 && whiten != n {
				t.Errorf("%s: %d %s and %d enc_whiten launches over %d filling steps of %d layers, want one a layer and step", name, n, c.shared, whiten, fills, layers)
			}
			continue
		}
		if enc4 == 0 {
			t.Errorf("%s: no enc_int4 launch: the int4 layers' blocks were not encoded on the device", name)
		}
		if c.layers == defaults && (enc8 == 0 || encPC == 0) {
			t.Errorf("%s: %d enc_int8 and %d enc_pc launches: the int8 and kakeya-pc layers' blocks were not encoded on the device", name, enc8, encPC)
		}
		if !c.device && most <= 1 {
			t.Errorf("%s: kakeya-block layers encode on the host, yet no step waited more than once", name)
		}
	}
}

// A cache built on the CUDA backend with layers the device does not encode
// (kakeya-block, also with keys preconditioned by a calibration) says so
// once, a warning naming the codec, the layer sides and the cost (one host
// wait per block and KV head); a cache whose every side encodes on the
// device, among them the default choices' plan, int8 and int4 keys
// preconditioned by a calibration, int8 with precond=0, the kakeya preset
// under a calibration file with query factors (its keys weighed by the
// queries, never whitened) and kakeya-pc keys preconditioned by a policy
// built by hand (enc_whiten, then enc_pc or enc_pcec), and sides kept
// bf16 (a plan's "none", the boundary layers) over float32 hot rows as
// over bf16 ones (enc_bf16; in place), says nothing and has no
// host-encoded side.
func TestHostEncodedWarning(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "qwen2")
	if err := testmodel.Write(dir, testmodel.Qwen2Tiny); err != nil {
		t.Fatal(err)
	}
	gpu, _ := newFakeBackend(t, Options{})
	m := loadModel(t, dir, model.Options{Backend: gpu, MaxContext: 64})
	var logged strings.Builder
	cs, err := kakeya.NewCaches(m, kakeya.Options{Log: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	spec := func(layers string) kvconfig.Spec {
		return kvconfig.Spec{Layers: layers, BlockSize: 4, HotWindow: 4, CacheType: "bf16"}
	}
	for range 2 { // the second time says nothing more
		if _, _, _, err := cs.Cache(context.Background(), spec("int4-k/int4|kakeya-block:b=3/kakeya-block:b=3")); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, _, err := cs.Cache(context.Background(), spec("int4-k/int4|int8/int2")); err != nil {
		t.Fatal(err)
	}
	// bf16 sides, a plan's "none" and the default boundary layers (0 and
	// the last), over float32 and bf16 hot rows: on the device.
	for _, hot := range []string{"f32", "bf16"} {
		none := spec("none/int4|int8/none")
		none.CacheType = hot
		boundary := kvconfig.Spec{KV: "int8", BlockSize: 4, HotWindow: 4, CacheType: hot}
		for _, sp := range []kvconfig.Spec{none, boundary} {
			if _, _, _, err := cs.Cache(context.Background(), sp); err != nil {
				t.Fatal(err)
			}
			pol, _, err := kvplan.NewPolicy(sp, m.CacheShape(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if k, v := pol.KCodec(0, 0), pol.VCodec(1); pol.HotBF16 != (hot == "bf16") || k == nil || k.Name() != "bf16" || v == nil || v.Name() != "bf16" {
				t.Fatalf("%+v: hot bf16 %v, layer 0's keys %v, layer 1's values %v; want %s hot rows and bf16 sides", sp, pol.HotBF16, k, v, hot)
			}
			if sides, err := m.HostEncoded(model.SequenceOptions{Cache: pol, BlockSize: 4}); err != nil || len(sides) != 0 {
				t.Errorf("%+v: host-encoded sides %+v (%v), want none", sp, sides, err)
			}
		}
	}
	out := logged.String()
	t.Logf("logged: %s", out)
	if n := strings.Count(out, "level=WARN"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, out)
	}
	for _, want := range []string{"encoded on the host", "one host wait per block and KV head", "kakeya-block:b=3: keys of layers 1; values of layers 1", "cuda"} {
		if !strings.Contains(out, want) {
			t.Errorf("the warning does not say %q:\n%s", want, out)
		}
	}
	// With a calibration file (every one has query Cholesky factors) int8
	// and int4 keys are preconditioned by default, and the device whitens
	// them before it encodes them (enc_whiten): no warning, as with
	// precond=0. Preconditioned kakeya-block keys are still encoded on the
	// host, and the warning names them.
	cal := &codec.Calibration{Layers: 2, KVHeads: 2, HeadDim: 16, Model: "qwen2-tiny"}
	r := rand.New(rand.NewPCG(3, 4))
	for range 4 {
		cal.Chol = append(cal.Chol, randCholesky(t, r, 16))
	}
	calPath := filepath.Join(t.TempDir(), "calib.safetensors")
	if err := calibrate.Save(calPath, cal); err != nil {
		t.Fatal(err)
	}
	logged.Reset()
	withCal, err := kakeya.NewCaches(m, kakeya.Options{Calibration: calPath, Log: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	off := spec("int8/int8|int8/int8")
	off.Precondition = kvconfig.Off
	for _, sp := range []kvconfig.Spec{spec("int8/int8|int8/int8"), spec("int4-k/int4|int2-k/int4"), off} {
		if _, _, _, err := withCal.Cache(context.Background(), sp); err != nil {
			t.Fatal(err)
		}
		pol, _, err := kvplan.NewPolicy(sp, m.CacheShape(), cal)
		if err != nil {
			t.Fatal(err)
		}
		_, pre := pol.KCodec(0, 0).(*codec.Preconditioned)
		if pre != (sp.Precondition != kvconfig.Off) {
			t.Fatalf("%s (precond %v): layer 0's keys preconditioned %v", sp.Layers, sp.Precondition, pre)
		}
		if sides, err := m.HostEncoded(model.SequenceOptions{Cache: pol, BlockSize: 4}); err != nil || len(sides) != 0 {
			t.Errorf("%s (precond %v): host-encoded sides %+v (%v), want none", sp.Layers, sp.Precondition, sides, err)
		}
	}
	if out := logged.String(); strings.Contains(out, "level=WARN") {
		t.Errorf("int8 and int4 keys preconditioned by a calibration, then precond=0: logged\n%s\nwant no warning", out)
	}
	if _, _, _, err := withCal.Cache(context.Background(), spec("kakeya-block:b=3/int8|int8/int8")); err != nil {
		t.Fatal(err)
	}
	if out := logged.String(); strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "kakeya-block:b=3 (preconditioned): keys of layers 0") {
		t.Errorf("kakeya-block keys preconditioned by a calibration: logged\n%s\nwant one warning naming them", out)
	}
	// The default choices' plan (kakeya-pc with a calibration) and the
	// preset's codec: nothing for the host.
	pol, _, err := kvplan.NewPolicy(spec(kvconfig.FormatLayerCodecs(defaultPlan(t).Layers)), m.CacheShape(), synthPCACalibration(m, 1))
	if err != nil {
		t.Fatal(err)
	}
	if sides, err := m.HostEncoded(model.SequenceOptions{Cache: pol, BlockSize: 4}); err != nil || len(sides) != 0 {
		t.Errorf("the default choices' plan: host-encoded sides %+v (%v), want none", sides, err)
	}
	// The preset under a calibration file with principal components and
	// query factors: kakeya-pc keys, not whitened, encoded by enc_pc.
	pcCal := pcCholCalibration(t, m, 5)
	pcPath := filepath.Join(t.TempDir(), "pc.safetensors")
	if err := calibrate.Save(pcPath, pcCal); err != nil {
		t.Fatal(err)
	}
	logged.Reset()
	withPC, err := kakeya.NewCaches(m, kakeya.Options{Calibration: pcPath, Log: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	preset := kvconfig.Spec{KV: "kakeya", BlockSize: 4, HotWindow: 4}
	if _, _, _, err := withPC.Cache(context.Background(), preset); err != nil {
		t.Fatal(err)
	}
	if out := logged.String(); strings.Contains(out, "level=WARN") {
		t.Errorf("the preset under a calibration with query factors: logged\n%s\nwant no warning", out)
	}
	if pol, _, err = kvplan.NewPolicy(preset, m.CacheShape(), pcCal); err != nil {
		t.Fatal(err)
	}
	if _, ok := pol.KCodec(0, 0).(*codec.KakeyaPC); !ok {
		t.Errorf("the preset's keys under a calibration with query factors: %s, want kakeya-pc, not whitened", pol.KCodec(0, 0).Name())
	}
	// Preconditioned kakeya-pc keys, fixed-rate and entropy-coded.
	for _, kv := range []string{"kakeya-pc:rate=2.5", "kakeya-pc:ec=true"} {
		pol := prePCPolicy(t, m, kvconfig.Spec{KV: kv, BlockSize: 4, HotWindow: 4, Boundary: "none"}, pcCal)
		if sides, err := m.HostEncoded(model.SequenceOptions{Cache: pol, BlockSize: 4}); err != nil || len(sides) != 0 {
			t.Errorf("%s keys preconditioned: host-encoded sides %+v (%v), want none", pol.KCodec(0, 0).Name(), sides, err)
		}
	}
}

// Every codec kvplan may choose for a cache on the CUDA device encodes on
// the device (issue 34: no layer side's blocks read back and encoded on
// the host, kvcache.Policy.HostEncoded empty), at the head dims of
// Qwen2.5-0.5B and 7B (64, 128) and under a calibration of principal
// components alone or with query factors (which precondition int8 and
// int4 keys by default): the kakeya preset as the codec name alone
// selects it (block 64, hot window 32, every layer compressed), its two
// codecs named per side, each of kakeya-eval sensitivity's default
// choices on every layer side at the preset's block and window, and the
// plans kvplan.PlanFor allocates from those choices at every ratio from
// 1.5x to the most they reach, over bf16 and float32 hot rows
// (--cache-type f32: the plans' "none" sides, bf16, encoded by enc_bf16);
// also a compressed cache's default boundary layers (bf16), over either.
// The check is live: kakeya-block:b=3, which
// sensitivity measures only when --choices names it, is reported
// host-encoded (and warned of, TestHostEncodedWarning).
func TestPlannedCodecsEncodeOnDevice(t *testing.T) {
	for _, d := range []int{64, 128} {
		t.Run(fmt.Sprintf("d%d", d), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "qwen2")
			spec := testmodel.Qwen2Tiny
			spec.Hidden, spec.Heads, spec.KVHeads, spec.HeadDim, spec.Layers = 256, 256/d, 2, d, 2
			if err := testmodel.Write(dir, spec); err != nil {
				t.Fatal(err)
			}
			gpu, _ := newFakeBackend(t, Options{})
			m := loadModel(t, dir, model.Options{Backend: gpu, MaxContext: 256})
			at := func(kv string) kvconfig.Spec {
				return kvconfig.Spec{KV: kv, BlockSize: kvconfig.PresetBlock, HotWindow: kvconfig.PresetHotWindow, Boundary: "none"}
			}
			sides := func(name string, sp kvconfig.Spec, cal *codec.Calibration) []kvcache.HostSide {
				t.Helper()
				pol, st, err := kvplan.NewPolicy(sp, m.CacheShape(), cal)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if st.BlockSize != kvconfig.PresetBlock || len(st.Boundary) != 0 {
					t.Fatalf("%s: blocks of %d, boundary layers %v: want %d and none", name, st.BlockSize, st.Boundary, kvconfig.PresetBlock)
				}
				got, err := m.HostEncoded(model.SequenceOptions{Cache: pol, BlockSize: st.BlockSize})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				return got
			}
			plans := allocatedPlans(t, m.CacheShape().Layers)
			nones := 0
			for _, p := range plans {
				nones += strings.Count(kvconfig.FormatLayerCodecs(p.Layers), "none")
			}
			if nones == 0 {
				t.Fatal("no allocated plan keeps a side uncompressed (bf16): the check of bf16 sides is not live")
			}
			for _, hot := range []string{"bf16", "f32"} {
				sp := kvconfig.Spec{KV: "int8", BlockSize: kvconfig.PresetBlock, HotWindow: kvconfig.PresetHotWindow, CacheType: hot}
				pol, st, err := kvplan.NewPolicy(sp, m.CacheShape(), nil)
				if err != nil {
					t.Fatal(err)
				}
				if len(st.Boundary) == 0 || pol.HotBF16 != (hot == "bf16") {
					t.Fatalf("int8 over %s hot rows: boundary layers %v, hot bf16 %v; want the default boundary", hot, st.Boundary, pol.HotBF16)
				}
				got, err := m.HostEncoded(model.SequenceOptions{Cache: pol, BlockSize: st.BlockSize})
				if err != nil || len(got) != 0 {
					t.Errorf("int8 over %s hot rows, boundary layers %v (bf16): host-encoded sides %+v (%v), want none", hot, st.Boundary, got, err)
				}
			}
			for _, hot := range []string{"bf16", "f32"} {
				for calName, cal := range map[string]*codec.Calibration{
					"principal components":                   synthPCACalibration(m, 1),
					"principal components and query factors": pcCholCalibration(t, m, 2),
				} {
					cases := map[string]kvconfig.Spec{
						"the preset":          {KV: kvconfig.PresetName},
						"the preset's codecs": {K: kvconfig.PresetKCodec, V: kvconfig.PresetVCodec, BlockSize: kvconfig.PresetBlock, HotWindow: kvconfig.PresetHotWindow, Boundary: "none"},
					}
					for _, c := range kvplan.DefaultChoices(true) {
						cases[c] = at(c)
					}
					for name, p := range plans {
						cases[name] = at("")
						sp := cases[name]
						sp.KV, sp.Boundary, sp.Layers = "", "", kvconfig.FormatLayerCodecs(p.Layers)
						cases[name] = sp
					}
					for name, sp := range cases {
						sp.CacheType = hot
						if got := sides(name, sp, cal); len(got) != 0 {
							t.Errorf("%s over %s hot rows, a calibration of %s: host-encoded sides %+v, want none", name, hot, calName, got)
						}
					}
					kb := at("kakeya-block:b=3")
					kb.CacheType = hot
					if got := sides("kakeya-block:b=3", kb, cal); len(got) != 2*m.CacheShape().Layers {
						t.Errorf("kakeya-block:b=3 over %s hot rows, a calibration of %s: host-encoded sides %+v, want every layer's keys and values", hot, calName, got)
					}
				}
			}
		})
	}
}

// allocatedPlans returns the plans kvplan.PlanFor allocates for a model
// of the given layers from kakeya-eval sensitivity's default choices
// (bytes of a 64-token block of head_dim 64 per token, their cost a KL
// that falls with the bytes and varies by layer side), at whole-cache
// ratios from 1.5x up to the most the choices reach, by ratio.
func allocatedPlans(t *testing.T, layers int) map[string]kvconfig.Plan {
	t.Helper()
	bytes := map[string]int64{"int8": 530, "int4": 290, "kakeya-pc:rate=1.5": 110, "kakeya-pc:rate=2": 135, "kakeya-pc:rate=3": 190, "kakeya-pc:rate=4": 250}
	const side = 1000
	sens := kvplan.Sensitivity{Format: kvplan.SensitivityFormat, Layers: layers, SideBF16: side, BF16: 2 * side * int64(layers)}
	for l := range layers {
		for kv := range 2 {
			for _, spec := range kvplan.DefaultChoices(true) {
				kl := float64(1+l+kv) / float64(bytes[spec])
				if strings.HasPrefix(spec, "int") {
					kl *= 1.5 // the integer codecs cost more at their bytes
				}
				sens.Entries = append(sens.Entries, kvplan.SensitivityEntry{Layer: l, KV: kv, Spec: spec, Bytes: bytes[spec], KL: kl})
			}
		}
	}
	plans := map[string]kvconfig.Plan{}
	for _, ratio := range []float64{1.5, 2, 3, 4, 6, 8, 9} { // 9: about the most (1000 / 110)
		p, err := kvplan.PlanFor(sens, ratio)
		if err != nil {
			t.Fatalf("ratio %.3g: %v", ratio, err)
		}
		plans[fmt.Sprintf("the plan at %.3gx (%s)", ratio, kvconfig.FormatLayerCodecs(p.Layers))] = p
	}
	return plans
}
