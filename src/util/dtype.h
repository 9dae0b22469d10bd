// Storage dtypes of weights and the scalar conversions the reference paths use.
#pragma once
#include <stdint.h>
#include <string.h>

typedef enum { BS_F32 = 0, BS_BF16 = 1, BS_F16 = 2 } bs_dtype;

static inline size_t bs_dtype_size(bs_dtype t) { return t == BS_F32 ? 4 : 2; }
static inline const char *bs_dtype_name(bs_dtype t) { return t == BS_F32 ? "F32" : t == BS_BF16 ? "BF16" : "F16"; }

static inline float bs_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f;
}
// Round to nearest even, as torch does; NaN stays NaN.
static inline uint16_t bs_f32_to_bf16(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
static inline float bs_f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (e == 0) {
        if (m == 0) u = s;
        else { e = 127 - 15 + 1; while (!(m & 0x400)) { m <<= 1; e--; } m &= 0x3ff; u = s | (e << 23) | (m << 13); }
    } else if (e == 31) u = s | 0x7f800000 | (m << 13);
    else u = s | ((e + 127 - 15) << 23) | (m << 13);
    float f; memcpy(&f, &u, 4); return f;
}
// fp32 -> IEEE half, round to nearest even (overflow to infinity, subnormals rounded, NaN stays NaN).
static inline uint16_t bs_f32_to_f16(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    uint32_t s = (u >> 16) & 0x8000, e = (u >> 23) & 0xff, m = u & 0x7fffff;
    if (e == 0xff) return (uint16_t)(s | 0x7c00 | (m ? 0x200 : 0));
    int ne = (int)e - 127 + 15;
    if (ne >= 31) return (uint16_t)(s | 0x7c00);
    if (ne <= 0) {   // subnormal half (or zero): shift with round-to-nearest-even
        if (ne < -10) return (uint16_t)s;
        m |= 0x800000;
        int sh = 14 - ne;
        uint32_t h = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return (uint16_t)(s | h);
    }
    uint32_t h = s | ((uint32_t)ne << 10) | (m >> 13), rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)h;
}
// Element i of a weight buffer <- v rounded to the dtype (round to nearest even).
static inline void bs_store_elem(void *data, bs_dtype t, size_t i, float v) {
    if (t == BS_F32) { memcpy((char *)data + 4 * i, &v, 4); return; }
    uint16_t h = t == BS_BF16 ? bs_f32_to_bf16(v) : bs_f32_to_f16(v);
    memcpy((char *)data + 2 * i, &h, 2);
}
// Element i of a weight buffer, widened to fp32 (reference paths and tests only; kernels vectorise this).
static inline float bs_load_elem(const void *data, bs_dtype t, size_t i) {
    if (t == BS_F32) { float f; memcpy(&f, (const char *)data + 4 * i, 4); return f; }
    uint16_t h; memcpy(&h, (const char *)data + 2 * i, 2);
    return t == BS_BF16 ? bs_bf16_to_f32(h) : bs_f16_to_f32(h);
}
