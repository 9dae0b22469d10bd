// Ids back to text (ByteLevel decoder), the streaming decoder, and the lookups.
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

// Worked out once per tokenizer rather than per decoded id (decode and the streaming decoder used to map
// every character of every id back through the table; now they copy). A token's bytes are never longer
// than its text, so the table is at most the size of the vocabulary's text.
int bs_decode_table_build(bs_tokenizer *t, bs_err *err) {
    if (!t->dec_byte_level) return 0;
    size_t total = 0;
    for (size_t i = 0; i < t->n_ids; i++) total += t->id_to_str[i] ? t->id_len[i] : 0;
    t->dec_off = malloc((t->n_ids + 1) * sizeof *t->dec_off);
    t->dec_bytes = malloc(total ? total : 1);
    if (!t->dec_off || !t->dec_bytes) return bs_fail(err, "out of memory for the decoder's table");
    size_t m = 0;
    for (size_t i = 0; i < t->n_ids; i++) {
        t->dec_off[i] = m;
        if (t->id_to_str[i]) m += bytelevel_bytes(t->id_to_str[i], t->id_len[i], t->dec_bytes + m);
    }
    t->dec_off[t->n_ids] = m;
    return 0;
}

// Bytes of one (known) token.
static inline size_t token_bytes(const bs_tokenizer *t, int32_t id, char *out) {
    if (!t->dec_bytes) { memcpy(out, t->id_to_str[id], t->id_len[id]); return t->id_len[id]; }
    size_t n = t->dec_off[id + 1] - t->dec_off[id];
    memcpy(out, t->dec_bytes + t->dec_off[id], n);
    return n;
}

static int wanted(const bs_tokenizer *t, int32_t id, int skip_special) {
    return id >= 0 && (size_t)id < t->n_ids && t->id_to_str[id] && !(skip_special && t->id_special[id]);
}

int bs_tokenizer_decode(const bs_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                        char **text, size_t *len, bs_err *err) {
    *text = NULL;
    size_t cap = 1;
    for (size_t i = 0; i < n; i++) if (wanted(t, ids[i], skip_special)) cap += t->id_len[ids[i]] + 1;
    char *raw = malloc(cap);
    if (!raw) return bs_fail(err, "out of memory");
    size_t m = 0; int first = 1;
    for (size_t i = 0; i < n; i++) {
        if (!wanted(t, ids[i], skip_special)) continue;   // unknown ids are skipped, as tokenizers does
        if (!t->dec_byte_level && !first) raw[m++] = ' ';   // no decoder: tokens joined by spaces
        m += token_bytes(t, ids[i], raw + m);
        first = 0;
    }
    char *clean;
    size_t cl = bs_utf8_sanitize(raw, m, &clean);
    if (clean) { free(raw); raw = clean; m = cl; }
    else raw[m] = 0;
    *text = raw;
    if (len) *len = m;
    return 0;
}

void bs_detok_init(bs_detok *d, const bs_tokenizer *t, int skip_special) {
    memset(d, 0, sizeof *d);
    d->tok = t; d->skip_special = skip_special;
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
    size_t need = d->n_pending + t->id_len[id] + 1;
    char stackbuf[512], *buf = need <= sizeof stackbuf ? stackbuf : malloc(need);
    if (!buf) return -1;
    memcpy(buf, d->pending, d->n_pending);
    size_t n = d->n_pending + token_bytes(t, id, buf + d->n_pending);
    int np = d->n_pending;
    d->n_pending = 0;
    int r = emit(d, buf, n, 0, out, cap);
    if (r < 0) {   // restore so that the caller can retry with a larger buffer
        memcpy(d->pending, buf, np); d->n_pending = np;
    }
    if (buf != stackbuf) free(buf);
    return r;
}

int bs_detok_flush(bs_detok *d, char *out, size_t cap) {
    if (!cap) return -1;
    char buf[8]; int n = d->n_pending;
    memcpy(buf, d->pending, n);
    d->n_pending = 0;
    return emit(d, buf, n, 1, out, cap);
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
