/* coll.c — the replay's collectives, apart from their algorithms: the table of algorithms
 * (SIM_COLL_ALGOS, sim.h) and its names, the members' meeting per (group, sequence number) before
 * any flow and their leaving together after the last one's flows, and what every algorithm's flows
 * use: mailboxes per (group, stream, phase, rank) and the route latency to a peer. The flows
 * themselves are each algorithm's (coll_<name>.c). */
#include "sim_internal.h"

#include <simgrid/engine.h>

#include <simgrid/host.h>
#include <simgrid/mailbox.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the table */

const sim_coll_def sim_coll_algos[SIM_NCOLL] = {
#define SIM_COLL_ROW(id, name, run, foldable, help) [SIM_COLL_##id] = {name, run, foldable, help},
    SIM_COLL_ALGOS(SIM_COLL_ROW)
#undef SIM_COLL_ROW
};

const char *sim_coll_name(sim_coll_algo a)
{
    return (unsigned)a < SIM_NCOLL ? sim_coll_algos[a].name : sim_coll_algos[SIM_COLL_AUTO].name;
}

const char *sim_coll_help(sim_coll_algo a) { return (unsigned)a < SIM_NCOLL ? sim_coll_algos[a].help : ""; }

int sim_coll_parse(const char *name, sim_coll_algo *a, base_error *e)
{
    for (int k = 0; k < SIM_NCOLL; k++)
        if (!strcmp(name, sim_coll_algos[k].name)) {
            *a = (sim_coll_algo)k;
            return 0;
        }
    char list[256];
    size_t at = 0;
    for (int k = 0; k < SIM_NCOLL && at < sizeof list; k++)
        at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", k == 0 ? "" : k + 1 < SIM_NCOLL ? ", " : " or ",
                               sim_coll_algos[k].name);
    return base_errorf(e, "--coll %s: unknown algorithm; use %s", name, list);
}

/* ---------------------------------------------------------------- what the flows use */

static size_t cmb_hash(int g, int skey, int ph, int rank)
{
    uint64_t h = (uint64_t)(uint32_t)g * 0x9E3779B97F4A7C15ull;
    h ^= ((uint64_t)(uint32_t)rank << 8 | (uint64_t)(uint32_t)ph << 4 | (uint64_t)(uint32_t)skey) * 0xC2B2AE3D27D4EB4Full;
    return (size_t)(h ^ (h >> 31));
}

static void cmb_grow(sim_state *st)
{
    size_t ocap = st->cmb_cap;
    coll_mb_slot *old = st->cmb;
    st->cmb_cap = ocap ? 2 * ocap : 256;
    st->cmb = base_xcalloc(st->cmb_cap, sizeof *st->cmb);
    for (size_t i = 0; i < ocap; i++) {
        if (!old[i].mb) continue;
        size_t j = cmb_hash(old[i].g, old[i].skey, old[i].ph, old[i].rank) & (st->cmb_cap - 1);
        while (st->cmb[j].mb) j = (j + 1) & (st->cmb_cap - 1);
        st->cmb[j] = old[i];
    }
    free(old);
}

/* Collective flows of group g on streams named skey, phase ph, into the member of rank `rank`:
 * members meet per instance before any flow, so consecutive instances never mix. Every instance
 * of a group reuses its mailboxes, so each is named and looked up once, then kept in a table. */
