// Package scheduler serves many generation requests over one model at once:
// continuous batching over a shared, byte-budgeted KV block pool.
//
// Requests join and leave at step boundaries. Each step is one batched
// forward pass (model.Batch): a decode token for every running request
// that has its prompt in, then prompt chunks of the requests still
// prefilling, under a token budget per step, so every weight matrix is
// read once per step however many requests run.
//
// The bytes are the pool's: its ledger (kvcache.Ledger) answers whether a
// request fits and holds each running request's reservation, in the
// cache's real formats, with the prefix blocks it shares counted once; the
// scheduler only asks it and orders by its Policy. A request is admitted
// when the ledger can reserve its prompt plus a decode reserve; its prompt
// first reuses the cached blocks that already hold a prefix of it
// (kvcache.Pool's prefix sharing). Before every step each running request's
// reservation is extended to cover the step; when the ledger refuses, the
// last running request in the policy's order is preempted: its blocks and
// reservation go back to the pool and it is recomputed later, from the
// prefix its own finished blocks left cached. A step therefore never finds
// the pool full of bytes the ledger did not promise.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/model"
)

// Errors of Submit and of requests.
var (
	// ErrQueueFull is returned by Submit when Config.MaxWaiting requests
	// already wait to be admitted.
	ErrQueueFull = errors.New("scheduler: queue full")
	// ErrCanceled ends a request cancelled by Handle.Cancel.
	ErrCanceled = errors.New("scheduler: request cancelled")
)

// Defaults of Config's zero fields.
const (
	DefaultStepTokens    = 512
	DefaultMaxRunning    = 64
	DefaultMaxWaiting    = 1024
	DefaultDecodeReserve = 32
)

// Config sets up a Scheduler.
type Config struct {
	// Model runs the requests; the Scheduler does not close it.
	Model *model.Model
	// Cache is the KV cache of every request's sequence. Its Pool must
	// be nil: the Scheduler makes the pool, over a block store of the
	// model's backend.
	Cache model.SequenceOptions
	// KVMemory is the byte budget of the pool, hot and encoded blocks
	// together; it must hold at least one sequence of two tokens.
	KVMemory int64
	// StepTokens is the most tokens one step runs, decode tokens and
	// prompt chunks together: it bounds the activation scratch and the
	// latency a long prompt adds to the running requests' steps. 0 means
	// DefaultStepTokens.
	StepTokens int
	// MaxRunning bounds the requests admitted at once; 0 means
	// DefaultMaxRunning. It may not exceed StepTokens.
	MaxRunning int
	// MaxWaiting bounds the requests waiting for admission; Submit
	// returns ErrQueueFull beyond it. 0 means DefaultMaxWaiting.
	MaxWaiting int
	// DecodeReserve is how many generated tokens, beyond its prompt, a
	// request must find room for to be admitted, and how far ahead a
	// running request's room is kept; 0 means DefaultDecodeReserve.
	DecodeReserve int
	// Policy orders admission and preemption; nil means FCFS.
	Policy Policy

	// forward, when set (by this package's tests), runs a step in place
	// of the Batch's Forward, so that a test can fail a step after its
	// planning as a pool that ran out of bytes fails it.
	forward func(*model.Batch, []model.BatchItem) error
}

