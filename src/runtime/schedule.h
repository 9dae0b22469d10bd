// Which drafts a step verifies (issue 26; shared/docs/dflash-dspark.md section 6, docs/scheduling.md).
// Every decoding sequence of a step has drafted n_r tokens; the scheduler picks l_r <= n_r, and the step
// verifies [anchor, d_1..d_l_r]. Only a prefix of each block is ever cut, and whether position k is kept
// never depends on d_k itself (nor on anything drawn after it), which is what keeps every mode lossless.
// Pure arithmetic over plain arrays: the runtime (step.c) fills the inputs, tests hand-compute the outputs.
#pragma once

typedef enum {
    BS_SCHED_THRESHOLD = 0,  // the default: per request, the leading drafts with c_k >= its threshold
                             // (threshold 0 or no confidences: every draft)
    BS_SCHED_NONE,           // plain decoding: no drafter pass, l_r = 0
    BS_SCHED_FIXED,          // every draft: l_r = n_r
    BS_SCHED_ALG1,           // the paper's Algorithm 1 (section 6.3): greedy by prefix survival, early break
    BS_SCHED_ASYNC,          // top-K by prefix survival, K planned from the previous step's confidences
} bs_sched_mode;

// "none", "fixed", "threshold", "alg1", "async"; NULL for a value out of range.
const char *bs_sched_name(bs_sched_mode m);
// 0 and *m, or -1 for an unknown name.
int bs_sched_parse(const char *name, bs_sched_mode *m);
// 1 when the mode needs an SPS table (alg1, async).
static inline int bs_sched_needs_sps(bs_sched_mode m) { return m == BS_SCHED_ALG1 || m == BS_SCHED_ASYNC; }

// One decoding sequence of the step.
typedef struct bs_sched_in {
    int n;                   // drafts it has (capped by its draft_max and its context); 0: a plain sequence,
                             // or one with no room: it verifies its anchor alone
    const float *conf;       // calibrated c_1..c_n, c_k = P(d_k survives | d_1..d_k-1 survived); NULL: none
    float threshold;         // BS_SCHED_THRESHOLD: its cut (<= 0: none)
} bs_sched_in;

// The cost model: sps[i] = target forwards per second with i + 1 rows in the forward (i < n_sps).
// Past the table the step time grows linearly, at the slope of its last two entries (one entry: flat).
double bs_sps_at(const double *sps, int n_sps, int rows);

// Replaces the table's step times (1 / sps) by their lower convex hull. The expected tokens of Algorithm 1's
// path are concave in the rows (survivals come in decreasing order), so with a convex step time their ratio
// rises to one peak and falls: the early break then stops at the model's best point instead of at the first
// dip of a measured curve with steps in it (GEMM tiles: on the H200 8B shape the step time jumps 65% from 32
// to 40 rows, then is nearly flat to 64).
void bs_sched_convexify(double *sps, int n_sps);

typedef struct bs_sched_args {
    bs_sched_mode mode;
    const double *sps; int n_sps;   // alg1, async
    int extra_rows;          // rows of the same target forward that are no sequence's verify block (other
                             // sequences' prompt chunks): they cost time, they yield no drafted tokens
    int budget;              // async: K, the drafts this step may verify over all sequences (< 0: not known
                             // yet, Algorithm 1 decides this step)
    double t_fixed;          // alg1, async: seconds of a step that do not depend on the rows verified (the
                             // drafter pass, acceptance, bookkeeping; measured on earlier steps). The step
                             // takes t_fixed + 1 / SPS(rows); 0: the target forward alone, the paper's model
} bs_sched_args;

// A candidate (r, j): sequence r's drafts 1..j, with prefix survival a = prod_{i<=j} c_{r,i}.
typedef struct bs_sched_cand { double a; int r, j; } bs_sched_cand;

// Fills l[0..R) and returns sum l. cand: scratch for sum_r n_r candidates (may be NULL when no sequence
// has confidences, or for modes none / fixed / threshold). Sequences without confidences (a DFlash drafter)
// verify every draft under alg1 and async: there is nothing to rank them by; their rows count in the step's
// cost, and their tokens count as one each (their anchor's) in the objective.
int bs_schedule(const bs_sched_args *a, const bs_sched_in *in, int R, int *l, bs_sched_cand *cand);

// The async budget for the NEXT step from this step's candidates: the drafts at the best point of the whole
// Algorithm 1 path (no early break: this step's draws are the past by the time the budget is used).
int bs_sched_plan_budget(const bs_sched_args *a, const bs_sched_in *in, int R, bs_sched_cand *cand);
