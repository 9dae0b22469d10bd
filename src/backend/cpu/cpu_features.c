// Which fast-kernel path this CPU can run, and the BS_CPU_KERNELS override.
// Kernels are compiled with per-function target attributes, so a PORTABLE (-march=x86-64) build still
// carries every path; the path is chosen here at run time with __builtin_cpu_supports, and cpuid for the
// two features older clang's builtin does not name (f16c, avx512bf16: `make fuzz` builds with clang 14).
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/cpu/cpu.h"
#include "util/tuning.h"

static const char *NAMES[BS_CPU_N_PATHS] = { "scalar", "avx2", "avx512", "avx512bf16" };

const char *bs_cpu_path_name(bs_cpu_path p) { return p >= 0 && p < BS_CPU_N_PATHS ? NAMES[p] : "?"; }

#if defined(__x86_64__) || defined(__i386__)
// Bit `bit` of register reg (0 eax, 1 ebx, 2 ecx, 3 edx) of cpuid leaf/subleaf; 0 where the leaf is absent.
static int cpuid_bit(unsigned leaf, unsigned sub, int reg, int bit) {
    unsigned r[4];
    if (!__get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3])) return 0;
    return (int)((r[reg] >> bit) & 1u);
}
#endif

// Computed once: cpuid traps to the hypervisor in a VM (measured ~12 us a call here), and the attention
// asks on every call.
static int path_supported_uncached(bs_cpu_path p) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpuid_bit(1, 0, 2, 29);   // f16c
    int avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    switch (p) {
    case BS_CPU_SCALAR: return 1;
    case BS_CPU_AVX2: return avx2;
    case BS_CPU_AVX512: return avx512;
    case BS_CPU_AVX512BF16: return avx512 && cpuid_bit(7, 1, 0, 5);   // avx512bf16
    default: return 0;
    }
#else
    return p == BS_CPU_SCALAR;
#endif
}

int bs_cpu_path_supported(bs_cpu_path p) {
    static int known[BS_CPU_N_PATHS];   // 0: not asked yet, 1: no, 2: yes (a race only writes the same value twice)
    if (p < 0 || p >= BS_CPU_N_PATHS) return 0;
    int v = __atomic_load_n(&known[p], __ATOMIC_RELAXED);
    if (!v) { v = path_supported_uncached(p) ? 2 : 1; __atomic_store_n(&known[p], v, __ATOMIC_RELAXED); }
    return v == 2;
}

const char *bs_cpu_kernels_note(void) {
    static char note[160];
    const char *want = bs_tuning_get()->cpu_kernels;
    if (!*want) return "";
    for (int p = 0; p < BS_CPU_N_PATHS; p++) {
        if (strcmp(want, NAMES[p])) continue;
        if (bs_cpu_path_supported(p)) return "";
        snprintf(note, sizeof note, "BS_CPU_KERNELS=%s is not supported by this CPU; using the best path", want);
        return note;
    }
    snprintf(note, sizeof note, "BS_CPU_KERNELS=%.16s is not a kernel path (scalar, avx2, avx512, avx512bf16); using the best", want);
    return note;
}

bs_cpu_path bs_cpu_default_path(void) {
    const char *want = bs_tuning_get()->cpu_kernels;
    for (int p = 0; *want && p < BS_CPU_N_PATHS; p++)
        if (!strcmp(want, NAMES[p]) && bs_cpu_path_supported(p)) return p;   // else bs_cpu_kernels_note says why not
    // The exact (fp32-activation) paths only: avx512bf16 rounds activations and stays opt-in.
    // avx512 computes the avx2 path's results bit for bit (cpu_matmul_avx512.c, cpu_attention.c), so
    // choosing it is a question of speed only, and it was measured faster wherever it ran (session 14,
    // docs/history/benchmarks-diary.md): a Zen 5 EPYC (2 vCPUs): 4-16-row forwards 1.2-1.7x, prefill 1.6-2x, 1-2 rows the
    // same code; the GPU host's Xeon (16 threads): a 16-row 6144 x 1024 matmul 1.25x, 1-4 rows equal or
    // better. (The earlier AVX-512 kernels, with their own 16-lane sums and no prefetch, were slower than
    // AVX2 on an AVX-512 Xeon and at 1 row on the EPYC; they are gone.)
    // tests/test_cpu_ops.c runs every supported path.
    if (bs_cpu_path_supported(BS_CPU_AVX512)) return BS_CPU_AVX512;
    if (bs_cpu_path_supported(BS_CPU_AVX2)) return BS_CPU_AVX2;
    return BS_CPU_SCALAR;
}
