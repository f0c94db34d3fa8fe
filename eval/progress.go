package eval

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Progress draws a progress line with an ETA on a terminal, redrawn in
// place with \r at most five times a second; on anything else (CI logs) it
// never writes \r but prints a plain line, with the ETA, at every tenth of
// the work instead.
type Progress struct {
	// Unit names the units of work counted, plural ("windows",
	// "documents"); empty means "passages". Set it before the first Update.
	Unit string

	mu       sync.Mutex
	w        io.Writer
	tty      bool
	label    string
	total    int
	start    time.Time
	last     time.Time
	lastTen  int // tenths of the work already printed (not a TTY)
	drawn    bool
	now      func() time.Time
	interval time.Duration
}

// NewProgress starts a progress display of total units of work on w.
func NewProgress(w io.Writer, tty bool, label string, total int) *Progress {
	return newProgress(w, tty, label, total, time.Now)
}

func newProgress(w io.Writer, tty bool, label string, total int, now func() time.Time) *Progress {
	return &Progress{w: w, tty: tty, label: label, total: total, start: now(), now: now, interval: 200 * time.Millisecond}
}

// Update reports done units of work and tokens processed so far.
func (p *Progress) Update(done, tokens int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.now()
	if p.tty {
		if done < p.total && p.drawn && t.Sub(p.last) < p.interval {
			return
		}
		p.last, p.drawn = t, true
		// The trailing blanks wipe the tail of a longer previous line.
		fmt.Fprintf(p.w, "\r%s %s %s   ", p.label, bar(done, p.total, 24), p.figures(done, tokens, t))
		return
	}
	ten := 10 * done / max(p.total, 1)
	if ten <= p.lastTen {
		return
	}
	p.lastTen = ten
	fmt.Fprintf(p.w, "%s %3d%% %s\n", p.label, 100*done/max(p.total, 1), p.figures(done, tokens, t))
}

// Finish ends the display: on a terminal it moves past the progress line.
func (p *Progress) Finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

func (p *Progress) figures(done, tokens int, t time.Time) string {
	el := t.Sub(p.start)
	unit := p.Unit
	if unit == "" {
		unit = "passages"
	}
	s := fmt.Sprintf("%d/%d %s", done, p.total, unit)
	if el > 0 {
		s += fmt.Sprintf(", %.0f tok/s", float64(tokens)/el.Seconds())
	}
	switch {
	case done >= p.total:
		s += ", took " + el.Round(time.Second).String()
	case done > 0:
		eta := time.Duration(float64(el) * float64(p.total-done) / float64(done))
		s += ", ETA " + eta.Round(time.Second).String()
	}
	return s
}

func bar(done, total, width int) string {
	n := width
	if total > 0 {
		n = min(width*done/total, width)
	}
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}
