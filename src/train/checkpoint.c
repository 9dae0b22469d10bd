// Training checkpoints (checkpoint.h). Tensors: "w.NAME" (trainable weights), "m.NAME", "v.NAME" (AdamW
// moments), all F32. __metadata__["blockspec_train_state"] is a JSON string:
//   {"format": 1, "kind": "...", "step": N, "data": [epoch, doc, offset], "rng": ["hex64" x 4],
//    "params": [[name, [shape], trainable, decay], ...], "settings": {...}}
// Frozen tensors (a drafter's embedding and head: the target's) are listed, not stored.
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "io/file.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"

#define META_KEY "blockspec_train_state"

static char *state_json(const bs_train_task *task, const bs_train_state *st) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "format", 1);
    cJSON_AddStringToObject(o, "kind", task->kind ? task->kind : "");
    cJSON_AddNumberToObject(o, "step", (double)st->step);
    cJSON *d = cJSON_AddArrayToObject(o, "data");
    cJSON_AddItemToArray(d, cJSON_CreateNumber((double)st->data.epoch));
    cJSON_AddItemToArray(d, cJSON_CreateNumber((double)st->data.doc));
    cJSON_AddItemToArray(d, cJSON_CreateNumber((double)st->data.off));
    cJSON *r = cJSON_AddArrayToObject(o, "rng");
    for (int i = 0; i < 4; i++) {   // 64-bit words as hex: a JSON number (a double) would round them
        char hex[17]; snprintf(hex, sizeof hex, "%016" PRIx64, st->rng.s[i]);
        cJSON_AddItemToArray(r, cJSON_CreateString(hex));
    }
    cJSON *ps = cJSON_AddArrayToObject(o, "params");
    for (int i = 0; i < task->params.n; i++) {
        const bs_param *p = &task->params.p[i];
        cJSON *e = cJSON_CreateArray(), *sh = cJSON_CreateArray();
        cJSON_AddItemToArray(e, cJSON_CreateString(p->name));
        for (int k = 0; k < p->n_dims; k++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)p->shape[k]));
        cJSON_AddItemToArray(e, sh);
        cJSON_AddItemToArray(e, cJSON_CreateNumber(p->trainable));
        cJSON_AddItemToArray(e, cJSON_CreateNumber(p->decay));
        cJSON_AddItemToArray(ps, e);
    }
    cJSON *settings = st->settings_json ? cJSON_Parse(st->settings_json) : cJSON_CreateObject();
    cJSON_AddItemToObject(o, "settings", settings ? settings : cJSON_CreateObject());
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) return -1;
        p += w; n -= (size_t)w;
    }
    return 0;
}

int bs_train_ckpt_save(const char *dir, const bs_train_task *task, const bs_adamw *opt, const bs_train_state *st, bs_err *err) {
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%s", dir, BS_TRAIN_STATE_FILE);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    char *meta = state_json(task, st);
    if (!meta) return bs_fail(err, "out of memory");
    // The header: __metadata__ first, then each tensor with its offsets in the order written below.
    cJSON *root = cJSON_CreateObject(), *md = cJSON_AddObjectToObject(root, "__metadata__");
    cJSON_AddStringToObject(md, "format", "pt");
    cJSON_AddStringToObject(md, META_KEY, meta);
    free(meta);
    const bs_param_set *ps = &task->params;
    size_t off = 0;
    static const char *prefix[3] = { "w.", "m.", "v." };
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < ps->n; i++) {
            const bs_param *p = &ps->p[i];
            if (!p->trainable) continue;
            char name[BS_PARAM_NAME_MAX + 4];
            snprintf(name, sizeof name, "%s%s", prefix[k], p->name);
            cJSON *t = cJSON_AddObjectToObject(root, name), *sh = cJSON_AddArrayToObject(t, "shape"), *of;
            cJSON_AddStringToObject(t, "dtype", "F32");
            for (int d = 0; d < p->n_dims; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)p->shape[d]));
            of = cJSON_AddArrayToObject(t, "data_offsets");
            cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
            off += sizeof(float) * (size_t)p->n;
            cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        }
    char *hdr = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!hdr) return bs_fail(err, "out of memory");
    size_t hlen = strlen(hdr), padded = (hlen + 7) / 8 * 8;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { free(hdr); return bs_fail(err, "%s: cannot create (%m)", tmp); }
    uint64_t h64 = padded;
    int ok = write_all(fd, &h64, 8) == 0 && write_all(fd, hdr, hlen) == 0 && write_all(fd, "        ", padded - hlen) == 0;
    free(hdr);
    for (int k = 0; k < 3 && ok; k++)
        for (int i = 0; i < ps->n && ok; i++) {
            const bs_param *p = &ps->p[i];
            if (!p->trainable) continue;
            const float *data = k == 0 ? p->w : k == 1 ? opt->m[i] : opt->v[i];
            ok = write_all(fd, data, sizeof(float) * (size_t)p->n) == 0;
        }
    // Durable before visible: the data reaches the disk, then the rename replaces the old checkpoint
    // atomically, then the directory entry itself is synced.
    ok = ok && fsync(fd) == 0;
    ok = (close(fd) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) { bs_fail(err, "%s: write failed (%m); the previous checkpoint, if any, is unchanged", path); unlink(tmp); return -1; }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) { fsync(dfd); close(dfd); }
    return 0;
}

