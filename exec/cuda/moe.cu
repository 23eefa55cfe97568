/* moe.cu — the three MoE regions on the GPU (Llama family), as exec/cpu/moe.c: the same routing
 * rules, so that a CUDA run drops the same tokens as a CPU run.
 *
 * moe_gate: RMSNorm, router logits (bf16 GEMM, fp32 out), softmax and top-k per token (one
 * thread per token; ties go to the lower expert index), static capacity with GShard's order
 * (every token's first choice before any second choice, then token order): one block per expert
 * scans the T*k choices in that order with a block-wide prefix count, so the slot of a choice is
 * the number of earlier choices of its expert, dropped from C on. The dispatched buffer
 * [E][C][h] holds the normalised token in each used slot and zeros elsewhere; the combine weight
 * of a kept choice is its raw softmax probability. Load-balancing loss:
 * aux = coef E sum_e f_e P_e (f_e: fraction of choices, P_e: mean probability).
 * Backward: dp = the combine's weight gradients + the aux term, softmax backward, dxn = dz Wr^T +
 * the dispatched-buffer gradient of each kept slot, the RMSNorm backward and the residual.
 *
 * moe_experts: per local expert a SwiGLU FFN over its C rows of the received buffer
 * [sources][local experts][C][h]: strided-batched cuBLAS GEMMs, one batch per source.
 *
 * moe_combine: y[t] = residual[t] + sum over kept choices w[t][k] expert_out[slot].
 *
 * Buffers are plan/plan_tensors.h's rows at bf16, piece by piece (as exec/cpu/moe.c for fp32),
 * the rows the cost model sums: the act buffer holds the act rows, the work buffer the work rows,
 * in their order. What neither keeps the backward recomputes from the act: the gate's RMS
 * statistics from the kept norm input, its slots and fractions from the kept choices.
 *
 * Under recompute (exec_act_mode) each act buffer splits as exec/cpu/moe.c's: F keeps the
 * region input (act) and R rebuilds the rest (act2), or F keeps nothing; selective recompute
 * rebuilds nothing here (no attention core). R re-runs F, reading its input from the kept act
 * (so F's copies of its inputs skip when source and destination are the same). */
#include "common.cuh"

/* ---------------------------------------------------------------- the route tensor */

extern "C" int64_t exec_cuda_route_bytes(const exec_cfg *c)
{
    return (int64_t)route_layout(c, NULL, NULL);
}

extern "C" void exec_cuda_route_view(const exec_cfg *c, void *route, uint16_t **resid, float **w,
                                     int32_t **slot)
{
    route_view v;
    route_layout(c, route, &v);
    if (resid) *resid = (uint16_t *)v.resid;
    if (w) *w = v.w;
    if (slot) *slot = v.slot;
}

/* ---------------------------------------------------------------- gate */

/* act: plan_tensors.h's gate rows at bf16: the norm input x and output xn (the router's
 * input), the fp32 router probabilities [T][E] and the expert of each choice [T][k]. The slots
 * and the fractions f_e are a pure function of the choices (k_gate_capacity), and the RMS
 * statistics of x, so the backward rebuilds them (as exec/cpu/moe.c). */
typedef struct gate_act {
    bf16 *x, *xn;
    float *probs;            /* [T][E] */
    int32_t *choice;         /* [T][k] */
} gate_act;

static size_t gate_layout(const exec_cfg *c, const exec_shard *sh, int mode, void *kept,
                          void *rebuilt, gate_act *A, size_t *rebuilt_bytes)
{
    plan_tensor_layout L;
    act_walk(c, sh, EXEC_MOE_GATE, mode, &L);
    void *const base[2] = {kept, rebuilt};
    A->x = AT(L, base, MOE_GATE_X);
    A->xn = AT(L, base, MOE_GATE_XN);
    A->probs = AT(L, base, MOE_GATE_PROBS);
    A->choice = AT(L, base, MOE_GATE_CHOICE);
    if (rebuilt_bytes) *rebuilt_bytes = (size_t)L.bytes[1];
    return (size_t)L.bytes[0];
}

/* work, in plan_tensors.h's order: F's prefix (the RMS statistics, the fractions, the
 * slots), then what BI leaves for BW: the router logits' gradient dz (bf16, the operand of the
 * two GEMMs that read it) and the norm output's gradient dxn (fp32: the router's GEMM and the
 * kept slots' gradients sum into it). */
