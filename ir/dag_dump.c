/* dag_dump.c — `--dump-dag`: the global DAG as text (one line per node, then the edges) for
 * reading and diffing, and as Graphviz dot (compute boxes, communication ellipses, data edges
 * solid, temporal edges dashed, one cluster per placement). */
#include "dag.h"

static void place_str(const ir_dag *g, int place, char *buf, size_t n)
{
    const ir_place *p = &g->places[place];
    size_t off = 0;
    off += (size_t)snprintf(buf + off, n - off, "[");
    for (int i = 0; i < p->ndev && off < n; i++) {
        if (i == 6 && p->ndev > 8) {
            off += (size_t)snprintf(buf + off, n - off, ",..,%d", p->devs[p->ndev - 1]);
            break;
        }
        off += (size_t)snprintf(buf + off, n - off, i ? ",%d" : "%d", p->devs[i]);
    }
    if (off < n) snprintf(buf + off, n - off, "]");
}

static const char *CG_NAMES[] = {"-", "tp", "dp", "ep", "world", "pair", "edp"};

void ir_dag_dump_text(const ir_dag *g, FILE *f)
{
    char lbl[96], pl[128];
    fprintf(f, "# piper DAG: %d nodes, %zu edges, %zu tensors, %d micro-batches\n",
            ir_dag_live_nodes(g), g->nedges, g->ntensors, (int)g->num_microbatches);
    for (size_t i = 0; i < g->nnodes; i++) {
        const ir_node *x = &g->nodes[i];
        if (x->dead) continue;
        place_str(g, x->place, pl, sizeof pl);
        fprintf(f, "n%zu %s pp=%d mb=%d on=%s stream=%s", i,
                ir_node_label(g, (int32_t)i, lbl, sizeof lbl), x->stage, x->mb, pl,
                g->streams[x->stream]);
        if (x->tp > 1) fprintf(f, " tp=%d%s", x->tp, x->sp ? "+sp" : "");
        if (x->ep > 1) fprintf(f, " ep=%d", x->ep);
        if (x->dp) fprintf(f, " dp");
        if (x->recompute) fprintf(f, " recompute=%s", x->recompute == IR_RECOMPUTE_FULL ? "full" : "selective");
        if (IR_OP_INFO[x->op].kind == IR_KIND_COLL)
            fprintf(f, " group=%s bytes=%.0f", CG_NAMES[x->coll_group], x->bytes);
        if (IR_OP_INFO[x->op].kind == IR_KIND_P2P)
            fprintf(f, " %s=n%d bytes=%.0f", x->op == IR_OP_SEND ? "to" : "from", x->link, x->bytes);
        if (x->flags & IR_NODE_EP) fprintf(f, " EP");
        if (x->flags & IR_NODE_TP) fprintf(f, " TP");
        fputc('\n', f);
    }
    for (size_t i = 0; i < g->nedges; i++) {
        const ir_edge *e = &g->edges[i];
        if (e->dead) continue;
        if (e->kind == IR_EDGE_TEMPORAL)
            fprintf(f, "n%d -> n%d temporal\n", e->src, e->dst);
        else
            fprintf(f, "n%d -> n%d %.0fB\n", e->src, e->dst, g->tensors[e->tensor].bytes);
    }
}

void ir_dag_dump_dot(const ir_dag *g, FILE *f)
{
    char lbl[96], pl[128];
    fprintf(f, "digraph piper {\n  rankdir=LR;\n  node [fontname=\"DejaVu Sans\", fontsize=10];\n");
    for (int p = 0; p < g->nplaces; p++) {
        place_str(g, p, pl, sizeof pl);
        fprintf(f, "  subgraph cluster_%d {\n    label=\"devices %s\";\n    style=rounded;\n", p, pl);
        for (size_t i = 0; i < g->nnodes; i++) {
            const ir_node *x = &g->nodes[i];
            if (x->dead || x->place != p) continue;
            ir_op_kind k = IR_OP_INFO[x->op].kind;
            const char *shape = k == IR_KIND_COMPUTE ? "box" : k == IR_KIND_DUMMY ? "point" : "ellipse";
            const char *fill = k == IR_KIND_COMPUTE ? "#dbe8f6" : k == IR_KIND_DUMMY ? "#000000" : "#fbe3c8";
            fprintf(f, "    n%zu [label=\"%s\", shape=%s, style=filled, fillcolor=\"%s\"];\n", i,
                    ir_node_label(g, (int32_t)i, lbl, sizeof lbl), shape, fill);
        }
        fprintf(f, "  }\n");
    }
    for (size_t i = 0; i < g->nedges; i++) {
        const ir_edge *e = &g->edges[i];
        if (e->dead) continue;
        fprintf(f, "  n%d -> n%d%s;\n", e->src, e->dst, e->kind == IR_EDGE_TEMPORAL ? " [style=dashed]" : "");
    }
    fprintf(f, "}\n");
}
