// Loading MLX affine-quantised weights (safetensors.h, bs_checkpoint_weight): which tensors are quantised
// (a "<module>.scales" beside "<module>.weight", as mlx-lm decides), and every shape and dtype checked
// against config.json's "quantization" block before a byte is read, with errors that name the file, the
// tensor and what was expected.
#include <stdio.h>
#include <string.h>
#include "io/quant_config.h"
#include "io/safetensors.h"

static void shape_str(const bs_tensor_info *t, char *buf, size_t cap) {
    size_t l = 0;
    buf[0] = 0;
    for (int d = 0; d < t->n_dims && l + 24 < cap; d++) l += snprintf(buf + l, cap - l, "%s%lld", d ? ", " : "[", (long long)t->shape[d]);
    snprintf(buf + l, cap - l, "%s", t->n_dims ? "]" : "[]");
}

static int is_2d(const bs_tensor_info *t, int64_t r, int64_t c) { return t->n_dims == 2 && t->shape[0] == r && t->shape[1] == c; }

// scales or biases of `module`: [rows, groups], BF16/F16/F32 (the dtype the codes were made from).
static int check_param(const bs_checkpoint *ck, const char *module, const char *which, int64_t rows, int64_t groups,
                       const bs_tensor_info **out, bs_err *err) {
    char name[320], have[128];
    snprintf(name, sizeof name, "%s.%s", module, which);
    const bs_tensor_info *t = bs_checkpoint_find(ck, name);
    if (!t) return bs_fail(err, "%s: missing tensor '%s' (the affine-quantised '%s.weight' needs its scales and biases)", ck->path, name, module);
    shape_str(t, have, sizeof have);
    if (!is_2d(t, rows, groups))
        return bs_fail(err, "%s: tensor '%s' has shape %s, expected [%lld, %lld] (one value per group of the quantised weight)", t->file, name,
                       have, (long long)rows, (long long)groups);
    if (!t->dtype_ok)
        return bs_fail(err, "%s: tensor '%s' has dtype %s; affine scales and biases must be BF16, F16 or F32", t->file, name, t->dtype_name);
    *out = t;
    return 0;
}

int bs_checkpoint_weight(const bs_checkpoint *ck, const bs_quant_config *qc, const char *name, int64_t rows, int64_t cols, bs_mat *out,
                         bs_err *err) {
    size_t l = strlen(name);
    char module[300], sc[320], have[128];
    if (l < 8 || strcmp(name + l - 7, ".weight") || l - 7 >= sizeof module) return bs_checkpoint_mat(ck, name, rows, cols, out, err);
    snprintf(module, sizeof module, "%.*s", (int)(l - 7), name);
    snprintf(sc, sizeof sc, "%s.scales", module);
    const bs_tensor_info *t = bs_checkpoint_find(ck, name);
    if (!t || !bs_checkpoint_find(ck, sc)) {
        if (t && !strcmp(t->dtype_name, "U32"))
            return bs_fail(err, "%s: tensor '%s' holds U32 (packed codes?) but '%s' is missing: an affine-quantised weight needs its "
                           "scales and biases", t->file, name, sc);
        return bs_checkpoint_mat(ck, name, rows, cols, out, err);
    }
    int bits = 0, group = 0;
    if (!qc || !qc->present)
        return bs_fail(err, "%s: tensor '%s' is affine-quantised ('%s' beside it), but config.json has no \"quantization\" block giving "
                       "its bits and group_size", t->file, name, sc);
    if (!bs_quant_config_for(qc, module, &bits, &group))
        return bs_fail(err, "%s: config.json's \"quantization\" block says module '%s' is not quantised, but '%s' is there", qc->file, module, sc);
    if (rows <= 0) return bs_fail(err, "%s: tensor '%s' is a vector; blockspec reads quantised matrices only", t->file, name);
    if (cols % group)
        return bs_fail(err, "%s: tensor '%s': group_size %d (%s) does not divide its input width %lld", t->file, name, group, qc->file,
                       (long long)cols);
    shape_str(t, have, sizeof have);
    if (strcmp(t->dtype_name, "U32"))
        return bs_fail(err, "%s: tensor '%s' has dtype %s; an affine-quantised weight stores its codes as U32", t->file, name, t->dtype_name);
    int64_t words = cols * bits / 32;
    if (!is_2d(t, rows, words))
        return bs_fail(err, "%s: tensor '%s' has shape %s, expected [%lld, %lld] (%lld x %lld weights in %d bits, packed in 32-bit words, "
                       "from config.json)", t->file, name, have, (long long)rows, (long long)words, (long long)rows, (long long)cols, bits);
    const bs_tensor_info *s, *b;
    if (check_param(ck, module, "scales", rows, cols / group, &s, err) || check_param(ck, module, "biases", rows, cols / group, &b, err))
        return -1;
    if (s->dtype != b->dtype)
        return bs_fail(err, "%s: '%s.scales' is %s but '%s.biases' is %s; they must share one dtype", t->file, module, s->dtype_name, module,
                       b->dtype_name);
    *out = (bs_mat){ .data = t->data, .dtype = s->dtype, .rows = rows, .cols = cols, .format = BS_WFMT_AFFINE, .bits = bits,
                     .group = group, .scales = s->data, .biases = b->data };
    return 0;
}
