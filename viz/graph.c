/* graph.c — the small graph both DAG figures are drawn from (the IR's global DAG and a plan's
 * instruction graph): nodes with the fields a label and a merge need, data and temporal edges,
 * clusters; collapsing (micro-batches, layers) so that a few hundred nodes stay legible; and the
 * dot text for Graphviz: laid out by `dot` when that is quick, else placed here by column. */
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

/* pos: "x,y" in points for a layout piper made (see vg_write_dot), or NULL for dot's. */
static void write_node(base_buf *dot, const char *name, const vg_node *x, const char *label, const char *id,
                       const char *pos)
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
    if (pos) base_buf_printf(dot, ", pos=\"%s\"", pos);
    base_buf_puts(dot, "];\n");
}

/* A legend cluster with one sample per kind of node present and per kind of edge: a column of
 * samples (one rank, so it stacks vertically in a left-to-right layout) and, for the samples
 * that have no room for text inside (the ORDER point, the edges), a column of captions. With
 * `at` (the top left corner, in points) the samples are placed there for a layout piper made:
 * one row each, captions to their right. */
#define LEGEND_PITCH 30.0
static void write_legend(const vg_graph *g, base_buf *dot, const double *at)
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
    int k = 0, row = 0;
    char name[32], id[48], label[96], pos[64], cpos[64];
#define LEGEND_POS(col)                                                                                          \
    (at ? (snprintf(pos, sizeof pos, "%.1f,%.1f", at[0] + 90.0, at[1] - 24.0 - LEGEND_PITCH * row),             \
           snprintf(cpos, sizeof cpos, "%.1f,%.1f", at[0] + 220.0, at[1] - 24.0 - LEGEND_PITCH * row),         \
           (col) ? cpos : pos)                                                                                   \
        : NULL)
    for (int p = 0; p <= PLAN_NPASS; p++) {
        if (!pass_seen[p]) continue;
        vg_node x = {.kind = VG_COMPUTE, .pass = (uint8_t)p, .op = ""};
        const viz_style *st = viz_pass_style(p);
        snprintf(name, sizeof name, "legend%d", k++);
        snprintf(id, sizeof id, "legend-%s", st->key);
        snprintf(label, sizeof label, "%s: %s", st->key, st->what);
        write_node(dot, name, &x, label, id, LEGEND_POS(0));
        row++;
        base_buf_printf(&samples, " %s;", name);
    }
    static const char *const KIND_TEXT[] = {"", "send / receive", "collective", "order (joins order groups)"};
    static const char *const KIND_ID[] = {"", "legend-p2p", "legend-coll", "legend-order"};
    for (int kd = VG_P2P; kd <= VG_DUMMY; kd++) {
        if (!kind_seen[kd]) continue;
        vg_node x = {.kind = (uint8_t)kd, .pass = PLAN_NPASS, .op = ""};
        snprintf(name, sizeof name, "legend%d", k++);
        write_node(dot, name, &x, kd == VG_DUMMY ? "" : KIND_TEXT[kd], KIND_ID[kd], LEGEND_POS(0));
        base_buf_printf(&samples, " %s;", name);
        if (kd == VG_DUMMY) {
            base_buf_printf(dot, "    %s_text [shape=plaintext, fontsize=9, label=\"%s\"", name, KIND_TEXT[kd]);
            if (at) base_buf_printf(dot, ", pos=\"%s\"", LEGEND_POS(1));
            base_buf_puts(dot, "];\n");
            base_buf_printf(dot, "    %s -> %s_text [style=invis];\n", name, name);
            base_buf_printf(&captions, " %s_text;", name);
        }
        row++;
    }
    static const char *const EDGE_TEXT[] = {"data", "temporal"};
    for (int t = 0; t < 2; t++) {
        if (!edge_seen[t]) continue;
        base_buf_printf(dot, "    legend_e%da [shape=point, width=0.02, style=invis", t);
        if (at) base_buf_printf(dot, ", pos=\"%s\"", LEGEND_POS(0));
        base_buf_printf(dot, "];\n    legend_e%db [shape=plaintext, fontsize=9, label=\"%s edge\"", t, EDGE_TEXT[t]);
        if (at) base_buf_printf(dot, ", pos=\"%s\"", LEGEND_POS(1));
        base_buf_puts(dot, "];\n");
        base_buf_printf(dot, "    legend_e%da -> legend_e%db [id=\"legend-%s\"%s];\n", t, t, EDGE_TEXT[t],
                        t ? ", style=dashed, color=\"#707070\"" : "");
        base_buf_printf(&samples, " legend_e%da;", t);
        base_buf_printf(&captions, " legend_e%db;", t);
        row++;
    }
