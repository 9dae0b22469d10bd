#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <sched.h>
#include "util/threadpool.h"
#include "util/tuning.h"

#define MAX_THREADS 256
#define SPIN_ROUNDS 200000

static struct {
    int n;                        // threads including the caller
    pthread_t th[MAX_THREADS];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic unsigned gen;         // bumped for every job (wakes the workers)
    _Atomic uint64_t claim;       // the job's task count << 32 | next task index to claim
    _Atomic int done;             // tasks finished
    _Atomic int sleeping;
    _Atomic int stop;
    bs_task_fn fn;
    void *ctx;
} P;

// Tasks are claimed by compare-and-swap on one word holding both the job's task count and the next index,
// so a claim can only succeed while that job has unclaimed tasks, and the task count a worker compares with
// is the one of the job it claims from. (With a separate counter and task count, a worker still leaving the
// previous job could read the next job's count before its counter was reset, run a task of the next job twice
// and count it twice: the caller then returned while a task was still running. Seen as rare wrong results
// with few tasks per job.) The caller publishes fn/ctx/done before the claim word (release), and changes them
// only after every task of the job has finished, which no late claim can precede.
static void run_tasks(void) {
    uint64_t c = atomic_load_explicit(&P.claim, memory_order_acquire);
    for (;;) {
        uint32_t idx = (uint32_t)c, n = (uint32_t)(c >> 32);
        if (idx >= n) return;
        if (atomic_compare_exchange_weak_explicit(&P.claim, &c, c + 1, memory_order_acq_rel, memory_order_acquire)) {
            P.fn(P.ctx, (int)idx, (int)n);
            atomic_fetch_add_explicit(&P.done, 1, memory_order_acq_rel);
            c = atomic_load_explicit(&P.claim, memory_order_acquire);
        }
    }
}

static void *worker(void *arg) {
    unsigned seen = 0;
    for (;;) {
        int spins = 0;
        while (atomic_load_explicit(&P.gen, memory_order_acquire) == seen) {
            if (atomic_load(&P.stop)) return NULL;
            if (++spins < SPIN_ROUNDS) { __builtin_ia32_pause(); continue; }
            pthread_mutex_lock(&P.mu);
            atomic_fetch_add(&P.sleeping, 1);
            while (atomic_load(&P.gen) == seen && !atomic_load(&P.stop)) pthread_cond_wait(&P.cv, &P.mu);
            atomic_fetch_sub(&P.sleeping, 1);
            pthread_mutex_unlock(&P.mu);
            spins = 0;
        }
        seen = atomic_load(&P.gen);
        if (atomic_load(&P.stop)) return NULL;
        run_tasks();
    }
    (void)arg;
}

void bs_pool_init(int n_threads) {
    if (P.n) return;
    if (n_threads <= 0) {
        bs_tuning_init();   // BS_THREADS, when the pool starts before any engine or backend
        n_threads = bs_tuning_get()->threads ? bs_tuning_get()->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    }
    if (n_threads < 1) n_threads = 1;
    if (n_threads > MAX_THREADS) n_threads = MAX_THREADS;
    pthread_mutex_init(&P.mu, NULL);
    pthread_cond_init(&P.cv, NULL);
    P.n = n_threads;
    for (int i = 1; i < n_threads; i++)
        if (pthread_create(&P.th[i], NULL, worker, NULL) != 0) { P.n = i; break; }
}

int bs_pool_size(void) { if (!P.n) bs_pool_init(0); return P.n; }

void bs_parallel_for(int n_tasks, bs_task_fn fn, void *ctx) {
    if (!P.n) bs_pool_init(0);
    if (n_tasks <= 0) return;
    if (P.n == 1 || n_tasks == 1) { for (int t = 0; t < n_tasks; t++) fn(ctx, t, n_tasks); return; }
    P.fn = fn; P.ctx = ctx;
    atomic_store(&P.done, 0);
    atomic_store_explicit(&P.claim, (uint64_t)(uint32_t)n_tasks << 32, memory_order_release);
    atomic_fetch_add_explicit(&P.gen, 1, memory_order_release);
    if (atomic_load(&P.sleeping)) { pthread_mutex_lock(&P.mu); pthread_cond_broadcast(&P.cv); pthread_mutex_unlock(&P.mu); }
    run_tasks();
    while (atomic_load_explicit(&P.done, memory_order_acquire) < n_tasks) __builtin_ia32_pause();
}

void bs_pool_shutdown(void) {
    if (!P.n) return;
    atomic_store(&P.stop, 1);
    pthread_mutex_lock(&P.mu); pthread_cond_broadcast(&P.cv); pthread_mutex_unlock(&P.mu);
    for (int i = 1; i < P.n; i++) pthread_join(P.th[i], NULL);
    P.n = 0;
    atomic_store(&P.stop, 0);
}
