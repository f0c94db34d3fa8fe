package tokref

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/tokenizer"
)

// dir returns bin/tokref of the module, or $KAKEYA_TOKREF.
func dir(t *testing.T) string {
	if d := os.Getenv("KAKEYA_TOKREF"); d != "" {
		return d
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; ; {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "bin", "tokref")
		}
		up := filepath.Dir(d)
		if up == d {
			t.Fatalf("no go.mod above %s", wd)
		}
		d = up
	}
}

// unavailable fails t where the shared data is required (CI, make test),
// else skips it, saying what is missing.
func unavailable(t *testing.T, what string) {
	t.Helper()
	msg := "reference tokenizers not available: " + what + " (make tokref installs them)"
	if shareddata.Required() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// edgeCases are inputs where tokenizers tend to differ: white-space runs,
// tabs, control and format characters, the metaspace character itself,
// special tokens' text, scripts without spaces, emoji sequences.
var edgeCases = []string{
	"",
	" ",
	"\t",
	"\t\tindented\twith tabs\t",
	"a\u00a0b\u2009c\u3000d", // no-break, thin and ideographic spaces
	"\u2581already\u2581metaspaced \u2581",
	"<bos><eos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
	"<start_of_image> <image_soft_token> <unused0>",
	"\x00\x01\x1f\x7f control",
	"zero\u200bwidth\u200djoiner\ufeffbom",
	"e\u0301 combining vs \u00e9 precomposed; \uff21\uff42 fullwidth",
	"東京都の天気は晴れです。북한 ภาษาไทย العربية עברית",
	"👩‍👩‍👧‍👦 🏳️‍🌈 🇯🇵 1️⃣ 🤖🧠",
	"line one\r\nline two\rline three\n\n\n",
	"    def f(x):\n        return x ** 2  # four-space indents\n",
	"1234567890 3.14159 -0.5e-10 0x1F 1,000,000",
	"trailing spaces    ",
	"MiXeD CaSe ALLCAPS lowercase",
	"https://example.com/path?q=a&b=c#frag user@example.org",
	"{\"json\": [1, 2, {\"k\": null}], \"s\": \"\\u00e9\"}",
}

// texts returns the edge cases, the shared reference cases, the first 300
// lines of WikiText-2's raw test split and the first 100 TinyStories.
func texts(t *testing.T) []string {
	out := slices.Clone(edgeCases)
	var cases struct {
		Cases []string `json:"cases"`
	}
	data, err := os.ReadFile(shareddata.File(t, "reference/tokenizer_cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	out = append(out, cases.Cases...)
	f, err := os.Open(shareddata.File(t, "data/wikitext-2-raw/wiki.test.raw"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 0; n < 300 && sc.Scan(); n++ {
		out = append(out, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	stories, err := os.ReadFile(shareddata.File(t, "data/tinystories/val.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range strings.Split(string(stories), "\n\n") {
		if i == 100 {
			break
		}
		out = append(out, s)
	}
	return out
}

// TestGemmaTokenizersMatchReference: Gemma's and Gemma 3's tokenizers
// encode every text to the reference implementation's ids (with the
// special tokens added as transformers adds them) and decode those ids,
// without the special tokens, to the reference's text.
func TestGemmaTokenizersMatchReference(t *testing.T) {
	root := dir(t)
	node, err := exec.LookPath("node")
	if err != nil {
		unavailable(t, "node")
	}
	modules := filepath.Join(root, "node_modules")
	if _, err := os.Stat(filepath.Join(modules, "@lenml", "tokenizers")); err != nil {
		unavailable(t, "@lenml/tokenizers in "+modules)
	}
	in := texts(t)
	req, err := json.Marshal(map[string]any{"texts": in})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"gemma", "gemma3"} {
		t.Run(name, func(t *testing.T) {
			tdir := filepath.Join(root, name)
			tk, err := tokenizer.Load(filepath.Join(tdir, "tokenizer.json"))
			if err != nil {
				if os.IsNotExist(err) {
					unavailable(t, tdir)
				}
				t.Fatal(err)
			}
			out, cached, err := reference(node, modules, tdir, req)
			if err != nil {
				t.Fatal(err)
			}
			if cached != "" {
				t.Logf("reference ids from %s (ref.cjs's output for these texts, tokenizer and @lenml/tokenizers)", cached)
			}
			var ref struct {
				IDs     [][]int  `json:"ids"`
				Decoded []string `json:"decoded"`
			}
			if err := json.Unmarshal(out, &ref); err != nil {
				t.Fatal(err)
			}
			if len(ref.IDs) != len(in) || len(ref.Decoded) != len(in) {
				t.Fatalf("reference gave %d ids and %d texts for %d inputs", len(ref.IDs), len(ref.Decoded), len(in))
			}
			bad, tokens := 0, 0
			for i, text := range in {
				got := tk.Encode(text, true)
				tokens += len(got)
				if !slices.Equal(got, ref.IDs[i]) {
					if bad++; bad <= 5 {
						t.Errorf("Encode(%.80q):\n got %v\nwant %v", text, head(got), head(ref.IDs[i]))
					}
					continue
				}
				if dec := tk.Decode(got, true); dec != ref.Decoded[i] {
					if bad++; bad <= 5 {
						t.Errorf("Decode of %.80q = %.80q, reference %.80q", text, dec, ref.Decoded[i])
					}
				}
			}
			if bad > 0 {
				t.Fatalf("%d of %d texts differ", bad, len(in))
			}
			t.Logf("%d texts, %d tokens equal", len(in), tokens)
		})
	}
}

// reference returns ref.cjs's output for the request req on the tokenizer
// in tdir. It is kept beside the tokenizer, named by the SHA-256 of all
// that decides it (the request, ref.cjs, the tokenizer's files and the
// reference's package.json, which pins its version), so that node, most
// of this test's time, runs again only when one of them changes; cached
// names the file it came from, "" when node ran.
func reference(node, modules, tdir string, req []byte) (out []byte, cached string, err error) {
	h := sha256.New()
	h.Write(req)
	for _, f := range []string{"ref.cjs", filepath.Join(tdir, "tokenizer.json"), filepath.Join(tdir, "tokenizer_config.json"),
		filepath.Join(modules, "@lenml", "tokenizers", "package.json")} {
		b, err := os.ReadFile(f)
		if err != nil && !os.IsNotExist(err) {
			return nil, "", err
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(f), len(b))
		h.Write(b)
	}
	path := filepath.Join(tdir, fmt.Sprintf("ref-%x.json", h.Sum(nil)[:12]))
	if out, err := os.ReadFile(path); err == nil {
		return out, path, nil
	}
	cmd := exec.Command(node, "ref.cjs", modules, tdir)
	cmd.Stdin = bytes.NewReader(req)
	cmd.WaitDelay = time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	done := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
	out, err = cmd.Output()
	done.Stop()
	if err != nil {
		return nil, "", fmt.Errorf("node ref.cjs: %v\n%.2000s", err, stderr.String())
	}
	// Written whole or not at all: a cut-short file would be read back.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, out, 0o644); err == nil {
		if err := os.Rename(tmp, path); err != nil {
			os.Remove(tmp)
		}
	}
	return out, "", nil
}

// head returns at most the first 40 ids, for messages.
func head(ids []int) []int { return ids[:min(len(ids), 40)] }
