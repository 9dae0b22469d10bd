// Trainable tensors (params.h).
#include <stdlib.h>
#include <string.h>
#include "train/params.h"

int bs_param_add(bs_param_set *s, const char *name, int n_dims, const int64_t *shape, int trainable, int decay,
                 bs_err *err) {
    if (n_dims < 1 || n_dims > BS_PARAM_MAX_DIMS) return bs_fail(err, "parameter %s: %d dimensions (1..%d)", name, n_dims, BS_PARAM_MAX_DIMS);
    if (strlen(name) >= BS_PARAM_NAME_MAX) return bs_fail(err, "parameter name too long: %s", name);
    if (bs_param_find(s, name)) return bs_fail(err, "parameter %s added twice", name);
    int64_t n = 1;
    for (int i = 0; i < n_dims; i++) {
        if (shape[i] <= 0) return bs_fail(err, "parameter %s: dimension %d is %lld", name, i, (long long)shape[i]);
        n *= shape[i];
    }
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        bs_param *p = realloc(s->p, sizeof *p * cap);
        if (!p) return bs_fail(err, "out of memory for parameter %s", name);
        s->p = p; s->cap = cap;
    }
    bs_param *p = &s->p[s->n];
    memset(p, 0, sizeof *p);
    strcpy(p->name, name);
    p->n_dims = n_dims;
    memcpy(p->shape, shape, sizeof(int64_t) * n_dims);
    p->n = n; p->trainable = trainable; p->decay = decay;
    if (!(p->w = bs_calloc(n, sizeof(float), err))) return -1;
    if (trainable && !(p->g = bs_calloc(n, sizeof(float), err))) { free(p->w); return -1; }
    return s->n++;
}

bs_param *bs_param_find(const bs_param_set *s, const char *name) {
    for (int i = 0; i < s->n; i++) if (!strcmp(s->p[i].name, name)) return &s->p[i];
    return NULL;
}

void bs_param_zero_grad(bs_param_set *s) {
    for (int i = 0; i < s->n; i++) if (s->p[i].g) memset(s->p[i].g, 0, sizeof(float) * s->p[i].n);
}

int64_t bs_param_count(const bs_param_set *s, int trainable_only) {
    int64_t t = 0;
    for (int i = 0; i < s->n; i++) if (!trainable_only || s->p[i].trainable) t += s->p[i].n;
    return t;
}

void bs_param_set_free(bs_param_set *s) {
    for (int i = 0; i < s->n; i++) { free(s->p[i].w); free(s->p[i].g); }
    free(s->p);
    memset(s, 0, sizeof *s);
}
