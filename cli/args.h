// Small helpers shared by the subcommands' option parsing.
#pragma once
#include <stddef.h>
#include <stdint.h>

// Parses "1,2,3" into a malloc'd array; returns count or -1 (message printed, naming the flag).
int cli_parse_ids(const char *flag, const char *s, int32_t **out);
// Value of option argv[*i] ("--flag VALUE"); advances *i. Prints an error and returns NULL if missing.
const char *cli_value(int argc, char **argv, int *i);
// Strict number parsing: the whole string must be a number in range, else an error naming the flag.
int cli_int(const char *flag, const char *s, long lo, long hi, long *out);
int cli_float(const char *flag, const char *s, double lo, double hi, double *out);

#include "blockspec.h"
// --schedule NAME (NULL: the default, threshold) checked against --confidence-threshold: an unknown name, a
// threshold without the threshold schedule, or the threshold schedule without a threshold is an error
// (printed, prefixed by cmd). 0 and *out, or -1.
int cli_schedule_arg(const char *cmd, const char *name, double conf_thr, blockspec_schedule *out);
// What loading found suspicious (blockspec_warnings) on stderr, one "blockspec: warning: " line each.
void cli_print_warnings(const blockspec *bs);
// Calls fn for every non-blank line of a text file (JSON lines: --prompts, --trace), with its 1-based line
// number; stops at the first non-zero return. 0, or -1 with a message in err (a file that cannot be read is
// named by the library's reader).
typedef int (*cli_line_fn)(void *ctx, const char *line, size_t n, int lineno, char *err, size_t len);
int cli_each_line(const char *path, cli_line_fn fn, void *ctx, char *err, size_t len);
