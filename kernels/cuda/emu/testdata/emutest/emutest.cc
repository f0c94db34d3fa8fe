//go:build cgo && linux

// A second emulator, of the test kernels in testkernels.cuh: the runtime of
// ../../emu.cc under other C names (everything else in it is internal).
#define KK_EMU_TEST_KERNELS "testkernels.cuh"
#define KK_EMU_API_PREFIX kk_emutest_
#include "../../emu.cc"
