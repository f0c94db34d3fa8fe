package cudabackend

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kakeya-ai/kakeya/kernels/cuda/emu"
	"github.com/kakeya-ai/kakeya/tensor"
)

// fakeDriver is a driver whose device memory is host memory (the
// emulator's allocations) and whose launches run the kernels' CPU
// emulation, so the backend's host logic and the kernels are tested
// together without a GPU. It records every launch, can fail any call with
// a given CUresult, and can refuse graph capture.
type fakeDriver struct {
	dev    deviceInfo
	allocs map[Ptr]int
	// fail maps a call ("alloc", "free", "zero", "copyIn", "copyOut",
	// "copyDevice", "launch", "sync", "capture", "launchGraph") to the code
	// it returns from then on; failAfter[call] > 0 lets that many calls
	// succeed first.
	fail      map[string]Result
	failAfter map[string]int
	noGraphs  bool
	maxBytes  int // 0: no limit on the memory held
	// fullAfter > 0 lets that many more allocations through, the last
	// of them taking the device's last room: maxBytes becomes the memory
	// then held (as though another user had taken the rest).
	fullAfter int
	refused   int  // allocations refused for want of memory (maxBytes)
	cublas    bool // offer sgemm (computed on the host)
	noop      bool // record launches without running them (host-cost benchmarks)
	names     bool // with noop, still record the kernels' names in launched
	gemms     int
	gemmExs   []string // gemmEx calls: "bf16 n x rows x cols"
	// cost is the simulated time of a kernel (by name) or of a gemmEx
	// ("gemmEx"), added to elapsed as each runs: the tuner's clock in
	// tests.
	cost    map[string]time.Duration
	elapsed time.Duration
	// fault names a kernel whose next run faults as a GPU kernel does:
	// the launch succeeds, and the fault (CUDA_ERROR_ILLEGAL_ADDRESS)
	// comes back from the next synchronizing call and every call after.
	fault   string
	faulted error

	// noStage refuses hostStage, so that the backend copies in
	// synchronously; pending holds the asynchronous copies not yet made:
	// they read their source when the next stream operation runs, as the
	// device does at some point before it, so a source overwritten in
	// between lands as overwritten.
	noStage bool
	pending []asyncCopy

	// freed are the most recently freed allocations (address and size,
	// maxFreed at most), dropped as their addresses are allocated again:
	// a launch whose pointer argument lies in one reads or writes freed
	// memory, which run reports as an error naming the kernel and the
	// address (a device would read garbage, the emulator fault or read
	// the memory's next owner).
	freed []span
	// reads is memory a test says its next launches read through a
	// table (the parts a block table points at, which no parameter
	// names): run reports a launch while some of it lies in no live
	// allocation, before the emulator would fault on it.
	reads []span

	launched []string // kernels run, in order (graph replays included)
	calls    map[string]int
	graphs   map[graphExec][]Launch
	nextG    graphExec
	held     int
	closed   bool
}

func newFake() *fakeDriver {
	return &fakeDriver{
		dev: deviceInfo{Name: "fake", TotalMem: 1 << 30, Major: 8, Minor: 0, SMs: 4,
			MemClockKHz: 1000000, BusWidth: 256, MaxThreadsPerBlock: 1024, MaxSharedPerBlockOptin: 99 << 10},
		allocs: map[Ptr]int{}, fail: map[string]Result{}, failAfter: map[string]int{},
		calls: map[string]int{}, graphs: map[graphExec][]Launch{},
	}
}

// check counts a call and returns the error injected for it.
func (f *fakeDriver) check(call, what string) error {
	f.calls[call]++
	code, ok := f.fail[call]
	if !ok {
		return nil
	}
	if f.failAfter[call] > 0 {
		f.failAfter[call]--
		return nil
	}
	return newError(what, code)
}

func (f *fakeDriver) info() deviceInfo { return f.dev }

