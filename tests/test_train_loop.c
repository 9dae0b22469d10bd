// The training loop end to end with the toy bigram task (train_toy.h): the loss falls, the CSV log and
// the plot are written, checkpoints resume bit-identically, mismatched checkpoints are refused, and a
// checkpoint write that fails half-way leaves the previous one intact.
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"
#include "train/checkpoint.h"
#include "train/trainer.h"
#include "train_toy.h"

#define V 32
// Documents following the bigram rule next = (7x + 3) mod V, each from its own start token, which is not a
// label (loss mask 0: nothing predicts where a document starts), so the whole objective is learnable.
static int make_corpus(const char *path, int n_docs, int first, bs_err *err) {
    bs_corpus_writer *w;
    if (bs_corpus_writer_open(&w, path, V, 0xabc, 1, err)) return -1;
    for (int d = 0; d < n_docs; d++) {
        int32_t ids[40]; uint8_t mask[40]; int n = 20 + d % 17, x = (first + d * 5) % V;
        for (int k = 0; k < n; k++) { ids[k] = x; x = (7 * x + 3) % V; mask[k] = k > 0; }
        if (bs_corpus_writer_add(w, ids, mask, n, err)) { bs_corpus_writer_abort(w); return -1; }
    }
    return bs_corpus_writer_finish(w, err);
}

typedef struct { int steps, evals, notes; double first_loss, last_loss, first_eval, last_eval; char plot_note[512], last_line[512]; } seen;
static void on_progress(const bs_train_progress *p, void *ctx) {
    seen *s = ctx;
    char line[512];
    bs_train_format_progress(p, line, sizeof line);   // exercised on every report, never printed here
    if (!p->note && !p->is_eval) snprintf(s->last_line, sizeof s->last_line, "%s", line);
    if (p->note) { s->notes++; if (strstr(p->note, "plot")) snprintf(s->plot_note, sizeof s->plot_note, "%s", p->note); return; }
    if (p->is_eval) { if (!s->evals++) s->first_eval = p->terms.loss; s->last_eval = p->terms.loss; return; }
    if (!s->steps++) s->first_loss = p->terms.loss;
    s->last_loss = p->terms.loss;
}

typedef struct { bs_corpus *train, *held; } corpora;
static int open_corpora(const char *dir, corpora *c, bs_err *err) {
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/train.bsc", dir); snprintf(b, sizeof b, "%s/held.bsc", dir);
    if (make_corpus(a, 40, 0, err) || make_corpus(b, 6, 11, err)) return -1;
    if (bs_corpus_open(&c->train, a, err)) return -1;
    return bs_corpus_open(&c->held, b, err);
}

static bs_train_opts toy_opts(const char *out) {
    bs_train_opts o = bs_train_opts_default();
    o.steps = 40; o.batch = 2; o.accum = 2; o.seq_len = 16; o.lr = 0.1; o.warmup_ratio = 0.1; o.weight_decay = 0.01;
    o.eval_every = 10; o.eval_seqs = 4; o.out_dir = out; o.seed = 3; o.no_plot = 1;
    return o;
}

static int file_size(const char *path) { FILE *f = fopen(path, "rb"); if (!f) return -1; fseek(f, 0, SEEK_END); int n = (int)ftell(f); fclose(f); return n; }

