/* dir_shard.c — tensor parallelism (`shard_tensor`) and expert parallelism (`shard`).
 *
 * shard_tensor {filter, devices, degree, stream, sequence_parallel}: Megatron-style column/row
 * parallel pairs inside each TP-tagged region (attention, MLP, vocab-parallel embedding and
 * head). Without sequence parallelism each region's forward ends in an all-reduce of its output
 * and its backward in an all-reduce of its input gradient; with it, the forward starts with an
 * all-gather and ends with a reduce-scatter along the sequence, and the backward mirrors them
 * (Korthikanti et al., arXiv 2205.05198); the backward also re-gathers the norm input and output
 * shards its forward kept (sched_sp_backward_gathers, run when placements are final).
 *
 * shard {filter, devices, degree, stream}: the experts of each EP-tagged block are spread over
 * `degree` devices of the data-parallel group; tokens go to their experts by an all-to-all
 * (dispatch) and come back by another (combine), in forward and in backward. */
#include "sched_internal.h"

#include <stdlib.h>
#include <string.h>

/* Incoming data edges of v that carry activations or activation gradients across regions. */
static int boundary_in_edges(ir_dag *g, int32_t v, int32_t *out, int max)
{
    ir_dag_build_adjacency(g);
    int n = 0;
    for (int32_t k = g->in_off[v]; k < g->in_off[v + 1] && n < max; k++) {
        const ir_edge *ed = &g->edges[g->in_edge[k]];
        if (ed->kind != IR_EDGE_DATA) continue;
        uint8_t kind = g->tensors[ed->tensor].kind;
        if (kind == IR_T_ACT || kind == IR_T_GRAD_ACT) out[n++] = g->in_edge[k];
    }
    return n;
}

/* Tensors v hands across a region boundary (distinct, with at least one consumer). */
static int boundary_out_tensors(ir_dag *g, int32_t v, int32_t *out, int max)
{
    int n = 0;
    for (int32_t k = g->out_off[v]; k < g->out_off[v + 1] && n < max; k++) {
        const ir_edge *ed = &g->edges[g->out_edge[k]];
        if (ed->kind != IR_EDGE_DATA) continue;
        uint8_t kind = g->tensors[ed->tensor].kind;
        if (kind != IR_T_ACT && kind != IR_T_GRAD_ACT) continue;
        bool seen = false;
        for (int i = 0; i < n; i++) seen |= out[i] == ed->tensor;
        if (!seen) out[n++] = ed->tensor;
    }
    return n;
}

typedef BASE_VEC(sched_coll_req) req_vec;
typedef BASE_VEC(int32_t) i32_vec;

/* Collect, then splice: befores (edge, node) pairs first, then the batch of afters. */
static void splice(ir_dag *g, i32_vec *before_v, i32_vec *before_e, ir_op before_op,
                   ir_coll_group cg, int stream, req_vec *after)
{
    for (size_t i = 0; i < before_v->n; i++)
        sched_insert_coll_before(g, before_v->v[i], before_e->v[i], before_op, cg, stream);
    sched_insert_colls_after(g, after->v, after->n);
    free(before_v->v);
    free(before_e->v);
    free(after->v);
}

