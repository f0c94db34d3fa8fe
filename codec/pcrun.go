package codec

import (
	"encoding/binary"
	"fmt"

	"github.com/kakeya-ai/kakeya/kernels/cpu"
)

// A RunAttender is a RowCombiner whose blocks attention reads in runs: the
// scores of queries against a run of one KV head's consecutive encoded
// blocks, and the weighted sums of a run's value rows, each in a few
// kernel calls rather than several per block. The blocks of a run hold
// consecutive positions: src[j]'s row k is the run's row j*n + k. A run
// covers rows [r0, n) of src[0], [0, r1) of its last block and every row
// of those between (rows [r0, r1) of a run of one). An error need not say
// which block it is in: the one-block calls do.
type RunAttender interface {
	RowCombiner
	// RunSupported reports whether ScoreRun and AddWeightedRun run a
	// kernel for blocks of n rows of d values on this CPU; where they do
	// not, the one-block calls are as fast.
	RunSupported(n, d int) bool
	// CheckBlock checks one block of n rows of d values as the one-block
	// calls do before they decode it (header, sizes, CRC-32C, fields) and
	// returns their error.
	CheckBlock(src []byte, n, d int) error
	// ScoreRun sets s[i*lds + j*n + k] to scale times the product of
	// query row i (of the m rows of q, d values each) with row k of
	// src[j] decoded and rotated by RoPE at the run's row j*n + k (cos and
	// sin from row 0 of src[0] on, d/2 values a row), for the run's rows.
	// An error may leave some of them written. checked says that every
	// block of src passed CheckBlock and has not changed since: the run
	// may then skip the checks that read the whole block (the fixed-width
	// format's CRC-32C); the header, sizes and fields are checked still.
	// next, which may be nil, holds the blocks the caller reads after
	// these (the run's values): their bytes may be prefetched, never read.
	ScoreRun(s []float32, lds int, q []float32, m int, src [][]byte, n, d int, cos, sin []float32, scale float32, r0, r1 int, checked bool, next [][]byte) error
	// AddWeightedRun adds to dst[i*d:(i+1)*d], for each of the m weight
	// rows, the sum over the run's rows of w[i*wStride + j*n + k] times
	// row k of src[j] decoded. An error leaves dst as it was. checked is
	// ScoreRun's.
	AddWeightedRun(dst []float32, m int, w []float32, wStride int, src [][]byte, n, d int, r0, r1 int, checked bool) error
}

// pcRunChunk is the most blocks one kernel call of a run takes: their
// latents (format 9) or code planes and fields stay in cache between the
// check and the call.
const pcRunChunk = 16

// pcRunScratch is a run's memory: a chunk's code planes or latents and
// fields, the kernels' work and the value sums, reused through the
// codec's pool.
type pcRunScratch struct {
	planes          []byte
	lat, fields     []float32
	work            []float32
	acc, macc, wsum []float32
	out             []float32 // the one-block fallback's sums
	sc              [MaxBlocks]*pcScratch
	// The entropy-coded blocks' streams, decoded MaxBlocks at a time
	// (prepareLat): their lanes, tails and hidden means, and the fp16
	// bits of those means as bytes for WidenF16.
	r2  [MaxBlocks]rans2Scratch
	st  cpu.RANSStreams
	hid [MaxBlocks][rans2Lanes]uint16
	hb  [2 * rans2Lanes]byte
	// touch keeps prepareLat's reads of the blocks' cache lines.
	touch byte
	// pf holds the next chunk's blocks for the kernels to prefetch
	// (cpu.PCRun.Prefetch).
	pf []uintptr
}

// prefetchNext sets run.Prefetch to the blocks of src from j1 on that the
// next kernel call takes (at most pcRunChunk), or to none. The kernel
// prefetches a share of them with each of its blocks: their misses then
// overlap its arithmetic, where prepareLat's touch waited on them.
func (rs *pcRunScratch) prefetchNext(run *cpu.PCRun, src [][]byte, j1 int) {
	rs.pf = cpu.PrefetchPairs(rs.pf[:0], src[j1:min(len(src), j1+pcRunChunk)])
	run.Prefetch = rs.pf
}

func (k *KakeyaPC) runScratch() *pcRunScratch {
	if s, ok := k.runPool.Get().(*pcRunScratch); ok {
		return s
	}
	return new(pcRunScratch)
}

// RunSupported implements RunAttender.
func (k *KakeyaPC) RunSupported(n, d int) bool {
	return k.alloc != nil && d == k.d && cpu.PCRunSupported(n, d, len(k.codedIdx))
}

