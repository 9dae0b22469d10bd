// libFuzzer harness for tokenizer-train's input: the corpus text (any bytes) is trained into a 320-token
// byte-level BPE, whose tokenizer.json must then load and encode the same text back to ids.
#include "fuzz_util.h"
#include "io/tokenizer.h"
#include "train/bpe_train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *special[] = { "<|endoftext|>", "<|mask|>" };
    bs_bpe_train_opts o = { .vocab_size = 320, .special = special, .n_special = 2, .min_frequency = 2 };
    const char *text = (const char *)data;
    char out[600];
    snprintf(out, sizeof out, "%s/tokenizer.json", fuzz_dir());
    bs_err err;
    if (bs_bpe_train(&text, &size, 1, &o, out, &err)) return 0;
    bs_tokenizer *t;
    if (bs_tokenizer_load(&t, out, &err)) { fprintf(stderr, "trained tokenizer does not load: %s\n", err.msg); abort(); }
    int32_t *ids; size_t n;
    if (bs_tokenizer_encode(t, text, size, &ids, &n, &err) == 0) free(ids);
    bs_tokenizer_free(t);
    return 0;
}
