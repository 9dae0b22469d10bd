// MLX's affine quantisation (docs/quantization.md): the format's arithmetic in one place, for host code.
// Codes are packed lowest bits first into uint32 words; a group of `group` consecutive elements of a row
// shares one scale and one bias, and element = scale * code + bias. Kernels vectorise the same formula.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "backend/backend.h"

// The one dequantisation formula every path is held to: fp32 scale * code + bias with one rounding.
static inline float bs_affine_value(float scale, uint32_t q, float bias) { return __builtin_fmaf(scale, (float)q, bias); }

// Code k of a packed row (bits 4 or 8; the format also defines 2). The word is read with memcpy: in a
// safetensors file a U32 tensor need not start at a multiple of 4 bytes (a BF16 tensor of odd size before it).
static inline uint32_t bs_affine_code(const uint32_t *row, int bits, int64_t k) {
    int per = 32 / bits;
    uint32_t w;
    memcpy(&w, (const char *)row + (size_t)(k / per) * 4, 4);
    return (w >> ((k % per) * bits)) & ((1u << bits) - 1u);
}

// Words per packed row: cols * bits / 32.
static inline int64_t bs_affine_words(int64_t cols, int bits) { return cols * bits / 32; }

// Bytes of a weight's storage: dense elements, or codes + scales + biases.
size_t bs_mat_bytes(const bs_mat *W);
// "BF16", "F32", or "affine 4-bit, group 64, BF16 scales" (for messages).
const char *bs_mat_describe(const bs_mat *W, char *buf, size_t cap);
// Element (r, k) of a host view, widened or dequantised to fp32.
float bs_mat_elem(const bs_mat *W, int64_t r, int64_t k);
// Row r of a host view as fp32 (out: W->cols floats).
void bs_mat_row_f32(const bs_mat *W, int64_t r, float *out);
// Bit-identical storage (same format, shape, dtype and bytes of every array).
int bs_mat_same_bytes(const bs_mat *a, const bs_mat *b);

// Quantises one row of K fp32 values as MLX's CPU quantize does (per group: the larger-magnitude end of
// [min, max] becomes exact at code 0, scale = its distance to the other end / (2^bits - 1) with the sign
// of that end, codes rounded to nearest even and clamped). scales/biases get the fp32 values: the caller
// rounds them to the dtype it stores. bits 4 or 8; group divides K.
void bs_affine_quantize_row(const float *w, int64_t K, int bits, int group, uint32_t *codes, float *scales, float *biases);
