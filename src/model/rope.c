// RoPE inverse frequencies: default and llama3-scaled (Llama 3.1 / 3.2).
//
// transformers builds inv_freq in fp32 and, for llama3, rescales it with fp32 tensor arithmetic. To hand
// the kernels the very same values, each step below is one fp32 operation of that computation, in its
// order. Two details of PyTorch matter: `scalar / tensor` is evaluated as reciprocal(tensor) * scalar, and
// Python scalars meet fp32 tensors as fp32. This file is compiled with -ffp-contract=off (Makefile): a
// fused multiply-add would round once where PyTorch rounds twice.
#include <math.h>
#include <stdlib.h>
#include "model/rope.h"

// llama3: wavelength 2 pi / f. Long wavelengths (beyond original_max / low_freq_factor: the model never saw
// a full turn of them in pre-training) are slowed down by `factor`; short ones (below original_max /
// high_freq_factor) are kept; in between, f is blended between f / factor and f by how many turns of it
// fit in original_max positions.
static float llama3_scale(float f, const bs_rope_scaling *s) {
    const float two_pi = (float)(2.0 * M_PI), factor = (float)s->factor, lo = (float)s->low_freq_factor;
    const float lo_wavelen = (float)(s->original_max / s->low_freq_factor);
    const float hi_wavelen = (float)(s->original_max / s->high_freq_factor);
    const float span = (float)(s->high_freq_factor - s->low_freq_factor);
    float wavelen = (1.0f / f) * two_pi;
    float scaled = wavelen > lo_wavelen ? f / factor : f;
    if (wavelen < hi_wavelen || wavelen > lo_wavelen) return scaled;
    float turns = (1.0f / wavelen) * (float)s->original_max;      // original_max / wavelen
    float smooth = (turns - lo) / span;
    float slow = ((1.0f - smooth) * scaled) / factor;
    float fast = smooth * scaled;
    return slow + fast;
}

void bs_rope_inv_freqs(float theta, const bs_rope_scaling *s, int hd, float *out) {
    for (int i = 0; i < hd / 2; i++) {
        out[i] = bs_rope_inv_freq(theta, i, hd);
        if (s && s->type == BS_ROPE_LLAMA3) out[i] = llama3_scale(out[i], s);
    }
}

float *bs_rope_table(bs_backend *be, float theta, const bs_rope_scaling *s, int hd, bs_err *err) {
    size_t bytes = sizeof(float) * (size_t)(hd / 2 > 0 ? hd / 2 : 1);
    float *host = malloc(bytes);
    if (!host) { bs_fail(err, "out of memory"); return NULL; }
    bs_rope_inv_freqs(theta, s, hd, host);
    float *t = be->alloc(be, bytes, err);
    if (t) be->upload(be, t, host, bytes);
    else bs_wrap(err, "RoPE table");
    free(host);
    return t;
}
