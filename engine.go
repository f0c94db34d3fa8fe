package kakeya

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/scheduler"
	"github.com/kakeya-ai/kakeya/tokenizer"
	"github.com/kakeya-ai/kakeya/weights"
)

// ErrClosed is model.ErrClosed, re-exported for the Engine's users: after
// Close, the Engine's methods that return an error return one matching it
// (test with errors.Is(err, ErrClosed) or errors.Is(err, model.ErrClosed)).
var ErrClosed = model.ErrClosed

// ErrQueueFull is matched (errors.Is) by the error of a Generate call that
// found ServingOptions.MaxWaiting requests waiting already.
var ErrQueueFull = scheduler.ErrQueueFull

// Options configure Load. The zero value runs on all cores with an
// uncompressed bf16 cache and resolves Hugging Face ids under the HF_*
// environment, as the tools do.
type Options struct {
	// Backend runs the forward pass; nil means a CPU backend of Threads
	// threads and MatMul precision, which Close stops. A Backend given
	// here stays the caller's.
	Backend compute.Backend
	// Threads is the number of compute threads of the default CPU backend;
	// 0 means GOMAXPROCS (see cpubackend.MaxThreads for the bound).
	Threads int
	// MatMul is the precision of the activations the default CPU backend
	// multiplies bf16 weights by: "" (bf16, llama.cpp's arithmetic) or
	// "f32" (exact); see cpubackend.NewMatMul.
	MatMul string
	// MaxContext caps the tokens a sequence may hold; 0 means the model's
	// max_position_embeddings, at most model.DefaultMaxContext. It may
	// exceed max_position_embeddings only as far as config.json's
	// rope_scaling extends the context.
	MaxContext int
	// Weights, when set (q8_0, q4_0, q5_0, q4_k, q5_k, q6_k or bf16),
	// quantizes the F32, F16 and BF16 matrices as they load; "" keeps
	// every tensor in its stored type.
	Weights string
	// Hub says how a Hugging Face id is resolved and fetched; fields left
	// zero come from the environment (see weights.HubOptionsFromEnv).
	Hub weights.HubOptions
	// Cache is the KV cache of every sequence, in the terms of the tools'
	// flags, e.g. kvconfig.Spec{KV: "kakeya"} (the preset) or
	// kvconfig.Spec{KV: "kakeya-block", KBits: 3}, or as
	// kvconfig.Parse reads it; its zero value is an uncompressed bf16
	// cache. Load checks it once, before it loads anything.
	Cache kvconfig.Spec
	// Calibration is a file written by kakeya-eval calibrate: with it, a
	// compressed cache preconditions keys and uses its codebooks (see
	// kvconfig.Spec's Precondition and Codebooks), and kakeya-pc and kvtc
	// codecs take its principal components. "" for none: a cache whose
	// codecs need principal components (the kakeya preset,
	// kvconfig.Spec{KV: "kakeya"}) is then calibrated automatically, see
	// CalibrationCache.
	Calibration string
	// CalibrationCache is the directory of automatic calibrations: when
	// the cache needs principal components and Calibration is "", Load
	// reads this model's calibration from there, or makes it on
	// CalibrationTokens tokens of the built-in text (calibrate.Text) and
	// writes it there, logging how long it took. "" means
	// DefaultCalibrationCache(). A directory that cannot be written leaves
	// the calibration in memory, with a warning.
	CalibrationCache string
	// CalibrationTokens bounds an automatic calibration's text in tokens;
	// 0 means DefaultCalibrationTokens.
	CalibrationTokens int
	// CalibrationProgress, if set, is told how far an automatic
	// calibration that runs (not one read from the cache) has got, in
	// tokens of its text run and in all: once before its first window
	// (done 0) and after each window, the last with done == total.
	CalibrationProgress func(done, total int)
	// Log receives the automatic calibration's lines (Info: calibrated, in
	// how long, to which file; Warn: a cache file replaced or not
	// written); nil means slog.Default().
	Log *slog.Logger
	// KVMemory is the byte budget of the KV block pool every sequence
	// shares, hot and encoded blocks together; 0 means half the memory
	// available when Load runs (see DefaultKVMemory). The longest
	// sequence is what the budget holds, at most the context.
	KVMemory int64
	// Serving tunes the batching of concurrent Generate calls; its zero
	// fields take the defaults.
	Serving ServingOptions
}

