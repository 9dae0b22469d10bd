// Rooflines for the CPU kernels, measured on all pool threads.
//
// Robustness: the machine may be shared (other processes steal time slices), so every figure is the best
// of many SHORT trials (a few ms each, well under a scheduler slice): a trial that got preempted is slow
// and simply loses. Each trial is one bs_parallel_for over all threads, timed by wall clock. Total time
// is ~1 s (plus the first touch of the bandwidth buffer); see the trial counts in bs_roofline_measure.
// What this cannot fix: another process holding a core for seconds (then every trial runs on one core and
// the peaks come out halved: seen as 51 instead of ~100 GFMA/s raw on the 2-core test machine). So the
// bench measures again after its forwards and also reports roof% against the best of both measurements.
//
// (a) Read bandwidth: each thread streams its slice of a window of the buffer with 32-byte vmovdqu loads,
//     4 independent chains, touching every byte (the same loads the AVX2 matmul issues for weights; kept on
//     the AVX-512 paths too: a core's DRAM stream is bound by the cache lines it keeps in flight, not by
//     the width of the loads that consume them).
//     The buffer (1 GiB by default) is far larger than L3; successive trials read successive 64 MiB windows
//     of it, so no trial finds its data in cache. GB/s = 1e9 bytes/s. The buffer is the same kind of memory
//     the weights live in (cpu_mem.c): 2 MiB transparent huge pages unless BS_CPU_HUGEPAGES=0 / THP is off.
// (b) Multiply-add peaks, with the instructions of the matmul path the backend uses (bs_cpu_default_path,
//     i.e. BS_CPU_KERNELS or the best exact path): a ceiling measured with another path's instructions
//     would be too low (roof% overstated) or unreachable. Two figures per path:
//     - raw: 12 independent FMA chains on register data: ymm (8 multiply-adds) on avx2, zmm (16) on the
//       AVX-512 paths (their F16/F32 kernels are zmm FMAs).
//     - bf16 effective (the compute roofline the bench uses for BF16 weights): the path's BF16 matmul
//       inner block at its compute-bound shape, data L1-resident, with the instructions the kernel's loop
//       compiles to (GCC 12, -O3, compared with objdump):
//       avx2: cpu_matmul_avx2.c's 3 weight rows x 4 activation rows (12 chains); per 16-wide K step and
//         weight row one 32-byte load + vpslld + vpand (the bf16 -> fp32 widening) and 8 FMAs.
//       avx512: cpu_matmul_avx512.c's paired block, 3 pairs of weight rows x 4 activation rows (12 zmm
//         chains); per 16-wide K step 8 x broadcasts, per pair two 32-byte loads + an insert, vpslld +
//         vpandd and 8 zmm FMAs. (Its 1-row forwards run the AVX2 block: memory-bound, the peak unused.)
//       avx512bf16: cpu_matmul_avx512.c's compute-bound vdpbf16ps block (dot_block), 4 weight rows x 4
//         activation rows (16 chains); per 32-wide K step 4 weight and 4 x vectors loaded, 16 vdpbf16ps.
//         One vdpbf16ps on 512 bits is 32 bf16 products summed pairwise into 16 fp32 lanes: counted as 32
//         multiply-adds.
//       The widening (avx2, avx512) and the loads are work a BF16 kernel cannot avoid (they share ports with
//       the FMAs), so this is the honest ceiling for bf16 weights; the raw figure is printed beside it.
//     The scalar path has no mix of its own: measured with the avx2 mix where the CPU has AVX2 (a stricter
//     ceiling than the scalar code reaches), not at all without (roof% is then against memory only).
//     AVX-512 code runs only when bs_cpu_default_path chose an AVX-512 path, which it does only where
//     bs_cpu_path_supported says this CPU has the instructions.
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

