// rans_neon_count drives rans_neon_arm64.c's kernel over one component of
// a layout-2 table, for counting the instructions it executes per symbol
// under qemu (docs/results/2026-11-29-rans-neon.md): a bell-shaped table
// of NSYM symbols (as kernels/cpu/rans_test.go's "gauss"), GROUPS groups
// of 32 symbols per stream, STREAMS streams (1 to 4) side by side, with
// the table's lookup (its narrow-mode words) when AUX is 1. The stream
// bytes and states are random: the kernel's work per group does not
// depend on them beyond the refill's word count. Not part of any build:
//
//	aarch64-linux-gnu-gcc -O2 -static -o rans_neon_count kernels/cpu/testdata/rans_neon_count.c kernels/cpu/rans_neon_arm64.c -lm
//	qemu-aarch64-static -singlestep -d exec,nochain -D trace.log ./rans_neon_count NSYM GROUPS AUX STREAMS
//
// then count the trace's lines whose PC lies in kkn_rans2_decode or
// kkn_rans2_decode1 (aarch64-linux-gnu-nm -S), at two GROUPS values, and
// divide the difference by the symbols between them.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

long kkn_rans2_decode1(float *out, long total, long g0, const uint8_t *src, long len, long pos, long per, const uint32_t *ent,
		       const int32_t *ent_off, const float *lv, const int32_t *lev_off, const int32_t *nsym, const float *scale,
		       const uint32_t *aux, uint32_t *xs);
long kkn_rans2_decode(long ns, float *out0, float *out1, float *out2, float *out3, long total, long g0, const uint8_t *src0,
		      const uint8_t *src1, const uint8_t *src2, const uint8_t *src3, const long *len, long *pos, long per,
		      const uint32_t *ent, const int32_t *ent_off, const float *lv, const int32_t *lev_off, const int32_t *nsym,
		      const float *scale0, const float *scale1, const float *scale2, const float *scale3, const uint32_t *aux,
		      uint32_t *xs);

int main(int argc, char **argv) {
	if (argc != 5) {
		fprintf(stderr, "usage: rans_neon_count NSYM GROUPS AUX STREAMS\n");
		return 2;
	}
	int n = atoi(argv[1]), groups = atoi(argv[2]), useaux = atoi(argv[3]), ns = atoi(argv[4]);
	if (n < 2 || n > 256 || groups < 1 || ns < 1 || ns > 4) {
		fprintf(stderr, "rans_neon_count: NSYM in 2..256, GROUPS >= 1, STREAMS in 1..4\n");
		return 2;
	}
	static uint32_t ent[4096], aux[256], xs[128];
	uint32_t freq[256], start[256];
	double w[256], sum = 0;
	for (int i = 0; i < n; i++) {
		double z = (i - (n - 1) / 2.0) / (n / 7.0);
		w[i] = exp(-z * z / 2);
		sum += w[i];
	}
	int left = 4096;
	for (int i = 0; i < n; i++) {
		freq[i] = (uint32_t)(w[i] / sum * (4096 - n));
		if (freq[i] < 1) freq[i] = 1;
		left -= (int)freq[i];
	}
	for (int i = 0; left > 0; i = (i + 1) % n, left--) freq[(n / 2 + i) % n]++;
	uint32_t c = 0;
	for (int s = 0; s < n; s++) {
		start[s] = c;
		for (uint32_t b = 0; b < freq[s]; b++) ent[c + b] = (uint32_t)s | freq[s] << 8 | b << 20;
		c += freq[s];
	}
	// The lookup's narrow mode (kernels/cpu/rans.go's ransAux): fs words
	// from 128, the mode at 194.
	for (int s = 0; s < n && s < 64; s++) aux[128 + s] = freq[s] | start[s] << 16;
	aux[194] = n <= 32;
	long per = 32L * groups, len[4], pos[4] = {0};
	float lv[256], *out[4];
	uint8_t *src[4];
	for (int i = 0; i < 256; i++) lv[i] = i * 0.5f;
	srand(1);
	for (int j = 0; j < 4; j++) {
		out[j] = malloc(per * sizeof(float));
		len[j] = 64L * groups + 64;
		src[j] = malloc(len[j]);
		for (long i = 0; i < len[j]; i++) src[j][i] = (uint8_t)rand();
	}
	for (int i = 0; i < 128; i++) xs[i] = 65536 + (uint32_t)rand() % 1000000;
	int32_t eo = 0, lo = 0, nsy = n;
	float sc = 1.5f;
	long k;
	if (ns == 1)
		k = kkn_rans2_decode1(out[0], per, 0, src[0], len[0], 0, per, ent, &eo, lv, &lo, &nsy, &sc, useaux ? aux : 0, xs) & 0xffffffff;
	else
		k = kkn_rans2_decode(ns, out[0], out[1], out[2], out[3], per, 0, src[0], src[1], src[2], src[3], len, pos, per, ent, &eo,
				     lv, &lo, &nsy, &sc, &sc, &sc, &sc, useaux ? aux : 0, xs);
	printf("%ld symbols per stream\n", k);
	return 0;
}
