package weights

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"
)

// timeoutError says which part of an HTTP exchange took too long.
type timeoutError struct {
	phase phase
	host  string // host:port being talked to
	limit time.Duration
}

type phase int

const (
	phaseConnect phase = iota // dialing and the TLS handshake
	phaseHeaders              // waiting for the response headers
	phaseBody                 // waiting for more of the body
)

func (e *timeoutError) Error() string {
	switch e.phase {
	case phaseConnect:
		return fmt.Sprintf("could not connect to %s within %v (TCP connect and TLS handshake)", e.host, e.limit)
	case phaseHeaders:
		return fmt.Sprintf("no response from %s within %v", e.host, e.limit)
	}
	return fmt.Sprintf("no data from %s for %v", e.host, e.limit)
}

// Timeout reports true, as net.Error timeouts do.
func (e *timeoutError) Timeout() bool { return true }

// A watchdog bounds each phase of one HTTP exchange and cancels the
// exchange's context, with a *timeoutError as the cause, when a phase
// overruns: opening each connection (redirects included), then waiting for
// the response headers, then every wait for more of the body.
type watchdog struct {
	parent context.Context // the caller's context
	ctx    context.Context // the exchange's context, canceled on overrun
	cancel context.CancelCauseFunc

	mu    sync.Mutex
	timer *time.Timer
	cur   timeoutError // the phase being timed
	done  bool         // fired or stopped
}

func (w *watchdog) arm(p phase, host string, limit time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	w.cur.phase, w.cur.limit = p, limit
	if host != "" {
		w.cur.host = host
	}
	w.timer.Reset(limit)
}

// kick restarts the current phase's clock: data arrived.
func (w *watchdog) kick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.timer.Reset(w.cur.limit)
	}
}

func (w *watchdog) fire() {
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return
	}
	w.done = true
	cause := w.cur
	w.mu.Unlock()
	w.cancel(&cause)
}

// stop ends the watch and releases the exchange's context.
func (w *watchdog) stop() {
	w.mu.Lock()
	w.done = true
	w.timer.Stop()
	w.mu.Unlock()
	w.cancel(context.Canceled)
}

// explain turns an error of the exchange into the *timeoutError behind it,
// if any: the watchdog's own, or a timeout of the transport, which is
// reported for the phase it happened in.
func (w *watchdog) explain(err error) error {
	if err == nil || w.parent.Err() != nil {
		return err
	}
	var te *timeoutError
	if errors.As(context.Cause(w.ctx), &te) {
		return te
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		w.mu.Lock()
		cur := w.cur
		w.mu.Unlock()
		return &cur
	}
	return err
}

// send performs req through client under a watchdog with the hub's
// timeouts. The response body, which must be closed, reports a stall as a
// *timeoutError; so does send for a connection or response that does not
// come in time.
func (h *hub) send(client *http.Client, req *http.Request) (*http.Response, error) {
	w := &watchdog{parent: req.Context()}
	w.ctx, w.cancel = context.WithCancelCause(req.Context())
	w.mu.Lock()
	w.cur = timeoutError{phase: phaseConnect, host: req.URL.Host, limit: h.connect}
	w.timer = time.AfterFunc(h.connect, w.fire)
	w.mu.Unlock()
	trace := &httptrace.ClientTrace{
		GetConn: func(hostPort string) { w.arm(phaseConnect, hostPort, h.connect) },
		GotConn: func(httptrace.GotConnInfo) { w.arm(phaseHeaders, "", h.header) },
	}
	resp, err := client.Do(req.WithContext(httptrace.WithClientTrace(w.ctx, trace)))
	if err != nil {
		err = w.explain(err)
		w.stop()
		return nil, err
	}
	host := req.URL.Host
	if resp.Request != nil && resp.Request.URL != nil {
		host = resp.Request.URL.Host // after redirects
	}
	w.arm(phaseBody, host, h.stall)
	resp.Body = &watchedBody{ReadCloser: resp.Body, w: w}
	return resp, nil
}

// watchedBody is a response body under a watchdog: each read that brings
// data restarts the stall clock.
type watchedBody struct {
	io.ReadCloser
	w *watchdog
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.w.kick()
	}
	if err != nil && err != io.EOF {
		err = b.w.explain(err)
	}
	return n, err
}

func (b *watchedBody) Close() error {
	err := b.ReadCloser.Close()
	b.w.stop()
	return err
}
