/* schedule_zbv.c — the `zbv` builder (Zero Bubble's ZB-V, arXiv 2401.10241 section 6, as
 * PyTorch's ScheduleZBVZeroBubble runs it; schedules.md): two chunks per rank in a V, rank r
 * holding stages r (chunk 0) and 2p-1-r (chunk 1), backward split into I and W. The schedule is
 * generated for n = max(2p-1, m) micro-batches and every action of a micro-batch >= m dropped,
 * so a small m keeps the shape of the full pipeline. */
#include "schedule.h"

typedef struct zbv_rank {
    sched_table *t;
    int r, s0, s1, m;
} zbv_rank;

static void act(const zbv_rank *z, int stage, plan_pass pass, int mb)
{
    if (mb < z->m) sched_table_push(z->t, z->r, stage, pass, mb);
}

int sched_build_zbv(const sched_params *sp, sched_table *t, char *why, size_t n)
{
    int p = sp->p, m = sp->m;
    if (p < 1 || m < 1) {
        snprintf(why, n, "zbv needs at least one rank and one micro-batch (p = %d, m = %d); "
                         "annotate pp with 2p stages and split the batch", p, m);
        return -1;
    }
    int nm = 2 * p - 1 > m ? 2 * p - 1 : m;
    sched_table_init(t, p);
    for (int r = 0; r < p; r++) {
        zbv_rank z = {t, r, r, 2 * p - 1 - r, m};
        int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
        for (int i = 0; i < 2 * (p - r) - 1; i++) act(&z, z.s0, PLAN_PASS_F, f0++);
        for (int i = 0; i < r; i++) {
            act(&z, z.s1, PLAN_PASS_F, f1++);
            act(&z, z.s0, PLAN_PASS_F, f0++);
        }
        for (int i = 0; i < p - r; i++) {
            act(&z, z.s1, PLAN_PASS_F, f1++);
            act(&z, z.s1, PLAN_PASS_BI, b1);
            act(&z, z.s1, PLAN_PASS_BW, b1++);
        }
        /* steady state: until chunk 1 has caught up with chunk 0 */
        while (f1 < f0 || f0 < nm) {
            if (f0 < nm) act(&z, z.s0, PLAN_PASS_F, f0++);
            act(&z, z.s0, PLAN_PASS_BI, b0);
            act(&z, z.s0, PLAN_PASS_BW, b0++);
            act(&z, z.s1, PLAN_PASS_F, f1++);
            act(&z, z.s1, PLAN_PASS_BI, b1);
            act(&z, z.s1, PLAN_PASS_BW, b1++);
        }
        int w0 = b0, w1 = b1;
        for (int i = 0; i < r; i++) {
            act(&z, z.s0, PLAN_PASS_BI, b0++);
            act(&z, z.s1, PLAN_PASS_BI, b1++);
        }
        for (int i = 0; i < p - r; i++) {
            act(&z, z.s0, PLAN_PASS_BI, b0++);
            act(&z, z.s0, PLAN_PASS_BW, w0++);
        }
        while (w1 < b1) act(&z, z.s1, PLAN_PASS_BW, w1++);
        while (w0 < b0) act(&z, z.s0, PLAN_PASS_BW, w0++);
    }
    return 0;
}
