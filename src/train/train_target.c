// A Qwen3 or Llama-3.x target as a training task (train_target.h): embedding -> decoder layers (causal) -> final norm ->
// LM head, next-token cross-entropy, and the backward of all of it.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "train/train_io.h"
#include "train/train_layer.h"
#include "train/train_ops.h"
#include "io/r1_basis.h"
#include "train/train_target.h"

#define LOGIT_ROWS 32   // rows of logits materialised at a time (a [rows][V] buffer, not [n][V])

typedef struct {
    bs_train_task task;
    bs_qwen3_config cfg;
    bs_layer_shape shape;
    int trainable;
    bs_param *embed, *lm_head, *norm;   // lm_head == embed when tied
    bs_layer_w *lw;
    // workspace for up to cap rows
    int cap;
    bs_layer_act *act;                   // [n_layers]
    bs_layer_grad gw;
    float *x0, *xf, *rstd_f, *dx, *dxf, *logits, *probs;
    int32_t *pos, *kr;
} target;

static target *impl(const bs_train_task *t) { return (target *)t->impl; }
const bs_qwen3_config *bs_train_target_config(const bs_train_task *t) { return &impl(t)->cfg; }
const float *bs_train_target_embed(const bs_train_task *t) { return impl(t)->embed->w; }
const float *bs_train_target_lm_head(const bs_train_task *t) { return impl(t)->lm_head->w; }

static void free_ws(target *m) {
    if (m->act) for (int l = 0; l < m->cfg.n_layers; l++) bs_layer_act_free(&m->act[l]);
    free(m->act); m->act = NULL;
    bs_layer_grad_free(&m->gw);
    float *b[] = { m->x0, m->xf, m->rstd_f, m->dx, m->dxf, m->logits, m->probs };
    for (size_t i = 0; i < sizeof b / sizeof *b; i++) free(b[i]);
    free(m->pos); free(m->kr);
    m->x0 = m->xf = m->rstd_f = m->dx = m->dxf = m->logits = m->probs = NULL;
    m->pos = m->kr = NULL;
    m->cap = 0;
}

// Buffers for n rows (kept and reused; grown when a longer sequence comes).
static int ensure_ws(target *m, int n, bs_err *err) {
    if (n <= m->cap) return 0;
    free_ws(m);
    size_t H = m->cfg.hidden_size, V = m->cfg.vocab_size, N = n;
    if (!(m->act = bs_calloc(m->cfg.n_layers, sizeof *m->act, err))) goto fail;
    for (int l = 0; l < m->cfg.n_layers; l++) if (bs_layer_act_alloc(&m->act[l], &m->shape, n, 0, err)) goto fail;
    if (m->trainable && bs_layer_grad_alloc(&m->gw, &m->shape, n, 0, err)) goto fail;
    if (!(m->x0 = bs_malloc(sizeof(float) * N * H, err)) || !(m->xf = bs_malloc(sizeof(float) * N * H, err)) ||
        !(m->rstd_f = bs_malloc(sizeof(float) * N, err)) || !(m->dx = bs_malloc(sizeof(float) * N * H, err)) ||
        !(m->dxf = bs_malloc(sizeof(float) * N * H, err)) || !(m->logits = bs_malloc(sizeof(float) * LOGIT_ROWS * V, err)) ||
        !(m->probs = bs_malloc(sizeof(float) * LOGIT_ROWS * V, err)) || !(m->pos = bs_malloc(sizeof(int32_t) * N, err)) ||
        !(m->kr = bs_malloc(sizeof(int32_t) * 4 * N, err))) goto fail;
    m->cap = n;
    return 0;
fail:
    free_ws(m);
    return bs_wrap(err, "target training workspace for %d tokens", n);
}

static int check_ids(const target *m, const int32_t *ids, int n, bs_err *err) {
    if (n < 1) return bs_fail(err, "target: empty sequence");
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->cfg.vocab_size) return bs_fail(err, "target: token %d at position %d is outside the vocabulary [0, %d)", ids[i], i, m->cfg.vocab_size);
    return 0;
}

// Embedding, layers, final norm over ids[n] (activations kept in the workspace).
static int forward(target *m, const int32_t *ids, int n, bs_err *err) {
    if (check_ids(m, ids, n, err) || ensure_ws(m, n, err)) return -1;
    int H = m->cfg.hidden_size, L = m->cfg.n_layers;
    for (int i = 0; i < n; i++) m->pos[i] = i;
    bs_mask_causal(m->kr, n);
    bs_op_embed_fwd(m->x0, m->embed->w, ids, n, H);
    const float *x = m->x0;
    for (int l = 0; l < L; l++) {
        bs_layer_fwd(&m->shape, &m->lw[l], &m->act[l], x, n, NULL, 0, m->pos, m->pos, m->kr);
        x = m->act[l].out;
    }
    bs_op_rmsnorm_fwd(m->xf, m->rstd_f, x, m->norm->w, n, H, m->cfg.rms_eps);
    return 0;
}

