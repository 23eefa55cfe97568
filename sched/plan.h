/* plan.h — the execution plan: the contract between piper's compiler and its consumers.
 *
 * sim/ and exec/ include this header and nothing else of the compiler. A plan holds a header
 * (format version, dtypes, GPU type, the model's shape, devices, communication groups) and one
 * instruction list per device. The list is in the device's *launch order*; each instruction names
 * the logical stream it runs on, so a stream's own order is the launch order restricted to it.
 *
 * Replicas (e.g. the data-parallel copies of a pipeline stage) have identical instruction lists up
 * to device ids, so devices may share one list: a device's `peer_offset` is added to every p2p
 * peer, and instructions name groups through the device's group-slot table. Read peers and groups
 * through sched_plan_peer() and sched_plan_group(), never from the raw fields.
 *
 * The file form is text, one instruction per line, versioned, and reads back to an identical plan.
 * Memory is a fact of the plan: alloc/free instructions with sizes and categories. */
#ifndef PIPER_SCHED_PLAN_H
#define PIPER_SCHED_PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../base/base.h"

#define SCHED_PLAN_VERSION 1

typedef enum { PLAN_FP32, PLAN_BF16, PLAN_FP16, PLAN_FP64, PLAN_FP8, PLAN_NDTYPE } plan_dtype;

typedef enum {
    PLAN_COMPUTE,  /* run a kernel identity (exec) / its kernel list (sim) */
    PLAN_SEND,     /* p2p to peer; blocks its stream until the peer's matching RECV is posted */
    PLAN_RECV,
    PLAN_COLL,     /* collective over a group; every member issues a group's collectives in order */
    PLAN_RECORD,   /* record event on this stream */
    PLAN_WAIT,     /* this stream waits for an event recorded on another stream of the device */
    PLAN_ALLOC,    /* buffer becomes live */
    PLAN_FREE,
    PLAN_NOP
} plan_op;

typedef enum {
    PLAN_ALL_REDUCE,
    PLAN_REDUCE_SCATTER,
    PLAN_ALL_GATHER,
    PLAN_ALL_TO_ALL,
    PLAN_BROADCAST,
    PLAN_REDUCE,
    PLAN_NCOLL
} plan_coll;

/* Memory categories of the per-device breakdown. WORK holds what lives only around kernels: a
 * compute's workspace (norm statistics, the backward's intermediate gradients), the one a split
 * backward's BI leaves for its BW, and the tensor a region hands to the next one on the same
 * device (its output, or its input gradient) from the compute that makes it to the last that
 * reads it. */
typedef enum { PLAN_MEM_PARAM, PLAN_MEM_GRAD, PLAN_MEM_OPT, PLAN_MEM_ACT, PLAN_MEM_COMM, PLAN_MEM_WORK, PLAN_NMEM } plan_mem;

/* Passes of a compute instruction (same meaning as in formulas.md). */
typedef enum {
    PLAN_PASS_F,    /* forward */
    PLAN_PASS_B,    /* full backward (BI + BW) */
    PLAN_PASS_BI,   /* input-gradient backward */
    PLAN_PASS_BW,   /* weight-gradient backward */
    PLAN_PASS_R,    /* recompute of a forward before its backward */
    PLAN_PASS_UPD,  /* optimizer step */
    PLAN_PASS_AUX,  /* cross-group numerics: grad-norm, loss sums, tied/mirrored gradient sums */
    PLAN_NPASS
} plan_pass;

typedef enum { PLAN_KERNEL_GEMM, PLAN_KERNEL_MEM } plan_kernel_kind;

/* One kernel of a compute instruction's cost: a GEMM (m x k) . (k x n) in `dtype`, or a
 * memory-bound op moving `bytes`. `count` identical launches. `flops` is exact for GEMMs
 * (2mnk·count) and the op's own arithmetic for memory-bound ops. */
typedef struct plan_kernel {
    uint8_t kind;       /* plan_kernel_kind */
    uint8_t dtype;      /* plan_dtype */
    int32_t count;
    int64_t m, n, k;
    double bytes;       /* HBM traffic of all `count` launches */
    double flops;       /* arithmetic of all `count` launches */
    const char *name;   /* "qkv", "attn_scores", "layernorm", ... */
} plan_kernel;

typedef struct plan_kernel_list {
    int n;
    plan_kernel *k;
} plan_kernel_list;

