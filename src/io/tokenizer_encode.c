// The encoding pipeline: added tokens are cut out first (on the raw text, then on the normalised
// text for tokens with normalized=true), the rest is normalised, pre-tokenised and BPE-encoded.
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include "io/tokenizer_internal.h"

typedef struct {
    bs_pretok_ws pre;
    bs_bpe_ws *bpe;
    bs_ids ids;
} enc_ctx;

// Rust regex \w: alphabetic, marks, decimal digits, connector punctuation.
static int is_word_cp(uint32_t cp) {
    if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_ME) || c == UTF8PROC_CATEGORY_ND ||
           c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_PC;
}
// White_Space property.
static int is_space_cp(uint32_t cp) {
    if (cp < 0x80) return cp == ' ' || (cp >= 9 && cp <= 13);
    if (cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
        cp == 0x202f || cp == 0x205f || cp == 0x3000) return 1;
    return 0;
}
// Last character of s[0..n) (valid UTF-8).
static uint32_t last_cp(const char *s, size_t n, size_t *start) {
    size_t i = n;
    while (i > 0 && ((unsigned char)s[i - 1] & 0xc0) == 0x80) i--;
    if (i > 0) i--;
    uint32_t cp = 0;
    bs_utf8_decode((const unsigned char *)s + i, n - i, &cp);
    if (start) *start = i;
    return cp;
}

// Longest added token of set `normalized` starting at s[i], or NULL: one lookup per distinct length, longest
// first (Gemma's files have thousands of added tokens in a few dozen lengths).
static const bs_added_token *match_at(const bs_tokenizer *t, int normalized, const char *s, size_t n, size_t i) {
    const uint32_t *L = t->added_lens[normalized];
    for (size_t j = 0; j < t->n_added_lens[normalized]; j++) {
        if (L[j] > n - i) continue;
        int32_t k = bs_tok_map_get(&t->added_map[normalized], s + i, L[j]);
        if (k >= 0) return &t->added[k];
    }
    return NULL;
}

static int encode_plain(const bs_tokenizer *t, enc_ctx *c, const char *s, size_t n, bs_err *err);
static int encode_gap(const bs_tokenizer *t, enc_ctx *c, const char *s, size_t n, bs_err *err);

// Splits s on the added tokens of one set; the text between them goes to gap().
static int split_added(const bs_tokenizer *t, enc_ctx *c, int normalized, const char *s, size_t n,
                       int (*gap)(const bs_tokenizer *, enc_ctx *, const char *, size_t, bs_err *), bs_err *err) {
    size_t start_offset = 0, i = 0;
    const uint8_t *first = t->added_first[normalized];
    while (i < n) {
        if (!first[(unsigned char)s[i]]) { i++; continue; }
        const bs_added_token *a = match_at(t, normalized, s, n, i);
        if (!a) { i++; continue; }
        size_t start = i, stop = i + a->match_len;
        i = stop;   // matches never overlap, as with aho-corasick's leftmost-longest iteration
        if (a->single_word) {
            int ok_left = start == 0 || !is_word_cp(last_cp(s, start, NULL));
            uint32_t cp = 0;
            int ok_right = stop == n || (bs_utf8_decode((const unsigned char *)s + stop, n - stop, &cp), !is_word_cp(cp));
            if (!ok_left || !ok_right) continue;
        }
        if (a->lstrip) {
            size_t ns = start, p;
            while (ns > 0 && is_space_cp(last_cp(s, ns, &p))) ns = p;
            start = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip) {
            uint32_t cp; int k;
            while (stop < n && (k = bs_utf8_decode((const unsigned char *)s + stop, n - stop, &cp)) && is_space_cp(cp)) stop += k;
            i = stop;
        }
        if (start > start_offset && gap(t, c, s + start_offset, start - start_offset, err)) return -1;
        if (bs_ids_push(&c->ids, a->id)) return bs_fail(err, "out of memory");
        start_offset = stop;
    }
    if (start_offset < n) return gap(t, c, s + start_offset, n - start_offset, err);
    return 0;
}

// Normalised text without added tokens: pre-tokenise, then BPE each piece.
static int encode_plain(const bs_tokenizer *t, enc_ctx *c, const char *s, size_t n, bs_err *err) {
    if (bs_pretokenize(t, &c->pre, s, n, err)) return -1;
    for (size_t i = 0; i < c->pre.a.n; i++)
        if (bs_bpe_piece(t, c->bpe, c->pre.buf + c->pre.a.v[i].off, c->pre.a.v[i].len, &c->ids, err)) return -1;
    return 0;
}

// Raw text between raw-matched added tokens: normalise, then cut out normalized added tokens.
static int encode_gap(const bs_tokenizer *t, enc_ctx *c, const char *s, size_t n, bs_err *err) {
    char *norm; size_t nl;
    if (bs_normalize(t, s, n, &norm, &nl, err)) return -1;
    const char *x = norm ? norm : s;
    int rc = t->has_normalized_added ? split_added(t, c, 1, x, nl, encode_plain, err) : encode_plain(t, c, x, nl, err);
    free(norm);
    return rc;
}

int bs_tokenizer_encode_ex(const bs_tokenizer *t, const char *text, size_t len, int add_special,
                           int32_t **ids, size_t *n, bs_err *err) {
    *ids = NULL; *n = 0;
    if (!t || (!text && len)) return bs_fail(err, "tokenizer encode: no tokenizer or no text");
    char *clean;
    size_t cl = bs_utf8_sanitize(text ? text : "", len, &clean);
    if (!clean && cl != len) return bs_fail(err, "out of memory");
    const char *s = clean ? clean : text ? text : "";
    enc_ctx c = { 0 };
    c.bpe = bs_bpe_ws_new();
    int rc = c.bpe ? 0 : bs_fail(err, "out of memory");
    if (!rc && add_special) rc = bs_ids_append(&c.ids, t->post_pre, t->n_post_pre) ? bs_fail(err, "out of memory") : 0;
    if (!rc) rc = split_added(t, &c, 0, s, cl, encode_gap, err);
    if (!rc && add_special) rc = bs_ids_append(&c.ids, t->post_post, t->n_post_post) ? bs_fail(err, "out of memory") : 0;
    bs_pretok_ws_free(&c.pre);
    bs_bpe_ws_free(c.bpe);
    free(clean);
    if (rc) { free(c.ids.v); return -1; }
    if (!c.ids.v) c.ids.v = malloc(sizeof(int32_t));   // never hand back NULL on success
    *ids = c.ids.v; *n = c.ids.n;
    return c.ids.v ? 0 : bs_fail(err, "out of memory");
}

int bs_tokenizer_encode(const bs_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n, bs_err *err) {
    return bs_tokenizer_encode_ex(t, text, len, 1, ids, n, err);
}
