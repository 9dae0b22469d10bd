// The CLI as users run it: the successful paths (generate with sampling flags, plain and speculative,
// --json, --chat; tokenize both ways; tokenizer-train) checked for what they print, the end of the
// context (issue 29 item 3: a drafter used to return fewer tokens with exit 0 where plain decoding
// refuses), and usage errors: exit status 2 (1 for runtime errors) with a message naming the flag.
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "harness.h"
#include "test_util_models.h"


// "a,b,c" -> ids; returns the count.
static int parse_ids(const char *s, int32_t *ids, int cap) {
    int n = 0;
    while (*s && n < cap) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s) break;
        ids[n++] = (int32_t)v;
        s = *end == ',' ? end + 1 : end;
        if (*s == '\n') break;
    }
    return n;
}

// A model folder: the fixture target's weights and config with a tokenizer trained by the CLI on a small
// corpus (384 tokens, as the target's vocabulary), the ChatML specials, and a ChatML chat template.
static const char *text_model(int *failed_) {
    const char *dir = bs_test_tmpdir("cli_model");
    if (!dir) return NULL;
    char cmd[4096], out[4096], path[1024];
    snprintf(cmd, sizeof cmd, "ln -s \"$(realpath %s/target/model.safetensors)\" %s/ && cp %s/target/config.json %s/", bs_fixtures_dir(), dir,
             bs_fixtures_dir(), dir);
    if (system(cmd)) return NULL;
    snprintf(path, sizeof path, "%s/corpus.txt", dir);
    // Varied enough for the 125 merges a 384-token vocabulary (the target's) needs.
    FILE *f = fopen(path, "w");
    if (!f) return NULL;
    for (int i = 0; i < 400; i++)
        fprintf(f, "hello world %d, the quick brown fox jumps over the lazy dog; what is the answer? forty-two, %s!\n", i * 7919 % 1000,
                i % 3 ? "again" : "indeed");
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s tokenizer-train --vocab 384 --special '<|endoftext|>,<|im_start|>,<|im_end|>' %s --out %s/tokenizer.json",
             bs_cli_path(), path, dir);
    int rc = bs_test_run(cmd, 1, out, sizeof out);
    if (rc != 0) { fprintf(stderr, "  tokenizer-train exited %d: %s\n", rc, out); return NULL; }
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (tu_write_text(path, "{\"eos_token\": \"<|im_end|>\", \"chat_template\": \"{% for m in messages %}<|im_start|>{{ m.role }}\\n"
                            "{{ m.content }}<|im_end|>\\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\\n{% endif %}\"}")) return NULL;
    return dir;
}

TEST(cli_tokenize_round_trip_and_train) {
    const char *dir = text_model(failed_);
    CHECK(dir, "could not build the model folder");
    char cmd[4096], out[8192];
    int32_t ids[256];
    const char *texts[] = { "hello world", "the quick brown fox, again!", "<|im_start|>user\nwhat is the answer?<|im_end|>", "zebra 42 ü" };
    for (int i = 0; i < 4; i++) {
        snprintf(cmd, sizeof cmd, "%s tokenize -m %s -p '%s'", bs_cli_path(), dir, texts[i]);
        CHECK(bs_test_run(cmd, 0, out, sizeof out) == 0, "`%s` failed: %s", cmd, out);
        int n = parse_ids(out, ids, 256);
        CHECK(n > 0, "`%s` printed no ids: %s", cmd, out);
        for (int k = 0; k < n; k++) CHECK(ids[k] >= 0 && ids[k] < 384, "id %d outside the trained vocabulary of 384", ids[k]);
        if (i == 2) CHECK(ids[0] == 1 && ids[n - 1] == 2, "the special tokens were not recognised as ids 1 and 2: %s", out);
        if (i == 0) CHECK(n < 11, "a trained merge should shorten \"hello world\" below its 11 bytes (%d ids)", n);
        char list[2048] = "";
        for (int k = 0; k < n; k++) snprintf(list + strlen(list), sizeof list - strlen(list), k ? ",%d" : "%d", ids[k]);
        snprintf(cmd, sizeof cmd, "%s tokenize -m %s --decode %s", bs_cli_path(), dir, list);
        CHECK(bs_test_run(cmd, 0, out, sizeof out) == 0, "`%s` failed: %s", cmd, out);
        size_t len = strlen(out);
        if (len && out[len - 1] == '\n') out[--len] = 0;
        CHECK(!strcmp(out, texts[i]), "decode(encode(\"%s\")) = \"%s\"", texts[i], out);
    }
    // --skip-special leaves the ChatML markers out of the text (tokenizer-train puts the specials in the model
    // vocab as well, as Hugging Face's trainer does: they were decoded regardless until the loader marked them).
    snprintf(cmd, sizeof cmd, "%s tokenize -m %s -p A --no-special", bs_cli_path(), dir);
    CHECK(bs_test_run(cmd, 0, out, sizeof out) == 0 && parse_ids(out, ids, 256) == 1, "%s", out);
    snprintf(cmd, sizeof cmd, "%s tokenize -m %s --decode 1,%d,2 --skip-special", bs_cli_path(), dir, ids[0]);
    CHECK(bs_test_run(cmd, 0, out, sizeof out) == 0 && !strcmp(out, "A\n"), "the specials were not skipped: \"%s\"", out);
}

