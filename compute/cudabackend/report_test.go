package cudabackend

// The GPU report's measurements. make gpu-bundle builds this package's
// tests with -tags gpu, and the bundle's run.sh runs the TestReport*
// tests of report_gpu_test.go on a machine with an NVIDIA GPU (their
// names keep them out of make gpu-check's ^TestGPU). The measurements
// themselves are written here against any backend, so that
// TestReportFake runs every one of them without a GPU, at tiny shapes:
// make test checks each row's setup, reference and formatting; only the
// numbers need the device.
//
// A measurement prints each row as soon as it has it: one line to stdout,
// "ROW|" then the text (run.sh shows these lines and keeps the rest of the
// output apart), and, where $KAKEYA_REPORT_JSON names a file, one JSON
// object per line appended to it (run.sh's results.json).

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	"github.com/kakeya-ai/kakeya/compute/reference"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kernels/cpu"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/pick"
	"github.com/kakeya-ai/kakeya/tensor"
)

// The report's environment: the file its JSON rows are appended to, and
// the seconds a measurement may take before it skips what is left.
const (
	envReportJSON   = "KAKEYA_REPORT_JSON"
	envReportBudget = "KAKEYA_REPORT_BUDGET"
)

// reporter prints a measurement's rows.
type reporter struct {
	t        testing.TB
	out      io.Writer
	json     string    // file of JSON rows, "" for none
	deadline time.Time // zero: none
	rows     []map[string]any
}

// newReporter returns a reporter printing to out, with the JSON file and
// the time budget the environment names.
func newReporter(t testing.TB, out io.Writer) *reporter {
	r := &reporter{t: t, out: out, json: os.Getenv(envReportJSON)}
	if s := os.Getenv(envReportBudget); s != "" {
		sec, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("%s=%q: want seconds", envReportBudget, s)
		}
		r.deadline = time.Now().Add(time.Duration(sec * float64(time.Second)))
	}
	return r
}

// Row statuses: a check that passed or failed, a measurement with nothing
// to check, and one not taken (no time left).
const (
	statusPass = "pass"
	statusFail = "fail"
	statusInfo = "info"
	statusSkip = "skip"
)

// row reports one result: "[step] name: text", with the status unless it
// is info. A failed row fails the test.
func (r *reporter) row(step, name, status, text string, fields map[string]any) {
	r.t.Helper()
	line := fmt.Sprintf("[%s] %s: %s", step, name, text)
	if status != statusInfo {
		line += "  " + strings.ToUpper(status)
	}
	fmt.Fprintln(r.out, "ROW|"+line)
	obj := map[string]any{"step": step, "name": name, "status": status, "text": text}
	for k, v := range fields {
		if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			v = fmt.Sprint(f) // JSON has no NaN
		}
		obj[k] = v
	}
	r.rows = append(r.rows, obj)
	if r.json != "" {
		b, err := json.Marshal(obj)
		if err == nil {
			err = appendLine(r.json, b)
		}
		if err != nil {
			r.t.Errorf("%s: %v", envReportJSON, err)
		}
	}
	if status == statusFail {
		r.t.Errorf("%s", line)
	}
}

