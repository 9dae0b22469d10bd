// The cost model's file and cache (cli/cost_model.h).
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cli/cost_model.h"
#include "io/json.h"
#include "runtime/profile.h"
#include "util/threadpool.h"

#define PROFILE_FORMAT "blockspec-profile-1"

void cli_cost_device_key(const char *device_name, char *buf, size_t len) {
    if (strcmp(device_name, "cpu") && strncmp(device_name, "cpu-", 4)) { snprintf(buf, len, "%s", device_name); return; }
    char model[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (!strncmp(line, "model name", 10) && c) {
            snprintf(model, sizeof model, "%s", c + 2 + (c[1] != ' ' ? -1 : 0));
            model[strcspn(model, "\n")] = 0;
            break;
        }
    }
    if (f) fclose(f);
    snprintf(buf, len, "%s %s %dt", device_name, model, bs_pool_size());
}

char *cli_cost_cache_path(const char *device, const char *shape, const char *drafter, int mkdirs) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dir[4096];
    if (xdg && *xdg) snprintf(dir, sizeof dir, "%s/blockspec", xdg);
    else if (home && *home) snprintf(dir, sizeof dir, "%s/.cache/blockspec", home);
    else return NULL;
    if (mkdirs) {
        char *slash = strrchr(dir, '/');
        *slash = 0; mkdir(dir, 0755); *slash = '/';   // the parent ($HOME/.cache) may be missing too
        mkdir(dir, 0755);
    }
    char key[1024];
    snprintf(key, sizeof key, "%s-%s%s%s", device, shape, drafter ? "-" : "", drafter ? drafter : "");
    for (char *p = key; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '.' || *p == '-' || *p == '_')) *p = '_';
    size_t n = strlen(dir) + strlen(key) + 32;
    char *path = malloc(n);
    if (path) snprintf(path, n, "%s/profile-%s.json", dir, key);
    return path;
}

void cli_profile_points_free(cli_profile_points *p) {
    free(p->rows); free(p->sps); free(p->seqs1); free(p->sps1); free(p->seqsd); free(p->pps);
    memset(p, 0, sizeof *p);
}

void cli_costs_free(cli_costs *c) {
    free(c->sps); free(c->sps1); free(c->dps);
    memset(c, 0, sizeof *c);
}

// The dense table (counts 1..xs[m-1]) from measured points: between two points the time is linear in the
// count. A forward of more rows does all the work of fewer, so a time lower than a smaller count's is noise
// (a slice lost while measuring the smaller one): the time is made non-decreasing by taking, at each count,
// the least time measured at that count or above. dense: room for xs[m-1] entries.
static void densify(const int *xs, const double *v, int m, double *dense) {
    dense[0] = v[0];
    for (int k = 0; k + 1 < m; k++) {
        double t0 = 1 / v[k], t1 = 1 / v[k + 1];
        for (int b = xs[k]; b <= xs[k + 1]; b++) dense[b - 1] = 1 / (t0 + (t1 - t0) * (b - xs[k]) / (xs[k + 1] - xs[k]));
    }
    for (int b = xs[m - 1] - 1; b >= 1; b--) if (dense[b - 1] < dense[b]) dense[b - 1] = dense[b];
}

static double *dense_table(const int *xs, const double *v, int m, int *n) {
    double *d = m > 0 ? malloc(sizeof(double) * xs[m - 1]) : NULL;
    if (d) { densify(xs, v, m, d); *n = xs[m - 1]; }
    return d;
}

// The counts measured up to top: 1..16 each, then every 8 to 128 and every 32 after, each of those also
// one past it (17, 24, 25, 32, 33, ...), and top. The step time of a GPU forward rises in steps at
// multiples of 8 rows (the GEMMs' column tiles: on the H200 8B shape 8.6 ms at 32 rows, 15.4 at 40), which
// the straight line between two points 8 apart would spread over the interval: measured on both sides,
// the step stays where it is and the line between b + 1 and b + 8 stays close.
static int *grid(int top, int *m) {
    if (top < 1) top = 1;
    int *x = malloc(sizeof(int) * (top + 1)), k = 0;
    if (!x) return NULL;
    for (int b = 1; b <= top; b += b < 16 ? 1 : b < 128 ? 8 : 32) {
        x[k++] = b;
        if (b >= 16 && b + 1 <= top) x[k++] = b + 1;
    }
    if (x[k - 1] != top) x[k++] = top;
    *m = k;
    return x;
}

static int max_seqs(const cli_cost_opts *o) {
    int block = o->block > 0 ? o->block : 1;
    return o->max_seqs > 0 ? o->max_seqs : (o->max_rows + block - 1) / block;
}

