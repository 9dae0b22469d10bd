// Machine rooflines for the CPU kernels, measured on all pool threads with the kernels' own instructions.
#pragma once
#include <stddef.h>

typedef struct bs_roofline {
    int threads;
    double read_gbs;        // streaming read bandwidth, GB/s (1e9 B/s), buffer >> L3, 32-byte vector loads
    double fma_raw_g;       // peak fp32 multiply-adds/s (1e9), FMA ymm only (8 per instruction)
    double fma_bf16_g;      // effective peak of the AVX2 BF16 kernel's compute-bound inner loop (widening + x loads + FMAs)
    const char *path;       // kernel path measured ("avx2" or "scalar")
} bs_roofline;

// buffer_bytes: the bandwidth buffer (0: 1 GiB; at least 64 MiB). Best of many short trials; ~1 s.
int bs_roofline_measure(bs_roofline *r, size_t buffer_bytes);
