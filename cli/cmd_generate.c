// blockspec generate -m DIR (--prompt-ids 1,2,3 | -p TEXT | --prompt-file F) [-d DRAFTER] -n N
//                    [--temp T --top-k K --top-p P --seed S] [--print-ids] [--stats] [--json] ...
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "io/weight_check.h"
#include "cli/args.h"
#include "cli/builtin_model.h"
#include "cli/commands.h"
#include "cli/cost_model.h"
#include "cli/generate_prompts.h"
#include "engine/engine.h"
#include "io/chat.h"
#include "io/json.h"
#include "model/dflash.h"
#include "runtime/profile.h"
#include "runtime/schedule.h"
#include "spec/spec_loop.h"

static void usage(void) {
    fprintf(stderr,
        "usage: blockspec generate [-m TARGET_DIR] (-p TEXT | --prompt-file F | --prompt-ids IDS) [options]\n"
        "  -m DIR                   the target (default: the built-in models/blockspec-30m, with its drafter\n"
        "                           models/blockspec-30m-dspark and --draft-max 4 unless -d / --draft-max say otherwise)\n"
        "  --chat                   wrap the prompt as a user message in the model's chat template\n"
        "  --system TEXT            system message (with --chat)\n"
        "  --no-think               Qwen3 chat: enable_thinking=false (an empty <think></think> block)\n"
        "  --chat-template NAME     qwen3 or chatml, when the model's template is not recognised\n"
        "  -d DIR                   drafter checkpoint (DFlash or DSpark): speculative decoding; -d none: plain\n"
        "  --drafter-fp8            lossy drafter matrices for a faster drafter pass: 8-bit weights (CUDA), or\n"
        "                           bf16 dot products, activations rounded to bf16 (CPU with AVX512-BF16);\n"
        "                           the output is unchanged, only the acceptance rate may differ\n"
        "  --draft-vocab FILE       draft only from these token ids (JSON list or uint32 file; see\n"
        "                           `blockspec draft-vocab`): a smaller drafter LM head; output unchanged\n"
        "  -n N                     tokens to generate (default 64; -1: until EOS or the context is full)\n"
        "  --temp T                 temperature (default 0 = greedy)\n"
        "  --top-k K, --top-p P     filters applied after temperature (transformers' order)\n"
        "  --seed S                 RNG seed (default 0)\n"
        "  --draft-max N            verify at most N drafts per round (default: the block on a GPU, 4 on a CPU)\n"
        "  --confidence-threshold C verify only leading drafts whose confidence is >= C (DSpark; calibrated by the\n"
        "                           drafter folder's calibration.json when it has one, docs/calibration.md)\n"
        "  --no-calibration         use the confidence head's raw values even where a calibration.json exists\n"
        "  --ignore-eos             do not stop at end-of-sequence tokens\n"
        "  -c N                     context length (default: the model's max_position_embeddings)\n"
        "  --device D               cpu (default), cpu-ref, cuda[:N]\n"
        "  --threads N              worker threads for the CPU kernels and the host sampler (default: $BS_THREADS,\n"
        "                           else every online core)\n"
        "  --no-graphs              never record forwards as CUDA graphs (slower; output unchanged; was BS_GRAPHS=0)\n"
        "  --kv-rows N              KV memory in rows (tokens) for all requests together, in pages of 128 rows\n"
        "                           (default: 4 contexts of the model, at least 32768 rows, at most half the free\n"
        "                           memory; docs/kv-paging.md). With --prompts a request waits until its context fits\n"
        "  --print-ids              print token ids (default when no tokenizer is available)\n"
        "  --stats                  print speed and acceptance statistics to stderr\n"
        "  --json                   print the result and statistics as one JSON object on stdout\n"
        "  --prompts FILE           many prompts, decoded together: JSON lines {\"prompt\": TEXT} or\n"
        "                           {\"prompt_ids\": [IDS]}, optional \"max_tokens\", \"temperature\", \"top_p\",\n"
        "                           \"top_k\", \"seed\" per line (defaults: -n, --temp, ...); one JSON line out per\n"
        "                           prompt, in input order (index, text, ids, finish_reason, stats)\n"
        "  --max-concurrency N      with --prompts: at most N requests decoded at once (default 8)\n"
        "  --schedule S             which drafts each round verifies (docs/scheduling.md): none (plain decoding),\n"
        "                           fixed (all), threshold (each request's --confidence-threshold; the default),\n"
        "                           alg1 (DSpark's Algorithm 1 across the batch), async (top-K, K planned a step ahead)\n"
        "  --cost-model FILE        the cost model alg1 / async use (`blockspec profile --out FILE`); default: the\n"
        "                           cached one for this device and target, measured now when there is none\n"
        "  --trace FILE             with --prompts: one JSON line per speculative round of every request (its\n"
        "                           confidences, drafted / verified / accepted counts): docs/scheduling.md\n");
}

