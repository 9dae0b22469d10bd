#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "harness.h"
#include "test_util_models.h"
#include "io/config.h"
#include "io/random_ckpt.h"
#include "spec/spec_loop.h"

const char *tu_make_target(int vocab, int hidden, int layers, int heads, int kv_heads, int head_dim, int inter,
                           int tied, int n_shards, uint64_t seed) {
    const char *dir = bs_test_tmpdir("test_target");
    if (!dir) return NULL;
    bs_qwen3_config c = { .vocab_size = vocab, .hidden_size = hidden, .n_layers = layers, .n_heads = heads,
        .n_kv_heads = kv_heads, .head_dim = head_dim, .intermediate_size = inter, .max_position = 4096,
        .rms_eps = 1e-6f, .rope_theta = 10000.0f, .tie_embeddings = tied, .bos_id = -1 };
    cJSON *j = bs_qwen3_config_to_json(&c);
    char *txt = cJSON_Print(j), path[512];
    cJSON_Delete(j);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) { free(txt); return NULL; }
    fputs(txt, f); fclose(f); free(txt);
    bs_tensor_spec *specs; int n; bs_err err;
    if (bs_qwen3_tensor_specs(&c, &specs, &n, &err)) return NULL;
    int rc = bs_write_random_tensors(dir, specs, n, n_shards, seed, &err);
    free(specs);
    if (rc) { fprintf(stderr, "  %s\n", err.msg); return NULL; }
    return dir;
}

// Regularised upper incomplete gamma Q(a, x), series for x < a+1, continued fraction otherwise.
static double gamma_q(double a, double x) {
    if (x <= 0) return 1.0;
    double gln = lgamma(a);
    if (x < a + 1) {
        double ap = a, sum = 1.0 / a, del = sum;
        for (int n = 0; n < 10000; n++) { ap += 1; del *= x / ap; sum += del; if (fabs(del) < fabs(sum) * 1e-15) break; }
        return 1.0 - sum * exp(-x + a * log(x) - gln);
    }
    double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
    for (int i = 1; i < 10000; i++) {
        double an = -i * (i - a);
        b += 2; d = an * d + b; if (fabs(d) < 1e-300) d = 1e-300;
        c = b + an / c; if (fabs(c) < 1e-300) c = 1e-300;
        d = 1 / d; double del = d * c; h *= del;
        if (fabs(del - 1) < 1e-15) break;
    }
    return exp(-x + a * log(x) - gln) * h;
}

double tu_chi2_sf(double x, int df) { return gamma_q(df / 2.0, x / 2.0); }

long tu_impossible_draws(const long *counts, const double *expect, int n) {
    long bad = 0;
    for (int i = 0; i < n; i++) if (expect[i] <= 0) bad += counts[i];
    return bad;
}

double tu_chi2_gof(const long *counts, const double *expect, int n, long total, int *df_out) {
    double chi = 0, acc_e = 0; long acc_c = 0; int cells = 0;
    const long impossible = tu_impossible_draws(counts, expect, n);
    for (int i = 0; i < n; i++) {
        acc_e += expect[i] * total; acc_c += counts[i];
        if (acc_e >= 5 || i == n - 1) {
            if (acc_e > 0) { chi += (acc_c - acc_e) * (acc_c - acc_e) / acc_e; cells++; }
            acc_e = 0; acc_c = 0;
        }
    }
    int df = cells > 1 ? cells - 1 : 1;
    if (df_out) *df_out = df;
    return impossible ? 0.0 : tu_chi2_sf(chi, df);
}

typedef struct { double v; int i; } ref_item;
static int ref_desc(const void *a, const void *b) {   // by value, descending; index breaks ties (stable)
    const ref_item *x = a, *y = b;
    return x->v < y->v ? 1 : x->v > y->v ? -1 : (x->i > y->i) - (x->i < y->i);
}

