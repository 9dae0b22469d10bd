// blockspec loss -m TARGET -d DRAFTER --batch BATCH.safetensors --out OUT.safetensors
//                [--gamma 4] [--ce 0.1] [--l1 0.9] [--conf 1.0] [--device cpu|cuda]
// One drafter training step with the batch's fixed anchors, nothing updated (issue 23 item 9): the loss terms,
// the draft and confidence logits, eval mask and labels, and the gradient of every trainable drafter tensor.
// BATCH: input_ids, loss_mask [S], anchor_positions, block_keep [A] (int32, one sequence).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "cli/commands.h"
#include "io/safetensors.h"
#include "train/train_drafter.h"
#include "train/train_target.h"

static const char *USAGE =
    "usage: blockspec loss -m TARGET -d DRAFTER --batch BATCH.safetensors --out OUT.safetensors\n"
    "                      [--gamma 4] [--ce 0.1] [--l1 0.9] [--conf 1.0] [--device cpu|cuda]\n";

// A 1-D int32 tensor of the batch (n < 0: any length); NULL + message otherwise.
static const int32_t *batch_ids(const bs_checkpoint *ck, const char *name, long n, long *len, bs_err *err) {
    const bs_tensor_info *t = bs_checkpoint_find(ck, name);
    if (!t) { bs_fail(err, "%s: missing tensor '%s' (int32)", ck->path, name); return NULL; }
    if (strcmp(t->dtype_name, "I32") || t->n_dims != 1) { bs_fail(err, "%s: tensor '%s' must be a 1-D int32 tensor (is %s with %d dims)", ck->path, name, t->dtype_name, t->n_dims); return NULL; }
    if (n >= 0 && t->shape[0] != n) { bs_fail(err, "%s: tensor '%s' has %lld entries, expected %ld", ck->path, name, (long long)t->shape[0], n); return NULL; }
    *len = (long)t->shape[0];
    return t->data;
}

