/* sim_internal.h — what sim/'s files share and nobody else sees: the SimGrid replay's entry point
 * (replay.c), which run.c calls in a forked child, the static facts of a plan that the replay and
 * the report both need, the folding of data-parallel replicas (fold.c), the platform with loop
 * routes for it (platform.c), and the replay's state and the parts of it that live in their own
 * files: p2p matching (p2p.c), the collectives (coll.c and one coll_<name>.c per algorithm), the
 * host model (host.c) and the trace (replay_trace.c). */
#ifndef PIPER_SIM_INTERNAL_H
#define PIPER_SIM_INTERNAL_H

#include "sim.h"

#include "../viz/trace.h"

#include <simgrid/forward.h>

/* Replays the plan in this process with SimGrid, filling r (r->dev malloc'd). SimGrid can run once
 * per process: run.c calls this in a child. */
int sim_replay(const plan_set *p, const sim_options *o, sim_result *r, base_error *e);

/* GEMM FLOPs of a kernel list (formulas.md counts GEMMs only). */
double sim_kernel_list_gemm_flops(const plan_set *p, int kl);
/* Is the pass counted in model FLOPs (F, B, BI, BW: not recompute, optimizer or aux)? */
bool sim_pass_is_model(int pass);

/* Fills the result's derived figures (step, tokens/s, MFU/HFU, idle, critical device, memory
 * flags) from the per-device facts the replay measured. */
void sim_result_finish(const plan_set *p, sim_result *r);

/* A group's hierarchical structure (coll_auto.c runs all-reduce, reduce-scatter and all-gather of a
 * group with the same number k > 1 of members on each of several nodes as node rings and
 * cross-node rings): grid[node * k + local] is the rank of each member, nodes in order of their
 * first member; node_of/local_of per rank (NULL for groups under 4 members). */
typedef struct sim_group_grid {
    bool hier;
    int per_node;
    int32_t *grid, *node_of, *local_of;
} sim_group_grid;
void sim_group_grid_init(const plan_set *p, int g, sim_group_grid *gg);
void sim_group_grid_free(sim_group_grid *gg);

/* Folding of data-parallel replicas (fold.c): which devices the replay simulates. */
typedef struct sim_fold {
    int replicas;        /* R >= 2 when folded, else 1 */
    int shift;           /* replica k is replica 0 shifted by k x shift devices */
    int nsimulated;      /* devices simulated (replica 0) */
    int32_t *rep;        /* per device: the simulated device it copies (itself when simulated) */
    int32_t *index;      /* per device: its replica */
    uint8_t *spanning;   /* per group: spans replicas (its collectives run with absent members) */
    int32_t *nsim;       /* per group: simulated members */
    int32_t *first_sim;  /* per group: its first simulated member in rank order (-1: none) */
    char reason[200];    /* when not folded: why */
} sim_fold;
/* Decides the folding of the plan under the options (o->fold off, a user's platform, or a plan
 * that does not fold exactly: replicas = 1 and the reason). Never fails. */
int sim_fold_plan(const plan_set *p, const sim_options *o, sim_fold *f);
void sim_fold_free(sim_fold *f);

/* The platform XML of sim_platform_xml, plus for each device with loop[d] set two hosts that the
 * collectives (coll_ring.c) send folded flows to: "gpu<d>~nvl" (out over d's NVLink and back in
 * over it) and, across nodes, "gpu<d>~nic" (out through d's PCIe, NIC and NIC link, back in the
 * same way). With reduce, only the nodes holding a device with loop[d] set (whole), their
 * leaves and the spine: the routes among those nodes are the full platform's. */
int sim_platform_xml_loops(const plan_set *p, const sim_links *l, bool nocomm, const uint8_t *loop, bool reduce,
                           base_buf *out, base_error *e);

/* ---------------------------------------------------------------- the replay's state */

#define MAX_BATCH 64 /* sendrecv groups larger than this are posted in slices of this size */

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

/* Actors waiting for a collective's other members (coll.c): a waiter suspends itself and a wake
 * resumes every waiter in the order they came, each then looking at its count again (replay.c).
 * Actors switch only at SimGrid calls, so nothing needs a lock, and a wait is one SimGrid call
 * rather than a mutex's and a condition's. */
typedef struct sim_waitlist {
    sg_actor_t *a;
    int n, cap;
} sim_waitlist;
void sim_waitlist_sleep(sim_waitlist *w);
void sim_waitlist_wake(sim_waitlist *w);