// The training-state JSON object from a safetensors file's __metadata__, or NULL with err set. Both the
// header and the state string inside it are untrusted text: parsed strictly (bs_json_parse: no repeated
// keys, no trailing data, no NUL), and the header length is bounded by the file's size.
static cJSON *read_meta(const char *path, bs_err *err) {
    size_t size = 0;
    int fd = bs_open_regular(path, &size, err);
    if (fd < 0) {
        char m[sizeof err->msg];
        snprintf(m, sizeof m, "%s", err->msg);
        bs_fail(err, "%s; is this a training output folder?", m);
        return NULL;
    }
    uint64_t hlen = 0;
    char *hdr = NULL, name[4200];
    cJSON *root = NULL, *out = NULL;
    if (size < 8 || read(fd, &hlen, 8) != 8) { bs_fail(err, "%s: %zu bytes, too short for a safetensors header", path, size); goto done; }
    if (hlen > size - 8) { bs_fail(err, "%s: header length %llu runs past the end of the %zu-byte file", path, (unsigned long long)hlen, size); goto done; }
    if (!(hdr = malloc(hlen + 1)) || read(fd, hdr, hlen) != (ssize_t)hlen) { bs_fail(err, "%s: cannot read the %llu-byte header", path, (unsigned long long)hlen); goto done; }
    if (!(root = bs_json_parse(hdr, hlen, path, err))) goto done;
    cJSON *md = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    cJSON *s = cJSON_IsObject(md) ? cJSON_GetObjectItemCaseSensitive(md, META_KEY) : NULL;
    if (!cJSON_IsString(s)) { bs_fail(err, "%s: no training state in its metadata (not written by blockspec train)", path); goto done; }
    snprintf(name, sizeof name, "%s: __metadata__.%s", path, META_KEY);
    if (!(out = bs_json_parse(s->valuestring, strlen(s->valuestring), name, err))) goto done;
    if (!cJSON_IsObject(out)) { bs_fail(err, "%s is not a JSON object", name); cJSON_Delete(out); out = NULL; }
done:
    cJSON_Delete(root); free(hdr); close(fd);
    return out;
}

// Largest integer a JSON number (a double) holds exactly: the bound for steps, positions and sizes.
#define EXACT_INT 9007199254740992.0

static int shape_str(char *buf, size_t cap, int n, const int64_t *sh) {
    int k = snprintf(buf, cap, "[");
    for (int i = 0; i < n; i++) k += snprintf(buf + k, cap - k, i ? ", %lld" : "%lld", (long long)sh[i]);
    return snprintf(buf + k, cap - k, "]");
}

