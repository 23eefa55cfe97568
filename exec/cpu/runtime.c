/* runtime.c — the CPU executor's reading of a plan for one device and its side of the backend:
 * which plan buffer holds what for the kernels (and how big it is in the kernels' layouts), the
 * boundary slots between regions, synthetic data, deterministic parameters, the kernel calls of
 * every compute (forward, backward, recompute, optimizer step, the aux identities), gradient
 * dumps and the memory figures. Communication is backend_mpi.c's. cpu_exec.h says how the plan is
 * read. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cpu_exec.h"

/* ---------------------------------------------------------------- small helpers */

/* A new peak: what makes it up (exec_cpu_print_accounting). */
static void note_peak(exec_cpu *c)
{
    if (c->live <= c->peak) return;
    c->peak = c->live;
    c->at_peak[0] = c->live - c->scratch_live - c->deferred_live;
    c->at_peak[1] = c->slot_live;
    c->at_peak[2] = c->work_live;
    c->at_peak[3] = c->scratch_live - c->slot_live - c->work_live;
    c->at_peak[4] = c->plan_live;
    c->at_peak[5] = c->deferred_live;
}

void *exec_cpu_scratch(exec_cpu *c, size_t bytes)
{
    void *p = calloc(bytes ? bytes : 1, 1);
    if (!p) {
        fprintf(stderr, "piper-exec: out of memory allocating %zu bytes\n", bytes);
        abort();
    }
    c->live += (double)bytes;
    c->scratch_live += (double)bytes;
    note_peak(c);
    return p;
}

void exec_cpu_scratch_free(exec_cpu *c, void *p, size_t bytes)
{
    if (!p) return;
    free(p);
    c->live -= (double)bytes;
    c->scratch_live -= (double)bytes;
}

static const char *buf_name(const exec_cpu *c, int b) { return exec_buf_name(c->L, b); }


static int instr_err(const exec_cpu *c, int i, base_error *e)
{
    return exec_instr_error(c->p, c->dev, i, e);
}

/* ---------------------------------------------------------------- open: reading the plan */

/* Regions: names, kinds, which run here, their TP/EP groups and shards, parameter layouts. */
static int read_regions(exec_cpu *c, base_error *e)
{
    const plan_set *p = c->p;
    c->nreg = p->nregions;
    c->reg = base_xcalloc((size_t)(c->nreg > 0 ? c->nreg : 1), sizeof *c->reg);
    c->embed_region = c->head_region = -1;
    for (int r = 0; r < c->nreg; r++) {
        cpu_region *R = &c->reg[r];
        R->name = p->regions[r];
        R->tp_group = R->ep_group = -1;
        R->param_buf = R->grad_buf = R->opt_buf = -1;
        R->scatter_group = -1;
        if (!R->name || exec_parse_region(R->name, &R->layer, &R->kind))
            return base_errorf(e, "plan region %d is named '%s', which the CPU executor cannot "
                                  "read; it expects embed, head or L<layer>.<kind> with a kind of "
                                  "the kernels (attn, mlp, moe_gate, moe_experts, moe_combine)",
                               r, R->name ? R->name : "(null)");
        if (R->kind == EXEC_EMBED) c->embed_region = r;
        if (R->kind == EXEC_HEAD) c->head_region = r;
    }
    exec_region_place *pl = base_xcalloc((size_t)(c->nreg > 0 ? c->nreg : 1), sizeof *pl);
    int prc = exec_region_places(p, c->dev, c->nreg, pl, e);
    for (int r = 0; r < c->nreg && !prc; r++) {
        c->reg[r].here = pl[r].here;
        c->reg[r].upd = pl[r].upd;
        c->reg[r].tp_group = pl[r].tp_group;
        c->reg[r].ep_group = pl[r].ep_group;
    }
    for (int r = 0; r < c->nreg && !prc; r++) {
        cpu_region *R = &c->reg[r];
        const exec_region_place *P = &pl[r];
        if (!R->here) continue;
        if (exec_shard_init(&c->cfg, P->tp, P->tpr, P->ep, P->epr, &R->sh, e) ||
            exec_shard_set_sp(&c->cfg, &R->sh, exec_sequence_parallel(p, c->dev, r, P->tp_group), e) ||
            exec_region_sizes_get(&c->cfg, &R->sh, R->kind, c->dt, &R->sz, e) ||
            (R->npar = exec_region_params(&c->cfg, &R->sh, R->kind, R->par, e)) < 0) {
            base_error_prefix(e, "region %s on device %d: ", R->name, c->dev);
            prc = -1;
            break;
        }
        R->nkern = R->sz.params;
        R->nstore = R->nkern;
    }
    free(pl);
    if (prc) return -1;
    /* the head's copy of a tied token table lives with the head when the embedding is elsewhere */
    if (c->cfg.tied && c->head_region >= 0 && c->reg[c->head_region].here &&
        (c->embed_region < 0 || !c->reg[c->embed_region].here)) {
        cpu_region *H = &c->reg[c->head_region];
        exec_param ep[EXEC_MAX_REGION_PARAMS];
        if (exec_region_params(&c->cfg, &H->sh, EXEC_EMBED, ep, e) < 0) return -1;
        H->copy = ep[0]; /* "tok", vocab-sharded as the head is */
        H->copy.offset = H->nkern;
        H->ncopy = H->copy.count;
        H->nstore = H->nkern + H->ncopy;
    }
    for (int r = 0; r < c->nreg; r++) {
        c->reg[r].upd_lo = 0;
        c->reg[r].upd_hi = c->reg[r].nstore;
    }
    /* the device's TP group, from any tensor-parallel region */
    int tpg = -1;
    for (int r = 0; r < c->nreg && tpg < 0; r++)
        if (c->reg[r].here) tpg = c->reg[r].tp_group;
    /* which device runs which region: for the collectives' reading */
    c->holds = exec_holds_new(p, c->nreg);
    for (int r = 0; r < c->nreg && tpg >= 0; r++) {
        cpu_region *R = &c->reg[r];
        if (!R->here || R->tp_group >= 0 || exec_group_pos(p, tpg, c->dev) == 0) continue;
        R->tp_copy = exec_group_holds(p, c->holds, tpg, r);
    }
    return 0;
}

static int set_role(exec_cpu *c, int i, int b, exec_buf_role role, int region, int64_t bytes,
                    base_error *e)
{
    const exec_buf *B = &c->buf[b];
    if (exec_buf_set_role(&c->buf[b], role, region, bytes)) {
        base_errorf(e, "buffer %d (%s) is used as two different things (regions %s and %s); the "
                       "CPU executor gives a buffer one role",
                    b, buf_name(c, b), B->region >= 0 ? c->reg[B->region].name : "-",
                    region >= 0 ? c->reg[region].name : "-");
        return instr_err(c, i, e);
    }
    return 0;
}

/* exec_match_act_mode's split: the CPU kernels' layout of one region in the executor's dtype. */
typedef struct cpu_split_ctx {
    const exec_cpu *c;
    const cpu_region *R;
} cpu_split_ctx;

static int cpu_act_split(const void *ctx, exec_act_mode mode, int64_t *kept, int64_t *rebuilt,
                         base_error *e)
{
    const cpu_split_ctx *x = ctx;
    return exec_region_act_split(&x->c->cfg, &x->R->sh, x->R->kind, x->c->dt, mode, kept, rebuilt,
                                 e);
}

/* Each region's recompute mode: the exec_act_mode whose split of the kernels' act buffer is the
 * plan's sizes (its F's activation buffer and its R's), so that what F keeps and what R rebuilds
 * are the plan's tensors. A region without R keeps everything; one whose sizes match no mode
 * keeps everything in F's buffer and again in R's. A sequence-parallel region is not recomputed
 * here: it keeps its device's tokens only (kernels.h, exec_shard.sp). */
static int act_modes(exec_cpu *c, base_error *e)
{
    for (int r = 0; r < c->nreg; r++) {
        cpu_region *R = &c->reg[r];
        R->act_mode = EXEC_ACT_ALL;
        R->act_kept = R->act_rebuilt = R->sz.act_bytes;
        if (!R->here) continue;
        int64_t fb, rb;
        exec_plan_act_bytes(c->L, r, &fb, &rb);
        if (rb < 0) continue; /* no recompute */
        if (R->sh.sp)
            return base_errorf(e, "region %s is sequence-parallel and recomputed; the CPU "
                                  "kernels do not recompute under sequence parallelism yet: "
                                  "drop the recompute or sequence_parallel",
                               R->name);
        const cpu_split_ctx x = {c, R};
        if (exec_match_act_mode(fb, rb, cpu_act_split, &x, &R->act_mode, &R->act_kept,
                                &R->act_rebuilt, e))
            return -1;
    }
    return 0;
}

/* The bytes of a pass's workspace (ir/cost.c's ir_region_work_bytes plus what sched/sizes.c adds):
 * the kernels' work buffer, then, from the next multiple of 8, what the pass computes and does
 * not keep: a forward under recompute the part only R keeps, a recompute the region's output
 * (and a gate's route). */
