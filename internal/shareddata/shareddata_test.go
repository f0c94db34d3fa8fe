package shareddata

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestPath(t *testing.T) {
	t.Setenv("KAKEYA_SHARED", "/data/set")
	if got := Path(); got != "/data/set" {
		t.Errorf("with KAKEYA_SHARED: %q", got)
	}
	t.Setenv("KAKEYA_SHARED", "")
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	// This package sits two levels below the module root.
	want := filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(wd))), "shared")
	if got := Path(); got != want {
		t.Errorf("Path() = %q, want %q beside the module root", got, want)
	}
}

func TestMissing(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("KAKEYA_SHARED", dir)
	if err := os.Mkdir(filepath.Join(dir, "models"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		paths [][]string
		want  string
	}{
		{nil, ""},
		{[][]string{{"models"}}, ""},
		{[][]string{{"models"}, {"models", "stories260K"}, {"reference"}}, filepath.Join(dir, "models", "stories260K")},
		{[][]string{{"reference", "tokenizer_cases.json"}}, filepath.Join(dir, "reference", "tokenizer_cases.json")},
	} {
		if got := Missing(c.paths...); got != c.want {
			t.Errorf("Missing(%q) = %q, want %q", c.paths, got, c.want)
		}
	}
}

// recorder is a testing.TB that records Skip and Fatal instead of acting
// on them; like them, both end the calling goroutine.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Skip(args ...any) {
	r.skipped = fmt.Sprint(args...)
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) {
	r.failed = fmt.Sprint(args...)
	runtime.Goexit()
}

// call runs f with a recorder on its own goroutine, so that Skip and Fatal
// can end it, and reports what f returned ("" where it did not return).
func call(t *testing.T, f func(testing.TB) string) (rec *recorder, got string) {
	rec = &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		got = f(rec)
	}()
	<-done
	return rec, got
}

func TestFileAndDir(t *testing.T) {
	data := t.TempDir()
	for _, f := range []string{"models/stories260K/config.json", "reference/tokenizer_cases.json"} {
		name := filepath.Join(data, f)
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	empty := t.TempDir()
	file := func(elem ...string) func(testing.TB) string {
		return func(tb testing.TB) string { return File(tb, elem...) }
	}
	for _, c := range []struct {
		name, shared, require string
		f                     func(testing.TB) string
		want, skip, fail      string
	}{
		{name: "file present", shared: data, f: file("models", "stories260K"),
			want: filepath.Join(data, "models", "stories260K")},
		{name: "dir present", shared: data, f: Dir, want: data},
		{name: "file missing", shared: data, f: file("data", "tinystories", "val.txt"),
			skip: "shared data set not found: " + filepath.Join(data, "data", "tinystories", "val.txt") + " (set KAKEYA_SHARED to its location)"},
		{name: "dir missing", shared: empty, f: Dir,
			skip: "shared data set not found: " + filepath.Join(empty, "models", "stories260K", "config.json") + " (set KAKEYA_SHARED to its location)"},
		{name: "file required", shared: empty, require: "1", f: file("models", "stories260K"),
			fail: "shared data set not found: " + filepath.Join(empty, "models", "stories260K") + " (KAKEYA_REQUIRE_SHARED=1 demands it; set KAKEYA_SHARED to its location)"},
		{name: "dir required", shared: empty, require: "1", f: Dir,
			fail: "shared data set not found: " + filepath.Join(empty, "models", "stories260K", "config.json") + " (KAKEYA_REQUIRE_SHARED=1 demands it; set KAKEYA_SHARED to its location)"},
		{name: "require other than 1", shared: empty, require: "yes", f: file("reference"),
			skip: "shared data set not found: " + filepath.Join(empty, "reference") + " (set KAKEYA_SHARED to its location)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("KAKEYA_SHARED", c.shared)
			t.Setenv(RequireEnv, c.require)
			rec, got := call(t, c.f)
			if got != c.want || rec.skipped != c.skip || rec.failed != c.fail {
				t.Errorf("returned %q, skipped %q, failed %q;\nwant %q, %q, %q", got, rec.skipped, rec.failed, c.want, c.skip, c.fail)
			}
		})
	}
}

// goTest runs go test -json on the tokenizer package (a representative
// user of the data set: whole tests and subtests, models, tokenizers,
// reference cases and text) with env added, and returns its events.
func goTest(t *testing.T, env ...string) []testEvent {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go test puts the go command on PATH: %v", err)
	}
	args := []string{"test", "-json", "-count=1"}
	if w := os.Getenv("KAKEYA_TEST_EXEC"); w != "" {
		// Cross-built tests (make test-arm64) run under the same wrapper
		// as this one.
		args = append(args, "-exec", w)
	}
	cmd := exec.Command(goBin, append(args, "github.com/kakeya-ai/kakeya/tokenizer")...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	var events []testEvent
	for line := range strings.Lines(string(out)) {
		var e testEvent
		if json.Unmarshal([]byte(line), &e) == nil && e.Action != "" {
			events = append(events, e)
		}
	}
	if err != nil {
		t.Fatalf("go test: %v\n%s", err, out)
	}
	return events
}

// testEvent is the part of a go test -json event these tests read.
type testEvent struct{ Action, Test, Output string }

// Without the data set, every test that needs it skips with the one line
// naming the missing file, and none fails.
func TestPackageSkipsWithoutData(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test on the tokenizer package")
	}
	empty := t.TempDir()
	events := goTest(t, "KAKEYA_SHARED="+empty, RequireEnv+"=")
	logs := map[string][]string{} // test -> its lines other than go test's own
	skipped := 0
	for _, e := range events {
		switch e.Action {
		case "fail":
			t.Errorf("%s failed without the data set", e.Test)
		case "skip":
			if e.Test == "" {
				continue
			}
			skipped++
			lines := logs[e.Test]
			want := SkipPrefix + empty + string(filepath.Separator)
			if len(lines) != 1 || !strings.Contains(lines[0], want) || !strings.HasSuffix(lines[0], " (set KAKEYA_SHARED to its location)") {
				t.Errorf("%s skipped with %q, want one line holding %q", e.Test, lines, want)
			}
		case "output":
			line := strings.TrimSpace(e.Output)
			if e.Test != "" && line != "" && !strings.HasPrefix(line, "=== ") && !strings.HasPrefix(line, "--- ") {
				logs[e.Test] = append(logs[e.Test], line)
			}
		}
	}
	if skipped < 10 {
		t.Errorf("%d tests skipped, want the tokenizer package's 10 or more that read the data set", skipped)
	}
}

// With the data set present and demanded, the same package passes and
// nothing in it skips for want of the data.
func TestPackageRunsWithData(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test on the tokenizer package")
	}
	dir := Dir(t)
	for _, e := range goTest(t, "KAKEYA_SHARED="+dir, RequireEnv+"=1") {
		if e.Action == "fail" {
			t.Errorf("%s failed", e.Test)
		}
		if strings.Contains(e.Output, SkipPrefix) {
			t.Errorf("%s: %s", e.Test, strings.TrimSpace(e.Output))
		}
	}
}
