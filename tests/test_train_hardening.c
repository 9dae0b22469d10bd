// Hostile training files (issue 29): the resume state (DIR/train_state.safetensors) and the corpus are
// files like any other, so they get the checks every parser has (docs/reliability.md). Each case runs in
// a child process with a time limit, so that the old code's crash (a params entry without its trainable
// flag: a NULL dereference) or hang (a FIFO: open(2) waits for a writer) is reported as a failure here
// instead of taking the suite down.
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"
#include "train/checkpoint.h"
#include "train/corpus.h"
#include "train_toy.h"

// Runs fn(arg) in a child; returns its exit status, 128 + signal, or 124 after `secs` seconds.
static int in_child(int (*fn)(void *), void *arg, int secs) {
    fflush(stdout); fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) _exit(fn(arg));
    for (int waited = 0; waited < secs * 20; waited++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        struct timespec ts = { 0, 50000000 };
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL); waitpid(pid, NULL, 0);
    return 124;
}

// ---- the resume state ----

typedef struct { const char *dir, *needle; int64_t want_step; } load_case;

// 0: refused with a message naming the file and holding needle (or, when needle is NULL, accepted with
// step want_step); 1: the wrong outcome (printed).
static int load_in_child(void *p) {
    const load_case *c = p;
    bs_err err;
    bs_train_task *t;
    if (toy_task_new(&t, 16, 4, 1, &err)) { fprintf(stderr, "    %s\n", err.msg); return 1; }
    bs_adamw opt; bs_adamw_cfg cfg = bs_adamw_defaults(0.1, 0);
    if (bs_adamw_init(&opt, &t->params, &cfg, &err)) return 1;
    bs_train_state st;
    int rc = bs_train_ckpt_load(c->dir, t, &opt, &st, &err);
    if (!c->needle) {
        if (rc) { fprintf(stderr, "    refused: %s\n", err.msg); return 1; }
        if (st.step != c->want_step) { fprintf(stderr, "    step %lld, want %lld\n", (long long)st.step, (long long)c->want_step); return 1; }
        return 0;
    }
    if (!rc) { fprintf(stderr, "    accepted (step %lld, data %lld/%lld/%lld)\n", (long long)st.step, (long long)st.data.epoch, (long long)st.data.doc, (long long)st.data.off); return 1; }
    if (!strstr(err.msg, c->dir) || !strstr(err.msg, c->needle)) { fprintf(stderr, "    message: %s\n", err.msg); return 1; }
    return 0;
}

static long slurp(const char *path, unsigned char **buf) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
    *buf = malloc((size_t)n);
    if (fread(*buf, 1, (size_t)n, f) != (size_t)n) n = -1;
    fclose(f);
    return n;
}

// Copies the checkpoint src to dst/train_state.safetensors with the training-state JSON edited: the first
// `from` replaced by `to` (text), the weights unchanged.
static int edit_state(const char *src, const char *dst_dir, const char *from, const char *to) {
    unsigned char *b;
    long n = slurp(src, &b);
    if (n < 8) return -1;
    uint64_t hl; memcpy(&hl, b, 8);
    cJSON *root = cJSON_ParseWithLength((const char *)b + 8, hl);
    cJSON *md = cJSON_GetObjectItem(root, "__metadata__"), *s = cJSON_GetObjectItem(md, "blockspec_train_state");
    const char *at = cJSON_IsString(s) ? strstr(s->valuestring, from) : NULL;
    if (!at) { cJSON_Delete(root); free(b); return -1; }
    size_t pre = (size_t)(at - s->valuestring);
    char *edited = malloc(strlen(s->valuestring) + strlen(to) + 1);
    memcpy(edited, s->valuestring, pre);
    sprintf(edited + pre, "%s%s", to, at + strlen(from));
    cJSON_ReplaceItemInObject(md, "blockspec_train_state", cJSON_CreateString(edited));
    free(edited);
    char *hdr = cJSON_PrintUnformatted(root);
    size_t len = strlen(hdr), padded = (len + 7) / 8 * 8;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dst_dir, BS_TRAIN_STATE_FILE);
    FILE *f = fopen(path, "wb");
    uint64_t h64 = padded;
    fwrite(&h64, 8, 1, f); fwrite(hdr, 1, len, f); fwrite("        ", 1, padded - len, f);
    fwrite(b + 8 + hl, 1, (size_t)n - 8 - hl, f);
    fclose(f);
    free(hdr); cJSON_Delete(root); free(b);
    return 0;
}

