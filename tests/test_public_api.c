// The public API (include/blockspec.h) as an embedder uses it: plain and speculative generation
// agree, errors come back as messages, text round-trips through a tokenizer (public_api_text_round_trip).
#include <pthread.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "blockspec.h"

static int count_tokens(void *ctx, int32_t t) { (*(int *)ctx)++; return 0; }

TEST(public_api_generate) {
    char t[1024], d[1024], err[512];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(d, sizeof d, "%s/dspark", bs_fixtures_dir());
    blockspec *bs;
    CHECK(blockspec_open(&bs, t, d, "cpu", err, sizeof err) == 0, "%s", err);
    int32_t prompt[] = { 3, 14, 15, 92, 65, 35 }, a[40], b[40];
    size_t na, nb; int seen = 0;
    blockspec_params p = blockspec_default_params();
    p.n_new = 40;
    blockspec_stats st;
    CHECK(blockspec_generate(bs, prompt, 6, &p, a, 40, &na, count_tokens, &seen, &st, err, sizeof err) == 0, "%s", err);
    CHECK(na == 40 && seen == 40 && st.rounds > 0 && st.tau >= 1.0);
    p.use_drafter = 0;
    CHECK(blockspec_generate(bs, prompt, 6, &p, b, 40, &nb, NULL, NULL, &st, err, sizeof err) == 0, "%s", err);
    CHECK(nb == 40 && st.rounds == 0);
    CHECK(memcmp(a, b, sizeof a) == 0, "speculative and plain greedy output differ");
    // The handle's drafter is reused: a second request on another prompt must start from a clean context.
    int32_t prompt2[] = { 7, 7, 300, 12 };
    p.use_drafter = 1;
    CHECK(blockspec_generate(bs, prompt2, 4, &p, a, 40, &na, NULL, NULL, &st, err, sizeof err) == 0, "%s", err);
    p.use_drafter = 0;
    CHECK(blockspec_generate(bs, prompt2, 4, &p, b, 40, &nb, NULL, NULL, &st, err, sizeof err) == 0, "%s", err);
    CHECK(na == nb && memcmp(a, b, sizeof(int32_t) * na) == 0, "second speculative request differs from plain");
    int32_t bad[] = { 1, 999 };
    CHECK(blockspec_generate(bs, bad, 2, &p, b, 40, &nb, NULL, NULL, NULL, err, sizeof err) != 0 && strstr(err, "outside the vocabulary"), "%s", err);
    int32_t *ids; size_t n;
    CHECK(blockspec_tokenize(bs, "hi", &ids, &n, err, sizeof err) != 0 && strstr(err, "tokenizer.json"), "%s", err);
    blockspec_close(bs);
    CHECK(blockspec_open(&bs, t, "/nonexistent/drafter", "cpu", err, sizeof err) != 0 && strstr(err, "/nonexistent/drafter"), "%s", err);
}

// blockspec_open_ex with a draft vocabulary: the output is still the target's; bad options are messages.
TEST(public_api_open_ex_draft_vocab) {
    char t[1024], d[1024], vp[1100], err[512];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(d, sizeof d, "%s/dflash", bs_fixtures_dir());
    const char *dir = bs_test_tmpdir("apivocab");
    CHECK(dir);
    snprintf(vp, sizeof vp, "%s/v.json", dir);
    FILE *f = fopen(vp, "w");
    CHECK(f);
    for (int i = 0; i < 384; i += 2) fprintf(f, i ? ",%d" : "[%d", i);
    fputs("]", f);
    fclose(f);
    blockspec_open_options o = { .draft_vocab = vp };
    blockspec *bs;
    CHECK(blockspec_open_ex(&bs, t, d, "cpu", &o, err, sizeof err) == 0, "%s", err);
    int32_t prompt[] = { 3, 14, 15, 92, 65, 35 }, a[40], b[40];
    size_t na, nb;
    blockspec_params p = blockspec_default_params();
    p.n_new = 40; p.stop_at_eos = 0;
    blockspec_stats st;
    CHECK(blockspec_generate(bs, prompt, 6, &p, a, 40, &na, NULL, NULL, &st, err, sizeof err) == 0, "%s", err);
    CHECK(st.rounds > 0);
    p.use_drafter = 0;
    CHECK(blockspec_generate(bs, prompt, 6, &p, b, 40, &nb, NULL, NULL, &st, err, sizeof err) == 0, "%s", err);
    CHECK(na == 40 && nb == 40 && !memcmp(a, b, sizeof a), "speculative output with a draft vocabulary differs from plain");
    blockspec_close(bs);
    CHECK(blockspec_open_ex(&bs, t, NULL, "cpu", &o, err, sizeof err) != 0 && strstr(err, "needs a drafter"), "%s", err);
    o.draft_vocab = "/nonexistent/v.json";
    CHECK(blockspec_open_ex(&bs, t, d, "cpu", &o, err, sizeof err) != 0 && strstr(err, "/nonexistent/v.json"), "%s", err);
}

