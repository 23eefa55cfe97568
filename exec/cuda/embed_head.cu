/* embed_head.cu — the two ends of the model on the GPU, as exec/cpu/embed_head.c.
 *
 * embed: y[t] = E[token t] (zeros for tokens outside the shard's vocabulary rows) + P[position]
 * (GPT, first shard), then dropout; the weight gradient scatters dy (through the mask) into the
 * token rows with fp32 atomics (tokens repeat). A token outside the vocabulary raises the
 * context's error flag (reported at the next sync) instead of failing at once: the tokens are
 * device memory.
 *
 * head: final norm, bf16 logits of the shard's vocabulary slice (one cuBLAS GEMM, as Megatron
 * keeps them), then the vocabulary-parallel cross-entropy in fp32: per token the slice's max
 * (reduced MAX over the TP group), sum of exp(z - max) and target logit (reduced SUM), then
 * lse = max + log(sum) and loss = lse - target logit. BI turns the logits into
 * dz = loss_scale (softmax - onehot) in place (recomputing exp(z - lse) rather than storing
 * probabilities), BW accumulates dz^T xn. */
#include "common.cuh"

/* ---------------------------------------------------------------- embed */

typedef struct embed_act {
    int32_t *tokens;
} embed_act;

static size_t embed_layout(const exec_cfg *c, void *base, embed_act *A)
{
    carver cv = {(char *)base, 0};
    A->tokens = carve_i(&cv, c->b * c->s);
    return cv.off;
}

int64_t embed_act_bytes(const exec_cfg *c, const exec_shard *s)
{
    (void)s;
    embed_act A;
    return (int64_t)embed_layout(c, NULL, &A);
}

__global__ void k_embed_f(const int32_t *tokens, int32_t *saved, const bf16 *tok, const bf16 *pos,
                          bf16 *y, int64_t T, int64_t h, int64_t s, int64_t vocab, int64_t vocab0,
                          int64_t nvocab, uint64_t key, uint64_t idx0, double p, float scale,
                          int *flag)
{
    GRID_STRIDE(i, T * h)
    {
        const int64_t t = i / h, j = i % h;
        const int32_t id = tokens[t];
        const bool bad = id < 0 || id >= vocab;
        if (j == 0) {
            saved[t] = id;
            if (bad) atomicOr(flag, EXEC_CUDA_BAD_TOKEN);
        }
        const int64_t row = (int64_t)id - vocab0;
        float v = !bad && row >= 0 && row < nvocab ? ldf(tok + row * h + j) : 0.f;
        if (pos) v += ldf(pos + (t % s) * h + j);
        if (p > 0) v = exec_cuda_dropout_keep(key, idx0 + (uint64_t)i, p) ? v * scale : 0.f;
        stf(y + i, v);
    }
}

extern "C" int exec_cuda_embed_f(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->tokens, "the tokens");
    NEED(c->y, "the output y");
    NEED(c->param, "the parameter block");
    NEED(c->act, "the act buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    TRY(region_params_get(c, EXEC_EMBED, &rp, e));
    embed_act A;
    embed_layout(cfg, c->act, &A);
    const int64_t T = cfg->b * cfg->s, h = cfg->h;
    const double p = cfg->dropout;
    k_embed_f<<<grid_for(T * h, 256), 256, 0, x->stream>>>(
        c->tokens, A.tokens, pb(&rp, c->param, "tok"), sh->first ? pb(&rp, c->param, "pos") : NULL,
        (bf16 *)c->y, T, h, cfg->s, cfg->vocab, sh->vocab0, sh->nvocab,
        dropout_key(c, EXEC_DROP_EMBED), (uint64_t)c->sample0 * (uint64_t)(cfg->s * h), p,
        p > 0 ? (float)(1.0 / (1.0 - p)) : 1.f, x->flag);
    LAUNCH_OK("k_embed_f");
    return 0;
}

__global__ void k_embed_bw(const int32_t *tokens, const bf16 *dy, float *gtok, float *gpos,
                           int64_t T, int64_t h, int64_t s, int64_t vocab, int64_t vocab0,
                           int64_t nvocab, uint64_t key, uint64_t idx0, double p, float scale)
{
    GRID_STRIDE(i, T * h)
    {
        const int64_t t = i / h, j = i % h;
        const int32_t id = tokens[t];
        if (id < 0 || id >= vocab) continue;
        float g = ldf(dy + i);
        if (p > 0) g = exec_cuda_dropout_keep(key, idx0 + (uint64_t)i, p) ? g * scale : 0.f;
        const int64_t row = (int64_t)id - vocab0;
        if (row >= 0 && row < nvocab) atomicAdd(gtok + row * h + j, g);
        if (gpos) atomicAdd(gpos + (t % s) * h + j, g);
    }
}

