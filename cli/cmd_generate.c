// blockspec generate -m DIR (--prompt-ids 1,2,3 | -p TEXT | --prompt-file F) [-d DRAFTER] -n N
//                    [--temp T --top-k K --top-p P --seed S] [--print-ids] [--stats] [--json] ...
//
// Through the public API only (include/blockspec.h): one prompt is one submitted request, stepped to its
// end; --prompts FILE is many (cli/generate_prompts.c). io/json.h is the one library header beside it: the
// file reader for --prompt-file (a leaf with no model logic).
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "blockspec.h"
#include "cli/args.h"
#include "cli/builtin_model.h"
#include "cli/commands.h"
#include "cli/cost_model.h"
#include "cli/generate_prompts.h"
#include "io/json.h"

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
    long n_new, ctx, draft_max, threads, kv_rows, top_k, seed;
    double conf_thr, temp, top_p;
    int print_ids, stats, json, ignore_eos, drafter_fp8, no_calibration, no_graphs;
    blockspec_schedule sched;
} gen_args;

static int parse(int argc, char **argv, gen_args *a) {
    const char *v;
    memset(a, 0, sizeof *a);
    a->device = "cpu"; a->n_new = 64; a->top_p = 1.0; a->max_concurrency = 8;
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
        else if (!strcmp(o, "--temp")) { if (!(v = cli_value(argc, argv, &i)) || cli_float(o, v, 0, 100, &a->temp)) return 2; }
        else if (!strcmp(o, "--top-k")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, 0, 1 << 24, &a->top_k)) return 2; }
        else if (!strcmp(o, "--top-p")) { if (!(v = cli_value(argc, argv, &i)) || cli_float(o, v, 1e-6, 1, &a->top_p)) return 2; }
        else if (!strcmp(o, "--seed")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, 0, 1L << 62, &a->seed)) return 2; }
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

// The request's settings from the command line (every --prompts line's defaults, too).
static blockspec_params request_params(const gen_args *a) {
    blockspec_params p = blockspec_default_params();
    p.n_new = (int)a->n_new;
    p.temperature = (float)a->temp; p.top_k = (int)a->top_k; p.top_p = (float)a->top_p; p.seed = (uint64_t)a->seed;
    p.draft_max = (int)a->draft_max;
    p.confidence_threshold = (float)a->conf_thr;
    p.stop_at_eos = !a->ignore_eos;
    return p;
}

// The prompt's text: -p, or --prompt-file, optionally wrapped as a user message in the chat template.
// *text is malloc'ed.
static int prompt_text(const gen_args *a, blockspec *bs, char **text, char *err, size_t len) {
    bs_err e = {0};
    size_t n;
    if (a->prompt_file) { if (!(*text = bs_read_file(a->prompt_file, &n, &e))) { snprintf(err, len, "%s", e.msg); return -1; } }
    else if (!(*text = strdup(a->text))) { snprintf(err, len, "out of memory"); return -1; }
    if (!a->chat) return 0;
    blockspec_chat_message msgs[2];
    size_t m = 0;
    if (a->system) msgs[m++] = (blockspec_chat_message){ "system", a->system };
    msgs[m++] = (blockspec_chat_message){ "user", *text };
    char *rendered = NULL;
    int rc = blockspec_chat_render_as(bs, a->chat_template, msgs, m, !a->no_think, &rendered, err, len);
    free(*text);
    *text = rendered;
    return rc;
}

// Turns the text prompt into ids (--prompt-ids need nothing).
static int tokenize_prompt(gen_args *a, blockspec *bs, char *err, size_t len) {
    if (a->n_prompt) return 0;
    const char *why = blockspec_tokenizer_error(bs);
    if (why) { snprintf(err, len, "%s: %s", a->model, why[0] ? why : "no tokenizer.json in this folder: pass --prompt-ids instead"); return -1; }
    char *text = NULL;
    if (prompt_text(a, bs, &text, err, len)) return -1;
    size_t n = 0;
    int rc = blockspec_tokenize(bs, text, &a->prompt, &n, err, len);
    free(text);
    if (rc) return -1;
    if (!n) { snprintf(err, len, "the prompt encodes to no tokens"); return -1; }
    a->n_prompt = (int)n;
    return 0;
}

// Streams the output: ids, or text through the streaming detokeniser.
typedef struct printer { int print_ids, n; blockspec_detokenizer *dt; } printer;

