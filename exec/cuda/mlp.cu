/* mlp.cu — the dense MLP region on the GPU, as exec/cpu/mlp.c: GPT: norm, fc1 (+ bias), GELU,
 * fc2 (+ bias), dropout, residual; Llama: norm, gate and up projections, SwiGLU, down
 * projection, residual. A shard owns FFN columns [ffn0, ffn0 + nffn) and its output is a partial
 * sum. GEMMs write bf16 activations, except the gradient of the norm output (a sum of two
 * products, then a norm backward that subtracts means), which is fp32. */
#include "common.cuh"

/* act: what F keeps, plan_tensors.h's MLP rows: the norm input x and output xn (the
 * fc1 / gate-up input), then GPT: the fc1 output (GELU input) and the GELU output (fc2 input);
 * Llama: the gate and up projections and the SwiGLU output (down input). The output dropout's
 * mask is regenerated from its counter. */
typedef struct mlp_act {
    bf16 *x, *xn;
    bf16 *h1;   /* GPT: fc1 output (GELU input); Llama: gate projection */
    bf16 *u;    /* Llama: up projection */
    bf16 *a;    /* activation output = fc2/down input */
} mlp_act;

static size_t mlp_layout(const exec_cfg *c, const exec_shard *sh, int mode, void *kept,
                         void *rebuilt, mlp_act *A, size_t *rebuilt_bytes)
{
    plan_tensor_layout L;
    act_walk(c, sh, EXEC_MLP, mode, &L);
    void *const base[2] = {kept, rebuilt};
    A->x = AT(L, base, MLP_X);
    A->xn = AT(L, base, MLP_XN);
    A->h1 = AT(L, base, MLP_H1);
    A->u = AT(L, base, MLP_UP);
    A->a = AT(L, base, MLP_A);
    if (rebuilt_bytes) *rebuilt_bytes = (size_t)L.bytes[1];
    return (size_t)L.bytes[0];
}

/* work, in plan_tensors.h's order: the norm statistics (F's part; the backward recomputes
 * them from the kept input), then what BI leaves for BW: the output gradient through dropout,
 * the gradients of the fc1 / gate and up outputs, and of the norm output (fp32: two GEMMs sum
 * into it in Llama's MLP). */
typedef struct mlp_work {
    float *mean, *rstd;
    bf16 *dyd, *dh1, *du;
    float *dxn;
} mlp_work;

static size_t mlp_work_layout(const exec_cfg *c, const exec_shard *sh, void *b, mlp_work *W,
                              bool pass_f)
{
    plan_tensor_layout L;
    work_walk(c, sh, EXEC_MLP, pass_f, &L);
    void *const base[2] = {b, NULL};
    W->mean = AT(L, base, MLP_MEAN);
    W->rstd = AT(L, base, MLP_RSTD);
    W->dyd = AT(L, base, MLP_DYD);
    W->dh1 = AT(L, base, MLP_DH1);
    W->du = AT(L, base, MLP_DUP);
    W->dxn = AT(L, base, MLP_DXN);
    return (size_t)L.bytes[0];
}

int64_t mlp_act_split(const exec_cfg *c, const exec_shard *s, int mode, int64_t *rebuilt)
{
    mlp_act A;
    size_t r = 0;
    size_t k = mlp_layout(c, s, mode, NULL, NULL, &A, &r);
    if (rebuilt) *rebuilt = (int64_t)r;
    return (int64_t)k;
}

int64_t mlp_act_bytes(const exec_cfg *c, const exec_shard *s)
{
    return mlp_act_split(c, s, EXEC_ACT_ALL, NULL);
}

int64_t mlp_work_bytes(const exec_cfg *c, const exec_shard *s, bool pass_f)
{
    mlp_work W;
    return (int64_t)mlp_work_layout(c, s, NULL, &W, pass_f);
}

