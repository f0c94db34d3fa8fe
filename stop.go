package kakeya

import "strings"

// stopFilter holds back streamed text that might be the start of a stop
// string, so a caller never sees part of a stop sequence.
type stopFilter struct {
	stops   []string
	pending strings.Builder
}

// push adds newly decoded text. It returns the text that is safe to emit
// and whether a stop string was found; after a stop the text before it is
// returned and the rest is dropped.
func (f *stopFilter) push(text string) (emit string, stopped bool) {
	if len(f.stops) == 0 {
		return text, false
	}
	f.pending.WriteString(text)
	buf := f.pending.String()
	cut := -1
	for _, s := range f.stops {
		if i := strings.Index(buf, s); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		f.pending.Reset()
		return buf[:cut], true
	}
	// Keep the longest suffix that is a proper prefix of some stop string.
	keep := 0
	for _, s := range f.stops {
		for n := min(len(s)-1, len(buf)); n > keep; n-- {
			if strings.HasSuffix(buf, s[:n]) {
				keep = n
				break
			}
		}
	}
	f.pending.Reset()
	f.pending.WriteString(buf[len(buf)-keep:])
	return buf[:len(buf)-keep], false
}

// flush returns whatever is still held back.
func (f *stopFilter) flush() string {
	s := f.pending.String()
	f.pending.Reset()
	return s
}
