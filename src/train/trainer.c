// The training loop (trainer.h).
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "train/checkpoint.h"
#include "train/loader.h"
#include "train/optim.h"
#include "train/trainer.h"
#include "util/timer.h"

#define CSV_FILE "train_log.csv"
#define CSV_HEADER "step,split,loss,ce,l1,conf,tau_est,tokens,lr,grad_norm,tok_per_s,elapsed_s\n"

bs_train_opts bs_train_opts_default(void) {
    return (bs_train_opts){ .steps = 1000, .batch = 1, .seq_len = 1024, .accum = 1, .lr = 6e-4, .warmup_ratio = 0.04,
                            .weight_decay = 0, .clip = 1.0, .eval_seqs = 16, .seed = 0 };
}

// The settings a resumed run must share with the saved one for its steps to be the ones it would have made.
static char *settings_json(const bs_train_opts *o, const bs_corpus *train) {
    cJSON *s = cJSON_CreateObject();
    cJSON_AddNumberToObject(s, "steps", (double)o->steps);
    cJSON_AddNumberToObject(s, "batch", o->batch);
    cJSON_AddNumberToObject(s, "seq_len", o->seq_len);
    cJSON_AddNumberToObject(s, "accum", o->accum);
    cJSON_AddNumberToObject(s, "lr", o->lr);
    cJSON_AddNumberToObject(s, "warmup_ratio", o->warmup_ratio);
    cJSON_AddNumberToObject(s, "weight_decay", o->weight_decay);
    cJSON_AddNumberToObject(s, "clip", o->clip);
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, o->seed);
    cJSON_AddStringToObject(s, "seed", hex);
    cJSON_AddNumberToObject(s, "corpus_tokens", (double)train->n_tokens);
    cJSON_AddNumberToObject(s, "corpus_documents", (double)train->n_docs);
    cJSON_AddNumberToObject(s, "corpus_vocab_size", (double)train->vocab_size);
    snprintf(hex, sizeof hex, "%016" PRIx64, train->tokenizer_hash);
    cJSON_AddStringToObject(s, "corpus_tokenizer_hash", hex);
    char *out = cJSON_PrintUnformatted(s);
    cJSON_Delete(s);
    return out;
}

// Names the first setting that differs between the checkpoint's and this run's.
static int compare_settings(const char *dir, const char *saved, const char *now, bs_err *err) {
    cJSON *a = cJSON_Parse(saved), *b = cJSON_Parse(now);
    int rc = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, b) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(a, it->string);
        char *xs = x ? cJSON_PrintUnformatted(x) : NULL, *ys = cJSON_PrintUnformatted(it);
        if (!xs || !ys || strcmp(xs, ys)) {
            rc = bs_fail(err, "%s: the checkpoint was made with %s = %s, this run has %s = %s; resume with the same settings and data "
                         "(or start a new run)", dir, it->string, xs ? xs : "(none)", it->string, ys ? ys : "?");
        }
        free(xs); free(ys);
        if (rc) break;
    }
    cJSON_Delete(a); cJSON_Delete(b);
    return rc;
}

// The CSV of a resumed run keeps the rows up to the checkpoint's step (a crash may have logged later ones).
static int open_csv(const bs_train_opts *o, int64_t resume_step, FILE **out, bs_err *err) {
    char path[4096], old[4096];
    snprintf(path, sizeof path, "%s/%s", o->out_dir, CSV_FILE);
    char *keep = NULL; size_t keep_len = 0;
    if (o->resume_dir) {
        snprintf(old, sizeof old, "%s/%s", o->resume_dir, CSV_FILE);
        FILE *f = fopen(old, "r");
        if (f) {
            FILE *m = open_memstream(&keep, &keep_len);
            char line[1024];
            int first = 1;
            while (m && fgets(line, sizeof line, f)) {
                if (first) { first = 0; continue; }   // the header is rewritten
                if (strtoll(line, NULL, 10) <= resume_step) fputs(line, m);
            }
            if (m) fclose(m);
            fclose(f);
        }
    }
    FILE *f = fopen(path, "w");
    if (!f) { free(keep); return bs_fail(err, "%s: cannot create (%m)", path); }
    fputs(CSV_HEADER, f);
    if (keep) fwrite(keep, 1, keep_len, f);
    free(keep);
    fflush(f);
    *out = f;
    return 0;
}

