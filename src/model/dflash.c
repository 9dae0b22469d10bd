// z-lab DFlash and DeepSpec DFlash / DSpark drafters, written once against the backend ops.
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "backend/affine.h"
#include "backend/hadamard.h"
#include "io/calibration.h"
#include "io/draft_vocab.h"
#include "io/quant_config.h"
#include "model/dflash.h"
#include "model/gemma4.h"
#include "model/selector.h"
#include "model/r1_bind.h"
#include "util/tuning.h"
#include "model/rope.h"

#define CTX_CHUNK 64

typedef struct dflash {
    bs_drafter iface;
    bs_drafter_config cfg;
    char *dir;
    bs_checkpoint *ck;
    bs_quant_config qc;              // config.json's "quantization" block (MLX affine weights), for loading
    bs_backend *be;
    bs_qwen3 *target;
    int taps[BS_MAX_TAPS];           // hidden_states indices = target_layer_ids + 1
    int B, gamma, H, V, kd, qd, I, r, max_ctx;
    bs_kv_pool ctx_pool;             // every context's K/V rows (docs/kv-paging.md: the target pool's geometry)
    float *rope_inv_freq;            // [head_dim / 2] backend memory: the drafter's own RoPE table (model/rope.h;
                                     // default or llama3-scaled, from its config.json, fp32 as the target's)
    // weights (backend views)
    bs_mat fc, hidden_norm, norm, embed, lm_head;
    bs_qwen3_layer *layers;
    bs_gemma4_layer *glayers;        // Gemma4DSparkModel (cfg.gemma): what a Gemma-4 layer adds (model/gemma4.h)
    bs_mat ones;                     // (Gemma) [head_dim] of 1: the weightless value norm
    float *ones_host;
    bs_mat w1, w2, gate_w, joint_w, conf_w;
    float *gate_b, *joint_b, conf_b;  // host copies of the small biases
    // calibration.json (Sequential Temperature Scaling, docs/calibration.md): c_k = sigmoid(z_k / conf_T[k] + conf_bias[k])
    int calibrated;
    float conf_T[BS_MAX_DRAFT], conf_bias[BS_MAX_DRAFT];
    // backend workspace (scratch of one call: the drafter serves one call at a time)
    float *ctx;                      // [CTX_CHUNK][H]
    float *x, *xn, *q, *att, *gate, *up, *h;   // block rows
    float *kx, *vx;                  // [B][kd]: the block's K/V rows before they are stored at n_ctx
    float *logits;                   // [B][V]
    float *he;                       // [B][H + r]: [h_k ; W1[x_{k-1}]] rows (Markov / confidence input)
    float *vec_r, *vec_z, *vec_3r;   // [r], [2r + H], [3r] (gated / rnn steps)
    // host workspace
    float *hv, *state;               // [3r], [r]
    int lossy;                       // large matrices lossy (bs_drafter_opts.lossy_weights)
    // draft vocabulary (io/draft_vocab.h): vd > 0 = the LM head (and Markov W2) hold only rows vids[0..vd);
    // their logits go to logits_d [B][vd], then scatter_cols spreads them over logits (-inf elsewhere)
    int vd;
    int32_t *vids;                   // host, sorted
    int32_t *vids_dev;               // backend copy (scatter_cols' column map)
    float *logits_d;
    void *rows_host[2];              // the gathered host rows of the LM head and W2 (the CPU backend's weights view them)
    // several sequences' blocks in one pass (propose_batch): BATCH_ROWS rows each, allocated on first use
    float *bx, *bxn, *bq, *batt, *bgate, *bup, *bh, *bkx, *bvx, *bpred, *blogits;
    float *bxa, *bob, *bdyn;         // (DFlash 2)
    // DFlash 2 (cfg.dflash2; docs/dflash2.md): the convolutions around every sublayer and the candidate selector
    bs_mat *conv_proj;               // [n_layers][2]: attention_conv, mlp_conv kernel_projection [2 * taps * groups][H]
    float *conv_base;                // backend [n_layers][2 sites][2 stages][taps][H]: their base kernels, fp32
    bs_mat sel_proj;                 // candidate_selector.hidden_projection [R][H]
    bs_mat sel_pred, sel_succ;       // the codebooks A, B [V][R]: host views (the walk runs on the host)
    bs_selector sel;
    float *xa, *ob, *dyn;            // block scratch: a sublayer's convolved input, its output, the dynamic coefficients
    float *escale, *zero_dyn;        // input_embedding_scale as a 1-tap convolution: the scale per channel, no dynamic part
    void *sel_dev;                   // backend: [B][K] candidate ids, [B][K] unary logits, [B][R] z (one download a round)
    void *sel_host;                  // its host copy, then the walk's scratch
    void *qsp;                       // backend [B][K] candidate ids in id order + [B][K] their q (spread into qdist rows)
    // An R1-folded target (model/r1_bind.h): fc folded at load (its bytes in fc_folded); the rows embedded from
    // the target's table unrotated (r1_embed); the head rows rotated into the target's head first (r1_head:
    // R1_HEAD_LM, the target's LM head, or R1_HEAD_EMBED, its embedding used as the head), into hu [B][H].
    bs_r1_bind r1;
    int r1_embed, r1_head;
    void *fc_folded;
    float *hu, *bhu;
} dflash;

enum { R1_HEAD_NONE = 0, R1_HEAD_LM = 1, R1_HEAD_EMBED = 2 };

// One sequence's state (bs_drafter_ctx.impl): its context cache and what a proposal hands back.
typedef struct dflash_ctx {
    bs_page_table pages;             // its K/V rows in the drafter's pool: rows [0, n_ctx) context, then the block's
                                     // transient rows (up to n_ctx + B), taken as needed
    float *qdist;                    // [gamma][V]: processed draft distributions when sampling (bs_draft.q)
    int32_t *picks;                  // [2B]: picks made on the device (ids), then the confidence logits
    float *conf_out;                 // = picks + B, read as floats
    // recorded draft passes (backends with record/replay; they name this context's buffers), one per
    // (LM-head row count, picks on device)
    struct { int n, picks, seen; void *rec; } recs[8];
    int n_recs;
} dflash_ctx;

static void dflash_free(bs_drafter *d);
// Only drafters this file opened have a bs_drafter_config (the seed's DSpark v1, model/dspark_v1.c, has none).
static int is_dflash(const bs_drafter *d) { return d && d->free == dflash_free; }
static const bs_drafter_config *cfg_of(const bs_drafter *d) { return &((const dflash *)d->impl)->cfg; }
const bs_drafter_config *bs_dflash_config(const bs_drafter *d) { return is_dflash(d) ? cfg_of(d) : NULL; }
int bs_dflash_vocab_rows(const bs_drafter *d) { const dflash *m = d->impl; return m->vd ? m->vd : m->V; }
const float *bs_dflash_calibration(const bs_drafter *d, const float **bias) {
    if (!is_dflash(d)) { if (bias) *bias = NULL; return NULL; }
    const dflash *m = d->impl;
    if (bias) *bias = m->calibrated ? m->conf_bias : NULL;
    return m->calibrated ? m->conf_T : NULL;
}

// ---- loading ----------------------------------------------------------------------------------------------

// Finds `name` or "model." + name (some exports add the prefix) and checks its shape; a matrix (rows > 0)
// may be MLX affine-quantised (bs_checkpoint_weight), a vector never.
static int get_mat(dflash *m, const char *name, int64_t rows, int64_t cols, bs_mat *host, bs_err *err) {
    char alt[300];
    const char *use = name;
    if (!bs_checkpoint_find(m->ck, name)) {
        snprintf(alt, sizeof alt, "model.%s", name);
        if (!bs_checkpoint_find(m->ck, alt))
            return bs_fail(err, "drafter %s: missing tensor '%s' (a %s checkpoint needs it)", m->dir, name, m->cfg.arch_name);
        use = alt;
    }
    if (rows ? bs_checkpoint_weight(m->ck, &m->qc, use, rows, cols, host, err) : bs_checkpoint_mat(m->ck, use, rows, cols, host, err))
        return bs_wrap(err, "drafter %s", m->dir);
    return 0;
}


// A large matrix: 8-bit where asked for and the backend offers it, else as stored.
static int upload_mat(dflash *m, const bs_mat *host, bs_mat *dst, bs_err *err) {
    if (m->lossy && m->be->weight_lossy) {
        int rc = m->be->weight_lossy(m->be, dst, host, err);
        if (rc <= 0) return rc;   // 1: declined
    }
    return m->be->weight(m->be, dst, host, err);
}

// A matrix the drafter otherwise shares (z-lab: the target's LM head; a tied head: the embedding), lossy
// where asked for and the backend takes it (CPU: a marked view of the same bytes; CUDA: an 8-bit copy);
// else it stays shared (never a second exact copy).
static int lossy_or_shared(dflash *m, const bs_mat *host, const bs_mat *shared, bs_mat *dst, bs_err *err) {
    if (m->lossy && m->be->weight_lossy_view && m->be->weight_lossy_view(m->be, dst, shared) == 0) return 0;   // CPU: same bytes
    if (m->lossy && m->be->weight_lossy) {
        int rc = m->be->weight_lossy(m->be, dst, host, err);
        if (rc <= 0) return rc;   // 1: declined
    }
    *dst = *shared;
    return 0;
}

// (A backend that cannot compute with a weight's format refuses it; the message then names the tensor.)
static int load_w(dflash *m, const char *name, int64_t rows, int64_t cols, bs_mat *dst, bs_err *err) {
    bs_mat host;
    if (get_mat(m, name, rows, cols, &host, err)) return -1;
    if (m->be->weight(m->be, dst, &host, err)) return bs_wrap(err, "drafter %s: tensor '%s'", m->dir, name);
    return 0;
}
static int load_mat(dflash *m, const char *name, int64_t rows, int64_t cols, bs_mat *dst, bs_err *err) {
    bs_mat host;
    if (get_mat(m, name, rows, cols, &host, err)) return -1;
    if (upload_mat(m, &host, dst, err)) return bs_wrap(err, "drafter %s: tensor '%s'", m->dir, name);
    return 0;
}

// The rows vids[0..vd) of a host matrix, gathered into host memory the drafter keeps (slot: rows_host index);
// an affine matrix's codes, scales and biases rows alike, one after the other in the one buffer.
static int gather_rows(dflash *m, const bs_mat *host, bs_mat *out, int slot, bs_err *err) {
    int aff = host->format == BS_WFMT_AFFINE;
    size_t rb = aff ? (size_t)bs_affine_words(host->cols, host->bits) * 4 : (size_t)host->cols * bs_dtype_size(host->dtype);
    size_t pb = aff ? (size_t)(host->cols / host->group) * bs_dtype_size(host->dtype) : 0;   // scales (and biases) of a row
    char *buf = bs_malloc((rb + 2 * pb) * (size_t)m->vd, err);
    if (!buf) return bs_wrap(err, "drafter %s: draft-vocabulary rows", m->dir);
    char *sc = buf + rb * m->vd, *bi = sc + pb * m->vd;
    for (int i = 0; i < m->vd; i++) {
        memcpy(buf + (size_t)i * rb, (const char *)host->data + (size_t)m->vids[i] * rb, rb);
        if (aff) {
            memcpy(sc + (size_t)i * pb, (const char *)host->scales + (size_t)m->vids[i] * pb, pb);
            memcpy(bi + (size_t)i * pb, (const char *)host->biases + (size_t)m->vids[i] * pb, pb);
        }
    }
    free(m->rows_host[slot]);
    m->rows_host[slot] = buf;
    *out = *host;
    out->data = buf;
    if (aff) { out->scales = sc; out->biases = bi; }
    out->rows = m->vd;
    return 0;
}

