/* dir_recompute.c — `recompute {filter, mode: full|selective}`: activation checkpointing. The
 * forward keeps only a checkpoint (full: the region's input; selective: everything but the
 * attention core, Korthikanti et al.), and a recompute node R rebuilds the rest right before the
 * backward: F -(checkpoint)-> R -(the rest)-> B, and the backward reads the checkpoint too
 * (F -(checkpoint)-> B), so that it lives until the backward, not just until R. Ordering issues R
 * just in time. Once placements are final, sched_link_recomputes gives each R the input its F
 * read, made the same way. */
#include "sched_internal.h"

#include <stdlib.h>

/* A copy of communication node c for the recompute chain: same collective, group, stream and
 * place, tagged with the recompute's pass so that it counts as recompute traffic. */
static int32_t clone_coll(ir_dag *g, int32_t c)
{
    int32_t k = ir_dag_add_node(g, (ir_op)g->nodes[c].op);
    ir_node *cn = &g->nodes[k];
    *cn = g->nodes[c];
    cn->pass = PLAN_PASS_R;
    cn->flags &= (uint16_t)~IR_NODE_JIT;
    cn->link = -1;
    return k;
}

/* Recomputation reads what its forward read, made the same way (run once, when placements are
 * final, so that the TP and EP collectives are in the DAG):
 *   - A region after a fully recomputed attention keeps nothing (ir/cost.c: recompute_from_prev):
 *     its recompute R(r) reads what the recompute of the region before it rebuilds, as F(r) read
 *     F(a): R(a) -> R(r) directly where F(a) -> F(r), or through a copy of the collectives between
 *     them (tensor parallelism: the all-reduce, or under sequence parallelism the reduce-scatter
 *     and all-gather; expert parallelism: the all-to-all). The layer is then recomputed as one,
 *     as Megatron does: every linked R is issued just in time for the layer's first backward
 *     (the last region's), with a temporal edge to it, since the later backwards of the layer
 *     wait on that one.
 *   - A region that keeps its input under sequence parallelism keeps the device's token shard:
 *     its R reads the input all-gathered again from that shard, as its F's input was. */
