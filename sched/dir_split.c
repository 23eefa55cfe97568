/* dir_split.c — `split {filter, dim, num_microbatches}`: micro-batching. Copies the per-micro-
 * batch part of the step (forward, backward, recompute and the communication between them) m
 * times with MB = 0..m-1 (the tag split's dim_name names; the loader makes filters read that name
 * as MB). Per-step nodes (optimizer, gradient synchronisation, gradient norm) stay
 * single and read every copy's gradient: accumulation, not a new producer per tensor. */
#include "sched_internal.h"

#include <stdlib.h>
#include <string.h>

int sched_dir_split(sched_ctx *x, const ir_directive *d, base_error *e)
{
    ir_dag *g = x->g;
    int64_t m = d->num_microbatches;
    if (x->split_done)
        return sched_dir_error(d, e, "the step is already split into %lld micro-batches; keep "
                                     "one split directive",
                               (long long)g->num_microbatches);
    if (x->order_seen)
        return sched_dir_error(d, e, "split must come before order and schedule directives, "
                                     "which refer to micro-batches; move it up");
    if (m < 1) return sched_dir_error(d, e, "num_microbatches must be at least 1");

    /* The filter must select the whole per-micro-batch path: a partial split would give some
     * regions m micro-batches and others one, which no schedule can run. */
    size_t n0 = g->nnodes;
    int matched = 0;
    for (size_t v = 0; v < n0; v++) {
        const ir_node *nd = &g->nodes[v];
        if (nd->dead || !(nd->flags & IR_NODE_PER_MB)) continue;
        if (!sched_filter_match(g, (int32_t)v, &d->filter)) {
            char lbl[96];
            return sched_dir_error(d, e,
                                   "the filter leaves '%s' unsplit, but every forward and "
                                   "backward node must be split alike; use filter {}",
                                   ir_node_label(g, (int32_t)v, lbl, sizeof lbl));
        }
        matched++;
    }
    if (!matched) return sched_dir_error(d, e, "the filter matches no node; use filter {}");
    if (m == 1) {
        x->split_done = true;
        return 0;
    }
    if ((int64_t)n0 * m > 50000000)
        return sched_dir_error(d, e, "%lld micro-batches make a DAG of more than 50M nodes; use "
                                     "fewer micro-batches or a larger micro-batch",
                               (long long)m);

    /* copy_of[k][v]: node v's copy for micro-batch k (k = 0 is v itself). */
    int32_t *copy = base_xmalloc((size_t)m * n0 * sizeof *copy);
    for (size_t v = 0; v < n0; v++) copy[v] = (int32_t)v;
    for (int64_t k = 1; k < m; k++) {
        for (size_t v = 0; v < n0; v++) {
            const ir_node *nd = &g->nodes[v];
            if (nd->dead || !(nd->flags & IR_NODE_PER_MB)) {
                copy[k * n0 + v] = (int32_t)v;
                continue;
            }
            int32_t c = ir_dag_add_node(g, (ir_op)g->nodes[v].op);
            g->nodes[c] = g->nodes[v];
            g->nodes[c].mb = (int32_t)k;
            copy[k * n0 + v] = c;
        }
        for (size_t v = 0; v < n0; v++) { /* partners of copied p2p and recompute nodes */
            int32_t c = copy[k * n0 + v];
            if (c != (int32_t)v && g->nodes[c].link >= 0)
                g->nodes[c].link = copy[k * n0 + g->nodes[c].link];
        }
    }
    /* Tensors produced by per-micro-batch nodes get a copy per micro-batch. */
    size_t t0 = g->ntensors;
    int32_t *tcopy = base_xmalloc((size_t)m * t0 * sizeof *tcopy);
    for (size_t t = 0; t < t0; t++) {
        tcopy[t] = (int32_t)t;
        int32_t p = g->tensors[t].producer;
        bool per_mb = p >= 0 && (g->nodes[p].flags & IR_NODE_PER_MB);
        for (int64_t k = 1; k < m; k++) {
            if (!per_mb) {
                tcopy[k * t0 + t] = (int32_t)t;
                continue;
            }
            int32_t c = ir_dag_add_tensor(g, copy[k * n0 + p], (ir_tensor_kind)g->tensors[t].kind,
                                          g->tensors[t].bytes);
            g->tensors[c].region = g->tensors[t].region;
            g->tensors[c].mb = (int32_t)k;
            tcopy[k * t0 + t] = c;
        }
    }
    size_t e0 = g->nedges;
    for (size_t i = 0; i < e0; i++) {
        ir_edge ed = g->edges[i];
        if (ed.dead) continue;
        bool su = g->nodes[ed.src].flags & IR_NODE_PER_MB, sv = g->nodes[ed.dst].flags & IR_NODE_PER_MB;
        if (!su && !sv) continue;
        for (int64_t k = 1; k < m; k++) {
            int32_t t = ed.tensor >= 0 ? tcopy[k * t0 + ed.tensor] : -1;
            ir_dag_add_edge(g, copy[k * n0 + ed.src], copy[k * n0 + ed.dst], t, (ir_edge_kind)ed.kind);
        }
    }
    free(copy);
    free(tcopy);
    g->num_microbatches = m;
    x->split_done = true;
    return 0;
}