// appendLine appends b and a newline to the file at path.
func appendLine(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// left returns the time left before the deadline (a day without one).
func (r *reporter) left() time.Duration {
	if r.deadline.IsZero() {
		return 24 * time.Hour
	}
	return time.Until(r.deadline)
}

// status returns pass when ok, else fail.
func status(ok bool) string {
	if ok {
		return statusPass
	}
	return statusFail
}

// deviceRow reports the device, its driver and how prefill's products run.
func deviceRow(r *reporter, b *Backend) {
	d := b.dev
	drv := fmt.Sprintf("%d.%d", d.DriverVersion/1000, d.DriverVersion%1000/10)
	r.row("device", "cuda", statusInfo, fmt.Sprintf("%s; CUDA driver API %s", b.Describe(), drv), map[string]any{
		"gpu": d.Name, "sm": fmt.Sprintf("%d%d", d.Major, d.Minor), "sms": d.SMs, "memory_bytes": d.TotalMem,
		"bandwidth_gbs": b.Bandwidth() / 1e9, "driver_api": drv, "gemm": b.GEMM(),
	})
}

// kernelBench times the backend's kernels at one model's layer shapes,
// each against a reference computed on the host: the matrix products in
// float64, attention by the CPU backend over the same cache blocks.
type kernelBench struct {
	r        *reporter
	b        *Backend
	shape    string // the preset's name
	spec     testmodel.Spec
	prefill  int           // rows of the matrix products after the matrix-vector ones
	contexts []int         // attention's
	block    int           // tokens per cache block
	timing   time.Duration // the timed repetitions of one row take about this long
}

// run reports every kernel row: matrix-vector products (a decode step's)
// of every weight shape, matrix products (prefill's) of the layers' ones,
// RMSNorm over one row and prefill rows, and a decode step's attention at
// each context over bf16, int8, the kakeya preset's fixed-rate kakeya-pc
// (format 8) and entropy-coded kakeya-pc blocks, then the device encoders
// of both kakeya-pc formats over a layer's full parts of a 512-token
// prefill, the whitening of preconditioned keys (enc_whiten) alone and
// before enc_pc, and enc_bf16 over those parts.
func (k *kernelBench) run() {
	s := k.spec
	q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	weights := []struct {
		name       string
		rows, cols int
	}{
		{"q_proj", q, s.Hidden}, {"k_proj/v_proj", kv, s.Hidden}, {"o_proj", s.Hidden, q},
		{"gate_proj/up_proj", s.Intermediate, s.Hidden}, {"down_proj", s.Hidden, s.Intermediate},
		{"lm_head", s.Vocab, s.Hidden},
	}
	for _, w := range weights {
		ns := []int{1, k.prefill}
		if w.name == "lm_head" {
			ns = ns[:1] // prefill computes the last row's logits alone
		}
		k.matMul(w.name, w.rows, w.cols, ns)
		runtime.GC() // free the device memory of the weights done with
	}
	k.fused()
	runtime.GC()
	k.rmsNorm(1)
	k.rmsNorm(k.prefill)
	for _, ctx := range k.contexts {
		for _, cache := range []string{"bf16", "int8", "kakeya-pc:rate=2.5", "kakeya-pc:ec=true"} {
			k.attention(ctx, cache)
			runtime.GC()
		}
	}
	for _, cache := range []string{"kakeya-pc:rate=2.5", "kakeya-pc:ec=true"} {
		k.encoder(cache)
		runtime.GC()
	}
	k.whitened()
	runtime.GC()
	k.bf16Blocks()
	runtime.GC()
}

// bf16Blocks reports enc_bf16, the encoder of blocks kept bf16 (the
// boundary layers, a plan's "none") over float32 hot rows, over a layer's
// full parts of a 512-token prefill at 64-token blocks (7 blocks of every
// KV head, keys and values, a CTA each) in one launch, every value against
// tensor.F32ToBF16 (codec.BF16.Encode's rounding) bit for bit, beside
// docs/cuda.md's prediction (the same on an H100 and an H200: latency,
// not bandwidth, bounds the launch).
func (k *kernelBench) bf16Blocks() {
	s, bs, d := k.spec, k.block, k.spec.HeadDim
	parts := 7 * 2 * s.KVHeads
	label := fmt.Sprintf("%s encode %d parts enc_bf16", k.shape, parts)
	if k.skip(label) {
		return
	}
	fail := func(err error) { k.r.row("kernels", label, statusFail, err.Error(), nil) }
	rows := randNormal(seedOf(label), parts*bs*d)
	b := k.b
	b.mu.Lock()
	var src, dst, tab Ptr
	var err error
	alloc := func(p *Ptr, n int) {
		if err == nil {
			*p, err = b.allocRaw(n)
		}
	}
	alloc(&src, 4*len(rows))
	alloc(&dst, 2*len(rows))
	alloc(&tab, 32*parts)
	var l Launch
	if err == nil {
		jobs := make([]uint64, 0, 4*parts)
		for i := range parts {
			jobs = append(jobs, uint64(dst)+uint64(2*i*bs*d), hotWord(src+Ptr(4*i*bs*d), false), 0, 0)
		}
		b.flushQueue()
		if err = b.drv.copyIn(src, bytesOf(rows)); err == nil {
			err = b.drv.copyIn(tab, bytesOf(jobs))
		}
		l = encBF16Launch(0, 0, false, bs, d, tab, parts)
	}
	b.mu.Unlock()
	defer freeTemps(b, src, dst, tab)
	if err != nil {
		fail(err)
		return
	}
	per, reps := k.timeOp(b.Alloc(1), func() {
		b.mu.Lock()
		b.flushQueue()
		b.fail(b.launch([]Launch{l}, false))
		b.mu.Unlock()
	})
	got := make([]uint16, len(rows))
	b.mu.Lock()
	err = b.copyOut(bytesOf(got), dst)
	b.mu.Unlock()
	if err != nil {
		fail(err)
		return
	}
	bad := 0
	for i, v := range rows {
		if got[i] != tensor.F32ToBF16(v) {
			bad++
		}
	}
	rate, _ := k.rate(int64(6*len(rows)), per)
	k.r.row("kernels", label, status(bad == 0), fmt.Sprintf("%d parts of %dx%d float32 rounded to bf16: %s a launch (%s a part, %s); predicted 5-10 µs on an H100 and an H200 (docs/cuda.md, not measured); %d of %d values not tensor.F32ToBF16's",
		parts, bs, d, fmtDur(per), fmtDur(per/time.Duration(parts)), rate, bad, len(rows)), map[string]any{
		"shape": k.shape, "kernel": l.Kernel, "parts": parts, "reps": reps, "us": float64(per) / 1e3,
		"predicted_us_lo": 5.0, "predicted_us_hi": 10.0, "wrong": bad,
	})
}

// encoder reports one batched launch of the device encoder of a layer's
// full parts of a 512-token prefill at 64-token blocks (7 blocks of every
// KV head, keys and values, a CTA each): enc_pc for the kakeya preset's
// fixed-rate kakeya-pc (format 8, "kakeya-pc:rate=2.5"), enc_pcec for
// entropy-coded kakeya-pc (format 9, "kakeya-pc:ec=true", stream layout
// 2), from bf16 rows, against the host codec: every block the device
// wrote decodes by the codec within 1% of the squared error of the
// codec's own encoding of the same rows. The calibration is white with an
// identity basis (every component coded, as attention's rows), so the
// rotation into the basis is exact on both and the blocks are the
// codec's bytes where the device rounds as the host does: the row counts
// them.
func (k *kernelBench) encoder(cache string) {
	s, bs, d := k.spec, k.block, k.spec.HeadDim
	parts := 7 * 2 * s.KVHeads
	label := fmt.Sprintf("%s encode %d parts %s", k.shape, parts, cache)
	if k.skip(label) {
		return
	}
	fail := func(err error) { k.r.row("kernels", label, statusFail, err.Error(), nil) }
	st := &codec.PCAStats{Mean: make([]float32, d), Basis: make([]float32, d*d), Var: make([]float32, d), Between: make([]float32, d)}
	for j := range d {
		st.Basis[j*d+j], st.Var[j], st.Between[j] = 1, 1, 0.01
	}
	o := codec.DefaultKakeyaPCOptions()
	o.Block = bs
	if cache == "kakeya-pc:ec=true" {
		o.Entropy = true
	} else {
		o.Rate = 2.5
	}
	cd, err := codec.NewKakeyaPC(o, st, nil)
	if err != nil {
		fail(err)
		return
	}
	b := k.b
	bst := b.NewBlockStore(bs, d, true).(*store)
	// The store holds the codec's device settings (codecParams) that the
	// launches read: unreachable, its cleanup would free them under the
	// timed launches (a fault in the emulator, garbage on a GPU).
	defer runtime.KeepAlive(bst)
	e, ok := bst.deviceEncoding(cd)
	if !ok {
		fail(fmt.Errorf("%s blocks of %dx%d are not encoded on the device", cd.Name(), bs, d))
		return
	}
	rows := randNormal(seedOf(label), parts*bs*d)
	hot, x := make([]uint16, len(rows)), make([]float32, len(rows))
	for i, v := range rows {
		hot[i] = tensor.F32ToBF16(v)
		x[i] = tensor.BF16ToF32(hot[i])
	}
	scratch := roundUp(max(e.scratch, 4), encAlign)
	b.mu.Lock()
	prm, ok, err := bst.codecParams(cd, e.format)
	if err == nil && !ok {
		err = fmt.Errorf("%s: no device settings", cd.Name())
	}
	var src, dst, y, tab Ptr
	alloc := func(p *Ptr, n int) {
		if err == nil {
			*p, err = b.allocRaw(n)
		}
	}
	alloc(&src, 2*len(hot))
	alloc(&dst, e.slot*parts)
	alloc(&y, scratch*parts)
	alloc(&tab, 32*parts)
	var l Launch
	if err == nil {
		jobs := make([]uint64, 0, 4*parts)
		for i := range parts {
			jobs = append(jobs, uint64(dst)+uint64(i*e.slot), hotWord(src+Ptr(2*i*bs*d), true), uint64(prm), uint64(y)+uint64(i*scratch))
		}
		b.flushQueue()
		if err = b.drv.copyIn(src, bytesOf(hot)); err == nil {
			err = b.drv.copyIn(tab, bytesOf(jobs))
		}
		if e.format == partKakeyaPCEC {
			l = encPCECLaunch(0, 0, true, bs, d, 0, 0, e.shared, tab, parts)
		} else {
			l = encPCLaunch(0, 0, true, bs, d, 0, 0, e.shared, tab, parts)
		}
	}
	b.mu.Unlock()
	defer freeTemps(b, src, dst, y, tab)
	if err != nil {
		fail(err)
		return
	}
	sync := b.Alloc(1)
	per, reps := k.timeOp(sync, func() {
		b.mu.Lock()
		b.flushQueue()
		b.fail(b.launch([]Launch{l}, false))
		b.mu.Unlock()
	})
	out := make([]byte, e.slot*parts)
	b.mu.Lock()
	err = b.copyOut(out, dst)
	b.mu.Unlock()
	if err != nil {
		fail(err)
		return
	}
	var eGot, eRef float64
	same, inBytes, outBytes, worst := 0, 2*len(hot), 0, 0.0
	dec, ref := make([]float32, bs*d), make([]float32, bs*d)
	for i := range parts {
		blk := out[i*e.slot : i*e.slot+e.size]
		if e.format == partKakeyaPCEC {
			blk = blockBytes(cd, blk) // its length is its fields'
		}
		xi := x[i*bs*d : (i+1)*bs*d]
		want, err := cd.Encode(nil, xi, bs, d)
		if err == nil {
			err = cd.Decode(dec, blk, bs, d)
		}
		if err == nil {
			err = cd.Decode(ref, want, bs, d)
		}
		if err != nil {
			fail(fmt.Errorf("part %d: %w", i, err))
			return
		}
		var eg, er float64
		for j, v := range xi {
			eg += sq(float64(dec[j] - v))
			er += sq(float64(ref[j] - v))
		}
		eGot, eRef, outBytes = eGot+eg, eRef+er, outBytes+len(blk)
		worst = max(worst, eg/max(er, 1e-30)-1)
		if bytes.Equal(blk, want) {
			same++
		}
	}
	tol := 0.01
	text := fmt.Sprintf("%d parts of %dx%d bf16 (%.1f KB in, %.1f KB out in slots of %d bytes): %s a launch (%s a part); %d of %d blocks the codec's bytes; squared error %.4g, the codec's %.4g (worst part %+.2g, tol %.0g)",
		parts, bs, d, float64(inBytes)/1e3, float64(outBytes)/1e3, e.slot, fmtDur(per), fmtDur(per/time.Duration(parts)), same, parts, eGot, eRef, worst, tol)
	k.r.row("kernels", label, status(worst <= tol), text, map[string]any{
		"shape": k.shape, "kernel": l.Kernel, "cache": cache, "parts": parts, "reps": reps, "us": float64(per) / 1e3,
		"bytes_in": inBytes, "bytes_out": outBytes, "slot": e.slot, "same": same, "rel_err": worst, "tol": tol,
	})
}

// whitened reports the device's whitening of preconditioned keys over a
// layer's full key parts of a 512-token prefill at 64-token blocks (7
// blocks of every KV head, a CTA each), from bf16 rows, with a random
// query factor per KV head (randCholesky's: channels two orders of
// magnitude apart): one enc_whiten launch alone, its rows against the
// host's whitening (cpu.MixBlock, codec.Preconditioned.Encode's: bit for
// bit where the host fuses its multiply-adds, else within 1e-5 of the
// rows' scale); then enc_whiten and enc_pc in sequence, the path of
// preconditioned kakeya-pc keys ("pre+kakeya-pc:rate=2.5": the identity
// basis of encoder's calibration), every block against
// codec.Preconditioned's encoding as encoder checks its blocks (in the
// whitened space: within 1% of the host block's squared error). Each row
// carries docs/cuda.md's prediction for an H100 and an H200 (the same
// there: 132 SMs at the same clocks, neither launch bandwidth-bound).
func (k *kernelBench) whitened() {
	s, bs, d := k.spec, k.block, k.spec.HeadDim
	parts := 7 * s.KVHeads
	wLabel := fmt.Sprintf("%s encode %d parts enc_whiten", k.shape, parts)
	pLabel := fmt.Sprintf("%s encode %d parts pre+kakeya-pc:rate=2.5", k.shape, parts)
	if k.r.left() <= 0 {
		k.skip(wLabel)
		k.skip(pLabel)
		return
	}
	fail := func(err error) {
		k.r.row("kernels", wLabel, statusFail, err.Error(), nil)
		k.r.row("kernels", pLabel, statusFail, err.Error(), nil)
	}
	st := &codec.PCAStats{Mean: make([]float32, d), Basis: make([]float32, d*d), Var: make([]float32, d), Between: make([]float32, d)}
	for j := range d {
		st.Basis[j*d+j], st.Var[j], st.Between[j] = 1, 1, 0.01
	}
	o := codec.DefaultKakeyaPCOptions()
	o.Block, o.Rate = bs, 2.5
	inner, err := codec.NewKakeyaPC(o, st, nil)
	if err != nil {
		fail(err)
		return
	}
	r := rand.New(rand.NewPCG(seedOf(wLabel), 2))
	cds := make([]*codec.Preconditioned, s.KVHeads)
	factors := make([]float32, 0, s.KVHeads*d*d)
	for h := range cds {
		L := randCholesky(k.r.t, r, d)
		if cds[h], err = codec.NewPreconditioned(inner, L, d); err != nil {
			fail(err)
			return
		}
		factors = append(factors, L...)
	}
	b := k.b
	bst := b.NewBlockStore(bs, d, true).(*store)
	defer runtime.KeepAlive(bst) // its codec settings: see encoder
	e, ok := bst.deviceEncoding(cds[0])
	if !ok || e.white == 0 {
		fail(fmt.Errorf("%s blocks of %dx%d are not whitened and encoded on the device", cds[0].Name(), bs, d))
		return
	}
	rows := randNormal(seedOf(pLabel), parts*bs*d)
	hot, x := make([]uint16, len(rows)), make([]float32, len(rows))
	for i, v := range rows {
		hot[i] = tensor.F32ToBF16(v)
		x[i] = tensor.BF16ToF32(hot[i])
	}
	scratch := roundUp(e.scratch, encAlign)
	b.mu.Lock()
	prm, ok, err := bst.codecParams(inner, e.format)
	if err == nil && !ok {
		err = fmt.Errorf("%s: no device settings", inner.Name())
	}
	var src, fac, dst, y, tab Ptr
	alloc := func(p *Ptr, n int) {
		if err == nil {
			*p, err = b.allocRaw(n)
		}
	}
	alloc(&src, 2*len(hot))
	alloc(&fac, 4*len(factors))
	alloc(&dst, e.slot*parts)
	alloc(&y, scratch*parts)
	alloc(&tab, 2*32*parts)
	var lw, lp Launch
	if err == nil {
		// The encoders' entries (enc_pc reads the whitened rows as a
		// float32 part), then enc_whiten's: part i is KV head i mod
		// KVHeads's, as a layer's blocks are.
		jobs := make([]uint64, 0, 8*parts)
		for i := range parts {
			yi := y + Ptr(i*scratch)
			jobs = append(jobs, uint64(dst)+uint64(i*e.slot), hotWord(yi, false), uint64(prm), uint64(yi)+uint64(e.white))
		}
		for i := range parts {
			jobs = append(jobs, uint64(y)+uint64(i*scratch), hotWord(src+Ptr(2*i*bs*d), true), uint64(fac)+uint64(4*(i%s.KVHeads)*d*d), 0)
		}
		b.flushQueue()
		if err = b.drv.copyIn(src, bytesOf(hot)); err == nil {
			err = b.drv.copyIn(fac, bytesOf(factors))
		}
		if err == nil {
			err = b.drv.copyIn(tab, bytesOf(jobs))
		}
		lw = encWhitenLaunch(0, 0, false, bs, d, 0, tab+Ptr(32*parts), parts)
		lp = encPCLaunch(0, 0, false, bs, d, 0, 0, e.shared, tab, parts)
	}
	b.mu.Unlock()
	defer freeTemps(b, src, fac, dst, y, tab)
	if err != nil {
		fail(err)
		return
	}
	sync := b.Alloc(1)
	timeLaunches := func(ls ...Launch) (time.Duration, int) {
		return k.timeOp(sync, func() {
			b.mu.Lock()
			b.flushQueue()
			b.fail(b.launch(ls, false))
			b.mu.Unlock()
		})
	}
	// enc_whiten alone: its rows against the host's.
	perW, repsW := timeLaunches(lw)
	got := make([]float32, scratch/4*parts)
	b.mu.Lock()
	err = b.copyOut(bytesOf(got), y)
	b.mu.Unlock()
	if err != nil {
		fail(err)
		return
	}
	fma := fmaWhitening()
	var worstW, scale float64
	sameW := 0
	want := make([]float32, bs*d)
	for i := range parts {
		clear(want)
		cpu.MixBlock(want, bs, x[i*bs*d:(i+1)*bs*d], d, cds[i%s.KVHeads].Factor(), d, d)
		yi := got[i*scratch/4 : i*scratch/4+bs*d]
		diff := maxAbsDiff(yi, want)
		worstW, scale = max(worstW, diff), max(scale, maxAbs(want))
		if diff == 0 {
			sameW++
		}
	}
	okW := fma && sameW == parts || !fma && worstW <= 1e-5*max(1, scale)
	k.r.row("kernels", wLabel, status(okW), fmt.Sprintf("%d parts of %dx%d bf16 by a factor per KV head: %s a launch (%s a part); predicted 5-12 µs on an H100 and an H200 (docs/cuda.md, not measured); %d of %d parts the host's rows bit for bit (host kernel level %s), max difference %.3g",
		parts, bs, d, fmtDur(perW), fmtDur(perW/time.Duration(parts)), sameW, parts, cpu.Level(), worstW), map[string]any{
		"shape": k.shape, "kernel": lw.Kernel, "parts": parts, "reps": repsW, "us": float64(perW) / 1e3,
		"predicted_us_lo": 5.0, "predicted_us_hi": 12.0, "same": sameW, "max_diff": worstW,
	})
	// enc_whiten then enc_pc: the blocks against the host's.
	per, reps := timeLaunches(lw, lp)
	out := make([]byte, e.slot*parts)
	b.mu.Lock()
	err = b.copyOut(out, dst)
	b.mu.Unlock()
	if err != nil {
		k.r.row("kernels", pLabel, statusFail, err.Error(), nil)
		return
	}
	var eGot, eRef float64
	same, worst := 0, 0.0
	dec, ref := make([]float32, bs*d), make([]float32, bs*d)
	for i := range parts {
		cd := cds[i%s.KVHeads]
		blk := out[i*e.slot : i*e.slot+e.size]
		xi := x[i*bs*d : (i+1)*bs*d]
		clear(want)
		cpu.MixBlock(want, bs, xi, d, cd.Factor(), d, d)
		hostBlk, err := cd.Encode(nil, xi, bs, d)
		if err == nil {
			err = inner.Decode(dec, blk, bs, d)
		}
		if err == nil {
			err = inner.Decode(ref, hostBlk, bs, d)
		}
		if err != nil {
			k.r.row("kernels", pLabel, statusFail, fmt.Sprintf("part %d: %v", i, err), nil)
			return
		}
		var eg, er float64
		for j, v := range want {
			eg += sq(float64(dec[j] - v))
			er += sq(float64(ref[j] - v))
		}
		eGot, eRef = eGot+eg, eRef+er
		worst = max(worst, eg/max(er, 1e-30)-1)
		if bytes.Equal(blk, hostBlk) {
			same++
		}
	}
	tol := 0.01
	k.r.row("kernels", pLabel, status(worst <= tol), fmt.Sprintf("%d key parts of %dx%d bf16, enc_whiten then enc_pc: %s the two launches (%s a part); predicted 40-80 µs on an H100 and an H200 (enc_whiten 5-12, enc_pc 35-70: docs/cuda.md, not measured); %d of %d blocks codec.Preconditioned's bytes; squared error %.4g, the host's %.4g (worst part %+.2g, tol %.0g)",
		parts, bs, d, fmtDur(per), fmtDur(per/time.Duration(parts)), same, parts, eGot, eRef, worst, tol), map[string]any{
		"shape": k.shape, "kernel": lw.Kernel + "+" + lp.Kernel, "cache": "pre+kakeya-pc:rate=2.5", "parts": parts, "reps": reps, "us": float64(per) / 1e3,
		"predicted_us_lo": 40.0, "predicted_us_hi": 80.0, "slot": e.slot, "same": same, "rel_err": worst, "tol": tol,
	})
}

// skip reports a row not measured for want of time, and reports whether
// it did.
func (k *kernelBench) skip(label string) bool {
	if k.r.left() > 0 {
		return false
	}
	k.r.row("kernels", label, statusSkip, "out of the time budget", map[string]any{"shape": k.shape})
	return true
}

// timeOp runs op once to warm up, then about k.timing's worth of times,
// and returns the time per run: wall time until a read-back of sync (one
// value) returns, so the host's launches and the device's work overlap as
// they do in a forward pass.
func (k *kernelBench) timeOp(sync compute.Buffer, op func()) (time.Duration, int) {
	one := make([]float32, 1)
	wait := func() { k.b.Read(one, sync.Slice(0, 1)) }
	op()
	wait()
	t0 := time.Now()
	op()
	wait()
	reps := int(min(1000, max(1, k.timing/max(time.Since(t0), time.Microsecond))))
	t0 = time.Now()
	for range reps {
		op()
	}
	wait()
	return time.Since(t0) / time.Duration(reps), reps
}

// rate formats bytes moved in d as GB/s and a share of the device's peak.
func (k *kernelBench) rate(bytes int64, d time.Duration) (string, float64) {
	gbs := float64(bytes) / d.Seconds() / 1e9
	s := fmt.Sprintf("%.0f GB/s", gbs)
	if peak := k.b.Bandwidth(); peak > 0 {
		s += fmt.Sprintf(" (%.0f%% of %.0f)", 100*gbs*1e9/peak, peak/1e9)
	}
	return s, gbs
}

// matMul reports out = x times w transposed for a random bf16 weight of
// rows x cols and each n of ns rows of x: the matrix-vector kernel up to
// maxMatVecRows rows, cuBLAS or the matrix kernel past them, as MatMul
// picks. Up to three rows of each result are checked against float64.
func (k *kernelBench) matMul(name string, rows, cols int, ns []int) {
	label := func(n int) string {
		if n > maxMatVecRows {
			return fmt.Sprintf("%s matmul %s", k.shape, name)
		}
		return fmt.Sprintf("%s matvec %s", k.shape, name)
	}
	if k.r.left() <= 0 {
		for _, n := range ns {
			k.skip(label(n))
		}
		return
	}
	b := k.b
	w := randBF16(seedOf(k.shape+name), rows, cols)
	wt, err := b.Upload(tensor.Mat{DType: tensor.BF16, Rows: rows, Cols: cols, U16: w})
	if err != nil {
		k.r.row("kernels", label(ns[0]), statusFail, err.Error(), nil)
		return
	}
	for _, n := range ns {
		if k.skip(label(n)) {
			continue
		}
		k.matMulRows(label(n), name, w, wt, rows, cols, n)
	}
}

// quantMatVec reports decode's products with quantized weights (quant_x
// and matvec_q8: x quantized to 8 bits per group, integer dot products)
// at the feed-forward's two shapes, for each of types whose block divides
// the row and each n of ns rows of x: time, the blocks' bytes per second
// beside the device's peak (decode's bound), and the largest error of the
// first and last rows against float64 over the dequantized weights,
// relative to sum |w x| (held to 0.02, the 8-bit activations', as
// TestQuantMatVecMatchesCPU holds the emulator).
func (k *kernelBench) quantMatVec(types []tensor.DType, ns []int) {
	s := k.spec
	for _, sh := range []struct {
		name       string
		rows, cols int
	}{{"gate_proj/up_proj", s.Intermediate, s.Hidden}, {"down_proj", s.Hidden, s.Intermediate}} {
		for _, dt := range types {
			f := dt.Format()
			if sh.cols%f.Block != 0 {
				continue
			}
			label := func(n int) string { return fmt.Sprintf("%s matvec_q8 %s %s x %d", k.shape, sh.name, f.Name, n) }
			if k.r.left() <= 0 {
				for _, n := range ns {
					k.skip(label(n))
				}
				continue
			}
			q := quantWeight(rand.New(rand.NewPCG(seedOf(label(0)), 1)), f, sh.rows, sh.cols)
			wt, err := k.b.Upload(tensor.Mat{DType: dt, Rows: sh.rows, Cols: sh.cols, Q: q})
			if err != nil {
				k.r.row("kernels", label(ns[0]), statusFail, err.Error(), nil)
				continue
			}
			for _, n := range ns {
				if k.skip(label(n)) {
					continue
				}
				x := randNormal(seedOf(label(n)+"/x"), n*sh.cols)
				xb, out := upload(k.b, x), k.b.Alloc(n*sh.rows)
				per, reps := k.timeOp(out, func() { k.b.MatMul(out, xb, n, wt) })
				got := make([]float32, sh.rows)
				var worst float64
				for _, i := range slices.Compact([]int{0, n - 1}) {
					k.b.Read(got, out.Slice(i*sh.rows, (i+1)*sh.rows))
					ref, mag := quantRef(k.r.t, dt, q, x[i*sh.cols:(i+1)*sh.cols], 1, sh.rows, sh.cols)
					for j, v := range got {
						worst = max(worst, math.Abs(float64(v)-ref[j])/max(mag[j], 1e-30))
					}
				}
				if err := k.b.Err(); err != nil {
					k.r.row("kernels", label(n), statusFail, err.Error(), nil)
					return
				}
				const tol = 0.02
				bytes := int64(len(q)) + int64(n)*int64(sh.cols+sh.rows)*4
				rate, gbs := k.rate(bytes, per)
				k.r.row("kernels", label(n), status(worst <= tol), fmt.Sprintf("%dx%d %s x %d rows: %s, %s (the blocks: %.3g bytes a weight); max err %.2g of sum |w x| (tol %.2g) vs float64",
					sh.rows, sh.cols, f.Name, n, fmtDur(per), rate, float64(len(q))/float64(sh.rows*sh.cols), worst, tol), map[string]any{
					"shape": k.shape, "kernel": "matvec_q8", "weight": sh.name, "dtype": f.Name, "rows": sh.rows, "cols": sh.cols, "n": n, "reps": reps,
					"us": float64(per) / 1e3, "gbs": gbs, "rel_err": worst, "tol": tol,
				})
			}
			runtime.GC()
		}
	}
}

// matMulRows reports one matMul row: n rows of x times the weight w,
// uploaded as wt.
func (k *kernelBench) matMulRows(label, name string, w []uint16, wt compute.Weight, rows, cols, n int) {
	b := k.b
	x := randNormal(seedOf(label+"/x"), n*cols)
	xb, out := upload(b, x), b.Alloc(n*rows)
	per, reps := k.timeOp(out, func() { b.MatMul(out, xb, n, wt) })
	var worst float64
	got := make([]float32, rows)
	bf16 := n > maxMatVecRows && !b.g16.exact // the activations rounded to bf16 (gemm.go)
	for _, i := range slices.Compact([]int{0, n / 2, n - 1}) {
		b.Read(got, out.Slice(i*rows, (i+1)*rows))
		xi := slices.Clone(x[i*cols : (i+1)*cols])
		if bf16 {
			for c, v := range xi {
				xi[c] = tensor.BF16ToF32(tensor.F32ToBF16(v))
			}
		}
		worst = max(worst, relErr(got, refMatVec(w, rows, cols, xi)))
	}
	kind, tol := "matvec", 1e-4
	if n > maxMatVecRows {
		kind = "matmul"
		if b.gemm != nil && b.tf32 && !bf16 {
			tol = 5e-3 // TF32 rounds x to 10 mantissa bits
		}
	}
	if err := b.Err(); err != nil {
		k.r.row("kernels", label, statusFail, err.Error(), nil)
		return
	}
	bytes := int64(rows)*int64(cols)*2 + int64(n)*int64(cols+rows)*4
	flops := 2 * float64(n) * float64(rows) * float64(cols)
	rate, gbs := k.rate(bytes, per)
	text := fmt.Sprintf("%dx%d bf16 x %d rows: %s, %s, %.2f TFLOP/s; max rel err %.2g (tol %.0g) vs float64", rows, cols, n, fmtDur(per), rate, flops/per.Seconds()/1e12, worst, tol)
	k.r.row("kernels", label, status(worst <= tol), text, map[string]any{
		"shape": k.shape, "kernel": kind, "weight": name, "rows": rows, "cols": cols, "n": n, "reps": reps,
		"us": float64(per) / 1e3, "gbs": gbs, "tflops": flops / per.Seconds() / 1e12, "rel_err": worst, "tol": tol,
	})
}

// fused reports the decode fusions' kernels for one row at the shape's
// sizes against float64: norm_qkv (RMSNorm, the q, k and v projections
// with biases, RoPE on q, at position 100), norm_swiglu (RMSNorm, gate
// and up, silu(gate)*up) and matvec_add (down_proj added to the residual
// stream), through the backend's compute.Fused methods.
func (k *kernelBench) fused() {
	labels := []string{k.shape + " fused norm_qkv", k.shape + " fused norm_swiglu", k.shape + " fused matvec_add down_proj"}
	if k.r.left() <= 0 {
		for _, l := range labels {
			k.skip(l)
		}
		return
	}
	s, b := k.spec, k.b
	h, d, inter := s.Hidden, s.HeadDim, s.Intermediate
	qd, kvd := s.Heads*d, s.KVHeads*d
	const eps, start = 1e-6, 100
	x, g := randNormal(seedOf(k.shape+"fused/x"), h), randNormal(seedOf(k.shape+"fused/g"), h)
	// The normalised row in float64, rounded to float32 for refMatVec.
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := 1 / math.Sqrt(ss/float64(h)+eps)
	xn := make([]float32, h)
	for i := range xn {
		xn[i] = float32(float64(x[i]) * inv * float64(g[i]))
	}
	xb, gb := upload(b, x), upload(b, g)
	weight := func(name string, rows, cols int) ([]uint16, compute.Weight, bool) {
		w := randBF16(seedOf(k.shape+"fused/"+name), rows, cols)
		wt, err := b.Upload(tensor.Mat{DType: tensor.BF16, Rows: rows, Cols: cols, U16: w})
		if err != nil {
			k.r.row("kernels", k.shape+" fused "+name, statusFail, err.Error(), nil)
			return nil, nil, false
		}
		return w, wt, true
	}
	report := func(label, kernel string, per time.Duration, reps int, bytes int64, got []float32, want []float64) {
		const tol = 1e-4
		if err := b.Err(); err != nil {
			k.r.row("kernels", label, statusFail, err.Error(), nil)
			return
		}
		worst := relErr(got, want)
		rate, gbs := k.rate(bytes, per)
		k.r.row("kernels", label, status(worst <= tol), fmt.Sprintf("1 row: %s, %s; max rel err %.2g (tol %.0g) vs float64", fmtDur(per), rate, worst, tol), map[string]any{
			"shape": k.shape, "kernel": kernel, "n": 1, "reps": reps, "us": float64(per) / 1e3, "gbs": gbs, "rel_err": worst, "tol": tol,
		})
	}

	// norm_qkv: q rotated, k and v as projected.
	if !k.skip(labels[0]) {
		wq, tq, okq := weight("q", qd, h)
		wk, tk, okk := weight("k", kvd, h)
		wv, tv, okv := weight("v", kvd, h)
		if okq && okk && okv {
			bq, bk, bv := randNormal(seedOf(k.shape+"fused/bq"), qd), randNormal(seedOf(k.shape+"fused/bk"), kvd), randNormal(seedOf(k.shape+"fused/bv"), kvd)
			cos, sin := ropeTables(start+1, d)
			p := compute.QKV{Norm: gb, Eps: eps, Q: tq, K: tk, V: tv, QBias: upload(b, bq), KBias: upload(b, bk), VBias: upload(b, bv),
				Heads: s.Heads, KVHeads: s.KVHeads, HeadDim: d, Cos: upload(b, cos), Sin: upload(b, sin)}
			qb, kb, vb := b.Alloc(qd), b.Alloc(kvd), b.Alloc(kvd)
			pos := []int{start}
			per, reps := k.timeOp(vb, func() { b.NormQKV(qb, kb, vb, xb, pos, &p) })
			want := make([]float64, 0, qd+2*kvd)
			pq := refMatVec(wq, qd, h, xn)
			half := d / 2
			for i := range pq {
				pq[i] += float64(bq[i])
			}
			for hd := range s.Heads {
				for j := range half {
					c, sn := float64(cos[start*half+j]), float64(sin[start*half+j])
					a, bb := pq[hd*d+j], pq[hd*d+j+half]
					pq[hd*d+j], pq[hd*d+j+half] = a*c-bb*sn, bb*c+a*sn
				}
			}
			want = append(want, pq...)
			for _, m := range []struct {
				w    []uint16
				bias []float32
			}{{wk, bk}, {wv, bv}} {
				pk := refMatVec(m.w, kvd, h, xn)
				for i := range pk {
					pk[i] += float64(m.bias[i])
				}
				want = append(want, pk...)
			}
			got := append(append(read(b, qb), read(b, kb)...), read(b, vb)...)
			report(labels[0], "norm_qkv", per, reps, int64(qd+2*kvd)*int64(h)*2+int64(h+qd+2*kvd)*4, got, want)
		}
	}
	runtime.GC()

	// norm_swiglu: silu(gate)*up.
	if !k.skip(labels[1]) {
		wg, tg, okg := weight("gate", inter, h)
		wu, tu, oku := weight("up", inter, h)
		if okg && oku {
			p := compute.SwiGLU{Norm: gb, Eps: eps, Gate: tg, Up: tu}
			out := b.Alloc(inter)
			per, reps := k.timeOp(out, func() { b.NormSwiGLU(out, xb, 1, &p) })
			gate, up := refMatVec(wg, inter, h, xn), refMatVec(wu, inter, h, xn)
			for i := range gate {
				gate[i] = gate[i] / (1 + math.Exp(-gate[i])) * up[i]
			}
			report(labels[1], "norm_swiglu", per, reps, 2*int64(inter)*int64(h)*2+int64(h+inter)*4, read(b, out), gate)
		}
	}
	runtime.GC()

	// matvec_add: the residual plus down_proj of one row, checked after
	// one run from a known residual, then timed.
	if !k.skip(labels[2]) {
		if wd, td, ok := weight("down", h, inter); ok {
			act := randNormal(seedOf(k.shape+"fused/act"), inter)
			res := randNormal(seedOf(k.shape+"fused/res"), h)
			ab, rb := upload(b, act), upload(b, res)
			b.MatMulAdd(rb, ab, 1, td, compute.Buffer{})
			got := read(b, rb)
			want := refMatVec(wd, h, inter, act)
			for i := range want {
				want[i] += float64(res[i])
			}
			per, reps := k.timeOp(rb, func() { b.MatMulAdd(rb, ab, 1, td, compute.Buffer{}) })
			report(labels[2], "matvec_add", per, reps, int64(h)*int64(inter)*2+int64(inter+2*h)*4, got, want)
		}
	}
}

// rmsNorm reports RMSNorm of n rows of the hidden width against float64.
func (k *kernelBench) rmsNorm(n int) {
	label := fmt.Sprintf("%s rmsnorm %d rows", k.shape, n)
	if k.skip(label) {
		return
	}
	b, h := k.b, k.spec.Hidden
	const eps = 1e-6
	x := randNormal(seedOf(label), n*h)
	w := randNormal(seedOf(label+"/w"), h)
	xb, wb, out := upload(b, x), upload(b, w), b.Alloc(n*h)
	per, reps := k.timeOp(out, func() { b.RMSNorm(out, xb, wb, n, eps) })
	got := read(b, out)
	want := make([]float64, n*h)
	for i := range n {
		var ss float64
		for _, v := range x[i*h : (i+1)*h] {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/float64(h)+eps)
		for j := range h {
			want[i*h+j] = float64(x[i*h+j]) * inv * float64(w[j])
		}
	}
	if err := b.Err(); err != nil {
		k.r.row("kernels", label, statusFail, err.Error(), nil)
		return
	}
	worst, tol := relErr(got, want), 1e-5
	bytes := int64(2*n*h+h) * 4
	rate, gbs := k.rate(bytes, per)
	k.r.row("kernels", label, status(worst <= tol), fmt.Sprintf("width %d: %s, %s; max rel err %.2g (tol %.0g) vs float64", h, fmtDur(per), rate, worst, tol), map[string]any{
		"shape": k.shape, "kernel": "rmsnorm", "rows": n, "cols": h, "reps": reps, "us": float64(per) / 1e3, "gbs": gbs, "rel_err": worst, "tol": tol,
	})
}

// attention reports one decode step's attention (one query row at the
// last of ctx positions) over bf16 blocks, or int8, fixed-rate kakeya-pc
// (format 8, the preset's "kakeya-pc:rate=2.5") or entropy-coded
// kakeya-pc ones (format 9, "kakeya-pc:ec=true") kept encoded on the
// device, the last block hot, against the CPU backend's attention over
// the same blocks (the encoded ones encoded once, from the device's bf16
// rows, and given to both). The kakeya-pc codec's calibration is white
// (identity basis, unit variances, as the rows are): every component
// coded, the most symbols a block can hold at its rate.
func (k *kernelBench) attention(ctx int, cache string) {
	label := fmt.Sprintf("%s attention ctx %d %s", k.shape, ctx, cache)
	if k.skip(label) {
		return
	}
	s, bs := k.spec, k.block
	heads, kvh, d := s.Heads, s.KVHeads, s.HeadDim
	nb := (ctx + bs - 1) / bs
	host := cpubackend.New(runtime.NumCPU())
	defer host.Close()
	var int8c codec.Codec
	switch cache {
	case "int8":
		c, err := codec.New(codec.Spec{Name: "int8"})
		if err != nil {
			k.r.row("kernels", label, statusFail, err.Error(), nil)
			return
		}
		int8c = c
	case "kakeya-pc:rate=2.5", "kakeya-pc:ec=true":
		st := &codec.PCAStats{Mean: make([]float32, d), Basis: make([]float32, d*d), Var: make([]float32, d), Between: make([]float32, d)}
		for j := range d {
			st.Basis[j*d+j], st.Var[j], st.Between[j] = 1, 1, 0.01
		}
		o := codec.DefaultKakeyaPCOptions()
		o.Block = bs
		if cache == "kakeya-pc:ec=true" {
			o.Entropy = true // stream layout 2, the codecs' default
		} else {
			o.Rate = 2.5 // the kakeya preset's codec (format 8)
		}
		c, err := codec.NewKakeyaPC(o, st, nil)
		if err != nil {
			k.r.row("kernels", label, statusFail, err.Error(), nil)
			return
		}
		int8c = c
	}
	// Keys in the first half, values in the second, a row of every KV
	// head per token, as the cache appends them.
	src := randNormal(seedOf(label), 2*nb*bs*kvh*d)
	q := randNormal(seedOf(label+"/q"), heads*d)
	cos, sin := ropeCosSin(nb*bs, d, s.RopeTheta)
	encs := map[[2]int][]byte{}
	var bytes int64
	outs := make([][]float32, 2)
	var per time.Duration
	var reps int
	for i, be := range []compute.Backend{k.b, host} {
		store := be.NewBlockStore(bs, d, true)
		srcB := upload(be, src)
		layer := &reportLayer{n: ctx, parts: make([][]compute.Part, nb)}
		x := make([]float32, bs*d)
		for blk := range nb {
			layer.parts[blk] = make([]compute.Part, 2*kvh)
			m := min(bs, ctx-blk*bs)
			for j := range layer.parts[blk] {
				p, err := store.NewPart()
				if err != nil {
					k.r.row("kernels", label, statusFail, err.Error(), nil)
					return
				}
				layer.parts[blk][j] = p
				off := (j%2)*nb*bs*kvh*d + blk*bs*kvh*d + (j/2)*d
				store.Write(p, 0, srcB.Slice(off, off+(m-1)*kvh*d+d), kvh*d, m)
				if int8c == nil || blk == nb-1 {
					if i == 0 {
						bytes += int64(m * d * 2)
					}
					continue // bf16, or the hot block
				}
				enc, ok := encs[[2]int{blk, j}]
				if !ok {
					if err := store.Read(x, p); err != nil {
						k.r.row("kernels", label, statusFail, err.Error(), nil)
						return
					}
					if enc, err = int8c.Encode(nil, x, bs, d); err != nil {
						k.r.row("kernels", label, statusFail, err.Error(), nil)
						return
					}
					encs[[2]int{blk, j}] = enc
					bytes += int64(len(enc))
				}
				if err := store.SetEncoded(p, enc, int8c); err != nil {
					k.r.row("kernels", label, statusFail, err.Error(), nil)
					return
				}
			}
		}
		att, err := be.NewAttention(compute.AttentionParams{Heads: heads, KVHeads: kvh, HeadDim: d, BlockSize: bs, MaxContext: nb * bs})
		if err != nil {
			k.r.row("kernels", label, statusFail, err.Error(), nil)
			return
		}
		qb, out, cb, sb := upload(be, q), be.Alloc(heads*d), upload(be, cos), upload(be, sin)
		fwd := func() {
			if err := att.Forward(out, qb, 1, ctx-1, layer, cb, sb); err != nil {
				k.r.t.Error(err)
			}
		}
		if be == compute.Backend(k.b) {
			per, reps = k.timeOp(out, fwd)
		} else {
			fwd()
		}
		outs[i] = read(be, out)
		for _, ps := range layer.parts {
			for _, p := range ps {
				store.Release(p)
			}
		}
	}
	if err := k.b.Err(); err != nil {
		k.r.row("kernels", label, statusFail, err.Error(), nil)
		return
	}
	want := make([]float64, len(outs[1]))
	for i, v := range outs[1] {
		want[i] = float64(v)
	}
	// Both read the same bf16, int8 or kakeya-pc values and differ by
	// float32 reassociation (sums over the context in another order); a
	// misread block is off by the size of the values.
	worst, tol := relErr(outs[0], want), 1e-3
	bytes += int64(2 * heads * d * 4)
	rate, gbs := k.rate(bytes, per)
	text := fmt.Sprintf("%d heads / %d KV heads of %d, %d-token blocks, %.1f MB of cache: %s, %s; max rel err %.2g (tol %.0g) vs the CPU backend",
		heads, kvh, d, bs, float64(bytes)/1e6, fmtDur(per), rate, worst, tol)
	k.r.row("kernels", label, status(worst <= tol), text, map[string]any{
		"shape": k.shape, "kernel": "attention", "ctx": ctx, "cache": cache, "bytes": bytes, "reps": reps,
		"us": float64(per) / 1e3, "gbs": gbs, "rel_err": worst, "tol": tol,
	})
}

// reportLayer is a KV layer of parts indexed [block][2*head+side].
type reportLayer struct {
	n     int
	parts [][]compute.Part
}

func (l *reportLayer) Len() int                              { return l.n }
func (l *reportLayer) Part(head, block, kv int) compute.Part { return l.parts[block][2*head+kv] }

// ropeCosSin returns RoPE's cos and sin for positions 0..pos-1, d/2 per
// position, at base theta.
func ropeCosSin(pos, d int, theta float64) (cos, sin []float32) {
	half := d / 2
	cos, sin = make([]float32, pos*half), make([]float32, pos*half)
	for p := range pos {
		for i := range half {
			a := float64(p) * math.Pow(theta, -float64(2*i)/float64(d))
			cos[p*half+i], sin[p*half+i] = float32(math.Cos(a)), float32(math.Sin(a))
		}
	}
	return cos, sin
}

// seedOf hashes a row's label into a seed.
func seedOf(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// parallel runs f over [0, n) in chunks on every core.
func parallel(n, chunk int, f func(lo, hi int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for lo := range next {
				f(lo, min(n, lo+chunk))
			}
		})
	}
	for lo := 0; lo < n; lo += chunk {
		next <- lo
	}
	close(next)
	wg.Wait()
}

