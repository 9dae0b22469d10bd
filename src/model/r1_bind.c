// Binding an unrotated drafter to an R1-folded target (r1_bind.h).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backend/affine.h"
#include "backend/hadamard.h"
#include "model/r1_bind.h"
#include "util/threadpool.h"

void bs_r1_bind_free(bs_r1_bind *b) {
    if (b->be) {
        if (b->signs) b->be->free(b->be, b->signs);
        if (b->head_pre) b->be->free(b->be, b->head_pre);
    }
    memset(b, 0, sizeof *b);
}

int bs_r1_bind_init(bs_r1_bind *b, const bs_r1_basis *r1, int needs_gain, bs_backend *be, const char *what, bs_err *err) {
    memset(b, 0, sizeof *b);
    if (!r1 || !r1->n) return 0;
    int n = r1->n;
    if (needs_gain) {
        float lo = INFINITY, hi = 0;
        int at = 0;
        for (int c = 0; c < n; c++) {
            float g = fabsf(r1->final_gain[c]);
            if (g < lo) { lo = g; at = c; }
            if (g > hi) hi = g;
        }
        if (!(lo >= BS_R1_MIN_GAIN_RATIO * hi) || lo == 0)
            return bs_fail(err, "%s: cannot bind to this R1-folded target: its final norm gain (blockspec_r1.safetensors, "
                           "'final_norm_gain') has |gamma[%d]| = %g, below %g x the largest (%g); the drafter's hidden would be divided by it "
                           "to enter the folded LM head (docs/rotation.md)", what, at, lo, (double)BS_R1_MIN_GAIN_RATIO, hi);
    }
    float *pre = bs_malloc(sizeof(float) * n, err);
    if (!pre) return -1;
    for (int c = 0; c < n; c++) pre[c] = r1->signs[c] / r1->final_gain[c];
    b->be = be; b->n = n;
    if (!(b->signs = be->alloc(be, sizeof(float) * n, err)) || (needs_gain && !(b->head_pre = be->alloc(be, sizeof(float) * n, err)))) {
        free(pre);
        bs_r1_bind_free(b);
        return bs_wrap(err, "%s: binding to the R1-folded target", what);
    }
    be->upload(be, b->signs, r1->signs, sizeof(float) * n);
    if (b->head_pre) be->upload(be, b->head_pre, pre, sizeof(float) * n);
    free(pre);
    return 0;
}

// ---- seam 1: fc -------------------------------------------------------------------------------------------------

typedef struct fc_job {
    const bs_r1_basis *r1;
    const bs_hadamard *tr;
    const bs_mat *src;
    bs_mat *dst;              // dense: data written; affine: codes, scales, biases written
    const int *taps;
    int n_taps, final_tap, oom;
} fc_job;

static void fc_task(void *ctx, int task, int n_tasks) {
    fc_job *j = ctx;
    const bs_mat *src = j->src;
    bs_mat *dst = j->dst;
    int64_t R = src->rows, K = src->cols, H = j->r1->n;
    int aff = src->format == BS_WFMT_AFFINE;
    int64_t G = aff ? K / src->group : 0;
    float *w = malloc(sizeof(float) * (size_t)(K + 2 * G));
    if (!w) { __atomic_store_n(&j->oom, 1, __ATOMIC_RELAXED); return; }
    float *sc = w + K, *bi = sc + G;
    int64_t per = (R + n_tasks - 1) / n_tasks, r0 = task * per, r1 = r0 + per < R ? r0 + per : R;
    for (int64_t r = r0; r < r1; r++) {
        bs_mat_row_f32(src, r, w);
        for (int k = 0; k < j->n_taps; k++) {
            float *seg = w + (int64_t)k * H;
            const int with_gain = j->taps[k] == j->final_tap;
            for (int64_t c = 0; c < H; c++) seg[c] = (with_gain ? seg[c] * j->r1->final_gain[c] : seg[c]) * j->r1->signs[c];
            bs_hadamard_row(j->tr, seg, 0);
        }
        if (!aff) {
            for (int64_t c = 0; c < K; c++) bs_store_elem((void *)dst->data, dst->dtype, (size_t)(r * K + c), w[c]);
            continue;
        }
        bs_affine_quantize_row(w, K, src->bits, src->group, (uint32_t *)dst->data + r * bs_affine_words(K, src->bits), sc, bi);
        for (int64_t g = 0; g < G; g++) {
            bs_store_elem((void *)dst->scales, dst->dtype, (size_t)(r * G + g), sc[g]);
            bs_store_elem((void *)dst->biases, dst->dtype, (size_t)(r * G + g), bi[g]);
        }
    }
    free(w);
}

int bs_r1_fold_fc(const bs_r1_basis *r1, const bs_mat *fc, const int *taps, int n_taps, int final_tap, bs_mat *out, void **owned,
                  bs_err *err) {
    *owned = NULL;
    bs_hadamard tr;
    if (bs_hadamard_init(&tr, r1->n)) return bs_fail(err, "R1 fold of fc: no Hadamard transform of length %d", r1->n);
    if (fc->cols != (int64_t)n_taps * r1->n)
        return bs_fail(err, "R1 fold of fc: %lld columns, expected %d taps x %d", (long long)fc->cols, n_taps, r1->n);
    int aff = fc->format == BS_WFMT_AFFINE;
    size_t data = aff ? (size_t)fc->rows * bs_affine_words(fc->cols, fc->bits) * 4 : (size_t)fc->rows * fc->cols * bs_dtype_size(fc->dtype);
    size_t params = aff ? (size_t)fc->rows * (fc->cols / fc->group) * bs_dtype_size(fc->dtype) : 0;
    char *buf = bs_malloc(data + 2 * params, err);
    if (!buf) return bs_wrap(err, "R1 fold of fc");
    *out = *fc;
    out->layout = 0;
    out->data = buf;
    if (aff) { out->scales = buf + data; out->biases = buf + data + params; }
    fc_job j = { r1, &tr, fc, out, taps, n_taps, final_tap, 0 };
    int tasks = bs_pool_size() * 4;
    if (tasks > fc->rows) tasks = (int)fc->rows;
    if (tasks <= 1 || fc->rows * fc->cols < (1 << 16)) fc_task(&j, 0, 1);
    else bs_parallel_for(tasks, fc_task, &j);
    if (j.oom) { free(buf); return bs_fail(err, "R1 fold of fc: out of memory for a work row"); }
    *owned = buf;
    return 0;
}
