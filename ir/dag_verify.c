/* dag_verify.c — the invariants every pass must keep (run after each directive): the DAG is
 * acyclic; every tensor has exactly one producer and every data edge starts at it; data stays
 * inside a placement except along SEND -> RECV; p2p and collectives are well-formed; sizes are
 * finite and non-negative. Messages name the offending nodes so a user can find their directive. */
#include "dag.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LBL 96

static int fail(base_error *e, const char *after, const char *fmt, ...) BASE_PRINTF(3, 4);
static int fail(base_error *e, const char *after, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return base_errorf(e, "%s: the training DAG is invalid: %s", after ? after : "build", msg);
}

/* Order dummies are named by their directive, the one place a user can fix them. */
static const char *cycle_label(const ir_dag *g, int32_t v, char *buf, size_t n)
{
    const ir_node *x = &g->nodes[v];
    if (x->op == IR_OP_ORDER && x->directive >= 0) {
        snprintf(buf, n, "order of directive %d", x->directive);
        return buf;
    }
    return ir_node_label(g, v, buf, n);
}

static int verify_acyclic(ir_dag *g, const char *after, base_error *e)
{
    size_t n = g->nnodes;
    int32_t *indeg = base_xcalloc(n ? n : 1, sizeof *indeg);
    int32_t *queue = base_xmalloc((n ? n : 1) * sizeof *queue);
    size_t live = 0, head = 0, tail = 0;
    for (size_t v = 0; v < n; v++) {
        if (g->nodes[v].dead) continue;
        live++;
        indeg[v] = g->in_off[v + 1] - g->in_off[v];
        if (indeg[v] == 0) queue[tail++] = (int32_t)v;
    }
    while (head < tail) {
        int32_t v = queue[head++];
        for (int32_t k = g->out_off[v]; k < g->out_off[v + 1]; k++) {
            int32_t w = g->edges[g->out_edge[k]].dst;
            if (--indeg[w] == 0) queue[tail++] = w;
        }
    }
    int rc = 0;
    if (tail != live) {
        /* Name the nodes of one cycle: walk back from a blocked node through blocked
         * predecessors (every blocked node has one) until a node repeats; the walk between the
         * two visits is the cycle, backwards. The queue is free again: it maps node -> step. */
        int32_t *walk = base_xmalloc((n ? n : 1) * sizeof *walk);
        int32_t *step = queue;
        for (size_t i = 0; i < n; i++) step[i] = -1;
        int32_t v = -1;
        for (size_t i = 0; i < n && v < 0; i++)
            if (!g->nodes[i].dead && indeg[i] > 0) v = (int32_t)i;
        size_t len = 0;
        while (v >= 0 && step[v] < 0) {
            step[v] = (int32_t)len;
            walk[len++] = v;
            int32_t next = -1;
            for (int32_t k = g->in_off[v]; k < g->in_off[v + 1] && next < 0; k++) {
                int32_t u = g->edges[g->in_edge[k]].src;
                if (indeg[u] > 0) next = u;
            }
            v = next;
        }
        char cyc[720] = "", a[LBL];
        size_t off = 0, first = v >= 0 ? (size_t)step[v] : len, shown = 0;
        for (size_t i = len; i-- > first && off + 2 * LBL < sizeof cyc;) {
            if (shown == 10 && i > first) {
                off += (size_t)snprintf(cyc + off, sizeof cyc - off, " -> ... (%zu more)", i - first);
                i = first;
            }
            off += (size_t)snprintf(cyc + off, sizeof cyc - off, "%s'%s'", shown ? " -> " : "",
                                    cycle_label(g, walk[i], a, sizeof a));
            shown++;
        }
        if (shown)
            snprintf(cyc + off, sizeof cyc - off, " -> '%s'", cycle_label(g, walk[len - 1], a, sizeof a));
        free(walk);
        rc = fail(e, after,
                  "it has a cycle %s (%zu nodes can never run); an order directive probably "
                  "contradicts the data flow: reorder its groups",
                  cyc, live - tail);
    }
    free(indeg);
    free(queue);
    return rc;
}

