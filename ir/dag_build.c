/* dag_build.c — builds the single-device training step that every program starts from: the
 * forward of each region, the loss, the backward mirrored edge by edge, the optimizer step, and
 * the cross-group numerics (gradient-norm partial + world all-reduce, MoE load-balancing loss).
 * Directives then copy (split), move (place) and annotate (shard, shard_tensor, replicate) it. */
#include "dag.h"

#include <string.h>

static void set_tags(ir_dag *g, int32_t v, const ir_region *r, int32_t stage, bool tag_ep,
                     bool tag_tp)
{
    ir_node *n = &g->nodes[v];
    n->region = r->index;
    n->layer = r->layer;
    n->stage = stage;
    if (tag_ep && r->kind == IR_REGION_MOE_EXPERTS) n->flags |= IR_NODE_EP;
    if (tag_tp && (r->kind == IR_REGION_ATTN || r->kind == IR_REGION_MLP ||
                   r->kind == IR_REGION_EMBED || r->kind == IR_REGION_HEAD))
        n->flags |= IR_NODE_TP;
}

/* A forward data edge u -> v; the backward gets the mirrored edge B(v) -> B(u). */
typedef struct fwd_edge {
    int32_t src_region, dst_region;
} fwd_edge;

int ir_dag_build_training_step(ir_dag *g, const int32_t *stage_of_region, bool tag_ep,
                               bool tag_tp, bool grad_clip, base_error *e)
{
    const int R = g->nregions;
    if (R < 2) return base_errorf(e, "model has no regions; check the model file");
    int32_t dev0 = 0;
    ir_place p0 = {1, &dev0};
    int place0 = ir_dag_intern_place(g, &p0);

    int32_t *fwd = base_arena_calloc(g->arena, (size_t)R, sizeof *fwd);
    int32_t *bwd = base_arena_calloc(g->arena, (size_t)R, sizeof *bwd);
    int32_t *saved = base_arena_calloc(g->arena, (size_t)R, sizeof *saved);
    fwd_edge *fe = base_arena_calloc(g->arena, (size_t)R * 2, sizeof *fe);
    int nfe = 0;
    int32_t nstages = 1;
    for (int r = 0; r < R; r++) {
        int32_t s = stage_of_region ? stage_of_region[r] : 0;
        if (s + 1 > nstages) nstages = s + 1;
    }

    /* Forward: each region reads the previous region's output; an MoE combine also reads the
     * gate's output directly (the residual stream and routing weights bypass the experts). */
    int32_t last_gate = -1;
    for (int r = 0; r < R; r++) {
        const ir_region *reg = &g->regions[r];
        int32_t v = ir_dag_add_node(g, IR_OP_F);
        set_tags(g, v, reg, stage_of_region ? stage_of_region[r] : 0, tag_ep, tag_tp);
        g->nodes[v].mb = 0;
        g->nodes[v].flags |= IR_NODE_PER_MB;
        g->nodes[v].place = place0;
        fwd[r] = v;
        if (r > 0) fe[nfe++] = (fwd_edge){r - 1, r};
        if (reg->kind == IR_REGION_MOE_COMBINE && last_gate >= 0 && last_gate != r - 1)
            fe[nfe++] = (fwd_edge){last_gate, r};
        if (reg->kind == IR_REGION_MOE_GATE) last_gate = r;
        saved[r] = ir_dag_add_tensor(g, v, IR_T_SAVED, 0);
    }
    for (int i = 0; i < nfe; i++) {
        int32_t u = fwd[fe[i].src_region];
        int32_t t = ir_dag_add_tensor(g, u, IR_T_ACT, 0);
        ir_dag_add_edge(g, u, fwd[fe[i].dst_region], t, IR_EDGE_DATA);
    }

    /* Backward: one B per region, in reverse; the loss seeds the head's backward. */
    for (int r = R - 1; r >= 0; r--) {
        int32_t v = ir_dag_add_node(g, IR_OP_B);
        g->nodes[v] = g->nodes[fwd[r]];
        g->nodes[v].op = IR_OP_B;
        g->nodes[v].pass = PLAN_PASS_B;
        bwd[r] = v;
        ir_dag_add_edge(g, fwd[r], v, saved[r], IR_EDGE_DATA);
    }
    int32_t loss = ir_dag_add_tensor(g, fwd[R - 1], IR_T_SCALAR, 4);
    ir_dag_add_edge(g, fwd[R - 1], bwd[R - 1], loss, IR_EDGE_DATA);
    for (int i = 0; i < nfe; i++) {
        int32_t u = bwd[fe[i].dst_region];
        int32_t t = ir_dag_add_tensor(g, u, IR_T_GRAD_ACT, 0);
        g->tensors[t].region = fe[i].src_region; /* the gradient of that region's output */
        ir_dag_add_edge(g, u, bwd[fe[i].src_region], t, IR_EDGE_DATA);
    }

    /* MoE load-balancing loss: per stage and micro-batch, from the router statistics of the
     * stage's gates back into their backward. */
    for (int32_t s = 0; s < nstages; s++) {
        int32_t aux = -1, aux_out = -1;
        for (int r = 0; r < R; r++) {
            if (g->regions[r].kind != IR_REGION_MOE_GATE) continue;
            if ((stage_of_region ? stage_of_region[r] : 0) != s) continue;
            if (aux < 0) {
                aux = ir_dag_add_node(g, IR_OP_AUX_LOSS);
                g->nodes[aux].stage = s;
                g->nodes[aux].mb = 0;
                g->nodes[aux].flags |= IR_NODE_PER_MB;
                g->nodes[aux].place = place0;
                aux_out = ir_dag_add_tensor(g, aux, IR_T_SCALAR, 4);
            }
            int32_t stats = ir_dag_add_tensor(g, fwd[r], IR_T_SCALAR, 0);
            ir_dag_add_edge(g, fwd[r], aux, stats, IR_EDGE_DATA);
            ir_dag_add_edge(g, aux, bwd[r], aux_out, IR_EDGE_DATA);
        }
    }

    /* Optimizer: one update per region with parameters, after the (optional) clipping norm. */
    int32_t *norm_out = base_arena_calloc(g->arena, (size_t)nstages, sizeof *norm_out);
    for (int32_t s = 0; s < nstages; s++) norm_out[s] = -1;
    for (int r = 0; r < R; r++) {
        if (ir_region_params(g->model, &g->regions[r]) <= 0) continue;
        int32_t s = stage_of_region ? stage_of_region[r] : 0;
        int32_t grad = ir_dag_add_tensor(g, bwd[r], IR_T_GRAD, 0);
        int32_t upd = ir_dag_add_node(g, IR_OP_UPD);
        g->nodes[upd] = g->nodes[fwd[r]];
        g->nodes[upd].op = IR_OP_UPD;
        g->nodes[upd].pass = PLAN_PASS_UPD;
        g->nodes[upd].mb = -1;
        g->nodes[upd].flags &= (uint16_t)~IR_NODE_PER_MB;
        ir_dag_add_edge(g, bwd[r], upd, grad, IR_EDGE_DATA);
        ir_dag_add_tensor(g, upd, IR_T_PARAM, 0);
        if (!grad_clip) continue;
        if (norm_out[s] < 0) {
            int32_t part = ir_dag_add_node(g, IR_OP_GRAD_NORM);
            g->nodes[part].stage = s;
            g->nodes[part].place = place0;
            int32_t partial = ir_dag_add_tensor(g, part, IR_T_SCALAR, 8);
            int32_t ar = ir_dag_add_node(g, IR_OP_ALL_REDUCE);
            g->nodes[ar].stage = s;
            g->nodes[ar].place = place0;
            g->nodes[ar].coll_group = IR_CG_WORLD;
            g->nodes[ar].bytes = 8;
            ir_dag_add_edge(g, part, ar, partial, IR_EDGE_DATA);
            norm_out[s] = ir_dag_add_tensor(g, ar, IR_T_SCALAR, 8);
        }
        /* the norm node is the producer of norm_out's source: find it through the tensor */
        int32_t ar = g->tensors[norm_out[s]].producer;
        int32_t part = -1;
        ir_dag_build_adjacency(g);
        for (int32_t k = g->in_off[ar]; k < g->in_off[ar + 1]; k++)
            part = g->edges[g->in_edge[k]].src;
        ir_dag_add_edge(g, bwd[r], part, grad, IR_EDGE_DATA);
        ir_dag_add_edge(g, ar, upd, norm_out[s], IR_EDGE_DATA);
    }
    g->num_microbatches = 1;
    return 0;
}
