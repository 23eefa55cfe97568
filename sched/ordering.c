/* ordering.c — the launch order of every device. Devices that run the same placements form a
 * class and share one order. Within a class, a list scheduler emits nodes in topological order
 * (data and temporal edges; the cross-device SEND -> RECV edge is the peer's business) and, among
 * ready nodes, prefers (DESIGN.md's default policy) sends, then critical-path collectives (TP,
 * EP, world), then data-parallel reductions, then compute, then receives, then per-step compute
 * (optimizer steps); within a category the
 * earlier micro-batch, then the node with the most downstream work (bottom level by the static
 * cost model), then the lower id. The micro-batch comes before the downstream work on purpose:
 * ranked by downstream work alone, every micro-batch's forward runs before any backward (GPipe's
 * activation memory); finishing micro-batches in order keeps gradient accumulation at one
 * micro-batch of activations, as practitioners run it.
 * Explicit `order` directives have already added temporal edges, so they always win.
 * Nodes marked just-in-time (recompute, ZeRO-3 gathers) become ready only when their consumer
 * has nothing else to wait for, so they do not run early and hold memory. */
#include "sched_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int category(const ir_node *n)
{
    switch (IR_OP_INFO[n->op].kind) {
    case IR_KIND_P2P: return n->op == IR_OP_SEND ? 0 : 4;
    case IR_KIND_COLL: return (n->flags & IR_NODE_DP_SYNC) ? 2 : 1;
    case IR_KIND_DUMMY: return 0;
    default:
        /* Per-step compute (optimizer, gradient norm) waits for cross-device reductions; issued
         * before a pending receive it would hold the compute stream while the neighbour still
         * needs this device's backward (tied embeddings in an interleaved pipeline). */
        return n->mb < 0 ? 5 : 3;
    }
}

/* Per-step nodes (optimizer, gradient synchronisation) rank after every micro-batch. */
static int32_t mb_key(const ir_node *n) { return n->mb < 0 ? INT32_MAX : n->mb; }

typedef struct heap_item {
    int cat;
    int32_t mb;
    int32_t sub;   /* overlapped order groups: the member's turn (overlap_keys); 0 otherwise */
    double bl;
    int32_t v;
} heap_item;

static bool before(const heap_item *a, const heap_item *b)
{
    if (a->cat != b->cat) return a->cat < b->cat;
    if (a->mb != b->mb) return a->mb < b->mb;
    if (a->sub != b->sub) return a->sub < b->sub;
    if (a->bl != b->bl) return a->bl > b->bl;
    return a->v < b->v;
}

/* Overlapped order groups (dir_order.c: several filters in one group, DualPipe's F&B pair) run
 * their members in turns: a turn is one member's compute up to its next collective, so that one
 * member's all-to-all (EP dispatch or combine, on its own stream) is in flight while the other
 * member computes, as DualPipe's overlapped_forward_backward interleaves them. A node's turn is
 * segment * members + member, its segment the number of collectives on its member's path
 * before it; the first-named member (the forward, in PyTorch's (F;B) spelling) goes first. The
 * whole group ranks by its earliest micro-batch. Without collectives every member runs whole,
 * in the order written. mbk[v] and sub[v] are the keys (mbk -2 when v is in no group). */
