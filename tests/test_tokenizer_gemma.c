// Gemma-style tokenizer.json (SentencePiece BPE as transformers writes it for Gemma 3 / Gemma 4): normalizer
// Replace " " -> U+2581, Split " " MergedWithPrevious, byte_fallback + fuse_unk, <bos> from TemplateProcessing,
// decoder Replace + ByteFallback + Fuse. The fixture tests/ref/gemma_tok is a small tokenizer trained by
// tests/node/gemma_oracle.js --make; the oracle tests compare encode and decode with Hugging Face tokenizers
// (npm tokenizers@0.23.2) on it and four variants (Gemma 3's layout, missing byte tokens with and without
// fuse_unk, Llama-2's Prepend + Strip), and skip with the reason where node or tests/node is missing.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "harness.h"
#include "io/tokenizer.h"

#define GEMMA_DIR "tests/ref/gemma_tok"
#define GEMMA_OUT "build/tok_oracle/gemma"
unsigned char *bs_test_oracle_read(const char *path, size_t *n);   // tests/test_tokenizer_oracle.c
uint32_t bs_test_rd32(const unsigned char *p);

static double mtime(const char *p) { struct stat st; return stat(p, &st) ? -1 : (double)st.st_mtime; }

// Runs tests/node/gemma_oracle.js unless its output is newer than the script, the corpus and the fixture.
// Returns NULL or the reason to skip.
static const char *gemma_oracle(void) {
    static int done = 0; static const char *why = NULL;
    if (done) return why;
    done = 1;
    if (mtime("tests/node/node_modules/tokenizers/package.json") < 0)
        return why = "tests/node/node_modules is not installed (run: npm ci --prefix tests/node)";
    if (system("node --version >/dev/null 2>&1")) return why = "node is not on PATH";
    double out = mtime(GEMMA_OUT "/llama2style.dec.bin");
    if (out < 0 || out < mtime("tests/node/gemma_oracle.js") || out < mtime("tests/node/corpus.js") || out < mtime(GEMMA_DIR "/tokenizer.json"))
        if (system("node tests/node/gemma_oracle.js " GEMMA_DIR " " GEMMA_OUT " >/dev/null")) return why = "tests/node/gemma_oracle.js failed";
    return NULL;
}

static bs_tokenizer *load_variant(const char *name, bs_err *err) {
    char path[256]; snprintf(path, sizeof path, GEMMA_OUT "/%s.json", name);
    bs_tokenizer *t;
    return bs_tokenizer_load(&t, path, err) ? NULL : t;
}

// Encode records (oracle.js's format): returns mismatching texts, -1 when it cannot run.
static long check_encode(const char *name, size_t *texts) {
    char path[256]; snprintf(path, sizeof path, GEMMA_OUT "/%s.bin", name);
    size_t n; unsigned char *b = bs_test_oracle_read(path, &n);
    bs_err err; bs_tokenizer *t = b ? load_variant(name, &err) : NULL;
    if (!t) { fprintf(stderr, "  %s: %s\n", name, b ? err.msg : "cannot read the oracle's records"); free(b); return -1; }
    long bad = 0; size_t p = 0;
    *texts = 0;
    while (p + 12 <= n) {
        uint32_t rl = bs_test_rd32(b + p); const char *raw = (const char *)b + p + 4; p += 4 + rl;
        p += 4 + bs_test_rd32(b + p);
        uint32_t k = bs_test_rd32(b + p); const unsigned char *ref = b + p + 4; p += 4 + 4 * (size_t)k;
        int32_t *ids; size_t m;
        if (bs_tokenizer_encode(t, raw, rl, &ids, &m, &err)) { fprintf(stderr, "  %s: encode: %s\n", name, err.msg); bad++; continue; }
        size_t f = 0;
        while (f < m && f < k && ids[f] == (int32_t)bs_test_rd32(ref + 4 * f)) f++;
        if (f != m || m != k) {
            if (bad < 3) fprintf(stderr, "  %s text %zu (%u bytes): %zu ids vs %u, first difference at %zu: %d vs %d\n", name, *texts, rl, m, k, f,
                                 f < m ? ids[f] : -1, f < k ? (int32_t)bs_test_rd32(ref + 4 * f) : -1);
            bad++;
        }
        free(ids);
        (*texts)++;
    }
    bs_tokenizer_free(t); free(b);
    return bad;
}

