// Gemma-4 text targets: loading and the layer, written against the backend ops (model/gemma4.h, docs/gemma4.md).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "io/quant_config.h"
#include "model/gemma4.h"
#include "model/rope.h"

static int load_vec(bs_backend *be, const bs_checkpoint *ck, const char *name, int64_t n, bs_mat *dst, bs_err *err) {
    bs_mat h;
    if (bs_checkpoint_mat(ck, name, 0, n, &h, err)) return -1;
    if (be->weight(be, dst, &h, err)) return bs_wrap(err, "%s: tensor '%s'", ck->path, name);
    return 0;
}

// An fp32 vector (host array kept alive by the model) as a backend weight.
static int host_vec(bs_backend *be, float *data, int n, bs_mat *dst, bs_err *err) {
    bs_mat h = { .data = data, .dtype = BS_F32, .rows = 1, .cols = n };
    return be->weight(be, dst, &h, err);
}

// Proportional RoPE (transformers' _compute_proportional_rope_parameters): pair i < int(partial * hd / 2) turns by
// 1 / theta^(2i / hd) (exponents over the whole head), the others not at all; all divided by factor. In fp32 as
// transformers computes it.
float *bs_gemma4_rope_full(bs_backend *be, const bs_gemma4_config *g, bs_err *err) {
    int hd = g->global_head_dim, half = hd / 2;
    int turning = (int)floor((double)g->full_partial * hd / 2.0);
    float *host = calloc(half, sizeof(float));
    if (!host) { bs_fail(err, "out of memory"); return NULL; }
    for (int i = 0; i < turning && i < half; i++) host[i] = bs_rope_inv_freq(g->full_theta, i, hd) / g->full_factor;
    float *t = be->alloc(be, sizeof(float) * half, err);
    if (t) be->upload(be, t, host, sizeof(float) * half);
    else bs_wrap(err, "RoPE table (full attention)");
    free(host);
    return t;
}

int bs_gemma4_load_layer(bs_backend *be, const bs_qwen3_config *c, const char *prefix, int l, bs_qwen3_layer *L, bs_gemma4_layer *G,
                         const bs_checkpoint *ck, const bs_quant_config *qc, bs_err *err) {
    int H = c->hidden_size, P = c->gemma.ple_dim;
    G->full = c->gemma.full[l]; G->hd = bs_cfg_layer_head_dim(c, l); G->n_kv = bs_cfg_layer_kv_heads(c, l);
    G->inter = bs_cfg_layer_inter(c, l); G->kv_src = bs_cfg_layer_kv_source(c, l);
    G->has_v = !(c->gemma.k_eq_v && G->full);
    int hd = G->hd, qd = c->n_heads * hd, kd = G->n_kv * hd, I = G->inter, own_kv = G->kv_src == l;
    char name[256];
#define NAME(s) (snprintf(name, sizeof name, "%slayers.%d.%s", prefix, l, s), name)
    if (load_vec(be, ck, NAME("input_layernorm.weight"), H, &L->attn_norm, err) ||
        load_vec(be, ck, NAME("post_attention_layernorm.weight"), H, &G->post_attn_norm, err) ||
        load_vec(be, ck, NAME("pre_feedforward_layernorm.weight"), H, &G->pre_ff_norm, err) ||
        load_vec(be, ck, NAME("post_feedforward_layernorm.weight"), H, &G->post_ff_norm, err) ||
        bs_model_load_matrix(ck, qc, be, NAME("self_attn.q_proj.weight"), qd, H, &L->wq, NULL, err) ||
        bs_model_load_matrix(ck, qc, be, NAME("self_attn.o_proj.weight"), H, qd, &L->wo, NULL, err) ||
        bs_model_load_matrix(ck, qc, be, NAME("mlp.gate_proj.weight"), I, H, &L->w_gate, NULL, err) ||
        bs_model_load_matrix(ck, qc, be, NAME("mlp.up_proj.weight"), I, H, &L->w_up, NULL, err) ||
        bs_model_load_matrix(ck, qc, be, NAME("mlp.down_proj.weight"), H, I, &L->w_down, NULL, err)) return -1;
    if (own_kv && (bs_model_load_matrix(ck, qc, be, NAME("self_attn.k_proj.weight"), kd, H, &L->wk, NULL, err) ||
                   load_vec(be, ck, NAME("self_attn.k_norm.weight"), hd, &L->k_norm, err))) return -1;
    if (own_kv && G->has_v && bs_model_load_matrix(ck, qc, be, NAME("self_attn.v_proj.weight"), kd, H, &L->wv, NULL, err)) return -1;
    L->mlp_norm = G->pre_ff_norm;
    // q_norm, folded with sqrt(hd): the ops scale scores by hd^-0.5, Gemma-4 by 1 (q/k are RMS-normed instead).
    bs_mat qn;
    if (bs_checkpoint_mat(ck, NAME("self_attn.q_norm.weight"), 0, hd, &qn, err)) return -1;
    if (!(G->q_norm_host = malloc(sizeof(float) * hd))) return bs_fail(err, "out of memory");
    float s = sqrtf((float)hd);
    for (int i = 0; i < hd; i++) G->q_norm_host[i] = bs_load_elem(qn.data, qn.dtype, i) * s;
    if (host_vec(be, G->q_norm_host, hd, &G->q_norm, err)) return bs_wrap(err, "%s: tensor '%s'", ck->path, name);
    if (P && (bs_model_load_matrix(ck, qc, be, NAME("per_layer_input_gate.weight"), P, H, &G->ple_gate, NULL, err) ||
              bs_model_load_matrix(ck, qc, be, NAME("per_layer_projection.weight"), H, P, &G->ple_proj, NULL, err) ||
              load_vec(be, ck, NAME("post_per_layer_input_norm.weight"), H, &G->ple_norm, err))) return -1;
    // layer_scalar: a persistent buffer of one element (1 when a checkpoint leaves it out, as transformers initialises it)
    G->scalar = 1.0f;
    if (bs_checkpoint_find(ck, NAME("layer_scalar"))) {
        bs_mat ls;
        if (bs_checkpoint_mat(ck, name, 0, 1, &ls, err)) return -1;
        G->scalar = bs_load_elem(ls.data, ls.dtype, 0);
    }
#undef NAME
    return 0;
}

