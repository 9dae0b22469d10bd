// The host half of the CUDA target trainer (train_cuda.h): config (Qwen3 or Llama-3.x), the parameter set under
// the checkpoint names (a Llama layer without q_norm / k_norm), initialisation (transformers' or a checkpoint's), batching and loss bookkeeping,
// export in the format the engine loads; the device half is src/train/cuda/train_target.cu (tc_dev.h).
// Without BS_WITH_CUDA only the stubs at the end are compiled, so CPU builds link callers unchanged.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "train/train_cuda.h"

#ifdef BS_WITH_CUDA
#include <cjson/cJSON.h>
#include "io/config.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "model/rope.h"
#include "train/cuda/tc_dev.h"
#include "util/dtype.h"
#include "util/rng.h"

typedef struct {
    bs_qwen3_config c;
    tc_dev *d;
    int B, T;
    int64_t step;                 // AdamW steps taken
    int32_t *ids, *labels;        // host staging, [B*T]
    float *wrow, *rowloss, *seq_w;
} tcu;

static const char *LAYER_NAMES[TC_PER_LAYER] = {
    "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight", "post_attention_layernorm.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
};

// config_json: JSON text, a config.json path, or a folder holding one (see train_cuda.h).
static int load_config(bs_qwen3_config *c, double *init_range, const char *cfg, const char *init_dir, bs_err *err) {
    char path[4096];
    cJSON *root = NULL;
    const char *what = cfg;
    if (!cfg && !init_dir) return bs_fail(err, "train-target (cuda): neither a config nor an init checkpoint given");
    if (!cfg) { snprintf(path, sizeof path, "%s/config.json", init_dir); what = path; root = bs_json_load(path, err); }
    else {
        const char *p = cfg;
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
        struct stat st;
        if (*p == '{') {
            what = "config (JSON text)";
            if (!(root = cJSON_Parse(p)) || !cJSON_IsObject(root)) { cJSON_Delete(root); return bs_fail(err, "config: not a JSON object"); }
        } else {
            if (stat(cfg, &st) == 0 && S_ISDIR(st.st_mode)) { snprintf(path, sizeof path, "%s/config.json", cfg); what = path; }
            else { snprintf(path, sizeof path, "%s", cfg); what = path; }
            root = bs_json_load(what, err);
        }
    }
    if (!root) return -1;
    int rc = -1;
    const cJSON *a0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "architectures"), 0);
    *init_range = 0.02;
    if (cJSON_IsString(a0) && bs_model_arch_of(root) < 0)
        bs_fail(err, "%s: architectures[0] is \"%s\"; the target trainer trains \"Qwen3ForCausalLM\" and \"LlamaForCausalLM\"", what,
                a0->valuestring);
    else if (bs_qwen3_config_parse(c, root, what, err) || bs_json_num(root, "initializer_range", 0, init_range, what, err)) {}
    else if (c->arch == BS_ARCH_GEMMA4) bs_fail(err, "%s: the target trainer trains Qwen3 and Llama targets, not Gemma-4 (docs/gemma4.md)", what);
    else if (c->sliding_window) bs_fail(err, "%s: sliding-window attention is not supported", what);
    else if (c->head_dim > 4096) bs_fail(err, "%s: head_dim %d is larger than the trainer's RoPE table (4096)", what, c->head_dim);
    else if (!(*init_range > 0 && *init_range < 10)) bs_fail(err, "%s: initializer_range %g outside (0, 10)", what, *init_range);
    else rc = 0;
    cJSON_Delete(root);
    return rc;
}