// A Request is a prompt to continue.
type Request struct {
	// Prompt holds the token ids to continue: at least one, and fewer
	// than the Scheduler's MaxTokens.
	Prompt []int
	// MaxNew is the most tokens to generate, at least 1. Where the
	// prompt leaves less room (MaxTokens), generation ends there with
	// EndContext.
	MaxNew int
	// Next picks the token that follows logits (vocab_size values, valid
	// during the call only); history holds the prompt and the tokens
	// picked so far. It runs between steps on one of the Scheduler's
	// sampling goroutines, concurrently with other requests' Next (never
	// with its own), so it must be quick, must not call the Scheduler and
	// must share no unsynchronized state with other requests. end says the
	// token ends the request without being part of its output (an
	// end-of-sequence token); an error fails the request.
	Next func(logits []float32, history []int) (id int, end bool, err error)
	// Pick, when set, replaces Next (which may then be nil) for a request
	// that always takes the most likely token, or with Draw a drawn one:
	// its steps ask the model for the greedy token
	// (model.BatchItem.Greedy), which a backend that picks on its device
	// hands back without the logits. id is the token, nonFinite the index
	// of the first NaN or ±Inf logit (-1 if none); end and err are as
	// Next's.
	Pick func(id, nonFinite int, history []int) (end bool, err error)
	// Draw, when set with Pick, makes the request's steps draw its token
	// at a temperature rather than take the greedy one
	// (model.BatchItem.Draw), on the device where the backend can
	// (model.Model.DeviceDraw), else on the host from the logits; Pick
	// then gets the drawn token. It returns the next token's draw and is
	// called on the loop goroutine for each planned step that picks the
	// request's next token; until Pick has taken a token it must return
	// the same draw, since a planned step may be dropped (a preemption)
	// and planned again.
	Draw func() model.DrawRow
	// Payload, if set, is called on the same goroutine right after
	// each call of Next that picked a token the request keeps (neither an
	// end nor an error), with that token; what it returns travels with
	// the token to Handle.TokensWith. A Next that works out more than the
	// id (log-probabilities, say) keeps it for Payload to hand over.
	Payload func(id int) any
	// Last, if set, is called on the same goroutine right after each
	// call of Next (or Pick) that picked a token the request keeps,
	// after Payload; true makes that token the output's last: the
	// request ends with EndToken once it is delivered, and no step runs
	// for it (a grammar that allows nothing after the token).
	Last func() bool
	// Priority orders the request under the priority policy
	// (PriorityPolicy): lower values are admitted first and preempted
	// last, equal ones in arrival order. FCFS ignores it.
	Priority int
}

// Why a request ended: the Reason of its Outcome.
const (
	EndToken   = "end"     // Next returned end
	EndLength  = "length"  // MaxNew tokens were generated
	EndContext = "context" // the sequence reached MaxTokens
)

// An Outcome is how a request ended.
type Outcome struct {
	// Reason is EndToken, EndLength or EndContext; "" when Err is set.
	Reason string
	// Err is the request's failure: its context's error, ErrCanceled,
	// Next's error, model.ErrClosed, or the forward step's error.
	Err error
	// Prompt and Generated count the prompt's tokens and those picked.
	Prompt, Generated int
	// Reused is the prompt tokens the request's last admission found in
	// the prefix cache instead of running them.
	Reused int
	// Preempted counts the times the request was preempted.
	Preempted int
	// Submitted, FirstToken and Finished time the request: its Submit,
	// its first picked token (zero if none) and its end.
	Submitted, FirstToken, Finished time.Time
	// KV is the size of the request's KV cache at its end.
	KV kvcache.Stats
}

// Stats is a snapshot of a Scheduler's state.
type Stats struct {
	// Running and Waiting count the requests admitted and those queued.
	Running, Waiting int
	// PeakRunning is the most requests that ran at once.
	PeakRunning int
	// Reserved is the pool bytes the ledger has committed to the running
	// requests: their reservations (each up to its next steps plus the
	// decode reserve) and the shared prefix blocks they reference, once
	// (kvcache.PoolStats.Reserved plus Shared).
	Reserved int64
	// Pool is the pool's accounting: bytes used and budget by format,
	// prefix-cache queries and hits, evictions.
	Pool kvcache.PoolStats
	// Steps, Admitted, Finished and Preemptions count forward steps,
	// admissions (re-admissions of preempted requests included),
	// requests ended, and preemptions.
	Steps, Admitted, Finished, Preemptions int64
	// MaxTokens is the longest sequence the pool can hold, prompt and
	// generated tokens together.
	MaxTokens int
}

// A Scheduler runs submitted requests in batched steps on one goroutine of
// its own. Its methods are safe for concurrent use.
type Scheduler struct {
	cfg     Config
	policy  Policy // cfg.Policy, or FCFS
	m       *model.Model
	pool    *kvcache.Pool
	ledger  *kvcache.Ledger // the pool's bytes for the requests' cache
	bt      *model.Batch
	maxToks int // the longest sequence the budget holds

	mu       sync.Mutex
	incoming []*Handle
	closed   bool
	stats    Stats // the counters, and a snapshot of Running/Waiting/Reserved
	wake     chan struct{}
	done     chan struct{}
	arrivals uint64

	// Owned by the loop goroutine.
	running  []*Handle // in the policy's order
	waiting  []*Handle // in the policy's order
	items    []model.BatchItem
	owners   []*Handle
	samplers *samplers // pick the step's tokens in parallel
}

