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

char *cli_cost_cache_path(const char *device, const char *shape, int mkdirs) {
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
    snprintf(key, sizeof key, "%s-%s", device, shape);
    for (char *p = key; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '.' || *p == '-' || *p == '_')) *p = '_';
    size_t n = strlen(dir) + strlen(key) + 32;
    char *path = malloc(n);
    if (path) snprintf(path, n, "%s/profile-%s.json", dir, key);
    return path;
}

// The dense table (rows 1..rows[m-1]) from measured points: between two points the step time is linear in
// rows. A forward of more rows does all the work of fewer, so a step time lower than a smaller count's is
// noise (a slice lost while measuring the smaller one): the step time is made non-decreasing by taking, at
// each count, the least time measured at that count or above. dense: room for rows[m-1] entries.
static void densify(const int *rows, const double *v, int m, double *dense) {
    dense[0] = v[0];
    for (int k = 0; k + 1 < m; k++) {
        double t0 = 1 / v[k], t1 = 1 / v[k + 1];
        for (int b = rows[k]; b <= rows[k + 1]; b++) dense[b - 1] = 1 / (t0 + (t1 - t0) * (b - rows[k]) / (rows[k + 1] - rows[k]));
    }
    for (int b = rows[m - 1] - 1; b >= 1; b--) if (dense[b - 1] < dense[b]) dense[b - 1] = dense[b];
}

int cli_cost_measure(const cli_cost_opts *o, int **rows, double **sps, int *n, char *err, size_t len) {
    int B = o->max_rows < 1 ? 1 : o->max_rows, m = 0;
    int *r = malloc(sizeof(int) * (B + 1));
    double *s = malloc(sizeof(double) * (B + 1));
    if (!r || !s) { free(r); free(s); snprintf(err, len, "out of memory"); return -1; }
    for (int b = 1; b <= B; b += b < 16 ? 1 : b < 128 ? 8 : 32) r[m++] = b;
    if (r[m - 1] != B) r[m++] = B;
    if (o->measure(o->measure_ctx, r, m, o->ctx, o->block, o->reps, s, err, len)) { free(r); free(s); return -1; }
    *rows = r; *sps = s; *n = m;
    return 0;
}

int cli_cost_save(const char *path, const cli_cost_opts *o, const int *rows, const double *sps, int n, char *err, size_t len) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", PROFILE_FORMAT);
    cJSON_AddStringToObject(j, "device", o->device);
    cJSON_AddStringToObject(j, "shape", o->shape);
    cJSON_AddNumberToObject(j, "ctx", o->ctx);
    cJSON_AddNumberToObject(j, "block", o->block);
    cJSON_AddNumberToObject(j, "reps", o->reps);
    cJSON *pts = cJSON_AddArrayToObject(j, "points");
    for (int i = 0; i < n; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "rows", rows[i]);
        cJSON_AddNumberToObject(p, "sps", sps[i]);
        cJSON_AddNumberToObject(p, "ms", 1e3 / sps[i]);
        cJSON_AddItemToArray(pts, p);
    }
    bs_err e = {0};
    int rc = bs_json_write_file(j, path, &e);
    cJSON_Delete(j);
    if (rc) snprintf(err, len, "%s", e.msg);
    return rc;
}

int cli_cost_load(const char *path, const char *want_device, const char *want_shape, double **sps, int *n, char *err, size_t len) {
    bs_err e = {0};
    cJSON *j = bs_json_load(path, &e);
    double *dense = NULL;
    int rc = -1;
    if (!j) { snprintf(err, len, "%s", e.msg); return -1; }
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "format"), *dev = cJSON_GetObjectItemCaseSensitive(j, "device"),
                *sh = cJSON_GetObjectItemCaseSensitive(j, "shape"), *pts = cJSON_GetObjectItemCaseSensitive(j, "points");
    if (!cJSON_IsObject(j)) { snprintf(err, len, "%s: expected a JSON object", path); goto out; }
    if (!cJSON_IsString(f) || strcmp(f->valuestring, PROFILE_FORMAT)) { snprintf(err, len, "%s: field \"format\" must be \"%s\"", path, PROFILE_FORMAT); goto out; }
    if (!cJSON_IsString(dev) || !cJSON_IsString(sh)) { snprintf(err, len, "%s: fields \"device\" and \"shape\" must be strings", path); goto out; }
    if (want_device && strcmp(dev->valuestring, want_device)) { snprintf(err, len, "%s: measured on \"%s\", not this device (\"%s\")", path, dev->valuestring, want_device); goto out; }
    if (want_shape && strcmp(sh->valuestring, want_shape)) { snprintf(err, len, "%s: measured for a target of shape %s, not %s", path, sh->valuestring, want_shape); goto out; }
    int m = cJSON_GetArraySize(pts), prev = 0, last = 0;
    if (!cJSON_IsArray(pts) || m < 1) { snprintf(err, len, "%s: field \"points\" must be a non-empty list of {\"rows\", \"sps\"}", path); goto out; }
    int *rows = malloc(sizeof(int) * m);
    double *v = malloc(sizeof(double) * m);
    if (!rows || !v) { free(rows); free(v); snprintf(err, len, "out of memory"); goto out; }
    int i = 0;
    for (const cJSON *p = pts->child; p; p = p->next, i++) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(p, "rows"), *s = cJSON_GetObjectItemCaseSensitive(p, "sps");
        if (!bs_json_is_int(r, 1, 4096) || r->valueint <= prev) {
            snprintf(err, len, "%s: points[%d].rows must be an integer in [1, 4096], increasing%s", path, i, i ? "" : " (the first one 1)");
            free(rows); free(v); goto out;
        }
        if (!cJSON_IsNumber(s) || !(s->valuedouble > 0) || s->valuedouble > 1e12) {
            snprintf(err, len, "%s: points[%d].sps must be a number > 0 (forwards per second)", path, i);
            free(rows); free(v); goto out;
        }
        if (i == 0 && r->valueint != 1) { snprintf(err, len, "%s: points[0].rows must be 1", path); free(rows); free(v); goto out; }
        rows[i] = prev = r->valueint; v[i] = s->valuedouble;
    }
    last = rows[m - 1];
    if (!(dense = malloc(sizeof(double) * last))) { free(rows); free(v); snprintf(err, len, "out of memory"); goto out; }
    densify(rows, v, m, dense);
    free(rows); free(v);
    *sps = dense; *n = last;
    dense = NULL;
    rc = 0;
