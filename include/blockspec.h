// blockspec: fast, lossless LLM decoding with block-parallel speculative drafters (DFlash, DSpark).
//
// The public API. An engine is a loaded target model (Hugging Face Qwen3 checkpoint folder), an
// optional drafter and the folder's tokenizer; it is immutable after blockspec_open and each
// blockspec_generate call runs one independent timeline; blockspec_submit / blockspec_step run many at
// once over the one loaded model. Speculative output equals plain decoding
// (greedy) or is distributed exactly as the target's (sampling).
//
//   blockspec *bs;  char err[512];
//   if (blockspec_open(&bs, "Qwen3-8B", "Qwen3-8B-DFlash-b16", "cpu", err, sizeof err)) { puts(err); ... }
//   blockspec_params p = blockspec_default_params();
//   blockspec_generate_text(bs, "Hello", &p, on_text, ctx, &stats, err, sizeof err);
//   blockspec_close(bs);
#ifndef BLOCKSPEC_H
#define BLOCKSPEC_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct blockspec blockspec;

typedef struct blockspec_params {
    int n_new;                  // tokens to generate; -1: until EOS or the context is full (needs cap >= what fits)
    float temperature;          // 0: greedy
    int top_k;                  // 0: off
    float top_p;                // 1: off
    uint64_t seed;
    int n_ctx;                  // 0: the model's max_position_embeddings; larger values are capped there
                                // (blockspec_max_context() says where)
    int draft_max;              // 0: the drafter's block
    float confidence_threshold; // 0: verify every draft
    int stop_at_eos;            // 1: stop at the model's end-of-sequence tokens
    int use_drafter;            // 1 (default): speculative when a drafter is loaded
} blockspec_params;

typedef struct blockspec_stats {
    int n_prompt, n_generated, rounds;   // rounds: 0 for plain decoding
    double tau;                           // tokens per round (accepted drafts + 1)
    double t_prefill, t_generate;         // seconds
    const char *finish_reason;            // why it stopped: "length" (n_new reached), "eos", "stop" (the callback
                                          // returned non-zero), "context" (n_new -1: the context is full) or
                                          // "cancelled" (blockspec_cancel)
    double t_target, t_drafter;           // speculative decoding: seconds of t_generate in the target's verify
                                          // forwards (with the acceptance test) and in the drafter; 0 for plain
} blockspec_stats;

// Called for every generated token (id) or piece of text; return non-zero to stop.
typedef int (*blockspec_token_fn)(void *ctx, int32_t token);
typedef int (*blockspec_text_fn)(void *ctx, const char *text, size_t len);

blockspec_params blockspec_default_params(void);

// target_dir: folder with config.json + *.safetensors (+ tokenizer.json); drafter_dir: NULL or a
// DFlash/DSpark folder; device: "cpu", "cpu-ref" or "cuda[:N]". Returns 0, or -1 with a message in err.
int  blockspec_open(blockspec **out, const char *target_dir, const char *drafter_dir, const char *device,
                    char *err, size_t err_len);
// The same with drafter options (o may be NULL: the defaults).
typedef struct blockspec_open_options {
    const char *draft_vocab;    // NULL, or a draft vocabulary file (JSON list of token ids, or uint32 ids; see
                                // `blockspec draft-vocab`): the drafter proposes only these tokens, reading a
                                // smaller LM head. Output unchanged; acceptance may move.
    int drafter_fp8;            // 1: lossy drafter matrices where the device supports it (CUDA: 8-bit weights;
                                // CPU with AVX512-BF16: bf16 dot products); output unchanged
    int no_calibration;         // 1: a DSpark drafter's calibration.json (`blockspec calibrate`) is not applied:
                                // the confidence cut uses the raw head. Output unchanged either way
    int threads;                // > 0: worker threads for the CPU kernels and the host sampler. The pool is one per
                                // process, sized by the first open that starts it (a later, different count is
                                // reported by blockspec_warnings). 0: $BS_THREADS, else every online core
    int no_graphs;              // 1: never record forwards for replay (CUDA graphs); slower, output unchanged
    int kv_rows;                // KV memory, in rows (tokens) for all requests together: every request's K/V cache
                                // takes pages of 128 rows from one pool as it grows and gives them back when it ends
                                // (docs/kv-paging.md). 0: 4 contexts of the model's max_position_embeddings (at least
                                // 32,768 rows), cut to half the device's free memory. A request starts only when the pool can promise it
                                // its whole context (blockspec_submit queues it until then); one larger than the
                                // pool is refused
} blockspec_open_options;
// Besides these options, the library reads no environment except the BS_* tuning variables, one documented
// hook for benchmarks and A/B runs (docs/tuning.md); options given here win over them.
int  blockspec_open_ex(blockspec **out, const char *target_dir, const char *drafter_dir, const char *device,
                       const blockspec_open_options *o, char *err, size_t err_len);
