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

// TestCalibrationPCA: principal components round-trip through Tensors and
// FromTensors under their names, and missing, misshapen or out-of-range
// ones are errors.
func TestCalibrationPCA(t *testing.T) {
	const d = 8
	c := testCalibration(t)
	st := func(seed float32) *PCAStats {
		s := &PCAStats{Mean: make([]float32, d), Basis: make([]float32, d*d), Var: make([]float32, d), Between: make([]float32, d)}
		for j := range d {
			s.Basis[j*d+j] = 1
			s.Var[j] = seed / float32(j+1)
			s.Between[j] = seed
			s.Mean[j] = seed * float32(j)
		}
		return s
	}
	for i := range 4 {
		c.KPCA = append(c.KPCA, st(float32(i+1)))
	}
	c.VPCA = []*PCAStats{st(10), st(20)}
	if err := c.Validate(2, 2, d); err != nil {
		t.Fatal(err)
	}
	meta, ts := c.Metadata(), c.Tensors()
	if s := ts["layers.1.kv_heads.0.pca.k.basis"].Shape; !slices.Equal(s, []int{d, d}) {
		t.Errorf("basis shape %v", s)
	}
	if _, ok := ts["layers.1.pca.v.between"]; !ok {
		t.Error("no tensor layers.1.pca.v.between")
	}
	back, err := FromTensors(meta, ts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.KPCA {
		if !slices.Equal(back.KPCA[i].Var, c.KPCA[i].Var) || !slices.Equal(back.KPCA[i].Mean, c.KPCA[i].Mean) {
			t.Errorf("key statistics %d differ after the round trip", i)
		}
	}
	if !slices.Equal(back.VPCA[1].Between, c.VPCA[1].Between) || !slices.Equal(back.VPCA[0].Basis, c.VPCA[0].Basis) {
		t.Error("value statistics differ after the round trip")
	}
	for name, edit := range map[string]func(ts map[string]Tensor){
		"missing part": func(ts map[string]Tensor) { delete(ts, "layers.0.pca.v.var") },
		"missing side": func(ts map[string]Tensor) {
			delete(ts, "layers.1.kv_heads.1.pca.k.mean")
			delete(ts, "layers.1.kv_heads.1.pca.k.basis")
			delete(ts, "layers.1.kv_heads.1.pca.k.var")
			delete(ts, "layers.1.kv_heads.1.pca.k.between")
		},
		"layer range": func(ts map[string]Tensor) { ts["layers.2.pca.v.var"] = ts["layers.0.pca.v.var"] },
		"shape": func(ts map[string]Tensor) {
			ts["layers.0.pca.v.var"] = Tensor{Shape: []int{2, 4}, Data: ts["layers.0.pca.v.var"].Data}
		},
		"negative": func(ts map[string]Tensor) {
			ts["layers.0.pca.v.var"] = Tensor{Shape: []int{d}, Data: []float32{1, 1, 1, -1, 1, 1, 1, 1}}
		},
		"not unit basis": func(ts map[string]Tensor) {
			ts["layers.0.pca.v.basis"] = Tensor{Shape: []int{d, d}, Data: make([]float32, d*d)}
		},
	} {
		t2 := maps.Clone(ts)
		edit(t2)
		if _, err := FromTensors(meta, t2); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	c.VPCA = c.VPCA[:1]
	if err := c.Validate(2, 2, d); err == nil || !strings.Contains(err.Error(), "1 value PCA entries") {
		t.Errorf("one value entry for two layers: %v", err)
	}
}
