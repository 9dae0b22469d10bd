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
    bs_tokenizer *tok;          // dir/tokenizer.json when present and supported, else NULL
    char tok_error[512];        // why tok is NULL ("" when there was no tokenizer.json)
    char weight_warning[512];   // "" or which tensor holds NaN/Inf (checked at open; the caller reports it)
} bs_engine;

int bs_engine_open(bs_engine **out, const char *model_dir, const char *device, bs_err *err);
void bs_engine_close(bs_engine *e);

typedef struct bs_gen_stats {
    int n_prompt, n_generated;
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
int bs_session_init(bs_session *s, bs_engine *e, int max_ctx, const bs_sampling *sampling, bs_err *err);
void bs_session_free(bs_session *s);
// Plain decoding: prefill the prompt, then one token per forward until n_new tokens, an EOS
// (when stop_at_eos) or the context is full. Tokens go to out (capacity n_new) and to cb.
int bs_generate_plain(bs_session *s, const int32_t *prompt, int n_prompt, int n_new, int stop_at_eos,
                      int32_t *out, int *n_out, bs_token_cb cb, void *cb_ctx, bs_err *err);
int bs_is_eos(const bs_engine *e, int32_t token);
