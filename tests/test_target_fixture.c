// The Qwen3 target against transformers' vectors (shared/fixtures/target*): prefill logits and
// hidden states, greedy decoding with a KV cache, and a verify block on top of the prompt's cache.
// Also runs `blockspec dump` as a user would and compares its file with the same vectors.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "harness.h"
#include "fixture_util.h"
#include "engine/engine.h"

#define TOL 1e-3

// logits [rows][V] and taps [rows][NT][H] (as the engine writes them) against the reference's logits
// [rows][V] and hidden states [NT][rows][H]; `what` names the part in a failure.
static void check_rows(int *failed_, const char *what, const float *logits, const float *tap, const float *ref_logits,
                       const float *ref_hs, long rows, long V, int NT, long H) {
    double dl = fx_max_abs_diff(logits, ref_logits, rows * V);
    CHECK(dl < TOL, "%s logits differ by %g", what, dl);
    for (int t = 0; t < NT; t++)
        for (long r = 0; r < rows; r++) {
            double d = fx_max_abs_diff(tap + ((size_t)r * NT + t) * H, ref_hs + ((size_t)t * rows + r) * H, H);
            CHECK(d < TOL, "%s hidden_states[%d] row %ld differs by %g", what, t, r, d);
        }
}

static int open_fixture_at(const char *dev, const char *dir, const char *file, bs_engine **e, bs_checkpoint **exp, int *failed_) {
    bs_err err = {0};
    if (bs_engine_open(e, dir, dev, &err)) { fprintf(stderr, "  %s\n", err.msg); *failed_ = 1; return -1; }
    if (bs_checkpoint_open(exp, file, &err)) { fprintf(stderr, "  %s\n", err.msg); bs_engine_close(*e); *failed_ = 1; return -1; }
    return 0;
}

static int open_fixture(const char *dev, bs_engine **e, bs_checkpoint **exp, int *failed_) {
    char dir[1024], file[1024];
    snprintf(dir, sizeof dir, "%s/target", bs_fixtures_dir());
    snprintf(file, sizeof file, "%s/target.expect.safetensors", bs_fixtures_dir());
    return open_fixture_at(dev, dir, file, e, exp, failed_);
}

// The fixture through the library on any backend: outputs live in backend buffers and are downloaded,
// and the backend's argmax must agree with the host's on every greedy step.
void fx_check_target_fixture_at(int *failed_, const char *dev, const char *model_dir, const char *expect_file) {
    bs_engine *e; bs_checkpoint *x;
    if (open_fixture_at(dev, model_dir, expect_file, &e, &x, failed_)) return;
    bs_err err = {0};
    bs_backend *be = e->be;
    int V = e->cfg.vocab_size, H = e->cfg.hidden_size, NT = e->cfg.n_layers + 1;
    long P, G, B;
    const int32_t *prompt = fx_tensor(x, "prompt_ids", "I32", -1, &P);
    const int32_t *greedy = fx_tensor(x, "greedy_ids", "I32", -1, &G);
    const int32_t *block = fx_tensor(x, "block_ids", "I32", -1, &B);
    CHECK(prompt && greedy && block, "reference ids missing");
    const float *pre_logits = fx_tensor(x, "prefill_logits", "F32", P * V, NULL);
    const float *pre_hs = fx_tensor(x, "prefill_hidden_states", "F32", NT * P * H, NULL);
    const float *step_logits = fx_tensor(x, "greedy_step_logits", "F32", G * V, NULL);
    const float *blk_logits = fx_tensor(x, "block_logits", "F32", B * V, NULL);
    const float *blk_hs = fx_tensor(x, "block_hidden_states", "F32", NT * B * H, NULL);
    CHECK(pre_logits && pre_hs && step_logits && blk_logits && blk_hs, "reference tensors missing or misshaped");

    bs_kv_cache kv;
    CHECK(bs_kv_init(&kv, e->kv_pool, 0, &err) == 0, "%s", err.msg);
    int taps[64];
    for (int t = 0; t < NT; t++) taps[t] = t;
    long R = P > B ? P : B;
    float *logits = malloc(sizeof(float) * R * V), *tap = malloc(sizeof(float) * R * NT * H);
    float *dl = be->alloc(be, sizeof(float) * R * V, &err), *dt = be->alloc(be, sizeof(float) * R * NT * H, &err);
    CHECK(dl && dt, "%s", err.msg);
    bs_fwd_out fo = { .logits = dl, .logits_all = 1, .taps = taps, .n_taps = NT, .tap_out = dt };
    CHECK(bs_qwen3_forward(&e->target, &kv, prompt, (int)P, &fo, &err) == 0, "%s", err.msg);
    be->download(be, logits, dl, sizeof(float) * P * V);
    be->download(be, tap, dt, sizeof(float) * P * NT * H);
    check_rows(failed_, "prefill", logits, tap, pre_logits, pre_hs, P, V, NT, H);
    if (*failed_) return;
    // Greedy continuation, one token at a time.
    int32_t tok = bs_argmax(logits + (P - 1) * V, V), dev_tok;
    // Every step's difference is noted before the check, so a failure shows how the error grows.
    bs_fwd_out one = { .logits = dl };
    double worst = 0;
    int worst_at = 0;
    char steps[1024] = "";
    for (int i = 0; i < G; i++) {
        if (i > 0) {
            CHECK(bs_qwen3_forward(&e->target, &kv, &tok, 1, &one, &err) == 0, "%s", err.msg);
            be->download(be, logits, dl, sizeof(float) * V);
            double d = fx_max_abs_diff(logits, step_logits + (size_t)i * V, V);
            size_t n = strlen(steps);
            if (n < sizeof steps - 16) snprintf(steps + n, sizeof steps - n, " %.1e", d);
            if (d > worst) worst = d, worst_at = i;
            tok = bs_argmax(logits, V);
            be->argmax(be, &dev_tok, dl, 1, V);
            CHECK(dev_tok == tok, "backend argmax %d != host argmax %d", dev_tok, tok);
        }
        CHECK(tok == greedy[i], "greedy token %d: got %d, expected %d", i, tok, greedy[i]);
    }
    CHECK(worst < TOL, "greedy step %d logits differ by %g; max |diff| by step:%s", worst_at, worst, steps);
    // A verify block after the prompt's cache: roll back the greedy rows first.
    CHECK(bs_kv_rollback(&kv, (int)P, &err) == 0, "%s", err.msg);
    CHECK(bs_qwen3_forward(&e->target, &kv, block, (int)B, &fo, &err) == 0, "%s", err.msg);
    be->download(be, logits, dl, sizeof(float) * B * V);
    be->download(be, tap, dt, sizeof(float) * B * NT * H);
    check_rows(failed_, "block", logits, tap, blk_logits, blk_hs, B, V, NT, H);
    if (*failed_) return;
    free(logits); free(tap);
    be->free(be, dl); be->free(be, dt);
    bs_kv_free(&kv);
    bs_checkpoint_close(x);
    bs_engine_close(e);
}