TEST(train_state_hostile_values_refused) {
    const char *dir = bs_test_tmpdir("tstate");
    CHECK(dir);
    bs_err err;
    bs_train_task *t;
    CHECK(toy_task_new(&t, 16, 4, 1, &err) == 0, "%s", err.msg);
    bs_adamw opt; bs_adamw_cfg cfg = bs_adamw_defaults(0.1, 0);
    CHECK(bs_adamw_init(&opt, &t->params, &cfg, &err) == 0, "%s", err.msg);
    bs_train_state st = { .step = 5, .data = { 0, 1, 2 }, .rng = { { 1, 2, 3, 4 } }, .settings_json = "{}" };
    CHECK(bs_train_ckpt_save(dir, t, &opt, &st, &err) == 0, "%s", err.msg);
    bs_adamw_free(&opt); t->free(t);
    char good[600], bad[600];
    snprintf(good, sizeof good, "%s/%s", dir, BS_TRAIN_STATE_FILE);
    snprintf(bad, sizeof bad, "%s/bad", dir);
    CHECK(mkdir(bad, 0755) == 0);
    load_case ok = { dir, NULL, 5 };
    CHECK(in_child(load_in_child, &ok, 20) == 0, "the unedited checkpoint must load");
    // (edit: from, to, the expected message). Before the fix, in the same order: a crash (NULL dereference),
    // accepted with step INT64_MIN (an undefined cast), accepted with the offset truncated to 1, accepted
    // with rng word ffff..., accepted with a stuck all-zero generator, accepted (a frozen flag 0.5), the
    // first of two "step" keys taken where Python takes the last, and trailing text accepted.
    static const struct { const char *from, *to, *needle; int64_t step; } cases[] = {
        { ",1,1]", "]", "params[", 0 },                         // the first entry loses its trainable and decay flags
        { "\"step\":5", "\"step\":1e300", "step is not a non-negative integer", 0 },
        { "\"data\":[0,1,2]", "\"data\":[0,1,1.5]", "data[2]", 0 },
        { "\"0000000000000001\"", "\"-1\"", "rng word 0 is not 1-16 hex digits", 0 },
        { "[\"0000000000000001\",\"0000000000000002\",\"0000000000000003\",\"0000000000000004\"]",
          "[\"0\",\"0\",\"0\",\"0\"]", "rng state is all zero", 0 },
        { ",0,0]", ",0.5,0]", "params[", 0 },                   // a frozen tensor's flag
        { "\"step\":5", "\"step\":3,\"step\":7", NULL, 7 },      // repeated key: the last value, as Python
        { "\"settings\":{}}", "\"settings\":{}} x", "unexpected data after the JSON value", 0 },
    };
    int failures = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        CHECK(edit_state(good, bad, cases[i].from, cases[i].to) == 0, "case %zu: '%s' not in the saved state", i, cases[i].from);
        load_case c = { bad, cases[i].needle, cases[i].step };
        int rc = in_child(load_in_child, &c, 20);
        if (rc) { fprintf(stderr, "  case %zu (%s -> %s): %s\n", i, cases[i].from, cases[i].to, rc == 124 ? "hung" : rc > 128 ? "crashed" : "wrong outcome"); failures++; }
    }
    // Header length beyond the file: refused from the file's size, not by a 1 GB allocation first.
    char path[700];
    snprintf(path, sizeof path, "%s/%s", bad, BS_TRAIN_STATE_FILE);
    FILE *f = fopen(path, "wb");
    uint64_t huge = 1u << 29;
    fwrite(&huge, 8, 1, f); fputs("{}", f); fclose(f);
    load_case big = { bad, "runs past the end", 0 };
    if (in_child(load_in_child, &big, 20)) { fprintf(stderr, "  header length 2^29 in a 10-byte file: wrong outcome\n"); failures++; }
    // A FIFO named train_state.safetensors (a plain open(2) waits for a writer forever).
    unlink(path);
    CHECK(mkfifo(path, 0644) == 0);
    load_case fifo = { bad, "not a regular file (a FIFO)", 0 };
    int rc = in_child(load_in_child, &fifo, 5);
    if (rc) { fprintf(stderr, "  train_state.safetensors a FIFO: %s\n", rc == 124 ? "hung" : "wrong outcome"); failures++; }
    CHECK(failures == 0, "%d hostile training states not refused cleanly (listed above)", failures);
}

// ---- the corpus ----

static int open_fifo_corpus(void *p) {
    bs_corpus *c; bs_err err;
    if (bs_corpus_open(&c, p, &err) == 0) return 1;
    if (!strstr(err.msg, p) || !strstr(err.msg, "not a regular file (a FIFO)")) { fprintf(stderr, "    message: %s\n", err.msg); return 1; }
    return 0;
}

TEST(train_corpus_fifo_refused) {
    const char *dir = bs_test_tmpdir("cfifo");
    CHECK(dir);
    char path[600];
    snprintf(path, sizeof path, "%s/c.bsc", dir);
    CHECK(mkfifo(path, 0644) == 0);
    int rc = in_child(open_fifo_corpus, path, 5);
    CHECK(rc == 0, "a FIFO named as the corpus: %s", rc == 124 ? "blocked (killed after 5 s)" : "not refused with a clear error");
}
