//go:build !(cgo && linux)

package cudabackend

import (
	"fmt"
	"runtime"
)

// openDriver fails: the driver library is opened through cgo, on Linux.
func openDriver(int, []byte) (driver, error) {
	return nil, fmt.Errorf("cuda: the CUDA backend needs cgo on linux (this binary is %s/%s, built with CGO_ENABLED=0 or without a C compiler)", runtime.GOOS, runtime.GOARCH)
}