int cli_cost_measure(const cli_cost_opts *o, cli_profile_points *p, char *err, size_t len) {
    memset(p, 0, sizeof *p);
    int S = max_seqs(o);
    if (!(p->rows = grid(o->max_rows, &p->n)) || !(p->sps = malloc(sizeof(double) * p->n)) ||
        !(p->seqs1 = grid(S, &p->n1)) || !(p->sps1 = malloc(sizeof(double) * p->n1))) goto oom;
    if (o->measure(o->measure_ctx, p->rows, p->n, o->ctx, o->block, o->reps, p->sps, err, len) ||
        o->measure(o->measure_ctx, p->seqs1, p->n1, o->ctx, 1, o->reps, p->sps1, err, len)) goto fail;
    if (o->drafter && o->measure_draft) {
        if (!(p->seqsd = grid(S, &p->nd)) || !(p->pps = malloc(sizeof(double) * p->nd))) goto oom;
        if (o->measure_draft(o->measure_draft_ctx, p->seqsd, p->nd, o->ctx, o->drafts, o->reps, p->pps, err, len)) goto fail;
    }
    return 0;
oom:
    snprintf(err, len, "out of memory");
fail:
    cli_profile_points_free(p);
    return -1;
}

static void add_points(cJSON *j, const char *name, const char *x, const char *y, const int *xs, const double *v, int m) {
    cJSON *pts = cJSON_AddArrayToObject(j, name);
    for (int i = 0; i < m; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, x, xs[i]);
        cJSON_AddNumberToObject(p, y, v[i]);
        cJSON_AddNumberToObject(p, "ms", 1e3 / v[i]);
        cJSON_AddItemToArray(pts, p);
    }
}

int cli_cost_save(const char *path, const cli_cost_opts *o, const cli_profile_points *p, char *err, size_t len) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", PROFILE_FORMAT);
    cJSON_AddStringToObject(j, "device", o->device);
    cJSON_AddStringToObject(j, "shape", o->shape);
    cJSON_AddNumberToObject(j, "ctx", o->ctx);
    cJSON_AddNumberToObject(j, "block", o->block);
    cJSON_AddNumberToObject(j, "reps", o->reps);
    add_points(j, "points", "rows", "sps", p->rows, p->sps, p->n);
    if (p->n1) add_points(j, "plain", "seqs", "sps", p->seqs1, p->sps1, p->n1);
    if (p->nd) {
        cJSON_AddStringToObject(j, "drafter", o->drafter);
        add_points(j, "draft", "seqs", "pps", p->seqsd, p->pps, p->nd);
    }
    bs_err e = {0};
    int rc = bs_json_write_file(j, path, &e);
    cJSON_Delete(j);
    if (rc) snprintf(err, len, "%s", e.msg);
    return rc;
}

// One table of the file: field `name`, a list of {x: count, y: per second}, counts increasing from 1.
// Absent and optional: *dense NULL. Errors name the file and the field.
static int load_table(const char *path, const cJSON *j, const char *name, const char *x, const char *y, int required, double **dense, int *n,
                      char *err, size_t len) {
    const cJSON *pts = cJSON_GetObjectItemCaseSensitive(j, name);
    *dense = NULL; *n = 0;
    if (!pts && !required) return 0;
    int m = cJSON_GetArraySize(pts), prev = 0, i = 0, rc = -1;
    if (!cJSON_IsArray(pts) || m < 1) { snprintf(err, len, "%s: field \"%s\" must be a non-empty list of {\"%s\", \"%s\"}", path, name, x, y); return -1; }
    int *xs = malloc(sizeof(int) * m);
    double *v = malloc(sizeof(double) * m);
    if (!xs || !v) { snprintf(err, len, "out of memory"); goto out; }
    for (const cJSON *p = pts->child; p; p = p->next, i++) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(p, x), *s = cJSON_GetObjectItemCaseSensitive(p, y);
        if (!bs_json_is_int(r, 1, 4096) || r->valueint <= prev) {
            snprintf(err, len, "%s: %s[%d].%s must be an integer in [1, 4096], increasing%s", path, name, i, x, i ? "" : " (the first one 1)");
            goto out;
        }
        if (!cJSON_IsNumber(s) || !(s->valuedouble > 0) || s->valuedouble > 1e12) {
            snprintf(err, len, "%s: %s[%d].%s must be a number > 0 (per second)", path, name, i, y);
            goto out;
        }
        if (i == 0 && r->valueint != 1) { snprintf(err, len, "%s: %s[0].%s must be 1", path, name, x); goto out; }
        xs[i] = prev = r->valueint; v[i] = s->valuedouble;
    }
    if (!(*dense = dense_table(xs, v, m, n))) { snprintf(err, len, "out of memory"); goto out; }
    rc = 0;
