// config.json of a Gemma-4 text model (docs/gemma4.md): Gemma4ForCausalLM (the text fields at the top level,
// model_type "gemma4_text") or Gemma4ForConditionalGeneration (model_type "gemma4": the text tower's fields
// in "text_config", the vision and audio towers ignored). Defaults are transformers' Gemma4TextConfig's, since
// save_pretrained leaves out fields equal to them; what blockspec's layer does not compute is refused by name.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "io/config.h"
#include "io/json.h"

static int add_eos_ids(bs_qwen3_config *c, const cJSON *root, const char *file, bs_err *err) {
    int ids[BS_MAX_EOS], n = 0;
    if (bs_json_int_list(root, "eos_token_id", ids, BS_MAX_EOS, &n, file, err)) return -1;
    for (int i = 0; i < n; i++) bs_qwen3_config_add_eos(c, ids[i]);
    return 0;
}

// A field that must be absent, null, false or equal to `allowed` (a string), else refused naming it.
static int refuse_string(const cJSON *t, const char *key, const char *allowed, const char *why, const char *file, bs_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsString(v) && allowed && !strcmp(v->valuestring, allowed)) return 0;
    if (!cJSON_IsString(v)) return bs_fail(err, "%s: field \"%s\" must be a string", file, key);
    return bs_fail(err, "%s: field \"%s\" is \"%s\"; %s", file, key, v->valuestring, why);
}

// layer_types: "sliding_attention" / "full_attention" per layer; without it transformers' pattern (every 6th
// layer full). The last layer is always full (transformers forces it, with a warning).
static int parse_layer_types(bs_qwen3_config *c, const cJSON *t, const char *file, bs_err *err) {
    bs_gemma4_config *g = &c->gemma;
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(t, "layer_types");
    if (!lt || cJSON_IsNull(lt)) {
        for (int l = 0; l < c->n_layers; l++) g->full[l] = (l + 1) % 6 == 0;
    } else {
        if (!cJSON_IsArray(lt)) return bs_fail(err, "%s: field \"layer_types\" must be a list of strings", file);
        if (cJSON_GetArraySize(lt) != c->n_layers)
            return bs_fail(err, "%s: field \"layer_types\" has %d entries; num_hidden_layers is %d", file, cJSON_GetArraySize(lt), c->n_layers);
        for (int l = 0; l < c->n_layers; l++) {
            const cJSON *v = cJSON_GetArrayItem(lt, l);
            if (cJSON_IsString(v) && !strcmp(v->valuestring, "full_attention")) g->full[l] = 1;
            else if (cJSON_IsString(v) && !strcmp(v->valuestring, "sliding_attention")) g->full[l] = 0;
            else return bs_fail(err, "%s: field \"layer_types[%d]\" must be \"sliding_attention\" or \"full_attention\"", file, l);
        }
    }
    g->full[c->n_layers - 1] = 1;
    return 0;
}

// One layer type's RoPE (rope_parameters.<type>): sliding layers "default" over head_dim; full layers
// "proportional" (the first partial_rotary_factor of the pairs turn, with exponents over the whole head; the
// rest are still) or "default" when their head is the sliding head's size.
static int parse_rope_type(bs_qwen3_config *c, const cJSON *rp, const char *type, int full, const char *file, bs_err *err) {
    bs_gemma4_config *g = &c->gemma;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(rp, type);
    int used = 0;
    for (int l = 0; l < c->n_layers; l++) used |= g->full[l] == full;
    if (!used) return 0;
    if (!cJSON_IsObject(o)) return bs_fail(err, "%s: field \"rope_parameters.%s\" is missing (layer_types uses it)", file, type);
    char name[96];
    snprintf(name, sizeof name, "rope_parameters.%s", type);
    const cJSON *rt = cJSON_GetObjectItemCaseSensitive(o, "rope_type");
    const char *kind = cJSON_IsString(rt) ? rt->valuestring : "default";
    if (rt && !cJSON_IsNull(rt) && !cJSON_IsString(rt)) return bs_fail(err, "%s: field \"%s.rope_type\" must be a string", file, name);
    double theta = 0, partial = 1, factor = 1;
    if (bs_json_num(o, "rope_theta", 1, &theta, name, err)) return bs_wrap(err, "%s", file);
    if (!(theta > 1)) return bs_fail(err, "%s: field \"%s.rope_theta\" must be > 1", file, name);
    if (!full) {
        if (strcmp(kind, "default"))
            return bs_fail(err, "%s: field \"%s.rope_type\" is \"%s\"; blockspec supports \"default\" for sliding layers", file, name, kind);
        g->sliding_theta = (float)theta;
        return 0;
    }
    if (!strcmp(kind, "default")) {
        if (g->global_head_dim != c->head_dim)
            return bs_fail(err, "%s: field \"%s.rope_type\" is \"default\" with global_head_dim %d != head_dim %d (transformers builds that "
                           "table over head_dim; not supported)", file, name, g->global_head_dim, c->head_dim);
    } else if (strcmp(kind, "proportional")) {
        return bs_fail(err, "%s: field \"%s.rope_type\" is \"%s\"; blockspec supports \"proportional\" and \"default\" for full-attention layers",
                       file, name, kind);
    } else {
        if (bs_json_num(o, "partial_rotary_factor", 0, &partial, name, err) || bs_json_num(o, "factor", 0, &factor, name, err))
            return bs_wrap(err, "%s", file);
        if (!(partial >= 0 && partial <= 1)) return bs_fail(err, "%s: field \"%s.partial_rotary_factor\" must be in [0, 1]", file, name);
        if (!(factor > 0)) return bs_fail(err, "%s: field \"%s.factor\" must be > 0", file, name);
    }
    g->full_theta = (float)theta; g->full_partial = (float)partial; g->full_factor = (float)factor;
    return 0;
}

