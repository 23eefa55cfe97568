/* dag.h — the global training DAG (part of ir/, included by ir.h).
 *
 * One node per computation or communication of a whole training step, for every micro-batch;
 * SPMD: a node runs on every device of its placement (replicas are not separate nodes), so the
 * DAG grows with layers x micro-batches, not with the number of GPUs. Edges are `data` (a tensor
 * flows from its one producer) or `temporal` (ordering only, added by `order`). Directives are
 * passes over this structure (sched/); ir_dag_verify runs after each.
 *
 * Nodes and edges live in flat arrays and are never moved; a pass removes a node by marking it
 * dead. Adjacency (CSR) is rebuilt on demand after edits. */
#ifndef PIPER_IR_DAG_H
#define PIPER_IR_DAG_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/base.h"
#include "../plan/plan.h"
#include "model.h"

typedef enum { IR_KIND_COMPUTE, IR_KIND_P2P, IR_KIND_COLL, IR_KIND_DUMMY } ir_op_kind;

/* The op table: every op once, with its kind, the plan pass of compute ops and the plan
 * collective of collective ops. Enums and names are generated from it. */
#define IR_OPS(X)                                                                        \
    /* op           kind             pass            collective          */              \
    X(F,            IR_KIND_COMPUTE, PLAN_PASS_F,    PLAN_NCOLL)                         \
    X(B,            IR_KIND_COMPUTE, PLAN_PASS_B,    PLAN_NCOLL)                         \
    X(BI,           IR_KIND_COMPUTE, PLAN_PASS_BI,   PLAN_NCOLL)                         \
    X(BW,           IR_KIND_COMPUTE, PLAN_PASS_BW,   PLAN_NCOLL)                         \
    X(R,            IR_KIND_COMPUTE, PLAN_PASS_R,    PLAN_NCOLL)                         \
    X(UPD,          IR_KIND_COMPUTE, PLAN_PASS_UPD,  PLAN_NCOLL)                         \
    X(GRAD_NORM,    IR_KIND_COMPUTE, PLAN_PASS_AUX,  PLAN_NCOLL) /* local sum of squares */ \
    X(AUX_LOSS,     IR_KIND_COMPUTE, PLAN_PASS_AUX,  PLAN_NCOLL) /* MoE load-balance loss */ \
    X(SEND,         IR_KIND_P2P,     PLAN_NPASS,     PLAN_NCOLL)                         \
    X(RECV,         IR_KIND_P2P,     PLAN_NPASS,     PLAN_NCOLL)                         \
    X(ALL_REDUCE,   IR_KIND_COLL,    PLAN_NPASS,     PLAN_ALL_REDUCE)                    \
    X(REDUCE_SCATTER, IR_KIND_COLL,  PLAN_NPASS,     PLAN_REDUCE_SCATTER)                \
    X(ALL_GATHER,   IR_KIND_COLL,    PLAN_NPASS,     PLAN_ALL_GATHER)                    \
    X(ALL_TO_ALL,   IR_KIND_COLL,    PLAN_NPASS,     PLAN_ALL_TO_ALL)                    \
    X(ORDER,        IR_KIND_DUMMY,   PLAN_NPASS,     PLAN_NCOLL) /* joins order groups */

typedef enum {
#define IR_OP_ENUM(op, kind, pass, coll) IR_OP_##op,
    IR_OPS(IR_OP_ENUM)
#undef IR_OP_ENUM
    IR_NOPS
} ir_op;

typedef struct ir_op_info {
    const char *name;
    ir_op_kind kind;
    plan_pass pass;
    plan_coll coll;
} ir_op_info;

extern const ir_op_info IR_OP_INFO[IR_NOPS];

/* Which devices of a node's placement a collective spans. */
typedef enum {
    IR_CG_NONE,
    IR_CG_TP,      /* the tensor-parallel group of each device */
    IR_CG_DP,      /* the data-parallel group (devices with the same TP rank) */
    IR_CG_EP,      /* the expert-parallel group (inside DP) */
    IR_CG_WORLD,   /* every device of the program (global gradient norm) */
    IR_CG_PAIR,    /* devices of this placement with those of `peer_place`, rank by rank
                      (tied-embedding and mirrored-stage gradient sums) */
    IR_CG_EDP      /* expert data parallelism: the data-parallel ranks that hold the same
                      experts (one per expert-parallel group), for expert gradients */
} ir_coll_group;

