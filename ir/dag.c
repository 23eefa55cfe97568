/* dag.c — storage of the global training DAG: nodes, tensors, edges, interned placements and
 * streams, on-demand adjacency, and the op table (see dag.h). */
#include "dag.h"

#include <stdlib.h>
#include <string.h>

const ir_op_info IR_OP_INFO[IR_NOPS] = {
#define IR_OP_INFO_ROW(op, kind, pass, coll) {#op, kind, pass, coll},
    IR_OPS(IR_OP_INFO_ROW)
#undef IR_OP_INFO_ROW
};

const char *ir_op_name(ir_op op) { return op < IR_NOPS ? IR_OP_INFO[op].name : "?"; }

void ir_dag_init(ir_dag *g, base_arena *a, const ir_model *m, int world)
{
    memset(g, 0, sizeof *g);
    g->arena = a;
    g->model = m;
    g->world = world;
    g->num_microbatches = 1;
    if (m) {
        g->nregions = ir_model_nregions(m);
        g->regions = base_arena_calloc(a, (size_t)g->nregions, sizeof *g->regions);
        ir_model_regions(m, a, g->regions);
    }
    ir_dag_intern_stream(g, "compute");
}

int32_t ir_dag_add_node(ir_dag *g, ir_op op)
{
    g->nodes = base_arena_grow(g->arena, g->nodes, &g->cap_nodes, g->nnodes + 1, sizeof *g->nodes);
    int32_t id = (int32_t)g->nnodes++;
    ir_node *n = &g->nodes[id];
    memset(n, 0, sizeof *n);
    n->op = (uint8_t)op;
    n->region = n->layer = n->mb = n->stage = -1;
    n->link = n->directive = n->bucket = n->peer_place = -1;
    n->tp = n->ep = 1;
    n->pass = (uint8_t)IR_OP_INFO[op].pass;
    g->adj_valid = false;
    return id;
}

int32_t ir_dag_add_tensor(ir_dag *g, int32_t producer, ir_tensor_kind kind, double bytes)
{
    g->tensors = base_arena_grow(g->arena, g->tensors, &g->cap_tensors, g->ntensors + 1,
                                 sizeof *g->tensors);
    int32_t id = (int32_t)g->ntensors++;
    ir_tensor *t = &g->tensors[id];
    t->producer = producer;
    t->kind = (uint8_t)kind;
    t->region = producer >= 0 ? g->nodes[producer].region : -1;
    t->mb = producer >= 0 ? g->nodes[producer].mb : -1;
    t->bytes = bytes;
    return id;
}

int32_t ir_dag_add_edge(ir_dag *g, int32_t src, int32_t dst, int32_t tensor, ir_edge_kind kind)
{
    g->edges = base_arena_grow(g->arena, g->edges, &g->cap_edges, g->nedges + 1, sizeof *g->edges);
    int32_t id = (int32_t)g->nedges++;
    ir_edge *e = &g->edges[id];
    e->src = src;
    e->dst = dst;
    e->tensor = tensor;
    e->kind = (uint8_t)kind;
    e->dead = 0;
    g->adj_valid = false;
    return id;
}

static bool place_equal(const ir_place *a, const ir_place *b)
{
    return a->ndev == b->ndev && memcmp(a->devs, b->devs, (size_t)a->ndev * sizeof *a->devs) == 0;
}

int ir_dag_intern_place(ir_dag *g, const ir_place *p)
{
    /* Programs have few distinct placements (stages x structures), so a scan is enough. */
    for (int i = 0; i < g->nplaces; i++)
        if (place_equal(&g->places[i], p)) return i;
    g->places = base_arena_grow(g->arena, g->places, &g->cap_places, (size_t)g->nplaces + 1,
                                sizeof *g->places);
    ir_place *q = &g->places[g->nplaces];
    *q = *p;
    q->devs = base_arena_calloc(g->arena, (size_t)p->ndev, sizeof *q->devs);
    memcpy(q->devs, p->devs, (size_t)p->ndev * sizeof *q->devs);
    return g->nplaces++;
}

int ir_dag_intern_stream(ir_dag *g, const char *name)
{
    for (int i = 0; i < g->nstreams; i++)
        if (strcmp(g->streams[i], name) == 0) return i;
    g->streams = base_arena_grow(g->arena, g->streams, &g->cap_streams, (size_t)g->nstreams + 1,
                                 sizeof *g->streams);
    g->streams[g->nstreams] = base_arena_strdup(g->arena, name);
    return g->nstreams++;
}

void ir_dag_build_adjacency(ir_dag *g)
{
    if (g->adj_valid) return;
    size_t n = g->nnodes;
    /* Rebuilt into fresh arena storage; the old arrays are dropped (bounded by the number of
     * rebuilds, which is a few per directive). */
    g->in_off = base_arena_calloc(g->arena, n + 1, sizeof(int32_t));
    g->out_off = base_arena_calloc(g->arena, n + 1, sizeof(int32_t));
    size_t live = 0;
    for (size_t i = 0; i < g->nedges; i++) {
        const ir_edge *e = &g->edges[i];
        if (e->dead) continue;
        g->in_off[e->dst + 1]++;
        g->out_off[e->src + 1]++;
        live++;
    }
    for (size_t v = 0; v < n; v++) {
        g->in_off[v + 1] += g->in_off[v];
        g->out_off[v + 1] += g->out_off[v];
    }
    g->in_edge = base_arena_calloc(g->arena, live ? live : 1, sizeof(int32_t));
    g->out_edge = base_arena_calloc(g->arena, live ? live : 1, sizeof(int32_t));
    int32_t *in_fill = base_xcalloc(n + 1, sizeof(int32_t));
    int32_t *out_fill = base_xcalloc(n + 1, sizeof(int32_t));
    for (size_t i = 0; i < g->nedges; i++) {
        const ir_edge *e = &g->edges[i];
        if (e->dead) continue;
        g->in_edge[g->in_off[e->dst] + in_fill[e->dst]++] = (int32_t)i;
        g->out_edge[g->out_off[e->src] + out_fill[e->src]++] = (int32_t)i;
    }
    free(in_fill);
    free(out_fill);
    g->adj_valid = true;
}

const char *ir_node_label(const ir_dag *g, int32_t v, char *buf, size_t n)
{
    const ir_node *x = &g->nodes[v];
    const char *region = x->region >= 0 && x->region < g->nregions ? g->regions[x->region].name : "";
    size_t off = (size_t)snprintf(buf, n, "%s", ir_op_name((ir_op)x->op));
    if (off < n && *region) off += (size_t)snprintf(buf + off, n - off, " %s", region);
    if (off < n && x->op >= IR_OP_SEND && x->op <= IR_OP_ALL_TO_ALL && !*region && x->stage >= 0)
        off += (size_t)snprintf(buf + off, n - off, " stage%d", x->stage);
    if (off < n && x->mb >= 0) off += (size_t)snprintf(buf + off, n - off, " mb%d", x->mb);
    if (off < n && x->bucket >= 0) snprintf(buf + off, n - off, " bucket%d", x->bucket);
    return buf;
}
