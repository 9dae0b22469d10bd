// blockspec bench: kernel and forward benchmarks printed beside the machine's rooflines.
//   blockspec bench --ops [--dtype bf16|f16|f32] [--rows 1,2,4,8,16,32] [--bw-mib 1024]
//     0.6B-shaped matmuls (q/k/v/o/gate/up/down and LM head) and attention over a 512-token cache at each
//     row count.
//   blockspec bench --model DIR [--ctx 512] [--prefill 512] [--rows 1,2,4,8,16] [--bw-mib 1024]
//     whole-model forwards (prefill, decode, n-row forwards after a --ctx token cache); --profile adds
//     each n-row forward's wall time per op class (the ops wrapped with timers); --last-logits computes the
//     n-row forwards' logits for their last row only, as llama-bench's pp tests do (to compare with the peer:
//     bench/peer/llama_cpp_cpu.sh); a verify needs every row's, the default.
//   blockspec bench --model DIR --round DRAFTER[,DRAFTER...] [--ctx 512]
//     one speculative round per drafter: draft and verify time vs a decode step, rooflines, implied speedup.
// Figures only: nothing is asserted. Kernel path: BS_CPU_KERNELS, threads: BS_THREADS.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "cli/bench_batch.h"
#include "cli/bench_trace.h"
#include "cli/builtin_model.h"
#include "cli/commands.h"
#include "backend/affine.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_roofline.h"
#include "util/threadpool.h"
#include "util/timer.h"
#include "engine/engine.h"

int bench_model(const char *dir, const int32_t *rows, int n_rows, int ctx, int prefill, const bs_roofline *rl, int profile);
int bench_round(const char *target_dir, const char *drafters, int ctx, const bs_roofline *rl);
int bench_sampler(int vocab, const char *device);
// --device for --model / --round (cpu by default); timings sync the device before reading the clock.
const char *bench_device = "cpu";
// --draft-vocab for --round: the drafters are opened with this draft vocabulary (io/draft_vocab.h).
const char *bench_draft_vocab;
// --last-logits for --model: n-row forwards keep the last row's logits only (llama-bench's pp semantics).
static int bench_last_logits;

// Other processes on the machine skew every figure: print the kernel's CPU pressure (share of time some
// runnable task waited for a CPU, last 10 s) so a contended run is recognisable.
static void print_pressure(const char *when) {
    FILE *f = fopen("/proc/pressure/cpu", "r");
    char line[256];
    if (f && fgets(line, sizeof line, f)) {
        double a10 = -1;
        char *p = strstr(line, "avg10=");
        if (p) a10 = atof(p + 6);
        printf("cpu pressure %s: %.0f%% (avg10; > ~5%% means other processes compete for the cores)\n", when, a10);
    }
    if (f) fclose(f);
}

// The compute ceilings are measured with the instructions of the matmul path the backend runs (BS_CPU_KERNELS
// or the default): say which, since the same machine has different ceilings on different paths.
static void print_roofline(const bs_roofline *rl) {
    printf("roofline (%d threads, matmul path %s): read %.1f GB/s, FMA peak %.1f GFMA/s raw, %.1f GFMA/s bf16 matmul mix\n",
           rl->threads, rl->path, rl->read_gbs, rl->fma_raw_g, rl->fma_bf16_g);
    if (!strcmp(rl->mix, "none")) printf("roofline: no multiply-add peaks (no AVX2): roof%% is against memory bandwidth only\n");
    else printf("roofline compute peaks with the %s kernels' instructions (%s)\n", rl->mix, rl->mix_desc);
}

// Roofline time of a matmul: weights streamed once, x and y once each; compute at the dtype's peak.
double bench_roofline_time(const bs_roofline *rl, double bytes, double fmas, bs_dtype dt, int *compute_bound) {
    double peak = (dt == BS_BF16 ? rl->fma_bf16_g : rl->fma_raw_g) * 1e9;
    double tm = bytes / (rl->read_gbs * 1e9), tc = peak > 0 ? fmas / peak : 0;
    if (compute_bound) *compute_bound = tc > tm;
    return tm > tc ? tm : tc;
}