// randBF16 returns a rows x cols bf16 matrix, uniform with standard
// deviation 1/sqrt(cols), as testmodel's linear layers.
func randBF16(seed uint64, rows, cols int) []uint16 {
	w := make([]uint16, rows*cols)
	a := float32(math.Sqrt(3 / float64(cols)))
	const chunk = 1 << 20
	parallel(len(w), chunk, func(lo, hi int) {
		r := rand.New(rand.NewPCG(seed, uint64(lo/chunk)))
		for i := lo; i < hi; i++ {
			w[i] = tensor.F32ToBF16(a * (2*r.Float32() - 1))
		}
	})
	return w
}

// randNormal returns n standard normal values.
func randNormal(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// refMatVec returns w (rows x cols, bf16) times x in float64.
func refMatVec(w []uint16, rows, cols int, x []float32) []float64 {
	out := make([]float64, rows)
	parallel(rows, max(1, (1<<18)/cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			var s float64
			for c, v := range w[r*cols : (r+1)*cols] {
				s += float64(tensor.BF16ToF32(v)) * float64(x[c])
			}
			out[r] = s
		}
	})
	return out
}

// relErr returns the largest |got-want| over the largest |want|; NaN
// when got holds one.
func relErr(got []float32, want []float64) float64 {
	var d, scale float64
	for i, w := range want {
		g := float64(got[i])
		if math.IsNaN(g) {
			return math.NaN()
		}
		d, scale = max(d, math.Abs(g-w)), max(scale, math.Abs(w))
	}
	return d / max(scale, 1e-30)
}

