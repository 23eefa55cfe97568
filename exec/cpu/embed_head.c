/* embed_head.c — the two ends of the model.
 *
 * embed: y[t] = E[token t] (+ P[position of t] for GPT's learned positions), then dropout (GPT).
 * Vocab-parallel: a shard holds the rows [vocab0, vocab0 + nvocab) of E and writes zeros for the
 * tokens outside them; positions are added by the first shard only; the mask is a function of
 * the global element index, so the shards' outputs sum to the whole embedding. No input
 * gradient; the weight gradient scatters dy (through the mask) into the rows of the tokens.
 *
 * head: final norm, logits z = xn W^T over the shard's vocabulary slice (W is [vocab][h]: the
 * untied LM head, or the token table when tied), cross-entropy
 *   loss = loss_scale * sum_t (log sum_v exp z[t][v] - z[t][target_t]),
 * computed vocab-parallel as Megatron does: global max m_t (all-reduce MAX), the slice's
 * sum of exp(z - m_t) and target logit (all-reduce SUM), then lse_t = m_t + log(sum). The
 * forward keeps the slice's dz = loss_scale * (p - onehot(target)) with p = exp(z - lse) (once
 * the loss is known the gradient is; keeping it, not p, spares the targets); backward
 *   dxn = dz W,  dW += dz^T xn,
 * then the norm's backward (the partial dxn of a slice goes through it: it is linear). */
#include "real.h"

/* ---------------------------------------------------------------- embed */

/* act: plan_tensors.h's embedding rows: the token ids and, with dropout, the 1-byte mask
 * (under sequence parallelism of the device's own rows only, real.h). No work buffer. */
typedef struct embed_act {
    int32_t *tokens;
    uint8_t *mask;
} embed_act;

static size_t embed_layout(const exec_cfg *c, const exec_shard *sh, void *b, embed_act *A)
{
    plan_tensor_layout L;
    act_walk(c, sh, EXEC_EMBED, EXEC_ACT_ALL, &L);
    void *const base[2] = {b, NULL};
    A->tokens = AT(L, base, EMBED_TOKENS);
    A->mask = AT(L, base, EMBED_MASK);
    return (size_t)L.bytes[0];
}

int64_t FN(exec_embed_act_bytes)(const exec_cfg *c, const exec_shard *s)
{
    embed_act A;
    return (int64_t)embed_layout(c, s, NULL, &A);
}

int64_t FN(exec_embed_work_bytes)(const exec_cfg *c, const exec_shard *s, bool pass_f)
{
    (void)c;
    (void)s;
    (void)pass_f;
    return 0;
}