// New checks cfg, makes the pool and starts the Scheduler's goroutine.
func New(cfg Config) (*Scheduler, error) {
	m := cfg.Model
	if m == nil {
		return nil, errors.New("scheduler: Config.Model is nil")
	}
	if cfg.Cache.Pool != nil {
		return nil, errors.New("scheduler: Config.Cache.Pool must be nil: the scheduler makes its pool")
	}
	if cfg.Policy == nil {
		cfg.Policy = FCFS{}
	}
	if cfg.StepTokens == 0 {
		cfg.StepTokens = DefaultStepTokens
	}
	if cfg.MaxRunning == 0 {
		cfg.MaxRunning = min(DefaultMaxRunning, cfg.StepTokens)
	}
	if cfg.MaxWaiting == 0 {
		cfg.MaxWaiting = DefaultMaxWaiting
	}
	if cfg.DecodeReserve == 0 {
		cfg.DecodeReserve = DefaultDecodeReserve
	}
	switch {
	case cfg.StepTokens < 0:
		return nil, fmt.Errorf("scheduler: step tokens %d, want > 0", cfg.StepTokens)
	case cfg.MaxRunning < 0 || cfg.MaxRunning > cfg.StepTokens:
		return nil, fmt.Errorf("scheduler: max running %d, want 1..%d (the step tokens)", cfg.MaxRunning, cfg.StepTokens)
	case cfg.MaxWaiting < 0:
		return nil, fmt.Errorf("scheduler: max waiting %d, want > 0", cfg.MaxWaiting)
	case cfg.DecodeReserve < 0:
		return nil, fmt.Errorf("scheduler: decode reserve %d, want > 0", cfg.DecodeReserve)
	case cfg.KVMemory <= 0:
		return nil, fmt.Errorf("scheduler: KV memory %d bytes, want > 0", cfg.KVMemory)
	}
	shape := m.CacheShape()
	bs := cfg.Cache.BlockSize
	if bs == 0 {
		bs = m.BlockSize()
	}
	pool, err := kvcache.NewPool(kvcache.PoolConfig{
		Store:     m.Backend().NewBlockStore(bs, shape.HeadDim, cfg.Cache.Cache.HotBF16),
		BlockSize: bs, HeadDim: shape.HeadDim, HotBF16: cfg.Cache.Cache.HotBF16, Budget: cfg.KVMemory,
	})
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	cfg.Cache.Pool = pool
	cfg.Cache.BlockSize = bs
	cfg.Cache.StepTokens = cfg.StepTokens
	// The ledger sizes the very caches the sequences get (a sliding
	// layer holds its window's blocks plus one step's).
	kc, err := m.CacheConfig(cfg.Cache)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	ledger, err := kvcache.NewLedger(kc)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	s := &Scheduler{cfg: cfg, policy: cfg.Policy, m: m, pool: pool, ledger: ledger, maxToks: ledger.MaxTokens(), wake: make(chan struct{}, 1), done: make(chan struct{})}
	if kc.MaxTokens < 2 {
		return nil, fmt.Errorf("scheduler: a %d-token context holds no sequence of 2 tokens (a prompt token and a generated one): raise the context", kc.MaxTokens)
	}
	if s.maxToks < 2 {
		return nil, fmt.Errorf("scheduler: KV memory of %d bytes holds no sequence of 2 tokens (%d bytes) in this cache", cfg.KVMemory, ledger.Cost(2))
	}
	if s.bt, err = m.NewBatch(cfg.StepTokens); err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	s.stats.MaxTokens = s.maxToks
	s.samplers = newSamplers(s)
	go s.loop()
	return s, nil
}

// MaxTokens returns the longest sequence, prompt and generated tokens
// together, the pool's budget holds (at most the model's context).
func (s *Scheduler) MaxTokens() int { return s.maxToks }

// Pool returns the scheduler's block pool.
func (s *Scheduler) Pool() *kvcache.Pool { return s.pool }

