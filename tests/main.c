#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include "harness.h"
#include "util/timer.h"

static bs_test *head;
int bs_test_skipped_flag;

void bs_test_register(bs_test *t) { t->next = head; head = t; }
void bs_test_skip(const char *why) { printf("  skipped: %s\n", why); bs_test_skipped_flag = 1; }
const char *bs_fixtures_dir(void) { const char *d = getenv("BS_FIXTURES"); return d ? d : "../shared/fixtures"; }
const char *bs_cli_path(void) { const char *d = getenv("BS_BIN"); return d ? d : "build/blockspec"; }

int bs_test_run(const char *cmd, int merge_stderr, char *buf, size_t cap) {
    char full[8192];
    snprintf(full, sizeof full, "%s %s", cmd, merge_stderr ? "2>&1" : "2>/dev/null");
    FILE *p = popen(full, "r");
    if (!p) return -2;
    size_t n = fread(buf, 1, cap - 1, p);
    buf[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char **tmpdirs;   // made by bs_test_tmpdir for the running test
static int n_tmpdirs;

const char *bs_test_tmpdir(const char *tag) {
    const char *base = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/bs_%s_XXXXXX", base && *base ? base : "/tmp", tag);
    char **t = realloc(tmpdirs, sizeof *t * (n_tmpdirs + 1));
    if (!t) return NULL;
    tmpdirs = t;
    if (!mkdtemp(path)) return NULL;
    if (!(tmpdirs[n_tmpdirs] = strdup(path))) { rmdir(path); return NULL; }
    return tmpdirs[n_tmpdirs++];
}

// FTW_PHYS: a symlink inside (tests link fixture weights) is removed itself, never followed.
static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *f) { (void)remove(path); return 0; }
static void rm_tmpdirs(void) {
    for (int i = 0; i < n_tmpdirs; i++) { nftw(tmpdirs[i], rm_entry, 16, FTW_DEPTH | FTW_PHYS); free(tmpdirs[i]); }
    n_tmpdirs = 0;
}

int main(int argc, char **argv) {
    // Registration order is reversed by the constructor list; run in file order for readable logs.
    bs_test *list[4096]; int n = 0;
    for (bs_test *t = head; t && n < 4096; t = t->next) list[n++] = t;
    int passed = 0, failed = 0, skipped = 0;
    for (int i = n - 1; i >= 0; i--) {
        bs_test *t = list[i];
        if (argc > 1 && !strstr(t->name, argv[1])) continue;
        int f = 0; bs_test_skipped_flag = 0;
        double t0 = bs_now();
        t->fn(&f);
        double dt = bs_now() - t0;
        rm_tmpdirs();
        if (f) { failed++; printf("FAIL %s (%.2fs)\n", t->name, dt); }
        else if (bs_test_skipped_flag) { skipped++; printf("SKIP %s\n", t->name); }
        else { passed++; printf("ok   %s (%.2fs)\n", t->name, dt); }
        fflush(stdout);
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    // A filter that matches no test ran nothing: a typo must not read as a pass.
    if (argc > 1 && passed + failed + skipped == 0) { fprintf(stderr, "no test name contains \"%s\"\n", argv[1]); return 2; }
    return failed ? 1 : 0;
}
