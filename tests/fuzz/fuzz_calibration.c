// libFuzzer harness for calibration.json (io/calibration.h), parsed as the drafter loader reads it for a
// drafter of 1..8 draft positions (the first byte picks the count). Accepted input must give exactly that many
// temperatures, each finite and inside [T_MIN, T_MAX], and biases inside [-B_MAX, B_MAX]; every message names the file.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "io/calibration.h"
#include "io/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int n_expected = 1 + data[0] % 8;
    bs_err err;
    cJSON *root = bs_json_parse((const char *)data + 1, size - 1, "fuzz.json", &err);
    if (!root) return 0;
    bs_calibration c;
    if (bs_calibration_parse(&c, root, n_expected, "fuzz.json", &err) == 0) {
        if (c.n != n_expected) abort();
        for (int i = 0; i < c.n; i++)
            if (!isfinite(c.T[i]) || !(c.T[i] > 0) || c.T[i] < (float)BS_CALIBRATION_T_MIN || c.T[i] > (float)BS_CALIBRATION_T_MAX ||
                !isfinite(c.b[i]) || fabsf(c.b[i]) > (float)BS_CALIBRATION_B_MAX) abort();
    } else if (!strstr(err.msg, "fuzz.json")) abort();
    cJSON_Delete(root);
    return 0;
}