int tu_ref_probs(const bs_sampling *s, const float *logits, int V, double *out, double *boundary) {
    if (boundary) *boundary = INFINITY;
    for (int i = 0; i < V; i++) out[i] = 0;
    if (s->temperature <= 0) {
        int best = 0;
        for (int i = 1; i < V; i++) if (logits[i] > logits[best]) best = i;
        out[best] = 1;
        return 1;
    }
    ref_item *it = malloc(sizeof *it * V);
    if (!it) return -1;
    for (int i = 0; i < V; i++) it[i] = (ref_item){ (double)logits[i] / s->temperature, i };
    qsort(it, V, sizeof *it, ref_desc);
    int n = V;   // it[0..n) are the candidates, most likely first
    // Two values this close (but not equal) may round to one float in the sampler, which then keeps both.
#define NEAR_TIE(a, b) ((a) != (b) && fabs((a) - (b)) <= 1e-6 * fmax(fabs(a), fabs(b)))
    if (s->top_k > 0 && s->top_k < V) {
        n = s->top_k;
        while (n < V && it[n].v == it[s->top_k - 1].v) n++;   // ties with the k-th are kept
        if (boundary && n < V && NEAR_TIE(it[n].v, it[n - 1].v)) *boundary = 0;
    }
    const double mx = it[0].v;
    double z = 0;
    for (int r = 0; r < n; r++) z += exp(it[r].v - mx);
    for (int r = 0; r < n; r++) it[r].v = exp(it[r].v - mx) / z;   // still descending
    if (s->top_p > 0 && s->top_p < 1) {
        double acc = 0, before = 0;
        int m = 0;
        while (m < n) { before = acc; acc += it[m].v; m++; if (acc >= s->top_p) break; }
        while (m < n && it[m].v == it[m - 1].v) m++;   // ties with the last admitted token
        if (boundary) *boundary = fmin(*boundary, fmin(fabs(acc - s->top_p), fabs(before - s->top_p)));
        if (boundary && m < n && NEAR_TIE(it[m].v, it[m - 1].v)) *boundary = 0;
        n = m;
        z = 0;
        for (int r = 0; r < n; r++) z += it[r].v;
        for (int r = 0; r < n; r++) it[r].v /= z;
    }
#undef NEAR_TIE
    for (int r = 0; r < n; r++) out[it[r].i] = it[r].v;
    free(it);
    return n;
}

bs_backend *tu_cuda_open(const char **why) {
    static char msg[600];
    *why = NULL;
    if (getenv("BS_NO_CUDA_TESTS")) { *why = "BS_NO_CUDA_TESTS is set"; return NULL; }
    bs_err err = {0};
    bs_backend *be = bs_backend_cuda(0, &err);
    if (!be) { snprintf(msg, sizeof msg, "no CUDA backend: %s", err.msg); *why = msg; }
    return be;
}

const char *tu_cuda_unavailable(void) {
    const char *why;
    bs_backend *be = tu_cuda_open(&why);
    if (be) be->destroy(be);
    return why;
}

int tu_write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int bad = fputs(text, f) < 0;
    return fclose(f) || bad ? -1 : 0;
}

