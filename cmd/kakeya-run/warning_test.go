package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
)

// A hot window or sinks covering the whole context (512 tokens here) is no
// error, but kakeya-run says on stderr, once, that nothing gets compressed.
func TestRunWarnsNothingCompressed(t *testing.T) {
	dir := shareddata.File(t, "models", "stories260K")
	base := []string{"--model", dir, "--prompt", "Once upon a time", "--temperature", "0", "--max-tokens", "4", "--quiet"}
	for _, tt := range []struct {
		args []string
		want string // "" for no warning
	}{
		{[]string{"--kv-codec", "int8"}, ""},
		{[]string{"--kv-codec", "int8", "--hot-window", "4096"},
			"kakeya-run: warning: KV cache: nothing will be compressed: with --hot-window 4096, --sinks 0 and 64-token blocks the first block is encoded once a sequence holds 4160 tokens, and sequences here hold at most 512; lower --hot-window or --sinks (or --block-size)\n"},
		{[]string{"--kv-codec", "int8", "--sinks", "512"},
			"kakeya-run: warning: KV cache: nothing will be compressed: with --hot-window 64, --sinks 512 and 64-token blocks the first block is encoded once a sequence holds 640 tokens"},
	} {
		var errOut bytes.Buffer
		if err := run(context.Background(), append(base, tt.args...), nil, io.Discard, &errOut); err != nil {
			t.Fatalf("%q: %v", tt.args, err)
		}
		got := errOut.String()
		if tt.want == "" && strings.Contains(got, "warning") || strings.Count(got, tt.want) != 1 && tt.want != "" {
			t.Errorf("%q: stderr %q, want the warning %q once", tt.args, got, tt.want)
		}
	}
}

// A cache flag given twice is refused, naming both values, as the
// --config grammar refuses a repeated key.
func TestRepeatedCacheFlag(t *testing.T) {
	_, err := parseFlags([]string{"--model", "m", "--prompt", "p", "--kv-codec", "int8", "--kv-codec", "int4"}, io.Discard, io.Discard)
	if err == nil || err == flag.ErrHelp || !strings.Contains(err.Error(), `invalid value "int4" for flag -kv-codec: --kv-codec is already set by --kv-codec "int8"; give each setting once`) {
		t.Errorf("error %v", err)
	}
}
