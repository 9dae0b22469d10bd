#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "io/json.h"

int cli_parse_ids(const char *flag, const char *s, int32_t **out) {
    int n = 0, cap = 16;
    int32_t *ids = malloc(sizeof *ids * cap);
    const char *p = s;
    while (ids && *p) {
        char *end; errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) { fprintf(stderr, "blockspec: %s: '%s' is not a comma-separated list of token ids\n", flag, s); free(ids); return -1; }
        if (n == cap) { cap *= 2; int32_t *ni = realloc(ids, sizeof *ids * cap); if (!ni) break; ids = ni; }
        ids[n++] = (int32_t)v;
        p = end;
        if (*p == ',') p++;
        else if (*p) { fprintf(stderr, "blockspec: %s: unexpected '%c' in '%s'\n", flag, *p, s); free(ids); return -1; }
    }
    if (!ids) { fprintf(stderr, "blockspec: out of memory\n"); return -1; }
    if (!n) { fprintf(stderr, "blockspec: %s: empty list\n", flag); free(ids); return -1; }
    *out = ids;
    return n;
}

const char *cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) { fprintf(stderr, "blockspec: option %s needs a value\n", argv[*i]); return NULL; }
    return argv[++*i];
}

int cli_int(const char *flag, const char *s, long lo, long hi, long *out) {
    char *end; errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) { fprintf(stderr, "blockspec: %s expects an integer in [%ld, %ld], got '%s'\n", flag, lo, hi, s); return -1; }
    *out = v;
    return 0;
}

int cli_float(const char *flag, const char *s, double lo, double hi, double *out) {
    char *end; errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !(v >= lo && v <= hi)) { fprintf(stderr, "blockspec: %s expects a number in [%g, %g], got '%s'\n", flag, lo, hi, s); return -1; }
    *out = v;
    return 0;
}

int cli_schedule_arg(const char *cmd, const char *name, double conf_thr, blockspec_schedule *out) {
    *out = BLOCKSPEC_SCHEDULE_THRESHOLD;
    if (!name) return 0;
    if (blockspec_schedule_parse(name, out)) {
        fprintf(stderr, "%s: --schedule must be one of none, fixed, threshold, alg1, async (got '%s')\n", cmd, name);
        return -1;
    }
    if (conf_thr > 0 && *out != BLOCKSPEC_SCHEDULE_THRESHOLD) {
        fprintf(stderr, "%s: --confidence-threshold belongs to --schedule threshold, not %s\n", cmd, name);
        return -1;
    }
    if (*out == BLOCKSPEC_SCHEDULE_THRESHOLD && !(conf_thr > 0)) {
        fprintf(stderr, "%s: --schedule threshold needs --confidence-threshold C (> 0)\n", cmd);
        return -1;
    }
    return 0;
}

int cli_each_line(const char *path, cli_line_fn fn, void *ctx, char *err, size_t len) {
    bs_err e = {0};
    size_t size;
    char *text = bs_read_file(path, &size, &e);
    if (!text) { snprintf(err, len, "%s", e.msg); return -1; }
    int rc = 0, line = 0;
    for (char *at = text; at < text + size && !rc; line++) {
        char *end = memchr(at, '\n', (size_t)(text + size - at));
        size_t l = end ? (size_t)(end - at) : (size_t)(text + size - at), k = 0;
        while (k < l && (at[k] == ' ' || at[k] == '\t' || at[k] == '\r')) k++;
        if (k < l) rc = fn(ctx, at, l, line + 1, err, len) ? -1 : 0;
        at += l + 1;
    }
    free(text);
    return rc;
}

void cli_print_warnings(const blockspec *bs) {
    for (const char *w = blockspec_warnings(bs); w && *w;) {
        size_t n = strcspn(w, "\n");
        fprintf(stderr, "blockspec: warning: %.*s\n", (int)n, w);
        w += n + (w[n] == '\n');
    }
}