static int bench_ops(bs_dtype dt, const int32_t *rows, int n_rows, const bs_roofline *rl) {
    static const struct { const char *name; int O, K; } S[] = {
        { "q", 2048, 1024 }, { "k", 1024, 1024 }, { "v", 1024, 1024 }, { "o", 1024, 2048 },
        { "gate", 3072, 1024 }, { "up", 3072, 1024 }, { "down", 1024, 3072 }, { "lm_head", 151936, 1024 },
    };
    bs_backend *be = bs_backend_cpu(0);
    printf("kernels: %s, weights %s, %d threads\n", bs_cpu_path_name(bs_cpu_default_path()), bs_dtype_name(dt), bs_pool_size());
    printf("(time: best single call; roof%%: roofline time / that time)\n");
    printf("%-8s %5s %10s %9s %9s %8s %7s\n", "matmul", "rows", "time_us", "GB/s", "GFMA/s", "bound", "roof%");
    size_t esz = bs_dtype_size(dt);
    for (size_t s = 0; s < sizeof S / sizeof *S; s++) {
        size_t wbytes = (size_t)S[s].O * S[s].K * esz;
        // Enough distinct copies that the set (>= 256 MiB) never fits in L3: every call streams from DRAM,
        // as a model forward does (0.6B layers total ~0.9 GB).
        int copies = (int)((((size_t)256 << 20) + wbytes - 1) / wbytes);
        size_t wlen;   // the kind of memory the backend keeps weights in (huge pages unless BS_CPU_HUGEPAGES=0)
        char *w = bs_cpu_huge_map(wbytes * copies, bs_cpu_hugepages_wanted(), &wlen);
        if (!w) { fprintf(stderr, "bench: out of memory\n"); return 1; }
        for (size_t i = 0; i < wbytes * copies / 2; i++) ((uint16_t *)w)[i] = dt == BS_F32 ? 0x3c00 + (i & 0xff) : 0x3c00 + (i & 0xff);
        int maxn = 0;
        for (int i = 0; i < n_rows; i++) if (rows[i] > maxn) maxn = rows[i];
        float *x = malloc(sizeof(float) * maxn * S[s].K), *y = malloc(sizeof(float) * (size_t)maxn * S[s].O);
        for (size_t i = 0; i < (size_t)maxn * S[s].K; i++) x[i] = (float)((i % 17) - 8) * 0.01f;
        for (int ri = 0; ri < n_rows; ri++) {
            int n = rows[ri];
            bs_mat W = { w, dt, S[s].O, S[s].K };
            be->matmul(be, y, x, n, &W, 0);   // warm-up (thread wake, x layout buffer)
            // Best single call over >= 0.3 s of calls (each call streams a matrix copy not in cache): on a
            // shared machine the mean mixes in calls that lost their time slice; the best call is what the
            // kernel does when it runs.
            double t0 = bs_now(), t = 1e30;
            int reps = 0;
            do {
                W.data = w + (size_t)(reps % copies) * wbytes;
                double t1 = bs_now();
                be->matmul(be, y, x, n, &W, 0);
                double dt1 = bs_now() - t1;
                if (dt1 < t) t = dt1;
                reps++;
            } while (bs_now() - t0 < 0.3 || reps < copies);
            double bytes = (double)wbytes + 4.0 * n * (S[s].K + S[s].O), fmas = (double)n * S[s].O * S[s].K;
            int cb;
            double troof = bench_roofline_time(rl, bytes, fmas, dt, &cb);
            printf("%-8s %5d %10.1f %9.1f %9.1f %8s %6.0f%%\n", S[s].name, n, t * 1e6, bytes / t / 1e9, fmas / t / 1e9,
                   cb ? "compute" : "memory", 100 * troof / t);
            fflush(stdout);
        }
        bs_cpu_huge_unmap(w, wlen); free(x); free(y);
    }
    be->destroy(be);
    return 0;
}

