// Safetensors reader: 8-byte little-endian header length, a JSON header mapping names to
// {dtype, shape, data_offsets}, then the data. Everything in the header is validated before use:
// sizes against the file, offsets against each other, shapes against dtypes.
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "io/safetensors.h"
#include "io/file.h"
#include "io/json.h"

static const struct { const char *name; int size; int ok; bs_dtype dt; } DTYPES[] = {
    {"F32", 4, 1, BS_F32}, {"BF16", 2, 1, BS_BF16}, {"F16", 2, 1, BS_F16},
    {"F64", 8, 0, 0}, {"I64", 8, 0, 0}, {"U64", 8, 0, 0}, {"I32", 4, 0, 0}, {"U32", 4, 0, 0},
    {"I16", 2, 0, 0}, {"U16", 2, 0, 0}, {"I8", 1, 0, 0}, {"U8", 1, 0, 0}, {"BOOL", 1, 0, 0},
    {"F8_E4M3", 1, 0, 0}, {"F8_E5M2", 1, 0, 0}, {"F8_E8M0", 1, 0, 0},
};

static int cmp_tensor(const void *a, const void *b) {
    return strcmp(((const bs_tensor_info *)a)->name, ((const bs_tensor_info *)b)->name);
}
static int cmp_by_offset(const void *a, const void *b) {
    const bs_tensor_info *x = *(bs_tensor_info *const *)a, *y = *(bs_tensor_info *const *)b;
    return x->data < y->data ? -1 : x->data > y->data;
}

