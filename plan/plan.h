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
 * through plan_dev_peer() and plan_dev_group(), never from the raw fields.
 *
 * The file form is text, one instruction per line, versioned, and reads back to an identical plan.
 * Memory is a fact of the plan: alloc/free instructions with sizes and categories. */
#ifndef PIPER_PLAN_PLAN_H
#define PIPER_PLAN_PLAN_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../base/base.h"
/* the act and work tensors of each region kind, which the plan's buffer sizes count */
#include "plan_tensors.h"

#define PLAN_VERSION 2

/* Every enumeration of the plan is declared once, as a table X(ENUM, "file name", ...): the enum,
 * its count and its name function are generated from it (plan.c), so names cannot drift from
 * values. The file form writes the names; appending a row is compatible, reordering is not. */

/* Element types: X(enum, name, bytes per element). */
#define PLAN_DTYPE_TABLE(X)  \
    X(PLAN_FP32, "fp32", 4)  \
    X(PLAN_BF16, "bf16", 2)  \
    X(PLAN_FP16, "fp16", 2)  \
    X(PLAN_FP64, "fp64", 8)  \
    X(PLAN_FP8, "fp8", 1)

/* Instructions: X(enum, name). */
#define PLAN_OP_TABLE(X)                                                                       \
    X(PLAN_COMPUTE, "compute") /* run a kernel identity (exec) / its kernel list (sim) */       \
    X(PLAN_SEND, "send")       /* p2p to peer; blocks its stream until the peer's RECV is posted */ \
    X(PLAN_RECV, "recv")                                                                       \
    X(PLAN_COLL, "coll")       /* collective over a group; members issue a group's in order */  \
    X(PLAN_RECORD, "record")   /* record event on this stream */                               \
    X(PLAN_WAIT, "wait")       /* wait for an event recorded on another stream of the device */ \
    X(PLAN_ALLOC, "alloc")     /* buffer becomes live */                                       \
    X(PLAN_FREE, "free")                                                                       \
    X(PLAN_NOP, "nop")         /* last: count_by_op arrays have PLAN_NOP + 1 entries */

/* Collectives: X(enum, name). */
#define PLAN_COLL_TABLE(X)                  \
    X(PLAN_ALL_REDUCE, "all_reduce")         \
    X(PLAN_REDUCE_SCATTER, "reduce_scatter") \
    X(PLAN_ALL_GATHER, "all_gather")         \
    X(PLAN_ALL_TO_ALL, "all_to_all")         \
    X(PLAN_BROADCAST, "broadcast")           \
    X(PLAN_REDUCE, "reduce")

/* Memory categories of the per-device breakdown: X(enum, name). WORK holds what lives only
 * around kernels: a compute's workspace (norm statistics, the backward's intermediate
 * gradients), the one a split backward's BI leaves for its BW, and the tensor a region hands to
 * the next one on the same device (its output, or its input gradient) from the compute that makes
 * it to the last that reads it. */
#define PLAN_MEM_TABLE(X)                  \
    X(PLAN_MEM_PARAM, "params")             \
    X(PLAN_MEM_GRAD, "grads")               \
    X(PLAN_MEM_OPT, "optimizer")            \
    X(PLAN_MEM_ACT, "activations")          \
    X(PLAN_MEM_COMM, "comm")                \
    X(PLAN_MEM_WORK, "workspace")

/* What a buffer is for (docs/plan-format.md, "Roles"), so that a consumer binds it without
 * inferring it from the instructions that use it: X(enum, name, memory category it belongs to).
 * The lowering (sched/lower.c) gives every buffer of a compiled plan one of them; NONE is only
 * for plans built by hand (tests), which consumers must then read by inference. */
