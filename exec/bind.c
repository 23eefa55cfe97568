/* bind.c — the binding layer (bind.h): one reading of a device's plan for every backend. Regions
 * first (placement, shards, the backend's layouts), then the computes (buffer roles and sizes,
 * activation buffers, workspaces, boundary slots), then the collectives (what each moves, ZeRO
 * pieces, storage sizes), then the data-parallel rank. The plan's roles and purposes are read
 * (and checked against the instructions) in the exec_bind_* functions of the next section. */
#include <stdlib.h>
#include <string.h>

#include "bind.h"

int exec_bind_instr_error(const exec_bind *b, int i, base_error *e)
{
    return exec_instr_error(b->p, b->dev, i, e);
}

static const char *buf_name(const exec_bind *b, int bb) { return exec_buf_name(b->L, bb); }

static const char *group_name(const exec_bind *b, int g)
{
    return b->p->groups[g].name ? b->p->groups[g].name : "?";
}

void exec_seg_piece(const exec_region *R, const exec_seg *S, int k, int g, int64_t *lo,
                    int64_t *hi)
{
    exec_zero_piece(R->nstore, k, g, lo, hi);
    if (*lo < S->off) *lo = S->off;
    if (*hi > S->off + S->n) *hi = S->off + S->n;
    if (*hi < *lo) *hi = *lo;
}

int64_t exec_seg_chunk(const exec_region *R, const exec_seg *S, int g)
{
    int64_t m = 0;
    for (int k = 0; k < g; k++) {
        int64_t lo, hi;
        exec_seg_piece(R, S, k, g, &lo, &hi);
        if (hi - lo > m) m = hi - lo;
    }
    return m;
}

/* ---------------------------------------------------------------- roles
 *
 * What a buffer or a collective is for is the plan's: plan_buffer.role and .region,
 * plan_instr.purpose (docs/plan-format.md, "Roles, purposes and pieces"). These functions read
 * it and check it against the shape of the instructions where the binding relies on both, so
 * that a plan whose stated roles and instructions disagree is refused, naming the instruction,
 * rather than computed some other way. A role or purpose `none` (a plan built by hand) is refused
 * too where the binding needs it: the binding does not guess. */

static const char *region_name(const exec_bind *b, int r)
{
    return r >= 0 && r < b->nreg ? b->reg[r].name : "-";
}

static const char *role_name(const exec_bind *b, int bb)
{
    return plan_role_name((plan_role)b->L->bufs[bb].role);
}

/* Fails naming instruction i: its stated purpose or roles disagree with its buffers. */
static int disagree(const exec_bind *b, int i, base_error *e)
{
    base_error_prefix(e, "the plan's purpose or roles disagree with its instructions: ");
    return exec_bind_instr_error(b, i, e);
}

/* Whether collective i is a ZeRO-3 gather (purpose zero3_gather): it reads the region's
 * param_piece (and, for the head under tied embeddings, a second buffer owned by the embedding:
 * the token table) into one gathered buffer, which then holds the whole parameters that the
 * region's passes read instead of the device's piece. 1 yes, 0 no, -1 when its shape
 * disagrees. */
static int exec_bind_is_zero3_gather(const exec_bind *b, int i, base_error *e)
{
    const plan_list *L = b->L;
    const plan_instr *in = &L->ins[i];
    if (in->op != PLAN_COLL || in->purpose != PLAN_PURPOSE_ZERO3_GATHER) return 0;
    if (in->nreads < 1 || in->nreads > 2 || in->nwrites != 1 || in->region < 0 ||
        in->region >= b->nreg || L->bufs[in->reads[0]].role != PLAN_ROLE_PARAM_PIECE ||
        L->bufs[in->writes[0]].role != PLAN_ROLE_GATHERED) {
        base_errorf(e, "a zero3_gather of %d buffers (the first of role %s) into %d (the first of "
                       "role %s); it gathers a region's param_piece into one gathered buffer",
                    in->nreads, in->nreads ? role_name(b, in->reads[0]) : "-", in->nwrites,
                    in->nwrites ? role_name(b, in->writes[0]) : "-");
        return disagree(b, i, e);
    }
    return 1;
}

/* What collective i is for, from its stated purpose, checked against what it reads: the
 * gradient-norm scalar (grad_norm: no buffers); an activation collective (tp_fwd, tp_bwd,
 * sp_regather, ep_dispatch, ep_combine: an activation or comm buffer); a gradient sum
 * (dp_grad_sum, tp_grad_sync, tied_sum, pair_sum) or a ZeRO reduce-scatter (zero_scatter) of
 * gradient buffers; a ZeRO all-gather (zero_update_gather, zero3_gather) of parameter buffers.
 * EXEC_COLL_NONE with an error otherwise. */
static exec_coll_kind exec_bind_coll_purpose(const exec_bind *b, int i, base_error *e)
{
    const plan_instr *in = &b->L->ins[i];
    const bool bufless = in->nreads == 0 && in->nwrites == 0 && in->buf < 0;
    const int ib = in->nreads > 0 ? in->reads[0] : in->buf;
    const int m = ib >= 0 ? b->L->bufs[ib].mem : -1;
    exec_coll_kind k = EXEC_COLL_NONE;
    bool ok = false;
    const char *wants = "";
    switch ((plan_purpose)in->purpose) {
    case PLAN_PURPOSE_GRAD_NORM:
        k = EXEC_COLL_SCALAR, ok = bufless, wants = "no buffers (a scalar)";
        break;
    case PLAN_PURPOSE_TP_FWD:
    case PLAN_PURPOSE_TP_BWD:
    case PLAN_PURPOSE_SP_REGATHER:
    case PLAN_PURPOSE_EP_DISPATCH:
    case PLAN_PURPOSE_EP_COMBINE:
        k = EXEC_COLL_ACT, ok = m == PLAN_MEM_COMM || m == PLAN_MEM_ACT;
        wants = "an activation or comm buffer";
        break;
    case PLAN_PURPOSE_DP_GRAD_SUM:
    case PLAN_PURPOSE_TP_GRAD_SYNC:
    case PLAN_PURPOSE_TIED_SUM:
    case PLAN_PURPOSE_PAIR_SUM:
        k = EXEC_COLL_GRAD_SUM, ok = m == PLAN_MEM_GRAD, wants = "gradient buffers";
        break;
    case PLAN_PURPOSE_ZERO_SCATTER:
        k = EXEC_COLL_GRAD_SCATTER, ok = m == PLAN_MEM_GRAD, wants = "gradient buffers";
        break;
    case PLAN_PURPOSE_ZERO_UPDATE_GATHER:
    case PLAN_PURPOSE_ZERO3_GATHER:
        k = EXEC_COLL_PARAM_GATHER, ok = m == PLAN_MEM_PARAM, wants = "parameter buffers";
        break;
    default:
        base_errorf(e, "the collective states no purpose (purpose=%s); the %s reads what a "
                       "collective is for from the plan: compile the program with piper-compile, "
                       "or state its purpose (docs/plan-format.md, Purposes)",
                    plan_purpose_name((plan_purpose)in->purpose), b->ops.who);
        exec_bind_instr_error(b, i, e);
        return EXEC_COLL_NONE;
    }
    if (!ok) {
        base_errorf(e, "a %s collective moves %s, but this one %s%s",
                    plan_purpose_name((plan_purpose)in->purpose), wants,
                    bufless ? "has none" : "reads ",
                    bufless ? "" : plan_mem_name((plan_mem)m));
        disagree(b, i, e);
        return EXEC_COLL_NONE;
    }
    return k;
}

