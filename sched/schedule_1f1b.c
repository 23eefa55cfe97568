/* schedule_1f1b.c — the `1f1b` builder (PipeDream-flush; schedules.md, "1F1B"): rank r runs
 * min(p-r-1, m) warm-up forwards, then one forward and one backward alternately until every
 * forward is issued, then the remaining backwards. The backward stays one unsplit B, so the
 * activation gradient leaves only when the whole backward is done (formulas.md's 1F1B row). */
#include "schedule.h"

int sched_build_1f1b(const sched_params *sp, sched_table *t, char *why, size_t n)
{
    int p = sp->p, m = sp->m;
    if (p < 1 || m < 1) {
        snprintf(why, n, "1f1b needs at least one rank and one micro-batch (p = %d, m = %d); "
                         "annotate pp and split the batch", p, m);
        return -1;
    }
    sched_table_init(t, p);
    for (int r = 0; r < p; r++) {
        int warmup = p - r - 1 < m ? p - r - 1 : m;
        for (int i = 0; i < warmup; i++) sched_table_push(t, r, r, PLAN_PASS_F, i);
        for (int i = 0; i < m - warmup; i++) {
            sched_table_push(t, r, r, PLAN_PASS_F, warmup + i);
            sched_table_push(t, r, r, PLAN_PASS_B, i);
        }
        for (int i = m - warmup; i < m; i++) sched_table_push(t, r, r, PLAN_PASS_B, i);
    }
    return 0;
}
