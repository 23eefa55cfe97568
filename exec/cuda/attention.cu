/* attention.cu — the attention region on the GPU: pre-norm, Q/K/V projections (biases for GPT),
 * Qwen3's per-head QK-norm, RoPE (Llama), causal softmax attention with grouped-query heads
 * (dropout on the probabilities for GPT), the out-projection (bias for GPT), dropout and the
 * residual — exec/cpu/attention.c's region, with the same shard semantics (a shard computes its
 * query heads and the key/value heads they use; its output is a partial sum).
 *
 * The attention core is tiled with an online softmax (flash-style), in fp32 on bf16 tiles held in
 * shared memory:
 *   forward  (k_attn_fwd): a warp owns R query rows; per tile of 32 keys each lane scores one key
 *            against the warp's rows, the running max m and sum l are updated with the tile's
 *            max, and each lane accumulates its d/32 output columns. The output O = (sum_k
 *            dropout(P)_k V_k) and the row's log-sum-exp m + log l are kept; the probabilities
 *            never exist in memory.
 *   backward: with D_i = dO_i . O_i (= sum_k P'_k dP'_k, dropout included) and P recomputed as
 *            exp(scale q.k - lse), dS = P o (dropout(dO V^T) - D):
 *            k_attn_bwd_dq   per query rows (as the forward): dQ = scale dS K;
 *            k_attn_bwd_dkdv per key rows: dV = P'^T dO, dK = scale dS^T Q, looping over the
 *            query heads that share the key/value head, so dK and dV are written once, without
 *            atomics (the two kernels recompute the scores rather than share them: simpler, and
 *            deterministic).
 * The dropout mask of probability (query i, key k) of (sequence, head) is the CPU's: stream
 * EXEC_DROP_ATTN_PROBS, index [global sample][global head][i][k].
 *
 * Head dimensions up to 256 (any size; compiled tile widths 32, 64, 128, 256). This is the
 * straightforward kernel the issue asks for, not a tensor-core one: it is FMA-bound, so its
 * TFLOP/s are far below the GEMMs' (tests/gpu/check.sh prints both). */
#include "common.cuh"

/* ---------------------------------------------------------------- the core */

typedef struct attn_dims {
    int64_t b, s, d, nh, nkv, qw, kw, group, head0, kv0, heads;
    float scale;
    double p;        /* dropout probability on the probabilities; 0: none */
    float pscale;    /* 1 / (1 - p) */
    uint64_t pkey;   /* dropout stream */
    int64_t sample0; /* global index of the micro-batch's first sequence */
} attn_dims;

#define ATT_R 4   /* rows per warp */
#define ATT_BK 32 /* keys (forward, dQ) or queries (dK/dV) per tile: one per lane */

/* First dropout index of (sequence bi, local head j): [global sample][global head][s][s]. */
__device__ __forceinline__ uint64_t probs_base(const attn_dims &a, int64_t bi, int64_t j)
{
    return ((uint64_t)(a.sample0 + bi) * (uint64_t)a.heads + (uint64_t)(a.head0 + j)) *
           (uint64_t)a.s * (uint64_t)a.s;
}

/* Loads `rows` rows of width d (zero beyond d and beyond s) into a [rows][D + 2] bf16 tile. */
template <int D>
__device__ __forceinline__ void load_rows(bf16 (*dst)[D + 2], const bf16 *src, int64_t stride,
                                          int64_t row0, int rows, int64_t s, int64_t d)
{
    for (int idx = threadIdx.x; idx < rows * D; idx += blockDim.x) {
        int r = idx / D, c = idx % D;
        int64_t row = row0 + r;
        dst[r][c] = (row < s && c < d) ? src[row * stride + c] : __float2bfloat16(0.f);
    }
}

/* sum over c < dpad of a[c] b[c], two bf16 at a time (dpad even; rows 4-byte aligned) */
__device__ __forceinline__ float2 bf2(const bf16 *p)
{
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(p));
}

template <int D>
constexpr int fwd_warps()
{
    return D <= 128 ? 8 : 4;
}
template <int D>
constexpr int bwd_warps()
{
    return D <= 128 ? 8 : 2;
}