// generate --json once; returns the parsed object (NULL on failure, with the output printed).
static cJSON *generate_json(const char *args, char *out, size_t cap) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s generate %s --json", bs_cli_path(), args);
    int rc = bs_test_run(cmd, 0, out, cap);
    cJSON *j = rc == 0 ? cJSON_Parse(out) : NULL;
    if (!j) { bs_test_run(cmd, 1, out, cap); fprintf(stderr, "  `%s` exited %d: %s\n", cmd, rc, out); }
    return j;
}
static int json_ids(const cJSON *j, int32_t *ids, int cap) {
    const cJSON *a = cJSON_GetObjectItem(j, "output_ids"), *x;
    int n = 0;
    cJSON_ArrayForEach(x, a) if (n < cap) ids[n++] = (int32_t)x->valuedouble;
    return n;
}
static const char *json_str(const cJSON *j, const char *k) { const cJSON *x = cJSON_GetObjectItem(j, k); return cJSON_IsString(x) ? x->valuestring : ""; }
static double json_num(const cJSON *j, const char *k) { const cJSON *x = cJSON_GetObjectItem(j, k); return cJSON_IsNumber(x) ? x->valuedouble : -1; }

// Sampling flags through the CLI, plain and speculative, with text out: the same seed gives the same
// tokens, the JSON's text is the decode of its ids, the stated count and finish reason hold, and --chat
// feeds exactly the ChatML rendering of the message.
TEST(cli_generate_sampling_json_and_chat) {
    const char *dir = text_model(failed_);
    CHECK(dir, "could not build the model folder");
    char args[2048], out[16384], out2[16384], cmd[4096];
    int32_t a[64], b[64];
    for (int spec = 0; spec < 2; spec++) {
        char dflag[1200] = "";
        if (spec) snprintf(dflag, sizeof dflag, "-d %s/dspark --draft-max 3", bs_fixtures_dir());
        snprintf(args, sizeof args, "-m %s %s -p 'hello world' -n 12 --temp 0.8 --top-k 40 --top-p 0.9 --seed 5 --ignore-eos", dir, dflag);
        cJSON *j = generate_json(args, out, sizeof out), *k = generate_json(args, out2, sizeof out2);
        CHECK(j && k, "generate failed");
        int na = json_ids(j, a, 64), nb = json_ids(k, b, 64);
        CHECK(na == 12 && nb == 12 && !memcmp(a, b, sizeof(int32_t) * 12), "%s: the same seed gave different outputs", spec ? "speculative" : "plain");
        CHECK(!strcmp(json_str(j, "finish_reason"), "length"), "finish_reason %s", json_str(j, "finish_reason"));
        const cJSON *st = cJSON_GetObjectItem(j, "stats");
        CHECK(json_num(st, "n_generated") == 12 && (!spec || json_num(st, "rounds") >= 1), "stats: %s", out);
        // The text field is the decode of the ids (as `tokenize --decode` gives it).
        char list[1024] = "";
        for (int i = 0; i < na; i++) snprintf(list + strlen(list), sizeof list - strlen(list), i ? ",%d" : "%d", a[i]);
        snprintf(cmd, sizeof cmd, "%s tokenize -m %s --decode %s --skip-special", bs_cli_path(), dir, list);
        CHECK(bs_test_run(cmd, 0, out2, sizeof out2) == 0, "%s", out2);
        size_t len = strlen(out2);
        if (len && out2[len - 1] == '\n') out2[--len] = 0;
        CHECK(!strcmp(json_str(j, "text"), out2), "JSON text \"%s\" != decode of its ids \"%s\"", json_str(j, "text"), out2);
        // Without --json the same request streams that text (plus a newline).
        snprintf(cmd, sizeof cmd, "%s generate %s", bs_cli_path(), args);
        CHECK(bs_test_run(cmd, 0, out2, sizeof out2) == 0, "%s", out2);
        CHECK(strlen(out2) == len + 1 && !strncmp(out2, json_str(j, "text"), len), "streamed \"%s\", JSON text \"%s\"", out2, json_str(j, "text"));
        cJSON_Delete(j); cJSON_Delete(k);
    }
    // --chat: the prompt is the ChatML rendering of the user message, tokenised with its specials.
    snprintf(args, sizeof args, "-m %s -p 'what is the answer?' --chat -n 4 --ignore-eos", dir);
    cJSON *j = generate_json(args, out, sizeof out);
    CHECK(j, "generate --chat failed");
    char path[1024];
    snprintf(path, sizeof path, "%s/chat.txt", dir);
    CHECK(tu_write_text(path, "<|im_start|>user\nwhat is the answer?<|im_end|>\n<|im_start|>assistant\n") == 0);
    snprintf(cmd, sizeof cmd, "%s tokenize -m %s --prompt-file %s", bs_cli_path(), dir, path);
    CHECK(bs_test_run(cmd, 0, out2, sizeof out2) == 0, "%s", out2);
    int n_chat = parse_ids(out2, a, 64);
    double n_prompt = json_num(cJSON_GetObjectItem(j, "stats"), "n_prompt");
    CHECK(n_chat > 5 && n_prompt == n_chat, "--chat fed %g prompt tokens; the ChatML rendering is %d", n_prompt, n_chat);
    cJSON_Delete(j);
}