void blockspec_close(blockspec *bs);
// What loading found suspicious but not fatal (e.g. a tensor holding NaN/Inf, named), one per line, or
// NULL. The library never prints: the caller decides how to show it.
const char *blockspec_warnings(const blockspec *bs);
// The longest context the model allows (max_position_embeddings): n_ctx above it is capped to it.
int blockspec_max_context(const blockspec *bs);

// Token ids in, token ids out (*n_out <= cap). A request whose prompt + n_new - 1 tokens exceed the context
// (n_ctx, or the model's) is refused with a message, with or without the drafter alike.
int blockspec_generate(blockspec *bs, const int32_t *prompt, size_t n_prompt, const blockspec_params *p,
                       int32_t *out, size_t cap, size_t *n_out, blockspec_token_fn on_token, void *ctx,
                       blockspec_stats *stats, char *err, size_t err_len);
// Text in, text out (streamed; UTF-8 characters are never split). Needs the folder's tokenizer.json.
int blockspec_generate_text(blockspec *bs, const char *prompt, const blockspec_params *p,
                            blockspec_text_fn on_text, void *ctx, blockspec_stats *stats, char *err, size_t err_len);

// Many requests at once (continuous batching). Submitted requests are decoded together: each
// blockspec_step advances every running request by one round (its prefill first, then one speculative or
// plain round), with ONE target forward over all their rows. Requests join and leave between steps. A
// request's tokens are exactly those blockspec_generate gives it alone, whatever else is running (greedy
// and seeded sampling alike). Threads may share a handle: the calls that run or change requests (submit,
// step, cancel, free, generate, and the request_* readers) take turns on the handle's lock, and a token
// callback may call them too (e.g. cancel another request) from inside blockspec_step. Free every request
// before blockspec_close; nothing may be called on a handle after it is closed.
//
//   blockspec_request *r[4];
//   for (i ...) blockspec_submit(bs, prompt[i], n[i], &p, NULL, NULL, &r[i], err, sizeof err);
//   while (blockspec_step(bs, err, sizeof err) > 0) {}
//   tokens = blockspec_request_tokens(r[i], &n_tokens); blockspec_request_free(bs, r[i]);
typedef struct blockspec_request blockspec_request;
// Queues a request (the prompt is copied; p NULL: the defaults). on_token is called as tokens are emitted,
// during blockspec_step; returning non-zero ends that request ("stop"). A request that cannot fit its
// context is refused here, with blockspec_generate's message, and so is one whose context the KV pool could
// never hold (kv_rows). One that must wait for KV pages held by others starts when they come back.
int blockspec_submit(blockspec *bs, const int32_t *prompt, size_t n_prompt, const blockspec_params *p, blockspec_token_fn on_token,
                     void *ctx, blockspec_request **out, char *err, size_t err_len);
// One round for every running request. Returns how many are still running (0: all done), or -1 (err; the
// requests that were running are then unusable: free them).
int blockspec_step(blockspec *bs, char *err, size_t err_len);
int blockspec_request_done(const blockspec_request *r);
// The tokens emitted so far (valid until the request is freed).
const int32_t *blockspec_request_tokens(const blockspec_request *r, size_t *n);
// Statistics so far; finish_reason is "none" while it runs. Batch timing: t_generate is wall time, shared
// with the requests it ran beside.
void blockspec_request_stats(const blockspec_request *r, blockspec_stats *st);
// Ends r now (finish_reason "cancelled"); its tokens so far stay readable.
void blockspec_cancel(blockspec *bs, blockspec_request *r);
// Releases r (cancelling it if it still runs).
void blockspec_request_free(blockspec *bs, blockspec_request *r);

// The folder's tokenizer: ids are malloc'ed (free them); text is malloc'ed and NUL-terminated.
int blockspec_tokenize(blockspec *bs, const char *text, int32_t **ids, size_t *n, char *err, size_t err_len);
int blockspec_detokenize(blockspec *bs, const int32_t *ids, size_t n, char **text, char *err, size_t err_len);

// ---- A tokenizer alone (no weights): `blockspec tokenize`, corpus tools ----
// path: a tokenizer.json file, or a folder holding one (and optionally tokenizer_config.json). The calls
// only read it: any thread may use one at any time. Returns 0, or -1 with a message in err.
typedef struct blockspec_tokenizer blockspec_tokenizer;
int  blockspec_tokenizer_open(blockspec_tokenizer **out, const char *path, char *err, size_t err_len);
void blockspec_tokenizer_close(blockspec_tokenizer *t);
// text[0..len) to ids (malloc'ed): special tokens written in the text are recognised; add_special 1 adds the
// post-processor's special tokens too (as blockspec_tokenize does), 0 leaves them out.
int  blockspec_tokenizer_encode(const blockspec_tokenizer *t, const char *text, size_t len, int add_special, int32_t **ids, size_t *n,
                                char *err, size_t err_len);
