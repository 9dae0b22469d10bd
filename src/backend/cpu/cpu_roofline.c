// Rooflines for the CPU kernels, measured on all pool threads.
//
// (a) Read bandwidth: each thread streams its slice of a buffer far larger than L3 (1 GiB by default)
//     with 32-byte vmovdqu loads, 4 independent chains, touching every byte (the same loads the AVX2
//     matmul issues for weights). Best of several passes; GB/s = 1e9 bytes/s.
// (b) Multiply-add peak: each thread runs 12 independent FMA ymm chains (the matmul's 4x3 register
//     block) on register data: raw FMA peak = 8 fp32 multiply-adds per instruction.
//     Effective BF16 peak: the same 12 chains per 16 weights fed through the exact instruction mix of
//     the AVX2 BF16 kernel at its compute-bound shape (4 weight rows x 3 activation rows): per 16 weights of
//     a row, one 32-byte weight load + vpslld + vpand, then 2 FMAs per activation row with x as memory
//     operands (L1-resident). The roofline the bench reports for BF16 weights uses this effective peak,
//     because the widening and the x loads are work the kernel cannot avoid (they share ports with the
//     FMAs); the raw figure is printed beside it to show what the widening costs.
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_simd_avx2.h"
#include "backend/cpu/cpu_roofline.h"
#include "util/threadpool.h"
#include "util/timer.h"


typedef struct { char *buf; size_t bytes; long iters; double out[256]; } rl_job;

static void slice(const rl_job *j, int t, int nt, size_t *lo, size_t *hi) {
    size_t per = j->bytes / nt / 128 * 128;
    *lo = (size_t)t * per; *hi = t == nt - 1 ? j->bytes / 128 * 128 : *lo + per;
}
static void touch_task(void *p, int t, int nt) {   // first touch from the reading thread's side
    rl_job *j = p; size_t lo, hi; slice(j, t, nt, &lo, &hi);
    memset(j->buf + lo, 1, hi - lo);
}
TGT_AVX2 static void read_task(void *p, int t, int nt) {
    rl_job *j = p; size_t lo, hi; slice(j, t, nt, &lo, &hi);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = lo; i < hi; i += 128) {
        const __m256i *q = (const __m256i *)(j->buf + i);
        a0 = _mm256_xor_si256(a0, _mm256_loadu_si256(q));
        a1 = _mm256_xor_si256(a1, _mm256_loadu_si256(q + 1));
        a2 = _mm256_xor_si256(a2, _mm256_loadu_si256(q + 2));
        a3 = _mm256_xor_si256(a3, _mm256_loadu_si256(q + 3));
    }
    __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    j->out[t] = (double)_mm256_extract_epi32(a, 0);
}
static void read_task_c(void *p, int t, int nt) {
    rl_job *j = p; size_t lo, hi; slice(j, t, nt, &lo, &hi);
    uint64_t a0 = 0, a1 = 0;
    for (size_t i = lo; i < hi; i += 16) { uint64_t u, v; memcpy(&u, j->buf + i, 8); memcpy(&v, j->buf + i + 8, 8); a0 ^= u; a1 ^= v; }
    j->out[t] = (double)(a0 ^ a1);
}

// 12 independent FMA chains (the 4x3 accumulator block), register operands only (named variables so
// they stay in registers; the empty asm keeps the compiler from folding the loop).
TGT_AVX2 static void fma_task(void *p, int t, int nt) {
    rl_job *j = p;
    __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    __m256 a0 = _mm256_set1_ps(0), a1 = _mm256_set1_ps(1), a2 = _mm256_set1_ps(2), a3 = _mm256_set1_ps(3);
    __m256 a4 = _mm256_set1_ps(4), a5 = _mm256_set1_ps(5), a6 = _mm256_set1_ps(6), a7 = _mm256_set1_ps(7);
    __m256 a8 = _mm256_set1_ps(8), a9 = _mm256_set1_ps(9), a10 = _mm256_set1_ps(10), a11 = _mm256_set1_ps(11);
    for (long it = 0; it < j->iters; it++) {
#define F(a) a = _mm256_fmadd_ps(a, m, c)
        F(a0); F(a1); F(a2); F(a3); F(a4); F(a5); F(a6); F(a7); F(a8); F(a9); F(a10); F(a11);
#undef F
        __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6), "+x"(a7),
                         "+x"(a8), "+x"(a9), "+x"(a10), "+x"(a11));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    j->out[t] = bs_hsum8(s);
}

