package kakeya

import (
	"strings"
	"testing"
)

func TestStopFilter(t *testing.T) {
	tests := []struct {
		name    string
		stops   []string
		chunks  []string
		want    string
		stopped bool
	}{
		{"none", nil, []string{"a", "b"}, "ab", false},
		{"no match", []string{"END"}, []string{"hello ", "world"}, "hello world", false},
		{"match in one chunk", []string{"END"}, []string{"abcENDxyz"}, "abc", true},
		{"match across chunks", []string{"END"}, []string{"ab", "E", "N", "Dz"}, "ab", true},
		{"false start", []string{"END"}, []string{"ab", "EN", "x"}, "abENx", false},
		{"earliest of two", []string{"cd", "bc"}, []string{"abcd"}, "a", true},
		{"newline stop", []string{"\n\n"}, []string{"line\n", "\nmore"}, "line", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := stopFilter{stops: tt.stops}
			var out strings.Builder
			stopped := false
			for _, c := range tt.chunks {
				e, s := f.push(c)
				out.WriteString(e)
				if s {
					stopped = true
					break
				}
			}
			if !stopped {
				out.WriteString(f.flush())
			}
			if out.String() != tt.want || stopped != tt.stopped {
				t.Fatalf("got %q stopped=%v, want %q stopped=%v", out.String(), stopped, tt.want, tt.stopped)
			}
		})
	}
}