#define PLAN_ROLE_TABLE(X)                                                                        \
    X(PLAN_ROLE_NONE, "none", -1)                    /* not stated (hand-built plans) */          \
    X(PLAN_ROLE_PARAMS, "params", PLAN_MEM_PARAM)    /* a region's whole parameters */            \
    X(PLAN_ROLE_PARAM_PIECE, "param_piece", PLAN_MEM_PARAM) /* ZeRO-3: the device's piece */     \
    X(PLAN_ROLE_GRADS, "grads", PLAN_MEM_GRAD)       /* the whole gradient the step reads */      \
    X(PLAN_ROLE_GRAD_PIECE, "grad_piece", PLAN_MEM_GRAD) /* ZeRO-2/3: the kept piece */          \
    X(PLAN_ROLE_MB_GRADS, "mb_grads", PLAN_MEM_GRAD) /* ZeRO-2/3: a micro-batch's whole one */   \
    X(PLAN_ROLE_OPT, "optimizer", PLAN_MEM_OPT)      /* the whole optimizer state */              \
    X(PLAN_ROLE_OPT_PIECE, "opt_piece", PLAN_MEM_OPT) /* ZeRO-1/2/3: the device's piece */       \
    X(PLAN_ROLE_SAVED, "saved", PLAN_MEM_ACT)        /* what a forward keeps for its backward */  \
    X(PLAN_ROLE_RECOMPUTED, "recomputed", PLAN_MEM_ACT) /* what a recompute rebuilds */          \
    X(PLAN_ROLE_WORKSPACE, "workspace", PLAN_MEM_WORK) /* a compute's own (a BI's, for its BW) */ \
    X(PLAN_ROLE_BOUNDARY, "boundary", PLAN_MEM_WORK) /* a tensor handed to the next region */     \
    X(PLAN_ROLE_ROUTE, "route", PLAN_MEM_WORK)       /* an MoE gate's route for its combine */     \
    X(PLAN_ROLE_COMM, "comm", PLAN_MEM_COMM)         /* a tensor sent, received or collected */   \
    X(PLAN_ROLE_GATHERED, "gathered", PLAN_MEM_COMM) /* ZeRO-3: a region's gathered parameters */ \
    X(PLAN_ROLE_REGATHERED, "regathered", PLAN_MEM_COMM) /* SP: re-gathered norm shards */       \
    X(PLAN_ROLE_PIECES, "pieces", PLAN_MEM_COMM)     /* a reduce-scatter's received pieces */

/* What a collective is for (docs/plan-format.md, "Purposes"): X(enum, name, the collective kinds
 * it may be, a mask of PLAN_COLL_BIT(plan_coll)). */
#define PLAN_COLL_BIT(c) (1u << (c))
#define PLAN_COLLS_AR PLAN_COLL_BIT(PLAN_ALL_REDUCE)
#define PLAN_COLLS_RS PLAN_COLL_BIT(PLAN_REDUCE_SCATTER)
#define PLAN_COLLS_AG PLAN_COLL_BIT(PLAN_ALL_GATHER)
#define PLAN_COLLS_A2A PLAN_COLL_BIT(PLAN_ALL_TO_ALL)
#define PLAN_COLLS_TP (PLAN_COLLS_AR | PLAN_COLLS_RS | PLAN_COLLS_AG)
#define PLAN_PURPOSE_TABLE(X)                                                                      \
    X(PLAN_PURPOSE_NONE, "none", (1u << PLAN_NCOLL) - 1) /* not stated (hand-built plans) */       \
    X(PLAN_PURPOSE_DP_GRAD_SUM, "dp_grad_sum", PLAN_COLLS_AR)      /* a data-parallel bucket */     \
    X(PLAN_PURPOSE_ZERO_SCATTER, "zero_scatter", PLAN_COLLS_RS)    /* ZeRO gradient pieces */      \
    X(PLAN_PURPOSE_ZERO_UPDATE_GATHER, "zero_update_gather", PLAN_COLLS_AG) /* ZeRO-1/2 update */ \
    X(PLAN_PURPOSE_ZERO3_GATHER, "zero3_gather", PLAN_COLLS_AG)    /* ZeRO-3 parameters */         \
    X(PLAN_PURPOSE_TP_FWD, "tp_fwd", PLAN_COLLS_TP)                /* Megatron's forward */        \
    X(PLAN_PURPOSE_TP_BWD, "tp_bwd", PLAN_COLLS_TP)                /* ... and backward */          \
    X(PLAN_PURPOSE_SP_REGATHER, "sp_regather", PLAN_COLLS_AG)      /* SP's saved norm shards */    \
    X(PLAN_PURPOSE_TP_GRAD_SYNC, "tp_grad_sync", PLAN_COLLS_AR)    /* TP-replicated gradients */   \
    X(PLAN_PURPOSE_GRAD_NORM, "grad_norm", PLAN_COLLS_AR)          /* the clipping norm */         \
    X(PLAN_PURPOSE_TIED_SUM, "tied_sum", PLAN_COLLS_AR)            /* the tied token table */      \
    X(PLAN_PURPOSE_PAIR_SUM, "pair_sum", PLAN_COLLS_AR)            /* DualPipe's mirrored stages */ \
    X(PLAN_PURPOSE_EP_DISPATCH, "ep_dispatch", PLAN_COLLS_A2A)     /* tokens to their experts */   \
    X(PLAN_PURPOSE_EP_COMBINE, "ep_combine", PLAN_COLLS_A2A)       /* and back */

