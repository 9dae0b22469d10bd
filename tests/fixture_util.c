#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fixture_util.h"

const void *fx_tensor(const bs_checkpoint *ck, const char *name, const char *dtype, long count, long *n_out) {
    const bs_tensor_info *t = bs_checkpoint_find(ck, name);
    if (!t || strcmp(t->dtype_name, dtype)) return NULL;
    long n = 1;
    for (int d = 0; d < t->n_dims; d++) n *= (long)t->shape[d];
    if (count >= 0 && n != count) return NULL;
    if (n_out) *n_out = n;
    return t->data;
}

double fx_max_abs_diff(const float *a, const float *b, long n) {
    double m = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d;   // NaN propagates as a failure
    }
    return m;
}

int fx_compare_all(const bs_checkpoint *x, const bs_checkpoint *got, double tol, char *msg, size_t cap) {
    for (int i = 0; i < x->n_tensors; i++) {
        const bs_tensor_info *t = &x->tensors[i], *g = bs_checkpoint_find(got, t->name);
        if (!g) { snprintf(msg, cap, "the dump lacks '%s'", t->name); return -1; }
        if (g->n_dims != t->n_dims || g->nbytes != t->nbytes || strcmp(g->dtype_name, t->dtype_name)) {
            snprintf(msg, cap, "'%s' has another shape or dtype", t->name); return -1;
        }
        if (!strcmp(t->dtype_name, "I32")) {
            if (memcmp(g->data, t->data, t->nbytes)) { snprintf(msg, cap, "'%s' ids differ", t->name); return -1; }
        } else {
            double d = fx_max_abs_diff(g->data, t->data, (long)(t->nbytes / 4));
            if (!(d < tol)) { snprintf(msg, cap, "'%s' differs by %g", t->name, d); return -1; }
        }
    }
    return x->n_tensors;
}

void fx_join_ids(const int32_t *ids, long n, char *buf, size_t cap) {
    buf[0] = 0;
    for (long i = 0; i < n; i++) snprintf(buf + strlen(buf), cap - strlen(buf), "%s%d", i ? "," : "", ids[i]);
}

int fx_dump_and_compare(const char *cmd, const char *out, const bs_checkpoint *expected, double tol, char *msg, size_t cap) {
    if (system(cmd) != 0) { snprintf(msg, cap, "command failed: %s", cmd); remove(out); return -1; }
    bs_checkpoint *got;
    bs_err err = {0};
    if (bs_checkpoint_open(&got, out, &err)) { snprintf(msg, cap, "%s", err.msg); remove(out); return -1; }
    int n = fx_compare_all(expected, got, tol, msg, cap);
    bs_checkpoint_close(got);
    remove(out);
    return n;
}
