// The public API (include/blockspec.h) as an embedder uses it: plain and speculative generation
// agree, errors come back as messages, text round-trips through a tokenizer.
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "blockspec.h"

static int count_tokens(void *ctx, int32_t t) { (*(int *)ctx)++; return 0; }

TEST(public_api_generate) {
    char t[1024], d[1024], err[512];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(d, sizeof d, "%s/dspark", bs_fixtures_dir());
    blockspec *bs;
    CHECK(blockspec_open(&bs, t, d, "cpu", err, sizeof err) == 0, "%s", err);
    int32_t prompt[] = { 3, 14, 15, 92, 65, 35 }, a[40], b[40];
    size_t na, nb; int seen = 0;
    blockspec_params p = blockspec_default_params();
    p.n_new = 40;
    blockspec_stats st;
    CHECK(blockspec_generate(bs, prompt, 6, &p, a, 40, &na, count_tokens, &seen, &st, err, sizeof err) == 0, "%s", err);
    CHECK(na == 40 && seen == 40 && st.rounds > 0 && st.tau >= 1.0);
    p.use_drafter = 0;
    CHECK(blockspec_generate(bs, prompt, 6, &p, b, 40, &nb, NULL, NULL, &st, err, sizeof err) == 0, "%s", err);
    CHECK(nb == 40 && st.rounds == 0);
    CHECK(memcmp(a, b, sizeof a) == 0, "speculative and plain greedy output differ");
    // The handle's drafter is reused: a second request on another prompt must start from a clean context.
    int32_t prompt2[] = { 7, 7, 300, 12 };
    p.use_drafter = 1;
    CHECK(blockspec_generate(bs, prompt2, 4, &p, a, 40, &na, NULL, NULL, &st, err, sizeof err) == 0, "%s", err);
    p.use_drafter = 0;
    CHECK(blockspec_generate(bs, prompt2, 4, &p, b, 40, &nb, NULL, NULL, &st, err, sizeof err) == 0, "%s", err);
    CHECK(na == nb && memcmp(a, b, sizeof(int32_t) * na) == 0, "second speculative request differs from plain");
    int32_t bad[] = { 1, 999 };
    CHECK(blockspec_generate(bs, bad, 2, &p, b, 40, &nb, NULL, NULL, NULL, err, sizeof err) != 0 && strstr(err, "outside the vocabulary"), "%s", err);
    int32_t *ids; size_t n;
    CHECK(blockspec_tokenize(bs, "hi", &ids, &n, err, sizeof err) != 0 && strstr(err, "tokenizer.json"), "%s", err);
    blockspec_close(bs);
    CHECK(blockspec_open(&bs, t, "/nonexistent/drafter", "cpu", err, sizeof err) != 0 && strstr(err, "/nonexistent/drafter"), "%s", err);
}

// blockspec_open_ex with a draft vocabulary: the output is still the target's; bad options are messages.
TEST(public_api_open_ex_draft_vocab) {
    char t[1024], d[1024], vp[1100], err[512];
    snprintf(t, sizeof t, "%s/target", bs_fixtures_dir());
    snprintf(d, sizeof d, "%s/dflash", bs_fixtures_dir());
    const char *dir = bs_test_tmpdir("apivocab");
    CHECK(dir);
    snprintf(vp, sizeof vp, "%s/v.json", dir);
    FILE *f = fopen(vp, "w");
    CHECK(f);
    for (int i = 0; i < 384; i += 2) fprintf(f, i ? ",%d" : "[%d", i);
    fputs("]", f);
    fclose(f);
    blockspec_open_options o = { .draft_vocab = vp };
    blockspec *bs;
    CHECK(blockspec_open_ex(&bs, t, d, "cpu", &o, err, sizeof err) == 0, "%s", err);
    int32_t prompt[] = { 3, 14, 15, 92, 65, 35 }, a[40], b[40];
    size_t na, nb;
    blockspec_params p = blockspec_default_params();
    p.n_new = 40; p.stop_at_eos = 0;
    blockspec_stats st;
    CHECK(blockspec_generate(bs, prompt, 6, &p, a, 40, &na, NULL, NULL, &st, err, sizeof err) == 0, "%s", err);
    CHECK(st.rounds > 0);
    p.use_drafter = 0;
    CHECK(blockspec_generate(bs, prompt, 6, &p, b, 40, &nb, NULL, NULL, &st, err, sizeof err) == 0, "%s", err);
    CHECK(na == 40 && nb == 40 && !memcmp(a, b, sizeof a), "speculative output with a draft vocabulary differs from plain");
    blockspec_close(bs);
    CHECK(blockspec_open_ex(&bs, t, NULL, "cpu", &o, err, sizeof err) != 0 && strstr(err, "needs a drafter"), "%s", err);
    o.draft_vocab = "/nonexistent/v.json";
    CHECK(blockspec_open_ex(&bs, t, d, "cpu", &o, err, sizeof err) != 0 && strstr(err, "/nonexistent/v.json"), "%s", err);
}