int bs_gemma4_init(bs_qwen3 *m, const bs_checkpoint *ck, const bs_quant_config *qc, bs_err *err) {
    const bs_qwen3_config *c = &m->cfg;
    const bs_gemma4_config *gc = &c->gemma;
    bs_backend *be = m->be;
    bs_gemma4 *g = calloc(1, sizeof *g);
    if (!g) return bs_fail(err, "out of memory");
    m->gemma = g;
    int H = c->hidden_size, L = c->n_layers, P = gc->ple_dim;
    // Both layouts users download: a text-only checkpoint (model.*) and the multimodal one's text tower
    // (model.language_model.*); the vision and audio towers' tensors are not read.
    snprintf(g->prefix, sizeof g->prefix, "%s", bs_checkpoint_find(ck, "model.language_model.embed_tokens.weight") ? "model.language_model." : "model.");
    char name[256];
    bs_mat host;
    snprintf(name, sizeof name, "%sembed_tokens.weight", g->prefix);
    if (!bs_checkpoint_find(ck, name))
        return bs_fail(err, "%s: missing tensor 'model.embed_tokens.weight' (a Gemma4ForCausalLM checkpoint) or "
                       "'model.language_model.embed_tokens.weight' (a Gemma4ForConditionalGeneration one)", ck->path);
    if (bs_model_load_matrix(ck, qc, be, name, c->vocab_size, H, &m->embed, &host, err)) return -1;
    m->embed_host = m->lm_head_host = host;
    snprintf(name, sizeof name, "%snorm.weight", g->prefix);
    if (load_vec(be, ck, name, H, &m->norm, err)) return -1;
    if (c->tie_embeddings) {
        m->lm_head = m->embed;
    } else if (!bs_checkpoint_find(ck, "lm_head.weight")) {
        return bs_fail(err, "%s: missing tensor 'lm_head.weight' (config.json says tie_word_embeddings is false)", ck->path);
    } else if (bs_model_load_matrix(ck, qc, be, "lm_head.weight", c->vocab_size, H, &m->lm_head, &m->lm_head_host, err)) {
        return -1;
    }
    if (P) {
        snprintf(name, sizeof name, "%sembed_tokens_per_layer.weight", g->prefix);
        if (bs_model_load_matrix(ck, qc, be, name, gc->ple_vocab, (int64_t)L * P, &g->ple_embed, NULL, err)) return -1;
        snprintf(name, sizeof name, "%sper_layer_model_projection.weight", g->prefix);
        if (bs_model_load_matrix(ck, qc, be, name, (int64_t)L * P, H, &g->ple_model_proj, NULL, err)) return -1;
        snprintf(name, sizeof name, "%sper_layer_projection_norm.weight", g->prefix);
        if (load_vec(be, ck, name, P, &g->ple_proj_norm, err)) return -1;
    }
    int big = c->head_dim > gc->global_head_dim ? c->head_dim : gc->global_head_dim;
    if (!(g->ones_host = malloc(sizeof(float) * big))) return bs_fail(err, "out of memory");
    for (int i = 0; i < big; i++) g->ones_host[i] = 1.0f;
    if (host_vec(be, g->ones_host, c->head_dim, &g->ones_sliding, err) || host_vec(be, g->ones_host, gc->global_head_dim, &g->ones_full, err))
        return -1;
    // RoPE: sliding layers default over head_dim (the model's table), full layers proportional over their head.
    if (!(m->rope_inv_freq = bs_rope_table(be, gc->sliding_theta, NULL, c->head_dim, err))) return -1;
    if (!(g->rope_full = bs_gemma4_rope_full(be, gc, err))) return -1;
    if (!(m->layers = calloc(L, sizeof *m->layers)) || !(g->layers = calloc(L, sizeof *g->layers))) return bs_fail(err, "out of memory");
    for (int l = 0; l < L; l++)
        if (bs_gemma4_load_layer(be, c, g->prefix, l, &m->layers[l], &g->layers[l], ck, qc, err)) return -1;
    return 0;
}

