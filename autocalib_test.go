package kakeya

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kakeya-ai/kakeya/calibrate"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

// testCalibTokens keeps the automatic calibrations of these tests short:
// a few windows of stories260K, a fraction of a second.
const testCalibTokens = 1024

// logBuffer is a slog destination a test reads back; Load logs from one
// goroutine, but the buffer is read after it returns.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// progress is Options.CalibrationProgress: it logs a line "progress
// DONE/TOTAL".
func (l *logBuffer) progress(done, total int) { fmt.Fprintf(l, "progress %d/%d\n", done, total) }

// take returns what was logged since the last take.
func (l *logBuffer) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.buf.String()
	l.buf.Reset()
	return s
}

// loadPreset loads stories260K with the kakeya preset, the calibration
// cache cacheDir and the log into lb.
func loadPreset(t *testing.T, dir, cacheDir string, lb *logBuffer) *Engine {
	t.Helper()
	e, err := Load(context.Background(), dir, Options{
		Threads: 1, Cache: kvconfig.Spec{KV: "kakeya"},
		CalibrationCache: cacheDir, CalibrationTokens: testCalibTokens,
		Log: slog.New(slog.NewTextHandler(lb, nil)), CalibrationProgress: lb.progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// greedy generates n tokens greedily from a prompt long enough that the
// cache encodes blocks (the preset's first block is encoded at 96 tokens).
func greedy(t *testing.T, e *Engine, n int) *Result {
	t.Helper()
	res, err := e.Generate(context.Background(), "Once upon a time, there was a little girl named Lily.", GenerateOptions{MaxTokens: n}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestAutoCalibration: with the kakeya preset and no calibration, the
// first Load calibrates on the built-in text and writes the file into the
// cache (logging the time and the file), the second reuses it untouched,
// a corrupt file is replaced, an unwritable cache leaves the calibration
// in memory, and every one of them generates what the spelled-out
// settings with the written file generate.
func TestAutoCalibration(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	cache := filepath.Join(t.TempDir(), "calib") // made by Load
	var lb logBuffer

	first := loadPreset(t, dir, cache, &lb)
	info := first.CalibrationInfo()
	if !info.Auto || !info.Made || info.Took <= 0 || filepath.Dir(info.Path) != cache {
		t.Fatalf("first Load: calibration %+v, want one made into %s", info, cache)
	}
	if first.Calibration() != info.Path {
		t.Errorf("Calibration() = %q, want %q", first.Calibration(), info.Path)
	}
	log := lb.take()
	t.Logf("first Load: %s", log)
	// Progress from 0 to the whole text (BOS tokens included), each step
	// further than the last.
	var done []int
	total := 0
	for _, line := range strings.Split(log, "\n") {
		var d, n int
		if _, err := fmt.Sscanf(line, "progress %d/%d", &d, &n); err == nil {
			done, total = append(done, d), n
		}
	}
	if len(done) < 2 || done[0] != 0 || done[len(done)-1] != total || total < testCalibTokens || !slices.IsSorted(done) {
		t.Errorf("calibration progress %v of %d, want 0 first, then rising to the total (>= %d)", done, total, testCalibTokens)
	}
	if !strings.Contains(log, "calibrated the KV cache on") || !strings.Contains(log, info.Path) ||
		strings.Contains(log, "level=WARN") || strings.Count(log, "calibrated the KV cache") != 1 {
		t.Errorf("first Load logged %q; want one line naming the file and no warning", log)
	}
	st := first.CacheSettings()
	if st.K != kvconfig.PresetKCodec || st.V != kvconfig.PresetVCodec || st.HotWindow != kvconfig.PresetHotWindow ||
		st.BlockSize != kvconfig.PresetBlock || len(st.Boundary) != 0 || st.Preset != kvconfig.PresetName {
		t.Errorf("preset settings %+v", st)
	}
	if !strings.Contains(st.String(), "preset kakeya") || !strings.HasPrefix(info.String(), "calibration auto: ") {
		t.Errorf("settings line %q, %q", st, info)
	}
	cal, err := calibrate.Load(info.Path, first.Model().Config())
	if err != nil || cal.KPCA == nil || cal.Meta["data"] != calibrate.BuiltinData || cal.Meta["rope_averaged"] != "true" {
		t.Fatalf("written calibration: %v (meta %v)", err, cal.Meta)
	}
	ref := greedy(t, first, 120)
	t.Logf("preset: %d tokens, codec ratio %.2fx, %q", ref.KV.Tokens, ref.KV.CodecRatio(), ref.Text)
	if ref.KV.Compressed == 0 {
		t.Fatalf("the preset cache encoded nothing: %+v", ref.KV)
	}
	fi, err := os.Stat(info.Path)
	if err != nil {
		t.Fatal(err)
	}

	// The second Load reads the file: nothing is run, written or logged at
	// Info level.
	second := loadPreset(t, dir, cache, &lb)
	if got := second.CalibrationInfo(); got.Made || !got.Auto || got.Path != info.Path {
		t.Errorf("second Load: calibration %+v, want the cached %s", got, info.Path)
	}
	if fi2, err := os.Stat(info.Path); err != nil || !fi2.ModTime().Equal(fi.ModTime()) {
		t.Errorf("second Load touched the cached file: %v", err)
	}
	if log := lb.take(); log != "" {
		t.Errorf("second Load logged %q", log)
	}
	if got := greedy(t, second, 120); got.Text != ref.Text {
		t.Errorf("cached calibration generates\n%q\nwant\n%q", got.Text, ref.Text)
	}

	// The preset is the spelled-out settings with that calibration.
	explicit, err := Load(context.Background(), dir, Options{
		Threads: 1, Calibration: info.Path,
		Cache: kvconfig.Spec{K: "kakeya-pc:rate=1.3,maxbits=5,codedfrac=0.25", V: "kakeya-pc:rate=2.5", BlockSize: 64, HotWindow: 32, Boundary: "none"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer explicit.Close()
	if got := greedy(t, explicit, 120); got.Text != ref.Text || got.KV.Compressed != ref.KV.Compressed || got.KV.Hot != ref.KV.Hot {
		t.Errorf("explicit settings generate\n%q (%+v)\nwant the preset's\n%q (%+v)", got.Text, got.KV, ref.Text, ref.KV)
	}

	// A corrupt file is replaced, with a warning.
	if err := os.WriteFile(info.Path, []byte("not a calibration"), 0o644); err != nil {
		t.Fatal(err)
	}
	third := loadPreset(t, dir, cache, &lb)
	if got := third.CalibrationInfo(); !got.Made || got.Path != info.Path {
		t.Errorf("Load over a corrupt file: calibration %+v", got)
	}
	if log := lb.take(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, "unreadable; recalibrating") {
		t.Errorf("Load over a corrupt file logged %q", log)
	}
	if _, err := calibrate.Load(info.Path, third.Model().Config()); err != nil {
		t.Errorf("the corrupt file was not replaced: %v", err)
	}
	if got := greedy(t, third, 120); got.Text != ref.Text {
		t.Errorf("recalibrated engine generates\n%q\nwant\n%q", got.Text, ref.Text)
	}

	// A cache that cannot be made (its parent is a file) keeps the
	// calibration in memory, with a warning.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fourth := loadPreset(t, dir, filepath.Join(file, "calib"), &lb)
	if got := fourth.CalibrationInfo(); !got.Made || got.Path != "" || got.String() != "calibration auto (in memory)" {
		t.Errorf("unwritable cache: calibration %+v", got)
	}
	if log := lb.take(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, "not writable") {
		t.Errorf("unwritable cache logged %q", log)
	}
	if got := greedy(t, fourth, 120); got.Text != ref.Text {
		t.Errorf("in-memory calibration generates\n%q\nwant\n%q", got.Text, ref.Text)
	}
}

// TestAutoCalibrationErrors: settings an automatic calibration cannot
// serve fail at Load, naming the setting.
func TestAutoCalibrationErrors(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	for _, tt := range []struct {
		name string
		opt  Options
		want string
	}{
		{"context shorter than a block", Options{MaxContext: 48}, "Spec.BlockSize 64 exceeds the context of 48 tokens"},
		{"too few tokens", Options{CalibrationTokens: 40}, "Options.CalibrationTokens 40"},
		{"negative tokens", Options{CalibrationTokens: -1}, "CalibrationTokens -1"},
	} {
		tt.opt.Threads, tt.opt.Cache, tt.opt.CalibrationCache = 1, kvconfig.Spec{KV: "kakeya"}, t.TempDir()
		e, err := Load(context.Background(), dir, tt.opt)
		if err == nil {
			e.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Load: %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}

// The settings line's calibration part, for each source.
func TestCalibrationInfoString(t *testing.T) {
	for _, tt := range []struct {
		info CalibrationInfo
		want string
	}{
		{CalibrationInfo{}, ""},
		{CalibrationInfo{Path: "c.safetensors"}, "calibration c.safetensors"},
		{CalibrationInfo{Path: "/cache/m.safetensors", Auto: true, Made: true, Took: time.Second}, "calibration auto: /cache/m.safetensors"},
		{CalibrationInfo{Auto: true, Made: true}, "calibration auto (in memory)"},
	} {
		if got := tt.info.String(); got != tt.want {
			t.Errorf("%+v: String() = %q, want %q", tt.info, got, tt.want)
		}
	}
}

// The calibration cache key of a GGUF file hashes the file (its metadata
// leads it), not a config.json beside it, and changes with its bytes.
func TestAutoCalibrationKeyGGUF(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	data := append([]byte("GGUF"), make([]byte, 64)...)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	a := autoCalibration{modelDir: path, blockSize: 64, tokens: 100}
	k1, err := a.key()
	if err != nil {
		t.Fatal(err)
	}
	data[10] = 1
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	k2, err := a.key()
	if err != nil {
		t.Fatal(err)
	}
	if k1 == k2 || !strings.HasPrefix(k1, "m.gguf-") {
		t.Errorf("keys %q and %q: want distinct, named after the file", k1, k2)
	}
}

// TestAutoCalibrationBlockSize: the automatic calibration measures the
// principal components over blocks of the cache's own size (their
// within-block covariance and block means depend on it), so a cache of
// blocks of 32 gets statistics of blocks of 32 — those calibrate.RunModel
// makes at block size 32 on the built-in text, to the bit — and a cache
// of blocks of 64 beside it in the same engine its own, in another file.
// Each is made once and then reused, whichever spec asks first.
func TestAutoCalibrationBlockSize(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	cacheDir := filepath.Join(t.TempDir(), "calib")
	var lb logBuffer
	e, err := Load(context.Background(), dir, Options{
		Threads: 1, Cache: kvconfig.Spec{KV: "kakeya", BlockSize: 32, HotWindow: 16},
		CalibrationCache: cacheDir, CalibrationTokens: testCalibTokens,
		Log: slog.New(slog.NewTextHandler(&lb, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if st := e.CacheSettings(); st.BlockSize != 32 || st.HotWindow != 16 || st.K != kvconfig.PresetKCodec {
		t.Fatalf("settings %+v, want the preset's codecs at block 32, hot 16", st)
	}
	info32 := e.CalibrationInfo()
	if !info32.Made || info32.Path == "" {
		t.Fatalf("block-32 calibration %+v, want one made into %s", info32, cacheDir)
	}
	cal32, err := calibrate.Load(info32.Path, e.Model().Config())
	if err != nil {
		t.Fatal(err)
	}

	// The same recipe run directly at block size 32.
	want, err := calibrate.RunModel(context.Background(), e.Model(), e.tok.Encode(calibrate.Text(), false),
		calibrate.Options{MaxTokens: testCalibTokens, RopeAveraged: true, PCA: true, BlockSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	if cal32.Meta["block_size"] != "32" || cal32.Meta["pca_blocks"] != want.Meta["pca_blocks"] {
		t.Errorf("automatic calibration meta %v, want block_size 32 and pca_blocks %s", cal32.Meta, want.Meta["pca_blocks"])
	}
	for i := range want.KPCA {
		if !slices.Equal(cal32.KPCA[i].Basis, want.KPCA[i].Basis) || !slices.Equal(cal32.KPCA[i].Between, want.KPCA[i].Between) {
			t.Fatalf("key statistics %d differ from calibrate.RunModel's at block size 32", i)
		}
	}
	for l := range want.VPCA {
		if !slices.Equal(cal32.VPCA[l].Var, want.VPCA[l].Var) {
			t.Fatalf("value statistics of layer %d differ from calibrate.RunModel's at block size 32", l)
		}
	}

	// Blocks of 64 (the preset's) in the same engine: another
	// calibration, another file, other statistics; blocks of 32 again: the
	// first, not made again.
	caches := e.Caches()
	_, st64, info64, err := caches.Cache(context.Background(), kvconfig.Spec{KV: "kakeya", BlockSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	if st64.BlockSize != 64 || !info64.Made || info64.Path == info32.Path || filepath.Dir(info64.Path) != cacheDir {
		t.Fatalf("block-64 cache: settings %+v, calibration %+v; want a new file beside %s", st64, info64, info32.Path)
	}
	cal64, err := calibrate.Load(info64.Path, e.Model().Config())
	if err != nil {
		t.Fatal(err)
	}
	if cal64.Meta["block_size"] != "64" || slices.Equal(cal64.KPCA[0].Var, cal32.KPCA[0].Var) {
		t.Errorf("block-64 calibration meta %v; its key variances equal block 32's: %v", cal64.Meta, slices.Equal(cal64.KPCA[0].Var, cal32.KPCA[0].Var))
	}
	_, _, again, err := caches.Cache(context.Background(), kvconfig.Spec{KV: "kakeya", BlockSize: 32, HotWindow: 16})
	if err != nil {
		t.Fatal(err)
	}
	if again.Made || again.Path != info32.Path {
		t.Errorf("block 32 again: calibration %+v, want the first (%s), not made again", again, info32.Path)
	}
	if n := strings.Count(lb.take(), "calibrated the KV cache"); n != 2 {
		t.Errorf("%d calibrations logged, want 2 (one per block size)", n)
	}

	// A calibration file of blocks of 64 given for a cache of blocks of
	// 32 is used, with a warning naming both sizes, once; for blocks of
	// 64, or a codec that reads no principal components, none.
	file, err := NewCaches(e.Model(), Options{Calibration: info64.Path, Log: slog.New(slog.NewTextHandler(&lb, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		spec kvconfig.Spec
		warn bool
	}{
		{kvconfig.Spec{KV: "kakeya", BlockSize: 64}, false},
		{kvconfig.Spec{KV: "kakeya", BlockSize: 32, HotWindow: 16}, true},
		{kvconfig.Spec{KV: "kakeya-pc", BlockSize: 32}, false}, // told once
		{kvconfig.Spec{KV: "int4", BlockSize: 16}, false},
	} {
		_, _, info, err := file.Cache(context.Background(), tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		log := lb.take()
		warned := strings.Contains(log, "measured over blocks of 64 tokens, the cache's blocks are 32") &&
			strings.Contains(log, "--block-size 32") && strings.Contains(log, info64.Path)
		if info.Path != info64.Path || info.Auto || warned != tt.warn || !tt.warn && log != "" {
			t.Errorf("%+v with a block-64 file: calibration %+v, logged %q; want the file and a warning %v", tt.spec, info, log, tt.warn)
		}
	}
}
