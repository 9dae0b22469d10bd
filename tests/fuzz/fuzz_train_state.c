// libFuzzer harness for the training resume state (src/train/checkpoint.c): `make fuzz` builds
// build-fuzz/fuzz_train_state. The input is written as DIR/train_state.safetensors and loaded by
// bs_train_ckpt_load into a small fixed task (two trainable tensors and a frozen one), as `train-* --resume`
// does. An accepted state must give a non-negative step and data position and a non-zero generator state.
// BS_FUZZ_SEED_OUT=FILE makes the harness write a genuine checkpoint of its task to FILE and exit
// (tests/fuzz/seed.sh uses it for the seed corpus).
#include <stdint.h>
#include <stdlib.h>
#include "fuzz_util.h"
#include "train/checkpoint.h"

static bs_train_task task;
static bs_adamw opt;

static void make_task(void) {
    bs_err err;
    const int64_t a[2] = { 3, 4 }, b[1] = { 5 }, e[2] = { 6, 2 };
    task.kind = "toy";
    if (bs_param_add(&task.params, "layer.weight", 2, a, 1, 1, &err) < 0 || bs_param_add(&task.params, "norm.weight", 1, b, 1, 0, &err) < 0 ||
        bs_param_add(&task.params, "embed.weight", 2, e, 0, 0, &err) < 0)
        abort();
    bs_adamw_cfg cfg = bs_adamw_defaults(1e-3, 0.01);
    if (bs_adamw_init(&opt, &task.params, &cfg, &err)) abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    make_task();
    const char *seed = getenv("BS_FUZZ_SEED_OUT");
    if (seed) {   // a real checkpoint of this task, with non-trivial weights, moments and settings
        for (int i = 0; i < task.params.n; i++)
            for (int64_t k = 0; k < task.params.p[i].n; k++) task.params.p[i].w[k] = 0.25f * (float)(k + i);
        bs_train_state st = { .step = 7, .data = { 1, 2, 3 }, .rng = { { 1, 2, 3, 0xfedcba9876543210ull } },
                              .settings_json = "{\"lr\": 0.001, \"seq_len\": 16}" };
        bs_err err;
        if (bs_train_ckpt_save(fuzz_dir(), &task, &opt, &st, &err)) { fprintf(stderr, "%s\n", err.msg); exit(1); }
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "mv '%s/%s' '%s' && rmdir '%s'", fuzz_dir(), BS_TRAIN_STATE_FILE, seed, fuzz_dir());
        exit(system(cmd) == 0 ? 0 : 1);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_put(BS_TRAIN_STATE_FILE, data, (long)size);
    bs_train_state st;
    bs_err err;
    if (bs_train_ckpt_load(fuzz_dir(), &task, &opt, &st, &err)) {
        if (!strstr(err.msg, fuzz_dir())) abort();   // every refusal names the file
        return 0;
    }
    if (st.step < 0 || st.data.epoch < 0 || st.data.doc < 0 || st.data.off < 0 || !st.settings_json) abort();
    if (!(st.rng.s[0] | st.rng.s[1] | st.rng.s[2] | st.rng.s[3])) abort();
    free(st.settings_json);
    return 0;
}
