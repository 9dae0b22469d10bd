// The built-in default model: models/blockspec-30m and its drafter (models/README.md).
#pragma once
#include <stddef.h>

#define BS_BUILTIN_TARGET "blockspec-30m"
#define BS_BUILTIN_DRAFTER "blockspec-30m-dspark"
// The most drafts a round verifies with the built-in drafter when --draft-max is not given: its whole block
// (models/README.md measures 1-4 per domain).
#define BS_BUILTIN_DRAFT_MAX 4

// Fills the built-in target's folder and its drafter's (drafter[0] = 0 when absent). Returns -1 when no
// built-in model is found (BS_MODELS, models/ beside the executable's folder, ./models).
int cli_builtin_model(char *target, char *drafter, size_t cap);
