// The bad-input catalogue: one table of (input, expected clear error), run through the CLI as a user or
// attacker would meet it. Each case must exit with the expected non-zero status (never a signal), print a
// message naming the file or field, print no sanitizer report, and stay within a time and memory bound
// (RLIMIT_CPU, a wall-clock kill, RLIMIT_AS outside sanitizer builds, and peak RSS measured by wait4).
// docs/reliability.md lists the catalogue; add a row here for every new class of bad input.
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"
#include "test_util_models.h"

#define CAT_WALL_S 30          // a case running longer is a hang
#define CAT_CPU_S 20
#define CAT_MAX_RSS_MB 1024    // the inputs are a few KB to 12 MB: nothing needs a GB

// Setup runs in the case's fresh folder with sh; %F is the fixtures folder. `st` (optional): a
// safetensors header written as m/model.safetensors with 64 zero bytes of data after it.
// The command runs there too: %B is the CLI, %F the fixtures. exit: the status expected (1 for an input
// error, 2 for a usage error). Both needles must appear in the output.
typedef struct { const char *name, *setup, *st, *cmd; int exit; const char *needle, *needle2; } bad_case;

#define TARGET "mkdir m && cp %F/target/config.json m/ && "
#define GOOD_CK "cp -r %F/target m && "
#define GEN "%B generate -m m --prompt-ids 1,2,3 -n 2"
#define DSPARK "mkdir d && cp %F/dspark/config.json %F/dspark/model.safetensors d/ && "
#define DGEN "%B generate -m %F/target -d d --prompt-ids 1,2,3 -n 2 --confidence-threshold 0.5"
// A DSpark v1 adapter folder d/ holding only this dspark.json (docs/dspark-v1.md).
#define V1J(json) "mkdir d && printf '%s' '" json "' > d/dspark.json"
// A real 28-token corpus c.bsc (a tokenizer trained on one sentence, then `tokenize --corpus`), and the
// command that opens it first of all: a corrupt corpus is refused before any model is built.
#define BSC "printf 'hello world, the corpus says hello again and again' > a.txt && %B tokenizer-train --vocab 270 --out tok.json a.txt >/dev/null && " \
            "%B tokenize --corpus c.bsc -m tok.json --no-eos a.txt >/dev/null && "
#define PATCH(at, bytes) "printf '" bytes "' | dd of=c.bsc bs=1 seek=" #at " conv=notrunc 2>/dev/null"
#define TRAIN "%B train-target --data c.bsc --out o --config %F/target/config.json --tokenizer tok.json"
#define TOKJ(body) "printf '%s' '" body "' > tok.json"

