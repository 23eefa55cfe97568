/* common.cuh — internal to exec/cuda: the context's definition, the check macros every CUDA and
 * cuBLAS call goes through (naming the call, file and line), bf16 helpers, warp reductions,
 * carving of act buffers, parameter lookup, and the launchers of the building blocks
 * (elementwise.cu) that the region files chain. */
#ifndef PIPER_EXEC_CUDA_COMMON_CUH
#define PIPER_EXEC_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "rng.h"

typedef __nv_bfloat16 bf16;

/* ---------------------------------------------------------------- the context */

/* Error flag bits raised by kernels (exec_cuda_ctx_sync turns them into messages). */
enum {
    EXEC_CUDA_BAD_TOKEN = 1,
    EXEC_CUDA_BAD_TARGET = 2,
    EXEC_CUDA_BAD_SLOT = 4,
};

/* Doubles of the reduction workspace: one partial per block of a sum of squares. */
#define EXEC_CUDA_PARTIALS 1024

struct exec_cuda_ctx {
    int device;
    cudaStream_t stream;
    bool own_stream;
    cublasHandle_t blas;
    void *blas_ws;           /* cuBLAS workspace (set explicitly so that streams can change) */
    size_t blas_ws_bytes;
    int *flag;               /* device: error bits */
    double *partials;        /* device: EXEC_CUDA_PARTIALS doubles */
};

/* ---------------------------------------------------------------- checks */

#define CUDA_OK(call)                                                                          \
    do {                                                                                       \
        cudaError_t err_ = (call);                                                             \
        if (err_ != cudaSuccess)                                                               \
            return base_errorf(e, "%s failed at %s:%d: %s", #call, __FILE__, __LINE__,         \
                               cudaGetErrorString(err_));                                      \
    } while (0)

#define BLAS_OK(call)                                                                          \
    do {                                                                                       \
        cublasStatus_t st_ = (call);                                                           \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                      \
            return base_errorf(e, "%s failed at %s:%d: %s", #call, __FILE__, __LINE__,         \
                               cublasGetStatusString(st_));                                    \
    } while (0)

/* After a kernel launch: a bad configuration is reported here, a fault at the next sync. */
#define LAUNCH_OK(what)                                                                        \
    do {                                                                                       \
        cudaError_t err_ = cudaGetLastError();                                                 \
        if (err_ != cudaSuccess)                                                               \
            return base_errorf(e, "launching %s failed at %s:%d: %s", what, __FILE__, __LINE__, \
                               cudaGetErrorString(err_));                                      \
    } while (0)

/* Names the missing buffer, as the CPU kernels do. */
#define NEED(ptr, what)                                                                        \
    do {                                                                                       \
        if (!(ptr))                                                                            \
            return base_errorf(e, "%s: %s is missing; the executor must pass it", __func__,   \
                               what);                                                          \
    } while (0)

#define TRY(x)                                                                                 \
    do {                                                                                       \
        if ((x) != 0) return -1;                                                               \
    } while (0)

/* ---------------------------------------------------------------- device helpers */

__device__ __forceinline__ float ldf(const bf16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ float ldf(const float *p) { return *p; }
__device__ __forceinline__ void stf(bf16 *p, float v) { *p = __float2bfloat16(v); }
__device__ __forceinline__ void stf(float *p, float v) { *p = v; }

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Blocks for n elements at `threads` per block, with a grid-stride loop beyond the cap. */
static inline unsigned grid_for(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 65536) b = 65536;
    return (unsigned)b;
}

#define GRID_STRIDE(i, n)                                                                      \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                  \
         i += (int64_t)gridDim.x * blockDim.x)

/* ---------------------------------------------------------------- act and work buffers */

/* As the CPU kernels: a region's act and work buffers hold plan/plan_tensors.h's tensors, laid
 * out by walking that table (exec_act_layout, exec_work_layout), the table the cost model sums;
 * each region's layout function runs the walk with base NULL to measure and with the buffers to
 * get the pointers, so the size and the use cannot disagree. The CUDA rule: e is bf16, w fp32;
 * pieces are 16-byte aligned, because cuBLAS's tensor-core paths want 16-byte aligned operands
 * (the cost model aligns each piece to its element size only, so the two layouts have the same
 * bytes whenever every piece is a multiple of 16 bytes, every model of the zoo: widths are
 * multiples of 8, and the CUDA one is at most 15 bytes a piece larger otherwise); the attention
 * is flash-style (it keeps the log-sum-exp) and dropout masks are regenerated from their
 * counters, never kept. */
