/* real.h — internal to exec/cpu: the element type of the typed sources. Each of blas.c, norms.c,
 * attention.c, mlp.c, moe.c, embed_head.c and optim.c is compiled twice, with
 * EXEC_REAL_BITS=32 and =64 (exec/cpu/CMakeLists.txt); `real` and FN(name) (name_f32 /
 * name_f64) make one source serve both, so the fp32 and fp64 kernels cannot drift apart.
 * Also the helpers every region shares: laying out its act and work buffers from
 * plan_tensors.h's table, the MoE route tensor, dropout, parameter lookup, call checks. */
#ifndef PIPER_EXEC_CPU_REAL_H
#define PIPER_EXEC_CPU_REAL_H

#include <math.h>
#include <string.h>

#include "kernels.h"

#if !defined(EXEC_REAL_BITS)
#error "compile with -DEXEC_REAL_BITS=32 or 64 (see exec/cpu/CMakeLists.txt)"
#elif EXEC_REAL_BITS == 64
typedef double real;
#define FN(name) name##_f64
#define REAL_DTYPE PLAN_FP64
#define R_EXP exp
#define R_TANH tanh
#elif EXEC_REAL_BITS == 32
typedef float real;
#define FN(name) name##_f32
#define REAL_DTYPE PLAN_FP32
#define R_EXP expf
#define R_TANH tanhf
#else
#error "EXEC_REAL_BITS must be 32 or 64"
#endif

/* ---------------------------------------------------------------- act and work buffer layouts */

/* A region's act buffer (what F keeps for the backward) and its work buffer (exec_call.work:
 * workspaces, norm statistics, and what BI leaves for BW) hold plan/plan_tensors.h's tensors,
 * laid out by walking that table (exec_act_layout, exec_work_layout), the table the cost model
 * sums into the plan's sizes. Each region's layout function runs the walk with base NULL to
 * measure and with the buffers to get the pointers, so the size and the use cannot disagree.
 * The CPU's rule: e and w are `real` (fp32 or wider, so w = max(e, 4) is `real`), each tensor at
 * a multiple of its own element size (the table orders act tensors so that none pads: the act
 * buffer is byte for byte the plan's sum; calloc's alignment covers the base), and the exact
 * softmax, which keeps the s x s probabilities and masks whatever the model's flash flag. */
static const exec_tensor_rule cpu_tensor_rule = {
    {sizeof(real), sizeof(real), 1, 4}, 0, 0, PLAN_TF_FLASH};

static inline void act_walk(const exec_cfg *c, const exec_shard *sh, exec_region_kind k, int mode,
                            plan_tensor_layout *L)
{
    exec_act_layout(c, sh, k, &cpu_tensor_rule, mode, L);
}
static inline void work_walk(const exec_cfg *c, const exec_shard *sh, exec_region_kind k,
                             bool pass_f, plan_tensor_layout *L)
{
    exec_work_layout(c, sh, k, &cpu_tensor_rule, pass_f, L);
}
/* Tensor PLAN_T_<id> of a walked layout in buffers base ({act, act2}, or {work, NULL}). */
#define AT(L, base, id) plan_tensor_ptr(&(L), (base), PLAN_T_##id)

/* The MoE route tensor is no region's act or work buffer: it is carved in order, each piece at a
 * multiple of its element size. */
typedef struct carver {
    char *base;
    size_t off;
} carver;

static inline void *carve_a(carver *cv, size_t bytes, size_t elem)
{
    cv->off = (cv->off + elem - 1) / elem * elem;
    void *p = cv->base ? cv->base + cv->off : NULL;
    cv->off += bytes;
    return p;
}
static inline real *carve_r(carver *cv, int64_t n)
{
    return carve_a(cv, (size_t)n * sizeof(real), sizeof(real));
}
static inline int32_t *carve_i(carver *cv, int64_t n)
{
    return carve_a(cv, (size_t)n * sizeof(int32_t), sizeof(int32_t));
}

/* Names a missing rebuilt part: under recompute the backward reads act (F's) and act2 (R's). */
#define NEED_ACT2(rebuilt)                                                                      \
    do {                                                                                       \
        if ((rebuilt) && !c->act2)                                                              \
            return base_errorf(e, "%s: the rebuilt activations (act2, %zu bytes) are missing; "  \
                                  "the executor must pass R's buffer", __func__,              \
                               (size_t)(rebuilt));                                             \
    } while (0)

