// Per-thread scratch of the CPU kernels, grown on demand; a failed allocation is reported, not fatal.
#include <stdlib.h>
#include "backend/cpu/cpu.h"
#include "util/thread_scratch.h"

int bs_cpu_test_fail_scratch;

void *bs_cpu_scratch(void **buf, size_t *cap, size_t need, size_t want) {
    // The test hook counts requests, not growths, so that a test fails one whatever earlier tests left
    // in this thread's buffers.
    int left = __atomic_load_n(&bs_cpu_test_fail_scratch, __ATOMIC_RELAXED);
    if (left > 0 && __atomic_sub_fetch(&bs_cpu_test_fail_scratch, 1, __ATOMIC_RELAXED) == 0) return NULL;
    if (need <= *cap) return *buf;
    if (!*buf) bs_thread_scratch_register(buf);   // freed when this thread ends (registering twice is a no-op)
    free(*buf);
    *buf = NULL; *cap = 0;
    if (want < need) want = need;
    void *p;
    if (posix_memalign(&p, 64, want)) return NULL;
    *buf = p; *cap = want;
    return p;
}
