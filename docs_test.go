package kakeya_test

import (
	"bytes"
	"context"
	"fmt"
	"go/build"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/kakeya-ai/kakeya/internal/leveltest"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
)

// The documentation's commands are tested. In README.md and docs/**/*.md:
//
//   - a fenced block preceded by the line <!-- test: quick --> is run as
//     written by sh, from a scratch directory where bin/ holds the tools
//     (also on PATH) and ../shared is the shared data set; a line
//     "make build" is what the test did first (the tools built into bin/),
//     and no other make target may appear. The quick blocks of one file run
//     in order in one directory, so a later block may use an earlier one's
//     files. Keep them to seconds: they all run in make test.
//   - a fenced block preceded by <!-- test: output --> follows a quick
//     block: each of its non-blank lines must appear in that block's output
//     (stdout and stderr), so it shows only what does not vary from run to
//     run or machine to machine.
//   - every other kakeya-run, kakeya-serve, kakeya-eval or kakeya-bench command, in a
//     fenced block or an inline code span, must use only flags that the
//     tool (or kakeya-eval's command) defines.
//
// Besides: every flag of every tool appears in docs/cli.md, every package
// of the module in docs/architecture.md's map, and every relative link
// leads to a file and heading that exist.

const (
	markQuick  = "<!-- test: quick -->"
	markOutput = "<!-- test: output -->"
)

// A docBlock is a fenced block of a Markdown file.
type docBlock struct {
	file, info, text string
	line             int  // of the opening fence, from 1
	quick, output    bool // marked to run, or as the previous block's output
}

// docFiles returns README.md and the Markdown files under docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir("docs", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// parseBlocks returns the fenced blocks of the Markdown text src, and src
// with them blanked out (for the inline code spans).
func parseBlocks(file, src string) ([]docBlock, string, error) {
	var blocks []docBlock
	var prose strings.Builder
	lines := strings.Split(src, "\n")
	mark := ""
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "```") {
			if l != "" {
				mark = l
			}
			prose.WriteString(lines[i] + "\n")
			continue
		}
		b := docBlock{file: file, info: strings.TrimPrefix(l, "```"), line: i + 1, quick: mark == markQuick, output: mark == markOutput}
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, lines[i])
		}
		if i == len(lines) {
			return nil, "", fmt.Errorf("%s:%d: fenced block not closed", file, b.line)
		}
		b.text = strings.Join(body, "\n")
		if b.output && (len(blocks) == 0 || !blocks[len(blocks)-1].quick) {
			return nil, "", fmt.Errorf("%s:%d: %s block does not follow a %s block", file, b.line, markOutput, markQuick)
		}
		blocks = append(blocks, b)
		mark = ""
		prose.WriteString("\n")
	}
	return blocks, prose.String(), nil
}

// shellWords splits a command line as sh would, roughly: words separated by
// blanks, quotes kept together and removed, and ; and & as words of their
// own. A | is a pipe only as a word of its own: inside a word it is the
// docs' "one of" (DIR|HF_ID, --ctx 1|512).
func shellWords(s string) []string {
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	flush := func() {
		if inWord {
			words = append(words, w.String())
		}
		w.Reset()
		inWord = false
	}
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t' || r == '\n':
			flush()
		case r == ';' || r == '&':
			flush()
			words = append(words, string(r))
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	flush()
	return words
}

// commandLines joins a shell text's continued lines and drops comments.
func commandLines(text string) []string {
	var out []string
	for _, l := range strings.Split(strings.ReplaceAll(text, "\\\n", " "), "\n") {
		if i := strings.Index(l, " #"); i >= 0 {
			l = l[:i]
		}
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		out = append(out, l)
	}
	return out
}

var toolName = regexp.MustCompile(`^(?:.*/)?(kakeya-(?:run|eval|bench|serve))$`)

// A docCall is one tool invocation in the docs: the tool (kakeya-eval with
// its command, "kakeya-eval ppl") and the flags it is given.
type docCall struct {
	tool  string
	flags []string
}

// toolCalls finds the tool invocations in a command line.
func toolCalls(line string) []docCall {
	words := shellWords(line)
	var calls []docCall
	for i := 0; i < len(words); i++ {
		m := toolName.FindStringSubmatch(words[i])
		if m == nil {
			continue
		}
		c := docCall{tool: m[1]}
		j := i + 1
		if c.tool == "kakeya-eval" && j < len(words) && !strings.HasPrefix(words[j], "-") && words[j] != ";" && words[j] != "|" && words[j] != "&" {
			c.tool += " " + strings.Trim(words[j], "[]()")
			j++
		}
		for ; j < len(words); j++ {
			w := strings.TrimLeft(words[j], "[(")
			if w == ";" || w == "|" || w == "&" || w == "do" || w == "done" || w == "then" || w == "<" || w == ">" {
				break
			}
			if len(w) < 2 || w[0] != '-' || w[1] >= '0' && w[1] <= '9' {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimLeft(w, "-"), "=")
			c.flags = append(c.flags, strings.TrimRight(name, "])"))
		}
		calls = append(calls, c)
		i = j - 1
	}
	return calls
}

