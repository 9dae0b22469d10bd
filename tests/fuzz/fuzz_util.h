// Shared by the libFuzzer harnesses: splitting one input into several files, and a scratch folder.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Inputs that stand for several files hold them separated by this line (the seeds use it; mutations
// keep, drop or duplicate it, which exercises missing and extra files).
#define FUZZ_SEP "\n--8<--\n"

// Splits data into at most max parts at FUZZ_SEP; returns the count. Parts point into data.
static inline int fuzz_split(const uint8_t *data, size_t size, const uint8_t **part, size_t *len, int max) {
    size_t sl = strlen(FUZZ_SEP);
    int n = 0;
    const uint8_t *p = data, *end = data + size;
    while (n < max - 1) {
        const uint8_t *q = memmem(p, (size_t)(end - p), FUZZ_SEP, sl);
        if (!q) break;
        part[n] = p; len[n] = (size_t)(q - p); n++;
        p = q + sl;
    }
    part[n] = p; len[n] = (size_t)(end - p);
    return n + 1;
}

// A NUL-terminated copy (the text APIs take C strings), exact-size so ASan sees overreads.
static inline char *fuzz_cstr(const uint8_t *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    memcpy(s, p, n); s[n] = 0;
    return s;
}

// One scratch folder per fuzzing process ($TMPDIR or /tmp), created on first use.
static inline const char *fuzz_dir(void) {
    static char dir[512];
    if (!dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/bs_fuzz_XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(dir)) abort();
    }
    return dir;
}

// Writes dir/name (len < 0: removes it, so a file can be absent).
static inline void fuzz_put(const char *name, const void *data, long len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    if (len < 0) { unlink(path); return; }
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (len && fwrite(data, 1, (size_t)len, f) != (size_t)len) abort();
    fclose(f);
}
