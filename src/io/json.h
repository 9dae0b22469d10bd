// Reading config files with cJSON, with errors that name the file and the field.
#pragma once
#include <cjson/cJSON.h>
#include "util/err.h"

// Parses a whole JSON file (strictly, see bs_json_parse); the root must be an object.
cJSON *bs_json_load(const char *path, bs_err *err);
// Writes root (indented, newline-terminated) to path atomically: a temporary path.tmp renamed over it, so a
// reader never sees a half-written file.
int bs_json_write_file(const cJSON *root, const char *path, bs_err *err);
// Reads a whole regular file into a NUL-terminated buffer (NULL + message on failure; FIFOs and devices
// are refused). The allocation is the file size + 1.
char *bs_read_file(const char *path, size_t *len, bs_err *err);
// Typed field access. `required`: a missing field is an error; otherwise *out keeps its default.
// An integer field holding a non-integer or out-of-range value is always an error.
int bs_json_int(const cJSON *obj, const char *key, int required, long lo, long hi, int *out, const char *file, bs_err *err);
int bs_json_num(const cJSON *obj, const char *key, int required, double *out, const char *file, bs_err *err);
int bs_json_bool(const cJSON *obj, const char *key, int required, int *out, const char *file, bs_err *err);
// Reads an int or a list of ints (e.g. eos_token_id) into out[0..max); *n = count (0 if absent/null).
int bs_json_int_list(const cJSON *obj, const char *key, int *out, int max, int *n, const char *file, bs_err *err);
// Parses JSON text strictly, as Python's json module reads it: one value and nothing but whitespace after
// it; a key repeated in an object keeps its last value; no NUL inside strings (C strings would be cut
// there). name goes into messages. The root may be any JSON value.
cJSON *bs_json_parse(const char *text, size_t len, const char *name, bs_err *err);
// 1 if v is a number holding an integer in [lo, hi] (then (int64_t)v->valuedouble is exact and defined).
int bs_json_is_int(const cJSON *v, double lo, double hi);