/* What a buffer a compute touches is to it. */
typedef enum {
    BUF_PARAM,          /* the region's parameters */
    BUF_GATHERED,       /* ZeRO-3: the region's whole parameters, gathered */
    BUF_SAVED_GATHER,   /* sequence parallelism: the re-gathered norm shards of the backward */
    BUF_GRAD,
    BUF_OPT,
    BUF_ACT,            /* saved or recomputed activations */
    BUF_WORK,           /* the pass's workspace */
    BUF_BOUNDARY,       /* a tensor handed to or from another region */
    BUF_ROUTE           /* the MoE route between a gate and its combine */
} buf_use;

/* What buffer bb is to compute i, from its stated role; a gathered or regathered buffer must be
 * one a zero3_gather or an sp_regather of the device fills. -1 with an error otherwise. */
static int exec_bind_buf_role(const exec_bind *b, int i, int bb, buf_use *use, base_error *e)
{
    switch ((plan_role)b->L->bufs[bb].role) {
    case PLAN_ROLE_PARAMS:
    case PLAN_ROLE_PARAM_PIECE: *use = BUF_PARAM; return 0;
    case PLAN_ROLE_GRADS:
    case PLAN_ROLE_GRAD_PIECE:
    case PLAN_ROLE_MB_GRADS: *use = BUF_GRAD; return 0;
    case PLAN_ROLE_OPT:
    case PLAN_ROLE_OPT_PIECE: *use = BUF_OPT; return 0;
    case PLAN_ROLE_SAVED:
    case PLAN_ROLE_RECOMPUTED: *use = BUF_ACT; return 0;
    case PLAN_ROLE_WORKSPACE: *use = BUF_WORK; return 0;
    case PLAN_ROLE_BOUNDARY:
    case PLAN_ROLE_COMM: *use = BUF_BOUNDARY; return 0;
    case PLAN_ROLE_ROUTE: *use = BUF_ROUTE; return 0;
    case PLAN_ROLE_GATHERED:
        *use = BUF_GATHERED;
        if (b->buf[bb].role == EXEC_BUF_GATHERED) return 0;
        base_errorf(e, "buffer %s has role gathered, but no zero3_gather of this device fills it",
                    buf_name(b, bb));
        return disagree(b, i, e);
    case PLAN_ROLE_REGATHERED:
        *use = BUF_SAVED_GATHER;
        if (b->buf[bb].saved_gather) return 0;
        base_errorf(e, "buffer %s has role regathered, but no sp_regather of this device fills it",
                    buf_name(b, bb));
        return disagree(b, i, e);
    case PLAN_ROLE_PIECES:
        base_errorf(e, "a compute uses buffer %s, a reduce-scatter's received pieces (role "
                       "pieces), which only its zero_scatter uses",
                    buf_name(b, bb));
        return disagree(b, i, e);
    default:
        base_errorf(e, "buffer %s states no role (role=%s); the %s binds buffers by the roles the "
                       "plan states: compile the program with piper-compile, or state its role "
                       "(docs/plan-format.md, Roles)",
                    buf_name(b, bb), role_name(b, bb), b->ops.who);
        return exec_bind_instr_error(b, i, e);
    }
}

/* The region whose gradient buffer bb, which compute i (cb, of region R) reads (side 0) or writes
 * (side 1), is: its owner. A tied head's backward writes two gradients, its own first, then the
 * embedding's token table (owner embed, *table); any other owner than the compute's region
 * disagrees with the plan's instructions. -1 with an error. */
static int exec_bind_grad_owner(const exec_bind *b, int i, const exec_region *R,
                                const exec_compute *cb, bool bwd, int side, int bb, bool *table,
                                base_error *e)
{
    const int owner = b->L->bufs[bb].region;
    *table = owner >= 0 && owner != cb->region && owner == b->embed_region;
    const bool second = cb->gb >= 0 && bwd && side == 1 && R->kind == EXEC_HEAD && b->cfg->tied &&
                        b->embed_region >= 0;
    if (owner == cb->region && !second) return owner;
    if (*table && second) return owner;
    base_errorf(e, "gradient buffer %s is owned by region %s, but %s of region %s; only a tied "
                   "head's backward writes a second gradient, the embedding's",
                buf_name(b, bb), region_name(b, owner),
                second ? "it is the second gradient a tied head's backward writes"
                       : "the compute is",
                R->name);
    return disagree(b, i, e);
}

/* The segments of region r that gradient all-reduce i (C) sums, by its purpose: tp_grad_sync
 * over the region's own TP group the tensors every TP rank holds whole; tied_sum over a group
 * some member of which does not run the region (the tied-embedding pair) the token table;
 * dp_grad_sum and pair_sum over replicas that all run it the whole block, which only the group's
 * first member counts in the gradient norm. -1 with an error for a group the purpose cannot be
 * over. */
static int exec_bind_sum_segments(exec_bind *b, int i, exec_coll *C, int r, base_error *e)
{
    exec_region *R = &b->reg[r];
    const plan_purpose pu = (plan_purpose)b->L->ins[i].purpose;
    const bool holds = exec_group_holds(b->p, b->holds, C->group, r);
    if (pu == PLAN_PURPOSE_TP_GRAD_SYNC) {
        if (C->group != R->tp_group) {
            base_errorf(e, "a tp_grad_sync of region %s over group %s, which is not its TP group",
                        R->name, group_name(b, C->group));
            return disagree(b, i, e);
        }
        for (int t = 0; t < R->npar; t++)
            if (R->par[t].replicated) C->seg[C->nseg++] = exec_seg_at(r, R->par[t].offset, R->par[t].count);
    } else if (pu == PLAN_PURPOSE_TIED_SUM) {
        if (holds || C->group == R->tp_group) {
            base_errorf(e, "a tied_sum of region %s over group %s, every member of which runs "
                           "the region; it sums the token table between the embedding and the head",
                        R->name, group_name(b, C->group));
            return disagree(b, i, e);
        }
        if (R->kind == EXEC_EMBED && b->cfg->tied)
            C->seg[C->nseg++] = exec_seg_at(r, R->par[0].offset, R->par[0].count);
        else if (R->kind == EXEC_HEAD && R->ncopy)
            C->seg[C->nseg++] = exec_seg_at(r, R->copy.offset, R->ncopy);
        else {
            base_errorf(e, "a tied_sum of region %s's gradient, which holds no tied token table",
                        R->name);
            return disagree(b, i, e);
        }
    } else if (C->group == R->tp_group || !holds) {
        base_errorf(e, "a %s of region %s over group %s, %s; it sums the whole gradient over "
                       "replicas that all run the region",
                    plan_purpose_name(pu), R->name, group_name(b, C->group),
                    holds ? "its TP group" : "some member of which does not run the region");
        return disagree(b, i, e);
    } else if (C->group == R->ep_group) {
        base_errorf(e, "the plan sums region %s's gradients over its expert-parallel group "
                       "%s, whose members hold different experts; expert gradients may be "
                       "summed only over devices that hold the same experts (none when the "
                       "expert- and data-parallel degrees are equal): the compiler should "
                       "leave them out of this reduction",
                    R->name, group_name(b, C->group));
        return exec_bind_instr_error(b, i, e);
    } else {
        C->seg[C->nseg++] = exec_seg_at(r, 0, R->nstore);
        if (C->grank > 0) R->norm_skip = true;
    }
    return 0;
}

/* ---------------------------------------------------------------- regions */