// fmtDur formats a kernel's time: "12.3 µs", "4.56 ms".
func fmtDur(d time.Duration) string {
	if d < time.Millisecond {
		return fmt.Sprintf("%.1f µs", float64(d)/1e3)
	}
	return fmt.Sprintf("%.2f ms", float64(d)/1e6)
}

// goldenCase is a real model of the shared data set and the logits an
// independent implementation computed for it.
type goldenCase struct{ model, file, by string }

var goldenCases = []goldenCase{
	{"stories260K", "stories260K_runc_logits.txt", "llama2.c"},
	{"ref-qwen2-6m", "ref-qwen2-6m_logits.txt", "PyTorch"},
}

// goldenShared returns the shared data set's directory once it holds every
// model and golden file of cases; without one, t is skipped (or fails,
// where the data set is required) naming it.
func goldenShared(t testing.TB, cases []goldenCase) string {
	t.Helper()
	for _, gc := range cases {
		shareddata.File(t, "models", gc.model)
		shareddata.File(t, "reference", gc.file)
	}
	return shareddata.Path()
}

// readGolden reads a golden file: per line, the input id and the logits
// after it.
func readGolden(path string) (ids []int, logits [][]float32, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue
		}
		id, err := strconv.Atoi(fs[0])
		if err != nil {
			return nil, nil, fmt.Errorf("%s: line %d: %v", path, len(ids)+1, err)
		}
		row := make([]float32, len(fs)-1)
		for i, s := range fs[1:] {
			v, err := strconv.ParseFloat(s, 32)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: line %d: %v", path, len(ids)+1, err)
			}
			row[i] = float32(v)
		}
		ids, logits = append(ids, id), append(logits, row)
	}
	return ids, logits, sc.Err()
}