static int build_params(bs_param_set *ps, const bs_qwen3_config *c, bs_err *err) {
    int64_t H = c->hidden_size, V = c->vocab_size, hd = c->head_dim, qd = (int64_t)c->n_heads * hd, kd = (int64_t)c->n_kv_heads * hd,
            I = c->intermediate_size;
    int64_t sh[TC_PER_LAYER][2] = { { H, 0 }, { qd, H }, { kd, H }, { kd, H }, { H, qd }, { hd, 0 }, { hd, 0 }, { H, 0 },
                                    { I, H }, { I, H }, { H, I } };
    int64_t e[2] = { V, H }, n1[1] = { H };
    char name[BS_PARAM_NAME_MAX];
    int qk = bs_qwen3_has_qk_norm(c);
    if (bs_param_add(ps, "model.embed_tokens.weight", 2, e, 1, 1, err) < 0) return -1;
    for (int l = 0; l < c->n_layers; l++)
        for (int k = 0; k < TC_PER_LAYER; k++) {
            if (!qk && (k == TC_QNORM || k == TC_KNORM)) continue;   // Llama (tc_layer_param's order)
            snprintf(name, sizeof name, "model.layers.%d.%s", l, LAYER_NAMES[k]);
            int nd = sh[k][1] ? 2 : 1;
            if (bs_param_add(ps, name, nd, sh[k], 1, nd == 2, err) < 0) return -1;
        }
    if (bs_param_add(ps, "model.norm.weight", 1, n1, 1, 0, err) < 0) return -1;
    if (!c->tie_embeddings && bs_param_add(ps, "lm_head.weight", 2, e, 1, 1, err) < 0) return -1;
    return 0;
}

static int load_params(bs_param_set *ps, const char *dir, bs_err *err) {
    bs_checkpoint *ck;
    if (bs_checkpoint_open(&ck, dir, err)) return -1;
    int rc = 0;
    for (int i = 0; i < ps->n && !rc; i++) {
        bs_param *p = &ps->p[i];
        const bs_tensor_info *t = bs_checkpoint_find(ck, p->name);
        if (!t) { rc = bs_fail(err, "%s: tensor %s is missing", dir, p->name); break; }
        int same = t->n_dims == p->n_dims;
        for (int k = 0; same && k < p->n_dims; k++) same = t->shape[k] == p->shape[k];
        if (!same) { rc = bs_fail(err, "%s: tensor %s has another shape than the config implies", dir, p->name); break; }
        if (!t->dtype_ok) { rc = bs_fail(err, "%s: tensor %s is stored as %s (BF16, F16 or F32 expected)", dir, p->name, t->dtype_name); break; }
        for (int64_t j = 0; j < p->n; j++) p->w[j] = bs_load_elem(t->data, t->dtype, (size_t)j);
    }
    bs_checkpoint_close(ck);
    return rc ? bs_wrap(err, "init checkpoint") : 0;
}

static int upload_all(bs_train_task *t, bs_err *err) {
    tcu *u = t->impl;
    for (int i = 0; i < t->params.n; i++)
        if (tc_dev_copy(u->d, TC_W, i, t->params.p[i].w, 1, err)) return -1;
    return 0;
}

static int init_on_device(bs_train_task *t, double range, uint64_t seed, bs_err *err) {
    tcu *u = t->impl;
    for (int i = 0; i < t->params.n; i++)
        if (tc_dev_init_normal(u->d, i, t->params.p[i].n_dims == 1 ? 0.0 : range, seed, err) ||
            tc_dev_copy(u->d, TC_W, i, t->params.p[i].w, 0, err)) return -1;
    return 0;
}