#undef LEGEND_POS
    if (at) {
        /* a cluster of a layout piper made is drawn only with its box given */
        base_buf_printf(dot, "    bb=\"%.1f,%.1f,%.1f,%.1f\";\n", at[0], at[1] - 12.0 - LEGEND_PITCH * row - 8.0,
                        at[0] + 300.0, at[1]);
    } else {
        if (samples.s) base_buf_printf(dot, "    {rank=same;%s}\n", samples.s);
        if (captions.s) base_buf_printf(dot, "    {rank=same;%s}\n", captions.s);
    }
    free(samples.s);
    free(captions.s);
    base_buf_puts(dot, "  }\n");
}

/* ---------------------------------------------------------------- layout choice */

/* dot's time grows with the virtual nodes it inserts, one per column an edge crosses, and with
 * the clusters it keeps apart: a plan's F-to-B data edges span the whole step, so one ZeRO-3
 * device of 335 nodes makes ~3 x 10^4 of them and dot runs for 20 minutes (with its limits
 * nslimit, mclimit and searchsize at their lowest, still 20 s). The cost is (nodes + crossed
 * columns) x clusters; measured on one core: pp4_1f1b's plan, device 0 (238 nodes, cost 2,081)
 * 0.2 s; all 4 devices merged over micro-batches (164 nodes, cost 14,000) 4.2 s. Above the
 * budget piper places the nodes itself and Graphviz only draws them. */
#define DOT_BUDGET 6000

typedef struct layout {
    int32_t *rank;   /* column of each node: the longest data path that reaches it */
    int32_t nranks;
    int64_t cost;    /* (nodes + columns crossed by all edges) x clusters used: see DOT_BUDGET */
} layout;

/* Columns by data edges only (as dot ranks them: temporal edges carry constraint=false), in a
 * topological order; nodes on a cycle (a plan's record/wait could make one) take their column
 * from the predecessors ranked before them, so every node gets one and the pass is linear. */
