// `blockspec rotate` (rotate_ckpt.h): reads a float Qwen3 / Llama checkpoint, writes its R1 fold. The plan is
// made from the config (every tensor the layer reads, by name and shape) before a byte is written; a tensor of
// the checkpoint outside the plan is refused rather than copied unrotated, since it could read or write the
// residual stream the fold rotates.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include "backend/affine.h"
#include "backend/hadamard.h"
#include "io/config.h"
#include "io/file.h"
#include "io/json.h"
#include "io/r1_basis.h"
#include "io/rotate_ckpt.h"
#include "io/safetensors.h"
#include "util/threadpool.h"

typedef enum {
    FOLD_COPY,      // unchanged (q_norm / k_norm, rotary tables)
    FOLD_ONES,      // an RMSNorm gain: folded into its readers, now 1
    FOLD_READER,    // W <- W . diag(gain) . R1 (rows: w <- T((w * gain) * s)); the embedding (no gain) alike
    FOLD_WRITER,    // W <- R1^T . W (columns: c <- T(c * s))
} fold_kind;

typedef struct fold_item {
    char name[200];           // written under this name
    const bs_tensor_info *t;  // the source (the embedding for an untied head)
    fold_kind kind;
    const float *gain;        // FOLD_READER: the gain folded in (NULL: none)
    bs_dtype dt;              // written in this dtype
    void *out;
} fold_item;

typedef struct fold_plan {
    fold_item *items;
    int n, cap;
    float **gains;            // the RMSNorm gains read (freed with the plan)
    int n_gains;
} fold_plan;

static void plan_free(fold_plan *p) {
    for (int i = 0; i < p->n; i++) free(p->items[i].out);
    for (int i = 0; i < p->n_gains; i++) free(p->gains[i]);
    free(p->items); free(p->gains);
    memset(p, 0, sizeof *p);
}

// The tensor `name` of shape [rows, cols] ([cols] when rows == 0), float, marked used.
static const bs_tensor_info *want(const bs_checkpoint *ck, char *used, const char *name, int64_t rows, int64_t cols, bs_err *err) {
    bs_mat m;
    if (bs_checkpoint_mat(ck, name, rows, cols, &m, err)) return NULL;
    const bs_tensor_info *t = bs_checkpoint_find(ck, name);
    used[t - ck->tensors] = 1;
    return t;
}

static fold_item *add_item(fold_plan *p, const char *name, const bs_tensor_info *t, fold_kind kind, const float *gain, bs_err *err) {
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        fold_item *it = realloc(p->items, sizeof *it * cap);
        if (!it) { bs_fail(err, "out of memory"); return NULL; }
        p->items = it; p->cap = cap;
    }
    fold_item *it = &p->items[p->n++];
    memset(it, 0, sizeof *it);
    snprintf(it->name, sizeof it->name, "%s", name);
    it->t = t; it->kind = kind; it->gain = gain; it->dt = t->dtype;
    return it;
}

// An RMSNorm: its gain kept (widened) for the readers, the tensor itself written as ones.
static const float *add_norm(fold_plan *p, const bs_checkpoint *ck, char *used, const char *name, int H, bs_err *err) {
    const bs_tensor_info *t = want(ck, used, name, 0, H, err);
    if (!t) return NULL;
    float **g = realloc(p->gains, sizeof *g * (p->n_gains + 1));
    if (!g) { bs_fail(err, "out of memory"); return NULL; }
    p->gains = g;
    float *v = p->gains[p->n_gains] = malloc(sizeof(float) * H);
    if (!v) { bs_fail(err, "out of memory"); return NULL; }
    p->n_gains++;
    for (int i = 0; i < H; i++) v[i] = bs_load_elem(t->data, t->dtype, (size_t)i);
    return add_item(p, name, t, FOLD_ONES, NULL, err) ? v : NULL;
}

static int add_mat(fold_plan *p, const bs_checkpoint *ck, char *used, const char *name, int64_t rows, int64_t cols, fold_kind kind,
                   const float *gain, bs_err *err) {
    const bs_tensor_info *t = want(ck, used, name, rows, cols, err);
    return t && add_item(p, name, t, kind, gain, err) ? 0 : -1;
}

