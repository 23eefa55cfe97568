/* plan_tensors.h — the tensors of each region kind's act buffer (what its forward keeps for the
 * backward) and of its per-pass workspace, stated once. The plan's activation and workspace
 * sizes are part of its contract with the backends: the cost model (ir/cost.c) sums this table
 * into the plan's buffer sizes, and both backends (exec/cpu, exec/cuda) carve their buffers by
 * walking it, each supplying only its element sizes and its alignment. Included by plan/plan.h.
 *
 * A row is ROW(region, id, use, element class, needs, excludes, count):
 *   use       which buffer and which part of it the tensor lives in (PLAN_TUSE_TABLE)
 *   class     its element size (PLAN_TELEM_TABLE): the consumer says how many bytes each is
 *   needs     model flags (PLAN_TF_*) that must all be set for the tensor to exist
 *   excludes  flags none of which may be set
 *   count     its elements, an expression in d (const plan_tensor_dims *)
 * A region's rows are in layout order: a walk places each present tensor at the next multiple of
 * its element size (or of the consumer's alignment), in its part. The act rows come real tensors
 * first, then 4-byte ones, then the 1-byte masks, so that the packed layout has no padding and its
 * size is the plain sum the cost model counts. */
#ifndef PIPER_PLAN_TENSORS_H
#define PIPER_PLAN_TENSORS_H

#include <stdbool.h>
#include <stdint.h>

/* Region kinds, in the order ir/ and exec/ number theirs: X(enum, name). */
#define PLAN_TREGION_TABLE(X)                  \
    X(PLAN_TR_EMBED, "embed")                  \
    X(PLAN_TR_ATTN, "attn")                    \
    X(PLAN_TR_MLP, "mlp")                      \
    X(PLAN_TR_MOE_GATE, "moe_gate")            \
    X(PLAN_TR_MOE_EXPERTS, "moe_experts")      \
    X(PLAN_TR_MOE_COMBINE, "moe_combine")      \
    X(PLAN_TR_HEAD, "head")

/* Element classes: X(enum, name). */
#define PLAN_TELEM_TABLE(X)                                                                     \
    X(PLAN_TELEM_E, "e")       /* the activation dtype */                                      \
    X(PLAN_TELEM_W, "w")       /* statistics, w = max(e, 4): fp32 below fp32 (bf16 training     \
                                * upcasts softmaxes, norms and summed gradients), the activation \
                                * dtype above (an fp64 run keeps them in fp64) */               \
    X(PLAN_TELEM_MASK, "mask") /* 1 byte: a kept dropout mask */                               \
    X(PLAN_TELEM_4, "4")       /* 4 bytes: int32 indices, the fp32 log-sum-exp */

/* Where a tensor lives: X(enum, name). Recompute splits the act buffer between what F keeps and
 * what R rebuilds (ir/cost.c's IR_T_SAVED and IR_T_RECOMP, exec/model.h's exec_act_part). */
#define PLAN_TUSE_TABLE(X)                                                                      \
    X(PLAN_TUSE_INPUT, "input")     /* act: the region's input, what a full recompute keeps */ \
    X(PLAN_TUSE_CORE, "core")       /* act: the attention core, which selective recompute      \
                                     * rebuilds */                                             \
    X(PLAN_TUSE_KEPT, "kept")       /* act: the rest F keeps, which full recompute rebuilds */ \
    X(PLAN_TUSE_RESTART, "restart") /* act, only when a full recompute keeps the input: a part \
                                     * of the input that otherwise lives in another buffer */  \
    X(PLAN_TUSE_WORK_F, "work.f")   /* workspace of every pass (F, R, B, BI) */                \
    X(PLAN_TUSE_WORK_B, "work.b")   /* workspace of the backward only; BI leaves it for BW */

#define PLAN_ENUM_ROW_(en, ...) en,
typedef enum { PLAN_TREGION_TABLE(PLAN_ENUM_ROW_) PLAN_NTREGIONS } plan_tregion;
typedef enum { PLAN_TELEM_TABLE(PLAN_ENUM_ROW_) PLAN_NTELEMS } plan_telem;
typedef enum { PLAN_TUSE_TABLE(PLAN_ENUM_ROW_) PLAN_NTUSES } plan_tuse;

