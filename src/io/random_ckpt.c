#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "io/config.h"
#include "io/drafter_config.h"
#include "io/random_ckpt.h"
#include "io/dspark_v1_config.h"
#include "util/dtype.h"
#include "util/rng.h"

// Uniform on [-sqrt(3), sqrt(3)): unit variance like a Gaussian, but cheap enough to fill an 8B
// checkpoint in seconds (values are irrelevant to speed, only their scale to numerics).
static float unit_noise(bs_rng *r) {
    return (float)((int64_t)(bs_rng_u64(r) >> 11) - (1LL << 52)) * (float)(1.7320508075688772 / 4503599627370496.0);
}

static size_t numel(const bs_tensor_spec *s) { size_t n = 1; for (int d = 0; d < s->n_dims; d++) n *= (size_t)s->shape[d]; return n; }

static int write_shard(const char *path, const bs_tensor_spec *specs, int lo, int hi, bs_rng *rng, bs_err *err) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "__metadata__"), "format", "pt");
    size_t off = 0;
    for (int i = lo; i < hi; i++) {
        cJSON *o = cJSON_AddObjectToObject(root, specs[i].name);
        cJSON_AddStringToObject(o, "dtype", "BF16");
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        for (int d = 0; d < specs[i].n_dims; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)specs[i].shape[d]));
        cJSON *of = cJSON_AddArrayToObject(o, "data_offsets");
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        off += numel(&specs[i]) * 2;
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
    }
    char *hdr = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f || !hdr) { free(hdr); if (f) fclose(f); return bs_fail(err, "%s: cannot create (%m)", path); }
    size_t hlen = strlen(hdr), padded = (hlen + 7) / 8 * 8;
    uint64_t h64 = padded;
    int ok = fwrite(&h64, 8, 1, f) == 1 && fwrite(hdr, 1, hlen, f) == hlen;
    for (size_t i = hlen; i < padded && ok; i++) ok = fputc(' ', f) != EOF;
    free(hdr);
    enum { CH = 1 << 20 };
    uint16_t *buf = malloc(CH * 2);
    for (int i = lo; i < hi && ok && buf; i++) {
        size_t n = numel(&specs[i]);
        const bs_tensor_spec *t = &specs[i];
        float scale = t->init == BS_INIT_LINEAR ? 1.0f / sqrtf((float)t->shape[t->n_dims - 1])
                    : t->init == BS_INIT_LINEAR_IN ? 1.0f / sqrtf((float)t->shape[0])
                    : t->init == BS_INIT_SMALL ? 0.25f / sqrtf((float)t->shape[t->n_dims - 1])
                    : t->init == BS_INIT_CONV_BASE ? 0.25f : 1.0f;
        for (size_t done = 0; done < n && ok; ) {
            size_t m = n - done < CH ? n - done : CH;
            for (size_t j = 0; j < m; j++) {
                // a base kernel's element (done + j) is tap ((done + j) / H) % taps of [2][taps][H]
                float base = t->init == BS_INIT_CONV_BASE && ((done + j) / t->shape[2]) % t->shape[1] == 0 ? 1.0f : 0.0f;
                buf[j] = bs_f32_to_bf16(t->init == BS_INIT_ONES ? 1.0f : base + unit_noise(rng) * scale);
            }
            ok = fwrite(buf, 2, m, f) == m;
            done += m;
        }
    }
    free(buf);
    if (fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) { unlink(tmp); return bs_fail(err, "%s: write failed (%m)", path); }
    return 0;
}

int bs_write_random_tensors(const char *dir, const bs_tensor_spec *specs, int n, int n_shards, uint64_t seed, bs_err *err) {
    bs_rng rng; bs_rng_seed(&rng, seed);
    char path[4096];
    if (n_shards <= 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        return write_shard(path, specs, 0, n, &rng, err);
    }
    cJSON *idx = cJSON_CreateObject(), *wm;
    cJSON_AddObjectToObject(idx, "metadata");
    wm = cJSON_AddObjectToObject(idx, "weight_map");
    int per = (n + n_shards - 1) / n_shards;
    for (int s = 0; s < n_shards; s++) {
        int lo = s * per, hi = lo + per < n ? lo + per : n;
        if (lo >= hi) break;
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (write_shard(path, specs, lo, hi, &rng, err)) { cJSON_Delete(idx); return -1; }
        for (int i = lo; i < hi; i++) cJSON_AddStringToObject(wm, specs[i].name, name);
    }
    char *txt = cJSON_Print(idx);
    cJSON_Delete(idx);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "w");
    int ok = f && txt && fputs(txt, f) >= 0;
    if (f && fclose(f) != 0) ok = 0;
    free(txt);
    return ok ? 0 : bs_fail(err, "%s: write failed", path);
}

