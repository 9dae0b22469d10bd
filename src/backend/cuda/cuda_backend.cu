// The CUDA backend: every op of src/backend/backend.h as CUDA C kernels on one stream.
//
// Design notes (see docs/cuda.md):
// - Weights stay in their stored dtype on the device (uploaded once). BF16 weights go through the
//   tensor-core small-row GEMM below; F32/F16 weights use a plain (slow, exact) kernel.
// - Activations are fp32. The GEMM splits each fp32 activation into bf16 hi + bf16 lo and runs two
//   bf16 MMAs (fp32 accumulate), so the product with a bf16 weight keeps ~16 mantissa bits of the
//   activation: results agree with the fp32 CPU reference to ~1e-5 relative.
// - Batch invariance: the summation order of every output element depends only on the shapes of the
//   weight and on the query's own key range, never on how many rows are in the call. A row computed in
//   a 16-row verify forward is bit-identical to the same row computed alone, so greedy speculative
//   decoding reproduces plain greedy decoding exactly on the GPU too.
// - Position arguments can be read from device memory ("step state") so that a recorded CUDA graph
//   of a forward replays at any position (record_begin / record_end / replay).
#include "backend/cuda/cuda_internal.cuh"

// ---------------------------------------------------------------------------------------------
// Memory

static void *cu_alloc(bs_backend *be, size_t bytes, bs_err *err) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 16);
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t fr = 0, tot = 0; cudaMemGetInfo(&fr, &tot);
        bs_fail(err, "out of GPU memory allocating %.1f MiB on %s (%.1f of %.1f GiB free): %s", bytes / 1048576.0,
                CI(be)->name, fr / 1073741824.0, tot / 1073741824.0, cudaGetErrorString(e));
        return NULL;
    }
    cuda_impl *c = CI(be);
    CK(cudaMemsetAsync(p, 0, bytes, c->st));
    return p;
}
static void cu_free(bs_backend *be, void *p) { cuda_impl *c = CI(be); if (p) { CK(cudaStreamSynchronize(c->st)); CK(cudaFree(p)); } }
static void cu_upload(bs_backend *be, void *dst, const void *src, size_t n) {
    cuda_impl *c = CI(be);
    if (!n) return;
    CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c->st));
    CK(cudaStreamSynchronize(c->st));
}
static void cu_download(bs_backend *be, void *dst, const void *src, size_t n) {
    cuda_impl *c = CI(be);
    if (!n) return;
    CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->st));
    CK(cudaStreamSynchronize(c->st));
}
static void cu_copy(bs_backend *be, void *dst, const void *src, size_t n) {
    cuda_impl *c = CI(be);
    if (n) CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, c->st));
}
static void cu_sync(bs_backend *be) { cuda_impl *c = CI(be); CK(cudaStreamSynchronize(c->st)); }
static size_t cu_mem_free(bs_backend *be) {
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) { cudaGetLastError(); return 0; }
    return fr;
}

// BS_CUDA_FUSE=0: the fused ops (qk_norm_rope_store, swiglu_matmul) are declined, the model runs the
// separate ops instead (same results; for isolating a fused kernel).
bool fuse_enabled(void) {
    static int v = -1;
    if (v < 0) v = bs_tuning_get()->cuda_fuse;
    return v;
}

