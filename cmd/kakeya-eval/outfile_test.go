package main

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
)

// TestOutputCheckedFirst checks that every command that writes a file
// refuses an output it cannot write before it reads any input: the model,
// data, sensitivity file and report named here do not exist, so an error
// about --out proves it came first.
func TestOutputCheckedFirst(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "out") // a directory where a file is wanted
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	plotDir := filepath.Join(tmp, "r.pareto.png") // where ppl --out r.json puts its plot
	if err := os.Mkdir(plotDir, 0o755); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(tmp, "no", "such", "r.json")
	model := filepath.Join(tmp, "nomodel")
	input := filepath.Join(tmp, "nosuch.json")
	isDir := "--out: cannot write " + dir + ": it is a directory"
	noDir := "--out: cannot write " + missing + ": directory " + filepath.Dir(missing) + ": no such file or directory"
	for _, tc := range []struct {
		cmd  string
		args []string
		want string
	}{
		{"ppl", []string{"--model", model, "--out", dir}, "ppl: " + isDir},
		{"ppl", []string{"--model", model, "--out", missing}, "ppl: " + noDir},
		{"ppl", []string{"--model", model, "--out", filepath.Join(tmp, "r.json")},
			"ppl: pareto plot beside --out: cannot write " + plotDir + ": it is a directory"},
		{"sensitivity", []string{"--model", model, "--out", dir}, "sensitivity: " + isDir},
		{"sensitivity", []string{"--model", model, "--out", missing}, "sensitivity: " + noDir},
		{"calibrate", []string{"--model", model, "--out", dir}, "calibrate: " + isDir},
		{"calibrate", []string{"--model", model, "--out", missing}, "calibrate: " + noDir},
		{"allocate", []string{"--sensitivity", input, "--like", "int4", "--out", dir}, "allocate: " + isDir},
		{"allocate", []string{"--sensitivity", input, "--like", "int4", "--out", missing}, "allocate: " + noDir},
		{"pareto", []string{"--report", input, "--out", dir}, "pareto: " + isDir},
		{"pareto", []string{"--report", input, "--out", missing}, "pareto: " + noDir},
	} {
		err := run(context.Background(), append([]string{tc.cmd}, tc.args...), io.Discard, io.Discard)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s %q: %v\nwant %s", tc.cmd, tc.args, err, tc.want)
		}
	}
	// Nothing was written anywhere.
	for _, d := range []string{tmp, dir, plotDir} {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if name := e.Name(); name != "out" && name != "r.pareto.png" {
				t.Errorf("%s was left in %s", name, d)
			}
		}
	}
}

// TestPPLOutLinksAndDevices runs ppl with --out a symbolic link, a dangling
// one and (as root) a device node: the links stay links and the files they
// point to get the report, the device stays a device and gets no plot
// beside it.
func TestPPLOutLinksAndDevices(t *testing.T) {
	args := []string{"--model", shareddata.File(t, "models", "stories260K"), "--data", shareddata.File(t, "data", "tinystories", "val.txt"),
		"--ctx", "96", "--n-eval", "16", "--passages", "2", "--block-size", "16", "--hot-window", "16", "--config", "name=int4,kv=int4,boundary=none"}
	ppl := func(out string) string {
		t.Helper()
		var stdout strings.Builder
		if err := runPPL(context.Background(), append(args, "--out", out), &stdout, io.Discard); err != nil {
			t.Fatalf("ppl --out %s: %v", out, err)
		}
		return stdout.String()
	}
	isReport := func(path string) {
		t.Helper()
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var r pplReport
		if err := json.Unmarshal(raw, &r); err != nil || r.Passages != 2 || len(r.Configs) != 2 {
			t.Errorf("%s holds no report of 2 passages and 2 configurations (%v):\n%.200s", path, err, raw)
		}
	}
	isLink := func(link, dest string) {
		t.Helper()
		fi, err := os.Lstat(link)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			t.Fatalf("%s is no longer a symbolic link (%v, %v)", link, fi.Mode(), err)
		}
		if got, _ := os.Readlink(link); got != dest {
			t.Errorf("%s points to %q, want %q", link, got, dest)
		}
	}
	noTemp := func(dir string) {
		t.Helper()
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") {
				t.Errorf("%s was left in %s", e.Name(), dir)
			}
		}
	}

	tmp := t.TempDir()
	reports := filepath.Join(tmp, "reports")
	os.Mkdir(reports, 0o755)
	real := filepath.Join(reports, "real.json")
	os.WriteFile(real, []byte("old report"), 0o644)

	t.Run("symlink", func(t *testing.T) {
		link := filepath.Join(tmp, "link.json")
		if err := os.Symlink(real, link); err != nil {
			t.Skip(err)
		}
		ppl(link)
		isLink(link, real)
		isReport(real)
		if _, err := os.Stat(filepath.Join(tmp, "link.pareto.png")); err != nil {
			t.Errorf("no Pareto plot beside the link: %v", err)
		}
		noTemp(tmp)
		noTemp(reports)
	})
	t.Run("dangling symlink", func(t *testing.T) {
		link := filepath.Join(tmp, "new.json")
		if err := os.Symlink(filepath.Join("reports", "made.json"), link); err != nil {
			t.Skip(err)
		}
		ppl(link)
		isLink(link, filepath.Join("reports", "made.json"))
		isReport(filepath.Join(reports, "made.json"))
		noTemp(tmp)
		noTemp(reports)
	})
	t.Run("device", func(t *testing.T) {
		dir := filepath.Join(tmp, "dev")
		os.Mkdir(dir, 0o755)
		null := mknodNull(t, dir)
		if got := ppl(null); !strings.Contains(got, "no Pareto plot beside a device or FIFO") {
			t.Errorf("stdout does not say why there is no plot:\n%s", got)
		}
		if fi, err := os.Lstat(null); err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
			t.Errorf("%s is now %v (%v), want a character device", null, fi.Mode(), err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			t.Errorf("%s holds %v, want the device node alone", dir, entries)
		}
	})
}
