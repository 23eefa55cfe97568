/* plan_layout.h — the rules under the binding layer (exec/bind.h, which every executor backend
 * reads a plan through): how a region's name says its layer and kind, which regions a device
 * runs and on which TP/EP groups, who holds which region, the ZeRO piece of a group member, which
 * kernel identity a compute names, where a compute's boundary tensors go when no communication
 * buffer carries them, and the records a binding fills (exec_buf, exec_coll, exec_seg). One
 * reading, so that the backends cannot drift apart on the same plan (the CUDA runtime's losses
 * are checked against the CPU executor's). Plain C over plan/plan.h and the model vocabulary
 * (exec/model.h). */
#ifndef PIPER_EXEC_PLAN_LAYOUT_H
#define PIPER_EXEC_PLAN_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/base.h"
#include "../plan/plan.h"
#include "model.h"

/* What a plan buffer of the device is to a backend, and the backend's own size and storage of
 * it. The role is the plan's (plan_buffer.role), as exec/bind.c's role functions read it and
 * check it against the instructions that use the buffer. */
typedef enum {
    EXEC_BUF_NONE,
    EXEC_BUF_PARAM,
    EXEC_BUF_GRAD,
    EXEC_BUF_OPT,
    EXEC_BUF_ACT,
    EXEC_BUF_COMM,
    EXEC_BUF_GATHERED,
    EXEC_BUF_WORK       /* a compute's workspace (a BI's, read by its BW too) */
} exec_buf_role;

typedef struct exec_buf {
    exec_buf_role role;
    int region;         /* PARAM/GRAD/OPT/ACT: the region; COMM: the region that uses it */
    int64_t bytes;      /* the backend's size (its kernels' layouts) */
    char *p;            /* storage, host (CPU) or device (CUDA); kept across steps for
                           parameters, gradients and optimizer state */
    bool live;
    bool init;          /* parameters, optimizer state: initialised */
    bool table;         /* GATHERED for the head: the embedding's token table follows the head's
                           parameters (tied embeddings, ZeRO-3, both on this device) */
    bool saved_gather;  /* COMM: sequence parallelism's backward re-gather (sched/dir_shard.c):
                           an all-gather of the leading [norm input | norm output] shards of a
                           region's act buffer, read by that region's backward */
} exec_buf;

/* A piece of a region's parameter storage (elements) that a collective moves. */
typedef struct exec_seg {
    int region;
    int64_t off, n;
    int buf;  /* the plan buffer holding it (a gradient collective's read), -1: the region's own */
    int out;  /* ZeRO-2/3 reduce-scatter: the buffer its piece is added into, -1: in place */
} exec_seg;

/* A segment of region r's storage in the region's own buffer. */
static inline exec_seg exec_seg_at(int region, int64_t off, int64_t n)
{
    return (exec_seg){region, off, n, -1, -1};
}

/* What a collective instruction is to a backend: an activation collective (its pieces), a
 * gradient sum (the segments summed), a ZeRO reduce-scatter of gradients or all-gather of
 * parameters (one segment per region), or the sum of a scalar (the gradient norm, a collective
 * without buffers). */
typedef enum {
    EXEC_COLL_NONE,
    EXEC_COLL_ACT,
    EXEC_COLL_GRAD_SUM,
    EXEC_COLL_GRAD_SCATTER,
    EXEC_COLL_PARAM_GATHER,
    EXEC_COLL_SCALAR
} exec_coll_kind;

/* One piece of an activation collective: the plan buffer it reads, the one its result goes to
 * (the same: in place), and the bytes it sends from in and receives into out, in the backend's
 * layouts (bind.c's rule: an sp_regather sends the leading share of in). A collective that
 * fuse_collectives merged has one piece per member, in the order the plan lists its buffers;
 * any other has one. */
typedef struct exec_piece {
    int in, out;
    int64_t in_bytes, out_bytes;
} exec_piece;

typedef struct exec_coll {
    exec_coll_kind kind;
    int group, gsize, grank;
    int comm;               /* the backend's communicator, -1 */
    int out;                /* PARAM_GATHER: the buffer a ZeRO-3 gather fills, -1 when it
                               gathers into the parameters */
    int npiece;             /* ACT: its pieces (one or more) */
    exec_piece *piece;
    int nseg;
    exec_seg *seg;
    int64_t chunk;          /* SCATTER / GATHER: elements per rank in staging (the largest piece) */
} exec_coll;

/* Sequence parallelism's backward re-gathers: marks (exec_buf.saved_gather, role COMM, the
 * all-gather's region) the regathered buffer each sp_regather writes; the backend sizes it in its
 * own layout. Returns how many, or -1 (naming the instruction) when an sp_regather does not read
 * one saved or recomputed buffer into one regathered buffer. */
