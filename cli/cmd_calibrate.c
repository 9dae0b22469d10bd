// blockspec calibrate -m TARGET -d DRAFTER --data HELDOUT [--data ...] [options]
// Fits Sequential Temperature Scaling to a DSpark drafter's confidence head (docs/calibration.md): records
// greedy drafting rounds on held-out text (spec/calib_rounds.h), fits one temperature per draft position
// (spec/sts.h), prints ECE and reliability tables before and after, and writes calibration.json beside the
// drafter, which the drafter then applies at load (io/calibration.h).
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli/args.h"
#include "cli/commands.h"
#include "engine/engine.h"
#include "io/calibration.h"
#include "io/dspark_v1_config.h"
#include "io/json.h"
#include "model/dflash.h"
#include "spec/calib_rounds.h"
#include "spec/sts.h"
#include "train/corpus.h"
#include "util/rng.h"

#define MAX_DATA 16

static void usage(void) {
    fprintf(stderr,
        "usage: blockspec calibrate -m TARGET -d DRAFTER --data HELDOUT [--data HELDOUT2 ...] [options]\n"
        "  -m DIR               the target the drafter serves\n"
        "  -d DIR               a DSpark drafter (Qwen3DSparkModel with a confidence head)\n"
        "  --data FILE          held-out text: a tokenised corpus (.bsc, `blockspec tokenize --corpus`) or a\n"
        "                       plain text file (one document, tokenised with the target's tokenizer); repeatable\n"
        "  --out FILE           where to write (default DRAFTER/calibration.json, which the drafter then applies)\n"
        "  --anchors N          rounds per sequence, at anchors drawn at random (default 16)\n"
        "  --max-seqs N         sequences used at most, drawn at random from all data (default 256)\n"
        "  --seq-len N          tokens per sequence: documents are cut into windows of N (default 512)\n"
        "  --generate N         prefixes from the target's own greedy text, as at decode time: each window's\n"
        "                       first --prompt-len tokens are continued greedily for N tokens, and the anchors\n"
        "                       are drawn in the continuation (default 0: the held-out text itself)\n"
        "  --prompt-len P       with --generate: prompt tokens per sequence (default 64)\n"
        "  --bias               fit a bias per position too: c_k = sigmoid(z_k / T_k + b_k) (Platt scaling; a\n"
        "                       temperature alone cannot move a confidence across 0.5)\n"
        "  --draft-max K        draft positions to verify and fit (default: the drafter's block; the rest keep T = 1)\n"
        "  --seed S             anchor and sequence draws (default 0)\n"
        "  --bins N             equal-width bins of the ECE and the reliability tables (default 10)\n"
        "  --min-samples N      rounds a position needs to be fitted (default 30)\n"
        "  --holdout-frac F     keep the last round(F x sequences) of the draw out of the fit and report the\n"
        "                       fitted calibration's ECE on their rounds too (default 0: in-sample only)\n"
        "  --device D           cpu (default), cpu-ref, cuda[:N]\n");
}

typedef struct cal_args {
    const char *model, *drafter, *out, *device, *data[MAX_DATA];
    int n_data;
    long anchors, max_seqs, seq_len, draft_max, seed, bins, min_samples, generate, prompt_len;
    int bias;
    double holdout_frac;
} cal_args;