// goldenRun is a way of running the golden models: a name, the model
// options and the tolerances of its decode and prefill logits (absolute,
// or, when rel, times the largest |logit| of the position, at least 1).
type goldenRun struct {
	name           string
	opts           model.Options
	decTol, preTol float64
	rel            bool
}

// goldenRows reports, for each run and model, the largest difference of
// its logits from the golden ones, token by token (decode) and all at once
// (prefill).
func goldenRows(r *reporter, step, shared string, cases []goldenCase, runs []goldenRun) {
	for _, gc := range cases {
		ids, want, err := readGolden(filepath.Join(shared, "reference", gc.file))
		if err != nil {
			r.row(step, gc.model, statusFail, err.Error(), nil)
			continue
		}
		for _, run := range runs {
			label := gc.model + " " + run.name
			m, err := model.Load(filepath.Join(shared, "models", gc.model), run.opts)
			if err != nil {
				r.row(step, label, statusFail, err.Error(), nil)
				continue
			}
			pre, err := m.Logits(ids)
			var dec [][]float32
			if err == nil {
				dec, err = decodeAll(m, ids)
			}
			m.Close()
			if err != nil {
				r.row(step, label, statusFail, err.Error(), nil)
				continue
			}
			worst := func(got [][]float32, tol float64) (float64, bool) {
				var w float64
				ok := len(got) == len(want)
				for p := range min(len(got), len(want)) {
					if len(got[p]) != len(want[p]) {
						return math.NaN(), false
					}
					d := maxAbsDiff(got[p], want[p])
					t := tol
					if run.rel {
						t *= max(1, maxAbs(want[p]))
					}
					if math.IsNaN(d) || d > t {
						ok = false
					}
					w = max(w, d)
				}
				return w, ok
			}
			dw, dok := worst(dec, run.decTol)
			pw, pok := worst(pre, run.preTol)
			unit := ""
			if run.rel {
				unit = " x max(1, max|logit|)"
			}
			text := fmt.Sprintf("%d positions vs %s: max abs err decode %.2g (tol %.0g%s), prefill %.2g (tol %.0g%s)",
				len(ids), gc.by, dw, run.decTol, unit, pw, run.preTol, unit)
			r.row(step, label, status(dok && pok), text, map[string]any{
				"model": gc.model, "run": run.name, "positions": len(ids), "decode_err": dw, "prefill_err": pw,
				"decode_tol": run.decTol, "prefill_tol": run.preTol, "relative_tol": run.rel,
			})
		}
	}
}

// quantRows reports, for each of weights (Options.Weights), ref-qwen2-6m
// quantized on load on gpu over the golden file's first positions,
// prefill and token by token, against the CPU backend (whose quantized
// kernels round the activations to 8 bits per group, as the device's
// decode products, quant_x and matvec_q8, and prefills of up to
// quantSplitRows tokens do) and the float64 reference backend over the
// same dequantized weights: each held to 0.03 of the largest logit (the
// 8-bit activations' error; a code that rounds the other way on one side
// moves a logit by ~1e-3; the emulator gives 0.003-0.007 on 3 positions).
func quantRows(r *reporter, step, shared string, gpu compute.Backend, weights []string, positions int) {
	const tol = 0.03
	gc := goldenCases[1]
	ids, _, err := readGolden(filepath.Join(shared, "reference", gc.file))
	if err != nil {
		r.row(step, gc.model, statusFail, err.Error(), nil)
		return
	}
	ids = ids[:min(len(ids), positions)]
	dir := filepath.Join(shared, "models", gc.model)
	for _, w := range weights {
		label := gc.model + " " + w
		logits := func(b compute.Backend) (pre, dec [][]float32, desc string, err error) {
			m, err := model.Load(dir, model.Options{Backend: b, Weights: w})
			if err != nil {
				return nil, nil, "", err
			}
			defer m.Close()
			pre, err = m.Logits(ids)
			if err == nil {
				dec, err = decodeAll(m, ids)
			}
			return pre, dec, m.Weights(), err
		}
		gp, gd, desc, err := logits(gpu)
		var rp, rd, cp, cd [][]float32
		if err == nil {
			rp, rd, _, err = logits(reference.Backend{})
		}
		if err == nil {
			cp, cd, _, err = logits(cpuF32(r.t, 0))
		}
		if err != nil {
			r.row(step, label, statusFail, err.Error(), nil)
			continue
		}
		worst := func(got, want [][]float32) float64 {
			var w float64
			for p := range want {
				w = max(w, maxAbsDiff(got[p], want[p])/max(1, maxAbs(want[p])))
			}
			return w
		}
		pr, dr, pc, dc := worst(gp, rp), worst(gd, rd), worst(gp, cp), worst(gd, cd)
		ok := !math.IsNaN(pr+dr+pc+dc) && max(pr, dr, pc, dc) <= tol
		r.row(step, label, status(ok), fmt.Sprintf("%d positions: max abs err vs the CPU prefill %.2g, decode %.2g; vs the float64 reference prefill %.2g, decode %.2g (tol %.2g x max(1, max|logit|)); weights %s",
			len(ids), pc, dc, pr, dr, tol, desc), map[string]any{"model": gc.model, "weights": w, "positions": len(ids), "prefill_err": pr, "decode_err": dr, "prefill_cpu_err": pc, "decode_cpu_err": dc, "tol": tol})
	}
}