static int map_file(const char *path, void **map, size_t *size, bs_err *err) {
    int fd = bs_open_regular(path, size, err);
    if (fd < 0) return -1;
    if (*size < 8) { close(fd); return bs_fail(err, "%s: file is %zu bytes, too short for a safetensors header", path, *size); }
    *map = mmap(NULL, *size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (*map == MAP_FAILED) { *map = NULL; return bs_fail(err, "%s: mmap failed (%m)", path); }
    return 0;
}

// Parses one file's header and appends its tensors to the list.
static int parse_file(const char *path, const void *map, size_t size, bs_tensor_info **list, int *n, int *cap, bs_err *err) {
    uint64_t hlen = 0;
    memcpy(&hlen, map, 8);  // little-endian on every platform blockspec runs on
    if (hlen > size - 8) return bs_fail(err, "%s: header length %llu runs past the end of the file (%zu bytes)", path, (unsigned long long)hlen, size);
    const char *hdr = (const char *)map + 8;
    const unsigned char *data = (const unsigned char *)map + 8 + hlen;
    size_t data_len = size - 8 - hlen;
    char name[4200];
    snprintf(name, sizeof name, "%s (header)", path);
    cJSON *root = bs_json_parse(hdr, hlen, name, err);
    if (!root) return -1;
    if (!cJSON_IsObject(root)) { cJSON_Delete(root); return bs_fail(err, "%s: header is not a JSON object", path); }
    int first = *n, rc = -1;
    cJSON *it;
    cJSON_ArrayForEach(it, root) {
        if (!strcmp(it->string, "__metadata__")) continue;
        if (!cJSON_IsObject(it)) { bs_fail(err, "%s: tensor '%s' is not an object", path, it->string); goto out; }
        cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype"), *sh = cJSON_GetObjectItemCaseSensitive(it, "shape"),
              *off = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
        if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2) {
            bs_fail(err, "%s: tensor '%s' needs string dtype, array shape and two data_offsets", path, it->string); goto out;
        }
        int di = -1;
        for (size_t k = 0; k < sizeof DTYPES / sizeof *DTYPES; k++) if (!strcmp(dt->valuestring, DTYPES[k].name)) di = (int)k;
        if (di < 0) { bs_fail(err, "%s: tensor '%s' has unknown dtype '%s'", path, it->string, dt->valuestring); goto out; }
        int nd = cJSON_GetArraySize(sh);
        if (nd > BS_MAX_DIMS) { bs_fail(err, "%s: tensor '%s' has %d dimensions (at most %d)", path, it->string, nd, BS_MAX_DIMS); goto out; }
        if (*n == *cap) {
            *cap = *cap ? *cap * 2 : 256;
            bs_tensor_info *nl = realloc(*list, sizeof **list * *cap);
            if (!nl) { bs_fail(err, "out of memory"); goto out; }
            *list = nl;
        }
        bs_tensor_info *t = &(*list)[*n];
        memset(t, 0, sizeof *t);
        t->name = strdup(it->string);
        (*n)++;
        snprintf(t->dtype_name, sizeof t->dtype_name, "%s", DTYPES[di].name);
        t->dtype_ok = DTYPES[di].ok; t->dtype = DTYPES[di].dt; t->n_dims = nd; t->file = path;
        unsigned __int128 numel = 1;
        for (int d = 0; d < nd; d++) {
            cJSON *v = cJSON_GetArrayItem(sh, d);
            if (!bs_json_is_int(v, 0, 9.0e15)) {
                bs_fail(err, "%s: tensor '%s' has an invalid shape entry", path, t->name); goto out;
            }
            t->shape[d] = (int64_t)v->valuedouble;
            numel *= (uint64_t)t->shape[d];
            if (numel > ((unsigned __int128)1 << 62)) { bs_fail(err, "%s: tensor '%s' shape is absurdly large", path, t->name); goto out; }
        }
        cJSON *b = cJSON_GetArrayItem(off, 0), *e = cJSON_GetArrayItem(off, 1);
        if (!bs_json_is_int(b, 0, (double)data_len) || !bs_json_is_int(e, 0, (double)data_len) || e->valuedouble < b->valuedouble) {
            bs_fail(err, "%s: tensor '%s' data_offsets [%.17g, %.17g] are outside the data section (%zu bytes) or not integers", path, t->name,
                    cJSON_IsNumber(b) ? b->valuedouble : -1, cJSON_IsNumber(e) ? e->valuedouble : -1, data_len);
            goto out;
        }
        size_t begin = (size_t)b->valuedouble, end = (size_t)e->valuedouble;
        if ((unsigned __int128)(end - begin) != numel * (unsigned)DTYPES[di].size) {
            bs_fail(err, "%s: tensor '%s' occupies %zu bytes but its shape and dtype %s need %llu", path, t->name, end - begin,
                    t->dtype_name, (unsigned long long)(numel * DTYPES[di].size));
            goto out;
        }
        t->data = data + begin; t->nbytes = end - begin;
    }
    // Tensors of one file must not overlap.
    int cnt = *n - first;
    bs_tensor_info **byoff = malloc(sizeof *byoff * (cnt ? cnt : 1));
    if (!byoff) { bs_fail(err, "out of memory"); goto out; }
    for (int i = 0; i < cnt; i++) byoff[i] = &(*list)[first + i];
    qsort(byoff, cnt, sizeof *byoff, cmp_by_offset);
    for (int i = 1; i < cnt; i++)
        if ((const char *)byoff[i - 1]->data + byoff[i - 1]->nbytes > (const char *)byoff[i]->data) {
            bs_fail(err, "%s: tensors '%s' and '%s' overlap in the data section", path, byoff[i - 1]->name, byoff[i]->name);
            free(byoff); goto out;
        }
    free(byoff);
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

static int file_exists(const char *p) { struct stat st; return stat(p, &st) == 0 && S_ISREG(st.st_mode); }

static int add_file(bs_checkpoint *ck, const char *path, bs_tensor_info **list, int *n, int *cap, bs_err *err) {
    for (int i = 0; i < ck->n_files; i++) if (!strcmp(ck->files[i].path, path)) return 0;
    void *nf = realloc(ck->files, sizeof *ck->files * (ck->n_files + 1));
    if (!nf) return bs_fail(err, "out of memory");
    ck->files = nf;
    int i = ck->n_files;
    ck->files[i].path = strdup(path); ck->files[i].map = NULL; ck->files[i].size = 0;
    ck->n_files++;
    if (map_file(path, &ck->files[i].map, &ck->files[i].size, err)) return -1;
    return parse_file(ck->files[i].path, ck->files[i].map, ck->files[i].size, list, n, cap, err);
}

int bs_checkpoint_open(bs_checkpoint **out, const char *path, bs_err *err) {
    *out = NULL;
    bs_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck) return bs_fail(err, "out of memory");
    ck->path = strdup(path);
    bs_tensor_info *list = NULL; int n = 0, cap = 0, rc = -1;
    struct stat st;
    char buf[4096];
    cJSON *idx = NULL;
    if (stat(path, &st) != 0) { bs_fail(err, "%s: no such file or directory", path); goto done; }
    if (S_ISDIR(st.st_mode)) {
        snprintf(buf, sizeof buf, "%s/model.safetensors.index.json", path);
        if (file_exists(buf)) {
            size_t len; char *txt = bs_read_file(buf, &len, err);
            if (!txt) goto done;
            idx = bs_json_parse(txt, len, buf, err);
            free(txt);
            if (!idx) goto done;
            cJSON *wm = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
            if (!cJSON_IsObject(wm)) { bs_fail(err, "%s: expected a JSON object with a \"weight_map\" object", buf); goto done; }
            cJSON *it;
            cJSON_ArrayForEach(it, wm) {
                if (!cJSON_IsString(it) || strchr(it->valuestring, '/')) { bs_fail(err, "%s: weight_map entry '%s' must name a shard file in the same folder", buf, it->string); goto done; }
                char shard[4096];
                snprintf(shard, sizeof shard, "%s/%s", path, it->valuestring);
                if (add_file(ck, shard, &list, &n, &cap, err)) goto done;
            }
        } else {
            snprintf(buf, sizeof buf, "%s/model.safetensors", path);
            if (!file_exists(buf)) {
                // A folder with exactly one *.safetensors file is accepted too.
                DIR *d = opendir(path); struct dirent *de; int found = 0;
                while (d && (de = readdir(d))) {
                    size_t l = strlen(de->d_name);
                    if (l > 12 && !strcmp(de->d_name + l - 12, ".safetensors")) { found++; snprintf(buf, sizeof buf, "%s/%s", path, de->d_name); }
                }
                if (d) closedir(d);
                if (found != 1) { bs_fail(err, "%s: no model.safetensors or model.safetensors.index.json in this folder", path); goto done; }
            }
            if (add_file(ck, buf, &list, &n, &cap, err)) goto done;
        }
    } else if (add_file(ck, path, &list, &n, &cap, err)) goto done;
    if (n > 1) qsort(list, n, sizeof *list, cmp_tensor);   // (list is NULL when a file holds no tensors)
    for (int i = 1; i < n; i++)
        if (!strcmp(list[i - 1].name, list[i].name)) { bs_fail(err, "%s: tensor '%s' appears twice (in %s and %s)", path, list[i].name, list[i - 1].file, list[i].file); goto done; }
    // Every tensor the index names must be in the shard it names.
    if (idx) {
        cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(idx, "weight_map")) {
            bs_tensor_info key = { .name = it->string };
            bs_tensor_info *t = n ? bsearch(&key, list, n, sizeof *list, cmp_tensor) : NULL;
            const char *base = t ? strrchr(t->file, '/') : NULL;
            if (!t || strcmp(base ? base + 1 : t->file, it->valuestring)) { bs_fail(err, "%s: index says tensor '%s' is in %s, but it is not there", path, it->string, it->valuestring); goto done; }
        }
    }
    ck->tensors = list; ck->n_tensors = n; list = NULL;
    *out = ck; rc = 0;