static void layout_rank(const vg_graph *g, layout *L)
{
    size_t n = g->nodes.n, m = g->edges.n;
    int32_t *off = base_xcalloc(n + 2, sizeof *off), *adj = base_xmalloc((m + 1) * sizeof *adj);
    int32_t *indeg = base_xcalloc(n + 1, sizeof *indeg), *queue = base_xmalloc((n + 1) * sizeof *queue);
    bool *done = base_xcalloc(n + 1, sizeof *done);
    for (size_t i = 0; i < m; i++)
        if (!g->edges.v[i].temporal) off[g->edges.v[i].src + 1]++, indeg[g->edges.v[i].dst]++;
    for (size_t v = 0; v < n; v++) off[v + 1] += off[v];
    int32_t *fill = base_xmalloc((n + 1) * sizeof *fill);
    memcpy(fill, off, (n + 1) * sizeof *fill);
    for (size_t i = 0; i < m; i++)
        if (!g->edges.v[i].temporal) adj[fill[g->edges.v[i].src]++] = g->edges.v[i].dst;
    free(fill);
    L->rank = base_xcalloc(n + 1, sizeof *L->rank);
    size_t head = 0, tail = 0, next = 0;
    for (size_t v = 0; v < n; v++)
        if (!indeg[v]) queue[tail++] = (int32_t)v;
    while (head < n) {
        if (head == tail) { /* a cycle: take the first node not yet placed */
            while (done[next]) next++;
            queue[tail++] = (int32_t)next;
            indeg[next] = 0;
        }
        int32_t u = queue[head++];
        if (done[u]) continue;
        done[u] = true;
        for (int32_t k = off[u]; k < off[u + 1]; k++) {
            int32_t v = adj[k];
            if (done[v]) continue;
            if (L->rank[v] < L->rank[u] + 1) L->rank[v] = L->rank[u] + 1;
            if (--indeg[v] == 0) queue[tail++] = v;
        }
    }
    /* A node no data reaches (a parameter gather, a receive) sits just before its first reader
     * rather than all of them in column 0; one with no data edge at all just after the node its
     * stream order puts before it. */
    bool *fed = base_xcalloc(n + 1, sizeof *fed);
    for (size_t i = 0; i < m; i++)
        if (!g->edges.v[i].temporal) fed[g->edges.v[i].dst] = true;
    for (size_t u = 0; u < n; u++) {
        if (fed[u] || off[u] == off[u + 1]) continue;
        int32_t first = INT32_MAX;
        for (int32_t k = off[u]; k < off[u + 1]; k++)
            if (L->rank[adj[k]] < first) first = L->rank[adj[k]];
        if (first - 1 > L->rank[u]) L->rank[u] = first - 1;
    }
    for (size_t i = 0; i < m; i++) {
        const vg_edge *ed = &g->edges.v[i];
        int32_t d = ed->dst;
        if (ed->temporal && !fed[d] && off[d] == off[d + 1] && ed->src < d && L->rank[d] < L->rank[ed->src] + 1)
            L->rank[d] = L->rank[ed->src] + 1;
    }
    free(fed);
    L->nranks = 0;
    for (size_t v = 0; v < n; v++)
        if (L->rank[v] + 1 > L->nranks) L->nranks = L->rank[v] + 1;
    L->cost = (int64_t)n;
    for (size_t i = 0; i < m; i++) {
        int32_t d = L->rank[g->edges.v[i].dst] - L->rank[g->edges.v[i].src];
        L->cost += d < 0 ? -d : d;
    }
    int64_t bands = 0;
    bool *used = base_xcalloc(g->clusters.n + 1, sizeof *used);
    for (size_t v = 0; v < n; v++)
        if (!used[g->nodes.v[v].cluster]) used[g->nodes.v[v].cluster] = true, bands++;
    free(used);
    L->cost *= bands > 1 ? bands : 1;
    free(off), free(adj), free(indeg), free(queue), free(done);
}

/* The laid-out box of a label in points: DejaVu Sans at 9 pt averages ~0.6 em a character;
 * ellipses and hexagons need room around the text. */
static void label_size(const vg_node *x, const char *label, double *w, double *h)
{
    int lines = 1, len = 0, widest = 0;
    for (const char *c = label; *c; c++) {
        if (*c == '\n') lines++, len = 0;
        else if (++len > widest) widest = len;
    }
    *w = widest * 9.0 * 0.6 + 2 * 0.06 * 72;
    *h = lines * 11.0 + 2 * 0.02 * 72;
    if (x->kind != VG_COMPUTE) *w = *w * 1.3 + 8.0, *h += 4.0;
    if (*h < 0.22 * 72) *h = 0.22 * 72;
}

typedef struct placed {
    int32_t node, cluster, rank;
    double key; /* order within a cluster's column: the mean row of its data predecessors */
} placed;

static int cmp_placed(const void *a, const void *b)
{
    const placed *x = a, *y = b;
    if (x->rank != y->rank) return (x->rank > y->rank) - (x->rank < y->rank);
    if (x->cluster != y->cluster) return (x->cluster > y->cluster) - (x->cluster < y->cluster);
    if (x->key != y->key) return (x->key > y->key) - (x->key < y->key);
    return (x->node > y->node) - (x->node < y->node);
}

