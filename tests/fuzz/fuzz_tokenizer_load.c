// libFuzzer harness for tokenizer.json [--8<-- tokenizer_config.json]: the loader (model, merges, added
// tokens, normaliser, pre-tokeniser regexes, post-processor, decoder, config tokens and chat template),
// then a short encode and decode of every id, so what a file sets up is also used.
#include "fuzz_util.h"
#include "io/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *part[2]; size_t len[2];
    int n = fuzz_split(data, size, part, len, 2);
    char *cfg = n > 1 ? fuzz_cstr(part[1], len[1]) : NULL;
    bs_tokenizer *t; bs_err err;
    if (bs_tokenizer_load_json(&t, (const char *)part[0], len[0], cfg, &err) == 0) {
        static const char text[] = "Hello  world!\n\n\t<|endoftext|> caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd 123 \xff";
        int32_t *ids; size_t k; char *back; size_t bl;
        if (bs_tokenizer_encode(t, text, sizeof text - 1, &ids, &k, &err) == 0) {
            for (size_t i = 0; i < k; i++) if (ids[i] < 0 || (size_t)ids[i] >= bs_tokenizer_vocab_size(t)) abort();
            free(ids);
        }
        size_t v = bs_tokenizer_vocab_size(t);
        int32_t *all = malloc((v ? v : 1) * sizeof *all);
        for (size_t i = 0; i < v; i++) all[i] = (int32_t)i;
        if (bs_tokenizer_decode(t, all, v, 0, &back, &bl, &err) == 0) free(back);
        free(all);
        bs_tokenizer_free(t);
    } else if (!strstr(err.msg, "tokenizer")) abort();   // names tokenizer.json or tokenizer_config.json
    free(cfg);
    return 0;
}
