/* test_schedules.c — the schedule library (sched/schedule.h): every builder's per-rank orders
 * against sequences worked out by hand from ../shared/reference/schedules.md and against
 * PyTorch's orders (tests/fixtures/schedules), their idle time and activation peaks under unit
 * costs against formulas.md, precondition errors, the CSV notation (round trips and every
 * validation error), and whole programs through the compiler: the plan's launch order is the
 * builder's order, --emit-directives reloads to the same plan, and activation memory matches. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../testutil.h"
#include "sched/schedule.h"

/* ---------------------------------------------------------------- helpers */

static sched_table build(sched_kind k, int p, int m, int v, int N)
{
    sched_params sp = {p, m, v, N};
    sched_table t;
    char why[512] = "";
    int rc = sched_build(k, &sp, &t, why, sizeof why);
    if (rc) fprintf(stderr, "\n  %s p=%d m=%d: %s\n", sched_kind_name(k), p, m, why);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    return t;
}

/* A rank's row as "0F0,0F1,..." (malloc'd). */
static char *row_str(const sched_table *t, int r)
{
    size_t cap = 64 + (size_t)t->rows[r].n * 32, o = 0;
    char *s = malloc(cap);
    s[0] = 0;
    for (int k = 0; k < t->rows[r].n; k++) {
        char c[64];
        o += (size_t)snprintf(s + o, cap - o, "%s%s", k ? "," : "", sched_cell_str(&t->rows[r].cells[k], c, sizeof c));
    }
    return s;
}

static void assert_row(const sched_table *t, int r, const char *want)
{
    char *got = row_str(t, r);
    if (strcmp(got, want)) fprintf(stderr, "\n  rank %d:\n  got  %s\n  want %s\n", r, got, want);
    CU_ASSERT_STRING_EQUAL(got, want);
    free(got);
}

static int csv_read_str(const char *text, sched_table *t, base_error *e)
{
    base_error_clear(e);
    return sched_order_csv_read("o.csv", text, strlen(text), t, e);
}

/* Write a table as CSV and read it back. */
static void assert_csv_round_trip(const sched_table *t)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sched_order_csv_write(t, f);
    fclose(f);
    sched_table back;
    base_error e;
    CU_ASSERT_EQUAL_FATAL(csv_read_str(buf, &back, &e), 0);
    CU_ASSERT(sched_table_equal(t, &back));
    sched_table_free(&back);
    free(buf);
}

/* ---------------------------------------------------------------- unit-cost replay
 * A schedule run with fixed costs and no communication: each rank runs its cells in order; a
 * cell starts when its rank is free and its inputs are done. Forward of stage s needs the
 * forward of the stage before it in its pipeline, a backward (B or I) the backward of the stage
 * after it (the last stage: its own forward), W its I. `first` marks stages that start a
 * pipeline (DualPipe has two). Enough to hold builders to formulas.md's idle times. */
typedef struct costs {
    double F, B, I, W, FB;
} costs;

typedef struct replay {
    double makespan;
    double idle[64];
    int peak_live[64]; /* chunk-micro-batches of activations held (F to B or W) */
} replay;

static replay run_units(const sched_table *t, int S, int m, const bool *first, const bool *last,
                        costs c)
{
    replay out;
    memset(&out, 0, sizeof out);
    size_t nk = (size_t)S * (size_t)m;
    double *done[4];
    for (int q = 0; q < 4; q++) {
        done[q] = malloc(nk * sizeof(double));
        for (size_t i = 0; i < nk; i++) done[q][i] = -1;
    }
    int *next = calloc((size_t)t->nranks, sizeof(int));
    double *free_at = calloc((size_t)t->nranks, sizeof(double));
    double *busy = calloc((size_t)t->nranks, sizeof(double));
    int *live = calloc((size_t)t->nranks, sizeof(int));
    bool progress = true;
    while (progress) {
        progress = false;
        for (int r = 0; r < t->nranks; r++) {
            while (next[r] < t->rows[r].n) {
                const sched_cell *cell = &t->rows[r].cells[next[r]];
                double start = free_at[r], dur = 0;
                bool ready = true;
                for (int i = 0; i < cell->n && ready; i++) {
                    const sched_action *a = &cell->a[i];
                    size_t key = (size_t)a->stage * (size_t)m + (size_t)a->mb;
                    double dep = 0;
                    if (a->pass == PLAN_PASS_F) {
                        if (!first[a->stage]) dep = done[0][key - (size_t)m];
                    } else if (a->pass == PLAN_PASS_BW) {
                        dep = done[2][key];
                    } else if (last[a->stage]) {
                        dep = done[0][key];
                    } else {
                        size_t nx = key + (size_t)m;
                        dep = done[1][nx] >= 0 ? done[1][nx] : done[2][nx];
                    }
                    if (dep < 0) ready = false;
                    if (dep > start) start = dep;
                    dur += a->pass == PLAN_PASS_F ? c.F : a->pass == PLAN_PASS_B ? c.B : a->pass == PLAN_PASS_BI ? c.I : c.W;
                }
                if (!ready) break;
                if (cell->n == 2) dur = c.FB;
                double end = start + dur;
                for (int i = 0; i < cell->n; i++) {
                    const sched_action *a = &cell->a[i];
                    size_t key = (size_t)a->stage * (size_t)m + (size_t)a->mb;
                    int q = a->pass == PLAN_PASS_F ? 0 : a->pass == PLAN_PASS_B ? 1 : a->pass == PLAN_PASS_BI ? 2 : 3;
                    done[q][key] = end;
                    if (a->pass == PLAN_PASS_F) live[r]++;
                    if (a->pass == PLAN_PASS_B || a->pass == PLAN_PASS_BW) live[r]--;
                    if (live[r] > out.peak_live[r]) out.peak_live[r] = live[r];
                }
                free_at[r] = end;
                busy[r] += dur;
                next[r]++;
                progress = true;
            }
        }
    }
    for (int r = 0; r < t->nranks; r++) {
        CU_ASSERT_EQUAL(next[r], t->rows[r].n); /* the order ran to the end: no deadlock */
        if (free_at[r] > out.makespan) out.makespan = free_at[r];
    }
    for (int r = 0; r < t->nranks; r++) out.idle[r] = out.makespan - busy[r];
    for (int q = 0; q < 4; q++) free(done[q]);
    free(next);
    free(free_at);
    free(busy);
    free(live);
    return out;
}

/* One pipeline of S stages (also V shapes: the V is one chain of 2p stages). */
static replay run_chain(const sched_table *t, int S, int m, costs c)
{
    bool first[64] = {0}, last[64] = {0};
    first[0] = true;
    last[S - 1] = true;
    return run_units(t, S, m, first, last, c);
}

/* ---------------------------------------------------------------- builders against schedules.md */

static void test_1f1b_matches_hand_written(void)
{
    /* configs/programs/pp4_1f1b.yaml, written by hand before the builder existed */
    sched_table t = build(SCHED_1F1B, 4, 8, 1, 0);
    assert_row(&t, 0, "0F0,0F1,0F2,0F3,0B0,0F4,0B1,0F5,0B2,0F6,0B3,0F7,0B4,0B5,0B6,0B7");
    assert_row(&t, 1, "1F0,1F1,1F2,1B0,1F3,1B1,1F4,1B2,1F5,1B3,1F6,1B4,1F7,1B5,1B6,1B7");
    assert_row(&t, 2, "2F0,2F1,2B0,2F2,2B1,2F3,2B2,2F4,2B3,2F5,2B4,2F6,2B5,2F7,2B6,2B7");
    assert_row(&t, 3, "3F0,3B0,3F1,3B1,3F2,3B2,3F3,3B3,3F4,3B4,3F5,3B5,3F6,3B6,3F7,3B7");
    sched_table_free(&t);
    /* fewer micro-batches than ranks: warm-up is capped at m */
    t = build(SCHED_1F1B, 4, 2, 1, 0);
    assert_row(&t, 0, "0F0,0F1,0B0,0B1");
    assert_row(&t, 3, "3F0,3B0,3F1,3B1");
    sched_table_free(&t);
}

