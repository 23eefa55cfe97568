/* tp_sync.c — gradients of parameters that every tensor-parallel rank holds whole (norm scales
 * and biases, row-parallel output biases, learned positions, replicated key/value heads). A
 * region's backward runs on its shard of the activations' gradient (the all-reduce of the input
 * gradient comes after it, at the region boundary), so each rank's gradient of such a parameter
 * is partial; an all-reduce over the TP group completes it before the gradient norm, the
 * data-parallel reduction and the optimizer see it (Megatron all-reduces these "sequence
 * parallel" and layernorm gradients across TP for the same reason). One IR node per region,
 * per step, on the reduction stream. Runs once placements are final. */
#include "sched_internal.h"

#include <stdlib.h>
#include <string.h>

int64_t sched_tp_replicated_params(const ir_model *m, const ir_region *r, const ir_shape *s)
{
    if (s->tp <= 1) return 0;
    /* per device = sharded / t + replicated, whole = sharded + replicated */
    int64_t whole = ir_region_params(m, r);
    int64_t dev = ir_region_params_per_device(m, r, s);
    int64_t rep = (s->tp * dev - whole) / (s->tp - 1);
    return rep > 0 ? rep : 0;
}

/* The TP all-reduce of region u's replicated gradients that feeds consumers of micro-batch mb
 * (-1: per-step consumers), made on first use. */
static int32_t tp_sync_node(ir_dag *g, int32_t u, int32_t mb, int stream, int32_t *out_tensor)
{
    int32_t ar = ir_dag_add_node(g, IR_OP_ALL_REDUCE);
    ir_node *a = &g->nodes[ar];
    const ir_node *un = &g->nodes[u];
    a->place = un->place;
    a->stage = un->stage;
    a->region = un->region;
    a->layer = un->layer;
    a->tp = un->tp;
    a->mb = mb;
    a->coll_group = IR_CG_TP;
    a->flags = IR_NODE_DP_SYNC | IR_NODE_TP;
    a->pass = PLAN_PASS_AUX;
    a->stream = (int16_t)stream;
    int32_t out = ir_dag_add_tensor(g, ar, IR_T_GRAD, 0);
    g->tensors[out].region = un->region;
    g->tensors[out].mb = mb;
    *out_tensor = out;
    return ar;
}

int sched_tp_grad_sync(sched_ctx *x, base_error *e)
{
    ir_dag *g = x->g;
    (void)e;
    int stream = -1;
    /* One all-reduce per region and step; or, where the gradient's consumers are per micro-batch
     * (ZeRO-2/3 reduce-scatter each micro-batch's whole gradient, dir_replicate.c), one per
     * micro-batch before that micro-batch's reduction: summed after it, the pieces of the
     * replicated tensors would no longer be whole on every rank. */
    int64_t nmb = g->num_microbatches > 0 ? g->num_microbatches : 1;
    int32_t *ar_of = base_xmalloc((size_t)(nmb + 1) * sizeof *ar_of); /* [mb + 1] */
    int32_t *out_of = base_xmalloc((size_t)(nmb + 1) * sizeof *out_of);
    for (size_t u = 0; u < g->nnodes; u++) {
        const ir_node *un = &g->nodes[u];
        if (un->dead || un->op != IR_OP_UPD || un->region < 0 || un->tp < 2) continue;
        ir_shape s = sched_node_shape(x, (int32_t)u);
        if (sched_tp_replicated_params(g->model, &g->regions[un->region], &s) <= 0) continue;
        if (stream < 0) stream = ir_dag_intern_stream(g, "dp");
        const int region = un->region;
        for (int64_t k = 0; k <= nmb; k++) ar_of[k] = -1;
        /* every consumer of the region's weight gradients reads the completed one */
        size_t ne = g->nedges;
        BASE_VEC(int32_t) linked = {0};    /* (all-reduce, tensor) pairs already read */
        BASE_VEC(int32_t) consumers = {0}; /* (all-reduce, consumer) pairs already rerouted */
        for (size_t i = 0; i < ne; i++) {
            ir_edge *ed = &g->edges[i];
            if (ed->dead || ed->kind != IR_EDGE_DATA) continue;
            const ir_tensor *t = &g->tensors[ed->tensor];
            if (t->kind != IR_T_GRAD || g->nodes[ed->src].region != region) continue;
            int op = g->nodes[ed->src].op;
            if (op != IR_OP_B && op != IR_OP_BW) continue;
            int32_t src = ed->src, tensor = ed->tensor, dst = ed->dst;
            const ir_node *dn = &g->nodes[dst];
            int32_t mb = (dn->flags & IR_NODE_PER_MB) && dn->mb >= 0 && dn->mb < nmb ? dn->mb : -1;
            if (ar_of[mb + 1] < 0) {
                ar_of[mb + 1] = tp_sync_node(g, (int32_t)u, mb, stream, &out_of[mb + 1]);
                ed = &g->edges[i];
            }
            int32_t ar = ar_of[mb + 1], out = out_of[mb + 1];
            bool seen = false;
            for (size_t k = 0; k + 1 < consumers.n; k += 2)
                seen |= consumers.v[k] == ar && consumers.v[k + 1] == dst;
            if (seen) {
                ed->dead = 1; /* the consumer already reads `out` */
            } else {
                BASE_VEC_PUSH(consumers, ar);
                BASE_VEC_PUSH(consumers, dst);
                ed->src = ar;
                ed->tensor = out;
            }
            seen = false;
            for (size_t k = 0; k + 1 < linked.n; k += 2)
                seen |= linked.v[k] == ar && linked.v[k + 1] == tensor;
            if (!seen) {
                BASE_VEC_PUSH(linked, ar);
                BASE_VEC_PUSH(linked, tensor);
                ir_dag_add_edge(g, src, ar, tensor, IR_EDGE_DATA);
            }
        }
        free(linked.v);
        free(consumers.v);
        g->adj_valid = false;
    }
    free(ar_of);
    free(out_of);
    return 0;
}