// Attention over a 512-token fp32 KV cache, 0.6B shape (16 query heads, 8 kv heads, head dim 128), 28
// layers each with its own cache (132 MB in all: streamed from DRAM, as in a forward), causal rows at the
// end of the context. Roofline: the K/V bytes at the read bandwidth vs 2 multiply-adds per (query head,
// key, dim) at the raw FMA peak.
static int bench_attention(const int32_t *rows, int n_rows, const bs_roofline *rl) {
    enum { L = 28, NK = 512, H = 16, KV = 8, HD = 128 };
    int maxn = 0;
    for (int i = 0; i < n_rows; i++) if (rows[i] > maxn) maxn = rows[i];
    bs_backend *be = bs_backend_cpu(0);
    bs_err err = {0};
    const size_t cache = (size_t)(NK + maxn) * KV * HD;
    float *k[L] = { 0 }, *v[L] = { 0 }, *q = malloc(sizeof(float) * maxn * H * HD), *o = malloc(sizeof(float) * maxn * H * HD);
    int ok = q && o;
    for (int l = 0; l < L && ok; l++) {
        k[l] = be->alloc(be, sizeof(float) * cache, &err);
        v[l] = k[l] ? be->alloc(be, sizeof(float) * cache, &err) : NULL;
        ok = v[l] != NULL;
        for (size_t i = 0; ok && i < cache; i++) { k[l][i] = (float)((i * 7) % 13) * 0.01f; v[l][i] = (float)((i * 5) % 11) * 0.01f; }
    }
    for (size_t i = 0; ok && i < (size_t)maxn * H * HD; i++) q[i] = 0.01f * (float)(i % 17);
    if (ok) printf("%-8s %5s %10s %9s %9s %8s %7s   (%d layers, %d keys, fp32 K/V)\n", "attention", "rows", "time_us", "GB/s", "GFMA/s",
           "bound", "roof%", L, NK);
    // Each row count twice: over the 28 layers' caches (K/V from memory, as in a forward), then 28 calls on
    // layer 0's cache ("cached": K/V in the last-level cache), which separates the cost of reading K/V
    // from the arithmetic (session 12: 1.6-2x apart at 8 rows on one thread).
    for (int ri = 0; ok && ri < 2 * n_rows; ri++) {
        const int n = rows[ri / 2], cached = ri & 1;
        double t = 1e30, t0 = bs_now();
        int reps = 0;
        do {   // best pass over the 28 layers in >= 0.3 s
            double t1 = bs_now();
            for (int l = 0; l < L; l++) {
                const bs_kv_view kvl = bs_kv_contig(k[cached ? 0 : l], v[cached ? 0 : l]);
                be->attention(be, o, q, &kvl, n, H, KV, HD, NK, NK - n, 1, 0);
            }
            double dt1 = bs_now() - t1;
            if (dt1 < t) t = dt1;
            reps++;
        } while (bs_now() - t0 < 0.3 || reps < 3);
        const double bytes = 2.0 * L * NK * KV * HD * 4, fmas = 2.0 * L * n * H * (double)NK * HD;
        const double tm = bytes / (rl->read_gbs * 1e9), tc = rl->fma_raw_g > 0 ? fmas / (rl->fma_raw_g * 1e9) : 0;
        printf("%-8s %5d %10.1f %9.1f %9.1f %8s %6.0f%%%s\n", "attention", n, t * 1e6, bytes / t / 1e9, fmas / t / 1e9,
               tc > tm ? "compute" : "memory", 100 * (tc > tm ? tc : tm) / t, cached ? "   (cached: one layer's K/V, 28 calls)" : "");
        fflush(stdout);
    }
    for (int l = 0; l < L; l++) { if (k[l]) be->free(be, k[l]); if (v[l]) be->free(be, v[l]); }
    free(q); free(o);
    be->destroy(be);
    if (!ok) { fprintf(stderr, "bench: out of memory for the attention caches\n"); return 1; }
    return 0;
}

// The options of --concurrency beyond the levels (schedules, the replay trace).
typedef struct conc_opts { const char *schedules, *trace, *cost_model, *prompts; double threshold; long prompt_len; } conc_opts;

// "none,fixed,alg1" into modes (at most 16); the count, or -1 (message printed, naming the bad one).
static int parse_schedules(const char *list, bs_sched_mode *out) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    int n = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (n == 16) { fprintf(stderr, "bench: --schedule lists at most 16 schedules\n"); return -1; }
        if (bs_sched_parse(tok, &out[n])) { fprintf(stderr, "bench: --schedule: unknown schedule '%s' (none, fixed, threshold, alg1, async)\n", tok); return -1; }
        n++;
    }
    if (!n) { fprintf(stderr, "bench: --schedule needs a list (none, fixed, threshold, alg1, async)\n"); return -1; }
    return n;
}

