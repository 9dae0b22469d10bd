// The runtime's promise: a request's tokens are the same whatever else is in the batch. Mixed batches
// (prompt lengths, greedy and seeded sampling, drafter on and off, different draft-max, requests joining
// and leaving mid-run, one cancelled, more rows than one forward chunk) give every request exactly the
// tokens it gives alone; alone, greedy speculative output equals plain decoding.
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "harness.h"
#include "test_util_models.h"
#include "runtime/runtime.h"

typedef struct request {
    bs_seq_params p;
    int32_t prompt[64]; int n_prompt;
    int join_step;       // the batch step before which it joins
    int cancel_step;     // > 0: cancelled before this step (the batch run only)
} request;

// Runs reqs through one runtime with the join / cancel schedule and prefill_rows prompt rows per step
// (0: the default); out[i] (cap 128) gets request i's tokens.
static int run_batch(bs_engine *e, bs_drafter *d, request *reqs, int n, int schedule, int prefill_rows, int32_t (*out)[128], int *n_out,
                     bs_err *err) {
    bs_runtime rt;
    bs_seq *seqs = calloc(n, sizeof *seqs);
    int rc = -1, live = 0, plans_checked = 0;
    if (bs_runtime_init(&rt, e, d, err)) { free(seqs); return -1; }
    if (prefill_rows) rt.prefill_rows = prefill_rows;
    for (int step = 0; step < 10000; step++) {
        for (int i = 0; i < n; i++) {
            if ((schedule ? reqs[i].join_step : 0) == step) {
                if (bs_seq_init(&seqs[i], e, d, reqs[i].prompt, reqs[i].n_prompt, &reqs[i].p, err) || bs_runtime_add(&rt, &seqs[i], err)) goto out;
                live++;
            }
            if (schedule && reqs[i].cancel_step > 0 && reqs[i].cancel_step == step && seqs[i].eng) { bs_seq_cancel(&seqs[i]); bs_runtime_remove(&rt, &seqs[i]); }
        }
        // The scheduler's plan of the step's prompt rows (bs_runtime_prompt_rows) must be what the batched
        // forward then takes: the rows it handed out, and the prompt rows that reached the KV caches.
        int plan = bs_runtime_prompt_rows(&rt), running = 0, prefilled0 = 0;
        for (int i = 0; i < rt.n_seqs; i++) { running += !bs_seq_done(rt.seqs[i]); prefilled0 += rt.seqs[i]->n_prefilled; }
        bs_seq **was = malloc(sizeof *was * (rt.n_seqs ? rt.n_seqs : 1));
        int n_was = rt.n_seqs;
        memcpy(was, rt.seqs, sizeof *was * n_was);
        int active = bs_runtime_step(&rt, err);
        int prefilled1 = 0;
        for (int i = 0; i < n_was; i++) prefilled1 += was[i]->n_prefilled;
        free(was);
        if (active < 0) goto out;
        if (running > 1 && (plan != rt.last_prompt_rows || plan != prefilled1 - prefilled0)) {
            bs_fail(err, "step %d: planned %d prompt rows, the forward took %d (%d reached the caches)", step, plan, rt.last_prompt_rows,
                    prefilled1 - prefilled0);
            goto out;
        }
        plans_checked += running > 1 && plan > 0;
        int pending = 0;
        for (int i = 0; i < n; i++) pending += !seqs[i].eng || !bs_seq_done(&seqs[i]);
        if (!pending) break;
    }
    if (n > 1 && !plans_checked) { bs_fail(err, "no batched step prefilled: the prompt-row plan went unchecked"); goto out; }
    for (int i = 0; i < n; i++) { memcpy(out[i], seqs[i].out, sizeof(int32_t) * seqs[i].n_out); n_out[i] = seqs[i].n_out; }
    rc = 0;
out:
    for (int i = 0; i < n; i++) if (seqs[i].eng) bs_seq_free(&seqs[i]);
    bs_runtime_free(&rt);
    free(seqs);
    return rc;
}

