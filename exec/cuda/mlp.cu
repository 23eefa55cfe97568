/* mlp.cu — the dense MLP region on the GPU, as exec/cpu/mlp.c: GPT: norm, fc1 (+ bias), GELU,
 * fc2 (+ bias), dropout, residual; Llama: norm, gate and up projections, SwiGLU, down
 * projection, residual. A shard owns FFN columns [ffn0, ffn0 + nffn) and its output is a partial
 * sum. GEMMs write bf16 activations, except the gradient of the norm output (a sum of two
 * products, then a norm backward that subtracts means), which is fp32. */
#include "common.cuh"

typedef struct mlp_act {
    bf16 *x;
    float *mean, *rstd;
    bf16 *xn;
    bf16 *h1;     /* GPT: fc1 output (GELU input); Llama: gate projection */
    bf16 *u;      /* Llama: up projection */
    bf16 *a;      /* activation output = fc2/down input */
    /* left by BI for BW */
    bf16 *dyd;    /* dy through the output dropout */
    bf16 *dh1, *du;
    float *dxn;
} mlp_act;

static size_t mlp_layout(const exec_cfg *c, const exec_shard *sh, void *base, mlp_act *A)
{
    carver cv = {(char *)base, 0};
    const int64_t T = c->b * c->s, h = c->h, f = sh->nffn;
    memset(A, 0, sizeof *A);
    A->x = carve_b(&cv, T * h);
    A->mean = carve_f(&cv, T);
    A->rstd = carve_f(&cv, T);
    A->xn = carve_b(&cv, T * h);
    A->h1 = carve_b(&cv, T * f);
    if (!c->gpt) A->u = carve_b(&cv, T * f);
    A->a = carve_b(&cv, T * f);
    A->dyd = carve_b(&cv, T * h);
    A->dh1 = carve_b(&cv, T * f);
    if (!c->gpt) A->du = carve_b(&cv, T * f);
    A->dxn = carve_f(&cv, T * h);
    return cv.off;
}

int64_t mlp_act_bytes(const exec_cfg *c, const exec_shard *s)
{
    mlp_act A;
    return (int64_t)mlp_layout(c, s, NULL, &A);
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
    mlp_layout(cfg, sh, c->act, &A);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, f = sh->nffn;
    bf16 *y = (bf16 *)c->y;

    TRY(exec_cuda_d2d(x, A.x, c->x, (size_t)(T * h) * 2, e));
    TRY(norm_f(x, cfg->gpt, A.x, ng, nb, A.xn, A.mean, A.rstd, T, h, cfg->norm_eps, e));
    TRY(gemm(x, false, false, T, f, h, 1, A.xn, h, w1, f, 0, NULL, A.h1, f, e));
    if (cfg->gpt) {
        TRY(bias_add(x, A.h1, T, f, b1, e));
        TRY(gelu_f(x, A.h1, A.a, T * f, e));
    } else {
        TRY(gemm(x, false, false, T, f, h, 1, A.xn, h, wu, f, 0, NULL, A.u, f, e));
        TRY(swiglu_f(x, A.h1, A.u, A.a, T * f, e));
    }
    TRY(gemm(x, false, false, T, h, f, 1, A.a, f, w2, h, 0, NULL, y, h, e));
    return bias_drop_resid(x, y, y, T, h, sh->first ? b2 : NULL, dropout_key(c, EXEC_DROP_MLP_OUT),
                           (uint64_t)c->sample0 * (uint64_t)(cfg->s * h), cfg->dropout,
                           sh->first ? A.x : NULL, e);
}

extern "C" int exec_cuda_mlp_bi(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->dy, "the output gradient dy");
    NEED(c->dx, "the input gradient dx");
    NEED(c->param, "the parameter block");
    NEED(c->act, "the act buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    TRY(region_params_get(c, EXEC_MLP, &rp, e));
    const char *n[7];
    mlp_names(cfg, n);
    bf16 *ng = pb(&rp, c->param, n[0]), *w1 = pb(&rp, c->param, n[2]);
    bf16 *wu = pb(&rp, c->param, n[4]), *w2 = pb(&rp, c->param, n[5]);
    mlp_act A;
    mlp_layout(cfg, sh, c->act, &A);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, f = sh->nffn;
    const bf16 *dy = (const bf16 *)c->dy;

    TRY(bias_drop_resid(x, dy, A.dyd, T, h, NULL, dropout_key(c, EXEC_DROP_MLP_OUT),
                        (uint64_t)c->sample0 * (uint64_t)(cfg->s * h), cfg->dropout, NULL, e));
    /* da (the gradient of fc2's input) goes through dh1, then the activation's backward in place */
    TRY(gemm(x, false, true, T, f, h, 1, A.dyd, h, w2, h, 0, NULL, A.dh1, f, e));
    if (cfg->gpt) {
        TRY(gelu_bi(x, A.dh1, A.h1, A.dh1, T * f, e));
        TRY(gemm(x, false, true, T, h, f, 1, A.dh1, f, w1, f, 0, A.dxn, NULL, h, e));
    } else {
        TRY(swiglu_bi(x, A.dh1, A.h1, A.u, A.dh1, A.du, T * f, e));
        TRY(gemm(x, false, true, T, h, f, 1, A.dh1, f, w1, f, 0, A.dxn, NULL, h, e));
        TRY(gemm(x, false, true, T, h, f, 1, A.du, f, wu, f, 1, A.dxn, NULL, h, e));
    }
    return norm_bi(x, cfg->gpt, A.dxn, NULL, A.x, ng, A.mean, A.rstd, (bf16 *)c->dx,
                   sh->first ? dy : NULL, T, h, e);
}

extern "C" int exec_cuda_mlp_bw(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->grad, "the gradient block");
    NEED(c->act, "the act buffer");
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
    mlp_layout(cfg, sh, c->act, &A);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, f = sh->nffn;

    TRY(gemm(x, true, false, h, f, T, 1, A.xn, h, A.dh1, f, 1, gw1, NULL, f, e));
    if (!cfg->gpt) TRY(gemm(x, true, false, h, f, T, 1, A.xn, h, A.du, f, 1, gwu, NULL, f, e));
    TRY(gemm(x, true, false, f, h, T, 1, A.a, f, A.dyd, h, 1, gw2, NULL, h, e));
    if (cfg->gpt) {
        TRY(colsum_acc(x, A.dh1, T, f, gb1, e));
        if (sh->first) TRY(colsum_acc(x, A.dyd, T, h, gb2, e));
    }
    return norm_bw(x, cfg->gpt, A.dxn, NULL, A.x, A.mean, A.rstd, gng, gnb, T, h, e);
}
