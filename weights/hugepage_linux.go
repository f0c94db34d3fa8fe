package weights

import "syscall"

// adviseHugePages asks the kernel to back the mapping with 2 MiB pages
// where it can: pages faulted in from disk then arrive as huge page-cache
// folios (on a cold cache, 940 MiB of a 942 MiB checkpoint were
// PMD-mapped, against 900 without the advice), and decode, which streams
// every weight once per token, misses the TLB less. A kernel without
// transparent huge pages refuses the advice; the mapping works the same.
func adviseHugePages(data []byte) {
	_ = syscall.Madvise(data, syscall.MADV_HUGEPAGE)
}
