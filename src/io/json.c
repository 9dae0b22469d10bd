#include <errno.h>
#include <math.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "io/json.h"
#include "io/tok_map.h"
#include "io/file.h"

int bs_json_write_file(const cJSON *root, const char *path, bs_err *err) {
    char tmp[4200];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) return bs_fail(err, "%s: path too long", path);
    char *txt = cJSON_Print(root);
    if (!txt) return bs_fail(err, "out of memory");
    FILE *f = fopen(tmp, "w");
    int ok = f && fputs(txt, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f) != 0) ok = 0;
    free(txt);
    if (!ok || rename(tmp, path) != 0) { unlink(tmp); return bs_fail(err, "%s: write failed (%m)", path); }
    return 0;
}

char *bs_read_file(const char *path, size_t *len, bs_err *err) {
    size_t size;
    int fd = bs_open_regular(path, &size, err);
    if (fd < 0) return NULL;
    // The buffer is sized by the file itself (plus the NUL), never by anything written inside it.
    char *buf = malloc(size + 1);
    if (!buf) { close(fd); bs_fail(err, "%s: out of memory reading %zu bytes", path, size); return NULL; }
    size_t n = 0;
    while (n < size) {
        ssize_t r = read(fd, buf + n, size - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { free(buf); close(fd); bs_fail(err, "%s: read error (%m)", path); return NULL; }
        if (r == 0) break;   // the file shrank while we read it: take what is there
        n += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

// The three scans below look at every byte of a file (an 11 MB tokenizer.json, say). Each skips, 8 bytes
// at a time, the blocks that hold none of the bytes that could change its state (a word test per block
// instead of a few comparisons per byte); the byte loop goes on exactly as before from where the skip
// stops, and tries skipping again only 8 bytes later (dense text, such as a vocabulary of short quoted
// strings, would otherwise pay for a failed block test at every byte).
#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull
static inline uint64_t has_zero(uint64_t v) { return (v - ONES) & ~v & HIGHS; }
static inline uint64_t has_byte(uint64_t v, unsigned char c) { return has_zero(v ^ (ONES * c)); }
static inline uint64_t has_below(uint64_t v, unsigned char c) { return (v - ONES * c) & ~v & HIGHS; }   // some byte < c (c <= 128)
static inline uint64_t has_digit(uint64_t v) { return has_below(v ^ (ONES * 0x30), 10); }   // some byte in '0'..'9'
static inline uint64_t load8(const char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
#define SKIP_BLOCKS(hit) while (i + 8 <= n) { uint64_t v = load8(t + i); if (hit) break; i += 8; }
#define SKIP_TRY(skip) if (i >= next) { skip; if (i >= n) break; next = i + 8; }

// A NUL inside a JSON string (raw, or escaped as \u0000) would cut the C string cJSON hands out:
// "embed\u0000junk" would then match a tensor or token named "embed". Returns the offending byte offset or -1.
static long find_nul(const char *t, size_t n) {
    for (size_t i = 0, next = 0; i < n; i++) {
        SKIP_TRY(SKIP_BLOCKS(has_zero(v) | has_byte(v, '\\')));
        if (t[i] == 0) return (long)i;
        if (t[i] == '\\' && i + 1 < n) {
            if (t[i + 1] == 'u' && i + 5 < n && !memcmp(t + i + 2, "0000", 4)) return (long)i;
            i++;   // skip the escaped character (an escaped backslash must not start another escape)
        }
    }
    return -1;
}

// cJSON copies raw control characters (bytes below 0x20: tab, newline, ...) inside strings into the value;
// the JSON grammar, and Python's json module, require them escaped. Returns the offset of the first, or -1.
static long find_raw_control(const char *t, size_t n) {
    int in_str = 0;
    for (size_t i = 0, next = 0; i < n; i++) {
        SKIP_TRY(if (in_str) SKIP_BLOCKS(has_below(v, 0x20) | has_byte(v, '\\') | has_byte(v, '"')) else SKIP_BLOCKS(has_byte(v, '"')));
        unsigned char c = (unsigned char)t[i];
        if (!in_str) { if (c == '"') in_str = 1; continue; }
        if (c < 0x20) return (long)i;
        if (c == '\\') i++;
        else if (c == '"') in_str = 0;
    }
    return -1;
}

// cJSON hands any run of [0-9+-.eE] that starts with '-' or a digit to strtod, so it reads 02, -01, 1. and
// 1.e5, which Python's json module (and the JSON grammar) refuse. Returns the offset of the first number
// outside strings that is not -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, or -1.
static long find_bad_number(const char *t, size_t n) {
    int in_str = 0;
    for (size_t i = 0, next = 0; i < n; i++) {
        SKIP_TRY(if (in_str) SKIP_BLOCKS(has_byte(v, '\\') | has_byte(v, '"')) else SKIP_BLOCKS(has_byte(v, '"') | has_byte(v, '-') | has_digit(v)));
        char c = t[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
            continue;
        }
        if (c == '"') { in_str = 1; continue; }
        if (c != '-' && !(c >= '0' && c <= '9')) continue;
        size_t j = i, end = i;
        while (end < n && strchr("0123456789+-.eE", t[end]) && t[end]) end++;
#define DIGITS(k) ((k) < end && t[k] >= '0' && t[k] <= '9')
        if (t[j] == '-') j++;
        if (j < end && t[j] == '0') j++;
        else if (DIGITS(j)) while (DIGITS(j)) j++;
        else return (long)i;
        if (j < end && t[j] == '.') { j++; if (!DIGITS(j)) return (long)i; while (DIGITS(j)) j++; }
        if (j < end && (t[j] == 'e' || t[j] == 'E')) {
            j++;
            if (j < end && (t[j] == '+' || t[j] == '-')) j++;
            if (!DIGITS(j)) return (long)i;
            while (DIGITS(j)) j++;
        }
#undef DIGITS
        if (j != end) return (long)i;
        i = end - 1;
    }
    return -1;
}

// Python's json module keeps the last of repeated keys; cJSON keeps them all and lookups find the first.
// Removes every earlier duplicate, in every object, recursively (depth is bounded by cJSON's nesting limit).
static int drop_duplicate_keys(cJSON *v) {
    if (!cJSON_IsObject(v) && !cJSON_IsArray(v)) return 0;
    int n = 0;
    for (cJSON *c = v->child; c; c = c->next) { if (drop_duplicate_keys(c)) return -1; n++; }
    if (!cJSON_IsObject(v) || n < 2) return 0;
    if (n <= 16) {   // small objects (configs, safetensors entries): compare pairwise
        for (cJSON *c = v->child, *next; c; c = next) {
            next = c->next;
            for (cJSON *d = c->next; d; d = d->next)
                if (!strcmp(c->string, d->string)) { cJSON_Delete(cJSON_DetachItemViaPointer(v, c)); break; }
        }
        return 0;
    }
    bs_tok_map last = { 0 };   // key -> position of its last occurrence
    int pos = 0, rc = 0;
    for (cJSON *c = v->child; c && !rc; c = c->next, pos++) rc = bs_tok_map_put(&last, c->string, strlen(c->string), pos);
    pos = 0;
    for (cJSON *c = v->child, *next; c && !rc; c = next, pos++) {
        next = c->next;
        if (bs_tok_map_get(&last, c->string, strlen(c->string)) != pos) cJSON_Delete(cJSON_DetachItemViaPointer(v, c));
    }
    bs_tok_map_free(&last);
    return rc;
}

cJSON *bs_json_parse(const char *text, size_t len, const char *name, bs_err *err) {
    long nul = find_nul(text, len);
    if (nul >= 0) { bs_fail(err, "%s: NUL character (raw or \\u0000) at byte %ld: not allowed in names or values", name, nul); return NULL; }
    long ctl = find_raw_control(text, len);
    if (ctl >= 0) {
        bs_fail(err, "%s: raw control character 0x%02x inside a string at byte %ld (JSON needs it escaped, e.g. \\n or \\t)", name,
                (unsigned char)text[ctl], ctl);
        return NULL;
    }
    long bad = find_bad_number(text, len);
    if (bad >= 0) { bs_fail(err, "%s: malformed number at byte %ld (JSON numbers have no leading zeros and digits after a '.' or an exponent)", name, bad); return NULL; }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        long at = end ? (long)(end - text) : -1;
        bs_fail(err, "%s: invalid JSON near byte %ld", name, at);
        return NULL;
    }
    size_t at = end ? (size_t)(end - text) : len;
    while (at < len && (text[at] == ' ' || text[at] == '\t' || text[at] == '\n' || text[at] == '\r')) at++;
    if (at < len) {
        bs_fail(err, "%s: unexpected data after the JSON value at byte %zu (one JSON value per file)", name, at);
        cJSON_Delete(root); return NULL;
    }
    if (drop_duplicate_keys(root)) { bs_fail(err, "%s: out of memory", name); cJSON_Delete(root); return NULL; }
    return root;
}

cJSON *bs_json_load(const char *path, bs_err *err) {
    size_t len;
    char *txt = bs_read_file(path, &len, err);
    if (!txt) return NULL;
    cJSON *root = bs_json_parse(txt, len, path, err);
    if (root && !cJSON_IsObject(root)) {
        bs_fail(err, "%s: expected a JSON object at the top level", path);
        cJSON_Delete(root); root = NULL;
    }
    free(txt);
    return root;
}

int bs_json_is_int(const cJSON *v, double lo, double hi) {
    // The range test comes first and also rejects NaN, so the cast below is always defined.
    return cJSON_IsNumber(v) && v->valuedouble >= lo && v->valuedouble <= hi && v->valuedouble == (double)(int64_t)v->valuedouble;
}

static const cJSON *field(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNull(v) ? NULL : v;
}

int bs_json_int(const cJSON *obj, const char *key, int required, long lo, long hi, int *out, const char *file, bs_err *err) {
    const cJSON *v = field(obj, key);
    if (!v) return required ? bs_fail(err, "%s: missing field \"%s\"", file, key) : 0;
    if (!bs_json_is_int(v, (double)lo, (double)hi))
        return bs_fail(err, "%s: field \"%s\" must be an integer in [%ld, %ld]", file, key, lo, hi);
    *out = (int)v->valuedouble;
    return 0;
}

int bs_json_num(const cJSON *obj, const char *key, int required, double *out, const char *file, bs_err *err) {
    const cJSON *v = field(obj, key);
    if (!v) return required ? bs_fail(err, "%s: missing field \"%s\"", file, key) : 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return bs_fail(err, "%s: field \"%s\" must be a number", file, key);
    *out = v->valuedouble;
    return 0;
}

int bs_json_bool(const cJSON *obj, const char *key, int required, int *out, const char *file, bs_err *err) {
    const cJSON *v = field(obj, key);
    if (!v) return required ? bs_fail(err, "%s: missing field \"%s\"", file, key) : 0;
    if (!cJSON_IsBool(v)) return bs_fail(err, "%s: field \"%s\" must be true or false", file, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

int bs_json_int_list(const cJSON *obj, const char *key, int *out, int max, int *n, const char *file, bs_err *err) {
    const cJSON *v = field(obj, key);
    *n = 0;
    if (!v) return 0;
    if (cJSON_IsNumber(v)) {
        if (!bs_json_is_int(v, 0, 1e9)) return bs_fail(err, "%s: field \"%s\" must be an integer in [0, 1000000000]", file, key);
        out[(*n)++] = (int)v->valuedouble;
        return 0;
    }
    if (!cJSON_IsArray(v)) return bs_fail(err, "%s: field \"%s\" must be an integer or a list of integers", file, key);
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        if (!bs_json_is_int(it, -1e9, 1e9)) return bs_fail(err, "%s: field \"%s\" must list integers in [-1000000000, 1000000000]", file, key);
        if (*n == max) return bs_fail(err, "%s: field \"%s\" lists more than %d entries", file, key, max);
        out[(*n)++] = (int)it->valuedouble;
    }
    return 0;
}