/* Where a node runs: a device list (SPMD: every device runs the node). The parallel structure
 * inside it belongs to each node (ir_node.tp/ep): position i in `devs` has tensor-parallel rank
 * i mod tp and data-parallel rank i / tp; expert-parallel groups are runs of `ep` consecutive
 * data-parallel ranks. Placements are interned: equal device lists, equal id. */
typedef struct ir_place {
    int ndev;
    int32_t *devs;
} ir_place;

/* Node flags */
enum {
    IR_NODE_EP = 1 << 0,        /* annotated EP (expert block) */
    IR_NODE_TP = 1 << 1,        /* annotated TP (tensor-parallel block) */
    IR_NODE_PER_MB = 1 << 2,    /* one copy per micro-batch (split copies it) */
    IR_NODE_DP_SYNC = 1 << 3,   /* data-parallel gradient/parameter communication */
    IR_NODE_TIED = 1 << 4,      /* tied embeddings: the head UPD holding the embedding copy, and
                                   the pair all-reduces that sum the two gradients */
    IR_NODE_JIT = 1 << 5,       /* ordering issues it just before its consumer: recompute,
                                   ZeRO-3 parameter gathers */
    IR_NODE_FUSED = 1 << 6      /* a collective fuse_collectives made of several: it moves
                                   every input tensor (sizes sum them) */
};

typedef struct ir_node {
    uint8_t op;           /* ir_op */
    uint8_t dead;         /* removed by a pass; ids stay stable */
    uint8_t recompute;    /* ir_recompute: for F (what it keeps) and R (what it recomputes) */
    uint8_t coll_group;   /* ir_coll_group for collectives */
    uint16_t flags;
    int16_t stream;       /* index into dag->streams */
    int16_t tp;           /* tensor-parallel degree the node runs with (1 = none) */
    int16_t ep;           /* expert-parallel degree (1 = none) */
    uint8_t sp;           /* sequence parallelism with TP */
    uint8_t dp;           /* replicated with ZeRO stage dp-1 (0 = not replicated) */
    uint8_t pass;         /* plan_pass the node belongs to (communication: its compute's pass) */
    int32_t region;       /* model region, -1 when none */
    int32_t layer;        /* -1 when none */
    int32_t mb;           /* micro-batch, -1 for per-step nodes */
    int32_t stage;        /* PP tag, -1 when none */
    int32_t chunk;        /* model chunk on its rank (V / interleaved schedules), 0 default */
    int32_t place;        /* index into dag->places */
    int32_t peer_place;   /* SEND: the receiver's placement; RECV: the sender's; PAIR colls */
    int32_t link;         /* SEND<->RECV partner; R -> its backward; -1 */
    int32_t directive;    /* index of the directive that created the node, -1 for the base DAG */
    int32_t bucket;       /* DP sync: bucket index; -1 */
    double bytes;         /* communication: bytes per device; compute: its workspace
                             (ir_region_work_bytes, set with the other sizes) */
} ir_node;

typedef enum { IR_EDGE_DATA, IR_EDGE_TEMPORAL } ir_edge_kind;

typedef struct ir_edge {
    int32_t src, dst;
    int32_t tensor;       /* data edges: the tensor that flows; -1 for temporal edges */
    uint8_t kind;         /* ir_edge_kind */
    uint8_t dead;
} ir_edge;

typedef enum {
    IR_T_ACT,        /* region output crossing to the next region */
    IR_T_SAVED,      /* activations a forward keeps for its backward (or recompute checkpoint) */
    IR_T_RECOMP,     /* activations rebuilt by R for its backward */
    IR_T_GRAD_ACT,   /* gradient flowing back across a region boundary */
    IR_T_GRAD,       /* a micro-batch's weight gradient, accumulated into the region's buffer */
    IR_T_GRAD_SYNC,  /* the region's gradient after data-parallel reduction */
    IR_T_PARAM,      /* parameters after the optimizer step */
    IR_T_SCALAR,     /* loss, gradient norm, load-balancing loss */
    IR_T_COMM        /* a communication result (received buffer, gathered params, ...) */
} ir_tensor_kind;

