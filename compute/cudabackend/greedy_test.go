package cudabackend

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/pick"
)

// The argmax kernel picks what pick.ArgMax picks, on random rows
// and on the awkward ones: ties (the first wins, +0 and -0 alike), NaN
// anywhere (skipped; -1 for a row of NaN only), -Inf and +Inf, rows
// shorter and longer than the block; and it finds each row's first
// non-finite value.
func TestArgMax(t *testing.T) {
	needKernels(t, "argmax")
	b, _ := newFakeBackend(t, Options{})
	r := rand.New(rand.NewPCG(3, 4))
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, tc := range []struct {
		name string
		cols int
		row  func(i int, x []float32)
	}{
		{"random", 1000, func(int, []float32) {}},
		{"one value", 1, func(int, []float32) {}},
		{"ties", 300, func(i int, x []float32) {
			for j := range x {
				x[j] = float32(r.IntN(3))
			}
		}},
		{"ties across threads", 4099, func(i int, x []float32) {
			clear(x)
			x[4098-i], x[4000-i], x[257+i] = 5, 5, 5
		}},
		{"signed zeros", 513, func(i int, x []float32) {
			for j := range x {
				x[j] = float32(math.Copysign(0, float64(r.IntN(2)*2-1)))
			}
		}},
		{"NaN", 777, func(i int, x []float32) {
			for range 1 + i {
				x[r.IntN(len(x))] = nan
			}
			if i == 0 {
				x[0] = nan // a NaN first: skipped, not kept as the largest
			}
		}},
		{"NaN only", 300, func(i int, x []float32) {
			for j := range x {
				x[j] = nan
			}
		}},
		{"-Inf only", 260, func(i int, x []float32) {
			for j := range x {
				x[j] = -inf
			}
		}},
		{"infinities", 1500, func(i int, x []float32) {
			x[r.IntN(len(x))] = -inf
			x[r.IntN(len(x))] = inf
			x[r.IntN(len(x))] = inf
			x[r.IntN(len(x))] = nan
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const rows = 8
			x := make([]float32, rows*tc.cols)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			for i := range rows {
				tc.row(i, x[i*tc.cols:(i+1)*tc.cols])
			}
			ids, bad := make([]int, rows), make([]int, rows)
			b.ArgMax(ids, bad, upload(b, x), tc.cols)
			if err := b.Err(); err != nil {
				t.Fatal(err)
			}
			for i := range rows {
				row := x[i*tc.cols : (i+1)*tc.cols]
				if want := pick.ArgMax(row); ids[i] != want {
					t.Errorf("row %d: argmax %d, pick.ArgMax %d", i, ids[i], want)
				}
				if want := pick.FirstNonFinite(row); bad[i] != want {
					t.Errorf("row %d: first non-finite value at %d, want %d", i, bad[i], want)
				}
			}
		})
	}
}

// Greedy generation with the tokens picked on the device (model.Batch's
// Greedy items) is the CPU's, token for token, on every tiny
// architecture (Qwen3's per-head norms inside norm_qkv too); a decode step
// then reads back its token and nothing else (one copy out of 8 bytes),
// and is one replayed graph.
func TestGreedyOnDevice(t *testing.T) {
	needKernels(t, "argmax", "norm_qkv_bf16", "attn_split")
	const prompt, tokens = 6, 12
	for name, dir := range tinyArchitectures(t) {
		t.Run(name, func(t *testing.T) {
			cpuM := loadModel(t, dir, model.Options{Backend: cpuF32(t, 1), MaxContext: 64})
			ids := testIDs(prompt, cpuM.Config().VocabSize)
			s, err := cpuM.NewSequence()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var want []int
			l, err := s.Forward(ids, false)
			for range tokens {
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, pick.ArgMax(l))
				l, err = s.Forward(want[len(want)-1:], false)
			}

			gpu, _ := newFakeBackend(t, Options{})
			gpu.Launches()
			m := loadModel(t, dir, model.Options{Backend: gpu, MaxContext: 64})
			if !m.DeviceGreedy() {
				t.Fatal("the CUDA backend's model does not pick on the device")
			}
			bt, err := m.NewBatch(16)
			if err != nil {
				t.Fatal(err)
			}
			g, err := m.NewSequence()
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			items := []model.BatchItem{{Seq: g, IDs: ids, Greedy: true}}
			var got []int
			for i := range tokens {
				before := gpu.Launches()
				if err := bt.Forward(items); err != nil {
					t.Fatal(err)
				}
				st := gpu.Launches().Sub(before)
				it := items[0]
				if it.Logits != nil || it.NonFinite != -1 {
					t.Fatalf("token %d: logits %d values, first non-finite at %d; want none and -1", i, len(it.Logits), it.NonFinite)
				}
				if i > 0 && st.CopiesOut != 1 {
					t.Errorf("decode step %d: %d copies out, want the token's alone", i, st.CopiesOut)
				}
				// The first decode step is seen, the second captured; the
				// context stays in one shape class (one block of 16) up
				// to position 15.
				if i >= 2 && prompt+i < 16 && (st.Graphs != 1 || st.Kernels != 0) {
					t.Errorf("decode step %d: %+v, want one graph launch", i, st)
				}
				got = append(got, it.Token)
				items[0].IDs = got[len(got)-1:]
			}
			if !slices.Equal(got, want) {
				t.Errorf("greedy tokens on the device %v, the CPU's %v", got, want)
			}
		})
	}
}
