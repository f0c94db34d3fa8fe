// all.cu: every kernel source, one translation unit. clang compiles it to
// the committed PTX (make ptx) and the emulator includes it (emu.cc), so
// the two cannot disagree on the set of kernels.
#include "elementwise.cu"
#include "matvec.cu"
#include "fused.cu"
#include "attention.cu"
#include "attention_ec.cu"
#include "encode.cu"
#include "sample.cu"
#include "draw.cu"
#include "gemm.cu"
#include "prefill.cu"
#include "quant.cu"
