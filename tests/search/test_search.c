/* test_search.c — search/: the enumeration's counts against a count made by hand, the memory
 * bound against the compiled peak on a sweep (it never exceeds it, so tier (a) never discards a
 * candidate that fits), the program text compiling, and the space's errors. */
#include <string.h>

#include "search/search.h"
#include "tests/testutil.h"

static search_problem pb;
static base_arena arena;

static int load(const char *model, const char *cluster, int64_t batch)
{
    base_arena_free(&arena);
    base_arena_init(&arena);
    base_error e;
    base_error_clear(&e);
    char m[4096];
    snprintf(m, sizeof m, "%s", test_src_path(model));
    int rc = search_problem_load(&pb, base_arena_strdup(&arena, m), base_arena_strdup(&arena, test_src_path(cluster)),
                                 0, batch, &arena, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    return rc;
}

static void set(search_space *s, search_key k, const char *list)
{
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(search_space_set(s, k, list, "--test", &e), 0);
}

/* gpt_tiny (2 layers, 4 heads) on 4 GPUs, global batch 8, space tp 1,2 x pp 1,2 x 1f1b,zbv x
 * zero 0,1 x recompute none,full x mbs 1,2, no SP. By hand:
 *   tp1 pp1: dp 4; mbs 1 -> m 2, mbs 2 -> m 1; x 2 zero x 2 recompute           = 8
 *   tp1 pp2: dp 2; 1f1b: mbs 1 -> m 4, mbs 2 -> m 2, x 2 x 2                    = 8
 *            zbv: 4 stages for 2 layers                                  1 indivisible
 *   tp2 pp1: dp 2; mbs 1 -> m 4, mbs 2 -> m 2, x 2 x 2                          = 8
 *   tp2 pp2: dp 1 (ZeRO 0 only); 1f1b: mbs 1 -> m 8, mbs 2 -> m 4, x 1 x 2      = 4
 *            zbv: indivisible                                            1 indivisible
 * 28 valid, 2 indivisible, 30 looked at; everything fits an A100. */
static void test_count_by_hand(void)
{
    CU_ASSERT_EQUAL_FATAL(load("configs/models/gpt_tiny.yaml", "configs/clusters/a100_4.yaml", 8), 0);
    search_space s;
    memset(&s, 0, sizeof s);
    set(&s, SEARCH_KEY_TP, "1,2");
    set(&s, SEARCH_KEY_PP, "1,2");
    set(&s, SEARCH_KEY_SCHEDULES, "1f1b,zbv");
    set(&s, SEARCH_KEY_ZERO, "0,1");
    set(&s, SEARCH_KEY_RECOMPUTE, "none,full");
    set(&s, SEARCH_KEY_MBS, "1,2");
    set(&s, SEARCH_KEY_SP, "false");
    search_enum en;
    search_enumerate(&s, &pb, &en);
    CU_ASSERT_EQUAL(en.n, 28);
    CU_ASSERT_EQUAL(en.count[SEARCH_OK], 28);
    CU_ASSERT_EQUAL(en.count[SEARCH_INDIVISIBLE], 2);
    CU_ASSERT_EQUAL(en.count[SEARCH_PRECONDITION], 0);
    CU_ASSERT_EQUAL(en.considered, 30);
    int dp1 = 0;
    for (int i = 0; i < en.n; i++) {
        CU_ASSERT_EQUAL(en.c[i].mbs * en.c[i].m * en.c[i].dp, 8);
        if (en.c[i].dp == 1) {
            dp1++;
            CU_ASSERT_EQUAL(en.c[i].zero, 0);
        }
    }
    CU_ASSERT_EQUAL(dp1, 4);
    search_enum_free(&en);
}

/* DualPipe needs m >= 2p and m even, and its mirrored pipeline copies no tensor parallelism
 * and no tied embeddings (sched_schedule_supports): all are preconditions, counted before
 * anything compiles. */
static void test_preconditions(void)
{
    CU_ASSERT_EQUAL_FATAL(load("configs/models/llama_7b.yaml", "configs/clusters/a100_4.yaml", 8), 0);
    search_space s;
    memset(&s, 0, sizeof s);
    set(&s, SEARCH_KEY_TP, "1");
    set(&s, SEARCH_KEY_PP, "2");
    set(&s, SEARCH_KEY_SCHEDULES, "dualpipe");
    set(&s, SEARCH_KEY_ZERO, "0");
    set(&s, SEARCH_KEY_RECOMPUTE, "none");
    set(&s, SEARCH_KEY_MBS, "1,2,4");
    search_enum en;
    search_enumerate(&s, &pb, &en);
    /* DP2: mbs 1 -> m 4 (valid), mbs 2 -> m 2 and mbs 4 -> m 1 (DualPipe needs m >= 2p = 4) */
    CU_ASSERT_EQUAL(en.n + en.count[SEARCH_BOUND], 1);
    CU_ASSERT_EQUAL(en.count[SEARCH_PRECONDITION], 2);
    TEST_ASSERT_CONTAINS(en.example[SEARCH_PRECONDITION], "m >= 2p");
    search_enum_free(&en);
    /* DualPipe's mirror copies no tensor parallelism: refused before compiling, saying so */
    set(&s, SEARCH_KEY_TP, "2");
    set(&s, SEARCH_KEY_SP, "true");
    search_enumerate(&s, &pb, &en);
    CU_ASSERT_EQUAL(en.n + en.count[SEARCH_BOUND], 0);
    CU_ASSERT(en.count[SEARCH_PRECONDITION] >= 1);
    TEST_ASSERT_CONTAINS(en.example[SEARCH_PRECONDITION], "not tensor parallelism");
    search_enum_free(&en);
    /* nor tied embeddings (gpt_tiny ties them) */
    CU_ASSERT_EQUAL_FATAL(load("configs/models/gpt_tiny.yaml", "configs/clusters/a100_4.yaml", 8), 0);
    set(&s, SEARCH_KEY_TP, "1");
    search_enumerate(&s, &pb, &en);
    CU_ASSERT_EQUAL(en.n + en.count[SEARCH_BOUND], 0);
    TEST_ASSERT_CONTAINS(en.example[SEARCH_PRECONDITION], "tied embeddings");
    search_enum_free(&en);
}

/* The bound is a lower bound of the compiled static peak for every candidate of a sweep over
 * TP, SP, PP, schedules, ZeRO, recompute and micro-batch sizes; and on GPUs of 2 MiB, every
 * candidate tier (a) discards is over memory once compiled. The step-time bound is below the
 * check's makespan on every candidate, and nonzero on most. */
static void test_bound_below_peak(void)
{
    CU_ASSERT_EQUAL_FATAL(load("configs/models/gpt_tiny.yaml", "tests/fixtures/search/tiny4.yaml", 8), 0);
    double usable = search_usable_bytes(&pb);
    CU_ASSERT_EQUAL(usable, 2.0 * 1024 * 1024);
    search_space s;
    memset(&s, 0, sizeof s);
    set(&s, SEARCH_KEY_MBS, "1,2,4,8");
    /* every candidate: enumerate as if memory were plenty */
    double mem = pb.cluster.gpu.mem_bytes;
    pb.cluster.gpu.mem_bytes = 1e15;
    search_enum all;
    search_enumerate(&s, &pb, &all);
    pb.cluster.gpu.mem_bytes = mem;
    search_enum en;
    search_enumerate(&s, &pb, &en);
    CU_ASSERT(all.n > 100);
    CU_ASSERT(en.count[SEARCH_BOUND] > 0);
    CU_ASSERT_EQUAL(all.n, en.n + en.count[SEARCH_BOUND]);
    int discarded = 0, compiled = 0, above = 0, time_above = 0, time_bounded = 0;
    for (int i = 0; i < all.n; i++) {
        search_eval ev;
        search_compile_eval(&pb, &all.c[i], &ev);
        if (ev.reason != SEARCH_OK && ev.reason != SEARCH_OOM) continue; /* the compiler refused it */
        compiled++;
        double lb = search_time_bound(&pb, &all.c[i]);
        if (!(lb <= ev.estimate_seconds * (1 + 1e-12))) {
            char cs[200];
            time_above++;
            fprintf(stderr, "\n  time bound %g above estimate %g for %s", lb, ev.estimate_seconds,
                    search_candidate_str(&all.c[i], cs, sizeof cs));
        }
        if (lb > 0) time_bounded++;
        if (all.c[i].bound_bytes > ev.peak_bytes) {
            char cs[200];
            above++;
            fprintf(stderr, "\n  bound %.0f above peak %.0f for %s", all.c[i].bound_bytes, ev.peak_bytes,
                    search_candidate_str(&all.c[i], cs, sizeof cs));
        }
        if (all.c[i].bound_bytes > usable) {
            discarded++;
            CU_ASSERT_EQUAL(ev.reason, SEARCH_OOM);
        }
    }
    CU_ASSERT_EQUAL(above, 0);
    CU_ASSERT_EQUAL(time_above, 0);
    CU_ASSERT(time_bounded > 100);
    CU_ASSERT(compiled > 100);
    CU_ASSERT(discarded > 0);
    search_enum_free(&all);
    search_enum_free(&en);
}

/* Everything tier (a) keeps compiles: for an MoE model, every TP, PP, EP, ZeRO, recompute,
 * micro-batch size and schedule the space holds either compiles and passes the static check
 * or is counted a precondition before compiling (DualPipe's mirror with ZeRO-2/3). The
 * compiler faults the search once found live here: a stage of dense layers given an EP shard,
 * ZB-H1 with ZeRO-2 buckets waiting on deferred weight gradients, ZeRO-3 gathers of a layer
 * recomputed as one. */
static void test_moe_space_compiles(void)
{
    CU_ASSERT_EQUAL_FATAL(load("configs/models/moe_tiny.yaml", "configs/clusters/a100_4.yaml", 8), 0);
    search_space s;
    memset(&s, 0, sizeof s);
    set(&s, SEARCH_KEY_MBS, "1,2");
    search_enum en;
    search_enumerate(&s, &pb, &en);
    CU_ASSERT(en.n > 200);
    CU_ASSERT(en.count[SEARCH_PRECONDITION] > 0);
    int failed = 0;
    for (int i = 0; i < en.n; i++) {
        search_eval ev;
        search_compile_eval(&pb, &en.c[i], &ev);
        if (ev.reason == SEARCH_OK) {
            CU_ASSERT(search_time_bound(&pb, &en.c[i]) <= ev.estimate_seconds * (1 + 1e-12));
            continue;
        }
        char cs[200];
        if (failed++ < 5)
            fprintf(stderr, "\n  %s: %s: %s", search_candidate_str(&en.c[i], cs, sizeof cs), search_reason_name(ev.reason),
                    ev.msg);
    }
    CU_ASSERT_EQUAL(failed, 0);
    search_enum_free(&en);
}

/* Pruning is exact: on gpt_1.7b on 4 GPUs (ZeRO 0-1, mbs 1-2), most candidates are never
 * compiled, and the K simulated, their step times and their order are those of compiling every
 * candidate; every candidate the exhaustive run finds fitting is either compiled or pruned. */
static void test_pruning_is_exact(void)
{
    CU_ASSERT_EQUAL_FATAL(load("configs/models/gpt_1.7b.yaml", "configs/clusters/a100_4.yaml", 8), 0);
    search_space s;
    memset(&s, 0, sizeof s);
    set(&s, SEARCH_KEY_ZERO, "0,1");
    set(&s, SEARCH_KEY_MBS, "1,2");
    search_enum en;
    search_enumerate(&s, &pb, &en);
    search_result all, pruned;
    memset(&all, 0, sizeof all);
    memset(&pruned, 0, sizeof pruned);
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(search_run(&pb, &en, 4, 1, false, &all, &e), 0);
    CU_ASSERT_EQUAL_FATAL(search_run(&pb, &en, 4, 1, true, &pruned, &e), 0);
    CU_ASSERT_EQUAL(all.count[SEARCH_PRUNED], 0);
    CU_ASSERT(pruned.count[SEARCH_PRUNED] > en.n / 2);
    CU_ASSERT_EQUAL(all.nsimulated, 4);
    CU_ASSERT_EQUAL(pruned.nsimulated, 4);
    for (int k = 0; k < 4 && k < all.nrank && k < pruned.nrank; k++) {
        CU_ASSERT_EQUAL(all.rank[k], pruned.rank[k]);
        CU_ASSERT_EQUAL(all.eval[all.rank[k]].step_seconds, pruned.eval[pruned.rank[k]].step_seconds);
    }
    for (int i = 0; i < en.n; i++)
        if (all.eval[i].reason == SEARCH_OK)
            CU_ASSERT(pruned.eval[i].reason == SEARCH_OK || pruned.eval[i].reason == SEARCH_PRUNED);
    search_result_free(&all);
    search_result_free(&pruned);
    search_enum_free(&en);
}

/* Impossible values are errors located where they were given (or at the model key they
 * contradict) that say what to use. */
static void test_space_errors(void)
{
    CU_ASSERT_EQUAL_FATAL(load("configs/models/gpt_tiny.yaml", "configs/clusters/dgx_a100_8.yaml", 8), 0);
    base_error e;
    search_space s;
    memset(&s, 0, sizeof s);
    base_error_clear(&e);
    CU_ASSERT_EQUAL(search_space_set(&s, SEARCH_KEY_TP, "3", "--tp", &e), 0);
    CU_ASSERT_EQUAL(search_space_check(&s, &pb, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "gpt_tiny.yaml:");
    TEST_ASSERT_CONTAINS(e.msg, "--tp 3");
    TEST_ASSERT_CONTAINS(e.msg, "use --tp 1, 2 or 4");
    memset(&s, 0, sizeof s);
    base_error_clear(&e);
    CU_ASSERT_EQUAL(search_space_set(&s, SEARCH_KEY_SCHEDULES, "1f1bb", "--schedules", &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "did you mean '1f1b'?");
    base_error_clear(&e);
    CU_ASSERT_EQUAL(search_space_set(&s, SEARCH_KEY_MBS, "3", "--mbs", &e), 0);
    CU_ASSERT_EQUAL(search_space_check(&s, &pb, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "does not divide the global batch of 8");
    TEST_ASSERT_CONTAINS(e.msg, "use --mbs 1, 2, 4 or 8");
    base_error_clear(&e);
    CU_ASSERT_EQUAL(search_space_fix(&s, "pq=2", &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "unknown key 'pq'");
    base_error_clear(&e);
    CU_ASSERT_EQUAL(search_space_set(&s, SEARCH_KEY_ZERO, "4", "--zero", &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "ZeRO stages 0, 1, 2 or 3");
    /* a space file's bad value is located in the file */
    memset(&s, 0, sizeof s);
    base_error_clear(&e);
    CU_ASSERT_EQUAL(search_space_load(&s, test_src_path("tests/fixtures/search/bad_tp.yaml"), &arena, &e), 0);
    CU_ASSERT_EQUAL(search_space_check(&s, &pb, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "bad_tp.yaml:3:5: ");
    TEST_ASSERT_CONTAINS(e.msg, "use 1, 2 or 4");
    memset(&s, 0, sizeof s);
    base_error_clear(&e);
    CU_ASSERT_EQUAL(search_space_load(&s, test_src_path("tests/fixtures/search/bad_key.yaml"), &arena, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "bad_key.yaml:");
    TEST_ASSERT_CONTAINS(e.msg, "schedule");
}

/* The shipped default space means everything: loading it changes nothing. */
static void test_default_space(void)
{
    base_error e;
    base_error_clear(&e);
    search_space s;
    memset(&s, 0, sizeof s);
    CU_ASSERT_EQUAL_FATAL(search_space_load(&s, test_src_path("configs/search/default.yaml"), &arena, &e), 0);
    for (int k = 0; k < SEARCH_NKEYS; k++) CU_ASSERT_EQUAL(s.key[k].n, 0);
}

int piper_tests_register(void)
{
    static const test_case cases[] = {
        {"count_by_hand", test_count_by_hand},
        {"preconditions", test_preconditions},
        {"bound_below_peak", test_bound_below_peak},
        {"moe_space_compiles", test_moe_space_compiles},
        {"pruning_is_exact", test_pruning_is_exact},
        {"space_errors", test_space_errors},
        {"default_space", test_default_space},
        {NULL, NULL},
    };
    base_arena_init(&arena);
    return test_add_suite("search", cases);
}
