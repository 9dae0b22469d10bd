// What the two GPU trainers (train_target.cu, drafter_step.cu) share around their kernels: the error
// macros, and the row-major GEMMs, linear layers, RMSNorm and gain-gradient launches over their device state
// D (either trainer's: fields cb = cuBLAS handle, ct = compute type, st = stream, part = column-sum partials,
// s.eps). Include after util/err.h and the kernel headers.
#pragma once

#define CU(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) \
    return bs_fail(err, "CUDA: %s: %s", #call, cudaGetErrorString(e_)); } while (0)
#define CB(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) \
    return bs_fail(err, "cuBLAS: %s: status %d", #call, (int)s_); } while (0)
#define LAUNCHED() CU(cudaGetLastError())

// C[M][N] = alpha op(A)[M][K] op(B)[K][N] + beta C, every matrix row-major with the given leading dimension.
// cuBLAS is column-major: a row-major X is its transpose, so C^T = op(B)^T op(A)^T is what we ask for.
template <class D>
static int mm(D *d, bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
              float beta, float *C, int ldc, bs_err *err) {
    if (M <= 0 || N <= 0) return 0;
    CB(cublasGemmEx(d->cb, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, CUDA_R_32F,
                    ldb, A, CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc, d->ct, CUBLAS_GEMM_DEFAULT));
    return 0;
}
// Y[rows][out] (= or +=) X[rows][in] W[out][in]^T
template <class D>
static int lin_fwd(D *d, float *Y, const float *X, const float *W, long long rows, int out, int in, float beta, bs_err *err) {
    return mm(d, false, true, (int)rows, out, in, 1.f, X, in, W, in, beta, Y, out, err);
}
// dX[rows][in] (= or +=) dY[rows][out] W[out][in] (dX NULL: not wanted);  dW[out][in] += dY^T X
template <class D>
static int lin_bwd(D *d, float *dX, float beta, float *dW, const float *dY, const float *X, const float *W, long long rows,
                   int out, int in, bs_err *err) {
    if (dX && mm(d, false, false, (int)rows, in, out, 1.f, dY, out, W, in, beta, dX, in, err)) return -1;
    return mm(d, true, false, out, in, (int)rows, 1.f, dY, out, X, in, 1.f, dW, in, err);
}
// out[C] += a norm gain's gradient (tc_colsum_partial / tc_colsum_finish, deterministic order).
template <class D>
static int colsum(D *d, float *out, const float *dy, const float *x, const float *rstd, long long rows, int C, bs_err *err) {
    tc_colsum_partial<<<dim3((C + 31) / 32, TC_CS_CHUNKS), dim3(32, 8), 0, d->st>>>(d->part, dy, x, rstd, rows, C);
    tc_colsum_finish<<<tc_blocks(C, 256), 256, 0, d->st>>>(out, d->part, C);
    LAUNCHED();
    return 0;
}
template <class D>
static int rmsnorm(D *d, float *y, float *rstd, const float *x, const float *w, long long rows, int C, bs_err *err) {
    tc_rmsnorm_fwd<<<tc_blocks(rows, TC_WARPS), 32 * TC_WARPS, 0, d->st>>>(y, rstd, x, w, (int)rows, C, d->s.eps);
    LAUNCHED();
    return 0;
}
