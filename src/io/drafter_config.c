#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "io/drafter_config.h"
#include "io/json.h"

int bs_is_drafter_arch(const char *a) {
    return a && (!strcmp(a, "DFlashDraftModel") || !strcmp(a, "Qwen3DSparkModel") || !strcmp(a, "DFlash2DraftModel") ||
                 !strcmp(a, "Gemma4DSparkModel"));
}

void bs_build_target_layer_ids(int Lt, int Ld, int *out) {
    if (Ld == 1) { out[0] = Lt / 2; return; }
    for (int i = 0; i < Ld; i++) {
        // Python: int(round(1 + i * (Lt - 4) / (Ld - 1))): true division in double, round half to even.
        double v = 1.0 + (double)(i * (Lt - 4)) / (double)(Ld - 1);
        double r = floor(v), f = v - r;
        if (f > 0.5 || (f == 0.5 && fmod(r, 2.0) != 0)) r += 1;
        out[i] = (int)r;
    }
}

// Reads an int that may live at the top level or inside a nested object; `prefer_nested` picks which wins.
static int int_either(const cJSON *root, const cJSON *nested, const char *key, int prefer_nested, int *out, int *found,
                      long lo, long hi, const char *file, bs_err *err) {
    const cJSON *first = prefer_nested ? nested : root, *second = prefer_nested ? root : nested;
    *found = 0;
    for (int k = 0; k < 2; k++) {
        const cJSON *o = k ? second : first;
        if (!o) continue;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        if (!v || cJSON_IsNull(v)) continue;
        if (o == nested && !bs_json_is_int(v, (double)lo, (double)hi))   // name the field by its full path
            return bs_fail(err, "%s: field \"dflash_config.%s\" must be an integer in [%ld, %ld]", file, key, lo, hi);
        if (bs_json_int(o, key, 1, lo, hi, out, file, err)) return -1;
        *found = 1;
        return 0;
    }
    return 0;
}

// A number that may sit inside dflash_config (wins) or at the top level; absent: *out keeps its default.
static int num_either(const cJSON *root, const cJSON *nested, const char *key, double *out, const char *file, bs_err *err) {
    if (nested && cJSON_GetObjectItemCaseSensitive(nested, key) && !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(nested, key))) {
        if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(nested, key)))
            return bs_fail(err, "%s: field \"dflash_config.%s\" must be a number", file, key);
        return bs_json_num(nested, key, 1, out, file, err);
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    return v && !cJSON_IsNull(v) ? bs_json_num(root, key, 1, out, file, err) : 0;
}

