package cudabackend

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/kakeya-ai/kakeya/compute"
)

var _ compute.Draw = (*Backend)(nil)

// The kernel reads compute.DrawRow as its kk_draw_row: 16 bytes, u,
// temperature, min-p.
var _ [16 - unsafe.Sizeof(compute.DrawRow{})]struct{}
var _ [unsafe.Sizeof(compute.DrawRow{}) - 16]struct{}

// Draw draws each row's sampled token on the device (compute.Draw): one
// draw_rows kernel, queued like argmax at the end of the step, its rows'
// parameters in the step's parameter slots (16 bytes a row, copied with
// the step's other slots, so a decode step's graph ends with the draw and
// replays with new uniforms), then 8 bytes per row read back rather than
// the row's logits.
func (b *Backend) Draw(ids, bad []int, x compute.Buffer, cols int, rows []compute.DrawRow) {
	n := len(ids)
	if len(bad) != n || len(rows) != n || cols <= 0 || x.Len < n*cols {
		panic(fmt.Sprintf("cuda: Draw of %d rows of %d values (%d bad indexes, %d draws) over a buffer of %d", n, cols, len(bad), len(rows), x.Len))
	}
	for i, r := range rows {
		if !(r.Temperature >= 0) || math.IsInf(float64(r.Temperature), 1) || !(r.U >= 0 && r.U < 1) || !(r.MinP >= 0 && r.MinP <= 1) {
			panic(fmt.Sprintf("cuda: Draw row %d: temperature %v, min-p %v, uniform %v (want >= 0 and finite, in [0, 1], in [0, 1))", i, r.Temperature, r.MinP, r.U))
		}
	}
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pickRows(n)
	recs := unsafe.Slice((*byte)(unsafe.Pointer(&rows[0])), 16*n)
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
			p, err := b.allocRaw(16 * max(n, 8))
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
	b.enqueue(drawLaunch(b.pickDev, ptr(x), params, n, cols), dynamic)
	b.readPicks(ids, bad)
}
