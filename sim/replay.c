/* replay.c — the SimGrid replay of a plan: one actor per (device, stream) runs the stream's
 * instructions in launch order, on a platform from platform.c. This file holds the replay's state,
 * the streams' loop, the preparation before the run and the entry point; the instructions' parts
 * are in their own files:
 *
 *  - compute: an execution on the device's host (speed 1e9, so the amount is nanoseconds) lasting
 *    the cost model's time; two streams computing at once share the device (max-min);
 *  - send/recv (p2p.c): mailbox puts and gets keyed by (source, destination, tag), posted together
 *    for a sendrecv group; SimGrid's rendezvous gives the plan's zero-buffering semantics (a
 *    transfer starts when both sides are posted);
 *  - collectives (coll.c, and coll_<name>.c per algorithm): members meet per (group, sequence
 *    number), then exchange flows with their ring neighbours (or everyone, for all-to-all) through
 *    per-(group, stream, rank) mailboxes, so that collectives contend with each other and with p2p
 *    on the links;
 *  - record/wait: per-device progress counters and a condition variable;
 *  - alloc/free: per-device memory by category in simulated time;
 *  - the host (host.c; SIM_LAUNCH_HOST): each device's host thread issues the whole launch order,
 *    `launch` per kernel entry and communication call, and runs ahead of the GPU except at its
 *    synchronisation points. Between two such points its issue times are a running sum fixed
 *    before the run (prepare_host), so no actor plays the host: a stream waits for the host to
 *    reach the instruction's segment, then sleeps until the issue time. A compute's GPU time
 *    starts once enough of its kernels are issued never to starve (sim_kernel_list_host);
 *  - the trace (replay_trace.c): one event per compute, collective and p2p run.
 *  - the times (sim_options.times_fn, piper-sim --emit-chakra): when each instruction was issued
 *    to its stream and when it finished, handed over once the run is done.
 *
 * Where the time goes is integrated per device as the simulation runs: compute while a compute
 * instruction runs, exposed communication while a transfer moves data (from the moment both sides
 * are posted, or all members arrived) and nothing computes; the rest of the step is idle. Waiting
 * for a peer is idle time, not communication, so that idle matches formulas.md's "makespan - busy"
 * when communication is free. */
#include "sim_internal.h"

#include <simgrid/actor.h>
#include <simgrid/cond.h>
#include <simgrid/engine.h>
#include <simgrid/exec.h>
#include <simgrid/host.h>
#include <simgrid/mutex.h>
#include <xbt/config.h>
#include <xbt/log.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define SIM_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIM_UNDER_ASAN 1
#endif
#endif

/* ---------------------------------------------------------------- state */

sim_state *sim_replay_state; /* one simulation per process (SimGrid's engine is a singleton) */

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------- accounting */

/* the progress line on a terminal (base_progress): simulated time and activities so far */
static base_progress replay_progress;

static void progress_tick(void)
{
    if (!sim_replay_state->o->progress || (++sim_replay_state->ticks & 0xffff)) return;
    char what[96];
    snprintf(what, sizeof what, "simulated %.6g s of the step, %lld activities", simgrid_get_clock(),
             (long long)sim_replay_state->activities);
    base_progress_update(&replay_progress, 0, 0, what);
}

/* Integrates the device's time up to now, then changes its counts of running computes and
 * in-flight transfers. */
void sim_acct(dev_rt *dv, int dcompute, int dcomm)
{
    double now = simgrid_get_clock();
    double dt = now - dv->last_t;
    if (dt > 0) {
        if (dv->ncompute > 0) dv->compute_t += dt;
        else if (dv->ncomm > 0) dv->exposed_t += dt;
        if (dv->ncomm > 0) dv->comm_t += dt;
    }
    dv->last_t = now;
    dv->ncompute += dcompute;
    int was = dv->ncomm;
    dv->ncomm += dcomm;
    /* compute slowdown while communication kernels run: a background load on the device's host,
     * capped at comm_slowdown x its speed, takes that share of it from compute (max-min) */
    double slow = sim_replay_state->o->costs.comm_slowdown;
    if (slow > 0 && dv->host) {
        if (was == 0 && dv->ncomm > 0 && !dv->interference) {
            dv->interference = sg_actor_exec_init(1e30);
            sg_exec_set_host(dv->interference, dv->host);
            sg_exec_set_bound(dv->interference, slow * sg_host_get_speed(dv->host));
            sg_exec_start(dv->interference);
        } else if (was > 0 && dv->ncomm == 0 && dv->interference) {
            sg_exec_cancel(dv->interference);
            dv->interference = NULL;
        }
    }
    progress_tick();
}