static const bad_case CASES[] = {
    // --- tokenizer.json ---
    { "vocab id 2e9 (sized tables by itself: 81 s, 15.7 GB)", TOKJ("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":2000000000},\"merges\":[]}}"), NULL,
      "%B tokenize -m tok.json -p ab", 1, "tok.json", "model.vocab[\"b\"] is not a valid id" },
    { "added token id 2e9", TOKJ("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"added_tokens\":[{\"id\":2000000000,\"content\":\"<x>\"}]}"), NULL,
      "%B tokenize -m tok.json -p a", 1, "tok.json", "added_tokens[0] needs an integer \"id\"" },
    { "vocab id 1.5", TOKJ("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1.5},\"merges\":[]}}"), NULL,
      "%B tokenize -m tok.json -p ab", 1, "tok.json", "model.vocab[\"b\"]" },
    { "post-processor special id -5", TOKJ("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"post_processor\":{\"type\":\"TemplateProcessing\","
      "\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[-5]}}}}"), NULL,
      "%B tokenize -m tok.json -p a", 1, "tok.json", "post_processor.special_tokens[\"<s>\"].ids[0] is not a token id" },
    { "post-processor special id past the vocabulary", TOKJ("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"post_processor\":{\"type\":\"TemplateProcessing\","
      "\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[999999]}}}}"), NULL,
      "%B tokenize -m tok.json -p a", 1, "tok.json", "post_processor.special_tokens" },
    { "unknown Split behavior (leaked its regex)", TOKJ("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"Split\","
      "\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Sideways\"}}"), NULL, "%B tokenize -m tok.json -p a", 1, "tok.json", "Split behavior \"Sideways\"" },
    { "regex that does not compile", TOKJ("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"Split\","
      "\"pattern\":{\"Regex\":\"(a\"},\"behavior\":\"Isolated\"}}"), NULL, "%B tokenize -m tok.json -p a", 1, "tok.json: Split pre_tokenizer", "does not compile" },
    { "unsupported model type", TOKJ("{\"model\":{\"type\":\"WordPiece\"}}"), NULL, "%B tokenize -m tok.json -p a", 1, "tok.json", "WordPiece" },
    { "trailing data after tokenizer.json", TOKJ("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}} trailing"), NULL,
      "%B tokenize -m tok.json -p a", 1, "tok.json", "unexpected data after the JSON value" },
    { "NUL in a vocab token", TOKJ("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\\u0000b\":0},\"merges\":[]}}"), NULL,
      "%B tokenize -m tok.json -p a", 1, "tok.json", "NUL character" },
    { "broken tokenizer_config.json", "mkdir t && " TOKJ("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}") " && mv tok.json t/tokenizer.json && printf '{\"eos_token\":' > t/tokenizer_config.json", NULL,
      "%B tokenize -m t -p a", 1, "tokenizer_config.json", "invalid JSON" },
    { "tokenizer.json is a FIFO (blocked forever)", "mkfifo tok.json", NULL, "%B tokenize -m tok.json -p a", 1, "tok.json", "not a regular file (a FIFO)" },
    { "tokenizer.json is a folder", "mkdir -p t/tokenizer.json", NULL, "%B tokenize -m t -p a", 1, "t/tokenizer.json", "not a regular file (a folder)" },
    { "tokenizer.json missing", "mkdir t", NULL, "%B tokenize -m t -p a", 1, "t/tokenizer.json", "cannot open" },
    { "prompt file is a FIFO", TOKJ("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}") " && mkfifo p.txt", NULL,
      "%B tokenize -m tok.json --prompt-file p.txt", 1, "p.txt", "not a regular file (a FIFO)" },
    // --- config.json / generation_config.json ---
    { "eos_token_id 1e20 in config.json (UB cast)", GOOD_CK "sed -i 's/\"eos_token_id\": null/\"eos_token_id\": 1e20/' m/config.json", NULL, GEN, 1,
      "m/config.json", "field \"eos_token_id\" must be an integer" },
    { "eos_token_id [1e20] in generation_config.json", GOOD_CK "printf '{\"eos_token_id\": [1, 1e20]}' > m/generation_config.json", NULL, GEN, 1,
      "m/generation_config.json", "field \"eos_token_id\" must list integers" },
    { "eos_token_id 3.5", GOOD_CK "printf '{\"eos_token_id\": 3.5}' > m/generation_config.json", NULL, GEN, 1, "generation_config.json", "eos_token_id" },
    { "trailing data after config.json", GOOD_CK "printf 'x' >> m/config.json", NULL, GEN, 1, "m/config.json", "unexpected data after the JSON value" },
    { "two objects in generation_config.json", GOOD_CK "printf '{}' >> m/generation_config.json", NULL, GEN, 1, "generation_config.json", "unexpected data" },
    { "config.json nested 100000 deep", "mkdir m && cp %F/target/model.safetensors m/ && python3 -c \"print('{\\\"a\\\":'*100000)\" > m/config.json", NULL, GEN, 1, "m/config.json", "invalid JSON" },
    { "config.json is a FIFO", "mkdir m && mkfifo m/config.json", NULL, GEN, 1, "m/config.json", "not a regular file" },
    { "hidden_size 1e300", GOOD_CK "sed -i 's/\"hidden_size\": 64/\"hidden_size\": 1e300/' m/config.json", NULL, GEN, 1, "m/config.json", "\"hidden_size\" must be an integer" },
    { "vocab_size a string", GOOD_CK "sed -i 's/\"vocab_size\": 384/\"vocab_size\": \"many\"/' m/config.json", NULL, GEN, 1, "m/config.json", "\"vocab_size\" must be an integer" },
    { "head_dim defaulting to 2 / 4 = 0 (found by fuzzing)", GOOD_CK "sed -i '/\"head_dim\"/d; s/\"hidden_size\": 64/\"hidden_size\": 2/' m/config.json", NULL, GEN, 1,
      "m/config.json: head_dim defaults to hidden_size / num_attention_heads = 2 / 4 = 0", "" },
    { "a number with a leading zero", GOOD_CK "sed -i 's/\"hidden_size\": 64/\"hidden_size\": 064/' m/config.json", NULL, GEN, 1, "m/config.json: malformed number", "" },
    { "unsupported architecture", GOOD_CK "sed -i 's/Qwen3ForCausalLM/BertModel/' m/config.json", NULL, GEN, 1, "m/config.json", "architectures[0] is \"BertModel\"" },
    { "yarn RoPE", GOOD_CK "sed -i 's/\"rope_type\": \"default\"/\"rope_type\": \"yarn\"/' m/config.json", NULL, GEN, 1, "m/config.json", "\"rope_parameters.rope_type\" is \"yarn\"" },
    { "drafter block_size a string inside dflash_config", "mkdir d && sed 's/\"block_size\": [0-9]*/\"block_size\": \"eight\"/' %F/dflash/config.json > d/config.json && cp %F/dflash/model.safetensors d/", NULL,
      "%B generate -m %F/target -d d --prompt-ids 1,2,3 -n 2", 1, "d/config.json", "block_size\" must be an integer" },
    // --- safetensors ---
    { "shard is a FIFO (blocked forever)", TARGET "mkfifo m/model.safetensors", NULL, GEN, 1, "m/model.safetensors", "not a regular file (a FIFO)" },
    { "tensor name with an embedded NUL", TARGET "true", "{\"model.norm.weight\\u0000junk\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", GEN, 1,
      "m/model.safetensors", "NUL character" },
    { "header length past the end", TARGET "printf '\\377\\377\\377\\377\\377\\377\\0\\0{}' > m/model.safetensors", NULL, GEN, 1, "m/model.safetensors", "runs past the end" },
    { "file shorter than the length prefix", TARGET "printf abc > m/model.safetensors", NULL, GEN, 1, "m/model.safetensors", "too short" },
    { "data_offsets not integers", TARGET "true", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0.5,16.5]}}", GEN, 1, "m/model.safetensors", "not integers" },
    { "data_offsets past the data", TARGET "true", "{\"a\":{\"dtype\":\"F32\",\"shape\":[100],\"data_offsets\":[0,400]}}", GEN, 1, "m/model.safetensors", "outside the data section" },
    { "shape 1e300", TARGET "true", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,16]}}", GEN, 1, "m/model.safetensors", "invalid shape" },
    { "shape product overflowing", TARGET "true", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,16]}}", GEN, 1, "m/model.safetensors", "absurdly large" },
    { "overlapping tensors", TARGET "true", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", GEN, 1,
      "m/model.safetensors", "overlap" },
    { "unknown dtype", TARGET "true", "{\"a\":{\"dtype\":\"Q4_K\",\"shape\":[4],\"data_offsets\":[0,16]}}", GEN, 1, "m/model.safetensors", "unknown dtype 'Q4_K'" },
    { "trailing data after the header", TARGET "true", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}} junk", GEN, 1, "m/model.safetensors", "unexpected data" },
    { "header not an object", TARGET "true", "[1,2,3]", GEN, 1, "m/model.safetensors", "not a JSON object" },
    { "tensor of the wrong shape for the config", GOOD_CK "sed -i 's/\"hidden_size\": 64/\"hidden_size\": 32/' m/config.json", NULL, GEN, 1, "m/model.safetensors", "expected [384, 32]" },
    { "index names a shard outside the folder", TARGET "printf '{\"weight_map\":{\"a\":\"../x.safetensors\"}}' > m/model.safetensors.index.json", NULL, GEN, 1,
      "model.safetensors.index.json", "must name a shard file in the same folder" },
    { "index names a shard that is a folder", TARGET "mkdir m/s.safetensors && printf '{\"weight_map\":{\"a\":\"s.safetensors\"}}' > m/model.safetensors.index.json", NULL, GEN, 1,
      "m/s.safetensors", "not a regular file (a folder)" },
    { "index with trailing data", TARGET "printf '{\"weight_map\":{}}]' > m/model.safetensors.index.json", NULL, GEN, 1, "model.safetensors.index.json", "unexpected data" },
    // --- prompts, flags, draft vocabularies, corpora ---
    { "prompt id past the vocabulary", GOOD_CK "true", NULL, "%B generate -m m --prompt-ids 1,2,384 -n 2", 1, "token id 384 at index 2", "outside the vocabulary" },
    { "prompt id list with a letter", GOOD_CK "true", NULL, "%B generate -m m --prompt-ids 1,x,3 -n 2", 2, "--prompt-ids", "" },
    { "prompt id past INT32_MAX", GOOD_CK "true", NULL, "%B generate -m m --prompt-ids 1,99999999999 -n 2", 2, "--prompt-ids", "" },
    { "prompt longer than the context", GOOD_CK "true", NULL, "%B generate -m m --prompt-ids 1,2,3,4,5,6 -c 4 -n 2", 1, "context length", "" },
    { "draft vocabulary id past the vocabulary", "printf '[1, 2, 384]' > v.json", NULL,
      "%B generate -m %F/target -d %F/dspark --prompt-ids 1,2 --draft-vocab v.json", 1, "v.json", "entry 2 (384) is not a token id in [0, 384)" },
    { "draft vocabulary with trailing data", "printf '[1, 2] 7' > v.json", NULL,
      "%B generate -m %F/target -d %F/dspark --prompt-ids 1,2 --draft-vocab v.json", 1, "v.json", "" },
    { "draft vocabulary is a FIFO", "mkfifo v.json", NULL, "%B generate -m %F/target -d %F/dspark --prompt-ids 1,2 --draft-vocab v.json", 1, "v.json", "not a regular file" },
    // --- calibration.json beside a DSpark drafter (docs/calibration.md) ---
    { "calibration.json with 6 temperatures for 7 drafts", DSPARK "printf '{\"version\": 1, \"temperatures\": [1, 1, 1, 1, 1, 1]}' > d/calibration.json", NULL,
      DGEN, 1, "d/calibration.json", "field \"temperatures\" lists 6 temperatures" },
    { "calibration.json with a temperature of 0", DSPARK "printf '{\"version\": 1, \"temperatures\": [1, 1, 0, 1, 1, 1, 1]}' > d/calibration.json", NULL,
      DGEN, 1, "d/calibration.json", "field \"temperatures\"[2] must be a positive number" },
    { "calibration.json temperature 1e999 (infinity)", DSPARK "printf '{\"version\": 1, \"temperatures\": [1e999, 1, 1, 1, 1, 1, 1]}' > d/calibration.json", NULL,
      DGEN, 1, "d/calibration.json", "field \"temperatures\"[0]" },
    { "calibration.json is a FIFO", DSPARK "mkfifo d/calibration.json", NULL, DGEN, 1, "d/calibration.json", "not a regular file (a FIFO)" },
    // --- dspark.json: the seed's DSpark v1 adapter (docs/dspark-v1.md; the fixture target: H 64, V 384) ---
    { "dspark.json is a FIFO", "mkdir d && mkfifo d/dspark.json", NULL, DGEN, 1, "d/dspark.json", "not a regular file" },
    { "dspark.json: dDraft not divisible by nHeads", V1J("{\"config\":{\"gamma\":5,\"dDraft\":30,\"nLayers\":2,\"nHeads\":4,\"markovRank\":8,\"ffMult\":2},"
      "\"dims\":{\"hiddenSize\":64,\"vocabSize\":384,\"eps\":1e-6}}"), NULL, DGEN, 1, "d/dspark.json", "\"config.dDraft\" (30) is not divisible by \"config.nHeads\" (4)" },
    { "dspark.json: gamma 1e300", V1J("{\"config\":{\"gamma\":1e300,\"dDraft\":32,\"nLayers\":2,\"nHeads\":4,\"markovRank\":8,\"ffMult\":2},"
      "\"dims\":{\"hiddenSize\":64,\"vocabSize\":384,\"eps\":1e-6}}"), NULL, DGEN, 1, "d/dspark.json", "field \"config.gamma\" must be an integer" },
    { "dspark.json: another target's vocabulary", V1J("{\"config\":{\"gamma\":5,\"dDraft\":32,\"nLayers\":2,\"nHeads\":4,\"markovRank\":8,\"ffMult\":2},"
      "\"dims\":{\"hiddenSize\":64,\"vocabSize\":256,\"eps\":1e-6}}"), NULL, DGEN, 1, "field \"dims.vocabSize\" is 256", "vocab_size is 384" },
    { "dspark.json without model.safetensors", V1J("{\"config\":{\"gamma\":5,\"dDraft\":32,\"nLayers\":2,\"nHeads\":4,\"markovRank\":8,\"ffMult\":2},"
      "\"dims\":{\"hiddenSize\":64,\"vocabSize\":384,\"eps\":1e-6}}"), NULL, DGEN, 1, "d: no model.safetensors", "" },
    { "tokenizer-train corpus is a FIFO", "mkfifo c.txt", NULL, "%B tokenizer-train --vocab 300 --out t.json c.txt", 1, "c.txt", "not a regular file (a FIFO)" },
    { "training corpus truncated", BSC "head -c 200 c.bsc > t && mv t c.bsc", NULL, TRAIN, 1, "c.bsc: file is 200 bytes", "truncated" },
    { "training corpus shorter than its header", BSC "head -c 100 c.bsc > t && mv t c.bsc", NULL, TRAIN, 1, "c.bsc: 100 bytes, too short", "corpus header" },
    { "training corpus with the wrong magic", BSC PATCH(0, "BSCORPUX"), NULL, TRAIN, 1, "c.bsc: not a blockspec corpus", "bad magic" },
    { "training corpus token count beyond the file", BSC PATCH(24, "\\000\\000\\000\\000\\000\\001\\000\\000"), NULL, TRAIN, 1,
      "c.bsc: file is 256 bytes, but its header's counts (1099511627776 tokens", "counts beyond the file" },
    { "training corpus document count beyond the tokens", BSC PATCH(32, "\\000\\000\\000\\000\\000\\001\\000\\000"), NULL, TRAIN, 1,
      "c.bsc: n_docs 1099511627776 out of range", "" },
    { "training corpus id beyond the vocabulary", BSC PATCH(128, "\\100\\102\\017\\000"), NULL, TRAIN, 1,
      "c.bsc: token 0 has id 1000000", "outside the vocabulary [0, 266)" },
    { "training corpus is a FIFO (blocked forever)", "mkfifo c.bsc", NULL, TRAIN, 1, "c.bsc: not a regular file (a FIFO)", "" },
    { "tokenizer-train corpus missing", "true", NULL, "%B tokenizer-train --vocab 300 --out t.json nonexistent.txt", 1, "nonexistent.txt", "" },
    // --- the R1 fold (docs/rotation.md): rotate's inputs and a folded target's record ---
    { "rotate: hidden_size with no Hadamard length (36 = 9 x 4)", GOOD_CK "sed -i 's/\"hidden_size\": 64/\"hidden_size\": 36/' m/config.json", NULL,
      "%B rotate -m m --out o", 1, "m/config.json: hidden_size 36 is not m x 2^k", "" },
    { "rotate: signs file of the wrong length", "mkdir m", "{\"signs\":{\"dtype\":\"F32\",\"shape\":[16],\"data_offsets\":[0,64]}}",
      "%B rotate -m %F/target --out o --signs m/model.safetensors", 1, "m/model.safetensors: tensor 'signs' has 16 elements", "hidden_size is 64" },
    { "rotate: a quantised input", "%B quantize -m %F/target --bits 8 --group 32 --out q >/dev/null 2>&1", NULL, "%B rotate -m q --out o", 1,
      "q/config.json", "rotate first, then quantize" },
    { "rotate: an input already folded", "%B rotate -m %F/target --out r >/dev/null 2>&1", NULL, "%B rotate -m r --out o", 1, "r/config.json", "already R1-folded" },
    { "folded target whose record names another width", "%B rotate -m %F/target --out r >/dev/null 2>&1 && sed -i 's/\"n\":[[:space:]]*64/\"n\": 32/' r/config.json",
      NULL, "%B generate -m r --prompt-ids 1,2,3 -n 2", 1, "r/config.json", "\"blockspec_r1\".\"n\" is 32 but hidden_size is 64" },
    { "folded target whose sidecar is missing", "%B rotate -m %F/target --out r >/dev/null 2>&1 && rm r/blockspec_r1.safetensors", NULL,
      "%B generate -m r --prompt-ids 1,2,3 -n 2", 1, "r/blockspec_r1.safetensors", "names the R1 sidecar" },
};

