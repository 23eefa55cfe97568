/* norms.c — LayerNorm (GPT) and RMSNorm (Llama, and Qwen3's per-head QK-norm), forward, input
 * gradient and weight gradient; the family-neutral pre-norm every region uses; and the
 * nothing-to-do kernel.
 *
 * Backward formulas, per row of n with xhat the normalised input and dxhat = dy * g:
 *   LayerNorm: dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
 *   RMSNorm:   dx = rstd * (dxhat - xhat * mean(dxhat * xhat))
 *   dg = sum over rows of dy * xhat, db = sum over rows of dy.
 * Both input gradients are linear in dy, which is why a tensor-parallel shard may push its
 * partial gradient through the norm and let the TP all-reduce sum afterwards. Row statistics are
 * accumulated in double so that fp32 norms of wide rows stay accurate. */
#include "real.h"

/* Row statistics of LayerNorm; F and the backward's recomputation share this arithmetic. */
/* Row statistics of LayerNorm in double (F normalises with these; mean and rstd get their
 * rounding to `real`); F and the backward's recomputation share this arithmetic. */
static void layernorm_row(const real *xr, int64_t n, double eps, double *mu, double *rs)
{
    double s = 0, ss = 0;
    for (int64_t j = 0; j < n; j++) s += xr[j];
    *mu = s / (double)n;
    for (int64_t j = 0; j < n; j++) ss += ((double)xr[j] - *mu) * ((double)xr[j] - *mu);
    *rs = 1.0 / sqrt(ss / (double)n + eps);
}

static void layernorm_stats(const real *x, real *mean, real *rstd, int64_t rows, int64_t n,
                            double eps)
{
    for (int64_t r = 0; r < rows; r++) {
        double mu, rs;
        layernorm_row(x + r * n, n, eps, &mu, &rs);
        mean[r] = (real)mu;
        rstd[r] = (real)rs;
    }
}

void FN(exec_layernorm_f)(const real *x, const real *g, const real *b, real *y, real *mean,
                          real *rstd, int64_t rows, int64_t n, double eps)
{
    for (int64_t r = 0; r < rows; r++) {
        const real *xr = x + r * n;
        double mu, rs;
        layernorm_row(xr, n, eps, &mu, &rs);
        mean[r] = (real)mu;
        rstd[r] = (real)rs;
        for (int64_t j = 0; j < n; j++)
            y[r * n + j] = (real)(((double)xr[j] - mu) * rs) * g[j] + (b ? b[j] : 0);
    }
}

void FN(exec_layernorm_bi)(const real *dy, const real *x, const real *g, const real *mean,
                           const real *rstd, real *dx, int64_t rows, int64_t n, bool accumulate)
{
    for (int64_t r = 0; r < rows; r++) {
        const real *xr = x + r * n, *dr = dy + r * n;
        double mu = mean[r], rs = rstd[r], m1 = 0, m2 = 0;
        for (int64_t j = 0; j < n; j++) {
            double dxh = (double)dr[j] * g[j];
            m1 += dxh;
            m2 += dxh * (xr[j] - mu) * rs;
        }
        m1 /= (double)n;
        m2 /= (double)n;
        for (int64_t j = 0; j < n; j++) {
            double xh = (xr[j] - mu) * rs;
            real v = (real)(rs * ((double)dr[j] * g[j] - m1 - xh * m2));
            dx[r * n + j] = accumulate ? dx[r * n + j] + v : v;
        }
    }
}

void FN(exec_layernorm_bw)(const real *dy, const real *x, const real *mean, const real *rstd,
                           real *dg, real *db, int64_t rows, int64_t n)
{
    for (int64_t r = 0; r < rows; r++) {
        const real *xr = x + r * n, *dr = dy + r * n;
        for (int64_t j = 0; j < n; j++) {
            dg[j] += dr[j] * (real)(((double)xr[j] - mean[r]) * rstd[r]);
            if (db) db[j] += dr[j];
        }
    }
}

static double rmsnorm_row(const real *xr, int64_t n, double eps)
{
    double ss = 0;
    for (int64_t j = 0; j < n; j++) ss += (double)xr[j] * xr[j];
    return 1.0 / sqrt(ss / (double)n + eps);
}

void FN(exec_rmsnorm_stats)(const real *x, real *rstd, int64_t rows, int64_t n, double eps)
{
    for (int64_t r = 0; r < rows; r++) rstd[r] = (real)rmsnorm_row(x + r * n, n, eps);
}

