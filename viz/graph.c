/* graph.c — the small graph both DAG figures are drawn from (the IR's global DAG and a plan's
 * instruction graph): nodes with the fields a label and a merge need, data and temporal edges,
 * clusters; collapsing (micro-batches, layers) so that a few hundred nodes stay legible; and the
 * dot text for Graphviz's `dot` layout. */
#include "viz_internal.h"

#include <stdlib.h>
#include <string.h>

void vg_init(vg_graph *g)
{
    memset(g, 0, sizeof *g);
    base_arena_init(&g->arena);
}

void vg_free(vg_graph *g)
{
    free(g->nodes.v);
    free(g->edges.v);
    free(g->clusters.v);
    base_arena_free(&g->arena);
    memset(g, 0, sizeof *g);
}

/* ---------------------------------------------------------------- hashing */

static uint64_t fnv(const void *p, size_t n, uint64_t h)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

/* Open addressing from a 64-bit key to an index; keys are compared through `same`. */
typedef struct table {
    int32_t *slot;   /* -1 empty, else an index */
    uint64_t *hash;
    size_t cap;
} table;

static void table_init(table *t, size_t n)
{
    t->cap = 16;
    while (t->cap < 2 * n + 1) t->cap *= 2;
    t->slot = base_xmalloc(t->cap * sizeof *t->slot);
    t->hash = base_xmalloc(t->cap * sizeof *t->hash);
    memset(t->slot, 0xff, t->cap * sizeof *t->slot);
}

static void table_free(table *t)
{
    free(t->slot);
    free(t->hash);
}

/* The slot holding an index whose key equals the probe's, or the empty slot where it goes. */
typedef int (*same_fn)(const void *ctx, int32_t index, const void *probe);
static size_t table_find(const table *t, uint64_t h, same_fn same, const void *ctx, const void *probe)
{
    size_t i = (size_t)h & (t->cap - 1);
    while (t->slot[i] >= 0 && !(t->hash[i] == h && same(ctx, t->slot[i], probe))) i = (i + 1) & (t->cap - 1);
    return i;
}

/* ---------------------------------------------------------------- collapsing */

typedef struct group {
    vg_node node;         /* the merged node; region/layer/mb hold the first member's */
    int32_t mb_lo, mb_hi, layer_lo, layer_hi;
    bool mixed_region;    /* members from different regions */
    int32_t members;
} group;

typedef struct merge_ctx {
    unsigned collapse;
    const group *groups;
} merge_ctx;

/* What two nodes must share to merge. */
static bool mergeable(unsigned collapse, const vg_node *a, const vg_node *b)
{
    if (a->cluster != b->cluster || a->kind != b->kind || a->pass != b->pass || a->stage != b->stage ||
        a->ident != b->ident || strcmp(a->op, b->op) != 0)
        return false;
    if ((a->detail == NULL) != (b->detail == NULL) || (a->detail && strcmp(a->detail, b->detail) != 0)) return false;
    bool by_layer = (collapse & VIZ_COLLAPSE_LAYERS) && a->layer >= 0 && b->layer >= 0;
    if (!by_layer) {
        if ((a->region == NULL) != (b->region == NULL) || (a->region && strcmp(a->region, b->region) != 0)) return false;
        if (a->layer != b->layer) return false;
    } else if ((a->layer < 0) != (b->layer < 0)) {
        return false;
    }
    bool by_mb = (collapse & VIZ_COLLAPSE_MB) && a->mb >= 0 && b->mb >= 0;
    return by_mb || a->mb == b->mb;
}

static uint64_t merge_hash(unsigned collapse, const vg_node *x)
{
    uint64_t h = 1469598103934665603ull;
    h = fnv(&x->cluster, sizeof x->cluster, h);
    h = fnv(&x->kind, 1, h);
    h = fnv(&x->pass, 1, h);
    h = fnv(&x->stage, sizeof x->stage, h);
    h = fnv(&x->ident, sizeof x->ident, h);
    h = fnv(x->op, strlen(x->op), h);
    if (x->detail) h = fnv(x->detail, strlen(x->detail), h);
    if (!((collapse & VIZ_COLLAPSE_LAYERS) && x->layer >= 0)) {
        if (x->region) h = fnv(x->region, strlen(x->region), h);
        h = fnv(&x->layer, sizeof x->layer, h);
    }
    if (!((collapse & VIZ_COLLAPSE_MB) && x->mb >= 0)) h = fnv(&x->mb, sizeof x->mb, h);
    return h;
}

