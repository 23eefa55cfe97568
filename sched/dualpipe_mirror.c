/* dualpipe_mirror.c — the DAG side of DeepSeek-V3's DualPipe: two pipelines over the same p
 * ranks, fed from opposite ends with half the micro-batches each.
 *
 * The program annotates p stages and places stage i on rank i, as for 1F1B. This pass makes the
 * second pipeline: the per-micro-batch work of micro-batches m/2..m-1 of stage i becomes stage
 * p+i and moves to the placement of stage p-1-i, so the reverse pipeline enters at rank p-1 and
 * leaves at rank 0 (the layout SCHED_LAYOUT_MIRROR: rank r holds stages r and 2p-1-r). Micro-
 * batch numbers are kept, so each direction reads its own half of the batch and the two losses
 * together are the loss over all m micro-batches, as on one device.
 *
 * A mirrored stage is a replica of its original, not a new model part: it keeps the region (so
 * the same parameter names, hence the same initial values in the executors), gets its own
 * optimizer update on its own placement (own parameter, gradient and optimizer buffers), and
 * the two updates first sum their gradients with a pair all-reduce (sched_insert_pair_sum, as
 * tied embeddings do), so both copies take the same step and stay identical. The gradient norm
 * reads each pair once: the original's summed gradient.
 *
 * Expert and data parallelism inside the stages (shard with stream ep, replicate with zero 0 or
 * 1, DeepSeek-V3's setting) come along: their collectives are relative to a node's placement (ir_place: DP rank = position
 * / tp, EP groups = runs of ep DP ranks), so a moved per-micro-batch all-to-all runs on the
 * mirror devices at the same positions, and each stage's per-step data-parallel gradient
 * reductions (the buckets: ZeRO-0's all-reduces, ZeRO-1's reduce-scatters and the all-gathers
 * of the updated pieces) are copied onto the mirror's placement, fed by the mirror's gradients
 * (parameters), around the copied updates. The pair sum then adds position j of stage i to
 * position j of its mirror: the same replica of the same experts, hence under ZeRO-1 the same
 * piece of the reduced gradient.
 *
 * Runs once the placement directives are done and before the sends and receives are made, so
 * that fix_p2p connects the mirrored pipeline like any other. Tensor parallelism, ZeRO-2/3, and tied
 * embeddings (whose two copies would each meet a mirror: four copies to sum) are refused with a
 * clear error. */
#include "schedule.h"

#include <string.h>

static bool supported_op(const ir_node *n)
{
    switch ((ir_op)n->op) {
    case IR_OP_F:
    case IR_OP_B:
    case IR_OP_BI:
    case IR_OP_BW:
    case IR_OP_R:
    case IR_OP_UPD:
    case IR_OP_GRAD_NORM:
    case IR_OP_AUX_LOSS: return true;
    case IR_OP_ALL_REDUCE: /* the gradient norm's, and data-parallel gradient buckets */
        return n->coll_group == IR_CG_WORLD ||
               (n->coll_group == IR_CG_DP && (n->flags & IR_NODE_DP_SYNC));
    case IR_OP_REDUCE_SCATTER: /* ZeRO-1: per-step buckets, and the updated pieces' gathers */
    case IR_OP_ALL_GATHER:
        return (n->coll_group == IR_CG_DP || n->coll_group == IR_CG_EDP) &&
               (n->flags & IR_NODE_DP_SYNC) && !(n->flags & IR_NODE_PER_MB);
    case IR_OP_ALL_TO_ALL: return n->coll_group == IR_CG_EP; /* tokens to their experts */
    default: return false;
    }
}

