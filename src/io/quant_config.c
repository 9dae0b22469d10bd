// config.json's "quantization" block (quant_config.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "io/json.h"
#include "io/quant_config.h"

// bits and group_size of one object (the block itself or an override), checked.
static int parse_bits_group(const cJSON *o, const char *where, int def_bits, int def_group, int *bits, int *group, const char *file,
                            bs_err *err) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "bits"), *g = cJSON_GetObjectItemCaseSensitive(o, "group_size");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "mode");
    if (m && !(cJSON_IsString(m) && !strcmp(m->valuestring, "affine")))
        return bs_fail(err, "%s: %s: mode %s%s%s is not supported (blockspec reads MLX's \"affine\" mode)", file, where,
                       cJSON_IsString(m) ? "\"" : "", cJSON_IsString(m) ? m->valuestring : "(not a string)", cJSON_IsString(m) ? "\"" : "");
    if (!b && !def_bits) return bs_fail(err, "%s: %s: missing \"bits\" (4 or 8)", file, where);
    if (!g && !def_group) return bs_fail(err, "%s: %s: missing \"group_size\" (32, 64 or 128)", file, where);
    *bits = def_bits; *group = def_group;
    if (b) {
        if (!bs_json_is_int(b, 0, 64) || (b->valuedouble != 4 && b->valuedouble != 8))
            return bs_fail(err, "%s: %s: bits must be 4 or 8 (blockspec reads those affine widths), not %.17g", file, where,
                           cJSON_IsNumber(b) ? b->valuedouble : -1);
        *bits = (int)b->valuedouble;
    }
    if (g) {
        if (!bs_json_is_int(g, 0, 1 << 20) || (g->valuedouble != 32 && g->valuedouble != 64 && g->valuedouble != 128))
            return bs_fail(err, "%s: %s: group_size must be 32, 64 or 128, not %.17g", file, where, cJSON_IsNumber(g) ? g->valuedouble : -1);
        *group = (int)g->valuedouble;
    }
    return 0;
}

int bs_quant_config_parse(bs_quant_config *q, const cJSON *root, const char *file, bs_err *err) {
    memset(q, 0, sizeof *q);
    snprintf(q->file, sizeof q->file, "%s", file);
    const cJSON *blk = cJSON_GetObjectItemCaseSensitive(root, "quantization");
    const char *key = "quantization";
    if (!blk || cJSON_IsNull(blk)) { blk = cJSON_GetObjectItemCaseSensitive(root, "quantization_config"); key = "quantization_config"; }
    if (!blk || cJSON_IsNull(blk)) return 0;
    if (!cJSON_IsObject(blk)) return bs_fail(err, "%s: \"%s\" must be an object like {\"group_size\": 64, \"bits\": 4}", file, key);
    char where[300];
    snprintf(where, sizeof where, "\"%s\"", key);
    if (parse_bits_group(blk, where, 0, 0, &q->bits, &q->group, file, err)) return -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, blk) {
        if (!cJSON_IsObject(it) && !cJSON_IsFalse(it)) continue;   // the defaults above, and other scalars (quant_method ...)
        bs_quant_override *o = realloc(q->over, sizeof *q->over * (q->n + 1));
        if (!o) { bs_quant_config_free(q); return bs_fail(err, "out of memory"); }
        q->over = o;
        o = &q->over[q->n];
        memset(o, 0, sizeof *o);
        if (!(o->module = strdup(it->string))) { bs_quant_config_free(q); return bs_fail(err, "out of memory"); }
        q->n++;
        if (cJSON_IsObject(it)) {
            snprintf(where, sizeof where, "\"%s\".\"%.200s\"", key, it->string);
            if (parse_bits_group(it, where, q->bits, q->group, &o->bits, &o->group, file, err)) { bs_quant_config_free(q); return -1; }
        }
    }
    q->present = 1;
    return 0;
}

int bs_quant_config_load(bs_quant_config *q, const char *dir, bs_err *err) {
    memset(q, 0, sizeof *q);
    char path[4096];
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (stat(path, &st) != 0) return 0;
    cJSON *root = bs_json_load(path, err);
    if (!root) return -1;
    int rc = bs_quant_config_parse(q, root, path, err);
    cJSON_Delete(root);
    return rc;
}

void bs_quant_config_free(bs_quant_config *q) {
    for (int i = 0; i < q->n; i++) free(q->over[i].module);
    free(q->over);
    q->over = NULL; q->n = 0; q->present = 0;
}

int bs_quant_config_for(const bs_quant_config *q, const char *module, int *bits, int *group) {
    if (!q || !q->present) return 0;
    *bits = q->bits; *group = q->group;
    for (int i = 0; i < q->n; i++)
        if (!strcmp(q->over[i].module, module)) {
            if (!q->over[i].bits) return 0;
            *bits = q->over[i].bits; *group = q->over[i].group;
        }
    return 1;
}
