// AdamW, schedule and clipping (optim.h). The update is elementwise and memory-bound: it is split into
// fixed-size chunks over all trainable tensors and run on the thread pool; chunks never depend on the
// number of threads, so results are bit-identical on any machine.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "train/optim.h"
#include "util/threadpool.h"

#define CHUNK (1 << 16)   // elements per task

bs_adamw_cfg bs_adamw_defaults(double lr, double weight_decay) {
    return (bs_adamw_cfg){ .lr = lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = weight_decay };
}

int bs_adamw_init(bs_adamw *o, bs_param_set *ps, const bs_adamw_cfg *cfg, bs_err *err) {
    memset(o, 0, sizeof *o);
    o->cfg = *cfg;
    o->params = ps;
    if (!(o->m = bs_calloc(ps->n ? ps->n : 1, sizeof *o->m, err)) || !(o->v = bs_calloc(ps->n ? ps->n : 1, sizeof *o->v, err))) {
        bs_adamw_free(o);
        return -1;
    }
    for (int i = 0; i < ps->n; i++) {
        if (!ps->p[i].trainable) continue;
        if (!ps->p[i].g) { bs_adamw_free(o); return bs_fail(err, "parameter %s is trainable but has no gradient buffer", ps->p[i].name); }
        if (!(o->m[i] = bs_calloc(ps->p[i].n, sizeof(float), err)) || !(o->v[i] = bs_calloc(ps->p[i].n, sizeof(float), err))) {
            bs_adamw_free(o);
            return bs_wrap(err, "AdamW moments of %s", ps->p[i].name);
        }
    }
    return 0;
}

void bs_adamw_free(bs_adamw *o) {
    if (o->params) for (int i = 0; i < o->params->n; i++) { if (o->m) free(o->m[i]); if (o->v) free(o->v[i]); }
    free(o->m); free(o->v);
    memset(o, 0, sizeof *o);
}

// The chunks of the trainable tensors: task k covers elements [off, off+len) of tensor idx.
typedef struct { int idx; int64_t off, len; } chunk;

static chunk *make_chunks(const bs_param_set *ps, int *n_out) {
    int n = 0;
    for (int i = 0; i < ps->n; i++) if (ps->p[i].trainable) n += (int)((ps->p[i].n + CHUNK - 1) / CHUNK);
    chunk *c = malloc(sizeof *c * (n ? n : 1));
    if (!c) return NULL;
    int k = 0;
    for (int i = 0; i < ps->n; i++) {
        if (!ps->p[i].trainable) continue;
        for (int64_t off = 0; off < ps->p[i].n; off += CHUNK)
            c[k++] = (chunk){ i, off, ps->p[i].n - off < CHUNK ? ps->p[i].n - off : CHUNK };
    }
    *n_out = n;
    return c;
}

typedef struct {
    bs_adamw *o; const chunk *c;
    float one_m_b1, b2, one_m_b2, eps, wd_factor_decay, step_size, sqrt_bc2;
} step_ctx;

// Built with -fno-math-errno (Makefile): sqrtf of a moment (never negative) need not set errno, which lets
// this loop vectorise.
static void step_task(void *vctx, int task, int n_tasks) {
    const step_ctx *x = vctx;
    const chunk *ch = &x->c[task];
    bs_param *p = &x->o->params->p[ch->idx];
    float *restrict w = p->w + ch->off, *restrict m = x->o->m[ch->idx] + ch->off, *restrict v = x->o->v[ch->idx] + ch->off;
    const float *restrict g = p->g + ch->off;
    // Constants in locals: stores through w/m/v could otherwise alias *x and force reloads every element.
    const float decay = p->decay ? x->wd_factor_decay : 1.0f, one_m_b1 = x->one_m_b1, b2 = x->b2, one_m_b2 = x->one_m_b2,
                eps = x->eps, step_size = x->step_size, sqrt_bc2 = x->sqrt_bc2;
    const int64_t n = ch->len;
    for (int64_t j = 0; j < n; j++) {
        // torch's single-tensor AdamW, op for op: decay the weight; m.lerp_(g, 1-b1);
        // v.mul_(b2).addcmul_(g, g, 1-b2); w -= step_size * m / (sqrt(v) / sqrt(bc2) + eps)
        float wj = w[j] * decay, mj = m[j] + one_m_b1 * (g[j] - m[j]), vj = v[j] * b2 + one_m_b2 * (g[j] * g[j]);
        m[j] = mj; v[j] = vj;
        w[j] = wj - step_size * (mj / (sqrtf(vj) / sqrt_bc2 + eps));
    }
}

