/* model.h — the model zoo and its cost model (part of ir/, included by ir.h).
 *
 * A model is a decoder-only transformer, GPT style (LayerNorm, GELU 4h MLP, learned positions,
 * optional dropout) or Llama/Qwen3 style (RMSNorm, GQA + RoPE, optional QK-norm, SwiGLU, MoE).
 * It is cut into *regions*, the smallest schedulable units:
 *
 *   embed | L0.attn | L0.mlp (dense) or L0.moe_gate, L0.moe_experts, L0.moe_combine | ... | head
 *
 * For each region and pass the cost model gives the kernels (GEMMs with m,n,k; memory-bound ops
 * with bytes), the parameters, the activation bytes kept for backward and the bytes of the tensor
 * that crosses to the next region. Everything is per device for one micro-batch of b sequences,
 * given the tensor-parallel degree t, sequence parallelism, expert-parallel degree and recompute. */
#ifndef PIPER_IR_MODEL_H
#define PIPER_IR_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/base.h"
#include "../sched/plan.h"
#include "doc.h"

typedef enum { IR_FAMILY_GPT, IR_FAMILY_LLAMA } ir_family;

typedef struct ir_model {
    const char *name;
    const char *file;        /* where it was loaded from (for messages) */
    ir_family family;
    int64_t layers, hidden, heads, kv_heads, head_dim, ffn;
    int64_t vocab, seq;
    /* MoE: experts == 0 means dense. */
    int64_t experts, expert_ffn, top_k;
    double capacity_factor;
    int64_t moe_first;       /* first MoE layer (earlier layers are dense) */
    int64_t moe_every;       /* every k-th layer from moe_first is MoE (1 = all) */
    double aux_loss_coef;    /* load-balancing loss coefficient */
    bool tied_embeddings;
    bool qk_norm;
    bool dropout;            /* GPT: dropout after attention/MLP (masks kept, 1 byte/element) */
    bool flash_attention;    /* fused attention: keep log-sum-exp, not the s x s scores */
    bool learned_positions;  /* GPT: position embedding table of seq x hidden */
} ir_model;

typedef enum {
    IR_REGION_EMBED,
    IR_REGION_ATTN,
    IR_REGION_MLP,
    IR_REGION_MOE_GATE,      /* pre-norm, router, top-k, dispatch permutation */
    IR_REGION_MOE_EXPERTS,   /* the expert FFNs (what EP shards) */
    IR_REGION_MOE_COMBINE,   /* un-permute, weighted sum, residual */
    IR_REGION_HEAD,          /* final norm, LM head, cross-entropy loss */
    IR_NREGION_KINDS
} ir_region_kind;

typedef struct ir_region {
    ir_region_kind kind;
    int index;               /* position in the model's region list */
    int layer;               /* -1 for embed/head */
    const char *name;        /* "embed", "L3.attn", "L3.moe_experts", "head" */
} ir_region;

typedef enum { IR_RECOMPUTE_NONE, IR_RECOMPUTE_SELECTIVE, IR_RECOMPUTE_FULL } ir_recompute;

/* Everything about how a region runs that changes its per-device cost. */
typedef struct ir_shape {
    int64_t micro_batch;     /* b: sequences per micro-batch on this device (before TP/SP) */
    int64_t tp;              /* tensor-parallel degree (1 = none) */
    bool sequence_parallel;
    int64_t ep;              /* expert-parallel degree (1 = none): experts per device = E/ep */
    ir_recompute recompute;
    plan_dtype act_dtype;    /* activations and GEMMs (bf16 default) */
    plan_dtype param_dtype;
} ir_shape;

int ir_model_nregions(const ir_model *m);
/* Fills the region list; `out` must hold ir_model_nregions() entries. Names are arena-owned. */
void ir_model_regions(const ir_model *m, base_arena *a, ir_region *out);
bool ir_model_layer_is_moe(const ir_model *m, int64_t layer);

/* Validates shapes (heads divide hidden, kv_heads divide heads, top_k <= experts, ...). */
int ir_model_validate(const ir_model *m, base_error *e);
/* Loads a model from a parsed YAML/JSON map (see configs/models/). */
int ir_model_from_doc(const ir_doc *d, base_arena *a, ir_model *m, base_error *e);

/* Parameters of a region (whole, before any sharding) and on one device under `s`. */
int64_t ir_region_params(const ir_model *m, const ir_region *r);
int64_t ir_region_params_per_device(const ir_model *m, const ir_region *r, const ir_shape *s);
int64_t ir_model_params(const ir_model *m);

/* The kernels of one pass of a region on one device. PLAN_PASS_B is BI followed by BW;
 * PLAN_PASS_R is the forward recomputation that recompute adds before the backward (empty when
 * s->recompute is NONE; for SELECTIVE only the attention core). UPD is the optimizer step. */
int ir_region_kernels(const ir_model *m, const ir_region *r, plan_pass pass, const ir_shape *s,
                      base_arena *a, plan_kernel_list *out);

/* Activation bytes one micro-batch keeps on one device from F until its backward. */
double ir_region_activation_bytes(const ir_model *m, const ir_region *r, const ir_shape *s);
/* Bytes of the tensor the region hands to the next region (per device; the gradient flowing
 * back has the same size). */
double ir_region_output_bytes(const ir_model *m, const ir_region *r, const ir_shape *s);

/* FLOPs of one pass (sum over its kernels). */
double ir_region_flops(const ir_model *m, const ir_region *r, plan_pass pass, const ir_shape *s);

#endif