/* Model flags a tensor's existence depends on. DROPOUT means the consumer keeps dropout masks
 * (a kernel that regenerates them from their counters leaves it clear); FLASH, that attention
 * keeps each row's log-sum-exp instead of the s x s probabilities. */
enum {
    PLAN_TF_GPT = 1u << 0,     /* GPT: LayerNorm, learned positions; else RoPE */
    PLAN_TF_DROPOUT = 1u << 1, /* dropout with kept masks (GPT only) */
    PLAN_TF_QK_NORM = 1u << 2, /* Qwen3's per-head QK-norm */
    PLAN_TF_FLASH = 1u << 3    /* flash attention */
};

/* The dimensions counts are written in, on one device (after tensor and expert parallelism). */
typedef struct plan_tensor_dims {
    int64_t tokens;     /* T = b*s: the rows of every GEMM (sequence parallelism gathers them) */
    int64_t kept;       /* rows whose norm input, output and masks a region keeps: T/t under
                         * sequence parallelism, else T */
    int64_t batch, seq, hidden, head_dim;
    int64_t heads, kv_heads; /* query and key/value heads on this shard */
    int64_t ffn;        /* dense FFN width on this shard */
    int64_t experts, top_k;
    int64_t rows;       /* MoE: rows of the dispatched buffer, experts x capacity */
    int64_t expert_ffn; /* expert FFN width on this shard */
    int64_t vocab;      /* vocabulary slice on this shard */
    unsigned flags;     /* PLAN_TF_* */
} plan_tensor_dims;