typedef struct ir_tensor {
    int32_t producer;
    uint8_t kind;    /* ir_tensor_kind */
    int32_t region;
    int32_t mb;
    double bytes;    /* per device */
} ir_tensor;

typedef struct ir_dag {
    base_arena *arena;
    const ir_model *model;
    int nregions;
    ir_region *regions;

    ir_node *nodes;
    size_t nnodes, cap_nodes;
    ir_edge *edges;
    size_t nedges, cap_edges;
    ir_tensor *tensors;
    size_t ntensors, cap_tensors;
    ir_place *places;
    int nplaces;
    size_t cap_places;
    const char **streams;   /* logical stream names; 0 is "compute" */
    int nstreams;
    size_t cap_streams;

    /* adjacency, valid while adj_valid: in/out edge ids of node v are
     * in_edge[in_off[v] .. in_off[v+1]) and out_edge[out_off[v] .. out_off[v+1]) */
    bool adj_valid;
    int32_t *in_off, *in_edge, *out_off, *out_edge;

    int64_t num_microbatches;
    int world;               /* devices in the cluster */
    bool p2p_done;           /* placements are final and every crossing goes through SEND/RECV;
                                before that the verifier does not check placement consistency */
} ir_dag;

/* ---------------------------------------------------------------- building */

void ir_dag_init(ir_dag *g, base_arena *a, const ir_model *m, int world);
int32_t ir_dag_add_node(ir_dag *g, ir_op op);
int32_t ir_dag_add_tensor(ir_dag *g, int32_t producer, ir_tensor_kind kind, double bytes);
int32_t ir_dag_add_edge(ir_dag *g, int32_t src, int32_t dst, int32_t tensor, ir_edge_kind kind);
int ir_dag_intern_place(ir_dag *g, const ir_place *p);
int ir_dag_intern_stream(ir_dag *g, const char *name);
void ir_dag_build_adjacency(ir_dag *g);

/* The single-device training step for one micro-batch (split copies it): forward of every
 * region, the loss, backward in reverse, one optimizer step per region with parameters, and the
 * cross-group numerics as nodes (per stage: the gradient norm's local sum of squares and its
 * world all-reduce when `grad_clip`; per stage and micro-batch: the MoE load-balancing loss).
 * `stage_of_region` gives each region's PP tag (NULL: every region is stage 0); EP and TP tags
 * mark expert blocks and the attention/MLP blocks. Everything starts on device 0. Tensor and
 * communication sizes are filled in later (they depend on the directives). */
int ir_dag_build_training_step(ir_dag *g, const int32_t *stage_of_region, bool tag_ep,
                               bool tag_tp, bool grad_clip, base_error *e);

/* ---------------------------------------------------------------- checks and dumps */

/* Acyclic, one producer per tensor (the edge's source), data edges stay inside a placement
 * except SEND -> RECV, collectives and p2p have sane groups, costs are finite and >= 0.
 * `after` names the pass for the message ("prog.yaml:12:5: directive 3 (place)"). */
int ir_dag_verify(ir_dag *g, const char *after, base_error *e);

/* Text dump (one line per node with tags, placement, stream, bytes; then edges) and Graphviz dot. */
void ir_dag_dump_text(const ir_dag *g, FILE *f);
void ir_dag_dump_dot(const ir_dag *g, FILE *f);

const char *ir_op_name(ir_op op);
/* "F L3.attn mb2" — a short human name for messages. Returns buf. */
const char *ir_node_label(const ir_dag *g, int32_t v, char *buf, size_t n);

static inline int ir_dag_live_nodes(const ir_dag *g)
{
    int n = 0;
    for (size_t i = 0; i < g->nnodes; i++) n += !g->nodes[i].dead;
    return n;
}

#endif