static int same_group(const void *ctx, int32_t index, const void *probe)
{
    const merge_ctx *m = ctx;
    return mergeable(m->collapse, &m->groups[index].node, probe);
}

typedef struct edge_key {
    int32_t src, dst;
} edge_key;

static int same_edge(const void *ctx, int32_t index, const void *probe)
{
    const vg_edge *e = &((const vg_graph *)ctx)->edges.v[index];
    const edge_key *k = probe;
    return e->src == k->src && e->dst == k->dst;
}

static void label_group(vg_graph *out, const group *gr, unsigned collapse, vg_node *dst)
{
    base_buf b = {0};
    const vg_node *x = &gr->node;
    if ((collapse & VIZ_COLLAPSE_LAYERS) && gr->layer_lo >= 0 && (gr->mixed_region || gr->layer_lo != gr->layer_hi)) {
        if (gr->layer_lo == gr->layer_hi) base_buf_printf(&b, "L%d", gr->layer_lo);
        else base_buf_printf(&b, "L%d-%d", gr->layer_lo, gr->layer_hi);
        dst->region = base_arena_strdup(&out->arena, b.s);
    }
    free(b.s);
    dst->mb = gr->mb_lo;
    if (gr->mb_hi > gr->mb_lo) {
        /* the detail carries the micro-batch range: mb is one number */
        base_buf d = {0};
        base_buf_printf(&d, "mb%d-%d", gr->mb_lo, gr->mb_hi);
        if (x->detail) base_buf_printf(&d, " %s", x->detail);
        dst->detail = base_arena_strdup(&out->arena, d.s);
        dst->mb = -1;
        free(d.s);
    }
}

void vg_collapse(const vg_graph *in, unsigned collapse, vg_graph *out)
{
    vg_init(out);
    for (size_t c = 0; c < in->clusters.n; c++)
        BASE_VEC_PUSH(out->clusters, base_arena_strdup(&out->arena, in->clusters.v[c]));
    int32_t *group_of = base_xmalloc((in->nodes.n + 1) * sizeof *group_of);
    BASE_VEC(group) groups = {0};
    table t;
    table_init(&t, in->nodes.n);
    /* Micro-batch order is what the schedule figure shows; merged across micro-batches, temporal
     * edges from one micro-batch to another would tie every group to every other, so they go, and
     * the ORDER dummies with them. Those inside a micro-batch (a plan's stream order) stay. */
    bool drop_temporal = (collapse & VIZ_COLLAPSE_MB) != 0;
    for (size_t v = 0; v < in->nodes.n; v++) {
        const vg_node *x = &in->nodes.v[v];
        group_of[v] = -1;
        if (x->kind == VG_DUMMY && drop_temporal) continue;
        merge_ctx m = {collapse, groups.v};
        uint64_t h = merge_hash(collapse, x);
        size_t s = x->kind == VG_DUMMY ? 0 : table_find(&t, h, same_group, &m, x);
        if (x->kind != VG_DUMMY && t.slot[s] >= 0) {
            group *gr = &groups.v[t.slot[s]];
            group_of[v] = t.slot[s];
            gr->members++;
            if (x->mb >= 0 && (gr->mb_lo < 0 || x->mb < gr->mb_lo)) gr->mb_lo = x->mb;
            if (x->mb > gr->mb_hi) gr->mb_hi = x->mb;
            if (x->layer >= 0 && (gr->layer_lo < 0 || x->layer < gr->layer_lo)) gr->layer_lo = x->layer;
            if (x->layer > gr->layer_hi) gr->layer_hi = x->layer;
            if ((x->region == NULL) != (gr->node.region == NULL) || (x->region && strcmp(x->region, gr->node.region)))
                gr->mixed_region = true;
            continue;
        }
        group gr = {*x, x->mb, x->mb, x->layer, x->layer, false, 1};
        group_of[v] = (int32_t)groups.n;
        if (x->kind != VG_DUMMY) {
            t.slot[s] = (int32_t)groups.n;
            t.hash[s] = h;
        }
        BASE_VEC_PUSH(groups, gr);
    }
    table_free(&t);
    for (size_t i = 0; i < groups.n; i++) {
        vg_node x = groups.v[i].node;
        if (groups.v[i].members > 1) label_group(out, &groups.v[i], collapse, &x);
        BASE_VEC_PUSH(out->nodes, x);
    }
    table_init(&t, in->edges.n);
    for (size_t i = 0; i < in->edges.n; i++) {
        const vg_edge *ed = &in->edges.v[i];
        if (ed->temporal && drop_temporal && in->nodes.v[ed->src].mb != in->nodes.v[ed->dst].mb) continue;
        edge_key k = {group_of[ed->src], group_of[ed->dst]};
        if (k.src < 0 || k.dst < 0 || k.src == k.dst) continue;
        uint64_t h = fnv(&k, sizeof k, 1469598103934665603ull);
        size_t s = table_find(&t, h, same_edge, out, &k);
        if (t.slot[s] >= 0) {
            if (!ed->temporal) out->edges.v[t.slot[s]].temporal = 0;
            continue;
        }
        t.slot[s] = (int32_t)out->edges.n;
        t.hash[s] = h;
        BASE_VEC_PUSH(out->edges, ((vg_edge){k.src, k.dst, ed->temporal}));
    }
    table_free(&t);
    free(groups.v);
    free(group_of);
}

