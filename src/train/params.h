// Trainable tensors: the one contract the training pieces share. A model builds a parameter set (named
// fp32 tensors, each with a gradient buffer); the loss functions accumulate into the gradients, the
// optimiser updates the weights, checkpoints save and restore them by name, exports convert them to the
// dtype the loader reads. Names are the tensors' checkpoint names ("layers.0.mlp.up_proj.weight").
#pragma once
#include <stdint.h>
#include "util/err.h"

#define BS_PARAM_MAX_DIMS 4
#define BS_PARAM_NAME_MAX 128

typedef struct {
    char name[BS_PARAM_NAME_MAX];
    int n_dims;
    int64_t shape[BS_PARAM_MAX_DIMS];
    int64_t n;          // elements (product of shape)
    float *w;           // fp32 master weights, owned by the set
    float *g;           // gradient, same size; NULL when the tensor is frozen
    int trainable;      // 0: frozen (a drafter's embedding and LM head: the target's)
    int decay;          // AdamW weight decay applies (matrices; not norm gains or biases)
} bs_param;

typedef struct {
    bs_param *p;
    int n, cap;
} bs_param_set;

// Adds a zero-filled tensor (and, if trainable, its zeroed gradient); returns its index or -1.
int bs_param_add(bs_param_set *s, const char *name, int n_dims, const int64_t *shape, int trainable, int decay,
                 bs_err *err);
// Finds a tensor by name (NULL if absent).
bs_param *bs_param_find(const bs_param_set *s, const char *name);
void bs_param_zero_grad(bs_param_set *s);
// Elements over all tensors (trainable only when trainable_only).
int64_t bs_param_count(const bs_param_set *s, int trainable_only);
void bs_param_set_free(bs_param_set *s);
