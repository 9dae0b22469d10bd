// A TEST-ONLY drafter for trace-driven evaluation (blockspec bench --trace; docs/scheduling.md): it drafts
// no model at all. Its proposals follow a recorded trace (per round: the confidences a real drafter
// reported and how many of its drafts the target accepted) on ANY target: the first a drafts are the
// target's own greedy continuation (teacher-forced from a plain greedy run of the same prompt, done first:
// greedy output is deterministic and batch-invariant), the (a+1)-th and later are deliberately wrong, and
// the recorded confidences are reported. The target then does the real verify work of a real round and,
// under greedy verification, accepts exactly min(a, l) of the l drafts the scheduler keeps.
// Never a production path: it exists so schedulers can be judged on a large target without its drafter.
#pragma once
#include "spec/drafter.h"

typedef struct replay_round { int n, a; int has_conf; float conf[BS_MAX_DRAFT]; } replay_round;

// A trace: rounds[r][0..n_rounds[r]) for each recorded request r.
typedef struct replay_trace {
    int n_req;
    replay_round **rounds;
    int *n_rounds;
    int max_n;                   // the most drafts any round proposed
} replay_trace;

// Reads JSON lines {"request": R, "round": K, "n": N, "l": L, "a": A, "conf": [..N]} (generate --trace).
// Rounds that verified fewer than they drafted (l < n, a == l) only bound the acceptance from below: a
// trace for replay should be recorded with --schedule fixed. Errors name the file, line and field.
int replay_trace_load(replay_trace *t, const char *path, char *err, size_t len);
void replay_trace_free(replay_trace *t);

// The drafter over target vocabulary V with blocks of up to max_drafts. Before each bs_seq_init, say which
// request the next sequence is (replay_bind): its prompt length, its reference continuation ref[0..n_ref)
// (the greedy tokens after the prompt) and its trace request (rounds replayed in order, cyclically, from
// `start`).
bs_drafter *replay_drafter_new(const replay_trace *t, int V, int max_drafts);
void replay_bind(bs_drafter *d, int n_prompt, const int32_t *ref, int n_ref, int trace_req, int start);
// Rounds whose anchor was not the reference token there (the reference was not the target's greedy output:
// the acceptance then differs from the trace's). 0 in a sound run.
long replay_mismatches(const bs_drafter *d);