void bs_gemma4_free(bs_qwen3 *m) {
    bs_gemma4 *g = m->gemma;
    if (!g) return;
    if (g->rope_full) m->be->free(m->be, g->rope_full);
    for (int l = 0; g->layers && l < m->cfg.n_layers; l++) free(g->layers[l].q_norm_host);
    free(g->layers);
    free(g->ones_host);
    free(g);
    m->gemma = NULL;
}

int bs_gemma4_ws_init(bs_qwen3_ws *ws, const bs_qwen3_config *c, bs_backend *be, bs_err *err) {
    size_t R = BS_QWEN3_CHUNK_ROWS, H = c->hidden_size, LP = (size_t)c->n_layers * c->gemma.ple_dim;
    if (!(ws->t = be->alloc(be, R * H * 4, err))) return -1;
    if (LP && (!(ws->ple = be->alloc(be, R * LP * 4, err)) || !(ws->ple2 = be->alloc(be, R * LP * 4, err)))) return -1;
    return 0;
}

void bs_gemma4_inputs(const bs_qwen3 *m, bs_qwen3_ws *ws, int n) {
    const bs_qwen3_config *c = &m->cfg;
    const bs_gemma4 *g = m->gemma;
    bs_backend *be = m->be;
    int H = c->hidden_size, P = c->gemma.ple_dim, L = c->n_layers;
    // Gemma4TextScaledWordEmbedding: the rows times sqrt(H) (an fp32 scalar, as a model loaded in fp32 has it)
    be->scale(be, ws->x, (float)sqrt((double)H), (size_t)n * H);
    if (!P) return;
    size_t LP = (size_t)L * P;
    // token identity: embed_tokens_per_layer rows (looked up into ple2) times sqrt(P)
    be->scale(be, ws->ple2, (float)sqrt((double)P), (size_t)n * LP);
    // context: per_layer_model_projection(x) * H^-0.5, RMS-normed per layer slice, then (ctx + tok) * 2^-0.5
    be->matmul(be, ws->ple, ws->x, n, &g->ple_model_proj, 0);
    be->scale(be, ws->ple, (float)(1.0 / sqrt((double)H)), (size_t)n * LP);
    be->rmsnorm(be, ws->ple, ws->ple, n * L, P, &g->ple_proj_norm, c->rms_eps);
    be->add(be, ws->ple, ws->ple2, (size_t)n * LP);
    be->scale(be, ws->ple, (float)(1.0 / sqrt(2.0)), (size_t)n * LP);
}

void bs_gemma4_project_qkv(bs_backend *be, const bs_qwen3_layer *L, const bs_gemma4_layer *G, const bs_mat *ones, float eps, const float *xn, int n,
                           float *q, float *kx, float *vx) {
    int kw = G->n_kv * G->hd, nm = 0;
    float *y[3];
    const bs_mat *w[3];
    if (q) { y[nm] = q; w[nm++] = &L->wq; }
    y[nm] = kx; w[nm++] = &L->wk;
    if (G->has_v) { y[nm] = vx; w[nm++] = &L->wv; }
    bs_matmul_multi(be, nm, y, xn, n, w, 0);
    if (!G->has_v) be->copy(be, vx, kx, sizeof(float) * (size_t)n * kw);   // attention_k_eq_v: V is k_proj's output before k_norm and RoPE
    be->rmsnorm(be, vx, vx, n * G->n_kv, G->hd, ones, eps);
}

// q, k, v of a layer that keeps its own K/V: projections, V's weightless RMSNorm, q/k norm + RoPE and the
// new K/V rows into each span's cache.
static void attn_inputs_own(const bs_qwen3 *m, bs_qwen3_ws *ws, int l, const bs_row_span *spans, int n_spans, int n, const float *rope) {
    const bs_qwen3_config *c = &m->cfg;
    const bs_qwen3_layer *L = &m->layers[l];
    const bs_gemma4_layer *G = &m->gemma->layers[l];
    bs_gemma4_project_qkv(m->be, L, G, G->full ? &m->gemma->ones_full : &m->gemma->ones_sliding, c->rms_eps, ws->xn, n, ws->q, ws->kx, ws->vx);
    bs_qk_norm_rope_store_spans(m->be, ws->q, ws->kx, ws->vx, spans, n_spans, c->n_heads, G->n_kv, G->hd, &G->q_norm, &L->k_norm, c->rms_eps, rope);
}

