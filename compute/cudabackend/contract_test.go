package cudabackend

// The failure contract of compute (see its package documentation) checked
// end to end: a failure injected into one operation of a backend reaches
// the engine's public API. The test lives here because only this package
// can make the CUDA driver fail; the host backends run in the same table.

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya"
	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	"github.com/kakeya-ai/kakeya/compute/reference"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
)

// failStep wraps a backend so that forward step step (1 for the prompt's
// prefill, 2 for the first decode step, ...; 0 for none) fails: every step
// starts with one Embed, and the step's Embed calls inject, which makes an
// operation of the wrapped backend fail from then on.
type failStep struct {
	compute.Backend
	step, embeds int
	inject       func()
}

func (b *failStep) Embed(out compute.Buffer, table compute.Weight, ids []int) {
	if b.embeds++; b.embeds == b.step {
		b.inject()
	}
	b.Backend.Embed(out, table, ids)
}

// failMatMul is a host backend whose MatMul fails once armed, honouring
// the contract as a backend does: it records the failure for Err, and the
// products after it do nothing.
type failMatMul struct {
	compute.Backend
	armed bool
	err   error
}

func (b *failMatMul) MatMul(out, x compute.Buffer, n int, w compute.Weight) {
	if b.armed && b.err == nil {
		b.err = errInjected
	}
	if b.err != nil {
		return
	}
	b.Backend.MatMul(out, x, n, w)
}

func (b *failMatMul) Err() error {
	if b.err != nil {
		return b.err
	}
	return b.Backend.Err()
}

var errInjected = errors.New("injected MatMul failure")

// failLaunch is the fake driver with its kernel launches (direct or by a
// graph) failing once armed, as a lost device's do.
type failLaunch struct {
	*fakeDriver
	armed bool
}

// errLaunch is the launch failure failLaunch injects.
var errLaunch = newError("cuLaunchKernel (injected)", Result(719))

func (d *failLaunch) launch(ls []Launch) error {
	if d.armed {
		return errLaunch
	}
	return d.fakeDriver.launch(ls)
}

func (d *failLaunch) launchGraph(g graphExec) error {
	if d.armed {
		return errLaunch
	}
	return d.fakeDriver.launchGraph(g)
}

