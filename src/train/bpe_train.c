// Byte-level BPE trainer with incremental pair counts: each pair keeps its count and the words it
// occurs in, so a merge only revisits the words that contain it; a lazy max-heap picks the next pair.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "train/bpe_train.h"
#include "io/json.h"   // bs_read_file
#include "io/tokenizer_internal.h"
#include "util/sbuf.h"
#include "util/timer.h"

const char *bs_bpe_train_regex(void) { return bs_qwen2_regex(); }

typedef struct { int32_t *sym; int32_t n; int64_t freq; } word;
typedef struct { int32_t a, b; int64_t count; int32_t *where; int32_t n_where, cap_where; } pair;
typedef struct { int64_t count; int32_t p; } hitem;

typedef struct {
    word *w; size_t n_w, cap_w;
    pair *p; size_t n_p, cap_p;
    uint64_t *pk; int32_t *pv; size_t pcap;   // pair key -> index
    hitem *h; size_t n_h, cap_h;
    bs_tok_map tok_ids;                        // token string -> id; entry i is token i (tok_str)
} trainer;

static uint64_t pkey(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }
static uint64_t phash(uint64_t k) { k ^= k >> 31; k *= 0x7fb5d329728ea185ull; k ^= k >> 27; return k; }

// Every array starts small and doubles: a test corpus or fuzz input has a few hundred words and pairs, and
// first allocations of 4096 entries (~230 KB per training run, each page faulted in) cost more than the training.
#define GROW(ptr, n, cap, need) do { if ((need) > (cap)) { size_t c_ = (cap) ? (cap) * 2 : 64; while (c_ < (need)) c_ *= 2; \
    void *q_ = realloc((ptr), c_ * sizeof *(ptr)); if (!q_) return -1; (ptr) = q_; (cap) = c_; } } while (0)

static int32_t pair_get(trainer *T, int32_t a, int32_t b, int create) {
    if ((T->n_p + 1) * 2 > T->pcap) {
        size_t cap = T->pcap ? T->pcap * 2 : 64;   // doubles as pairs come (see GROW)
        uint64_t *k = malloc(cap * sizeof *k); int32_t *v = malloc(cap * sizeof *v);
        if (!k || !v) { free(k); free(v); return -2; }
        for (size_t i = 0; i < cap; i++) v[i] = -1;
        for (size_t i = 0; i < T->pcap; i++) if (T->pv[i] >= 0) {
            size_t j = phash(T->pk[i]) & (cap - 1);
            while (v[j] >= 0) j = (j + 1) & (cap - 1);
            k[j] = T->pk[i]; v[j] = T->pv[i];
        }
        free(T->pk); free(T->pv); T->pk = k; T->pv = v; T->pcap = cap;
    }
    uint64_t key = pkey(a, b);
    size_t i = phash(key) & (T->pcap - 1);
    while (T->pv[i] >= 0) { if (T->pk[i] == key) return T->pv[i]; i = (i + 1) & (T->pcap - 1); }
    if (!create) return -1;
    if (T->n_p == T->cap_p) {
        size_t c = T->cap_p ? T->cap_p * 2 : 64;
        void *q = realloc(T->p, c * sizeof *T->p);
        if (!q) return -2;
        T->p = q; T->cap_p = c;
    }
    T->p[T->n_p] = (pair){ a, b, 0, NULL, 0, 0 };
    T->pk[i] = key; T->pv[i] = (int32_t)T->n_p;
    return (int32_t)T->n_p++;
}

static int heap_push(trainer *T, int64_t count, int32_t p) {
    GROW(T->h, T->n_h, T->cap_h, T->n_h + 1);
    size_t i = T->n_h++;
    hitem e = { count, p };
    // Higher count first; on ties the older (lower index) pair, which keeps training deterministic.
    while (i) {
        size_t up = (i - 1) / 2; hitem *u = &T->h[up];
        if (u->count > e.count || (u->count == e.count && u->p < e.p)) break;
        T->h[i] = *u; i = up;
    }
    T->h[i] = e;
    return 0;
}
static hitem heap_pop(trainer *T) {
    hitem top = T->h[0], e = T->h[--T->n_h];
    size_t i = 0, m = T->n_h;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && (T->h[c + 1].count > T->h[c].count || (T->h[c + 1].count == T->h[c].count && T->h[c + 1].p < T->h[c].p))) c++;
        if (e.count > T->h[c].count || (e.count == T->h[c].count && e.p < T->h[c].p)) break;
        T->h[i] = T->h[c]; i = c;
    }
    if (m) T->h[i] = e;
    return top;
}

