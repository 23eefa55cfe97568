/* mlp.c — the dense MLP region and its activations. GPT: norm, fc1 (+ bias), GELU, fc2 (+ bias),
 * dropout, residual. Llama: norm, gate and up projections, SwiGLU, down projection, residual.
 * A shard owns the FFN columns [ffn0, ffn0 + nffn): fc1/gate/up are split by columns, fc2/down
 * by rows, and the shards' outputs sum to the whole region's (kernels.h).
 *
 * Activation derivatives:
 *   GELU (tanh form), u = c (x + 0.044715 x^3), c = sqrt(2/pi), t = tanh(u):
 *     gelu(x) = 0.5 x (1 + t),  gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 * 0.044715 x^2)
 *   SwiGLU a = silu(g) u with silu(g) = g sig(g):
 *     da/du = silu(g),  da/dg = u sig(g) (1 + g (1 - sig(g))). */
#include "real.h"

#define GELU_C 0.7978845608028654 /* sqrt(2/pi) */
#define GELU_A 0.044715

void FN(exec_gelu_f)(const real *x, real *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        real v = x[i];
        y[i] = (real)0.5 * v * (1 + R_TANH((real)GELU_C * (v + (real)GELU_A * v * v * v)));
    }
}

void FN(exec_gelu_bi)(const real *dy, const real *x, real *dx, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        real v = x[i];
        real t = R_TANH((real)GELU_C * (v + (real)GELU_A * v * v * v));
        real dg = (real)0.5 * (1 + t) +
                  (real)0.5 * v * (1 - t * t) * (real)GELU_C * (1 + 3 * (real)GELU_A * v * v);
        dx[i] = dy[i] * dg;
    }
}

static inline real sigmoid(real g) { return 1 / (1 + R_EXP(-g)); }

void FN(exec_swiglu_f)(const real *g, const real *u, real *a, int64_t n)
{
    for (int64_t i = 0; i < n; i++) a[i] = g[i] * sigmoid(g[i]) * u[i];
}

void FN(exec_swiglu_bi)(const real *da, const real *g, const real *u, real *dg, real *du, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        real sg = sigmoid(g[i]);
        du[i] = da[i] * g[i] * sg;
        dg[i] = da[i] * u[i] * sg * (1 + g[i] * (1 - sg));
    }
}

/* ---------------------------------------------------------------- the act and work buffers */

/* act: plan_tensors.h's MLP rows: the norm input x and output xn (the fc1 / gate-up input),
 * then GPT: the fc1 output (GELU input) and the GELU output (fc2 input), and the output dropout's
 * 1-byte mask; Llama: the gate and up projections and the SwiGLU output (down input). */
typedef struct mlp_act {
    real *x, *xn;
    real *h1;         /* GPT: fc1 output (GELU input); Llama: gate projection */
    real *u;          /* Llama: up projection */
    real *a;          /* activation output = fc2/down input */
    uint8_t *mout;    /* GPT with dropout: the output mask */
} mlp_act;

static size_t mlp_layout(const exec_cfg *c, const exec_shard *sh, int mode, void *b0, void *b1,
                         mlp_act *A, size_t *rebuilt)
{
    plan_tensor_layout L;
    act_walk(c, sh, EXEC_MLP, mode, &L);
    void *const base[2] = {b0, b1};
    A->x = AT(L, base, MLP_X);
    A->xn = AT(L, base, MLP_XN);
    A->h1 = AT(L, base, MLP_H1);
    A->u = AT(L, base, MLP_UP);
    A->a = AT(L, base, MLP_A);
    A->mout = AT(L, base, MLP_OUT_MASK);
    if (rebuilt) *rebuilt = (size_t)L.bytes[1];
    return (size_t)L.bytes[0];
}

/* work: the norm statistics and what BI leaves for BW (the output gradient through dropout,
 * the gradients of fc1 / gate and up outputs, of the norm output). */
typedef struct mlp_work {
    real *mean, *rstd;
    real *dyd, *dh1, *du, *dxn;
} mlp_work;

