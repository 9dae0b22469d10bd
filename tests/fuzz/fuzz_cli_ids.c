// libFuzzer harness for the CLI's number parsing: id lists (--prompt-ids, --block-ids, ...) and the
// strict integer and float options. Accepted lists hold only ids in [0, INT32_MAX].
#include "fuzz_util.h"
#include "cli/args.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = fuzz_cstr(data, size);
    int32_t *ids;
    int n = cli_parse_ids("--prompt-ids", s, &ids);
    if (n > 0) { for (int i = 0; i < n; i++) if (ids[i] < 0) abort(); free(ids); }
    else if (n == 0) abort();   // an empty list is an error, never a zero-length success
    long v; double d;
    if (cli_int("-n", s, -5, 1L << 40, &v) == 0 && (v < -5 || v > 1L << 40)) abort();
    if (cli_float("--temp", s, 0, 100, &d) == 0 && !(d >= 0 && d <= 100)) abort();
    free(s);
    return 0;
}