int sched_dir_shard_tensor(sched_ctx *x, const ir_directive *d, base_error *e)
{
    ir_dag *g = x->g;
    const ir_model *m = g->model;
    if (x->order_seen)
        return sched_dir_error(d, e, "shard_tensor must come before order and schedule "
                                     "directives; move it up");
    if (d->ndevices < 1)
        return sched_dir_error(d, e, "give devices: one tensor-parallel group, e.g. [0, 1]");
    /* A Piper array names the whole group its nodes run on (Piper checks they are equal). */
    if (x->prog->from_piper_array)
        for (size_t vi = 0; vi < g->nnodes; vi++) {
            const ir_node *n = &g->nodes[vi];
            if (!(n->flags & IR_NODE_TP) || IR_OP_INFO[n->op].kind == IR_KIND_P2P ||
                !sched_filter_match(g, (int32_t)vi, &d->filter))
                continue;
            const ir_place *p = &g->places[n->place];
            bool same = p->ndev == d->ndevices;
            for (int i = 0; same && i < p->ndev; i++) same = sched_place_pos(p, d->devices[i]) >= 0;
            if (same || p->ndev == 1) continue;
            char lbl[96];
            return sched_dir_error(d, e,
                                   "'%s' runs on %d devices (from device %d), but this Piper "
                                   "array's shard_tensor names %d: in Piper's schema shard_tensor "
                                   "names the whole group its nodes run on; name all %d devices "
                                   "(a mesh directive with a tp axis sets the tensor-parallel "
                                   "degree inside it)",
                                   ir_node_label(g, (int32_t)vi, lbl, sizeof lbl), p->ndev,
                                   p->devs[0], d->ndevices, p->ndev);
        }
    ir_directive piper_group;
    d = sched_piper_group(x, d, IR_CG_TP, &piper_group);
    for (int i = 0; i < d->ndevices; i++)
        if (d->devices[i] < 0 || d->devices[i] >= g->world)
            return sched_dir_error(d, e, "device %d is outside the cluster's %d devices",
                                   d->devices[i], g->world);
    int64_t t = d->ndevices;
    if (m->heads % t || m->hidden % t || m->ffn % t || m->vocab % t)
        return sched_dir_error(d, e,
                               "tensor-parallel degree %lld must divide heads (%lld), hidden "
                               "(%lld), ffn (%lld) and vocab (%lld); pick a divisor",
                               (long long)t, (long long)m->heads, (long long)m->hidden,
                               (long long)m->ffn, (long long)m->vocab);
    int stream = d->stream ? ir_dag_intern_stream(g, d->stream) : 0;
    ir_place dp_ = {d->ndevices, d->devices};
    int own = ir_dag_intern_place(g, &dp_);
    bool moved = false;

    int matched = 0;
    size_t n0 = g->nnodes;
    /* each placement's expert-parallel degree: EP groups form inside the data-parallel
     * dimension, so TP on the same devices must leave a DP degree that EP divides */
    int16_t *place_ep = base_xcalloc((size_t)g->nplaces + 1, sizeof *place_ep);
    for (size_t vi = 0; vi < n0; vi++)
        if (!g->nodes[vi].dead && g->nodes[vi].place >= 0 && g->nodes[vi].ep > place_ep[g->nodes[vi].place])
            place_ep[g->nodes[vi].place] = g->nodes[vi].ep;
    for (size_t vi = 0; vi < n0; vi++) {
        int32_t v = (int32_t)vi;
        if (!sched_filter_match(g, v, &d->filter)) continue;
        ir_node *n = &g->nodes[v];
        if (!(n->flags & IR_NODE_TP) || IR_OP_INFO[n->op].kind == IR_KIND_P2P) continue;
        const int pep = n->place >= 0 ? place_ep[n->place] : 1, nd = g->places[n->place].ndev;
        if (pep > 1 && (nd % t || (nd / t) % pep)) {
            char lbl[96];
            free(place_ep);
            return sched_dir_error(d, e,
                                   "after the placement directives, '%s' runs on %d devices with "
                                   "expert parallelism of degree %d, and tensor parallelism of "
                                   "degree %lld on the same devices leaves a data-parallel degree "
                                   "of %d that EP does not divide (EP groups form inside DP); give "
                                   "TP devices of its own: replicate over TP x DP x ... devices, "
                                   "shard_tensor over consecutive ones, shard over every TP-th "
                                   "(docs/programs.md, \"Devices\")",
                                   ir_node_label(g, v, lbl, sizeof lbl), nd, pep, (long long)t,
                                   nd / (int)t);
        }
        if (n->tp > 1) {
            char lbl[96];
            free(place_ep);
            return sched_dir_error(d, e, "'%s' is already tensor-parallel", ir_node_label(g, v, lbl, sizeof lbl));
        }
        /* A node on one device becomes tensor-parallel over the group; a node already on
         * several devices (TP x DP) must be given one of its TP groups. */
        if (g->places[n->place].ndev == 1) {
            if (n->place != own) moved = true;
            n->place = own;
        } else if (sched_check_subgroup(x, d, v, IR_CG_TP, (int)t, 1, e)) {
            free(place_ep);
            return -1;
        }
        n->tp = (int16_t)t;
        n->sp = d->sequence_parallel;
        matched++;
    }
    free(place_ep);
    if (!matched)
        return sched_dir_error(d, e, "the filter matches no TP-annotated node; annotate with "
                                     "tp: true and filter e.g. {TP: \"*\"}");
    (void)moved;
    if (t == 1) return 0;

    /* Collectives: around every compute node that just became tensor-parallel. */
    ir_dag_build_adjacency(g);
    i32_vec bv = {0}, be = {0};
    req_vec after = {0};
    for (size_t vi = 0; vi < n0; vi++) {
        int32_t v = (int32_t)vi;
        ir_node *n = &g->nodes[v];
        if (n->dead || n->tp != t || !(n->flags & IR_NODE_TP)) continue;
        if (!sched_filter_match(g, v, &d->filter)) continue;
        if (n->op != IR_OP_F && n->op != IR_OP_B) continue;
        int32_t outs[8], ins[8];
        int no = boundary_out_tensors(g, v, outs, 8);
        /* Without SP: g, an all-reduce after the row-parallel output (forward), and f, an
         * all-reduce of the input gradient (backward). With SP: all-gather in, reduce-scatter
         * out, in both directions. */
        if (n->sp) {
            int ni = boundary_in_edges(g, v, ins, 8);
            for (int i = 0; i < ni; i++) {
                BASE_VEC_PUSH(bv, v);
                BASE_VEC_PUSH(be, ins[i]);
            }
        }
        for (int i = 0; i < no; i++) {
            sched_coll_req r = {outs[i], n->sp ? IR_OP_REDUCE_SCATTER : IR_OP_ALL_REDUCE, IR_CG_TP, v, stream};
            BASE_VEC_PUSH(after, r);
        }
    }
    splice(g, &bv, &be, IR_OP_ALL_GATHER, IR_CG_TP, stream, &after);
    return 0;
}