// Adds (sign=+1) or removes (-1) the pairs of word wi; on adding, records wi in pairs involving `track`.
static int count_word(trainer *T, int32_t wi, int sign, int32_t track) {
    word *w = &T->w[wi];
    for (int32_t i = 0; i + 1 < w->n; i++) {
        int32_t p = pair_get(T, w->sym[i], w->sym[i + 1], 1);
        if (p < 0) return -1;
        pair *P = &T->p[p];
        P->count += sign * w->freq;
        if (sign > 0 && (track < 0 || w->sym[i] == track || w->sym[i + 1] == track)) {
            if (P->n_where && P->where[P->n_where - 1] == wi) continue;
            GROW(P->where, P->n_where, P->cap_where, (size_t)P->n_where + 1);
            P->where[P->n_where++] = wi;
        }
    }
    return 0;
}

// Tokens are only ever added, in id order, so the map's entry i is token i: its arena holds the token
// strings (no allocation per token).
static int add_token(trainer *T, const char *s, size_t len, int32_t *id) {
    int32_t have = bs_tok_map_get(&T->tok_ids, s, len);
    if (have >= 0) { *id = have; return 0; }
    *id = (int32_t)T->tok_ids.n;
    return bs_tok_map_put(&T->tok_ids, s, len, *id);
}
static const char *tok_str(const trainer *T, int32_t id) { return bs_tok_map_key(&T->tok_ids, (size_t)id); }
static size_t tok_len(const trainer *T, int32_t id) { return T->tok_ids.ents[id].len; }

// Counts one occurrence of the piece p[0..n) as a word of byte symbols (byte b is provisionally id b).
static int count_piece(trainer *T, bs_tok_map *words, const unsigned char *p, size_t n, bs_err *err) {
    int32_t wi = bs_tok_map_get(words, (const char *)p, n);
    if (wi < 0) {
        if (T->n_w == T->cap_w) {
            size_t c = T->cap_w ? T->cap_w * 2 : 64;
            void *q = realloc(T->w, c * sizeof *T->w);
            if (!q) return bs_fail(err, "out of memory");
            T->w = q; T->cap_w = c;
        }
        word *w = &T->w[T->n_w];
        w->sym = malloc(n * sizeof *w->sym); w->n = (int32_t)n; w->freq = 0;
        if (!w->sym) return bs_fail(err, "out of memory");
        for (size_t i = 0; i < n; i++) w->sym[i] = p[i];
        wi = (int32_t)T->n_w++;
        if (bs_tok_map_put(words, (const char *)p, n, wi)) return bs_fail(err, "out of memory");
    }
    T->w[wi].freq++;
    return 0;
}

// Word counting: NFC, then the Split regex; each distinct piece is a word of byte symbols. The search is
// the pre-tokeniser's (bs_regex_search), with its step limit that grows with the text: with Oniguruma's fixed
// limit, a whitespace run of ~10 MB failed every search, and the failure, read as an empty match, moved on one
// byte per failed search of 10M steps (tokenizer-train never finished).
static int count_segment(trainer *T, bs_tok_map *words, const char *text, size_t len, regex_t *re, bs_regex_ws *rx, bs_err *err) {
    regex_t *run = bs_regex_run_form(re);
    bs_tokenizer nfc = { 0 };
    nfc.n_norm = 1; nfc.norm[0].kind = BS_NORM_NFC;
    char *clean; size_t cl = bs_utf8_sanitize(text, len, &clean);
    const char *s = clean ? clean : text;
    char *norm; size_t nl;
    if (bs_normalize(&nfc, s, cl, &norm, &nl, err)) { free(clean); return -1; }
    const char *str = norm ? norm : s;
    const unsigned char *u = (const unsigned char *)str;
    size_t at = 0;
    int rc = 0;
    while (at < nl && !rc) {
        bs_span m[BS_REGEX_RUN];
        int k = bs_regex_search(re, run, rx, str, nl, at, m, err);
        if (k < 0) { rc = bs_wrap(err, "tokenizer-train"); break; }
        if (k == 0) break;
        for (int i = 0; i < k && !rc; i++) {
            size_t ms = m[i].off, me = ms + m[i].len;
            if (me == ms) { at++; break; }   // the regex never matches empty; be safe anyway
            // Gaps between matches are pieces too (Split Isolated).
            if (ms > at) rc = count_piece(T, words, u + at, ms - at, err);
            if (!rc) rc = count_piece(T, words, u + ms, me - ms, err);
            at = me;
        }
    }
    if (!rc && at < nl) rc = count_piece(T, words, u + at, nl - at, err);   // trailing gap
    free(norm); free(clean);
    return rc ? -1 : 0;
}