static void test_gpipe(void)
{
    sched_table t = build(SCHED_GPIPE, 2, 3, 1, 0);
    assert_row(&t, 0, "0F0,0F1,0F2,0B0,0B1,0B2");
    assert_row(&t, 1, "1F0,1F1,1F2,1B0,1B1,1B2");
    sched_table_free(&t);
}

static void test_interleaved_p2_v2_m4(void)
{
    /* Worked from schedules.md: N = p = 2; forward steps (mb, chunk) = (0,0) (1,0) (0,1) (1,1)
     * (2,0) (3,0) (2,1) (3,1); stage = chunk·p + r; backward steps use chunk v-1-c. Rank 0:
     * warm-up min(2(p-1) + (v-1)N, 8) = 4; rank 1: 2. */
    sched_table t = build(SCHED_INTERLEAVED, 2, 4, 2, 0);
    assert_row(&t, 0, "0F0,0F1,2F0,2F1,0F2,2B0,0F3,2B1,2F2,0B0,2F3,0B1,2B2,2B3,0B2,0B3");
    assert_row(&t, 1, "1F0,1F1,3F0,3B0,3F1,3B1,1F2,1B0,1F3,1B1,3F2,3B2,3F3,3B3,1B2,1B3");
    sched_table_free(&t);
}

static void test_zbh1_p4(void)
{
    /* c = 1: rank r defers its first r W's; the last rank runs them in the cool-down */
    sched_table t = build(SCHED_ZBH1, 4, 8, 1, 0);
    assert_row(&t, 0, "0F0,0F1,0F2,0F3,0I0,0W0,0F4,0I1,0W1,0F5,0I2,0W2,0F6,0I3,0W3,0F7,0I4,0W4,"
                      "0I5,0W5,0I6,0W6,0I7,0W7");
    assert_row(&t, 3, "3F0,3I0,3F1,3I1,3F2,3I2,3F3,3I3,3W0,3F4,3I4,3W1,3F5,3I5,3W2,3F6,3I6,3W3,"
                      "3F7,3I7,3W4,3W5,3W6,3W7");
    sched_table_free(&t);
    t = build(SCHED_ZBH2, 4, 8, 1, 0);
    /* c = 2: rank 0 warms up with 2(p-1) = 6 forwards */
    assert_row(&t, 0, "0F0,0F1,0F2,0F3,0F4,0F5,0F6,0I0,0W0,0F7,0I1,0W1,0I2,0W2,0I3,0W3,0I4,0W4,"
                      "0I5,0W5,0I6,0W6,0I7,0W7");
    sched_table_free(&t);
}

/* ZB-H1/H2 at any m (schedules.md): rank r runs the W of step i right after I of micro-batch i
 * once i >= r·c, with r·c from the uncapped warm-up, so it defers min(r·c, m) W's whatever m is.
 * Walking each row: before I of micro-batch i, max(0, i - r·c) W's have run, and what is left
 * runs after the last I. With F = I = W = 1 the makespan is the longer of two paths: rank 0's
 * 3m passes after the p - 1 forwards that fill the pipe, and the last micro-batch's forward and
 * input gradient through all ranks (the last rank alternates F and I from time p - 1, so its
 * last I ends at p - 1 + 2m) and back, plus rank 0's last W: 2m + 2p - 1. Under the capped
 * warm-up rank 0 deferred p - 1 - m W's at p = 8, m = 4 and the makespan was 26, not 23. */
static void test_zbh_few_microbatches(void)
{
    costs ones = {1, 2, 1, 1, 2};
    sched_table t = build(SCHED_ZBH1, 8, 4, 1, 0);
    replay rp = run_chain(&t, 8, 4, ones);
    CU_ASSERT_DOUBLE_EQUAL(rp.makespan, 23, 1e-9);
    assert_row(&t, 0, "0F0,0F1,0F2,0F3,0I0,0W0,0I1,0W1,0I2,0W2,0I3,0W3");
    sched_table_free(&t);
    for (int c = 1; c <= 2; c++)
        for (int p = 2; p <= 8; p++)
            for (int m = 1; m <= 4 * p; m++) {
                t = build(c == 1 ? SCHED_ZBH1 : SCHED_ZBH2, p, m, 1, 0);
                for (int r = 0; r < p; r++) {
                    int w = 0, last_i = -1, after = 0;
                    for (int k = 0; k < t.rows[r].n; k++) {
                        const sched_action *a = &t.rows[r].cells[k].a[0];
                        if (a->pass == PLAN_PASS_BI) {
                            int want = a->mb - r * c > 0 ? a->mb - r * c : 0;
                            if (w != want)
                                fprintf(stderr, "\n  zb-h%d p=%d m=%d rank %d: %d W before I%d, want %d\n",
                                        c, p, m, r, w, a->mb, want);
                            CU_ASSERT_EQUAL(w, want);
                            last_i = a->mb;
                            after = 0;
                        } else if (a->pass == PLAN_PASS_BW) {
                            w++;
                            after++;
                        }
                    }
                    /* after the last I: its own step's W (when m - 1 >= r·c) and the deferred */
                    int deferred = r * c < m ? r * c : m;
                    CU_ASSERT_EQUAL(last_i, m - 1);
                    CU_ASSERT_EQUAL(w, m);
                    CU_ASSERT_EQUAL(after - (m - 1 >= r * c), deferred);
                }
                if (c == 1) {
                    rp = run_chain(&t, p, m, ones);
                    double a = 3.0 * m + p - 1, b = 2.0 * m + 2 * p - 1;
                    double want = a > b ? a : b;
                    if (fabs(rp.makespan - want) > 1e-9)
                        fprintf(stderr, "\n  zb-h1 p=%d m=%d: makespan %g, want %g\n", p, m, rp.makespan, want);
                    CU_ASSERT_DOUBLE_EQUAL(rp.makespan, want, 1e-9);
                }
                sched_table_free(&t);
            }
}

static void test_zbv_p2_m4(void)
{
    /* Worked from schedules.md with n = max(2p-1, m) = 4; rank 0 holds stages 0 and 3, rank 1
     * stages 1 and 2. */
    sched_table t = build(SCHED_ZBV, 2, 4, 2, 0);
    assert_row(&t, 0, "0F0,0F1,0F2,3F0,3I0,3W0,3F1,3I1,3W1,0F3,0I0,0W0,3F2,3I2,3W2,0I1,0W1,3F3,"
                      "3I3,3W3,0I2,0W2,0I3,0W3");
    assert_row(&t, 1, "1F0,2F0,1F1,2F1,2I0,2W0,1F2,1I0,1W0,2F2,2I1,2W1,1F3,1I1,1W1,2F3,2I2,2W2,"
                      "1I2,2I3,1I3,1W2,2W3,1W3");
    sched_table_free(&t);
    /* m below 2p-1: actions of the missing micro-batches are dropped, the rest stays valid */
    t = build(SCHED_ZBV, 4, 2, 2, 0);
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sched_table_validate(&t, NULL, 8, 2, &e), 0);
    sched_table_free(&t);
}

