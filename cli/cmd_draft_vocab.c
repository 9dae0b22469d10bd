// blockspec draft-vocab: a draft vocabulary (io/draft_vocab.h) from token frequencies in sample text.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "cli/commands.h"
#include "io/config.h"
#include "io/draft_vocab.h"
#include "io/tokenizer.h"

static void usage(void) {
    fprintf(stderr,
        "usage: blockspec draft-vocab -m MODEL_DIR [--size N] --out FILE.json TEXT_FILE...\n"
        "  Tokenizes the text files with the model's tokenizer and writes the N most frequent token ids\n"
        "  (default 32768), plus the model's end-of-sequence ids and special tokens, as a sorted JSON list\n"
        "  for `generate --draft-vocab`. Use text like what the model will be asked to write: tokens that\n"
        "  never occur in it can then never be drafted (the output is unchanged; acceptance drops).\n");
}

// Counts the ids of one file, tokenized in pieces of about 1 MiB cut after a newline (a line is never
// split, so the counts equal those of the whole file wherever the pre-tokenizer does not cross lines;
// a line longer than the buffer is cut at a character boundary).
static int count_file(const bs_tokenizer *tok, const char *path, uint64_t *counts, int V, uint64_t *total, bs_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return bs_fail(err, "cannot open %s", path);
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap + 1);
    int rc = 0;
    if (!buf) { fclose(f); return bs_fail(err, "out of memory"); }
    for (int eof = 0; !rc && !(eof && !len);) {
        if (!eof) {
            size_t got = fread(buf + len, 1, cap - len, f);
            len += got;
            if (len < cap) eof = 1;
        }
        size_t cut = len;
        if (!eof) {   // the piece ends after its last newline (or is the whole buffer if it has none)
            while (cut > 0 && buf[cut - 1] != '\n') cut--;
            if (cut == 0) {   // no newline: cut before a UTF-8 character's first byte
                cut = len;
                while (cut > 1 && ((unsigned char)buf[cut - 1] & 0xC0) == 0x80) cut--;
                if (cut > 1) cut--;
            }
        }
        int32_t *ids = NULL;
        size_t n = 0;
        if (bs_tokenizer_encode_ex(tok, buf, cut, 0, &ids, &n, err)) { rc = bs_wrap(err, "%s", path); break; }
        for (size_t i = 0; i < n; i++) if (ids[i] >= 0 && ids[i] < V) counts[ids[i]]++;
        *total += n;
        free(ids);
        memmove(buf, buf + cut, len - cut);
        len -= cut;
    }
    if (!rc && ferror(f)) rc = bs_fail(err, "reading %s failed", path);
    fclose(f);
    free(buf);
    return rc;
}

int cmd_draft_vocab(int argc, char **argv) {
    const char *model = NULL, *out = NULL, *v;
    long size = 32768;
    const char **files = calloc(argc + 1, sizeof *files);
    int n_files = 0;
    if (!files) return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); free(files); return 0; }
        else if (!strcmp(a, "-m")) { if (!(model = cli_value(argc, argv, &i))) { free(files); return 2; } }
        else if (!strcmp(a, "--out")) { if (!(out = cli_value(argc, argv, &i))) { free(files); return 2; } }
        else if (!strcmp(a, "--size")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 1 << 30, &size)) { free(files); return 2; } }
        else if (a[0] == '-' && a[1]) { fprintf(stderr, "blockspec draft-vocab: unknown option '%s'\n", a); usage(); free(files); return 2; }
        else files[n_files++] = a;
    }
    if (!model || !out || !n_files) { usage(); free(files); return 2; }
    bs_err err = {0};
    bs_qwen3_config cfg;
    bs_tokenizer *tok = NULL;
    uint64_t *counts = NULL, total = 0;
    int *always = NULL, n_always = 0, rc = 1;
    bs_draft_vocab dv = {0};
    if (bs_qwen3_config_load(&cfg, model, &err) || bs_tokenizer_load(&tok, model, &err)) goto done;
    int V = cfg.vocab_size;
    if (!(counts = calloc((size_t)V, sizeof *counts)) || !(always = malloc(sizeof(int) * ((size_t)V + BS_MAX_EOS + 1)))) { bs_fail(&err, "out of memory"); goto done; }
    for (int i = 0; i < n_files; i++) if (count_file(tok, files[i], counts, V, &total, &err)) goto done;
    for (int i = 0; i < cfg.n_eos; i++) always[n_always++] = cfg.eos_ids[i];
    int te = bs_tokenizer_eos_id(tok);
    if (te >= 0) always[n_always++] = te;
    size_t tv = bs_tokenizer_vocab_size(tok);
    for (size_t id = 0; id < tv && id < (size_t)V; id++) if (bs_tokenizer_is_special(tok, (int32_t)id)) always[n_always++] = (int)id;
    if (bs_draft_vocab_from_counts(&dv, counts, V, (int)size, always, n_always, &err) || bs_draft_vocab_save(&dv, out, &err)) goto done;
    uint64_t covered = 0;
    for (int i = 0; i < dv.n; i++) covered += counts[dv.ids[i]];
    int seen = 0;
    for (int id = 0; id < V; id++) seen += counts[id] > 0;
    fprintf(stderr, "draft-vocab: %llu tokens in %d file(s), %d distinct; wrote %d ids (%d always-included) to %s, "
            "covering %.2f%% of the sample's tokens\n", (unsigned long long)total, n_files, seen, dv.n, n_always, out,
            total ? 100.0 * covered / total : 0.0);
    rc = 0;
done:
    if (rc) fprintf(stderr, "blockspec draft-vocab: %s\n", err.msg);
    bs_draft_vocab_free(&dv);
    bs_tokenizer_free(tok);
    free(counts); free(always); free(files);
    return rc;
}