#define ROW_GAP 10.0   /* points between two nodes of a column */
#define COL_GAP 24.0   /* points between two columns */
#define BAND_PAD 14.0  /* a cluster's margin; its label sits in the top one */

/* Positions for every node, left to right by column, one horizontal band per cluster, rows
 * within a band ordered by their predecessors' rows (one barycentre sweep): O(E + N log N),
 * so a figure of any size that passes --max-nodes is drawn in well under a second. */
static void layout_place(const vg_graph *g, layout *L, double *x, double *y, double *bb, double *bottom)
{
    size_t n = g->nodes.n, nc = g->clusters.n;
    placed *pl = base_xmalloc((n + 1) * sizeof *pl);
    int32_t *row = base_xmalloc((n + 1) * sizeof *row);
    double *w = base_xmalloc((n + 1) * sizeof *w), *h = base_xmalloc((n + 1) * sizeof *h);
    base_buf label = {0};
    double pitch = 0;
    for (size_t v = 0; v < n; v++) {
        label.n = 0;
        if (label.s) label.s[0] = 0;
        node_label(&g->nodes.v[v], &label);
        label_size(&g->nodes.v[v], label.s ? label.s : "", &w[v], &h[v]);
        if (h[v] + ROW_GAP > pitch) pitch = h[v] + ROW_GAP;
        pl[v] = (placed){(int32_t)v, g->nodes.v[v].cluster, L->rank[v], 0};
        row[v] = -1;
    }
    free(label.s);
    /* in-edges by data, for the barycentre */
    int32_t *off = base_xcalloc(n + 2, sizeof *off), *adj = base_xmalloc((g->edges.n + 1) * sizeof *adj);
    for (size_t i = 0; i < g->edges.n; i++)
        if (!g->edges.v[i].temporal) off[g->edges.v[i].dst + 1]++;
    for (size_t v = 0; v < n; v++) off[v + 1] += off[v];
    int32_t *fill = base_xmalloc((n + 1) * sizeof *fill);
    memcpy(fill, off, (n + 1) * sizeof *fill);
    for (size_t i = 0; i < g->edges.n; i++)
        if (!g->edges.v[i].temporal) adj[fill[g->edges.v[i].dst]++] = g->edges.v[i].src;
    free(fill);
    qsort(pl, n, sizeof *pl, cmp_placed);
    int32_t *rows = base_xcalloc(nc + 1, sizeof *rows); /* rows of each cluster's band */
    double *colw = base_xcalloc((size_t)L->nranks + 1, sizeof *colw);
    for (size_t a = 0; a < n;) {
        size_t b = a;
        while (b < n && pl[b].rank == pl[a].rank) b++;
        for (size_t k = a; k < b; k++) {
            int32_t v = pl[k].node;
            double sum = 0;
            int cnt = 0;
            for (int32_t q = off[v]; q < off[v + 1]; q++)
                if (row[adj[q]] >= 0 && g->nodes.v[adj[q]].cluster == pl[k].cluster) sum += row[adj[q]], cnt++;
            /* nodes that nothing of their band feeds go below the others, in instruction order */
            pl[k].key = cnt ? sum / cnt : 1e9 + (double)v;
        }
        qsort(pl + a, b - a, sizeof *pl, cmp_placed);
        int32_t r = 0;
        for (size_t k = a; k < b; k++) {
            if (k > a && pl[k].cluster != pl[k - 1].cluster) r = 0;
            row[pl[k].node] = r++;
            if (r > rows[pl[k].cluster]) rows[pl[k].cluster] = r;
            if (w[pl[k].node] > colw[pl[k].rank]) colw[pl[k].rank] = w[pl[k].node];
        }
        a = b;
    }
    double *colx = base_xmalloc(((size_t)L->nranks + 1) * sizeof *colx);
    double cx = 0;
    for (int32_t r = 0; r < L->nranks; r++) {
        colx[r] = cx + colw[r] / 2;
        cx += colw[r] + COL_GAP;
    }
    double *band = base_xmalloc((nc + 1) * sizeof *band), top = 0;
    for (size_t c = 0; c < nc; c++) {
        band[c] = top;
        if (rows[c]) top -= rows[c] * pitch + 3 * BAND_PAD;
    }
    for (size_t c = 0; c < nc; c++) bb[4 * c] = 1e300, bb[4 * c + 1] = 1e300, bb[4 * c + 2] = -1e300, bb[4 * c + 3] = -1e300;
    for (size_t v = 0; v < n; v++) {
        int32_t c = g->nodes.v[v].cluster;
        x[v] = colx[L->rank[v]];
        y[v] = band[c] - 2 * BAND_PAD - pitch / 2 - row[v] * pitch;
        double *B = &bb[4 * c];
        if (x[v] - w[v] / 2 - BAND_PAD < B[0]) B[0] = x[v] - w[v] / 2 - BAND_PAD;
        if (x[v] + w[v] / 2 + BAND_PAD > B[2]) B[2] = x[v] + w[v] / 2 + BAND_PAD;
        B[1] = band[c] - rows[c] * pitch - 2 * BAND_PAD - BAND_PAD / 2;
        B[3] = band[c];
    }
    *bottom = top;
    free(pl), free(row), free(w), free(h), free(off), free(adj), free(rows), free(colw), free(colx), free(band);
}