func (f *fakeDriver) alloc(bytes int) (Ptr, error) {
	if err := f.check("alloc", "cuMemAlloc of "+mib(bytes)); err != nil {
		return 0, err
	}
	if f.maxBytes > 0 && f.held+bytes > f.maxBytes {
		f.refused++
		return 0, newError("cuMemAlloc of "+mib(bytes), ErrOutOfMemory)
	}
	p, err := emu.Alloc(bytes)
	if err != nil {
		return 0, err
	}
	f.allocs[Ptr(p)] = bytes
	f.held += bytes
	if f.fullAfter > 0 {
		if f.fullAfter--; f.fullAfter == 0 {
			f.maxBytes = f.held
		}
	}
	f.freed = slices.DeleteFunc(f.freed, func(s span) bool {
		return s.at < Ptr(p)+Ptr(bytes) && Ptr(p) < s.at+Ptr(s.n)
	})
	return Ptr(p), nil
}

// span is a freed allocation.
type span struct {
	at Ptr
	n  int
}

// maxFreed bounds fakeDriver.freed.
const maxFreed = 256

// useAfterFree returns an error when one of l's pointer arguments (its
// 8-byte parameters) lies in a freed allocation and in no live one.
func (f *fakeDriver) useAfterFree(l Launch) error {
	if len(f.freed) == 0 {
		return nil
	}
	for i, off := range l.Params {
		end := uint32(len(l.Args))
		if i+1 < len(l.Params) {
			end = l.Params[i+1]
		}
		if off%8 != 0 || end < off+8 || int(off)+8 > len(l.Args) {
			continue
		}
		v := Ptr(binary.LittleEndian.Uint64(l.Args[off:]))
		for _, s := range f.freed {
			if v >= s.at && v < s.at+Ptr(s.n) && f.within(v, 1, "") != nil {
				return newError(fmt.Sprintf("%s: parameter %d (%#x) points into freed memory (an allocation of %d bytes at %#x)",
					l.Kernel, i, uint64(v), s.n, uint64(s.at)), Result(700))
			}
		}
	}
	return nil
}

func (f *fakeDriver) free(p Ptr) error {
	if err := f.check("free", fmt.Sprintf("cuMemFree(%#x)", uint64(p))); err != nil {
		return err
	}
	n, ok := f.allocs[p]
	if !ok {
		return newError(fmt.Sprintf("cuMemFree(%#x) of no allocation", uint64(p)), ErrInvalidValue)
	}
	delete(f.allocs, p)
	f.held -= n
	if len(f.freed) == maxFreed {
		f.freed = append(f.freed[:0], f.freed[1:]...)
	}
	f.freed = append(f.freed, span{p, n})
	emu.Free(uint64(p))
	return nil
}

// within checks that [p, p+n) lies in one allocation, as the device's
// memory protection would.
func (f *fakeDriver) within(p Ptr, n int, call string) error {
	for a, size := range f.allocs {
		if p >= a && uint64(p)+uint64(n) <= uint64(a)+uint64(size) {
			return nil
		}
	}
	return newError(fmt.Sprintf("%s of %d bytes at %#x outside every allocation", call, n, uint64(p)), Result(700))
}

// asyncCopy is a copyInAsync the fake has not made yet.
type asyncCopy struct {
	dst Ptr
	src []byte
}

// drain makes the pending asynchronous copies, in order: called first by
// every stream operation.
func (f *fakeDriver) drain() {
	for _, c := range f.pending {
		emu.CopyIn(uint64(c.dst), c.src)
	}
	clear(f.pending)
	f.pending = f.pending[:0]
}

func (f *fakeDriver) hostStage(bytes int) ([]byte, error) {
	if f.noStage {
		return nil, newError("fake: cuMemHostAlloc", Result(801))
	}
	return make([]byte, bytes), nil
}

func (f *fakeDriver) copyInAsync(dst Ptr, src []byte) error {
	if err := f.check("copyIn", "cuMemcpyHtoDAsync"); err != nil {
		return err
	}
	f.calls["copyInAsync"]++
	if err := f.within(dst, len(src), "copy in"); err != nil {
		return err
	}
	f.pending = append(f.pending, asyncCopy{dst, src})
	return nil
}

func (f *fakeDriver) zero(p Ptr, bytes int) error {
	f.drain()
	if err := f.check("zero", "cuMemsetD8Async"); err != nil {
		return err
	}
	if err := f.within(p, bytes, "memset"); err != nil {
		return err
	}
	emu.CopyIn(uint64(p), make([]byte, bytes))
	return nil
}