static int64_t pass_work_bytes(const exec_cpu *c, const cpu_region *R, plan_pass pass,
                               const cpu_bind *b)
{
    bool fwd = pass == PLAN_PASS_F || pass == PLAN_PASS_R;
    int64_t w = fwd ? R->sz.work_f_bytes : R->sz.work_bytes, extra = 0;
    if (pass == PLAN_PASS_F && R->act_mode != EXEC_ACT_ALL) extra = R->act_rebuilt;
    if (pass == PLAN_PASS_R) /* the outputs no boundary buffer takes */
        extra = (b->sl.yb < 0 ? R->sz.y * (int64_t)c->es : 0) +
                (R->kind == EXEC_MOE_GATE && b->sl.y2b < 0 ? R->sz.route_bytes : 0);
    return extra ? exec_work_extra_at(w) + extra : w;
}

/* Buffer roles and the bindings of every compute. */
static int read_computes(exec_cpu *c, base_error *e)
{
    const plan_set *p = c->p;
    const plan_list *L = c->L;
    const size_t es = c->es;
    /* ZeRO-3: comm buffers that an all-gather of a region's parameter buffer fills hold the
     * region's whole parameters, which the kernels read instead of the device's piece */
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        if (in->op != PLAN_COLL || in->coll != PLAN_ALL_GATHER || in->nreads < 1 || in->nreads > 2 ||
            in->nwrites != 1 || L->bufs[in->reads[0]].mem != PLAN_MEM_PARAM ||
            L->bufs[in->writes[0]].mem != PLAN_MEM_COMM || in->region < 0 || in->region >= c->nreg)
            continue;
        exec_buf *B = &c->buf[in->writes[0]];
        B->role = EXEC_BUF_GATHERED;
        B->region = in->region;
        B->bytes = c->reg[in->region].nstore * (int64_t)es;
        /* a second parameter buffer: the head's gather carries the embedding's token table */
        if (in->nreads == 2) {
            if (L->bufs[in->reads[1]].mem != PLAN_MEM_PARAM || c->reg[in->region].kind != EXEC_HEAD ||
                !c->cfg.tied || c->embed_region < 0 || !c->reg[c->embed_region].here) {
                base_errorf(e, "an all-gather of two parameter buffers that is not the head's "
                               "gather of the tied token table");
                return instr_err(c, i, e);
            }
            B->table = true;
            B->bytes += c->reg[c->embed_region].par[0].count * (int64_t)es;
        }
    }
    exec_mark_saved_gathers(p, c->dev, c->buf);
    if (act_modes(c, e)) return -1;
    int *act_cur = base_xcalloc((size_t)(c->nreg * c->nmb + 1), sizeof *act_cur);
    int *act_rec = base_xcalloc((size_t)(c->nreg * c->nmb + 1), sizeof *act_rec);
    exec_region_kind *kinds = base_xcalloc((size_t)(c->nreg + 1), sizeof *kinds);
    for (int r = 0; r < c->nreg; r++) kinds[r] = c->reg[r].kind;
    uint8_t *wk = base_xcalloc((size_t)L->nbufs + 1, 1);
    exec_work_kinds(L, kinds, c->nreg, wk);
    for (int64_t k = 0; k < c->nreg * c->nmb; k++) act_cur[k] = act_rec[k] = -1;
    int rc = 0;
    for (int i = 0; i < L->n && !rc; i++) {
        const plan_instr *in = &L->ins[i];
        if (in->op != PLAN_COMPUTE) continue;
        cpu_bind *b = &c->bind[i];
        b->act = b->act2 = b->pb = b->gb = b->egb = b->work = -1;
        b->sl = exec_bind_slots_none();
        b->xg = -1;
        b->region = in->region;
        b->mb = in->mb;
        const char *kid = exec_compute_kid(p, in);
        b->aux = exec_aux_kind(kid);
        if (b->aux == 1) continue;
        if (b->aux == 2) {
            if (in->mb < 0 || in->mb >= c->nmb) {
                base_errorf(e, "aux.aux_loss without a micro-batch in [0, %lld)", (long long)c->nmb);
                rc = instr_err(c, i, e);
            }
            continue;
        }
        b->k = exec_kernel_find(kid);
        if (!b->k) {
            base_errorf(e, "kernel identity '%s' is unknown to the CPU backend; the plan was "
                           "written by a newer compiler, or the table lacks it",
                        kid ? kid : "(none)");
            rc = instr_err(c, i, e);
            break;
        }
        int r = in->region;
        if (r < 0 || r >= c->nreg || b->k->kind != (int)c->reg[r].kind ||
            b->k->family != (c->cfg.gpt ? 0 : 1)) {
            base_errorf(e, "kernel %s does not fit region %s of the %s model", kid,
                        r >= 0 && r < c->nreg ? c->reg[r].name : "(none)",
                        c->cfg.gpt ? "gpt" : "llama");
            rc = instr_err(c, i, e);
            break;
        }
        cpu_region *R = &c->reg[r];
        plan_pass pass = (plan_pass)in->pass;
        bool fwd = pass == PLAN_PASS_F || pass == PLAN_PASS_R;
        bool bwd = pass == PLAN_PASS_B || pass == PLAN_PASS_BI || pass == PLAN_PASS_BW;
        if ((fwd || bwd) && (in->mb < 0 || in->mb >= c->nmb)) {
            base_errorf(e, "a %s pass needs a micro-batch in [0, %lld)", plan_pass_name(pass),
                        (long long)c->nmb);
            rc = instr_err(c, i, e);
            break;
        }
        int mb = in->mb;
        int64_t xbytes = (R->kind == EXEC_EMBED ? 4 : (int64_t)es) * R->sz.x;
        int64_t ybytes = (int64_t)es * R->sz.y;
        for (int side = 0; side < 2 && !rc; side++) {
            int n = side == 0 ? in->nreads : in->nwrites;
            const int32_t *v = side == 0 ? in->reads : in->writes;
            for (int q = 0; q < n && !rc; q++) {
                int bb = v[q];
                plan_mem m = (plan_mem)L->bufs[bb].mem;
                if (m == PLAN_MEM_PARAM) {
                    rc = set_role(c, i, bb, EXEC_BUF_PARAM, r, 0, e);
                    if (!rc && R->param_buf >= 0 && R->param_buf != bb) {
                        base_errorf(e, "region %s has two parameter buffers (%s and %s)", R->name,
                                    buf_name(c, R->param_buf), buf_name(c, bb));
                        rc = instr_err(c, i, e);
                    }
                    R->param_buf = bb;
                } else if (m == PLAN_MEM_GRAD) {
                    /* the optimizer step reads the kept gradient; a backward adds into its own
                     * (the same buffer, or under ZeRO-2/3 its micro-batch's whole gradient), and
                     * a tied head's second one is the embedding's */
                    bool embed = b->gb >= 0 && bwd && side == 1 && R->kind == EXEC_HEAD &&
                                 c->cfg.tied && c->embed_region >= 0;
                    rc = set_role(c, i, bb, EXEC_BUF_GRAD, embed ? c->embed_region : r, 0, e);
                    if (pass == PLAN_PASS_UPD) R->grad_buf = bb;
                    else if (embed) b->egb = bb;
                    else if (bwd && side == 1) b->gb = bb;
                } else if (m == PLAN_MEM_OPT) {
                    rc = set_role(c, i, bb, EXEC_BUF_OPT, r, 0, e);
                    R->opt_buf = bb;
                } else if (m == PLAN_MEM_ACT) {
                    if (pass == PLAN_PASS_UPD) continue;
                    if (fwd && side == 1 && pass == PLAN_PASS_R && R->act_mode != EXEC_ACT_ALL) {
                        /* what R rebuilds; F's buffer (what it kept) stays the act */
                        rc = set_role(c, i, bb, EXEC_BUF_ACT, r, R->act_rebuilt, e);
                        act_rec[r * c->nmb + mb] = bb;
                        b->act2 = bb;
                    } else if (fwd && side == 1) {
                        rc = set_role(c, i, bb, EXEC_BUF_ACT, r, R->act_kept, e);
                        act_cur[r * c->nmb + mb] = bb;
                        if (pass == PLAN_PASS_F) act_rec[r * c->nmb + mb] = -1;
                        b->act = bb;
                    } else if (bwd && side == 0) {
                        /* the latest act a forward or recompute of (r, mb) wrote */
                        int cur = act_cur[r * c->nmb + mb];
                        if (bb == cur || b->act < 0) b->act = cur >= 0 ? cur : bb;
                    }
                } else if (c->buf[bb].role == EXEC_BUF_GATHERED) {
                    if (c->buf[bb].region != r || side != 0) {
                        base_errorf(e, "%s uses the gathered parameters of region %s", kid,
                                    c->reg[c->buf[bb].region].name);
                        rc = instr_err(c, i, e);
                    }
                    b->pb = bb;
                    R->gathered = true;
                } else if (c->buf[bb].saved_gather) {
                    /* sequence parallelism: the kept norm shards, gathered for the backward */
                    if (!bwd || side != 0 || c->buf[bb].region != r) {
                        base_errorf(e, "%s uses buffer %s, the re-gathered norm shards of region "
                                       "%s; only that region's backward reads them",
                                    kid, buf_name(c, bb), c->buf[bb].region >= 0 ? c->reg[c->buf[bb].region].name : "-");
                        rc = instr_err(c, i, e);
                    } else {
                        rc = set_role(c, i, bb, EXEC_BUF_COMM, r, 2 * (int64_t)es * R->sz.x, e);
                        b->xg = bb;
                    }
                } else if (m == PLAN_MEM_WORK && wk[bb] == EXEC_WORK_SPACE) {
                    /* the pass's workspace (a BW reads its BI's) */
                    b->work = bb; /* sized below, once the outputs are bound */
                } else { /* comm or a workspace-category buffer between regions: a boundary tensor */
                    bool route = m == PLAN_MEM_WORK && wk[bb] == EXEC_WORK_ROUTE;
                    int64_t sz = route ? R->sz.route_bytes
                                       : fwd ? (side == 0 ? xbytes : ybytes) : (side == 0 ? ybytes : xbytes);
                    rc = set_role(c, i, bb, EXEC_BUF_COMM, r, sz, e);
                    int *dst = exec_bind_boundary(&b->sl, fwd, side, route);
                    if (*dst >= 0) {
                        base_errorf(e, "%s reads or writes more than one communication buffer on "
                                       "one side (%s and %s); the CPU executor knows one input and "
                                       "one output per pass",
                                    kid, buf_name(c, *dst), buf_name(c, bb));
                        rc = instr_err(c, i, e);
                    }
                    *dst = bb;
                }
            }
        }
        if (!rc && b->work >= 0 && pass != PLAN_PASS_BW)
            rc = set_role(c, i, b->work, EXEC_BUF_WORK, r, pass_work_bytes(c, R, pass, b), e);
        if (rc) break;
        if (pass == PLAN_PASS_UPD) {
            if (R->param_buf < 0 || R->grad_buf < 0 || R->opt_buf < 0) {
                base_errorf(e, "the optimizer step of %s does not name its parameter, gradient and "
                               "optimizer buffers",
                            R->name);
                rc = instr_err(c, i, e);
            }
            continue;
        }
        /* a pass that reads the parameter buffer itself needs it whole */
        if ((fwd || bwd) && b->pb < 0 && R->param_buf >= 0) R->reads_whole = true;
        if (pass == PLAN_PASS_R && R->act_mode != EXEC_ACT_ALL) b->act = act_cur[r * c->nmb + mb];
        if (bwd) b->act2 = act_rec[r * c->nmb + mb];
        if (pass == PLAN_PASS_R && R->act_mode != EXEC_ACT_ALL &&
            ((b->act < 0 && R->act_mode != EXEC_ACT_NONE) || b->act2 < 0)) {
            base_errorf(e, "the recompute of %s (micro-batch %d) has no forward before it on this "
                           "device, or writes no activation buffer",
                        R->name, mb);
            rc = instr_err(c, i, e);
            break;
        }
        if (fwd && b->act < 0) {
            base_errorf(e, "the %s pass of %s writes no activation buffer; the kernels keep their "
                           "saved tensors there",
                        plan_pass_name(pass), R->name);
            rc = instr_err(c, i, e);
            break;
        }
        if (R->kind == EXEC_HEAD && c->cfg.tied && !R->ncopy && c->embed_region >= 0 && (fwd || bwd)) {
            /* the head reads the embedding's token table; under ZeRO-3 only a gathered copy of it
             * is whole, and the plan must gather it for the head (with the head's parameters) */
            bool gathered = false;
            for (int q = 0; q < c->L->nbufs; q++)
                gathered |= c->buf[q].role == EXEC_BUF_GATHERED && c->buf[q].region == c->embed_region;
            if (!(b->pb >= 0 && c->buf[b->pb].table)) c->reg[c->embed_region].reads_whole = true;
            if (gathered && (b->pb < 0 || !c->buf[b->pb].table)) {
                base_errorf(e, "the head uses the tied token table, whose parameters are ZeRO-3 "
                               "shards gathered for the embedding only; the plan does not gather "
                               "them for the head (a compiler gap), so the head would read stale "
                               "weights");
                rc = instr_err(c, i, e);
                break;
            }
        }
        if (bwd && b->act < 0) b->act = act_cur[r * c->nmb + mb];
        /* the backward reads what F kept (its input, or all but the attention core), which the
         * plan frees right after R (sched/lower.c): hold it until the backward has run */
        if (bwd && (R->act_mode == EXEC_ACT_INPUT || R->act_mode == EXEC_ACT_SELECTIVE) &&
            b->act >= 0)
            c->act_hold[b->act] = i;
        if (bwd && b->act < 0) {
            base_errorf(e, "the backward of %s (micro-batch %d) runs before any forward of it on "
                           "this device",
                        R->name, mb);
            rc = instr_err(c, i, e);
            break;
        }
        /* boundary slots where no comm buffer carries the tensor */
        if ((rc = exec_bind_slots_fill(kinds, c->nreg, c->nmb, r, mb, pass, R->name, &b->sl, e))) {
            rc = instr_err(c, i, e);
            break;
        }
        /* under full recompute R rebuilds from the input F kept (the first piece of its act
         * buffer), not from the boundary slot, which may go after the forward (the plan keeps the
         * input once: ir/cost.c's region_input_bytes) */
        if (pass == PLAN_PASS_R && (R->act_mode == EXEC_ACT_INPUT || R->act_mode == EXEC_ACT_SELECTIVE)) {
            b->sl.xs = -1;
            if (R->kind == EXEC_MOE_COMBINE) b->sl.x2s = -1; /* the route follows in act */
        }
        /* slot sizes and last readers */
        exec_slots_note_reads(&b->sl, i, (exec_slot_sizes){xbytes, ybytes, R->sz.route_bytes},
                              c->slot_last, c->slot_bytes);
    }
    free(act_cur);
    free(act_rec);
    free(kinds);
    free(wk);
    if (rc) return -1;
    /* outputs into slots: the size is what the next region reads; a slot written and never read
     * on this device means the tensor had nowhere to go */
    for (int i = 0; i < L->n; i++) {
        const cpu_bind *b = &c->bind[i];
        if (L->ins[i].op != PLAN_COMPUTE || b->aux || !b->k) continue;
        const cpu_region *R = &c->reg[b->region];
        const exec_slot_sizes sz = {(int64_t)c->es * R->sz.x, (int64_t)c->es * R->sz.y,
                                    R->sz.route_bytes};
        if (exec_slots_check_writes(c->p, c->nmb, b->region, &b->sl, sz, c->slot_last,
                                    c->slot_bytes, e))
            return instr_err(c, i, e);
    }
    return 0;
}