/* Sequence parallelism keeps, of the tensors a region's backward reads, the norm input and the
 * norm output (the column-parallel GEMM's input) for the device's b*s/t tokens only (ir/cost.c);
 * the backward needs them for all b*s tokens (the weight gradient of that GEMM, and the norm's
 * backward on the tokens whose gradient it makes), so Megatron all-gathers them again in the
 * backward (Korthikanti et al. 2022, section 4.2.2). Here: one TP all-gather per backward of a
 * sequence-parallel attention, MLP or head, reading its F's saved tensor (the kept shards come
 * first in that layout: [norm input | norm output], 2*(b*s/t)*h*e bytes; sizes.c counts them)
 * and writing a comm tensor of all b*s tokens that the backward reads (BW too, after an order
 * splits it: dir_order.c copies data inputs). It is just in time (ordered right before the
 * backward) on the stream of the region's other TP collectives. A fully recomputed region's F
 * keeps only its input (gathered again for R, dir_recompute.c); its backward gathers the shards
 * R rebuilt (IR_T_RECOMP), as Megatron's backward does after a recomputation. Runs once, when
 * the placements are final, after every shard_tensor and recompute directive (and after
 * sched_link_recomputes). */
void sched_sp_backward_gathers(sched_ctx *x)
{
    ir_dag *g = x->g;
    ir_dag_build_adjacency(g);
    size_t n0 = g->nnodes;
    i32_vec bs = {0}, saved = {0}, streams = {0};
    for (size_t vi = 0; vi < n0; vi++) {
        const ir_node *n = &g->nodes[vi];
        if (n->dead || n->op != IR_OP_B || !n->sp || n->tp < 2 || n->region < 0) continue;
        ir_region_kind k = g->regions[n->region].kind;
        if (k != IR_REGION_ATTN && k != IR_REGION_MLP && k != IR_REGION_HEAD) continue;
        int32_t t = -1, stream = -1;
        for (int32_t q = g->in_off[vi]; q < g->in_off[vi + 1]; q++) {
            const ir_edge *ed = &g->edges[g->in_edge[q]];
            if (ed->kind != IR_EDGE_DATA) continue;
            const ir_node *src = &g->nodes[ed->src];
            if (g->tensors[ed->tensor].kind == IR_T_SAVED && src->op == IR_OP_F &&
                src->region == n->region && src->recompute != IR_RECOMPUTE_FULL)
                t = ed->tensor;
            /* under full recompute the shards are what R rebuilt (R ran on the whole input and
             * keeps the device's rows, as F would have) */
            if (g->tensors[ed->tensor].kind == IR_T_RECOMP && src->op == IR_OP_R &&
                src->region == n->region && src->recompute == IR_RECOMPUTE_FULL && t < 0)
                t = ed->tensor;
            if (IR_OP_INFO[src->op].kind == IR_KIND_COLL && src->coll_group == IR_CG_TP &&
                !(src->flags & IR_NODE_DP_SYNC))
                stream = src->stream;
        }
        /* the head's backward gathers nothing in: its reduce-scatter out names the stream */
        for (int32_t q = g->out_off[vi]; q < g->out_off[vi + 1] && stream < 0; q++) {
            const ir_node *dst = &g->nodes[g->edges[g->out_edge[q]].dst];
            if (IR_OP_INFO[dst->op].kind == IR_KIND_COLL && dst->coll_group == IR_CG_TP &&
                !(dst->flags & IR_NODE_DP_SYNC))
                stream = dst->stream;
        }
        if (t < 0) continue;
        BASE_VEC_PUSH(bs, (int32_t)vi);
        BASE_VEC_PUSH(saved, t);
        BASE_VEC_PUSH(streams, stream);
    }
    for (size_t i = 0; i < bs.n; i++) {
        int32_t b = bs.v[i], t = saved.v[i];
        int32_t c = sched_add_node_like(g, IR_OP_ALL_GATHER, b);
        ir_node *cn = &g->nodes[c];
        const ir_node *bn = &g->nodes[b];
        cn->directive = bn->directive;
        cn->flags = (uint16_t)((bn->flags & (IR_NODE_PER_MB | IR_NODE_TP)) | IR_NODE_JIT);
        cn->link = b;
        cn->coll_group = IR_CG_TP;
        cn->stream = (int16_t)(streams.v[i] >= 0 ? streams.v[i] : bn->stream);
        ir_dag_add_edge(g, g->tensors[t].producer, c, t, IR_EDGE_DATA);
        int32_t out = ir_dag_add_tensor(g, c, IR_T_COMM, 0);
        ir_dag_add_edge(g, c, b, out, IR_EDGE_DATA);
    }
    free(bs.v);
    free(saved.v);
    free(streams.v);
    g->adj_valid = false;
}

