// NaN/Inf weights: a checkpoint holding them loads and then produces garbage, so its float tensors are
// scanned once at load (a single streaming pass: ~0.1 s per GB; docs/reliability.md has the cost).
#pragma once
#include <stddef.h>
#include "io/safetensors.h"

// Number of NaN or Inf values in a BF16/F16/F32 tensor (0 for other dtypes); *first: index of the first.
size_t bs_tensor_count_nonfinite(const bs_tensor_info *t, size_t *first);
// Scans every float tensor of ck. Returns the number of tensors holding NaN/Inf and, when there are any,
// writes a message naming the first of them (and how many values) to msg[0..cap); the caller decides how
// to report it (the library never prints).
int bs_checkpoint_check_finite(const bs_checkpoint *ck, char *msg, size_t cap);
// The same for the checkpoint in a model or drafter folder (or file), opened only for the scan.
// Returns the number of tensors holding NaN/Inf, or -1 (err set) when the checkpoint does not open.
int bs_weights_check_path(const char *path, char *msg, size_t cap, bs_err *err);