/* How a group member's part of a collective's buffers is cut (docs/plan-format.md, "Pieces"):
 * X(enum, name). */
#define PLAN_PIECE_TABLE(X)                                                                     \
    X(PLAN_PIECE_NONE, "none")               /* not stated */                                   \
    X(PLAN_PIECE_WHOLE, "whole")             /* every member has all of it */                   \
    X(PLAN_PIECE_EVEN, "even")               /* bytes / size each, in rank order */             \
    X(PLAN_PIECE_ZERO, "zero")               /* per region, ceil(n / size) elements each */     \
    X(PLAN_PIECE_LEADING, "leading")         /* the leading bytes / size of the read buffer */  \
    X(PLAN_PIECE_REPLICATED, "replicated")   /* the tensors every TP rank holds whole */        \
    X(PLAN_PIECE_TOKEN_TABLE, "token_table") /* the tied embedding's token table */

/* Passes of a compute instruction (same meaning as in formulas.md): X(enum, name). */
#define PLAN_PASS_TABLE(X)                                                            \
    X(PLAN_PASS_F, "F")     /* forward */                                               \
    X(PLAN_PASS_B, "B")     /* full backward (BI + BW) */                               \
    X(PLAN_PASS_BI, "BI")   /* input-gradient backward */                               \
    X(PLAN_PASS_BW, "BW")   /* weight-gradient backward */                              \
    X(PLAN_PASS_R, "R")     /* recompute of a forward before its backward */            \
    X(PLAN_PASS_UPD, "UPD") /* optimizer step */                                        \
    X(PLAN_PASS_AUX, "AUX") /* cross-group numerics: grad-norm, loss and gradient sums */

/* How the cluster's nodes are wired across (docs/plan-format.md, `links`): X(enum, name). */
#define PLAN_TOPOLOGY_TABLE(X)          \
    X(PLAN_TOPO_FAT_TREE, "fat-tree")   \
    X(PLAN_TOPO_RAIL, "rail")

#define PLAN_ENUM_ROW(e, ...) e,
typedef enum { PLAN_DTYPE_TABLE(PLAN_ENUM_ROW) PLAN_NDTYPE } plan_dtype;
typedef enum { PLAN_OP_TABLE(PLAN_ENUM_ROW) } plan_op;
typedef enum { PLAN_COLL_TABLE(PLAN_ENUM_ROW) PLAN_NCOLL } plan_coll;
typedef enum { PLAN_MEM_TABLE(PLAN_ENUM_ROW) PLAN_NMEM } plan_mem;
typedef enum { PLAN_PASS_TABLE(PLAN_ENUM_ROW) PLAN_NPASS } plan_pass;
typedef enum { PLAN_TOPOLOGY_TABLE(PLAN_ENUM_ROW) PLAN_NTOPO } plan_topology;
typedef enum { PLAN_ROLE_TABLE(PLAN_ENUM_ROW) PLAN_NROLE } plan_role;
typedef enum { PLAN_PURPOSE_TABLE(PLAN_ENUM_ROW) PLAN_NPURPOSE } plan_purpose;
typedef enum { PLAN_PIECE_TABLE(PLAN_ENUM_ROW) PLAN_NPIECE } plan_piece;

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
    uint8_t purpose;     /* COLL: plan_purpose, what the collective is for */
    uint8_t piece;       /* COLL: plan_piece, how a member's part of its buffers is cut */
    int32_t stream;      /* index into the device's streams */
    int32_t region;      /* model region (compute; -1 otherwise) */
    int32_t mb;          /* micro-batch (-1 when none) */
    int32_t stage;       /* pipeline stage the instruction belongs to (-1 when none) */
    int32_t kernels;     /* COMPUTE: index into plan->kernel_lists */
    int32_t kid;         /* COMPUTE: index into plan->kernel_ids (the identity exec runs) */
    int32_t peer;        /* SEND/RECV: peer device of the list's owner (see plan_dev_peer) */
    int32_t group;       /* COLL: device group-slot (see plan_dev_group) */
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
    uint8_t role;         /* plan_role: what the buffer is for */
    int32_t region;       /* the model region it belongs to, -1 none (a bucket's, a scalar's) */
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

