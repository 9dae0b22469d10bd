// Bad input never crashes: each case below must exit with status 1 and a message naming the file,
// tensor or field. Cases are run through the CLI, as a user would meet them.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"
#include "test_util_models.h"


static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) { fwrite(data, 1, n, f); fclose(f); }
}

// A model dir whose config is the fixture's and whose weights file is built from a raw header + data.
static const char *raw_model(const char *header, size_t data_bytes, long header_len_override) {
    const char *dir = bs_test_tmpdir("bad");
    if (!dir) return NULL;
    char cmd[1024], path[512];
    snprintf(cmd, sizeof cmd, "cp %s/target/config.json %s/", bs_fixtures_dir(), dir);
    if (system(cmd)) return NULL;
    size_t hl = strlen(header);
    unsigned char *buf = calloc(1, 8 + hl + data_bytes);
    uint64_t len = header_len_override >= 0 ? (uint64_t)header_len_override : hl;
    memcpy(buf, &len, 8);
    memcpy(buf + 8, header, hl);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_file(path, buf, 8 + hl + data_bytes);
    free(buf);
    return dir;
}

#define EXPECT_ERROR(cmd, needle) do {                                                        \
    char out_[8192]; int st_ = bs_test_run(cmd, 1, out_, sizeof out_);                           \
    CHECK(st_ == 1, "`%s` exited with %d (want 1: a clean error); output: %s", cmd, st_, out_); \
    CHECK(strstr(out_, needle), "`%s`: message lacks \"%s\": %s", cmd, needle, out_);         \
} while (0)

// `dump` of model dir into out_dir (a test's temp dir: these runs should fail before writing, but if one
// does write, the file goes where the test's cleanup removes it).
static void dump_cmd(char *cmd, size_t cap, const char *dir, const char *out_dir) {
    snprintf(cmd, cap, "%s dump -m %s --prompt-ids 1,2,3 --out %s/out.safetensors", bs_cli_path(), dir, out_dir);
}

TEST(bad_safetensors_headers) {
    char cmd[2048];
    struct { const char *header; size_t data; long hl; const char *needle; } cases[] = {
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, -1, "outside the data section" },   // truncated data
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16, 1L << 40, "runs past the end" },     // header length past EOF
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", 24, -1, "overlap" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,0]}}", 16, -1, "outside the data section" },   // reversed offsets
        { "{\"a\":{\"dtype\":\"Q4_K\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16, -1, "unknown dtype 'Q4_K'" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[0,16]}}", 16, -1, "need" },                       // size mismatch
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}}", 16, -1, "invalid shape" },
        { "[1,2,3]", 0, -1, "not a JSON object" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}", 16, -1, "invalid JSON" },               // broken JSON
        { "{\"a\":7}", 0, -1, "is not an object" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *dir = raw_model(cases[i].header, cases[i].data, cases[i].hl);
        CHECK(dir);
        dump_cmd(cmd, sizeof cmd, dir, dir);
        EXPECT_ERROR(cmd, cases[i].needle);
        EXPECT_ERROR(cmd, "model.safetensors");   // the message names the file
    }
    // A file shorter than the 8-byte length prefix.
    const char *dir = raw_model("", 0, -1);
    CHECK(dir);
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_file(path, "abc", 3);
    dump_cmd(cmd, sizeof cmd, dir, dir);
    EXPECT_ERROR(cmd, "too short");
}