// decodeAll feeds ids one at a time to a new sequence and returns every
// position's logits.
func decodeAll(m *model.Model, ids []int) ([][]float32, error) {
	s, err := m.NewSequence()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	var rows [][]float32
	for _, id := range ids {
		l, err := s.Forward([]int{id}, false)
		if err != nil {
			return nil, err
		}
		rows = append(rows, slices.Clone(l))
	}
	return rows, nil
}

// greedyRows reports whether greedy generation of up to tokens tokens
// after each golden prompt gives the same tokens on the backend (picked on
// its device where it can: compute.Greedy) as on the
// CPU (float32 products), and where and by how close a call it first
// differs.
func greedyRows(r *reporter, step, shared string, cases []goldenCase, gpu compute.Backend, tokens int) {
	for _, gc := range cases {
		ids, _, err := readGolden(filepath.Join(shared, "reference", gc.file))
		if err != nil {
			r.row(step, gc.model, statusFail, err.Error(), nil)
			continue
		}
		dir := filepath.Join(shared, "models", gc.model)
		var gen [2][]int
		var margins []float32
		for i, opts := range []model.Options{{Backend: cpuF32(r.t, 0)}, {Backend: gpu}} {
			m, err := model.Load(dir, opts)
			if err == nil {
				n := min(tokens, m.MaxContext()-len(ids))
				if i == 0 {
					gen[i], margins, err = greedy(m, ids, n)
				} else {
					// The device picks the tokens (compute.Greedy).
					gen[i], err = greedyPicked(m, ids, n)
				}
				m.Close()
			}
			if err != nil {
				r.row(step, gc.model, statusFail, err.Error(), nil)
				gen[0] = nil
				break
			}
		}
		if gen[0] == nil {
			continue
		}
		same := 0
		for same < len(gen[0]) && same < len(gen[1]) && gen[0][same] == gen[1][same] {
			same++
		}
		ok := same == len(gen[0]) && len(gen[0]) == len(gen[1])
		text := fmt.Sprintf("%d of %d greedy tokens after a %d-token prompt equal to the CPU's", same, len(gen[0]), len(ids))
		fields := map[string]any{"model": gc.model, "prompt": len(ids), "tokens": len(gen[0]), "equal": same}
		if !ok && same < len(margins) {
			text += fmt.Sprintf("; first difference at token %d (CPU %d, device %d; the CPU's top-2 logit margin there %.3g)", same, gen[0][same], gen[1][same], margins[same])
			fields["cpu_margin"] = float64(margins[same])
		}
		r.row(step, gc.model, status(ok), text, fields)
	}
}

// greedy generates n tokens after prompt, always the most likely, and
// returns them with the margin of each choice over the runner-up.
func greedy(m *model.Model, prompt []int, n int) (toks []int, margins []float32, err error) {
	s, err := m.NewSequence()
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	l, err := s.Forward(prompt, false)
	for range n {
		if err != nil {
			return nil, nil, err
		}
		best, second := 0, -1
		for i, v := range l {
			switch {
			case v > l[best]:
				best, second = i, best
			case i != best && (second < 0 || v > l[second]):
				second = i
			}
		}
		toks, margins = append(toks, best), append(margins, l[best]-l[max(second, 0)])
		l, err = s.Forward([]int{best}, false)
	}
	return toks, margins, err
}

// greedyPicked generates n tokens after prompt, always the most likely,
// picked by the model's backend on its device where it can
// (model.BatchItem.Greedy): only the token ids cross back to the host.
func greedyPicked(m *model.Model, prompt []int, n int) ([]int, error) {
	s, err := m.NewSequence()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	bt, err := m.NewBatch(len(prompt))
	if err != nil {
		return nil, err
	}
	items := []model.BatchItem{{Seq: s, IDs: prompt, Greedy: true}}
	var toks []int
	for range n {
		if err := bt.Forward(items); err != nil {
			return nil, err
		}
		if it := items[0]; it.NonFinite >= 0 {
			return nil, fmt.Errorf("non-finite logit at token id %d after %d tokens", it.NonFinite, len(toks))
		}
		toks = append(toks, items[0].Token)
		items[0].IDs = toks[len(toks)-1:]
	}
	return toks, nil
}

// gemmaRows reports, for the tiny Gemma 2 and Gemma 3 presets (window 8,
// Gemma 2's softcaps, Gemma 3's q/k norms and two RoPE bases), whether
// the backend's logits over tokens positions (a prefill of 10, then
// decode steps, far past the window) match the float64 reference
// backend's within 1e-3 of each row's largest (at least 1), and whether
// 32 greedy tokens (picked on the device) after a 6-token prompt are the
// CPU's (float32 products).
func gemmaRows(r *reporter, step string, gpu compute.Backend, tokens int) {
	const pre = 10
	for _, name := range []string{"gemma2-tiny", "gemma3-tiny"} {
		spec := testmodel.Presets[name]
		dir := filepath.Join(r.t.TempDir(), name)
		if err := testmodel.Write(dir, spec); err != nil {
			r.row(step, name, statusFail, err.Error(), nil)
			continue
		}
		ids := make([]int, tokens)
		for i := range ids {
			ids[i] = (i*7919 + 13) % spec.Vocab
		}
		var logits [2][][]float32
		var gen [2][]int
		var err error
		for i, b := range []compute.Backend{reference.Backend{}, gpu} {
			var m *model.Model
			if m, err = model.Load(dir, model.Options{Backend: b, MaxContext: tokens + 64}); err != nil {
				break
			}
			logits[i], err = prefillDecode(m, ids, pre)
			if err == nil && i == 1 {
				gen[1], err = greedyPicked(m, ids[:6], 32)
			}
			m.Close()
			if err != nil {
				break
			}
		}
		if err == nil {
			var m *model.Model
			if m, err = model.Load(dir, model.Options{Backend: cpuF32(r.t, 0), MaxContext: tokens + 64}); err == nil {
				gen[0], _, err = greedy(m, ids[:6], 32)
				m.Close()
			}
		}
		if err != nil {
			r.row(step, name, statusFail, err.Error(), nil)
			continue
		}
		worst, at := 0.0, 0
		for p := range logits[0] {
			var d, scale float64
			for i, w := range logits[0][p] {
				d = max(d, math.Abs(float64(logits[1][p][i])-float64(w)))
				scale = max(scale, math.Abs(float64(w)))
			}
			if d /= max(1, scale); d > worst || math.IsNaN(d) {
				worst, at = d, p
			}
		}
		r.row(step, name+" logits", status(worst <= 1e-3),
			fmt.Sprintf("%d positions (window %d) vs the float64 reference: worst difference %.2g of the row's largest logit (position %d), tolerance 1e-3", tokens, spec.SlidingWindow, worst, at),
			map[string]any{"model": name, "positions": tokens, "worst_rel": worst})
		same := 0
		for same < len(gen[0]) && same < len(gen[1]) && gen[0][same] == gen[1][same] {
			same++
		}
		r.row(step, name+" greedy", status(same == len(gen[0]) && len(gen[0]) == len(gen[1])),
			fmt.Sprintf("%d of %d greedy tokens after a 6-token prompt equal to the CPU's", same, len(gen[0])),
			map[string]any{"model": name, "tokens": len(gen[0]), "equal": same})
	}
}

// prefillDecode returns the logits of every position of ids: a prefill of
// the first pre, then one token at a time.
func prefillDecode(m *model.Model, ids []int, pre int) ([][]float32, error) {
	s, err := m.NewSequence()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	l, err := s.Forward(ids[:pre], true)
	if err != nil {
		return nil, err
	}
	vocab := len(l) / pre
	var rows [][]float32
	for i := range pre {
		rows = append(rows, l[i*vocab:(i+1)*vocab])
	}
	for _, id := range ids[pre:] {
		if l, err = s.Forward([]int{id}, false); err != nil {
			return nil, err
		}
		rows = append(rows, slices.Clone(l))
	}
	return rows, nil
}

// decodeBytes returns the bytes of weights a decode step reads once each:
// the layers' matrices and the output head (tied or not).
func decodeBytes(s testmodel.Spec) int64 {
	h, q, kv, inter := int64(s.Hidden), int64(s.Heads*s.HeadDim), int64(s.KVHeads*s.HeadDim), int64(s.Intermediate)
	perLayer := h*q + 2*h*kv + q*h + 3*h*inter
	return int64(s.DType.Size()) * (int64(s.Layers)*perLayer + int64(s.Vocab)*h)
}

// throughput is a prefill and decode speed measurement of one checkpoint.
type throughput struct {
	r        *reporter
	step     string
	b        *Backend
	shape    string
	spec     testmodel.Spec
	dir      string
	caches   []string // plain, or a codec every layer's blocks are encoded with
	contexts []int
	steps    int // decode steps timed after each prefill
	block    int
	weights  string // Options.Weights: the matrices quantized on load ("": as stored)
}

// cacheSpec returns the cache settings of one of the report's caches:
// plain bf16 blocks, or a codec on every layer with a hot window of one
// block.
func cacheSpec(cache string, block int) kvconfig.Spec {
	if cache == "plain" {
		return kvconfig.Spec{KV: "none", BlockSize: block, CacheType: "bf16"}
	}
	return kvconfig.Spec{KV: cache, BlockSize: block, HotWindow: block, Boundary: "none", CacheType: "bf16"}
}

// cacheCalibration returns the calibration a report's cache needs: for
// kakeya-pc and kvtc (any spec of them, e.g. "kakeya-pc:ec=true") a synthetic one (synthPCACalibration: a speed measurement,
// not a quality one), else none.
func cacheCalibration(cache string, m *model.Model) *codec.Calibration {
	if codec.IsPrincipal(cache) {
		return synthPCACalibration(m, 1)
	}
	return nil
}

