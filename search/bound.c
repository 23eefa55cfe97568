/* bound.c — tier (a)'s memory lower bound: what the fullest pipeline rank must hold at least,
 * from the cost model's closed forms (ir/model.h), so that a candidate it discards cannot fit.
 *
 * Per rank, over the regions of its own stages (DualPipe's mirrored copies are left out: a lower
 * bound may ignore memory), with D the data-parallel degree:
 *   parameters  2 bytes each (bf16), / D under ZeRO-3
 *   optimizer   12 bytes each (fp32 master weight and two moments), / D under ZeRO >= 1
 *   then the larger of
 *   gradients   2 bytes each, / D under ZeRO >= 2 (held from a region's first backward to the
 *               optimizer step, when no activation need be live)
 *   activations the most the schedule's order keeps live on the rank: walking the builder's
 *               order for the rank, each forward of a stage adds one micro-batch of the stage's
 *               activations and its B or BW removes them (sched_schedule_live_peak); without a
 *               pipeline, one micro-batch of every region
 * Every share divides by D exactly, where the plan rounds pieces up; workspaces, communication
 * buffers, gathered ZeRO-3 parameters and a tied head's copy are left out. tests/search checks on
 * a sweep that the bound never exceeds the compiled static peak. */
#include "search.h"

#include <stdlib.h>
#include <string.h>

#include "../sched/sched.h"

double search_usable_bytes(const search_problem *pb)
{
    return pb->cluster.gpu.mem_bytes - pb->cluster.gpu.reserve_bytes;
}

/* What both bounds need of each region: its program stage, the pipeline rank that runs it, and
 * the shape it runs at, with the recompute the program's directive (search_program_text) asks. */
typedef struct region_plan {
    int n;
    ir_region *regs;
    int32_t *stage;
    int *rank;
    ir_shape *shape;
} region_plan;

static void plan_regions(const search_problem *pb, const search_candidate *c, base_arena *a, region_plan *rp)
{
    const ir_model *m = &pb->model;
    ir_program prog;
    memset(&prog, 0, sizeof prog);
    prog.model = *m;
    prog.ann.pp_stages = c->stages > 1 ? c->stages : 0;
    rp->n = ir_model_nregions(m);
    size_t n = (size_t)(rp->n ? rp->n : 1);
    rp->stage = base_arena_calloc(a, n, sizeof *rp->stage);
    rp->regs = base_arena_calloc(a, n, sizeof *rp->regs);
    rp->rank = base_arena_calloc(a, n, sizeof *rp->rank);
    rp->shape = base_arena_calloc(a, n, sizeof *rp->shape);
    ir_program_stage_of_region(&prog, a, rp->stage);
    ir_model_regions(m, a, rp->regs);
    ir_shape s = ir_shape_default();
    s.micro_batch = c->mbs;
    s.tp = c->tp;
    s.sequence_parallel = c->sp;
    s.ep = c->ep;
    for (int i = 0; i < rp->n; i++) {
        int rank = c->schedule >= 0 ? sched_schedule_rank(c->schedule, c->pp, rp->stage[i]) : 0;
        rp->rank[i] = rank < 0 || rank >= c->pp ? 0 : rank;
        ir_shape rs = s;
        const ir_region *r = &rp->regs[i];
        if (c->recompute == IR_RECOMPUTE_FULL && r->layer >= 0) {
            rs.recompute = IR_RECOMPUTE_FULL;
            rs.recompute_from_prev = i > 0 && rp->regs[i - 1].layer == r->layer;
        } else if (c->recompute == IR_RECOMPUTE_SELECTIVE && r->kind == IR_REGION_ATTN) {
            rs.recompute = IR_RECOMPUTE_SELECTIVE;
        }
        rp->shape[i] = rs;
    }
}

