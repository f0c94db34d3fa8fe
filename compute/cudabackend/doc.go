// Package cudabackend is the NVIDIA GPU backend: a compute.Backend whose buffers,
// weights and KV blocks live in device memory and whose operations are CUDA
// kernels (compiled to PTX by clang, embedded in the binary and JIT-compiled
// by the driver), driven through the CUDA driver API loaded at run time.
//
// Nothing of CUDA is linked at build time: New opens libcuda.so.1 with
// dlopen (cgo, Linux) and declares the few driver calls it makes itself, so
// the default binary carries the backend and runs wherever the NVIDIA
// driver is installed, with no toolkit; without the driver, or built with
// CGO_ENABLED=0, New fails at once saying why. cuBLAS (libcublas.so.13 or
// .12), when it loads, computes prefill's matrix products; otherwise the
// backend's own kernel does. New looks for it where the CUDA toolkit and
// NVIDIA's Python wheels install it as well as on the loader's path, or
// loads the library KAKEYA_CUBLAS names (searchCUBLAS has the order), and
// Describe names the one used.
//
// The KV cache stays on the device as the cache encodes it: the attention
// kernel reads blocks of the int8, int4, int2 (per token or per channel,
// any power-of-two group, no rotation), Kakeya and kakeya-pc (fixed rate and
// entropy-coded;
// its calibrated basis uploaded once per codec) codecs from their bytes,
// decoding each tile of keys and
// values in shared memory, and keys of a preconditioned codec
// (codec.Preconditioned, whitened per layer and KV head) likewise, each
// decoded key row multiplied there by its head's inverse factor, uploaded
// once, before RoPE and the dot products. Blocks of other codecs hold
// their decoded values. Full int8, int4 (as attention reads it) and
// kakeya-pc blocks (fixed rate and entropy-coded) are encoded on the
// device (the store is a compute.PartEncoder, encode.go), and so are
// preconditioned keys of those codecs, whitened there first (enc_whiten);
// the others on the host.
//
// A decode step runs each decoder layer as five kernels (compute.Fused,
// see fused.go): the normalisation, projections, biases, RoPE and cache
// write of the attention input in one, the feed-forward's normalisation,
// gate, up and SiLU in another, and each residual projection with its add;
// the final norm and the output head are one more.
//
// Work goes to one stream in call order and the host waits only where it
// reads results back (logits, blocks the host encodes). Runs of launches that
// repeat exactly from one decode step to the next are captured once as
// CUDA graphs and replayed. A kernel's arguments reach it through
// cuLaunchKernel's kernelParams, laid out as its PTX .param list declares
// them (a test reads every .entry of the embedded PTX and checks each
// launcher against it), and every driver call makes the backend's context
// current on the OS thread it runs on. The first driver failure is kept
// and returned by every method that returns errors (see Backend), and by
// Err, which the model checks after every forward step: a kernel that
// faults surfaces as an error, never as NaN logits. Options.Sync
// (KAKEYA_CUDA_SYNC=1) waits after every kernel and names the one that
// failed.
//
// The host logic is tested without a GPU against a fake driver whose
// memory is host memory and whose kernels run in the CPU emulation of
// package kernels, and the cgo driver path against stub libraries the
// tests compile; go test -tags gpu (make gpu-check) checks a real device.
package cudabackend
