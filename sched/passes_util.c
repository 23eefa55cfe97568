/* passes_util.c — what every directive pass needs: locating a directive in messages, matching
 * filters against node tags, and splicing a communication node onto a tensor's edges. */
#include "sched_internal.h"

#include <stdlib.h>
#include <string.h>

const char *sched_dir_where(const ir_directive *d, char *buf, size_t n)
{
    snprintf(buf, n, "%s:%d:%d: directive %d (%s)", d->file ? d->file : "?", d->line, d->col,
             d->index, ir_directive_name(d->op));
    return buf;
}

int sched_dir_error(const ir_directive *d, base_error *e, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return base_error_at(e, d->file, d->line, d->col, "directive %d (%s): %s", d->index,
                         ir_directive_name(d->op), msg);
}

plan_pass sched_node_pass(const ir_dag *g, int32_t v) { return (plan_pass)g->nodes[v].pass; }

static bool match_value(const ir_tag_match *m, int64_t have)
{
    if (m->none) return have < 0; /* null: the node does not carry the tag */
    if (have < 0) return false;   /* the node has no such tag */
    return m->any || m->value == have;
}

bool sched_filter_match(const ir_dag *g, int32_t v, const ir_filter *f)
{
    const ir_node *x = &g->nodes[v];
    if (x->dead || x->op == IR_OP_ORDER) return false;
    for (int i = 0; i < f->n; i++) {
        const ir_tag_match *m = &f->m[i];
        int64_t have = -1;
        switch (m->tag) {
        case IR_TAG_PP: have = x->stage; break;
        case IR_TAG_EP: have = (x->flags & IR_NODE_EP) ? (x->layer >= 0 ? x->layer : 0) : -1; break;
        case IR_TAG_TP: have = (x->flags & IR_NODE_TP) ? (x->layer >= 0 ? x->layer : 0) : -1; break;
        case IR_TAG_MB: have = x->mb; break;
        case IR_TAG_PASS: have = x->pass < PLAN_NPASS ? x->pass : -1; break;
        case IR_TAG_LAYER: have = x->layer; break;
        case IR_TAG_REGION: have = x->region >= 0 ? (int64_t)g->regions[x->region].kind : -1; break;
        case IR_TAG_CHUNK: have = x->chunk; break;
        default: return false;
        }
        /* `PASS: B` also selects the halves of a split backward, so a program written for an
         * unsplit backward keeps working after an order directive splits it. */
        if (m->tag == IR_TAG_PASS && !m->any && !m->none && m->value == PLAN_PASS_B &&
            (have == PLAN_PASS_BI || have == PLAN_PASS_BW))
            continue;
        if (!match_value(m, have)) return false;
    }
    return true;
}

int32_t sched_add_node_like(ir_dag *g, ir_op op, int32_t like)
{
    int32_t v = ir_dag_add_node(g, op);
    ir_node *n = &g->nodes[v], *l = &g->nodes[like];
    n->region = l->region;
    n->layer = l->layer;
    n->mb = l->mb;
    n->stage = l->stage;
    n->chunk = l->chunk;
    n->place = l->place;
    n->pass = l->pass;
    n->flags = l->flags & (IR_NODE_PER_MB | IR_NODE_EP | IR_NODE_TP);
    n->tp = l->tp;
    n->ep = l->ep;
    n->sp = l->sp;
    n->dp = l->dp;
    return v;
}

void sched_insert_colls_after(ir_dag *g, const sched_coll_req *req, size_t n)
{
    if (!n) return;
    size_t nt = g->ntensors;
    int32_t *coll = base_xmalloc(nt * sizeof *coll), *out = base_xmalloc(nt * sizeof *out);
    for (size_t t = 0; t < nt; t++) coll[t] = -1;
    for (size_t i = 0; i < n; i++) {
        const sched_coll_req *r = &req[i];
        if (coll[r->tensor] >= 0) continue;
        int32_t c = sched_add_node_like(g, r->op, r->like);
        g->nodes[c].coll_group = (uint8_t)r->cg;
        g->nodes[c].stream = (int16_t)r->stream;
        int32_t o = ir_dag_add_tensor(g, c, (ir_tensor_kind)g->tensors[r->tensor].kind, 0);
        g->tensors[o].region = g->tensors[r->tensor].region;
        coll[r->tensor] = c;
        out[r->tensor] = o;
    }
    size_t ne = g->nedges;
    for (size_t i = 0; i < ne; i++) {
        ir_edge *x = &g->edges[i];
        if (x->dead || x->kind != IR_EDGE_DATA || x->tensor < 0 || (size_t)x->tensor >= nt) continue;
        int32_t t = x->tensor;
        if (coll[t] < 0 || x->dst == coll[t]) continue;
        x->src = coll[t];
        x->tensor = out[t];
    }
    for (size_t t = 0; t < nt; t++)
        if (coll[t] >= 0) ir_dag_add_edge(g, g->tensors[t].producer, coll[t], (int32_t)t, IR_EDGE_DATA);
    free(coll);
    free(out);
    g->adj_valid = false;
}

