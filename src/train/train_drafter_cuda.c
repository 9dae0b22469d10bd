// The host half of the GPU drafter trainer (train_cuda_drafter.h): a CPU drafter task (train_drafter.c) holds
// the parameter set, the initialisation and the export; the frozen target is loaded on the GPU with the
// target trainer (train_target_cuda.c; forward only) and on the host for the CPU task's tables; anchors,
// packed block ids and positions, labels, eval mask and weights are built here exactly as the CPU step builds
// them; the device half (src/train/cuda/drafter_step.cu, td_dev.h) runs the rest. Without BS_WITH_CUDA only
// the stubs at the end are compiled.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "train/train_cuda_drafter.h"

#ifdef BS_WITH_CUDA
#include "model/rope.h"
#include "train/train_cuda.h"
#include "train/train_target.h"
#include "train/cuda/td_dev.h"

typedef struct {
    bs_train_task *cpu_tgt, *cpu, *gpu_tgt;
    td_dev *d;
    bs_drafter_config cfg;
    bs_drafter_loss_opts opt;
    int B, P, zl, r, A, S, T, V, need_t, has_conf;
    int d2;                               // DFlash 2: the device's bce_row carries the selector's CE (the conf term)
    int64_t step;
    int32_t *ids, *blk_ids, *qpos, *anchor, *keep, *base, *tid, *tpos, *prev, *evm, *an, *kp;
    float *w, *rs, *ce_row, *l1_row, *acc, *bce_row;
} tdh;

static void t_free(bs_train_task *t);
static tdh *get(bs_train_task *t, bs_err *err) {
    if (!t || t->free != t_free) { bs_fail(err, "not a CUDA drafter training task"); return NULL; }
    return t->impl;
}

