// blockspec train-target / train-drafter: the training loop (src/train/trainer.h) over a task built by the
// factories of src/train/tasks.h. docs/training.md describes the data, optimiser, checkpoints and logs.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli/args.h"
#include "cli/commands.h"
#include "io/config.h"
#include "io/tokenizer.h"
#include "train/corpus.h"
#include "train/tasks.h"
#include "train/trainer.h"

static void usage_common(void) {
    fprintf(stderr,
        "  --data CORPUS        training corpus (blockspec tokenize --corpus)\n"
        "  --heldout CORPUS     held-out corpus, evaluated every --eval-every steps and at the end\n"
        "  --out DIR            checkpoint (train_state.safetensors), export (config.json + model.safetensors),\n"
        "                       train_log.csv and loss.png go here\n"
        "  --resume DIR         continue the run saved in DIR (same settings and data; --out defaults to DIR)\n"
        "  --steps N (1000)  --batch B (1)  --seq-len S (1024)  --accum A (1)   one step = A x B sequences of S tokens\n"
        "  --lr X (6e-4)  --warmup-ratio X (0.04)  --weight-decay X (0)  --clip X (1.0; 0: off)  --seed N (0)\n"
        "  --eval-every N (0: at the end)  --eval-seqs N (16)  --save-every N (0: at the end)\n"
        "  --stop-after N       stop (saving) after N steps of this invocation; --time-limit MIN: after MIN minutes\n"
        "  --peak-tflops X      dense peak of the device, for the MFU figure\n"
        "  --device cpu|cuda    --no-plot\n");
}

static void usage_target(void) {
    fprintf(stderr, "usage: blockspec train-target (--config CONFIG.json | --init DIR) --tokenizer DIR --data CORPUS --out DIR [options]\n"
                    "  Trains a Qwen3 or Llama-3.x target (the config's architectures: Qwen3ForCausalLM, LlamaForCausalLM;\n"
                    "  llama3 RoPE scaling from rope_scaling / rope_parameters) with next-token cross-entropy.\n");
    usage_common();
}

static void usage_drafter(void) {
    fprintf(stderr,
        "usage: blockspec train-drafter -m TARGET --arch dspark|dflash|zlab-dflash|dflash2 --data CORPUS --out DIR [options]\n"
        "  Trains a block drafter against the frozen TARGET (Qwen3 or Llama-3.x), online. The drafter's layers are\n"
        "  Qwen3's (q/k norm) with the target's RoPE (theta, llama3 scaling), as z-lab's and DeepSpec's.\n"
        "  --layers N (5)  --block B (7)  --markov-rank R (dspark 256, else 0)  --markov-head vanilla|gated|rnn\n"
        "  --no-confidence  --taps 1,9,17  --anchors N (512)  --gamma X (4)  --ce X --l1 X --conf X (dspark 0.1/0.9/1.0,\n"
        "  else 1/0/0; dflash2: --conf is the selector's CE, 1/0/1)  --mask-id N  --init DIR (start from a drafter checkpoint)\n"
        "  dflash2 (z-lab's layout + convolutions + candidate selector): --selector-rank R (64)  --selector-top-k K (16)\n"
        "  --conv-group G (16, or the largest divisor of the hidden size below it)\n"
        "  --labels data|target (data): learn the data's next tokens, or the target's own greedy next tokens on the\n"
        "  data (distillation: what greedy verification accepts)\n");
    usage_common();
}

typedef struct { int tty; int64_t every; } progress_ctx;

static void on_progress(const bs_train_progress *p, void *vctx) {
    progress_ctx *c = vctx;
    if (p->note) { fprintf(stderr, "%s%s\n", c->tty ? "\r\033[K" : "", p->note); return; }
    char line[512];
    bs_train_format_progress(p, line, sizeof line);
    if (p->is_eval) fprintf(stderr, "%s%s\n", c->tty ? "\r\033[K" : "", line);
    else if (c->tty) fprintf(stderr, "\r\033[K%s%s", line, p->step == p->steps ? "\n" : "");
    else if (p->step % c->every == 0 || p->step == p->steps || p->step == 1) fprintf(stderr, "%s\n", line);
}