typedef struct plan_instr {
    uint8_t op;          /* plan_op */
    uint8_t pass;        /* PLAN_COMPUTE: plan_pass */
    uint8_t coll;        /* PLAN_COLL: plan_coll */
    uint8_t mem;         /* ALLOC/FREE and communication: plan_mem of the buffer */
    int32_t stream;      /* index into the device's streams */
    int32_t region;      /* model region (compute; -1 otherwise) */
    int32_t mb;          /* micro-batch (-1 when none) */
    int32_t stage;       /* pipeline stage the instruction belongs to (-1 when none) */
    int32_t kernels;     /* COMPUTE: index into plan->kernel_lists */
    int32_t kid;         /* COMPUTE: index into plan->kernel_ids (the identity exec runs) */
    int32_t peer;        /* SEND/RECV: peer device of the list's owner (see sched_plan_peer) */
    int32_t group;       /* COLL: device group-slot (see sched_plan_group) */
    int32_t tag;         /* SEND/RECV: a send matches the peer's recv with the same tag */
    int32_t sendrecv;    /* SEND/RECV: nonzero id shared by p2p ops that must be posted together */
    int32_t event;       /* RECORD/WAIT: device-local event id */
    int32_t buf;         /* ALLOC/FREE/SEND/RECV/COLL: device-local buffer id (-1 when none) */
    /* COMPUTE: group slots of the tensor- and expert-parallel groups (-1 when none). The shard a
     * device runs is its position in the group, so replicas can share one instruction list. */
    int32_t tp_group, ep_group;
    int64_t bytes;       /* SEND/RECV/COLL: bytes per device; ALLOC/FREE: buffer bytes */
    int32_t nreads, nwrites; /* COMPUTE: buffers read and written */
    int32_t *reads, *writes;
} plan_instr;

typedef struct plan_buffer {
    int64_t bytes;
    uint8_t mem;          /* plan_mem */
    const char *name;     /* "act.L3.attn.mb2", "grad.L3.mlp", ... */
} plan_buffer;

typedef struct plan_list {
    int n;
    plan_instr *ins;      /* in launch order */
    int nbufs;
    plan_buffer *bufs;
    int nstreams;
    const char **streams; /* stream names: "compute", "pp", "dp_reduce", ... */
    int nevents;
    int ngroup_slots;
} plan_list;

typedef struct plan_device {
    int id;
    int node;             /* cluster node hosting the device */
    int list;             /* index into plan->lists */
    int32_t peer_offset;  /* added to every peer of the shared list */
    int32_t *group_slots; /* group slot -> global group id; list->ngroup_slots entries */
} plan_device;

typedef struct plan_group {
    int n;
    int32_t *devices;     /* member devices in rank order */
    const char *name;     /* "dp(pp=1,tp=0)", "tp(...)", ... */
} plan_group;

/* The model's shape, so that an executor can build its kernels without the compiler. */
typedef struct plan_model {
    const char *name;
    const char *family;   /* "gpt" | "llama" */
    int64_t layers, hidden, heads, kv_heads, head_dim, ffn;
    int64_t experts, expert_ffn, top_k;
    double capacity_factor;
    int64_t vocab, seq;
    bool tied_embeddings, qk_norm, dropout;
    int64_t micro_batch, num_microbatches, global_batch;
} plan_model;

typedef struct plan_gpu {
    const char *name;         /* "H100" */
    double peak_flops[PLAN_NDTYPE]; /* dense FLOP/s per dtype */
    double hbm_bw;            /* bytes/s */
    double mem_bytes;         /* capacity */
    double reserve_bytes;     /* kept free for context, workspaces, NCCL buffers */
} plan_gpu;

/* How the cluster's nodes are wired across (docs/plan-format.md, `links`). */
typedef enum { PLAN_TOPO_FAT_TREE, PLAN_TOPO_RAIL, PLAN_NTOPO } plan_topology;

/* The cluster's network as its file describes it, so that a plan is all a simulator needs. A plan
 * without these figures (every field 0, platform NULL: built in memory, or written before they
 * existed) leaves the choice to the consumer (sim/: defaults per GPU type). Bandwidths in bytes/s
 * per direction, latencies in seconds end to end. */
typedef struct plan_links {
    double nvlink_bw;          /* each GPU's NVLink into its node's NVSwitch */
    double nvlink_latency;     /* GPU to GPU inside a node */
    double nic_bw;             /* each NIC into the fabric */
    double nic_latency;        /* GPU to GPU across nodes */
    int32_t gpus_per_nic;      /* 1 = a NIC per GPU */
    int32_t gpus_per_node;
    uint8_t topology;          /* plan_topology */
    double oversubscription;   /* fat-tree: leaf downlink / uplink capacity (1 = non-blocking) */
    const char *platform;      /* a user's SimGrid platform XML used instead of these figures, or NULL */
} plan_links;

/* A cost-model constant of the cluster file's `calibration` map (name -> value), carried for the
 * simulator, which decides which names it knows. */
typedef struct plan_calib {
    const char *name;
    double value;
} plan_calib;

