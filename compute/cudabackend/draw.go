package cudabackend

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/kakeya-ai/kakeya/compute"
)

var _ compute.Draw = (*Backend)(nil)

// The kernel reads compute.DrawRow as its kk_draw_row: 32 bytes, u,
// temperature, min-p, top-p, top-k and 8 bytes of padding (two step
// parameter slots).
var _ [drawRowBytes - unsafe.Sizeof(compute.DrawRow{})]struct{}
var _ [unsafe.Sizeof(compute.DrawRow{}) - drawRowBytes]struct{}

const drawRowBytes = 32

// Draw draws each row's sampled token on the device (compute.Draw): one
// draw_rows kernel (or, for a few rows of a large vocabulary, the pair
// draw_split_max and draw_split, a row over several blocks), queued like
// argmax at the end of the step, its rows' parameters in the step's
// parameter slots (32 bytes a row, copied with
// the step's other slots, so a decode step's graph ends with the draw and
// replays with new uniforms), then 8 bytes per row read back rather than
// the row's logits.
func (b *Backend) Draw(ids, bad []int, x compute.Buffer, cols int, rows []compute.DrawRow) {
	n := len(ids)
	if len(bad) != n || len(rows) != n || cols <= 0 || x.Len < n*cols {
		panic(fmt.Sprintf("cuda: Draw of %d rows of %d values (%d bad indexes, %d draws) over a buffer of %d", n, cols, len(bad), len(rows), x.Len))
	}
	for i, r := range rows {
		if !(r.Temperature >= 0) || math.IsInf(float64(r.Temperature), 1) || !(r.U >= 0 && r.U < 1) || !(r.MinP >= 0 && r.MinP <= 1) || !(r.TopP >= 0 && r.TopP <= 1) {
			panic(fmt.Sprintf("cuda: Draw row %d: temperature %v, min-p %v, top-p %v, uniform %v (want >= 0 and finite, in [0, 1], in [0, 1], in [0, 1))", i, r.Temperature, r.MinP, r.TopP, r.U))
		}
		if r.TopK < 0 || r.TopK > compute.MaxDrawTopK && int(r.TopK) < cols {
			panic(fmt.Sprintf("cuda: Draw row %d: top-k %d of a row of %d (want 0, at most %d, or at least the row)", i, r.TopK, cols, compute.MaxDrawTopK))
		}
	}
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pickRows(n)
	// The scratch first: allocating it flushes, which would drop step
	// slots taken before.
	parts, ps := b.drawSplit(n, cols)
	// Room for any top-k, so that the pair's arguments do not change
	// with the rows' filters and a step's graph replays.
	const kmax = compute.MaxDrawTopK
	split := parts > 1 && b.splitScratch(n, max(n, splitMaxRows)*splitStride(parts, kmax))
	recs := unsafe.Slice((*byte)(unsafe.Pointer(&rows[0])), drawRowBytes*n)
	params, dynamic := b.stepSlots(recs), false
	if params == 0 && b.err == nil {
		// No room in the step's slots: the rows go to an array of their
		// own, after the queued work, and the launch with them.
		b.flush()
		if b.err == nil && b.drawCap < n {
			if b.drawDev != 0 {
				b.freeLater(b.drawDev)
			}
			b.drawDev, b.drawCap = 0, 0
			p, err := b.allocRaw(drawRowBytes * max(n, 8))
			if err != nil {
				b.fail(fmt.Errorf("cuda: Draw of %d rows: %w", n, err))
			} else {
				b.drawDev, b.drawCap = p, max(n, 8)
			}
		}
		if b.err == nil {
			b.fail(b.copyInNoWait(b.drawDev, recs))
		}
		params, dynamic = b.drawDev, true
	}
	if split {
		ls := drawSplitLaunches(b.pickDev, ptr(x), params, b.splitDev, b.splitCounts, n, cols, parts, ps, kmax)
		b.enqueue(ls[0], false)
		b.enqueue(ls[1], dynamic)
	} else {
		b.enqueue(drawLaunch(b.pickDev, ptr(x), params, n, cols), dynamic)
	}
	keep(x) // enqueue may flush and free (see keep)
	b.readPicks(ids, bad)
}

// A row of at least splitMinCols tokens, in a draw of at most
// splitMaxRows rows, is spread over up to splitMaxParts blocks of at
// least splitPartCols tokens: a single sequence's draw at Qwen2.5's
// vocabulary takes 32 blocks rather than one SM (see docs/cuda.md).
const (
	splitMinCols  = 32768
	splitMaxRows  = 4
	splitMaxParts = 32
	splitPartCols = 4096
)

// drawSplit returns how many blocks draw each of rows rows of cols
// tokens, and the tokens of each but the last block (a multiple of 32,
// so that no 128-byte line holds two parts), or 1 and cols for one block
// a row (draw_rows).
func (b *Backend) drawSplit(rows, cols int) (parts, ps int) {
	parts = b.drawParts
	if parts == 0 {
		if rows > splitMaxRows || cols < splitMinCols {
			return 1, cols
		}
		parts = min(splitMaxParts, cols/splitPartCols)
	}
	ps = (cols + parts - 1) / parts
	ps = (ps + 31) &^ 31
	return (cols + ps - 1) / ps, ps
}

// splitScratch makes room for bytes of draw_split's scratch at splitDev
// and rows rows' counters at splitCounts (zeroed when allocated), and
// reports whether it has. Called with mu held, before the draw takes
// step slots: allocating flushes the queue.
func (b *Backend) splitScratch(rows, bytes int) bool {
	grow := func(p *Ptr, c *int, need, zero int, what string) {
		if b.err != nil || *c >= need {
			return // what is a constant: no formatting on this path
		}
		b.flush() // queued launches may use the old one
		if *p != 0 {
			b.freeLater(*p)
		}
		*p, *c = 0, 0
		q, err := b.allocRaw(zero)
		if err == nil {
			err = b.drv.zero(q, zero)
		}
		if err != nil {
			b.fail(fmt.Errorf("cuda: Draw's %s of %d bytes: %w", what, zero, err))
			return
		}
		*p, *c = q, need
	}
	grow(&b.splitDev, &b.splitCap, bytes, bytes, "scratch")
	rows = max(rows, splitMaxRows)
	grow(&b.splitCounts, &b.splitRows, rows, 8*rows, "row counters")
	return b.err == nil
}