// Replaces %B and %F by absolute paths (the cases run in their own folders).
static void expand(char *out, size_t cap, const char *fmt) {
    size_t n = 0;
    char cli[4096], fx[4096];
    if (!realpath(bs_cli_path(), cli)) snprintf(cli, sizeof cli, "%s", bs_cli_path());
    if (!realpath(bs_fixtures_dir(), fx)) snprintf(fx, sizeof fx, "%s", bs_fixtures_dir());
    for (const char *p = fmt; *p && n + 1 < cap; p++) {
        const char *sub = NULL;
        if (p[0] == '%' && p[1] == 'B') sub = cli;
        else if (p[0] == '%' && p[1] == 'F') sub = fx;
        if (sub) { n += (size_t)snprintf(out + n, cap - n, "%s", sub); p++; }
        else out[n++] = *p;
    }
    out[n < cap ? n : cap - 1] = 0;
}

static void write_st(const char *dir, const char *header) {
    char path[1024];
    snprintf(path, sizeof path, "%s/m/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    uint64_t hl = strlen(header);
    unsigned char zeros[64] = { 0 };
    fwrite(&hl, 8, 1, f); fwrite(header, 1, hl, f); fwrite(zeros, 1, sizeof zeros, f);
    fclose(f);
}

// Runs cmd in dir under the limits; fills out, *rss_mb and *secs; returns the exit status, or 128 + signal.
static int run_limited(const char *dir, const char *cmd, char *out, size_t cap, long *rss_mb, double *secs) {
    int fds[2];
    if (pipe(fds)) return -1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1); dup2(fds[1], 2); close(fds[0]); close(fds[1]);
        if (chdir(dir)) _exit(97);
        struct rlimit cpu = { CAT_CPU_S, CAT_CPU_S };
        setrlimit(RLIMIT_CPU, &cpu);
#if !defined(__SANITIZE_ADDRESS__)
        // (AddressSanitizer reserves terabytes of address space: there the RSS check below is the bound.)
        struct rlimit as = { 4UL << 30, 4UL << 30 };
        setrlimit(RLIMIT_AS, &as);
#endif
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(98);
    }
    close(fds[1]);
    size_t n = 0;
    int st = 0;
    struct rusage ru = { 0 };
    // Read until EOF or the wall limit, then reap.
    for (;;) {
        fd_set rd; FD_ZERO(&rd); FD_SET(fds[0], &rd);
        struct timeval tv = { 1, 0 };
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (t1.tv_sec - t0.tv_sec > CAT_WALL_S) { kill(pid, SIGKILL); break; }
        if (select(fds[0] + 1, &rd, NULL, NULL, &tv) <= 0) continue;
        char tmp[4096];
        ssize_t r = read(fds[0], tmp, sizeof tmp);
        if (r <= 0) break;
        size_t k = (size_t)r < cap - 1 - n ? (size_t)r : cap - 1 - n;
        memcpy(out + n, tmp, k); n += k;
    }
    out[n] = 0;
    close(fds[0]);
    wait4(pid, &st, 0, &ru);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    *rss_mb = ru.ru_maxrss / 1024;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

