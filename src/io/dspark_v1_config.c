#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "io/dspark_v1_config.h"
#include "io/json.h"

int bs_dspark_v1_present(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, BS_DSPARK_V1_FILE);
    return access(path, F_OK) == 0;
}

// An integer field obj.key in [lo, hi], named "<section>.<key>" in errors.
static int get_int(const cJSON *obj, const char *section, const char *key, long lo, long hi, int *out, const char *file, bs_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) return bs_fail(err, "%s: missing field \"%s.%s\"", file, section, key);
    if (!bs_json_is_int(v, (double)lo, (double)hi))
        return bs_fail(err, "%s: field \"%s.%s\" must be an integer in [%ld, %ld]", file, section, key, lo, hi);
    *out = (int)v->valuedouble;
    return 0;
}

static const char *const LAYER_PARAMS[] = { "attn_norm", "q", "k", "v", "o", "ff_norm", "gate", "up", "down" };
static const char *const TOP_PARAMS[] = { "ctx_proj", "tok_proj", "mask_emb", "pos_emb", "out_norm", "out_proj",
                                          "markov.w1", "markov.w2", "conf.w", "conf.b" };
#define N_LAYER_PARAMS 9
#define N_TOP_PARAMS 10

int bs_dspark_v1_n_params(const bs_dspark_v1_config *c) { return c->n_layers * N_LAYER_PARAMS + N_TOP_PARAMS; }
void bs_dspark_v1_param_name(const bs_dspark_v1_config *c, int i, char *buf, size_t cap) {
    if (i < c->n_layers * N_LAYER_PARAMS) snprintf(buf, cap, "bb.%d.%s", i / N_LAYER_PARAMS, LAYER_PARAMS[i % N_LAYER_PARAMS]);
    else snprintf(buf, cap, "%s", TOP_PARAMS[i - c->n_layers * N_LAYER_PARAMS]);
}

int bs_dspark_v1_config_parse(bs_dspark_v1_config *c, const cJSON *root, const char *file, bs_err *err) {
    memset(c, 0, sizeof *c);
    if (!cJSON_IsObject(root)) return bs_fail(err, "%s: not a JSON object", file);
    // kind and version: the seed writes both; a file naming another kind or version is another format.
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(root, "kind");
    if (kind && !cJSON_IsNull(kind) && (!cJSON_IsString(kind) || strcmp(kind->valuestring, "dspark-drafter")))
        return bs_fail(err, "%s: field \"kind\" must be \"dspark-drafter\" (the seed's DSpark v1 drafter)", file);
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (ver && !cJSON_IsNull(ver) && !bs_json_is_int(ver, 1, 1))
        return bs_fail(err, "%s: field \"version\" must be 1 (blockspec reads DSpark v1 drafters only)", file);
    const cJSON *tid = cJSON_GetObjectItemCaseSensitive(root, "target_id");
    if (tid && !cJSON_IsNull(tid)) {
        if (!cJSON_IsString(tid)) return bs_fail(err, "%s: field \"target_id\" must be a string", file);
        snprintf(c->target_id, sizeof c->target_id, "%s", tid->valuestring);
    }

    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "config"), *dims = cJSON_GetObjectItemCaseSensitive(root, "dims");
    if (!cJSON_IsObject(cfg)) return bs_fail(err, "%s: missing object \"config\" (gamma, dDraft, nLayers, nHeads, markovRank, ffMult)", file);
    if (!cJSON_IsObject(dims)) return bs_fail(err, "%s: missing object \"dims\" (hiddenSize, vocabSize, eps: the target's)", file);
    if (get_int(cfg, "config", "gamma", 1, BS_MAX_DRAFT, &c->gamma, file, err) ||
        get_int(cfg, "config", "dDraft", 1, 1 << 16, &c->d_draft, file, err) ||
        get_int(cfg, "config", "nLayers", 1, BS_DSPARK_V1_MAX_LAYERS, &c->n_layers, file, err) ||
        get_int(cfg, "config", "nHeads", 1, 1 << 12, &c->n_heads, file, err) ||
        get_int(cfg, "config", "markovRank", 1, 1 << 16, &c->markov_rank, file, err) ||
        get_int(cfg, "config", "ffMult", 1, 64, &c->ff_mult, file, err) ||
        get_int(dims, "dims", "hiddenSize", 1, 1 << 20, &c->hidden_size, file, err) ||
        get_int(dims, "dims", "vocabSize", 1, 1 << 24, &c->vocab_size, file, err)) return -1;
    if (c->d_draft % c->n_heads)
        return bs_fail(err, "%s: field \"config.dDraft\" (%d) is not divisible by \"config.nHeads\" (%d)", file, c->d_draft, c->n_heads);
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(dims, "eps");
    if (!eps || cJSON_IsNull(eps)) return bs_fail(err, "%s: missing field \"dims.eps\" (the target's rms_norm_eps)", file);
    if (!cJSON_IsNumber(eps) || !(eps->valuedouble > 0) || !(eps->valuedouble < 1))
        return bs_fail(err, "%s: field \"dims.eps\" must be a number in (0, 1)", file);
    c->eps = (float)eps->valuedouble;

    // param_names: the seed's loader reads tensors by the names the config implies and ignores this list;
    // blockspec does the same, and only notes (param_names_ok) whether the list is the canonical one.
    const cJSON *names = cJSON_GetObjectItemCaseSensitive(root, "param_names");
    c->param_names_ok = 1;
    if (names && !cJSON_IsNull(names)) {
        if (!cJSON_IsArray(names)) return bs_fail(err, "%s: field \"param_names\" must be a list of strings", file);
        c->n_param_names = cJSON_GetArraySize(names);
        if (c->n_param_names != bs_dspark_v1_n_params(c)) c->param_names_ok = 0;
        for (int i = 0; i < c->n_param_names; i++) {
            const cJSON *e = cJSON_GetArrayItem(names, i);
            if (!cJSON_IsString(e)) return bs_fail(err, "%s: field \"param_names\"[%d] must be a string", file, i);
            char want[64];
            if (c->param_names_ok) {
                bs_dspark_v1_param_name(c, i, want, sizeof want);
                if (strcmp(want, e->valuestring)) c->param_names_ok = 0;
            }
        }
    }
    return 0;
}

int bs_dspark_v1_config_load(bs_dspark_v1_config *c, const char *dir, bs_err *err) {
    char path[4096];
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return bs_fail(err, "%s: not a drafter folder", dir);
    snprintf(path, sizeof path, "%s/%s", dir, BS_DSPARK_V1_FILE);
    cJSON *root = bs_json_load(path, err);
    if (!root) return -1;
    int rc = bs_dspark_v1_config_parse(c, root, path, err);
    cJSON_Delete(root);
    return rc;
}
