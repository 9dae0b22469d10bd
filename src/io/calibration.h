// calibration.json: the confidence head's temperatures, one per draft position, written beside a DSpark
// drafter by `blockspec calibrate` (Sequential Temperature Scaling, docs/calibration.md) and applied by the
// drafter at load: c_k = sigmoid(z_k / T_k + b_k). Only "version", "temperatures" and the optional "biases"
// (`calibrate --bias`; absent: all 0) are read; the rest of the file (target, data, sample counts, ECE before
// and after) is a record for people.
#pragma once
#include <cjson/cJSON.h>
#include "spec/drafter.h"
#include "util/err.h"

#define BS_CALIBRATION_FILE "calibration.json"
#define BS_CALIBRATION_VERSION 1
// A temperature must be a finite number in this range (a float keeps z / T finite and meaningful).
#define BS_CALIBRATION_T_MIN 1e-6
#define BS_CALIBRATION_T_MAX 1e6
#define BS_CALIBRATION_B_MAX 1e3         // |b_k| at most this

typedef struct bs_calibration {
    int n;                               // draft positions (= the drafter's drafts per round)
    float T[BS_MAX_DRAFT];
    float b[BS_MAX_DRAFT];               // 0 where the file has no "biases"
} bs_calibration;

// Parses a calibration object strictly: "version" must be 1, "temperatures" a list of exactly n_expected
// numbers in [T_MIN, T_MAX], "biases" (optional) a list of n_expected numbers in [-B_MAX, B_MAX]. Errors name
// the file and the field.
int bs_calibration_parse(bs_calibration *c, const cJSON *root, int n_expected, const char *file, bs_err *err);
// Loads dir/calibration.json when it exists: 1 = loaded, 0 = no such file (c untouched), -1 = error.
int bs_calibration_load_dir(bs_calibration *c, const char *dir, int n_expected, bs_err *err);