static const exec_tensor_rule cuda_tensor_rule = {{2, 4, 1, 4}, 16, PLAN_TF_FLASH, PLAN_TF_DROPOUT};

static inline void act_walk(const exec_cfg *c, const exec_shard *sh, exec_region_kind k, int mode,
                            plan_tensor_layout *L)
{
    exec_act_layout(c, sh, k, &cuda_tensor_rule, mode, L);
}
static inline void work_walk(const exec_cfg *c, const exec_shard *sh, exec_region_kind k,
                             bool pass_f, plan_tensor_layout *L)
{
    exec_work_layout(c, sh, k, &cuda_tensor_rule, pass_f, L);
}

/* A tensor's address, converting to the pointer type it is assigned to. */
struct tensor_at {
    void *p;
    template <class T> operator T *() const { return (T *)p; }
};
static inline tensor_at tensor_at_(const plan_tensor_layout *L, void *const base[2], plan_tensor t)
{
    tensor_at a = {plan_tensor_ptr(L, base, t)};
    return a;
}
/* Tensor PLAN_T_<id> of a walked layout in buffers base ({act, act2}, or {work, NULL}). */
#define AT(L, base, id) tensor_at_(&(L), (base), PLAN_T_##id)

/* The MoE route tensor is no region's act or work buffer: it is carved in order, each piece
 * 16-byte aligned. */
typedef struct carver {
    char *base;
    size_t off;
} carver;

static inline void *carve(carver *cv, size_t bytes)
{
    cv->off = (cv->off + 15) & ~(size_t)15;
    void *p = cv->base ? cv->base + cv->off : NULL;
    cv->off += bytes;
    return p;
}

/* Under recompute the backward reads both parts: a missing one is the runtime's mistake. */
#define NEED_ACT2(rebuilt)                                                                     \
    do {                                                                                       \
        if ((rebuilt) && !c->act2)                                                             \
            return base_errorf(e, "%s: the rebuilt activations (act2, %zu bytes) are missing; " \
                                  "the runtime must pass R's buffer",                           \
                               __func__, (size_t)(rebuilt));                                    \
    } while (0)
static inline bf16 *carve_b(carver *cv, int64_t n) { return (bf16 *)carve(cv, (size_t)n * 2); }
static inline float *carve_f(carver *cv, int64_t n) { return (float *)carve(cv, (size_t)n * 4); }
static inline int32_t *carve_i(carver *cv, int64_t n)
{
    return (int32_t *)carve(cv, (size_t)n * 4);
}

/* The MoE route tensor (kernels.h). */
typedef struct route_view {
    bf16 *resid;
    float *w;
    int32_t *slot;
} route_view;

static inline size_t route_layout(const exec_cfg *c, void *base, route_view *v)
{
    carver cv = {(char *)base, 0};
    const int64_t T = c->b * c->s;
    route_view r;
    r.resid = carve_b(&cv, T * c->h);
    r.w = carve_f(&cv, T * c->top_k);
    r.slot = carve_i(&cv, T * c->top_k);
    if (v) *v = r;
    return cv.off;
}

/* ---------------------------------------------------------------- parameters */

typedef struct region_params {
    exec_param p[EXEC_MAX_REGION_PARAMS];
    int n;
} region_params;

static inline int region_params_get(const exec_call *c, exec_region_kind k, region_params *rp,
                                    base_error *e)
{
    rp->n = exec_region_params(c->cfg, c->shard, k, rp->p, e);
    return rp->n < 0 ? -1 : 0;
}

static inline const exec_param *param_find(const region_params *rp, const char *name)
{
    for (int i = 0; i < rp->n; i++)
        if (strcmp(rp->p[i].name, name) == 0) return &rp->p[i];
    return NULL;
}
/* A tensor in a bf16 parameter block / an fp32 gradient block; NULL when absent. */
static inline bf16 *pb(const region_params *rp, const void *block, const char *name)
{
    const exec_param *p = param_find(rp, name);
    return p && block ? (bf16 *)block + p->offset : NULL;
}
static inline float *gf(const region_params *rp, const void *block, const char *name)
{
    const exec_param *p = param_find(rp, name);
    return p && block ? (float *)block + p->offset : NULL;
}

