// MLX affine weights (docs/quantization.md): the format against its documented formula, the kernels
// against dequantise-then-multiply within the documented bound, row invariance, the loader's bad-input
// errors, `blockspec quantize`, and greedy speculative == plain greedy on quantised built-in models.
//
// The kernel bound (docs/quantization.md): with y_ref = sum_k (s_g q_k + b_g) x_k in double and
// M = sum_g (|s_g| sum_{k in g} |q_k x_k| + |b_g| sum_{k in g} |x_k|), every CPU path keeps
// |y - y_ref| <= (K + 8) * 2^-24 * M: each of the K products reaches y through at most K + 8 fp32 roundings
// (the classical recursive-summation bound; the per-group split adds two per group but sums only G + 64
// terms in a chain). The test prints the worst observed fraction of the bound.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "harness.h"
#include "test_util_models.h"
#include "backend/affine.h"
#include "backend/cpu/cpu.h"
#include "io/quant_config.h"
#include "io/quantize_ckpt.h"
#include "io/safetensors.h"
#include "util/rng.h"

static float urand(bs_rng *r) { return (float)(bs_rng_uniform(r) * 2 - 1); }

// A random affine matrix: random codes (every bit pattern, top bits included), scales of both signs, biases.
typedef struct { bs_mat m; uint32_t *codes; void *scales, *biases; } qmat;
static void qmat_make(qmat *q, bs_rng *r, int64_t rows, int64_t cols, int bits, int group, bs_dtype dt) {
    int64_t words = cols * bits / 32, G = cols / group;
    q->codes = malloc(sizeof(uint32_t) * rows * words);
    q->scales = malloc(4 * rows * G); q->biases = malloc(4 * rows * G);
    for (int64_t i = 0; i < rows * words; i++) q->codes[i] = (uint32_t)bs_rng_u64(r);
    for (int64_t i = 0; i < rows * G; i++) {
        float s = urand(r) * 0.1f, b = urand(r);
        if (dt == BS_F32) { ((float *)q->scales)[i] = s; ((float *)q->biases)[i] = b; }
        else { ((uint16_t *)q->scales)[i] = bs_f32_to_bf16(s); ((uint16_t *)q->biases)[i] = bs_f32_to_bf16(b); }
    }
    q->m = (bs_mat){ .data = q->codes, .dtype = dt, .rows = rows, .cols = cols, .format = BS_WFMT_AFFINE, .bits = bits, .group = group,
                     .scales = q->scales, .biases = q->biases };
}
static void qmat_free(qmat *q) { free(q->codes); free(q->scales); free(q->biases); }

// Code k of row r read byte-wise, independently of bs_affine_code: little-endian words, so 4-bit element
// 2j is byte j's low nibble and 2j + 1 its high nibble; 8-bit element j is byte j.
static unsigned code_bytewise(const qmat *q, int64_t r, int64_t k) {
    const uint8_t *row = (const uint8_t *)q->codes + r * (q->m.cols * q->m.bits / 8);
    return q->m.bits == 8 ? row[k] : (k & 1 ? row[k / 2] >> 4 : row[k / 2] & 15);
}
static double param(const qmat *q, const void *p, size_t i) { return bs_load_elem(p, q->m.dtype, i); }

TEST(quant_affine_formula_random) {
    bs_rng r; bs_rng_seed(&r, 7);
    for (int bits = 4; bits <= 8; bits += 4)
        for (int group = 32; group <= 128; group *= 2)
            for (int dt = 0; dt < 2; dt++) {
                qmat q; qmat_make(&q, &r, 9, 256, bits, group, dt ? BS_BF16 : BS_F32);
                float *row = malloc(sizeof(float) * 256);
                for (int64_t o = 0; o < 9; o++) {
                    bs_mat_row_f32(&q.m, o, row);
                    for (int64_t k = 0; k < 256; k++) {
                        size_t g = (size_t)o * (256 / group) + k / group;
                        unsigned c = code_bytewise(&q, o, k);
                        CHECK(c == bs_affine_code(q.codes + o * (256 * bits / 32), bits, k), "bits %d: code %lld of row %lld", bits, (long long)k, (long long)o);
                        float want = (float)((double)(float)param(&q, q.scales, g) * c + param(&q, q.biases, g));   // exact product, one rounding
                        CHECK(row[k] == want && bs_mat_elem(&q.m, o, k) == want, "bits %d group %d: (%lld, %lld) = %g, formula %g", bits, group,
                              (long long)o, (long long)k, row[k], want);
                    }
                }
                free(row); qmat_free(&q);
            }
}

