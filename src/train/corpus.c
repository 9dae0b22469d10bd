// Tokenised corpus files (corpus.h). Layout, little-endian, offsets from the start of the file:
//   0   char[8] "BSCORPUS"      8  u32 version (1)      12 u32 flags (bit 0: loss mask present)
//   16  u64 vocab_size          24 u64 n_tokens         32 u64 n_docs        40 u64 tokenizer_hash
//   48  u64 ids_offset (128)    56 u64 docs_offset      64 u64 mask_offset (0 if none)
//   72  u64 file_size           80..127 zero
//   ids int32[n_tokens] | zero pad to 8 bytes | doc offsets u64[n_docs + 1] | mask u8[n_tokens]
// The section offsets are redundant with the counts; they are stored so other tools need no layout
// rules, and checked against the canonical layout on open.
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "io/file.h"
#include "train/corpus.h"

typedef struct {
    char magic[8];
    uint32_t version, flags;
    uint64_t vocab_size, n_tokens, n_docs, tokenizer_hash, ids_offset, docs_offset, mask_offset, file_size;
    uint8_t reserved[48];
} corpus_header;
_Static_assert(sizeof(corpus_header) == BS_CORPUS_HEADER_BYTES, "corpus header is 128 bytes");

static uint64_t docs_offset_for(uint64_t n_tokens) { return (BS_CORPUS_HEADER_BYTES + 4 * n_tokens + 7) / 8 * 8; }

uint64_t bs_fnv1a64(const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ull; }
    return h;
}

int bs_tokenizer_file_hash(const char *path_or_dir, uint64_t *hash, bs_err *err) {
    char path[4096];
    struct stat st;
    if (stat(path_or_dir, &st) == 0 && S_ISDIR(st.st_mode)) snprintf(path, sizeof path, "%s/tokenizer.json", path_or_dir);
    else snprintf(path, sizeof path, "%s", path_or_dir);
    int fd = bs_open_regular(path, NULL, err);
    if (fd < 0) return -1;
    FILE *f = fdopen(fd, "rb");
    if (!f) { close(fd); return bs_fail(err, "%s: cannot open (%m)", path); }
    uint64_t h = 0xcbf29ce484222325ull;
    unsigned char buf[1 << 16];
    size_t r;
    while ((r = fread(buf, 1, sizeof buf, f)) > 0)
        for (size_t i = 0; i < r; i++) { h ^= buf[i]; h *= 0x100000001b3ull; }
    int bad = ferror(f);
    fclose(f);
    if (bad) return bs_fail(err, "%s: read error", path);
    *hash = h;
    return 0;
}

int bs_corpus_check_tokenizer(const bs_corpus *c, uint64_t hash, int64_t vocab_size, const char *what, bs_err *err) {
    if (c->tokenizer_hash != hash || c->vocab_size != vocab_size)
        return bs_fail(err, "%s was made with another tokenizer (tokenizer.json hash %016llx, vocabulary %lld) than %s "
                       "(hash %016llx, vocabulary %lld); rebuild it with blockspec tokenize --corpus -m %s",
                       c->path, (unsigned long long)c->tokenizer_hash, (long long)c->vocab_size, what,
                       (unsigned long long)hash, (long long)vocab_size, what);
    return 0;
}

void bs_corpus_close(bs_corpus *c) {
    if (!c) return;
    if (c->map) munmap(c->map, c->size);
    free(c->path);
    free(c);
}

