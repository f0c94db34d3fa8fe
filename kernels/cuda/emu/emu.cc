//go:build cgo && linux

// emu.cc: the CPU emulator of the kernels (see emu.h for the model) and
// the C API emu.go calls. The kernels are compiled into this translation
// unit from all.cu. With KK_EMU_TEST_KERNELS defined (the test package
// testdata/emutest does, including this file), the kernels are instead
// that file's, and the API is named by KK_EMU_API_PREFIX so that both
// emulators link into one test binary.
#define KK_EMU 1
#include "../prelude.cuh"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#if !defined(__x86_64__) || defined(KK_EMU_UCONTEXT)
#include <ucontext.h>
#endif

namespace kkemu {
namespace {

// ---- fibers -----------------------------------------------------------

const size_t stackSize = 64 << 10;

#if defined(__x86_64__) && !defined(KK_EMU_UCONTEXT)
// A context switch saves the callee-saved registers and the SSE and x87
// control words on the old stack and restores them from the new one: a
// few nanoseconds, where swapcontext makes a system call for the signal
// mask (about 12 times slower on the kernels' tests). The control words
// are loaded only when they differ from the ones in effect: ldmxcsr and
// fldcw stall the pipeline, and were most of a switch's time, while no
// fiber changes them. The symbol is local
// to this object, so each emulator has its own. Other architectures take
// ucontext, and so does x86-64 with -DKK_EMU_UCONTEXT in CGO_CXXFLAGS,
// which is how that path is tested.
extern "C" void kk_emu_fiber_switch(void **save, void *to);
asm(R"(
	.pushsection .text
	.p2align 4
	.type kk_emu_fiber_switch, @function
kk_emu_fiber_switch:
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	subq $8, %rsp
	stmxcsr (%rsp)
	fnstcw 4(%rsp)
	movl (%rsp), %eax
	andl $0xffc0, %eax
	movzwl 4(%rsp), %edx
	movq %rsp, (%rdi)
	movq %rsi, %rsp
	movl (%rsp), %ecx
	andl $0xffc0, %ecx
	cmpl %ecx, %eax
	je 1f
	ldmxcsr (%rsp)
1:
	cmpw 4(%rsp), %dx
	je 2f
	fldcw 4(%rsp)
2:
	addq $8, %rsp
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbx
	popq %rbp
	ret
	.size kk_emu_fiber_switch, .-kk_emu_fiber_switch
	.popsection
)");

struct Context {
	void *sp;
};

// start prepares c to enter fn on the stack [lo, lo+size) as if fn had
// been called: the switch pops the saved registers, then returns into fn
// with the stack 8 bytes off 16-byte alignment, as after a call.
void start(Context *c, char *lo, size_t size, void (*fn)()) {
	uintptr_t top = ((uintptr_t)(lo + size)) & ~(uintptr_t)15;
	uint64_t *s = (uint64_t *)top;
	*--s = 0;               // fn's return address: fn never returns
	*--s = (uint64_t)fn;    // popped by the switch's ret
	for (int i = 0; i < 6; i++)
		*--s = 0;           // rbp, rbx, r12..r15
	*--s = 0x037f00001f80u; // mxcsr 0x1f80, x87 control word 0x037f
	c->sp = s;
}

void swap(Context *from, Context *to) { kk_emu_fiber_switch(&from->sp, to->sp); }

// prefetch starts loading what a switch to c reads first: the registers
// saved at its stack pointer and the frames above them.
void prefetch(const Context *c) {
	const char *sp = (const char *)c->sp;
	__builtin_prefetch(sp);
	__builtin_prefetch(sp + 64);
	__builtin_prefetch(sp + 128);
}

#else

struct Context {
	ucontext_t uc;
};

void start(Context *c, char *lo, size_t size, void (*fn)()) {
	getcontext(&c->uc);
	c->uc.uc_stack.ss_sp = lo;
	c->uc.uc_stack.ss_size = size;
	c->uc.uc_link = nullptr;
	makecontext(&c->uc, fn, 0);
}

void swap(Context *from, Context *to) { swapcontext(&from->uc, &to->uc); }

void prefetch(const Context *c) { __builtin_prefetch(c); }

#endif

// ---- kernels and their arguments ---------------------------------------

// Entry is one kernel: its name, the size of its packed arguments and a
// thunk that unpacks them and calls it.
struct Entry {
	const char *name;
	void (*run)(const unsigned char *args);
	size_t args;
};

constexpr size_t alignUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Thunk<F> unpacks a kernel's parameters, laid out as its .param space is
// (each argument at an offset rounded up to its size, nothing after the
// last), into F's parameters.
template <auto F> struct Thunk;
template <class... A, void (*F)(A...)> struct Thunk<F> {
	static constexpr size_t offset(size_t i) {
		constexpr size_t sizes[] = {sizeof(A)..., 0};
		size_t off = 0;
		for (size_t j = 0;; j++) {
			off = alignUp(off, sizes[j] ? sizes[j] : 1);
			if (j == i)
				return off;
			off += sizes[j];
		}
	}
	static constexpr size_t size() { return offset(sizeof...(A)); }
	template <size_t... I> static void call(const unsigned char *b, std::index_sequence<I...>) {
		std::tuple<A...> t;
		(std::memcpy(&std::get<I>(t), b + offset(I), sizeof(A)), ...);
		std::apply(F, t);
	}
	static void run(const unsigned char *b) { call(b, std::index_sequence_for<A...>{}); }
};

#define KK_ENTRY(f) {#f, &::kkemu::Thunk<&f>::run, ::kkemu::Thunk<&f>::size()}

} // namespace
} // namespace kkemu

