package cudabackend

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
	"github.com/kakeya-ai/kakeya/model"
)

// kernelTimer is a driver that runs every launch alone and waits for it,
// so that the host's clock times each kernel (plus a launch's and a
// wait's overhead, a few microseconds): the GPU report's profile rows,
// which say where a prefill's or a decode step's time goes. What runs
// between launches (cuBLAS, copies, the host's own work) is timed as one
// more entry, betweenLaunches, at the next launch.
type kernelTimer struct {
	driver
	mark   time.Time
	times  map[string]time.Duration
	counts map[string]int
	err    error
}

// betweenLaunches names the time between launches in a profile.
const betweenLaunches = "(between launches: cuBLAS, copies, host)"

func newKernelTimer(d driver) *kernelTimer {
	return &kernelTimer{driver: d, mark: time.Now(), times: map[string]time.Duration{}, counts: map[string]int{}}
}

// lap waits for the device and adds the time since the last lap to name.
func (k *kernelTimer) lap(name string) {
	if err := k.driver.sync(); err != nil && k.err == nil {
		k.err = err
	}
	now := time.Now()
	k.times[name] += now.Sub(k.mark)
	k.counts[name]++
	k.mark = now
}

func (k *kernelTimer) launch(ls []Launch) error {
	k.lap(betweenLaunches)
	for _, l := range ls {
		if err := k.driver.launch([]Launch{l}); err != nil {
			return err
		}
		k.lap(l.Kernel)
	}
	return nil
}

func (k *kernelTimer) launchGraph(g graphExec) error {
	k.lap(betweenLaunches)
	if err := k.driver.launchGraph(g); err != nil {
		return err
	}
	k.lap("(a CUDA graph)")
	return nil
}

// profileEntry is one kernel's share of a profile.
type profileEntry struct {
	Name  string
	Time  time.Duration
	Count int
}

// timeKernels runs f with b's launches timed one by one and returns the
// entries, most time first, and the total.
func timeKernels(b *Backend, f func() error) ([]profileEntry, time.Duration, error) {
	b.mu.Lock()
	b.flush()
	if b.err == nil {
		b.fail(b.drv.sync())
	}
	k := newKernelTimer(b.drv)
	old := b.drv
	b.drv = k
	b.mu.Unlock()
	start := time.Now()
	err := f()
	b.mu.Lock()
	b.flush()
	k.lap(betweenLaunches)
	b.drv = old
	b.mu.Unlock()
	total := time.Since(start)
	if err == nil {
		err = cmp.Or(k.err, b.Err())
	}
	var es []profileEntry
	for _, name := range slices.Sorted(maps.Keys(k.times)) {
		es = append(es, profileEntry{name, k.times[name], k.counts[name]})
	}
	slices.SortStableFunc(es, func(a, b profileEntry) int { return cmp.Compare(b.Time, a.Time) })
	return es, total, err
}

// profileText describes the entries: the most time first, each with its
// share of total and its calls, as "attn_prefill_d128 41.2 ms (38%, 28x)".
func profileText(es []profileEntry, total time.Duration, most int) string {
	var parts []string
	for i, e := range es {
		if i == most {
			parts = append(parts, fmt.Sprintf("%d more", len(es)-most))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.2f ms (%.0f%%, %dx)", e.Name, float64(e.Time.Microseconds())/1e3,
			100*e.Time.Seconds()/max(total.Seconds(), 1e-9), e.Count))
	}
	return strings.Join(parts, "; ")
}