static int parse(int argc, char **argv, cal_args *a) {
    const char *v;
    memset(a, 0, sizeof *a);
    a->device = "cpu"; a->anchors = 16; a->max_seqs = 256; a->seq_len = 512; a->bins = 10; a->min_samples = 30; a->prompt_len = 64;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-m")) { if (!(a->model = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(o, "-d")) { if (!(a->drafter = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(o, "--data")) {
            if (!(v = cli_value(argc, argv, &i))) return 2;
            if (a->n_data == MAX_DATA) { fprintf(stderr, "blockspec calibrate: at most %d --data files\n", MAX_DATA); return 2; }
            a->data[a->n_data++] = v;
        }
        else if (!strcmp(o, "--out") || !strcmp(o, "-o")) { if (!(a->out = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(o, "--device")) { if (!(a->device = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(o, "--anchors")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, 1, 1 << 20, &a->anchors)) return 2; }
        else if (!strcmp(o, "--max-seqs")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, 1, 1 << 24, &a->max_seqs)) return 2; }
        else if (!strcmp(o, "--seq-len")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, 2, 1 << 20, &a->seq_len)) return 2; }
        else if (!strcmp(o, "--generate")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, 1, 1 << 20, &a->generate)) return 2; }
        else if (!strcmp(o, "--prompt-len")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, 1, 1 << 20, &a->prompt_len)) return 2; }
        else if (!strcmp(o, "--draft-max")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, 1, BS_MAX_DRAFT, &a->draft_max)) return 2; }
        else if (!strcmp(o, "--seed")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, 0, 1L << 62, &a->seed)) return 2; }
        else if (!strcmp(o, "--bins")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, 1, 1000, &a->bins)) return 2; }
        else if (!strcmp(o, "--min-samples")) { if (!(v = cli_value(argc, argv, &i)) || cli_int(o, v, 1, 1 << 24, &a->min_samples)) return 2; }
        else if (!strcmp(o, "--bias")) a->bias = 1;
        else if (!strcmp(o, "--holdout-frac")) {
            char *end;
            if (!(v = cli_value(argc, argv, &i))) return 2;
            a->holdout_frac = strtod(v, &end);
            if (*end || !(a->holdout_frac >= 0 && a->holdout_frac < 1)) {
                fprintf(stderr, "blockspec calibrate: --holdout-frac %s: expected a number in [0, 1)\n", v);
                return 2;
            }
        }
        else if (!strcmp(o, "--help") || !strcmp(o, "-h")) { usage(); exit(0); }
        else { fprintf(stderr, "blockspec calibrate: unknown option %s\n", o); usage(); return 2; }
    }
    if (!a->model || !a->drafter || !a->n_data) {
        fprintf(stderr, "blockspec calibrate: -m TARGET, -d DRAFTER and --data HELDOUT are required\n"); usage(); return 2;
    }
    return 0;
}

// One held-out source: a corpus (mapped) or a text file's ids (one document).
typedef struct source { bs_corpus *c; int32_t *ids; int64_t n; } source;
// A window of one document: the sequence a round's prefix comes from.
typedef struct window { int src; int64_t start; int len; } window;

static int is_corpus(const char *path) {
    char magic[8] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(magic, 1, sizeof magic, f);
    fclose(f);
    return n == sizeof magic && !memcmp(magic, BS_CORPUS_MAGIC, sizeof magic);
}

static int open_source(source *s, const char *path, const bs_engine *e, bs_err *err) {
    memset(s, 0, sizeof *s);
    if (is_corpus(path)) {
        if (bs_corpus_open(&s->c, path, err)) return -1;
        if (s->c->vocab_size > e->cfg.vocab_size)
            return bs_fail(err, "%s has ids up to %lld (its tokenizer's vocabulary); the target's vocab_size is %d: made with another tokenizer?", path,
                           (long long)s->c->vocab_size - 1, e->cfg.vocab_size);
        if (e->tok) {   // the target's own tokenizer must have made it
            uint64_t hash;
            if (bs_tokenizer_file_hash(e->model_dir, &hash, err) ||
                bs_corpus_check_tokenizer(s->c, hash, (int64_t)bs_tokenizer_vocab_size(e->tok), e->model_dir, err)) return -1;
        }
        return 0;
    }
    if (!e->tok)
        return bs_fail(err, "%s is not a tokenised corpus (.bsc) and the target %s has no usable tokenizer.json to read it as text%s%s", path,
                       e->model_dir, e->tok_error[0] ? ": " : "", e->tok_error);
    size_t len, n = 0;
    char *text = bs_read_file(path, &len, err);
    if (!text) return -1;
    int rc = bs_tokenizer_encode(e->tok, text, len, &s->ids, &n, err);
    free(text);
    if (rc) return bs_wrap(err, "%s", path);
    s->n = (int64_t)n;
    return 0;
}

