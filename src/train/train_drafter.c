// Block drafters as training tasks (train_drafter.h). One step, in order:
//   1. target forward on the sequence: taps F [S][m*H], final normed hidden T [S][H] (frozen, no gradient)
//   2. anchors (drawn or given); packed block ids, positions a+j, DeepSpec's block mask
//   3. context c = hidden_norm(F fc^T); block rows x = embed(ids) -> layers over [c ; block] -> h = norm(x)
//   4. prediction rows hp (DeepSpec: all B rows; z-lab: rows 1..B-1), labels ids[a+1+k], eval mask (cumprod),
//      weights; Markov head u from e = W1[prev] (teacher forced); confidence logits from [hp ; e] or hp
//   5. per chunk of rows: logits = hp lm_head^T + u W2^T, target logits from T[a+k]; CE, L1, BCE and dlogits
//   6. backward: dlogits -> dhp, du, dW2; Markov and confidence heads -> dhp, de, dW1; final norm, layers
//      (dc collects every layer's context K/V gradient), hidden_norm, fc
// DFlash 2 (z-lab's layout plus its convolutions, inside the layers: train_layer.c) adds in 5 each row's K
// candidates (top-K of its logits, the label put in when missing) and then the selector's K-way CE, teacher
// forced, whose gradient reaches the selector's three tensors only (docs/training.md, "DFlash 2").
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "train/train_dflash2_ops.h"
#include "train/train_drafter.h"
#include "train/train_io.h"
#include "train/train_layer.h"
#include "train/train_ops.h"
#include "train/train_target.h"
#include "util/threadpool.h"

#define LOGIT_ROWS 32

typedef struct {
    bs_train_task task;
    bs_drafter_config cfg;
    bs_drafter_loss_opts opt;
    bs_train_task *target;
    bs_layer_shape shape;
    int zl, B, P, H, V, r, m;             // z-lab?, block, prediction rows, hidden, vocab, Markov rank, taps
    int d2, K, R;                         // DFlash 2: selector candidates and rank (0: not DFlash 2)
    int taps[BS_MAX_TAPS];                // hidden_states indices of the taps
    // weights (the embedding / LM head: own frozen copies, or the target's for z-lab)
    const float *embed, *lm_head;
    bs_param *fc, *hidden_norm, *norm, *w1, *w2, *mw, *mb, *cw, *cb;   // mw/mb: gate_proj or joint_proj
    bs_param *sel_w, *sel_a, *sel_b;      // DFlash 2: hidden_projection [R][H], predecessor / successor codebooks [V][R]
    bs_layer_w *lw;
    bs_op_markov mop;
    int conf_in;                          // confidence head input width (0: no head)
    int hold_conf;                        // 0: normal; 1: the next step records its BCE targets; 2: steps reuse them
    // workspace, for S_cap sequence rows and A_cap anchors
    int S_cap, A_cap;
    float *F, *T, *c_pre, *c, *rstd_c, *dc, *dc_pre;
    int32_t *blk_ids, *qpos, *kpos, *kr, *anchors, *keep;
    float *x0, *h, *rstd_h, *dh, *dx;
    bs_layer_act *act;
    bs_layer_grad gw;
    float *hp, *dhp, *e, *de, *u, *du, *msave, *mscratch, *f, *df, *conf, *dconf, *w, *acc, *ce_row, *l1_row, *bce_row, *acc_held;
    int32_t *prev, *tid, *tpos, *evm;
    float *z, *dz, *p, *zt, *tT;          // [LOGIT_ROWS][V] (tT: [LOGIT_ROWS][H])
    int32_t *cand, *gold;                 // DFlash 2: [np][K] candidates, [np] the label's index among them
    float *cval, *zsel, *dzsel, *sel_s;   // [np][K] their logits, [np][R] z = hidden_projection(h) and its gradient, [K]
} drafter;

static drafter *impl(const bs_train_task *t) { return (drafter *)t->impl; }
const bs_drafter_config *bs_train_drafter_config_of(const bs_train_task *t) { return &impl(t)->cfg; }
int bs_train_drafter_rows(const bs_train_task *t) { return impl(t)->P; }

const char *bs_drafter_kind(const bs_drafter_config *c) {
    if (c->dflash2) return "dflash2";
    if (c->arch == BS_DRAFTER_ZLAB) return "zlab-dflash";
    return c->markov_rank > 0 || c->conf_head ? "dspark" : "dflash";
}

void bs_drafter_loss_defaults(bs_drafter_loss_opts *o, const bs_drafter_config *c) {
    int dspark = !strcmp(bs_drafter_kind(c), "dspark");
    memset(o, 0, sizeof *o);   // every field: callers fill a stack struct with this (target_labels was left unset)
    o->gamma = 4.0f;
    o->ce_alpha = dspark ? 0.1f : 1.0f;
    o->l1_alpha = dspark ? 0.9f : 0.0f;
    o->conf_alpha = dspark && c->conf_head ? 1.0f : 0.0f;
    if (c->dflash2) o->conf_alpha = 1.0f;   // DFlash 2: the third term is the selector's CE
    o->num_anchors = 512;
}

// ---- workspace ------------------------------------------------------------------------------------------------

typedef struct { void **p; size_t bytes; } buf;

static int buffers(drafter *d, buf *b, int nb, int alloc, bs_err *err) {
    for (int i = 0; i < nb; i++) {
        if (!alloc) { free(*b[i].p); *b[i].p = NULL; continue; }
        if (!(*b[i].p = bs_malloc(b[i].bytes ? b[i].bytes : 4, err))) return -1;
    }
    return 0;
}