// Where special token k next occurs in text at or after byte `from`; SIZE_MAX when it does not.
static size_t next_special(const char *text, size_t len, size_t from, const char *special) {
    size_t sl = strlen(special);
    const char *f = sl ? memmem(text + from, len - from, special, sl) : NULL;
    return f ? (size_t)(f - text) : SIZE_MAX;
}

// Special tokens in the corpus are cut out first, as the tokenizer does when encoding: they must
// never be learnt as merges (Hugging Face would then give them the vocab's id). Each special's next
// occurrence is remembered and searched for again only once the cuts have passed it. Searching every
// special from every cut was quadratic when one special is frequent and another rare or absent (a
// 9.5 MB corpus of 100,000 documents joined by <|endoftext|>, trained with <|im_start|> too: 87 s, not 0.4 s).
static int count_words(trainer *T, bs_tok_map *words, const char *text, size_t len, const bs_bpe_train_opts *o,
                       regex_t *re, bs_regex_ws *rx, bs_err *err) {
    size_t *next = malloc((o->n_special ? o->n_special : 1) * sizeof *next);
    if (!next) return bs_fail(err, "out of memory");
    for (size_t k = 0; k < o->n_special; k++) next[k] = next_special(text, len, 0, o->special[k]);
    size_t at = 0;
    int rc = 0;
    while (at < len && !rc) {
        // The earliest special at or after `at`; on a tie the longest.
        size_t best = len, best_len = 0;
        for (size_t k = 0; k < o->n_special; k++) {
            if (next[k] < at) next[k] = next_special(text, len, at, o->special[k]);   // inside an earlier cut
            size_t sl = strlen(o->special[k]);
            if (next[k] != SIZE_MAX && (next[k] < best || (next[k] == best && sl > best_len))) { best = next[k]; best_len = sl; }
        }
        if (best > at) rc = count_segment(T, words, text + at, best - at, re, rx, err);
        at = best + best_len;
    }
    free(next);
    return rc;
}

// The output text, written directly: building it as a cJSON tree took several allocations per token and
// merge (a node, its key, its value) only to print them once.
static void sb_int(bs_sbuf *b, size_t v) { char num[24]; bs_sbuf_put(b, num, (size_t)snprintf(num, sizeof num, "%zu", v)); }
// A JSON string, escaped as cJSON prints one (the files stay byte for byte what they were): quote and
// backslash, \b \f \n \r \t, other bytes below 0x20 as \u00xx; every other byte as it is.
static void sb_str(bs_sbuf *b, const char *s) {
    bs_sbuf_put(b, "\"", 1);
    for (const char *run = s;; s++) {
        unsigned char c = (unsigned char)*s;
        if (c > 31 && c != '"' && c != '\\') continue;
        bs_sbuf_put(b, run, (size_t)(s - run));
        if (!c) break;
        char esc[8];
        const char *short_esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\b' ? "\\b" : c == '\f' ? "\\f"
                              : c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
        if (!short_esc) { snprintf(esc, sizeof esc, "\\u%04x", c); short_esc = esc; }
        bs_sbuf_puts(b, short_esc);
        run = s + 1;
    }
    bs_sbuf_put(b, "\"", 1);
}