void tu_greedy_spec_equals_plain(int *failed_, const char *dev, const char *target, const char *drafter,
                                 const bs_drafter_opts *o, int trials, uint64_t seed) {
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, target, dev, &err) == 0, "%s", err.msg);
    int V = e->cfg.vocab_size;
    bs_rng rng; bs_rng_seed(&rng, seed);
    for (int t = 0; t < trials; t++) {
        int P = 1 + (int)(bs_rng_u64(&rng) % 30), N = 1 + (int)(bs_rng_u64(&rng) % 60);
        int32_t prompt[32], plain[64], spec[64];
        for (int i = 0; i < P; i++) prompt[i] = (int32_t)(bs_rng_u64(&rng) % V);
        bs_session s; bs_drafter *d = NULL; bs_spec_stats st;
        int n1, n2;
        CHECK(bs_session_init(&s, e, 256, NULL, &err) == 0, "%s", err.msg);
        CHECK(bs_generate_plain(&s, prompt, P, N, 0, plain, &n1, NULL, NULL, &err) == 0, "%s", err.msg);
        bs_kv_rollback(&s.kv, 0, &err);
        CHECK(bs_drafter_open_opts(&d, drafter, e, s.kv.max_ctx, o, &err) == 0, "%s", err.msg);
        bs_spec_opts so = { .draft_max = 1 + t % d->max_drafts };
        CHECK(bs_generate_spec(&s, d, prompt, P, N, &so, spec, &n2, NULL, NULL, &st, &err) == 0, "%s", err.msg);
        CHECK(n1 == N && n2 == N, "lengths %d %d, want %d", n1, n2, N);
        for (int i = 0; i < N; i++) CHECK(spec[i] == plain[i], "%s trial %d: token %d differs (spec %d, plain %d)", drafter, t, i, spec[i], plain[i]);
        bs_spec_stats_free(&st);
        d->free(d);
        bs_session_free(&s);
    }
    bs_engine_close(e);
}

bs_drafter *tu_drafter_with_context(bs_engine *e, const char *drafter, const bs_drafter_opts *o, bs_drafter_ctx *dc, const int32_t *prompt,
                                    int P, bs_err *err) {
    bs_drafter *d = NULL;
    if (bs_drafter_open_opts(&d, drafter, e, 64 + P, o, err)) return NULL;
    if (bs_drafter_ctx_init(d, dc, 64 + P, err)) { d->free(d); return NULL; }
    bs_kv_cache kv;
    int V = e->cfg.vocab_size, H = e->cfg.hidden_size, rc = -1;
    if (bs_kv_init(&kv, e->kv_pool, 64 + P, err)) { tu_drafter_free(d, dc); return NULL; }
    float *logits = e->be->alloc(e->be, sizeof(float) * P * V, err), *feat = logits ? e->be->alloc(e->be, sizeof(float) * P * d->n_taps * H, err) : NULL;
    if (feat) {
        bs_fwd_out fo = { .logits = logits, .taps = d->taps, .n_taps = d->n_taps, .tap_out = feat };
        rc = bs_qwen3_forward(&e->target, &kv, prompt, P, &fo, err) || d->add_context(d, dc, feat, P, err) ? -1 : 0;
    }
    if (logits) e->be->free(e->be, logits);
    if (feat) e->be->free(e->be, feat);
    bs_kv_free(&kv);
    if (rc) { tu_drafter_free(d, dc); return NULL; }
    return d;
}