static void csv_row(FILE *f, int64_t step, const char *split, const bs_loss_terms *t, double lr, double norm, double tps, double el) {
    fprintf(f, "%lld,%s,%.9g,%.9g,%.9g,%.9g,%.9g,%.0f,%.9g,%.9g,%.1f,%.3f\n", (long long)step, split, t->loss, t->ce, t->l1, t->conf,
            t->tau_est, t->n_tokens, lr, norm, tps, el);
    fflush(f);
}

static void add_terms(bs_loss_terms *sum, const bs_loss_terms *t) {
    sum->loss += t->loss; sum->ce += t->ce; sum->l1 += t->l1; sum->conf += t->conf;
    sum->n_tokens += t->n_tokens; sum->n_blocks += t->n_blocks; sum->tau_est += t->tau_est;
}
static void mean_terms(bs_loss_terms *t, int n) {   // means of the per-sequence values; token and block counts stay sums
    t->loss /= n; t->ce /= n; t->l1 /= n; t->conf /= n; t->tau_est /= n;
}

static int evaluate(bs_train_task *task, const bs_corpus *heldout, const bs_train_opts *o, bs_loss_terms *out, bs_err *err) {
    bs_loader l;
    if (bs_loader_init(&l, heldout, o->seq_len, o->seed, 0, err)) return bs_wrap(err, "held-out corpus");
    int64_t windows = (heldout->n_tokens - 1) / (o->seq_len - 1);
    int n = o->eval_seqs < windows ? o->eval_seqs : (int)(windows > 0 ? windows : 1);
    bs_rng rng;   // the same draws at every evaluation, so evaluations compare
    bs_rng_seed(&rng, o->seed ^ 0x6576616c756174ull);
    memset(out, 0, sizeof *out);
    for (int i = 0; i < n; i++) {
        bs_train_seq s; bs_loss_terms t = { 0 };
        bs_loader_next(&l, &s);
        if (task->loss_eval(task, &s, &rng, &t, err)) { bs_loader_free(&l); return bs_wrap(err, "held-out sequence %d", i); }
        add_terms(out, &t);
    }
    mean_terms(out, n);
    bs_loader_free(&l);
    return 0;
}

// A micro-batch of windows for a device-resident task: the loader's windows live until its next call, so
// each is copied out.
typedef struct { bs_train_seq *seqs; int32_t *ids; uint8_t *mask; int seq_len; } train_batch;
static int alloc_batch(train_batch *b, int n, int seq_len, bs_err *err) {
    b->seq_len = seq_len;
    if (!(b->seqs = bs_calloc(n, sizeof *b->seqs, err)) || !(b->ids = bs_calloc((size_t)n * seq_len, sizeof *b->ids, err)) ||
        !(b->mask = bs_calloc((size_t)n * seq_len, 1, err))) return -1;
    return 0;
}
static void batch_take(train_batch *b, int i, bs_loader *l) {
    bs_train_seq s;
    bs_loader_next(l, &s);
    int32_t *ids = b->ids + (size_t)i * b->seq_len;
    uint8_t *mask = b->mask + (size_t)i * b->seq_len;
    memcpy(ids, s.ids, sizeof *ids * s.n);
    if (s.loss_mask) memcpy(mask, s.loss_mask, s.n);
    b->seqs[i] = (bs_train_seq){ ids, s.loss_mask ? mask : NULL, s.n };
}
static void free_batch(train_batch *b) { free(b->seqs); free(b->ids); free(b->mask); }

static int save(bs_train_task *task, const bs_adamw *opt, const bs_loader *loader, const bs_rng *rng, int64_t step,
                const char *settings, const bs_train_opts *o, bs_err *err) {
    // A device-resident task's weights and moments are brought to the host arrays the checkpoint writes.
    if (task->sync_to_host && task->sync_to_host(task, opt->m, opt->v, err)) return bs_wrap(err, "copying the model to the host");
    bs_train_state st = { .step = step, .data = loader->pos, .rng = *rng, .settings_json = (char *)settings };
    if (bs_train_ckpt_save(o->out_dir, task, opt, &st, err)) return -1;
    if (!o->no_export && task->export_model && task->export_model(task, o->out_dir, err)) return bs_wrap(err, "exporting the model to %s", o->out_dir);
    return 0;
}

