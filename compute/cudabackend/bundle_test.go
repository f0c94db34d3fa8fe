package cudabackend

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeBench stands in for kakeya-bench in the bundle: it records its
// arguments and prints the serving table kakeya-bench prints, two levels
// of the cache it is given.
const fakeBench = `#!/usr/bin/env bash
echo "$*" >>"$(dirname "$0")/../args.txt"
cache=""
while [[ $# -gt 0 ]]; do [[ $1 == --cache ]] && cache=$2; shift; done
[[ $cache == int8 ]] && { echo "kakeya-bench: int8 broke" >&2; exit 1; }
[[ $cache == ${FAKE_SLOW:-none} ]] && exec sleep 30
echo "seeded checkpoint; serving"
echo "| cache | threads | concurrency | requests | decode tok/s | vs 1 | output tok/s | TTFT p50 ms | TTFT p99 ms | cold / cached p50 ms | peak running | prefix hits | preemptions | peak KV | stopped |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
[[ $cache == ${FAKE_NOLEVEL:-none} ]] && exit 0
echo "| $cache | – | 1 | 1 | 101.5 | 1.00x | 90.0 | 12 | 13 | – | 1 | 0% | 0 | 3 MiB | – |"
if [[ $cache == ${FAKE_PARTIAL:-none} ]]; then
	echo "| $cache | – | 16 | 48 | 310.5 | 3.06x | 250.2 | 4000 | 9000 | – | 27 | 0% | 0 | 1.7 GiB | time limit: 7 of 48 done |"
	exit 0
fi
echo "| $cache | – | 16 | 16 | 1203.5 | 11.86x | 1100.2 | 40 | 55 | – | 16 | 0% | 2 | 48 MiB | – |"
`

// fakePython stands in for python3 running peer.py: two figures, or the
// skip line where FAKE_TORCH is unset.
const fakePython = `#!/usr/bin/env bash
if [[ -z ${FAKE_TORCH:-} ]]; then printf 'SKIP\tnot run: torch is not installed for fake\n'; exit 3; fi
# peer.py's arguments: the script, the checkpoint, the shape.
printf '%s prefill 512\t23298 tok/s\t"tokens": 512, "prefill_tps": 23298.0\n' "$3"
printf '%s batched decode 16\t900.0 tok/s aggregate\t"batch": 16, "decode_tps": 900.0\n' "$3"
`