// Issue 29 item 3 through the CLI: a request that does not fit the context is refused with the same
// message and status with or without a drafter (it used to return 10 tokens with exit 0), and -n -1
// fills the context on both paths with the same greedy ids and finish_reason "context".
TEST(cli_context_end_same_with_drafter) {
    char cmd[4096], plain[4096], spec[4096];
    const char *F = bs_fixtures_dir();
    const char *reqs[] = { "--prompt-ids 1,2,3 -c 12 -n 100", "--prompt-ids 1,2,3 -n 600", "--prompt-ids 1,2,3 -c 12 -n 11" };
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "%s generate -m %s/target %s", bs_cli_path(), F, reqs[i]);
        int rp = bs_test_run(cmd, 1, plain, sizeof plain);
        snprintf(cmd, sizeof cmd, "%s generate -m %s/target -d %s/dspark %s", bs_cli_path(), F, F, reqs[i]);
        int rs = bs_test_run(cmd, 1, spec, sizeof spec);
        CHECK(rp == 1 && rs == 1, "`%s`: plain exited %d, speculative %d (want 1 for both): %s", reqs[i], rp, rs, spec);
        CHECK(!strcmp(plain, spec) && strstr(plain, "exceed the context length"), "messages differ: plain \"%s\", speculative \"%s\"", plain, spec);
    }
    int32_t a[64], b[64];
    for (int ctx = 10; ctx <= 13; ctx++) {
        char args[2048];
        snprintf(args, sizeof args, "-m %s/target --prompt-ids 1,2,3 -c %d -n -1", F, ctx);
        cJSON *jp = generate_json(args, plain, sizeof plain);
        snprintf(args, sizeof args, "-m %s/target -d %s/dflash --prompt-ids 1,2,3 -c %d -n -1", F, F, ctx);
        cJSON *js = generate_json(args, spec, sizeof spec);
        CHECK(jp && js, "generate -n -1 failed");
        int na = json_ids(jp, a, 64), nb = json_ids(js, b, 64);
        CHECK(na == ctx - 2 && nb == na && !memcmp(a, b, sizeof(int32_t) * na), "-c %d -n -1: plain %d tokens, speculative %d (want %d, equal)", ctx, na, nb, ctx - 2);
        CHECK(!strcmp(json_str(jp, "finish_reason"), "context") && !strcmp(json_str(js, "finish_reason"), "context"),
              "finish reasons %s / %s", json_str(jp, "finish_reason"), json_str(js, "finish_reason"));
        cJSON_Delete(jp); cJSON_Delete(js);
    }
    // The exact fill (-c 12 -n 10 after 3 prompt tokens) runs on both paths and says "length".
    char args[2048];
    snprintf(args, sizeof args, "-m %s/target -d %s/dspark --prompt-ids 1,2,3 -c 12 -n 10", F, F);
    cJSON *js = generate_json(args, spec, sizeof spec);
    CHECK(js && json_ids(js, b, 64) == 10 && !strcmp(json_str(js, "finish_reason"), "length"), "%s", spec);
    cJSON_Delete(js);
}

