// blockspec serve: the OpenAI-compatible HTTP server (server/). This file only reads the options, opens
// the model through the public API and hands over to serve_run until SIGTERM or SIGINT.
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include "blockspec.h"
#include "cli/args.h"
#include "cli/builtin_model.h"
#include "cli/commands.h"
#include "cli/cost_model.h"
#include "server/server.h"

static void usage(void) {
    fprintf(stderr,
        "usage: blockspec serve [-m TARGET_DIR] [-d DRAFTER_DIR|none] [options]\n"
        "  Serves /v1/completions, /v1/chat/completions (streaming or not), /v1/models, /health and /metrics.\n"
        "  Without -m: the built-in model and its drafter.\n"
        "  --device DEV              cpu (default), cpu-ref or cuda[:N]\n"
        "  --host ADDR               IPv4 address to listen on (default 127.0.0.1)\n"
        "  --port N                  (default 8080; 0: any free port, printed at start)\n"
        "  --served-model-name NAME  the model's name in the API (default: the target folder's name)\n"
        "  --max-concurrency N       requests decoded at once (default 8)\n"
        "  --max-queue N             requests waiting beyond those (default 64; more get 429)\n"
        "  --max-tokens N            the most tokens one request may generate (default 4096)\n"
        "  -c, --ctx N               context per request, prompt + output (default: the model's)\n"
        "  --max-body BYTES          request body limit (default 1048576)\n"
        "  --timeout S               close connections idle this long (default 30)\n"
        "  --shutdown-grace S        on SIGTERM, running requests get S seconds to finish (default 30)\n"
        "  --draft-max N             drafts verified per round (default: the drafter's block)\n"
        "  --confidence-threshold C  verify only the leading drafts with confidence >= C (DSpark)\n"
        "  --schedule S              which drafts each step verifies (docs/scheduling.md): threshold (default: each\n"
        "                            request's --confidence-threshold cut), none, fixed, alg1, async\n"
        "  --cost-model FILE         alg1 / async: the cost model (`blockspec profile --out FILE`); default: the cache,\n"
        "                            else measured at start\n"
        "  --no-calibration          ignore the drafter's calibration.json\n"
        "  --threads N               worker threads (default: $BS_THREADS, else every online core)\n"
        "  --no-graphs               never record forwards as CUDA graphs (slower; output unchanged)\n"
        "  --kv-rows N               KV memory in rows (tokens) for all requests together, in pages of 128 rows (default:\n"
        "                            4 contexts of the model, at least 32768 rows, at most half the free memory); a request\n"
        "                            waits until the pool can promise its whole context (docs/kv-paging.md)\n");
}

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig) { (void)sig; stop_flag = 1; }

// The folder's last path component, as the default served name.
static const char *base_name(const char *dir, char *buf, size_t cap) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    snprintf(buf, cap, "%.*s", (int)(n - b), dir + b);
    return buf;
}

