package codec

import (
	"fmt"
	"testing"
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
