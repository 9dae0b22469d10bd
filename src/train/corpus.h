// Tokenised corpus: one file of token ids (int32), document boundaries and an optional per-token loss
// mask, memory-mapped and validated on open (docs/training.md, "Corpus format"). `blockspec tokenize
// --corpus` writes it; the training loader (loader.h) reads windows from it.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "util/err.h"

#define BS_CORPUS_MAGIC "BSCORPUS"
#define BS_CORPUS_VERSION 1
#define BS_CORPUS_HEADER_BYTES 128
#define BS_CORPUS_FLAG_MASK 1u

typedef struct {
    char *path;
    void *map; size_t size;
    int64_t vocab_size;          // the tokenizer's vocabulary: every id is below it
    int64_t n_tokens, n_docs;
    uint64_t tokenizer_hash;     // FNV-1a 64 of the tokenizer.json bytes the corpus was made with
    const int32_t *ids;          // [n_tokens]
    const uint64_t *doc_off;     // [n_docs + 1] token offsets: document d is ids[doc_off[d] .. doc_off[d+1])
    const uint8_t *mask;         // [n_tokens] 1 where a token may be a label; NULL: every token
} bs_corpus;

// Maps and validates the whole file (sizes, offsets, ids < vocab_size, mask values); errors name the file.
int bs_corpus_open(bs_corpus **out, const char *path, bs_err *err);
void bs_corpus_close(bs_corpus *c);

// Writing: documents are appended one at a time; finish() writes a temporary file, syncs it and renames
// it to path, so a crash never leaves a half-written corpus under that name.
typedef struct bs_corpus_writer bs_corpus_writer;
int bs_corpus_writer_open(bs_corpus_writer **out, const char *path, int64_t vocab_size, uint64_t tokenizer_hash,
                          int with_mask, bs_err *err);
// mask may be NULL (all ones) even when the corpus has a mask. Empty documents are skipped.
int bs_corpus_writer_add(bs_corpus_writer *w, const int32_t *ids, const uint8_t *mask, int64_t n, bs_err *err);
// Writes and frees the writer (also on failure). Refuses an empty corpus.
int bs_corpus_writer_finish(bs_corpus_writer *w, bs_err *err);
// Frees the writer and removes its temporary file (nothing is written under path).
void bs_corpus_writer_abort(bs_corpus_writer *w);
int64_t bs_corpus_writer_tokens(const bs_corpus_writer *w);
int64_t bs_corpus_writer_docs(const bs_corpus_writer *w);

// FNV-1a 64 of bytes: the tokenizer identity stored in corpora (not a cryptographic hash).
uint64_t bs_fnv1a64(const void *data, size_t n);
// Hash of tokenizer.json (path_or_dir: the file or a folder holding it).
int bs_tokenizer_file_hash(const char *path_or_dir, uint64_t *hash, bs_err *err);
// Refuses a corpus made with another tokenizer: hash and vocabulary size must match (what = the
// tokenizer's path, for the message).
int bs_corpus_check_tokenizer(const bs_corpus *c, uint64_t hash, int64_t vocab_size, const char *what, bs_err *err);
