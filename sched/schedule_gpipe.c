/* schedule_gpipe.c — the `gpipe` builder (schedules.md, "GPipe"): every rank runs all m forwards
 * of its stage, then all m backwards in micro-batch order. One unsplit backward per micro-batch,
 * so rank 0 holds all m micro-batches of activations at its peak (formulas.md). */
#include "schedule.h"

int sched_build_gpipe(const sched_params *sp, sched_table *t, char *why, size_t n)
{
    if (sp->p < 1 || sp->m < 1) {
        snprintf(why, n, "gpipe needs at least one rank and one micro-batch (p = %d, m = %d); "
                         "annotate pp and split the batch", sp->p, sp->m);
        return -1;
    }
    sched_table_init(t, sp->p);
    for (int r = 0; r < sp->p; r++) {
        for (int i = 0; i < sp->m; i++) sched_table_push(t, r, r, PLAN_PASS_F, i);
        for (int i = 0; i < sp->m; i++) sched_table_push(t, r, r, PLAN_PASS_B, i);
    }
    return 0;
}