int ir_dag_verify(ir_dag *g, const char *after, base_error *e)
{
    ir_dag_build_adjacency(g);
    char a[LBL], b[LBL];

    for (size_t i = 0; i < g->nedges; i++) {
        const ir_edge *x = &g->edges[i];
        if (x->dead) continue;
        if (x->src < 0 || (size_t)x->src >= g->nnodes || x->dst < 0 || (size_t)x->dst >= g->nnodes)
            return fail(e, after, "edge %zu points outside the DAG", i);
        const ir_node *u = &g->nodes[x->src], *v = &g->nodes[x->dst];
        if (u->dead || v->dead)
            return fail(e, after, "edge from '%s' to '%s' touches a removed node",
                        ir_node_label(g, x->src, a, sizeof a), ir_node_label(g, x->dst, b, sizeof b));
        if (x->kind == IR_EDGE_TEMPORAL) continue;
        if (x->tensor < 0 || (size_t)x->tensor >= g->ntensors)
            return fail(e, after, "data edge from '%s' carries no tensor",
                        ir_node_label(g, x->src, a, sizeof a));
        if (g->tensors[x->tensor].producer != x->src)
            return fail(e, after,
                        "a tensor read by '%s' is produced by '%s', but the edge starts at '%s' "
                        "(every tensor has one producer)",
                        ir_node_label(g, x->dst, a, sizeof a),
                        ir_node_label(g, g->tensors[x->tensor].producer, b, sizeof b),
                        ir_node_label(g, x->src, (char[LBL]){0}, LBL));
        bool transfer = u->op == IR_OP_SEND && v->op == IR_OP_RECV;
        if (!transfer && u->place != v->place && g->p2p_done) {
            const ir_place *pu = &g->places[u->place], *pv = &g->places[v->place];
            return fail(e, after,
                        "'%s' on device %d%s feeds '%s' on device %d%s without a send/receive; "
                        "place producer and consumer consistently",
                        ir_node_label(g, x->src, a, sizeof a), pu->devs[0], pu->ndev > 1 ? ".." : "",
                        ir_node_label(g, x->dst, b, sizeof b), pv->devs[0], pv->ndev > 1 ? ".." : "");
        }
        if (transfer && (u->link != x->dst || v->link != x->src))
            return fail(e, after, "send '%s' and receive '%s' are not partners",
                        ir_node_label(g, x->src, a, sizeof a), ir_node_label(g, x->dst, b, sizeof b));
    }

    for (size_t i = 0; i < g->ntensors; i++) {
        const ir_tensor *t = &g->tensors[i];
        if (!isfinite(t->bytes) || t->bytes < 0)
            return fail(e, after, "a tensor of '%s' has size %g bytes",
                        t->producer >= 0 ? ir_node_label(g, t->producer, a, sizeof a) : "?", t->bytes);
    }

    for (size_t i = 0; i < g->nnodes; i++) {
        const ir_node *x = &g->nodes[i];
        if (x->dead) continue;
        int32_t v = (int32_t)i;
        if (x->place < 0 || x->place >= g->nplaces)
            return fail(e, after, "'%s' has no placement", ir_node_label(g, v, a, sizeof a));
        const ir_place *p = &g->places[x->place];
        for (int d = 0; d < p->ndev; d++)
            if (p->devs[d] < 0 || p->devs[d] >= g->world)
                return fail(e, after, "'%s' is placed on device %d, outside the cluster's %d devices",
                            ir_node_label(g, v, a, sizeof a), p->devs[d], g->world);
        if (x->tp < 1 || x->ep < 1 || p->ndev % x->tp != 0 || (p->ndev / x->tp) % x->ep != 0)
            return fail(e, after,
                        "'%s' runs with tensor-parallel degree %d and expert-parallel degree %d "
                        "on %d devices, which they do not divide",
                        ir_node_label(g, v, a, sizeof a), x->tp, x->ep, p->ndev);
        if (!isfinite(x->bytes) || x->bytes < 0)
            return fail(e, after, "'%s' communicates %g bytes", ir_node_label(g, v, a, sizeof a),
                        x->bytes);
        if (x->stream < 0 || x->stream >= g->nstreams)
            return fail(e, after, "'%s' has no stream", ir_node_label(g, v, a, sizeof a));
        ir_op_kind kind = IR_OP_INFO[x->op].kind;
        if (kind == IR_KIND_P2P) {
            if (x->link < 0 || (size_t)x->link >= g->nnodes || g->nodes[x->link].dead ||
                g->nodes[x->link].link != v)
                return fail(e, after, "'%s' has no partner", ir_node_label(g, v, a, sizeof a));
            const ir_place *q = &g->places[g->nodes[x->link].place];
            if (q->ndev != p->ndev)
                return fail(e, after,
                            "'%s' pairs %d devices with %d; p2p needs groups of equal size: place "
                            "both sides on the same number of devices",
                            ir_node_label(g, v, a, sizeof a), p->ndev, q->ndev);
        }
        if (kind == IR_KIND_COLL && x->coll_group == IR_CG_NONE)
            return fail(e, after, "collective '%s' has no group", ir_node_label(g, v, a, sizeof a));
    }
    return verify_acyclic(g, after, e);
}
