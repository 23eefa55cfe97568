/* fold.c — which devices the replay may leave out: data-parallel replicas that do exactly what
 * another replica does, shifted by a constant device offset.
 *
 * A large step is mostly copies: GPT-3 on 1,024 GPUs runs 16 data-parallel replicas of one
 * 64-GPU pipeline. Replica k is replica 0 shifted by k x shift when every device d + k x shift
 * shares d's instruction list, its p2p peers are d's shifted, and each of its groups is either
 * d's group shifted (tensor-parallel groups, pipeline pairs: inside a replica) or d's very group
 * (the data-parallel groups, and world groups such as the gradient norm's: across replicas).
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

static void no_fold(sim_fold *f, int ndev, const char *why)
{
    f->replicas = 1;
    f->shift = 0;
    snprintf(f->reason, sizeof f->reason, "%s", why);
    for (int d = 0; d < ndev; d++) f->rep[d] = d, f->index[d] = 0;
}

/* Group ids by member list, to find the group that is another shifted. */
typedef struct gindex {
    int32_t *slot;
    size_t mask;
    const plan_set *p;
} gindex;

static uint64_t hash_members(const int32_t *m, int n, int32_t shift)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++) h = (h ^ (uint64_t)(uint32_t)(m[i] + shift)) * 1099511628211ull;
    return h;
}

static void gindex_build(gindex *ix, const plan_set *p)
{
    size_t cap = 16;
    while (cap < 2 * (size_t)p->ngroups + 2) cap <<= 1;
    ix->slot = base_xmalloc(cap * sizeof *ix->slot);
    memset(ix->slot, 0xff, cap * sizeof *ix->slot);
    ix->mask = cap - 1;
    ix->p = p;
    for (int g = 0; g < p->ngroups; g++) {
        size_t h = hash_members(p->groups[g].devices, p->groups[g].n, 0) & ix->mask;
        while (ix->slot[h] >= 0) h = (h + 1) & ix->mask;
        ix->slot[h] = g;
    }
}