/* Collectives: what each one reduces or gathers, ZeRO shards, and the sizes of comm buffers that
 * only collectives touch. */
static int read_collectives(exec_cpu *c, base_error *e)
{
    const plan_set *p = c->p;
    const plan_list *L = c->L;
    exec_coll_sizes(p, c->dev, c->buf); /* sizes through activation collectives */
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        if (in->op != PLAN_COLL) continue;
        exec_coll *C = &c->coll[i];
        if (exec_coll_open(p, c->dev, i, C, e)) return instr_err(c, i, e);
        if (in->nreads == 0 && in->nwrites == 0 && in->buf < 0) {
            if (in->coll != PLAN_ALL_REDUCE) {
                base_errorf(e, "a %s without buffers; the CPU executor reads a bufferless "
                               "collective as the sum of a scalar (the gradient norm)",
                            plan_coll_name((plan_coll)in->coll));
                return instr_err(c, i, e);
            }
            C->kind = EXEC_COLL_SCALAR;
            continue;
        }
        int ib = in->nreads > 0 ? in->reads[0] : in->buf;
        plan_mem m = (plan_mem)L->bufs[ib].mem;
        if (m == PLAN_MEM_COMM || m == PLAN_MEM_ACT) {
            C->kind = EXEC_COLL_ACT;
            C->in = ib;
            C->out = in->nwrites > 0 ? in->writes[0] : ib;
            if (in->nreads > 1 || in->nwrites > 1) {
                base_errorf(e, "an activation collective over several buffers; the CPU executor "
                               "moves one");
                return instr_err(c, i, e);
            }
            if (!c->buf[C->in].bytes || !c->buf[C->out].bytes) {
                base_errorf(e, "no compute on this device tells the size of buffer %s",
                            buf_name(c, c->buf[C->in].bytes ? C->out : C->in));
                return instr_err(c, i, e);
            }
            continue;
        }
        if (m != PLAN_MEM_GRAD && m != PLAN_MEM_PARAM) {
            base_errorf(e, "a collective over %s buffers; the CPU executor knows activations, "
                           "gradients and parameters",
                        plan_mem_name(m));
            return instr_err(c, i, e);
        }
        bool grads = m == PLAN_MEM_GRAD;
        C->seg = base_xcalloc((size_t)in->nreads * EXEC_MAX_REGION_PARAMS + 1, sizeof *C->seg);
        int64_t total = 0;
        for (int q = 0; q < in->nreads; q++) {
            int bb = in->reads[q];
            const exec_buf *B = &c->buf[bb];
            if (B->role != (grads ? EXEC_BUF_GRAD : EXEC_BUF_PARAM) || B->region < 0) {
                base_errorf(e, "buffer %s of a %s collective is not a region's %s buffer",
                            buf_name(c, bb), grads ? "gradient" : "parameter",
                            grads ? "gradient" : "parameter");
                return instr_err(c, i, e);
            }
            int r = B->region;
            cpu_region *R = &c->reg[r];
            bool whole_group = exec_group_holds(p, c->holds, C->group, r);
            const int seg0 = C->nseg;
            if (in->coll == PLAN_ALL_REDUCE && grads && C->group == R->tp_group) {
                /* TP sync: the tensors every TP rank holds whole */
                for (int t = 0; t < R->npar; t++)
                    if (R->par[t].replicated)
                        C->seg[C->nseg++] = exec_seg_at(r, R->par[t].offset, R->par[t].count);
            } else if (in->coll == PLAN_ALL_REDUCE && grads && !whole_group) {
                /* the tied-embedding pair: the token table on both sides */
                if (R->kind == EXEC_EMBED && c->cfg.tied)
                    C->seg[C->nseg++] = exec_seg_at(r, R->par[0].offset, R->par[0].count);
                else if (R->kind == EXEC_HEAD && R->ncopy)
                    C->seg[C->nseg++] = exec_seg_at(r, R->copy.offset, R->ncopy);
                else {
                    base_errorf(e, "region %s's gradient is summed over group %s, which has members "
                                   "without the region, and it is not a tied embedding",
                                R->name, p->groups[C->group].name ? p->groups[C->group].name : "?");
                    return instr_err(c, i, e);
                }
            } else if (in->coll == PLAN_ALL_REDUCE && grads && C->group == R->ep_group) {
                base_errorf(e, "the plan sums region %s's gradients over its expert-parallel group "
                               "%s, whose members hold different experts; expert gradients may be "
                               "summed only over devices that hold the same experts (none when the "
                               "expert- and data-parallel degrees are equal): the compiler should "
                               "leave them out of this reduction",
                            R->name, p->groups[C->group].name ? p->groups[C->group].name : "?");
                return instr_err(c, i, e);
            } else if (C->group == R->tp_group || C->group == R->ep_group) {
                base_errorf(e, "%s of region %s's %s over its own TP/EP group; the CPU executor "
                               "supports ZeRO over data-parallel groups only",
                            plan_coll_name((plan_coll)in->coll), R->name,
                            grads ? "gradients" : "parameters");
                return instr_err(c, i, e);
            } else {
                C->seg[C->nseg++] = exec_seg_at(r, 0, R->nstore);
                if (in->coll == PLAN_ALL_REDUCE && grads && C->grank > 0) R->norm_skip = true;
            }
            int piece = grads ? exec_grad_segs_bind(C, seg0, in, bb, c->buf, r, R->grad_buf) : 0;
            if (piece < 0) {
                base_errorf(e, "a reduce-scatter of %s's whole gradient (%s) writes no buffer "
                               "that the region's optimizer step reads; the executor cannot "
                               "tell where the device's piece goes",
                            R->name, buf_name(c, bb));
                return instr_err(c, i, e);
            }
            if (piece) R->grad_piece = true;
        }
        for (int s = 0; s < C->nseg; s++) total += C->seg[s].n;
        if (in->coll == PLAN_ALL_REDUCE && grads) {
            C->kind = EXEC_COLL_GRAD_SUM;
            /* the plan's bytes must be what we sum: a check of this reading of the plan */
            int64_t copies = 0;
            for (int s = 0; s < C->nseg; s++)
                if (C->seg[s].off == 0 && C->seg[s].n == c->reg[C->seg[s].region].nstore)
                    copies += c->reg[C->seg[s].region].ncopy;
            if (exec_check_bucket_bytes(p, in, total, copies, "executor", e)) return instr_err(c, i, e);
        } else if (in->coll == PLAN_REDUCE_SCATTER && grads) {
            C->kind = EXEC_COLL_GRAD_SCATTER;
            int64_t pieces = 0; /* elements: every rank's receive buffer has the largest pieces */
            for (int s = 0; s < C->nseg; s++) {
                cpu_region *R = &c->reg[C->seg[s].region];
                R->scatter_group = C->group;
                exec_zero_piece(R->nstore, C->grank, C->gsize, &R->upd_lo, &R->upd_hi);
                pieces += (C->seg[s].n + C->gsize - 1) / C->gsize;
            }
            /* the plan's receive buffer of the pieces (sched/lower.c), when it names one */
            if (in->buf >= 0 &&
                set_role(c, i, in->buf, EXEC_BUF_COMM, C->seg[0].region, pieces * (int64_t)c->es, e))
                return -1;
        } else if (in->coll == PLAN_ALL_GATHER && !grads) {
            C->kind = EXEC_COLL_PARAM_GATHER;
            if (!(in->nwrites == 1 && c->buf[in->writes[0]].role == EXEC_BUF_GATHERED))
                for (int s = 0; s < C->nseg; s++) c->reg[C->seg[s].region].reads_whole = true;
            if (in->nwrites == 1 && c->buf[in->writes[0]].role == EXEC_BUF_GATHERED) {
                C->out = in->writes[0];
                if (c->buf[C->out].table) {
                    /* [head's parameters | the embedding's token table] */
                    const cpu_region *E = &c->reg[c->embed_region];
                    if (C->nseg != 2 || C->seg[0].region != in->region || C->seg[1].region != c->embed_region) {
                        base_errorf(e, "the head's gather of the tied token table reads buffers "
                                       "other than the head's and the embedding's parameters");
                        return instr_err(c, i, e);
                    }
                    C->seg[1] = exec_seg_at(c->embed_region, E->par[0].offset, E->par[0].count);
                } else if (C->nseg != 1) {
                    base_errorf(e, "a ZeRO-3 gather of %d regions; the CPU executor gathers one", C->nseg);
                    return instr_err(c, i, e);
                }
            }
        } else {
            base_errorf(e, "a %s of %s; the CPU executor knows all-reduce and reduce-scatter of "
                           "gradients and all-gather of parameters",
                        plan_coll_name((plan_coll)in->coll), grads ? "gradients" : "parameters");
            return instr_err(c, i, e);
        }
    }
    /* a parameter all-gather sends the pieces the reduce-scatter gave */
    for (int i = 0; i < L->n; i++) {
        exec_coll *C = &c->coll[i];
        if (L->ins[i].op != PLAN_COLL || C->kind != EXEC_COLL_PARAM_GATHER) continue;
        for (int s = 0; s < C->nseg; s++) {
            const cpu_region *R = &c->reg[C->seg[s].region];
            if (R->scatter_group != C->group) {
                base_errorf(e, "parameters of %s are gathered over a group their gradients were "
                               "not reduce-scattered over (ZeRO-3 is not supported yet by the CPU "
                               "executor)",
                            R->name);
                return instr_err(c, i, e);
            }
        }
    }
    /* a sharded region keeps the optimizer state of its piece only; a whole one of all */
    for (int r = 0; r < c->nreg; r++) {
        cpu_region *R = &c->reg[r];
        if (R->opt_buf >= 0) c->buf[R->opt_buf].bytes = 2 * (R->upd_hi - R->upd_lo) * (int64_t)c->es;
        /* parameters the kernels read only from gathered buffers: the device's piece, which the
         * gathers send and the optimizer step updates */
        bool piece = R->param_buf >= 0 && R->gathered && !R->reads_whole && R->scatter_group >= 0;
        R->param_lo = piece ? R->upd_lo : 0;
        if (R->param_buf >= 0)
            c->buf[R->param_buf].bytes = (piece ? R->upd_hi - R->upd_lo : R->nstore) * (int64_t)c->es;
        R->grad_lo = R->grad_piece ? R->upd_lo : 0;
        if (R->grad_buf >= 0)
            c->buf[R->grad_buf].bytes = (R->grad_piece ? R->upd_hi - R->upd_lo : R->nstore) * (int64_t)c->es;
    }
    /* every other gradient buffer is a whole one, of its region or (a tied head's) the
     * embedding's: under ZeRO-2/3 a micro-batch's */
    for (int b = 0; b < L->nbufs; b++) {
        exec_buf *B = &c->buf[b];
        if (B->role == EXEC_BUF_GRAD && B->region >= 0 && b != c->reg[B->region].grad_buf)
            B->bytes = c->reg[B->region].nstore * (int64_t)c->es;
    }
    return 0;
}