int bs_train_run(bs_train_task *task, const bs_corpus *train, const bs_corpus *heldout, const bs_train_opts *o,
                 bs_train_progress_fn cb, void *ctx, bs_err *err) {
    if (o->steps < 1 || o->batch < 1 || o->accum < 1) return bs_fail(err, "steps, batch and accum must be at least 1");
    if (!(o->lr > 0) || o->warmup_ratio < 0 || o->warmup_ratio >= 1 || o->weight_decay < 0) return bs_fail(err, "lr must be > 0, warmup ratio in [0, 1), weight decay >= 0");
    if (!o->out_dir) return bs_fail(err, "no output folder");
    if (mkdir(o->out_dir, 0755) != 0 && errno != EEXIST) return bs_fail(err, "%s: cannot create (%m)", o->out_dir);
    if (!task->loss_grad || (heldout && !task->loss_eval)) return bs_fail(err, "the %s task has no loss function", task->kind ? task->kind : "training");
    int rc = -1;
    bs_adamw opt = { 0 };
    bs_loader loader = { 0 };
    train_batch batch = { 0 };
    FILE *csv = NULL;
    bs_train_state st = { 0 };
    char *settings = settings_json(o, train);
    bs_adamw_cfg cfg = bs_adamw_defaults(o->lr, o->weight_decay);
    if (!settings || bs_adamw_init(&opt, &task->params, &cfg, err)) goto done;
    if (bs_loader_init(&loader, train, o->seq_len, o->seed, 1, err)) { bs_wrap(err, "training corpus"); goto done; }
    if (heldout && heldout->n_tokens < o->seq_len) { bs_fail(err, "held-out corpus %s has %lld tokens, fewer than one sequence of %d", heldout->path, (long long)heldout->n_tokens, o->seq_len); goto done; }
    bs_rng rng;
    bs_rng_seed(&rng, o->seed ^ 0x7461736b726e67ull);
    int64_t step = 0;
    if (o->resume_dir) {
        if (bs_train_ckpt_load(o->resume_dir, task, &opt, &st, err)) goto done;
        if (task->sync_from_host && task->sync_from_host(task, opt.m, opt.v, opt.t, err)) { bs_wrap(err, "resuming on the device"); goto done; }
        if (compare_settings(o->resume_dir, st.settings_json, settings, err)) goto done;
        if (bs_loader_seek(&loader, st.data, err)) goto done;
        rng = st.rng;
        step = st.step;
    }
    if (open_csv(o, step, &csv, err)) goto done;
    int64_t warmup = bs_warmup_steps(o->warmup_ratio, o->steps), start = step;
    int n_seq = o->batch * o->accum;
    float scale = 1.0f / (float)n_seq;
    double t0 = bs_now(), fwd = task->flops_forward ? task->flops_forward(task, o->seq_len) : 0;
    int plot_noted = 0;
    // A device-resident task (task.h: loss_grad_batch / opt_step) takes a micro-batch at once and updates its
    // own weights; the host AdamW above then only carries the moments between checkpoints.
    const bs_adamw_settings dev_opt = { (float)cfg.beta1, (float)cfg.beta2, (float)cfg.eps, (float)cfg.weight_decay, (float)o->clip };
    if (task->loss_grad_batch && alloc_batch(&batch, o->batch, o->seq_len, err)) goto done;
    while (step < o->steps) {
        double ts = bs_now(), lr = bs_lr_schedule(o->lr, step, warmup, o->steps);
        if (!task->opt_step) bs_param_zero_grad(&task->params);
        bs_loss_terms sum = { 0 };
        if (task->loss_grad_batch) {
            for (int a = 0; a < o->accum; a++) {
                bs_loss_terms t = { 0 };
                for (int i = 0; i < o->batch; i++) batch_take(&batch, i, &loader);
                if (task->loss_grad_batch(task, batch.seqs, o->batch, scale, &rng, &t, err)) { bs_wrap(err, "step %lld, micro-batch %d", (long long)step + 1, a); goto done; }
                t.n_tokens /= o->batch; t.n_blocks /= o->batch;   // add_terms sums means x batch: see below
                for (int i = 0; i < o->batch; i++) add_terms(&sum, &t);
            }
        } else {
            for (int i = 0; i < n_seq; i++) {
                bs_train_seq s; bs_loss_terms t = { 0 };
                bs_loader_next(&loader, &s);
                if (task->loss_grad(task, &s, scale, &rng, &t, err)) { bs_wrap(err, "step %lld, sequence %d", (long long)step + 1, i); goto done; }
                add_terms(&sum, &t);
            }
        }
        mean_terms(&sum, n_seq);
        double norm = 0;
        if (task->opt_step) {
            if (task->opt_step(task, &dev_opt, lr, &norm, err)) { bs_wrap(err, "step %lld: the optimiser step", (long long)step + 1); goto done; }
            opt.t++;
        } else norm = bs_clip_grad_norm(&task->params, o->clip);
        if (!isfinite(norm) || !isfinite(sum.loss)) {
            bs_fail(err, "step %lld: the loss (%g) or gradient norm (%g) is not finite: the run diverged (lower --lr?); the last checkpoint in %s is untouched",
                    (long long)step + 1, sum.loss, norm, o->out_dir);
            goto done;
        }
        if (!task->opt_step) bs_adamw_step(&opt, lr);
        step++;
        double now = bs_now(), dt = now - ts, el = now - t0;
        bs_train_progress p = { .step = step, .steps = o->steps, .terms = sum, .lr = lr, .grad_norm = norm,
                                .tok_per_s = dt > 0 ? sum.n_tokens / dt : 0, .elapsed_s = el,
                                .eta_s = el / (double)(step - start) * (double)(o->steps - step) };
        if (o->peak_flops > 0 && fwd > 0 && dt > 0) p.mfu = 3.0 * fwd * n_seq / dt / o->peak_flops;   // forward + backward ~ 3 forwards
        csv_row(csv, step, "train", &sum, lr, norm, p.tok_per_s, el);
        if (cb) cb(&p, ctx);
        if (heldout && ((o->eval_every && step % o->eval_every == 0) || step == o->steps)) {
            bs_train_progress e = p;
            e.is_eval = 1;
            if (evaluate(task, heldout, o, &e.terms, err)) goto done;
            csv_row(csv, step, "heldout", &e.terms, lr, 0, 0, bs_now() - t0);
            if (cb) cb(&e, ctx);
        }
        int stop = (o->stop_after && step - start >= o->stop_after) || (o->time_limit_s > 0 && bs_now() - t0 >= o->time_limit_s);
        if ((o->save_every && step % o->save_every == 0) || step == o->steps || stop) {
            if (save(task, &opt, &loader, &rng, step, settings, o, err)) goto done;
            bs_train_progress n = p;
            char note[600];
            snprintf(note, sizeof note, "checkpoint at step %lld written to %s", (long long)step, o->out_dir);
            n.note = note;
            if (cb) cb(&n, ctx);
            if (!o->no_plot) {
                bs_err perr;
                int pr = bs_train_plot(o->out_dir, &perr);
                if (pr && !plot_noted) { n.note = perr.msg; if (cb) cb(&n, ctx); plot_noted = 1; }
            }
        }
        if (stop) break;
    }
    rc = 0;
done:
    if (csv) fclose(csv);
    free(st.settings_json);
    free(settings);
    bs_loader_free(&loader);
    bs_adamw_free(&opt);
    free_batch(&batch);
    return rc;
}

