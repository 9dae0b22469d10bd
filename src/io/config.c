#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "io/config.h"
#include "io/json.h"

void bs_qwen3_config_add_eos(bs_qwen3_config *c, int id) {
    for (int j = 0; j < c->n_eos; j++) if (c->eos_ids[j] == id) return;
    if (c->n_eos < BS_MAX_EOS) c->eos_ids[c->n_eos++] = id;
}

static int add_eos(bs_qwen3_config *c, const cJSON *root, const char *file, bs_err *err) {
    int ids[BS_MAX_EOS], n = 0;
    if (bs_json_int_list(root, "eos_token_id", ids, BS_MAX_EOS, &n, file, err)) return -1;
    for (int i = 0; i < n; i++) bs_qwen3_config_add_eos(c, ids[i]);
    return 0;
}

int bs_qwen3_config_parse(bs_qwen3_config *c, const cJSON *root, const char *file, bs_err *err) {
    memset(c, 0, sizeof *c);
    const long BIG = 1L << 30;
    if (bs_json_int(root, "vocab_size", 1, 1, BIG, &c->vocab_size, file, err) ||
        bs_json_int(root, "hidden_size", 1, 1, 1 << 20, &c->hidden_size, file, err) ||
        bs_json_int(root, "num_hidden_layers", 1, 1, 4096, &c->n_layers, file, err) ||
        bs_json_int(root, "num_attention_heads", 1, 1, 4096, &c->n_heads, file, err) ||
        bs_json_int(root, "intermediate_size", 1, 1, 1 << 24, &c->intermediate_size, file, err)) return -1;
    c->n_kv_heads = c->n_heads;
    c->head_dim = c->hidden_size / c->n_heads;
    c->max_position = 32768;
    double eps = 1e-6, theta = 10000.0;
    if (bs_json_int(root, "num_key_value_heads", 0, 1, 4096, &c->n_kv_heads, file, err) ||
        bs_json_int(root, "head_dim", 0, 2, 1 << 16, &c->head_dim, file, err) ||
        bs_json_int(root, "max_position_embeddings", 0, 1, BIG, &c->max_position, file, err) ||
        bs_json_num(root, "rms_norm_eps", 0, &eps, file, err) ||
        bs_json_bool(root, "tie_word_embeddings", 0, &c->tie_embeddings, file, err)) return -1;
    if (c->n_heads % c->n_kv_heads)
        return bs_fail(err, "%s: num_attention_heads (%d) must be a multiple of num_key_value_heads (%d)", file, c->n_heads, c->n_kv_heads);
    // (head_dim given is at least 2; the default can be 0: hidden_size 2 with 4 heads came from the fuzzer)
    if (c->head_dim < 2)
        return bs_fail(err, "%s: head_dim defaults to hidden_size / num_attention_heads = %d / %d = %d; a head needs at least 2 "
                       "dimensions (give \"head_dim\" or fewer heads)", file, c->hidden_size, c->n_heads, c->head_dim);
    if (c->head_dim % 2) return bs_fail(err, "%s: head_dim (%d) must be even for RoPE", file, c->head_dim);
    if (!(eps > 0 && eps < 1)) return bs_fail(err, "%s: rms_norm_eps must be in (0, 1)", file);
    // RoPE: transformers 5 nests it in rope_parameters; transformers 4 keeps rope_theta (and rope_scaling) at the top.
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    if (cJSON_IsObject(rp)) {
        if (bs_json_num(rp, "rope_theta", 0, &theta, file, err)) return -1;
    } else if (bs_json_num(root, "rope_theta", 0, &theta, file, err)) return -1;
    const cJSON *scal = cJSON_IsObject(rp) ? rp : rs;
    if (cJSON_IsObject(scal)) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(scal, "rope_type");
        if (!t) t = cJSON_GetObjectItemCaseSensitive(scal, "type");
        if (cJSON_IsString(t) && strcmp(t->valuestring, "default"))
            return bs_fail(err, "%s: rope type \"%s\" is not supported (blockspec implements the default RoPE of Qwen3)", file, t->valuestring);
    }
    if (!(theta > 1)) return bs_fail(err, "%s: rope_theta must be > 1", file);
    c->rms_eps = (float)eps; c->rope_theta = (float)theta;
    int use_sw = 0;
    if (bs_json_bool(root, "use_sliding_window", 0, &use_sw, file, err)) return -1;
    if (use_sw && bs_json_int(root, "sliding_window", 0, 0, BIG, &c->sliding_window, file, err)) return -1;
    c->bos_id = -1;
    if (bs_json_int(root, "bos_token_id", 0, 0, BIG, &c->bos_id, file, err)) return -1;
    return add_eos(c, root, file, err);
}

