// Failures inside backend ops reach the caller as errors and the process goes on (backend.h: the sticky
// fault that bs_backend_check turns into an error after a forward). Scratch allocation failures are
// injected with the CPU backend's test hook (bs_cpu_test_fail_scratch).
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "blockspec.h"
#include "engine/engine.h"
#include "backend/cpu/cpu.h"

// The k-th scratch request of a target forward fails, for every k the forward makes: the forward returns
// an error naming the op and "out of memory", and the same forward then runs and matches the first run.
TEST(fault_cpu_scratch_fails_forward_not_process) {
    char t[1024];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, t, "cpu", &err) == 0, "%s", err.msg);
    int32_t ids[24];
    for (int i = 0; i < 24; i++) ids[i] = 3 + 7 * i % (e->cfg.vocab_size - 3);
    int V = e->cfg.vocab_size;
    float *want = malloc(sizeof(float) * V), *got = malloc(sizeof(float) * V);
    bs_kv_cache kv;
    CHECK(bs_kv_init(&kv, e->kv_pool, 64, &err) == 0, "%s", err.msg);
    bs_fwd_out fo = { .logits = want };
    CHECK(bs_qwen3_forward(&e->target, &kv, ids, 24, &fo, &err) == 0, "%s", err.msg);
    {   // sanity: the same forward twice gives the same logits
        CHECK(bs_kv_rollback(&kv, 0, &err) == 0, "%s", err.msg);
        bs_fwd_out f2 = { .logits = got };
        CHECK(bs_qwen3_forward(&e->target, &kv, ids, 24, &f2, &err) == 0, "%s", err.msg);
        CHECK(memcmp(want, got, sizeof(float) * V) == 0, "two plain forwards differ");
    }
    int saw_matmul = 0, saw_attention = 0, failures = 0;
    for (int k = 1; k <= 12; k++) {
        CHECK(bs_kv_rollback(&kv, 0, &err) == 0, "%s", err.msg);
        bs_cpu_test_fail_scratch = k;
        bs_err ferr = {0};
        bs_fwd_out trash = { .logits = got };   // garbage when the forward fails
        int rc = bs_qwen3_forward(&e->target, &kv, ids, 24, &trash, &ferr);
        int fired = bs_cpu_test_fail_scratch <= 0;   // pool threads racing past 0 take it below
        bs_cpu_test_fail_scratch = 0;
        if (!fired) { CHECK(rc == 0, "no injected failure, yet: %s", ferr.msg); break; }   // fewer than k requests
        CHECK(rc != 0, "scratch request %d failed but the forward reported success", k);
        CHECK(strstr(ferr.msg, "target forward") && strstr(ferr.msg, "out of memory"), "request %d: %s", k, ferr.msg);
        saw_matmul |= strstr(ferr.msg, "matmul") != NULL;
        saw_attention |= strstr(ferr.msg, "attention") != NULL;
        failures++;
    }
    CHECK(failures >= 3, "only %d scratch requests in a forward", failures);
    CHECK(saw_matmul && saw_attention, "the failures named matmul %d, attention %d", saw_matmul, saw_attention);
    // The fault was reported once and cleared: the same forward now runs, with the same logits.
    CHECK(bs_kv_rollback(&kv, 0, &err) == 0, "%s", err.msg);
    memset(got, 0, sizeof(float) * V);
    fo.logits = got;
    CHECK(bs_qwen3_forward(&e->target, &kv, ids, 24, &fo, &err) == 0, "after the faults: %s", err.msg);
    CHECK(memcmp(want, got, sizeof(float) * V) == 0, "logits after the faults differ from before");
    bs_kv_free(&kv);
    free(want); free(got);
    bs_engine_close(e);
}

