// The engine (a loaded target, immutable after load) and a session (one timeline: KV cache, RNG,
// stats). Plain decoding lives here; speculative decoding (src/spec) drives the same pieces.
#pragma once
#include "backend/backend.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "model/qwen3.h"
#include "spec/sampler.h"

typedef struct bs_engine {
    char *model_dir;
    bs_backend *be;
    bs_checkpoint *ck;
    bs_qwen3_config cfg;
    bs_qwen3 target;
    bs_kv_pool *kv_pool;        // the pages every KV cache of this target draws from (model/kv_pool.h, docs/kv-paging.md):
                                // the one part of a loaded engine that changes (under its user's lock)
    bs_tokenizer *tok;          // dir/tokenizer.json when present and supported, else NULL
    char tok_error[512];        // why tok is NULL ("" when there was no tokenizer.json)
    char weight_warning[512];   // "" or which tensor holds NaN/Inf (checked at open; the caller reports it)
    char setup_warning[512];    // "" or what of the requested setup was not applied, one per line (a kernel path
                                // this CPU lacks, a thread count the running pool ignores, BS_CUDA_ABLATE)
} bs_engine;

// How an engine runs (NULL or zeroed: the defaults, i.e. bs_tuning's knobs, BS_* for benchmarks).
typedef struct bs_engine_opts {
    int threads;                // > 0: the thread pool's size, if this open starts it (the pool is per process)
    int no_graphs;              // 1: forwards are never recorded and replayed (CUDA graphs); output unchanged
    long kv_rows;               // > 0: KV rows (tokens) of the pool, for all sequences together (rounded up to
                                // whole pages); 0: bs_kv_default_rows
    int kv_page_rows;           // > 0: rows per KV page (a multiple of 32); 0: BS_KV_PAGE_ROWS
} bs_engine_opts;
// The KV pool's default size in rows: BS_KV_DEFAULT_CONTEXTS whole contexts (max_position_embeddings rows
// each) but at least BS_KV_DEFAULT_MIN_ROWS (a short-context model still serves many requests), cut to what
// half of the memory the backend reports free can hold (docs/kv-paging.md).
#define BS_KV_DEFAULT_CONTEXTS 4
#define BS_KV_DEFAULT_MIN_ROWS 32768
long bs_kv_default_rows(const bs_qwen3_config *c, bs_backend *be);
int bs_engine_open(bs_engine **out, const char *model_dir, const char *device, bs_err *err);
int bs_engine_open_opts(bs_engine **out, const char *model_dir, const char *device, const bs_engine_opts *o, bs_err *err);
void bs_engine_close(bs_engine *e);

// Why generation stopped: the requested count was reached (length), an end-of-sequence token was
// emitted (eos), the token callback asked to stop (stop), or, when the request asked for as many tokens
// as fit (n_new < 0), the context was full (context). Plain and speculative decoding report the same.
// A runtime request can also be cancelled (cancelled).
typedef enum { BS_FINISH_NONE = 0, BS_FINISH_LENGTH, BS_FINISH_EOS, BS_FINISH_STOP, BS_FINISH_CONTEXT, BS_FINISH_CANCELLED } bs_finish;
const char *bs_finish_name(bs_finish f);   // "length", "eos", "stop", "context", "cancelled" ("none" before any token)

typedef struct bs_gen_stats {
    int n_prompt, n_generated;
    bs_finish finish;
    double t_prefill, t_decode;    // seconds
} bs_gen_stats;

// Called for every emitted token; return non-zero to stop.
typedef int (*bs_token_cb)(void *ctx, int32_t token);

typedef struct bs_session {
    bs_engine *eng;
    bs_kv_cache kv;
    bs_rng rng;
    bs_sampling sampling;
    float *logits;            // backend [V]: the last row of the latest forward (sampling processes it in place)
    float *scratch;           // host [2V]: the host sampler's residual row
    bs_gen_stats stats;
} bs_session;

// Context length for one request: prompt + output + room for a verify block, capped by the model's.
int bs_request_ctx(const bs_qwen3_config *c, int n_prompt, int n_new);
// A session's KV cache draws from the engine's pool and is promised its whole context at once (an error,
// naming the pool's size, when the pool cannot promise it now).
int bs_session_init(bs_session *s, bs_engine *e, int max_ctx, const bs_sampling *sampling, bs_err *err);
void bs_session_free(bs_session *s);
// The one context rule of plain and speculative decoding, checked before anything runs: n_new tokens
// after an n_prompt-token prompt need n_prompt + n_new - 1 rows of context past kv->n_past (the last token
// is emitted, never fed), else the request is refused with the same message on both paths. n_new < 0
// asks for as many tokens as fit (at least one). Returns the number of tokens to generate, or -1 (err).
int bs_request_tokens(const bs_kv_cache *kv, int n_prompt, int n_new, bs_err *err);
// Plain decoding (a runtime of one sequence without a drafter, src/runtime/single.c): prefill the prompt,
// then one token per forward until n_new tokens (n_new < 0: until
// the context is full, bs_request_tokens), an EOS (when stop_at_eos) or the callback says stop; the
// reason is s->stats.finish. Tokens go to out (capacity: bs_request_tokens' count) and to cb.
int bs_generate_plain(bs_session *s, const int32_t *prompt, int n_prompt, int n_new, int stop_at_eos,
                      int32_t *out, int *n_out, bs_token_cb cb, void *cb_ctx, bs_err *err);
int bs_is_eos(const bs_engine *e, int32_t token);
