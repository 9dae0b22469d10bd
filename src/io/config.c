#include <math.h>
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

// One number of a RoPE scaling object, named in errors by its full path (e.g. "rope_scaling.factor").
static int rope_num(const cJSON *o, const char *obj, const char *key, double lo, double *out, const char *file, bs_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return bs_fail(err, "%s: field \"%s.%s\" is missing (llama3 RoPE scaling needs it)", file, obj, key);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo) || !isfinite(v->valuedouble))
        return bs_fail(err, "%s: field \"%s.%s\" must be a number >= %g", file, obj, key, lo);
    *out = v->valuedouble;
    return 0;
}

// The RoPE type and its parameters from rope_scaling / rope_parameters (obj names it in errors). Types other
// than "default" and "llama3" change the frequencies in ways blockspec does not compute: refused, not ignored.
static int parse_rope(bs_rope_scaling *r, const cJSON *o, const char *obj, const char *file, bs_err *err) {
    memset(r, 0, sizeof *r);
    const char *key = "rope_type";
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!t || cJSON_IsNull(t)) { key = "type"; t = cJSON_GetObjectItemCaseSensitive(o, key); }   // the older name
    if (!t || cJSON_IsNull(t)) return 0;
    if (!cJSON_IsString(t)) return bs_fail(err, "%s: field \"%s.%s\" must be a string", file, obj, key);
    if (!strcmp(t->valuestring, "default")) return 0;
    if (strcmp(t->valuestring, "llama3"))
        return bs_fail(err, "%s: field \"%s.%s\" is \"%s\"; blockspec supports the RoPE types \"default\" and \"llama3\"", file, obj, key,
                       t->valuestring);
    double om = 0;
    r->type = BS_ROPE_LLAMA3;
    if (rope_num(o, obj, "factor", 1, &r->factor, file, err) || rope_num(o, obj, "low_freq_factor", 0, &r->low_freq_factor, file, err) ||
        rope_num(o, obj, "high_freq_factor", 0, &r->high_freq_factor, file, err) ||
        rope_num(o, obj, "original_max_position_embeddings", 1, &om, file, err)) return -1;
    if (!(r->low_freq_factor > 0)) return bs_fail(err, "%s: field \"%s.low_freq_factor\" must be > 0", file, obj);
    if (!(r->high_freq_factor > r->low_freq_factor))
        return bs_fail(err, "%s: field \"%s.high_freq_factor\" (%g) must exceed \"low_freq_factor\" (%g)", file, obj, r->high_freq_factor,
                       r->low_freq_factor);
    if (om != floor(om) || om > (double)(1 << 30))
        return bs_fail(err, "%s: field \"%s.original_max_position_embeddings\" must be an integer in [1, 2^30]", file, obj);
    r->original_max = (int)om;
    return 0;
}

// What the shared layer does not compute: biases on the projections, activations other than SiLU.
static int refuse_unsupported(const cJSON *root, const char *file, bs_err *err) {
    static const char *const bias[] = { "attention_bias", "mlp_bias" };
    for (int i = 0; i < 2; i++) {
        int on = 0;
        if (bs_json_bool(root, bias[i], 0, &on, file, err)) return -1;
        if (on) return bs_fail(err, "%s: field \"%s\" is true; blockspec's layers have no biases on their projections (not supported)", file, bias[i]);
    }
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
    if (act && !cJSON_IsNull(act) && !(cJSON_IsString(act) && !strcmp(act->valuestring, "silu")))
        return bs_fail(err, "%s: field \"hidden_act\" must be \"silu\" (the SwiGLU MLP blockspec computes)", file);
    return 0;
}