TEST(train_loop_loss_falls_and_logs) {
    const char *dir = bs_test_tmpdir("loop");
    CHECK(dir);
    bs_err err;
    corpora c;
    CHECK(open_corpora(dir, &c, &err) == 0, "%s", err.msg);
    bs_train_task *t;
    CHECK(toy_task_new(&t, V, 16, 1, &err) == 0, "%s", err.msg);
    char out[512]; snprintf(out, sizeof out, "%s/run", dir);
    bs_train_opts o = toy_opts(out);
    o.no_plot = 0;
    o.peak_flops = 1e9;
    seen s = { 0 };
    CHECK(bs_train_run(t, c.train, c.held, &o, on_progress, &s, &err) == 0, "%s", err.msg);
    CHECK(s.steps == 40 && s.evals == 4, "%d steps, %d evaluations reported", s.steps, s.evals);
    // ln 32 = 3.47 at the start; a bigram table learns the deterministic rule.
    CHECK(s.first_loss > 3.0 && s.last_loss < s.first_loss / 20, "train loss %g -> %g: did not fall 20x", s.first_loss, s.last_loss);
    const char *fields[] = { "step 40/40 |", "| loss 0.0", "| lr ", "| norm ", " tok/s", "| MFU ", "| ETA 0s" };
    for (int i = 0; i < 7; i++) CHECK(strstr(s.last_line, fields[i]), "progress line lacks \"%s\": %s", fields[i], s.last_line);
    CHECK(s.last_eval < s.first_eval / 3, "held-out loss %g -> %g: did not fall 3x", s.first_eval, s.last_eval);
    char path[700], line[512];
    snprintf(path, sizeof path, "%s/train_log.csv", out);
    FILE *f = fopen(path, "r");
    CHECK(f, "no CSV log");
    int rows = 0, held = 0;
    CHECK(fgets(line, sizeof line, f) && !strncmp(line, "step,split,loss", 15), "CSV header: %s", line);
    while (fgets(line, sizeof line, f)) { rows++; held += strstr(line, ",heldout,") != NULL; }
    fclose(f);
    CHECK(rows == 44 && held == 4, "CSV has %d rows (%d held-out), want 40 + 4", rows, held);
    snprintf(path, sizeof path, "%s/%s", out, BS_TRAIN_STATE_FILE);
    CHECK(file_size(path) > 0, "no checkpoint");
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    CHECK(file_size(path) > 0, "no export");
    snprintf(path, sizeof path, "%s/loss.png", out);
    if (s.plot_note[0]) {
        CHECK(strstr(s.plot_note, "gnuplot is not installed") && file_size(path) < 0, "plot note: %s", s.plot_note);
        t->free(t); bs_corpus_close(c.train); bs_corpus_close(c.held);
        SKIP("gnuplot is not installed: the PNG was skipped with a note (checked); install gnuplot-nox to check the PNG");
    }
    f = fopen(path, "rb");
    unsigned char magic[8] = { 0 };
    CHECK(f && fread(magic, 1, 8, f) == 8 && !memcmp(magic, "\x89PNG\r\n\x1a\n", 8), "loss.png is missing or not a PNG");
    fclose(f);
    CHECK(file_size(path) > 2000, "loss.png is only %d bytes", file_size(path));
    t->free(t); bs_corpus_close(c.train); bs_corpus_close(c.held);
}

// Reads the loss column of the train rows of a CSV log.
static int read_losses(const char *dir, double *loss, int cap) {
    char path[600], line[512];
    snprintf(path, sizeof path, "%s/train_log.csv", dir);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0;
    while (fgets(line, sizeof line, f) && n < cap) {
        char *p = strstr(line, ",train,");
        if (p) loss[n++] = strtod(p + 7, NULL);
    }
    fclose(f);
    return n;
}

static int same_files(const char *a, const char *b) {
    char cmd[2100]; snprintf(cmd, sizeof cmd, "cmp -s %s %s", a, b);
    return system(cmd) == 0;
}

TEST(train_resume_bit_identical) {
    const char *dir = bs_test_tmpdir("resume");
    CHECK(dir);
    bs_err err;
    corpora c;
    CHECK(open_corpora(dir, &c, &err) == 0, "%s", err.msg);
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/a", dir); snprintf(b, sizeof b, "%s/b", dir);
    bs_train_task *ta, *tb1, *tb2;
    CHECK(toy_task_new(&ta, V, 8, 1, &err) == 0 && toy_task_new(&tb1, V, 8, 1, &err) == 0 && toy_task_new(&tb2, V, 8, 2, &err) == 0, "%s", err.msg);
    bs_train_opts oa = toy_opts(a), ob = toy_opts(b);
    oa.steps = ob.steps = 12;
    CHECK(bs_train_run(ta, c.train, c.held, &oa, NULL, NULL, &err) == 0, "%s", err.msg);
    ob.stop_after = 5;   // stops (saving) after step 5; a new process would then resume
    CHECK(bs_train_run(tb1, c.train, c.held, &ob, NULL, NULL, &err) == 0, "%s", err.msg);
    ob.stop_after = 0; ob.resume_dir = b;
    // tb2 starts from other weights (seed 2): everything must come from the checkpoint.
    CHECK(bs_train_run(tb2, c.train, c.held, &ob, NULL, NULL, &err) == 0, "%s", err.msg);
    for (int i = 0; i < ta->params.n; i++)
        CHECK(!memcmp(ta->params.p[i].w, tb2->params.p[i].w, sizeof(float) * ta->params.p[i].n), "%s differs after resume", ta->params.p[i].name);
    char fa[700], fb[700];
    snprintf(fa, sizeof fa, "%s/%s", a, BS_TRAIN_STATE_FILE); snprintf(fb, sizeof fb, "%s/%s", b, BS_TRAIN_STATE_FILE);
    CHECK(same_files(fa, fb), "the final checkpoints (weights, moments, rng, data position) differ");
    double la[64], lb[64];
    int na = read_losses(a, la, 64), nb = read_losses(b, lb, 64);
    CHECK(na == 12 && nb == 12, "CSV rows %d and %d, want 12 (the resumed log keeps steps 1-5)", na, nb);
    for (int i = 0; i < 12; i++) CHECK(la[i] == lb[i], "step %d loss %.9g vs %.9g", i + 1, la[i], lb[i]);
    ta->free(ta); tb1->free(tb1); tb2->free(tb2);
    bs_corpus_close(c.train); bs_corpus_close(c.held);
}

