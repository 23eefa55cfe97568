/* dir_order.c — `order {filters: [[f, ...], [f, ...], ...]}`: temporal edges from every node of
 * one group to every node of the next (through an ORDER dummy, so k groups cost O(nodes), not
 * O(nodes^2)). Filters inside one group may interleave: that is how an overlapped F&B pair is
 * written. A filter that names PASS BI or BW splits the matching backward into an input-gradient
 * half (BI, which passes the gradient on) and a weight-gradient half (BW, which produces the
 * weight gradient) before matching. An order lives on one device: groups that span devices are
 * an error, and so is an order that contradicts the data flow (the verifier finds the cycle). */
#include "sched_internal.h"

#include <string.h>

static bool names_split_pass(const ir_filter *f)
{
    for (int i = 0; i < f->n; i++)
        if (f->m[i].tag == IR_TAG_PASS && !f->m[i].any &&
            (f->m[i].value == PLAN_PASS_BI || f->m[i].value == PLAN_PASS_BW))
            return true;
    return false;
}

/* The filter with PASS rewritten to B, to find the backwards to split. */
static bool match_as_backward(const ir_dag *g, int32_t v, const ir_filter *f)
{
    ir_tag_match tmp[16];
    int n = f->n < 16 ? f->n : 16;
    memcpy(tmp, f->m, (size_t)n * sizeof *tmp);
    for (int i = 0; i < n; i++)
        if (tmp[i].tag == IR_TAG_PASS) tmp[i].value = PLAN_PASS_B;
    ir_filter g2 = {n, tmp, f->line, f->col};
    return sched_filter_match(g, v, &g2);
}

/* B -> BI + BW for every listed backward, in one pass over the edges: every data input feeds
 * both halves; the weight gradient leaves from BW; everything else stays with BI. */
static void split_backwards(ir_dag *g, base_arena *scratch, const int32_t *bs, size_t n)
{
    if (!n) return;
    size_t n0 = g->nnodes;
    int32_t *bw_of = base_arena_calloc(scratch, n0, sizeof *bw_of);
    for (size_t v = 0; v < n0; v++) bw_of[v] = -1;
    for (size_t i = 0; i < n; i++) {
        int32_t b = bs[i];
        int32_t w = ir_dag_add_node(g, IR_OP_BW);
        g->nodes[w] = g->nodes[b];
        g->nodes[w].op = IR_OP_BW;
        g->nodes[w].pass = PLAN_PASS_BW;
        g->nodes[b].op = IR_OP_BI;
        g->nodes[b].pass = PLAN_PASS_BI;
        bw_of[b] = w;
    }
    size_t ne = g->nedges;
    for (size_t i = 0; i < ne; i++) {
        ir_edge *ed = &g->edges[i];
        if (ed->dead) continue;
        /* ZeRO-2/3's double buffering makes the backward that starts a bucket wait for the
         * reduce-scatter two buckets back (dir_replicate.c). Split, it is the weight half that
         * makes the gradient, so the weight half waits: the input half must not, since the
         * reduction it would wait for needs weight halves that the schedule defers past it
         * (ZB-H1 at three buckets or more is a cycle). */
        const ir_node *from = &g->nodes[ed->src];
        if (ed->kind == IR_EDGE_TEMPORAL && bw_of[ed->dst] >= 0 && from->op == IR_OP_REDUCE_SCATTER &&
            (from->flags & IR_NODE_DP_SYNC) && !(from->flags & IR_NODE_JIT)) {
            ed->dst = bw_of[ed->dst];
            continue;
        }
        if (ed->kind != IR_EDGE_DATA) continue;
        if (bw_of[ed->dst] >= 0) {
            ir_dag_add_edge(g, ed->src, bw_of[ed->dst], ed->tensor, IR_EDGE_DATA);
        } else if (bw_of[ed->src] >= 0 && g->tensors[ed->tensor].kind == IR_T_GRAD) {
            g->tensors[ed->tensor].producer = bw_of[ed->src];
            ed->src = bw_of[ed->src];
        }
    }
    /* The communication of a split backward (the incoming activation gradient, the outgoing
     * one, TP/EP collectives on the way) belongs to its input half: the weight half only makes
     * the local weight gradient. Tagging it BI lets an order group {PASS: BI} carry it, as
     * {PASS: B} carries an unsplit backward's; left at B it would float free in the launch
     * order and pair with the wrong neighbour transfer. The chain may be longer than one hop
     * (with sequence parallelism the received gradient feeds an all-gather that feeds BI), so
     * the tag follows chains of communication on the split's device, upstream from its inputs
     * and downstream from its outputs, to a fixed point. */
    size_t nn = g->nnodes;
    uint8_t *side = base_arena_calloc(scratch, nn ? nn : 1, 1); /* 1 feeds a BI, 2 fed by one */
    for (size_t v = 0; v < n0; v++)
        if (bw_of[v] >= 0) side[v] = 3;
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t i = 0; i < g->nedges; i++) {
            const ir_edge *ed = &g->edges[i];
            if (ed->dead || ed->kind != IR_EDGE_DATA) continue;
            for (int end = 0; end < 2; end++) {
                int32_t from = end ? ed->dst : ed->src, other = end ? ed->src : ed->dst;
                uint8_t dir = end ? 1 : 2;
                if (!(side[from] & dir) || (side[other] & dir)) continue;
                ir_node *o = &g->nodes[other];
                if ((o->pass != PLAN_PASS_B && o->pass != PLAN_PASS_BI) || (o->flags & IR_NODE_DP_SYNC) ||
                    IR_OP_INFO[o->op].kind == IR_KIND_COMPUTE || o->place != g->nodes[from].place)
                    continue;
                o->pass = PLAN_PASS_BI;
                side[other] |= dir;
                changed = true;
            }
        }
    }
    g->adj_valid = false;
}

