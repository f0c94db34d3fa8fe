package model

import (
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
)

// The benchmarks share one Qwen2.5-0.5B-shaped BF16 checkpoint (~1 GB),
// written on first use and removed by TestMain. $KAKEYA_BENCH_MATMUL, when
// set, is their CPU backend's matmul precision ("f32" for exact products; the default is
// bf16, llama.cpp's arithmetic).
var (
	benchOnce sync.Once
	benchDir  string
	benchErr  error
)

func TestMain(m *testing.M) {
	flag.Parse()
	// The Example needs the shared data set and cannot skip itself.
	shareddata.SkipExamples("models", "stories260K")
	code := m.Run()
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}

func benchModel(b *testing.B) *Model {
	b.Helper()
	if testing.Short() {
		b.Skip("writes a 1 GB checkpoint")
	}
	benchOnce.Do(func() {
		if benchDir, benchErr = os.MkdirTemp("", "kakeya-bench-"); benchErr == nil {
			benchErr = testmodel.Write(benchDir, testmodel.Qwen25_05B)
		}
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	m, err := Load(benchDir, Options{Backend: cpuBackend(b, 0, os.Getenv("KAKEYA_BENCH_MATMUL")), MaxContext: 1024})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m
}

// BenchmarkDecode times one-token steps at a context of 128 to 256 tokens.
func BenchmarkDecode(b *testing.B) {
	m := benchModel(b)
	s, err := m.NewSequence()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	prompt := testIDs(128, m.Config().VocabSize)
	if _, err := s.Forward(prompt, false); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if s.Len() >= 256 {
			b.StopTimer()
			s.Reset()
			if _, err := s.Forward(prompt, false); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		if _, err := s.Forward([]int{(i*31 + 7) % 1000}, false); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkPrefill times a prompt of 128 or 512 tokens in one call.
func BenchmarkPrefill(b *testing.B) {
	m := benchModel(b)
	for _, n := range []int{128, 512} {
		b.Run(fmt.Sprintf("n%d", n), func(b *testing.B) {
			s, err := m.NewSequence()
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			prompt := testIDs(n, m.Config().VocabSize)
			// One untimed run: the first packs the weights into the
			// kernels' panels.
			if _, err := s.Forward(prompt[:1], false); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				s.Reset()
				if _, err := s.Forward(prompt, false); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// decodeDrift is how far past the prefilled context a decode benchmark runs
// before it prefills again, so the context stays near its nominal length.
const decodeDrift = 128

// BenchmarkDecodeContext times one-token steps after a prompt of 512 or 2048
// tokens, with the plain float32 and bf16 caches and with every layer's K and V encoded
// by int8, int4 or kakeya in 64-token blocks (one hot block), so the cost of
// decoding compressed blocks inside attention shows. The prompt is
// prefilled outside the timer, once per sub-benchmark unless its steps run
// decodeDrift tokens past it.
func BenchmarkDecodeContext(b *testing.B) {
	if testing.Short() {
		b.Skip("writes a 1 GB checkpoint and prefills up to 2048 tokens")
	}
	benchModel(b) // writes the checkpoint
	m, err := Load(benchDir, Options{Backend: cpuBackend(b, 0, ""), MaxContext: 2048 + decodeDrift + 1})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	for _, cache := range []string{"plain", "plain-bf16", "int8", "int4", "kakeya-block:b=3"} {
		opts := SequenceOptions{}
		switch cache {
		case "plain":
		case "plain-bf16": // the tools' default storage
			opts.Cache.HotBF16 = true
		default:
			spec := kvconfig.Spec{KV: cache, BlockSize: 64, HotWindow: 64, Boundary: "none", CacheType: "f32"}
			p, _, err := kvplan.NewPolicy(spec, m.CacheShape(), nil)
			if err != nil {
				b.Fatal(err)
			}
			opts = SequenceOptions{Cache: p, BlockSize: 64}
		}
		for _, ctx := range []int{512, 2048} {
			s, err := m.NewSequenceOpts(opts)
			if err != nil {
				b.Fatal(err)
			}
			prompt := testIDs(ctx, m.Config().VocabSize)
			// The sequence outlives the calls of the sub-benchmark's
			// function, so its first b.N=1 probe does not cost a prefill.
			b.Run(fmt.Sprintf("%s/ctx%d", cache, ctx), func(b *testing.B) {
				b.StopTimer()
				if s.Len() == 0 || s.Len()+b.N > ctx+decodeDrift {
					s.Reset()
					if _, err := s.Forward(prompt, false); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				b.StartTimer()
				for i := 0; i < b.N; i++ {
					if s.Len() >= ctx+decodeDrift {
						b.StopTimer()
						s.Reset()
						if _, err := s.Forward(prompt, false); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
					if _, err := s.Forward([]int{(i*31 + 7) % 1000}, false); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			})
			s.Close()
		}
	}
}

// BenchmarkDecodeBatch times batched decode steps of 1, 4, 16 and 64
// sequences at a context of 128 to 256 tokens each, and reports the
// aggregate decode rate: every sequence's token counts. The prompts are
// prefilled outside the timer, through the batch too.
func BenchmarkDecodeBatch(b *testing.B) {
	m := benchModel(b)
	vocab := m.Config().VocabSize
	prompt := testIDs(128, vocab)
	for _, n := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("seqs%d", n), func(b *testing.B) {
			bt, err := m.NewBatch(max(n, 512))
			if err != nil {
				b.Fatal(err)
			}
			items := make([]BatchItem, n)
			tokens := make([]int, n)
			for i := range items {
				s, err := m.NewSequence()
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				items[i].Seq = s
			}
			// prefill resets every sequence and feeds it the prompt, four
			// sequences (512 tokens) per step.
			prefill := func() {
				for i := 0; i < n; i += 4 {
					step := items[i:min(n, i+4)]
					for j := range step {
						step[j].Seq.Reset()
						step[j].IDs = prompt
					}
					if err := bt.Forward(step); err != nil {
						b.Fatal(err)
					}
				}
				for i := range items {
					items[i].IDs = tokens[i : i+1]
				}
			}
			prefill()
			b.ReportAllocs()
			b.ResetTimer()
			for it := 0; it < b.N; it++ {
				if items[0].Seq.Len() >= 256 {
					b.StopTimer()
					prefill()
					b.StartTimer()
				}
				for i := range tokens {
					tokens[i] = (it*31 + i*17 + 7) % 1000
				}
				if err := bt.Forward(items); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