bool ablated(const char *what) {
    static const char *e = (const char *)-1;
    if (e == (const char *)-1) {   // once: ops ask on every launch outside graphs (the engine warns when it is set)
        e = bs_tuning_get()->cuda_ablate;
        if (!*e) e = NULL;
    }
    if (!e) return false;
    size_t n = strlen(what);
    for (const char *p = e; (p = strstr(p, what)) != NULL; p += n)
        if ((p == e || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return true;
    return false;
}

int upload_buffers(cuda_impl *c, size_t pin_bytes, size_t stage_bytes, bs_err *err) {
    if (!c->pin_ev[0])
        for (int i = 0; i < 2; i++) CK(cudaEventCreateWithFlags(&c->pin_ev[i], cudaEventDisableTiming));
    if (c->pin_bytes >= pin_bytes && c->stage_bytes >= stage_bytes) return 0;
    CK(cudaStreamSynchronize(c->st));   // the old buffers may still feed a copy
    if (c->pin_bytes < pin_bytes) {
        cudaFreeHost(c->pin[0]); cudaFreeHost(c->pin[1]);
        c->pin[0] = c->pin[1] = NULL; c->pin_bytes = 0;
        if (cudaMallocHost(&c->pin[0], pin_bytes) != cudaSuccess || cudaMallocHost(&c->pin[1], pin_bytes) != cudaSuccess) {
            cudaGetLastError();
            return bs_fail(err, "out of pinned host memory for a 2 x %.1f MiB weight-upload buffer (%s)", pin_bytes / 1048576.0, c->name);
        }
        c->pin_bytes = pin_bytes;
    }
    if (c->stage_bytes < stage_bytes) {
        cudaFree(c->stage); c->stage = NULL; c->stage_bytes = 0;
        if (cudaMalloc(&c->stage, stage_bytes) != cudaSuccess) {
            cudaGetLastError();
            return bs_fail(err, "out of GPU memory for a %.1f MiB weight-upload staging buffer on %s", stage_bytes / 1048576.0, c->name);
        }
        c->stage_bytes = stage_bytes;
    }
    return 0;
}

// Device memory for a weight about to be uploaded (stored_as: "" or how it is stored, e.g. " in 8 bits"),
// or a message naming the weight and what the GPU has free.
static int weight_alloc(cuda_impl *c, const bs_mat *host, size_t bytes, const char *stored_as, void **d, bs_err *err) {
    *d = NULL;
    if (cudaMalloc(d, bytes ? bytes : 16) == cudaSuccess) return 0;
    cudaGetLastError();
    size_t fr = 0, tot = 0; cudaMemGetInfo(&fr, &tot);
    return bs_fail(err, "out of GPU memory uploading a %lldx%lld %s weight%s (%.1f MiB; %.1f of %.1f GiB free on %s)",
                   (long long)host->rows, (long long)host->cols, bs_dtype_name(host->dtype), stored_as, bytes / 1048576.0,
                   fr / 1073741824.0, tot / 1073741824.0, c->name);
}

// The uploaded weight d becomes dst (in the given device layout); it lives until the backend is destroyed.
static int weight_keep(cuda_impl *c, bs_mat *dst, const bs_mat *host, void *d, int layout) {
    if (c->n_weights == c->cap_weights) {
        c->cap_weights = c->cap_weights ? 2 * c->cap_weights : 256;
        c->weights = (void **)realloc(c->weights, sizeof(void *) * c->cap_weights);
    }
    c->weights[c->n_weights++] = d;
    *dst = *host;
    dst->data = d;
    dst->layout = layout;
    return 0;
}

static int cu_weight(bs_backend *be, bs_mat *dst, const bs_mat *host, bs_err *err) {
    cuda_impl *c = CI(be);
    if (host->format == BS_WFMT_AFFINE) {   // MLX affine codes: uploaded as they are, multiplied by cuda_affine.cu
        bs_mat dev;
        void *d;
        if (cu_affine_upload(c, &dev, host, &d, err)) return -1;
        weight_keep(c, dst, host, d, BS_CUDA_AFFINE);
        dst->scales = dev.scales; dst->biases = dev.biases;
        return 0;
    }
    const bool tiled = mm_tiled_eligible(host);
    size_t bytes = tiled ? mm_tiled_bytes(host) : (size_t)host->rows * host->cols * bs_dtype_size(host->dtype);
    void *d;
    if (weight_alloc(c, host, bytes, "", &d, err)) return -1;
    if (tiled) {
        if (mm_tiled_upload(c, d, host, err)) { cudaFree(d); return -1; }
    } else {
        // Staged through pinned memory in pieces: pageable (mmapped) sources copy much slower.
        const size_t PIECE = 64 << 20;
        if (upload_buffers(c, bytes < PIECE ? bytes : PIECE, 0, err)) { cudaFree(d); return -1; }
        for (size_t off = 0, k = 0; off < bytes; off += PIECE, k++) {
            size_t n = bytes - off < PIECE ? bytes - off : PIECE;
            int b = k & 1;
            CK(cudaEventSynchronize(c->pin_ev[b]));
            memcpy(c->pin[b], (const char *)host->data + off, n);
            CK(cudaMemcpyAsync((char *)d + off, c->pin[b], n, cudaMemcpyHostToDevice, c->st));
            CK(cudaEventRecord(c->pin_ev[b], c->st));
        }
        CK(cudaStreamSynchronize(c->st));
    }
    return weight_keep(c, dst, host, d, tiled ? BS_CUDA_TILED : 0);
}

// 8-bit tiles with row scales for a BF16 matrix the GEMM can stream (K % 128 == 0): half the bytes of
// BF16, for weights whose exact values do not matter to the output (drafters: verification decides).
// Declines (1) what it cannot store that way; the caller then uses cu_weight.
static int cu_weight_lossy(bs_backend *be, bs_mat *dst, const bs_mat *host, bs_err *err) {
    cuda_impl *c = CI(be);
    if (host->format != BS_WFMT_DENSE || !mm_fp8_eligible(host)) return 1;   // (an affine weight stays as it is: cu_weight)
    size_t bytes = mm_fp8_bytes(host);
    void *d;
    if (weight_alloc(c, host, bytes, " in 8 bits", &d, err)) return -1;
    if (mm_fp8_upload(c, d, host, err)) { cudaFree(d); return -1; }
    return weight_keep(c, dst, host, d, BS_CUDA_FP8);
}

// BS_CUDA_PDL: 0 = off, 1 = every kernel, gemm = only the tiled GEMM and its fixup, after = as gemm
// plus the kernel that follows a multi-row GEMM (default; see docs/cuda.md and mm_tiled_launch).
static int pdl_mode(void) {
    static int v = -1;
    if (v < 0) v = bs_tuning_get()->cuda_pdl;
    return v;
}
bool pdl_enabled(void) { return pdl_mode() == 1; }
bool pdl_gemm(void) { return pdl_mode() != 0; }
bool pdl_after_gemm(void) { return pdl_mode() == 3; }

int ensure_ws(cuda_impl *c, float **p, size_t *have, size_t need) {
    if (need <= *have) return 0;
    if (c->capturing) {
        bs_backend_fail(c->be, "CUDA workspace too small while recording a graph (%zu < %zu bytes)", *have, need);
        return -1;
    }
    CK(cudaStreamSynchronize(c->st));
    if (*p) CK(cudaFree(*p));
    *p = NULL; *have = 0;
    size_t n = need + need / 2;
    cudaError_t e = cudaMalloc((void **)p, n);
    if (e != cudaSuccess) { *p = NULL; cu_fault(c, "growing a workspace (cudaMalloc)", e); return -1; }
    *have = n;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Recording (CUDA graphs)

struct cu_rec { cudaGraphExec_t exec; };

static int cu_record_begin(bs_backend *be, int pos_base) {
    cuda_impl *c = CI(be);
    if (c->capturing) return -1;
    // Workspaces big enough for any 64-row forward of a large model, so recording never allocates.
    if (cudaStreamBeginCapture(c->st, cudaStreamCaptureModeThreadLocal) != cudaSuccess) { cudaGetLastError(); return -1; }
    c->capturing = 1; c->cap_base = pos_base;
    return 0;
}
static void *cu_record_end(bs_backend *be, bs_err *err) {
    cuda_impl *c = CI(be);
    if (!c->capturing) { bs_fail(err, "record_end without record_begin"); return NULL; }
    c->capturing = 0;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(c->st, &g);
    if (e != cudaSuccess) { cudaGetLastError(); bs_fail(err, "CUDA graph capture failed: %s", cudaGetErrorString(e)); return NULL; }
    cu_rec *r = (cu_rec *)calloc(1, sizeof *r);
    e = cudaGraphInstantiate(&r->exec, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) { cudaGetLastError(); free(r); bs_fail(err, "CUDA graph instantiate failed: %s", cudaGetErrorString(e)); return NULL; }
    return r;
}
__global__ void set_state_kernel(step_state *st, step_state v) { *st = v; }
static void cu_replay(bs_backend *be, void *rec, int pos_base, const int32_t *ids, int n_ids) {
    cuda_impl *c = CI(be);
    step_state v; memset(&v, 0, sizeof v);
    v.pos = pos_base;
    for (int i = 0; i < n_ids && i < MAX_STEP_IDS; i++) v.ids[i] = ids[i];
    set_state_kernel<<<1, 1, 0, c->st>>>(c->d_state, v);
    LAUNCHED("set_state");
    CK(cudaGraphLaunch(((cu_rec *)rec)->exec, c->st));
}
static void cu_record_free(bs_backend *be, void *rec) {
    if (!rec) return;
    cuda_impl *c = CI(be);
    CK(cudaStreamSynchronize(c->st));
    cudaGraphExecDestroy(((cu_rec *)rec)->exec);
    free(rec);
}

// ---------------------------------------------------------------------------------------------
static void cu_destroy(bs_backend *be) {
    if (prof_active()) prof_report();
    mm_trace_report();
    cuda_impl *c = CI(be);
    if (c) {
        cudaStreamSynchronize(c->st);
        for (int i = 0; i < c->n_weights; i++) cudaFree(c->weights[i]);
        free(c->weights);
        cudaFree(c->stage); cudaFreeHost(c->pin[0]); cudaFreeHost(c->pin[1]); cudaFree(c->xal);
        for (int i = 0; i < 2; i++) if (c->pin_ev[i]) cudaEventDestroy(c->pin_ev[i]);
        cudaFree(c->ws); cudaFree(c->att_ws); cudaFree(c->counters); cudaFree(c->am_v); cudaFree(c->am_i); cudaFree(c->am_ctr); cudaFree(c->d_state); cudaFree(c->d_argmax);
        cudaFreeHost(c->h_argmax);
        cudaStreamDestroy(c->st);
        free(c);
    }
    free(be);
}

extern "C" bs_backend *bs_backend_cuda(int ordinal, bs_err *err) {
    bs_tuning_init();   // the BS_CUDA_* knobs, when no engine opened this backend
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        bs_fail(err, "no usable CUDA GPU: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        return NULL;
    }
    if (ordinal < 0 || ordinal >= count) { bs_fail(err, "CUDA device %d does not exist (%d found)", ordinal, count); return NULL; }
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, ordinal)) != cudaSuccess || (e = cudaSetDevice(ordinal)) != cudaSuccess) {
        cudaGetLastError(); bs_fail(err, "CUDA device %d: %s", ordinal, cudaGetErrorString(e)); return NULL;
    }
    if (prop.major < 9) { bs_fail(err, "CUDA device %d (%s) has compute capability %d.%d; this build of blockspec needs 9.0 (Hopper) or newer", ordinal, prop.name, prop.major, prop.minor); return NULL; }
    bs_backend *be = (bs_backend *)calloc(1, sizeof *be);
    cuda_impl *c = (cuda_impl *)calloc(1, sizeof *c);
    c->dev = ordinal; c->sms = prop.multiProcessorCount; c->be = be;
    snprintf(c->name, sizeof c->name, "cuda:%d (%s)", ordinal, prop.name);
    if ((e = cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMalloc(&c->d_state, sizeof(step_state))) != cudaSuccess ||
        (e = cudaMalloc(&c->d_argmax, sizeof(int32_t) * 64)) != cudaSuccess ||
        (e = cudaMallocHost(&c->h_argmax, sizeof(int32_t) * 64)) != cudaSuccess ||
        (e = cudaMalloc(&c->counters, sizeof(unsigned) * 8192)) != cudaSuccess ||
        (e = cudaMalloc(&c->am_v, sizeof(float) * 64 * 32)) != cudaSuccess || (e = cudaMalloc(&c->am_i, sizeof(int) * 64 * 32)) != cudaSuccess ||
        (e = cudaMalloc(&c->am_ctr, sizeof(unsigned) * 64)) != cudaSuccess || (e = cudaMemset(c->am_ctr, 0, sizeof(unsigned) * 64)) != cudaSuccess ||
        (e = cudaMemset(c->counters, 0, sizeof(unsigned) * 8192)) != cudaSuccess ||
        (e = cudaMemset(c->d_state, 0, sizeof(step_state))) != cudaSuccess) {
        cudaGetLastError();
        bs_fail(err, "initialising CUDA device %d (%s): %s", ordinal, prop.name, cudaGetErrorString(e));
        free(c); free(be);
        return NULL;
    }
    c->n_counters = 8192;
    cudaDeviceSynchronize();
    // Workspaces sized for 64-row calls of large models, so graph recording never has to grow them.
    c->ws_bytes = 64u << 20; c->att_ws_bytes = 64u << 20;
    if ((e = cudaMalloc(&c->ws, c->ws_bytes)) != cudaSuccess || (e = cudaMalloc(&c->att_ws, c->att_ws_bytes)) != cudaSuccess) {
        cudaGetLastError();
        bs_fail(err, "initialising CUDA device %d: out of memory for workspaces", ordinal);
        free(c); free(be);
        return NULL;
    }
    be->name = "cuda"; be->impl = c;
    be->alloc = cu_alloc; be->free = cu_free; be->upload = cu_upload; be->download = cu_download; be->copy = cu_copy;
    be->sync = cu_sync; be->weight = cu_weight; be->weight_lossy = cu_weight_lossy;
    be->matmul = cu_matmul; be->rmsnorm = cu_rmsnorm; be->head_norm_rope = cu_head_norm_rope; be->head_norm_rope_multi = cu_head_norm_rope_multi; be->attention = cu_attention;
    be->attention_spans = cu_attention_spans; be->mem_free = cu_mem_free;
    be->swiglu = cu_swiglu; be->add = cu_add; be->embed = cu_embed; be->copy_rows = cu_copy_rows; be->argmax = cu_argmax;
    be->gelu_mul = cu_gelu_mul; be->scale = cu_scale; be->softcap = cu_softcap;
    be->argmax_to = cu_argmax_to; be->embed_from = cu_embed_from; be->scatter_cols = cu_scatter_cols; be->hadamard_rows = cu_hadamard_rows;
    be->dyn_conv = cu_dyn_conv; be->topk = cu_topk;
    be->sample_rows = cu_sample_rows; be->sample_rows_to = cu_sample_rows_to; be->accept_sampled = cu_accept_sampled; be->accept_sampled_to = cu_accept_sampled_to;
    be->store_kv = cu_store_kv; be->matmul_multi = cu_matmul_multi; be->swiglu_matmul = cu_swiglu_matmul;
    if (fuse_enabled()) {
        be->qk_norm_rope_store = cu_qk_norm_rope_store; be->qkv_norm_rope_store = cu_qkv_norm_rope_store;
        be->qk_norm_rope_store_spans = cu_qk_norm_rope_store_spans;
    }
    be->record_begin = cu_record_begin; be->record_end = cu_record_end; be->replay = cu_replay; be->record_free = cu_record_free;
    be->destroy = cu_destroy;
    if (bs_tuning_get()->cuda_profile && !prof_active()) prof_install(be);
    return be;
}