// A 3-D tensor [a][b][c] (DFlash 2's base kernels).
static void spec3(bs_tensor_spec *s, int *n, int init, int64_t a, int64_t b, int64_t c, const char *fmt, int layer) {
    snprintf(s[*n].name, sizeof s[*n].name, fmt, layer);
    s[*n].init = init;
    s[*n].n_dims = 3; s[*n].shape[0] = a; s[*n].shape[1] = b; s[*n].shape[2] = c;
    (*n)++;
}

static void spec(bs_tensor_spec *s, int *n, int init, int64_t rows, int64_t cols, const char *fmt, int layer) {
    snprintf(s[*n].name, sizeof s[*n].name, fmt, layer);
    s[*n].init = init;
    if (rows) { s[*n].n_dims = 2; s[*n].shape[0] = rows; s[*n].shape[1] = cols; }
    else { s[*n].n_dims = 1; s[*n].shape[0] = cols; }
    (*n)++;
}

// One decoder layer (targets: prefix "model.layers"; drafters: "layers"); Llama layers have no q/k-norm.
static void layer_specs(bs_tensor_spec *s, int *n, const bs_qwen3_config *c, const char *prefix, int l) {
    int64_t H = c->hidden_size, hd = c->head_dim, qd = (int64_t)c->n_heads * hd, kd = (int64_t)c->n_kv_heads * hd, I = c->intermediate_size;
    static const struct { const char *name; int init, rows, cols; } L[] = {   // rows/cols: 0 none, 1 H, 2 qd, 3 kd, 4 I, 5 hd
        { "input_layernorm.weight", BS_INIT_ONES, 0, 1 }, { "self_attn.q_proj.weight", BS_INIT_LINEAR, 2, 1 },
        { "self_attn.k_proj.weight", BS_INIT_LINEAR, 3, 1 }, { "self_attn.v_proj.weight", BS_INIT_LINEAR, 3, 1 },
        { "self_attn.o_proj.weight", BS_INIT_LINEAR, 1, 2 }, { "self_attn.q_norm.weight", BS_INIT_ONES, 0, 5 },
        { "self_attn.k_norm.weight", BS_INIT_ONES, 0, 5 }, { "post_attention_layernorm.weight", BS_INIT_ONES, 0, 1 },
        { "mlp.gate_proj.weight", BS_INIT_LINEAR, 4, 1 }, { "mlp.up_proj.weight", BS_INIT_LINEAR, 4, 1 },
        { "mlp.down_proj.weight", BS_INIT_LINEAR, 1, 4 },
    };
    const int64_t dim[] = { 0, H, qd, kd, I, hd };
    for (size_t k = 0; k < sizeof L / sizeof *L; k++) {
        if (L[k].cols == 5 && !bs_qwen3_has_qk_norm(c)) continue;   // q_norm / k_norm
        char fmt[160];
        snprintf(fmt, sizeof fmt, "%s.%%d.%s", prefix, L[k].name);
        spec(s, n, L[k].init, dim[L[k].rows], dim[L[k].cols], fmt, l);
    }
}

