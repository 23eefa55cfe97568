/* coll_ring.c — `--coll ring`: one flat ring over the group's members in rank order, every member
 * streaming its ring volume to its neighbour in one flow, and the streaming ring phase the other
 * algorithms run their rings with (sim_ring_phase).
 *
 * The closed form (formulas.md, "Collectives"; docs/simulator.md, "The replay"): over n members
 * with a buffer of `bytes` per device, latency α and bandwidth β per hop,
 *
 *   kind                        flow per member                        latency steps
 *   all-reduce                  2(n-1)/n · bytes to the next member    2(n-1)
 *   reduce-scatter, all-gather  (n-1)/n · bytes                        n-1
 *   all-to-all                  bytes/n to every other member at once  1
 *   broadcast, reduce           bytes along the chain 0 -> 1 -> ... -> n-1   n-1
 *
 * The flows carry one latency and each member then waits (steps - 1) of its hop's route latency,
 * so an uncontended ring takes steps·α + flow/β, and the slowest hop sets a ring's pace. */
#include "sim_internal.h"

#include <simgrid/actor.h>
#include <simgrid/comm.h>
#include <simgrid/host.h>
#include <simgrid/mailbox.h>

#include <stdlib.h>

void sim_ring_phase(const sim_coll_call *call, int ph, const coll_phase *c)
{
    stream_ctx *sc = call->sc;
    int g = call->g, skey = call->skey, slot = call->slot;
    int d = sc->dev;
    dev_rt *dv = &sim_replay_state->dv[d];
    const plan_group *grp = &sim_replay_state->p->groups[g];
    int n = c->n;
    if (n <= 1) return;
    int all = c->kind == PLAN_ALL_TO_ALL;
    int chain = c->kind == PLAN_BROADCAST || c->kind == PLAN_REDUCE;
    /* per-link volume and latency steps of a ring (formulas.md, "Collectives") */
    double factor = c->kind == PLAN_ALL_REDUCE ? 2.0 * (n - 1) / n : chain ? 1.0 : (double)(n - 1) / n;
    int steps = c->kind == PLAN_ALL_REDUCE ? 2 * (n - 1) : all ? 1 : n - 1;
    int sends = !(chain && c->pos == n - 1), recvs = !(chain && c->pos == 0);
    int me = c->sub[c->pos * c->stride];
    int next = c->sub[((c->pos + 1) % n) * c->stride];
    if (sim_replay_state->gr[g].spanning) {
        /* folded (fold.c): the member's flow goes out over its own links toward its successor
         * and comes back in over its own links, standing for its outgoing flow and, by symmetry,
         * its predecessor's incoming one; only rings of all-reduce, reduce-scatter, all-gather */
        int succ = grp->devices[next];
        sg_host_t lh = dv->loop[sim_replay_state->p->devices[succ].node == sim_replay_state->p->devices[d].node ? 0 : 1];
        double vol = factor * c->bytes;
        sg_host_sendto(sg_host_self(), lh, (double)sim_wire_bytes(vol));
        dv->bytes_sent += vol;
        sim_replay_state->activities++;
        if (steps > 1) sg_actor_sleep_for((steps - 1) * sim_hop_alpha(d, slot, ph, succ));
        return;
    }
    sg_mailbox_t in_mb = sim_coll_mailbox(g, skey, ph, me);
    sg_mailbox_t out_mb = all ? NULL : sim_coll_mailbox(g, skey, ph, next);
    sg_comm_t comms[2 * MAX_BATCH];
    int nc = 0;
    if (all) {
        /* everyone at once */
        double chunk = c->bytes / n;
        for (int j = 1; j < n; j++) {
            if (nc + 2 > 2 * MAX_BATCH) {
                sg_comm_wait_all(comms, (size_t)nc);
                nc = 0;
            }
            int to = c->sub[((c->pos + j) % n) * c->stride];
            comms[nc++] = sg_mailbox_put_async(sim_coll_mailbox(g, skey, ph, to), &sim_replay_state->dummy, sim_wire_bytes(chunk));
            comms[nc++] = sg_mailbox_get_async(in_mb, &sc->slot[0]);
            dv->bytes_sent += chunk;
            sim_replay_state->activities++;
        }
    } else {
        double vol = factor * c->bytes;
        if (sends) {
            comms[nc++] = sg_mailbox_put_async(out_mb, &sim_replay_state->dummy, sim_wire_bytes(vol));
            dv->bytes_sent += vol;
            sim_replay_state->activities++;
        }
        if (recvs) comms[nc++] = sg_mailbox_get_async(in_mb, &sc->slot[0]);
    }
    sg_comm_wait_all(comms, (size_t)nc);
    if (steps > 1) {
        /* the flows carried one latency; a ring pays one per step */
        sg_actor_sleep_for((steps - 1) * sim_hop_alpha(d, slot, ph, grp->devices[next]));
    }
}

/* The whole group as one ring in rank order. */
void sim_coll_ring_run(const sim_coll_call *c)
{
    group_rt *gr = &sim_replay_state->gr[c->g];
    coll_phase ring = {c->kind, c->bytes, gr->ring, sim_replay_state->p->groups[c->g].n, c->rank, 1};
    sim_ring_phase(c, FLAT_PHASE, &ring);
}

/* Folds when the flat ring's hops are all of one kind. */
bool sim_coll_ring_foldable(const plan_set *p, int g, const char **why)
{
    const plan_group *grp = &p->groups[g];
    int32_t *ring = base_xcalloc((size_t)grp->n + 1, sizeof *ring);
    for (int r = 0; r < grp->n; r++) ring[r] = r;
    bool ok = sim_ring_uniform(p, grp, ring, grp->n, 1);
    free(ring);
    *why = "rings that mix NVLink and NIC hops";
    return ok;
}