int vg_write_dot(const vg_graph *g, const char *title, int max_nodes, base_buf *dot, base_error *e)
{
    if (max_nodes <= 0) max_nodes = 600;
    if (g->nodes.n > (size_t)max_nodes)
        return base_errorf(e, "the DAG has %zu nodes, too many to lay out legibly (the limit is %d); draw one device "
                           "(--device N) or merge nodes (--collapse mb, --collapse layers, or both: --collapse mb,layers)",
                           g->nodes.n, max_nodes);
    layout L;
    layout_rank(g, &L);
    bool own = L.cost > DOT_BUDGET;
    double *px = NULL, *py = NULL, *bb = NULL, bottom = 0;
    if (own) {
        px = base_xmalloc((g->nodes.n + 1) * sizeof *px);
        py = base_xmalloc((g->nodes.n + 1) * sizeof *py);
        bb = base_xmalloc((g->clusters.n + 1) * 4 * sizeof *bb);
        layout_place(g, &L, px, py, bb, &bottom);
    }
    base_buf_puts(dot, "digraph piper {\n");
    base_buf_printf(dot, "  graph [rankdir=LR, newrank=true, nodesep=0.12, ranksep=0.28, fontname=\"%s\", fontsize=11, "
                         "labelloc=t, bgcolor=white, pad=0.2", VIZ_FONT);
    /* Graphviz takes the engine from the graph's `layout`: nop draws at the given positions, with
     * straight edges (no spline routing, which is quadratic in what an edge passes) */
    if (own) base_buf_puts(dot, ", layout=nop, splines=line");
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
        if (own) base_buf_printf(dot, "    bb=\"%.1f,%.1f,%.1f,%.1f\";\n", bb[4 * c], bb[4 * c + 1], bb[4 * c + 2], bb[4 * c + 3]);
        for (size_t k = off[c]; k < off[c + 1]; k++) {
            size_t i = order[k];
            char name[32], pos[64];
            snprintf(name, sizeof name, "n%zu", i);
            if (own) snprintf(pos, sizeof pos, "%.1f,%.1f", px[i], py[i]);
            label.n = 0;
            if (label.s) label.s[0] = 0;
            if (g->nodes.v[i].kind != VG_DUMMY) node_label(&g->nodes.v[i], &label);
            write_node(dot, name, &g->nodes.v[i], label.s ? label.s : "", name, own ? pos : NULL);
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
    double at[2] = {0, bottom - BAND_PAD};
    if (g->nodes.n) write_legend(g, dot, own ? at : NULL);
    base_buf_puts(dot, "}\n");
    free(L.rank), free(px), free(py), free(bb);
    return 0;
}