/* Which samples the device's micro-batches hold (cpu_exec.h). */
static int read_dp_rank(exec_cpu *c, base_error *e)
{
    const plan_set *p = c->p;
    if (exec_dp_size(&p->model, &c->dp_size, e)) return -1;
    c->dp_rank = 0;
    if (c->dp_size == 1) return 0;
    int r0 = exec_first_forward_region(c->L);
    if (r0 < 0) return 0; /* no forward: no data */
    const cpu_region *R = &c->reg[r0];
    int64_t k = exec_dp_rank_find(p, c->L, c->coll, c->holds, r0, R->tp_group, R->ep_group,
                                  R->grad_buf, c->dp_size);
    if (k >= 0) {
        c->dp_rank = k;
        return 0;
    }
    return base_errorf(e, "device %d: the plan has %lld data-parallel replicas but no gradient "
                          "reduction of region %s over a group of %lld devices that all run it, so "
                          "the executor cannot tell which samples this device holds",
                       c->dev, (long long)c->dp_size, R->name, (long long)c->dp_size);
}

int exec_cpu_open(exec_cpu **out, const plan_set *p, int device, int world,
                  const exec_cpu_options *o, base_error *e)
{
    *out = NULL;
    if (device < 0 || device >= p->ndevices)
        return base_errorf(e, "rank %d has no device: the plan has %d devices; start at most that "
                              "many ranks",
                           device, p->ndevices);
    exec_cpu *c = base_xcalloc(1, sizeof *c);
    c->p = p;
    c->dev = device;
    c->world = world;
    c->L = plan_dev_list(p, device);
    c->o = *o;
    c->head_comm = -1;
    c->p2p = c->fail = MPI_COMM_NULL;
    c->fail_req = MPI_REQUEST_NULL;
    c->dt = o->dtype >= 0 ? (plan_dtype)o->dtype : (plan_dtype)p->act_dtype;
    int rc = 0;
    if (c->dt != PLAN_FP32 && c->dt != PLAN_FP64) {
        rc = base_errorf(e, "the plan's activations are %s; the CPU executor runs fp32 or fp64: "
                            "compile the program with `dtype: fp32`, or pass --dtype fp32",
                         plan_dtype_name(c->dt));
        goto done;
    }
    c->es = c->dt == PLAN_FP32 ? 4 : 8;
    c->mdt = c->dt == PLAN_FP32 ? MPI_FLOAT : MPI_DOUBLE;
    /* the kernels keep gradients in their own dtype (a program's grad_dtype wider than its dtype
     * changes the plan's bytes, not what runs here): say so once, as the bytes will differ */
    if (device == 0 && p->grad_dtype != c->dt)
        fprintf(stderr, "piper-exec: note: the plan keeps gradients in %s; the CPU executor keeps them "
                        "in %s, its dtype, so its gradient bytes differ from the plan's\n",
                plan_dtype_name((plan_dtype)p->grad_dtype), plan_dtype_name(c->dt));
    if ((rc = exec_cfg_from_plan(&p->model, o->seed, &c->cfg, e))) goto done;
    c->nmb = p->model.num_microbatches > 0 ? p->model.num_microbatches : 1;
    c->T = c->cfg.b * c->cfg.s;
    if ((rc = read_regions(c, e))) goto done;
    c->buf = base_xcalloc((size_t)(c->L->nbufs + 1), sizeof *c->buf);
    for (int b = 0; b < c->L->nbufs; b++) c->buf[b].region = -1;
    c->bind = base_xcalloc((size_t)(c->L->n + 1), sizeof *c->bind);
    c->coll = base_xcalloc((size_t)(c->L->n + 1), sizeof *c->coll);
    int64_t nslots = (int64_t)c->nreg * c->nmb * EXEC_NSLOT;
    c->slot = base_xcalloc((size_t)nslots + 1, sizeof *c->slot);
    c->slot_bytes = base_xcalloc((size_t)nslots + 1, sizeof *c->slot_bytes);
    c->slot_last = base_xcalloc((size_t)nslots + 1, sizeof *c->slot_last);
    for (int64_t s = 0; s < nslots; s++) c->slot_last[s] = -1;
    c->work = base_xcalloc((size_t)(c->nreg * c->nmb) + 1, sizeof *c->work);
    c->act_hold = base_xcalloc((size_t)c->L->nbufs + 1, sizeof *c->act_hold);
    c->hold_done = base_xcalloc((size_t)c->L->nbufs + 1, sizeof *c->hold_done);
    c->deferred = base_xcalloc((size_t)c->L->nbufs + 1, sizeof *c->deferred);
    for (int b = 0; b < c->L->nbufs; b++) c->act_hold[b] = -1;
    if ((rc = read_computes(c, e)) || (rc = read_collectives(c, e)) || (rc = read_dp_rank(c, e)))
        goto done;
    /* the loss is the mean over every token of the step; each micro-batch's MoE aux loss counts
     * 1 / (micro-batches in the step) */
    c->cfg.loss_scale = 1.0 / (double)(p->model.global_batch * c->cfg.s);
    c->cfg.aux_weight = 1.0 / (double)(c->nmb * c->dp_size);
    for (int b = 0; b < c->L->nbufs; b++)
        if (c->buf[b].role == EXEC_BUF_NONE) {
            /* only allocated and freed (or moved by p2p with nothing to read it): keep the plan's
             * size so memory figures stay comparable */
            c->buf[b].bytes = c->L->bufs[b].bytes;
        }
    /* MPI tags are bounded (at least 32767); checked here, before any rank starts the collective
     * set-up, so that a refusal stops every rank cleanly */
    int *ub = NULL, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    int tag_ub = flag && ub ? *ub : 32767;
    for (int i = 0; i < c->L->n; i++) {
        const plan_instr *in = &c->L->ins[i];
        if ((in->op == PLAN_SEND || in->op == PLAN_RECV) && (in->tag < 0 || in->tag > tag_ub)) {
            base_errorf(e, "tag %d is beyond this MPI's limit %d", in->tag, tag_ub);
            rc = instr_err(c, i, e);
            goto done;
        }
        if ((in->op == PLAN_SEND || in->op == PLAN_RECV) &&
            (in->buf < 0 || c->buf[in->buf].role != EXEC_BUF_COMM)) {
            base_errorf(e, "a %s whose buffer no compute on this device reads or writes",
                        plan_op_name((plan_op)in->op));
            rc = instr_err(c, i, e);
            goto done;
        }
    }
    c->tokens = base_xcalloc((size_t)c->nmb, sizeof *c->tokens);
    c->targets = base_xcalloc((size_t)c->nmb, sizeof *c->targets);
    for (int64_t k = 0; k < c->nmb; k++) {
        c->tokens[k] = base_xcalloc((size_t)c->T, sizeof(int32_t));
        c->targets[k] = base_xcalloc((size_t)c->T, sizeof(int32_t));
    }
    c->gate_out = base_xcalloc((size_t)c->nmb, sizeof *c->gate_out);
done:
    if (rc) {
        exec_cpu_close(c);
        return -1;
    }
    *out = c;
    return 0;
}