static void fmt_time(char *buf, size_t cap, double s) {
    if (!(s >= 0) || s > 1e8) { snprintf(buf, cap, "?"); return; }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, cap, "%lds", t);
}

void bs_train_format_progress(const bs_train_progress *p, char *buf, size_t cap) {
    const bs_loss_terms *t = &p->terms;
    int k = snprintf(buf, cap, "%s %lld/%lld | loss %.4f", p->is_eval ? "held-out @" : "step", (long long)p->step, (long long)p->steps, t->loss);
    if (t->l1 != 0 || t->conf != 0) k += snprintf(buf + k, cap > (size_t)k ? cap - k : 0, " (ce %.4f l1 %.4f conf %.4f)", t->ce, t->l1, t->conf);
    if (t->tau_est > 0) k += snprintf(buf + k, cap > (size_t)k ? cap - k : 0, " | tau~ %.3f", t->tau_est);
    if (p->is_eval) return;
    char eta[32];
    fmt_time(eta, sizeof eta, p->eta_s);
    k += snprintf(buf + k, cap > (size_t)k ? cap - k : 0, " | lr %.2e | norm %.3f | %.0f tok/s", p->lr, p->grad_norm, p->tok_per_s);
    if (p->mfu > 0) k += snprintf(buf + k, cap > (size_t)k ? cap - k : 0, " | MFU %.1f%%", 100 * p->mfu);
    snprintf(buf + k, cap > (size_t)k ? cap - k : 0, " | ETA %s", eta);
}