// An output-vocabulary matrix ([V][cols]: the LM head, Markov W2): with a draft vocabulary only its rows
// vids (uploaded like any large matrix); else as given (shared: the view *shared, unless lossy).
static int vocab_mat(dflash *m, const bs_mat *host, const bs_mat *shared, bs_mat *dst, int slot, bs_err *err) {
    if (m->vd) {
        bs_mat rows;
        return gather_rows(m, host, &rows, slot, err) || upload_mat(m, &rows, dst, err) ? -1 : 0;
    }
    return shared ? lossy_or_shared(m, host, shared, dst, err) : upload_mat(m, host, dst, err);
}

// A small vector (bias) widened to fp32 on the host.
static float *load_host_vec(dflash *m, const char *name, int64_t n, bs_err *err) {
    bs_mat host;
    if (get_mat(m, name, 0, n, &host, err)) return NULL;
    float *v = bs_malloc(sizeof(float) * n, err);
    if (v) for (int64_t i = 0; i < n; i++) v[i] = bs_load_elem(host.data, host.dtype, (size_t)i);
    return v;
}

static int load_layer(dflash *m, int i, bs_err *err) {
    const bs_qwen3_config *c = &m->cfg.base;
    if (m->cfg.gemma) {   // Gemma-4 layers, loaded as the target's are (tensors "layers.N." or "model.layers.N.")
        const char *prefix = bs_checkpoint_find(m->ck, "model.layers.0.input_layernorm.weight") ? "model." : "";
        if (bs_gemma4_load_layer(m->be, c, prefix, i, &m->layers[i], &m->glayers[i], m->ck, &m->qc, err)) return bs_wrap(err, "drafter %s", m->dir);
        return 0;
    }
    bs_qwen3_layer *L = &m->layers[i];
    int H = m->H, hd = c->head_dim;
    struct { bs_mat *w; const char *name; int64_t rows, cols; } w[] = {
        { &L->attn_norm, "input_layernorm.weight", 0, H },
        { &L->wq, "self_attn.q_proj.weight", m->qd, H }, { &L->wk, "self_attn.k_proj.weight", m->kd, H },
        { &L->wv, "self_attn.v_proj.weight", m->kd, H }, { &L->wo, "self_attn.o_proj.weight", H, m->qd },
        { &L->q_norm, "self_attn.q_norm.weight", 0, hd }, { &L->k_norm, "self_attn.k_norm.weight", 0, hd },
        { &L->mlp_norm, "post_attention_layernorm.weight", 0, H },
        { &L->w_gate, "mlp.gate_proj.weight", m->I, H }, { &L->w_up, "mlp.up_proj.weight", m->I, H },
        { &L->w_down, "mlp.down_proj.weight", H, m->I },
    };
    for (size_t k = 0; k < sizeof w / sizeof *w; k++) {
        char name[256];
        snprintf(name, sizeof name, "layers.%d.%s", i, w[k].name);
        if ((w[k].rows ? load_mat : load_w)(m, name, w[k].rows, w[k].cols, w[k].w, err)) return -1;
    }
    return 0;
}

static int has_tensor(dflash *m, const char *name);

