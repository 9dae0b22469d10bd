// The record of an R1 fold: config.json's "blockspec_r1" block and its sidecar (r1_basis.h).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "backend/hadamard.h"
#include "io/json.h"
#include "io/r1_basis.h"
#include "io/safetensors.h"

void bs_r1_basis_free(bs_r1_basis *b) {
    free(b->signs);
    free(b->final_gain);
    memset(b, 0, sizeof *b);
}

// Tensor `name` of an open safetensors file as n floats: 1-D, n elements, a float dtype. what: for messages.
static int read_vector(const bs_checkpoint *ck, const char *name, int n, const char *what, float *out, bs_err *err) {
    const bs_tensor_info *t = bs_checkpoint_find(ck, name);
    if (!t) return bs_fail(err, "%s: no tensor '%s' (%s)", ck->path, name, what);
    if (t->n_dims != 1) return bs_fail(err, "%s: tensor '%s' has %d dimensions; %s is a vector of %d values", ck->path, name, t->n_dims, what, n);
    if (t->shape[0] != n)
        return bs_fail(err, "%s: tensor '%s' has %lld elements, but the model's hidden_size is %d (%s: one per hidden channel)", ck->path, name,
                       (long long)t->shape[0], n, what);
    if (!t->dtype_ok) return bs_fail(err, "%s: tensor '%s' has dtype %s; it must be F32, BF16 or F16", ck->path, name, t->dtype_name);
    for (int i = 0; i < n; i++) out[i] = bs_load_elem(t->data, t->dtype, (size_t)i);
    return 0;
}

static int check_signs(const float *s, int n, const char *where, bs_err *err) {
    for (int i = 0; i < n; i++)
        if (s[i] != 1.0f && s[i] != -1.0f) return bs_fail(err, "%s: sign %d is %g; every sign must be +1 or -1", where, i, s[i]);
    return 0;
}

int bs_r1_signs_load(const char *path, int n, float *out, bs_err *err) {
    bs_checkpoint *ck = NULL;
    if (bs_checkpoint_open(&ck, path, err)) return bs_wrap(err, "signs file");
    char where[4200];
    snprintf(where, sizeof where, "%s: tensor 'signs'", path);
    int rc = read_vector(ck, "signs", n, "the R1 signs", out, err) || check_signs(out, n, where, err) ? -1 : 0;
    bs_checkpoint_close(ck);
    return rc;
}

