/* attention.c — the attention region: pre-norm, Q/K/V projections (biases for GPT), Qwen3's
 * per-head QK-norm, RoPE (Llama), causal softmax attention with grouped-query heads (dropout on
 * the probabilities for GPT), the out-projection (bias for GPT), dropout and the residual. One
 * shard computes the query heads [head0, head0 + nheads) with the key/value heads they use, and
 * its rows of the out-projection: the sum of the shards' outputs is the whole region's output
 * (kernels.h, "Tensor parallelism").
 *
 * Per (sequence, head), with Q, K, V of s x d and scale = 1/sqrt(d):
 *   S = scale Q K^T, P = softmax(S + causal mask) row-wise, P' = dropout(P), O = P' V.
 * Backward (softmax: dS = P o (dP - rowsum(dP o P))):
 *   dP' = dO V^T, dV += P'^T dO, dP = dropout(dP'), dQ = scale dS K, dK += scale dS^T Q
 * (dK, dV accumulate over the query heads that share a key/value head). */
#include "real.h"

/* ---------------------------------------------------------------- RoPE */

void FN(exec_rope_table)(real *cs, int64_t s, int64_t d, double theta)
{
    int64_t half = d / 2;
    for (int64_t pos = 0; pos < s; pos++)
        for (int64_t i = 0; i < half; i++) {
            double ang = (double)pos * pow(theta, -2.0 * (double)i / (double)d);
            cs[(pos * half + i) * 2] = (real)cos(ang);
            cs[(pos * half + i) * 2 + 1] = (real)sin(ang);
        }
}

void FN(exec_rope_apply)(real *x, int64_t tokens, int64_t heads, int64_t d, int64_t s,
                         const real *cs, bool inverse)
{
    int64_t half = d / 2;
    for (int64_t t = 0; t < tokens; t++) {
        const real *row = cs + (t % s) * half * 2;
        for (int64_t hh = 0; hh < heads; hh++) {
            real *v = x + (t * heads + hh) * d;
            for (int64_t i = 0; i < half; i++) {
                real co = row[2 * i], si = inverse ? -row[2 * i + 1] : row[2 * i + 1];
                real a = v[i], b = v[i + half];
                v[i] = a * co - b * si;
                v[i + half] = a * si + b * co;
            }
        }
    }
}

/* ---------------------------------------------------------------- the act and work buffers */

/* act: plan_tensors.h's attention rows (the norm input x and output xn, Q, K, V as the core
 * used them, the QK-norm inputs, the core output o, the softmax output, with dropout the dropped
 * probabilities and the two 1-byte masks). */
typedef struct attn_act {
    real *x, *xn, *q, *k, *v, *q_raw, *k_raw, *o, *probs, *pd;
    uint8_t *mprobs, *mout;
} attn_act;

static size_t attn_layout(const exec_cfg *c, const exec_shard *sh, int mode, void *b0, void *b1,
                          attn_act *A, size_t *rebuilt)
{
    plan_tensor_layout L;
    act_walk(c, sh, EXEC_ATTN, mode, &L);
    void *const base[2] = {b0, b1};
    A->x = AT(L, base, ATTN_X);
    A->xn = AT(L, base, ATTN_XN);
    A->q = AT(L, base, ATTN_Q);
    A->k = AT(L, base, ATTN_K);
    A->v = AT(L, base, ATTN_V);
    A->q_raw = AT(L, base, ATTN_Q_RAW);
    A->k_raw = AT(L, base, ATTN_K_RAW);
    A->o = AT(L, base, ATTN_O);
    A->probs = AT(L, base, ATTN_PROBS);
    A->pd = AT(L, base, ATTN_PROBS_DROPPED);
    A->mprobs = AT(L, base, ATTN_PROBS_MASK);
    A->mout = AT(L, base, ATTN_OUT_MASK);
    if (rebuilt) *rebuilt = (size_t)L.bytes[1];
    return (size_t)L.bytes[0];
}

/* work: plan_tensors.h's attention rows: the statistics F and BI compute (norm, QK-norm), the
 * RoPE table, an s x s block, and what BI leaves for BW (the gradients of the core output, of
 * the out-projection output through dropout, of Q/K/V, of the QK-norm outputs and of the norm
 * output). */
typedef struct attn_work {
    real *mean, *rstd, *q_rstd, *k_rstd, *rope, *s1, *dO;
    real *dyd, *dq, *dk, *dv, *dqn, *dkn, *dxn;
} attn_work;

