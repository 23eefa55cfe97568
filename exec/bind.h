/* bind.h — the binding layer every executor backend reads its device's plan through: which
 * regions the device runs and how (shard, recompute split, parameter block, ZeRO pieces), what
 * each plan buffer holds for the kernels and how big it is in the backend's layouts, what every
 * compute reads and writes (exec_compute), what every collective moves (exec_coll: its pieces or
 * segments), the boundary slots between regions and the data-parallel rank. One reading, so that
 * the CPU executor (exec/cpu) and the CUDA runtime (exec/cuda) cannot read one plan two ways; a
 * backend supplies only what really differs (exec_bind_ops): its kernels' buffer layouts, its
 * storage element sizes, its kernel table and its name in messages. What a backend does not
 * support it refuses after exec_bind_open, from the binding.
 *
 * What a buffer or a collective is for is the plan's: each buffer's role and owner region, each
 * collective's purpose (plan/plan.h, docs/plan-format.md "Roles, purposes and pieces"). bind.c's
 * role functions read them and check them against the instructions' shapes, so that a plan whose
 * stated roles and instructions disagree, or that states none, is refused naming the instruction
 * rather than computed some other way.
 *
 * The rules under it (region names, placement, ZeRO pieces, boundary slots, sizes through
 * activation collectives) are plan_layout.h's. Plain C over plan/plan.h and exec/model.h. */
#ifndef PIPER_EXEC_BIND_H
#define PIPER_EXEC_BIND_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/base.h"
#include "../plan/plan.h"
#include "model.h"
#include "plan_layout.h"

/* One region of the plan as the device holds it. */
typedef struct exec_region {
    const char *name;
    exec_region_kind kind;
    int layer;
    bool here;              /* a compute of the region runs on this device */
    bool upd;               /* its optimizer step runs here */
    int tp_group, ep_group; /* global group ids, -1 */
    exec_shard sh;
    exec_layout sz;
    /* under recompute: F's act buffer keeps act_kept bytes and R's act_rebuilt (the backend's
     * split of act_mode, the mode whose sizes are the plan's); EXEC_ACT_ALL otherwise */
    exec_act_mode act_mode;
    int64_t act_kept, act_rebuilt;
    exec_param par[EXEC_MAX_REGION_PARAMS];
    int npar;
    int64_t nkern;          /* elements of the kernels' parameter block */
    int64_t ncopy;          /* head without the embedding on this device, tied: the token table's
                               copy, appended after the kernels' block */
    exec_param copy;        /* the block of embed.tok it holds (offset = nkern) */
    int64_t nstore;         /* parameter storage: nkern + ncopy */
    int param_buf, grad_buf, opt_buf;
    int64_t upd_lo, upd_hi; /* the elements the optimizer step here updates: a ZeRO piece */
    int scatter_group;      /* the group whose reduce-scatter makes the piece, -1 */
    /* ZeRO-3: every pass but the update reads a gathered copy (gathered, and no pass reads the
     * parameter buffer itself: !reads_whole), so the parameter buffer holds only the piece
     * [param_lo, param_lo + param_n); ZeRO-2/3: the kept gradient holds only the piece
     * [grad_lo, grad_lo + grad_n), which each micro-batch's reduce-scatter adds into from that
     * micro-batch's whole gradient (exec_compute.gb). Else both hold the whole block (lo 0). */
    bool gathered, reads_whole, grad_piece;
    int64_t param_lo, param_n, grad_lo, grad_n;
    bool norm_skip;         /* a data-parallel replica other than the first: not in the grad norm */
    bool tp_copy;           /* a region every member of the device's TP group runs whole on the
                               same data (the MoE router): only the first counts its loss, norm */
} exec_region;

/* A compute instruction, resolved. Boundary tensors between regions on one device go through the
 * slots of plan_layout.h (EXEC_SLOT_*) where no plan buffer carries them. */
