/* kernels.h — the CUDA kernels of piper's executor (library piper_exec_cuda): every region and
 * pass of the model zoo in bf16 with fp32 accumulation, AdamW/SGD on fp32 master weights, the
 * gradient norm and clipping coefficient, deterministic initialisation and dropout, and the table
 * that maps a plan's kernel identity ("gpt.attn.F", "llama.moe_experts.BW", "aux.grad_norm") to
 * its implementation. A C interface (the functions are extern "C"), so that the runtime and the
 * checks are C.
 *
 * The kernels mirror the CPU kernels (exec/cpu/kernels.h) one for one: the same exec_cfg and
 * exec_shard (exec/model.h's, so the two backends cannot disagree on Megatron's split), the
 * same parameter lists and block layouts (exec_region_params), the same exec_call fields with the
 * same meaning (what each pass reads and writes, = vs +=, partial sums under tensor parallelism,
 * the vocabulary-parallel cross-entropy through the reduce callback or the three phases), the same
 * counter-based dropout masks (exec/cuda/rng.h), the same routing rules. Only storage differs:
 *
 *   parameters, activations, region inputs/outputs and their gradients   bf16
 *   gradient blocks (BW accumulates into them), optimizer state, masters  fp32
 *   norm statistics, softmax statistics, routing weights                   fp32
 *   tokens, targets, MoE slots                                             int32
 *   exec_call.out (loss, aux loss, sum of squares), scalars_in            double, device memory
 *
 * GEMMs are cuBLAS (cublasGemmEx / cublasGemmStridedBatchedEx, bf16 inputs, CUBLAS_COMPUTE_32F,
 * fp32 or bf16 outputs). Attention is a tiled kernel with an online softmax (flash-style): the
 * forward keeps the output and the log-sum-exp of each row, not the s x s probabilities; the
 * backward recomputes the probabilities tile by tile, regenerating the dropout mask from its
 * counter. Every pointer in an exec_call is device memory unless said; every kernel runs on the
 * context's stream and returns without synchronising.
 *
 * Every pass but UPD gets, besides the act buffer of what F keeps (exec_call.act), a work buffer
 * (exec_call.work) for its workspaces: the norm statistics, the attention's row sums, the
 * intermediate gradients. BI leaves in its work buffer what BW reads, so BW may run much later
 * (zero-bubble schedules) as long as both buffers live; the plan sizes them as workspaces. Both
 * have the CUDA layouts (exec_cuda_region_sizes), plan/plan_tensors.h's rows at bf16, which the
 * cost model sums, so
 * that the device holds what piper-sim predicts; a region's buffers are only read by the same
 * backend's passes of that region.
 *
 * All functions return 0, or -1 with a message in the base_error; none exits. */
#ifndef PIPER_EXEC_CUDA_KERNELS_H
#define PIPER_EXEC_CUDA_KERNELS_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "../model.h"

/* ---------------------------------------------------------------- context */

/* A device, a stream on it, a cuBLAS handle, a workspace for reductions, and an error flag that
 * kernels raise when data is bad (a token outside the vocabulary, a corrupt MoE slot): such
 * errors are found on the device, so they are reported at the next exec_cuda_ctx_sync. */
typedef struct exec_cuda_ctx exec_cuda_ctx;

/* stream: a cudaStream_t to run on, or NULL for a new non-blocking stream the context owns. */
int exec_cuda_ctx_new(exec_cuda_ctx **out, int device, void *stream, base_error *e);
void exec_cuda_ctx_free(exec_cuda_ctx *c);
void *exec_cuda_ctx_stream(const exec_cuda_ctx *c);
/* Runs the context's later work on another stream of the same device (the plan's streams). */
int exec_cuda_ctx_set_stream(exec_cuda_ctx *c, void *stream, base_error *e);
/* Waits for the stream; fails with the kernels' error flag (and clears it) if one was raised. */
int exec_cuda_ctx_sync(exec_cuda_ctx *c, base_error *e);
/* "NVIDIA H200, compute capability 9.0, 132 SMs, 139.8 GiB" into buf. */
int exec_cuda_device_describe(int device, char *buf, size_t n, base_error *e);
int exec_cuda_device_count(int *n, base_error *e);