static int workspace(drafter *d, int S, int A, int alloc, bs_err *err) {
    size_t H = d->H, V = d->V, r = d->r, nq = (size_t)A * d->B, np = (size_t)A * d->P, mH = (size_t)d->m * H, f4 = sizeof(float);
    size_t ms = d->r ? (size_t)bs_op_markov_save_per_row(&d->mop) : 0, mc = d->r ? (size_t)bs_op_markov_scratch_per_row(&d->mop) : 0;
    size_t fin = d->conf_in ? d->conf_in : 1, K = d->K, R = d->R;
    buf b[] = {
        { (void **)&d->F, S * mH * f4 }, { (void **)&d->T, S * H * f4 }, { (void **)&d->c_pre, S * H * f4 }, { (void **)&d->c, S * H * f4 },
        { (void **)&d->rstd_c, S * f4 }, { (void **)&d->dc, S * H * f4 }, { (void **)&d->dc_pre, S * H * f4 },
        { (void **)&d->blk_ids, nq * 4 }, { (void **)&d->qpos, nq * 4 }, { (void **)&d->kpos, (S + nq) * 4 }, { (void **)&d->kr, 4 * nq * 4 },
        { (void **)&d->anchors, A * 4 }, { (void **)&d->keep, A * 4 },
        { (void **)&d->x0, nq * H * f4 }, { (void **)&d->h, nq * H * f4 }, { (void **)&d->rstd_h, nq * f4 }, { (void **)&d->dh, nq * H * f4 },
        { (void **)&d->dx, nq * H * f4 },
        { (void **)&d->hp, np * H * f4 }, { (void **)&d->dhp, np * H * f4 }, { (void **)&d->e, np * r * f4 }, { (void **)&d->de, np * r * f4 },
        { (void **)&d->u, np * r * f4 }, { (void **)&d->du, np * r * f4 }, { (void **)&d->msave, np * ms * f4 }, { (void **)&d->mscratch, np * mc * f4 },
        { (void **)&d->f, np * fin * f4 }, { (void **)&d->df, np * fin * f4 }, { (void **)&d->conf, np * f4 }, { (void **)&d->dconf, np * f4 },
        { (void **)&d->w, np * f4 }, { (void **)&d->acc, np * f4 }, { (void **)&d->ce_row, np * f4 }, { (void **)&d->l1_row, np * f4 },
        { (void **)&d->bce_row, np * f4 }, { (void **)&d->acc_held, np * f4 },
        { (void **)&d->prev, np * 4 }, { (void **)&d->tid, np * 4 }, { (void **)&d->tpos, np * 4 }, { (void **)&d->evm, np * 4 },
        { (void **)&d->z, LOGIT_ROWS * V * f4 }, { (void **)&d->dz, LOGIT_ROWS * V * f4 }, { (void **)&d->p, LOGIT_ROWS * V * f4 },
        { (void **)&d->zt, LOGIT_ROWS * V * f4 }, { (void **)&d->tT, LOGIT_ROWS * H * f4 },
        { (void **)&d->cand, np * K * 4 }, { (void **)&d->gold, np * 4 }, { (void **)&d->cval, np * K * f4 },
        { (void **)&d->zsel, np * R * f4 }, { (void **)&d->dzsel, np * R * f4 }, { (void **)&d->sel_s, K * f4 },
    };
    int L = d->cfg.base.n_layers;
    if (!alloc) {
        buffers(d, b, (int)(sizeof b / sizeof *b), 0, err);
        if (d->act) for (int l = 0; l < L; l++) bs_layer_act_free(&d->act[l]);
        free(d->act); d->act = NULL;
        bs_layer_grad_free(&d->gw);
        d->S_cap = d->A_cap = 0;
        return 0;
    }
    if (buffers(d, b, (int)(sizeof b / sizeof *b), 1, err) || !(d->act = bs_calloc(L, sizeof *d->act, err))) goto fail;
    for (int l = 0; l < L; l++) if (bs_layer_act_alloc(&d->act[l], &d->shape, (int)nq, S, err)) goto fail;
    if (bs_layer_grad_alloc(&d->gw, &d->shape, (int)nq, S, err)) goto fail;
    d->S_cap = S; d->A_cap = A;
    return 0;
fail:
    workspace(d, 0, 0, 0, err);
    return bs_wrap(err, "drafter training workspace for %d tokens and %d anchors", S, A);
}

static int ensure_ws(drafter *d, int S, int A, bs_err *err) {
    if (S <= d->S_cap && A <= d->A_cap) return 0;
    workspace(d, 0, 0, 0, err);
    return workspace(d, S > d->S_cap ? S : d->S_cap, A > d->A_cap ? A : d->A_cap, 1, err);
}

// ---- anchors ---------------------------------------------------------------------------------------------------

int bs_drafter_sample_anchors(const bs_train_seq *seq, int n_anchors, bs_rng *rng, int32_t *anchors, int32_t *keep) {
    int n = seq->n, cnt = 0;
    int32_t *cand = malloc(sizeof(int32_t) * (n > 1 ? n : 1));
    if (!cand) return -1;
    for (int a = 0; a + 1 < n; a++)
        if (!seq->loss_mask || (seq->loss_mask[a] && seq->loss_mask[a + 1])) cand[cnt++] = a;
    int k = cnt < n_anchors ? cnt : n_anchors;
    for (int i = 0; i < k; i++) {   // partial Fisher-Yates: k distinct candidates, uniformly
        int j = i + (int)(bs_rng_uniform(rng) * (cnt - i));
        int32_t t = cand[i]; cand[i] = cand[j]; cand[j] = t;
    }
    for (int i = 1; i < k; i++) {   // sort ascending (insertion: k is at most a few thousand)
        int32_t v = cand[i]; int j = i - 1;
        while (j >= 0 && cand[j] > v) { cand[j + 1] = cand[j]; j--; }
        cand[j + 1] = v;
    }
    for (int i = 0; i < n_anchors; i++) { anchors[i] = i < k ? cand[i] : 0; keep[i] = i < k; }
    free(cand);
    return k;
}

// ---- one step --------------------------------------------------------------------------------------------------

typedef struct {
    drafter *d;
    int r0, need_t, l1_on, do_grad;
    float ce_s, l1_s;
} rows_job;

// Loss of one prediction row of the chunk: CE, L1 to the target and the acceptance estimate; dz.
static void row_task(void *ctx, int i, int n) {
    rows_job *j = ctx;
    drafter *d = j->d;
    int V = d->V, row = j->r0 + i;
    float *z = d->z + (size_t)i * V, *p = d->p + (size_t)i * V, *dz = d->dz + (size_t)i * V, *pt = d->zt + (size_t)i * V;
    if (j->do_grad) memset(dz, 0, sizeof(float) * V);
    float w = d->w[row];
    d->ce_row[row] = d->l1_row[row] = 0;
    d->acc[row] = 0;
    if (w == 0) return;
    if (d->d2) d->gold[row] = bs_selector_candidates(d->cand + (size_t)row * d->K, d->cval + (size_t)row * d->K, z, V, d->K, d->tid[row]);
    float lse = bs_op_softmax(p, z, V);
    d->ce_row[row] = bs_op_ce(j->do_grad ? dz : NULL, p, lse, z, d->tid[row], V, j->ce_s * w);
    if (!j->need_t) return;
    bs_op_softmax(pt, pt, V);   // the target's logits -> probabilities, in place
    float l1 = bs_op_l1(j->do_grad && j->l1_on ? dz : NULL, p, pt, V, j->l1_s * w);
    d->l1_row[row] = l1;
    float a = 1.0f - 0.5f * l1;
    d->acc[row] = a < 0 ? 0 : a > 1 ? 1 : a;
}

