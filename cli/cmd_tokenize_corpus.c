// blockspec tokenize --corpus: text files (and chat JSONL) -> a tokenised training corpus (src/train/corpus.h),
// with an optional held-out corpus split off by whole documents. docs/training.md, "Corpus format".
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "cli/commands.h"
#include "io/chat.h"
#include "io/tokenizer.h"
#include "train/corpus.h"
#include "util/rng.h"

static void usage(void) {
    fprintf(stderr,
        "usage: blockspec tokenize --corpus OUT -m MODEL_DIR|tokenizer.json [options] FILE...\n"
        "  Writes the token ids of FILEs to the corpus OUT (docs/training.md, \"Corpus format\").\n"
        "  --doc-sep SEP        split each file into documents at SEP (C escapes: \\n, \\t, \\\\); default: one\n"
        "                       document per file\n"
        "  --chat JSONL         one conversation per line, {\"messages\": [{\"role\", \"content\"}, ...]}, rendered\n"
        "                       with the tokenizer's chat template; only assistant turns are labels (loss mask)\n"
        "  --chat-template K    chatml or qwen3, when the tokenizer folder has no chat template\n"
        "  --eos TOKEN          token appended to every document (default: the tokenizer's eos token, else\n"
        "                       <|endoftext|>); --no-eos: none\n"
        "  --heldout-frac F     put round(F x documents) whole documents, chosen with --seed N (default 0),\n"
        "                       in the held-out corpus\n"
        "  --heldout FILE       put FILE's documents in the held-out corpus (repeatable; text or --chat files\n"
        "                       are named again here)\n"
        "  --heldout-out PATH   where the held-out corpus goes (default OUT.heldout)\n");
}

typedef struct { const char *file; int chat, heldout; const char *text; size_t len; long line; } doc;

typedef struct { doc *d; size_t n, cap; } doc_list;

static int push(doc_list *l, doc d) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        doc *nd = realloc(l->d, sizeof *nd * cap);
        if (!nd) return -1;
        l->d = nd; l->cap = cap;
    }
    l->d[l->n++] = d;
    return 0;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0, r;
    char *b = malloc(cap + 1);
    while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) { char *nb = realloc(b, (cap *= 2) + 1); if (!nb) { free(b); b = NULL; } else b = nb; }
    }
    fclose(f);
    if (b) { b[n] = 0; *len = n; }
    return b;
}

static char *unescape(const char *s) {
    char *o = malloc(strlen(s) + 1), *p = o;
    if (!o) return NULL;
    for (; *s; s++) {
        if (*s == '\\' && s[1]) {
            s++;
            *p++ = *s == 'n' ? '\n' : *s == 't' ? '\t' : *s == 'r' ? '\r' : *s;
        } else *p++ = *s;
    }
    *p = 0;
    return o;
}

// Growing id + mask buffers for one document.
typedef struct { int32_t *ids; uint8_t *mask; size_t n, cap; } tokbuf;

static int tb_append(tokbuf *b, const int32_t *ids, size_t n, uint8_t m) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n) cap *= 2;
        int32_t *ni = realloc(b->ids, sizeof *ni * cap);
        if (ni) b->ids = ni;
        uint8_t *nm = realloc(b->mask, cap);
        if (nm) b->mask = nm;
        if (!ni || !nm) return -1;
        b->cap = cap;
    }
    memcpy(b->ids + b->n, ids, sizeof *ids * n);
    memset(b->mask + b->n, m, n);
    b->n += n;
    return 0;
}

static int encode_append(const bs_tokenizer *t, tokbuf *b, const char *s, size_t len, uint8_t m, bs_err *err) {
    if (!len) return 0;
    int32_t *ids; size_t n;
    if (bs_tokenizer_encode_ex(t, s, len, 0, &ids, &n, err)) return -1;
    int rc = tb_append(b, ids, n, m);
    free(ids);
    return rc ? bs_fail(err, "out of memory") : 0;
}

