// Host-side arithmetic of the affine format (affine.h): element access for loaders and checks, the
// quantiser behind `blockspec quantize`.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "backend/affine.h"

size_t bs_mat_bytes(const bs_mat *W) {
    if (W->format != BS_WFMT_AFFINE) return (size_t)W->rows * W->cols * bs_dtype_size(W->dtype);
    size_t groups = (size_t)W->rows * (W->cols / W->group);
    return (size_t)W->rows * bs_affine_words(W->cols, W->bits) * 4 + 2 * groups * bs_dtype_size(W->dtype);
}

const char *bs_mat_describe(const bs_mat *W, char *buf, size_t cap) {
    if (W->format == BS_WFMT_AFFINE)
        snprintf(buf, cap, "affine %d-bit, group %d, %s scales", W->bits, W->group, bs_dtype_name(W->dtype));
    else snprintf(buf, cap, "%s", bs_dtype_name(W->dtype));
    return buf;
}

float bs_mat_elem(const bs_mat *W, int64_t r, int64_t k) {
    if (W->format != BS_WFMT_AFFINE) return bs_load_elem(W->data, W->dtype, (size_t)r * W->cols + k);
    const uint32_t *row = (const uint32_t *)W->data + r * bs_affine_words(W->cols, W->bits);
    size_t g = (size_t)r * (W->cols / W->group) + k / W->group;
    return bs_affine_value(bs_load_elem(W->scales, W->dtype, g), bs_affine_code(row, W->bits, k), bs_load_elem(W->biases, W->dtype, g));
}

void bs_mat_row_f32(const bs_mat *W, int64_t r, float *out) {
    if (W->format != BS_WFMT_AFFINE) {
        for (int64_t k = 0; k < W->cols; k++) out[k] = bs_load_elem(W->data, W->dtype, (size_t)r * W->cols + k);
        return;
    }
    const uint32_t *row = (const uint32_t *)W->data + r * bs_affine_words(W->cols, W->bits);
    int64_t G = W->cols / W->group;
    for (int64_t g = 0; g < G; g++) {
        float s = bs_load_elem(W->scales, W->dtype, (size_t)(r * G + g)), b = bs_load_elem(W->biases, W->dtype, (size_t)(r * G + g));
        for (int64_t k = g * W->group; k < (g + 1) * W->group; k++) out[k] = bs_affine_value(s, bs_affine_code(row, W->bits, k), b);
    }
}

int bs_mat_same_bytes(const bs_mat *a, const bs_mat *b) {
    if (a->format != b->format || a->rows != b->rows || a->cols != b->cols || a->dtype != b->dtype) return 0;
    if (a->format != BS_WFMT_AFFINE)
        return a->data == b->data || !memcmp(a->data, b->data, (size_t)a->rows * a->cols * bs_dtype_size(a->dtype));
    if (a->bits != b->bits || a->group != b->group) return 0;
    size_t words = (size_t)a->rows * bs_affine_words(a->cols, a->bits), groups = (size_t)a->rows * (a->cols / a->group);
    size_t gb = groups * bs_dtype_size(a->dtype);
    return !memcmp(a->data, b->data, words * 4) && !memcmp(a->scales, b->scales, gb) && !memcmp(a->biases, b->biases, gb);
}

void bs_affine_quantize_row(const float *w, int64_t K, int bits, int group, uint32_t *codes, float *scales, float *biases) {
    const float n_bins = (float)((1 << bits) - 1), eps = 1e-7f;
    int per = 32 / bits;
    memset(codes, 0, sizeof(uint32_t) * (size_t)bs_affine_words(K, bits));
    for (int64_t g = 0; g < K / group; g++) {
        const float *v = w + g * group;
        float lo = v[0], hi = v[0];
        for (int i = 1; i < group; i++) { lo = fminf(lo, v[i]); hi = fmaxf(hi, v[i]); }
        // The larger-magnitude end is the edge: it becomes code 0 exactly; the scale's sign points from it
        // to the other end, so zero lands on an integer code too when the edge rounds to a whole step.
        int mask = fabsf(lo) > fabsf(hi);
        float scale = fmaxf((hi - lo) / n_bins, eps);
        if (!mask) scale = -scale;
        float edge = mask ? lo : hi, q0 = rintf(edge / scale), bias = 0;
        if (q0 != 0) { scale = edge / q0; bias = edge; }
        scales[g] = scale; biases[g] = bias;
        for (int i = 0; i < group; i++) {
            float q = rintf((v[i] - bias) / scale);
            q = q < 0 ? 0 : q > n_bins ? n_bins : q;
            int64_t k = g * group + i;
            codes[k / per] |= (uint32_t)q << ((k % per) * bits);
        }
    }
}