typedef struct dev_rt {
    double last_t, compute_t, exposed_t, comm_t, end;
    int ncompute, ncomm;
    double cur[PLAN_NMEM], total, peak, at_peak[PLAN_NMEM], peak_by_mem[PLAN_NMEM];
    double bytes_sent;
    int64_t ninstr;
    int32_t *done;               /* per stream: instructions completed */
    int streams_left;
    int nwaiting;
    /* streams waiting for another stream or the host: a mutex and a condition, not a
     * sim_waitlist, whose resuming order would change which of the stream's same-instant
     * allocations and frees come first, hence the memory peaks */
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
    sim_waitlist waiting; /* members waiting for the others (coll.c) */
    int32_t *ring;      /* 0 .. n-1: the flat ring in rank order */
    /* hierarchical collectives: the group spans several nodes with per_node members on each */
    sim_group_grid gg;
    int32_t *tree;      /* --coll tree: per rank and tree (2): parent, child, child (-1: none) */
    int tree_depth;     /* edges from a tree's root to its deepest leaf */
    int nsim;           /* members simulated (all, unless the group spans folded replicas) */
    int32_t *sim_members; /* their devices, in rank order */
    bool spanning;      /* spans folded replicas: members send their flows over loop routes */
} group_rt;

typedef struct stream_ctx {
    int dev, s;
    void *slot[MAX_BATCH];       /* where gets store the (unused) payload pointer */
    double moving_at;            /* the current p2p run or collective: when its last partner
                                    posted or arrived (the trace's wait_us ends there) */
} stream_ctx;

/* A p2p post waiting for its partner, on its poster's stack until the transfer completes: the
 * partner's post writes when it matched (p2p.c), for the trace's waiting time. */
typedef struct sim_post {
    double matched_at;
    int64_t flow;              /* the transfer's number, in the order transfers matched (the
                                  trace's flow id from send to receive) */
    struct sim_post *next;
} sim_post;

/* p2p posts not yet matched, keyed by (src, dst, tag): when the second side posts, the transfer
 * starts, and both devices count it as communication from then on. Open addressing. */
typedef struct xfer_slot {
    int32_t src, dst, tag;
    int32_t nsend, nrecv; /* posted and unmatched; both 0 (and npend 0): a tombstone */
    int32_t npend;        /* posts between taking the mailbox and counting themselves */
    uint8_t used;
    sg_mailbox_t mb;      /* the key's mailbox while it has posts, from the pool (p2p.c) */
    sim_post *head, *tail; /* the unmatched posts in the order they were posted (SimGrid's) */
} xfer_slot;

/* The mailboxes of collective flows, by (group, stream name, phase, rank): each is named and
 * looked up in SimGrid once per run (coll.c). Open addressing. */
typedef struct coll_mb_slot {
    int32_t g, skey, ph, rank;
    sg_mailbox_t mb; /* NULL: empty */
} coll_mb_slot;

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
    /* p2p mailboxes not held by a key (p2p.c): a key holds one from its first post until all its
     * posts are matched, so that SimGrid names and looks up only as many as are ever in use */
    sg_mailbox_t *mb_free;
    int nmb_free, mb_free_cap, nmb;
    coll_mb_slot *cmb;
    size_t cmb_cap, cmb_used;
    int nskeys;
    const char **skeys;
    int64_t activities, executions;
    viz_trace *trace;            /* --trace: events as they finish, or NULL */
    int64_t nflows;              /* p2p transfers matched so far (flow ids) */
    int64_t *mem_ts;             /* per device: the time (ns) of its memory sample not yet
                                    written, -1 when none (replay_trace.c) */
    double *mem_bytes;           /* and its value */
    double **t_start, **t_end;   /* o->times_fn: per simulated device and instruction, or NULL */
    sim_fold fold;               /* which devices run (fold.c) */
    unsigned host_sync;          /* the host's synchronisation points in effect (SIM_SYNC_*) */
    char host_note[320];         /* why one was left out */
    int64_t ticks;
    double wall0, wall_last;
    char dummy;
} sim_state;

/* The replay in progress (replay.c): one per process, since SimGrid's engine is a singleton. */
extern sim_state *sim_replay_state;

/* Integrates device dv's time up to now, then changes its counts of running computes and
 * in-flight transfers (replay.c). */
void sim_acct(dev_rt *dv, int dcompute, int dcomm);
/* What a transfer of `bytes` puts on the wire (replay.c). */
long sim_wire_bytes(double bytes);

/* ---------------------------------------------------------------- p2p (p2p.c) */

/* A run of `n` p2p instructions starting at stream position `pos`, posted together. */
void sim_do_p2p(stream_ctx *sc, const int32_t *order, int pos, int n);