static void mem_change(dev_rt *dv, const plan_buffer *b, int sign)
{
    double bytes = (double)b->bytes * sign;
    dv->cur[b->mem] += bytes;
    dv->total += bytes;
    if (sign > 0) {
        if (dv->cur[b->mem] > dv->peak_by_mem[b->mem]) dv->peak_by_mem[b->mem] = dv->cur[b->mem];
        if (dv->total > dv->peak) {
            dv->peak = dv->total;
            memcpy(dv->at_peak, dv->cur, sizeof dv->at_peak);
        }
    }
}

/* What a transfer of `bytes` puts on the wire: transfers reach net_eff of a link's bandwidth
 * (NCCL's bus bandwidth falls short of the line rate), so they carry bytes / net_eff. */
long sim_wire_bytes(double bytes)
{
    double eff = sim_replay_state->o->costs.net_eff > 0 ? sim_replay_state->o->costs.net_eff : 1;
    return (long)(bytes / eff);
}

/* ---------------------------------------------------------------- waiting */

void sim_waitlist_sleep(sim_waitlist *w)
{
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 8;
        w->a = base_xrealloc(w->a, (size_t)w->cap * sizeof *w->a);
    }
    w->a[w->n++] = sg_actor_self();
    sg_actor_suspend(sg_actor_self());
}

void sim_waitlist_wake(sim_waitlist *w)
{
    int n = w->n;
    if (n == 0) return;
    /* a copy: the resumed may wait again before the last one is resumed */
    sg_actor_t local[16], *a = n <= 16 ? local : base_xmalloc((size_t)n * sizeof *a);
    memcpy(a, w->a, (size_t)n * sizeof *a);
    w->n = 0;
    for (int k = 0; k < n; k++) sg_actor_resume(a[k]);
    if (a != local) free(a);
}

/* ---------------------------------------------------------------- instructions */

static void do_wait(stream_ctx *sc, int i)
{
    const plan_set *p = sim_replay_state->p;
    int d = sc->dev;
    dev_rt *dv = &sim_replay_state->dv[d];
    const plan_list *L = plan_dev_list(p, d);
    const list_rt *li = &sim_replay_state->li[p->devices[d].list];
    int r = li->wait[i];
    int rs = L->ins[r].stream;
    if (!dv->mutex) dv->mutex = sg_mutex_init(), dv->cond = sg_cond_init();
    sg_mutex_lock(dv->mutex);
    dv->nwaiting++;
    while (dv->done[rs] <= li->spos[r]) sg_cond_wait(dv->cond, dv->mutex);
    dv->nwaiting--;
    sg_mutex_unlock(dv->mutex);
}

/* Is the device's host thread modelled (SIM_LAUNCH_HOST with a launch cost)? Not with unit costs,
 * whose closed forms know no launches; with launch 0 the host is never behind (and never waits:
 * an infinitely fast host needs no synchronisation points either). */
static bool host_model(const sim_costs *c)
{
    return !c->unit && c->launch_model == SIM_LAUNCH_HOST &&
           (sim_launch_seconds(c, PLAN_PASS_F) > 0 || sim_launch_seconds(c, PLAN_PASS_B) > 0);
}