void exec_cpu_close(exec_cpu *c)
{
    if (!c) return;
    exec_cpu_disconnect(c);
    if (c->buf)
        for (int b = 0; b < c->L->nbufs; b++) free(c->buf[b].p);
    free(c->buf);
    if (c->coll)
        for (int i = 0; i < c->L->n; i++) free(c->coll[i].seg);
    free(c->coll);
    free(c->bind);
    if (c->slot)
        for (int64_t s = 0; s < (int64_t)c->nreg * c->nmb * EXEC_NSLOT; s++) free(c->slot[s]);
    free(c->slot);
    free(c->slot_bytes);
    free(c->slot_last);
    if (c->work)
        for (int64_t k = 0; k < (int64_t)c->nreg * c->nmb; k++) free(c->work[k]);
    free(c->work);
    free(c->act_hold);
    free(c->hold_done);
    free(c->deferred);
    exec_holds_free(c->holds, c->p->ndevices);
    if (c->tokens)
        for (int64_t k = 0; k < c->nmb; k++) {
            free(c->tokens[k]);
            free(c->targets[k]);
        }
    free(c->tokens);
    free(c->targets);
    free(c->gate_out);
    free(c->reg);
    if (c->dump) fclose(c->dump);
    free(c);
}

/* ---------------------------------------------------------------- buffers */

static int init_params(exec_cpu *c, cpu_region *R, char *dst, base_error *e)
{
    char name[160];
    for (int t = 0; t < R->npar; t++) {
        snprintf(name, sizeof name, "%s.%s", R->name, R->par[t].name);
        if (exec_param_init(c->cfg.seed, name, &R->par[t], c->dt, dst + R->par[t].offset * c->es, e))
            return -1;
    }
    if (R->ncopy) {
        /* the same name as the embedding's own table, so both copies start equal */
        const char *en = c->embed_region >= 0 ? c->reg[c->embed_region].name : "embed";
        snprintf(name, sizeof name, "%s.%s", en, R->copy.name);
        if (exec_param_init(c->cfg.seed, name, &R->copy, c->dt, dst + R->copy.offset * c->es, e))
            return -1;
    }
    return 0;
}

int exec_cpu_alloc(exec_cpu *c, int b, int64_t plan_bytes, base_error *e)
{
    exec_buf *B = &c->buf[b];
    if (B->live) return base_errorf(e, "buffer %s is already live", buf_name(c, b));
    if (!B->p) B->p = calloc((size_t)(B->bytes ? B->bytes : 1), 1);
    if (!B->p) return base_errorf(e, "out of memory allocating %lld bytes for %s", (long long)B->bytes, buf_name(c, b));
    if (B->role == EXEC_BUF_GRAD) memset(B->p, 0, (size_t)B->bytes);
    if (B->role == EXEC_BUF_PARAM && !B->init) {
        /* initial values are a function of the global index: the whole block, then the piece */
        const cpu_region *R = &c->reg[B->region];
        char *all = R->param_lo || B->bytes < R->nstore * (int64_t)c->es
                        ? base_xcalloc((size_t)(R->nstore ? R->nstore : 1), c->es)
                        : B->p;
        int irc = init_params(c, &c->reg[B->region], all, e);
        if (all != B->p) {
            if (!irc) memcpy(B->p, all + (size_t)R->param_lo * c->es, (size_t)B->bytes);
            free(all);
        }
        if (irc) return -1;
        B->init = true;
    }
    B->live = true;
    c->live += (double)B->bytes;
    c->plan_live += (double)plan_bytes;
    note_peak(c);
    if (c->plan_live > c->plan_peak) c->plan_peak = c->plan_live;
    return 0;
}

