// Training data: the corpus file format (written, read back, and refused when corrupt), `tokenize --corpus`
// with its held-out splits, and the loader's windows (packing, shuffling, exact resume).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "harness.h"
#include "io/tokenizer.h"
#include "train/corpus.h"
#include "train/loader.h"

// A corpus of n_docs documents; document d holds ids d*100 + k, k < len(d) = 3 + (d * 7) % 11.
static int doc_len(int d) { return 3 + (d * 7) % 11; }
static int write_pattern_corpus(const char *path, int n_docs, int with_mask, bs_err *err) {
    bs_corpus_writer *w;
    if (bs_corpus_writer_open(&w, path, 100 * n_docs, 0x1234, with_mask, err)) return -1;
    for (int d = 0; d < n_docs; d++) {
        int32_t ids[16]; uint8_t m[16];
        for (int k = 0; k < doc_len(d); k++) { ids[k] = d * 100 + k; m[k] = (k + d) % 2; }
        if (bs_corpus_writer_add(w, ids, with_mask ? m : NULL, doc_len(d), err)) { bs_corpus_writer_abort(w); return -1; }
    }
    return bs_corpus_writer_finish(w, err);
}


TEST(train_corpus_roundtrip) {
    const char *dir = bs_test_tmpdir("corpus");
    CHECK(dir);
    char path[512]; snprintf(path, sizeof path, "%s/c.bsc", dir);
    bs_err err;
    CHECK(write_pattern_corpus(path, 9, 1, &err) == 0, "%s", err.msg);
    bs_corpus *c;
    CHECK(bs_corpus_open(&c, path, &err) == 0, "%s", err.msg);
    CHECK(c->n_docs == 9 && c->vocab_size == 900 && c->tokenizer_hash == 0x1234 && c->mask, "header fields");
    int64_t total = 0;
    for (int d = 0; d < 9; d++) {
        CHECK((int64_t)c->doc_off[d] == total, "doc %d starts at %llu", d, (unsigned long long)c->doc_off[d]);
        for (int k = 0; k < doc_len(d); k++) {
            CHECK(c->ids[total + k] == d * 100 + k, "doc %d token %d", d, k);
            CHECK(c->mask[total + k] == (k + d) % 2, "mask of doc %d token %d", d, k);
        }
        total += doc_len(d);
    }
    CHECK(c->n_tokens == total, "n_tokens %lld, want %lld", (long long)c->n_tokens, (long long)total);
    bs_corpus_close(c);
}

// Writes a copy of src with `len` bytes replaced at `at` (or truncated to `truncate` bytes when >= 0).
static int corrupt_copy(const char *src, const char *dst, long at, const void *bytes, size_t len, long truncate) {
    FILE *f = fopen(src, "rb");
    if (!f) return -1;
    unsigned char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    if (truncate >= 0) n = (size_t)truncate;
    if (bytes) memcpy(buf + at, bytes, len);
    f = fopen(dst, "wb");
    if (!f) return -1;
    fwrite(buf, 1, n, f);
    if (truncate == -2) fputc(0, f);   // one trailing byte
    fclose(f);
    return 0;
}

