package cudabackend

import (
	"fmt"

	"github.com/kakeya-ai/kakeya/compute"
)

var _ compute.Greedy = (*Backend)(nil)

// ArgMax picks each row's greedy token on the device (compute.Greedy):
// one argmax kernel, queued like the step's other static launches so that
// a decode step's graph ends with it, then 8 bytes per row read back
// rather than the row's logits.
func (b *Backend) ArgMax(ids, bad []int, x compute.Buffer, cols int) {
	rows := len(ids)
	if len(bad) != rows || cols <= 0 || x.Len < rows*cols {
		panic(fmt.Sprintf("cuda: ArgMax of %d rows of %d values (%d bad indexes) over a buffer of %d", rows, cols, len(bad), x.Len))
	}
	if rows == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pickRows(rows)
	b.enqueue(argMaxLaunch(b.pickDev, ptr(x), rows, cols), false)
	keep(x) // enqueue may flush and free (see keep)
	b.readPicks(ids, bad)
}

// pickRows makes room for rows rows' picks at pickDev. Called with mu
// held.
func (b *Backend) pickRows(rows int) {
	if b.err == nil && b.pickCap < rows {
		if b.pickDev != 0 {
			b.freeLater(b.pickDev) // queued work may still write it
		}
		b.pickDev, b.pickCap = 0, 0
		p, err := b.allocRaw(8 * max(rows, 8))
		if err != nil {
			b.fail(fmt.Errorf("cuda: picks of %d rows: %w", rows, err))
		} else {
			b.pickDev, b.pickCap = p, max(rows, 8)
		}
	}
}

// readPicks gives the queue to the driver and reads back len(ids) rows'
// picks (token, first non-finite index) from pickDev; -1 after a
// failure. Called with mu held.
func (b *Backend) readPicks(ids, bad []int) {
	rows := len(ids)
	if cap(b.picks) < 2*rows {
		b.picks = make([]int32, 2*rows)
	}
	picks := b.picks[:2*rows]
	if b.err == nil {
		b.flush()
		b.fail(b.drv.copyOut(bytesOf(picks), b.pickDev))
		if b.err == nil {
			b.waited()
		}
		if b.err == nil {
			b.freePending() // the stream is idle
		}
	}
	for i := range rows {
		ids[i], bad[i] = -1, -1
		if b.err == nil {
			ids[i], bad[i] = int(picks[2*i]), int(picks[2*i+1])
		}
	}
}