// DFlash 2's own fields (docs/dflash2.md, "Config"): the convolution and selector sizes inside dflash_config,
// the optional output transform, the window of sliding layers and which layers attend causally in the block.
static int dflash2_parse(bs_drafter_config *c, const cJSON *root, const cJSON *dc, const char *file, bs_err *err) {
    const bs_qwen3_config *b = &c->base;
    if (!dc) return bs_fail(err, "%s: missing field \"dflash_config\" (a DFlash2DraftModel config keeps its convolution and selector sizes there)", file);
    struct { const char *key; int *out; long lo, hi; } need[] = {
        { "conv_kernel_size", &c->conv_taps, 1, 8 }, { "conv_group_size", &c->conv_group, 1, 1 << 20 },
        { "selector_rank", &c->sel_rank, 1, 1 << 16 }, { "selector_top_k", &c->sel_top_k, 1, 1024 },
    };
    for (size_t i = 0; i < sizeof need / sizeof *need; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(dc, need[i].key);
        if (!v || cJSON_IsNull(v)) return bs_fail(err, "%s: missing field \"dflash_config.%s\" (needed by DFlash2DraftModel)", file, need[i].key);
        if (!bs_json_is_int(v, (double)need[i].lo, (double)need[i].hi))
            return bs_fail(err, "%s: field \"dflash_config.%s\" must be an integer in [%ld, %ld]", file, need[i].key, need[i].lo, need[i].hi);
        *need[i].out = (int)v->valuedouble;
    }
    if (b->hidden_size % c->conv_group)
        return bs_fail(err, "%s: field \"dflash_config.conv_group_size\" (%d) does not divide hidden_size (%d)", file, c->conv_group, b->hidden_size);
    if (c->conv_taps > c->block_size)
        return bs_fail(err, "%s: field \"dflash_config.conv_kernel_size\" (%d) exceeds the block (%d rows)", file, c->conv_taps, c->block_size);
    if (c->sel_top_k > b->vocab_size)
        return bs_fail(err, "%s: field \"dflash_config.selector_top_k\" (%d) exceeds the vocabulary (%d)", file, c->sel_top_k, b->vocab_size);
    double mult = 1, cap = 0, scale = 1;
    if (num_either(root, dc, "output_multiplier", &mult, file, err) || num_either(root, dc, "final_logit_softcapping", &cap, file, err) ||
        num_either(root, dc, "input_embedding_scale", &scale, file, err)) return -1;
    if (!(mult > 0)) return bs_fail(err, "%s: field \"output_multiplier\" (%g) must be positive", file, mult);
    if (cap < 0) return bs_fail(err, "%s: field \"final_logit_softcapping\" (%g) must not be negative (0 or absent: none)", file, cap);
    c->out_mult = (float)mult; c->softcap = (float)cap; c->embed_scale = (float)scale;
    // Sliding layers use sliding_window whatever use_sliding_window says (as the references do); a sliding layer
    // without a window is refused, as the MLX reference refuses it.
    int sw = 0;
    if (bs_json_int(root, "sliding_window", 0, 1, 1 << 30, &sw, file, err)) return -1;
    const cJSON *causal = cJSON_GetObjectItemCaseSensitive(root, "is_causal");
    int forced = -1;
    if (causal && !cJSON_IsNull(causal)) {
        if (!cJSON_IsBool(causal)) return bs_fail(err, "%s: field \"is_causal\" must be true or false", file);
        forced = cJSON_IsTrue(causal);
    }
    for (int i = 0; i < b->n_layers; i++) {
        int sliding = c->layer_window[i] != 0;
        if (sliding && !sw) return bs_fail(err, "%s: layer %d is \"sliding_attention\" but field \"sliding_window\" is missing", file, i);
        c->layer_window[i] = sliding ? sw : 0;
        c->layer_causal[i] = forced >= 0 ? forced : sliding;
    }
    return 0;
}