typedef struct gate_work {
    float *rstd;             /* [T] */
    float *frac;             /* [E] */
    int32_t *slot;           /* [T][k]: slot in [E*C) or -1 */
    bf16 *dz;                /* [T][E] */
    float *dxn;              /* [T][h] */
} gate_work;

static size_t gate_work_layout(const exec_cfg *c, const exec_shard *sh, void *b, gate_work *W,
                               size_t *f_bytes)
{
    plan_tensor_layout L;
    if (f_bytes) {
        work_walk(c, sh, EXEC_MOE_GATE, true, &L); /* what F and R use */
        *f_bytes = (size_t)L.bytes[0];
    }
    work_walk(c, sh, EXEC_MOE_GATE, false, &L);
    void *const base[2] = {b, NULL};
    W->rstd = AT(L, base, MOE_GATE_RSTD);
    W->frac = AT(L, base, MOE_GATE_FRAC);
    W->slot = AT(L, base, MOE_GATE_SLOT);
    W->dz = AT(L, base, MOE_GATE_DZ);
    W->dxn = AT(L, base, MOE_GATE_DXN);
    return (size_t)L.bytes[0];
}

int64_t moe_gate_act_split(const exec_cfg *c, const exec_shard *s, int mode, int64_t *rebuilt)
{
    gate_act A;
    size_t r = 0;
    size_t k = gate_layout(c, s, mode, NULL, NULL, &A, &r);
    if (rebuilt) *rebuilt = (int64_t)r;
    return (int64_t)k;
}

int64_t moe_gate_act_bytes(const exec_cfg *c, const exec_shard *s)
{
    return moe_gate_act_split(c, s, EXEC_ACT_ALL, NULL);
}

int64_t moe_gate_work_bytes(const exec_cfg *c, const exec_shard *s, bool pass_f)
{
    gate_work W;
    size_t f = 0, all = gate_work_layout(c, s, NULL, &W, &f);
    return (int64_t)(pass_f ? f : all);
}

/* Softmax of each token's router logits in place; with route, its top-k (strict '>' keeps the
 * lowest index on ties, as the CPU). */
__global__ void k_gate_softmax_topk(float *probs, int32_t *choice, int64_t T, int64_t E, int64_t k,
                                    bool route)
{
    GRID_STRIDE(t, T)
    {
        float *z = probs + t * E;
        float mx = z[0];
        for (int64_t ex = 1; ex < E; ex++) mx = fmaxf(mx, z[ex]);
        double sum = 0;
        for (int64_t ex = 0; ex < E; ex++) {
            z[ex] = expf(z[ex] - mx);
            sum += z[ex];
        }
        for (int64_t ex = 0; ex < E; ex++) z[ex] = (float)(z[ex] / sum);
        if (!route) continue;
        int32_t *ch = choice + t * k;
        for (int64_t kk = 0; kk < k; kk++) {
            int64_t best = -1;
            for (int64_t ex = 0; ex < E; ex++) {
                bool taken = false;
                for (int64_t q = 0; q < kk; q++) taken |= ch[q] == ex;
                if (!taken && (best < 0 || z[ex] > z[best])) best = ex;
            }
            ch[kk] = (int32_t)best;
        }
    }
}

/* One block per expert: slots in order (choice rank, then token), f_e = count / (T k). */
__global__ void k_gate_capacity(const int32_t *choice, int32_t *slot, float *frac, int64_t T,
                                int64_t k, int64_t C)
{
    __shared__ int warp_tot[32];
    const int ex = blockIdx.x;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int64_t used = 0;
    for (int64_t kk = 0; kk < k; kk++)
        for (int64_t t0 = 0; t0 < T; t0 += blockDim.x) {
            const int64_t t = t0 + threadIdx.x;
            const bool mine = t < T && choice[t * k + kk] == ex;
            const unsigned ballot = __ballot_sync(0xffffffffu, mine);
            if (lane == 0) warp_tot[w] = __popc(ballot);
            __syncthreads();
            int64_t before = __popc(ballot & ((1u << lane) - 1u)), total = 0;
            for (int i = 0; i < nw; i++) {
                if (i < w) before += warp_tot[i];
                total += warp_tot[i];
            }
            __syncthreads(); /* warp_tot is rewritten by the next round */
            if (mine) {
                const int64_t pos = used + before;
                slot[t * k + kk] = pos < C ? (int32_t)(ex * C + pos) : -1;
            }
            used += total;
        }
    if (threadIdx.x == 0) frac[ex] = (float)((double)used / (double)(T * k));
}

