/* dir_recompute.c — `recompute {filter, mode: full|selective}`: activation checkpointing. The
 * forward keeps only a checkpoint (full: the region's input; selective: everything but the
 * attention core, Korthikanti et al.), and a recompute node R rebuilds the rest right before the
 * backward: F -(checkpoint)-> R -(the rest)-> B, and the backward reads the checkpoint too
 * (F -(checkpoint)-> B), so that it lives until the backward, not just until R. Ordering issues R
 * just in time. */
#include "sched_internal.h"

#include <stdlib.h>

/* A region after a fully recomputed attention keeps nothing (ir/cost.c: recompute_from_prev):
 * its recomputation reads what the recomputation of the region before it rebuilds, as its
 * forward read that region's forward. For every forward edge F(a) -> F(r) of one layer whose two
 * ends are fully recomputed, and whose layer's attention is, R(a) -> R(r) carries the same
 * tensor (an IR_T_ACT: a workspace-category buffer between the two recomputes). The layer is then
 * recomputed as one, as Megatron does: every linked R is issued just in time for the layer's first
 * backward (the last region's), with a temporal edge to it, since the later backwards of the
 * layer wait on that one. Idempotent: run after each recompute directive, so that the last one
 * links them all. */
static void link_recomputes(ir_dag *g)
{
    ir_dag_build_adjacency(g);
    int32_t *rec = base_xmalloc((g->nnodes + 1) * sizeof *rec); /* F -> its R, -1 */
    bool *attn_full = base_xcalloc((size_t)(g->model->layers > 0 ? g->model->layers : 1) + 1, sizeof *attn_full);
    for (size_t v = 0; v < g->nnodes; v++) rec[v] = -1;
    for (size_t v = 0; v < g->nnodes; v++) {
        const ir_node *n = &g->nodes[v];
        if (n->dead || n->op != IR_OP_R || n->recompute != IR_RECOMPUTE_FULL) continue;
        for (int32_t k = g->in_off[v]; k < g->in_off[v + 1]; k++) {
            const ir_edge *ed = &g->edges[g->in_edge[k]];
            if (ed->kind == IR_EDGE_DATA && g->nodes[ed->src].op == IR_OP_F) rec[ed->src] = (int32_t)v;
        }
        if (n->region >= 0 && n->layer >= 0 && g->regions[n->region].kind == IR_REGION_ATTN)
            attn_full[n->layer] = true;
    }
    size_t ne = g->nedges;
    for (size_t i = 0; i < ne; i++) {
        const ir_edge ed = g->edges[i];
        if (ed.dead || ed.kind != IR_EDGE_DATA || g->tensors[ed.tensor].kind != IR_T_ACT) continue;
        const ir_node *a = &g->nodes[ed.src], *r = &g->nodes[ed.dst];
        if (a->op != IR_OP_F || r->op != IR_OP_F || rec[ed.src] < 0 || rec[ed.dst] < 0) continue;
        if (r->layer < 0 || r->layer != a->layer || !attn_full[r->layer]) continue;
        if (g->regions[r->region].kind == IR_REGION_ATTN) continue;
        int32_t ra = rec[ed.src], rr = rec[ed.dst];
        bool have = false;
        for (int32_t k = g->out_off[ra]; k < g->out_off[ra + 1] && !have; k++)
            have = g->edges[g->out_edge[k]].dst == rr;
        if (have) continue;
        int32_t t = ir_dag_add_tensor(g, ra, IR_T_ACT, 0);
        ir_dag_add_edge(g, ra, rr, t, IR_EDGE_DATA);
    }
    /* each linked R issues for the backward of the last region it feeds, transitively: walk
     * the recomputes from the last region down so that a successor's link is final first */
    ir_dag_build_adjacency(g);
    int32_t *rs = base_xmalloc((g->nnodes + 1) * sizeof *rs);
    size_t nr = 0;
    for (size_t v = 0; v < g->nnodes; v++)
        if (!g->nodes[v].dead && g->nodes[v].op == IR_OP_R) rs[nr++] = (int32_t)v;
    for (size_t i = 1; i < nr; i++) /* by region, descending (insertion: few per layer) */
        for (size_t j = i; j > 0 && g->nodes[rs[j]].region > g->nodes[rs[j - 1]].region; j--) {
            int32_t tmp = rs[j];
            rs[j] = rs[j - 1];
            rs[j - 1] = tmp;
        }
    for (size_t i = 0; i < nr; i++) {
        int32_t ra = rs[i];
        int32_t best = -1; /* the backward of the furthest region this R feeds */
        for (int32_t k = g->out_off[ra]; k < g->out_off[ra + 1]; k++) {
            const ir_edge *ed = &g->edges[g->out_edge[k]];
            if (ed->dead || ed->kind != IR_EDGE_DATA || g->nodes[ed->dst].op != IR_OP_R) continue;
            int32_t b = g->nodes[ed->dst].link;
            if (b >= 0 && (best < 0 || g->nodes[b].region > g->nodes[best].region)) best = b;
        }
        if (best < 0 || best == g->nodes[ra].link) continue;
        g->nodes[ra].link = best;
        ir_dag_add_edge(g, ra, best, -1, IR_EDGE_TEMPORAL);
    }
    free(rs);
    free(rec);
    free(attn_full);
    g->adj_valid = false;
}

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
    link_recomputes(g);
    return 0;
}