static void stream_main(int argc, char **argv)
{
    (void)argc, (void)argv;
    stream_ctx *sc = sg_actor_self_get_data();
    const plan_set *p = sim_replay_state->p;
    int d = sc->dev, s = sc->s;
    dev_rt *dv = &sim_replay_state->dv[d];
    const plan_list *L = plan_dev_list(p, d);
    const list_rt *li = &sim_replay_state->li[p->devices[d].list];
    const int32_t *order = li->sidx + li->soff[s];
    int len = li->soff[s + 1] - li->soff[s];
    for (int pos = 0; pos < len;) {
        int i = order[pos];
        const plan_instr *in = &L->ins[i];
        int adv = 1;
        sim_host_issue(dv, li, in, i);
        double t0 = simgrid_get_clock(); /* the trace shows the GPU's work, from when it was issued */
        sc->moving_at = t0;
        switch (in->op) {
        case PLAN_COMPUTE: {
            double t = li->dur[i];
            if (t > 0) {
                sim_acct(dv, 1, 0);
                /* work = seconds x the host's speed (1e9 on generated platforms), so a user's
                 * platform with other speeds still runs the cost model's durations */
                sg_actor_execute(t * sg_host_get_speed(sg_host_self()));
                sim_acct(dv, -1, 0);
                sim_replay_state->activities++;
                sim_replay_state->executions++;
            }
            break;
        }
        case PLAN_SEND:
        case PLAN_RECV:
            adv = li->run[i] > 1 ? li->run[i] : 1;
            sim_host_comm_launch();
            sim_do_p2p(sc, order, pos, adv);
            break;
        case PLAN_COLL:
            sim_host_comm_launch();
            sim_do_coll(sc, i);
            break;
        case PLAN_WAIT: do_wait(sc, i); break;
        case PLAN_ALLOC:
        case PLAN_FREE:
            mem_change(dv, &L->bufs[in->buf], in->op == PLAN_ALLOC ? 1 : -1);
            if (sim_replay_state->trace) sim_trace_memory(d, dv->total);
            break;
        default: break;
        }
        if (sim_replay_state->t_start) {
            double t1 = simgrid_get_clock();
            for (int k = 0; k < adv; k++) {
                sim_replay_state->t_start[d][order[pos + k]] = t0;
                sim_replay_state->t_end[d][order[pos + k]] = t1;
            }
        }
        if (sim_replay_state->trace && (in->op == PLAN_COMPUTE || in->op == PLAN_SEND || in->op == PLAN_RECV || in->op == PLAN_COLL))
            sim_trace_event(d, s, L, order + pos, adv, t0, sc->moving_at);
        pos += adv;
        dv->done[s] = pos;
        dv->ninstr += adv;
        sim_host_done(dv, li, L->nstreams);
        if (in->op == PLAN_RECORD && dv->nwaiting > 0) {
            sg_mutex_lock(dv->mutex);
            sg_cond_notify_all(dv->cond);
            sg_mutex_unlock(dv->mutex);
        }
    }
    double now = simgrid_get_clock();
    if (now > dv->end) dv->end = now;
    dv->streams_left--;
}

/* ---------------------------------------------------------------- preparation */

static int stream_key(sim_state *st, const char *name)
{
    const char *n = name ? name : "";
    for (int k = 0; k < st->nskeys; k++)
        if (!strcmp(st->skeys[k], n)) return k;
    st->skeys = base_xrealloc(st->skeys, (size_t)(st->nskeys + 1) * sizeof *st->skeys);
    st->skeys[st->nskeys] = n;
    return st->nskeys++;
}

double sim_kernel_list_gemm_flops(const plan_set *p, int kl)
{
    if (kl < 0 || kl >= p->nkernel_lists) return 0;
    double f = 0;
    const plan_kernel_list *k = &p->kernel_lists[kl];
    for (int j = 0; j < k->n; j++)
        if (k->k[j].kind == PLAN_KERNEL_GEMM) f += k->k[j].flops;
    return f;
}

bool sim_pass_is_model(int pass)
{
    return pass == PLAN_PASS_F || pass == PLAN_PASS_B || pass == PLAN_PASS_BI || pass == PLAN_PASS_BW;
}

static void prepare_host(sim_state *st, const plan_list *L, list_rt *li, const double *kl_lead);

/* A list's index (plan_index: stream queues, wait targets, p2p runs, collective numbers, the
 * host's blocking points), its streams' global keys, its host clock and its compute durations. */
