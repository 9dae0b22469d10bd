// The drafter interface the speculative loop drives. A drafter reads the target's taps of committed
// rows ("context") and proposes a block of draft tokens after an anchor token.
// Implementations: src/model/dflash.c (z-lab DFlash, DeepSpec DFlash/DSpark), test drafters in tests/.
#pragma once
#include <stdint.h>
#include "backend/backend.h"
#include "spec/sampler.h"

#define BS_MAX_DRAFT 64

typedef struct bs_draft {
    int n;                          // drafted tokens d_1..d_n (n <= max_n asked for)
    int32_t tokens[BS_MAX_DRAFT];
    // Processed draft distributions q_1..q_n, backend memory [n][vocab], owned by the drafter and valid
    // until its next call. q_k is the distribution d_k was actually drawn from (for DSpark: the Markov
    // step given the drafted prefix), processed with the same bs_sampling as the target.
    // NULL when sampling is greedy (q is then one-hot at d_k).
    const float *q;
    int has_conf;                   // 1 if conf[] holds c_k = P(d_k survives | d_1..d_{k-1} survived)
    float conf[BS_MAX_DRAFT];
    // propose_on_device only: non-NULL when d_1..d_n were left in backend memory (int32, owned by the
    // drafter, valid until its next call) and tokens[] was not filled.
    const int32_t *dev_tokens;
} bs_draft;

// One sequence's drafter state: the committed context rows held for it and what a proposal hands back
// (q, dev_tokens: valid until the next call with this context). The drafter itself holds weights and
// scratch only, so one opened drafter serves any number of sequences (one call at a time).
typedef struct bs_drafter_ctx {
    int n_ctx;                      // committed context rows held (positions 0 .. n_ctx-1)
    int max_ctx;                    // the most it may hold
    void *impl;                     // the drafter's per-sequence state (ctx_init), or NULL
} bs_drafter_ctx;

typedef struct bs_drafter bs_drafter;
struct bs_drafter {
    const char *name;               // "dflash", "dspark", ...
    int max_drafts;                 // block capacity: B-1 (z-lab DFlash) or B (DeepSpec DFlash / DSpark)
    int n_taps;                     // target hidden_states indices the context features are built from,
    const int *taps;                //   concatenated in this order ([rows][n_taps * H])
    void *impl;
    char warning[512];              // what loading found suspicious but not fatal ("" if nothing), one per
                                    // line: the caller reports it (the library never prints)
    char shape[160];                // what the cost of its pass depends on ("dspark-L3-H512-I1536-A8x4x64-B4-V8192-bf16"):
                                    // a cached cost model's key ("" when the drafter does not say)

    // A fresh context for one sequence, for up to max_ctx rows (<= 0: the drafter's most), and its release.
    // Optional (NULL: a context is its n_ctx alone; bs_drafter_ctx_init).
    int  (*ctx_init)(bs_drafter *d, bs_drafter_ctx *c, int max_ctx, bs_err *err);
    void (*ctx_free)(bs_drafter *d, bs_drafter_ctx *c);
    // Appends context rows for positions c->n_ctx .. c->n_ctx+n-1 (feat: backend buffer [n][n_taps*H]).
    int  (*add_context)(bs_drafter *d, bs_drafter_ctx *c, const float *feat, int n, bs_err *err);
    // Forgets context rows past n_ctx (O(1)).
    int  (*rollback)(bs_drafter *d, bs_drafter_ctx *c, int n_ctx, bs_err *err);
    // Drafts up to max_n tokens following `anchor`, which sits at position c->n_ctx.
    int  (*propose)(bs_drafter *d, bs_drafter_ctx *c, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng, bs_draft *out,
                    bs_err *err);
    // Optional (NULL: propose): propose that may leave the drafted ids in backend memory
    // (out->dev_tokens) without a host synchronisation, so that the verify forward can read them there
    // and one download per round brings drafts and the verdict back (bs_verify_greedy,
    // bs_verify_sampled). The same tokens and q as propose with the same RNG state; confidences are not
    // filled. A drafter that draws on the host fills tokens[] as propose does.
    int  (*propose_on_device)(bs_drafter *d, bs_drafter_ctx *c, int32_t anchor, int max_n, const bs_sampling *s, bs_rng *rng, bs_draft *out,
                              bs_err *err);
    // Optional (NULL: propose per sequence): drafts for n sequences at once, sequence i from anchor
    // anchors[i] in context c[i] with up to max_n[i] drafts, its own sampling s[i] and RNG rng[i]; out[i] is
    // exactly what propose would give it (tokens on the host, q in its context). One pass over the
    // drafter's weights serves every sequence's block.
    int  (*propose_batch)(bs_drafter *d, int n, bs_drafter_ctx *const *c, const int32_t *anchors, const int *max_n,
                          const bs_sampling *const *s, bs_rng *const *rng, bs_draft *out, bs_err *err);
    void (*free)(bs_drafter *d);
};

static inline int bs_drafter_ctx_init(bs_drafter *d, bs_drafter_ctx *c, int max_ctx, bs_err *err) {
    if (d->ctx_init) return d->ctx_init(d, c, max_ctx, err);
    *c = (bs_drafter_ctx){ .max_ctx = max_ctx };
    return 0;
}
static inline void bs_drafter_ctx_free(bs_drafter *d, bs_drafter_ctx *c) {
    if (d && d->ctx_free && c->impl) d->ctx_free(d, c);
    *c = (bs_drafter_ctx){ 0 };
}

// Opens the drafter checkpoint in dir for engine e's target (dispatching on config.json's
// architectures[0]) with room for max_ctx context rows.
struct bs_engine;
int bs_drafter_open(bs_drafter **out, const char *dir, struct bs_engine *e, int max_ctx, bs_err *err);

// How a drafter is opened (bs_drafter_open_opts; NULL or zeroed + lossy_weights -1: the defaults).
typedef struct bs_drafter_opts {
    int lossy_weights;          // -1: bs_tuning's drafter_fp8 (BS_DRAFTER_FP8); 0: exact; 1: lossy large matrices
    const char *draft_vocab;    // NULL: propose from the whole vocabulary; else a draft vocabulary file
                                // (io/draft_vocab.h): the LM head reads only its rows
    int no_calibration;         // 1: ignore a calibration.json beside a DSpark drafter (raw confidences;
                                // docs/calibration.md); 0: apply it when present
    int ctx_pages, ctx_page_rows; // the pool of every sequence's context rows: pages and rows per page (0: opened on
                                // an engine, its KV pool's; else 8 contexts' worth in pages of BS_KV_PAGE_ROWS).
                                // With the target pool's geometry, a request the target's pool promised its
                                // context plus a block (src/runtime/seq.c) never finds this pool short.
} bs_drafter_opts;
int bs_drafter_open_opts(bs_drafter **out, const char *dir, struct bs_engine *e, int max_ctx, const bs_drafter_opts *o,
                         bs_err *err);