static void test_dualpipev_structure(void)
{
    /* p = 4, m = 8: rank r overlaps 2(r+1) main-step pairs (the last rank's first one runs
     * plain: F0 then a full B1) plus p-r-1 in step 5. */
    int p = 4, m = 8;
    sched_table t = build(SCHED_DUALPIPEV, p, m, 2, 0);
    for (int r = 0; r < p; r++) {
        int pairs = 0;
        for (int k = 0; k < t.rows[r].n; k++) pairs += t.rows[r].cells[k].n == 2;
        CU_ASSERT_EQUAL(pairs, 2 * (r + 1) - (r == p - 1) + (p - r - 1));
        CU_ASSERT_EQUAL(t.rows[r].cells[0].a[0].stage, r); /* phase 0 first */
    }
    assert_row(&t, 3, "3F0,4F0,3F1,4F1,3F2,4F2,3F3,4F3,3F4,4B0,(4F4;3B0)OVERLAP_F_B,"
                      "(3F5;4B1)OVERLAP_F_B,(4F5;3B1)OVERLAP_F_B,(3F6;4B2)OVERLAP_F_B,"
                      "(4F6;3B2)OVERLAP_F_B,(3F7;4B3)OVERLAP_F_B,(4F7;3B3)OVERLAP_F_B,4B4,3B4,"
                      "4B5,3B5,4I6,3I6,4I7,3I7,4W6,3W6,4W7,3W7");
    sched_table_free(&t);
}

/* The builder table: every row complete, names unique and found ignoring case, layouts that
 * say how many stages a rank holds, and every builder documented in docs/programs.md's table. */
static void test_builder_table(void)
{
    CU_ASSERT_EQUAL(SCHED_NKINDS, 8);
    CU_ASSERT_PTR_NULL(sched_kind_names[SCHED_NKINDS]);
    CU_ASSERT_PTR_NULL(sched_kind_info(SCHED_NKINDS));
    FILE *f = fopen(test_src_path("docs/programs.md"), "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    static char doc[1 << 17];
    size_t len = fread(doc, 1, sizeof doc - 1, f);
    doc[len] = 0;
    fclose(f);
    for (int k = 0; k < SCHED_NKINDS; k++) {
        const sched_builder *b = sched_kind_info((sched_kind)k);
        CU_ASSERT_PTR_NOT_NULL_FATAL(b);
        CU_ASSERT_PTR_NOT_NULL(b->build);
        CU_ASSERT(b->doc && strlen(b->doc) > 10);
        CU_ASSERT_STRING_EQUAL(sched_kind_names[k], b->name);
        CU_ASSERT_EQUAL(sched_kind_of(b->name), k);
        char upper[64];
        size_t i = 0;
        for (; b->name[i] && i + 1 < sizeof upper; i++)
            upper[i] = (char)(b->name[i] >= 'a' && b->name[i] <= 'z' ? b->name[i] - 32 : b->name[i]);
        upper[i] = 0;
        CU_ASSERT_EQUAL(sched_kind_of(upper), k);
        for (int j = 0; j < k; j++) CU_ASSERT_STRING_NOT_EQUAL(sched_kind_name((sched_kind)j), b->name);
        char cell[80];
        snprintf(cell, sizeof cell, "`%s`", b->name);
        if (!strstr(doc, cell)) fprintf(stderr, "\n  docs/programs.md does not name %s\n", cell);
        CU_ASSERT_PTR_NOT_NULL(strstr(doc, cell));
    }
    CU_ASSERT_EQUAL(sched_kind_of("1f1b "), -1);
    CU_ASSERT_EQUAL(sched_kind_of(NULL), -1);
    CU_ASSERT_EQUAL(sched_kind_layout(SCHED_INTERLEAVED), SCHED_LAYOUT_LOOP);
    CU_ASSERT_EQUAL(sched_kind_layout(SCHED_DUALPIPE), SCHED_LAYOUT_MIRROR);
    CU_ASSERT_EQUAL(sched_kind_layout(SCHED_ZBV), SCHED_LAYOUT_V);
    CU_ASSERT_STRING_EQUAL(sched_layout_rule(SCHED_LAYOUT_LOOP), "stage s lives on rank s mod p");
    CU_ASSERT_STRING_EQUAL(sched_kind_info(SCHED_INTERLEAVED)->options[1].key, "chunks");
    CU_ASSERT_PTR_NULL(sched_kind_info(SCHED_INTERLEAVED)->options[2].key);
    CU_ASSERT_PTR_NULL(sched_kind_info(SCHED_1F1B)->options[0].key);
    CU_ASSERT_EQUAL(sched_kind_info(SCHED_ZBH2)->flags, 0); /* its p2p streams come from its order */
    CU_ASSERT(sched_kind_info(SCHED_DUALPIPE)->flags & SCHED_NEEDS_MIRROR);
    CU_ASSERT_EQUAL(sched_kind_info(SCHED_1F1B)->flags, 0);
    sched_table t;
    char why[128];
    sched_params sp = {2, 2, 1, 0};
    CU_ASSERT_NOT_EQUAL(sched_build(SCHED_NKINDS, &sp, &t, why, sizeof why), 0);
    CU_ASSERT_STRING_EQUAL(why, "unknown schedule kind 8");
}

static void test_every_builder_validates(void)
{
    static const int ps[] = {1, 2, 3, 4, 8};
    static const int ms[] = {1, 2, 4, 7, 8, 16, 24};
    for (int k = 0; k < SCHED_NKINDS; k++)
        for (size_t i = 0; i < sizeof ps / sizeof *ps; i++)
            for (size_t j = 0; j < sizeof ms / sizeof *ms; j++) {
                int p = ps[i], m = ms[j];
                int v = k == SCHED_INTERLEAVED ? 2 : 1;
                sched_params sp = {p, m, v, 0};
                sched_table t;
                char why[512];
                if (sched_build((sched_kind)k, &sp, &t, why, sizeof why)) continue; /* precondition */
                base_error e;
                base_error_clear(&e);
                int S = k == SCHED_INTERLEAVED ? 2 * p : sched_kind_layout((sched_kind)k) == SCHED_LAYOUT_ONE ? p : 2 * p;
                int mm = k == SCHED_DUALPIPE ? m / 2 : m;
                int rc = sched_table_validate(&t, NULL, S, mm, &e);
                if (rc) fprintf(stderr, "\n  %s p=%d m=%d: %s\n", sched_kind_name((sched_kind)k), p, m, e.msg);
                CU_ASSERT_EQUAL(rc, 0);
                /* a stage lives on the rank its layout says */
                for (int r = 0; r < t.nranks; r++)
                    for (int c = 0; c < t.rows[r].n; c++)
                        for (int a = 0; a < t.rows[r].cells[c].n; a++)
                            CU_ASSERT_EQUAL(sched_layout_rank(sched_kind_layout((sched_kind)k), p,
                                                              t.rows[r].cells[c].a[a].stage), r);
                assert_csv_round_trip(&t);
                sched_table_free(&t);
            }
}

/* ---------------------------------------------------------------- formulas.md under unit costs */

static void test_unit_cost_idle_and_peaks(void)
{
    int p = 4, m = 8;
    costs fb = {1, 2, 1, 1, 3};
    /* 1F1B and GPipe: idle (p-1)(F+B) = 9; peaks p (1F1B, rank r holds p-r) and m (GPipe) */
    sched_table t = build(SCHED_1F1B, p, m, 1, 0);
    replay rp = run_chain(&t, p, m, fb);
    for (int r = 0; r < p; r++) {
        CU_ASSERT_DOUBLE_EQUAL(rp.idle[r], 9, 1e-9);
        CU_ASSERT_EQUAL(rp.peak_live[r], p - r);
    }
    sched_table_free(&t);
    t = build(SCHED_GPIPE, p, m, 1, 0);
    rp = run_chain(&t, p, m, fb);
    CU_ASSERT_DOUBLE_EQUAL(rp.idle[0], 9, 1e-9);
    CU_ASSERT_EQUAL(rp.peak_live[0], m);
    sched_table_free(&t);
    /* interleaved p=4 v=2 m=8, chunk F=1 B=2: idle 9 (chunk times), rank-0 peak v·p+p-1 = 11 */
    t = build(SCHED_INTERLEAVED, p, m, 2, 0);
    rp = run_chain(&t, 2 * p, m, fb);
    for (int r = 0; r < p; r++) CU_ASSERT_DOUBLE_EQUAL(rp.idle[r], 9, 1e-9);
    CU_ASSERT_EQUAL(rp.peak_live[0], 2 * p + p - 1);
    sched_table_free(&t);
    /* ZB-H1 with F = BI = BW = 1: idle (p-1)(F+BI-BW) = 3, peak p; ZB-H2: peak 2p-1 */
    costs ones = {1, 2, 1, 1, 2};
    t = build(SCHED_ZBH1, p, m, 1, 0);
    rp = run_chain(&t, p, m, ones);
    for (int r = 0; r < p; r++) CU_ASSERT_DOUBLE_EQUAL(rp.idle[r], 3, 1e-9);
    CU_ASSERT_EQUAL(rp.peak_live[0], p);
    sched_table_free(&t);
    t = build(SCHED_ZBH2, p, m, 1, 0);
    rp = run_chain(&t, p, m, ones);
    CU_ASSERT_EQUAL(rp.peak_live[0], 2 * p - 1);
    sched_table_free(&t);
    /* ZB-V with F = BI = BW = 1: idle p-1 per rank, peak 2p */
    t = build(SCHED_ZBV, p, m, 2, 0);
    rp = run_chain(&t, 2 * p, m, ones);
    for (int r = 0; r < p; r++) CU_ASSERT_DOUBLE_EQUAL(rp.idle[r], p - 1, 1e-9);
    CU_ASSERT_EQUAL(rp.peak_live[0], 2 * p);
    sched_table_free(&t);
    /* DualPipeV p=4 (8 stages), m=10, F=BI=BW=1, B=2, F&B=3: makespan 66, idle 2p-2 = 6 */
    t = build(SCHED_DUALPIPEV, p, 10, 2, 0);
    rp = run_chain(&t, 2 * p, 10, fb);
    CU_ASSERT_DOUBLE_EQUAL(rp.makespan, 66, 1e-9);
    for (int r = 0; r < p; r++) CU_ASSERT_DOUBLE_EQUAL(rp.idle[r], 2 * p - 2, 1e-9);
    CU_ASSERT_EQUAL(rp.peak_live[0], 2 * p + 1);
    sched_table_free(&t);
}

static void test_dualpipe_unit_costs(void)
{
    /* Two pipelines: stages 0..p-1 forward-direction, p..2p-1 reverse-direction (stage p+i on
     * rank p-1-i). F=BI=BW=1, B=2, F&B=3: idle p-2 on every rank, independent of m; peak p+1. */
    for (int m = 16; m <= 24; m += 8) {
        int p = 4;
        sched_table t = build(SCHED_DUALPIPE, p, m, 2, 0);
        bool first[64] = {0}, last[64] = {0};
        first[0] = first[p] = true;
        last[p - 1] = last[2 * p - 1] = true;
        replay rp = run_units(&t, 2 * p, m / 2, first, last, (costs){1, 2, 1, 1, 3});
        for (int r = 0; r < p; r++) {
            CU_ASSERT_DOUBLE_EQUAL(rp.idle[r], p - 2, 1e-9);
            CU_ASSERT_EQUAL(rp.peak_live[r], p + 1);
        }
        sched_table_free(&t);
    }
}

/* ---------------------------------------------------------------- preconditions */

static void assert_build_fails(sched_kind k, int p, int m, int v, int N, const char *needle)
{
    sched_params sp = {p, m, v, N};
    sched_table t;
    char why[512] = "";
    CU_ASSERT_NOT_EQUAL(sched_build(k, &sp, &t, why, sizeof why), 0);
    TEST_ASSERT_CONTAINS(why, needle);
}

static void test_preconditions(void)
{
    assert_build_fails(SCHED_INTERLEAVED, 4, 3, 2, 0, "needs at least p = 4 micro-batches");
    assert_build_fails(SCHED_INTERLEAVED, 4, 8, 2, 3, "p <= group_size <= m");
    assert_build_fails(SCHED_INTERLEAVED, 4, 10, 2, 0, "m mod N = 2 micro-batches, fewer than p = 4");
    assert_build_fails(SCHED_DUALPIPE, 3, 12, 2, 0, "even number of pipeline ranks");
    assert_build_fails(SCHED_DUALPIPE, 4, 9, 2, 0, "m must be even");
    assert_build_fails(SCHED_DUALPIPE, 4, 6, 2, 0, "m >= 2p = 8");
    assert_build_fails(SCHED_DUALPIPEV, 4, 7, 2, 0, "m >= 2p = 8");
    assert_build_fails(SCHED_1F1B, 4, 0, 1, 0, "at least one rank and one micro-batch");
    /* what Megatron accepts: m mod N = 0 or >= p */
    sched_params ok = {4, 10, 2, 5};
    sched_table t;
    char why[256];
    CU_ASSERT_EQUAL(sched_build(SCHED_INTERLEAVED, &ok, &t, why, sizeof why), 0);
    sched_table_free(&t);
    sched_params ok2 = {4, 14, 2, 5}; /* last group of 4 = p */
    CU_ASSERT_EQUAL(sched_build(SCHED_INTERLEAVED, &ok2, &t, why, sizeof why), 0);
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sched_table_validate(&t, NULL, 8, 14, &e), 0);
    sched_table_free(&t);
}

