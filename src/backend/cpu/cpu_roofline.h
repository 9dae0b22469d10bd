// Machine rooflines for the CPU kernels, measured on all pool threads with the kernels' own instructions.
#pragma once
#include <stddef.h>

typedef struct bs_roofline {
    int threads;
    double read_gbs;        // streaming read bandwidth, GB/s (1e9 B/s), buffer >> L3, 32-byte vector loads
    double fma_raw_g;       // peak fp32 multiply-adds/s (1e9), FMAs only: ymm on avx2, zmm on the AVX-512 paths
    double fma_bf16_g;      // effective peak of the mix path's BF16 matmul inner block (cpu_roofline.c)
    const char *path;       // the matmul path the backend uses (bs_cpu_default_path: BS_CPU_KERNELS or the default)
    const char *mix;        // the path whose instructions the peaks were measured with ("none": not measured, both 0)
    const char *mix_desc;   // the two peaks' instruction mixes, in words
} bs_roofline;

// buffer_bytes: the bandwidth buffer (0: 1 GiB; at least 64 MiB). Best of many short trials; ~1 s.
int bs_roofline_measure(bs_roofline *r, size_t buffer_bytes);
