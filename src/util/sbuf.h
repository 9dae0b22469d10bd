// A growable byte buffer for text built piece by piece (chat prompts, tokenizer.json): always
// NUL-terminated once anything is in it. An append that cannot grow it sets oom and every later append
// does nothing, so a writer checks oom once, at the end, and frees s either way.
#pragma once
#include <stddef.h>
#include <string.h>

typedef struct bs_sbuf { char *s; size_t n, cap; int oom; } bs_sbuf;

void bs_sbuf_put(bs_sbuf *b, const char *s, size_t n);
static inline void bs_sbuf_puts(bs_sbuf *b, const char *s) { bs_sbuf_put(b, s, strlen(s)); }
