/* replay.c — the SimGrid replay of a plan: one actor per (device, stream) runs the stream's
 * instructions in launch order, on a platform from platform.c.
 *
 *  - compute: an execution on the device's host (speed 1e9, so the amount is nanoseconds) lasting
 *    the cost model's time; two streams computing at once share the device (max-min);
 *  - send/recv: mailbox puts and gets keyed by (source, destination, tag), posted together for a
 *    sendrecv group; SimGrid's rendezvous gives the plan's zero-buffering semantics (a transfer
 *    starts when both sides are posted);
 *  - collectives: members meet per (group, sequence number), then exchange flows with their ring
 *    neighbours (or everyone, for all-to-all) through per-(group, stream, rank) mailboxes, so that
 *    collectives contend with each other and with p2p on the links;
 *  - record/wait: per-device progress counters and a condition variable;
 *  - alloc/free: per-device memory by category in simulated time;
 *  - the host (SIM_LAUNCH_HOST): each device's host thread issues the whole launch order, `launch`
 *    per kernel entry and communication call, and runs ahead of the GPU except at its
 *    synchronisation points. Between two such points its issue times are a running sum fixed
 *    before the run (prepare_host), so no actor plays the host: a stream waits for the host to
 *    reach the instruction's segment (a per-device counter the streams advance when the
 *    synchronisation's instructions are done), then sleeps until the issue time. A compute's GPU
 *    time starts once enough of its kernels are issued never to starve (sim_kernel_list_host).
 *
 * Where the time goes is integrated per device as the simulation runs: compute while a compute
 * instruction runs, exposed communication while a transfer moves data (from the moment both sides
 * are posted, or all members arrived) and nothing computes; the rest of the step is idle. Waiting
 * for a peer is idle time, not communication, so that idle matches formulas.md's "makespan - busy"
 * when communication is free. */
#include "sim_internal.h"

#include "../viz/trace.h"

#include <simgrid/actor.h>
#include <simgrid/comm.h>
#include <simgrid/cond.h>
#include <simgrid/engine.h>
#include <simgrid/exec.h>
#include <simgrid/host.h>
#include <simgrid/mailbox.h>
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

#define NS_PER_S 1e9
#define MAX_BATCH 64 /* sendrecv groups larger than this are posted in slices of this size */

/* ---------------------------------------------------------------- state */

typedef struct list_rt {
    bool used;
    plan_index ix;               /* the list's index (plan.h); the arrays below are its own */
    const int32_t *soff, *sidx, *spos; /* stream s runs sidx[soff[s] .. soff[s+1]); spos: position in its stream */
    const int32_t *wait;         /* WAIT: launch index of its record */
    const int32_t *coll_seq;     /* COLL: sequence number on its slot */
    const int32_t *run;          /* SEND/RECV heading a sendrecv group: instructions in the group */
    const int32_t *slot_ncoll;   /* per group slot: collectives issued through it */
    double *dur;                 /* COMPUTE: seconds */
    int32_t *skey;               /* per stream: global id of the stream's name */
    double model_flops, hw_flops;
    /* the host's issue clock (host_model): instruction i belongs to segment seg[i] (segments end
     * at the host's synchronisation points) and may start hrel[i] after the segment's base, the
     * moment the host resumed issuing (computes: once the host issued enough of its kernels,
     * sim_kernel_list_host's lead; communication: once issued). Segment k's host time is
     * seg_len[k]; its synchronisation waits until stream s has done seg_need[k * nstreams + s]
     * instructions. NULL when the host is not modelled. */
    int32_t *seg;
    double *hrel;
    int nseg;
    double *seg_len;
    int32_t *seg_need;
} list_rt;

typedef struct dev_rt {
    double last_t, compute_t, exposed_t, comm_t, end;
    int ncompute, ncomm;
    double cur[PLAN_NMEM], total, peak, at_peak[PLAN_NMEM], peak_by_mem[PLAN_NMEM];
    double bytes_sent;
    int64_t ninstr;
    int32_t *done;               /* per stream: instructions completed */
    int streams_left;
    int nwaiting;
    sg_cond_t cond;
    sg_mutex_t mutex;
    int32_t *coll_seq;           /* per instruction, only when two slots name one group */
    int32_t *slot_rank;          /* per group slot: the device's rank in the group */
    sg_host_t loop[2];           /* folding: the device's NVLink and NIC loop hosts (NULL: none) */
    sg_host_t host;              /* the device's host (simulated devices) */
    sg_exec_t interference;      /* comm_slowdown: the background load while transfers run */
    double *slot_alpha;          /* per group slot and phase (4): latency to the peer it sends to (-1 unknown) */
    double *seg_base;            /* host model: per segment, when the host began issuing it */
    int seg_known;               /* segments whose base is known (the host has reached them) */
    double host_wait_t;          /* host model: time streams waited for the host to issue */
} dev_rt;

typedef struct coll_inst {
    int arrived, finished;
} coll_inst;