static int cmp_edge(const void *a, const void *b)
{
    const vg_edge *x = a, *y = b;
    if (x->src != y->src) return (x->src > y->src) - (x->src < y->src);
    if (x->dst != y->dst) return (x->dst > y->dst) - (x->dst < y->dst);
    return (x->temporal > y->temporal) - (x->temporal < y->temporal); /* data first */
}

void vg_dedupe_edges(vg_graph *g)
{
    if (g->edges.n) qsort(g->edges.v, g->edges.n, sizeof *g->edges.v, cmp_edge);
    size_t k = 0;
    for (size_t i = 0; i < g->edges.n; i++) {
        const vg_edge *ed = &g->edges.v[i];
        if (ed->src == ed->dst) continue;
        if (k && g->edges.v[k - 1].src == ed->src && g->edges.v[k - 1].dst == ed->dst) continue;
        g->edges.v[k++] = *ed;
    }
    g->edges.n = k;
}

void vg_bypass_dummies(vg_graph *g)
{
    size_t n = g->nodes.n, m = g->edges.n;
    bool any = false;
    for (size_t v = 0; v < n && !any; v++) any = g->nodes.v[v].kind == VG_DUMMY;
    if (!any) return;
    /* CSR of out- and in-edges */
    int32_t *ooff = base_xcalloc(n + 1, sizeof *ooff), *ioff = base_xcalloc(n + 1, sizeof *ioff);
    int32_t *oadj = base_xmalloc((m + 1) * sizeof *oadj), *iadj = base_xmalloc((m + 1) * sizeof *iadj);
    for (size_t i = 0; i < m; i++) ooff[g->edges.v[i].src + 1]++, ioff[g->edges.v[i].dst + 1]++;
    for (size_t v = 0; v < n; v++) ooff[v + 1] += ooff[v], ioff[v + 1] += ioff[v];
    int32_t *of = base_xmalloc((n + 1) * sizeof *of), *inf = base_xmalloc((n + 1) * sizeof *inf);
    memcpy(of, ooff, (n + 1) * sizeof *of);
    memcpy(inf, ioff, (n + 1) * sizeof *inf);
    for (size_t i = 0; i < m; i++) {
        oadj[of[g->edges.v[i].src]++] = g->edges.v[i].dst;
        iadj[inf[g->edges.v[i].dst]++] = g->edges.v[i].src;
    }
    free(of);
    free(inf);
    /* per dummy: its predecessors' sinks to its successors' sources */
    int32_t *mark = base_xmalloc((n + 1) * sizeof *mark);
    for (size_t v = 0; v < n; v++) mark[v] = -1;
    BASE_VEC(vg_edge) extra = {0};
    for (size_t d = 0; d < n; d++) {
        if (g->nodes.v[d].kind != VG_DUMMY) continue;
        int32_t tag_p = (int32_t)(2 * d), tag_s = (int32_t)(2 * d + 1);
        for (int32_t k = ioff[d]; k < ioff[d + 1]; k++) mark[iadj[k]] = tag_p;
        for (int32_t k = ooff[d]; k < ooff[d + 1]; k++) mark[oadj[k]] = tag_s;
        for (int32_t k = ioff[d]; k < ioff[d + 1]; k++) {
            int32_t p = iadj[k];
            if (g->nodes.v[p].kind == VG_DUMMY) continue;
            bool sink = true;
            for (int32_t q = ooff[p]; q < ooff[p + 1] && sink; q++) sink = mark[oadj[q]] != tag_p;
            if (!sink) continue;
            for (int32_t j = ooff[d]; j < ooff[d + 1]; j++) {
                int32_t sv = oadj[j];
                if (g->nodes.v[sv].kind == VG_DUMMY) continue;
                bool source = true;
                for (int32_t q = ioff[sv]; q < ioff[sv + 1] && source; q++) source = mark[iadj[q]] != tag_s;
                if (source) BASE_VEC_PUSH(extra, ((vg_edge){p, sv, 1}));
            }
        }
    }
    /* drop the dummies, renumber */
    int32_t *to = mark;
    size_t k = 0;
    for (size_t v = 0; v < n; v++) {
        to[v] = g->nodes.v[v].kind == VG_DUMMY ? -1 : (int32_t)k;
        if (to[v] >= 0) g->nodes.v[k++] = g->nodes.v[v];
    }
    g->nodes.n = k;
    size_t e = 0;
    for (size_t i = 0; i < m; i++) {
        vg_edge ed = g->edges.v[i];
        if (to[ed.src] < 0 || to[ed.dst] < 0) continue;
        g->edges.v[e++] = (vg_edge){to[ed.src], to[ed.dst], ed.temporal};
    }
    g->edges.n = e;
    for (size_t i = 0; i < extra.n; i++)
        BASE_VEC_PUSH(g->edges, ((vg_edge){to[extra.v[i].src], to[extra.v[i].dst], 1}));
    free(extra.v);
    free(mark);
    free(ooff), free(ioff), free(oadj), free(iadj);
}

