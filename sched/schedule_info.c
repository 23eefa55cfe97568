/* schedule_info.c — the schedule builders as sched/sched.h shows them to tools that write
 * programs (piper-search): names, how a program lays stages on ranks, and the builders'
 * preconditions, answered by the builders themselves so that no tool keeps a second copy of them. */
#include "schedule.h"

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

int sched_schedule_supports(int i, int tp, int zero, char *why, size_t n)
{
    const sched_builder *b = sched_kind_info((sched_kind)i);
    if (!b || !(b->flags & SCHED_NEEDS_MIRROR)) return 0;
    if (tp <= 1 && zero <= 1) return 0;
    snprintf(why, n, "%s mirrors pipeline, expert and ZeRO-0/1 data parallelism only, not %s; use zero 0 or 1 "
             "without tensor parallelism, or dualpipev", sched_schedule_name(i), tp > 1 ? "tensor parallelism" : "ZeRO-2/3");
    return -1;
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
