/* optim.c — the optimizer step (UPD) of a region, the local part of the global gradient norm
 * (aux.grad_norm) and the sum of the MoE load-balancing losses (aux.aux_loss).
 *
 * AdamW (Loshchilov & Hutter, decoupled weight decay), step t >= 1, gradient g already scaled by
 * the clipping coefficient:
 *   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2,
 *   p -= lr * ( m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * p )
 * SGD: p -= lr * (g + wd * p). Weight decay applies to matrices and embeddings (ndim >= 2), not
 * to norm scales and biases, as GPT-2/nanoGPT-style training does.
 * A UPD may cover a contiguous range of the region's parameter block (a ZeRO shard): each
 * element still knows its tensor, hence whether it decays. */
#include "real.h"

void FN(exec_adamw)(real *p, const real *g, real *m, real *v, int64_t n, const exec_optim *o,
                    bool decay)
{
    const double b1 = o->beta1, b2 = o->beta2, t = (double)(o->t > 0 ? o->t : 1);
    const double c1 = 1.0 - pow(b1, t), c2 = 1.0 - pow(b2, t);
    const double wd = decay ? o->weight_decay : 0.0;
    for (int64_t i = 0; i < n; i++) {
        double gi = (double)g[i] * o->grad_scale;
        double mi = b1 * m[i] + (1.0 - b1) * gi;
        double vi = b2 * v[i] + (1.0 - b2) * gi * gi;
        m[i] = (real)mi;
        v[i] = (real)vi;
        double step = (mi / c1) / (sqrt(vi / c2) + o->eps) + wd * (double)p[i];
        p[i] = (real)((double)p[i] - o->lr * step);
    }
}

void FN(exec_sgd)(real *p, const real *g, int64_t n, const exec_optim *o, bool decay)
{
    const double wd = decay ? o->weight_decay : 0.0;
    for (int64_t i = 0; i < n; i++)
        p[i] = (real)((double)p[i] - o->lr * ((double)g[i] * o->grad_scale + wd * (double)p[i]));
}

double FN(exec_sumsq)(const real *x, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

int FN(exec_region_upd)(const exec_call *c, base_error *e)
{
    NEED(c->opt, "the optimizer settings");
    region_params rp;
    if (region_params_get(c, c->kind, &rp, e)) return -1;
    if (rp.n == 0) return 0;
    NEED(c->param, "the parameter block");
    NEED(c->grad, "the gradient block");
    const exec_optim *o = c->opt;
    if (o->kind == EXEC_ADAMW) {
        NEED(c->opt_m, "the first-moment state");
        NEED(c->opt_v, "the second-moment state");
    } else if (o->kind != EXEC_SGD) {
        return base_errorf(e, "unknown optimizer %d; use AdamW or SGD", (int)o->kind);
    }
    const exec_param *last = &rp.p[rp.n - 1];
    int64_t total = last->offset + last->count;
    int64_t lo = c->upd_off, hi = c->upd_n > 0 ? c->upd_off + c->upd_n : total;
    if (lo < 0 || hi > total || lo > hi)
        return base_errorf(e, "UPD range [%lld, %lld) is outside the region's %lld parameters",
                           (long long)lo, (long long)hi, (long long)total);
    real *p = c->param, *m = c->opt_m, *v = c->opt_v;
    const real *g = c->grad;
    for (int i = 0; i < rp.n; i++) {
        int64_t a = rp.p[i].offset, b = a + rp.p[i].count;
        if (a < lo) a = lo;
        if (b > hi) b = hi;
        if (a >= b) continue;
        bool decay = rp.p[i].ndim >= 2;
        int64_t k = a - lo; /* the call's buffers start at element lo */
        if (o->kind == EXEC_ADAMW)
            FN(exec_adamw)(p + k, g + k, m + k, v + k, b - a, o, decay);
        else
            FN(exec_sgd)(p + k, g + k, b - a, o, decay);
    }
    return 0;
}

int FN(exec_aux_grad_norm)(const exec_call *c, base_error *e)
{
    NEED(c->out, "the output scalar");
    if (c->nin > 0) NEED(c->grads_in, "the gradient list");
    double s = 0;
    for (int r = 0; r < c->nin; r++) {
        region_params rp;
        if (region_params_get(c, c->grads_in[r].kind, &rp, e)) return -1;
        const real *g = c->grads_in[r].grad;
        if (rp.n > 0) NEED(g, "a region's gradient block");
        for (int i = 0; i < rp.n; i++) {
            /* a replicated tensor's gradient is the same on every TP shard once summed: count it
             * once */
            if (rp.p[i].replicated && !c->shard->first) continue;
            s += FN(exec_sumsq)(g + rp.p[i].offset, rp.p[i].count);
        }
    }
    *c->out = s;
    return 0;
}

int FN(exec_aux_aux_loss)(const exec_call *c, base_error *e)
{
    NEED(c->out, "the output scalar");
    if (c->nin > 0) NEED(c->scalars_in, "the aux losses");
    double s = 0;
    for (int i = 0; i < c->nin; i++) s += c->scalars_in[i];
    *c->out = s;
    return 0;
}
