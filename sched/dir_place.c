/* dir_place.c — `place {filter, devices, stream}`: puts nodes on a device group, and keeps the
 * DAG's communication consistent with placements: every data edge between two placements goes
 * through a SEND/RECV pair (device i of one group talks to device i of the other). */
#include "sched_internal.h"

#include <stdlib.h>
#include <string.h>

static int place_of_devices(sched_ctx *x, const ir_directive *d, base_error *e)
{
    for (int i = 0; i < d->ndevices; i++) {
        if (d->devices[i] < 0 || d->devices[i] >= x->g->world)
            return sched_dir_error(d, e, "device %d is outside the cluster's %d devices (0..%d)",
                                   d->devices[i], x->g->world, x->g->world - 1);
        for (int j = 0; j < i; j++)
            if (d->devices[j] == d->devices[i])
                return sched_dir_error(d, e, "device %d is listed twice", d->devices[i]);
    }
    ir_place p = {d->ndevices, d->devices};
    return ir_dag_intern_place(x->g, &p);
}

/* Runs once the structural directives are done (before the first order, or at the end), since
 * placements are only consistent then: while a program places stage after stage, the DAG is
 * half-placed. Remove every SEND/RECV pair (reconnecting producer and consumers), then add one pair per data
 * edge that crosses placements. Cheap and idempotent, so any later place simply re-derives. */
/* The last directive that put a group on exactly these devices: where a mismatch between two
 * placements is reported, so that the message points at a line of the program. */
static const ir_directive *directive_placing(const sched_ctx *x, const ir_place *p)
{
    const ir_directive *found = NULL;
    for (int i = 0; i < x->prog->ndirectives; i++) {
        const ir_directive *d = &x->prog->directives[i];
        if (d->op != IR_DIR_PLACE && d->op != IR_DIR_REPLICATE) continue;
        if (d->ndevices == p->ndev && !memcmp(d->devices, p->devs, (size_t)p->ndev * sizeof *p->devs))
            found = d;
    }
    return found;
}

