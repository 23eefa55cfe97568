/* model.h — the executor's backend-neutral model vocabulary: what every backend (the CPU kernels,
 * exec/cpu/kernels.h; the CUDA kernels, exec/cuda/kernels.h) and the binding layer (exec/bind.h)
 * read a plan's model as. The region kinds and their names, the model shape (exec_cfg, from the
 * plan), what one device holds of it (exec_shard: Megatron's tensor-parallel split and the
 * expert-parallel split), each region's parameter tensors and their deterministic initial values,
 * the counter-based random numbers (initialisation, dropout, synthetic tokens), the optimizer and
 * clipping rules, the call a kernel receives (exec_call) and how a region's saved activations
 * split under recompute. One definition here, so that two backends cannot disagree on a shard's
 * block, a parameter's value or a dropout mask; the kernels themselves, and the layouts of their
 * buffers, are each backend's.
 *
 * All functions return 0, or -1 with a message in the base_error; none exits. */
#ifndef PIPER_EXEC_MODEL_H
#define PIPER_EXEC_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/base.h"
#include "../plan/plan.h"

/* ---------------------------------------------------------------- model and shard */

typedef enum {
    EXEC_EMBED,
    EXEC_ATTN,
    EXEC_MLP,
    EXEC_MOE_GATE,
    EXEC_MOE_EXPERTS,
    EXEC_MOE_COMBINE,
    EXEC_HEAD,
    EXEC_NREGION_KINDS
} exec_region_kind;

/* "embed", "attn", "mlp", "moe_gate", "moe_experts", "moe_combine", "head": the names kernel
 * identities use. NULL for an unknown kind. */
const char *exec_region_kind_name(exec_region_kind k);

/* The model as the kernels see it, for one micro-batch of b sequences. */
typedef struct exec_cfg {
    bool gpt;                /* GPT (LayerNorm, GELU, biases) or Llama/Qwen3 (RMSNorm, SwiGLU, RoPE) */
    int64_t layers, b, s, h; /* layers, micro-batch, sequence length, hidden */
    int64_t heads, kv_heads, head_dim, ffn, vocab;
    int64_t experts, expert_ffn, top_k;
    int64_t capacity;        /* tokens per expert per micro-batch: ceil(cf * b*s*top_k / experts) */
    bool qk_norm, tied, learned_pos;
    double dropout;          /* probability (GPT); 0 disables every dropout */
    double norm_eps;         /* LayerNorm / RMSNorm / QK-norm epsilon */
    double rope_theta;
    double init_std;         /* weights ~ N(0, init_std); residual projections / sqrt(2 layers) */
    double aux_coef;         /* load-balancing loss coefficient */
    double aux_weight;       /* weight of one micro-batch's aux loss in the step's loss */
    double loss_scale;       /* weight of one token's cross-entropy in the step's loss */
    uint64_t seed;           /* initialisation and dropout */
} exec_cfg;

/* Fills a cfg from the plan's model shape: norm_eps 1e-5 (GPT) / 1e-6 (Llama), rope_theta 1e4,
 * init_std 0.02, dropout 0.1 when the model has dropout, learned positions for GPT, aux_coef
 * 0.01, aux_weight 1, loss_scale 1/(b*s) (a mean over the micro-batch; an executor that
 * accumulates micro-batches sets 1/(tokens per step)), capacity as ir_moe_capacity computes it.
 * Validates the result. */
int exec_cfg_from_plan(const plan_model *m, uint64_t seed, exec_cfg *c, base_error *e);
/* Shape checks the kernels rely on (head_dim even for RoPE, kv_heads divides heads, top_k <=
 * experts, BLAS dimensions within int, ...). */
int exec_cfg_validate(const exec_cfg *c, base_error *e);

/* What one device computes of each region. */
typedef struct exec_shard {
    int tp, tp_rank, ep, ep_rank;
    bool first;              /* tp_rank == 0: adds the replicated terms */
    int64_t head0, nheads;   /* query heads [head0, head0 + nheads) */
    int64_t kv0, nkv;        /* the key/value heads those query heads use */
    int64_t ffn0, nffn;      /* dense FFN columns */
    int64_t effn0, neffn;    /* expert FFN columns (each expert TP-split like a dense MLP) */
    int64_t vocab0, nvocab;  /* vocabulary rows of the embedding / LM head */
    int64_t expert0, nexperts; /* local experts */
    bool sp;                 /* sequence parallelism (tp > 1): of the tokens' rows, the act
                              * buffer keeps the norm input, the norm output and the output
                              * dropout mask of rows [tp_rank*tl, (tp_rank+1)*tl) only, tl =
                              * b*s/tp, at its front (ir/cost.c's accounting); BI/BW read all rows
                              * of the first two from exec_call.xg. exec_shard_set_sp sets it. */
} exec_shard;