static int prepare_list(sim_state *st, int l, const double *kl_dur, const double *kl_lead, base_error *e)
{
    const plan_set *p = st->p;
    const plan_list *L = &p->lists[l];
    list_rt *li = &st->li[l];
    if (plan_index_build(&li->ix, p, l, e)) return -1;
    li->soff = li->ix.soff, li->sidx = li->ix.sidx, li->spos = li->ix.spos;
    li->wait = li->ix.wait, li->coll_seq = li->ix.coll_seq, li->run = li->ix.run;
    li->slot_ncoll = li->ix.slot_ncoll;
    size_t n = (size_t)L->n + 1;
    li->dur = base_xcalloc(n, sizeof *li->dur);
    li->skey = base_xcalloc((size_t)L->nstreams + 1, sizeof *li->skey);
    for (int s = 0; s < L->nstreams; s++) li->skey[s] = stream_key(st, L->streams[s]);

    if (host_model(&st->o->costs)) prepare_host(st, L, li, kl_lead);

    /* compute durations; with unit costs, plan_unit_durations' rule (a stage's pass costs its
     * unit, shared by the stage's computes of that pass and micro-batch) */
    const sim_costs *c = &st->o->costs;
    if (c->unit) plan_unit_durations(p, l, c->unit_pass, li->dur);
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        if (in->op != PLAN_COMPUTE) continue;
        double gf = sim_kernel_list_gemm_flops(p, in->kernels);
        li->hw_flops += gf;
        if (sim_pass_is_model(in->pass)) li->model_flops += gf;
        if (!c->unit) li->dur[i] = in->kernels >= 0 ? kl_dur[in->kernels] : 0;
    }
    return 0;
}

/* The host's issue clock of a list (SIM_LAUNCH_HOST): the host walks the launch order, spending
 * launch per kernel entry of a compute and per communication call (none with nocomm), and stops
 * at each synchronisation point until the device has done everything launched so far. */
static void prepare_host(sim_state *st, const plan_list *L, list_rt *li, const double *kl_lead)
{
    const plan_set *p = st->p;
    const sim_costs *c = &st->o->costs;
    size_t n = (size_t)L->n + 1, ns = (size_t)L->nstreams;
    /* the synchronisation points in effect: the blocking points (plan_index) of the kinds selected */
    unsigned kinds = (st->host_sync & SIM_SYNC_P2P ? PLAN_BLOCK_P2P : 0) |
                     (st->host_sync & SIM_SYNC_NORM ? PLAN_BLOCK_NORM : 0) |
                     (st->host_sync & SIM_SYNC_BATCH ? PLAN_BLOCK_BATCH : 0);
    li->nseg = 1;
    for (int i = 0; i < L->n; i++) li->nseg += (li->ix.block[i] & kinds) != 0;
    li->seg = base_xcalloc(n, sizeof *li->seg);
    li->hrel = base_xcalloc(n, sizeof *li->hrel);
    li->seg_len = base_xcalloc((size_t)li->nseg, sizeof *li->seg_len);
    li->seg_need = base_xcalloc((size_t)li->nseg * ns + 1, sizeof *li->seg_need);
    int32_t *cnt = base_xcalloc(ns + 1, sizeof *cnt);
    double launch = c->launch_overhead, t = 0;
    double launch_b = sim_launch_seconds(c, PLAN_PASS_B);
    int sg = 0;
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        double rel = t;
        if (in->op == PLAN_COMPUTE && in->kernels >= 0) {
            int bwd = in->pass == PLAN_PASS_B || in->pass == PLAN_PASS_BI || in->pass == PLAN_PASS_BW;
            rel = t + kl_lead[2 * in->kernels + bwd];
            t += (bwd ? launch_b : launch) * p->kernel_lists[in->kernels].n;
        } else if (in->op == PLAN_COLL || ((in->op == PLAN_SEND || in->op == PLAN_RECV) && li->run[i] > 0)) {
            if (!c->nocomm) t += launch;
            rel = t;
        }
        li->seg[i] = sg;
        li->hrel[i] = rel;
        cnt[in->stream]++;
        if (li->ix.block[i] & kinds) {
            li->seg_len[sg] = t;
            memcpy(li->seg_need + (size_t)sg * ns, cnt, ns * sizeof *cnt);
            sg++;
            t = 0;
        }
    }
    li->seg_len[sg] = t;
    free(cnt);
}

/* The group's rings: the flat one in rank order, and the hierarchical grid (fold.c). */
static void prepare_group(sim_state *st, int g)
{
    const plan_set *p = st->p;
    group_rt *gr = &st->gr[g];
    int n = p->groups[g].n;
    gr->nsim = st->fold.nsim[g];
    gr->spanning = st->fold.spanning[g];
    if (gr->nsim == 0) return; /* a folded replica's: never run */
    gr->sim_members = base_xcalloc((size_t)gr->nsim, sizeof *gr->sim_members);
    for (int m = 0, k = 0; m < n; m++)
        if (st->fold.index[p->groups[g].devices[m]] == 0) gr->sim_members[k++] = p->groups[g].devices[m];
    gr->ring = base_xcalloc((size_t)n + 1, sizeof *gr->ring);
    for (int r = 0; r < n; r++) gr->ring[r] = r;
    sim_group_grid_init(p, g, &gr->gg);
}