// One entry of the state's "params" list: [name, [shape...], trainable 0/1, decay 0/1], every number an
// integer checked before it is cast (the checkpoint is a file like any other).
static int param_entry(const char *path, int idx, const cJSON *e, int64_t *shape, int *nd, int *trainable, bs_err *err) {
    const cJSON *sh = cJSON_GetArrayItem(e, 1), *tr = cJSON_GetArrayItem(e, 2), *dc = cJSON_GetArrayItem(e, 3);
    if (cJSON_GetArraySize(e) != 4 || !cJSON_IsArray(sh) || !bs_json_is_int(tr, 0, 1) || !bs_json_is_int(dc, 0, 1))
        return bs_fail(err, "%s: training state params[%d] is not [name, [shape], trainable 0/1, decay 0/1]", path, idx);
    *nd = cJSON_GetArraySize(sh);
    if (*nd > BS_PARAM_MAX_DIMS) return bs_fail(err, "%s: training state params[%d] has %d dimensions (at most %d)", path, idx, *nd, BS_PARAM_MAX_DIMS);
    for (int k = 0; k < *nd; k++) {
        const cJSON *d = cJSON_GetArrayItem(sh, k);
        if (!bs_json_is_int(d, 0, EXACT_INT)) return bs_fail(err, "%s: training state params[%d] shape[%d] is not a size", path, idx, k);
        shape[k] = (int64_t)d->valuedouble;
    }
    *trainable = (int)tr->valuedouble;
    return 0;
}

static int check_params(const char *path, const cJSON *list, const bs_param_set *ps, bs_err *err) {
    int n = cJSON_GetArraySize(list);
    for (int i = 0; i < ps->n; i++) {   // every model tensor in the checkpoint with the same shape and role
        const bs_param *p = &ps->p[i];
        const cJSON *e = NULL, *it;
        int idx = 0, found = -1;
        cJSON_ArrayForEach(it, list) {
            const cJSON *nm = cJSON_GetArrayItem(it, 0);
            if (cJSON_IsString(nm) && !strcmp(nm->valuestring, p->name)) { e = it; found = idx; break; }
            idx++;
        }
        if (!e) return bs_fail(err, "%s: the model's tensor %s is not in the checkpoint (another model or architecture?)", path, p->name);
        int64_t cs[BS_PARAM_MAX_DIMS] = { 0 };
        int nd = 0, tr = 0;
        if (param_entry(path, found, e, cs, &nd, &tr, err)) return -1;
        int same = nd == p->n_dims;
        for (int k = 0; k < nd; k++) same &= cs[k] == p->shape[k];
        if (!same) {
            char a[128], b[128];
            shape_str(a, sizeof a, nd, cs); shape_str(b, sizeof b, p->n_dims, p->shape);
            return bs_fail(err, "%s: tensor %s has shape %s in the checkpoint, %s in the model", path, p->name, a, b);
        }
        if (tr != p->trainable) return bs_fail(err, "%s: tensor %s is %s in the checkpoint, %s in the model", path, p->name, tr ? "trainable" : "frozen", p->trainable ? "trainable" : "frozen");
    }
    if (n != ps->n) {   // the checkpoint has tensors the model lacks: name one
        const cJSON *it;
        cJSON_ArrayForEach(it, list) {
            const cJSON *nm = cJSON_GetArrayItem(it, 0);
            if (cJSON_IsString(nm) && !bs_param_find(ps, nm->valuestring))
                return bs_fail(err, "%s: the checkpoint's tensor %s is not in the model", path, nm->valuestring);
        }
        return bs_fail(err, "%s: %d tensors in the checkpoint, %d in the model", path, n, ps->n);
    }
    return 0;
}

// A 64-bit generator word written as 1-16 hex digits (strtoull alone would also take a sign, spaces or 0x).
static int hex64(const cJSON *h, uint64_t *out) {
    if (!cJSON_IsString(h)) return -1;
    size_t n = strlen(h->valuestring);
    if (n < 1 || n > 16 || strspn(h->valuestring, "0123456789abcdefABCDEF") != n) return -1;
    *out = strtoull(h->valuestring, NULL, 16);
    return 0;
}

