/* schedule_dualpipe.c — the `dualpipe` and `dualpipev` builders (DeepSeek-V3's DualPipe and its
 * folded variant DualPipeV; schedules.md's eight steps). Each rank holds two stages: "phase 0"
 * is the one fed first on that rank, "phase 1" the other. The main steps pair the forward of one
 * phase with the full backward of the other in one overlapped cell, so that one's all-to-all
 * hides behind the other's compute; the tails split backwards into I and W (W's queued, oldest
 * first) to fill the bubbles.
 *
 * DualPipeV: p ranks, 2p stages along a V (rank r: stages r and 2p-1-r), m micro-batches.
 * DualPipe: two pipelines over the same p ranks, m/2 micro-batches each; forward-direction stage
 * i on rank i, reverse-direction stage p+i on rank p-1-i (so rank r holds stages r and 2p-1-r
 * here too); ranks in the second half are fed first from the reverse end. */
#include "schedule.h"

#include <stdlib.h>

typedef struct dp_rank {
    sched_table *t;
    int r;
    int st[2];            /* stage of phase 0 and phase 1 */
    int f[2], b[2];       /* next forward / backward micro-batch per phase */
    sched_action *wq;     /* deferred W's, oldest first */
    int wh, wt;
} dp_rank;

static void fwd(dp_rank *d, int ph)
{
    sched_table_push(d->t, d->r, d->st[ph], PLAN_PASS_F, d->f[ph]++);
}

static void bwd(dp_rank *d, int ph, bool zb)
{
    int mb = d->b[ph]++;
    if (!zb) {
        sched_table_push(d->t, d->r, d->st[ph], PLAN_PASS_B, mb);
        return;
    }
    sched_table_push(d->t, d->r, d->st[ph], PLAN_PASS_BI, mb);
    d->wq[d->wt++] = (sched_action){d->st[ph], mb, PLAN_PASS_BW};
}

static void weight(dp_rank *d)
{
    if (d->wh == d->wt) return; /* nothing deferred: the step has no W to run */
    sched_action w = d->wq[d->wh++];
    sched_table_push(d->t, d->r, w.stage, PLAN_PASS_BW, w.mb);
}

/* forward of phase fp overlapped with the full backward of phase bp */
static void pair(dp_rank *d, int fp, int bp)
{
    sched_action f = {d->st[fp], d->f[fp]++, PLAN_PASS_F};
    sched_action b = {d->st[bp], d->b[bp]++, PLAN_PASS_B};
    sched_table_push_pair(d->t, d->r, f, b);
}

int sched_build_dualpipe(bool v_shape, const sched_params *sp, sched_table *t, char *why, size_t n)
{
    int p = sp->p, m = sp->m;
    const char *name = v_shape ? "dualpipev" : "dualpipe";
    if (p < 1) {
        snprintf(why, n, "%s needs at least one rank (p = %d)", name, p);
        return -1;
    }
    if (!v_shape && p % 2) {
        snprintf(why, n, "dualpipe needs an even number of pipeline ranks (its two pipelines meet "
                         "in the middle), but p = %d; use %d or %d ranks, or dualpipev", p, p - 1 > 0 ? p - 1 : 2, p + 1);
        return -1;
    }
    if (!v_shape && m % 2) {
        snprintf(why, n, "dualpipe feeds half the micro-batches from each end, so m must be even, "
                         "but m = %d; split into %d or %d micro-batches", m, m - 1, m + 1);
        return -1;
    }
    if (m < 2 * p) {
        snprintf(why, n, "%s needs m >= 2p = %d micro-batches to fill its pipeline, but m = %d; "
                         "split into at least %d", name, 2 * p, m, 2 * p);
        return -1;
    }
    int H = v_shape ? p : p / 2;
    int mm = v_shape ? m : m / 2; /* micro-batches through each of the rank's two stages */
    sched_table_init(t, p);
    sched_action *wq = base_xmalloc((size_t)(2 * mm + 1) * sizeof *wq);
    for (int r = 0; r < p; r++) {
        int h = v_shape ? r : (r < p - 1 - r ? r : p - 1 - r);
        bool second_half = !v_shape && r >= p / 2;
        dp_rank d = {t, r, {r, 2 * p - 1 - r}, {0, 0}, {0, 0}, wq, 0, 0};
        if (second_half) {
            d.st[0] = 2 * p - 1 - r;
            d.st[1] = r;
        }
        /* the rank where the two directions meet runs its first main pair unoverlapped */
        bool plain_first = v_shape ? r == p - 1 : h == H - 1;
        for (int i = 0; i < 2 * (H - h - 1); i++) fwd(&d, 0);                      /* 1 */
        for (int i = 0; i < h + 1; i++) {                                          /* 2 */
            fwd(&d, 0);
            fwd(&d, 1);
        }
        for (int i = 0; i < H - h - 1; i++) {                                      /* 3 */
            bwd(&d, 1, true);
            weight(&d);
            fwd(&d, 1);
        }
        int main_steps = v_shape ? m - 2 * p + r + 1 : mm - p + h + 1;             /* 4 */
        for (int i = 0; i < main_steps; i++) {
            if (i == 0 && plain_first) {
                fwd(&d, 0);
                bwd(&d, 1, false);
            } else {
                pair(&d, 0, 1);
            }
            pair(&d, 1, 0);
        }
        for (int i = 0; i < H - h - 1; i++) {                                      /* 5 */
            bwd(&d, 1, false);
            pair(&d, 1, 0);
        }
        bool zb = false;                                                            /* 6 */
        for (int i = 0; i < h + 1; i++) {
            if (i == (h + 1) / 2 && h % 2 == 1) zb = true;
            bwd(&d, 1, zb);
            if (i == (h + 1) / 2 && h % 2 == 0) zb = true;
            bwd(&d, 0, zb);
        }
        for (int i = 0; i < H - h - 1; i++) {                                      /* 7 */
            weight(&d);
            bwd(&d, 0, true);
        }
        for (int i = 0; i < h + 1; i++) weight(&d);                                /* 8 */
        while (d.wh < d.wt) weight(&d); /* none left when the steps balance; kept for safety */
    }
    free(wq);
    return 0;
}

int sched_build_dualpipe_bidir(const sched_params *sp, sched_table *t, char *why, size_t n)
{
    return sched_build_dualpipe(false, sp, t, why, n);
}

int sched_build_dualpipev(const sched_params *sp, sched_table *t, char *why, size_t n)
{
    return sched_build_dualpipe(true, sp, t, why, n);
}
