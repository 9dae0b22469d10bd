// Byte-level BPE training: writes a Hugging Face tokenizer.json (NFC, Qwen-style Split regex then
// ByteLevel, special tokens as added tokens) that `tokenizers` and blockspec encode identically.
#pragma once
#include <stddef.h>
#include "util/err.h"

typedef struct {
    size_t vocab_size;          // total, special tokens and the 256 byte tokens included
    const char **special; size_t n_special;
    long min_frequency;         // a pair seen fewer times is never merged (default 2)
    // Optional progress lines (every 1000 merges, and a summary), handed to the caller, which decides where
    // they go (the library never prints): NULL for none.
    void (*progress)(void *ctx, const char *line);
    void *progress_ctx;
} bs_bpe_train_opts;

// Trains on the concatenated texts and writes tokenizer.json to out_path.
int bs_bpe_train(const char *const *texts, const size_t *lens, size_t n_texts, const bs_bpe_train_opts *o,
                 const char *out_path, bs_err *err);
// Same, reading the corpus files.
int bs_bpe_train_files(const char *const *files, size_t n_files, const bs_bpe_train_opts *o, const char *out_path, bs_err *err);
// The Split regex of the written files (Qwen2/Qwen3's).
const char *bs_bpe_train_regex(void);
