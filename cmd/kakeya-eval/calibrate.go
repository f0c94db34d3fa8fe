package main

import (
	"context"
	"errors"
	"io"
)

func runCalibrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("calibrate: not implemented yet")
}
