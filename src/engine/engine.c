#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "engine/engine.h"
#include "io/weight_check.h"
#include "util/threadpool.h"
#include "util/timer.h"
#include "util/tuning.h"

static void setup_warning(bs_engine *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void setup_warning(bs_engine *e, const char *fmt, ...) {
    size_t l = strlen(e->setup_warning);
    if (l && l + 1 < sizeof e->setup_warning) e->setup_warning[l++] = '\n';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->setup_warning + l, sizeof e->setup_warning - l, fmt, ap);
    va_end(ap);
}

// The process-wide parts of the setup: the knobs (once per process) and the thread pool; what the options
// asked for that could not be applied becomes a setup warning.
static void process_setup(bs_engine *e, const char *device, const bs_engine_opts *o) {
    bs_tuning_init();
    int want = o && o->threads > 0 ? o->threads : 0;
    if (want) bs_pool_init(want);   // a no-op when the pool already runs
    if (want && bs_pool_size() != want)
        setup_warning(e, "%d threads asked for, but this process's thread pool already runs %d", want, bs_pool_size());
    const char *dev = device ? device : "cpu";
    if (!strcmp(dev, "cpu") && *bs_cpu_kernels_note()) setup_warning(e, "%s", bs_cpu_kernels_note());
    if (!strncmp(dev, "cuda", 4) && bs_tuning_get()->cuda_ablate[0])
        setup_warning(e, "BS_CUDA_ABLATE=%s: those kernels are skipped, every result is wrong (timing diagnosis only)", bs_tuning_get()->cuda_ablate);
}

long bs_kv_default_rows(const bs_qwen3_config *c, bs_backend *be) {
    long rows = (long)BS_KV_DEFAULT_CONTEXTS * c->max_position;
    if (rows < BS_KV_DEFAULT_MIN_ROWS) rows = BS_KV_DEFAULT_MIN_ROWS;
    size_t row_bytes = (size_t)c->n_layers * bs_cfg_max_kv_width(c) * 2 * sizeof(float);
    size_t free_bytes = be->mem_free ? be->mem_free(be) : 0;
    if (free_bytes && row_bytes && (long)(free_bytes / 2 / row_bytes) < rows) rows = (long)(free_bytes / 2 / row_bytes);
    return rows;
}

// The engine's KV pool: the rows asked for (whole pages, rounded up), else the default (whole pages that fit it).
static int kv_pool_open(bs_engine *e, const bs_engine_opts *o, bs_err *err) {
    int page_rows = o && o->kv_page_rows > 0 ? o->kv_page_rows : BS_KV_PAGE_ROWS;
    long rows = o && o->kv_rows > 0 ? o->kv_rows : 0, pages;
    if (page_rows % BS_KV_PAGE_ALIGN) return bs_fail(err, "KV page size %d rows: it must be a multiple of %d", page_rows, BS_KV_PAGE_ALIGN);
    if (rows > 0) pages = (rows + page_rows - 1) / page_rows;
    else pages = bs_kv_default_rows(&e->cfg, e->be) / page_rows;
    if (pages < 1) pages = 1;
    if (pages > INT32_MAX / page_rows) return bs_fail(err, "KV pool of %ld pages of %d rows: too many rows", pages, page_rows);
    if (!(e->kv_pool = bs_calloc(1, sizeof *e->kv_pool, err))) return -1;
    return bs_qwen3_kv_pool_init(e->kv_pool, &e->target, (int)pages, page_rows, err);
}

int bs_engine_open(bs_engine **out, const char *model_dir, const char *device, bs_err *err) {
    return bs_engine_open_opts(out, model_dir, device, NULL, err);
}

