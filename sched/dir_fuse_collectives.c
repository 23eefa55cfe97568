/* dir_fuse_collectives.c — `fuse_collectives {filter}`: Piper's merge of tensor-parallel
 * collectives into one call per group (its src/directives.py, _fuse_tp_collectives: each TP
 * collective re-pays the ranks' arrival skew, a fused call pays it once). Piper groups the
 * matching TP collectives by pass, stream and device group; piper groups them by that and by
 * the collective's kind and region (layer, region kind, chunk, stage), so a group holds one
 * region's collectives of the different micro-batches: collectives of successive regions depend
 * on each other and could never be one call. As in Piper, `order` wins: a group in which one
 * member depends on another (an order that interleaves micro-batches, 1F1B's backward of i
 * before the forward of i+1) stays unfused, and the pass comes after the orders. Piper keeps its
 * members as nodes with a leader that issues the call; here the members become one collective
 * node that reads every member's input and writes every member's output (sizes.c sums them),
 * so the plan has one collective where there were several. */
#include "sched_internal.h"

#include <stdlib.h>
#include <string.h>

typedef BASE_VEC(int32_t) i32_vec;

static bool same_group(const ir_node *a, const ir_node *b)
{
    return a->op == b->op && a->pass == b->pass && a->stream == b->stream &&
           a->place == b->place && a->coll_group == b->coll_group && a->tp == b->tp &&
           a->sp == b->sp && a->region == b->region && a->layer == b->layer &&
           a->chunk == b->chunk && a->stage == b->stage &&
           (a->flags & ~IR_NODE_PER_MB) == (b->flags & ~IR_NODE_PER_MB);
}

/* Does any member reach another along the DAG's edges? */
static bool members_depend(ir_dag *g, const int32_t *mem, int n, int32_t *stamp, int32_t *stack,
                           int32_t *mark)
{
    for (int i = 0; i < n; i++) stamp[mem[i]] = -2;
    bool dep = false;
    for (int i = 0; i < n && !dep; i++) {
        /* stamps grow with each search, so no reset is needed between searches */
        int sp = 0;
        stack[sp++] = mem[i];
        (*mark)++;
        while (sp && !dep) {
            int32_t u = stack[--sp];
            for (int32_t k = g->out_off[u]; k < g->out_off[u + 1]; k++) {
                const ir_edge *ed = &g->edges[g->out_edge[k]];
                if (ed->dead) continue;
                int32_t w = ed->dst;
                if (stamp[w] == -2) {
                    dep = true;
                    break;
                }
                if (stamp[w] == *mark) continue;
                stamp[w] = *mark;
                stack[sp++] = w;
            }
        }
    }
    for (int i = 0; i < n; i++) stamp[mem[i]] = 0;
    return dep;
}

int sched_dir_fuse_collectives(sched_ctx *x, const ir_directive *d, base_error *e)
{
    ir_dag *g = x->g;
    if (!x->order_seen && x->prog->ann.pp_stages > 1)
        return sched_dir_error(d, e,
                               "fuse_collectives runs after the orders (Piper's order wins), and a "
                               "pipeline's default schedule is chosen after the directives; put "
                               "a schedule or order directives before it");
    size_t n0 = g->nnodes;
    i32_vec cand = {0};
    for (size_t v = 0; v < n0; v++) {
        const ir_node *n = &g->nodes[v];
        if (n->dead || IR_OP_INFO[n->op].kind != IR_KIND_COLL || n->coll_group != IR_CG_TP ||
            (n->flags & (IR_NODE_DP_SYNC | IR_NODE_FUSED)))
            continue;
        if (sched_filter_match(g, (int32_t)v, &d->filter)) SCHED_PUSH(&x->scratch, cand, (int32_t)v);
    }
    if (!cand.n)
        return sched_dir_error(d, e,
                               "the filter matches no tensor-parallel collective; fuse_collectives "
                               "merges those of shard_tensor, e.g. filter {TP: \"*\"}");
    ir_dag_build_adjacency(g);
    int32_t *stamp = base_arena_calloc(&x->scratch, g->nnodes, sizeof *stamp);
    int32_t *stack = base_arena_calloc(&x->scratch, g->nnodes + 1, sizeof *stack);
    int32_t *mem = base_arena_calloc(&x->scratch, cand.n, sizeof *mem);
    bool *taken = base_arena_calloc(&x->scratch, cand.n, sizeof *taken);
    int32_t mark = 0;
    for (size_t i = 0; i < cand.n; i++) {
        if (taken[i]) continue;
        int nm = 0;
        for (size_t j = i; j < cand.n; j++)
            if (!taken[j] && same_group(&g->nodes[cand.v[i]], &g->nodes[cand.v[j]])) {
                mem[nm++] = cand.v[j];
                taken[j] = true;
            }
        if (nm < 2 || members_depend(g, mem, nm, stamp, stack, &mark)) continue;
        /* the first member (the earliest micro-batch) takes the others' edges and tensors */
        int32_t lead = mem[0];
        for (int k = 1; k < nm; k++) {
            int32_t m = mem[k];
            for (int32_t q = g->in_off[m]; q < g->in_off[m + 1]; q++) g->edges[g->in_edge[q]].dst = lead;
            for (int32_t q = g->out_off[m]; q < g->out_off[m + 1]; q++) {
                ir_edge *ed = &g->edges[g->out_edge[q]];
                ed->src = lead;
                if (ed->kind == IR_EDGE_DATA) g->tensors[ed->tensor].producer = lead;
            }
            g->nodes[m].dead = 1;
        }
        g->nodes[lead].flags |= IR_NODE_FUSED;
        g->adj_valid = false;
        ir_dag_build_adjacency(g);
    }
    return 0;
}