// Every tensor of the model, by the config (the names and shapes qwen3.c loads).
static int make_plan(fold_plan *p, const bs_qwen3_config *c, const bs_checkpoint *ck, char *used, const float **final_gain, bs_err *err) {
    int H = c->hidden_size, V = c->vocab_size, I = c->intermediate_size, hd = c->head_dim;
    int64_t qd = (int64_t)c->n_heads * hd, kd = (int64_t)c->n_kv_heads * hd;
    char name[200];
    if (add_mat(p, ck, used, "model.embed_tokens.weight", V, H, FOLD_READER, NULL, err)) return -1;
    const float *gf = add_norm(p, ck, used, "model.norm.weight", H, err);
    if (!gf) return -1;
    *final_gain = gf;
    // The head: a tied model's is the embedding (read before its rotation), written as lm_head.weight.
    if (c->tie_embeddings) {
        const bs_tensor_info *e = bs_checkpoint_find(ck, "model.embed_tokens.weight");
        if (!add_item(p, "lm_head.weight", e, FOLD_READER, gf, err)) return -1;
        const bs_tensor_info *stale = bs_checkpoint_find(ck, "lm_head.weight");
        if (stale) used[stale - ck->tensors] = 1;   // a tied model's stored copy is never read: replaced
    } else if (add_mat(p, ck, used, "lm_head.weight", V, H, FOLD_READER, gf, err)) {
        return bs_wrap(err, "the LM head (config.json: tie_word_embeddings is false)");
    }
    for (int l = 0; l < c->n_layers; l++) {
#define NAME(s) (snprintf(name, sizeof name, "model.layers.%d.%s", l, s), name)
        const float *ga = add_norm(p, ck, used, NAME("input_layernorm.weight"), H, err);
        if (!ga) return -1;
        const float *gm = add_norm(p, ck, used, NAME("post_attention_layernorm.weight"), H, err);
        if (!gm) return -1;
        if (add_mat(p, ck, used, NAME("self_attn.q_proj.weight"), qd, H, FOLD_READER, ga, err) ||
            add_mat(p, ck, used, NAME("self_attn.k_proj.weight"), kd, H, FOLD_READER, ga, err) ||
            add_mat(p, ck, used, NAME("self_attn.v_proj.weight"), kd, H, FOLD_READER, ga, err) ||
            add_mat(p, ck, used, NAME("self_attn.o_proj.weight"), H, qd, FOLD_WRITER, NULL, err) ||
            add_mat(p, ck, used, NAME("mlp.gate_proj.weight"), I, H, FOLD_READER, gm, err) ||
            add_mat(p, ck, used, NAME("mlp.up_proj.weight"), I, H, FOLD_READER, gm, err) ||
            add_mat(p, ck, used, NAME("mlp.down_proj.weight"), H, I, FOLD_WRITER, NULL, err))
            return -1;
        if (bs_qwen3_has_qk_norm(c) &&
            (add_mat(p, ck, used, NAME("self_attn.q_norm.weight"), 0, hd, FOLD_COPY, NULL, err) ||
             add_mat(p, ck, used, NAME("self_attn.k_norm.weight"), 0, hd, FOLD_COPY, NULL, err)))
            return -1;
#undef NAME
    }
    // What is left: rotary tables some exports carry are copied; anything else is refused.
    for (int i = 0; i < ck->n_tensors; i++) {
        const bs_tensor_info *t = &ck->tensors[i];
        size_t l = strlen(t->name);
        if (used[i]) continue;
        if (t->n_dims == 1 && l > 9 && !strcmp(t->name + l - 9, ".inv_freq")) {
            if (!add_item(p, t->name, t, FOLD_COPY, NULL, err)) return -1;
            continue;
        }
        return bs_fail(err, "%s: tensor '%s' is not one of the Qwen3 / Llama decoder tensors the fold knows; it may read or write the "
                       "residual stream, so rotate refuses to copy it unrotated", t->file, t->name);
    }
    return 0;
}

// ---- the fold, rows or column blocks in parallel ---------------------------------------------------------------

typedef struct fold_job {
    const fold_item *it;
    const bs_hadamard *tr;
    const float *signs;
    int oom;
} fold_job;

#define COL_BLOCK 16