func (f *fakeDriver) copyIn(dst Ptr, src []byte) error {
	f.drain()
	if err := f.check("copyIn", "cuMemcpyHtoD"); err != nil {
		return err
	}
	if err := f.within(dst, len(src), "copy in"); err != nil {
		return err
	}
	emu.CopyIn(uint64(dst), src)
	return nil
}

func (f *fakeDriver) copyOut(dst []byte, src Ptr) error {
	f.drain()
	if err := f.check("copyOut", "cuMemcpyDtoHAsync"); err != nil {
		return err
	}
	if f.faulted != nil {
		return f.faulted
	}
	if err := f.within(src, len(dst), "copy out"); err != nil {
		return err
	}
	emu.CopyOut(dst, uint64(src))
	return nil
}

func (f *fakeDriver) copyDevice(dst, src Ptr, bytes int) error {
	f.drain()
	if err := f.check("copyDevice", "cuMemcpyDtoDAsync"); err != nil {
		return err
	}
	if err := f.within(src, bytes, "copy from"); err != nil {
		return err
	}
	if err := f.within(dst, bytes, "copy to"); err != nil {
		return err
	}
	buf := make([]byte, bytes)
	emu.CopyOut(buf, uint64(src))
	emu.CopyIn(uint64(dst), buf)
	return nil
}

func (f *fakeDriver) run(ls []Launch) error {
	f.drain()
	for _, l := range ls {
		if err := f.useAfterFree(l); err != nil {
			return err
		}
		for _, r := range f.reads {
			if f.within(r.at, r.n, "") != nil {
				return newError(fmt.Sprintf("%s: reads %d bytes at %#x through a table: freed memory", l.Kernel, r.n, uint64(r.at)), Result(700))
			}
		}
	}
	if f.noop {
		f.calls["kernels"] += len(ls)
		if f.names {
			for _, l := range ls {
				f.launched = append(f.launched, l.Kernel)
			}
		}
		return nil
	}
	for _, l := range ls {
		if l.Kernel == f.fault && f.faulted == nil {
			f.faulted = newError("cuStreamSynchronize", Result(700))
		}
		f.launched = append(f.launched, l.Kernel)
		f.elapsed += f.cost[l.Kernel]
		g, bl := [3]uint32{l.Grid.X, l.Grid.Y, l.Grid.Z}, [3]uint32{l.Block.X, l.Block.Y, l.Block.Z}
		if err := emu.Run(l.Kernel, g, bl, l.Shared, l.Args, uint64(len(f.launched))); err != nil {
			return fmt.Errorf("emulated %s: %w", l.Kernel, err)
		}
	}
	return nil
}

func (f *fakeDriver) launch(ls []Launch) error {
	if err := f.check("launch", "cuLaunchKernel("+ls[0].Kernel+")"); err != nil {
		return err
	}
	return f.run(ls)
}

func (f *fakeDriver) sync() error {
	f.drain()
	if f.faulted != nil {
		return f.faulted
	}
	return f.check("sync", "cuStreamSynchronize")
}

func (f *fakeDriver) capture(ls []Launch) (graphExec, error) {
	if f.noGraphs {
		return 0, fmt.Errorf("fake: %w", errGraphsUnsupported)
	}
	if err := f.check("capture", "cuStreamBeginCapture"); err != nil {
		return 0, err
	}
	f.nextG++
	f.graphs[f.nextG] = slices.Clone(ls)
	for i := range f.graphs[f.nextG] {
		f.graphs[f.nextG][i].Args = slices.Clone(ls[i].Args)
	}
	return f.nextG, nil
}

func (f *fakeDriver) launchGraph(g graphExec) error {
	if err := f.check("launchGraph", "cuGraphLaunch"); err != nil {
		return err
	}
	ls, ok := f.graphs[g]
	if !ok {
		return newError("cuGraphLaunch of a destroyed graph", Result(400))
	}
	return f.run(ls)
}

func (f *fakeDriver) destroyGraph(g graphExec) error {
	if _, ok := f.graphs[g]; !ok {
		return newError("cuGraphExecDestroy of an unknown graph", Result(400))
	}
	delete(f.graphs, g)
	return nil
}

func (f *fakeDriver) close() error {
	if f.closed {
		return newError("close twice", Result(201))
	}
	f.closed = true
	return nil
}