typedef struct group_rt {
    sg_cond_t cond;
    sg_mutex_t mutex;
    int32_t *ring;      /* 0 .. n-1: the flat ring in rank order */
    /* hierarchical collectives: the group spans several nodes with per_node members on each */
    sim_group_grid gg;
    int32_t *tree;      /* --coll tree: per rank and tree (2): parent, child, child (-1: none) */
    int tree_depth;     /* edges from a tree's root to its deepest leaf */
    int nsim;           /* members simulated (all, unless the group spans folded replicas) */
    bool spanning;      /* spans folded replicas: members send their flows over loop routes */
} group_rt;

typedef struct stream_ctx {
    int dev, s;
    void *slot[MAX_BATCH];       /* where gets store the (unused) payload pointer */
} stream_ctx;

/* p2p posts not yet matched, keyed by (src, dst, tag): when the second side posts, the transfer
 * starts, and both devices count it as communication from then on. Open addressing. */
typedef struct xfer_slot {
    int32_t src, dst, tag;
    int32_t nsend, nrecv; /* posted and unmatched; both 0 and src >= 0: a tombstone */
    uint8_t used;
} xfer_slot;

typedef struct sim_state {
    const plan_set *p;
    const sim_options *o;
    list_rt *li;
    dev_rt *dv;
    group_rt *gr;
    int32_t *goff;               /* ngroups + 1: group g's instances are goff[g] .. goff[g+1] */
    coll_inst *inst;
    xfer_slot *xf;
    size_t xcap, xused;
    int nskeys;
    const char **skeys;
    int64_t activities;
    viz_trace *trace;            /* --trace: events as they finish, or NULL */
    sim_fold fold;               /* which devices run (fold.c) */
    unsigned host_sync;          /* the host's synchronisation points in effect (SIM_SYNC_*) */
    char host_note[200];         /* why one was left out */
    int64_t ticks;
    double wall0, wall_last;
    char dummy;
} sim_state;

static sim_state *S; /* one simulation per process (SimGrid's engine is a singleton) */

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------- accounting */

static void progress_tick(void)
{
    if (!S->o->progress || (++S->ticks & 0xffff)) return;
    double w = wall_now();
    if (w - S->wall_last < 1.0) return;
    S->wall_last = w;
    fprintf(stderr, "\rpiper-sim: simulated %.6g s of the step, %lld activities, %.0f s wall", simgrid_get_clock(),
            (long long)S->activities, w - S->wall0);
    fflush(stderr);
}

/* Integrates the device's time up to now, then changes its counts of running computes and
 * in-flight transfers. */
static void acct(dev_rt *dv, int dcompute, int dcomm)
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
    double slow = S->o->costs.comm_slowdown;
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

/* ---------------------------------------------------------------- p2p matching */

static uint64_t xhash(int32_t a, int32_t b, int32_t c)
{
    uint64_t h = (uint64_t)(uint32_t)a * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t)(uint32_t)b * 0xC2B2AE3D27D4EB4Full + (h << 6) + (h >> 2);
    h ^= (uint64_t)(uint32_t)c * 0x165667B19E3779F9ull + (h << 6) + (h >> 2);
    return h ^ (h >> 29);
}

/* Rehashes without the tombstones, doubling only when live entries fill a quarter or more. */
static void xf_grow(void)
{
    size_t ocap = S->xcap, live = 0;
    xfer_slot *old = S->xf;
    for (size_t i = 0; i < ocap; i++) live += old[i].used && (old[i].nsend || old[i].nrecv);
    S->xcap = !ocap ? 1024 : 4 * (live + 1) > ocap ? 2 * ocap : ocap;
    S->xf = base_xcalloc(S->xcap, sizeof *S->xf);
    S->xused = 0;
    for (size_t i = 0; i < ocap; i++) {
        const xfer_slot *o = &old[i];
        if (!o->used || (o->nsend == 0 && o->nrecv == 0)) continue;
        size_t j = xhash(o->src, o->dst, o->tag) & (S->xcap - 1);
        while (S->xf[j].used) j = (j + 1) & (S->xcap - 1);
        S->xf[j] = *o;
        S->xused++;
    }
    free(old);
}

/* Records a post; returns 1 when it matches the other side's (the transfer starts now). */
static int xf_post(int32_t src, int32_t dst, int32_t tag, int send)
{
    if (2 * (S->xused + 1) > S->xcap) xf_grow();
    size_t mask = S->xcap - 1, j = xhash(src, dst, tag) & mask;
    xfer_slot *free_slot = NULL;
    for (; S->xf[j].used; j = (j + 1) & mask) {
        xfer_slot *x = &S->xf[j];
        if (x->src == src && x->dst == dst && x->tag == tag) {
            int32_t *other = send ? &x->nrecv : &x->nsend;
            if (*other > 0) {
                (*other)--;
                return 1;
            }
            if (send) x->nsend++;
            else x->nrecv++;
            return 0;
        }
        /* a tombstone (both counts 0): another key may take it once the probe shows that key absent */
        if (!free_slot && x->nsend == 0 && x->nrecv == 0) free_slot = x;
    }
    xfer_slot *x = free_slot ? free_slot : &S->xf[j];
    if (!free_slot) S->xused++;
    *x = (xfer_slot){src, dst, tag, send ? 1 : 0, send ? 0 : 1, 1};
    return 0;
}