// MLX's packing (docs and tests): hand-built words, and the documented properties of quantize (its tests:
// |w - w_hat| <= |scale| + 1e-6 per group, not |scale| / 2: moving the scale so the dominant end is exact at
// code 0 can leave the far end up to one step outside the codes' range; zeros dequantise to exactly 0).
TEST(quant_affine_packing_examples) {
    uint32_t w4[8] = { 0x76543210u, 0xfedcba98u, 0, 0, 0, 0, 0, 0 }, w8[16] = { 0x04030201u, 0xff80007fu };
    for (int k = 0; k < 16; k++) CHECK(bs_affine_code(w4, 4, k) == (unsigned)k, "4-bit code %d = %u", k, bs_affine_code(w4, 4, k));
    unsigned e8[8] = { 1, 2, 3, 4, 0x7f, 0, 0x80, 0xff };
    for (int k = 0; k < 8; k++) CHECK(bs_affine_code(w8, 8, k) == e8[k], "8-bit code %d = %u", k, bs_affine_code(w8, 8, k));
    float sc = -0.5f, bi = 3.0f;
    bs_mat m = { .data = w4, .dtype = BS_F32, .rows = 1, .cols = 64, .format = BS_WFMT_AFFINE, .bits = 4, .group = 64, .scales = &sc, .biases = &bi };
    for (int k = 0; k < 16; k++) CHECK(bs_mat_elem(&m, 0, k) == 3.0f - 0.5f * k, "element %d = %g", k, bs_mat_elem(&m, 0, k));
    bs_rng r; bs_rng_seed(&r, 3);
    for (int bits = 4; bits <= 8; bits += 4)
        for (int group = 32; group <= 128; group *= 2) {
            enum { K = 512 };
            float w[K], s[K / 32], b[K / 32], z[K] = { 0 };
            uint32_t codes[K / 4];
            for (int i = 0; i < K; i++) w[i] = urand(&r) * (i % 7 == 0 ? 3.0f : 1.0f);
            bs_affine_quantize_row(w, K, bits, group, codes, s, b);
            bs_mat q = { .data = codes, .dtype = BS_F32, .rows = 1, .cols = K, .format = BS_WFMT_AFFINE, .bits = bits, .group = group, .scales = s, .biases = b };
            for (int i = 0; i < K; i++) {
                float err = fabsf(w[i] - bs_mat_elem(&q, 0, i)), step = fabsf(s[i / group]);
                CHECK(err <= step + 1e-6f, "bits %d group %d: |w - w_hat| = %g > |scale| = %g at %d", bits, group, err, step, i);
            }
            for (int g = 0; g < K / group; g++) {   // the larger-magnitude end of each group is exact at code 0
                float lo = w[g * group], hi = lo;
                for (int i = 0; i < group; i++) { lo = fminf(lo, w[g * group + i]); hi = fmaxf(hi, w[g * group + i]); }
                CHECK(b[g] == (fabsf(lo) > fabsf(hi) ? lo : hi), "group %d: bias %g is not the dominant end", g, b[g]);
            }
            bs_affine_quantize_row(z, K, bits, group, codes, s, b);
            for (int i = 0; i < K; i++) CHECK(bs_mat_elem(&q, 0, i) == 0.0f, "zeros: element %d = %g", i, bs_mat_elem(&q, 0, i));
        }
}

// y_ref in double and the bound's M for (weight row o, activation row x).
static void ref_dot(const qmat *q, int64_t o, const float *x, double *y, double *M) {
    int64_t K = q->m.cols, G = K / q->m.group;
    *y = 0; *M = 0;
    for (int64_t g = 0; g < G; g++) {
        double s = param(q, q->scales, (size_t)(o * G + g)), b = param(q, q->biases, (size_t)(o * G + g)), sq = 0, sx = 0;
        for (int64_t k = g * q->m.group; k < (g + 1) * q->m.group; k++) {
            unsigned c = code_bytewise(q, o, k);
            *y += (s * c + b) * x[k];
            sq += fabs((double)c * x[k]); sx += fabs(x[k]);
        }
        *M += fabs(s) * sq + fabs(b) * sx;
    }
}

