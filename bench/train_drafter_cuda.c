// Throughput of the GPU drafter trainer (train_cuda_drafter.h) against a random ~30M Qwen3 target (the
// built-in model's shape, issue 24): random tokens, anchors drawn as in training, AdamW every step.
//
//   build-cuda/train_drafter_cuda [--arch dspark|dflash|zlab-dflash|dflash2] [-L 1] [-B 8] [-T 1024] [-A 256] [--block 7]
//       [--rank 64] [--steps 8] [--gemm bf16|tf32|fp32] [--target DIR]
//
// Without --target a random target (N(0, 0.02), tied) is made on the GPU and exported to
// /tmp/bs_drafter_bench_target. Tokens/s counts useful label tokens (supervised prediction rows); the split
// is device time per step from CUDA events: target forward, drafter forward + loss, drafter backward, AdamW.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "io/config.h"
#include "train/train_cuda.h"
#include "train/train_cuda_drafter.h"
#include "util/rng.h"

static const char *CFG30 =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", \"vocab_size\": 8192, \"hidden_size\": 512,"
    " \"intermediate_size\": 1536, \"num_hidden_layers\": 8, \"num_attention_heads\": 8, \"num_key_value_heads\": 4,"
    " \"head_dim\": 64, \"max_position_embeddings\": 4096, \"rms_norm_eps\": 1e-6, \"rope_theta\": 1000000,"
    " \"tie_word_embeddings\": true, \"initializer_range\": 0.02}";

// Model FLOPs of one step for one sequence of T tokens with A anchors (2 per multiply-add; causal attention
// counted as half of a full T x T product). The frozen target: every layer over the T tokens and its LM head
// over the label rows (the L1 term's distribution). The drafter: fc over the T context rows' taps and the
// context K/V projections, its layers and attention over the A x block rows, the LM head and Markov W2 over
// them; backward is twice the forward for what trains and once for the frozen head (input gradient only).
static double layer_params(const bs_qwen3_config *c) {
    double q = (double)c->n_heads * c->head_dim, kv = (double)c->n_kv_heads * c->head_dim;
    return c->hidden_size * (2 * q + 2 * kv) + 3.0 * c->hidden_size * c->intermediate_size;
}
static double step_flops(const bs_qwen3_config *t, const bs_drafter_config *d, int T, int A, int blk) {
    const bs_qwen3_config *b = &d->base;
    double R = (double)A * blk, H = t->hidden_size, V = t->vocab_size;
    double target = 2.0 * T * t->n_layers * layer_params(t) + 2.0 * T * (double)T * t->n_heads * t->head_dim * t->n_layers + 2.0 * R * H * V;
    double ctx = 2.0 * T * d->n_taps * H * b->hidden_size + 2.0 * T * b->n_layers * 2.0 * b->hidden_size * b->n_kv_heads * b->head_dim;
    double layers = 2.0 * R * b->n_layers * layer_params(b) + 4.0 * R * (T / 2.0 + blk) * b->n_heads * b->head_dim * b->n_layers;
    double head = 2.0 * R * b->hidden_size * V, markov = 2.0 * R * d->markov_rank * V;
    return target + 3.0 * (ctx + layers + markov) + 2.0 * head;
}
#define PEAK_BF16 989e12   // H200 dense bf16, datasheet

static double now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }

int main(int argc, char **argv) {
    const char *arch = "dspark", *gemm = "bf16", *tdir = NULL;
    int L = 1, B = 8, T = 1024, A = 256, blk = 7, rank = 64, steps = 8;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--arch")) arch = v;
        else if (!strcmp(a, "-L")) L = atoi(v);
        else if (!strcmp(a, "-B")) B = atoi(v);
        else if (!strcmp(a, "-T")) T = atoi(v);
        else if (!strcmp(a, "-A")) A = atoi(v);
        else if (!strcmp(a, "--block")) blk = atoi(v);
        else if (!strcmp(a, "--rank")) rank = atoi(v);
        else if (!strcmp(a, "--steps")) steps = atoi(v);
        else if (!strcmp(a, "--gemm")) gemm = v;
        else if (!strcmp(a, "--target")) tdir = v;
        else { fprintf(stderr, "train_drafter_cuda: unknown option %s\n", a); return 2; }
    }
    bs_err err = { 0 };
    if (!tdir) {
        tdir = "/tmp/bs_drafter_bench_target";
        bs_train_task *tt;
        mkdir(tdir, 0755);
        if (bs_train_target_cuda_new(&tt, CFG30, NULL, 1, 1, 2, &err) || tt->export_model(tt, tdir, &err)) {
            fprintf(stderr, "train_drafter_cuda: target: %s\n", err.msg);
            return 1;
        }
        tt->free(tt);
    }
    bs_qwen3_config qc;
    if (bs_qwen3_config_load(&qc, tdir, &err)) { fprintf(stderr, "train_drafter_cuda: %s\n", err.msg); return 1; }
    bs_drafter_config dc;
    int dspark = !strcmp(arch, "dspark");
    if (bs_train_drafter_config(&dc, &qc, arch, L, blk, qc.vocab_size - 1, dspark ? rank : 0, dspark ? BS_MARKOV_VANILLA : BS_MARKOV_NONE, &err)) {
        fprintf(stderr, "train_drafter_cuda: %s\n", err.msg);
        return 1;
    }
    bs_drafter_loss_opts o;
    bs_drafter_loss_defaults(&o, &dc);
    o.num_anchors = A;
    bs_train_task *t;
    double t0 = now();
    if (bs_train_drafter_cuda_new(&t, tdir, &dc, NULL, &o, 1, B, T, &err) ||
        bs_train_drafter_cuda_set_gemm(t, !strcmp(gemm, "fp32") ? BS_TRAIN_GEMM_FP32 : !strcmp(gemm, "tf32") ? BS_TRAIN_GEMM_TF32 : BS_TRAIN_GEMM_BF16,
                                       &err)) {
        fprintf(stderr, "train_drafter_cuda: %s\n", err.msg);
        return 1;
    }
    long long ntr = 0;
    for (int i = 0; i < t->params.n; i++) if (t->params.p[i].trainable) ntr += t->params.p[i].n;
    printf("drafter %s: %d layers, block %d, %d anchors, %.2fM trainable | target %s (V %d, H %d, %d layers) | batch %d x %d | gemm %s | "
           "device %.2f GiB | built in %.1f s\n", t->kind, L, blk, A, ntr / 1e6, tdir, qc.vocab_size, qc.hidden_size, qc.n_layers, B, T, gemm,
           bs_train_drafter_cuda_device_bytes(t) / 1073741824.0, now() - t0);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)B * T);
    bs_train_seq *seqs = malloc(sizeof *seqs * B);
    bs_rng r; bs_rng_seed(&r, 7);
    bs_adamw_settings as = { 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f };
    double sum_dt = 0, sum_tok = 0, ms[4];
    int counted = 0;
    for (int step = 0; step < steps; step++) {
        for (size_t i = 0; i < (size_t)B * T; i++) ids[i] = (int32_t)(bs_rng_u64(&r) % (qc.vocab_size - 1));
        for (int s = 0; s < B; s++) seqs[s] = (bs_train_seq){ ids + (size_t)s * T, NULL, T };
        if (step == 2) bs_train_drafter_cuda_times(t, NULL, 1, &err);
        double ts = now();
        bs_loss_terms tm; double gn = 0;
        if (t->loss_grad_batch(t, seqs, B, 1.0f / B, &r, &tm, &err) || t->opt_step(t, &as, 6e-4, &gn, &err)) {
            fprintf(stderr, "train_drafter_cuda: step %d: %s\n", step, err.msg);
            return 1;
        }
        double dt = now() - ts;
        if (step >= 2) { sum_dt += dt; sum_tok += tm.n_tokens; counted++; }
        printf("step %d | loss %.4f (ce %.4f l1 %.4f conf %.4f) | tau~ %.3f | norm %.3f | %.1f ms | %.0f label tokens | %.0f tok/s\n", step, tm.loss,
               tm.ce, tm.l1, tm.conf, tm.tau_est, gn, dt * 1e3, tm.n_tokens, tm.n_tokens / dt);
    }
    if (counted) {
        bs_train_drafter_cuda_times(t, ms, 0, &err);
        double fl = B * step_flops(&qc, &dc, T, A, blk), dt = sum_dt / counted;
        printf("summary: %.1f ms/step, %.0f label tokens/s, %.0f sequence tokens/s (%d x %d tokens, mean of steps 2..%d) | model FLOPs %.1f TFLOP/step, "
               "MFU %.1f%% | split ms/step: target forward %.1f, drafter forward + loss %.1f, drafter backward %.1f, AdamW %.2f\n", dt * 1e3,
               sum_tok / sum_dt, B * T / dt, B, T, steps - 1, fl / 1e12, 100 * fl / dt / PEAK_BF16, ms[0] / counted, ms[1] / counted,
               ms[2] / counted, ms[3] / counted);
    }
    free(ids); free(seqs);
    t->free(t);
    return 0;
}