/* ---------------------------------------------------------------- instructions */

/* What a transfer of `bytes` puts on the wire: transfers reach net_eff of a link's bandwidth
 * (NCCL's bus bandwidth falls short of the line rate), so they carry bytes / net_eff. */
static long wire_bytes(double bytes)
{
    double eff = S->o->costs.net_eff > 0 ? S->o->costs.net_eff : 1;
    return (long)(bytes / eff);
}

static sg_mailbox_t p2p_mailbox(int src, int dst, int tag)
{
    char name[64];
    snprintf(name, sizeof name, "p%d>%d#%d", src, dst, tag);
    return sg_mailbox_by_name(name);
}

/* Collective flows of group g on streams named skey, phase ph, into the member of rank `rank`:
 * members meet per instance before any flow, so consecutive instances never mix. */
static sg_mailbox_t coll_mailbox(int g, int skey, int ph, int rank)
{
    char name[64];
    snprintf(name, sizeof name, "c%d:%d:%d:%d", g, skey, ph, rank);
    return sg_mailbox_by_name(name);
}

static void wait_all_counted(dev_rt *dv, sg_comm_t *comms, int n, const int *counted)
{
    /* counted[k]: comm k was started by a matched post (it counts as communication until done) */
    if (n <= 0 || n > MAX_BATCH) return; /* callers post 1..MAX_BATCH at a time */
    int left = n;
    int cnt[MAX_BATCH];
    memcpy(cnt, counted, (size_t)n * sizeof *cnt);
    while (left > 0) {
        ssize_t k = sg_comm_wait_any(comms, (size_t)left);
        if (k < 0) break;
        if (cnt[k]) acct(dv, 0, -1);
        comms[k] = comms[left - 1];
        cnt[k] = cnt[left - 1];
        left--;
    }
}

/* A run of `n` p2p instructions starting at stream position `pos`, posted together. */
static void do_p2p(stream_ctx *sc, const int32_t *order, int pos, int n)
{
    const plan_set *p = S->p;
    int d = sc->dev;
    dev_rt *dv = &S->dv[d];
    const plan_list *L = plan_dev_list(p, d);
    for (int base = 0; base < n; base += MAX_BATCH) {
        int m = n - base < MAX_BATCH ? n - base : MAX_BATCH;
        sg_comm_t comms[MAX_BATCH];
        int counted[MAX_BATCH];
        for (int k = 0; k < m; k++) {
            const plan_instr *in = &L->ins[order[pos + base + k]];
            int peer = plan_dev_peer(p, d, in), send = in->op == PLAN_SEND;
            int src = send ? d : peer, dst = send ? peer : d;
            sg_mailbox_t mb = p2p_mailbox(src, dst, in->tag);
            long size = S->o->costs.nocomm ? 0 : wire_bytes((double)in->bytes);
            if (send) {
                comms[k] = sg_mailbox_put_async(mb, &S->dummy, size);
                dv->bytes_sent += (double)in->bytes;
                S->activities++;
            } else {
                comms[k] = sg_mailbox_get_async(mb, &sc->slot[k]);
            }
            counted[k] = 1;
            if (xf_post(src, dst, in->tag, send)) {
                acct(&S->dv[src], 0, 1);
                acct(&S->dv[dst], 0, 1);
            }
        }
        wait_all_counted(dv, comms, m, counted);
    }
}

/* Route latency from this device to device `to` (routes exist only once the platform is sealed:
 * ask from an actor), cached per (device, group slot, phase). */
#define FLAT_PHASE 3 /* phases 0-2: a hierarchical collective's local, cross and local rings */
static double hop_alpha(int d, int slot, int phase, int to)
{
    double *c = &S->dv[d].slot_alpha[4 * slot + phase];
    if (*c >= 0) return *c;
    char name[32];
    snprintf(name, sizeof name, "gpu%d", to);
    *c = sg_host_get_route_latency(sg_host_self(), sg_host_by_name(name));
    return *c;
}

static void group_wait(group_rt *g, const int *counter, int target)
{
    if (!g->mutex) g->mutex = sg_mutex_init(), g->cond = sg_cond_init();
    sg_mutex_lock(g->mutex);
    while (*counter < target) sg_cond_wait(g->cond, g->mutex);
    sg_mutex_unlock(g->mutex);
}

static void group_notify(group_rt *g)
{
    if (!g->mutex) return; /* nobody ever waited on this group */
    sg_mutex_lock(g->mutex);
    sg_cond_notify_all(g->cond);
    sg_mutex_unlock(g->mutex);
}

/* One phase of a collective: a ring (or all-pairs exchange) over a subset of the group's members.
 * `sub` lists the members in ring order (ranks in the group), `pos` is this member's position. */
typedef struct coll_phase {
    int kind;          /* plan_coll of the phase */
    double bytes;      /* the phase's buffer */
    const int32_t *sub;
    int n, pos, stride; /* sub[k * stride] is the k-th member of the ring */
} coll_phase;