template <int D, int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
    k_attn_fwd(const bf16 *q, const bf16 *k, const bf16 *v, bf16 *o, float *lse, attn_dims a)
{
    constexpr int NJ = D / 32;
    constexpr int BQ = WARPS * ATT_R;
    __shared__ __align__(16) bf16 Qs[BQ][D + 2];
    __shared__ __align__(16) bf16 Ks[ATT_BK][D + 2];
    __shared__ __align__(16) bf16 Vs[ATT_BK][D + 2];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int64_t bi = blockIdx.z, j = blockIdx.y, q0 = (int64_t)blockIdx.x * BQ;
    const int64_t kvh = (a.head0 + j) / a.group - a.kv0;
    const int dpad = (int)((a.d + 1) & ~(int64_t)1);
    const bf16 *Q = q + bi * a.s * a.qw + j * a.d;
    const bf16 *K = k + bi * a.s * a.kw + kvh * a.d;
    const bf16 *V = v + bi * a.s * a.kw + kvh * a.d;
    const uint64_t pbase = a.p > 0 ? probs_base(a, bi, j) : 0;

    load_rows<D>(Qs, Q, a.qw, q0, BQ, a.s, a.d);
    float m[ATT_R], l[ATT_R], acc[ATT_R][NJ];
#pragma unroll
    for (int r = 0; r < ATT_R; r++) {
        m[r] = -INFINITY;
        l[r] = 0.f;
#pragma unroll
        for (int jj = 0; jj < NJ; jj++) acc[r][jj] = 0.f;
    }
    const int64_t qend = q0 + BQ < a.s ? q0 + BQ : a.s; /* causal: keys < qend */
    for (int64_t k0 = 0; k0 < qend; k0 += ATT_BK) {
        __syncthreads(); /* the previous tile is consumed (and Qs is loaded) */
        load_rows<D>(Ks, K, a.kw, k0, ATT_BK, a.s, a.d);
        load_rows<D>(Vs, V, a.kw, k0, ATT_BK, a.s, a.d);
        __syncthreads();
        /* causal: a tile wholly after the warp's last row changes nothing (warp-uniform) */
        if (k0 > q0 + warp * ATT_R + ATT_R - 1) continue;
        float sc[ATT_R];
#pragma unroll
        for (int r = 0; r < ATT_R; r++) sc[r] = 0.f;
        for (int c = 0; c < dpad; c += 2) {
            float2 kk = bf2(&Ks[lane][c]);
#pragma unroll
            for (int r = 0; r < ATT_R; r++) {
                float2 qq = bf2(&Qs[warp * ATT_R + r][c]);
                sc[r] += qq.x * kk.x + qq.y * kk.y;
            }
        }
        const int64_t key = k0 + lane;
        float pd[ATT_R];
#pragma unroll
        for (int r = 0; r < ATT_R; r++) {
            const int64_t row = q0 + warp * ATT_R + r;
            const bool valid = row < a.s && key <= row;
            const float sv = valid ? sc[r] * a.scale : -INFINITY;
            const float mnew = fmaxf(m[r], warp_max(sv));
            const float pe = valid ? expf(sv - mnew) : 0.f;
            const float corr = m[r] == -INFINITY ? 0.f : expf(m[r] - mnew);
            l[r] = l[r] * corr + warp_sum(pe);
            m[r] = mnew;
#pragma unroll
            for (int jj = 0; jj < NJ; jj++) acc[r][jj] *= corr;
            pd[r] = pe;
            if (a.p > 0)
                pd[r] = valid && exec_cuda_dropout_keep(a.pkey, pbase + (uint64_t)(row * a.s + key), a.p)
                            ? pe * a.pscale
                            : 0.f;
        }
        for (int kk = 0; kk < ATT_BK; kk++) {
            float pk[ATT_R];
#pragma unroll
            for (int r = 0; r < ATT_R; r++) pk[r] = __shfl_sync(0xffffffffu, pd[r], kk);
#pragma unroll
            for (int jj = 0; jj < NJ; jj++) {
                float vv = __bfloat162float(Vs[kk][lane + 32 * jj]);
#pragma unroll
                for (int r = 0; r < ATT_R; r++) acc[r][jj] += pk[r] * vv;
            }
        }
    }
#pragma unroll
    for (int r = 0; r < ATT_R; r++) {
        const int64_t row = q0 + warp * ATT_R + r;
        if (row >= a.s) continue;
        const float inv = 1.f / l[r];
        bf16 *out = o + (bi * a.s + row) * a.qw + j * a.d;
#pragma unroll
        for (int jj = 0; jj < NJ; jj++) {
            int c = lane + 32 * jj;
            if (c < a.d) out[c] = __float2bfloat16(acc[r][jj] * inv);
        }
        if (lane == 0) lse[(bi * a.nh + j) * a.s + row] = m[r] + logf(l[r]);
    }
}

/* D[t][j] = dO . O over the head's d columns (one warp per (token, head)). */
__global__ void k_attn_dsum(const bf16 *dO, const bf16 *o, float *dsum, int64_t rows, int64_t nh,
                            int64_t d, int64_t qw)
{
    const int64_t r = (int64_t)blockIdx.x * 8 + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const int64_t t = r / nh, j = r % nh;
    const bf16 *a = dO + t * qw + j * d, *b = o + t * qw + j * d;
    float acc = 0.f;
    for (int64_t c = lane; c < d; c += 32) acc += __bfloat162float(a[c]) * __bfloat162float(b[c]);
    acc = warp_sum(acc);
    if (lane == 0) dsum[r] = acc;
}

