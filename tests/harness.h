// Minimal test harness: TEST(name) registers a function; tests/main.c runs them all (or those whose
// name contains argv[1]) and prints "N passed, N failed". A test fails on the first CHECK that fails.
#pragma once
#include <stdio.h>
#include <math.h>

typedef struct bs_test { const char *name; void (*fn)(int *failed); struct bs_test *next; } bs_test;
void bs_test_register(bs_test *t);
// Where reference vectors live: $BS_FIXTURES or ../shared/fixtures.
const char *bs_fixtures_dir(void);
// Path of the built CLI for tests that run it as users do: $BS_BIN or build/blockspec.
const char *bs_cli_path(void);
// Runs a shell command with its stdout (and stderr too when merge_stderr; else stderr is dropped) into buf
// (NUL-terminated, truncated at cap); returns its exit status, -1 if a signal ended it, -2 if it could not start.
int bs_test_run(const char *cmd, int merge_stderr, char *buf, size_t cap);
// A fresh empty folder $TMPDIR/bs_<tag>_XXXXXX (TMPDIR unset: /tmp) for the running test, NULL if it cannot
// be made. It is removed with everything in it when the test returns, passed or failed (a failing CHECK
// returns at once, so tests cannot clean up after themselves reliably); unique, so concurrent runs never clash.
const char *bs_test_tmpdir(const char *tag);
// Skips a test with a printed reason (counted as skipped, never as passed).
void bs_test_skip(const char *why);
extern int bs_test_skipped_flag;

#define TEST(name)                                                                   \
    static void test_##name(int *failed_);                                           \
    static bs_test reg_##name = { #name, test_##name, 0 };                           \
    __attribute__((constructor)) static void reg_fn_##name(void) { bs_test_register(&reg_##name); } \
    static void test_##name(int *failed_)

#define CHECK(cond, ...) do { if (!(cond)) {                                         \
    fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                \
    fprintf(stderr, "" __VA_ARGS__); fprintf(stderr, "\n"); *failed_ = 1; return; } } while (0)
#define CHECK_NEAR(a, b, tol, ...) do { double a_ = (a), b_ = (b);                   \
    if (!(fabs(a_ - b_) <= (tol))) { fprintf(stderr, "  FAIL %s:%d: |%s - %s| = |%g - %g| > %g ", \
    __FILE__, __LINE__, #a, #b, a_, b_, (double)(tol)); fprintf(stderr, "" __VA_ARGS__);        \
    fprintf(stderr, "\n"); *failed_ = 1; return; } } while (0)
#define SKIP(why) do { bs_test_skip(why); return; } while (0)
