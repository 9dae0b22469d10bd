// Confidence calibration (docs/calibration.md): the STS fit on synthetic rounds with known temperatures and on
// degenerate data; the recorded rounds against the speculative loop's own verdicts; the drafter applying
// calibration.json (and refusing bad ones, naming the file and field); `blockspec calibrate` end to end, with
// generate's output unchanged by the calibrated confidence cut.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "harness.h"
#include "test_util_models.h"
#include "io/calibration.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "model/dflash.h"
#include "spec/calib_rounds.h"
#include "spec/spec_loop.h"
#include "spec/sts.h"
#include "util/rng.h"

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

// Rounds whose outcomes follow sigmoid(z_k / T_true[k]) position by position: STS must find T_true.
TEST(calibrate_sts_recovers_known_temperatures) {
    enum { N = 40000, K = 5 };
    const double T_true[K] = { 0.5, 2.0, 1.3, 0.8, 3.0 };
    float *z = malloc(sizeof(float) * N * K);
    uint8_t *y = malloc(N * K);
    int *nv = malloc(sizeof(int) * N);
    bs_rng rng; bs_rng_seed(&rng, 42);
    for (int r = 0; r < N; r++) {
        int alive = 1;
        nv[r] = r % 10 == 0 ? 3 : K;   // some rounds end early (an accepted end-of-sequence draft)
        for (int k = 0; k < K; k++) {
            // z ~ N(1.5, 2): an overconfident or underconfident head depending on T_true
            double u1 = bs_rng_uniform(&rng) + 1e-12, u2 = bs_rng_uniform(&rng);
            z[r * K + k] = (float)(1.5 + 2.0 * sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
            alive = alive && bs_rng_uniform(&rng) < sigm(z[r * K + k] / T_true[k]);
            y[r * K + k] = (uint8_t)alive;
        }
    }
    bs_sts_data d = { N, K, z, y, nv };
    double T[K];
    bs_sts_pos pos[K];
    bs_err err;
    bs_sts_opts so = { 30, 10, 0 };
    CHECK(bs_sts_fit(&d, &so, T, NULL, pos, &err) == 0, "%s", err.msg);
    for (int k = 0; k < K; k++) {
        printf("  position %d: T %.3f (true %.3f), n %d, survival %.3f, ECE %.2f%% -> %.2f%%\n", k + 1, T[k], T_true[k], pos[k].n,
               pos[k].survival, 100 * pos[k].ece_before, 100 * pos[k].ece_after);
        CHECK(pos[k].status == BS_STS_FITTED, "position %d: %s", k + 1, bs_sts_status_name(pos[k].status));
        CHECK(fabs(log(T[k] / T_true[k])) < 0.08, "position %d: T %.4f, true %.4f", k + 1, T[k], T_true[k]);
        CHECK(pos[k].ece_after < 0.015, "position %d: ECE after %.4f", k + 1, pos[k].ece_after);
        CHECK(pos[k].nll_after <= pos[k].nll_before + 1e-12);
        CHECK(pos[k].n == (k < 3 ? N : N - N / 10), "position %d counted %d rounds", k + 1, pos[k].n);
    }
    // Where the head was off (T far from 1) the ECE must fall clearly.
    CHECK(pos[0].ece_after < pos[0].ece_before / 2 && pos[1].ece_after < pos[1].ece_before / 2, "ECE %.4f -> %.4f, %.4f -> %.4f",
          pos[0].ece_before, pos[0].ece_after, pos[1].ece_before, pos[1].ece_after);
    // bs_sts_cumulative gives the products the fit scored.
    double *a = malloc(sizeof(double) * N);
    uint8_t *lab = malloc(N);
    int m = bs_sts_cumulative(&d, T, NULL, 4, a, lab);
    CHECK(m == N - N / 10);
    CHECK_NEAR(bs_sts_ece(a, lab, m, 10, NULL), pos[4].ece_after, 1e-12);
    free(a); free(lab); free(z); free(y); free(nv);
}

// The same with a bias per position (c = sigmoid(z / T + b)): --bias recovers both; temperature scaling alone
// cannot match a head whose logits sit on the wrong side of 0 (its ECE stays high), the bias fit can.
TEST(calibrate_sts_bias_recovers_known_offsets) {
    enum { N = 20000, K = 3 };
    const double T_true[K] = { 0.7, 1.5, 1.0 }, b_true[K] = { -1.5, 0.8, 2.0 };
    float *z = malloc(sizeof(float) * N * K);
    uint8_t *y = malloc(N * K);
    bs_rng rng; bs_rng_seed(&rng, 7);
    for (int r = 0; r < N; r++) {
        int alive = 1;
        for (int k = 0; k < K; k++) {
            double u1 = bs_rng_uniform(&rng) + 1e-12, u2 = bs_rng_uniform(&rng);
            z[r * K + k] = (float)(1.0 + 1.5 * sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
            alive = alive && bs_rng_uniform(&rng) < sigm(z[r * K + k] / T_true[k] + b_true[k]);
            y[r * K + k] = (uint8_t)alive;
        }
    }
    bs_sts_data d = { N, K, z, y, NULL };
    double T[K], B[K], T0[K];
    bs_sts_pos pos[K], pos0[K];
    bs_err err;
    bs_sts_opts so = { 30, 10, 1 };
    CHECK(bs_sts_fit(&d, &so, T, B, pos, &err) == 0, "%s", err.msg);
    so.fit_bias = 0;
    CHECK(bs_sts_fit(&d, &so, T0, NULL, pos0, &err) == 0, "%s", err.msg);
    for (int k = 0; k < K; k++) {
        printf("  position %d: T %.3f b %.3f (true %.3f, %.3f): ECE %.2f%% -> %.2f%% (temperature only: %.2f%%)\n", k + 1, T[k], B[k], T_true[k],
               b_true[k], 100 * pos[k].ece_before, 100 * pos[k].ece_after, 100 * pos0[k].ece_after);
        CHECK(pos[k].status == BS_STS_FITTED && !pos[k].at_bound, "position %d: %s", k + 1, bs_sts_status_name(pos[k].status));
        CHECK(fabs(log(T[k] / T_true[k])) < 0.1 && fabs(B[k] - b_true[k]) < 0.2, "position %d: T %.4f b %.4f", k + 1, T[k], B[k]);
        CHECK(pos[k].ece_after < 0.015 && pos[k].nll_after <= pos0[k].nll_after + 1e-9, "position %d", k + 1);
        CHECK(fabs(pos[k].mean_after - pos[k].survival) < 0.01, "position %d: mean %.4f vs survival %.4f", k + 1, pos[k].mean_after, pos[k].survival);
    }
    CHECK(pos0[0].ece_after > 0.03, "temperature scaling alone should not fit position 1 (ECE %.4f)", pos0[0].ece_after);
    free(z); free(y);
}

// Degenerate data: a clear status per position, T = 1, finite figures, never a NaN.
// The ECE's noise floor: one prediction p for every round is one bin, whose ECE is |observed rate - p|, so
// the floor is E|Binomial(n, p)/n - p| ~ sqrt(2 / pi) sqrt(p (1 - p) / n); certain predictions have none.
TEST(calibrate_ece_floor_matches_binomial) {
    enum { N = 20000 };
    static double a[N];
    for (int n = 200; n <= N; n *= 10) {
        for (int i = 0; i < n; i++) a[i] = 0.3;
        double sd, fl = bs_sts_ece_floor(a, n, 10, 400, 7, &sd);
        double want = sqrt(2 / M_PI) * sqrt(0.3 * 0.7 / n);
        CHECK(fabs(fl - want) < 0.12 * want, "n %d: floor %g, binomial %g", n, fl, want);
        CHECK(sd > 0 && sd < want, "n %d: sd %g", n, sd);
    }
    for (int i = 0; i < 1000; i++) a[i] = i % 2;
    double sd, fl = bs_sts_ece_floor(a, 1000, 10, 50, 1, &sd);
    CHECK(fl < 1e-6 && sd < 1e-6, "certain predictions: floor %g", fl);
    // Deterministic in its seed.
    for (int i = 0; i < 1000; i++) a[i] = (i % 97) / 97.0;
    CHECK(bs_sts_ece_floor(a, 1000, 10, 20, 3, NULL) == bs_sts_ece_floor(a, 1000, 10, 20, 3, NULL));
}

TEST(calibrate_sts_degenerate) {
    enum { N = 200, K = 3 };
    float z[N * K];
    uint8_t y[N * K];
    double T[K];
    bs_sts_pos pos[K];
    bs_err err;
    for (int i = 0; i < N * K; i++) z[i] = (float)((i % 7) - 3);
    struct { const char *what; int n_rounds, min_samples; int fill; bs_sts_status want; } cases[] = {
        { "no rounds", 0, 30, 0, BS_STS_NO_DATA },
        { "too few", 10, 30, 1, BS_STS_TOO_FEW },
        { "no survivors", N, 30, 0, BS_STS_NO_SURVIVORS },
        { "all survived", N, 30, 1, BS_STS_ALL_SURVIVED },
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        memset(y, cases[c].fill, sizeof y);
        bs_sts_data d = { cases[c].n_rounds, K, z, y, NULL };
        bs_sts_opts so = { cases[c].min_samples, 10, (int)(c % 2) };   // with and without a bias
        CHECK(bs_sts_fit(&d, &so, T, NULL, pos, &err) == 0, "%s: %s", cases[c].what, err.msg);
        for (int k = 0; k < K; k++) {
            CHECK(pos[k].status == cases[c].want, "%s, position %d: %s", cases[c].what, k + 1, bs_sts_status_name(pos[k].status));
            CHECK(T[k] == 1.0 && pos[k].b == 0, "%s: T %g, b %g", cases[c].what, T[k], pos[k].b);
            CHECK(isfinite(pos[k].ece_before) && isfinite(pos[k].ece_after) && isfinite(pos[k].nll_before) && isfinite(pos[k].nll_after),
                  "%s: a non-finite figure", cases[c].what);
        }
    }
    // All-zero logits: no temperature changes anything.
    for (int i = 0; i < N * K; i++) { z[i] = 0; y[i] = (i / K) % 3 == 0; }
    for (int r = 0; r < N; r++) for (int k = 1; k < K; k++) y[r * K + k] = y[r * K + k] && y[r * K + k - 1];
    bs_sts_data d = { N, K, z, y, NULL };
    bs_sts_opts so = { 30, 10, 0 };
    CHECK(bs_sts_fit(&d, &so, T, NULL, pos, &err) == 0, "%s", err.msg);
    CHECK(pos[0].status == BS_STS_FLAT && T[0] == 1.0, "%s", bs_sts_status_name(pos[0].status));
    // ... but a bias still fits their mean (1/3 of the rounds survive position 1), at T = 1.
    double B[K];
    so.fit_bias = 1;
    CHECK(bs_sts_fit(&d, &so, T, B, pos, &err) == 0, "%s", err.msg);
    CHECK(pos[0].status == BS_STS_FITTED && T[0] == 1.0 && fabs(sigm(B[0]) - pos[0].survival) < 1e-4, "%s, T %g, b %g",
          bs_sts_status_name(pos[0].status), T[0], B[0]);
    so.fit_bias = 0;
    // Survivors at position 1 only: position 1 fits, the later ones say why not.
    for (int i = 0; i < N * K; i++) z[i] = (float)((i % 5) - 2);
    for (int r = 0; r < N; r++) { y[r * K] = r % 2; y[r * K + 1] = y[r * K + 2] = 0; }
    CHECK(bs_sts_fit(&d, &so, T, NULL, pos, &err) == 0, "%s", err.msg);
    CHECK(pos[0].status == BS_STS_FITTED && pos[1].status == BS_STS_NO_SURVIVORS && pos[2].status == BS_STS_NO_SURVIVORS);
    CHECK(isfinite(T[0]) && T[0] > 0);
    // Bad arguments are errors, not crashes.
    bs_sts_data bad = { 5, 0, z, y, NULL };
    CHECK(bs_sts_fit(&bad, &so, T, NULL, pos, &err) == -1 && strstr(err.msg, "STS"), "%s", err.msg);
    CHECK(bs_sts_ece(NULL, NULL, 0, 10, NULL) == 0);
}

// Rewrites dir/model.safetensors: embed_tokens / lm_head taken from the target folder `head_from` (NULL: kept), and
// with zero_layers every layer's o_proj and down_proj zeroed, so the layers add nothing to the residual stream.
static int rewrite_weights(const char *dir, const char *head_from, int zero_layers) {
    bs_checkpoint *ck = NULL, *tk = NULL;
    bs_st_writer *w = bs_st_writer_new();
    bs_err err;
    char path[1024], final[1024];
    void *zeros[256];
    int nz = 0, rc = -1;
    snprintf(path, sizeof path, "%s/model.safetensors.new", dir);
    snprintf(final, sizeof final, "%s/model.safetensors", dir);
    if (!bs_checkpoint_open(&ck, dir, &err) && (!head_from || !bs_checkpoint_open(&tk, head_from, &err))) {
        rc = 0;
        for (int i = 0; i < ck->n_tensors && !rc; i++) {
            const bs_tensor_info *ti = &ck->tensors[i];
            const void *data = ti->data;
            if (tk && !strcmp(ti->name, "embed_tokens.weight")) data = bs_checkpoint_find(tk, "model.embed_tokens.weight")->data;
            if (tk && !strcmp(ti->name, "lm_head.weight")) data = bs_checkpoint_find(tk, "lm_head.weight")->data;
            if (zero_layers && (strstr(ti->name, "o_proj") || strstr(ti->name, "down_proj")) && nz < 256) data = zeros[nz++] = calloc(1, ti->nbytes);
            rc = bs_st_writer_add(w, ti->name, ti->dtype_name, ti->n_dims, ti->shape, data, &err);
        }
        rc = rc || bs_st_writer_write(w, path, &err);
    }
    bs_st_writer_free(w);
    for (int i = 0; i < nz; i++) free(zeros[i]);
    if (ck) bs_checkpoint_close(ck);
    if (tk) bs_checkpoint_close(tk);
    return rc == 0 && rename(path, final) == 0 ? 0 : -1;
}

// A random DSpark drafter (4 drafts per round) for a target folder, written by the CLI into target/dspark.
static const char *tiny_dspark(const char *target, int V, int H, int hd, int inter) {
    static char dir[600];
    char cfg[2048], path[700], cmd[2048];
    snprintf(dir, sizeof dir, "%s/dspark", target);
    snprintf(cfg, sizeof cfg, "{\"architectures\":[\"Qwen3DSparkModel\"],\"model_type\":\"qwen3\",\"hidden_size\":%d,"
             "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":%d,\"intermediate_size\":%d,"
             "\"num_hidden_layers\":2,\"vocab_size\":%d,\"rms_norm_eps\":1e-6,\"rope_parameters\":{\"rope_theta\":10000},"
             "\"block_size\":4,\"num_target_layers\":2,\"mask_token_id\":%d,\"target_layer_ids\":[0,1],\"markov_rank\":4,"
             "\"markov_head_type\":\"vanilla\",\"enable_confidence_head\":true,\"confidence_head_with_markov\":true}",
             H, hd, inter, V, V - 1);
    snprintf(path, sizeof path, "%s.json", dir);
    if (tu_write_text(path, cfg)) return NULL;
    snprintf(cmd, sizeof cmd, "%s make-random -c %s --out %s --seed 11 >/dev/null", bs_cli_path(), path, dir);
    if (system(cmd) != 0) return NULL;
    return dir;
}

// The recorded rounds are the engine's: on the target's own greedy text, the round at anchor a is the first
// round bs_generate_spec runs after the prompt ids[0..a) (same anchor, drafts and verify), so the number of
// leading survivors equals that round's accepted count, and the confidence logits are the drafter's.
TEST(calibrate_rounds_match_engine) {
    const int V = 12;
    const char *t = tu_make_target(V, 32, 2, 2, 1, 16, 64, 0, 1, 77);
    CHECK(t, "could not write the target");
    const char *dd = tiny_dspark(t, V, 32, 16, 64);
    CHECK(dd, "could not write the drafter");
    // Partial acceptance by construction: the target is a bigram model (its layers add nothing) and the
    // drafter's backbone passes its inputs through, with the target's own embedding and head, so its drafts
    // differ from the target's picks only by the Markov head's random bias (and the mask token's rows).
    CHECK(rewrite_weights(t, NULL, 1) == 0 && rewrite_weights(dd, t, 1) == 0, "could not rewrite the weights");
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, t, "cpu", &err) == 0, "%s", err.msg);
    // The text: random tokens, and at every even position from 4 on the target's greedy pick after the text
    // so far. Those positions are the anchors (mask 1): there the engine's anchor is the text's token.
    enum { S = 128 };
    int32_t seq[S];
    uint8_t mask[S] = {0};
    bs_session s;
    int n, n_anchor = 0;
    bs_rng trng; bs_rng_seed(&trng, 5);
    for (int i = 0; i < S; i++) {
        if (i < 4 || i % 2) { seq[i] = (int32_t)(bs_rng_u64(&trng) % V); continue; }
        CHECK(bs_session_init(&s, e, 256, NULL, &err) == 0, "%s", err.msg);
        CHECK(bs_generate_plain(&s, seq, i, 1, 0, seq + i, &n, NULL, NULL, &err) == 0 && n == 1, "%s", err.msg);
        bs_session_free(&s);
        mask[i] = 1; n_anchor++;
    }
    bs_drafter_opts o = { .lossy_weights = 0, .no_calibration = 1 };
    bs_drafter *d;
    CHECK(bs_drafter_open_opts(&d, dd, e, 256, &o, &err) == 0, "%s", err.msg);
    const int K = d->max_drafts;
    CHECK(K == 4);
    bs_calib_rounds r = {0};
    bs_rng rng; bs_rng_seed(&rng, 3);
    CHECK(bs_calib_record_seq(e, d, seq, mask, S, 1000, K, &rng, &r, &err) == n_anchor, "%s", err.msg);
    int survived = 0, died = 0;
    for (int i = 0; i < r.n; i++) {
        int a = r.anchor[i], lead = 0;
        CHECK(a >= 4 && a < S && mask[a] && r.n_valid[i] == K);
        while (lead < K && r.y[i * K + lead]) lead++;
        for (int k = lead; k < K; k++) CHECK(!r.y[i * K + k], "round %d: survival after a rejection", i);
        survived += lead; died += lead < K;
        // The speculative loop's first round after the prompt ids[0..a).
        int32_t out[2];
        bs_spec_stats st;
        bs_spec_opts so = { .draft_max = K, .confidence_threshold = 0, .stop_at_eos = 0 };
        CHECK(bs_session_init(&s, e, 256, NULL, &err) == 0, "%s", err.msg);
        CHECK(bs_generate_spec(&s, d, seq, a, 2, &so, out, &n, NULL, NULL, &st, &err) == 0, "%s", err.msg);
        CHECK(out[0] == seq[a], "anchor %d: the engine's anchor %d is not the text's %d", a, out[0], seq[a]);
        CHECK(st.n_lengths >= 1 && st.acceptance_lengths[0] - 1 == lead, "anchor %d: the engine accepted %d drafts, the recorded round %d",
              a, st.acceptance_lengths[0] - 1, lead);
        bs_spec_stats_free(&st);
        bs_session_free(&s);
    }
    printf("  %d rounds: %d drafts survived, %d rounds ended before the block's end\n", r.n, survived, died);
    CHECK(survived > 0 && died > 0, "the test needs partial acceptance (%d survived, %d cut)", survived, died);
    // The confidence logits: those of a drafter given the prefix by the speculative loop's own prefill.
    d->free(d);
    for (int i = 0; i < r.n; i += 17) {
        int a = r.anchor[i];
        bs_drafter_ctx dc2;
        bs_drafter *d2 = tu_drafter_with_context(e, dd, &o, &dc2, seq, a, &err);
        CHECK(d2, "%s", err.msg);
        float z[BS_MAX_DRAFT];
        bs_dflash_inspect ins = { .conf_logits = z };
        bs_draft dr;
        CHECK(bs_dflash_forward_block(d2, &dc2, seq[a], K, NULL, NULL, &dr, &ins, &err) == 0, "%s", err.msg);
        for (int k = 0; k < K; k++) CHECK_NEAR(z[k], r.z[i * K + k], 1e-5, "anchor %d position %d", a, k + 1);
        tu_drafter_free(d2, &dc2);
    }
    bs_calib_rounds_free(&r);
    bs_engine_close(e);
}

