//go:build !linux

package weights

// adviseHugePages does nothing where madvise has no huge-page advice.
func adviseHugePages([]byte) {}
