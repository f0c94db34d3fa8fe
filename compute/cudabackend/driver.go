package cudabackend

import (
	"errors"
	"fmt"

	"github.com/kakeya-ai/kakeya/tensor"
)

// driver is the part of the CUDA driver API the backend uses, behind an
// interface so that the host logic runs in tests against a fake whose
// "device" is host memory and whose kernels are the CPU emulation of the
// real ones. Work goes to one stream in the order of the calls. A driver is
// not safe for concurrent use: the backend serialises every call.
type driver interface {
	// info describes the device.
	info() deviceInfo
	// alloc returns bytes bytes of device memory; free gives them back.
	alloc(bytes int) (Ptr, error)
	free(p Ptr) error
	// zero sets bytes bytes at p to zero, in stream order.
	zero(p Ptr, bytes int) error
	// copyIn copies src to dst after the work queued before it and before
	// the work queued after; src may be reused once copyIn returns. It
	// waits for the work queued before it (cuMemcpyHtoD from pageable
	// memory).
	copyIn(dst Ptr, src []byte) error
	// hostStage returns bytes bytes of host memory that copyInAsync copies
	// from (page-locked on a GPU), alive until close; an error where the
	// driver has none (the backend then copies in synchronously).
	hostStage(bytes int) ([]byte, error)
	// copyInAsync copies src, which lies in hostStage's memory, to dst
	// after the work queued before it and before the work queued after,
	// without waiting for either: src must stay unchanged until the stream
	// has passed the copy (until a copyOut or sync returns).
	copyInAsync(dst Ptr, src []byte) error
	// copyOut waits for the work queued before it and copies the device
	// bytes at src to dst.
	copyOut(dst []byte, src Ptr) error
	// copyDevice copies bytes bytes from src to dst in stream order.
	copyDevice(dst, src Ptr, bytes int) error
	// launch queues the kernel launches in order.
	launch(ls []Launch) error
	// sync waits for all queued work.
	sync() error
	// capture records the launches into an executable graph without
	// running them; errGraphsUnsupported (wrapped) says the driver cannot.
	capture(ls []Launch) (graphExec, error)
	// launchGraph queues a captured graph; destroyGraph frees it.
	launchGraph(g graphExec) error
	destroyGraph(g graphExec) error
	// close releases the stream, module and context. The memory is freed
	// by the backend first.
	close() error
}

// graphExec is a driver's handle of an instantiated graph.
type graphExec uint64

// errGraphsUnsupported reports a driver without CUDA graphs (an old driver
// library, or a fake told to refuse them).
var errGraphsUnsupported = errors.New("CUDA graphs unsupported")

// deviceInfo describes a device from its attributes.
type deviceInfo struct {
	Name                   string
	Ordinal                int
	TotalMem               uint64 // bytes
	Major, Minor           int    // compute capability
	SMs                    int
	MemClockKHz, BusWidth  int // memory clock (kHz) and bus width (bits)
	DriverVersion          int // e.g. 12040 for 12.4
	MaxThreadsPerBlock     int
	MaxSharedPerBlockOptin int // bytes
}

// Bandwidth returns the peak memory bandwidth in bytes per second:
// double data rate at the memory clock over the bus width, the figure
// NVIDIA's datasheets quote. Zero when the driver did not report the
// attributes.
func (d deviceInfo) Bandwidth() float64 {
	return 2 * float64(d.MemClockKHz) * 1e3 * float64(d.BusWidth) / 8
}

// Result is a CUresult, the status code of a CUDA driver call.
type Result int32

// CUresult codes the backend tells apart; Error.Is matches them.
const (
	Success           Result = 0
	ErrInvalidValue   Result = 1
	ErrOutOfMemory    Result = 2
	ErrNotInitialized Result = 3
	ErrNoDevice       Result = 100
	ErrNotSupported   Result = 801
	ErrCaptureFailed  Result = 900 // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
	ErrUnknown        Result = 999
)