/* Megatron's split: tp divides heads, ffn, expert_ffn and vocab; kv heads are split when
 * tp <= kv_heads and replicated otherwise; ep divides experts. tp = ep = 1 is the whole model. */
int exec_shard_init(const exec_cfg *c, int tp, int tp_rank, int ep, int ep_rank, exec_shard *s,
                    base_error *e);

/* Turns sequence parallelism on or off for a shard (tp > 1; tp must divide b*s). */
int exec_shard_set_sp(const exec_cfg *c, exec_shard *s, bool sp, base_error *e);
/* Under sequence parallelism the tokens' rows come in exec_sp_blocks(s) blocks of
 * exec_sp_rows(c, s) rows, the device's own being block exec_sp_own(s): a region keeps its own
 * block of its norm input and output, and its backward reads rank k's [norm input | norm output]
 * pair of blocks at k * 2*rows*h elements of exec_call.xg. Without it there is one block. */
static inline int64_t exec_sp_rows(const exec_cfg *c, const exec_shard *s)
{
    return s->sp ? c->b * c->s / s->tp : c->b * c->s;
}
static inline int exec_sp_blocks(const exec_shard *s) { return s->sp ? s->tp : 1; }
static inline int exec_sp_own(const exec_shard *s) { return s->sp ? s->tp_rank : 0; }

/* A region's buffers in one backend's layouts (its kernels' storage types), in bytes: what the
 * binding layer (exec/bind.h) sizes plan buffers by. */
typedef struct exec_layout {
    int64_t x_bytes, y_bytes;  /* primary input / output (embed x: int32 tokens; head y: none) */
    int64_t route_bytes;       /* moe_gate y2 / moe_combine x2 and their gradients */
    int64_t act_bytes;         /* the act buffer: what F keeps for the backward */
    int64_t work_bytes;        /* the work buffer of B and BI (BI leaves in it what BW reads) */
    int64_t work_f_bytes;      /* the part of it F and R use */
    int64_t params;            /* parameter elements on the shard */
} exec_layout;

/* ---------------------------------------------------------------- parameters */

typedef enum { EXEC_INIT_NORMAL, EXEC_INIT_ONES, EXEC_INIT_ZEROS } exec_init_kind;

#define EXEC_MAX_REGION_PARAMS 16

/* One parameter tensor of a region: its global shape (padded to 3 dims with leading 1s), the
 * block this shard holds, and where that block sits in the region's parameter block (the
 * tensors of a region are contiguous, in this order). */
typedef struct exec_param {
    const char *name;        /* "wq", "ln.g", ...: the executor prefixes the region ("L3.attn.") */
    int ndim;                /* 1, 2 or 3 (weight decay applies to ndim >= 2) */
    int64_t dim[3];          /* global shape */
    int64_t off[3], len[3];  /* the shard's block */
    int64_t offset;          /* element offset in the region's parameter block */
    int64_t count;           /* len[0]*len[1]*len[2] */
    exec_init_kind init;
    double std;
    bool replicated;         /* other shards of the TP group hold the same block: partial grads */
} exec_param;

/* The parameters of a region on a shard; returns their number (0 for moe_combine), or -1. For the
 * head with tied embeddings the LM weight is the embedding's (exec_call.lm_w), not listed. */
int exec_region_params(const exec_cfg *c, const exec_shard *s, exec_region_kind k,
                       exec_param out[EXEC_MAX_REGION_PARAMS], base_error *e);

/* Writes a shard's block of a parameter: element (i0, i1, i2) of the global tensor is a pure
 * function of (seed, full_name, global flat index), so any shard initialises to exactly the
 * slice of the whole tensor. full_name is the global name ("L3.attn.wq"). */
int exec_param_init(uint64_t seed, const char *full_name, const exec_param *p, plan_dtype dt,
                    void *dst, base_error *e);

/* ---------------------------------------------------------------- random numbers */