TEST(train_corpus_corrupt_files_refused) {
    const char *dir = bs_test_tmpdir("corpus_bad");
    CHECK(dir);
    char good[512], bad[512];
    snprintf(good, sizeof good, "%s/good.bsc", dir);
    snprintf(bad, sizeof bad, "%s/bad.bsc", dir);
    bs_err err;
    CHECK(write_pattern_corpus(good, 5, 1, &err) == 0, "%s", err.msg);
    int64_t n_tokens = 0;
    for (int d = 0; d < 5; d++) n_tokens += doc_len(d);
    long docs_at = (128 + 4 * n_tokens + 7) / 8 * 8;
    int32_t big_id = 500, neg_id = -1;
    uint32_t v2 = 2, flags = 6;
    uint64_t back = 2, huge = 1ull << 40, wrong_off = 8;
    uint8_t mask2 = 2;
    struct { long at; const void *bytes; size_t len; long truncate; const char *needle; } cases[] = {
        { 0, "BSCORPUX", 8, -1, "bad magic" },
        { 8, &v2, 4, -1, "version 2" },
        { 12, &flags, 4, -1, "unknown flags" },
        { 0, NULL, 0, 100, "too short" },
        { 0, NULL, 0, docs_at + 20, "truncated" },
        { 0, NULL, 0, -2, "trailing bytes" },
        { 24, &huge, 8, -1, "header's counts (1099511627776 tokens" },
        { 56, &wrong_off, 8, -1, "section offsets (ids 128, docs 8" },
        { 128 + 4 * 3, &big_id, 4, -1, "token 3 has id 500, outside the vocabulary [0, 500)" },
        { 128, &neg_id, 4, -1, "token 0 has id -1" },
        { docs_at + 16, &back, 8, -1, "not increasing" },          // document 2 starts before document 1 ends
        { docs_at + 8 * 6 + 4, &mask2, 1, -1, "loss mask of token 4 is 2" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        CHECK(corrupt_copy(good, bad, cases[i].at, cases[i].bytes, cases[i].len, cases[i].truncate) == 0);
        bs_corpus *c = NULL;
        int rc = bs_corpus_open(&c, bad, &err);
        CHECK(rc != 0 && !c, "case %zu (%s): a corrupt corpus was accepted", i, cases[i].needle);
        CHECK(strstr(err.msg, cases[i].needle), "case %zu: message lacks \"%s\": %s", i, cases[i].needle, err.msg);
        CHECK(strstr(err.msg, bad), "case %zu: message does not name the file: %s", i, err.msg);
    }
    bs_corpus *c;
    CHECK(bs_corpus_open(&c, good, &err) == 0, "the untouched file must still open: %s", err.msg);
    bs_corpus_close(c);
}

// The loader's stream over a whole epoch is every document exactly once, back to back, and windows
// overlap by one token; the same seed gives the same windows; a seek to a saved position continues exactly.
TEST(train_loader_windows) {
    const char *dir = bs_test_tmpdir("loader");
    CHECK(dir);
    char path[512]; snprintf(path, sizeof path, "%s/c.bsc", dir);
    bs_err err;
    CHECK(write_pattern_corpus(path, 13, 0, &err) == 0, "%s", err.msg);
    bs_corpus *c;
    CHECK(bs_corpus_open(&c, path, &err) == 0, "%s", err.msg);
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        bs_loader l;
        CHECK(bs_loader_init(&l, c, 6, 42, shuffle, &err) == 0, "%s", err.msg);
        int32_t *stream = malloc(sizeof *stream * (c->n_tokens + 16));
        int64_t n = 0;
        bs_train_seq s;
        int32_t prev_last = -1;
        while (n < c->n_tokens) {
            bs_loader_next(&l, &s);
            CHECK(s.n == 6 && s.loss_mask == NULL, "window shape");
            if (prev_last >= 0) CHECK(s.ids[0] == prev_last, "windows must overlap by one token");
            for (int k = n ? 1 : 0; k < 6; k++) stream[n++] = s.ids[k];
            prev_last = s.ids[5];
        }
        int seen[13] = { 0 }, first_doc = -1;
        for (int64_t i = 0; i < c->n_tokens;) {
            int d = stream[i] / 100;
            CHECK(d >= 0 && d < 13 && stream[i] % 100 == 0, "a document does not start at its first token (%d)", stream[i]);
            if (first_doc < 0) first_doc = d;
            for (int k = 0; k < doc_len(d); k++) CHECK(stream[i + k] == d * 100 + k, "document %d broken in the stream", d);
            seen[d]++;
            i += doc_len(d);
        }
        for (int d = 0; d < 13; d++) CHECK(seen[d] == 1, "document %d seen %d times in one epoch", d, seen[d]);
        if (!shuffle) CHECK(first_doc == 0, "unshuffled stream starts with document 0");
        free(stream);
        bs_loader_free(&l);
    }
    // Determinism and resume: loader A runs 50 windows; B stops after 17 and a fresh C seeks to B's position.
    bs_loader a, b, cc, other;
    CHECK(bs_loader_init(&a, c, 7, 9, 1, &err) == 0 && bs_loader_init(&b, c, 7, 9, 1, &err) == 0 &&
          bs_loader_init(&cc, c, 7, 9, 1, &err) == 0 && bs_loader_init(&other, c, 7, 10, 1, &err) == 0, "%s", err.msg);
    bs_train_seq sa, sb, so;
    int differs = 0;
    for (int i = 0; i < 17; i++) {
        bs_loader_next(&a, &sa); bs_loader_next(&b, &sb); bs_loader_next(&other, &so);
        CHECK(!memcmp(sa.ids, sb.ids, 7 * sizeof(int32_t)), "same seed, different window %d", i);
        differs |= memcmp(sa.ids, so.ids, 7 * sizeof(int32_t)) != 0;
    }
    CHECK(differs, "seeds 9 and 10 gave the same 17 windows: the order is not shuffled by the seed");
    CHECK(bs_loader_seek(&cc, b.pos, &err) == 0, "%s", err.msg);
    for (int i = 17; i < 50; i++) {   // 50 windows of 6 new tokens run well into the third epoch
        bs_loader_next(&a, &sa); bs_loader_next(&cc, &sb);
        CHECK(!memcmp(sa.ids, sb.ids, 7 * sizeof(int32_t)), "resumed loader differs at window %d", i);
    }
    CHECK(a.pos.epoch >= 2, "the test should cross epochs (epoch %lld)", (long long)a.pos.epoch);
    bs_loader_pos badpos = { 0, 13, 0 };
    CHECK(bs_loader_seek(&cc, badpos, &err) != 0 && strstr(err.msg, "does not fit"), "a position past the corpus: %s", err.msg);
    bs_loader_free(&a); bs_loader_free(&b); bs_loader_free(&cc); bs_loader_free(&other);
    bs_loader l;
    CHECK(bs_loader_init(&l, c, 100000, 1, 1, &err) != 0 && strstr(err.msg, "fewer than one sequence"), "%s", err.msg);
    bs_corpus_close(c);
}