extern "C" int exec_cuda_embed_bw(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->dy, "the output gradient dy");
    NEED(c->grad, "the gradient block");
    NEED(c->act, "the act buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    TRY(region_params_get(c, EXEC_EMBED, &rp, e));
    embed_act A;
    embed_layout(cfg, c->act, &A);
    const int64_t T = cfg->b * cfg->s, h = cfg->h;
    const double p = cfg->dropout;
    k_embed_bw<<<grid_for(T * h, 256), 256, 0, x->stream>>>(
        A.tokens, (const bf16 *)c->dy, gf(&rp, c->grad, "tok"),
        sh->first ? gf(&rp, c->grad, "pos") : NULL, T, h, cfg->s, cfg->vocab, sh->vocab0,
        sh->nvocab, dropout_key(c, EXEC_DROP_EMBED), (uint64_t)c->sample0 * (uint64_t)(cfg->s * h),
        p, p > 0 ? (float)(1.0 / (1.0 - p)) : 1.f);
    LAUNCH_OK("k_embed_bw");
    return 0;
}

/* ---------------------------------------------------------------- head */

typedef struct head_act {
    bf16 *x;
    float *mean, *rstd;
    bf16 *xn;
    bf16 *logits;            /* [T][nvocab]; BI turns it into dz in place for BW */
    int32_t *targets;
    float *stats;            /* [3T]: max, sum of exp, target logit */
    float *lse, *loss;       /* [T] */
    float *dxn;              /* left by BI for BW */
} head_act;

static size_t head_layout(const exec_cfg *c, const exec_shard *sh, void *base, head_act *A)
{
    carver cv = {(char *)base, 0};
    const int64_t T = c->b * c->s, h = c->h;
    A->x = carve_b(&cv, T * h);
    A->mean = carve_f(&cv, T);
    A->rstd = carve_f(&cv, T);
    A->xn = carve_b(&cv, T * h);
    A->logits = carve_b(&cv, T * sh->nvocab);
    A->targets = carve_i(&cv, T);
    A->stats = carve_f(&cv, 3 * T);
    A->lse = carve_f(&cv, T);
    A->loss = carve_f(&cv, T);
    A->dxn = carve_f(&cv, T * h);
    return cv.off;
}

int64_t head_act_bytes(const exec_cfg *c, const exec_shard *s)
{
    head_act A;
    return (int64_t)head_layout(c, s, NULL, &A);
}

typedef struct head_w {
    const bf16 *ng, *nb, *lm;   /* lm: the vocabulary slice [nvocab][h] */
} head_w;

static int head_weights(const exec_call *c, const region_params *rp, head_w *w, base_error *e)
{
    w->ng = pb(rp, c->param, c->cfg->gpt ? "ln.g" : "norm.g");
    w->nb = pb(rp, c->param, "ln.b");
    w->lm = c->cfg->tied ? (const bf16 *)c->lm_w : pb(rp, c->param, "lm");
    if (!w->lm)
        return base_errorf(e, "head: the LM-head weight is missing (tied embeddings: pass the "
                              "token table's slice as lm_w)");
    return 0;
}

__global__ void k_copy_targets(const int32_t *in, int32_t *out, int64_t T, int64_t vocab,
                               int *flag)
{
    GRID_STRIDE(t, T)
    {
        int32_t id = in[t];
        if (id < 0 || id >= vocab) atomicOr(flag, EXEC_CUDA_BAD_TARGET);
        out[t] = id;
    }
}

/* Block reductions over one row of the logits per block (256 threads). */
__device__ float block_max(float v, float *sh)
{
    v = warp_max(v);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        float w = threadIdx.x < blockDim.x / 32 ? sh[threadIdx.x] : -INFINITY;
        w = warp_max(w);
        if (threadIdx.x == 0) sh[0] = w;
    }
    __syncthreads();
    float r = sh[0];
    __syncthreads();
    return r;
}