/* Nodes bucketed by (stage, micro-batch): key = stage * (mbs + 1) + mb + 1, so per-step
 * nodes (mb -1) of a stage have a bucket too; nodes without a stage are only in `all`. */
typedef struct node_index {
    int64_t stages, mbs;
    int32_t *off;    /* nkeys + 1 offsets into `ids` */
    int32_t *ids;
    size_t nnodes;
} node_index;

static void index_build(const ir_dag *g, base_arena *scratch, node_index *x)
{
    memset(x, 0, sizeof *x);
    x->nnodes = g->nnodes;
    for (size_t v = 0; v < g->nnodes; v++) {
        const ir_node *n = &g->nodes[v];
        if (n->stage + 1 > x->stages) x->stages = n->stage + 1;
        if (n->mb + 1 > x->mbs) x->mbs = n->mb + 1;
    }
    size_t nkeys = (size_t)(x->stages * (x->mbs + 1));
    x->off = base_arena_calloc(scratch, nkeys + 2, sizeof *x->off);
    x->ids = base_arena_calloc(scratch, g->nnodes ? g->nnodes : 1, sizeof *x->ids);
    for (size_t v = 0; v < g->nnodes; v++) {
        const ir_node *n = &g->nodes[v];
        if (n->dead || n->stage < 0) continue;
        x->off[n->stage * (x->mbs + 1) + n->mb + 1 + 1]++;
    }
    for (size_t k = 0; k < nkeys; k++) x->off[k + 1] += x->off[k];
    int32_t *fill = base_arena_calloc(scratch, nkeys + 1, sizeof *fill);
    for (size_t v = 0; v < g->nnodes; v++) {
        const ir_node *n = &g->nodes[v];
        if (n->dead || n->stage < 0) continue;
        size_t key = (size_t)(n->stage * (x->mbs + 1) + n->mb + 1);
        x->ids[x->off[key] + fill[key]++] = (int32_t)v;
    }
}