// Ledger returns the pool's ledger for the requests' cache.
func (s *Scheduler) Ledger() *kvcache.Ledger { return s.ledger }

// Stats returns a snapshot of the scheduler's state.
func (s *Scheduler) Stats() Stats {
	s.mu.Lock()
	st := s.stats
	st.Waiting += len(s.incoming)
	s.mu.Unlock()
	st.Pool = s.pool.Stats()
	return st
}

// Submit queues r and returns its Handle. It fails at once, with an error
// that says why, when r is malformed, its prompt can never fit the pool or
// the context, the queue is full or the Scheduler is closed (an error
// matching model.ErrClosed). Cancelling ctx, or Handle.Cancel, ends the
// request at the next step boundary and frees its blocks.
func (s *Scheduler) Submit(ctx context.Context, r Request) (*Handle, error) {
	switch {
	case len(r.Prompt) == 0:
		return nil, errors.New("scheduler: request with an empty prompt")
	case r.MaxNew < 1:
		return nil, fmt.Errorf("scheduler: request to generate %d tokens, want >= 1", r.MaxNew)
	case r.Next == nil && r.Pick == nil:
		return nil, errors.New("scheduler: request without a Next or Pick function")
	case len(r.Prompt) >= s.maxToks:
		if s.maxToks < s.m.MaxContext() {
			return nil, fmt.Errorf("scheduler: a prompt of %d tokens and one generated token need %d bytes of KV cache; the KV memory is %d bytes (it holds %d tokens)",
				len(r.Prompt), s.ledger.Cost(len(r.Prompt)+1), s.cfg.KVMemory, s.maxToks)
		}
		return nil, fmt.Errorf("scheduler: %w", &model.ContextError{Tokens: len(r.Prompt), Context: s.m.MaxContext(), Limit: s.m.ContextLimit(), Generate: true})
	}
	vocab := s.m.Config().VocabSize
	for i, id := range r.Prompt {
		if id < 0 || id >= vocab {
			return nil, fmt.Errorf("scheduler: prompt token %d is id %d, outside [0, %d)", i, id, vocab)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h := &Handle{s: s, req: r, ctx: ctx, notify: make(chan struct{}, 1), maxTotal: min(s.maxToks, len(r.Prompt)+r.MaxNew)}
	h.out.Submitted = time.Now()
	h.out.Prompt = len(r.Prompt)
	h.history = append(make([]int, 0, h.maxTotal), r.Prompt...)
	h.stopWake = context.AfterFunc(ctx, s.poke)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		h.stopWake()
		return nil, fmt.Errorf("scheduler: %w", model.ErrClosed)
	}
	if s.stats.Waiting+len(s.incoming) >= s.cfg.MaxWaiting {
		s.mu.Unlock()
		h.stopWake()
		return nil, fmt.Errorf("%w: %d requests wait", ErrQueueFull, s.cfg.MaxWaiting)
	}
	s.arrivals++
	h.arrival = s.arrivals
	s.incoming = append(s.incoming, h)
	s.mu.Unlock()
	s.poke()
	return h, nil
}

// poke wakes the loop.
func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Close ends every request with an error matching model.ErrClosed, frees
// their blocks and stops the Scheduler's goroutine, after the step in
// flight. The model stays open. Closing twice is harmless.
func (s *Scheduler) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.poke()
	<-s.done
}

// A Handle is a submitted request: the tokens it generates as they come,
// and how it ended.
type Handle struct {
	s        *Scheduler
	req      Request
	draw     model.DrawRow // the planned step's draw (Request.Draw)
	ctx      context.Context
	arrival  uint64
	stopWake func() bool
	canceled atomic.Bool
	notify   chan struct{} // a token or the end is ready

	mu       sync.Mutex
	tokens   []int // generated, not yet taken by Tokens
	payloads []any // Request.Payload's values of tokens, when it is set
	ended    bool
	out      Outcome

	// Owned by the loop goroutine.
	seq      *model.Sequence
	history  []int // the prompt and the tokens picked
	maxTotal int   // the sequence's length at most
}

// Cancel ends the request at the next step boundary with ErrCanceled (if
// it has not ended already), freeing its blocks.
func (h *Handle) Cancel() {
	h.canceled.Store(true)
	h.s.poke()
}