static int prepare(sim_state *st, base_error *e)
{
    const plan_set *p = st->p;
    /* a compute takes its kernels' GPU time G on its stream; the host model adds when it may
     * start (prepare_host), the per-list model the launches (sim_kernel_list_seconds) */
    const sim_costs *c = &st->o->costs;
    st->host_sync = c->host_sync;
    /* the host blocks only where the plan's check proves a blocking host completes the step
     * (plan_host_blocks, the static check's run with the same host): a plan that posts receives
     * ahead of the work feeding their sends, or whose host would wait at a p2p transfer for a
     * collective its peers reach only later, runs with an asynchronous host there */
    if (host_model(c) && (st->host_sync & (SIM_SYNC_P2P | SIM_SYNC_NORM | SIM_SYNC_BATCH))) {
        unsigned ok = plan_host_blocks(p, NULL), want = st->host_sync;
        if (!(ok & PLAN_BLOCK_P2P)) st->host_sync &= ~SIM_SYNC_P2P;
        if (!(ok & PLAN_BLOCK_NORM)) st->host_sync &= ~SIM_SYNC_NORM;
        if (!(ok & PLAN_BLOCK_BATCH)) st->host_sync &= ~SIM_SYNC_BATCH;
        unsigned gone = want & ~st->host_sync;
        if (gone) {
            char what[96] = "";
            if (gone & SIM_SYNC_P2P) strcat(what, ", at p2p transfers");
            if (gone & SIM_SYNC_BATCH) strcat(what, ", before micro-batches");
            if (gone & SIM_SYNC_NORM) strcat(what, ", at the gradient norm");
            snprintf(st->host_note, sizeof st->host_note, "the host does not wait%s: a host blocking there "
                     "deadlocks this plan (plan_check_host), so it posts p2p asynchronously", what + 1);
        }
    }
    double *kl_dur = base_xcalloc((size_t)p->nkernel_lists + 1, sizeof *kl_dur);
    /* kl_lead[2k], kl_lead[2k + 1]: the lead of list k at the forward's and the backward's launch */
    double *kl_lead = base_xcalloc(2 * (size_t)p->nkernel_lists + 1, sizeof *kl_lead);
    double launch_f = sim_launch_seconds(c, PLAN_PASS_F), launch_b = sim_launch_seconds(c, PLAN_PASS_B);
    for (int k = 0; k < p->nkernel_lists; k++) {
        if (c->launch_model == SIM_LAUNCH_HOST) {
            sim_kernel_list_host(c, &p->gpu, &p->kernel_lists[k], launch_f, &kl_dur[k], &kl_lead[2 * k]);
            sim_kernel_list_host(c, &p->gpu, &p->kernel_lists[k], launch_b, &kl_dur[k], &kl_lead[2 * k + 1]);
        } else {
            kl_dur[k] = sim_kernel_list_seconds(c, &p->gpu, &p->kernel_lists[k]);
        }
    }
    /* what is simulated: the folded replicas copy their simulated devices, which share their lists */
    sim_fold_plan(p, st->o, &st->fold);
    st->li = base_xcalloc((size_t)p->nlists + 1, sizeof *st->li);
    for (int d = 0; d < p->ndevices; d++)
        if (st->fold.index[d] == 0) st->li[p->devices[d].list].used = true;
    int rc = 0;
    for (int l = 0; l < p->nlists && !rc; l++)
        if (st->li[l].used) rc = prepare_list(st, l, kl_dur, kl_lead, e);
    free(kl_dur);
    free(kl_lead);
    if (rc) return rc;

    st->dv = base_xcalloc((size_t)p->ndevices + 1, sizeof *st->dv);
    st->gr = base_xcalloc((size_t)p->ngroups + 1, sizeof *st->gr);
    st->goff = base_xcalloc((size_t)p->ngroups + 1, sizeof *st->goff);
    int32_t *ninst = base_xcalloc((size_t)p->ngroups + 1, sizeof *ninst);
    for (int d = 0; d < p->ndevices; d++) {
        if (st->fold.index[d] != 0) continue; /* copies a simulated device: no state of its own */
        const plan_list *L = plan_dev_list(p, d);
        const list_rt *li = &st->li[p->devices[d].list];
        const int32_t *slots = p->devices[d].group_slots;
        dev_rt *dv = &st->dv[d];
        dv->done = base_xcalloc((size_t)L->nstreams + 1, sizeof *dv->done);
        if (li->seg) {
            dv->seg_base = base_xcalloc((size_t)li->nseg, sizeof *dv->seg_base);
            dv->seg_known = 1; /* the step begins with host and GPU idle, both at 0 */
        }
        dv->streams_left = L->nstreams;
        dv->slot_rank = base_xcalloc((size_t)L->ngroup_slots + 1, sizeof *dv->slot_rank);
        dv->slot_alpha = base_xcalloc(4 * (size_t)L->ngroup_slots + 1, sizeof *dv->slot_alpha);
        for (int s = 0; s < L->ngroup_slots; s++) {
            const plan_group *g = &p->groups[slots[s]];
            for (int ph = 0; ph < 4; ph++) dv->slot_alpha[4 * s + ph] = -1;
            dv->slot_rank[s] = -1;
            for (int m = 0; m < g->n; m++)
                if (g->devices[m] == d) dv->slot_rank[s] = m;
            /* a group's instances: the collectives of every slot naming it */
            if (st->fold.first_sim[slots[s]] == d) ninst[slots[s]] += li->slot_ncoll[s];
        }
        /* two slots name one group: its collectives are numbered across both, in launch order */
        dv->coll_seq = plan_index_device_coll_seq(&li->ix, p, d);
        for (int s = 0; s < L->ngroup_slots; s++)
            if (li->slot_ncoll[s] && dv->slot_rank[s] < 0) {
                free(ninst);
                return base_errorf(e, "device %d issues collectives on group %d (%s) but is not a member; the plan is "
                                   "invalid: run piper-compile again", d, slots[s],
                                   p->groups[slots[s]].name ? p->groups[slots[s]].name : "?");
            }
    }
    for (int g = 0; g < p->ngroups; g++) {
        st->goff[g + 1] = st->goff[g] + ninst[g];
        prepare_group(st, g);
    }
    free(ninst);
    st->inst = base_xcalloc((size_t)st->goff[p->ngroups] + 1, sizeof *st->inst);
    return 0;
}