static void release_now(exec_cpu *c, int b)
{
    exec_buf *B = &c->buf[b];
    B->live = false;
    c->live -= (double)B->bytes;
    if (B->role != EXEC_BUF_PARAM && B->role != EXEC_BUF_GRAD && B->role != EXEC_BUF_OPT) {
        free(B->p);
        B->p = NULL;
    }
}

int exec_cpu_release(exec_cpu *c, int b, base_error *e)
{
    exec_buf *B = &c->buf[b];
    if (!B->live || c->deferred[b]) return base_errorf(e, "buffer %s is not live", buf_name(c, b));
    if (c->act_hold[b] >= 0 && !c->hold_done[b]) {
        /* a backward still reads what F kept (full recompute: the region input); the plan frees
         * it after the recomputation, the executor after that backward */
        c->deferred[b] = true;
        c->deferred_live += (double)B->bytes;
        c->plan_live -= (double)c->L->bufs[b].bytes;
        return 0;
    }
    B->live = false;
    c->live -= (double)B->bytes;
    c->plan_live -= (double)c->L->bufs[b].bytes;
    if (B->role != EXEC_BUF_PARAM && B->role != EXEC_BUF_GRAD && B->role != EXEC_BUF_OPT) {
        free(B->p);
        B->p = NULL;
    }
    return 0;
}

char *exec_cpu_buf(exec_cpu *c, int b, const char *what, base_error *e)
{
    if (b < 0 || b >= c->L->nbufs) {
        base_errorf(e, "%s: no buffer", what);
        return NULL;
    }
    if (!c->buf[b].live || !c->buf[b].p) {
        base_errorf(e, "%s: buffer %d (%s) is not live; the plan uses it outside its "
                       "alloc/free",
                    what, b, buf_name(c, b));
        return NULL;
    }
    return c->buf[b].p;
}

static char *slot_get(exec_cpu *c, int s, bool create, const char *what, base_error *e)
{
    if (!c->slot[s] && create) {
        c->slot_live += (double)c->slot_bytes[s];
        c->slot[s] = exec_cpu_scratch(c, (size_t)c->slot_bytes[s]);
    }
    if (!c->slot[s]) {
        int r = (int)(s / EXEC_NSLOT / c->nmb), mb = (int)(s / EXEC_NSLOT % c->nmb);
        base_errorf(e, "%s of region %s, micro-batch %d, was never produced on this device: "
                       "its producer has not run (or runs elsewhere with no transfer)",
                    what, c->reg[r].name, mb);
    }
    return c->slot[s];
}

static void slot_drop(exec_cpu *c, int s)
{
    if (c->slot[s]) c->slot_live -= (double)c->slot_bytes[s];
    exec_cpu_scratch_free(c, c->slot[s], (size_t)c->slot_bytes[s]);
    c->slot[s] = NULL;
}

void exec_cpu_print_memory(const exec_cpu *c, FILE *f)
{
    double plan[PLAN_NMEM] = {0}, mine[PLAN_NMEM] = {0};
    for (int b = 0; b < c->L->nbufs; b++) {
        int m = c->L->bufs[b].mem < PLAN_NMEM ? c->L->bufs[b].mem : PLAN_MEM_COMM;
        plan[m] += (double)c->L->bufs[b].bytes;
        mine[m] += (double)c->buf[b].bytes;
    }
    fprintf(f, "device %d buffers, plan / executor:", c->dev);
    for (int m = 0; m < PLAN_NMEM; m++) {
        char a[32], b[32];
        fprintf(f, " %s %s / %s;", plan_mem_name((plan_mem)m), base_fmt_bytes(plan[m], a, sizeof a),
                base_fmt_bytes(mine[m], b, sizeof b));
    }
    fprintf(f, " plus boundary tensors between regions (%lld bytes per region and micro-batch)\n",
            (long long)(c->T * c->cfg.h * (int64_t)c->es));
    /* the kernels keep what the plan sizes: name any activation buffer that differs */
    for (int b = 0; b < c->L->nbufs; b++)
        if (c->L->bufs[b].mem == PLAN_MEM_ACT && c->buf[b].role == EXEC_BUF_ACT &&
            c->buf[b].bytes != c->L->bufs[b].bytes)
            fprintf(f, "device %d: activation buffer %s holds %lld bytes, the plan sizes %lld\n",
                    c->dev, buf_name(c, b), (long long)c->buf[b].bytes,
                    (long long)c->L->bufs[b].bytes);
}

void exec_cpu_print_accounting(const exec_cpu *c, FILE *f)
{
    double plan[PLAN_NMEM] = {0}, mine[PLAN_NMEM] = {0};
    for (int b = 0; b < c->L->nbufs; b++) {
        int m = c->L->bufs[b].mem < PLAN_NMEM ? c->L->bufs[b].mem : PLAN_MEM_COMM;
        plan[m] += (double)c->L->bufs[b].bytes;
        mine[m] += (double)c->buf[b].bytes;
    }
    fprintf(f,
            "device %d accounting, step %lld, executor / plan (bytes): params %.0f / %.0f; grads %.0f / %.0f; "
            "communicated %.0f / %.0f; peak %.0f / %.0f\n",
            c->dev, (long long)c->step, mine[PLAN_MEM_PARAM], plan[PLAN_MEM_PARAM], mine[PLAN_MEM_GRAD],
            plan[PLAN_MEM_GRAD], c->comm_bytes, c->plan_comm_bytes, c->peak, c->plan_peak);
    fprintf(f,
            "device %d peak composition (bytes): plan buffers %.0f, boundary slots %.0f, kernel work "
            "%.0f, other scratch %.0f, kept past the plan's free %.0f; the plan's live bytes then "
            "%.0f; work peak %.0f\n",
            c->dev, c->at_peak[0], c->at_peak[1], c->at_peak[2], c->at_peak[3], c->at_peak[5],
            c->at_peak[4], c->work_peak);
}

/* ---------------------------------------------------------------- dumps */

/* Writes the elements [lo, hi) of a region's storage, tensor by tensor, with their indices in the
 * global tensors: "T name ndims d0 d1 d2 n" then n lines "index value". */
static void dump_region(exec_cpu *c, FILE *f, const cpu_region *R, const char *data, int64_t lo,
                        int64_t hi)
{
    for (int t = 0; t <= R->npar; t++) {
        const exec_param *P = t < R->npar ? &R->par[t] : (R->ncopy ? &R->copy : NULL);
        if (!P) break;
        int64_t a = P->offset > lo ? P->offset : lo, b = P->offset + P->count < hi ? P->offset + P->count : hi;
        if (a >= b) continue;
        const char *rn = t < R->npar ? R->name : (c->embed_region >= 0 ? c->reg[c->embed_region].name : "embed");
        fprintf(f, "T %s.%s %lld %lld %lld %lld\n", rn, P->name, (long long)P->dim[0],
                (long long)P->dim[1], (long long)P->dim[2], (long long)(b - a));
        for (int64_t k = a; k < b; k++) {
            int64_t i = k - P->offset;
            int64_t i2 = i % P->len[2], i1 = i / P->len[2] % P->len[1], i0 = i / P->len[2] / P->len[1];
            int64_t g = ((P->off[0] + i0) * P->dim[1] + P->off[1] + i1) * P->dim[2] + P->off[2] + i2;
            double v = c->dt == PLAN_FP32 ? (double)((const float *)data)[k] : ((const double *)data)[k];
            fprintf(f, "%lld %.17g\n", (long long)g, v);
        }
    }
}

static int open_dump(exec_cpu *c, const char *dir, const char *what, FILE **f, base_error *e)
{
    if (mkdir(dir, 0777) && errno != EEXIST)
        return base_errorf(e, "cannot create directory %s: %s", dir, strerror(errno));
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.dev%d.txt", dir, what, c->dev);
    *f = fopen(path, "w");
    if (!*f) return base_errorf(e, "cannot write %s: %s", path, strerror(errno));
    fprintf(*f, "# piper-exec %s of device %d (%s), step %lld\n", what, c->dev,
            plan_dtype_name(c->dt), (long long)c->step);
    return 0;
}

int exec_cpu_dump_params(exec_cpu *c, const char *dir, base_error *e)
{
    FILE *f;
    if (open_dump(c, dir, "params", &f, e)) return -1;
    for (int r = 0; r < c->nreg; r++) {
        const cpu_region *R = &c->reg[r];
        if (!R->upd || R->param_buf < 0 || !c->buf[R->param_buf].p) continue;
        dump_region(c, f, R, cpu_region_params(c, R, c->buf[R->param_buf].p), R->upd_lo, R->upd_hi);
    }
    if (fclose(f)) return base_errorf(e, "writing the parameter dump of device %d failed", c->dev);
    return 0;
}

/* ---------------------------------------------------------------- computes */

