package device

import (
	"fmt"
	"sync/atomic"

	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/compute/cudabackend"
	"github.com/kakeya-ai/kakeya/tensor"
)

// Counts are what a backend was asked to do since counting began.
type Counts struct {
	// Ops is kernel launches on a CUDA device (launched one by one or
	// inside replayed graphs), or the seam's operations on other backends
	// (compute.Backend's Embed, MatMul, RMSNorm, AddRows, Add, SiLUMul and
	// RoPE, compute.ArchOps', and attention's Forward).
	Ops int64
	// DriverCalls is the host's calls into the CUDA driver (kernel and
	// graph launches, copies, waits); 0 where there is no driver.
	DriverCalls int64
	// Driver says whether DriverCalls was counted.
	Driver bool
}

// Count starts counting what b is asked to do and returns the backend to
// use in its place (b itself for a CUDA backend, which counts its driver
// calls; a counting wrapper for others) and a function returning the
// counts so far. Call it before loading the model, so that a CUDA
// backend's graphs are captured while counting.
func Count(b compute.Backend) (compute.Backend, func() Counts) {
	if c, ok := b.(*cudabackend.Backend); ok {
		c.Launches()
		return b, func() Counts {
			s := c.Launches()
			return Counts{Ops: s.Kernels + s.GraphKernels, DriverCalls: s.Calls() + s.CopiesIn + s.CopiesOut + s.Syncs, Driver: true}
		}
	}
	w := &counting{Backend: b}
	counts := func() Counts { return Counts{Ops: w.ops.Load()} }
	// The optional interfaces Gemma's models need, kept where b has them.
	a, arch := b.(compute.ArchOps)
	_, sliding := b.(compute.SlidingKV)
	switch {
	case arch && sliding:
		return &countingSliding{countingArch{w, a}}, counts
	case arch:
		return &countingArch{w, a}, counts
	}
	return w, counts
}

// countingArch is a counting backend with the compute.ArchOps of the
// backend it wraps, counted as seam operations too.
type countingArch struct {
	*counting
	arch compute.ArchOps
}

func (c *countingArch) Scale(x compute.Buffer, s float32) {
	c.ops.Add(1)
	c.arch.Scale(x, s)
}

func (c *countingArch) GELUTanhMul(gate, up compute.Buffer) {
	c.ops.Add(1)
	c.arch.GELUTanhMul(gate, up)
}

func (c *countingArch) Softcap(x compute.Buffer, cap float32) {
	c.ops.Add(1)
	c.arch.Softcap(x, cap)
}

// countingSliding is a countingArch whose backend's attention lets a cache
// release what slid out of a window (compute.SlidingKV).
type countingSliding struct{ countingArch }

// SlidingKV marks the wrapped backend's compute.SlidingKV.
func (c *countingSliding) SlidingKV() {}

// counting is a backend that counts its seam operations. It keeps the
// optional interfaces the CPU backend has (compute.Preparer,
// compute.Describer; compute.ArchOps and compute.SlidingKV through
// countingArch and countingSliding).
type counting struct {
	compute.Backend
	ops atomic.Int64
}

func (c *counting) Embed(out compute.Buffer, table compute.Weight, ids []int) {
	c.ops.Add(1)
	c.Backend.Embed(out, table, ids)
}

func (c *counting) MatMul(out, x compute.Buffer, n int, w compute.Weight) {
	c.ops.Add(1)
	c.Backend.MatMul(out, x, n, w)
}

func (c *counting) RMSNorm(out, x, w compute.Buffer, rows int, eps float32) {
	c.ops.Add(1)
	c.Backend.RMSNorm(out, x, w, rows, eps)
}

func (c *counting) AddRows(x, bias compute.Buffer, rows int) {
	c.ops.Add(1)
	c.Backend.AddRows(x, bias, rows)
}

func (c *counting) Add(x, y compute.Buffer) {
	c.ops.Add(1)
	c.Backend.Add(x, y)
}

func (c *counting) SiLUMul(gate, up compute.Buffer) {
	c.ops.Add(1)
	c.Backend.SiLUMul(gate, up)
}

func (c *counting) RoPE(x compute.Buffer, rows, heads, d, start int, cos, sin compute.Buffer) {
	c.ops.Add(1)
	c.Backend.RoPE(x, rows, heads, d, start, cos, sin)
}

func (c *counting) NewAttention(p compute.AttentionParams) (compute.Attention, error) {
	a, err := c.Backend.NewAttention(p)
	if err != nil {
		return nil, err
	}
	return countingAttention{a, &c.ops}, nil
}

// Prepare forwards to the backend's compute.Preparer, if it has one.
func (c *counting) Prepare(w compute.Weight) bool {
	if p, ok := c.Backend.(compute.Preparer); ok {
		return p.Prepare(w)
	}
	return false
}

// Interleaved forwards to the backend's compute.Interleaver, if it has
// one (nil otherwise: the rows are uploaded as stored).
func (c *counting) Interleaved(d tensor.DType, rows, cols int) *tensor.InterleavedFormat {
	if iv, ok := c.Backend.(compute.Interleaver); ok {
		return iv.Interleaved(d, rows, cols)
	}
	return nil
}

// UploadInterleaved forwards to the backend's compute.Interleaver.
func (c *counting) UploadInterleaved(m tensor.Mat, f *tensor.InterleavedFormat) (compute.Weight, error) {
	if iv, ok := c.Backend.(compute.Interleaver); ok {
		return iv.UploadInterleaved(m, f)
	}
	return nil, fmt.Errorf("device: %s reads no interleaved layout (%s)", c.Name(), f.Name)
}

// Describe forwards to the backend's compute.Describer, if it has one.
func (c *counting) Describe() string {
	if d, ok := c.Backend.(compute.Describer); ok {
		return d.Describe()
	}
	return c.Name()
}

// countingAttention counts an attention's Forward calls.
type countingAttention struct {
	compute.Attention
	ops *atomic.Int64
}

func (a countingAttention) Forward(out, q compute.Buffer, n, start int, kv compute.KVLayer, cos, sin compute.Buffer) error {
	a.ops.Add(1)
	return a.Attention.Forward(out, q, n, start, kv, cos, sin)
}
