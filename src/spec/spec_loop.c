// Statistics of a speculative request. The decoding itself is the runtime's (src/runtime/): one step
// function serves a lone request (bs_generate_spec, src/runtime/single.c) and a batch alike.
#include <stdlib.h>
#include <string.h>
#include "spec/spec_loop.h"

void bs_spec_stats_free(bs_spec_stats *st) { free(st->acceptance_lengths); memset(st, 0, sizeof *st); }

double bs_spec_tau(const bs_spec_stats *st) {
    return st->rounds ? (double)(st->accepted + st->rounds) / st->rounds : 0;
}