out:
    free(xs); free(v);
    return rc;
}

int cli_costs_load(const char *path, const char *want_device, const char *want_shape, const char *want_drafter, cli_costs *c, char *err,
                   size_t len) {
    bs_err e = {0};
    memset(c, 0, sizeof *c);
    cJSON *j = bs_json_load(path, &e);
    int rc = -1;
    if (!j) { snprintf(err, len, "%s", e.msg); return -1; }
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "format"), *dev = cJSON_GetObjectItemCaseSensitive(j, "device"),
                *sh = cJSON_GetObjectItemCaseSensitive(j, "shape"), *bl = cJSON_GetObjectItemCaseSensitive(j, "block"),
                *dr = cJSON_GetObjectItemCaseSensitive(j, "drafter");
    if (!cJSON_IsObject(j)) { snprintf(err, len, "%s: expected a JSON object", path); goto out; }
    if (!cJSON_IsString(f) || strcmp(f->valuestring, PROFILE_FORMAT)) { snprintf(err, len, "%s: field \"format\" must be \"%s\"", path, PROFILE_FORMAT); goto out; }
    if (!cJSON_IsString(dev) || !cJSON_IsString(sh)) { snprintf(err, len, "%s: fields \"device\" and \"shape\" must be strings", path); goto out; }
    if (want_device && strcmp(dev->valuestring, want_device)) { snprintf(err, len, "%s: measured on \"%s\", not this device (\"%s\")", path, dev->valuestring, want_device); goto out; }
    if (want_shape && strcmp(sh->valuestring, want_shape)) { snprintf(err, len, "%s: measured for a target of shape %s, not %s", path, sh->valuestring, want_shape); goto out; }
    if (bl && !bs_json_is_int(bl, 1, 64)) { snprintf(err, len, "%s: field \"block\" must be an integer in [1, 64]", path); goto out; }
    if (dr && !cJSON_IsString(dr)) { snprintf(err, len, "%s: field \"drafter\" must be a string (the drafter's shape)", path); goto out; }
    if (want_drafter && (!dr || strcmp(dr->valuestring, want_drafter))) {
        snprintf(err, len, "%s: has no drafter table for %s", path, want_drafter);
        goto out;
    }
    c->block = bl ? bl->valueint : 5;
    if (load_table(path, j, "points", "rows", "sps", 1, &c->sps, &c->n_sps, err, len) ||
        load_table(path, j, "plain", "seqs", "sps", 0, &c->sps1, &c->n_sps1, err, len) ||
        load_table(path, j, "draft", "seqs", "pps", dr != NULL, &c->dps, &c->n_dps, err, len)) goto out;
    rc = 0;
out:
    if (rc) cli_costs_free(c);
    cJSON_Delete(j);
    return rc;
}

int cli_cost_load(const char *path, const char *want_device, const char *want_shape, double **sps, int *n, char *err, size_t len) {
    cli_costs c;
    if (cli_costs_load(path, want_device, want_shape, NULL, &c, err, len)) return -1;
    *sps = c.sps; *n = c.n_sps;
    c.sps = NULL;
    cli_costs_free(&c);
    return 0;
}

// Whether cached tables serve the caller: every table it needs, covering its counts.
static int covers(const cli_costs *c, const cli_cost_opts *o) {
    int S = max_seqs(o);
    return c->n_sps >= o->max_rows && c->n_sps1 >= S && (!o->drafter || c->n_dps >= S);
}

