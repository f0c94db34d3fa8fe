package main

import (
	"context"
	"errors"
	"io"
)

func runPPL(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("ppl: not implemented yet")
}