// Tokens waits until the request has generated tokens not yet returned, or
// has ended, and returns those tokens; done reports that the request
// ended and every token was returned (see Outcome). It returns ctx's error
// if ctx ends first.
func (h *Handle) Tokens(ctx context.Context) (ids []int, done bool, err error) {
	ids, _, done, err = h.TokensWith(ctx)
	return ids, done, err
}

// TokensWith is Tokens that also returns the value Request.Payload gave
// each token: payloads[i] goes with ids[i]. payloads is nil when the
// request has no Payload.
func (h *Handle) TokensWith(ctx context.Context) (ids []int, payloads []any, done bool, err error) {
	for {
		h.mu.Lock()
		ids, payloads, done = h.tokens, h.payloads, h.ended
		h.tokens, h.payloads = nil, nil
		h.mu.Unlock()
		if len(ids) > 0 || done {
			return ids, payloads, done, nil
		}
		select {
		case <-h.notify:
		case <-ctx.Done():
			return nil, nil, false, ctx.Err()
		}
	}
}

// Outcome returns how the request ended; ok is false while it runs.
func (h *Handle) Outcome() (o Outcome, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.out, h.ended
}

// deliver passes a picked token, and its payload (Request.Payload's value,
// made when it was sampled; nil without one), on to the caller.
func (h *Handle) deliver(id int, p any) {
	h.mu.Lock()
	h.tokens = append(h.tokens, id)
	if h.req.Payload != nil {
		h.payloads = append(h.payloads, p)
	}
	h.out.Generated++
	if h.out.FirstToken.IsZero() {
		h.out.FirstToken = time.Now()
	}
	h.mu.Unlock()
	h.signal()
}

func (h *Handle) signal() {
	select {
	case h.notify <- struct{}{}:
	default:
	}
}

// end records how the request ended; the loop has freed its sequence.
func (h *Handle) end(reason string, err error, kv kvcache.Stats) {
	h.stopWake()
	h.mu.Lock()
	h.out.Reason, h.out.Err, h.out.KV, h.out.Finished = reason, err, kv, time.Now()
	if err != nil {
		h.out.Reason = ""
	}
	h.ended = true
	h.mu.Unlock()
	h.signal()
}

// loop runs steps until Close.
func (s *Scheduler) loop() {
	defer close(s.done)
	defer s.samplers.close()
	for {
		s.mu.Lock()
		closed := s.closed
		for _, h := range s.incoming {
			s.waiting = s.insert(s.waiting, h)
		}
		s.incoming = s.incoming[:0]
		// Submit bounds Waiting plus incoming: count the moved ones now.
		s.stats.Waiting = len(s.waiting)
		s.mu.Unlock()
		if closed {
			s.failAll(fmt.Errorf("scheduler: %w", model.ErrClosed))
			return
		}
		s.dropCanceled()
		if !s.plan() {
			s.publish()
			<-s.wake
			continue
		}
		s.step()
		s.publish()
	}
}

// publish copies the loop's state into the stats snapshot.
func (s *Scheduler) publish() {
	s.mu.Lock()
	s.publishLocked()
	s.mu.Unlock()
}

// publishLocked is publish with s.mu held.
func (s *Scheduler) publishLocked() {
	s.stats.Running, s.stats.Waiting, s.stats.Reserved = len(s.running), len(s.waiting), s.pool.Committed()
	s.stats.PeakRunning = max(s.stats.PeakRunning, len(s.running))
}

// count adds to the counters under the lock.
func (s *Scheduler) count(f func(*Stats)) {
	s.mu.Lock()
	f(&s.stats)
	s.mu.Unlock()
}

// dropCanceled ends the requests whose context ended or that were
// cancelled.
func (s *Scheduler) dropCanceled() {
	var ended []*Handle
	var errs []error
	for _, list := range []*[]*Handle{&s.running, &s.waiting} {
		*list = slices.DeleteFunc(*list, func(h *Handle) bool {
			err := h.ctx.Err()
			if err == nil && h.canceled.Load() {
				err = ErrCanceled
			}
			if err != nil {
				ended, errs = append(ended, h), append(errs, err)
			}
			return err != nil
		})
	}
	for i, h := range ended {
		s.finish(h, "", errs[i])
	}
}

