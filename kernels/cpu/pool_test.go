package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// coverTask counts how often each index is visited.
type coverTask struct{ hits []atomic.Int32 }

func (c *coverTask) Run(lo, hi int) {
	for i := lo; i < hi; i++ {
		c.hits[i].Add(1)
	}
}

func checkCovered(t *testing.T, hits []atomic.Int32) {
	t.Helper()
	for i := range hits {
		if h := hits[i].Load(); h != 1 {
			t.Fatalf("index %d visited %d times", i, h)
		}
	}
}

func TestPoolCoverage(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 8} {
		p := NewPool(threads)
		if p.Threads() != threads {
			t.Fatalf("Threads() = %d, want %d", p.Threads(), threads)
		}
		for _, n := range []int{0, 1, 2, 3, 7, 8, 9, 1000} {
			t.Run(fmt.Sprintf("threads=%d/n=%d", threads, n), func(t *testing.T) {
				hits := make([]atomic.Int32, n)
				p.For(n, func(lo, hi int) {
					if lo >= hi || lo < 0 || hi > n {
						t.Errorf("For called with range [%d,%d) of %d", lo, hi, n)
					}
					for i := lo; i < hi; i++ {
						hits[i].Add(1)
					}
				})
				checkCovered(t, hits)
				task := &coverTask{hits: make([]atomic.Int32, n)}
				p.Run(n, task)
				checkCovered(t, task.hits)
			})
		}
		p.Close()
		p.Close() // idempotent
		// A closed pool still does the work, inline.
		task := &coverTask{hits: make([]atomic.Int32, 10)}
		p.Run(10, task)
		checkCovered(t, task.hits)
	}
}

func TestPoolDefaultThreads(t *testing.T) {
	p := NewPool(0)
	defer p.Close()
	if p.Threads() < 1 {
		t.Fatalf("Threads() = %d", p.Threads())
	}
}

// TestPoolNested calls For from inside For and Run from several goroutines at
// once: nested or concurrent calls must run inline rather than deadlock.
func TestPoolNested(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	const n = 50
	hits := make([]atomic.Int32, n*n)
	p.For(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			p.For(n, func(l2, h2 int) {
				for j := l2; j < h2; j++ {
					hits[i*n+j].Add(1)
				}
			})
		}
	})
	checkCovered(t, hits)

	var wg sync.WaitGroup
	tasks := make([]*coverTask, 8)
	for g := range tasks {
		tasks[g] = &coverTask{hits: make([]atomic.Int32, 999)}
		wg.Go(func() {
			for range 20 {
				for i := range tasks[g].hits {
					tasks[g].hits[i].Store(0)
				}
				p.Run(999, tasks[g])
				checkCovered(t, tasks[g].hits)
			}
		})
	}
	wg.Wait()
}

func TestPoolRunAllocs(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	task := &coverTask{hits: make([]atomic.Int32, 100)}
	if a := testing.AllocsPerRun(100, func() { p.Run(100, task) }); a != 0 {
		t.Errorf("Run: %v allocations per call, want 0", a)
	}
}

// Pool.SiLUMul gives SiLUMul's values bit for bit whatever the split, and
// does not allocate.
func TestPoolSiLUMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, threads := range []int{1, 2, 3} {
		p := NewPool(threads)
		for _, n := range []int{0, 7, minParallelSiLU - 1, minParallelSiLU, 3*siluChunk*chunksPerThread + 5} {
			gate, up := randVec(rng, n), randVec(rng, n)
			want := append([]float32(nil), gate...)
			SiLUMul(want, up)
			p.SiLUMul(gate, up)
			for i := range want {
				if math.Float32bits(gate[i]) != math.Float32bits(want[i]) {
					t.Fatalf("threads %d n %d: [%d] = %v, want %v", threads, n, i, gate[i], want[i])
				}
			}
		}
		g, u := randVec(rng, 1<<17), randVec(rng, 1<<17)
		if a := testing.AllocsPerRun(20, func() { p.SiLUMul(g, u) }); a != 0 {
			t.Errorf("threads %d: %v allocations per call, want 0", threads, a)
		}
		p.Close()
	}
	wantPanic(t, "Pool.SiLUMul lengths", func() { NewPool(1).SiLUMul(make([]float32, 3), make([]float32, 2)) })
}
