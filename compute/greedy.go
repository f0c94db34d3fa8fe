package compute

// Greedy is implemented by a backend that picks greedy tokens on its
// device: only each row's token id, and where its first non-finite value
// is, cross back to the host, not the row's logits. The model uses it for
// the rows whose next token is their arg max (temperature-0 generation);
// a backend without it has its logits read back and the arg max taken on
// the host, with the same result.
type Greedy interface {
	// ArgMax sets ids[i] to the index of the largest value of row i of x
	// (len(ids) rows of cols values): NaN skipped, the first of equal
	// largest values, -1 for a row of NaN only, as pick.ArgMax
	// picks. It sets bad[i] (len(bad) == len(ids)) to the index of the
	// row's first NaN or ±Inf, -1 if none. Like Backend.Read it waits for
	// the work queued before; after a recorded failure (see Err) ids and
	// bad hold -1 and are not results.
	ArgMax(ids, bad []int, x Buffer, cols int)
}