// Text through the API, as the header promises: a model folder with a tokenizer (the fixture target with a
// tokenizer trained here, 384 tokens as the target's vocabulary): tokenize -> detokenize gives the text
// back; blockspec_generate_text streams exactly the detokenization of blockspec_generate's ids for the
// same request (greedy, with and without the drafter); the finish reason is reported; n_new -1 fills the
// context and says "context"; a request past the context is refused with or without the drafter.
#include "test_util_models.h"
#include "train/bpe_train.h"
typedef struct { char buf[8192]; size_t n; int calls; } text_sink;
static int sink_text(void *ctx, const char *s, size_t n) {
    text_sink *k = ctx;
    if (k->n + n < sizeof k->buf) { memcpy(k->buf + k->n, s, n); k->n += n; k->buf[k->n] = 0; }
    k->calls++;
    return 0;
}

TEST(public_api_text_round_trip) {
    const char *dir = bs_test_tmpdir("apitext");
    CHECK(dir);
    char t[1024], d[1024], path[1200], corpus[1200], cmd[4096], err[512];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(d, sizeof d, "%s/dspark", bs_fixtures_dir());
    snprintf(cmd, sizeof cmd, "ln -s \"$(realpath %s/model.safetensors)\" %s/ && cp %s/config.json %s/", t, dir, t, dir);
    CHECK(system(cmd) == 0);
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    FILE *f = fopen(corpus, "w");
    CHECK(f);
    for (int i = 0; i < 300; i++) fprintf(f, "the cat sat on the mat %d times; hello world, the answer is %d.\n", i * 31 % 97, i);
    fclose(f);
    const char *files[1] = { corpus }, *special[1] = { "<|endoftext|>" };
    bs_bpe_train_opts o = { .vocab_size = 384, .special = special, .n_special = 1 };
    bs_err e;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    CHECK(bs_bpe_train_files(files, 1, &o, path, &e) == 0, "%s", e.msg);
    blockspec *bs;
    CHECK(blockspec_open(&bs, dir, d, "cpu", err, sizeof err) == 0, "%s", err);
    const char *texts[] = { "the cat sat on the mat", "hello world, 42 ünïcödé ✓ <|endoftext|> tail", "" };
    for (int i = 0; i < 3; i++) {
        int32_t *ids = NULL; size_t n = 0; char *back = NULL;
        CHECK(blockspec_tokenize(bs, texts[i], &ids, &n, err, sizeof err) == 0, "%s", err);
        CHECK(blockspec_detokenize(bs, ids, n, &back, err, sizeof err) == 0, "%s", err);
        // detokenize skips special tokens: the <|endoftext|> written in the text is one id, left out.
        const char *want = i == 1 ? "hello world, 42 ünïcödé ✓  tail" : texts[i];
        CHECK(!strcmp(back, want), "round trip of \"%s\" gave \"%s\"", texts[i], back);
        if (i == 0) CHECK(n > 0 && n < strlen(texts[i]), "no merges used (%zu ids)", n);
        free(ids); free(back);
    }
    blockspec_params p = blockspec_default_params();
    p.n_new = 24; p.stop_at_eos = 0;
    for (int use = 0; use < 2; use++) {
        p.use_drafter = use;
        int32_t out[24]; size_t n_out; blockspec_stats st;
        int32_t *pids; size_t np;
        CHECK(blockspec_tokenize(bs, "the cat sat", &pids, &np, err, sizeof err) == 0, "%s", err);
        CHECK(blockspec_generate(bs, pids, np, &p, out, 24, &n_out, NULL, NULL, &st, err, sizeof err) == 0, "%s", err);
        free(pids);
        CHECK(n_out == 24 && st.finish_reason && !strcmp(st.finish_reason, "length"), "%zu tokens, finish %s", n_out, st.finish_reason);
        char *want;
        CHECK(blockspec_detokenize(bs, out, n_out, &want, err, sizeof err) == 0, "%s", err);
        text_sink k = { .n = 0 };
        CHECK(blockspec_generate_text(bs, "the cat sat", &p, sink_text, &k, &st, err, sizeof err) == 0, "%s", err);
        CHECK(!strcmp(k.buf, want), "%s: streamed \"%s\", detokenized ids \"%s\"", use ? "speculative" : "plain", k.buf, want);
        CHECK(k.calls > 0 && st.n_generated == 24 && !strcmp(st.finish_reason, "length"));
        free(want);
    }
    // n_new -1: as many tokens as fit (n_ctx 20 after a 3-token prompt: 18), reported as "context".
    int32_t prompt[3] = { 5, 6, 7 }, out[64]; size_t n_out; blockspec_stats st;
    p.n_new = -1; p.n_ctx = 20;
    for (int use = 0; use < 2; use++) {
        p.use_drafter = use;
        CHECK(blockspec_generate(bs, prompt, 3, &p, out, 64, &n_out, NULL, NULL, &st, err, sizeof err) == 0, "%s", err);
        CHECK(n_out == 18 && !strcmp(st.finish_reason, "context"), "%s: %zu tokens, finish %s", use ? "speculative" : "plain", n_out, st.finish_reason);
        CHECK(blockspec_generate(bs, prompt, 3, &p, out, 10, &n_out, NULL, NULL, &st, err, sizeof err) != 0 && strstr(err, "cap"),
              "n_new -1 with too small a buffer: %s", err);
    }
    // Past the context: refused with the same message with or without the drafter.
    char e2[512];
    p.n_new = 30; p.use_drafter = 0;
    CHECK(blockspec_generate(bs, prompt, 3, &p, out, 64, &n_out, NULL, NULL, NULL, err, sizeof err) != 0, "plain ran past the context");
    p.use_drafter = 1;
    CHECK(blockspec_generate(bs, prompt, 3, &p, out, 64, &n_out, NULL, NULL, NULL, e2, sizeof e2) != 0 && !strcmp(err, e2),
          "refusals differ: \"%s\" vs \"%s\"", err, e2);
    blockspec_close(bs);
}

