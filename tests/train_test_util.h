// Helpers for the training tests: weight rescaling and a finite-difference check of a whole training task.
#pragma once
#include <stddef.h>
#include "train/task.h"

// Multiplies every trainable 2-D tensor by `factor` and spreads the 1-D ones (norm gains, biases) around their values,
// so a tiny model's activations and gradients are O(1) rather than at init's 0.02 scale.
void tt_scale_weights(bs_train_task *t, float factor);
// loss_grad's gradient of every trainable tensor vs central differences of loss_eval at `per_tensor`
// coordinates (the largest |g| first, then spread): |fd - g| <= tol * max|g| + 2e-4. The RNG is reseeded
// with `seed` before every evaluation so a drafter draws the same anchors. 0 = pass; else msg says where.
int tt_fd_check_task(bs_train_task *t, const bs_train_seq *seq, uint64_t seed, int per_tensor, double tol, char *msg, size_t cap);