// kernelCounts summarises f.launched, e.g. "embed:1 rmsnorm:3".
func (f *fakeDriver) kernelCounts() string {
	n := map[string]int{}
	for _, k := range f.launched {
		n[k]++
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(n)) {
		parts = append(parts, fmt.Sprintf("%s:%d", k, n[k]))
	}
	return strings.Join(parts, " ")
}

// newFakeOrSkip returns a fake driver, or skips the test where the
// emulator is not built (without cgo on Linux).
func newFakeOrSkip(t testing.TB) *fakeDriver {
	t.Helper()
	if len(emu.Kernels()) == 0 {
		t.Skip("the kernels' CPU emulation needs cgo on Linux")
	}
	return newFake()
}

// needKernels skips a test whose kernels the emulator does not run yet.
func needKernels(t testing.TB, names ...string) {
	t.Helper()
	have := emu.Kernels()
	for _, k := range names {
		if !slices.Contains(have, k) {
			t.Skipf("the emulator has no kernel %s yet", k)
		}
	}
}

func (f *fakeDriver) blas() error {
	if !f.cublas {
		return errors.New("fake: no cuBLAS")
	}
	return nil
}

// sgemm is cuBLAS's product computed on the host in float64, with the
// driver's checks of the operands' memory.
func (f *fakeDriver) sgemm(out, x, w Ptr, n, rows, cols, ldc int, tf32 bool) error {
	f.drain()
	if err := f.check("sgemm", "cublasGemmEx"); err != nil {
		return err
	}
	f.gemms++
	for _, c := range []struct {
		p     Ptr
		bytes int
	}{{x, 4 * n * cols}, {w, 4 * rows * cols}, {out, 4 * ((n-1)*ldc + rows)}} {
		if err := f.within(c.p, c.bytes, "sgemm operand"); err != nil {
			return err
		}
	}
	xs, ws := make([]float32, n*cols), make([]float32, rows*cols)
	emu.CopyOut(bytesOf(xs), uint64(x))
	emu.CopyOut(bytesOf(ws), uint64(w))
	f.product(out, xs, ws, n, rows, cols, ldc)
	return nil
}

// gemmEx is cuBLAS's 16-bit product: the operands widened exactly, then
// sgemm's float64 sums.
func (f *fakeDriver) gemmEx(out, x, w Ptr, n, rows, cols, ldc int, dt tensor.DType) error {
	f.drain()
	if err := f.check("gemmEx", "cublasGemmEx"); err != nil {
		return err
	}
	if dt != tensor.BF16 && dt != tensor.F16 {
		return fmt.Errorf("fake: gemmEx of %v operands", dt)
	}
	f.gemmExs = append(f.gemmExs, fmt.Sprintf("%s %d x %d x %d", strings.ToLower(dt.String()), n, rows, cols))
	f.elapsed += f.cost["gemmEx"]
	for _, c := range []struct {
		p     Ptr
		bytes int
	}{{x, 2 * n * cols}, {w, 2 * rows * cols}, {out, 4 * ((n-1)*ldc + rows)}} {
		if err := f.within(c.p, c.bytes, "gemmEx operand"); err != nil {
			return err
		}
	}
	widen := func(p Ptr, k int) []float32 {
		h, v := make([]uint16, k), make([]float32, k)
		emu.CopyOut(bytesOf(h), uint64(p))
		for i, u := range h {
			if dt == tensor.BF16 {
				v[i] = tensor.BF16ToF32(u)
			} else {
				v[i] = tensor.F16ToF32(u)
			}
		}
		return v
	}
	f.product(out, widen(x, n*cols), widen(w, rows*cols), n, rows, cols, ldc)
	return nil
}

// product writes xs (n x cols) times ws (rows x cols) transposed, summed
// in float64, to out's n rows ldc apart.
func (f *fakeDriver) product(out Ptr, xs, ws []float32, n, rows, cols, ldc int) {
	row := make([]float32, rows)
	for i := range n {
		for r := range rows {
			var s float64
			for c := range cols {
				s += float64(xs[i*cols+c]) * float64(ws[r*cols+c])
			}
			row[r] = float32(s)
		}
		emu.CopyIn(uint64(out)+uint64(4*i*ldc), bytesOf(row))
	}
}
