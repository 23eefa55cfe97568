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
 * given the tensor-parallel degree t, sequence parallelism, expert-parallel degree and
 * recompute. */
#ifndef PIPER_IR_MODEL_H
#define PIPER_IR_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/base.h"
#include "../plan/plan.h"
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
    /* FULL only: the previous region of this layer is recomputed too, so this region keeps
     * nothing of its own (its input is rebuilt by that recomputation). Set it for every region of
     * a layer but the first, and a fully recomputed layer keeps exactly its input. */
    bool recompute_from_prev;
    plan_dtype act_dtype;    /* activations and GEMMs (bf16 default) */
    plan_dtype param_dtype;
    plan_dtype grad_dtype;   /* the optimizer step's gradient read (a program's grad_dtype) */
    /* devices the optimizer state is sharded over (ZeRO >= 1: the data-parallel group; 0 or 1 =
     * not sharded): the optimizer step updates this device's piece, ceil(p / opt_shards) of the
     * region's p per-device parameters */
    int64_t opt_shards;
} ir_shape;

/* b = 1, no parallelism, no recompute, bf16 activations, parameters and gradients. */
ir_shape ir_shape_default(void);
/* Checks that a shape fits the model: tp divides heads, ffn, expert_ffn and vocab, kv_heads and
 * tp divide one another (kv heads are replicated when tp > kv_heads), seq divisible by tp under
 * sequence parallelism, ep divides experts. The cost functions assume a valid shape. */
int ir_shape_validate(const ir_model *m, const ir_shape *s, base_error *e);

int ir_model_nregions(const ir_model *m);
/* Fills the region list; `out` must hold ir_model_nregions() entries. Names are arena-owned. */
void ir_model_regions(const ir_model *m, base_arena *a, ir_region *out);
bool ir_model_layer_is_moe(const ir_model *m, int64_t layer);

/* Validates shapes: ranges (bounded so that no count overflows), kv_heads divides heads, top_k
 * <= experts, MoE and options only for the family that has them. Errors name the model's file. */
int ir_model_validate(const ir_model *m, base_error *e);
/* Loads a model from a parsed YAML/JSON map (see configs/models/ for the keys and their
 * defaults). Unknown keys and bad values fail with "file:line:col: what; what to do"; the result
 * is validated (shape errors point at the offending key). */
int ir_model_from_doc(const ir_doc *d, base_arena *a, ir_model *m, base_error *e);
/* ir_doc_load + ir_model_from_doc. */
int ir_model_load(const char *path, base_arena *a, ir_model *m, base_error *e);

/* MoE: tokens each expert takes from each source device per micro-batch,
 * C = ceil(capacity_factor * b * s * top_k / experts); 0 for a dense model. With EP each device
 * holds experts/ep experts, and each of them receives C tokens from every one of the ep sources,
 * so the dispatched buffer on every device is experts * C tokens of hidden elements. */
int64_t ir_moe_capacity(const ir_model *m, const ir_shape *s);

/* Parameters of a region (whole, before any sharding) and on one device under `s`: Megatron TP
 * splits QKV/fc1/gate-up by columns (with their biases) and out-proj/fc2/down by rows (their
 * biases and the norms stay whole); key/value heads are replicated when tp > kv_heads; the token
 * embedding and an untied LM head are vocab-parallel, the learned position table whole; a device
 * holds experts/ep experts, each TP-split like a dense MLP; the router is whole. */
int64_t ir_region_params(const ir_model *m, const ir_region *r);
int64_t ir_region_params_per_device(const ir_model *m, const ir_region *r, const ir_shape *s);
int64_t ir_model_params(const ir_model *m);
/* With tied embeddings the LM head uses the embedding's weight, which belongs to the embed region
 * (the head region counts no parameters for it). A head placed on another device than the embed
 * holds a copy of that weight of this many parameters (vocab-parallel under TP); 0 when untied. */
int64_t ir_model_tied_copy_params_per_device(const ir_model *m, const ir_shape *s);

