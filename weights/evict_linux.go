package weights

import (
	"os"
	"syscall"
	"unsafe"
)

// evict advises the kernel that the mapped pages wholly inside b are not
// needed: for a read-only file mapping that drops them from the resident
// set, their contents safe in the page cache and the file.
func evict(b []byte) {
	page := uintptr(os.Getpagesize())
	if len(b) == 0 {
		return
	}
	addr := uintptr(unsafe.Pointer(&b[0]))
	lo := int((page - addr%page) % page)
	hi := lo + (len(b)-lo)/int(page)*int(page)
	if hi-lo >= int(page) {
		_ = syscall.Madvise(b[lo:hi], syscall.MADV_DONTNEED)
	}
}
