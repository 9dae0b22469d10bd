// Tuning knobs (tuning.h): defaults, the environment hook, the process's copy.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "util/tuning.h"

bs_tuning bs_tuning_defaults(void) {
    bs_tuning t;
    memset(&t, 0, sizeof t);
    t.graphs = 1;
    t.cpu_hugepages = 1;
    t.cpu_mm1_rows = 8;
    t.cuda_swiglu_rows = 1;
    t.cuda_att = 2;
    t.cuda_at4_ntq = 8;
    t.cuda_att_pdl = 1;
    t.cuda_att_early = t.cuda_fuse = t.cuda_qkv_fuse = t.cuda_evf = t.cuda_mm_fixup = t.cuda_fixup_spread = 1;
    t.cuda_pdl = 3;
    t.cuda_mm_blocks = 2;
    t.cuda_mm_pre = -1;
    return t;
}

static int is(const char *e, const char *v) { return e && !strcmp(e, v); }
// A switch that is on unless the variable is "0".
static void on_unless_0(int *f, const char *name) { const char *e = getenv(name); if (e) *f = strcmp(e, "0") != 0; }
// A switch that is off unless the variable is set to something other than "0".
static void off_unless_set(int *f, const char *name) { const char *e = getenv(name); if (e) *f = strcmp(e, "0") != 0; }

void bs_tuning_from_env(bs_tuning *t) {
    const char *e;
    on_unless_0(&t->graphs, "BS_GRAPHS");
    off_unless_set(&t->drafter_fp8, "BS_DRAFTER_FP8");
    off_unless_set(&t->drafter_step_walk, "BS_DRAFTER_STEP_WALK");
    if ((e = getenv("BS_THREADS"))) t->threads = atoi(e) > 0 ? atoi(e) : 1;   // as the pool always read it: 0 or junk = 1
    if ((e = getenv("BS_CPU_KERNELS"))) snprintf(t->cpu_kernels, sizeof t->cpu_kernels, "%s", e);
    if ((e = getenv("BS_CPU_HUGEPAGES"))) t->cpu_hugepages = !(is(e, "0") || is(e, "off") || is(e, "no"));
    if ((e = getenv("BS_CPU_MM1_ROWS"))) t->cpu_mm1_rows = atoi(e) == 4 ? 4 : 8;
    if ((e = getenv("BS_CPU_ATT_HG"))) t->cpu_att_heads_per_task = atoi(e) == 1 ? 1 : 0;
    if ((e = getenv("BS_CUDA_MM"))) t->cuda_mm_old = is(e, "old");
    if ((e = getenv("BS_CUDA_SWIGLU_ROWS"))) t->cuda_swiglu_rows = atoi(e) >= 0 && atoi(e) <= 8 ? atoi(e) : 1;
    if ((e = getenv("BS_CUDA_ATT"))) t->cuda_att = is(e, "old") ? 0 : is(e, "v2") ? 1 : is(e, "v4") ? 3 : 2;
    if ((e = getenv("BS_CUDA_AT4_NTQ"))) t->cuda_at4_ntq = is(e, "4") ? 4 : 8;
    if ((e = getenv("BS_CUDA_ATT_PDL"))) t->cuda_att_pdl = is(e, "0") ? 0 : is(e, "all") ? 2 : 1;
    on_unless_0(&t->cuda_att_early, "BS_CUDA_ATT_EARLY");
    if ((e = getenv("BS_CUDA_PDL"))) t->cuda_pdl = is(e, "after") ? 3 : is(e, "gemm") ? 2 : is(e, "0") ? 0 : 1;
    if ((e = getenv("BS_CUDA_PDL_AFTER1"))) t->cuda_pdl_after1 = is(e, "1");
    on_unless_0(&t->cuda_fuse, "BS_CUDA_FUSE");
    on_unless_0(&t->cuda_qkv_fuse, "BS_CUDA_QKV_FUSE");
    on_unless_0(&t->cuda_evf, "BS_CUDA_EVF");
    on_unless_0(&t->cuda_mm_fixup, "BS_CUDA_MM_FIXUP");
    on_unless_0(&t->cuda_fixup_spread, "BS_CUDA_FIXUP_SPREAD");
    if ((e = getenv("BS_CUDA_FIXUP_WARPS"))) t->cuda_fixup_warps = atoi(e) >= 1 && atoi(e) <= 16 ? atoi(e) : 0;
    if ((e = getenv("BS_CUDA_MM_BLOCKS"))) t->cuda_mm_blocks = atoi(e) > 0 ? atoi(e) : 2;
    if ((e = getenv("BS_CUDA_MM_PRE"))) t->cuda_mm_pre = atoi(e) >= 0 ? atoi(e) : -1;   // the GEMM bounds it by its stages
    off_unless_set(&t->cuda_mm_trace, "BS_CUDA_MM_TRACE");
    if (getenv("BS_CUDA_PROFILE")) t->cuda_profile = 1;   // set at all, as before (even "0")
    if ((e = getenv("BS_CUDA_ABLATE"))) snprintf(t->cuda_ablate, sizeof t->cuda_ablate, "%s", e);
}

static bs_tuning g_tuning;
static int g_tuning_set;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void load(void) {
    bs_tuning t = bs_tuning_defaults();
    bs_tuning_from_env(&t);
    g_tuning = t;
    __atomic_store_n(&g_tuning_set, 1, __ATOMIC_RELEASE);
}

void bs_tuning_init(void) { pthread_once(&g_once, load); }

const bs_tuning *bs_tuning_get(void) {
    // The entry points (engine open, backend creation, pool start) have called bs_tuning_init; this covers
    // code that reaches a knob before any of them (a test calling a kernel directly) with the same values.
    if (!__atomic_load_n(&g_tuning_set, __ATOMIC_ACQUIRE)) bs_tuning_init();
    return &g_tuning;
}

bs_tuning *bs_tuning_edit(void) { bs_tuning_init(); return &g_tuning; }
