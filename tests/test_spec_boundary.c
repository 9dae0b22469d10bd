// The end of the context: speculative decoding refuses exactly the requests plain decoding refuses (same
// message) and runs the others to the same length with the same finish reason (issue 29, item 3: with a
// drafter, `-c 12 -n 100` used to return 10 tokens with exit 0). Every case sits at the boundary:
// max_ctx = prompt + n - 2 (one row short: refused), prompt + n - 1 (the exact fill: the last token is
// emitted, never fed), prompt + n and prompt + n + 1 (spare rows), for greedy and sampled decoding, both
// fixture drafters and draft lengths 1, 3 and the drafter's block, so that a round's drafts are clipped by
// the room left (the off-by-one there shows as a failed or shorter speculative run). CUDA: the same cases
// on the GPU (SKIPPED with the reason where none is usable).
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "test_util_models.h"
#include "spec/spec_loop.h"

typedef struct boundary_counts { int cases, refused, exact_fill; } boundary_counts;

// One request (P, N, ctx) on both paths; fails the test on any difference.
// The drafter is opened once per grid with room to spare: the KV cache's max_ctx is the limit under test.
static void boundary_case(int *failed_, bs_engine *e, bs_drafter *d, const char *drafter, const bs_sampling *smp, int draft_max,
                          const int32_t *prompt, int P, int N, int ctx, boundary_counts *bc) {
    bs_err ep = {0}, es = {0};
    int32_t plain[64], spec[64];
    int np = -1, ns = -1;
    bs_session s;
    CHECK(bs_session_init(&s, e, ctx, smp, &ep) == 0, "%s", ep.msg);
    CHECK(s.kv.max_ctx == ctx, "session context %d, asked for %d", s.kv.max_ctx, ctx);
    int rp = bs_generate_plain(&s, prompt, P, N, 0, plain, &np, NULL, NULL, &ep);
    bs_finish fp = s.stats.finish;
    bs_session_free(&s);
    CHECK(bs_session_init(&s, e, ctx, smp, &es) == 0, "%s", es.msg);
    bs_spec_opts o = { .draft_max = draft_max, .stop_at_eos = 0 };
    bs_spec_stats st;
    int rs = bs_generate_spec(&s, d, prompt, P, N, &o, spec, &ns, NULL, NULL, &st, &es);
    bs_finish fs = st.finish;
    bs_spec_stats_free(&st);
    bs_session_free(&s);
    const char *what = bs_sampling_greedy(smp) ? "greedy" : "sampled";
    CHECK(rp == rs, "%s %s P %d N %d ctx %d draft_max %d: plain %s (%s) but speculative %s (%s, %d tokens)", drafter, what, P, N, ctx,
          draft_max, rp ? "refused" : "ran", ep.msg, rs ? "refused" : "ran", es.msg, ns);
    bc->cases++;
    if (rp) {
        CHECK(!strcmp(ep.msg, es.msg) && strstr(ep.msg, "context length"), "different refusals: plain \"%s\", speculative \"%s\"", ep.msg, es.msg);
        CHECK(P + N - 1 > ctx, "P %d N %d ctx %d fits but was refused: %s", P, N, ctx, ep.msg);
        bc->refused++;
        return;
    }
    bc->exact_fill += P + N - 1 == ctx;
    CHECK(np == N && ns == N, "%s %s P %d N %d ctx %d draft_max %d: plain gave %d tokens, speculative %d", drafter, what, P, N, ctx, draft_max, np, ns);
    CHECK(fp == BS_FINISH_LENGTH && fs == BS_FINISH_LENGTH, "finish reasons: plain %s, speculative %s", bs_finish_name(fp), bs_finish_name(fs));
    if (bs_sampling_greedy(smp))
        for (int i = 0; i < N; i++) CHECK(plain[i] == spec[i], "%s P %d N %d ctx %d draft_max %d: token %d differs (plain %d, speculative %d)",
                                          drafter, P, N, ctx, draft_max, i, plain[i], spec[i]);
    else   // sampled paths draw differently; the tokens must still be the vocabulary's
        for (int i = 0; i < N; i++) CHECK(spec[i] >= 0 && spec[i] < e->cfg.vocab_size, "token %d = %d", i, spec[i]);
}

static void boundary_grid(int *failed_, const char *device) {
    char t[1024], dz[1024], dd[1024];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(dz, sizeof dz, "%s/dflash", bs_fixtures_dir());
    snprintf(dd, sizeof dd, "%s/dspark", bs_fixtures_dir());
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, t, device, &err) == 0, "%s", err.msg);
    const char *drafters[] = { dz, dd };
    const bs_sampling smps[] = { { 0 }, { 0.8f, 20, 0.9f, 7 } };
    const int prompts[] = { 1, 9 }, news[] = { 1, 5, 13 }, dms[] = { 1, 3, 0 };
    int32_t prompt[16];
    for (int i = 0; i < 16; i++) prompt[i] = (int32_t)((i * 53 + 11) % e->cfg.vocab_size);
    boundary_counts bc = { 0 };
    for (int di = 0; di < 2; di++) {
        bs_drafter *d = NULL;
        CHECK(bs_drafter_open_opts(&d, drafters[di], e, 64, NULL, &err) == 0, "%s", err.msg);
        for (int si = 0; si < 2; si++)
            for (int pi = 0; pi < 2; pi++)
                for (int ni = 0; ni < 3; ni++)
                    for (int k = 0; k < 3; k++)
                        for (int extra = -1; extra <= 2; extra++) {
                            int P = prompts[pi], N = news[ni], ctx = P + N - 1 + extra;
                            if (ctx < 1) continue;
                            boundary_case(failed_, e, d, drafters[di], &smps[si], dms[k], prompt, P, N, ctx, &bc);
                            if (*failed_) { d->free(d); bs_engine_close(e); return; }
                        }
        d->free(d);
    }
    printf("  %s: %d boundary cases, %d refused by both, %d at the exact fill\n", device, bc.cases, bc.refused, bc.exact_fill);
    CHECK(bc.refused >= 40 && bc.exact_fill >= 40, "the grid missed the boundary");
    bs_engine_close(e);
}