// Distillation labels: each row's label becomes the target's argmax at the position before it (tpos), and
// the Markov head's previous token follows (row 0 of a block keeps the anchor).
static void target_labels(drafter *d, int np) {
    int H = d->H, V = d->V, P = d->P;
    for (int r0 = 0; r0 < np; r0 += LOGIT_ROWS) {
        int rows = np - r0 < LOGIT_ROWS ? np - r0 : LOGIT_ROWS;
        for (int i = 0; i < rows; i++) memcpy(d->tT + (size_t)i * H, d->T + (size_t)d->tpos[r0 + i] * H, sizeof(float) * H);
        bs_op_linear_fwd(d->zt, d->tT, d->lm_head, NULL, rows, H, V, 0);
        for (int i = 0; i < rows; i++) {
            const float *z = d->zt + (size_t)i * V;
            int best = 0;
            for (int v = 1; v < V; v++) if (z[v] > z[best]) best = v;   // first maximum, as the engine's greedy pick
            d->tid[r0 + i] = best;
        }
    }
    for (int row = 0; row < np; row++) if (row % P) d->prev[row] = d->tid[row - 1];
}

// DFlash 2's selector term over the np prediction rows (candidates from row_task): z = hidden_projection(hp),
// each supervised row's K-way CE with the previous token teacher forced (the anchor, then the labels: what the
// walk's prev is when every earlier draft was accepted). Returns sum(w * CE); with do_grad adds s * w * dCE
// into the selector's tensors (s: the step's scale x alpha / (sum w + 1e-6)). hp and the unary logits are held
// fixed: the selector re-ranks the backbone's candidates without pulling the backbone toward its own term.
static double selector(drafter *d, const float *hp, int np, int do_grad, float s) {
    int K = d->K, R = d->R, H = d->H;
    bs_op_linear_fwd(d->zsel, hp, d->sel_w->w, NULL, np, H, R, 0);
    if (do_grad) memset(d->dzsel, 0, sizeof(float) * (size_t)np * R);
    double sum = 0;
    for (int i = 0; i < np; i++) {
        if (d->w[i] == 0) continue;
        float *A = d->sel_a->w + (size_t)d->prev[i] * R;
        float ce = bs_op_selector_ce(do_grad ? d->dzsel + (size_t)i * R : NULL, do_grad ? d->sel_a->g + (size_t)d->prev[i] * R : NULL,
                                     do_grad ? d->sel_b->g : NULL, d->zsel + (size_t)i * R, A, d->sel_b->w, d->cand + (size_t)i * K,
                                     d->cval + (size_t)i * K, K, R, d->gold[i], s * d->w[i], d->sel_s);
        sum += (double)d->w[i] * ce;
    }
    if (do_grad) bs_op_linear_bwd(NULL, d->sel_w->g, NULL, d->dzsel, hp, d->sel_w->w, np, H, R);
    return sum;
}