int bs_train_target_forward(bs_train_task *t, const int32_t *ids, int n, const int *taps, int n_taps, float *tap_out,
                            float *final_out, float *logits_out, bs_err *err) {
    target *m = impl(t);
    int H = m->cfg.hidden_size, L = m->cfg.n_layers;
    for (int i = 0; i < n_taps; i++)
        if (taps[i] < 0 || taps[i] > L) return bs_fail(err, "target: hidden-state index %d is out of range [0, %d]", taps[i], L);
    if (forward(m, ids, n, err)) return -1;
    for (int i = 0; i < n_taps; i++) {
        const float *src = taps[i] == 0 ? m->x0 : taps[i] == L ? m->xf : m->act[taps[i] - 1].out;
        for (int r = 0; r < n; r++) memcpy(tap_out + ((size_t)r * n_taps + i) * H, src + (size_t)r * H, sizeof(float) * H);
    }
    if (final_out) memcpy(final_out, m->xf, sizeof(float) * (size_t)n * H);
    if (logits_out) bs_op_linear_fwd(logits_out, m->xf, m->lm_head->w, NULL, n, H, m->cfg.vocab_size, 0);
    return 0;
}

// Next-token CE: row i predicts ids[i + 1] where loss_mask[i + 1] (all rows but the last without a mask),
// the loss their mean. With do_grad, d(scale * loss) flows back into every trainable gradient.
static int run(target *m, const bs_train_seq *seq, int do_grad, float scale, bs_loss_terms *terms, bs_err *err) {
    memset(terms, 0, sizeof *terms);
    if (do_grad && !m->trainable) return bs_fail(err, "target: loaded frozen; it has no gradients");
    if (forward(m, seq->ids, seq->n, err)) return -1;
    int n = seq->n, H = m->cfg.hidden_size, V = m->cfg.vocab_size, L = m->cfg.n_layers;
    int count = 0;
    for (int i = 0; i + 1 < n; i++) count += !seq->loss_mask || seq->loss_mask[i + 1];
    if (do_grad) memset(m->dxf, 0, sizeof(float) * (size_t)n * H);
    double sum = 0;
    float g = count ? scale / count : 0;
    for (int r0 = 0; r0 < n - 1; r0 += LOGIT_ROWS) {
        int rows = n - 1 - r0 < LOGIT_ROWS ? n - 1 - r0 : LOGIT_ROWS;
        bs_op_linear_fwd(m->logits, m->xf + (size_t)r0 * H, m->lm_head->w, NULL, rows, H, V, 0);
        for (int r = 0; r < rows; r++) {
            int i = r0 + r;
            float *z = m->logits + (size_t)r * V, *p = m->probs + (size_t)r * V;
            if (seq->loss_mask && !seq->loss_mask[i + 1]) { memset(z, 0, sizeof(float) * V); continue; }
            float lse = bs_op_softmax(p, z, V);
            sum += lse - z[seq->ids[i + 1]];
            if (do_grad) {   // z becomes dz
                for (int k = 0; k < V; k++) z[k] = g * p[k];
                z[seq->ids[i + 1]] -= g;
            }
        }
        if (do_grad) bs_op_linear_bwd(m->dxf + (size_t)r0 * H, m->lm_head->g, NULL, m->logits, m->xf + (size_t)r0 * H, m->lm_head->w, rows, H, V);
    }
    terms->ce = terms->loss = count ? sum / count : 0;
    terms->n_tokens = count;
    if (!do_grad) return 0;
    memset(m->dx, 0, sizeof(float) * (size_t)n * H);
    bs_op_rmsnorm_bwd(m->dx, m->norm->g, m->dxf, m->act[L - 1].out, m->norm->w, m->rstd_f, n, H);
    for (int l = L - 1; l >= 0; l--) bs_layer_bwd(&m->shape, &m->lw[l], &m->act[l], &m->gw, m->dx, NULL, NULL, n, 0, m->pos, m->pos, m->kr);
    bs_op_embed_bwd(m->embed->g, m->dx, seq->ids, n, H);
    return 0;
}

static int target_loss_grad(bs_train_task *t, const bs_train_seq *seq, float scale, bs_rng *rng, bs_loss_terms *terms, bs_err *err) {
    return run(impl(t), seq, 1, scale, terms, err);
}
static int target_loss_eval(bs_train_task *t, const bs_train_seq *seq, bs_rng *rng, bs_loss_terms *terms, bs_err *err) {
    return run(impl(t), seq, 0, 0, terms, err);
}

static int target_export(bs_train_task *t, const char *dir, bs_err *err) {
    target *m = impl(t);
    cJSON *root = bs_qwen3_config_to_json(&m->cfg);
    if (!root) return bs_fail(err, "out of memory");
    int rc = bs_train_write_config(root, dir, err);
    cJSON_Delete(root);
    return rc ? rc : bs_train_write_bf16(&t->params, dir, err);
}