typedef struct sched_plan {
    int version;
    uint8_t param_dtype, act_dtype, grad_dtype, opt_dtype; /* plan_dtype */
    plan_gpu gpu;
    plan_links links;
    int ncalib;
    plan_calib *calib;
    plan_model model;
    int ndevices;
    plan_device *devices;
    int nlists;
    plan_list *lists;
    int ngroups;
    plan_group *groups;
    int nkernel_lists;
    plan_kernel_list *kernel_lists;
    int nkernel_ids;
    const char **kernel_ids;  /* "gpt.attn.F", "llama.moe_experts.BW", ... */
    int nregions;
    const char **regions;     /* region names: "embed", "L0.attn", "L0.mlp", ..., "head" */
    base_arena arena;         /* owns everything above */
} sched_plan;

/* ---------------------------------------------------------------- access */

static inline const plan_list *sched_plan_list(const sched_plan *p, int dev)
{
    return &p->lists[p->devices[dev].list];
}
static inline int sched_plan_peer(const sched_plan *p, int dev, const plan_instr *in)
{
    return in->peer + p->devices[dev].peer_offset;
}
static inline int sched_plan_group(const sched_plan *p, int dev, const plan_instr *in)
{
    return p->devices[dev].group_slots[in->group];
}

const char *sched_plan_op_name(plan_op op);
const char *sched_plan_coll_name(plan_coll c);
const char *sched_plan_mem_name(plan_mem m);
const char *sched_plan_pass_name(plan_pass p);
const char *sched_plan_dtype_name(plan_dtype d);
const char *sched_plan_topology_name(plan_topology t); /* "fat-tree", "rail" */
int sched_plan_dtype_bytes(plan_dtype d);

/* ---------------------------------------------------------------- file form */

void sched_plan_init(sched_plan *p);
void sched_plan_free(sched_plan *p);
/* Sets *in to `op` with every other field at the value the file form leaves unwritten: every
 * index (region, kernels, kid, mb, stage, peer, group, event, buf, tp_group, ep_group) -1 for
 * none; tag, sendrecv, bytes and the rest 0. Builders start from
 * it so that plan files only show what an instruction actually uses (docs/plan-format.md). */
void sched_plan_instr_init(plan_instr *in, plan_op op);
int sched_plan_write(const sched_plan *p, FILE *f, base_error *e);
/* Writes path.tmp and renames it over path, so a reader never sees half a plan. */
int sched_plan_write_file(const sched_plan *p, const char *path, base_error *e);
/* Reads what sched_plan_write wrote into *p (which it initialises; on failure *p is left empty).
 * Malformed files fail with "file:line: ...", never crash: any bytes may be handed in. */
int sched_plan_read(sched_plan *p, const char *name, const char *text, size_t len, base_error *e);
int sched_plan_read_file(sched_plan *p, const char *path, base_error *e);

/* ---------------------------------------------------------------- static checks */

typedef struct sched_plan_device_stats {
    double peak_bytes;              /* peak of the live total */
    double at_peak[PLAN_NMEM];      /* breakdown at the moment of the peak */
    double peak_by_mem[PLAN_NMEM];  /* each category's own peak */
    double busy_seconds;            /* compute time by the static cost model */
    double end_seconds;             /* when the device's last instruction finished */
    int64_t count_by_op[PLAN_NOP + 1];
} sched_plan_device_stats;

typedef struct sched_plan_stats {
    int ndevices;
    sched_plan_device_stats *dev;   /* malloc'd; free with sched_plan_stats_free */
    double makespan_seconds;
} sched_plan_stats;

/* Nominal link figures of the abstract run: a transfer of b bytes (p2p, or a collective's ring
 * volume) takes LATENCY + b / BW seconds. They only make the static peak and makespan plausible;
 * sim/ predicts real times. */
#define SCHED_PLAN_CHECK_BW 50e9
#define SCHED_PLAN_CHECK_LATENCY 5e-6

/* Abstract run in launch order with zero buffering (a send blocks until its receive is posted;
 * sendrecv groups are posted together; collectives complete when every member reaches them),
 * timed with the header's GPU figures. Fails, naming the stuck instructions of each device, if the
 * plan can deadlock, if groups see collectives in inconsistent orders, or if buffers are used or
 * freed when not live. Fills per-device peak memory by category. */
int sched_plan_check(const sched_plan *p, sched_plan_stats *st, base_error *e);
void sched_plan_stats_free(sched_plan_stats *st);

/* When the abstract run ran one instruction of one device: from the moment it reached the head of
 * its stream (a p2p operation or collective: was posted; a wait: began waiting) to the moment it
 * finished, in seconds since the step began; instantaneous instructions have start == end. A
 * sendrecv group's members share their start and end. */
typedef void (*sched_plan_timing_fn)(void *ctx, int dev, int instr, double start, double end);
/* sched_plan_check that also tells `timing` (when not NULL) about every instruction as the run
 * finishes it, so that figures (piper-viz schedule) draw the very timing the check computed.
 * Same result, stats and errors as sched_plan_check; a failed run stops reporting where it stops. */
int sched_plan_check_timed(const sched_plan *p, sched_plan_stats *st, sched_plan_timing_fn timing, void *ctx,
                           base_error *e);

#endif
