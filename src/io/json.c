#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "io/json.h"

char *bs_read_file(const char *path, size_t *len, bs_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) { bs_fail(err, "%s: cannot open (%m)", path); return NULL; }
    char *buf = NULL; size_t n = 0, cap = 0;
    for (;;) {
        if (cap - n < 65536) {
            cap = cap ? cap * 2 : 65536 * 2;
            char *nb = realloc(buf, cap + 1);
            if (!nb) { free(buf); fclose(f); bs_fail(err, "%s: out of memory", path); return NULL; }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) { free(buf); bs_fail(err, "%s: read error", path); return NULL; }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

cJSON *bs_json_load(const char *path, bs_err *err) {
    size_t len;
    char *txt = bs_read_file(path, &len, err);
    if (!txt) return NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(txt, len, &end, 0);
    if (!root) {
        long at = end ? (long)(end - txt) : -1;
        bs_fail(err, "%s: invalid JSON near byte %ld", path, at);
    } else if (!cJSON_IsObject(root)) {
        bs_fail(err, "%s: expected a JSON object at the top level", path);
        cJSON_Delete(root); root = NULL;
    }
    free(txt);
    return root;
}

static const cJSON *field(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNull(v) ? NULL : v;
}

int bs_json_int(const cJSON *obj, const char *key, int required, long lo, long hi, int *out, const char *file, bs_err *err) {
    const cJSON *v = field(obj, key);
    if (!v) return required ? bs_fail(err, "%s: missing field \"%s\"", file, key) : 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
        return bs_fail(err, "%s: field \"%s\" must be an integer in [%ld, %ld]", file, key, lo, hi);
    *out = (int)v->valuedouble;
    return 0;
}

int bs_json_num(const cJSON *obj, const char *key, int required, double *out, const char *file, bs_err *err) {
    const cJSON *v = field(obj, key);
    if (!v) return required ? bs_fail(err, "%s: missing field \"%s\"", file, key) : 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return bs_fail(err, "%s: field \"%s\" must be a number", file, key);
    *out = v->valuedouble;
    return 0;
}

int bs_json_bool(const cJSON *obj, const char *key, int required, int *out, const char *file, bs_err *err) {
    const cJSON *v = field(obj, key);
    if (!v) return required ? bs_fail(err, "%s: missing field \"%s\"", file, key) : 0;
    if (!cJSON_IsBool(v)) return bs_fail(err, "%s: field \"%s\" must be true or false", file, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

int bs_json_int_list(const cJSON *obj, const char *key, int *out, int max, int *n, const char *file, bs_err *err) {
    const cJSON *v = field(obj, key);
    *n = 0;
    if (!v) return 0;
    if (cJSON_IsNumber(v)) { if (v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble)) return bs_fail(err, "%s: field \"%s\" must be a non-negative integer", file, key); out[(*n)++] = (int)v->valuedouble; return 0; }
    if (!cJSON_IsArray(v)) return bs_fail(err, "%s: field \"%s\" must be an integer or a list of integers", file, key);
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < -1e9 || it->valuedouble > 1e9) return bs_fail(err, "%s: field \"%s\" must list integers", file, key);
        if (*n == max) return bs_fail(err, "%s: field \"%s\" lists more than %d entries", file, key, max);
        out[(*n)++] = (int)it->valuedouble;
    }
    return 0;
}