int sched_fix_p2p(sched_ctx *x, base_error *e)
{
    ir_dag *g = x->g;
    ir_dag_build_adjacency(g);
    /* 1. splice out pairs: u -(t)-> SEND -> RECV -(t')-> consumers  becomes  u -(t)-> consumers */
    for (size_t s = 0; s < g->nnodes; s++) {
        ir_node *sn = &g->nodes[s];
        if (sn->dead || sn->op != IR_OP_SEND) continue;
        int32_t r = sn->link;
        int32_t in_edge = g->in_edge[g->in_off[s]];
        int32_t t = g->edges[in_edge].tensor;
        int32_t u = g->edges[in_edge].src;
        for (int32_t k = g->out_off[r]; k < g->out_off[r + 1]; k++) {
            ir_edge *x2 = &g->edges[g->out_edge[k]];
            if (x2->kind == IR_EDGE_DATA) {
                x2->src = u;
                x2->tensor = t;
            } else {
                x2->dead = 1;
            }
        }
        for (int32_t k = g->in_off[s]; k < g->in_off[s + 1]; k++) g->edges[g->in_edge[k]].dead = 1;
        for (int32_t k = g->out_off[s]; k < g->out_off[s + 1]; k++) g->edges[g->out_edge[k]].dead = 1;
        for (int32_t k = g->in_off[r]; k < g->in_off[r + 1]; k++) g->edges[g->in_edge[k]].dead = 1;
        sn->dead = 1;
        g->nodes[r].dead = 1;
    }
    g->adj_valid = false;

    /* 2. one pair per crossing data edge */
    int p2p_stream = ir_dag_intern_stream(g, "p2p");
    size_t ne = g->nedges;
    for (size_t i = 0; i < ne; i++) {
        ir_edge ed = g->edges[i];
        if (ed.dead || ed.kind != IR_EDGE_DATA) continue;
        const ir_node *u = &g->nodes[ed.src], *v = &g->nodes[ed.dst];
        if (u->place == v->place) continue;
        const ir_place *pu = &g->places[u->place], *pv = &g->places[v->place];
        if (pu->ndev != pv->ndev) {
            char a[96], b[96];
            const ir_directive *d = directive_placing(x, pv);
            if (!d) d = directive_placing(x, pu);
            if (d)
                return sched_dir_error(d, e,
                                       "after the placement directives, '%s' on %d devices feeds "
                                       "'%s' on %d devices; piper sends device i to device i, so "
                                       "place both on the same number of devices (this directive "
                                       "gives %d)",
                                       ir_node_label(g, ed.src, a, sizeof a), pu->ndev,
                                       ir_node_label(g, ed.dst, b, sizeof b), pv->ndev, d->ndevices);
            return base_error_at(e, x->prog->file, 0, 0,
                                 "after the placement directives, '%s' on %d devices feeds '%s' "
                                 "on %d devices; piper sends device i to device i, so place both "
                                 "on the same number of devices",
                                 ir_node_label(g, ed.src, a, sizeof a), pu->ndev,
                                 ir_node_label(g, ed.dst, b, sizeof b), pv->ndev);
        }
        int32_t s = ir_dag_add_node(g, IR_OP_SEND);
        int32_t r = ir_dag_add_node(g, IR_OP_RECV);
        ir_node *sn = &g->nodes[s], *rn = &g->nodes[r];
        u = &g->nodes[ed.src];
        v = &g->nodes[ed.dst];
        /* The send belongs to its producer's stage and pass, the receive to its consumer's, so
         * that order filters such as {PP: 1, MB: 3, PASS: F} pick up both ends naturally. */
        sn->region = u->region; sn->layer = u->layer; sn->mb = u->mb; sn->stage = u->stage;
        sn->chunk = u->chunk; sn->pass = u->pass; sn->place = u->place; sn->flags = u->flags & IR_NODE_PER_MB;
        rn->region = v->region; rn->layer = v->layer; rn->mb = v->mb; rn->stage = v->stage;
        rn->chunk = v->chunk; rn->pass = v->pass; rn->place = v->place; rn->flags = v->flags & IR_NODE_PER_MB;
        sn->stream = rn->stream = (int16_t)p2p_stream;
        sn->link = r;
        rn->link = s;
        sn->peer_place = v->place;
        rn->peer_place = u->place;
        int32_t t2 = ir_dag_add_tensor(g, r, (ir_tensor_kind)g->tensors[ed.tensor].kind,
                                       g->tensors[ed.tensor].bytes);
        g->tensors[t2].region = g->tensors[ed.tensor].region;
        g->edges[i].src = r;
        g->edges[i].tensor = t2;
        ir_dag_add_edge(g, ed.src, s, ed.tensor, IR_EDGE_DATA);
        /* what is in flight belongs to the send: one producer per tensor */
        int32_t t1 = ir_dag_add_tensor(g, s, (ir_tensor_kind)g->tensors[ed.tensor].kind,
                                       g->tensors[ed.tensor].bytes);
        g->tensors[t1].region = g->tensors[ed.tensor].region;
        ir_dag_add_edge(g, s, r, t1, IR_EDGE_DATA);
    }
    g->adj_valid = false;
    g->p2p_done = true;
    return 0;
}

int sched_dir_place(sched_ctx *x, const ir_directive *d, base_error *e)
{
    if (x->order_seen)
        return sched_dir_error(d, e, "place must come before order and schedule directives; "
                                     "move it up");
    if (d->ndevices < 1) return sched_dir_error(d, e, "give the devices to place on");
    int place = place_of_devices(x, d, e);
    if (place < 0) return -1;
    int stream = d->stream ? ir_dag_intern_stream(x->g, d->stream) : -1;
    ir_dag *g = x->g;
    int matched = 0;
    for (size_t v = 0; v < g->nnodes; v++) {
        if (!sched_filter_match(g, (int32_t)v, &d->filter)) continue;
        ir_node *n = &g->nodes[v];
        if (n->op == IR_OP_SEND || n->op == IR_OP_RECV) continue; /* re-derived below */
        matched++;
        n->place = place;
        if (stream >= 0 && IR_OP_INFO[n->op].kind == IR_KIND_COMPUTE) n->stream = (int16_t)stream;
    }
    if (!matched) return sched_dir_error(d, e, "the filter matches no node; check its tags");
    return 0;
}