// Stages the batch (anchors / keep given, [n][A]), runs it, and fills the terms as the CPU step does.
static int run(bs_train_task *t, const bs_train_seq *seqs, int n, const int32_t *anchors, const int32_t *keep, int grad, float scale,
               bs_loss_terms *terms, bs_err *err) {
    tdh *u = t->impl;
    if (terms) memset(terms, 0, sizeof *terms);
    if (!seqs || n < 1 || n > u->S) return bs_fail(err, "drafter (cuda): batch of %d sequences (1..%d allowed)", n, u->S);
    if (!isfinite(scale)) return bs_fail(err, "drafter (cuda): loss scale is not finite");
    int Tc = 0, A = u->A, B = u->B, P = u->P;
    for (int s = 0; s < n; s++) {
        const bs_train_seq *q = &seqs[s];
        if (!q->ids || q->n < 2 || q->n > u->T)
            return bs_fail(err, "drafter (cuda): sequence %d has %d tokens (2..%d allowed)", s, q->n, u->T);
        for (int i = 0; i < q->n; i++)
            if (q->ids[i] < 0 || q->ids[i] >= u->V)
                return bs_fail(err, "drafter (cuda): sequence %d: token %d at %d outside the vocabulary (%d)", s, q->ids[i], i, u->V);
        for (int b = 0; b < A; b++)
            if (anchors[s * A + b] < 0 || anchors[s * A + b] >= q->n)
                return bs_fail(err, "drafter (cuda): anchor %d (sequence %d, block %d) is outside the sequence [0, %d)", anchors[s * A + b], s,
                               b, q->n);
        if (q->n > Tc) Tc = q->n;
    }
    double *den = calloc(n, sizeof *den);
    if (!den) return bs_fail(err, "out of memory");
    for (int s = 0; s < n; s++) {
        const bs_train_seq *q = &seqs[s];
        int S = q->n;
        for (int i = 0; i < Tc; i++) u->ids[(size_t)s * Tc + i] = i < S ? q->ids[i] : 0;
        for (int bi = 0; bi < A; bi++) {
            int b = s * A + bi, a = anchors[b], kb = keep[b] != 0;
            u->anchor[b] = a; u->keep[b] = kb; u->base[b] = s * Tc;
            for (int j = 0; j < B; j++) {
                u->blk_ids[(size_t)b * B + j] = j == 0 && kb ? q->ids[a] : u->cfg.mask_token_id;
                u->qpos[(size_t)b * B + j] = a + j;
            }
            int ok = kb;
            for (int k = 0; k < P; k++) {   // labels, eval mask, weights: train_drafter.c step 4
                size_t row = (size_t)b * P + k;
                int li = a + 1 + k, safe = kb ? (li < S ? li : S - 1) : 0;
                u->tid[row] = q->ids[safe];
                u->tpos[row] = s * Tc + (safe > 0 ? safe - 1 : 0);
                ok = ok && li < S && (!q->loss_mask || q->loss_mask[safe]);
                u->evm[row] = ok;
                u->w[row] = ok ? (u->opt.gamma > 0 ? expf(-(float)k / u->opt.gamma) : 1.0f) : 0.0f;
                u->prev[row] = k == 0 ? q->ids[a] : u->tid[row - 1];
                den[s] += u->w[row];
            }
        }
    }
    for (int s = 0; s < n; s++) {
        float inv = (float)(1.0 / (den[s] + 1e-6));
        for (size_t row = (size_t)s * A * P; row < (size_t)(s + 1) * A * P; row++) u->rs[row] = grad ? scale * inv * u->w[row] : 0.0f;
    }
    td_batch bt = { n, Tc, n * A, u->ids, u->blk_ids, u->qpos, u->anchor, u->keep, u->base, u->tid, u->tpos, u->prev, u->w, u->rs,
                    u->ce_row, u->l1_row, u->acc, u->bce_row };
    if (td_dev_step(u->d, &bt, grad, err)) { free(den); return -1; }
    // terms, per sequence exactly as bs_train_drafter_step, then the batch's means
    bs_loss_terms sum = { 0 };
    for (int s = 0; s < n; s++) {
        double ce = 0, l1 = 0, bce = 0, n_tok = 0, n_blk = 0, tau = 0;
        for (size_t row = (size_t)s * A * P; row < (size_t)(s + 1) * A * P; row++) {
            ce += (double)u->w[row] * u->ce_row[row];
            l1 += (double)u->w[row] * u->l1_row[row];
            if (u->has_conf || u->d2) bce += (double)u->w[row] * u->bce_row[row];
            n_tok += u->evm[row];
        }
        for (int bi = 0; bi < A; bi++) {
            int b = s * A + bi;
            if (!u->keep[b] || !u->evm[(size_t)b * P]) continue;
            double prod = 1, sacc = 1;
            for (int k = 0; k < P; k++) { prod *= u->evm[(size_t)b * P + k] ? u->acc[(size_t)b * P + k] : 0; sacc += prod; }
            n_blk++;
            tau += sacc;
        }
        double tce = ce / (den[s] + 1e-6);
        double tl1 = u->opt.l1_alpha > 0 && den[s] > 0 ? l1 / (den[s] + 1e-6) : 0;
        double tcf = u->has_conf || u->d2 ? bce / (den[s] + 1e-6) : 0;
        sum.ce += tce; sum.l1 += tl1; sum.conf += tcf;
        sum.loss += u->opt.ce_alpha * tce + u->opt.l1_alpha * tl1 + u->opt.conf_alpha * tcf;
        sum.n_tokens += n_tok; sum.n_blocks += n_blk;
        sum.tau_est += u->need_t && n_blk > 0 ? tau / n_blk : 0;
    }
    free(den);
    if (terms) {
        *terms = sum;
        terms->loss /= n; terms->ce /= n; terms->l1 /= n; terms->conf /= n; terms->tau_est /= n;
    }
    return 0;
}

static int draw_and_run(bs_train_task *t, const bs_train_seq *seqs, int n, int grad, float scale, bs_rng *rng, bs_loss_terms *terms,
                        bs_err *err) {
    tdh *u = t->impl;
    if (!rng) return bs_fail(err, "drafter training: anchors are drawn from an RNG; none given");
    if (!seqs || n < 1 || n > u->S) return bs_fail(err, "drafter (cuda): batch of %d sequences (1..%d allowed)", n, u->S);
    for (int s = 0; s < n; s++)
        if (bs_drafter_sample_anchors(&seqs[s], u->A, rng, u->an + (size_t)s * u->A, u->kp + (size_t)s * u->A) < 0)
            return bs_fail(err, "out of memory");
    return run(t, seqs, n, u->an, u->kp, grad, scale, terms, err);
}
static int t_loss_grad_batch(bs_train_task *t, const bs_train_seq *seqs, int n, float scale, bs_rng *rng, bs_loss_terms *terms,
                             bs_err *err) {
    return draw_and_run(t, seqs, n, 1, scale, rng, terms, err);
}
static int t_loss_grad(bs_train_task *t, const bs_train_seq *seq, float scale, bs_rng *rng, bs_loss_terms *terms, bs_err *err) {
    return draw_and_run(t, seq, 1, 1, scale, rng, terms, err);
}
static int t_loss_eval(bs_train_task *t, const bs_train_seq *seq, bs_rng *rng, bs_loss_terms *terms, bs_err *err) {
    return draw_and_run(t, seq, 1, 0, 0.0f, rng, terms, err);
}