// ids to text (malloc'ed, NUL-terminated; *len its length): skip_special 1 drops special tokens (as
// blockspec_detokenize does).
int  blockspec_tokenizer_decode(const blockspec_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **text, size_t *len,
                                char *err, size_t err_len);

// ---- For servers: chat rendering, streamed text, speculative counters ----
// blockspec_tokenize, blockspec_detokenize, blockspec_chat_render(_as), blockspec_tokenizer_error,
// blockspec_vocab_size and blockspec_max_context only read what was loaded: any thread may call them at any
// time, without the lock (a server tokenizes on its connection threads while its engine thread steps). A
// detokenizer belongs to one thread at a time.

// Renders messages with the model's chat template (tokenizer_config.json's, recognised natively: Qwen3 and
// ChatML), adding the assistant's generation prompt. enable_thinking 0: Qwen3's empty <think></think>
// block. role: "system", "user", "assistant" or "tool". *text is malloc'ed.
typedef struct blockspec_chat_message { const char *role; const char *content; } blockspec_chat_message;
int blockspec_chat_render(blockspec *bs, const blockspec_chat_message *msgs, size_t n, int enable_thinking, char **text,
                          char *err, size_t err_len);
// The same with a named template ("qwen3" or "chatml"; NULL: the model's), for a model whose template is
// not recognised; an unknown name is an error naming the known ones.
int blockspec_chat_render_as(blockspec *bs, const char *template_name, const blockspec_chat_message *msgs, size_t n,
                             int enable_thinking, char **text, char *err, size_t err_len);
// NULL when the folder's tokenizer is loaded; else why there is none: "" when the folder has no
// tokenizer.json, or what made its tokenizer.json unusable (the text and chat calls then fail with it).
const char *blockspec_tokenizer_error(const blockspec *bs);

// A streaming detokenizer: feed the ids as they come; it returns the text that is complete so far (a UTF-8
// character split across tokens is held until whole; special tokens are skipped). NULL: no tokenizer.
typedef struct blockspec_detokenizer blockspec_detokenizer;
blockspec_detokenizer *blockspec_detokenizer_new(blockspec *bs);
// Appends the new text for token to out (cap >= 256 + the longest token is always enough; NUL-terminated).
// Returns its length, or -1 when cap is too small.
int  blockspec_detokenizer_push(blockspec_detokenizer *d, int32_t token, char *out, size_t cap);
// What is still held back (an incomplete character comes out as U+FFFD).
int  blockspec_detokenizer_flush(blockspec_detokenizer *d, char *out, size_t cap);
void blockspec_detokenizer_free(blockspec_detokenizer *d);

// A request's speculative counters so far (vLLM's spec_decode metrics, per request): rounds with drafts,
// drafts verified, drafts accepted, and per draft position k (0-based) how often it was verified and
// accepted. n_pos: positions with data (the arrays stay valid until the request is freed).
typedef struct blockspec_spec_counts {
    long rounds, drafted, accepted;
    int n_pos;
    const long *pos_tried, *pos_accepted;
    int kv_rows;                 // KV rows this request's cache holds now (its pages x rows per page; 0 once it ended)
    int n_lengths;               // speculative rounds so far, and per round the tokens it emitted (drafts accepted
    const int *acceptance_lengths;   // + 1): valid until the request is freed
} blockspec_spec_counts;
void blockspec_request_spec_counts(const blockspec_request *r, blockspec_spec_counts *c);
// The target's vocabulary size: prompt ids must lie in [0, it).
int  blockspec_vocab_size(const blockspec *bs);
// Target rows in the latest blockspec_step's forward (prompt chunks and verify rows of every request).
int  blockspec_last_step_rows(const blockspec *bs);
// The KV pool (docs/kv-paging.md): its pages, how many hold rows of running requests now, and how many are
// promised to started requests (held or not yet taken; a request waits until its promise fits).
typedef struct blockspec_kv_pages { int page_rows, pages_total, pages_in_use, pages_promised; } blockspec_kv_pages;
void blockspec_kv_usage(const blockspec *bs, blockspec_kv_pages *u);

