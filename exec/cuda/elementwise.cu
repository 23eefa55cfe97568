/* elementwise.cu — the building blocks the regions chain: LayerNorm / RMSNorm forward, input
 * gradient and weight gradient (one warp per row, fp32 statistics), bias + dropout + residual in
 * one pass, bias gradients, GELU and SwiGLU with their derivatives, RoPE, and a deterministic sum
 * of squares. The formulas are the CPU kernels' (exec/cpu/norms.c, mlp.c, attention.c); values
 * are read from bf16, computed in fp32 and rounded once when stored.
 *
 * Weight-gradient column sums (norm scales, biases) add block partials with fp32 atomics: fast,
 * but the order of the additions varies from run to run, so those gradients are reproducible to
 * rounding only. */
#include "common.cuh"

#define ROWS_PER_BLOCK 8 /* warps of a 256-thread block, one row each */

static inline unsigned row_blocks(int64_t rows)
{
    return (unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
}

/* ---------------------------------------------------------------- norms */

template <bool LAYER>
__global__ void k_norm_f(const bf16 *x, const bf16 *g, const bf16 *b, bf16 *y, float *mean,
                         float *rstd, int64_t rows, int64_t n, float eps)
{
    const int64_t r = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (r >= rows) return; /* a whole warp leaves together */
    const bf16 *xr = x + r * n;
    float mu = 0.f;
    if (LAYER) {
        float s = 0.f;
        for (int64_t j = lane; j < n; j += 32) s += ldf(xr + j);
        mu = warp_sum(s) / (float)n;
    }
    float ss = 0.f;
    for (int64_t j = lane; j < n; j += 32) {
        float d = ldf(xr + j) - mu;
        ss += d * d;
    }
    const float rs = rsqrtf(warp_sum(ss) / (float)n + eps);
    if (lane == 0) {
        if (LAYER) mean[r] = mu;
        rstd[r] = rs;
    }
    if (!y) return; /* the statistics only: a backward recomputing them from the kept input */
    bf16 *yr = y + r * n;
    for (int64_t j = lane; j < n; j += 32) {
        float v = (ldf(xr + j) - mu) * rs * ldf(g + j);
        if (LAYER && b) v += ldf(b + j);
        stf(yr + j, v);
    }
}

int norm_f(exec_cuda_ctx *x, bool layer, const bf16 *in, const bf16 *g, const bf16 *b, bf16 *y,
           float *mean, float *rstd, int64_t rows, int64_t n, double eps, base_error *e)
{
    if (rows <= 0) return 0;
    if (layer)
        k_norm_f<true><<<row_blocks(rows), 256, 0, x->stream>>>(in, g, b, y, mean, rstd, rows, n,
                                                                (float)eps);
    else
        k_norm_f<false><<<row_blocks(rows), 256, 0, x->stream>>>(in, g, b, y, mean, rstd, rows, n,
                                                                 (float)eps);
    LAUNCH_OK("k_norm_f");
    return 0;
}

/* LayerNorm: dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)); RMSNorm without the
 * mean(dxhat) term; dxhat = dy g. */
template <bool LAYER, typename TD>
__global__ void k_norm_bi(const TD *dy, const bf16 *x, const bf16 *g, const float *mean,
                          const float *rstd, bf16 *dx, const bf16 *add, int64_t rows, int64_t n)
{
    const int64_t r = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const bf16 *xr = x + r * n;
    const TD *dr = dy + r * n;
    const float mu = LAYER ? mean[r] : 0.f, rs = rstd[r];
    float m1 = 0.f, m2 = 0.f;
    for (int64_t j = lane; j < n; j += 32) {
        float dxh = ldf(dr + j) * ldf(g + j);
        m1 += dxh;
        m2 += dxh * (ldf(xr + j) - mu) * rs;
    }
    m1 = LAYER ? warp_sum(m1) / (float)n : 0.f;
    m2 = warp_sum(m2) / (float)n;
    bf16 *out = dx + r * n;
    for (int64_t j = lane; j < n; j += 32) {
        float xh = (ldf(xr + j) - mu) * rs;
        float v = rs * (ldf(dr + j) * ldf(g + j) - m1 - xh * m2);
        if (add) v += ldf(add + r * n + j);
        stf(out + j, v);
    }
}

int norm_bi(exec_cuda_ctx *x, bool layer, const float *dy32, const bf16 *dy16, const bf16 *in,
            const bf16 *g, const float *mean, const float *rstd, bf16 *dx, const bf16 *add,
            int64_t rows, int64_t n, base_error *e)
{
    if (rows <= 0) return 0;
    const unsigned nb = row_blocks(rows);
    if (dy32) {
        if (layer)
            k_norm_bi<true, float><<<nb, 256, 0, x->stream>>>(dy32, in, g, mean, rstd, dx, add,
                                                              rows, n);
        else
            k_norm_bi<false, float><<<nb, 256, 0, x->stream>>>(dy32, in, g, mean, rstd, dx, add,
                                                               rows, n);
    } else {
        if (layer)
            k_norm_bi<true, bf16><<<nb, 256, 0, x->stream>>>(dy16, in, g, mean, rstd, dx, add,
                                                             rows, n);
        else
            k_norm_bi<false, bf16><<<nb, 256, 0, x->stream>>>(dy16, in, g, mean, rstd, dx, add,
                                                              rows, n);
    }
    LAUNCH_OK("k_norm_bi");
    return 0;
}

/* Column sums over a chunk of rows per block, added with atomics: dg[j] += sum dy xhat,
 * db[j] += sum dy. */
#define COL_ROWS 64

template <bool LAYER, typename TD>
__global__ void k_norm_bw(const TD *dy, const bf16 *x, const float *mean, const float *rstd,
                          float *dg, float *db, int64_t rows, int64_t n)
{
    const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    const int64_t r0 = (int64_t)blockIdx.y * COL_ROWS;
    const int64_t r1 = r0 + COL_ROWS < rows ? r0 + COL_ROWS : rows;
    float ag = 0.f, ab = 0.f;
    for (int64_t r = r0; r < r1; r++) {
        float d = ldf(dy + r * n + j);
        float xh = (ldf(x + r * n + j) - (LAYER ? mean[r] : 0.f)) * rstd[r];
        ag += d * xh;
        ab += d;
    }
    atomicAdd(dg + j, ag);
    if (db) atomicAdd(db + j, ab);
}

int norm_bw(exec_cuda_ctx *x, bool layer, const float *dy32, const bf16 *dy16, const bf16 *in,
            const float *mean, const float *rstd, float *dg, float *db, int64_t rows, int64_t n,
            base_error *e)
{
    if (rows <= 0 || n <= 0) return 0;
    dim3 grid((unsigned)((n + 255) / 256), (unsigned)((rows + COL_ROWS - 1) / COL_ROWS));
    if (grid.y > 65535) return base_errorf(e, "norm_bw: %lld rows are too many", (long long)rows);
    if (dy32) {
        if (layer)
            k_norm_bw<true, float><<<grid, 256, 0, x->stream>>>(dy32, in, mean, rstd, dg, db, rows, n);
        else
            k_norm_bw<false, float><<<grid, 256, 0, x->stream>>>(dy32, in, mean, rstd, dg, db, rows, n);
    } else {
        if (layer)
            k_norm_bw<true, bf16><<<grid, 256, 0, x->stream>>>(dy16, in, mean, rstd, dg, db, rows, n);
        else
            k_norm_bw<false, bf16><<<grid, 256, 0, x->stream>>>(dy16, in, mean, rstd, dg, db, rows, n);
    }
    LAUNCH_OK("k_norm_bw");
    return 0;
}

int norm_bi_rows(exec_cuda_ctx *x, const exec_cfg *c, const exec_shard *s, const void *xg,
                 const bf16 *kept_x, const float *dy, const bf16 *g, float *mean, float *rstd,
                 bf16 *dx, const bf16 *add, base_error *e)
{
    const int64_t tl = exec_sp_rows(c, s), h = c->h;
    if (s->sp && !xg)
        return base_errorf(e, "a sequence-parallel backward without the gathered norm inputs (xg)");
    for (int64_t k = 0; k < exec_sp_blocks(s); k++) {
        const int64_t r0 = k * tl;
        const bf16 *xk = sp_norm_rows(s, xg, kept_x, k, 0, tl, h);
        TRY(norm_f(x, c->gpt, xk, NULL, NULL, NULL, mean + r0, rstd + r0, tl, h, c->norm_eps, e));
        TRY(norm_bi(x, c->gpt, dy + r0 * h, NULL, xk, g, mean + r0, rstd + r0, dx + r0 * h,
                    add ? add + r0 * h : NULL, tl, h, e));
    }
    return 0;
}

int norm_bw_rows(exec_cuda_ctx *x, const exec_cfg *c, const exec_shard *s, const void *xg,
                 const bf16 *kept_x, const float *dy, const float *mean, const float *rstd,
                 float *dg, float *db, base_error *e)
{
    const int64_t tl = exec_sp_rows(c, s), h = c->h;
    if (s->sp && !xg)
        return base_errorf(e, "a sequence-parallel backward without the gathered norm inputs (xg)");
    for (int64_t k = 0; k < exec_sp_blocks(s); k++) {
        const int64_t r0 = k * tl;
        TRY(norm_bw(x, c->gpt, dy + r0 * h, NULL, sp_norm_rows(s, xg, kept_x, k, 0, tl, h),
                    mean + r0, rstd + r0, dg, db, tl, h, e));
    }
    return 0;
}

/* ---------------------------------------------------------------- bias, dropout, residual */

__global__ void k_bias_drop_resid(const bf16 *y, bf16 *out, int64_t total, int64_t n,
                                  const bf16 *bias, uint64_t key, uint64_t idx0, double p,
                                  float scale, const bf16 *resid)
{
    GRID_STRIDE(i, total)
    {
        float v = ldf(y + i);
        if (bias) v += ldf(bias + i % n);
        if (p > 0) v = exec_cuda_dropout_keep(key, idx0 + (uint64_t)i, p) ? v * scale : 0.f;
        if (resid) v += ldf(resid + i);
        stf(out + i, v);
    }
}

int bias_drop_resid(exec_cuda_ctx *x, const bf16 *y, bf16 *out, int64_t rows, int64_t n,
                    const bf16 *bias, uint64_t key, uint64_t idx0, double p, const bf16 *resid,
                    base_error *e)
{
    const int64_t total = rows * n;
    if (total <= 0) return 0;
    const float scale = p > 0 ? (float)(1.0 / (1.0 - p)) : 1.f;
    k_bias_drop_resid<<<grid_for(total, 256), 256, 0, x->stream>>>(y, out, total, n, bias, key,
                                                                   idx0, p, scale, resid);
    LAUNCH_OK("k_bias_drop_resid");
    return 0;
}

__global__ void k_bias_add(bf16 *y, int64_t total, int64_t n, const bf16 *b)
{
    GRID_STRIDE(i, total) stf(y + i, ldf(y + i) + ldf(b + i % n));
}

int bias_add(exec_cuda_ctx *x, bf16 *y, int64_t rows, int64_t n, const bf16 *b, base_error *e)
{
    const int64_t total = rows * n;
    if (total <= 0 || !b) return 0;
    k_bias_add<<<grid_for(total, 256), 256, 0, x->stream>>>(y, total, n, b);
    LAUNCH_OK("k_bias_add");
    return 0;
}

__global__ void k_colsum(const bf16 *in, int64_t rows, int64_t n, float *out)
{
    const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    const int64_t r0 = (int64_t)blockIdx.y * COL_ROWS;
    const int64_t r1 = r0 + COL_ROWS < rows ? r0 + COL_ROWS : rows;
    float a = 0.f;
    for (int64_t r = r0; r < r1; r++) a += ldf(in + r * n + j);
    atomicAdd(out + j, a);
}

int colsum_acc(exec_cuda_ctx *x, const bf16 *in, int64_t rows, int64_t n, float *out,
               base_error *e)
{
    if (rows <= 0 || n <= 0 || !out) return 0;
    dim3 grid((unsigned)((n + 255) / 256), (unsigned)((rows + COL_ROWS - 1) / COL_ROWS));
    if (grid.y > 65535) return base_errorf(e, "colsum: %lld rows are too many", (long long)rows);
    k_colsum<<<grid, 256, 0, x->stream>>>(in, rows, n, out);
    LAUNCH_OK("k_colsum");
    return 0;
}

/* ---------------------------------------------------------------- activations */

#define GELU_C 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

__global__ void k_gelu_f(const bf16 *x, bf16 *y, int64_t n)
{
    GRID_STRIDE(i, n)
    {
        float v = ldf(x + i);
        stf(y + i, 0.5f * v * (1.f + tanhf(GELU_C * (v + GELU_A * v * v * v))));
    }
}

__global__ void k_gelu_bi(const bf16 *dy, const bf16 *x, bf16 *dx, int64_t n)
{
    GRID_STRIDE(i, n)
    {
        float v = ldf(x + i);
        float t = tanhf(GELU_C * (v + GELU_A * v * v * v));
        float d = 0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * GELU_C * (1.f + 3.f * GELU_A * v * v);
        stf(dx + i, ldf(dy + i) * d);
    }
}

__device__ __forceinline__ float sigmoidf_(float g) { return 1.f / (1.f + expf(-g)); }

__global__ void k_swiglu_f(const bf16 *g, const bf16 *u, bf16 *a, int64_t n)
{
    GRID_STRIDE(i, n)
    {
        float gv = ldf(g + i);
        stf(a + i, gv * sigmoidf_(gv) * ldf(u + i));
    }
}

/* da/du = silu(g), da/dg = u sig(g) (1 + g (1 - sig(g))); dg may alias da (read first). */
__global__ void k_swiglu_bi(const bf16 *da, const bf16 *g, const bf16 *u, bf16 *dg, bf16 *du,
                            int64_t n)
{
    GRID_STRIDE(i, n)
    {
        float d = ldf(da + i), gv = ldf(g + i), uv = ldf(u + i), sg = sigmoidf_(gv);
        stf(du + i, d * gv * sg);
        stf(dg + i, d * uv * sg * (1.f + gv * (1.f - sg)));
    }
}

#define EW_LAUNCH(kern, n, ...)                                                                \
    do {                                                                                       \
        if ((n) <= 0) return 0;                                                                \
        kern<<<grid_for((n), 256), 256, 0, x->stream>>>(__VA_ARGS__);                          \
        LAUNCH_OK(#kern);                                                                      \
        return 0;                                                                              \
    } while (0)

int gelu_f(exec_cuda_ctx *x, const bf16 *in, bf16 *y, int64_t n, base_error *e)
{
    EW_LAUNCH(k_gelu_f, n, in, y, n);
}
int gelu_bi(exec_cuda_ctx *x, const bf16 *dy, const bf16 *in, bf16 *dx, int64_t n, base_error *e)
{
    EW_LAUNCH(k_gelu_bi, n, dy, in, dx, n);
}
int swiglu_f(exec_cuda_ctx *x, const bf16 *g, const bf16 *u, bf16 *a, int64_t n, base_error *e)
{
    EW_LAUNCH(k_swiglu_f, n, g, u, a, n);
}
int swiglu_bi(exec_cuda_ctx *x, const bf16 *da, const bf16 *g, const bf16 *u, bf16 *dg, bf16 *du,
              int64_t n, base_error *e)
{
    EW_LAUNCH(k_swiglu_bi, n, da, g, u, dg, du, n);
}

/* ---------------------------------------------------------------- RoPE */

/* cos and sin of pos theta^(-2i/d), computed in double as the CPU does, stored fp32. */
__global__ void k_rope_table(float *cs, int64_t s, int64_t d, double theta)
{
    const int64_t half = d / 2;
    GRID_STRIDE(idx, s * half)
    {
        int64_t pos = idx / half, i = idx % half;
        double ang = (double)pos * pow(theta, -2.0 * (double)i / (double)d);
        cs[idx * 2] = (float)cos(ang);
        cs[idx * 2 + 1] = (float)sin(ang);
    }
}

int rope_table(exec_cuda_ctx *x, float *cs, int64_t s, int64_t d, double theta, base_error *e)
{
    EW_LAUNCH(k_rope_table, s * (d / 2), cs, s, d, theta);
}

/* "rotate half": (a, b) = (v[i], v[i + d/2]) -> (a cos - b sin, a sin + b cos); the inverse
 * (the backward) rotates by -angle. One thread per pair. */
__global__ void k_rope_apply(bf16 *v, int64_t tokens, int64_t heads, int64_t d, int64_t s,
                             const float *cs, bool inverse)
{
    const int64_t half = d / 2;
    GRID_STRIDE(idx, tokens * heads * half)
    {
        int64_t i = idx % half, th = idx / half, t = th / heads;
        const float *row = cs + ((t % s) * half + i) * 2;
        float co = row[0], si = inverse ? -row[1] : row[1];
        bf16 *p = v + th * d;
        float a = ldf(p + i), b = ldf(p + i + half);
        stf(p + i, a * co - b * si);
        stf(p + i + half, a * si + b * co);
    }
}

int rope_apply(exec_cuda_ctx *x, bf16 *v, int64_t tokens, int64_t heads, int64_t d, int64_t s,
               const float *cs, bool inverse, base_error *e)
{
    EW_LAUNCH(k_rope_apply, tokens * heads * (d / 2), v, tokens, heads, d, s, cs, inverse);
}

/* ---------------------------------------------------------------- sum of squares */

/* Block sums of squares in double into partials (a fixed number of blocks), then one block adds
 * the partials in a fixed order: the same inputs give the same bits. */
__global__ void k_sumsq_partial(const float *x, int64_t n, double *partials)
{
    __shared__ double sh[32];
    double a = 0;
    GRID_STRIDE(i, n) a += (double)x[i] * (double)x[i];
    a = warp_sum_d(a);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x / 32] = a;
    __syncthreads();
    if (threadIdx.x < 32) {
        double v = threadIdx.x < blockDim.x / 32 ? sh[threadIdx.x] : 0;
        v = warp_sum_d(v);
        if (threadIdx.x == 0) partials[blockIdx.x] = v;
    }
}

__global__ void k_sumsq_final(const double *partials, int np, double *out, bool accumulate)
{
    __shared__ double sh[32];
    double a = 0;
    for (int i = threadIdx.x; i < np; i += blockDim.x) a += partials[i];
    a = warp_sum_d(a);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x / 32] = a;
    __syncthreads();
    if (threadIdx.x < 32) {
        double v = threadIdx.x < blockDim.x / 32 ? sh[threadIdx.x] : 0;
        v = warp_sum_d(v);
        if (threadIdx.x == 0) *out = accumulate ? *out + v : v;
    }
}

int sumsq(exec_cuda_ctx *x, const float *in, int64_t n, double *out, bool accumulate,
          base_error *e)
{
    int nb = (int)grid_for(n, 256);
    if (nb > EXEC_CUDA_PARTIALS) nb = EXEC_CUDA_PARTIALS;
    if (n > 0) {
        k_sumsq_partial<<<nb, 256, 0, x->stream>>>(in, n, x->partials);
        LAUNCH_OK("k_sumsq_partial");
    } else {
        nb = 0;
    }
    k_sumsq_final<<<1, 256, 0, x->stream>>>(x->partials, nb, out, accumulate);
    LAUNCH_OK("k_sumsq_final");
    return 0;
}