int32_t sched_insert_coll_before(ir_dag *g, int32_t v, int32_t edge, ir_op op, ir_coll_group cg,
                                 int stream)
{
    ir_edge *x = &g->edges[edge];
    int32_t tensor = x->tensor, src = x->src;
    int32_t c = sched_add_node_like(g, op, v);
    g->nodes[c].coll_group = (uint8_t)cg;
    g->nodes[c].stream = (int16_t)stream;
    int32_t out = ir_dag_add_tensor(g, c, (ir_tensor_kind)g->tensors[tensor].kind, 0);
    g->tensors[out].region = g->tensors[tensor].region;
    x = &g->edges[edge];
    x->src = c;
    x->tensor = out;
    ir_dag_add_edge(g, src, c, tensor, IR_EDGE_DATA);
    g->adj_valid = false;
    return c;
}

int sched_place_pos(const ir_place *p, int dev)
{
    for (int i = 0; i < p->ndev; i++)
        if (p->devs[i] == dev) return i;
    return -1;
}

int sched_group_members(const ir_dag *g, int place, int peer_place, ir_coll_group cg, int tp,
                        int ep, int dev, int32_t *out)
{
    if (cg == IR_CG_WORLD) {
        for (int d = 0; d < g->world; d++) out[d] = d;
        return g->world;
    }
    const ir_place *p = &g->places[place];
    int pos = sched_place_pos(p, dev);
    if (cg == IR_CG_PAIR) {
        /* the device and its counterpart (same position) in the peer placement, ascending */
        int other = peer_place >= 0 && pos >= 0 && pos < g->places[peer_place].ndev
                        ? g->places[peer_place].devs[pos] : dev;
        out[0] = dev < other ? dev : other;
        out[1] = dev < other ? other : dev;
        return other == dev ? 1 : 2;
    }
    if (pos < 0 || tp < 1 || p->ndev % tp) {
        out[0] = dev;
        return 1;
    }
    int n = 0, tp_rank = pos % tp, dp_rank = pos / tp, dp = p->ndev / tp;
    switch (cg) {
    case IR_CG_TP:
        for (int i = 0; i < tp; i++) out[n++] = p->devs[dp_rank * tp + i];
        break;
    case IR_CG_DP:
        for (int j = 0; j < dp; j++) out[n++] = p->devs[j * tp + tp_rank];
        break;
    case IR_CG_EP: {
        if (ep < 1 || dp % ep) {
            out[n++] = dev;
            break;
        }
        int first = (dp_rank / ep) * ep;
        for (int j = 0; j < ep; j++) out[n++] = p->devs[(first + j) * tp + tp_rank];
        break;
    }
    case IR_CG_EDP: /* the same position in every expert-parallel group */
        if (ep < 1 || dp % ep) {
            out[n++] = dev;
            break;
        }
        for (int j = dp_rank % ep; j < dp; j += ep) out[n++] = p->devs[j * tp + tp_rank];
        break;
    default: out[n++] = dev;
    }
    return n;
}

static const char *CG_WORDS[] = {"", "tensor-parallel", "data-parallel", "expert-parallel", "", "", "expert-data-parallel"};

