// One CPU training step (forward + backward, fp32 reference path) of a random Qwen3 target:
//   build/train_step [V H LAYERS HEADS KV_HEADS HEAD_DIM INTER TOKENS STEPS]
// prints parameters, seconds per step, tokens/s and GFLOP/s (forward FLOPs x 3 for forward + backward).
#include <stdio.h>
#include <stdlib.h>
#include "train/train_target.h"
#include "util/timer.h"

int main(int argc, char **argv) {
    int a[9] = { 8192, 384, 6, 6, 2, 64, 1024, 512, 3 };
    for (int i = 1; i < argc && i <= 9; i++) a[i - 1] = atoi(argv[i]);
    bs_qwen3_config c = { .vocab_size = a[0], .hidden_size = a[1], .n_layers = a[2], .n_heads = a[3], .n_kv_heads = a[4],
                          .head_dim = a[5], .intermediate_size = a[6], .max_position = 1 << 20, .rms_eps = 1e-6f,
                          .rope_theta = 1e6f, .bos_id = -1 };
    int n = a[7], steps = a[8];
    bs_err err = {0};
    bs_train_task *t;
    if (bs_train_target_new(&t, &c, 1, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    int32_t *ids = malloc(sizeof(int32_t) * n);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 7919u) % (unsigned)c.vocab_size);
    bs_train_seq seq = { ids, NULL, n };
    bs_loss_terms terms;
    double best = 1e30;
    for (int s = 0; s <= steps; s++) {   // step 0 warms up (allocates the workspace)
        double t0 = bs_now();
        bs_param_zero_grad(&t->params);
        if (t->loss_grad(t, &seq, 1.0f, NULL, &terms, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        double dt = bs_now() - t0;
        if (s > 0 && dt < best) best = dt;
    }
    double flops = 3 * t->flops_forward(t, n);
    printf("params %.1fM  tokens %d  loss %.3f  best step %.3f s  %.0f tokens/s  %.1f GFLOP/s (fwd+bwd = 3 x fwd)\n",
           bs_param_count(&t->params, 0) / 1e6, n, terms.loss, best, n / best, flops / best / 1e9);
    t->free(t);
    free(ids);
    return 0;
}
