/* moe.c — the three MoE regions (Llama family).
 *
 * moe_gate: RMSNorm, router logits z = xn Wr, probabilities p = softmax(z), top-k per token
 * (ties go to the lower expert index), then static capacity: each expert takes at most C tokens
 * of the micro-batch. Slots are handed out by choice rank first, then token order (GShard: every
 * token's first choice before any second choice), so which tokens are dropped is deterministic
 * and independent of how the batch is laid out in memory. The dispatched buffer [E][C][h] holds
 * the normalised token in each used slot and zeros elsewhere. The combine weight of a choice is
 * the raw softmax probability (Switch Transformer form), so a dropped choice contributes nothing
 * and the router learns through the weights of the kept ones.
 * Load-balancing loss (Switch/GShard): aux = coef * E * sum_e f_e P_e, with f_e the fraction of
 * the T*k choices that picked e (before capacity; a count, so no gradient) and P_e the mean
 * router probability of e; d aux / d p[t][e] = coef * E * f_e / T.
 * Backward of the gate: dp[t][e] gets the combine's weight gradient for each kept choice and the
 * aux term; softmax backward dz = p o (dp - sum_e p dp); dxn = dz Wr^T + the dispatched-buffer
 * gradient of each kept slot; then the RMSNorm backward and the residual gradient.
 *
 * moe_experts: per local expert a SwiGLU FFN over its rows of the received buffer
 * [sources][local experts][C][h] (one source without expert parallelism).
 *
 * moe_combine: y[t] = residual[t] + sum over kept choices of w[t][k] * expert_out[slot]. */
#include <stdlib.h>

#include "real.h"

/* ---------------------------------------------------------------- the route tensor */

int64_t FN(exec_route_bytes)(const exec_cfg *c) { return (int64_t)route_layout(c, NULL, NULL); }

void FN(exec_route_view)(const exec_cfg *c, void *route, real **resid, real **w, int32_t **slot)
{
    route_view v;
    route_layout(c, route, &v);
    if (resid) *resid = v.resid;
    if (w) *w = v.w;
    if (slot) *slot = v.slot;
}

/* ---------------------------------------------------------------- gate */

/* act: plan_tensors.h's gate rows: the norm input x and output xn (router input), the router
 * probabilities [T][E] and the expert of each choice [T][k] (int32). Which slot each choice got
 * and the fractions f_e are a pure function of the choices (route_assign), so the backward
 * rebuilds them. */
typedef struct gate_act {
    real *x, *xn;
    real *probs;             /* [T][E] */
    int32_t *choice;         /* [T][k] */
} gate_act;

static size_t gate_layout(const exec_cfg *c, const exec_shard *sh, int mode, void *b0, void *b1,
                          gate_act *A, size_t *rebuilt)
{
    plan_tensor_layout L;
    act_walk(c, sh, EXEC_MOE_GATE, mode, &L);
    void *const base[2] = {b0, b1};
    A->x = AT(L, base, MOE_GATE_X);
    A->xn = AT(L, base, MOE_GATE_XN);
    A->probs = AT(L, base, MOE_GATE_PROBS);
    A->choice = AT(L, base, MOE_GATE_CHOICE);
    if (rebuilt) *rebuilt = (size_t)L.bytes[1];
    return (size_t)L.bytes[0];
}

/* work: the RMSNorm statistics, the slots and fractions, and what BI leaves for BW (the router
 * logits' gradient and the norm output's). */
typedef struct gate_work {
    real *rstd, *frac, *dz, *dxn;
    int32_t *slot;           /* [T][k]: slot in [E*C) or -1 */
} gate_work;