// ---- Confidence schedulers (issue 26; docs/scheduling.md) ----
// Which drafted tokens each step verifies, for every request of the handle. Every mode verifies a prefix of
// each request's drafted block, so output stays exact: greedy output equals plain decoding under every mode.
typedef enum blockspec_schedule {
    BLOCKSPEC_SCHEDULE_THRESHOLD = 0,  // the default: each request's confidence_threshold cut (0: every draft)
    BLOCKSPEC_SCHEDULE_NONE,           // plain decoding: no drafter pass
    BLOCKSPEC_SCHEDULE_FIXED,          // every drafted token (up to draft_max)
    BLOCKSPEC_SCHEDULE_ALG1,           // DSpark's Algorithm 1 across the batch: needs the cost model
    BLOCKSPEC_SCHEDULE_ASYNC,          // top-K by prefix survival, K planned one step ahead: needs the cost model
} blockspec_schedule;
// "threshold", "none", "fixed", "alg1", "async" <-> the enum; parse returns -1 for an unknown name.
int blockspec_schedule_parse(const char *name, blockspec_schedule *out);
const char *blockspec_schedule_name(blockspec_schedule s);
// Sets the schedule of the requests submitted from now on, and of blockspec_generate. sps[i]: the target's
// forwards per second with i + 1 rows in one forward (blockspec_profile measures it), n_sps entries (copied);
// alg1 and async need it, the other modes ignore it (NULL, 0). Refused while requests are running.
int blockspec_set_schedule(blockspec *bs, blockspec_schedule mode, const double *sps, size_t n_sps, char *err, size_t err_len);
// Measures the cost model on this handle's device: sps[i] for rows[i] rows, a verify-shaped forward of
// rows[i] rows spread over sequences of `block` rows (anchor + drafts), each after a ctx-row context; the
// best of reps forwards. Takes seconds; the caller caches it (per blockspec_device_name + blockspec_model_shape).
int blockspec_profile(blockspec *bs, const int *rows, size_t n, int ctx, int block, int reps, double *sps, char *err, size_t err_len);
// The whole cost model (docs/scheduling.md): with it, alg1 and async also decide before each step whether
// the drafter runs at all (plain decoding when the drafts are not expected to pay for the drafter pass and
// their verify rows). verify[i]: blockspec_profile's table (i + 1 rows in sequences of `block` rows; block
// 0: 5); plain[i]: the same measurement with block 1 (i + 1 sequences of one row: a plain decoding step);
// draft[i]: blockspec_profile_drafter's (drafter passes per second over i + 1 sequences). plain and draft
// may be NULL (the step times measured while running then stand in for what they would say).
typedef struct blockspec_cost_model {
    const double *verify; size_t n_verify; int block;
    const double *plain; size_t n_plain;
    const double *draft; size_t n_draft;
} blockspec_cost_model;
// blockspec_set_schedule with the whole cost model (copied; cm NULL: none).
int blockspec_set_schedule_costs(blockspec *bs, blockspec_schedule mode, const blockspec_cost_model *cm, char *err, size_t err_len);
// Measures the drafter's pass: pps[i] = passes per second with seqs[i] sequences drafting (`drafts` tokens
// each, 0: the drafter's block) after a ctx-row context, the best of reps. Fails without a drafter.
int blockspec_profile_drafter(blockspec *bs, const int *seqs, size_t n, int ctx, int drafts, int reps, double *pps, char *err, size_t err_len);
// The drafter's shape ("dspark-L3-H512-I1536-A8x4x64-B4-V8192-bf16"): with the device and the target's, the
// key of a cached drafter table. 0, or -1 without a drafter (or when buf is too small).
int blockspec_drafter_shape(const blockspec *bs, char *buf, size_t len);
// The drafts the drafter proposes per round (its block), or 0 without a drafter.
int blockspec_drafter_block(const blockspec *bs);
// Worker threads of the process's pool (the CPU kernels and the host sampler): part of a CPU cost model's key.
int blockspec_threads(const blockspec *bs);
// The device the handle runs on ("cpu", "cuda:0 (NVIDIA H200)", ...) and the target's shape
// ("L36-H4096-I12288-A32x8x128-V151936-bf16"): together they key a cached cost model.
const char *blockspec_device_name(const blockspec *bs);
int blockspec_model_shape(const blockspec *bs, char *buf, size_t len);
// One speculative round of a submitted request: drafts proposed (conf[0..n_drafted): their calibrated
// confidences, NULL without a confidence head; valid during the call), verified (after the scheduler's
// cut) and accepted. Called during blockspec_step for every request's every round (e.g. to record traces).
typedef struct blockspec_round { int n_drafted, n_verified, n_accepted; const float *conf; } blockspec_round;
typedef void (*blockspec_round_fn)(void *ctx, const blockspec_request *r, const blockspec_round *round);
void blockspec_set_round_observer(blockspec *bs, blockspec_round_fn fn, void *ctx);

#ifdef __cplusplus
}
#endif
#endif