/* Llama: w1 = gate (wg), w2 = down (wd), wu = up. */
static void mlp_names(const exec_cfg *c, const char **n)
{
    n[0] = c->gpt ? "ln.g" : "norm.g";
    n[1] = "ln.b";
    n[2] = c->gpt ? "w1" : "wg";
    n[3] = "b1";
    n[4] = "wu";
    n[5] = c->gpt ? "w2" : "wd";
    n[6] = "b2";
}

extern "C" int exec_cuda_mlp_f(const exec_cuda_call *cc, base_error *e)
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
    TRY(region_params_get(c, EXEC_MLP, &rp, e));
    const char *n[7];
    mlp_names(cfg, n);
    bf16 *ng = pb(&rp, c->param, n[0]), *nb = pb(&rp, c->param, n[1]);
    bf16 *w1 = pb(&rp, c->param, n[2]), *b1 = pb(&rp, c->param, n[3]);
    bf16 *wu = pb(&rp, c->param, n[4]), *w2 = pb(&rp, c->param, n[5]);
    bf16 *b2 = pb(&rp, c->param, n[6]);
    mlp_act A;
    size_t rebuilt;
    mlp_layout(cfg, sh, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    mlp_work W;
    mlp_work_layout(cfg, sh, c->work, &W, true);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, f = sh->nffn;
    bf16 *y = (bf16 *)c->y;

    /* the norm and the first layer block by block of tokens (one block without sequence
     * parallelism): each block's norm output passes through A.xn, the device's own block last,
     * so that A.x and A.xn keep exactly its rows. R under full recompute reads the input F kept:
     * then it is already in place. */
    const bf16 *xin = (const bf16 *)c->x;
    const int64_t tl = exec_sp_rows(cfg, sh), nblk = exec_sp_blocks(sh), own = exec_sp_own(sh);
    if (A.x != xin + own * tl * h)
        TRY(exec_cuda_d2d(x, A.x, xin + own * tl * h, (size_t)(tl * h) * 2, e));
    for (int64_t j = 1; j <= nblk; j++) {
        const int64_t k = (own + j) % nblk, r0 = k * tl;
        TRY(norm_f(x, cfg->gpt, xin + r0 * h, ng, nb, A.xn, W.mean + r0, W.rstd + r0, tl, h,
                   cfg->norm_eps, e));
        TRY(gemm(x, false, false, tl, f, h, 1, A.xn, h, w1, f, 0, NULL, A.h1 + r0 * f, f, e));
        if (!cfg->gpt)
            TRY(gemm(x, false, false, tl, f, h, 1, A.xn, h, wu, f, 0, NULL, A.u + r0 * f, f, e));
    }
    if (cfg->gpt) {
        TRY(bias_add(x, A.h1, T, f, b1, e));
        TRY(gelu_f(x, A.h1, A.a, T * f, e));
    } else {
        TRY(swiglu_f(x, A.h1, A.u, A.a, T * f, e));
    }
    TRY(gemm(x, false, false, T, h, f, 1, A.a, f, w2, h, 0, NULL, y, h, e));
    return bias_drop_resid(x, y, y, T, h, sh->first ? b2 : NULL, dropout_key(c, EXEC_DROP_MLP_OUT),
                           (uint64_t)c->sample0 * (uint64_t)(cfg->s * h), cfg->dropout,
                           sh->first ? xin : NULL, e);
}

