// libFuzzer harness for the safetensors parser: `make fuzz` builds build-fuzz/fuzz_safetensors.
#include <stddef.h>
#include <stdint.h>
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    bs_checkpoint *ck; bs_err err;
    if (bs_checkpoint_open_memory(&ck, data, size, "fuzz", &err) == 0) {
        // Touch every tensor's bytes: offsets the parser accepted must lie inside the buffer.
        volatile uint8_t sink = 0;
        for (int i = 0; i < ck->n_tensors; i++)
            for (size_t b = 0; b < ck->tensors[i].nbytes; b += 97) sink ^= ((const uint8_t *)ck->tensors[i].data)[b];
        bs_checkpoint_close(ck);
    }
    return 0;
}
