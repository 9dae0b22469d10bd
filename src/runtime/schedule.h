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
                             // (over the convex hull); a step of greedy sequences only takes the best point of
                             // the whole path over the measured table instead
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
    int whole;               // alg1 / async: verifies all n drafts whatever they are worth (also implied by conf
                             // NULL); with conf, its expected tokens are its survivals' sum (a plan for a drafter
                             // without a confidence head, whose survivals come from its acceptance)
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
    const double *sps; int n_sps;   // alg1, async: the verify table (rows in sequences of `block` rows), as
                                    // measured (made non-decreasing in time): what plans over a whole path read
    int extra_rows;          // rows of the same target forward that are no sequence's verify block (other
                             // sequences' prompt chunks): they cost time, they yield no drafted tokens
    int budget;              // async: K, the drafts this step may verify over all sequences (< 0: not known
                             // yet, Algorithm 1 decides this step)
    double t_fixed;          // alg1, async: seconds of a step that do not depend on the rows verified (the
                             // drafter pass, acceptance, bookkeeping; measured on earlier steps). The step
                             // takes t_fixed + the forward's time; 0: the target forward alone, the paper's model
    // Optional (NULL / 0: the verify table alone prices a forward). sps1[i]: forwards per second with i + 1
    // sequences of one row each (a plain decoding step). Where separate sequences cost more than their rows
    // (attention per sequence), the verify table, whose rows come `block` per sequence, misses that cost
    // for a step of R sequences verifying fewer rows: bs_sched_forward_time adds it back.
    const double *sps1; int n_sps1;
    // Optional: the lower convex hulls of sps and sps1 (bs_sched_convexify), for Algorithm 1's early break
    // (NULL: the tables themselves).
    const double *sps_hull, *sps1_hull;
    int all_greedy;          // alg1: every sequence of the step verifies greedily; then any prefix is lossless
                             // whatever decided it, and the step takes the whole path's best point
    int block;               // rows per sequence of the sps table (the profile's --block)
    int extra_seqs;          // sequences in the forward besides the step's R (those prefilling a chunk)
    double t_scale;          // the forward's table time counts t_scale times (0: once): a step takes
                             // t_fixed + t_scale x the tables' time (bs_step_fit)
} bs_sched_args;

// The step-time model fitted to whole steps: a step whose tables' time (its forward's, its drafter pass's)
// is x took y = t_fixed + t_scale x seconds. Two regimes in one line: on a GPU a step pays fixed host work
// beside its kernels (t_fixed), on a CPU shared with other jobs every part of it slows alike (t_scale > 1),
// which an additive rest alone would count as a fixed cost, making rows look cheap. Least squares over
// the steps seen, older ones weighing less (x 0.95 per step), t_scale drawn towards 1 where the steps
// hardly differ in x (then t_fixed is the mean residual, the additive model), t_fixed never below 0.
typedef struct bs_step_fit { double w, x, y, xx, xy; } bs_step_fit;
void bs_step_fit_add(bs_step_fit *f, double x, double y);
// The model's t_fixed and t_scale (0 and 1 before any step).
void bs_step_fit_get(const bs_step_fit *f, double *t_fixed, double *t_scale);

// Seconds of one target forward of `rows` rows over `seqs` sequences under a's cost model: the verify
// table's time for the rows, plus, with a one-row-sequence table, the part of the per-sequence cost the
// verify table does not hold: t1(S) - tK(S) (their gap at S rows, which is S - S/K sequences' worth) times
// the share (S - rows/K) / (S - S/K) of sequences beyond what the verify table's shape has. Exact at both
// ends: rows = S gives the plain table's time, rows = K S the verify table's. Never below t1(S): a forward
// of more rows over the same sequences does all the work of fewer.
double bs_sched_forward_time(const bs_sched_args *a, int rows, int seqs);

// The cost model a runtime keeps (bs_runtime_set_schedule_costs): the measured tables, each a dense array
// indexed by count - 1 (blockspec profile; docs/scheduling.md).
typedef struct bs_cost_tables {
    const double *sps; int n_sps;      // target verify forwards per second by rows, in sequences of `block` rows
    int block;                         // rows per sequence of sps (0: 5, the profile's default)
    const double *sps1; int n_sps1;    // target forwards per second with i + 1 sequences of one row; NULL: none
    const double *dps; int n_dps;      // drafter passes per second over i + 1 sequences' blocks; NULL: none
                                       // (the drafter's time then stays in the measured rest of a step)
} bs_cost_tables;

// A candidate (r, j): sequence r's drafts 1..j, with prefix survival a = prod_{i<=j} c_{r,i}.
typedef struct bs_sched_cand { double a; int r, j; } bs_sched_cand;

// Fills l[0..R) and returns sum l. cand: scratch for sum_r n_r candidates (may be NULL when no sequence
// has confidences, or for modes none / fixed / threshold). Sequences without confidences (a DFlash drafter)
// verify every draft under alg1 and async: there is nothing to rank them by; their rows count in the step's
// cost, and their tokens count as one each (their anchor's) in the objective.
int bs_schedule(const bs_sched_args *a, const bs_sched_in *in, int R, int *l, bs_sched_cand *cand);

// A plan along the whole Algorithm 1 path (no early break: nothing of the step it plans is drawn yet, or
// the step is over): the expected tokens per second at its best point, and *keep, the candidates it admits
// (the first *keep of the ranking). cand: scratch as for bs_schedule.
double bs_sched_plan(const bs_sched_args *a, const bs_sched_in *in, int R, bs_sched_cand *cand, int *keep);

// The async budget for the NEXT step from this step's candidates: the drafts at the best point of the whole
// Algorithm 1 path (no early break: this step's draws are the past by the time the budget is used).
int bs_sched_plan_budget(const bs_sched_args *a, const bs_sched_in *in, int R, bs_sched_cand *cand);

// Plain decoding must beat the drafting plan by this factor for a step to skip the drafter: the plan rests on
// predicted survivals (a few rounds of one request), and a request that stops drafting learns nothing new
// until a probe; near break-even (the 2-core CPU at one request) skipping on a noisy prediction cost ~7%.
#define BS_SKIP_MARGIN 1.1

// Whether a step should run the drafter at all (alg1, async), decided before anything of it is drawn:
// the best point of the path over *predicted* confidences (pred: each sequence's survivals from earlier
// rounds), with a->t_fixed holding the drafter pass and the rest of a drafting step, against plain
// decoding of the same R sequences: R tokens from a forward of R + extra_rows rows over R + extra_seqs
// sequences (times t_scale), t_plain_fixed beside it. 1: draft (the plan yields at least 1 / BS_SKIP_MARGIN of
// plain decoding's tokens per second), 0: plain.
int bs_sched_worth_drafting(const bs_sched_args *a, const bs_sched_in *pred, int R, double t_plain_fixed, bs_sched_cand *cand);
