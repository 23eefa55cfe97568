/* harness.h — what the exec_cpu suites share: one region instance with all its buffers (as an
 * executor would allocate them from exec_region_sizes_get), running a kernel identity on it,
 * random fills from piper's own counter-based generator, central finite differences, and a
 * small whole-model driver (regions chained in order, the MoE route shared by gate and combine).
 * Everything static: each suite is one translation unit. */
#ifndef PIPER_TESTS_EXEC_CPU_HARNESS_H
#define PIPER_TESTS_EXEC_CPU_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cpu/kernels.h"
#include "tests/testutil.h"

/* ---------------------------------------------------------------- shapes */

/* The small shapes of the finite-difference checks: b=2, s=5, h=8, 2 heads of 4 (one kv head
 * for Llama: GQA), vocab 11, ffn 16, 4 experts of 8, top-2. Capacity 5 = ceil(1.0 * 10*2/4):
 * with 10 tokens some expert overflows, so dropping is exercised. */
static inline exec_cfg small_cfg(bool gpt)
{
    exec_cfg c;
    memset(&c, 0, sizeof c);
    c.gpt = gpt;
    c.layers = 2;
    c.b = 2;
    c.s = 5;
    c.h = 8;
    c.heads = 2;
    c.kv_heads = gpt ? 2 : 1;
    c.head_dim = 4;
    c.ffn = 16;
    c.vocab = 11;
    if (!gpt) {
        c.experts = 4;
        c.expert_ffn = 8;
        c.top_k = 2;
        c.capacity = 5;
        c.qk_norm = true;
        c.aux_coef = 0.01;
    }
    c.tied = gpt;
    c.learned_pos = gpt;
    c.dropout = gpt ? 0.1 : 0.0;
    c.norm_eps = 1e-5;
    c.rope_theta = 10000.0;
    c.init_std = 0.3;
    c.aux_weight = 1.0;
    c.loss_scale = 1.0 / (double)(c.b * c.s);
    c.seed = 1234;
    return c;
}

static inline size_t dt_size(plan_dtype dt) { return dt == PLAN_FP32 ? 4 : 8; }

static inline void *xcalloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1);
    if (!p) abort();
    return p;
}

/* Uniform values in [lo, hi) from stream `key`, in dtype dt. */
static inline void fill_uniform(void *v, int64_t n, plan_dtype dt, uint64_t key, double lo,
                                double hi)
{
    for (int64_t i = 0; i < n; i++) {
        double u = lo + (hi - lo) * exec_rng_uniform(key, (uint64_t)i);
        if (dt == PLAN_FP32)
            ((float *)v)[i] = (float)u;
        else
            ((double *)v)[i] = u;
    }
}

static inline double get_el(const void *v, plan_dtype dt, int64_t i)
{
    return dt == PLAN_FP32 ? (double)((const float *)v)[i] : ((const double *)v)[i];
}

/* ---------------------------------------------------------------- one region */

typedef struct rinst {
    const exec_cfg *cfg;
    exec_shard sh;
    exec_region_kind kind;
    int layer;
    plan_dtype dt;
    exec_region_sizes sz;
    exec_param p[EXEC_MAX_REGION_PARAMS];
    int np;
    void *param, *grad, *act, *work;
    void *x, *y, *dy, *dx;
    const void *xg;           /* sequence parallelism: the gathered kept norm shards */
    void *route, *droute;     /* gate: its y2 / dy2; combine: the gate's (shared) */
    bool shared_route;
    int32_t *tokens, *targets;
    const void *lm_w;
    void *lm_grad;
    bool keep_routing;
    int64_t sample0, step;
    exec_reduce_fn reduce;
    void *reduce_ctx;
    double out;
} rinst;

static inline void rinst_init(rinst *r, const exec_cfg *cfg, const exec_shard *sh,
                              exec_region_kind kind, int layer, plan_dtype dt)
{
    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    r->sh = *sh;
    r->kind = kind;
    r->layer = layer;
    r->dt = dt;
    base_error e;
    base_error_clear(&e);
    if (exec_region_sizes_get(cfg, sh, kind, dt, &r->sz, &e) ||
        (r->np = exec_region_params(cfg, sh, kind, r->p, &e)) < 0) {
        fprintf(stderr, "\n  rinst_init: %s\n", e.msg);
        abort();
    }
    size_t es = dt_size(dt);
    r->param = xcalloc((size_t)r->sz.params * es);
    r->grad = xcalloc((size_t)r->sz.params * es);
    r->act = xcalloc((size_t)r->sz.act_bytes);
    r->work = xcalloc((size_t)r->sz.work_bytes);
    r->x = xcalloc((size_t)r->sz.x * (kind == EXEC_EMBED ? 4 : es));
    r->dx = xcalloc((size_t)r->sz.x * es);
    r->y = xcalloc((size_t)r->sz.y * es);
    r->dy = xcalloc((size_t)r->sz.y * es);
    if (kind == EXEC_EMBED) r->tokens = r->x;
    if (kind == EXEC_HEAD) r->targets = xcalloc((size_t)(cfg->b * cfg->s) * 4);
    if (r->sz.route_bytes && kind == EXEC_MOE_GATE) {
        r->route = xcalloc((size_t)r->sz.route_bytes);
        r->droute = xcalloc((size_t)r->sz.route_bytes);
    }
}

static inline void rinst_free(rinst *r)
{
    free(r->param);
    free(r->grad);
    free(r->act);
    free(r->work);
    free(r->x);
    free(r->dx);
    free(r->y);
    free(r->dy);
    free(r->targets);
    if (!r->shared_route) {
        free(r->route);
        free(r->droute);
    }
}

