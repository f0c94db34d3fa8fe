package scheduler

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// maxSamplers bounds the goroutines that pick a step's tokens.
const maxSamplers = 8

// A rowPick is what sampling one row of a step decided.
type rowPick struct {
	id   int
	end  bool
	err  error
	pay  any  // Request.Payload's value for a kept token
	last bool // Request.Last's for a kept token
}

// samplers pick the tokens of a step's rows off the loop goroutine: each
// row's Request.Next (or Pick, then Payload) runs on one of a few
// goroutines started with the Scheduler, the loop taking rows too, so
// that a batch's rows are sampled in parallel; the loop then applies the
// picks in row order. Rows belong to different requests, whose Next
// functions share nothing.
type samplers struct {
	s       *Scheduler
	work    chan struct{} // one send per helper per step
	wg      sync.WaitGroup
	next    atomic.Int64 // the next row to take
	rows    []int        // the step's rows to sample, indexes into s.items
	picks   []rowPick    // by index into rows
	stop    chan struct{}
	helpers int // goroutines started
}

// newSamplers starts helpers-1 helper goroutines (the loop is the other).
func newSamplers(s *Scheduler) *samplers {
	p := &samplers{s: s, work: make(chan struct{}), stop: make(chan struct{})}
	p.helpers = min(runtime.GOMAXPROCS(0), maxSamplers) - 1
	for range p.helpers {
		go p.helper()
	}
	return p
}

func (p *samplers) helper() {
	for {
		select {
		case <-p.work:
			p.take()
			p.wg.Done()
		case <-p.stop:
			return
		}
	}
}

// close stops the helpers.
func (p *samplers) close() { close(p.stop) }

// take samples rows until none is left.
func (p *samplers) take() {
	for {
		i := int(p.next.Add(1)) - 1
		if i >= len(p.rows) {
			return
		}
		p.picks[i] = p.s.sampleRow(p.rows[i])
	}
}

// run samples p.rows into p.picks, on the helpers and the caller.
func (p *samplers) run() {
	if cap(p.picks) < len(p.rows) {
		p.picks = make([]rowPick, len(p.rows), cap(p.rows))
	}
	p.picks = p.picks[:len(p.rows)]
	p.next.Store(0)
	n := max(0, min(p.helpers, len(p.rows)-1))
	p.wg.Add(n)
	for range n {
		p.work <- struct{}{}
	}
	p.take()
	p.wg.Wait()
}

// sampleRow picks the token of step row i, whose request's history is in.
func (s *Scheduler) sampleRow(i int) rowPick {
	it, h := &s.items[i], s.owners[i]
	var pk rowPick
	if it.Greedy || it.Draw != nil {
		pk.id = it.Token
		pk.end, pk.err = h.req.Pick(pk.id, it.NonFinite, h.history)
	} else {
		pk.id, pk.end, pk.err = h.req.Next(it.Logits, h.history)
	}
	if pk.err == nil && !pk.end && h.req.Payload != nil {
		pk.pay = h.req.Payload(pk.id)
	}
	if pk.err == nil && !pk.end && h.req.Last != nil {
		pk.last = h.req.Last()
	}
	return pk
}
