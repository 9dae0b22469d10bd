// libFuzzer harness for the strict JSON reader every config goes through (bs_json_parse): repeated
// keys, trailing data, NUL in strings, deep nesting. Accepted input must hold no repeated key.
#include <string.h>
#include "fuzz_util.h"
#include "io/json.h"

static void no_repeats(const cJSON *v) {
    for (const cJSON *c = v->child; c; c = c->next) {
        if (cJSON_IsObject(v))
            for (const cJSON *d = c->next; d; d = d->next) if (!strcmp(c->string, d->string)) abort();
        no_repeats(c);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    bs_err err;
    cJSON *root = bs_json_parse((const char *)data, size, "fuzz.json", &err);
    if (root) { no_repeats(root); cJSON_Delete(root); }
    else if (!strstr(err.msg, "fuzz.json")) abort();   // every message names the file
    return 0;
}
