// libFuzzer harness for sharded checkpoints: model.safetensors.index.json --8<-- shard 1 --8<-- shard 2,
// written to a scratch folder as the index and model-0000{1,2}-of-00002.safetensors, then opened as a
// folder (weight_map, shard names, tensors the index names but a shard lacks, duplicates across shards).
// An input without a separator is a folder with only model.safetensors (the unsharded path).
#include "fuzz_util.h"
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *part[3]; size_t len[3];
    int n = fuzz_split(data, size, part, len, 3);
    fuzz_put("model.safetensors.index.json", part[0], n > 1 ? (long)len[0] : -1);
    fuzz_put("model.safetensors", part[0], n > 1 ? -1 : (long)len[0]);
    fuzz_put("model-00001-of-00002.safetensors", n > 1 ? part[1] : NULL, n > 1 ? (long)len[1] : -1);
    fuzz_put("model-00002-of-00002.safetensors", n > 2 ? part[2] : NULL, n > 2 ? (long)len[2] : -1);
    bs_checkpoint *ck; bs_err err;
    if (bs_checkpoint_open(&ck, fuzz_dir(), &err) == 0) {
        volatile uint8_t sink = 0;
        for (int i = 0; i < ck->n_tensors; i++)
            for (size_t b = 0; b < ck->tensors[i].nbytes; b += 61) sink ^= ((const uint8_t *)ck->tensors[i].data)[b];
        bs_checkpoint_close(ck);
    } else if (!strstr(err.msg, fuzz_dir())) abort();
    return 0;
}
