package main

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kakeya-ai/kakeya/internal/cli"
)

// What a request is charged against --max-prompt-memory, by the bytes of
// its body: readBytesPerByte while the body is read and decoded (the body
// and the decoded strings), tokenizeBytesPerByte while its prompt is
// tokenized (the tokenizer's worst case, one long word of one token per
// byte, peaks near 55 bytes per byte of text; prose takes 3 to 18), and
// from then until it ends heldBytesPerByte and heldBytesPerToken (its
// text, and the token ids the engine holds).
const (
	readBytesPerByte     = 2
	tokenizeBytesPerByte = 64
	heldBytesPerByte     = 2
	heldBytesPerToken    = 8
)

// defaultPromptMemory returns --max-prompt-memory's default for a
// --max-body of maxBody: room to tokenize one body of the largest size.
func defaultPromptMemory(maxBody int64) int64 { return maxBody * tokenizeBytesPerByte }

// promptMemory counts the memory the requests' prompts take, from before
// their bodies are read (by Content-Length) until they end, against a
// limit: a request that would pass it is turned away with 429 (before
// its body is read, or before its prompt is tokenized), instead of every
// prompt being decoded and tokenized at once (tens of bytes per byte of
// text) and the server running out of memory. --max-waiting bounds how
// many requests wait; this bounds their bytes.
type promptMemory struct {
	limit int64

	mu   sync.Mutex
	used int64

	inUse    prometheus.Gauge
	rejected prometheus.Counter
}

// newPromptMemory returns a promptMemory of limit bytes, its metrics
// registered in reg.
func newPromptMemory(limit int64, reg prometheus.Registerer) *promptMemory {
	p := &promptMemory{
		limit: limit,
		inUse: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kakeya_prompt_memory_bytes",
			Help: "Memory charged to the prompts being read, tokenized, queued or run (an estimate from their sizes; see --max-prompt-memory).",
		}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kakeya_prompt_memory_rejected_total",
			Help: "Requests answered 429 because their prompt would have taken the prompt memory past --max-prompt-memory.",
		}),
	}
	max := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kakeya_prompt_memory_max_bytes",
		Help: "The prompt memory's limit (--max-prompt-memory).",
	})
	max.Set(float64(limit))
	reg.MustRegister(p.inUse, p.rejected, max)
	return p
}

// A promptCharge is one request's share of the prompt memory.
type promptCharge struct {
	p     *promptMemory
	bytes int64
}

// charge reserves the reading share of a body of size bytes, or returns
// the error to answer its request with (see grow).
func (p *promptMemory) charge(size int64) (*promptCharge, *apiError) {
	c := &promptCharge{p: p}
	if aerr := c.grow(size, readBytesPerByte); aerr != nil {
		return nil, aerr
	}
	return c, nil
}

// grow raises the charge to perByte bytes per byte of a body of size
// bytes, or returns the error to answer the request with: 413 when that
// alone is more than the whole limit, 429 while the other requests'
// prompts leave too little of it.
func (c *promptCharge) grow(size, perByte int64) *apiError {
	p, need := c.p, size*perByte
	if need <= c.bytes {
		return nil
	}
	if need > p.limit {
		p.rejected.Inc()
		return &apiError{status: http.StatusRequestEntityTooLarge,
			message: fmt.Sprintf("a request body of %d bytes needs about %s to read and tokenize, more than this server's prompt memory of %s (--max-prompt-memory): send a shorter prompt",
				size, cli.Bytes(need), cli.Bytes(p.limit)),
			typ: "invalid_request_error", code: "request_too_large"}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.used-c.bytes+need > p.limit {
		p.rejected.Inc()
		return &apiError{status: http.StatusTooManyRequests,
			message: fmt.Sprintf("the prompts in progress take %s of this server's prompt memory of %s (--max-prompt-memory), and this one needs about %s more: retry later",
				cli.Bytes(p.used), cli.Bytes(p.limit), cli.Bytes(need-c.bytes)),
			typ: "rate_limit_error", code: "prompt_memory_full"}
	}
	p.used += need - c.bytes
	p.inUse.Set(float64(p.used))
	c.bytes = need
	return nil
}

// resize lowers the charge to bytes (a tokenized prompt's share, see
// heldBytesPerByte), returning the rest.
func (c *promptCharge) resize(bytes int64) {
	if c == nil || bytes >= c.bytes {
		return
	}
	c.p.mu.Lock()
	c.p.used -= c.bytes - bytes
	c.p.inUse.Set(float64(c.p.used))
	c.p.mu.Unlock()
	c.bytes = bytes
}

// release returns the whole charge; it is safe to call more than once,
// and on nil.
func (c *promptCharge) release() { c.resize(0) }