static void fold_task(void *ctx, int task, int n_tasks) {
    fold_job *j = ctx;
    const fold_item *it = j->it;
    const bs_tensor_info *t = it->t;
    const int64_t R = t->n_dims == 2 ? t->shape[0] : 1, K = t->shape[t->n_dims - 1], H = j->tr->n;
    bs_mat src = { .data = t->data, .dtype = t->dtype, .rows = R, .cols = K };
    if (it->kind == FOLD_READER) {   // rows of length H = K
        float *w = malloc(sizeof(float) * H);
        if (!w) { __atomic_store_n(&j->oom, 1, __ATOMIC_RELAXED); return; }
        int64_t per = (R + n_tasks - 1) / n_tasks, r0 = task * per, r1 = r0 + per < R ? r0 + per : R;
        for (int64_t r = r0; r < r1; r++) {
            bs_mat_row_f32(&src, r, w);
            for (int64_t c = 0; c < H; c++) w[c] = (it->gain ? w[c] * it->gain[c] : w[c]) * j->signs[c];
            bs_hadamard_row(j->tr, w, 0);
            for (int64_t c = 0; c < H; c++) bs_store_elem(it->out, it->dt, (size_t)(r * H + c), w[c]);
        }
        free(w);
        return;
    }
    // FOLD_WRITER: columns of length H = R, COL_BLOCK at a time (rows read contiguously).
    float *w = malloc(sizeof(float) * H * COL_BLOCK);
    if (!w) { __atomic_store_n(&j->oom, 1, __ATOMIC_RELAXED); return; }
    int64_t blocks = (K + COL_BLOCK - 1) / COL_BLOCK, per = (blocks + n_tasks - 1) / n_tasks;
    for (int64_t b = task * per; b < (task + 1) * per && b < blocks; b++) {
        int64_t c0 = b * COL_BLOCK, nc = K - c0 < COL_BLOCK ? K - c0 : COL_BLOCK;
        for (int64_t r = 0; r < H; r++)
            for (int64_t k = 0; k < nc; k++) w[k * H + r] = bs_load_elem(t->data, t->dtype, (size_t)(r * K + c0 + k)) * j->signs[r];
        for (int64_t k = 0; k < nc; k++) bs_hadamard_row(j->tr, w + k * H, 0);
        for (int64_t r = 0; r < H; r++)
            for (int64_t k = 0; k < nc; k++) bs_store_elem(it->out, it->dt, (size_t)(r * K + c0 + k), w[k * H + r]);
    }
    free(w);
}

static int fold_item_run(fold_item *it, const bs_hadamard *tr, const float *signs, bs_err *err) {
    const bs_tensor_info *t = it->t;
    size_t count = 1;
    for (int d = 0; d < t->n_dims; d++) count *= (size_t)t->shape[d];
    if (!(it->out = bs_malloc(count * bs_dtype_size(it->dt), err))) return bs_wrap(err, "rotate: %s", it->name);
    switch (it->kind) {
    case FOLD_COPY:
        for (size_t i = 0; i < count; i++) bs_store_elem(it->out, it->dt, i, bs_load_elem(t->data, t->dtype, i));
        return 0;
    case FOLD_ONES:
        for (size_t i = 0; i < count; i++) bs_store_elem(it->out, it->dt, i, 1.0f);
        return 0;
    default: break;
    }
    fold_job j = { it, tr, signs, 0 };
    int64_t units = it->kind == FOLD_READER ? t->shape[0] : (t->shape[1] + COL_BLOCK - 1) / COL_BLOCK;
    int tasks = bs_pool_size() * 4;
    if (tasks > units) tasks = (int)units;
    if ((int64_t)count < (1 << 16) || tasks <= 1) fold_task(&j, 0, 1);
    else bs_parallel_for(tasks, fold_task, &j);
    if (j.oom) return bs_fail(err, "rotate: %s: out of memory for a work row", it->name);
    return 0;
}

// ---- the command ----------------------------------------------------------------------------------------------

static int dtype_of(const char *name, bs_dtype *dt) {
    if (!name) return 1;
    if (!strcasecmp(name, "F32") || !strcasecmp(name, "float32")) *dt = BS_F32;
    else if (!strcasecmp(name, "BF16") || !strcasecmp(name, "bfloat16")) *dt = BS_BF16;
    else if (!strcasecmp(name, "F16") || !strcasecmp(name, "float16")) *dt = BS_F16;
    else return -1;
    return 0;
}