// Many requests through blockspec_submit / blockspec_step: each gets exactly blockspec_generate's tokens;
// a cancelled one stops with "cancelled"; a request that cannot fit is refused at submit.
TEST(public_api_submit_step_cancel) {
    char t[1024], d[1024], err[512];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(d, sizeof d, "%s/dspark", bs_fixtures_dir());
    blockspec *bs;
    CHECK(blockspec_open(&bs, t, d, "cpu", err, sizeof err) == 0, "%s", err);
    int32_t prompts[4][6] = { { 3, 14, 15, 92, 65, 35 }, { 7, 7, 300, 12 }, { 1, 2 }, { 50, 60, 70, 80, 90 } };
    size_t lens[4] = { 6, 4, 2, 5 };
    blockspec_params p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = blockspec_default_params();
        p[i].n_new = 20 + 5 * i;
        p[i].use_drafter = i != 2;
        if (i % 2) { p[i].temperature = 0.9f; p[i].seed = 100 + i; }
    }
    blockspec_request *r[4];
    for (int i = 0; i < 4; i++) CHECK(blockspec_submit(bs, prompts[i], lens[i], &p[i], NULL, NULL, &r[i], err, sizeof err) == 0, "%s", err);
    CHECK(blockspec_step(bs, err, sizeof err) == 4, "%s", err);
    blockspec_cancel(bs, r[3]);
    int left;
    while ((left = blockspec_step(bs, err, sizeof err)) > 0) {}
    CHECK(left == 0, "%s", err);
    for (int i = 0; i < 4; i++) {
        size_t n, m;
        const int32_t *got = blockspec_request_tokens(r[i], &n);
        blockspec_stats st;
        blockspec_request_stats(r[i], &st);
        CHECK(blockspec_request_done(r[i]));
        int32_t alone[64];
        CHECK(blockspec_generate(bs, prompts[i], lens[i], &p[i], alone, 64, &m, NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
        if (i == 3) { CHECK(!strcmp(st.finish_reason, "cancelled") && n < m && !memcmp(got, alone, sizeof(int32_t) * n), "request 3: %s, %zu of %zu", st.finish_reason, n, m); continue; }
        CHECK(n == m && !memcmp(got, alone, sizeof(int32_t) * n), "request %d: %zu tokens in the batch, %zu alone, or they differ", i, n, m);
        CHECK(!strcmp(st.finish_reason, "length") && (size_t)st.n_generated == n, "request %d: %s", i, st.finish_reason);
    }
    for (int i = 0; i < 4; i++) blockspec_request_free(bs, r[i]);
    blockspec_params big = blockspec_default_params();
    big.n_new = 100; big.n_ctx = 16;
    blockspec_request *x;
    CHECK(blockspec_submit(bs, prompts[0], 6, &big, NULL, NULL, &x, err, sizeof err) != 0 && strstr(err, "exceed the context length") && !x, "%s", err);
    blockspec_close(bs);
}

// Threads sharing a handle: two threads submit 8 requests each while a third steps, and a token callback
// cancels another request and submits a new one from inside blockspec_step. Every request that was not
// cancelled gets exactly its blockspec_generate tokens; the cancelled one stops with "cancelled". (The
// in-step cancel first removed the sequence from the array the step was walking, and another request's
// sampled tokens changed: cancels and joins from callbacks now take effect at the step's end.) (Under `make asan` any race
// that corrupts memory shows up too.)
typedef struct api_thread_ctx {
    blockspec *bs;
    int first;                      // request index of this thread's first submission
    blockspec_request **r;
    int32_t (*prompts)[4];
    blockspec_params *p;
    int rc;
} api_thread_ctx;

static void *api_submitter(void *arg) {
    api_thread_ctx *c = arg;
    char err[512];
    for (int i = c->first; i < 8 + c->first - (c->first == 1); i++)
        if (blockspec_submit(c->bs, c->prompts[i], 4, &c->p[i], NULL, NULL, &c->r[i], err, sizeof err)) { fprintf(stderr, "  submit %d: %s\n", i, err); c->rc = -1; return NULL; }
    return NULL;
}

typedef struct cancel_cb { blockspec *bs; blockspec_request **victim, **spawned; const int32_t *spawn_prompt; const blockspec_params *spawn_p; int n, rc; } cancel_cb;
static int cancel_other(void *ctx, int32_t t) {
    cancel_cb *c = ctx;
    char err[256];
    if (++c->n == 3 && *c->victim) blockspec_cancel(c->bs, *c->victim);   // re-enters the handle's lock mid-step
    if (c->n == 5) c->rc = blockspec_submit(c->bs, c->spawn_prompt, 4, c->spawn_p, NULL, NULL, c->spawned, err, sizeof err);   // joins after this step
    return 0;
}

TEST(public_api_threads_share_a_handle) {
    char t[1024], d[1024], err[512];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(d, sizeof d, "%s/dspark", bs_fixtures_dir());
    blockspec *bs;
    CHECK(blockspec_open(&bs, t, d, "cpu", err, sizeof err) == 0, "%s", err);
    enum { N = 16 };
    int32_t prompts[N + 2][4];
    blockspec_params p[N + 2];
    blockspec_request *r[N + 2] = { 0 };
    for (int i = 0; i <= N + 1; i++) {
        for (int k = 0; k < 4; k++) prompts[i][k] = (int32_t)(1 + (i * 37 + k * 11) % 300);
        p[i] = blockspec_default_params();
        p[i].n_new = 12 + i;
        if (i % 3 == 1) { p[i].temperature = 0.8f; p[i].seed = 7 + (uint64_t)i; }
    }
    // Request 0 (long) is submitted first; request N cancels it at N's third token, from inside a step.
    p[0].n_new = 200;
    cancel_cb cc = { bs, &r[0], &r[N + 1], prompts[N + 1], &p[N + 1], 0, 0 };
    CHECK(blockspec_submit(bs, prompts[0], 4, &p[0], NULL, NULL, &r[0], err, sizeof err) == 0, "%s", err);
    CHECK(blockspec_submit(bs, prompts[N], 4, &p[N], cancel_other, &cc, &r[N], err, sizeof err) == 0, "%s", err);
    api_thread_ctx a = { bs, 1, r, prompts, p, 0 }, b = { bs, 8, r, prompts, p, 0 };
    pthread_t ta, tb;
    CHECK(pthread_create(&ta, NULL, api_submitter, &a) == 0 && pthread_create(&tb, NULL, api_submitter, &b) == 0);
    int left = 0;
    for (int steps = 0; steps < 50 && left >= 0; steps++) left = blockspec_step(bs, err, sizeof err);   // while they submit
    pthread_join(ta, NULL); pthread_join(tb, NULL);
    while (left > 0) left = blockspec_step(bs, err, sizeof err);
    if (left == 0) left = blockspec_step(bs, err, sizeof err);   // requests that joined after the last step
    while (left > 0) left = blockspec_step(bs, err, sizeof err);
    CHECK(a.rc == 0 && b.rc == 0 && cc.rc == 0 && r[N + 1] && left == 0, "submitters %d %d, callback %d, step: %s", a.rc, b.rc, cc.rc, err);
    for (int i = 0; i <= N + 1; i++) {
        size_t n, m;
        const int32_t *got = blockspec_request_tokens(r[i], &n);
        blockspec_stats st;
        blockspec_request_stats(r[i], &st);
        int32_t alone[256];
        CHECK(blockspec_generate(bs, prompts[i], 4, &p[i], alone, 256, &m, NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
        if (i == 0) CHECK(!strcmp(st.finish_reason, "cancelled") && n < m && !memcmp(got, alone, sizeof(int32_t) * n), "request 0: %s, %zu of %zu", st.finish_reason, n, m);
        else CHECK(n == m && !memcmp(got, alone, sizeof(int32_t) * n) && !strcmp(st.finish_reason, "length"), "request %d: %zu tokens shared, %zu alone (%s)", i, n, m, st.finish_reason);
    }
    for (int i = 0; i <= N + 1; i++) blockspec_request_free(bs, r[i]);
    blockspec_close(bs);
}

// 10,000 short requests through one handle, 32 at a time, each freed as it finishes (every 97th cancelled
// at once): nothing accumulates (under `make asan`, LeakSanitizer checks the run) and the last 32 still get
// exactly blockspec_generate's tokens.
static void ten_k_prompt(int i, int32_t *pr) { pr[0] = i % 300 + 1; pr[1] = 7; pr[2] = i % 11 + 2; }

TEST(public_api_ten_thousand_requests) {
    char t[1024], err[512];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    blockspec *bs;
    CHECK(blockspec_open(&bs, t, NULL, "cpu", err, sizeof err) == 0, "%s", err);
    enum { TOTAL = 10000, AT_ONCE = 32 };
    blockspec_request *live[AT_ONCE] = { 0 };
    int idx[AT_ONCE] = { 0 }, submitted = 0, finished = 0, checked = 0;
    int32_t prompt[3];
    blockspec_params p = blockspec_default_params();
    p.n_new = 2;
    while (finished < TOTAL) {
        for (int k = 0; k < AT_ONCE && submitted < TOTAL; k++) {
            if (live[k]) continue;
            ten_k_prompt(submitted, prompt);
            CHECK(blockspec_submit(bs, prompt, 3, &p, NULL, NULL, &live[k], err, sizeof err) == 0, "request %d: %s", submitted, err);
            if (submitted % 97 == 0) blockspec_cancel(bs, live[k]);
            idx[k] = submitted++;
        }
        CHECK(blockspec_step(bs, err, sizeof err) >= 0, "%s", err);
        for (int k = 0; k < AT_ONCE; k++) {
            if (!live[k] || !blockspec_request_done(live[k])) continue;
            if (idx[k] >= TOTAL - AT_ONCE && idx[k] % 97) {
                size_t n, m;
                const int32_t *got = blockspec_request_tokens(live[k], &n);
                int32_t alone[8];
                ten_k_prompt(idx[k], prompt);
                CHECK(blockspec_generate(bs, prompt, 3, &p, alone, 8, &m, NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
                CHECK(n == m && n == 2 && !memcmp(got, alone, sizeof(int32_t) * n), "request %d: %zu tokens, %zu alone, or they differ", idx[k], n, m);
                checked++;
            }
            blockspec_request_free(bs, live[k]);
            live[k] = NULL;
            finished++;
        }
    }
    blockspec_close(bs);
    CHECK(checked >= AT_ONCE - 1, "only %d of the last requests were checked", checked);
    printf("  %d requests, the last %d checked against blockspec_generate\n", TOTAL, checked);
}

// What loading finds suspicious but not fatal comes back through blockspec_warnings, never on stderr from the
// library: a drafter whose config says it was trained for another number of target layers.
TEST(public_api_drafter_warning_returned) {
    const char *dir = bs_test_tmpdir("drafter_warn");
    CHECK(dir);
    char cmd[4096], out[4096], t[1024], d[1100], err[512];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(d, sizeof d, "%s/dspark", dir);
    // A key given twice keeps its last value (as Python's json reads it): the appended one wins.
    snprintf(cmd, sizeof cmd, "cp -r %s/dspark %s && chmod -R u+w %s && sed -i '$ s/}[[:space:]]*$/, \"num_target_layers\": 99}/' %s/config.json",
             bs_fixtures_dir(), dir, d, d);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 0, "%s: %s", cmd, out);
    blockspec *bs;
    CHECK(blockspec_open(&bs, t, d, "cpu", err, sizeof err) == 0, "%s", err);
    const char *w = blockspec_warnings(bs);
    int ok = w && strstr(w, "trained for a 99-layer target");
    blockspec_close(bs);
    CHECK(ok, "no warning about the target's layers: %s", w ? w : "(none)");
}

// Issue 25's additions for the command line: the tokenizer alone agrees with the handle's (add_special and
// skip_special as documented), a folder without tokenizer.json says so through blockspec_tokenizer_error,
// chat rendering by a named template (an unknown name is refused naming the known ones), the drafter's
// block, and a request's timing split and acceptance lengths (one per round, covering its tokens).
TEST(public_api_cli_additions) {
    struct stat sb;
    if (stat("models/blockspec-30m", &sb) || stat("models/blockspec-30m-dspark", &sb)) SKIP("no built-in model in models/");
    char err[512];
    blockspec *bs;
    blockspec_tokenizer *t;
    CHECK(blockspec_open(&bs, "models/blockspec-30m", "models/blockspec-30m-dspark", "cpu", err, sizeof err) == 0, "%s", err);
    CHECK(blockspec_tokenizer_open(&t, "models/blockspec-30m/tokenizer.json", err, sizeof err) == 0, "%s", err);
    CHECK(!blockspec_tokenizer_error(bs) && blockspec_drafter_block(bs) == 4, "tokenizer error %s, block %d", blockspec_tokenizer_error(bs),
          blockspec_drafter_block(bs));
    const char *text = "static int main(void) <|endoftext|>";
    int32_t *a, *b;
    size_t na, nb, len;
    char *back;
    CHECK(blockspec_tokenize(bs, text, &a, &na, err, sizeof err) == 0 && blockspec_tokenizer_encode(t, text, strlen(text), 1, &b, &nb, err, sizeof err) == 0, "%s", err);
    CHECK(na == nb && !memcmp(a, b, na * sizeof *a), "the tokenizer alone gave %zu ids, the handle %zu", nb, na);
    CHECK(blockspec_tokenizer_decode(t, b, nb, 0, &back, &len, err, sizeof err) == 0 && !strcmp(back, text) && len == strlen(text), "%s", back);
    free(back);
    CHECK(blockspec_tokenizer_decode(t, b, nb, 1, &back, &len, err, sizeof err) == 0 && !strcmp(back, "static int main(void) "), "%s", back);
    free(back); free(a); free(b);
    blockspec_tokenizer_close(t);
    CHECK(blockspec_tokenizer_open(&t, "/nonexistent", err, sizeof err) != 0 && !t && strstr(err, "/nonexistent"), "%s", err);
    blockspec_chat_message m[1] = { { "user", "hi" } };
    char *chat = NULL;
    CHECK(blockspec_chat_render_as(bs, "chatml", m, 1, 1, &chat, err, sizeof err) == 0 &&
          !strcmp(chat, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"), "%s", chat ? chat : err);
    free(chat);
    CHECK(blockspec_chat_render_as(bs, "bogus", m, 1, 1, &chat, err, sizeof err) != 0 && !chat && strstr(err, "qwen3, chatml"), "%s", err);
    blockspec_params p = blockspec_default_params();
    p.n_new = 40; p.stop_at_eos = 0; p.draft_max = 4;
    int32_t prompt[2] = { 636, 419 };
    blockspec_request *r;
    CHECK(blockspec_submit(bs, prompt, 2, &p, NULL, NULL, &r, err, sizeof err) == 0, "%s", err);
    while (blockspec_step(bs, err, sizeof err) > 0) {}
    blockspec_stats st;
    blockspec_spec_counts c;
    blockspec_request_stats(r, &st);
    blockspec_request_spec_counts(r, &c);
    int sum = 0;
    for (int i = 0; i < c.n_lengths; i++) sum += c.acceptance_lengths[i];
    // The first token comes from the prefill; the last round may accept past n_new (only what fits is emitted).
    CHECK(c.n_lengths == st.rounds && sum >= st.n_generated - 1 && sum < st.n_generated - 1 + 5, "%d lengths over %d rounds sum to %d (%d tokens)",
          c.n_lengths, st.rounds, sum, st.n_generated);
    CHECK(st.t_target > 0 && st.t_drafter > 0 && st.t_target + st.t_drafter <= st.t_generate, "target %g + drafter %g s of %g", st.t_target,
          st.t_drafter, st.t_generate);
    blockspec_request_free(bs, r);
    blockspec_close(bs);
    // A folder with weights but no tokenizer.json: "" (the fixture target).
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/target", bs_fixtures_dir());
    CHECK(blockspec_open(&bs, dir, NULL, "cpu", err, sizeof err) == 0, "%s", err);
    CHECK(blockspec_tokenizer_error(bs) && !blockspec_tokenizer_error(bs)[0] && blockspec_drafter_block(bs) == 0);
    blockspec_close(bs);
}