/* ---------------------------------------------------------------- collectives (coll.c) */

/* One member's part of one collective, as coll.c hands it to the algorithm once every member has
 * arrived. */
typedef struct sim_coll_call {
    stream_ctx *sc;
    int g;        /* the group */
    int skey;     /* the stream's name: collectives of different streams use their own mailboxes */
    int slot;     /* the group's slot in the device's list (sim_hop_alpha's cache) */
    int rank;     /* the member's rank in the group */
    int kind;     /* plan_coll */
    double bytes; /* the collective's per-device buffer */
} sim_coll_call;

/* Each algorithm of SIM_COLL_ALGOS (sim.h): run moves one member's flows of a collective (the
 * members finish together after it); foldable says whether a group that spans folded replicas may
 * run it (fold.c), with *why the reason when not ("tree all-reduces"). */
#define SIM_COLL_DECLARE(id, name, run, foldable, help)                                            \
    void run(const sim_coll_call *c);                                                             \
    bool foldable(const plan_set *p, int g, const char **why);
SIM_COLL_ALGOS(SIM_COLL_DECLARE)
#undef SIM_COLL_DECLARE

typedef struct sim_coll_def {
    const char *name;
    void (*run)(const sim_coll_call *c);
    bool (*foldable)(const plan_set *p, int g, const char **why);
    const char *help;
} sim_coll_def;
/* The table, indexed by sim_coll_algo. */
extern const sim_coll_def sim_coll_algos[SIM_NCOLL];

/* The collective instruction i of the stream's device: members meet, the algorithm of --coll moves
 * the flows, members leave together. */
void sim_do_coll(stream_ctx *sc, int i);

/* Collective flows of group g on streams named skey, phase ph, into the member of rank `rank`. */
sg_mailbox_t sim_coll_mailbox(int g, int skey, int ph, int rank);
/* Route latency from device d to device `to`, cached per (device, group slot, phase). */
#define FLAT_PHASE 3 /* phases 0-2: a hierarchical collective's local, cross and local rings */
double sim_hop_alpha(int d, int slot, int phase, int to);

/* One phase of a collective: a ring (or all-pairs exchange) over a subset of the group's members.
 * `sub` lists the members in ring order (ranks in the group), `pos` is this member's position. */
typedef struct coll_phase {
    int kind;          /* plan_coll of the phase */
    double bytes;      /* the phase's buffer */
    const int32_t *sub;
    int n, pos, stride; /* sub[k * stride] is the k-th member of the ring */
} coll_phase;
/* The phase as a streaming ring (coll_ring.c): each member streams its ring volume to its
 * neighbour in one flow, then waits the ring's remaining latency steps. */
void sim_ring_phase(const sim_coll_call *call, int ph, const coll_phase *c);
/* Does the ring sub[0], sub[stride], ... of group grp have hops of one kind, all inside nodes or
 * all across nodes (fold.c: one loop route then stands for every hop)? */
int sim_ring_uniform(const plan_set *p, const plan_group *grp, const int32_t *sub, int k, int stride);

/* ---------------------------------------------------------------- the host (host.c) */

/* Before instruction i runs on its stream: SIM_LAUNCH_HOST waits until the host has issued it. */
void sim_host_issue(dev_rt *dv, const list_rt *li, const plan_instr *in, int i);
/* After an instruction finished: the host may come back from its pending synchronisation. */
void sim_host_done(dev_rt *dv, const list_rt *li, int nstreams);
/* SIM_LAUNCH_LIST: the host time of a communication call, on its stream. */
void sim_host_comm_launch(void);

/* ---------------------------------------------------------------- the trace (replay_trace.c) */

/* The event of a compute, collective or p2p run of `n` instructions at[0 .. n) on device d's
 * stream s, from t0 to now (and its folded replicas' copies); a transfer or collective waited for
 * its partners from t0 to moving_at. */
void sim_trace_event(int d, int s, const plan_list *L, const int32_t *at, int n, double t0, double moving_at);
/* One end of p2p transfer `flow` on device d's stream s (a send starts it, the receive finishes
 * it) at `at` seconds, and its folded replicas' copies. */
void sim_trace_flow(int d, int s, int64_t flow, int finish, double at);
/* Device d's live memory is `bytes` from now on (and its folded replicas'): one sample per
 * device and instant, the last of the instant's changes. */
void sim_trace_memory(int d, double bytes);
/* Writes the samples still held and frees what the trace kept (before closing it). */
void sim_trace_finish(const plan_set *p);
/* The trace's process and thread names: one process per GPU, one thread per stream. */
void sim_trace_names(const plan_set *p);

#endif
