#include <stdlib.h>
#include "util/sbuf.h"

void bs_sbuf_put(bs_sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {   // doubling: appends cost amortised O(1)
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n + 1) c *= 2;
        char *p = realloc(b->s, c);
        if (!p) { b->oom = 1; return; }
        b->s = p; b->cap = c;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}
