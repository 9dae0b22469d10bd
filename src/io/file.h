// Opening the files blockspec reads (checkpoints, configs, tokenizers, corpora): regular files only.
#pragma once
#include "util/err.h"

// Opens path read-only and returns the descriptor, or -1 with a message naming the file. A FIFO, device
// or folder is refused without blocking: open(2) on a FIFO with no writer would otherwise wait forever.
// *size (may be NULL) receives the file's size, the bound for anything sized from its contents.
int bs_open_regular(const char *path, size_t *size, bs_err *err);
// Copies every regular file of a model folder in_dir into out_dir except its weights (*.safetensors, their
// index) and config.json: the tokenizer, generation config, calibration, ... (a folder written from it by
// `quantize` or `rotate` gets them unchanged). The R1 fold's sidecar (io/r1_basis.h) is not weights: it is copied.
int bs_copy_model_extras(const char *in_dir, const char *out_dir, bs_err *err);