template <int D, int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
    k_attn_bwd_dq(const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *dO, const float *lse,
                  const float *dsum, bf16 *dq, attn_dims a)
{
    constexpr int NJ = D / 32;
    constexpr int BQ = WARPS * ATT_R;
    __shared__ __align__(16) bf16 Qs[BQ][D + 2];
    __shared__ __align__(16) bf16 Gs[BQ][D + 2]; /* dO rows */
    __shared__ __align__(16) bf16 Ks[ATT_BK][D + 2];
    __shared__ __align__(16) bf16 Vs[ATT_BK][D + 2];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int64_t bi = blockIdx.z, j = blockIdx.y, q0 = (int64_t)blockIdx.x * BQ;
    const int64_t kvh = (a.head0 + j) / a.group - a.kv0;
    const int dpad = (int)((a.d + 1) & ~(int64_t)1);
    const bf16 *Q = q + bi * a.s * a.qw + j * a.d;
    const bf16 *G = dO + bi * a.s * a.qw + j * a.d;
    const bf16 *K = k + bi * a.s * a.kw + kvh * a.d;
    const bf16 *V = v + bi * a.s * a.kw + kvh * a.d;
    const uint64_t pbase = a.p > 0 ? probs_base(a, bi, j) : 0;

    load_rows<D>(Qs, Q, a.qw, q0, BQ, a.s, a.d);
    load_rows<D>(Gs, G, a.qw, q0, BQ, a.s, a.d);
    float rl[ATT_R], rd[ATT_R], acc[ATT_R][NJ];
#pragma unroll
    for (int r = 0; r < ATT_R; r++) {
        const int64_t row = q0 + warp * ATT_R + r;
        rl[r] = row < a.s ? lse[(bi * a.nh + j) * a.s + row] : 0.f;
        rd[r] = row < a.s ? dsum[(bi * a.s + row) * a.nh + j] : 0.f;
#pragma unroll
        for (int jj = 0; jj < NJ; jj++) acc[r][jj] = 0.f;
    }
    const int64_t qend = q0 + BQ < a.s ? q0 + BQ : a.s;
    for (int64_t k0 = 0; k0 < qend; k0 += ATT_BK) {
        __syncthreads();
        load_rows<D>(Ks, K, a.kw, k0, ATT_BK, a.s, a.d);
        load_rows<D>(Vs, V, a.kw, k0, ATT_BK, a.s, a.d);
        __syncthreads();
        if (k0 > q0 + warp * ATT_R + ATT_R - 1) continue; /* causal, as in the forward */
        float sc[ATT_R], dp[ATT_R];
#pragma unroll
        for (int r = 0; r < ATT_R; r++) sc[r] = dp[r] = 0.f;
        for (int c = 0; c < dpad; c += 2) {
            float2 kk = bf2(&Ks[lane][c]), vv = bf2(&Vs[lane][c]);
#pragma unroll
            for (int r = 0; r < ATT_R; r++) {
                float2 qq = bf2(&Qs[warp * ATT_R + r][c]), gg = bf2(&Gs[warp * ATT_R + r][c]);
                sc[r] += qq.x * kk.x + qq.y * kk.y;
                dp[r] += gg.x * vv.x + gg.y * vv.y;
            }
        }
        const int64_t key = k0 + lane;
        float ds[ATT_R];
#pragma unroll
        for (int r = 0; r < ATT_R; r++) {
            const int64_t row = q0 + warp * ATT_R + r;
            const bool valid = row < a.s && key <= row;
            const float p = valid ? expf(sc[r] * a.scale - rl[r]) : 0.f;
            float dpd = dp[r];
            if (a.p > 0)
                dpd = valid && exec_cuda_dropout_keep(a.pkey, pbase + (uint64_t)(row * a.s + key), a.p)
                          ? dp[r] * a.pscale
                          : 0.f;
            ds[r] = p * (dpd - rd[r]);
        }
        for (int kk = 0; kk < ATT_BK; kk++) {
            float dk[ATT_R];
#pragma unroll
            for (int r = 0; r < ATT_R; r++) dk[r] = __shfl_sync(0xffffffffu, ds[r], kk);
#pragma unroll
            for (int jj = 0; jj < NJ; jj++) {
                float kv = __bfloat162float(Ks[kk][lane + 32 * jj]);
#pragma unroll
                for (int r = 0; r < ATT_R; r++) acc[r][jj] += dk[r] * kv;
            }
        }
    }
#pragma unroll
    for (int r = 0; r < ATT_R; r++) {
        const int64_t row = q0 + warp * ATT_R + r;
        if (row >= a.s) continue;
        bf16 *out = dq + (bi * a.s + row) * a.qw + j * a.d;
#pragma unroll
        for (int jj = 0; jj < NJ; jj++) {
            int c = lane + 32 * jj;
            if (c < a.d) out[c] = __float2bfloat16(acc[r][jj] * a.scale);
        }
    }
}

