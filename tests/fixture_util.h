// Reading reference vectors (safetensors files of F32/I32 tensors) in tests.
#pragma once
#include <stdint.h>
#include "io/safetensors.h"

// The tensor's data if it exists with this dtype ("F32"/"I32") and element count (count < 0: any); else NULL.
const void *fx_tensor(const bs_checkpoint *ck, const char *name, const char *dtype, long count, long *n_out);
// max |a - b| over n floats.
double fx_max_abs_diff(const float *a, const float *b, long n);