static int t_opt_step(bs_train_task *t, const bs_adamw_settings *s, double lr, double *grad_norm, bs_err *err) {
    tdh *u = t->impl;
    if (!s || !(isfinite(lr) && lr >= 0) || !(s->beta1 >= 0 && s->beta1 < 1) || !(s->beta2 >= 0 && s->beta2 < 1) || !(s->eps > 0) ||
        !(s->weight_decay >= 0) || !isfinite(s->clip))
        return bs_fail(err, "AdamW settings out of range (lr >= 0, 0 <= betas < 1, eps > 0, weight decay >= 0)");
    double gn = 0;
    if (td_dev_adamw(u->d, (float)lr, s->beta1, s->beta2, s->eps, s->weight_decay, s->clip, u->step + 1, &gn, err)) return -1;
    u->step++;
    if (grad_norm) *grad_norm = gn;
    return 0;
}

static int t_sync(bs_train_task *t, float *const *m, float *const *v, int to_device, bs_err *err) {
    tdh *u = t->impl;
    for (int i = 0; i < t->params.n; i++) {
        bs_param *p = &t->params.p[i];
        if (td_dev_copy(u->d, TC_W, i, p->w, to_device, err)) return -1;
        if (!p->trainable) continue;
        if (m && m[i] && td_dev_copy(u->d, TC_M, i, m[i], to_device, err)) return -1;
        if (v && v[i] && td_dev_copy(u->d, TC_V, i, v[i], to_device, err)) return -1;
    }
    return 0;
}
static int t_sync_to_host(bs_train_task *t, float *const *m, float *const *v, bs_err *err) { return t_sync(t, m, v, 0, err); }
static int t_sync_from_host(bs_train_task *t, float *const *m, float *const *v, int64_t adam_steps, bs_err *err) {
    if (adam_steps >= 0) ((tdh *)t->impl)->step = adam_steps;
    return t_sync(t, m, v, 1, err);
}
static int t_export(bs_train_task *t, const char *dir, bs_err *err) {
    tdh *u = t->impl;
    if (t_sync(t, NULL, NULL, 0, err)) return -1;
    return u->cpu->export_model(u->cpu, dir, err);
}
static double t_flops(const bs_train_task *t, int n) {
    const tdh *u = t->impl;
    return u->cpu->flops_forward(u->cpu, n);
}

static void t_free(bs_train_task *t) {
    if (!t) return;
    tdh *u = t->impl;
    memset(&t->params, 0, sizeof t->params);   // the CPU task's set, freed with it
    if (u) {
        td_dev_free(u->d);
        if (u->gpu_tgt) u->gpu_tgt->free(u->gpu_tgt);
        if (u->cpu) u->cpu->free(u->cpu);
        if (u->cpu_tgt) u->cpu_tgt->free(u->cpu_tgt);
        void *bufs[] = { u->ids, u->blk_ids, u->qpos, u->anchor, u->keep, u->base, u->tid, u->tpos, u->prev, u->evm, u->an, u->kp,
                         u->w, u->rs, u->ce_row, u->l1_row, u->acc, u->bce_row };
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
        free(u);
    }
    free(t);
}

static int param_index(const bs_param_set *ps, const char *name) {
    for (int i = 0; i < ps->n; i++) if (!strcmp(ps->p[i].name, name)) return i;
    return -1;
}