int cmd_loss(int argc, char **argv) {
    const char *tdir = NULL, *ddir = NULL, *batch = NULL, *out = NULL, *dev = "cpu", *v;
    double gamma = 4, ce = 0.1, l1 = 0.9, conf = 1.0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) { if (!(tdir = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(argv[i], "-d") || !strcmp(argv[i], "--drafter")) { if (!(ddir = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(argv[i], "--batch")) { if (!(batch = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(argv[i], "--out") || !strcmp(argv[i], "-o")) { if (!(out = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(argv[i], "--device")) { if (!(dev = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(argv[i], "--gamma")) { if (!(v = cli_value(argc, argv, &i)) || cli_float("--gamma", v, 0, 1e6, &gamma)) return 2; }
        else if (!strcmp(argv[i], "--ce")) { if (!(v = cli_value(argc, argv, &i)) || cli_float("--ce", v, 0, 1e6, &ce)) return 2; }
        else if (!strcmp(argv[i], "--l1")) { if (!(v = cli_value(argc, argv, &i)) || cli_float("--l1", v, 0, 1e6, &l1)) return 2; }
        else if (!strcmp(argv[i], "--conf")) { if (!(v = cli_value(argc, argv, &i)) || cli_float("--conf", v, 0, 1e6, &conf)) return 2; }
        else if (!strcmp(argv[i], "--help")) { fputs(USAGE, stderr); return 0; }
        else { fprintf(stderr, "blockspec loss: unknown option %s\n%s", argv[i], USAGE); return 2; }
    }
    if (!tdir || !ddir || !batch || !out) { fputs(USAGE, stderr); return 2; }
    if (!strncmp(dev, "cuda", 4)) { fprintf(stderr, "blockspec loss: --device %s: the CUDA training path is not built yet; use --device cpu\n", dev); return 1; }
    if (strcmp(dev, "cpu")) { fprintf(stderr, "blockspec loss: --device %s: expected cpu or cuda\n", dev); return 2; }

    bs_err err = {0};
    bs_train_task *target = NULL, *dr = NULL;
    bs_checkpoint *bk = NULL;
    bs_st_writer *w = NULL;
    float *logits = NULL, *confl = NULL;
    int32_t *evm = NULL, *tid = NULL, *keep = NULL;
    uint8_t *mask8 = NULL;
    int rc = 1;
    long S, S2, A, A2;
    if (bs_checkpoint_open(&bk, batch, &err)) goto out;
    const int32_t *ids = batch_ids(bk, "input_ids", -1, &S, &err), *lm = NULL, *anchors = NULL, *keep_in = NULL;
    if (!ids || !(lm = batch_ids(bk, "loss_mask", S, &S2, &err)) || !(anchors = batch_ids(bk, "anchor_positions", -1, &A, &err)) ||
        !(keep_in = batch_ids(bk, "block_keep", A, &A2, &err))) goto out;
    if (bs_train_target_load(&target, tdir, 0, &err)) goto out;
    bs_drafter_config dc;
    if (bs_drafter_config_load(&dc, ddir, &err)) goto out;
    bs_drafter_loss_opts o = { (float)gamma, (float)ce, (float)l1, (float)conf, (int)A };
    if (bs_train_drafter_load(&dr, target, ddir, &o, &err)) goto out;
    int P = bs_train_drafter_rows(dr), V = dc.base.vocab_size;
    if (!(mask8 = malloc(S)) || !(keep = malloc(sizeof(int32_t) * A)) || !(logits = malloc(sizeof(float) * A * P * V)) ||
        !(confl = calloc((size_t)A * P, sizeof(float))) || !(evm = malloc(sizeof(int32_t) * A * P)) || !(tid = malloc(sizeof(int32_t) * A * P))) {
        bs_fail(&err, "out of memory"); goto out;
    }
    for (long i = 0; i < S; i++) mask8[i] = lm[i] != 0;
    memcpy(keep, keep_in, sizeof(int32_t) * A);
    bs_train_seq seq = { ids, mask8, (int)S };
    bs_loss_terms t;
    bs_drafter_inspect ins = { logits, confl, evm, tid };
    bs_param_zero_grad(&dr->params);
    if (bs_train_drafter_step(dr, &seq, anchors, keep, (int)A, 1, 1.0f, &t, &ins, &err)) goto out;

    float terms[4] = { (float)t.loss, (float)t.ce, (float)t.l1, (float)t.conf };
    const char *names[4] = { "loss", "loss_ce", "loss_l1", "loss_confidence" };
    w = bs_st_writer_new();
    int64_t one = 1, shp3[3] = { A, P, V }, shp2[2] = { A, P };
    for (int i = 0; i < 4; i++) if (bs_st_writer_add(w, names[i], "F32", 1, &one, &terms[i], &err)) goto out;
    if (bs_st_writer_add(w, "draft_logits", "F32", 3, shp3, logits, &err) ||
        (dc.conf_head && bs_st_writer_add(w, "confidence_logits", "F32", 2, shp2, confl, &err)) ||
        bs_st_writer_add(w, "eval_mask", "I32", 2, shp2, evm, &err) || bs_st_writer_add(w, "target_ids", "I32", 2, shp2, tid, &err)) goto out;
    for (int i = 0; i < dr->params.n; i++) {
        const bs_param *p = &dr->params.p[i];
        if (!p->trainable) continue;
        char name[BS_PARAM_NAME_MAX + 8];
        snprintf(name, sizeof name, "grad.%s", p->name);
        if (bs_st_writer_add(w, name, "F32", p->n_dims, p->shape, p->g, &err)) goto out;
    }
    if (bs_st_writer_write(w, out, &err)) goto out;
    printf("loss %.7g  ce %.7g  l1 %.7g  confidence %.7g  (%.0f supervised rows, %.0f blocks)\n", t.loss, t.ce, t.l1, t.conf, t.n_tokens, t.n_blocks);
    rc = 0;
out:
    if (rc) fprintf(stderr, "blockspec loss: %s\n", err.msg);
    if (w) bs_st_writer_free(w);
    if (dr) dr->free(dr);
    if (target) target->free(target);
    if (bk) bs_checkpoint_close(bk);
    free(logits); free(confl); free(evm); free(tid); free(keep); free(mask8);
    return rc;
}
