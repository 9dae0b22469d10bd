// Standalone GPU pre-training of a Qwen3 target (until the generic loop, `blockspec train-target`, drives the
// same task): B sequences x T tokens per step from random tokens, a synthetic repeat task, or a flat int32
// token file; AdamW with linear warmup + cosine decay; per-step loss, tokens/s and MFU; export at the end.
//
//   build-cuda/train_target_cuda [-c CONFIG.json] [--init DIR] [-B 64] [-T 1024] [--steps 50] [--lr 1e-3]
//       [--warmup 10] [--wd 0.1] [--clip 1.0] [--data random|repeat|FILE.i32] [--gemm bf16|tf32|fp32]
//       [--seed 1] [--out DIR] [--log-every 1]
//
// MFU = (3 x forward FLOPs) / step time / 989 TFLOP/s (H200 dense bf16, datasheet). Forward FLOPs are the
// task's flops_forward: 2 per multiply-add of every matmul (layers + LM head; the embedding lookup is not
// a matmul) plus causal attention (q.k and p.v over the n(n+1)/2 pairs), so 3x is 6 x matmul params x
// tokens + the attention's forward and backward.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "train/train_cuda.h"
#include "util/rng.h"

#define PEAK_BF16 989e12

// ~30M parameters (29.4M, tied): the shape issue 24 proposes for the built-in target.
static const char *DEFAULT_CFG =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", \"vocab_size\": 8192, \"hidden_size\": 512,"
    " \"intermediate_size\": 1536, \"num_hidden_layers\": 8, \"num_attention_heads\": 8, \"num_key_value_heads\": 4,"
    " \"head_dim\": 64, \"max_position_embeddings\": 4096, \"rms_norm_eps\": 1e-6, \"rope_theta\": 1000000,"
    " \"tie_word_embeddings\": true, \"initializer_range\": 0.02}";

static double now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }

static int usage(void) {
    fprintf(stderr, "usage: train_target_cuda [-c CONFIG] [--init DIR] [-B N] [-T N] [--steps N] [--lr X] [--warmup N] [--wd X]\n"
                    "       [--clip X] [--data random|repeat|FILE] [--gemm bf16|tf32|fp32] [--seed S] [--out DIR] [--log-every N]\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *cfg = DEFAULT_CFG, *init = NULL, *data = "random", *out = NULL, *gemm = "bf16";
    int B = 64, T = 1024, steps = 50, warmup = 10, log_every = 1;
    double lr = 1e-3, wd = 0.1, clip = 1.0;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) return usage();
        if (!v) return usage();
        if (!strcmp(a, "-c")) cfg = v;
        else if (!strcmp(a, "--init")) init = v;
        else if (!strcmp(a, "-B")) B = atoi(v);
        else if (!strcmp(a, "-T")) T = atoi(v);
        else if (!strcmp(a, "--steps")) steps = atoi(v);
        else if (!strcmp(a, "--lr")) lr = atof(v);
        else if (!strcmp(a, "--warmup")) warmup = atoi(v);
        else if (!strcmp(a, "--wd")) wd = atof(v);
        else if (!strcmp(a, "--clip")) clip = atof(v);
        else if (!strcmp(a, "--data")) data = v;
        else if (!strcmp(a, "--gemm")) gemm = v;
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--log-every")) log_every = atoi(v) > 0 ? atoi(v) : 1;
        else return usage();
        i++;
    }
    if (B < 1 || T < 2 || steps < 1) return usage();
    int mode = !strcmp(gemm, "fp32") ? BS_TRAIN_GEMM_FP32 : !strcmp(gemm, "tf32") ? BS_TRAIN_GEMM_TF32 : BS_TRAIN_GEMM_BF16;
    bs_err err = {0};
    bs_train_task *t;
    double t0 = now();
    if (bs_train_target_cuda_new(&t, init && cfg == DEFAULT_CFG ? NULL : cfg, init, seed, B, T, &err) ||
        bs_train_target_cuda_set_gemm(t, mode, &err)) {
        fprintf(stderr, "train_target_cuda: %s\n", err.msg);
        return 1;
    }
    int V = (int)bs_param_find(&t->params, "model.embed_tokens.weight")->shape[0];
    double n_params = (double)bs_param_count(&t->params, 0);
    printf("model: %.2fM parameters, vocab %d; batch %d x %d; gemm %s; device memory %.2f GiB; setup %.1f s\n", n_params / 1e6, V, B, T,
           gemm, bs_train_target_cuda_device_bytes(t) / 1073741824.0, now() - t0);
    // data
    int32_t *corpus = NULL; size_t n_corpus = 0;
    if (strcmp(data, "random") && strcmp(data, "repeat")) {
        FILE *f = fopen(data, "rb");
        if (!f) { fprintf(stderr, "train_target_cuda: cannot open %s\n", data); return 1; }
        fseek(f, 0, SEEK_END); long len = ftell(f); fseek(f, 0, SEEK_SET);
        n_corpus = (size_t)len / 4;
        corpus = malloc(n_corpus * 4 + 4);
        if (!corpus || fread(corpus, 4, n_corpus, f) != n_corpus || n_corpus < (size_t)T + 1) {
            fprintf(stderr, "train_target_cuda: %s: fewer than %d int32 tokens or unreadable\n", data, T + 1); return 1;
        }
        fclose(f);
        for (size_t i = 0; i < n_corpus; i++)
            if (corpus[i] < 0 || corpus[i] >= V) { fprintf(stderr, "train_target_cuda: %s: token %d at %zu outside the vocabulary\n", data, corpus[i], i); return 1; }
    }
    int32_t *ids = malloc(sizeof(int32_t) * B * T);
    bs_train_seq *seqs = malloc(sizeof *seqs * B);
    bs_rng rng; bs_rng_seed(&rng, seed ^ 0x5eedULL);
    bs_adamw_settings as = { 0.9f, 0.95f, 1e-8f, (float)wd, (float)clip };
    double flops = 3.0 * B * t->flops_forward(t, T), t_sum = 0, first_loss = 0, loss = 0;
    int n_timed = 0;
    for (int step = 1; step <= steps; step++) {
        for (int b = 0; b < B; b++) {
            int32_t *s = ids + (size_t)b * T;
            if (corpus) { size_t o = bs_rng_u64(&rng) % (n_corpus - T); memcpy(s, corpus + o, sizeof(int32_t) * T); }
            else if (!strcmp(data, "repeat")) {   // a random 64-token phrase repeated: learnable (induction)
                for (int i = 0; i < T; i++) s[i] = i < 64 ? (int32_t)(bs_rng_u64(&rng) % V) : s[i - 64];
            } else for (int i = 0; i < T; i++) s[i] = (int32_t)(bs_rng_u64(&rng) % V);
            seqs[b] = (bs_train_seq){ s, NULL, T };
        }
        double lr_t = step <= warmup ? lr * step / warmup
                                     : lr * (0.1 + 0.9 * 0.5 * (1 + cos(M_PI * (step - warmup) / fmax(1, steps - warmup))));
        bs_loss_terms tm; double gn;
        double ts = now();
        if (t->loss_grad_batch(t, seqs, B, 1.0f / B, NULL, &tm, &err) || t->opt_step(t, &as, (float)lr_t, &gn, &err)) {
            fprintf(stderr, "train_target_cuda: step %d: %s\n", step, err.msg); return 1;
        }
        double dt = now() - ts;
        if (step > 2) { t_sum += dt; n_timed++; }
        if (step == 2) bs_train_target_cuda_times(t, NULL, 1, &err);   // the first steps pay cuBLAS's heuristics and lazy loading
        loss = tm.loss;
        if (step == 1) first_loss = loss;
        if (step % log_every == 0 || step == steps)
            printf("step %4d  loss %.4f  grad norm %.3f  lr %.2e  %.1f ms  %.0f tok/s  MFU %.1f%%\n", step, loss, gn, lr_t, dt * 1e3,
                   B * T / dt, 100 * flops / dt / PEAK_BF16);
        fflush(stdout);
    }
    if (n_timed)
        printf("summary: %.2fM params, batch %d x %d, gemm %s: %.1f ms/step, %.0f tokens/s, %.1f TFLOP/s, MFU %.1f%% (mean of steps 3..%d); "
               "loss %.4f -> %.4f\n", n_params / 1e6, B, T, gemm, 1e3 * t_sum / n_timed, B * T * n_timed / t_sum, flops * n_timed / t_sum / 1e12,
               100 * flops * n_timed / t_sum / PEAK_BF16, steps, first_loss, loss);
    double ms[6];
    if (n_timed && bs_train_target_cuda_times(t, ms, 0, &err) == 0)
        printf("device time per step: forward %.1f ms (attention %.1f), cross-entropy %.1f, backward %.1f (attention %.1f), AdamW %.1f; "
               "host and gaps %.1f\n", ms[0] / n_timed, ms[1] / n_timed, ms[2] / n_timed, ms[3] / n_timed, ms[4] / n_timed, ms[5] / n_timed,
               1e3 * t_sum / n_timed - (ms[0] + ms[2] + ms[3] + ms[5]) / n_timed);
    if (out) {
        if (t->export_model(t, out, &err)) { fprintf(stderr, "train_target_cuda: export: %s\n", err.msg); return 1; }
        printf("exported to %s\n", out);
    }
    t->free(t);
    free(ids); free(seqs); free(corpus);
    return 0;
}
