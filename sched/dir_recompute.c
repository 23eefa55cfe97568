/* dir_recompute.c — `recompute {filter, mode: full|selective}`: activation checkpointing. The
 * forward keeps only a checkpoint (full: the region's input; selective: everything but the
 * attention core, Korthikanti et al.), and a recompute node R rebuilds the rest right before the
 * backward: F -(checkpoint)-> R -(the rest)-> B, and the backward reads the checkpoint too
 * (F -(checkpoint)-> B), so that it lives until the backward, not just until R. Ordering issues R
 * just in time. */
#include "sched_internal.h"

int sched_dir_recompute(sched_ctx *x, const ir_directive *d, base_error *e)
{
    ir_dag *g = x->g;
    if (x->order_seen)
        return sched_dir_error(d, e, "recompute must come before order and schedule directives; "
                                     "move it up");
    if (d->recompute != IR_RECOMPUTE_FULL && d->recompute != IR_RECOMPUTE_SELECTIVE)
        return sched_dir_error(d, e, "mode must be full or selective");
    ir_dag_build_adjacency(g);
    int matched = 0, changed = 0;
    size_t n0 = g->nnodes;
    for (size_t vi = 0; vi < n0; vi++) {
        int32_t v = (int32_t)vi;
        ir_node *n = &g->nodes[v];
        if (n->dead || n->op != IR_OP_F || n->region < 0) continue;
        if (!sched_filter_match(g, v, &d->filter)) continue;
        matched++;
        ir_region_kind kind = g->regions[n->region].kind;
        /* Selective recompute only concerns the attention core; the embedding and the head are
         * never recomputed (their inputs are as large as what they keep). */
        if (d->recompute == IR_RECOMPUTE_SELECTIVE && kind != IR_REGION_ATTN) continue;
        if (kind == IR_REGION_EMBED || kind == IR_REGION_HEAD) continue;
        if (n->recompute) {
            char lbl[96];
            return sched_dir_error(d, e, "'%s' is already recomputed by an earlier directive",
                                   ir_node_label(g, v, lbl, sizeof lbl));
        }
        /* Find the saved-activation edge F -> B and route it through R. */
        for (int32_t k = g->out_off[v]; k < g->out_off[v + 1]; k++) {
            int32_t ei = g->out_edge[k];
            ir_edge *ed = &g->edges[ei];
            if (ed->kind != IR_EDGE_DATA || g->tensors[ed->tensor].kind != IR_T_SAVED) continue;
            int32_t b = ed->dst;
            int32_t r = ir_dag_add_node(g, IR_OP_R);
            ir_node *rn = &g->nodes[r];
            n = &g->nodes[v];
            *rn = g->nodes[b];
            rn->op = IR_OP_R;
            rn->pass = PLAN_PASS_R;
            rn->recompute = (uint8_t)d->recompute;
            rn->flags |= IR_NODE_JIT;
            rn->link = b;
            rn->directive = d->index;
            n->recompute = (uint8_t)d->recompute;
            int32_t act = ir_dag_add_tensor(g, r, IR_T_RECOMP, 0);
            ed = &g->edges[ei];
            int32_t saved = ed->tensor;
            /* F -> B stays: the backward uses the kept part and the rebuilt part together */
            ir_dag_add_edge(g, v, r, saved, IR_EDGE_DATA);
            ir_dag_add_edge(g, r, b, act, IR_EDGE_DATA);
            changed++;
            break;
        }
    }
    if (!matched) return sched_dir_error(d, e, "the filter matches no forward node; check its tags");
    if (!changed)
        return sched_dir_error(d, e, "the filter selects nothing recomputable (%s recompute "
                                     "applies to %s)",
                               d->recompute == IR_RECOMPUTE_SELECTIVE ? "selective" : "full",
                               d->recompute == IR_RECOMPUTE_SELECTIVE ? "attention regions"
                                                                      : "transformer layers");
    g->adj_valid = false;
    return 0;
}
