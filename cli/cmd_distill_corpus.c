// blockspec distill-corpus: the target's own greedy text, for training its drafters (self-distillation).
//
// A drafter is only ever asked to predict what the target writes under greedy decoding. A small target's
// greedy text differs from its training data: it settles into loops and stock phrases the data rarely has,
// and a drafter trained on the data alone never sees them (the built-in drafter accepted 0.9 then 0.25 on a
// loop of one repeated line). This command samples prompts from a tokenised corpus, lets the target continue
// each greedily, and writes prompt + continuation as documents of a new corpus, optionally followed by every
// document of the source corpus (one file for train-drafter --data).
//
// Work is spread over processes (fork): CPU workers run one thread each; CUDA workers share the GPU. Each
// writes its own part; the parent merges the parts in worker order, so a run is reproducible for the same
// worker counts, seeds and document quotas (a --time-limit cut is not).
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cli/args.h"
#include "cli/commands.h"
#include "blockspec.h"
#include "train/corpus.h"
#include "util/rng.h"
#include "util/threadpool.h"
#include "util/timer.h"

static void usage(void) {
    fprintf(stderr,
        "usage: blockspec distill-corpus -m TARGET --data CORPUS --out OUT [options]\n"
        "  Writes the target's greedy continuations of prompts drawn from CORPUS as a corpus (docs/training.md).\n"
        "  --prompt-len N     prompt tokens, taken at a random place in a random document (64)\n"
        "  --new N            greedy tokens per prompt; a continuation also ends at an end-of-text token (192)\n"
        "  --docs N           documents per worker (1000; 0: generate nothing, only merge --include and the source)\n"
        "  --include F1,F2    corpora (e.g. earlier runs' outputs) whose documents go first\n"
        "  --time-limit S     stop each worker after S seconds (0: none)\n"
        "  --workers N        CPU worker processes, one thread each (1)\n"
        "  --cuda-workers N   worker processes on the GPU (0)\n"
        "  --concurrency N    continuations each worker decodes together, batched (1); the output is the same\n"
        "  --append-source    append the documents of CORPUS after the generated ones\n"
        "  --source-fraction F  with --append-source: keep each source document with probability F (1)\n"
        "  --seed N           (1); worker w draws its prompts with seed + w\n");
}

typedef struct {
    const char *target, *data, *out, *include;
    long prompt_len, n_new, docs, workers, cuda_workers, seed, concurrency;
    double time_limit, source_fraction;
    int append_source;
} args;

// One worker: its own handle, prompts drawn with its own seed, documents to its part file. It keeps up to
// --concurrency continuations in flight through the public API's batched runtime (one target forward per
// step over all of them: what makes a GPU worker fast) and writes them in the order their prompts were
// drawn; a request's greedy tokens are the same whatever else is in the batch, so the part is the same for
// every concurrency.
typedef struct { int32_t *doc; blockspec_request *req; } slot;

