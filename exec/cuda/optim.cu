/* optim.cu — the optimizer step (UPD) of a region on the GPU, the local part of the global
 * gradient norm (aux.grad_norm), the sum of the MoE load-balancing losses (aux.aux_loss), and the
 * clipping coefficient, as exec/cpu/optim.c.
 *
 * Mixed precision: the update runs on the fp32 master copy (with fp32 gradients and moments, the
 * arithmetic in double as on the CPU) and writes the bf16 parameters the kernels read. The
 * gradient scale (the clipping coefficient) can be a device scalar, so that norm -> coefficient
 * -> update never waits for the host. A UPD covers a contiguous range of the region's block (a
 * ZeRO shard); each element still knows its tensor, hence whether it decays (ndim >= 2). */
#include "common.cuh"

__global__ void k_adamw(bf16 *p, float *master, const float *g, float *m, float *v, int64_t n,
                        double lr, double b1, double b2, double eps, double wd, double c1,
                        double c2, double scale, const double *scale_dev)
{
    const double sc = scale_dev ? *scale_dev : scale;
    GRID_STRIDE(i, n)
    {
        const double gi = (double)g[i] * sc;
        const double mi = b1 * m[i] + (1.0 - b1) * gi;
        const double vi = b2 * v[i] + (1.0 - b2) * gi * gi;
        m[i] = (float)mi;
        v[i] = (float)vi;
        const double w = master[i];
        const double step = (mi / c1) / (sqrt(vi / c2) + eps) + wd * w;
        const float nw = (float)(w - lr * step);
        master[i] = nw;
        p[i] = __float2bfloat16(nw);
    }
}

__global__ void k_sgd(bf16 *p, float *master, const float *g, int64_t n, double lr, double wd,
                      double scale, const double *scale_dev)
{
    const double sc = scale_dev ? *scale_dev : scale;
    GRID_STRIDE(i, n)
    {
        const double w = master[i];
        const float nw = (float)(w - lr * ((double)g[i] * sc + wd * w));
        master[i] = nw;
        p[i] = __float2bfloat16(nw);
    }
}

static int region_upd(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->opt, "the optimizer settings");
    region_params rp;
    TRY(region_params_get(c, c->kind, &rp, e));
    if (rp.n == 0) return 0;
    NEED(c->param, "the parameter block");
    NEED(c->grad, "the gradient block");
    NEED(cc->master, "the fp32 master weights");
    const exec_optim *o = c->opt;
    if (o->kind == EXEC_ADAMW) {
        NEED(c->opt_m, "the first-moment state");
        NEED(c->opt_v, "the second-moment state");
    } else if (o->kind != EXEC_SGD) {
        return base_errorf(e, "unknown optimizer %d; use AdamW or SGD", (int)o->kind);
    }
    const exec_param *last = &rp.p[rp.n - 1];
    const int64_t total = last->offset + last->count;
    const int64_t lo = c->upd_off, hi = c->upd_n > 0 ? c->upd_off + c->upd_n : total;
    if (lo < 0 || hi > total || lo > hi)
        return base_errorf(e, "UPD range [%lld, %lld) is outside the region's %lld parameters",
                           (long long)lo, (long long)hi, (long long)total);
    bf16 *p = (bf16 *)c->param;
    float *ms = cc->master, *m = (float *)c->opt_m, *v = (float *)c->opt_v;
    const float *g = (const float *)c->grad;
    const double t = (double)(o->t > 0 ? o->t : 1);
    const double c1 = 1.0 - pow(o->beta1, t), c2 = 1.0 - pow(o->beta2, t);
    for (int i = 0; i < rp.n; i++) {
        int64_t a = rp.p[i].offset, b = a + rp.p[i].count;
        if (a < lo) a = lo;
        if (b > hi) b = hi;
        if (a >= b) continue;
        const double wd = rp.p[i].ndim >= 2 ? o->weight_decay : 0.0;
        const int64_t k = a - lo; /* the call's buffers start at element lo */
        const int64_t n = b - a;
        if (o->kind == EXEC_ADAMW) {
            k_adamw<<<grid_for(n, 256), 256, 0, x->stream>>>(p + k, ms + k, g + k, m + k, v + k, n,
                                                             o->lr, o->beta1, o->beta2, o->eps, wd,
                                                             c1, c2, o->grad_scale, cc->grad_scale);
            LAUNCH_OK("k_adamw");
        } else {
            k_sgd<<<grid_for(n, 256), 256, 0, x->stream>>>(p + k, ms + k, g + k, n, o->lr, wd,
                                                           o->grad_scale, cc->grad_scale);
            LAUNCH_OK("k_sgd");
        }
    }
    return 0;
}

extern "C" int exec_cuda_region_upd(const exec_cuda_call *cc, base_error *e)
{
    return region_upd(cc, e);
}

extern "C" int exec_cuda_aux_grad_norm(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    exec_cuda_ctx *x = cc->ctx;
    NEED(c->out, "the output scalar");
    if (c->nin > 0) NEED(c->grads_in, "the gradient list");
    bool first = true;
    for (int r = 0; r < c->nin; r++) {
        region_params rp;
        TRY(region_params_get(c, c->grads_in[r].kind, &rp, e));
        const float *g = (const float *)c->grads_in[r].grad;
        if (rp.n > 0) NEED(g, "a region's gradient block");
        for (int i = 0; i < rp.n; i++) {
            /* a replicated tensor's gradient is the same on every TP shard once summed: count it
             * once */
            if (rp.p[i].replicated && !c->shard->first) continue;
            TRY(sumsq(x, g + rp.p[i].offset, rp.p[i].count, c->out, !first, e));
            first = false;
        }
    }
    if (first) TRY(sumsq(x, NULL, 0, c->out, false, e)); /* nothing: 0 */
    return 0;
}

__global__ void k_sum_scalars(const double *in, int n, double *out)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += in[i];
    *out = s;
}

extern "C" int exec_cuda_aux_aux_loss(const exec_cuda_call *cc, base_error *e)
{
    const exec_call *c = &cc->c;
    NEED(c->out, "the output scalar");
    if (c->nin > 0) NEED(c->scalars_in, "the aux losses");
    k_sum_scalars<<<1, 1, 0, cc->ctx->stream>>>(c->scalars_in, c->nin, c->out);
    LAUNCH_OK("k_sum_scalars");
    return 0;
}

__global__ void k_clip_coef(const double *sumsq, double max_norm, double *coef)
{
    const double norm = sqrt(*sumsq);
    *coef = (max_norm <= 0 || !(norm > max_norm)) ? 1.0 : max_norm / (norm + 1e-6);
}

extern "C" int exec_cuda_clip_coef(exec_cuda_ctx *x, const double *sumsq, double max_norm,
                                   double *coef, base_error *e)
{
    k_clip_coef<<<1, 1, 0, x->stream>>>(sumsq, max_norm, coef);
    LAUNCH_OK("k_clip_coef");
    return 0;
}

extern "C" int exec_cuda_sumsq_f32(exec_cuda_ctx *x, const float *g, int64_t n, double *out,
                                   bool accumulate, base_error *e)
{
    NEED(out, "the output scalar");
    if (n > 0) NEED(g, "the gradients");
    return sumsq(x, n > 0 ? g : NULL, n > 0 ? n : 0, out, accumulate, e);
}