int bs_engine_open_opts(bs_engine **out, const char *model_dir, const char *device, const bs_engine_opts *o, bs_err *err) {
    *out = NULL;
    bs_engine *e = calloc(1, sizeof *e);
    if (!e) return bs_fail(err, "out of memory");
    e->model_dir = strdup(model_dir);
    process_setup(e, device, o);
    if (bs_qwen3_config_load(&e->cfg, model_dir, err)) goto fail;
    if (!(e->be = bs_backend_by_name(device, err))) goto fail;
    if (bs_checkpoint_open(&e->ck, model_dir, err)) goto fail;
    bs_checkpoint_check_finite(e->ck, e->weight_warning, sizeof e->weight_warning);
    if (bs_qwen3_init(&e->target, &e->cfg, e->ck, e->be, err)) goto fail;
    if (o && o->no_graphs) e->target.use_graphs = 0;
    if (kv_pool_open(e, o, err)) goto fail;
    // The tokenizer is optional (id-only use needs none); a broken one is reported when text is asked for.
    char tp[4096]; struct stat st;
    snprintf(tp, sizeof tp, "%s/tokenizer.json", model_dir);
    if (stat(tp, &st) == 0) {
        bs_err terr = {0};
        if (bs_tokenizer_load(&e->tok, model_dir, &terr)) { e->tok = NULL; snprintf(e->tok_error, sizeof e->tok_error, "%s", terr.msg); }
        else {
            // The tokenizer's end-of-sequence token (e.g. <|im_end|> for chat models) also stops generation.
            int32_t eos = bs_tokenizer_eos_id(e->tok);
            if (eos >= 0 && eos < e->cfg.vocab_size) bs_qwen3_config_add_eos(&e->cfg, eos);
        }
    }
    *out = e;
    return 0;
fail:
    bs_engine_close(e);
    return -1;
}

void bs_engine_close(bs_engine *e) {
    if (!e) return;
    if (e->kv_pool) bs_kv_pool_free(e->kv_pool);
    free(e->kv_pool);
    bs_qwen3_free(&e->target);
    bs_tokenizer_free(e->tok);
    bs_checkpoint_close(e->ck);
    if (e->be) e->be->destroy(e->be);
    free(e->model_dir);
    free(e);
}

int bs_is_eos(const bs_engine *e, int32_t t) {
    for (int i = 0; i < e->cfg.n_eos; i++) if (e->cfg.eos_ids[i] == t) return 1;
    return 0;
}

const char *bs_finish_name(bs_finish f) {
    switch (f) {
    case BS_FINISH_LENGTH: return "length";
    case BS_FINISH_EOS: return "eos";
    case BS_FINISH_STOP: return "stop";
    case BS_FINISH_CONTEXT: return "context";
    case BS_FINISH_CANCELLED: return "cancelled";
    default: return "none";
    }
}

int bs_request_tokens(const bs_kv_cache *kv, int n_prompt, int n_new, bs_err *err) {
    if (n_prompt <= 0) return bs_fail(err, "the prompt is empty");
    long room = (long)kv->max_ctx - kv->n_past - n_prompt;   // rows left after the prompt's
    if (n_new < 0) {
        if (room < 0) return bs_fail(err, "prompt (%d tokens) exceeds the context length %d", n_prompt, kv->max_ctx);
        return (int)(room + 1 < (1L << 30) ? room + 1 : (1L << 30));
    }
    if (n_new > 0 && (long)n_new - 1 > room)
        return bs_fail(err, "prompt (%d tokens) + %d new tokens exceed the context length %d", n_prompt, n_new, kv->max_ctx);
    if (n_new == 0 && room < 0)
        return bs_fail(err, "prompt (%d tokens) exceeds the context length %d", n_prompt, kv->max_ctx);
    return n_new;
}

int bs_request_ctx(const bs_qwen3_config *c, int n_prompt, int n_new) {
    long want = (long)n_prompt + n_new + 72;   // 72 > the longest verify block (BS_MAX_DRAFT + 1)
    return want < c->max_position ? (int)want : c->max_position;
}

int bs_session_init(bs_session *s, bs_engine *e, int max_ctx, const bs_sampling *sampling, bs_err *err) {
    memset(s, 0, sizeof *s);
    s->eng = e;
    if (sampling) s->sampling = *sampling;
    bs_rng_seed(&s->rng, s->sampling.seed);
    int V = e->cfg.vocab_size;
    if (bs_kv_init(&s->kv, e->kv_pool, max_ctx, err)) return -1;
    if (bs_kv_reserve(&s->kv, 0, err)) { bs_kv_free(&s->kv); return -1; }
    s->logits = e->be->alloc(e->be, sizeof(float) * V, err);
    s->scratch = malloc(sizeof(float) * 2 * V);
    if (!s->logits || !s->scratch) { bs_session_free(s); return bs_fail(err, "out of memory"); }
    return 0;
}

void bs_session_free(bs_session *s) {
    if (s->logits) s->eng->be->free(s->eng->be, s->logits);
    free(s->scratch);
    bs_kv_free(&s->kv);
    memset(s, 0, sizeof *s);
}