TEST(bad_input_catalogue) {
    int n = (int)(sizeof CASES / sizeof *CASES), bad = 0;
    for (int i = 0; i < n; i++) {
        const bad_case *c = &CASES[i];
        const char *dir = bs_test_tmpdir("cat");
        CHECK(dir);
        char setup[8192], cmd[8192], full[16384], out[16384];
        expand(setup, sizeof setup, c->setup);
        snprintf(full, sizeof full, "cd %s && %s", dir, setup);
        CHECK(system(full) == 0, "case '%s': setup failed: %s", c->name, full);
        if (c->st) write_st(dir, c->st);
        expand(cmd, sizeof cmd, c->cmd);
        // exec: the measured process is the CLI itself, not the shell.
        snprintf(full, sizeof full, "exec %s", cmd);
        long rss = 0; double secs = 0;
        int st = run_limited(dir, full, out, sizeof out, &rss, &secs);
        const char *why = NULL;
        if (st >= 128) why = "killed by a signal (crash, hang or limit)";
        else if (st != c->exit) why = "wrong exit status";
        else if (!strstr(out, c->needle) || !strstr(out, c->needle2)) why = "message lacks the expected text";
        else if (strstr(out, "Sanitizer") || strstr(out, "runtime error")) why = "sanitizer report";
        else if (rss > CAT_MAX_RSS_MB) why = "used too much memory";
        if (why) {
            fprintf(stderr, "  case %d '%s': %s (exit %d, want %d; %.1f s, %ld MB; want \"%s\" and \"%s\")\n    $ %s\n    %s\n",
                    i, c->name, why, st, c->exit, secs, rss, c->needle, c->needle2, cmd, out);
            bad++;
        }
    }
    printf("  %d bad inputs: %d with a clear error within %d s and %d MB\n", n, n - bad, CAT_WALL_S, CAT_MAX_RSS_MB);
    CHECK(bad == 0, "%d of %d catalogue cases failed (listed above)", bad, n);
}