/* Routing weights and probabilities are kept at least in fp32 (ir/cost.c): `real` is fp32 or
 * fp64, so that is `real`. */

/* ---------------------------------------------------------------- the MoE route tensor */

/* gate -> combine: residual [T][h], routing weights [T][k], slots [T][k] (int32, -1 = dropped).
 * Its gradient has the same layout (slots copied from the forward). */
typedef struct route_view {
    real *resid, *w;
    int32_t *slot;
} route_view;

static inline size_t route_layout(const exec_cfg *c, void *base, route_view *v)
{
    carver cv = {base, 0};
    int64_t T = c->b * c->s;
    route_view r;
    r.resid = carve_r(&cv, T * c->h);
    r.w = carve_r(&cv, T * c->top_k);
    r.slot = carve_i(&cv, T * c->top_k);
    if (v) *v = r;
    return cv.off;
}

/* ---------------------------------------------------------------- sequence parallelism */

/* Under sequence parallelism (exec_shard.sp) the rows of the tokens, [b*s][width], are cut in
 * tp blocks of tl = b*s/tp rows; a region keeps the rows of block tp_rank (the block a
 * reduce-scatter gives that rank) of its norm input, norm output and output dropout mask, and
 * its backward reads the whole norm input and output from exec_call.xg: rank k's kept
 * [norm input | norm output] pair of blocks at k * 2*tl*h. Without it there is one block. */
static inline int64_t sp_rows(const exec_cfg *c, const exec_shard *s) { return exec_sp_rows(c, s); }
static inline int sp_blocks(const exec_shard *s) { return exec_sp_blocks(s); }
static inline int sp_own(const exec_shard *s) { return exec_sp_own(s); }
/* The norm input (which 0) or output (which 1) rows of block k: under sequence parallelism from
 * the gathered pairs xg, else the kept tensor (one block of every row). */
static inline const real *sp_norm_rows(const exec_shard *s, const void *xg, const real *kept,
                                       int64_t k, int which, int64_t tl, int64_t h)
{
    return s->sp ? (const real *)xg + (k * 2 + which) * tl * h : kept;
}

/* ---------------------------------------------------------------- dropout */

/* Dropout forward keeping its 1-byte mask (as Megatron and PyTorch do, and as ir/cost.c counts
 * it): mask[i] = keep(idx0 + i), x[i] scaled by 1/(1 - p) or zeroed. */
static inline void dropout_apply_mask(real *x, uint8_t *mask, int64_t n, uint64_t key,
                                      uint64_t idx0, double p)
{
    real scale = (real)(1.0 / (1.0 - p));
    for (int64_t i = 0; i < n; i++) {
        mask[i] = exec_dropout_keep(key, idx0 + (uint64_t)i, p);
        x[i] = mask[i] ? x[i] * scale : (real)0;
    }
}
/* Its backward from the kept mask: dx[i] = mask[i] ? dy[i] / (1 - p) : 0 (in place allowed). */
static inline void dropout_from_mask(const real *dy, real *dx, const uint8_t *mask, int64_t n,
                                     double p)
{
    real scale = (real)(1.0 / (1.0 - p));
    for (int64_t i = 0; i < n; i++) dx[i] = mask[i] ? dy[i] * scale : (real)0;
}

/* Multiplies x[i] by mask(idx0 + i) / (1 - p): dropout forward and, on a gradient, its backward
 * (the same linear map). A no-op when p == 0. */
static inline void dropout_apply(real *x, int64_t n, uint64_t key, uint64_t idx0, double p)
{
    if (p <= 0) return;
    real scale = (real)(1.0 / (1.0 - p));
    for (int64_t i = 0; i < n; i++)
        x[i] = exec_dropout_keep(key, idx0 + (uint64_t)i, p) ? x[i] * scale : (real)0;
}

/* Dropout of the [b*s][w] rows of a region's output under sequence parallelism (any number of
 * blocks, sp_blocks): the own block keeps its mask in `mask` (w*tl bytes); the other blocks'
 * masks are the same counter bits, drawn again and not kept. idx0: the first element's index. */
