package eval

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/kakeya-ai/kakeya/internal/outfile"
)

// Report is the record of one perplexity run, written as JSON.
type Report struct {
	Engine string `json:"engine_version"`
	Model  string `json:"model"` // the resolved model directory
	// ModelSHA256 identifies the weights: see ModelSHA256.
	ModelSHA256 string `json:"model_sha256"`
	Data        string `json:"data"`
	DataSHA256  string `json:"data_sha256"`
	// Docs is the part of the data scored ("FIRST:END of TOTAL"
	// documents), empty for all of it.
	Docs      string `json:"docs,omitempty"`
	Tokenizer string `json:"tokenizer"`
	Mode      string `json:"mode"`
	Ctx       int    `json:"ctx"`
	NEval     int    `json:"n_eval,omitempty"`
	Stride    int    `json:"stride,omitempty"`
	DocSep    string `json:"doc_sep,omitempty"`
	Chunk     int    `json:"chunk"`
	Calib     string `json:"calib,omitempty"`
	// CalibSHA256 is the SHA-256 of the calibration file.
	CalibSHA256 string         `json:"calib_sha256,omitempty"`
	CacheType   string         `json:"cache_type,omitempty"` // storage of uncompressed blocks: f32 or bf16
	Passages    int            `json:"passages"`
	Tokens      int            `json:"scored_tokens"`
	Start       time.Time      `json:"start"`
	Seconds     float64        `json:"duration_s"`
	GoVersion   string         `json:"go_version"`
	GOOS        string         `json:"goos"`
	GOARCH      string         `json:"goarch"`
	Threads     int            `json:"threads"`
	Workers     int            `json:"workers"`
	Configs     []ConfigReport `json:"configs"`
	// Units lists, per passage (unit), where it starts scoring and, per
	// configuration in Configs order, its sums and counts.
	Units []UnitReport `json:"passages_detail"`
}

// ConfigReport holds one configuration's settings and totals.
type ConfigReport struct {
	Config   Config  `json:"config"`
	Spec     string  `json:"spec"`
	Total    Stats   `json:"total"`
	KV       KVUsage `json:"kv"`
	PPL      Float   `json:"ppl"`
	MeanNLL  Float   `json:"mean_nll"`
	DeltaPPL Float   `json:"delta_ppl_pct"`
	MeanKL   Float   `json:"mean_kl"`
	Top1     Float   `json:"top1_pct"`
	KBits    Float   `json:"k_bits"`
	VBits    Float   `json:"v_bits"`
	Ratio    Float   `json:"kv_ratio_vs_bf16"`
	// CodecRatio is the ratio of the encoded blocks alone (see
	// KVUsage.CodecRatio); Ratio is the whole cache's.
	CodecRatio Float   `json:"codec_ratio_vs_bf16"`
	Verdict    Verdict `json:"verdict"`
}

// UnitReport is one passage's row.
type UnitReport struct {
	Doc       int         `json:"doc"`
	Tokens    int         `json:"tokens"`
	ScoreFrom int         `json:"score_from"`
	Configs   []UnitStats `json:"configs"`
}

// UnitStats is one configuration's sums over one passage.
type UnitStats struct {
	NLL     Float `json:"nll_sum"`
	N       int   `json:"count"`
	KL      Float `json:"kl_sum"`
	Top1    int   `json:"top1"`
	KVBytes int64 `json:"kv_bytes"`
}

// NewReport fills the configuration rows, passages and environment of a
// report from a Run result; the caller sets the run's inputs and settings.
func NewReport(res *Result, units []Unit, start time.Time, dur time.Duration) *Report {
	r := &Report{
		Engine:    Version,
		Start:     start,
		Seconds:   dur.Seconds(),
		GoVersion: runtime.Version(),
		GOOS:      runtime.GOOS,
		GOARCH:    runtime.GOARCH,
		Threads:   runtime.GOMAXPROCS(0),
		Passages:  len(units),
	}
	ref := res.Totals[0]
	r.Tokens = ref.N
	for c, cfg := range res.Configs {
		t := res.Totals[c]
		cr := ConfigReport{
			Config: cfg, Spec: cfg.String(), Total: t, KV: res.KV[c],
			PPL: Float(t.PPL()), MeanNLL: Float(t.MeanNLL()), DeltaPPL: Float(DeltaPPL(ref.PPL(), t.PPL())),
			MeanKL: Float(t.MeanKL()), Top1: Float(t.Top1Rate()),
			KBits: Float(res.KV[c].KBits()), VBits: Float(res.KV[c].VBits()), Ratio: Float(res.KV[c].Ratio()),
			CodecRatio: Float(res.KV[c].CodecRatio()),
		}
		if c == 0 {
			cr.Verdict = VerdictRef
		} else {
			cr.Verdict = Grade(cfg, LongestFed(units), float64(cr.DeltaPPL), float64(cr.Top1))
		}
		r.Configs = append(r.Configs, cr)
	}
	for i, u := range units {
		ur := UnitReport{Doc: u.Doc, Tokens: len(u.Tokens), ScoreFrom: u.Score}
		for c := range res.Configs {
			st, kv := res.Units[i].Stats[c], res.Units[i].KV[c]
			ur.Configs = append(ur.Configs, UnitStats{NLL: Float(st.NLL), N: st.N, KL: Float(st.KL), Top1: st.Top1, KVBytes: kv.K + kv.V})
		}
		r.Units = append(r.Units, ur)
	}
	return r
}

