package compute

// DrawRow is one row's draw for Draw: the request's temperature (> 0;
// 0 picks the row's arg max, as Greedy, so that a step of greedy and
// sampled rows is one draw), min-p (0 = off), top-p (0 or 1 = off) and
// top-k (0 or at least the row = off; at most MaxDrawTopK otherwise), and
// U, a uniform number in [0, 1) that the host drew from the request's own
// generator, so that a seeded request draws the same tokens on every
// backend and the device keeps no random state. It is 32 bytes, the
// layout the CUDA kernel reads.
type DrawRow struct {
	U           float64
	Temperature float32
	MinP        float32
	TopP        float32
	TopK        int32
	_           [8]byte // to 32 bytes, two step parameter slots
}

// MaxDrawTopK is the largest top-k below the row a Draw takes: a draw's
// k candidates are sorted in a block's shared memory.
const MaxDrawTopK = 1024

// Draw is implemented by a backend that draws sampled tokens on its
// device, as Greedy picks greedy ones: only each row's token id, and
// where its first non-finite value is, cross back to the host, not the
// row's logits. The model uses it for rows sampled at a temperature with
// min-p, top-p and a top-k of at most MaxDrawTopK; a backend without it
// has its logits read back and sampled on the host (pick.DrawFiltered).
type Draw interface {
	// Draw sets ids[i] to the token drawn from row i of x (len(ids) rows
	// of cols values) with rows[i] as pick.DrawFiltered draws it (the
	// host Sampler's draw), its arg max at temperature 0. With a top-k
	// the token is pick.DrawFiltered's exactly (the same arithmetic in
	// the same order). Otherwise the weights are pick.DrawFiltered's bit
	// for bit, but their sums may be associated differently, so a token
	// may differ from the host's only where U times the kept total, or
	// top-p times the total, falls within a float64 rounding of a
	// boundary between two tokens. ids[i] is -1 for a row of NaN only. It
	// sets bad[i] to the index of the row's first NaN or ±Inf, -1 if
	// none, as Greedy.ArgMax; a row with NaN may draw another token than
	// the host (a step that reports one is an error). A row with top-p
	// and no top-k has its values in x overwritten (with its weights). It
	// waits for the work queued before; after a recorded failure (see
	// Err) ids and bad hold -1 and are not results.
	Draw(ids, bad []int, x Buffer, cols int, rows []DrawRow)
}