void FN(exec_rmsnorm_f)(const real *x, const real *g, real *y, real *rstd, int64_t rows,
                        int64_t n, double eps)
{
    for (int64_t r = 0; r < rows; r++) {
        const real *xr = x + r * n;
        double rs = rmsnorm_row(xr, n, eps);
        rstd[r] = (real)rs;
        for (int64_t j = 0; j < n; j++) y[r * n + j] = (real)(xr[j] * rs) * g[j];
    }
}

void FN(exec_rmsnorm_bi)(const real *dy, const real *x, const real *g, const real *rstd, real *dx,
                         int64_t rows, int64_t n, bool accumulate)
{
    for (int64_t r = 0; r < rows; r++) {
        const real *xr = x + r * n, *dr = dy + r * n;
        double rs = rstd[r], m2 = 0;
        for (int64_t j = 0; j < n; j++) m2 += (double)dr[j] * g[j] * xr[j] * rs;
        m2 /= (double)n;
        for (int64_t j = 0; j < n; j++) {
            real v = (real)(rs * ((double)dr[j] * g[j] - xr[j] * rs * m2));
            dx[r * n + j] = accumulate ? dx[r * n + j] + v : v;
        }
    }
}

void FN(exec_rmsnorm_bw)(const real *dy, const real *x, const real *rstd, real *dg, int64_t rows,
                         int64_t n)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) dg[j] += dy[r * n + j] * (x[r * n + j] * rstd[r]);
}

/* ---------------------------------------------------------------- the family's pre-norm */

void FN(exec_norm_f)(const exec_cfg *c, const real *x, const real *g, const real *b, real *y,
                     real *mean, real *rstd, int64_t rows)
{
    if (c->gpt)
        FN(exec_layernorm_f)(x, g, b, y, mean, rstd, rows, c->h, c->norm_eps);
    else
        FN(exec_rmsnorm_f)(x, g, y, rstd, rows, c->h, c->norm_eps);
}

void FN(exec_norm_stats)(const exec_cfg *c, const real *x, real *mean, real *rstd, int64_t rows)
{
    if (c->gpt)
        layernorm_stats(x, mean, rstd, rows, c->h, c->norm_eps);
    else
        FN(exec_rmsnorm_stats)(x, rstd, rows, c->h, c->norm_eps);
}

void FN(exec_norm_bi)(const exec_cfg *c, const real *dy, const real *x, const real *g,
                      const real *mean, const real *rstd, real *dx, int64_t rows, bool accumulate)
{
    if (c->gpt)
        FN(exec_layernorm_bi)(dy, x, g, mean, rstd, dx, rows, c->h, accumulate);
    else
        FN(exec_rmsnorm_bi)(dy, x, g, rstd, dx, rows, c->h, accumulate);
}

void FN(exec_norm_bw)(const exec_cfg *c, const real *dy, const real *x, const real *mean,
                      const real *rstd, real *dg, real *db, int64_t rows)
{
    if (c->gpt)
        FN(exec_layernorm_bw)(dy, x, mean, rstd, dg, db, rows, c->h);
    else
        FN(exec_rmsnorm_bw)(dy, x, rstd, dg, rows, c->h);
}

/* ---------------------------------------------------------------- nothing to do */

/* The embedding's BI (it has no input gradient) and the combine's BW (it has no parameters). */
int FN(exec_noop)(const exec_call *c, base_error *e)
{
    (void)c;
    (void)e;
    return 0;
}

void FN(exec_norm_bi_rows)(const exec_cfg *c, const exec_shard *s, const void *xg, const real *x,
                           const real *dy, const real *g, real *mean, real *rstd, real *dx)
{
    const int64_t tl = sp_rows(c, s), h = c->h;
    for (int64_t k = 0; k < sp_blocks(s); k++) {
        const int64_t r0 = k * tl;
        const real *xk = sp_norm_rows(s, xg, x, k, 0, tl, h);
        FN(exec_norm_stats)(c, xk, mean + r0, rstd + r0, tl);
        FN(exec_norm_bi)(c, dy + r0 * h, xk, g, mean + r0, rstd + r0, dx + r0 * h, tl, false);
    }
}

void FN(exec_norm_bw_rows)(const exec_cfg *c, const exec_shard *s, const void *xg, const real *x,
                           const real *dy, const real *mean, const real *rstd, real *dg, real *db)
{
    const int64_t tl = sp_rows(c, s), h = c->h;
    for (int64_t k = 0; k < sp_blocks(s); k++) {
        const int64_t r0 = k * tl;
        FN(exec_norm_bw)(c, dy + r0 * h, sp_norm_rows(s, xg, x, k, 0, tl, h), mean + r0, rstd + r0,
                         dg, db, tl);
    }
}