// run reports a row per cache and context: prefill and decode tokens/s,
// the bound memory bandwidth puts on decode (the weights and the cache as
// the device holds it, read once per token), and the driver calls per
// decode step. A cell its predecessors say would not finish in the time
// left is skipped.
func (tp *throughput) run() {
	r, b := tp.r, tp.b
	b.Launches() // count from before the load, so every graph is sized
	maxCtx := slices.Max(tp.contexts) + tp.steps + 1
	used0, _ := b.MemoryStats()
	m, err := model.Load(tp.dir, model.Options{Backend: b, MaxContext: maxCtx, Weights: tp.weights})
	shape := strings.TrimSpace(tp.shape + " " + tp.weights)
	if err != nil {
		r.row(tp.step, shape, statusFail, err.Error(), nil)
		return
	}
	defer m.Close()
	wbytes := decodeBytes(tp.spec)
	if tp.weights != "" {
		// Quantized on load: the bytes per weight the device holds on
		// average (its memory grew by the uploaded matrices, and a little
		// for the RoPE tables), times the weights a step reads.
		used1, _ := b.MemoryStats()
		es := int64(tp.spec.DType.Size())
		wbytes = int64(float64(wbytes/es) * float64(used1-used0) / float64(tp.spec.Bytes()/es))
	}
	// One untimed prefill first: what is set up once per backend and
	// model (cuBLAS's handle and workspace, scratch) is not the first
	// cell's prefill.
	if pol, _, err := kvplan.NewPolicy(cacheSpec("plain", tp.block), m.CacheShape(), nil); err == nil {
		if s, err := m.NewSequenceOpts(model.SequenceOptions{Cache: pol, BlockSize: tp.block}); err == nil {
			_, err = s.Forward(testIDs(min(slices.Min(tp.contexts), 512), tp.spec.Vocab), false)
			s.Close()
			if err != nil {
				r.row(tp.step, tp.shape, statusFail, "warm-up prefill: "+err.Error(), nil)
				return
			}
		}
	}
	// Seconds per token of the slowest cell so far, doubled for a longer
	// context than any so far (attention's share of prefill grows with
	// the context).
	var perToken float64
	seen := 0
	for _, cache := range tp.caches {
		sp := cacheSpec(cache, tp.block)
		pol, _, err := kvplan.NewPolicy(sp, m.CacheShape(), cacheCalibration(cache, m))
		if err != nil {
			r.row(tp.step, tp.shape+" "+cache, statusFail, err.Error(), nil)
			continue
		}
		for _, ctx := range tp.contexts {
			label := fmt.Sprintf("%s %s ctx %d", shape, cache, ctx)
			need := time.Duration(perToken * float64(ctx+tp.steps) * float64(time.Second))
			if ctx > seen {
				need *= 2
			}
			if need > r.left() {
				r.row(tp.step, label, statusSkip, fmt.Sprintf("out of the time budget (about %.0fs needed, %.0fs left)", need.Seconds(), max(0, r.left().Seconds())), map[string]any{"shape": tp.shape, "cache": cache, "ctx": ctx})
				continue
			}
			cellStart := time.Now()
			row, err := tp.cell(m, pol, sp.BlockSize, ctx, wbytes)
			perToken, seen = max(perToken, time.Since(cellStart).Seconds()/float64(ctx+tp.steps)), max(seen, ctx)
			if err == nil {
				err = b.Err()
			}
			if err != nil {
				r.row(tp.step, label, statusFail, err.Error(), nil)
				continue
			}
			row["shape"], row["cache"], row["ctx"] = tp.shape, cache, ctx
			if tp.weights != "" {
				row["weights"] = tp.weights
			}
			text := fmt.Sprintf("prefill %.0f tok/s, decode %.1f tok/s, bound %.1f tok/s (%.0f%%), KV %.1f MB; per decode step %.1f launch calls (%.1f kernels + %.1f graphs), %.1f kernels run, %.1f waits",
				row["prefill_tps"], row["decode_tps"], row["bound_tps"], 100*row["decode_tps"].(float64)/row["bound_tps"].(float64), row["kv_mb"],
				row["launch_calls"], row["kernel_launches"], row["graph_launches"], row["kernels_run"], row["waits"])
			r.row(tp.step, label, statusPass, text, row)
		}
	}
}

// cell measures one prefill of ctx tokens and tp.steps decode steps after
// it (the first untimed: graphs are captured on a run's second sight).
func (tp *throughput) cell(m *model.Model, pol kvcache.Policy, block, ctx int, wbytes int64) (map[string]any, error) {
	s, err := m.NewSequenceOpts(model.SequenceOptions{Cache: pol, BlockSize: block})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	vocab := tp.spec.Vocab
	t0 := time.Now()
	if _, err := s.Forward(testIDs(ctx, vocab), false); err != nil {
		return nil, err
	}
	prefill := float64(ctx) / time.Since(t0).Seconds()
	if _, err := s.Forward([]int{7}, false); err != nil {
		return nil, err
	}
	before := tp.b.Launches()
	t0 = time.Now()
	steps := max(1, tp.steps-1)
	for i := range steps {
		if _, err := s.Forward([]int{(i*31 + 7) % vocab}, false); err != nil {
			return nil, err
		}
	}
	decode := float64(steps) / time.Since(t0).Seconds()
	n := tp.b.Launches().Sub(before)
	kv := s.KVStats().Bytes()
	per := func(v int64) float64 { return float64(v) / float64(steps) }
	return map[string]any{
		"prefill_tps": prefill, "decode_tps": decode, "bound_tps": tp.b.Bandwidth() / float64(wbytes+kv), "kv_mb": float64(kv) / 1e6,
		"weight_mb": float64(wbytes) / 1e6, "launch_calls": per(n.Calls()), "kernel_launches": per(n.Kernels), "graph_launches": per(n.Graphs),
		"kernels_run": per(n.Kernels + n.GraphKernels), "waits": per(n.CopiesOut + n.Syncs),
	}, nil
}

// launchRows reports the driver calls of a decode step as the backend
// runs it, without the decode fusions, and without graphs, a backend
// opened for each, with the decode speed each gives.
func launchRows(r *reporter, step string, open func(Options) *Backend, shape string, spec testmodel.Spec, dir string, ctx, steps, block int) {
	for _, opts := range []Options{{}, {NoStepGraph: true}, {NoFusion: true}, {NoGraphs: true}} {
		label := fmt.Sprintf("%s ctx %d graphs %v fused %v step graph %v", shape, ctx, !opts.NoGraphs, !opts.NoFusion, !opts.NoStepGraph)
		if r.left() <= 0 {
			r.row(step, label, statusSkip, "out of the time budget", nil)
			continue
		}
		b := open(opts)
		tp := &throughput{r: r, step: step, b: b, shape: shape, spec: spec, dir: dir, steps: steps}
		b.Launches()
		m, err := model.Load(dir, model.Options{Backend: b, MaxContext: ctx + steps + 1})
		if err != nil {
			r.row(step, label, statusFail, err.Error(), nil)
			continue
		}
		pol, _, err := kvplan.NewPolicy(cacheSpec("plain", block), m.CacheShape(), nil)
		var row map[string]any
		if err == nil {
			row, err = tp.cell(m, pol, block, ctx, decodeBytes(spec))
		}
		m.Close()
		if err == nil {
			err = b.Err()
		}
		if err != nil {
			r.row(step, label, statusFail, err.Error(), nil)
			continue
		}
		row["shape"], row["ctx"], row["graphs"], row["fused"], row["step_graph"] = shape, ctx, !opts.NoGraphs, !opts.NoFusion, !opts.NoStepGraph
		r.row(step, label, statusPass, fmt.Sprintf("per decode step %.1f launch calls (%.1f kernels + %.1f graphs), %.1f kernels run, %.1f waits; decode %.1f tok/s",
			row["launch_calls"], row["kernel_launches"], row["graph_launches"], row["kernels_run"], row["waits"], row["decode_tps"]), row)
	}
}

