/* schedule_interleaved.c — the `interleaved-1f1b` builder (Megatron-LM's interleaved schedule;
 * schedules.md): v chunks per rank, stage of chunk c on rank r is c·p + r. Micro-batches go in
 * groups of N: the forward steps run, group by group, every chunk over the group's micro-batches;
 * the backward steps walk the same table with chunk v-1-c. Rank r runs
 * min(2(p-r-1) + (v-1)N, m·v) warm-up forwards, then one forward and one backward alternately,
 * then the remaining backwards. The backward stays one unsplit B per chunk. */
#include "schedule.h"

#include <stdlib.h>

int sched_build_interleaved(const sched_params *sp, sched_table *t, char *why, size_t n)
{
    int p = sp->p, m = sp->m, v = sp->v, N = sp->group_size > 0 ? sp->group_size : p;
    if (p < 1 || m < 1 || v < 1) {
        snprintf(why, n, "interleaved-1f1b needs at least one rank, one micro-batch and one chunk "
                         "per rank (p = %d, m = %d, v = %d)", p, m, v);
        return -1;
    }
    if (N < p || N > m) {
        if (sp->group_size > 0)
            snprintf(why, n, "interleaved-1f1b needs p <= group_size <= m, but p = %d, group_size "
                             "= %d, m = %d; use a group_size between %d and %d", p, N, m, p, m);
        else
            snprintf(why, n, "interleaved-1f1b needs at least p = %d micro-batches (one group of "
                             "N = p), but m = %d; split into %d or more micro-batches", p, m, p);
        return -1;
    }
    if (m % N > 0 && m % N < p) {
        snprintf(why, n, "interleaved-1f1b with group size N = %d leaves a last group of m mod N "
                         "= %d micro-batches, fewer than p = %d (the pipeline would starve); use "
                         "m a multiple of %d, or a group_size that leaves 0 or at least p",
                 N, m % N, p, N);
        return -1;
    }
    /* Megatron's schedule table: for each group, for each chunk, the group's micro-batches; a
     * last group too small for a full next group takes the remaining micro-batches. */
    int total = m * v;
    int *tab_mb = base_xmalloc((size_t)total * sizeof *tab_mb);
    int *tab_c = base_xmalloc((size_t)total * sizeof *tab_c);
    int k = 0;
    for (int lo = 0; lo < m; lo += N) {
        int hi = lo + N >= m ? m : lo + N;
        for (int c = 0; c < v; c++)
            for (int mb = lo; mb < hi; mb++) {
                tab_mb[k] = mb;
                tab_c[k++] = c;
            }
        if (hi == m) break;
    }
    sched_table_init(t, p);
    for (int r = 0; r < p; r++) {
        int warmup = 2 * (p - r - 1) + (v - 1) * N;
        if (warmup > total) warmup = total;
        for (int i = 0; i < warmup; i++) sched_table_push(t, r, tab_c[i] * p + r, PLAN_PASS_F, tab_mb[i]);
        for (int i = 0; i < total - warmup; i++) {
            int f = warmup + i;
            sched_table_push(t, r, tab_c[f] * p + r, PLAN_PASS_F, tab_mb[f]);
            sched_table_push(t, r, (v - 1 - tab_c[i]) * p + r, PLAN_PASS_B, tab_mb[i]);
        }
        for (int i = total - warmup; i < total; i++)
            sched_table_push(t, r, (v - 1 - tab_c[i]) * p + r, PLAN_PASS_B, tab_mb[i]);
    }
    free(tab_mb);
    free(tab_c);
    return 0;
}