static bs_backend *path_be(int p) {   // -1: the reference backend (cpu-ref)
    if (p < 0) return bs_backend_cpu(1);
    if (!bs_cpu_path_supported(p)) { printf("  path %s: not supported by this CPU, skipped\n", bs_cpu_path_name(p)); return NULL; }
    bs_backend *be = bs_backend_cpu(1);
    bs_cpu_install_path(be, p);
    return be;
}

TEST(quant_kernel_vs_dequant) {
    bs_rng r; bs_rng_seed(&r, 11);
    const int O = 37;   // not a multiple of any block's weight rows: every tail shape runs
    for (int p = -1; p < BS_CPU_N_PATHS; p++) {
        bs_backend *be = path_be(p);
        if (!be) continue;
        double worst = 0;
        for (int bits = 4; bits <= 8; bits += 4)
            for (int group = 32; group <= 128; group *= 2) {
                const int K = 384;
                qmat q; qmat_make(&q, &r, O, K, bits, group, (bits + group) % 3 ? BS_BF16 : BS_F32);
                float *x = malloc(sizeof(float) * 32 * K), *y = malloc(sizeof(float) * 32 * O);
                for (int i = 0; i < 32 * K; i++) x[i] = urand(&r);
                for (int n = 1; n <= 32; n += (n < 8 ? 1 : 5)) {
                    be->matmul(be, y, x, n, &q.m, 0);
                    for (int i = 0; i < n; i++)
                        for (int o = 0; o < O; o++) {
                            double yr, M;
                            ref_dot(&q, o, x + (size_t)i * K, &yr, &M);
                            double bound = (K + 8) * 0x1p-24 * M, e = fabs(y[(size_t)i * O + o] - yr);
                            CHECK(e <= bound, "path %s bits %d group %d n %d: row %d col %d: |%g - %g| = %g > bound %g",
                                  p < 0 ? "ref" : bs_cpu_path_name(p), bits, group, n, i, o, y[(size_t)i * O + o], yr, e, bound);
                            if (bound > 0 && e / bound > worst) worst = e / bound;
                        }
                }
                free(x); free(y); qmat_free(&q);
            }
        printf("  path %s: worst error %.3g of the bound\n", p < 0 ? "ref" : bs_cpu_path_name(p), worst);
        be->destroy(be);
    }
}

// A row's result never depends on how many rows share the call (verify blocks reproduce decode steps),
// and matmul_multi equals separate matmuls; embed equals the dequantised rows.
TEST(quant_row_invariance_and_embed) {
    bs_rng r; bs_rng_seed(&r, 5);
    for (int p = -1; p < BS_CPU_N_PATHS; p++) {
        bs_backend *be = path_be(p);
        if (!be) continue;
        for (int bits = 4; bits <= 8; bits += 4) {
            const int K = 256, O = 50, N = 32;
            qmat a, b; qmat_make(&a, &r, O, K, bits, 64, BS_BF16); qmat_make(&b, &r, O + 3, K, bits, 64, BS_BF16);
            float *x = malloc(sizeof(float) * N * K), *y1 = malloc(sizeof(float) * N * (O + 3)), *yn = malloc(sizeof(float) * N * (O + 3));
            float *y2 = malloc(sizeof(float) * N * (O + 3));
            for (int i = 0; i < N * K; i++) x[i] = urand(&r);
            for (int i = 0; i < N; i++) be->matmul(be, y1 + (size_t)i * O, x + (size_t)i * K, 1, &a.m, 0);
            for (int n = 2; n <= N; n++) {
                be->matmul(be, yn, x, n, &a.m, 0);
                CHECK(!memcmp(y1, yn, sizeof(float) * n * O), "path %s bits %d: %d rows differ from one-row calls", p < 0 ? "ref" : bs_cpu_path_name(p), bits, n);
            }
            const bs_mat *W[2] = { &a.m, &b.m };
            float *ys[2] = { yn, y2 };
            bs_matmul_multi(be, 2, ys, x, 7, W, 0);
            be->matmul(be, y1, x, 7, &b.m, 0);
            CHECK(!memcmp(y1, y2, sizeof(float) * 7 * (O + 3)), "matmul_multi differs from matmul");
            int32_t ids[3] = { 0, 49, 17 };
            float *row = malloc(sizeof(float) * K);
            be->embed(be, yn, &a.m, ids, 3);
            for (int i = 0; i < 3; i++) {
                bs_mat_row_f32(&a.m, ids[i], row);
                CHECK(!memcmp(row, yn + (size_t)i * K, sizeof(float) * K), "embed row %d", i);
            }
            free(row); free(x); free(y1); free(yn); free(y2); qmat_free(&a); qmat_free(&b);
        }
        be->destroy(be);
    }
}

