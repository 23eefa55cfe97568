/* tied.c — tied input/output embeddings across pipeline stages (Megatron's embedding group).
 * When the embedding and the LM head share one weight but run on different placements, the
 * head's stage keeps its own copy of the weight, and before the optimizer step the two
 * gradients are summed by an all-reduce over each (embedding device, head device) pair, so both
 * copies take the same step. The sum is an IR node (one per side), not an executor special case.
 * Runs once placements are final (with the send/receive materialisation). */
#include "sched_internal.h"

#include <stdlib.h>

/* Route every gradient flowing into `upd` through a new pair all-reduce on upd's placement
 * (also used by DualPipe's mirrored stages, dualpipe_mirror.c). */
int32_t sched_insert_pair_sum(ir_dag *g, int32_t upd, int peer_place)
{
    ir_dag_build_adjacency(g);
    int32_t ar = ir_dag_add_node(g, IR_OP_ALL_REDUCE);
    ir_node *a = &g->nodes[ar];
    const ir_node *u = &g->nodes[upd];
    a->place = u->place;
    a->peer_place = peer_place;
    a->stage = u->stage;
    a->region = u->region;
    a->layer = u->layer;
    a->tp = u->tp;
    a->coll_group = IR_CG_PAIR;
    a->flags = IR_NODE_TIED | IR_NODE_DP_SYNC;
    a->pass = PLAN_PASS_AUX;
    a->stream = (int16_t)ir_dag_intern_stream(g, "dp"); /* never block the compute stream */
    int32_t out = ir_dag_add_tensor(g, ar, IR_T_GRAD_SYNC, 0);
    BASE_VEC(int32_t) seen = {0};
    for (int32_t k = g->in_off[upd]; k < g->in_off[upd + 1]; k++) {
        ir_edge *ed = &g->edges[g->in_edge[k]];
        if (ed->kind != IR_EDGE_DATA) continue;
        uint8_t kind = g->tensors[ed->tensor].kind;
        if (kind != IR_T_GRAD && kind != IR_T_GRAD_SYNC) continue;
        int32_t src = ed->src, t = ed->tensor;
        ed->src = ar;
        ed->tensor = out;
        bool dup = false;
        for (size_t i = 0; i < seen.n; i++) dup |= seen.v[i] == t;
        if (!dup) {
            BASE_VEC_PUSH(seen, t);
            ir_dag_add_edge(g, src, ar, t, IR_EDGE_DATA);
        }
    }
    /* the gradient norm reads the summed gradient too, or it would miss the other side's half */
    size_t ne = g->nedges;
    BASE_VEC(int32_t) norms = {0};
    for (size_t i = 0; i < ne; i++) {
        ir_edge *ed = &g->edges[i];
        if (ed->dead || ed->kind != IR_EDGE_DATA || g->nodes[ed->dst].op != IR_OP_GRAD_NORM) continue;
        bool mine = false;
        for (size_t k = 0; k < seen.n; k++) mine |= seen.v[k] == ed->tensor;
        if (!mine) continue;
        bool dup = false;
        for (size_t k = 0; k < norms.n; k++) dup |= norms.v[k] == ed->dst;
        if (dup) {
            ed->dead = 1;
            continue;
        }
        BASE_VEC_PUSH(norms, ed->dst);
        ed->src = ar;
        ed->tensor = out;
    }
    free(norms.v);
    free(seen.v);
    /* several in-edges now come from `ar` with the same tensor: keep one */
    ir_dag_build_adjacency(g);
    bool kept = false;
    for (int32_t k = g->in_off[upd]; k < g->in_off[upd + 1]; k++) {
        ir_edge *ed = &g->edges[g->in_edge[k]];
        if (ed->src != ar) continue;
        if (kept) ed->dead = 1;
        kept = true;
    }
    g->adj_valid = false;
    return ar;
}

int sched_tie_embeddings(sched_ctx *x, base_error *e)
{
    ir_dag *g = x->g;
    if (!g->model->tied_embeddings) return 0;
    int32_t upd_embed = -1, upd_head = -1;
    for (size_t v = 0; v < g->nnodes; v++) {
        const ir_node *n = &g->nodes[v];
        if (n->dead || n->op != IR_OP_UPD || n->region < 0) continue;
        ir_region_kind k = g->regions[n->region].kind;
        if (k == IR_REGION_EMBED) upd_embed = (int32_t)v;
        if (k == IR_REGION_HEAD) upd_head = (int32_t)v;
    }
    if (upd_embed < 0 || upd_head < 0) return 0;
    int pe = g->nodes[upd_embed].place, ph = g->nodes[upd_head].place;
    if (pe == ph) return 0; /* one weight on one device: nothing to sum */
    int zero = (g->nodes[upd_embed].dp > g->nodes[upd_head].dp ? g->nodes[upd_embed].dp
                                                               : g->nodes[upd_head].dp) - 1;
    /* reported at the replicate directive that asked for it */
    const ir_directive *rd = NULL;
    for (int i = 0; i < x->prog->ndirectives && !rd; i++)
        if (x->prog->directives[i].op == IR_DIR_REPLICATE && x->prog->directives[i].zero >= 2)
            rd = &x->prog->directives[i];
    if (zero >= 2 && rd)
        return sched_dir_error(rd, e, "the tied embedding and LM head run on different devices, so their "
                              "gradients are summed between the two, but under ZeRO-%d each device "
                              "keeps only its piece of each region's gradient and the two regions' "
                              "pieces do not line up; use zero 0 or 1 for these regions (DeepSpeed "
                              "too allows no ZeRO-2/3 with pipeline stages), or untie the embeddings "
                              "in the model (tied_embeddings: false)",
                           zero);
    if (zero >= 2) return base_errorf(e, "tied embeddings on two devices cannot use ZeRO-%d", zero);
    g->nodes[upd_head].flags |= IR_NODE_TIED;
    sched_insert_pair_sum(g, upd_embed, ph);
    sched_insert_pair_sum(g, upd_head, pe);
    return 0;
}