// Windows of seq_len tokens over every document (at least 2 tokens: an anchor needs a prefix).
static int list_windows(const source *src, int n_src, int L, window **out, int *n_out, bs_err *err) {
    int n = 0, cap = 1024;
    window *w = malloc(sizeof *w * cap);
    for (int s = 0; w && s < n_src; s++) {
        int64_t nd = src[s].c ? src[s].c->n_docs : 1;
        for (int64_t d = 0; d < nd; d++) {
            int64_t b = src[s].c ? (int64_t)src[s].c->doc_off[d] : 0, e = src[s].c ? (int64_t)src[s].c->doc_off[d + 1] : src[s].n;
            for (int64_t p = b; p + 2 <= e; p += L) {
                if (n == cap) { window *nw = realloc(w, sizeof *w * (cap *= 2)); if (!nw) { free(w); w = NULL; break; } w = nw; }
                w[n++] = (window){ s, p, (int)(e - p < L ? e - p : L) };
            }
            if (!w) break;
        }
    }
    if (!w) return bs_fail(err, "out of memory listing the held-out sequences");
    *out = w; *n_out = n;
    return 0;
}

// seq <- prompt[0..P) and the target's greedy continuation (up to n tokens, stopping after an end-of-sequence
// token); mask 1 on the continuation only. *n_gen = the tokens generated.
static int continue_greedy(bs_engine *e, const int32_t *prompt, int P, int n, int32_t *seq, uint8_t *mask, int *n_gen, bs_err *err) {
    bs_session s;
    if (bs_session_init(&s, e, P + n, NULL, err)) return -1;
    int rc = bs_generate_plain(&s, prompt, P, n, 1, seq + P, n_gen, NULL, NULL, err);
    bs_session_free(&s);
    if (rc) return -1;
    memcpy(seq, prompt, sizeof(int32_t) * P);
    memset(mask, 0, P);
    memset(mask + P, 1, *n_gen);
    return 0;
}

static void print_tables(const bs_sts_data *sd, const double *T, const double *B, const bs_sts_pos *pos, int bins) {
    int N = sd->n_rounds;
    double *a = malloc(sizeof(double) * (N ? N : 1));
    uint8_t *lab = malloc(N ? N : 1);
    bs_sts_bin *b0 = calloc(bins, sizeof *b0), *b1 = calloc(bins, sizeof *b1);
    if (!a || !lab || !b0 || !b1) { free(a); free(lab); free(b0); free(b1); return; }
    for (int k = 0; k < sd->K; k++) {
        if (!pos[k].n) continue;
        int m = bs_sts_cumulative(sd, NULL, NULL, k, a, lab);
        bs_sts_ece(a, lab, m, bins, b0);
        m = bs_sts_cumulative(sd, T, B, k, a, lab);
        bs_sts_ece(a, lab, m, bins, b1);
        printf("\nposition %d: reliability of the cumulative survival a_%d (predicted vs observed)\n", k + 1, k + 1);
        printf("  bin          |      raw: n     pred      obs |      STS: n     pred      obs\n");
        for (int i = 0; i < bins; i++) {
            if (!b0[i].n && !b1[i].n) continue;
            printf("  [%.2f, %.2f) | %9d", b0[i].lo, b0[i].hi, b0[i].n);
            if (b0[i].n) printf(" %8.4f %8.4f", b0[i].pred, b0[i].obs); else printf(" %8s %8s", "-", "-");
            printf(" | %9d", b1[i].n);
            if (b1[i].n) printf(" %8.4f %8.4f\n", b1[i].pred, b1[i].obs); else printf(" %8s %8s\n", "-", "-");
        }
    }
    free(a); free(lab); free(b0); free(b1);
}

