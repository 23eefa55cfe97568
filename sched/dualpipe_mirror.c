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
 * Runs once the placement directives are done and before the sends and receives are made, so
 * that fix_p2p connects the mirrored pipeline like any other. Pipeline-only programs for now:
 * tensor, expert and data parallelism inside the stages, and tied embeddings (whose two copies
 * would each meet a mirror: four copies to sum), are refused with a clear error. */
#include "schedule.h"

#include <stdlib.h>
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
    case IR_OP_ALL_REDUCE: return n->coll_group == IR_CG_WORLD; /* the gradient norm's */
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
    int *place_of = base_xmalloc((size_t)p * sizeof *place_of);
    for (int s = 0; s < p; s++) place_of[s] = -1;
    int rc = 0;
    for (size_t v = 0; v < g->nnodes && !rc; v++) {
        const ir_node *n = &g->nodes[v];
        if (n->dead) continue;
        char lbl[96];
        if (!supported_op(n) || n->tp > 1 || n->ep > 1 || n->dp > 0) {
            rc = sched_dir_error(d, e, "dualpipe supports pipeline-only programs so far, but "
                                       "'%s' belongs to tensor, expert or data parallelism; "
                                       "drop those directives and annotations, or use dualpipev",
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
    if (rc) {
        free(place_of);
        return rc;
    }
    /* the builder's preconditions (p even, m even, m >= 2p), with its messages */
    sched_params sp = {.p = p, .m = m};
    sched_table t;
    char why[512];
    int bad = sched_build_dualpipe(false, &sp, &t, why, sizeof why);
    if (!bad) sched_table_free(&t);
    if (bad) {
        free(place_of);
        return sched_dir_error(d, e, "%s", why);
    }
    if (g->model->tied_embeddings) {
        free(place_of);
        return sched_dir_error(d, e, "dualpipe with tied embeddings is not supported yet: both "
                                     "ends of both pipelines would hold a copy of the shared "
                                     "weight (four copies to sum); use a model with "
                                     "tied_embeddings: false, or dualpipev");
    }

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
    for (size_t v = 0; v < n0; v++) {
        if (g->nodes[v].dead || g->nodes[v].op != IR_OP_UPD) continue;
        int s = g->nodes[v].stage;
        if (s < 0 || s >= p) continue;
        int32_t u2 = ir_dag_add_node(g, IR_OP_UPD);
        g->nodes[u2] = g->nodes[v];
        g->nodes[u2].stage = p + s;
        g->nodes[u2].place = place_of[p - 1 - s];
        g->nodes[u2].directive = d->index;
        ir_dag_add_tensor(g, u2, IR_T_PARAM, 0);
        BASE_VEC_PUSH(orig, (int32_t)v);
        BASE_VEC_PUSH(copy, u2);
    }
    /* the clipping norm each stage's updates read (its world all-reduce, whose result is the
     * global norm on every device): a mirror on rank p-1-i reads rank p-1-i's, not a copy
     * sent from rank i, which would queue a per-step receive among the pipeline's */
    int32_t *norm_src = base_xmalloc((size_t)p * sizeof *norm_src);
    int32_t *norm_t = base_xmalloc((size_t)p * sizeof *norm_t);
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
        if (dst->op != IR_OP_UPD) continue;
        int32_t u2 = -1;
        for (size_t k = 0; k < orig.n && u2 < 0; k++)
            if (orig.v[k] == ed->dst) u2 = copy.v[k];
        if (u2 < 0) continue;
        if (mirrored_src) {
            ed->dst = u2;
        } else if (!(src->flags & IR_NODE_PER_MB)) {
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
    for (size_t k = 0; k < orig.n; k++) {
        int32_t u = orig.v[k], u2 = copy.v[k];
        int pu = g->nodes[u].place, pu2 = g->nodes[u2].place;
        /* not IR_NODE_TIED: each sum carries the region's whole gradient (sizes.c) */
        g->nodes[sched_insert_pair_sum(g, u, pu2)].flags &= (uint16_t)~IR_NODE_TIED;
        g->nodes[sched_insert_pair_sum(g, u2, pu)].flags &= (uint16_t)~IR_NODE_TIED;
    }
    g->adj_valid = false;
    free(norm_src);
    free(norm_t);
    free(orig.v);
    free(copy.v);
    free(place_of);
    x->mirror_p = p;
    return 0;
}
