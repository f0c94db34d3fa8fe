package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
)

func TestRunGreedy(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"--model", dir, "--prompt", "Once upon a time", "--temperature", "0", "--max-tokens", "12"}, nil, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	if want := ", there was a little girl named Lily. She\n"; out.String() != want {
		t.Fatalf("stdout %q, want %q", out.String(), want)
	}
	for _, s := range []string{"load", "prefill 5 tokens", "decode 12 tokens", "tok/s", "KV cache: 16 tokens"} {
		if !strings.Contains(errOut.String(), s) {
			t.Errorf("stderr %q lacks %q", errOut.String(), s)
		}
	}
}

func TestRunTokenize(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	tests := []struct {
		args []string
		want string
	}{
		// Ids from the HF tokenizers reference (tokenizer_cases.json, "Hello world").
		{nil, "[346,306,414,263,304,341]\n"},
		{[]string{"--add-special"}, "[1,346,306,414,263,304,341]\n"},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		args := append([]string{"--model", dir, "--tokenize"}, tt.args...)
		if err := run(context.Background(), args, strings.NewReader("Hello world"), &out, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		if out.String() != tt.want {
			t.Errorf("%v: %q, want %q", tt.args, out.String(), tt.want)
		}
	}
}

func TestRunBadFlags(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--prompt", "x"}, "--model is required"},
		{[]string{"--model", dir}, "--prompt is required"},
		{[]string{"--model", dir, "--prompt", "x", "--temperature", "-1"}, "temperature"},
		{[]string{"--model", dir, "--prompt", "x", "--top-p", "2"}, "top-p"},
		{[]string{"--model", dir, "--prompt", "x", "--max-tokens", "-5"}, "--max-tokens"},
		{[]string{"--model", dir, "--prompt", "x", "--top-k", "abc"}, "invalid value"},
		{[]string{"--model", dir, "--prompt", "x", "--device", "tpu"}, "--device"},
		{[]string{"--model", dir, "--prompt", "x", "--device", "tpu"}, "want one of cpu, cuda"},
		{[]string{"--model", dir, "--prompt", "x", "stray"}, "unexpected argument"},
		{[]string{"--model", filepath.Join(t.TempDir(), "nope"), "--prompt", "x"}, "nope"},
		{[]string{"--model", dir, "--prompt", strings.Repeat("Once upon a time. ", 200)}, "the prompt is 1002 tokens, more than the context of 512, the most this model allows: shorten the prompt"},
		{[]string{"--model", dir, "--prompt", "Once upon a time there was", "--ctx", "5"}, "the prompt is 7 tokens, more than the context of 5: raise --ctx (this model allows up to 512) or shorten the prompt"},
	}
	for _, tt := range tests {
		err := run(context.Background(), tt.args, nil, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want one containing %q", tt.args, err, tt.want)
		}
	}
}

// A full context and MaxTokens are told apart; Ctrl-C gives a one-line
// summary.
func TestRunStopAndInterrupt(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	for _, tt := range []struct {
		args []string
		stop string
	}{
		{[]string{"--max-tokens", "0", "--ctx", "32"}, "stop: context"},
		{[]string{"--max-tokens", "3"}, "stop: length"},
	} {
		var errOut bytes.Buffer
		args := append([]string{"--model", dir, "--prompt", "Once upon a time", "--temperature", "0"}, tt.args...)
		if err := run(context.Background(), args, nil, &bytes.Buffer{}, &errOut); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(errOut.String(), tt.stop) || !strings.Contains(errOut.String(), "kernels: ") {
			t.Errorf("%v: stderr %q lacks %q or the kernels", tt.args, errOut.String(), tt.stop)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := run(ctx, []string{"--model", dir, "--prompt", "Once upon a time"}, nil, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.HasPrefix(err.Error(), "interrupted") {
		t.Errorf("cancelled run: err = %v, want the interrupted summary", err)
	}
}
