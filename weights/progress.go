package weights

import (
	"fmt"
	"io"
	"path"
	"sync"
	"time"

	"github.com/kakeya-ai/kakeya/internal/term"
)

// progressBar draws one download's progress on a single terminal line,
// redrawn in place; on anything else (a log file, CI) it prints a plain line
// at every tenth of the file and every ten heartbeats (10 s) of waiting. Its
// methods may be called from several goroutines. While no data arrives a
// ticker keeps redrawing it, the rate falling and a note saying how long the
// wait has been, so a stalled download never looks like a frozen one.
type progressBar struct {
	w         io.Writer     // nil: draw nothing
	tty       bool          // w is a terminal: redraw one line with \r
	name      string        // the file's base name
	heartbeat time.Duration // redraw interval while idle; 0: no ticker
	stop      chan struct{} // closed by finish to end the ticker
	ticker    sync.WaitGroup

	mu          sync.Mutex
	total, done int64
	base        int64     // bytes already present when this session started
	start       time.Time // start of this session (each resumed request starts one)
	last        time.Time // last drawing
	lastData    time.Time // last progress
	drawn       bool      // the terminal line holds a bar
	printed     int       // tenths of the file printed (not a terminal)
}

// newProgressBar starts a bar for file of total bytes (-1: unknown) on w,
// redrawn every heartbeat while no data arrives.
func newProgressBar(w io.Writer, file string, total int64, heartbeat time.Duration) *progressBar {
	now := time.Now()
	p := &progressBar{w: w, tty: term.IsTerminal(w), name: path.Base(file), total: total, heartbeat: heartbeat, start: now, lastData: now, printed: -1}
	if w != nil && heartbeat > 0 {
		p.stop = make(chan struct{})
		p.ticker.Go(p.tick)
	}
	return p
}

func (p *progressBar) tick() {
	t := time.NewTicker(p.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			p.mu.Lock()
			if now.Sub(p.lastData) >= p.heartbeat && now.Sub(p.last) >= p.heartbeat/2 {
				p.draw(now)
			}
			p.mu.Unlock()
		}
	}
}

// resume starts a new session (a new request) with have bytes present.
func (p *progressBar) resume(have int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done, p.base = have, have
	p.start = time.Now()
	p.lastData = p.start
}

// add counts n more bytes, redrawing at most ten times a second.
func (p *progressBar) add(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	now := time.Now()
	p.lastData = now
	if now.Sub(p.last) >= 100*time.Millisecond {
		p.draw(now)
	}
}

// note prints msg on a line of its own below the bar.
func (p *progressBar) note(msg string) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
	fmt.Fprintln(p.w, msg)
}

// draw redraws the bar; p.mu must be held.
func (p *progressBar) draw(now time.Time) {
	if p.w == nil {
		return
	}
	idle := now.Sub(p.lastData)
	if !p.tty {
		// One line per tenth of the file, or per ten heartbeats of waiting.
		tenth := 0
		if p.total > 0 {
			tenth = int(10 * p.done / p.total)
		}
		if tenth == p.printed && (p.heartbeat <= 0 || now.Sub(p.last) < 10*p.heartbeat) {
			return
		}
		p.printed = tenth
	}
	p.last = now
	p.drawn = p.tty
	elapsed := now.Sub(p.start).Seconds()
	rate := 0.0
	if elapsed > 0 {
		rate = float64(p.done-p.base) / elapsed
	}
	line := fmt.Sprintf("%-28s %10s", p.name, formatBytes(p.done))
	if p.total > 0 {
		line = fmt.Sprintf("%-28s %5.1f%% %10s / %-10s", p.name, 100*float64(p.done)/float64(p.total), formatBytes(p.done), formatBytes(p.total))
	}
	line += fmt.Sprintf(" %10s/s", formatBytes(int64(rate)))
	if p.heartbeat > 0 && idle >= 2*p.heartbeat {
		line += " no data for " + roundDuration(idle).String()
	} else if p.total > 0 && rate > 0 && p.done < p.total {
		eta := time.Duration(float64(p.total-p.done) / rate * float64(time.Second)).Round(time.Second)
		line += " ETA " + eta.String()
	}
	if !p.tty {
		fmt.Fprintln(p.w, line)
		return
	}
	fmt.Fprintf(p.w, "\r%-90s", line)
}

// roundDuration rounds d to whole seconds, or to tenths below ten seconds.
func roundDuration(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// finish stops the ticker and ends the bar's line.
func (p *progressBar) finish() {
	if p.stop != nil {
		close(p.stop)
		p.ticker.Wait()
		p.stop = nil
	}
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.drawn && p.done == 0 {
		return
	}
	if !p.tty {
		if p.total <= 0 || p.printed < 10 {
			p.printed = -1 // the final line, whatever was printed before
			p.draw(time.Now())
		}
		return
	}
	p.draw(time.Now())
	fmt.Fprintln(p.w)
}

func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), -1
	for f >= unit && i < 4 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGTP"[i])
}