// failAll ends every request with err.
func (s *Scheduler) failAll(err error) {
	all := append(s.running, s.waiting...)
	s.running, s.waiting = nil, nil
	for _, h := range all {
		s.finish(h, "", err)
	}
}

// finish frees the sequence of h, and with it its reservation, which the
// caller took out of its list, and records its end: the stats say so
// before h's caller learns it ended.
func (s *Scheduler) finish(h *Handle, reason string, err error) {
	var kv kvcache.Stats
	if h.seq != nil {
		kv = h.seq.KVStats()
		h.seq.Close()
		h.seq = nil
	}
	s.mu.Lock()
	s.stats.Finished++
	s.publishLocked()
	s.mu.Unlock()
	h.end(reason, err, kv)
}

// target returns the length h's reservation covers once it holds n
// tokens: n plus the decode reserve, within its most tokens.
func (s *Scheduler) target(h *Handle, n int) int {
	return min(n+s.cfg.DecodeReserve, h.maxTotal)
}

// claim has the ledger extend h's reservation to a sequence of n tokens
// plus the decode reserve, preempting the last running requests in the
// policy's order while it refuses; it reports false when h left the
// running requests: preempted itself (or, running alone, it can grow no
// further), or failed.
func (s *Scheduler) claim(h *Handle, n int) bool {
	for {
		err := h.seq.Reserve(s.ledger, s.target(h, n))
		if err == nil {
			return true
		}
		if !errors.Is(err, kvcache.ErrPoolFull) {
			s.remove(h, "", fmt.Errorf("scheduler: %w", err))
			return false
		}
		v := s.running[len(s.running)-1]
		s.preempt(v)
		if v == h {
			return false
		}
	}
}

// preempt frees the blocks of running request v and queues it again, first
// among the waiting (they arrived after it); it recomputes its history on
// readmission.
func (s *Scheduler) preempt(v *Handle) {
	s.running = slices.DeleteFunc(s.running, func(h *Handle) bool { return h == v })
	if i := slices.Index(s.owners, v); i >= 0 {
		s.owners = slices.Delete(s.owners, i, i+1)
		s.items = slices.Delete(s.items, i, i+1)
	}
	v.seq.Close() // its blocks and its reservation go back
	v.seq = nil
	s.waiting = s.insert(s.waiting, v)
	v.mu.Lock()
	v.out.Preempted++
	v.mu.Unlock()
	s.count(func(st *Stats) { st.Preemptions++ })
}

// plan fills the step's items: a decode token for each running request
// whose history is in, then prompt chunks of those prefilling, oldest
// first, then newly admitted requests' first chunks, all under the token
// budget and each within its claim on the pool. It reports false when
// there is nothing to run.
func (s *Scheduler) plan() bool {
	s.items, s.owners = s.items[:0], s.owners[:0]
	budget := s.cfg.StepTokens
	add := func(h *Handle) bool {
		n := min(len(h.history)-h.seq.Len(), budget)
		if n == 0 {
			return true
		}
		if !s.claim(h, h.seq.Len()+n) {
			return false
		}
		it := model.BatchItem{Seq: h.seq, IDs: h.history[h.seq.Len() : h.seq.Len()+n], Greedy: h.req.Pick != nil}
		if it.Greedy && h.req.Draw != nil && h.seq.Len()+n == len(h.history) {
			// The chunk picks the next token: drawn. (A chunk with more
			// to come stays Greedy: its token goes unused, and the step
			// may still pick on the device.)
			h.draw = h.req.Draw()
			it.Greedy, it.Draw = false, &h.draw
		}
		s.items = append(s.items, it)
		s.owners = append(s.owners, h)
		budget -= n
		return true
	}
	// Decodes first: a running request waits for no prompt. (claim may
	// preempt requests later in s.running, so iterate by arrival.)
	for _, prefilling := range []bool{false, true} {
		for i := 0; i < len(s.running); i++ {
			h := s.running[i]
			if (len(h.history)-h.seq.Len() > 1) != prefilling {
				continue
			}
			if !add(h) {
				i-- // h left s.running
			}
		}
	}
	for budget > 0 && len(s.waiting) > 0 && len(s.running) < s.cfg.MaxRunning {
		h := s.waiting[0]
		n := s.target(h, len(h.history))
		if !s.ledger.Admits(h.history, n) {
			break // it waits for bytes, in the policy's order
		}
		if err := s.admit(h, n); err != nil {
			if errors.Is(err, kvcache.ErrPoolFull) {
				break // the prefix it was to share went meanwhile: it waits
			}
			s.waiting = s.waiting[1:]
			s.finish(h, "", err)
			continue
		}
		s.waiting = s.waiting[1:]
		s.running = s.insert(s.running, h)
		if !add(h) {
			break
		}
	}
	if len(s.items) == 0 && len(s.running) == 0 && len(s.waiting) > 0 {
		// Nothing runs and the first request cannot be admitted: with
		// nothing committed, only blocks that outgrew their estimate
		// get here; fail it rather than wait for ever.
		h := s.waiting[0]
		s.waiting = s.waiting[1:]
		s.finish(h, "", fmt.Errorf("scheduler: %w: the pool cannot hold a sequence of %d tokens", kvcache.ErrPoolFull, len(h.history)))
		return s.plan()
	}
	return len(s.items) > 0
}