int bs_train_drafter_cuda_new(bs_train_task **out, const char *target_dir, const bs_drafter_config *c, const char *init_dir,
                              const bs_drafter_loss_opts *o, uint64_t seed, int max_batch_seqs, int max_seq_len, bs_err *err) {
    *out = NULL;
    if (!target_dir) return bs_fail(err, "drafter (cuda): no target folder");
    if (!c == !init_dir) return bs_fail(err, "drafter (cuda): give exactly one of a drafter config and an init folder");
    if (max_batch_seqs < 1 || max_seq_len < 2 || (int64_t)max_batch_seqs * max_seq_len > (1LL << 28))
        return bs_fail(err, "drafter (cuda): batch %d x %d tokens (at least 1 x 2)", max_batch_seqs, max_seq_len);
    bs_train_task *t = calloc(1, sizeof *t);
    tdh *u = calloc(1, sizeof *u);
    if (!t || !u) { free(t); free(u); return bs_fail(err, "out of memory"); }
    t->impl = u; t->free = t_free;
    if (bs_train_target_load(&u->cpu_tgt, target_dir, 0, err)) { bs_wrap(err, "the frozen target %s", target_dir); goto fail; }
    if (init_dir ? bs_train_drafter_load(&u->cpu, u->cpu_tgt, init_dir, o, err) : bs_train_drafter_new(&u->cpu, u->cpu_tgt, c, o, seed, err))
        goto fail;
    u->cfg = *bs_train_drafter_config_of(u->cpu);
    if (o) u->opt = *o; else bs_drafter_loss_defaults(&u->opt, &u->cfg);
    const bs_drafter_config *cf = &u->cfg;
    if (cf->markov_rank > 0 && cf->markov_type != BS_MARKOV_VANILLA) {
        bs_fail(err, "drafter (cuda): the %s Markov head is not on the GPU yet (vanilla is; train gated / rnn heads on the cpu)",
                cf->markov_type == BS_MARKOV_GATED ? "gated" : "rnn");
        goto fail;
    }
    for (int l = 0; l < cf->base.n_layers; l++)
        if (cf->layer_window[l]) { bs_fail(err, "drafter (cuda): sliding-window drafter layers are not supported in training"); goto fail; }
    u->B = cf->block_size; u->zl = cf->arch == BS_DRAFTER_ZLAB; u->P = bs_train_drafter_rows(u->cpu); u->r = cf->markov_rank;
    u->A = u->opt.num_anchors; u->S = max_batch_seqs; u->T = max_seq_len; u->V = cf->base.vocab_size;
    u->has_conf = param_index(&u->cpu->params, "confidence_head.proj.weight") >= 0;
    u->d2 = cf->dflash2;
    u->need_t = u->opt.l1_alpha > 0 || u->has_conf || u->opt.target_labels;
    if (bs_train_target_cuda_new(&u->gpu_tgt, NULL, target_dir, 0, max_batch_seqs, max_seq_len, err)) {
        bs_wrap(err, "the frozen target %s on the GPU", target_dir);
        goto fail;
    }
    {
        const bs_qwen3_config *tc = bs_train_target_config(u->cpu_tgt);
        const bs_param_set *ps = &u->cpu->params;
        td_shape s;
        memset(&s, 0, sizeof s);
        s.V = cf->base.vocab_size; s.H = cf->base.hidden_size; s.L = cf->base.n_layers; s.nH = cf->base.n_heads; s.nKV = cf->base.n_kv_heads;
        s.hd = cf->base.head_dim; s.I = cf->base.intermediate_size; s.eps = cf->base.rms_eps;
        if (s.hd < 2 || s.hd > 4096 || s.hd % 2) { bs_fail(err, "drafter (cuda): head_dim %d", s.hd); goto fail; }
        float inv[2048];   // the drafter's RoPE table: its config's theta and scaling (the target's, for a drafter trained here)
        bs_rope_inv_freqs(cf->base.rope_theta, &cf->base.rope, s.hd, inv);
        s.inv_freq = inv;
        s.B = u->B; s.P = u->P; s.zl = u->zl; s.r = u->r; s.m = cf->n_taps;
        if (s.m < 1 || s.m > TD_MAX_TAPS) { bs_fail(err, "drafter (cuda): %d taps", s.m); goto fail; }
        for (int i = 0; i < s.m; i++) s.taps[i] = cf->target_layer_ids[i] + 1;
        s.ce_alpha = u->opt.ce_alpha; s.l1_alpha = u->opt.l1_alpha; s.conf_alpha = u->opt.conf_alpha;
        s.need_t = u->need_t; s.l1_on = u->opt.l1_alpha > 0; s.target_labels = u->opt.target_labels != 0;
        s.i_fc = param_index(ps, "fc.weight"); s.i_hn = param_index(ps, "hidden_norm.weight");
        s.i_layer0 = param_index(ps, "layers.0.input_layernorm.weight"); s.i_norm = param_index(ps, "norm.weight");
        s.i_embed = param_index(ps, "embed_tokens.weight"); s.i_lm = param_index(ps, "lm_head.weight");
        s.i_w1 = param_index(ps, "markov_head.markov_w1.weight"); s.i_w2 = param_index(ps, "markov_head.markov_w2.weight");
        s.i_cw = param_index(ps, "confidence_head.proj.weight"); s.i_cb = param_index(ps, "confidence_head.proj.bias");
        s.conf_in = s.i_cw >= 0 ? (int)ps->p[s.i_cw].n : 0;
        if (cf->dflash2) {   // the conv tensors follow all layers, 4 a layer, then the selector's 3 (train_drafter.c's order)
            s.d2 = 1; s.conv_taps = cf->conv_taps; s.conv_group = cf->conv_group; s.K = cf->sel_top_k; s.R = cf->sel_rank;
            s.i_conv0 = param_index(ps, "layers.0.attention_conv.base_kernel");
            s.i_sel = param_index(ps, "candidate_selector.hidden_projection.weight");
            for (int l = 0; l < s.L && s.i_conv0 >= 0; l++) {
                char nm[96];
                snprintf(nm, sizeof nm, "layers.%d.mlp_conv.kernel_projection.weight", l);
                if (param_index(ps, nm) != s.i_conv0 + 4 * l + 3) s.i_conv0 = -1;
            }
            if (s.i_sel < 0 || param_index(ps, "candidate_selector.successor_codebook") != s.i_sel + 2) s.i_sel = -1;
            if (s.i_conv0 < 0 || s.i_sel < 0) { bs_fail(err, "drafter (cuda): DFlash 2's tensors are not where the GPU step reads them"); goto fail; }
        }
        s.t_embed = 0; s.t_lm = tc->tie_embeddings ? 0 : 2 + tc_per_layer(bs_qwen3_has_qk_norm(tc)) * tc->n_layers; s.t_final = tc->n_layers;
        if (s.i_fc < 0 || s.i_hn < 0 || s.i_layer0 < 0 || s.i_norm < 0 || (!s.zl && (s.i_embed < 0 || s.i_lm < 0)) ||
            (s.r > 0 && (s.i_w1 < 0 || s.i_w2 < 0)) || (s.i_cw >= 0) != (s.i_cb >= 0)) {
            bs_fail(err, "drafter (cuda): the parameter set lacks a tensor the GPU step needs");
            goto fail;
        }
        int np = ps->n;
        int64_t *numel = malloc(sizeof(int64_t) * np);
        int *tr = malloc(sizeof(int) * np), *dc = malloc(sizeof(int) * np);
        if (!numel || !tr || !dc) { free(numel); free(tr); free(dc); bs_fail(err, "out of memory"); goto fail; }
        for (int i = 0; i < np; i++) { numel[i] = ps->p[i].n; tr[i] = ps->p[i].trainable; dc[i] = ps->p[i].decay; }
        int rc = td_dev_new(&u->d, &s, bs_train_target_cuda_dev(u->gpu_tgt), max_batch_seqs, max_seq_len, u->A, np, numel, tr, dc, err);
        free(numel); free(tr); free(dc);
        if (rc) { bs_wrap(err, "drafter (cuda)"); goto fail; }
    }
    {
        size_t nb = (size_t)max_batch_seqs * u->A, nq = nb * u->B, npr = nb * u->P, N = (size_t)max_batch_seqs * max_seq_len;
        u->ids = malloc(4 * N); u->blk_ids = malloc(4 * nq); u->qpos = malloc(4 * nq); u->anchor = malloc(4 * nb); u->keep = malloc(4 * nb);
        u->base = malloc(4 * nb); u->tid = malloc(4 * npr); u->tpos = malloc(4 * npr); u->prev = malloc(4 * npr); u->evm = malloc(4 * npr);
        u->an = malloc(4 * nb); u->kp = malloc(4 * nb); u->w = malloc(4 * npr); u->rs = malloc(4 * npr); u->ce_row = malloc(4 * npr);
        u->l1_row = malloc(4 * npr); u->acc = malloc(4 * npr); u->bce_row = malloc(4 * npr);
        if (!u->ids || !u->blk_ids || !u->qpos || !u->anchor || !u->keep || !u->base || !u->tid || !u->tpos || !u->prev || !u->evm ||
            !u->an || !u->kp || !u->w || !u->rs || !u->ce_row || !u->l1_row || !u->acc || !u->bce_row) {
            bs_fail(err, "out of memory");
            goto fail;
        }
    }
    t->params = u->cpu->params;   // shared with the CPU task (freed with it)
    t->kind = u->cpu->kind;
    if (t_sync(t, NULL, NULL, 1, err)) goto fail;
    t->loss_grad = t_loss_grad; t->loss_eval = t_loss_eval; t->export_model = t_export; t->flops_forward = t_flops;
    t->loss_grad_batch = t_loss_grad_batch; t->opt_step = t_opt_step; t->sync_to_host = t_sync_to_host; t->sync_from_host = t_sync_from_host;
    *out = t;
    return 0;
fail:
    t_free(t);
    return -1;
}

