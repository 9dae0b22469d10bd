// blockspec tokenize: text -> ids (comma-separated on one line), or --decode ids -> text. Through the
// public API's tokenizer-alone calls (no weights are loaded); io/json.h reads --prompt-file. --corpus is
// the training data tool (cli/cmd_tokenize_corpus.c).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "blockspec.h"
#include "cli/commands.h"
#include "io/json.h"

static void usage(void) {
    fprintf(stderr,
        "usage: blockspec tokenize -m DIR|tokenizer.json (-p TEXT | --prompt-file FILE) [--no-special]\n"
        "       blockspec tokenize -m DIR|tokenizer.json --decode 1,2,3 [--skip-special]\n"
        "       blockspec tokenize -m DIR|tokenizer.json --prompt-file FILE --bench [SECONDS]\n"
        "  Prints the ids on one line, comma-separated (special tokens written in the text are recognised,\n"
        "  as Hugging Face tokenizers does). --no-special: leave out the post-processor's special tokens.\n"
        "  --bench: encode FILE repeatedly on one thread and print the throughput in MB/s.\n"
        "  --chunk N: with --bench, encode FILE as separate texts of about N bytes (cut between characters).\n"
        "       blockspec tokenize --corpus OUT -m DIR FILE...   (a training corpus: --corpus --help)\n");
}

static double now_s(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }

static int decode_list(const blockspec_tokenizer *t, const char *list, int skip_special) {
    size_t cap = 16, n = 0; int32_t *ids = malloc(cap * sizeof *ids);
    const char *p = list;
    while (ids && *p) {
        char *end; errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) { fprintf(stderr, "blockspec tokenize: --decode expects ids like 1,2,3 (bad at \"%s\")\n", p); free(ids); return 2; }
        if (n == cap) { int32_t *q = realloc(ids, (cap *= 2) * sizeof *ids); if (!q) break; ids = q; }
        ids[n++] = (int32_t)v;
        p = end;
        while (*p == ',' || *p == ' ') p++;
    }
    char err[512], *text; size_t len;
    if (!ids || blockspec_tokenizer_decode(t, ids, n, skip_special, &text, &len, err, sizeof err)) { fprintf(stderr, "blockspec tokenize: %s\n", ids ? err : "out of memory"); free(ids); return 1; }
    fwrite(text, 1, len, stdout); fputc('\n', stdout);
    free(text); free(ids);
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    for (int i = 1; i < argc; i++) if (!strcmp(argv[i], "--corpus")) return cmd_tokenize_corpus(argc, argv);
    const char *model = NULL, *prompt = NULL, *file = NULL, *decode = NULL;
    int add_special = 1, skip_special = 0, bench = 0; double bench_s = 3; size_t chunk = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has) model = argv[++i];
        else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && has) prompt = argv[++i];
        else if (!strcmp(a, "--prompt-file") && has) file = argv[++i];
        else if (!strcmp(a, "--decode") && has) decode = argv[++i];
        else if (!strcmp(a, "--no-special")) add_special = 0;
        else if (!strcmp(a, "--skip-special")) skip_special = 1;
        else if (!strcmp(a, "--chunk") && has) chunk = strtoul(argv[++i], NULL, 10);
        else if (!strcmp(a, "--bench")) { bench = 1; if (has && argv[i + 1][0] != '-') bench_s = atof(argv[++i]); }
        else { fprintf(stderr, "blockspec tokenize: unknown or incomplete option '%s'\n", a); usage(); return 2; }
    }
    if (!model || (!decode && !!prompt == !!file)) { usage(); return 2; }
    char err[512]; bs_err ferr; blockspec_tokenizer *t;
    if (blockspec_tokenizer_open(&t, model, err, sizeof err)) { fprintf(stderr, "blockspec tokenize: %s\n", err); return 1; }
    if (decode) { int rc = decode_list(t, decode, skip_special); blockspec_tokenizer_close(t); return rc; }
    size_t len = prompt ? strlen(prompt) : 0;
    char *text = prompt ? NULL : bs_read_file(file, &len, &ferr);   // regular files only: a FIFO would block
    if (file && !text) { fprintf(stderr, "blockspec tokenize: %s\n", ferr.msg); blockspec_tokenizer_close(t); return 1; }
    const char *s = prompt ? prompt : text;
    int32_t *ids; size_t n;
    int rc = 0;
    if (bench) {
        double t0 = now_s(), el; size_t reps = 0, ntok = 0;
        do {
            ntok = 0;
            for (size_t off = 0; off < len && !rc;) {
                size_t end = chunk && off + chunk < len ? off + chunk : len;
                while (end < len && ((unsigned char)s[end] & 0xc0) == 0x80) end++;
                if (blockspec_tokenizer_encode(t, s + off, end - off, add_special, &ids, &n, err, sizeof err)) rc = 1;
                else { ntok += n; free(ids); }
                off = end;
            }
            if (rc) break;
            reps++;
            el = now_s() - t0;
        } while (el < bench_s);
        if (!rc) printf("bytes=%zu tokens=%zu reps=%zu seconds=%.3f MB/s=%.2f\n", len, ntok, reps, el, len * reps / el / 1e6);
    } else if (blockspec_tokenizer_encode(t, s, len, add_special, &ids, &n, err, sizeof err)) rc = 1;
    else {
        for (size_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
        printf("\n");
        free(ids);
    }
    if (rc) fprintf(stderr, "blockspec tokenize: %s\n", err);
    free(text);
    blockspec_tokenizer_close(t);
    return rc;
}