extern "C" int exec_cuda_mlp_bi(const exec_cuda_call *cc, base_error *e)
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
    TRY(region_params_get(c, EXEC_MLP, &rp, e));
    const char *n[7];
    mlp_names(cfg, n);
    bf16 *ng = pb(&rp, c->param, n[0]), *w1 = pb(&rp, c->param, n[2]);
    bf16 *wu = pb(&rp, c->param, n[4]), *w2 = pb(&rp, c->param, n[5]);
    mlp_act A;
    size_t rebuilt;
    mlp_layout(cfg, sh, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    mlp_work W;
    mlp_work_layout(cfg, sh, c->work, &W, false);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, f = sh->nffn;
    const bf16 *dy = (const bf16 *)c->dy;


    TRY(bias_drop_resid(x, dy, W.dyd, T, h, NULL, dropout_key(c, EXEC_DROP_MLP_OUT),
                        (uint64_t)c->sample0 * (uint64_t)(cfg->s * h), cfg->dropout, NULL, e));
    /* da (the gradient of fc2's input) goes through dh1, then the activation's backward in place */
    TRY(gemm(x, false, true, T, f, h, 1, W.dyd, h, w2, h, 0, NULL, W.dh1, f, e));
    if (cfg->gpt) {
        TRY(gelu_bi(x, W.dh1, A.h1, W.dh1, T * f, e));
        TRY(gemm(x, false, true, T, h, f, 1, W.dh1, f, w1, f, 0, W.dxn, NULL, h, e));
    } else {
        TRY(swiglu_bi(x, W.dh1, A.h1, A.u, W.dh1, W.du, T * f, e));
        TRY(gemm(x, false, true, T, h, f, 1, W.dh1, f, w1, f, 0, W.dxn, NULL, h, e));
        TRY(gemm(x, false, true, T, h, f, 1, W.du, f, wu, f, 1, W.dxn, NULL, h, e));
    }
    return norm_bi_rows(x, cfg, sh, c->xg, A.x, W.dxn, ng, W.mean, W.rstd, (bf16 *)c->dx,
                        sh->first ? dy : NULL, e);
}

/* reads BI's work buffer: the statistics and the gradients it left */
extern "C" int exec_cuda_mlp_bw(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->grad, "the gradient block");
    NEED(c->act, "the act buffer");
    NEED(c->work, "the work buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    TRY(region_params_get(c, EXEC_MLP, &rp, e));
    const char *n[7];
    mlp_names(cfg, n);
    float *gng = gf(&rp, c->grad, n[0]), *gnb = gf(&rp, c->grad, n[1]);
    float *gw1 = gf(&rp, c->grad, n[2]), *gb1 = gf(&rp, c->grad, n[3]);
    float *gwu = gf(&rp, c->grad, n[4]), *gw2 = gf(&rp, c->grad, n[5]);
    float *gb2 = gf(&rp, c->grad, n[6]);
    mlp_act A;
    size_t rebuilt;
    mlp_layout(cfg, sh, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    mlp_work W;
    mlp_work_layout(cfg, sh, c->work, &W, false);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, f = sh->nffn;

    /* under sequence parallelism the norm outputs of every block come from the gathered pairs */
    const int64_t tl = exec_sp_rows(cfg, sh), nblk = exec_sp_blocks(sh);
    if (sh->sp) NEED(c->xg, "the gathered norm inputs and outputs xg");
    for (int64_t k = 0; k < nblk; k++) {
        const int64_t r0 = k * tl;
        const bf16 *xnk = sp_norm_rows(sh, c->xg, A.xn, k, 1, tl, h);
        TRY(gemm(x, true, false, h, f, tl, 1, xnk, h, W.dh1 + r0 * f, f, 1, gw1, NULL, f, e));
        if (!cfg->gpt)
            TRY(gemm(x, true, false, h, f, tl, 1, xnk, h, W.du + r0 * f, f, 1, gwu, NULL, f, e));
    }
    TRY(gemm(x, true, false, f, h, T, 1, A.a, f, W.dyd, h, 1, gw2, NULL, h, e));
    if (cfg->gpt) {
        TRY(colsum_acc(x, W.dh1, T, f, gb1, e));
        if (sh->first) TRY(colsum_acc(x, W.dyd, T, h, gb2, e));
    }
    return norm_bw_rows(x, cfg, sh, c->xg, A.x, W.dxn, W.mean, W.rstd, gng, gnb, e);
}
