/* embed_head.cu — the two ends of the model on the GPU, as exec/cpu/embed_head.c.
 *
 * embed: y[t] = E[token t] (zeros for tokens outside the shard's vocabulary rows) + P[position]
 * (GPT, first shard), then dropout; the weight gradient scatters dy (through the mask) into the
 * token rows with fp32 atomics (tokens repeat). A token outside the vocabulary raises the
 * context's error flag (reported at the next sync) instead of failing at once: the tokens are
 * device memory.
 *
 * head: final norm, fp32 logits of the shard's vocabulary slice (one cuBLAS GEMM of bf16
 * operands with an fp32 output), then the vocabulary-parallel cross-entropy in fp32: per token the
 * slice's max (reduced MAX over the TP group), sum of exp(z - max) and target logit (reduced
 * SUM), then lse = max + log(sum) and loss = lse - target logit. F then turns the logits into the
 * probabilities exp(z - lse) in place and keeps them, in fp32 as Megatron's cross-entropy and the
 * cost model do (a bf16 probability near 1 would leave the target's gradient p - 1 with 2^-9 of
 * absolute error). BI turns them into dz = loss_scale (p - onehot), rounded to bf16 into the first
 * half of each fp32 row (so the GEMMs read dz with a leading dimension of 2 nvocab), and BW
 * accumulates dz^T xn. */
#include "common.cuh"

/* ---------------------------------------------------------------- embed */

/* act: plan_tensors.h's embedding rows: the token ids (the dropout mask is regenerated). */
typedef struct embed_act {
    int32_t *tokens;
} embed_act;

static size_t embed_layout(const exec_cfg *c, const exec_shard *sh, void *b, embed_act *A)
{
    plan_tensor_layout L;
    act_walk(c, sh, EXEC_EMBED, EXEC_ACT_ALL, &L);
    void *const base[2] = {b, NULL};
    A->tokens = AT(L, base, EMBED_TOKENS);
    return (size_t)L.bytes[0];
}

int64_t embed_act_bytes(const exec_cfg *c, const exec_shard *s)
{
    embed_act A;
    return (int64_t)embed_layout(c, s, NULL, &A);
}

/* The embedding and the head are not layer regions: no recompute rebuilds them (ir/cost.c), so
 * F keeps everything under any mode. */
int64_t embed_act_split(const exec_cfg *c, const exec_shard *s, int mode, int64_t *rebuilt)
{
    (void)mode;
    if (rebuilt) *rebuilt = 0;
    return embed_act_bytes(c, s);
}

/* The embedding needs no workspace: its backward scatters dy straight into the table. */
int64_t embed_work_bytes(const exec_cfg *c, const exec_shard *s, bool pass_f)
{
    (void)c, (void)s, (void)pass_f;
    return 0;
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
    embed_layout(cfg, c->shard, c->act, &A);
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
    embed_layout(cfg, c->shard, c->act, &A);
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

/* act: what F keeps, plan_tensors.h's head rows: the norm input x and output xn (the LM
 * head's input) and the probabilities of the shard's vocabulary slice in fp32. */
typedef struct head_act {
    bf16 *x, *xn;
    float *probs;   /* [T][nvocab]: the logits, then (F's end) the probabilities, then (BI) dz */
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

/* work, in plan_tensors.h's order: the norm statistics and the softmax statistics of F
 * ([3T]: max, sum of exp, target logit), then the norm output's gradient BI leaves for BW (fp32,
 * as the other regions'). */
typedef struct head_work {
    float *mean, *rstd, *stats, *dxn;
} head_work;

static size_t head_work_layout(const exec_cfg *c, const exec_shard *sh, void *b, head_work *W,
                               bool pass_f)
{
    plan_tensor_layout L;
    work_walk(c, sh, EXEC_HEAD, pass_f, &L);
    void *const base[2] = {b, NULL};
    W->mean = AT(L, base, HEAD_MEAN);
    W->rstd = AT(L, base, HEAD_RSTD);
    W->stats = AT(L, base, HEAD_STATS);
    W->dxn = AT(L, base, HEAD_DXN);
    return (size_t)L.bytes[0];
}

int64_t head_act_bytes(const exec_cfg *c, const exec_shard *s)
{
    head_act A;
    return (int64_t)head_layout(c, s, NULL, &A);
}

int64_t head_act_split(const exec_cfg *c, const exec_shard *s, int mode, int64_t *rebuilt)
{
    (void)mode;
    if (rebuilt) *rebuilt = 0;
    return head_act_bytes(c, s);
}

int64_t head_work_bytes(const exec_cfg *c, const exec_shard *s, bool pass_f)
{
    head_work W;
    return (int64_t)head_work_layout(c, s, NULL, &W, pass_f);
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

__global__ void k_head_max(const float *z, int64_t nv, float *stats)
{
    __shared__ float sh[32];
    const int64_t t = blockIdx.x;
    const float *zr = z + t * nv;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) m = fmaxf(m, zr[j]);
    m = block_max(m, sh);
    if (threadIdx.x == 0) stats[t] = m;
}

/* A target outside the vocabulary raises the flag (reported at the next sync). */
__global__ void k_head_sums(const float *z, int64_t nv, int64_t T, const int32_t *targets,
                            int64_t vocab, int64_t vocab0, float *stats, int *flag)
{
    __shared__ float sh[32];
    const int64_t t = blockIdx.x;
    const float *zr = z + t * nv;
    const float m = stats[t];
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) s += expf(zr[j] - m);
    s = block_sum(s, sh);
    if (threadIdx.x == 0) {
        stats[T + t] = s;
        const int32_t id = targets[t];
        if (id < 0 || id >= vocab) atomicOr(flag, EXEC_CUDA_BAD_TARGET);
        int64_t j = (int64_t)id - vocab0;
        stats[2 * T + t] = j >= 0 && j < nv ? zr[j] : 0.f;
    }
}

/* The logits of a row become its probabilities exp(z - lse), in place. */
__global__ void k_head_probs(float *z, int64_t nv, int64_t T, const float *stats)
{
    const int64_t t = blockIdx.x;
    float *zr = z + t * nv;
    const float l = stats[t] + logf(stats[T + t]);
    for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) zr[j] = expf(zr[j] - l);
}

