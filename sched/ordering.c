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
    double bl;
    int32_t v;
} heap_item;

static bool before(const heap_item *a, const heap_item *b)
{
    if (a->cat != b->cat) return a->cat < b->cat;
    if (a->mb != b->mb) return a->mb < b->mb;
    if (a->bl != b->bl) return a->bl > b->bl;
    return a->v < b->v;
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
            heap_push(&h, (heap_item){category(n), mb_key(n), bl[v], (int32_t)v});
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
                    heap_push(&h, (heap_item){category(wn), mb_key(wn), bl[w], w});
                /* w's remaining inputs are all just-in-time nodes: release them */
                if (jit_wait[w] > 0 && indeg[w] == jit_wait[w]) {
                    for (int32_t q = g->in_off[w]; q < g->in_off[w + 1]; q++) {
                        int32_t j = g->edges[g->in_edge[q]].src;
                        const ir_node *jn = &g->nodes[j];
                        if (!(state[j] & 1) || (state[j] & 2) || !(jn->flags & IR_NODE_JIT) || jn->link != w) continue;
                        state[j] |= 2;
                        if (indeg[j] == 0) heap_push(&h, (heap_item){category(jn), mb_key(jn), bl[j], j});
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
    return rc;
}