static int validate(bs_corpus *c, bs_err *err) {
    const char *p = c->path;
    if (c->size < BS_CORPUS_HEADER_BYTES) return bs_fail(err, "%s: %zu bytes, too short for the %d-byte corpus header", p, c->size, BS_CORPUS_HEADER_BYTES);
    corpus_header h;
    memcpy(&h, c->map, sizeof h);
    if (memcmp(h.magic, BS_CORPUS_MAGIC, 8)) return bs_fail(err, "%s: not a blockspec corpus (bad magic; expected \"%s\")", p, BS_CORPUS_MAGIC);
    if (h.version != BS_CORPUS_VERSION) return bs_fail(err, "%s: corpus version %u, this build reads version %d", p, h.version, BS_CORPUS_VERSION);
    if (h.flags & ~BS_CORPUS_FLAG_MASK) return bs_fail(err, "%s: unknown flags 0x%x in the header", p, h.flags);
    if (h.vocab_size < 1 || h.vocab_size > INT32_MAX) return bs_fail(err, "%s: vocab_size %llu out of range [1, %d]", p, (unsigned long long)h.vocab_size, INT32_MAX);
    if (h.n_tokens < 1 || h.n_tokens > (1ull << 56)) return bs_fail(err, "%s: n_tokens %llu out of range", p, (unsigned long long)h.n_tokens);
    if (h.n_docs < 1 || h.n_docs > h.n_tokens) return bs_fail(err, "%s: n_docs %llu out of range [1, n_tokens = %llu]", p, (unsigned long long)h.n_docs, (unsigned long long)h.n_tokens);
    int has_mask = h.flags & BS_CORPUS_FLAG_MASK;
    uint64_t docs_off = docs_offset_for(h.n_tokens), mask_off = docs_off + 8 * (h.n_docs + 1);
    uint64_t want_size = mask_off + (has_mask ? h.n_tokens : 0);
    // The counts against the file's size first: a count the file cannot hold is named as such (and nothing
    // below reads past the mapping).
    if (c->size != want_size)
        return bs_fail(err, "%s: file is %zu bytes, but its header's counts (%llu tokens, %llu documents%s) need %llu (%s)", p, c->size,
                       (unsigned long long)h.n_tokens, (unsigned long long)h.n_docs, has_mask ? ", a loss mask" : "",
                       (unsigned long long)want_size, c->size < want_size ? "truncated, or counts beyond the file" : "trailing bytes");
    if (h.ids_offset != BS_CORPUS_HEADER_BYTES || h.docs_offset != docs_off || h.mask_offset != (has_mask ? mask_off : 0))
        return bs_fail(err, "%s: section offsets (ids %llu, docs %llu, mask %llu) are not the layout of %llu tokens and %llu documents "
                       "(ids %d, docs %llu, mask %llu)", p, (unsigned long long)h.ids_offset, (unsigned long long)h.docs_offset,
                       (unsigned long long)h.mask_offset, (unsigned long long)h.n_tokens, (unsigned long long)h.n_docs,
                       BS_CORPUS_HEADER_BYTES, (unsigned long long)docs_off, (unsigned long long)(has_mask ? mask_off : 0));
    if (h.file_size != want_size) return bs_fail(err, "%s: header file_size %llu, but its counts need %llu bytes", p, (unsigned long long)h.file_size, (unsigned long long)want_size);
    c->vocab_size = (int64_t)h.vocab_size; c->n_tokens = (int64_t)h.n_tokens; c->n_docs = (int64_t)h.n_docs;
    c->tokenizer_hash = h.tokenizer_hash;
    const unsigned char *base = c->map;
    c->ids = (const int32_t *)(base + BS_CORPUS_HEADER_BYTES);
    c->doc_off = (const uint64_t *)(base + docs_off);
    c->mask = has_mask ? base + mask_off : NULL;
    if (c->doc_off[0] != 0) return bs_fail(err, "%s: document 0 starts at token %llu, expected 0", p, (unsigned long long)c->doc_off[0]);
    for (int64_t d = 0; d < c->n_docs; d++)
        if (c->doc_off[d + 1] <= c->doc_off[d] || c->doc_off[d + 1] > h.n_tokens)
            return bs_fail(err, "%s: document boundaries not increasing within [0, %llu]: document %lld spans tokens %llu..%llu",
                           p, (unsigned long long)h.n_tokens, (long long)d, (unsigned long long)c->doc_off[d], (unsigned long long)c->doc_off[d + 1]);
    if (c->doc_off[c->n_docs] != h.n_tokens)
        return bs_fail(err, "%s: the last document ends at token %llu, the corpus has %llu", p, (unsigned long long)c->doc_off[c->n_docs], (unsigned long long)h.n_tokens);
    for (int64_t i = 0; i < c->n_tokens; i++)
        if (c->ids[i] < 0 || c->ids[i] >= c->vocab_size)
            return bs_fail(err, "%s: token %lld has id %d, outside the vocabulary [0, %lld)", p, (long long)i, c->ids[i], (long long)c->vocab_size);
    if (c->mask)
        for (int64_t i = 0; i < c->n_tokens; i++)
            if (c->mask[i] > 1) return bs_fail(err, "%s: loss mask of token %lld is %u, expected 0 or 1", p, (long long)i, c->mask[i]);
    return 0;
}