// A writable copy of the fixture DSpark drafter (config copied, weights linked) holding calibration.json = cal
// (NULL: none); returns the folder.
static const char *dspark_with(const char *fixture, const char *cal) {
    const char *dir = bs_test_tmpdir("calib_drafter");
    if (!dir) return NULL;
    char cmd[4096], path[1024];
    snprintf(cmd, sizeof cmd, "ln -s \"$(realpath %s/%s/model.safetensors)\" %s/ && cp %s/%s/config.json %s/", bs_fixtures_dir(), fixture, dir,
             bs_fixtures_dir(), fixture, dir);
    if (system(cmd)) return NULL;
    snprintf(path, sizeof path, "%s/calibration.json", dir);
    if (cal && tu_write_text(path, cal)) return NULL;
    return dir;
}

// calibration.json scales every confidence of a drafting round by its position's temperature, exactly
// sigmoid(z_k / T_k), on both the inspection path and the engine's propose; --no-calibration ignores it.
TEST(calibrate_loader_applies_temperatures) {
    const float Tc[7] = { 0.5f, 2.0f, 1.0f, 3.0f, 0.25f, 1.5f, 4.0f };
    const char *dir = dspark_with("dspark", "{\"format\": \"blockspec-calibration\", \"version\": 1, "
                                            "\"temperatures\": [0.5, 2, 1, 3, 0.25, 1.5, 4], \"positions\": []}");
    CHECK(dir, "could not make the drafter folder");
    char t[1024];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, t, "cpu", &err) == 0, "%s", err.msg);
    int32_t prompt[] = { 11, 22, 33, 44, 55, 66 };
    float z[2][BS_MAX_DRAFT], conf[2][BS_MAX_DRAFT];
    for (int cal = 0; cal < 2; cal++) {
        bs_drafter_opts o = { .lossy_weights = 0, .no_calibration = !cal };
        bs_drafter_ctx dc;
        bs_drafter *d = tu_drafter_with_context(e, dir, &o, &dc, prompt, 6, &err);
        CHECK(d, "%s", err.msg);
        const float *bl, *Tl = bs_dflash_calibration(d, &bl);
        CHECK(cal ? Tl && !memcmp(Tl, Tc, sizeof Tc) && bl[0] == 0 && bl[6] == 0 : !Tl && !bl, "the loaded temperatures");
        bs_dflash_inspect ins = { .conf_logits = z[cal] };
        bs_draft dr, dp;
        CHECK(bs_dflash_forward_block(d, &dc, 77, 7, NULL, NULL, &dr, &ins, &err) == 0 && dr.n == 7 && dr.has_conf, "%s", err.msg);
        CHECK(d->propose(d, &dc, 77, 7, &(bs_sampling){ .top_p = 1 }, NULL, &dp, &err) == 0 && dp.n == 7 && dp.has_conf, "%s", err.msg);
        for (int k = 0; k < 7; k++) {
            float x = cal ? z[cal][k] / Tc[k] : z[cal][k];
            float want = 1.0f / (1.0f + expf(-x));
            CHECK(dr.conf[k] == want, "calibrated %d, position %d: confidence %.9g, expected %.9g", cal, k + 1, dr.conf[k], want);
            CHECK(dp.conf[k] == dr.conf[k], "propose's confidence %d differs from the inspected one", k + 1);
            conf[cal][k] = dr.conf[k];
        }
        tu_drafter_free(d, &dc);
    }
    CHECK(!memcmp(z[0], z[1], sizeof(float) * 7), "inspection reports the head's raw logits either way");
    CHECK(memcmp(conf[0], conf[1], sizeof(float) * 7) != 0, "the calibration changed no confidence");
    // With "biases": c_k = sigmoid(z_k / T_k + b_k).
    const float bc[7] = { -1.0f, 0.5f, 0.0f, 2.0f, -0.25f, 1.0f, -3.0f };
    dir = dspark_with("dspark", "{\"version\": 1, \"temperatures\": [0.5, 2, 1, 3, 0.25, 1.5, 4], \"biases\": [-1, 0.5, 0, 2, -0.25, 1, -3]}");
    CHECK(dir);
    bs_drafter_ctx dc;
    bs_drafter *d = tu_drafter_with_context(e, dir, NULL, &dc, prompt, 6, &err);
    CHECK(d, "%s", err.msg);
    bs_draft dr;
    CHECK(d->propose(d, &dc, 77, 7, &(bs_sampling){ .top_p = 1 }, NULL, &dr, &err) == 0 && dr.n == 7 && dr.has_conf, "%s", err.msg);
    for (int k = 0; k < 7; k++) {
        float x = z[0][k] / Tc[k] + bc[k], want = 1.0f / (1.0f + expf(-x));
        CHECK(dr.conf[k] == want, "position %d: confidence %.9g, expected %.9g", k + 1, dr.conf[k], want);
    }
    tu_drafter_free(d, &dc);
    bs_engine_close(e);
}