static void state_free(sim_state *st)
{
    const plan_set *p = st->p;
    for (int l = 0; st->li && l < p->nlists; l++) {
        list_rt *li = &st->li[l];
        plan_index_free(&li->ix), free(li->dur), free(li->skey);
        free(li->seg), free(li->hrel), free(li->seg_len), free(li->seg_need);
    }
    for (int d = 0; st->dv && d < p->ndevices; d++) {
        dev_rt *dv = &st->dv[d];
        free(dv->done), free(dv->coll_seq), free(dv->slot_rank), free(dv->slot_alpha), free(dv->seg_base);
    }
    for (int g = 0; st->gr && g < p->ngroups; g++) {
        free(st->gr[g].ring);
        free(st->gr[g].sim_members);
        free(st->gr[g].waiting.a);
        free(st->gr[g].tree);
        sim_group_grid_free(&st->gr[g].gg);
    }
    for (int d = 0; st->t_start && d < p->ndevices; d++) free(st->t_start[d]), free(st->t_end[d]);
    free(st->t_start), free(st->t_end);
    sim_fold_free(&st->fold);
    free(st->li), free(st->dv), free(st->gr), free(st->goff), free(st->inst), free(st->xf), free(st->skeys);
    free(st->mb_free), free(st->cmb);
}

/* ---------------------------------------------------------------- entry point */

