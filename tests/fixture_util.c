#include <math.h>
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
