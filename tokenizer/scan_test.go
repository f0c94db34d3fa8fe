package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// regexSplit returns the matches of pattern over s with regexp2, the
// reference for the hand-written scanner.
func regexSplit(t testing.TB, pattern, s string) []string {
	t.Helper()
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		t.Fatal(err)
	}
	p := pattern2(re)
	var out []string
	for _, sp := range p.matches(s) {
		out = append(out, s[sp[0]:sp[1]])
	}
	return out
}

func pattern2(re *regexp2.Regexp) pattern { return pattern{re: re} }

func scanSplit(maxDigits int, s string) []string {
	sc := splitScanner{maxDigits: maxDigits, s: s}
	var out []string
	for {
		m, ok := sc.next()
		if !ok {
			return out
		}
		out = append(out, m)
	}
}

var scanCases = []string{
	"",
	"Hello world",
	"I'm DON'T you'll WE'VE it's 'S 'Re 'LL 'x 'sa ''s",
	"The year 2024 had 366 days; pi=3.14159.",
	"  leading spaces and   multiple   spaces  ",
	"line1\nline2\n\n\tindented\r\nwindows",
	"a \n b \r\n\r\n  c\n\n  ",
	"   \n",
	" \t x",
	"x  \t",
	"你好，世界！今天天气很好。",
	"Emoji: 😀👍🏽 and café naïve résumé",
	"def f(x):\n    return x**2  # square\n",
	"ünïcödé ßtraße Ωmega ∑∫√ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ⅫⅣ ½ ²³ ٣٤٥",
	"a\u00a0b\u2003c   \n   d\u3000\u3000e\u2028f\u0085g",
	" !!\n\n?? ...\r\n",
	"'\n's 'T\t'",
	"12345678 x1y22z333",
	"\x00\x01\x1f\x7f tail",
	" \u0301e\u0301 \u0301",
}

func TestScannerMatchesRegexp2(t *testing.T) {
	for _, tc := range []struct {
		pattern   string
		maxDigits int
	}{{qwenPattern, 1}, {llama3Pattern, 3}} {
		if sc := newSplitScanner(tc.pattern); sc == nil || sc.maxDigits != tc.maxDigits {
			t.Fatalf("newSplitScanner(%q) = %v", tc.pattern, sc)
		}
		for _, s := range scanCases {
			want := regexSplit(t, tc.pattern, s)
			got := scanSplit(tc.maxDigits, s)
			if strings.Join(got, "|") != strings.Join(want, "|") || len(got) != len(want) {
				t.Errorf("digits %d: split(%q)\n got %q\nwant %q", tc.maxDigits, s, got, want)
			}
		}
	}
	if newSplitScanner(gpt2Pattern) != nil {
		t.Errorf("GPT-2 pattern should fall back to regexp2")
	}
}

// TestScannerMatchesRegexp2Wikitext compares the scanner with regexp2 over
// all of wiki.test.raw (a few seconds; skipped with -short).
func TestScannerMatchesRegexp2Wikitext(t *testing.T) {
	if testing.Short() {
		t.Skip("compiled regexp2 over 1.3 MB is slow")
	}
	text := readWikitext(t)
	for _, tc := range []struct {
		pattern   string
		maxDigits int
	}{{qwenPattern, 1}, {llama3Pattern, 3}} {
		want := regexSplit(t, tc.pattern, text)
		got := scanSplit(tc.maxDigits, text)
		n := min(len(got), len(want))
		for i := 0; i < n; i++ {
			if got[i] != want[i] {
				t.Fatalf("digits %d: piece %d: got %q want %q", tc.maxDigits, i, got[i], want[i])
			}
		}
		if len(got) != len(want) {
			t.Fatalf("digits %d: %d pieces, want %d", tc.maxDigits, len(got), len(want))
		}
	}
}

// FuzzScanner checks the scanner against regexp2 on arbitrary valid text.
func FuzzScanner(f *testing.F) {
	for _, s := range scanCases {
		f.Add(s)
	}
	re, err := regexp2.Compile(qwenPattern, regexp2.None)
	if err != nil {
		f.Fatal(err)
	}
	p := pattern{re: re}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		var want []string
		for _, sp := range p.matches(s) {
			want = append(want, s[sp[0]:sp[1]])
		}
		got := scanSplit(1, s)
		if strings.Join(got, "\x00|") != strings.Join(want, "\x00|") {
			t.Fatalf("split(%q)\n got %q\nwant %q", s, got, want)
		}
	})
}
