// A draft vocabulary (FR-Spec; shared/docs/dflash2.md section 2): the token ids a drafter may propose.
// The drafter's LM head then reads only these rows of the target's head (e.g. 32,768 of 151,936: a
// fifth of the bytes), and every other token gets logit -inf in the draft. Verification still uses the
// target's full head, so the output is unchanged (greedy: identical; sampling: distributed as the
// target); only how often drafts are accepted can move.
//
// On disk: a JSON list of token ids ([0, 1, 5, ...], vLLM's format), or a file of little-endian uint32
// ids (any other content). Ids are sorted and deduplicated on load, and the end-of-sequence ids are
// always added (a draft must be able to propose the end).
#pragma once
#include <stdint.h>
#include "util/err.h"

typedef struct bs_draft_vocab {
    int32_t *ids;   // sorted, unique, each in [0, vocab_size)
    int n;
} bs_draft_vocab;

// Loads `path` for a model of vocab_size tokens and adds always[0..n_always) (ids outside
// [0, vocab_size) there are ignored). Errors name the file and, for a bad id, its position.
int  bs_draft_vocab_load(bs_draft_vocab *dv, const char *path, int vocab_size, const int *always, int n_always,
                         bs_err *err);
// Parses the same formats from memory (name is used in messages).
int  bs_draft_vocab_parse(bs_draft_vocab *dv, const char *data, size_t len, const char *name, int vocab_size,
                          const int *always, int n_always, bs_err *err);
// The `size` most frequent ids of counts[0..vocab_size) (ties: the smaller id first; ids never seen are
// not taken) plus always[]: what `blockspec draft-vocab` writes.
int  bs_draft_vocab_from_counts(bs_draft_vocab *dv, const uint64_t *counts, int vocab_size, int size,
                                const int *always, int n_always, bs_err *err);
// Writes a JSON list.
int  bs_draft_vocab_save(const bs_draft_vocab *dv, const char *path, bs_err *err);
void bs_draft_vocab_free(bs_draft_vocab *dv);