/* ---------------------------------------------------------------- PyTorch oracle fixtures */

static void assert_matches_torch(const char *fixture, sched_kind k, int v)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tests/fixtures/schedules/%s", fixture);
    sched_table torch, ours = build(k, 4, 8, v, 0);
    base_error e;
    base_error_clear(&e);
    int rc = sched_order_csv_read_file(test_src_path(rel), &torch, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(sched_table_validate(&torch, test_src_path(rel), 0, 0, &e), 0);
    CU_ASSERT_TRUE(sched_table_equal(&torch, &ours));
    for (int r = 0; r < 4 && r < torch.nranks; r++) {
        char *want = row_str(&torch, r);
        assert_row(&ours, r, want);
        free(want);
    }
    sched_table_free(&torch);
    sched_table_free(&ours);
}

static void test_torch_1f1b(void) { assert_matches_torch("torch_1f1b_p4_m8.csv", SCHED_1F1B, 1); }
static void test_torch_interleaved(void)
{
    assert_matches_torch("torch_interleaved-1f1b_p4_m8.csv", SCHED_INTERLEAVED, 2);
}
static void test_torch_zbv(void) { assert_matches_torch("torch_zbv_p4_m8.csv", SCHED_ZBV, 2); }
static void test_torch_dualpipev(void)
{
    assert_matches_torch("torch_dualpipev_p4_m8.csv", SCHED_DUALPIPEV, 2);
}

/* ---------------------------------------------------------------- CSV */