// Decode records: returns mismatches, -1 when it cannot run.
static long check_decode(const char *name, size_t *cases) {
    char path[256]; snprintf(path, sizeof path, GEMMA_OUT "/%s.dec.bin", name);
    size_t n; unsigned char *b = bs_test_oracle_read(path, &n);
    bs_err err; bs_tokenizer *t = b ? load_variant(name, &err) : NULL;
    if (!t) { fprintf(stderr, "  %s: %s\n", name, b ? err.msg : "cannot read the oracle's records"); free(b); return -1; }
    long bad = 0; size_t p = 0;
    *cases = 0;
    while (p + 12 <= n) {
        int skip = (int)bs_test_rd32(b + p);
        uint32_t k = bs_test_rd32(b + p + 4); const unsigned char *ref = b + p + 8; p += 8 + 4 * (size_t)k;
        uint32_t wl = bs_test_rd32(b + p); const char *want = (const char *)b + p + 4; p += 4 + wl;
        int32_t *ids = malloc(sizeof(int32_t) * (k ? k : 1));
        for (uint32_t i = 0; i < k; i++) ids[i] = (int32_t)bs_test_rd32(ref + 4 * i);
        char *got; size_t gl;
        if (bs_tokenizer_decode(t, ids, k, skip, &got, &gl, &err)) { fprintf(stderr, "  %s: decode: %s\n", name, err.msg); bad++; }
        else {
            if (gl != wl || memcmp(got, want, wl)) {
                if (bad < 3) fprintf(stderr, "  %s decode %zu (skip %d): got \"%.*s\" want \"%.*s\"\n", name, *cases, skip, (int)(gl < 200 ? gl : 200), got,
                                     (int)(wl < 200 ? wl : 200), want);
                bad++;
            }
            free(got);
        }
        free(ids);
        (*cases)++;
    }
    bs_tokenizer_free(t); free(b);
    return bad;
}

static const char *VARIANTS[] = { "gemma", "gemma3style", "gemma_unk", "gemma_unk_nofuse", "llama2style" };

TEST(tokenizer_gemma_oracle_encode) {
    const char *why = gemma_oracle();
    if (why) SKIP(why);
    for (size_t v = 0; v < sizeof VARIANTS / sizeof *VARIANTS; v++) {
        size_t texts;
        long bad = check_encode(VARIANTS[v], &texts);
        printf("  %s: %zu texts, %ld mismatching\n", VARIANTS[v], texts, bad);
        CHECK(bad == 0 && texts > 100, "%s: %ld of %zu texts differ from tokenizers@0.23.2", VARIANTS[v], bad, texts);
    }
}

TEST(tokenizer_gemma_oracle_decode) {
    const char *why = gemma_oracle();
    if (why) SKIP(why);
    for (size_t v = 0; v < sizeof VARIANTS / sizeof *VARIANTS; v++) {
        size_t cases;
        long bad = check_decode(VARIANTS[v], &cases);
        printf("  %s: %zu decodes, %ld mismatching\n", VARIANTS[v], cases, bad);
        CHECK(bad == 0 && cases > 1000, "%s: %ld of %zu decodes differ from tokenizers@0.23.2", VARIANTS[v], bad, cases);
    }
}

// Streaming: the pieces of bs_detok joined give decode's text, each piece valid UTF-8, for the oracle's decode
// cases. Where a ByteFallback run is not valid UTF-8, tokenizers turns every byte of the run into U+FFFD, its
// valid characters too, while the stream has emitted those characters already (it does not wait for a run to
// end: docs/tokenizer.md) and gives one U+FFFD per ill-formed part: there, with every U+FFFD taken out, decode's
// text must be what the stream gave less some of its characters.
int bs_test_valid_utf8(const unsigned char *s, size_t n);   // tests/test_detok_stream.c
static size_t drop_fffd(char *s, size_t n) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++) { if (i + 2 < n && !memcmp(s + i, "\xef\xbf\xbd", 3)) { i += 2; continue; } s[m++] = s[i]; }
    return m;
}
static int subsequence(const char *a, size_t an, const char *b, size_t bn) {   // a in b, in order
    size_t j = 0;
    for (size_t i = 0; i < bn && j < an; i++) j += a[j] == b[i];
    return j == an;
}