int bs_corpus_open(bs_corpus **out, const char *path, bs_err *err) {
    *out = NULL;
    bs_corpus *c = bs_calloc(1, sizeof *c, err);
    if (!c) return -1;
    if (!(c->path = strdup(path))) { free(c); return bs_fail(err, "out of memory"); }
    // bs_open_regular: a plain open(2) of a FIFO named as --data would wait forever for a writer.
    int fd = bs_open_regular(path, &c->size, err);
    if (fd < 0) { bs_corpus_close(c); return -1; }
    if (c->size >= BS_CORPUS_HEADER_BYTES) {
        c->map = mmap(NULL, c->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (c->map == MAP_FAILED) { c->map = NULL; close(fd); bs_fail(err, "%s: mmap failed (%m)", path); bs_corpus_close(c); return -1; }
    }
    close(fd);
    if (validate(c, err)) { bs_corpus_close(c); return -1; }
    *out = c;
    return 0;
}

// ---- writer ----

struct bs_corpus_writer {
    char *path, *tmp;
    FILE *f;
    int with_mask;
    corpus_header h;
    uint64_t *docs; int64_t n_docs, cap_docs;
    uint8_t *mask; int64_t cap_mask;
};

int64_t bs_corpus_writer_tokens(const bs_corpus_writer *w) { return (int64_t)w->h.n_tokens; }
int64_t bs_corpus_writer_docs(const bs_corpus_writer *w) { return w->n_docs; }

void bs_corpus_writer_abort(bs_corpus_writer *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    if (w->tmp) unlink(w->tmp);
    free(w->path); free(w->tmp); free(w->docs); free(w->mask); free(w);
}

int bs_corpus_writer_open(bs_corpus_writer **out, const char *path, int64_t vocab_size, uint64_t tokenizer_hash,
                          int with_mask, bs_err *err) {
    *out = NULL;
    if (vocab_size < 1 || vocab_size > INT32_MAX) return bs_fail(err, "%s: vocabulary size %lld out of range", path, (long long)vocab_size);
    bs_corpus_writer *w = bs_calloc(1, sizeof *w, err);
    if (!w) return -1;
    w->path = strdup(path);
    w->tmp = malloc(strlen(path) + 32);
    w->cap_docs = 1024;
    w->docs = malloc(sizeof *w->docs * w->cap_docs);
    if (!w->path || !w->tmp || !w->docs) { bs_corpus_writer_abort(w); return bs_fail(err, "out of memory"); }
    sprintf(w->tmp, "%s.tmp.%ld", path, (long)getpid());
    if (!(w->f = fopen(w->tmp, "wb"))) { bs_fail(err, "%s: cannot create (%m)", w->tmp); free(w->tmp); w->tmp = NULL; bs_corpus_writer_abort(w); return -1; }
    memcpy(w->h.magic, BS_CORPUS_MAGIC, 8);
    w->h.version = BS_CORPUS_VERSION;
    w->h.flags = with_mask ? BS_CORPUS_FLAG_MASK : 0;
    w->h.vocab_size = (uint64_t)vocab_size;
    w->h.tokenizer_hash = tokenizer_hash;
    w->h.ids_offset = BS_CORPUS_HEADER_BYTES;
    w->with_mask = with_mask;
    w->docs[0] = 0;
    if (fwrite(&w->h, sizeof w->h, 1, w->f) != 1) { bs_fail(err, "%s: write failed (%m)", w->tmp); bs_corpus_writer_abort(w); return -1; }
    *out = w;
    return 0;
}

int bs_corpus_writer_add(bs_corpus_writer *w, const int32_t *ids, const uint8_t *mask, int64_t n, bs_err *err) {
    if (n <= 0) return 0;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= (int64_t)w->h.vocab_size)
            return bs_fail(err, "%s: document %lld has id %d outside the vocabulary [0, %llu)", w->path, (long long)w->n_docs, ids[i], (unsigned long long)w->h.vocab_size);
    if (w->n_docs + 2 > w->cap_docs) {
        uint64_t *d = realloc(w->docs, sizeof *d * (w->cap_docs *= 2));
        if (!d) return bs_fail(err, "out of memory");
        w->docs = d;
    }
    if (w->with_mask) {
        int64_t need = (int64_t)w->h.n_tokens + n;
        if (need > w->cap_mask) {
            int64_t cap = w->cap_mask ? w->cap_mask : 1 << 16;
            while (cap < need) cap *= 2;
            uint8_t *m = realloc(w->mask, cap);
            if (!m) return bs_fail(err, "out of memory");
            w->mask = m; w->cap_mask = cap;
        }
        if (mask) memcpy(w->mask + w->h.n_tokens, mask, n);
        else memset(w->mask + w->h.n_tokens, 1, n);
    }
    if (fwrite(ids, sizeof *ids, n, w->f) != (size_t)n) return bs_fail(err, "%s: write failed (%m)", w->tmp);
    w->h.n_tokens += n;
    w->docs[++w->n_docs] = w->h.n_tokens;
    return 0;
}

int bs_corpus_writer_finish(bs_corpus_writer *w, bs_err *err) {
    if (!w->n_docs) { bs_fail(err, "%s: no documents to write (every input was empty)", w->path); bs_corpus_writer_abort(w); return -1; }
    corpus_header *h = &w->h;
    h->n_docs = w->n_docs;
    h->docs_offset = docs_offset_for(h->n_tokens);
    h->mask_offset = w->with_mask ? h->docs_offset + 8 * (h->n_docs + 1) : 0;
    h->file_size = h->docs_offset + 8 * (h->n_docs + 1) + (w->with_mask ? h->n_tokens : 0);
    static const char zeros[8];
    size_t pad = h->docs_offset - (BS_CORPUS_HEADER_BYTES + 4 * h->n_tokens);
    int ok = fwrite(zeros, 1, pad, w->f) == pad && fwrite(w->docs, 8, h->n_docs + 1, w->f) == h->n_docs + 1 &&
             (!w->with_mask || fwrite(w->mask, 1, h->n_tokens, w->f) == h->n_tokens) &&
             fseek(w->f, 0, SEEK_SET) == 0 && fwrite(h, sizeof *h, 1, w->f) == 1 && fflush(w->f) == 0 && fsync(fileno(w->f)) == 0;
    ok = (fclose(w->f) == 0) && ok;
    w->f = NULL;
    if (!ok || rename(w->tmp, w->path) != 0) { bs_fail(err, "%s: write failed (%m)", w->path); bs_corpus_writer_abort(w); return -1; }
    free(w->tmp); w->tmp = NULL;
    bs_corpus_writer_abort(w);
    return 0;
}
