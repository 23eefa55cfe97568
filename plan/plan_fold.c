/* plan_fold.c — the replica proof (plan.h, "replicas"): which devices are data-parallel copies of
 * others, doing exactly what another device does shifted by a constant device offset, so that a
 * consumer may run one representative per copy class. The static check runs replica 0 alone;
 * the simulator does too, under its own further conditions on links and collective algorithms,
 * which it adds through plan_fold_rules. One rule, here, says when a replica is a relabelled copy.
 *
 * Replica k is replica 0 shifted by k x shift when every device d + k x shift shares d's
 * instruction list, its p2p peers are d's shifted (peer_offset + shift), and each of its groups is
 * either d's group shifted (tensor-parallel groups, pipeline pairs: inside a replica) or d's very
 * group (data-parallel groups, world groups such as the gradient norm's: across replicas). Then,
 * when every chain d, d + shift, ... has the same length R >= 2, every group that spans replicas
 * holds whole chains and p2p stays inside replicas, the relabelling maps the step onto itself:
 * every instruction of a copy starts and ends when its original does, and a collective across
 * replicas completes when its members of replica 0 have all arrived. */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

void plan_fold_free(plan_fold *f)
{
    free(f->rep), free(f->index), free(f->spanning), free(f->nsim), free(f->first_sim);
    memset(f, 0, sizeof *f);
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

/* What a replica-0 device's instructions can break, per list, in launch order of first
 * occurrence: each distinct p2p peer (the list's own numbering), and each group slot with a
 * collective other than all-reduce, reduce-scatter and all-gather. The first instruction of a
 * device that breaks the rules is the first entry that does, so the walk is per entry, not per
 * instruction. */
typedef struct reach {
    int32_t at;   /* launch index of the first occurrence */
    int32_t what; /* peer, or slot */
    bool p2p;
} reach;
typedef struct list_reach {
    reach *r;
    int n;
} list_reach;

static void reach_build(const plan_set *p, const plan_fold_rules *rules, list_reach *lr)
{
    for (int l = 0; l < p->nlists; l++) {
        const plan_list *L = &p->lists[l];
        BASE_VEC(reach) v = {0};
        uint8_t *slot_seen = base_xcalloc((size_t)L->ngroup_slots + 1, 1);
        for (int i = 0; i < L->n; i++) {
            const plan_instr *in = &L->ins[i];
            if (in->op == PLAN_SEND || in->op == PLAN_RECV) {
                bool dup = false; /* lists have few distinct peers */
                for (size_t k = 0; k < v.n && !dup; k++) dup = v.v[k].p2p && v.v[k].what == in->peer;
                if (!dup) BASE_VEC_PUSH(v, ((reach){i, in->peer, true}));
            } else if (rules && rules->ring_colls_only && in->op == PLAN_COLL && in->coll != PLAN_ALL_REDUCE &&
                       in->coll != PLAN_REDUCE_SCATTER && in->coll != PLAN_ALL_GATHER && !slot_seen[in->group]) {
                slot_seen[in->group] = 1;
                BASE_VEC_PUSH(v, ((reach){i, in->group, false}));
            }
        }
        free(slot_seen); /* entries come in launch order: the walk is in it */
        lr[l].r = v.v;
        lr[l].n = (int)v.n;
    }
}

static void no_fold(plan_fold *f, int ndev, const char *why)
{
    f->replicas = 1;
    f->shift = 0;
    snprintf(f->reason, sizeof f->reason, "%s", why);
    for (int d = 0; d < ndev; d++) f->rep[d] = d, f->index[d] = 0;
}

/* Tries one shift; 0 when the plan folds with it (f filled), else -1 with f->reason. */
static int try_shift(const plan_set *p, const plan_fold_rules *r, const gindex *ix, const list_reach *lr,
                     int32_t shift, plan_fold *f)
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
    /* groups: inside one replica, or whole chains (and what the consumer asks of them) */
    int32_t *cnt = rc ? NULL : base_xcalloc((size_t)nd + 1, sizeof *cnt);
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
        for (int m = 0; m < grp->n; m++) cnt[f->rep[grp->devices[m]]]++;
        for (int m = 0; m < grp->n && !rc; m++)
            if (cnt[f->rep[grp->devices[m]]] != R) {
                snprintf(f->reason, sizeof f->reason, "group %d (%s) spans replicas but not all copies of device %d",
                         g, grp->name ? grp->name : "?", f->rep[grp->devices[m]]);
                rc = -1;
            }
        for (int m = 0; m < grp->n; m++) cnt[f->rep[grp->devices[m]]] = 0;
        if (!rc && r && r->group_ok && !r->group_ok(r->ctx, p, g, f->reason, sizeof f->reason)) rc = -1;
    }
    free(cnt);
    /* what replica 0 does: p2p inside it; on spanning groups, the collectives the rules allow */
    for (int d = 0; d < nd && !rc; d++) {
        if (f->index[d] != 0) continue;
        const list_reach *lrd = &lr[p->devices[d].list];
        for (int k = 0; k < lrd->n && !rc; k++) {
            const plan_instr *in = &plan_dev_list(p, d)->ins[lrd->r[k].at];
            if (in->op == PLAN_SEND || in->op == PLAN_RECV) {
                int peer = plan_dev_peer(p, d, in);
                if (peer >= 0 && peer < nd && f->index[peer] != 0) {
                    snprintf(f->reason, sizeof f->reason, "device %d exchanges p2p with device %d of another replica",
                             d, peer);
                    rc = -1;
                }
            } else if (r && r->ring_colls_only && in->op == PLAN_COLL && f->spanning[plan_dev_group(p, d, in)] &&
                       in->coll != PLAN_ALL_REDUCE && in->coll != PLAN_REDUCE_SCATTER && in->coll != PLAN_ALL_GATHER) {
                snprintf(f->reason, sizeof f->reason, "%s spans replicas (only all-reduce, reduce-scatter and "
                         "all-gather fold)", plan_coll_name((plan_coll)in->coll));
                rc = -1;
            }
        }
    }
    if (!rc) {
        f->replicas = R;
        f->shift = shift;
        f->reason[0] = 0;
        if (r && r->layout_ok && !r->layout_ok(r->ctx, p, f, f->reason, sizeof f->reason)) {
            f->replicas = 1;
            rc = -1;
        }
    }
    free(linked);
    free(shifted);
    return rc;
}