// (See tests/test_util_models.h.)
double tu_spec_sampling_pvalue(bs_engine *e, bs_drafter *d, const bs_sampling *smp, long runs, double *accept_rate, long *impossible) {
    int V = e->cfg.vocab_size;
    int32_t prompt[3] = { 1, 5, 2 }, out[3];
    double *joint = malloc(sizeof(double) * V * V * V);
    long *counts = calloc((size_t)V * V * V, sizeof(long));
    bs_err err; bs_kv_cache kv; bs_kv_init(&kv, e->kv_pool, 64, &err);
    float *lg_be = e->be->alloc(e->be, sizeof(float) * V, &err);
    float *lg = malloc(sizeof(float) * V);
    double *p[3];
    for (int i = 0; i < 3; i++) p[i] = malloc(sizeof(double) * V);
    bs_fwd_out fo = { .logits = lg_be };
#define ROW_PROBS(dst) (e->be->download(e->be, lg, lg_be, sizeof(float) * V), tu_ref_probs(smp, lg, V, dst, NULL))
    bs_qwen3_forward(&e->target, &kv, prompt, 3, &fo, &err);
    ROW_PROBS(p[0]);
    for (int a = 0; a < V; a++) {
        bs_kv_rollback(&kv, 3, &err); bs_qwen3_forward(&e->target, &kv, &a, 1, &fo, &err);
        ROW_PROBS(p[1]);
        for (int b = 0; b < V; b++) {
            bs_kv_rollback(&kv, 4, &err); bs_qwen3_forward(&e->target, &kv, &b, 1, &fo, &err);
            ROW_PROBS(p[2]);
            for (int c = 0; c < V; c++) joint[(a * V + b) * V + c] = p[0][a] * p[1][b] * p[2][c];
        }
    }
#undef ROW_PROBS
    bs_session s;
    bs_sampling sm = *smp;
    bs_session_init(&s, e, 64, &sm, &err);
    long acc = 0, drafted = 0;
    for (long r = 0; r < runs; r++) {
        bs_rng_seed(&s.rng, 7919ull * r + 3);
        bs_kv_rollback(&s.kv, 0, &err);
        int n;
        if (d) {
            bs_spec_opts o = { 0 };
            bs_spec_stats st;
            if (bs_generate_spec(&s, d, prompt, 3, 3, &o, out, &n, NULL, NULL, &st, &err) || n != 3) { fprintf(stderr, "  %s\n", err.msg); return -1; }
            acc += st.accepted; drafted += st.drafted;
            bs_spec_stats_free(&st);
        } else if (bs_generate_plain(&s, prompt, 3, 3, 0, out, &n, NULL, NULL, &err) || n != 3) {
            fprintf(stderr, "  %s\n", err.msg); return -1;
        }
        counts[(out[0] * V + out[1]) * V + out[2]]++;
    }
    *accept_rate = drafted ? (double)acc / drafted : 0;
    int df;
    *impossible = tu_impossible_draws(counts, joint, V * V * V);
    double pv = tu_chi2_gof(counts, joint, V * V * V, runs, &df);
    bs_session_free(&s); bs_kv_free(&kv);
    for (int i = 0; i < 3; i++) free(p[i]);
    e->be->free(e->be, lg_be);
    free(lg); free(joint); free(counts);
    return pv;
}

int tu_make_random_from_config(const char *dir, const char *cfg, unsigned seed) {
    char path[1100], cmd[4096];
    snprintf(path, sizeof path, "%s.json", dir);
    if (tu_write_text(path, cfg)) return -1;
    snprintf(cmd, sizeof cmd, "%s make-random -c %s --out %s --seed %u >/dev/null", bs_cli_path(), path, dir, seed);
    return system(cmd) == 0 ? 0 : -1;
}

int tu_spec_acceptance(const char *dev, const char *target, const char *drafter, int vocab, int step, int n_new, long *accepted,
                       long *drafted, bs_err *err) {
    bs_engine *e;
    *accepted = *drafted = 0;
    if (n_new > 256 || bs_engine_open(&e, target, dev, err)) return -1;
    int rc = 0;
    for (int trial = 0; trial < 4 && !rc; trial++) {
        bs_session s; bs_drafter *dr; bs_spec_stats st;
        int32_t prompt[8], out[256]; int n;
        for (int i = 0; i < 8; i++) prompt[i] = (int32_t)((i * 5 + trial * step) % vocab);
        if (bs_session_init(&s, e, 256, NULL, err)) { rc = -1; break; }
        if (bs_drafter_open(&dr, drafter, e, s.kv.max_ctx, err)) { bs_session_free(&s); rc = -1; break; }
        bs_spec_opts so = { .draft_max = dr->max_drafts };
        rc = bs_generate_spec(&s, dr, prompt, 8, n_new, &so, out, &n, NULL, NULL, &st, err);
        if (!rc) { *accepted += st.accepted; *drafted += st.drafted; bs_spec_stats_free(&st); }
        dr->free(dr); bs_session_free(&s);
    }
    bs_engine_close(e);
    return rc;
}