typedef struct gen_args {
    const char *model, *drafter, *device, *text, *prompt_file, *system, *chat_template, *draft_vocab, *prompts;
    const char *schedule, *cost_model, *trace;
    long max_concurrency;
    int chat, no_think;
    int32_t *prompt; int n_prompt;
    long n_new, ctx, draft_max, threads, kv_rows;
    double conf_thr;
    bs_sampling sampling;
    int print_ids, stats, json, ignore_eos, drafter_fp8, no_calibration, no_graphs;
    blockspec_schedule sched;
} gen_args;

static int parse(int argc, char **argv, gen_args *a) {
    const char *v; long l; double d;
    memset(a, 0, sizeof *a);
    a->device = "cpu"; a->n_new = 64; a->sampling.top_p = 1.0f; a->max_concurrency = 8;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-m")) { if (!(a->model = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(o, "-d") || !strcmp(o, "-md")) { if (!(a->drafter = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(o, "--device")) { if (!(a->device = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(o, "--prompt-ids")) { if (!(v = cli_value(argc, argv, &i)) || (a->n_prompt = cli_parse_ids(o, v, &a->prompt)) < 0) return 2; }
        else if (!strcmp(o, "-n")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, -1, 1 << 24, &a->n_new)) return 2; }
        else if (!strcmp(o, "-c")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, 1, 1 << 24, &a->ctx)) return 2; }
        else if (!strcmp(o, "--draft-max")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, 1, 64, &a->draft_max)) return 2; }
        else if (!strcmp(o, "--confidence-threshold")) { if (!(v = cli_value(argc, argv, &i)) || cli_float(o, v, 0, 1, &a->conf_thr)) return 2; }
        else if (!strcmp(o, "--temp")) { if (!(v = cli_value(argc, argv, &i)) || cli_float(o, v, 0, 100, &d)) return 2; a->sampling.temperature = (float)d; }
        else if (!strcmp(o, "--top-k")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, 0, 1 << 24, &l)) return 2; a->sampling.top_k = (int)l; }
        else if (!strcmp(o, "--top-p")) { if (!(v = cli_value(argc, argv, &i)) || cli_float(o, v, 1e-6, 1, &d)) return 2; a->sampling.top_p = (float)d; }
        else if (!strcmp(o, "--seed")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, 0, 1L << 62, &l)) return 2; a->sampling.seed = (uint64_t)l; }
        else if (!strcmp(o, "-p") || !strcmp(o, "--prompt")) { if (!(a->text = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(o, "--prompts")) { if (!(a->prompts = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(o, "--max-concurrency")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, 1, 4096, &a->max_concurrency)) return 2; }
        else if (!strcmp(o, "--schedule")) { if (!(a->schedule = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(o, "--cost-model")) { if (!(a->cost_model = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(o, "--trace")) { if (!(a->trace = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(o, "--prompt-file")) { if (!(a->prompt_file = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(o, "--system")) { if (!(a->system = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(o, "--chat-template")) { if (!(a->chat_template = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(o, "--chat")) a->chat = 1;
        else if (!strcmp(o, "--no-think")) a->no_think = 1;
        else if (!strcmp(o, "--drafter-fp8")) a->drafter_fp8 = 1;
        else if (!strcmp(o, "--threads")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, 1, 4096, &a->threads)) return 2; }
        else if (!strcmp(o, "--no-graphs")) a->no_graphs = 1;
        else if (!strcmp(o, "--kv-rows")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, 1, 1L << 30, &a->kv_rows)) return 2; }
        else if (!strcmp(o, "--no-calibration")) a->no_calibration = 1;
        else if (!strcmp(o, "--draft-vocab")) { if (!(a->draft_vocab = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(o, "--print-ids")) a->print_ids = 1;
        else if (!strcmp(o, "--stats")) a->stats = 1;
        else if (!strcmp(o, "--json")) a->json = 1;
        else if (!strcmp(o, "--ignore-eos")) a->ignore_eos = 1;
        else if (!strcmp(o, "--help") || !strcmp(o, "-h")) { usage(); exit(0); }
        else { fprintf(stderr, "blockspec generate: unknown option %s\n", o); usage(); return 2; }
    }
    if (!a->model) {   // the built-in model, with its drafter unless -d says otherwise
        static char target[4096], drafter[4096];
        if (cli_builtin_model(target, drafter, sizeof target)) {
            fprintf(stderr, "blockspec generate: no -m TARGET_DIR and no built-in model found (models/%s beside the build folder, or BS_MODELS=DIR)\n", BS_BUILTIN_TARGET);
            usage(); return 2;
        }
        a->model = target;
        if (!a->drafter && drafter[0]) { a->drafter = drafter; if (!a->draft_max) a->draft_max = BS_BUILTIN_DRAFT_MAX; }
    }
    if (a->drafter && !strcmp(a->drafter, "none")) a->drafter = NULL;   // -d none: plain decoding
    if (!!a->n_prompt + !!a->text + !!a->prompt_file + !!a->prompts != 1) {
        fprintf(stderr, "blockspec generate: give exactly one of -p TEXT, --prompt-file F, --prompt-ids IDS, --prompts FILE\n"); usage(); return 2;
    }
    if (a->prompts && (a->chat || a->json || a->print_ids || a->stats || a->ctx)) {
        fprintf(stderr, "blockspec generate: --prompts takes no --chat, --json, --print-ids, --stats or -c (its output is JSON lines with stats)\n");
        return 2;
    }
    if (a->trace && !a->prompts) { fprintf(stderr, "blockspec generate: --trace needs --prompts FILE\n"); return 2; }
    if (cli_schedule_arg("blockspec generate", a->schedule, a->conf_thr, &a->sched)) return 2;
    if (a->sched == BLOCKSPEC_SCHEDULE_NONE && !a->prompts) a->drafter = NULL;   // plain decoding: no drafter to open
    if (a->chat && a->n_prompt) { fprintf(stderr, "blockspec generate: --chat needs a text prompt (-p or --prompt-file)\n"); return 2; }
    return 0;
}

// Turns the text prompt (optionally wrapped in the chat template) into ids.
static int tokenize_prompt(gen_args *a, const bs_engine *e, bs_err *err) {
    if (a->n_prompt) return 0;
    if (!e->tok) return bs_fail(err, "%s: %s", a->model, e->tok_error[0] ? e->tok_error : "no tokenizer.json in this folder: pass --prompt-ids instead");
    size_t len = 0;
    char *text = NULL, *rendered = NULL;
    if (a->prompt_file) { if (!(text = bs_read_file(a->prompt_file, &len, err))) return -1; }
    else { text = strdup(a->text); len = strlen(text); }
    if (a->chat) {
        bs_chat_msg msgs[2]; size_t n = 0;
        if (a->system) msgs[n++] = (bs_chat_msg){ "system", a->system, NULL };
        msgs[n++] = (bs_chat_msg){ "user", text, NULL };
        bs_chat_opts o = { BS_CHAT_AUTO, 1, !a->no_think };
        if (a->chat_template && bs_chat_kind_parse(a->chat_template, &o.kind, err)) { free(text); return -1; }
        if (bs_chat_render(e->tok, msgs, n, &o, &rendered, err)) { free(text); return -1; }
        free(text);
        text = rendered; len = strlen(text);
    }
    size_t n_ids = 0;
    int32_t *ids = NULL;
    int rc = bs_tokenizer_encode(e->tok, text, len, &ids, &n_ids, err);
    free(text);
    if (rc) return -1;
    if (!n_ids) { free(ids); return bs_fail(err, "the prompt encodes to no tokens"); }
    a->prompt = ids; a->n_prompt = (int)n_ids;
    return 0;
}

// Streams the output: ids, or text through the streaming detokeniser.
typedef struct printer { int print_ids, n; bs_detok *dt; } printer;

static int on_token(void *ctx, int32_t t) {
    printer *p = ctx;
    if (p->print_ids) { printf("%s%d", p->n++ ? "," : "", t); fflush(stdout); }
    else if (p->dt) {
        char buf[1024];
        int n = bs_detok_push(p->dt, t, buf, sizeof buf);
        if (n > 0) { fwrite(buf, 1, (size_t)n, stdout); fflush(stdout); }
    }
    return 0;
}

// Decoding speed, the same on both paths: the tokens after the first (which the prefill's logits give) per
// second after the prefill.
static double decode_rate(int n_generated, double t) { return n_generated > 1 && t > 0 ? (n_generated - 1) / t : 0.0; }

static void print_stats(const gen_args *a, const bs_session *s, const bs_spec_stats *st, int speculative) {
    if (!speculative) {
        const bs_gen_stats *g = &s->stats;
        fprintf(stderr, "prefill: %d tokens in %.3f s (%.1f tok/s)\n", g->n_prompt, g->t_prefill, g->n_prompt / (g->t_prefill > 0 ? g->t_prefill : 1e-9));
        fprintf(stderr, "decode:  %d tokens in %.3f s (%.1f tok/s)\n", g->n_generated, g->t_decode, decode_rate(g->n_generated, g->t_decode));
        return;
    }
    double t_gen = st->t_total - st->t_prefill, other = t_gen - st->t_target - st->t_draft;
    fprintf(stderr, "prefill: %d tokens in %.3f s (%.1f tok/s)\n", st->n_prompt, st->t_prefill, st->n_prompt / (st->t_prefill > 0 ? st->t_prefill : 1e-9));
    fprintf(stderr, "decode:  %d tokens in %.3f s (%.1f tok/s), %d rounds, tau %.3f (tokens per round)\n", st->n_generated, t_gen,
            decode_rate(st->n_generated, t_gen), st->rounds, bs_spec_tau(st));
    fprintf(stderr, "time:    target %.1f%%, drafter %.1f%%, other %.1f%%\n", 100 * st->t_target / (t_gen > 0 ? t_gen : 1),
            100 * st->t_draft / (t_gen > 0 ? t_gen : 1), 100 * other / (t_gen > 0 ? t_gen : 1));
    fprintf(stderr, "acceptance by draft position (accepted / verified):");
    for (int k = 0; k < BS_MAX_DRAFT && st->pos_tried[k]; k++)
        fprintf(stderr, " %d:%.2f", k + 1, (double)st->pos_accepted[k] / st->pos_tried[k]);
    fprintf(stderr, "\n");
}

static cJSON *stats_json(const bs_session *s, const bs_spec_stats *st, int speculative) {
    cJSON *j = cJSON_CreateObject();
    if (!speculative) {
        cJSON_AddNumberToObject(j, "n_prompt", s->stats.n_prompt);
        cJSON_AddNumberToObject(j, "n_generated", s->stats.n_generated);
        cJSON_AddNumberToObject(j, "t_prefill_s", s->stats.t_prefill);
        cJSON_AddNumberToObject(j, "t_decode_s", s->stats.t_decode);
        cJSON_AddNumberToObject(j, "decode_tok_per_s", decode_rate(s->stats.n_generated, s->stats.t_decode));
        return j;
    }
    cJSON_AddNumberToObject(j, "n_prompt", st->n_prompt);
    cJSON_AddNumberToObject(j, "n_generated", st->n_generated);
    cJSON_AddNumberToObject(j, "rounds", st->rounds);
    cJSON_AddNumberToObject(j, "tau", bs_spec_tau(st));
    cJSON_AddNumberToObject(j, "drafted", (double)st->drafted);
    cJSON_AddNumberToObject(j, "accepted", (double)st->accepted);
    cJSON_AddNumberToObject(j, "t_prefill_s", st->t_prefill);
    cJSON_AddNumberToObject(j, "t_total_s", st->t_total);
    cJSON_AddNumberToObject(j, "t_target_s", st->t_target);
    cJSON_AddNumberToObject(j, "t_drafter_s", st->t_draft);
    cJSON_AddNumberToObject(j, "decode_tok_per_s", decode_rate(st->n_generated, st->t_total - st->t_prefill));
    cJSON *pa = cJSON_AddArrayToObject(j, "acceptance_by_position");
    for (int k = 0; k < BS_MAX_DRAFT && st->pos_tried[k]; k++) cJSON_AddItemToArray(pa, cJSON_CreateNumber((double)st->pos_accepted[k] / st->pos_tried[k]));
    cJSON *al = cJSON_AddArrayToObject(j, "acceptance_lengths");
    for (int i = 0; i < st->n_lengths; i++) cJSON_AddItemToArray(al, cJSON_CreateNumber(st->acceptance_lengths[i]));
    return j;
}

// --prompts FILE: through the public runtime API (cli/generate_prompts.c).
static int generate_prompts(const gen_args *a) {
    cli_prompts_opts o = { .model = a->model, .drafter = a->drafter, .device = a->device, .draft_vocab = a->draft_vocab,
                           .prompts_file = a->prompts, .drafter_fp8 = a->drafter_fp8, .max_concurrency = (int)a->max_concurrency,
                           .no_calibration = a->no_calibration, .threads = (int)a->threads, .no_graphs = a->no_graphs, .kv_rows = (int)a->kv_rows, .sched = a->sched, .cost_model = a->cost_model, .trace = a->trace,
                           .defaults = blockspec_default_params() };
    o.defaults.confidence_threshold = (float)a->conf_thr;
    o.defaults.n_new = (int)a->n_new;
    o.defaults.temperature = a->sampling.temperature; o.defaults.top_k = a->sampling.top_k; o.defaults.top_p = a->sampling.top_p;
    o.defaults.seed = a->sampling.seed;
    o.defaults.draft_max = (int)a->draft_max;
    o.defaults.stop_at_eos = !a->ignore_eos;
    return cli_generate_prompts(&o);
}

int cmd_generate(int argc, char **argv) {
    gen_args a;
    int rc = parse(argc, argv, &a);
    if (rc) { free(a.prompt); return rc; }
    if (a.prompts) return generate_prompts(&a);
    bs_err err = {0};
    bs_engine *e = NULL;
    bs_session s = {0};
    bs_drafter *d = NULL;
    bs_spec_stats st = {0};
    int32_t *out = NULL;
    int n_out = 0;
    cli_costs costs = { 0 };   // the cost model (alg1 / async)
    rc = 1;
    bs_engine_opts eo = { .threads = (int)a.threads, .no_graphs = a.no_graphs, .kv_rows = a.kv_rows };
    if (bs_engine_open_opts(&e, a.model, a.device, &eo, &err) || tokenize_prompt(&a, e, &err)) goto out;
    if (e->weight_warning[0]) fprintf(stderr, "blockspec: warning: %s\n", e->weight_warning);
    if (e->setup_warning[0]) fprintf(stderr, "blockspec: warning: %s\n", e->setup_warning);
    // Without -c, the KV cache is sized for this request (prompt + output + one verify block), or for the
    // model's whole context with -n -1.
    if (bs_session_init(&s, e, a.ctx ? (int)a.ctx : a.n_new < 0 ? e->cfg.max_position : bs_request_ctx(&e->cfg, a.n_prompt, (int)a.n_new),
                        &a.sampling, &err)) goto out;
    // The output's capacity: the request's count, or (-n -1) what the context holds. A request that does not
    // fit is refused here by the decoders, with the same message for plain and speculative decoding.
    long cap = a.n_new >= 0 ? a.n_new : (long)s.kv.max_ctx - a.n_prompt + 1;
    if (!(out = malloc(sizeof(int32_t) * (cap > 0 ? cap : 1)))) { bs_fail(&err, "out of memory"); goto out; }
    if (a.ctx > s.kv.max_ctx)   // the session reports the context it got: say when -c was capped
        fprintf(stderr, "blockspec: warning: -c %ld is above the model's max_position_embeddings (%d); using a context of %d\n",
                a.ctx, e->cfg.max_position, s.kv.max_ctx);
    bs_drafter_opts dop = { .lossy_weights = a.drafter_fp8 ? 1 : -1, .draft_vocab = a.draft_vocab, .no_calibration = a.no_calibration };
    if (a.draft_vocab && !a.drafter) { bs_fail(&err, "--draft-vocab needs a drafter (-d DIR)"); goto out; }
    if (a.drafter && bs_drafter_open_opts(&d, a.drafter, e, s.kv.max_ctx, &dop, &err)) goto out;
    if (d && d->warning[0]) fprintf(stderr, "blockspec: warning: %s\n", d->warning);
    if (a.drafter) { char w[512]; if (bs_weights_check_path(a.drafter, w, sizeof w, &err) > 0) fprintf(stderr, "blockspec: warning: %s\n", w); }
    bs_detok dt;
    if (e->tok) bs_detok_init(&dt, e->tok, 1);
    printer pr = { .print_ids = !a.json && (a.print_ids || !e->tok), .n = 0, .dt = !a.json && e->tok ? &dt : NULL };
    if (d && bs_sched_needs_sps((bs_sched_mode)a.sched)) {
        char dev[512], shape[256], cerr[1024];
        int block = 1 + (a.draft_max ? (int)a.draft_max : d->max_drafts);
        cli_engine_drafter ed = { e, d };
        cli_cost_opts co = { .file = a.cost_model, .max_rows = block, .max_seqs = 1, .ctx = 256, .block = block, .reps = 3, .drafts = block - 1,
                             .drafter = d->shape[0] ? d->shape : d->name, .measure = cli_measure_engine, .measure_ctx = e,
                             .measure_draft = cli_measure_engine_draft, .measure_draft_ctx = &ed };
        cli_cost_device_key(e->be->name, dev, sizeof dev);
        if (bs_model_shape(e, shape, sizeof shape)) snprintf(shape, sizeof shape, "unknown");
        co.device = dev; co.shape = shape;
        if (cli_costs_get(&co, &costs, cerr, sizeof cerr)) { bs_fail(&err, "%s", cerr); goto out; }
    }
    if (d) {
        bs_spec_sched sch = { (int)a.sched, costs.sps, costs.n_sps, costs.block, costs.sps1, costs.n_sps1, costs.dps, costs.n_dps };
        bs_spec_opts o = { .draft_max = (int)a.draft_max, .confidence_threshold = (float)a.conf_thr, .stop_at_eos = !a.ignore_eos, .sched = &sch };
        if (bs_generate_spec(&s, d, a.prompt, a.n_prompt, (int)a.n_new, &o, out, &n_out, on_token, &pr, &st, &err)) goto out;
    } else if (bs_generate_plain(&s, a.prompt, a.n_prompt, (int)a.n_new, !a.ignore_eos, out, &n_out, on_token, &pr, &err)) goto out;
    if (pr.dt && !pr.print_ids) { char buf[64]; int n = bs_detok_flush(&dt, buf, sizeof buf); if (n > 0) fwrite(buf, 1, (size_t)n, stdout); }
    if (!a.json) printf("\n");
    if (a.stats) print_stats(&a, &s, &st, d != NULL);
    if (a.json) {
        cJSON *j = cJSON_CreateObject(), *ids = cJSON_AddArrayToObject(j, "output_ids");
        for (int i = 0; i < n_out; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(out[i]));
        if (e->tok) {
            char *txt = NULL; size_t tl = 0;
            if (bs_tokenizer_decode(e->tok, out, (size_t)n_out, 1, &txt, &tl, &err) == 0) cJSON_AddStringToObject(j, "text", txt);
            free(txt);
        }
        cJSON_AddStringToObject(j, "finish_reason", bs_finish_name(d ? st.finish : s.stats.finish));
        cJSON_AddItemToObject(j, "stats", stats_json(&s, &st, d != NULL));
        char *txt = cJSON_PrintUnformatted(j);
        printf("%s\n", txt);
        free(txt); cJSON_Delete(j);
    }
    rc = 0;
out:
    if (rc) fprintf(stderr, "blockspec generate: %s\n", err.msg);
    if (d) d->free(d);
    cli_costs_free(&costs);
    bs_spec_stats_free(&st);
    if (s.eng) bs_session_free(&s);
    bs_engine_close(e);
    free(out); free(a.prompt);
    return rc;
}