// Fills the padded batch (ids, labels, per-row loss weights) and checks every sequence.
static int stage_batch(tcu *u, const bs_train_seq *seqs, int n_seqs, float scale, int *Tc, double *n_tok, bs_err *err) {
    if (!seqs || n_seqs < 1 || n_seqs > u->B) return bs_fail(err, "batch of %d sequences (1..%d allowed)", n_seqs, u->B);
    if (!isfinite(scale)) return bs_fail(err, "loss scale is not finite");
    int T = 0;
    for (int s = 0; s < n_seqs; s++) {
        if (!seqs[s].ids || seqs[s].n < 1 || seqs[s].n > u->T)
            return bs_fail(err, "sequence %d: %d tokens (1..%d allowed)", s, seqs[s].n, u->T);
        if (seqs[s].n > T) T = seqs[s].n;
    }
    *Tc = T;
    *n_tok = 0;
    for (int s = 0; s < n_seqs; s++) {
        const bs_train_seq *q = &seqs[s];
        int nsup = 0;
        for (int i = 0; i < q->n; i++) {
            if (q->ids[i] < 0 || q->ids[i] >= u->c.vocab_size)
                return bs_fail(err, "sequence %d: token %d at %d outside the vocabulary (%d)", s, q->ids[i], i, u->c.vocab_size);
            if (i + 1 < q->n && (!q->loss_mask || q->loss_mask[i + 1])) nsup++;
        }
        u->seq_w[s] = nsup ? 1.0f / nsup : 0.0f;
        *n_tok += nsup;
        for (int i = 0; i < T; i++) {
            size_t r = (size_t)s * T + i;
            int lab = i + 1 < q->n && (!q->loss_mask || q->loss_mask[i + 1]) ? 1 : 0;
            u->ids[r] = i < q->n ? q->ids[i] : 0;
            u->labels[r] = lab ? q->ids[i + 1] : -1;
            u->wrow[r] = lab ? scale / nsup : 0.0f;
        }
    }
    return 0;
}

static void fill_terms(tcu *u, int n_seqs, int T, double n_tok, bs_loss_terms *terms) {
    double sum = 0; int used = 0;
    for (int s = 0; s < n_seqs; s++) {
        if (u->seq_w[s] == 0) continue;
        double l = 0;
        for (int i = 0; i < T; i++) l += u->rowloss[(size_t)s * T + i];
        sum += l * u->seq_w[s]; used++;
    }
    if (!terms) return;
    memset(terms, 0, sizeof *terms);
    terms->loss = terms->ce = used ? sum / used : 0;
    terms->n_tokens = n_tok;
}

static int run_batch(bs_train_task *t, const bs_train_seq *seqs, int n_seqs, float scale, int grad, bs_loss_terms *terms, bs_err *err) {
    tcu *u = t->impl;
    int T = 0; double n_tok = 0;
    if (stage_batch(u, seqs, n_seqs, scale, &T, &n_tok, err) ||
        tc_dev_step(u->d, u->ids, u->labels, u->wrow, n_seqs, T, grad, u->rowloss, NULL, err)) return -1;
    fill_terms(u, n_seqs, T, n_tok, terms);
    return 0;
}

static int t_loss_grad_batch(bs_train_task *t, const bs_train_seq *seqs, int n_seqs, float scale, bs_rng *rng,
                             bs_loss_terms *terms, bs_err *err) {
    return run_batch(t, seqs, n_seqs, scale, 1, terms, err);
}
static int t_loss_grad(bs_train_task *t, const bs_train_seq *seq, float scale, bs_rng *rng, bs_loss_terms *terms, bs_err *err) {
    return run_batch(t, seq, 1, scale, 1, terms, err);
}
static int t_loss_eval(bs_train_task *t, const bs_train_seq *seq, bs_rng *rng, bs_loss_terms *terms, bs_err *err) {
    return run_batch(t, seq, 1, 0.0f, 0, terms, err);
}

static int t_opt_step(bs_train_task *t, const bs_adamw_settings *s, double lr, double *grad_norm, bs_err *err) {
    tcu *u = t->impl;
    if (!s || !(isfinite(lr) && lr >= 0) || !(s->beta1 >= 0 && s->beta1 < 1) || !(s->beta2 >= 0 && s->beta2 < 1) || !(s->eps > 0) ||
        !(s->weight_decay >= 0) || !isfinite(s->clip))
        return bs_fail(err, "AdamW settings out of range (lr >= 0, 0 <= betas < 1, eps > 0, weight decay >= 0)");
    double gn = 0;
    if (tc_dev_adamw(u->d, lr, s->beta1, s->beta2, s->eps, s->weight_decay, s->clip, u->step + 1, &gn, err)) return -1;
    u->step++;
    if (grad_norm) *grad_norm = gn;
    return 0;
}

