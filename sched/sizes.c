/* sizes.c — recomputes every tensor's and every communication's size from the DAG's current
 * structure (after each pass), because later directives change earlier sizes: sequence
 * parallelism shrinks the activations a pipeline send carries, tensor parallelism the gradients a
 * data-parallel bucket reduces. Sizes follow the cost model (ir/model.h), per device. */
#include "sched_internal.h"

#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Regions after the attention of a layer: under full recompute of the whole layer they keep no
 * input of their own (the attention's recompute rebuilds it). */
static bool after_attention(ir_region_kind k)
{
    return k == IR_REGION_MLP || k == IR_REGION_MOE_GATE || k == IR_REGION_MOE_EXPERTS ||
           k == IR_REGION_MOE_COMBINE;
}

/* Whether the forward tensor region `from` hands the node `to` is an MoE gate's route to its
 * combine (past the experts), sized ir_region_route_bytes rather than as the region's output. */
static bool route_edge(const ir_dag *g, const ir_region *from, const ir_node *to)
{
    return from->kind == IR_REGION_MOE_GATE && to->region >= 0 &&
           g->regions[to->region].kind == IR_REGION_MOE_COMBINE;
}

ir_shape sched_node_shape(const sched_ctx *x, int32_t v)
{
    const ir_node *n = &x->g->nodes[v];
    ir_shape s = ir_shape_default();
    s.micro_batch = x->prog->micro_batch > 0 ? x->prog->micro_batch : 1;
    s.tp = n->tp;
    s.sequence_parallel = n->sp && n->tp > 1;
    s.ep = n->ep;
    s.recompute = (ir_recompute)n->recompute;
    s.act_dtype = (plan_dtype)x->prog->act_dtype;
    s.param_dtype = (plan_dtype)x->prog->param_dtype;
    s.grad_dtype = (plan_dtype)x->prog->grad_dtype;
    /* ZeRO >= 1 (dp = stage + 1 >= 2) shards the optimizer state over the data-parallel group,
     * as lower.c sizes the optimizer buffers: the step updates the device's piece only */
    if (n->op == IR_OP_UPD && n->dp >= 2 && n->tp > 0) s.opt_shards = sched_upd_replicas(x->g, n);
    return s;
}

int sched_upd_replicas(const ir_dag *g, const ir_node *n)
{
    int tp = n->tp > 0 ? n->tp : 1;
    int r = g->places[n->place].ndev / tp;
    if (n->region >= 0 && g->regions[n->region].kind == IR_REGION_MOE_EXPERTS && n->ep > 1)
        r /= n->ep;
    return r > 0 ? r : 1;
}

/* Devices in the group a collective node spans. */
static int group_size(const ir_dag *g, const ir_node *n)
{
    int ndev = g->places[n->place].ndev;
    switch ((ir_coll_group)n->coll_group) {
    case IR_CG_TP: return n->tp;
    case IR_CG_DP: return ndev / n->tp;
    case IR_CG_EP: return n->ep;
    case IR_CG_WORLD: return g->world;
    case IR_CG_PAIR: return 2;
    case IR_CG_EDP: return ndev / n->tp / (n->ep > 0 ? n->ep : 1);
    default: return 1;
    }
}

static int32_t *topo_order(ir_dag *g)
{
    ir_dag_build_adjacency(g);
    size_t n = g->nnodes;
    int32_t *indeg = base_xcalloc(n ? n : 1, sizeof *indeg);
    int32_t *order = base_xmalloc((n ? n : 1) * sizeof *order);
    size_t head = 0, tail = 0;
    for (size_t v = 0; v < n; v++) {
        if (g->nodes[v].dead) continue;
        indeg[v] = g->in_off[v + 1] - g->in_off[v];
        if (!indeg[v]) order[tail++] = (int32_t)v;
    }
    while (head < tail) {
        int32_t v = order[head++];
        for (int32_t k = g->out_off[v]; k < g->out_off[v + 1]; k++) {
            int32_t w = g->edges[g->out_edge[k]].dst;
            if (--indeg[w] == 0) order[tail++] = w;
        }
    }
    free(indeg);
    if (tail < n) order[tail] = -1; /* cyclic: the verifier reports it */
    return order;
}

void sched_update_sizes(sched_ctx *x)
{
    ir_dag *g = x->g;
    const ir_model *m = g->model;
    int gb = plan_dtype_bytes((plan_dtype)x->prog->grad_dtype);
    int pb = plan_dtype_bytes((plan_dtype)x->prog->param_dtype);

    /* Which layers have their attention fully recomputed. */
    bool *attn_full = base_xcalloc((size_t)(m->layers > 0 ? m->layers : 1), sizeof *attn_full);
    for (size_t v = 0; v < g->nnodes; v++) {
        const ir_node *n = &g->nodes[v];
        if (!n->dead && n->op == IR_OP_F && n->region >= 0 && n->layer >= 0 &&
            g->regions[n->region].kind == IR_REGION_ATTN && n->recompute == IR_RECOMPUTE_FULL)
            attn_full[n->layer] = true;
    }

    /* Tied embeddings on two placements: the head's weight gradient and parameters include its
     * copy of the embedding (sched/tied.c), so buckets and ZeRO-3 gathers carry it too. */
    bool tied_split = false;
    if (m->tied_embeddings) {
        int pe = -1, ph = -1;
        for (size_t v = 0; v < g->nnodes; v++) {
            const ir_node *n = &g->nodes[v];
            if (n->dead || n->op != IR_OP_UPD || n->region < 0) continue;
            if (g->regions[n->region].kind == IR_REGION_EMBED) pe = n->place;
            if (g->regions[n->region].kind == IR_REGION_HEAD) ph = n->place;
        }
        tied_split = pe >= 0 && ph >= 0 && pe != ph;
    }

    int32_t *order = topo_order(g);
    for (size_t i = 0; i < g->nnodes && order[i] >= 0; i++) {
        int32_t v = order[i];
        ir_node *n = &g->nodes[v];
        if (n->dead) continue;
        ir_op_kind kind = IR_OP_INFO[n->op].kind;
        const ir_region *reg = n->region >= 0 ? &g->regions[n->region] : NULL;
        ir_shape s = sched_node_shape(x, v);
        if (reg && s.recompute == IR_RECOMPUTE_FULL && reg->layer >= 0 && after_attention(reg->kind))
            s.recompute_from_prev = attn_full[reg->layer];

        /* input bytes (the first data input), for communication nodes */
        double in_bytes = 0;
        int in_kind = -1;
        double grad_sum = 0, param_sum = 0;
        /* a bucket sums each region's gradient once, however many micro-batches feed it: those
         * of its first micro-batch (0, or m/2 for a DualPipe mirror's copy, dualpipe_mirror.c) */
        int32_t first_mb = INT32_MAX;
        for (int32_t k = g->in_off[v]; k < g->in_off[v + 1]; k++) {
            const ir_edge *ed = &g->edges[g->in_edge[k]];
            const ir_tensor *t = ed->kind == IR_EDGE_DATA ? &g->tensors[ed->tensor] : NULL;
            if (t && t->kind == IR_T_GRAD && t->mb < first_mb) first_mb = t->mb;
        }
        if (first_mb < 0) first_mb = 0;
        for (int32_t k = g->in_off[v]; k < g->in_off[v + 1]; k++) {
            const ir_edge *ed = &g->edges[g->in_edge[k]];
            if (ed->kind != IR_EDGE_DATA) continue;
            const ir_tensor *t = &g->tensors[ed->tensor];
            if (in_bytes == 0) {
                in_bytes = t->bytes;
                in_kind = t->kind;
            }
            if (t->kind == IR_T_GRAD && t->mb <= first_mb) grad_sum += t->bytes;
            if (t->kind == IR_T_PARAM) param_sum += t->bytes;
        }
        int nn = group_size(g, n);

        if (kind == IR_KIND_P2P) n->bytes = in_bytes;
        /* a compute's workspace (lower.c allocates it around the compute): its kernels' own, then,
         * from the next multiple of 8 bytes, what it computes but does not keep: a forward under
         * recompute the tensors only R keeps (IR_T_RECOMP), a recompute its region's output (and
         * an MoE gate's route), which the next region read long ago */
        if (kind == IR_KIND_COMPUTE) {
            double w = reg ? ir_region_work_bytes(m, reg, &s, (plan_pass)IR_OP_INFO[n->op].pass) : 0;
            double extra = 0;
            if (reg && n->op == IR_OP_F && s.recompute != IR_RECOMPUTE_NONE) {
                ir_shape full = s;
                full.recompute = IR_RECOMPUTE_NONE;
                full.recompute_from_prev = false;
                extra = ir_region_activation_bytes(m, reg, &full) - ir_region_activation_bytes(m, reg, &s);
            } else if (reg && n->op == IR_OP_R) {
                /* unless it hands them to the next region's recompute (dir_recompute.c) */
                bool out = false, route = false;
                for (int32_t k = g->out_off[v]; k < g->out_off[v + 1]; k++) {
                    const ir_edge *ed = &g->edges[g->out_edge[k]];
                    if (ed->kind != IR_EDGE_DATA || g->tensors[ed->tensor].kind != IR_T_ACT) continue;
                    if (route_edge(g, reg, &g->nodes[ed->dst])) route = true;
                    else out = true;
                }
                if (!out) extra += ir_region_output_bytes(m, reg, &s);
                if (reg->kind == IR_REGION_MOE_GATE && !route) extra += ir_region_route_bytes(m, &s);
            }
            n->bytes = extra > 0 ? ceil(w / 8.0) * 8.0 + extra : w;
        }
        if (kind == IR_KIND_COLL) {
            if (n->coll_group == IR_CG_TP && (n->flags & IR_NODE_DP_SYNC) && reg) {
                /* the gradients of the parameters every TP rank holds whole (tp_sync.c) */
                n->bytes = (double)sched_tp_replicated_params(m, reg, &s) * gb;
            } else if (n->coll_group == IR_CG_PAIR && reg && (n->flags & IR_NODE_TIED)) {
                /* tied embeddings: the embedding weight's gradient (this device's shard) */
                n->bytes = (double)ir_model_tied_copy_params_per_device(m, &s) * gb;
            } else if (n->coll_group == IR_CG_PAIR && reg) {
                /* DualPipe's mirrored stages (dualpipe_mirror.c): the region's whole gradient */
                n->bytes = (double)ir_region_params_per_device(m, reg, &s) * gb;
            } else if (n->flags & IR_NODE_DP_SYNC) {
                if (n->op == IR_OP_ALL_GATHER && (n->flags & IR_NODE_JIT) && reg) { /* ZeRO-3 */
                    n->bytes = (double)ir_region_params_per_device(m, reg, &s) * pb;
                    /* the head reads the token table: its own copy (tied_split) or the
                     * embedding's, a ZeRO-3 shard on this placement (lower.c: the gather reads
                     * both parameter buffers); either way the gather carries it */
                    if (m->tied_embeddings && reg->kind == IR_REGION_HEAD)
                        n->bytes += (double)ir_model_tied_copy_params_per_device(m, &s) * pb;
                }
                else if (n->op == IR_OP_ALL_GATHER)
                    n->bytes = param_sum; /* whole parameters out (NCCL counts the output) */
                else
                    n->bytes = grad_sum;
            } else if (n->op == IR_OP_ALL_GATHER && (in_kind == IR_T_SAVED || in_kind == IR_T_RECOMP) &&
                       reg && n->pass != PLAN_PASS_R) {
                /* sequence parallelism's backward re-gather (dir_shard.c): the prefix of the
                 * saved tensor that holds the device's shards of the norm input and output,
                 * 2 * (b*s/t) * h * e bytes, gathered from the t ranks: 2 * b*s * h * e */
                n->bytes = 2.0 * (double)s.micro_batch * (double)m->seq * (double)m->hidden *
                           (double)plan_dtype_bytes(s.act_dtype);
            } else if (n->flags & IR_NODE_FUSED) {
                /* fuse_collectives: one call for every member's tensor */
                double sum = 0;
                for (int32_t k = g->in_off[v]; k < g->in_off[v + 1]; k++) {
                    const ir_edge *ed = &g->edges[g->in_edge[k]];
                    if (ed->kind == IR_EDGE_DATA) sum += g->tensors[ed->tensor].bytes;
                }
                n->bytes = n->op == IR_OP_ALL_GATHER ? sum * nn : sum;
            } else if (n->op == IR_OP_ALL_GATHER) {
                n->bytes = in_bytes * nn;
            } else if (n->coll_group == IR_CG_WORLD) {
                n->bytes = 8;
            } else {
                n->bytes = in_bytes;
            }
        }

        /* output tensors */
        for (int32_t k = g->out_off[v]; k < g->out_off[v + 1]; k++) {
            const ir_edge *ed = &g->edges[g->out_edge[k]];
            if (ed->kind != IR_EDGE_DATA) continue;
            ir_tensor *t = &g->tensors[ed->tensor];
            if (t->producer != v) continue;
            double b = 0;
            if (kind == IR_KIND_COMPUTE && reg) {
                switch ((ir_tensor_kind)t->kind) {
                case IR_T_ACT: {
                    b = route_edge(g, reg, &g->nodes[ed->dst]) ? ir_region_route_bytes(m, &s)
                                                               : ir_region_output_bytes(m, reg, &s);
                    break;
                }
                case IR_T_GRAD_ACT: {
                    const ir_region *to = t->region >= 0 ? &g->regions[t->region] : reg;
                    bool route = reg->kind == IR_REGION_MOE_COMBINE && to->kind == IR_REGION_MOE_GATE;
                    b = route ? ir_region_route_bytes(m, &s) : ir_region_output_bytes(m, to, &s);
                    break;
                }
                case IR_T_SAVED: b = ir_region_activation_bytes(m, reg, &s); break;
                case IR_T_RECOMP: {
                    ir_shape full = s;
                    full.recompute = IR_RECOMPUTE_NONE;
                    full.recompute_from_prev = false;
                    b = ir_region_activation_bytes(m, reg, &full) - ir_region_activation_bytes(m, reg, &s);
                    if (b < 0) b = 0;
                    break;
                }
                case IR_T_GRAD:
                    b = (double)ir_region_params_per_device(m, reg, &s) * gb;
                    if (tied_split && reg->kind == IR_REGION_HEAD)
                        b += (double)ir_model_tied_copy_params_per_device(m, &s) * gb;
                    break;
                case IR_T_PARAM: b = (double)ir_region_params_per_device(m, reg, &s) * pb; break;
                case IR_T_SCALAR: b = 4; break;
                default: b = t->bytes; break;
                }
                /* Under sequence parallelism a region's full-size output goes into a
                 * reduce-scatter; the sharded boundary size is what comes out of it. */
                if ((t->kind == IR_T_ACT || t->kind == IR_T_GRAD_ACT) && s.sequence_parallel &&
                    g->nodes[ed->dst].op == IR_OP_REDUCE_SCATTER)
                    b *= (double)s.tp;
            } else if (kind == IR_KIND_COMPUTE) {
                b = t->kind == IR_T_SCALAR ? 8 : t->bytes;
            } else if (kind == IR_KIND_COLL && (n->flags & IR_NODE_FUSED)) {
                /* each member's output, as its own collective would have made it */
                b = n->op == IR_OP_ALL_GATHER       ? in_bytes * nn
                    : n->op == IR_OP_REDUCE_SCATTER ? in_bytes / nn
                                                    : in_bytes;
            } else if (kind == IR_KIND_COLL) {
                if (n->op == IR_OP_REDUCE_SCATTER) b = (n->flags & IR_NODE_DP_SYNC ? n->bytes : in_bytes) / nn;
                else if (n->op == IR_OP_ALL_GATHER) b = n->bytes;
                else if (n->coll_group == IR_CG_TP && (n->flags & IR_NODE_DP_SYNC))
                    b = in_bytes; /* the whole gradient, now complete */
                else if (n->flags & IR_NODE_DP_SYNC) b = n->bytes;
                else b = in_bytes;
            } else if (kind == IR_KIND_P2P) {
                b = in_bytes;
            }
            t->bytes = b;
        }
    }
    free(order);
    free(attn_full);
}