/* ---------------------------------------------------------------- dot */

/* Two short lines ("SEND L5.mlp" over "mb3 to [1]"): in a left-to-right layout the width of a
 * column is its widest label, so a figure stays about half as wide as with one line. */
static void node_label(const vg_node *x, base_buf *b)
{
    base_buf_puts(b, x->op);
    if (x->region) base_buf_printf(b, " %s", x->region);
    else if (x->kind != VG_COMPUTE && x->stage >= 0) base_buf_printf(b, " stage%d", x->stage);
    const char *sep = "\n";
    if (x->mb >= 0) {
        base_buf_printf(b, "%smb%d", sep, x->mb);
        sep = " ";
    }
    if (x->detail) base_buf_printf(b, "%s%s", sep, x->detail);
}

static const char *const KIND_CLASS[] = {"compute", "p2p", "coll", "order"};

static void write_node(base_buf *dot, const char *name, const vg_node *x, const char *label, const char *id)
{
    base_buf_printf(dot, "    %s [", name);
    if (x->kind == VG_DUMMY) {
        base_buf_puts(dot, "shape=point, width=0.06, class=\"order\", label=\"\"");
    } else {
        const viz_style *st = x->kind == VG_COMPUTE ? viz_pass_style(x->pass)
                                                    : viz_comm_style(x->kind == VG_P2P ? VIZ_COMM_P2P : VIZ_COMM_COLL);
        const char *shape = x->kind == VG_COMPUTE ? "box" : x->kind == VG_P2P ? "ellipse" : "hexagon";
        /* communication always dashed: a shape and an outline that survive greyscale */
        const char *outline = x->kind == VG_COMPUTE ? st->outline : "dashed";
        base_buf_printf(dot, "shape=%s, style=\"filled%s%s\", fillcolor=\"%s\", fontcolor=\"%s\", class=\"%s %s\", label=",
                        shape, *outline ? "," : "", outline, st->fill, st->font, KIND_CLASS[x->kind], st->key);
        viz_dot_quote(dot, label);
    }
    if (id) {
        base_buf_puts(dot, ", id=");
        viz_dot_quote(dot, id);
    }
    base_buf_puts(dot, "];\n");
}

