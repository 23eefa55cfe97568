/* coll_auto.c — `--coll auto`, the default: rings, hierarchical across nodes as NCCL's rings
 * over several NICs behave.
 *
 * When a group has the same number k > 1 of members on each of its nodes (sim_group_grid), its
 * all-reduce, reduce-scatter and all-gather run as a ring inside each node over NVLink and k rings
 * across the nodes (one per local rank, each GPU on its own NIC) for a k-th of the data:
 * all-reduce = reduce-scatter in the node, all-reduce of bytes/k across nodes, all-gather in the
 * node; reduce-scatter = in the node, then across; all-gather = across, then in the node. Each
 * phase is a streaming ring (coll_ring.c), so on N nodes an uncontended all-reduce of `bytes`
 * takes the one-node time, 2(k-1)·α_NVL + 2(k-1)/k·bytes/β_NVL, plus the cross-node rings'
 * 2(N-1)·α_NIC + 2(N-1)/N·(bytes/k)/β_NIC. Other groups, and all-to-all, broadcast and reduce,
 * run the flat ring. */
#include "sim_internal.h"

#include <stdlib.h>
#include <string.h>

void sim_group_grid_init(const plan_set *p, int g, sim_group_grid *gg)
{
    memset(gg, 0, sizeof *gg);
    const plan_group *grp = &p->groups[g];
    int n = grp->n;
    if (n < 4) return;
    /* nodes in order of their first member (index_of: a node's index, -1 before its first
     * member, so a world group of thousands of nodes costs its size); members of a node in rank
     * order */
    int maxnode = 0;
    for (int r = 0; r < n; r++)
        if (p->devices[grp->devices[r]].node > maxnode) maxnode = p->devices[grp->devices[r]].node;
    int32_t *index_of = base_xmalloc(((size_t)maxnode + 1) * sizeof *index_of);
    memset(index_of, 0xff, ((size_t)maxnode + 1) * sizeof *index_of);
    int32_t *count = base_xcalloc((size_t)n, sizeof *count);
    int nn = 0;
    gg->node_of = base_xcalloc((size_t)n, sizeof *gg->node_of);
    gg->local_of = base_xcalloc((size_t)n, sizeof *gg->local_of);
    for (int r = 0; r < n; r++) {
        int node = p->devices[grp->devices[r]].node;
        if (index_of[node] < 0) index_of[node] = nn++;
        int j = index_of[node];
        gg->node_of[r] = j;
        gg->local_of[r] = count[j]++;
    }
    int k = count[0], even = nn > 1 && k > 1;
    for (int j = 1; j < nn && even; j++) even = count[j] == k;
    if (even) {
        gg->hier = true;
        gg->per_node = k;
        gg->grid = base_xcalloc((size_t)n, sizeof *gg->grid);
        for (int r = 0; r < n; r++) gg->grid[gg->node_of[r] * k + gg->local_of[r]] = r;
    }
    free(index_of);
    free(count);
}

void sim_group_grid_free(sim_group_grid *gg)
{
    free(gg->grid), free(gg->node_of), free(gg->local_of);
    memset(gg, 0, sizeof *gg);
}

void sim_coll_auto_run(const sim_coll_call *c)
{
    group_rt *gr = &sim_replay_state->gr[c->g];
    int n = sim_replay_state->p->groups[c->g].n, kind = c->kind, rank = c->rank;
    double bytes = c->bytes;
    int hier = gr->gg.hier && (kind == PLAN_ALL_REDUCE || kind == PLAN_REDUCE_SCATTER || kind == PLAN_ALL_GATHER);
    if (!hier) {
        sim_coll_ring_run(c);
        return;
    }
    /* hierarchical (NCCL across nodes): a ring inside each node over NVLink, and rings of
     * the members with the same local rank across nodes, each on its own NIC.
     * all-reduce: local reduce-scatter, cross all-reduce of 1/k, local all-gather;
     * reduce-scatter: local then cross; all-gather: cross then local. */
    int k = gr->gg.per_node, nn = n / k, node = gr->gg.node_of[rank], loc = gr->gg.local_of[rank];
    coll_phase local = {0, bytes, gr->gg.grid + node * k, k, loc, 1};
    coll_phase cross = {0, bytes / k, gr->gg.grid + loc, nn, node, k};
    if (kind != PLAN_ALL_GATHER) {
        local.kind = PLAN_REDUCE_SCATTER;
        sim_ring_phase(c, 0, &local);
    }
    cross.kind = kind;
    sim_ring_phase(c, 1, &cross);
    if (kind != PLAN_REDUCE_SCATTER) {
        local.kind = PLAN_ALL_GATHER;
        sim_ring_phase(c, 2, &local);
    }
}

/* Folds when every ring it runs has hops of one kind: the node rings and the cross-node rings of a
 * hierarchical group (which runs the flat ring only for kinds that do not fold anyway), else the
 * flat ring. */
bool sim_coll_auto_foldable(const plan_set *p, int g, const char **why)
{
    const plan_group *grp = &p->groups[g];
    sim_group_grid gg;
    sim_group_grid_init(p, g, &gg);
    if (!gg.hier) {
        sim_group_grid_free(&gg);
        return sim_coll_ring_foldable(p, g, why);
    }
    int k = gg.per_node, nn = grp->n / k, ok = 1;
    for (int j = 0; j < nn && ok; j++) ok = sim_ring_uniform(p, grp, gg.grid + j * k, k, 1);
    for (int l = 0; l < k && ok; l++) ok = sim_ring_uniform(p, grp, gg.grid + l, nn, k);
    sim_group_grid_free(&gg);
    *why = "rings that mix NVLink and NIC hops";
    return ok;
}