// One conversation: each turn is tokenised on its own (turns begin and end at the template's special
// tokens, where a whole-text encode would cut too); assistant replies get mask 1, the rest 0.
static int encode_chat(const bs_tokenizer *t, bs_chat_kind kind, const doc *d, tokbuf *b, bs_err *err) {
    cJSON *root = cJSON_ParseWithLength(d->text, d->len);
    cJSON *msgs = root ? cJSON_GetObjectItemCaseSensitive(root, "messages") : NULL;
    int rc = -1, n = cJSON_GetArraySize(msgs);
    bs_chat_msg *m = NULL;
    char *full = NULL;
    if (!cJSON_IsArray(msgs) || n < 1) { bs_fail(err, "%s:%ld: expected a JSON object with a non-empty \"messages\" array", d->file, d->line); goto out; }
    if (!(m = calloc(n, sizeof *m))) { bs_fail(err, "out of memory"); goto out; }
    for (int i = 0; i < n; i++) {
        cJSON *it = cJSON_GetArrayItem(msgs, i);
        cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role"), *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!cJSON_IsString(role) || !cJSON_IsString(content)) { bs_fail(err, "%s:%ld: message %d needs string \"role\" and \"content\"", d->file, d->line, i); goto out; }
        m[i].role = role->valuestring; m[i].content = content->valuestring;
    }
    bs_chat_opts o = { .kind = kind, .add_generation_prompt = 0, .enable_thinking = 1 };
    if (bs_chat_render(t, m, n, &o, &full, err)) { bs_wrap(err, "%s:%ld", d->file, d->line); goto out; }
    size_t done = 0, full_len = strlen(full);
    for (int i = 0; i < n; i++) {
        // The text up to and including turn i, and (for a reply) up to the reply's start.
        char *upto = NULL, *prompt = NULL;
        o.add_generation_prompt = 0;
        if (bs_chat_render(t, m, i + 1, &o, &upto, err)) { bs_wrap(err, "%s:%ld", d->file, d->line); goto out; }
        size_t end = strlen(upto), start = end;   // [done, start): not labels; [start, end): the reply
        int ok = end <= full_len && !memcmp(upto, full, end) && end >= done;
        if (ok && !strcmp(m[i].role, "assistant")) {
            o.add_generation_prompt = 1;
            if (bs_chat_render(t, m, i, &o, &prompt, err)) { free(upto); bs_wrap(err, "%s:%ld", d->file, d->line); goto out; }
            start = strlen(prompt);
            ok = start >= done && start <= end && !memcmp(prompt, full, start);
        }
        free(upto); free(prompt);
        if (!ok) { bs_fail(err, "%s:%ld: the chat template does not render turn %d as a prefix of the whole conversation "
                             "(earlier reasoning dropped?), so its reply tokens cannot be marked", d->file, d->line, i); goto out; }
        if (encode_append(t, b, full + done, start - done, 0, err) || encode_append(t, b, full + start, end - start, 1, err)) goto out;
        done = end;
    }
    if (encode_append(t, b, full + done, full_len - done, 0, err)) goto out;
    rc = 0;
out:
    free(full); free(m); cJSON_Delete(root);
    return rc;
}