typedef struct exec_compute {
    int region, mb;
    const void *kernel;     /* the backend's kernel (exec_bind_ops.kernel_find); NULL for aux */
    int aux;                /* 1 aux.grad_norm, 2 aux.aux_loss (exec_aux_kind) */
    int act;                /* what F kept (plan buffer, -1) */
    int act2;               /* under recompute: R's act buffer (what R writes, what B reads) */
    int pb;                 /* ZeRO-3: the gathered parameters the kernel reads, -1 */
    int gb, egb;            /* the gradient buffer a backward adds into (the region's, or under
                               ZeRO-2/3 its micro-batch's whole gradient); a tied head's into
                               the embedding's token table; -1: the regions' own */
    exec_bind_slots sl;     /* comm buffers and slots of the boundary tensors, -1 */
    int work;               /* the plan's workspace of the pass (a BW: its BI's), -1: none */
    int xg;                 /* sequence parallelism, a backward: the comm buffer of the re-gathered
                               norm input and output shards (exec_call.xg), -1 */
} exec_compute;

/* What a backend tells the binding. */
typedef struct exec_bind_ops {
    const char *who;        /* "CPU executor": messages say what cannot read the plan */
    const char *kernels;    /* "CPU kernels" */
    const char *backend;    /* "CPU backend": an identity unknown to its table */
    /* bytes per element of parameter, gradient and optimizer-state storage */
    int64_t param_elem, grad_elem, opt_elem;
    /* region R's (name, kind, shard set) buffers in the backend's layouts */
    int (*layout)(void *ctx, const exec_region *R, exec_layout *out, base_error *e);
    /* the act buffer's two parts under a recompute mode: F's *kept and R's *rebuilt bytes */
    int (*act_split)(void *ctx, const exec_region *R, exec_act_mode mode, int64_t *kept,
                     int64_t *rebuilt, base_error *e);
    /* the backend's kernel of an identity with its region kind and family, NULL when unknown */
    const void *(*kernel_find)(const char *kid, int *kind, int *family);
    void *ctx;
} exec_bind_ops;

/* The device's binding: exec_bind_open fills it, exec_bind_close frees it. */
typedef struct exec_bind {
    const plan_set *p;
    int dev;
    const plan_list *L;
    const exec_cfg *cfg;
    exec_bind_ops ops;
    int64_t nmb, dp_size, dp_rank;
    int nreg;
    exec_region *reg;
    int embed_region, head_region;
    bool **holds;           /* holds[device][region]: the device runs the region */
    exec_buf *buf;          /* per plan buffer; bytes are the backend's */
    exec_compute *comp;     /* per instruction (computes) */
    exec_coll *coll;        /* per instruction (collectives) */
    int *slot_last;         /* per slot (exec_slot_index): its last reader, -1 */
    int64_t *slot_bytes;    /* per slot: the bytes its tensor takes */
    /* per buffer: the last backward that reads what F kept after the plan frees it (under input
     * or selective recompute the plan frees F's act right after R), -1 */
    int *act_hold;
    bool has_norm;          /* the plan computes aux.grad_norm */
} exec_bind;

/* Fails unless the plan has a device `device` (a rank beyond the plan's devices). */
int exec_bind_check_device(const plan_set *p, int device, base_error *e);

/* Reads device dev's list: regions (with the model cfg, which must outlive the binding), buffer
 * roles and sizes, computes, collectives, the data-parallel rank. Buffers nothing binds keep the
 * plan's size. Fails with a message naming the device and the instruction. */
int exec_bind_open(exec_bind *b, const plan_set *p, int dev, const exec_cfg *cfg,
                   const exec_bind_ops *ops, base_error *e);
void exec_bind_close(exec_bind *b);

/* A ZeRO segment's piece on rank k of a group of g: the rank's piece of the region's whole
 * storage (exec_zero_piece) cut to the segment, so that a segment that is part of a region (the
 * head's gather of the tied token table) moves the elements the region's reduce-scatter gave. */
void exec_seg_piece(const exec_region *R, const exec_seg *S, int k, int g, int64_t *lo,
                    int64_t *hi);
/* The largest piece of a segment over a group of g: a rank's share of staging. */
int64_t exec_seg_chunk(const exec_region *R, const exec_seg *S, int g);

/* Prefixes e with the device and instruction i; returns -1. */
int exec_bind_instr_error(const exec_bind *b, int i, base_error *e);

#endif