static double target_flops(const bs_train_task *t, int n) {
    const target *m = impl(t);
    double f = 2.0 * n * m->cfg.hidden_size * m->cfg.vocab_size;   // LM head
    for (int l = 0; l < m->cfg.n_layers; l++) f += bs_layer_flops(&m->shape, n, 0, 0.5 * n * (n + 1.0));
    return f;
}

static void target_free(bs_train_task *t) {
    if (!t) return;
    target *m = impl(t);
    free_ws(m);
    free(m->lw);
    bs_param_set_free(&t->params);
    free(m);
}

// The parameter set of cfg's shape (zeros), bound to the model's pointers.
static int create(target **out, const bs_qwen3_config *cfg, int trainable, bs_err *err) {
    *out = NULL;
    if (cfg->sliding_window) return bs_fail(err, "target: sliding-window attention is not supported in training");
    // The trainer's layer (train_layer.c) is Qwen3's and Llama's; Gemma-4 targets run in the engine only.
    if (cfg->arch == BS_ARCH_GEMMA4) return bs_fail(err, "target: training does not support Gemma-4 targets (docs/gemma4.md)");
    target *m = calloc(1, sizeof *m);
    if (!m) return bs_fail(err, "out of memory");
    m->cfg = *cfg;
    m->trainable = trainable;
    m->shape = bs_layer_shape_of(cfg);   // Qwen3 or Llama by cfg->arch (q/k norm), RoPE as the engine's table
    bs_train_task *t = &m->task;
    t->kind = "target"; t->impl = m;
    t->loss_grad = target_loss_grad; t->loss_eval = target_loss_eval; t->export_model = target_export;
    t->flops_forward = target_flops; t->free = target_free;
    bs_param_set *ps = &t->params;
    int64_t H = cfg->hidden_size, V = cfg->vocab_size;
    if (bs_param_add(ps, "model.embed_tokens.weight", 2, (int64_t[]){ V, H }, trainable, 1, err) < 0) goto fail;
    for (int l = 0; l < cfg->n_layers; l++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "model.layers.%d.", l);
        if (bs_layer_params_add(ps, prefix, &m->shape, trainable, err)) goto fail;
    }
    if (bs_param_add(ps, "model.norm.weight", 1, (int64_t[]){ H }, trainable, 0, err) < 0) goto fail;
    if (!cfg->tie_embeddings && bs_param_add(ps, "lm_head.weight", 2, (int64_t[]){ V, H }, trainable, 1, err) < 0) goto fail;
    if (!(m->lw = bs_calloc(cfg->n_layers, sizeof *m->lw, err))) goto fail;
    for (int l = 0; l < cfg->n_layers; l++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "model.layers.%d.", l);
        bs_layer_w_bind(&m->lw[l], ps, prefix);
    }
    m->embed = bs_param_find(ps, "model.embed_tokens.weight");
    m->norm = bs_param_find(ps, "model.norm.weight");
    m->lm_head = cfg->tie_embeddings ? m->embed : bs_param_find(ps, "lm_head.weight");
    *out = m;
    return 0;
fail:
    target_free(t);
    return -1;
}

int bs_train_target_new(bs_train_task **out, const bs_qwen3_config *cfg, uint64_t seed, bs_err *err) {
    target *m;
    if (create(&m, cfg, 1, err)) return -1;
    bs_rng r;
    bs_rng_seed(&r, seed);
    for (int i = 0; i < m->task.params.n; i++) {
        bs_param *p = &m->task.params.p[i];
        if (p->n_dims == 1) for (int64_t k = 0; k < p->n; k++) p->w[k] = 1.0f;   // RMSNorm gains
        else bs_train_fill_normal(p->w, p->n, 0.02f, &r);
    }
    *out = &m->task;
    return 0;
}

int bs_train_target_load(bs_train_task **out, const char *dir, int trainable, bs_err *err) {
    bs_qwen3_config cfg;
    if (bs_qwen3_config_load(&cfg, dir, err)) return -1;
    // A drafter learns the basis of the target it is trained against, and binding assumes the unrotated one
    // (docs/rotation.md): train against the original, then bind the drafter to the folded copy.
    bs_r1_basis r1;
    int folded = bs_r1_basis_load(&r1, dir, cfg.hidden_size, err);
    if (folded < 0) return -1;
    bs_r1_basis_free(&r1);
    if (folded && !trainable)
        return bs_fail(err, "%s is an R1-folded target (config.json \"%s\"); train drafters against the unrotated original and bind "
                       "them to the folded copy at generation time", dir, BS_R1_KEY);
    bs_checkpoint *ck;
    if (bs_checkpoint_open(&ck, dir, err)) return -1;
    target *m;
    if (create(&m, &cfg, trainable, err)) { bs_checkpoint_close(ck); return -1; }
    for (int i = 0; i < m->task.params.n; i++)
        if (bs_train_param_load(&m->task.params.p[i], ck, m->task.params.p[i].name, err)) {
            bs_checkpoint_close(ck);
            target_free(&m->task);
            return bs_wrap(err, "loading target %s", dir);
        }
    bs_checkpoint_close(ck);
    *out = &m->task;
    return 0;
}