// --concurrency: the built-in model unless --model / --drafter say otherwise; --trace: the replay on --model.
static int bench_concurrency(const char *list, const char *model, const char *drafter, long n_new, long draft_max, long reps, const conc_opts *co) {
    int32_t *levels = NULL;
    int n = cli_parse_ids("--concurrency", list, &levels);
    if (n <= 0) return 2;
    for (int i = 0; i < n; i++) if (levels[i] < 1 || levels[i] > 4096) { fprintf(stderr, "bench: --concurrency values must be 1..4096\n"); free(levels); return 2; }
    bs_sched_mode sch[16];
    int n_sch = 0;
    if (co->schedules && (n_sch = parse_schedules(co->schedules, sch)) < 0) { free(levels); return 2; }
    if (co->trace) {
        if (!model || drafter) { fprintf(stderr, "bench: --trace replays on --model DIR (a target; no --drafter: the trace drafts)\n"); free(levels); return 2; }
        bs_sched_mode all[5] = { BS_SCHED_NONE, BS_SCHED_FIXED, BS_SCHED_THRESHOLD, BS_SCHED_ALG1, BS_SCHED_ASYNC };
        bench_trace_opts t = { model, bench_device ? bench_device : "cpu", co->trace, co->cost_model, (const int *)levels, n,
                               n_sch ? sch : all, n_sch ? n_sch : 5, (int)n_new, (int)draft_max, (int)co->prompt_len, (int)reps, (float)co->threshold };
        int rc = bench_trace(&t);
        free(levels);
        return rc;
    }
    static char target[4096], builtin_drafter[4096];
    if (!model) {
        if (cli_builtin_model(target, builtin_drafter, sizeof target)) { fprintf(stderr, "bench: no --model and no built-in model\n"); free(levels); return 2; }
        model = target;
        if (!drafter && builtin_drafter[0]) { drafter = builtin_drafter; if (!draft_max) draft_max = BS_BUILTIN_DRAFT_MAX; }
    }
    if (drafter && !strcmp(drafter, "none")) drafter = NULL;
    bench_batch_opts o = { model, drafter, bench_device ? bench_device : "cpu", (const int *)levels, n, (int)n_new, (int)draft_max, (int)reps };
    blockspec_schedule bsch[16];
    for (int i = 0; i < n_sch; i++) bsch[i] = (blockspec_schedule)sch[i];
    o.scheds = bsch; o.n_scheds = n_sch; o.threshold = (float)co->threshold; o.cost_model = co->cost_model; o.prompts = co->prompts;
    int rc = bench_batch(&o);
    free(levels);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    int ops = 0, ctx = 512, prefill = 512, profile = 0, sampler = 0;
    long bw_mib = 1024, n_new = 128, draft_max = 0, reps = 3;
    const char *model = NULL, *dts = "bf16", *rows_s = NULL, *round = NULL, *concurrency = NULL, *drafter = NULL;
    conc_opts co = { .threshold = 0.5, .prompt_len = 64 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--sampler")) sampler = 1;
        else if (!strcmp(a, "--ops")) ops = 1;
        else if (!strcmp(a, "--concurrency")) { if (!(concurrency = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--drafter")) { if (!(drafter = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--schedule")) { if (!(co.schedules = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--trace")) { if (!(co.trace = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--cost-model")) { if (!(co.cost_model = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--prompts")) { if (!(co.prompts = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--confidence-threshold")) { if (!(v = cli_value(argc, argv, &i)) || cli_float(a, v, 1e-6, 1, &co.threshold)) return 2; }
        else if (!strcmp(a, "--prompt-len")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 1 << 16, &co.prompt_len)) return 2; }
        else if (!strcmp(a, "-n")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 1 << 20, &n_new)) return 2; }
        else if (!strcmp(a, "--draft-max")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 64, &draft_max)) return 2; }
        else if (!strcmp(a, "--reps")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 100, &reps)) return 2; }
        else if (!strcmp(a, "--profile")) profile = 1;
        else if (!strcmp(a, "--last-logits")) bench_last_logits = 1;
        else if (!strcmp(a, "--model")) { if (!(model = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--device")) { if (!(bench_device = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--round")) { if (!(round = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--draft-vocab")) { if (!(bench_draft_vocab = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--dtype")) { if (!(dts = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--rows")) { if (!(rows_s = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--bw-mib")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 64, 1 << 16, &bw_mib)) return 2; }
        else if (!strcmp(a, "--ctx")) { long c; if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 0, 1 << 20, &c)) return 2; ctx = (int)c; }
        else if (!strcmp(a, "--prefill")) { long c; if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 1 << 20, &c)) return 2; prefill = (int)c; }
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: blockspec bench --ops [--dtype bf16|f16|f32] [--rows 1,2,4,8,16,32] [--bw-mib 1024]\n"
                   "       blockspec bench --model DIR [--ctx 512] [--prefill 512] [--rows 1,2,4,8,16] [--bw-mib 1024] [--profile]\n"
                   "             [--last-logits]   (n-row forwards: last row's logits only, as llama-bench's pp)\n"
                   "       blockspec bench --model DIR --round DRAFTER[,DRAFTER...] [--ctx 512] [--draft-vocab FILE]\n"
                   "       blockspec bench --sampler   (logits -> tokens at a 151936-token vocabulary, 1 and 16 rows)\n"
                   "       blockspec bench --concurrency 1,2,4,8 [--model DIR] [--drafter DIR|none] [-n 128] [--draft-max K] [--reps 3]\n"
                   "             [--schedule none,fixed,threshold,alg1,async] [--confidence-threshold 0.5] [--cost-model FILE]\n"
                   "             [--prompts FILE]\n"
                   "             (requests decoded together: total and per-request tok/s per schedule, medians of --reps\n"
                   "             interleaved runs; default: the built-in model and its drafter, schedules none and fixed)\n"
                   "       blockspec bench --concurrency 1,4,16 --trace TRACE --model TARGET [--schedule ...] [-n 128]\n"
                   "             [--draft-max K] [--prompt-len 64] [--reps 3] [--cost-model FILE]\n"
                   "             (trace-driven: a recorded drafter's rounds, `generate --prompts F --trace TRACE --schedule\n"
                   "             fixed`, replayed on TARGET by a test-only replay drafter; docs/scheduling.md)\n"
                   "--device cpu|cuda[:N] runs --model/--round/--sampler there (the rooflines printed stay this CPU's;\n"
                   "GPU figures beside the GPU's copy bandwidth: build-cuda/backend_bench, docs/benchmarks.md).\n"
                   "Prints figures beside the rooflines (read GB/s, GFMA/s) measured first on all threads.\n"
                   "BS_CPU_KERNELS=scalar|avx2|avx512|avx512bf16 picks the kernel path, BS_THREADS the threads,\n"
                   "BS_CPU_HUGEPAGES=0 keeps weights (and the bandwidth buffer) on 4 KiB pages.\n");
            return 0;
        } else { fprintf(stderr, "bench: unknown option '%s' (see --help)\n", a); return 2; }
    }
    if (sampler) return bench_sampler(151936, bench_device);
    if ((co.schedules || co.trace || co.cost_model || co.prompts) && !concurrency) {
        fprintf(stderr, "bench: --schedule, --trace, --cost-model and --prompts go with --concurrency LIST\n");
        return 2;
    }
    if (concurrency) return bench_concurrency(concurrency, model, drafter, n_new, draft_max, reps, &co);
    if (!ops && !model) { fprintf(stderr, "bench: give --ops, --model DIR or --sampler (see --help)\n"); return 2; }
    bs_dtype dt;
    if (!strcmp(dts, "bf16")) dt = BS_BF16; else if (!strcmp(dts, "f16")) dt = BS_F16;
    else if (!strcmp(dts, "f32")) dt = BS_F32; else { fprintf(stderr, "bench: --dtype must be bf16, f16 or f32\n"); return 2; }
    int32_t *rows = NULL;
    int n_rows = cli_parse_ids("--rows", rows_s ? rows_s : ops ? "1,2,4,8,16,32" : "1,2,4,8,16", &rows);
    if (n_rows <= 0) return 2;
    for (int i = 0; i < n_rows; i++) if (rows[i] < 1 || rows[i] > 4096) { fprintf(stderr, "bench: --rows values must be 1..4096\n"); return 2; }
    bs_roofline rl;
    if (bs_roofline_measure(&rl, (size_t)bw_mib << 20)) { fprintf(stderr, "bench: out of memory for the bandwidth buffer\n"); return 1; }
    print_pressure("before");
    print_roofline(&rl);
    int rc = 0;
    if (ops) rc = bench_ops(dt, rows, n_rows, &rl);
    if (ops && !rc) rc = bench_attention(rows, n_rows, &rl);
    if (!rc && model && round) rc = bench_round(model, round, ctx, &rl);
    else if (!rc && model) rc = bench_model(model, rows, n_rows, ctx, prefill, &rl, profile);
    print_pressure("after");
    free(rows);
    return rc;
}



