// `blockspec quantize` (quantize_ckpt.h): reads a float checkpoint, writes an MLX-style affine one.
// Which matrices: like mlx-lm's default predicate (Linear and Embedding modules whose input width the
// group size divides), every 2-D tensor named "*.weight" with cols % group == 0; blockspec's loaders read
// each of those through bs_checkpoint_weight, so any of them may be quantised. Vectors (norms, biases)
// stay as they are.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "backend/affine.h"
#include "io/file.h"
#include "io/json.h"
#include "io/quantize_ckpt.h"
#include "io/safetensors.h"
#include "util/threadpool.h"

static int wants_quant(const bs_tensor_info *t, int group) {
    size_t l = strlen(t->name);
    return t->dtype_ok && t->n_dims == 2 && t->shape[0] > 0 && t->shape[1] > 0 && t->shape[1] % group == 0 && l > 7 &&
           !strcmp(t->name + l - 7, ".weight");
}

// One matrix quantised (rows in parallel): codes, and scales / biases stored in the source dtype.
typedef struct {
    const bs_tensor_info *t; int bits, group;
    uint32_t *codes; void *scales, *biases;
    int oom;   // a task could not allocate its row buffer (set by any task; reported by the caller)
} q_job;

// The scales of an F16 source are stored in F16 (as MLX does), a BF16 source's in BF16.
static void store_param(void *dst, bs_dtype dt, size_t i, float v) { bs_store_elem(dst, dt, i, v); }

static void q_task(void *p, int task, int n_tasks) {
    q_job *j = p;
    int64_t R = j->t->shape[0], K = j->t->shape[1], G = K / j->group, words = bs_affine_words(K, j->bits);
    int64_t per = (R + n_tasks - 1) / n_tasks, r0 = task * per, r1 = r0 + per < R ? r0 + per : R;
    float *w = malloc(sizeof(float) * (size_t)(K + 2 * G));
    if (!w) { __atomic_store_n(&j->oom, 1, __ATOMIC_RELAXED); return; }
    float *s = w + K, *b = s + G;
    bs_mat src = { .data = j->t->data, .dtype = j->t->dtype, .rows = R, .cols = K };
    for (int64_t r = r0; r < r1; r++) {
        bs_mat_row_f32(&src, r, w);
        bs_affine_quantize_row(w, K, j->bits, j->group, j->codes + r * words, s, b);
        for (int64_t g = 0; g < G; g++) {
            store_param(j->scales, j->t->dtype, (size_t)(r * G + g), s[g]);
            store_param(j->biases, j->t->dtype, (size_t)(r * G + g), b[g]);
        }
    }
    free(w);
}

int bs_quantize_checkpoint(const char *in_dir, const char *out_dir, int bits, int group, int *n_quantised, bs_err *err) {
    if (bits != 4 && bits != 8) return bs_fail(err, "--bits must be 4 or 8, not %d", bits);
    if (group != 32 && group != 64 && group != 128) return bs_fail(err, "--group must be 32, 64 or 128, not %d", group);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", in_dir);
    cJSON *cfg = bs_json_load(path, err);
    if (!cfg) return -1;
    if (cJSON_GetObjectItemCaseSensitive(cfg, "quantization") || cJSON_GetObjectItemCaseSensitive(cfg, "quantization_config")) {
        cJSON_Delete(cfg);
        return bs_fail(err, "%s: this checkpoint is already quantised (config.json has a quantization block); quantize reads float weights", path);
    }
    bs_checkpoint *ck = NULL;
    bs_st_writer *w = bs_st_writer_new();
    void **bufs = NULL;
    int n_bufs = 0, rc = -1, nq = 0;
    if (!w) { bs_fail(err, "out of memory"); goto out; }
    if (bs_checkpoint_open(&ck, in_dir, err)) goto out;
    if (!(bufs = calloc((size_t)ck->n_tensors * 3 + 1, sizeof *bufs))) { bs_fail(err, "out of memory"); goto out; }
    for (int i = 0; i < ck->n_tensors; i++) {
        const bs_tensor_info *t = &ck->tensors[i];
        if (!wants_quant(t, group)) {
            if (bs_st_writer_add(w, t->name, t->dtype_name, t->n_dims, t->shape, t->data, err)) goto out;
            continue;
        }
        int64_t R = t->shape[0], K = t->shape[1], G = K / group, words = bs_affine_words(K, bits);
        size_t ps = bs_dtype_size(t->dtype);
        q_job j = { .t = t, .bits = bits, .group = group };
        if (!(j.codes = bufs[n_bufs++] = bs_malloc(sizeof(uint32_t) * (size_t)(R * words), err)) ||
            !(j.scales = bufs[n_bufs++] = bs_malloc(ps * (size_t)(R * G), err)) || !(j.biases = bufs[n_bufs++] = bs_malloc(ps * (size_t)(R * G), err)))
            goto out;
        if (R * K < (1 << 16)) q_task(&j, 0, 1);
        else bs_parallel_for(bs_pool_size() * 4 < R ? bs_pool_size() * 4 : (int)R, q_task, &j);
        if (j.oom) { bs_fail(err, "quantize: %s: out of memory for a row of %lld weights", t->name, (long long)K); goto out; }
        char name[600];
        size_t l = strlen(t->name) - 7;
        int64_t cs[2] = { R, words }, ss[2] = { R, G };
        snprintf(name, sizeof name, "%.*s.weight", (int)l, t->name);
        if (bs_st_writer_add(w, name, "U32", 2, cs, j.codes, err)) goto out;
        snprintf(name, sizeof name, "%.*s.scales", (int)l, t->name);
        if (bs_st_writer_add(w, name, t->dtype_name, 2, ss, j.scales, err)) goto out;
        snprintf(name, sizeof name, "%.*s.biases", (int)l, t->name);
        if (bs_st_writer_add(w, name, t->dtype_name, 2, ss, j.biases, err)) goto out;
        nq++;
    }
    if (!nq) { bs_fail(err, "%s: no matrix has an input width that group size %d divides; nothing to quantise", in_dir, group); goto out; }
    mkdir(out_dir, 0755);
    struct stat st;
    if (stat(out_dir, &st) != 0 || !S_ISDIR(st.st_mode)) { bs_fail(err, "%s: cannot create the output folder", out_dir); goto out; }
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    if (bs_st_writer_write(w, path, err)) goto out;
    // config.json: the source's, plus the block mlx-lm writes (and its HF-style copy).
    cJSON *q = cJSON_CreateObject();
    cJSON_AddNumberToObject(q, "group_size", group);
    cJSON_AddNumberToObject(q, "bits", bits);
    cJSON_AddStringToObject(q, "mode", "affine");
    cJSON_AddItemToObject(cfg, "quantization", q);
    cJSON_AddItemToObject(cfg, "quantization_config", cJSON_Duplicate(q, 1));
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    if (bs_json_write_file(cfg, path, err) || bs_copy_model_extras(in_dir, out_dir, err)) goto out;
    if (n_quantised) *n_quantised = nq;
    rc = 0;
out:
    for (int i = 0; i < n_bufs; i++) free(bufs[i]);
    free(bufs);
    bs_st_writer_free(w);
    bs_checkpoint_close(ck);
    cJSON_Delete(cfg);
    return rc;
}
