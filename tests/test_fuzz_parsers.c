// Deterministic mutation fuzzing of the safetensors parser, run with the suite (and under ASan by
// `make asan`): random byte flips, truncations and header edits of a valid file must give either a
// clean error or a checkpoint whose every tensor lies inside the buffer. `make fuzz` runs libFuzzer.
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "util/rng.h"

TEST(fuzz_safetensors_mutations) {
    char path[1024];
    snprintf(path, sizeof path, "%s/dflash.expect.safetensors", bs_fixtures_dir());
    bs_err err;
    size_t len;
    char *orig = bs_read_file(path, &len, &err);
    CHECK(orig, "%s", err.msg);
    uint64_t hl; memcpy(&hl, orig, 8);
    bs_rng rng; bs_rng_seed(&rng, 12345);
    unsigned char *buf = malloc(len);
    int ok = 0, bad = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(buf, orig, len);
        size_t n = len;
        int kind = it % 4;
        if (kind == 0) {   // flip bytes inside the header, where structure lives
            for (int f = 0; f < 1 + (int)(bs_rng_u64(&rng) % 4); f++) buf[8 + bs_rng_u64(&rng) % hl] ^= (unsigned char)(1 + bs_rng_u64(&rng) % 255);
        } else if (kind == 1) {   // truncate anywhere
            n = bs_rng_u64(&rng) % len;
        } else if (kind == 2) {   // corrupt the length prefix
            uint64_t v = bs_rng_u64(&rng) % 3 == 0 ? bs_rng_u64(&rng) : hl + (bs_rng_u64(&rng) % 64) - 32;
            memcpy(buf, &v, 8);
        } else {   // replace a digit in the header by another digit (offsets, shapes)
            for (int f = 0; f < 3; f++) {
                size_t at = 8 + bs_rng_u64(&rng) % hl;
                if (buf[at] >= '0' && buf[at] <= '9') buf[at] = (unsigned char)('0' + bs_rng_u64(&rng) % 10);
            }
        }
        // Copy into an exact-size allocation so ASan sees any read past the end.
        unsigned char *exact = malloc(n ? n : 1);
        memcpy(exact, buf, n);
        bs_checkpoint *ck;
        if (bs_checkpoint_open_memory(&ck, exact, n, "mutant", &err) == 0) {
            for (int i = 0; i < ck->n_tensors; i++) {
                const unsigned char *d = ck->tensors[i].data;
                CHECK(d >= exact && d + ck->tensors[i].nbytes <= exact + n, "tensor '%s' lies outside the buffer", ck->tensors[i].name);
            }
            bs_checkpoint_close(ck);
            ok++;
        } else {
            CHECK(strlen(err.msg) > 0 && strstr(err.msg, "mutant"), "error without a message naming the file");
            bad++;
        }
        free(exact);
    }
    printf("  3000 mutants: %d parsed, %d rejected with a message\n", ok, bad);
    CHECK(bad > 1000 && ok > 10, "mutations should both fail and pass sometimes (%d ok, %d rejected)", ok, bad);
    free(buf); free(orig);
}

// A header with no tensors ({} or metadata only) is a valid, empty checkpoint (the empty tensor list
// once reached qsort as a NULL array: undefined behaviour that `make fuzz` caught).
TEST(safetensors_no_tensors) {
    const char *hdrs[] = { "{}", "{\"__metadata__\":{\"format\":\"pt\"}}" };
    for (int i = 0; i < 2; i++) {
        size_t hl = strlen(hdrs[i]), n = 8 + hl;
        unsigned char *buf = malloc(n);
        uint64_t l = hl;
        memcpy(buf, &l, 8);
        memcpy(buf + 8, hdrs[i], hl);
        bs_checkpoint *ck; bs_err err;
        CHECK(bs_checkpoint_open_memory(&ck, buf, n, "empty", &err) == 0, "%s: %s", hdrs[i], err.msg);
        CHECK(ck->n_tensors == 0);
        CHECK(!bs_checkpoint_find(ck, "x"));
        bs_checkpoint_close(ck);
        free(buf);
    }
}
