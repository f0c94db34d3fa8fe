package main

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// defaultMaxConnections returns the connections --max-connections 0
// allows: the file-descriptor limit (fdLimit) less 64 (the model's files,
// the log, the listener), at least 16, at most 4096.
func defaultMaxConnections() int {
	n, ok := fdLimit()
	if !ok || n > 1<<20 {
		return 4096
	}
	return min(4096, max(16, n-64))
}

// busyBody is the body of busyResponse, the answer of a connection past
// the limit before it is closed: a 503 the client can retry, in the API's
// error shape.
const busyBody = `{"error":{"message":"the server has as many connections open as --max-connections allows: retry later","type":"server_error","param":null,"code":"unavailable"}}` + "\n"

var busyResponse = []byte(fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(busyBody), busyBody))

// A limitListener accepts at most max connections at once. One past the
// limit is answered with busyResponse and closed at once, so that a flood
// of idle or slow connections cannot take every descriptor and leave
// /health unanswered. Its gauges and counter are on /metrics.
type limitListener struct {
	net.Listener
	sem      chan struct{}
	open     prometheus.Gauge
	rejected prometheus.Counter
}

// newLimitListener limits l to max connections, registering its metrics
// in reg.
func newLimitListener(l net.Listener, max int, reg prometheus.Registerer) *limitListener {
	ll := &limitListener{
		Listener: l, sem: make(chan struct{}, max),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kakeya_connections_open",
			Help: "HTTP connections open.",
		}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kakeya_connections_rejected_total",
			Help: "Connections answered 503 and closed at once: --max-connections were open.",
		}),
	}
	limit := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kakeya_connections_max",
		Help: "The most HTTP connections open at once (--max-connections).",
	})
	limit.Set(float64(max))
	reg.MustRegister(ll.open, ll.rejected, limit)
	return ll
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.sem <- struct{}{}:
			l.open.Inc()
			return &limitedConn{Conn: c, release: func() { <-l.sem; l.open.Dec() }}, nil
		default:
			l.rejected.Inc()
			go func() { // off the accept loop: the write may wait a moment
				c.SetWriteDeadline(time.Now().Add(time.Second))
				c.Write(busyResponse)
				c.Close()
			}()
		}
	}
}

// A limitedConn gives its slot back when it closes, once.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