// One layer of DeepSpec's Gemma-4 DSpark drafter (Gemma4DSparkDecoderLayer; c: the drafter's config, whose head_dim
// and n_kv_heads are its full layers'): the sandwich norms, no v_proj under attention_k_eq_v, layer_scalar.
static void gemma4_drafter_layer_specs(bs_tensor_spec *s, int *n, const bs_qwen3_config *c, int l) {
    int64_t H = c->hidden_size, hd = c->head_dim, qd = (int64_t)c->n_heads * hd, kd = (int64_t)c->n_kv_heads * hd, I = c->intermediate_size;
    static const char *norms[] = { "input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm" };
    char fmt[160];
    for (int k = 0; k < 4; k++) { snprintf(fmt, sizeof fmt, "layers.%%d.%s.weight", norms[k]); spec(s, n, BS_INIT_ONES, 0, H, fmt, l); }
    spec(s, n, BS_INIT_LINEAR, qd, H, "layers.%d.self_attn.q_proj.weight", l);
    spec(s, n, BS_INIT_LINEAR, kd, H, "layers.%d.self_attn.k_proj.weight", l);
    if (!c->gemma.k_eq_v) spec(s, n, BS_INIT_LINEAR, kd, H, "layers.%d.self_attn.v_proj.weight", l);
    spec(s, n, BS_INIT_LINEAR, H, qd, "layers.%d.self_attn.o_proj.weight", l);
    spec(s, n, BS_INIT_ONES, 0, hd, "layers.%d.self_attn.q_norm.weight", l);
    spec(s, n, BS_INIT_ONES, 0, hd, "layers.%d.self_attn.k_norm.weight", l);
    spec(s, n, BS_INIT_LINEAR, I, H, "layers.%d.mlp.gate_proj.weight", l);
    spec(s, n, BS_INIT_LINEAR, I, H, "layers.%d.mlp.up_proj.weight", l);
    spec(s, n, BS_INIT_LINEAR, H, I, "layers.%d.mlp.down_proj.weight", l);
    spec(s, n, BS_INIT_ONES, 0, 1, "layers.%d.layer_scalar", l);
}

// A Gemma-4 text target (Gemma4ForCausalLM layout, prefix "model."), as src/model/gemma4.c loads it: per-layer
// head sizes and K/V heads (sliding vs full), no v_proj on full layers under attention_k_eq_v, no K/V
// projections on KV-shared layers (transformers ignores theirs, so leaving them out only saves disk), the
// per-layer-embedding tensors when hidden_size_per_layer_input > 0, and layer_scalar (published checkpoints
// carry it; 1 here, its initial value). Written for benchmarks (bench/peer/peer30_device.sh): speed depends
// on the shapes only.
static int gemma4_tensor_specs(const bs_qwen3_config *c, bs_tensor_spec **out, int *n_out, bs_err *err) {
    const bs_gemma4_config *g = &c->gemma;
    int64_t H = c->hidden_size, V = c->vocab_size, L = c->n_layers, P = g->ple_dim;
    bs_tensor_spec *s = calloc((size_t)L * 18 + 8, sizeof *s);
    if (!s) return bs_fail(err, "out of memory");
    int n = 0;
    spec(s, &n, BS_INIT_EMBED, V, H, "model.embed_tokens.weight", 0);
    if (P) {
        spec(s, &n, BS_INIT_EMBED, g->ple_vocab, L * P, "model.embed_tokens_per_layer.weight", 0);
        spec(s, &n, BS_INIT_LINEAR, L * P, H, "model.per_layer_model_projection.weight", 0);
        spec(s, &n, BS_INIT_ONES, 0, P, "model.per_layer_projection_norm.weight", 0);
    }
    for (int l = 0; l < L; l++) {
        int64_t hd = bs_cfg_layer_head_dim(c, l), qd = (int64_t)c->n_heads * hd, kd = (int64_t)bs_cfg_layer_kv_heads(c, l) * hd;
        int64_t I = bs_cfg_layer_inter(c, l);
        int own_kv = bs_cfg_layer_kv_source(c, l) == l, has_v = !(g->k_eq_v && g->full[l]);
        spec(s, &n, BS_INIT_ONES, 0, H, "model.layers.%d.input_layernorm.weight", l);
        spec(s, &n, BS_INIT_ONES, 0, H, "model.layers.%d.post_attention_layernorm.weight", l);
        spec(s, &n, BS_INIT_ONES, 0, H, "model.layers.%d.pre_feedforward_layernorm.weight", l);
        spec(s, &n, BS_INIT_ONES, 0, H, "model.layers.%d.post_feedforward_layernorm.weight", l);
        spec(s, &n, BS_INIT_LINEAR, qd, H, "model.layers.%d.self_attn.q_proj.weight", l);
        if (own_kv) spec(s, &n, BS_INIT_LINEAR, kd, H, "model.layers.%d.self_attn.k_proj.weight", l);
        if (own_kv && has_v) spec(s, &n, BS_INIT_LINEAR, kd, H, "model.layers.%d.self_attn.v_proj.weight", l);
        spec(s, &n, BS_INIT_LINEAR, H, qd, "model.layers.%d.self_attn.o_proj.weight", l);
        spec(s, &n, BS_INIT_ONES, 0, hd, "model.layers.%d.self_attn.q_norm.weight", l);
        if (own_kv) spec(s, &n, BS_INIT_ONES, 0, hd, "model.layers.%d.self_attn.k_norm.weight", l);
        spec(s, &n, BS_INIT_LINEAR, I, H, "model.layers.%d.mlp.gate_proj.weight", l);
        spec(s, &n, BS_INIT_LINEAR, I, H, "model.layers.%d.mlp.up_proj.weight", l);
        spec(s, &n, BS_INIT_LINEAR, H, I, "model.layers.%d.mlp.down_proj.weight", l);
        if (P) {
            spec(s, &n, BS_INIT_LINEAR, P, H, "model.layers.%d.per_layer_input_gate.weight", l);
            spec(s, &n, BS_INIT_LINEAR, H, P, "model.layers.%d.per_layer_projection.weight", l);
            spec(s, &n, BS_INIT_ONES, 0, H, "model.layers.%d.post_per_layer_input_norm.weight", l);
        }
        spec(s, &n, BS_INIT_ONES, 0, 1, "model.layers.%d.layer_scalar", l);
    }
    spec(s, &n, BS_INIT_ONES, 0, H, "model.norm.weight", 0);
    if (!c->tie_embeddings) spec(s, &n, BS_INIT_LINEAR, V, H, "lm_head.weight", 0);
    *out = s; *n_out = n;
    return 0;
}

