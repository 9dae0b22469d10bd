// Tuning knobs: every setting that changes how the library runs (not what it computes), in one struct
// with its defaults, and the one place the library reads the environment.
//
// Why one module: the knobs used to be getenv calls in the files that used them, read lazily inside
// kernels, so nothing listed them and no caller could set them without the environment. Now:
// - users set what they need through the public options (blockspec_open_options: threads, graphs,
//   the lossy drafter) and the CLI flags; those win over everything here;
// - benchmarks and A/B runs keep the BS_* environment variables: bs_tuning_from_env is the single,
//   documented override hook (docs/tuning.md lists every variable), applied once per process
//   (bs_tuning_init, called when an engine, a backend or the thread pool starts);
// - tests that compare settings within one process change fields through bs_tuning_edit.
// The knobs are process-wide because what they steer is (the kernels, the one thread pool).
// Results never depend on a knob unless its comment says so (drafter_fp8; cuda_ablate is diagnosis only).
#pragma once

typedef struct bs_tuning {
    // Engine (the public options override these per handle)
    int graphs;                 // BS_GRAPHS=0: 0, forwards are never recorded/replayed (CUDA graphs). 1
    int drafter_fp8;            // BS_DRAFTER_FP8=1: lossy drafter matrices (output unchanged; acceptance may move). 0
    int drafter_step_walk;      // BS_DRAFTER_STEP_WALK=1: DSpark's sampled Markov walk one pick at a time (A/B). 0
    int threads;                // BS_THREADS=N: thread pool size. 0 = every online core
    // CPU backend
    char cpu_kernels[16];       // BS_CPU_KERNELS=scalar|avx2|avx512|avx512bf16 ("" = the best exact path)
    int cpu_hugepages;          // BS_CPU_HUGEPAGES=0|off|no: 0, weights stay in the checkpoint's mmap. 1
    int cpu_mm1_rows;           // BS_CPU_MM1_ROWS=4: 4 weight rows per 1-/2-row matmul block. 8
    int cpu_att_heads_per_task; // BS_CPU_ATT_HG=1: 1 kv head per attention task. 0 = automatic
    // CUDA backend (docs/cuda.md explains each)
    int cuda_mm_old;            // BS_CUDA_MM=old: every weight row-major, the previous GEMM. 0
    int cuda_swiglu_rows;       // BS_CUDA_SWIGLU_ROWS=0..8: rows fused into the down projection. 1
    int cuda_att;               // BS_CUDA_ATT=old|v2|v4: 0, 1, 3. 2 (v3 where the head dim has it)
    int cuda_at4_ntq;           // BS_CUDA_AT4_NTQ=4: 4. 8
    int cuda_att_pdl;           // BS_CUDA_ATT_PDL=0|all: 0, 2. 1 (PDL for the attention above one row)
    int cuda_att_early;         // BS_CUDA_ATT_EARLY=0: 0. 1
    int cuda_pdl;               // BS_CUDA_PDL=0|1|gemm|after: 0, 1, 2, 3. 3 (after)
    int cuda_pdl_after1;        // BS_CUDA_PDL_AFTER1=1: 1. 0
    int cuda_fuse;              // BS_CUDA_FUSE=0: 0. 1
    int cuda_qkv_fuse;          // BS_CUDA_QKV_FUSE=0: 0. 1
    int cuda_evf;               // BS_CUDA_EVF=0: 0. 1
    int cuda_mm_fixup;          // BS_CUDA_MM_FIXUP=0: 0. 1
    int cuda_fixup_spread;      // BS_CUDA_FIXUP_SPREAD=0: 0. 1
    int cuda_fixup_warps;       // BS_CUDA_FIXUP_WARPS=1..16. 0 = by row count
    int cuda_mm_blocks;         // BS_CUDA_MM_BLOCKS=N > 0: tiled-GEMM blocks per SM. 2
    int cuda_mm_pre;            // BS_CUDA_MM_PRE=k: weight stages issued before the PDL wait. -1 = all but one
    int cuda_mm_trace;          // BS_CUDA_MM_TRACE=1 (not 0): per-launch GEMM timestamps, a table at exit. 0
    int cuda_profile;           // BS_CUDA_PROFILE set: device time per op, a table at exit. 0
    char cuda_ablate[64];       // BS_CUDA_ABLATE=rmsnorm,qknrs,att,combine,fixup: skip kernels (WRONG results). ""
} bs_tuning;

// The defaults above.
bs_tuning bs_tuning_defaults(void);
// Overrides t's fields from the BS_* variables that are set (the library's only getenv). Values a
// variable's parser does not take leave the field as it was.
void bs_tuning_from_env(bs_tuning *t);
// Fills the process's knobs from the defaults and the environment, once (later calls do nothing).
void bs_tuning_init(void);
// The process's knobs (bs_tuning_init's values; it runs on first use if no entry point ran it yet).
const bs_tuning *bs_tuning_get(void);
// For tests and benchmarks that compare settings in one process: change fields between forwards (the
// CUDA backend reads some once, at its first use of them).
bs_tuning *bs_tuning_edit(void);
