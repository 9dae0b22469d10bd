// Parameter-set I/O (train_io.h).
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "io/json.h"
#include "train/train_io.h"
#include "util/dtype.h"

void bs_train_fill_normal(float *w, int64_t n, float std, bs_rng *r) {
    for (int64_t i = 0; i < n; i += 2) {
        double u1 = bs_rng_uniform(r), u2 = bs_rng_uniform(r);
        double rad = sqrt(-2.0 * log(1.0 - u1)), a = 6.283185307179586 * u2;
        w[i] = (float)(std * rad * cos(a));
        if (i + 1 < n) w[i + 1] = (float)(std * rad * sin(a));
    }
}

static void shape_str(char *buf, size_t cap, int n, const int64_t *s) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && o < cap; i++) o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)s[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

int bs_train_param_load(bs_param *p, const bs_checkpoint *ck, const char *name, bs_err *err) {
    char alt[300];
    const bs_tensor_info *t = bs_checkpoint_find(ck, name);
    if (!t) { snprintf(alt, sizeof alt, "model.%s", name); t = bs_checkpoint_find(ck, alt); }
    if (!t) return bs_fail(err, "%s: missing tensor '%s'", ck->path, name);
    char want[96], got[96];
    shape_str(want, sizeof want, p->n_dims, p->shape);
    shape_str(got, sizeof got, t->n_dims, t->shape);
    int same = t->n_dims == p->n_dims;
    for (int i = 0; same && i < p->n_dims; i++) same = t->shape[i] == p->shape[i];
    if (!same) return bs_fail(err, "%s: tensor '%s' has shape %s, expected %s", t->file, t->name, got, want);
    if (!t->dtype_ok) return bs_fail(err, "%s: tensor '%s' is %s; expected BF16, F16 or F32", t->file, t->name, t->dtype_name);
    for (int64_t i = 0; i < p->n; i++) p->w[i] = bs_load_elem(t->data, t->dtype, (size_t)i);
    return 0;
}

int bs_train_write_bf16(const bs_param_set *ps, const char *dir, bs_err *err) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return bs_fail(err, "%s: cannot create the folder (%m)", dir);
    bs_st_writer *w = bs_st_writer_new();
    uint16_t **bufs = calloc(ps->n > 0 ? ps->n : 1, sizeof *bufs);
    int rc = -1;
    if (!w || !bufs) { bs_fail(err, "out of memory"); goto out; }
    for (int i = 0; i < ps->n; i++) {
        const bs_param *p = &ps->p[i];
        if (!(bufs[i] = bs_malloc(sizeof(uint16_t) * p->n, err))) goto out;
        for (int64_t k = 0; k < p->n; k++) bufs[i][k] = bs_f32_to_bf16(p->w[k]);
        if (bs_st_writer_add(w, p->name, "BF16", p->n_dims, p->shape, bufs[i], err)) goto out;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    rc = bs_st_writer_write(w, path, err);
out:
    if (bufs) for (int i = 0; i < ps->n; i++) free(bufs[i]);
    free(bufs);
    if (w) bs_st_writer_free(w);
    return rc;
}

int bs_train_write_config(const cJSON *root, const char *dir, bs_err *err) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return bs_fail(err, "%s: cannot create the folder (%m)", dir);
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    return bs_json_write_file(root, path, err);
}