static int parse_rope(bs_qwen3_config *c, const cJSON *t, const char *file, bs_err *err) {
    bs_gemma4_config *g = &c->gemma;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(t, "rope_parameters");
    if (!rp || cJSON_IsNull(rp)) {   // transformers' defaults
        g->sliding_theta = 10000.0f; g->full_theta = 1000000.0f; g->full_partial = 0.25f; g->full_factor = 1.0f;
        return 0;
    }
    if (!cJSON_IsObject(rp)) return bs_fail(err, "%s: field \"rope_parameters\" must be an object keyed by layer type", file);
    if (cJSON_GetObjectItemCaseSensitive(rp, "rope_theta"))
        return bs_fail(err, "%s: field \"rope_parameters\" must be keyed by layer type (\"sliding_attention\", \"full_attention\"), "
                       "as Gemma-4 configs are", file);
    return parse_rope_type(c, rp, "sliding_attention", 0, file, err) || parse_rope_type(c, rp, "full_attention", 1, file, err) ? -1 : 0;
}

// What the layer does not compute: refused by name.
static int refuse_unsupported(const cJSON *t, const char *file, bs_err *err) {
    int on = 0;
    if (bs_json_bool(t, "attention_bias", 0, &on, file, err)) return -1;
    if (on) return bs_fail(err, "%s: field \"attention_bias\" is true; blockspec's layers have no biases on their projections (not supported)", file);
    if (bs_json_bool(t, "enable_moe_block", 0, &on, file, err)) return -1;
    if (on) return bs_fail(err, "%s: field \"enable_moe_block\" is true; Gemma-4 mixture-of-experts layers (26B-A4B) are not supported", file);
    if (refuse_string(t, "hidden_activation", "gelu_pytorch_tanh", "blockspec's Gemma-4 MLP computes \"gelu_pytorch_tanh\"", file, err) ||
        refuse_string(t, "use_bidirectional_attention", "vision",
                      "bidirectional attention over text tokens is not supported (\"vision\" or null: causal text)", file, err))
        return -1;
    return 0;
}

static int check_shared(const bs_qwen3_config *c, const char *file, bs_err *err) {
    const bs_gemma4_config *g = &c->gemma;
    int first = c->n_layers - g->n_kv_shared;
    for (int l = first; l < c->n_layers; l++) {
        int src = -1;
        for (int j = first - 1; j >= 0 && src < 0; j--) if (g->full[j] == g->full[l]) src = j;
        if (src < 0)
            return bs_fail(err, "%s: layer %d shares K/V (num_kv_shared_layers %d) but no earlier layer is a %s layer to share them with", file, l,
                           g->n_kv_shared, g->full[l] ? "full-attention" : "sliding");
    }
    return 0;
}

