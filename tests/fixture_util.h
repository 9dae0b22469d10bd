// Reading reference vectors (safetensors files of F32/I32 tensors) in tests.
#pragma once
#include <stdint.h>
#include "io/safetensors.h"

// The tensor's data if it exists with this dtype ("F32"/"I32") and element count (count < 0: any); else NULL.
const void *fx_tensor(const bs_checkpoint *ck, const char *name, const char *dtype, long count, long *n_out);
// max |a - b| over n floats.
double fx_max_abs_diff(const float *a, const float *b, long n);
// Compares every tensor of `expected` with the same-named tensor of `got`: same dtype and shape,
// I32 ids exactly, F32 within tol. Returns the number compared, or -1 with the first difference in msg.
int fx_compare_all(const bs_checkpoint *expected, const bs_checkpoint *got, double tol, char *msg, size_t cap);
// Runs a `blockspec dump ... --out out` command line, compares the file it wrote with `expected`
// (fx_compare_all) and removes it. Returns the number of tensors compared, or -1 with the reason in msg.
int fx_dump_and_compare(const char *cmd, const char *out, const bs_checkpoint *expected, double tol, char *msg, size_t cap);
// "1,2,3" for a --prompt-ids style flag (into buf).
void fx_join_ids(const int32_t *ids, long n, char *buf, size_t cap);
// The target fixture (shared/fixtures/target*) through the library on a device ("cpu", "cuda", ...):
// prefill logits and hidden states, greedy steps, a verify block; defined in test_target_fixture.c.
void fx_check_target_fixture(int *failed_, const char *device);
// The same check on any target folder and its NAME.expect.safetensors (same tensor names; e.g. tests/ref/llama).
void fx_check_target_fixture_at(int *failed_, const char *device, const char *model_dir, const char *expect_file);
// The same for checkpoint REF/NAME and REF/NAME.expect.safetensors of a reference folder (tests/ref/llama,
// tests/ref/gemma4); SKIPs with `missing` when the vectors are not there.
// A DFlash / DSpark drafter (ddir) against its reference vectors (file: context_features, block_hidden, logits,
// draft_tokens, ...), on the target tdir whose prompt_ids are in tfile (tests/test_drafter_fixture.c).
void fx_check_drafter_fixture_at(int *failed_, const char *dev, const char *tdir, const char *tfile, const char *ddir, const char *file);
void fx_check_ref_fixture(int *failed_, const char *device, const char *ref, const char *name, const char *missing);