// TestFailureReachesEngine injects a failure into one forward step of each
// backend and checks that Engine.Generate returns it (errors.Is) with the
// text of the tokens sampled before the step and nothing after, that the
// engine stays failed (the error is sticky), and that the same run without
// the failure succeeds.
func TestFailureReachesEngine(t *testing.T) {
	dir := filepath.Join(shareddata.Dir(t), "models", "stories260K")
	const maxTokens = 6
	backends := []struct {
		name string
		// open returns a backend and the function that makes its
		// operations fail, and the error they then fail with.
		open func(t *testing.T) (compute.Backend, func(), error)
	}{
		{"cpu", func(t *testing.T) (compute.Backend, func(), error) {
			cpu := cpubackend.New(1)
			t.Cleanup(func() { cpu.Close() })
			b := &failMatMul{Backend: cpu}
			return b, func() { b.armed = true }, errInjected
		}},
		{"reference", func(t *testing.T) (compute.Backend, func(), error) {
			b := &failMatMul{Backend: reference.Backend{}}
			return b, func() { b.armed = true }, errInjected
		}},
		{"cuda", func(t *testing.T) (compute.Backend, func(), error) {
			d := &failLaunch{fakeDriver: newFakeOrSkip(t)}
			b := newBackend(d, Options{})
			t.Cleanup(func() { b.Close() })
			return b, func() { d.armed = true }, errLaunch
		}},
	}
	generate := func(t *testing.T, be compute.Backend) (*kakeya.Engine, *kakeya.Result, []string, error) {
		t.Helper()
		e, err := kakeya.Load(context.Background(), dir, kakeya.Options{Backend: be, Cache: kvconfig.Spec{CacheType: "f32"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		var pieces []string
		res, err := e.Generate(context.Background(), "Once upon a time", kakeya.GenerateOptions{MaxTokens: maxTokens}, func(s string) error {
			pieces = append(pieces, s)
			return nil
		})
		return e, res, pieces, err
	}
	for _, bc := range backends {
		t.Run(bc.name, func(t *testing.T) {
			be, _, _ := bc.open(t)
			_, clean, _, err := generate(t, &failStep{Backend: be})
			if err != nil {
				t.Fatalf("without a failure: %v", err)
			}
			if clean.GeneratedTokens != maxTokens || clean.StopReason != kakeya.StopLength {
				t.Fatalf("without a failure: %d tokens, stop %q; want %d, %q", clean.GeneratedTokens, clean.StopReason, maxTokens, kakeya.StopLength)
			}
			for _, step := range []int{1, 2, 4} {
				be, inject, want := bc.open(t)
				e, res, pieces, err := generate(t, &failStep{Backend: be, step: step, inject: inject})
				if !errors.Is(err, want) {
					t.Fatalf("step %d failing: Generate returned %v, want an error wrapping %v", step, err, want)
				}
				// The failing step's logits were never sampled: the
				// tokens are those of the steps before it, a prefix of
				// the run without the failure.
				if res == nil || res.GeneratedTokens != step-1 || res.StopReason != "" {
					t.Fatalf("step %d failing: result %+v, want %d tokens and no stop reason", step, res, step-1)
				}
				if got := strings.Join(pieces, ""); got != res.Text || !strings.HasPrefix(clean.Text, got) {
					t.Errorf("step %d failing: text %q (result %q), want a prefix of %q", step, got, res.Text, clean.Text)
				}
				if _, _, err := e.Logits(context.Background(), "Once", kakeya.GenerateOptions{}); !errors.Is(err, want) {
					t.Errorf("step %d failing: the next call returned %v, want the sticky %v", step, err, want)
				}
			}
		})
	}
}

// The cache's Stats count what the CUDA store holds: a block of a codec
// the kernels read (int8) is compressed as on the CPU, one whose codec
// they cannot read (turbo) keeps its hot slot, holding the decoded values,
// and counts hot; the values read back are the CPU store's either way.
func TestStatsOfCUDAStore(t *testing.T) {
	const kvHeads, d, bs, tokens = 2, 64, 4, 22
	gpu, _ := newFakeBackend(t, Options{})
	cpu := cpubackend.New(1)
	t.Cleanup(func() { cpu.Close() })
	newCodec := func(name string) codec.Codec {
		cd, err := codec.Parse(name)
		if err != nil {
			t.Fatal(err)
		}
		return cd
	}
	pol := kvcache.Policy{HotBF16: true, HotWindow: 4, Layers: []kvcache.LayerCodecs{{K: []codec.Codec{newCodec("int8")}, V: newCodec("turbo")}}}
	x := randNormal(7, tokens*kvHeads*d)
	var caches [2]*kvcache.Cache
	for i, be := range []compute.Backend{gpu, cpu} {
		c, err := kvcache.New(kvcache.Config{Layers: 1, KVHeads: kvHeads, HeadDim: d, BlockSize: bs, MaxTokens: 32, Policy: pol,
			Store: be.NewBlockStore(bs, d, true)})
		if err != nil {
			t.Fatal(err)
		}
		buf := upload(be, x)
		if err := c.Append(0, buf, buf, tokens); err != nil {
			t.Fatal(err)
		}
		caches[i] = c
	}
	if err := gpu.Err(); err != nil {
		t.Fatal(err)
	}
	got, want := caches[0].Stats().Layers[0], caches[1].Stats().Layers[0]
	// 22 tokens in blocks of 4, the newest 4 hot: blocks 0..3 encoded.
	const encoded, hotPart = 4 * kvHeads, 2 * bs * d
	if want.VCompressed == 0 || want.KCompressed == 0 {
		t.Fatalf("CPU stats %+v: want K and V encoded", want)
	}
	if got.KHot != want.KHot || got.KCompressed != want.KCompressed {
		t.Errorf("int8 keys: CUDA holds %d hot + %d encoded bytes, CPU %d + %d", got.KHot, got.KCompressed, want.KHot, want.KCompressed)
	}
	if wantHot := want.VHot + encoded*hotPart; got.VHot != wantHot || got.VCompressed != 0 {
		t.Errorf("turbo values: CUDA holds %d hot + %d encoded bytes, want %d + 0", got.VHot, got.VCompressed, wantHot)
	}
	if wantBF16 := int64(encoded * hotPart); got.CompressedBF16 != wantBF16 {
		t.Errorf("CompressedBF16 %d, want %d (the keys alone)", got.CompressedBF16, wantBF16)
	}
	g, w := make([]float32, bs*d), make([]float32, bs*d)
	for b := range caches[0].NumBlocks(0) {
		for h := range kvHeads {
			for kv := range 2 {
				if err := caches[0].Read(g, 0, h, b, kv); err != nil {
					t.Fatal(err)
				}
				if err := caches[1].Read(w, 0, h, b, kv); err != nil {
					t.Fatal(err)
				}
				if dd := maxAbsDiff(g, w); dd != 0 {
					t.Fatalf("block %d head %d kv %d: CUDA reads back %.3g away from the CPU", b, h, kv, dd)
				}
			}
		}
	}
}
