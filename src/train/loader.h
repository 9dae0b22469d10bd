// Training windows from a corpus (docs/training.md, "Corpus format"): each epoch visits the documents in a
// seeded random order, packed back to back into one token stream (documents end with the EOS token that
// `tokenize --corpus` appends, so the separator is in the data); windows of seq_len tokens are cut from
// the stream, each starting on the previous window's last token, so every adjacent token pair is a
// (context, label) pair exactly once per epoch. The stream runs on into the next epoch's order.
// The position (epoch, document, offset) is the whole state: the order of an epoch is a function of
// (seed, epoch), so a resumed loader continues exactly.
#pragma once
#include <stdint.h>
#include "train/corpus.h"
#include "train/task.h"

typedef struct { int64_t epoch, doc, off; } bs_loader_pos;   // doc: index into the epoch's order

typedef struct {
    const bs_corpus *c;          // not owned
    int seq_len;
    uint64_t seed;
    int shuffle;                 // 0: documents in file order (held-out evaluation)
    bs_loader_pos pos;
    int64_t *order, order_epoch; // document order of order_epoch
    int32_t *ids; uint8_t *mask; // the current window
} bs_loader;

int bs_loader_init(bs_loader *l, const bs_corpus *c, int seq_len, uint64_t seed, int shuffle, bs_err *err);
// The next window (valid until the next call); seq->loss_mask is NULL when the corpus has no mask.
void bs_loader_next(bs_loader *l, bs_train_seq *seq);
// Moves to a saved position; refuses one that does not fit the corpus.
int bs_loader_seek(bs_loader *l, bs_loader_pos pos, bs_err *err);
void bs_loader_free(bs_loader *l);