static size_t mlp_work_layout(const exec_cfg *c, const exec_shard *sh, void *b, mlp_work *W,
                              size_t *fbytes)
{
    plan_tensor_layout L;
    if (fbytes) {
        work_walk(c, sh, EXEC_MLP, true, &L); /* what F uses */
        *fbytes = (size_t)L.bytes[0];
    }
    work_walk(c, sh, EXEC_MLP, false, &L);
    void *const base[2] = {b, NULL};
    W->mean = AT(L, base, MLP_MEAN);
    W->rstd = AT(L, base, MLP_RSTD);
    W->dyd = AT(L, base, MLP_DYD);
    W->dh1 = AT(L, base, MLP_DH1);
    W->du = AT(L, base, MLP_DUP);
    W->dxn = AT(L, base, MLP_DXN);
    return (size_t)L.bytes[0];
}

int64_t FN(exec_mlp_act_split)(const exec_cfg *c, const exec_shard *s, int mode, int64_t *rebuilt)
{
    mlp_act A;
    size_t r = 0;
    size_t k = mlp_layout(c, s, mode, NULL, NULL, &A, &r);
    if (rebuilt) *rebuilt = (int64_t)r;
    return (int64_t)k;
}

int64_t FN(exec_mlp_act_bytes)(const exec_cfg *c, const exec_shard *s)
{
    return FN(exec_mlp_act_split)(c, s, EXEC_ACT_ALL, NULL);
}

int64_t FN(exec_mlp_work_bytes)(const exec_cfg *c, const exec_shard *s, bool pass_f)
{
    mlp_work W;
    size_t f = 0, all = mlp_work_layout(c, s, NULL, &W, &f);
    return pass_f ? (int64_t)f : (int64_t)all;
}

typedef struct mlp_w {
    real *ng, *nb, *w1, *b1, *w2, *b2; /* Llama: w1 = gate, w2 = down */
    real *wu;
} mlp_w;

static void mlp_weights(const exec_cfg *c, const region_params *rp, void *block, mlp_w *w)
{
    w->ng = param_at(rp, block, c->gpt ? "ln.g" : "norm.g");
    w->nb = param_at(rp, block, "ln.b");
    w->w1 = param_at(rp, block, c->gpt ? "w1" : "wg");
    w->b1 = param_at(rp, block, "b1");
    w->wu = param_at(rp, block, "wu");
    w->w2 = param_at(rp, block, c->gpt ? "w2" : "wd");
    w->b2 = param_at(rp, block, "b2");
}

/* ---------------------------------------------------------------- passes */