static int t_sync(bs_train_task *t, float *const *m, float *const *v, int to_device, bs_err *err) {
    tcu *u = t->impl;
    for (int i = 0; i < t->params.n; i++) {
        if (tc_dev_copy(u->d, TC_W, i, t->params.p[i].w, to_device, err)) return -1;
        if (m && m[i] && tc_dev_copy(u->d, TC_M, i, m[i], to_device, err)) return -1;
        if (v && v[i] && tc_dev_copy(u->d, TC_V, i, v[i], to_device, err)) return -1;
    }
    return 0;
}
static int t_sync_to_host(bs_train_task *t, float *const *m, float *const *v, bs_err *err) { return t_sync(t, m, v, 0, err); }
static int t_sync_from_host(bs_train_task *t, float *const *m, float *const *v, int64_t adam_steps, bs_err *err) {
    if (adam_steps >= 0) ((tcu *)t->impl)->step = adam_steps;
    return t_sync(t, m, v, 1, err);
}

static int t_export(bs_train_task *t, const char *dir, bs_err *err) {
    tcu *u = t->impl;
    if (t_sync(t, NULL, NULL, 0, err)) return -1;
    mkdir(dir, 0755);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *cj = bs_qwen3_config_to_json(&u->c);
    char *txt = cJSON_Print(cj);
    cJSON_Delete(cj);
    FILE *f = fopen(path, "w");
    int ok = f && txt && fputs(txt, f) >= 0;
    if (f && fclose(f)) ok = 0;
    free(txt);
    if (!ok) return bs_fail(err, "%s: cannot write", path);
    bs_st_writer *w = bs_st_writer_new();
    uint16_t **bufs = calloc(t->params.n, sizeof *bufs);
    int rc = w && bufs ? 0 : bs_fail(err, "out of memory");
    for (int i = 0; i < t->params.n && !rc; i++) {
        bs_param *p = &t->params.p[i];
        if (!(bufs[i] = bs_malloc(sizeof(uint16_t) * p->n, err))) { rc = -1; break; }
        for (int64_t j = 0; j < p->n; j++) bufs[i][j] = bs_f32_to_bf16(p->w[j]);
        rc = bs_st_writer_add(w, p->name, "BF16", p->n_dims, p->shape, bufs[i], err);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!rc) rc = bs_st_writer_write(w, path, err);
    for (int i = 0; bufs && i < t->params.n; i++) free(bufs[i]);
    free(bufs);
    if (w) bs_st_writer_free(w);
    return rc;
}

// Forward FLOPs of one n-token sequence: 2 per multiply-add of every matmul (projections, MLP, LM head) plus
// causal attention (q.k and p.v over the n(n+1)/2 query-key pairs; the GEMMs compute the full square, the
// wasted half is not counted).
static double t_flops(const bs_train_task *t, int n) {
    const tcu *u = t->impl;
    const bs_qwen3_config *c = &u->c;
    double H = c->hidden_size, qd = (double)c->n_heads * c->head_dim, kd = (double)c->n_kv_heads * c->head_dim, I = c->intermediate_size;
    double per_tok = c->n_layers * (H * qd + 2 * H * kd + qd * H + 3 * H * I) + (double)c->vocab_size * H;
    double att = c->n_layers * 2.0 * 2.0 * qd * ((double)n * (n + 1) / 2);
    return 2.0 * per_tok * n + att;
}

static void t_free(bs_train_task *t) {
    if (!t) return;
    tcu *u = t->impl;
    if (u) {
        tc_dev_free(u->d);
        free(u->ids); free(u->labels); free(u->wrow); free(u->rowloss); free(u->seq_w);
        free(u);
    }
    bs_param_set_free(&t->params);
    free(t);
}