/* The group whose members are g's plus shift, in the same order; -1 when none. */
static int gindex_shifted(const gindex *ix, int g, int32_t shift)
{
    const plan_group *a = &ix->p->groups[g];
    for (size_t h = hash_members(a->devices, a->n, shift) & ix->mask;; h = (h + 1) & ix->mask) {
        int k = ix->slot[h];
        if (k < 0) return -1;
        const plan_group *b = &ix->p->groups[k];
        if (b->n != a->n) continue;
        int same = 1;
        for (int i = 0; i < a->n && same; i++) same = b->devices[i] == a->devices[i] + shift;
        if (same) return k;
    }
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

/* Tries one shift; 0 when the plan folds with it (f filled), else -1 with f->reason. */
static int try_shift(const plan_set *p, const sim_options *o, const gindex *ix, int32_t shift, sim_fold *f)
{
    int nd = p->ndevices;
    uint8_t *linked = base_xcalloc((size_t)nd + 1, 1);
    int32_t *shifted = base_xmalloc(((size_t)p->ngroups + 1) * sizeof *shifted);
    for (int g = 0; g < p->ngroups; g++) shifted[g] = -2; /* not computed yet */
    int rc = 0;
    for (int d = 0; d + shift < nd; d++) {
        const plan_device *a = &p->devices[d], *b = &p->devices[d + shift];
        if (a->list != b->list || b->peer_offset != a->peer_offset + shift) continue;
        int ok = 1;
        int ns = p->lists[a->list].ngroup_slots;
        for (int s = 0; s < ns && ok; s++) {
            int ga = a->group_slots[s], gb = b->group_slots[s];
            if (ga == gb) continue;
            if (shifted[ga] == -2) shifted[ga] = gindex_shifted(ix, ga, shift);
            ok = shifted[ga] == gb;
        }
        linked[d] = (uint8_t)ok;
    }
    /* replica index = position in its chain d, d + shift, ... */
    int R = 0;
    for (int d = 0; d < nd; d++) {
        f->index[d] = d >= shift && linked[d - shift] ? f->index[d - shift] + 1 : 0;
        f->rep[d] = f->index[d] ? f->rep[d - shift] : d;
        if (f->index[d] + 1 > R) R = f->index[d] + 1;
    }
    if (R < 2) {
        snprintf(f->reason, sizeof f->reason, "no device shifted by %d does what another does", shift);
        rc = -1;
    }
    for (int d = 0; d < nd && !rc; d++) /* every chain R long: its head's last copy ends it */
        if (f->index[d] == 0 && (d + (int64_t)(R - 1) * shift >= nd || f->index[d + (R - 1) * shift] != R - 1)) {
            snprintf(f->reason, sizeof f->reason, "replicas (shift %d) differ in length: device %d has fewer than %d "
                     "copies", shift, d, R);
            rc = -1;
        }
    /* groups: inside one replica, or whole chains with symmetric collectives */
    for (int g = 0; g < p->ngroups && !rc; g++) {
        const plan_group *grp = &p->groups[g];
        f->spanning[g] = 0;
        f->nsim[g] = 0;
        f->first_sim[g] = -1;
        int idx0 = grp->n ? f->index[grp->devices[0]] : 0, span = 0;
        for (int m = 0; m < grp->n; m++) {
            int dev = grp->devices[m];
            span |= f->index[dev] != idx0;
            if (f->index[dev] == 0) {
                f->nsim[g]++;
                if (f->first_sim[g] < 0) f->first_sim[g] = dev;
            }
        }
        if (!span) continue;
        f->spanning[g] = 1;
        /* whole chains: each member's head has R members in the group */
        int32_t *cnt = base_xcalloc((size_t)nd + 1, sizeof *cnt);
        for (int m = 0; m < grp->n; m++) cnt[f->rep[grp->devices[m]]]++;
        for (int m = 0; m < grp->n && !rc; m++)
            if (cnt[f->rep[grp->devices[m]]] != R) {
                snprintf(f->reason, sizeof f->reason, "group %d (%s) spans replicas but not all copies of device %d",
                         g, grp->name ? grp->name : "?", f->rep[grp->devices[m]]);
                rc = -1;
            }
        free(cnt);
        /* the hop kinds of the group's collectives, as the algorithm runs them */
        const char *why = "";
        if (!rc && !sim_coll_algos[o->coll].foldable(p, g, &why)) {
            snprintf(f->reason, sizeof f->reason, "group %d (%s) spans replicas with %s", g, grp->name ? grp->name : "?",
                     why);
            rc = -1;
        }
    }
    /* what simulated devices do: p2p inside replica 0, only symmetric collectives on spanning groups */
    for (int d = 0; d < nd && !rc; d++) {
        if (f->index[d] != 0) continue;
        const plan_list *L = plan_dev_list(p, d);
        for (int i = 0; i < L->n && !rc; i++) {
            const plan_instr *in = &L->ins[i];
            if (in->op == PLAN_SEND || in->op == PLAN_RECV) {
                int peer = plan_dev_peer(p, d, in);
                if (peer >= 0 && peer < nd && f->index[peer] != 0) {
                    snprintf(f->reason, sizeof f->reason, "device %d exchanges p2p with device %d of another replica",
                             d, peer);
                    rc = -1;
                }
            } else if (in->op == PLAN_COLL && f->spanning[plan_dev_group(p, d, in)] &&
                       in->coll != PLAN_ALL_REDUCE && in->coll != PLAN_REDUCE_SCATTER && in->coll != PLAN_ALL_GATHER) {
                snprintf(f->reason, sizeof f->reason, "%s spans replicas (only all-reduce, reduce-scatter and "
                         "all-gather fold)", plan_coll_name((plan_coll)in->coll));
                rc = -1;
            }
        }
    }
    /* shared links: NICs serve one replica; the fabric does not block */
    if (!rc) {
        int nnodes = 0;
        for (int d = 0; d < nd; d++)
            if (p->devices[d].node + 1 > nnodes) nnodes = p->devices[d].node + 1;
        if (nnodes > 1) {
            const sim_links *l = &o->links;
            int nleaves = (nnodes + l->nodes_per_leaf - 1) / l->nodes_per_leaf;
            if (nleaves > 1 && l->oversubscription > 1) {
                snprintf(f->reason, sizeof f->reason, "the fabric is oversubscribed (%g): replicas contend on it",
                         l->oversubscription);
                rc = -1;
            }
            /* the NIC of device d is (node, its index among the node's devices / gpus_per_nic):
             * a NIC's devices come one after another in device order within their node */
            int32_t *local = base_xcalloc((size_t)nnodes + 1, sizeof *local);
            int32_t *nic_idx = base_xmalloc(((size_t)nd + 1) * sizeof *nic_idx);
            int32_t *last_dev = base_xmalloc(((size_t)nnodes + 1) * sizeof *last_dev);
            for (int k = 0; k < nnodes; k++) last_dev[k] = -1;
            for (int d = 0; d < nd && !rc; d++) {
                int node = p->devices[d].node;
                int nic = local[node]++ / l->gpus_per_nic;
                int prev = last_dev[node];
                if (prev >= 0 && nic_idx[prev] == nic && f->index[prev] != f->index[d]) {
                    snprintf(f->reason, sizeof f->reason, "devices %d and %d of two replicas share a NIC "
                             "(gpus_per_nic %d)", prev, d, l->gpus_per_nic);
                    rc = -1;
                }
                nic_idx[d] = nic;
                last_dev[node] = d;
            }
            free(local), free(nic_idx), free(last_dev);
        }
    }
    if (!rc) {
        f->replicas = R;
        f->shift = shift;
        f->reason[0] = 0;
    }
    free(linked);
    free(shifted);
    return rc;
}

int sim_fold_plan(const plan_set *p, const sim_options *o, sim_fold *f)
{
    int nd = p->ndevices;
    memset(f, 0, sizeof *f);
    f->rep = base_xcalloc((size_t)nd + 1, sizeof *f->rep);
    f->index = base_xcalloc((size_t)nd + 1, sizeof *f->index);
    f->spanning = base_xcalloc((size_t)p->ngroups + 1, 1);
    f->nsim = base_xcalloc((size_t)p->ngroups + 1, sizeof *f->nsim);
    f->first_sim = base_xcalloc((size_t)p->ngroups + 1, sizeof *f->first_sim);
    if (!o->fold) {
        no_fold(f, nd, "folding is off (--no-fold)");
    } else if (o->platform) {
        no_fold(f, nd, "a user's platform: its routes are unknown");
    } else {
        /* candidate shifts: spacings of evenly spaced groups whose members share one list */
        int32_t *cand = base_xcalloc((size_t)p->ngroups + 1, sizeof *cand);
        int nc = 0;
        for (int g = 0; g < p->ngroups; g++) {
            const plan_group *grp = &p->groups[g];
            if (grp->n < 2) continue;
            int32_t s = grp->devices[1] - grp->devices[0];
            int ok = s > 0;
            for (int m = 1; m < grp->n && ok; m++)
                ok = grp->devices[m] - grp->devices[m - 1] == s &&
                     p->devices[grp->devices[m]].list == p->devices[grp->devices[0]].list;
            int dup = 0;
            for (int k = 0; k < nc && !dup; k++) dup = cand[k] == s;
            if (ok && !dup) cand[nc++] = s;
        }
        gindex ix;
        gindex_build(&ix, p);
        sim_fold best = {0}, cur = *f;
        best.replicas = 1;
        char reason[sizeof f->reason] = "no data-parallel replicas (no group of evenly spaced devices sharing a list)";
        /* the shift giving the most replicas wins (ties: the smaller shift) */
        for (int k = 0; k < nc; k++) {
            if (try_shift(p, o, &ix, cand[k], &cur) == 0) {
                if (cur.replicas > best.replicas || (cur.replicas == best.replicas && cur.shift < best.shift)) {
                    best.replicas = cur.replicas;
                    best.shift = cur.shift;
                }
            } else if (best.replicas == 1) {
                snprintf(reason, sizeof reason, "%s", cur.reason);
            }
        }
        if (best.replicas > 1) try_shift(p, o, &ix, best.shift, f); /* refill the tables for the winner */
        else no_fold(f, nd, reason);
        free(ix.slot);
        free(cand);
    }
    if (f->replicas == 1) {
        for (int g = 0; g < p->ngroups; g++) {
            f->spanning[g] = 0;
            f->nsim[g] = p->groups[g].n;
            f->first_sim[g] = p->groups[g].n ? p->groups[g].devices[0] : -1;
        }
    }
    f->nsimulated = 0;
    for (int d = 0; d < nd; d++) f->nsimulated += f->index[d] == 0;
    return 0;
}
