// calibration.json reading (io/calibration.h). Writing is the calibrate command's (cli/cmd_calibrate.c).
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "io/calibration.h"
#include "io/json.h"

int bs_calibration_parse(bs_calibration *c, const cJSON *root, int n_expected, const char *file, bs_err *err) {
    if (!cJSON_IsObject(root)) return bs_fail(err, "%s: expected a JSON object at the top level", file);
    int version = 0;
    if (bs_json_int(root, "version", 1, 0, 1 << 20, &version, file, err)) return -1;
    if (version != BS_CALIBRATION_VERSION)
        return bs_fail(err, "%s: field \"version\" is %d; this blockspec reads calibration version %d", file, version, BS_CALIBRATION_VERSION);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "temperatures");
    if (!t || cJSON_IsNull(t)) return bs_fail(err, "%s: missing field \"temperatures\" (one temperature per draft position)", file);
    if (!cJSON_IsArray(t)) return bs_fail(err, "%s: field \"temperatures\" must be a list of numbers", file);
    int n = cJSON_GetArraySize(t);
    // The count must be the drafter's: a file fitted for another block size belongs to another drafter.
    if (n != n_expected)
        return bs_fail(err, "%s: field \"temperatures\" lists %d temperatures; this drafter drafts %d positions per round (one each)", file, n,
                       n_expected);
    if (n < 1 || n > BS_MAX_DRAFT) return bs_fail(err, "%s: field \"temperatures\" must list 1 to %d temperatures", file, BS_MAX_DRAFT);
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, t) {
        // The range test also rejects NaN; JSON cannot spell infinity, but cJSON reads 1e999 as one.
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= BS_CALIBRATION_T_MIN && v->valuedouble <= BS_CALIBRATION_T_MAX))
            return bs_fail(err, "%s: field \"temperatures\"[%d] must be a positive number in [%g, %g]", file, i, BS_CALIBRATION_T_MIN,
                           BS_CALIBRATION_T_MAX);
        c->T[i] = (float)v->valuedouble;
        c->b[i++] = 0;
    }
    const cJSON *bs = cJSON_GetObjectItemCaseSensitive(root, "biases");
    if (bs && !cJSON_IsNull(bs)) {
        if (!cJSON_IsArray(bs)) return bs_fail(err, "%s: field \"biases\" must be a list of numbers", file);
        if (cJSON_GetArraySize(bs) != n)
            return bs_fail(err, "%s: field \"biases\" lists %d biases; \"temperatures\" lists %d (one each per draft position)", file,
                           cJSON_GetArraySize(bs), n);
        i = 0;
        cJSON_ArrayForEach(v, bs) {
            if (!cJSON_IsNumber(v) || !(v->valuedouble >= -BS_CALIBRATION_B_MAX && v->valuedouble <= BS_CALIBRATION_B_MAX))
                return bs_fail(err, "%s: field \"biases\"[%d] must be a number in [%g, %g]", file, i, -BS_CALIBRATION_B_MAX, BS_CALIBRATION_B_MAX);
            c->b[i++] = (float)v->valuedouble;
        }
    }
    c->n = n;
    return 0;
}

int bs_calibration_load_dir(bs_calibration *c, const char *dir, int n_expected, bs_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, BS_CALIBRATION_FILE);
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT) return 0;
    cJSON *root = bs_json_load(path, err);   // a folder, FIFO or unreadable file is an error naming it
    if (!root) return -1;
    bs_calibration tmp;
    int rc = bs_calibration_parse(&tmp, root, n_expected, path, err);
    cJSON_Delete(root);
    if (rc) return -1;
    *c = tmp;
    return 1;
}

