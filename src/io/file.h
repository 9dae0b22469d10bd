// Opening the files blockspec reads (checkpoints, configs, tokenizers, corpora): regular files only.
#pragma once
#include "util/err.h"

// Opens path read-only and returns the descriptor, or -1 with a message naming the file. A FIFO, device
// or folder is refused without blocking: open(2) on a FIFO with no writer would otherwise wait forever.
// *size (may be NULL) receives the file's size, the bound for anything sized from its contents.
int bs_open_regular(const char *path, size_t *size, bs_err *err);