int bs_qwen3_tensor_specs(const bs_qwen3_config *c, bs_tensor_spec **out, int *n_out, bs_err *err) {
    if (c->arch == BS_ARCH_GEMMA4) {
        if (c->gemma.multimodal)
            return bs_fail(err, "make-random writes Gemma-4 text targets (Gemma4ForCausalLM), not the multimodal layout");
        return gemma4_tensor_specs(c, out, n_out, err);
    }
    int64_t H = c->hidden_size, V = c->vocab_size;
    bs_tensor_spec *s = calloc((size_t)c->n_layers * 11 + 3, sizeof *s);
    if (!s) return bs_fail(err, "out of memory");
    int n = 0;
    spec(s, &n, BS_INIT_EMBED, V, H, "model.embed_tokens.weight", 0);
    for (int l = 0; l < c->n_layers; l++) layer_specs(s, &n, c, "model.layers", l);
    spec(s, &n, BS_INIT_ONES, 0, H, "model.norm.weight", 0);
    if (!c->tie_embeddings) spec(s, &n, BS_INIT_LINEAR, V, H, "lm_head.weight", 0);
    *out = s; *n_out = n;
    return 0;
}

int bs_drafter_tensor_specs(const bs_drafter_config *dc, bs_tensor_spec **out, int *n_out, bs_err *err) {
    const bs_qwen3_config *c = &dc->base;
    int64_t H = c->hidden_size, V = c->vocab_size;
    int64_t r = dc->markov_rank;
    bs_tensor_spec *s = calloc((size_t)c->n_layers * 15 + 16, sizeof *s);
    if (!s) return bs_fail(err, "out of memory");
    int n = 0;
    spec(s, &n, BS_INIT_LINEAR, H, (int64_t)dc->n_taps * H, "fc.weight", 0);
    spec(s, &n, BS_INIT_ONES, 0, H, "hidden_norm.weight", 0);
    for (int l = 0; l < c->n_layers; l++) {
        if (dc->gemma) gemma4_drafter_layer_specs(s, &n, c, l);
        else layer_specs(s, &n, c, "layers", l);
        if (dc->dflash2) {   // the convolutions around the attention and the MLP
            int64_t taps = dc->conv_taps, proj = 2 * taps * (H / dc->conv_group);
            spec3(s, &n, BS_INIT_CONV_BASE, 2, taps, H, "layers.%d.attention_conv.base_kernel", l);
            spec(s, &n, BS_INIT_SMALL, proj, H, "layers.%d.attention_conv.kernel_projection.weight", l);
            spec3(s, &n, BS_INIT_CONV_BASE, 2, taps, H, "layers.%d.mlp_conv.base_kernel", l);
            spec(s, &n, BS_INIT_SMALL, proj, H, "layers.%d.mlp_conv.kernel_projection.weight", l);
        }
    }
    spec(s, &n, BS_INIT_ONES, 0, H, "norm.weight", 0);
    if (dc->dflash2) {   // the selector: edges <A[prev] * z, B[cand]> of O(1), like the unary logits
        spec(s, &n, BS_INIT_LINEAR, dc->sel_rank, H, "candidate_selector.hidden_projection.weight", 0);
        spec(s, &n, BS_INIT_EMBED, V, dc->sel_rank, "candidate_selector.predecessor_codebook", 0);
        spec(s, &n, BS_INIT_LINEAR, V, dc->sel_rank, "candidate_selector.successor_codebook", 0);
    }
    if (dc->arch == BS_DRAFTER_DEEPSPEC) {
        spec(s, &n, BS_INIT_EMBED, V, H, "embed_tokens.weight", 0);
        if (!c->tie_embeddings) spec(s, &n, BS_INIT_LINEAR, V, H, "lm_head.weight", 0);
        if (r > 0) {
            spec(s, &n, BS_INIT_EMBED, V, r, "markov_head.markov_w1.weight", 0);
            spec(s, &n, BS_INIT_LINEAR, V, r, "markov_head.markov_w2.weight", 0);
            if (dc->markov_type == BS_MARKOV_GATED) {
                spec(s, &n, BS_INIT_LINEAR, r, H + r, "markov_head.gate_proj.weight", 0);
                spec(s, &n, BS_INIT_LINEAR, 0, r, "markov_head.gate_proj.bias", 0);
            } else if (dc->markov_type == BS_MARKOV_RNN) {
                spec(s, &n, BS_INIT_LINEAR, 3 * r, 2 * r + H, "markov_head.joint_proj.weight", 0);
                spec(s, &n, BS_INIT_LINEAR, 0, 3 * r, "markov_head.joint_proj.bias", 0);
            }
        }
        if (dc->conf_head) {
            spec(s, &n, BS_INIT_LINEAR, 1, H + (dc->conf_with_markov ? r : 0), "confidence_head.proj.weight", 0);
            spec(s, &n, BS_INIT_LINEAR, 0, 1, "confidence_head.proj.bias", 0);
        }
    }
    *out = s; *n_out = n;
    return 0;
}