// The model's vocabulary (config.json vocab_size) for the corpus check.
static int model_vocab(const char *config_file, const char *dir, int *vocab, bs_err *err) {
    bs_qwen3_config c;
    if (dir) { if (bs_qwen3_config_load(&c, dir, err)) return -1; *vocab = c.vocab_size; return 0; }
    FILE *f = fopen(config_file, "rb");
    if (!f) return bs_fail(err, "%s: cannot open (%m)", config_file);
    char *buf = NULL; size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    char tmp[65536]; size_t r;
    while (m && (r = fread(tmp, 1, sizeof tmp, f)) > 0) fwrite(tmp, 1, r, m);
    if (m) fclose(m);
    fclose(f);
    cJSON *root = buf ? cJSON_ParseWithLength(buf, len) : NULL;
    free(buf);
    if (!root) return bs_fail(err, "%s: not valid JSON", config_file);
    int rc = bs_qwen3_config_parse(&c, root, config_file, err);
    cJSON_Delete(root);
    if (!rc) *vocab = c.vocab_size;
    return rc;
}

static int file_exists(const char *p) { struct stat st; return stat(p, &st) == 0; }

static int run(int drafter, int argc, char **argv) {
    bs_train_opts o = bs_train_opts_default();
    bs_train_target_opts to = { 0 };
    bs_train_drafter_opts dopt = { .layers = 5, .block_size = 7, .markov_rank = -1, .confidence_head = 1, .num_anchors = 512,
                                   .gamma = 4, .ce_alpha = -1, .l1_alpha = -1, .conf_alpha = -1, .mask_token_id = -1 };
    const char *data = NULL, *held = NULL, *tokenizer = NULL, *name = drafter ? "train-drafter" : "train-target";
    int32_t *taps = NULL;
    long n; double x;
    int rc = 2, no_conf = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { drafter ? usage_drafter() : usage_target(); free(taps); return 0; }
        if (!strcmp(a, "--no-plot")) { o.no_plot = 1; continue; }
        if (!strcmp(a, "--no-confidence")) { no_conf = 1; continue; }
        if (!(v = cli_value(argc, argv, &i))) goto out;
#define INT(flag, lo, hi, dst) else if (!strcmp(a, flag)) { if (cli_int(flag, v, lo, hi, &n)) goto out; dst = n; }
#define NUM(flag, lo, hi, dst) else if (!strcmp(a, flag)) { if (cli_float(flag, v, lo, hi, &x)) goto out; dst = x; }
        if (!strcmp(a, "--data")) data = v;
        else if (!strcmp(a, "--heldout")) held = v;
        else if (!strcmp(a, "--out")) o.out_dir = v;
        else if (!strcmp(a, "--resume")) o.resume_dir = v;
        else if (!strcmp(a, "--device")) to.device = dopt.device = v;
        INT("--steps", 1, 1L << 40, o.steps)
        INT("--batch", 1, 1 << 20, o.batch)
        INT("--seq-len", 2, 1 << 24, o.seq_len)
        INT("--accum", 1, 1 << 20, o.accum)
        INT("--eval-every", 0, 1L << 40, o.eval_every)
        INT("--eval-seqs", 1, 1 << 20, o.eval_seqs)
        INT("--save-every", 0, 1L << 40, o.save_every)
        INT("--stop-after", 0, 1L << 40, o.stop_after)
        INT("--seed", 0, INT64_MAX, o.seed)
        NUM("--lr", 1e-12, 10, o.lr)
        NUM("--warmup-ratio", 0, 0.999, o.warmup_ratio)
        NUM("--weight-decay", 0, 10, o.weight_decay)
        NUM("--clip", 0, 1e9, o.clip)
        NUM("--time-limit", 0, 1e7, o.time_limit_s)
        NUM("--peak-tflops", 0, 1e6, o.peak_flops)
        else if (!drafter && !strcmp(a, "--config")) to.config_path = v;
        else if (!drafter && !strcmp(a, "--init")) to.init_dir = v;
        else if (!drafter && !strcmp(a, "--tokenizer")) tokenizer = v;
        else if (drafter && (!strcmp(a, "-m") || !strcmp(a, "--model"))) dopt.target_dir = v;
        else if (drafter && !strcmp(a, "--arch")) dopt.arch = v;
        else if (drafter && !strcmp(a, "--markov-head")) dopt.markov_head_type = v;
        else if (drafter && !strcmp(a, "--init")) dopt.init_dir = v;
        else if (drafter && !strcmp(a, "--labels")) {
            if (strcmp(v, "data") && strcmp(v, "target")) { fprintf(stderr, "blockspec train-drafter: --labels is data or target, got '%s'\n", v); goto out; }
            dopt.target_labels = !strcmp(v, "target");
        }
        else if (drafter && !strcmp(a, "--taps")) { free(taps); if ((dopt.n_taps = cli_parse_ids(a, v, &taps)) < 0) goto out; dopt.taps = taps; }
        INT("--layers", 1, 256, dopt.layers)
        INT("--block", 2, 64, dopt.block_size)
        INT("--markov-rank", 0, 1 << 16, dopt.markov_rank)
        INT("--selector-rank", 1, 1 << 16, dopt.sel_rank)
        INT("--selector-top-k", 1, 1024, dopt.sel_top_k)
        INT("--conv-group", 1, 1 << 20, dopt.conv_group)
        INT("--anchors", 1, 1 << 20, dopt.num_anchors)
        INT("--mask-id", 0, INT32_MAX, dopt.mask_token_id)
        NUM("--gamma", 1e-6, 1e6, dopt.gamma)
        NUM("--ce", 0, 1e6, dopt.ce_alpha)
        NUM("--l1", 0, 1e6, dopt.l1_alpha)
        NUM("--conf", 0, 1e6, dopt.conf_alpha)
        else { fprintf(stderr, "blockspec %s: unknown option '%s'\n", name, a); drafter ? usage_drafter() : usage_target(); goto out; }
#undef INT
#undef NUM
    }
    o.time_limit_s *= 60;
    o.peak_flops *= 1e12;
    if (!o.out_dir) o.out_dir = o.resume_dir;
    if (!data || !o.out_dir) { fprintf(stderr, "blockspec %s: --data and --out (or --resume) are required\n", name); drafter ? usage_drafter() : usage_target(); goto out; }
    if (!drafter && !!to.config_path == !!to.init_dir) { fprintf(stderr, "blockspec train-target: give one of --config CONFIG.json (a new model) or --init DIR\n"); goto out; }
    if (!drafter && !tokenizer) { fprintf(stderr, "blockspec train-target: --tokenizer DIR is required (the corpus is checked against it)\n"); goto out; }
    if (drafter) {
        if (!dopt.target_dir || !dopt.arch) { fprintf(stderr, "blockspec train-drafter: -m TARGET and --arch are required\n"); goto out; }
        int dspark = !strcmp(dopt.arch, "dspark"), d2 = !strcmp(dopt.arch, "dflash2");
        if (!dspark && !d2 && strcmp(dopt.arch, "dflash") && strcmp(dopt.arch, "zlab-dflash")) { fprintf(stderr, "blockspec train-drafter: --arch is dspark, dflash, zlab-dflash or dflash2, got '%s'\n", dopt.arch); goto out; }
        // DeepSpec's defaults: DSpark with a rank-256 vanilla Markov head, the confidence head and (0.1, 0.9, 1.0);
        // the DFlash baselines CE only, no heads.
        if (dopt.markov_rank < 0) dopt.markov_rank = dspark ? 256 : 0;
        if (!dopt.markov_head_type) dopt.markov_head_type = "vanilla";
        dopt.confidence_head = dspark && !no_conf;
        if (dopt.ce_alpha < 0) dopt.ce_alpha = dspark ? 0.1 : 1.0;
        if (dopt.l1_alpha < 0) dopt.l1_alpha = dspark ? 0.9 : 0.0;
        if (dopt.conf_alpha < 0) dopt.conf_alpha = dopt.confidence_head || d2 ? 1.0 : 0.0;   // DFlash 2: the selector's term
        dopt.seed = o.seed;
    }
    to.seed = o.seed;
    to.max_batch_seqs = o.batch; to.max_seq_len = o.seq_len;
    dopt.max_batch_seqs = o.batch; dopt.max_seq_len = o.seq_len;
    rc = 1;
    bs_err err;
    bs_corpus *train = NULL, *heldout = NULL;
    bs_train_task *task = NULL;
    // Data first: a corrupt corpus or one made with another tokenizer is refused before any model is built.
    if (bs_corpus_open(&train, data, &err) || (held && bs_corpus_open(&heldout, held, &err))) { fprintf(stderr, "blockspec %s: %s\n", name, err.msg); goto done; }
    char tokpath[4096];
    const char *tok = tokenizer;
    if (!tok && drafter) {   // a drafter's corpus is checked against the target's tokenizer when it has one
        snprintf(tokpath, sizeof tokpath, "%s/tokenizer.json", dopt.target_dir);
        if (file_exists(tokpath)) tok = dopt.target_dir;
    }
    if (tok) {
        bs_tokenizer *t;
        uint64_t hash;
        if (bs_tokenizer_load(&t, tok, &err) || bs_tokenizer_file_hash(tok, &hash, &err)) { fprintf(stderr, "blockspec %s: %s\n", name, err.msg); goto done; }
        int64_t tv = (int64_t)bs_tokenizer_vocab_size(t);
        bs_tokenizer_free(t);
        for (int k = 0; k < 2; k++) {
            const bs_corpus *c = k ? heldout : train;
            if (c && bs_corpus_check_tokenizer(c, hash, tv, tok, &err)) { fprintf(stderr, "blockspec %s: %s\n", name, err.msg); goto done; }
        }
    }
    int vocab;
    if (model_vocab(to.config_path, drafter ? dopt.target_dir : to.init_dir, &vocab, &err)) { fprintf(stderr, "blockspec %s: %s\n", name, err.msg); goto done; }
    for (int k = 0; k < 2; k++) {
        const bs_corpus *c = k ? heldout : train;
        if (c && c->vocab_size > vocab) {
            fprintf(stderr, "blockspec %s: %s has ids up to %lld (tokenizer vocabulary), the model's vocab_size is %d: made with another tokenizer?\n",
                    name, c->path, (long long)c->vocab_size - 1, vocab);
            goto done;
        }
    }
    if (drafter ? bs_train_drafter_task_new(&task, &dopt, &err) : bs_train_target_task_new(&task, &to, &err)) { fprintf(stderr, "blockspec %s: %s\n", name, err.msg); goto done; }
    progress_ctx pc = { isatty(2), o.steps / 100 > 0 ? o.steps / 100 : 1 };
    if (bs_train_run(task, train, heldout, &o, on_progress, &pc, &err)) { fprintf(stderr, "%sblockspec %s: %s\n", pc.tty ? "\n" : "", name, err.msg); goto done; }
    rc = 0;
done:
    if (task && task->free) task->free(task);
    bs_corpus_close(train); bs_corpus_close(heldout);
out:
    free(taps);
    return rc;
}

int cmd_train_target(int argc, char **argv) { return run(0, argc, argv); }
int cmd_train_drafter(int argc, char **argv) { return run(1, argc, argv); }