// The AVX-512 affine kernel computes the AVX2 kernel's results bit for bit (cpu_matmul_affine_avx512.c).
TEST(quant_avx512_equals_avx2) {
    if (!bs_cpu_path_supported(BS_CPU_AVX512)) SKIP("this CPU has no AVX-512");
    bs_backend *a2 = path_be(BS_CPU_AVX2), *a5 = path_be(BS_CPU_AVX512);
    bs_rng r; bs_rng_seed(&r, 21);
    for (int bits = 4; bits <= 8; bits += 4)
        for (int group = 32; group <= 128; group *= 2) {
            const int K = 512, O = 61;
            qmat q; qmat_make(&q, &r, O, K, bits, group, BS_BF16);
            float *x = malloc(sizeof(float) * 32 * K), *y2 = malloc(sizeof(float) * 32 * O), *y5 = malloc(sizeof(float) * 32 * O);
            for (int i = 0; i < 32 * K; i++) x[i] = urand(&r);
            for (int n = 1; n <= 32; n++) {
                a2->matmul(a2, y2, x, n, &q.m, 0);
                a5->matmul(a5, y5, x, n, &q.m, 0);
                CHECK(!memcmp(y2, y5, sizeof(float) * n * O), "bits %d group %d n %d: avx512 differs from avx2", bits, group, n);
            }
            free(x); free(y2); free(y5); qmat_free(&q);
        }
    a2->destroy(a2); a5->destroy(a5);
}

// ---- loader: bad input ----

// A safetensors checkpoint in memory with one quantised matrix "m.weight" [R][K] and the given deviations.
typedef struct { const char *wdtype; int64_t wshape[2]; const char *sdtype; int64_t sshape[2]; const char *bdtype; int no_biases; } bad_case;
static int open_case(bs_checkpoint **ck, const bad_case *c, void **buf, bs_err *err) {
    bs_st_writer *w = bs_st_writer_new();
    static uint8_t zeros[1 << 16];
    bs_st_writer_add(w, "m.weight", c->wdtype, 2, c->wshape, zeros, err);
    bs_st_writer_add(w, "m.scales", c->sdtype, 2, c->sshape, zeros, err);
    if (!c->no_biases) bs_st_writer_add(w, "m.biases", c->bdtype ? c->bdtype : c->sdtype, 2, c->sshape, zeros, err);
    char path[512];
    snprintf(path, sizeof path, "%s/m.safetensors", bs_test_tmpdir("quant_bad"));
    int rc = bs_st_writer_write(w, path, err);
    bs_st_writer_free(w);
    return rc ? rc : bs_checkpoint_open(ck, path, err);
}

static int parse_qc(bs_quant_config *qc, const char *json, bs_err *err) {
    cJSON *root = cJSON_Parse(json);
    int rc = bs_quant_config_parse(qc, root, "config.json", err);
    cJSON_Delete(root);
    return rc;
}