// The text model's fields (t: the root, or text_config).
static int parse_text(bs_qwen3_config *c, const cJSON *t, const char *file, bs_err *err) {
    bs_gemma4_config *g = &c->gemma;
    const long BIG = 1L << 30;
    c->vocab_size = 262144; c->hidden_size = 2304; c->intermediate_size = 9216; c->n_layers = 30;
    c->n_heads = 8; c->n_kv_heads = 4; c->head_dim = 256; c->max_position = 131072; c->tie_embeddings = 1;
    g->global_head_dim = 512; g->sliding_window = 512; g->ple_dim = 256; g->ple_vocab = 262144;
    int global_kv = -1;
    double eps = 1e-6, cap = 0;
    if (bs_json_int(t, "vocab_size", 0, 1, BIG, &c->vocab_size, file, err) ||
        bs_json_int(t, "hidden_size", 0, 1, 1 << 20, &c->hidden_size, file, err) ||
        bs_json_int(t, "num_hidden_layers", 0, 1, BS_GEMMA4_MAX_LAYERS, &c->n_layers, file, err) ||
        bs_json_int(t, "num_attention_heads", 0, 1, 4096, &c->n_heads, file, err) ||
        bs_json_int(t, "num_key_value_heads", 0, 1, 4096, &c->n_kv_heads, file, err) ||
        bs_json_int(t, "head_dim", 0, 2, 1 << 16, &c->head_dim, file, err) ||
        bs_json_int(t, "global_head_dim", 0, 0, 1 << 16, &g->global_head_dim, file, err) ||
        bs_json_int(t, "num_global_key_value_heads", 0, 1, 4096, &global_kv, file, err) ||
        bs_json_int(t, "intermediate_size", 0, 1, 1 << 24, &c->intermediate_size, file, err) ||
        bs_json_int(t, "max_position_embeddings", 0, 1, BIG, &c->max_position, file, err) ||
        bs_json_int(t, "sliding_window", 0, 1, BIG, &g->sliding_window, file, err) ||
        bs_json_int(t, "hidden_size_per_layer_input", 0, 0, 1 << 16, &g->ple_dim, file, err) ||
        bs_json_int(t, "vocab_size_per_layer_input", 0, 1, BIG, &g->ple_vocab, file, err) ||
        bs_json_int(t, "num_kv_shared_layers", 0, 0, BS_GEMMA4_MAX_LAYERS, &g->n_kv_shared, file, err) ||
        bs_json_bool(t, "attention_k_eq_v", 0, &g->k_eq_v, file, err) ||
        bs_json_bool(t, "use_double_wide_mlp", 0, &g->double_wide_mlp, file, err) ||
        bs_json_num(t, "final_logit_softcapping", 0, &cap, file, err) ||
        bs_json_num(t, "rms_norm_eps", 0, &eps, file, err)) return -1;
    if (!g->global_head_dim) g->global_head_dim = c->head_dim;   // (transformers: "global_head_dim if global_head_dim else head_dim")
    g->global_kv_heads = g->k_eq_v && global_kv > 0 ? global_kv : c->n_kv_heads;
    if (c->n_heads % c->n_kv_heads)
        return bs_fail(err, "%s: num_attention_heads (%d) must be a multiple of num_key_value_heads (%d)", file, c->n_heads, c->n_kv_heads);
    if (c->n_heads % g->global_kv_heads)
        return bs_fail(err, "%s: num_attention_heads (%d) must be a multiple of num_global_key_value_heads (%d)", file, c->n_heads, g->global_kv_heads);
    if (c->head_dim % 2 || g->global_head_dim % 2)
        return bs_fail(err, "%s: head_dim (%d) and global_head_dim (%d) must be even for RoPE", file, c->head_dim, g->global_head_dim);
    if (!(eps > 0 && eps < 1)) return bs_fail(err, "%s: rms_norm_eps must be in (0, 1)", file);
    if (!(cap >= 0)) return bs_fail(err, "%s: field \"final_logit_softcapping\" must be a positive number or null", file);
    if (g->ple_dim && g->ple_vocab < c->vocab_size)
        return bs_fail(err, "%s: vocab_size_per_layer_input (%d) is smaller than vocab_size (%d): ids past it have no per-layer embedding", file,
                       g->ple_vocab, c->vocab_size);
    if (g->n_kv_shared >= c->n_layers)
        return bs_fail(err, "%s: num_kv_shared_layers (%d) must be less than num_hidden_layers (%d)", file, g->n_kv_shared, c->n_layers);
    c->rms_eps = (float)eps; g->final_softcap = (float)cap;
    if (bs_json_bool(t, "tie_word_embeddings", 0, &c->tie_embeddings, file, err) || refuse_unsupported(t, file, err) ||
        parse_layer_types(c, t, file, err) || parse_rope(c, t, file, err) || check_shared(c, file, err)) return -1;
    c->rope_theta = g->sliding_theta;
    c->bos_id = 2;
    if (bs_json_int(t, "bos_token_id", 0, 0, BIG, &c->bos_id, file, err)) return -1;
    return add_eos_ids(c, t, file, err);
}

int bs_gemma4_config_parse(bs_qwen3_config *c, const cJSON *root, const char *file, bs_err *err) {
    memset(c, 0, sizeof *c);
    c->arch = BS_ARCH_GEMMA4;
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const cJSON *a0 = cJSON_IsArray(arch) ? cJSON_GetArrayItem(arch, 0) : NULL;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    c->gemma.multimodal = cJSON_IsString(a0) ? !strcmp(a0->valuestring, "Gemma4ForConditionalGeneration")
                                             : cJSON_IsString(mt) && !strcmp(mt->valuestring, "gemma4");
    if (!c->gemma.multimodal) {
        if (parse_text(c, root, file, err)) return -1;
        if (cJSON_GetObjectItemCaseSensitive(root, "eos_token_id") == NULL) bs_qwen3_config_add_eos(c, 1);   // transformers' default
        return 0;
    }
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    if (!cJSON_IsObject(tc))
        return bs_fail(err, "%s: a Gemma4ForConditionalGeneration config needs \"text_config\" (the text tower's fields)", file);
    char name[4200];
    snprintf(name, sizeof name, "%s: text_config", file);
    if (parse_text(c, tc, name, err)) return -1;
    // The top level decides what the multimodal model ties, and may list end-of-sequence ids too.
    c->tie_embeddings = 1;
    if (bs_json_bool(root, "tie_word_embeddings", 0, &c->tie_embeddings, file, err) || add_eos_ids(c, root, file, err)) return -1;
    if (!c->n_eos) bs_qwen3_config_add_eos(c, 1);
    return 0;
}