// The bundle's serving, KV-memory-bound and peer steps, run by run.sh on
// the CPU with kakeya-bench and python3 faked: each level of the table
// kakeya-bench prints becomes a results.json row with its figures, a
// cache whose run fails is a failed row (and the step fails) without
// stopping the next, the KV-bound step asks for the 1,792 MiB pool, and
// peer.py's lines become rows, or one row saying why it did not run.
func TestBundleServeSteps(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	script, err := os.ReadFile(filepath.Join("..", "..", "internal", "gpubundle", "run.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"run.sh": string(script), "bin/kakeya-bench": fakeBench, "fakepy/python3": fakePython, "peer.py": ""} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, size := range []string{"0.5b", "7b"} {
		if err := os.MkdirAll(filepath.Join(dir, "models", "qwen2.5-"+size), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "models", "qwen2.5-"+size, ".complete"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	report := filepath.Join(dir, "results.json")
	step := func(name string, env ...string) (rows []map[string]any, ok bool) {
		t.Helper()
		os.Remove(report)
		cmd := exec.Command(bash, filepath.Join(dir, "run.sh"), "__step", name)
		cmd.Env = append(os.Environ(), "WORK="+t.TempDir(), "MODELS="+filepath.Join(dir, "models"), "KAKEYA_REPORT_JSON="+report,
			"PATH="+filepath.Join(dir, "fakepy")+":"+os.Getenv("PATH"))
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		b, rerr := os.ReadFile(report)
		if rerr != nil {
			t.Fatalf("%s: no results.json (%v): %s", name, rerr, out)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var row map[string]any
			if err := json.Unmarshal([]byte(l), &row); err != nil {
				t.Fatalf("%s: a row that is no JSON object: %s (%v)", name, l, err)
			}
			rows = append(rows, row)
		}
		return rows, err == nil
	}

	rows, ok := step("serve-0.5b")
	if ok {
		t.Error("serve-0.5b passed with a failing cache")
	}
	var names []string
	for _, r := range rows {
		names = append(names, r["name"].(string)+" "+r["status"].(string))
	}
	want := "qwen2.5-0.5b plain x1 info|qwen2.5-0.5b plain x16 info|qwen2.5-0.5b int8 fail|qwen2.5-0.5b kakeya x1 info|qwen2.5-0.5b kakeya x16 info"
	if got := strings.Join(names, "|"); got != want {
		t.Errorf("serve-0.5b rows %s, want %s", got, want)
	}
	if r := rows[1]; r["decode_tps"] != 1203.5 || r["concurrency"] != 16.0 || r["peak_running"] != 16.0 || r["preemptions"] != 2.0 ||
		r["ttft_p50_ms"] != 40.0 || r["cache"] != "plain" || r["kv_memory"] != "16G" || !strings.Contains(r["text"].(string), "(11.86x of 1)") {
		t.Errorf("serve-0.5b row %v", r)
	}

	if r := rows[0]; r["temperature"] != 0.0 {
		t.Errorf("serve-0.5b row %v, want temperature 0", r)
	}

	// sample-0.5b: plain only, sampled at temperature 1 on the host.
	os.Remove(filepath.Join(dir, "args.txt"))
	rows, ok = step("sample-0.5b")
	args, err := os.ReadFile(filepath.Join(dir, "args.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--device cuda", "--cache plain", "--concurrency 1,64 --prompt-len 128 --gen 32 --temperature 1 --kv-memory 16G", "qwen2.5-0.5b"} {
		if !strings.Contains(string(args), want) {
			t.Errorf("sample-0.5b ran kakeya-bench with %q, lacking %q", args, want)
		}
	}
	if !ok || len(rows) != 2 || rows[1]["temperature"] != 1.0 || rows[1]["kv_memory"] != "16G" || rows[1]["decode_tps"] != 1203.5 {
		t.Errorf("sample-0.5b: ok %v, rows %v", ok, rows)
	}

	os.Remove(filepath.Join(dir, "args.txt"))
	rows, _ = step("kvbound-7b")
	args, err = os.ReadFile(filepath.Join(dir, "args.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--device cuda", "--cache kakeya", "--concurrency 48 --prompt-len 2016 --gen 256 --kv-memory 1792M", "qwen2.5-7b"} {
		if !strings.Contains(string(args), want) {
			t.Errorf("kvbound-7b ran kakeya-bench with %q, lacking %q", args, want)
		}
	}
	if len(rows) != 5 || rows[0]["kv_memory"] != "1792M" || rows[0]["shape"] != "qwen2.5-7b" || rows[0]["budget_s"] != 130.0 || rows[0]["seconds"] == nil {
		t.Errorf("kvbound-7b rows %v", rows)
	}
	// Each cache has a budget of its own: the preset's run past its 2 s
	// is cut and reported as such, and plain still runs after it.
	rows, ok = step("kvbound-7b", "FAKE_SLOW=kakeya", "KAKEYA_KVBOUND_BUDGETS=kakeya=2 plain=30", "KAKEYA_REPORT_BUDGET=60")
	names = names[:0]
	for _, r := range rows {
		names = append(names, r["name"].(string)+" "+r["status"].(string))
	}
	want = "qwen2.5-7b kakeya fail|qwen2.5-7b plain x1 info|qwen2.5-7b plain x16 info|qwen2.5-7b int8 fail"
	if got := strings.Join(names, "|"); ok || got != want || rows[0]["timed_out"] != true || rows[0]["budget_s"] != 2.0 || rows[1]["budget_s"] != 30.0 {
		t.Errorf("kvbound-7b with a slow preset: ok %v, rows %s, want %s: %v", ok, got, want, rows)
	}

	// A cache stopped by its --time-limit reports what it measured until
	// then (the sequences admitted at once, tok/s so far), marked so; one
	// stopped before any level says that.
	os.Remove(filepath.Join(dir, "args.txt"))
	rows, ok = step("kvbound-7b", "FAKE_PARTIAL=kakeya", "FAKE_NOLEVEL=plain")
	names = names[:0]
	for _, r := range rows {
		names = append(names, r["name"].(string)+" "+r["status"].(string))
	}
	want = "qwen2.5-7b kakeya x1 info|qwen2.5-7b kakeya x16 info|qwen2.5-7b plain fail|qwen2.5-7b int8 fail"
	if got := strings.Join(names, "|"); ok || got != want {
		t.Errorf("kvbound-7b with the preset stopped at its time limit: ok %v, rows %s, want %s", ok, got, want)
	} else {
		if r := rows[1]; r["stopped"] != true || r["requests_done"] != 7.0 || r["requests"] != 48.0 || r["peak_running"] != 27.0 || r["decode_tps"] != 310.5 ||
			!strings.Contains(r["text"].(string), "stopped at its time limit, 7 of 48 requests done") {
			t.Errorf("the stopped preset's row: %v", r)
		}
		if r := rows[0]; r["stopped"] != nil {
			t.Errorf("a level that finished is marked stopped: %v", r)
		}
		if r := rows[2]; r["stopped"] != true || !strings.Contains(r["text"].(string), "before any level was measured") {
			t.Errorf("plain stopped before any level: %v", r)
		}
	}
	args, err = os.ReadFile(filepath.Join(dir, "args.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(args), "--time-limit 112s --device cuda") { // kakeya's 130 s less 5 and a tenth
		t.Errorf("kvbound-7b ran kakeya-bench with %q, lacking its --time-limit", args)
	}
	// serve-*: each cache a share of the step's time too (an equal share
	// of what is left, or KAKEYA_SERVE_BUDGETS): plain cut at its 2 s does
	// not take the preset's time, which still runs.
	os.Remove(filepath.Join(dir, "args.txt"))
	rows, ok = step("serve-7b", "FAKE_SLOW=plain", "KAKEYA_SERVE_BUDGETS=plain=2", "KAKEYA_REPORT_BUDGET=55")
	names = names[:0]
	for _, r := range rows {
		names = append(names, r["name"].(string)+" "+r["status"].(string))
	}
	want = "qwen2.5-7b plain fail|qwen2.5-7b int8 fail|qwen2.5-7b kakeya x1 info|qwen2.5-7b kakeya x16 info"
	if got := strings.Join(names, "|"); ok || got != want || rows[0]["timed_out"] != true || rows[0]["budget_s"] != 2.0 {
		t.Errorf("serve-7b with a slow plain cache: ok %v, rows %s, want %s: %v", ok, got, want, rows)
	} else if b, _ := rows[2]["budget_s"].(float64); b < 25 {
		// 65 s of step (55 s is 4/5 of 75 less 5): 63 or so left for int8
		// and the preset after plain's 2, int8 failing at once.
		t.Errorf("the preset's serving share is %v s, want most of what plain and int8 left", rows[2]["budget_s"])
	}

	rows, ok = step("peer-7b")
	if !ok || len(rows) != 1 || rows[0]["status"] != "info" || !strings.Contains(rows[0]["text"].(string), "not run: torch is not installed") {
		t.Errorf("peer-7b without torch: ok %v, rows %v", ok, rows)
	}
	rows, ok = step("peer-7b", "FAKE_TORCH=1")
	if !ok || len(rows) != 2 || rows[0]["name"] != "qwen2.5-7b prefill 512 transformers" || rows[0]["prefill_tps"] != 23298.0 || rows[1]["decode_tps"] != 900.0 {
		t.Errorf("peer-7b: ok %v, rows %v", ok, rows)
	}
}

// fakeCudaTest stands in for the bundle's test binary (run as "cuda.test
// -test.run ^TestName$ ..."): a pass row for each test, the NODEVICE line
// where FAKE_NODEV is set, and a test that hangs where FAKE_HANG names it.
const fakeCudaTest = `#!/usr/bin/env bash
name=${2#^}
name=${name%$}
if [[ $name == TestReportDevice && -n ${FAKE_NODEV:-} ]]; then echo "NODEVICE|no CUDA driver: fake"; exit 1; fi
if [[ $name == ${FAKE_HANG:-none} ]]; then echo "ROW|[hang] $name: started"; exec sleep 120; fi
echo "ROW|[fake] $name: fake  PASS"
`

// The bundle's driver keeps a run inside its budget: a step that hangs is
// killed at the time it was given (what was left of the total), every
// later step is skipped for time, and the run ends within the total and
// timeout's grace, failed; a plan runs its own steps, in order (serve:
// peer-7b before kvbound-7b, which takes what is left), and says which it
// left out; an unknown plan is refused. run.sh runs on the CPU with the
// test binary, kakeya-run, kakeya-testmodel, kakeya-bench and python3
// faked.
func TestBundleBudget(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	if _, err := exec.LookPath("timeout"); err != nil {
		t.Skip("no timeout")
	}
	dir := t.TempDir()
	script, err := os.ReadFile(filepath.Join("..", "..", "internal", "gpubundle", "run.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"run.sh": string(script), "bin/cuda.test": fakeCudaTest, "bin/kakeya-bench": fakeBench, "fakepy/python3": fakePython, "peer.py": "",
		"bin/kakeya-run":       "#!/usr/bin/env bash\necho 'Once upon a time, fake.'\n",
		"bin/kakeya-testmodel": "#!/usr/bin/env bash\nmkdir -p \"${@: -1}\" && echo 'kakeya-testmodel: wrote a fake'\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// run runs the bundle and returns its steps' records (name, status,
	// reason) in order, its exit status and how long it took.
	type stepRec struct {
		name, status, reason string
		budget, seconds      float64
	}
	run := func(env ...string) (steps []stepRec, summary map[string]any, code int, took time.Duration) {
		t.Helper()
		out := t.TempDir()
		cmd := exec.Command(bash, filepath.Join(dir, "run.sh"), out)
		cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir(), "PATH="+filepath.Join(dir, "fakepy")+":"+os.Getenv("PATH"))
		cmd.Env = append(cmd.Env, env...)
		t0 := time.Now()
		log, err := cmd.CombinedOutput()
		took = time.Since(t0)
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(out, "results.json"))
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var row map[string]any
			if json.Unmarshal([]byte(l), &row) != nil {
				continue
			}
			switch {
			case row["step"] == "summary":
				summary = row
			case row["name"] == "step":
				s := stepRec{name: row["step"].(string), status: row["status"].(string)}
				s.reason, _ = row["reason"].(string)
				s.budget, _ = row["budget_s"].(float64)
				s.seconds, _ = row["seconds"].(float64)
				steps = append(steps, s)
			}
		}
		if summary == nil || len(steps) == 0 {
			t.Fatalf("no step records or summary in results.json:\n%s", log)
		}
		return steps, summary, code, took
	}

	// A hanging step: golden, with 6 s left of the total when it starts.
	const total = 6
	steps, summary, code, took := run("KAKEYA_PLAN=check", fmt.Sprint("KAKEYA_BUDGET=", total), "KAKEYA_MINSTEP=1", "FAKE_HANG=TestReportGolden")
	if code != 1 || summary["status"] != "FAIL" {
		t.Errorf("exit status %d, summary %v: want 1, FAIL", code, summary["status"])
	}
	if limit := time.Duration(total+5+3) * time.Second; took > limit {
		t.Errorf("the run took %v with a hanging step, past the total of %ds and timeout's grace", took, total)
	}
	seen, skipped := false, 0
	for _, s := range steps {
		switch {
		case s.name == "golden":
			seen = true
			if s.status != "timeout" || s.budget > total || s.seconds > s.budget+1 {
				t.Errorf("the hanging step: %+v, want a timeout within the %ds left", s, total)
			}
		case seen && s.status == "skip":
			skipped++
		case seen && s.status != "not-run":
			t.Errorf("step %s after the hanging one: %+v, want skipped for time (or not run)", s.name, s)
		case !seen && s.status != "pass":
			t.Errorf("step %s before the hanging one: %+v, want passed", s.name, s)
		}
	}
	t.Logf("a hanging golden step, %ds in all: %v, exit %d; steps %+v", total, took.Round(time.Millisecond), code, steps)
	if !seen || skipped == 0 {
		t.Errorf("the hanging step seen %v, %d steps skipped for time after it: %+v", seen, skipped, steps)
	}
	for _, s := range steps {
		if slices.Contains([]string{"throughput-7b", "serve-7b", "kvbound-7b", "peer-7b"}, s.name) && (s.status != "not-run" || s.reason != "not in KAKEYA_STEPS") {
			t.Errorf("plan check ran %s: %+v", s.name, s)
		}
	}

	// The serve plan without a GPU: its steps in order, the GPU ones not
	// run for want of a device, the others left out of the plan.
	steps, summary, code, _ = run("KAKEYA_PLAN=serve", "FAKE_NODEV=1")
	if code != 2 || summary["status"] != "NO GPU" {
		t.Errorf("serve plan without a GPU: exit status %d, summary %v: want 2, NO GPU", code, summary["status"])
	}
	var in []string
	for _, s := range steps {
		if s.reason != "not in KAKEYA_STEPS" {
			in = append(in, s.name)
		}
	}
	if got, want := strings.Join(in, " "), "env device model-7b throughput-7b serve-7b peer-7b kvbound-7b"; got != want {
		t.Errorf("plan serve ran %s, want %s", got, want)
	}

	// A plan that is none of them.
	cmd := exec.Command(bash, filepath.Join(dir, "run.sh"), t.TempDir())
	cmd.Env = append(os.Environ(), "KAKEYA_PLAN=fast")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "KAKEYA_PLAN=fast: want all, check or serve") {
		t.Errorf("KAKEYA_PLAN=fast: %v: %s", err, out)
	}
}