static int worker(const args *a, const bs_corpus *src, int w, const char *device, const char *part) {
    bs_err err = {0};
    blockspec *bs = NULL;
    bs_corpus_writer *cw = NULL;
    int C = (int)a->concurrency, P = (int)a->prompt_len, N = (int)a->n_new, rc = 1;
    slot *ring = calloc((size_t)C, sizeof *ring);
    if (!ring) { bs_fail(&err, "out of memory"); goto fail; }
    if (blockspec_open(&bs, a->target, NULL, device, err.msg, sizeof err.msg)) goto fail;
    if (blockspec_vocab_size(bs) != src->vocab_size) {
        bs_fail(&err, "%s has vocabulary %lld, the target %s %d", src->path, (long long)src->vocab_size, a->target, blockspec_vocab_size(bs));
        goto fail;
    }
    if (bs_corpus_writer_open(&cw, part, src->vocab_size, src->tokenizer_hash, 0, &err)) goto fail;
    for (int i = 0; i < C; i++)
        if (!(ring[i].doc = malloc(sizeof(int32_t) * (P + N + 1)))) { bs_fail(&err, "out of memory"); goto fail; }
    blockspec_params p = blockspec_default_params();
    p.n_new = N; p.temperature = 0; p.use_drafter = 0; p.stop_at_eos = 1; p.n_ctx = P + N;
    bs_rng r;
    bs_rng_seed(&r, (uint64_t)a->seed + (uint64_t)w);
    double t0 = bs_now();
    long tokens = 0, drawn = 0, head = 0;   // ring[(head + i) % C], i < drawn - head, are in flight, oldest first
    for (;;) {
        while (drawn - head < C && drawn < a->docs && !(a->time_limit > 0 && bs_now() - t0 >= a->time_limit)) {
            slot *sl = &ring[drawn % C];
            int64_t d = -1, len = 0;
            for (int tries = 0; tries < 1000 && len <= P; tries++) {   // a document longer than the prompt
                d = (int64_t)(bs_rng_u64(&r) % (uint64_t)src->n_docs);
                len = (int64_t)(src->doc_off[d + 1] - src->doc_off[d]);
            }
            if (len <= P) { bs_fail(&err, "%s: no document longer than --prompt-len %d found", src->path, P); goto fail; }
            int64_t at = (int64_t)src->doc_off[d] + (int64_t)(bs_rng_u64(&r) % (uint64_t)(len - P));
            memcpy(sl->doc, src->ids + at, sizeof(int32_t) * P);
            if (blockspec_submit(bs, sl->doc, (size_t)P, &p, NULL, NULL, &sl->req, err.msg, sizeof err.msg)) goto fail;
            drawn++;
        }
        if (drawn == head) break;
        if (blockspec_step(bs, err.msg, sizeof err.msg) < 0) goto fail;
        while (head < drawn && blockspec_request_done(ring[head % C].req)) {   // the oldest ones, in order
            slot *sl = &ring[head % C];
            size_t n = 0;
            const int32_t *out = blockspec_request_tokens(sl->req, &n);
            blockspec_stats st;
            blockspec_request_stats(sl->req, &st);
            if (st.finish_reason && !strcmp(st.finish_reason, "eos") && n > 0) n--;   // the end-of-text token is a boundary, not text
            memcpy(sl->doc + P, out, sizeof(int32_t) * n);
            blockspec_request_free(bs, sl->req);
            sl->req = NULL;
            if (bs_corpus_writer_add(cw, sl->doc, NULL, P + (int64_t)n, &err)) goto fail;
            tokens += (long)n;
            head++;
        }
    }
    fprintf(stderr, "distill-corpus: worker %d (%s, %d in flight): %lld documents, %ld generated tokens in %.1f s\n", w, device, C,
            (long long)bs_corpus_writer_docs(cw), tokens, bs_now() - t0);
    rc = bs_corpus_writer_finish(cw, &err) ? 1 : 0;
    cw = NULL;
    if (rc) goto fail;
    goto done;
fail:
    fprintf(stderr, "blockspec distill-corpus: worker %d: %s\n", w, err.msg);
    rc = 1;
done:
    if (cw) bs_corpus_writer_abort(cw);
    for (int i = 0; ring && i < C; i++) { if (ring[i].req) blockspec_request_free(bs, ring[i].req); free(ring[i].doc); }
    free(ring);
    if (bs) blockspec_close(bs);
    return rc;
}

// Every document of c (keep < 1: each with probability keep, drawn from r).
static int append_corpus(bs_corpus_writer *cw, const bs_corpus *c, double keep, bs_rng *r, bs_err *err) {
    for (int64_t d = 0; d < c->n_docs; d++) {
        if (keep < 1 && (double)(bs_rng_u64(r) >> 11) * 0x1p-53 >= keep) continue;
        uint64_t o = c->doc_off[d], n = c->doc_off[d + 1] - o;
        if (bs_corpus_writer_add(cw, c->ids + o, c->mask ? c->mask + o : NULL, (int64_t)n, err)) return -1;
    }
    return 0;
}

// Every document of the corpus file at path, which must share src's tokenizer (data: src's name, for messages).
static int append_file(bs_corpus_writer *cw, const char *path, const bs_corpus *src, const char *data, bs_err *err) {
    bs_corpus *c = NULL;
    int rc = bs_corpus_open(&c, path, err) || bs_corpus_check_tokenizer(c, src->tokenizer_hash, src->vocab_size, data, err) ||
             append_corpus(cw, c, 1, NULL, err) ? -1 : 0;
    bs_corpus_close(c);
    return rc;
}