// checkRun checks a run's shape and rows.
func (k *KakeyaPC) checkRun(src [][]byte, n, d, r0, r1 int) error {
	if err := k.ready(n, d); err != nil {
		return err
	}
	nb := len(src)
	if nb == 0 || r0 < 0 || r0 >= n || r1 < 1 || r1 > n || nb == 1 && r0 >= r1 {
		return fmt.Errorf("codec: kakeya-pc: a run of %d blocks of %d rows from row %d to row %d of the last", nb, n, r0, r1)
	}
	return nil
}

// CheckBlock implements RunAttender.
func (k *KakeyaPC) CheckBlock(src []byte, n, d int) error {
	sc := k.scratch()
	err := k.parseFields(sc, src, n, d)
	sc.stream = nil
	k.pool.Put(sc)
	return err
}

// prepareRun checks the blocks of src (at most pcRunChunk) as Decode does,
// but for their CRC-32C when checked, and sets in rs, and
// in the PCRun it returns, what the kernels read of them: their fields
// widened and their code planes copied, or, entropy coded, their streams
// decoded to latents.
func (k *KakeyaPC) prepareRun(rs *pcRunScratch, src [][]byte, n, d int, checked bool) (cpu.PCRun, error) {
	nb, c, mc := len(src), len(k.codedIdx), len(k.meanIdx)
	run := cpu.PCRun{N: n, D: d, C: c, M: mc, Widths: k.width, Levels: &k.tab.plane, Mu: k.mean, MeanRows: k.meanRows, Coded: k.coded}
	rs.fields = growF32(rs.fields, nb*(mc+c))
	run.Fields = rs.fields[:nb*(mc+c)]
	if k.opt.Entropy {
		rs.lat = growF32(rs.lat, nb*c*n+pcLatRows(c)*n)
		run.Lat = rs.lat[:nb*c*n]
		if k.prepareLat(rs, &run, src, n, d, checked) {
			return run, nil
		}
		// Another stream layout, or a block the fast path would not
		// take: parseBlocks, which names what is wrong.
		return run, k.parseRun(rs, &run, src, n, d)
	}
	cb := k.codeBytes(n)
	size := headerLen + 6 + 2*mc + 2*c + cb
	var want [headerLen]byte
	appendHeader(want[:0], k.Format().ID, k.param(), n, d, k.tag)
	rs.planes = grow(rs.planes[:0], nb*cb)
	run.Planes, run.PlaneBytes = rs.planes[:nb*cb], cb
	for j, b := range src {
		ok := len(b) == size && [12]byte(b[:12]) == [12]byte(want[:12]) &&
			int(binary.LittleEndian.Uint16(b[16:])) == mc && int(binary.LittleEndian.Uint16(b[18:])) == c &&
			int(binary.LittleEndian.Uint16(b[20:])) == k.rowBits &&
			(checked || binary.LittleEndian.Uint32(b[12:]) == blockCRC(b)) &&
			cpu.WidenF16(run.Fields[j*(mc+c):(j+1)*(mc+c)], b[22:22+2*(mc+c)])
		if !ok {
			// The one-block check names what is wrong.
			err := k.CheckBlock(b, n, d)
			if err == nil {
				err = fmt.Errorf("codec: %s: block %d of a run is corrupt", k.Name(), j)
			}
			return run, err
		}
		copy(run.Planes[j*cb:(j+1)*cb], b[size-cb:])
	}
	return run, nil
}

// parseRun sets run.Lat and run.Fields from the entropy-coded blocks of
// src as prepareLat does, through parseBlocks: any stream layout, every
// check (the CRC-32C too), and parseBlocks' errors. The streams decode
// straight into run.Lat: each scratch's latents lent a block's stretch
// of rs.lat (with the pcLatRows slack parseFields asks for, which the
// next block's decode overwrites) and given back before the scratch
// goes back to the pool.
func (k *KakeyaPC) parseRun(rs *pcRunScratch, run *cpu.PCRun, src [][]byte, n, d int) error {
	nb, c, mc := len(src), len(k.codedIdx), len(k.meanIdx)
	for j0 := 0; j0 < nb; j0 += MaxBlocks {
		j1 := min(nb, j0+MaxBlocks)
		sc := k.scratches(&rs.sc, j1-j0)
		var own [MaxBlocks][]float32
		for j, s := range sc {
			own[j], s.lat = s.lat, rs.lat[(j0+j)*c*n:]
		}
		err := k.parseBlocks(sc, src[j0:j1], n, d)
		for j, s := range sc {
			if err == nil {
				f := run.Fields[(j0+j)*(mc+c):]
				copy(f[:mc], s.means[:mc])
				copy(f[mc:mc+c], s.scale[:c])
			}
			s.lat = own[j]
		}
		k.putScratches(sc)
		if err != nil {
			return err
		}
	}
	return nil
}