static int read_regions(exec_bind *b, base_error *e)
{
    const plan_set *p = b->p;
    b->nreg = p->nregions;
    b->reg = base_xcalloc((size_t)(b->nreg > 0 ? b->nreg : 1), sizeof *b->reg);
    b->embed_region = b->head_region = -1;
    for (int r = 0; r < b->nreg; r++) {
        exec_region *R = &b->reg[r];
        R->name = p->regions[r];
        R->tp_group = R->ep_group = -1;
        R->param_buf = R->grad_buf = R->opt_buf = -1;
        R->scatter_group = -1;
        if (!R->name || exec_parse_region(R->name, &R->layer, &R->kind))
            return base_errorf(e, "plan region %d is named '%s', which the %s cannot read; it "
                                  "expects embed, head or L<layer>.<kind> with a kind of the "
                                  "kernels (attn, mlp, moe_gate, moe_experts, moe_combine)",
                               r, R->name ? R->name : "(null)", b->ops.who);
        if (R->kind == EXEC_EMBED) b->embed_region = r;
        if (R->kind == EXEC_HEAD) b->head_region = r;
    }
    exec_region_place *pl = base_xcalloc((size_t)(b->nreg > 0 ? b->nreg : 1), sizeof *pl);
    int prc = exec_region_places(p, b->dev, b->nreg, pl, e);
    for (int r = 0; r < b->nreg && !prc; r++) {
        exec_region *R = &b->reg[r];
        const exec_region_place *P = &pl[r];
        R->here = P->here;
        R->upd = P->upd;
        R->tp_group = P->tp_group;
        R->ep_group = P->ep_group;
    }
    for (int r = 0; r < b->nreg && !prc; r++) {
        exec_region *R = &b->reg[r];
        const exec_region_place *P = &pl[r];
        if (!R->here) continue;
        if (exec_shard_init(b->cfg, P->tp, P->tpr, P->ep, P->epr, &R->sh, e) ||
            exec_shard_set_sp(b->cfg, &R->sh, exec_sequence_parallel(p, b->dev, r, P->tp_group), e) ||
            b->ops.layout(b->ops.ctx, R, &R->sz, e) ||
            (R->npar = exec_region_params(b->cfg, &R->sh, R->kind, R->par, e)) < 0) {
            base_error_prefix(e, "region %s on device %d: ", R->name, b->dev);
            prc = -1;
            break;
        }
        R->nkern = R->nstore = R->sz.params;
    }
    free(pl);
    if (prc) return -1;
    /* the head's copy of a tied token table lives with the head when the embedding is elsewhere */
    if (b->cfg->tied && b->head_region >= 0 && b->reg[b->head_region].here &&
        (b->embed_region < 0 || !b->reg[b->embed_region].here)) {
        exec_region *H = &b->reg[b->head_region];
        exec_param ep[EXEC_MAX_REGION_PARAMS];
        if (exec_region_params(b->cfg, &H->sh, EXEC_EMBED, ep, e) < 0) return -1;
        H->copy = ep[0]; /* "tok", vocabulary-sharded as the head is */
        H->copy.offset = H->nkern;
        H->ncopy = H->copy.count;
        H->nstore = H->nkern + H->ncopy;
    }
    for (int r = 0; r < b->nreg; r++) {
        exec_region *R = &b->reg[r];
        R->upd_lo = 0;
        R->upd_hi = R->param_n = R->grad_n = R->nstore;
    }
    /* the device's TP group, from any tensor-parallel region; which device runs which region,
     * for the collectives' reading */
    int tpg = -1;
    for (int r = 0; r < b->nreg && tpg < 0; r++)
        if (b->reg[r].here) tpg = b->reg[r].tp_group;
    b->holds = exec_holds_new(p, b->nreg);
    for (int r = 0; r < b->nreg && tpg >= 0; r++) {
        exec_region *R = &b->reg[r];
        if (!R->here || R->tp_group >= 0 || exec_group_pos(p, tpg, b->dev) == 0) continue;
        R->tp_copy = exec_group_holds(p, b->holds, tpg, r);
    }
    return 0;
}

static int set_role(exec_bind *b, int i, int bb, exec_buf_role role, int region, int64_t bytes,
                    base_error *e)
{
    const exec_buf *B = &b->buf[bb];
    if (exec_buf_set_role(&b->buf[bb], role, region, bytes)) {
        base_errorf(e, "buffer %d (%s) is used as two different things (regions %s and %s); the "
                       "%s gives a buffer one role",
                    bb, buf_name(b, bb), B->region >= 0 ? b->reg[B->region].name : "-",
                    region >= 0 ? b->reg[region].name : "-", b->ops.who);
        return exec_bind_instr_error(b, i, e);
    }
    return 0;
}

/* exec_match_act_mode's split: the backend's layout of one region. */
typedef struct split_ctx {
    const exec_bind *b;
    const exec_region *R;
} split_ctx;

static int act_split(const void *ctx, exec_act_mode mode, int64_t *kept, int64_t *rebuilt,
                     base_error *e)
{
    const split_ctx *x = ctx;
    return x->b->ops.act_split(x->b->ops.ctx, x->R, mode, kept, rebuilt, e);
}

/* Each region's recompute mode: the exec_act_mode whose split of the kernels' act buffer is the
 * plan's sizes (its F's activation buffer and its R's), so that what F keeps and what R rebuilds
 * are the plan's tensors. A region without R keeps everything; one whose sizes match no mode
 * keeps everything in F's buffer and again in R's. A sequence-parallel region is not recomputed:
 * its backward gathers [norm input | norm output] rows from one act buffer, which a split would
 * put in two. */
static int act_modes(exec_bind *b, base_error *e)
{
    for (int r = 0; r < b->nreg; r++) {
        exec_region *R = &b->reg[r];
        R->act_mode = EXEC_ACT_ALL;
        R->act_kept = R->act_rebuilt = R->sz.act_bytes;
        if (!R->here) continue;
        int64_t fb, rb;
        exec_plan_act_bytes(b->L, r, &fb, &rb);
        if (rb < 0) continue; /* no recompute */
        if (R->sh.sp)
            return base_errorf(e, "region %s is sequence-parallel and recomputed; the %s do not "
                                  "recompute under sequence parallelism yet: drop the recompute "
                                  "or sequence_parallel",
                               R->name, b->ops.kernels);
        const split_ctx x = {b, R};
        if (exec_match_act_mode(fb, rb, act_split, &x, &R->act_mode, &R->act_kept,
                                &R->act_rebuilt, e))
            return -1;
    }
    return 0;
}

/* The bytes of a pass's workspace (plan_tensors.h's work rows, which ir/cost.c's
 * ir_region_work_bytes sums, plus what sched/sizes.c adds): the kernels' work buffer, then, from
 * the next multiple of 8, what the pass computes and does not keep: a forward under recompute the part only R keeps, a recompute the region's outputs no
 * boundary buffer takes (and a gate's route). */
static int64_t pass_work_bytes(const exec_region *R, plan_pass pass, const exec_compute *cb)
{
    bool fwd = pass == PLAN_PASS_F || pass == PLAN_PASS_R;
    int64_t w = fwd ? R->sz.work_f_bytes : R->sz.work_bytes, extra = 0;
    if (pass == PLAN_PASS_F && R->act_mode != EXEC_ACT_ALL) extra = R->act_rebuilt;
    if (pass == PLAN_PASS_R)
        extra = (cb->sl.yb < 0 && R->kind != EXEC_HEAD ? R->sz.y_bytes : 0) +
                (R->kind == EXEC_MOE_GATE && cb->sl.y2b < 0 ? R->sz.route_bytes : 0);
    return extra ? exec_work_extra_at(w) + extra : w;
}

/* ---------------------------------------------------------------- computes */

