/* kernels.h — the CPU kernels of piper's executor: every region and pass of the model zoo in fp32
 * and fp64, the optimizer updates, gradient clipping, deterministic initialisation and dropout,
 * and the table that maps a plan's kernel identity ("gpt.attn.F", "llama.moe_experts.BW",
 * "aux.grad_norm", ...) to its implementation.
 *
 * What a region computes is what ir/cost.c describes (one function per region and pass):
 *
 *   embed        F: token gather (+ learned positions, GPT) + dropout          BW: table grads
 *   attn         F: norm, Q/K/V (+ biases, GPT), [QK-norm], [RoPE], causal softmax attention
 *                   (+ dropout on the probabilities, GPT), out-projection (+ bias), dropout,
 *                   residual                                                     BI, BW
 *   mlp          F: norm, fc1 + GELU + fc2 (GPT, biases, dropout) or SwiGLU (Llama), residual
 *   moe_gate     F: RMSNorm, router, softmax, top-k, static capacity, dispatch; the aux loss
 *   moe_experts  F: one SwiGLU per expert over the dispatched buffer
 *   moe_combine  F: weighted sum of the expert outputs + residual                  BI only
 *   head         F: final norm, LM head, cross-entropy                           BI, BW
 *
 * B is BI then BW. R (recompute) re-runs F from the region's input: the masks of dropout are a
 * pure function of (seed, step, layer, site, global element index), so a recomputation rebuilds
 * exactly the tensors F saved.
 *
 * Conventions.
 * - Activations are row-major [tokens][width], tokens = b*s in sequence order (t = bi*s + pos).
 *   Weights are stored [in][out] so that y = x W is one GEMM; the expert tensors are
 *   [expert][in][out]. A shard holds a contiguous block of the global tensor (exec_param).
 * - BI writes its input gradients (=); BW accumulates (+=) into the gradient block, so successive
 *   micro-batches sum. F writes its output and the region's saved activations (the `act` buffer of
 *   exec_region_sizes().act_bytes: exactly what ir/cost.c counts, so the executor's activation
 *   memory is the plan's); every pass also gets a `work` buffer (work_bytes) for its
 *   workspaces, and BI leaves there the output gradients BW needs, so BW may run much later
 *   (zero-bubble schedules) as long as the act and work buffers live.
 * - Tensor parallelism (Megatron): a shard owns a range of query heads (and the key/value heads
 *   they use), of FFN columns, of vocabulary rows and of experts. Every sharded output is a
 *   *partial sum*: summing the outputs of the shards of a TP group gives the unsharded output.
 *   Replicated terms (the residual, the biases after a row-parallel GEMM, the learned positions,
 *   the loss) are added by the first shard only; dropout is linear once its mask is fixed and the
 *   mask is a function of global indices, so each shard may apply it to its partial. Backward
 *   likewise: BI returns partial input gradients (norm backward is linear in its upstream
 *   gradient), and the gradient of a replicated parameter (norm scales and biases, the position
 *   table, key/value weights replicated when tp > kv_heads, the out-projection bias) is a partial
 *   that the TP group must sum (exec_param.replicated) — the same reduction Megatron does for
 *   sequence-parallel norms. This is what lets the plan's single all-reduce after a TP region's F
 *   (and after its B) produce exact results.
 * - Cross-entropy is vocab-parallel: a head shard computes logits for its vocabulary slice and
 *   needs the global per-token max and sum of exponentials, which it obtains through the call's
 *   reduce callback (or an executor runs the three phases exec_head_f_{begin,sums,end} itself).
 * - MoE: the gate's output is the dispatched buffer [experts][C][hidden] (C = capacity per expert
 *   per micro-batch; empty slots are zero) plus a "route" tensor for the combine (the residual
 *   stream, the routing weights and each choice's slot). Under expert parallelism the experts
 *   region receives [ep sources][local experts][C][hidden] (the all-to-all of the plan).
 *
 * The model, shard, parameter, random-number and call vocabulary the kernels use is the
 * executor's, shared with the CUDA backend (exec/model.h); this header adds the CPU layouts of a
 * region's buffers, the identity table and the typed kernels.
 *
 * All functions return 0, or -1 with a message in the base_error; none exits. */
#ifndef PIPER_EXEC_CPU_KERNELS_H
#define PIPER_EXEC_CPU_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "../../base/base.h"
#include "../../plan/plan.h"
#include "../model.h"

/* ---------------------------------------------------------------- sizes */

/* Buffer sizes of a region on a shard. Elements are of the call's dtype unless said. */
typedef struct exec_region_sizes {
    int64_t x, y;            /* primary input / output elements (embed: x = tokens, int32) */
    int64_t route_bytes;     /* moe_gate y2 / moe_combine x2, and their gradients */
    int64_t act_bytes;       /* the act buffer: what F saves for the backward, exactly the tensors
                              * and bytes of ir_region_activation_bytes (no recompute) */
    int64_t work_bytes;      /* the work buffer: workspaces, norm statistics (recomputed, not
                              * saved) and the output gradients BI leaves for BW */
    int64_t work_f_bytes;    /* the prefix of it F and R use (0: F needs none) */
    int64_t params;          /* parameter elements on the shard */
} exec_region_sizes;

int exec_region_sizes_get(const exec_cfg *c, const exec_shard *s, exec_region_kind k,
                          plan_dtype dt, exec_region_sizes *out, base_error *e);
/* The two parts of the act buffer under a recompute mode: *kept (act) + *rebuilt (act2) bytes. */
int exec_region_act_split(const exec_cfg *c, const exec_shard *s, exec_region_kind k,
                          plan_dtype dt, exec_act_mode mode, int64_t *kept, int64_t *rebuilt,
                          base_error *e);

/* ---------------------------------------------------------------- the identity table */

typedef int (*exec_kernel_fn)(const exec_call *c, base_error *e);

typedef struct exec_kernel {
    const char *id;          /* "gpt.attn.F" */
    int family;              /* 0 gpt, 1 llama, -1 aux */
    int kind;                /* exec_region_kind, -1 for aux */
    plan_pass pass;
    exec_kernel_fn f32[2], f64[2]; /* steps run in order (B: BI then BW); NULL = none */
} exec_kernel;

int exec_kernel_count(void);
const exec_kernel *exec_kernel_at(int i);
/* NULL when the identity is unknown. */
const exec_kernel *exec_kernel_find(const char *id);
/* Runs an identity on a call (the call's kind is taken from the identity). Checks the dtype, the
 * family against the cfg, and the pointers the kernel needs. */
int exec_kernel_run(const exec_kernel *k, const exec_call *c, base_error *e);
/* exec_kernel_find + exec_kernel_run, with an error naming an unknown identity. */
int exec_kernel_run_id(const char *id, const exec_call *c, base_error *e);

/* ---------------------------------------------------------------- typed kernels */

/* The kernels themselves, in both precisions: exec_layernorm_f_f32 / exec_layernorm_f_f64, ...
 * (kernels_typed.h is included once per type). */
#define EXEC_REAL float
#define EXEC_T(name) name##_f32
#include "kernels_typed.h"
#undef EXEC_REAL
#undef EXEC_T
#define EXEC_REAL double
#define EXEC_T(name) name##_f64
#include "kernels_typed.h"
#undef EXEC_REAL
#undef EXEC_T

#endif
