/* host.c — the replay's host model: when each device's host thread has issued an instruction
 * (SIM_LAUNCH_HOST), and what a communication call costs the per-list model (SIM_LAUNCH_LIST).
 *
 * Each device's host issues the whole launch order, `launch` per kernel entry and communication
 * call, and runs ahead of the GPU except at its synchronisation points. Between two such points
 * its issue times are a running sum fixed before the run (replay.c, prepare_host), so no actor
 * plays the host: a stream waits for the host to reach the instruction's segment (a per-device
 * counter the streams advance when the synchronisation's instructions are done), then sleeps
 * until the issue time. Where the host may block at all is plan_host_blocks' answer (plan.h),
 * asked before the run. */
#include "sim_internal.h"

#include <simgrid/actor.h>
#include <simgrid/cond.h>
#include <simgrid/engine.h>
#include <simgrid/mutex.h>

/* SIM_LAUNCH_LIST: a communication call is a kernel launch too: the CPU spends the launch overhead
 * issuing it, of which launch_overlap is hidden behind GPU work it issued earlier (as for kernel
 * lists). Not with unit costs or free communication, whose closed forms know no launches. */
void sim_host_comm_launch(void)
{
    const sim_costs *c = &sim_replay_state->o->costs;
    if (c->unit || c->nocomm || c->launch_overhead <= 0 || c->launch_model != SIM_LAUNCH_LIST) return;
    double t = c->launch_overhead * (1 - (c->launch_overlap > 0 ? c->launch_overlap : 0));
    if (t > 0) sg_actor_sleep_for(t);
}

/* SIM_LAUNCH_HOST: the stream may run instruction i only once the host has issued it: wait for
 * the host to reach i's segment (it may be blocked at a synchronisation), then until its issue
 * time. */
static void host_issue_wait(dev_rt *dv, const list_rt *li, int i)
{
    int sg = li->seg[i];
    if (sg >= dv->seg_known) {
        if (!dv->mutex) dv->mutex = sg_mutex_init(), dv->cond = sg_cond_init();
        double t0 = simgrid_get_clock();
        sg_mutex_lock(dv->mutex);
        dv->nwaiting++;
        while (sg >= dv->seg_known) sg_cond_wait(dv->cond, dv->mutex);
        dv->nwaiting--;
        sg_mutex_unlock(dv->mutex);
        dv->host_wait_t += simgrid_get_clock() - t0;
    }
    double t = dv->seg_base[sg] + li->hrel[i], now = simgrid_get_clock();
    if (t > now) {
        dv->host_wait_t += t - now;
        sg_actor_sleep_until(t);
    }
}

/* SIM_LAUNCH_HOST: after an instruction finished, the host may come back from its pending
 * synchronisation: when every stream has done what was launched up to the synchronisation point,
 * the next segment begins now, or when the host finishes issuing the current one if later. */
static void host_sync_check(dev_rt *dv, const list_rt *li, int nstreams)
{
    bool moved = false;
    while (dv->seg_known < li->nseg) {
        int sg = dv->seg_known - 1;
        const int32_t *need = li->seg_need + (size_t)sg * (size_t)nstreams;
        for (int s = 0; s < nstreams; s++)
            if (dv->done[s] < need[s]) goto out;
        double now = simgrid_get_clock(), issued = dv->seg_base[sg] + li->seg_len[sg];
        dv->seg_base[sg + 1] = issued > now ? issued : now;
        dv->seg_known++;
        moved = true;
    }
out:
    if (moved && dv->nwaiting > 0) {
        sg_mutex_lock(dv->mutex);
        sg_cond_notify_all(dv->cond);
        sg_mutex_unlock(dv->mutex);
    }
}

void sim_host_issue(dev_rt *dv, const list_rt *li, const plan_instr *in, int i)
{
    if (li->seg && (in->op == PLAN_COMPUTE || in->op == PLAN_COLL ||
                    ((in->op == PLAN_SEND || in->op == PLAN_RECV) && li->run[i] > 0)))
        host_issue_wait(dv, li, i);
}

void sim_host_done(dev_rt *dv, const list_rt *li, int nstreams)
{
    if (li->seg && dv->seg_known < li->nseg) host_sync_check(dv, li, nstreams);
}