static int run_upd(exec_cpu *c, int i, const plan_instr *in, cpu_region *R, base_error *e)
{
    char *param = cpu_region_params(c, R, exec_cpu_buf(c, R->param_buf, "the parameters", e));
    char *grad = param ? cpu_region_grads(c, R, exec_cpu_buf(c, R->grad_buf, "the gradients", e)) : NULL;
    char *opt = grad ? exec_cpu_buf(c, R->opt_buf, "the optimizer state", e) : NULL;
    if (!opt) return -1;
    const int64_t lo = R->upd_lo, hi = R->upd_hi, n = hi - lo;
    const size_t es = c->es;
    if (c->dump && c->step == 1) dump_region(c, c->dump, R, grad, lo, hi);
    exec_optim o = c->o.optim;
    o.t = c->step;
    o.grad_scale = 1.0;
    if (c->have_norm && c->o.grad_clip > 0) o.grad_scale = exec_clip_coef(sqrt(c->norm_sq), c->o.grad_clip);
    char *m = opt, *v = opt + (size_t)n * es;
    int64_t a = lo, b = hi < R->nkern ? hi : R->nkern;
    if (a < b) {
        exec_call call;
        memset(&call, 0, sizeof call);
        call.cfg = &c->cfg;
        call.shard = &R->sh;
        call.dtype = c->dt;
        call.layer = R->layer;
        call.step = c->step;
        call.opt = &o;
        call.param = param + (size_t)a * es;
        call.grad = grad + (size_t)a * es;
        call.opt_m = m;
        call.opt_v = v;
        call.upd_off = a;
        call.upd_n = b - a;
        if (exec_kernel_run(c->bind[i].k, &call, e)) return -1;
    }
    /* the tied token table's copy: a matrix, so it decays like the embedding's own */
    a = lo > R->nkern ? lo : R->nkern;
    if (a < hi) {
        size_t k = (size_t)(a - lo);
        if (c->dt == PLAN_FP32) {
            if (o.kind == EXEC_ADAMW)
                exec_adamw_f32((float *)param + a, (float *)grad + a, (float *)m + k, (float *)v + k, hi - a, &o, true);
            else
                exec_sgd_f32((float *)param + a, (float *)grad + a, hi - a, &o, true);
        } else {
            if (o.kind == EXEC_ADAMW)
                exec_adamw_f64((double *)param + a, (double *)grad + a, (double *)m + k, (double *)v + k, hi - a, &o, true);
            else
                exec_sgd_f64((double *)param + a, (double *)grad + a, hi - a, &o, true);
        }
    }
    (void)in;
    return 0;
}

/* The local part of the squared global norm: each gradient element counted once in the world
 * (ZeRO: the device's piece; replicas: the first; TP-replicated tensors: the first TP rank; the
 * tied copy: on the embedding's side). */
static int run_grad_norm(exec_cpu *c, base_error *e)
{
    double s = 0;
    for (int r = 0; r < c->nreg; r++) {
        const cpu_region *R = &c->reg[r];
        if (!R->upd || R->norm_skip || R->tp_copy) continue;
        const char *g = cpu_region_grads(c, R, exec_cpu_buf(c, R->grad_buf, "the gradients", e));
        if (!g) return -1;
        for (int t = 0; t < R->npar; t++) {
            const exec_param *P = &R->par[t];
            if (P->replicated && !R->sh.first) continue;
            int64_t a = P->offset > R->upd_lo ? P->offset : R->upd_lo;
            int64_t b = P->offset + P->count < R->upd_hi ? P->offset + P->count : R->upd_hi;
            if (a >= b) continue;
            s += c->dt == PLAN_FP32 ? exec_sumsq_f32((const float *)g + a, b - a)
                                    : exec_sumsq_f64((const double *)g + a, b - a);
        }
    }
    c->norm_sq = s;
    c->have_norm = true;
    return 0;
}

int exec_cpu_compute(exec_cpu *c, int i, const plan_instr *in, base_error *e)
{
    const cpu_bind *b = &c->bind[i];
    if (b->aux == 1) return run_grad_norm(c, e);
    if (b->aux == 2) {
        /* the step's aux loss is summed from the gates' outputs; the identity checks the sum */
        exec_call call;
        memset(&call, 0, sizeof call);
        double out = 0;
        call.out = &out;
        call.nin = 1;
        call.scalars_in = &c->gate_out[b->mb];
        call.cfg = &c->cfg;
        exec_shard sh;
        memset(&sh, 0, sizeof sh);
        call.shard = &sh;
        call.dtype = c->dt;
        return exec_kernel_run_id("aux.aux_loss", &call, e);
    }
    cpu_region *R = &c->reg[b->region];
    if (in->pass == PLAN_PASS_UPD) return run_upd(c, i, in, R, e);
    const size_t es = c->es;
    exec_call call;
    memset(&call, 0, sizeof call);
    call.cfg = &c->cfg;
    call.shard = &R->sh;
    call.dtype = c->dt;
    call.layer = R->layer;
    call.step = c->step;
    call.sample0 = (c->dp_rank * c->nmb + b->mb) * c->cfg.b;
    double out = 0;
    call.out = &out;
    if (b->pb >= 0) {
        if (!(call.param = exec_cpu_buf(c, b->pb, "the gathered parameters", e))) return -1;
    } else if (R->param_buf >= 0 && !(call.param = exec_cpu_buf(c, R->param_buf, "the parameters", e))) {
        return -1;
    }
    bool bwd = in->pass == PLAN_PASS_B || in->pass == PLAN_PASS_BI || in->pass == PLAN_PASS_BW;
    const int gb = b->gb >= 0 ? b->gb : R->grad_buf;
    if (bwd && gb >= 0 && !(call.grad = exec_cpu_buf(c, gb, "the gradients", e))) return -1;
    /* F keeps nothing under EXEC_ACT_NONE: R and the backward read R's buffer only (F's, empty,
     * may be gone) */
    const bool act_in_act2 = R->act_mode == EXEC_ACT_NONE && in->pass != PLAN_PASS_F;
    if (!act_in_act2 && !(call.act = exec_cpu_buf(c, b->act, "the saved activations", e))) return -1;
    /* under recompute: R writes (and a backward reads) the rebuilt part; F computes it too, in a
     * transient buffer, since only what it keeps outlives it */
    call.act_mode = (int)R->act_mode;
    /* the kernels' work buffer: the plan's workspace of the pass (a BW's is its BI's), whose
     * second part holds what the pass computes and does not keep (pass_work_bytes) */
    const bool fwd_pass = in->pass == PLAN_PASS_F || in->pass == PLAN_PASS_R;
    const size_t wbytes = (size_t)(fwd_pass ? R->sz.work_f_bytes : R->sz.work_bytes);
    char *plan_work = NULL, *extra = NULL;
    if (b->work >= 0) {
        if (!(plan_work = exec_cpu_buf(c, b->work, "the workspace", e))) return -1;
        extra = plan_work + exec_work_extra_at((int64_t)wbytes);
    }
    char *act2_scratch = NULL;
    const size_t act2_bytes = R->act_mode != EXEC_ACT_ALL ? (size_t)R->act_rebuilt : 0;
    if (act2_bytes && b->act2 >= 0) {
        if (!(call.act2 = exec_cpu_buf(c, b->act2, "the rebuilt activations", e))) return -1;
    } else if (act2_bytes && in->pass == PLAN_PASS_F) {
        call.act2 = extra ? extra : (act2_scratch = exec_cpu_scratch(c, act2_bytes));
    }
    /* without a plan workspace (a plan written without them): the executor's own, for the pass
     * only, except that BI's lives until its BW */
    char **held = &c->work[b->region * c->nmb + b->mb];
    char *work = NULL;
    if (plan_work) {
        call.work = plan_work;
    } else if (wbytes && in->pass == PLAN_PASS_BW) {
        if (!*held)
            return base_errorf(e, "the BW pass of %s (micro-batch %d) runs without its BI before "
                                  "it on this device",
                               R->name, b->mb);
        work = *held;
    } else if (wbytes) {
        if (in->pass == PLAN_PASS_BI && *held)
            return base_errorf(e, "a second BI of %s (micro-batch %d) before its BW", R->name, b->mb);
        c->work_live += (double)wbytes;
        if (c->work_live > c->work_peak) c->work_peak = c->work_live;
        work = exec_cpu_scratch(c, wbytes);
        if (in->pass == PLAN_PASS_BI) *held = work;
    }
    if (!plan_work) call.work = work;
    if (R->kind == EXEC_HEAD && c->cfg.tied) {
        if (R->ncopy) {
            call.lm_w = (char *)call.param + (size_t)R->nkern * es;
            if (call.grad) call.lm_grad = (char *)call.grad + (size_t)R->nkern * es;
        } else {
            const cpu_region *E = &c->reg[c->embed_region];
            if (b->pb >= 0 && c->buf[b->pb].table) {
                /* ZeRO-3: the gathered table follows the head's gathered parameters */
                call.lm_w = (char *)call.param + (size_t)R->nkern * es;
            } else {
                char *ep = exec_cpu_buf(c, E->param_buf, "the embedding's token table", e);
                if (!ep) return -1;
                call.lm_w = ep + (size_t)E->par[0].offset * es;
            }
            if (bwd) {
                char *eg = exec_cpu_buf(c, b->egb >= 0 ? b->egb : E->grad_buf, "the embedding's gradients", e);
                if (!eg) return -1;
                call.lm_grad = eg + (size_t)E->par[0].offset * es;
            }
        }
    }
    if (R->kind == EXEC_HEAD && R->sh.tp > 1) {
        call.reduce = exec_cpu_head_reduce;
        call.reduce_ctx = c;
    }
    if (R->kind == EXEC_EMBED) call.tokens = c->tokens[b->mb];
    if (R->kind == EXEC_HEAD) call.targets = c->targets[b->mb];
    /* inputs and outputs: comm buffers, else slots */
    char *scratch_y = NULL, *scratch_y2 = NULL;
    if (b->sl.xb >= 0 && !(call.x = exec_cpu_buf(c, b->sl.xb, "the input", e))) return -1;
    if (b->sl.xs >= 0 && !(call.x = slot_get(c, b->sl.xs, false, "the input", e))) return -1;
    if (b->sl.x2s >= 0 && !(call.x2 = slot_get(c, b->sl.x2s, false, "the route", e))) return -1;
    if (b->sl.x2b >= 0 && !(call.x2 = exec_cpu_buf(c, b->sl.x2b, "the route", e))) return -1;
    if (b->sl.y2b >= 0 && !(call.y2 = exec_cpu_buf(c, b->sl.y2b, "the route", e))) return -1;
    if (b->sl.dy2b >= 0 && !(call.dy2 = exec_cpu_buf(c, b->sl.dy2b, "the route gradient", e))) return -1;
    if (b->sl.dx2b >= 0 && !(call.dx2 = exec_cpu_buf(c, b->sl.dx2b, "the route gradient", e))) return -1;
    if (b->sl.yb >= 0 && !(call.y = exec_cpu_buf(c, b->sl.yb, "the output", e))) return -1;
    if (b->sl.ys >= 0 && !(call.y = slot_get(c, b->sl.ys, true, "the output", e))) return -1;
    if (b->sl.y2s >= 0 && !(call.y2 = slot_get(c, b->sl.y2s, true, "the route", e))) return -1;
    if (in->pass == PLAN_PASS_R) {
        /* a recomputation rebuilds the saved tensors; its outputs were consumed already */
        if (R->kind != EXEC_HEAD && !call.y)
            call.y = extra ? extra : (scratch_y = exec_cpu_scratch(c, (size_t)R->sz.y * es));
        if (R->kind == EXEC_MOE_GATE && !call.y2)
            call.y2 = extra ? extra + (b->sl.yb < 0 ? (size_t)R->sz.y * es : 0)
                            : (scratch_y2 = exec_cpu_scratch(c, (size_t)R->sz.route_bytes));
    }
    if (b->sl.dyb >= 0 && !(call.dy = exec_cpu_buf(c, b->sl.dyb, "the output gradient", e))) return -1;
    if (b->xg >= 0 && !(call.xg = exec_cpu_buf(c, b->xg, "the gathered norm shards", e))) return -1;
    if (b->sl.dys >= 0 && !(call.dy = slot_get(c, b->sl.dys, false, "the output gradient", e))) return -1;
    if (b->sl.dy2s >= 0 && !(call.dy2 = slot_get(c, b->sl.dy2s, false, "the route gradient", e))) return -1;
    if (b->sl.dxb >= 0 && !(call.dx = exec_cpu_buf(c, b->sl.dxb, "the input gradient", e))) return -1;
    if (b->sl.dxs >= 0 && !(call.dx = slot_get(c, b->sl.dxs, true, "the input gradient", e))) return -1;
    if (b->sl.dx2s >= 0 && !(call.dx2 = slot_get(c, b->sl.dx2s, true, "the route gradient", e))) return -1;
    if (act_in_act2) call.act = call.act2;
    if (in->pass == PLAN_PASS_R &&
        (R->act_mode == EXEC_ACT_INPUT || R->act_mode == EXEC_ACT_SELECTIVE)) {
        /* the input F kept leads its act buffer (selective recompute keeps it with all but the
         * attention core); the combine's route follows its expert outputs */
        if (!call.x) call.x = call.act;
        if (R->kind == EXEC_MOE_COMBINE && !call.x2) call.x2 = (char *)call.act + (size_t)R->sz.x * es;
    }
    int rc = exec_kernel_run(b->k, &call, e);
    if (!act_in_act2 && b->act >= 0 && c->act_hold[b->act] == i) {
        c->hold_done[b->act] = true;
        if (c->deferred[b->act]) {
            c->deferred[b->act] = false;
            c->deferred_live -= (double)c->buf[b->act].bytes;
            release_now(c, b->act);
        }
    }
    if (act2_scratch) exec_cpu_scratch_free(c, act2_scratch, act2_bytes);
    if (work && in->pass != PLAN_PASS_BI) {
        exec_cpu_scratch_free(c, work, wbytes);
        c->work_live -= (double)wbytes;
        if (in->pass == PLAN_PASS_BW) *held = NULL;
    }
    if (scratch_y) exec_cpu_scratch_free(c, scratch_y, (size_t)R->sz.y * es);
    if (scratch_y2) exec_cpu_scratch_free(c, scratch_y2, (size_t)R->sz.route_bytes);
    if (rc) return -1;
    if (in->pass == PLAN_PASS_F) {
        if (R->kind == EXEC_HEAD && !R->tp_copy) c->loss += out;
        if (R->kind == EXEC_MOE_GATE && !R->tp_copy) {
            c->gate_out[b->mb] += out;
            c->aux_loss += c->cfg.aux_weight * out;
        }
    }
    const int reads[] = {b->sl.xs, b->sl.x2s, b->sl.dys, b->sl.dy2s};
    for (size_t q = 0; q < BASE_COUNT(reads); q++)
        if (reads[q] >= 0 && c->slot_last[reads[q]] == i) slot_drop(c, reads[q]);
    return 0;
}