done:
    cJSON_Delete(idx);
    if (list) { for (int i = 0; i < n; i++) free(list[i].name); free(list); }
    if (rc) bs_checkpoint_close(ck);
    return rc;
}

int bs_checkpoint_open_memory(bs_checkpoint **out, const void *buf, size_t len, const char *name, bs_err *err) {
    *out = NULL;
    bs_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck || !(ck->files = calloc(1, sizeof *ck->files))) { free(ck); return bs_fail(err, "out of memory"); }
    ck->path = strdup(name);
    ck->files[0].path = strdup(name);   // map stays NULL: the caller owns the buffer
    ck->n_files = 1;
    bs_tensor_info *list = NULL; int n = 0, cap = 0;
    if (len < 8) { bs_fail(err, "%s: %zu bytes, too short for a safetensors header", name, len); goto fail; }
    if (parse_file(ck->files[0].path, buf, len, &list, &n, &cap, err)) goto fail;
    if (n > 1) qsort(list, n, sizeof *list, cmp_tensor);   // (list is NULL when the file holds no tensors)
    for (int i = 1; i < n; i++)
        if (!strcmp(list[i - 1].name, list[i].name)) { bs_fail(err, "%s: tensor '%s' appears twice", name, list[i].name); goto fail; }
    ck->tensors = list; ck->n_tensors = n;
    *out = ck;
    return 0;
fail:
    if (list) { for (int i = 0; i < n; i++) free(list[i].name); free(list); }
    bs_checkpoint_close(ck);
    return -1;
}

void bs_checkpoint_close(bs_checkpoint *ck) {
    if (!ck) return;
    for (int i = 0; i < ck->n_tensors; i++) free(ck->tensors[i].name);
    free(ck->tensors);
    for (int i = 0; i < ck->n_files; i++) { if (ck->files[i].map) munmap(ck->files[i].map, ck->files[i].size); free(ck->files[i].path); }
    free(ck->files); free(ck->path); free(ck);
}

const bs_tensor_info *bs_checkpoint_find(const bs_checkpoint *ck, const char *name) {
    bs_tensor_info key = { .name = (char *)name };
    if (ck->n_tensors == 0) return NULL;   // (tensors is NULL then: not a valid bsearch base)
    return bsearch(&key, ck->tensors, ck->n_tensors, sizeof *ck->tensors, cmp_tensor);
}