/* The table, region by region. Names are the kernels' (exec/cpu, exec/cuda). */
#define PLAN_TENSOR_TABLE(ROW)                                                                     \
    /* embed: the token ids (its backward scatters by them) and the output dropout mask */         \
    ROW(EMBED, TOKENS, KEPT, 4, 0, 0, d->tokens)                                                   \
    ROW(EMBED, MASK, KEPT, MASK, PLAN_TF_DROPOUT, 0, d->kept * d->hidden)                          \
    /* attn act: the norm input and output (the QKV input), Q, K, V as the core used them          \
     * (after QK-norm and RoPE), the QK-norm inputs, the core output (the out-projection input);   \
     * the core: the softmax output and the dropped probabilities (the input of P'V), or with      \
     * flash attention the fp32 log-sum-exp of each row; the probabilities' and the output's       \
     * masks. GPT with t = 1 and dropout: s*b*h*(13 + 5*a*s/h) bytes at 16 bits (Korthikanti et    \
     * al. 2022's attention, 11 + 5as/h, and its pre-norm's input, 2); without dropout             \
     * s*b*h*(12 + 2*a*s/h). */                                                                    \
    ROW(ATTN, X, INPUT, E, 0, 0, d->kept * d->hidden)                                              \
    ROW(ATTN, XN, KEPT, E, 0, 0, d->kept * d->hidden)                                              \
    ROW(ATTN, Q, KEPT, E, 0, 0, d->tokens * d->heads * d->head_dim)                                \
    ROW(ATTN, K, KEPT, E, 0, 0, d->tokens * d->kv_heads * d->head_dim)                             \
    ROW(ATTN, V, KEPT, E, 0, 0, d->tokens * d->kv_heads * d->head_dim)                             \
    ROW(ATTN, Q_RAW, KEPT, E, PLAN_TF_QK_NORM, 0, d->tokens * d->heads * d->head_dim)              \
    ROW(ATTN, K_RAW, KEPT, E, PLAN_TF_QK_NORM, 0, d->tokens * d->kv_heads * d->head_dim)           \
    ROW(ATTN, O, KEPT, E, 0, 0, d->tokens * d->heads * d->head_dim)                                \
    ROW(ATTN, PROBS, CORE, E, 0, PLAN_TF_FLASH, d->batch * d->heads * d->seq * d->seq)             \
    ROW(ATTN, PROBS_DROPPED, CORE, E, PLAN_TF_DROPOUT, PLAN_TF_FLASH,                              \
      d->batch * d->heads * d->seq * d->seq)                                                       \
    ROW(ATTN, LSE, CORE, 4, PLAN_TF_FLASH, 0, d->batch * d->heads * d->seq)                        \
    ROW(ATTN, PROBS_MASK, CORE, MASK, PLAN_TF_DROPOUT, PLAN_TF_FLASH,                              \
      d->batch * d->heads * d->seq * d->seq)                                                       \
    ROW(ATTN, OUT_MASK, KEPT, MASK, PLAN_TF_DROPOUT, 0, d->kept * d->hidden)                       \
    /* attn work, F's part: the norm statistics (mean, rstd) and the QK-norm's (rstd per head),    \
     * recomputed by the backward from the kept inputs, and the RoPE table (cos, sin per           \
     * position and pair). The backward's: the gradients of Q and K before their norms, one        \
     * softmax row block (with flash attention each row's D = dO . O, as FlashAttention-2's        \
     * backward keeps), the gradient of the core output, the output gradient through dropout,      \
     * dQ, dK, dV and the norm-output gradient, w wide because three GEMMs sum into it. dQ, dK,    \
     * dV and the core output's are what the weight-gradient GEMMs read: what BI leaves for BW. */ \
    ROW(ATTN, MEAN, WORK_F, W, 0, 0, d->tokens)                                                    \
    ROW(ATTN, RSTD, WORK_F, W, 0, 0, d->tokens)                                                    \
    ROW(ATTN, Q_RSTD, WORK_F, W, PLAN_TF_QK_NORM, 0, d->tokens * d->heads)                         \
    ROW(ATTN, K_RSTD, WORK_F, W, PLAN_TF_QK_NORM, 0, d->tokens * d->kv_heads)                      \
    ROW(ATTN, ROPE, WORK_F, W, 0, PLAN_TF_GPT, d->seq * d->head_dim)                               \
    ROW(ATTN, DQN, WORK_B, E, PLAN_TF_QK_NORM, 0, d->tokens * d->heads * d->head_dim)              \
    ROW(ATTN, DKN, WORK_B, E, PLAN_TF_QK_NORM, 0, d->tokens * d->kv_heads * d->head_dim)           \
    ROW(ATTN, SCORES, WORK_B, E, 0, PLAN_TF_FLASH, d->seq * d->seq)                                \
    ROW(ATTN, DSUM, WORK_B, W, PLAN_TF_FLASH, 0, d->tokens * d->heads)                             \
    ROW(ATTN, DO, WORK_B, E, 0, 0, d->tokens * d->heads * d->head_dim)                             \
    ROW(ATTN, DYD, WORK_B, E, 0, 0, d->tokens * d->hidden)                                         \
    ROW(ATTN, DQ, WORK_B, E, 0, 0, d->tokens * d->heads * d->head_dim)                             \
    ROW(ATTN, DK, WORK_B, E, 0, 0, d->tokens * d->kv_heads * d->head_dim)                          \
    ROW(ATTN, DV, WORK_B, E, 0, 0, d->tokens * d->kv_heads * d->head_dim)                          \
    ROW(ATTN, DXN, WORK_B, W, 0, 0, d->tokens * d->hidden)                                         \
    /* mlp act: the norm input and output (the fc1 / gate-up input); GPT: the fc1 output (GELU     \
     * input) and the GELU output (fc2 input), s*b*h*(2 + 16) bytes at 16 bits for f = 4h, and     \
     * the output mask (s*b*h); Llama: the gate and up projections and the SwiGLU output (the      \
     * down input; SiLU is recomputed inside the fused SwiGLU backward). */                        \
    ROW(MLP, X, INPUT, E, 0, 0, d->kept * d->hidden)                                               \
    ROW(MLP, XN, KEPT, E, 0, 0, d->kept * d->hidden)                                               \
    ROW(MLP, H1, KEPT, E, 0, 0, d->tokens * d->ffn)                                                \
    ROW(MLP, UP, KEPT, E, 0, PLAN_TF_GPT, d->tokens * d->ffn)                                      \
    ROW(MLP, A, KEPT, E, 0, 0, d->tokens * d->ffn)                                                 \
    ROW(MLP, OUT_MASK, KEPT, MASK, PLAN_TF_DROPOUT, 0, d->kept * d->hidden)                        \
    /* mlp work: the norm statistics; the backward's output gradient through dropout, the first    \
     * layer's output gradient (Llama: and the up projection's) and the norm-output gradient       \
     * (w: gate and up both sum into it). */                                                       \
    ROW(MLP, MEAN, WORK_F, W, 0, 0, d->tokens)                                                     \
    ROW(MLP, RSTD, WORK_F, W, 0, 0, d->tokens)                                                     \
    ROW(MLP, DYD, WORK_B, E, 0, 0, d->tokens * d->hidden)                                          \
    ROW(MLP, DH1, WORK_B, E, 0, 0, d->tokens * d->ffn)                                             \
    ROW(MLP, DUP, WORK_B, E, 0, PLAN_TF_GPT, d->tokens * d->ffn)                                   \
    ROW(MLP, DXN, WORK_B, W, 0, 0, d->tokens * d->hidden)                                          \
    /* moe_gate act: the norm input and output (the router input), the router probabilities        \
     * (w) and the expert of each choice (int32, for the permutation's backward). Which slot       \
     * each choice got and the experts' token fractions are a pure function of the choices, so     \
     * they are workspace. */                                                                      \
    ROW(MOE_GATE, X, INPUT, E, 0, 0, d->kept * d->hidden)                                          \
    ROW(MOE_GATE, XN, KEPT, E, 0, 0, d->kept * d->hidden)                                          \
    ROW(MOE_GATE, PROBS, KEPT, W, 0, 0, d->kept * d->experts)                                      \
    ROW(MOE_GATE, CHOICE, KEPT, 4, 0, 0, d->kept * d->top_k)                                       \
    /* moe_gate work: the RMS statistics, each expert's token fraction, each choice's slot         \
     * (-1: dropped); the backward's router-logit gradient (at e: it is the operand of the         \
     * router's GEMMs, only the softmax between them runs in w) and the norm-output gradient       \
     * (w: the router's GEMM and the kept slots' gradients sum into it). */                        \
    ROW(MOE_GATE, RSTD, WORK_F, W, 0, 0, d->tokens)                                                \
    ROW(MOE_GATE, FRAC, WORK_F, W, 0, 0, d->experts)                                               \
    ROW(MOE_GATE, SLOT, WORK_F, 4, 0, 0, d->tokens * d->top_k)                                     \
    ROW(MOE_GATE, DZ, WORK_B, E, 0, 0, d->tokens * d->experts)                                     \
    ROW(MOE_GATE, DXN, WORK_B, W, 0, 0, d->tokens * d->hidden)                                     \
    /* moe_experts act, over the dispatched rows: the input, the gate and up projections and       \
     * the SwiGLU output (the down input); work (the backward only): the output gradient and       \
     * the gate and up projections' gradients. */                                                  \
    ROW(MOE_EXPERTS, X, INPUT, E, 0, 0, d->rows * d->hidden)                                       \
    ROW(MOE_EXPERTS, G, KEPT, E, 0, 0, d->rows * d->expert_ffn)                                    \
    ROW(MOE_EXPERTS, UP, KEPT, E, 0, 0, d->rows * d->expert_ffn)                                   \
    ROW(MOE_EXPERTS, A, KEPT, E, 0, 0, d->rows * d->expert_ffn)                                    \
    ROW(MOE_EXPERTS, DY, WORK_B, E, 0, 0, d->rows * d->hidden)                                     \
    ROW(MOE_EXPERTS, DG, WORK_B, E, 0, 0, d->rows * d->expert_ffn)                                 \
    ROW(MOE_EXPERTS, DUP, WORK_B, E, 0, 0, d->rows * d->expert_ffn)                                \
    /* moe_combine act, all of it the region's input: the expert outputs, the routing weights      \
     * (w) and the slot of each choice (int32: the unpermute gathers by an index map and its       \
     * backward scatters with the same map, as Megatron's unpermute keeps its sorted indices).     \
     * Under full recompute F keeps the residual stream too, so that R rebuilds the output from    \
     * it; [resid | weights | slots] are then laid out as a route tensor, which R reads. */        \
    ROW(MOE_COMBINE, EO, INPUT, E, 0, 0, d->rows * d->hidden)                                      \
    ROW(MOE_COMBINE, RESID, RESTART, E, 0, 0, d->kept * d->hidden)                                 \
    ROW(MOE_COMBINE, W, INPUT, W, 0, 0, d->kept * d->top_k)                                        \
    ROW(MOE_COMBINE, SLOT, INPUT, 4, 0, 0, d->kept * d->top_k)                                     \
    /* head act: the final norm's input and output (the LM-head input) and the slice's             \
     * probabilities, or the logits' gradient a fused cross-entropy keeps instead (w, as           \
     * Megatron keeps them). Work: the norm statistics, the cross-entropy's per-token max, sum     \
     * of exponentials and target logit; the backward's norm-output gradient. */                   \
    ROW(HEAD, X, INPUT, E, 0, 0, d->kept * d->hidden)                                              \
    ROW(HEAD, XN, KEPT, E, 0, 0, d->kept * d->hidden)                                              \
    ROW(HEAD, PROBS, KEPT, W, 0, 0, d->tokens * d->vocab)                                          \
    ROW(HEAD, MEAN, WORK_F, W, 0, 0, d->tokens)                                                    \
    ROW(HEAD, RSTD, WORK_F, W, 0, 0, d->tokens)                                                    \
    ROW(HEAD, STATS, WORK_F, W, 0, 0, 3 * d->tokens)                                               \
    ROW(HEAD, DXN, WORK_B, W, 0, 0, d->tokens * d->hidden)