static int write_platform(const plan_set *p, const sim_options *o, char *path, size_t n, base_error *e)
{
    if (o->platform) { /* the user's, checked by sim_run */
        path[0] = 0;
        return 0;
    }
    base_buf xml = {0};
    uint8_t *loop = NULL;
    if (sim_replay_state->fold.replicas > 1) {
        loop = base_xcalloc((size_t)p->ndevices + 1, 1);
        for (int d = 0; d < p->ndevices; d++) loop[d] = sim_replay_state->fold.index[d] == 0;
    }
    int xrc = sim_platform_xml_loops(p, &o->links, o->costs.nocomm, loop, loop && !o->full_platform, &xml, e);
    free(loop);
    if (xrc) return -1;
    const char *tmp = getenv("TMPDIR");
    snprintf(path, n, "%s/piper-sim-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) {
        base_buf_free(&xml);
        return base_errorf(e, "cannot create a temporary platform file in %s; set TMPDIR to a writable directory",
                           tmp && *tmp ? tmp : "/tmp");
    }
    size_t off = 0;
    while (off < xml.n) {
        ssize_t w = write(fd, xml.s + off, xml.n - off);
        if (w <= 0) break;
        off += (size_t)w;
    }
    close(fd);
    int rc = 0;
    if (off < xml.n) rc = base_errorf(e, "cannot write the temporary platform file %s; free some disk space", path);
    if (!rc && o->platform_out) {
        rc = base_out_write_file(o->platform_out, "the platform file", xml.s, xml.n, e);
    }
    base_buf_free(&xml);
    if (rc) unlink(path);
    return rc;
}