int bs_train_drafter_step(bs_train_task *t, const bs_train_seq *seq, const int32_t *anchors, const int32_t *keep, int A,
                          int do_grad, float scale, bs_loss_terms *terms, const bs_drafter_inspect *ins, bs_err *err) {
    drafter *d = impl(t);
    memset(terms, 0, sizeof *terms);
    int S = seq->n, B = d->B, P = d->P, H = d->H, V = d->V, r = d->r, L = d->cfg.base.n_layers, mH = d->m * H;
    int nq = A * B, np = A * P;
    if (S < 2) return bs_fail(err, "drafter training: a sequence needs at least 2 tokens (got %d)", S);
    if (A < 1) return bs_fail(err, "drafter training: no anchors");
    for (int b = 0; b < A; b++)
        if (anchors[b] < 0 || anchors[b] >= S)
            return bs_fail(err, "drafter training: anchor %d (block %d) is outside the sequence [0, %d)", anchors[b], b, S);
    if (ensure_ws(d, S, A, err)) return -1;
    memcpy(d->anchors, anchors, sizeof(int32_t) * A);
    for (int b = 0; b < A; b++) d->keep[b] = keep[b] != 0;
    const float *lm = d->lm_head;
    int has_conf = d->conf_in > 0;
    int l1_on = d->opt.l1_alpha > 0, need_t = l1_on || has_conf || d->opt.target_labels;

    // 1. the frozen target on the sequence
    if (bs_train_target_forward(d->target, seq->ids, S, d->taps, d->m, d->F, need_t ? d->T : NULL, NULL, err))
        return bs_wrap(err, "drafter training: target forward");

    // 2. packed blocks: ids, positions, mask; keys are [context 0..S-1 ; block rows]
    for (int b = 0; b < A; b++)
        for (int j = 0; j < B; j++) {
            int q = b * B + j;
            d->blk_ids[q] = j == 0 && d->keep[b] ? seq->ids[d->anchors[b]] : d->cfg.mask_token_id;
            d->qpos[q] = d->anchors[b] + j;
        }
    for (int i = 0; i < S; i++) d->kpos[i] = i;
    memcpy(d->kpos + S, d->qpos, sizeof(int32_t) * nq);
    bs_mask_dspark(d->kr, d->anchors, d->keep, A, B, S);

    // 3. context and backbone
    bs_op_linear_fwd(d->c_pre, d->F, d->fc->w, NULL, S, mH, H, 0);
    bs_op_rmsnorm_fwd(d->c, d->rstd_c, d->c_pre, d->hidden_norm->w, S, H, d->cfg.base.rms_eps);
    bs_op_embed_fwd(d->x0, d->embed, d->blk_ids, nq, H);
    const float *x = d->x0;
    for (int l = 0; l < L; l++) {
        bs_layer_fwd(&d->shape, &d->lw[l], &d->act[l], x, nq, d->c, S, d->qpos, d->kpos, d->kr);
        x = d->act[l].out;
    }
    bs_op_rmsnorm_fwd(d->h, d->rstd_h, x, d->norm->w, nq, H, d->cfg.base.rms_eps);

    // 4. prediction rows, labels, eval mask, weights, heads
    const float *hp = d->h;
    if (d->zl) {
        for (int b = 0; b < A; b++) memcpy(d->hp + (size_t)b * P * H, d->h + ((size_t)b * B + 1) * H, sizeof(float) * P * H);
        hp = d->hp;
    }
    double den = 0;
    for (int b = 0; b < A; b++) {
        int a = d->anchors[b], ok = d->keep[b];
        for (int k = 0; k < P; k++) {
            int row = b * P + k, li = a + 1 + k;
            int safe = d->keep[b] ? (li < S ? li : S - 1) : 0;   // DeepSpec's clamped label index (dummy blocks: 0)
            d->tid[row] = seq->ids[safe];
            d->tpos[row] = safe > 0 ? safe - 1 : 0;
            ok = ok && li < S && (!seq->loss_mask || seq->loss_mask[safe]);   // cumulative: cut at the first invalid label
            d->evm[row] = ok;
            d->w[row] = ok ? (d->opt.gamma > 0 ? expf(-(float)k / d->opt.gamma) : 1.0f) : 0.0f;
            d->prev[row] = k == 0 ? seq->ids[a] : d->tid[row - 1];
            den += d->w[row];
        }
    }
    if (d->opt.target_labels) target_labels(d, np);
    if (r > 0) {
        d->mop.n_rows = np;
        bs_op_embed_fwd(d->e, d->w1->w, d->prev, np, r);
        bs_op_markov_fwd(&d->mop, d->u, d->msave, hp, d->e);
    }
    if (has_conf) {
        int fin = d->conf_in;
        for (int i = 0; i < np; i++) {
            memcpy(d->f + (size_t)i * fin, hp + (size_t)i * H, sizeof(float) * H);
            if (fin > H) memcpy(d->f + (size_t)i * fin + H, d->e + (size_t)i * r, sizeof(float) * r);
        }
        bs_op_linear_fwd(d->conf, d->f, d->cw->w, d->cb->w, np, fin, 1, 0);
    }

    // 5. logits chunk by chunk
    float inv = (float)(1.0 / (den + 1e-6));
    rows_job job = { d, 0, need_t, l1_on, do_grad, scale * d->opt.ce_alpha * inv, scale * d->opt.l1_alpha * inv };
    if (do_grad) {
        memset(d->dhp, 0, sizeof(float) * (size_t)np * H);
        if (r > 0) memset(d->du, 0, sizeof(float) * (size_t)np * r);
    }
    for (int r0 = 0; r0 < np; r0 += LOGIT_ROWS) {
        int rows = np - r0 < LOGIT_ROWS ? np - r0 : LOGIT_ROWS;
        bs_op_linear_fwd(d->z, hp + (size_t)r0 * H, lm, NULL, rows, H, V, 0);
        if (r > 0) bs_op_linear_fwd(d->z, d->u + (size_t)r0 * r, d->w2->w, NULL, rows, r, V, 1);
        if (ins && ins->draft_logits) memcpy(ins->draft_logits + (size_t)r0 * V, d->z, sizeof(float) * rows * V);
        if (need_t) {
            for (int i = 0; i < rows; i++) memcpy(d->tT + (size_t)i * H, d->T + (size_t)d->tpos[r0 + i] * H, sizeof(float) * H);
            bs_op_linear_fwd(d->zt, d->tT, lm, NULL, rows, H, V, 0);
        }
        job.r0 = r0;
        bs_parallel_for(rows, row_task, &job);
        if (do_grad) {
            bs_op_linear_bwd(d->dhp + (size_t)r0 * H, NULL, NULL, d->dz, hp + (size_t)r0 * H, lm, rows, H, V);   // LM head frozen
            if (r > 0) bs_op_linear_bwd(d->du + (size_t)r0 * r, d->w2->g, NULL, d->dz, d->u + (size_t)r0 * r, d->w2->w, rows, r, V);
        }
    }

    // terms (DeepSpec's normalisation) and the confidence gradient
    double ce = 0, l1 = 0, bce = 0, n_tok = 0, n_blk = 0, tau = 0;
    float conf_s = scale * d->opt.conf_alpha * inv;
    if (d->hold_conf == 1) { memcpy(d->acc_held, d->acc, sizeof(float) * np); d->hold_conf = 2; }
    const float *conf_t = d->hold_conf == 2 ? d->acc_held : d->acc;   // the BCE targets (detached either way)
    for (int i = 0; i < np; i++) {
        ce += (double)d->w[i] * d->ce_row[i];
        l1 += (double)d->w[i] * d->l1_row[i];
        n_tok += d->evm[i];
        d->bce_row[i] = 0;
        if (has_conf) {
            if (do_grad) d->dconf[i] = 0;
            if (d->w[i] > 0) d->bce_row[i] = bs_op_bce_logits(do_grad ? &d->dconf[i] : NULL, d->conf[i], conf_t[i], conf_s * d->w[i]);
            bce += (double)d->w[i] * d->bce_row[i];
        }
    }
    for (int b = 0; b < A; b++) {   // tau estimate over kept blocks with a supervised row
        if (!d->keep[b] || !d->evm[b * P]) continue;
        double prod = 1, s = 1;
        for (int k = 0; k < P; k++) { prod *= d->evm[b * P + k] ? d->acc[b * P + k] : 0; s += prod; }
        n_blk++;
        tau += s;
    }
    double sel = d->d2 ? selector(d, hp, np, do_grad, scale * d->opt.conf_alpha * inv) : 0;
    terms->ce = ce / (den + 1e-6);
    terms->l1 = l1_on && den > 0 ? l1 / (den + 1e-6) : 0;
    terms->conf = has_conf ? bce / (den + 1e-6) : d->d2 ? sel / (den + 1e-6) : 0;
    terms->loss = d->opt.ce_alpha * terms->ce + d->opt.l1_alpha * terms->l1 + d->opt.conf_alpha * terms->conf;
    terms->n_tokens = n_tok;
    terms->n_blocks = n_blk;
    terms->tau_est = need_t && n_blk > 0 ? tau / n_blk : 0;
    if (ins) {
        if (ins->conf_logits && has_conf) memcpy(ins->conf_logits, d->conf, sizeof(float) * np);
        if (ins->eval_mask) memcpy(ins->eval_mask, d->evm, sizeof(int32_t) * np);
        if (ins->target_ids) memcpy(ins->target_ids, d->tid, sizeof(int32_t) * np);
    }
    if (!do_grad) return 0;

    // 6. backward
    if (r > 0) memset(d->de, 0, sizeof(float) * (size_t)np * r);
    if (has_conf) {
        int fin = d->conf_in;
        memset(d->df, 0, sizeof(float) * (size_t)np * fin);
        bs_op_linear_bwd(d->df, d->cw->g, d->cb->g, d->dconf, d->f, d->cw->w, np, fin, 1);
        for (int i = 0; i < np; i++) {
            for (int k = 0; k < H; k++) d->dhp[(size_t)i * H + k] += d->df[(size_t)i * fin + k];
            if (fin > H) for (int k = 0; k < r; k++) d->de[(size_t)i * r + k] += d->df[(size_t)i * fin + H + k];
        }
    }
    if (r > 0) {
        bs_op_markov_bwd(&d->mop, d->dhp, d->de, d->mw ? d->mw->g : NULL, d->mb ? d->mb->g : NULL, d->mscratch, d->du, d->msave, hp, d->e);
        bs_op_embed_bwd(d->w1->g, d->de, d->prev, np, r);
    }
    if (d->zl) {
        memset(d->dh, 0, sizeof(float) * (size_t)nq * H);
        for (int b = 0; b < A; b++) memcpy(d->dh + ((size_t)b * B + 1) * H, d->dhp + (size_t)b * P * H, sizeof(float) * P * H);
    } else memcpy(d->dh, d->dhp, sizeof(float) * (size_t)nq * H);
    memset(d->dx, 0, sizeof(float) * (size_t)nq * H);
    bs_op_rmsnorm_bwd(d->dx, d->norm->g, d->dh, d->act[L - 1].out, d->norm->w, d->rstd_h, nq, H);
    memset(d->dc, 0, sizeof(float) * (size_t)S * H);
    for (int l = L - 1; l >= 0; l--)
        bs_layer_bwd(&d->shape, &d->lw[l], &d->act[l], &d->gw, d->dx, d->dc, d->c, nq, S, d->qpos, d->kpos, d->kr);
    // the block's embedding is frozen: dx stops here
    memset(d->dc_pre, 0, sizeof(float) * (size_t)S * H);
    bs_op_rmsnorm_bwd(d->dc_pre, d->hidden_norm->g, d->dc, d->c_pre, d->hidden_norm->w, d->rstd_c, S, H);
    bs_op_linear_bwd(NULL, d->fc->g, NULL, d->dc_pre, d->F, d->fc->w, S, mH, H);
    return 0;
}