__device__ float block_sum(float v, float *sh)
{
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        float w = threadIdx.x < blockDim.x / 32 ? sh[threadIdx.x] : 0.f;
        w = warp_sum(w);
        if (threadIdx.x == 0) sh[0] = w;
    }
    __syncthreads();
    float r = sh[0];
    __syncthreads();
    return r;
}

__global__ void k_head_max(const bf16 *z, int64_t nv, float *stats)
{
    __shared__ float sh[32];
    const int64_t t = blockIdx.x;
    const bf16 *zr = z + t * nv;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) m = fmaxf(m, ldf(zr + j));
    m = block_max(m, sh);
    if (threadIdx.x == 0) stats[t] = m;
}

__global__ void k_head_sums(const bf16 *z, int64_t nv, int64_t T, const int32_t *targets,
                            int64_t vocab0, float *stats)
{
    __shared__ float sh[32];
    const int64_t t = blockIdx.x;
    const bf16 *zr = z + t * nv;
    const float m = stats[t];
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) s += expf(ldf(zr + j) - m);
    s = block_sum(s, sh);
    if (threadIdx.x == 0) {
        stats[T + t] = s;
        int64_t j = (int64_t)targets[t] - vocab0;
        stats[2 * T + t] = j >= 0 && j < nv ? ldf(zr + j) : 0.f;
    }
}

__global__ void k_head_lse(const float *stats, int64_t T, float *lse, float *loss)
{
    GRID_STRIDE(t, T)
    {
        float l = stats[t] + logf(stats[T + t]);
        lse[t] = l;
        loss[t] = l - stats[2 * T + t];
    }
}

/* out = scale * sum of v (one block, fixed order: the same logits give the same loss bits). */
__global__ void k_sum_to_double(const float *v, int64_t n, double scale, double *out)
{
    __shared__ double sh[32];
    double a = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) a += (double)v[i];
    a = warp_sum_d(a);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x / 32] = a;
    __syncthreads();
    if (threadIdx.x < 32) {
        double w = threadIdx.x < blockDim.x / 32 ? sh[threadIdx.x] : 0;
        w = warp_sum_d(w);
        if (threadIdx.x == 0) *out = scale * w;
    }
}

extern "C" int exec_cuda_head_f_begin(const exec_cuda_call *cc, float *stats, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->x, "the input x");
    NEED(c->targets, "the targets");
    NEED(c->param, "the parameter block");
    NEED(c->act, "the act buffer");
    NEED(stats, "the statistics buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    TRY(region_params_get(c, EXEC_HEAD, &rp, e));
    head_w w;
    TRY(head_weights(c, &rp, &w, e));
    head_act A;
    head_layout(cfg, sh, c->act, &A);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, nv = sh->nvocab;
    if (T > 2147483647) return base_errorf(e, "head: %lld tokens exceed the grid", (long long)T);
    k_copy_targets<<<grid_for(T, 256), 256, 0, x->stream>>>(c->targets, A.targets, T, cfg->vocab,
                                                            x->flag);
    LAUNCH_OK("k_copy_targets");
    TRY(exec_cuda_d2d(x, A.x, c->x, (size_t)(T * h) * 2, e));
    TRY(norm_f(x, cfg->gpt, A.x, w.ng, w.nb, A.xn, A.mean, A.rstd, T, h, cfg->norm_eps, e));
    TRY(gemm(x, false, true, T, nv, h, 1, A.xn, h, w.lm, h, 0, NULL, A.logits, nv, e));
    k_head_max<<<(unsigned)T, 256, 0, x->stream>>>(A.logits, nv, stats);
    LAUNCH_OK("k_head_max");
    return 0;
}