/* A legend cluster with one sample per kind of node present and per kind of edge: a column of
 * samples (one rank, so it stacks vertically in a left-to-right layout) and, for the samples
 * that have no room for text inside (the ORDER point, the edges), a column of captions. */
static void write_legend(const vg_graph *g, base_buf *dot)
{
    bool pass_seen[PLAN_NPASS + 1] = {0}, kind_seen[4] = {0}, edge_seen[2] = {0};
    for (size_t i = 0; i < g->nodes.n; i++) {
        const vg_node *x = &g->nodes.v[i];
        kind_seen[x->kind] = true;
        if (x->kind == VG_COMPUTE) pass_seen[x->pass < PLAN_NPASS ? x->pass : PLAN_NPASS] = true;
    }
    for (size_t i = 0; i < g->edges.n; i++) edge_seen[g->edges.v[i].temporal] = true;
    base_buf_puts(dot, "  subgraph cluster_legend {\n    label=\"legend\"; id=\"legend\"; style=\"rounded,dashed\"; "
                       "color=\"#a0a0a0\"; fontsize=9;\n");
    base_buf samples = {0}, captions = {0};
    int k = 0;
    char name[32], id[48], label[96];
    for (int p = 0; p <= PLAN_NPASS; p++) {
        if (!pass_seen[p]) continue;
        vg_node x = {.kind = VG_COMPUTE, .pass = (uint8_t)p, .op = ""};
        const viz_style *st = viz_pass_style(p);
        snprintf(name, sizeof name, "legend%d", k++);
        snprintf(id, sizeof id, "legend-%s", st->key);
        snprintf(label, sizeof label, "%s: %s", st->key, st->what);
        write_node(dot, name, &x, label, id);
        base_buf_printf(&samples, " %s;", name);
    }
    static const char *const KIND_TEXT[] = {"", "send / receive", "collective", "order (joins order groups)"};
    static const char *const KIND_ID[] = {"", "legend-p2p", "legend-coll", "legend-order"};
    for (int kd = VG_P2P; kd <= VG_DUMMY; kd++) {
        if (!kind_seen[kd]) continue;
        vg_node x = {.kind = (uint8_t)kd, .pass = PLAN_NPASS, .op = ""};
        snprintf(name, sizeof name, "legend%d", k++);
        write_node(dot, name, &x, kd == VG_DUMMY ? "" : KIND_TEXT[kd], KIND_ID[kd]);
        base_buf_printf(&samples, " %s;", name);
        if (kd == VG_DUMMY) {
            base_buf_printf(dot, "    %s_text [shape=plaintext, fontsize=9, label=\"%s\"];\n", name, KIND_TEXT[kd]);
            base_buf_printf(dot, "    %s -> %s_text [style=invis];\n", name, name);
            base_buf_printf(&captions, " %s_text;", name);
        }
    }
    static const char *const EDGE_TEXT[] = {"data", "temporal"};
    for (int t = 0; t < 2; t++) {
        if (!edge_seen[t]) continue;
        base_buf_printf(dot, "    legend_e%da [shape=point, width=0.02, style=invis];\n", t);
        base_buf_printf(dot, "    legend_e%db [shape=plaintext, fontsize=9, label=\"%s edge\"];\n", t, EDGE_TEXT[t]);
        base_buf_printf(dot, "    legend_e%da -> legend_e%db [id=\"legend-%s\"%s];\n", t, t, EDGE_TEXT[t],
                        t ? ", style=dashed, color=\"#707070\"" : "");
        base_buf_printf(&samples, " legend_e%da;", t);
        base_buf_printf(&captions, " legend_e%db;", t);
    }
    if (samples.s) base_buf_printf(dot, "    {rank=same;%s}\n", samples.s);
    if (captions.s) base_buf_printf(dot, "    {rank=same;%s}\n", captions.s);
    free(samples.s);
    free(captions.s);
    base_buf_puts(dot, "  }\n");
}