// A tokenizer trained for the test (tokenizer-train), then `tokenize --corpus` against the library's encode.
static int make_tokenizer(const char *dir, char *tok, size_t cap) {
    char cmd[4096], out[4096];
    snprintf(cmd, sizeof cmd, "cd %s && for i in 1 2 3 4; do for j in 1 2 3 4 5 6 7 8; do printf 'int f%%s%%s(int x) { return x + %%s; }\\n\\n' $i $j $j; done > f$i.c; done", dir);
    if (system(cmd)) return -1;
    snprintf(tok, cap, "%s/tokenizer.json", dir);
    snprintf(cmd, sizeof cmd, "%s tokenizer-train --vocab 300 --special '<|endoftext|>,<|im_start|>,<|im_end|>' --out %s %s/f1.c %s/f2.c", bs_cli_path(), tok, dir, dir);
    return bs_test_run(cmd, 1, out, sizeof out);
}

TEST(train_tokenize_corpus_cli) {
    const char *dir = bs_test_tmpdir("tokcorpus");
    CHECK(dir);
    char tok[512], cmd[4096], out[8192], path[600], held[700];
    CHECK(make_tokenizer(dir, tok, sizeof tok) == 0, "tokenizer-train failed");
    bs_err err;
    bs_tokenizer *t;
    CHECK(bs_tokenizer_load(&t, tok, &err) == 0, "%s", err.msg);
    int32_t eos = bs_tokenizer_token_id(t, "<|endoftext|>");
    CHECK(eos >= 0);
    // --heldout FILE: f3.c is the held-out corpus, one document per file, each ending in <|endoftext|>.
    snprintf(path, sizeof path, "%s/train.bsc", dir);
    snprintf(cmd, sizeof cmd, "%s tokenize --corpus %s -m %s --heldout %s/f3.c %s/f1.c %s/f2.c %s/f3.c %s/f4.c", bs_cli_path(), path, tok, dir, dir, dir, dir, dir);
    int st = bs_test_run(cmd, 1, out, sizeof out);
    CHECK(st == 0, "%s", out);
    bs_corpus *c, *h;
    snprintf(held, sizeof held, "%s.heldout", path);
    CHECK(bs_corpus_open(&c, path, &err) == 0, "%s", err.msg);
    CHECK(bs_corpus_open(&h, held, &err) == 0, "%s", err.msg);
    CHECK(c->n_docs == 3 && h->n_docs == 1 && !c->mask, "docs %lld + %lld", (long long)c->n_docs, (long long)h->n_docs);
    CHECK(c->vocab_size == (int64_t)bs_tokenizer_vocab_size(t), "vocab");
    uint64_t hash;
    CHECK(bs_tokenizer_file_hash(tok, &hash, &err) == 0 && hash == c->tokenizer_hash && hash == h->tokenizer_hash, "tokenizer hash");
    const char *order[3] = { "f1.c", "f2.c", "f4.c" };
    for (int d = 0; d < 4; d++) {
        char fp[512]; snprintf(fp, sizeof fp, "%s/%s", dir, d < 3 ? order[d] : "f3.c");
        FILE *f = fopen(fp, "rb"); CHECK(f);
        char text[8192]; size_t len = fread(text, 1, sizeof text, f); fclose(f);
        int32_t *ids; size_t n;
        CHECK(bs_tokenizer_encode_ex(t, text, len, 0, &ids, &n, &err) == 0, "%s", err.msg);
        const bs_corpus *cc = d < 3 ? c : h;
        int dd = d < 3 ? d : 0;
        int64_t s = (int64_t)cc->doc_off[dd], e = (int64_t)cc->doc_off[dd + 1];
        CHECK(e - s == (int64_t)n + 1, "%s: %lld tokens in the corpus, encode gives %zu + eos", fp, (long long)(e - s), n);
        CHECK(!memcmp(cc->ids + s, ids, n * sizeof *ids), "%s: ids differ from encode", fp);
        CHECK(cc->ids[e - 1] == eos, "%s: the document does not end with <|endoftext|>", fp);
        free(ids);
    }
    bs_corpus_close(c); bs_corpus_close(h);
    // --doc-sep with --heldout-frac: 32 documents, round(0.25 x 32) = 8 held out, the same 8 for the same seed.
    for (int rep = 0; rep < 2; rep++) {
        snprintf(cmd, sizeof cmd, "%s tokenize --corpus %s/s%d.bsc -m %s --doc-sep '\\n\\n' --heldout-frac 0.25 --seed 5 %s/f1.c %s/f2.c %s/f3.c %s/f4.c",
                 bs_cli_path(), dir, rep, tok, dir, dir, dir, dir);
        st = bs_test_run(cmd, 1, out, sizeof out);
        CHECK(st == 0, "%s", out);
    }
    snprintf(path, sizeof path, "%s/s0.bsc", dir); snprintf(held, sizeof held, "%s/s0.bsc.heldout", dir);
    CHECK(bs_corpus_open(&c, path, &err) == 0, "%s", err.msg);
    CHECK(bs_corpus_open(&h, held, &err) == 0, "%s", err.msg);
    CHECK(c->n_docs == 24 && h->n_docs == 8, "split %lld + %lld, want 24 + 8", (long long)c->n_docs, (long long)h->n_docs);
    bs_corpus_close(c); bs_corpus_close(h);
    snprintf(cmd, sizeof cmd, "cmp %s/s0.bsc.heldout %s/s1.bsc.heldout >/dev/null", dir, dir);
    CHECK(system(cmd) == 0, "the same seed gave different held-out documents");
    // A chat file: only the assistant's reply (and its end-of-turn) are labels.
    snprintf(cmd, sizeof cmd, "printf '{\"messages\":[{\"role\":\"user\",\"content\":\"int f\"},{\"role\":\"assistant\",\"content\":\"return x;\"}]}\\n' > %s/c.jsonl && "
             "%s tokenize --corpus %s/chat.bsc -m %s --chat-template chatml --chat %s/c.jsonl %s/f1.c", dir, bs_cli_path(), dir, tok, dir, dir);
    st = bs_test_run(cmd, 1, out, sizeof out);
    CHECK(st == 0, "%s", out);
    snprintf(path, sizeof path, "%s/chat.bsc", dir);
    CHECK(bs_corpus_open(&c, path, &err) == 0, "%s", err.msg);
    CHECK(c->n_docs == 2 && c->mask, "chat corpus has a mask");
    int64_t s = (int64_t)c->doc_off[1], e = (int64_t)c->doc_off[2];
    for (int64_t i = 0; i < s; i++) CHECK(c->mask[i] == 1, "plain text is all labels");
    int32_t *reply; size_t nr;
    CHECK(bs_tokenizer_encode_ex(t, "return x;", 9, 0, &reply, &nr, &err) == 0, "%s", err.msg);
    int64_t ones = 0, first = -1;
    for (int64_t i = s; i < e; i++) if (c->mask[i]) { ones++; if (first < 0) first = i; }
    CHECK(first >= 0 && !memcmp(c->ids + first, reply, nr * sizeof *reply), "the masked span does not start with the reply's tokens");
    CHECK(ones >= (int64_t)nr && ones <= (int64_t)nr + 3, "%lld label tokens for a %zu-token reply", (long long)ones, nr);
    CHECK(c->mask[e - 1] == 0 && c->ids[e - 1] == eos, "the separator after a chat is not a label");
    free(reply);
    bs_corpus_close(c);
    // Refusals: an empty split, an unknown --heldout file.
    snprintf(cmd, sizeof cmd, "%s tokenize --corpus %s/x.bsc -m %s --heldout-frac 0.01 %s/f1.c", bs_cli_path(), dir, tok, dir);
    st = bs_test_run(cmd, 1, out, sizeof out);
    CHECK(st == 1 && strstr(out, "held-out split empty"), "exit %d: %s", st, out);
    snprintf(cmd, sizeof cmd, "%s tokenize --corpus %s/x.bsc -m %s --heldout nothere.c %s/f1.c", bs_cli_path(), dir, tok, dir);
    st = bs_test_run(cmd, 1, out, sizeof out);
    CHECK(st == 2 && strstr(out, "not among the input files"), "exit %d: %s", st, out);
    bs_tokenizer_free(t);
}