static void test_csv_syntax(void)
{
    sched_table t;
    base_error e;
    /* PyTorch's example: idle cells, quoted cells, comments, CRLF, communication skipped */
    CU_ASSERT_EQUAL_FATAL(csv_read_str("# two ranks\r\n0F0,0F1,,0B0,,0B1\r\n ,1F0,\"1B0\","
                                       "1SEND_B0,1F1,1B1,\n\n",
                                       &t, &e), 0);
    CU_ASSERT_EQUAL(t.nranks, 2);
    assert_row(&t, 0, "0F0,0F1,0B0,0B1");
    assert_row(&t, 1, "1F0,1B0,1F1,1B1");
    CU_ASSERT_EQUAL(t.rows[1].cells[1].col, 3); /* cell index counts idle cells */
    CU_ASSERT_EQUAL(t.rows[0].line, 2);
    CU_ASSERT_EQUAL(sched_table_validate(&t, "o.csv", 2, 2, &e), 0);
    sched_table_free(&t);
    CU_ASSERT_EQUAL_FATAL(csv_read_str("0F0,(0F1; 1B0)OVERLAP_F_B,0B1\n", &t, &e), 0);
    assert_row(&t, 0, "0F0,(0F1;1B0)OVERLAP_F_B,0B1");
    sched_table_free(&t);

    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"0F0,0X1\n", "o.csv:1:5: rank 0, column 2: cannot read '0X1': unknown action type"},
        {"0F0,F1\n", "column 2: cannot read 'F1': it does not start with a stage number"},
        {"0F0,0F\n", "the micro-batch number is missing"},
        {"0F0,0F1x\n", "junk after the micro-batch number"},
        {"0F0\n1F0,(1F1;0B0\n", "o.csv:2:5: rank 1, column 2: cannot read '(1F1;0B0': '(' without ')'"},
        {"(0F1;0B0)OVERLAP\n", "must end in OVERLAP_F_B"},
        {"(0F1;0B0;0F2)OVERLAP_F_B\n", "exactly two actions"},
        {"(0F1)OVERLAP_F_B\n", "exactly two actions"},
        {"(0F1;0SEND_F1)OVERLAP_F_B\n", "compute actions only"},
        {"0F0,\"0B0\n", "a quoted cell is not closed"},
        {"# nothing\n\n", "has no rows"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CU_ASSERT_NOT_EQUAL(csv_read_str(bad[i].text, &t, &e), 0);
        TEST_ASSERT_CONTAINS(e.msg, bad[i].needle);
    }
    /* a NUL byte, which would end the cell early, is refused where it stands, like every reader */
    static const char nul[] = "0F0,0F1\n1F0,1F\0" "1,1B0\n";
    base_error_clear(&e);
    CU_ASSERT_NOT_EQUAL(sched_order_csv_read("o.csv", nul, sizeof nul - 1, &t, &e), 0);
    TEST_ASSERT_CONTAINS(e.msg, "o.csv:2:7: the text contains a NUL character; remove it");
}

static void assert_invalid(const char *text, int S, int m, const char *needle)
{
    sched_table t;
    base_error e;
    CU_ASSERT_EQUAL_FATAL(csv_read_str(text, &t, &e), 0);
    base_error_clear(&e);
    CU_ASSERT_NOT_EQUAL(sched_table_validate(&t, "o.csv", S, m, &e), 0);
    TEST_ASSERT_CONTAINS(e.msg, needle);
    sched_table_free(&t);
}

static void test_csv_validation_errors(void)
{
    assert_invalid("0F0,0F1,0B0,0B1\n1F0,1F1,1B0,2B1\n", 2, 2,
                   "o.csv:2:13: rank 1, column 4 ('2B1'): stage 2 does not exist: the pipeline has 2 stages");
    assert_invalid("0F0,0F1,0B0,0B1,0F2\n", 1, 2, "rank 0, column 5 ('0F2'): micro-batch 2 does not exist");
    /* inferred sizes beyond the actions (a fuzzer's find: 633333333F0 made tables of that size) */
    assert_invalid("0F0,0B0,633333333F0\n", 0, 0, "the order names stage 633333333 and micro-batch 0, so it "
                   "needs 633333334 x 1 forwards, but it has 3 actions in all");
    assert_invalid("0F0,0B2147483647\n", 0, 0, "so it needs 1 x 2147483648 forwards, but it has 2 actions");
    assert_invalid("0F0,0B0\n1F0,1B0,0F1,0B1\n", 0, 0,
                   "rank 1, column 3 ('0F1'): stage 0 also runs on rank 0 (column 1); a stage lives on one rank");
    assert_invalid("0F0,0F0,0B0\n", 0, 0, "rank 0, column 2 ('0F0'): the forward of stage 0 micro-batch 0 appears twice");
    assert_invalid("0B0,0F0\n", 0, 0, "rank 0, column 1 ('0B0'): the backward comes before its forward (0F0)");
    assert_invalid("0F1,0B0,0B1\n", 0, 0, "rank 0, column 2 ('0B0'): the backward has no forward (0F0)");
    assert_invalid("0F0,0W0,0I0\n", 0, 0, "column 2 ('0W0'): the weight backward comes before its input backward");
    assert_invalid("0F0,0W0\n", 0, 0, "column 2 ('0W0'): the weight backward has no input backward (0I0)");
    assert_invalid("0F0,0I0\n", 0, 0, "column 2 ('0I0'): the input backward has no weight backward");
    assert_invalid("0F0,0I0,0B0,0W0\n", 0, 0, "column 3 ('0B0'): micro-batch 0 of stage 0 has a full backward and also a split one");
    assert_invalid("0F0,0B0,0F2,0B2\n", 0, 0, "o.csv:1:1: rank 0: stage 0 has 2 forwards but there are 3 micro-batches: micro-batch 1 has none; add 0F1");
    assert_invalid("0F0,0F1,0B0\n", 0, 0, "rank 0: stage 0 has 1 backwards (B + (I+W)/2 = 1 + 0/2) but needs one per micro-batch (2): micro-batch 1 has none");
    assert_invalid("0F0,0B0\n2F0,2B0\n", 0, 0, "stage 1 appears on no rank");
    assert_invalid("0F0,0B0\n\n1F0,1B0\n", 0, 0, "o.csv:2:1: rank 1: the rank has no actions");
    assert_invalid("0F0,(0F1;0F1)OVERLAP_F_B,0B0,0B1\n", 0, 0, "column 2 ('(0F1;0F1)OVERLAP_F_B'): an overlapped pair names the same action twice");
    assert_invalid("(0F0;0B0)OVERLAP_F_B\n", 0, 0, "column 1 ('(0F0;0B0)OVERLAP_F_B'): the backward comes before its forward");
    /* B + (I+W)/2 = m, split and unsplit mixed per micro-batch: valid */
    sched_table t;
    base_error e;
    CU_ASSERT_EQUAL(csv_read_str("0F0,0F1,0B0,0I1,0W1\n", &t, &e), 0);
    CU_ASSERT_EQUAL(sched_table_validate(&t, NULL, 1, 2, &e), 0);
    sched_table_free(&t);
}

/* ---------------------------------------------------------------- through the compiler */

/* Writes a program: gpt_tiny8, S stages placed by `layout`, one device per rank, m micro-batches,
 * and a schedule directive (`sched_line`, e.g. "{op: schedule, name: 1f1b}"). */
/* gpt_tiny8 with untied embeddings (dualpipe refuses tied ones), as a --model override */
static const char *untied_model(void)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s", test_src_path("tests/fixtures/schedules/gpt_tiny8_untied.yaml"));
    return path;
}
#define UNTIED untied_model()

static const char *write_program(const char *name, int S, int p, sched_layout layout, int m,
                                 const char *sched_line)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/sched_schedules_%s.yaml", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", name);
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    char model[4096], cluster[4096];
    snprintf(model, sizeof model, "%s", test_src_path("tests/fixtures/schedules/gpt_tiny8.yaml"));
    snprintf(cluster, sizeof cluster, "%s", test_src_path("configs/clusters/a100_4.yaml"));
    fprintf(f, "model: %s\ncluster: %s\nbatch: {global: %d, micro: 1}\nannotations: {pp: %d}\n"
               "directives:\n  - {op: split, filter: {}, num_microbatches: %d}\n",
            model, cluster, m, S, m);
    for (int s = 0; s < S; s++)
        fprintf(f, "  - {op: place, filter: {PP: %d}, devices: [%d]}\n", s, sched_layout_rank(layout, p, s));
    if (sched_line) fprintf(f, "  - %s\n", sched_line);
    fclose(f);
    return path;
}

typedef struct compiled {
    sched_compilation c;
    int rc;
    base_error e;
} compiled;