// FileSHA256 returns the hex SHA-256 of a file's contents.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("eval: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("eval: %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ModelSHA256 identifies the weights of the model directory dir without
// reading them all: the hex SHA-256 of its config.json followed by the
// JSON header of every *.safetensors file (names, dtypes, shapes and
// offsets of all tensors), in name order; for a GGUF file, of its size
// and first MiB (its header).
func ModelSHA256(dir string) (string, error) {
	h := sha256.New()
	if strings.HasSuffix(strings.ToLower(dir), ".gguf") {
		// A GGUF file: its size and its first MiB (the header: metadata
		// and tensor descriptions, or all of it).
		f, err := os.Open(dir)
		if err != nil {
			return "", fmt.Errorf("eval: %w", err)
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return "", fmt.Errorf("eval: %w", err)
		}
		fmt.Fprintf(h, "gguf %d\n", st.Size())
		if _, err := io.CopyN(h, f, 1<<20); err != nil && err != io.EOF {
			return "", fmt.Errorf("eval: %s: %w", dir, err)
		}
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return "", fmt.Errorf("eval: %w", err)
	}
	h.Write(cfg)
	files, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return "", fmt.Errorf("eval: %w", err)
	}
	slices.Sort(files)
	for _, name := range files {
		if err := hashHeader(h, name); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashHeader writes a safetensors file's name, 8-byte length prefix and
// JSON header to h.
func hashHeader(h io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	defer f.Close()
	var n [8]byte
	if _, err := io.ReadFull(f, n[:]); err != nil {
		return fmt.Errorf("eval: %s: header length: %w", path, err)
	}
	size := binary.LittleEndian.Uint64(n[:])
	const maxHeader = 100 << 20 // the format's own limit
	if size > maxHeader {
		return fmt.Errorf("eval: %s: header of %d bytes exceeds %d", path, size, maxHeader)
	}
	io.WriteString(h, filepath.Base(path))
	h.Write(n[:])
	if _, err := io.CopyN(h, f, int64(size)); err != nil {
		return fmt.Errorf("eval: %s: header: %w", path, err)
	}
	return nil
}

// WriteJSON writes r to path as outfile.Write does: a regular file is
// replaced atomically (on any error it is left as it was), a device or
// FIFO such as /dev/stdout is written in place. NaN and Inf figures (a
// diverging run) are written as null.
func (r *Report) WriteJSON(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("eval: report: %w", err)
	}
	if err := outfile.WriteFile(path, append(data, '\n')); err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	return nil
}

// Float is a float64 that encodes NaN and ±Inf as JSON null (which
// encoding/json would otherwise refuse), so that a diverging configuration
// cannot stop the whole report from being written.
type Float float64

// MarshalJSON implements json.Marshaler.
func (f Float) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 64), nil
}

// MarshalJSON implements json.Marshaler, writing NaN or Inf sums as null.
func (s Stats) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		NLL  Float `json:"nll_sum"`
		N    int   `json:"count"`
		KL   Float `json:"kl_sum"`
		Top1 int   `json:"top1"`
	}{Float(s.NLL), s.N, Float(s.KL), s.Top1})
}

// WriteTable writes the readable summary: one row per configuration. The
// cache ratio is the whole cache's (hot blocks at their stored size), blank
// for the reference row; the codec ratio is that of the encoded blocks
// alone.
func (r *Report) WriteTable(w io.Writer) error {
	// Names read best left-aligned and figures right-aligned; tabwriter
	// aligns every column one way, so pad the names to one width first.
	nw := len("config")
	for _, c := range r.Configs {
		nw = max(nw, utf8.RuneCountInString(c.Config.Name))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\tK bits\tV bits\tcache ratio\tcodec ratio\tPPL\tΔPPL %%\tKL\ttop-1 %%\tverdict\t\n", nw, "config")
	for _, c := range r.Configs {
		ratio := fnum(c.Ratio, "%.2fx")
		if c.Verdict == VerdictRef {
			// The row the others are measured against has no ratio of its
			// own to show (its partly filled last blocks would read as
			// 0.9x); the JSON report keeps its bytes.
			ratio = "-"
		}
		fmt.Fprintf(tw, "%-*s\t%s\t%s\t%s\t%s\t%.4f\t%+.2f\t%.5f\t%.2f\t%s\t\n",
			nw, c.Config.Name, fnum(c.KBits, "%.2f"), fnum(c.VBits, "%.2f"), ratio, fnum(c.CodecRatio, "%.2fx"),
			c.PPL, c.DeltaPPL, c.MeanKL, c.Top1, c.Verdict)
	}
	return tw.Flush()
}

// fnum formats a byte-derived figure, or "-" when the engine reported no
// KV footprint.
func fnum(f Float, format string) string {
	v := float64(f)
	if v == 0 || math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf(format, v)
}
