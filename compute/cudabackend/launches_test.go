package cudabackend

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/model"
)

// Launches counts what the driver ran: every kernel, launched alone or in
// a replayed graph, every graph launch and every copy back, with graphs
// on and off; a decode step with graphs replays them.
func TestLaunchCounter(t *testing.T) {
	needKernels(t, "matvec_bf16", "attn_split")
	dir := filepath.Join(t.TempDir(), "qwen2")
	if err := testmodel.Write(dir, testmodel.Qwen2Tiny); err != nil {
		t.Fatal(err)
	}
	for _, opts := range []Options{{}, {NoGraphs: true}} {
		gpu, f := newFakeBackend(t, opts)
		if n := gpu.Launches(); n != (LaunchStats{}) {
			t.Fatalf("%+v before counting", n)
		}
		m := loadModel(t, dir, model.Options{Backend: gpu, MaxContext: 64})
		s, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Forward(testIDs(9, 256), false); err != nil {
			t.Fatal(err)
		}
		before, kernels, graphs, copies := gpu.Launches(), len(f.launched), f.calls["launchGraph"], f.calls["copyOut"]
		const steps = 4
		for i := range steps {
			if _, err := s.Forward([]int{i + 3}, false); err != nil {
				t.Fatal(err)
			}
		}
		n := gpu.Launches().Sub(before)
		s.Close()
		if got, want := n.Kernels+n.GraphKernels, int64(len(f.launched)-kernels); got != want || got == 0 {
			t.Errorf("%+v: %d kernels counted, the driver ran %d", opts, got, want)
		}
		if n.Graphs != int64(f.calls["launchGraph"]-graphs) || n.CopiesOut != int64(f.calls["copyOut"]-copies) {
			t.Errorf("%+v: %d graphs and %d copies back counted, the driver had %d and %d", opts, n.Graphs, n.CopiesOut, f.calls["launchGraph"]-graphs, f.calls["copyOut"]-copies)
		}
		if graphsOn := !opts.NoGraphs; graphsOn != (n.Graphs > 0) || graphsOn != (n.GraphKernels > n.Graphs) {
			t.Errorf("%+v: %d graph launches running %d kernels", opts, n.Graphs, n.GraphKernels)
		}
		t.Logf("%+v: per decode step %.1f launch calls (%.1f kernels, %.1f graphs), %.1f kernels run, %.1f copies back",
			opts, float64(n.Calls())/steps, float64(n.Kernels)/steps, float64(n.Graphs)/steps, float64(n.Kernels+n.GraphKernels)/steps, float64(n.CopiesOut)/steps)
	}
}

// libFake is a fake driver that names a cuBLAS, as the real one does.
type libFake struct{ *fakeDriver }

func (libFake) cublasLib() *cublasLoad { return &cublasLoad{Path: "/lib/libcublas.so.13"} }

// Counting keeps the driver's optional interfaces: the backend still
// names its cuBLAS.
func TestLaunchCounterKeepsInterfaces(t *testing.T) {
	f := newFakeOrSkip(t)
	f.cublas = true
	b := newBackend(libFake{f}, Options{})
	defer b.Close()
	before := b.gemmDescription()
	b.Launches()
	if _, ok := b.drv.(cublasNamer); !ok || b.gemmDescription() != before || !strings.Contains(before, "/lib/libcublas.so.13") {
		t.Errorf("counting: %q, before %q", b.gemmDescription(), before)
	}
	b.Write(b.Alloc(4), []float32{1, 2, 3, 4})
	if n := b.Launches(); n.CopiesIn != 1 {
		t.Errorf("%+v after one write", n)
	}
}
