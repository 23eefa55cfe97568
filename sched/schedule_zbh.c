/* schedule_zbh.c — the `zb-h1` and `zb-h2` builders (Zero Bubble, arXiv 2401.10241;
 * schedules.md): the backward is split into I (input gradient, which the previous stage waits
 * for) and W (weight gradient, which nobody waits for), and W's are deferred into what would be
 * bubbles. With c = 1 (H1) or 2 (H2), rank r runs min((p-r-1)c, m) warm-up forwards, then for
 * each micro-batch i: the next forward (while any remain), I of i, and the oldest deferred W once
 * i >= rc; the W's still deferred run at the end, oldest first. The W test uses the uncapped
 * warm-up (p-r-1)c, as the paper's generator and PyTorch's ZB1P do: rank r defers min(rc, m)
 * W's whatever m is. With the capped count it would defer p-1-m when m < p-1-r, which at
 * p = 8, m = 4 stretches the unit-cost makespan from 23 to 26. */
#include "schedule.h"

#include <stdlib.h>

int sched_build_zbh(int c, const sched_params *sp, sched_table *t, char *why, size_t n)
{
    int p = sp->p, m = sp->m;
    if (p < 1 || m < 1) {
        snprintf(why, n, "zb-h%d needs at least one rank and one micro-batch (p = %d, m = %d); "
                         "annotate pp and split the batch", c, p, m);
        return -1;
    }
    int *queue = base_xmalloc((size_t)m * sizeof *queue);
    sched_table_init(t, p);
    for (int r = 0; r < p; r++) {
        int warmup = (p - r - 1) * c < m ? (p - r - 1) * c : m;
        int head = 0, tail = 0;
        for (int i = 0; i < warmup; i++) sched_table_push(t, r, r, PLAN_PASS_F, i);
        for (int i = 0; i < m; i++) {
            if (warmup + i < m) sched_table_push(t, r, r, PLAN_PASS_F, warmup + i);
            sched_table_push(t, r, r, PLAN_PASS_BI, i);
            queue[tail++] = i;
            if (i >= r * c) sched_table_push(t, r, r, PLAN_PASS_BW, queue[head++]);
        }
        while (head < tail) sched_table_push(t, r, r, PLAN_PASS_BW, queue[head++]);
    }
    free(queue);
    return 0;
}

int sched_build_zbh1(const sched_params *sp, sched_table *t, char *why, size_t n)
{
    return sched_build_zbh(1, sp, t, why, n);
}

int sched_build_zbh2(const sched_params *sp, sched_table *t, char *why, size_t n)
{
    return sched_build_zbh(2, sp, t, why, n);
}
