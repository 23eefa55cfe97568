/* dag.c — `piper-viz dag`: the two dependency graphs a user may want to see. From a program, the
 * global training DAG the directives built (one node per computation or communication, SPMD, so
 * one cluster per placement); from a plan file, where the DAG is gone, each device's instructions
 * with the dependencies the plan implies (buffers, streams, events, matching sends and receives).
 * Both fill a vg_graph (viz_internal.h), which collapses and writes dot. */
#include "viz_internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

int viz_collapse_parse(const char *s, unsigned *out, base_error *e)
{
    *out = 0;
    const char *p = s ? s : "";
    while (*p) {
        size_t n = strcspn(p, ",");
        if (n == 2 && !strncmp(p, "mb", 2)) *out |= VIZ_COLLAPSE_MB;
        else if (n == 6 && !strncmp(p, "layers", 6)) *out |= VIZ_COLLAPSE_LAYERS;
        else
            return base_errorf(e, "--collapse '%s': unknown part '%.*s'; use mb (one node per region and pass across "
                               "micro-batches), layers (a stage's layers merged), or mb,layers", s, (int)n, p);
        p += n;
        if (*p == ',') p++;
    }
    if (!*out) return base_errorf(e, "--collapse needs mb, layers or mb,layers");
    return 0;
}

/* "L12.attn" -> 12: plans keep region names, not layer numbers. */
static int32_t layer_of_name(const char *region)
{
    if (!region || region[0] != 'L' || !isdigit((unsigned char)region[1])) return -1;
    char *end;
    long v = strtol(region + 1, &end, 10);
    return (*end == '.' || *end == 0) && v >= 0 && v < INT32_MAX ? (int32_t)v : -1;
}

/* "[0,1,2,3]", "[0,1,..,63]": long device lists shortened as dag_dump does. */
static void devices_str(const int32_t *d, int n, base_buf *b)
{
    base_buf_puts(b, "[");
    for (int i = 0; i < n; i++) {
        if (i == 6 && n > 8) {
            base_buf_printf(b, ",..,%d", d[n - 1]);
            break;
        }
        base_buf_printf(b, i ? ",%d" : "%d", d[i]);
    }
    base_buf_puts(b, "]");
}

static int finish(vg_graph *g, const viz_dag_options *o, const char *title, base_buf *dot, base_error *e)
{
    int rc;
    if (o->title) title = o->title;
    if (!(o->collapse & VIZ_COLLAPSE_MB)) vg_bypass_dummies(g); /* merged across micro-batches they go */
    vg_dedupe_edges(g);
    if (o->collapse) {
        vg_graph c;
        vg_collapse(g, o->collapse, &c);
        rc = vg_write_dot(&c, title, o->max_nodes, dot, e);
        vg_free(&c);
    } else {
        rc = vg_write_dot(g, title, o->max_nodes, dot, e);
    }
    return rc;
}

/* ---------------------------------------------------------------- the IR's DAG */

static const char *const CG_NAMES[] = {"", "tp", "dp", "ep", "world", "pair"};