void bs_train_drafter_hold_conf_targets(bs_train_task *t, int hold) { impl(t)->hold_conf = hold ? 1 : 0; }

static int drafter_run(bs_train_task *t, const bs_train_seq *seq, int do_grad, float scale, bs_rng *rng, bs_loss_terms *terms, bs_err *err) {
    drafter *d = impl(t);
    int A = d->opt.num_anchors;
    int32_t *anchors = malloc(sizeof(int32_t) * A), *keep = malloc(sizeof(int32_t) * A);
    int rc = -1;
    if (!anchors || !keep) { bs_fail(err, "out of memory"); goto out; }
    if (!rng) { bs_fail(err, "drafter training: anchors are drawn from an RNG; none given"); goto out; }
    if (bs_drafter_sample_anchors(seq, A, rng, anchors, keep) < 0) { bs_fail(err, "out of memory"); goto out; }
    rc = bs_train_drafter_step(t, seq, anchors, keep, A, do_grad, scale, terms, NULL, err);
out:
    free(anchors); free(keep);
    return rc;
}
static int drafter_loss_grad(bs_train_task *t, const bs_train_seq *seq, float scale, bs_rng *rng, bs_loss_terms *terms, bs_err *err) {
    return drafter_run(t, seq, 1, scale, rng, terms, err);
}
static int drafter_loss_eval(bs_train_task *t, const bs_train_seq *seq, bs_rng *rng, bs_loss_terms *terms, bs_err *err) {
    return drafter_run(t, seq, 0, 0, rng, terms, err);
}

// ---- export ----------------------------------------------------------------------------------------------------

static cJSON *ids_json(const bs_drafter_config *c) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < c->n_taps; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(c->target_layer_ids[i]));
    return a;
}

// config.json as the engine's drafter loader (and the reference code) reads it: the backbone's Qwen3 fields
// plus DeepSpec's flat fields or z-lab's block_size + dflash_config.
static cJSON *drafter_config_json(const drafter *d) {
    const bs_drafter_config *c = &d->cfg;
    cJSON *root = bs_qwen3_config_to_json(&c->base);
    if (!root) return NULL;
    cJSON *arch = cJSON_CreateArray();
    cJSON_AddItemToArray(arch, cJSON_CreateString(c->arch_name));
    cJSON_ReplaceItemInObject(root, "architectures", arch);
    cJSON_ReplaceItemInObject(root, "tie_word_embeddings", cJSON_CreateBool(0));
    cJSON_AddNumberToObject(root, "block_size", c->block_size);
    cJSON_AddNumberToObject(root, "num_target_layers", c->num_target_layers);
    cJSON *lt = cJSON_AddArrayToObject(root, "layer_types");
    for (int i = 0; i < c->base.n_layers; i++) cJSON_AddItemToArray(lt, cJSON_CreateString("full_attention"));
    if (d->zl) {
        cJSON *dc = cJSON_AddObjectToObject(root, "dflash_config");
        cJSON_AddNumberToObject(dc, "mask_token_id", c->mask_token_id);
        cJSON_AddItemToObject(dc, "target_layer_ids", ids_json(c));
        if (c->dflash2) {   // docs/dflash2.md "Config": full, non-causal layers; no multiplier, soft-cap or embedding scale
            cJSON_AddNumberToObject(dc, "block_size", c->block_size);
            cJSON_AddNumberToObject(dc, "conv_kernel_size", c->conv_taps);
            cJSON_AddNumberToObject(dc, "conv_group_size", c->conv_group);
            cJSON_AddNumberToObject(dc, "selector_rank", c->sel_rank);
            cJSON_AddNumberToObject(dc, "selector_top_k", c->sel_top_k);
            cJSON_AddBoolToObject(root, "is_causal", 0);
        }
        return root;
    }
    static const char *types[] = { "", "vanilla", "gated", "rnn" };
    cJSON_AddNumberToObject(root, "mask_token_id", c->mask_token_id);
    cJSON_AddItemToObject(root, "target_layer_ids", ids_json(c));
    cJSON_AddNumberToObject(root, "num_anchors", d->opt.num_anchors);
    cJSON_AddNumberToObject(root, "markov_rank", c->markov_rank);
    if (c->markov_rank > 0) cJSON_AddStringToObject(root, "markov_head_type", types[c->markov_type]);
    cJSON_AddBoolToObject(root, "enable_confidence_head", c->conf_head);
    if (c->conf_head) cJSON_AddBoolToObject(root, "confidence_head_with_markov", c->conf_with_markov);
    return root;
}

