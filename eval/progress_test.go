package eval

import (
	"strings"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestProgressPlain(t *testing.T) {
	var b strings.Builder
	c := &fakeClock{t: time.Unix(0, 0)}
	p := newProgress(&b, false, "ppl", 50, c.now)
	for i := 1; i <= 50; i++ {
		c.t = c.t.Add(time.Second)
		p.Update(i, 100*i)
	}
	p.Finish()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 10 {
		t.Fatalf("%d lines, want one per 10%%:\n%s", len(lines), b.String())
	}
	if want := "ppl  10% 5/50 passages, 100 tok/s, ETA 45s"; lines[0] != want {
		t.Errorf("first line %q, want %q", lines[0], want)
	}
	if want := "ppl 100% 50/50 passages, 100 tok/s, took 50s"; lines[9] != want {
		t.Errorf("last line %q, want %q", lines[9], want)
	}
	if strings.Contains(b.String(), "\r") {
		t.Error("carriage return in non-terminal output")
	}
}

func TestProgressTTY(t *testing.T) {
	var b strings.Builder
	c := &fakeClock{t: time.Unix(0, 0)}
	p := newProgress(&b, true, "ppl", 1000, c.now)
	for i := 1; i <= 1000; i++ {
		c.t = c.t.Add(10 * time.Millisecond) // 100 updates a second
		p.Update(i, i)
	}
	p.Finish()
	draws := strings.Count(b.String(), "\r")
	// 10 s of updates at most 5 redraws a second, plus the final one.
	if draws < 45 || draws > 52 {
		t.Errorf("%d redraws for 10 s, want about 50", draws)
	}
	if !strings.HasSuffix(b.String(), "[########################] 1000/1000 passages, 100 tok/s, took 10s   \n") {
		t.Errorf("final draw: %q", b.String()[strings.LastIndex(b.String(), "\r"):])
	}
}
