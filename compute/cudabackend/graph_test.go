package cudabackend

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/compute"
)

// steps runs a decode-like loop: per step a run of static launches, a
// dynamic one (RoPE at the step's position), another static run and a
// read, as a model's decode step does between its host round trips.
func steps(b *Backend, n int) []float32 {
	r := rand.New(rand.NewPCG(7, 8))
	const rows, heads, d = 1, 2, 8
	x := upload(b, randFloats(r, rows*heads*d))
	y := upload(b, randFloats(r, rows*heads*d))
	bias := upload(b, randFloats(r, heads*d))
	cos, sin := upload(b, randFloats(r, (n+1)*d/2)), upload(b, randFloats(r, (n+1)*d/2))
	out := make([]float32, rows*heads*d)
	var all []float32
	for step := range n {
		b.AddRows(x, bias, rows)
		b.SiLUMul(x, y)
		b.Add(x, y)
		b.RoPE(x, rows, heads, d, step, cos, sin)
		b.Add(y, x)
		b.AddRows(y, bias, rows)
		b.RMSNorm(y, y, bias, heads, 1e-5)
		b.Read(out, x)
		all = append(all, out...)
	}
	return all
}

// Repeated runs of launches are captured once and replayed, with the
// results of launching every kernel; a driver that refuses capture (or
// fails it) turns graphs off and gives the same results.
func TestGraphs(t *testing.T) {
	const n = 6
	plain, _ := newFakeBackend(t, Options{NoGraphs: true})
	want := steps(plain, n)
	if _, _, _, off := plain.GraphStats(); off == nil {
		t.Error("NoGraphs backend reports graphs on")
	}
	for _, tc := range []struct {
		name    string
		setup   func(f *fakeDriver)
		graphs  bool
		offText string
	}{
		{"replayed", func(*fakeDriver) {}, true, ""},
		{"capture unsupported", func(f *fakeDriver) { f.noGraphs = true }, false, "CUDA graphs unsupported"},
		{"capture fails", func(f *fakeDriver) { f.fail["capture"] = Result(900) }, false, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, f := newFakeBackend(t, Options{})
			tc.setup(f)
			got := steps(b, n)
			if d := maxAbsDiff(got, want); d != 0 {
				t.Errorf("results differ from direct launches by %.3g", d)
			}
			if err := b.Err(); err != nil {
				t.Fatal(err)
			}
			captures, replays, direct, off := b.GraphStats()
			t.Logf("%d captures, %d replays, %d direct launches, off: %v", captures, replays, direct, off)
			if tc.graphs {
				// The run after RoPE repeats from the first step, the
				// one before it (after the read) from the second.
				if captures != 2 || replays < 2*(n-2) || off != nil {
					t.Errorf("%d captures, %d replays, off %v; want 2 and at least %d", captures, replays, off, 2*(n-2))
				}
				if len(f.graphs) != 2 {
					t.Errorf("fake holds %d graphs", len(f.graphs))
				}
			} else if captures != 0 || off == nil || !strings.Contains(off.Error(), tc.offText) {
				t.Errorf("%d captures, off %v; want none, off naming %q", captures, off, tc.offText)
			}
			b.Close()
			if len(f.graphs) != 0 {
				t.Errorf("%d graphs left after Close", len(f.graphs))
			}
		})
	}
}

// The graph cache keys runs by every byte of their launches: a run that
// differs in one argument is not replayed for another.
func TestGraphKeys(t *testing.T) {
	b, f := newFakeBackend(t, Options{})
	x, y := b.Alloc(8), b.Alloc(8)
	b.Write(y, []float32{1, 1, 1, 1, 1, 1, 1, 1})
	run := func(v compute.Buffer) {
		for range minGraphRun {
			b.Add(v, y)
		}
		b.Read(make([]float32, 1), v)
	}
	for range 3 {
		run(x)
		run(x.Slice(0, 4))
	}
	got := read(b, x)
	for i, v := range got {
		want := float32(6 * minGraphRun)
		if i >= 4 {
			want = 3 * minGraphRun
		}
		if v != want {
			t.Fatalf("x = %v", got)
		}
	}
	if captures, _, _, _ := b.GraphStats(); captures != 2 || len(f.graphs) != 2 {
		t.Errorf("%d captures, %d graphs; want 2 (one per geometry)", captures, len(f.graphs))
	}
}