int exec_mark_saved_gathers(const plan_set *p, int dev, exec_buf *buf, base_error *e);
/* Sequence parallelism: a tensor-parallel region r whose tp_fwd or tp_bwd collectives over its
 * TP group are all-gathers or reduce-scatters (piece even, rather than all-reduces) holds b*s/tp
 * tokens outside its TP-split GEMMs; its kernels then keep that share of their rows
 * (exec_shard.sp). */
bool exec_sequence_parallel(const plan_set *p, int dev, int r, int tp_group);

/* A region's recompute mode from the plan: the bytes of the first saved buffer its forward
 * writes (*fb) and of the first recomputed buffer its recompute writes (*rb) on list L, -1 where
 * there is none; then the mode whose
 * split of the backend's act buffer (split: *kept for F, *rebuilt for R) is those sizes, so that
 * what F keeps and what R rebuilds are the plan's tensors. *mode is EXEC_ACT_ALL when no mode
 * matches (F and R then keep the whole layout each). Both executors read plans so. */
void exec_plan_act_bytes(const plan_list *L, int r, int64_t *fb, int64_t *rb);
typedef int (*exec_act_split_fn)(const void *ctx, exec_act_mode mode, int64_t *kept,
                                 int64_t *rebuilt, base_error *e);
int exec_match_act_mode(int64_t fb, int64_t rb, exec_act_split_fn split, const void *ctx,
                        exec_act_mode *mode, int64_t *kept, int64_t *rebuilt, base_error *e);
/* Where a workspace's second part starts (what a pass computes and does not keep, sched/sizes.c):
 * after the kernels' w bytes, at a multiple of 8. */
static inline int64_t exec_work_extra_at(int64_t w) { return (w + 7) / 8 * 8; }

/* Starts reading collective instruction i of device dev into C: its group, the group's size and
 * the device's position (out, comm: -1; no pieces). Fails when the device is not a member. */
int exec_coll_open(const plan_set *p, int dev, int i, exec_coll *C, base_error *e);

/* The gradient segments [seg0, C->nseg) of region r that collective `in` of list L reads from
 * buffer bb live there (exec_seg.buf). A ZeRO-2/3 zero_scatter that writes adds each segment's
 * piece into the buffer among its writes of role grad_piece owned by r (exec_seg.out), which must
 * be the region's kept gradient `kept`, the one its optimizer step reads. Returns 1 when the
 * segments go into `kept` as a piece, 0 when they stay in place, -1 when the writes name no such
 * buffer. */
int exec_grad_segs_bind(exec_coll *C, int seg0, const plan_list *L, const plan_instr *in, int bb,
                        const exec_buf *buf, int r, int kept);

/* The data-parallel rank of the device: its position in the group of the first dp_grad_sum or
 * zero_scatter (coll[] per instruction of L) that reads or writes region r0's gradient buffer,
 * over a group of dp_size devices that all run r0, other than r0's TP and EP groups; -1 when
 * there is none. */
int exec_dp_rank_find(const plan_set *p, const plan_list *L, const exec_coll *coll,
                      bool *const *holds, int r0, int tp_group, int ep_group, int grad_buf,
                      int64_t dp_size);

/* Gives buffer B the role `role` for region `region` and grows it to `bytes`; -1 (B unchanged)
 * when it already has another role, or the same role for another region (a comm buffer may
 * carry tensors of several regions). The backends give a buffer one role. */
int exec_buf_set_role(exec_buf *B, exec_buf_role role, int region, int64_t bytes);

/* Plan buffer b's name for messages ("?" when it has none). */
const char *exec_buf_name(const plan_list *L, int b);

/* Prefixes e with the device and instruction i (exec_instr_describe); returns -1. */
int exec_instr_error(const plan_set *p, int dev, int i, base_error *e);

/* Device `dev`'s position in plan group g, -1 when it is not a member. */
int exec_group_pos(const plan_set *p, int g, int dev);

/* The element range [lo, hi) of a region's storage of n elements that group position k of
 * `size` holds under ZeRO: pieces of ceil(n / size), the last one shorter (or empty). */
void exec_zero_piece(int64_t n, int k, int size, int64_t *lo, int64_t *hi);

/* "L3.attn" -> layer 3, kind attn; "embed" / "head" -> layer -1. 0, or -1 for a name that is not
 * of that form. */
int exec_parse_region(const char *name, int *layer, exec_region_kind *kind);

/* Where one region of the plan runs on the device: whether the device computes it at all, runs
 * its optimizer step, and its TP and EP groups (-1: none) with the device's position and the
 * group sizes (1 and 0 without a group). */
typedef struct exec_region_place {
    bool here, upd;
    int tp_group, ep_group;
    int tp, tpr, ep, epr;
} exec_region_place;

/* Reads the placement of the plan's `nreg` regions on device `dev` from its computes into
 * pl[nreg]. Fails (naming the region) when a region runs on two TP groups, or on a group the
 * device is not a member of. */
int exec_region_places(const plan_set *p, int dev, int nreg, exec_region_place *pl,
                       base_error *e);

/* holds[d][r]: device d computes region r (for the collectives' reading: which groups hold a
 * region whole). nreg regions; exec_holds_free frees it. */