// The fitted calibration judged on rounds the fit never saw: per position the binned ECE of a_k, raw and
// calibrated, printed with the noise floor of the calibrated ECE; mean[0..2]: their means over the positions reached.
static int heldout_ece(const bs_sts_data *hd, const double *T, const double *B, int bins, int n_seqs, double mean[3], bs_err *err) {
    double *a = malloc(sizeof(double) * hd->n_rounds);
    uint8_t *lab = malloc(hd->n_rounds);
    if (!a || !lab) { free(a); free(lab); return bs_fail(err, "out of memory"); }
    // "floor": the ECE a perfectly calibrated predictor with the calibrated predictions would show on these
    // rounds (mean +- sd over 200 draws of its outcomes): how far below it no fit can be seen to go.
    printf("\nheld out of the fit: %d rounds on %d sequences\n  pos        n  survival  ECE raw  ECE calibrated  floor (perfect calibration, same n)\n",
           hd->n_rounds, n_seqs);
    int counted = 0;
    for (int k = 0; k < hd->K; k++) {
        int n = bs_sts_cumulative(hd, NULL, NULL, k, a, lab);
        if (!n) continue;
        int surv = 0;
        for (int r = 0; r < n; r++) surv += lab[r];
        double e0 = bs_sts_ece(a, lab, n, bins, NULL);
        bs_sts_cumulative(hd, T, B, k, a, lab);
        double e1 = bs_sts_ece(a, lab, n, bins, NULL), sd;
        double fl = bs_sts_ece_floor(a, n, bins, 200, 0x5EEDull + (uint64_t)k, &sd);
        printf("  %3d %8d  %8.4f  %6.2f%%  %6.2f%%         %5.2f%% +- %.2f%%\n", k + 1, n, (double)surv / n, 100 * e0, 100 * e1, 100 * fl, 100 * sd);
        mean[0] += e0; mean[1] += e1; mean[2] += fl; counted++;
    }
    if (counted) { mean[0] /= counted; mean[1] /= counted; mean[2] /= counted; }
    printf("  mean ECE over positions: raw %.2f%%, calibrated %.2f%%, floor %.2f%%\n", 100 * mean[0], 100 * mean[1], 100 * mean[2]);
    free(a); free(lab);
    return 0;
}

static cJSON *result_json(const cal_args *a, int gamma, int K, int n_seqs, const bs_sts_data *sd, const double *T, const double *B,
                          const bs_sts_pos *pos, double ece0, double ece1) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", "blockspec-calibration");
    cJSON_AddNumberToObject(j, "version", BS_CALIBRATION_VERSION);
    cJSON_AddStringToObject(j, "method", a->bias ? "sequential temperature scaling with a bias: c_k = sigmoid(z_k / T_k + b_k), (T_k, b_k) "
                                                   "fitted in order k = 1..K to the prefix survival (mean BCE of prod_{i<=k} c_i)"
                                                 : "sequential temperature scaling: c_k = sigmoid(z_k / T_k), T_k fitted in order k = 1..K "
                                                   "to the prefix survival (mean BCE of prod_{i<=k} c_i)");
    cJSON *t = cJSON_AddArrayToObject(j, "temperatures");
    for (int k = 0; k < gamma; k++) cJSON_AddItemToArray(t, cJSON_CreateNumber(k < K ? (double)(float)T[k] : 1.0));
    if (a->bias) {
        cJSON *b = cJSON_AddArrayToObject(j, "biases");
        for (int k = 0; k < gamma; k++) cJSON_AddItemToArray(b, cJSON_CreateNumber(k < K ? (double)(float)B[k] : 0.0));
    }
    cJSON_AddStringToObject(j, "target", a->model);
    cJSON_AddStringToObject(j, "drafter", a->drafter);
    cJSON *d = cJSON_AddArrayToObject(j, "data");
    for (int i = 0; i < a->n_data; i++) cJSON_AddItemToArray(d, cJSON_CreateString(a->data[i]));
    cJSON_AddStringToObject(j, "verification", "greedy (a draft survives when it equals the target's argmax after the accepted prefix)");
    if (a->generate) {
        cJSON_AddStringToObject(j, "prefix", "generated: each sequence's prompt continued greedily by the target; anchors in the continuation");
        cJSON_AddNumberToObject(j, "prompt_len", (double)a->prompt_len);
        cJSON_AddNumberToObject(j, "generated_tokens", (double)a->generate);
    } else cJSON_AddStringToObject(j, "prefix", "teacher forced: the held-out text before each anchor");
    cJSON_AddNumberToObject(j, "seed", (double)a->seed);
    cJSON_AddNumberToObject(j, "anchors_per_sequence", (double)a->anchors);
    cJSON_AddNumberToObject(j, "seq_len", (double)a->seq_len);
    cJSON_AddNumberToObject(j, "sequences", n_seqs);
    cJSON_AddNumberToObject(j, "rounds", sd->n_rounds);
    cJSON_AddNumberToObject(j, "positions_fitted", K);
    cJSON_AddNumberToObject(j, "ece_bins", (double)a->bins);
    cJSON_AddNumberToObject(j, "mean_ece_before", ece0);
    cJSON_AddNumberToObject(j, "mean_ece_after", ece1);
    cJSON *ps = cJSON_AddArrayToObject(j, "positions");
    for (int k = 0; k < K; k++) {
        const bs_sts_pos *p = &pos[k];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "position", k + 1);
        cJSON_AddNumberToObject(o, "temperature", (double)(float)T[k]);
        if (a->bias) cJSON_AddNumberToObject(o, "bias", (double)(float)B[k]);
        cJSON_AddStringToObject(o, "status", bs_sts_status_name(p->status));
        if (p->at_bound) cJSON_AddBoolToObject(o, "at_search_bound", 1);
        cJSON_AddNumberToObject(o, "n", p->n);
        cJSON_AddNumberToObject(o, "survived", p->survived);
        cJSON_AddNumberToObject(o, "survival", p->survival);
        cJSON_AddNumberToObject(o, "mean_confidence", p->mean_conf);
        cJSON_AddNumberToObject(o, "mean_predicted_before", p->mean_before);
        cJSON_AddNumberToObject(o, "mean_predicted_after", p->mean_after);
        cJSON_AddNumberToObject(o, "ece_before", p->ece_before);
        cJSON_AddNumberToObject(o, "ece_after", p->ece_after);
        cJSON_AddNumberToObject(o, "nll_before", p->nll_before);
        cJSON_AddNumberToObject(o, "nll_after", p->nll_after);
        cJSON_AddItemToArray(ps, o);
    }
    return j;
}