static int drafter_export(bs_train_task *t, const char *dir, bs_err *err) {
    cJSON *root = drafter_config_json(impl(t));
    if (!root) return bs_fail(err, "out of memory");
    int rc = bs_train_write_config(root, dir, err);
    cJSON_Delete(root);
    return rc ? rc : bs_train_write_bf16(&t->params, dir, err);
}

// Forward FLOPs of one sequence: the target's forward, the context projection, the backbone over the packed
// blocks (each query assumed to see half the context plus its block), the LM head on draft and target rows.
static double drafter_flops(const bs_train_task *t, int n) {
    const drafter *d = impl(t);
    int A = d->opt.num_anchors, nq = A * d->B, np = A * d->P;
    double f = d->target->flops_forward(d->target, n);
    f += 2.0 * n * d->m * d->H * d->H;
    for (int l = 0; l < d->cfg.base.n_layers; l++) f += bs_layer_flops(&d->shape, nq, n, (double)nq * (0.5 * n + d->B));
    f += 2.0 * np * d->H * d->V * (d->opt.l1_alpha > 0 || d->conf_in ? 2 : 1);
    return f;
}

static void drafter_free(bs_train_task *t) {
    if (!t) return;
    drafter *d = impl(t);
    bs_err e;
    workspace(d, 0, 0, 0, &e);
    free(d->lw);
    bs_param_set_free(&t->params);
    free(d);
}

// ---- construction ---------------------------------------------------------------------------------------------

int bs_train_drafter_config(bs_drafter_config *c, const bs_qwen3_config *target, const char *kind, int n_layers, int block_size,
                            int mask_token_id, int markov_rank, bs_markov_type type, bs_err *err) {
    memset(c, 0, sizeof *c);
    int d2 = !strcmp(kind, "dflash2"), zl = d2 || !strcmp(kind, "zlab-dflash"), dspark = !strcmp(kind, "dspark");
    if (!zl && !dspark && strcmp(kind, "dflash")) return bs_fail(err, "drafter kind \"%s\": expected dspark, dflash, zlab-dflash or dflash2", kind);
    if (n_layers < 1 || n_layers > BS_MAX_DRAFT_LAYERS || n_layers > BS_MAX_TAPS) return bs_fail(err, "drafter layers %d out of range [1, %d]", n_layers, BS_MAX_TAPS);
    if (block_size < 2 || block_size > BS_MAX_DRAFT) return bs_fail(err, "block size %d out of range [2, %d]", block_size, BS_MAX_DRAFT);
    if (mask_token_id < 0 || mask_token_id >= target->vocab_size) return bs_fail(err, "mask token %d outside the vocabulary [0, %d)", mask_token_id, target->vocab_size);
    if (dspark && markov_rank < 1) return bs_fail(err, "a DSpark drafter needs a Markov rank >= 1");
    c->base = *target;   // sizes, eps, RoPE (theta and llama3 scaling: the drafter rotates as its target does)
    c->base.arch = BS_ARCH_QWEN3;   // but its layers are Qwen3's with q/k norm, whatever the target (z-lab's Llama drafters too)
    c->base.n_layers = n_layers;
    c->base.tie_embeddings = 0;
    c->arch = zl ? BS_DRAFTER_ZLAB : BS_DRAFTER_DEEPSPEC;
    c->arch_name = d2 ? "DFlash2DraftModel" : zl ? "DFlashDraftModel" : "Qwen3DSparkModel";
    c->block_size = block_size;
    c->mask_token_id = mask_token_id;
    c->num_target_layers = target->n_layers;
    bs_build_target_layer_ids(target->n_layers, n_layers, c->target_layer_ids);
    c->n_taps = n_layers;
    for (int i = 0; i < c->n_taps; i++)   // tiny targets: keep the spread inside [0, Lt-1]
        if (c->target_layer_ids[i] >= target->n_layers) c->target_layer_ids[i] = target->n_layers - 1;
    if (d2) {   // the published checkpoints' shape where it fits: 2 taps, groups of 16 channels, 16 candidates
        c->dflash2 = 1;
        c->conv_taps = 2;
        c->conv_group = 16;
        while (target->hidden_size % c->conv_group) c->conv_group--;
        c->sel_rank = markov_rank > 0 ? markov_rank : 64;
        c->sel_top_k = target->vocab_size < 16 ? target->vocab_size : 16;
        c->out_mult = 1; c->embed_scale = 1;
    }
    if (dspark) {
        c->markov_rank = markov_rank;
        c->markov_type = type ? type : BS_MARKOV_VANILLA;
        c->conf_head = 1;
        c->conf_with_markov = 1;
    }
    return 0;
}