static int on_token(void *ctx, int32_t t) {
    printer *p = ctx;
    if (p->print_ids) { printf("%s%d", p->n++ ? "," : "", t); fflush(stdout); }
    else if (p->dt) {
        char buf[1024];
        int n = blockspec_detokenizer_push(p->dt, t, buf, sizeof buf);
        if (n > 0) { fwrite(buf, 1, (size_t)n, stdout); fflush(stdout); }
    }
    return 0;
}

// Decoding speed, the same for both kinds: the tokens after the first (which the prefill's logits give) per
// second after the prefill.
static double decode_rate(const blockspec_stats *st) { return st->n_generated > 1 && st->t_generate > 0 ? (st->n_generated - 1) / st->t_generate : 0.0; }

// speculative: a drafter is loaded (its rounds, times and acceptance are reported).
static void print_stats(const blockspec_stats *st, const blockspec_spec_counts *c, int speculative) {
    double t_gen = st->t_generate, other = t_gen - st->t_target - st->t_drafter;
    fprintf(stderr, "prefill: %d tokens in %.3f s (%.1f tok/s)\n", st->n_prompt, st->t_prefill, st->n_prompt / (st->t_prefill > 0 ? st->t_prefill : 1e-9));
    if (!speculative) {
        fprintf(stderr, "decode:  %d tokens in %.3f s (%.1f tok/s)\n", st->n_generated, t_gen, decode_rate(st));
        return;
    }
    fprintf(stderr, "decode:  %d tokens in %.3f s (%.1f tok/s), %d rounds, tau %.3f (tokens per round)\n", st->n_generated, t_gen,
            decode_rate(st), st->rounds, st->tau);
    fprintf(stderr, "time:    target %.1f%%, drafter %.1f%%, other %.1f%%\n", 100 * st->t_target / (t_gen > 0 ? t_gen : 1),
            100 * st->t_drafter / (t_gen > 0 ? t_gen : 1), 100 * other / (t_gen > 0 ? t_gen : 1));
    fprintf(stderr, "acceptance by draft position (accepted / verified):");
    for (int k = 0; k < c->n_pos && c->pos_tried[k]; k++) fprintf(stderr, " %d:%.2f", k + 1, (double)c->pos_accepted[k] / c->pos_tried[k]);
    fprintf(stderr, "\n");
}

static cJSON *stats_json(const blockspec_stats *st, const blockspec_spec_counts *c, int speculative) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "n_prompt", st->n_prompt);
    cJSON_AddNumberToObject(j, "n_generated", st->n_generated);
    if (!speculative) {
        cJSON_AddNumberToObject(j, "t_prefill_s", st->t_prefill);
        cJSON_AddNumberToObject(j, "t_decode_s", st->t_generate);
        cJSON_AddNumberToObject(j, "decode_tok_per_s", decode_rate(st));
        return j;
    }
    cJSON_AddNumberToObject(j, "rounds", st->rounds);
    cJSON_AddNumberToObject(j, "tau", st->tau);
    cJSON_AddNumberToObject(j, "drafted", (double)c->drafted);
    cJSON_AddNumberToObject(j, "accepted", (double)c->accepted);
    cJSON_AddNumberToObject(j, "t_prefill_s", st->t_prefill);
    cJSON_AddNumberToObject(j, "t_total_s", st->t_prefill + st->t_generate);
    cJSON_AddNumberToObject(j, "t_target_s", st->t_target);
    cJSON_AddNumberToObject(j, "t_drafter_s", st->t_drafter);
    cJSON_AddNumberToObject(j, "decode_tok_per_s", decode_rate(st));
    cJSON *pa = cJSON_AddArrayToObject(j, "acceptance_by_position");
    for (int k = 0; k < c->n_pos && c->pos_tried[k]; k++) cJSON_AddItemToArray(pa, cJSON_CreateNumber((double)c->pos_accepted[k] / c->pos_tried[k]));
    cJSON *al = cJSON_AddArrayToObject(j, "acceptance_lengths");
    for (int i = 0; i < c->n_lengths; i++) cJSON_AddItemToArray(al, cJSON_CreateNumber(c->acceptance_lengths[i]));
    return j;
}

// --json: the output ids, the text (with a tokenizer), why it stopped and the statistics, as one line.
static void print_json(blockspec *bs, const blockspec_request *r, const blockspec_stats *st, const blockspec_spec_counts *c, int speculative) {
    size_t n;
    const int32_t *ids = blockspec_request_tokens(r, &n);
    cJSON *j = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(j, "output_ids");
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    char *txt = NULL, terr[256];
    if (!blockspec_tokenizer_error(bs) && blockspec_detokenize(bs, ids, n, &txt, terr, sizeof terr) == 0) cJSON_AddStringToObject(j, "text", txt);
    free(txt);
    cJSON_AddStringToObject(j, "finish_reason", st->finish_reason);
    cJSON_AddItemToObject(j, "stats", stats_json(st, c, speculative));
    char *line = cJSON_PrintUnformatted(j);
    printf("%s\n", line);
    free(line); cJSON_Delete(j);
}