// Usage and runtime errors beyond tests/test_bad_input.c's: each exits with the stated status and a
// message that names the flag or file.
TEST(cli_usage_errors) {
    const char *F = bs_fixtures_dir();
    const char *B = bs_cli_path();
    struct { const char *args; int status; const char *needle; } cases[] = {
        { "frobnicate", 2, "frobnicate" },
        { "generate -m %s/target", 2, "exactly one of" },
        { "generate -m %s/target --prompt-ids 1,2 -p hi", 2, "exactly one of" },
        { "generate -m %s/target --prompt-ids 1,2 --chat", 2, "--chat needs a text prompt" },
        { "generate -m %s/target --prompt-ids 1,2 --bogus", 2, "--bogus" },
        { "generate -m %s/target --prompt-ids 1,2 -n", 2, "-n" },
        { "generate -m %s/target --prompt-ids 1,2 -n abc", 2, "-n" },
        { "generate -m %s/target --prompt-ids 1,2 -n -2", 2, "-n" },
        { "generate -m %s/target --prompt-ids 1,2 -c 0", 2, "-c" },
        { "generate -m %s/target --prompt-ids 1,2 --temp -1", 2, "--temp" },
        { "generate -m %s/target --prompt-ids 1,2 --top-p 0", 2, "--top-p" },
        { "generate -m %s/target --prompt-ids 1,2 --top-p 1.5", 2, "--top-p" },
        { "generate -m %s/target --prompt-ids 1,2 --top-k -3", 2, "--top-k" },
        { "generate -m %s/target --prompt-ids 1,2 --seed x", 2, "--seed" },
        { "generate -m %s/target --prompt-ids 1,2 --draft-max 0", 2, "--draft-max" },
        { "generate -m %s/target --prompt-ids 1,x", 2, "--prompt-ids" },
        { "generate -m %s/target --prompt-ids 1,2 --draft-vocab /nonexistent.json", 1, "--draft-vocab needs a drafter" },
        { "generate -m %s/target --prompt-ids 1,2 --device tpu", 1, "tpu" },
        { "generate -m %s/target -p hello", 1, "tokenizer" },
        { "generate -m %s/target --prompt-ids 1,2 -d /nonexistent/drafter", 1, "/nonexistent/drafter" },
        { "tokenize -p hello", 2, "-m" },
        { "tokenize -m /nonexistent/tok.json -p hello", 1, "/nonexistent/tok.json" },
        { "tokenizer-train --out /tmp/never.json", 2, "--vocab" },
        { "tokenizer-train --vocab 300 --out /tmp/never.json /nonexistent/corpus.txt", 1, "/nonexistent/corpus.txt" },
    };
    int n = (int)(sizeof cases / sizeof *cases);
    for (int i = 0; i < n; i++) {
        char args[1024], cmd[2048], out[8192];
        snprintf(args, sizeof args, cases[i].args, F);
        snprintf(cmd, sizeof cmd, "%s %s", B, args);
        int st = bs_test_run(cmd, 1, out, sizeof out);
        CHECK(st == cases[i].status, "`%s` exited %d (want %d): %s", args, st, cases[i].status, out);
        CHECK(strstr(out, cases[i].needle), "`%s`: the message does not name \"%s\": %s", args, cases[i].needle, out);
    }
    // Without -m, generate runs the built-in model; where there is none (BS_MODELS names no folder), it says so.
    {
        char cmd[2048], out[8192];
        snprintf(cmd, sizeof cmd, "BS_MODELS=/nonexistent %s generate --prompt-ids 1,2", B);
        int st = bs_test_run(cmd, 1, out, sizeof out);
        CHECK(st == 2 && strstr(out, "no built-in model"), "`%s` exited %d: %s", cmd, st, out);
    }
    printf("  %d error cases\n", n + 1);
}

