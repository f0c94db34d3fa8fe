package chattmpl

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// strftime formats t as C's strftime (which Python's calls on Linux) for
// the directives chat templates use: %Y %y %m %B %b %h %d %e %j %A %a %w
// %u %H %I %M %S %p %Z %z %F %T %D %n %t %%, and glibc's "-" flag that
// drops the padding (%-d). Any other directive is an error rather than a
// date the model was not trained on.
func strftime(t time.Time, format string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(format) {
			return "", fmt.Errorf("strftime_now: format %q ends in %%", format)
		}
		pad := true
		if format[i] == '-' {
			pad = false
			i++
			if i >= len(format) {
				return "", fmt.Errorf("strftime_now: format %q ends in %%-", format)
			}
		}
		num := func(n, width int) {
			s := strconv.Itoa(n)
			for pad && len(s) < width {
				s = "0" + s
			}
			b.WriteString(s)
		}
		switch d := format[i]; d {
		case 'Y':
			num(t.Year(), 1)
		case 'y':
			num(t.Year()%100, 2)
		case 'm':
			num(int(t.Month()), 2)
		case 'B':
			b.WriteString(t.Month().String())
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'd':
			num(t.Day(), 2)
		case 'e':
			if s := strconv.Itoa(t.Day()); pad && len(s) < 2 {
				b.WriteString(" " + s)
			} else {
				b.WriteString(s)
			}
		case 'j':
			num(t.YearDay(), 3)
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'w':
			num(int(t.Weekday()), 1)
		case 'u':
			num((int(t.Weekday())+6)%7+1, 1)
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			num((t.Hour()+11)%12+1, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'Z':
			name, _ := t.Zone()
			b.WriteString(name)
		case 'z':
			b.WriteString(t.Format("-0700"))
		case 'F':
			b.WriteString(t.Format("2006-01-02"))
		case 'T':
			b.WriteString(t.Format("15:04:05"))
		case 'D':
			b.WriteString(t.Format("01/02/06"))
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case '%':
			b.WriteByte('%')
		default:
			return "", fmt.Errorf("strftime_now: directive %%%c of %q is not supported", d, format)
		}
	}
	return b.String(), nil
}
