package cudabackend

import "sync"

// LaunchStats counts the driver calls of a backend since counting began
// (see Backend.Launches), host-side: what a decode step costs the host in
// the driver, whatever the device does.
type LaunchStats struct {
	// Kernels is cuLaunchKernel calls: kernels launched one by one.
	Kernels int64
	// Graphs is cuGraphLaunch calls, and GraphKernels the kernels those
	// graphs ran (counted for graphs captured while counting).
	Graphs, GraphKernels int64
	// Captures is graphs captured.
	Captures int64
	// CopiesIn and CopiesOut are host-to-device and device-to-host copies;
	// each copy out waits for the stream, as does each Syncs.
	CopiesIn, CopiesOut, Syncs int64
	// CopiesInAsync counts the copies in among CopiesIn made
	// asynchronously, from the backend's page-locked staging memory: they
	// wait for nothing.
	CopiesInAsync int64
	// CopiesInBehind counts the synchronous copies in made while launched work was
	// outstanding (a kernel or graph launched since the last copy or
	// sync): each is a host wait on a GPU, since a synchronous copy from
	// pageable memory (cuMemcpyHtoD) waits for the stream's work before
	// it, which then idles while the host queues the next launches. A
	// copy in at a step's start, or after another copy, waits for nothing.
	CopiesInBehind int64
}

// Waits returns the host waits: copies out, syncs and the copies in made
// behind launched work.
func (s LaunchStats) Waits() int64 { return s.CopiesOut + s.Syncs + s.CopiesInBehind }

// Calls returns the launches the host made: kernels and graphs.
func (s LaunchStats) Calls() int64 { return s.Kernels + s.Graphs }

// Sub returns the counts of s since t.
func (s LaunchStats) Sub(t LaunchStats) LaunchStats {
	return LaunchStats{
		Kernels: s.Kernels - t.Kernels, Graphs: s.Graphs - t.Graphs, GraphKernels: s.GraphKernels - t.GraphKernels,
		Captures: s.Captures - t.Captures, CopiesIn: s.CopiesIn - t.CopiesIn, CopiesOut: s.CopiesOut - t.CopiesOut, Syncs: s.Syncs - t.Syncs,
		CopiesInBehind: s.CopiesInBehind - t.CopiesInBehind, CopiesInAsync: s.CopiesInAsync - t.CopiesInAsync,
	}
}

// Launches returns the driver calls counted so far. The first call starts
// counting, by putting a counter between the backend and its driver, and
// returns zeros: a backend that never asks pays nothing. Open the backend,
// call Launches, then load the model, so that every graph is captured
// while counting and GraphKernels is whole; cuBLAS's own launches
// (prefill's products) are not counted.
func (b *Backend) Launches() LaunchStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	var c *launchCounter
	switch d := b.drv.(type) {
	case *launchCounter:
		c = d
	case countedNamer:
		c = d.launchCounter
	default:
		c = &launchCounter{driver: b.drv, sizes: map[graphExec]int64{}}
		b.drv = c
		// The driver's optional interfaces stay visible through the
		// counter.
		if n, ok := d.(cublasNamer); ok {
			b.drv = countedNamer{c, n}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// countedNamer is the counter of a driver that names the cuBLAS it loaded.
type countedNamer struct {
	*launchCounter
	cublasNamer
}

// launchCounter is a driver that counts the calls it passes on.
type launchCounter struct {
	driver
	mu    sync.Mutex
	n     LaunchStats
	sizes map[graphExec]int64 // kernels of each graph captured through it
	busy  bool                // work launched since the last copy or sync
}

func (c *launchCounter) add(f func(n *LaunchStats)) {
	c.mu.Lock()
	f(&c.n)
	c.mu.Unlock()
}

func (c *launchCounter) launch(ls []Launch) error {
	c.add(func(n *LaunchStats) { n.Kernels += int64(len(ls)); c.busy = c.busy || len(ls) > 0 })
	return c.driver.launch(ls)
}

func (c *launchCounter) capture(ls []Launch) (graphExec, error) {
	g, err := c.driver.capture(ls)
	if err == nil {
		c.add(func(n *LaunchStats) { n.Captures++; c.sizes[g] = int64(len(ls)) })
	}
	return g, err
}

func (c *launchCounter) launchGraph(g graphExec) error {
	c.add(func(n *LaunchStats) { n.Graphs++; n.GraphKernels += c.sizes[g]; c.busy = true })
	return c.driver.launchGraph(g)
}

func (c *launchCounter) destroyGraph(g graphExec) error {
	c.add(func(*LaunchStats) { delete(c.sizes, g) })
	return c.driver.destroyGraph(g)
}

func (c *launchCounter) copyIn(dst Ptr, src []byte) error {
	c.add(func(n *LaunchStats) {
		n.CopiesIn++
		if c.busy {
			n.CopiesInBehind++
		}
		c.busy = false // the copy waited for the stream
	})
	return c.driver.copyIn(dst, src)
}

func (c *launchCounter) copyInAsync(dst Ptr, src []byte) error {
	c.add(func(n *LaunchStats) { n.CopiesIn++; n.CopiesInAsync++ })
	return c.driver.copyInAsync(dst, src)
}

func (c *launchCounter) copyOut(dst []byte, src Ptr) error {
	c.add(func(n *LaunchStats) { n.CopiesOut++; c.busy = false })
	return c.driver.copyOut(dst, src)
}

func (c *launchCounter) sync() error {
	c.add(func(n *LaunchStats) { n.Syncs++; c.busy = false })
	return c.driver.sync()
}