int sched_check_subgroup(const sched_ctx *x, const ir_directive *d, int32_t v, ir_coll_group cg,
                         int tp, int ep, base_error *e)
{
    const ir_dag *g = x->g;
    const ir_node *n = &g->nodes[v];
    int32_t *m = base_xmalloc((size_t)g->world * sizeof *m);
    int nm = sched_group_members(g, n->place, -1, cg, tp, ep, d->devices[0], m);
    bool ok = nm == d->ndevices && memcmp(m, d->devices, (size_t)nm * sizeof *m) == 0;
    char want[256] = "", lbl[96];
    size_t off = 0;
    for (int i = 0; i < nm && off + 16 < sizeof want; i++)
        off += (size_t)snprintf(want + off, sizeof want - off, i ? ", %d" : "%d", m[i]);
    free(m);
    if (ok) return 0;
    const ir_place *p = &g->places[n->place];
    return sched_dir_error(d, e,
                           "'%s' runs on %d devices (from device %d); its %s group through "
                           "device %d is [%s], not the %d devices given. Devices list one group: "
                           "tensor-parallel groups are consecutive positions of the placement, "
                           "data-parallel groups the same position in each of them",
                           ir_node_label(g, v, lbl, sizeof lbl), p->ndev, p->devs[0], CG_WORDS[cg],
                           d->devices[0], want, d->ndevices);
}

int sched_placement_tp(const ir_dag *g, int place)
{
    int tp = 1;
    for (size_t v = 0; v < g->nnodes; v++)
        if (!g->nodes[v].dead && g->nodes[v].place == place && g->nodes[v].tp > tp) tp = g->nodes[v].tp;
    return tp;
}

int sched_settle_aux_nodes(sched_ctx *x)
{
    /* The gradient-norm partial, its world all-reduce and the load-balancing loss start on
     * device 0 and move with `place`/`replicate` filters that name their stage; a program that
     * only uses shard_tensor leaves them behind. Once placements are final they join the
     * placement every input comes from. */
    ir_dag *g = x->g;
    ir_dag_build_adjacency(g);
    for (size_t v = 0; v < g->nnodes; v++) {
        ir_node *n = &g->nodes[v];
        if (n->dead || (n->op != IR_OP_GRAD_NORM && n->op != IR_OP_AUX_LOSS)) continue;
        int place = -1;
        bool one = true;
        for (int32_t k = g->in_off[v]; k < g->in_off[v + 1] && one; k++) {
            const ir_edge *ed = &g->edges[g->in_edge[k]];
            if (ed->kind != IR_EDGE_DATA) continue;
            int p = g->nodes[ed->src].place;
            if (place < 0) place = p;
            one = p == place;
        }
        if (!one || place < 0 || place == n->place) continue;
        int old = n->place;
        n->place = place;
        for (int32_t k = g->out_off[v]; k < g->out_off[v + 1]; k++) {
            ir_node *w = &g->nodes[g->edges[g->out_edge[k]].dst];
            if (IR_OP_INFO[w->op].kind == IR_KIND_COLL && w->place == old) w->place = place;
        }
    }
    return 0;
}

int sched_expert_grad_groups(sched_ctx *x)
{
    /* Each expert-parallel rank holds different experts, so a data-parallel reduction (or
     * gather) of expert parameters spans only the ranks at the same position of every EP group.
     * Replicate keeps expert regions in buckets of their own; here, once EP is known, those
     * buckets switch to that group. */
    ir_dag *g = x->g;
    int *ep_of = base_xcalloc((size_t)g->nregions, sizeof *ep_of);
    for (size_t v = 0; v < g->nnodes; v++) {
        const ir_node *n = &g->nodes[v];
        if (!n->dead && n->op == IR_OP_UPD && n->region >= 0) ep_of[n->region] = n->ep;
    }
    ir_dag_build_adjacency(g);
    for (size_t v = 0; v < g->nnodes; v++) {
        ir_node *n = &g->nodes[v];
        if (n->dead || !(n->flags & IR_NODE_DP_SYNC) || n->coll_group != IR_CG_DP) continue;
        int ep = 0;
        bool experts = true, any = false;
        if (n->region >= 0) {
            any = true;
            experts = g->regions[n->region].kind == IR_REGION_MOE_EXPERTS;
            ep = ep_of[n->region];
        }
        for (int32_t k = g->in_off[v]; k < g->in_off[v + 1] && experts; k++) {
            const ir_edge *ed = &g->edges[g->in_edge[k]];
            int r = ed->kind == IR_EDGE_DATA ? g->nodes[ed->src].region : -1;
            if (r < 0) continue;
            any = true;
            experts = g->regions[r].kind == IR_REGION_MOE_EXPERTS;
            if (ep_of[r] > ep) ep = ep_of[r];
        }
        if (!any || !experts || ep < 2) continue;
        n->coll_group = IR_CG_EDP;
        n->ep = (int16_t)ep;
        n->tp = (int16_t)sched_placement_tp(g, n->place);
    }
    free(ep_of);
    return 0;
}
