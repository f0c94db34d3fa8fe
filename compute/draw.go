package compute

// DrawRow is one row's draw for Draw: the request's temperature (> 0;
// 0 picks the row's arg max, as Greedy, so that a step of greedy and
// sampled rows is one draw) and min-p (0 = off), and U, a uniform number in [0, 1) that the host
// drew from the request's own generator, so that a seeded request draws
// the same tokens on every backend and the device keeps no random state.
// It is 16 bytes, the layout the CUDA kernel reads.
type DrawRow struct {
	U           float64
	Temperature float32
	MinP        float32
}

// Draw is implemented by a backend that draws sampled tokens on its
// device, as Greedy picks greedy ones: only each row's token id, and
// where its first non-finite value is, cross back to the host, not the
// row's logits. The model uses it for rows sampled at a temperature with
// min-p and neither top-k nor top-p (the OpenAI default, top_p = 1); a
// backend without it, or a row with top-k or top-p, has its logits read
// back and sampled on the host.
type Draw interface {
	// Draw sets ids[i] to the token drawn from row i of x (len(ids) rows
	// of cols values) with rows[i] as pick.Draw draws it (the host
	// Sampler's draw without top-k and top-p), its arg max at temperature
	// 0. The weights are pick.Draw's bit for bit, but their sum may be
	// associated differently, so a token may differ from pick.Draw's
	// only where U times the total falls within a float64 rounding of the
	// boundary between two tokens. ids[i] is -1 for a row of NaN only.
	// It sets bad[i] to the index of the row's first NaN or ±Inf, -1 if
	// none, as Greedy.ArgMax. It waits for the work queued before; after
	// a recorded failure (see Err) ids and bad hold -1 and are not
	// results.
	Draw(ids, bad []int, x Buffer, cols int, rows []DrawRow)
}
