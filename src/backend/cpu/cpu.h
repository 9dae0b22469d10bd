// CPU backend internals shared by the reference ops and the fast kernels.
#pragma once
#include "backend/backend.h"
#include "backend/hadamard.h"

void bs_cpu_fill_reference(bs_backend *be);
// One row of scatter_cols (backend.h): out[cols[c]] = in[c], every other element = fill.
void bs_cpu_scatter_row(float *out, int out_w, const float *in, int in_w, const int32_t *cols, float fill);
// Replaces ops with the fastest kernels this CPU supports (runtime dispatch: AVX-512, AVX2/FMA, scalar;
// BS_CPU_KERNELS=scalar|avx2|avx512|avx512bf16 forces a path; an unsupported request falls back to the best one).
void bs_cpu_install_fast(bs_backend *be);
// One row of hadamard_rows (backend.h): y = post * T(pre * x) (y may be x; pre, post may be NULL).
void bs_cpu_hadamard_row(const bs_hadamard *t, float *y, const float *x, const float *pre, const float *post, int transpose);
void bs_cpu_rmsnorm_row(float *y, const float *x, int dim, const bs_mat *w, float eps);
void bs_cpu_rope_row(float *x, int hd, int pos, const float *inv_freq);
// PyTorch's GELU tanh approximation in fp32 (the gelu_mul op)
float bs_cpu_gelu_tanh(float x);

// ---- per-thread scratch (cpu_scratch.c) ----
// *buf (a `static __thread` pointer, *cap bytes) grown to at least need bytes (want when it must grow: room
// to spare), 64-byte aligned, freed when the thread ends. NULL when memory runs out (*buf then empty): the
// op reports it with bs_backend_fail and returns (backend.h), never aborting the process.
void *bs_cpu_scratch(void **buf, size_t *cap, size_t need, size_t want);
// Test hook: when set to k > 0, the k-th scratch request from now fails as if memory ran out. Requests from
// pool threads racing past it leave it at 0 or below: <= 0 afterwards means one failed.
extern int bs_cpu_test_fail_scratch;

// ---- fast-kernel paths (cpu_features.c) ----
typedef enum {
    BS_CPU_SCALAR = 0,      // portable C, threaded (any x86-64 / any CPU)
    BS_CPU_AVX2,            // AVX2 + FMA + F16C (x86-64-v3), fp32 activations: exact up to summation order
    BS_CPU_AVX512,          // AVX-512F/BW/VL matmul, fp32 activations (other ops: AVX2)
    BS_CPU_AVX512BF16,      // as AVX512, but BF16-weight matmuls round activations to bf16 and use
                            // vdpbf16ps: NOT exact (documented error, opt-in only)
    BS_CPU_N_PATHS
} bs_cpu_path;
const char *bs_cpu_path_name(bs_cpu_path p);
int bs_cpu_path_supported(bs_cpu_path p);   // this CPU can run it
bs_cpu_path bs_cpu_default_path(void);      // bs_tuning's cpu_kernels (BS_CPU_KERNELS) if supported, else the best exact path
// Installs the fast ops of one path; -1 (and nothing changed) if this CPU can't run it.
int bs_cpu_install_path(bs_backend *be, bs_cpu_path p);

// A lossy weight (weight_lossy, for a drafter): BF16, row-major, multiplied by the avx512bf16 kernels
// (activations rounded to bf16) whatever the backend's path. Offered only where the CPU has AVX512-BF16
// and the backend runs an AVX-512 path.
#define BS_CPU_LAYOUT_BF16DOT 1