// ---- --profile: per-op-class wall time of whole forwards (wraps the backend's ops with timers) ----
enum { PR_QKV, PR_O, PR_GATEUP, PR_DOWN, PR_LMHEAD, PR_MM_OTHER, PR_ATTN, PR_NORM, PR_ROPE, PR_SWIGLU, PR_OTHER, PR_N };
static const char *pr_name[PR_N] = { "q/k/v", "o", "gate/up", "down", "lm_head", "mm other", "attention", "rmsnorm",
                                     "norm+rope", "swiglu", "other" };
static double pr_t[PR_N];
static long pr_calls[PR_N];
static bs_backend pr_orig;
static const bs_qwen3_config *pr_cfg;
static int pr_class(const bs_mat *W) {
    const bs_qwen3_config *c = pr_cfg;
    int64_t H = c->hidden_size, q = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim;
    if (W->rows == c->vocab_size) return PR_LMHEAD;
    if (W->cols == H && (W->rows == q || W->rows == kvd)) return PR_QKV;
    if (W->cols == q && W->rows == H) return PR_O;
    if (W->cols == H && W->rows == c->intermediate_size) return PR_GATEUP;
    if (W->cols == c->intermediate_size && W->rows == H) return PR_DOWN;
    return PR_MM_OTHER;
}
#define PR_WRAP(cls, call) do { double t0_ = bs_now(); call; pr_t[cls] += bs_now() - t0_; pr_calls[cls]++; } while (0)
static void pr_matmul(bs_backend *be, float *y, const float *x, int n, const bs_mat *W, int acc) {
    PR_WRAP(pr_class(W), pr_orig.matmul(be, y, x, n, W, acc));
}
static void pr_matmul_multi(bs_backend *be, int m, float *const *y, const float *x, int n, const bs_mat *const *W, int acc) {
    PR_WRAP(pr_class(W[0]), pr_orig.matmul_multi(be, m, y, x, n, W, acc));
}
static void pr_rmsnorm(bs_backend *be, float *y, const float *x, int n, int dim, const bs_mat *w, float eps) {
    PR_WRAP(PR_NORM, pr_orig.rmsnorm(be, y, x, n, dim, w, eps));
}
static void pr_rope(bs_backend *be, float *x, int n, int nh, int hd, const bs_mat *nw, float eps, int pos0, const float *inv_freq) {
    PR_WRAP(PR_ROPE, pr_orig.head_norm_rope(be, x, n, nh, hd, nw, eps, pos0, inv_freq));
}
static void pr_attention(bs_backend *be, float *out, const float *q, const bs_kv_view *kv, int n_q, int nh,
                         int nkv, int hd, int n_keys, int q_pos0, int causal, int window) {
    PR_WRAP(PR_ATTN, pr_orig.attention(be, out, q, kv, n_q, nh, nkv, hd, n_keys, q_pos0, causal, window));
}
static void pr_attention_spans(bs_backend *be, float *out, const float *q, const bs_row_span *spans, int n_spans, int nh, int nkv, int hd) {
    PR_WRAP(PR_ATTN, pr_orig.attention_spans(be, out, q, spans, n_spans, nh, nkv, hd));
}
static void pr_swiglu(bs_backend *be, float *h, const float *g, const float *u, size_t n) {
    PR_WRAP(PR_SWIGLU, pr_orig.swiglu(be, h, g, u, n));
}
static void pr_embed(bs_backend *be, float *out, const bs_mat *t, const int32_t *ids, int n) {
    PR_WRAP(PR_OTHER, pr_orig.embed(be, out, t, ids, n));
}
static void pr_install(bs_backend *be, const bs_qwen3_config *c) {
    pr_orig = *be; pr_cfg = c;
    be->matmul = pr_matmul; be->rmsnorm = pr_rmsnorm; be->head_norm_rope = pr_rope; be->attention = pr_attention;
    be->swiglu = pr_swiglu; be->embed = pr_embed;
    if (be->matmul_multi) be->matmul_multi = pr_matmul_multi;
    if (be->attention_spans) be->attention_spans = pr_attention_spans;   // the forward's attention
}
static void pr_reset(void) { memset(pr_t, 0, sizeof pr_t); memset(pr_calls, 0, sizeof pr_calls); }
static void pr_print(int n, int reps, double total) {
    printf("  profile %d rows (%d forwards, %.2f ms each):", n, reps, total / reps * 1e3);
    double sum = 0;
    for (int i = 0; i < PR_N; i++) sum += pr_t[i];
    for (int i = 0; i < PR_N; i++)
        if (pr_calls[i]) printf(" %s %.2f ms (%.0f%%, %ld calls)%s", pr_name[i], pr_t[i] / reps * 1e3, 100 * pr_t[i] / total,
                                pr_calls[i] / reps, i + 1 < PR_N ? ";" : "");
    printf(" untracked %.2f ms\n", (total - sum) / reps * 1e3);
}