static size_t gate_work_layout(const exec_cfg *c, const exec_shard *sh, void *b, gate_work *W,
                               size_t *fbytes)
{
    plan_tensor_layout L;
    if (fbytes) {
        work_walk(c, sh, EXEC_MOE_GATE, true, &L); /* what F uses */
        *fbytes = (size_t)L.bytes[0];
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

int64_t FN(exec_moe_gate_act_split)(const exec_cfg *c, const exec_shard *s, int mode,
                                     int64_t *rebuilt)
{
    gate_act A;
    size_t r = 0;
    size_t k = gate_layout(c, s, mode, NULL, NULL, &A, &r);
    if (rebuilt) *rebuilt = (int64_t)r;
    return (int64_t)k;
}

int64_t FN(exec_moe_gate_act_bytes)(const exec_cfg *c, const exec_shard *s)
{
    return FN(exec_moe_gate_act_split)(c, s, EXEC_ACT_ALL, NULL);
}

int64_t FN(exec_moe_gate_work_bytes)(const exec_cfg *c, const exec_shard *s, bool pass_f)
{
    gate_work W;
    size_t f = 0, all = gate_work_layout(c, s, NULL, &W, &f);
    return pass_f ? (int64_t)f : (int64_t)all;
}

/* Top-k: fills choice from probs. */
static void route_choose(const exec_cfg *c, gate_act *A)
{
    const int64_t T = c->b * c->s, E = c->experts, k = c->top_k;
    for (int64_t t = 0; t < T; t++) {
        const real *p = A->probs + t * E;
        for (int64_t kk = 0; kk < k; kk++) {
            /* the largest probability not yet chosen; strict '>' keeps the lowest index on ties */
            int64_t best = -1;
            for (int64_t ex = 0; ex < E; ex++) {
                bool taken = false;
                for (int64_t q = 0; q < kk; q++) taken |= A->choice[t * k + q] == ex;
                if (!taken && (best < 0 || p[ex] > p[best])) best = ex;
            }
            A->choice[t * k + kk] = (int32_t)best;
        }
    }
}

/* Capacity: slot and frac from the choices (F and, rebuilding them, BI). */
static void route_assign(const exec_cfg *c, const gate_act *A, gate_work *W)
{
    const int64_t T = c->b * c->s, E = c->experts, k = c->top_k, C = c->capacity;
    for (int64_t ex = 0; ex < E; ex++) W->frac[ex] = 0;
    int64_t *used = base_xcalloc((size_t)E, sizeof *used);
    for (int64_t kk = 0; kk < k; kk++)
        for (int64_t t = 0; t < T; t++) {
            int32_t ex = A->choice[t * k + kk];
            W->frac[ex] += (real)(1.0 / (double)(T * k));
            W->slot[t * k + kk] = used[ex] < C ? (int32_t)(ex * C + used[ex]++) : -1;
        }
    free(used);
}

int FN(exec_moe_gate_f)(const exec_call *c, base_error *e)
{
    NEED(c->x, "the input x");
    NEED(c->y, "the dispatched buffer y");
    NEED(c->y2, "the route tensor y2");
    NEED(c->param, "the parameter block");
    NEED(c->act, "the act buffer");
    NEED(c->work, "the work buffer");
    const exec_cfg *cfg = c->cfg;
    region_params rp;
    if (region_params_get(c, EXEC_MOE_GATE, &rp, e)) return -1;
    const real *ng = param_at(&rp, c->param, "norm.g"), *wr = param_at(&rp, c->param, "router");
    gate_act A;
    size_t rebuilt;
    gate_layout(cfg, c->shard, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    gate_work W;
    gate_work_layout(cfg, c->shard, c->work, &W, NULL);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, E = cfg->experts, k = cfg->top_k,
                  C = cfg->capacity;

    if (A.x != c->x) /* R under full recompute reads the input F kept */
        memcpy(A.x, c->x, (size_t)(T * h) * sizeof(real));
    FN(exec_rmsnorm_f)(A.x, ng, A.xn, W.rstd, T, h, cfg->norm_eps);
    FN(exec_gemm)(false, false, T, E, h, 1, A.xn, h, wr, E, 0, A.probs, E);
    for (int64_t t = 0; t < T; t++) {
        real *z = A.probs + t * E, mx = z[0];
        for (int64_t ex = 1; ex < E; ex++) mx = z[ex] > mx ? z[ex] : mx;
        double sum = 0;
        for (int64_t ex = 0; ex < E; ex++) sum += z[ex] = R_EXP(z[ex] - mx);
        for (int64_t ex = 0; ex < E; ex++) z[ex] = (real)(z[ex] / sum);
    }
    if (!c->keep_routing) route_choose(cfg, &A);
    route_assign(cfg, &A, &W);

    double aux = 0;
    for (int64_t ex = 0; ex < E; ex++) {
        double pm = 0;
        for (int64_t t = 0; t < T; t++) pm += A.probs[t * E + ex];
        aux += (double)W.frac[ex] * pm / (double)T;
    }
    if (c->out) *c->out = cfg->aux_coef * (double)E * aux;

    real *buf = c->y;
    memset(buf, 0, (size_t)(E * C * h) * sizeof(real));
    route_view rv;
    route_layout(cfg, c->y2, &rv);
    memcpy(rv.resid, A.x, (size_t)(T * h) * sizeof(real));
    for (int64_t t = 0; t < T; t++)
        for (int64_t kk = 0; kk < k; kk++) {
            int32_t sl = W.slot[t * k + kk];
            rv.slot[t * k + kk] = sl;
            /* a dropped choice weighs nothing, so nothing flows back through it */
            rv.w[t * k + kk] = sl >= 0 ? A.probs[t * E + A.choice[t * k + kk]] : 0;
            if (sl >= 0) memcpy(buf + sl * h, A.xn + t * h, (size_t)h * sizeof(real));
        }
    return 0;
}

int FN(exec_moe_gate_bi)(const exec_call *c, base_error *e)
{
    NEED(c->dy, "the dispatched-buffer gradient dy");
    NEED(c->dy2, "the route gradient dy2");
    NEED(c->dx, "the input gradient dx");
    NEED(c->param, "the parameter block");
    NEED(c->act, "the act buffer");
    NEED(c->work, "the work buffer");
    const exec_cfg *cfg = c->cfg;
    region_params rp;
    if (region_params_get(c, EXEC_MOE_GATE, &rp, e)) return -1;
    const real *ng = param_at(&rp, c->param, "norm.g"), *wr = param_at(&rp, c->param, "router");
    gate_act A;
    size_t rebuilt;
    gate_layout(cfg, c->shard, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    gate_work W;
    gate_work_layout(cfg, c->shard, c->work, &W, NULL);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, E = cfg->experts, k = cfg->top_k;
    const real *dbuf = c->dy;
    route_view dr;
    route_layout(cfg, (void *)c->dy2, &dr);
    route_assign(cfg, &A, &W);

    /* dp into dz, then the softmax backward in place */
    const double aux_g = cfg->aux_weight * cfg->aux_coef * (double)E / (double)T;
    for (int64_t t = 0; t < T; t++) {
        real *dz = W.dz + t * E;
        const real *p = A.probs + t * E;
        for (int64_t ex = 0; ex < E; ex++) dz[ex] = (real)(aux_g * W.frac[ex]);
        for (int64_t kk = 0; kk < k; kk++)
            if (W.slot[t * k + kk] >= 0) dz[A.choice[t * k + kk]] += dr.w[t * k + kk];
        double dot = 0;
        for (int64_t ex = 0; ex < E; ex++) dot += (double)p[ex] * dz[ex];
        for (int64_t ex = 0; ex < E; ex++) dz[ex] = p[ex] * (dz[ex] - (real)dot);
    }
    FN(exec_gemm)(false, true, T, h, E, 1, W.dz, E, wr, E, 0, W.dxn, h);
    for (int64_t t = 0; t < T; t++)
        for (int64_t kk = 0; kk < k; kk++) {
            int32_t sl = W.slot[t * k + kk];
            if (sl < 0) continue;
            for (int64_t j = 0; j < h; j++) W.dxn[t * h + j] += dbuf[sl * h + j];
        }
    real *dx = c->dx;
    FN(exec_rmsnorm_stats)(A.x, W.rstd, T, h, cfg->norm_eps);
    FN(exec_rmsnorm_bi)(W.dxn, A.x, ng, W.rstd, dx, T, h, false);
    for (int64_t i = 0; i < T * h; i++) dx[i] += dr.resid[i];
    return 0;
}

int FN(exec_moe_gate_bw)(const exec_call *c, base_error *e)
{
    NEED(c->grad, "the gradient block");
    NEED(c->act, "the act buffer");
    NEED(c->work, "the work buffer");
    const exec_cfg *cfg = c->cfg;
    region_params rp;
    if (region_params_get(c, EXEC_MOE_GATE, &rp, e)) return -1;
    real *gng = param_at(&rp, c->grad, "norm.g"), *gwr = param_at(&rp, c->grad, "router");
    gate_act A;
    size_t rebuilt;
    gate_layout(cfg, c->shard, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    gate_work W;
    gate_work_layout(cfg, c->shard, c->work, &W, NULL);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, E = cfg->experts;
    FN(exec_gemm)(true, false, h, E, T, 1, A.xn, h, W.dz, E, 1, gwr, E);
    FN(exec_rmsnorm_bw)(W.dxn, A.x, W.rstd, gng, T, h);
    return 0;
}

/* ---------------------------------------------------------------- experts */

/* act: plan_tensors.h's experts rows: the received buffer and the gate, up and down inputs. */
typedef struct experts_act {
    real *x;                 /* the received buffer [rows][h] */
    real *g, *u, *a;         /* [rows][f] */
} experts_act;

/* work: what BI leaves for BW: the output gradient and the gate / up projections' gradients. */
typedef struct experts_work {
    real *dy, *dg, *du;
} experts_work;

static int64_t expert_rows(const exec_cfg *c, const exec_shard *sh)
{
    return (int64_t)sh->ep * sh->nexperts * c->capacity;
}

static size_t experts_layout(const exec_cfg *c, const exec_shard *sh, int mode, void *b0,
                             void *b1, experts_act *A, size_t *rebuilt)
{
    plan_tensor_layout L;
    act_walk(c, sh, EXEC_MOE_EXPERTS, mode, &L);
    void *const base[2] = {b0, b1};
    A->x = AT(L, base, MOE_EXPERTS_X);
    A->g = AT(L, base, MOE_EXPERTS_G);
    A->u = AT(L, base, MOE_EXPERTS_UP);
    A->a = AT(L, base, MOE_EXPERTS_A);
    if (rebuilt) *rebuilt = (size_t)L.bytes[1];
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

int64_t FN(exec_moe_experts_act_split)(const exec_cfg *c, const exec_shard *s, int mode,
                                        int64_t *rebuilt)
{
    experts_act A;
    size_t r = 0;
    size_t k = experts_layout(c, s, mode, NULL, NULL, &A, &r);
    if (rebuilt) *rebuilt = (int64_t)r;
    return (int64_t)k;
}

int64_t FN(exec_moe_experts_act_bytes)(const exec_cfg *c, const exec_shard *s)
{
    return FN(exec_moe_experts_act_split)(c, s, EXEC_ACT_ALL, NULL);
}

int64_t FN(exec_moe_experts_work_bytes)(const exec_cfg *c, const exec_shard *s, bool pass_f)
{
    experts_work W;
    return pass_f ? 0 : (int64_t)experts_work_layout(c, s, NULL, &W); /* F uses none */
}

typedef struct expert_w {
    real *wg, *wu, *wd;      /* of local expert 0; expert i is i * h*f further */
} expert_w;

/* The rows of local expert ex from source src start at row (src * nexperts + ex) * C. */
#define EXPERT_ROW0(sh, C, src, ex) (((int64_t)(src) * (sh)->nexperts + (ex)) * (C))

int FN(exec_moe_experts_f)(const exec_call *c, base_error *e)
{
    NEED(c->x, "the received buffer x");
    NEED(c->y, "the output y");
    NEED(c->param, "the parameter block");
    NEED(c->act, "the act buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    if (region_params_get(c, EXEC_MOE_EXPERTS, &rp, e)) return -1;
    expert_w w = {param_at(&rp, c->param, "wg"), param_at(&rp, c->param, "wu"),
                  param_at(&rp, c->param, "wd")};
    experts_act A;
    size_t rebuilt;
    experts_layout(cfg, sh, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    const int64_t R = expert_rows(cfg, sh), h = cfg->h, f = sh->neffn, C = cfg->capacity;
    real *y = c->y;

    if (A.x != c->x) /* R under full recompute reads the input F kept */
        memcpy(A.x, c->x, (size_t)(R * h) * sizeof(real));
    for (int src = 0; src < sh->ep; src++)
        for (int64_t ex = 0; ex < sh->nexperts; ex++) {
            int64_t r0 = EXPERT_ROW0(sh, C, src, ex);
            FN(exec_gemm)(false, false, C, f, h, 1, A.x + r0 * h, h, w.wg + ex * h * f, f, 0,
                          A.g + r0 * f, f);
            FN(exec_gemm)(false, false, C, f, h, 1, A.x + r0 * h, h, w.wu + ex * h * f, f, 0,
                          A.u + r0 * f, f);
        }
    FN(exec_swiglu_f)(A.g, A.u, A.a, R * f);
    for (int src = 0; src < sh->ep; src++)
        for (int64_t ex = 0; ex < sh->nexperts; ex++) {
            int64_t r0 = EXPERT_ROW0(sh, C, src, ex);
            FN(exec_gemm)(false, false, C, h, f, 1, A.a + r0 * f, f, w.wd + ex * f * h, h, 0,
                          y + r0 * h, h);
        }
    return 0;
}

int FN(exec_moe_experts_bi)(const exec_call *c, base_error *e)
{
    NEED(c->dy, "the output gradient dy");
    NEED(c->dx, "the input gradient dx");
    NEED(c->param, "the parameter block");
    NEED(c->act, "the act buffer");
    NEED(c->work, "the work buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    if (region_params_get(c, EXEC_MOE_EXPERTS, &rp, e)) return -1;
    expert_w w = {param_at(&rp, c->param, "wg"), param_at(&rp, c->param, "wu"),
                  param_at(&rp, c->param, "wd")};
    experts_act A;
    size_t rebuilt;
    experts_layout(cfg, sh, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    experts_work W;
    experts_work_layout(cfg, sh, c->work, &W);
    const int64_t R = expert_rows(cfg, sh), h = cfg->h, f = sh->neffn, C = cfg->capacity;
    real *dx = c->dx;

    memcpy(W.dy, c->dy, (size_t)(R * h) * sizeof(real));
    /* da into dg as a workspace, then SwiGLU's backward */
    for (int src = 0; src < sh->ep; src++)
        for (int64_t ex = 0; ex < sh->nexperts; ex++) {
            int64_t r0 = EXPERT_ROW0(sh, C, src, ex);
            FN(exec_gemm)(false, true, C, f, h, 1, W.dy + r0 * h, h, w.wd + ex * f * h, h, 0,
                          W.dg + r0 * f, f);
        }
    FN(exec_swiglu_bi)(W.dg, A.g, A.u, W.dg, W.du, R * f);
    for (int src = 0; src < sh->ep; src++)
        for (int64_t ex = 0; ex < sh->nexperts; ex++) {
            int64_t r0 = EXPERT_ROW0(sh, C, src, ex);
            FN(exec_gemm)(false, true, C, h, f, 1, W.dg + r0 * f, f, w.wg + ex * h * f, f, 0,
                          dx + r0 * h, h);
            FN(exec_gemm)(false, true, C, h, f, 1, W.du + r0 * f, f, w.wu + ex * h * f, f, 1,
                          dx + r0 * h, h);
        }
    return 0;
}

int FN(exec_moe_experts_bw)(const exec_call *c, base_error *e)
{
    NEED(c->grad, "the gradient block");
    NEED(c->act, "the act buffer");
    NEED(c->work, "the work buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    if (region_params_get(c, EXEC_MOE_EXPERTS, &rp, e)) return -1;
    expert_w g = {param_at(&rp, c->grad, "wg"), param_at(&rp, c->grad, "wu"),
                  param_at(&rp, c->grad, "wd")};
    experts_act A;
    size_t rebuilt;
    experts_layout(cfg, sh, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    experts_work W;
    experts_work_layout(cfg, sh, c->work, &W);
    const int64_t h = cfg->h, f = sh->neffn, C = cfg->capacity;
    for (int src = 0; src < sh->ep; src++)
        for (int64_t ex = 0; ex < sh->nexperts; ex++) {
            int64_t r0 = EXPERT_ROW0(sh, C, src, ex);
            FN(exec_gemm)(true, false, h, f, C, 1, A.x + r0 * h, h, W.dg + r0 * f, f, 1,
                          g.wg + ex * h * f, f);
            FN(exec_gemm)(true, false, h, f, C, 1, A.x + r0 * h, h, W.du + r0 * f, f, 1,
                          g.wu + ex * h * f, f);
            FN(exec_gemm)(true, false, f, h, C, 1, A.a + r0 * f, f, W.dy + r0 * h, h, 1,
                          g.wd + ex * f * h, h);
        }
    return 0;
}

/* ---------------------------------------------------------------- combine */

/* act: plan_tensors.h's combine rows: the expert outputs, the routing weights and each
 * choice's slot (the unpermute's index map). No work buffer. */
typedef struct combine_act {
    real *eo;                /* expert outputs [E*C][h] */
    real *resid;             /* under full recompute (EXEC_ACT_INPUT): the residual [T][h] */
    real *w;                 /* routing weights [T][k] */
    int32_t *slot;           /* [T][k] */
} combine_act;

int64_t FN(exec_moe_combine_work_bytes)(const exec_cfg *c, const exec_shard *s, bool pass_f)
{
    (void)c;
    (void)s;
    (void)pass_f;
    return 0;
}

static size_t combine_layout(const exec_cfg *c, const exec_shard *sh, int mode, void *b0,
                             void *b1, combine_act *A, size_t *rebuilt)
{
    /* all of it is the region's input. Under full recompute F keeps the whole input, the
     * residual too, so that R rebuilds the output from it: then resid, w and slot are laid out
     * as a route tensor (route_layout) right after the expert outputs, which R reads as its x
     * and x2 (the runtime passes them) */
    plan_tensor_layout L;
    act_walk(c, sh, EXEC_MOE_COMBINE, mode, &L);
    void *const base[2] = {b0, b1};
    A->eo = AT(L, base, MOE_COMBINE_EO);
    A->resid = AT(L, base, MOE_COMBINE_RESID);
    A->w = AT(L, base, MOE_COMBINE_W);
    A->slot = AT(L, base, MOE_COMBINE_SLOT);
    if (rebuilt) *rebuilt = (size_t)L.bytes[1];
    return (size_t)L.bytes[0];
}

int64_t FN(exec_moe_combine_act_split)(const exec_cfg *c, const exec_shard *s, int mode,
                                        int64_t *rebuilt)
{
    combine_act A;
    size_t r = 0;
    size_t k = combine_layout(c, s, mode, NULL, NULL, &A, &r);
    if (rebuilt) *rebuilt = (int64_t)r;
    return (int64_t)k;
}

int64_t FN(exec_moe_combine_act_bytes)(const exec_cfg *c, const exec_shard *s)
{
    return FN(exec_moe_combine_act_split)(c, s, EXEC_ACT_ALL, NULL);
}

int FN(exec_moe_combine_f)(const exec_call *c, base_error *e)
{
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
    real *y = c->y;

    /* (R under full recompute reads its inputs from what F kept: no copies then) */
    if (A.eo != c->x) memcpy(A.eo, c->x, (size_t)(nslots * h) * sizeof(real));
    if (A.resid && A.resid != rv.resid) memcpy(A.resid, rv.resid, (size_t)(T * h) * sizeof(real));
    if (A.w != rv.w) memcpy(A.w, rv.w, (size_t)(T * k) * sizeof(real));
    if (A.slot != rv.slot) memcpy(A.slot, rv.slot, (size_t)(T * k) * sizeof(int32_t));
    memcpy(y, rv.resid, (size_t)(T * h) * sizeof(real));
    for (int64_t t = 0; t < T; t++)
        for (int64_t kk = 0; kk < k; kk++) {
            int32_t sl = A.slot[t * k + kk];
            if (sl < 0) continue;
            if (sl >= nslots)
                return base_errorf(e, "moe_combine: slot %d of token %lld is outside the %lld "
                                      "slots of the dispatched buffer; the route tensor is corrupt",
                                   (int)sl, (long long)t, (long long)nslots);
            real wt = A.w[t * k + kk];
            for (int64_t j = 0; j < h; j++) y[t * h + j] += wt * A.eo[sl * h + j];
        }
    return 0;
}

int FN(exec_moe_combine_bi)(const exec_call *c, base_error *e)
{
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
    const real *dy = c->dy;
    real *dx = c->dx;

    memset(dx, 0, (size_t)(nslots * h) * sizeof(real));
    memcpy(dr.resid, dy, (size_t)(T * h) * sizeof(real));
    for (int64_t t = 0; t < T; t++)
        for (int64_t kk = 0; kk < k; kk++) {
            int32_t sl = A.slot[t * k + kk];
            dr.slot[t * k + kk] = sl;
            double dw = 0;
            if (sl >= 0) {
                real wt = A.w[t * k + kk];
                for (int64_t j = 0; j < h; j++) {
                    dx[sl * h + j] += wt * dy[t * h + j];
                    dw += (double)dy[t * h + j] * A.eo[sl * h + j];
                }
            }
            dr.w[t * k + kk] = (real)dw;
        }
    return 0;
}
