// Weight memory for the fast CPU backend: copies of the checkpoint's weights in anonymous memory backed by
// transparent huge pages (2 MiB), and the same kind of memory for the roofline's bandwidth buffer.
//
// Why: the checkpoint is a file-backed mmap with 4 KiB pages. A forward streams every weight once, and on
// 4 KiB pages the hardware prefetchers stop at every page boundary and every page is a TLB miss; a 2 MiB
// page removes both. Linux only backs anonymous memory with huge pages on request (THP mode `madvise`),
// so at load each weight is copied into a 2 MiB-aligned anonymous arena marked MADV_HUGEPAGE.
//
// When it is not done (the weight stays the mmap view, values identical either way):
// - BS_CPU_HUGEPAGES=0 in the environment;
// - THP is `never` on this kernel, or mmap / madvise fail;
// - memory is short: the copy would leave less than 1 GiB + 1/16 of RAM available (MemAvailable).
// Arena chunks are virtual reservations of >= 1 GiB that are bump-allocated; pages are only backed when
// written, so the unused end of a chunk costs nothing. Everything is unmapped by bs_cpu_weights_free
// (backend destroy), as the CUDA backend frees its uploaded weights.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "backend/cpu/cpu.h"
#include "util/threadpool.h"
#include "util/tuning.h"

#define HUGE_SZ ((size_t)2 << 20)
#define CHUNK_MIN ((size_t)1 << 30)

int bs_cpu_hugepages_wanted(void) {
    if (!bs_tuning_get()->cpu_hugepages) return 0;
    static int thp = -1;   // 1 unless the kernel says THP is off ("[never]")
    if (thp < 0) {
        thp = 1;
        FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
        char line[128];
        if (f && fgets(line, sizeof line, f) && strstr(line, "[never]")) thp = 0;
        if (f) fclose(f);
    }
    return thp;
}

// MemAvailable in bytes (0 when unknown).
static size_t mem_available(size_t *total) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    size_t avail = 0, tot = 0;
    unsigned long long kb;
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) avail = (size_t)kb << 10;
        else if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) tot = (size_t)kb << 10;
    }
    if (f) fclose(f);
    if (total) *total = tot;
    return avail;
}

size_t bs_cpu_mem_free(bs_backend *be) { return mem_available(NULL); }

void *bs_cpu_huge_map(size_t bytes, int want_huge, size_t *len_out) {
    size_t len = (bytes + HUGE_SZ - 1) / HUGE_SZ * HUGE_SZ;
    char *m = mmap(NULL, len + HUGE_SZ, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return NULL;
    // Trim to a 2 MiB-aligned start (huge pages need it).
    size_t head = (HUGE_SZ - ((uintptr_t)m & (HUGE_SZ - 1))) & (HUGE_SZ - 1);
    if (head) munmap(m, head);
    if (HUGE_SZ - head) munmap(m + head + len, HUGE_SZ - head);
    m += head;
    if (want_huge && madvise(m, len, MADV_HUGEPAGE)) { munmap(m, len); return NULL; }
    *len_out = len;
    return m;
}

void bs_cpu_huge_unmap(void *p, size_t len) { if (p) munmap(p, len); }

// Parallel copy (the pool's threads fault in and fill their own part, page-aligned pieces).
typedef struct { char *dst; const char *src; size_t bytes; } cp_job;
static void cp_task(void *p, int t, int nt) {
    cp_job *j = p;
    size_t per = (j->bytes / nt + 4095) / 4096 * 4096, lo = (size_t)t * per, hi = lo + per;
    if (lo >= j->bytes) return;
    if (hi > j->bytes) hi = j->bytes;
    memcpy(j->dst + lo, j->src + lo, hi - lo);
}

// One array into the arena (64-byte aligned); NULL when the arena cannot grow.
static char *arena_put(bs_cpu_weights *w, const void *src, size_t bytes) {
    size_t off = (w->used + 63) / 64 * 64;
    if (!w->n || off + bytes > w->chunks[w->n - 1].len) {   // a new chunk
        if (w->n == w->cap) {
            int cap = w->cap ? 2 * w->cap : 8;
            void *c = realloc(w->chunks, sizeof *w->chunks * cap);
            if (!c) return NULL;
            w->chunks = c; w->cap = cap;
        }
        size_t len, want = bytes > CHUNK_MIN ? bytes : CHUNK_MIN;
        char *m = bs_cpu_huge_map(want, 1, &len);
        if (!m) return NULL;
        w->chunks[w->n].p = m; w->chunks[w->n].len = len;
        w->n++;
        off = 0;
    }
    char *d = w->chunks[w->n - 1].p + off;
    cp_job j = { d, src, bytes };
    if (bytes >= ((size_t)1 << 20)) bs_parallel_for(bs_pool_size(), cp_task, &j);
    else memcpy(d, src, bytes);
    w->used = off + bytes;
    w->bytes += bytes;
    return d;
}

int bs_cpu_weights_copy(bs_cpu_weights *w, bs_mat *dst, const bs_mat *host) {
    int aff = host->format == BS_WFMT_AFFINE;
    // An affine weight is three arrays: its codes, then its scales and biases ([rows][cols / group] each).
    size_t bytes = aff ? (size_t)host->rows * (host->cols * host->bits / 32) * 4 : (size_t)host->rows * host->cols * bs_dtype_size(host->dtype);
    size_t pbytes = aff ? (size_t)host->rows * (host->cols / host->group) * bs_dtype_size(host->dtype) : 0;
    if (!bytes || !host->data) return -1;
    // Memory check: the copy must leave 1 GiB + 1/16 of RAM available.
    size_t total, avail = mem_available(&total);
    if (!avail || bytes + 2 * pbytes + ((size_t)1 << 30) + total / 16 > avail) return -1;
    char *d = arena_put(w, host->data, bytes), *s = NULL, *b = NULL;
    if (!d) return -1;
    if (aff && (!(s = arena_put(w, host->scales, pbytes)) || !(b = arena_put(w, host->biases, pbytes)))) return -1;
    *dst = *host;
    dst->data = d;
    if (aff) { dst->scales = s; dst->biases = b; }
    return 0;
}

void bs_cpu_weights_free(bs_cpu_weights *w) {
    for (int i = 0; i < w->n; i++) munmap(w->chunks[i].p, w->chunks[i].len);
    free(w->chunks);
    memset(w, 0, sizeof *w);
}

// Bytes of this process's anonymous memory in huge pages (AnonHugePages of /proc/self/smaps_rollup), -1 if unknown.
long long bs_cpu_anon_huge_bytes(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    long long kb = -1, v;
    while (f && fgets(line, sizeof line, f)) if (sscanf(line, "AnonHugePages: %lld kB", &v) == 1) kb = v;
    if (f) fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