// DeepSpec's Gemma-4 DSpark drafter (deepspec/modeling/dspark/gemma4): the target's text config with the drafter's
// depth, read as a Gemma-4 text config (gemma4_config.c; its refusals apply) and then as DeepSpec's layers use it:
// every layer full attention (global_head_dim; num_global_key_value_heads with attention_k_eq_v) with the
// full-attention RoPE, whatever layer_types says; no KV sharing (each layer projects the context itself); no
// per-layer embeddings (DeepSpec sets hidden_size_per_layer_input 0). base.head_dim / n_kv_heads become the full
// layers' sizes, which every shared drafter step reads.
static int gemma4_drafter_parse(bs_drafter_config *c, const cJSON *root, const char *file, bs_err *err) {
    bs_qwen3_config *b = &c->base;
    // num_kv_shared_layers is the target's (DeepSpec copies the text config); it may exceed the drafter's depth,
    // which the target parser refuses, so it is read here and left out of that parse.
    int shared = 0, ple = 0, dw = 0;
    if (bs_json_int(root, "num_kv_shared_layers", 0, 0, 1 << 16, &shared, file, err) ||
        bs_json_int(root, "hidden_size_per_layer_input", 0, 0, 1 << 16, &ple, file, err) ||
        bs_json_bool(root, "use_double_wide_mlp", 0, &dw, file, err)) return -1;
    if (ple) return bs_fail(err, "%s: field \"hidden_size_per_layer_input\" is %d; a Gemma4DSparkModel drafter has no per-layer inputs (0)", file, ple);
    cJSON *copy = cJSON_Duplicate(root, 1);
    if (!copy) return bs_fail(err, "out of memory");
    cJSON_DeleteItemFromObjectCaseSensitive(copy, "num_kv_shared_layers");
    cJSON_DeleteItemFromObjectCaseSensitive(copy, "layer_types");
    int rc = bs_gemma4_config_parse(b, copy, file, err);
    cJSON_Delete(copy);
    if (rc) return -1;
    // transformers' Gemma4TextMLP: double width where layer_idx >= num_hidden_layers - num_kv_shared_layers > 0
    if (dw && shared > 0 && b->n_layers - shared > 0)
        return bs_fail(err, "%s: fields \"use_double_wide_mlp\" and \"num_kv_shared_layers\" (%d) give the drafter's last layers a double-wide "
                       "MLP; not supported", file, shared);
    b->gemma.n_kv_shared = 0;
    b->gemma.ple_dim = 0;
    for (int l = 0; l < b->n_layers; l++) b->gemma.full[l] = 1;
    b->head_dim = b->gemma.global_head_dim;
    b->n_kv_heads = b->gemma.global_kv_heads;
    b->sliding_window = 0;
    return 0;
}