int bs_qwen3_config_load(bs_qwen3_config *c, const char *dir, bs_err *err) {
    char path[4096];
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return bs_fail(err, "%s: not a model folder (expected a folder with config.json and *.safetensors)", dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *root = bs_json_load(path, err);
    if (!root) return -1;
    int rc = -1;
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const cJSON *a0 = cJSON_IsArray(arch) ? cJSON_GetArrayItem(arch, 0) : NULL;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (cJSON_IsString(a0)) {
        if (strcmp(a0->valuestring, "Qwen3ForCausalLM")) {
            bs_fail(err, "%s: architectures[0] is \"%s\"; a target must be \"Qwen3ForCausalLM\"", path, a0->valuestring);
            goto out;
        }
    } else if (!cJSON_IsString(mt) || strcmp(mt->valuestring, "qwen3")) {
        bs_fail(err, "%s: not a Qwen3 config (expected architectures [\"Qwen3ForCausalLM\"] or model_type \"qwen3\")", path);
        goto out;
    }
    if (bs_qwen3_config_parse(c, root, path, err)) goto out;
    if (c->sliding_window) { bs_fail(err, "%s: sliding-window attention in the target is not supported", path); goto out; }
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (stat(path, &st) == 0) {
        cJSON *gen = bs_json_load(path, err);
        if (!gen || add_eos(c, gen, path, err)) { cJSON_Delete(gen); goto out; }
        cJSON_Delete(gen);
    }
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

cJSON *bs_qwen3_config_to_json(const bs_qwen3_config *c) {
    cJSON *r = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(r, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("Qwen3ForCausalLM"));
    cJSON_AddStringToObject(r, "model_type", "qwen3");
    cJSON_AddNumberToObject(r, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(r, "hidden_size", c->hidden_size);
    cJSON_AddNumberToObject(r, "num_hidden_layers", c->n_layers);
    cJSON_AddNumberToObject(r, "num_attention_heads", c->n_heads);
    cJSON_AddNumberToObject(r, "num_key_value_heads", c->n_kv_heads);
    cJSON_AddNumberToObject(r, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(r, "intermediate_size", c->intermediate_size);
    cJSON_AddNumberToObject(r, "max_position_embeddings", c->max_position);
    cJSON_AddNumberToObject(r, "rms_norm_eps", c->rms_eps);
    cJSON *rp = cJSON_AddObjectToObject(r, "rope_parameters");
    cJSON_AddStringToObject(rp, "rope_type", "default");
    cJSON_AddNumberToObject(rp, "rope_theta", c->rope_theta);
    cJSON_AddBoolToObject(r, "tie_word_embeddings", c->tie_embeddings);
    cJSON_AddStringToObject(r, "hidden_act", "silu");
    cJSON_AddStringToObject(r, "dtype", "bfloat16");
    if (c->bos_id >= 0) cJSON_AddNumberToObject(r, "bos_token_id", c->bos_id);
    if (c->n_eos == 1) cJSON_AddNumberToObject(r, "eos_token_id", c->eos_ids[0]);
    else if (c->n_eos > 1) {
        cJSON *e = cJSON_AddArrayToObject(r, "eos_token_id");
        for (int i = 0; i < c->n_eos; i++) cJSON_AddItemToArray(e, cJSON_CreateNumber(c->eos_ids[i]));
    }
    return r;
}