static size_t attn_work_layout(const exec_cfg *c, const exec_shard *sh, void *b, attn_work *W,
                               size_t *fbytes)
{
    plan_tensor_layout L;
    if (fbytes) {
        work_walk(c, sh, EXEC_ATTN, true, &L); /* what F uses */
        *fbytes = (size_t)L.bytes[0];
    }
    work_walk(c, sh, EXEC_ATTN, false, &L);
    void *const base[2] = {b, NULL};
    W->mean = AT(L, base, ATTN_MEAN);
    W->rstd = AT(L, base, ATTN_RSTD);
    W->q_rstd = AT(L, base, ATTN_Q_RSTD);
    W->k_rstd = AT(L, base, ATTN_K_RSTD);
    W->rope = AT(L, base, ATTN_ROPE);
    W->dqn = AT(L, base, ATTN_DQN);
    W->dkn = AT(L, base, ATTN_DKN);
    W->s1 = AT(L, base, ATTN_SCORES);
    W->dO = AT(L, base, ATTN_DO);
    W->dyd = AT(L, base, ATTN_DYD);
    W->dq = AT(L, base, ATTN_DQ);
    W->dk = AT(L, base, ATTN_DK);
    W->dv = AT(L, base, ATTN_DV);
    W->dxn = AT(L, base, ATTN_DXN);
    return (size_t)L.bytes[0];
}

int64_t FN(exec_attn_act_split)(const exec_cfg *c, const exec_shard *s, int mode, int64_t *rebuilt)
{
    attn_act A;
    size_t r = 0;
    size_t k = attn_layout(c, s, mode, NULL, NULL, &A, &r);
    if (rebuilt) *rebuilt = (int64_t)r;
    return (int64_t)k;
}

int64_t FN(exec_attn_act_bytes)(const exec_cfg *c, const exec_shard *s)
{
    return FN(exec_attn_act_split)(c, s, EXEC_ACT_ALL, NULL);
}

int64_t FN(exec_attn_work_bytes)(const exec_cfg *c, const exec_shard *s, bool pass_f)
{
    attn_work W;
    size_t f = 0, all = attn_work_layout(c, s, NULL, &W, &f);
    return pass_f ? (int64_t)f : (int64_t)all;
}

/* The region's tensors in a parameter (or gradient) block. */
typedef struct attn_w {
    real *ng, *nb, *wq, *bq, *wk, *bk, *wv, *bv, *qg, *kg, *wo, *bo;
} attn_w;

static void attn_weights(const exec_cfg *c, const region_params *rp, void *block, attn_w *w)
{
    w->ng = param_at(rp, block, c->gpt ? "ln.g" : "norm.g");
    w->nb = param_at(rp, block, "ln.b");
    w->wq = param_at(rp, block, "wq");
    w->bq = param_at(rp, block, "bq");
    w->wk = param_at(rp, block, "wk");
    w->bk = param_at(rp, block, "bk");
    w->wv = param_at(rp, block, "wv");
    w->bv = param_at(rp, block, "bv");
    w->qg = param_at(rp, block, "q_norm.g");
    w->kg = param_at(rp, block, "k_norm.g");
    w->wo = param_at(rp, block, "wo");
    w->bo = param_at(rp, block, "bo");
}

/* Index of the first attention-probability element of (sequence bi, local head j) in the
 * global dropout stream: [global sample][global head][query][key]. */
static uint64_t probs_index(const exec_call *c, int64_t bi, int64_t j)
{
    const exec_cfg *cfg = c->cfg;
    uint64_t sample = (uint64_t)(c->sample0 + bi), head = (uint64_t)(c->shard->head0 + j);
    return ((sample * (uint64_t)cfg->heads + head) * (uint64_t)cfg->s) * (uint64_t)cfg->s;
}

/* ---------------------------------------------------------------- forward */