void sched_link_recomputes(sched_ctx *x)
{
    ir_dag *g = x->g;
    ir_dag_build_adjacency(g);
    size_t n0 = g->nnodes;
    int32_t *rec = base_xmalloc((n0 + 1) * sizeof *rec); /* F -> its R, -1 */
    bool *attn_full = base_xcalloc((size_t)(g->model->layers > 0 ? g->model->layers : 1) + 1, sizeof *attn_full);
    BASE_VEC(int32_t) regather = {0}; /* pairs: an input all-gather for R, that R */
    for (size_t v = 0; v < n0; v++) rec[v] = -1;
    for (size_t v = 0; v < n0; v++) {
        const ir_node *n = &g->nodes[v];
        if (n->dead || n->op != IR_OP_R || n->recompute != IR_RECOMPUTE_FULL) continue;
        for (int32_t k = g->in_off[v]; k < g->in_off[v + 1]; k++) {
            const ir_edge *ed = &g->edges[g->in_edge[k]];
            if (ed->kind == IR_EDGE_DATA && g->nodes[ed->src].op == IR_OP_F) rec[ed->src] = (int32_t)v;
        }
        if (n->region >= 0 && n->layer >= 0 && g->regions[n->region].kind == IR_REGION_ATTN)
            attn_full[n->layer] = true;
    }
    for (size_t f = 0; f < n0; f++) {
        int32_t rr = rec[f];
        if (rr < 0) continue;
        const ir_node *fn = &g->nodes[f];
        ir_region_kind kind = g->regions[fn->region].kind;
        bool keeps_nothing = fn->layer >= 0 && attn_full[fn->layer] && kind != IR_REGION_ATTN;
        for (int32_t k = g->in_off[f]; k < g->in_off[f + 1]; k++) {
            const ir_edge ed = g->edges[g->in_edge[k]];
            if (ed.dead || ed.kind != IR_EDGE_DATA) continue;
            /* walk back through the collectives to the forward that made the input */
            int32_t chain[4], nc = 0, u = ed.src;
            while (IR_OP_INFO[g->nodes[u].op].kind == IR_KIND_COLL && nc < 4) {
                chain[nc++] = u;
                int32_t up = -1;
                for (int32_t q = g->in_off[u]; q < g->in_off[u + 1] && up < 0; q++) {
                    const ir_edge *e2 = &g->edges[g->in_edge[q]];
                    if (e2->kind == IR_EDGE_DATA) up = e2->src;
                }
                if (up < 0) break;
                u = up;
            }
            const ir_node *un = &g->nodes[u];
            if (keeps_nothing) {
                if (un->op != IR_OP_F || rec[u] < 0 || un->layer != fn->layer) continue;
                int32_t prev = rec[u];
                uint8_t tk = IR_T_ACT;
                for (int i = nc - 1; i >= 0; i--) {
                    int32_t c = clone_coll(g, chain[i]);
                    int32_t t = ir_dag_add_tensor(g, prev, (ir_tensor_kind)tk, 0);
                    ir_dag_add_edge(g, prev, c, t, IR_EDGE_DATA);
                    prev = c;
                    tk = IR_T_COMM;
                }
                int32_t t = ir_dag_add_tensor(g, prev, (ir_tensor_kind)tk, 0);
                ir_dag_add_edge(g, prev, rr, t, IR_EDGE_DATA);
            } else if (nc > 0 && g->nodes[chain[0]].op == IR_OP_ALL_GATHER && fn->sp) {
                /* the input shard F kept, gathered again for R */
                int32_t saved = -1;
                for (int32_t q = g->in_off[rr]; q < g->in_off[rr + 1] && saved < 0; q++) {
                    const ir_edge *e2 = &g->edges[g->in_edge[q]];
                    if (e2->kind == IR_EDGE_DATA && e2->src == (int32_t)f &&
                        g->tensors[e2->tensor].kind == IR_T_SAVED)
                        saved = e2->tensor;
                }
                if (saved < 0) continue;
                int32_t c = clone_coll(g, chain[0]);
                ir_dag_add_edge(g, (int32_t)f, c, saved, IR_EDGE_DATA);
                int32_t t = ir_dag_add_tensor(g, c, IR_T_COMM, 0);
                ir_dag_add_edge(g, c, rr, t, IR_EDGE_DATA);
                BASE_VEC_PUSH(regather, c);
                BASE_VEC_PUSH(regather, rr);
            }
        }
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
        int32_t stack[8], ns = 0;
        stack[ns++] = ra;
        while (ns) { /* through the copied collectives */
            int32_t v = stack[--ns];
            for (int32_t k = g->out_off[v]; k < g->out_off[v + 1]; k++) {
                const ir_edge *ed = &g->edges[g->out_edge[k]];
                if (ed->dead || ed->kind != IR_EDGE_DATA) continue;
                const ir_node *dn = &g->nodes[ed->dst];
                if (dn->op == IR_OP_R) {
                    int32_t b = dn->link;
                    if (b >= 0 && (best < 0 || g->nodes[b].region > g->nodes[best].region)) best = b;
                } else if (IR_OP_INFO[dn->op].kind == IR_KIND_COLL && dn->pass == PLAN_PASS_R && ns < 8) {
                    stack[ns++] = ed->dst;
                }
            }
        }
        if (best < 0 || best == g->nodes[ra].link) continue;
        g->nodes[ra].link = best;
        ir_dag_add_edge(g, ra, best, -1, IR_EDGE_TEMPORAL);
    }
    /* an input re-gather is issued just in time for the backward its R is issued for: its input
     * is ready since the forward, and its output must not live from there to the backward */
    for (size_t i = 0; i + 1 < regather.n; i += 2) {
        int32_t c = regather.v[i], b = g->nodes[regather.v[i + 1]].link;
        if (b < 0) continue;
        g->nodes[c].flags |= IR_NODE_JIT;
        g->nodes[c].link = b;
        ir_dag_add_edge(g, c, b, -1, IR_EDGE_TEMPORAL);
    }
    free(regather.v);
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
    return 0;
}
