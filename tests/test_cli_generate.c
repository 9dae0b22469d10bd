// `blockspec generate` runs one prompt through include/blockspec.h: a submitted request stepped to its end.
// Before issue 25's last layering item it opened the engine, a session and the drafter itself and called
// bs_generate_plain / bs_generate_spec (the engine's single-request path, which blockspec_generate still
// runs). Its output must not have moved: the same ids, finish reason and speculative counters as that path
// gives, greedy and seeded sampling, with and without a drafter, text and id prompts; and a request that
// does not fit -c is refused with that path's message and exit status 1.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "harness.h"
#include "spec/spec_loop.h"

typedef struct engine_run {
    int32_t ids[512]; int n;
    bs_spec_stats st;        // speculative runs
    bs_finish finish;
} engine_run;

// What the engine's single-request path gives (the calls cmd_generate used to make, in its order).
static int run_engine(const char *target, const char *drafter, int draft_max, const bs_sampling *smp, const int32_t *prompt, int n_prompt,
                      int n_new, int ctx, engine_run *r, bs_err *err) {
    bs_engine *e = NULL;
    bs_session s = {0};
    bs_drafter *d = NULL;
    int rc = -1;
    memset(r, 0, sizeof *r);
    if (bs_engine_open(&e, target, "cpu", err)) return -1;
    if (bs_session_init(&s, e, ctx ? ctx : bs_request_ctx(&e->cfg, n_prompt, n_new), smp, err)) goto out;
    bs_drafter_opts dop = { .lossy_weights = -1 };
    if (drafter && bs_drafter_open_opts(&d, drafter, e, s.kv.max_ctx, &dop, err)) goto out;
    if (d) {
        bs_spec_opts o = { .draft_max = draft_max, .stop_at_eos = 1 };
        if (bs_generate_spec(&s, d, prompt, n_prompt, n_new, &o, r->ids, &r->n, NULL, NULL, &r->st, err)) goto out;
        r->finish = r->st.finish;
    } else {
        if (bs_generate_plain(&s, prompt, n_prompt, n_new, 1, r->ids, &r->n, NULL, NULL, err)) goto out;
        r->finish = s.stats.finish;
    }
    rc = 0;
out:
    if (d) d->free(d);
    if (s.eng) bs_session_free(&s);
    bs_engine_close(e);
    return rc;
}

static int json_int_list(const cJSON *a, int *v, int cap) {
    int n = 0;
    for (const cJSON *x = a ? a->child : NULL; x && n < cap; x = x->next) v[n++] = (int)x->valuedouble;
    return n;
}

// The command's --json for the same request, checked against the engine's run.
static void check_same(int *failed_, const char *args, const engine_run *r, int speculative) {
    char cmd[8192], out[65536];
    snprintf(cmd, sizeof cmd, "%s generate %s --json", bs_cli_path(), args);
    CHECK(bs_test_run(cmd, 0, out, sizeof out) == 0, "`%s` failed: %.300s", cmd, out);
    cJSON *j = cJSON_Parse(out), *st = cJSON_GetObjectItem(j, "stats");
    CHECK(j && st, "no JSON: %.300s", out);
    int ids[512], lens[512];
    int n = json_int_list(cJSON_GetObjectItem(j, "output_ids"), ids, 512);
    CHECK(n == r->n && !memcmp(ids, r->ids, sizeof(int32_t) * (size_t)n), "`%s`: %d ids, the engine's path %d (or they differ)", args, n, r->n);
    const cJSON *fr = cJSON_GetObjectItem(j, "finish_reason");
    CHECK(cJSON_IsString(fr) && !strcmp(fr->valuestring, bs_finish_name(r->finish)), "`%s`: finish_reason %s, the engine's %s", args,
          cJSON_IsString(fr) ? fr->valuestring : "?", bs_finish_name(r->finish));
    if (speculative) {
        const bs_spec_stats *s = &r->st;
        CHECK(cJSON_GetObjectItem(st, "rounds")->valuedouble == s->rounds && cJSON_GetObjectItem(st, "drafted")->valuedouble == s->drafted &&
              cJSON_GetObjectItem(st, "accepted")->valuedouble == s->accepted && fabs(cJSON_GetObjectItem(st, "tau")->valuedouble - bs_spec_tau(s)) < 1e-12,
              "`%s`: counters differ from the engine's (%d rounds, %ld drafted, %ld accepted): %.400s", args, s->rounds, s->drafted, s->accepted, out);
        int nl = json_int_list(cJSON_GetObjectItem(st, "acceptance_lengths"), lens, 512);
        CHECK(nl == s->n_lengths && !memcmp(lens, s->acceptance_lengths, sizeof(int) * (size_t)nl), "`%s`: acceptance lengths differ", args);
        const cJSON *pa = cJSON_GetObjectItem(st, "acceptance_by_position");
        int k = 0;   // cJSON prints 15 digits where they read back within an ulp or so
        for (const cJSON *x = pa ? pa->child : NULL; x; x = x->next, k++)
            CHECK(k < BS_MAX_DRAFT && s->pos_tried[k] && fabs(x->valuedouble - (double)s->pos_accepted[k] / s->pos_tried[k]) < 1e-12, "`%s`: position %d: %.17g, the engine's %ld / %ld", args, k + 1,
                  x->valuedouble, s->pos_accepted[k < BS_MAX_DRAFT ? k : 0], s->pos_tried[k < BS_MAX_DRAFT ? k : 0]);
        CHECK(k == BS_MAX_DRAFT || !s->pos_tried[k], "`%s`: %d positions reported, the engine tried more", args, k);
    } else {
        CHECK(cJSON_GetObjectItem(st, "n_generated")->valuedouble == r->n && !cJSON_GetObjectItem(st, "rounds"), "`%s`: plain stats %.300s", args, out);
    }
    cJSON_Delete(j);
}