int FN(exec_attn_f)(const exec_call *c, base_error *e)
{
    NEED(c->x, "the input x");
    NEED(c->y, "the output y");
    NEED(c->param, "the parameter block");
    NEED(c->act, "the act buffer");
    NEED(c->work, "the work buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    if (region_params_get(c, EXEC_ATTN, &rp, e)) return -1;
    attn_w w;
    attn_weights(cfg, &rp, c->param, &w);
    attn_act A;
    size_t rebuilt;
    attn_layout(cfg, sh, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    attn_work W;
    attn_work_layout(cfg, sh, c->work, &W, NULL);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, s = cfg->s, d = cfg->head_dim;
    const int64_t nh = sh->nheads, nkv = sh->nkv, qw = nh * d, kw = nkv * d;
    const int64_t group = cfg->heads / cfg->kv_heads;
    const real scale = (real)(1.0 / sqrt((double)d));
    const real *x = c->x;
    real *y = c->y;

    /* the norm and the Q/K/V projections block by block of tokens (one block without sequence
     * parallelism): each block's norm output passes through A.xn, the device's own block last,
     * so that A.x and A.xn keep exactly its rows (R under full recompute reads them from act) */
    const int64_t tl = sp_rows(cfg, sh), nb = sp_blocks(sh), own = sp_own(sh);
    if (A.x != x + own * tl * h) memcpy(A.x, x + own * tl * h, (size_t)(tl * h) * sizeof(real));
    real *qdst = cfg->qk_norm ? A.q_raw : A.q, *kdst = cfg->qk_norm ? A.k_raw : A.k;
    for (int64_t j = 1; j <= nb; j++) {
        const int64_t k = (own + j) % nb, r0 = k * tl;
        FN(exec_norm_f)(cfg, x + r0 * h, w.ng, w.nb, A.xn, W.mean + r0, W.rstd + r0, tl);
        FN(exec_gemm)(false, false, tl, qw, h, 1, A.xn, h, w.wq, qw, 0, qdst + r0 * qw, qw);
        FN(exec_gemm)(false, false, tl, kw, h, 1, A.xn, h, w.wk, kw, 0, kdst + r0 * kw, kw);
        FN(exec_gemm)(false, false, tl, kw, h, 1, A.xn, h, w.wv, kw, 0, A.v + r0 * kw, kw);
    }
    if (cfg->gpt) {
        bias_add(qdst, T, qw, w.bq);
        bias_add(kdst, T, kw, w.bk);
        bias_add(A.v, T, kw, w.bv);
    }
    if (cfg->qk_norm) {
        /* Qwen3: RMSNorm over each head's d dimensions, one weight shared by all heads */
        FN(exec_rmsnorm_f)(A.q_raw, w.qg, A.q, W.q_rstd, T * nh, d, cfg->norm_eps);
        FN(exec_rmsnorm_f)(A.k_raw, w.kg, A.k, W.k_rstd, T * nkv, d, cfg->norm_eps);
    }
    if (!cfg->gpt) {
        FN(exec_rope_table)(W.rope, s, d, cfg->rope_theta);
        FN(exec_rope_apply)(A.q, T, nh, d, s, W.rope, false);
        FN(exec_rope_apply)(A.k, T, nkv, d, s, W.rope, false);
    }

    const double p = cfg->dropout;
    const uint64_t pkey = dropout_key(c, EXEC_DROP_ATTN_PROBS);
    for (int64_t bi = 0; bi < cfg->b; bi++)
        for (int64_t j = 0; j < nh; j++) {
            int64_t kv = (sh->head0 + j) / group - sh->kv0;
            const real *Q = A.q + bi * s * qw + j * d;
            const real *K = A.k + bi * s * kw + kv * d, *V = A.v + bi * s * kw + kv * d;
            real *Pr = A.probs + (bi * nh + j) * s * s;
            FN(exec_gemm)(false, true, s, s, d, scale, Q, qw, K, kw, 0, Pr, s);
            for (int64_t i = 0; i < s; i++) {
                /* causal: query i sees keys 0..i; masked probabilities are exactly 0 */
                real *row = Pr + i * s, mx = row[0];
                for (int64_t jj = 1; jj <= i; jj++) mx = row[jj] > mx ? row[jj] : mx;
                double sum = 0;
                for (int64_t jj = 0; jj <= i; jj++) {
                    row[jj] = R_EXP(row[jj] - mx);
                    sum += row[jj];
                }
                real inv = (real)(1.0 / sum);
                for (int64_t jj = 0; jj <= i; jj++) row[jj] *= inv;
                for (int64_t jj = i + 1; jj < s; jj++) row[jj] = 0;
            }
            const real *Pd = Pr;
            if (p > 0) {
                real *pd = A.pd + (bi * nh + j) * s * s;
                memcpy(pd, Pr, (size_t)(s * s) * sizeof(real));
                dropout_apply_mask(pd, A.mprobs + (bi * nh + j) * s * s, s * s, pkey,
                                   probs_index(c, bi, j), p);
                Pd = pd;
            }
            FN(exec_gemm)(false, false, s, d, s, 1, Pd, s, V, kw, 0, A.o + bi * s * qw + j * d, qw);
        }

    FN(exec_gemm)(false, false, T, h, qw, 1, A.o, qw, w.wo, h, 0, y, h);
    if (sh->first && w.bo) bias_add(y, T, h, w.bo);
    if (p > 0)
        sp_dropout_f(sh, y, A.mout, tl * h, dropout_key(c, EXEC_DROP_ATTN_OUT),
                     (uint64_t)c->sample0 * (uint64_t)(s * h), p);
    if (sh->first)
        for (int64_t i = 0; i < T * h; i++) y[i] += x[i];
    return 0;
}

/* ---------------------------------------------------------------- input gradient */

int FN(exec_attn_bi)(const exec_call *c, base_error *e)
{
    NEED(c->dy, "the output gradient dy");
    NEED(c->dx, "the input gradient dx");
    NEED(c->param, "the parameter block");
    NEED(c->act, "the act buffer");
    NEED(c->work, "the work buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    if (region_params_get(c, EXEC_ATTN, &rp, e)) return -1;
    attn_w w;
    attn_weights(cfg, &rp, c->param, &w);
    attn_act A;
    size_t rebuilt;
    attn_layout(cfg, sh, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    attn_work W;
    attn_work_layout(cfg, sh, c->work, &W, NULL);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, s = cfg->s, d = cfg->head_dim;
    const int64_t nh = sh->nheads, nkv = sh->nkv, qw = nh * d, kw = nkv * d;
    const int64_t group = cfg->heads / cfg->kv_heads;
    const real scale = (real)(1.0 / sqrt((double)d));
    const double p = cfg->dropout;
    const real *dy = c->dy;
    real *dx = c->dx;

    const int64_t tl = sp_rows(cfg, sh);
    if (sh->sp) NEED(c->xg, "the gathered norm inputs and outputs xg");
    if (p > 0)
        sp_dropout_b(sh, dy, W.dyd, A.mout, tl * h, dropout_key(c, EXEC_DROP_ATTN_OUT),
                     (uint64_t)c->sample0 * (uint64_t)(s * h), p);
    else
        memcpy(W.dyd, dy, (size_t)(T * h) * sizeof(real));
    FN(exec_gemm)(false, true, T, qw, h, 1, W.dyd, h, w.wo, h, 0, W.dO, qw);

    memset(W.dk, 0, (size_t)(T * kw) * sizeof(real));
    memset(W.dv, 0, (size_t)(T * kw) * sizeof(real));
    for (int64_t bi = 0; bi < cfg->b; bi++)
        for (int64_t j = 0; j < nh; j++) {
            int64_t kv = (sh->head0 + j) / group - sh->kv0;
            const real *Q = A.q + bi * s * qw + j * d, *dO = W.dO + bi * s * qw + j * d;
            const real *K = A.k + bi * s * kw + kv * d, *V = A.v + bi * s * kw + kv * d;
            real *dK = W.dk + bi * s * kw + kv * d, *dV = W.dv + bi * s * kw + kv * d;
            const real *Pr = A.probs + (bi * nh + j) * s * s;
            const real *Pd = p > 0 ? A.pd + (bi * nh + j) * s * s : Pr;
            real *dP = W.s1;
            FN(exec_gemm)(false, true, s, s, d, 1, dO, qw, V, kw, 0, dP, s);
            FN(exec_gemm)(true, false, s, d, s, 1, Pd, s, dO, qw, 1, dV, kw);
            if (p > 0) dropout_from_mask(dP, dP, A.mprobs + (bi * nh + j) * s * s, s * s, p);
            for (int64_t i = 0; i < s; i++) {
                real *dr = dP + i * s;
                const real *pr = Pr + i * s;
                double dot = 0;
                for (int64_t jj = 0; jj <= i; jj++) dot += (double)dr[jj] * pr[jj];
                for (int64_t jj = 0; jj < s; jj++) dr[jj] = pr[jj] * (dr[jj] - (real)dot);
            }
            FN(exec_gemm)(false, false, s, d, s, scale, dP, s, K, kw, 0, W.dq + bi * s * qw + j * d,
                          qw);
            FN(exec_gemm)(true, false, s, d, s, scale, dP, s, Q, qw, 1, dK, kw);
        }

    if (!cfg->gpt) {
        FN(exec_rope_table)(W.rope, s, d, cfg->rope_theta);
        FN(exec_rope_apply)(W.dq, T, nh, d, s, W.rope, true);
        FN(exec_rope_apply)(W.dk, T, nkv, d, s, W.rope, true);
    }
    if (cfg->qk_norm) {
        /* the statistics from the kept inputs; BW reads them here too */
        FN(exec_rmsnorm_stats)(A.q_raw, W.q_rstd, T * nh, d, cfg->norm_eps);
        FN(exec_rmsnorm_stats)(A.k_raw, W.k_rstd, T * nkv, d, cfg->norm_eps);
        memcpy(W.dqn, W.dq, (size_t)(T * qw) * sizeof(real));
        memcpy(W.dkn, W.dk, (size_t)(T * kw) * sizeof(real));
        FN(exec_rmsnorm_bi)(W.dqn, A.q_raw, w.qg, W.q_rstd, W.dq, T * nh, d, false);
        FN(exec_rmsnorm_bi)(W.dkn, A.k_raw, w.kg, W.k_rstd, W.dk, T * nkv, d, false);
    }
    FN(exec_gemm)(false, true, T, h, qw, 1, W.dq, qw, w.wq, qw, 0, W.dxn, h);
    FN(exec_gemm)(false, true, T, h, kw, 1, W.dk, kw, w.wk, kw, 1, W.dxn, h);
    FN(exec_gemm)(false, true, T, h, kw, 1, W.dv, kw, w.wv, kw, 1, W.dxn, h);
    FN(exec_norm_bi_rows)(cfg, sh, c->xg, A.x, W.dxn, w.ng, W.mean, W.rstd, dx);
    if (sh->first)
        for (int64_t i = 0; i < T * h; i++) dx[i] += dy[i];
    return 0;
}

/* ---------------------------------------------------------------- weight gradient */

int FN(exec_attn_bw)(const exec_call *c, base_error *e)
{
    NEED(c->grad, "the gradient block");
    NEED(c->act, "the act buffer");
    NEED(c->work, "the work buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    if (region_params_get(c, EXEC_ATTN, &rp, e)) return -1;
    attn_w g;
    attn_weights(cfg, &rp, c->grad, &g);
    attn_act A;
    size_t rebuilt;
    attn_layout(cfg, sh, c->act_mode, c->act, c->act2, &A, &rebuilt);
    NEED_ACT2(rebuilt);
    attn_work W;
    attn_work_layout(cfg, sh, c->work, &W, NULL);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, d = cfg->head_dim;
    const int64_t nh = sh->nheads, nkv = sh->nkv, qw = nh * d, kw = nkv * d;

    const int64_t tl = sp_rows(cfg, sh), nb = sp_blocks(sh);
    if (sh->sp) NEED(c->xg, "the gathered norm inputs and outputs xg");
    for (int64_t k = 0; k < nb; k++) {
        const int64_t r0 = k * tl;
        const real *xnk = sp_norm_rows(sh, c->xg, A.xn, k, 1, tl, h);
        FN(exec_gemm)(true, false, h, qw, tl, 1, xnk, h, W.dq + r0 * qw, qw, 1, g.wq, qw);
        FN(exec_gemm)(true, false, h, kw, tl, 1, xnk, h, W.dk + r0 * kw, kw, 1, g.wk, kw);
        FN(exec_gemm)(true, false, h, kw, tl, 1, xnk, h, W.dv + r0 * kw, kw, 1, g.wv, kw);
    }
    FN(exec_gemm)(true, false, qw, h, T, 1, A.o, qw, W.dyd, h, 1, g.wo, h);
    if (cfg->gpt) {
        colsum_acc(W.dq, T, qw, g.bq);
        colsum_acc(W.dk, T, kw, g.bk);
        colsum_acc(W.dv, T, kw, g.bv);
        if (sh->first) colsum_acc(W.dyd, T, h, g.bo);
    }
    if (cfg->qk_norm) {
        FN(exec_rmsnorm_bw)(W.dqn, A.q_raw, W.q_rstd, g.qg, T * nh, d);
        FN(exec_rmsnorm_bw)(W.dkn, A.k_raw, W.k_rstd, g.kg, T * nkv, d);
    }
    FN(exec_norm_bw_rows)(cfg, sh, c->xg, A.x, W.dxn, W.mean, W.rstd, g.ng, g.nb);
    return 0;
}