int bs_train_drafter_cuda_step(bs_train_task *t, const bs_train_seq *seqs, int n_seqs, const int32_t *anchors, const int32_t *keep,
                               int do_grad, float scale, bs_loss_terms *terms, bs_err *err) {
    if (!get(t, err)) return -1;
    if (!anchors || !keep) return bs_fail(err, "drafter (cuda): no anchors given");
    return run(t, seqs, n_seqs, anchors, keep, do_grad, scale, terms, err);
}
int bs_train_drafter_cuda_set_gemm(bs_train_task *t, int mode, bs_err *err) {
    tdh *u = get(t, err);
    if (!u) return -1;
    if (bs_train_target_cuda_set_gemm(u->gpu_tgt, mode, err)) return -1;
    td_dev_set_gemm(u->d, mode);
    return 0;
}
int bs_train_drafter_cuda_grads_to_host(bs_train_task *t, bs_err *err) {
    tdh *u = get(t, err);
    if (!u) return -1;
    for (int i = 0; i < t->params.n; i++)
        if (t->params.p[i].trainable && td_dev_copy(u->d, TC_G, i, t->params.p[i].g, 0, err)) return -1;
    return 0;
}
int bs_train_drafter_cuda_zero_grads(bs_train_task *t, bs_err *err) {
    tdh *u = get(t, err);
    return u ? td_dev_zero_grads(u->d, err) : -1;
}
int bs_train_drafter_cuda_times(bs_train_task *t, double ms[4], int reset, bs_err *err) {
    tdh *u = get(t, err);
    if (!u) return -1;
    td_dev_times(u->d, ms, reset);
    return 0;
}
size_t bs_train_drafter_cuda_device_bytes(const bs_train_task *t) {
    if (!t || t->free != t_free) return 0;
    const tdh *u = t->impl;
    return td_dev_bytes(u->d) + bs_train_target_cuda_device_bytes(u->gpu_tgt);
}