static void run_phase(stream_ctx *sc, int g, int skey, int slot, int ph, const coll_phase *c)
{
    int d = sc->dev;
    dev_rt *dv = &S->dv[d];
    const plan_group *grp = &S->p->groups[g];
    int n = c->n;
    if (n <= 1) return;
    int all = c->kind == PLAN_ALL_TO_ALL;
    int chain = c->kind == PLAN_BROADCAST || c->kind == PLAN_REDUCE;
    /* per-link volume and latency steps of a ring (formulas.md, "Collectives") */
    double factor = c->kind == PLAN_ALL_REDUCE ? 2.0 * (n - 1) / n : chain ? 1.0 : (double)(n - 1) / n;
    int steps = c->kind == PLAN_ALL_REDUCE ? 2 * (n - 1) : all ? 1 : n - 1;
    int sends = !(chain && c->pos == n - 1), recvs = !(chain && c->pos == 0);
    int lock_step = S->o->coll == SIM_COLL_RING_STEPS && !chain;
    int phases = lock_step ? (all ? n - 1 : steps) : 1;
    int me = c->sub[c->pos * c->stride];
    int next = c->sub[((c->pos + 1) % n) * c->stride];
    if (S->gr[g].spanning) {
        /* folded (fold.c): the member's flow goes out over its own links toward its successor
         * and comes back in over its own links, standing for its outgoing flow and, by symmetry,
         * its predecessor's incoming one; only rings of all-reduce, reduce-scatter, all-gather */
        int succ = grp->devices[next];
        sg_host_t lh = dv->loop[S->p->devices[succ].node == S->p->devices[d].node ? 0 : 1];
        double vol = lock_step ? c->bytes / n : factor * c->bytes;
        for (int step = 0; step < phases; step++) {
            sg_host_sendto(sg_host_self(), lh, (double)wire_bytes(vol));
            dv->bytes_sent += vol;
            S->activities++;
        }
        if (!lock_step && steps > 1) sg_actor_sleep_for((steps - 1) * hop_alpha(d, slot, ph, succ));
        return;
    }
    sg_mailbox_t in_mb = coll_mailbox(g, skey, ph, me);
    sg_mailbox_t out_mb = all ? NULL : coll_mailbox(g, skey, ph, next);
    for (int step = 0; step < phases; step++) {
        sg_comm_t comms[2 * MAX_BATCH];
        int nc = 0;
        if (all) {
            /* lock-step: step s exchanges with positions +- (s + 1); otherwise everyone at once */
            int lo = lock_step ? step + 1 : 1, hi = lock_step ? step + 2 : n;
            double chunk = c->bytes / n;
            for (int j = lo; j < hi; j++) {
                if (nc + 2 > 2 * MAX_BATCH) {
                    sg_comm_wait_all(comms, (size_t)nc);
                    nc = 0;
                }
                int to = c->sub[((c->pos + j) % n) * c->stride];
                comms[nc++] = sg_mailbox_put_async(coll_mailbox(g, skey, ph, to), &S->dummy, wire_bytes(chunk));
                comms[nc++] = sg_mailbox_get_async(in_mb, &sc->slot[0]);
                dv->bytes_sent += chunk;
                S->activities++;
            }
        } else {
            double vol = lock_step ? c->bytes / n : factor * c->bytes;
            if (sends) {
                comms[nc++] = sg_mailbox_put_async(out_mb, &S->dummy, wire_bytes(vol));
                dv->bytes_sent += vol;
                S->activities++;
            }
            if (recvs) comms[nc++] = sg_mailbox_get_async(in_mb, &sc->slot[0]);
        }
        sg_comm_wait_all(comms, (size_t)nc);
    }
    if (!lock_step && steps > 1) {
        /* the flows carried one latency; a ring pays one per step */
        double a = hop_alpha(d, slot, ph, grp->devices[all ? c->sub[((c->pos + 1) % n) * c->stride] : next]);
        sg_actor_sleep_for((steps - 1) * a);
    }
}

/* NCCL's double binary tree over n ranks. Tree 0 is the in-order binary tree over positions
 * 1..n (rank r at position r + 1): a position's parent is the "rounder" of its neighbours (more
 * trailing zero bits), so odd positions are leaves and even ones inner nodes. Tree 1 mirrors it
 * (position n - r) when n is even and shifts it by one (position (r + 1) mod n + 1) when n is odd,
 * so that a rank is an inner node in at most one of the two trees and no link carries more than
 * two of the four half-buffer streams of a tree in each direction. */
static int tree_rank(int t, int n, int pos) { return t == 0 ? pos - 1 : n % 2 == 0 ? n - pos : (pos - 2 + n) % n; }