/* Fills the parameters: the model's deterministic initialisation of each tensor's block
 * (name "L<layer>.<kind>.<tensor>"), then, with jitter > 0, norm scales and biases moved off
 * their 1 and 0 so that every term of the backward is exercised. */
static inline void rinst_init_params(rinst *r, double jitter)
{
    size_t es = dt_size(r->dt);
    for (int i = 0; i < r->np; i++) {
        char name[96];
        snprintf(name, sizeof name, "L%d.%s.%s", r->layer, exec_region_kind_name(r->kind),
                 r->p[i].name);
        base_error e;
        base_error_clear(&e);
        char *dst = (char *)r->param + (size_t)r->p[i].offset * es;
        if (exec_param_init(r->cfg->seed, name, &r->p[i], r->dt, dst, &e)) abort();
        if (jitter > 0 && r->p[i].init != EXEC_INIT_NORMAL) {
            uint64_t key = exec_rng_key(r->cfg->seed + 77, name);
            for (int64_t j = 0; j < r->p[i].count; j++) {
                double v = get_el(dst, r->dt, j) + jitter * (2 * exec_rng_uniform(key, (uint64_t)j) - 1);
                if (r->dt == PLAN_FP32)
                    ((float *)dst)[j] = (float)v;
                else
                    ((double *)dst)[j] = v;
            }
        }
    }
}

/* A tensor of the instance's parameter block, by name (fp64 instances). */
static inline double *rinst_param(rinst *r, const char *name)
{
    for (int i = 0; i < r->np; i++)
        if (strcmp(r->p[i].name, name) == 0) return (double *)r->param + r->p[i].offset;
    return NULL;
}

static inline exec_call rinst_call(rinst *r)
{
    exec_call c;
    memset(&c, 0, sizeof c);
    c.cfg = r->cfg;
    c.shard = &r->sh;
    c.kind = r->kind;
    c.dtype = r->dt;
    c.layer = r->layer;
    c.step = r->step;
    c.sample0 = r->sample0;
    c.param = r->param;
    c.grad = r->grad;
    c.act = r->act;
    c.work = r->work;
    c.x = r->x;
    c.xg = r->xg;
    c.y = r->y;
    c.dy = r->dy;
    c.dx = r->dx;
    c.tokens = r->tokens;
    c.targets = r->targets;
    c.lm_w = r->lm_w;
    c.lm_grad = r->lm_grad;
    c.keep_routing = r->keep_routing;
    c.reduce = r->reduce;
    c.reduce_ctx = r->reduce_ctx;
    c.out = &r->out;
    if (r->kind == EXEC_MOE_GATE) {
        c.y2 = r->route;
        c.dy2 = r->droute;
    }
    if (r->kind == EXEC_MOE_COMBINE) {
        c.x2 = r->route;
        c.dx2 = r->droute;
    }
    return c;
}

/* Runs "<family>.<kind>.<pass>" on the instance through the identity table. */
static inline int rinst_run(rinst *r, const char *pass)
{
    char id[64];
    snprintf(id, sizeof id, "%s.%s.%s", r->cfg->gpt ? "gpt" : "llama",
             exec_region_kind_name(r->kind), pass);
    exec_call c = rinst_call(r);
    base_error e;
    base_error_clear(&e);
    int rc = exec_kernel_run_id(id, &c, &e);
    if (rc) fprintf(stderr, "\n  %s failed: %s\n", id, e.msg);
    return rc;
}

/* ---------------------------------------------------------------- error measures */

/* The worst relative error seen by each suite, for the report. */
static double fd_worst = 0;
static char fd_worst_what[128] = "";

/* ||a - b|| / ||b|| over n elements (0 when both vanish). */
static inline double rel_err(const double *a, const double *b, int64_t n)
{
    double num = 0, den = 0, da = 0;
    for (int64_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
        da += a[i] * a[i];
    }
    if (den == 0 && da == 0) return 0;
    return sqrt(num) / sqrt(den > da ? den : da);
}

static inline void fd_record(const char *what, double err)
{
    if (err > fd_worst) {
        fd_worst = err;
        snprintf(fd_worst_what, sizeof fd_worst_what, "%s", what);
    }
}

/* ---------------------------------------------------------------- finite differences */

typedef double (*objective_fn)(void *ctx);

/* Central differences of f over the n doubles at v, against the analytic gradient ga. The step
 * is relative to each value's size, floored at 1e-5. Returns ||ga - num|| / ||num||. */
static inline double fd_check(const char *what, double *v, int64_t n, const double *ga,
                              objective_fn f, void *ctx, double tol)
{
    double *num = xcalloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        double v0 = v[i], h = 1e-5 * (fabs(v0) > 1 ? fabs(v0) : 1);
        v[i] = v0 + h;
        double fp = f(ctx);
        v[i] = v0 - h;
        double fm = f(ctx);
        v[i] = v0;
        num[i] = (fp - fm) / (2 * h);
    }
    double err = rel_err(ga, num, n);
    double nn = 0;
    for (int64_t i = 0; i < n; i++) nn += num[i] * num[i];
    fd_record(what, err);
    if (!(err <= tol) || nn == 0)
        fprintf(stderr, "\n  %s: relative error %.3g (|numeric| %.3g) over %lld elements\n", what,
                err, sqrt(nn), (long long)n);
    CU_ASSERT(err <= tol);
    CU_ASSERT(nn > 0); /* a gradient that is identically zero checks nothing */
    free(num);
    return err;
}

#endif