static inline void sp_dropout_f(const exec_shard *s, real *y, uint8_t *mask, int64_t blk,
                                uint64_t key, uint64_t idx0, double p)
{
    for (int k = 0; k < sp_blocks(s); k++) {
        uint64_t at = idx0 + (uint64_t)(k * blk);
        if (k == sp_own(s)) dropout_apply_mask(y + k * blk, mask, blk, key, at, p);
        else dropout_apply(y + k * blk, blk, key, at, p);
    }
}
/* Its backward: dx = dropout'(dy), the own block from the kept mask. */
static inline void sp_dropout_b(const exec_shard *s, const real *dy, real *dx, const uint8_t *mask,
                                int64_t blk, uint64_t key, uint64_t idx0, double p)
{
    for (int k = 0; k < sp_blocks(s); k++) {
        if (k == sp_own(s)) {
            dropout_from_mask(dy + k * blk, dx + k * blk, mask, blk, p);
        } else {
            if (dx != dy) memcpy(dx + k * blk, dy + k * blk, (size_t)blk * sizeof(real));
            dropout_apply(dx + k * blk, blk, key, idx0 + (uint64_t)(k * blk), p);
        }
    }
}

/* The stream of one dropout site of one layer in one step. Micro-batches and data-parallel
 * ranks share it: their elements differ by global sample index. */
static inline uint64_t dropout_key(const exec_call *c, int site)
{
    return exec_rng_key4(c->cfg->seed, (uint64_t)c->step, (uint64_t)(int64_t)c->layer,
                         (uint64_t)site);
}

/* ---------------------------------------------------------------- parameters */

/* A region's parameter list (exec_region_params) and, by name, a tensor's place in a parameter
 * or gradient block: regions look their tensors up by name so that the list's order is free. */
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

static inline real *param_at(const region_params *rp, const void *block, const char *name)
{
    for (int i = 0; i < rp->n; i++)
        if (strcmp(rp->p[i].name, name) == 0)
            return block ? (real *)block + rp->p[i].offset : NULL;
    return NULL;
}

/* ---------------------------------------------------------------- checks and small pieces */

/* Names the missing buffer: kernels are called by an interpreter, whose bugs should read well. */
#define NEED(ptr, what)                                                                         \
    do {                                                                                       \
        if (!(ptr))                                                                            \
            return base_errorf(e, "%s: %s is missing; the executor must pass it", __func__,   \
                               what);                                                          \
    } while (0)

/* Column sums of a [rows][n] matrix accumulated into out (bias gradients). */
static inline void colsum_acc(const real *x, int64_t rows, int64_t n, real *out)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) out[j] += x[r * n + j];
}

/* Adds a bias row to every row. */
static inline void bias_add(real *x, int64_t rows, int64_t n, const real *b)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) x[r * n + j] += b[j];
}

/* The pre-norm of attention, MLP and head: LayerNorm (GPT, scale and bias) or RMSNorm (scale
 * only; mean unused). Defined in norms.c. */
void FN(exec_norm_f)(const exec_cfg *c, const real *x, const real *g, const real *b, real *y,
                     real *mean, real *rstd, int64_t rows);
void FN(exec_norm_bi)(const exec_cfg *c, const real *dy, const real *x, const real *g,
                      const real *mean, const real *rstd, real *dx, int64_t rows,
                      bool accumulate);
void FN(exec_norm_bw)(const exec_cfg *c, const real *dy, const real *x, const real *mean,
                      const real *rstd, real *dg, real *db, int64_t rows);
/* The row statistics F computed (mean and rstd for LayerNorm, rstd for RMSNorm), recomputed
 * from the saved input with F's own arithmetic, so bit-identical: the backward rebuilds them
 * rather than keeping them (ir/cost.c does not count norm statistics, nor does the published
 * accounting). */
void FN(exec_norm_stats)(const exec_cfg *c, const real *x, real *mean, real *rstd, int64_t rows);
/* The pre-norm's backward over all b*s rows of a region on shard s, block by block (sp_blocks),
 * each block's input from sp_norm_rows(s, xg, x, ...): the input gradient dx from the norm
 * output's gradient dy, its statistics recomputed into mean/rstd (bi); the scale and bias
 * gradients accumulated from those statistics (bw). */
void FN(exec_norm_bi_rows)(const exec_cfg *c, const exec_shard *s, const void *xg, const real *x,
                           const real *dy, const real *g, real *mean, real *rstd, real *dx);
void FN(exec_norm_bw_rows)(const exec_cfg *c, const exec_shard *s, const void *xg, const real *x,
                           const real *dy, const real *mean, const real *rstd, real *dg, real *db);
void FN(exec_rmsnorm_stats)(const real *x, real *rstd, int64_t rows, int64_t n, double eps);

#endif
