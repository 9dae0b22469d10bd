#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "util/err.h"

int bs_fail(bs_err *e, const char *fmt, ...) {
    if (!e) return -1;
    va_list ap; va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int bs_wrap(bs_err *e, const char *fmt, ...) {
    if (!e) return -1;
    char prefix[256], old[sizeof e->msg];
    va_list ap; va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    int n = snprintf(e->msg, sizeof e->msg, "%s: ", prefix);
    if (n >= 0 && (size_t)n < sizeof e->msg) snprintf(e->msg + n, sizeof e->msg - (size_t)n, "%s", old);
    return -1;
}

void *bs_malloc(size_t n, bs_err *e) {
    void *p = malloc(n ? n : 1);
    if (!p) bs_fail(e, "out of memory allocating %zu bytes", n);
    return p;
}

void *bs_calloc(size_t count, size_t size, bs_err *e) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) bs_fail(e, "out of memory allocating %zu x %zu bytes", count, size);
    return p;
}
