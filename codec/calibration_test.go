package codec

import (
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
)

func testCalibration(t *testing.T) *Calibration {
	t.Helper()
	d := 8
	c := &Calibration{Layers: 2, KVHeads: 2, HeadDim: d, Model: "test/model", Chol: make([][]float32, 4)}
	for i := range c.Chol {
		if i == 2 {
			continue // a head without a factor
		}
		l, err := Cholesky(anisotropicCov(d, uint64(i)), d, 0.01)
		if err != nil {
			t.Fatal(err)
		}
		c.Chol[i] = l
	}
	k3, _ := GaussianCodebook(3)
	v2, _ := GaussianCodebook(2)
	c.KCodebooks = map[int]*Codebook{3: k3}
	c.VCodebooks = map[int]*Codebook{2: v2}
	return c
}

func TestCalibrationTensorsRoundTrip(t *testing.T) {
	c := testCalibration(t)
	if err := c.Validate(2, 2, 8); err != nil {
		t.Fatal(err)
	}
	ts := c.Tensors()
	names := slices.Sorted(maps.Keys(ts))
	want := []string{"codebook.k.b3", "codebook.v.b2", "layers.0.kv_heads.0.chol", "layers.0.kv_heads.1.chol", "layers.1.kv_heads.1.chol"}
	if !slices.Equal(names, want) {
		t.Fatalf("tensor names %v, want %v", names, want)
	}
	if s := ts["layers.1.kv_heads.1.chol"].Shape; !slices.Equal(s, []int{8, 8}) {
		t.Errorf("chol shape %v", s)
	}
	back, err := FromTensors(c.Metadata(), ts)
	if err != nil {
		t.Fatal(err)
	}
	if back.Model != c.Model || back.Layers != 2 || back.KVHeads != 2 || back.HeadDim != 8 {
		t.Errorf("metadata round trip: %+v", back)
	}
	for i := range c.Chol {
		if !slices.Equal(back.Chol[i], c.Chol[i]) {
			t.Errorf("chol %d differs", i)
		}
	}
	if !slices.Equal(back.KCodebooks[3].Levels, c.KCodebooks[3].Levels) || !slices.Equal(back.VCodebooks[2].Bounds, c.VCodebooks[2].Bounds) {
		t.Error("codebooks differ after round trip")
	}
}

func TestCalibrationErrors(t *testing.T) {
	c := testCalibration(t)
	if err := c.Validate(3, 2, 8); err == nil || !strings.Contains(err.Error(), "3 x 2 x 8") {
		t.Errorf("layer mismatch: %v", err)
	}
	if err := c.Validate(2, 2, 16); err == nil {
		t.Error("head_dim mismatch accepted")
	}
	c.Chol[0][1] = 1
	if err := c.Validate(2, 2, 8); err == nil || !strings.Contains(err.Error(), "above the diagonal") {
		t.Errorf("upper entry: %v", err)
	}
	good := testCalibration(t)
	meta, ts := good.Metadata(), good.Tensors()
	edits := map[string]func(m map[string]string, ts map[string]Tensor){
		"format": func(m map[string]string, _ map[string]Tensor) { m["format"] = "x" },
		"layers": func(m map[string]string, _ map[string]Tensor) { m["layers"] = "zero" },
		"unknown name": func(_ map[string]string, ts map[string]Tensor) {
			ts["foo"] = Tensor{Shape: []int{1}, Data: []float32{1}}
		},
		"head range": func(_ map[string]string, ts map[string]Tensor) {
			ts["layers.0.kv_heads.5.chol"] = ts["layers.0.kv_heads.0.chol"]
		},
		"shape": func(_ map[string]string, ts map[string]Tensor) {
			ts["layers.0.kv_heads.0.chol"] = Tensor{Shape: []int{4, 16}, Data: ts["layers.0.kv_heads.0.chol"].Data}
		},
		"levels": func(_ map[string]string, ts map[string]Tensor) {
			ts["codebook.k.b3"] = Tensor{Shape: []int{4}, Data: []float32{-2, -1, 1, 2}}
		},
		"unsorted": func(_ map[string]string, ts map[string]Tensor) {
			ts["codebook.k.b1"] = Tensor{Shape: []int{2}, Data: []float32{1, -1}}
		},
	}
	for name, edit := range edits {
		m2 := map[string]string{}
		for k, v := range meta {
			m2[k] = v
		}
		t2 := map[string]Tensor{}
		for k, v := range ts {
			t2[k] = v
		}
		edit(m2, t2)
		if _, err := FromTensors(m2, t2); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestCovAccumulator(t *testing.T) {
	d := 5
	a := NewCovAccumulator(d)
	qs := synth(studentT, 100, d, 1, 1)
	for i := 0; i < 100; i++ {
		if err := a.Add(qs[i*d : (i+1)*d]); err != nil {
			t.Fatal(err)
		}
	}
	if a.Count() != 100 {
		t.Errorf("count %d", a.Count())
	}
	cov := a.Cov()
	for i := 0; i < d; i++ {
		for j := 0; j < d; j++ {
			var want float64
			for k := 0; k < 100; k++ {
				want += float64(qs[k*d+i]) * float64(qs[k*d+j]) / 100
			}
			if math.Abs(cov[i*d+j]-want) > 1e-9*(1+math.Abs(want)) {
				t.Fatalf("cov[%d][%d] = %v, want %v", i, j, cov[i*d+j], want)
			}
		}
	}
	if err := a.Add(make([]float32, d+1)); err == nil {
		t.Error("wrong length accepted")
	}
	if err := a.Add([]float32{1, 2, float32(math.Inf(1)), 0, 0}); err == nil {
		t.Error("Inf accepted")
	}
}