int bs_r1_basis_load(bs_r1_basis *b, const char *dir, int hidden, bs_err *err) {
    memset(b, 0, sizeof *b);
    char cfg_path[4096];
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;   // a single weights file: no config, no fold
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    if (stat(cfg_path, &st) != 0) return 0;
    cJSON *root = bs_json_load(cfg_path, err);
    if (!root) return -1;
    const cJSON *blk = cJSON_GetObjectItemCaseSensitive(root, BS_R1_KEY);
    if (!blk || cJSON_IsNull(blk)) { cJSON_Delete(root); return 0; }
    bs_checkpoint *ck = NULL;
    int rc = -1, n = 0;
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(blk, "transform"), *file = cJSON_GetObjectItemCaseSensitive(blk, "file");
    if (!cJSON_IsObject(blk)) { bs_fail(err, "%s: \"%s\" must be an object (written by blockspec rotate)", cfg_path, BS_R1_KEY); goto out; }
    if (!cJSON_IsString(tr) || strcmp(tr->valuestring, BS_R1_TRANSFORM)) {
        bs_fail(err, "%s: \"%s\".\"transform\" must be \"%s\" (the only rotation blockspec knows)", cfg_path, BS_R1_KEY, BS_R1_TRANSFORM);
        goto out;
    }
    if (bs_json_int(blk, "n", 1, 1, 1 << 24, &n, cfg_path, err)) goto out;
    if (n != hidden) { bs_fail(err, "%s: \"%s\".\"n\" is %d but hidden_size is %d", cfg_path, BS_R1_KEY, n, hidden); goto out; }
    bs_hadamard t;
    if (bs_hadamard_init(&t, n)) {
        bs_fail(err, "%s: \"%s\".\"n\" = %d is not m * 2^k for m in {1, 12, 20, 28} (no Hadamard transform of that length)", cfg_path, BS_R1_KEY, n);
        goto out;
    }
    if (!cJSON_IsString(file) || !*file->valuestring || strchr(file->valuestring, '/')) {
        bs_fail(err, "%s: \"%s\".\"file\" must name the sidecar beside config.json (\"%s\")", cfg_path, BS_R1_KEY, BS_R1_FILE);
        goto out;
    }
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(blk, "r1Seed");
    if (seed && !cJSON_IsNull(seed)) {
        if (!bs_json_is_int(seed, 0, 4294967295.0)) { bs_fail(err, "%s: \"%s\".\"r1Seed\" must be an integer in [0, 2^32)", cfg_path, BS_R1_KEY); goto out; }
        b->has_seed = 1;
        b->seed = (uint32_t)(int64_t)seed->valuedouble;
    }
    char side[4400];
    snprintf(side, sizeof side, "%s/%s", dir, file->valuestring);
    if (bs_checkpoint_open(&ck, side, err)) { bs_wrap(err, "%s names the R1 sidecar", cfg_path); goto out; }
    b->n = n;
    if (!(b->signs = bs_malloc(sizeof(float) * n, err)) || !(b->final_gain = bs_malloc(sizeof(float) * n, err))) goto out;
    if (read_vector(ck, "signs", n, "the R1 signs", b->signs, err) ||
        read_vector(ck, "final_norm_gain", n, "the final norm's gain before the fold", b->final_gain, err)) goto out;
    char where[4500];
    snprintf(where, sizeof where, "%s: tensor 'signs'", side);
    if (check_signs(b->signs, n, where, err)) goto out;
    if (b->has_seed) {
        float *want = bs_malloc(sizeof(float) * n, err);
        if (!want) goto out;
        bs_r1_signs_from_seed(b->seed, n, want);
        int same = !memcmp(want, b->signs, sizeof(float) * n);
        free(want);
        if (!same) { bs_fail(err, "%s: tensor 'signs' is not the sign stream of r1Seed %u in %s", side, b->seed, cfg_path); goto out; }
    }
    for (int i = 0; i < n; i++)
        if (!isfinite(b->final_gain[i])) { bs_fail(err, "%s: tensor 'final_norm_gain' element %d is not finite", side, i); goto out; }
    rc = 1;
out:
    if (rc < 0) bs_r1_basis_free(b);
    bs_checkpoint_close(ck);
    cJSON_Delete(root);
    return rc;
}

int bs_r1_basis_write(const bs_r1_basis *b, const char *dir, cJSON *config, bs_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, BS_R1_FILE);
    bs_st_writer *w = bs_st_writer_new();
    if (!w) return bs_fail(err, "out of memory");
    int64_t shape[1] = { b->n };
    int rc = bs_st_writer_add(w, "signs", "F32", 1, shape, b->signs, err) || bs_st_writer_add(w, "final_norm_gain", "F32", 1, shape, b->final_gain, err) ||
             bs_st_writer_write(w, path, err) ? -1 : 0;
    bs_st_writer_free(w);
    if (rc) return -1;
    cJSON *blk = cJSON_CreateObject();
    if (!blk) return bs_fail(err, "out of memory");
    cJSON_AddStringToObject(blk, "transform", BS_R1_TRANSFORM);
    cJSON_AddNumberToObject(blk, "n", b->n);
    cJSON_AddStringToObject(blk, "file", BS_R1_FILE);
    if (b->has_seed) cJSON_AddNumberToObject(blk, "r1Seed", b->seed);
    cJSON_DeleteItemFromObjectCaseSensitive(config, BS_R1_KEY);
    cJSON_AddItemToObject(config, BS_R1_KEY, blk);
    return 0;
}
