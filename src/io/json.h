// Reading config files with cJSON, with errors that name the file and the field.
#pragma once
#include <cjson/cJSON.h>
#include "util/err.h"

// Parses a whole JSON file; the root must be an object.
cJSON *bs_json_load(const char *path, bs_err *err);
// Reads a whole file into a NUL-terminated buffer (NULL + message on failure).
char *bs_read_file(const char *path, size_t *len, bs_err *err);
// Typed field access. `required`: a missing field is an error; otherwise *out keeps its default.
// An integer field holding a non-integer or out-of-range value is always an error.
int bs_json_int(const cJSON *obj, const char *key, int required, long lo, long hi, int *out, const char *file, bs_err *err);
int bs_json_num(const cJSON *obj, const char *key, int required, double *out, const char *file, bs_err *err);
int bs_json_bool(const cJSON *obj, const char *key, int required, int *out, const char *file, bs_err *err);
// Reads an int or a list of ints (e.g. eos_token_id) into out[0..max); *n = count (0 if absent/null).
int bs_json_int_list(const cJSON *obj, const char *key, int *out, int max, int *n, const char *file, bs_err *err);