// --prompts FILE: many requests together (cli/generate_prompts.c).
static int generate_prompts(const gen_args *a) {
    cli_prompts_opts o = { .model = a->model, .drafter = a->drafter, .device = a->device, .draft_vocab = a->draft_vocab,
                           .prompts_file = a->prompts, .drafter_fp8 = a->drafter_fp8, .max_concurrency = (int)a->max_concurrency,
                           .no_calibration = a->no_calibration, .threads = (int)a->threads, .no_graphs = a->no_graphs, .kv_rows = (int)a->kv_rows, .sched = a->sched, .cost_model = a->cost_model, .trace = a->trace,
                           .defaults = request_params(a) };
    return cli_generate_prompts(&o);
}

// One request, submitted and stepped to its end, its tokens streamed as they come.
static int run_request(gen_args *a, blockspec *bs, blockspec_request **r, char *err, size_t len) {
    if (a->draft_vocab && !a->drafter) { snprintf(err, len, "--draft-vocab needs a drafter (-d DIR)"); return -1; }
    // The cost model (alg1 / async) for one sequence of the verify block; plain decoding has no schedule.
    int drafts = a->draft_max ? (int)a->draft_max : blockspec_drafter_block(bs);
    if (a->drafter && cli_set_schedule(bs, a->sched, a->cost_model, 1, 1 + drafts, (int)a->draft_max, err, len)) return -1;
    int has_tok = !blockspec_tokenizer_error(bs);
    printer pr = { .print_ids = !a->json && (a->print_ids || !has_tok), .dt = !a->json && has_tok ? blockspec_detokenizer_new(bs) : NULL };
    blockspec_params p = request_params(a);
    p.n_ctx = (int)a->ctx;
    int rc = blockspec_submit(bs, a->prompt, (size_t)a->n_prompt, &p, on_token, &pr, r, err, len);
    while (!rc && !blockspec_request_done(*r)) rc = blockspec_step(bs, err, len) < 0 ? -1 : 0;
    if (!rc && pr.dt && !pr.print_ids) { char buf[64]; int n = blockspec_detokenizer_flush(pr.dt, buf, sizeof buf); if (n > 0) fwrite(buf, 1, (size_t)n, stdout); }
    if (pr.dt) blockspec_detokenizer_free(pr.dt);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    gen_args a;
    int rc = parse(argc, argv, &a);
    if (rc) { free(a.prompt); return rc; }
    if (a.prompts) return generate_prompts(&a);
    char err[2048] = "";
    blockspec *bs = NULL;
    blockspec_request *r = NULL;
    rc = 1;
    // A draft vocabulary without a drafter is refused below, with the command line's words.
    blockspec_open_options oo = { .draft_vocab = a.drafter ? a.draft_vocab : NULL, .drafter_fp8 = a.drafter_fp8, .no_calibration = a.no_calibration,
                                  .threads = (int)a.threads, .no_graphs = a.no_graphs, .kv_rows = (int)a.kv_rows };
    if (blockspec_open_ex(&bs, a.model, a.drafter, a.device, &oo, err, sizeof err) || tokenize_prompt(&a, bs, err, sizeof err)) goto out;
    cli_print_warnings(bs);
    if (a.ctx > blockspec_max_context(bs))   // the context is capped there: say so
        fprintf(stderr, "blockspec: warning: -c %ld is above the model's max_position_embeddings (%d); using a context of %d\n",
                a.ctx, blockspec_max_context(bs), blockspec_max_context(bs));
    if (run_request(&a, bs, &r, err, sizeof err)) goto out;
    if (!a.json) printf("\n");
    blockspec_stats st;
    blockspec_spec_counts c;
    blockspec_request_stats(r, &st);
    blockspec_request_spec_counts(r, &c);
    if (a.stats) print_stats(&st, &c, a.drafter != NULL);
    if (a.json) print_json(bs, r, &st, &c, a.drafter != NULL);
    rc = 0;
out:
    if (rc) fprintf(stderr, "blockspec generate: %s\n", err);
    if (r) blockspec_request_free(bs, r);
    blockspec_close(bs);
    free(a.prompt);
    return rc;
}