// The AVX2 BF16 kernel's compute-bound block (3 weight rows x 4 activation rows, x as FMA memory operands),
// all data L1-resident (3 x 512 bf16 + 4 x 512 fp32 = 11 KiB). 12 x 16 = 192 multiply-adds per 16-wide step.
#define BF_K 512
TGT_AVX2 static void bf16_task(void *p, int t, int nt) {
    rl_job *j = p;
    static __thread uint16_t w[3 * BF_K] __attribute__((aligned(64)));
    static __thread float x[4 * BF_K] __attribute__((aligned(64)));
    for (int i = 0; i < 3 * BF_K; i++) w[i] = 0x3f80 + (i & 7);      // ~1.0
    for (int i = 0; i < 4 * BF_K; i++) x[i] = 1e-6f;
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00, a12 = a00, a13 = a00;
    __m256 a20 = a00, a21 = a00, a22 = a00, a23 = a00;
    __m256i mask = _mm256_set1_epi32((int)0xffff0000u);
    for (long it = 0; it < j->iters; it++) {
        for (int k = 0; k < BF_K; k += 16) {
#define F2(A, c) A = _mm256_fmadd_ps(we, _mm256_load_ps(x + c * BF_K + k), A); A = _mm256_fmadd_ps(wo, _mm256_load_ps(x + c * BF_K + k + 8), A)
#define ROW(r) { \
                __m256i v = _mm256_load_si256((const __m256i *)(w + r * BF_K + k)); \
                __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), wo = _mm256_castsi256_ps(_mm256_and_si256(v, mask)); \
                F2(a##r##0, 0); F2(a##r##1, 1); F2(a##r##2, 2); F2(a##r##3, 3); }
            ROW(0) ROW(1) ROW(2)
#undef ROW
#undef F2
        }
        __asm__ volatile("" : "+x"(a00), "+x"(a01), "+x"(a02), "+x"(a03), "+x"(a10), "+x"(a11), "+x"(a12), "+x"(a13),
                         "+x"(a20), "+x"(a21), "+x"(a22), "+x"(a23) :: "memory");
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a00, a01), _mm256_add_ps(a02, a03)),
                             _mm256_add_ps(_mm256_add_ps(a10, a11), _mm256_add_ps(a12, a13)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a20, a21), _mm256_add_ps(a22, a23)));
    j->out[t] = bs_hsum8(s);
}

// ---- AVX-512 paths (run only when bs_cpu_default_path chose one, i.e. this CPU supports it) ----
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define TBF __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))

// fma_task at zmm width: 12 chains x 16 multiply-adds.
T512 static void fma512_task(void *p, int t, int nt) {
    rl_job *j = p;
    __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1), a2 = _mm512_set1_ps(2), a3 = _mm512_set1_ps(3);
    __m512 a4 = _mm512_set1_ps(4), a5 = _mm512_set1_ps(5), a6 = _mm512_set1_ps(6), a7 = _mm512_set1_ps(7);
    __m512 a8 = _mm512_set1_ps(8), a9 = _mm512_set1_ps(9), a10 = _mm512_set1_ps(10), a11 = _mm512_set1_ps(11);
    for (long it = 0; it < j->iters; it++) {
#define F(a) a = _mm512_fmadd_ps(a, m, c)
        F(a0); F(a1); F(a2); F(a3); F(a4); F(a5); F(a6); F(a7); F(a8); F(a9); F(a10); F(a11);
#undef F
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7),
                         "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    j->out[t] = _mm512_reduce_add_ps(s);
}

// The AVX-512 BF16 blocks below keep their accumulators in zmm0-15 and issue each multiply-add as one
// instruction on them: left to itself GCC 12 compiles these loops with extra register-to-register zmm moves
// per step (it rotates accumulators through registers; 6 per step in the paired block).
// Those moves compete with the FMAs for ports and would lower the ceiling; the vdpbf16ps kernel's own loop
// does not have them, the paired kernel's loop does (objdump), so for it the ceiling is the stricter one of
// its instructions without moves. Pinned register variables are used only as operands of the asm, the one
// use GCC guarantees.
#define MADD(insn, A, a, b) __asm__(insn " %2, %1, %0" : "+v"(A) : "v"(a), "v"(b))   // A += a . b
#define ACC16(z) register __m512 \
    a00 __asm__("zmm0") = z, a01 __asm__("zmm1") = z, a02 __asm__("zmm2") = z, a03 __asm__("zmm3") = z, \
    a10 __asm__("zmm4") = z, a11 __asm__("zmm5") = z, a12 __asm__("zmm6") = z, a13 __asm__("zmm7") = z, \
    a20 __asm__("zmm8") = z, a21 __asm__("zmm9") = z, a22 __asm__("zmm10") = z, a23 __asm__("zmm11") = z, \
    a30 __asm__("zmm12") = z, a31 __asm__("zmm13") = z, a32 __asm__("zmm14") = z, a33 __asm__("zmm15") = z
#define SUM16() _mm512_reduce_add_ps(_mm512_add_ps( \
    _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a00, a01), _mm512_add_ps(a02, a03)), _mm512_add_ps(_mm512_add_ps(a10, a11), _mm512_add_ps(a12, a13))), \
    _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a20, a21), _mm512_add_ps(a22, a23)), _mm512_add_ps(_mm512_add_ps(a30, a31), _mm512_add_ps(a32, a33)))))

