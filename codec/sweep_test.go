package codec

import (
	"fmt"
	"os"
	"testing"
)

// TestSweep prints bits/value (all overhead included) against relative error
// for every codec on synthetic blocks. Run with KAKEYA_SWEEP=1 -v.
func TestSweep(t *testing.T) {
	if os.Getenv("KAKEYA_SWEEP") == "" {
		t.Skip("set KAKEYA_SWEEP=1 to print the parameter sweep")
	}
	type entry struct {
		name string
		c    Codec
	}
	var cs []entry
	add := func(c Codec, err error) {
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, entry{c.Name(), c})
	}
	add(BF16{}, nil)
	add(Int8{}, nil)
	for _, o := range []Int4Options{{Group: 32}, {Group: 32, Rotate: true, Seed: 1}, {Group: 32, PerChannel: true}, {Group: 64, Rotate: true, Seed: 1}} {
		add(NewInt4(o))
	}
	cbitsList, rankList := []int{4, 8, 16}, []int{0, 2, 4, 8}
	if os.Getenv("KAKEYA_SWEEP") == "short" {
		cbitsList, rankList = []int{4, 8}, []int{0, 4, 8}
	}
	for _, b := range []int{2, 3, 4} {
		for _, rk := range rankList {
			for _, cbits := range cbitsList {
				if rk == 0 && cbits == 16 {
					continue
				}
				for _, out := range []float32{0, 3} {
					o := DefaultKakeyaOptions()
					o.Bits, o.MaxRank, o.CoeffBits, o.OutlierThreshold = b, rk, cbits, out
					o.VarianceRatio = 1
					add(NewKakeya(o))
				}
			}
		}
		o := DefaultKakeyaOptions()
		o.Bits = b
		add(NewKakeya(o))
		o.VarianceRatio = 0.95
		add(NewKakeya(o))
		o.RandomSigns = false
		add(NewKakeya(o))
	}
	for _, d := range []int{64, 128} {
		const n = 256
		for _, kd := range []kind{keyLike, valueLike, studentT} {
			fmt.Printf("\n== d=%d n=%d %s ==\n%-36s %8s %10s\n", d, n, kd, "codec", "bits/val", "rel.err")
			for _, e := range cs {
				var bytes int
				var err float64
				const blocks = 8
				for s := uint64(0); s < blocks; s++ {
					x := synth(kd, n, d, 7, 100+s)
					enc, er := e.c.Encode(nil, x, n, d)
					if er != nil {
						t.Fatal(er)
					}
					y := make([]float32, n*d)
					if er := e.c.Decode(y, enc, n, d); er != nil {
						t.Fatal(er)
					}
					bytes += len(enc)
					err += relErr(x, y, n, d)
				}
				fmt.Printf("%-36s %8.3f %10.5f\n", e.name, float64(8*bytes)/float64(blocks*n*d), err/blocks)
			}
		}
	}
}