int sim_replay(const plan_set *p, const sim_options *o, sim_result *r, base_error *e)
{
    memset(r, 0, sizeof *r);
    sim_state st = {.p = p, .o = o};
    st.wall0 = st.wall_last = wall_now();
    sim_replay_state = &st;
    char path[4096];
    viz_trace trace;
    int rc = prepare(&st, e);
    if (!rc) rc = write_platform(p, o, path, sizeof path, e);
    if (!rc && o->trace_path) {
        rc = viz_trace_open(&trace, o->trace_path, e);
        if (rc && path[0]) unlink(path);
    }
    if (rc) {
        state_free(&st);
        sim_replay_state = NULL;
        return rc;
    }
    if (o->trace_path) {
        st.trace = &trace;
        sim_trace_names(p);
    }
    if (o->times_fn) {
        st.t_start = base_xcalloc((size_t)p->ndevices + 1, sizeof *st.t_start);
        st.t_end = base_xcalloc((size_t)p->ndevices + 1, sizeof *st.t_end);
        for (int d = 0; d < p->ndevices; d++) {
            if (st.fold.index[d] != 0) continue; /* a folded replica takes its simulated device's */
            size_t n = (size_t)plan_dev_list(p, d)->n + 1;
            st.t_start[d] = base_xcalloc(n, sizeof **st.t_start);
            st.t_end[d] = base_xcalloc(n, sizeof **st.t_end);
        }
    }

    int argc = 1;
    char arg0[] = "piper-sim";
    char *argv[] = {arg0, NULL};
    simgrid_init(&argc, argv);
    xbt_log_control_set("root.thresh:warning");
    sg_cfg_set_string("network/model", "CM02");
    sg_cfg_set_double("network/TCP-gamma", 0);
    sg_cfg_set_boolean("network/crosstraffic", "no");
#ifdef SIM_UNDER_ASAN
    /* raw context switches confuse AddressSanitizer's stack tracking; threads do not */
    sg_cfg_set_string("contexts/factory", "thread");
#else
    sg_cfg_set_int("contexts/stack-size", 256); /* KiB: actors are shallow; thousands of them */
#endif
    if (path[0]) {
        simgrid_load_platform(path);
        unlink(path);
    } else {
        simgrid_load_platform(o->platform);
    }

    int nactors = 0;
    for (int d = 0; d < p->ndevices; d++)
        if (st.fold.index[d] == 0) nactors += plan_dev_list(p, d)->nstreams;
    stream_ctx *ctx = base_xcalloc((size_t)nactors + 1, sizeof *ctx);
    char name[64];
    int a = 0;
    for (int d = 0; d < p->ndevices; d++) {
        if (st.fold.index[d] != 0) continue; /* a folded replica: copies its simulated device */
        snprintf(name, sizeof name, "gpu%d", d);
        sg_host_t h = sg_host_by_name(name);
        st.dv[d].host = h;
        if (st.fold.replicas > 1) {
            snprintf(name, sizeof name, "gpu%d~nvl", d);
            st.dv[d].loop[0] = sg_host_by_name(name);
            snprintf(name, sizeof name, "gpu%d~nic", d);
            st.dv[d].loop[1] = sg_host_by_name(name);
        }
        const plan_list *L = plan_dev_list(p, d);
        for (int s = 0; s < L->nstreams; s++, a++) {
            ctx[a].dev = d, ctx[a].s = s;
            snprintf(name, sizeof name, "d%d.%s", d, L->streams[s] ? L->streams[s] : "?");
            sg_actor_t act = sg_actor_init(name, h);
            sg_actor_set_data(act, &ctx[a]);
            sg_actor_start(act, stream_main, 0, NULL);
        }
    }
    if (o->progress) base_progress_begin(&replay_progress, "piper-sim", "simulating");
    simgrid_run();
    if (o->progress) base_progress_end(&replay_progress);

    /* durations so large that their sum overflows stop SimGrid's clock at inf, where every
     * activity looks stuck: that is not a deadlock, and the figures would be meaningless */
    double clock = simgrid_get_clock();
    if (!isfinite(clock))
        rc = base_errorf(e, "the simulated clock overflowed (it reached %g s): the plan's costs add up to more than "
                         "a double holds; give smaller costs (--costs unit:F=1,B=2 counts in units of one forward)",
                         clock);
    for (int d = 0; d < p->ndevices && !rc; d++)
        if (st.fold.index[d] == 0 && st.dv[d].streams_left > 0)
            rc = base_errorf(e, "the simulation stopped with device %d unfinished: the plan deadlocks; the static "
                             "check (plan_check, which piper-sim runs unless --no-check) names the stuck "
                             "instructions", d);
    if (!rc) {
        r->ndevices = p->ndevices;
        r->dev = base_xcalloc((size_t)p->ndevices + 1, sizeof *r->dev);
        for (int d = 0; d < p->ndevices; d++) {
            const dev_rt *dv = &st.dv[st.fold.rep[d]]; /* a folded replica's figures are its simulated device's */
            const list_rt *li = &st.li[p->devices[d].list];
            sim_device_result *x = &r->dev[d];
            x->id = d;
            x->node = p->devices[d].node;
            x->end_seconds = dv->end;
            x->compute_seconds = dv->compute_t;
            x->exposed_comm_seconds = dv->exposed_t;
            x->comm_seconds = dv->comm_t;
            x->launch_wait_seconds = dv->host_wait_t;
            x->peak_bytes = dv->peak;
            memcpy(x->at_peak, dv->at_peak, sizeof x->at_peak);
            memcpy(x->peak_by_mem, dv->peak_by_mem, sizeof x->peak_by_mem);
            x->model_flops = li->model_flops;
            x->hw_flops = li->hw_flops;
            x->bytes_sent = dv->bytes_sent;
            x->instructions = dv->ninstr;
        }
        r->activities = st.activities;
        r->executions = st.executions;
        r->actors = nactors;
        r->folded_replicas = st.fold.replicas;
        r->simulated_devices = st.fold.nsimulated;
        snprintf(r->fold_note, sizeof r->fold_note, "%s", o->fold && st.fold.replicas == 1 ? st.fold.reason : "");
        snprintf(r->host_note, sizeof r->host_note, "%s", st.host_note);
        r->wall_seconds = wall_now() - st.wall0;
        sim_result_finish(p, r);
    }
    if (st.trace) sim_trace_finish(p);
    if (!rc && o->times_fn) {
        const double **ts = base_xcalloc((size_t)p->ndevices + 1, sizeof *ts);
        const double **te = base_xcalloc((size_t)p->ndevices + 1, sizeof *te);
        for (int d = 0; d < p->ndevices; d++) ts[d] = st.t_start[st.fold.rep[d]], te[d] = st.t_end[st.fold.rep[d]];
        rc = o->times_fn(o->times_ctx, p, ts, te, e);
        free(ts), free(te);
        if (rc) sim_result_free(r);
    }
    if (st.trace && rc) {
        viz_trace_abort(st.trace);
    } else if (st.trace) {
        base_error te;
        base_error_clear(&te);
        if (viz_trace_close(st.trace, &te)) rc = base_errorf(e, "%s", te.msg);
    }
    free(ctx);
    state_free(&st);
    sim_replay_state = NULL;
    return rc;
}
