package model

// This file holds the small exported methods that the packages built on
// model (the kakeya Engine, calibrate) need beyond the forward pass.

// CheckOpen returns an error matching ErrClosed once Close has begun, and
// nil before. It lets work that precedes the first forward pass, such as
// tokenizing a prompt, fail early on a closed model.
func (m *Model) CheckOpen() error { return m.checkOpen() }

// KVBlock returns the keys (before RoPE) and values of KV head kvHead of
// layer in the cache block numbered block, read back from the backend and
// decoded to float32: the block's BlockSize rows of head_dim values each,
// in new slices. Once the sequence is closed KVBlock returns an error
// matching ErrClosed. A block a sliding layer released is an error: make
// the sequence with SequenceOptions.KeepAll to read every block.
func (s *Sequence) KVBlock(layer, kvHead, block int) (k, v []float32, err error) {
	if s.cache == nil {
		return nil, nil, errSequenceClosed
	}
	n := s.cache.BlockSize() * s.m.headDim
	k, v = make([]float32, n), make([]float32, n)
	if err := s.cache.Read(k, layer, kvHead, block, 0); err != nil {
		return nil, nil, err
	}
	if err := s.cache.Read(v, layer, kvHead, block, 1); err != nil {
		return nil, nil, err
	}
	return k, v, nil
}