/* The working state of read_computes: per (region, micro-batch) the act buffer the latest
 * forward or recompute wrote and R's rebuilt one; every region's kind. */
typedef struct compute_scan {
    int *act_cur, *act_rec;
    exec_region_kind *kinds;
} compute_scan;

/* Binds one buffer that compute i (cb, of region R) reads (side 0) or writes (side 1). */
static int bind_buffer(exec_bind *b, compute_scan *s, int i, const char *kid, exec_compute *cb,
                       plan_pass pass, int side, int bb, base_error *e)
{
    const int r = cb->region, mb = cb->mb;
    exec_region *R = &b->reg[r];
    const bool fwd = pass == PLAN_PASS_F || pass == PLAN_PASS_R;
    const bool bwd = pass == PLAN_PASS_B || pass == PLAN_PASS_BI || pass == PLAN_PASS_BW;
    const int64_t k = (int64_t)r * b->nmb + mb;
    int rc = 0;
    buf_use use = BUF_BOUNDARY;
    if (exec_bind_buf_role(b, i, bb, &use, e)) return -1;
    switch (use) {
    case BUF_PARAM:
        rc = set_role(b, i, bb, EXEC_BUF_PARAM, r, 0, e);
        if (!rc && R->param_buf >= 0 && R->param_buf != bb) {
            base_errorf(e, "region %s has two parameter buffers (%s and %s)", R->name,
                        buf_name(b, R->param_buf), buf_name(b, bb));
            rc = exec_bind_instr_error(b, i, e);
        }
        R->param_buf = bb;
        return rc;
    case BUF_GRAD: {
        /* the optimizer step reads the kept gradient; a backward adds into its own (the same
         * buffer, or under ZeRO-2/3 its micro-batch's whole gradient), and a tied head's second
         * one is the embedding's */
        bool table;
        const int owner = exec_bind_grad_owner(b, i, R, cb, bwd, side, bb, &table, e);
        if (owner < 0) return -1;
        rc = set_role(b, i, bb, EXEC_BUF_GRAD, owner, 0, e);
        if (pass == PLAN_PASS_UPD) R->grad_buf = bb;
        else if (table) cb->egb = bb;
        else if (bwd && side == 1) cb->gb = bb;
        return rc;
    }
    case BUF_OPT:
        rc = set_role(b, i, bb, EXEC_BUF_OPT, r, 0, e);
        R->opt_buf = bb;
        return rc;
    case BUF_ACT:
        if (pass == PLAN_PASS_UPD) return 0;
        if (fwd && side == 1 &&
            b->L->bufs[bb].role != (pass == PLAN_PASS_F ? PLAN_ROLE_SAVED : PLAN_ROLE_RECOMPUTED)) {
            base_errorf(e, "%s writes activation buffer %s of role %s; a forward writes what it "
                           "keeps (saved), a recompute what it rebuilds (recomputed)",
                        kid, buf_name(b, bb), role_name(b, bb));
            return disagree(b, i, e);
        }
        if (fwd && side == 1 && pass == PLAN_PASS_R && R->act_mode != EXEC_ACT_ALL) {
            /* what R rebuilds; F's buffer (what it kept) stays the act */
            rc = set_role(b, i, bb, EXEC_BUF_ACT, r, R->act_rebuilt, e);
            s->act_rec[k] = bb;
            cb->act2 = bb;
        } else if (fwd && side == 1) {
            rc = set_role(b, i, bb, EXEC_BUF_ACT, r, R->act_kept, e);
            s->act_cur[k] = bb;
            if (pass == PLAN_PASS_F) s->act_rec[k] = -1;
            cb->act = bb;
        } else if (bwd && side == 0) {
            /* the latest act a forward or recompute of (r, mb) wrote */
            int cur = s->act_cur[k];
            if (bb == cur || cb->act < 0) cb->act = cur >= 0 ? cur : bb;
        }
        return rc;
    case BUF_GATHERED:
        if (b->buf[bb].region != r || side != 0) {
            base_errorf(e, "%s uses the gathered parameters of region %s", kid,
                        b->reg[b->buf[bb].region].name);
            rc = exec_bind_instr_error(b, i, e);
        }
        cb->pb = bb;
        R->gathered = true;
        return rc;
    case BUF_SAVED_GATHER:
        if (!bwd || side != 0 || b->buf[bb].region != r) {
            base_errorf(e, "%s uses buffer %s, the re-gathered norm shards of region %s; only that "
                           "region's backward reads them",
                        kid, buf_name(b, bb),
                        b->buf[bb].region >= 0 ? b->reg[b->buf[bb].region].name : "-");
            return exec_bind_instr_error(b, i, e);
        }
        cb->xg = bb;
        return set_role(b, i, bb, EXEC_BUF_COMM, r, 2 * R->sz.x_bytes, e);
    case BUF_WORK:
        /* the pass's workspace (a BW reads its BI's), sized once the outputs are bound */
        if (cb->work >= 0 && cb->work != bb) {
            base_errorf(e, "%s has two workspaces (%s and %s)", kid, buf_name(b, cb->work),
                        buf_name(b, bb));
            return exec_bind_instr_error(b, i, e);
        }
        cb->work = bb;
        return 0;
    case BUF_BOUNDARY:
    case BUF_ROUTE: {
        /* comm or a workspace-category buffer between regions: a boundary tensor */
        const bool route = use == BUF_ROUTE;
        const int64_t xb = R->sz.x_bytes, yb = R->sz.y_bytes;
        const int64_t sz = route ? R->sz.route_bytes : fwd ? (side == 0 ? xb : yb) : (side == 0 ? yb : xb);
        rc = set_role(b, i, bb, EXEC_BUF_COMM, r, sz, e);
        int *dst = exec_bind_boundary(&cb->sl, fwd, side, route);
        if (!rc && *dst >= 0) {
            base_errorf(e, "%s reads or writes more than one communication buffer on one side (%s "
                           "and %s); the %s knows one input and one output per pass",
                        kid, buf_name(b, *dst), buf_name(b, bb), b->ops.who);
            rc = exec_bind_instr_error(b, i, e);
        }
        *dst = bb;
        return rc;
    }
    }
    return 0;
}

