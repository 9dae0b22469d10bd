// libFuzzer harness for tokenised training corpora (.bsc, src/train/corpus.c): `make fuzz` builds
// build-fuzz/fuzz_corpus. The input is written as a file and opened the way `blockspec train-*` opens
// its --data (mmap, then the whole-file validation). An accepted corpus must keep every promise the
// training loader relies on: document offsets increasing from 0 to n_tokens, every id inside the
// vocabulary, mask values 0/1. The loader is then run over it (windows across document and epoch ends,
// seeks to saved positions, valid or not), so a validation gap shows up as an ASan read past the map.
#include <stdint.h>
#include <stdlib.h>
#include "fuzz_util.h"
#include "train/corpus.h"
#include "train/loader.h"

static void use_loader(const bs_corpus *c, const uint8_t *data, size_t size) {
    bs_err err;
    // Window length and seek position come from the input's last bytes, so both vary with mutations.
    int seq_len = 2 + (size ? data[size - 1] % 15 : 0);
    bs_loader l;
    if (bs_loader_init(&l, c, seq_len, 7, 1, &err)) return;   // (a corpus shorter than one window)
    bs_train_seq s;
    int64_t sum = 0;
    for (int w = 0; w < 6; w++) {
        bs_loader_next(&l, &s);
        if (s.n != seq_len) abort();
        for (int i = 0; i < s.n; i++) {
            if (s.ids[i] < 0 || s.ids[i] >= c->vocab_size) abort();
            if (s.loss_mask && s.loss_mask[i] > 1) abort();
            sum += s.ids[i];
        }
    }
    bs_loader_pos pos = { size > 1 ? data[size - 2] % 3 : 0, size > 2 ? (int64_t)data[size - 3] - 4 : 0,
                          size > 3 ? (int64_t)data[size - 4] - 4 : 0 };
    if (bs_loader_seek(&l, pos, &err) == 0) bs_loader_next(&l, &s);
    bs_loader_free(&l);
    if (sum < 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[1024];
    snprintf(path, sizeof path, "%s/c.bsc", fuzz_dir());
    fuzz_put("c.bsc", data, (long)size);
    bs_corpus *c;
    bs_err err;
    if (bs_corpus_open(&c, path, &err)) {
        if (!strstr(err.msg, path)) abort();   // every refusal names the file
        return 0;
    }
    if (c->n_tokens < 1 || c->n_docs < 1 || c->n_docs > c->n_tokens || c->doc_off[0] != 0 ||
        c->doc_off[c->n_docs] != (uint64_t)c->n_tokens)
        abort();
    for (int64_t d = 0; d < c->n_docs; d++)
        if (c->doc_off[d + 1] <= c->doc_off[d]) abort();
    for (int64_t i = 0; i < c->n_tokens; i++) {
        if (c->ids[i] < 0 || c->ids[i] >= c->vocab_size) abort();
        if (c->mask && c->mask[i] > 1) abort();
    }
    if (bs_corpus_check_tokenizer(c, c->tokenizer_hash, c->vocab_size, "tok", &err)) abort();
    use_loader(c, data, size);
    bs_corpus_close(c);
    return 0;
}