// ServingOptions tune how the engine batches concurrent Generate calls
// (see Serving in docs/architecture.md); zero fields take the defaults.
type ServingOptions struct {
	// StepTokens is the most tokens one step runs, decode tokens and
	// prompt chunks together; 0 means 512.
	StepTokens int
	// MaxRunning bounds the requests running at once; 0 means 64. It may
	// not exceed StepTokens.
	MaxRunning int
	// MaxWaiting bounds the requests waiting for admission; Generate
	// fails with an error matching ErrQueueFull beyond it. 0 means 1024.
	MaxWaiting int
	// DecodeReserve is how many generated tokens beyond its prompt a
	// request must find room for to be admitted; 0 means 32.
	DecodeReserve int
	// Scheduling orders admission and preemption: "fcfs" (or "", first
	// come, first served) or "priority" (GenerateOptions.Priority, lower
	// first, as vLLM's --scheduling-policy priority).
	Scheduling string
}

// An Engine is a loaded model with its tokenizer: the embedding API for
// programs that generate text. Its methods may be called from several
// goroutines; each Generate call runs its own sequence. After Close, the
// methods that return an error return one matching ErrClosed
// (model.ErrClosed). Concurrent Generate calls are batched: each step of
// the engine's scheduler runs every matrix product once over all of them.
type Engine struct {
	model  *model.Model
	tok    *tokenizer.Tokenizer
	dir    string
	calib  CalibrationInfo
	caches *Caches               // assembled seq's cache; more on request
	seq    model.SequenceOptions // the cache of every sequence
	cache  kvconfig.Settings     // what seq's cache is, in the tools' terms
	sched  *scheduler.Scheduler  // runs every Generate call
	policy scheduler.Policy      // sched's order
	ownB   compute.Backend       // the backend Load started, nil if given
	once   sync.Once             // closes ownB once

	grammars grammars // structured output's vocabulary trie and masks
}

// Load loads a model and its tokenizer from a local directory or a Hugging
// Face id (resolved through the HF cache, downloading it when allowed).
func Load(ctx context.Context, nameOrDir string, opt Options) (*Engine, error) {
	if opt.CalibrationTokens < 0 {
		return nil, fmt.Errorf("kakeya: Options: CalibrationTokens %d, want > 0 (or 0 for the default)", opt.CalibrationTokens)
	}
	if opt.KVMemory < 0 {
		return nil, fmt.Errorf("kakeya: Options: KV memory %d bytes, want > 0 (or 0 for the default)", opt.KVMemory)
	}
	if opt.Backend != nil && (opt.Threads != 0 || opt.MatMul != "") {
		return nil, fmt.Errorf("kakeya: Options: Threads and MatMul apply to the default CPU backend, not to a given one (%s)", opt.Backend.Name())
	}
	spec, err := opt.Cache.Check()
	if err != nil {
		return nil, fmt.Errorf("kakeya: cache: %w", err)
	}
	policy, err := scheduler.NewPolicy(opt.Serving.Scheduling)
	if err != nil {
		return nil, fmt.Errorf("kakeya: Options.Serving.Scheduling: %w", err)
	}
	dir, err := weights.Resolve(ctx, nameOrDir, opt.Hub)
	if err != nil {
		return nil, err
	}
	tok, err := LoadTokenizer(dir)
	if err != nil {
		return nil, err
	}
	b, own := opt.Backend, compute.Backend(nil)
	if b == nil {
		cpu, err := cpubackend.NewMatMul(opt.Threads, opt.MatMul)
		if err != nil {
			return nil, fmt.Errorf("kakeya: %w", err)
		}
		b, own = cpu, cpu
	}
	m, err := model.Load(dir, model.Options{Backend: b, MaxContext: opt.MaxContext, Weights: opt.Weights})
	if err != nil {
		if own != nil {
			own.Close()
		}
		return nil, err
	}
	e := &Engine{model: m, tok: tok, dir: dir, ownB: own, policy: policy}
	if err := e.setCache(ctx, spec, opt); err != nil {
		e.Close()
		return nil, err
	}
	sv := scheduler.Config{
		Model: m, Cache: e.seq, KVMemory: opt.KVMemory,
		StepTokens: opt.Serving.StepTokens, MaxRunning: opt.Serving.MaxRunning,
		MaxWaiting: opt.Serving.MaxWaiting, DecodeReserve: opt.Serving.DecodeReserve,
		Policy: policy,
	}
	if sv.KVMemory == 0 {
		sv.KVMemory = DefaultKVMemory()
	}
	if e.sched, err = scheduler.New(sv); err != nil {
		e.Close()
		return nil, fmt.Errorf("kakeya: %w", err)
	}
	return e, nil
}

