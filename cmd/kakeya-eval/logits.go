package main

import (
	"context"
	"errors"
	"io"
)

func runLogits(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("logits: not implemented yet")
}