/* After its buffers: the checks and links of a forward, recompute or backward pass i. */
static int bind_pass(exec_bind *b, compute_scan *s, int i, exec_compute *cb, plan_pass pass,
                     base_error *e)
{
    const int r = cb->region, mb = cb->mb;
    exec_region *R = &b->reg[r];
    const bool fwd = pass == PLAN_PASS_F || pass == PLAN_PASS_R;
    const bool bwd = pass == PLAN_PASS_B || pass == PLAN_PASS_BI || pass == PLAN_PASS_BW;
    const int64_t k = (int64_t)r * b->nmb + mb;
    /* a pass that reads the parameter buffer itself needs it whole */
    if ((fwd || bwd) && cb->pb < 0 && R->param_buf >= 0) R->reads_whole = true;
    if (pass == PLAN_PASS_R && R->act_mode != EXEC_ACT_ALL) cb->act = s->act_cur[k];
    if (bwd) cb->act2 = s->act_rec[k];
    if (pass == PLAN_PASS_R && R->act_mode != EXEC_ACT_ALL &&
        ((cb->act < 0 && R->act_mode != EXEC_ACT_NONE) || cb->act2 < 0)) {
        base_errorf(e, "the recompute of %s (micro-batch %d) has no forward before it on this "
                       "device, or writes no activation buffer",
                    R->name, mb);
        return exec_bind_instr_error(b, i, e);
    }
    if (fwd && cb->act < 0) {
        base_errorf(e, "the %s pass of %s writes no activation buffer; the kernels keep their "
                       "saved tensors there",
                    plan_pass_name(pass), R->name);
        return exec_bind_instr_error(b, i, e);
    }
    if (R->kind == EXEC_HEAD && b->cfg->tied && !R->ncopy && b->embed_region >= 0 && (fwd || bwd)) {
        /* the head reads the embedding's token table; under ZeRO-3 only a gathered copy of it is
         * whole, and the plan must gather it for the head (with the head's parameters) */
        bool gathered = false;
        for (int q = 0; q < b->L->nbufs; q++)
            gathered |= b->buf[q].role == EXEC_BUF_GATHERED && b->buf[q].region == b->embed_region;
        const bool table = cb->pb >= 0 && b->buf[cb->pb].table;
        if (!table) b->reg[b->embed_region].reads_whole = true;
        if (gathered && !table) {
            base_errorf(e, "the head uses the tied token table, whose parameters are ZeRO-3 "
                           "shards gathered for the embedding only; the plan does not gather "
                           "them for the head (a compiler gap), so the head would read stale "
                           "weights");
            return exec_bind_instr_error(b, i, e);
        }
    }
    if (bwd && cb->act < 0) cb->act = s->act_cur[k];
    /* the backward reads what F kept (its input, or all but the attention core), which the plan
     * frees right after R (sched/lower.c): held until the backward has run */
    if (bwd && (R->act_mode == EXEC_ACT_INPUT || R->act_mode == EXEC_ACT_SELECTIVE) && cb->act >= 0)
        b->act_hold[cb->act] = i;
    if (bwd && cb->act < 0) {
        base_errorf(e, "the backward of %s (micro-batch %d) runs before any forward of it on this "
                       "device",
                    R->name, mb);
        return exec_bind_instr_error(b, i, e);
    }
    /* boundary slots where no comm buffer carries the tensor */
    if (exec_bind_slots_fill(s->kinds, b->nreg, b->nmb, r, mb, pass, R->name, &cb->sl, e))
        return exec_bind_instr_error(b, i, e);
    /* under full or selective recompute R rebuilds from the input F kept (the first piece of its
     * act buffer), not from the boundary slot, which may go after the forward (the plan keeps
     * the input once: plan_tensors.h's input rows) */
    if (pass == PLAN_PASS_R && (R->act_mode == EXEC_ACT_INPUT || R->act_mode == EXEC_ACT_SELECTIVE)) {
        cb->sl.xs = -1;
        if (R->kind == EXEC_MOE_COMBINE) cb->sl.x2s = -1; /* the route follows in act */
    }
    const exec_slot_sizes sz = {R->sz.x_bytes, R->sz.y_bytes, R->sz.route_bytes};
    exec_slots_note_reads(&cb->sl, i, sz, b->slot_last, b->slot_bytes);
    return 0;
}

/* Compute i: its kernel, then its buffers, its workspace's size and its pass's links. */
static int bind_compute(exec_bind *b, compute_scan *s, int i, base_error *e)
{
    const plan_instr *in = &b->L->ins[i];
    exec_compute *cb = &b->comp[i];
    cb->region = in->region;
    cb->mb = in->mb;
    const char *kid = exec_compute_kid(b->p, in);
    cb->aux = exec_aux_kind(kid);
    if (cb->aux == 1) {
        b->has_norm = true;
        return 0;
    }
    if (cb->aux == 2) {
        if (in->mb < 0 || in->mb >= b->nmb) {
            base_errorf(e, "aux.aux_loss without a micro-batch in [0, %lld)", (long long)b->nmb);
            return exec_bind_instr_error(b, i, e);
        }
        return 0;
    }
    int kind = -1, family = -1;
    cb->kernel = kid ? b->ops.kernel_find(kid, &kind, &family) : NULL;
    if (!cb->kernel) {
        base_errorf(e, "kernel identity '%s' is unknown to the %s; the plan was written by a "
                       "newer compiler, or the table lacks it",
                    kid ? kid : "(none)", b->ops.backend);
        return exec_bind_instr_error(b, i, e);
    }
    const int r = in->region;
    if (r < 0 || r >= b->nreg || kind != (int)b->reg[r].kind || family != (b->cfg->gpt ? 0 : 1)) {
        base_errorf(e, "kernel %s does not fit region %s of the %s model", kid,
                    r >= 0 && r < b->nreg ? b->reg[r].name : "(none)", b->cfg->gpt ? "gpt" : "llama");
        return exec_bind_instr_error(b, i, e);
    }
    exec_region *R = &b->reg[r];
    const plan_pass pass = (plan_pass)in->pass;
    const bool fwd = pass == PLAN_PASS_F || pass == PLAN_PASS_R;
    const bool bwd = pass == PLAN_PASS_B || pass == PLAN_PASS_BI || pass == PLAN_PASS_BW;
    if ((fwd || bwd) && (in->mb < 0 || in->mb >= b->nmb)) {
        base_errorf(e, "a %s pass needs a micro-batch in [0, %lld)", plan_pass_name(pass),
                    (long long)b->nmb);
        return exec_bind_instr_error(b, i, e);
    }
    for (int side = 0; side < 2; side++) {
        const int n = side == 0 ? in->nreads : in->nwrites;
        const int32_t *v = side == 0 ? in->reads : in->writes;
        for (int q = 0; q < n; q++)
            if (bind_buffer(b, s, i, kid, cb, pass, side, v[q], e)) return -1;
    }
    if (cb->work >= 0 && set_role(b, i, cb->work, EXEC_BUF_WORK, r, pass_work_bytes(R, pass, cb), e))
        return -1;
    if (pass == PLAN_PASS_UPD) {
        if (R->param_buf < 0 || R->grad_buf < 0 || R->opt_buf < 0) {
            base_errorf(e, "the optimizer step of %s does not name its parameter, gradient and "
                           "optimizer buffers",
                        R->name);
            return exec_bind_instr_error(b, i, e);
        }
        return 0;
    }
    return bind_pass(b, s, i, cb, pass, e);
}