#ifdef KK_EMU_TEST_KERNELS
#include KK_EMU_TEST_KERNELS
#else
#include "../all.cu"
namespace kkemu {
namespace {
// The kernels, in the order of all.cu. A test checks this list against
// the PTX's entries, so a kernel cannot be missing from either.
const Entry kernels[] = {
    KK_ENTRY(embed_f32), KK_ENTRY(embed_bf16), KK_ENTRY(embed_f16), KK_ENTRY(rmsnorm), KK_ENTRY(rmsnorm_add), KK_ENTRY(add_rows),
    KK_ENTRY(add),       KK_ENTRY(silu_mul),   KK_ENTRY(gelu_tanh_mul), KK_ENTRY(scalar_mul), KK_ENTRY(softcap),
    KK_ENTRY(rope),       KK_ENTRY(kv_write), KK_ENTRY(copy_runs), KK_ENTRY(kv_write_runs),
    KK_ENTRY(matvec_f32), KK_ENTRY(matvec_bf16), KK_ENTRY(matvec_f16),
    KK_ENTRY(norm_qkv_f32), KK_ENTRY(norm_swiglu_f32), KK_ENTRY(matvec_add_f32), KK_ENTRY(norm_matvec_f32),
    KK_ENTRY(norm_qkv_bf16), KK_ENTRY(norm_swiglu_bf16), KK_ENTRY(matvec_add_bf16), KK_ENTRY(norm_matvec_bf16),
    KK_ENTRY(norm_qkv_f16), KK_ENTRY(norm_swiglu_f16), KK_ENTRY(matvec_add_f16), KK_ENTRY(norm_matvec_f16),
    KK_ENTRY(matmul_f32), KK_ENTRY(matmul_bf16), KK_ENTRY(matmul_f16),
    KK_ENTRY(attn_split), KK_ENTRY(attn_split_pre), KK_ENTRY(attn_split_pc), KK_ENTRY(attn_batch),
    KK_ENTRY(attn_batch_pre), KK_ENTRY(attn_batch_pc), KK_ENTRY(attn_combine),
    KK_ENTRY(enc_int8), KK_ENTRY(enc_whiten), KK_ENTRY(enc_pc), KK_ENTRY(enc_pcec), KK_ENTRY(enc_int4), KK_ENTRY(enc_bf16), KK_ENTRY(argmax), KK_ENTRY(draw_rows), KK_ENTRY(draw_split_max), KK_ENTRY(draw_split),
    KK_ENTRY(to_bf16), KK_ENTRY(to_f16_rows), KK_ENTRY(scale_rows), KK_ENTRY(gemm_bf16), KK_ENTRY(gemm_f16),
    KK_ENTRY(attn_prefill_d64), KK_ENTRY(attn_prefill_batch_d64), KK_ENTRY(attn_prefill_d128),
    KK_ENTRY(attn_prefill_batch_d128), KK_ENTRY(attn_prefill_pc_d64), KK_ENTRY(attn_prefill_batch_pc_d64),
    KK_ENTRY(attn_prefill_pc_d128), KK_ENTRY(attn_prefill_batch_pc_d128), KK_ENTRY(pc_unpack),
    KK_ENTRY(quant_x_q8_0), KK_ENTRY(quant_x_q8_k),
    KK_ENTRY(matvec_q8_q8_0), KK_ENTRY(matmul_q_q8_0), KK_ENTRY(embed_q_q8_0), KK_ENTRY(dequant_q_q8_0),
    KK_ENTRY(matvec_q8_q4_0), KK_ENTRY(matmul_q_q4_0), KK_ENTRY(embed_q_q4_0), KK_ENTRY(dequant_q_q4_0),
    KK_ENTRY(matvec_q8_q5_0), KK_ENTRY(matmul_q_q5_0), KK_ENTRY(embed_q_q5_0), KK_ENTRY(dequant_q_q5_0),
    KK_ENTRY(matvec_q8_q4_k), KK_ENTRY(matmul_q_q4_k), KK_ENTRY(embed_q_q4_k), KK_ENTRY(dequant_q_q4_k),
    KK_ENTRY(matvec_q8_q5_k), KK_ENTRY(matmul_q_q5_k), KK_ENTRY(embed_q_q5_k), KK_ENTRY(dequant_q_q5_k),
    KK_ENTRY(matvec_q8_q6_k), KK_ENTRY(matmul_q_q6_k), KK_ENTRY(embed_q_q6_k), KK_ENTRY(dequant_q_q6_k),
};
} // namespace
} // namespace kkemu
#endif