/* The bucket every filter of the group shares, or NULL (then *n = all nodes, by id). */
static const int32_t *index_candidates(const node_index *x, const ir_filter *fs, int nf, size_t *n)
{
    int64_t stage = -2, mb = -2;
    for (int j = 0; j < nf; j++) {
        int64_t fs_stage = -2, fs_mb = -2;
        for (int i = 0; i < fs[j].n; i++) {
            const ir_tag_match *m = &fs[j].m[i];
            if (m->any) continue;
            if (m->tag == IR_TAG_PP) fs_stage = m->value;
            if (m->tag == IR_TAG_MB) fs_mb = m->value;
        }
        if (fs_stage < 0 || fs_mb < 0 || (stage != -2 && (stage != fs_stage || mb != fs_mb))) {
            *n = x->nnodes;
            return NULL;
        }
        stage = fs_stage;
        mb = fs_mb;
    }
    if (stage < 0 || stage >= x->stages || mb >= x->mbs) {
        *n = 0;
        return x->ids;
    }
    size_t key = (size_t)(stage * (x->mbs + 1) + mb + 1);
    *n = (size_t)(x->off[key + 1] - x->off[key]);
    return x->ids + x->off[key];
}

/* A group of several filters is an overlapped group (DualPipe's F&B pair): its members run as
 * one unit, as DualPipe's overlapped_forward_backward does. No member computes before every
 * member's inputs from other devices have arrived, and no member sends before every member's
 * compute is done; in between, their compute and collectives (an EP all-to-all on its own
 * stream) may interleave freely. Without this the pair's halves would run as two independent
 * actions, each starting when its own input arrives, which is a different (and faster) schedule
 * than the one written and than DualPipe's closed forms (formulas.md). The constraints are
 * direct temporal edges, receive -> first compute of each action and last compute of each
 * action -> send, which the lowering turns into record/wait across streams. Needs the
 * adjacency of the data edges. */
static void overlap_group(ir_dag *g, const int32_t *mem, int n)
{
    for (int i = 0; i < n; i++) {
        int32_t v = mem[i];
        if (IR_OP_INFO[g->nodes[v].op].kind != IR_KIND_COMPUTE) continue;
        /* a source (sink) has no data predecessor (successor) among the group's compute */
        bool src = true, sink = true;
        for (int32_t k = g->in_off[v]; k < g->in_off[v + 1] && src; k++) {
            const ir_edge *ed = &g->edges[g->in_edge[k]];
            for (int j = 0; j < n && src && ed->kind == IR_EDGE_DATA; j++)
                src = !(mem[j] == ed->src && IR_OP_INFO[g->nodes[mem[j]].op].kind == IR_KIND_COMPUTE);
        }
        for (int32_t k = g->out_off[v]; k < g->out_off[v + 1] && sink; k++) {
            const ir_edge *ed = &g->edges[g->out_edge[k]];
            for (int j = 0; j < n && sink && ed->kind == IR_EDGE_DATA; j++)
                sink = !(mem[j] == ed->dst && IR_OP_INFO[g->nodes[mem[j]].op].kind == IR_KIND_COMPUTE);
        }
        for (int j = 0; j < n; j++) {
            int32_t u = mem[j];
            if (src && g->nodes[u].op == IR_OP_RECV) ir_dag_add_edge(g, u, v, -1, IR_EDGE_TEMPORAL);
            if (sink && g->nodes[u].op == IR_OP_SEND) ir_dag_add_edge(g, v, u, -1, IR_EDGE_TEMPORAL);
        }
    }
}