extern "C" int exec_cuda_head_f_sums(const exec_cuda_call *cc, float *stats, base_error *e)
{
    const exec_call *c = &cc->c;
    NEED(c->act, "the act buffer");
    NEED(stats, "the statistics buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    head_act A;
    head_layout(cfg, sh, c->act, &A);
    const int64_t T = cfg->b * cfg->s;
    k_head_sums<<<(unsigned)T, 256, 0, cc->ctx->stream>>>(A.logits, sh->nvocab, T, A.targets,
                                                          sh->vocab0, stats);
    LAUNCH_OK("k_head_sums");
    return 0;
}

extern "C" int exec_cuda_head_f_end(const exec_cuda_call *cc, const float *stats, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->act, "the act buffer");
    NEED(stats, "the statistics buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    head_act A;
    head_layout(cfg, sh, c->act, &A);
    const int64_t T = cfg->b * cfg->s;
    k_head_lse<<<grid_for(T, 256), 256, 0, x->stream>>>(stats, T, A.lse, A.loss);
    LAUNCH_OK("k_head_lse");
    if (c->out) {
        /* the loss is replicated over the TP group: the first shard reports it */
        k_sum_to_double<<<1, 256, 0, x->stream>>>(A.loss, sh->first ? T : 0, cfg->loss_scale,
                                                  c->out);
        LAUNCH_OK("k_sum_to_double");
    }
    return 0;
}

extern "C" int exec_cuda_head_f(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    NEED(c->act, "the act buffer");
    if (sh->tp > 1 && !c->reduce)
        return base_errorf(e, "head F on a vocabulary shard (tp %d) needs the call's reduce "
                              "callback for the global softmax statistics, or the phased "
                              "exec_cuda_head_f_begin/sums/end",
                           sh->tp);
    head_act A;
    head_layout(cfg, sh, c->act, &A);
    const int64_t T = cfg->b * cfg->s;
    /* the reduce callback gets device memory (fp32) and orders itself after the stream's work */
    TRY(exec_cuda_head_f_begin(cc, A.stats, e));
    if (c->reduce && c->reduce(c->reduce_ctx, A.stats, T, PLAN_FP32, EXEC_REDUCE_MAX, e)) return -1;
    TRY(exec_cuda_head_f_sums(cc, A.stats, e));
    if (c->reduce && c->reduce(c->reduce_ctx, A.stats + T, 2 * T, PLAN_FP32, EXEC_REDUCE_SUM, e))
        return -1;
    return exec_cuda_head_f_end(cc, A.stats, e);
}

/* dz = loss_scale (exp(z - lse) - onehot(target)), in place over the bf16 logits; one block per
 * token (no 64-bit division per element over T x vocabulary elements). */
__global__ void k_head_dz(bf16 *z, int64_t nv, const float *lse, const int32_t *targets,
                          int64_t vocab0, float ls)
{
    const int64_t t = blockIdx.x;
    bf16 *zr = z + t * nv;
    const float l = lse[t];
    const int64_t tj = (int64_t)targets[t] - vocab0;
    for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
        float p = expf(ldf(zr + j) - l);
        if (j == tj) p -= 1.f;
        stf(zr + j, ls * p);
    }
}

extern "C" int exec_cuda_head_bi(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->dx, "the input gradient dx");
    NEED(c->param, "the parameter block");
    NEED(c->act, "the act buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    TRY(region_params_get(c, EXEC_HEAD, &rp, e));
    head_w w;
    TRY(head_weights(c, &rp, &w, e));
    head_act A;
    head_layout(cfg, sh, c->act, &A);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, nv = sh->nvocab;
    k_head_dz<<<(unsigned)T, 256, 0, x->stream>>>(A.logits, nv, A.lse, A.targets, sh->vocab0,
                                                  (float)cfg->loss_scale);
    LAUNCH_OK("k_head_dz");
    TRY(gemm(x, false, false, T, h, nv, 1, A.logits, nv, w.lm, h, 0, A.dxn, NULL, h, e));
    return norm_bi(x, cfg->gpt, A.dxn, NULL, A.x, w.ng, A.mean, A.rstd, (bf16 *)c->dx, NULL, T, h,
                   e);
}

extern "C" int exec_cuda_head_bw(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->grad, "the gradient block");
    NEED(c->act, "the act buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    TRY(region_params_get(c, EXEC_HEAD, &rp, e));
    float *gng = gf(&rp, c->grad, cfg->gpt ? "ln.g" : "norm.g"), *gnb = gf(&rp, c->grad, "ln.b");
    float *glm = cfg->tied ? (float *)c->lm_grad : gf(&rp, c->grad, "lm");
    if (!glm)
        return base_errorf(e, "head: the LM-head weight gradient is missing (tied embeddings: "
                              "pass the token table's gradient slice as lm_grad)");
    head_act A;
    head_layout(cfg, sh, c->act, &A);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, nv = sh->nvocab;
    TRY(gemm(x, true, false, nv, h, T, 1, A.logits, nv, A.xn, h, 1, glm, NULL, h, e));
    return norm_bw(x, cfg->gpt, A.dxn, NULL, A.x, A.mean, A.rstd, gng, gnb, T, h, e);
}
