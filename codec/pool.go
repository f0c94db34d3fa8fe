package codec

import "sync"

// scratch is per-call working memory, recycled through a codec's pool so
// steady-state Encode and Decode calls allocate nothing.
type scratch struct {
	f      []float32
	u8     []uint8
	params []float32 // Int4's widened (min, step) pairs; while encoding, its groups' minima and least steps
	group  []float32 // Int4: one group's values while its parameters are chosen
}

type scratchPool struct{ p sync.Pool }

func (sp *scratchPool) get() *scratch {
	if s, ok := sp.p.Get().(*scratch); ok {
		return s
	}
	return new(scratch)
}

func (sp *scratchPool) put(s *scratch) { sp.p.Put(s) }

func growF32(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

func growF64(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}

func growU8(s []uint8, n int) []uint8 {
	if cap(s) < n {
		return make([]uint8, n)
	}
	return s[:n]
}

func growI32(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}