/* The stream of one dropout site of one layer in one step (as the CPU kernels). */
static inline uint64_t dropout_key(const exec_call *c, int site)
{
    return exec_rng_key4(c->cfg->seed, (uint64_t)c->step, (uint64_t)(int64_t)c->layer,
                         (uint64_t)site);
}

/* ---------------------------------------------------------------- building blocks */

/* GEMM (ctx.cu): bf16 A, B; C fp32 (c32) or bf16 (c16). Strided batched over `batch`. */
int gemm(exec_cuda_ctx *x, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
         const bf16 *a, int64_t lda, const bf16 *b, int64_t ldb, float beta, float *c32,
         bf16 *c16, int64_t ldc, base_error *e);
int gemm_batched(exec_cuda_ctx *x, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                 float alpha, const bf16 *a, int64_t lda, int64_t sa, const bf16 *b, int64_t ldb,
                 int64_t sb, float beta, float *c32, bf16 *c16, int64_t ldc, int64_t sc,
                 int64_t batch, base_error *e);

/* Norms (elementwise.cu). gpt: LayerNorm with scale g and bias b (may be NULL) saving mean and
 * rstd; else RMSNorm saving rstd (mean unused). Rows of n. y NULL: the statistics only, the same
 * bits as the forward's (a backward recomputes them from the kept input, as the cost model
 * keeps no statistics). */
int norm_f(exec_cuda_ctx *x, bool layer, const bf16 *in, const bf16 *g, const bf16 *b, bf16 *y,
           float *mean, float *rstd, int64_t rows, int64_t n, double eps, base_error *e);
/* dx = norm backward of dy (fp32 or bf16 upstream) [+ add (bf16), the residual gradient]. */
int norm_bi(exec_cuda_ctx *x, bool layer, const float *dy32, const bf16 *dy16, const bf16 *in,
            const bf16 *g, const float *mean, const float *rstd, bf16 *dx, const bf16 *add,
            int64_t rows, int64_t n, base_error *e);
/* dg += sum_rows dy xhat, db += sum_rows dy (db may be NULL). */
int norm_bw(exec_cuda_ctx *x, bool layer, const float *dy32, const bf16 *dy16, const bf16 *in,
            const float *mean, const float *rstd, float *dg, float *db, int64_t rows, int64_t n,
            base_error *e);

/* Sequence parallelism (exec_shard.sp): the norm input (which 0) or output (which 1) rows of
 * block k of the tokens, from the gathered pairs xg (rank k's [input | output] at k * 2*tl*h),
 * else the kept tensor (one block of every row). */
static inline const bf16 *sp_norm_rows(const exec_shard *s, const void *xg, const bf16 *kept,
                                       int64_t k, int which, int64_t tl, int64_t h)
{
    return s->sp ? (const bf16 *)xg + (k * 2 + which) * tl * h : kept;
}
/* A region's pre-norm backward over all b*s rows, block by block of exec_sp_rows (xg, kept_x as
 * sp_norm_rows): the statistics recomputed into mean/rstd, then dx = the norm's input gradient
 * from dy (fp32) plus add (the residual's gradient, may be NULL) (norm_bi_rows); the scale and
 * bias gradients accumulated (norm_bw_rows, reading the statistics norm_bi_rows left). */
int norm_bi_rows(exec_cuda_ctx *x, const exec_cfg *c, const exec_shard *s, const void *xg,
                 const bf16 *kept_x, const float *dy, const bf16 *g, float *mean, float *rstd,
                 bf16 *dx, const bf16 *add, base_error *e);
int norm_bw_rows(exec_cuda_ctx *x, const exec_cfg *c, const exec_shard *s, const void *xg,
                 const bf16 *kept_x, const float *dy, const float *mean, const float *rstd,
                 float *dg, float *db, base_error *e);

/* y[i] = dropout(y[i] + bias[i % n] if bias) (+ resid[i] if resid), over rows x n; the mask of
 * element i is keep(key, idx0 + i). p = 0: no dropout. out may be y. */
int bias_drop_resid(exec_cuda_ctx *x, const bf16 *y, bf16 *out, int64_t rows, int64_t n,
                    const bf16 *bias, uint64_t key, uint64_t idx0, double p, const bf16 *resid,
                    base_error *e);
/* x[r][j] += b[j] */
int bias_add(exec_cuda_ctx *x, bf16 *y, int64_t rows, int64_t n, const bf16 *b, base_error *e);
/* out[j] += sum_r x[r][j] */
int colsum_acc(exec_cuda_ctx *x, const bf16 *in, int64_t rows, int64_t n, float *out,
               base_error *e);
