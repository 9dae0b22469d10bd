// The built-in default model (models/ in the repository, models/README.md): the target `generate` runs
// without -m, with its best drafter unless -d names another or `-d none` asks for plain decoding.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli/builtin_model.h"

static int is_dir(const char *p) { struct stat st; return !stat(p, &st) && S_ISDIR(st.st_mode); }

// BS_MODELS, else models/ beside the folder holding the executable (build/blockspec -> models/), else
// ./models: the folder that holds the built-in model's subfolders.
static int models_dir(char *out, size_t cap) {
    const char *env = getenv("BS_MODELS");
    if (env && *env) { snprintf(out, cap, "%s", env); return is_dir(out); }
    char exe[PATH_MAX - 16];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(out, cap, "%s/../models", exe);
            if (is_dir(out)) return 1;
        }
    }
    snprintf(out, cap, "models");
    return is_dir(out);
}

int cli_builtin_model(char *target, char *drafter, size_t cap) {
    char dir[PATH_MAX];
    if (!models_dir(dir, sizeof dir)) return -1;
    snprintf(target, cap, "%s/%s", dir, BS_BUILTIN_TARGET);
    snprintf(drafter, cap, "%s/%s", dir, BS_BUILTIN_DRAFTER);
    if (!is_dir(target)) return -1;
    if (!is_dir(drafter)) drafter[0] = 0;
    return 0;
}