// The avx512 path's compute-bound BF16 block (cpu_matmul_avx512.c): 3 pairs of weight rows x 4 activation
// rows, per 16-wide step the 8 x halves broadcast into both halves of a zmm (vbroadcastf32x8), per pair two
// 32-byte loads + vinserti64x4, vpslld + vpandd and 8 zmm FMAs. 6 x 512 bf16 + 4 x 512 fp32 = 14 KiB,
// L1-resident. 12 x 32 = 384 multiply-adds per step.
T512 static void bf16_512_task(void *p, int t, int nt) {
    rl_job *j = p;
    static __thread uint16_t w[6 * BF_K] __attribute__((aligned(64)));
    static __thread float x[4 * BF_K] __attribute__((aligned(64)));
    for (int i = 0; i < 6 * BF_K; i++) w[i] = 0x3f80 + (i & 7);   // ~1.0
    for (int i = 0; i < 4 * BF_K; i++) x[i] = 1e-6f;
    ACC16(_mm512_setzero_ps());   // a30..a33 unused (stay 0)
    const __m512i mask = _mm512_set1_epi32((int)0xffff0000u);
    for (long it = 0; it < j->iters; it++) {
        for (int k = 0; k < BF_K; k += 16) {
#define X(c) __m512 e##c = _mm512_broadcast_f32x8(_mm256_load_ps(x + c * BF_K + k)), o##c = _mm512_broadcast_f32x8(_mm256_load_ps(x + c * BF_K + k + 8))
            X(0); X(1); X(2); X(3);
#undef X
#define F2(A, c) MADD("vfmadd231ps", A, we, e##c); MADD("vfmadd231ps", A, wo, o##c)
#define PAIR(p) { \
                __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_load_si256((const __m256i *)(w + 2 * p * BF_K + k))), \
                                               _mm256_load_si256((const __m256i *)(w + (2 * p + 1) * BF_K + k)), 1); \
                __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), wo = _mm512_castsi512_ps(_mm512_and_si512(v, mask)); \
                F2(a##p##0, 0); F2(a##p##1, 1); F2(a##p##2, 2); F2(a##p##3, 3); }
            PAIR(0) PAIR(1) PAIR(2)
#undef PAIR
#undef F2
        }
        __asm__ volatile("" ::: "memory");
    }
    j->out[t] = SUM16();
}

