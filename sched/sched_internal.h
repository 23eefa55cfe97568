/* sched_internal.h — what the compiler's passes share inside sched/ (not part of its contract):
 * the pass context, filter matching, the sizes pass and the helpers that splice communication
 * nodes into the DAG. */
#ifndef PIPER_SCHED_INTERNAL_H
#define PIPER_SCHED_INTERNAL_H

#include "sched.h"

/* Ordering: per device class, a launch order of node ids (ordering.c). */
typedef struct sched_order {
    int nclasses;
    int *class_of_device;      /* device -> class */
    int *class_rep;            /* class -> representative device */
    int *class_nnodes;
    int32_t **class_nodes;     /* launch order of each class */
    double *node_seconds;      /* cost-model duration of each node */
} sched_order;

/* What the passes share (compile.c's driver makes one for sched_build_dag's passes and one
 * for sched_lower's). */
typedef struct sched_ctx {
    sched_compilation *c;
    const ir_program *prog;
    ir_dag *g;
    base_arena *a;             /* the compilation's arena: what outlives the pass */
    base_arena scratch;        /* the running pass's temporaries: the driver empties it after
                                  each pass and each directive, so error paths free nothing */
    bool split_done;
    bool order_seen;           /* an order/schedule directive ran: structure is frozen */
    int first_order;           /* the first order or schedule directive (ndirectives: none) */
    int32_t *stage_of_region;
    int mirror_p;              /* DualPipe: the pipeline ranks p once stages are mirrored; 0 */
    int64_t mesh_size;         /* a mesh directive: the product of its axes (each stage's group
                                  size), and the size of its tp axis (0: none) */
    int64_t mesh_tp;
    struct sched_costs *costs; /* made after the directives ran (shapes are final) */
    sched_order order;         /* the launch order (the launch pass), which lowering reads */
    sched_options opt;         /* the options of the plan passes */
} sched_ctx;

/* A growable array (BASE_VEC) in an arena, here the pass scratch: nothing to free. */
#define SCHED_PUSH(arena, vec, x)                                                              \
    do {                                                                                       \
        (vec).v = base_arena_grow((arena), (vec).v, &(vec).cap, (vec).n + 1, sizeof *(vec).v); \
        (vec).v[(vec).n++] = (x);                                                              \
    } while (0)

/* "prog.yaml:12:5: directive 3 (place)" */
const char *sched_dir_where(const ir_directive *d, char *buf, size_t n);
/* Error located at the directive: "prog.yaml:12:5: directive 3 (place): <msg>" */
int sched_dir_error(const ir_directive *d, base_error *e, const char *fmt, ...) BASE_PRINTF(3, 4);

bool sched_filter_match(const ir_dag *g, int32_t v, const ir_filter *f);
/* The pass tag of a node (compute: its op; communication: the pass it belongs to). */
plan_pass sched_node_pass(const ir_dag *g, int32_t v);

/* Splicing collectives into the DAG. "After": on every edge that carries `tensor` from its
 * producer (producer -(t)-> C -(t')-> consumers), done in one batch so a pass over the edges
 * serves any number of insertions. "Before": on one incoming edge of v only. Tags, placement
 * and micro-batch come from `like` (resp. v). Do befores first, then the batch of afters. */
typedef struct sched_coll_req {
    int32_t tensor;
    ir_op op;
    ir_coll_group cg;
    int32_t like;
    int stream;
} sched_coll_req;
/* A new node that inherits the tags, placement, micro-batch, pass and parallel degrees of `like`
 * (its PER_MB, EP and TP flags). */
int32_t sched_add_node_like(ir_dag *g, ir_op op, int32_t like);
void sched_insert_colls_after(ir_dag *g, const sched_coll_req *req, size_t n);
int32_t sched_insert_coll_before(ir_dag *g, int32_t v, int32_t edge, ir_op op, ir_coll_group cg,
                                 int stream);

/* Position of a device in a placement (-1 if absent), and the members of a device's group of
 * kind cg (TP: consecutive positions; DP: the same TP rank in every TP group; EP: runs of `ep`
 * data-parallel ranks; WORLD: everyone; PAIR: the device and the one at its position in
 * `peer_place`). Returns the member count written to out. */
int sched_place_pos(const ir_place *p, int dev);
int sched_group_members(const ir_dag *g, int place, int peer_place, ir_coll_group cg, int tp,
                        int ep, int dev, int32_t *out);
/* Tied embeddings on different stages: the head's stage holds a copy of the embedding and the
 * two gradients are summed by an all-reduce over each (embed device, head device) pair. */
int sched_tie_embeddings(sched_ctx *x, base_error *e);
/* Route every gradient into the UPD node `upd` through a new pair all-reduce (IR_CG_PAIR) with
 * `peer_place`, on the dp stream; gradient-norm reads of those gradients move to the sum.
 * Returns the all-reduce, flagged IR_NODE_TIED (it carries the tied embedding copy; DualPipe's
 * mirror clears the flag: its sums carry the whole region's gradient). */
int32_t sched_insert_pair_sum(ir_dag *g, int32_t upd, int peer_place);
/* DualPipe (dualpipe_mirror.c): copy stages 0..p-1 as stages p..2p-1 (stage p+i on the
 * placement of stage p-1-i) for micro-batches m/2..m-1, each mirrored parameter update paired
 * with its original by a gradient sum. Runs before the sends and receives are made. */