/* ---------------------------------------------------------------- the step */

int exec_cpu_step(exec_cpu *c, exec_interp *it, int64_t step, exec_cpu_step_stats *st,
                  base_error *e)
{
    memset(st, 0, sizeof *st);
    c->step = step;
    c->loss = c->aux_loss = c->norm_sq = 0;
    c->have_norm = false;
    c->live = c->peak = c->plan_live = c->plan_peak = c->work_live = c->work_peak = 0;
    c->scratch_live = c->slot_live = c->deferred_live = 0;
    memset(c->hold_done, 0, (size_t)c->L->nbufs * sizeof *c->hold_done);
    memset(c->deferred, 0, (size_t)c->L->nbufs * sizeof *c->deferred);
    memset(c->at_peak, 0, sizeof c->at_peak);
    c->comm_bytes = c->plan_comm_bytes = 0;
    for (int64_t k = 0; k < c->nmb; k++) c->gate_out[k] = 0;
    /* every device of a replica draws the same samples: sample = (dp rank x m + mb) x b + row */
    for (int64_t k = 0; k < c->nmb; k++)
        for (int64_t t = 0; t < c->T; t++) {
            int64_t sample = (c->dp_rank * c->nmb + k) * c->cfg.b + t / c->cfg.s, pos = t % c->cfg.s;
            if (c->o.data) {
                c->tokens[k][t] = exec_data_token(c->o.data, c->cfg.seed, step, sample, pos);
                c->targets[k][t] = exec_data_token(c->o.data, c->cfg.seed, step, sample, pos + 1);
            } else {
                c->tokens[k][t] = exec_synthetic_token(c->cfg.seed, step, sample, pos, c->cfg.vocab);
                c->targets[k][t] = exec_synthetic_token(c->cfg.seed, step, sample, pos + 1, c->cfg.vocab);
            }
        }
    if (c->o.dump_grads && step == 1 && open_dump(c, c->o.dump_grads, "grads", &c->dump, e)) return -1;
    double t0 = exec_now();
    int rc = exec_interp_run(it, c->o.timeout_s, e);
    st->seconds = exec_now() - t0;
    if (c->dump) {
        if (fclose(c->dump) && !rc) rc = base_errorf(e, "writing the gradient dump of device %d failed", c->dev);
        c->dump = NULL;
    }
    if (rc) return -1;
    /* what the plan left live (parameters, gradients, optimizer state) is live again next step;
     * transient buffers it did not free are dropped */
    for (int b = 0; b < c->L->nbufs; b++) {
        exec_buf *B = &c->buf[b];
        if (!B->live) continue;
        B->live = false;
        if (B->role != EXEC_BUF_PARAM && B->role != EXEC_BUF_GRAD && B->role != EXEC_BUF_OPT) {
            free(B->p);
            B->p = NULL;
        }
    }
    for (int64_t s = 0; s < (int64_t)c->nreg * c->nmb * EXEC_NSLOT; s++)
        if (c->slot[s]) slot_drop(c, (int)s);
    for (int64_t k = 0; k < (int64_t)c->nreg * c->nmb; k++)
        if (c->work[k]) { /* a BI whose BW the plan never ran */
            exec_cpu_scratch_free(c, c->work[k], (size_t)c->reg[k / c->nmb].sz.work_bytes);
            c->work_live -= (double)c->reg[k / c->nmb].sz.work_bytes;
            c->work[k] = NULL;
        }
    st->loss = c->loss;
    st->aux_loss = c->aux_loss;
    st->grad_norm = c->have_norm ? c->norm_sq : -1;
    st->peak = c->peak;
    st->plan_peak = c->plan_peak;
    return 0;
}
