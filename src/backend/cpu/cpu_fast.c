// Fast CPU kernels: multithreaded and vectorised, chosen at run time.
// (First version: the reference ops run row-parallel on the thread pool; the vector kernels replace them.)
#include "backend/cpu/cpu.h"
#include "util/threadpool.h"

typedef struct { bs_backend *be; float *y; const float *x; int n; const bs_mat *W; int acc; } mm_job;

static void mm_task(void *p, int t, int nt) {
    mm_job *j = p;
    int64_t per = (j->W->rows + nt - 1) / nt, lo = t * per, hi = lo + per > j->W->rows ? j->W->rows : lo + per;
    for (int r = 0; r < j->n; r++)
        for (int64_t o = lo; o < hi; o++) {
            float s = 0;
            for (int64_t i = 0; i < j->W->cols; i++)
                s += j->x[r * j->W->cols + i] * bs_load_elem(j->W->data, j->W->dtype, o * j->W->cols + i);
            float *y = j->y + r * j->W->rows + o;
            *y = j->acc ? *y + s : s;
        }
}

static void fast_matmul(bs_backend *be, float *y, const float *x, int n, const bs_mat *W, int acc) {
    mm_job j = { be, y, x, n, W, acc };
    bs_parallel_for(bs_pool_size() * 4, mm_task, &j);
}

void bs_cpu_install_fast(bs_backend *be) { be->matmul = fast_matmul; }