// profileRows reports where the time goes, kernel by kernel (each run
// alone and waited for: a kernelTimer), in a prefill of each of contexts
// tokens and a decode step after it, on the plain cache: a row each.
func profileRows(r *reporter, step, shape string, b *Backend, dir string, contexts []int, block int) {
	m, err := model.Load(dir, model.Options{Backend: b, MaxContext: slices.Max(contexts) + 8})
	if err != nil {
		r.row(step, shape, statusFail, err.Error(), nil)
		return
	}
	defer m.Close()
	vocab := m.Config().VocabSize
	pol, _, err := kvplan.NewPolicy(cacheSpec("plain", block), m.CacheShape(), nil)
	if err != nil {
		r.row(step, shape, statusFail, err.Error(), nil)
		return
	}
	// One untimed prefill first: what is set up once (cuBLAS, the
	// tuner, scratch) is not the profile's.
	warm := func() error {
		s, err := m.NewSequenceOpts(model.SequenceOptions{Cache: pol, BlockSize: block})
		if err != nil {
			return err
		}
		defer s.Close()
		_, err = s.Forward(testIDs(min(contexts[0], 64), vocab), false)
		return err
	}
	if err := warm(); err != nil {
		r.row(step, shape, statusFail, err.Error(), nil)
		return
	}
	for _, ctx := range contexts {
		if r.left() < 10*time.Second {
			r.row(step, fmt.Sprintf("%s prefill %d", shape, ctx), statusSkip, "out of the time budget", nil)
			continue
		}
		s, err := m.NewSequenceOpts(model.SequenceOptions{Cache: pol, BlockSize: block})
		if err != nil {
			r.row(step, shape, statusFail, err.Error(), nil)
			return
		}
		ids := testIDs(ctx, vocab)
		es, total, err := timeKernels(b, func() error { _, err := s.Forward(ids, false); return err })
		if err != nil {
			s.Close()
			r.row(step, fmt.Sprintf("%s prefill %d", shape, ctx), statusFail, err.Error(), nil)
			continue
		}
		r.row(step, fmt.Sprintf("%s prefill %d", shape, ctx), statusInfo,
			fmt.Sprintf("%.1f ms with every launch waited for: %s", float64(total.Microseconds())/1e3, profileText(es, total, 8)),
			map[string]any{"shape": shape, "ctx": ctx, "phase": "prefill", "total_ms": float64(total.Microseconds()) / 1e3, "kernels": es})
		es, total, err = timeKernels(b, func() error {
			for i := range 4 {
				if _, err := s.Forward([]int{(i*31 + 7) % vocab}, false); err != nil {
					return err
				}
			}
			return nil
		})
		s.Close()
		if err != nil {
			r.row(step, fmt.Sprintf("%s decode after %d", shape, ctx), statusFail, err.Error(), nil)
			continue
		}
		r.row(step, fmt.Sprintf("%s decode after %d", shape, ctx), statusInfo,
			fmt.Sprintf("%.2f ms a step (4 steps, every launch waited for): %s", float64(total.Microseconds())/4e3, profileText(es, total, 8)),
			map[string]any{"shape": shape, "ctx": ctx, "phase": "decode", "total_ms": float64(total.Microseconds()) / 4e3, "kernels": es})
	}
}

// The profile rows time every kernel of a prefill and of decode steps on
// their own: on the emulator, a tiny model's rows name the kernels the
// forward pass launches (its tensor-core prefill attention among them)
// with a count each, and the backend runs on unprofiled afterwards.
func TestProfileRows(t *testing.T) {
	needKernels(t, "attn_prefill_d64", "gemm_bf16")
	dir := filepath.Join(t.TempDir(), "m")
	sp := testmodel.Qwen2Tiny
	sp.HeadDim, sp.Hidden = 64, 14*64
	if err := testmodel.Write(dir, sp); err != nil {
		t.Fatal(err)
	}
	gpu, _ := newFakeBackend(t, Options{NoGraphs: true})
	var out bytes.Buffer
	r := newReporter(t, &out)
	profileRows(r, "profile", "tiny", gpu, dir, []int{20}, 16)
	text := out.String()
	for _, want := range []string{"[profile] tiny prefill 20:", "attn_prefill_d64", "%, 2x)", "[profile] tiny decode after 20:", "attn_split"} {
		if !strings.Contains(text, want) {
			t.Errorf("profile rows lack %q:\n%s", want, text)
		}
	}
	if _, ok := gpu.drv.(*kernelTimer); ok {
		t.Error("the kernel timer stayed installed")
	}
}