static void compile_path(compiled *k, const char *path, const char *model, const char *cluster, bool check)
{
    sched_compilation_init(&k->c);
    base_error_clear(&k->e);
    sched_options o = {0};
    o.no_check = !check;
    k->rc = sched_compile(&k->c, path, model, cluster, &o, &k->e);
    if (k->rc && check) fprintf(stderr, "\n  %s: %s\n", path, k->e.msg);
}

/* The plan's launch order, read back as a table, is the builder's order; and the CSV of it
 * loads back as a `schedule: {file}` program that compiles to the same order. */
static void check_program(sched_kind k, int S, int p, int m, bool check)
{
    char line[700];
    snprintf(line, sizeof line, "{op: schedule, name: %s}", sched_kind_name(k));
    const char *path = write_program(sched_kind_name(k), S, p, sched_kind_layout(k), m, line);
    compiled a;
    compile_path(&a, path, NULL, NULL, check);
    CU_ASSERT_EQUAL_FATAL(a.rc, 0);
    sched_table plan, want = build(k, p, m, S / p, 0);
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(sched_table_from_plan(&a.c, &plan, &e), 0);
    CU_ASSERT_TRUE(sched_table_equal(&plan, &want));
    for (int r = 0; r < p; r++) {
        char *w = row_str(&want, r);
        assert_row(&plan, r, w);
        free(w);
    }
    /* chunk tags follow the layout */
    for (size_t v = 0; v < a.c.dag.nnodes; v++) {
        const ir_node *n = &a.c.dag.nodes[v];
        if (!n->dead && n->stage >= 0) CU_ASSERT_EQUAL(n->chunk, sched_layout_chunk(sched_kind_layout(k), p, n->stage));
    }
    /* the order file of the plan, as a schedule file */
    char csv[600], prog2[512];
    snprintf(csv, sizeof csv, "%s.csv", path);
    FILE *f = fopen(csv, "w");
    CU_ASSERT_EQUAL_FATAL(sched_write_order_csv(&a.c, f, &e), 0);
    fclose(f);
    snprintf(line, sizeof line, "{op: schedule, file: %s}", csv);
    snprintf(prog2, sizeof prog2, "%s", write_program("from_file", S, p, sched_kind_layout(k), m, line));
    compiled b;
    compile_path(&b, prog2, NULL, NULL, check);
    CU_ASSERT_EQUAL_FATAL(b.rc, 0);
    sched_table plan2;
    CU_ASSERT_EQUAL(sched_table_from_plan(&b.c, &plan2, &e), 0);
    CU_ASSERT_TRUE(sched_table_equal(&plan2, &want));
    sched_table_free(&plan2);
    sched_compilation_free(&b.c);
    sched_table_free(&plan);
    sched_table_free(&want);
    sched_compilation_free(&a.c);
}

static void test_compile_one_stage_per_rank(void)
{
    /* checked by the static check: no deadlock, memory fits */
    check_program(SCHED_GPIPE, 4, 4, 8, true);
    check_program(SCHED_1F1B, 4, 4, 8, true);
    check_program(SCHED_ZBH1, 4, 4, 8, true);
    check_program(SCHED_ZBH2, 4, 4, 8, true);
}

static void test_compile_two_chunks_per_rank(void)
{
    /* The orders are right (the plan runs exactly the builder's order), but the static check
     * finds a deadlock: with blocking, unbuffered sends on one p2p stream, a rank that sends
     * to one neighbour while the next needs its receive from the other cannot proceed. Checked
     * without it until the lowering posts receives ahead (see docs/architecture.md). */
    check_program(SCHED_INTERLEAVED, 8, 4, 8, false);
    check_program(SCHED_ZBV, 8, 4, 8, false);
    check_program(SCHED_DUALPIPEV, 8, 4, 8, false);
}

/* DualPipe at p = 4, m = 8 on the untied tiny GPT, through the static check: the plan runs the
 * builder's order (each direction's micro-batches numbered from 0); stage p+i is stage i's
 * regions for micro-batches m/2..m-1 on rank p-1-i; each region with parameters has exactly two
 * updates (rank i and rank p-1-i), each fed by a pair all-reduce with the other's devices; and
 * the gradient norm reads no mirrored gradient directly (each pair counted once). */
static void test_compile_dualpipe(void)
{
    const int p = 4, m = 8;
    compiled a;
    compile_path(&a, write_program("dualpipe", p, p, SCHED_LAYOUT_ONE, m, "{op: schedule, name: dualpipe}"), UNTIED, NULL, true);
    CU_ASSERT_EQUAL_FATAL(a.rc, 0);
    sched_table plan, want = build(SCHED_DUALPIPE, p, m, 2, 0);
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(sched_table_from_plan(&a.c, &plan, &e), 0);
    CU_ASSERT_TRUE(sched_table_equal(&plan, &want));
    const ir_dag *g = &a.c.dag;
    int nupd[64][2] = {{0}}, npair = 0;
    for (size_t v = 0; v < g->nnodes; v++) {
        const ir_node *n = &g->nodes[v];
        if (n->dead) continue;
        int dev = g->places[n->place].devs[0];
        if ((n->op == IR_OP_F || n->op == IR_OP_B || n->op == IR_OP_BI || n->op == IR_OP_BW) && n->mb >= 0) {
            bool mirror = n->mb >= m / 2;
            CU_ASSERT_EQUAL(n->stage >= p, mirror);
            CU_ASSERT_EQUAL(dev, mirror ? 2 * p - 1 - n->stage : n->stage);
            CU_ASSERT_EQUAL(n->chunk, sched_layout_chunk(SCHED_LAYOUT_MIRROR, p, n->stage));
        }
        if (n->op == IR_OP_UPD && n->region >= 0 && n->region < 64) {
            int s = n->stage % p;
            CU_ASSERT_EQUAL(dev, n->stage >= p ? p - 1 - s : s);
            nupd[n->region][n->stage >= p]++;
        }
        if (n->op == IR_OP_ALL_REDUCE && n->coll_group == IR_CG_PAIR) {
            npair++;
            int peer = g->places[n->peer_place].devs[0];
            CU_ASSERT_EQUAL(peer, p - 1 - dev);
        }
    }
    int nregions = 0;
    for (int r = 0; r < g->nregions && r < 64; r++) {
        if (!nupd[r][0] && !nupd[r][1]) continue;
        nregions++;
        CU_ASSERT_EQUAL(nupd[r][0], 1);
        CU_ASSERT_EQUAL(nupd[r][1], 1);
    }
    CU_ASSERT(nregions > 0);
    CU_ASSERT_EQUAL(npair, 2 * nregions);
    for (size_t i = 0; i < g->nedges; i++) {
        const ir_edge *ed = &g->edges[i];
        if (ed->dead || g->nodes[ed->dst].op != IR_OP_GRAD_NORM) continue;
        CU_ASSERT_FALSE(g->nodes[ed->src].stage >= p && g->nodes[ed->src].mb >= 0);
    }
    sched_table_free(&plan);
    sched_table_free(&want);
    sched_compilation_free(&a.c);
}

static double act_peak(const compiled *k, int dev) { return k->c.stats.dev[dev].peak_by_mem[PLAN_MEM_ACT]; }

