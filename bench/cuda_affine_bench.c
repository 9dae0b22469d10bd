// cuda_affine_bench [--copies 4] [--reps 10] [--group 64]
// The CUDA matmuls of one Qwen3-8B-shaped layer (q/k/v in one launch, o_proj, gate/up in one launch, the
// down projection with SwiGLU fused, as qwen3.c issues them) and of its LM head, with MLX affine 4-bit and
// 8-bit weights (src/backend/cuda/cuda_affine.cu) and with BF16 weights (the tiled GEMM) for comparison,
// at 1 to 512 activation rows. For each: microseconds per launch and the weights' bytes (codes + scales +
// biases as stored; BF16: 2 per weight) per second, against the device-to-device copy bandwidth measured
// first (the roofline's ceiling: bytes read + written). Each layer matrix exists in `copies` copies
// (different addresses, > L2 together) used in turn, so every launch streams its weights from HBM.
// "layer" is the four launches back to back; "GEMMs of a decode step" is 36 layers + the LM head, the
// time a decode step spends in its weight matmuls (no attention, norms or launch gaps between them).
// Lines `key value` for scripts, then a table.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/backend.h"
#include "backend/affine.h"
#include "util/timer.h"

enum { HID = 4096, INTER = 12288, QD = 4096, KVD = 1024, VOCAB = 151936, LAYERS = 36, MAXN = 512 };

// A host weight of the given format: random codes and small scales/biases (affine), or a bf16 pattern.
static bs_mat host_weight(int rows, int cols, int bits, int group) {
    bs_mat h = { 0 };
    h.rows = rows; h.cols = cols; h.dtype = BS_BF16;
    uint64_t s = 0x9E3779B97F4A7C15ull ^ (uint64_t)rows * 131 ^ (uint64_t)cols;
    if (!bits) {
        const size_t n = (size_t)rows * cols, P = 65536;   // a 64 Ki-element pattern, repeated
        uint16_t *w = malloc(sizeof(uint16_t) * n);
        for (size_t i = 0; i < P && i < n; i++) w[i] = bs_f32_to_bf16((float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f);
        for (size_t i = P; i < n; i += P) memcpy(w + i, w, sizeof(uint16_t) * (n - i < P ? n - i : P));
        h.data = w;
        return h;
    }
    h.format = BS_WFMT_AFFINE; h.bits = bits; h.group = group;
    size_t words = (size_t)rows * bs_affine_words(cols, bits), G = (size_t)rows * (cols / group);
    uint32_t *c = malloc(sizeof(uint32_t) * words);
    uint16_t *sc = malloc(2 * G), *bi = malloc(2 * G);
    for (size_t i = 0; i < words; i++) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; c[i] = (uint32_t)s; }
    for (size_t i = 0; i < G; i++) { sc[i] = bs_f32_to_bf16(0.01f + (float)(i % 7) * 1e-3f); bi[i] = bs_f32_to_bf16(-0.05f - (float)(i % 5) * 1e-2f); }
    h.data = c; h.scales = sc; h.biases = bi;
    return h;
}
static void host_free(bs_mat *h) { free((void *)h->data); free((void *)h->scales); free((void *)h->biases); }

typedef struct { bs_mat q, k, v, o, gate, up, down; } layer_w;

static bs_backend *be;
static float *X, *Y[3], *GATE, *UP;   // device activations, MAXN rows of the widest shape

// One launch of op `op` (0 q/k/v, 1 o_proj, 2 gate/up, 3 down with SwiGLU, 4 LM head) on n rows.
static void run_op(int op, const layer_w *L, const bs_mat *head, int n) {
    if (op == 0) { const bs_mat *w[3] = { &L->q, &L->k, &L->v }; bs_matmul_multi(be, 3, Y, X, n, w, 0); }
    else if (op == 1) be->matmul(be, Y[0], X, n, &L->o, 1);
    else if (op == 2) { const bs_mat *w[2] = { &L->gate, &L->up }; float *y[2] = { GATE, UP }; bs_matmul_multi(be, 2, y, X, n, w, 0); }
    else if (op == 3) bs_swiglu_matmul(be, Y[0], GATE, UP, n, &L->down, 1);
    else be->matmul(be, Y[1], X, n, head, 0);
}
static double op_bytes(int op, const layer_w *L, const bs_mat *head) {
    if (op == 0) return (double)bs_mat_bytes(&L->q) + bs_mat_bytes(&L->k) + bs_mat_bytes(&L->v);
    if (op == 1) return (double)bs_mat_bytes(&L->o);
    if (op == 2) return (double)bs_mat_bytes(&L->gate) + bs_mat_bytes(&L->up);
    if (op == 3) return (double)bs_mat_bytes(&L->down);
    return (double)bs_mat_bytes(head);
}
static const char *op_name[] = { "qkv", "o_proj", "gate_up", "down_swiglu", "lm_head", "layer" };