// The built-in model (models/blockspec-30m with its drafter): `generate` without -m uses it; the speculative
// output equals plain decoding (-d none) token for token on code, prose and chat prompts, the drafter is
// actually used (accepts drafts), and --json reports tau and the decoding speed.
TEST(cli_builtin_model_speculative_equals_plain) {
    static const char *prompts[] = { "static int", "It is a truth universally acknowledged", "What is the Debian package vim?" },
                      *extra[] = { "", "", "--chat" };
    char cmd[1024], a[65536], b[65536];
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "%s generate -p \"%s\" %s -n 48 --ignore-eos --print-ids -d none", bs_cli_path(), prompts[i], extra[i]);
        CHECK(bs_test_run(cmd, 0, a, sizeof a) == 0, "%s failed", cmd);
        snprintf(cmd, sizeof cmd, "%s generate -p \"%s\" %s -n 48 --ignore-eos --print-ids", bs_cli_path(), prompts[i], extra[i]);
        CHECK(bs_test_run(cmd, 0, b, sizeof b) == 0, "%s failed", cmd);
        int32_t x[64], y[64];
        int nx = parse_ids(a, x, 64), ny = parse_ids(b, y, 64);
        CHECK(nx == 48 && ny == 48 && !memcmp(x, y, sizeof x[0] * 48), "prompt %d: speculative output differs from plain (%d / %d ids)", i, nx, ny);
    }
    snprintf(cmd, sizeof cmd, "%s generate -p \"static int\" -n 48 --ignore-eos --json", bs_cli_path());
    CHECK(bs_test_run(cmd, 0, a, sizeof a) == 0, "%s failed", cmd);
    cJSON *j = cJSON_Parse(a), *st = j ? cJSON_GetObjectItem(j, "stats") : NULL;
    CHECK(st, "--json printed no stats: %.200s", a);
    cJSON *tau = cJSON_GetObjectItem(st, "tau"), *tps = cJSON_GetObjectItem(st, "decode_tok_per_s");
    CHECK(cJSON_IsNumber(tau) && tau->valuedouble > 2.5, "the built-in drafter accepted too little (measured 3.6): tau %g", cJSON_IsNumber(tau) ? tau->valuedouble : -1);
    CHECK(cJSON_IsNumber(tps) && tps->valuedouble > 0, "no decode_tok_per_s");
    cJSON_Delete(j);
}

