package calibrate

import (
	"os"
	"strings"
	"testing"
	"unicode"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
)

// overlapWindow is the length in bytes of the shortest passage
// TestTextNotInSharedData looks for in both texts.
const overlapWindow = 64

// TestTextNotInSharedData checks that no 64-byte window of the built-in
// calibration text (whitespace runs folded to one space on both sides)
// appears in the text sets of the shared data set that the project scores
// or calibrates on: WikiText-2 raw test, WikiText-2 test and valid, and
// TinyStories validation. A calibration that had seen the scored passages
// would flatter every row measured under it.
func TestTextNotInSharedData(t *testing.T) {
	cal := foldSpace(Text())
	windows := make(map[uint64][]int, len(cal))
	for i, h := range rollingHashes(cal, overlapWindow) {
		windows[h] = append(windows[h], i)
	}
	for _, f := range [][]string{
		{"data", "wikitext-2-raw", "wiki.test.raw"},
		{"data", "wikitext-2", "test.txt"},
		{"data", "wikitext-2", "valid.txt"},
		{"data", "tinystories", "val.txt"},
	} {
		raw, err := os.ReadFile(shareddata.File(t, f...))
		if err != nil {
			t.Fatal(err)
		}
		data := foldSpace(string(raw))
		found := 0
		for j, h := range rollingHashes(data, overlapWindow) {
			for _, i := range windows[h] {
				if cal[i:i+overlapWindow] != data[j:j+overlapWindow] {
					continue
				}
				if found++; found <= 3 {
					t.Errorf("%s: the calibration text's bytes %d.. (folded) appear at %d: %q", strings.Join(f, "/"), i, j, cal[i:i+overlapWindow])
				}
				break
			}
		}
		if found > 3 {
			t.Errorf("%s: %d shared windows in all", strings.Join(f, "/"), found)
		}
	}
}

// foldSpace replaces each run of white space in s by one space.
func foldSpace(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for _, r := range s {
		if unicode.IsSpace(r) {
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(r)
	}
	return b.String()
}

// rollingHashes returns the polynomial hash (mod 2^64) of every n-byte
// window of s, by start offset.
func rollingHashes(s string, n int) []uint64 {
	if len(s) < n {
		return nil
	}
	const base = 1099511628211
	var h, pow uint64 = 0, 1
	for range n - 1 {
		pow *= base
	}
	out := make([]uint64, 0, len(s)-n+1)
	for i := 0; i < len(s); i++ {
		if i >= n {
			h -= uint64(s[i-n]) * pow
		}
		h = h*base + uint64(s[i])
		if i >= n-1 {
			out = append(out, h)
		}
	}
	return out
}

// TestTextNotInSharedDataFinds checks that the search finds a window the
// two texts share, whatever their white space.
func TestTextNotInSharedDataFinds(t *testing.T) {
	a := foldSpace("  the quick brown fox\r\n jumps over the lazy dog while the cat   sleeps on the warm mat by the door ")
	b := foldSpace("prefix: the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat by the door!")
	if len(a) < overlapWindow {
		t.Fatalf("%d bytes", len(a))
	}
	ha := rollingHashes(a, overlapWindow)
	hb := rollingHashes(b, overlapWindow)
	if ha[0] != hb[len("prefix: ")] || a[:overlapWindow] != b[len("prefix: "):len("prefix: ")+overlapWindow] {
		t.Errorf("the shared window was not found: %q", a[:overlapWindow])
	}
	if ha[1] == hb[len("prefix: ")] {
		t.Errorf("windows at different offsets hash alike")
	}
}
