package kakeya_test

import (
	"flag"
	"os"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
)

func TestMain(m *testing.M) {
	flag.Parse()
	// The Examples need the shared data set and cannot skip themselves.
	shareddata.SkipExamples("models", "stories260K")
	os.Exit(m.Run())
}
