// Ids back to text (the decoders: ByteLevel, ByteFallback, Replace, Strip, Fuse), the streaming decoder, and the lookups.
#include <stdlib.h>
#include <string.h>
#include "io/tokenizer_internal.h"

// Bytes of one token under ByteLevel: each character maps back to its byte; a token with a character
// outside the table (an added token such as "<think>" in CJK, say) is taken as its UTF-8 text.
static size_t bytelevel_bytes(const char *s, size_t n, char *out) {
    size_t m = 0, i = 0;
    while (i < n) {
        uint32_t cp; int k = bs_utf8_decode((const unsigned char *)s + i, n - i, &cp);
        int b = k ? bs_bytelevel_byte(cp) : -1;
        if (b < 0) { memcpy(out, s, n); return n; }
        out[m++] = (char)b;
        i += k;
    }
    return m;
}

// ByteFallback's test, as tokenizers makes it: six bytes "<0x" h h ">" where h h parse as a hexadecimal byte
// (Rust's from_str_radix, which also takes a leading '+'). -1 for any other token.
static int fallback_byte(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        if (i == 3 && c == '+') continue;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

// Strip (per token): up to `start` leading and `stop` trailing copies of the character, in place.
static void strip_token(const bs_dec_step *st, char *s, size_t *n) {
    size_t cl = st->content_len, a = 0, e = *n;
    for (int k = 0; k < st->start && e - a >= cl && !memcmp(s + a, st->content, cl); k++) a += cl;
    for (int k = 0; k < st->stop && e - a >= cl && !memcmp(s + e - cl, st->content, cl); k++) e -= cl;
    memmove(s, s + a, e - a);
    *n = e - a;
}

// One token's text through the per-token steps (Replace, Strip); *s is replaced by a malloc'ed string.
static int token_steps(const bs_tokenizer *t, char **s, size_t *n, bs_err *err) {
    for (int i = 0; i < t->n_dec; i++) {
        const bs_dec_step *st = &t->dec[i];
        if (st->kind == BS_DEC_STRIP) { strip_token(st, *s, n); continue; }
        char *o = NULL; size_t ol = 0;
        int rc = st->re ? bs_regex_replace(st->re, st->run, *s, *n, st->content, st->content_len, &o, &ol, err)
                        : bs_replace_literal(st->pattern, st->pattern_len, st->content, st->content_len, *s, *n, &o, &ol, err);
        if (rc) return -1;
        if (o) { free(*s); *s = o; *n = ol; }
    }
    return 0;
}

// The text decode starts from for each id: the token, or for an added token matched on normalised text its
// normalised form (tokenizers decodes that one, so that the decoder undoes what the normaliser did).
static void source_texts(const bs_tokenizer *t, const char **src, size_t *len) {
    for (size_t i = 0; i < t->n_ids; i++) { src[i] = t->id_to_str[i]; len[i] = t->id_to_str[i] ? t->id_len[i] : 0; }
    for (size_t k = 0; k < t->n_added; k++) {
        const bs_added_token *a = &t->added[k];
        if (a->normalized && t->n_norm > 0) { src[a->id] = a->match; len[a->id] = a->match_len; }
    }
}

// Worked out once per tokenizer rather than per decoded id: decode and the streaming decoder copy each id's
// bytes from the table (dec_bytes, dec_off) and only join them, check ByteFallback runs and strip the start.
int bs_decode_table_build(bs_tokenizer *t, bs_err *err) {
    const char **src = malloc((t->n_ids + 1) * sizeof *src);
    size_t *len = malloc((t->n_ids + 1) * sizeof *len), cap = 0, m = 0;
    t->dec_off = malloc((t->n_ids + 1) * sizeof *t->dec_off);
    t->dec_is_byte = calloc(t->n_ids + 1, 1);
    int rc = !src || !len || !t->dec_off || !t->dec_is_byte ? bs_fail(err, "out of memory for the decoder's table") : 0;
    if (!rc) {
        source_texts(t, src, len);
        for (size_t i = 0; i < t->n_ids; i++) cap += len[i];
        if (!(t->dec_bytes = malloc(cap + 1))) rc = bs_fail(err, "out of memory for the decoder's table");
    }
    for (size_t i = 0; i < t->n_ids && !rc; i++) {
        t->dec_off[i] = m;
        if (!src[i]) continue;
        // Without per-token steps the token's text is used as it is (no copy: Qwen3 has 151k tokens).
        char *s = NULL;
        size_t n = len[i];
        if (t->n_dec) {
            if (!(s = malloc(n + 1))) { rc = bs_fail(err, "out of memory for the decoder's table"); break; }
            memcpy(s, src[i], n);
            if (token_steps(t, &s, &n, err)) { free(s); rc = bs_wrap(err, "tokenizer.json: decoding token %zu", i); break; }
        }
        const char *x = s ? s : src[i];
        int b = t->dec_byte_fallback ? fallback_byte(x, n) : -1;
        // A step may lengthen a token (Replace with a longer content): the table grows then.
        if (m + n > cap) {
            size_t nc = 2 * (m + n);
            char *p = realloc(t->dec_bytes, nc + 1);
            if (!p) { free(s); rc = bs_fail(err, "out of memory for the decoder's table"); break; }
            t->dec_bytes = p; cap = nc;
        }
        if (b >= 0) { t->dec_bytes[m++] = (char)b; t->dec_is_byte[i] = 1; }
        else if (t->dec_byte_level) m += bytelevel_bytes(x, n, t->dec_bytes + m);
        else { memcpy(t->dec_bytes + m, x, n); m += n; }
        free(s);
    }
    if (!rc) t->dec_off[t->n_ids] = m;
    free(src); free(len);
    return rc;
}

// Bytes of one (known) token.
static inline size_t token_bytes(const bs_tokenizer *t, int32_t id, char *out) {
    size_t n = t->dec_off[id + 1] - t->dec_off[id];
    memcpy(out, t->dec_bytes + t->dec_off[id], n);
    return n;
}
static inline size_t token_len(const bs_tokenizer *t, int32_t id) { return t->dec_off[id + 1] - t->dec_off[id]; }

static int wanted(const bs_tokenizer *t, int32_t id, int skip_special) {
    return id >= 0 && (size_t)id < t->n_ids && t->id_to_str[id] && !(skip_special && t->id_special[id]);
}

// Ends a run of ByteFallback bytes raw[start..*m): kept when the run is valid UTF-8 as a whole, else every byte
// becomes one U+FFFD (tokenizers' ByteFallback; not one per ill-formed subpart as elsewhere).
static void end_byte_run(char *raw, size_t start, size_t *m) {
    size_t i = start, n = *m;
    uint32_t cp;
    while (i < n) { int k = bs_utf8_decode((const unsigned char *)raw + i, n - i, &cp); if (!k) break; i += k; }
    if (i == n) return;
    size_t bytes = n - start;
    for (size_t j = 0; j < bytes; j++) memcpy(raw + start + 3 * j, "\xef\xbf\xbd", 3);
    *m = start + 3 * bytes;
}

// Strip after Fuse: up to dec_lead_n copies of dec_lead off the start of s[0..*n); returns how many.
static int strip_lead(const bs_tokenizer *t, char *s, size_t *n, int most) {
    size_t a = 0, cl = (size_t)t->dec_lead_len;
    int k = 0;
    while (k < most && *n - a >= cl && !memcmp(s + a, t->dec_lead, cl)) { a += cl; k++; }
    memmove(s, s + a, *n - a);
    *n -= a;
    return k;
}

int bs_tokenizer_decode(const bs_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                        char **text, size_t *len, bs_err *err) {
    *text = NULL;
    size_t cap = 1;
    for (size_t i = 0; i < n; i++) if (wanted(t, ids[i], skip_special)) cap += 3 * token_len(t, ids[i]) + 1;
    char *raw = malloc(cap);
    if (!raw) return bs_fail(err, "out of memory");
    size_t m = 0, run = SIZE_MAX; int first = 1;
    for (size_t i = 0; i < n; i++) {
        if (!wanted(t, ids[i], skip_special)) continue;   // unknown ids are skipped, as tokenizers does
        if (!t->has_decoder && !first) raw[m++] = ' ';   // no decoder: tokens joined by spaces
        first = 0;
        if (t->dec_is_byte[ids[i]]) { if (run == SIZE_MAX) run = m; raw[m++] = t->dec_bytes[t->dec_off[ids[i]]]; continue; }
        if (run != SIZE_MAX) { end_byte_run(raw, run, &m); run = SIZE_MAX; }
        m += token_bytes(t, ids[i], raw + m);
    }
    if (run != SIZE_MAX) end_byte_run(raw, run, &m);
    char *clean;
    size_t cl = bs_utf8_sanitize(raw, m, &clean);
    if (clean) { free(raw); raw = clean; m = cl; }
    if (t->dec_lead_n) strip_lead(t, raw, &m, t->dec_lead_n);
    raw[m] = 0;
    *text = raw;
    if (len) *len = m;
    return 0;
}

void bs_detok_init(bs_detok *d, const bs_tokenizer *t, int skip_special) {
    memset(d, 0, sizeof *d);
    d->tok = t; d->skip_special = skip_special;
    d->lead_left = t->dec_lead_n;
}

// The Strip after Fuse, on the stream: leading copies come off until text that is not one has been emitted.
static int stream_lead(bs_detok *d, char *out, int r) {
    if (r <= 0 || !d->lead_left) return r;
    size_t n = (size_t)r;
    d->lead_left -= strip_lead(d->tok, out, &n, d->lead_left);
    if (n) d->lead_left = 0;
    out[n] = 0;
    return (int)n;
}

// Emits complete characters of buf; keeps a trailing incomplete (but so far valid) character.
static int emit(bs_detok *d, const char *buf, size_t n, int final, char *out, size_t cap) {
    size_t m = 0, i = 0;
    const unsigned char *u = (const unsigned char *)buf;
    while (i < n) {
        if (u[i] < 0x80) {   // a run of ASCII: copied as it is
            size_t r = 1;
            while (i + r < n && u[i + r] < 0x80) r++;
            if (m + r + 1 > cap) return -1;
            memcpy(out + m, buf + i, r); m += r; i += r;
            continue;
        }
        uint32_t cp; int k = bs_utf8_decode(u + i, n - i, &cp);
        if (k) { if (m + k + 1 > cap) return -1; memcpy(out + m, buf + i, k); m += k; i += k; continue; }
        // Incomplete at the end of the buffer: hold it back unless flushing.
        size_t rest = n - i;
        if (!final && rest < 4) {
            unsigned char tmp[4] = { 0 }; memcpy(tmp, u + i, rest);
            int need = u[i] >= 0xf0 ? 4 : u[i] >= 0xe0 ? 3 : u[i] >= 0xc2 ? 2 : 0;
            int valid_prefix = need > (int)rest;
            for (size_t j = 1; j < rest && valid_prefix; j++) valid_prefix = (tmp[j] & 0xc0) == 0x80;
            if (valid_prefix) { memcpy(d->pending, u + i, rest); d->n_pending = (int)rest; break; }
        }
        if (m + 4 > cap) return -1;
        memcpy(out + m, "\xef\xbf\xbd", 3); m += 3;
        i += (size_t)-bs_utf8_step(u + i, n - i, &cp);
    }
    out[m] = 0;
    return (int)m;
}

int bs_detok_push(bs_detok *d, int32_t id, char *out, size_t cap) {
    const bs_tokenizer *t = d->tok;
    if (!cap) return -1;
    if (!wanted(t, id, d->skip_special)) { out[0] = 0; return 0; }
    size_t need = d->n_pending + token_len(t, id) + 2;
    char stackbuf[512], *buf = need <= sizeof stackbuf ? stackbuf : malloc(need);
    if (!buf) return -1;
    memcpy(buf, d->pending, d->n_pending);
    size_t n = d->n_pending;
    if (!t->has_decoder && d->started) buf[n++] = ' ';   // no decoder: tokens joined by spaces
    n += token_bytes(t, id, buf + n);
    int np = d->n_pending;
    d->n_pending = 0;
    int r = emit(d, buf, n, 0, out, cap);
    if (r < 0) {   // restore so that the caller can retry with a larger buffer
        memcpy(d->pending, buf, np); d->n_pending = np;
    } else d->started = 1;
    if (buf != stackbuf) free(buf);
    return stream_lead(d, out, r);
}

int bs_detok_flush(bs_detok *d, char *out, size_t cap) {
    if (!cap) return -1;
    char buf[8]; int n = d->n_pending;
    memcpy(buf, d->pending, n);
    d->n_pending = 0;
    return stream_lead(d, out, emit(d, buf, n, 1, out, cap));
}

size_t bs_tokenizer_vocab_size(const bs_tokenizer *t) { return t->n_ids; }
int32_t bs_tokenizer_token_id(const bs_tokenizer *t, const char *s) { return bs_tok_map_get(&t->vocab, s, strlen(s)); }
const char *bs_tokenizer_token_str(const bs_tokenizer *t, int32_t id) {
    return id >= 0 && (size_t)id < t->n_ids ? t->id_to_str[id] : NULL;
}
int bs_tokenizer_is_special(const bs_tokenizer *t, int32_t id) { return id >= 0 && (size_t)id < t->n_ids && t->id_special[id]; }
int32_t bs_tokenizer_eos_id(const bs_tokenizer *t) { return t->eos_id; }
int32_t bs_tokenizer_pad_id(const bs_tokenizer *t) { return t->pad_id; }
int32_t bs_tokenizer_bos_id(const bs_tokenizer *t) { return t->bos_id; }
const char *bs_tokenizer_chat_template(const bs_tokenizer *t) { return t->chat_template; }