static void prepare_tree(group_rt *gr, int n)
{
    gr->tree = base_xmalloc(6 * (size_t)n * sizeof *gr->tree);
    for (int k = 0; k < 6 * n; k++) gr->tree[k] = -1;
    for (int t = 0; t < 2; t++)
        for (int x = 2; x <= n; x += 2) {
            /* children: x - j/2, and the roundest position in (x, x + j) that exists */
            int j = x & -x, kids[2] = {x - j / 2, -1}, nc = 0;
            for (int step = j / 2; step >= 1 && kids[1] < 0; step /= 2)
                if (x + step <= n) kids[1] = x + step;
            int px = tree_rank(t, n, x);
            for (int c = 0; c < 2; c++) {
                if (kids[c] < 1) continue;
                int pc = tree_rank(t, n, kids[c]);
                gr->tree[6 * px + 3 * t + 1 + nc++] = pc;
                gr->tree[6 * pc + 3 * t] = px;
            }
        }
    gr->tree_depth = 0; /* the same in both trees: positions' chains to the root */
    for (int r = 0; r < n; r++) {
        int dd = 0;
        for (int q = r; gr->tree[6 * q] >= 0; q = gr->tree[6 * q]) dd++;
        if (dd > gr->tree_depth) gr->tree_depth = dd;
    }
}

/* A tree all-reduce (NCCL's "tree" algorithm): each tree carries half of the buffer, reduced up
 * to its root and broadcast back down. NCCL pipelines both directions in small chunks, so all of
 * a tree's streams run at once: each member sends its half to its parent and to each child, and
 * receives from each; the flows carry one latency and the member then waits the remaining
 * 2 * depth - 1 hop latencies of the round trip. On a non-blocking switch the busiest links (an
 * inner node with a parent and two children in one tree, a leaf in the other) carry 4 halves, so
 * the time is 2 * depth * alpha + 2 * bytes / beta (ring: 2 (n - 1) alpha + 2 (n - 1) / n bytes / beta). */
static void run_tree(stream_ctx *sc, int g, int skey, int slot, int rank, double bytes)
{
    int d = sc->dev;
    dev_rt *dv = &S->dv[d];
    group_rt *gr = &S->gr[g];
    const plan_group *grp = &S->p->groups[g];
    int n = grp->n;
    if (!gr->tree) prepare_tree(gr, n);
    double half = bytes / 2;
    sg_comm_t comms[12];
    int nc = 0, first = -1;
    sg_mailbox_t in_mb = coll_mailbox(g, skey, FLAT_PHASE, rank);
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 3; k++) {
            int peer = gr->tree[6 * rank + 3 * t + k];
            if (peer < 0) continue;
            if (first < 0) first = peer;
            comms[nc++] = sg_mailbox_put_async(coll_mailbox(g, skey, FLAT_PHASE, peer), &S->dummy, wire_bytes(half));
            comms[nc++] = sg_mailbox_get_async(in_mb, &sc->slot[0]);
            dv->bytes_sent += half;
            S->activities++;
        }
    sg_comm_wait_all(comms, (size_t)nc);
    if (first >= 0 && gr->tree_depth > 0) sg_actor_sleep_for((2 * gr->tree_depth - 1) * hop_alpha(d, slot, 0, grp->devices[first]));
}

static void do_coll(stream_ctx *sc, int i)
{
    const plan_set *p = S->p;
    int d = sc->dev;
    dev_rt *dv = &S->dv[d];
    const plan_list *L = plan_dev_list(p, d);
    const list_rt *li = &S->li[p->devices[d].list];
    const plan_instr *in = &L->ins[i];
    int g = plan_dev_group(p, d, in);
    const plan_group *grp = &p->groups[g];
    int n = grp->n;
    if (n <= 1) return;
    int seq = dv->coll_seq ? dv->coll_seq[i] : li->coll_seq[i];
    coll_inst *ci = &S->inst[S->goff[g] + seq];
    group_rt *gr = &S->gr[g];
    int rank = dv->slot_rank[in->group];
    int skey = li->skey[in->stream];

    /* everyone arrives; the last one starts the clock of communication for all (folded: the
     * simulated members; the others arrive with them, by symmetry) */
    if (++ci->arrived == gr->nsim) {
        for (int m = 0; m < n; m++)
            if (S->fold.index[grp->devices[m]] == 0) acct(&S->dv[grp->devices[m]], 0, 1);
        group_notify(gr);
    } else {
        group_wait(gr, &ci->arrived, gr->nsim);
    }

    if (!S->o->costs.nocomm) {
        double bytes = (double)in->bytes;
        int kind = in->coll;
        int hier = gr->gg.hier && S->o->coll == SIM_COLL_AUTO &&
                   (kind == PLAN_ALL_REDUCE || kind == PLAN_REDUCE_SCATTER || kind == PLAN_ALL_GATHER);
        if (S->o->coll == SIM_COLL_TREE && kind == PLAN_ALL_REDUCE) {
            run_tree(sc, g, skey, in->group, rank, bytes);
        } else if (!hier) {
            coll_phase c = {kind, bytes, gr->ring, n, rank, 1};
            run_phase(sc, g, skey, in->group, FLAT_PHASE, &c);
        } else {
            /* hierarchical (NCCL across nodes): a ring inside each node over NVLink, and rings of
             * the members with the same local rank across nodes, each on its own NIC.
             * all-reduce: local reduce-scatter, cross all-reduce of 1/k, local all-gather;
             * reduce-scatter: local then cross; all-gather: cross then local. */
            int k = gr->gg.per_node, nn = n / k, node = gr->gg.node_of[rank], loc = gr->gg.local_of[rank];
            coll_phase local = {0, bytes, gr->gg.grid + node * k, k, loc, 1};
            coll_phase cross = {0, bytes / k, gr->gg.grid + loc, nn, node, k};
            if (kind != PLAN_ALL_GATHER) {
                local.kind = PLAN_REDUCE_SCATTER;
                run_phase(sc, g, skey, in->group, 0, &local);
            }
            cross.kind = kind;
            run_phase(sc, g, skey, in->group, 1, &cross);
            if (kind != PLAN_REDUCE_SCATTER) {
                local.kind = PLAN_ALL_GATHER;
                run_phase(sc, g, skey, in->group, 2, &local);
            }
        }
        /* members finish together, when the last one's flows are done */
        if (++ci->finished == gr->nsim) group_notify(gr);
        else group_wait(gr, &ci->finished, gr->nsim);
    }
    acct(dv, 0, -1);
}

