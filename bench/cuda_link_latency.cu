// What one dependent link between kernels costs inside a CUDA graph on this GPU, handed over three ways:
//   pdl      the consumer is PDL-launched (its producer triggers at its start) and calls griddepcontrol.wait,
//            which returns once the whole producer grid has completed and its writes are visible;
//   counter  no wait: every producer block adds 1 to one counter (release), every consumer block spins on it
//            (acquire) until all producer blocks have arrived;
//   flags    no wait: every producer block sets its own flag; a consumer polls only the flags of the blocks
//            whose outputs it reads (one, or all of them).
// Each link is a trivial kernel (read the producer's values, write one per block), so the figure is the
// handover alone. Why: docs/cuda.md ("What is left") asked whether decode links that wait for the data they
// read, instead of a whole grid, would be cheaper than the ~2.5-3.5 us a link costs in the decode step.
//   build-cuda/cuda_link_latency        (built by `make cuda`; prints us per link for 8 / 132 / 264 blocks)
#include "backend/cuda/cuda_internal.cuh"   // the decode path's own PDL primitives (pdl_trigger / pdl_wait)
// A stand-alone program, not the library: a failed CUDA call ends it (the library's CK reports to a backend).
#undef CK
#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "cuda_link_latency: %s: %s\n", #call, cudaGetErrorString(e_)); exit(1); } } while (0)

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p) { unsigned v; asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v; }
__device__ __forceinline__ void red_release(unsigned *p, unsigned v) { asm volatile("red.release.gpu.global.add.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory"); }
__device__ __forceinline__ void st_release(unsigned *p, unsigned v) { asm volatile("st.release.gpu.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory"); }

enum { MODE_PDL, MODE_COUNTER, MODE_FLAGS, LINKS = 400, MAXB = 1024 };
static const char *mode_name[] = { "pdl", "counter", "flags" };

// Link i: wait for link i-1 (mode), read its value of this block (fan 0) or all of its values (fan 1),
// write this block's value, announce it (counter / flags).
__global__ void link_kernel(float *x, unsigned *sync, int i, int nb, int mode, int fan) {
    pdl_trigger();
    const float *prev = x + (size_t)(i - 1) * MAXB;
    if (mode == MODE_PDL) pdl_wait();
    else if (i > 1) {
        if (mode == MODE_COUNTER) {
            if (threadIdx.x == 0) while (ld_acquire(sync + (size_t)(i - 1) * MAXB) < (unsigned)nb) { }
        } else if (fan) {
            for (int b = threadIdx.x; b < nb; b += blockDim.x) while (!ld_acquire(sync + (size_t)(i - 1) * MAXB + b)) { }
        } else if (threadIdx.x == 0) {
            while (!ld_acquire(sync + (size_t)(i - 1) * MAXB + blockIdx.x)) { }
        }
        __syncthreads();
    }
    float s = 0;
    if (fan) for (int j = threadIdx.x; j < nb; j += blockDim.x) s += __ldcg(prev + j);
    else if (threadIdx.x == 0) s = __ldcg(prev + blockIdx.x);
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(~0u, s, o);
    __shared__ float w[32];
    if ((threadIdx.x & 31) == 0) w[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0;
        for (int k = 0; k < (int)(blockDim.x >> 5); k++) t += w[k];
        __stcg(x + (size_t)i * MAXB + blockIdx.x, t * 0.5f + 1.0f);
        if (mode == MODE_COUNTER) red_release(sync + (size_t)i * MAXB, 1u);
        if (mode == MODE_FLAGS) st_release(sync + (size_t)i * MAXB + blockIdx.x, 1u);
    }
}

int main(void) {
    float *x;
    unsigned *sync;
    CK(cudaMalloc(&x, sizeof(float) * MAXB * (LINKS + 1)));
    CK(cudaMemset(x, 0, sizeof(float) * MAXB * (LINKS + 1)));
    CK(cudaMalloc(&sync, sizeof(unsigned) * MAXB * (LINKS + 1)));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    const int nbs[] = { 8, 132, 264 };
    printf("%-7s %-7s %6s %12s   (%d links per graph, best of 10 replays)\n", "reads", "handover", "blocks", "us per link", LINKS);
    for (int fan = 0; fan < 2; fan++)
        for (int bi = 0; bi < 3; bi++)
            for (int mode = 0; mode < 3; mode++) {
                const int nb = nbs[bi];
                cudaGraph_t g;
                cudaGraphExec_t ge;
                CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
                CK(cudaMemsetAsync(sync, 0, sizeof(unsigned) * MAXB * (LINKS + 1), st));   // flags fresh every replay
                cudaLaunchAttribute at[1];
                at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
                at[0].val.programmaticStreamSerializationAllowed = 1;
                cudaLaunchConfig_t cfg = {};
                cfg.stream = st; cfg.attrs = at; cfg.numAttrs = 1; cfg.gridDim = dim3(nb); cfg.blockDim = dim3(128);
                for (int i = 1; i <= LINKS; i++) CK(cudaLaunchKernelEx(&cfg, link_kernel, x, sync, i, nb, mode, fan));
                CK(cudaStreamEndCapture(st, &g));
                CK(cudaGraphInstantiate(&ge, g, 0));
                for (int r = 0; r < 3; r++) CK(cudaGraphLaunch(ge, st));
                CK(cudaStreamSynchronize(st));
                float best = 1e30f;
                for (int r = 0; r < 10; r++) {
                    float ms;
                    CK(cudaEventRecord(e0, st)); CK(cudaGraphLaunch(ge, st)); CK(cudaEventRecord(e1, st));
                    CK(cudaEventSynchronize(e1)); CK(cudaEventElapsedTime(&ms, e0, e1));
                    if (ms < best) best = ms;
                }
                printf("%-7s %-7s %6d %12.2f\n", fan ? "all" : "own", mode_name[mode], nb, best * 1e3f / LINKS);
                CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
            }
    return 0;
}