int bs_train_ckpt_load(const char *dir, bs_train_task *task, bs_adamw *opt, bs_train_state *st, bs_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, BS_TRAIN_STATE_FILE);
    memset(st, 0, sizeof *st);
    cJSON *meta = read_meta(path, err);
    if (!meta) return -1;
    int rc = -1;
    bs_checkpoint *ck = NULL;
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(meta, "kind"), *step = cJSON_GetObjectItemCaseSensitive(meta, "step"),
                *data = cJSON_GetObjectItemCaseSensitive(meta, "data"), *rng = cJSON_GetObjectItemCaseSensitive(meta, "rng"),
                *params = cJSON_GetObjectItemCaseSensitive(meta, "params"), *settings = cJSON_GetObjectItemCaseSensitive(meta, "settings"),
                *format = cJSON_GetObjectItemCaseSensitive(meta, "format");
    if (!cJSON_IsNumber(format) || format->valuedouble != 1) { bs_fail(err, "%s: training state format %g, this build reads 1", path, cJSON_IsNumber(format) ? format->valuedouble : -1); goto done; }
    if (!cJSON_IsString(kind) || !cJSON_IsNumber(step) || !cJSON_IsArray(data) || cJSON_GetArraySize(data) != 3 ||
        !cJSON_IsArray(rng) || cJSON_GetArraySize(rng) != 4 || !cJSON_IsArray(params)) {
        bs_fail(err, "%s: training state metadata lacks kind, step, data, rng or params", path); goto done;
    }
    // Range and integrality before any cast: the values become the optimiser's step count and the loader's
    // position (which bs_loader_seek then fits to the corpus).
    if (!bs_json_is_int(step, 0, EXACT_INT)) { bs_fail(err, "%s: training state step is not a non-negative integer", path); goto done; }
    for (int i = 0; i < 3; i++)
        if (!bs_json_is_int(cJSON_GetArrayItem(data, i), 0, EXACT_INT)) {
            bs_fail(err, "%s: training state data[%d] (epoch, document, offset) is not a non-negative integer", path, i); goto done;
        }
    if (strcmp(kind->valuestring, task->kind ? task->kind : "")) {
        bs_fail(err, "%s: a checkpoint of a %s run; this run trains a %s", path, kind->valuestring, task->kind ? task->kind : "(no kind)"); goto done;
    }
    if (check_params(path, params, &task->params, err)) goto done;
    st->step = (int64_t)step->valuedouble;
    st->data = (bs_loader_pos){ (int64_t)cJSON_GetArrayItem(data, 0)->valuedouble, (int64_t)cJSON_GetArrayItem(data, 1)->valuedouble,
                                (int64_t)cJSON_GetArrayItem(data, 2)->valuedouble };
    for (int i = 0; i < 4; i++)
        if (hex64(cJSON_GetArrayItem(rng, i), &st->rng.s[i])) { bs_fail(err, "%s: rng word %d is not 1-16 hex digits", path, i); goto done; }
    // xoshiro256's all-zero state is a fixed point: every draw after it would be 0.
    if (!(st->rng.s[0] | st->rng.s[1] | st->rng.s[2] | st->rng.s[3])) { bs_fail(err, "%s: rng state is all zero (not a generator state)", path); goto done; }
    if (bs_checkpoint_open(&ck, path, err)) goto done;
    static const char *prefix[3] = { "w.", "m.", "v." };
    for (int i = 0; i < task->params.n; i++) {
        bs_param *p = &task->params.p[i];
        if (!p->trainable) continue;
        for (int k = 0; k < 3; k++) {
            char name[BS_PARAM_NAME_MAX + 4];
            snprintf(name, sizeof name, "%s%s", prefix[k], p->name);
            const bs_tensor_info *t = bs_checkpoint_find(ck, name);
            if (!t || strcmp(t->dtype_name, "F32") || t->nbytes != sizeof(float) * (size_t)p->n) {
                bs_fail(err, "%s: tensor %s missing, not F32 or not %lld elements", path, name, (long long)p->n); goto done;
            }
            memcpy(k == 0 ? p->w : k == 1 ? opt->m[i] : opt->v[i], t->data, t->nbytes);
        }
    }
    opt->t = st->step;
    st->settings_json = cJSON_IsObject(settings) ? cJSON_PrintUnformatted(settings) : strdup("{}");
    rc = 0;
done:
    if (ck) bs_checkpoint_close(ck);
    cJSON_Delete(meta);
    return rc;
}