// The AVX2 BF16 kernel's compute-bound instruction mix: 4 weight rows x 3 activation rows, per 16 weights of
// a row one 32-byte load + vpslld + vpand and 6 FMAs with x memory operands; all data L1-resident
// (4 x 512 bf16 + 3 x 512 fp32 = 10 KiB). 12 x 16 = 192 multiply-adds per 16-weight step of the 4 rows.
#define BF_K 512
TGT_AVX2 static void bf16_task(void *p, int t, int nt) {
    rl_job *j = p;
    static __thread uint16_t w[4 * BF_K] __attribute__((aligned(64)));
    static __thread float x[3 * BF_K] __attribute__((aligned(64)));
    for (int i = 0; i < 4 * BF_K; i++) w[i] = 0x3f80 + (i & 7);      // ~1.0
    for (int i = 0; i < 3 * BF_K; i++) x[i] = 1e-6f;
    __m256 a[4][3];
    for (int r = 0; r < 4; r++) for (int c = 0; c < 3; c++) a[r][c] = _mm256_setzero_ps();
    __m256i mask = _mm256_set1_epi32((int)0xffff0000u);
    for (long it = 0; it < j->iters; it++) {
        for (int k = 0; k < BF_K; k += 16)
            for (int r = 0; r < 4; r++) {
                __m256i v = _mm256_load_si256((const __m256i *)(w + r * BF_K + k));
                __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), wo = _mm256_castsi256_ps(_mm256_and_si256(v, mask));
                for (int c = 0; c < 3; c++) {
                    a[r][c] = _mm256_fmadd_ps(we, _mm256_load_ps(x + c * BF_K + k), a[r][c]);
                    a[r][c] = _mm256_fmadd_ps(wo, _mm256_load_ps(x + c * BF_K + k + 8), a[r][c]);
                }
            }
        __asm__ volatile("" ::: "memory");
    }
    __m256 s = _mm256_setzero_ps();
    for (int r = 0; r < 4; r++) for (int c = 0; c < 3; c++) s = _mm256_add_ps(s, a[r][c]);
    j->out[t] = bs_hsum8(s);
}

static double timed(bs_task_fn fn, rl_job *j, int nt) {
    double t0 = bs_now();
    bs_parallel_for(nt, fn, j);
    return bs_now() - t0;
}

int bs_roofline_measure(bs_roofline *r, size_t buffer_bytes) {
    memset(r, 0, sizeof *r);
    int nt = bs_pool_size(), avx2 = bs_cpu_path_supported(BS_CPU_AVX2);
    r->threads = nt;
    r->path = avx2 ? "avx2" : "scalar";
    rl_job j = { 0 };
    j.bytes = buffer_bytes ? buffer_bytes : (size_t)1 << 30;
    if (posix_memalign((void **)&j.buf, 4096, j.bytes)) return -1;
    bs_parallel_for(nt, touch_task, &j);
    double best = 1e30;
    for (int pass = 0; pass < 4; pass++) {
        double dt = timed(avx2 ? read_task : read_task_c, &j, nt);
        if (dt < best) best = dt;
    }
    r->read_gbs = j.bytes / best / 1e9;
    free(j.buf);
    if (!avx2) return 0;   // the multiply-add peaks are measured with the AVX2 kernels' instructions only
    j.iters = 20000000;
    best = 1e30;
    for (int pass = 0; pass < 3; pass++) { double dt = timed(fma_task, &j, nt); if (dt < best) best = dt; }
    r->fma_raw_g = (double)nt * j.iters * 12 * 8 / best / 1e9;
    j.iters = 200000;
    best = 1e30;
    for (int pass = 0; pass < 3; pass++) { double dt = timed(bf16_task, &j, nt); if (dt < best) best = dt; }
    r->fma_bf16_g = (double)nt * j.iters * (BF_K / 16) * 4 * 3 * 16 / best / 1e9;
    return 0;
}