int bs_rotate_checkpoint(const char *in_dir, const char *out_dir, const bs_rotate_opts *o, bs_err *err) {
    char path[4096];
    bs_dtype out_dt = BS_F32;
    int force_dt = dtype_of(o->dtype, &out_dt);
    if (force_dt < 0) return bs_fail(err, "--dtype must be f32, bf16 or f16, not %s", o->dtype);
    snprintf(path, sizeof path, "%s/config.json", in_dir);
    cJSON *cfg = bs_json_load(path, err);
    if (!cfg) return -1;
    bs_qwen3_config c;
    bs_checkpoint *ck = NULL;
    bs_st_writer *w = NULL;
    fold_plan plan = { 0 };
    char *used = NULL;
    bs_r1_basis basis = { 0 };
    int rc = -1;
    if (bs_qwen3_config_load(&c, in_dir, err)) goto out;
    if (c.arch == BS_ARCH_GEMMA4) { bs_fail(err, "%s: rotate folds Qwen3 and Llama targets; Gemma-4 (sandwich norms) is not supported", path); goto out; }
    if (cJSON_GetObjectItemCaseSensitive(cfg, "quantization") || cJSON_GetObjectItemCaseSensitive(cfg, "quantization_config")) {
        bs_fail(err, "%s: this checkpoint is quantised (config.json has a quantization block); rotate reads float weights: rotate first, "
                "then quantize", path);
        goto out;
    }
    if (cJSON_GetObjectItemCaseSensitive(cfg, BS_R1_KEY)) {
        bs_fail(err, "%s: this checkpoint is already R1-folded (config.json has \"%s\"); rotate the unrotated original instead", path, BS_R1_KEY);
        goto out;
    }
    bs_hadamard tr;
    if (bs_hadamard_init(&tr, c.hidden_size)) {
        bs_fail(err, "%s: hidden_size %d is not m x 2^k for m in {1, 12, 20, 28}: MLX's Hadamard transform has no length %d, so the "
                "residual stream cannot be R1-rotated", path, c.hidden_size, c.hidden_size);
        goto out;
    }
    int H = c.hidden_size;
    basis.n = H;
    if (!(basis.signs = bs_malloc(sizeof(float) * H, err)) || !(basis.final_gain = bs_malloc(sizeof(float) * H, err))) goto out;
    if (o->signs_file) {
        if (bs_r1_signs_load(o->signs_file, H, basis.signs, err)) goto out;
    } else {
        bs_r1_signs_from_seed(o->seed, H, basis.signs);
        basis.has_seed = 1; basis.seed = o->seed;
    }
    if (bs_checkpoint_open(&ck, in_dir, err)) goto out;
    if (!(used = bs_calloc((size_t)ck->n_tensors + 1, 1, err))) goto out;
    const float *gf = NULL;
    if (make_plan(&plan, &c, ck, used, &gf, err)) { bs_wrap(err, "rotate"); goto out; }
    memcpy(basis.final_gain, gf, sizeof(float) * H);
    if (!(w = bs_st_writer_new())) { bs_fail(err, "out of memory"); goto out; }
    for (int i = 0; i < plan.n; i++) {
        fold_item *it = &plan.items[i];
        if (force_dt == 0) it->dt = out_dt;
        if (fold_item_run(it, &tr, basis.signs, err)) goto out;
        if (bs_st_writer_add(w, it->name, bs_dtype_name(it->dt), it->t->n_dims, it->t->shape, it->out, err)) goto out;
    }
    mkdir(out_dir, 0755);
    struct stat st;
    if (stat(out_dir, &st) != 0 || !S_ISDIR(st.st_mode)) { bs_fail(err, "%s: cannot create the output folder", out_dir); goto out; }
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    if (bs_st_writer_write(w, path, err)) goto out;
    // config.json: the head untied, the fold recorded, the storage dtype where --dtype changed it.
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, "tie_word_embeddings");
    cJSON_AddBoolToObject(cfg, "tie_word_embeddings", 0);
    if (force_dt == 0) {
        const char *hf = out_dt == BS_F32 ? "float32" : out_dt == BS_BF16 ? "bfloat16" : "float16";
        static const char *keys[2] = { "dtype", "torch_dtype" };
        for (int k = 0; k < 2; k++)
            if (cJSON_GetObjectItemCaseSensitive(cfg, keys[k])) cJSON_ReplaceItemInObjectCaseSensitive(cfg, keys[k], cJSON_CreateString(hf));
    }
    if (bs_r1_basis_write(&basis, out_dir, cfg, err)) goto out;
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    if (bs_json_write_file(cfg, path, err) || bs_copy_model_extras(in_dir, out_dir, err)) goto out;
    rc = 0;
out:
    plan_free(&plan);
    free(used);
    bs_r1_basis_free(&basis);
    bs_st_writer_free(w);
    bs_checkpoint_close(ck);
    cJSON_Delete(cfg);
    return rc;
}