out:
    free(dense);
    cJSON_Delete(j);
    return rc;
}

int cli_cost_model(const cli_cost_opts *o, double **sps, int *n, char *err, size_t len) {
    if (o->file) return cli_cost_load(o->file, NULL, NULL, sps, n, err, len);
    char *path = cli_cost_cache_path(o->device, o->shape, 1);
    char lerr[1024];
    if (path && !cli_cost_load(path, o->device, o->shape, sps, n, lerr, sizeof lerr)) {
        if (*n >= o->max_rows) { free(path); return 0; }
        free(*sps);
        if (!o->quiet) fprintf(stderr, "blockspec: the cached cost model %s covers %d rows, fewer than %d: measuring again\n", path, *n, o->max_rows);
    } else if (path && !o->quiet) {
        struct stat st;
        if (!stat(path, &st)) fprintf(stderr, "blockspec: ignoring the cached cost model: %s\n", lerr);
    }
    if (!o->quiet) fprintf(stderr, "blockspec: measuring the target's cost model (1..%d rows; `blockspec profile` does it ahead)...\n", o->max_rows);
    int *rows; double *pts; int m;
    if (cli_cost_measure(o, &rows, &pts, &m, err, len)) { free(path); return -1; }
    int rc = 0;
    if (path && cli_cost_save(path, o, rows, pts, m, lerr, sizeof lerr) && !o->quiet) fprintf(stderr, "blockspec: warning: not cached: %s\n", lerr);
    free(path);
    double *dense = malloc(sizeof(double) * rows[m - 1]);
    if (!dense) { snprintf(err, len, "out of memory"); rc = -1; }
    else { densify(rows, pts, m, dense); *sps = dense; *n = rows[m - 1]; }
    free(rows); free(pts);
    return rc;
}

int cli_measure_handle(void *ctx, const int *rows, int n, int ctx_rows, int block, int reps, double *sps, char *err, size_t len) {
    return blockspec_profile(ctx, rows, (size_t)n, ctx_rows, block, reps, sps, err, len);
}

void cli_cost_keys(blockspec *bs, cli_cost_opts *o, char *dev, size_t dev_len, char *shape, size_t shape_len) {
    cli_cost_device_key(blockspec_device_name(bs), dev, dev_len);
    if (blockspec_model_shape(bs, shape, shape_len)) snprintf(shape, shape_len, "unknown");
    o->device = dev; o->shape = shape;
    o->measure = cli_measure_handle; o->measure_ctx = bs;
}

int cli_measure_engine(void *ctx, const int *rows, int n, int ctx_rows, int block, int reps, double *sps, char *err, size_t len) {
    bs_err e = {0};
    if (bs_profile_forwards(ctx, rows, n, ctx_rows, block, reps, sps, &e)) { snprintf(err, len, "%s", e.msg); return -1; }
    return 0;
}

int cli_set_schedule(blockspec *bs, blockspec_schedule sched, const char *cost_model, int max_concurrency, int draft_max, char *err, size_t len) {
    double *sps = NULL;
    int n_sps = 0;
    if (sched == BLOCKSPEC_SCHEDULE_ALG1 || sched == BLOCKSPEC_SCHEDULE_ASYNC) {
        char dev[512], shape[256];
        int block = 1 + (draft_max ? draft_max : 16);
        cli_cost_opts co = { .file = cost_model, .max_rows = max_concurrency * block, .ctx = 256, .block = block, .reps = 3 };
        cli_cost_keys(bs, &co, dev, sizeof dev, shape, sizeof shape);
        if (cli_cost_model(&co, &sps, &n_sps, err, len)) return -1;
    }
    int rc = blockspec_set_schedule(bs, sched, sps, (size_t)n_sps, err, len);
    free(sps);
    return rc;
}