static void overlap_keys(const sched_compilation *c, const ir_dag *g, int32_t *mbk, int32_t *sub)
{
    size_t N = g->nnodes;
    for (size_t v = 0; v < N; v++) mbk[v] = -2, sub[v] = 0;
    if (!c || !c->noverlap) return;
    int32_t G = c->noverlap_groups;
    int32_t *grp = base_xmalloc(N * sizeof *grp), *mem = base_xmalloc(N * sizeof *mem);
    int32_t *gmin = base_xmalloc((size_t)(G ? G : 1) * sizeof *gmin);
    int32_t *gmembers = base_xcalloc((size_t)(G ? G : 1), sizeof *gmembers);
    for (size_t v = 0; v < N; v++) grp[v] = -1;
    for (int32_t k = 0; k < G; k++) gmin[k] = INT32_MAX;
    for (size_t i = 0; i < c->noverlap; i++) {
        const struct sched_overlap_member *o = &c->overlap[i];
        if ((size_t)o->node >= N || g->nodes[o->node].dead || o->group >= G) continue;
        grp[o->node] = o->group;
        mem[o->node] = o->member;
        int32_t mb = g->nodes[o->node].mb;
        if (mb >= 0 && mb < gmin[o->group]) gmin[o->group] = mb;
        if (o->member + 1 > gmembers[o->group]) gmembers[o->group] = o->member + 1;
    }
    /* segments by relaxation: a group is a few dozen nodes deep */
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t i = 0; i < c->noverlap; i++) {
            int32_t v = c->overlap[i].node;
            if ((size_t)v >= N || grp[v] < 0) continue;
            int32_t seg = 0;
            for (int32_t k = g->in_off[v]; k < g->in_off[v + 1]; k++) {
                const ir_edge *ed = &g->edges[g->in_edge[k]];
                int32_t u = ed->src;
                if (ed->kind != IR_EDGE_DATA || grp[u] != grp[v] || mem[u] != mem[v]) continue;
                int32_t s = sub[u] + (IR_OP_INFO[g->nodes[u].op].kind == IR_KIND_COLL);
                if (s > seg) seg = s;
            }
            if (seg != sub[v]) sub[v] = seg, changed = true;
        }
    }
    for (size_t v = 0; v < N; v++) {
        if (grp[v] < 0) continue;
        mbk[v] = gmin[grp[v]] == INT32_MAX ? g->nodes[v].mb : gmin[grp[v]];
        sub[v] = sub[v] * gmembers[grp[v]] + mem[v];
    }
    free(grp);
    free(mem);
    free(gmin);
    free(gmembers);
}

static heap_item item_of(const ir_dag *g, const int32_t *mbk, const int32_t *sub, const double *bl, int32_t v)
{
    const ir_node *n = &g->nodes[v];
    /* A just-in-time collective (a ZeRO-3 gather) ranks as its consumer does, just ahead of it
     * (its bottom level is the consumer's and more), so it is issued right before the consumer
     * and not as soon as it is released: released gathers of later micro-batches would otherwise
     * all go first, each holding a gathered copy until its consumer runs. */
    if ((n->flags & IR_NODE_JIT) && n->link >= 0 && IR_OP_INFO[n->op].kind == IR_KIND_COLL) {
        int32_t u = n->link;
        const ir_node *un = &g->nodes[u];
        return (heap_item){category(un), mbk[u] != -2 ? mbk[u] : mb_key(un), sub[u], bl[v], v};
    }
    return (heap_item){category(n), mbk[v] != -2 ? mbk[v] : mb_key(n), sub[v], bl[v], v};
}

typedef BASE_VEC(heap_item) heap;

static void heap_push(heap *h, heap_item it)
{
    BASE_VEC_PUSH(*h, it);
    size_t i = h->n - 1;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&h->v[i], &h->v[p])) break;
        heap_item t = h->v[i];
        h->v[i] = h->v[p];
        h->v[p] = t;
        i = p;
    }
}

static heap_item heap_pop(heap *h)
{
    heap_item top = h->v[0];
    h->v[0] = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && before(&h->v[l], &h->v[m])) m = l;
        if (r < h->n && before(&h->v[r], &h->v[m])) m = r;
        if (m == i) break;
        heap_item t = h->v[i];
        h->v[i] = h->v[m];
        h->v[m] = t;
        i = m;
    }
    return top;
}