#else  // !BS_WITH_CUDA

#define NO_CUDA(err) bs_fail(err, "this blockspec was built without CUDA (rebuild with `make cuda` on a machine with nvcc)")
int bs_train_drafter_cuda_new(bs_train_task **out, const char *target_dir, const bs_drafter_config *c, const char *init_dir,
                              const bs_drafter_loss_opts *o, uint64_t seed, int max_batch_seqs, int max_seq_len, bs_err *err) {
    *out = NULL;
    return NO_CUDA(err);
}
int bs_train_drafter_cuda_step(bs_train_task *t, const bs_train_seq *seqs, int n_seqs, const int32_t *anchors, const int32_t *keep,
                               int do_grad, float scale, bs_loss_terms *terms, bs_err *err) { return NO_CUDA(err); }
int bs_train_drafter_cuda_set_gemm(bs_train_task *t, int mode, bs_err *err) { return NO_CUDA(err); }
int bs_train_drafter_cuda_grads_to_host(bs_train_task *t, bs_err *err) { return NO_CUDA(err); }
int bs_train_drafter_cuda_zero_grads(bs_train_task *t, bs_err *err) { return NO_CUDA(err); }
int bs_train_drafter_cuda_times(bs_train_task *t, double ms[4], int reset, bs_err *err) { return NO_CUDA(err); }
size_t bs_train_drafter_cuda_device_bytes(const bs_train_task *t) { return 0; }
#endif