TEST(train_resume_refuses_mismatch) {
    const char *dir = bs_test_tmpdir("mismatch");
    CHECK(dir);
    bs_err err;
    corpora c;
    CHECK(open_corpora(dir, &c, &err) == 0, "%s", err.msg);
    char out[512]; snprintf(out, sizeof out, "%s/run", dir);
    bs_train_task *t;
    CHECK(toy_task_new(&t, V, 8, 1, &err) == 0, "%s", err.msg);
    bs_train_opts o = toy_opts(out);
    o.steps = 4; o.stop_after = 2;
    CHECK(bs_train_run(t, c.train, NULL, &o, NULL, NULL, &err) == 0, "%s", err.msg);
    t->free(t);
    o.resume_dir = out; o.stop_after = 0;
    // Another shape: the message names the tensor and both shapes.
    CHECK(toy_task_new(&t, V, 6, 1, &err) == 0, "%s", err.msg);
    CHECK(bs_train_run(t, c.train, NULL, &o, NULL, NULL, &err) != 0, "a checkpoint of another shape was accepted");
    CHECK(strstr(err.msg, "embed.weight") && strstr(err.msg, "[32, 8]") && strstr(err.msg, "[32, 6]"), "%s", err.msg);
    t->free(t);
    // Another kind of run.
    CHECK(toy_task_new(&t, V, 8, 1, &err) == 0, "%s", err.msg);
    t->kind = "dspark";
    CHECK(bs_train_run(t, c.train, NULL, &o, NULL, NULL, &err) != 0 && strstr(err.msg, "a checkpoint of a toy run") && strstr(err.msg, "dspark"), "%s", err.msg);
    t->kind = "toy";
    // A frozen tensor made trainable.
    bs_param *g = bs_param_find(&t->params, "gain");
    g->trainable = 1; g->g = calloc(g->n, sizeof(float));
    CHECK(bs_train_run(t, c.train, NULL, &o, NULL, NULL, &err) != 0 && strstr(err.msg, "gain is frozen in the checkpoint, trainable in the model"), "%s", err.msg);
    g->trainable = 0; free(g->g); g->g = NULL;
    // Other settings or other data.
    o.lr = 0.01;
    CHECK(bs_train_run(t, c.train, NULL, &o, NULL, NULL, &err) != 0 && strstr(err.msg, "lr = 0.1") && strstr(err.msg, "lr = 0.01"), "%s", err.msg);
    o.lr = 0.1;
    CHECK(bs_train_run(t, c.held, NULL, &o, NULL, NULL, &err) != 0 && strstr(err.msg, "corpus_tokens"), "%s", err.msg);
    // No checkpoint at all.
    o.resume_dir = dir;
    CHECK(bs_train_run(t, c.train, NULL, &o, NULL, NULL, &err) != 0 && strstr(err.msg, BS_TRAIN_STATE_FILE), "%s", err.msg);
    // The matching one still resumes.
    o.resume_dir = out;
    CHECK(bs_train_run(t, c.train, NULL, &o, NULL, NULL, &err) == 0, "%s", err.msg);
    t->free(t);
    bs_corpus_close(c.train); bs_corpus_close(c.held);
}