static void test_compile_activation_peaks(void)
{
    /* in units of one micro-batch of a stage's saved activations: GPipe holds m on every rank,
     * so its peak / m is the unit; 1F1B holds p - r, ZB-H1 p, ZB-H2 2p - 1 on rank 0 */
    int p = 4, m = 8;
    compiled g, f, z1, z2;
    compile_path(&g, write_program("peak_gpipe", p, p, SCHED_LAYOUT_ONE, m, "{op: schedule, name: gpipe}"), NULL, NULL, true);
    compile_path(&f, write_program("peak_1f1b", p, p, SCHED_LAYOUT_ONE, m, "{op: schedule, name: 1f1b}"), NULL, NULL, true);
    compile_path(&z1, write_program("peak_zbh1", p, p, SCHED_LAYOUT_ONE, m, "{op: schedule, name: zb-h1}"), NULL, NULL, true);
    compile_path(&z2, write_program("peak_zbh2", p, p, SCHED_LAYOUT_ONE, m, "{op: schedule, name: zb-h2}"), NULL, NULL, true);
    CU_ASSERT_FATAL(!g.rc && !f.rc && !z1.rc && !z2.rc);
    for (int r = 0; r < p; r++) {
        double unit = act_peak(&g, r) / m;
        CU_ASSERT(unit > 0);
        CU_ASSERT_DOUBLE_EQUAL(act_peak(&f, r) / unit, p - r, 1e-6);
    }
    double unit0 = act_peak(&g, 0) / m;
    CU_ASSERT_DOUBLE_EQUAL(act_peak(&z1, 0) / unit0, p, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(act_peak(&z2, 0) / unit0, 2 * p - 1, 1e-6);
    sched_compilation_free(&g.c);
    sched_compilation_free(&f.c);
    sched_compilation_free(&z1.c);
    sched_compilation_free(&z2.c);
}

static void test_compile_errors(void)
{
    compiled k;
    /* V layout placed as a loop */
    compile_path(&k, write_program("bad_v", 8, 4, SCHED_LAYOUT_LOOP, 8, "{op: schedule, name: zbv}"), NULL, NULL, false);
    CU_ASSERT_NOT_EQUAL(k.rc, 0);
    TEST_ASSERT_CONTAINS(k.e.msg, ":15:5: directive 9 (schedule): stage 4 runs on devices [0], but zbv over 4 ranks puts it on rank 3 with stage 3, which runs on [3]; place stage 4 on [3]");
    sched_compilation_free(&k.c);
    /* odd stage count for a V */
    compile_path(&k, write_program("odd_v", 3, 3, SCHED_LAYOUT_ONE, 8, "{op: schedule, name: dualpipev}"), NULL, NULL, false);
    TEST_ASSERT_CONTAINS(k.e.msg, "needs an even number of stages, but the PP annotation makes 3");
    sched_compilation_free(&k.c);
    /* builder preconditions carry the directive's location */
    compile_path(&k, write_program("il_m", 8, 4, SCHED_LAYOUT_LOOP, 6, "{op: schedule, name: interleaved-1f1b}"), NULL, NULL, false);
    TEST_ASSERT_CONTAINS(k.e.msg, ":15:5: directive 9 (schedule): interleaved-1f1b with group size N = 4 leaves a last group of m mod N = 2");
    sched_compilation_free(&k.c);
    compile_path(&k, write_program("il_opt", 8, 4, SCHED_LAYOUT_LOOP, 8, "{op: schedule, name: interleaved-1f1b, chunks: 4}"), NULL, NULL, false);
    TEST_ASSERT_CONTAINS(k.e.msg, "chunks = 4, but the 8 stages on 4 ranks make 2 chunks per rank");
    sched_compilation_free(&k.c);
    compile_path(&k, write_program("opt", 4, 4, SCHED_LAYOUT_ONE, 8, "{op: schedule, name: 1f1b, warmup: 3}"), NULL, NULL, false);
    TEST_ASSERT_CONTAINS(k.e.msg, "unknown option 'warmup'; 1f1b takes no options");
    sched_compilation_free(&k.c);
    /* dualpipe: one stage per rank annotated (it makes the mirrors), p even, m >= 2p, untied */
    compile_path(&k, write_program("dp", 8, 4, SCHED_LAYOUT_MIRROR, 8, "{op: schedule, name: dualpipe}"), UNTIED, NULL, false);
    CU_ASSERT_NOT_EQUAL(k.rc, 0);
    TEST_ASSERT_CONTAINS(k.e.msg, "directive 9 (schedule): dualpipe takes one stage per rank and makes the mirrored stages itself, but stages 3 and 4 run on the same devices");
    sched_compilation_free(&k.c);
    compile_path(&k, write_program("dp_m", 4, 4, SCHED_LAYOUT_ONE, 6, "{op: schedule, name: dualpipe}"), UNTIED, NULL, false);
    TEST_ASSERT_CONTAINS(k.e.msg, ":11:5: directive 5 (schedule): dualpipe needs m >= 2p = 8 micro-batches");
    sched_compilation_free(&k.c);
    compile_path(&k, write_program("dp_tied", 4, 4, SCHED_LAYOUT_ONE, 8, "{op: schedule, name: dualpipe}"), NULL, NULL, false);
    TEST_ASSERT_CONTAINS(k.e.msg, "dualpipe with tied embeddings is not supported yet");
    sched_compilation_free(&k.c);
    /* EP, plain DP and ZeRO-1 come along with the mirror (test_schedules_sim, tests/exec_mpi);
     * ZeRO-2/3 not */
    compile_path(&k, write_program("dp_zero", 4, 4, SCHED_LAYOUT_ONE, 8, "{op: replicate, filter: {PP: 0}, devices: [0], zero: 2}\n  - {op: schedule, name: dualpipe}"), UNTIED, NULL, false);
    CU_ASSERT_NOT_EQUAL(k.rc, 0);
    TEST_ASSERT_CONTAINS(k.e.msg, "'F embed mb0' belongs to tensor parallelism or ZeRO-2/3");
    sched_compilation_free(&k.c);
    compile_path(&k, write_program("dp_order", 4, 4, SCHED_LAYOUT_ONE, 8, "{op: order, filters: [[{PP: 0, PASS: F, MB: 0}], [{PP: 0, PASS: F, MB: 1}]]}\n  - {op: schedule, name: dualpipe}"), UNTIED, NULL, false);
    TEST_ASSERT_CONTAINS(k.e.msg, "dualpipe must be the first order or schedule directive");
    sched_compilation_free(&k.c);
    compile_path(&k, write_program("dp_order2", 4, 4, SCHED_LAYOUT_ONE, 8, "{op: order, filters: [[{PP: 0, PASS: F, MB: 0}], [{PP: 0, PASS: F, MB: 1}]]}\n  - {op: order, mirror: true, filters: [[{PP: 1, PASS: F, MB: 0}], [{PP: 1, PASS: F, MB: 1}]]}"), UNTIED, NULL, false);
    TEST_ASSERT_CONTAINS(k.e.msg, "mirror: true must be on the first order or schedule directive");
    sched_compilation_free(&k.c);
    /* two stages on one device for a one-stage-per-rank schedule */
    compile_path(&k, write_program("shared", 4, 2, SCHED_LAYOUT_LOOP, 8, "{op: schedule, name: 1f1b}"), NULL, NULL, false);
    TEST_ASSERT_CONTAINS(k.e.msg, "stages 0 and 2 both run on devices [0], but 1f1b puts them on different ranks (0 and 2)");
    sched_compilation_free(&k.c);
    /* names: looked up in the builder table, the lists in messages generated from it */
    compile_path(&k, write_program("name_typo", 4, 4, SCHED_LAYOUT_ONE, 8, "{op: schedule, name: zb-h3}"), NULL, NULL, false);
    TEST_ASSERT_CONTAINS(k.e.msg, ":11:26: directive 5 (schedule): unknown schedule 'zb-h3'; did you mean 'zb-h1'? (known: gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-h2, zbv, dualpipe, dualpipev, or file: <order file>)");
    sched_compilation_free(&k.c);
    compile_path(&k, write_program("name_unknown", 4, 4, SCHED_LAYOUT_ONE, 8, "{op: schedule, name: chimera}"), NULL, NULL, false);
    TEST_ASSERT_CONTAINS(k.e.msg, ":11:26: directive 5 (schedule): unknown schedule 'chimera'; use one of gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-h2, zbv, dualpipe, dualpipev, or file: <order file>");
    sched_compilation_free(&k.c);
    compile_path(&k, write_program("name_none", 4, 4, SCHED_LAYOUT_ONE, 8, "{op: schedule}"), NULL, NULL, false);
    TEST_ASSERT_CONTAINS(k.e.msg, ":11:5: directive 5 (schedule) has neither 'name' nor 'file'; add name: 1f1b (or gpipe, interleaved-1f1b, zb-h1, zb-h2, zbv, dualpipe, dualpipev) or file: <per-rank order file>");
    sched_compilation_free(&k.c);
    /* names are case-insensitive; the pass runs the canonical builder */
    compile_path(&k, write_program("name_case", 4, 4, SCHED_LAYOUT_ONE, 8, "{op: schedule, name: ZB-H2}"), NULL, NULL, true);
    CU_ASSERT_EQUAL(k.rc, 0);
    if (!k.rc) CU_ASSERT(k.c.p2p_per_channel); /* its sends ahead run faster on channels */
    sched_compilation_free(&k.c);
    /* a builder's option list in its message comes from its row */
    compile_path(&k, write_program("il_bad_opt", 8, 4, SCHED_LAYOUT_LOOP, 8, "{op: schedule, name: interleaved-1f1b, groups: 4}"), NULL, NULL, false);
    TEST_ASSERT_CONTAINS(k.e.msg, "directive 9 (schedule): unknown option 'groups' for interleaved-1f1b; it takes group_size (micro-batches per group, default p) and chunks (v, checked against the placement)");
    sched_compilation_free(&k.c);
    /* a schedule file whose m does not match the program */
    char csv[512];
    snprintf(csv, sizeof csv, "%s/sched_schedules_m2.csv", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    FILE *f = fopen(csv, "w");
    fputs("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n", f);
    fclose(f);
    char line[640];
    snprintf(line, sizeof line, "{op: schedule, file: %s}", csv);
    compile_path(&k, write_program("file_m", 2, 2, SCHED_LAYOUT_ONE, 4, line), NULL, NULL, false);
    TEST_ASSERT_CONTAINS(k.e.msg, "rank 0: stage 0 has 2 forwards but there are 4 micro-batches");
    sched_compilation_free(&k.c);
    /* rows on the wrong devices: the file's row 0 names the stage on device 1 */
    f = fopen(csv, "w");
    fputs("0F0,0F1,0B0,0B1,1F0,1F1,1B0,1B1\n", f);
    fclose(f);
    compile_path(&k, write_program("file_rows", 2, 2, SCHED_LAYOUT_ONE, 2, line), NULL, NULL, false);
    TEST_ASSERT_CONTAINS(k.e.msg, "rank 0, column 5: stage 1 runs on devices [1] but stage 0 of the same row runs on [0]");
    sched_compilation_free(&k.c);
    /* no PP at all */
    compile_path(&k, test_src_path("configs/programs/dp2.yaml"), NULL, NULL, false);
    if (!k.rc) {
        sched_table t;
        base_error e;
        base_error_clear(&e);
        CU_ASSERT_NOT_EQUAL(sched_table_from_plan(&k.c, &t, &e), 0);
        TEST_ASSERT_CONTAINS(e.msg, "no pipeline stages (annotations.pp)");
    }
    sched_compilation_free(&k.c);
}

/* --emit-directives: the expansion reloads as a bare Piper array to the same plan (dualpipe: its
 * first order says mirror: true, and the array's stages are those the placements name). */
static void emit_round_trip(const char *sched_line, const char *model_path)
{
    const char *path = write_program("emit", 4, 4, SCHED_LAYOUT_ONE, 8, sched_line);
    compiled a;
    compile_path(&a, path, model_path, NULL, true);
    CU_ASSERT_EQUAL_FATAL(a.rc, 0);
    char json[512];
    snprintf(json, sizeof json, "%s.json", path);
    FILE *f = fopen(json, "w");
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sched_write_directives_json(&a.c, f, &e), 0);
    fclose(f);
    compiled b;
    char model[4096];
    snprintf(model, sizeof model, "%s", model_path ? model_path : test_src_path("tests/fixtures/schedules/gpt_tiny8.yaml"));
    compile_path(&b, json, model, test_src_path("configs/clusters/a100_4.yaml"), true);
    CU_ASSERT_EQUAL_FATAL(b.rc, 0);
    CU_ASSERT_TRUE(b.c.prog.from_piper_array);
    /* the same plan, byte for byte */
    char *pa = NULL, *pb = NULL;
    size_t la = 0, lb = 0;
    FILE *fa = open_memstream(&pa, &la), *fb = open_memstream(&pb, &lb);
    CU_ASSERT_EQUAL(plan_write(&a.c.plan, fa, &e), 0);
    CU_ASSERT_EQUAL(plan_write(&b.c.plan, fb, &e), 0);
    fclose(fa);
    fclose(fb);
    CU_ASSERT_EQUAL(la, lb);
    CU_ASSERT(la == lb && memcmp(pa, pb, la) == 0);
    free(pa);
    free(pb);
    /* one order per rank replaced the schedule */
    int orders = 0;
    for (int i = 0; i < b.c.prog.ndirectives; i++) orders += b.c.prog.directives[i].op == IR_DIR_ORDER;
    CU_ASSERT_EQUAL(orders, 4);
    sched_compilation_free(&a.c);
    sched_compilation_free(&b.c);
}

static void test_emit_directives_round_trip(void)
{
    emit_round_trip("{op: schedule, name: zb-h1}", NULL);
    emit_round_trip("{op: schedule, name: dualpipe}", UNTIED);
}

int piper_tests_register(void)
{
    static const test_case builders[] = {
        {"1f1b equals the hand-written pp4_1f1b orders", test_1f1b_matches_hand_written},
        {"gpipe", test_gpipe},
        {"interleaved p=2 v=2 m=4 by hand", test_interleaved_p2_v2_m4},
        {"zb-h1 and zb-h2 p=4 by hand", test_zbh1_p4},
        {"zb-h1 and zb-h2 defer r·c W's at any m", test_zbh_few_microbatches},
        {"zbv p=2 m=4 by hand", test_zbv_p2_m4},
        {"dualpipev p=4 m=8 structure", test_dualpipev_structure},
        {"the builder table", test_builder_table},
        {"every builder validates and round-trips through CSV", test_every_builder_validates},
        {"idle and peaks under unit costs (formulas.md)", test_unit_cost_idle_and_peaks},
        {"dualpipe idle p-2 and peak p+1 under unit costs", test_dualpipe_unit_costs},
        {"preconditions", test_preconditions},
        {NULL, NULL},
    };
    static const test_case oracle[] = {
        {"1f1b equals PyTorch's runtime order", test_torch_1f1b},
        {"interleaved-1f1b equals PyTorch", test_torch_interleaved},
        {"zbv equals PyTorch", test_torch_zbv},
        {"dualpipev equals PyTorch", test_torch_dualpipev},
        {NULL, NULL},
    };
    static const test_case csv[] = {
        {"syntax and PyTorch's conventions", test_csv_syntax},
        {"every validation error", test_csv_validation_errors},
        {NULL, NULL},
    };
    static const test_case compile[] = {
        {"one stage per rank: plan order = builder order, deadlock-free", test_compile_one_stage_per_rank},
        {"two chunks per rank: plan order = builder order", test_compile_two_chunks_per_rank},
        {"activation peaks from the static check", test_compile_activation_peaks},
        {"dualpipe: mirrored stages, paired updates, builder's order", test_compile_dualpipe},
        {"errors at the schedule directive", test_compile_errors},
        {"--emit-directives reloads to the same plan", test_emit_directives_round_trip},
        {NULL, NULL},
    };
    if (test_add_suite("schedule builders", builders)) return -1;
    if (test_add_suite("PyTorch oracle fixtures", oracle)) return -1;
    if (test_add_suite("order files (CSV)", csv)) return -1;
    return test_add_suite("schedules through the compiler", compile);
}
