/* schedule_info.c — the schedule builders as sched/sched.h shows them to tools that write
 * programs (piper-search): names, how a program lays stages on ranks, and the builders'
 * preconditions, answered by the builders themselves so that no tool keeps a second copy of them. */
#include "schedule.h"

#include <stdio.h>
#include <stdlib.h>

/* Program stages per rank for each layout: DualPipe's program has one stage per rank (the
 * schedule makes the mirrored copies), interleaved takes any v >= 2 (0 here). */
static const int layout_chunks[SCHED_NLAYOUTS] = {
    [SCHED_LAYOUT_ONE] = 1, [SCHED_LAYOUT_LOOP] = 0, [SCHED_LAYOUT_V] = 2, [SCHED_LAYOUT_MIRROR] = 1};

int sched_schedule_count(void) { return SCHED_NKINDS; }

const char *sched_schedule_name(int i) { return sched_kind_name((sched_kind)i); }

int sched_schedule_chunks(int i)
{
    const sched_builder *b = sched_kind_info((sched_kind)i);
    return b ? layout_chunks[b->layout] : -1;
}

int sched_schedule_rank(int i, int p, int s)
{
    const sched_builder *b = sched_kind_info((sched_kind)i);
    if (!b) return -1;
    /* the program's stages of DualPipe are 0..p-1, one per rank; its copies are the schedule's */
    if (b->layout == SCHED_LAYOUT_MIRROR) return s;
    return sched_layout_rank(b->layout, p, s);
}

int sched_schedule_check(int i, int p, int m, int v, char *why, size_t n)
{
    sched_params sp = {.p = p, .m = m, .v = v, .group_size = 0};
    sched_table t = {0};
    int rc = sched_build((sched_kind)i, &sp, &t, why, n);
    sched_table_free(&t);
    return rc;
}

int sched_schedule_supports(int i, int tp, int zero, bool tied_embeddings, char *why, size_t n)
{
    const sched_builder *b = sched_kind_info((sched_kind)i);
    if (!b || !(b->flags & SCHED_NEEDS_MIRROR)) return 0;
    if (tp > 1 || zero > 1) {
        snprintf(why, n, "%s mirrors pipeline, expert and ZeRO-0/1 data parallelism only, not %s; use zero 0 or 1 "
                 "without tensor parallelism, or dualpipev", sched_schedule_name(i), tp > 1 ? "tensor parallelism" : "ZeRO-2/3");
        return -1;
    }
    if (tied_embeddings) {
        snprintf(why, n, "%s does not mirror tied embeddings (four copies of the shared weight); use dualpipev",
                 sched_schedule_name(i));
        return -1;
    }
    return 0;
}

int sched_schedule_splits(int i, int p, int m, int v)
{
    sched_params sp = {.p = p, .m = m, .v = v, .group_size = 0};
    sched_table t = {0};
    char why[256];
    if (sched_build((sched_kind)i, &sp, &t, why, sizeof why)) {
        sched_table_free(&t);
        return -1;
    }
    int split = 0;
    for (int r = 0; r < t.nranks && !split; r++)
        for (int c = 0; c < t.rows[r].n && !split; c++)
            for (int k = 0; k < t.rows[r].cells[c].n; k++)
                if (t.rows[r].cells[c].a[k].pass == PLAN_PASS_BI || t.rows[r].cells[c].a[k].pass == PLAN_PASS_BW) split = 1;
    sched_table_free(&t);
    return split;
}

bool sched_schedule_mirrored(int i)
{
    const sched_builder *b = sched_kind_info((sched_kind)i);
    return b && b->layout == SCHED_LAYOUT_MIRROR;
}

