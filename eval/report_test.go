package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

func testReport(t *testing.T) *Report {
	t.Helper()
	units := testUnits()
	configs := []Config{Reference(), {Name: "noisy", Spec: kvconfig.Spec{KV: "noise0.5", Boundary: "0,-1", HotWindow: 4}}}
	configs[1].Settings = &kvconfig.Settings{K: "noise0.5", V: "noise0.5", BlockSize: 16, HotWindow: 4, Boundary: []int{0, 7}, CacheType: "bf16"}
	res, err := Run(context.Background(), &fakeEngine{}, units, configs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := NewReport(res, units, time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), 1500*time.Millisecond)
	r.Model, r.Data, r.Mode, r.Ctx, r.NEval = "m", "d.txt", ModePassages, 12, 5
	return r
}

func TestReportJSON(t *testing.T) {
	r := testReport(t)
	path := filepath.Join(t.TempDir(), "r.json")
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Engine   string  `json:"engine_version"`
		Passages int     `json:"passages"`
		Seconds  float64 `json:"duration_s"`
		Configs  []struct {
			Config struct {
				Name     string            `json:"name"`
				Spec     string            `json:"spec"`
				Settings kvconfig.Settings `json:"settings"`
			} `json:"config"`
			Spec    string  `json:"spec"`
			PPL     float64 `json:"ppl"`
			Verdict string  `json:"verdict"`
			Total   Stats   `json:"total"`
		} `json:"configs"`
		Units []struct {
			Configs []struct {
				N       int   `json:"count"`
				KVBytes int64 `json:"kv_bytes"`
			} `json:"configs"`
		} `json:"passages_detail"`
	}
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.Engine != Version || back.Passages != len(testUnits()) || back.Seconds != 1.5 || len(back.Configs) != 2 {
		t.Fatalf("read back %+v", back)
	}
	c := back.Configs[1]
	if c.Config.Name != "noisy" || c.Config.Settings.HotWindow != 4 || c.Config.Settings.BlockSize != 16 ||
		c.Config.Spec != "kv=noise0.5,hot=4,boundary=0;-1" || c.Spec != "name=noisy,kv=noise0.5,hot=4,boundary=0;-1" ||
		c.PPL != float64(r.Configs[1].PPL) || c.Total != r.Configs[1].Total || back.Configs[0].Verdict != "ref" {
		t.Errorf("config row read back as %+v", c)
	}
	if len(back.Units) != back.Passages || back.Units[0].Configs[1].N != 5 || back.Units[0].Configs[1].KVBytes == 0 {
		t.Errorf("passage rows read back as %+v", back.Units)
	}

	// NaN and Inf figures become null rather than failing the whole report.
	r.Configs[1].MeanKL = Float(math.Inf(1))
	r.Configs[1].Total.KL = math.NaN()
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(path)
	if !bytes.Contains(data, []byte(`"mean_kl": null`)) || !bytes.Contains(data, []byte(`"kl_sum": null`)) {
		t.Errorf("non-finite figures not written as null")
	}
}

func TestWriteAtomicFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	// The target is a directory: the write is refused and nothing may be
	// left behind.
	target := filepath.Join(dir, "out.json")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := testReport(t).WriteJSON(target); err == nil {
		t.Fatal("writing over a directory: want an error")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "out.json" || !entries[0].IsDir() {
		t.Errorf("directory holds %v after a failed write, want only the original out.json/", entries)
	}
	// A missing directory fails before anything is written.
	if err := testReport(t).WriteJSON(filepath.Join(dir, "no", "such", "r.json")); err == nil {
		t.Error("missing directory: want an error")
	}
	// An existing file is replaced whole.
	p := filepath.Join(dir, "f.json")
	os.WriteFile(p, []byte(strings.Repeat("old contents that are longer ", 1000)), 0o644)
	if err := testReport(t).WriteJSON(p); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); !json.Valid(b) {
		t.Errorf("file holds %q, want the JSON report alone", b)
	}
}

func TestWriteTable(t *testing.T) {
	r := &Report{Configs: []ConfigReport{
		{Config: Reference(), PPL: 5.3812, DeltaPPL: 0, MeanKL: 0, Top1: 100, Verdict: VerdictRef, KBits: 16, VBits: 16, Ratio: 0.93},
		{Config: Config{Name: "kk3"}, PPL: 5.4, DeltaPPL: 0.3494, MeanKL: 0.00321, Top1: 97.5, KBits: 3.25, VBits: 3.5, Ratio: 4.7, CodecRatio: 5.12, Verdict: VerdictAccept},
		{Config: Config{Name: "int2-long-name"}, PPL: 9.1, DeltaPPL: 69.1, MeanKL: 0.5, Top1: 61.25, Verdict: VerdictReject},
	}}
	var b strings.Builder
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"  config          K bits  V bits  cache ratio  codec ratio     PPL  ΔPPL %       KL  top-1 %  verdict\n" +
		"  ref              16.00   16.00            -            -  5.3812   +0.00  0.00000   100.00      ref\n" +
		"  kk3               3.25    3.50        4.70x        5.12x  5.4000   +0.35  0.00321    97.50   ACCEPT\n" +
		"  int2-long-name       -       -            -            -  9.1000  +69.10  0.50000    61.25   REJECT\n"
	if got := b.String(); got != want {
		t.Errorf("table:\n%q\nwant:\n%q", got, want)
	}
}

func TestFileSHA256(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.txt")
	os.WriteFile(p, []byte("abc"), 0o644)
	got, err := FileSHA256(p)
	if err != nil {
		t.Fatal(err)
	}
	// sha256("abc") from FIPS 180-2, appendix B.1
	if want := "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; got != want {
		t.Errorf("FileSHA256 = %s, want %s", got, want)
	}
	if _, err := FileSHA256(p + ".missing"); err == nil {
		t.Error("missing file: want an error")
	}
}