int bs_checkpoint_mat(const bs_checkpoint *ck, const char *name, int64_t rows, int64_t cols, bs_mat *out, bs_err *err) {
    const bs_tensor_info *t = bs_checkpoint_find(ck, name);
    if (!t) return bs_fail(err, "%s: missing tensor '%s'", ck->path, name);
    char want[64], have[128] = "";
    if (rows) snprintf(want, sizeof want, "[%lld, %lld]", (long long)rows, (long long)cols);
    else snprintf(want, sizeof want, "[%lld]", (long long)cols);
    for (int d = 0; d < t->n_dims; d++) {
        size_t l = strlen(have);
        snprintf(have + l, sizeof have - l, "%s%lld", d ? ", " : "[", (long long)t->shape[d]);
    }
    strcat(have, "]");
    int ok = rows ? (t->n_dims == 2 && t->shape[0] == rows && t->shape[1] == cols) : (t->n_dims == 1 && t->shape[0] == cols);
    if (!ok) return bs_fail(err, "%s: tensor '%s' has shape %s, expected %s from config.json", t->file, name, t->n_dims ? have : "[]", want);
    if (!t->dtype_ok) {
        // A quantised tensor where only a float one is read (a norm weight, a drafter head): say so.
        char sc[300];
        size_t l = strlen(name);
        snprintf(sc, sizeof sc, "%.*s.scales", (int)(l > 7 && !strcmp(name + l - 7, ".weight") ? l - 7 : l), name);
        if (bs_checkpoint_find(ck, sc))
            return bs_fail(err, "%s: tensor '%s' is affine-quantised (%s beside it), but blockspec reads this tensor only as BF16, F16 or F32", t->file, name, sc);
        return bs_fail(err, "%s: tensor '%s' has dtype %s; blockspec reads BF16, F16 or F32 weights", t->file, name, t->dtype_name);
    }
    *out = (bs_mat){ .data = t->data, .dtype = t->dtype, .rows = rows ? rows : 1, .cols = cols, .layout = 0 };
    return 0;
}

// ---- writer ----

struct bs_st_writer {
    int n, cap;
    struct { char *name; char dtype[8]; int n_dims; int64_t shape[BS_MAX_DIMS]; const void *data; size_t nbytes; } *t;
};

bs_st_writer *bs_st_writer_new(void) { return calloc(1, sizeof(bs_st_writer)); }

int bs_st_writer_add(bs_st_writer *w, const char *name, const char *dtype, int n_dims, const int64_t *shape, const void *data, bs_err *err) {
    int size = 0;
    for (size_t k = 0; k < sizeof DTYPES / sizeof *DTYPES; k++) if (!strcmp(dtype, DTYPES[k].name)) size = DTYPES[k].size;
    if (!size || n_dims > BS_MAX_DIMS) return bs_fail(err, "writing '%s': unsupported dtype %s or rank %d", name, dtype, n_dims);
    if (w->n == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 64;
        void *nt = realloc(w->t, sizeof *w->t * w->cap);
        if (!nt) return bs_fail(err, "out of memory");
        w->t = nt;
    }
    size_t numel = 1;
    for (int d = 0; d < n_dims; d++) numel *= (size_t)shape[d];
    w->t[w->n].name = strdup(name);
    snprintf(w->t[w->n].dtype, sizeof w->t[w->n].dtype, "%s", dtype);
    w->t[w->n].n_dims = n_dims;
    memcpy(w->t[w->n].shape, shape, sizeof(int64_t) * n_dims);
    w->t[w->n].data = data; w->t[w->n].nbytes = numel * size;
    w->n++;
    return 0;
}

int bs_st_writer_write(bs_st_writer *w, const char *path, bs_err *err) {
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    size_t off = 0;
    for (int i = 0; i < w->n; i++) {
        cJSON *o = cJSON_AddObjectToObject(root, w->t[i].name);
        cJSON_AddStringToObject(o, "dtype", w->t[i].dtype);
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        for (int d = 0; d < w->t[i].n_dims; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)w->t[i].shape[d]));
        cJSON *of = cJSON_AddArrayToObject(o, "data_offsets");
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        off += w->t[i].nbytes;
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
    }
    char *hdr = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!hdr) return bs_fail(err, "out of memory");
    size_t hlen = strlen(hdr), padded = (hlen + 7) / 8 * 8;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) { free(hdr); return bs_fail(err, "%s: cannot create (%m)", path); }
    uint64_t h64 = padded;
    int ok = fwrite(&h64, 8, 1, f) == 1 && fwrite(hdr, 1, hlen, f) == hlen;
    for (size_t i = hlen; i < padded && ok; i++) ok = fputc(' ', f) != EOF;
    for (int i = 0; i < w->n && ok; i++) ok = fwrite(w->t[i].data, 1, w->t[i].nbytes, f) == w->t[i].nbytes;
    free(hdr);
    if (fclose(f) != 0) ok = 0;
    // Write to a temporary name and rename, so an interrupted write never leaves a truncated checkpoint.
    if (!ok || rename(tmp, path) != 0) { unlink(tmp); return bs_fail(err, "%s: write failed (%m)", path); }
    return 0;
}

void bs_st_writer_free(bs_st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) free(w->t[i].name);
    free(w->t); free(w);
}