static int create(drafter **out, bs_train_task *target, const bs_drafter_config *c, const bs_drafter_loss_opts *o, bs_err *err) {
    *out = NULL;
    const bs_qwen3_config *tc = bs_train_target_config(target);
    const bs_qwen3_config *b = &c->base;
    if (b->hidden_size != tc->hidden_size || b->vocab_size != tc->vocab_size)
        return bs_fail(err, "drafter: hidden size %d / vocabulary %d do not match the target's %d / %d (a drafter of another target)",
                       b->hidden_size, b->vocab_size, tc->hidden_size, tc->vocab_size);
    for (int i = 0; i < c->n_taps; i++)
        if (c->target_layer_ids[i] < -1 || c->target_layer_ids[i] >= tc->n_layers)
            return bs_fail(err, "drafter: target_layer_ids[%d] = %d but the target has %d layers", i, c->target_layer_ids[i], tc->n_layers);
    if (b->sliding_window) return bs_fail(err, "drafter: sliding-window layers are not supported in training");
    if (c->dflash2) {   // what the trainer's DFlash 2 computes: full non-causal layers, plain unary logits and embeddings
        for (int l = 0; l < b->n_layers; l++)
            if (c->layer_window[l] || c->layer_causal[l]) return bs_fail(err, "drafter: DFlash 2 with sliding or causal layers is not supported in training");
        if (c->out_mult != 1 || c->softcap != 0 || c->embed_scale != 1)
            return bs_fail(err, "drafter: DFlash 2 with output_multiplier, final_logit_softcapping or input_embedding_scale is not supported in training");
        if (c->conv_taps > c->block_size || c->sel_top_k > b->vocab_size || c->sel_top_k > 1024 || c->conv_group < 1 || b->hidden_size % c->conv_group)
            return bs_fail(err, "drafter: DFlash 2 conv_kernel_size %d / selector_top_k %d / conv_group_size %d do not fit block %d, vocabulary %d, hidden %d",
                           c->conv_taps, c->sel_top_k, c->conv_group, c->block_size, b->vocab_size, b->hidden_size);
    }
    drafter *d = calloc(1, sizeof *d);
    if (!d) return bs_fail(err, "out of memory");
    d->cfg = *c;
    if (o) d->opt = *o; else bs_drafter_loss_defaults(&d->opt, c);
    if (d->opt.num_anchors < 1) { free(d); return bs_fail(err, "drafter: num_anchors must be >= 1"); }
    d->target = target;
    d->zl = c->arch == BS_DRAFTER_ZLAB;
    d->B = c->block_size; d->P = d->zl ? d->B - 1 : d->B;
    d->H = b->hidden_size; d->V = b->vocab_size; d->r = c->markov_rank; d->m = c->n_taps;
    for (int i = 0; i < d->m; i++) d->taps[i] = c->target_layer_ids[i] + 1;   // -1 (DeepSpec: embeddings) -> 0
    d->shape = bs_layer_shape_of(b);
    d->shape.qk_norm = 1;   // drafter layers are Qwen3's (q/k norm) whatever the target, as z-lab's and DeepSpec's
    if (c->dflash2) {
        d->d2 = 1; d->K = c->sel_top_k; d->R = c->sel_rank;
        d->shape.conv_taps = c->conv_taps; d->shape.conv_group = c->conv_group; d->shape.conv_block = d->B;   // packed blocks of B rows
    }
    bs_train_task *t = &d->task;
    t->kind = bs_drafter_kind(c); t->impl = d;
    t->loss_grad = drafter_loss_grad; t->loss_eval = drafter_loss_eval; t->export_model = drafter_export;
    t->flops_forward = drafter_flops; t->free = drafter_free;
    bs_param_set *ps = &t->params;
    int64_t H = d->H, V = d->V, r = d->r;
    if (bs_param_add(ps, "fc.weight", 2, (int64_t[]){ H, (int64_t)d->m * H }, 1, 1, err) < 0 ||
        bs_param_add(ps, "hidden_norm.weight", 1, (int64_t[]){ H }, 1, 0, err) < 0) goto fail;
    for (int l = 0; l < b->n_layers; l++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "layers.%d.", l);
        if (bs_layer_params_add(ps, prefix, &d->shape, 1, err)) goto fail;
    }
    if (bs_param_add(ps, "norm.weight", 1, (int64_t[]){ H }, 1, 0, err) < 0) goto fail;
    for (int l = 0; d->d2 && l < b->n_layers; l++) {   // DFlash 2: every layer's convolutions (4 a layer), then the selector's 3
        char prefix[64];
        snprintf(prefix, sizeof prefix, "layers.%d.", l);
        if (bs_layer_conv_params_add(ps, prefix, &d->shape, 1, err)) goto fail;
    }
    if (d->d2 && (bs_param_add(ps, "candidate_selector.hidden_projection.weight", 2, (int64_t[]){ d->R, H }, 1, 1, err) < 0 ||
                  bs_param_add(ps, "candidate_selector.predecessor_codebook", 2, (int64_t[]){ V, d->R }, 1, 1, err) < 0 ||
                  bs_param_add(ps, "candidate_selector.successor_codebook", 2, (int64_t[]){ V, d->R }, 1, 1, err) < 0)) goto fail;
    if (!d->zl && (bs_param_add(ps, "embed_tokens.weight", 2, (int64_t[]){ V, H }, 0, 0, err) < 0 ||
                   bs_param_add(ps, "lm_head.weight", 2, (int64_t[]){ V, H }, 0, 0, err) < 0)) goto fail;
    if (r > 0) {
        if (bs_param_add(ps, "markov_head.markov_w1.weight", 2, (int64_t[]){ V, r }, 1, 1, err) < 0 ||
            bs_param_add(ps, "markov_head.markov_w2.weight", 2, (int64_t[]){ V, r }, 1, 1, err) < 0) goto fail;
        if (c->markov_type == BS_MARKOV_GATED &&
            (bs_param_add(ps, "markov_head.gate_proj.weight", 2, (int64_t[]){ r, H + r }, 1, 1, err) < 0 ||
             bs_param_add(ps, "markov_head.gate_proj.bias", 1, (int64_t[]){ r }, 1, 0, err) < 0)) goto fail;
        if (c->markov_type == BS_MARKOV_RNN &&
            (bs_param_add(ps, "markov_head.joint_proj.weight", 2, (int64_t[]){ 3 * r, 2 * r + H }, 1, 1, err) < 0 ||
             bs_param_add(ps, "markov_head.joint_proj.bias", 1, (int64_t[]){ 3 * r }, 1, 0, err) < 0)) goto fail;
    }
    if (c->conf_head) {
        d->conf_in = (int)H + (c->conf_with_markov ? (int)r : 0);
        if (bs_param_add(ps, "confidence_head.proj.weight", 2, (int64_t[]){ 1, d->conf_in }, 1, 1, err) < 0 ||
            bs_param_add(ps, "confidence_head.proj.bias", 1, (int64_t[]){ 1 }, 1, 0, err) < 0) goto fail;
    }
    // bind
    if (!(d->lw = bs_calloc(b->n_layers, sizeof *d->lw, err))) goto fail;
    for (int l = 0; l < b->n_layers; l++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "layers.%d.", l);
        bs_layer_w_bind(&d->lw[l], ps, prefix);
    }
    d->fc = bs_param_find(ps, "fc.weight"); d->hidden_norm = bs_param_find(ps, "hidden_norm.weight"); d->norm = bs_param_find(ps, "norm.weight");
    d->w1 = bs_param_find(ps, "markov_head.markov_w1.weight"); d->w2 = bs_param_find(ps, "markov_head.markov_w2.weight");
    d->mw = bs_param_find(ps, c->markov_type == BS_MARKOV_RNN ? "markov_head.joint_proj.weight" : "markov_head.gate_proj.weight");
    d->mb = bs_param_find(ps, c->markov_type == BS_MARKOV_RNN ? "markov_head.joint_proj.bias" : "markov_head.gate_proj.bias");
    d->cw = bs_param_find(ps, "confidence_head.proj.weight"); d->cb = bs_param_find(ps, "confidence_head.proj.bias");
    d->sel_w = bs_param_find(ps, "candidate_selector.hidden_projection.weight");
    d->sel_a = bs_param_find(ps, "candidate_selector.predecessor_codebook");
    d->sel_b = bs_param_find(ps, "candidate_selector.successor_codebook");
    if (d->zl) { d->embed = bs_train_target_embed(target); d->lm_head = bs_train_target_lm_head(target); }
    else { d->embed = bs_param_find(ps, "embed_tokens.weight")->w; d->lm_head = bs_param_find(ps, "lm_head.weight")->w; }
    if (r > 0) {
        static const bs_op_markov_type ot[] = { 0, BS_OP_MARKOV_VANILLA, BS_OP_MARKOV_GATED, BS_OP_MARKOV_RNN };
        d->mop = (bs_op_markov){ ot[c->markov_type], 0, d->B, d->H, d->r, d->mw ? d->mw->w : NULL, d->mb ? d->mb->w : NULL };
        // the head sees prediction rows in blocks of P
        d->mop.B = d->P;
    }
    *out = d;
    return 0;
