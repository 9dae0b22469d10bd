// Errors: the library never exits; every fallible call fills a bs_err and returns non-zero.
#pragma once
#include <stdarg.h>
#include <stddef.h>

typedef struct bs_err { char msg[512]; } bs_err;

// Sets the message (printf style) and returns -1, so `return bs_fail(e, ...)` reads naturally.
int bs_fail(bs_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Prefixes context to an existing message ("loading X: " + old message). Returns -1.
int bs_wrap(bs_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Allocation helpers that fail through bs_err instead of crashing.
void *bs_malloc(size_t n, bs_err *e);
void *bs_calloc(size_t count, size_t size, bs_err *e);