TEST(spec_context_boundary_same_as_plain) { boundary_grid(failed_, "cpu"); }

TEST(spec_context_boundary_same_as_plain_cuda) {
    NEED_CUDA_DEVICE();
    boundary_grid(failed_, "cuda");
}

// n_new < 0 (as many as fit): both paths stop with the context full, after as many tokens, reporting
// "context"; greedy outputs are equal. A callback that asks to stop is "stop", an EOS "eos".
TEST(spec_finish_reasons_same_as_plain) {
    char t[1024], dd[1024];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(dd, sizeof dd, "%s/dspark", bs_fixtures_dir());
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, t, "cpu", &err) == 0, "%s", err.msg);
    int32_t prompt[5] = { 3, 1, 4, 1, 5 }, plain[64], spec[64];
    for (int ctx = 5; ctx <= 40; ctx += 7) {
        bs_session s; bs_drafter *d = NULL; bs_spec_stats st;
        int np, ns;
        CHECK(bs_session_init(&s, e, ctx, NULL, &err) == 0, "%s", err.msg);
        CHECK(bs_generate_plain(&s, prompt, 5, -1, 0, plain, &np, NULL, NULL, &err) == 0, "%s", err.msg);
        bs_finish fp = s.stats.finish;
        bs_kv_rollback(&s.kv, 0, &err);
        CHECK(bs_drafter_open_opts(&d, dd, e, ctx, NULL, &err) == 0, "%s", err.msg);
        bs_spec_opts o = { .draft_max = 4, .stop_at_eos = 0 };
        CHECK(bs_generate_spec(&s, d, prompt, 5, -1, &o, spec, &ns, NULL, NULL, &st, &err) == 0, "%s", err.msg);
        CHECK(np == ctx - 5 + 1 && ns == np, "ctx %d: plain %d tokens, speculative %d, want %d", ctx, np, ns, ctx - 4);
        CHECK(fp == BS_FINISH_CONTEXT && st.finish == BS_FINISH_CONTEXT, "finish: plain %s, speculative %s", bs_finish_name(fp), bs_finish_name(st.finish));
        CHECK(!memcmp(plain, spec, sizeof(int32_t) * np), "ctx %d: outputs differ", ctx);
        bs_spec_stats_free(&st);
        d->free(d);
        bs_session_free(&s);
    }
    // A prompt that fills the context on its own: no token fits, both refuse alike.
    bs_session s; bs_drafter *d = NULL; bs_spec_stats st;
    int np, ns;
    bs_err e2 = {0};
    CHECK(bs_session_init(&s, e, 4, NULL, &err) == 0, "%s", err.msg);
    CHECK(bs_drafter_open_opts(&d, dd, e, 4, NULL, &err) == 0, "%s", err.msg);
    CHECK(bs_generate_plain(&s, prompt, 5, -1, 0, plain, &np, NULL, NULL, &err) != 0, "plain ran a prompt longer than the context");
    CHECK(bs_generate_spec(&s, d, prompt, 5, -1, NULL, spec, &ns, NULL, NULL, &st, &e2) != 0 && !strcmp(err.msg, e2.msg),
          "refusals differ: \"%s\" vs \"%s\"", err.msg, e2.msg);
    d->free(d);
    bs_session_free(&s);
    // EOS: the third greedy token made an end-of-sequence token.
    CHECK(bs_session_init(&s, e, 64, NULL, &err) == 0, "%s", err.msg);
    CHECK(bs_generate_plain(&s, prompt, 5, 10, 0, plain, &np, NULL, NULL, &err) == 0, "%s", err.msg);
    int32_t eos = plain[2];
    int first = 0;
    while (plain[first] != eos) first++;
    const int n_eos_saved = e->cfg.n_eos; int32_t eos_saved = e->cfg.eos_ids[0];
    e->cfg.n_eos = 1; e->cfg.eos_ids[0] = eos;
    bs_kv_rollback(&s.kv, 0, &err);
    CHECK(bs_generate_plain(&s, prompt, 5, 10, 1, plain, &np, NULL, NULL, &err) == 0, "%s", err.msg);
    bs_finish fp = s.stats.finish;
    bs_kv_rollback(&s.kv, 0, &err);
    CHECK(bs_drafter_open_opts(&d, dd, e, 64, NULL, &err) == 0, "%s", err.msg);
    bs_spec_opts o = { .draft_max = 4, .stop_at_eos = 1 };
    CHECK(bs_generate_spec(&s, d, prompt, 5, 10, &o, spec, &ns, NULL, NULL, &st, &err) == 0, "%s", err.msg);
    e->cfg.n_eos = n_eos_saved; e->cfg.eos_ids[0] = eos_saved;
    CHECK(np == first + 1 && ns == np && fp == BS_FINISH_EOS && st.finish == BS_FINISH_EOS, "EOS: plain %d tokens (%s), speculative %d (%s)",
          np, bs_finish_name(fp), ns, bs_finish_name(st.finish));
    bs_spec_stats_free(&st);
    d->free(d);
    bs_session_free(&s);
    bs_engine_close(e);
}
