package cpu

import (
	"fmt"
	"os"
	"runtime"
	"strings"
)

// EnvCPU names the environment variable that caps the kernel level the
// process runs: "scalar", "avx2", "avx512" or "avx512bf16" on amd64,
// "scalar" or "neon" on arm64 (or empty, the best the CPU runs). A cap
// above what the CPU runs changes nothing; a cap below it lets the slower
// paths be measured and tested on a faster CPU. It is read once, when the
// package initialises.
const EnvCPU = "KAKEYA_CPU"

// level is a kernel level, each including those below it.
type level int

const (
	levelScalar     level = iota
	levelSIMD             // the first vector level: AVX2 (amd64), NEON (arm64)
	levelAVX512           // amd64
	levelAVX512BF16       // amd64
	levelMax              // above every level: no cap
)

// levelAVX2 is levelSIMD on amd64.
const levelAVX2 = levelSIMD

// levelNames returns the names of this architecture's levels, lowest
// first.
func levelNames() []string {
	switch runtime.GOARCH {
	case "amd64":
		return []string{"scalar", "avx2", "avx512", "avx512bf16"}
	case "arm64":
		return []string{"scalar", "neon"}
	}
	return []string{"scalar"}
}

// parseLevel returns the level s names; empty is no cap.
func parseLevel(s string) (level, error) {
	if s == "" {
		return levelMax, nil
	}
	names := levelNames()
	for l, name := range names {
		if s == name {
			return level(l), nil
		}
	}
	return levelMax, fmt.Errorf("%s=%q: want one of %s", EnvCPU, s, strings.Join(names, ", "))
}

// isaCap is the level $KAKEYA_CPU allows, and isaCapErr what was wrong
// with its value (the cap is then the highest level).
var isaCap, isaCapErr = parseLevel(os.Getenv(EnvCPU))

// CheckEnv reports a $KAKEYA_CPU value that names no kernel level, for a
// tool to stop on before it runs (the package then runs the best kernels
// the CPU has).
func CheckEnv() error { return isaCapErr }

// bestSet is the best kernel set this CPU runs, as far as $KAKEYA_CPU
// allows: the Go loops, with the C kernels for matrix products.
var bestSet = func() kernelSet {
	l, _ := loops()
	k := *l
	k.avx2c, k.avx512, k.dotBF16, k.neon = hasAVX2C, hasAVX512, hasBF16Dot, hasNEON
	c := ""
	switch {
	case hasBF16Dot:
		c = "avx512bf16"
	case hasAVX512:
		c = "avx512"
	case hasAVX2C:
		c = "avx2"
	case hasNEON:
		c = "neon"
	}
	switch {
	case c == "":
	case k.name == "scalar":
		k.name = "scalar+" + c
	default:
		k.name = c
	}
	return k
}()

func bestKernels() *kernelSet { return &bestSet }

// Features describes the kernels this process runs, for a tool to print:
// the Go loops ("avx2+fma (GOEXPERIMENT=simd)", or scalar and why), the C
// kernels that multiply bf16, f16 and quantized (GGUF block) weights where
// the CPU runs them, and the $KAKEYA_CPU cap when one holds them back.
func Features() string {
	_, s := loops()
	switch {
	case hasBF16Dot:
		s += ", avx512+avx512_bf16 for bf16 weights"
	case hasAVX512:
		s += ", avx512 for bf16 weights"
	}
	switch {
	case hasAVX2C && hasAVX512:
		s += ", avx2+fma+f16c for f16 weights"
	case hasAVX2C:
		s += ", avx2+fma+f16c for bf16 and f16 weights"
	case hasNEON:
		s += ", neon for bf16 and f16 weights"
	}
	switch {
	case hasAVX2C && hasQuant512:
		s += ", avx512+vnni for quantized weights"
	case hasAVX2C:
		s += ", avx2 for quantized weights"
	case hasQuantDot:
		s += ", neon+dotprod for quantized weights"
	case hasNEON:
		s += ", neon for quantized weights"
	}
	if hasAVX2C || hasAVX512 || hasNEON {
		s += " (cgo)"
	}
	return s + capNote()
}

// Levels returns the kernel levels this CPU and build run, lowest first, as
// $KAKEYA_CPU names them: "scalar", then "avx2", "avx512" and "avx512bf16"
// (amd64) or "neon" (arm64) where there are kernels for them. The cap does
// not change the list; it is what $KAKEYA_CPU can select, for a test or a
// benchmark.
func Levels() []string {
	l := []string{"scalar"}
	switch {
	case cpuAVX2 || cpuAVX2C:
		l = append(l, "avx2")
	case cpuNEON:
		l = append(l, "neon")
	}
	if cpuAVX512 {
		l = append(l, "avx512")
	}
	if cpuBF16Dot {
		l = append(l, "avx512bf16")
	}
	return l
}

// Level returns the kernel level in force: the highest of Levels that
// $KAKEYA_CPU allows.
func Level() string {
	all := Levels()
	for i := len(all) - 1; i > 0; i-- {
		if lv, _ := parseLevel(all[i]); lv <= isaCap {
			return all[i]
		}
	}
	return all[0]
}

// capNote is what Features adds when $KAKEYA_CPU holds a level back.
func capNote() string {
	if v := os.Getenv(EnvCPU); v != "" && isaCapErr == nil {
		return " [" + EnvCPU + "=" + v + "]"
	}
	return ""
}