int sched_dir_shard(sched_ctx *x, const ir_directive *d, base_error *e)
{
    ir_dag *g = x->g;
    const ir_model *m = g->model;
    if (x->order_seen)
        return sched_dir_error(d, e, "shard must come before order and schedule directives; "
                                     "move it up");
    if (m->experts <= 0)
        return sched_dir_error(d, e, "model '%s' has no experts to shard; use a MoE model",
                               m->name ? m->name : "?");
    if (d->ndevices < 1)
        return sched_dir_error(d, e, "give devices: one expert-parallel group, e.g. [0, 2]");
    int64_t ep = d->ndevices;
    if (m->experts % ep)
        return sched_dir_error(d, e, "expert-parallel degree %lld must divide the %lld experts",
                               (long long)ep, (long long)m->experts);
    int stream = d->stream ? ir_dag_intern_stream(g, d->stream) : 0;

    int matched = 0;
    size_t n0 = g->nnodes;
    for (size_t vi = 0; vi < n0; vi++) {
        int32_t v = (int32_t)vi;
        if (!sched_filter_match(g, v, &d->filter)) continue;
        ir_node *n = &g->nodes[v];
        if (!(n->flags & IR_NODE_EP) || IR_OP_INFO[n->op].kind == IR_KIND_P2P) continue;
        if (n->ep > 1) {
            char lbl[96];
            return sched_dir_error(d, e, "'%s' is already expert-parallel", ir_node_label(g, v, lbl, sizeof lbl));
        }
        int ptp = sched_placement_tp(g, n->place);
        int64_t dp = g->places[n->place].ndev / ptp;
        if (dp % ep) {
            char lbl[96];
            return sched_dir_error(d, e,
                                   "expert-parallel degree %lld must divide the data-parallel "
                                   "degree %lld of '%s' (EP groups form inside DP); replicate "
                                   "over more devices first",
                                   (long long)ep, (long long)dp, ir_node_label(g, v, lbl, sizeof lbl));
        }
        if (sched_check_subgroup(x, d, v, IR_CG_EP, ptp, (int)ep, e)) return -1;
        n->ep = (int16_t)ep;
        matched++;
    }
    if (!matched)
        return sched_dir_error(d, e, "the filter matches no EP-annotated node; annotate with "
                                     "ep: true and filter e.g. {EP: \"*\"}");
    ir_dag_build_adjacency(g);
    i32_vec bv = {0}, be = {0};
    req_vec after = {0};
    for (size_t vi = 0; vi < n0; vi++) {
        int32_t v = (int32_t)vi;
        ir_node *n = &g->nodes[v];
        if (n->dead || n->ep < 2 || !(n->flags & IR_NODE_EP)) continue;
        if (!sched_filter_match(g, v, &d->filter)) continue;
        if (n->op != IR_OP_F && n->op != IR_OP_B) continue;
        int32_t ins[8], outs[8];
        int ni = boundary_in_edges(g, v, ins, 8);
        for (int i = 0; i < ni; i++) {
            BASE_VEC_PUSH(bv, v);
            BASE_VEC_PUSH(be, ins[i]);
        }
        int no = boundary_out_tensors(g, v, outs, 8);
        for (int i = 0; i < no; i++) {
            sched_coll_req r = {outs[i], IR_OP_ALL_TO_ALL, IR_CG_EP, v, stream};
            BASE_VEC_PUSH(after, r);
        }
    }
    splice(g, &bv, &be, IR_OP_ALL_TO_ALL, IR_CG_EP, stream, &after);
    return 0;
}
