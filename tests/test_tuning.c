// The tuning module (util/tuning.h): the defaults, every BS_* variable's parsing (the values the code
// that read them itself used to take), and the public options that replace the user-facing ones.
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "blockspec.h"
#include "backend/backend.h"
#include "util/threadpool.h"
#include "util/tuning.h"

// Sets name=value for the parse below and remembers it, so the test can unset what it set.
static const char *SET[64]; static int n_set;
static void set(const char *name, const char *value) { setenv(name, value, 1); SET[n_set++] = name; }
static void unset_all(void) { while (n_set) unsetenv(SET[--n_set]); }

TEST(tuning_defaults_and_env_parsing) {
    bs_tuning d = bs_tuning_defaults();
    CHECK(d.graphs == 1 && d.drafter_fp8 == 0 && d.threads == 0 && d.cpu_hugepages == 1 && d.cpu_mm1_rows == 8 && d.cpu_att_heads_per_task == 0);
    CHECK(d.cuda_att == 2 && d.cuda_pdl == 3 && d.cuda_swiglu_rows == 1 && d.cuda_mm_blocks == 2 && d.cuda_mm_pre == -1 && d.cuda_at4_ntq == 8);
    CHECK(d.cuda_fuse && d.cuda_qkv_fuse && d.cuda_evf && d.cuda_mm_fixup && d.cuda_fixup_spread && d.cuda_att_early && !d.cuda_mm_old);
    // An environment that sets nothing changes nothing.
    bs_tuning t = d;
    static const char *ALL[] = { "BS_GRAPHS", "BS_DRAFTER_FP8", "BS_DRAFTER_STEP_WALK", "BS_THREADS", "BS_CPU_KERNELS", "BS_CPU_HUGEPAGES",
                                 "BS_CPU_MM1_ROWS", "BS_CPU_ATT_HG", "BS_CUDA_MM", "BS_CUDA_SWIGLU_ROWS", "BS_CUDA_ATT", "BS_CUDA_AT4_NTQ",
                                 "BS_CUDA_ATT_PDL", "BS_CUDA_ATT_EARLY", "BS_CUDA_PDL", "BS_CUDA_PDL_AFTER1", "BS_CUDA_FUSE", "BS_CUDA_QKV_FUSE",
                                 "BS_CUDA_EVF", "BS_CUDA_MM_FIXUP", "BS_CUDA_FIXUP_SPREAD", "BS_CUDA_FIXUP_WARPS", "BS_CUDA_MM_BLOCKS",
                                 "BS_CUDA_MM_PRE", "BS_CUDA_MM_TRACE", "BS_CUDA_PROFILE", "BS_CUDA_ABLATE" };
    char *saved[sizeof ALL / sizeof *ALL];
    for (size_t i = 0; i < sizeof ALL / sizeof *ALL; i++) { const char *v = getenv(ALL[i]); saved[i] = v ? strdup(v) : NULL; unsetenv(ALL[i]); }
    bs_tuning_from_env(&t);
    int same = !memcmp(&t, &d, sizeof t);
    // Every variable at a non-default value.
    set("BS_GRAPHS", "0"); set("BS_DRAFTER_FP8", "1"); set("BS_DRAFTER_STEP_WALK", "1"); set("BS_THREADS", "3");
    set("BS_CPU_KERNELS", "avx2"); set("BS_CPU_HUGEPAGES", "off"); set("BS_CPU_MM1_ROWS", "4"); set("BS_CPU_ATT_HG", "1");
    set("BS_CUDA_MM", "old"); set("BS_CUDA_SWIGLU_ROWS", "8"); set("BS_CUDA_ATT", "v4"); set("BS_CUDA_AT4_NTQ", "4");
    set("BS_CUDA_ATT_PDL", "all"); set("BS_CUDA_ATT_EARLY", "0"); set("BS_CUDA_PDL", "gemm"); set("BS_CUDA_PDL_AFTER1", "1");
    set("BS_CUDA_FUSE", "0"); set("BS_CUDA_QKV_FUSE", "0"); set("BS_CUDA_EVF", "0"); set("BS_CUDA_MM_FIXUP", "0"); set("BS_CUDA_FIXUP_SPREAD", "0");
    set("BS_CUDA_FIXUP_WARPS", "4"); set("BS_CUDA_MM_BLOCKS", "3"); set("BS_CUDA_MM_PRE", "1"); set("BS_CUDA_MM_TRACE", "1");
    set("BS_CUDA_PROFILE", "1"); set("BS_CUDA_ABLATE", "att,fixup");
    bs_tuning e = d;
    bs_tuning_from_env(&e);
    // Values the parsers do not take fall back as the old readers did.
    set("BS_CUDA_ATT", "old"); set("BS_CUDA_PDL", "0"); set("BS_CUDA_ATT_PDL", "0"); set("BS_CUDA_SWIGLU_ROWS", "9"); set("BS_CUDA_FIXUP_WARPS", "17");
    set("BS_CUDA_MM_BLOCKS", "0"); set("BS_CPU_MM1_ROWS", "5"); set("BS_CUDA_MM", "chain"); set("BS_CUDA_MM_TRACE", "0"); set("BS_CPU_HUGEPAGES", "1");
    bs_tuning f = d;
    bs_tuning_from_env(&f);
    unset_all();
    for (size_t i = 0; i < sizeof ALL / sizeof *ALL; i++) if (saved[i]) { setenv(ALL[i], saved[i], 1); free(saved[i]); }
    CHECK(same, "no BS_* variable set, yet the parse changed the defaults");
    CHECK(e.graphs == 0 && e.drafter_fp8 == 1 && e.drafter_step_walk == 1 && e.threads == 3);
    CHECK(!strcmp(e.cpu_kernels, "avx2") && e.cpu_hugepages == 0 && e.cpu_mm1_rows == 4 && e.cpu_att_heads_per_task == 1);
    CHECK(e.cuda_mm_old == 1 && e.cuda_swiglu_rows == 8 && e.cuda_att == 3 && e.cuda_at4_ntq == 4 && e.cuda_att_pdl == 2 && e.cuda_att_early == 0);
    CHECK(e.cuda_pdl == 2 && e.cuda_pdl_after1 == 1 && !e.cuda_fuse && !e.cuda_qkv_fuse && !e.cuda_evf && !e.cuda_mm_fixup && !e.cuda_fixup_spread);
    CHECK(e.cuda_fixup_warps == 4 && e.cuda_mm_blocks == 3 && e.cuda_mm_pre == 1 && e.cuda_mm_trace == 1 && e.cuda_profile == 1);
    CHECK(!strcmp(e.cuda_ablate, "att,fixup"));
    CHECK(f.cuda_att == 0 && f.cuda_pdl == 0 && f.cuda_att_pdl == 0 && f.cuda_swiglu_rows == 1 && f.cuda_fixup_warps == 0 && f.cuda_mm_blocks == 2);
    CHECK(f.cpu_mm1_rows == 8 && f.cuda_mm_old == 0 && f.cuda_mm_trace == 0 && f.cpu_hugepages == 1);
}