// admit gives h a pooled sequence starting with the cached blocks that
// hold a prefix of its history, and reserves for n tokens: an error
// matching kvcache.ErrPoolFull if the ledger cannot.
func (s *Scheduler) admit(h *Handle, n int) error {
	seq, err := s.m.NewSequenceOpts(s.cfg.Cache)
	if err != nil {
		return err
	}
	reused, err := seq.AttachPrefix(h.history)
	if err == nil {
		err = seq.Reserve(s.ledger, n)
	}
	if err != nil {
		seq.Close()
		return err
	}
	h.seq = seq
	h.mu.Lock()
	h.out.Reused = reused
	h.mu.Unlock()
	s.count(func(st *Stats) { st.Admitted++ })
	return nil
}

// step runs the planned items and hands each request whose history is in
// the token Next picks.
func (s *Scheduler) step() {
	var err error
	if f := s.cfg.forward; f != nil {
		err = f(s.bt, s.items)
	} else {
		err = s.bt.Forward(s.items)
	}
	s.count(func(st *Stats) { st.Steps++ })
	if err != nil {
		s.stepFailed(err)
		return
	}
	sp := s.samplers
	sp.rows = sp.rows[:0]
	for i := range s.items {
		if h := s.owners[i]; h.seq.Len() == len(h.history) {
			sp.rows = append(sp.rows, i) // not a prompt chunk with more to come
		}
	}
	sp.run()
	for j, i := range sp.rows {
		h, pk := s.owners[i], sp.picks[j]
		switch {
		case pk.err != nil:
			s.remove(h, "", pk.err)
		case pk.end:
			s.remove(h, EndToken, nil)
		default:
			h.history = append(h.history, pk.id)
			h.deliver(pk.id, pk.pay)
			switch {
			case pk.last:
				s.remove(h, EndToken, nil)
			case len(h.history)-len(h.req.Prompt) >= h.req.MaxNew:
				s.remove(h, EndLength, nil)
			case len(h.history) >= h.maxTotal:
				s.remove(h, EndContext, nil)
			}
		}
	}
	clear(sp.picks) // hold no payload past the step
}

// remove ends running request h.
func (s *Scheduler) remove(h *Handle, reason string, err error) {
	s.running = slices.DeleteFunc(s.running, func(r *Handle) bool { return r == h })
	s.finish(h, reason, err)
}

// stepFailed handles a failed step: every sequence in it is unusable. A
// pool that ran out of bytes preempts them, to be recomputed: the ledger's
// reservations rule that out unless real blocks outgrew their estimate (a
// variable-size codec's block beyond the margin). Any other failure ends
// them with it.
func (s *Scheduler) stepFailed(err error) {
	owners := slices.Clone(s.owners)
	if errors.Is(err, kvcache.ErrPoolFull) && len(owners) > 1 {
		for _, h := range owners {
			s.preempt(h)
		}
		return
	}
	for _, h := range owners {
		s.remove(h, "", err)
	}
}
