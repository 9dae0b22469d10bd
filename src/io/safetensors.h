// Safetensors checkpoints: one file or sharded (model.safetensors.index.json), memory-mapped, validated.
// Tensors are used in place from the mapping (no copy on the CPU).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "backend/backend.h"

#define BS_MAX_DIMS 8

typedef struct bs_tensor_info {
    char *name;
    char dtype_name[16];     // as stored ("BF16", "F32", "I8", ...)
    int dtype_ok;            // 1 if dtype is one blockspec computes with (BF16, F16, F32)
    bs_dtype dtype;          // valid when dtype_ok
    int n_dims;
    int64_t shape[BS_MAX_DIMS];
    const void *data;        // inside the file mapping
    size_t nbytes;
    const char *file;        // path of the file holding it
} bs_tensor_info;

typedef struct bs_checkpoint {
    char *path;              // directory or file it was opened from
    int n_files;
    struct { char *path; void *map; size_t size; } *files;
    int n_tensors;
    bs_tensor_info *tensors; // sorted by name
} bs_checkpoint;

// path: a directory (model.safetensors.index.json, else model.safetensors, else the one *.safetensors)
// or a .safetensors file.
int bs_checkpoint_open(bs_checkpoint **out, const char *path, bs_err *err);
// The same over a caller-owned buffer holding one safetensors file (tests, fuzzing).
int bs_checkpoint_open_memory(bs_checkpoint **out, const void *buf, size_t len, const char *name, bs_err *err);
void bs_checkpoint_close(bs_checkpoint *ck);
const bs_tensor_info *bs_checkpoint_find(const bs_checkpoint *ck, const char *name);
// A weight view checked against the shape the config implies: rows x cols for a matrix, or a 1-D
// tensor of cols elements when rows == 0. Errors name the tensor, the expected and the stored shape.
int bs_checkpoint_mat(const bs_checkpoint *ck, const char *name, int64_t rows, int64_t cols, bs_mat *out, bs_err *err);

// A Linear weight, embedding or LM head ([rows][cols], `name` ending in ".weight"): dense as bs_checkpoint_mat,
// or MLX affine codes when "<module>.scales" sits beside it (affine_load.c). The quantised form is checked
// against qc (config.json's "quantization" block; NULL = none) and against the shape: codes U32
// [rows, cols*bits/32], scales and biases [rows, cols/group] of one float dtype, group dividing cols.
struct bs_quant_config;
int bs_checkpoint_weight(const bs_checkpoint *ck, const struct bs_quant_config *qc, const char *name, int64_t rows, int64_t cols,
                         bs_mat *out, bs_err *err);

// Writing (dump, make-random, training): collect tensors, then write one file.
typedef struct bs_st_writer bs_st_writer;
bs_st_writer *bs_st_writer_new(void);
// dtype_name: "F32", "BF16", "F16", "I32", "I64"; data is copied only at write time (must stay valid).
int bs_st_writer_add(bs_st_writer *w, const char *name, const char *dtype_name, int n_dims, const int64_t *shape,
                     const void *data, bs_err *err);
int bs_st_writer_write(bs_st_writer *w, const char *path, bs_err *err);
void bs_st_writer_free(bs_st_writer *w);