int sched_dir_order(sched_ctx *x, const ir_directive *d, base_error *e)
{
    ir_dag *g = x->g;
    x->order_seen = true;
    if (d->ngroups < 2)
        return sched_dir_error(d, e, "an order needs at least two groups to order; write "
                                     "filters: [[first], [second], ...]");

    /* Split backwards named as BI/BW, once. */
    BASE_VEC(int32_t) to_split = {0};
    for (size_t v = 0; v < g->nnodes; v++) {
        if (g->nodes[v].dead || g->nodes[v].op != IR_OP_B) continue;
        bool hit = false;
        for (int k = 0; k < d->ngroups && !hit; k++)
            for (int j = 0; j < d->group_nfilters[k] && !hit; j++)
                hit = names_split_pass(&d->groups[k][j]) && match_as_backward(g, (int32_t)v, &d->groups[k][j]);
        if (hit) SCHED_PUSH(&x->scratch, to_split, (int32_t)v);
    }
    split_backwards(g, &x->scratch, to_split.v, to_split.n);

    /* Match every group. Schedules write one group per (stage, micro-batch), so nodes are
     * bucketed by stage and micro-batch once, and a group whose filters all name one stage and
     * one micro-batch looks only at that bucket (GPT-3's 1F1B: 192 groups per rank over 130k
     * nodes would otherwise be 2e8 filter tests). */
    node_index idx;
    index_build(g, &x->scratch, &idx);
    int32_t **members = base_arena_calloc(&x->scratch, (size_t)d->ngroups, sizeof *members);
    int *nmembers = base_arena_calloc(&x->scratch, (size_t)d->ngroups, sizeof *nmembers);
    int place = -1;
    for (int k = 0; k < d->ngroups; k++) {
        BASE_VEC(int32_t) s = {0};
        size_t ncand;
        const int32_t *cand = index_candidates(&idx, d->groups[k], d->group_nfilters[k], &ncand);
        for (size_t ci = 0; ci < ncand; ci++) {
            size_t v = cand ? (size_t)cand[ci] : ci;
            for (int j = 0; j < d->group_nfilters[k]; j++) {
                if (!sched_filter_match(g, (int32_t)v, &d->groups[k][j])) continue;
                if (g->nodes[v].flags & IR_NODE_DP_SYNC) break; /* per-step sync is not ordered by hand */
                SCHED_PUSH(&x->scratch, s, (int32_t)v);
                if (d->group_nfilters[k] >= 2) {
                    sched_compilation *c = x->c;
                    c->overlap = base_arena_grow(&c->arena, c->overlap, &c->cap_overlap, c->noverlap + 1,
                                                 sizeof *c->overlap);
                    c->overlap[c->noverlap++] = (struct sched_overlap_member){(int32_t)v, c->noverlap_groups, j};
                }
                break;
            }
        }
        members[k] = s.v;
        nmembers[k] = (int)s.n;
        if (d->group_nfilters[k] >= 2) x->c->noverlap_groups++;
        if (!s.n) {
            const ir_filter *f = d->group_nfilters[k] ? &d->groups[k][0] : NULL;
            return base_error_at(e, d->file, f ? f->line : d->line, f ? f->col : d->col,
                                 "directive %d (order): group %d matches no node; check its tags "
                                 "(and that split/place ran before)",
                                 d->index, k + 1);
        }
        for (size_t i = 0; i < s.n; i++) {
            int p = g->nodes[s.v[i]].place;
            if (place < 0) place = p;
            if (p != place) {
                char a[96];
                const ir_place *p0 = &g->places[place], *p1 = &g->places[p];
                return sched_dir_error(d, e,
                                       "group %d selects '%s' on device %d%s while earlier nodes "
                                       "run on device %d%s; an order applies to one device, so "
                                       "write one order per rank",
                                       k + 1, ir_node_label(g, s.v[i], a, sizeof a), p1->devs[0],
                                       p1->ndev > 1 ? ".." : "", p0->devs[0], p0->ndev > 1 ? ".." : "");
            }
        }
    }
    bool overlapped = false;
    for (int k = 0; k < d->ngroups; k++) overlapped |= d->group_nfilters[k] >= 2;
    if (overlapped) {
        ir_dag_build_adjacency(g);
        for (int k = 0; k < d->ngroups; k++)
            if (d->group_nfilters[k] >= 2) overlap_group(g, members[k], nmembers[k]);
        g->adj_valid = false;
    }
    for (int k = 0; k + 1 < d->ngroups; k++) {
        int32_t dummy = ir_dag_add_node(g, IR_OP_ORDER);
        g->nodes[dummy].place = place;
        g->nodes[dummy].directive = d->index;
        for (int i = 0; i < nmembers[k]; i++) ir_dag_add_edge(g, members[k][i], dummy, -1, IR_EDGE_TEMPORAL);
        for (int i = 0; i < nmembers[k + 1]; i++)
            ir_dag_add_edge(g, dummy, members[k + 1][i], -1, IR_EDGE_TEMPORAL);
    }
    return 0;
}