/* The kernels of one pass of a region on one device. PLAN_PASS_B is BI followed by BW;
 * PLAN_PASS_R is the forward recomputation that recompute adds before the backward: empty when
 * s->recompute is NONE; FULL: the region's whole forward, for the regions of transformer layers
 * only (embed and head are never recomputed, as in Megatron-LM and the published formulas);
 * SELECTIVE: the attention core (scores, softmax, dropout, attn.V) of attn regions, nothing
 * elsewhere. UPD is the optimizer step over the region's per-device parameters (under
 * s->opt_shards > 1 the device's piece of them, ceil(p / opt_shards)), mixed-precision AdamW: it
 * reads the gradient (s->grad_dtype), reads and writes the fp32 master weight, first and second
 * moments (12 bytes of state per parameter, 24 bytes of traffic) and writes the parameter
 * (s->param_dtype).
 * AUX is empty (cross-group numerics are the DAG's). GEMMs are listed with m, n, k and count,
 * memory-bound kernels with the HBM bytes they move. The list is arena-owned. */
int ir_region_kernels(const ir_model *m, const ir_region *r, plan_pass pass, const ir_shape *s,
                      base_arena *a, plan_kernel_list *out);

/* Activation bytes one micro-batch keeps on one device from F until its backward (Korthikanti et
 * al. accounting: tensors saved for backward in the activation dtype, dropout masks 1 byte per
 * element, softmax/cross-entropy statistics in fp32; plan/plan_tensors.h lists each region's tensors). Under
 * FULL recompute a layer region keeps only its input, or nothing with recompute_from_prev;
 * SELECTIVE drops the attention core's s x s tensors; embed and head ignore recompute. */
double ir_region_activation_bytes(const ir_model *m, const ir_region *r, const ir_shape *s);
/* Bytes of the tensor the region hands to the next region (per device; the gradient flowing
 * back has the same size). */
double ir_region_output_bytes(const ir_model *m, const ir_region *r, const ir_shape *s);
/* Bytes of the "route" an MoE gate hands straight to its combine, past the experts (and of its
 * gradient): the residual stream, the routing weights and each choice's slot in the dispatched
 * buffer (see cost.c). */
double ir_region_route_bytes(const ir_model *m, const ir_shape *s);
/* Workspace of one pass of a region on one device: what its kernels hold only while they run
 * (norm statistics recomputed from the kept input, a softmax row, the backward's intermediate
 * gradients). PLAN_PASS_F and R: the forward's; B and BI: the backward's, of which a split BI
 * leaves the output gradients BW needs, so a BI's workspace lives until its BW; BW and every
 * other pass: none of its own. Each tensor of plan/plan_tensors.h's list starts at a multiple of its
 * element size, as an executor packs them. */
double ir_region_work_bytes(const ir_model *m, const ir_region *r, const ir_shape *s, plan_pass pass);

/* GEMM FLOPs of one pass on one device (2 per multiply-add): the sum of `flops` over the pass's
 * GEMM kernels only, which is the convention of the published formulas (formulas.md) and of
 * model FLOPs for MFU. Memory-bound kernels keep their own arithmetic in their `flops` field;
 * ir_region_total_flops counts those too. */
double ir_region_flops(const ir_model *m, const ir_region *r, plan_pass pass, const ir_shape *s);
double ir_region_total_flops(const ir_model *m, const ir_region *r, plan_pass pass,
                             const ir_shape *s);
/* GEMM FLOPs of a kernel list. */
double ir_kernels_gemm_flops(const plan_kernel_list *l);

/* GEMM FLOPs of one training step over `sequences` sequences (the global batch), all devices
 * together: F + B of every region plus R as s->recompute says for every layer, times
 * sequences / s->micro_batch micro-batches, computed at tp = ep = 1 (the whole model). Without
 * recompute this is the model FLOPs that MFU divides by; with it, the hardware FLOPs of HFU. */
double ir_model_step_flops(const ir_model *m, const ir_shape *s, int64_t sequences);

#endif
