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
	"github.com/kakeya-ai/kakeya/kvcache"
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

// batchPrompt is the prompt length of the profile's batched decode rows:
// inside a block, so that the steps timed start none.
const batchPrompt = 100

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
// alone and waited for: a kernelTimer): a row for a prefill of each of
// contexts tokens and one for a decode step after it, on each cache
// (plain: every context; the others: the first), then a row each for a
// batched greedy decode step of each of batches sequences (plain cache,
// after a prefill of batchPrompt tokens each).
func profileRows(r *reporter, step, shape string, b *Backend, dir string, caches []string, contexts, batches []int, block int) {
	maxSeqs := max(1, slices.Max(append([]int{1}, batches...)))
	m, err := model.Load(dir, model.Options{Backend: b, MaxContext: max(slices.Max(contexts), batchPrompt+2) + 8})
	if err != nil {
		r.row(step, shape, statusFail, err.Error(), nil)
		return
	}
	defer m.Close()
	vocab := m.Config().VocabSize
	policy := func(cache string) (kvcache.Policy, error) {
		pol, _, err := kvplan.NewPolicy(cacheSpec(cache, block), m.CacheShape(), cacheCalibration(cache, m))
		return pol, err
	}
	plain, err := policy("plain")
	if err != nil {
		r.row(step, shape, statusFail, err.Error(), nil)
		return
	}
	// One untimed prefill first: what is set up once (cuBLAS, the
	// tuner, scratch) is not the profile's.
	warm := func() error {
		s, err := m.NewSequenceOpts(model.SequenceOptions{Cache: plain, BlockSize: block})
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
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	for _, cache := range caches {
		pol, err := policy(cache)
		if err != nil {
			r.row(step, shape+" "+cache, statusFail, err.Error(), nil)
			continue
		}
		for i, ctx := range contexts {
			if i > 0 && cache != "plain" {
				break
			}
			label := fmt.Sprintf("%s %s prefill %d", shape, cache, ctx)
			if r.left() < 10*time.Second {
				r.row(step, label, statusSkip, "out of the time budget", nil)
				continue
			}
			s, err := m.NewSequenceOpts(model.SequenceOptions{Cache: pol, BlockSize: block})
			if err != nil {
				r.row(step, label, statusFail, err.Error(), nil)
				continue
			}
			ids := testIDs(ctx, vocab)
			es, total, err := timeKernels(b, func() error { _, err := s.Forward(ids, false); return err })
			if err != nil {
				s.Close()
				r.row(step, label, statusFail, err.Error(), nil)
				continue
			}
			r.row(step, label, statusInfo,
				fmt.Sprintf("%.1f ms with every launch waited for: %s", ms(total), profileText(es, total, 8)),
				map[string]any{"shape": shape, "cache": cache, "ctx": ctx, "phase": "prefill", "total_ms": ms(total), "kernels": es})
			label = fmt.Sprintf("%s %s decode after %d", shape, cache, ctx)
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
				r.row(step, label, statusFail, err.Error(), nil)
				continue
			}
			r.row(step, label, statusInfo,
				fmt.Sprintf("%.2f ms a step (4 steps, every launch waited for): %s", ms(total)/4, profileText(es, total, 8)),
				map[string]any{"shape": shape, "cache": cache, "ctx": ctx, "phase": "decode", "total_ms": ms(total) / 4, "kernels": es})
		}
	}
	if len(batches) == 0 {
		return
	}
	bt, err := m.NewBatch(max(maxSeqs, 4*batchPrompt))
	if err != nil {
		r.row(step, shape+" batched", statusFail, err.Error(), nil)
		return
	}
	for _, n := range batches {
		label := fmt.Sprintf("%s plain batched decode of %d", shape, n)
		if r.left() < 10*time.Second {
			r.row(step, label, statusSkip, "out of the time budget", nil)
			continue
		}
		seqs := make([]*model.Sequence, n)
		items := make([]model.BatchItem, n)
		err := func() error {
			for i := range seqs {
				s, err := m.NewSequenceOpts(model.SequenceOptions{Cache: plain, BlockSize: block})
				if err != nil {
					return err
				}
				seqs[i] = s
			}
			// The prompts, untimed, four a step.
			for i := 0; i < n; i += 4 {
				var pre []model.BatchItem
				for j := i; j < min(n, i+4); j++ {
					pre = append(pre, model.BatchItem{Seq: seqs[j], IDs: testIDs(batchPrompt, vocab-j)})
				}
				if err := bt.Forward(pre); err != nil {
					return err
				}
			}
			return nil
		}()
		if err == nil {
			var es []profileEntry
			var total time.Duration
			es, total, err = timeKernels(b, func() error {
				for st := range 2 {
					for i := range items {
						items[i] = model.BatchItem{Seq: seqs[i], IDs: []int{(i*7 + st*31 + 3) % vocab}, Greedy: true}
					}
					if err := bt.Forward(items); err != nil {
						return err
					}
				}
				return nil
			})
			if err == nil {
				r.row(step, label, statusInfo,
					fmt.Sprintf("%.2f ms a step (2 steps, every launch waited for): %s", ms(total)/2, profileText(es, total, 8)),
					map[string]any{"shape": shape, "cache": "plain", "sequences": n, "phase": "batched decode", "total_ms": ms(total) / 2, "kernels": es})
			}
		}
		for _, s := range seqs {
			if s != nil {
				s.Close()
			}
		}
		if err != nil {
			r.row(step, label, statusFail, err.Error(), nil)
		}
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
	sp.Heads, sp.KVHeads, sp.HeadDim, sp.Hidden, sp.Layers = 4, 2, 64, 256, 1
	if err := testmodel.Write(dir, sp); err != nil {
		t.Fatal(err)
	}
	gpu, f := newFakeBackend(t, Options{NoGraphs: true})
	var out bytes.Buffer
	r := newReporter(t, &out)
	profileRows(r, "profile", "tiny", gpu, dir, []string{"plain", "int8", "kakeya-pc"}, []int{40, 20}, []int{2}, 16)
	text := out.String()
	// The kakeya-pc prefill of 40 tokens (the bundle's profile row of the
	// preset's codec) encodes its first block on the device (the newest
	// 16 tokens stay hot), decodes it once (pc_unpack: 40 rows x 2 query
	// heads per KV head are two row tiles, which would each decode it)
	// and runs its attention over it on the tensor cores.
	if i := strings.Index(text, "[profile] tiny kakeya-pc prefill 40:"); i < 0 {
		t.Errorf("profile rows lack the kakeya-pc prefill:\n%s", text)
	} else if row, _, _ := strings.Cut(text[i:], "\n"); strings.Contains(row, "attn_prefill_pc") || strings.Contains(row, "attn_split") {
		t.Errorf("the kakeya-pc prefill row names %q, want no attn_prefill_pc or attn_split", row)
	}
	// The row names the 8 slowest kernels only: the counts say which ran.
	if kernelCount(f, "pc_unpack") == 0 || kernelCount(f, "attn_prefill_pc_d64") != 0 {
		t.Errorf("%d pc_unpack and %d attn_prefill_pc_d64 launches, want some and none", kernelCount(f, "pc_unpack"), kernelCount(f, "attn_prefill_pc_d64"))
	}
	for _, want := range []string{"[profile] tiny plain prefill 40:", "attn_prefill_d64", "%, 1x)", "[profile] tiny plain decode after 40:", "attn_split", "[profile] tiny plain prefill 20:", "[profile] tiny int8 decode after 40:", "[profile] tiny plain batched decode of 2:", "attn_batch"} {
		if !strings.Contains(text, want) {
			t.Errorf("profile rows lack %q:\n%s", want, text)
		}
	}
	if _, ok := gpu.drv.(*kernelTimer); ok {
		t.Error("the kernel timer stayed installed")
	}
}
