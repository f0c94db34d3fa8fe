package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/kakeya-ai/kakeya/internal/device"
	"github.com/kakeya-ai/kakeya/model"
)

const logitsUsage = `usage: kakeya-eval logits --model DIR --ids 1,2,3 [--threads N] [--step]

Prints one line per input position: the input id, then the full logits row,
space-separated, each value as C's %g (6 significant digits), the layout of
llama2.c reference dumps.
`

// runLogits prints the logits row of every position of --ids.
func runLogits(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("logits", logitsUsage, stderr)
	name := fs.String("model", "", "model directory (config.json and safetensors) or Hugging Face id")
	idList := fs.String("ids", "", "comma-separated input token ids")
	threads := fs.Int("threads", 0, "compute threads (0: all cores)")
	dev := fs.String("device", "cpu", "compute device: "+strings.Join(device.Names(), ", "))
	matmul := fs.String("matmul", "f32", device.MatMulUsage+"; f32 by default here, so logits compare with references exactly")
	step := fs.Bool("step", false, "feed one token per forward call instead of one prefill call")
	if err := parse(fs, logitsUsage, args, stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("logits: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("logits: unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	if *name == "" {
		return errors.New("logits: --model DIR is required")
	}
	ids, err := parseIDs(*idList)
	if err != nil {
		return fmt.Errorf("logits: --ids: %w", err)
	}
	if err := device.Check(*dev); err != nil {
		return fmt.Errorf("logits: %w", err)
	}
	if err := device.CheckMatMul(*matmul); err != nil {
		return fmt.Errorf("logits: %w", err)
	}
	if err := checkThreads(*threads); err != nil {
		return fmt.Errorf("logits: %w", err)
	}
	dir, err := resolveModel(ctx, *name, stderr)
	if err != nil {
		return fmt.Errorf("logits: --model: %w", err)
	}
	backend, err := device.Open(*dev, *threads, *matmul)
	if err != nil {
		return fmt.Errorf("logits: %w", err)
	}
	defer backend.Close()
	m, err := model.Load(dir, model.Options{Backend: backend})
	if err != nil {
		return fmt.Errorf("logits: --model %s: %w", dir, err)
	}
	defer m.Close()
	vocab := m.Config().VocabSize
	for i, id := range ids {
		if id >= vocab {
			return fmt.Errorf("logits: --ids: id %d at index %d is not below the vocabulary size %d", id, i, vocab)
		}
	}
	s, err := m.NewSequence()
	if err != nil {
		return fmt.Errorf("logits: %w", err)
	}
	defer s.Close()

	w := bufio.NewWriter(stdout)
	var buf []byte
	emit := func(id int, row []float32) {
		buf = strconv.AppendInt(buf[:0], int64(id), 10)
		for _, v := range row {
			buf = append(buf, ' ')
			buf = strconv.AppendFloat(buf, float64(v), 'g', 6, 32)
		}
		buf = append(buf, '\n')
		w.Write(buf)
	}
	if *step {
		for _, id := range ids {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("logits: %w", err)
			}
			row, err := s.Forward([]int{id}, false)
			if err != nil {
				return fmt.Errorf("logits: %w", err)
			}
			emit(id, row)
		}
	} else {
		all, err := s.Forward(ids, true)
		if err != nil {
			return fmt.Errorf("logits: %w", err)
		}
		for i, id := range ids {
			emit(id, all[i*vocab:(i+1)*vocab])
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("logits: %w", err)
	}
	return nil
}

// parseIDs parses a comma-separated list of non-negative integers.
func parseIDs(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("no token ids given")
	}
	parts := strings.Split(s, ",")
	ids := make([]int, len(parts))
	for i, p := range parts {
		id, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("%q (item %d) is not an integer", p, i)
		}
		if id < 0 {
			return nil, fmt.Errorf("id %d (item %d) is negative", id, i)
		}
		ids[i] = id
	}
	return ids, nil
}