void bs_gemma4_attn_out_mlp(bs_backend *be, const bs_qwen3_config *c, const bs_qwen3_layer *L, const bs_gemma4_layer *G, float *x, float *xn,
                            const float *att, float *t, float *gate, float *up, int n) {
    int H = c->hidden_size;
    size_t nh = (size_t)n * H;
    be->matmul(be, t, att, n, &L->wo, 0);
    be->rmsnorm(be, t, t, n, H, &G->post_attn_norm, c->rms_eps);
    be->add(be, x, t, nh);
    // MLP: GELU (tanh) gate times up
    be->rmsnorm(be, xn, x, n, H, &G->pre_ff_norm, c->rms_eps);
    float *gu[2] = { gate, up };
    const bs_mat *wgu[2] = { &L->w_gate, &L->w_up };
    bs_matmul_multi(be, 2, gu, xn, n, wgu, 0);
    be->gelu_mul(be, gate, gate, up, (size_t)n * G->inter);
    be->matmul(be, t, gate, n, &L->w_down, 0);
    be->rmsnorm(be, t, t, n, H, &G->post_ff_norm, c->rms_eps);
    be->add(be, x, t, nh);
}

void bs_gemma4_layer_forward(const bs_qwen3 *m, bs_qwen3_ws *ws, int l, const bs_row_span *spans, int n_spans, int n) {
    const bs_qwen3_config *c = &m->cfg;
    const bs_gemma4 *g = m->gemma;
    const bs_qwen3_layer *L = &m->layers[l];
    const bs_gemma4_layer *G = &g->layers[l];
    bs_backend *be = m->be;
    int H = c->hidden_size, nH = c->n_heads, hd = G->hd, P = c->gemma.ple_dim;
    size_t qw = (size_t)nH * hd, nh = (size_t)n * H;
    const float *rope = G->full ? g->rope_full : m->rope_inv_freq;
    // attention
    be->rmsnorm(be, ws->xn, ws->x, n, H, &L->attn_norm, c->rms_eps);
    if (G->kv_src == l) {
        attn_inputs_own(m, ws, l, spans, n_spans, n, rope);
    } else {   // KV-shared: only queries; the keys and values are the source layer's cache rows
        be->matmul(be, ws->q, ws->xn, n, &L->wq, 0);
        for (int i = 0; i < n_spans; i++)
            be->head_norm_rope(be, ws->q + spans[i].row0 * qw, spans[i].n, nH, hd, &G->q_norm, c->rms_eps, spans[i].pos0, rope);
    }
    if (G->full) {
        bs_attention_spans(be, ws->att, ws->q, spans, n_spans, nH, G->n_kv, hd);
    } else {   // sliding: each query sees its own key and the sliding_window - 1 before it (the full cache is kept)
        for (int i = 0; i < n_spans; i++) {
            const bs_row_span *s = &spans[i];
            be->attention(be, ws->att + s->row0 * qw, ws->q + s->row0 * qw, &s->kv, s->n, nH, G->n_kv, hd, s->pos0 + s->n, s->pos0, 1,
                          c->gemma.sliding_window);
        }
    }
    bs_gemma4_attn_out_mlp(be, c, L, G, ws->x, ws->xn, ws->att, ws->t, ws->gate, ws->up, n);
    // per-layer embeddings: gelu(gate(x)) * this layer's slice of the per-layer inputs, projected back, normed
    if (P) {
        be->matmul(be, ws->gate, ws->x, n, &G->ple_gate, 0);
        be->copy_rows(be, ws->up, P, ws->ple + (size_t)l * P, (size_t)c->n_layers * P, n, P);
        be->gelu_mul(be, ws->gate, ws->gate, ws->up, (size_t)n * P);
        be->matmul(be, ws->t, ws->gate, n, &G->ple_proj, 0);
        be->rmsnorm(be, ws->t, ws->t, n, H, &G->ple_norm, c->rms_eps);
        be->add(be, ws->x, ws->t, nh);
    }
    if (G->scalar != 1.0f) be->scale(be, ws->x, G->scalar, nh);
}

void bs_gemma4_softcap(const bs_qwen3 *m, float *logits, int rows) {
    float cap = m->cfg.gemma.final_softcap;
    if (cap > 0 && rows > 0) m->be->softcap(m->be, logits, cap, (size_t)rows * m->cfg.vocab_size);
}