int bs_train_target_cuda_new(bs_train_task **out, const char *config_json, const char *init_dir, uint64_t seed, int max_batch_seqs,
                             int max_seq_len, bs_err *err) {
    *out = NULL;
    if (max_batch_seqs < 1 || max_seq_len < 2 || (int64_t)max_batch_seqs * max_seq_len > (1LL << 30))
        return bs_fail(err, "train-target (cuda): batch %d x %d tokens (at least 1 x 2)", max_batch_seqs, max_seq_len);
    bs_train_task *t = calloc(1, sizeof *t);
    tcu *u = calloc(1, sizeof *u);
    if (!t || !u) { free(t); free(u); return bs_fail(err, "out of memory"); }
    t->impl = u;
    t->kind = "target";
    double range;
    if (load_config(&u->c, &range, config_json, init_dir, err)) goto fail;
    if (max_seq_len > u->c.max_position) {
        bs_fail(err, "train-target (cuda): sequences of %d tokens exceed max_position_embeddings (%d)", max_seq_len, u->c.max_position);
        goto fail;
    }
    u->B = max_batch_seqs; u->T = max_seq_len;
    size_t N = (size_t)u->B * u->T;
    u->ids = malloc(sizeof(int32_t) * N); u->labels = malloc(sizeof(int32_t) * N);
    u->wrow = malloc(sizeof(float) * N); u->rowloss = malloc(sizeof(float) * N); u->seq_w = malloc(sizeof(float) * u->B);
    if (!u->ids || !u->labels || !u->wrow || !u->rowloss || !u->seq_w) { bs_fail(err, "out of memory"); goto fail; }
    if (build_params(&t->params, &u->c, err)) goto fail;
    if (init_dir && load_params(&t->params, init_dir, err)) goto fail;
    {
        int np = t->params.n;
        int64_t *numel = malloc(sizeof(int64_t) * np);
        int *decay = malloc(sizeof(int) * np);
        if (!numel || !decay) { free(numel); free(decay); bs_fail(err, "out of memory"); goto fail; }
        for (int i = 0; i < np; i++) { numel[i] = t->params.p[i].n; decay[i] = t->params.p[i].decay; }
        const bs_qwen3_config *c = &u->c;
        float inv[2048];
        bs_rope_inv_freqs(c->rope_theta, &c->rope, c->head_dim, inv);
        tc_shape s = { c->vocab_size, c->hidden_size, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->intermediate_size,
                       c->tie_embeddings, c->rms_eps, bs_qwen3_has_qk_norm(c), inv };
        int rc = tc_dev_new(&u->d, &s, u->B, u->T, np, numel, decay, err);
        free(numel); free(decay);
        if (rc) { bs_wrap(err, "train-target (cuda)"); goto fail; }
    }
    // transformers' _init_weights (Qwen3 and Llama alike): Linear and Embedding N(0, initializer_range), RMSNorm gains 1; drawn on
    // the device (a 0.6B model's 600M normals take seconds on one host core) and copied to params.p[i].w.
    if (init_dir ? upload_all(t, err) : init_on_device(t, range, seed, err)) goto fail;
    t->loss_grad = t_loss_grad; t->loss_eval = t_loss_eval; t->export_model = t_export; t->flops_forward = t_flops;
    t->free = t_free; t->loss_grad_batch = t_loss_grad_batch; t->opt_step = t_opt_step;
    t->sync_to_host = t_sync_to_host; t->sync_from_host = t_sync_from_host;
    *out = t;
    return 0;
fail:
    t_free(t);
    return -1;
}

static tcu *cuda_impl(bs_train_task *t, bs_err *err) {
    if (!t || !t->kind || strcmp(t->kind, "target") || t->free != t_free) { bs_fail(err, "not a CUDA target training task"); return NULL; }
    return t->impl;
}