/* Device classes: devices with the same set of placements. */
static void make_classes(ir_dag *g, sched_order *o)
{
    int W = g->world;
    /* membership bitsets per device, as sorted placement lists */
    /* only placements some live node uses (directives may leave earlier ones unused) */
    bool *used = base_xcalloc((size_t)g->nplaces + 1, sizeof *used);
    for (size_t v = 0; v < g->nnodes; v++)
        if (!g->nodes[v].dead) used[g->nodes[v].place] = true;
    int *count = base_xcalloc((size_t)W, sizeof *count);
    for (int p = 0; p < g->nplaces; p++)
        for (int i = 0; i < g->places[p].ndev && used[p]; i++) count[g->places[p].devs[i]]++;
    int **lists = base_xcalloc((size_t)W, sizeof *lists);
    for (int d = 0; d < W; d++) lists[d] = base_xcalloc((size_t)count[d] + 1, sizeof(int));
    int *fill = base_xcalloc((size_t)W, sizeof *fill);
    for (int p = 0; p < g->nplaces; p++)
        for (int i = 0; i < g->places[p].ndev && used[p]; i++) {
            int d = g->places[p].devs[i];
            lists[d][fill[d]++] = p;
        }
    free(used);
    o->class_of_device = base_arena_calloc(g->arena, (size_t)W, sizeof(int));
    o->class_rep = base_arena_calloc(g->arena, (size_t)W, sizeof(int));
    o->nclasses = 0;
    for (int d = 0; d < W; d++) {
        int c = -1;
        for (int k = 0; k < o->nclasses && c < 0; k++) {
            int r = o->class_rep[k];
            if (count[r] == count[d] && memcmp(lists[r], lists[d], (size_t)count[d] * sizeof(int)) == 0) c = k;
        }
        if (c < 0) {
            c = o->nclasses++;
            o->class_rep[c] = d;
        }
        o->class_of_device[d] = c;
    }
    for (int d = 0; d < W; d++) free(lists[d]);
    free(lists);
    free(count);
    free(fill);
}

