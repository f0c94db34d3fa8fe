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
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	"github.com/kakeya-ai/kakeya/compute/reference"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/model"
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
		e, err := kakeya.Load(context.Background(), dir, kakeya.Options{Model: model.Options{Backend: be}, Cache: kvcache.Spec{CacheType: "f32"}})
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