/* Tensor ids: PLAN_T_ATTN_X, PLAN_T_HEAD_PROBS, ... */
#define PLAN_TENSOR_ID_(reg, id, ...) PLAN_T_##reg##_##id,
typedef enum { PLAN_TENSOR_TABLE(PLAN_TENSOR_ID_) PLAN_NTENSORS } plan_tensor;
#undef PLAN_TENSOR_ID_

/* One row of the table. */
typedef struct plan_tensor_row {
    plan_tregion region;
    const char *name;   /* "attn.probs" */
    plan_tuse use;
    plan_telem elem;
    unsigned needs, excludes;
    int64_t (*count)(const plan_tensor_dims *d);
} plan_tensor_row;

const plan_tensor_row *plan_tensor_row_of(plan_tensor t);
const char *plan_tregion_name(plan_tregion r);
const char *plan_telem_name(plan_telem c);
const char *plan_tuse_name(plan_tuse u);

/* Whether tensor t exists under d's flags, and its elements (0 when it does not). */
bool plan_tensor_present(plan_tensor t, const plan_tensor_dims *d);
int64_t plan_tensor_elems(plan_tensor t, const plan_tensor_dims *d);

/* How a consumer lays a buffer out: the bytes of each element class, an alignment (0: each
 * tensor at a multiple of its element size; else at a multiple of this) and, for each use, the
 * part (0 or 1) its tensors go to, or -1 to leave them out. */
typedef struct plan_tensor_rule {
    int64_t elem[PLAN_NTELEMS];
    int64_t align;
    int part[PLAN_NTUSES];
} plan_tensor_rule;

/* A walk's result: each tensor's part and byte offset in it (part -1: not in this layout), and
 * each part's size. */
typedef struct plan_tensor_layout {
    int8_t part[PLAN_NTENSORS];
    int64_t off[PLAN_NTENSORS];
    int64_t bytes[2];
} plan_tensor_layout;

/* Lays out region r's tensors under rule, in the table's order. */
void plan_tensor_walk(plan_tregion r, const plan_tensor_dims *d, const plan_tensor_rule *rule,
                      plan_tensor_layout *L);

/* Tensor t in a laid-out buffer: base[part] + offset; NULL when t is not in the layout or its
 * part has no base (a walk that only measures). */
static inline void *plan_tensor_ptr(const plan_tensor_layout *L, void *const base[2],
                                    plan_tensor t)
{
    int p = L->part[t];
    return p < 0 || !base[p] ? (void *)0 : (void *)((char *)base[p] + L->off[t]);
}

#endif /* PIPER_PLAN_TENSORS_H */
