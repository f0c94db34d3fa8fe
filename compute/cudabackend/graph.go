package cudabackend

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A decode step is several launches per layer (five with the decode
// fusions, about twenty without), each costing the host a few
// microseconds in the driver, which for a small model is more than the
// GPU's time for the step. Most of them repeat exactly from one step to the
// next: the projections, norms and feed-forward of a layer read and write
// the same buffers with the same shapes at every position. Only RoPE (or
// norm_qkv, which applies it), attention and the cache writes move with
// the position; the backend
// launches those on their own ("dynamic") and queues the rest, so the
// queue holds the runs of static launches between them. A run seen once
// is launched kernel by kernel; seen again, it is captured into a CUDA
// graph, which is replayed with one launch from then on. A driver that
// cannot capture turns graphs off for the backend's life, launching every
// kernel directly: same results, more host time.

// Graph cache bounds: runs shorter than minGraphRun are not worth a graph
// launch; past maxGraphs (a long prefill's ever-new geometries) the cache
// starts over rather than grow.
const (
	minGraphRun = 3
	maxGraphs   = 1024
	maxSeen     = 4096
)

// graphCache maps runs of launches, by their exact bytes, to graphs.
type graphCache struct {
	seen  map[string]bool      // runs launched directly once
	execs map[string]graphExec // captured runs
	key   []byte
	off   error // why graphs are off, nil while on

	// Counters for tests and logs.
	replays, captures, direct int
}

func newGraphCache() *graphCache {
	return &graphCache{seen: map[string]bool{}, execs: map[string]graphExec{}}
}

// keyOf serialises a run: kernel, geometry and arguments of every launch.
func (g *graphCache) keyOf(q []Launch) []byte {
	k := g.key[:0]
	for _, l := range q {
		k = binary.AppendUvarint(k, uint64(len(l.Kernel)))
		k = append(k, l.Kernel...)
		for _, v := range [...]uint32{l.Grid.X, l.Grid.Y, l.Grid.Z, l.Block.X, l.Block.Y, l.Block.Z, l.Shared, uint32(len(l.Args))} {
			k = binary.LittleEndian.AppendUint32(k, v)
		}
		k = append(k, l.Args...)
	}
	g.key = k
	return k
}

// run launches q, through a graph where the run repeats.
func (g *graphCache) run(d driver, q []Launch) error {
	if g.off != nil || len(q) < minGraphRun {
		g.direct += len(q)
		return d.launch(q)
	}
	k := g.keyOf(q)
	if e, ok := g.execs[string(k)]; ok {
		g.replays++
		return d.launchGraph(e)
	}
	if !g.seen[string(k)] {
		if len(g.seen) >= maxSeen {
			clear(g.seen)
		}
		g.seen[string(k)] = true
		g.direct += len(q)
		return d.launch(q)
	}
	if len(g.execs) >= maxGraphs {
		if err := g.destroy(d); err != nil {
			return err
		}
	}
	e, err := d.capture(q)
	if err != nil {
		// Capture is an optimisation: whatever refused it, the launches
		// themselves still run directly, now and from now on.
		g.off = fmt.Errorf("cuda: graphs off after a failed capture of %d launches: %w", len(q), err)
		g.direct += len(q)
		return d.launch(q)
	}
	delete(g.seen, string(k))
	g.execs[string(k)] = e
	g.captures++
	g.replays++
	return d.launchGraph(e)
}

// destroy frees every graph.
func (g *graphCache) destroy(d driver) error {
	var errs []error
	for k, e := range g.execs {
		errs = append(errs, d.destroyGraph(e))
		delete(g.execs, k)
	}
	return errors.Join(errs...)
}

// GraphStats reports how the backend launched its kernels: graphs captured
// and replayed, and kernels launched one by one; off says why graphs are
// off (nil while they are on).
func (b *Backend) GraphStats() (captures, replays, direct int, off error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.graphs == nil {
		return 0, 0, 0, errors.New("cuda: graphs off (Options.NoGraphs)")
	}
	g := b.graphs
	return g.captures, g.replays, g.direct, g.off
}