bool **exec_holds_new(const plan_set *p, int nreg);
void exec_holds_free(bool **holds, int ndevices);
/* Every member of group g holds region r. */
bool exec_group_holds(const plan_set *p, bool *const *holds, int g, int r);

/* The kernel identity a compute names (NULL for none), and whether it is one of the aux
 * identities: 1 aux.grad_norm, 2 aux.aux_loss, 0 a region's kernel. */
const char *exec_compute_kid(const plan_set *p, const plan_instr *in);
int exec_aux_kind(const char *kid);

/* The boundary slots of a step: one per (region, micro-batch, kind), where a compute leaves a
 * tensor for a compute of the same device that no communication buffer carries. */
enum { EXEC_SLOT_X, EXEC_SLOT_ROUTE, EXEC_SLOT_DY, EXEC_SLOT_DROUTE, EXEC_NSLOT };

static inline int64_t exec_slot_index(int64_t nmb, int r, int mb, int kind)
{
    return ((int64_t)r * nmb + mb) * EXEC_NSLOT + kind;
}

/* A compute's boundary tensors: the plan buffers it reads and writes (-1: none): input, output,
 * output gradient, input gradient, and an MoE route's (combine input, gate output, gate output
 * gradient, combine input gradient); and the slots (-1: none) of its input, route, output,
 * second output, output gradient, route gradient, input gradient and second input gradient. */
typedef struct exec_bind_slots {
    int xb, yb, dyb, dxb;
    int x2b, y2b, dy2b, dx2b;
    int xs, x2s, ys, y2s, dys, dy2s, dxs, dx2s;
} exec_bind_slots;

static inline exec_bind_slots exec_bind_slots_none(void)
{
    return (exec_bind_slots){-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
}

/* The field of s a boundary buffer goes to: read (side 0) or written (side 1) by a forward or
 * recompute (fwd) or a backward, the route's fields when `route`. */
int *exec_bind_boundary(exec_bind_slots *s, bool fwd, int side, bool route);

/* Fills the slots of a forward, recompute or backward pass of region r (kinds[nreg]: every
 * region's kind) for micro-batch mb, from the comm buffers already in s: a tensor no comm buffer
 * carries goes through the slot of the region that reads it (the next region's input, the
 * combine's route two regions on; the previous region's output gradient, the gate's route
 * gradient). Fails when that region is missing. */
int exec_bind_slots_fill(const exec_region_kind *kinds, int nreg, int64_t nmb, int r, int mb,
                         plan_pass pass, const char *name, exec_bind_slots *s, base_error *e);

/* The sizes of comm buffers that only collectives touch, from the other side of each piece of
 * an activation collective of comm buffers (read k with write k; an all-gather multiplies by the
 * group size, a reduce-scatter divides), repeated until nothing changes; a buffer sized here becomes a comm buffer of its
 * owner region (plan_buffer.region).
 * buf[]: the device's plan buffers (0 bytes: not known yet). */
void exec_coll_sizes(const plan_set *p, int dev, exec_buf *buf);

/* A gradient all-reduce sums `total` elements (of which `copies` are stage-local copies of the
 * tied token table): the plan's bytes at its gradient dtype must be that, with or without the
 * copies (the plan counts a stage's copy in its memory but not in its bucket's bytes, a compiler
 * discrepancy; the copy is summed all the same, or the replicas would drift apart). Fails with a
 * message naming `who` ("executor", "runtime") otherwise. */
int exec_check_bucket_bytes(const plan_set *p, const plan_instr *in, int64_t total,
                            int64_t copies, const char *who, base_error *e);

/* The bytes of a compute's boundary tensors in a backend's layout: its input, its output (the
 * gradients are the same sizes) and an MoE route. */
typedef struct exec_slot_sizes {
    int64_t x, y, route;
} exec_slot_sizes;

/* Notes the slots compute i reads (s): i is their last reader so far, and they hold what it reads
 * (sz). slot_last and slot_bytes are per slot (exec_slot_index). */
void exec_slots_note_reads(const exec_bind_slots *s, int i, exec_slot_sizes sz, int *slot_last,
                           int64_t *slot_bytes);
/* After every compute is read: each slot a compute of region `region` writes (s, its tensors of
 * sizes sz) has a reader on the device, which takes it at the size written; otherwise the tensor
 * has nowhere to go (the plan lacks a transfer) or the two regions disagree. */
int exec_slots_check_writes(const plan_set *p, int64_t nmb, int region, const exec_bind_slots *s,
                            exec_slot_sizes sz, const int *slot_last, const int64_t *slot_bytes,
                            base_error *e);

/* The data-parallel size of the plan: global batch / (micro-batch x micro-batches), which must
 * divide. */
int exec_dp_size(const plan_model *m, int64_t *dp_size, base_error *e);

/* The region of the device's first forward pass, -1 when it runs none (it then reads no data). */
int exec_first_forward_region(const plan_list *L);

#endif
