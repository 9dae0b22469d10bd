// The single-request entry points (bs_generate_plain in engine.h, bs_generate_spec in spec_loop.h): a
// runtime holding one sequence, stepped until it is done. There is no second decoding loop.
#include <string.h>
#include "runtime/runtime.h"

// Runs one sequence on the session's KV cache and RNG into out; *st receives its statistics.
// sched: the runtime's scheduler (NULL: the default).
static int run_one(bs_session *s, bs_drafter *d, const int32_t *prompt, int n_prompt, const bs_seq_params *p, const bs_spec_sched *sched,
                   int32_t *out, int *n_out, bs_spec_stats *st, bs_err *err) {
    bs_runtime rt;
    bs_seq q;
    *n_out = 0;
    memset(st, 0, sizeof *st);
    if (bs_runtime_init(&rt, s->eng, d, err)) return -1;
    int rc = -1;
    if (sched) {
        bs_cost_tables c = { sched->sps, sched->n_sps, sched->block, sched->sps1, sched->n_sps1, sched->dps, sched->n_dps };
        if (bs_runtime_set_schedule_costs(&rt, (bs_sched_mode)sched->mode, &c, err)) goto out;
    }
    if (bs_seq_init_on(&q, s->eng, d, prompt, n_prompt, p, &s->kv, &s->rng, out, err)) goto out;
    if (bs_runtime_add(&rt, &q, err)) goto out_seq;
    while (!bs_seq_done(&q))
        if (bs_runtime_step(&rt, err) < 0) goto out_seq;
    *n_out = q.n_out;
    *st = q.st;                           // the statistics (and their allocation) move to the caller
    memset(&q.st, 0, sizeof q.st);
    rc = 0;
out_seq:
    bs_seq_free(&q);
out:
    bs_runtime_free(&rt);
    return rc;
}

int bs_generate_spec(bs_session *s, bs_drafter *d, const int32_t *prompt, int n_prompt, int n_new, const bs_spec_opts *opts,
                     int32_t *out, int *n_out, bs_token_cb cb, void *cb_ctx, bs_spec_stats *st, bs_err *err) {
    bs_seq_params p = { .n_new = n_new, .sampling = s->sampling, .stop_at_eos = opts ? opts->stop_at_eos : 1, .use_drafter = 1,
                        .draft_max = opts ? opts->draft_max : 0, .confidence_threshold = opts ? opts->confidence_threshold : 0,
                        .cb = cb, .cb_ctx = cb_ctx };
    return run_one(s, d, prompt, n_prompt, &p, opts ? opts->sched : NULL, out, n_out, st, err);
}

int bs_generate_plain(bs_session *s, const int32_t *prompt, int n_prompt, int n_new, int stop_at_eos, int32_t *out, int *n_out,
                      bs_token_cb cb, void *cb_ctx, bs_err *err) {
    bs_seq_params p = { .n_new = n_new, .sampling = s->sampling, .stop_at_eos = stop_at_eos, .cb = cb, .cb_ctx = cb_ctx };
    bs_spec_stats st;
    s->stats.finish = BS_FINISH_NONE;
    if (run_one(s, NULL, prompt, n_prompt, &p, NULL, out, n_out, &st, err)) return -1;
    s->stats = (bs_gen_stats){ st.n_prompt, st.n_generated, st.finish, st.t_prefill, st.t_total - st.t_prefill };
    bs_spec_stats_free(&st);
    return 0;
}