var helpFlag = regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)

// toolFlags runs each tool's -h and returns the flags of each tool and of
// each kakeya-eval command, keyed as docCall.tool.
func toolFlags(t *testing.T, bin string) map[string][]string {
	t.Helper()
	help := func(args ...string) string {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", args, err, out)
		}
		return string(out)
	}
	flags := map[string][]string{}
	for _, tool := range []string{"kakeya-run", "kakeya-bench", "kakeya-serve"} {
		for _, m := range helpFlag.FindAllStringSubmatch(help(filepath.Join(bin, tool), "-h"), -1) {
			flags[tool] = append(flags[tool], m[1])
		}
	}
	usage := help(filepath.Join(bin, "kakeya-eval"), "-h")
	_, cmds, ok := strings.Cut(usage, "commands:\n")
	if !ok {
		t.Fatalf("kakeya-eval -h lists no commands:\n%s", usage)
	}
	flags["kakeya-eval"] = []string{"version"}
	for _, l := range strings.Split(cmds, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || !strings.HasPrefix(l, "  ") {
			break
		}
		cmd := "kakeya-eval " + f[0]
		flags[cmd] = []string{}
		for _, m := range helpFlag.FindAllStringSubmatch(help(filepath.Join(bin, "kakeya-eval"), f[0], "-h"), -1) {
			flags[cmd] = append(flags[cmd], m[1])
		}
	}
	return flags
}

// buildTools builds the commands into bin/doctest (git-ignored, as make
// build's bin), with this test's GOEXPERIMENT, which make test sets to
// simd, and without the symbol table and DWARF (-s -w: the doc commands
// need neither). A directory that lasts between runs lets go build skip
// the link of every tool whose inputs did not change (about 8 s of CPU
// in a warm make test); the tools' flags and output are the same.
func buildTools(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join("bin", "doctest"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-ldflags=-s -w", "-o", bin+string(filepath.Separator), "./cmd/...")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/...: %v\n%s", err, out)
	}
	return bin
}

// TestDocs builds the tools once, then checks the docs against them: the
// quick commands run, every command's flags exist, and docs/cli.md names
// every flag.
func TestDocs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the tools")
	}
	if os.Getenv(leveltest.EnvExec) != "" {
		// go build here would make tools for the emulated architecture,
		// which sh cannot start; make test runs these checks natively.
		t.Skipf("%s is set: the tools would be built for an emulated architecture", leveltest.EnvExec)
	}
	shared, err := filepath.Abs(shareddata.Dir(t))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	bin := buildTools(t)
	flags := toolFlags(t, bin)
	t.Run("commands", func(t *testing.T) { testDocCommands(t, tmp, bin, shared, flags) })
	t.Run("flags listed", func(t *testing.T) { testDocFlagsListed(t, flags) })
}

