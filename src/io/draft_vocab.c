// Draft vocabulary files: parsing, checking, building from token counts, writing.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "io/draft_vocab.h"
#include "io/json.h"

void bs_draft_vocab_free(bs_draft_vocab *dv) {
    if (!dv) return;
    free(dv->ids);
    dv->ids = NULL;
    dv->n = 0;
}

// Marks the ids in a [vocab_size] flag array, then writes them out in order: sorting and
// deduplicating in one pass, and the always-included ids join the same way.
static int finish(bs_draft_vocab *dv, unsigned char *seen, int vocab_size, const int *always, int n_always,
                  const char *name, bs_err *err) {
    for (int i = 0; i < n_always; i++)
        if (always[i] >= 0 && always[i] < vocab_size) seen[always[i]] = 1;
    int n = 0;
    for (int v = 0; v < vocab_size; v++) n += seen[v];
    if (n == 0) { free(seen); return bs_fail(err, "draft vocabulary %s: no token ids", name); }
    dv->ids = malloc(sizeof(int32_t) * n);
    if (!dv->ids) { free(seen); return bs_fail(err, "out of memory"); }
    dv->n = 0;
    for (int v = 0; v < vocab_size; v++) if (seen[v]) dv->ids[dv->n++] = v;
    free(seen);
    return 0;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Little-endian uint32 ids into seen[]; 0, or -1 with a message.
static int parse_u32(const char *data, size_t len, const char *name, int vocab_size, unsigned char *seen, bs_err *err) {
    if (len % 4) return bs_fail(err, "draft vocabulary %s: %zu bytes is neither a JSON list nor a whole number of uint32 ids", name, len);
    for (size_t i = 0; i < len / 4; i++) {
        const unsigned char *b = (const unsigned char *)data + 4 * i;
        uint32_t v = b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        if (v >= (uint32_t)vocab_size) return bs_fail(err, "draft vocabulary %s: id %zu (%u) is not a token id in [0, %d)", name, i, v, vocab_size);
        seen[v] = 1;
    }
    return 0;
}

// A JSON list of ids into seen[]; 0, or -1 with a message.
static int parse_json(const char *data, size_t len, const char *name, int vocab_size, unsigned char *seen, bs_err *err) {
    cJSON *root = bs_json_parse(data, len, name, err);
    if (!root) {   // the parser's message starts with the name: keep only what follows it
        char why[sizeof err->msg];
        size_t nl = strlen(name);
        snprintf(why, sizeof why, "%s", !strncmp(err->msg, name, nl) && !strncmp(err->msg + nl, ": ", 2) ? err->msg + nl + 2 : err->msg);
        return bs_fail(err, "draft vocabulary %s: not valid JSON (expected a list of token ids): %s", name, why);
    }
    if (!cJSON_IsArray(root)) { cJSON_Delete(root); return bs_fail(err, "draft vocabulary %s: expected a JSON list of token ids", name); }
    int i = 0, rc = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        double v = it->valuedouble;
        if (!cJSON_IsNumber(it)) { rc = bs_fail(err, "draft vocabulary %s: entry %d is not a number (expected token ids)", name, i); break; }
        if (!bs_json_is_int(it, 0, (double)vocab_size - 1)) { rc = bs_fail(err, "draft vocabulary %s: entry %d (%g) is not a token id in [0, %d)", name, i, v, vocab_size); break; }
        seen[(int)v] = 1;
        i++;
    }
    cJSON_Delete(root);
    return rc;
}

int bs_draft_vocab_parse(bs_draft_vocab *dv, const char *data, size_t len, const char *name, int vocab_size,
                         const int *always, int n_always, bs_err *err) {
    memset(dv, 0, sizeof *dv);
    if (vocab_size <= 0) return bs_fail(err, "draft vocabulary %s: the model's vocabulary size %d is invalid", name, vocab_size);
    unsigned char *seen = calloc((size_t)vocab_size, 1);
    if (!seen) return bs_fail(err, "out of memory");
    // JSON when it starts like a list (after spaces or a UTF-8 byte order mark). A uint32 file whose first
    // id has the low byte '[' (91, 347, ...) starts the same way: where the JSON does not parse, a whole
    // number of valid uint32 ids is taken instead; else the JSON error stands.
    size_t at = len >= 3 && !memcmp(data, "\xEF\xBB\xBF", 3) ? 3 : 0;
    while (at < len && is_space(data[at])) at++;
    int rc;
    if (at < len && data[at] == '[') {
        rc = parse_json(data + at, len - at, name, vocab_size, seen, err);
        if (rc && len % 4 == 0) {
            bs_err json_err = *err;
            memset(seen, 0, (size_t)vocab_size);
            if ((rc = parse_u32(data, len, name, vocab_size, seen, err))) *err = json_err;
        }
    } else rc = parse_u32(data, len, name, vocab_size, seen, err);
    if (rc) { free(seen); return -1; }
    return finish(dv, seen, vocab_size, always, n_always, name, err);
}

int bs_draft_vocab_load(bs_draft_vocab *dv, const char *path, int vocab_size, const int *always, int n_always, bs_err *err) {
    size_t len;
    char *data = bs_read_file(path, &len, err);
    if (!data) { memset(dv, 0, sizeof *dv); return bs_wrap(err, "draft vocabulary"); }
    int rc = bs_draft_vocab_parse(dv, data, len, path, vocab_size, always, n_always, err);
    free(data);
    return rc;
}

typedef struct { uint64_t count; int id; } counted;
static int by_count(const void *a, const void *b) {
    const counted *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

int bs_draft_vocab_from_counts(bs_draft_vocab *dv, const uint64_t *counts, int vocab_size, int size, const int *always,
                               int n_always, bs_err *err) {
    memset(dv, 0, sizeof *dv);
    if (size <= 0) return bs_fail(err, "draft vocabulary: size %d must be positive", size);
    counted *c = malloc(sizeof *c * (size_t)vocab_size);
    unsigned char *seen = calloc((size_t)vocab_size, 1);
    if (!c || !seen) { free(c); free(seen); return bs_fail(err, "out of memory"); }
    int n = 0;
    for (int v = 0; v < vocab_size; v++) if (counts[v]) c[n++] = (counted){ counts[v], v };
    qsort(c, n, sizeof *c, by_count);
    for (int i = 0; i < n && i < size; i++) seen[c[i].id] = 1;
    free(c);
    return finish(dv, seen, vocab_size, always, n_always, "(from counts)", err);
}

int bs_draft_vocab_save(const bs_draft_vocab *dv, const char *path, bs_err *err) {
    FILE *f = fopen(path, "w");
    if (!f) return bs_fail(err, "cannot write %s", path);
    fputc('[', f);
    for (int i = 0; i < dv->n; i++) fprintf(f, i ? (i % 16 ? ", %d" : ",\n%d") : "%d", dv->ids[i]);
    fputs("]\n", f);
    if (fclose(f)) return bs_fail(err, "writing %s failed", path);
    return 0;
}