/* splitmix64's finaliser: a bijective mix of 64 bits. */
uint64_t exec_rng_mix(uint64_t z);
/* Key of a named stream: FNV-1a of the name, mixed with the seed. */
uint64_t exec_rng_key(uint64_t seed, const char *name);
/* Key of a tuple of integers (dropout streams: seed, step, layer, site). */
uint64_t exec_rng_key4(uint64_t seed, uint64_t a, uint64_t b, uint64_t c);
/* Counter-based generator: 64 random bits as a pure function of (key, counter). */
uint64_t exec_rng_bits(uint64_t key, uint64_t ctr);
/* Uniform in (0, 1), 53 bits. */
double exec_rng_uniform(uint64_t key, uint64_t ctr);
/* Standard normal (Box-Muller on counters 2i and 2i+1 of the key's stream). */
double exec_rng_normal(uint64_t key, uint64_t i);
/* The dropout mask: keep element `idx` of stream `key` with probability 1 - p. */
static inline bool exec_dropout_keep(uint64_t key, uint64_t idx, double p)
{
    return p <= 0 || exec_rng_uniform(key, idx) >= p;
}
/* Dropout sites of a layer (part of the stream key). */
enum { EXEC_DROP_EMBED = 1, EXEC_DROP_ATTN_PROBS = 2, EXEC_DROP_ATTN_OUT = 3, EXEC_DROP_MLP_OUT = 4 };
/* A synthetic token in [0, vocab): a pure function of (seed, step, global sample, position). */
int32_t exec_synthetic_token(uint64_t seed, int64_t step, int64_t sample, int64_t pos,
                             int64_t vocab);

/* ---------------------------------------------------------------- calls */

typedef enum { EXEC_REDUCE_SUM, EXEC_REDUCE_MAX } exec_reduce_op;
/* Reduces `n` elements of `buf` (in place, dtype dt) over the TP group of the call. */
typedef int (*exec_reduce_fn)(void *ctx, void *buf, int64_t n, plan_dtype dt, exec_reduce_op op,
                              base_error *e);

typedef enum { EXEC_ADAMW, EXEC_SGD } exec_optimizer;

typedef struct exec_optim {
    exec_optimizer kind;
    double lr, beta1, beta2, eps, weight_decay;
    int64_t t;               /* 1-based step number (AdamW bias correction) */
    double grad_scale;       /* gradients are multiplied by this first: exec_clip_coef(...) */
} exec_optim;

/* Global-norm clipping: max_norm / (norm + 1e-6) when norm exceeds max_norm, else 1 (as
 * torch.nn.utils.clip_grad_norm_); max_norm <= 0 disables. */
double exec_clip_coef(double global_norm, double max_norm);

/* The step's figures a backend checks before the next step trains on them: the name of the first
 * that is not finite ("the loss", "the load-balancing loss", "the gradient norm"; norm_sq < 0:
 * no norm) with its value in *v, or NULL when all are finite. Both drivers stop on it. */
const char *exec_nonfinite_figure(double loss, double aux_loss, double norm_sq, double *v);

/* A region's gradient block, for aux.grad_norm. */
typedef struct exec_grad_ref {
    exec_region_kind kind;
    const void *grad;
} exec_grad_ref;

/* Everything a kernel may read or write. Which fields a kernel uses:
 *   embed    F: tokens -> y          BW: dy -> grad
 *   attn/mlp F: x -> y               BI: dy -> dx        BW: -> grad
 *   moe_gate F: x -> y (dispatch), y2 (route), out (aux loss, coefficient included)
 *            BI: dy (d dispatch), dy2 (d route) -> dx   BW: -> grad
 *   experts  F: x -> y   BI: dy -> dx   BW: -> grad
 *   combine  F: x (expert outputs), x2 (route) -> y    BI: dy -> dx, dx2 (d route)
 *   head     F: x, targets -> out (the loss times loss_scale summed over tokens, on the first
 *            shard; 0 on the others)    BI: -> dx (seeded by d loss = 1)   BW: -> grad
 *   UPD      param, grad, opt_m, opt_v, opt (elements [upd_off, upd_off + upd_n) of the
 *            region's block; upd_n <= 0: all of it)
 *   aux.grad_norm  grads_in[nin] -> out (sum of squares; replicated tensors counted by the
 *            first TP shard only)
 *   aux.aux_loss   scalars_in[nin] -> out (their sum) */