int gelu_f(exec_cuda_ctx *x, const bf16 *in, bf16 *y, int64_t n, base_error *e);
/* dx = dy gelu'(x); dx may be dy */
int gelu_bi(exec_cuda_ctx *x, const bf16 *dy, const bf16 *in, bf16 *dx, int64_t n,
            base_error *e);
int swiglu_f(exec_cuda_ctx *x, const bf16 *g, const bf16 *u, bf16 *a, int64_t n, base_error *e);
/* dg may be da */
int swiglu_bi(exec_cuda_ctx *x, const bf16 *da, const bf16 *g, const bf16 *u, bf16 *dg, bf16 *du,
              int64_t n, base_error *e);
/* cos/sin table [s][d/2][2] and the rotation of every head of every token (in place). */
int rope_table(exec_cuda_ctx *x, float *cs, int64_t s, int64_t d, double theta, base_error *e);
int rope_apply(exec_cuda_ctx *x, bf16 *v, int64_t tokens, int64_t heads, int64_t d, int64_t s,
               const float *cs, bool inverse, base_error *e);
/* *out = sum of squares of fp32 x (deterministic: fixed blocks, then one block) added to *out
 * when accumulate, else written. */
int sumsq(exec_cuda_ctx *x, const float *in, int64_t n, double *out, bool accumulate,
          base_error *e);

/* Bytes of each region's work buffer, the pass's workspace (the region files' layouts; pass_f:
 * the prefix F and R use, else B's and BI's, which BI leaves to BW): plan_tensors.h's work rows,
 * which ir/cost.c sums into ir_region_work_bytes, at bf16 (up to the 16-byte alignment above). */
int64_t embed_work_bytes(const exec_cfg *c, const exec_shard *s, bool pass_f);
int64_t attn_work_bytes(const exec_cfg *c, const exec_shard *s, bool pass_f);
int64_t mlp_work_bytes(const exec_cfg *c, const exec_shard *s, bool pass_f);
int64_t moe_gate_work_bytes(const exec_cfg *c, const exec_shard *s, bool pass_f);
int64_t moe_experts_work_bytes(const exec_cfg *c, const exec_shard *s, bool pass_f);
int64_t moe_combine_work_bytes(const exec_cfg *c, const exec_shard *s, bool pass_f);
int64_t head_work_bytes(const exec_cfg *c, const exec_shard *s, bool pass_f);

/* Under a recompute mode (exec_act_mode, exec_act_part): the bytes F keeps (returned) and R
 * rebuilds (*rebuilt) of each region's act buffer; EXEC_ACT_ALL keeps everything. The region
 * files' layouts, walked from plan_tensors.h's table. */
int64_t embed_act_split(const exec_cfg *c, const exec_shard *s, int mode, int64_t *rebuilt);
int64_t attn_act_split(const exec_cfg *c, const exec_shard *s, int mode, int64_t *rebuilt);
int64_t mlp_act_split(const exec_cfg *c, const exec_shard *s, int mode, int64_t *rebuilt);
int64_t moe_gate_act_split(const exec_cfg *c, const exec_shard *s, int mode, int64_t *rebuilt);
int64_t moe_experts_act_split(const exec_cfg *c, const exec_shard *s, int mode, int64_t *rebuilt);
int64_t moe_combine_act_split(const exec_cfg *c, const exec_shard *s, int mode, int64_t *rebuilt);
int64_t head_act_split(const exec_cfg *c, const exec_shard *s, int mode, int64_t *rebuilt);

/* Bytes of each region's act buffer, what F keeps for the backward (the region files' layouts):
 * plan_tensors.h's act rows, which ir/cost.c sums into ir_region_activation_bytes, at bf16 with
 * flash attention, less the dropout masks, which these kernels regenerate from their counters. */
int64_t embed_act_bytes(const exec_cfg *c, const exec_shard *s);
int64_t attn_act_bytes(const exec_cfg *c, const exec_shard *s);
int64_t mlp_act_bytes(const exec_cfg *c, const exec_shard *s);
int64_t moe_gate_act_bytes(const exec_cfg *c, const exec_shard *s);
int64_t moe_experts_act_bytes(const exec_cfg *c, const exec_shard *s);
int64_t moe_combine_act_bytes(const exec_cfg *c, const exec_shard *s);
int64_t head_act_bytes(const exec_cfg *c, const exec_shard *s);

#endif