int viz_dag_from_ir(const ir_dag *dag, const viz_dag_options *o, base_buf *dot, base_error *e)
{
    if (o->device >= dag->world || o->device < -1)
        return base_errorf(e, "--device %d: the program has devices 0..%d; pick one of them", o->device, dag->world - 1);
    vg_graph g;
    vg_init(&g);
    int32_t *vid = base_xmalloc((dag->nnodes + 1) * sizeof *vid);
    int32_t *cluster_of = base_xmalloc(((size_t)dag->nplaces + 1) * sizeof *cluster_of);
    for (int p = 0; p < dag->nplaces; p++) cluster_of[p] = -1;
    base_buf b = {0};
    for (size_t v = 0; v < dag->nnodes; v++) {
        const ir_node *x = &dag->nodes[v];
        vid[v] = -1;
        if (x->dead || x->place < 0 || x->place >= dag->nplaces) continue;
        const ir_place *pl = &dag->places[x->place];
        if (o->device >= 0) {
            bool on = false;
            for (int i = 0; i < pl->ndev && !on; i++) on = pl->devs[i] == o->device;
            if (!on) continue;
        }
        if (cluster_of[x->place] < 0) {
            b.n = 0;
            base_buf_puts(&b, pl->ndev == 1 ? "device " : "devices ");
            if (pl->ndev == 1) base_buf_printf(&b, "%d", pl->devs[0]);
            else devices_str(pl->devs, pl->ndev, &b);
            cluster_of[x->place] = (int32_t)g.clusters.n;
            BASE_VEC_PUSH(g.clusters, base_arena_strdup(&g.arena, b.s));
        }
        ir_op_kind k = IR_OP_INFO[x->op].kind;
        vg_node n = {
            .cluster = cluster_of[x->place],
            .kind = k == IR_KIND_COMPUTE ? VG_COMPUTE : k == IR_KIND_P2P ? VG_P2P : k == IR_KIND_COLL ? VG_COLL : VG_DUMMY,
            .pass = x->pass,
            .op = ir_op_name((ir_op)x->op),
            .region = x->region >= 0 && x->region < dag->nregions ? dag->regions[x->region].name : NULL,
            .layer = x->region >= 0 ? x->layer : -1,
            .mb = x->mb,
            .stage = x->stage,
            .ident = ((int64_t)(x->bucket + 1) << 32) | ((int64_t)x->coll_group << 24) | (int64_t)(x->peer_place + 1),
        };
        if (n.kind == VG_P2P && x->peer_place >= 0 && x->peer_place < dag->nplaces) {
            const ir_place *peer = &dag->places[x->peer_place];
            b.n = 0;
            base_buf_puts(&b, x->op == IR_OP_SEND ? "to " : "from ");
            devices_str(peer->devs, peer->ndev, &b);
            n.detail = base_arena_strdup(&g.arena, b.s);
        } else if (n.kind == VG_COLL) {
            b.n = 0;
            base_buf_printf(&b, "(%s)", x->coll_group < BASE_COUNT(CG_NAMES) ? CG_NAMES[x->coll_group] : "?");
            if (x->bucket >= 0) base_buf_printf(&b, " bucket%d", x->bucket);
            n.detail = base_arena_strdup(&g.arena, b.s);
        } else if (x->bucket >= 0) {
            n.detail = base_arena_printf(&g.arena, "bucket%d", x->bucket);
        }
        vid[v] = (int32_t)g.nodes.n;
        BASE_VEC_PUSH(g.nodes, n);
    }
    free(b.s);
    for (size_t i = 0; i < dag->nedges; i++) {
        const ir_edge *ed = &dag->edges[i];
        if (ed->dead || vid[ed->src] < 0 || vid[ed->dst] < 0) continue;
        BASE_VEC_PUSH(g.edges, ((vg_edge){vid[ed->src], vid[ed->dst], ed->kind == IR_EDGE_TEMPORAL}));
    }
    free(vid);
    free(cluster_of);
    char title[160];
    if (o->device >= 0) snprintf(title, sizeof title, "global DAG: what device %d runs", o->device);
    else snprintf(title, sizeof title, "global DAG (%d devices, %d micro-batches)", dag->world, (int)dag->num_microbatches);
    int rc = finish(&g, o, title, dot, e);
    vg_free(&g);
    return rc;
}

/* ---------------------------------------------------------------- a plan's instruction graph */

typedef struct p2p_end {
    int32_t from, to, tag, order, node;
} p2p_end;

typedef BASE_VEC(p2p_end) p2p_vec;

static int cmp_p2p(const void *a, const void *b)
{
    const p2p_end *x = a, *y = b;
    if (x->from != y->from) return (x->from > y->from) - (x->from < y->from);
    if (x->to != y->to) return (x->to > y->to) - (x->to < y->to);
    if (x->tag != y->tag) return (x->tag > y->tag) - (x->tag < y->tag);
    return (x->order > y->order) - (x->order < y->order);
}