// Through the public API: a speculative request whose forward cannot get scratch fails with the message in
// err; the handle then serves the next request normally.
TEST(fault_public_api_generate_reports_scratch_failure) {
    char t[1024], d[1024], err[512];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(d, sizeof d, "%s/dspark", bs_fixtures_dir());
    blockspec *bs;
    CHECK(blockspec_open(&bs, t, d, "cpu", err, sizeof err) == 0, "%s", err);
    int32_t prompt[] = { 3, 14, 15, 92, 65, 35 }, a[24], b[24];
    size_t na, nb;
    blockspec_params p = blockspec_default_params();
    p.n_new = 24;
    CHECK(blockspec_generate(bs, prompt, 6, &p, a, 24, &na, NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
    for (int k = 1; k <= 40; k += 13) {   // early (the prompt's forward) to later (drafter passes, rounds)
        bs_cpu_test_fail_scratch = k;
        err[0] = 0;
        int rc = blockspec_generate(bs, prompt, 6, &p, b, 24, &nb, NULL, NULL, NULL, err, sizeof err);
        int fired = bs_cpu_test_fail_scratch <= 0;   // pool threads racing past 0 take it below
        bs_cpu_test_fail_scratch = 0;
        CHECK(fired, "request %d: the generation made fewer scratch requests", k);
        CHECK(rc != 0 && strstr(err, "out of memory"), "request %d: rc %d, err '%s'", k, rc, err);
    }
    CHECK(blockspec_generate(bs, prompt, 6, &p, b, 24, &nb, NULL, NULL, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(na == nb && !memcmp(a, b, sizeof(int32_t) * na), "the request after the faults differs");
    blockspec_close(bs);
}

// A fault while a forward is being recorded (CUDA graphs) leaves the recording incomplete: it must be freed,
// never replayed, and the forward must fail. A CPU backend with stand-in record / replay functions (ops
// run at once; the "recording" is a token) and a scratch failure injected while recording.
static int rec_begun, rec_replayed, rec_freed;
static char rec_token;
static int fake_record_begin(bs_backend *be, int pos_base) { rec_begun++; return 0; }
static void *fake_record_end(bs_backend *be, bs_err *err) { return &rec_token; }
static void fake_replay(bs_backend *be, void *rec, int pos_base, const int32_t *ids, int n_ids) { rec_replayed++; }
static void fake_record_free(bs_backend *be, void *rec) { if (rec == &rec_token) rec_freed++; }

TEST(fault_while_recording_drops_the_recording) {
    char t[1024];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, t, "cpu", &err) == 0, "%s", err.msg);
    e->target.use_graphs = 1;
    e->be->record_begin = fake_record_begin; e->be->record_end = fake_record_end;
    e->be->replay = fake_replay; e->be->record_free = fake_record_free;
    rec_begun = rec_replayed = rec_freed = 0;
    int V = e->cfg.vocab_size;
    float *lg = malloc(sizeof(float) * V);
    bs_kv_cache kv;
    CHECK(bs_kv_init(&kv, e->kv_pool, 64, &err) == 0, "%s", err.msg);
    bs_fwd_out fo = { .logits = lg };
    int32_t id = 5;
    CHECK(bs_qwen3_forward(&e->target, &kv, &id, 1, &fo, &err) == 0, "%s", err.msg);   // first of its shape: plain
    CHECK(rec_begun == 0, "the first forward of a shape was recorded");
    bs_cpu_test_fail_scratch = 1;   // the second is recorded, and an op fails while it is
    bs_err ferr = {0};
    int rc = bs_qwen3_forward(&e->target, &kv, &id, 1, &fo, &ferr);
    bs_cpu_test_fail_scratch = 0;
    CHECK(rec_begun == 1, "the second forward was not recorded (%d)", rec_begun);
    CHECK(rc != 0 && strstr(ferr.msg, "recording") && strstr(ferr.msg, "out of memory"), "rc %d: %s", rc, ferr.msg);
    CHECK(rec_freed == 1 && rec_replayed == 0, "the faulted recording was freed %d times, replayed %d times", rec_freed, rec_replayed);
    CHECK(kv.n_past == 1, "the failed forward left %d rows in the cache (1 before it)", kv.n_past);
    // The next forward records afresh (no fault) and replays that recording.
    CHECK(bs_qwen3_forward(&e->target, &kv, &id, 1, &fo, &err) == 0, "%s", err.msg);
    CHECK(rec_begun == 2 && rec_replayed == 1, "recorded %d times, replayed %d", rec_begun, rec_replayed);
    // (the stand-in recording is a token: the engine's kv recordings must not reach the real backend's free)
    bs_kv_free(&kv);
    free(lg);
    bs_engine_close(e);
}