// Checkpoints with the right container but the wrong contents for the config.
TEST(bad_checkpoint_contents) {
    char cmd[4096];
    const char *dir = bs_test_tmpdir("badck");
    CHECK(dir);
    // Write a random checkpoint, then make copies with one thing wrong in config.json.
    snprintf(cmd, sizeof cmd, "%s make-random -c %s/target/config.json --out %s/ok", bs_cli_path(), bs_fixtures_dir(), dir);
    CHECK(system(cmd) == 0);
    struct { const char *sed, *needle; } cases[] = {
        { "s/\"hidden_size\": 64/\"hidden_size\": 32/", "expected [384, 32]" },                    // wrong shapes
        { "s/\"num_hidden_layers\": 4/\"num_hidden_layers\": 5/", "missing tensor 'model.layers.4" }, // missing tensor
        { "s/\"vocab_size\": 384/\"vocab_size\": \"many\"/", "\"vocab_size\" must be an integer" },
        { "s/\"Qwen3ForCausalLM\"/\"BertModel\"/", "architectures[0] is \"BertModel\"" },
        { "s/\"num_key_value_heads\": 2/\"num_key_value_heads\": 3/", "multiple of num_key_value_heads" },
        { "s/\"rope_type\": \"default\"/\"rope_type\": \"yarn\"/", "\"rope_parameters.rope_type\" is \"yarn\"" },
        { "s/{/[/", "invalid JSON" },
        { "/\"hidden_size\"/d", "missing field \"hidden_size\"" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(cmd, sizeof cmd, "rm -rf %s/c && cp -r %s/ok %s/c && sed -i '%s' %s/c/config.json", dir, dir, dir, cases[i].sed, dir);
        CHECK(system(cmd) == 0, "%s", cmd);
        char d2[512]; snprintf(d2, sizeof d2, "%s/c", dir);
        dump_cmd(cmd, sizeof cmd, d2, dir);
        EXPECT_ERROR(cmd, cases[i].needle);
    }
    // An untied config whose checkpoint lacks lm_head.weight.
    snprintf(cmd, sizeof cmd, "sed -i 's/\"tie_word_embeddings\": false/\"tie_word_embeddings\": true/' %s/ok/config.json && "
             "%s make-random -c %s/ok/config.json --out %s/tied && sed -i 's/\"tie_word_embeddings\": true/\"tie_word_embeddings\": false/' %s/tied/config.json",
             dir, bs_cli_path(), dir, dir, dir);
    CHECK(system(cmd) == 0, "%s", cmd);
    char d3[512]; snprintf(d3, sizeof d3, "%s/tied", dir);
    dump_cmd(cmd, sizeof cmd, d3, dir);
    EXPECT_ERROR(cmd, "missing tensor 'lm_head.weight'");
    // No weights at all, and no folder at all.
    snprintf(cmd, sizeof cmd, "rm %s/tied/model.safetensors", dir);
    CHECK(system(cmd) == 0);
    dump_cmd(cmd, sizeof cmd, d3, dir);
    EXPECT_ERROR(cmd, "no model.safetensors");
    dump_cmd(cmd, sizeof cmd, "/nonexistent/model", dir);
    EXPECT_ERROR(cmd, "/nonexistent/model");
    // A sharded checkpoint whose index names a tensor its shard lacks.
    snprintf(cmd, sizeof cmd, "%s make-random -c %s/target/config.json --out %s/sh --shards 2 && "
             "sed -i 's/\"model.norm.weight\"/\"model.norm.weight\": \"model-00001-of-00002.safetensors\", \"extra.weight\"/' %s/sh/model.safetensors.index.json",
             bs_cli_path(), bs_fixtures_dir(), dir, dir);
    CHECK(system(cmd) == 0, "%s", cmd);
    char d4[512]; snprintf(d4, sizeof d4, "%s/sh", dir);
    dump_cmd(cmd, sizeof cmd, d4, dir);
    EXPECT_ERROR(cmd, "index says tensor");
}

TEST(bad_prompts_and_flags) {
    char cmd[2048], m[1024];
    snprintf(m, sizeof m, "%s/target", bs_fixtures_dir());
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 1,2,384 -n 2", bs_cli_path(), m);
    EXPECT_ERROR(cmd, "outside the vocabulary");
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 1,2,3,4,5,6 -c 4 -n 2", bs_cli_path(), m);
    EXPECT_ERROR(cmd, "exceed the context length");
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 1,2,3 -n 600", bs_cli_path(), m);
    EXPECT_ERROR(cmd, "exceed the context length");
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 1,x,3 -n 2", bs_cli_path(), m);
    char out[4096];
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 2 && strstr(out, "--prompt-ids"), "bad id list: %s", out);
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 1,2 --temp -1", bs_cli_path(), m);
    CHECK(bs_test_run(cmd, 1, out, sizeof out) == 2 && strstr(out, "--temp"), "bad temperature: %s", out);
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 1,2 --device tpu", bs_cli_path(), m);
    EXPECT_ERROR(cmd, "unknown device 'tpu'");
    // draft vocabularies: no drafter, a missing file, an id past the vocabulary
    snprintf(cmd, sizeof cmd, "%s generate -m %s --prompt-ids 1,2 --draft-vocab /nonexistent.json", bs_cli_path(), m);
    EXPECT_ERROR(cmd, "needs a drafter");
    snprintf(cmd, sizeof cmd, "%s generate -m %s -d %s/dflash --prompt-ids 1,2 --draft-vocab /nonexistent/v.json", bs_cli_path(), m, bs_fixtures_dir());
    EXPECT_ERROR(cmd, "/nonexistent/v.json");
    const char *dir = bs_test_tmpdir("badvocab");
    CHECK(dir);
    char vp[600];
    snprintf(vp, sizeof vp, "%s/v.json", dir);
    CHECK(tu_write_text(vp, "[1, 2, 384]") == 0);
    snprintf(cmd, sizeof cmd, "%s generate -m %s -d %s/dspark --prompt-ids 1,2 --draft-vocab %s", bs_cli_path(), m, bs_fixtures_dir(), vp);
    EXPECT_ERROR(cmd, "entry 2 (384) is not a token id in [0, 384)");
}