typedef struct plan_set {
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
} plan_set;

/* ---------------------------------------------------------------- access */

static inline const plan_list *plan_dev_list(const plan_set *p, int dev)
{
    return &p->lists[p->devices[dev].list];
}
static inline int plan_dev_peer(const plan_set *p, int dev, const plan_instr *in)
{
    return in->peer + p->devices[dev].peer_offset;
}
static inline int plan_dev_group(const plan_set *p, int dev, const plan_instr *in)
{
    return p->devices[dev].group_slots[in->group];
}

const char *plan_op_name(plan_op op);
const char *plan_coll_name(plan_coll c);
const char *plan_mem_name(plan_mem m);
const char *plan_pass_name(plan_pass p);
const char *plan_dtype_name(plan_dtype d);
const char *plan_topology_name(plan_topology t); /* "fat-tree", "rail" */
const char *plan_role_name(plan_role r);
const char *plan_purpose_name(plan_purpose p);
const char *plan_piece_name(plan_piece p);
/* The memory category a buffer of role r belongs to, -1 for PLAN_ROLE_NONE (any). */
int plan_role_mem(plan_role r);
/* Whether a collective of kind c may have purpose p. */
bool plan_purpose_allows(plan_purpose p, plan_coll c);
int plan_dtype_bytes(plan_dtype d);

/* ---------------------------------------------------------------- file form */

void plan_init(plan_set *p);
void plan_free(plan_set *p);
/* Sets *in to `op` with every other field at the value the file form leaves unwritten: every
 * index (region, kernels, kid, mb, stage, peer, group, event, buf, tp_group, ep_group) -1 for
 * none; tag, sendrecv, bytes and the rest 0. Builders start from
 * it so that plan files only show what an instruction actually uses (docs/plan-format.md). */
void plan_instr_init(plan_instr *in, plan_op op);
int plan_write(const plan_set *p, FILE *f, base_error *e);
/* Writes the plan file through base_out (base.h), so a reader never sees half a plan and a
 * failure leaves the old file as it was. */
int plan_write_file(const plan_set *p, const char *path, base_error *e);
/* Reads what plan_write wrote into *p (which it initialises; on failure *p is left empty).
 * Malformed files fail with "file:line: ...", never crash: any bytes may be handed in. */
int plan_read(plan_set *p, const char *name, const char *text, size_t len, base_error *e);
int plan_read_file(plan_set *p, const char *path, base_error *e);

/* ---------------------------------------------------------------- roles (plan_roles.c) */

/* The rules that tie roles to the rest of a plan: a buffer's role belongs to its memory category
 * (plan_role_mem), and a collective's purpose is one its kind may have (plan_purpose_allows);
 * other ops do not interpret purpose and piece and keep them as any other field. Each returns
 * NULL when the rule holds, else what is wrong and what to do, written into msg[n]. The reader
 * applies them line by line (file:line); plan_roles_check to a plan built in memory. */
const char *plan_buffer_role_problem(const plan_buffer *b, char *msg, size_t n);
const char *plan_instr_role_problem(const plan_instr *in, char *msg, size_t n);
/* Every buffer and instruction of every list; fails naming the first list and buffer or
 * instruction that breaks a rule. */
int plan_roles_check(const plan_set *p, base_error *e);

/* ---------------------------------------------------------------- replicas (plan_fold.c) */

/* Data-parallel replicas that are relabelled copies of replica 0 (plan_fold.c states the proof):
 * device d + k x shift does what d does, with peers and replica-internal groups shifted and the
 * groups across replicas shared. A consumer may then run replica 0 alone: every copy's
 * instructions start and end when their originals do. */