// setCache checks the tokenizer against the model and sets the cache of
// the engine's sequences: spec's cache as the model's Caches assemble it,
// with the calibration file opt names or an automatic calibration on the
// engine's own model when the codecs need principal components.
func (e *Engine) setCache(ctx context.Context, spec kvconfig.Checked, opt Options) error {
	m := e.model
	if v := m.Config().VocabSize; e.tok.VocabSize() > v {
		return fmt.Errorf("kakeya: %s: tokenizer has %d tokens but the model's vocab_size is %d", e.dir, e.tok.VocabSize(), v)
	}
	cs, err := NewCaches(m, opt)
	if err != nil {
		return err
	}
	cs.tok = e.tok
	seq, st, info, err := cs.cache(ctx, spec)
	if err != nil {
		return err
	}
	if _, needPCA, _ := kvplan.NeedsPCA(spec, m.CacheShape().MaxContext); opt.Calibration != "" && !st.Precondition && !st.Codebooks && !needPCA {
		return fmt.Errorf("kakeya: calibration %s: the cache (%s) uses neither its query factors (keys uncompressed or precond off), its codebooks nor its principal components", opt.Calibration, st)
	}
	e.seq, e.cache, e.calib, e.caches = seq, st, info, cs
	return nil
}

// Caches returns the engine's cache assembler: other cache specs on the
// engine's model, with the engine's calibration options (an automatic
// calibration Load made is reused for the same block size). The tools
// compare caches through it.
func (e *Engine) Caches() *Caches { return e.caches }

// CacheSettings returns the KV cache of the engine's sequences: its Spec
// with the defaults applied for this model.
func (e *Engine) CacheSettings() kvconfig.Settings { return e.cache }

// Calibration returns the calibration file in use, "" for none (and for
// an automatic calibration kept in memory).
func (e *Engine) Calibration() string { return e.calib.Path }

// CalibrationInfo says where the calibration in use came from: the file
// given, or an automatic calibration read from or written to the cache.
func (e *Engine) CalibrationInfo() CalibrationInfo { return e.calib }

// Model returns the loaded model, for this repository's own tools, which
// drive its sequences directly (kakeya-bench, kakeya-eval). It hands out
// package model's type, whose API may change with the engine's: a program
// uses ModelInfo, Encode, Decode, Generate and Logits instead.
func (e *Engine) Model() *model.Model { return e.model }

// Stats returns a snapshot of the engine's serving state: requests running
// and waiting, the KV block pool's bytes by format and budget, its
// prefix-cache queries and hits, preemptions.
func (e *Engine) Stats() scheduler.Stats { return e.sched.Stats() }

// MaxTokens returns the longest sequence, prompt and generated tokens
// together, that Generate can run: the context, or less where the KV
// memory holds fewer tokens.
func (e *Engine) MaxTokens() int { return e.sched.MaxTokens() }

// Dir returns the local directory the model was loaded from.
func (e *Engine) Dir() string { return e.dir }

// Kernels describes the compute kernels the model runs on: the backend's
// compute.Describer text, for example "avx2+fma (GOEXPERIMENT=simd), ...
// (cgo); matmuls: bf16 weights x bf16 activations" on the CPU (its
// kernels' features and the products the weights get), or a GPU's name
// and GEMM path; the backend's name if it does not describe itself.
func (e *Engine) Kernels() string {
	b := e.model.Backend()
	if d, ok := b.(compute.Describer); ok {
		return d.Describe()
	}
	return b.Name()
}

// Close releases the model's memory maps and workers, after waiting for the
// forward passes in flight: a Generate running meanwhile ends with an error
// matching ErrClosed. Closing twice is not an error.
func (e *Engine) Close() error {
	if e.sched != nil {
		e.sched.Close()
	}
	err := e.model.Close()
	e.once.Do(func() {
		if e.ownB == nil {
			return
		}
		if berr := e.ownB.Close(); err == nil {
			err = berr
		}
	})
	return err
}
