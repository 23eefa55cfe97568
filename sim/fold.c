/* fold.c — which devices the replay may leave out: data-parallel replicas that do exactly what
 * another replica does, shifted by a constant device offset.
 *
 * A large step is mostly copies: GPT-3 on 1,024 GPUs runs 16 data-parallel replicas of one
 * 64-GPU pipeline. Replica k is replica 0 shifted by k x shift when every device d + k x shift
 * shares d's instruction list, its p2p peers are d's shifted, and each of its groups is either
 * d's group shifted (tensor-parallel groups, pipeline pairs: inside a replica) or d's very group
 * (the data-parallel groups, and world groups such as the gradient norm's: across replicas).
 * The proof that a replica is such a copy is plan/'s (plan_fold_find, shared with the static
 * check); this file adds what the simulator's timing needs on top of it.
 * Replica 0 is then simulated alone; a collective across replicas runs its algorithm as if every
 * member were there (same ring volumes, latency steps and barrier), each simulated member sending
 * its flow of a phase out over its own links toward its ring successor and back in over its own
 * links (coll_ring.c, "loop" routes; platform.c): in the full run the member's up-links carry its
 * outgoing flow and its down-links the incoming one of its predecessor, which by symmetry is the
 * same flow shifted. So the folded run gives the same times as the full one (to rounding) when
 * every link a replica uses is its own or non-blocking; fold_plan checks exactly that and falls
 * back to the full run, saying why, when it does not hold:
 *  - a generated platform (a user's platform has unknown routes);
 *  - replicas as above, at least two, all of the same length;
 *  - every group that spans replicas holds whole replica chains (each member's every copy) and
 *    carries only all-reduce, reduce-scatter and all-gather (all-to-all, broadcast and reduce are
 *    not symmetric rings), and each ring of its algorithm (flat ring, or the node rings and
 *    cross-node rings of the hierarchical one) has hops of one kind: all inside nodes or all
 *    across nodes, so that one loop route stands for every hop;
 *  - p2p stays inside replicas;
 *  - no NIC is shared by GPUs of two replicas (gpus_per_nic), and the fabric does not block (one
 *    leaf, or oversubscription 1): the links replicas share are then never a bottleneck. */
#include "sim_internal.h"

#include <stdlib.h>
#include <string.h>

void sim_fold_free(sim_fold *f)
{
    free(f->rep), free(f->index), free(f->spanning), free(f->nsim), free(f->first_sim);
    memset(f, 0, sizeof *f);
}

/* Are all hops of the ring over sub[0], sub[stride], ... (k members) of one kind? */
int sim_ring_uniform(const plan_set *p, const plan_group *grp, const int32_t *sub, int k, int stride)
{
    if (k <= 1) return 1;
    int kind = -1;
    for (int i = 0; i < k; i++) {
        int a = grp->devices[sub[i * stride]], b = grp->devices[sub[((i + 1) % k) * stride]];
        int same = p->devices[a].node == p->devices[b].node;
        if (kind < 0) kind = same;
        else if (kind != same) return 0;
    }
    return 1;
}

/* A group across replicas: the hop kinds of its collectives, as the algorithm runs them. */
static bool group_ok(void *ctx, const plan_set *p, int g, char *reason, size_t n)
{
    const sim_options *o = ctx;
    const char *why = "";
    if (sim_coll_algos[o->coll].foldable(p, g, &why)) return true;
    snprintf(reason, n, "group %d (%s) spans replicas with %s", g, p->groups[g].name ? p->groups[g].name : "?", why);
    return false;
}

/* Shared links: NICs serve one replica; the fabric does not block. */
static bool layout_ok(void *ctx, const plan_set *p, const plan_fold *f, char *reason, size_t n)
{
    const sim_options *o = ctx;
    int nd = p->ndevices, nnodes = 0;
    for (int d = 0; d < nd; d++)
        if (p->devices[d].node + 1 > nnodes) nnodes = p->devices[d].node + 1;
    if (nnodes <= 1) return true;
    const sim_links *l = &o->links;
    int nleaves = (nnodes + l->nodes_per_leaf - 1) / l->nodes_per_leaf;
    bool ok = true;
    if (nleaves > 1 && l->oversubscription > 1) {
        snprintf(reason, n, "the fabric is oversubscribed (%g): replicas contend on it", l->oversubscription);
        ok = false;
    }
    /* the NIC of device d is (node, its index among the node's devices / gpus_per_nic):
     * a NIC's devices come one after another in device order within their node */
    int32_t *local = base_xcalloc((size_t)nnodes + 1, sizeof *local);
    int32_t *nic_idx = base_xmalloc(((size_t)nd + 1) * sizeof *nic_idx);
    int32_t *last_dev = base_xmalloc(((size_t)nnodes + 1) * sizeof *last_dev);
    for (int k = 0; k < nnodes; k++) last_dev[k] = -1;
    for (int d = 0; d < nd && ok; d++) {
        int node = p->devices[d].node;
        int nic = local[node]++ / l->gpus_per_nic;
        int prev = last_dev[node];
        if (prev >= 0 && nic_idx[prev] == nic && f->index[prev] != f->index[d]) {
            snprintf(reason, n, "devices %d and %d of two replicas share a NIC (gpus_per_nic %d)", prev, d,
                     l->gpus_per_nic);
            ok = false;
        }
        nic_idx[d] = nic;
        last_dev[node] = d;
    }
    free(local), free(nic_idx), free(last_dev);
    return ok;
}

int sim_fold_plan(const plan_set *p, const sim_options *o, sim_fold *f)
{
    plan_fold pf;
    if (!o->fold) {
        plan_fold_none(&pf, p, "folding is off (--no-fold)");
    } else if (o->platform) {
        plan_fold_none(&pf, p, "a user's platform: its routes are unknown");
    } else {
        /* the ring algorithms fold only all-reduce, reduce-scatter and all-gather (all-to-all,
         * broadcast and reduce are not symmetric rings) */
        plan_fold_rules r = {.group_ok = group_ok, .layout_ok = layout_ok, .ctx = (void *)o, .ring_colls_only = true};
        plan_fold_find(p, &r, &pf);
    }
    memset(f, 0, sizeof *f);
    f->replicas = pf.replicas;
    f->shift = pf.shift;
    f->nsimulated = pf.nsimulated;
    f->rep = pf.rep, f->index = pf.index, f->spanning = pf.spanning, f->nsim = pf.nsim, f->first_sim = pf.first_sim;
    snprintf(f->reason, sizeof f->reason, "%s", pf.reason);
    return 0;
}
