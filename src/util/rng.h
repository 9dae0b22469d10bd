// Seeded, reproducible RNG (xoshiro256** seeded by splitmix64): same seed, same stream, on every machine.
#pragma once
#include <stdint.h>

typedef struct bs_rng { uint64_t s[4]; } bs_rng;

static inline uint64_t bs_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline void bs_rng_seed(bs_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = bs_splitmix64(&seed);
}
static inline uint64_t bs_rng_u64(bs_rng *r) {
    uint64_t *s = r->s, res = ((s[1] * 5) << 7 | (s[1] * 5) >> 57) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = (s[3] << 45) | (s[3] >> 19);
    return res;
}
// Uniform in [0, 1) with 53 random bits.
static inline double bs_rng_uniform(bs_rng *r) { return (bs_rng_u64(r) >> 11) * 0x1.0p-53; }