int bs_qwen3_config_parse(bs_qwen3_config *c, const cJSON *root, const char *file, bs_err *err) {
    if (bs_model_arch_of(root) == BS_ARCH_GEMMA4) return bs_gemma4_config_parse(c, root, file, err);
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
    if (cJSON_IsObject(rp) ? parse_rope(&c->rope, rp, "rope_parameters", file, err)
                           : cJSON_IsObject(rs) && parse_rope(&c->rope, rs, "rope_scaling", file, err)) return -1;
    if (!(theta > 1)) return bs_fail(err, "%s: rope_theta must be > 1", file);
    c->rms_eps = (float)eps; c->rope_theta = (float)theta;
    if (refuse_unsupported(root, file, err)) return -1;
    // The family: from architectures / model_type where they name one; drafter backbones (DFlashDraftModel,
    // Qwen3DSparkModel) are Qwen3 layers whatever their target.
    int family = bs_model_arch_of(root);
    c->arch = family < 0 ? BS_ARCH_QWEN3 : (bs_model_arch)family;
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
    int family = bs_model_arch_of(root);
    if (family < 0) {
        if (cJSON_IsString(a0))
            bs_fail(err, "%s: architectures[0] is \"%s\"; a target must be \"Qwen3ForCausalLM\", \"LlamaForCausalLM\", "
                    "\"Gemma4ForCausalLM\" or \"Gemma4ForConditionalGeneration\"", path, a0->valuestring);
        else
            bs_fail(err, "%s: not a Qwen3, Llama or Gemma-4 config (expected architectures [\"Qwen3ForCausalLM\"], [\"LlamaForCausalLM\"], "
                    "[\"Gemma4ForCausalLM\"] or [\"Gemma4ForConditionalGeneration\"], or model_type \"qwen3\", \"llama\", \"gemma4_text\" "
                    "or \"gemma4\")", path);
        goto out;
    }
    if (bs_qwen3_config_parse(c, root, path, err)) goto out;
    if (c->sliding_window && c->arch != BS_ARCH_GEMMA4) { bs_fail(err, "%s: sliding-window attention in the target is not supported", path); goto out; }
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

int bs_model_arch_of(const cJSON *root) {
    static const struct { const char *arch, *type; bs_model_arch family; } known[] = {
        { "Qwen3ForCausalLM", "qwen3", BS_ARCH_QWEN3 }, { "LlamaForCausalLM", "llama", BS_ARCH_LLAMA },
        { "Gemma4ForCausalLM", "gemma4_text", BS_ARCH_GEMMA4 }, { "Gemma4ForConditionalGeneration", "gemma4", BS_ARCH_GEMMA4 },
    };
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const cJSON *a0 = cJSON_IsArray(arch) ? cJSON_GetArrayItem(arch, 0) : NULL;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (cJSON_IsString(a0) ? !strcmp(a0->valuestring, known[i].arch) : cJSON_IsString(mt) && !strcmp(mt->valuestring, known[i].type))
            return known[i].family;
    return -1;
}

cJSON *bs_qwen3_config_to_json(const bs_qwen3_config *c) {
    int llama = c->arch == BS_ARCH_LLAMA;
    cJSON *r = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(r, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(llama ? "LlamaForCausalLM" : "Qwen3ForCausalLM"));
    cJSON_AddStringToObject(r, "model_type", llama ? "llama" : "qwen3");
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
    cJSON_AddStringToObject(rp, "rope_type", c->rope.type == BS_ROPE_LLAMA3 ? "llama3" : "default");
    cJSON_AddNumberToObject(rp, "rope_theta", c->rope_theta);
    if (c->rope.type == BS_ROPE_LLAMA3) {
        cJSON_AddNumberToObject(rp, "factor", c->rope.factor);
        cJSON_AddNumberToObject(rp, "low_freq_factor", c->rope.low_freq_factor);
        cJSON_AddNumberToObject(rp, "high_freq_factor", c->rope.high_freq_factor);
        cJSON_AddNumberToObject(rp, "original_max_position_embeddings", c->rope.original_max);
    }
    if (llama) { cJSON_AddBoolToObject(r, "attention_bias", 0); cJSON_AddBoolToObject(r, "mlp_bias", 0); }
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

int bs_cfg_layer_head_dim(const bs_qwen3_config *c, int l) {
    return c->arch == BS_ARCH_GEMMA4 && c->gemma.full[l] ? c->gemma.global_head_dim : c->head_dim;
}
int bs_cfg_layer_kv_heads(const bs_qwen3_config *c, int l) {
    return c->arch == BS_ARCH_GEMMA4 && c->gemma.full[l] ? c->gemma.global_kv_heads : c->n_kv_heads;
}
int bs_cfg_layer_inter(const bs_qwen3_config *c, int l) {
    const bs_gemma4_config *g = &c->gemma;
    int first_shared = c->n_layers - g->n_kv_shared;
    return c->arch == BS_ARCH_GEMMA4 && g->double_wide_mlp && first_shared > 0 && l >= first_shared ? 2 * c->intermediate_size
                                                                                                   : c->intermediate_size;
}
int bs_cfg_layer_kv_source(const bs_qwen3_config *c, int l) {
    const bs_gemma4_config *g = &c->gemma;
    int first_shared = c->n_layers - g->n_kv_shared;
    if (c->arch != BS_ARCH_GEMMA4 || l < first_shared) return l;
    for (int j = first_shared - 1; j >= 0; j--) if (g->full[j] == g->full[l]) return j;
    return l;   // (refused by the parser)
}
int bs_cfg_max_kv_width(const bs_qwen3_config *c) {
    int w = c->n_kv_heads * c->head_dim;
    for (int l = 0; c->arch == BS_ARCH_GEMMA4 && l < c->n_layers; l++)
        if (bs_cfg_layer_kv_heads(c, l) * bs_cfg_layer_head_dim(c, l) > w) w = bs_cfg_layer_kv_heads(c, l) * bs_cfg_layer_head_dim(c, l);
    return w;
}
int bs_cfg_max_q_width(const bs_qwen3_config *c) {
    int w = c->n_heads * c->head_dim;
    for (int l = 0; c->arch == BS_ARCH_GEMMA4 && l < c->n_layers; l++)
        if (c->n_heads * bs_cfg_layer_head_dim(c, l) > w) w = c->n_heads * bs_cfg_layer_head_dim(c, l);
    return w;
}
int bs_cfg_max_inter(const bs_qwen3_config *c) {
    int w = c->intermediate_size;
    for (int l = 0; c->arch == BS_ARCH_GEMMA4 && l < c->n_layers; l++) if (bs_cfg_layer_inter(c, l) > w) w = bs_cfg_layer_inter(c, l);
    return w;
}