/* One device's instructions as nodes, with the dependencies inside the device. */
static void device_graph(const plan_set *p, int d, vg_graph *g, p2p_vec *sends, p2p_vec *recvs)
{
    const plan_list *L = plan_dev_list(p, d);
    int32_t cluster = (int32_t)g->clusters.n;
    BASE_VEC_PUSH(g->clusters, base_arena_printf(&g->arena, "GPU %d", d));
    int32_t *last_on = base_xmalloc(((size_t)L->nstreams + 1) * sizeof *last_on);   /* last node per stream */
    int32_t *wait_from = base_xmalloc(((size_t)L->nstreams + 1) * sizeof *wait_from); /* pending cross-stream dep */
    int32_t *recorded = base_xmalloc(((size_t)L->nevents + 1) * sizeof *recorded);    /* node before each record */
    int32_t *writer = base_xmalloc(((size_t)L->nbufs + 1) * sizeof *writer);          /* last writer per buffer */
    for (int s = 0; s < L->nstreams; s++) last_on[s] = wait_from[s] = -1;
    for (int ev = 0; ev < L->nevents; ev++) recorded[ev] = -1;
    for (int q = 0; q < L->nbufs; q++) writer[q] = -1;
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        int s = in->stream;
        if (s < 0 || s >= L->nstreams) continue;
        if (in->op == PLAN_RECORD) {
            if (in->event >= 0 && in->event < L->nevents) recorded[in->event] = last_on[s];
            continue;
        }
        if (in->op == PLAN_WAIT) {
            if (in->event >= 0 && in->event < L->nevents && recorded[in->event] >= 0) wait_from[s] = recorded[in->event];
            continue;
        }
        if (in->op != PLAN_COMPUTE && in->op != PLAN_SEND && in->op != PLAN_RECV && in->op != PLAN_COLL) continue;
        vg_node n = {.cluster = cluster, .pass = PLAN_NPASS, .mb = in->mb, .stage = in->stage, .layer = -1};
        n.region = in->region >= 0 && in->region < p->nregions ? p->regions[in->region] : NULL;
        n.layer = layer_of_name(n.region);
        switch (in->op) {
        case PLAN_COMPUTE:
            n.kind = VG_COMPUTE;
            n.pass = in->pass;
            n.op = plan_pass_name((plan_pass)in->pass);
            n.ident = s;
            break;
        case PLAN_SEND:
        case PLAN_RECV: {
            int peer = plan_dev_peer(p, d, in);
            n.kind = VG_P2P;
            n.op = in->op == PLAN_SEND ? "send" : "recv";
            n.detail = base_arena_printf(&g->arena, "%s %d", in->op == PLAN_SEND ? "to" : "from", peer);
            n.ident = ((int64_t)peer << 16) | s;
            p2p_end end = {in->op == PLAN_SEND ? d : peer, in->op == PLAN_SEND ? peer : d, in->tag, i,
                           (int32_t)g->nodes.n};
            if (in->op == PLAN_SEND) BASE_VEC_PUSH(*sends, end);
            else BASE_VEC_PUSH(*recvs, end);
            break;
        }
        default: {
            int gr = in->group >= 0 && in->group < L->ngroup_slots ? plan_dev_group(p, d, in) : -1;
            n.kind = VG_COLL;
            n.op = plan_coll_name((plan_coll)in->coll);
            n.detail = gr >= 0 && gr < p->ngroups && p->groups[gr].name ? p->groups[gr].name : NULL;
            n.ident = gr;
            break;
        }
        }
        int32_t me = (int32_t)g->nodes.n;
        BASE_VEC_PUSH(g->nodes, n);
        if (last_on[s] >= 0) BASE_VEC_PUSH(g->edges, ((vg_edge){last_on[s], me, 1}));
        if (wait_from[s] >= 0) BASE_VEC_PUSH(g->edges, ((vg_edge){wait_from[s], me, 1}));
        last_on[s] = me;
        wait_from[s] = -1;
        /* data: from the last writer of every buffer this instruction reads */
        const int32_t *reads = in->op == PLAN_COMPUTE ? in->reads : &in->buf;
        int nreads = in->op == PLAN_COMPUTE ? in->nreads : in->op == PLAN_RECV ? 0 : in->buf >= 0;
        for (int q = 0; q < nreads; q++)
            if (reads[q] >= 0 && reads[q] < L->nbufs && writer[reads[q]] >= 0)
                BASE_VEC_PUSH(g->edges, ((vg_edge){writer[reads[q]], me, 0}));
        const int32_t *writes = in->op == PLAN_COMPUTE ? in->writes : &in->buf;
        int nwrites = in->op == PLAN_COMPUTE ? in->nwrites : in->op == PLAN_SEND ? 0 : in->buf >= 0;
        for (int q = 0; q < nwrites; q++)
            if (writes[q] >= 0 && writes[q] < L->nbufs) writer[writes[q]] = me;
    }
    free(last_on);
    free(wait_from);
    free(recorded);
    free(writer);
}

int viz_dag_from_plan(const plan_set *p, const viz_dag_options *o, base_buf *dot, base_error *e)
{
    if (o->device >= p->ndevices || o->device < -1)
        return base_errorf(e, "--device %d: the plan has devices 0..%d; pick one of them", o->device, p->ndevices - 1);
    vg_graph g;
    vg_init(&g);
    p2p_vec sends = {0}, recvs = {0};
    for (int d = 0; d < p->ndevices; d++)
        if (o->device < 0 || d == o->device) device_graph(p, d, &g, &sends, &recvs);
    /* a send and its receive: same (sender, receiver, tag), matched in launch order */
    if (sends.n) qsort(sends.v, sends.n, sizeof *sends.v, cmp_p2p);
    if (recvs.n) qsort(recvs.v, recvs.n, sizeof *recvs.v, cmp_p2p);
    for (size_t a = 0, r = 0; a < sends.n && r < recvs.n;) {
        p2p_end x = sends.v[a], y = recvs.v[r];
        x.order = y.order = 0;
        int c = cmp_p2p(&x, &y);
        if (c == 0) BASE_VEC_PUSH(g.edges, ((vg_edge){sends.v[a].node, recvs.v[r].node, 0}));
        if (c <= 0) a++;
        if (c >= 0) r++;
    }
    free(sends.v);
    free(recvs.v);
    char title[160];
    if (o->device >= 0) snprintf(title, sizeof title, "plan: instructions of device %d", o->device);
    else snprintf(title, sizeof title, "plan: instructions of %d devices", p->ndevices);
    int rc = finish(&g, o, title, dot, e);
    vg_free(&g);
    return rc;
}