// prepareLat is prepareRun's path for entropy-coded blocks of stream
// layout 2, whose fields it checks in place and whose streams it decodes
// into run.Lat, MaxBlocks side by side: the checks and results of
// parseBlocks (the same header bytes, counts, lengths and finite fields,
// the CRC-32C unless checked, and the streams' own checks), without its
// scratches, base rows and field tables. It reports false where it did
// not finish (another layout, or any check failing): run.Lat and
// run.Fields are then partly written, and the caller goes block by block
// through parseBlocks, whose error names what is wrong.
func (k *KakeyaPC) prepareLat(rs *pcRunScratch, run *cpu.PCRun, src [][]byte, n, d int, checked bool) bool {
	nb, c, mc := len(src), len(k.codedIdx), len(k.meanIdx)
	hidden := rans2Hidden(mc)
	stored := mc - hidden
	head := headerLen + 8 + 2*(stored+c) // the header, info, means and scales
	var want [headerLen]byte
	appendHeader(want[:0], k.Format().ID, pcECLayout2, n, d, k.tag)
	var (
		out   [MaxBlocks][]float32
		codes [MaxBlocks][]byte
		scale [MaxBlocks][]float32
		hide  [MaxBlocks][]uint16
		r2    [MaxBlocks]*rans2Scratch
	)
	// Touch every cache line of the blocks first: their loads wait on
	// memory together rather than one block's header after another's
	// stream (the model's weights pass through the caches between two
	// steps' reads of a block).
	var touch byte
	for _, b := range src {
		for i := 0; i < len(b); i += 64 {
			touch ^= b[i]
		}
	}
	rs.touch = touch
	for j0 := 0; j0 < nb; j0 += MaxBlocks {
		j1 := min(nb, j0+MaxBlocks)
		for j := j0; j < j1; j++ {
			b := src[j]
			f := run.Fields[j*(mc+c) : (j+1)*(mc+c)]
			// The stored means and the scales are adjacent, as in Fields.
			if len(b) < head || [12]byte(b[:12]) != [12]byte(want[:12]) ||
				int(binary.LittleEndian.Uint16(b[16:])) != stored || int(binary.LittleEndian.Uint16(b[18:])) != c ||
				uint64(binary.LittleEndian.Uint32(b[20:])) != uint64(len(b)-head) ||
				!checked && binary.LittleEndian.Uint32(b[12:]) != blockCRC(b) ||
				!cpu.WidenF16(f[hidden:], b[headerLen+8:head]) {
				return false
			}
			i := j - j0
			out[i], codes[i], scale[i], hide[i], r2[i] = run.Lat[j*c*n:(j+1)*c*n], b[head:], f[mc:], rs.hid[i][:hidden], &rs.r2[i]
		}
		ns := j1 - j0
		var err error
		if ns == 1 {
			err = rans2Decode(out[0], codes[0], n, &k.plan2, scale[0], hide[0], r2[0])
		} else {
			_, err = rans2DecodeStreams(out[:ns], codes[:ns], n, &k.plan2, scale[:ns], hide[:ns], r2[:ns], &rs.st)
		}
		if err != nil {
			return false
		}
		// The means the lanes carried, widened and checked as the
		// stored ones.
		for j := j0; j < j1; j++ {
			for i, h := range hide[j-j0] {
				binary.LittleEndian.PutUint16(rs.hb[2*i:], h)
			}
			if !cpu.WidenF16(run.Fields[j*(mc+c):][:hidden], rs.hb[:2*hidden]) {
				return false
			}
		}
	}
	return true
}