void bs_adamw_step(bs_adamw *o, double lr) {
    o->t++;
    int n;
    chunk *c = make_chunks(o->params, &n);
    const bs_adamw_cfg *k = &o->cfg;
    double bc1 = 1.0 - pow(k->beta1, (double)o->t), bc2 = 1.0 - pow(k->beta2, (double)o->t);
    step_ctx x = { o, c, (float)(1.0 - k->beta1), (float)k->beta2, (float)(1.0 - k->beta2), (float)k->eps,
                   (float)(1.0 - lr * k->weight_decay), (float)(lr / bc1), (float)sqrt(bc2) };
    if (!c) {   // out of memory for the chunk list: do the same work serially, one tensor at a time
        for (int i = 0; i < o->params->n; i++) {
            if (!o->params->p[i].trainable) continue;
            chunk one = { i, 0, o->params->p[i].n };
            x.c = &one;
            step_task(&x, 0, 1);
        }
        return;
    }
    bs_parallel_for(n, step_task, &x);
    free(c);
}

int64_t bs_warmup_steps(double warmup_ratio, int64_t total_steps) {
    double w = warmup_ratio * (double)total_steps;
    return w > 0 ? (int64_t)w : 0;
}

double bs_lr_schedule(double lr, int64_t t, int64_t warmup, int64_t total_steps) {
    if (t < warmup) return lr * (double)(t + 1) / (double)warmup;
    int64_t span = total_steps - warmup;
    if (span <= 0) return lr;
    return lr * 0.5 * (1.0 + cos(M_PI * (double)(t - warmup) / (double)span));
}

typedef struct { const bs_param_set *ps; const chunk *c; double *sums; float scale; } norm_ctx;

static void sumsq_task(void *vctx, int task, int n_tasks) {
    norm_ctx *x = vctx;
    const chunk *ch = &x->c[task];
    const float *g = x->ps->p[ch->idx].g + ch->off;
    double s[4] = { 0 };   // four partial sums: a fixed association the compiler can keep in registers
    int64_t j = 0, n = ch->len;
    for (; j + 4 <= n; j += 4)
        for (int k = 0; k < 4; k++) s[k] += (double)g[j + k] * g[j + k];
    for (; j < n; j++) s[0] += (double)g[j] * g[j];
    x->sums[task] = (s[0] + s[1]) + (s[2] + s[3]);
}

static void scale_task(void *vctx, int task, int n_tasks) {
    norm_ctx *x = vctx;
    const chunk *ch = &x->c[task];
    float *g = x->ps->p[ch->idx].g + ch->off, scale = x->scale;
    for (int64_t j = 0; j < ch->len; j++) g[j] *= scale;
}

double bs_grad_norm(const bs_param_set *ps) {
    int n;
    chunk *c = make_chunks(ps, &n);
    double *sums = malloc(sizeof *sums * (n ? n : 1)), total = 0;
    if (!c || !sums) {   // out of memory: the same sum serially
        for (int i = 0; i < ps->n; i++) if (ps->p[i].trainable) for (int64_t j = 0; j < ps->p[i].n; j++) total += (double)ps->p[i].g[j] * ps->p[i].g[j];
    } else {
        norm_ctx x = { ps, c, sums, 1 };
        bs_parallel_for(n, sumsq_task, &x);
        for (int k = 0; k < n; k++) total += sums[k];   // fixed order
    }
    free(c); free(sums);
    return sqrt(total);
}

double bs_clip_grad_norm(bs_param_set *ps, double max_norm) {
    double norm = bs_grad_norm(ps);
    if (max_norm <= 0 || !isfinite(norm)) return norm;
    double coef = max_norm / (norm + 1e-6);
    if (coef >= 1.0) return norm;
    int n;
    chunk *c = make_chunks(ps, &n);
    norm_ctx x = { ps, c, NULL, (float)coef };
    if (c) bs_parallel_for(n, scale_task, &x);
    else for (int i = 0; i < ps->n; i++) if (ps->p[i].trainable) for (int64_t j = 0; j < ps->p[i].n; j++) ps->p[i].g[j] *= (float)coef;
    free(c);
    return norm;
}