// ---- matmul (cpu_matmul*.c) ----
// A matmul kernel for one weight kind. prep (NULL: kernel reads x as is) lays x [n][K] out the way the kernel
// wants (xp has n*K elements of xp_elem bytes); an affine kernel's prep_w instead sees the weight (its bits
// and group decide the layout) and writes xp_floats(W) floats per row. run computes y[r][o] for r in
// [r0,r1), o in [o0,o1).
typedef struct bs_mm_kernel {
    void (*prep)(void *xp, const float *x, int n, int K);
    int xp_elem;
    void (*run)(const bs_mat *W, int64_t o0, int64_t o1, const void *xp, int r0, int r1, float *y, int acc);
    void (*prep_w)(void *xp, const float *x, int n, const bs_mat *W);
    int64_t (*xp_floats)(const bs_mat *W);
} bs_mm_kernel;
// Kernel tables are indexed by weight kind: the dense dtypes (bs_dtype), then MLX affine 4 and 8 bits.
enum { BS_MM_AFF4 = 3, BS_MM_AFF8 = 4, BS_MM_KINDS = 5 };
static inline int bs_mm_kind(const bs_mat *W) {
    return W->format == BS_WFMT_AFFINE ? (W->bits == 4 ? BS_MM_AFF4 : BS_MM_AFF8) : (int)W->dtype;
}
extern const bs_mm_kernel bs_mm_scalar[BS_MM_KINDS], bs_mm_avx2[BS_MM_KINDS], bs_mm_avx512[BS_MM_KINDS], bs_mm_avx512bf16[BS_MM_KINDS];
// The affine kernels (cpu_matmul_affine.c; one run for 4 and 8 bits).
void bs_mm_affine_prep(void *xp, const float *x, int n, const bs_mat *W);
int64_t bs_mm_affine_xp_floats(const bs_mat *W);
void bs_mm_affine_run_avx2(const bs_mat *W, int64_t o0, int64_t o1, const void *xp, int r0, int r1, float *y, int acc);
// sum_g biases[o][g] * X[g] in the affine kernels' one order (X: a prepared row's group sums of x).
float bs_mm_affine_bias_dot(const bs_mat *W, int64_t o, const float *X);
#define BS_MM_AFFINE_AVX2 { NULL, 4, bs_mm_affine_run_avx2, bs_mm_affine_prep, bs_mm_affine_xp_floats }
// Its AVX-512 form (cpu_matmul_affine_avx512.c): two weight rows per zmm, the AVX2 kernel's results bit for bit.
void bs_mm_affine_run_avx512(const bs_mat *W, int64_t o0, int64_t o1, const void *xp, int r0, int r1, float *y, int acc);
#define BS_MM_AFFINE_AVX512 { NULL, 4, bs_mm_affine_run_avx512, bs_mm_affine_prep, bs_mm_affine_xp_floats }
// The scalar kernel over x rows xs floats apart (any weight kind): the portable path, and the affine kernels'
// fallback for a group size their vector layout does not divide.
void bs_mm_scalar_strided(const bs_mat *W, int64_t o0, int64_t o1, const float *x, int64_t xs, int r0, int r1, float *y, int acc);
// Threaded matmul with the given kernels (indexed by bs_mm_kind). Returns 0, or -1 when its scratch could not
// be allocated (nothing computed; the caller reports it, bs_backend_fail).
int bs_cpu_matmul_with(const bs_mm_kernel *k, float *y, const float *x, int n, const bs_mat *W, int acc);
// m matmuls sharing x in one dispatch: y[i] = x . W[i]^T (+= when acc), x laid out once. Returns as above.
int bs_cpu_matmul_multi_with(const bs_mm_kernel *k, int m, float *const *y, const float *x, int n,
                             const bs_mat *const *W, int acc);
// x rows permuted within each block of `chunk` floats: evens first, then odds (matches bf16 even/odd widening).
void bs_mm_prep_evenodd(float *xp, const float *x, int n, int K, int chunk);

// ---- other ops ----
void bs_cpu_attention_fast(bs_backend *be, float *out, const float *q, const bs_kv_view *kv,
                           int n_q, int n_heads, int n_kv_heads, int hd, int n_keys, int q_pos0, int causal,
                           int window);
// bs_cpu_attention_fast over a ragged batch's spans, in one thread dispatch (backend.h attention_spans).
void bs_cpu_attention_spans_fast(bs_backend *be, float *out, const float *q, const bs_row_span *spans, int n_spans, int n_heads, int n_kv,
                                 int hd);
// kv heads per attention task: bs_tuning's cpu_att_heads_per_task, 0 = automatic (as many as leave every
// thread a task; BS_CPU_ATT_HG=1 forces one). Results never depend on it; tests set it to check exactly that.
void bs_cpu_install_ops_avx2(bs_backend *be);     // cpu_ops_avx2.c: vector elementwise ops + attention
void bs_cpu_install_ops_scalar(bs_backend *be);   // cpu_fast.c: threaded portable ops

// ---- weight memory (cpu_mem.c) ----
// The fast backend ("cpu") copies each weight at load into anonymous memory backed by transparent huge
// pages (2 MiB): the forwards stream weights without a TLB miss or prefetcher stop every 4 KiB. The mmap
// view is kept (no copy) with BS_CPU_HUGEPAGES=0, when THP is off, when mmap/madvise fail, or when the copy
// would leave less than 1 GiB + 1/16 of RAM available. Values are identical either way.
typedef struct bs_cpu_weights {
    struct { char *p; size_t len; } *chunks;   // 2 MiB-aligned MADV_HUGEPAGE arenas, bump-allocated
    int n, cap;
    size_t used;     // bytes used in the last chunk
    size_t bytes;    // weight bytes copied in all
} bs_cpu_weights;
int bs_cpu_hugepages_wanted(void);
size_t bs_cpu_mem_free(bs_backend *be);   // the host's MemAvailable in bytes (0 when unknown): the backend's mem_free    // not disabled (bs_tuning's cpu_hugepages, BS_CPU_HUGEPAGES=0) and THP not "never"
// Copies host's elements into the arena, dst = host with the new data pointer; -1 (dst untouched) if not done.
int bs_cpu_weights_copy(bs_cpu_weights *w, bs_mat *dst, const bs_mat *host);
void bs_cpu_weights_free(bs_cpu_weights *w);
// Anonymous memory of >= bytes at a 2 MiB boundary (MADV_HUGEPAGE when want_huge), length in *len; NULL on failure.
void *bs_cpu_huge_map(size_t bytes, int want_huge, size_t *len);
void bs_cpu_huge_unmap(void *p, size_t len);
// AnonHugePages of this process in bytes (/proc/self/smaps_rollup), -1 if unknown.
long long bs_cpu_anon_huge_bytes(void);
// The weight bytes a CPU backend copied into huge-page memory (0 for other backends or when none was).
size_t bs_cpu_weight_bytes_copied(const bs_backend *be);
