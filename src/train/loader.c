// Shuffled, packed training windows (loader.h).
#include <stdlib.h>
#include <string.h>
#include "train/loader.h"
#include "util/rng.h"

// The document order of an epoch: Fisher-Yates with a generator seeded from (seed, epoch) only.
static void make_order(bs_loader *l, int64_t epoch) {
    int64_t n = l->c->n_docs;
    for (int64_t i = 0; i < n; i++) l->order[i] = i;
    if (l->shuffle) {
        bs_rng r;
        uint64_t s = l->seed ^ 0x5851f42d4c957f2dull;
        bs_rng_seed(&r, bs_splitmix64(&s) + (uint64_t)epoch);
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)(bs_rng_u64(&r) % (uint64_t)(i + 1));
            int64_t t = l->order[i]; l->order[i] = l->order[j]; l->order[j] = t;
        }
    }
    l->order_epoch = epoch;
}

int bs_loader_init(bs_loader *l, const bs_corpus *c, int seq_len, uint64_t seed, int shuffle, bs_err *err) {
    memset(l, 0, sizeof *l);
    if (seq_len < 2) return bs_fail(err, "sequence length %d: at least 2 tokens (one context, one label)", seq_len);
    if (c->n_tokens < seq_len)
        return bs_fail(err, "%s holds %lld tokens, fewer than one sequence of %d", c->path, (long long)c->n_tokens, seq_len);
    l->c = c; l->seq_len = seq_len; l->seed = seed; l->shuffle = shuffle;
    l->order = malloc(sizeof *l->order * c->n_docs);
    l->ids = malloc(sizeof *l->ids * seq_len);
    l->mask = c->mask ? malloc(seq_len) : NULL;
    if (!l->order || !l->ids || (c->mask && !l->mask)) { bs_loader_free(l); return bs_fail(err, "out of memory for the data loader"); }
    make_order(l, 0);
    return 0;
}

void bs_loader_free(bs_loader *l) {
    free(l->order); free(l->ids); free(l->mask);
    memset(l, 0, sizeof *l);
}

int bs_loader_seek(bs_loader *l, bs_loader_pos pos, bs_err *err) {
    if (pos.epoch < 0 || pos.doc < 0 || pos.doc >= l->c->n_docs || pos.off < 0)
        return bs_fail(err, "data position (epoch %lld, document %lld, offset %lld) does not fit %s (%lld documents)",
                       (long long)pos.epoch, (long long)pos.doc, (long long)pos.off, l->c->path, (long long)l->c->n_docs);
    make_order(l, pos.epoch);
    int64_t d = l->order[pos.doc];
    if (pos.off >= (int64_t)(l->c->doc_off[d + 1] - l->c->doc_off[d]))
        return bs_fail(err, "data position: offset %lld is past the end of document %lld of %s", (long long)pos.off, (long long)d, l->c->path);
    l->pos = pos;
    return 0;
}

// Copies n tokens from *p onwards into the window at dst_off (when copy), advancing *p.
static void walk(bs_loader *l, bs_loader_pos *p, int n, int dst_off, int copy) {
    const bs_corpus *c = l->c;
    while (n > 0) {
        if (p->epoch != l->order_epoch) make_order(l, p->epoch);
        int64_t d = l->order[p->doc], start = (int64_t)c->doc_off[d], len = (int64_t)c->doc_off[d + 1] - start;
        int64_t take = len - p->off < n ? len - p->off : n;
        if (copy) {
            memcpy(l->ids + dst_off, c->ids + start + p->off, sizeof(int32_t) * take);
            if (l->mask) memcpy(l->mask + dst_off, c->mask + start + p->off, take);
        }
        dst_off += (int)take; n -= (int)take; p->off += take;
        if (p->off == len) {
            p->off = 0;
            if (++p->doc == c->n_docs) { p->doc = 0; p->epoch++; }
        }
    }
}

void bs_loader_next(bs_loader *l, bs_train_seq *seq) {
    bs_loader_pos p = l->pos;
    walk(l, &p, l->seq_len - 1, 0, 1);
    l->pos = p;                       // the next window starts on this one's last token
    walk(l, &p, 1, l->seq_len - 1, 1);
    seq->ids = l->ids; seq->loss_mask = l->mask; seq->n = l->seq_len;
}
