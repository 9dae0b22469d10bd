// The thread pool: every task of every job runs exactly once and has finished when bs_parallel_for returns,
// across many back-to-back jobs whose task counts go up and down (a job with more tasks right after one with
// fewer is where a worker still leaving the previous job could claim a task of the next one).
#include <stdatomic.h>
#include <string.h>
#include "harness.h"
#include "util/threadpool.h"

typedef struct { _Atomic int runs[64]; _Atomic int finished; volatile int spin; } pool_job;
static void pool_task(void *p, int t, int nt) {
    pool_job *j = p;
    atomic_fetch_add(&j->runs[t], 1);
    for (int i = 0; i < (t & 3) * 50; i++) j->spin++;   // uneven task lengths
    atomic_fetch_add(&j->finished, 1);
}

TEST(threadpool_each_task_once_and_finished) {
    if (bs_pool_size() < 2) SKIP("one thread: nothing runs concurrently");
    static pool_job j;
    static const int counts[] = { 2, 17, 3, 64, 2, 9, 40, 2, 5 };
    for (int it = 0; it < 200000; it++) {
        int n = counts[it % 9];
        for (int t = 0; t < n; t++) atomic_store(&j.runs[t], 0);
        atomic_store(&j.finished, 0);
        bs_parallel_for(n, pool_task, &j);
        int fin = atomic_load(&j.finished);
        CHECK(fin == n, "job %d (%d tasks): %d tasks finished when bs_parallel_for returned", it, n, fin);
        for (int t = 0; t < n; t++) CHECK(atomic_load(&j.runs[t]) == 1, "job %d: task %d of %d ran %d times", it, t, n, atomic_load(&j.runs[t]));
    }
}