typedef struct plan_fold {
    int replicas;        /* R >= 2 when folded, else 1 */
    int shift;           /* replica k is replica 0 shifted by k x shift devices */
    int nsimulated;      /* devices of replica 0 (all devices when not folded) */
    int32_t *rep;        /* per device: the replica-0 device it copies (itself when in replica 0) */
    int32_t *index;      /* per device: its replica */
    uint8_t *spanning;   /* per group: spans replicas */
    int32_t *nsim;       /* per group: members in replica 0 */
    int32_t *first_sim;  /* per group: its first member in replica 0, in rank order (-1: none) */
    char reason[200];    /* when not folded: why */
} plan_fold;

/* What a consumer asks beyond the proof (the simulator: its collective algorithms and links).
 * group_ok is asked about each group that spans replicas and layout_ok about a shift that
 * passes everything else; each returns true, or false with why in reason[n]. */
typedef struct plan_fold_rules {
    bool (*group_ok)(void *ctx, const plan_set *p, int g, char *reason, size_t n);
    bool (*layout_ok)(void *ctx, const plan_set *p, const plan_fold *f, char *reason, size_t n);
    void *ctx;
    bool ring_colls_only; /* collectives across replicas: only all-reduce, reduce-scatter, all-gather */
} plan_fold_rules;

/* Finds the shift that folds the most replicas (ties: the smaller shift) under the proof and
 * `rules` (may be NULL), or sets replicas = 1 and the reason. Never fails; expects a plan whose
 * devices, slots, groups and peers are in range (the static check's preparation proves it). */
void plan_fold_find(const plan_set *p, const plan_fold_rules *rules, plan_fold *f);
/* No folding, with the reason (a consumer's own, such as a user's platform). */
void plan_fold_none(plan_fold *f, const plan_set *p, const char *why);
/* Fills nsim, first_sim, spanning (unfolded: every member simulated) and nsimulated. */
void plan_fold_finish(plan_fold *f, const plan_set *p);
void plan_fold_free(plan_fold *f);

/* ---------------------------------------------------------------- static checks */

typedef struct plan_device_stats {
    double peak_bytes;              /* peak of the live total */
    double at_peak[PLAN_NMEM];      /* breakdown at the moment of the peak */
    double peak_by_mem[PLAN_NMEM];  /* each category's own peak */
    double busy_seconds;            /* compute time by the static cost model */
    double end_seconds;             /* when the device's last instruction finished */
    int64_t count_by_op[PLAN_NOP + 1];
} plan_device_stats;

typedef struct plan_stats {
    int ndevices;
    plan_device_stats *dev;   /* malloc'd; free with plan_stats_free */
    double makespan_seconds;
} plan_stats;

/* Nominal link figures of the abstract run: a transfer of b bytes (p2p, or a collective's ring
 * volume) takes LATENCY + b / BW seconds. They only make the static peak and makespan plausible;
 * sim/ predicts real times. */
#define PLAN_CHECK_BW 50e9
#define PLAN_CHECK_LATENCY 5e-6

/* Abstract run in launch order with zero buffering (a send blocks until its receive is posted;
 * sendrecv groups are posted together; collectives complete when every member reaches them),
 * timed with the header's GPU figures. Fails, naming the stuck instructions of each device, if the
 * plan can deadlock, if groups see collectives in inconsistent orders, or if buffers are used or
 * freed when not live. Fills per-device peak memory by category. */
/* The static check's time of one kernel: the roofline at the GPU's peaks, max(FLOPs / peak of its
 * dtype, bytes / HBM bandwidth). piper-search's step-time bound uses the same rule. */
double plan_kernel_seconds(const plan_gpu *g, const plan_kernel *k);
int plan_check(const plan_set *p, plan_stats *st, base_error *e);
void plan_stats_free(plan_stats *st);

/* When the abstract run ran one instruction of one device: from the moment it reached the head of
 * its stream (a p2p operation or collective: was posted; a wait: began waiting) to the moment it
 * finished, in seconds since the step began; instantaneous instructions have start == end. A
 * sendrecv group's members share their start and end. */