static void do_wait(stream_ctx *sc, int i)
{
    const plan_set *p = S->p;
    int d = sc->dev;
    dev_rt *dv = &S->dv[d];
    const plan_list *L = plan_dev_list(p, d);
    const list_rt *li = &S->li[p->devices[d].list];
    int r = li->wait[i];
    int rs = L->ins[r].stream;
    if (dv->done[rs] > li->spos[r]) return;
    if (!dv->mutex) dv->mutex = sg_mutex_init(), dv->cond = sg_cond_init();
    sg_mutex_lock(dv->mutex);
    dv->nwaiting++;
    while (dv->done[rs] <= li->spos[r]) sg_cond_wait(dv->cond, dv->mutex);
    dv->nwaiting--;
    sg_mutex_unlock(dv->mutex);
}

/* ---------------------------------------------------------------- trace */

static int64_t to_ns(double seconds) { return seconds > 0 ? llround(seconds * NS_PER_S) : 0; }

/* One event per compute, collective and p2p run (a sendrecv group is posted and finishes as one,
 * so it is one event named after its members), from when the stream reached it to when it
 * finished: a stream runs one at a time, so a thread's events never overlap. */
static void trace_event(int d, int s, const plan_list *L, const int32_t *at, int n, double t0)
{
    const plan_set *p = S->p;
    const plan_instr *in = &L->ins[at[0]];
    char name[512];
    int len = viz_trace_instr_name(p, d, in, name, sizeof name);
    viz_trace_arg args[4];
    int na = 0;
    if (in->op == PLAN_COMPUTE) {
        if (in->stage >= 0) args[na++] = (viz_trace_arg){"stage", NULL, in->stage};
        if (in->mb >= 0) args[na++] = (viz_trace_arg){"mb", NULL, in->mb};
        args[na++] = (viz_trace_arg){"gemm_flops", NULL, sim_kernel_list_gemm_flops(p, in->kernels)};
    } else if (in->op == PLAN_COLL) {
        int g = plan_dev_group(p, d, in);
        args[na++] = (viz_trace_arg){"bytes", NULL, (double)in->bytes};
        args[na++] = (viz_trace_arg){"group", NULL, g};
        args[na++] = (viz_trace_arg){"members", NULL, p->groups[g].n};
    } else {
        double bytes = 0;
        for (int k = 0; k < n; k++) {
            bytes += (double)L->ins[at[k]].bytes;
            if (k == 0) continue;
            if (len >= 0 && (size_t)len < sizeof name - 4) {
                int more = viz_trace_instr_name(p, d, &L->ins[at[k]], name + len + 3, sizeof name - (size_t)len - 3);
                memcpy(name + len, " + ", 3);
                len += 3 + more;
            }
        }
        if (n > 1) args[na++] = (viz_trace_arg){"ops", NULL, n};
        args[na++] = (viz_trace_arg){"bytes", NULL, bytes};
        if (n == 1) args[na++] = (viz_trace_arg){"peer", NULL, plan_dev_peer(p, d, in)};
    }
    int64_t a = to_ns(t0), b = to_ns(simgrid_get_clock());
    viz_trace_complete(S->trace, d, s, name, viz_trace_instr_cat(in), a, b - a, args, na);
    /* folded replicas did the same at the same time, with their own peers and groups */
    for (int k = 1; k < S->fold.replicas; k++) {
        int dk = d + k * S->fold.shift;
        len = viz_trace_instr_name(p, dk, in, name, sizeof name);
        for (int j = 1; j < n && len >= 0 && (size_t)len < sizeof name - 4; j++) {
            int more = viz_trace_instr_name(p, dk, &L->ins[at[j]], name + len + 3, sizeof name - (size_t)len - 3);
            memcpy(name + len, " + ", 3);
            len += 3 + more;
        }
        for (int q = 0; q < na; q++) {
            if (!strcmp(args[q].key, "peer")) args[q].num = plan_dev_peer(p, dk, in);
            if (!strcmp(args[q].key, "group")) args[q].num = plan_dev_group(p, dk, in);
        }
        viz_trace_complete(S->trace, dk, s, name, viz_trace_instr_cat(in), a, b - a, args, na);
    }
}