int cmd_calibrate(int argc, char **argv) {
    cal_args a;
    int rc = parse(argc, argv, &a);
    if (rc) return rc;
    rc = 1;
    bs_err err = {0};
    bs_engine *e = NULL;
    bs_drafter *d = NULL;
    source src[MAX_DATA] = {0};
    window *win = NULL;
    int n_win = 0;
    bs_calib_rounds rounds = {0};
    int32_t *gen = NULL;
    uint8_t *gmask = NULL;
    double T[BS_MAX_DRAFT], B[BS_MAX_DRAFT];
    bs_sts_pos pos[BS_MAX_DRAFT];
    cJSON *j = NULL;
    char out_path[4096];
    if (a.out) snprintf(out_path, sizeof out_path, "%s", a.out);
    else snprintf(out_path, sizeof out_path, "%s/%s", a.drafter, BS_CALIBRATION_FILE);

    if (bs_engine_open(&e, a.model, a.device, &err)) goto out;
    // Windows longer than the context (less room for the verify block) are cut to fit.
    int L = (int)a.seq_len;
    {
        bs_drafter_config dc;
        if (bs_dspark_v1_present(a.drafter)) {   // (calib_rounds drives bs_dflash_forward_block; docs/dspark-v1.md)
            bs_fail(&err, "%s: calibrate does not run on the seed's DSpark v1 adapters (dspark.json) yet; a calibration.json written "
                    "for one by hand is applied", a.drafter);
            goto out;
        }
        if (bs_drafter_config_load(&dc, a.drafter, &err)) goto out;
        if (dc.arch != BS_DRAFTER_DEEPSPEC || !dc.conf_head) {
            bs_fail(&err, "%s: calibration needs a DSpark drafter with a confidence head (Qwen3DSparkModel with \"enable_confidence_head\": true)", a.drafter);
            goto out;
        }
        int room = e->cfg.max_position - bs_drafter_gamma(&dc) - 1;
        if (room < 2) { bs_fail(&err, "%s: max_position_embeddings %d leaves no room for a round", a.model, e->cfg.max_position); goto out; }
        if (a.generate) {   // sequences are a prompt and its continuation
            if (a.prompt_len + a.generate > room) {
                bs_fail(&err, "--prompt-len %ld + --generate %ld exceed the %d positions a round has room for (max_position_embeddings %d)",
                        a.prompt_len, a.generate, room, e->cfg.max_position);
                goto out;
            }
            L = (int)(a.prompt_len + a.generate);
        } else if (L > room) L = room;
    }
    // The raw head is what is fitted: a calibration.json already there is not applied.
    bs_drafter_opts dop = { .lossy_weights = 0, .no_calibration = 1 };
    if (bs_drafter_open_opts(&d, a.drafter, e, L, &dop, &err)) goto out;
    if (d->warning[0]) fprintf(stderr, "blockspec: warning: %s\n", d->warning);
    int gamma = d->max_drafts, K = a.draft_max ? (int)a.draft_max : gamma;
    if (K > gamma) { fprintf(stderr, "blockspec calibrate: --draft-max %d is above the drafter's %d drafts per round; using %d\n", K, gamma, gamma); K = gamma; }
    for (int i = 0; i < a.n_data; i++) if (open_source(&src[i], a.data[i], e, &err)) goto out;
    if (list_windows(src, a.n_data, a.generate ? (int)a.prompt_len : L, &win, &n_win, &err)) goto out;
    if (!n_win) { bs_fail(&err, "the held-out data holds no sequence of 2 tokens or more"); goto out; }

    // A seeded draw of the sequences, then of the anchors within each.
    bs_rng rng;
    bs_rng_seed(&rng, (uint64_t)a.seed);
    int n_seqs = a.max_seqs < n_win ? (int)a.max_seqs : n_win;
    for (int i = 0; i < n_seqs; i++) {
        int k = i + (int)(bs_rng_u64(&rng) % (uint64_t)(n_win - i));
        window t = win[i]; win[i] = win[k]; win[k] = t;
    }
    if (a.generate)
        fprintf(stderr, "calibrate: %d prompts of up to %ld tokens (of %d) continued greedily for %ld tokens, %ld anchors each, %d draft positions\n",
                n_seqs, a.prompt_len, n_win, a.generate, a.anchors, K);
    else
        fprintf(stderr, "calibrate: %d sequences of up to %d tokens (of %d), %ld anchors each, %d draft positions, greedy verification\n", n_seqs, L,
                n_win, a.anchors, K);
    if (a.generate && (!(gen = malloc(sizeof(int32_t) * L)) || !(gmask = calloc(L, 1)))) { bs_fail(&err, "out of memory"); goto out; }
    int step = n_seqs / 10 > 0 ? n_seqs / 10 : 1;
    // The held-out sequences are the draw's last ones: their rounds follow the fitted ones'.
    int n_hold = (int)(a.holdout_frac * n_seqs + 0.5), fit_rounds = -1;
    if (n_hold >= n_seqs) n_hold = n_seqs - 1;
    for (int i = 0; i < n_seqs; i++) {
        if (i == n_seqs - n_hold) fit_rounds = rounds.n;
        const window *w = &win[i];
        const source *s = &src[w->src];
        const int32_t *ids = (s->c ? s->c->ids : s->ids) + w->start;
        const uint8_t *mask = s->c && s->c->mask ? s->c->mask + w->start : NULL;
        int len = w->len;
        if (a.generate) {   // the target's greedy continuation of the window: the text decoding would see
            int n_gen = 0;
            if (continue_greedy(e, ids, len, (int)a.generate, gen, gmask, &n_gen, &err)) goto out;
            ids = gen; mask = gmask; len += n_gen;
        }
        if (bs_calib_record_seq(e, d, ids, mask, len, (int)a.anchors, K, &rng, &rounds, &err) < 0) goto out;
        if ((i + 1) % step == 0 || i + 1 == n_seqs) fprintf(stderr, "calibrate: %d/%d sequences, %d rounds\n", i + 1, n_seqs, rounds.n);
    }
    if (!rounds.n) { bs_fail(&err, "no anchor positions in the held-out data (every token masked out, or end-of-sequence tokens only)"); goto out; }

    if (fit_rounds < 0) fit_rounds = rounds.n;
    if (!fit_rounds) { bs_fail(&err, "no rounds left to fit after holding out %d of %d sequences", n_hold, n_seqs); goto out; }
    bs_sts_data sd = { fit_rounds, K, rounds.z, rounds.y, rounds.n_valid };
    bs_sts_data hd = { rounds.n - fit_rounds, K, rounds.z + (size_t)fit_rounds * K, rounds.y + (size_t)fit_rounds * K,
                       rounds.n_valid ? rounds.n_valid + fit_rounds : NULL };
    bs_sts_opts so = { (int)a.min_samples, (int)a.bins, a.bias };
    if (bs_sts_fit(&sd, &so, T, B, pos, &err)) goto out;

    printf("Sequential Temperature Scaling%s of %s (target %s): %d rounds on %d held-out sequences\n", a.bias ? " with a bias" : "", a.drafter,
           a.model, fit_rounds, n_seqs - n_hold);
    printf("c_k = sigmoid(z_k / T_k%s); a_k = prod_{i<=k} c_i against survival through k; ECE over %ld equal-width bins\n\n", a.bias ? " + b_k" : "",
           a.bins);
    printf("  pos        n  survival  mean c_k  mean a_k raw  mean a_k STS         T%s  ECE raw  ECE STS  status\n", a.bias ? "         b" : "");
    double ece0 = 0, ece1 = 0;
    int counted = 0;
    for (int k = 0; k < K; k++) {
        const bs_sts_pos *p = &pos[k];
        printf("  %3d %8d  %8.4f  %8.4f  %12.4f  %12.4f  %8.4g", k + 1, p->n, p->survival, p->mean_conf, p->mean_before, p->mean_after, p->T);
        if (a.bias) printf("  %8.4g", p->b);
        printf("  %6.2f%%  %6.2f%%  %s%s\n", 100 * p->ece_before, 100 * p->ece_after, bs_sts_status_name(p->status),
               p->at_bound ? " (at the search bound)" : "");
        if (p->n) { ece0 += p->ece_before; ece1 += p->ece_after; counted++; }
    }
    if (counted) { ece0 /= counted; ece1 /= counted; }
    printf("  mean ECE over positions: raw %.2f%%, STS %.2f%%\n", 100 * ece0, 100 * ece1);
    for (int k = 0; k < K; k++) {
        const bs_sts_pos *p = &pos[k];
        if (p->status == BS_STS_FITTED) continue;
        // Degenerate data keeps the raw head (T = 1) and says why, position by position.
        fprintf(stderr, "blockspec calibrate: warning: position %d: %s (%d rounds, %d survived): temperature left at 1\n", k + 1,
                bs_sts_status_name(p->status), p->n, p->survived);
    }
    // A temperature cannot move a confidence across 0.5: where the fitted mean stays far from the survival,
    // a bias is what is missing.
    for (int k = 0; k < K && !a.bias; k++)
        if (pos[k].status == BS_STS_FITTED && fabs(pos[k].mean_after - pos[k].survival) > 0.02) {
            fprintf(stderr, "blockspec calibrate: note: position %d: mean predicted survival %.3f vs observed %.3f after scaling; --bias fits an offset too\n",
                    k + 1, pos[k].mean_after, pos[k].survival);
            break;
        }
    print_tables(&sd, T, a.bias ? B : NULL, pos, (int)a.bins);
    double hece[3] = { 0, 0, 0 };
    if (hd.n_rounds > 0 && heldout_ece(&hd, T, a.bias ? B : NULL, (int)a.bins, n_hold, hece, &err)) goto out;

    j = result_json(&a, gamma, K, n_seqs - n_hold, &sd, T, B, pos, ece0, ece1);
    if (j && hd.n_rounds > 0) {
        cJSON *h = cJSON_AddObjectToObject(j, "held_out");
        cJSON_AddNumberToObject(h, "sequences", n_hold);
        cJSON_AddNumberToObject(h, "rounds", hd.n_rounds);
        cJSON_AddNumberToObject(h, "mean_ece_before", hece[0]);
        cJSON_AddNumberToObject(h, "mean_ece_after", hece[1]);
        cJSON_AddNumberToObject(h, "mean_ece_floor", hece[2]);
    }
    // atomic (bs_json_write_file): a drafter folder never holds a half-written calibration
    if (!j || bs_json_write_file(j, out_path, &err)) goto out;
    printf("\nwrote %s\n", out_path);
    rc = 0;
out:
    if (rc) fprintf(stderr, "blockspec calibrate: %s\n", err.msg);
    cJSON_Delete(j);
    bs_calib_rounds_free(&rounds);
    free(win); free(gen); free(gmask);
    for (int i = 0; i < MAX_DATA; i++) { if (src[i].c) bs_corpus_close(src[i].c); free(src[i].ids); }
    if (d) d->free(d);
    bs_engine_close(e);
    return rc;
}