// A mixed set of requests over vocabulary V (seeded by `seed`); n_drafter > 0 when a drafter is there.
static void make_requests(request *r, int n, int V, int has_drafter, uint64_t seed) {
    bs_rng g; bs_rng_seed(&g, seed);
    for (int i = 0; i < n; i++) {
        memset(&r[i], 0, sizeof r[i]);
        r[i].n_prompt = 1 + (int)(bs_rng_u64(&g) % (i % 3 == 0 ? 60 : 12));
        for (int k = 0; k < r[i].n_prompt; k++) r[i].prompt[k] = 4 + (int32_t)(bs_rng_u64(&g) % (V - 4));
        bs_seq_params *p = &r[i].p;
        p->n_new = 8 + (int)(bs_rng_u64(&g) % 40);
        p->stop_at_eos = i % 4 == 3;
        p->use_drafter = has_drafter && i % 5 != 4;
        p->draft_max = i % 6 == 0 ? 0 : 1 + i % 7;
        if (i % 3 == 1) p->sampling = (bs_sampling){ .temperature = 0.8f, .top_k = i % 2 ? 0 : 30, .top_p = i % 2 ? 0.9f : 1.0f, .seed = 1000 + i };
        else if (i % 3 == 2) p->sampling = (bs_sampling){ .temperature = 1.0f, .seed = 77 * i };
        r[i].join_step = i < n / 2 ? 0 : (int)(bs_rng_u64(&g) % 12);
        r[i].cancel_step = i == 1 ? 3 : 0;
    }
}

// prefill_rows: the batch run's prompt rows per step (small: prompts prefill in many chunks beside decoding).
static void check_batch_invariance(int *failed_, const char *device, const char *target, const char *drafter, int n, uint64_t seed,
                                   int prefill_rows) {
    bs_engine *e; bs_err err = {0};
    bs_drafter *d = NULL;
    CHECK(bs_engine_open(&e, target, device, &err) == 0, "%s", err.msg);
    if (drafter) CHECK(bs_drafter_open(&d, drafter, e, 0, &err) == 0, "%s", err.msg);
    request *r = calloc(n, sizeof *r);
    int32_t (*alone)[128] = calloc(n, sizeof *alone), (*batch)[128] = calloc(n, sizeof *batch);
    int *n_alone = calloc(n, sizeof(int)), *n_batch = calloc(n, sizeof(int));
    make_requests(r, n, e->cfg.vocab_size, d != NULL, seed);
    for (int i = 0; i < n; i++) CHECK(run_batch(e, d, &r[i], 1, 0, 0, &alone[i], &n_alone[i], &err) == 0, "request %d alone: %s", i, err.msg);
    CHECK(run_batch(e, d, r, n, 1, prefill_rows, batch, n_batch, &err) == 0, "batch: %s", err.msg);
    int accepted_somewhere = 0;
    for (int i = 0; i < n; i++) {
        if (r[i].cancel_step) {
            CHECK(n_batch[i] < n_alone[i], "request %d was cancelled but produced all %d tokens", i, n_batch[i]);
            CHECK(!memcmp(batch[i], alone[i], sizeof(int32_t) * n_batch[i]), "request %d: tokens before the cancel differ from alone", i);
            continue;
        }
        CHECK(n_batch[i] == n_alone[i], "request %d: %d tokens in the batch, %d alone", i, n_batch[i], n_alone[i]);
        for (int k = 0; k < n_alone[i]; k++)
            CHECK(batch[i][k] == alone[i][k], "request %d (temp %g, drafter %d, draft_max %d, prompt %d): token %d differs: batch %d, alone %d",
                  i, r[i].p.sampling.temperature, r[i].p.use_drafter, r[i].p.draft_max, r[i].n_prompt, k, batch[i][k], alone[i][k]);
        accepted_somewhere |= n_alone[i] > 0;
    }
    CHECK(accepted_somewhere);
    // Greedy requests alone: speculative output equals plain decoding.
    for (int i = 0; i < n; i++) {
        if (r[i].p.sampling.temperature > 0 || !r[i].p.use_drafter) continue;
        request plain = r[i];
        plain.p.use_drafter = 0;
        int32_t out[1][128]; int n_plain;
        CHECK(run_batch(e, d, &plain, 1, 0, 0, out, &n_plain, &err) == 0, "%s", err.msg);
        CHECK(n_plain == n_alone[i] && !memcmp(out[0], alone[i], sizeof(int32_t) * n_plain), "request %d: speculative greedy differs from plain", i);
    }
    free(r); free(alone); free(batch); free(n_alone); free(n_batch);
    if (d) d->free(d);
    bs_engine_close(e);
}

