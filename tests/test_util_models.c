#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "harness.h"
#include "test_util_models.h"
#include "io/config.h"
#include "io/random_ckpt.h"

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

double tu_chi2_gof(const long *counts, const double *expect, int n, long total, int *df_out) {
    double chi = 0, acc_e = 0; long acc_c = 0; int cells = 0;
    for (int i = 0; i < n; i++) {
        acc_e += expect[i] * total; acc_c += counts[i];
        if (acc_e >= 5 || i == n - 1) {
            if (acc_e > 0) { chi += (acc_c - acc_e) * (acc_c - acc_e) / acc_e; cells++; }
            else if (acc_c > 0) chi += 1e30;   // observed an impossible outcome
            acc_e = 0; acc_c = 0;
        }
    }
    int df = cells > 1 ? cells - 1 : 1;
    if (df_out) *df_out = df;
    return tu_chi2_sf(chi, df);
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