typedef void (*plan_timing_fn)(void *ctx, int dev, int instr, double start, double end);
/* plan_check that also tells `timing` (when not NULL) about every instruction as the run
 * finishes it, so that figures (piper-viz schedule) draw the very timing the check computed.
 * Same result, stats and errors as plan_check; a failed run stops reporting where it stops. */
int plan_check_timed(const plan_set *p, plan_stats *st, plan_timing_fn timing, void *ctx,
                     base_error *e);

/* The issuing host. plan_check runs every stream from the start, as the executors do (their
 * interpreter issues without blocking). The simulator's host issues each device's launch order
 * and, at the blocking points of the kinds `host` selects (PLAN_BLOCK_*, plan_index.block: the
 * one rule of where a host blocks), waits until the device has finished everything launched so
 * far. plan_check_host is plan_check's run with that host: it fails, naming each stuck device's
 * instructions and the sync point its host waits at, where a blocking host deadlocks.
 * Blocking only adds dependencies (transfers match by tag, collectives by sequence number), so a
 * plan that completes with a host completes with any host that blocks at a subset of its points,
 * and without one. */
int plan_check_host(const plan_set *p, unsigned host, plan_stats *st, base_error *e);
/* The blocking points a runtime's host may keep on this plan: the first of all kinds,
 * NORM + BATCH, NORM, BATCH under which plan_check_host passes, else 0 (the host posts p2p
 * asynchronously and never waits). why (may be NULL) gets the deadlock of the host that blocks
 * at all kinds when that one fails, and is cleared otherwise. */
unsigned plan_host_blocks(const plan_set *p, base_error *why);

/* The abstract run without a host under unit costs (plan_unit_durations with F = 1, B = 2,
 * BI = BW = 1, other passes 0) and free communication: the step's makespan in units, or -1 if
 * the plan does not pass plan_check. What an order costs, whatever the model's sizes: the
 * compiler compares p2p stream layouts by it. */
double plan_unit_makespan(const plan_set *p);

/* A deadlock's stuck instructions as data, for callers that point at their source (the
 * compiler names an order file's cells): per device the report lists, in its order, the
 * instruction its first listed stream is stuck at. */
#define PLAN_STUCK_MAX 8
typedef struct plan_stuck_instr {
    int32_t dev, instr; /* device, launch index in its list */
} plan_stuck_instr;
typedef struct plan_stuck {
    int n;
    plan_stuck_instr at[PLAN_STUCK_MAX];
} plan_stuck;

/* How a check runs. By default it runs one device per replica class (plan_fold_find): the verdict,
 * every device's peaks and times are those of the run over every device, which all_devices asks
 * for (piper-compile --check-all-devices); a failing run is run again over every device for its
 * message. */
typedef struct plan_check_opts {
    unsigned host;      /* as plan_check_host: PLAN_BLOCK_* kinds at which the host blocks; 0: none */
    bool unit;          /* unit costs and free communication (plan_unit_makespan) */
    bool all_devices;   /* run every device itself */
    plan_stuck *stuck;  /* may be NULL: filled (n = 0 when none) with a deadlock's stuck instructions */
} plan_check_opts;
int plan_check_opt(const plan_set *p, const plan_check_opts *o, plan_stats *st, base_error *e);
/* plan_host_blocks and plan_unit_makespan with o's all_devices (o may be NULL: the defaults). */
unsigned plan_host_blocks_opt(const plan_set *p, const plan_check_opts *o, base_error *why);
double plan_unit_makespan_opt(const plan_set *p, const plan_check_opts *o);


/* ---------------------------------------------------------------- index of a list */

/* Where the host that issues a list in launch order blocks until its GPU has done everything
 * issued so far (sim/'s host model, docs/simulator.md "The host"), as bits of plan_index.block:
 *  - P2P: a p2p run, at its first instruction: the framework posts it and synchronises
 *    (Megatron's batch_isend_irecv, then torch.cuda.synchronize());
 *  - NORM: the gradient norm's all-reduce: the first collective on the stream of an
 *    `aux.grad_norm` compute after it, or the compute itself when its stream reaches another
 *    compute (or its end) first: the host reads the norm back to clip;
 *  - BATCH: the instruction before a micro-batch's first forward compute (micro-batches begin in
 *    order from 0): the host loads the batch's input.
 * A consumer selects the kinds it models. */
