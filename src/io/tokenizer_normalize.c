// Normalisers: Unicode normal forms through utf8proc, Lowercase, Replace (SentencePiece-style files turn
// spaces into U+2581 with it) and Prepend.
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include "io/tokenizer_internal.h"

static int is_ascii(const char *s, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) { uint64_t k; memcpy(&k, s + i, 8); if (k & 0x8080808080808080ull) return 0; }
    for (; i < n; i++) if ((unsigned char)s[i] & 0x80) return 0;
    return 1;
}

int bs_regex_replace(regex_t *re, regex_t *run, const char *s, size_t n, const char *content, size_t cl,
                     char **out, size_t *out_len, bs_err *err) {
    bs_regex_ws rx = { 0 };
    bs_mspans ms = { 0 };
    *out = NULL;
    // Text to encode is valid UTF-8 by now, but a token of the file (decoder Replace, a normalised added token)
    // need not be: the regex only ever sees valid UTF-8 (tokenizers cannot even load such a file).
    char *clean;
    size_t cl0 = bs_utf8_sanitize(s, n, &clean);
    if (clean) { s = clean; n = cl0; }
    int rc = bs_find_matches(re, run, &rx, s, n, &ms, err);
    bs_regex_ws_free(&rx);
    if (rc) { free(ms.v); free(clean); return -1; }
    size_t len = 0;
    for (size_t i = 0; i < ms.n; i++) len += ms.v[i].m ? cl : ms.v[i].e - ms.v[i].s;
    char *o = malloc(len + 1);
    if (!o) { free(ms.v); free(clean); return bs_fail(err, "out of memory replacing in %zu bytes", n); }
    size_t m = 0;
    for (size_t i = 0; i < ms.n; i++) {
        if (ms.v[i].m) { memcpy(o + m, content, cl); m += cl; }
        else { memcpy(o + m, s + ms.v[i].s, ms.v[i].e - ms.v[i].s); m += ms.v[i].e - ms.v[i].s; }
    }
    o[m] = 0;
    free(ms.v); free(clean);
    *out = o; *out_len = m;
    return 0;
}

int bs_replace_literal(const char *pat, size_t pl, const char *content, size_t cl, const char *s, size_t n,
                       char **out, size_t *out_len, bs_err *err) {
    size_t hits = 0;
    *out = NULL;
    for (const char *p = s, *e = s + n; (p = memmem(p, (size_t)(e - p), pat, pl)); p += pl) hits++;
    if (!hits) return 0;
    size_t len = n - hits * pl + hits * cl;
    char *o = malloc(len + 1);
    if (!o) return bs_fail(err, "out of memory replacing in %zu bytes", n);
    const char *p = s, *e = s + n, *q;
    size_t m = 0;
    while ((q = memmem(p, (size_t)(e - p), pat, pl))) {
        memcpy(o + m, p, (size_t)(q - p)); m += (size_t)(q - p);
        memcpy(o + m, content, cl); m += cl;
        p = q + pl;
    }
    memcpy(o + m, p, (size_t)(e - p)); m += (size_t)(e - p);
    o[m] = 0;
    *out = o; *out_len = m;
    return 0;
}

static int apply(const bs_norm_step *st, const char *s, size_t n, char **out, size_t *out_len, bs_err *err) {
    int kind = st->kind;
    *out = NULL;
    if (kind == BS_NORM_REPLACE)
        return st->re ? bs_regex_replace(st->re, st->run, s, n, st->content, st->content_len, out, out_len, err)
                      : bs_replace_literal(st->pattern, st->pattern_len, st->content, st->content_len, s, n, out, out_len, err);
    if (kind == BS_NORM_PREPEND) {
        if (!n) return 0;   // an empty text stays empty, as in tokenizers
        char *o = malloc(st->content_len + n + 1);
        if (!o) return bs_fail(err, "out of memory normalising %zu bytes", n);
        memcpy(o, st->content, st->content_len); memcpy(o + st->content_len, s, n);
        o[st->content_len + n] = 0;
        *out = o; *out_len = st->content_len + n;
        return 0;
    }
    if (kind == BS_NORM_LOWERCASE) {
        char *o = malloc(4 * n + 1);
        if (!o) return bs_fail(err, "out of memory normalising %zu bytes", n);
        size_t m = 0, i = 0;
        while (i < n) {
            utf8proc_int32_t cp;
            utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, n - i, &cp);
            if (k <= 0) { free(o); return bs_fail(err, "normaliser: invalid UTF-8"); }
            m += utf8proc_encode_char(utf8proc_tolower(cp), (utf8proc_uint8_t *)o + m);
            i += k;
        }
        o[m] = 0; *out = o; *out_len = m;
        return 0;
    }
    if (is_ascii(s, n)) return 0;   // every normal form leaves ASCII as it is
    utf8proc_option_t opt = UTF8PROC_STABLE;
    if (kind == BS_NORM_NFC) opt |= UTF8PROC_COMPOSE;
    else if (kind == BS_NORM_NFD) opt |= UTF8PROC_DECOMPOSE;
    else if (kind == BS_NORM_NFKC) opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    else opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst, opt);
    if (r < 0) return bs_fail(err, "normaliser: %s", utf8proc_errmsg(r));
    *out = (char *)dst; *out_len = (size_t)r;
    return 0;
}

int bs_normalize(const bs_tokenizer *t, const char *s, size_t n, char **out, size_t *out_len, bs_err *err) {
    *out = NULL; *out_len = n;
    char *cur = NULL; size_t cur_len = n;
    for (int i = 0; i < t->n_norm; i++) {
        char *o; size_t ol;
        if (apply(&t->norm[i], cur ? cur : s, cur_len, &o, &ol, err)) { free(cur); return -1; }
        if (o) { free(cur); cur = o; cur_len = ol; }
    }
    *out = cur; *out_len = cur_len;
    return 0;
}
