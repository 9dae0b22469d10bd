// A toy training task for the trainer's tests: a bigram language model (embedding [V, D], a frozen
// per-feature gain [D], head [D, V] + bias [V]) with a softmax cross-entropy over next tokens. loss_grad
// keeps each label position with probability 3/4, drawn from the task's rng, so a resume that lost the
// rng state would diverge. Deterministic: the same inputs and rng give bit-identical gradients.
#pragma once
#include "train/task.h"

int toy_task_new(bs_train_task **out, int vocab, int dim, uint64_t init_seed, bs_err *err);