int cmd_tokenize_corpus(int argc, char **argv) {
    const char *out = NULL, *model = NULL, *heldout_out = NULL, *eos_name = NULL, *sep_arg = NULL;
    bs_chat_kind chat_kind = BS_CHAT_AUTO;
    double frac = 0; long seed = 0; int no_eos = 0, rc = 1;
    const char **files = calloc(argc, sizeof *files), **chats = calloc(argc, sizeof *chats), **held = calloc(argc, sizeof *held);
    int n_files = 0, n_chats = 0, n_held = 0;
    char **texts = calloc(2 * argc + 1, sizeof *texts), *sep = NULL;
    int n_texts = 0;
    doc_list docs = { 0 };
    tokbuf tb = { 0 };
    bs_tokenizer *t = NULL;
    bs_corpus_writer *w[2] = { 0 };
    bs_err err;
    if (!files || !chats || !held || !texts) { fprintf(stderr, "blockspec tokenize: out of memory\n"); goto done; }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); rc = 0; goto done; }
        else if (!strcmp(a, "--no-eos")) { no_eos = 1; continue; }
        else if (a[0] != '-' || !a[1]) { files[n_files++] = a; continue; }
        if (!(v = cli_value(argc, argv, &i))) { rc = 2; goto done; }
        if (!strcmp(a, "--corpus")) out = v;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--doc-sep")) sep_arg = v;
        else if (!strcmp(a, "--chat")) chats[n_chats++] = v;
        else if (!strcmp(a, "--eos")) eos_name = v;
        else if (!strcmp(a, "--chat-template")) { if (bs_chat_kind_parse(v, &chat_kind, &err)) { fprintf(stderr, "blockspec tokenize: %s\n", err.msg); rc = 2; goto done; } }
        else if (!strcmp(a, "--heldout")) held[n_held++] = v;
        else if (!strcmp(a, "--heldout-out")) heldout_out = v;
        else if (!strcmp(a, "--heldout-frac")) { if (cli_float(a, v, 0, 0.999, &frac)) { rc = 2; goto done; } }
        else if (!strcmp(a, "--seed")) { if (cli_int(a, v, 0, INT32_MAX, &seed)) { rc = 2; goto done; } }
        else { fprintf(stderr, "blockspec tokenize: unknown option '%s'\n", a); usage(); rc = 2; goto done; }
    }
    if (!out || !model || (!n_files && !n_chats)) { usage(); rc = 2; goto done; }
    if (frac > 0 && n_held) { fprintf(stderr, "blockspec tokenize: --heldout-frac and --heldout are alternatives; give one\n"); rc = 2; goto done; }
    if (sep_arg && !(sep = unescape(sep_arg))) goto done;
    if (sep && !*sep) { fprintf(stderr, "blockspec tokenize: --doc-sep is empty\n"); rc = 2; goto done; }
    if (bs_tokenizer_load(&t, model, &err)) { fprintf(stderr, "blockspec tokenize: %s\n", err.msg); goto done; }
    int32_t eos = -1;
    if (!no_eos) {
        eos = eos_name ? bs_tokenizer_token_id(t, eos_name) : bs_tokenizer_eos_id(t);
        if (eos < 0 && !eos_name) eos = bs_tokenizer_token_id(t, "<|endoftext|>");
        if (eos < 0) {
            fprintf(stderr, "blockspec tokenize: %s: %s; name the document separator with --eos TOKEN or pass --no-eos\n", model,
                    eos_name ? "the --eos token is not in the vocabulary" : "no eos token (tokenizer_config.json) and no <|endoftext|>");
            goto done;
        }
    }
    // Every input file, read once; its documents point into its text.
    for (int pass = 0; pass < 2; pass++) {
        int n = pass ? n_chats : n_files;
        for (int k = 0; k < n; k++) {
            const char *path = pass ? chats[k] : files[k];
            size_t len;
            char *text = slurp(path, &len);
            if (!text) { fprintf(stderr, "blockspec tokenize: cannot read %s\n", path); goto done; }
            texts[n_texts++] = text;
            int is_held = 0;
            for (int h = 0; h < n_held; h++) if (!strcmp(held[h], path)) is_held = 1;
            if (pass) {   // JSONL: one conversation per non-blank line
                long line = 0;
                for (char *p = text; p < text + len;) {
                    char *nl = memchr(p, '\n', text + len - p), *e = nl ? nl : text + len;
                    line++;
                    int blank = 1;
                    for (char *q = p; q < e; q++) if (*q != ' ' && *q != '\t' && *q != '\r') blank = 0;
                    if (!blank && push(&docs, (doc){ path, 1, is_held, p, (size_t)(e - p), line })) goto oom;
                    p = e + 1;
                }
            } else if (sep) {
                size_t sl = strlen(sep);
                for (char *p = text; p <= text + len;) {
                    char *e = memmem(p, text + len - p, sep, sl);
                    if (!e) e = text + len;
                    if (e > p && push(&docs, (doc){ path, 0, is_held, p, (size_t)(e - p), 0 })) goto oom;
                    p = e + sl;
                }
            } else if (len && push(&docs, (doc){ path, 0, is_held, text, len, 0 })) goto oom;
        }
    }
    for (int h = 0; h < n_held; h++) {
        int found = 0;
        for (int k = 0; k < n_files; k++) found |= !strcmp(files[k], held[h]);
        for (int k = 0; k < n_chats; k++) found |= !strcmp(chats[k], held[h]);
        if (!found) { fprintf(stderr, "blockspec tokenize: --heldout %s is not among the input files\n", held[h]); rc = 2; goto done; }
    }
    if (frac > 0) {   // round(frac x n) documents, drawn without replacement by a seeded partial shuffle
        size_t k = (size_t)(frac * docs.n + 0.5), n = docs.n;
        if (k < 1 || k >= n) { fprintf(stderr, "blockspec tokenize: --heldout-frac %g of %zu documents leaves %s split empty\n", frac, n, k < 1 ? "the held-out" : "the training"); goto done; }
        size_t *idx = malloc(sizeof *idx * n);
        if (!idx) goto oom;
        for (size_t i = 0; i < n; i++) idx[i] = i;
        bs_rng r; bs_rng_seed(&r, (uint64_t)seed);
        for (size_t i = 0; i < k; i++) {
            size_t j = i + (size_t)(bs_rng_u64(&r) % (n - i));
            size_t tmp = idx[i]; idx[i] = idx[j]; idx[j] = tmp;
            docs.d[idx[i]].heldout = 1;
        }
        free(idx);
    }
    int split = frac > 0 || n_held;
    size_t n_in[2] = { 0 };
    for (size_t i = 0; i < docs.n; i++) n_in[docs.d[i].heldout]++;
    if (!n_in[0]) { fprintf(stderr, "blockspec tokenize: every document is held out; nothing left to train on\n"); goto done; }
    char held_path[4096];
    snprintf(held_path, sizeof held_path, "%s.heldout", out);
    if (!heldout_out) heldout_out = held_path;
    uint64_t hash;
    if (bs_tokenizer_file_hash(model, &hash, &err)) { fprintf(stderr, "blockspec tokenize: %s\n", err.msg); goto done; }
    int64_t vocab = (int64_t)bs_tokenizer_vocab_size(t);
    for (int s = 0; s <= split; s++)
        if (bs_corpus_writer_open(&w[s], s ? heldout_out : out, vocab, hash, n_chats > 0, &err)) { fprintf(stderr, "blockspec tokenize: %s\n", err.msg); goto done; }
    for (size_t i = 0; i < docs.n; i++) {
        const doc *d = &docs.d[i];
        tb.n = 0;
        if (d->chat ? encode_chat(t, chat_kind, d, &tb, &err) : encode_append(t, &tb, d->text, d->len, 1, &err)) { fprintf(stderr, "blockspec tokenize: %s\n", err.msg); goto done; }
        if (eos >= 0 && tb_append(&tb, &eos, 1, d->chat ? 0 : 1)) goto oom;
        if (bs_corpus_writer_add(w[d->heldout], tb.ids, tb.mask, (int64_t)tb.n, &err)) { fprintf(stderr, "blockspec tokenize: %s\n", err.msg); goto done; }
    }
    for (int s = 0; s <= split; s++) {
        int64_t nd = bs_corpus_writer_docs(w[s]), nt = bs_corpus_writer_tokens(w[s]);
        bs_corpus_writer *ws = w[s];
        w[s] = NULL;
        if (bs_corpus_writer_finish(ws, &err)) { fprintf(stderr, "blockspec tokenize: %s\n", err.msg); goto done; }
        printf("%s: %s, %lld documents, %lld tokens, vocabulary %lld, tokenizer %016llx\n", s ? "held-out" : "train",
               s ? heldout_out : out, (long long)nd, (long long)nt, (long long)vocab, (unsigned long long)hash);
    }
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "blockspec tokenize: out of memory\n");
done:
    for (int s = 0; s < 2; s++) bs_corpus_writer_abort(w[s]);
    if (texts) for (int i = 0; i < n_texts; i++) free(texts[i]);
    free(texts); free(files); free(chats); free(held); free(sep); free(docs.d); free(tb.ids); free(tb.mask);
    if (t) bs_tokenizer_free(t);
    return rc;
}