// A DFlash 2 base kernel [2 stages][taps][H] (a 3-D tensor: read here, not by bs_checkpoint_mat), widened
// into host[(site * 2 + stage) * taps * H ...] of the layer's block.
static int load_base_kernel(dflash *m, const char *name, float *host, bs_err *err) {
    char alt[300];
    const bs_tensor_info *t = bs_checkpoint_find(m->ck, name);
    if (!t) { snprintf(alt, sizeof alt, "model.%s", name); t = bs_checkpoint_find(m->ck, alt); }
    if (!t) return bs_fail(err, "drafter %s: missing tensor '%s' (a DFlash2DraftModel checkpoint needs it)", m->dir, name);
    int taps = m->cfg.conv_taps;
    if (t->n_dims != 3 || t->shape[0] != 2 || t->shape[1] != taps || t->shape[2] != m->H) {
        char have[128] = "";
        for (int d = 0; d < t->n_dims; d++) {
            size_t l = strlen(have);
            snprintf(have + l, sizeof have - l, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        }
        return bs_fail(err, "%s: tensor '%s' has shape [%s], expected [2, %d, %d] (stages, conv_kernel_size, hidden_size) from config.json",
                       t->file, name, have, taps, m->H);
    }
    if (!t->dtype_ok) return bs_fail(err, "%s: tensor '%s' has dtype %s; blockspec reads BF16, F16 or F32 weights", t->file, name, t->dtype_name);
    for (size_t i = 0; i < (size_t)2 * taps * m->H; i++) host[i] = bs_load_elem(t->data, t->dtype, i);
    return 0;
}

// A codebook [V][R], stored without a ".weight" suffix (the official checkpoints) or with one (MLX's rename).
static int load_codebook(dflash *m, const char *name, bs_mat *host, bs_err *err) {
    char alt[200];
    snprintf(alt, sizeof alt, "%s.weight", name);
    const char *use = has_tensor(m, name) || !has_tensor(m, alt) ? name : alt;
    return get_mat(m, use, m->V, m->cfg.sel_rank, host, err);
}

// DFlash 2's tensors beyond DFlash's (docs/dflash2.md, "Tensors"): per layer the two convolutions' kernel
// projections and base kernels, then the selector's hidden projection and codebooks.
static int load_dflash2(dflash *m, bs_err *err) {
    const bs_drafter_config *c = &m->cfg;
    int L = c->base.n_layers, taps = c->conv_taps, G = m->H / c->conv_group;
    size_t per_layer = (size_t)2 * 2 * taps * m->H;   // 2 sites x [2 stages][taps][H]
    float *base = bs_malloc(sizeof(float) * per_layer * L, err);
    if (!base || !(m->conv_proj = bs_calloc((size_t)L * 2, sizeof *m->conv_proj, err))) { free(base); return -1; }
    static const char *site[2] = { "attention_conv", "mlp_conv" };
    for (int l = 0; l < L; l++)
        for (int k = 0; k < 2; k++) {
            char name[256];
            snprintf(name, sizeof name, "layers.%d.%s.kernel_projection.weight", l, site[k]);
            if (load_mat(m, name, (int64_t)2 * taps * G, m->H, &m->conv_proj[l * 2 + k], err)) { free(base); return -1; }
            snprintf(name, sizeof name, "layers.%d.%s.base_kernel", l, site[k]);
            if (load_base_kernel(m, name, base + per_layer * l + (size_t)k * 2 * taps * m->H, err)) { free(base); return -1; }
        }
    m->conv_base = m->be->alloc(m->be, sizeof(float) * per_layer * L, err);
    if (m->conv_base) m->be->upload(m->be, m->conv_base, base, sizeof(float) * per_layer * L);
    free(base);
    if (!m->conv_base) return bs_wrap(err, "drafter %s: convolution base kernels", m->dir);
    if (load_mat(m, "candidate_selector.hidden_projection.weight", c->sel_rank, m->H, &m->sel_proj, err) ||
        load_codebook(m, "candidate_selector.predecessor_codebook", &m->sel_pred, err) ||
        load_codebook(m, "candidate_selector.successor_codebook", &m->sel_succ, err)) return -1;
    m->sel = (bs_selector){ .k = c->sel_top_k, .rank = c->sel_rank, .pred = &m->sel_pred, .succ = &m->sel_succ, .vocab = m->V };
    return 0;
}

// Largest |difference| over a few rows of two [V][H] host tables (checkpoint views).
static int has_tensor(dflash *m, const char *name) {
    char alt[300];
    snprintf(alt, sizeof alt, "model.%s", name);
    return bs_checkpoint_find(m->ck, name) || bs_checkpoint_find(m->ck, alt);
}

// Bit-identical matrices (same shape and values; the storage may differ when every value converts exactly,
// e.g. a drafter's BF16 copy of a target's F32 table; an affine matrix compares its dequantised values).
static int same_mat(const bs_mat *a, const bs_mat *b) {
    if (a->rows != b->rows || a->cols != b->cols) return 0;
    if (bs_mat_same_bytes(a, b)) return 1;
    for (int64_t r = 0; r < a->rows; r++)
        for (int64_t k = 0; k < a->cols; k++)
            if (bs_mat_elem(a, r, k) != bs_mat_elem(b, r, k)) return 0;
    return 1;
}

static double sample_rows_diff(dflash *m, const bs_mat *a, const bs_mat *b) {
    int32_t ids[5] = { 0, m->V / 3, (2 * m->V) / 3, m->V - 1, m->cfg.mask_token_id };
    double diff = 0;
    for (int i = 0; i < 5; i++)
        for (int64_t k = 0; k < m->H; k++) {
            double d = fabs((double)bs_mat_elem(a, ids[i], k) - bs_mat_elem(b, ids[i], k));
            if (!(d <= diff)) diff = d;
        }
    return diff;
}

// Appends a line to the drafter's warnings (bs_drafter.warning), which its opener's caller reports.
static void add_warning(dflash *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_warning(dflash *m, const char *fmt, ...) {
    char *w = m->iface.warning;
    size_t l = strlen(w), cap = sizeof m->iface.warning;
    if (l && l + 1 < cap) { w[l++] = '\n'; w[l] = 0; }
    va_list ap;
    va_start(ap, fmt);
    if (l < cap) vsnprintf(w + l, cap - l, fmt, ap);
    va_end(ap);
}

// ---- binding to an R1-folded target (model/r1_bind.h, docs/rotation.md) ---------------------------------------

// fc, folded into the target's basis first when the target is R1-folded (seam 1).
static int load_fc(dflash *m, bs_err *err) {
    int64_t cols = (int64_t)m->cfg.n_taps * m->H;
    if (!m->target->r1.n) return load_mat(m, "fc.weight", m->H, cols, &m->fc, err);
    bs_mat host, folded;
    if (get_mat(m, "fc.weight", m->H, cols, &host, err)) return -1;
    if (bs_r1_fold_fc(&m->target->r1, &host, m->taps, m->cfg.n_taps, m->target->cfg.n_layers, &folded, &m->fc_folded, err))
        return bs_wrap(err, "drafter %s", m->dir);
    if (upload_mat(m, &folded, &m->fc, err)) return bs_wrap(err, "drafter %s: tensor 'fc.weight' (R1-folded)", m->dir);
    // A backend that copied the matrix (CUDA; the CPU's huge-page arena) no longer reads the host bytes; a CPU
    // view does, until the drafter is freed.
    if (m->fc.data != folded.data && (folded.format != BS_WFMT_AFFINE || (m->fc.scales != folded.scales && m->fc.biases != folded.biases))) {
        free(m->fc_folded);
        m->fc_folded = NULL;
    }
    return 0;
}

// Largest |T((a_r * gain) * s) - b_r| over a few rows r, relative to the largest |T(...)|: how far a drafter's
// unrotated copy `a` is from the folded target's matrix `b` (gain: the final norm's, for the LM head; NULL: none).
static double folded_rows_diff(dflash *m, const bs_mat *a, const bs_mat *b, const float *gain) {
    const bs_r1_basis *r1 = &m->target->r1;
    bs_hadamard t;
    float *f = malloc(sizeof(float) * m->H);
    if (!f || bs_hadamard_init(&t, m->H)) { free(f); return INFINITY; }
    int32_t ids[5] = { 0, m->V / 3, (2 * m->V) / 3, m->V - 1, m->cfg.mask_token_id };
    double diff = 0, scale = 0;
    for (int i = 0; i < 5; i++) {
        bs_mat_row_f32(a, ids[i], f);
        for (int c = 0; c < m->H; c++) f[c] = (gain ? f[c] * gain[c] : f[c]) * r1->signs[c];
        bs_hadamard_row(&t, f, 0);
        for (int c = 0; c < m->H; c++) {
            double d = fabs((double)f[c] - bs_mat_elem(b, ids[i], c));
            if (!(d <= diff)) diff = d;
            if (fabs(f[c]) > scale) scale = fabs(f[c]);
        }
    }
    free(f);
    return scale > 0 ? diff / scale : diff;
}
// A copy equal to the folded target's matrix up to the fold and the rounding of its stored weights.
#define R1_SAME_TOL (1.0 / 128)

// DeepSpec's embedding and LM head against an R1-folded target. A bundled copy is in the drafter's (unrotated)
// basis: where it is the target's up to the fold, or absent, the drafter shares the target's matrix through the
// seams (no second copy); a copy that differs is used as is, with no seam, and a warning (as against an
// unrotated target). *de, *dh: the differences found (0: shared).
static int deepspec_folded_shared(dflash *m, int has_emb, int has_head, double *de, double *dh, bs_err *err) {
    const bs_qwen3 *t = m->target;
    bs_mat emb_host, head_host;
    *de = *dh = 0;
    int emb_shared = !has_emb;
    if (has_emb) {
        if (get_mat(m, "embed_tokens.weight", m->V, m->H, &emb_host, err)) return -1;
        *de = folded_rows_diff(m, &emb_host, &t->embed_host, NULL);
        emb_shared = *de <= R1_SAME_TOL;
    }
    if (emb_shared) { m->embed = t->embed; m->r1_embed = 1; *de = 0; }
    else if (m->be->weight(m->be, &m->embed, &emb_host, err)) return bs_wrap(err, "drafter %s: tensor 'embed_tokens.weight'", m->dir);
    if (has_head) {
        if (get_mat(m, "lm_head.weight", m->V, m->H, &head_host, err)) return -1;
        *dh = folded_rows_diff(m, &head_host, &t->lm_head_host, t->r1.final_gain);
        if (*dh > R1_SAME_TOL) return vocab_mat(m, &head_host, NULL, &m->lm_head, 0, err);
        *dh = 0;
    } else if (m->cfg.base.tie_embeddings) {   // the drafter's head is its embedding
        if (!emb_shared) return vocab_mat(m, &emb_host, &m->embed, &m->lm_head, 0, err);
        m->r1_head = R1_HEAD_EMBED;
        return vocab_mat(m, &t->embed_host, &t->embed, &m->lm_head, 0, err);
    }
    m->r1_head = R1_HEAD_LM;
    return vocab_mat(m, &t->lm_head_host, &t->lm_head, &m->lm_head, 0, err);
}

static int check_target(dflash *m, bs_err *err) {
    const bs_drafter_config *c = &m->cfg;
    const bs_qwen3_config *t = &m->target->cfg;
    if (c->base.hidden_size != t->hidden_size)
        return bs_fail(err, "drafter %s: hidden_size %d does not match the target's %d (this drafter was made for another target)", m->dir, c->base.hidden_size, t->hidden_size);
    if (c->base.vocab_size != t->vocab_size)
        return bs_fail(err, "drafter %s: vocab_size %d does not match the target's %d (this drafter was made for another target)", m->dir, c->base.vocab_size, t->vocab_size);
    for (int i = 0; i < c->n_taps; i++)
        if (c->target_layer_ids[i] >= t->n_layers)
            return bs_fail(err, "drafter %s: target_layer_ids[%d] = %d but the target has only %d layers", m->dir, i, c->target_layer_ids[i], t->n_layers);
    if (c->num_target_layers && c->num_target_layers != t->n_layers)
        add_warning(m, "drafter %s was trained for a %d-layer target; this target has %d layers", m->dir, c->num_target_layers, t->n_layers);
    return 0;
}

// calibration.json beside the weights (io/calibration.h): its temperatures scale the confidence logits
// from now on, so every confidence the engine uses (the --confidence-threshold cut) is the calibrated one.
// A file beside a drafter without a confidence head is refused rather than ignored: it was made for another.
static int load_calibration(dflash *m, const bs_drafter_opts *o, bs_err *err) {
    if (o && o->no_calibration) return 0;
    if (m->cfg.arch == BS_DRAFTER_DEEPSPEC && m->cfg.conf_head) {
        bs_calibration cal;
        int rc = bs_calibration_load_dir(&cal, m->dir, m->gamma, err);
        if (rc < 0) return -1;
        if (rc == 1) { memcpy(m->conf_T, cal.T, sizeof(float) * cal.n); memcpy(m->conf_bias, cal.b, sizeof(float) * cal.n); m->calibrated = 1; }
        return 0;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", m->dir, BS_CALIBRATION_FILE);
    if (access(path, F_OK) == 0)
        return bs_fail(err, "%s: this drafter (%s) has no confidence head to calibrate; remove the file or pass --no-calibration", path,
                       m->cfg.arch_name);
    return 0;
}

static void dflash_free(bs_drafter *d);
// The pool of every sequence's context rows: the geometry asked for (the engine's target pool: see
// bs_drafter_opts), else room for 8 contexts of max_ctx + B rows in pages of BS_KV_PAGE_ROWS.
static int ctx_pool_open(dflash *m, const bs_drafter_opts *o, bs_err *err) {
    int page_rows = o && o->ctx_page_rows > 0 ? o->ctx_page_rows : BS_KV_PAGE_ROWS;
    int pages = o && o->ctx_pages > 0 ? o->ctx_pages : 8 * ((m->max_ctx + m->B + page_rows - 1) / page_rows);
    if (bs_kv_pool_init(&m->ctx_pool, m->be, m->cfg.base.n_layers, m->kd, page_rows, pages, err)) return bs_wrap(err, "drafter %s", m->dir);
    return 0;
}
static int dflash_add_context(bs_drafter *d, bs_drafter_ctx *dc, const float *feat, int n, bs_err *err);
static int dflash_ctx_init(bs_drafter *d, bs_drafter_ctx *dc, int max_ctx, bs_err *err);
static void dflash_ctx_free(bs_drafter *d, bs_drafter_ctx *dc);
static int dflash_rollback(bs_drafter *d, bs_drafter_ctx *dc, int n_ctx, bs_err *err);
static int dflash_propose_batch(bs_drafter *d, int n, bs_drafter_ctx *const *c, const int32_t *anchors, const int *max_n,
                                const bs_sampling *const *s, bs_rng *const *rng, bs_draft *out, bs_err *err);
static int dflash_propose(bs_drafter *d, bs_drafter_ctx *dc, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng, bs_draft *out, bs_err *err);
static int dflash_propose_on_device(bs_drafter *d, bs_drafter_ctx *dc, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng, bs_draft *out,
                                    bs_err *err);

#define ALLOC_BE(p, bytes) do { if (!((p) = m->be->alloc(m->be, (bytes), err))) goto fail; } while (0)
#define ALLOC_HOST(p, bytes) do { if (!((p) = bs_calloc(1, (bytes), err))) goto fail; } while (0)

int bs_dflash_open(bs_drafter **out, const char *dir, bs_qwen3 *target, int max_ctx, bs_err *err) {
    return bs_dflash_open_opts(out, dir, target, max_ctx, NULL, err);
}

int bs_dflash_open_opts(bs_drafter **out, const char *dir, bs_qwen3 *target, int max_ctx, const bs_drafter_opts *o, bs_err *err) {
    *out = NULL;
    dflash *m = calloc(1, sizeof *m);
    if (!m) return bs_fail(err, "out of memory");
    m->dir = strdup(dir);
    m->target = target; m->be = target->be;
    m->iface.impl = m;
    m->lossy = o && o->lossy_weights >= 0 ? o->lossy_weights : bs_tuning_get()->drafter_fp8;
    bs_drafter_config *c = &m->cfg;
    if (bs_drafter_config_load(c, dir, err)) goto fail;
    if (check_target(m, err)) goto fail;
    if (bs_checkpoint_open(&m->ck, dir, err) || bs_quant_config_load(&m->qc, dir, err)) goto fail;
    const bs_qwen3_config *b = &c->base;
    m->B = c->block_size; m->gamma = bs_drafter_gamma(c);
    m->H = b->hidden_size; m->V = b->vocab_size; m->I = b->intermediate_size;
    m->kd = b->n_kv_heads * b->head_dim; m->qd = b->n_heads * b->head_dim;
    m->r = c->markov_rank;
    if (max_ctx <= 0) max_ctx = target->cfg.max_position;
    m->max_ctx = max_ctx;
    if (ctx_pool_open(m, o, err)) goto fail;
    for (int i = 0; i < c->n_taps; i++) m->taps[i] = c->target_layer_ids[i] + 1;
    if (o && o->draft_vocab) {
        // the target's end-of-sequence ids are always proposable
        bs_draft_vocab dv;
        if (bs_draft_vocab_load(&dv, o->draft_vocab, m->V, target->cfg.eos_ids, target->cfg.n_eos, err)) goto fail;
        m->vids = dv.ids; m->vd = dv.n;
        if (c->dflash2 && c->sel_top_k > m->vd) {
            bs_fail(err, "%s: the draft vocabulary lists %d tokens, fewer than the selector's %d candidates (dflash_config.selector_top_k)",
                    o->draft_vocab, m->vd, c->sel_top_k);
            goto fail;
        }
    }

    // weights
    if (load_fc(m, err) ||
        load_w(m, "hidden_norm.weight", 0, m->H, &m->hidden_norm, err) ||
        load_w(m, "norm.weight", 0, m->H, &m->norm, err)) goto fail;
    if (c->gemma) {   // the full-attention table (proportional RoPE), the value norm's ones
        if (target->r1.n) { bs_fail(err, "drafter %s: a Gemma4DSparkModel drafter does not bind to an R1-folded target", dir); goto fail; }
        if (!(m->rope_inv_freq = bs_gemma4_rope_full(m->be, &b->gemma, err))) goto fail;
        if (!(m->glayers = bs_calloc(b->n_layers, sizeof *m->glayers, err)) || !(m->ones_host = bs_malloc(sizeof(float) * b->head_dim, err))) goto fail;
        for (int i = 0; i < b->head_dim; i++) m->ones_host[i] = 1.0f;
        bs_mat oh = { .data = m->ones_host, .dtype = BS_F32, .rows = 1, .cols = b->head_dim };
        if (m->be->weight(m->be, &m->ones, &oh, err)) goto fail;
    } else if (!(m->rope_inv_freq = bs_rope_table(m->be, b->rope_theta, &b->rope, b->head_dim, err))) goto fail;
    if (!(m->layers = bs_calloc(b->n_layers, sizeof *m->layers, err))) goto fail;
    for (int i = 0; i < b->n_layers; i++) if (load_layer(m, i, err)) goto fail;
    if (c->arch == BS_DRAFTER_ZLAB) {
        m->embed = target->embed;       // z-lab: the target's embedding and LM head
        if (vocab_mat(m, &target->lm_head_host, &target->lm_head, &m->lm_head, 0, err)) goto fail;
        if (c->dflash2 && load_dflash2(m, err)) goto fail;
        if (target->r1.n) { m->r1_embed = 1; m->r1_head = R1_HEAD_LM; }
    } else {
        // DeepSpec bundles frozen copies of the target's embedding and LM head. Where a copy is absent or
        // bit-identical to the target's, the drafter shares the target's matrix (no second copy in memory or
        // in the cache); a copy that differs is used as is (exact parity with the reference), with a warning.
        // (An R1-folded target: the same up to the fold, deepspec_folded_shared.)
        bs_mat emb_host, head_host;
        int has_emb = has_tensor(m, "embed_tokens.weight"), has_head = has_tensor(m, "lm_head.weight");
        double de = 0, dh = 0;
        if (target->r1.n) {
            if (deepspec_folded_shared(m, has_emb, has_head, &de, &dh, err)) goto fail;
        } else {
            if (!has_emb) emb_host = target->embed_host;
            else if (get_mat(m, "embed_tokens.weight", m->V, m->H, &emb_host, err)) goto fail;
            if (!has_emb || same_mat(&emb_host, &target->embed_host)) m->embed = target->embed;
            else {
                de = sample_rows_diff(m, &emb_host, &target->embed_host);
                if (m->be->weight(m->be, &m->embed, &emb_host, err)) goto fail;
            }
            if (!has_head && b->tie_embeddings) head_host = emb_host;
            else if (!has_head) head_host = target->lm_head_host;
            else if (get_mat(m, "lm_head.weight", m->V, m->H, &head_host, err)) goto fail;
            if (same_mat(&head_host, &target->lm_head_host)) {
                if (vocab_mat(m, &target->lm_head_host, &target->lm_head, &m->lm_head, 0, err)) goto fail;
            } else {
                dh = sample_rows_diff(m, &head_host, &target->lm_head_host);
                if (vocab_mat(m, &head_host, !has_head ? &m->embed : NULL, &m->lm_head, 0, err)) goto fail;
            }
        }
        if (de > 0 || dh > 0)
            add_warning(m, "drafter %s: its bundled %s differ%s from the target's%s (max |diff| %.3g on sampled rows); "
                    "using the drafter's copies", dir, de > 0 && dh > 0 ? "embed_tokens and lm_head" : de > 0 ? "embed_tokens" : "lm_head",
                    de > 0 && dh > 0 ? "" : "s", target->r1.n ? " up to its R1 fold (relative to the rows' largest value)" : "", de > dh ? de : dh);
        if (m->r > 0) {
            bs_mat w2_host;
            if (load_w(m, "markov_head.markov_w1.weight", m->V, m->r, &m->w1, err) ||
                get_mat(m, "markov_head.markov_w2.weight", m->V, m->r, &w2_host, err) ||
                vocab_mat(m, &w2_host, NULL, &m->w2, 1, err)) goto fail;
            if (c->markov_type == BS_MARKOV_GATED) {
                if (load_w(m, "markov_head.gate_proj.weight", m->r, (int64_t)m->H + m->r, &m->gate_w, err) ||
                    !(m->gate_b = load_host_vec(m, "markov_head.gate_proj.bias", m->r, err))) goto fail;
            } else if (c->markov_type == BS_MARKOV_RNN) {
                if (load_w(m, "markov_head.joint_proj.weight", 3 * (int64_t)m->r, 2 * (int64_t)m->r + m->H, &m->joint_w, err) ||
                    !(m->joint_b = load_host_vec(m, "markov_head.joint_proj.bias", 3 * (int64_t)m->r, err))) goto fail;
            }
        }
        if (c->conf_head) {
            int64_t in = m->H + (c->conf_with_markov ? m->r : 0);
            float *bias;
            if (load_w(m, "confidence_head.proj.weight", 1, in, &m->conf_w, err) ||
                !(bias = load_host_vec(m, "confidence_head.proj.bias", 1, err))) goto fail;
            m->conf_b = bias[0];
            free(bias);
        }
    }
    if (load_calibration(m, o, err)) goto fail;
    if (target->r1.n && bs_r1_bind_init(&m->r1, &target->r1, m->r1_head == R1_HEAD_LM, m->be, dir, err)) goto fail;

    // workspace
    size_t B = m->B, H = m->H, V = m->V, r = m->r;
    ALLOC_BE(m->ctx, (size_t)CTX_CHUNK * H * 4);
    ALLOC_BE(m->x, B * H * 4); ALLOC_BE(m->xn, B * H * 4); ALLOC_BE(m->h, B * H * 4);
    ALLOC_BE(m->q, B * m->qd * 4); ALLOC_BE(m->att, B * m->qd * 4);
    ALLOC_BE(m->kx, B * m->kd * 4); ALLOC_BE(m->vx, B * m->kd * 4);
    ALLOC_BE(m->gate, B * m->I * 4); ALLOC_BE(m->up, B * m->I * 4);
    ALLOC_BE(m->logits, B * V * 4);
    if (m->r1_head) ALLOC_BE(m->hu, B * H * 4);
    if (m->vd) {
        ALLOC_BE(m->logits_d, B * (size_t)m->vd * 4);
        ALLOC_BE(m->vids_dev, (size_t)m->vd * 4);
        m->be->upload(m->be, m->vids_dev, m->vids, (size_t)m->vd * 4);
    }
    ALLOC_BE(m->he, B * (H + r) * 4);
    if (r) { ALLOC_BE(m->vec_r, r * 4); ALLOC_BE(m->vec_z, (2 * r + H) * 4); ALLOC_BE(m->vec_3r, 3 * r * 4); }
    ALLOC_HOST(m->hv, (3 * r + 1) * 4);
    ALLOC_HOST(m->state, (r + 1) * 4);
    if (c->gemma) ALLOC_BE(m->xa, B * H * 4);   // (Gemma: the sublayers' output rows)
    if (c->dflash2) {
        size_t K = c->sel_top_k, R = c->sel_rank, G = H / c->conv_group, sel = B * (2 * K + R) * 4;
        ALLOC_BE(m->xa, B * H * 4); ALLOC_BE(m->ob, B * H * 4); ALLOC_BE(m->dyn, B * 2 * c->conv_taps * G * 4);
        ALLOC_BE(m->sel_dev, sel); ALLOC_BE(m->qsp, B * 2 * K * 4);
        ALLOC_HOST(m->sel_host, sel + (size_t)bs_selector_work_floats(&m->sel) * 4 + B * 4 * K * 4);
        if (c->embed_scale != 1.0f) {
            float *sv = bs_malloc(H * 4, err);
            if (!sv) goto fail;
            for (size_t i = 0; i < H; i++) sv[i] = c->embed_scale;
            ALLOC_BE(m->escale, H * 4); ALLOC_BE(m->zero_dyn, B * 4);
            m->be->upload(m->be, m->escale, sv, H * 4);
            free(sv);
        }
    }

    bs_drafter *d = &m->iface;
    d->name = c->dflash2 ? "dflash2" : c->gemma ? "gemma4-dspark" : c->arch == BS_DRAFTER_ZLAB ? "dflash" : m->r > 0 ? "dspark" : "deepspec-dflash";
    // The pass's cost: its layers' shape, the block, the LM head's rows (a draft vocabulary's), the weights'
    // dtype and whether the large matrices are lossy.
    snprintf(d->shape, sizeof d->shape, "%s-L%d-H%d-I%d-A%dx%dx%d-B%d-V%d-%s%s", d->name, b->n_layers, m->H, m->I, b->n_heads, b->n_kv_heads,
             b->head_dim, m->B, m->vd ? m->vd : m->V, bs_dtype_name(m->layers[0].wq.dtype), m->lossy ? "-lossy" : "");
    d->max_drafts = m->gamma;
    d->n_taps = c->n_taps;
    d->taps = m->taps;
    d->ctx_init = dflash_ctx_init;
    d->ctx_free = dflash_ctx_free;
    d->add_context = dflash_add_context;
    d->rollback = dflash_rollback;
    d->propose = dflash_propose;
    d->propose_on_device = c->dflash2 ? NULL : dflash_propose_on_device;   // DFlash 2 walks on the host: its drafts come back anyway
    d->propose_batch = dflash_propose_batch;
    d->free = dflash_free;
    *out = d;
    return 0;
fail:
    dflash_free(&m->iface);
    return -1;
}

static void dflash_free(bs_drafter *d) {
    if (!d) return;
    dflash *m = d->impl;
    bs_backend *be = m->be;
    float *bufs[] = { m->bx, m->bxn, m->bq, m->batt, m->bgate, m->bup, m->bh, m->bkx, m->bvx, m->bpred, m->blogits,
                      m->ctx, m->x, m->xn, m->h, m->q, m->att, m->gate, m->up, m->logits, m->he, m->vec_r, m->vec_z, m->vec_3r, m->kx, m->vx,
                      m->logits_d, (float *)m->vids_dev, m->rope_inv_freq, m->conv_base, m->xa, m->ob, m->dyn, m->sel_dev, m->qsp,
                      m->escale, m->zero_dyn, m->bxa, m->bob, m->bdyn,
                      m->hu, m->bhu };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) if (bufs[i]) be->free(be, bufs[i]);
    free(m->vids); free(m->rows_host[0]); free(m->rows_host[1]);
    free(m->hv); free(m->state);
    free(m->gate_b); free(m->joint_b);
    for (int l = 0; m->glayers && l < m->cfg.base.n_layers; l++) free(m->glayers[l].q_norm_host);
    free(m->glayers);
    free(m->layers);
    free(m->ones_host);
    bs_kv_pool_free(&m->ctx_pool);
    free(m->conv_proj); free(m->sel_host);
    bs_r1_bind_free(&m->r1);
    free(m->fc_folded);   // after the backend views of it (the CPU weight view is these bytes; nothing reads them now)
    bs_checkpoint_close(m->ck);
    bs_quant_config_free(&m->qc);
    free(m->dir);
    free(m);
}

// ---- one sequence's context ---------------------------------------------------------------------------------

static void dflash_ctx_free(bs_drafter *d, bs_drafter_ctx *dc) {
    dflash *m = d->impl;
    dflash_ctx *x = dc->impl;
    bs_backend *be = m->be;
    if (!x) return;
    for (int i = 0; i < x->n_recs; i++) if (x->recs[i].rec) be->record_free(be, x->recs[i].rec);
    bs_page_table_free(&x->pages);
    if (x->qdist) be->free(be, x->qdist);
    if (x->picks) be->free(be, x->picks);
    free(x);
    dc->impl = NULL;
}

static int dflash_ctx_init(bs_drafter *d, bs_drafter_ctx *dc, int max_ctx, bs_err *err) {
    dflash *m = d->impl;
    if (max_ctx <= 0 || max_ctx > m->max_ctx) max_ctx = m->max_ctx;
    *dc = (bs_drafter_ctx){ .max_ctx = max_ctx };
    dflash_ctx *x = bs_calloc(1, sizeof *x, err);
    if (!x) return -1;
    dc->impl = x;
    // No K/V memory yet: the context's pages come from the drafter's pool as rows arrive.
    if (bs_page_table_init(&x->pages, &m->ctx_pool, max_ctx + m->B, err)) { bs_wrap(err, "drafter context for %d positions", max_ctx); goto fail; }
    if (!(x->qdist = m->be->alloc(m->be, (size_t)m->gamma * m->V * 4, err)) || !(x->picks = m->be->alloc(m->be, 2 * (size_t)m->B * 4, err)))
        goto fail;
    x->conf_out = (float *)(x->picks + m->B);
    return 0;
fail:
    dflash_ctx_free(d, dc);
    return -1;
}

static int dflash_add_context(bs_drafter *d, bs_drafter_ctx *dc, const float *feat, int n, bs_err *err) {
    dflash *m = d->impl;
    dflash_ctx *x = dc->impl;
    const bs_qwen3_config *c = &m->cfg.base;
    bs_backend *be = m->be;
    if (n < 0) return bs_fail(err, "drafter: negative context row count %d", n);
    if (dc->n_ctx + n > dc->max_ctx)
        return bs_fail(err, "drafter context full: %d rows held + %d new exceed its capacity %d", dc->n_ctx, n, dc->max_ctx);
    if (bs_page_table_grow(&x->pages, dc->n_ctx + n, err)) return bs_wrap(err, "drafter context");
    size_t fw = (size_t)m->cfg.n_taps * m->H;
    const int P = m->ctx_pool.page_rows;
    // Chunks of at most CTX_CHUNK rows that never straddle a page: the projections write their rows in place.
    for (int r0 = 0, rows; r0 < n; r0 += rows) {
        int pos = dc->n_ctx + r0, in_page = P - pos % P;
        rows = n - r0 < CTX_CHUNK ? n - r0 : CTX_CHUNK;
        if (rows > in_page) rows = in_page;
        be->matmul(be, m->ctx, feat + (size_t)r0 * fw, rows, &m->fc, 0);
        be->rmsnorm(be, m->ctx, m->ctx, rows, m->H, &m->hidden_norm, c->rms_eps);
        // Gemma-4: K, V (k_proj's output with attention_k_eq_v) and the weightless value norm, layer by layer.
        for (int l = 0; m->cfg.gemma && l < c->n_layers; l++)
            bs_gemma4_project_qkv(be, &m->layers[l], &m->glayers[l], &m->ones, c->rms_eps, m->ctx, rows, NULL, bs_page_table_k_row(&x->pages, l, pos),
                                  bs_page_table_v_row(&x->pages, l, pos));
        // Every layer's K and V projections read the same rows: one call per 8 layers.
        for (int l0 = 0; !m->cfg.gemma && l0 < c->n_layers; l0 += 8) {
            float *ys[16]; const bs_mat *ws[16]; int nm = 0;
            for (int l = l0; l < c->n_layers && l < l0 + 8; l++) {
                ys[nm] = bs_page_table_k_row(&x->pages, l, pos); ws[nm++] = &m->layers[l].wk;
                ys[nm] = bs_page_table_v_row(&x->pages, l, pos); ws[nm++] = &m->layers[l].wv;
            }
            bs_matmul_multi(be, nm, ys, m->ctx, rows, ws, 0);
        }
        // Every layer's new K rows: k_norm + RoPE, in one call where the backend takes several.
        for (int l0 = 0; l0 < c->n_layers; l0 += 16) {
            float *ks[16]; const bs_mat *ns[16]; int nm = 0;
            for (int l = l0; l < c->n_layers && l < l0 + 16; l++) { ks[nm] = bs_page_table_k_row(&x->pages, l, pos); ns[nm++] = &m->layers[l].k_norm; }
            bs_head_norm_rope_multi(be, nm, ks, rows, c->n_kv_heads, c->head_dim, ns, c->rms_eps, pos, m->rope_inv_freq);
        }
    }
    if (bs_backend_check(be, err)) return bs_wrap(err, "drafter: adding %d context rows", n);
    dc->n_ctx += n;
    return 0;
}

static int dflash_rollback(bs_drafter *d, bs_drafter_ctx *dc, int n_ctx, bs_err *err) {
    if (n_ctx < 0 || n_ctx > dc->n_ctx) return bs_fail(err, "drafter: cannot roll the context back to %d rows (it holds %d)", n_ctx, dc->n_ctx);
    dc->n_ctx = n_ctx;
    if (dc->impl) bs_page_table_shrink(&((dflash_ctx *)dc->impl)->pages, n_ctx);
    return 0;
}

// ---- one drafting round -------------------------------------------------------------------------------------

// The buffers one backbone pass works in: a single block's (the drafter's own scratch) or several blocks'
// (propose_batch's, BATCH_ROWS rows).
typedef struct block_bufs { float *x, *xn, *q, *kx, *vx, *att, *gate, *up, *h, *xa, *ob, *dyn; } block_bufs;

// DFlash 2's convolution of site k (0: attention, 1: MLP) of layer l at `stage` over `rows` rows (whole blocks):
// stage 0 computes the site's dynamic coefficients from its normed input `in` and writes y = Conv_0(in); stage 1
// adds Conv_1(in) to y with the same coefficients (docs/dflash2.md: both stages use the coefficients of the
// sublayer's normed input).
static void conv_site(dflash *m, const block_bufs *b, int rows, int l, int k, int stage, float *y, const float *in) {
    const bs_drafter_config *c = &m->cfg;
    int taps = c->conv_taps, G = m->H / c->conv_group, stride = 2 * taps * G;
    if (stage == 0) m->be->matmul(m->be, b->dyn, in, rows, &m->conv_proj[l * 2 + k], 0);
    const float *base = m->conv_base + ((size_t)(l * 2 + k) * 2 + stage) * taps * m->H;
    m->be->dyn_conv(m->be, y, in, rows, m->H, m->B, taps, base, b->dyn + (size_t)stage * taps * G, stride, c->conv_group, stage);
}

// One block's attention in layer l (q, att: its rows). z-lab DFlash: non-causal over [context ; block], a sliding
// layer seeing the last W context rows plus the whole block. DFlash 2 (docs/dflash2.md, "Attention"): row i at
// position n_ctx + i sees the context keys within the window (distance < W, the MLX reference's mask) and the
// block's keys (all of them, or those up to its own under is_causal). The window's start differs per row, which
// one attention call cannot say: a windowed layer attends row by row (each call's key count and position are
// position arguments, so a recorded pass replays at any context length).
static void block_attention(dflash *m, const bs_kv_view *kv, int l, int n_ctx, const float *q, float *att) {
    const bs_qwen3_config *c = &m->cfg.base;
    bs_backend *be = m->be;
    int B = m->B, W = m->cfg.layer_window[l];
    if (!m->cfg.dflash2) {
        be->attention(be, att, q, kv, B, c->n_heads, c->n_kv_heads, c->head_dim, n_ctx + B, n_ctx, 0, W > 0 ? W + B : 0);
        return;
    }
    int causal = m->cfg.layer_causal[l];
    if (W == 0) { be->attention(be, att, q, kv, B, c->n_heads, c->n_kv_heads, c->head_dim, n_ctx + B, n_ctx, causal, 0); return; }
    for (int i = 0; i < B; i++) {
        int block_keys = causal ? i + 1 : B, ctx_keys = W - 1 - i > 0 ? W - 1 - i : 0;
        be->attention(be, att + (size_t)i * m->qd, q + (size_t)i * m->qd, kv, 1, c->n_heads, c->n_kv_heads, c->head_dim,
                      n_ctx + B, n_ctx + i, causal, block_keys + ctx_keys);
    }
}

// DeepSpec's Gemma-4 DSpark backbone after the embedding lookup (Gemma4DSparkDecoderLayer): the noise rows times
// sqrt(H) (Gemma4TextScaledWordEmbedding), then per layer the target's Gemma-4 layer (model/gemma4.c) with its
// attention over [context ; block] as DSpark's (non-causal; scale 1 through the q_norm folded with sqrt(hd)), and
// layer_scalar; the final norm into b->h. b->xa is the sublayers' output scratch.
static void gemma_layers(dflash *m, const block_bufs *b, int nb, dflash_ctx *const *xs, const int *n_ctx) {
    const bs_qwen3_config *c = &m->cfg.base;
    bs_backend *be = m->be;
    int B = m->B, H = m->H, R = nb * B, hd = c->head_dim;
    size_t qw = (size_t)m->qd * B, kw = (size_t)m->kd * B;
    be->scale(be, b->x, (float)sqrt((double)H), (size_t)R * H);
    for (int l = 0; l < c->n_layers; l++) {
        const bs_qwen3_layer *L = &m->layers[l];
        const bs_gemma4_layer *G = &m->glayers[l];
        be->rmsnorm(be, b->xn, b->x, R, H, &L->attn_norm, c->rms_eps);
        bs_gemma4_project_qkv(be, L, G, &m->ones, c->rms_eps, b->xn, R, b->q, b->kx, b->vx);
        for (int j = 0; j < nb; j++) {
            const bs_kv_view kv = bs_page_table_view(&xs[j]->pages, l);
            bs_qk_norm_rope_store(be, b->q + j * qw, b->kx + j * kw, b->vx + j * kw, B, c->n_heads, c->n_kv_heads, hd, &G->q_norm, &L->k_norm,
                                  c->rms_eps, n_ctx[j], m->rope_inv_freq, &kv);
            block_attention(m, &kv, l, n_ctx[j], b->q + j * qw, b->att + j * qw);
        }
        bs_gemma4_attn_out_mlp(be, c, L, G, b->x, b->xn, b->att, b->xa, b->gate, b->up, R);
        if (G->scalar != 1.0f) be->scale(be, b->x, G->scalar, (size_t)R * H);
    }
    be->rmsnorm(be, b->h, b->x, R, H, &m->norm, c->rms_eps);
}

// The backbone over nb blocks of B rows (ids [nb][B]); block j sits at positions n_ctx[j] .. of context xs[j].
// Out: b->h [nb * B][H] after the final norm. The block's K/V rows go to each context's cache rows after its
// committed ones (transient: the next pass overwrites them). Every op that depends on where a block sits (RoPE,
// the stored K/V rows, the attention's key count) takes n_ctx as a position argument, so a recording of a
// one-block pass replays at any context length. DFlash 2 wraps each sublayer in its convolutions: the sublayer
// reads Conv_0(normed x) (xa) and x gains Conv_1(its output) (ob).
static void backbone_blocks(dflash *m, const block_bufs *b, int nb, dflash_ctx *const *xs, const int *n_ctx, const int32_t *ids) {
    const bs_qwen3_config *c = &m->cfg.base;
    bs_backend *be = m->be;
    int B = m->B, H = m->H, R = nb * B, hd = c->head_dim, d2 = m->cfg.dflash2;
    size_t qw = (size_t)m->qd * B, kw = (size_t)m->kd * B;
    // Against an R1-folded target the embedded rows (the target's table, folded) go back into the drafter's basis.
    if (d2 && m->escale) {   // input_embedding_scale: a 1-tap convolution with the scale as its base kernel
        be->embed(be, b->xa, &m->embed, ids, R);
        if (m->r1_embed) bs_r1_unrotate_rows(&m->r1, b->xa, R);
        be->dyn_conv(be, b->x, b->xa, R, H, B, 1, m->escale, m->zero_dyn, 0, H, 0);   // (stride 0: every row reads the one zero)
    } else {
        be->embed(be, b->x, &m->embed, ids, R);
        if (m->r1_embed) bs_r1_unrotate_rows(&m->r1, b->x, R);
    }
    if (m->cfg.gemma) { gemma_layers(m, b, nb, xs, n_ctx); return; }
    for (int l = 0; l < c->n_layers; l++) {
        bs_qwen3_layer *L = &m->layers[l];
        be->rmsnorm(be, b->xn, b->x, R, H, &L->attn_norm, c->rms_eps);
        if (d2) conv_site(m, b, R, l, 0, 0, b->xa, b->xn);
        const float *ain = d2 ? b->xa : b->xn;
        const bs_mat *ws[3] = { &L->wq, &L->wk, &L->wv };
        const bs_kv_view kv0 = bs_page_table_view(&xs[0]->pages, l);
        if (nb == 1)   // the fused q/k/v step where the backend has one (bit-identical to the two steps below)
            bs_qkv_norm_rope_store(be, ain, B, ws, b->q, b->kx, b->vx, c->n_heads, c->n_kv_heads, hd, &L->q_norm, &L->k_norm, c->rms_eps, n_ctx[0],
                                   m->rope_inv_freq, &kv0);
        else {
            float *qkv[3] = { b->q, b->kx, b->vx };
            bs_matmul_multi(be, 3, qkv, ain, R, ws, 0);
        }
        for (int j = 0; j < nb; j++) {
            const bs_kv_view kv = bs_page_table_view(&xs[j]->pages, l);
            if (nb > 1)
                bs_qk_norm_rope_store(be, b->q + j * qw, b->kx + j * kw, b->vx + j * kw, B, c->n_heads, c->n_kv_heads, hd, &L->q_norm, &L->k_norm,
                                      c->rms_eps, n_ctx[j], m->rope_inv_freq, &kv);
            block_attention(m, &kv, l, n_ctx[j], b->q + j * qw, b->att + j * qw);
        }
        if (d2) {
            be->matmul(be, b->ob, b->att, R, &L->wo, 0);
            conv_site(m, b, R, l, 0, 1, b->x, b->ob);
        } else be->matmul(be, b->x, b->att, R, &L->wo, 1);
        be->rmsnorm(be, b->xn, b->x, R, H, &L->mlp_norm, c->rms_eps);
        if (d2) conv_site(m, b, R, l, 1, 0, b->xa, b->xn);
        float *gu[2] = { b->gate, b->up };
        const bs_mat *wgu[2] = { &L->w_gate, &L->w_up };
        bs_matmul_multi(be, 2, gu, d2 ? b->xa : b->xn, R, wgu, 0);
        if (d2) {
            bs_swiglu_matmul(be, b->ob, b->gate, b->up, R, &L->w_down, 0);
            conv_site(m, b, R, l, 1, 1, b->x, b->ob);
        } else bs_swiglu_matmul(be, b->x, b->gate, b->up, R, &L->w_down, 1);
    }
    be->rmsnorm(be, b->h, b->x, R, H, &m->norm, c->rms_eps);
}

// The backbone on one block (ids[B]) in the drafter's own scratch: m->h[B][H].
static void backbone(dflash *m, dflash_ctx *x, int n_ctx, const int32_t *ids) {
    block_bufs b = { m->x, m->xn, m->q, m->kx, m->vx, m->att, m->gate, m->up, m->h, m->xa, m->ob, m->dyn };
    backbone_blocks(m, &b, 1, &x, &n_ctx, ids);
}

// logits rows [k, k + n) <- logits_d's (draft vocabulary), -inf for every other token.
static void spread_rows(dflash *m, int k, int n) {
    m->be->scatter_cols(m->be, m->logits + (size_t)k * m->V, m->V, m->logits_d + (size_t)k * m->vd, m->vd, n, m->vids_dev, -INFINITY);
}

// DFlash 2: the selector's inputs for the walk into sel_dev: each slot's top-K candidates of the LM head's row
// (over the draft vocabulary's columns, mapped to ids, where there is one) and z = hidden_projection(h) of the
// slot's row. Backend ops only, so they join the recorded pass; the walk itself runs on the host.
static void selector_inputs(dflash *m, const float *rows, int n) {
    int K = m->cfg.sel_top_k, B = m->B;
    int32_t *ids = m->sel_dev;
    float *vals = (float *)m->sel_dev + (size_t)B * K, *z = vals + (size_t)B * K;
    if (m->vd) m->be->topk(m->be, ids, vals, m->logits_d, n, m->vd, K, m->vids_dev);
    else m->be->topk(m->be, ids, vals, m->logits, n, m->V, K, NULL);
    m->be->matmul(m->be, z, rows, n, &m->sel_proj, 0);
}

// The rows the LM head multiplies: the drafter's normed hidden rows, or against an R1-folded target their
// rotation into the basis of the target's head (into u; the rows themselves stay as they are: a Markov,
// confidence or selector head reads them in the drafter's basis).
static const float *head_rows(dflash *m, const float *rows, int n, float *u) {
    if (!m->r1_head) return rows;
    bs_r1_to_head(&m->r1, m->r1_head == R1_HEAD_LM ? m->r1.head_pre : m->r1.signs, u, rows, n);
    return u;
}

// Gemma-4 DSpark: the final-logit soft-cap on rows of the LM head's output (before any Markov bias, as
// DeepSpec's compute_logits); cols: V, or the draft vocabulary's rows.
static void head_softcap(dflash *m, float *logits, int rows, int cols) {
    float cap = m->cfg.base.gemma.final_softcap;
    if (m->cfg.gemma && cap > 0 && rows > 0) m->be->softcap(m->be, logits, cap, (size_t)rows * cols);
}

// Backbone + the LM head over the n prediction rows (z-lab: rows 1..n; DeepSpec: rows 0..n-1). With a
// draft vocabulary the head's rows land in logits_d, spread over logits when `spread` (device picks
// read logits_d directly).
static void block_pass(dflash *m, dflash_ctx *x, int n_ctx, const int32_t *ids, int n, int spread) {
    backbone(m, x, n_ctx, ids);
    if (n <= 0) return;
    const float *rows = m->cfg.arch == BS_DRAFTER_ZLAB ? m->h + m->H : m->h;
    const float *head_in = head_rows(m, rows, n, m->hu);   // rows stay the drafter's own
    if (!m->vd) {
        m->be->matmul(m->be, m->logits, head_in, n, &m->lm_head, 0);
        head_softcap(m, m->logits, n, m->V);
    } else {
        m->be->matmul(m->be, m->logits_d, head_in, n, &m->lm_head, 0);
        head_softcap(m, m->logits_d, n, m->vd);
        if (spread && !m->cfg.dflash2) spread_rows(m, 0, n);
    }
    if (m->cfg.dflash2) selector_inputs(m, rows, n);
}

// Logits row k += W2 . vec (the Markov bias), over the draft vocabulary's columns where there is one.
static void add_markov_bias(dflash *m, int k, const float *vec) {
    if (!m->vd) { m->be->matmul(m->be, m->logits + (size_t)k * m->V, vec, 1, &m->w2, 1); return; }
    m->be->matmul(m->be, m->logits_d + (size_t)k * m->vd, vec, 1, &m->w2, 1);
    spread_rows(m, k, 1);
}

// Greedy picks on the device. Greedy drafting needs no host arithmetic between the picks (z-lab and
// DeepSpec DFlash: one argmax over the rows; DSpark with the vanilla Markov head: argmax of row k, that
// token's W1 row, W2 times it added to row k+1, ...), so the picks run as backend ops into x->picks
// (then the confidence logits beside them) and join the recorded pass: the host waits once per round
// instead of once per drafted token. Gated and RNN heads (gate arithmetic on the host), sampling (the host
// draws from q) and inspection (it reads the logits before the walk) take the step-by-step path.
// The confidence head's logits of rows [0, n) into conf_out: w . [h_k ; W1[x_{k-1}]] (or w . h_k).
static void conf_head_logits(dflash *m, dflash_ctx *x, int n) {
    m->be->matmul(m->be, x->conf_out, m->cfg.conf_with_markov ? m->he : m->h, n, &m->conf_w, 0);
}
static float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
// cl[k] (downloaded conf_out) += the head's bias; out->conf[k] = sigmoid(cl[k]), or sigmoid(cl[k] / T_k + b_k) with a
// calibration (cl keeps the head's raw logit: inspection reports the model's tensor).
static void set_confidences(const dflash *m, bs_draft *out, float *cl, int n) {
    for (int k = 0; k < n; k++) {
        cl[k] += m->conf_b;
        out->conf[k] = sigmoidf_(m->calibrated ? cl[k] / m->conf_T[k] + m->conf_bias[k] : cl[k]);
    }
    out->has_conf = 1;
}

static int device_picks_ok(const dflash *m, const bs_sampling *s, const bs_dflash_inspect *ins) {
    return bs_sampling_greedy(s) && !ins && m->be->argmax_to && m->be->embed_from && !m->cfg.dflash2 &&
           (m->cfg.arch == BS_DRAFTER_ZLAB || m->r == 0 || m->cfg.markov_type == BS_MARKOV_VANILLA);
}
static void device_picks(dflash *m, dflash_ctx *x, int32_t anchor, int n) {
    bs_backend *be = m->be;
    int H = m->H, r = m->r, V = m->V;
    // With a draft vocabulary the picks are argmaxes over its columns mapped to token ids (equal to the
    // argmax of the spread rows: the columns are in id order, the other tokens -inf), so the rows are
    // not spread here.
    if (m->cfg.arch == BS_DRAFTER_ZLAB || r == 0) {
        if (m->vd) be->argmax_to(be, x->picks, m->logits_d, n, m->vd, m->vids_dev);
        else be->argmax_to(be, x->picks, m->logits, n, V, NULL);
    }
    else {
        be->copy_rows(be, m->he, H + r, m->h, H, n, H);
        for (int k = 0; k < n; k++) {
            float *e = m->he + (size_t)k * (H + r) + H, *lrow = m->logits + (size_t)k * V;
            // W1[previous token]: the anchor (id 0 of the pass, a replay input like the block's ids), then the picks
            if (k == 0) be->embed(be, e, &m->w1, &anchor, 1);
            else be->embed_from(be, e, &m->w1, x->picks + k - 1, 1);
            if (m->vd) {
                be->matmul(be, m->logits_d + (size_t)k * m->vd, e, 1, &m->w2, 1);
                be->argmax_to(be, x->picks + k, m->logits_d + (size_t)k * m->vd, 1, m->vd, m->vids_dev);
            } else {
                be->matmul(be, lrow, e, 1, &m->w2, 1);
                be->argmax_to(be, x->picks + k, lrow, 1, V, NULL);
            }
        }
    }
    if (m->cfg.arch != BS_DRAFTER_ZLAB && m->cfg.conf_head) conf_head_logits(m, x, n);
}

static void draft_pass(dflash *m, dflash_ctx *x, int n_ctx, const int32_t *ids, int n, int picks) {
    block_pass(m, x, n_ctx, ids, n, !picks);
    if (picks) device_picks(m, x, ids[0], n);
}

// draft_pass, recorded the second time a (row count, picks) pair is seen and replayed from then on (as
// the target's forward does, qwen3.c); plain on backends without recording, or with graphs off. A
// recording that fails is an error, as the target's is (the backend says why: e.g. a workspace it
// would have had to grow while recording).
static int draft_pass_recorded(dflash *m, dflash_ctx *x, int n_ctx, const int32_t *ids, int n, int picks, bs_err *err) {
    bs_backend *be = m->be;
    const int cap = (int)(sizeof x->recs / sizeof *x->recs);
    int i = 0;
    while (i < x->n_recs && (x->recs[i].n != n || x->recs[i].picks != picks)) i++;
    if (!m->target->use_graphs || !be->record_begin || (i == x->n_recs && x->n_recs == cap)) { draft_pass(m, x, n_ctx, ids, n, picks); return 0; }
    if (i == x->n_recs) { x->recs[i].n = n; x->recs[i].picks = picks; x->recs[i].seen = 0; x->recs[i].rec = NULL; x->n_recs++; }
    int pos0 = n_ctx;
    if (!x->recs[i].rec) {
        if (x->recs[i].seen++ < 1 || be->record_begin(be, pos0)) { draft_pass(m, x, n_ctx, ids, n, picks); return 0; }
        draft_pass(m, x, n_ctx, ids, n, picks);
        if (!(x->recs[i].rec = be->record_end(be, err))) return bs_wrap(err, "drafter: recording the block pass of %d drafts", n);
        if (bs_backend_check(be, err)) {   // an op failed while recording: the recording is incomplete, never replay it
            be->record_free(be, x->recs[i].rec);
            x->recs[i].rec = NULL;
            return bs_wrap(err, "drafter: recording the block pass of %d drafts", n);
        }
    }
    be->replay(be, x->recs[i].rec, pos0, ids, m->B);
    return 0;
}

// Picks d_k from logits row (device) k; fills q row k when sampling.
static int32_t pick(dflash *m, dflash_ctx *x, const float *dev_row, int k, const bs_sampling *s, bs_rng *rng) {
    bs_backend *be = m->be;
    int V = m->V;
    if (bs_sampling_greedy(s)) { int32_t t; be->argmax(be, &t, dev_row, 1, V); return t; }
    int32_t t;
    double u = bs_rng_uniform(rng);
    bs_sample_rows(be, s, x->qdist + (size_t)k * V, dev_row, 1, V, &u, &t);
    return t;
}

// Adds the Markov bias for step k (row k of logits, previous token prev) on the device.
// he row k holds [h_k ; W1[prev]] afterwards.
static void markov_step(dflash *m, int k, int32_t prev) {
    bs_backend *be = m->be;
    int H = m->H, r = m->r;
    float *row = m->he + (size_t)k * (H + r), *e = row + H;
    be->embed(be, e, &m->w1, &prev, 1);
    switch (m->cfg.markov_type) {
    case BS_MARKOV_VANILLA:      // bias = W2 W1[prev]
        add_markov_bias(m, k, e);
        break;
    case BS_MARKOV_GATED: {      // bias = W2 (sigmoid(gate_proj([h ; e])) * e)
        be->matmul(be, m->vec_3r, row, 1, &m->gate_w, 0);
        be->download(be, m->hv, m->vec_3r, sizeof(float) * r);
        be->download(be, m->hv + r, e, sizeof(float) * r);   // hv has 3r + 1 floats: [gate | e]
        for (int i = 0; i < r; i++) m->hv[i] = sigmoidf_(m->hv[i] + m->gate_b[i]) * m->hv[r + i];
        be->upload(be, m->vec_r, m->hv, sizeof(float) * r);
        add_markov_bias(m, k, m->vec_r);
        break;
    }
    case BS_MARKOV_RNN: {        // z = [s ; e ; h]; [g ; c ; o] = joint(z); s' = sg*s + (1-sg)*tanh(c); bias = W2 tanh(o)
        be->upload(be, m->vec_z, m->state, sizeof(float) * r);
        be->copy_rows(be, m->vec_z + r, r, e, r, 1, r);
        be->copy_rows(be, m->vec_z + 2 * r, H, row, H, 1, H);
        be->matmul(be, m->vec_3r, m->vec_z, 1, &m->joint_w, 0);
        be->download(be, m->hv, m->vec_3r, sizeof(float) * 3 * r);
        for (int i = 0; i < 3 * r; i++) m->hv[i] += m->joint_b[i];
        for (int i = 0; i < r; i++) {
            float g = sigmoidf_(m->hv[i]);
            m->state[i] = g * m->state[i] + (1 - g) * tanhf(m->hv[r + i]);
            m->hv[i] = tanhf(m->hv[2 * r + i]);
        }
        be->upload(be, m->vec_r, m->hv, sizeof(float) * r);
        add_markov_bias(m, k, m->vec_r);
        break;
    }
    default: break;
    }
}

// DFlash 2's drafts after a block pass (sel_dev holds the selector's inputs, selector_inputs): one download,
// the unary transform (output_multiplier, softcap) on the candidates' logits, then the walk on the host. When
// sampling, q_k is the walk's distribution over slot k's candidates and zero elsewhere, spread into the
// context's qdist rows: exactly the distribution d_k was drawn from, which the rejection test then uses.
static void dflash2_picks(dflash *m, dflash_ctx *x, int32_t anchor, int n, const bs_sampling *s, bs_rng *rng, bs_draft *out,
                          const bs_dflash_inspect *ins) {
    bs_backend *be = m->be;
    const bs_drafter_config *c = &m->cfg;
    int B = m->B, K = c->sel_top_k, R = c->sel_rank, V = m->V, greedy = bs_sampling_greedy(s);
    int32_t *ids = m->sel_host;
    float *vals = (float *)m->sel_host + (size_t)B * K, *z = vals + (size_t)B * K;
    float *work = z + (size_t)B * R, *scores = work + bs_selector_work_floats(&m->sel), *q = scores + (size_t)B * K, *up = q + (size_t)B * K;
    be->download(be, m->sel_host, m->sel_dev, sizeof(float) * B * (2 * K + R));
    for (int i = 0; i < n * K; i++) {
        if (ids[i] < 0 || ids[i] >= V) {   // only after a fault (the ids are then garbage): never index the codebooks with them
            bs_backend_fail(be, "drafter: top-K candidate id %d outside the vocabulary", ids[i]);
            memset(ids, 0, sizeof(int32_t) * n * K);
            break;
        }
        vals[i] = bs_dflash2_unary(vals[i], c->out_mult, c->softcap);
    }
    double u[BS_MAX_DRAFT];
    for (int k = 0; k < n && !greedy; k++) u[k] = ins && ins->uniforms ? ins->uniforms[k] : bs_rng_uniform(rng);
    bs_selector_walk(&m->sel, n, ids, vals, z, anchor, greedy ? 0.0f : s->temperature, u, work, out->tokens, scores, q);
    if (!greedy) {
        // Row k's candidates in id order with their q (scatter_cols wants increasing columns), then spread.
        int32_t *qi = (int32_t *)up;
        float *qv = up + (size_t)B * K;
        for (int k = 0; k < n; k++)
            for (int j = 0; j < K; j++) {
                int32_t id = ids[k * K + j];
                float qq = q[k * K + j];
                int i = j;
                while (i > 0 && qi[k * K + i - 1] > id) { qi[k * K + i] = qi[k * K + i - 1]; qv[k * K + i] = qv[k * K + i - 1]; i--; }
                qi[k * K + i] = id; qv[k * K + i] = qq;
            }
        be->upload(be, m->qsp, up, sizeof(float) * 2 * B * K);
        for (int k = 0; k < n; k++)
            be->scatter_cols(be, x->qdist + (size_t)k * V, V, (const float *)m->qsp + (size_t)B * K + (size_t)k * K, K, 1,
                             (const int32_t *)m->qsp + (size_t)k * K, 0.0f);
    }
    if (ins) {
        if (ins->logits) {   // the unary logits of the whole vocabulary (-inf outside a draft vocabulary)
            if (m->vd) spread_rows(m, 0, n);
            be->download(be, ins->logits, m->logits, sizeof(float) * n * V);
            for (size_t i = 0; i < (size_t)n * V; i++) ins->logits[i] = bs_dflash2_unary(ins->logits[i], c->out_mult, c->softcap);
        }
        if (ins->cand_ids) memcpy(ins->cand_ids, ids, sizeof(int32_t) * n * K);
        if (ins->cand_unary) memcpy(ins->cand_unary, vals, sizeof(float) * n * K);
        if (ins->sel_hidden) memcpy(ins->sel_hidden, z, sizeof(float) * n * R);
        if (ins->cand_scores) memcpy(ins->cand_scores, scores, sizeof(float) * n * K);
        if (ins->walk_q) memcpy(ins->walk_q, q, sizeof(float) * n * K);
    }
    out->n = n;
    out->q = greedy ? NULL : x->qdist;
}

// After a block pass (m->h, m->logits hold the block's rows): the drafts d_1..d_n, greedy or drawn (q
// rows into the context's qdist), the Markov walk and the confidences; or, with `defer`, the picks left on
// the device.
static int take_picks(dflash *m, dflash_ctx *x, int32_t anchor, int n, int on_device, const bs_sampling *s, bs_rng *rng, bs_draft *out,
                      const bs_dflash_inspect *ins, int defer) {
    bs_backend *be = m->be;
    const bs_drafter_config *c = &m->cfg;
    int B = m->B, H = m->H, V = m->V, r = m->r;
    if (c->dflash2) { dflash2_picks(m, x, anchor, n, s, rng, out, ins); return 0; }
    if (on_device && defer) { out->n = n; out->dev_tokens = x->picks; return 0; }
    if (on_device) {
        int32_t got[2 * (BS_MAX_DRAFT + 1)];
        be->download(be, got, x->picks, sizeof(int32_t) * 2 * B);
        memcpy(out->tokens, got, sizeof(int32_t) * n);
        if (c->arch != BS_DRAFTER_ZLAB && c->conf_head) {
            float cl[BS_MAX_DRAFT];
            memcpy(cl, got + B, sizeof(float) * n);
            set_confidences(m, out, cl, n);
        }
    } else if (c->arch == BS_DRAFTER_ZLAB) {
        // Rows 1..n predict their own positions; rows are independent: q_k = processed(row k).
        if (ins && ins->logits) be->download(be, ins->logits, m->logits, sizeof(float) * n * V);
        if (bs_sampling_greedy(s)) be->argmax(be, out->tokens, m->logits, n, V);
        else {   // the rows' distributions and draws where the logits are, one uniform per row in order
            double u[BS_MAX_DRAFT];
            for (int k = 0; k < n; k++) u[k] = bs_rng_uniform(rng);
            if (defer) { bs_sample_rows_to(be, s, x->qdist, m->logits, n, V, u, x->picks); out->dev_tokens = x->picks; }
            else bs_sample_rows(be, s, x->qdist, m->logits, n, V, u, out->tokens);
        }
    } else {
        // Rows 0..n-1 predict the next position; Markov walk from the anchor.
        if (ins && ins->logits) be->download(be, ins->logits, m->logits, sizeof(float) * n * V);
        if (r > 0) {
            be->copy_rows(be, m->he, H + r, m->h, H, n, H);
            memset(m->state, 0, sizeof(float) * r);
        }
        float cl[BS_MAX_DRAFT];
        int have_cl = c->conf_head;
        if (!bs_sampling_greedy(s) && m->be->embed_from && (r == 0 || c->markov_type == BS_MARKOV_VANILLA) && !bs_tuning_get()->drafter_step_walk) {
            // Sampled walk without a host round trip per draft: the uniforms are drawn first (the order
            // the step-by-step walk draws them in, so a seeded run drafts the same tokens), each draw lands
            // in picks[k] where the next step's W1 row is gathered from; one download at the end.
            double u[BS_MAX_DRAFT];
            for (int k = 0; k < n; k++) u[k] = bs_rng_uniform(rng);
            for (int k = 0; k < n; k++) {
                if (r > 0) {
                    float *e = m->he + (size_t)k * (H + r) + H;
                    if (k == 0) be->embed(be, e, &m->w1, &anchor, 1);
                    else be->embed_from(be, e, &m->w1, x->picks + k - 1, 1);
                    add_markov_bias(m, k, e);
                }
                bs_sample_rows_to(be, s, x->qdist + (size_t)k * V, m->logits + (size_t)k * V, 1, V, &u[k], x->picks + k);
            }
            if (c->conf_head) conf_head_logits(m, x, n);
            if (defer) {   // the draws stay in picks for the verify; no confidences
                out->dev_tokens = x->picks;
                have_cl = 0;
            } else {
                int32_t got[2 * (BS_MAX_DRAFT + 1)];
                be->download(be, got, x->picks, sizeof(int32_t) * 2 * B);
                memcpy(out->tokens, got, sizeof(int32_t) * n);
                memcpy(cl, got + B, sizeof(float) * n);
            }
        } else {
            int32_t prev = anchor;
            for (int k = 0; k < n; k++) {
                if (r > 0) markov_step(m, k, prev);
                out->tokens[k] = prev = pick(m, x, m->logits + (size_t)k * V, k, s, rng);
            }
            if (c->conf_head) {
                conf_head_logits(m, x, n);
                be->download(be, cl, x->conf_out, sizeof(float) * n);
            }
        }
        if (ins && ins->step_logits) be->download(be, ins->step_logits, m->logits, sizeof(float) * n * V);
        if (have_cl) {
            set_confidences(m, out, cl, n);
            if (ins && ins->conf_logits) memcpy(ins->conf_logits, cl, sizeof(float) * n);
        }
    }
    out->n = n;
    out->q = bs_sampling_greedy(s) ? NULL : x->qdist;
    return 0;
}

// What every proposal checks first.
static int check_propose(const dflash *m, const bs_drafter_ctx *dc, int32_t anchor, const bs_sampling *s, const bs_rng *rng, bs_err *err) {
    if (anchor < 0 || anchor >= m->V) return bs_fail(err, "drafter: anchor token %d is outside the vocabulary [0, %d)", anchor, m->V);
    if (!dc->impl) return bs_fail(err, "drafter: the sequence context was not initialised (ctx_init)");
    if (dc->n_ctx > dc->max_ctx)   // the cache has B spare rows for the block after max_ctx context rows
        return bs_fail(err, "drafter: anchor position %d is past its context capacity %d", dc->n_ctx, dc->max_ctx);
    if (!bs_sampling_greedy(s) && !rng) return bs_fail(err, "drafter: sampling needs an RNG");
    return 0;
}

// A block pass writes its B rows after the context: the context's table takes their pages, and the ops will
// read its page table (uploaded where it changed; a recorded pass reads it at replay).
static int block_pages(dflash *m, dflash_ctx *x, int n_ctx, bs_err *err) {
    if (bs_page_table_grow(&x->pages, n_ctx + m->B, err)) return bs_wrap(err, "drafter: the block's rows");
    bs_page_table_sync(&x->pages);
    return 0;
}

// defer: picks and draws made on the device stay there (out->dev_tokens; propose_on_device).
static int forward_block(bs_drafter *d, bs_drafter_ctx *dc, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng, bs_draft *out,
                         const bs_dflash_inspect *ins, int defer, bs_err *err) {
    dflash *m = d->impl;
    bs_backend *be = m->be;
    const bs_drafter_config *c = &m->cfg;
    int B = m->B, H = m->H;
    memset(out, 0, sizeof *out);
    if (check_propose(m, dc, anchor, s, rng, err)) return -1;
    dflash_ctx *x = dc->impl;
    int n = max_n < m->gamma ? max_n : m->gamma;
    if (n <= 0 && !ins) return 0;
    if (n < 0) n = 0;
    int32_t ids[BS_MAX_DRAFT + 1];
    ids[0] = anchor;
    for (int i = 1; i < B; i++) ids[i] = c->mask_token_id;
    const int on_device = device_picks_ok(m, s, ins);
    if (block_pages(m, x, dc->n_ctx, err) || draft_pass_recorded(m, x, dc->n_ctx, ids, n, on_device, err)) return -1;
    if (ins && ins->block_ids) memcpy(ins->block_ids, ids, sizeof(int32_t) * B);
    if (ins && ins->block_hidden) be->download(be, ins->block_hidden, m->h, sizeof(float) * B * H);
    if (n > 0 && take_picks(m, x, anchor, n, on_device, s, rng, out, ins, defer)) return -1;
    if (bs_backend_check(be, err)) return bs_wrap(err, "drafter: block pass");
    return 0;
}

int bs_dflash_forward_block(bs_drafter *d, bs_drafter_ctx *dc, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng,
                            bs_draft *out, const bs_dflash_inspect *ins, bs_err *err) {
    if (!is_dflash(d)) return bs_fail(err, "drafter %s: not a DFlash / DSpark checkpoint drafter (config.json)", d ? d->name : "(none)");
    return forward_block(d, dc, anchor, max_n, s, rng, out, ins, 0, err);
}
static int dflash_propose_on_device(bs_drafter *d, bs_drafter_ctx *dc, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng, bs_draft *out,
                                    bs_err *err) {
    return forward_block(d, dc, anchor, max_n, s, rng, out, NULL, 1, err);
}
static int dflash_propose(bs_drafter *d, bs_drafter_ctx *dc, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng, bs_draft *out, bs_err *err) {
    return forward_block(d, dc, anchor, max_n, s, rng, out, NULL, 0, err);
}

// ---- several sequences' blocks in one pass -----------------------------------------------------------------
// The blocks of up to BATCH_ROWS / B sequences go through the backbone and the LM head together, so the
// weights are read once for all of them; each block attends to its own context cache at its own
// positions. Then each sequence picks its drafts from its own rows exactly as propose does (take_picks):
// the kernels are row-invariant, so every sequence drafts what it would draft alone.
#define BATCH_ROWS 64

static int batch_alloc(dflash *m, bs_err *err) {
    if (m->blogits) return 0;   // the last one allocated
    size_t R = BATCH_ROWS, H = m->H;
    ALLOC_BE(m->bx, R * H * 4); ALLOC_BE(m->bxn, R * H * 4); ALLOC_BE(m->bh, R * H * 4); ALLOC_BE(m->bpred, R * H * 4);
    ALLOC_BE(m->bq, R * m->qd * 4); ALLOC_BE(m->batt, R * m->qd * 4);
    ALLOC_BE(m->bkx, R * m->kd * 4); ALLOC_BE(m->bvx, R * m->kd * 4);
    ALLOC_BE(m->bgate, R * m->I * 4); ALLOC_BE(m->bup, R * m->I * 4);
    if (m->cfg.gemma) ALLOC_BE(m->bxa, R * H * 4);
    if (m->cfg.dflash2) {
        ALLOC_BE(m->bxa, R * H * 4); ALLOC_BE(m->bob, R * H * 4);
        ALLOC_BE(m->bdyn, R * 2 * m->cfg.conv_taps * (H / m->cfg.conv_group) * 4);
    }
    if (m->r1_head) ALLOC_BE(m->bhu, R * H * 4);
    ALLOC_BE(m->blogits, R * (size_t)m->V * 4);   // (allocated last: batch_alloc's "done" mark)
    return 0;
fail:
    return bs_wrap(err, "drafter batch scratch");
}

// One pass over sequences [0, nb) of the arrays (every one with n[j] >= 1 drafts to make).
static void propose_pass(dflash *m, int nb, dflash_ctx *const *xs, const int *n_ctx, const int32_t *anchors, const int *n,
                         const bs_sampling *const *s, bs_rng *const *rng, bs_draft *out) {
    bs_backend *be = m->be;
    int B = m->B, H = m->H, V = m->V, first = m->cfg.arch == BS_DRAFTER_ZLAB;   // z-lab predicts from rows 1..n
    int32_t ids[BATCH_ROWS];
    for (int j = 0; j < nb; j++) {
        ids[j * B] = anchors[j];
        for (int i = 1; i < B; i++) ids[j * B + i] = m->cfg.mask_token_id;
    }
    block_bufs bb = { m->bx, m->bxn, m->bq, m->bkx, m->bvx, m->batt, m->bgate, m->bup, m->bh, m->bxa, m->bob, m->bdyn };
    backbone_blocks(m, &bb, nb, xs, n_ctx, ids);
    // The LM head once over every block's prediction rows, packed.
    int p = 0, at[BATCH_ROWS];
    for (int j = 0; j < nb; j++) {
        at[j] = p;
        be->copy_rows(be, m->bpred + (size_t)p * H, H, m->bh + ((size_t)j * B + first) * H, H, n[j], H);
        p += n[j];
    }
    be->matmul(be, m->blogits, head_rows(m, m->bpred, p, m->bhu), p, &m->lm_head, 0);
    head_softcap(m, m->blogits, p, V);
    for (int j = 0; j < nb; j++) {
        // The block's rows where propose's picks read them, then the same picks.
        be->copy(be, m->h, m->bh + (size_t)j * B * H, sizeof(float) * B * H);
        be->copy(be, m->logits, m->blogits + (size_t)at[j] * V, sizeof(float) * n[j] * V);
        if (m->cfg.dflash2) selector_inputs(m, m->h + H, n[j]);
        int on_device = device_picks_ok(m, s[j], NULL);
        memset(&out[j], 0, sizeof out[j]);
        if (on_device) device_picks(m, xs[j], anchors[j], n[j]);
        take_picks(m, xs[j], anchors[j], n[j], on_device, s[j], rng[j], &out[j], NULL, 0);
    }
}

static int dflash_propose_batch(bs_drafter *d, int n, bs_drafter_ctx *const *c, const int32_t *anchors, const int *max_n,
                                const bs_sampling *const *s, bs_rng *const *rng, bs_draft *out, bs_err *err) {
    dflash *m = d->impl;
    // A draft vocabulary spreads its logits per pass: those sequences draft one by one.
    if (m->vd || m->B > BATCH_ROWS) {
        for (int i = 0; i < n; i++) if (dflash_propose(d, c[i], anchors[i], max_n[i], s[i], rng[i], &out[i], err)) return -1;
        return 0;
    }
    if (batch_alloc(m, err)) return -1;
    const int per_pass = BATCH_ROWS / m->B;
    dflash_ctx *xs[BATCH_ROWS];
    int n_ctx[BATCH_ROWS], nd[BATCH_ROWS], idx[BATCH_ROWS];
    int32_t an[BATCH_ROWS];
    const bs_sampling *sp[BATCH_ROWS];
    bs_rng *rp[BATCH_ROWS];
    int k = 0;
    for (int i = 0; i <= n; i++) {
        if (i < n) {
            memset(&out[i], 0, sizeof out[i]);
            if (check_propose(m, c[i], anchors[i], s[i], rng[i], err)) return -1;
            int want = max_n[i] < m->gamma ? max_n[i] : m->gamma;
            if (want <= 0) continue;
            if (block_pages(m, c[i]->impl, c[i]->n_ctx, err)) return -1;
            xs[k] = c[i]->impl; n_ctx[k] = c[i]->n_ctx; nd[k] = want; an[k] = anchors[i]; sp[k] = s[i]; rp[k] = rng[i]; idx[k] = i;
            k++;
        }
        if (k == per_pass || (i == n && k > 0)) {
            bs_draft tmp[BATCH_ROWS];
            propose_pass(m, k, xs, n_ctx, an, nd, sp, rp, tmp);
            if (bs_backend_check(m->be, err)) return bs_wrap(err, "drafter: block pass of %d sequences", k);
            for (int j = 0; j < k; j++) out[idx[j]] = tmp[j];
            k = 0;
        }
    }
    return 0;
}