TEST(detok_stream_gemma_byte_fallback) {
    const char *why = gemma_oracle();
    if (why) SKIP(why);
    for (size_t v = 0; v < sizeof VARIANTS / sizeof *VARIANTS; v++) {
        char path[256]; snprintf(path, sizeof path, GEMMA_OUT "/%s.dec.bin", VARIANTS[v]);
        size_t n; unsigned char *b = bs_test_oracle_read(path, &n);
        bs_err err; bs_tokenizer *t = b ? load_variant(VARIANTS[v], &err) : NULL;
        CHECK(t, "%s: cannot load it or read its records", VARIANTS[v]);
        size_t p = 0, cases = 0, held = 0, fffd = 0;
        while (p + 12 <= n) {
            int skip = (int)bs_test_rd32(b + p);
            uint32_t k = bs_test_rd32(b + p + 4); const unsigned char *ref = b + p + 8; p += 8 + 4 * (size_t)k;
            uint32_t wl = bs_test_rd32(b + p); p += 4 + wl;
            char *want; size_t wn;
            int32_t *ids = malloc(sizeof(int32_t) * (k ? k : 1));
            for (uint32_t i = 0; i < k; i++) ids[i] = (int32_t)bs_test_rd32(ref + 4 * i);
            CHECK(bs_tokenizer_decode(t, ids, k, skip, &want, &wn, &err) == 0, "%s", err.msg);
            char *got = malloc(4 * wn + 64), piece[1024];
            size_t gn = 0;
            bs_detok d; bs_detok_init(&d, t, skip);
            for (uint32_t i = 0; i <= k; i++) {
                int r = i < k ? bs_detok_push(&d, ids[i], piece, sizeof piece) : bs_detok_flush(&d, piece, sizeof piece);
                CHECK(r >= 0, "%s case %zu: push failed", VARIANTS[v], cases);
                held += d.n_pending > 0;
                CHECK(bs_test_valid_utf8((const unsigned char *)piece, (size_t)r), "%s case %zu: piece %u is not valid UTF-8", VARIANTS[v], cases, i);
                CHECK(gn + (size_t)r <= 4 * wn + 64, "%s case %zu: the stream gave more than decode", VARIANTS[v], cases);
                memcpy(got + gn, piece, (size_t)r); gn += (size_t)r;
            }
            int invalid_run = memmem(want, wn, "\xef\xbf\xbd", 3) != NULL;
            if (invalid_run) { fffd++; wn = drop_fffd(want, wn); gn = drop_fffd(got, gn); }
            CHECK(invalid_run ? subsequence(want, wn, got, gn) : gn == wn && !memcmp(got, want, wn), "%s case %zu (skip %d): stream \"%.*s\" != decode \"%.*s\"", VARIANTS[v], cases, skip,
                  (int)(gn < 200 ? gn : 200), got, (int)(wn < 200 ? wn : 200), want);
            free(got); free(want); free(ids);
            cases++;
        }
        printf("  %s: %zu streams equal to decode (%zu with an invalid byte run), part of a character held %zu times\n", VARIANTS[v], cases, fffd, held);
        CHECK(cases > 1000 && held > 100, "%s: the cases did not split characters over byte tokens", VARIANTS[v]);
        bs_tokenizer_free(t); free(b);
    }
}

