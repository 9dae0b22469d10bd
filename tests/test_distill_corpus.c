// blockspec distill-corpus (cli/cmd_distill_corpus.c): every generated document is a prompt taken from the
// source corpus followed by exactly the target's plain greedy continuation of it; the parts of several
// workers merge deterministically; --include / --append-source / --source-fraction keep whole documents.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/engine.h"
#include "harness.h"
#include "test_util_models.h"
#include "train/corpus.h"
#include "util/rng.h"

enum { V = 64, P = 6, NEW = 10 };

// A source corpus of 5 random documents (lengths 4..40; the short ones cannot hold a prompt).
static int make_source(const char *path, bs_err *err) {
    bs_corpus_writer *w;
    if (bs_corpus_writer_open(&w, path, V, 0x1234, 0, err)) return -1;
    bs_rng r;
    bs_rng_seed(&r, 5);
    int32_t ids[40];
    const int lens[5] = { 40, 4, 23, 17, 5 };
    for (int d = 0; d < 5; d++) {
        for (int i = 0; i < lens[d]; i++) ids[i] = (int32_t)(bs_rng_u64(&r) % V);
        if (bs_corpus_writer_add(w, ids, NULL, lens[d], err)) return -1;
    }
    return bs_corpus_writer_finish(w, err);
}

static int is_sub(const int32_t *hay, int64_t n, const int32_t *needle, int m) {
    for (int64_t i = 0; i + m <= n; i++) if (!memcmp(hay + i, needle, sizeof(int32_t) * m)) return 1;
    return 0;
}

TEST(distill_corpus_is_the_targets_greedy_text) {
    const char *model = tu_make_target(V, 32, 2, 4, 2, 8, 48, 0, 1, 7);
    const char *dir = bs_test_tmpdir("distill_corpus");
    CHECK(model && dir, "no temp model / dir");
    char src[1024], out[1024], out2[1024], mix[1024], cmd[4096];
    snprintf(src, sizeof src, "%s/src.bsc", dir);
    snprintf(out, sizeof out, "%s/gen.bsc", dir);
    snprintf(out2, sizeof out2, "%s/gen2.bsc", dir);
    snprintf(mix, sizeof mix, "%s/mix.bsc", dir);
    bs_err err = {0};
    CHECK(make_source(src, &err) == 0, "%s", err.msg);
    for (int k = 0; k < 2; k++) {
        // the second run decodes each worker's 3 continuations together (batched): the same documents
        snprintf(cmd, sizeof cmd, "%s distill-corpus -m %s --data %s --out %s --prompt-len %d --new %d --docs 3 --workers 2 --seed 9%s 2>/dev/null",
                 bs_cli_path(), model, src, k ? out2 : out, P, NEW, k ? " --concurrency 3" : "");
        CHECK(system(cmd) == 0, "distill-corpus failed: %s", cmd);
    }
    bs_corpus *g = NULL, *g2 = NULL, *s = NULL;
    CHECK(bs_corpus_open(&g, out, &err) == 0 && bs_corpus_open(&g2, out2, &err) == 0 && bs_corpus_open(&s, src, &err) == 0, "%s", err.msg);
    CHECK(g->n_docs == 6 && g->tokenizer_hash == 0x1234 && g->vocab_size == V, "%lld documents (6 expected), hash %llx", (long long)g->n_docs,
          (unsigned long long)g->tokenizer_hash);
    CHECK(g->n_tokens == g2->n_tokens && !memcmp(g->ids, g2->ids, sizeof(int32_t) * g->n_tokens), "--concurrency 3 wrote other documents than --concurrency 1 (same seed)");
    bs_engine *e;
    CHECK(bs_engine_open(&e, model, "cpu", &err) == 0, "%s", err.msg);
    for (int64_t d = 0; d < g->n_docs; d++) {
        const int32_t *doc = g->ids + g->doc_off[d];
        int64_t n = (int64_t)(g->doc_off[d + 1] - g->doc_off[d]);
        CHECK(n == P + NEW, "document %lld has %lld tokens, expected %d (random model: no end-of-text)", (long long)d, (long long)n, P + NEW);
        CHECK(is_sub(s->ids, s->n_tokens, doc, P), "document %lld's prompt is not a window of the source", (long long)d);
        bs_session ss;
        int32_t ref[NEW];
        int nr = 0;
        CHECK(bs_session_init(&ss, e, bs_request_ctx(&e->cfg, P, NEW), NULL, &err) == 0, "%s", err.msg);
        CHECK(bs_generate_plain(&ss, doc, P, NEW, 1, ref, &nr, NULL, NULL, &err) == 0, "%s", err.msg);
        bs_session_free(&ss);
        CHECK(nr == NEW && !memcmp(ref, doc + P, sizeof ref), "document %lld: the continuation is not the target's greedy output", (long long)d);
    }
    bs_engine_close(e);
    // --include + --append-source --source-fraction: whole documents, the included ones first
    snprintf(cmd, sizeof cmd, "%s distill-corpus -m %s --data %s --out %s --docs 0 --include %s --append-source --source-fraction 0.5 2>/dev/null",
             bs_cli_path(), model, src, mix, out);
    CHECK(system(cmd) == 0, "distill-corpus (merge) failed: %s", cmd);
    bs_corpus *m = NULL;
    CHECK(bs_corpus_open(&m, mix, &err) == 0, "%s", err.msg);
    CHECK(m->n_docs > g->n_docs && m->n_docs < g->n_docs + s->n_docs, "%lld documents after keeping ~half of 5 source ones after 6", (long long)m->n_docs);
    CHECK(!memcmp(m->ids, g->ids, sizeof(int32_t) * g->n_tokens), "the included documents do not come first");
    for (int64_t d = g->n_docs; d < m->n_docs; d++) {
        int64_t n = (int64_t)(m->doc_off[d + 1] - m->doc_off[d]);
        int found = 0;
        for (int64_t k = 0; k < s->n_docs && !found; k++)
            found = (int64_t)(s->doc_off[k + 1] - s->doc_off[k]) == n && !memcmp(m->ids + m->doc_off[d], s->ids + s->doc_off[k], sizeof(int32_t) * n);
        CHECK(found, "document %lld is not a whole source document", (long long)d);
    }
    // refusals: a corpus of another tokenizer in --include; no document long enough for the prompt
    snprintf(cmd, sizeof cmd, "%s distill-corpus -m %s --data %s --out %s/x.bsc --prompt-len 64 --docs 1 2>/dev/null", bs_cli_path(), model, src, dir);
    CHECK(system(cmd) != 0, "a prompt longer than every document was accepted");
    bs_corpus_close(m); bs_corpus_close(g); bs_corpus_close(g2); bs_corpus_close(s);
}
