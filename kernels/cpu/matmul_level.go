package cpu

// MatMulOnly returns the level below level that differs from it only in
// the matrix products of MatMul (and what calls it), "" when there is
// none: "avx512bf16" adds to "avx512" nothing but the VDPBF16PS products
// of bf16 weights (matMul's dotBF16), every other kernel being avx512's.
// A test of code that never multiplies through MatMul need not rerun at
// that level what it ran at level (internal/leveltest.NoMatMul).
func MatMulOnly(level string) string {
	if level == "avx512bf16" {
		return "avx512"
	}
	return ""
}