fail:
    drafter_free(t);
    return -1;
}

// The DeepSpec copies of the target's embedding and head.
static void copy_target_tables(drafter *d) {
    if (d->zl) return;
    const bs_qwen3_config *tc = bs_train_target_config(d->target);
    size_t n = (size_t)tc->vocab_size * tc->hidden_size;
    memcpy(bs_param_find(&d->task.params, "embed_tokens.weight")->w, bs_train_target_embed(d->target), sizeof(float) * n);
    memcpy(bs_param_find(&d->task.params, "lm_head.weight")->w, bs_train_target_lm_head(d->target), sizeof(float) * n);
}

// DFlash 2's own tensors (the convolutions' and the selector's).
static int is_dflash2_tensor(const char *name) { return strstr(name, "_conv.") || !strncmp(name, "candidate_selector.", 19); }

// A fresh DFlash 2 is its DFlash (docs/dflash2.md "Fresh DFlash 2 = DFlash"): identity base kernels (tap 0 = 1),
// zero kernel projections and a zero hidden projection (z = 0: every edge 0). The codebooks are drawn N(0, 1):
// with z = 0 their gradient is 0 and the projection's is sum_k ds_k (A[prev] * B[c_k]) h, so zero codebooks
// would keep the whole selector at 0 for ever; at unit scale an edge is ~|z| and the projection (zero at
// start, Adam steps of ~lr) sets the selector's strength. Drawn from a stream of their own, so the tensors a
// DFlash drafter also has get exactly the values they get in one with the same seed.
static void dflash2_init(drafter *d, uint64_t seed) {
    bs_rng r;
    bs_rng_seed(&r, seed ^ 0x9e3779b97f4a7c15ull);
    for (int i = 0; i < d->task.params.n; i++) {
        bs_param *p = &d->task.params.p[i];
        if (!is_dflash2_tensor(p->name)) continue;
        memset(p->w, 0, sizeof(float) * p->n);
        if (strstr(p->name, ".base_kernel"))   // [2 stages][taps][H]: tap 0 of each stage = 1
            for (int st = 0; st < 2; st++) for (int64_t c = 0; c < p->shape[2]; c++) p->w[(size_t)st * p->shape[1] * p->shape[2] + c] = 1.0f;
        else if (strstr(p->name, "_codebook")) bs_train_fill_normal(p->w, p->n, 1.0f, &r);
    }
}

int bs_train_drafter_new(bs_train_task **out, bs_train_task *target, const bs_drafter_config *c, const bs_drafter_loss_opts *o,
                         uint64_t seed, bs_err *err) {
    drafter *d;
    if (create(&d, target, c, o, err)) return -1;
    bs_rng r;
    bs_rng_seed(&r, seed);
    for (int i = 0; i < d->task.params.n; i++) {
        bs_param *p = &d->task.params.p[i];
        if (is_dflash2_tensor(p->name)) continue;   // below, from their own stream
        int is_bias = strstr(p->name, ".bias") != NULL;
        if (is_bias) memset(p->w, 0, sizeof(float) * p->n);
        else if (p->n_dims == 1) for (int64_t k = 0; k < p->n; k++) p->w[k] = 1.0f;
        else bs_train_fill_normal(p->w, p->n, 0.02f, &r);
    }
    if (d->d2) dflash2_init(d, seed);
    copy_target_tables(d);
    *out = &d->task;
    return 0;
}

int bs_train_drafter_load(bs_train_task **out, bs_train_task *target, const char *dir, const bs_drafter_loss_opts *o, bs_err *err) {
    bs_drafter_config c;
    if (bs_drafter_config_load(&c, dir, err)) return -1;
    if (c.gemma) return bs_fail(err, "drafter %s: training a Gemma4DSparkModel (Gemma-4 layers) is not implemented (docs/gemma4.md)", dir);
    drafter *d;
    if (create(&d, target, &c, o, err)) return bs_wrap(err, "drafter %s", dir);
    bs_checkpoint *ck;
    if (bs_checkpoint_open(&ck, dir, err)) { drafter_free(&d->task); return -1; }
    copy_target_tables(d);
    for (int i = 0; i < d->task.params.n; i++) {
        bs_param *p = &d->task.params.p[i];
        char alt[300];
        snprintf(alt, sizeof alt, "model.%s", p->name);
        // DeepSpec's bundled embedding / head: the checkpoint's when it carries them, else the target's
        if (!p->trainable && !bs_checkpoint_find(ck, p->name) && !bs_checkpoint_find(ck, alt)) continue;
        const char *nm = p->name;
        char mlx[300];   // DFlash 2's codebooks as MLX renames them (a ".weight" suffix): read too, as the engine does
        snprintf(mlx, sizeof mlx, "%s.weight", p->name);
        if (strstr(p->name, "_codebook") && !bs_checkpoint_find(ck, nm) && bs_checkpoint_find(ck, mlx)) nm = mlx;
        if (bs_train_param_load(p, ck, nm, err)) {
            bs_checkpoint_close(ck);
            drafter_free(&d->task);
            return bs_wrap(err, "loading drafter %s", dir);
        }
    }
    bs_checkpoint_close(ck);
    *out = &d->task;
    return 0;
}