int cli_costs_get(const cli_cost_opts *o, cli_costs *c, char *err, size_t len) {
    if (o->file) return cli_costs_load(o->file, NULL, NULL, NULL, c, err, len);
    char *path = cli_cost_cache_path(o->device, o->shape, o->drafter, 1);
    char lerr[1024];
    if (path && !cli_costs_load(path, o->device, o->shape, o->drafter, c, lerr, sizeof lerr)) {
        if (covers(c, o)) { free(path); return 0; }
        cli_costs_free(c);
        if (!o->quiet) fprintf(stderr, "blockspec: the cached cost model %s covers fewer rows or sequences than %d / %d: measuring again\n", path,
                               o->max_rows, max_seqs(o));
    } else if (path && !o->quiet) {
        struct stat st;
        if (!stat(path, &st)) fprintf(stderr, "blockspec: ignoring the cached cost model: %s\n", lerr);
    }
    if (!o->quiet)
        fprintf(stderr, "blockspec: measuring the cost model (target: 1..%d rows, 1..%d one-row sequences%s; `blockspec profile` does it ahead)...\n",
                o->max_rows, max_seqs(o), o->drafter ? "; the drafter's pass" : "");
    cli_profile_points p;
    if (cli_cost_measure(o, &p, err, len)) { free(path); return -1; }
    if (path && cli_cost_save(path, o, &p, lerr, sizeof lerr) && !o->quiet) fprintf(stderr, "blockspec: warning: not cached: %s\n", lerr);
    free(path);
    memset(c, 0, sizeof *c);
    c->block = o->block;
    int rc = 0;
    if (!(c->sps = dense_table(p.rows, p.sps, p.n, &c->n_sps)) || !(c->sps1 = dense_table(p.seqs1, p.sps1, p.n1, &c->n_sps1)) ||
        (p.nd && !(c->dps = dense_table(p.seqsd, p.pps, p.nd, &c->n_dps)))) {
        snprintf(err, len, "out of memory");
        cli_costs_free(c);
        rc = -1;
    }
    cli_profile_points_free(&p);
    return rc;
}

int cli_measure_handle(void *ctx, const int *rows, int n, int ctx_rows, int block, int reps, double *sps, char *err, size_t len) {
    return blockspec_profile(ctx, rows, (size_t)n, ctx_rows, block, reps, sps, err, len);
}

int cli_measure_handle_draft(void *ctx, const int *seqs, int n, int ctx_rows, int drafts, int reps, double *pps, char *err, size_t len) {
    return blockspec_profile_drafter(ctx, seqs, (size_t)n, ctx_rows, drafts, reps, pps, err, len);
}

void cli_cost_keys(blockspec *bs, cli_cost_opts *o, char *dev, size_t dev_len, char *shape, size_t shape_len, char *drafter, size_t drafter_len) {
    cli_cost_device_key(blockspec_device_name(bs), dev, dev_len);
    if (blockspec_model_shape(bs, shape, shape_len)) snprintf(shape, shape_len, "unknown");
    o->device = dev; o->shape = shape;
    o->drafter = blockspec_drafter_shape(bs, drafter, drafter_len) ? NULL : drafter;
    o->measure = cli_measure_handle; o->measure_ctx = bs;
    o->measure_draft = cli_measure_handle_draft; o->measure_draft_ctx = bs;
}

blockspec_cost_model cli_costs_public(const cli_costs *c) {
    return (blockspec_cost_model){ c->sps, (size_t)c->n_sps, c->block, c->sps1, (size_t)c->n_sps1, c->dps, (size_t)c->n_dps };
}

int cli_measure_engine(void *ctx, const int *rows, int n, int ctx_rows, int block, int reps, double *sps, char *err, size_t len) {
    bs_err e = {0};
    if (bs_profile_forwards(ctx, rows, n, ctx_rows, block, reps, sps, &e)) { snprintf(err, len, "%s", e.msg); return -1; }
    return 0;
}

int cli_measure_engine_draft(void *ctx, const int *seqs, int n, int ctx_rows, int drafts, int reps, double *pps, char *err, size_t len) {
    const cli_engine_drafter *ed = ctx;
    bs_err e = {0};
    if (bs_profile_drafter(ed->e, ed->d, seqs, n, ctx_rows, drafts, reps, pps, &e)) { snprintf(err, len, "%s", e.msg); return -1; }
    return 0;
}

int cli_set_schedule(blockspec *bs, blockspec_schedule sched, const char *cost_model, int max_concurrency, int draft_max, char *err, size_t len) {
    cli_costs c = { 0 };
    if (sched == BLOCKSPEC_SCHEDULE_ALG1 || sched == BLOCKSPEC_SCHEDULE_ASYNC) {
        char dev[512], shape[256], drafter[256];
        int block = 1 + (draft_max ? draft_max : 16);
        cli_cost_opts co = { .file = cost_model, .max_rows = max_concurrency * block, .max_seqs = max_concurrency, .ctx = 256, .block = block,
                             .reps = 3, .drafts = draft_max };
        cli_cost_keys(bs, &co, dev, sizeof dev, shape, sizeof shape, drafter, sizeof drafter);
        if (cli_costs_get(&co, &c, err, len)) return -1;
    }
    blockspec_cost_model cm = cli_costs_public(&c);
    int rc = blockspec_set_schedule_costs(bs, sched, &cm, err, len);
    cli_costs_free(&c);
    return rc;
}