static void trace_names(const plan_set *p)
{
    char name[32];
    for (int d = 0; d < p->ndevices; d++) {
        snprintf(name, sizeof name, "GPU %d", d);
        viz_trace_process(S->trace, d, name);
        const plan_list *L = plan_dev_list(p, d);
        for (int s = 0; s < L->nstreams; s++) viz_trace_thread(S->trace, d, s, L->streams[s] ? L->streams[s] : "?");
    }
}

/* Is the device's host thread modelled (SIM_LAUNCH_HOST with a launch cost)? Not with unit costs,
 * whose closed forms know no launches; with launch 0 the host is never behind (and never waits:
 * an infinitely fast host needs no synchronisation points either). */
static bool host_model(const sim_costs *c)
{
    return !c->unit && c->launch_model == SIM_LAUNCH_HOST &&
           (sim_launch_seconds(c, PLAN_PASS_F) > 0 || sim_launch_seconds(c, PLAN_PASS_B) > 0);
}

/* SIM_LAUNCH_LIST: a communication call is a kernel launch too: the CPU spends the launch overhead
 * issuing it, of which launch_overlap is hidden behind GPU work it issued earlier (as for kernel
 * lists). Not with unit costs or free communication, whose closed forms know no launches. */
static void comm_launch(void)
{
    const sim_costs *c = &S->o->costs;
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

static void stream_main(int argc, char **argv)
{
    (void)argc, (void)argv;
    stream_ctx *sc = sg_actor_self_get_data();
    const plan_set *p = S->p;
    int d = sc->dev, s = sc->s;
    dev_rt *dv = &S->dv[d];
    const plan_list *L = plan_dev_list(p, d);
    const list_rt *li = &S->li[p->devices[d].list];
    const int32_t *order = li->sidx + li->soff[s];
    int len = li->soff[s + 1] - li->soff[s];
    for (int pos = 0; pos < len;) {
        int i = order[pos];
        const plan_instr *in = &L->ins[i];
        int adv = 1;
        if (li->seg && (in->op == PLAN_COMPUTE || in->op == PLAN_COLL ||
                        ((in->op == PLAN_SEND || in->op == PLAN_RECV) && li->run[i] > 0)))
            host_issue_wait(dv, li, i);
        double t0 = simgrid_get_clock(); /* the trace shows the GPU's work, from when it was issued */
        switch (in->op) {
        case PLAN_COMPUTE: {
            double t = li->dur[i];
            if (t > 0) {
                acct(dv, 1, 0);
                /* work = seconds x the host's speed (1e9 on generated platforms), so a user's
                 * platform with other speeds still runs the cost model's durations */
                sg_actor_execute(t * sg_host_get_speed(sg_host_self()));
                acct(dv, -1, 0);
                S->activities++;
            }
            break;
        }
        case PLAN_SEND:
        case PLAN_RECV:
            adv = li->run[i] > 1 ? li->run[i] : 1;
            comm_launch();
            do_p2p(sc, order, pos, adv);
            break;
        case PLAN_COLL:
            comm_launch();
            do_coll(sc, i);
            break;
        case PLAN_WAIT: do_wait(sc, i); break;
        case PLAN_ALLOC: mem_change(dv, &L->bufs[in->buf], 1); break;
        case PLAN_FREE: mem_change(dv, &L->bufs[in->buf], -1); break;
        default: break;
        }
        if (S->trace && (in->op == PLAN_COMPUTE || in->op == PLAN_SEND || in->op == PLAN_RECV || in->op == PLAN_COLL))
            trace_event(d, s, L, order + pos, adv, t0);
        pos += adv;
        dv->done[s] = pos;
        dv->ninstr += adv;
        if (li->seg && dv->seg_known < li->nseg) host_sync_check(dv, li, L->nstreams);
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

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

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

    /* compute durations; with unit costs, P / (instructions of pass P for the same stage and
     * micro-batch on this list) */
    const sim_costs *c = &st->o->costs;
    int64_t *keys = NULL;
    size_t nkeys = 0;
    if (c->unit) {
        keys = base_xmalloc(n * sizeof *keys);
        for (int i = 0; i < L->n; i++) {
            const plan_instr *in = &L->ins[i];
            if (in->op == PLAN_COMPUTE)
                keys[nkeys++] = ((int64_t)in->pass << 56) | ((int64_t)(uint32_t)(in->stage + 1) << 28) |
                                (int64_t)(uint32_t)(in->mb + 1);
        }
        qsort(keys, nkeys, sizeof *keys, cmp_i64);
    }
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        if (in->op != PLAN_COMPUTE) continue;
        double gf = sim_kernel_list_gemm_flops(p, in->kernels);
        li->hw_flops += gf;
        if (sim_pass_is_model(in->pass)) li->model_flops += gf;
        if (c->unit) {
            int64_t key = ((int64_t)in->pass << 56) | ((int64_t)(uint32_t)(in->stage + 1) << 28) |
                          (int64_t)(uint32_t)(in->mb + 1);
            int64_t *at = bsearch(&key, keys, nkeys, sizeof *keys, cmp_i64);
            size_t lo = (size_t)(at - keys), hi = lo;
            while (lo > 0 && keys[lo - 1] == key) lo--;
            while (hi < nkeys && keys[hi] == key) hi++;
            li->dur[i] = c->unit_pass[in->pass] / (double)(hi - lo);
        } else {
            li->dur[i] = in->kernels >= 0 ? kl_dur[in->kernels] : 0;
        }
    }
    free(keys);
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
    gr->ring = base_xcalloc((size_t)n + 1, sizeof *gr->ring);
    for (int r = 0; r < n; r++) gr->ring[r] = r;
    sim_group_grid_init(p, g, &gr->gg);
    gr->nsim = st->fold.nsim[g];
    gr->spanning = st->fold.spanning[g];
}

static int prepare(sim_state *st, base_error *e)
{
    const plan_set *p = st->p;
    /* a compute takes its kernels' GPU time G on its stream; the host model adds when it may
     * start (prepare_host), the per-list model the launches (sim_kernel_list_seconds) */
    const sim_costs *c = &st->o->costs;
    st->host_sync = c->host_sync;
    /* a plan whose p2p a blocking host cannot follow (receives posted ahead: asynchronous p2p) would
     * deadlock at those waits, and at the micro-batch ones too (a pending receive's sender may be
     * a host waiting in turn); the gradient norm's wait comes after every transfer, always safe */
    if (host_model(c) && (st->host_sync & (SIM_SYNC_P2P | SIM_SYNC_BATCH)) && !sim_host_can_block_at_p2p(p)) {
        st->host_sync &= ~(SIM_SYNC_P2P | SIM_SYNC_BATCH);
        snprintf(st->host_note, sizeof st->host_note, "the host waits neither at p2p transfers nor before "
                 "micro-batches: the plan posts receives ahead of the work feeding their sends (asynchronous "
                 "p2p), which a blocking host would deadlock on");
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
    st->li = base_xcalloc((size_t)p->nlists + 1, sizeof *st->li);
    for (int d = 0; d < p->ndevices; d++) st->li[p->devices[d].list].used = true;
    int rc = 0;
    for (int l = 0; l < p->nlists && !rc; l++)
        if (st->li[l].used) rc = prepare_list(st, l, kl_dur, kl_lead, e);
    free(kl_dur);
    free(kl_lead);
    if (rc) return rc;

    sim_fold_plan(p, st->o, &st->fold);
    st->dv = base_xcalloc((size_t)p->ndevices + 1, sizeof *st->dv);
    st->gr = base_xcalloc((size_t)p->ngroups + 1, sizeof *st->gr);
    st->goff = base_xcalloc((size_t)p->ngroups + 1, sizeof *st->goff);
    int32_t *ninst = base_xcalloc((size_t)p->ngroups + 1, sizeof *ninst);
    for (int d = 0; d < p->ndevices; d++) {
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
        free(st->gr[g].tree);
        sim_group_grid_free(&st->gr[g].gg);
    }
    sim_fold_free(&st->fold);
    free(st->li), free(st->dv), free(st->gr), free(st->goff), free(st->inst), free(st->xf), free(st->skeys);
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
    if (S->fold.replicas > 1) {
        loop = base_xcalloc((size_t)p->ndevices + 1, 1);
        for (int d = 0; d < p->ndevices; d++) loop[d] = S->fold.index[d] == 0;
    }
    int xrc = sim_platform_xml_loops(p, &o->links, o->costs.nocomm, loop, &xml, e);
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
        FILE *f = fopen(o->platform_out, "w");
        if (!f || fwrite(xml.s, 1, xml.n, f) != xml.n) rc = base_errorf(e, "cannot write %s; check the path", o->platform_out);
        if (f) fclose(f);
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
    S = &st;
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
        S = NULL;
        return rc;
    }
    if (o->trace_path) {
        st.trace = &trace;
        trace_names(p);
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
    simgrid_run();
    if (o->progress && st.ticks > 0xffff) fputc('\n', stderr);

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
        r->folded_replicas = st.fold.replicas;
        r->simulated_devices = st.fold.nsimulated;
        snprintf(r->fold_note, sizeof r->fold_note, "%s", o->fold && st.fold.replicas == 1 ? st.fold.reason : "");
        snprintf(r->host_note, sizeof r->host_note, "%s", st.host_note);
        r->wall_seconds = wall_now() - st.wall0;
        sim_result_finish(p, r);
    }
    if (st.trace) {
        base_error te;
        base_error_clear(&te);
        if (viz_trace_close(st.trace, &te) && !rc) rc = base_errorf(e, "%s", te.msg);
    }
    free(ctx);
    state_free(&st);
    S = NULL;
    return rc;
}