// Greedy and seeded sampling, plain and speculative, on the fixture target (id prompts) and the built-in
// model (a text prompt, tokenised by its tokenizer as the command does).
TEST(cli_generate_equals_engine_path) {
    const char *F = bs_fixtures_dir();
    char target[1024], drafter[1024], builtin[1024], builtin_d[1024], args[4096];
    snprintf(target, sizeof target, "%s/target", F);
    snprintf(drafter, sizeof drafter, "%s/dspark", F);
    snprintf(builtin, sizeof builtin, "models/blockspec-30m");
    snprintf(builtin_d, sizeof builtin_d, "models/blockspec-30m-dspark");
    struct stat sb;
    int have_builtin = !stat(builtin, &sb) && !stat(builtin_d, &sb);
    const bs_sampling smps[2] = { { 0 }, { 0.8f, 40, 0.9f, 5 } };
    const char *smp_args[2] = { "", "--temp 0.8 --top-k 40 --top-p 0.9 --seed 5" };
    int cases = 0;
    for (int m = 0; m < 1 + have_builtin; m++)
        for (int spec = 0; spec < 2; spec++)
            for (int k = 0; k < 2; k++) {
                bs_err err = {0};
                engine_run r;
                int32_t fixture_prompt[3] = { 1, 2, 3 }, *prompt = fixture_prompt;
                size_t n_prompt = 3;
                bs_engine *e = NULL;
                if (m) {   // the command tokenises -p with the folder's tokenizer
                    CHECK(bs_engine_open(&e, builtin, "cpu", &err) == 0, "%s", err.msg);
                    CHECK(bs_tokenizer_encode(e->tok, "static int", 10, &prompt, &n_prompt, &err) == 0, "%s", err.msg);
                    bs_engine_close(e);
                }
                int n_new = m ? 64 : 24;
                int rc = run_engine(m ? builtin : target, spec ? (m ? builtin_d : drafter) : NULL, 4, &smps[k], prompt, (int)n_prompt, n_new, 0, &r, &err);
                CHECK(rc == 0, "the engine's path: %s", err.msg);
                if (m) snprintf(args, sizeof args, "-m %s %s%s -p 'static int' -n %d %s", builtin, spec ? "--draft-max 4 -d " : "-d none",
                                spec ? builtin_d : "", n_new, smp_args[k]);
                else snprintf(args, sizeof args, "-m %s %s%s --prompt-ids 1,2,3 -n %d %s", target, spec ? "--draft-max 4 -d " : "",
                              spec ? drafter : "", n_new, smp_args[k]);
                check_same(failed_, args, &r, spec);
                bs_spec_stats_free(&r.st);
                if (prompt != fixture_prompt) free(prompt);
                cases++;
            }
    printf("  %d requests the same through the API as through the engine's path%s\n", cases, have_builtin ? "" : " (no built-in model here)");
}

// -c too small: the engine's message, prefixed by the command, exit status 1, with and without a drafter.
TEST(cli_generate_context_error_unchanged) {
    const char *F = bs_fixtures_dir();
    char target[1024], drafter[1024], cmd[4096], out[4096], want[1024];
    snprintf(target, sizeof target, "%s/target", F);
    snprintf(drafter, sizeof drafter, "%s/dspark", F);
    const int32_t prompt[3] = { 1, 2, 3 };
    for (int spec = 0; spec < 2; spec++) {
        bs_err err = {0};
        engine_run r;
        bs_sampling greedy = { 0 };
        CHECK(run_engine(target, spec ? drafter : NULL, 0, &greedy, prompt, 3, 20, 8, &r, &err) != 0, "the engine ran a request past -c 8");
        snprintf(want, sizeof want, "blockspec generate: %s\n", err.msg);
        snprintf(cmd, sizeof cmd, "%s generate -m %s %s%s --prompt-ids 1,2,3 -n 20 -c 8", bs_cli_path(), target, spec ? "-d " : "", spec ? drafter : "");
        CHECK(bs_test_run(cmd, 1, out, sizeof out) == 1, "`%s` did not exit 1: %s", cmd, out);
        CHECK(!strcmp(out, want), "`%s` said \"%s\", the engine's path \"%s\"", cmd, out, want);
    }
}