/* The slots and fractions of the act's choices into the work buffer (F, R and BI). */
static int gate_capacity(exec_cuda_ctx *x, const exec_cfg *cfg, const gate_act *A,
                         const gate_work *W, base_error *e)
{
    k_gate_capacity<<<(unsigned)cfg->experts, 256, 0, x->stream>>>(
        A->choice, W->slot, W->frac, cfg->b * cfg->s, cfg->top_k, cfg->capacity);
    LAUNCH_OK("k_gate_capacity");
    return 0;
}

/* aux = coef E sum_e f_e mean_t p[t][e] (one block). */
__global__ void k_gate_aux(const float *probs, const float *frac, int64_t T, int64_t E,
                           double coef, double *out)
{
    __shared__ double sh[32];
    double aux = 0;
    for (int64_t ex = 0; ex < E; ex++) {
        double a = 0;
        for (int64_t t = threadIdx.x; t < T; t += blockDim.x) a += probs[t * E + ex];
        a = warp_sum_d(a);
        if ((threadIdx.x & 31) == 0) sh[threadIdx.x / 32] = a;
        __syncthreads();
        if (threadIdx.x == 0) {
            double pm = 0;
            for (unsigned i = 0; i < blockDim.x / 32; i++) pm += sh[i];
            aux += (double)frac[ex] * pm / (double)T;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = coef * (double)E * aux;
}

/* The dispatched buffer (zeroed before) and the route's weights and slots. */
__global__ void k_gate_dispatch(const bf16 *xn, const int32_t *choice, const int32_t *slot,
                                const float *probs, bf16 *buf, float *rw, int32_t *rslot,
                                int64_t T, int64_t h, int64_t E, int64_t k)
{
    GRID_STRIDE(i, T * k * h)
    {
        const int64_t tk = i / h, j = i % h, t = tk / k;
        const int32_t sl = slot[tk];
        if (j == 0) {
            rslot[tk] = sl;
            /* a dropped choice weighs nothing, so nothing flows back through it */
            rw[tk] = sl >= 0 ? probs[t * E + choice[tk]] : 0.f;
        }
        if (sl >= 0) buf[(int64_t)sl * h + j] = xn[t * h + j];
    }
}

extern "C" int exec_cuda_moe_gate_f(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->x, "the input x");
    NEED(c->y, "the dispatched buffer y");
    NEED(c->y2, "the route tensor y2");
    NEED(c->param, "the parameter block");
    NEED(c->act, "the act buffer");
    NEED(c->work, "the work buffer");
    const exec_cfg *cfg = c->cfg;
    region_params rp;
    TRY(region_params_get(c, EXEC_MOE_GATE, &rp, e));
    const bf16 *ng = pb(&rp, c->param, "norm.g"), *wr = pb(&rp, c->param, "router");
    gate_act A;
    size_t rebuilt;
    gate_layout(cfg, c->shard, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    gate_work W;
    gate_work_layout(cfg, c->shard, c->work, &W, NULL);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, E = cfg->experts, k = cfg->top_k,
                  C = cfg->capacity;
    if (E > 2147483647) return base_errorf(e, "moe_gate: too many experts");

    if (A.x != c->x) /* R under full recompute reads the input F kept */
        TRY(exec_cuda_d2d(x, A.x, c->x, (size_t)(T * h) * 2, e));
    TRY(norm_f(x, false, A.x, ng, NULL, A.xn, NULL, W.rstd, T, h, cfg->norm_eps, e));
    TRY(gemm(x, false, false, T, E, h, 1, A.xn, h, wr, E, 0, A.probs, NULL, E, e));
    /* R (keep_routing) keeps F's choices; the slots and fractions live in the work buffer, so
     * both passes derive them from the choices */
    k_gate_softmax_topk<<<grid_for(T, 128), 128, 0, x->stream>>>(A.probs, A.choice, T, E, k,
                                                                 !c->keep_routing);
    LAUNCH_OK("k_gate_softmax_topk");
    TRY(gate_capacity(x, cfg, &A, &W, e));
    if (c->out) {
        k_gate_aux<<<1, 256, 0, x->stream>>>(A.probs, W.frac, T, E, cfg->aux_coef, c->out);
        LAUNCH_OK("k_gate_aux");
    }
    route_view rv;
    route_layout(cfg, c->y2, &rv);
    TRY(exec_cuda_memset0(x, c->y, (size_t)(E * C * h) * 2, e));
    TRY(exec_cuda_d2d(x, rv.resid, A.x, (size_t)(T * h) * 2, e));
    k_gate_dispatch<<<grid_for(T * k * h, 256), 256, 0, x->stream>>>(
        A.xn, A.choice, W.slot, A.probs, (bf16 *)c->y, rv.w, rv.slot, T, h, E, k);
    LAUNCH_OK("k_gate_dispatch");
    return 0;
}

/* dp[e] = aux_g f_e + the route-weight gradients of the kept choices of e; dz = p (dp - p.dp),
 * stored bf16 for the two GEMMs that use it. One thread per token. */
__global__ void k_gate_dz(const float *probs, const int32_t *choice, const int32_t *slot,
                          const float *frac, const float *dw, bf16 *dz, int64_t T, int64_t E,
                          int64_t k, float aux_g)
{
    GRID_STRIDE(t, T)
    {
        const float *p = probs + t * E;
        float dot = 0.f;
        for (int64_t ex = 0; ex < E; ex++) {
            float dp = aux_g * frac[ex];
            for (int64_t kk = 0; kk < k; kk++)
                if (slot[t * k + kk] >= 0 && choice[t * k + kk] == ex) dp += dw[t * k + kk];
            dot += p[ex] * dp;
        }
        for (int64_t ex = 0; ex < E; ex++) {
            float dp = aux_g * frac[ex];
            for (int64_t kk = 0; kk < k; kk++)
                if (slot[t * k + kk] >= 0 && choice[t * k + kk] == ex) dp += dw[t * k + kk];
            dz[t * E + ex] = __float2bfloat16(p[ex] * (dp - dot));
        }
    }
}

/* dxn[t] += dbuf[slot] for each kept choice of t. */
__global__ void k_gate_gather_grad(float *dxn, const bf16 *dbuf, const int32_t *slot, int64_t T,
                                   int64_t h, int64_t k)
{
    GRID_STRIDE(i, T * h)
    {
        const int64_t t = i / h, j = i % h;
        float a = dxn[i];
        for (int64_t kk = 0; kk < k; kk++) {
            int32_t sl = slot[t * k + kk];
            if (sl >= 0) a += ldf(dbuf + (int64_t)sl * h + j);
        }
        dxn[i] = a;
    }
}

extern "C" int exec_cuda_moe_gate_bi(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->dy, "the dispatched-buffer gradient dy");
    NEED(c->dy2, "the route gradient dy2");
    NEED(c->dx, "the input gradient dx");
    NEED(c->param, "the parameter block");
    NEED(c->act, "the act buffer");
    NEED(c->work, "the work buffer");
    const exec_cfg *cfg = c->cfg;
    region_params rp;
    TRY(region_params_get(c, EXEC_MOE_GATE, &rp, e));
    const bf16 *ng = pb(&rp, c->param, "norm.g"), *wr = pb(&rp, c->param, "router");
    gate_act A;
    size_t rebuilt;
    gate_layout(cfg, c->shard, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    gate_work W;
    gate_work_layout(cfg, c->shard, c->work, &W, NULL);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, E = cfg->experts, k = cfg->top_k;
    route_view dr;
    route_layout(cfg, (void *)c->dy2, &dr);
    /* F's work buffer is gone: the slots, fractions and RMS statistics again, from what F kept
     * (the same kernels on the same inputs, so the same bits) */
    TRY(gate_capacity(x, cfg, &A, &W, e));
    TRY(norm_f(x, false, A.x, ng, NULL, NULL, NULL, W.rstd, T, h, cfg->norm_eps, e));
    const float aux_g = (float)(cfg->aux_weight * cfg->aux_coef * (double)E / (double)T);
    k_gate_dz<<<grid_for(T, 128), 128, 0, x->stream>>>(A.probs, A.choice, W.slot, W.frac, dr.w,
                                                       W.dz, T, E, k, aux_g);
    LAUNCH_OK("k_gate_dz");
    TRY(gemm(x, false, true, T, h, E, 1, W.dz, E, wr, E, 0, W.dxn, NULL, h, e));
    k_gate_gather_grad<<<grid_for(T * h, 256), 256, 0, x->stream>>>(W.dxn, (const bf16 *)c->dy,
                                                                    W.slot, T, h, k);
    LAUNCH_OK("k_gate_gather_grad");
    return norm_bi(x, false, W.dxn, NULL, A.x, ng, NULL, W.rstd, (bf16 *)c->dx, dr.resid, T, h, e);
}

extern "C" int exec_cuda_moe_gate_bw(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->grad, "the gradient block");
    NEED(c->act, "the act buffer");
    NEED(c->work, "the work buffer BI left");
    const exec_cfg *cfg = c->cfg;
    region_params rp;
    TRY(region_params_get(c, EXEC_MOE_GATE, &rp, e));
    float *gng = gf(&rp, c->grad, "norm.g"), *gwr = gf(&rp, c->grad, "router");
    gate_act A;
    size_t rebuilt;
    gate_layout(cfg, c->shard, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    gate_work W;
    gate_work_layout(cfg, c->shard, c->work, &W, NULL);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, E = cfg->experts;
    TRY(gemm(x, true, false, h, E, T, 1, A.xn, h, W.dz, E, 1, gwr, NULL, E, e));
    return norm_bw(x, false, W.dxn, NULL, A.x, NULL, W.rstd, gng, NULL, T, h, e);
}

/* ---------------------------------------------------------------- experts */

/* act: plan_tensors.h's experts rows: the received buffer and the gate, up and down inputs. */
typedef struct experts_act {
    bf16 *x;                 /* the received buffer [rows][h] */
    bf16 *g, *u, *a;         /* [rows][f] */
} experts_act;

/* work (B only; F uses none): what BI leaves for BW, the output gradient and the gate and up
 * projections' gradients. */
typedef struct experts_work {
    bf16 *dy;                /* [rows][h] */
    bf16 *dg, *du;           /* [rows][f] */
} experts_work;

static int64_t expert_rows(const exec_cfg *c, const exec_shard *sh)
{
    return (int64_t)sh->ep * sh->nexperts * c->capacity;
}

static size_t experts_layout(const exec_cfg *c, const exec_shard *sh, int mode, void *kept,
                             void *rebuilt, experts_act *A, size_t *rebuilt_bytes)
{
    plan_tensor_layout L;
    act_walk(c, sh, EXEC_MOE_EXPERTS, mode, &L);
    void *const base[2] = {kept, rebuilt};
    A->x = AT(L, base, MOE_EXPERTS_X);
    A->g = AT(L, base, MOE_EXPERTS_G);
    A->u = AT(L, base, MOE_EXPERTS_UP);
    A->a = AT(L, base, MOE_EXPERTS_A);
    if (rebuilt_bytes) *rebuilt_bytes = (size_t)L.bytes[1];
    return (size_t)L.bytes[0];
}

static size_t experts_work_layout(const exec_cfg *c, const exec_shard *sh, void *b,
                                  experts_work *W)
{
    plan_tensor_layout L;
    work_walk(c, sh, EXEC_MOE_EXPERTS, false, &L);
    void *const base[2] = {b, NULL};
    W->dy = AT(L, base, MOE_EXPERTS_DY);
    W->dg = AT(L, base, MOE_EXPERTS_DG);
    W->du = AT(L, base, MOE_EXPERTS_DUP);
    return (size_t)L.bytes[0];
}

int64_t moe_experts_act_split(const exec_cfg *c, const exec_shard *s, int mode, int64_t *rebuilt)
{
    experts_act A;
    size_t r = 0;
    size_t k = experts_layout(c, s, mode, NULL, NULL, &A, &r);
    if (rebuilt) *rebuilt = (int64_t)r;
    return (int64_t)k;
}

int64_t moe_experts_act_bytes(const exec_cfg *c, const exec_shard *s)
{
    return moe_experts_act_split(c, s, EXEC_ACT_ALL, NULL);
}

int64_t moe_experts_work_bytes(const exec_cfg *c, const exec_shard *s, bool pass_f)
{
    experts_work W;
    return pass_f ? 0 : (int64_t)experts_work_layout(c, s, NULL, &W);
}

extern "C" int exec_cuda_moe_experts_f(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->x, "the received buffer x");
    NEED(c->y, "the output y");
    NEED(c->param, "the parameter block");
    NEED(c->act, "the act buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    TRY(region_params_get(c, EXEC_MOE_EXPERTS, &rp, e));
    const bf16 *wg = pb(&rp, c->param, "wg"), *wu = pb(&rp, c->param, "wu"),
               *wd = pb(&rp, c->param, "wd");
    experts_act A;
    size_t rebuilt;
    experts_layout(cfg, sh, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    const int64_t R = expert_rows(cfg, sh), h = cfg->h, f = sh->neffn, C = cfg->capacity,
                  ne = sh->nexperts;
    bf16 *y = (bf16 *)c->y;

    if (A.x != c->x) /* R under full recompute reads the input F kept */
        TRY(exec_cuda_d2d(x, A.x, c->x, (size_t)(R * h) * 2, e));
    for (int src = 0; src < sh->ep; src++) {
        const int64_t r0 = (int64_t)src * ne * C;
        TRY(gemm_batched(x, false, false, C, f, h, 1, A.x + r0 * h, h, C * h, wg, f, h * f, 0, NULL,
                         A.g + r0 * f, f, C * f, ne, e));
        TRY(gemm_batched(x, false, false, C, f, h, 1, A.x + r0 * h, h, C * h, wu, f, h * f, 0, NULL,
                         A.u + r0 * f, f, C * f, ne, e));
    }
    TRY(swiglu_f(x, A.g, A.u, A.a, R * f, e));
    for (int src = 0; src < sh->ep; src++) {
        const int64_t r0 = (int64_t)src * ne * C;
        TRY(gemm_batched(x, false, false, C, h, f, 1, A.a + r0 * f, f, C * f, wd, h, f * h, 0, NULL,
                         y + r0 * h, h, C * h, ne, e));
    }
    return 0;
}

extern "C" int exec_cuda_moe_experts_bi(const exec_cuda_call *cc, base_error *e)
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
    TRY(region_params_get(c, EXEC_MOE_EXPERTS, &rp, e));
    const bf16 *wg = pb(&rp, c->param, "wg"), *wu = pb(&rp, c->param, "wu"),
               *wd = pb(&rp, c->param, "wd");
    experts_act A;
    size_t rebuilt;
    experts_layout(cfg, sh, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    experts_work W;
    experts_work_layout(cfg, sh, c->work, &W);
    const int64_t R = expert_rows(cfg, sh), h = cfg->h, f = sh->neffn, C = cfg->capacity,
                  ne = sh->nexperts;
    bf16 *dx = (bf16 *)c->dx;

    /* BW reads the output gradient after dy's buffer may be gone: a copy in the work buffer */
    TRY(exec_cuda_d2d(x, W.dy, c->dy, (size_t)(R * h) * 2, e));
    /* da into dg as a workspace, then SwiGLU's backward */
    for (int src = 0; src < sh->ep; src++) {
        const int64_t r0 = (int64_t)src * ne * C;
        TRY(gemm_batched(x, false, true, C, f, h, 1, W.dy + r0 * h, h, C * h, wd, h, f * h, 0, NULL,
                         W.dg + r0 * f, f, C * f, ne, e));
    }
    TRY(swiglu_bi(x, W.dg, A.g, A.u, W.dg, W.du, R * f, e));
    for (int src = 0; src < sh->ep; src++) {
        const int64_t r0 = (int64_t)src * ne * C;
        TRY(gemm_batched(x, false, true, C, h, f, 1, W.dg + r0 * f, f, C * f, wg, f, h * f, 0, NULL,
                         dx + r0 * h, h, C * h, ne, e));
        TRY(gemm_batched(x, false, true, C, h, f, 1, W.du + r0 * f, f, C * f, wu, f, h * f, 1, NULL,
                         dx + r0 * h, h, C * h, ne, e));
    }
    return 0;
}

extern "C" int exec_cuda_moe_experts_bw(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->grad, "the gradient block");
    NEED(c->act, "the act buffer");
    NEED(c->work, "the work buffer BI left");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    TRY(region_params_get(c, EXEC_MOE_EXPERTS, &rp, e));
    float *gwg = gf(&rp, c->grad, "wg"), *gwu = gf(&rp, c->grad, "wu"), *gwd = gf(&rp, c->grad, "wd");
    experts_act A;
    size_t rebuilt;
    experts_layout(cfg, sh, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    experts_work W;
    experts_work_layout(cfg, sh, c->work, &W);
    const int64_t h = cfg->h, f = sh->neffn, C = cfg->capacity, ne = sh->nexperts;
    for (int src = 0; src < sh->ep; src++) {
        const int64_t r0 = (int64_t)src * ne * C;
        TRY(gemm_batched(x, true, false, h, f, C, 1, A.x + r0 * h, h, C * h, W.dg + r0 * f, f,
                         C * f, 1, gwg, NULL, f, h * f, ne, e));
        TRY(gemm_batched(x, true, false, h, f, C, 1, A.x + r0 * h, h, C * h, W.du + r0 * f, f,
                         C * f, 1, gwu, NULL, f, h * f, ne, e));
        TRY(gemm_batched(x, true, false, f, h, C, 1, A.a + r0 * f, f, C * f, W.dy + r0 * h, h,
                         C * h, 1, gwd, NULL, h, f * h, ne, e));
    }
    return 0;
}

/* ---------------------------------------------------------------- combine */

/* act: plan_tensors.h's combine rows: the expert outputs, the fp32 routing weights and each
 * choice's slot (the unpermute's index map). No work buffer. */
typedef struct combine_act {
    bf16 *eo;                /* expert outputs [E*C][h] */
    bf16 *resid;             /* under full recompute (EXEC_ACT_INPUT): the residual [T][h] */
    float *w;                /* routing weights [T][k] */
    int32_t *slot;           /* [T][k] */
} combine_act;

/* Everything the combine keeps is its input. Under full recompute F keeps the whole input, the
 * residual too (plan_tensors.h's restart row), so that R rebuilds the output from what F kept
 * alone: resid, w and slot then lie as a route tensor (route_layout: the same 16-byte aligned
 * pieces, from a 16-byte aligned start) right after the expert outputs, and R gets that place
 * as its x2, the expert outputs as its x. Otherwise the residual is not needed by the
 * backward, and is not kept. */
static size_t combine_layout(const exec_cfg *c, const exec_shard *sh, int mode, void *kept,
                             void *rebuilt, combine_act *A, size_t *rebuilt_bytes)
{
    plan_tensor_layout L;
    act_walk(c, sh, EXEC_MOE_COMBINE, mode, &L);
    void *const base[2] = {kept, rebuilt};
    A->eo = AT(L, base, MOE_COMBINE_EO);
    A->resid = AT(L, base, MOE_COMBINE_RESID);
    A->w = AT(L, base, MOE_COMBINE_W);
    A->slot = AT(L, base, MOE_COMBINE_SLOT);
    if (rebuilt_bytes) *rebuilt_bytes = (size_t)L.bytes[1];
    return (size_t)L.bytes[0];
}

int64_t moe_combine_act_split(const exec_cfg *c, const exec_shard *s, int mode, int64_t *rebuilt)
{
    combine_act A;
    size_t r = 0;
    size_t k = combine_layout(c, s, mode, NULL, NULL, &A, &r);
    if (rebuilt) *rebuilt = (int64_t)r;
    return (int64_t)k;
}

int64_t moe_combine_act_bytes(const exec_cfg *c, const exec_shard *s)
{
    return moe_combine_act_split(c, s, EXEC_ACT_ALL, NULL);
}

int64_t moe_combine_work_bytes(const exec_cfg *c, const exec_shard *s, bool pass_f)
{
    (void)c;
    (void)s;
    (void)pass_f;
    return 0;
}

__global__ void k_combine_f(const bf16 *resid, const bf16 *eo, const float *w,
                            const int32_t *slot, bf16 *y, int64_t T, int64_t h, int64_t k,
                            int64_t nslots, int *flag)
{
    GRID_STRIDE(i, T * h)
    {
        const int64_t t = i / h, j = i % h;
        float v = ldf(resid + i);
        for (int64_t kk = 0; kk < k; kk++) {
            const int32_t sl = slot[t * k + kk];
            if (sl < 0) continue;
            if (sl >= nslots) {
                atomicOr(flag, EXEC_CUDA_BAD_SLOT);
                continue;
            }
            v += w[t * k + kk] * ldf(eo + (int64_t)sl * h + j);
        }
        stf(y + i, v);
    }
}

extern "C" int exec_cuda_moe_combine_f(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->x, "the expert outputs x");
    NEED(c->x2, "the route tensor x2");
    NEED(c->y, "the output y");
    NEED(c->act, "the act buffer");
    const exec_cfg *cfg = c->cfg;
    combine_act A;
    size_t rebuilt;
    combine_layout(cfg, c->shard, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    route_view rv;
    route_layout(cfg, (void *)c->x2, &rv);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, k = cfg->top_k,
                  nslots = cfg->experts * cfg->capacity;
    /* (R under full recompute reads its inputs from what F kept: no copies then) */
    if (A.eo != c->x) TRY(exec_cuda_d2d(x, A.eo, c->x, (size_t)(nslots * h) * 2, e));
    if (A.resid && A.resid != rv.resid)
        TRY(exec_cuda_d2d(x, A.resid, rv.resid, (size_t)(T * h) * 2, e));
    if (A.w != rv.w) TRY(exec_cuda_d2d(x, A.w, rv.w, (size_t)(T * k) * 4, e));
    if (A.slot != rv.slot) TRY(exec_cuda_d2d(x, A.slot, rv.slot, (size_t)(T * k) * 4, e));
    k_combine_f<<<grid_for(T * h, 256), 256, 0, x->stream>>>(rv.resid, A.eo, A.w, A.slot,
                                                            (bf16 *)c->y, T, h, k, nslots, x->flag);
    LAUNCH_OK("k_combine_f");
    return 0;
}

/* One warp per (token, choice): the expert-output gradient of its slot (each slot has one
 * owner, so no atomics) and the gradient of its weight, dy . expert_out. */
__global__ void k_combine_bi(const bf16 *dy, const bf16 *eo, const float *w, const int32_t *slot,
                             bf16 *dx, float *dw, int32_t *dslot, int64_t T, int64_t h, int64_t k,
                             int64_t nslots)
{
    const int64_t tk = (int64_t)blockIdx.x * 8 + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (tk >= T * k) return;
    const int64_t t = tk / k;
    const int32_t sl = slot[tk];
    float acc = 0.f;
    if (sl >= 0 && sl < nslots) {
        const float wt = w[tk];
        for (int64_t j = lane; j < h; j += 32) {
            const float g = ldf(dy + t * h + j);
            stf(dx + (int64_t)sl * h + j, wt * g);
            acc += g * ldf(eo + (int64_t)sl * h + j);
        }
    }
    acc = warp_sum(acc);
    if (lane == 0) {
        dw[tk] = acc;
        dslot[tk] = sl;
    }
}

extern "C" int exec_cuda_moe_combine_bi(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->dy, "the output gradient dy");
    NEED(c->dx, "the expert-output gradient dx");
    NEED(c->dx2, "the route gradient dx2");
    NEED(c->act, "the act buffer");
    const exec_cfg *cfg = c->cfg;
    combine_act A;
    size_t rebuilt;
    combine_layout(cfg, c->shard, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    route_view dr;
    route_layout(cfg, c->dx2, &dr);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, k = cfg->top_k,
                  nslots = cfg->experts * cfg->capacity;
    TRY(exec_cuda_memset0(x, c->dx, (size_t)(nslots * h) * 2, e));
    TRY(exec_cuda_d2d(x, dr.resid, c->dy, (size_t)(T * h) * 2, e));
    k_combine_bi<<<(unsigned)((T * k + 7) / 8), 256, 0, x->stream>>>(
        (const bf16 *)c->dy, A.eo, A.w, A.slot, (bf16 *)c->dx, dr.w, dr.slot, T, h, k, nslots);
    LAUNCH_OK("k_combine_bi");
    return 0;
}