/* out = scale * sum over tokens of (lse - target logit), each token's loss in fp32 and the sum in
 * double, in a fixed order (one block: the same logits give the same loss bits). */
__global__ void k_head_loss(const float *stats, int64_t T, int64_t n, double scale, double *out)
{
    __shared__ double sh[32];
    double a = 0;
    for (int64_t t = threadIdx.x; t < n; t += blockDim.x) {
        const float loss = stats[t] + logf(stats[T + t]) - stats[2 * T + t];
        a += (double)loss;
    }
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
    NEED(c->work, "the work buffer");
    NEED(stats, "the statistics buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    TRY(region_params_get(c, EXEC_HEAD, &rp, e));
    head_w w;
    TRY(head_weights(c, &rp, &w, e));
    head_act A;
    head_layout(cfg, sh, c->act, &A);
    head_work W;
    head_work_layout(cfg, c->shard, c->work, &W, true);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, nv = sh->nvocab;
    if (T > 2147483647) return base_errorf(e, "head: %lld tokens exceed the grid", (long long)T);
    /* the norm and the logits block by block of tokens (one block without sequence
     * parallelism), the device's own block last, so that A.x and A.xn keep exactly its rows */
    const bf16 *xin = (const bf16 *)c->x;
    const int64_t tl = exec_sp_rows(cfg, sh), nb = exec_sp_blocks(sh), own = exec_sp_own(sh);
    if (A.x != xin + own * tl * h)
        TRY(exec_cuda_d2d(x, A.x, xin + own * tl * h, (size_t)(tl * h) * 2, e));
    for (int64_t j = 1; j <= nb; j++) {
        const int64_t k = (own + j) % nb, r0 = k * tl;
        TRY(norm_f(x, cfg->gpt, xin + r0 * h, w.ng, w.nb, A.xn, W.mean + r0, W.rstd + r0, tl, h,
                   cfg->norm_eps, e));
        TRY(gemm(x, false, true, tl, nv, h, 1, A.xn, h, w.lm, h, 0, A.probs + r0 * nv, NULL, nv, e));
    }
    k_head_max<<<(unsigned)T, 256, 0, x->stream>>>(A.probs, nv, stats);
    LAUNCH_OK("k_head_max");
    return 0;
}

extern "C" int exec_cuda_head_f_sums(const exec_cuda_call *cc, float *stats, base_error *e)
{
    const exec_call *c = &cc->c;
    NEED(c->act, "the act buffer");
    NEED(c->targets, "the targets");
    NEED(stats, "the statistics buffer");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    head_act A;
    head_layout(cfg, sh, c->act, &A);
    const int64_t T = cfg->b * cfg->s;
    k_head_sums<<<(unsigned)T, 256, 0, cc->ctx->stream>>>(A.probs, sh->nvocab, T, c->targets,
                                                          cfg->vocab, sh->vocab0, stats,
                                                          cc->ctx->flag);
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
    if (c->out) {
        /* the loss is replicated over the TP group: the first shard reports it */
        k_head_loss<<<1, 256, 0, x->stream>>>(stats, T, sh->first ? T : 0, cfg->loss_scale, c->out);
        LAUNCH_OK("k_head_loss");
    }
    k_head_probs<<<(unsigned)T, 256, 0, x->stream>>>(A.probs, sh->nvocab, T, stats);
    LAUNCH_OK("k_head_probs");
    return 0;
}

extern "C" int exec_cuda_head_f(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    NEED(c->work, "the work buffer");
    if (sh->tp > 1 && !c->reduce)
        return base_errorf(e, "head F on a vocabulary shard (tp %d) needs the call's reduce "
                              "callback for the global softmax statistics, or the phased "
                              "exec_cuda_head_f_begin/sums/end",
                           sh->tp);
    head_work W;
    head_work_layout(cfg, c->shard, c->work, &W, true);
    const int64_t T = cfg->b * cfg->s;
    /* the reduce callback gets device memory (fp32) and orders itself after the stream's work */
    TRY(exec_cuda_head_f_begin(cc, W.stats, e));
    if (c->reduce && c->reduce(c->reduce_ctx, W.stats, T, PLAN_FP32, EXEC_REDUCE_MAX, e)) return -1;
    TRY(exec_cuda_head_f_sums(cc, W.stats, e));
    if (c->reduce && c->reduce(c->reduce_ctx, W.stats + T, 2 * T, PLAN_FP32, EXEC_REDUCE_SUM, e))
        return -1;
    return exec_cuda_head_f_end(cc, W.stats, e);
}

/* dz = loss_scale (p - onehot(target)), rounded to bf16 into the first half of each fp32 row of
 * probabilities; one block per row. The bf16 element j overwrites bytes of the fp32 elements
 * j/2 .. , which this block has read already: each chunk of the row is read whole into
 * registers before any of it is written (one chunk = one element per thread). */
__global__ void k_head_dz(float *p, int64_t nv, const int32_t *targets, int64_t vocab0, float ls)
{
    const int64_t t = blockIdx.x;
    float *pr = p + t * nv;
    bf16 *dz = reinterpret_cast<bf16 *>(pr);
    const int64_t tj = (int64_t)targets[t] - vocab0;
    for (int64_t j0 = 0; j0 < nv; j0 += blockDim.x) {
        const int64_t j = j0 + threadIdx.x;
        float v = 0.f;
        if (j < nv) v = ls * (pr[j] - (j == tj ? 1.f : 0.f));
        __syncthreads();
        if (j < nv) stf(dz + j, v);
        __syncthreads();
    }
}

extern "C" int exec_cuda_head_bi(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->dx, "the input gradient dx");
    NEED(c->param, "the parameter block");
    NEED(c->act, "the act buffer");
    NEED(c->work, "the work buffer");
    NEED(c->targets, "the targets");
    const exec_cfg *cfg = c->cfg;
    const exec_shard *sh = c->shard;
    region_params rp;
    TRY(region_params_get(c, EXEC_HEAD, &rp, e));
    head_w w;
    TRY(head_weights(c, &rp, &w, e));
    head_act A;
    head_layout(cfg, sh, c->act, &A);
    head_work W;
    head_work_layout(cfg, c->shard, c->work, &W, false);
    const int64_t T = cfg->b * cfg->s, h = cfg->h, nv = sh->nvocab;
    k_head_dz<<<(unsigned)T, 256, 0, x->stream>>>(A.probs, nv, c->targets, sh->vocab0,
                                                  (float)cfg->loss_scale);
    LAUNCH_OK("k_head_dz");
    const bf16 *dz = (const bf16 *)A.probs;
    TRY(gemm(x, false, false, T, h, nv, 1, dz, 2 * nv, w.lm, h, 0, W.dxn, NULL, h, e));
    /* the norm statistics F computed, again from the kept inputs (the same bits), then its
     * backward */
    return norm_bi_rows(x, cfg, sh, c->xg, A.x, W.dxn, w.ng, W.mean, W.rstd, (bf16 *)c->dx, NULL, e);
}

/* reads BI's dz and work buffer */
extern "C" int exec_cuda_head_bw(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->grad, "the gradient block");
    NEED(c->act, "the act buffer");
    NEED(c->work, "the work buffer");
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
    head_work W;
    head_work_layout(cfg, c->shard, c->work, &W, false);
    const int64_t h = cfg->h, nv = sh->nvocab;
    const bf16 *dz = (const bf16 *)A.probs;
    /* under sequence parallelism the norm outputs of every block come from the gathered pairs */
    const int64_t tl = exec_sp_rows(cfg, sh), nb = exec_sp_blocks(sh);
    if (sh->sp) NEED(c->xg, "the gathered norm inputs and outputs xg");
    for (int64_t k = 0; k < nb; k++) {
        const int64_t r0 = k * tl;
        TRY(gemm(x, true, false, nv, h, tl, 1, dz + r0 * 2 * nv, 2 * nv,
                 sp_norm_rows(sh, c->xg, A.xn, k, 1, tl, h), h, 1, glm, NULL, h, e));
    }
    return norm_bw_rows(x, cfg, sh, c->xg, A.x, W.dxn, W.mean, W.rstd, gng, gnb, e);
}