sg_mailbox_t sim_coll_mailbox(int g, int skey, int ph, int rank)
{
    sim_state *st = sim_replay_state;
    if (2 * (st->cmb_used + 1) > st->cmb_cap) cmb_grow(st);
    size_t mask = st->cmb_cap - 1, j = cmb_hash(g, skey, ph, rank) & mask;
    for (; st->cmb[j].mb; j = (j + 1) & mask) {
        const coll_mb_slot *x = &st->cmb[j];
        if (x->g == g && x->skey == skey && x->ph == ph && x->rank == rank) return x->mb;
    }
    /* SimGrid's lookup may switch to other actors, which may fill the table: probe again after */
    char name[64];
    snprintf(name, sizeof name, "c%d:%d:%d:%d", g, skey, ph, rank);
    sg_mailbox_t mb = sg_mailbox_by_name(name);
    if (2 * (st->cmb_used + 1) > st->cmb_cap) cmb_grow(st);
    mask = st->cmb_cap - 1;
    for (j = cmb_hash(g, skey, ph, rank) & mask; st->cmb[j].mb; j = (j + 1) & mask) {
        const coll_mb_slot *x = &st->cmb[j];
        if (x->g == g && x->skey == skey && x->ph == ph && x->rank == rank) return x->mb;
    }
    st->cmb[j] = (coll_mb_slot){g, skey, ph, rank, mb};
    st->cmb_used++;
    return mb;
}

/* Route latency from this device to device `to` (routes exist only once the platform is sealed:
 * ask from an actor), cached per (device, group slot, phase). */
double sim_hop_alpha(int d, int slot, int phase, int to)
{
    double *c = &sim_replay_state->dv[d].slot_alpha[4 * slot + phase];
    if (*c >= 0) return *c;
    const sim_state *st = sim_replay_state;
    sg_host_t h;
    if (st->fold.index[to] != 0) {
        /* a folded device (absent from a folded platform): the loop route of the hop's kind has the
         * same links' latencies, the hop's two halves and zeros (platform.c) */
        h = st->dv[d].loop[st->p->devices[to].node == st->p->devices[d].node ? 0 : 1];
    } else {
        char name[32];
        snprintf(name, sizeof name, "gpu%d", to);
        h = sg_host_by_name(name);
    }
    *c = sg_host_get_route_latency(sg_host_self(), h);
    return *c;
}

/* ---------------------------------------------------------------- meeting */

/* Members wait for a count of the group's (arrivals, or members done). */
static void group_wait(group_rt *g, const int *counter, int target)
{
    while (*counter < target) sim_waitlist_sleep(&g->waiting);
}

static void group_notify(group_rt *g) { sim_waitlist_wake(&g->waiting); }

void sim_do_coll(stream_ctx *sc, int i)
{
    const plan_set *p = sim_replay_state->p;
    int d = sc->dev;
    dev_rt *dv = &sim_replay_state->dv[d];
    const plan_list *L = plan_dev_list(p, d);
    const list_rt *li = &sim_replay_state->li[p->devices[d].list];
    const plan_instr *in = &L->ins[i];
    int g = plan_dev_group(p, d, in);
    const plan_group *grp = &p->groups[g];
    int n = grp->n;
    if (n <= 1) return;
    int seq = dv->coll_seq ? dv->coll_seq[i] : li->coll_seq[i];
    coll_inst *ci = &sim_replay_state->inst[sim_replay_state->goff[g] + seq];
    group_rt *gr = &sim_replay_state->gr[g];
    int rank = dv->slot_rank[in->group];
    int skey = li->skey[in->stream];

    /* everyone arrives; the last one starts the clock of communication for all (folded: the
     * simulated members; the others arrive with them, by symmetry) */
    if (++ci->arrived == gr->nsim) {
        for (int m = 0; m < gr->nsim; m++) sim_acct(&sim_replay_state->dv[gr->sim_members[m]], 0, 1);
        group_notify(gr);
    } else {
        group_wait(gr, &ci->arrived, gr->nsim);
    }
    sc->moving_at = simgrid_get_clock(); /* everyone is here: from now on data moves */

    if (!sim_replay_state->o->costs.nocomm) {
        sim_coll_call call = {sc, g, skey, in->group, rank, in->coll, (double)in->bytes};
        sim_coll_algos[sim_replay_state->o->coll].run(&call);
        /* members finish together, when the last one's flows are done */
        if (++ci->finished == gr->nsim) group_notify(gr);
        else group_wait(gr, &ci->finished, gr->nsim);
    }
    sim_acct(dv, 0, -1);
}