// tokenizer.json: NFC, the Split regex then ByteLevel, the special tokens as added tokens, the vocab and merges.
static int write_json(trainer *T, const bs_bpe_train_opts *o, int32_t (*merges)[2], size_t n_merges, const char *path, bs_err *err) {
    static const char *byte_level = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":false,\"use_regex\":false}";
    bs_sbuf b = { 0 };
    bs_sbuf_puts(&b, "{\"added_tokens\":[");
    for (size_t i = 0; i < o->n_special; i++) {
        bs_sbuf_puts(&b, i ? ",{\"id\":" : "{\"id\":"); sb_int(&b, i);
        bs_sbuf_puts(&b, ",\"content\":"); sb_str(&b, o->special[i]);
        bs_sbuf_puts(&b, ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}");
    }
    bs_sbuf_puts(&b, "],\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"normalizer\":{\"type\":\"NFC\"},"
               "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"pattern\":{\"Regex\":");
    sb_str(&b, bs_bpe_train_regex());
    bs_sbuf_puts(&b, "},\"type\":\"Split\",\"behavior\":\"Isolated\",\"invert\":false},"); bs_sbuf_puts(&b, byte_level);
    bs_sbuf_puts(&b, "]},\"post_processor\":"); bs_sbuf_puts(&b, byte_level);
    bs_sbuf_puts(&b, ",\"decoder\":"); bs_sbuf_puts(&b, byte_level);
    bs_sbuf_puts(&b, ",\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"continuing_subword_prefix\":\"\","
               "\"end_of_word_suffix\":\"\",\"fuse_unk\":false,\"byte_fallback\":false,\"ignore_merges\":false,\"vocab\":{");
    // Special tokens sit in the model vocab too, as Hugging Face's trainer writes them: tokenizers gives an added
    // token the vocab's id when it is there, and otherwise the next id after the vocab's count.
    for (size_t i = 0; i < T->tok_ids.n; i++) {
        if (i) bs_sbuf_put(&b, ",", 1);
        sb_str(&b, tok_str(T, (int32_t)i)); bs_sbuf_put(&b, ":", 1); sb_int(&b, i);
    }
    bs_sbuf_puts(&b, "},\"merges\":[");
    for (size_t i = 0; i < n_merges; i++) {
        bs_sbuf_puts(&b, i ? ",[" : "["); sb_str(&b, tok_str(T, merges[i][0]));
        bs_sbuf_put(&b, ",", 1); sb_str(&b, tok_str(T, merges[i][1])); bs_sbuf_put(&b, "]", 1);
    }
    bs_sbuf_puts(&b, "]}}");
    if (b.oom) { free(b.s); return bs_fail(err, "out of memory writing %s", path); }
    FILE *f = fopen(path, "wb");
    int rc = 0;
    if (!f || fwrite(b.s, 1, b.n, f) != b.n) rc = bs_fail(err, "cannot write %s", path);
    if (f && fclose(f)) rc = bs_fail(err, "cannot write %s", path);
    free(b.s);
    return rc;
}

