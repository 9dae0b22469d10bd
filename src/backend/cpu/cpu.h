// CPU backend internals shared by the reference ops and the fast kernels.
#pragma once
#include "backend/backend.h"

void bs_cpu_fill_reference(bs_backend *be);
// Replaces ops with the fastest kernels this CPU supports (runtime dispatch: AVX-512 BF16, AVX2/FMA, scalar).
void bs_cpu_install_fast(bs_backend *be);
void bs_cpu_rmsnorm_row(float *y, const float *x, int dim, const bs_mat *w, float eps);
void bs_cpu_rope_row(float *x, int hd, int pos, float theta);