int bs_train_target_cuda_set_gemm(bs_train_task *t, int mode, bs_err *err) {
    tcu *u = cuda_impl(t, err);
    if (!u) return -1;
    if (mode < BS_TRAIN_GEMM_BF16 || mode > BS_TRAIN_GEMM_FP32) return bs_fail(err, "unknown GEMM mode %d", mode);
    tc_dev_set_gemm(u->d, mode);
    return 0;
}
int bs_train_target_cuda_set_step(bs_train_task *t, int64_t step, bs_err *err) {
    tcu *u = cuda_impl(t, err);
    if (!u) return -1;
    if (step < 0) return bs_fail(err, "AdamW step count %lld < 0", (long long)step);
    u->step = step;
    return 0;
}
static int grads_copy(bs_train_task *t, int to_device, bs_err *err) {
    tcu *u = cuda_impl(t, err);
    if (!u) return -1;
    for (int i = 0; i < t->params.n; i++)
        if (tc_dev_copy(u->d, TC_G, i, t->params.p[i].g, to_device, err)) return -1;
    return 0;
}
int bs_train_target_cuda_grads_to_host(bs_train_task *t, bs_err *err) { return grads_copy(t, 0, err); }
int bs_train_target_cuda_grads_from_host(bs_train_task *t, bs_err *err) { return grads_copy(t, 1, err); }
int bs_train_target_cuda_zero_grads(bs_train_task *t, bs_err *err) {
    tcu *u = cuda_impl(t, err);
    return u ? tc_dev_zero_grads(u->d, err) : -1;
}
int bs_train_target_cuda_logits(bs_train_task *t, const bs_train_seq *seq, float *out, bs_err *err) {
    tcu *u = cuda_impl(t, err);
    int T = 0; double n_tok = 0;
    if (!u || stage_batch(u, seq, 1, 0.0f, &T, &n_tok, err)) return -1;
    return tc_dev_step(u->d, u->ids, u->labels, u->wrow, 1, T, 0, u->rowloss, out, err);
}
int bs_train_target_cuda_times(bs_train_task *t, double ms[6], int reset, bs_err *err) {
    tcu *u = cuda_impl(t, err);
    if (!u) return -1;
    tc_dev_times(u->d, ms, reset);
    return 0;
}
size_t bs_train_target_cuda_device_bytes(const bs_train_task *t) {
    return t && t->free == t_free ? tc_dev_bytes(((const tcu *)t->impl)->d) : 0;
}
tc_dev *bs_train_target_cuda_dev(bs_train_task *t) { return t && t->free == t_free ? ((tcu *)t->impl)->d : NULL; }

#else  // !BS_WITH_CUDA: the same entry points, each failing with the reason.

#define NO_CUDA(err) bs_fail(err, "this blockspec was built without CUDA (rebuild with `make cuda` on a machine with nvcc)")
int bs_train_target_cuda_new(bs_train_task **out, const char *config_json, const char *init_dir, uint64_t seed, int max_batch_seqs,
                             int max_seq_len, bs_err *err) {
    *out = NULL;
    return NO_CUDA(err);
}
int bs_train_target_cuda_set_gemm(bs_train_task *t, int mode, bs_err *err) { return NO_CUDA(err); }
int bs_train_target_cuda_set_step(bs_train_task *t, int64_t step, bs_err *err) { return NO_CUDA(err); }
int bs_train_target_cuda_grads_to_host(bs_train_task *t, bs_err *err) { return NO_CUDA(err); }
int bs_train_target_cuda_grads_from_host(bs_train_task *t, bs_err *err) { return NO_CUDA(err); }
int bs_train_target_cuda_zero_grads(bs_train_task *t, bs_err *err) { return NO_CUDA(err); }
int bs_train_target_cuda_logits(bs_train_task *t, const bs_train_seq *seq, float *out, bs_err *err) { return NO_CUDA(err); }
int bs_train_target_cuda_times(bs_train_task *t, double ms[6], int reset, bs_err *err) { return NO_CUDA(err); }
size_t bs_train_target_cuda_device_bytes(const bs_train_task *t) { return 0; }
#endif