TEST(runtime_batch_invariance_fixture_dspark) {
    char t[1024], d[1024];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(d, sizeof d, "%s/dspark", bs_fixtures_dir());
    check_batch_invariance(failed_, "cpu", t, d, 12, 1, 7);
}

TEST(runtime_batch_invariance_fixture_dflash) {
    char t[1024], d[1024];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(d, sizeof d, "%s/dflash", bs_fixtures_dir());
    check_batch_invariance(failed_, "cpu", t, d, 12, 2, 0);
}

TEST(runtime_batch_invariance_random_target_plain) {
    const char *dir = tu_make_target(300, 48, 3, 6, 2, 8, 96, 1, 3, 42);
    CHECK(dir, "could not write a random target");
    check_batch_invariance(failed_, "cpu", dir, NULL, 10, 3, 3);
}

// The built-in model: drafts are really accepted, so rollback happens across many sequences at once; 24
// requests make batches of more rows than one forward chunk (64).
TEST(runtime_batch_invariance_builtin_model) {
    struct stat st;
    if (stat("models/blockspec-30m/config.json", &st) || stat("models/blockspec-30m-dflash/config.json", &st)) SKIP("no built-in model in models/");
    check_batch_invariance(failed_, "cpu", "models/blockspec-30m", "models/blockspec-30m-dflash", 24, 4, 16);
}

// The same promise on the GPU (SKIPPED with the reason where no CUDA backend is usable): fixture DSpark and
// DFlash drafters, a plain random target, the built-in model.
TEST(runtime_batch_invariance_cuda) {
    NEED_CUDA_DEVICE();
    char t[1024], d[1024];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(d, sizeof d, "%s/dspark", bs_fixtures_dir());
    check_batch_invariance(failed_, "cuda", t, d, 12, 1, 7);
    if (*failed_) return;
    snprintf(d, sizeof d, "%s/dflash", bs_fixtures_dir());
    check_batch_invariance(failed_, "cuda", t, d, 12, 2, 0);
    if (*failed_) return;
    const char *dir = tu_make_target(300, 48, 3, 6, 2, 8, 96, 1, 3, 42);
    CHECK(dir, "could not write a random target");
    check_batch_invariance(failed_, "cuda", dir, NULL, 10, 3, 3);
    if (*failed_) return;
    struct stat st;
    if (!stat("models/blockspec-30m/config.json", &st) && !stat("models/blockspec-30m-dflash/config.json", &st))
        check_batch_invariance(failed_, "cuda", "models/blockspec-30m", "models/blockspec-30m-dflash", 32, 4, 16);
}

// DFlash 2 drafters (tests/ref/dflash2: a sliding layer whose window is shorter than most prompts; block
// attention non-causal, then causal): several sequences' blocks through one batched pass (propose_batch) draft
// exactly what each drafts alone, greedy and sampled.
static void dflash2_batch_invariance(int *failed_, const char *device) {
    struct stat st;
    if (stat("tests/ref/dflash2/dflash2_causal/config.json", &st)) SKIP("no DFlash 2 reference drafters in tests/ref/dflash2");
    check_batch_invariance(failed_, device, "tests/ref/dflash2/target", "tests/ref/dflash2/dflash2", 12, 6, 5);
    if (*failed_) return;
    check_batch_invariance(failed_, device, "tests/ref/dflash2/target", "tests/ref/dflash2/dflash2_causal", 9, 7, 0);
}
TEST(runtime_batch_invariance_dflash2) { dflash2_batch_invariance(failed_, "cpu"); }
TEST(runtime_batch_invariance_dflash2_cuda) {
    NEED_CUDA_DEVICE();
    dflash2_batch_invariance(failed_, "cuda");
}