/* Buffer roles and the bindings of every compute. */
static int read_computes(exec_bind *b, base_error *e)
{
    const plan_list *L = b->L;
    /* ZeRO-3: the comm buffers gathers fill with a region's whole parameters, which its passes
     * read instead of the device's piece; the head's gather may carry the embedding's token table
     * after its own parameters (tied) */
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        const int z3 = exec_bind_is_zero3_gather(b, i, e);
        if (z3 < 0) return -1;
        if (!z3) continue;
        exec_buf *B = &b->buf[in->writes[0]];
        B->role = EXEC_BUF_GATHERED;
        B->region = in->region;
        B->bytes = b->reg[in->region].nstore * b->ops.param_elem;
        if (in->nreads == 2) {
            if (L->bufs[in->reads[1]].mem != PLAN_MEM_PARAM || b->embed_region < 0 ||
                L->bufs[in->reads[1]].region != b->embed_region ||
                b->reg[in->region].kind != EXEC_HEAD || !b->cfg->tied ||
                !b->reg[b->embed_region].here) {
                base_errorf(e, "a zero3_gather of two parameter buffers that is not the head's "
                               "gather of the tied token table (a second buffer owned by the "
                               "embedding)");
                return disagree(b, i, e);
            }
            B->table = true;
            B->bytes += b->reg[b->embed_region].par[0].count * b->ops.param_elem;
        }
    }
    /* sequence parallelism's backward re-gathers (sched/dir_shard.c): the kernels keep their
     * device's rows of the norm input and output, the leading bytes of the act buffer, which the
     * plan all-gathers for the backward into [input | output] pairs of every rank (xg) */
    if (exec_mark_saved_gathers(b->p, b->dev, b->buf, e) < 0) return -1;
    if (act_modes(b, e)) return -1;
    compute_scan s;
    const int64_t nk = (int64_t)b->nreg * b->nmb;
    s.act_cur = base_xcalloc((size_t)nk + 1, sizeof *s.act_cur);
    s.act_rec = base_xcalloc((size_t)nk + 1, sizeof *s.act_rec);
    for (int64_t k = 0; k < nk; k++) s.act_cur[k] = s.act_rec[k] = -1;
    s.kinds = base_xcalloc((size_t)b->nreg + 1, sizeof *s.kinds);
    for (int r = 0; r < b->nreg; r++) s.kinds[r] = b->reg[r].kind;
    int rc = 0;
    for (int i = 0; i < L->n && !rc; i++)
        if (L->ins[i].op == PLAN_COMPUTE) rc = bind_compute(b, &s, i, e);
    free(s.act_cur);
    free(s.act_rec);
    free(s.kinds);
    if (rc) return -1;
    /* outputs into slots: the size is what the next region reads; a slot written and never read
     * on this device means the tensor had nowhere to go */
    for (int i = 0; i < L->n; i++) {
        const exec_compute *cb = &b->comp[i];
        if (L->ins[i].op != PLAN_COMPUTE || cb->aux || !cb->kernel) continue;
        const exec_region *R = &b->reg[cb->region];
        const exec_slot_sizes sz = {R->sz.x_bytes, R->sz.y_bytes, R->sz.route_bytes};
        if (exec_slots_check_writes(b->p, b->nmb, cb->region, &cb->sl, sz, b->slot_last,
                                    b->slot_bytes, e))
            return exec_bind_instr_error(b, i, e);
    }
    return 0;
}

/* ---------------------------------------------------------------- collectives */

/* The shape an activation collective's piece has, in bytes, over a group of g: an all-gather
 * gives g times its input, a reduce-scatter a g-th, an all-reduce as much, an even all-to-all as
 * much in g equal blocks. NULL when the piece has it, else what the kind moves. */
static const char *act_piece_misfit(plan_coll k, int64_t inb, int64_t outb, int g)
{
    switch (k) {
    case PLAN_ALL_REDUCE: return inb == outb ? NULL : "as many bytes out as in";
    case PLAN_REDUCE_SCATTER: return inb == outb * g ? NULL : "a group-size-th of its input out";
    case PLAN_ALL_GATHER: return outb == inb * g ? NULL : "group-size times its input out";
    case PLAN_ALL_TO_ALL:
        return inb == outb && inb % g == 0 ? NULL : "as many bytes out as in, in group-size blocks";
    default: return NULL; /* the backends refuse the kinds they do not move */
    }
}

/* An activation collective: a list of pieces, each one buffer in and one out (the same: in
 * place), sized by a compute or by the other side of another collective (exec_coll_sizes). One
 * piece, unless fuse_collectives merged several members into it: then it reads one buffer per
 * member and writes one per member in the same order (sched/dir_fuse_collectives.c), and its
 * bytes are the members' summed. Every piece must have the kind's shape, and the plan's bytes
 * must be the pieces' (each the larger side of its plan buffers, an sp_regather's its output): a
 * plan whose pieces disagree with the buffers it names is refused here, for every backend. */
static int bind_act_coll(exec_bind *b, int i, exec_coll *C, base_error *e)
{
    const plan_instr *in = &b->L->ins[i];
    const plan_list *L = b->L;
    C->kind = EXEC_COLL_ACT;
    const int n = in->nreads > 0 ? in->nreads : 1;
    if (in->nwrites != 0 && in->nwrites != n) {
        base_errorf(e, "the collective reads %d buffers and writes %d; each piece of a fused "
                       "collective reads one buffer and writes one (or none, in place): the "
                       "plan's fused pieces disagree with the buffers it names; compile it again",
                    n, in->nwrites);
        return exec_bind_instr_error(b, i, e);
    }
    C->npiece = n;
    C->piece = base_xcalloc((size_t)n, sizeof *C->piece);
    int64_t plan_bytes = 0;
    for (int k = 0; k < n; k++) {
        exec_piece *P = &C->piece[k];
        P->in = in->nreads > 0 ? in->reads[k] : in->buf;
        P->out = in->nwrites > 0 ? in->writes[k] : P->in;
        if (P->in < 0) {
            base_errorf(e, "an activation collective that names no buffer");
            return exec_bind_instr_error(b, i, e);
        }
        if (!b->buf[P->in].bytes || !b->buf[P->out].bytes) {
            base_errorf(e, "no compute on this device tells the size of buffer %s",
                        buf_name(b, b->buf[P->in].bytes ? P->out : P->in));
            return exec_bind_instr_error(b, i, e);
        }
        P->in_bytes = b->buf[P->in].bytes;
        P->out_bytes = b->buf[P->out].bytes;
        /* sequence parallelism's backward re-gather reads the leading shards of an act buffer
         * (sched/dir_shard.c): as many bytes as the output's share */
        const bool leading = b->buf[P->out].saved_gather && in->coll == PLAN_ALL_GATHER;
        if (leading && P->out_bytes % C->gsize == 0 && P->out_bytes / C->gsize <= P->in_bytes)
            P->in_bytes = P->out_bytes / C->gsize;
        const int64_t pi = L->bufs[P->in].bytes, po = L->bufs[P->out].bytes;
        plan_bytes += leading ? po : pi > po ? pi : po;
        const char *want =
            act_piece_misfit((plan_coll)in->coll, P->in_bytes, P->out_bytes, C->gsize);
        if (want) {
            base_errorf(e, "piece %d of %d (%s into %s) is a %s of %lld bytes into %lld over %d "
                           "ranks, which moves %s: the plan's fused pieces disagree with the "
                           "buffers it names; compile it again",
                        k + 1, n, buf_name(b, P->in), buf_name(b, P->out),
                        plan_coll_name((plan_coll)in->coll), (long long)P->in_bytes,
                        (long long)P->out_bytes, C->gsize, want);
            return exec_bind_instr_error(b, i, e);
        }
    }
    if (plan_bytes != in->bytes) {
        base_errorf(e, "the collective moves %lld bytes, but the plan buffers of its %d piece%s "
                       "(%s, ...) hold %lld: the plan's fused pieces disagree with the buffers "
                       "it names; compile it again",
                    (long long)in->bytes, n, n > 1 ? "s" : "", buf_name(b, C->piece[0].in),
                    (long long)plan_bytes);
        return exec_bind_instr_error(b, i, e);
    }
    return 0;
}

/* A collective of gradient or parameter buffers: its segments, one or more per region it reads,
 * ZeRO pieces, the plan's receive buffer of a reduce-scatter. */
