// MLX's hadamard_transform in fp32 (hadamard.h), the base matrices it hard-codes built from their
// constructions, and the R1 sign stream.
#include <math.h>
#include <string.h>
#include "backend/hadamard.h"

// ---- the base matrices ------------------------------------------------------------------------------------

// Legendre symbol of a modulo 5: 0, +1 on the quadratic residues {1, 4}, -1 otherwise.
static int legendre5(int a) {
    a = ((a % 5) + 5) % 5;
    return a == 0 ? 0 : (a == 1 || a == 4) ? 1 : -1;
}

// H_12, Paley's second construction for q = 5: the symmetric conference matrix C of order 6 (C[0][0] = 0,
// border +1, core C[a+1][b+1] = chi_5(a - b)) with every entry c replaced by the 2 x 2 block
// c [[1, 1], [1, -1]] and every diagonal zero by [[1, -1], [-1, -1]].
static void paley2_q5(int8_t *h) {
    int C[6][6];
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++) C[i][j] = i == j ? 0 : (i == 0 || j == 0) ? 1 : legendre5((i - 1) - (j - 1));
    static const int K[2][2] = { { 1, 1 }, { 1, -1 } }, D[2][2] = { { 1, -1 }, { -1, -1 } };
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++)
            for (int r = 0; r < 2; r++)
                for (int c = 0; c < 2; c++) h[(2 * i + r) * 12 + 2 * j + c] = (int8_t)(i == j ? D[r][c] : C[i][j] * K[r][c]);
}

// A Williamson array of order 4n from four symmetric circulants A, B, C, D of odd order n (first rows
// given by their halves: row[0] and row[j] = row[n - j] = half[j] for 1 <= j <= (n-1)/2):
//   [  A  B  C  D ]
//   [ -B  A -D  C ]
//   [ -C  D  A -B ]
//   [ -D -C  B  A ]
// It is Hadamard when A^2 + B^2 + C^2 + D^2 = 4n I (the quadruples below are Williamson's for n = 5 and 7).
static void williamson(int n, const int8_t half[4][4], int8_t *h) {
    static const int blk[4][4] = { { 0, 1, 2, 3 }, { 1, 0, 3, 2 }, { 2, 3, 0, 1 }, { 3, 2, 1, 0 } };
    static const int sgn[4][4] = { { 1, 1, 1, 1 }, { -1, 1, -1, 1 }, { -1, 1, 1, -1 }, { -1, -1, 1, 1 } };
    int8_t first[4][7];
    for (int w = 0; w < 4; w++)
        for (int j = 0; j < n; j++) first[w][j] = half[w][j <= n / 2 ? j : n - j];
    for (int br = 0; br < 4; br++)
        for (int bc = 0; bc < 4; bc++)
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++)
                    h[(br * n + i) * 4 * n + bc * n + j] = (int8_t)(sgn[br][bc] * first[blk[br][bc]][((j - i) % n + n) % n]);
}

int bs_hadamard_base(int m, int8_t *out) {
    // halves of the first rows of A, B, C, D: [a0, a1, a2(, a3)]
    static const int8_t w5[4][4] = { { 1, -1, -1 }, { 1, -1, -1 }, { 1, 1, -1 }, { 1, -1, 1 } };
    static const int8_t w7[4][4] = { { 1, -1, -1, -1 }, { 1, 1, -1, -1 }, { 1, -1, 1, -1 }, { 1, -1, -1, 1 } };
    switch (m) {
    case 1: out[0] = 1; return 0;
    case 12: paley2_q5(out); return 0;
    case 20: williamson(5, w5, out); return 0;
    case 28: williamson(7, w7, out); return 0;
    default: return -1;
    }
}

int bs_hadamard_init(bs_hadamard *t, int64_t n) {
    static const int ms[4] = { 1, 12, 20, 28 };
    memset(t, 0, sizeof *t);
    if (n < 1) return -1;
    for (int i = 0; i < 4; i++) {
        if (n % ms[i]) continue;
        int64_t p = n / ms[i];
        if (p & (p - 1)) continue;   // not a power of two
        t->n = n; t->m = ms[i]; t->p = p;
        t->scale = (float)(1.0 / sqrt((double)n));
        return bs_hadamard_base(t->m, t->h);
    }
    return -1;
}

// ---- the transform ------------------------------------------------------------------------------------------

// Natural-order Sylvester FWHT of one chunk of length p (a power of two), unscaled, in MLX's butterfly order.
static void fwht(float *x, int64_t p) {
    for (int64_t h = 1; h < p; h <<= 1)
        for (int64_t i = 0; i < p; i += 2 * h)
            for (int64_t j = i; j < i + h; j++) {
                float u = x[j], v = x[j + h];
                x[j] = u + v;
                x[j + h] = u - v;
            }
}

void bs_hadamard_row(const bs_hadamard *t, float *x, int transpose) {
    const int m = t->m;
    const int64_t p = t->p;
    for (int a = 0; a < m; a++) fwht(x + a * p, p);
    if (m == 1) {
        for (int64_t i = 0; i < p; i++) x[i] *= t->scale;
        return;
    }
    // Mix the chunks column by column: Y[a'][b] = sum_a H[a'][a] X[a][b] (transpose: H[a][a']), summed in the
    // order a = 0, 1, ... from zero, then scaled (MLX's order of operations for the m > 1 case).
    float col[BS_HADAMARD_MAX_M], out[BS_HADAMARD_MAX_M];
    for (int64_t b = 0; b < p; b++) {
        for (int a = 0; a < m; a++) col[a] = x[a * p + b];
        for (int r = 0; r < m; r++) {
            float s = 0;
            for (int a = 0; a < m; a++) {
                int8_t e = transpose ? t->h[a * m + r] : t->h[r * m + a];
                s = e > 0 ? s + col[a] : s - col[a];
            }
            out[r] = s;
        }
        for (int r = 0; r < m; r++) x[r * p + b] = out[r] * t->scale;
    }
}

// ---- the sign vector ----------------------------------------------------------------------------------------

void bs_r1_signs_from_seed(uint32_t seed, int64_t n, float *out) {
    const uint32_t golden = 0x9E3779B9u;
    uint32_t state = seed ^ golden;   // lane 0: seed ^ (golden * (lane + 1))
    for (int64_t i = 0; i < n; i++) {
        state += golden;
        uint32_t z = state;
        z = (z ^ (z >> 16)) * 0x21F0AAADu;
        z = (z ^ (z >> 15)) * 0x735A2D97u;
        z ^= z >> 15;
        out[i] = (z & 1u) == 0 ? 1.0f : -1.0f;
    }
}
