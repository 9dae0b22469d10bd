// The public tokenizer-alone calls (include/blockspec.h): the io/ tokenizer behind an opaque handle.
#include <stdio.h>
#include <stdlib.h>
#include "blockspec.h"
#include "io/tokenizer.h"

struct blockspec_tokenizer { bs_tokenizer *tok; };

static int fail_with(const bs_err *e, char *err, size_t len) { if (err && len) snprintf(err, len, "%s", e->msg); return -1; }

int blockspec_tokenizer_open(blockspec_tokenizer **out, const char *path, char *err, size_t err_len) {
    bs_err e = {0};
    *out = calloc(1, sizeof **out);
    if (!*out) { if (err && err_len) snprintf(err, err_len, "out of memory"); return -1; }
    if (bs_tokenizer_load(&(*out)->tok, path, &e)) { free(*out); *out = NULL; return fail_with(&e, err, err_len); }
    return 0;
}

void blockspec_tokenizer_close(blockspec_tokenizer *t) {
    if (!t) return;
    bs_tokenizer_free(t->tok);
    free(t);
}

int blockspec_tokenizer_encode(const blockspec_tokenizer *t, const char *text, size_t len, int add_special, int32_t **ids, size_t *n,
                               char *err, size_t err_len) {
    bs_err e = {0};
    return bs_tokenizer_encode_ex(t->tok, text, len, add_special, ids, n, &e) ? fail_with(&e, err, err_len) : 0;
}

int blockspec_tokenizer_decode(const blockspec_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **text, size_t *len,
                               char *err, size_t err_len) {
    bs_err e = {0};
    return bs_tokenizer_decode(t->tok, ids, n, skip_special, text, len, &e) ? fail_with(&e, err, err_len) : 0;
}