static int bind_region_coll(exec_bind *b, int i, exec_coll *C, base_error *e)
{
    const plan_set *p = b->p;
    const plan_instr *in = &b->L->ins[i];
    const bool grads = C->kind != EXEC_COLL_PARAM_GATHER;
    C->seg = base_xcalloc((size_t)in->nreads * EXEC_MAX_REGION_PARAMS + 1, sizeof *C->seg);
    for (int q = 0; q < in->nreads; q++) {
        const int bb = in->reads[q];
        const exec_buf *B = &b->buf[bb];
        if (B->role != (grads ? EXEC_BUF_GRAD : EXEC_BUF_PARAM) || B->region < 0) {
            base_errorf(e, "buffer %s of a %s collective is not a region's %s buffer",
                        buf_name(b, bb), grads ? "gradient" : "parameter",
                        grads ? "gradient" : "parameter");
            return exec_bind_instr_error(b, i, e);
        }
        const int r = B->region;
        exec_region *R = &b->reg[r];
        const int seg0 = C->nseg;
        if (C->kind == EXEC_COLL_GRAD_SUM) {
            if (exec_bind_sum_segments(b, i, C, r, e)) return -1;
        } else if (C->group == R->tp_group || C->group == R->ep_group) {
            base_errorf(e, "%s of region %s's %s over its own TP/EP group; the %s supports ZeRO "
                           "over data-parallel groups only",
                        plan_coll_name((plan_coll)in->coll), R->name,
                        grads ? "gradients" : "parameters", b->ops.who);
            return exec_bind_instr_error(b, i, e);
        } else {
            C->seg[C->nseg++] = exec_seg_at(r, 0, R->nstore); /* ZeRO: the region's block */
        }
        const int piece =
            grads ? exec_grad_segs_bind(C, seg0, b->L, in, bb, b->buf, r, R->grad_buf) : 0;
        if (piece < 0) {
            base_errorf(e, "a reduce-scatter of %s's whole gradient (%s) writes no buffer that the "
                           "region's optimizer step reads; the %s cannot tell where the device's "
                           "piece goes",
                        R->name, buf_name(b, bb), b->ops.who);
            return exec_bind_instr_error(b, i, e);
        }
        if (piece) R->grad_piece = true;
    }
    if (C->kind == EXEC_COLL_GRAD_SUM) {
        /* the plan's bytes must be what is summed: a check of this reading of the plan */
        int64_t total = 0, copies = 0;
        for (int s = 0; s < C->nseg; s++) {
            total += C->seg[s].n;
            const exec_region *R = &b->reg[C->seg[s].region];
            if (C->seg[s].off == 0 && C->seg[s].n == R->nstore) copies += R->ncopy;
        }
        if (exec_check_bucket_bytes(p, in, total, copies, b->ops.who, e))
            return exec_bind_instr_error(b, i, e);
        return 0;
    }
    if (C->kind == EXEC_COLL_PARAM_GATHER) {
        const bool zero3 = in->purpose == PLAN_PURPOSE_ZERO3_GATHER;
        if (!zero3 && in->nwrites > 0) {
            base_errorf(e, "a zero_update_gather writes buffer %s (role %s); it gathers the "
                           "updated pieces into the parameter buffers it reads, in place",
                        buf_name(b, in->writes[0]), role_name(b, in->writes[0]));
            return disagree(b, i, e);
        }
        if (!zero3) /* into the parameter buffers themselves: they hold the whole block */
            for (int s = 0; s < C->nseg; s++) b->reg[C->seg[s].region].reads_whole = true;
        if (zero3) {
            C->out = in->writes[0];
            if (b->buf[C->out].table) {
                /* [head's parameters | the embedding's token table] */
                const exec_region *E = &b->reg[b->embed_region];
                if (C->nseg != 2 || C->seg[0].region != in->region ||
                    C->seg[1].region != b->embed_region) {
                    base_errorf(e, "the head's gather of the tied token table reads buffers other "
                                   "than the head's and the embedding's parameters");
                    return exec_bind_instr_error(b, i, e);
                }
                C->seg[1] = exec_seg_at(b->embed_region, E->par[0].offset, E->par[0].count);
            } else if (C->nseg != 1 || C->seg[0].region != in->region) {
                base_errorf(e, "a ZeRO-3 gather of %d regions into %s; the %s gathers one region's "
                               "parameters into a buffer",
                            C->nseg, buf_name(b, C->out), b->ops.who);
                return exec_bind_instr_error(b, i, e);
            }
        }
    }
    /* ZeRO: every rank's share of staging is its largest piece; a reduce-scatter makes the
     * device's piece of each region, which its optimizer step updates */
    for (int s = 0; s < C->nseg; s++) {
        exec_region *R = &b->reg[C->seg[s].region];
        C->chunk += exec_seg_chunk(R, &C->seg[s], C->gsize);
        if (C->kind == EXEC_COLL_GRAD_SCATTER) {
            R->scatter_group = C->group;
            exec_zero_piece(R->nstore, C->grank, C->gsize, &R->upd_lo, &R->upd_hi);
        }
    }
    /* the plan's receive buffer of the pieces (sched/lower.c), when it names one */
    if (C->kind == EXEC_COLL_GRAD_SCATTER && in->buf >= 0 &&
        b->L->bufs[in->buf].role != PLAN_ROLE_PIECES) {
        base_errorf(e, "a zero_scatter receives into buffer %s of role %s; its buffer holds the "
                       "received pieces (role pieces)",
                    buf_name(b, in->buf), role_name(b, in->buf));
        return disagree(b, i, e);
    }
    if (C->kind == EXEC_COLL_GRAD_SCATTER && in->buf >= 0 &&
        set_role(b, i, in->buf, EXEC_BUF_COMM, C->seg[0].region, C->chunk * b->ops.grad_elem, e))
        return -1;
    return 0;
}

/* The ZeRO pieces the binding derived for region R (the parameters when every pass but the
 * update reads a gathered copy, `param_piece`; the kept gradient when micro-batches'
 * zero_scatters add into it; the optimizer state when a zero_scatter makes the piece) must be
 * the roles the plan states for its buffers (param_piece, grad_piece, opt_piece): a plan that
 * says otherwise would have the device keep a piece where it reads the whole, or the reverse. */
static int piece_roles_check(const exec_bind *b, const exec_region *R, bool param_piece,
                             base_error *e)
{
    const struct {
        int buf;
        bool piece;
        plan_role whole, part;
        const char *why;
    } k[] = {
        {R->param_buf, param_piece, PLAN_ROLE_PARAMS, PLAN_ROLE_PARAM_PIECE,
         "its passes read only gathered copies"},
        {R->grad_buf, R->grad_piece, PLAN_ROLE_GRADS, PLAN_ROLE_GRAD_PIECE,
         "zero_scatters add their pieces into it"},
        {R->opt_buf, R->scatter_group >= 0, PLAN_ROLE_OPT, PLAN_ROLE_OPT_PIECE,
         "a zero_scatter makes the piece its update steps"},
    };
    for (size_t q = 0; q < BASE_COUNT(k); q++) {
        if (k[q].buf < 0) continue;
        const plan_role stated = (plan_role)b->L->bufs[k[q].buf].role;
        if (stated == (k[q].piece ? k[q].part : k[q].whole)) continue;
        return base_errorf(e, "device %d: buffer %s of region %s has role %s, but the plan's "
                              "instructions make it %s (%s); the plan's roles disagree with its "
                              "instructions",
                           b->dev, buf_name(b, k[q].buf), R->name, plan_role_name(stated),
                           plan_role_name(k[q].piece ? k[q].part : k[q].whole),
                           k[q].piece ? k[q].why : "no instruction makes a ZeRO piece of it");
    }
    return 0;
}

/* Collectives: what each one reduces or gathers, ZeRO pieces, and the sizes of comm buffers that
 * only collectives touch; then the storage of every region's parameters, gradients and optimizer
 * state. */