int cmd_distill_corpus(int argc, char **argv) {
    args a = { .prompt_len = 64, .n_new = 192, .docs = 1000, .workers = 1, .seed = 1, .source_fraction = 1, .concurrency = 1 };
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) { usage(); return 0; }
        if (!strcmp(o, "--append-source")) { a.append_source = 1; continue; }
        if (!(v = cli_value(argc, argv, &i))) return 2;
        if (!strcmp(o, "-m") || !strcmp(o, "--model")) a.target = v;
        else if (!strcmp(o, "--data")) a.data = v;
        else if (!strcmp(o, "--out")) a.out = v;
        else if (!strcmp(o, "--include")) a.include = v;
        else if (!strcmp(o, "--prompt-len")) { if (cli_int(o, v, 1, 1 << 20, &a.prompt_len)) return 2; }
        else if (!strcmp(o, "--new")) { if (cli_int(o, v, 1, 1 << 20, &a.n_new)) return 2; }
        else if (!strcmp(o, "--docs")) { if (cli_int(o, v, 0, 1L << 40, &a.docs)) return 2; }
        else if (!strcmp(o, "--workers")) { if (cli_int(o, v, 0, 1024, &a.workers)) return 2; }
        else if (!strcmp(o, "--cuda-workers")) { if (cli_int(o, v, 0, 1024, &a.cuda_workers)) return 2; }
        else if (!strcmp(o, "--concurrency")) { if (cli_int(o, v, 1, 4096, &a.concurrency)) return 2; }
        else if (!strcmp(o, "--seed")) { if (cli_int(o, v, 0, 1L << 62, &a.seed)) return 2; }
        else if (!strcmp(o, "--source-fraction")) { if (cli_float(o, v, 0, 1, &a.source_fraction)) return 2; }
        else if (!strcmp(o, "--time-limit")) { if (cli_float(o, v, 0, 1e9, &a.time_limit)) return 2; }
        else { fprintf(stderr, "blockspec distill-corpus: unknown option '%s'\n", o); usage(); return 2; }
    }
    if (!a.target || !a.data || !a.out) { fprintf(stderr, "blockspec distill-corpus: -m, --data and --out are required\n"); usage(); return 2; }
    int nw = a.docs ? (int)(a.workers + a.cuda_workers) : 0;
    if (a.docs && nw < 1) { fprintf(stderr, "blockspec distill-corpus: no workers (--workers and --cuda-workers are both 0)\n"); return 2; }
    bs_err err = {0};
    bs_corpus *src = NULL;
    if (bs_corpus_open(&src, a.data, &err)) { fprintf(stderr, "blockspec distill-corpus: %s\n", err.msg); return 1; }
    fflush(NULL);
    size_t plen = strlen(a.out) + 32;
    char **parts = calloc((size_t)nw, sizeof *parts);
    pid_t *pids = calloc((size_t)nw, sizeof *pids);
    int rc = 1;
    if (nw && (!parts || !pids)) { fprintf(stderr, "blockspec distill-corpus: out of memory\n"); goto out; }
    for (int w = 0; w < nw; w++) {
        if (!(parts[w] = malloc(plen))) { fprintf(stderr, "blockspec distill-corpus: out of memory\n"); goto out; }
        snprintf(parts[w], plen, "%s.part%d", a.out, w);
    }
    for (int w = 0; w < nw; w++) {
        pid_t p = fork();
        if (p < 0) { perror("blockspec distill-corpus: fork"); goto reap; }
        if (p == 0) {
            int cuda = w >= a.workers;
            if (!cuda) bs_pool_init(1);   // one thread per CPU worker: the workers are the parallelism
            _exit(worker(&a, src, w, cuda ? "cuda" : "cpu", parts[w]));
        }
        pids[w] = p;
    }
reap:;
    int failed = 0;
    for (int w = 0; w < nw; w++) {
        if (!pids[w]) { failed = 1; continue; }
        int st = 0;
        if (waitpid(pids[w], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) failed = 1;
    }
    if (failed) { fprintf(stderr, "blockspec distill-corpus: a worker failed (above); %s not written\n", a.out); goto out; }
    bs_corpus_writer *cw = NULL;
    if (bs_corpus_writer_open(&cw, a.out, src->vocab_size, src->tokenizer_hash, src->mask != NULL, &err)) goto fail;
    // the included corpora, then the workers' parts
    char *inc = a.include ? strdup(a.include) : NULL, *save = NULL;
    int mrc = a.include && !inc ? bs_fail(&err, "out of memory") : 0;
    for (const char *p = inc ? strtok_r(inc, ",", &save) : NULL; p && !mrc; p = strtok_r(NULL, ",", &save))
        mrc = append_file(cw, p, src, a.data, &err);
    for (int w = 0; w < nw && !mrc; w++) mrc = append_file(cw, parts[w], src, a.data, &err);
    free(inc);
    if (mrc) { bs_corpus_writer_abort(cw); goto fail; }
    int64_t gen_docs = bs_corpus_writer_docs(cw), gen_tokens = bs_corpus_writer_tokens(cw);
    bs_rng sr;
    bs_rng_seed(&sr, (uint64_t)a.seed ^ 0x5eed5eedULL);
    if (a.append_source && append_corpus(cw, src, a.source_fraction, &sr, &err)) { bs_corpus_writer_abort(cw); goto fail; }
    int64_t all_docs = bs_corpus_writer_docs(cw), all_tokens = bs_corpus_writer_tokens(cw);
    if (bs_corpus_writer_finish(cw, &err)) goto fail;
    fprintf(stderr, "distill-corpus: %s: %lld generated / included documents (%lld tokens incl. prompts)%s, %lld documents, %lld tokens in all\n", a.out,
            (long long)gen_docs, (long long)gen_tokens, a.append_source ? " + the source corpus" : "", (long long)all_docs, (long long)all_tokens);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "blockspec distill-corpus: %s\n", err.msg);
out:
    if (parts) for (int w = 0; w < nw; w++) if (parts[w]) { unlink(parts[w]); free(parts[w]); }
    free(parts); free(pids);
    bs_corpus_close(src);
    return rc;
}