// Every measurement of the GPU report runs at tiny shapes, on the fake
// driver, and reports passing rows, each printed and written as JSON.
func TestReportFake(t *testing.T) {
	t.Parallel()
	needKernels(t, "matvec_bf16", "matmul_bf16", "rmsnorm", "attn_split")
	var out strings.Builder
	r := newReporter(t, &out)
	r.json = filepath.Join(t.TempDir(), "results.json")
	open := func(opts Options) *Backend {
		b, _ := newFakeBackend(t, opts)
		return b
	}
	gpu := open(Options{})
	deviceRow(r, gpu)

	spec := testmodel.Qwen2Tiny
	(&kernelBench{r: r, b: gpu, shape: "qwen2-tiny", spec: spec, prefill: maxMatVecRows + 4, contexts: []int{20}, block: 16, timing: time.Millisecond}).run()
	// Decode's quantized products: Q8_0 alone divides the tiny rows.
	(&kernelBench{r: r, b: gpu, shape: "qwen2-tiny", spec: spec, timing: time.Millisecond}).quantMatVec([]tensor.DType{tensor.Q4_K, tensor.Q8_0}, []int{1, 8})
	// Prefill's products through (the fake's) cuBLAS, in TF32 (Options.MatMul f32).
	f := newFakeOrSkip(t)
	f.cublas = true
	blas := newBackend(f, Options{MatMul: "f32"})
	t.Cleanup(func() { blas.Close() })
	(&kernelBench{r: r, b: blas, shape: "qwen2-tiny cublas", spec: spec, timing: time.Millisecond}).matMul("o_proj", spec.Hidden, spec.Heads*spec.HeadDim, []int{12})
	// The GEMM rows: the mma kernel and (the fake's) cuBLAS at 3 weights x 2 row counts.
	f2 := newFakeOrSkip(t)
	f2.cublas = true
	g16 := newBackend(f2, Options{})
	t.Cleanup(func() { g16.Close() })
	(&kernelBench{r: r, b: g16, shape: "qwen2-tiny", spec: spec, timing: time.Millisecond}).gemmRows([]int{16, 40})

	// The golden and greedy rows take any backend: a CPU backend stands
	// in for the device here, which is quicker than the emulator, whose
	// forward pass TestForwardMatchesCPU checks.
	shared := goldenShared(t, goldenCases[:1])
	host := cpubackend.New(1)
	defer host.Close()
	goldenRows(r, "golden", shared, goldenCases[:1], []goldenRun{
		{name: "cpu", opts: model.Options{Backend: cpuF32(t, 0)}, decTol: 1e-3, preTol: 1e-3},
		{name: "stand-in", opts: model.Options{Backend: host}, decTol: 1e-3, preTol: 1e-3, rel: true},
	})
	greedyRows(r, "greedy", shared, goldenCases[:1], host, 6)
	drawRows(r, "draw", gpu, 4096, []int{1, 4}, time.Millisecond)
	gemmaRows(r, "gemma", host, 12)

	dir := filepath.Join(t.TempDir(), "qwen2")
	if err := testmodel.Write(dir, spec); err != nil {
		t.Fatal(err)
	}
	(&throughput{r: r, step: "throughput", b: open(Options{}), shape: "qwen2-tiny", spec: spec, dir: dir,
		caches: []string{"int8", "kakeya-pc"}, contexts: []int{20}, steps: 3, block: 16}).run()
	launchRows(r, "launches", open, "qwen2-tiny", spec, dir, 12, 3, 16)
	// Quantized weights: the emulated device on a few positions, and the
	// throughput row of a checkpoint quantized on load.
	quantRows(r, "quant", shared, open(Options{MatMul: "f32"}), []string{"q8_0"}, 3)
	(&throughput{r: r, step: "quant-throughput", b: open(Options{}), shape: "qwen2-tiny", spec: spec, dir: dir,
		caches: []string{"plain"}, contexts: []int{20}, steps: 3, block: 16, weights: "q8_0"}).run()

	// 6 matrix-vector rows, 5+1 matrix rows, 2 RMSNorm rows, 4 attention
	// rows, 2 encoder rows, 2 whitening rows (enc_whiten alone and before
	// enc_pc), an enc_bf16 row, 3 fused rows; 12 GEMM rows; 2 golden rows, 1 greedy row, 6
	// draw rows (2 row counts x 3 filters), 4 Gemma rows, 2 throughput
	// rows, 4 launch rows, a quant and a quant-throughput row and the
	// device.
	if len(r.rows) != 1+21+2+12+3+2+1+6+4+2+4+2+4 {
		t.Errorf("%d rows:\n%s", len(r.rows), out.String())
	}
	drawn := 0
	for _, row := range r.rows {
		if row["step"] == "draw" && row["kernel"] == "draw_rows" && row["filter"] == "top-p 0.9" && row["us_row"] != nil && row["vocab"] == 4096 {
			drawn++ // the bundle's draw rows, with their time per row
		}
		if row["name"] == "qwen2-tiny cublas matmul o_proj" && row["tol"] != 5e-3 {
			t.Errorf("a TF32 cuBLAS product is held to %v", row["tol"])
		}
		// 20 tokens of keys and values of 2 KV heads of 16 in bf16, and
		// the query and output rows of 14 heads in float32.
		if row["kernel"] == "attention" && row["cache"] == "bf16" && row["bytes"] != int64(20*2*16*2*2+2*14*16*4) {
			t.Errorf("attention over bf16 blocks reads %v bytes", row["bytes"])
		}
	}
	if drawn != 2 {
		t.Errorf("%d draw rows with top-p, want 2 (1 and 4 rows)", drawn)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	b, err := os.ReadFile(r.json)
	if err != nil {
		t.Fatal(err)
	}
	objs := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != len(r.rows) || len(objs) != len(r.rows) {
		t.Errorf("%d rows, %d lines printed, %d JSON lines", len(r.rows), len(lines), len(objs))
	}
	for i, l := range lines {
		var obj map[string]any
		if err := json.Unmarshal([]byte(objs[min(i, len(objs)-1)]), &obj); err != nil {
			t.Errorf("JSON row %d: %v", i, err)
		}
		if !strings.HasPrefix(l, "ROW|[") || obj["status"] == statusFail || obj["status"] == statusSkip {
			t.Errorf("row %d: %s (status %v)", i, l, obj["status"])
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("report:\n%s", out.String())
	}
}

// A report past its time budget skips what is left, row by row.
func TestReportBudget(t *testing.T) {
	var out strings.Builder
	t.Setenv(envReportBudget, "0")
	r := newReporter(t, &out)
	gpu, _ := newFakeBackend(t, Options{})
	(&kernelBench{r: r, b: gpu, shape: "qwen2-tiny", spec: testmodel.Qwen2Tiny, prefill: 12, contexts: []int{20}, block: 16, timing: time.Millisecond}).run()
	dir := filepath.Join(t.TempDir(), "qwen2")
	if err := testmodel.Write(dir, testmodel.Qwen2Tiny); err != nil {
		t.Fatal(err)
	}
	(&throughput{r: r, step: "throughput", b: gpu, shape: "qwen2-tiny", spec: testmodel.Qwen2Tiny, dir: dir,
		caches: []string{"plain", "int8"}, contexts: []int{12, 20}, steps: 3, block: 16}).run()
	launchRows(r, "launches", func(Options) *Backend { return gpu }, "qwen2-tiny", testmodel.Qwen2Tiny, dir, 12, 3, 16)
	// Kernel rows: 13 products and norms, attention over bf16, int8,
	// the preset's kakeya-pc (rate 2.5) and entropy-coded kakeya-pc, the
	// encoders of both kakeya-pc formats, enc_whiten alone and before
	// enc_pc, and enc_bf16.
	if len(r.rows) != 17+2+3+4+4+2+1 {
		t.Fatalf("%d rows:\n%s", len(r.rows), out.String())
	}
	for _, row := range r.rows {
		if row["status"] != statusSkip {
			t.Errorf("%v", row)
		}
	}
}

// Device peaks the GEMM model predicts with: dense bf16 tensor-core
// FLOP/s of an H100 SXM and an H200 (the same chip), and their memory
// bandwidths (docs/cuda.md, "GEMM performance model").
const (
	peakBF16FLOPS = 989e12
	bwH100        = 3.35e12
	bwH200        = 4.8e12
)

// gemmModel predicts the time of one 16-bit product of n rows by a rows x
// cols bf16 weight at peak FLOP/s and bandwidth bw: the larger of its
// tensor-core time and its memory time, the weight read once, the
// activations read in float32, written and read again in bf16 (to_bf16
// and the GEMM), the output written in float32. It returns the bytes and
// FLOPs too.
func gemmModel(n, rows, cols int, peak, bw float64) (t time.Duration, bytes int64, flops float64) {
	bytes = 2*int64(rows)*int64(cols) + int64(n)*int64(cols)*(4+2+2) + 4*int64(n)*int64(rows)
	flops = 2 * float64(n) * float64(rows) * float64(cols)
	return time.Duration(max(flops/peak, float64(bytes)/bw) * 1e9), bytes, flops
}

// gemmRows reports, for each weight of a layer (q_proj, gate_proj,
// down_proj) and each n of ns rows, the 16-bit product timed by each path
// alone (the mma kernel, and cuBLAS GemmEx where loaded), checked against
// float64 on the bf16-rounded activations, beside the model's prediction
// for an H100 and an H200 and the device at hand (its bandwidth).
func (k *kernelBench) gemmRows(ns []int) {
	s, b := k.spec, k.b
	paths := []gemmPath{gemmMMA}
	if b.gemm != nil {
		paths = append(paths, gemmCUBLAS)
	}
	defer func() { b.g16.force = 0 }()
	for _, wgt := range []struct {
		name       string
		rows, cols int
	}{{"q_proj", s.Heads * s.HeadDim, s.Hidden}, {"gate_proj", s.Intermediate, s.Hidden}, {"down_proj", s.Hidden, s.Intermediate}} {
		var w []uint16
		var wt compute.Weight
		for _, n := range ns {
			for _, p := range paths {
				label := fmt.Sprintf("%s gemm %s %d rows %v", k.shape, wgt.name, n, p)
				if k.skip(label) {
					continue
				}
				if wt == nil {
					w = randBF16(seedOf(k.shape+"gemm"+wgt.name), wgt.rows, wgt.cols)
					var err error
					if wt, err = b.Upload(tensor.Mat{DType: tensor.BF16, Rows: wgt.rows, Cols: wgt.cols, U16: w}); err != nil {
						k.r.row("gemm", label, statusFail, err.Error(), nil)
						break
					}
				}
				x := randNormal(seedOf(label+"/x"), n*wgt.cols)
				xb, out := upload(b, x), b.Alloc(n*wgt.rows)
				b.g16.force = 1 + int(p)
				per, reps := k.timeOp(out, func() { b.MatMul(out, xb, n, wt) })
				var worst float64
				got := make([]float32, wgt.rows)
				for _, i := range slices.Compact([]int{0, n - 1}) {
					b.Read(got, out.Slice(i*wgt.rows, (i+1)*wgt.rows))
					xi := slices.Clone(x[i*wgt.cols : (i+1)*wgt.cols])
					for c, v := range xi {
						xi[c] = tensor.BF16ToF32(tensor.F32ToBF16(v))
					}
					worst = max(worst, relErr(got, refMatVec(w, wgt.rows, wgt.cols, xi)))
				}
				if err := b.Err(); err != nil {
					k.r.row("gemm", label, statusFail, err.Error(), nil)
					return
				}
				const tol = 1e-4
				h100, bytes, flops := gemmModel(n, wgt.rows, wgt.cols, peakBF16FLOPS, bwH100)
				h200, _, _ := gemmModel(n, wgt.rows, wgt.cols, peakBF16FLOPS, bwH200)
				here := time.Duration(0)
				if bw := b.Bandwidth(); bw > 0 {
					here, _, _ = gemmModel(n, wgt.rows, wgt.cols, peakBF16FLOPS, bw)
				}
				tflops := flops / per.Seconds() / 1e12
				text := fmt.Sprintf("%dx%d bf16 x %d rows by %v: %s, %.1f TFLOP/s; predicted %s here, %s H100, %s H200 (model, not measured); max rel err %.2g (tol %.0g)",
					wgt.rows, wgt.cols, n, p, fmtDur(per), tflops, fmtDur(here), fmtDur(h100), fmtDur(h200), worst, tol)
				k.r.row("gemm", label, status(worst <= tol), text, map[string]any{
					"shape": k.shape, "weight": wgt.name, "rows": wgt.rows, "cols": wgt.cols, "n": n, "path": p.String(), "reps": reps,
					"us": float64(per) / 1e3, "tflops": tflops, "bytes": bytes, "flops": flops, "rel_err": worst, "tol": tol,
					"predicted_us": float64(here) / 1e3, "predicted_h100_us": float64(h100) / 1e3, "predicted_h200_us": float64(h200) / 1e3,
				})
			}
		}
	}
}

// drawRows reports draw_rows (compute.Draw) over rows of vocab logits,
// for each n of ns rows: at temperature 0.7 with top-p 0.9, with top-k 40
// and top-p 0.95, and with min-p 0.05 alone (no sort, one walk), each
// timed per Draw (the launch, the kernel and the 8 bytes a row read back,
// waited for) and per row, and checked against the host Sampler's draw
// (pick.DrawFiltered) from the same uniforms: a token may differ only at a
// float64 rounding boundary (atBoundary, counted; top-k never). A top-p
// draw overwrites its rows with their weights, so its repetitions draw
// over the first one's weights: the same passes over the row.
func drawRows(r *reporter, step string, b *Backend, vocab int, ns []int, timing time.Duration) {
	settings := []struct {
		label string
		d     compute.DrawRow
	}{
		{"top-p 0.9", compute.DrawRow{Temperature: 0.7, TopP: 0.9}},
		{"top-k 40, top-p 0.95", compute.DrawRow{Temperature: 0.7, TopK: 40, TopP: 0.95}},
		{"min-p 0.05", compute.DrawRow{Temperature: 0.7, MinP: 0.05}},
	}
	var sc pick.Scratch
	for _, n := range ns {
		x := randNormal(seedOf(fmt.Sprintf("draw %d", n)), n*vocab)
		for i := range x {
			x[i] *= 2.5 // logits' spread: a few likely tokens, a long tail
		}
		for _, s := range settings {
			label := fmt.Sprintf("draw %d rows of %d, %s", n, vocab, s.label)
			if r.left() <= 0 {
				r.row(step, label, statusSkip, "out of the time budget", nil)
				continue
			}
			u := rand.New(rand.NewPCG(seedOf(label), 1))
			rows := make([]compute.DrawRow, n)
			for i := range rows {
				rows[i] = s.d
				rows[i].U = u.Float64()
			}
			ids, bad := make([]int, n), make([]int, n)
			xb := upload(b, x)
			b.Draw(ids, bad, xb, vocab, rows)
			wrong, boundary := 0, 0
			for i := range n {
				row := x[i*vocab : (i+1)*vocab]
				d := rows[i]
				f := pick.Filter{TopK: int(d.TopK), TopP: d.TopP, MinP: d.MinP}
				want := pick.DrawFiltered(slices.Clone(row), d.Temperature, f, d.U, &sc)
				switch {
				case ids[i] == want && bad[i] == -1:
				case d.TopK == 0 && bad[i] == -1 && atBoundary(row, d, ids[i], want):
					boundary++
				default:
					wrong++
				}
			}
			draw := func() { b.Draw(ids, bad, xb, vocab, rows) }
			draw()
			t0 := time.Now()
			draw()
			reps := int(min(1000, max(1, timing/max(time.Since(t0), time.Microsecond))))
			t0 = time.Now()
			for range reps {
				draw()
			}
			per := time.Since(t0) / time.Duration(reps)
			if err := b.Err(); err != nil {
				r.row(step, label, statusFail, err.Error(), nil)
				return
			}
			r.row(step, label, status(wrong == 0), fmt.Sprintf("%s a draw, %s a row (8 bytes a row read back, not %d KB); %d of %d tokens the host Sampler's, %d more at a rounding boundary",
				fmtDur(per), fmtDur(per/time.Duration(n)), 4*vocab/1000, n-wrong-boundary, n, boundary), map[string]any{
				"kernel": "draw_rows", "vocab": vocab, "rows": n, "filter": s.label, "reps": reps,
				"us": float64(per) / 1e3, "us_row": float64(per) / 1e3 / float64(n), "wrong": wrong, "boundary": boundary,
			})
		}
	}
}

// freeTemps frees the rows' device memory an encoder row allocated for
// itself (each of ps that is not 0), once the stream has done with it.
func freeTemps(b *Backend, ps ...Ptr) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range ps {
		if p != 0 {
			b.freeLater(p)
		}
	}
}