// ScoreRun implements RunAttender: per block, the latents, the rows
// rebuilt and rotated and the scores, in one kernel call per pcRunChunk
// blocks, the bits of DecodeRotated and cpu.ScoreBlock block by block.
func (k *KakeyaPC) ScoreRun(s []float32, lds int, q []float32, m int, src [][]byte, n, d int, cos, sin []float32, scale float32, r0, r1 int, checked bool, next [][]byte) error {
	if err := k.checkRun(src, n, d, r0, r1); err != nil {
		return err
	}
	nb, h := len(src), d/2
	switch {
	case m <= 0 || len(q) < m*d:
		return fmt.Errorf("codec: kakeya-pc: %d query rows of %d from %d values", m, d, len(q))
	case lds < nb*n || len(s) < (m-1)*lds+(nb-1)*n+r1:
		return fmt.Errorf("codec: kakeya-pc: scores of %d rows (stride %d) over %d blocks of %d in %d values", m, lds, nb, n, len(s))
	case d%2 != 0 || len(cos) < nb*n*h || len(sin) < nb*n*h:
		return fmt.Errorf("codec: kakeya-pc: RoPE of %d blocks of %d rows of %d values with %d cosines and %d sines", nb, n, d, len(cos), len(sin))
	}
	rs := k.runScratch()
	defer k.runPool.Put(rs)
	rs.work = growF32(rs.work, cpu.PCRunWorkLen(n, d, len(k.codedIdx)))
	if !k.RunSupported(n, d) {
		// Block by block.
		rs.out = growF32(rs.out, n*d)
		for j, b := range src {
			lo, hi := runRows(j, j+1, nb, n, r0, r1)
			if err := k.DecodeRotated(rs.out[:n*d], b, n, d, cos[j*n*h:(j+1)*n*h], sin[j*n*h:(j+1)*n*h]); err != nil {
				return err
			}
			cpu.ScoreBlock(s[j*n+lo:], lds, q, m, rs.out[lo*d:hi*d], hi-lo, d, scale)
		}
		return nil
	}
	for j0 := 0; j0 < nb; j0 += pcRunChunk {
		j1 := min(nb, j0+pcRunChunk)
		run, err := k.prepareRun(rs, src[j0:j1], n, d, checked)
		if err != nil {
			return err
		}
		lo, hi := runRows(j0, j1, nb, n, r0, r1)
		if j1 < nb {
			rs.prefetchNext(&run, src, j1)
		} else {
			rs.prefetchNext(&run, next, 0) // the run's last call: what the caller reads next
		}
		cpu.PCScoreRun(&run, j1-j0, s[j0*n:], lds, q, m, scale, cos[j0*n*h:], sin[j0*n*h:], lo, hi, rs.work)
	}
	return nil
}

// AddWeightedRun implements RunAttender: the weighted sums of every
// block's latents, means and weights, in one kernel call per pcRunChunk
// blocks, then one product with the basis rows for the whole run. The
// sums run in another order than AddWeighted's, block by block: the
// results agree within rounding, not bit for bit.
func (k *KakeyaPC) AddWeightedRun(dst []float32, m int, w []float32, wStride int, src [][]byte, n, d int, r0, r1 int, checked bool) error {
	if err := k.checkRun(src, n, d, r0, r1); err != nil {
		return err
	}
	nb, c, mc := len(src), len(k.codedIdx), len(k.meanIdx)
	switch {
	case m <= 0 || len(dst) < m*d:
		return fmt.Errorf("codec: kakeya-pc: %d weight rows need %d destination values, have %d", m, m*d, len(dst))
	case wStride < nb*n || len(w) < (m-1)*wStride+(nb-1)*n+r1:
		return fmt.Errorf("codec: kakeya-pc: %d weight rows (stride %d) over %d blocks of %d in %d values", m, wStride, nb, n, len(w))
	}
	rs := k.runScratch()
	defer k.runPool.Put(rs)
	if !k.RunSupported(n, d) {
		// Block by block, into a copy of dst.
		rs.out = growF32(rs.out, m*d)
		out := rs.out[:m*d]
		copy(out, dst[:m*d])
		for j, b := range src {
			lo, hi := runRows(j, j+1, nb, n, r0, r1)
			if err := k.AddWeighted(out, m, w[j*n:], wStride, b, n, d, lo, hi); err != nil {
				return err
			}
		}
		copy(dst, out)
		return nil
	}
	rs.work = growF32(rs.work, cpu.PCRunWorkLen(n, d, c))
	rs.acc = growF32(rs.acc, cpu.PCRunAccLen(m, c))
	rs.macc = growF32(rs.macc, m*mc)
	rs.wsum = growF32(rs.wsum, m)
	acc, macc, wsum := rs.acc[:cpu.PCRunAccLen(m, c)], rs.macc[:m*mc], rs.wsum[:m]
	clear(acc)
	clear(macc)
	clear(wsum)
	var run cpu.PCRun
	for j0 := 0; j0 < nb; j0 += pcRunChunk {
		j1 := min(nb, j0+pcRunChunk)
		var err error
		if run, err = k.prepareRun(rs, src[j0:j1], n, d, checked); err != nil {
			return err
		}
		lo, hi := runRows(j0, j1, nb, n, r0, r1)
		rs.prefetchNext(&run, src, j1)
		cpu.PCAddRun(&run, j1-j0, w[j0*n:], wStride, m, lo, hi, acc, macc, wsum, rs.work)
	}
	cpu.PCAddRunEnd(&run, dst, m, acc, macc, wsum)
	return nil
}

// runRows returns the rows [lo, hi) of blocks j0 to j1 of a run of nb
// blocks of n rows that a call reads: every row, but for the run's first
// block, which starts at r0, and its last, which ends at r1.
func runRows(j0, j1, nb, n, r0, r1 int) (lo, hi int) {
	lo, hi = 0, n
	if j0 == 0 {
		lo = r0
	}
	if j1 == nb {
		hi = r1
	}
	return lo, hi
}