/* ---------------------------------------------------------------- memory */

int exec_cuda_malloc(void **p, size_t bytes, base_error *e);
void exec_cuda_free(void *p);
/* Copies on the context's stream and waits for them (host buffers are ordinary memory). */
int exec_cuda_h2d(exec_cuda_ctx *c, void *dst, const void *src, size_t bytes, base_error *e);
int exec_cuda_d2h(exec_cuda_ctx *c, void *dst, const void *src, size_t bytes, base_error *e);
/* Asynchronous on the stream. */
int exec_cuda_d2d(exec_cuda_ctx *c, void *dst, const void *src, size_t bytes, base_error *e);
int exec_cuda_memset0(exec_cuda_ctx *c, void *dst, size_t bytes, base_error *e);
/* Device bytes in use / total, as cudaMemGetInfo reports them. */
int exec_cuda_mem_info(size_t *free_bytes, size_t *total_bytes, base_error *e);

/* bf16 on the host: round to nearest even (NaN stays NaN), as the device's __float2bfloat16. */
static inline uint16_t exec_bf16_from_float(float f)
{
    union { float f; uint32_t u; } v;
    v.f = f;
    if ((v.u & 0x7f800000u) == 0x7f800000u && (v.u & 0x007fffffu)) return (uint16_t)((v.u >> 16) | 0x40);
    v.u += 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)(v.u >> 16);
}
static inline float exec_bf16_to_float(uint16_t b)
{
    union { float f; uint32_t u; } v;
    v.u = (uint32_t)b << 16;
    return v.f;
}

/* Conversions and fills on the device (asynchronous). */
int exec_cuda_f32_to_bf16(exec_cuda_ctx *c, const float *src, uint16_t *dst, int64_t n,
                          base_error *e);
int exec_cuda_bf16_to_f32(exec_cuda_ctx *c, const uint16_t *src, float *dst, int64_t n,
                          base_error *e);
/* Uniform in [lo, hi) from stream `key` (exec_rng_uniform's counters): bf16 (dst16) or fp32
 * (dst32), whichever is not NULL. */
int exec_cuda_fill_uniform(exec_cuda_ctx *c, uint16_t *dst16, float *dst32, int64_t n,
                           uint64_t key, double lo, double hi, base_error *e);

/* A shard's block of a parameter, initialised on the device as exec_param_init does on the host
 * (a pure function of seed, full name and global index): into bf16 params and, when not NULL,
 * the fp32 master copy. */
int exec_cuda_param_init(exec_cuda_ctx *c, uint64_t seed, const char *full_name,
                         const exec_param *p, uint16_t *dst, float *master, base_error *e);

/* ---------------------------------------------------------------- sizes */

/* Bytes of a region's buffers on a shard, in the CUDA storage types (model.h's exec_layout;
 * params: elements, stored bf16, with fp32 gradients, masters and moments). */
typedef exec_layout exec_cuda_sizes;

int exec_cuda_region_sizes(const exec_cfg *c, const exec_shard *s, exec_region_kind k,
                           exec_cuda_sizes *out, base_error *e);
/* The act buffer's two parts under a recompute mode: *kept (exec_call.act, F's) + *rebuilt
 * (exec_call.act2, R's) bytes, ir/cost.c's IR_T_SAVED and IR_T_RECOMP at bf16. Every pass gets
 * exec_call.act_mode; R re-runs F writing both parts, the backward reads both. */
int exec_cuda_region_act_split(const exec_cfg *c, const exec_shard *s, exec_region_kind k,
                               exec_act_mode mode, int64_t *kept, int64_t *rebuilt, base_error *e);

