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

// TestProgressUnit checks the unit word on both displays, "passages" when
// Unit is empty, and that only the terminal display redraws with \r.
func TestProgressUnit(t *testing.T) {
	for _, tc := range []struct {
		unit  string
		tty   bool
		first string // not a terminal: the first of one line per window
		last  string // the final line, without \r and the trailing blanks
	}{
		{"", false, "calibrate  25% 1/4 passages, 10 tok/s, ETA 3s", "calibrate 100% 4/4 passages, 10 tok/s, took 4s"},
		{"windows", false, "calibrate  25% 1/4 windows, 10 tok/s, ETA 3s", "calibrate 100% 4/4 windows, 10 tok/s, took 4s"},
		{"windows", true, "", "calibrate [########################] 4/4 windows, 10 tok/s, took 4s"},
	} {
		var b strings.Builder
		c := &fakeClock{t: time.Unix(0, 0)}
		p := newProgress(&b, tc.tty, "calibrate", 4, c.now)
		p.Unit = tc.unit
		for i := 1; i <= 4; i++ {
			c.t = c.t.Add(time.Second)
			p.Update(i, 10*i)
		}
		p.Finish()
		out := b.String()
		if got := strings.Count(out, "\r"); tc.tty != (got > 0) {
			t.Errorf("unit %q tty %v: %d carriage returns in %q", tc.unit, tc.tty, got, out)
		}
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		// Not a terminal: one line per window, as each crosses a tenth.
		if !tc.tty && (len(lines) != 4 || lines[0] != tc.first) {
			t.Errorf("unit %q: lines %q, want 4 starting with %q", tc.unit, lines, tc.first)
		}
		last := lines[len(lines)-1]
		last = strings.TrimRight(last[strings.LastIndex(last, "\r")+1:], " ")
		if last != tc.last {
			t.Errorf("unit %q tty %v: last line %q, want %q", tc.unit, tc.tty, last, tc.last)
		}
	}
}