double search_memory_bound(const search_problem *pb, const search_candidate *c)
{
    const ir_model *m = &pb->model;
    base_arena a;
    base_arena_init(&a);
    region_plan rp;
    plan_regions(pb, c, &a, &rp);
    double *params = base_arena_calloc(&a, (size_t)c->pp, sizeof *params);
    double *act = base_arena_calloc(&a, (size_t)c->pp, sizeof *act);
    double *stage_act = base_arena_calloc(&a, (size_t)c->stages, sizeof *stage_act);
    const int32_t *stage = rp.stage;
    const ir_region *regs = rp.regs;
    for (int i = 0; i < rp.n; i++) {
        int rank = rp.rank[i];
        const ir_shape rs = rp.shape[i];
        params[rank] += (double)ir_region_params_per_device(m, &regs[i], &rs);
        double bytes = ir_region_activation_bytes(m, &regs[i], &rs);
        act[rank] += bytes;
        if (stage[i] >= 0 && stage[i] < c->stages) stage_act[stage[i]] += bytes;
    }
    /* with a pipeline, the order's live peak replaces one micro-batch per rank (a builder that
     * refuses, which tier (a) has ruled out before, leaves act as it is) */
    char why[256];
    if (c->schedule >= 0 && c->m <= 1 << 20)
        (void)sched_schedule_live_peak(c->schedule, c->pp, (int)c->m, c->v, stage_act, act, why, sizeof why);
    double d = c->dp > 0 ? c->dp : 1, worst = 0;
    for (int r = 0; r < c->pp; r++) {
        double p = params[r];
        double keep = p * 2 / (c->zero >= 3 ? d : 1) + p * 12 / (c->zero >= 1 ? d : 1);
        double grads = p * 2 / (c->zero >= 2 ? d : 1);
        double need = keep + (grads > act[r] ? grads : act[r]);
        if (need > worst) worst = need;
    }
    base_arena_free(&a);
    return worst;
}

/* ---------------------------------------------------------------- the step-time lower bound */

double search_time_bound(const search_problem *pb, const search_candidate *c)
{
    /* DualPipe's mirror runs half the micro-batches through each stage's copy: its per-rank work
     * is not the program's stage r times m, so it gets no bound (it is never pruned) */
    if (c->schedule >= 0 && sched_schedule_mirrored(c->schedule)) return 0;
    const ir_model *m = &pb->model;
    base_arena a;
    base_arena_init(&a);
    region_plan rp;
    plan_regions(pb, c, &a, &rp);
    const int32_t *stage = rp.stage;
    double *busy = base_arena_calloc(&a, (size_t)c->pp, sizeof *busy);
    double *stage_s = c->schedule >= 0 && c->m <= 4096
                          ? base_arena_calloc(&a, (size_t)c->stages * PLAN_NPASS, sizeof *stage_s)
                          : NULL;
    /* a schedule that splits backwards runs BI and BW instead of B: count only its forwards */
    bool whole_b = c->schedule < 0 || (c->m <= 1 << 20 && sched_schedule_splits(c->schedule, c->pp, (int)c->m, c->v) == 0);
    for (int i = 0; i < rp.n; i++) {
        int rank = rp.rank[i];
        const ir_shape rs = rp.shape[i];
        static const plan_pass passes[5] = {PLAN_PASS_F, PLAN_PASS_B, PLAN_PASS_BI, PLAN_PASS_BW, PLAN_PASS_R};
        double t[PLAN_NPASS] = {0};
        for (int q = 0; q < 5; q++) {
            if (passes[q] == PLAN_PASS_R && rs.recompute == IR_RECOMPUTE_NONE) continue;
            plan_kernel_list kl = {0};
            if (ir_region_kernels(m, &rp.regs[i], passes[q], &rs, &a, &kl)) continue;
            for (int k = 0; k < kl.n; k++) t[passes[q]] += plan_kernel_seconds(&pb->cluster.gpu, &kl.k[k]);
        }
        /* what the rank runs for each micro-batch: the forward, the recompute, and the whole
         * backward or (split) only the forward, whose halves the bound leaves to the order */
        busy[rank] += (t[PLAN_PASS_F] + t[PLAN_PASS_R] + (whole_b ? t[PLAN_PASS_B] : 0)) * (double)c->m;
        if (stage_s && stage[i] >= 0 && stage[i] < c->stages) {
            double *st = &stage_s[(size_t)stage[i] * PLAN_NPASS];
            st[PLAN_PASS_F] += t[PLAN_PASS_F];
            st[PLAN_PASS_B] += t[PLAN_PASS_B] + t[PLAN_PASS_R];
            st[PLAN_PASS_BI] += t[PLAN_PASS_BI] + t[PLAN_PASS_R];
            st[PLAN_PASS_BW] += t[PLAN_PASS_BW];
        }
    }
    double worst = 0;
    for (int r = 0; r < c->pp; r++)
        if (busy[r] > worst) worst = busy[r];
    /* the pipeline's order with these compute times and free communication: the bubbles */
    double span = 0;
    char why[256];
    if (stage_s && !sched_schedule_makespan(c->schedule, c->pp, (int)c->m, c->v, stage_s, &span, why, sizeof why) &&
        span > worst)
        worst = span;
    base_arena_free(&a);
    return worst;
}
