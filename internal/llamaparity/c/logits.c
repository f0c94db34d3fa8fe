// llama-logits: prints llama.cpp's logits for a prompt of token ids, then
// its greedy continuation, for Kakeya's parity tests (model/gemma_llamacpp_test.go).
//
//   llama-logits MODEL.gguf N_GREEDY ID ID ...
//
// Output, one line each: "logits P V0 V1 ..." for every prompt position P
// (%.9g); then, for each of N_GREEDY steps, "step S V0 V1 ..." the logits
// after feeding back step S's token (the arg max of the last logits), one
// at a time; then "greedy ID ID ..." the N_GREEDY tokens. Built by make llama-logits
// against the llama.cpp build named by LLAMA_CPP.
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *user) {
	(void)user;
	if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static bool silent(float progress, void *user) {
	(void)progress;
	(void)user;
	return true;
}

static int argmax(const float *v, int n) {
	int best = 0;
	for (int i = 1; i < n; i++) if (v[i] > v[best]) best = i;
	return best;
}

int main(int argc, char **argv) {
	if (argc < 4) {
		fprintf(stderr, "usage: %s MODEL.gguf N_GREEDY ID...\n", argv[0]);
		return 2;
	}
	int n_greedy = atoi(argv[2]);
	int n = argc - 3;
	llama_log_set(quiet, NULL);
	llama_backend_init();
	struct llama_model_params mp = llama_model_default_params();
	mp.progress_callback = silent;
	struct llama_model *model = llama_model_load_from_file(argv[1], mp);
	if (!model) {
		fprintf(stderr, "llama-logits: cannot load %s\n", argv[1]);
		return 1;
	}
	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = n + n_greedy + 16;
	cp.n_batch = cp.n_ubatch = n;
	cp.n_threads = cp.n_threads_batch = 2;
	cp.swa_full = true;
	struct llama_context *ctx = llama_init_from_model(model, cp);
	if (!ctx) {
		fprintf(stderr, "llama-logits: cannot make a context\n");
		return 1;
	}
	int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
	struct llama_batch b = llama_batch_init(n, 0, 1);
	for (int i = 0; i < n; i++) {
		b.token[i] = atoi(argv[3 + i]);
		b.pos[i] = i;
		b.n_seq_id[i] = 1;
		b.seq_id[i][0] = 0;
		b.logits[i] = 1;
	}
	b.n_tokens = n;
	if (llama_decode(ctx, b)) {
		fprintf(stderr, "llama-logits: decode failed\n");
		return 1;
	}
	// LLAMA_LOGITS_EVERY=k prints every k-th position's row (and the
	// last): a long prompt's rows of a large vocabulary are gigabytes of
	// text.
	// LLAMA_LOGITS_FROM=f prints every row from position f on too.
	const char *ev = getenv("LLAMA_LOGITS_EVERY"), *fv = getenv("LLAMA_LOGITS_FROM");
	int every = ev && atoi(ev) > 0 ? atoi(ev) : 1;
	int from = fv && atoi(fv) >= 0 ? atoi(fv) : n;
	for (int i = 0; i < n; i++) {
		if (i % every != 0 && i != n - 1 && i < from)
			continue;
		const float *l = llama_get_logits_ith(ctx, i);
		printf("logits %d", i);
		for (int j = 0; j < nv; j++) printf(" %.9g", l[j]);
		printf("\n");
	}
	int next = argmax(llama_get_logits_ith(ctx, n - 1), nv);
	int *toks = malloc(sizeof(int) * (n_greedy > 0 ? n_greedy : 1));
	for (int s = 0; s < n_greedy; s++) {
		toks[s] = next;
		struct llama_batch one = llama_batch_get_one(&next, 1);
		if (llama_decode(ctx, one)) {
			fprintf(stderr, "llama-logits: decode failed at step %d\n", s);
			return 1;
		}
		const float *l = llama_get_logits_ith(ctx, -1);
		printf("step %d", s);
		for (int j = 0; j < nv; j++) printf(" %.9g", l[j]);
		printf("\n");
		next = argmax(l, nv);
	}
	printf("greedy");
	for (int s = 0; s < n_greedy; s++) printf(" %d", toks[s]);
	printf("\n");
	free(toks);
	llama_batch_free(b);
	llama_free(ctx);
	llama_model_free(model);
	return 0;
}
