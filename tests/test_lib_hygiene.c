// The library's hygiene, checked on its source: nothing under src/ ends the process (exit, abort), prints
// (stderr, stdout, printf, puts) or reads the environment (getenv) outside the places allowed below, each
// for its reason. Errors go to the caller (bs_err, the backend's fault: backend.h), tuning comes from
// util/tuning.c (the one documented environment hook) or the public options.
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "harness.h"

static const struct { const char *file, *word, *why; } ALLOWED[] = {
    { "src/util/tuning.c", "getenv", "the tuning module: the one documented environment hook (BS_*)" },
    { "src/train/plot.c", "getenv", "searches $PATH for gnuplot, not a setting" },
    { "src/backend/cuda/cuda_profile.cu", "stderr", "the tables BS_CUDA_PROFILE / BS_CUDA_MM_TRACE ask for, printed at exit" },
};
static const char *WORDS[] = { "exit", "_exit", "_Exit", "quick_exit", "abort", "getenv", "secure_getenv", "stderr", "stdout",
                               "printf", "puts", "perror" };

static int allowed(const char *file, const char *word) {
    for (size_t i = 0; i < sizeof ALLOWED / sizeof *ALLOWED; i++)
        if (!strcmp(ALLOWED[i].file, file) && !strcmp(ALLOWED[i].word, word)) return 1;
    return 0;
}

// Comments and the insides of string and character literals blanked (newlines kept), so that only code
// is searched: a message may say "exit" and a comment may name getenv.
static void code_only(char *s) {
    for (char *p = s; *p;) {
        if (p[0] == '/' && p[1] == '/') { while (*p && *p != '\n') *p++ = ' '; }
        else if (p[0] == '/' && p[1] == '*') {
            *p++ = ' '; *p++ = ' ';
            while (*p && !(p[0] == '*' && p[1] == '/')) { if (*p != '\n') *p = ' '; p++; }
            if (*p) { *p++ = ' '; *p++ = ' '; }
        } else if (*p == '"' || *p == '\'') {
            char q = *p++;
            while (*p && *p != q && *p != '\n') { if (*p == '\\' && p[1]) *p++ = ' '; *p++ = ' '; }
            if (*p == q) p++;
        } else p++;
    }
}

static int ident(char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

// Appends "file:line: word" for every use of a banned word in the file; returns how many.
static int scan_file(const char *path, char *report, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = s ? fread(s, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!s) return 0;
    s[got] = 0;
    code_only(s);
    int found = 0;
    for (size_t w = 0; w < sizeof WORDS / sizeof *WORDS; w++) {
        size_t L = strlen(WORDS[w]);
        for (char *p = s; (p = strstr(p, WORDS[w])) != NULL; p += L) {
            if ((p > s && ident(p[-1])) || ident(p[L])) continue;   // part of a longer name (bs_exit, fprintf's "printf")
            if (allowed(path, WORDS[w])) continue;
            if (p - s >= 7 && !strncmp(p - 7, "format(", 7)) continue;   // __attribute__((format(printf, ...)))
            int line = 1;
            for (char *q = s; q < p; q++) line += *q == '\n';
            size_t l = strlen(report);
            snprintf(report + l, cap - l, "  %s:%d: %s\n", path, line, WORDS[w]);
            found++;
        }
    }
    free(s);
    return found;
}

static int scan_dir(const char *dir, char *report, size_t cap, int *files) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        struct stat st;
        if (stat(path, &st)) continue;
        if (S_ISDIR(st.st_mode)) { found += scan_dir(path, report, cap, files); continue; }
        const char *ext = strrchr(de->d_name, '.');
        if (!ext || (strcmp(ext, ".c") && strcmp(ext, ".h") && strcmp(ext, ".cu") && strcmp(ext, ".cuh"))) continue;
        (*files)++;
        found += scan_file(path, report, cap);
    }
    closedir(d);
    return found;
}

TEST(lib_hygiene_no_exit_print_or_getenv_in_src) {
    struct stat st;
    if (stat("src/util/tuning.c", &st)) SKIP("not run from the repository root (no src/util/tuning.c)");
    static char report[16384];
    report[0] = 0;
    int files = 0, found = scan_dir("src", report, sizeof report, &files);
    CHECK(files > 100, "only %d source files found under src/", files);
    CHECK(found == 0, "%d uses in the library:\n%s", found, report);
}

// The scanner itself: it finds each banned word in code, and not in comments, strings or longer names.
TEST(lib_hygiene_scanner_finds_what_it_should) {
    const char *dir = bs_test_tmpdir("hygiene");
    CHECK(dir);
    char path[1024];
    snprintf(path, sizeof path, "%s/x.c", dir);
    FILE *f = fopen(path, "w");
    CHECK(f);
    fputs("// exit(1) in a comment\n/* abort() */\nstatic const char *m = \"getenv(\\\"X\\\") exit\";\n"
          "int bs_exit(void); int my_getenv_like;\nvoid f(void) { if (1) exit(1); }\nvoid g(void) { abort(); }\n"
          "const char *h(void) { return getenv(\"BS_X\"); }\nvoid k(void) { fprintf(stderr, \"x\"); }\n", f);
    fclose(f);
    static char report[4096];
    report[0] = 0;
    int found = scan_file(path, report, sizeof report);
    CHECK(found == 4 && strstr(report, ":5: exit") && strstr(report, ":6: abort") && strstr(report, ":7: getenv") && strstr(report, ":8: stderr"),
          "found %d:\n%s", found, report);
}
