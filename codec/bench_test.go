package codec

import (
	"fmt"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/cputime"
)

// BenchmarkCodecs measures encode and decode throughput in vectors/s for
// every codec at head_dim 64 and 128, blocks of 256 and 512 tokens.
func BenchmarkCodecs(b *testing.B) {
	codecs := []Codec{BF16{}, Int8{}}
	for _, o := range []Int4Options{{Group: 32}, {Group: 32, Rotate: true, Seed: 1}} {
		c, _ := NewInt4(o)
		codecs = append(codecs, c)
	}
	k, _ := NewKakeya(DefaultKakeyaOptions())
	o := DefaultKakeyaOptions()
	o.MaxRank = 0
	k0, _ := NewKakeya(o)
	codecs = append(codecs, k, k0)
	for _, c := range codecs {
		for _, d := range []int{64, 128} {
			for _, n := range []int{256, 512} {
				x := synth(keyLike, n, d, 1, 1)
				enc, err := c.Encode(nil, x, n, d)
				if err != nil {
					b.Fatal(err)
				}
				y := make([]float32, n*d)
				name := fmt.Sprintf("%s/d=%d/n=%d", c.Name(), d, n)
				b.Run("encode/"+name, func(b *testing.B) {
					buf := make([]byte, 0, len(enc))
					for b.Loop() {
						buf, _ = c.Encode(buf[:0], x, n, d)
					}
					b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "vectors/s")
				})
				b.Run("decode/"+name, func(b *testing.B) {
					for b.Loop() {
						if err := c.Decode(y, enc, n, d); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "vectors/s")
				})
			}
		}
	}
}

// BenchmarkKakeyaPC measures kakeya-pc (statistics from 64 blocks of the
// synthetic keys) beside kakeya-b2 at blocks of 64 tokens, head_dim 64 and
// 128: encode and decode in vectors/s, and AddWeighted (the value path of
// attention, one weight row) in vectors/s; the entropy-coded kakeya-pc
// (ec) and kvtc at the same rate beside them, with each one's encoded
// bytes per block.
func BenchmarkKakeyaPC(b *testing.B) {
	const n = 64
	for _, d := range []int{64, 128} {
		st := benchKeyStats(b, n, d)
		var pcs []RowCombiner
		for _, mode := range [][2]bool{{false, false}, {true, false}, {true, true}} {
			o := DefaultKakeyaPCOptions()
			o.Entropy, o.Uniform = mode[0], mode[1]
			pc, err := NewKakeyaPC(o, st, nil)
			if err != nil {
				b.Fatal(err)
			}
			pcs = append(pcs, pc)
		}
		o := DefaultKakeyaOptions()
		o.Bits = 2
		kk, _ := NewKakeya(o)
		x := synth(keyLike, n, d, 1, 1)
		for _, c := range append(pcs, kk) {
			enc, err := c.Encode(nil, x, n, d)
			if err != nil {
				b.Fatal(err)
			}
			y := make([]float32, n*d)
			w := make([]float32, n)
			for i := range w {
				w[i] = 1 / float32(n)
			}
			name := fmt.Sprintf("%s/d=%d/n=%d", c.Name(), d, n)
			b.Run("encode/"+name, func(b *testing.B) {
				buf := make([]byte, 0, len(enc))
				for b.Loop() {
					buf, _ = c.Encode(buf[:0], x, n, d)
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "vectors/s")
				b.ReportMetric(float64(len(enc)), "bytes/block")
			})
			b.Run("decode/"+name, func(b *testing.B) {
				for b.Loop() {
					if err := c.Decode(y, enc, n, d); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "vectors/s")
			})
			b.Run("addweighted/"+name, func(b *testing.B) {
				for b.Loop() {
					if err := c.AddWeighted(y[:d], 1, w, n, enc, n, d, 0, n); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "vectors/s")
			})
		}
	}
}

// BenchmarkPCEncode times one block's Encode at head_dim 64, blocks of 64
// (statistics from 64 blocks of the synthetic keys), for the fixed-width
// codes (format 8), the entropy-constrained ones (format 9) at two rates
// and kvtc, in CPU µs per block, which the other load of a shared machine
// does not add to as it does to the wall time: the encode a cache runs
// each time a block leaves its hot window.
func BenchmarkPCEncode(b *testing.B) {
	const n, d = 64, 64
	st := benchKeyStats(b, n, d)
	x := synth(keyLike, n, d, 1, 1)
	for _, spec := range []string{"kakeya-pc", "kakeya-pc:ec=true", "kakeya-pc:rate=1.95,ec=true", "kvtc:rate=2.5"} {
		cd, err := Parse(spec)
		if err != nil {
			b.Fatal(err)
		}
		k, err := NewKakeyaPC(cd.(*KakeyaPC).Options(), st, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(spec, func(b *testing.B) {
			buf, err := k.Encode(nil, x, n, d)
			if err != nil {
				b.Fatal(err)
			}
			cpu0 := cputime.Seconds()
			for b.Loop() {
				buf, _ = k.Encode(buf[:0], x, n, d)
			}
			if cpu := cputime.Seconds() - cpu0; cpu > 0 {
				b.ReportMetric(cpu/float64(b.N)*1e6, "cpu-us/op")
			}
			b.ReportMetric(float64(len(buf)), "bytes/block")
		})
	}
}

// benchKeyStats returns the statistics (pcStats) of 64 key-like blocks of
// n rows of d, the calibration the kakeya-pc benchmarks code against.
func benchKeyStats(tb testing.TB, n, d int) *PCAStats {
	blocks := make([][]float32, 64)
	for s := range blocks {
		blocks[s] = synth(keyLike, n, d, 1, uint64(s+2))
	}
	return pcStats(tb, blocks, n, d)
}
