package weights

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/kakeya-ai/kakeya/internal/outfile"
	"github.com/kakeya-ai/kakeya/tensor"
)

// F32Tensor builds an F32 tensor holding vals.
func F32Tensor(name string, shape []int, vals []float32) Tensor {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return Tensor{Name: name, DType: tensor.F32, Shape: slices.Clone(shape), Data: b}
}

// BF16Tensor builds a BF16 tensor holding vals rounded to nearest even.
func BF16Tensor(name string, shape []int, vals []float32) Tensor {
	b := make([]byte, 2*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint16(b[2*i:], tensor.F32ToBF16(v))
	}
	return Tensor{Name: name, DType: tensor.BF16, Shape: slices.Clone(shape), Data: b}
}

// F16Tensor builds an F16 tensor holding vals rounded to nearest even.
func F16Tensor(name string, shape []int, vals []float32) Tensor {
	b := make([]byte, 2*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint16(b[2*i:], tensor.F32ToF16(v))
	}
	return Tensor{Name: name, DType: tensor.F16, Shape: slices.Clone(shape), Data: b}
}

// WriteFile writes tensors and metadata as a safetensors file, as
// outfile.Write does: a regular file appears complete under path or not at
// all. The header lists the
// tensors in the order given; their data is laid out widest dtype first (in
// the given order within a width), which keeps every tensor naturally
// aligned without the gaps the reference implementation rejects.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	seen := make(map[string]bool, len(tensors))
	for i := range tensors {
		t := &tensors[i]
		switch {
		case t.Name == "":
			return fmt.Errorf("weights: %s: tensor %d has no name", path, i)
		case t.Name == "__metadata__":
			return fmt.Errorf("weights: %s: tensor name %q is reserved", path, t.Name)
		case seen[t.Name]:
			return fmt.Errorf("weights: %s: duplicate tensor %q", path, t.Name)
		}
		seen[t.Name] = true
		if err := t.check(); err != nil {
			return fmt.Errorf("weights: %s: %w", path, err)
		}
	}

	order := make([]int, len(tensors))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		return tensors[order[a]].DType.Size() > tensors[order[b]].DType.Size()
	})
	begins := make([]int64, len(tensors))
	var off int64
	for _, i := range order {
		begins[i] = off
		off += int64(len(tensors[i].Data))
	}

	var hb bytes.Buffer
	hb.WriteByte('{')
	if len(metadata) > 0 {
		m, err := json.Marshal(metadata)
		if err != nil {
			return fmt.Errorf("weights: %s: metadata: %w", path, err)
		}
		hb.WriteString(`"__metadata__":`)
		hb.Write(m)
	}
	for i := range tensors {
		t := &tensors[i]
		if hb.Len() > 1 {
			hb.WriteByte(',')
		}
		name, err := json.Marshal(t.Name)
		if err != nil {
			return fmt.Errorf("weights: %s: tensor name: %w", path, err)
		}
		hb.Write(name)
		hb.WriteString(`:{"dtype":"`)
		hb.WriteString(t.DType.String())
		hb.WriteString(`","shape":[`)
		for j, d := range t.Shape {
			if j > 0 {
				hb.WriteByte(',')
			}
			hb.WriteString(strconv.Itoa(d))
		}
		hb.WriteString(`],"data_offsets":[`)
		hb.WriteString(strconv.FormatInt(begins[i], 10))
		hb.WriteByte(',')
		hb.WriteString(strconv.FormatInt(begins[i]+int64(len(t.Data)), 10))
		hb.WriteString("]}")
	}
	hb.WriteByte('}')
	// Pad with spaces so the data section starts 8-byte aligned.
	for (8+hb.Len())%8 != 0 {
		hb.WriteByte(' ')
	}

	err := outfile.Write(path, func(f io.Writer) error {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(hb.Len()))
		if _, err := f.Write(n[:]); err != nil {
			return err
		}
		if _, err := f.Write(hb.Bytes()); err != nil {
			return err
		}
		for _, i := range order {
			if _, err := f.Write(tensors[i].Data); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	return nil
}