// Whole-model forwards on a checkpoint (e.g. `blockspec make-random -c bench/configs/qwen3-0.6b.json --out DIR`).
// Roofline of an n-row forward: every weight matrix streamed once (layers + LM head; embedding rows are
// negligible) plus the KV cache read by attention, vs n x (matmul + attention) multiply-adds at the bf16 peak.
int bench_model(const char *dir, const int32_t *rows, int n_rows, int ctx, int prefill, const bs_roofline *rl, int profile) {
    bs_err err = {0};
    bs_engine *e = NULL;
    bs_kv_cache kv = {0};
    float *logits = NULL;
    int32_t *ids = NULL;
    int rc = 1, maxn = prefill;
    for (int i = 0; i < n_rows; i++) if (rows[i] > maxn) maxn = rows[i];
    if (bs_engine_open(&e, dir, bench_device, &err)) goto out;
    const bs_qwen3_config *c = &e->cfg;
    bs_backend *be = e->be;
    int need_ctx = (ctx > prefill ? ctx : prefill) + maxn + 64;
    if (bs_kv_init(&kv, e->kv_pool, need_ctx, &err)) goto out;
    if (!(logits = be->alloc(be, sizeof(float) * (size_t)maxn * c->vocab_size, &err))) goto out;
    int n_ids = maxn > ctx ? maxn : ctx; if (n_ids < 64) n_ids = 64;
    ids = malloc(sizeof(int32_t) * n_ids);
    for (int i = 0; i < n_ids; i++) ids[i] = (int32_t)((i * 7919 + 13) % c->vocab_size);
    // the compute roof: the bf16 kernels' rate for BF16 weights, the fp32 FMA rate for the others (affine
    // codes are multiplied as fp32)
    bs_dtype dt = e->target.layers[0].wq.format == BS_WFMT_AFFINE ? BS_F32 : e->target.layers[0].wq.dtype;
    int64_t H = c->hidden_size, q = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim, I = c->intermediate_size;
    double per_layer = (double)H * q * 2 + (double)H * kvd * 2 + 3.0 * H * I;   // multiply-adds per row (= weight elements)
    double mm_elems = per_layer * c->n_layers + (double)c->vocab_size * H;
    // bytes per weight element as stored (affine: codes + scales + biases, bs_mat_bytes)
    const bs_mat *w0 = &e->target.layers[0].w_gate;
    double wbytes = mm_elems * ((double)bs_mat_bytes(w0) / ((double)w0->rows * w0->cols));
    const double head_elems = (double)c->vocab_size * H;
    // multiply-adds of an n-row forward after ctx keys: matmuls (the LM head over every row, or the last
    // one with --last-logits) and attention's q.k and p.v
#define ROW_FMA(n) ((n) * mm_elems - (bench_last_logits ? ((n) - 1) * head_elems : 0) + \
                    (double)c->n_layers * (n) * c->n_heads * c->head_dim * 2.0 * (ctx + (n)))
    char wdesc[96];
    printf("model %s: %d layers, hidden %d, weights %s, %.2f GB streamed per forward\n", dir, c->n_layers, c->hidden_size,
           bs_mat_describe(w0, wdesc, sizeof wdesc), wbytes / 1e9);
    if (!strcmp(be->name, "cpu"))
        printf("weights: %.2f GB copied to huge-page memory (BS_CPU_HUGEPAGES=0: mmap view), process AnonHugePages %.2f GB\n",
               bs_cpu_weight_bytes_copied(be) / 1e9, bs_cpu_anon_huge_bytes() / 1e9);

    bs_fwd_out last = { .logits = logits, .logits_all = 0 };
    // prefill
    double t0 = bs_now();
    if (bs_qwen3_forward(&e->target, &kv, ids, prefill, &last, &err)) goto out;
    be->sync(be);
    double tp = bs_now() - t0;
    double pf_fma = (double)prefill * mm_elems + (double)c->n_layers * c->n_heads * c->head_dim * 2.0 * prefill * (prefill + 1) / 2;
    int cb;
    double troof = bench_roofline_time(rl, wbytes, pf_fma, dt, &cb);
    printf("prefill %5d tokens: %8.1f ms  %8.1f tok/s  %6.1f GFMA/s  roofline %5.0f%% (%s-bound)\n", prefill, tp * 1e3,
           prefill / tp, pf_fma / tp / 1e9, 100 * troof / tp, cb ? "compute" : "memory");
    // cache of ctx tokens, then n-row forwards (logits for every row, as verification needs, unless
    // --last-logits), best of 5
    if (bs_kv_rollback(&kv, 0, &err) || (ctx > 0 && bs_qwen3_forward(&e->target, &kv, ids, ctx, &last, &err))) goto out;
    printf("%-6s %10s %10s %9s %9s %8s %7s   (after a %d-token cache; logits of %s)\n", "rows", "time_ms", "tok/s", "GB/s",
           "GFMA/s", "bound", "roof%", ctx, bench_last_logits ? "the last row only" : "every row");
    double cross = 0, best_t[64] = {0};
    for (int ri = 0; ri < n_rows; ri++) {
        int n = rows[ri];
        bs_fwd_out all = { .logits = logits, .logits_all = !bench_last_logits };
        double best = 1e30;
        for (int rep = 0; rep < 5; rep++) {
            if (bs_kv_rollback(&kv, ctx, &err)) goto out;
            double t1 = bs_now();
            if (bs_qwen3_forward(&e->target, &kv, ids, n, &all, &err)) goto out;
            be->sync(be);
            double dt1 = bs_now() - t1;
            if (dt1 < best) best = dt1;
        }
        if (ri < 64) best_t[ri] = best;
        double kvbytes = (double)c->n_layers * (ctx + n) * kvd * 2 * 4;
        double fma = ROW_FMA(n);
        double tr = bench_roofline_time(rl, wbytes + kvbytes, fma, dt, &cb);
        printf("%-6d %10.2f %10.1f %9.1f %9.1f %8s %6.0f%%\n", n, best * 1e3, n / best, (wbytes + kvbytes) / best / 1e9,
               fma / best / 1e9, cb ? "compute" : "memory", 100 * tr / best);
        fflush(stdout);
        if (n == 1) {
            // rows where the multiply-adds take as long as streaming the bytes, at the measured rooflines
            double peak = (dt == BS_BF16 ? rl->fma_bf16_g : rl->fma_raw_g) * 1e9;
            cross = (wbytes + kvbytes) / (rl->read_gbs * 1e9) * peak / fma;
        }
    }
    if (profile) {
        pr_install(be, c);
        for (int ri = 0; ri < n_rows; ri++) {
            int n = rows[ri], reps = 5;
            bs_fwd_out all = { .logits = logits, .logits_all = !bench_last_logits };
            pr_reset();
            double tot = 0;
            for (int rep = 0; rep < reps; rep++) {
                if (bs_kv_rollback(&kv, ctx, &err)) goto out;
                double t1 = bs_now();
                if (bs_qwen3_forward(&e->target, &kv, ids, n, &all, &err)) goto out;
                tot += bs_now() - t1;
            }
            pr_print(n, reps, tot);
        }
        *be = pr_orig;
    }
    if (cross > 0) printf("roofline crossover (memory -> compute bound): ~%.1f rows per forward\n", cross);
    // plain decode: 32 successive 1-row forwards continuing the ctx cache (last-row logits only)
    if (bs_kv_rollback(&kv, ctx, &err)) goto out;
    double t2 = bs_now();
    for (int i = 0; i < 32; i++) if (bs_qwen3_forward(&e->target, &kv, &ids[i], 1, &last, &err)) goto out;
    be->sync(be);
    double td = (bs_now() - t2) / 32;
    printf("decode: %.1f tok/s (%.2f ms/token, 32 tokens after a %d-token cache)\n", 1 / td, td * 1e3, ctx);
    {   // The roofline again, now that the forwards ran: on a shared machine either measurement may have been
        // taken in a contended moment, so the figures below use the best of both (the stricter roofline).
        bs_roofline r2, rb = *rl;
        if (!bs_roofline_measure(&r2, 0)) {
            if (r2.read_gbs > rb.read_gbs) rb.read_gbs = r2.read_gbs;
            if (r2.fma_raw_g > rb.fma_raw_g) rb.fma_raw_g = r2.fma_raw_g;
            if (r2.fma_bf16_g > rb.fma_bf16_g) rb.fma_bf16_g = r2.fma_bf16_g;
            printf("roofline re-measured after the forwards (path %s): read %.1f GB/s, %.1f raw, %.1f bf16 GFMA/s; best of both: %.1f GB/s, %.1f bf16 GFMA/s\n",
                   r2.path, r2.read_gbs, r2.fma_raw_g, r2.fma_bf16_g, rb.read_gbs, rb.fma_bf16_g);
            printf("roof%% against the best of both:");
            for (int ri = 0; ri < n_rows && ri < 64; ri++) {
                int n = rows[ri];
                double kvbytes = (double)c->n_layers * (ctx + n) * kvd * 2 * 4;
                double fma = ROW_FMA(n);
                printf(" %d rows %.0f%%;", n, 100 * bench_roofline_time(&rb, wbytes + kvbytes, fma, dt, &cb) / best_t[ri]);
            }
            double kv1 = (double)c->n_layers * (ctx + 1) * kvd * 2 * 4;
            printf(" decode %.0f%%\n", 100 * bench_roofline_time(&rb, wbytes + kv1, mm_elems, dt, &cb) / td);
        }
    }
    rc = 0;
#undef ROW_FMA
out:
    if (rc) fprintf(stderr, "bench: %s\n", err.msg);
    free(ids);
    if (logits) e->be->free(e->be, logits);
    bs_kv_free(&kv);
    bs_engine_close(e);
    return rc;
}
