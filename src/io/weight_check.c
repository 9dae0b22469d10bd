#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "io/weight_check.h"

// A value is NaN or Inf when its exponent bits are all ones. Blocks are OR-reduced first (the loop
// vectorises), and only a block that has one is counted element by element.
#define SCAN(T, MASK)                                                                     \
    do {                                                                                  \
        const T *x = t->data; size_t n = t->nbytes / sizeof(T), bad = 0;                  \
        for (size_t b = 0; b < n; b += 4096) {                                            \
            size_t e = b + 4096 < n ? b + 4096 : n; T any = 0;                            \
            for (size_t i = b; i < e; i++) any |= (T)((x[i] & (MASK)) == (MASK));         \
            if (!any) continue;                                                           \
            for (size_t i = b; i < e; i++)                                                \
                if ((x[i] & (MASK)) == (MASK)) { if (!bad) *first = i; bad++; }           \
        }                                                                                 \
        return bad;                                                                       \
    } while (0)

size_t bs_tensor_count_nonfinite(const bs_tensor_info *t, size_t *first) {
    if (!t->dtype_ok) return 0;
    switch (t->dtype) {
    case BS_BF16: SCAN(uint16_t, 0x7F80u);
    case BS_F16:  SCAN(uint16_t, 0x7C00u);
    case BS_F32:  SCAN(uint32_t, 0x7F800000u);
    default: return 0;
    }
}

int bs_checkpoint_check_finite(const bs_checkpoint *ck, char *msg, size_t cap) {
    int n_bad = 0;
    if (cap) msg[0] = 0;
    for (int i = 0; i < ck->n_tensors; i++) {
        size_t first = 0, k = bs_tensor_count_nonfinite(&ck->tensors[i], &first);
        if (!k) continue;
        if (!n_bad++ && cap)
            snprintf(msg, cap, "%s: tensor '%s' holds %zu NaN/Inf value%s (the first at element %zu)", ck->tensors[i].file,
                     ck->tensors[i].name, k, k == 1 ? "" : "s", first);
    }
    if (n_bad > 1 && cap) {
        size_t l = strlen(msg);
        snprintf(msg + l, cap - l, ", and %d more tensor%s do", n_bad - 1, n_bad == 2 ? "" : "s");
    }
    return n_bad;
}

int bs_weights_check_path(const char *path, char *msg, size_t cap, bs_err *err) {
    bs_checkpoint *ck;
    if (bs_checkpoint_open(&ck, path, err)) return -1;
    int n = bs_checkpoint_check_finite(ck, msg, cap);
    bs_checkpoint_close(ck);
    return n;
}