enum { PLAN_BLOCK_P2P = 1u, PLAN_BLOCK_NORM = 2u, PLAN_BLOCK_BATCH = 4u, PLAN_BLOCK_ALL = 7u };

/* One index of one instruction list, built once in time linear in the list (plus its stream,
 * event and slot counts) and read by the static check, the simulator and the interpreter, so that
 * they agree on what a list means. Arrays with one entry per instruction are indexed by launch
 * index; all of them are owned by the index. */
typedef struct plan_index {
    int list, n, nstreams, ngroup_slots;
    int32_t *soff;       /* nstreams + 1: stream s runs sidx[soff[s] .. soff[s+1]) */
    int32_t *sidx;       /* launch indices grouped by stream, in launch order inside each */
    int32_t *spos;       /* per instruction: its position in its stream's queue */
    /* WAIT: launch index of the record it waits for: the latest record of its event before it in
     * launch order (CUDA's rule), or the first one when none precedes it; -1 for other ops */
    int32_t *wait;
    /* p2p runs: a sendrecv group (consecutive p2p instructions of one stream sharing a nonzero
     * `sendrecv` id, posted together), or a lone p2p instruction. The run's first instruction in
     * its stream holds the run's length, every other instruction 0. */
    int32_t *run;
    int32_t *coll_seq;   /* COLL: its sequence number among the list's collectives on its slot; -1 */
    int32_t *slot_ncoll; /* per group slot: collectives issued through it */
    uint8_t *block;      /* per instruction: PLAN_BLOCK_* bits */
    int32_t early_wait;  /* the first wait (by event, then launch index) launched before every
                            record of its event, where CUDA alone would not wait; -1: none */
    int32_t max_run;     /* longest p2p run (0: no p2p) */
} plan_index;

/* Indexes list `list` of `p`. Fails, naming the instruction, on what no consumer can run: a
 * stream, event or collective slot out of range, a wait whose event the list never records, and a
 * sendrecv group whose members are not consecutive on their stream. Messages name the first
 * device that uses the list, as the static check's do. On failure *ix is left empty (freeing it is
 * harmless). */
int plan_index_build(plan_index *ix, const plan_set *p, int list, base_error *e);
void plan_index_free(plan_index *ix);

/* Unit costs (closed-form what-ifs: piper-sim --costs unit:..., the compiler's choice of p2p
 * streams): out[i] is the seconds instruction i of list `list` takes when a stage's pass P costs
 * unit[P] (PLAN_NPASS entries) per micro-batch, shared equally by the list's computes of that
 * pass, stage and micro-batch (a stage's regions); 0 for every other instruction. */
void plan_unit_durations(const plan_set *p, int list, const double *unit, double *out);

/* Stream s's queue: *len launch indices, in launch order. */
static inline const int32_t *plan_index_stream(const plan_index *ix, int s, int *len)
{
    *len = ix->soff[s + 1] - ix->soff[s];
    return ix->sidx + ix->soff[s];
}

/* A device's collective numbering when two of its slots with collectives name one group, so that
 * the group's k-th collective is counted across both, in launch order: malloc'd, one entry per
 * instruction (COLL only). NULL when the slots name distinct groups and ix->coll_seq is the
 * device's numbering. Expects the device's slots to be valid group ids. */
int32_t *plan_index_device_coll_seq(const plan_index *ix, const plan_set *p, int dev);

/* Appends "#12 send s=pp peer=3 tag=17 mb=2 stage=0" to *b: instruction i of list `list` with the
 * peers and groups device `dev` sees (dev < 0: the list's own peers, no groups), enough to find
 * its line in the plan file. Safe on fields out of range. */
void plan_instr_describe(base_buf *b, const plan_set *p, int list, int dev, int i);
/* Sets *e to "device 3 (list 1) #12 free ...: MESSAGE" (dev < 0: "list 1 #12 ...: MESSAGE"), the
 * one form in which plan/ names an instruction in an error; returns -1. */
int plan_instr_errorv(base_error *e, const plan_set *p, int list, int dev, int i, const char *fmt, va_list ap);

#endif /* PIPER_PLAN_PLAN_H */