int bs_dspark_v1_tensor_specs(const bs_dspark_v1_config *c, bs_tensor_spec **specs, int *n, bs_err *err) {
    int64_t D = c->d_draft, I = (int64_t)c->ff_mult * c->d_draft, H = c->hidden_size, V = c->vocab_size, r = c->markov_rank, G = c->gamma;
    bs_tensor_spec *s = bs_calloc((size_t)bs_dspark_v1_n_params(c), sizeof *s, err);
    if (!s) return -1;
    *n = 0;
    for (int l = 0; l < c->n_layers; l++) {
        spec(s, n, BS_INIT_ONES, 0, D, "bb.%d.attn_norm", l);
        spec(s, n, BS_INIT_LINEAR_IN, D, D, "bb.%d.q", l); spec(s, n, BS_INIT_LINEAR_IN, D, D, "bb.%d.k", l);
        spec(s, n, BS_INIT_LINEAR_IN, D, D, "bb.%d.v", l); spec(s, n, BS_INIT_LINEAR_IN, D, D, "bb.%d.o", l);
        spec(s, n, BS_INIT_ONES, 0, D, "bb.%d.ff_norm", l);
        spec(s, n, BS_INIT_LINEAR_IN, D, I, "bb.%d.gate", l); spec(s, n, BS_INIT_LINEAR_IN, D, I, "bb.%d.up", l);
        spec(s, n, BS_INIT_LINEAR_IN, I, D, "bb.%d.down", l);
    }
    spec(s, n, BS_INIT_LINEAR_IN, H, D, "ctx_proj", 0);
    spec(s, n, BS_INIT_LINEAR_IN, H, D, "tok_proj", 0);
    if (G > 1) spec(s, n, BS_INIT_EMBED, G - 1, D, "mask_emb", 0);   // (gamma 1: no mask rows, nothing to write)
    spec(s, n, BS_INIT_EMBED, G + 1, D, "pos_emb", 0);
    spec(s, n, BS_INIT_ONES, 0, D, "out_norm", 0);
    spec(s, n, BS_INIT_LINEAR_IN, D, H, "out_proj", 0);
    spec(s, n, BS_INIT_EMBED, V, r, "markov.w1", 0);
    spec(s, n, BS_INIT_LINEAR_IN, r, V, "markov.w2", 0);
    spec(s, n, BS_INIT_LINEAR_IN, D + r, 1, "conf.w", 0);
    spec(s, n, BS_INIT_ONES, 0, 1, "conf.b", 0);
    *specs = s;
    return 0;
}