int bs_bpe_train(const char *const *texts, const size_t *lens, size_t n_texts, const bs_bpe_train_opts *o,
                 const char *out_path, bs_err *err) {
    if (o->vocab_size < o->n_special + 256)
        return bs_fail(err, "tokenizer-train: --vocab %zu is below the %zu special + 256 byte tokens", o->vocab_size, o->n_special);
    trainer T = { 0 };
    bs_tok_map words = { 0 };
    int32_t (*merges)[2] = NULL; size_t n_merges = 0;
    regex_t *re = NULL;
    bs_regex_ws rx = { 0 };
    // (compiled once per process and shared: bs_regex_compile)
    int rc = bs_regex_compile(&re, bs_bpe_train_regex(), strlen(bs_bpe_train_regex()), err);
    double t0 = bs_now();
    for (size_t i = 0; i < n_texts && !rc; i++) rc = count_words(&T, &words, texts[i], lens[i], o, re, &rx, err);
    int32_t id, byte_id[256];
    for (size_t i = 0; i < o->n_special && !rc; i++) {
        if (bs_tok_map_get(&T.tok_ids, o->special[i], strlen(o->special[i])) >= 0) rc = bs_fail(err, "tokenizer-train: special token \"%s\" given twice", o->special[i]);
        else if (add_token(&T, o->special[i], strlen(o->special[i]), &id)) rc = bs_fail(err, "out of memory");
    }
    for (int b = 0; b < 256 && !rc; b++) {
        char c[4]; int l; bs_bytelevel_char((unsigned char)b, c, &l);
        if (bs_tok_map_get(&T.tok_ids, c, l) >= 0) rc = bs_fail(err, "tokenizer-train: a special token equals the byte token \"%.*s\"", l, c);
        else if (add_token(&T, c, l, &byte_id[b])) rc = bs_fail(err, "out of memory");
    }
    for (size_t i = 0; i < T.n_w && !rc; i++) {
        for (int32_t k = 0; k < T.w[i].n; k++) T.w[i].sym[k] = byte_id[T.w[i].sym[k]];
        if (count_word(&T, (int32_t)i, +1, -1)) rc = bs_fail(err, "out of memory");
    }
    for (size_t p = 0; p < T.n_p && !rc; p++) if (heap_push(&T, T.p[p].count, (int32_t)p)) rc = bs_fail(err, "out of memory");
    long min_freq = o->min_frequency > 0 ? o->min_frequency : 2;
    int32_t *stamp = calloc(T.n_w + 1, sizeof *stamp), round = 0;
    size_t merges_cap = 0;
    char *buf = NULL; size_t buf_cap = 0;
    if (!rc && !stamp) rc = bs_fail(err, "out of memory");
    while (!rc && T.tok_ids.n < o->vocab_size && T.n_h) {
        hitem top = heap_pop(&T);
        pair *P = &T.p[top.p];
        if (top.count != P->count) { if (P->count > 0 && heap_push(&T, P->count, top.p)) rc = bs_fail(err, "out of memory"); continue; }
        if (P->count < min_freq) break;
        int32_t a = P->a, b = P->b;
        size_t la = tok_len(&T, a), lb = tok_len(&T, b);
        if (la + lb + 1 > buf_cap) { free(buf); buf_cap = 2 * (la + lb + 1); if (!(buf = malloc(buf_cap))) { rc = bs_fail(err, "out of memory"); break; } }
        memcpy(buf, tok_str(&T, a), la); memcpy(buf + la, tok_str(&T, b), lb);
        int32_t nid;
        if (add_token(&T, buf, la + lb, &nid)) { rc = bs_fail(err, "out of memory"); break; }
        if (n_merges == merges_cap) { merges_cap = merges_cap ? 2 * merges_cap : 64; void *q = realloc(merges, merges_cap * sizeof *merges);
            if (!q) { rc = bs_fail(err, "out of memory"); break; } merges = q; }
        merges[n_merges][0] = a; merges[n_merges][1] = b; n_merges++;
        // Revisit only the words that held (a, b): remove their pairs, merge, add them back.
        round++;
        int32_t *where = P->where, n_where = P->n_where;
        P->where = NULL; P->n_where = P->cap_where = 0;
        for (int32_t k = 0; k < n_where && !rc; k++) {
            int32_t wi = where[k];
            if (stamp[wi] == round) continue;
            stamp[wi] = round;
            word *w = &T.w[wi];
            int has = 0;
            for (int32_t i = 0; i + 1 < w->n && !has; i++) has = w->sym[i] == a && w->sym[i + 1] == b;
            if (!has) continue;
            if (count_word(&T, wi, -1, -1)) { rc = bs_fail(err, "out of memory"); break; }
            int32_t m = 0;
            for (int32_t i = 0; i < w->n; i++) {
                if (i + 1 < w->n && w->sym[i] == a && w->sym[i + 1] == b) { w->sym[m++] = nid; i++; }
                else w->sym[m++] = w->sym[i];
            }
            w->n = m;
            if (count_word(&T, wi, +1, nid)) { rc = bs_fail(err, "out of memory"); break; }
            // New pairs (those with nid) enter the heap with their counts; stale entries are skipped.
            for (int32_t i = 0; i + 1 < w->n; i++) if (w->sym[i] == nid || w->sym[i + 1] == nid) {
                int32_t p = pair_get(&T, w->sym[i], w->sym[i + 1], 0);
                if (p >= 0 && heap_push(&T, T.p[p].count, p)) { rc = bs_fail(err, "out of memory"); break; }
            }
        }
        free(where);
        if (o->progress && n_merges % 1000 == 0) {
            char line[128];
            snprintf(line, sizeof line, "%zu tokens, %.1fs", T.tok_ids.n, bs_now() - t0);
            o->progress(o->progress_ctx, line);
        }
    }
    if (!rc) rc = write_json(&T, o, merges, n_merges, out_path, err);
    if (o->progress && !rc) {
        char line[160];
        snprintf(line, sizeof line, "%zu distinct words, %zu merges, %zu tokens, %.2fs", T.n_w, n_merges, T.tok_ids.n, bs_now() - t0);
        o->progress(o->progress_ctx, line);
    }
    free(buf); free(stamp); free(merges);
    for (size_t i = 0; i < T.n_w; i++) free(T.w[i].sym);
    for (size_t i = 0; i < T.n_p; i++) free(T.p[i].where);
    free(T.w); free(T.p); free(T.pk); free(T.pv); free(T.h);
    bs_tok_map_free(&T.tok_ids); bs_tok_map_free(&words);
    bs_regex_free(re);
    bs_regex_ws_free(&rx);
    return rc;
}

int bs_bpe_train_files(const char *const *files, size_t n_files, const bs_bpe_train_opts *o, const char *out_path, bs_err *err) {
    char **texts = calloc(n_files + 1, sizeof *texts);
    size_t *lens = calloc(n_files + 1, sizeof *lens);
    int rc = texts && lens ? 0 : bs_fail(err, "out of memory");
    for (size_t i = 0; i < n_files && !rc; i++) {
        // Regular files only (a FIFO would block), read into a buffer of the file's size.
        if (!(texts[i] = bs_read_file(files[i], &lens[i], err))) rc = bs_wrap(err, "tokenizer-train: corpus file");
    }
    if (!rc) rc = bs_bpe_train((const char *const *)texts, lens, n_files, o, out_path, err);
    for (size_t i = 0; texts && i < n_files; i++) free(texts[i]);
    free(texts); free(lens);
    return rc;
}