int FN(exec_mlp_f)(const exec_call *c, base_error *e)
{
    NEED(c->x, "the input x");
    NEED(c->y, "the output y");
    NEED(c->param, "the parameter block");
    NEED(c->act, "the act buffer");
    NEED(c->work, "the work buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    if (region_params_get(c, EXEC_MLP, &rp, e)) return -1;
    mlp_w w;
    mlp_weights(cfg, &rp, c->param, &w);
    mlp_act A;
    size_t rebuilt;
    mlp_layout(cfg, sh, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    mlp_work W;
    mlp_work_layout(cfg, sh, c->work, &W, NULL);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, f = sh->nffn;
    const real *x = c->x;
    real *y = c->y;

    /* the norm and fc1 (gate/up) block by block of tokens, as in attention.c: the device's own
     * block last, so that A.x and A.xn keep its rows */
    const int64_t tl = sp_rows(cfg, sh), nb = sp_blocks(sh), own = sp_own(sh);
    if (A.x != x + own * tl * h) memcpy(A.x, x + own * tl * h, (size_t)(tl * h) * sizeof(real));
    for (int64_t j = 1; j <= nb; j++) {
        const int64_t k = (own + j) % nb, r0 = k * tl;
        FN(exec_norm_f)(cfg, x + r0 * h, w.ng, w.nb, A.xn, W.mean + r0, W.rstd + r0, tl);
        FN(exec_gemm)(false, false, tl, f, h, 1, A.xn, h, w.w1, f, 0, A.h1 + r0 * f, f);
        if (!cfg->gpt) FN(exec_gemm)(false, false, tl, f, h, 1, A.xn, h, w.wu, f, 0, A.u + r0 * f, f);
    }
    if (cfg->gpt) {
        bias_add(A.h1, T, f, w.b1);
        FN(exec_gelu_f)(A.h1, A.a, T * f);
    } else {
        FN(exec_swiglu_f)(A.h1, A.u, A.a, T * f);
    }
    FN(exec_gemm)(false, false, T, h, f, 1, A.a, f, w.w2, h, 0, y, h);
    if (sh->first && w.b2) bias_add(y, T, h, w.b2);
    if (cfg->dropout > 0)
        sp_dropout_f(sh, y, A.mout, tl * h, dropout_key(c, EXEC_DROP_MLP_OUT),
                     (uint64_t)c->sample0 * (uint64_t)(cfg->s * h), cfg->dropout);
    if (sh->first)
        for (int64_t i = 0; i < T * h; i++) y[i] += x[i];
    return 0;
}

int FN(exec_mlp_bi)(const exec_call *c, base_error *e)
{
    NEED(c->dy, "the output gradient dy");
    NEED(c->dx, "the input gradient dx");
    NEED(c->param, "the parameter block");
    NEED(c->act, "the act buffer");
    NEED(c->work, "the work buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    if (region_params_get(c, EXEC_MLP, &rp, e)) return -1;
    mlp_w w;
    mlp_weights(cfg, &rp, c->param, &w);
    mlp_act A;
    size_t rebuilt;
    mlp_layout(cfg, sh, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    mlp_work W;
    mlp_work_layout(cfg, sh, c->work, &W, NULL);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, f = sh->nffn;
    const real *dy = c->dy;
    real *dx = c->dx;

    const int64_t tl = sp_rows(cfg, sh);
    if (sh->sp) NEED(c->xg, "the gathered norm inputs and outputs xg");
    if (cfg->dropout > 0)
        sp_dropout_b(sh, dy, W.dyd, A.mout, tl * h, dropout_key(c, EXEC_DROP_MLP_OUT),
                     (uint64_t)c->sample0 * (uint64_t)(cfg->s * h), cfg->dropout);
    else
        memcpy(W.dyd, dy, (size_t)(T * h) * sizeof(real));
    /* da (the gradient of fc2's input) goes through dh1 as a workspace */
    FN(exec_gemm)(false, true, T, f, h, 1, W.dyd, h, w.w2, h, 0, W.dh1, f);
    if (cfg->gpt) {
        FN(exec_gelu_bi)(W.dh1, A.h1, W.dh1, T * f);
        FN(exec_gemm)(false, true, T, h, f, 1, W.dh1, f, w.w1, f, 0, W.dxn, h);
    } else {
        FN(exec_swiglu_bi)(W.dh1, A.h1, A.u, W.dh1, W.du, T * f);
        FN(exec_gemm)(false, true, T, h, f, 1, W.dh1, f, w.w1, f, 0, W.dxn, h);
        FN(exec_gemm)(false, true, T, h, f, 1, W.du, f, w.wu, f, 1, W.dxn, h);
    }
    FN(exec_norm_bi_rows)(cfg, sh, c->xg, A.x, W.dxn, w.ng, W.mean, W.rstd, dx);
    if (sh->first)
        for (int64_t i = 0; i < T * h; i++) dx[i] += dy[i];
    return 0;
}

int FN(exec_mlp_bw)(const exec_call *c, base_error *e)
{
    NEED(c->grad, "the gradient block");
    NEED(c->act, "the act buffer");
    NEED(c->work, "the work buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    if (region_params_get(c, EXEC_MLP, &rp, e)) return -1;
    mlp_w g;
    mlp_weights(cfg, &rp, c->grad, &g);
    mlp_act A;
    size_t rebuilt;
    mlp_layout(cfg, sh, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    mlp_work W;
    mlp_work_layout(cfg, sh, c->work, &W, NULL);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, f = sh->nffn;

    const int64_t tl = sp_rows(cfg, sh), nb = sp_blocks(sh);
    if (sh->sp) NEED(c->xg, "the gathered norm inputs and outputs xg");
    for (int64_t k = 0; k < nb; k++) {
        const int64_t r0 = k * tl;
        const real *xnk = sp_norm_rows(sh, c->xg, A.xn, k, 1, tl, h);
        FN(exec_gemm)(true, false, h, f, tl, 1, xnk, h, W.dh1 + r0 * f, f, 1, g.w1, f);
        if (!cfg->gpt) FN(exec_gemm)(true, false, h, f, tl, 1, xnk, h, W.du + r0 * f, f, 1, g.wu, f);
    }
    FN(exec_gemm)(true, false, f, h, T, 1, A.a, f, W.dyd, h, 1, g.w2, h);
    if (cfg->gpt) {
        colsum_acc(W.dh1, T, f, g.b1);
        if (sh->first) colsum_acc(W.dyd, T, h, g.b2);
    }
    FN(exec_norm_bw_rows)(cfg, sh, c->xg, A.x, W.dxn, W.mean, W.rstd, g.ng, g.nb);
    return 0;
}