static int read_collectives(exec_bind *b, base_error *e)
{
    const plan_set *p = b->p;
    const plan_list *L = b->L;
    exec_coll_sizes(p, b->dev, b->buf); /* sizes through activation collectives */
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        if (in->op != PLAN_COLL) continue;
        exec_coll *C = &b->coll[i];
        if (exec_coll_open(p, b->dev, i, C, e)) return exec_bind_instr_error(b, i, e);
        C->kind = exec_bind_coll_purpose(b, i, e);
        int rc = 0;
        switch (C->kind) {
        case EXEC_COLL_SCALAR: break;
        case EXEC_COLL_ACT: rc = bind_act_coll(b, i, C, e); break;
        case EXEC_COLL_GRAD_SUM:
        case EXEC_COLL_GRAD_SCATTER:
        case EXEC_COLL_PARAM_GATHER: rc = bind_region_coll(b, i, C, e); break;
        case EXEC_COLL_NONE: rc = -1; break;
        }
        if (rc) return -1;
    }
    /* a parameter all-gather sends the pieces the reduce-scatter gave */
    for (int i = 0; i < L->n; i++) {
        const exec_coll *C = &b->coll[i];
        if (L->ins[i].op != PLAN_COLL || C->kind != EXEC_COLL_PARAM_GATHER) continue;
        for (int s = 0; s < C->nseg; s++)
            if (b->reg[C->seg[s].region].scatter_group != C->group) {
                base_errorf(e, "parameters of %s are gathered over a group their gradients were "
                               "not reduce-scattered over",
                            b->reg[C->seg[s].region].name);
                return exec_bind_instr_error(b, i, e);
            }
    }
    /* storage: the optimizer state of the piece the update steps (the whole block without
     * ZeRO); parameters whole unless every pass but the update reads a gathered copy (ZeRO-3: the
     * piece); the kept gradient whole unless micro-batches' reduce-scatters add into it
     * (ZeRO-2/3: the piece) */
    for (int r = 0; r < b->nreg; r++) {
        exec_region *R = &b->reg[r];
        const int64_t lo = R->upd_lo, np = R->upd_hi - R->upd_lo;
        const bool piece = R->param_buf >= 0 && R->gathered && !R->reads_whole && R->scatter_group >= 0;
        if (piece_roles_check(b, R, piece, e)) return -1;
        R->param_lo = piece ? lo : 0;
        R->param_n = piece ? np : R->nstore;
        R->grad_lo = R->grad_piece ? lo : 0;
        R->grad_n = R->grad_piece ? np : R->nstore;
        if (R->param_buf >= 0) b->buf[R->param_buf].bytes = R->param_n * b->ops.param_elem;
        if (R->grad_buf >= 0) b->buf[R->grad_buf].bytes = R->grad_n * b->ops.grad_elem;
        if (R->opt_buf >= 0) b->buf[R->opt_buf].bytes = np * b->ops.opt_elem;
    }
    /* every other gradient buffer is a whole block, of its region or (a tied head's) the
     * embedding's: under ZeRO-2/3 a micro-batch's */
    for (int bb = 0; bb < L->nbufs; bb++) {
        exec_buf *B = &b->buf[bb];
        if (B->role == EXEC_BUF_GRAD && B->region >= 0 && bb != b->reg[B->region].grad_buf)
            B->bytes = b->reg[B->region].nstore * b->ops.grad_elem;
    }
    return 0;
}

/* ---------------------------------------------------------------- data-parallel rank */

/* Which samples the device's micro-batches hold: its position in the group of a gradient
 * reduction of the first region it runs forward (plan_layout.h's exec_dp_rank_find). */
static int read_dp_rank(exec_bind *b, base_error *e)
{
    if (exec_dp_size(&b->p->model, &b->dp_size, e)) return -1;
    b->dp_rank = 0;
    if (b->dp_size == 1) return 0;
    const int r0 = exec_first_forward_region(b->L);
    if (r0 < 0) return 0; /* no forward: no data */
    const exec_region *R = &b->reg[r0];
    const int64_t k = exec_dp_rank_find(b->p, b->L, b->coll, b->holds, r0, R->tp_group,
                                        R->ep_group, R->grad_buf, b->dp_size);
    if (k >= 0) {
        b->dp_rank = k;
        return 0;
    }
    return base_errorf(e, "device %d: the plan has %lld data-parallel replicas but no gradient "
                          "reduction of region %s over a group of %lld devices that all run it, so "
                          "the %s cannot tell which samples this device holds",
                       b->dev, (long long)b->dp_size, R->name, (long long)b->dp_size, b->ops.who);
}

/* ---------------------------------------------------------------- open and close */

int exec_bind_check_device(const plan_set *p, int device, base_error *e)
{
    if (device < 0 || device >= p->ndevices)
        return base_errorf(e, "rank %d has no device: the plan has %d devices; start at most that "
                              "many ranks",
                           device, p->ndevices);
    return 0;
}

int exec_bind_open(exec_bind *b, const plan_set *p, int dev, const exec_cfg *cfg,
                   const exec_bind_ops *ops, base_error *e)
{
    memset(b, 0, sizeof *b);
    if (exec_bind_check_device(p, dev, e)) return -1;
    b->p = p;
    b->dev = dev;
    b->L = plan_dev_list(p, dev);
    b->cfg = cfg;
    b->ops = *ops;
    b->nmb = p->model.num_microbatches > 0 ? p->model.num_microbatches : 1;
    if (read_regions(b, e)) return -1;
    const plan_list *L = b->L;
    b->buf = base_xcalloc((size_t)L->nbufs + 1, sizeof *b->buf);
    for (int bb = 0; bb < L->nbufs; bb++) b->buf[bb].region = -1;
    b->comp = base_xcalloc((size_t)L->n + 1, sizeof *b->comp);
    for (int i = 0; i < L->n; i++) {
        exec_compute *cb = &b->comp[i];
        cb->act = cb->act2 = cb->pb = cb->gb = cb->egb = cb->work = cb->xg = -1;
        cb->sl = exec_bind_slots_none();
    }
    b->coll = base_xcalloc((size_t)L->n + 1, sizeof *b->coll);
    const int64_t nslots = (int64_t)b->nreg * b->nmb * EXEC_NSLOT;
    b->slot_bytes = base_xcalloc((size_t)nslots + 1, sizeof *b->slot_bytes);
    b->slot_last = base_xcalloc((size_t)nslots + 1, sizeof *b->slot_last);
    for (int64_t s = 0; s < nslots; s++) b->slot_last[s] = -1;
    b->act_hold = base_xcalloc((size_t)L->nbufs + 1, sizeof *b->act_hold);
    for (int bb = 0; bb < L->nbufs; bb++) b->act_hold[bb] = -1;
    if (read_computes(b, e) || read_collectives(b, e) || read_dp_rank(b, e)) return -1;
    /* only allocated and freed (or moved by p2p with nothing to read it): the plan's size, so
     * that memory figures stay comparable */
    for (int bb = 0; bb < L->nbufs; bb++)
        if (b->buf[bb].role == EXEC_BUF_NONE) b->buf[bb].bytes = L->bufs[bb].bytes;
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        if ((in->op == PLAN_SEND || in->op == PLAN_RECV) &&
            (in->buf < 0 || b->buf[in->buf].role != EXEC_BUF_COMM)) {
            base_errorf(e, "a %s whose buffer no compute on this device reads or writes",
                        plan_op_name((plan_op)in->op));
            return exec_bind_instr_error(b, i, e);
        }
    }
    return 0;
}

void exec_bind_close(exec_bind *b)
{
    if (!b->p) return;
    if (b->coll)
        for (int i = 0; i < b->L->n; i++) {
            free(b->coll[i].seg);
            free(b->coll[i].piece);
        }
    free(b->coll);
    free(b->comp);
    free(b->buf);
    free(b->slot_bytes);
    free(b->slot_last);
    free(b->act_hold);
    exec_holds_free(b->holds, b->p->ndevices);
    free(b->reg);
    memset(b, 0, sizeof *b);
}