int vg_write_dot(const vg_graph *g, const char *title, int max_nodes, base_buf *dot, base_error *e)
{
    if (max_nodes <= 0) max_nodes = 600;
    if (g->nodes.n > (size_t)max_nodes)
        return base_errorf(e, "the DAG has %zu nodes, too many to lay out legibly (the limit is %d); draw one device "
                           "(--device N) or merge nodes (--collapse mb, --collapse layers, or both: --collapse mb,layers)",
                           g->nodes.n, max_nodes);
    base_buf_puts(dot, "digraph piper {\n");
    base_buf_printf(dot, "  graph [rankdir=LR, newrank=true, nodesep=0.12, ranksep=0.28, fontname=\"%s\", fontsize=11, "
                         "labelloc=t, bgcolor=white, pad=0.2", VIZ_FONT);
    if (title) {
        base_buf_puts(dot, ", label=");
        viz_dot_quote(dot, title);
    }
    base_buf_puts(dot, "];\n");
    base_buf_printf(dot, "  node [fontname=\"%s\", fontsize=9, height=0.22, margin=\"0.06,0.02\", penwidth=0.7];\n",
                    VIZ_FONT);
    base_buf_puts(dot, "  edge [arrowsize=0.5, penwidth=0.7];\n");
    /* nodes by cluster: a counting sort keeps each cluster's nodes in their order */
    size_t nc = g->clusters.n;
    size_t *off = base_xcalloc(nc + 2, sizeof *off);
    for (size_t i = 0; i < g->nodes.n; i++) off[g->nodes.v[i].cluster + 1]++;
    for (size_t c = 0; c < nc; c++) off[c + 1] += off[c];
    size_t *order = base_xmalloc((g->nodes.n + 1) * sizeof *order), *fill = base_xmalloc((nc + 1) * sizeof *fill);
    memcpy(fill, off, (nc + 1) * sizeof *fill);
    for (size_t i = 0; i < g->nodes.n; i++) order[fill[g->nodes.v[i].cluster]++] = i;
    base_buf label = {0};
    for (size_t c = 0; c < nc; c++) {
        if (off[c] == off[c + 1]) continue;
        base_buf_printf(dot, "  subgraph cluster_%zu {\n    label=", c);
        viz_dot_quote(dot, g->clusters.v[c]);
        base_buf_printf(dot, "; id=\"cluster-%zu\"; style=rounded; color=\"#808080\"; fontsize=10;\n", c);
        for (size_t k = off[c]; k < off[c + 1]; k++) {
            size_t i = order[k];
            char name[32];
            snprintf(name, sizeof name, "n%zu", i);
            label.n = 0;
            if (label.s) label.s[0] = 0;
            if (g->nodes.v[i].kind != VG_DUMMY) node_label(&g->nodes.v[i], &label);
            write_node(dot, name, &g->nodes.v[i], label.s ? label.s : "", name);
        }
        base_buf_puts(dot, "  }\n");
    }
    free(label.s);
    free(off);
    free(order);
    free(fill);
    /* Columns come from data edges alone. Temporal edges (an order's sequence, a plan's stream
     * order, record/wait) would pull every device's work into one long chain, stretch each data
     * edge (F to B of a region spans the step) across it, and make dot take minutes over a few
     * hundred nodes (one device of pp4_1f1b: over 120 s; 2 s without): they are drawn over the
     * layout instead. */
    for (size_t i = 0; i < g->edges.n; i++) {
        const vg_edge *ed = &g->edges.v[i];
        base_buf_printf(dot, "  n%d -> n%d%s;\n", ed->src, ed->dst,
                        ed->temporal ? " [style=dashed, color=\"#707070\", class=\"temporal\", constraint=false]"
                                     : " [class=\"data\"]");
    }
    if (g->nodes.n) write_legend(g, dot);
    base_buf_puts(dot, "}\n");
    return 0;
}