template <int D, int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
    k_attn_bwd_dkdv(const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *dO, const float *lse,
                    const float *dsum, bf16 *dk, bf16 *dv, attn_dims a)
{
    constexpr int NJ = D / 32;
    constexpr int BKEY = WARPS * ATT_R;
    __shared__ __align__(16) bf16 Kr[BKEY][D + 2]; /* this block's keys and values */
    __shared__ __align__(16) bf16 Vr[BKEY][D + 2];
    __shared__ __align__(16) bf16 Qs[ATT_BK][D + 2]; /* a tile of queries and their dO */
    __shared__ __align__(16) bf16 Gs[ATT_BK][D + 2];
    __shared__ float Ls[ATT_BK], Ds[ATT_BK];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int64_t bi = blockIdx.z, kvh = blockIdx.y, k0 = (int64_t)blockIdx.x * BKEY;
    const int dpad = (int)((a.d + 1) & ~(int64_t)1);
    load_rows<D>(Kr, k + bi * a.s * a.kw + kvh * a.d, a.kw, k0, BKEY, a.s, a.d);
    load_rows<D>(Vr, v + bi * a.s * a.kw + kvh * a.d, a.kw, k0, BKEY, a.s, a.d);
    float ak[ATT_R][NJ], av[ATT_R][NJ];
#pragma unroll
    for (int r = 0; r < ATT_R; r++)
#pragma unroll
        for (int jj = 0; jj < NJ; jj++) ak[r][jj] = av[r][jj] = 0.f;

    /* the shard's query heads that use this key/value head */
    const int64_t gkv = a.kv0 + kvh;
    int64_t h0 = gkv * a.group, h1 = h0 + a.group;
    if (h0 < a.head0) h0 = a.head0;
    if (h1 > a.head0 + a.nh) h1 = a.head0 + a.nh;
    for (int64_t gh = h0; gh < h1; gh++) {
        const int64_t j = gh - a.head0;
        const bf16 *Q = q + bi * a.s * a.qw + j * a.d;
        const bf16 *G = dO + bi * a.s * a.qw + j * a.d;
        const uint64_t pbase = a.p > 0 ? probs_base(a, bi, j) : 0;
        for (int64_t t0 = (k0 / ATT_BK) * ATT_BK; t0 < a.s; t0 += ATT_BK) {
            __syncthreads(); /* the previous tile is consumed (and Kr, Vr are loaded) */
            load_rows<D>(Qs, Q, a.qw, t0, ATT_BK, a.s, a.d);
            load_rows<D>(Gs, G, a.qw, t0, ATT_BK, a.s, a.d);
            if (threadIdx.x < ATT_BK) {
                int64_t row = t0 + threadIdx.x;
                Ls[threadIdx.x] = row < a.s ? lse[(bi * a.nh + j) * a.s + row] : 0.f;
                Ds[threadIdx.x] = row < a.s ? dsum[(bi * a.s + row) * a.nh + j] : 0.f;
            }
            __syncthreads();
            /* causal: queries that all precede the warp's first key contribute nothing */
            if (t0 + ATT_BK - 1 < k0 + warp * ATT_R) continue;
            /* lane = query row t0 + lane against the warp's key rows */
            float sc[ATT_R], dp[ATT_R];
#pragma unroll
            for (int r = 0; r < ATT_R; r++) sc[r] = dp[r] = 0.f;
            for (int c = 0; c < dpad; c += 2) {
                float2 qq = bf2(&Qs[lane][c]), gg = bf2(&Gs[lane][c]);
#pragma unroll
                for (int r = 0; r < ATT_R; r++) {
                    float2 kk = bf2(&Kr[warp * ATT_R + r][c]), vv = bf2(&Vr[warp * ATT_R + r][c]);
                    sc[r] += qq.x * kk.x + qq.y * kk.y;
                    dp[r] += gg.x * vv.x + gg.y * vv.y;
                }
            }
            const int64_t row = t0 + lane;
            float pd[ATT_R], ds[ATT_R];
#pragma unroll
            for (int r = 0; r < ATT_R; r++) {
                const int64_t key = k0 + warp * ATT_R + r;
                const bool valid = row < a.s && key <= row;
                const float p = valid ? expf(sc[r] * a.scale - Ls[lane]) : 0.f;
                bool keep = valid;
                if (a.p > 0 && valid)
                    keep = exec_cuda_dropout_keep(a.pkey, pbase + (uint64_t)(row * a.s + key), a.p);
                const float sk = a.p > 0 ? a.pscale : 1.f;
                pd[r] = keep ? p * sk : 0.f;
                const float dpd = keep ? dp[r] * sk : 0.f;
                ds[r] = p * (dpd - Ds[lane]);
            }
            for (int l2 = 0; l2 < ATT_BK; l2++) {
                float pk[ATT_R], dk2[ATT_R];
#pragma unroll
                for (int r = 0; r < ATT_R; r++) {
                    pk[r] = __shfl_sync(0xffffffffu, pd[r], l2);
                    dk2[r] = __shfl_sync(0xffffffffu, ds[r], l2);
                }
#pragma unroll
                for (int jj = 0; jj < NJ; jj++) {
                    float g = __bfloat162float(Gs[l2][lane + 32 * jj]);
                    float qv = __bfloat162float(Qs[l2][lane + 32 * jj]);
#pragma unroll
                    for (int r = 0; r < ATT_R; r++) {
                        av[r][jj] += pk[r] * g;
                        ak[r][jj] += dk2[r] * qv;
                    }
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < ATT_R; r++) {
        const int64_t key = k0 + warp * ATT_R + r;
        if (key >= a.s) continue;
        bf16 *ok = dk + (bi * a.s + key) * a.kw + kvh * a.d;
        bf16 *ov = dv + (bi * a.s + key) * a.kw + kvh * a.d;
#pragma unroll
        for (int jj = 0; jj < NJ; jj++) {
            int c = lane + 32 * jj;
            if (c < a.d) {
                ok[c] = __float2bfloat16(ak[r][jj] * a.scale);
                ov[c] = __float2bfloat16(av[r][jj]);
            }
        }
    }
}

template <int D>
static int core_f(exec_cuda_ctx *x, const attn_dims &a, const bf16 *q, const bf16 *k,
                  const bf16 *v, bf16 *o, float *lse, base_error *e)
{
    constexpr int W = fwd_warps<D>();
    dim3 grid((unsigned)((a.s + W * ATT_R - 1) / (W * ATT_R)), (unsigned)a.nh, (unsigned)a.b);
    k_attn_fwd<D, W><<<grid, W * 32, 0, x->stream>>>(q, k, v, o, lse, a);
    LAUNCH_OK("k_attn_fwd");
    return 0;
}

template <int D>
static int core_b(exec_cuda_ctx *x, const attn_dims &a, const bf16 *q, const bf16 *k,
                  const bf16 *v, const bf16 *dO, const float *lse, const float *dsum, bf16 *dq,
                  bf16 *dk, bf16 *dv, base_error *e)
{
    constexpr int W = bwd_warps<D>();
    dim3 gq((unsigned)((a.s + W * ATT_R - 1) / (W * ATT_R)), (unsigned)a.nh, (unsigned)a.b);
    k_attn_bwd_dq<D, W><<<gq, W * 32, 0, x->stream>>>(q, k, v, dO, lse, dsum, dq, a);
    LAUNCH_OK("k_attn_bwd_dq");
    dim3 gk((unsigned)((a.s + W * ATT_R - 1) / (W * ATT_R)), (unsigned)a.nkv, (unsigned)a.b);
    k_attn_bwd_dkdv<D, W><<<gk, W * 32, 0, x->stream>>>(q, k, v, dO, lse, dsum, dk, dv, a);
    LAUNCH_OK("k_attn_bwd_dkdv");
    return 0;
}

static int attn_core_f(exec_cuda_ctx *x, const attn_dims &a, const bf16 *q, const bf16 *k,
                       const bf16 *v, bf16 *o, float *lse, base_error *e)
{
    if (a.b > 65535 || a.nh > 65535)
        return base_errorf(e, "attention: micro-batch %lld or %lld heads exceed the grid",
                           (long long)a.b, (long long)a.nh);
    if (a.d <= 32) return core_f<32>(x, a, q, k, v, o, lse, e);
    if (a.d <= 64) return core_f<64>(x, a, q, k, v, o, lse, e);
    if (a.d <= 128) return core_f<128>(x, a, q, k, v, o, lse, e);
    if (a.d <= 256) return core_f<256>(x, a, q, k, v, o, lse, e);
    return base_errorf(e, "attention: head_dim %lld is above the CUDA kernel's 256",
                       (long long)a.d);
}

static int attn_core_b(exec_cuda_ctx *x, const attn_dims &a, const bf16 *q, const bf16 *k,
                       const bf16 *v, const bf16 *dO, const float *lse, const float *dsum,
                       bf16 *dq, bf16 *dk, bf16 *dv, base_error *e)
{
    if (a.d <= 32) return core_b<32>(x, a, q, k, v, dO, lse, dsum, dq, dk, dv, e);
    if (a.d <= 64) return core_b<64>(x, a, q, k, v, dO, lse, dsum, dq, dk, dv, e);
    if (a.d <= 128) return core_b<128>(x, a, q, k, v, dO, lse, dsum, dq, dk, dv, e);
    if (a.d <= 256) return core_b<256>(x, a, q, k, v, dO, lse, dsum, dq, dk, dv, e);
    return base_errorf(e, "attention: head_dim %lld is above the CUDA kernel's 256",
                       (long long)a.d);
}

/* ---------------------------------------------------------------- the act and work buffers */

/* act: what F keeps, plan_tensors.h's attention rows with flash attention: the norm input x
 * and output xn (the QKV input), the Q, K, V the core used (after QK-norm and RoPE), the QK-norm
 * inputs, the core's output (the output projection's input) and the log-sum-exp of each row.
 * The dropout masks are regenerated from their counters, not kept. */
typedef struct attn_act {
    bf16 *x;            /* region input */
    bf16 *xn;           /* norm output = QKV input */
    bf16 *q, *k, *v;    /* what the core used: after QK-norm and RoPE */
    bf16 *q_raw, *k_raw;
    bf16 *o;            /* core output [T][nheads*d] */
    float *lse;         /* [b][nheads][s] */
} attn_act;

static size_t attn_layout(const exec_cfg *c, const exec_shard *sh, int mode, void *kept,
                          void *rebuilt, attn_act *A, size_t *rebuilt_bytes)
{
    plan_tensor_layout L;
    act_walk(c, sh, EXEC_ATTN, mode, &L);
    void *const base[2] = {kept, rebuilt};
    A->x = AT(L, base, ATTN_X);
    A->xn = AT(L, base, ATTN_XN);
    A->q = AT(L, base, ATTN_Q);
    A->k = AT(L, base, ATTN_K);
    A->v = AT(L, base, ATTN_V);
    A->q_raw = AT(L, base, ATTN_Q_RAW);
    A->k_raw = AT(L, base, ATTN_K_RAW);
    A->o = AT(L, base, ATTN_O);
    A->lse = AT(L, base, ATTN_LSE); /* selective recompute rebuilds the core */
    if (rebuilt_bytes) *rebuilt_bytes = (size_t)L.bytes[1];
    return (size_t)L.bytes[0];
}

/* work, in plan_tensors.h's order: F's part, the statistics (recomputed by the backward
 * from the kept inputs) and the RoPE table; the backward's part, what BI leaves for BW (the
 * gradients of the projections' outputs, of the output through dropout, of the norm output) and
 * the core's row sums D = dO . O. */
typedef struct attn_work {
    float *mean, *rstd;      /* norm statistics */
    float *q_rstd, *k_rstd;  /* QK-norm statistics */
    float *rope;             /* cos/sin [s][d/2][2] */
    bf16 *dqn, *dkn;         /* gradients of the QK-norm outputs */
    float *dsum;             /* [T][nheads] */
    bf16 *dO;                /* gradient of the core output */
    bf16 *dyd;               /* dy through the output dropout */
    bf16 *dq, *dk, *dv;      /* gradients of the projections' outputs */
    float *dxn;              /* gradient of the norm output: three GEMMs sum into it */
} attn_work;

static size_t attn_work_layout(const exec_cfg *c, const exec_shard *sh, void *b, attn_work *W,
                               bool pass_f)
{
    plan_tensor_layout L;
    work_walk(c, sh, EXEC_ATTN, pass_f, &L);
    void *const base[2] = {b, NULL};
    W->mean = AT(L, base, ATTN_MEAN);
    W->rstd = AT(L, base, ATTN_RSTD);
    W->q_rstd = AT(L, base, ATTN_Q_RSTD);
    W->k_rstd = AT(L, base, ATTN_K_RSTD);
    W->rope = AT(L, base, ATTN_ROPE);
    W->dqn = AT(L, base, ATTN_DQN);
    W->dkn = AT(L, base, ATTN_DKN);
    W->dsum = AT(L, base, ATTN_DSUM);
    W->dO = AT(L, base, ATTN_DO);
    W->dyd = AT(L, base, ATTN_DYD);
    W->dq = AT(L, base, ATTN_DQ);
    W->dk = AT(L, base, ATTN_DK);
    W->dv = AT(L, base, ATTN_DV);
    W->dxn = AT(L, base, ATTN_DXN);
    return (size_t)L.bytes[0];
}

int64_t attn_act_split(const exec_cfg *c, const exec_shard *s, int mode, int64_t *rebuilt)
{
    attn_act A;
    size_t r = 0;
    size_t k = attn_layout(c, s, mode, NULL, NULL, &A, &r);
    if (rebuilt) *rebuilt = (int64_t)r;
    return (int64_t)k;
}

int64_t attn_act_bytes(const exec_cfg *c, const exec_shard *s)
{
    return attn_act_split(c, s, EXEC_ACT_ALL, NULL);
}

int64_t attn_work_bytes(const exec_cfg *c, const exec_shard *s, bool pass_f)
{
    attn_work W;
    return (int64_t)attn_work_layout(c, s, NULL, &W, pass_f);
}

typedef struct attn_w {
    bf16 *ng, *nb, *wq, *bq, *wk, *bk, *wv, *bv, *qg, *kg, *wo, *bo;
} attn_w;
typedef struct attn_g {
    float *ng, *nb, *wq, *bq, *wk, *bk, *wv, *bv, *qg, *kg, *wo, *bo;
} attn_g;

static void attn_weights(const exec_cfg *c, const region_params *rp, const void *block, attn_w *w)
{
    w->ng = pb(rp, block, c->gpt ? "ln.g" : "norm.g");
    w->nb = pb(rp, block, "ln.b");
    w->wq = pb(rp, block, "wq");
    w->bq = pb(rp, block, "bq");
    w->wk = pb(rp, block, "wk");
    w->bk = pb(rp, block, "bk");
    w->wv = pb(rp, block, "wv");
    w->bv = pb(rp, block, "bv");
    w->qg = pb(rp, block, "q_norm.g");
    w->kg = pb(rp, block, "k_norm.g");
    w->wo = pb(rp, block, "wo");
    w->bo = pb(rp, block, "bo");
}

static void attn_grads(const exec_cfg *c, const region_params *rp, void *block, attn_g *g)
{
    g->ng = gf(rp, block, c->gpt ? "ln.g" : "norm.g");
    g->nb = gf(rp, block, "ln.b");
    g->wq = gf(rp, block, "wq");
    g->bq = gf(rp, block, "bq");
    g->wk = gf(rp, block, "wk");
    g->bk = gf(rp, block, "bk");
    g->wv = gf(rp, block, "wv");
    g->bv = gf(rp, block, "bv");
    g->qg = gf(rp, block, "q_norm.g");
    g->kg = gf(rp, block, "k_norm.g");
    g->wo = gf(rp, block, "wo");
    g->bo = gf(rp, block, "bo");
}

static attn_dims attn_dims_of(const exec_call *c)
{
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    attn_dims a;
    a.b = cfg->b;
    a.s = cfg->s;
    a.d = cfg->head_dim;
    a.nh = sh->nheads;
    a.nkv = sh->nkv;
    a.qw = sh->nheads * cfg->head_dim;
    a.kw = sh->nkv * cfg->head_dim;
    a.group = cfg->heads / cfg->kv_heads;
    a.head0 = sh->head0;
    a.kv0 = sh->kv0;
    a.heads = cfg->heads;
    a.scale = (float)(1.0 / sqrt((double)cfg->head_dim));
    a.p = cfg->dropout;
    a.pscale = cfg->dropout > 0 ? (float)(1.0 / (1.0 - cfg->dropout)) : 1.f;
    a.pkey = dropout_key(c, EXEC_DROP_ATTN_PROBS);
    a.sample0 = c->sample0;
    return a;
}

/* ---------------------------------------------------------------- passes */

extern "C" int exec_cuda_attn_f(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->x, "the input x");
    NEED(c->y, "the output y");
    NEED(c->param, "the parameter block");
    NEED(c->act, "the act buffer");
    NEED(c->work, "the work buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    TRY(region_params_get(c, EXEC_ATTN, &rp, e));
    attn_w w;
    attn_weights(cfg, &rp, c->param, &w);
    attn_act A;
    size_t rebuilt;
    attn_layout(cfg, sh, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    attn_work W;
    attn_work_layout(cfg, sh, c->work, &W, true);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, s = cfg->s, d = cfg->head_dim;
    const int64_t nh = sh->nheads, nkv = sh->nkv, qw = nh * d, kw = nkv * d;
    bf16 *y = (bf16 *)c->y;

    /* the norm and the Q/K/V projections block by block of tokens (one block without sequence
     * parallelism): each block's norm output passes through A.xn, the device's own block last,
     * so that A.x and A.xn keep exactly its rows. R under full recompute reads the input F kept:
     * then it is already in place. */
    const bf16 *xin = (const bf16 *)c->x;
    const int64_t tl = exec_sp_rows(cfg, sh), nb = exec_sp_blocks(sh), own = exec_sp_own(sh);
    if (A.x != xin + own * tl * h)
        TRY(exec_cuda_d2d(x, A.x, xin + own * tl * h, (size_t)(tl * h) * 2, e));
    bf16 *qdst = cfg->qk_norm ? A.q_raw : A.q, *kdst = cfg->qk_norm ? A.k_raw : A.k;
    for (int64_t j = 1; j <= nb; j++) {
        const int64_t k = (own + j) % nb, r0 = k * tl;
        TRY(norm_f(x, cfg->gpt, xin + r0 * h, w.ng, w.nb, A.xn, W.mean + r0, W.rstd + r0, tl, h,
                   cfg->norm_eps, e));
        TRY(gemm(x, false, false, tl, qw, h, 1, A.xn, h, w.wq, qw, 0, NULL, qdst + r0 * qw, qw, e));
        TRY(gemm(x, false, false, tl, kw, h, 1, A.xn, h, w.wk, kw, 0, NULL, kdst + r0 * kw, kw, e));
        TRY(gemm(x, false, false, tl, kw, h, 1, A.xn, h, w.wv, kw, 0, NULL, A.v + r0 * kw, kw, e));
    }
    if (cfg->gpt) {
        TRY(bias_add(x, qdst, T, qw, w.bq, e));
        TRY(bias_add(x, kdst, T, kw, w.bk, e));
        TRY(bias_add(x, A.v, T, kw, w.bv, e));
    }
    if (cfg->qk_norm) {
        TRY(norm_f(x, false, A.q_raw, w.qg, NULL, A.q, NULL, W.q_rstd, T * nh, d, cfg->norm_eps, e));
        TRY(norm_f(x, false, A.k_raw, w.kg, NULL, A.k, NULL, W.k_rstd, T * nkv, d, cfg->norm_eps,
                   e));
    }
    if (!cfg->gpt) {
        TRY(rope_table(x, W.rope, s, d, cfg->rope_theta, e));
        TRY(rope_apply(x, A.q, T, nh, d, s, W.rope, false, e));
        TRY(rope_apply(x, A.k, T, nkv, d, s, W.rope, false, e));
    }
    const attn_dims a = attn_dims_of(c);
    TRY(attn_core_f(x, a, A.q, A.k, A.v, A.o, A.lse, e));
    TRY(gemm(x, false, false, T, h, qw, 1, A.o, qw, w.wo, h, 0, NULL, y, h, e));
    return bias_drop_resid(x, y, y, T, h, sh->first ? w.bo : NULL,
                           dropout_key(c, EXEC_DROP_ATTN_OUT),
                           (uint64_t)c->sample0 * (uint64_t)(s * h), cfg->dropout,
                           sh->first ? xin : NULL, e);
}

extern "C" int exec_cuda_attn_bi(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->dy, "the output gradient dy");
    NEED(c->dx, "the input gradient dx");
    NEED(c->param, "the parameter block");
    NEED(c->act, "the act buffer");
    NEED(c->work, "the work buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    TRY(region_params_get(c, EXEC_ATTN, &rp, e));
    attn_w w;
    attn_weights(cfg, &rp, c->param, &w);
    attn_act A;
    size_t rebuilt;
    attn_layout(cfg, sh, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    attn_work W;
    attn_work_layout(cfg, sh, c->work, &W, false);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, s = cfg->s, d = cfg->head_dim;
    const int64_t nh = sh->nheads, nkv = sh->nkv, qw = nh * d, kw = nkv * d;
    const bf16 *dy = (const bf16 *)c->dy;

    /* the QK-norm statistics F computed, again from the kept inputs (the same bits); the
     * pre-norm's are recomputed by norm_bi_rows */
    if (cfg->qk_norm) {
        TRY(norm_f(x, false, A.q_raw, NULL, NULL, NULL, NULL, W.q_rstd, T * nh, d, cfg->norm_eps, e));
        TRY(norm_f(x, false, A.k_raw, NULL, NULL, NULL, NULL, W.k_rstd, T * nkv, d, cfg->norm_eps, e));
    }
    if (!cfg->gpt) TRY(rope_table(x, W.rope, s, d, cfg->rope_theta, e));

    TRY(bias_drop_resid(x, dy, W.dyd, T, h, NULL, dropout_key(c, EXEC_DROP_ATTN_OUT),
                        (uint64_t)c->sample0 * (uint64_t)(s * h), cfg->dropout, NULL, e));
    TRY(gemm(x, false, true, T, qw, h, 1, W.dyd, h, w.wo, h, 0, NULL, W.dO, qw, e));
    const int64_t drows = T * nh;
    k_attn_dsum<<<(unsigned)((drows + 7) / 8), 256, 0, x->stream>>>(W.dO, A.o, W.dsum, drows, nh,
                                                                    d, qw);
    LAUNCH_OK("k_attn_dsum");
    bf16 *dqc = cfg->qk_norm ? W.dqn : W.dq, *dkc = cfg->qk_norm ? W.dkn : W.dk;
    const attn_dims a = attn_dims_of(c);
    TRY(attn_core_b(x, a, A.q, A.k, A.v, W.dO, A.lse, W.dsum, dqc, dkc, W.dv, e));
    if (!cfg->gpt) {
        TRY(rope_apply(x, dqc, T, nh, d, s, W.rope, true, e));
        TRY(rope_apply(x, dkc, T, nkv, d, s, W.rope, true, e));
    }
    if (cfg->qk_norm) {
        TRY(norm_bi(x, false, NULL, W.dqn, A.q_raw, w.qg, NULL, W.q_rstd, W.dq, NULL, T * nh, d, e));
        TRY(norm_bi(x, false, NULL, W.dkn, A.k_raw, w.kg, NULL, W.k_rstd, W.dk, NULL, T * nkv, d,
                    e));
    }
    TRY(gemm(x, false, true, T, h, qw, 1, W.dq, qw, w.wq, qw, 0, W.dxn, NULL, h, e));
    TRY(gemm(x, false, true, T, h, kw, 1, W.dk, kw, w.wk, kw, 1, W.dxn, NULL, h, e));
    TRY(gemm(x, false, true, T, h, kw, 1, W.dv, kw, w.wv, kw, 1, W.dxn, NULL, h, e));
    return norm_bi_rows(x, cfg, sh, c->xg, A.x, W.dxn, w.ng, W.mean, W.rstd, (bf16 *)c->dx,
                        sh->first ? dy : NULL, e);
}

/* reads BI's work buffer: the statistics and the gradients it left */
extern "C" int exec_cuda_attn_bw(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->grad, "the gradient block");
    NEED(c->act, "the act buffer");
    NEED(c->work, "the work buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    TRY(region_params_get(c, EXEC_ATTN, &rp, e));
    attn_g g;
    attn_grads(cfg, &rp, c->grad, &g);
    attn_act A;
    size_t rebuilt;
    attn_layout(cfg, sh, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    attn_work W;
    attn_work_layout(cfg, sh, c->work, &W, false);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, d = cfg->head_dim;
    const int64_t nh = sh->nheads, nkv = sh->nkv, qw = nh * d, kw = nkv * d;

    /* under sequence parallelism the norm outputs of every block come from the gathered pairs */
    const int64_t tl = exec_sp_rows(cfg, sh), nb = exec_sp_blocks(sh);
    if (sh->sp) NEED(c->xg, "the gathered norm inputs and outputs xg");
    for (int64_t k = 0; k < nb; k++) {
        const int64_t r0 = k * tl;
        const bf16 *xnk = sp_norm_rows(sh, c->xg, A.xn, k, 1, tl, h);
        TRY(gemm(x, true, false, h, qw, tl, 1, xnk, h, W.dq + r0 * qw, qw, 1, g.wq, NULL, qw, e));
        TRY(gemm(x, true, false, h, kw, tl, 1, xnk, h, W.dk + r0 * kw, kw, 1, g.wk, NULL, kw, e));
        TRY(gemm(x, true, false, h, kw, tl, 1, xnk, h, W.dv + r0 * kw, kw, 1, g.wv, NULL, kw, e));
    }
    TRY(gemm(x, true, false, qw, h, T, 1, A.o, qw, W.dyd, h, 1, g.wo, NULL, h, e));
    if (cfg->gpt) {
        TRY(colsum_acc(x, W.dq, T, qw, g.bq, e));
        TRY(colsum_acc(x, W.dk, T, kw, g.bk, e));
        TRY(colsum_acc(x, W.dv, T, kw, g.bv, e));
        if (sh->first) TRY(colsum_acc(x, W.dyd, T, h, g.bo, e));
    }
    if (cfg->qk_norm) {
        TRY(norm_bw(x, false, NULL, W.dqn, A.q_raw, NULL, W.q_rstd, g.qg, NULL, T * nh, d, e));
        TRY(norm_bw(x, false, NULL, W.dkn, A.k_raw, NULL, W.k_rstd, g.kg, NULL, T * nkv, d, e));
    }
    return norm_bw_rows(x, cfg, sh, c->xg, A.x, W.dxn, W.mean, W.rstd, g.ng, g.nb, e);
}