// The training commands refuse bad data before building a model: each a clear message and exit status 1.
TEST(train_cli_bad_corpus) {
    const char *dir = bs_test_tmpdir("train_cli");
    CHECK(dir);
    char tok[512], tok2[600], cmd[4096], out[8192], path[600], bad[600];
    CHECK(make_tokenizer(dir, tok, sizeof tok) == 0, "tokenizer-train failed");
    snprintf(tok2, sizeof tok2, "%s/other.json", dir);   // another tokenizer: other merges
    snprintf(cmd, sizeof cmd, "%s tokenizer-train --vocab 270 --special '<|endoftext|>' --out %s %s/f3.c >/dev/null 2>&1", bs_cli_path(), tok2, dir);
    CHECK(system(cmd) == 0, "second tokenizer");
    snprintf(path, sizeof path, "%s/c.bsc", dir);
    snprintf(cmd, sizeof cmd, "%s tokenize --corpus %s -m %s %s/f1.c %s/f2.c >/dev/null", bs_cli_path(), path, tok, dir, dir);
    CHECK(system(cmd) == 0, "tokenize --corpus");
    char fixture_cfg[600]; snprintf(fixture_cfg, sizeof fixture_cfg, "%s/target/config.json", bs_fixtures_dir());
    // A corrupt corpus (bad magic), through both commands.
    snprintf(bad, sizeof bad, "%s/bad.bsc", dir);
    snprintf(cmd, sizeof cmd, "cp %s %s && printf XXXXXXXX | dd of=%s conv=notrunc 2>/dev/null", path, bad, bad);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "%s train-target --config %s --tokenizer %s --data %s --out %s/o", bs_cli_path(), fixture_cfg, tok, bad, dir);
    int st = bs_test_run(cmd, 1, out, sizeof out);
    CHECK(st == 1 && strstr(out, "bad magic") && strstr(out, "bad.bsc"), "exit %d: %s", st, out);
    snprintf(cmd, sizeof cmd, "%s train-drafter -m %s/target --arch dspark --data %s/c.bsc --heldout %s --out %s/o", bs_cli_path(), bs_fixtures_dir(), dir, bad, dir);
    st = bs_test_run(cmd, 1, out, sizeof out);
    CHECK(st == 1 && strstr(out, "bad magic"), "exit %d: %s", st, out);
    // A truncated one.
    snprintf(cmd, sizeof cmd, "head -c 300 %s > %s", path, bad);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "%s train-target --config %s --tokenizer %s --data %s --out %s/o", bs_cli_path(), fixture_cfg, tok, bad, dir);
    st = bs_test_run(cmd, 1, out, sizeof out);
    CHECK(st == 1 && strstr(out, "truncated"), "exit %d: %s", st, out);
    // Made with another tokenizer.
    snprintf(cmd, sizeof cmd, "%s train-target --config %s --tokenizer %s --data %s --out %s/o", bs_cli_path(), fixture_cfg, tok2, path, dir);
    st = bs_test_run(cmd, 1, out, sizeof out);
    CHECK(st == 1 && strstr(out, "made with another tokenizer") && strstr(out, "other.json"), "exit %d: %s", st, out);
    // A vocabulary larger than the model's (the fixture target has 384 rows).
    bs_err err;
    bs_corpus_writer *w;
    int32_t ids[3] = { 1, 999, 2 };
    snprintf(bad, sizeof bad, "%s/big.bsc", dir);
    CHECK(bs_corpus_writer_open(&w, bad, 1000, 1, 0, &err) == 0 && bs_corpus_writer_add(w, ids, NULL, 3, &err) == 0 && bs_corpus_writer_finish(w, &err) == 0, "%s", err.msg);
    snprintf(cmd, sizeof cmd, "%s train-drafter -m %s/target --arch dflash --data %s --out %s/o", bs_cli_path(), bs_fixtures_dir(), bad, dir);
    st = bs_test_run(cmd, 1, out, sizeof out);
    CHECK(st == 1 && strstr(out, "vocab_size is 384"), "exit %d: %s", st, out);
    // Usage errors: exit 2.
    snprintf(cmd, sizeof cmd, "%s train-drafter -m %s/target --arch eagle --data %s --out %s/o", bs_cli_path(), bs_fixtures_dir(), path, dir);
    st = bs_test_run(cmd, 1, out, sizeof out);
    CHECK(st == 2 && strstr(out, "--arch is dspark, dflash, zlab-dflash or dflash2"), "exit %d: %s", st, out);
    snprintf(cmd, sizeof cmd, "%s train-target --config %s --tokenizer %s --data %s --out %s/o --lr abc", bs_cli_path(), fixture_cfg, tok, path, dir);
    st = bs_test_run(cmd, 1, out, sizeof out);
    CHECK(st == 2 && strstr(out, "--lr"), "exit %d: %s", st, out);
}