TEST(quant_loader_bad_input) {
    bs_quant_config qc;
    bs_err err = {0};
    CHECK(parse_qc(&qc, "{\"quantization\": {\"group_size\": 64, \"bits\": 4}}", &err) == 0, "%s", err.msg);
    struct { bad_case c; int64_t rows, cols; const char *want[2]; } cases[] = {
        { { "U32", { 16, 16 }, "BF16", { 16, 2 } }, 16, 128, { NULL, NULL } },                            // well-formed: loads
        { { "U32", { 16, 32 }, "BF16", { 16, 2 } }, 16, 128, { "has shape [16, 32], expected [16, 16]", "m.weight" } },   // 8-bit codes, config says 4
        { { "U32", { 16, 12 }, "BF16", { 16, 1 } }, 16, 96, { "group_size 64", "does not divide its input width 96" } },
        { { "U32", { 16, 16 }, "I32", { 16, 2 } }, 16, 128, { "m.scales", "dtype I32" } },
        { { "U32", { 16, 16 }, "BF16", { 16, 4 } }, 16, 128, { "m.scales", "expected [16, 2]" } },
        { { "U32", { 16, 16 }, "BF16", { 16, 2 }, "F16" }, 16, 128, { "m.biases", "share one dtype" } },
        { { "U32", { 16, 16 }, "BF16", { 16, 2 }, NULL, 1 }, 16, 128, { "missing tensor 'm.biases'", NULL } },
        { { "BF16", { 16, 128 }, "BF16", { 16, 2 } }, 16, 128, { "m.weight", "stores its codes as U32" } },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        bs_checkpoint *ck; void *buf = NULL;
        CHECK(open_case(&ck, &cases[i].c, &buf, &err) == 0, "case %zu: %s", i, err.msg);
        bs_mat m;
        err.msg[0] = 0;
        int rc = bs_checkpoint_weight(ck, &qc, "m.weight", cases[i].rows, cases[i].cols, &m, &err);
        if (!cases[i].want[0]) {
            CHECK(rc == 0 && m.format == BS_WFMT_AFFINE && m.bits == 4 && m.group == 64, "case %zu: %s", i, err.msg);
        } else {
            CHECK(rc != 0, "case %zu: loaded", i);
            for (int k = 0; k < 2; k++) CHECK(!cases[i].want[k] || strstr(err.msg, cases[i].want[k]), "case %zu: message '%s' lacks '%s'", i, err.msg, cases[i].want[k]);
            printf("  case %zu: %s\n", i, err.msg);
        }
        // without a quantization block, and with the module overridden to false: refused, naming the block
        if (i == 0) {
            bs_quant_config none = { 0 }, off;
            CHECK(bs_checkpoint_weight(ck, &none, "m.weight", 16, 128, &m, &err) != 0 && strstr(err.msg, "no \"quantization\" block"), "%s", err.msg);
            CHECK(parse_qc(&off, "{\"quantization\": {\"group_size\": 64, \"bits\": 4, \"m\": false}}", &err) == 0, "%s", err.msg);
            CHECK(bs_checkpoint_weight(ck, &off, "m.weight", 16, 128, &m, &err) != 0 && strstr(err.msg, "not quantised"), "%s", err.msg);
            bs_quant_config_free(&off);
            CHECK(bs_checkpoint_mat(ck, "m.weight", 16, 16, &m, &err) != 0 && strstr(err.msg, "affine-quantised"), "%s", err.msg);
        }
        bs_checkpoint_close(ck);
    }
    bs_quant_config_free(&qc);
    // the block itself
    const char *bad[][2] = {
        { "{\"quantization\": {\"group_size\": 64, \"bits\": 3}}", "bits must be 4 or 8" },
        { "{\"quantization\": {\"group_size\": 48, \"bits\": 4}}", "group_size must be 32, 64 or 128" },
        { "{\"quantization\": {\"group_size\": 64, \"bits\": 4, \"mode\": \"mxfp4\"}}", "mode \"mxfp4\"" },
        { "{\"quantization\": {\"bits\": 4}}", "missing \"group_size\"" },
        { "{\"quantization\": [4]}", "must be an object" },
        { "{\"quantization_config\": {\"group_size\": 64, \"bits\": 4, \"lm_head\": {\"bits\": 2}}}", "\"lm_head\": bits must be 4 or 8" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(parse_qc(&qc, bad[i][0], &err) != 0 && strstr(err.msg, bad[i][1]) && strstr(err.msg, "config.json"), "%s: '%s'", bad[i][0], err.msg);
        bs_quant_config_free(&qc);
    }
    CHECK(parse_qc(&qc, "{\"quantization\": {\"group_size\": 64, \"bits\": 4, \"a.b\": {\"bits\": 8}}}", &err) == 0, "%s", err.msg);
    int bits, group;
    CHECK(bs_quant_config_for(&qc, "a.b", &bits, &group) == 1 && bits == 8 && group == 64);
    CHECK(bs_quant_config_for(&qc, "a.c", &bits, &group) == 1 && bits == 4 && group == 64);
    bs_quant_config_free(&qc);
}

// Random edits of a valid block: parsing either succeeds with values in range or fails naming the file.
TEST(quant_config_fuzz) {
    const char *base = "{\"quantization\": {\"group_size\": 64, \"bits\": 4, \"mode\": \"affine\", \"model.layers.0.mlp.down_proj\": {\"bits\": 8}, \"lm_head\": false}}";
    const char alphabet[] = "{}[]\":,0123456789-.eEtruefalsnl abxyz\\";
    bs_rng r; bs_rng_seed(&r, 99);
    size_t L = strlen(base);
    char *s = malloc(L + 64);
    int parsed = 0, ok = 0;
    for (int it = 0; it < 20000; it++) {
        memcpy(s, base, L + 1);
        int edits = 1 + (int)(bs_rng_u64(&r) % 4);
        size_t n = L;
        for (int e = 0; e < edits; e++) {
            size_t at = bs_rng_u64(&r) % n;
            int kind = (int)(bs_rng_u64(&r) % 3);
            char ch = alphabet[bs_rng_u64(&r) % (sizeof alphabet - 1)];
            if (kind == 0) s[at] = ch;
            else if (kind == 1 && n > 1) { memmove(s + at, s + at + 1, n - at); n--; }
            else if (n < L + 60) { memmove(s + at + 1, s + at, n - at + 1); s[at] = ch; n++; }
        }
        cJSON *root = cJSON_Parse(s);
        if (!root) continue;
        parsed++;
        bs_quant_config qc; bs_err err = {0};
        if (bs_quant_config_parse(&qc, root, "fuzz/config.json", &err) == 0) {
            ok++;
            if (qc.present) CHECK((qc.bits == 4 || qc.bits == 8) && (qc.group == 32 || qc.group == 64 || qc.group == 128), "%s", s);
            for (int i = 0; i < qc.n; i++)
                CHECK(qc.over[i].bits == 0 || ((qc.over[i].bits == 4 || qc.over[i].bits == 8) && qc.over[i].group >= 32), "%s", s);
            bs_quant_config_free(&qc);
        } else CHECK(strstr(err.msg, "fuzz/config.json"), "message does not name the file: %s", err.msg);
        cJSON_Delete(root);
    }
    printf("  %d mutants parsed as JSON, %d accepted\n", parsed, ok);
    CHECK(parsed > 1000 && ok > 100, "too few useful mutants (%d, %d)", parsed, ok);
    free(s);
}

// ---- end to end on the built-in model ----

static void quantize_builtin(int *failed_, int bits, const char **t, const char **d) {
    static char tp[2][512], dp[2][512];
    int i = bits == 8;
    bs_err err = {0};
    snprintf(tp[i], sizeof tp[i], "%s/t", bs_test_tmpdir("quant_e2e"));
    snprintf(dp[i], sizeof dp[i], "%s/d", bs_test_tmpdir("quant_e2e_d"));
    int n = 0;
    CHECK(bs_quantize_checkpoint("models/blockspec-30m", tp[i], bits, 64, &n, &err) == 0 && n > 0, "%s", err.msg);
    CHECK(bs_quantize_checkpoint("models/blockspec-30m-dspark", dp[i], bits, 64, &n, &err) == 0 && n > 0, "%s", err.msg);
    *t = tp[i]; *d = dp[i];
}

TEST(quant_greedy_spec_equals_plain) {
    if (access("models/blockspec-30m/config.json", F_OK)) SKIP("models/blockspec-30m is not here (run from the repository root)");
    for (int bits = 4; bits <= 8; bits += 4) {
        const char *t = NULL, *d = NULL;
        quantize_builtin(failed_, bits, &t, &d);
        if (*failed_) return;
        // every kernel path (the engine's "cpu" follows BS_CPU_KERNELS), then the reference backend
        for (int p = 0; p < BS_CPU_N_PATHS; p++) {
            if (!bs_cpu_path_supported(p)) { printf("  path %s: not supported by this CPU, skipped\n", bs_cpu_path_name(p)); continue; }
            setenv("BS_CPU_KERNELS", bs_cpu_path_name(p), 1);
            tu_greedy_spec_equals_plain(failed_, "cpu", t, d, NULL, p == BS_CPU_SCALAR || p == BS_CPU_AVX512BF16 ? 1 : 2, 100 + bits);
            if (p != BS_CPU_SCALAR) tu_greedy_spec_equals_plain(failed_, "cpu", t, "models/blockspec-30m-dspark", NULL, 1, 200 + bits);   // bf16 drafter
            unsetenv("BS_CPU_KERNELS");
            if (*failed_) { printf("  path %s, %d bits\n", bs_cpu_path_name(p), bits); return; }
        }
        if (bits == 4) tu_greedy_spec_equals_plain(failed_, "cpu-ref", t, d, NULL, 1, 300 + bits);
        if (*failed_) return;
        // a draft vocabulary: the drafter gathers rows of the target's quantised (tied) LM head
        char vpath[700], list[32768];
        snprintf(vpath, sizeof vpath, "%s/dv.json", bs_test_tmpdir("quant_dv"));
        size_t l = 0;
        list[l++] = '[';
        for (int id = 0; id < 8192; id += 3) l += (size_t)snprintf(list + l, sizeof list - l, "%s%d", id ? "," : "", id);
        snprintf(list + l, sizeof list - l, "]");
        CHECK(tu_write_text(vpath, list) == 0, "cannot write %s", vpath);
        bs_drafter_opts o = { .lossy_weights = 0, .draft_vocab = vpath };
        tu_greedy_spec_equals_plain(failed_, "cpu", t, d, &o, 2, 400 + bits);
        if (*failed_) return;
    }
}

// The CLI: a bf16 folder in, an MLX-layout folder out that loads; bad flags and a second quantisation refused.
TEST(quant_cli) {
    if (access("models/blockspec-30m/config.json", F_OK)) SKIP("models/blockspec-30m is not here (run from the repository root)");
    const char *dir = bs_test_tmpdir("quant_cli");
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof cmd, "%s quantize -m models/blockspec-30m --bits 3 --out %s/x", bs_cli_path(), dir);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 2 && strstr(out, "--bits must be 4 or 8"), "%s", out);
    snprintf(cmd, sizeof cmd, "%s quantize -m models/blockspec-30m --bits 4 --out %s/q4", bs_cli_path(), dir);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 0, "%s", out);
    char path[1024];
    snprintf(path, sizeof path, "%s/q4/config.json", dir);
    bs_quant_config qc; bs_err err = {0};
    snprintf(path, sizeof path, "%s/q4", dir);
    CHECK(bs_quant_config_load(&qc, path, &err) == 0 && qc.present && qc.bits == 4 && qc.group == 64, "%s", err.msg);
    bs_quant_config_free(&qc);
    snprintf(path, sizeof path, "%s/q4/tokenizer.json", dir);
    CHECK(access(path, F_OK) == 0, "tokenizer.json not copied");
    bs_checkpoint *ck;
    snprintf(path, sizeof path, "%s/q4", dir);
    CHECK(bs_checkpoint_open(&ck, path, &err) == 0, "%s", err.msg);
    const bs_tensor_info *w = bs_checkpoint_find(ck, "model.layers.0.mlp.down_proj.weight"), *s = bs_checkpoint_find(ck, "model.layers.0.mlp.down_proj.scales");
    CHECK(w && s && !strcmp(w->dtype_name, "U32") && w->shape[0] == 512 && w->shape[1] == 1536 / 8, "down_proj codes");
    CHECK(!strcmp(s->dtype_name, "BF16") && s->shape[1] == 1536 / 64, "down_proj scales");
    CHECK(bs_checkpoint_find(ck, "model.norm.weight") && !bs_checkpoint_find(ck, "model.norm.scales"), "norms stay float");
    bs_checkpoint_close(ck);
    snprintf(cmd, sizeof cmd, "%s generate -m %s/q4 -d none -p 'static int' -n 8", bs_cli_path(), dir);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 0, "%s", out);
    snprintf(cmd, sizeof cmd, "%s quantize -m %s/q4 --bits 8 --out %s/qq", bs_cli_path(), dir, dir);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 1 && strstr(out, "already quantised"), "%s", out);
    // a folder whose config disagrees with its codes: the error names the tensor and the expected shape
    snprintf(cmd, sizeof cmd, "sed -i 's/\"bits\":\\s*4/\"bits\": 8/' %s/q4/config.json && %s generate -m %s/q4 -d none -p x -n 2", dir, bs_cli_path(), dir);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) != 0 && strstr(out, "model.embed_tokens.weight") && strstr(out, "expected [8192, 128]"), "%s", out);
}
