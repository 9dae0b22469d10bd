// libFuzzer harness for the draft-vocabulary parser (JSON lists and uint32 files): `make fuzz` builds
// build-fuzz/fuzz_draft_vocab. Accepted input must give a sorted, duplicate-free list inside the vocabulary.
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include "io/draft_vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    bs_draft_vocab dv; bs_err err;
    const int eos[2] = { 3, 70000 };
    if (bs_draft_vocab_parse(&dv, (const char *)data, size, "fuzz", 1000, eos, 2, &err) == 0) {
        for (int i = 0; i < dv.n; i++)
            if (dv.ids[i] < 0 || dv.ids[i] >= 1000 || (i && dv.ids[i] <= dv.ids[i - 1])) abort();
        bs_draft_vocab_free(&dv);
    }
    return 0;
}