// Bad calibration.json files stop the drafter from opening, with the file and the field named.
TEST(calibrate_bad_files) {
    static const struct { const char *text, *needle; } bad[] = {
        { "{\"temperatures\": [1, 1, 1, 1, 1, 1, 1]}", "missing field \"version\"" },
        { "{\"version\": 2, \"temperatures\": [1, 1, 1, 1, 1, 1, 1]}", "field \"version\" is 2" },
        { "{\"version\": \"1\", \"temperatures\": [1, 1, 1, 1, 1, 1, 1]}", "field \"version\" must be an integer" },
        { "{\"version\": 1}", "missing field \"temperatures\"" },
        { "{\"version\": 1, \"temperatures\": 1.5}", "field \"temperatures\" must be a list" },
        { "{\"version\": 1, \"temperatures\": {\"1\": 2}}", "field \"temperatures\" must be a list" },
        { "{\"version\": 1, \"temperatures\": [1, 1, 1, 1, 1, 1]}", "lists 6 temperatures; this drafter drafts 7" },
        { "{\"version\": 1, \"temperatures\": [1, 1, 1, 1, 1, 1, 1, 1]}", "lists 8 temperatures" },
        { "{\"version\": 1, \"temperatures\": []}", "lists 0 temperatures" },
        { "{\"version\": 1, \"temperatures\": [1, 1, 0, 1, 1, 1, 1]}", "\"temperatures\"[2] must be a positive number" },
        { "{\"version\": 1, \"temperatures\": [-1, 1, 1, 1, 1, 1, 1]}", "\"temperatures\"[0] must be a positive number" },
        { "{\"version\": 1, \"temperatures\": [1, \"2\", 1, 1, 1, 1, 1]}", "\"temperatures\"[1] must be a positive number" },
        { "{\"version\": 1, \"temperatures\": [1, 1, 1, 1, 1, 1, 1e999]}", "\"temperatures\"[6] must be a positive number" },
        { "{\"version\": 1, \"temperatures\": [1, 1, 1, null, 1, 1, 1]}", "\"temperatures\"[3] must be a positive number" },
        { "{\"version\": 1, \"temperatures\": [1, 1, 1, 1, 1e-9, 1, 1]}", "\"temperatures\"[4] must be a positive number" },
        { "{\"version\": 1, \"temperatures\": [1, 1, 1, 1, 1, 1, [1]]}", "\"temperatures\"[6]" },
        { "{\"version\": 1, \"temperatures\": [1, 1, 1, 1, 1, 1, 1], \"biases\": 0}", "field \"biases\" must be a list" },
        { "{\"version\": 1, \"temperatures\": [1, 1, 1, 1, 1, 1, 1], \"biases\": [0, 0]}", "field \"biases\" lists 2 biases" },
        { "{\"version\": 1, \"temperatures\": [1, 1, 1, 1, 1, 1, 1], \"biases\": [0, 0, 0, 0, 0, 0, 1e999]}", "field \"biases\"[6] must be a number" },
        { "{\"version\": 1, \"temperatures\": [1, 1, 1, 1, 1, 1, 1], \"biases\": [0, 0, \"x\", 0, 0, 0, 0]}", "field \"biases\"[2] must be a number" },
        { "{\"version\": 1, \"temperatures\": [1, 1, 1, 1, 1, 1, 1], \"biases\": [0, 0, 0, 0, 0, 0, 5000]}", "field \"biases\"[6] must be a number" },
        { "{\"version\": 1, \"temperatures\": [1, 1, 1, 1, 1, 1, 1]", "invalid JSON" },
        { "{\"version\": 1, \"temperatures\": [1, 1, 1, 1, 1, 1, 1]} {}", "unexpected data after the JSON value" },
        { "[1, 1, 1, 1, 1, 1, 1]", "expected a JSON object" },
        { "", "invalid JSON" },
    };
    char t[1024];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    bs_engine *e; bs_err err = {0};
    CHECK(bs_engine_open(&e, t, "cpu", &err) == 0, "%s", err.msg);
    bs_drafter *d = NULL;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *dir = dspark_with("dspark", bad[i].text);
        CHECK(dir);
        CHECK(bs_drafter_open(&d, dir, e, 64, &err) == -1, "case %zu (%s) was accepted", i, bad[i].text);
        CHECK(strstr(err.msg, "calibration.json") && strstr(err.msg, bad[i].needle), "case %zu: \"%s\" lacks the file or \"%s\"", i, err.msg,
              bad[i].needle);
        bs_drafter_opts o = { .lossy_weights = 0, .no_calibration = 1 };   // ignored when asked
        CHECK(bs_drafter_open_opts(&d, dir, e, 64, &o, &err) == 0, "case %zu with no_calibration: %s", i, err.msg);
        d->free(d);
    }
    // A folder where the file should be.
    const char *dir = dspark_with("dspark", NULL);
    char path[1024];
    snprintf(path, sizeof path, "mkdir %s/calibration.json", dir);
    CHECK(system(path) == 0);
    CHECK(bs_drafter_open(&d, dir, e, 64, &err) == -1 && strstr(err.msg, "calibration.json") && strstr(err.msg, "not a regular file"), "%s", err.msg);
    // Beside a drafter without a confidence head it is refused, not silently ignored.
    dir = dspark_with("dflash", "{\"version\": 1, \"temperatures\": [1, 1, 1, 1, 1, 1, 1]}");
    CHECK(bs_drafter_open(&d, dir, e, 64, &err) == -1 && strstr(err.msg, "calibration.json") && strstr(err.msg, "no confidence head"), "%s",
          err.msg);
    bs_engine_close(e);
}


