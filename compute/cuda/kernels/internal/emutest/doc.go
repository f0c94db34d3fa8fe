// Package emutest runs kernels that test the kernels package's emulator
// itself (barriers, warp collectives, atomics), including kernels broken on
// purpose that a faithful emulation must catch. They are compiled into
// this package's own copy of the emulator (with cgo on Linux), never into
// the PTX or the kernels package.
package emutest
