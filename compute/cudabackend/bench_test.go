package cudabackend

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
	"github.com/kakeya-ai/kakeya/model"
)

// BenchmarkDecodeHost times the host side of a decode step — queueing,
// graph lookups, block tables, cache writes — on a fake driver that runs no
// kernel, for Qwen2.5-0.5B's layer structure (24 layers, 14 heads, 2 KV
// heads of 64) with small matrices. It reports the driver calls a step
// makes: what a real driver adds its own cost to (a few microseconds per
// kernel launch or graph launch, more per wait).
func BenchmarkDecodeHost(b *testing.B) {
	spec := testmodel.Qwen25_05B
	spec.Intermediate, spec.Vocab, spec.Tie = 64, 256, true
	dir := filepath.Join(b.TempDir(), "qwen")
	if err := testmodel.Write(dir, spec); err != nil {
		b.Fatal(err)
	}
	for _, cache := range []string{"f32", "bf16", "int8"} {
		b.Run(cache, func(b *testing.B) {
			f := newFakeOrSkip(b)
			f.noop = true
			gpu := newBackend(f, Options{})
			defer gpu.Close()
			m := loadModel(b, dir, model.Options{Backend: gpu, MaxContext: 4096})
			sp := kvconfig.Spec{KV: "none", BlockSize: 64, CacheType: cache}
			if cache == "int8" {
				sp = kvconfig.Spec{KV: "int8", BlockSize: 64, HotWindow: 64, Boundary: "none", CacheType: "bf16"}
			}
			p, _, err := kvplan.NewPolicy(sp, m.CacheShape(), nil)
			if err != nil {
				b.Fatal(err)
			}
			s, err := m.NewSequenceOpts(model.SequenceOptions{Cache: p, BlockSize: 64})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if _, err := s.Forward(testIDs(512, spec.Vocab), false); err != nil {
				b.Fatal(err)
			}
			for _, c := range []string{"kernels", "launch", "launchGraph", "copyIn", "copyOut", "copyDevice"} {
				f.calls[c] = 0
			}
			before := gpu.Launches()
			b.ResetTimer()
			for i := range b.N {
				if s.Len() == 4096 {
					b.StopTimer()
					s.Reset()
					if _, err := s.Forward(testIDs(512, spec.Vocab), false); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				if _, err := s.Forward([]int{i % spec.Vocab}, false); err != nil {
					b.Fatal(err)
				}
			}
			n := float64(b.N)
			st := gpu.Launches().Sub(before)
			b.ReportMetric(float64(st.Calls()+st.CopiesIn+st.CopiesOut+st.Syncs+int64(f.calls["copyDevice"]))/n, "driver-calls/step")
			b.ReportMetric(float64(st.Kernels)/n, "kernels/step")
			b.ReportMetric(float64(f.calls["launchGraph"])/n, "graphs/step")
			b.ReportMetric(float64(f.calls["copyIn"]+f.calls["copyOut"])/n, "host-copies/step")
			b.ReportMetric(float64(f.calls["copyDevice"])/n, "dtod/step")
		})
	}
}

// BenchmarkBatchDecodeHost times the host side of a batched greedy decode
// step of 16 and 64 sequences (each after a 128-token prompt) on a fake
// driver that runs no kernel, for Qwen2.5-0.5B's layer structure with
// small matrices: what a serving step costs the host besides the GPU.
func BenchmarkBatchDecodeHost(b *testing.B) {
	spec := testmodel.Qwen25_05B
	spec.Intermediate, spec.Vocab, spec.Tie = 64, 256, true
	dir := filepath.Join(b.TempDir(), "qwen")
	if err := testmodel.Write(dir, spec); err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{16, 64} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			f := newFakeOrSkip(b)
			f.noop = true
			gpu := newBackend(f, Options{})
			defer gpu.Close()
			m := loadModel(b, dir, model.Options{Backend: gpu, MaxContext: 4096})
			p, _, err := kvplan.NewPolicy(kvconfig.Spec{KV: "none", BlockSize: 64, CacheType: "bf16"}, m.CacheShape(), nil)
			if err != nil {
				b.Fatal(err)
			}
			bt, err := m.NewBatch(512)
			if err != nil {
				b.Fatal(err)
			}
			seqs := make([]*model.Sequence, n)
			for i := range seqs {
				if seqs[i], err = m.NewSequenceOpts(model.SequenceOptions{Cache: p, BlockSize: 64}); err != nil {
					b.Fatal(err)
				}
				defer seqs[i].Close()
				if err := bt.Forward([]model.BatchItem{{Seq: seqs[i], IDs: testIDs(128, spec.Vocab)}}); err != nil {
					b.Fatal(err)
				}
			}
			items := make([]model.BatchItem, n)
			for _, c := range []string{"kernels", "launch", "launchGraph", "copyIn", "copyOut", "copyDevice"} {
				f.calls[c] = 0
			}
			before := gpu.Launches()
			b.ResetTimer()
			for i := range b.N {
				if seqs[0].Len() >= 4000 {
					b.StopTimer()
					for _, s := range seqs {
						s.Reset()
						if err := bt.Forward([]model.BatchItem{{Seq: s, IDs: testIDs(128, spec.Vocab)}}); err != nil {
							b.Fatal(err)
						}
					}
					b.StartTimer()
				}
				for j := range items {
					items[j] = model.BatchItem{Seq: seqs[j], IDs: []int{(i + j) % spec.Vocab}, Greedy: true}
				}
				if err := bt.Forward(items); err != nil {
					b.Fatal(err)
				}
			}
			st := gpu.Launches().Sub(before)
			nn := float64(b.N)
			b.ReportMetric(float64(st.Kernels)/nn, "kernels/step")
			b.ReportMetric(float64(f.calls["launchGraph"])/nn, "graphs/step")
			b.ReportMetric(float64(f.calls["copyIn"])/nn, "copies-in/step")
			b.ReportMetric(float64(f.calls["copyOut"])/nn, "copies-out/step")
			b.ReportMetric(float64(st.Captures)/nn, "captures/step")
		})
	}
}