int sched_schedule_makespan(int i, int p, int m, int v, const double *stage_seconds, double *out, char *why,
                            size_t n)
{
    *out = 0;
    if (sched_schedule_mirrored(i)) {
        snprintf(why, n, "%s mirrors its stages; no makespan model", sched_schedule_name(i));
        return -1;
    }
    sched_params sp = {.p = p, .m = m, .v = v, .group_size = 0};
    sched_table t = {0};
    if (sched_build((sched_kind)i, &sp, &t, why, n)) {
        sched_table_free(&t);
        return -1;
    }
    int stages = sched_schedule_chunks(i) ? sched_schedule_chunks(i) * p : v * p;
    /* done[(s * m + mb) * NPASS + pass]: finish time, < 0 while not run */
    size_t nslot = (size_t)stages * (size_t)m * PLAN_NPASS;
    double *done = base_xmalloc((nslot ? nslot : 1) * sizeof *done);
    for (size_t k = 0; k < nslot; k++) done[k] = -1;
    int *next = base_xcalloc((size_t)(t.nranks ? t.nranks : 1), sizeof *next);
    double *clock = base_xcalloc((size_t)(t.nranks ? t.nranks : 1), sizeof *clock);
#define SLOT(s, mb, pass) (((size_t)(s) * (size_t)m + (size_t)(mb)) * PLAN_NPASS + (size_t)(pass))
    int rc = 0;
    for (bool moved = true; moved;) {
        moved = false;
        for (int r = 0; r < t.nranks; r++)
            while (next[r] < t.rows[r].n) {
                const sched_cell *cell = &t.rows[r].cells[next[r]];
                double start = clock[r], dur = 0;
                bool ready = true;
                for (int k = 0; k < cell->n && ready; k++) {
                    const sched_action *a = &cell->a[k];
                    if (a->stage < 0 || a->stage >= stages || a->mb < 0 || a->mb >= m) continue;
                    double dep[2] = {0, 0};
                    int ndep = 0;
                    if (a->pass == PLAN_PASS_F) {
                        if (a->stage > 0) dep[ndep++] = done[SLOT(a->stage - 1, a->mb, PLAN_PASS_F)];
                    } else if (a->pass == PLAN_PASS_B || a->pass == PLAN_PASS_BI) {
                        dep[ndep++] = done[SLOT(a->stage, a->mb, PLAN_PASS_F)];
                        if (a->stage + 1 < stages) {
                            double b = done[SLOT(a->stage + 1, a->mb, PLAN_PASS_B)];
                            double bi = done[SLOT(a->stage + 1, a->mb, PLAN_PASS_BI)];
                            dep[ndep++] = b > bi ? b : bi; /* whichever of the two the order ran */
                        }
                    } else if (a->pass == PLAN_PASS_BW) {
                        dep[ndep++] = done[SLOT(a->stage, a->mb, PLAN_PASS_BI)];
                    }
                    for (int d = 0; d < ndep; d++) {
                        if (dep[d] < 0) ready = false;
                        else if (dep[d] > start) start = dep[d];
                    }
                    dur += stage_seconds[(size_t)a->stage * PLAN_NPASS + a->pass];
                }
                if (!ready) break;
                clock[r] = start + dur;
                for (int k = 0; k < cell->n; k++) {
                    const sched_action *a = &cell->a[k];
                    if (a->stage >= 0 && a->stage < stages && a->mb >= 0 && a->mb < m)
                        done[SLOT(a->stage, a->mb, a->pass)] = clock[r];
                }
                next[r]++;
                moved = true;
            }
    }
#undef SLOT
    for (int r = 0; r < t.nranks; r++) {
        if (next[r] < t.rows[r].n) {
            snprintf(why, n, "the order of %s cannot run to the end with free communication (rank %d)",
                     sched_schedule_name(i), r);
            rc = -1;
        }
        if (clock[r] > *out) *out = clock[r];
    }
    free(done);
    free(next);
    free(clock);
    sched_table_free(&t);
    return rc;
}

int sched_schedule_live_peak(int i, int p, int m, int v, const double *stage_bytes, double *rank_peak, char *why,
                             size_t n)
{
    sched_params sp = {.p = p, .m = m, .v = v, .group_size = 0};
    sched_table t = {0};
    if (sched_build((sched_kind)i, &sp, &t, why, n)) {
        sched_table_free(&t);
        return -1;
    }
    bool mirror = sched_kind_layout((sched_kind)i) == SCHED_LAYOUT_MIRROR;
    int stages = mirror ? p : sched_schedule_chunks(i) ? sched_schedule_chunks(i) * p : v * p;
    for (int r = 0; r < t.nranks && r < p; r++) {
        double live = 0, peak = 0;
        const sched_row *row = &t.rows[r];
        for (int c = 0; c < row->n; c++)
            for (int k = 0; k < row->cells[c].n; k++) { /* an overlapped pair: in the order named */
                const sched_action *a = &row->cells[c].a[k];
                int s = mirror && a->stage >= p ? a->stage - p : a->stage;
                if (s < 0 || s >= stages) continue;
                if (a->pass == PLAN_PASS_F) live += stage_bytes[s];
                else if (a->pass == PLAN_PASS_B || a->pass == PLAN_PASS_BW) live -= stage_bytes[s];
                if (live > peak) peak = live;
            }
        rank_peak[r] = peak;
    }
    sched_table_free(&t);
    return 0;
}