// generate --prompts FILE: one JSON line per prompt in input order, each with exactly the tokens a single
// `generate` gives it (greedy and seeded sampling, text and id prompts, per-line settings) whatever runs
// beside it; bad lines are refused with the line and the field named.
TEST(cli_generate_prompts_batch) {
    const char *dir = bs_test_tmpdir("prompts");
    CHECK(dir);
    char path[1100], cmd[2048], out[65536], one[65536];
    snprintf(path, sizeof path, "%s/p.jsonl", dir);
    CHECK(tu_write_text(path,
        "{\"prompt\": \"static int\"}\n"
        "{\"prompt_ids\": [10, 20, 30], \"max_tokens\": 5}\n"
        "\n"
        "{\"prompt\": \"It is a truth\", \"temperature\": 0.8, \"seed\": 3, \"max_tokens\": 12}\n"
        "{\"prompt\": \"int main(void) {\", \"temperature\": 1.0, \"top_k\": 40, \"top_p\": 0.9, \"seed\": 11}\n"
        "{\"prompt\": \"The\", \"max_tokens\": 30}\n") == 0);
    snprintf(cmd, sizeof cmd, "%s generate --prompts %s -n 20 --ignore-eos --max-concurrency 3", bs_cli_path(), path);
    CHECK(bs_test_run(cmd, 0, out, sizeof out) == 0, "%s failed", cmd);
    const char *single[] = {
        "-p \"static int\" -n 20", "--prompt-ids 10,20,30 -n 5", "-p \"It is a truth\" --temp 0.8 --seed 3 -n 12",
        "-p \"int main(void) {\" --temp 1.0 --top-k 40 --top-p 0.9 --seed 11 -n 20", "-p \"The\" -n 30" };
    char *line = out;
    for (int i = 0; i < 5; i++) {
        char *nl = strchr(line, '\n');
        CHECK(nl, "only %d output lines: %s", i, out);
        *nl = 0;
        cJSON *j = cJSON_Parse(line), *ids = j ? cJSON_GetObjectItem(j, "ids") : NULL, *idx = j ? cJSON_GetObjectItem(j, "index") : NULL;
        CHECK(ids && cJSON_IsNumber(idx) && idx->valueint == i && cJSON_GetObjectItem(j, "text") && cJSON_GetObjectItem(j, "stats"),
              "line %d: %s", i, line);
        snprintf(cmd, sizeof cmd, "%s generate %s --ignore-eos --print-ids", bs_cli_path(), single[i]);
        CHECK(bs_test_run(cmd, 0, one, sizeof one) == 0, "%s failed", cmd);
        int32_t want[64];
        int n = parse_ids(one, want, 64);
        CHECK(n == cJSON_GetArraySize(ids), "prompt %d: %d ids in the batch, %d alone", i, cJSON_GetArraySize(ids), n);
        for (int k = 0; k < n; k++) CHECK(cJSON_GetArrayItem(ids, k)->valueint == want[k], "prompt %d: token %d differs from a single run", i, k);
        cJSON_Delete(j);
        line = nl + 1;
    }
    static const struct { const char *text, *want; } bad[] = {
        { "{\"prompt\": \"x\", \"foo\": 1}\n", "line 1: unknown field \"foo\"" },
        { "{\"prompt\": \"x\"}\n{\"prompt_ids\": [1, -2]}\n", "line 2: field \"prompt_ids\"" },
        { "{\"prompt\": \"x\", \"temperature\": \"hot\"}\n", "line 1: field \"temperature\"" },
        { "{\"prompt\": \"x\", \"top_p\": 0}\n", "line 1: field \"top_p\"" },
        { "{\"prompt\": \"x\", \"max_tokens\": 1.5}\n", "line 1: field \"max_tokens\"" },
        { "{\"prompt_ids\": [1], \"prompt\": \"a\"}\n", "line 1: give exactly one of" },
        { "[1, 2]\n", "line 1: expected a JSON object" },
        { "{\"prompt\": \"x\"\n", "line 1: invalid JSON" },
        { "{\"prompt_ids\": [1, 99999]}\n", "line 1: token id 99999" },
        { "\n\n", "no prompts" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(tu_write_text(path, bad[i].text) == 0);
        snprintf(cmd, sizeof cmd, "%s generate --prompts %s", bs_cli_path(), path);
        CHECK(bs_test_run(cmd, 1, out, sizeof out) == 1 && strstr(out, bad[i].want), "bad input %zu: want \"%s\", got: %s", i, bad[i].want, out);
    }
}