// A checkpoint write that dies half-way (the file-size limit cuts it, as a full disk would) must leave the
// last checkpoint loadable and unchanged.
TEST(train_checkpoint_failed_write_keeps_last) {
    const char *dir = bs_test_tmpdir("crash");
    CHECK(dir);
    bs_err err;
    corpora c;
    CHECK(open_corpora(dir, &c, &err) == 0, "%s", err.msg);
    char out[512], ck[700], copy[800], cmd[2000];
    snprintf(out, sizeof out, "%s/run", dir);
    snprintf(ck, sizeof ck, "%s/%s", out, BS_TRAIN_STATE_FILE);
    snprintf(copy, sizeof copy, "%s/saved.copy", dir);
    bs_train_task *t;
    CHECK(toy_task_new(&t, V, 8, 1, &err) == 0, "%s", err.msg);
    bs_train_opts o = toy_opts(out);
    o.steps = 3;
    CHECK(bs_train_run(t, c.train, NULL, &o, NULL, NULL, &err) == 0, "%s", err.msg);
    snprintf(cmd, sizeof cmd, "cp %s %s", ck, copy);
    CHECK(system(cmd) == 0);
    int size = file_size(ck);
    CHECK(size > 4096, "checkpoint of %d bytes", size);
    pid_t pid = fork();
    if (pid == 0) {   // the writer: new weights, then a save that can write only half the file
        bs_adamw opt; bs_adamw_cfg cfg = bs_adamw_defaults(1, 0); bs_err e;
        if (bs_adamw_init(&opt, &t->params, &cfg, &e)) _exit(3);
        for (int i = 0; i < t->params.n; i++) t->params.p[i].w[0] += 1;
        bs_train_state st = { .step = 99 };
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = { (rlim_t)size / 2, (rlim_t)size / 2 };
        setrlimit(RLIMIT_FSIZE, &rl);
        int rc = bs_train_ckpt_save(out, t, &opt, &st, &e);
        _exit(rc != 0 && strstr(e.msg, "unchanged") ? 0 : 4);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status), "writer process died");
    CHECK(WEXITSTATUS(status) == 0, "the half-written save did not fail cleanly (child status %d)", WEXITSTATUS(status));
    CHECK(same_files(ck, copy), "the last checkpoint changed after a failed write");
    char tmp[800]; snprintf(tmp, sizeof tmp, "%s.tmp", ck);
    CHECK(file_size(tmp) < 0, "the failed write left its temporary file");
    // And it still resumes.
    o.steps = 3; o.resume_dir = out;
    CHECK(bs_train_run(t, c.train, NULL, &o, NULL, NULL, &err) == 0, "%s", err.msg);
    t->free(t);
    bs_corpus_close(c.train); bs_corpus_close(c.held);
}

// The toy task's own gradient against central differences, so the loop tests rest on a correct model.
TEST(train_toy_task_gradient) {
    bs_err err;
    bs_train_task *t;
    CHECK(toy_task_new(&t, V, 8, 5, &err) == 0, "%s", err.msg);
    int32_t ids[12] = { 1, 5, 9, 2, 31, 0, 7, 7, 3, 18, 4, 6 };
    bs_train_seq s = { ids, NULL, 12 };
    bs_loss_terms terms;
    bs_param_zero_grad(&t->params);
    CHECK(t->loss_grad(t, &s, 1.0f, NULL, &terms, &err) == 0, "%s", err.msg);
    double worst = 0;
    for (int i = 0; i < t->params.n; i++) {
        bs_param *p = &t->params.p[i];
        if (!p->trainable) continue;
        for (int64_t j = 0; j < p->n; j += 7) {
            float w0 = p->w[j];
            bs_loss_terms lp, lm;
            p->w[j] = w0 + 1e-2f; t->loss_eval(t, &s, NULL, &lp, &err);
            p->w[j] = w0 - 1e-2f; t->loss_eval(t, &s, NULL, &lm, &err);
            p->w[j] = w0;
            double fd = (lp.loss - lm.loss) / 2e-2, d = fabs(fd - p->g[j]);
            if (d > worst) worst = d;
        }
    }
    CHECK(worst < 1e-4, "toy gradient differs from central differences by %g", worst);
    t->free(t);
}