int sched_order_nodes(sched_ctx *x, sched_order *o, base_error *e)
{
    ir_dag *g = x->g;
    ir_dag_build_adjacency(g);
    size_t N = g->nnodes;
    memset(o, 0, sizeof *o);
    make_classes(g, o);

    /* durations and bottom levels (reverse topological order) */
    o->node_seconds = base_arena_calloc(g->arena, N ? N : 1, sizeof(double));
    double *bl = base_xcalloc(N ? N : 1, sizeof *bl);
    int32_t *outdeg = base_xcalloc(N ? N : 1, sizeof *outdeg);
    int32_t *stack = base_xmalloc((N ? N : 1) * sizeof *stack);
    size_t top = 0;
    for (size_t v = 0; v < N; v++) {
        if (g->nodes[v].dead) continue;
        o->node_seconds[v] = sched_node_seconds(x->costs, (int32_t)v);
        outdeg[v] = g->out_off[v + 1] - g->out_off[v];
        if (!outdeg[v]) stack[top++] = (int32_t)v;
    }
    while (top) {
        int32_t v = stack[--top];
        double best = 0;
        for (int32_t k = g->out_off[v]; k < g->out_off[v + 1]; k++) {
            double b = bl[g->edges[g->out_edge[k]].dst];
            if (b > best) best = b;
        }
        bl[v] = o->node_seconds[v] + best;
        for (int32_t k = g->in_off[v]; k < g->in_off[v + 1]; k++) {
            int32_t u = g->edges[g->in_edge[k]].src;
            if (--outdeg[u] == 0) stack[top++] = u;
        }
    }
    free(outdeg);
    free(stack);

    int32_t *mbk = base_xmalloc((N ? N : 1) * sizeof *mbk), *sub = base_xmalloc((N ? N : 1) * sizeof *sub);
    overlap_keys(x->c, g, mbk, sub);

    /* per class: which placements belong to it */
    o->class_nnodes = base_arena_calloc(g->arena, (size_t)o->nclasses, sizeof(int));
    o->class_nodes = base_arena_calloc(g->arena, (size_t)o->nclasses, sizeof(int32_t *));
    bool *in_class = base_xcalloc((size_t)g->nplaces, sizeof *in_class);
    int32_t *indeg = base_xcalloc(N ? N : 1, sizeof *indeg);
    int32_t *jit_wait = base_xcalloc(N ? N : 1, sizeof *jit_wait);   /* JIT preds of a consumer */
    uint8_t *state = base_xcalloc(N ? N : 1, 1); /* bit0 member, bit1 released (JIT), bit2 emitted */
    int rc = 0;
    for (int c = 0; c < o->nclasses && !rc; c++) {
        int rep = o->class_rep[c];
        for (int p = 0; p < g->nplaces; p++) {
            in_class[p] = false;
            for (int i = 0; i < g->places[p].ndev; i++) in_class[p] |= g->places[p].devs[i] == rep;
        }
        size_t members = 0;
        for (size_t v = 0; v < N; v++) {
            state[v] = 0;
            indeg[v] = 0;
            jit_wait[v] = 0;
            if (!g->nodes[v].dead && in_class[g->nodes[v].place]) {
                state[v] = 1;
                members++;
            }
        }
        for (size_t v = 0; v < N; v++) {
            if (!(state[v] & 1)) continue;
            for (int32_t k = g->in_off[v]; k < g->in_off[v + 1]; k++) {
                int32_t u = g->edges[g->in_edge[k]].src;
                if (state[u] & 1) indeg[v]++;
            }
            const ir_node *n = &g->nodes[v];
            if ((n->flags & IR_NODE_JIT) && n->link >= 0 && (state[n->link] & 1)) jit_wait[n->link]++;
        }
        heap h = {0};
        for (size_t v = 0; v < N; v++) {
            if (!(state[v] & 1) || indeg[v]) continue;
            const ir_node *n = &g->nodes[v];
            if ((n->flags & IR_NODE_JIT) && n->link >= 0 && (state[n->link] & 1)) {
                /* released when its consumer waits on nothing else */
                if (indeg[n->link] != jit_wait[n->link]) continue;
                state[v] |= 2;
            }
            heap_push(&h, item_of(g, mbk, sub, bl, (int32_t)v));
        }
        int32_t *out = base_arena_calloc(g->arena, members ? members : 1, sizeof *out);
        size_t nout = 0, emitted = 0;
        int32_t paired = -1;
        while (h.n || paired >= 0) {
            int32_t v;
            if (paired >= 0) {
                v = paired;
                paired = -1;
            } else {
                v = heap_pop(&h).v;
                if (state[v] & 4) continue; /* already emitted as the partner of a send */
            }
            state[v] |= 4;
            emitted++;
            if (g->nodes[v].op != IR_OP_ORDER) out[nout++] = v;
            /* A send is paired with a ready receive from the same neighbour (the earliest
             * micro-batch), so that neighbours exchanging in both directions post the two
             * together and the lowering makes them one sendrecv group. */
            if (g->nodes[v].op == IR_OP_SEND) {
                int best = -1;
                for (size_t q = 0; q < h.n; q++) {
                    const ir_node *rn = &g->nodes[h.v[q].v];
                    if (rn->op != IR_OP_RECV || (state[h.v[q].v] & 4) ||
                        rn->peer_place != g->nodes[v].peer_place)
                        continue;
                    if (best < 0 || before(&h.v[q], &h.v[best])) best = (int)q;
                }
                if (best >= 0) paired = h.v[best].v;
            }
            for (int32_t k = g->out_off[v]; k < g->out_off[v + 1]; k++) {
                int32_t w = g->edges[g->out_edge[k]].dst;
                if (!(state[w] & 1)) continue;
                indeg[w]--;
                const ir_node *wn = &g->nodes[w];
                bool wjit = (wn->flags & IR_NODE_JIT) && wn->link >= 0 && (state[wn->link] & 1);
                if (indeg[w] == 0 && (!wjit || (state[w] & 2)))
                    heap_push(&h, item_of(g, mbk, sub, bl, w));
                /* w's remaining inputs are all just-in-time nodes: release them */
                if (jit_wait[w] > 0 && indeg[w] == jit_wait[w]) {
                    for (int32_t q = g->in_off[w]; q < g->in_off[w + 1]; q++) {
                        int32_t j = g->edges[g->in_edge[q]].src;
                        const ir_node *jn = &g->nodes[j];
                        if (!(state[j] & 1) || (state[j] & 2) || !(jn->flags & IR_NODE_JIT) || jn->link != w) continue;
                        state[j] |= 2;
                        if (indeg[j] == 0) heap_push(&h, item_of(g, mbk, sub, bl, j));
                    }
                }
            }
        }
        free(h.v);
        if (emitted != members) {
            rc = base_errorf(e, "cannot order device %d: %zu of its %zu nodes wait on each other "
                                "(a cycle through temporal edges); check the order directives",
                             rep, members - emitted, members);
        }
        o->class_nodes[c] = out;
        o->class_nnodes[c] = (int)nout;
    }
    free(in_class);
    free(indeg);
    free(jit_wait);
    free(state);
    free(bl);
    free(mbk);
    free(sub);
    return rc;
}
