package compute

// hostMemory is an allocation in the host's memory, shared by the backends
// that run there (the CPU's and the reference) and by the host attention.
type hostMemory struct{ f []float32 }

func (m *hostMemory) Floats() int { return len(m.f) }

// Wrap returns a buffer over the host values f, shared, not copied.
func Wrap(f []float32) Buffer {
	return Buffer{Mem: &hostMemory{f: f}, Len: len(f)}
}

// Host returns the values of a buffer in host memory (one made by Wrap).
// It panics for a device's buffer: passing one is a programming error.
func Host(b Buffer) []float32 {
	return b.Mem.(*hostMemory).f[b.Off : b.Off+b.Len : b.Off+b.Len]
}