// The loop's device-resident path (task.h: loss_grad_batch, opt_step, sync_to_host / sync_from_host), as the
// CUDA target uses it, checked on the CPU: a toy task whose "device" keeps its own AdamW moments and step
// count must train, checkpoint and resume to exactly the weights of the host path.
typedef struct { bs_adamw opt; int (*inner)(bs_train_task *, const bs_train_seq *, float, bs_rng *, bs_loss_terms *, bs_err *); } emu_dev;
static int emu_batch(bs_train_task *t, const bs_train_seq *s, int n, float scale, bs_rng *rng, bs_loss_terms *terms, bs_err *err) {
    emu_dev *d = t->owner_data;
    bs_loss_terms sum = { 0 };
    for (int i = 0; i < n; i++) {
        bs_loss_terms x = { 0 };
        if (d->inner(t, &s[i], scale, rng, &x, err)) return -1;
        sum.loss += x.loss / n; sum.ce += x.ce / n; sum.n_tokens += x.n_tokens;
    }
    *terms = sum;
    return 0;
}
static int emu_step(bs_train_task *t, const bs_adamw_settings *s, double lr, double *norm, bs_err *err) {
    emu_dev *d = t->owner_data;
    *norm = bs_clip_grad_norm(&t->params, s->clip);
    bs_adamw_step(&d->opt, lr);
    bs_param_zero_grad(&t->params);
    return 0;
}
static int emu_sync(bs_train_task *t, float *const *m, float *const *v, int64_t steps, int to_dev) {
    emu_dev *d = t->owner_data;
    for (int i = 0; i < t->params.n; i++) {
        if (!d->opt.m[i]) continue;
        size_t b = sizeof(float) * t->params.p[i].n;
        if (to_dev) { memcpy(d->opt.m[i], m[i], b); memcpy(d->opt.v[i], v[i], b); }
        else { memcpy(m[i], d->opt.m[i], b); memcpy(v[i], d->opt.v[i], b); }
    }
    if (to_dev && steps >= 0) d->opt.t = steps;
    return 0;
}
static int emu_to_host(bs_train_task *t, float *const *m, float *const *v, bs_err *err) { return emu_sync(t, m, v, -1, 0); }
static int emu_from_host(bs_train_task *t, float *const *m, float *const *v, int64_t s, bs_err *err) { return emu_sync(t, m, v, s, 1); }
static int emu_attach(bs_train_task *t, double lr, double wd, emu_dev *d, bs_err *err) {
    bs_adamw_cfg cfg = bs_adamw_defaults(lr, wd);
    if (bs_adamw_init(&d->opt, &t->params, &cfg, err)) return -1;
    d->inner = t->loss_grad;
    t->owner_data = d;
    t->loss_grad_batch = emu_batch; t->opt_step = emu_step; t->sync_to_host = emu_to_host; t->sync_from_host = emu_from_host;
    return 0;
}

TEST(train_loop_device_hooks_match_host_path) {
    const char *dir = bs_test_tmpdir("devhooks");
    CHECK(dir);
    bs_err err;
    corpora c;
    CHECK(open_corpora(dir, &c, &err) == 0, "%s", err.msg);
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/host", dir); snprintf(b, sizeof b, "%s/dev", dir);
    bs_train_task *th, *td1, *td2;
    CHECK(toy_task_new(&th, V, 8, 1, &err) == 0 && toy_task_new(&td1, V, 8, 1, &err) == 0 && toy_task_new(&td2, V, 8, 2, &err) == 0, "%s", err.msg);
    bs_train_opts oh = toy_opts(a), od = toy_opts(b);
    oh.steps = od.steps = 12;
    emu_dev d1, d2;
    CHECK(emu_attach(td1, od.lr, od.weight_decay, &d1, &err) == 0 && emu_attach(td2, od.lr, od.weight_decay, &d2, &err) == 0, "%s", err.msg);
    CHECK(bs_train_run(th, c.train, c.held, &oh, NULL, NULL, &err) == 0, "%s", err.msg);
    od.stop_after = 5;   // the device run stops at step 5 (checkpoint from the device's moments) and resumes
    CHECK(bs_train_run(td1, c.train, c.held, &od, NULL, NULL, &err) == 0, "%s", err.msg);
    od.stop_after = 0; od.resume_dir = b;
    CHECK(bs_train_run(td2, c.train, c.held, &od, NULL, NULL, &err) == 0, "%s", err.msg);
    CHECK(d2.opt.t == 12, "the device's AdamW count after the resumed run is %lld, want 12", (long long)d2.opt.t);
    double lh[64], ld[64];
    int nh = read_losses(a, lh, 64), nd = read_losses(b, ld, 64);
    CHECK(nh == 12 && nd == 12, "CSV rows %d and %d", nh, nd);
    for (int i = 0; i < 12 && i < nd; i++) CHECK(fabs(lh[i] - ld[i]) <= 1e-6 * fabs(lh[i]), "step %d loss %.9g vs %.9g", i + 1, lh[i], ld[i]);
    for (int i = 0; i < th->params.n; i++)
        CHECK(!memcmp(th->params.p[i].w, td2->params.p[i].w, sizeof(float) * th->params.p[i].n), "%s differs between the host and device paths", th->params.p[i].name);
    bs_adamw_free(&d1.opt); bs_adamw_free(&d2.opt);
    th->free(th); td1->free(td1); td2->free(td2);
    bs_corpus_close(c.train); bs_corpus_close(c.held);
}