int main(int argc, char **argv) {
    int copies = 4, reps = 10, group = 64;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--copies") && i + 1 < argc) copies = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--group") && i + 1 < argc) group = atoi(argv[++i]);
        else { fprintf(stderr, "usage: cuda_affine_bench [--copies 4] [--reps 10] [--group 64]\n"); return 2; }
    }
    if (copies < 1 || copies > 16 || reps < 1 || (group != 32 && group != 64 && group != 128)) { fprintf(stderr, "cuda_affine_bench: bad arguments\n"); return 2; }
    bs_err err = { 0 };
    be = bs_backend_cuda(0, &err);
    if (!be) { fprintf(stderr, "cuda_affine_bench: %s\n", err.msg); return 1; }
    // device-to-device copy bandwidth (bytes read + written), as backend_bench measures it
    size_t cb = (size_t)1 << 30;
    void *ba = be->alloc(be, cb, &err), *bb = be->alloc(be, cb, &err);
    double bw = 0;
    if (ba && bb) {
        for (int r = 0; r < 2; r++) be->copy(be, bb, ba, cb);
        be->sync(be);
        double t0 = bs_now();
        for (int k = 0; k < 20; k++) be->copy(be, (k & 1) ? ba : bb, (k & 1) ? bb : ba, cb);
        be->sync(be);
        bw = 2.0 * cb * 20 / (bs_now() - t0);
    }
    if (ba) be->free(be, ba);
    if (bb) be->free(be, bb);
    printf("copy_bw_GBps %.1f\n", bw / 1e9);
    X = be->alloc(be, sizeof(float) * (size_t)MAXN * INTER, &err);
    for (int i = 0; i < 2; i++) Y[i] = be->alloc(be, sizeof(float) * (size_t)MAXN * (i ? VOCAB : QD), &err);
    Y[2] = be->alloc(be, sizeof(float) * (size_t)MAXN * KVD, &err);
    GATE = be->alloc(be, sizeof(float) * (size_t)MAXN * INTER, &err);
    UP = be->alloc(be, sizeof(float) * (size_t)MAXN * INTER, &err);
    if (!X || !Y[0] || !Y[1] || !Y[2] || !GATE || !UP) { fprintf(stderr, "cuda_affine_bench: %s\n", err.msg); return 1; }
    {   // activations of a realistic size (the GEMM's speed does not depend on them)
        float *h = malloc(sizeof(float) * (size_t)MAXN * INTER);
        for (size_t i = 0; i < (size_t)MAXN * INTER; i++) h[i] = (float)((i * 2246822519u) % 1000) / 1000.0f - 0.5f;
        be->upload(be, X, h, sizeof(float) * (size_t)MAXN * INTER);
        be->upload(be, GATE, h, sizeof(float) * (size_t)MAXN * INTER);
        be->upload(be, UP, h, sizeof(float) * (size_t)MAXN * INTER);
        free(h);
    }
    const int rows[] = { 1, 2, 4, 8, 16, 17, 32, 64, 512 };
    const int NR = (int)(sizeof rows / sizeof rows[0]);
    const int fmt_bits[3] = { 4, 8, 0 };
    const char *fmt_name[3] = { "affine4", "affine8", "bf16" };
    static double us[3][6][16];
    for (int f = 0; f < 3; f++) {
        const int bits = fmt_bits[f];
        const int shapes[7][2] = { { QD, HID }, { KVD, HID }, { KVD, HID }, { HID, QD }, { INTER, HID }, { INTER, HID }, { HID, INTER } };
        bs_mat host[7], hh;
        for (int i = 0; i < 7; i++) host[i] = host_weight(shapes[i][0], shapes[i][1], bits, group);
        hh = host_weight(VOCAB, HID, bits, group);
        layer_w *L = calloc((size_t)copies, sizeof(layer_w));
        bs_mat head;
        double t0 = bs_now();
        for (int cpy = 0; cpy < copies; cpy++) {
            bs_mat *dst[7] = { &L[cpy].q, &L[cpy].k, &L[cpy].v, &L[cpy].o, &L[cpy].gate, &L[cpy].up, &L[cpy].down };
            for (int i = 0; i < 7; i++)
                if (be->weight(be, dst[i], &host[i], &err)) { fprintf(stderr, "cuda_affine_bench: %s\n", err.msg); return 1; }
        }
        if (be->weight(be, &head, &hh, &err)) { fprintf(stderr, "cuda_affine_bench: %s\n", err.msg); return 1; }
        printf("%s_upload_s %.2f\n", fmt_name[f], bs_now() - t0);
        for (int i = 0; i < 7; i++) host_free(&host[i]);
        host_free(&hh);
        for (int ri = 0; ri < NR; ri++) {
            const int n = rows[ri];
            for (int op = 0; op < 6; op++) {
                if (op == 4 && n > 64) { us[f][op][ri] = 0; continue; }   // (the LM head at 512 rows: prefill only needs the last)
                const int R = op == 4 ? reps : reps * copies, per = op == 5 ? 4 : 1;
                for (int w = 0; w < 2; w++)
                    for (int p = 0; p < per; p++) run_op(op == 5 ? p : op, &L[w % copies], &head, n);
                be->sync(be);
                double s = bs_now();
                for (int r = 0; r < R; r++)
                    for (int p = 0; p < per; p++) run_op(op == 5 ? p : op, &L[r % copies], &head, n);
                be->sync(be);
                us[f][op][ri] = (bs_now() - s) / R * 1e6;
                double bytes = op == 5 ? op_bytes(0, L, &head) + op_bytes(1, L, &head) + op_bytes(2, L, &head) + op_bytes(3, L, &head)
                                       : op_bytes(op, L, &head);
                printf("%s_%s_rows%d_us %.2f GBps %.1f copy_pct %.1f\n", fmt_name[f], op_name[op], n, us[f][op][ri], bytes / us[f][op][ri] / 1e3,
                       100 * bytes / us[f][op][ri] / 1e3 / (bw / 1e9));
            }
            if (bs_backend_check(be, &err)) { fprintf(stderr, "cuda_affine_bench: %s\n", err.msg); return 1; }
        }
        free(L);
        be->destroy(be);   // frees this format's weights; the next format gets a fresh backend
        be = bs_backend_cuda(0, &err);
        if (!be) { fprintf(stderr, "cuda_affine_bench: %s\n", err.msg); return 1; }
        X = be->alloc(be, sizeof(float) * (size_t)MAXN * INTER, &err);
        for (int i = 0; i < 2; i++) Y[i] = be->alloc(be, sizeof(float) * (size_t)MAXN * (i ? VOCAB : QD), &err);
        Y[2] = be->alloc(be, sizeof(float) * (size_t)MAXN * KVD, &err);
        GATE = be->alloc(be, sizeof(float) * (size_t)MAXN * INTER, &err);
        UP = be->alloc(be, sizeof(float) * (size_t)MAXN * INTER, &err);
        if (!X || !Y[0] || !Y[1] || !Y[2] || !GATE || !UP) { fprintf(stderr, "cuda_affine_bench: %s\n", err.msg); return 1; }
    }
    // the table
    printf("\ncopy bandwidth (read + write): %.0f GB/s; weights per layer: affine 4-bit %.1f MB, 8-bit %.1f MB, BF16 %.1f MB (group %d, BF16 scales)\n\n",
           bw / 1e9, (double)(HID * (3 * (double)HID + 2.0 * KVD + 3.0 * INTER) * (0.5 + 4.0 / group)) / 1e6,
           (double)(HID * (3 * (double)HID + 2.0 * KVD + 3.0 * INTER) * (1.0 + 4.0 / group)) / 1e6, (double)(HID * (3 * (double)HID + 2.0 * KVD + 3.0 * INTER) * 2) / 1e6, group);
    printf("| rows | format | q/k/v us | o_proj us | gate/up us | down+SwiGLU us | LM head us | layer us (GB/s, %% of copy) | GEMMs of a decode step (36 layers + head) |\n|---|---|---|---|---|---|---|---|---|\n");
    for (int ri = 0; ri < NR; ri++)
        for (int f = 0; f < 3; f++) {
            const double lb = HID * (3 * (double)HID + 2.0 * KVD + 3.0 * INTER) * (fmt_bits[f] ? fmt_bits[f] / 8.0 + 4.0 / group : 2.0);
            const double gbps = lb / us[f][5][ri] / 1e3;
            char head_s[32] = "-", step_s[48] = "-";
            if (us[f][4][ri] > 0) {
                snprintf(head_s, sizeof head_s, "%.1f", us[f][4][ri]);
                const double step = LAYERS * us[f][5][ri] + us[f][4][ri];
                snprintf(step_s, sizeof step_s, "%.3f ms (%.0f /s)", step / 1e3, 1e6 / step);
            }
            printf("| %d | %s | %.1f | %.1f | %.1f | %.1f | %s | %.1f (%.0f GB/s, %.0f%%) | %s |\n", rows[ri], fmt_name[f], us[f][0][ri], us[f][1][ri], us[f][2][ri],
                   us[f][3][ri], head_s, us[f][5][ri], gbps, 100 * gbps / (bw / 1e9), step_s);
        }
    be->destroy(be);
    return 0;
}