void fx_check_ref_fixture(int *failed_, const char *device, const char *ref, const char *name, const char *missing) {
    char dir[512], file[512];
    snprintf(dir, sizeof dir, "%s/%s", ref, name);
    snprintf(file, sizeof file, "%s/%s.expect.safetensors", ref, name);
    FILE *f = fopen(file, "rb");
    if (!f) SKIP(missing);
    fclose(f);
    fx_check_target_fixture_at(failed_, device, dir, file);
}

void fx_check_target_fixture(int *failed_, const char *dev) {
    char dir[1024], file[1024];
    snprintf(dir, sizeof dir, "%s/target", bs_fixtures_dir());
    snprintf(file, sizeof file, "%s/target.expect.safetensors", bs_fixtures_dir());
    fx_check_target_fixture_at(failed_, dev, dir, file);
}

TEST(target_fixture_cpu_reference) { fx_check_target_fixture(failed_, "cpu-ref"); }
TEST(target_fixture_cpu) { fx_check_target_fixture(failed_, "cpu"); }

// Roll back 5 rows, recompute them: logits must be identical to the first computation.
TEST(target_kv_rollback_recompute) {
    bs_engine *e; bs_checkpoint *x;
    if (open_fixture("cpu", &e, &x, failed_)) return;
    bs_err err = {0};
    int V = e->cfg.vocab_size;
    long P;
    const int32_t *prompt = fx_tensor(x, "prompt_ids", "I32", -1, &P);
    CHECK(prompt && P > 5);
    bs_kv_cache kv;
    CHECK(bs_kv_init(&kv, e->kv_pool, 64, &err) == 0, "%s", err.msg);
    float *a = malloc(sizeof(float) * P * V), *b = malloc(sizeof(float) * P * V);
    bs_fwd_out fa = { .logits = a, .logits_all = 1 }, fb = { .logits = b, .logits_all = 1 };
    CHECK(bs_qwen3_forward(&e->target, &kv, prompt, (int)P, &fa, &err) == 0, "%s", err.msg);
    CHECK(bs_kv_rollback(&kv, (int)P - 5, &err) == 0, "%s", err.msg);
    CHECK(kv.n_past == P - 5);
    CHECK(bs_qwen3_forward(&e->target, &kv, prompt + P - 5, 5, &fb, &err) == 0, "%s", err.msg);
    CHECK(memcmp(a + (P - 5) * V, b, sizeof(float) * 5 * V) == 0, "recomputed logits differ after rollback");
    CHECK(bs_kv_rollback(&kv, (int)P + 1, &err) != 0, "rolling forward must be refused");
    free(a); free(b);
    bs_kv_free(&kv); bs_checkpoint_close(x); bs_engine_close(e);
}

// `blockspec dump` on the fixture reproduces the expected file, tensor by tensor.
TEST(target_dump_cli) {
    char cmd[4096], out[1024], exp_path[1024];
    const char *tmp = bs_test_tmpdir("dump");
    CHECK(tmp);
    snprintf(out, sizeof out, "%s/target.safetensors", tmp);
    snprintf(exp_path, sizeof exp_path, "%s/target.expect.safetensors", bs_fixtures_dir());
    bs_err err = {0};
    bs_checkpoint *x;
    CHECK(bs_checkpoint_open(&x, exp_path, &err) == 0, "%s", err.msg);
    long P, G, B;
    const int32_t *prompt = fx_tensor(x, "prompt_ids", "I32", -1, &P);
    fx_tensor(x, "greedy_ids", "I32", -1, &G);
    const int32_t *block = fx_tensor(x, "block_ids", "I32", -1, &B);
    CHECK(prompt && block);
    char ids[2048] = "", bids[2048] = "";
    fx_join_ids(prompt, P, ids, sizeof ids);
    fx_join_ids(block, B, bids, sizeof bids);
    snprintf(cmd, sizeof cmd, "%s dump -m %s/target --prompt-ids %s -n %ld --block-ids %s --out %s", bs_cli_path(), bs_fixtures_dir(), ids, G, bids, out);
    char msg[4608];
    int n_checked = fx_dump_and_compare(cmd, out, x, TOL, msg, sizeof msg);
    bs_checkpoint_close(x);
    CHECK(n_checked >= 0, "%s", msg);
    CHECK(n_checked == 8, "expected the 8 reference tensors, checked %d", n_checked);
}