namespace kkemu {
namespace {

// ---- the scheduler -------------------------------------------------------

enum State { ready, atBarrier, atWarp, done };

struct Block;

struct Fiber : Thread {
	int linear, lane, warp;
	State state;
	Context ctx;
	Block *b;
	// At a barrier: its source position.
	const char *file;
	int line;
	// At a warp collective: what, with whom, and the value exchanged.
	Op op;
	const char *what;
	unsigned mask;
	uint32_t val, result;
	int arg, width;
	// At mma: the lane's fragments (see mmaWarp).
	const uint32_t *ma, *mb;
	float *md;
};

struct Block {
	BlockDims d;
	const Entry *k;
	const unsigned char *args;
	std::vector<Fiber> th;
	std::vector<int> runnable;
	int ahead[2]; // the threads the next two picks return, drawn already; -1 for none
	// Per warp, the lanes at a warp collective and the lanes that
	// exited: a lane arriving at a collective finds whether it is the
	// last of its mask in a few instructions, not a walk of the warp.
	std::vector<uint32_t> atWarpLanes, doneLanes;
	int n, ndone, nbarrier;
	uint64_t rng;
	Context sched;
	std::string err;
};

uint64_t splitmix(uint64_t *s) {
	uint64_t z = (*s += 0x9e3779b97f4a7c15u);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

std::string format(const char *f, ...) {
	char buf[512];
	va_list ap;
	va_start(ap, f);
	vsnprintf(buf, sizeof buf, f, ap);
	va_end(ap);
	return buf;
}

Fiber *self() { return static_cast<Fiber *>(cur); }

// draw removes a thread from the runnable ones, drawn by the block's
// generator, and returns its index; there must be one.
int draw(Block *b) {
	// The high half of a 64 x 64-bit product maps the draw onto the
	// runnable threads without a division (a tenth of a switch's cost).
	size_t k = (size_t)(((unsigned __int128)splitmix(&b->rng) * b->runnable.size()) >> 64);
	int i = b->runnable[k];
	b->runnable[k] = b->runnable.back();
	b->runnable.pop_back();
	return i;
}

// pick returns the next thread to run, nullptr when there is none or the
// block failed: the one drawn at an earlier pick, else one drawn from the
// runnable ones. Drawing two picks ahead keeps the schedule random (each
// draw is uniform over the threads runnable at that moment; a thread
// woken in between waits for a later draw).
Fiber *pick(Block *b) {
	if (!b->err.empty())
		return nullptr;
	int i = b->ahead[0];
	if (i < 0) {
		if (b->runnable.empty())
			return nullptr;
		i = draw(b);
	}
	// The next two threads are drawn already, and what switching to them
	// reads fetched while this one runs: the saved context at the top of
	// the next one's stack (the switch to a fiber whose stack had left
	// the cache waited on that load, ~60% of a switch's time), and the
	// thread after it, whose stack pointer that prefetch needs.
	b->ahead[0] = b->ahead[1];
	b->ahead[1] = -1;
	if (b->ahead[0] < 0 && !b->runnable.empty())
		b->ahead[0] = draw(b);
	if (b->ahead[0] >= 0)
		prefetch(&b->th[b->ahead[0]].ctx);
	if (!b->runnable.empty()) {
		b->ahead[1] = draw(b);
		__builtin_prefetch(&b->th[b->ahead[1]].ctx);
	}
	return &b->th[i];
}

// yield lets the next thread run, drawn as the scheduler draws it, by
// switching to it directly (half the switches of a return to the
// scheduler, which then switched to it: most of the emulator's time); it
// returns to the scheduler when no thread may run. The fiber resumes when
// made runnable and drawn.
void yield(Fiber *t) {
	Block *b = t->b;
	Fiber *n = pick(b);
	if (n == t)
		return;
	if (!n) {
		swap(&t->ctx, &b->sched);
		return;
	}
	cur = n;
	swap(&t->ctx, &n->ctx);
}

// fail records the block's first error and leaves the fiber for good.
[[noreturn]] void fail(Fiber *t, const std::string &msg) {
	Block *b = t->b;
	if (b->err.empty())
		b->err = format("block (%u,%u,%u) thread (%u,%u,%u): ", b->d.bidx.x, b->d.bidx.y, b->d.bidx.z, t->idx.x, t->idx.y,
		                t->idx.z) +
		         msg;
	for (;;)
		yield(t);
}

void wake(Fiber *t) {
	t->b->atWarpLanes[t->warp] &= ~(1u << t->lane);
	t->state = ready;
	t->b->runnable.push_back(t->linear);
}

// checkBarrier releases the block's barrier once every live thread waits
// at it, and fails when some thread finished instead (barrier divergence:
// the device would hang or misbehave).
void checkBarrier(Fiber *t) {
	Block *b = t->b;
	if (b->nbarrier == 0 || b->nbarrier + b->ndone < b->n)
		return;
	Fiber *w = nullptr;
	for (Fiber &u : b->th)
		if (u.state == atBarrier) {
			w = &u;
			break;
		}
	if (b->ndone > 0)
		fail(t, format("barrier divergence: %d of %d threads exited while the others wait at __syncthreads (%s:%d)",
		               b->ndone, b->n, w->file, w->line));
	for (Fiber &u : b->th)
		if (u.line != w->line || std::strcmp(u.file, w->file) != 0)
			fail(t, format("barrier divergence: threads %d and %d wait at different __syncthreads (%s:%d, %s:%d)",
			               w->linear, u.linear, w->file, w->line, u.file, u.line));
	b->nbarrier = 0;
	for (Fiber &u : b->th)
		wake(&u);
}

void syncthreads(const char *file, int line) {
	Fiber *t = self();
	t->state = atBarrier;
	t->file = file;
	t->line = line;
	t->b->nbarrier++;
	checkBarrier(t);
	yield(t);
}

// mmaWarp computes a warp's tensor-core product once all 32 lanes w have
// arrived: it gathers A and B from the lanes' fragments by the PTX ISA's
// layouts and adds to every lane's accumulators the products, summed
// exactly (float64) and rounded once to float32. groupID = lane >> 2,
// tig = lane % 4; the accumulators are the same for both shapes: c_i at
// row groupID, plus 8 for i >= 2, column 2 tig + (i & 1).
//
// Kinds 0 (bf16) and 1 (f16) are m16n8k16 (the figures "MMA .m16n8k16
// fragment layout" for .f16/.bf16): A element a_i of a lane, i = 0..7, two
// a register, low half first, is at row groupID for i in {0,1,4,5} else
// groupID + 8, column 2 tig + (i & 1), plus 8 for i >= 4; B element b_i at
// row 2 tig + (i & 1), plus 8 for i >= 2, column groupID.
//
// Kind 2 (tf32) is m16n8k8 (the figures for .tf32): a register an
// element, a_i at row groupID for i in {0,2} else groupID + 8, column tig,
// plus 4 for i >= 2; b_i at row tig, plus 4 for i = 1, column groupID. A
// tf32 operand is the register's upper 19 bits: the low 13 are ignored, as
// the tensor cores ignore them.
void mmaWarp(Fiber *w, int kind) {
	double A[16][16], B[16][8];
	int K = kind == 2 ? 8 : 16;
	for (int l = 0; l < 32; l++) {
		int g = l >> 2, tq = l & 3;
		if (kind == 2) {
			auto tf32 = [](uint32_t u) { return (double)kk_bits_f32(u & 0xffffe000u); };
			for (int i = 0; i < 4; i++)
				A[g + (i & 1 ? 8 : 0)][tq + (i >= 2 ? 4 : 0)] = tf32(w[l].ma[i]);
			for (int i = 0; i < 2; i++)
				B[tq + 4 * i][g] = tf32(w[l].mb[i]);
			continue;
		}
		for (int i = 0; i < 8; i++) {
			uint16_t h = (uint16_t)(w[l].ma[i / 2] >> (16 * (i & 1)));
			int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
			int col = 2 * tq + (i & 1) + (i >= 4 ? 8 : 0);
			A[row][col] = kind ? kk_f16(h) : kk_bf16(h);
		}
		for (int i = 0; i < 4; i++) {
			uint16_t h = (uint16_t)(w[l].mb[i / 2] >> (16 * (i & 1)));
			B[2 * tq + (i & 1) + (i >= 2 ? 8 : 0)][g] = kind ? kk_f16(h) : kk_bf16(h);
		}
	}
	for (int l = 0; l < 32; l++) {
		int g = l >> 2, tq = l & 3;
		for (int i = 0; i < 4; i++) {
			int row = g + (i >= 2 ? 8 : 0), col = 2 * tq + (i & 1);
			double s = w[l].md[i];
			for (int k = 0; k < K; k++)
				s += A[row][k] * B[k][col];
			w[l].md[i] = (float)s;
		}
	}
}

void mma(int kind, float d[4], const uint32_t a[4], const uint32_t b[2]) {
	Fiber *t = self();
	t->ma = a;
	t->mb = b;
	t->md = d;
	collective(opMma, 0xffffffffu, 0, kind, 32, kind == 2 ? "mma.sync tf32" : kind ? "mma.sync f16" : "mma.sync bf16");
}

// collective is one lane's part in a warp-synchronous operation: it waits
// until every lane of mask has arrived at the same operation with the same
// mask, then every lane leaves with its result, as in lock step.
uint32_t collective(Op op, unsigned mask, uint32_t v, int arg, int width, const char *what) {
	Fiber *t = self();
	Block *b = t->b;
	int lanes = b->n - t->warp * 32 < 32 ? b->n - t->warp * 32 : 32;
	unsigned exist = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
	if (!(mask >> t->lane & 1))
		fail(t, format("%s with mask %#x leaves out the calling lane %d", what, mask, t->lane));
	if (mask & ~exist)
		fail(t, format("%s with mask %#x names lanes the warp of %d lanes lacks", what, mask, lanes));
	if (width < 1 || width > 32 || (width & (width - 1)))
		fail(t, format("%s with width %d", what, width));
	t->state = atWarp;
	t->op = op;
	t->what = what;
	t->mask = mask;
	t->val = v;
	t->arg = arg;
	t->width = width;
	b->atWarpLanes[t->warp] |= 1u << t->lane;
	Fiber *w = &b->th[t->warp * 32];
	// The first lane of mask not at a collective: an exited one is an
	// error, another means not all are there yet (the last to arrive
	// completes the operation).
	if (unsigned pending = mask & ~b->atWarpLanes[t->warp]) {
		int l = __builtin_ctz(pending);
		if (b->doneLanes[t->warp] >> l & 1)
			fail(t, format("%s waits for lane %d, which exited", what, l));
		yield(t);
		return t->result;
	}
	for (int l = 0; l < 32; l++) {
		if (!(mask >> l & 1))
			continue;
		if (w[l].op != op || w[l].mask != mask || w[l].width != width || (op == opMma && w[l].arg != t->arg))
			fail(t, format("warp divergence: lane %d is at %s (mask %#x), lane %d at %s (mask %#x)", t->lane, what, mask,
			               l, w[l].what, w[l].mask));
	}
	if (op == opMma)
		mmaWarp(w, arg);
	unsigned ballot = 0;
	for (int l = 0; l < 32; l++)
		if (mask >> l & 1 && w[l].val)
			ballot |= 1u << l;
	for (int l = 0; l < 32; l++) {
		if (!(mask >> l & 1))
			continue;
		Fiber &u = w[l];
		int seg = l & ~(width - 1), src = l;
		switch (op) {
		case opSync:
		case opMma:
			break;
		case opBallot:
			u.result = ballot;
			break;
		case opIdx:
			src = seg + (u.arg & (width - 1));
			break;
		case opXor:
			src = l ^ u.arg;
			if (src >= seg + width || src > 31)
				src = l;
			break;
		case opDown:
			src = (l - seg) + u.arg < width ? l + u.arg : l;
			break;
		case opUp:
			src = (l - seg) >= u.arg ? l - u.arg : l;
			break;
		}
		if (op != opSync && op != opBallot && op != opMma) {
			if (!(mask >> src & 1))
				fail(t, format("%s: lane %d reads lane %d, outside mask %#x", what, l, src, mask));
			u.result = w[src].val;
		}
	}
	for (int l = 0; l < 32; l++)
		if (mask >> l & 1)
			wake(&w[l]);
	yield(t);
	return t->result;
}

// body runs one emulated thread: the kernel, then its exit.
void body() {
	Fiber *t = self();
	t->b->k->run(t->b->args);
	Block *b = t->b;
	t->state = done;
	b->doneLanes[t->warp] |= 1u << t->lane;
	b->ndone++;
	Fiber *w = &b->th[t->warp * 32];
	for (uint32_t at = b->atWarpLanes[t->warp]; at; at &= at - 1) {
		int l = __builtin_ctz(at);
		if (w[l].mask >> t->lane & 1)
			fail(t, format("exited while lane %d waits for it at %s", l, w[l].what));
	}
	checkBarrier(t);
	for (;;)
		yield(t);
}

// stacks holds one fiber stack per thread, each above a guard page.
struct Stacks {
	char *base = nullptr;
	size_t each = 0, len = 0;
	int count = 0;
	~Stacks() {
		if (base)
			munmap(base, len);
	}
	bool make(int n) {
		if (base)
			munmap(base, len);
		count = 0;
		size_t page = (size_t)sysconf(_SC_PAGESIZE);
		each = stackSize + page;
		len = each * n;
		void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p == MAP_FAILED) {
			base = nullptr;
			return false;
		}
		base = (char *)p;
		for (int i = 0; i < n; i++)
			mprotect(base + i * each, page, PROT_NONE);
		count = n;
		return true;
	}
	char *stack(int i) { return base + i * each + (each - stackSize); }
};

// runBlock runs every thread of b to its end; false with b->err set when
// the kernel broke a rule of the model or deadlocked.
bool runBlock(Block *b, Stacks *st) {
	b->ndone = b->nbarrier = 0;
	b->runnable.clear();
	b->ahead[0] = b->ahead[1] = -1;
	b->atWarpLanes.assign((b->n + 31) / 32, 0);
	b->doneLanes.assign((b->n + 31) / 32, 0);
	for (int i = 0; i < b->n; i++) {
		Fiber &t = b->th[i];
		t.idx = {(unsigned)i % b->d.bdim.x, (unsigned)i / b->d.bdim.x % b->d.bdim.y,
		         (unsigned)i / (b->d.bdim.x * b->d.bdim.y)};
		t.d = &b->d;
		t.b = b;
		t.linear = i;
		t.lane = i & 31;
		t.warp = i >> 5;
		t.state = ready;
		t.file = "";
		t.line = 0;
		start(&t.ctx, st->stack(i), stackSize, body);
		b->runnable.push_back(i);
	}
	// The threads switch among themselves (yield) and come back here
	// when none may run.
	while (Fiber *n = pick(b)) {
		cur = n;
		swap(&b->sched, &n->ctx);
	}
	cur = nullptr;
	if (!b->err.empty())
		return false;
	if (b->ndone < b->n) {
		std::string s = format("block (%u,%u,%u): deadlock, %d of %d threads finished; waiting:", b->d.bidx.x,
		                       b->d.bidx.y, b->d.bidx.z, b->ndone, b->n);
		int shown = 0;
		for (Fiber &t : b->th) {
			if (t.state == done || shown++ == 4)
				continue;
			if (t.state == atBarrier)
				s += format(" thread %d at __syncthreads (%s:%d);", t.linear, t.file, t.line);
			else
				s += format(" thread %d at %s (mask %#x);", t.linear, t.what, t.mask);
		}
		b->err = s;
		return false;
	}
	return true;
}

const Entry *find(const char *name) {
	for (const Entry &e : kernels)
		if (std::strcmp(e.name, name) == 0)
			return &e;
	return nullptr;
}

// Limits of the devices the kernels are built for (sm_80 and later).
const unsigned maxThreads = 1024, maxShared = 227 << 10;

int launch(const char *name, const uint32_t *grid, const uint32_t *block, uint32_t shared, const void *args,
           size_t nargs, uint64_t seed, char *err, size_t errlen) {
	std::string msg;
	const Entry *k = find(name);
	uint64_t threads = (uint64_t)block[0] * block[1] * block[2];
	if (!k)
		msg = format("no kernel %s", name);
	else if (nargs != k->args)
		msg = format("%s takes %zu bytes of arguments, got %zu", name, k->args, nargs);
	else if (!grid[0] || !grid[1] || !grid[2] || grid[0] > 0x7fffffffu || grid[1] > 65535 || grid[2] > 65535)
		msg = format("%s: grid (%u,%u,%u) out of range", name, grid[0], grid[1], grid[2]);
	else if (!threads || threads > maxThreads || block[2] > 64)
		msg = format("%s: block (%u,%u,%u) out of range", name, block[0], block[1], block[2]);
	else if (shared > maxShared)
		msg = format("%s: %u bytes of dynamic shared memory, the device has %u", name, shared, maxShared);
	if (msg.empty()) {
		Block b;
		b.k = k;
		b.args = (const unsigned char *)args;
		b.n = (int)threads;
		b.th.resize(b.n);
		b.d.bdim = {block[0], block[1], block[2]};
		b.d.gdim = {grid[0], grid[1], grid[2]};
		// Dynamic shared memory ends against an inaccessible page, so a
		// kernel reading past the size its launch gave faults.
		size_t page = (size_t)sysconf(_SC_PAGESIZE), dynLen = alignUp(shared, 16);
		size_t mapLen = alignUp(dynLen, page) + page;
		void *dm = mmap(nullptr, mapLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (dm == MAP_FAILED)
			return std::snprintf(err, errlen, "%s: no memory for shared memory", name), 1;
		mprotect((char *)dm + mapLen - page, page, PROT_NONE);
		b.d.dyn = (unsigned char *)dm + (mapLen - page - dynLen);
		// The stacks are kept per OS thread for the next launch: mapping
		// them and their guard pages is most of a small launch's cost.
		thread_local Stacks st;
		if (st.count < b.n && !st.make(b.n))
			msg = "no memory for the fiber stacks";
		// Blocks run in an order drawn from the seed too: no kernel may
		// depend on another block of its launch.
		uint64_t nb = (uint64_t)grid[0] * grid[1] * grid[2], rng = seed;
		std::vector<uint64_t> order(nb);
		for (uint64_t i = 0; i < nb; i++)
			order[i] = i;
		for (uint64_t i = nb; i > 1; i--)
			std::swap(order[i - 1], order[splitmix(&rng) % i]);
		for (uint64_t i = 0; i < nb && msg.empty(); i++) {
			uint64_t o = order[i];
			b.d.bidx = {(unsigned)(o % grid[0]), (unsigned)(o / grid[0] % grid[1]), (unsigned)(o / grid[0] / grid[1])};
			// Fresh shared memory holds garbage (NaN floats), as a device's may.
			std::memset(b.d.dyn, 0xff, shared);
			b.rng = seed ^ (o * 0xd1342543de82ef95u);
			if (!runBlock(&b, &st))
				msg = b.err;
		}
		munmap(dm, mapLen);
		if (!msg.empty())
			msg = std::string(name) + ": " + msg;
	}
	if (msg.empty())
		return 0;
	std::snprintf(err, errlen, "%s", msg.c_str());
	return 1;
}

} // namespace
} // namespace kkemu

// ---- the C API -----------------------------------------------------------

#ifndef KK_EMU_API_PREFIX
#define KK_EMU_API_PREFIX kk_emu_
#endif
#define KK_CAT2(a, b) a##b
#define KK_CAT(a, b) KK_CAT2(a, b)
#define KK_API(name) KK_CAT(KK_EMU_API_PREFIX, name)

extern "C" {

int KK_API(run)(const char *name, const uint32_t *grid, const uint32_t *block, uint32_t shared, const void *args,
                size_t nargs, uint64_t seed, char *err, size_t errlen) {
	return kkemu::launch(name, grid, block, shared, args, nargs, seed, err, errlen);
}

int KK_API(count)(void) { return (int)(sizeof kkemu::kernels / sizeof kkemu::kernels[0]); }

const char *KK_API(name)(int i) { return kkemu::kernels[i].name; }

// Emulated device memory: a header page holding the mapping's length, the
// allocation (256-byte aligned, its end against the next page) and an
// inaccessible page, so a kernel reading or writing past an allocation's
// rounded end faults at once instead of corrupting a neighbour.
uint64_t KK_API(alloc)(size_t bytes) {
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t r = kkemu::alignUp(bytes ? bytes : 1, 256), data = kkemu::alignUp(r, page);
	size_t len = page + data + page;
	void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return 0;
	char *base = (char *)p;
	*(size_t *)base = len;
	mprotect(base + page + data, page, PROT_NONE);
	return (uint64_t)(uintptr_t)(base + page + data - r);
}

void KK_API(free)(uint64_t ptr) {
	if (!ptr)
		return;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	char *base = (char *)(uintptr_t)(ptr & ~(uint64_t)(page - 1)) - page;
	munmap(base, *(size_t *)base);
}

void KK_API(copy_in)(uint64_t dst, const void *src, size_t n) { std::memcpy((void *)(uintptr_t)dst, src, n); }

void KK_API(copy_out)(void *dst, uint64_t src, size_t n) { std::memcpy(dst, (const void *)(uintptr_t)src, n); }

} // extern "C"