int sched_dualpipe_mirror(sched_ctx *x, const ir_directive *d, base_error *e)
{
    ir_dag *g = x->g;
    const ir_program *prog = x->prog;
    int p = (int)(prog->ann.npp_ranges ? prog->ann.npp_ranges : prog->ann.pp_stages);
    int m = g->num_microbatches > 0 ? (int)g->num_microbatches : 1;
    if (p < 1)
        return sched_dir_error(d, e, "dualpipe needs pipeline stages, but the program annotates "
                                     "none; add annotations: {pp: N} (one stage per rank) and "
                                     "place each stage");
    int *place_of = base_arena_calloc(&x->scratch, (size_t)p, sizeof *place_of);
    for (int s = 0; s < p; s++) place_of[s] = -1;
    int rc = 0;
    for (size_t v = 0; v < g->nnodes && !rc; v++) {
        const ir_node *n = &g->nodes[v];
        if (n->dead) continue;
        char lbl[96];
        if (!supported_op(n) || n->tp > 1 || n->dp > 2) {
            rc = sched_dir_error(d, e, "dualpipe supports pipeline, expert and data parallelism "
                                       "(replicate with zero 0 or 1) so far, but '%s' belongs to "
                                       "tensor parallelism or ZeRO-2/3; drop those directives "
                                       "and annotations, use zero 0 or 1, or use dualpipev",
                                 ir_node_label(g, (int32_t)v, lbl, sizeof lbl));
            break;
        }
        if (!(n->flags & IR_NODE_PER_MB)) continue;
        if (n->stage < 0 || n->stage >= p) {
            rc = sched_dir_error(d, e, "'%s' has no pipeline stage 0-%d; annotate pp: %d",
                                 ir_node_label(g, (int32_t)v, lbl, sizeof lbl), p - 1, p);
            break;
        }
        if (place_of[n->stage] < 0) place_of[n->stage] = n->place;
        else if (place_of[n->stage] != n->place)
            rc = sched_dir_error(d, e, "stage %d runs on several device groups; dualpipe places "
                                       "each stage whole: {op: place, filter: {PP: %d}, ...}",
                                 n->stage, n->stage);
    }
    for (int s = 0; s < p && !rc; s++) {
        if (place_of[s] < 0)
            rc = sched_dir_error(d, e, "stage %d has no forward or backward work; check the PP "
                                       "annotation", s);
        for (int q = 0; q < s && !rc; q++)
            if (place_of[q] == place_of[s])
                rc = sched_dir_error(d, e, "dualpipe takes one stage per rank and makes the "
                                           "mirrored stages itself, but stages %d and %d run on "
                                           "the same devices; annotate pp: <number of ranks> "
                                           "and place stage i on rank i",
                                     q, s);
    }
    if (rc) return rc;
    /* the builder's preconditions (p even, m even, m >= 2p), with its messages */
    sched_params sp = {.p = p, .m = m};
    sched_table t;
    char why[512];
    int bad = sched_build_dualpipe(false, &sp, &t, why, sizeof why);
    if (!bad) sched_table_free(&t);
    if (bad) return sched_dir_error(d, e, "%s", why);
    if (g->model->tied_embeddings)
        return sched_dir_error(d, e, "dualpipe with tied embeddings is not supported yet: both "
                                     "ends of both pipelines would hold a copy of the shared "
                                     "weight (four copies to sum); use a model with "
                                     "tied_embeddings: false, or dualpipev");

    /* the reverse pipeline: micro-batches m/2..m-1, stage i -> p+i on stage p-1-i's devices */
    size_t n0 = g->nnodes;
    for (size_t v = 0; v < n0; v++) {
        ir_node *n = &g->nodes[v];
        if (n->dead || !(n->flags & IR_NODE_PER_MB) || n->mb < m / 2) continue;
        int s = n->stage;
        n->stage = p + s;
        n->place = place_of[p - 1 - s];
    }

    /* one update per mirrored region on the mirror's devices, fed by the mirror's gradients */
    ir_dag_build_adjacency(g);
    size_t ne0 = g->nedges;
    BASE_VEC(int32_t) orig = {0};
    BASE_VEC(int32_t) copy = {0};
    /* and one copy of each data-parallel gradient bucket (per step, between the gradients and
     * the updates); `orig`/`copy` hold both kinds, `upd_o`/`upd_c` the updates alone */
    BASE_VEC(int32_t) orig_out = {0}, copy_out = {0}; /* a bucket's reduced gradient, and its copy's */
    BASE_VEC(int32_t) upd_o = {0}, upd_c = {0};
    for (size_t v = 0; v < n0; v++) {
        const ir_node *n = &g->nodes[v];
        bool upd = n->op == IR_OP_UPD;
        /* a per-step bucket: ZeRO-0's all-reduce, ZeRO-1's reduce-scatter (and the all-gather
         * of the updated pieces after the step, which reads the update's parameters) */
        bool bucket = (n->op == IR_OP_ALL_REDUCE || n->op == IR_OP_REDUCE_SCATTER ||
                       n->op == IR_OP_ALL_GATHER) &&
                      (n->flags & IR_NODE_DP_SYNC) && !(n->flags & IR_NODE_PER_MB) &&
                      (n->coll_group == IR_CG_DP || n->coll_group == IR_CG_EDP);
        if (n->dead || !(upd || bucket)) continue;
        int s = n->stage;
        if (s < 0 || s >= p) continue;
        int32_t u2 = ir_dag_add_node(g, (ir_op)n->op);
        g->nodes[u2] = g->nodes[v];
        g->nodes[u2].stage = p + s;
        g->nodes[u2].place = place_of[p - 1 - s];
        g->nodes[u2].directive = d->index;
        const ir_tensor_kind out_kind =
            upd || n->op == IR_OP_ALL_GATHER ? IR_T_PARAM : IR_T_GRAD_SYNC;
        int32_t t2 = ir_dag_add_tensor(g, u2, out_kind, 0);
        /* what an original produces, and its copy's: a bucket's reduced gradient, an update's
         * parameters (which a ZeRO-1 gather reads) */
        for (size_t ti = 0; ti < g->ntensors; ti++)
            if (g->tensors[ti].producer == (int32_t)v && g->tensors[ti].kind == out_kind) {
                SCHED_PUSH(&x->scratch, orig_out, (int32_t)ti);
                SCHED_PUSH(&x->scratch, copy_out, t2);
            }
        SCHED_PUSH(&x->scratch, orig, (int32_t)v);
        SCHED_PUSH(&x->scratch, copy, u2);
        if (upd) {
            SCHED_PUSH(&x->scratch, upd_o, (int32_t)v);
            SCHED_PUSH(&x->scratch, upd_c, u2);
        }
    }
    /* the clipping norm each stage's updates read (its world all-reduce, whose result is the
     * global norm on every device): a mirror on rank p-1-i reads rank p-1-i's, not a copy
     * sent from rank i, which would queue a per-step receive among the pipeline's */
    int32_t *norm_src = base_arena_calloc(&x->scratch, (size_t)p, sizeof *norm_src);
    int32_t *norm_t = base_arena_calloc(&x->scratch, (size_t)p, sizeof *norm_t);
    for (int s = 0; s < p; s++) norm_src[s] = norm_t[s] = -1;
    for (size_t i = 0; i < ne0; i++) {
        const ir_edge *ed = &g->edges[i];
        if (ed->dead || ed->kind != IR_EDGE_DATA || g->nodes[ed->dst].op != IR_OP_UPD) continue;
        const ir_node *src = &g->nodes[ed->src];
        int s = g->nodes[ed->dst].stage;
        if (src->op != IR_OP_ALL_REDUCE || src->coll_group != IR_CG_WORLD || s < 0 || s >= p) continue;
        norm_src[s] = ed->src;
        norm_t[s] = ed->tensor;
    }
    for (size_t i = 0; i < ne0; i++) {
        ir_edge *ed = &g->edges[i];
        if (ed->dead || ed->kind != IR_EDGE_DATA) continue;
        const ir_node *src = &g->nodes[ed->src], *dst = &g->nodes[ed->dst];
        bool mirrored_src = (src->flags & IR_NODE_PER_MB) && src->stage >= p;
        if (dst->op == IR_OP_GRAD_NORM && mirrored_src) {
            ed->dead = 1; /* the norm counts each pair once: the original's summed gradient */
            continue;
        }
        int32_t u2 = -1;
        for (size_t k = 0; k < orig.n && u2 < 0; k++)
            if (orig.v[k] == ed->dst) u2 = copy.v[k];
        if (u2 < 0) continue;
        int32_t src_copy = -1; /* a bucket feeding an update: its copy feeds the update's copy */
        for (size_t k = 0; k < orig.n && src_copy < 0; k++)
            if (orig.v[k] == ed->src) src_copy = copy.v[k];
        if (mirrored_src) {
            ed->dst = u2;
        } else if (src_copy >= 0) {
            int32_t t2 = -1;
            for (size_t k = 0; k < orig_out.n && t2 < 0; k++)
                if (orig_out.v[k] == ed->tensor) t2 = copy_out.v[k];
            if (t2 >= 0) ir_dag_add_edge(g, src_copy, u2, t2, IR_EDGE_DATA);
        } else if (dst->op == IR_OP_UPD && !(src->flags & IR_NODE_PER_MB)) {
            int32_t src_id = ed->src, tensor = ed->tensor; /* the norm: both copies read it */
            int here = p - 1 - dst->stage;
            if (src->op == IR_OP_ALL_REDUCE && src->coll_group == IR_CG_WORLD && norm_src[here] >= 0) {
                src_id = norm_src[here];
                tensor = norm_t[here];
            }
            ir_dag_add_edge(g, src_id, u2, tensor, IR_EDGE_DATA);
        }
    }
    g->adj_valid = false;
    BASE_VEC(int32_t) sums = {0};
    for (size_t k = 0; k < upd_o.n; k++) {
        int32_t u = upd_o.v[k], u2 = upd_c.v[k];
        int pu = g->nodes[u].place, pu2 = g->nodes[u2].place;
        /* not IR_NODE_TIED: each sum carries the region's whole gradient (sizes.c), per device:
         * an expert region's share of this device's expert-parallel rank (hence its ep) */
        int32_t a1 = sched_insert_pair_sum(g, u, pu2), a2 = sched_insert_pair_sum(g, u2, pu);
        g->nodes[a1].flags &= (uint16_t)~IR_NODE_TIED;
        g->nodes[a2].flags &= (uint16_t)~IR_NODE_TIED;
        g->nodes[a1].ep = g->nodes[u].ep;
        g->nodes[a2].ep = g->nodes[u2].ep;
        SCHED_PUSH(&x->scratch, sums, a1);
        SCHED_PUSH(&x->scratch, sums, a2);
    }
    /* Both ends of a pair group must issue its sums in the same order, but the list scheduler
     * ranks ready sums by downstream work, which differs between an original (its sum feeds the
     * clipping norm) and its mirror. A region occurs once per placement, on both ends of its
     * pair: chain each placement's sums by region, last region first, on every device alike. */
    for (size_t i = 0; i < sums.n; i++) {
        int32_t prev = -1;
        int pl = g->nodes[sums.v[i]].place;
        bool first = true;
        for (size_t k = 0; k < i && first; k++) first = g->nodes[sums.v[k]].place != pl;
        if (!first) continue;
        for (int r = g->nregions - 1; r >= 0; r--)
            for (size_t k = 0; k < sums.n; k++) {
                const ir_node *a = &g->nodes[sums.v[k]];
                if (a->place != pl || a->region != r) continue;
                if (prev >= 0) ir_dag_add_edge(g, prev, sums.v[k], -1, IR_EDGE_TEMPORAL);
                prev = sums.v[k];
            }
    }
    g->adj_valid = false;
    x->mirror_p = p;
    return 0;
}