int bs_drafter_config_parse(bs_drafter_config *c, const cJSON *root, const char *file, bs_err *err) {
    memset(c, 0, sizeof *c);
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const cJSON *a0 = cJSON_IsArray(arch) ? cJSON_GetArrayItem(arch, 0) : NULL;
    if (!cJSON_IsString(a0))
        return bs_fail(err, "%s: field \"architectures\" is missing; a drafter config needs architectures [\"DFlashDraftModel\"], [\"DFlash2DraftModel\"] or [\"Qwen3DSparkModel\"]", file);
    if (!strcmp(a0->valuestring, "DFlashDraftModel")) { c->arch = BS_DRAFTER_ZLAB; c->arch_name = "DFlashDraftModel"; }
    else if (!strcmp(a0->valuestring, "DFlash2DraftModel")) { c->arch = BS_DRAFTER_ZLAB; c->arch_name = "DFlash2DraftModel"; c->dflash2 = 1; }
    else if (!strcmp(a0->valuestring, "Qwen3DSparkModel")) { c->arch = BS_DRAFTER_DEEPSPEC; c->arch_name = "Qwen3DSparkModel"; }
    else if (!strcmp(a0->valuestring, "Gemma4DSparkModel")) { c->arch = BS_DRAFTER_DEEPSPEC; c->arch_name = "Gemma4DSparkModel"; c->gemma = 1; }
    else return bs_fail(err, "%s: architectures[0] is \"%s\"; blockspec drafters are \"DFlashDraftModel\" (z-lab DFlash), \"DFlash2DraftModel\" (DFlash 2), \"Qwen3DSparkModel\" (DeepSpec DFlash / DSpark) and \"Gemma4DSparkModel\" (DeepSpec DSpark for Gemma-4)", file, a0->valuestring);
    if (c->gemma ? gemma4_drafter_parse(c, root, file, err) : bs_qwen3_config_parse(&c->base, root, file, err)) return -1;
    const bs_qwen3_config *b = &c->base;
    if (b->n_layers > BS_MAX_DRAFT_LAYERS) return bs_fail(err, "%s: field \"num_hidden_layers\" (%d) exceeds %d drafter layers", file, b->n_layers, BS_MAX_DRAFT_LAYERS);
    const cJSON *dc = cJSON_GetObjectItemCaseSensitive(root, "dflash_config");
    if (dc && !cJSON_IsNull(dc) && !cJSON_IsObject(dc)) return bs_fail(err, "%s: field \"dflash_config\" must be an object", file);
    if (!cJSON_IsObject(dc)) dc = NULL;
    int zl = c->arch == BS_DRAFTER_ZLAB, found;

    // block_size: top level (z-lab v1, DeepSpec) or inside dflash_config (newer exporters; DFlash 2, where the
    // nested value wins, as in the MLX reference).
    if (int_either(root, dc, "block_size", c->dflash2, &c->block_size, &found, 2, BS_MAX_DRAFT, file, err)) return -1;
    if (!found) return bs_fail(err, "%s: missing field \"block_size\" (top level or inside \"dflash_config\")", file);
    if (bs_drafter_gamma(c) > BS_MAX_DRAFT) return bs_fail(err, "%s: field \"block_size\" (%d) gives more than %d drafts per round", file, c->block_size, BS_MAX_DRAFT);

    // mask_token_id: nested for z-lab, top level for DeepSpec; either is accepted.
    if (int_either(root, dc, "mask_token_id", zl, &c->mask_token_id, &found, -(1L << 30), 1L << 30, file, err)) return -1;
    if (!found) return bs_fail(err, "%s: missing field \"%s\"", file, zl ? "dflash_config.mask_token_id" : "mask_token_id");
    if (c->mask_token_id < 0 || c->mask_token_id >= b->vocab_size)
        return bs_fail(err, "%s: field \"%s\" (%d) is outside the vocabulary [0, %d)", file,
                       zl ? "dflash_config.mask_token_id" : "mask_token_id", c->mask_token_id, b->vocab_size);

    c->num_target_layers = 0;
    if (bs_json_int(root, "num_target_layers", zl, 1, 1 << 16, &c->num_target_layers, file, err)) return -1;

    // target_layer_ids: nested for z-lab, top level for DeepSpec; absent -> z-lab's default spread.
    const char *ids_field = zl ? "dflash_config.target_layer_ids" : "target_layer_ids";
    const cJSON *ids_obj = NULL;
    const cJSON *nested_ids = dc ? cJSON_GetObjectItemCaseSensitive(dc, "target_layer_ids") : NULL;
    const cJSON *top_ids = cJSON_GetObjectItemCaseSensitive(root, "target_layer_ids");
    if (nested_ids && cJSON_IsNull(nested_ids)) nested_ids = NULL;
    if (top_ids && cJSON_IsNull(top_ids)) top_ids = NULL;
    if (zl) { ids_obj = nested_ids ? dc : top_ids ? root : NULL; if (!nested_ids && top_ids) ids_field = "target_layer_ids"; }
    else { ids_obj = top_ids ? root : nested_ids ? dc : NULL; if (!top_ids && nested_ids) ids_field = "dflash_config.target_layer_ids"; }
    if (ids_obj) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(ids_obj, "target_layer_ids");
        if (!cJSON_IsArray(v)) return bs_fail(err, "%s: field \"%s\" must be a list of integers", file, ids_field);
        if (bs_json_int_list(ids_obj, "target_layer_ids", c->target_layer_ids, BS_MAX_TAPS, &c->n_taps, file, err)) return -1;
        if (c->n_taps == 0) return bs_fail(err, "%s: field \"%s\" is empty", file, ids_field);
    } else {
        if (!c->num_target_layers) return bs_fail(err, "%s: missing field \"num_target_layers\" (needed for the default target_layer_ids)", file);
        if (b->n_layers > BS_MAX_TAPS) return bs_fail(err, "%s: default taps for %d drafter layers exceed %d", file, b->n_layers, BS_MAX_TAPS);
        bs_build_target_layer_ids(c->num_target_layers, b->n_layers, c->target_layer_ids);
        c->n_taps = b->n_layers;
        c->taps_defaulted = 1;
    }
    int lo = zl ? 0 : -1;
    for (int i = 0; i < c->n_taps; i++) {
        int id = c->target_layer_ids[i];
        if (id < lo || (c->num_target_layers && id >= c->num_target_layers))
            return bs_fail(err, "%s: field \"%s\"[%d] = %d is out of range: target layer ids must be in [%d, %d)%s", file, ids_field, i, id,
                           lo, c->num_target_layers ? c->num_target_layers : 1 << 16, c->taps_defaulted ? " (default spread)" : "");
    }

    // DeepSpec heads.
    c->markov_type = BS_MARKOV_NONE;
    if (!zl) {
        if (bs_json_int(root, "markov_rank", 0, 0, 1 << 20, &c->markov_rank, file, err)) return -1;
        if (c->markov_rank > 0) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "markov_head_type");
            const char *ty = cJSON_IsString(t) ? t->valuestring : "vanilla";
            if (t && !cJSON_IsNull(t) && !cJSON_IsString(t)) return bs_fail(err, "%s: field \"markov_head_type\" must be a string", file);
            if (!strcmp(ty, "vanilla")) c->markov_type = BS_MARKOV_VANILLA;
            else if (!strcmp(ty, "gated")) c->markov_type = BS_MARKOV_GATED;
            else if (!strcmp(ty, "rnn")) c->markov_type = BS_MARKOV_RNN;
            else return bs_fail(err, "%s: field \"markov_head_type\" is \"%s\"; supported: \"vanilla\", \"gated\", \"rnn\"", file, ty);
        }
        if (bs_json_bool(root, "enable_confidence_head", 0, &c->conf_head, file, err)) return -1;
        c->conf_with_markov = c->markov_rank > 0;
        if (c->conf_head && bs_json_bool(root, "confidence_head_with_markov", 0, &c->conf_with_markov, file, err)) return -1;
        if (c->conf_head && c->conf_with_markov && c->markov_rank == 0)
            return bs_fail(err, "%s: field \"confidence_head_with_markov\" is true but \"markov_rank\" is 0 (no Markov embedding to feed it)", file);
    }

    // Sliding window: per layer_types, only when use_sliding_window enabled a window (base.sliding_window > 0).
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (lt && !cJSON_IsNull(lt)) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != b->n_layers)
            return bs_fail(err, "%s: field \"layer_types\" must list one entry per drafter layer (%d)", file, b->n_layers);
        for (int i = 0; i < b->n_layers; i++) {
            const cJSON *e = cJSON_GetArrayItem(lt, i);
            if (!cJSON_IsString(e)) return bs_fail(err, "%s: field \"layer_types\"[%d] must be a string", file, i);
            if (!strcmp(e->valuestring, "sliding_attention")) c->layer_window[i] = c->dflash2 ? -1 : b->sliding_window;   // DFlash 2: below
            else if (strcmp(e->valuestring, "full_attention"))
                return bs_fail(err, "%s: field \"layer_types\"[%d] is \"%s\"; supported: \"full_attention\", \"sliding_attention\"", file, i, e->valuestring);
        }
    } else if (b->sliding_window > 0 && !c->dflash2) {   // (DFlash 2 without layer_types: full attention, as the MLX reference)
        int mwl = 28;   // transformers' Qwen3 default: layers from max_window_layers on use the window
        if (bs_json_int(root, "max_window_layers", 0, 0, 1 << 20, &mwl, file, err)) return -1;
        for (int i = mwl; i < b->n_layers; i++) c->layer_window[i] = b->sliding_window;
    }
    return c->dflash2 ? dflash2_parse(c, root, dc, file, err) : 0;
}

int bs_drafter_config_load(bs_drafter_config *c, const char *dir, bs_err *err) {
    char path[4096];
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return bs_fail(err, "%s: not a drafter folder (expected a folder with config.json and *.safetensors)", dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *root = bs_json_load(path, err);
    if (!root) return -1;
    int rc = bs_drafter_config_parse(c, root, path, err);
    cJSON_Delete(root);
    return rc;
}