func testDocCommands(t *testing.T, tmp, bin, shared string, flags map[string][]string) {
	for _, file := range docFiles(t) {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		blocks, prose, err := parseBlocks(file, string(src))
		if err != nil {
			t.Error(err)
			continue
		}
		checkFlags := func(where, text string) {
			for _, l := range commandLines(text) {
				for _, c := range toolCalls(l) {
					known, ok := flags[c.tool]
					if !ok {
						t.Errorf("%s: %q: no such tool or kakeya-eval command", where, c.tool)
						continue
					}
					for _, f := range c.flags {
						if f != "h" && f != "help" && !slices.Contains(known, f) {
							t.Errorf("%s: %s has no flag --%s: %s", where, c.tool, f, strings.TrimSpace(l))
						}
					}
				}
			}
		}
		for _, b := range blocks {
			if b.info == "" || b.info == "sh" || b.info == "bash" {
				checkFlags(fmt.Sprintf("%s:%d", b.file, b.line), b.text)
			}
		}
		for _, span := range regexp.MustCompile("`[^`]+`").FindAllString(prose, -1) {
			checkFlags(file, strings.ReplaceAll(strings.Trim(span, "`"), "\\|", "|"))
		}

		// The quick blocks, in a scratch directory of their own.
		dir := filepath.Join(tmp, strings.ReplaceAll(file, string(filepath.Separator), "_"))
		work := filepath.Join(dir, "work")
		if err := os.MkdirAll(work, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, l := range [][2]string{{bin, filepath.Join(work, "bin")}, {shared, filepath.Join(dir, "shared")}} {
			if err := os.Symlink(l[0], l[1]); err != nil {
				t.Fatal(err)
			}
		}
		var last []byte
		for _, b := range blocks {
			where := fmt.Sprintf("%s:%d", b.file, b.line)
			switch {
			case b.output:
				for _, want := range strings.Split(b.text, "\n") {
					if strings.TrimSpace(want) != "" && !bytes.Contains(last, []byte(want)) {
						t.Errorf("%s: the command's output lacks %q; it was:\n%s", where, want, last)
					}
				}
			case b.quick:
				last = runQuick(t, where, work, bin, b.text)
			}
		}
	}
}

// runQuick runs a quick block's commands with sh in dir and returns their
// output.
func runQuick(t *testing.T, where, dir, bin, text string) []byte {
	t.Helper()
	var script []string
	for _, l := range commandLines(text) {
		switch f := strings.Fields(l); {
		case len(f) == 2 && f[0] == "make" && f[1] == "build":
			// The tools are built already.
		case len(f) > 0 && f[0] == "make":
			t.Errorf("%s: a quick block may run make build only: %q", where, l)
			return nil
		default:
			script = append(script, l)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-e", "-c", strings.Join(script, "\n"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+bin+string(filepath.ListSeparator)+os.Getenv("PATH"))
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s: %v after %v\n%s\noutput:\n%s", where, err, time.Since(start).Round(time.Millisecond), text, out)
	}
	return out
}

// testDocFlagsListed checks that docs/cli.md names every flag of every
// tool and kakeya-eval command, as a flag table's or a list's `--name`.
func testDocFlagsListed(t *testing.T, flags map[string][]string) {
	cli, err := os.ReadFile(filepath.Join("docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	for tool, fl := range flags {
		for _, f := range fl {
			if !regexp.MustCompile("`--" + regexp.QuoteMeta(f) + "[` =\\[]").Match(cli) {
				t.Errorf("docs/cli.md does not describe %s --%s", tool, f)
			}
		}
	}
}

// docs/architecture.md's package map lists every package of the module.
func TestDocPackageMap(t *testing.T) {
	arch, err := os.ReadFile(filepath.Join("docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || name == "docs") {
			return filepath.SkipDir
		}
		if _, err := build.ImportDir(path, 0); err != nil {
			if _, none := err.(*build.NoGoError); none {
				return nil
			}
			return err
		}
		name := "`" + filepath.ToSlash(path) + "/`"
		if path == "." {
			name = "`.` (package `kakeya`)"
		} else if strings.HasPrefix(path, "cmd"+string(filepath.Separator)) {
			name = "`" + filepath.ToSlash(path) + "`"
		}
		if !bytes.Contains(arch, []byte("| "+name+" |")) {
			t.Errorf("docs/architecture.md's package map has no row for %s", name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// headingAnchor returns the anchor GitHub gives a Markdown heading: lower
// case, punctuation dropped, spaces as hyphens.
func headingAnchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Every relative link of README.md and docs/ leads to a file that exists
// and, with a #fragment into a Markdown file, to one of its headings.
func TestDocLinks(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading := regexp.MustCompile(`(?m)^#+ (.*)$`)
	anchors := map[string]map[string]bool{}
	prose := map[string]string{}
	for _, file := range docFiles(t) {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		_, p, err := parseBlocks(file, string(src))
		if err != nil {
			t.Fatal(err)
		}
		prose[file] = p
		anchors[file] = map[string]bool{}
		for _, m := range heading.FindAllStringSubmatch(p, -1) {
			anchors[file][headingAnchor(m[1])] = true
		}
	}
	for file, p := range prose {
		for _, m := range link.FindAllStringSubmatch(p, -1) {
			target, frag, _ := strings.Cut(m[1], "#")
			if strings.Contains(target, "://") {
				continue
			}
			path := file
			if target != "" {
				path = filepath.Join(filepath.Dir(file), filepath.FromSlash(target))
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: link %s: %v", file, m[1], err)
					continue
				}
			}
			if frag != "" && strings.HasSuffix(path, ".md") && !anchors[filepath.Clean(path)][frag] {
				t.Errorf("%s: link %s: %s has no heading #%s", file, m[1], path, frag)
			}
		}
	}
}