// A kernel path the CPU backend cannot take is not silently dropped: the note says so, and an engine on
// the CPU passes it to blockspec_warnings().
TEST(tuning_cpu_kernels_note_reaches_warnings) {
    bs_tuning *t = bs_tuning_edit();
    char saved[sizeof t->cpu_kernels];
    memcpy(saved, t->cpu_kernels, sizeof saved);
    snprintf(t->cpu_kernels, sizeof t->cpu_kernels, "avx9000");
    char tdir[1024], err[512];
    snprintf(tdir, sizeof tdir, "%s/target", bs_fixtures_dir());
    blockspec *bs = NULL;
    int rc = blockspec_open(&bs, tdir, NULL, "cpu", err, sizeof err);
    const char *w = rc == 0 ? blockspec_warnings(bs) : NULL;
    int noted = w && strstr(w, "BS_CPU_KERNELS=avx9000");
    if (bs) blockspec_close(bs);
    memcpy(t->cpu_kernels, saved, sizeof saved);
    CHECK(rc == 0, "%s", err);
    CHECK(noted, "warnings: %s", w ? w : "(none)");
    CHECK(!*bs_cpu_kernels_note() || *saved, "with the request gone the note is: %s", bs_cpu_kernels_note());
}

// The public threads option: the pool is one per process, so a count other than the running pool's is
// reported, not silently ignored; asking for the count it runs gives no warning.
TEST(tuning_threads_option_reports_a_pool_it_cannot_resize) {
    char tdir[1024], err[512];
    snprintf(tdir, sizeof tdir, "%s/target", bs_fixtures_dir());
    int n = bs_pool_size();   // starts the pool if nothing did yet
    blockspec_open_options o = { .threads = n + 1, .no_graphs = 1 };
    blockspec *bs;
    CHECK(blockspec_open_ex(&bs, tdir, NULL, "cpu", &o, err, sizeof err) == 0, "%s", err);
    const char *w = blockspec_warnings(bs);
    CHECK(w && strstr(w, "thread pool already runs"), "warnings: %s", w ? w : "(none)");
    blockspec_close(bs);
    o.threads = n;
    CHECK(blockspec_open_ex(&bs, tdir, NULL, "cpu", &o, err, sizeof err) == 0, "%s", err);
    w = blockspec_warnings(bs);
    CHECK(!w || !strstr(w, "thread pool"), "the pool's own count was reported: %s", w);
    // The handle still decodes with graphs off (nothing to record on a CPU; the option is accepted).
    int32_t prompt[] = { 3, 14, 15 }, out[8];
    size_t n_out;
    blockspec_params p = blockspec_default_params();
    p.n_new = 8;
    CHECK(blockspec_generate(bs, prompt, 3, &p, out, 8, &n_out, NULL, NULL, NULL, err, sizeof err) == 0 && n_out == 8, "%s", err);
    blockspec_close(bs);
}