// Without node: the committed fixture itself. An emoji the vocabulary lacks becomes its four <0xXX> tokens
// after <bos>; streamed, the first three give nothing and the fourth the whole character.
TEST(tokenizer_gemma_fixture_byte_fallback) {
    bs_tokenizer *t; bs_err err;
    CHECK(bs_tokenizer_load(&t, GEMMA_DIR, &err) == 0, "%s", err.msg);
    CHECK(bs_tokenizer_bos_id(t) == 2 && bs_tokenizer_eos_id(t) == 1 && bs_tokenizer_pad_id(t) == 0, "tokenizer_config.json's specials");
    const char *text = "\xf0\x9f\xab\xa9";   // U+1FAE9, not in the fixture's vocabulary
    int32_t *ids; size_t n;
    CHECK(bs_tokenizer_encode(t, text, strlen(text), &ids, &n, &err) == 0, "%s", err.msg);
    CHECK(n == 5 && ids[0] == 2, "expected <bos> and four byte tokens, got %zu ids", n);
    const char *names[4] = { "<0xF0>", "<0x9F>", "<0xAB>", "<0xA9>" };
    for (int i = 0; i < 4; i++) CHECK(ids[1 + i] == bs_tokenizer_token_id(t, names[i]), "id %d is not %s", i + 1, names[i]);
    bs_detok d; bs_detok_init(&d, t, 1);
    char out[64];
    CHECK(bs_detok_push(&d, ids[0], out, sizeof out) == 0, "<bos> is skipped");
    for (int i = 1; i < 4; i++) CHECK(bs_detok_push(&d, ids[i], out, sizeof out) == 0, "byte %d must be held back", i);
    CHECK(bs_detok_push(&d, ids[4], out, sizeof out) == 4 && !strcmp(out, text), "the fourth byte completes the character");
    free(ids);
    // Spaces: U+2581 in the tokens, spaces again when decoded; a run of spaces and a leading space survive.
    const char *s2 = "  two  spaces\tand a tab\n";
    CHECK(bs_tokenizer_encode_ex(t, s2, strlen(s2), 0, &ids, &n, &err) == 0, "%s", err.msg);
    char *back; size_t bl;
    CHECK(bs_tokenizer_decode(t, ids, n, 0, &back, &bl, &err) == 0 && bl == strlen(s2) && !memcmp(back, s2, bl), "round trip: \"%s\"", back);
    free(back); free(ids);
    // A byte run that is not UTF-8: one U+FFFD per byte, as tokenizers' ByteFallback.
    int32_t bad[3] = { bs_tokenizer_token_id(t, "<0xE2>"), bs_tokenizer_token_id(t, "<0x82>"), bs_tokenizer_token_id(t, "a") };
    CHECK(bs_tokenizer_decode(t, bad, 3, 0, &back, &bl, &err) == 0 && !strcmp(back, "\xef\xbf\xbd\xef\xbf\xbd" "a"), "got \"%s\"", back);
    free(back);
    bs_tokenizer_free(t);
}

// Components that are not implemented, or decoder orders whose output the per-token tables cannot give, are
// refused at load with the file, the field and what is supported.
TEST(tokenizer_gemma_refuses_unsupported) {
    size_t n; bs_err err;
    unsigned char *base = bs_test_oracle_read(GEMMA_DIR "/tokenizer.json", &n);
    CHECK(base, "cannot read " GEMMA_DIR "/tokenizer.json");
    struct { const char *from, *to, *expect; } cases[] = {
        { "\"pre_tokenizer\":{\"type\":\"Split\"", "\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"x\",\"prepend_scheme\":\"first\",\"split\":true},\"x\":{\"type\":\"Split\"",
          "pre_tokenizer \"Metaspace\" is not supported" },
        { "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}", "{\"type\":\"ByteFallback\"},{\"type\":\"Replace\",\"pattern\":{\"String\":\"a\"},\"content\":\"b\"}",
          "decoder Replace after ByteFallback or Fuse is not supported" },
        { "{\"type\":\"Fuse\"}", "{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":0,\"stop\":1}", "Strip after Fuse must have \"stop\": 0" },
        { "{\"type\":\"Fuse\"}", "{\"type\":\"CTC\"}", "decoder \"CTC\" is not supported" },
        { "\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"}", "\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"Str\":\" \"}",
          "normalizer Replace needs pattern.String or pattern.Regex" },
        { "\"normalizer\":{\"type\":\"Replace\"", "\"normalizer\":{\"type\":\"Precompiled\"", "normalizer \"Precompiled\" is not supported" },
        { "\"type\":\"BPE\"", "\"type\":\"Unigram\"", "model type \"Unigram\" is not supported" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const char *at = strstr((const char *)base, cases[c].from);
        CHECK(at, "case %zu: the fixture has no %s", c, cases[c].from);
        size_t pre = (size_t)(at - (const char *)base), fl = strlen(cases[c].from), tl = strlen(cases[c].to);
        char *j = malloc(n + tl + 1);
        memcpy(j, base, pre); memcpy(j + pre, cases[c].to, tl); memcpy(j + pre + tl, at + fl, n - pre - fl);
        j[n - fl + tl] = 0;
        bs_tokenizer *t = NULL;
        int rc = bs_tokenizer_load_json(&t, j, n - fl + tl, NULL, &err);
        free(j);
        CHECK(rc != 0 && !t, "case %zu loaded", c);
        CHECK(strstr(err.msg, cases[c].expect) && strstr(err.msg, "tokenizer.json"), "case %zu: \"%s\"", c, err.msg);
    }
    free(base);
}
