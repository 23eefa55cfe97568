/* coll_ring_steps.c — `--coll ring-steps`: the textbook flat ring, in lock-step phases.
 *
 * The closed form: over n members with a buffer of `bytes` per device, every member sends bytes/n
 * to its neighbour in each of 2(n-1) phases (all-reduce) or n-1 phases (reduce-scatter,
 * all-gather), and each phase carries its own latency: 2(n-1)·(α + bytes/(n·β)) for an
 * all-reduce, the ring's volume and latency steps (coll_ring.c) paid phase by phase, so that the
 * slowest member of every phase holds the next one up. All-to-all runs n-1 pairwise phases (phase
 * s exchanges bytes/n with the members s + 1 positions away in each direction); broadcast and
 * reduce keep the streaming chain of coll_ring.c. */
#include "sim_internal.h"

#include <simgrid/comm.h>
#include <simgrid/host.h>
#include <simgrid/mailbox.h>

/* The phase `ph` of a collective as lock-step phases of bytes/n. */
static void lock_step_phase(const sim_coll_call *call, int ph, const coll_phase *c)
{
    stream_ctx *sc = call->sc;
    int g = call->g, skey = call->skey;
    int d = sc->dev;
    dev_rt *dv = &sim_replay_state->dv[d];
    const plan_group *grp = &sim_replay_state->p->groups[g];
    int n = c->n;
    if (n <= 1) return;
    int all = c->kind == PLAN_ALL_TO_ALL;
    int steps = c->kind == PLAN_ALL_REDUCE ? 2 * (n - 1) : n - 1;
    int me = c->sub[c->pos * c->stride];
    int next = c->sub[((c->pos + 1) % n) * c->stride];
    if (sim_replay_state->gr[g].spanning) {
        /* folded (fold.c): each phase's flow goes out over the member's own links toward its
         * successor and back in over them (coll_ring.c says why that stands for the ring) */
        int succ = grp->devices[next];
        sg_host_t lh = dv->loop[sim_replay_state->p->devices[succ].node == sim_replay_state->p->devices[d].node ? 0 : 1];
        double vol = c->bytes / n;
        for (int step = 0; step < steps; step++) {
            sg_host_sendto(sg_host_self(), lh, (double)sim_wire_bytes(vol));
            dv->bytes_sent += vol;
            sim_replay_state->activities++;
        }
        return;
    }
    sg_mailbox_t in_mb = sim_coll_mailbox(g, skey, ph, me);
    sg_mailbox_t out_mb = all ? NULL : sim_coll_mailbox(g, skey, ph, next);
    for (int step = 0; step < steps; step++) {
        sg_comm_t comms[2];
        int nc = 0;
        double vol = c->bytes / n;
        if (all) {
            /* step s exchanges with positions +- (s + 1) */
            int to = c->sub[((c->pos + step + 1) % n) * c->stride];
            comms[nc++] = sg_mailbox_put_async(sim_coll_mailbox(g, skey, ph, to), &sim_replay_state->dummy, sim_wire_bytes(vol));
            comms[nc++] = sg_mailbox_get_async(in_mb, &sc->slot[0]);
        } else {
            comms[nc++] = sg_mailbox_put_async(out_mb, &sim_replay_state->dummy, sim_wire_bytes(vol));
            comms[nc++] = sg_mailbox_get_async(in_mb, &sc->slot[0]);
        }
        dv->bytes_sent += vol;
        sim_replay_state->activities++;
        sg_comm_wait_all(comms, (size_t)nc);
    }
}

void sim_coll_ring_steps_run(const sim_coll_call *c)
{
    group_rt *gr = &sim_replay_state->gr[c->g];
    coll_phase ring = {c->kind, c->bytes, gr->ring, sim_replay_state->p->groups[c->g].n, c->rank, 1};
    if (c->kind == PLAN_BROADCAST || c->kind == PLAN_REDUCE) sim_ring_phase(c, FLAT_PHASE, &ring);
    else lock_step_phase(c, FLAT_PHASE, &ring);
}

/* Folds as the flat ring does: when its hops are all of one kind. */
bool sim_coll_ring_steps_foldable(const plan_set *p, int g, const char **why)
{
    return sim_coll_ring_foldable(p, g, why);
}