// `blockspec calibrate` on the fixture DSpark drafter and its target (with a tokenizer trained here) over a
// tokenised held-out corpus and over plain text: a valid calibration.json the drafter loads, then greedy
// generate with a confidence cut gives plain decoding's output, calibrated or not.
TEST(calibrate_cli_end_to_end) {
    const char *m = bs_test_tmpdir("calib_model");
    CHECK(m);
    char cmd[4096], out[65536], path[1024], ref[4096];
    const char *F = bs_fixtures_dir();
    snprintf(cmd, sizeof cmd, "ln -s \"$(realpath %s/target/model.safetensors)\" %s/ && cp %s/target/config.json %s/", F, m, F, m);
    CHECK(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/corpus.txt", m);
    FILE *f = fopen(path, "w");
    CHECK(f);
    for (int i = 0; i < 300; i++)
        fprintf(f, "hello world %d, the quick brown fox jumps over the lazy dog; what is the answer? forty-two, %s!\n", i * 7919 % 1000,
                i % 3 ? "again" : "indeed");
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s tokenizer-train --vocab 384 --special '<|endoftext|>' %s --out %s/tokenizer.json", bs_cli_path(), path, m);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 0, "%s", out);
    snprintf(cmd, sizeof cmd, "%s tokenize --corpus %s/held.bsc -m %s --doc-sep '\\n' %s", bs_cli_path(), m, m, path);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 0, "%s", out);
    const char *d = dspark_with("dspark", NULL);
    CHECK(d);
    snprintf(cmd, sizeof cmd, "%s calibrate -m %s -d %s --data %s/held.bsc --max-seqs 60 --anchors 6 --seed 3", bs_cli_path(), m, d, m);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 0, "`%s`: %s", cmd, out);
    CHECK(strstr(out, "mean ECE over positions") && strstr(out, "reliability of the cumulative survival a_1") && strstr(out, "wrote "), "%s", out);
    bs_calibration cal;
    bs_err err = {0};
    CHECK(bs_calibration_load_dir(&cal, d, 7, &err) == 1, "%s", err.msg);
    snprintf(path, sizeof path, "%s/calibration.json", d);
    cJSON *j = bs_json_load(path, &err);
    CHECK(j, "%s", err.msg);
    const cJSON *rounds = cJSON_GetObjectItem(j, "rounds"), *ps = cJSON_GetObjectItem(j, "positions");
    CHECK(cJSON_IsNumber(rounds) && rounds->valuedouble == 360, "rounds");
    CHECK(cJSON_IsArray(ps) && cJSON_GetArraySize(ps) == 7, "positions");
    for (int k = 0; k < 7; k++) {
        const cJSON *p = cJSON_GetArrayItem(ps, k), *eb = cJSON_GetObjectItem(p, "ece_before"), *ea = cJSON_GetObjectItem(p, "ece_after");
        CHECK(cJSON_IsNumber(eb) && cJSON_IsNumber(ea) && isfinite(ea->valuedouble) && ea->valuedouble >= 0, "position %d ECE", k + 1);
        CHECK(cJSON_IsString(cJSON_GetObjectItem(p, "status")));
    }
    cJSON_Delete(j);
    // Plain text as --data, --draft-max 3 and --out: positions 4..7 keep T = 1.
    snprintf(cmd, sizeof cmd, "%s calibrate -m %s -d %s --data %s/corpus.txt --draft-max 3 --max-seqs 4 --anchors 20 --out %s/c3.json", bs_cli_path(),
             m, d, m, m);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 0, "`%s`: %s", cmd, out);
    snprintf(path, sizeof path, "%s/c3.json", m);
    j = bs_json_load(path, &err);
    CHECK(j, "%s", err.msg);
    CHECK(bs_calibration_parse(&cal, j, 7, path, &err) == 0, "%s", err.msg);
    for (int k = 3; k < 7; k++) CHECK(cal.T[k] == 1.0f);
    CHECK(cJSON_GetObjectItem(j, "positions_fitted")->valuedouble == 3);
    cJSON_Delete(j);
    // --bias: a bias per position as well, written as "biases".
    snprintf(cmd, sizeof cmd, "%s calibrate -m %s -d %s --data %s/held.bsc --max-seqs 20 --anchors 6 --bias --out %s/b.json", bs_cli_path(), m, d, m, m);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 0 && strstr(out, "with a bias"), "`%s`: %s", cmd, out);
    snprintf(path, sizeof path, "%s/b.json", m);
    j = bs_json_load(path, &err);
    CHECK(j, "%s", err.msg);
    CHECK(bs_calibration_parse(&cal, j, 7, path, &err) == 0 && cJSON_GetArraySize(cJSON_GetObjectItem(j, "biases")) == 7, "%s", err.msg);
    cJSON_Delete(j);
    // --holdout-frac: the draw's last sequences stay out of the fit; their rounds are judged separately and the
    // fit's rounds are the rest (same seed: the same 20 sequences and anchors as the --bias run above).
    snprintf(cmd, sizeof cmd, "%s calibrate -m %s -d %s --data %s/held.bsc --max-seqs 20 --anchors 6 --bias --holdout-frac 0.25 --out %s/h.json",
             bs_cli_path(), m, d, m, m);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 0 && strstr(out, "held out of the fit"), "`%s`: %s", cmd, out);
    snprintf(path, sizeof path, "%s/h.json", m);
    cJSON *hj = bs_json_load(path, &err), *bj;
    CHECK(hj, "%s", err.msg);
    snprintf(path, sizeof path, "%s/b.json", m);
    bj = bs_json_load(path, &err);
    CHECK(bj, "%s", err.msg);
    const cJSON *ho = cJSON_GetObjectItem(hj, "held_out");
    CHECK(ho && cJSON_GetObjectItem(ho, "sequences")->valuedouble == 5 && cJSON_GetObjectItem(hj, "sequences")->valuedouble == 15);
    CHECK(cJSON_GetObjectItem(hj, "rounds")->valuedouble + cJSON_GetObjectItem(ho, "rounds")->valuedouble ==
              cJSON_GetObjectItem(bj, "rounds")->valuedouble, "fit %g + held out %g vs %g rounds", cJSON_GetObjectItem(hj, "rounds")->valuedouble,
          cJSON_GetObjectItem(ho, "rounds")->valuedouble, cJSON_GetObjectItem(bj, "rounds")->valuedouble);
    CHECK(cJSON_GetObjectItem(ho, "mean_ece_after")->valuedouble >= 0);
    cJSON_Delete(hj); cJSON_Delete(bj);
    snprintf(cmd, sizeof cmd, "%s calibrate -m %s -d %s --data %s/held.bsc --holdout-frac 1", bs_cli_path(), m, d, m);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 2 && strstr(out, "--holdout-frac"), "%s", out);
    // --generate: prompts continued by the target, the anchors in the continuation.
    snprintf(cmd, sizeof cmd, "%s calibrate -m %s -d %s --data %s/held.bsc --generate 20 --prompt-len 6 --max-seqs 5 --anchors 4 --out %s/g.json",
             bs_cli_path(), m, d, m, m);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 0, "`%s`: %s", cmd, out);
    snprintf(path, sizeof path, "%s/g.json", m);
    j = bs_json_load(path, &err);
    CHECK(j, "%s", err.msg);
    CHECK(cJSON_GetObjectItem(j, "rounds")->valuedouble == 20 && strstr(cJSON_GetObjectItem(j, "prefix")->valuestring, "generated"));
    cJSON_Delete(j);
    // Losslessness: greedy output with the calibrated (and the raw) confidence cut is plain decoding's.
    const char *gen = "%s generate -m %s %s --prompt-ids 11,22,33,44,55 -n 40 --print-ids --ignore-eos %s 2>/dev/null";
    snprintf(cmd, sizeof cmd, gen, bs_cli_path(), m, "-d none", "");
    CHECK(bs_test_run(cmd, 1, ref, sizeof ref) == 0, "%s", ref);
    const char *variants[] = { "--confidence-threshold 0.5", "--confidence-threshold 0.3 --draft-max 7", "--confidence-threshold 0.5 --no-calibration" };
    for (int v = 0; v < 3; v++) {
        char dflag[1100];
        snprintf(dflag, sizeof dflag, "-d %s", d);
        snprintf(cmd, sizeof cmd, gen, bs_cli_path(), m, dflag, variants[v]);
        CHECK(bs_test_run(cmd, 1, out, sizeof out) == 0, "`%s`: %s", cmd, out);
        CHECK(!strcmp(out, ref), "%s: speculative output differs from plain decoding:\n%s\nvs\n%s", variants[v], out, ref);
    }
    // Usage and input errors.
    snprintf(cmd, sizeof cmd, "%s calibrate -m %s -d %s", bs_cli_path(), m, d);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 2 && strstr(out, "--data"), "%s", out);
    snprintf(cmd, sizeof cmd, "%s calibrate -m %s -d %s/dflash --data %s/held.bsc", bs_cli_path(), m, F, m);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 1 && strstr(out, "needs a DSpark drafter with a confidence head"), "%s", out);
    snprintf(cmd, sizeof cmd, "%s calibrate -m %s -d %s --data %s/held.bsc --anchors 0", bs_cli_path(), m, d, m);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 2 && strstr(out, "--anchors"), "%s", out);
}