int sched_dualpipe_mirror(sched_ctx *x, const ir_directive *d, base_error *e);
/* Tensor-parallel regions: an all-reduce over the TP group completes the gradients of the
 * parameters every TP rank holds whole (tp_sync.c), and how many such parameters a region has. */
int sched_tp_grad_sync(sched_ctx *x, base_error *e);
/* Gradient-norm and load-balancing-loss nodes join the placement of their inputs. */
int sched_settle_aux_nodes(sched_ctx *x);
/* Data-parallel reductions of expert gradients span only the ranks holding the same experts. */
int sched_expert_grad_groups(sched_ctx *x);
/* Sequence parallelism: the backward of each SP attention, MLP and head re-gathers the norm
 * input and output shards its forward kept (dir_shard.c). Once, when placements are final. */
void sched_sp_backward_gathers(sched_ctx *x);
/* Recomputes read what their forwards read (dir_recompute.c): once placements are final. */
void sched_link_recomputes(sched_ctx *x);
int64_t sched_tp_replicated_params(const ir_model *m, const ir_region *r, const ir_shape *s);
/* The tensor-parallel degree of a placement: the largest of its nodes'. Groups that cut across
 * TP (data and expert parallelism) are formed with it, also for nodes that are not themselves
 * tensor-parallel (a MoE router next to TP attention). */
int sched_placement_tp(const ir_dag *g, int place);
/* The directive's devices must be exactly one group of kind cg of node v's placement. */
int sched_check_subgroup(const sched_ctx *x, const ir_directive *d, int32_t v, ir_coll_group cg,
                         int tp, int ep, base_error *e);

/* Re-derive SEND/RECV pairs from placements: every data edge between different placements gets
 * a pair; pairs whose ends share a placement disappear. */
int sched_fix_p2p(sched_ctx *x, base_error *e);

/* Recompute every tensor and communication size from the current structure and shapes. */
void sched_update_sizes(sched_ctx *x);
/* The ir_shape a node runs with (an optimizer step under ZeRO >= 1: opt_shards = its DP group). */
ir_shape sched_node_shape(const sched_ctx *x, int32_t v);
/* The devices holding the same parameters as optimizer step n's region, over which ZeRO shards
 * its state: the data-parallel group (place devices / TP), or for experts under expert
 * parallelism the ranks with the same experts (IR_CG_EDP, where their gradients are reduced). */
int sched_upd_replicas(const ir_dag *g, const ir_node *n);

int sched_dir_split(sched_ctx *x, const ir_directive *d, base_error *e);
int sched_dir_place(sched_ctx *x, const ir_directive *d, base_error *e);
int sched_dir_replicate(sched_ctx *x, const ir_directive *d, base_error *e);
int sched_dir_shard(sched_ctx *x, const ir_directive *d, base_error *e);
int sched_dir_shard_tensor(sched_ctx *x, const ir_directive *d, base_error *e);
int sched_dir_recompute(sched_ctx *x, const ir_directive *d, base_error *e);
int sched_dir_order(sched_ctx *x, const ir_directive *d, base_error *e);
int sched_dir_mesh(sched_ctx *x, const ir_directive *d, base_error *e);
int sched_dir_fuse_collectives(sched_ctx *x, const ir_directive *d, base_error *e);
int sched_dir_route(sched_ctx *x, const ir_directive *d, base_error *e);
int sched_dir_ring_exchange(sched_ctx *x, const ir_directive *d, base_error *e);
/* A Piper array's group: its shard_tensor and replicate name each stage's whole device group
 * (Piper checks that the matching nodes run on exactly those devices); with a mesh that has a
 * tp axis, the tensor-parallel group is the first mesh_tp devices and the data-parallel group
 * every mesh_tp-th. Returns d itself when there is nothing to derive, else *tmp, a copy naming
 * the derived group. */
const ir_directive *sched_piper_group(const sched_ctx *x, const ir_directive *d,
                                      ir_coll_group cg, ir_directive *tmp);

int sched_order_nodes(sched_ctx *x, sched_order *o, base_error *e);

int sched_lower_plan(sched_ctx *x, const sched_order *o, const sched_options *opt, base_error *e);


/* Kernel lists and durations of nodes (costs.c), cached by region kind, pass and shape. */
typedef struct sched_costs sched_costs;
sched_costs *sched_costs_new(sched_ctx *x);
void sched_costs_free(sched_costs *c);
/* The node's kernel list (compute nodes; empty list for others). Lists live in the DAG arena. */
const plan_kernel_list *sched_node_kernels(sched_costs *c, int32_t v);
/* Kernel identity the executor runs: "gpt.attn.F", "aux.grad_norm", ... (arena string). */
const char *sched_node_kernel_id(sched_costs *c, int32_t v);
/* Static cost-model duration: compute by roofline, communication by bytes over the link. */
double sched_node_seconds(sched_costs *c, int32_t v);
/* The cache entry of a compute node (-1 for others), and the entries themselves. */
int sched_node_cost_entry(sched_costs *c, int32_t v);
int sched_costs_count(const sched_costs *c);
const plan_kernel_list *sched_costs_list(const sched_costs *c, int i);
const char *sched_costs_kid(const sched_costs *c, int i);

#endif