// vdpbf16ps as dot_block issues it (weight vectors and x vectors loaded, then the dot products), in its 4 x 4
// block. 4 x 512 bf16 weights + 4 x 512 bf16 x = 8 KiB. 16 x 32 = 512 multiply-adds per 32-wide step.
TBF static void dpbf16_task(void *p, int t, int nt) {
    rl_job *j = p;
    static __thread uint16_t w[4 * BF_K] __attribute__((aligned(64)));
    static __thread uint16_t x[4 * BF_K] __attribute__((aligned(64)));
    for (int i = 0; i < 4 * BF_K; i++) { w[i] = 0x3f80 + (i & 7); x[i] = 0x3586; }   // ~1.0, ~1e-6
    ACC16(_mm512_setzero_ps());
    for (long it = 0; it < j->iters; it++) {
        for (int k = 0; k < BF_K; k += 32) {
#define X(c) __m512i x##c = _mm512_loadu_si512((const void *)(x + c * BF_K + k))
            X(0); X(1); X(2); X(3);
#undef X
#define ROW(r) { \
                __m512i wv = _mm512_loadu_si512((const void *)(w + r * BF_K + k)); \
                MADD("vdpbf16ps", a##r##0, wv, x0); MADD("vdpbf16ps", a##r##1, wv, x1); \
                MADD("vdpbf16ps", a##r##2, wv, x2); MADD("vdpbf16ps", a##r##3, wv, x3); }
            ROW(0) ROW(1) ROW(2) ROW(3)
#undef ROW
        }
        __asm__ volatile("" ::: "memory");
    }
    j->out[t] = SUM16();
}
#undef SUM16
#undef ACC16
#undef MADD

// Per path: the tasks, iterations per trial and multiply-adds per thread per iteration. Trials: raw ~1-3 ms;
// bf16 ~30 us on avx2 (measured: no better with 10x or 100x longer trials on 2 threads), ~50-150 us on the
// AVX-512 paths (estimated, not measured; longer, so that a larger pool's fork-join stays a small part).
typedef struct {
    bs_task_fn raw, bf16;
    long raw_iters, bf16_iters;
    double raw_fmas, bf16_fmas;
    const char *desc;
} rl_mix;
static const rl_mix MIX[BS_CPU_N_PATHS] = {
    [BS_CPU_AVX2] = { fma_task, bf16_task, 1000000, 200, 12 * 8, BF_K / 16 * 3 * 4 * 16,
                      "raw: 12 ymm FMA chains; bf16: 3x4 rows, vpslld/vpand widening + ymm FMAs" },
    [BS_CPU_AVX512] = { fma512_task, bf16_512_task, 1000000, 1000, 12 * 16, BF_K / 16 * 3 * 4 * 32,
                        "raw: 12 zmm FMA chains; bf16: 3 weight-row pairs x 4 rows, vpslld/vpandd widening + zmm FMAs" },
    [BS_CPU_AVX512BF16] = { fma512_task, dpbf16_task, 1000000, 1000, 12 * 16, BF_K / 32 * 4 * 4 * 32,
                            "raw: 12 zmm FMA chains; bf16: 4x4 rows of vdpbf16ps, 32 multiply-adds each" },
};

static double timed(bs_task_fn fn, rl_job *j, int nt) {
    double t0 = bs_now();
    bs_parallel_for(nt, fn, j);
    return bs_now() - t0;
}

static double best_of(int trials, bs_task_fn fn, rl_job *j, int nt) {
    double best = 1e30;
    for (int i = 0; i < trials; i++) { double dt = timed(fn, j, nt); if (dt < best) best = dt; }
    return best;
}

int bs_roofline_measure(bs_roofline *r, size_t buffer_bytes) {
    memset(r, 0, sizeof *r);
    int nt = bs_pool_size(), avx2 = bs_cpu_path_supported(BS_CPU_AVX2);
    bs_cpu_path path = bs_cpu_default_path(), mix = path == BS_CPU_SCALAR && avx2 ? BS_CPU_AVX2 : path;
    const rl_mix *m = mix != BS_CPU_SCALAR && bs_cpu_path_supported(mix) ? &MIX[mix] : NULL;
    r->threads = nt;
    r->path = bs_cpu_path_name(path);
    r->mix = m ? bs_cpu_path_name(mix) : "none";
    r->mix_desc = m ? m->desc : "";
    size_t total = buffer_bytes ? buffer_bytes : (size_t)1 << 30, win = (size_t)64 << 20;
    if (win > total) win = total;
    // The same memory the forwards read: huge pages exactly when the backend copies weights into them.
    size_t map_len;
    char *buf = bs_cpu_huge_map(total, bs_cpu_hugepages_wanted(), &map_len);
    if (!buf && !(buf = bs_cpu_huge_map(total, 0, &map_len))) return -1;
    rl_job jb = { .buf = buf, .bytes = total }, jf = { 0 }, jw = { 0 };
    bs_parallel_for(nt, touch_task, &jb);
    // Three rounds, each: 8 bandwidth trials of one 64 MiB window (~2-4 ms each at 15-30 GB/s; successive
    // windows, so none is in cache), 10 raw-FMA trials and 10 BF16-mix trials (lengths at MIX). Spreading
    // the trials of each kind over the whole ~1 s makes it likelier that each kind sees a quiet moment.
    size_t n_win = total / win;
    double best_bw = 1e30, best_raw = 1e30, best_bf = 1e30;
    if (m) {
        jf.iters = m->raw_iters;
        jw.iters = m->bf16_iters;
        timed(m->bf16, &jw, nt);   // first call fills the thread-local operands
    }
    for (int round = 0, trial = 0; round < 3; round++) {
        for (int i = 0; i < 8; i++, trial++) {
            jb.buf = buf + (trial % n_win) * win;
            jb.bytes = win;
            double dt = timed(avx2 ? read_task : read_task_c, &jb, nt);
            if (dt < best_bw) best_bw = dt;
        }
        if (!m) continue;
        double d = best_of(10, m->raw, &jf, nt);
        if (d < best_raw) best_raw = d;
        d = best_of(10, m->bf16, &jw, nt);
        if (d < best_bf) best_bf = d;
    }
    bs_cpu_huge_unmap(buf, map_len);
    r->read_gbs = win / best_bw / 1e9;
    if (!m) return 0;
    r->fma_raw_g = nt * jf.iters * m->raw_fmas / best_raw / 1e9;
    r->fma_bf16_g = nt * jw.iters * m->bf16_fmas / best_bf / 1e9;
    return 0;
}