typedef struct exec_call {
    const exec_cfg *cfg;
    const exec_shard *shard;
    exec_region_kind kind;   /* set by exec_kernel_run from the identity */
    plan_dtype dtype;        /* PLAN_FP32 or PLAN_FP64: every real buffer */
    int layer;               /* -1 for embed/head */
    int64_t step;            /* training step: dropout streams */
    int64_t sample0;         /* global index of the micro-batch's first sequence */
    void *param, *grad;
    const void *lm_w;        /* head, tied embeddings: the vocab slice of the token table */
    void *lm_grad;           /* ... and its gradient */
    void *act;
    void *act2;              /* under recompute (act_mode != EXEC_ACT_ALL): what R rebuilds (R
                              * writes it; F gets a transient one); act is what F keeps */
    int act_mode;            /* exec_act_mode */
    void *work;              /* exec_region_sizes().work_bytes: every pass but UPD needs it; what
                              * BI leaves there BW reads, so it lives from BI to BW */
    const void *x, *x2;
    const void *xg;          /* sequence parallelism (exec_shard.sp), attn/mlp/head BI and BW: the
                              * TP group's kept [norm input | norm output] shards, all-gathered
                              * (rank-major blocks of [tl][h] and [tl][h], tl = b*s/tp) */
    void *y, *y2;
    const void *dy, *dy2;
    void *dx, *dx2;
    const int32_t *tokens, *targets;
    double *out;
    bool keep_routing;       /* gate F: reuse the routing saved in act (finite-difference tests) */
    exec_reduce_fn reduce;   /* head F under vocab parallelism; NULL: one shard */
    void *reduce_ctx;
    const exec_optim *opt;
    void *opt_m, *opt_v;
    int64_t upd_off, upd_n;
    int nin;
    const exec_grad_ref *grads_in;
    const double *scalars_in;
} exec_call;

/* How a region's saved activations split between what F keeps (exec_call.act) and what a
 * recompute R rebuilds (exec_call.act2), as ir/cost.c splits IR_T_SAVED and IR_T_RECOMP:
 *   ALL        no recompute: F keeps everything (act2 unused)
 *   SELECTIVE  the attention core (softmax output, dropped probabilities, their mask) is rebuilt
 *   INPUT      full recompute: F keeps the region input (x) only
 *   NONE       full recompute from the previous region's recomputation: F keeps nothing
 * R re-runs F, writing both parts (part 0 with the values F wrote). */
typedef enum { EXEC_ACT_ALL, EXEC_ACT_SELECTIVE, EXEC_ACT_INPUT, EXEC_ACT_NONE, EXEC_NACT_MODES } exec_act_mode;

/* What a kept tensor is, for the split: the region input, the attention core, anything else. */
typedef enum { EXEC_ACT_PIECE_INPUT, EXEC_ACT_PIECE_CORE, EXEC_ACT_PIECE_OTHER } exec_act_piece;

/* The part a tensor lives in under a mode: 0 what F keeps (act), 1 what R rebuilds (act2). Both
 * backends' layouts carve by it, so they split alike. */
static inline int exec_act_part(int mode, exec_act_piece what)
{
    switch (mode) {
    case EXEC_ACT_SELECTIVE: return what == EXEC_ACT_PIECE_CORE;
    case EXEC_ACT_INPUT: return what != EXEC_ACT_PIECE_INPUT;
    case EXEC_ACT_NONE: return 1;
    default: return 0;
    }
}

/* ---------------------------------------------------------------- buffer layouts */

/* How a backend lays out a region's act and work buffers: plan/plan_tensors.h's rows, in the
 * table's order, with the backend's bytes per element class and alignment (0: each tensor at a
 * multiple of its element size), and the flags its kernels set or clear against the model's:
 * the CPU kernels run the exact softmax and keep the s x s probabilities (they clear FLASH); the
 * CUDA kernels are flash-style and regenerate dropout masks from their counters (they set
 * FLASH and clear DROPOUT). */
typedef struct exec_tensor_rule {
    int64_t elem[PLAN_NTELEMS];
    int64_t align;
    unsigned set, clear;
} exec_tensor_rule;

/* Region k's act buffer under an exec_act_mode: part 0 what F keeps, part 1 what R rebuilds
 * (exec_act_part; embed and head, never recomputed, keep everything). The MoE regions keep all
 * b*s rows: their kernels have no sequence-parallel blocks. */
void exec_act_layout(const exec_cfg *c, const exec_shard *s, exec_region_kind k,
                     const exec_tensor_rule *r, int mode, plan_tensor_layout *L);
/* Region k's work buffer: F's part (pass_f: what F and R use) or all of it (B, BI). */
void exec_work_layout(const exec_cfg *c, const exec_shard *s, exec_region_kind k,
                      const exec_tensor_rule *r, bool pass_f, plan_tensor_layout *L);

#endif