// DeepSpec's Gemma-4 DSpark drafter (tests/ref/gemma4/gemma4_dspark_spec on the vocabulary-8 Gemma-4 target): the
// batched pass (its Gemma-4 layers over several blocks) drafts what each sequence drafts alone.
static void gemma4_dspark_batch_invariance(int *failed_, const char *device) {
    struct stat st;
    if (stat("tests/ref/gemma4/gemma4_dspark_spec/config.json", &st)) SKIP("no Gemma-4 DSpark reference drafter in tests/ref/gemma4");
    check_batch_invariance(failed_, device, "tests/ref/gemma4/gemma4_spec", "tests/ref/gemma4/gemma4_dspark_spec", 10, 9, 5);
}
TEST(runtime_batch_invariance_gemma4_dspark) { gemma4_dspark_batch_invariance(failed_, "cpu"); }
TEST(runtime_batch_invariance_gemma4_dspark_cuda) {
    NEED_CUDA_DEVICE();
    gemma4_dspark_batch_invariance(failed_, "cuda");
}

// The seed's DSpark v1 adapter (tests/ref/dspark_v1, docs/dspark-v1.md): no batched pass, one round per sequence,
// its context vector the last committed row of each (prompts prefilled in chunks of 5 rows beside decoding).
static void dspark_v1_batch_invariance(int *failed_, const char *device) {
    struct stat st;
    if (stat("tests/ref/dspark_v1/adapter/dspark.json", &st)) SKIP("no DSpark v1 reference adapter in tests/ref/dspark_v1");
    check_batch_invariance(failed_, device, "tests/ref/dflash2/target", "tests/ref/dspark_v1/adapter", 12, 8, 5);
}
TEST(runtime_batch_invariance_dspark_v1) { dspark_v1_batch_invariance(failed_, "cpu"); }
TEST(runtime_batch_invariance_dspark_v1_cuda) {
    NEED_CUDA_DEVICE();
    dspark_v1_batch_invariance(failed_, "cuda");
}

// The built-in DSpark drafter (the default) likewise, its prompts prefilled 16 rows per step.
TEST(runtime_batch_invariance_builtin_dspark) {
    struct stat st;
    if (stat("models/blockspec-30m/config.json", &st) || stat("models/blockspec-30m-dspark/config.json", &st)) SKIP("no built-in DSpark drafter in models/");
    check_batch_invariance(failed_, "cpu", "models/blockspec-30m", "models/blockspec-30m-dspark", 16, 5, 16);
}

// Misuse: a sequence joins twice, or joins a runtime of another drafter; a cancelled sequence leaves.
TEST(runtime_misuse) {
    char t[1024], dd[1024];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(dd, sizeof dd, "%s/dflash", bs_fixtures_dir());
    bs_engine *e; bs_err err = {0};
    bs_drafter *d;
    CHECK(bs_engine_open(&e, t, "cpu", &err) == 0 && bs_drafter_open(&d, dd, e, 0, &err) == 0, "%s", err.msg);
    bs_runtime rt, plain_rt;
    CHECK(bs_runtime_init(&rt, e, d, &err) == 0 && bs_runtime_init(&plain_rt, e, NULL, &err) == 0, "%s", err.msg);
    int32_t prompt[] = { 5, 6, 7 };
    bs_seq_params p = { .n_new = 20, .use_drafter = 1 };
    bs_seq s;
    CHECK(bs_seq_init(&s, e, d, prompt, 3, &p, &err) == 0, "%s", err.msg);
    CHECK(bs_runtime_add(&rt, &s, &err) == 0, "%s", err.msg);
    CHECK(bs_runtime_add(&rt, &s, &err) != 0 && strstr(err.msg, "already"), "%s", err.msg);
    CHECK(bs_runtime_add(&plain_rt, &s, &err) != 0 && strstr(err.msg, "drafter"), "%s", err.msg);
    CHECK(bs_runtime_step(&rt, &err) == 1, "%s", err.msg);
    bs_seq_cancel(&s);
    CHECK(bs_runtime_step(&rt, &err) == 0, "a cancelled sequence must leave (%s)", err.msg);
    CHECK(s.st.finish == BS_FINISH_CANCELLED && !strcmp(bs_finish_name(s.st.finish), "cancelled"));
    bs_seq_free(&s);
    // A request that cannot fit is refused at init, with plain decoding's message.
    bs_seq_params big = { .n_new = 100000, .max_ctx = 64 };
    CHECK(bs_seq_init(&s, e, NULL, prompt, 3, &big, &err) != 0 && strstr(err.msg, "exceed the context length"), "%s", err.msg);
    bs_runtime_free(&rt); bs_runtime_free(&plain_rt);
    d->free(d);
    bs_engine_close(e);
}