static void fold_alloc(plan_fold *f, const plan_set *p)
{
    memset(f, 0, sizeof *f);
    int nd = p->ndevices;
    f->rep = base_xcalloc((size_t)nd + 1, sizeof *f->rep);
    f->index = base_xcalloc((size_t)nd + 1, sizeof *f->index);
    f->spanning = base_xcalloc((size_t)p->ngroups + 1, 1);
    f->nsim = base_xcalloc((size_t)p->ngroups + 1, sizeof *f->nsim);
    f->first_sim = base_xcalloc((size_t)p->ngroups + 1, sizeof *f->first_sim);
}

void plan_fold_none(plan_fold *f, const plan_set *p, const char *why)
{
    fold_alloc(f, p);
    no_fold(f, p->ndevices, why);
    plan_fold_finish(f, p);
}

void plan_fold_finish(plan_fold *f, const plan_set *p)
{
    if (f->replicas == 1) {
        for (int g = 0; g < p->ngroups; g++) {
            f->spanning[g] = 0;
            f->nsim[g] = p->groups[g].n;
            f->first_sim[g] = p->groups[g].n ? p->groups[g].devices[0] : -1;
        }
    }
    f->nsimulated = 0;
    for (int d = 0; d < p->ndevices; d++) f->nsimulated += f->index[d] == 0;
}

void plan_fold_find(const plan_set *p, const plan_fold_rules *r, plan_fold *f)
{
    int nd = p->ndevices;
    fold_alloc(f, p);
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
    list_reach *lr = base_xcalloc((size_t)p->nlists + 1, sizeof *lr);
    reach_build(p, r, lr);
    plan_fold cur = *f;
    int best_r = 1, best_shift = 0;
    char reason[sizeof f->reason] = "no data-parallel replicas (no group of evenly spaced devices sharing a list)";
    /* the shift giving the most replicas wins (ties: the smaller shift) */
    for (int k = 0; k < nc; k++) {
        if (try_shift(p, r, &ix, lr, cand[k], &cur) == 0) {
            if (cur.replicas > best_r || (cur.replicas == best_r && cur.shift < best_shift)) {
                best_r = cur.replicas;
                best_shift = cur.shift;
            }
        } else if (best_r == 1) {
            snprintf(reason, sizeof reason, "%s", cur.reason);
        }
    }
    if (best_r > 1) try_shift(p, r, &ix, lr, best_shift, f); /* refill the tables for the winner */
    else no_fold(f, nd, reason);
    for (int l = 0; l < p->nlists; l++) free(lr[l].r);
    free(lr);
    free(ix.slot);
    free(cand);
    plan_fold_finish(f, p);
}