/* The MoE route tensor (gate y2, combine x2 and their gradients): residual [T][h] bf16, routing
 * weights [T][k] fp32, slots [T][k] int32 (-1 = dropped), each piece 16-byte aligned. */
int64_t exec_cuda_route_bytes(const exec_cfg *c);
void exec_cuda_route_view(const exec_cfg *c, void *route, uint16_t **resid, float **w,
                          int32_t **slot);

/* ---------------------------------------------------------------- calls */

/* An exec_call (device pointers, storage as above; dtype is ignored: the CUDA kernels are bf16)
 * plus what only the GPU needs. */
typedef struct exec_cuda_call {
    exec_call c;
    exec_cuda_ctx *ctx;
    /* UPD: the fp32 master copy of the call's range (like param, grad, opt_m and opt_v, it
     * points at element upd_off of the region's block); the update runs on it and writes the
     * bf16 parameters from it. */
    float *master;
    /* UPD: a device scalar multiplying the gradients (exec_cuda_clip_coef's output), so that
     * clipping needs no synchronisation; NULL: c.opt->grad_scale. */
    const double *grad_scale;
} exec_cuda_call;

typedef int (*exec_cuda_kernel_fn)(const exec_cuda_call *c, base_error *e);

typedef struct exec_cuda_kernel {
    const char *id;            /* "gpt.attn.F" */
    int family;                /* 0 gpt, 1 llama, -1 aux */
    int kind;                  /* exec_region_kind, -1 for aux */
    plan_pass pass;
    exec_cuda_kernel_fn fn[2]; /* run in order (B: BI then BW); NULL = none */
} exec_cuda_kernel;

int exec_cuda_kernel_count(void);
const exec_cuda_kernel *exec_cuda_kernel_at(int i);
const exec_cuda_kernel *exec_cuda_kernel_find(const char *id);
/* Checks the family against the cfg and the context, sets the call's kind from the identity and
 * runs the steps; an error names the identity and layer. */
int exec_cuda_kernel_run(const exec_cuda_kernel *k, const exec_cuda_call *c, base_error *e);
int exec_cuda_kernel_run_id(const char *id, const exec_cuda_call *c, base_error *e);

/* The head's forward in three phases (see exec_head_f_begin): stats is a device fp32 buffer of
 * 3*b*s: [max | sum of exp | target logit] per token. */
int exec_cuda_head_f_begin(const exec_cuda_call *c, float *stats, base_error *e);
int exec_cuda_head_f_sums(const exec_cuda_call *c, float *stats, base_error *e);
int exec_cuda_head_f_end(const exec_cuda_call *c, const float *stats, base_error *e);

/* Clipping without a round trip to the host: coef = exec_clip_coef(sqrt(*sumsq), max_norm),
 * all device scalars. */
int exec_cuda_clip_coef(exec_cuda_ctx *c, const double *sumsq, double max_norm, double *coef,
                        base_error *e);
/* *out (a device double) = the sum of squares of n fp32 values at g, added to *out when
 * accumulate: the runtime's gradient norm over ZeRO pieces (aux.grad_norm sums whole regions). */
int exec_cuda_sumsq_f32(exec_cuda_ctx *c, const float *g, int64_t n, double *out, bool accumulate,
                        base_error *e);

/* ---------------------------------------------------------------- building blocks */

/* Row-major C = alpha op(A) op(B) + beta C with bf16 A and B, fp32 accumulation; C is fp32
 * (c32) or bf16 (c16), whichever is not NULL. The check binary times and checks it directly. */
int exec_cuda_gemm(exec_cuda_ctx *c, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                   float alpha, const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb,
                   float beta, float *c32, uint16_t *c16, int64_t ldc, base_error *e);

/* NVTX ranges (header-only NVTX 3): the runtime names them after plan instructions. */
void exec_cuda_range_push(const char *name);
void exec_cuda_range_pop(void);

#ifdef __cplusplus
}
#endif

#endif