int cmd_serve(int argc, char **argv) {
    serve_opts o = serve_default_opts();
    const char *model = NULL, *drafter = NULL, *device = "cpu", *schedule = NULL, *cost_model = NULL;
    int no_calibration = 0, no_graphs = 0;
    long v, threads = 0, kv_rows = 0;
    double f;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val;
#define VAL() if (!(val = cli_value(argc, argv, &i))) return 2
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (!strcmp(a, "-m")) { VAL(); model = val; }
        else if (!strcmp(a, "-d")) { VAL(); drafter = val; }
        else if (!strcmp(a, "--device")) { VAL(); device = val; }
        else if (!strcmp(a, "--host")) { VAL(); o.host = val; }
        else if (!strcmp(a, "--port")) { VAL(); if (cli_int(a, val, 0, 65535, &v)) return 2; o.port = (int)v; }
        else if (!strcmp(a, "--served-model-name")) { VAL(); o.model_name = val; }
        else if (!strcmp(a, "--max-concurrency")) { VAL(); if (cli_int(a, val, 1, 4096, &v)) return 2; o.max_running = (int)v; }
        else if (!strcmp(a, "--max-queue")) { VAL(); if (cli_int(a, val, 0, 1 << 20, &v)) return 2; o.max_waiting = (int)v; }
        else if (!strcmp(a, "--max-tokens")) { VAL(); if (cli_int(a, val, 1, 1 << 30, &v)) return 2; o.max_tokens = (int)v; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) { VAL(); if (cli_int(a, val, 1, 1 << 30, &v)) return 2; o.max_ctx = (int)v; }
        else if (!strcmp(a, "--max-body")) { VAL(); if (cli_int(a, val, 64, 1L << 30, &v)) return 2; o.max_body = (size_t)v; }
        else if (!strcmp(a, "--timeout")) { VAL(); if (cli_int(a, val, 1, 86400, &v)) return 2; o.idle_timeout_s = (int)v; }
        else if (!strcmp(a, "--shutdown-grace")) { VAL(); if (cli_float(a, val, 0, 86400, &f)) return 2; o.shutdown_grace_s = f; }
        else if (!strcmp(a, "--draft-max")) { VAL(); if (cli_int(a, val, 1, 64, &v)) return 2; o.defaults.draft_max = (int)v; }
        else if (!strcmp(a, "--confidence-threshold")) { VAL(); if (cli_float(a, val, 0, 1, &f)) return 2; o.defaults.confidence_threshold = (float)f; }
        else if (!strcmp(a, "--schedule")) { VAL(); schedule = val; }
        else if (!strcmp(a, "--cost-model")) { VAL(); cost_model = val; }
        else if (!strcmp(a, "--no-calibration")) no_calibration = 1;
        else if (!strcmp(a, "--no-graphs")) no_graphs = 1;
        else if (!strcmp(a, "--threads")) { VAL(); if (cli_int(a, val, 1, 4096, &threads)) return 2; }
        else if (!strcmp(a, "--kv-rows")) { VAL(); if (cli_int(a, val, 1, 1L << 30, &kv_rows)) return 2; }
        else { fprintf(stderr, "blockspec serve: unknown option %s (see blockspec serve --help)\n", a); return 2; }
#undef VAL
    }
    char target[4096], builtin_drafter[4096], name[256];
    if (!model) {
        if (cli_builtin_model(target, builtin_drafter, sizeof target)) {
            fprintf(stderr, "blockspec serve: no -m TARGET_DIR and no built-in model found (models/%s beside the build folder, or BS_MODELS=DIR)\n", BS_BUILTIN_TARGET);
            return 2;
        }
        model = target;
        if (!drafter && builtin_drafter[0]) { drafter = builtin_drafter; if (!o.defaults.draft_max) o.defaults.draft_max = BS_BUILTIN_DRAFT_MAX; }
    }
    if (drafter && !strcmp(drafter, "none")) drafter = NULL;
    blockspec_schedule sched = BLOCKSPEC_SCHEDULE_THRESHOLD;
    if (cli_schedule_arg("blockspec serve", schedule, o.defaults.confidence_threshold, &sched)) return 2;
    if (o.model_name == serve_default_opts().model_name) o.model_name = base_name(model, name, sizeof name);
    if (strpbrk(o.model_name, "\"\\\n") || !o.model_name[0]) { fprintf(stderr, "blockspec serve: --served-model-name must be non-empty, without quotes, backslashes or newlines\n"); return 2; }
    blockspec *bs;
    char err[1024];
    blockspec_open_options oo = { .no_calibration = no_calibration, .threads = (int)threads, .no_graphs = no_graphs, .kv_rows = (int)kv_rows };
    if (blockspec_open_ex(&bs, model, drafter, device, &oo, err, sizeof err)) { fprintf(stderr, "blockspec serve: %s\n", err); return 1; }
    cli_print_warnings(bs);
    if (cli_set_schedule(bs, sched, cost_model, o.max_running, cli_batch_block(o.defaults.draft_max), o.defaults.draft_max, err, sizeof err)) {
        fprintf(stderr, "blockspec serve: %s\n", err);
        blockspec_close(bs);
        return 1;
    }
    struct sigaction sa = { .sa_handler = on_signal };
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);   // a client that leaves mid-answer is not a reason to die
    int rc = serve_run(bs, &o, &stop_flag, err, sizeof err);
    if (rc) fprintf(stderr, "blockspec serve: %s\n", err);
    blockspec_close(bs);
    return rc ? 1 : 0;
}
