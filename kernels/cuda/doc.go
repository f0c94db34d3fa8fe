// Package cuda holds the CUDA C++ sources of the GPU backend's kernels and
// their PTX for the device (PTX, embedded); package emu below it runs the
// same sources on the CPU against a runtime that runs a grid's threads as
// fibers, so the kernels are tested without a GPU.
//
// The sources are one translation unit, all.cu: elementwise.cu (embed,
// rmsnorm, add_rows, add, silu_mul, rope, and kv_write, the KV cache's
// writes of float32 rows into float32 or bf16 parts), matvec.cu
// (decode's matvec and the tiled matmul, for f32, bf16 and f16 weights),
// attention.cu (attn_split and attn_combine over paged, possibly
// encoded, KV blocks; attn_split_pre also un-whitens preconditioned keys,
// attn_split_pc also reads kakeya-pc blocks; attn_batch and its _pre and
// _pc variants run the split pass of every sequence of a step in one
// launch), attention_ec.cu (the _pc kernels' reader of entropy-coded
// kakeya-pc blocks, kk_pcec_tile) and encode.cu (enc_int8, enc_int4 and
// enc_pc: full KV blocks encoded as codec.Int8, codec.Int4 and
// codec.KakeyaPC do, header and CRC included), sample.cu (argmax, the
// greedy token on the device) and draw.cu (draw_rows, a sampled token on
// the device from the host's uniform, as the host Sampler draws it, with
// top-k, top-p and min-p; draw_split_max and draw_split, the same with a
// row over several blocks).
// They use only what prelude.cuh declares. For the device, clang compiles
// them to PTX without the CUDA SDK (make ptx; the PTX is committed as
// kernels_sm80.ptx and embedded here; compute/cudabackend's launch.go
// describes every launch). For the host, emu.h maps the same names onto
// the emulator of emu/emu.cc.
package cuda