// Error implements error so that a code can be matched with errors.Is:
// errors.Is(err, cuda.ErrOutOfMemory).
func (r Result) Error() string {
	name, msg := resultText(r)
	return fmt.Sprintf("%s (%d): %s", name, int32(r), msg)
}

// results names the CUresult codes of cuda.h, with the messages
// cuGetErrorString gives: what an error says when the driver library
// cannot name a code itself (a fake driver, an old library).
var results = map[Result][2]string{
	0:   {"CUDA_SUCCESS", "no error"},
	1:   {"CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	2:   {"CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	3:   {"CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	4:   {"CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
	34:  {"CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
	46:  {"CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
	100: {"CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	101: {"CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	200: {"CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
	201: {"CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	209: {"CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
	218: {"CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
	221: {"CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "PTX JIT compiler library not found"},
	222: {"CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain."},
	400: {"CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	500: {"CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	700: {"CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
	701: {"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
	702: {"CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
	716: {"CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
	719: {"CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
	801: {"CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	803: {"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"},
	900: {"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
	901: {"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"},
	999: {"CUDA_ERROR_UNKNOWN", "unknown error"},
}

// resultText returns a code's name and message from the table.
func resultText(r Result) (name, msg string) {
	if t, ok := results[r]; ok {
		return t[0], t[1]
	}
	return fmt.Sprintf("CUresult(%d)", int32(r)), "unrecognized error code"
}

// Error is a failed driver call: which call, with what, and the CUresult
// the driver returned, by name and message.
type Error struct {
	Call string // e.g. "cuMemAlloc(4194304 bytes)"
	Code Result
	// Name and Msg are cuGetErrorName's and cuGetErrorString's words for
	// Code (or the package's table, when the library has none).
	Name, Msg string
}

func (e *Error) Error() string {
	return fmt.Sprintf("cuda: %s: %s (%d): %s", e.Call, e.Name, int32(e.Code), e.Msg)
}

// Unwrap returns the code, so errors.Is(err, ErrOutOfMemory) holds for an
// allocation that ran out of memory.
func (e *Error) Unwrap() error { return e.Code }

// newError describes a failed call from the table of codes.
func newError(call string, code Result) *Error {
	name, msg := resultText(code)
	return &Error{Call: call, Code: code, Name: name, Msg: msg}
}

// mib formats a byte count for messages: "4 MiB (4194304 bytes)".
func mib(bytes int) string {
	return fmt.Sprintf("%.4g MiB (%d bytes)", float64(bytes)/(1<<20), bytes)
}

// gemmer is a driver with cuBLAS, for prefill's matrix products.
type gemmer interface {
	// blas returns why GEMMs are unavailable, nil when sgemm works.
	blas() error
	// sgemm sets out (n rows of rows values, ldc apart) to x (n rows of
	// cols) times w (rows x cols) transposed, all float32, in stream
	// order; tf32 lets the tensor cores round the inputs to TF32.
	sgemm(out, x, w Ptr, n, rows, cols, ldc int, tf32 bool) error
	// gemmEx is sgemm with x and w 16-bit values of dt (bf16 or f16),
	// computing in float32: cublasGemmEx on CUDA_R_16BF or CUDA_R_16F
	// operands, a float32 output and CUBLAS_COMPUTE_32F.
	gemmEx(out, x, w Ptr, n, rows, cols, ldc int, dt tensor.DType) error
}

// cublasStatus names a cublasStatus_t.
func cublasStatus(st int) string {
	name, ok := map[int]string{
		1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED", 7: "CUBLAS_STATUS_INVALID_VALUE",
		8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR", 13: "CUBLAS_STATUS_EXECUTION_FAILED",
		14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR",
	}[st]
	if !ok {
		name = "cublasStatus"
	}
	return fmt.Sprintf("%s (%d)", name, st)
}