int FN(exec_embed_f)(const exec_call *c, base_error *e)
{
    NEED(c->tokens, "the tokens");
    NEED(c->y, "the output y");
    NEED(c->param, "the parameter block");
    NEED(c->act, "the act buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    if (region_params_get(c, EXEC_EMBED, &rp, e)) return -1;
    const real *tok = param_at(&rp, c->param, "tok"), *pos = param_at(&rp, c->param, "pos");
    embed_act A;
    embed_layout(cfg, sh, c->act, &A);
    const int64_t T = cfg->b * cfg->s, h = cfg->h;
    real *y = c->y;
    for (int64_t t = 0; t < T; t++) {
        int32_t id = c->tokens[t];
        if (id < 0 || id >= cfg->vocab)
            return base_errorf(e, "token %d at position %lld of sequence %lld is outside the "
                                  "vocabulary of %lld; check the data against the model",
                               (int)id, (long long)(t % cfg->s),
                               (long long)(c->sample0 + t / cfg->s), (long long)cfg->vocab);
        A.tokens[t] = id;
        real *yr = y + t * h;
        int64_t row = id - sh->vocab0;
        if (row >= 0 && row < sh->nvocab)
            memcpy(yr, tok + row * h, (size_t)h * sizeof(real));
        else
            memset(yr, 0, (size_t)h * sizeof(real));
        if (sh->first && pos)
            for (int64_t j = 0; j < h; j++) yr[j] += pos[(t % cfg->s) * h + j];
    }
    if (cfg->dropout > 0)
        sp_dropout_f(sh, y, A.mask, sp_rows(cfg, sh) * h, dropout_key(c, EXEC_DROP_EMBED),
                     (uint64_t)c->sample0 * (uint64_t)(cfg->s * h), cfg->dropout);
    return 0;
}

int FN(exec_embed_bw)(const exec_call *c, base_error *e)
{
    NEED(c->dy, "the output gradient dy");
    NEED(c->grad, "the gradient block");
    NEED(c->act, "the act buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    if (region_params_get(c, EXEC_EMBED, &rp, e)) return -1;
    real *gtok = param_at(&rp, c->grad, "tok"), *gpos = param_at(&rp, c->grad, "pos");
    embed_act A;
    embed_layout(cfg, sh, c->act, &A);
    const int64_t T = cfg->b * cfg->s, h = cfg->h;
    const real *dy = c->dy;
    const double p = cfg->dropout;
    const real scale = (real)(1.0 / (1.0 - p));
    /* the mask of the device's rows is kept; under sequence parallelism the other rows' are the
     * same counter bits, drawn again */
    const int64_t tl = sp_rows(cfg, sh), t0 = sp_own(sh) * tl;
    const uint64_t key = dropout_key(c, EXEC_DROP_EMBED),
                   idx0 = (uint64_t)c->sample0 * (uint64_t)(cfg->s * h);
    for (int64_t t = 0; t < T; t++) {
        int64_t row = A.tokens[t] - sh->vocab0;
        bool mine = row >= 0 && row < sh->nvocab;
        bool kept = t >= t0 && t < t0 + tl;
        for (int64_t j = 0; j < h; j++) {
            real g = dy[t * h + j];
            if (p > 0) {
                bool keep = kept ? A.mask[(t - t0) * h + j] != 0
                                 : exec_dropout_keep(key, idx0 + (uint64_t)(t * h + j), p);
                g = keep ? g * scale : 0;
            }
            if (mine) gtok[row * h + j] += g;
            if (sh->first && gpos) gpos[(t % cfg->s) * h + j] += g;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- head */

/* act: plan_tensors.h's head rows: the final norm's input x and output xn (the LM-head input)
 * and the slice's [T][nvocab] logits' gradient loss_scale * (softmax - onehot), which F computes
 * once the loss is known (fused cross-entropy: no targets kept). */
typedef struct head_act {
    real *x, *xn;
    real *probs;             /* [T][nvocab]: after F, dz */
} head_act;

static size_t head_layout(const exec_cfg *c, const exec_shard *sh, void *b, head_act *A)
{
    plan_tensor_layout L;
    act_walk(c, sh, EXEC_HEAD, EXEC_ACT_ALL, &L);
    void *const base[2] = {b, NULL};
    A->x = AT(L, base, HEAD_X);
    A->xn = AT(L, base, HEAD_XN);
    A->probs = AT(L, base, HEAD_PROBS);
    return (size_t)L.bytes[0];
}

/* work: the norm statistics, the softmax statistics of F ([3T]: max, sum of exp, target
 * logit) and the norm output's gradient BI leaves for BW. */
typedef struct head_work {
    real *mean, *rstd, *stats, *dxn;
} head_work;

static size_t head_work_layout(const exec_cfg *c, const exec_shard *sh, void *b, head_work *W,
                               size_t *fbytes)
{
    plan_tensor_layout L;
    if (fbytes) {
        work_walk(c, sh, EXEC_HEAD, true, &L); /* what F uses */
        *fbytes = (size_t)L.bytes[0];
    }
    work_walk(c, sh, EXEC_HEAD, false, &L);
    void *const base[2] = {b, NULL};
    W->mean = AT(L, base, HEAD_MEAN);
    W->rstd = AT(L, base, HEAD_RSTD);
    W->stats = AT(L, base, HEAD_STATS);
    W->dxn = AT(L, base, HEAD_DXN);
    return (size_t)L.bytes[0];
}

int64_t FN(exec_head_act_bytes)(const exec_cfg *c, const exec_shard *s)
{
    head_act A;
    return (int64_t)head_layout(c, s, NULL, &A);
}

int64_t FN(exec_head_work_bytes)(const exec_cfg *c, const exec_shard *s, bool pass_f)
{
    head_work W;
    size_t f = 0, all = head_work_layout(c, s, NULL, &W, &f);
    return pass_f ? (int64_t)f : (int64_t)all;
}

typedef struct head_w {
    real *ng, *nb;
    real *lm;                /* the vocabulary slice [nvocab][h] */
} head_w;

static int head_weights(const exec_call *c, const region_params *rp, bool grad, head_w *w,
                        base_error *e)
{
    void *block = grad ? c->grad : c->param;
    w->ng = param_at(rp, block, c->cfg->gpt ? "ln.g" : "norm.g");
    w->nb = param_at(rp, block, "ln.b");
    if (c->cfg->tied)
        w->lm = (real *)(grad ? c->lm_grad : (void *)c->lm_w);
    else
        w->lm = param_at(rp, block, "lm");
    if (!w->lm)
        return base_errorf(e, "head: the LM-head weight%s is missing (tied embeddings: pass the "
                              "token table's slice as lm_w / lm_grad)",
                           grad ? " gradient" : "");
    return 0;
}

int FN(exec_head_f_begin)(const exec_call *c, real *stats, base_error *e)
{
    NEED(c->x, "the input x");
    NEED(c->targets, "the targets");
    NEED(c->param, "the parameter block");
    NEED(c->act, "the act buffer");
    NEED(stats, "the statistics buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    if (region_params_get(c, EXEC_HEAD, &rp, e)) return -1;
    head_w w;
    if (head_weights(c, &rp, false, &w, e)) return -1;
    NEED(c->work, "the work buffer");
    head_act A;
    head_layout(cfg, sh, c->act, &A);
    head_work W;
    head_work_layout(cfg, c->shard, c->work, &W, NULL);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, nv = sh->nvocab;
    for (int64_t t = 0; t < T; t++) {
        int32_t id = c->targets[t];
        if (id < 0 || id >= cfg->vocab)
            return base_errorf(e, "target %d at position %lld of sequence %lld is outside the "
                                  "vocabulary of %lld; check the data against the model",
                               (int)id, (long long)(t % cfg->s),
                               (long long)(c->sample0 + t / cfg->s), (long long)cfg->vocab);
    }
    /* the norm and the LM head block by block of tokens (attention.c), the own block last */
    const int64_t tl = sp_rows(cfg, sh), nb = sp_blocks(sh), own = sp_own(sh);
    const real *x = c->x;
    memcpy(A.x, x + own * tl * h, (size_t)(tl * h) * sizeof(real));
    for (int64_t j = 1; j <= nb; j++) {
        const int64_t k = (own + j) % nb, r0 = k * tl;
        FN(exec_norm_f)(cfg, x + r0 * h, w.ng, w.nb, A.xn, W.mean + r0, W.rstd + r0, tl);
        FN(exec_gemm)(false, true, tl, nv, h, 1, A.xn, h, w.lm, h, 0, A.probs + r0 * nv, nv);
    }
    for (int64_t t = 0; t < T; t++) {
        const real *z = A.probs + t * nv;
        real mx = z[0];
        for (int64_t j = 1; j < nv; j++) mx = z[j] > mx ? z[j] : mx;
        stats[t] = mx;
    }
    return 0;
}

int FN(exec_head_f_sums)(const exec_call *c, real *stats, base_error *e)
{
    NEED(c->act, "the act buffer");
    NEED(c->targets, "the targets");
    NEED(stats, "the statistics buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    head_act A;
    head_layout(cfg, sh, c->act, &A);
    const int64_t T = cfg->b * cfg->s, nv = sh->nvocab;
    for (int64_t t = 0; t < T; t++) {
        const real *z = A.probs + t * nv;
        double sum = 0;
        for (int64_t j = 0; j < nv; j++) sum += R_EXP(z[j] - stats[t]);
        stats[T + t] = (real)sum;
        int64_t j = c->targets[t] - sh->vocab0;
        stats[2 * T + t] = j >= 0 && j < nv ? z[j] : 0;
    }
    return 0;
}

int FN(exec_head_f_end)(const exec_call *c, const real *stats, base_error *e)
{
    NEED(c->act, "the act buffer");
    NEED(c->targets, "the targets");
    NEED(stats, "the statistics buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    head_act A;
    head_layout(cfg, sh, c->act, &A);
    const int64_t T = cfg->b * cfg->s, nv = sh->nvocab;
    const real ls = (real)cfg->loss_scale;
    double loss = 0;
    for (int64_t t = 0; t < T; t++) {
        double lse = (double)stats[t] + log((double)stats[T + t]);
        loss += lse - (double)stats[2 * T + t];
        real *z = A.probs + t * nv;
        for (int64_t j = 0; j < nv; j++) z[j] = R_EXP(z[j] - (real)lse);
        /* the gradient now, so that the targets need not be kept */
        int64_t jt = c->targets[t] - sh->vocab0;
        if (jt >= 0 && jt < nv) z[jt] -= 1;
        for (int64_t j = 0; j < nv; j++) z[j] *= ls;
    }
    if (c->out) *c->out = sh->first ? loss * cfg->loss_scale : 0.0;
    return 0;
}

int FN(exec_head_f)(const exec_call *c, base_error *e)
{
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    NEED(c->act, "the act buffer");
    if (sh->tp > 1 && !c->reduce)
        return base_errorf(e, "head F on a vocabulary shard (tp %d) needs the call's reduce "
                              "callback for the global softmax statistics, or the phased "
                              "exec_head_f_begin/sums/end",
                           sh->tp);
    NEED(c->work, "the work buffer");
    head_work W;
    head_work_layout(cfg, c->shard, c->work, &W, NULL);
    const int64_t T = cfg->b * cfg->s;
    if (FN(exec_head_f_begin)(c, W.stats, e)) return -1;
    if (c->reduce && c->reduce(c->reduce_ctx, W.stats, T, REAL_DTYPE, EXEC_REDUCE_MAX, e))
        return -1;
    if (FN(exec_head_f_sums)(c, W.stats, e)) return -1;
    if (c->reduce && c->reduce(c->reduce_ctx, W.stats + T, 2 * T, REAL_DTYPE, EXEC_REDUCE_SUM, e))
        return -1;
    return FN(exec_head_f_end)(c, W.stats, e);
}

int FN(exec_head_bi)(const exec_call *c, base_error *e)
{
    NEED(c->dx, "the input gradient dx");
    NEED(c->param, "the parameter block");
    NEED(c->act, "the act buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    if (region_params_get(c, EXEC_HEAD, &rp, e)) return -1;
    head_w w;
    if (head_weights(c, &rp, false, &w, e)) return -1;
    NEED(c->work, "the work buffer");
    head_act A;
    head_layout(cfg, sh, c->act, &A);
    head_work W;
    head_work_layout(cfg, c->shard, c->work, &W, NULL);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, nv = sh->nvocab;
    if (sh->sp) NEED(c->xg, "the gathered norm inputs and outputs xg");
    FN(exec_gemm)(false, false, T, h, nv, 1, A.probs, nv, w.lm, h, 0, W.dxn, h);
    FN(exec_norm_bi_rows)(cfg, sh, c->xg, A.x, W.dxn, w.ng, W.mean, W.rstd, (real *)c->dx);
    return 0;
}

int FN(exec_head_bw)(const exec_call *c, base_error *e)
{
    NEED(c->grad, "the gradient block");
    NEED(c->act, "the act buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    if (region_params_get(c, EXEC_HEAD, &rp, e)) return -1;
    head_w g;
    if (head_weights(c, &rp, true, &g, e)) return -1;
    NEED(c->work, "the work buffer");
    head_act A;
    head_layout(cfg, sh, c->act, &A);
    head_work W;
    head_work_layout(cfg, c->shard, c->work, &W, NULL);
    const int64_t h = cfg->h, nv = sh->nvocab;
    const int64_t tl = sp_rows(cfg, sh), nb = sp_blocks(sh);
    if (sh->sp) NEED(c->xg, "the gathered norm inputs and outputs xg");
    for (int64_t k = 0; k < nb; k++) {
        const int64_t r0 = k * tl;
        const real *xk = sp_norm_rows(sh, c->xg, A.x, k, 0, tl, h);
        const real *xnk = sp_norm_rows(sh, c->xg, A.xn, k, 1, tl, h);
        FN(exec_gemm)(true, false, nv, h, tl, 1, A.probs + r0 * nv, nv, xnk, h, 1, g.lm, h);
        FN(exec_norm_bw)(cfg, W.dxn + r0 * h, xk, W.mean + r0, W.rstd + r0, g.ng, g.nb, tl);
    }
    return 0;
}
