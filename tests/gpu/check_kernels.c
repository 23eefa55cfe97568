/* check_kernels.c — the GPU checks of the CUDA kernels (tests/gpu/check.sh runs it when a GPU is
 * lent). It links the CPU kernels (piper_exec_cpu, fp32) and the CUDA kernels (piper_exec_cuda,
 * bf16) and needs no MPI, no YAML and no SimGrid, so that it runs on a bare GPU machine.
 *
 *   check_kernels --kernels [--out FILE]
 *       (a) every region and pass of both families through both identity tables on random
 *       inputs, several shapes (head dims 16 to 256, partial tiles, GQA, QK-norm, dropout, MoE
 *       with dropped tokens, tied embeddings) and shards (tensor-parallel rank 1 of 2: partial
 *       sums without the replicated terms; expert-parallel rank 1 of 2; the vocabulary-parallel
 *       head as a group of 2), plus GEMM layouts, initialisation, AdamW/SGD, the gradient norm
 *       and the clipping coefficient; per layer region and recompute mode (selective, full
 *       keeping the input, full keeping nothing), F keeping its part with a transient rebuilt
 *       part, R rebuilding it from what F kept, then BI and BW, all bit for bit as without
 *       recompute. Inputs and parameters are bf16 values on both sides, so the differences
 *       are the kernels' own. Tolerances (relative L2 error, stated per line): forward outputs
 *       2e-2, input and weight gradients 3e-2 (every intermediate is rounded to bf16 on the
 *       GPU), losses 5e-3, optimizer steps 1e-6 and the gradient norm 1e-9 (same fp32 inputs,
 *       double arithmetic on both), routing and dropout masks exactly.
 *   check_kernels --train [--out FILE]
 *       (b, kernel chain) 10 AdamW steps with clipping of a tiny GPT (dropout, tied embeddings)
 *       and a tiny MoE Llama, the regions chained by this program as a single-device executor
 *       would, on the CPU (fp32) and on the GPU (bf16): the loss trajectories must agree to 2e-2
 *       and go down. This is not the plan runtime (piper-exec on CUDA), which does not exist yet.
 *   check_kernels --bench PLAN PREDICTION [--out FILE]
 *       (c) times every kernel identity of the plan's model (one layer's buffers, the plan's
 *       micro-batch) and prints, per identity, the time, TFLOP/s and fraction of the GPU's peak
 *       next to piper-sim's prediction (PREDICTION, written by gpu_predict on the build
 *       machine), then the step assembled from the plan's instruction counts.
 *
 * Every result line is printed and appended to FILE as soon as it is known (flushed), so a run
 * cut short still leaves what it found. Exit status 1 when a check failed. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/cpu/kernels.h"
#include "exec/cuda/kernels.h"
#include "plan/plan.h"

/* ---------------------------------------------------------------- output */

static FILE *g_out;
static int g_pass, g_fail;
static exec_cuda_ctx *X;
static base_error E;

static void say(const char *fmt, ...) BASE_PRINTF(1, 2);
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
    if (g_out) {
        va_start(ap, fmt);
        vfprintf(g_out, fmt, ap);
        va_end(ap);
        fflush(g_out);
    }
}

static bool result(bool ok, const char *fmt, ...) BASE_PRINTF(2, 3);
static bool result(bool ok, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    say("  %s %s\n", ok ? "ok  " : "FAIL", buf);
    if (ok)
        g_pass++;
    else
        g_fail++;
    return ok;
}

/* A CUDA or kernel error: reported as a failure, and the check moves on. */
#define CK(call)                                                                               \
    do {                                                                                       \
        if ((call) != 0) {                                                                     \
            result(false, "%s: %s", #call, E.msg);                                            \
            base_error_clear(&E);                                                              \
            return -1;                                                                         \
        }                                                                                      \
    } while (0)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------- host helpers */

static void *xcalloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1);
    if (!p) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

static float bf(float f) { return exec_bf16_to_float(exec_bf16_from_float(f)); }

static void round_bf16(float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++) v[i] = bf(v[i]);
}

/* Uniform in [lo, hi), rounded to bf16 so that both backends see the same values. */
static void fill(float *v, int64_t n, uint64_t key, double lo, double hi)
{
    for (int64_t i = 0; i < n; i++)
        v[i] = bf((float)(lo + (hi - lo) * exec_rng_uniform(key, (uint64_t)i)));
}

static void *dalloc(size_t bytes)
{
    void *p = NULL;
    if (exec_cuda_malloc(&p, bytes, &E)) return NULL;
    if (exec_cuda_memset0(X, p, bytes, &E)) return NULL;
    return p;
}

static int up16(void *d, const float *h, int64_t n)
{
    uint16_t *s = xcalloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) s[i] = exec_bf16_from_float(h[i]);
    int rc = exec_cuda_h2d(X, d, s, (size_t)n * 2, &E);
    free(s);
    return rc;
}

static int down16(float *h, const void *d, int64_t n)
{
    uint16_t *s = xcalloc((size_t)n * 2);
    int rc = exec_cuda_d2h(X, s, d, (size_t)n * 2, &E);
    for (int64_t i = 0; i < n; i++) h[i] = exec_bf16_to_float(s[i]);
    free(s);
    return rc;
}

static int up32(void *d, const float *h, int64_t n) { return exec_cuda_h2d(X, d, h, (size_t)n * 4, &E); }
static int down32(float *h, const void *d, int64_t n)
{
    return exec_cuda_d2h(X, h, d, (size_t)n * 4, &E);
}

/* Relative L2 error of got against ref, with the largest absolute difference. */
static bool compare(const char *what, const float *got, const float *ref, int64_t n, double tol)
{
    if (n <= 0) return true;
    double num = 0, den = 0, mx = 0;
    bool finite = true;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)got[i] - (double)ref[i];
        if (!isfinite(got[i])) finite = false;
        num += d * d;
        den += (double)ref[i] * ref[i];
        if (fabs(d) > mx) mx = fabs(d);
    }
    double rel = num == 0 ? 0 : sqrt(num) / (den > 0 ? sqrt(den) : 1e-30);
    return result(finite && rel <= tol, "%-44s rel %.2e  max|d| %.2e  rms(ref) %.2e  (tol %.0e)%s",
                  what, rel, mx, sqrt(den / (double)n), tol, finite ? "" : "  NOT FINITE");
}

static bool compare_scalar(const char *what, double got, double ref, double tol)
{
    double rel = fabs(got - ref) / (fabs(ref) > 0 ? fabs(ref) : 1.0);
    return result(isfinite(got) && rel <= tol, "%-44s %.9g vs %.9g  rel %.2e  (tol %.0e)", what, got,
                  ref, rel, tol);
}

#define TOL_F 2e-2
#define TOL_B 3e-2
#define TOL_LOSS 5e-3
#define TOL_UPD 1e-6
#define TOL_NORM 1e-9

/* dropout streams: step, layer and sample are part of the mask's key */
static int64_t g_step = 5, g_sample0 = 3;
#define LAYER 1

/* ---------------------------------------------------------------- region instances */

/* One region on both backends: the CPU instance in fp32, the GPU one in the CUDA storage types,
 * with the same parameter values (bf16-representable) and inputs. */
typedef struct region {
    const exec_cfg *cfg;
    exec_shard sh;
    exec_region_kind kind;
    int layer;
    char prefix[32];
    exec_param p[EXEC_MAX_REGION_PARAMS];
    int np;
    int64_t T, nlm; /* tokens; elements of the tied LM slice */
    struct {
        exec_region_sizes sz;
        float *param, *grad, *m, *v, *x, *y, *dx, *dy, *lm_w, *lm_grad;
        void *act, *work, *x2, *y2, *dx2, *dy2;
        int32_t *tokens, *targets;
        double out;
    } c;
    struct {
        exec_cuda_sizes sz;
        uint16_t *param, *lm_w;
        float *master, *grad, *m, *v, *lm_grad, *stats;
        void *act, *work, *x, *y, *dx, *dy, *x2, *y2, *dx2, *dy2;
        int32_t *tokens, *targets;
        double *out;
    } g;
} region;

static const char *fam(const exec_cfg *c) { return c->gpt ? "gpt" : "llama"; }

static void region_free(region *r)
{
    free(r->c.param), free(r->c.grad), free(r->c.m), free(r->c.v), free(r->c.x), free(r->c.y);
    free(r->c.dx), free(r->c.dy), free(r->c.lm_w), free(r->c.lm_grad), free(r->c.act);
    free(r->c.work);
    free(r->c.x2), free(r->c.y2), free(r->c.dx2), free(r->c.dy2), free(r->c.tokens);
    free(r->c.targets);
    void *g[] = {r->g.param, r->g.lm_w, r->g.master, r->g.grad, r->g.m, r->g.v, r->g.lm_grad,
                 r->g.stats, r->g.act, r->g.work, r->g.x, r->g.y, r->g.dx, r->g.dy, r->g.x2, r->g.y2,
                 r->g.dx2, r->g.dy2, r->g.tokens, r->g.targets, r->g.out};
    for (size_t i = 0; i < BASE_COUNT(g); i++) exec_cuda_free(g[i]);
    memset(r, 0, sizeof *r);
}

#define DA(ptr, bytes)                                                                         \
    do {                                                                                       \
        if (!((ptr) = dalloc(bytes))) {                                                        \
            result(false, "device allocation of %lld bytes: %s", (long long)(bytes), E.msg);   \
            base_error_clear(&E);                                                              \
            return -1;                                                                         \
        }                                                                                      \
    } while (0)

/* Allocates both instances (the GPU one only, without with_cpu: the benchmark's shapes would
 * take gigabytes of host memory in fp32). */
static int region_new(region *r, const exec_cfg *cfg, const exec_shard *sh, exec_region_kind k,
                      int layer, bool with_cpu)
{
    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    r->sh = *sh;
    r->kind = k;
    r->layer = k == EXEC_EMBED || k == EXEC_HEAD ? -1 : layer;
    if (r->layer < 0)
        snprintf(r->prefix, sizeof r->prefix, "%s.", exec_region_kind_name(k));
    else
        snprintf(r->prefix, sizeof r->prefix, "L%d.%s.", layer, exec_region_kind_name(k));
    r->np = exec_region_params(cfg, sh, k, r->p, &E);
    if (r->np < 0 || exec_region_sizes_get(cfg, sh, k, PLAN_FP32, &r->c.sz, &E) ||
        exec_cuda_region_sizes(cfg, sh, k, &r->g.sz, &E)) {
        result(false, "region sizes: %s", E.msg);
        base_error_clear(&E);
        return -1;
    }
    const int64_t T = r->T = cfg->b * cfg->s, P = r->c.sz.params;
    const bool tied_head = k == EXEC_HEAD && cfg->tied;
    r->nlm = tied_head ? sh->nvocab * cfg->h : 0;
    if (!with_cpu) goto gpu;
    /* CPU, fp32 */
    r->c.param = xcalloc((size_t)P * 4);
    r->c.grad = xcalloc((size_t)P * 4);
    r->c.m = xcalloc((size_t)P * 4);
    r->c.v = xcalloc((size_t)P * 4);
    r->c.act = xcalloc((size_t)r->c.sz.act_bytes);
    r->c.work = xcalloc((size_t)r->c.sz.work_bytes); /* the CPU kernels' workspaces, BI -> BW */
    if (k == EXEC_EMBED) {
        r->c.tokens = xcalloc((size_t)T * 4);
    } else {
        r->c.x = xcalloc((size_t)r->c.sz.x * 4);
        r->c.dx = xcalloc((size_t)r->c.sz.x * 4);
    }
    if (r->c.sz.y > 0) {
        r->c.y = xcalloc((size_t)r->c.sz.y * 4);
        r->c.dy = xcalloc((size_t)r->c.sz.y * 4);
    }
    if (k == EXEC_HEAD) r->c.targets = xcalloc((size_t)T * 4);
    if (tied_head) {
        r->c.lm_w = xcalloc((size_t)r->nlm * 4);
        r->c.lm_grad = xcalloc((size_t)r->nlm * 4);
    }
    if (r->c.sz.route_bytes > 0) {
        r->c.x2 = xcalloc((size_t)r->c.sz.route_bytes);
        r->c.y2 = xcalloc((size_t)r->c.sz.route_bytes);
        r->c.dx2 = xcalloc((size_t)r->c.sz.route_bytes);
        r->c.dy2 = xcalloc((size_t)r->c.sz.route_bytes);
    }
gpu:;
    const exec_cuda_sizes *s = &r->g.sz;
    DA(r->g.param, (size_t)P * 2);
    DA(r->g.master, (size_t)P * 4);
    DA(r->g.grad, (size_t)P * 4);
    DA(r->g.m, (size_t)P * 4);
    DA(r->g.v, (size_t)P * 4);
    DA(r->g.act, (size_t)s->act_bytes);
    if (s->work_bytes > 0) DA(r->g.work, (size_t)s->work_bytes); /* workspaces, BI -> BW */
    DA(r->g.out, 8);
    if (k == EXEC_EMBED) {
        DA(r->g.tokens, (size_t)s->x_bytes);
    } else {
        DA(r->g.x, (size_t)s->x_bytes);
        DA(r->g.dx, (size_t)s->x_bytes);
    }
    if (s->y_bytes > 0) {
        DA(r->g.y, (size_t)s->y_bytes);
        DA(r->g.dy, (size_t)s->y_bytes);
    }
    if (k == EXEC_HEAD) {
        DA(r->g.targets, (size_t)T * 4);
        DA(r->g.stats, (size_t)T * 12);
    }
    if (tied_head) {
        DA(r->g.lm_w, (size_t)r->nlm * 2);
        DA(r->g.lm_grad, (size_t)r->nlm * 4);
    }
    if (s->route_bytes > 0) {
        DA(r->g.x2, (size_t)s->route_bytes);
        DA(r->g.y2, (size_t)s->route_bytes);
        DA(r->g.dx2, (size_t)s->route_bytes);
        DA(r->g.dy2, (size_t)s->route_bytes);
    }
    return 0;
}

/* Parameters: the CPU's deterministic initialisation, rounded to bf16, on both sides. */
static int region_init_params(region *r, uint64_t seed)
{
    for (int i = 0; i < r->np; i++) {
        char name[96];
        snprintf(name, sizeof name, "%s%s", r->prefix, r->p[i].name);
        if (exec_param_init(seed, name, &r->p[i], PLAN_FP32, r->c.param + r->p[i].offset, &E)) {
            result(false, "exec_param_init: %s", E.msg);
            base_error_clear(&E);
            return -1;
        }
    }
    round_bf16(r->c.param, r->c.sz.params);
    CK(up16(r->g.param, r->c.param, r->c.sz.params));
    CK(up32(r->g.master, r->c.param, r->c.sz.params));
    if (r->nlm) {
        fill(r->c.lm_w, r->nlm, 777, -0.2, 0.2);
        CK(up16(r->g.lm_w, r->c.lm_w, r->nlm));
    }
    return 0;
}

static exec_call call_cpu(region *r, const exec_optim *opt)
{
    exec_call c;
    memset(&c, 0, sizeof c);
    c.cfg = r->cfg;
    c.shard = &r->sh;
    c.dtype = PLAN_FP32;
    c.layer = r->layer;
    c.step = g_step;
    c.sample0 = g_sample0;
    c.param = r->c.param;
    c.grad = r->c.grad;
    c.lm_w = r->c.lm_w;
    c.lm_grad = r->c.lm_grad;
    c.act = r->c.act;
    c.work = r->c.work;
    c.x = r->c.x;
    c.x2 = r->c.x2;
    c.y = r->c.y;
    c.y2 = r->c.y2;
    c.dy = r->c.dy;
    c.dy2 = r->c.dy2;
    c.dx = r->c.dx;
    c.dx2 = r->c.dx2;
    c.tokens = r->c.tokens;
    c.targets = r->c.targets;
    c.out = &r->c.out;
    c.opt = opt;
    c.opt_m = r->c.m;
    c.opt_v = r->c.v;
    return c;
}

static exec_cuda_call call_gpu(region *r, const exec_optim *opt)
{
    exec_cuda_call g;
    memset(&g, 0, sizeof g);
    exec_call *c = &g.c;
    c->cfg = r->cfg;
    c->shard = &r->sh;
    c->dtype = PLAN_BF16;
    c->layer = r->layer;
    c->step = g_step;
    c->sample0 = g_sample0;
    c->param = r->g.param;
    c->grad = r->g.grad;
    c->lm_w = r->g.lm_w;
    c->lm_grad = r->g.lm_grad;
    c->act = r->g.act;
    c->work = r->g.work;
    c->x = r->g.x;
    c->x2 = r->g.x2;
    c->y = r->g.y;
    c->y2 = r->g.y2;
    c->dy = r->g.dy;
    c->dy2 = r->g.dy2;
    c->dx = r->g.dx;
    c->dx2 = r->g.dx2;
    c->tokens = r->g.tokens;
    c->targets = r->g.targets;
    c->out = r->g.out;
    c->opt = opt;
    c->opt_m = r->g.m;
    c->opt_v = r->g.v;
    g.ctx = X;
    g.master = r->g.master;
    return g;
}

static void ident(char *id, size_t n, const region *r, const char *pass)
{
    snprintf(id, n, "%s.%s.%s", fam(r->cfg), exec_region_kind_name(r->kind), pass);
}

static int run_cpu(region *r, const char *pass, const exec_optim *opt)
{
    char id[64];
    ident(id, sizeof id, r, pass);
    exec_call c = call_cpu(r, opt);
    if (exec_kernel_run_id(id, &c, &E)) {
        result(false, "CPU %s: %s", id, E.msg);
        base_error_clear(&E);
        return -1;
    }
    return 0;
}

static int run_gpu(region *r, const char *pass, const exec_optim *opt)
{
    char id[64];
    ident(id, sizeof id, r, pass);
    exec_cuda_call g = call_gpu(r, opt);
    if (exec_cuda_kernel_run_id(id, &g, &E) || exec_cuda_ctx_sync(X, &E)) {
        result(false, "GPU %s: %s", id, E.msg);
        base_error_clear(&E);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- MoE routes */

static int64_t route_gpu_bytes(const exec_cfg *c) { return exec_cuda_route_bytes(c); }

/* A valid synthetic route (unique slots, every fifth choice dropped), the same on both sides. */
static int make_route(region *r, void *cpu_route, void *gpu_route, uint64_t key)
{
    const exec_cfg *cfg = r->cfg;
    const int64_t T = r->T, k = cfg->top_k, h = cfg->h, nslots = cfg->experts * cfg->capacity;
    float *cres, *cw;
    int32_t *cslot;
    exec_route_view_f32(cfg, cpu_route, &cres, &cw, &cslot);
    void *hb = xcalloc((size_t)route_gpu_bytes(cfg));
    uint16_t *gres;
    float *gw;
    int32_t *gslot;
    exec_cuda_route_view(cfg, hb, &gres, &gw, &gslot);
    fill(cres, T * h, key, -1, 1);
    fill(cw, T * k, key + 1, 0, 1);
    int64_t P = 7919;
    while (nslots % P == 0) P += 2;
    for (int64_t i = 0; i < T * h; i++) gres[i] = exec_bf16_from_float(cres[i]);
    for (int64_t i = 0; i < T * k; i++) {
        int32_t sl = i < nslots && i % 5 != 4 ? (int32_t)((i * P) % nslots) : -1;
        cslot[i] = gslot[i] = sl;
        gw[i] = cw[i];
    }
    int rc = exec_cuda_h2d(X, gpu_route, hb, (size_t)route_gpu_bytes(cfg), &E);
    free(hb);
    CK(rc);
    return 0;
}

/* Compares a GPU route (device) with a CPU route: slots exactly, weights and residuals. Returns
 * the number of differing slots. */
static int64_t compare_route(const region *r, const char *what, const void *gpu_route,
                             void *cpu_route, bool with_resid, double tol)
{
    const exec_cfg *cfg = r->cfg;
    const int64_t T = r->T, k = cfg->top_k, h = cfg->h;
    float *cres, *cw;
    int32_t *cslot;
    exec_route_view_f32(cfg, cpu_route, &cres, &cw, &cslot);
    void *hb = xcalloc((size_t)route_gpu_bytes(cfg));
    uint16_t *gres;
    float *gw;
    int32_t *gslot;
    exec_cuda_route_view(cfg, hb, &gres, &gw, &gslot);
    if (exec_cuda_d2h(X, hb, gpu_route, (size_t)route_gpu_bytes(cfg), &E)) {
        result(false, "%s: %s", what, E.msg);
        base_error_clear(&E);
        free(hb);
        return -1;
    }
    int64_t diff = 0;
    for (int64_t i = 0; i < T * k; i++) diff += gslot[i] != cslot[i];
    char buf[128];
    snprintf(buf, sizeof buf, "%s slots", what);
    result(diff == 0, "%-44s %lld of %lld choices differ (must be 0)", buf, (long long)diff,
           (long long)(T * k));
    snprintf(buf, sizeof buf, "%s weights", what);
    compare(buf, gw, cw, T * k, tol);
    if (with_resid) {
        float *res = xcalloc((size_t)(T * h) * 4);
        for (int64_t i = 0; i < T * h; i++) res[i] = exec_bf16_to_float(gres[i]);
        snprintf(buf, sizeof buf, "%s residual", what);
        compare(buf, res, cres, T * h, tol);
        free(res);
    }
    free(hb);
    return diff;
}

/* ---------------------------------------------------------------- (a) region checks */

static bool kind_has_bi(exec_region_kind k) { return k != EXEC_EMBED; }

/* Downloads a bf16 device buffer of n elements and compares it with the CPU's. */
static bool cmp16(const char *what, const void *dev, const float *ref, int64_t n, double tol)
{
    if (n <= 0) return true;
    float *h = xcalloc((size_t)n * 4);
    bool ok = down16(h, dev, n) == 0 && compare(what, h, ref, n, tol);
    free(h);
    return ok;
}

/* Gradients tensor by tensor, so that a wrong term names itself. */
static void compare_grads(region *r, const char *tag)
{
    float *h = xcalloc((size_t)r->c.sz.params * 4);
    if (down32(h, r->g.grad, r->c.sz.params)) {
        result(false, "download of gradients: %s", E.msg);
        base_error_clear(&E);
        free(h);
        return;
    }
    double all = 0;
    for (int64_t i = 0; i < r->c.sz.params; i++) all += (double)r->c.grad[i] * r->c.grad[i];
    all = sqrt(all);
    for (int i = 0; i < r->np; i++) {
        char what[128];
        snprintf(what, sizeof what, "%s BW d%s", tag, r->p[i].name);
        const float *got = h + r->p[i].offset, *ref = r->c.grad + r->p[i].offset;
        double rn = 0, gn = 0;
        for (int64_t j = 0; j < r->p[i].count; j++) {
            rn += (double)ref[j] * ref[j];
            gn += (double)got[j] * got[j];
        }
        if (sqrt(rn) < 1e-4 * all) {
            /* a gradient that vanishes in exact arithmetic (GPT's key bias: softmax ignores a
             * shift shared by every key of a query): the GPU's must be small next to the
             * region's gradient, which its bf16 rounding of the summed terms is */
            result(sqrt(gn) <= TOL_B * all, "%-44s |got| %.2e vs |region grad| %.2e: vanishes (tol %.0e)",
                   what, sqrt(gn), all, TOL_B);
            continue;
        }
        compare(what, got, ref, r->p[i].count, TOL_B);
    }
    free(h);
    if (r->nlm) {
        float *l = xcalloc((size_t)r->nlm * 4);
        char what[128];
        snprintf(what, sizeof what, "%s BW dlm (tied)", tag);
        if (down32(l, r->g.lm_grad, r->nlm) == 0) compare(what, l, r->c.lm_grad, r->nlm, TOL_B);
        free(l);
    }
}

/* UPD in isolation (the CPU's gradients on both sides), then the gradient norm, the clipping
 * coefficient and the aux-loss sum on the same gradients. */
static int check_upd(region *r, const char *tag)
{
    const int64_t P = r->c.sz.params;
    if (P == 0) return 0;
    CK(up32(r->g.grad, r->c.grad, P));
    for (int pass = 0; pass < 2; pass++) {
        exec_optim o;
        memset(&o, 0, sizeof o);
        o.kind = pass == 0 ? EXEC_ADAMW : EXEC_SGD;
        o.lr = 1e-2;
        o.beta1 = 0.9;
        o.beta2 = 0.95;
        o.eps = 1e-8;
        o.weight_decay = 0.1;
        o.t = 3;
        o.grad_scale = 0.5;
        /* some history in the moments, the same on both sides */
        fill(r->c.m, P, 31, -1e-3, 1e-3);
        fill(r->c.v, P, 32, 0, 1e-4);
        CK(up32(r->g.m, r->c.m, P));
        CK(up32(r->g.v, r->c.v, P));
        if (run_cpu(r, "UPD", &o) || run_gpu(r, "UPD", &o)) return -1;
        float *h = xcalloc((size_t)P * 4);
        char what[128];
        snprintf(what, sizeof what, "%s UPD %s master", tag, pass == 0 ? "AdamW" : "SGD");
        if (down32(h, r->g.master, P) == 0) compare(what, h, r->c.param, P, TOL_UPD);
        int64_t off = 0;
        if (down16(h, r->g.param, P) == 0)
            for (int64_t i = 0; i < P; i++)
                off += fabsf(h[i] - bf(r->c.param[i])) > fabsf(bf(r->c.param[i])) * 0x1.0p-7f;
        snprintf(what, sizeof what, "%s UPD %s bf16 params", tag, pass == 0 ? "AdamW" : "SGD");
        result(off == 0, "%-44s %lld of %lld more than one bf16 step from the CPU's", what,
               (long long)off, (long long)P);
        if (pass == 0) {
            snprintf(what, sizeof what, "%s UPD AdamW first moment", tag);
            if (down32(h, r->g.m, P) == 0) compare(what, h, r->c.m, P, TOL_UPD);
            snprintf(what, sizeof what, "%s UPD AdamW second moment", tag);
            if (down32(h, r->g.v, P) == 0) compare(what, h, r->c.v, P, TOL_UPD);
        }
        free(h);
        /* the next pass starts from the same parameters on both sides */
        CK(up16(r->g.param, r->c.param, P));
        CK(up32(r->g.master, r->c.param, P));
    }
    /* aux.grad_norm over this region's gradients, then the clipping coefficient */
    exec_grad_ref cref = {r->kind, r->c.grad}, gref = {r->kind, r->g.grad};
    exec_call c = call_cpu(r, NULL);
    c.nin = 1;
    c.grads_in = &cref;
    double cnorm = 0;
    c.out = &cnorm;
    if (exec_kernel_run_id("aux.grad_norm", &c, &E)) {
        result(false, "CPU aux.grad_norm: %s", E.msg);
        base_error_clear(&E);
        return -1;
    }
    exec_cuda_call g = call_gpu(r, NULL);
    g.c.nin = 1;
    g.c.grads_in = &gref;
    CK(exec_cuda_kernel_run_id("aux.grad_norm", &g, &E));
    double gnorm = 0, coef = 0;
    CK(exec_cuda_d2h(X, &gnorm, r->g.out, 8, &E));
    char what[128];
    snprintf(what, sizeof what, "%s aux.grad_norm (sum of squares)", tag);
    compare_scalar(what, gnorm, cnorm, TOL_NORM);
    const double max_norm = 0.5 * sqrt(cnorm);
    CK(exec_cuda_clip_coef(X, r->g.out, max_norm, r->g.out, &E));
    CK(exec_cuda_d2h(X, &coef, r->g.out, 8, &E));
    snprintf(what, sizeof what, "%s clipping coefficient", tag);
    compare_scalar(what, coef, exec_clip_coef(sqrt(cnorm), max_norm), TOL_NORM);
    return 0;
}

/* ---------------------------------------------------------------- recompute */

/* What one run of a region's passes left: F's outputs, R's, BI's and BW's (host copies). */
typedef struct rc_run {
    void *yf, *y2f, *yr, *y2r, *dx, *dx2, *grad;
    double aux;
} rc_run;

static void rc_run_free(rc_run *o)
{
    free(o->yf), free(o->y2f), free(o->yr), free(o->y2r), free(o->dx), free(o->dx2), free(o->grad);
    memset(o, 0, sizeof *o);
}

/* Overwrites a device buffer with 0xff bytes (bf16 and fp32 NaNs), so that a pass that reads
 * what nothing wrote shows it. */
static int poison(void *d, size_t bytes)
{
    if (!d || !bytes) return 0;
    void *h = xcalloc(bytes);
    memset(h, 0xff, bytes);
    int rc = exec_cuda_h2d(X, d, h, bytes, &E);
    free(h);
    return rc;
}

static int rc_down(void **h, const void *d, size_t bytes)
{
    *h = xcalloc(bytes);
    return d && bytes ? exec_cuda_d2h(X, *h, d, bytes, &E) : 0;
}

static int rc_pass(region *r, const char *pass, const exec_call *over)
{
    char id[64];
    ident(id, sizeof id, r, pass);
    exec_cuda_call g = call_gpu(r, NULL);
    g.c.act = over->act;
    g.c.act2 = over->act2;
    g.c.act_mode = over->act_mode;
    g.c.x = over->x;
    g.c.x2 = over->x2;
    if (exec_cuda_kernel_run_id(id, &g, &E) || exec_cuda_ctx_sync(X, &E)) {
        result(false, "GPU %s (recompute mode %d): %s", id, over->act_mode, E.msg);
        base_error_clear(&E);
        return -1;
    }
    return 0;
}

/* F, R, BI and BW of a region under a recompute mode, as the runtime binds them: F keeps its
 * part in kept and computes R's part in a transient fwd2; R rebuilds act2 (poisoned before)
 * reading its input from what F kept (full or selective recompute: the input leads the kept
 * part; the combine's route follows its expert outputs), or, keeping nothing (EXEC_ACT_NONE),
 * from the previous region's output, and R's buffer is then the act of R and the backward.
 * EXEC_ACT_ALL: the plain passes on kept. */
static int rc_passes(region *r, int mode, void *kept, void *act2, void *fwd2, size_t rebuilt,
                     rc_run *o)
{
    const exec_cuda_sizes *s = &r->g.sz;
    const size_t yb = (size_t)s->y_bytes, rb = (size_t)s->route_bytes;
    const size_t xb = (size_t)s->x_bytes;
    exec_call v;
    memset(&v, 0, sizeof v);
    v.act_mode = mode;
    v.act = kept;
    v.act2 = mode == EXEC_ACT_ALL ? NULL : fwd2;
    v.x = r->g.x;
    v.x2 = r->g.x2;
    CK(rc_pass(r, "F", &v));
    CK(rc_down(&o->yf, r->g.y, yb));
    if (r->kind == EXEC_MOE_GATE) {
        CK(rc_down(&o->y2f, r->g.y2, rb));
        CK(exec_cuda_d2h(X, &o->aux, r->g.out, 8, &E));
    }
    /* R: nothing F left outside what it keeps may serve */
    CK(poison(fwd2, rebuilt));
    if (mode != EXEC_ACT_ALL) {
        v.act2 = act2;
        if (mode == EXEC_ACT_NONE) v.act = act2;
        if (mode == EXEC_ACT_INPUT || mode == EXEC_ACT_SELECTIVE) {
            v.x = kept;
            if (r->kind == EXEC_MOE_COMBINE) v.x2 = (char *)kept + ((xb + 15) & ~(size_t)15);
        }
    }
    CK(poison(r->g.y, yb));
    if (r->kind == EXEC_MOE_GATE) CK(poison(r->g.y2, rb));
    CK(rc_pass(r, "R", &v));
    CK(rc_down(&o->yr, r->g.y, yb));
    if (r->kind == EXEC_MOE_GATE) CK(rc_down(&o->y2r, r->g.y2, rb));
    /* BI and BW from fresh outputs */
    CK(exec_cuda_memset0(X, r->g.dx, xb, &E));
    if (r->kind == EXEC_MOE_COMBINE) CK(exec_cuda_memset0(X, r->g.dx2, rb, &E));
    CK(rc_pass(r, "BI", &v));
    CK(rc_down(&o->dx, r->g.dx, xb));
    if (r->kind == EXEC_MOE_COMBINE) CK(rc_down(&o->dx2, r->g.dx2, rb));
    if (r->np > 0) {
        const size_t gb = (size_t)r->c.sz.params * 4;
        CK(exec_cuda_memset0(X, r->g.grad, gb, &E));
        CK(rc_pass(r, "BW", &v));
        CK(rc_down(&o->grad, r->g.grad, gb));
    }
    return 0;
}

static bool rc_same(const void *a, const void *b, size_t n)
{
    return n == 0 || !a || !b || memcmp(a, b, n) == 0;
}

/* Recompute: under each mode that rebuilds something here, F keeping its part, R rebuilding
 * the rest from it, then BI and BW give what they give without recompute, bit for bit (the
 * same kernels on the same values), and F's and R's outputs too. */
static void check_recompute(region *r, const char *tag)
{
    if (r->kind == EXEC_EMBED || r->kind == EXEC_HEAD) return; /* never recomputed */
    const exec_cuda_sizes *s = &r->g.sz;
    const size_t yb = (size_t)s->y_bytes, rb = (size_t)s->route_bytes, xb = (size_t)s->x_bytes;
    const size_t gb = r->np > 0 ? (size_t)r->c.sz.params * 4 : 0;
    rc_run ref, got;
    memset(&ref, 0, sizeof ref);
    memset(&got, 0, sizeof got);
    if (rc_passes(r, EXEC_ACT_ALL, r->g.act, NULL, NULL, 0, &ref)) goto out;
    static const int modes[] = {EXEC_ACT_SELECTIVE, EXEC_ACT_INPUT, EXEC_ACT_NONE};
    static const char *names[] = {"selective", "full (input kept)", "full (nothing kept)"};
    for (size_t q = 0; q < BASE_COUNT(modes); q++) {
        int64_t kept = 0, rebuilt = 0;
        if (exec_cuda_region_act_split(r->cfg, &r->sh, r->kind, (exec_act_mode)modes[q], &kept,
                                       &rebuilt, &E)) {
            result(false, "%s recompute split: %s", tag, E.msg);
            base_error_clear(&E);
            continue;
        }
        /* the same split as without recompute (selective outside attention): nothing to see */
        if (rebuilt == 0 && kept == s->act_bytes) continue;
        /* the kept part at least 16 bytes (an empty part is still a buffer the runtime passes);
         * no rebuilt part (the combine under full recompute keeps its whole input): no act2, as
         * the runtime passes none */
        void *k = dalloc((size_t)kept + 16), *a2 = rebuilt ? dalloc((size_t)rebuilt) : NULL,
             *f2 = rebuilt ? dalloc((size_t)rebuilt) : NULL;
        bool ok = k && ((a2 && f2) || !rebuilt) && poison(k, (size_t)kept + 16) == 0 &&
                  poison(f2, (size_t)rebuilt) == 0 && poison(a2, (size_t)rebuilt) == 0 &&
                  rc_passes(r, modes[q], k, a2, f2, (size_t)rebuilt, &got) == 0;
        if (ok) {
            char what[160];
            snprintf(what, sizeof what, "%s recompute %s", tag, names[q]);
            const bool f_same = rc_same(got.yf, ref.yf, yb) && rc_same(got.y2f, ref.y2f, rb) &&
                                (r->kind != EXEC_MOE_GATE || got.aux == ref.aux);
            const bool r_same = rc_same(got.yr, ref.yr, yb) && rc_same(got.y2r, ref.y2r, rb);
            const bool b_same = rc_same(got.dx, ref.dx, xb) && rc_same(got.dx2, ref.dx2, rb) &&
                                rc_same(got.grad, ref.grad, gb);
            result(f_same && r_same && b_same,
                   "%-44s kept %lld + rebuilt %lld bytes: F %s, R %s, BI/BW %s as without",
                   what, (long long)kept, (long long)rebuilt, f_same ? "same" : "DIFFERS",
                   r_same ? "same" : "DIFFERS", b_same ? "same" : "DIFFER");
        } else if (E.msg[0]) {
            result(false, "%s recompute mode %d: %s", tag, modes[q], E.msg);
            base_error_clear(&E);
        }
        rc_run_free(&got);
        exec_cuda_free(k);
        exec_cuda_free(a2);
        exec_cuda_free(f2);
    }
out:
    rc_run_free(&ref);
    rc_run_free(&got);
}

/* Every pass of one region on one shard. */
static int check_region(const exec_cfg *cfg, const char *cname, int tp, int tpr, int ep, int epr,
                        exec_region_kind k)
{
    exec_shard sh;
    if (exec_shard_init(cfg, tp, tpr, ep, epr, &sh, &E)) {
        base_error_clear(&E);
        return 0; /* this split does not apply to this shape */
    }
    char tag[96];
    snprintf(tag, sizeof tag, "%s.%s [%s tp%d/%d ep%d/%d]", fam(cfg), exec_region_kind_name(k),
             cname, tpr, tp, epr, ep);
    region r;
    int rc = -1;
    if (region_new(&r, cfg, &sh, k, LAYER, true) || region_init_params(&r, cfg->seed)) goto done;
    const int64_t T = r.T;
    char what[160];

    /* inputs */
    if (k == EXEC_EMBED) {
        for (int64_t t = 0; t < T; t++)
            r.c.tokens[t] = (int32_t)(exec_rng_bits(11, (uint64_t)t) % (uint64_t)cfg->vocab);
        if (exec_cuda_h2d(X, r.g.tokens, r.c.tokens, (size_t)T * 4, &E)) goto cuda_error;
    } else {
        fill(r.c.x, r.c.sz.x, 12, -1, 1);
        if (up16(r.g.x, r.c.x, r.c.sz.x)) goto cuda_error;
    }
    if (k == EXEC_HEAD) {
        for (int64_t t = 0; t < T; t++)
            r.c.targets[t] = (int32_t)(exec_rng_bits(13, (uint64_t)t) % (uint64_t)cfg->vocab);
        if (exec_cuda_h2d(X, r.g.targets, r.c.targets, (size_t)T * 4, &E)) goto cuda_error;
    }
    if (k == EXEC_MOE_COMBINE && make_route(&r, r.c.x2, r.g.x2, 14)) goto done;

    /* F */
    if (run_cpu(&r, "F", NULL) || run_gpu(&r, "F", NULL)) goto done;
    bool routed = true;
    if (k == EXEC_MOE_GATE) {
        snprintf(what, sizeof what, "%s F route", tag);
        routed = compare_route(&r, what, r.g.y2, r.c.y2, true, TOL_F) == 0;
        double aux = 0;
        if (exec_cuda_d2h(X, &aux, r.g.out, 8, &E)) goto cuda_error;
        snprintf(what, sizeof what, "%s F aux loss", tag);
        compare_scalar(what, aux, r.c.out, TOL_F);
    }
    if (k == EXEC_HEAD) {
        double loss = 0;
        if (exec_cuda_d2h(X, &loss, r.g.out, 8, &E)) goto cuda_error;
        snprintf(what, sizeof what, "%s F loss", tag);
        compare_scalar(what, loss, r.c.out, TOL_LOSS);
    } else if (routed) {
        snprintf(what, sizeof what, "%s F y", tag);
        cmp16(what, r.g.y, r.c.y, r.c.sz.y, TOL_F);
    } else {
        result(false, "%s: routing differs, so the dispatched buffer and the backward are not "
                      "compared",
               tag);
        rc = 0;
        goto done;
    }

    /* R: a recomputation reproduces F bit for bit */
    {
        const size_t yb = k == EXEC_HEAD ? 8 : (size_t)r.g.sz.y_bytes;
        void *a = xcalloc(yb), *b = xcalloc(yb);
        const void *src = k == EXEC_HEAD ? (const void *)r.g.out : r.g.y;
        int bad = exec_cuda_d2h(X, a, src, yb, &E) || run_gpu(&r, "R", NULL) ||
                  exec_cuda_d2h(X, b, src, yb, &E);
        snprintf(what, sizeof what, "%s R reproduces F", tag);
        if (!bad) result(memcmp(a, b, yb) == 0, "%-44s bit for bit (%zu bytes)", what, yb);
        free(a);
        free(b);
        if (bad) goto done;
    }

    /* BI */
    if (kind_has_bi(k)) {
        if (r.c.dy) {
            fill(r.c.dy, r.c.sz.y, 15, -1, 1);
            if (up16(r.g.dy, r.c.dy, r.c.sz.y)) goto cuda_error;
        }
        if (k == EXEC_MOE_GATE && make_route(&r, r.c.dy2, r.g.dy2, 16)) goto done;
        if (run_cpu(&r, "BI", NULL) || run_gpu(&r, "BI", NULL)) goto done;
        snprintf(what, sizeof what, "%s BI dx", tag);
        cmp16(what, r.g.dx, r.c.dx, r.c.sz.x, TOL_B);
        if (k == EXEC_MOE_COMBINE) {
            snprintf(what, sizeof what, "%s BI d route", tag);
            compare_route(&r, what, r.g.dx2, r.c.dx2, true, TOL_B);
        }
    }
    /* BW (the embedding's upstream gradient is set here: it has no BI) */
    if (r.np > 0 || r.nlm) {
        if (k == EXEC_EMBED) {
            fill(r.c.dy, r.c.sz.y, 15, -1, 1);
            if (up16(r.g.dy, r.c.dy, r.c.sz.y)) goto cuda_error;
        }
        if (run_cpu(&r, "BW", NULL) || run_gpu(&r, "BW", NULL)) goto done;
        compare_grads(&r, tag);
        if (check_upd(&r, tag)) goto done;
    }
    check_recompute(&r, tag);
    rc = 0;
    goto done;
cuda_error:
    result(false, "%s: %s", tag, E.msg);
    base_error_clear(&E);
done:
    region_free(&r);
    return rc;
}

/* The vocabulary-parallel head as a TP group of two in one process: each shard's phases, the
 * statistics reduced on the host between them (MAX, then SUM), as an executor's reduce callback
 * would. Checks the loss, each shard's partial input gradient and weight gradients. */
static int check_head_tp2(const exec_cfg *cfg, const char *cname)
{
    char tag[96];
    snprintf(tag, sizeof tag, "%s.head [%s tp group of 2, phased]", fam(cfg), cname);
    region r[2];
    memset(r, 0, sizeof r);
    int rc = -1;
    const int64_t T = cfg->b * cfg->s;
    float *cst[2] = {xcalloc((size_t)T * 12), xcalloc((size_t)T * 12)};
    float *gst[2] = {xcalloc((size_t)T * 12), xcalloc((size_t)T * 12)};
    for (int s = 0; s < 2; s++) {
        exec_shard sh;
        if (exec_shard_init(cfg, 2, s, 1, 0, &sh, &E)) {
            base_error_clear(&E);
            rc = 0;
            goto done;
        }
        if (region_new(&r[s], cfg, &sh, EXEC_HEAD, -1, true) || region_init_params(&r[s], cfg->seed))
            goto done;
        fill(r[s].c.x, T * cfg->h, 12, -1, 1);
        for (int64_t t = 0; t < T; t++)
            r[s].c.targets[t] = (int32_t)(exec_rng_bits(13, (uint64_t)t) % (uint64_t)cfg->vocab);
        if (up16(r[s].g.x, r[s].c.x, T * cfg->h) ||
            exec_cuda_h2d(X, r[s].g.targets, r[s].c.targets, (size_t)T * 4, &E))
            goto cuda_error;
        if (r[s].nlm) { /* each shard's slice of one table */
            fill(r[s].c.lm_w, r[s].nlm, 777 + (uint64_t)s, -0.2, 0.2);
            if (up16(r[s].g.lm_w, r[s].c.lm_w, r[s].nlm)) goto cuda_error;
        }
    }
    for (int phase = 0; phase < 3; phase++) {
        for (int s = 0; s < 2; s++) {
            exec_call c = call_cpu(&r[s], NULL);
            c.kind = EXEC_HEAD;
            exec_cuda_call g = call_gpu(&r[s], NULL);
            g.c.kind = EXEC_HEAD;
            int bad = phase == 0   ? exec_head_f_begin_f32(&c, cst[s], &E)
                      : phase == 1 ? exec_head_f_sums_f32(&c, cst[s], &E)
                                   : exec_head_f_end_f32(&c, cst[s], &E);
            if (bad) {
                result(false, "CPU head phase %d: %s", phase, E.msg);
                base_error_clear(&E);
                goto done;
            }
            bad = phase == 0   ? exec_cuda_head_f_begin(&g, r[s].g.stats, &E)
                  : phase == 1 ? exec_cuda_head_f_sums(&g, r[s].g.stats, &E)
                               : exec_cuda_head_f_end(&g, r[s].g.stats, &E);
            if (bad || down32(gst[s], r[s].g.stats, 3 * T)) goto cuda_error;
        }
        if (phase == 2) break;
        /* the reductions an executor does between the phases */
        for (int64_t i = phase == 0 ? 0 : T; i < (phase == 0 ? T : 3 * T); i++) {
            float cv = phase == 0 ? fmaxf(cst[0][i], cst[1][i]) : cst[0][i] + cst[1][i];
            float gv = phase == 0 ? fmaxf(gst[0][i], gst[1][i]) : gst[0][i] + gst[1][i];
            cst[0][i] = cst[1][i] = cv;
            gst[0][i] = gst[1][i] = gv;
        }
        for (int s = 0; s < 2; s++)
            if (up32(r[s].g.stats, gst[s], 3 * T)) goto cuda_error;
    }
    double gl[2];
    for (int s = 0; s < 2; s++)
        if (exec_cuda_d2h(X, &gl[s], r[s].g.out, 8, &E)) goto cuda_error;
    char what[160];
    snprintf(what, sizeof what, "%s F loss (sum over shards)", tag);
    compare_scalar(what, gl[0] + gl[1], r[0].c.out + r[1].c.out, TOL_LOSS);
    for (int s = 0; s < 2; s++) {
        if (run_cpu(&r[s], "BI", NULL) || run_gpu(&r[s], "BI", NULL)) goto done;
        snprintf(what, sizeof what, "%s BI dx shard %d", tag, s);
        cmp16(what, r[s].g.dx, r[s].c.dx, T * cfg->h, TOL_B);
        if (run_cpu(&r[s], "BW", NULL) || run_gpu(&r[s], "BW", NULL)) goto done;
        snprintf(what, sizeof what, "%s shard %d", tag, s);
        compare_grads(&r[s], what);
    }
    rc = 0;
    goto done;
cuda_error:
    result(false, "%s: %s", tag, E.msg);
    base_error_clear(&E);
done:
    for (int s = 0; s < 2; s++) {
        region_free(&r[s]);
        free(cst[s]);
        free(gst[s]);
    }
    return rc;
}

/* cuBLAS's row-major mapping: every transpose combination, odd sizes, fp32 and bf16 outputs,
 * beta 0 and 1, against the CPU's BLAS on the same bf16 values. */
static int check_gemm(void)
{
    const int64_t m = 37, n = 53, k = 29;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int out16 = 0; out16 < 2; out16++) {
                const int64_t lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
                float *a = xcalloc((size_t)(m * k) * 4), *b = xcalloc((size_t)(k * n) * 4);
                float *c = xcalloc((size_t)(m * n) * 4), *got = xcalloc((size_t)(m * n) * 4);
                fill(a, m * k, 21, -1, 1);
                fill(b, k * n, 22, -1, 1);
                fill(c, m * n, 23, -1, 1);
                void *da = dalloc((size_t)(m * k) * 2), *db = dalloc((size_t)(k * n) * 2);
                void *dc = dalloc((size_t)(m * n) * 4);
                int bad = !da || !db || !dc || up16(da, a, m * k) || up16(db, b, k * n) ||
                          (out16 ? up16(dc, c, m * n) : up32(dc, c, m * n));
                exec_gemm_f32(ta, tb, m, n, k, 1.5f, a, lda, b, ldb, 1.0f, c, ldc);
                if (!bad)
                    bad = exec_cuda_gemm(X, ta, tb, m, n, k, 1.5f, da, lda, db, ldb, 1.0f,
                                         out16 ? NULL : dc, out16 ? dc : NULL, ldc, &E) ||
                          (out16 ? down16(got, dc, m * n) : down32(got, dc, m * n));
                char what[96];
                snprintf(what, sizeof what, "GEMM %c%c -> %s, beta 1", ta ? 'T' : 'N',
                         tb ? 'T' : 'N', out16 ? "bf16" : "fp32");
                if (bad) {
                    result(false, "%s: %s", what, E.msg);
                    base_error_clear(&E);
                } else {
                    compare(what, got, c, m * n, out16 ? 1e-2 : 1e-5);
                }
                exec_cuda_free(da), exec_cuda_free(db), exec_cuda_free(dc);
                free(a), free(b), free(c), free(got);
            }
    return 0;
}

/* Device initialisation against the host's: the same normal values (to rounding of the device's
 * transcendental functions), the same ones and zeros. */
static int check_init(void)
{
    exec_param p;
    memset(&p, 0, sizeof p);
    p.name = "wq";
    p.ndim = 2;
    p.dim[0] = 1, p.dim[1] = 300, p.dim[2] = 64;
    p.off[1] = 100, p.off[2] = 16; /* a shard's block of the global tensor */
    p.len[0] = 1, p.len[1] = 150, p.len[2] = 32;
    p.count = 150 * 32;
    p.init = EXEC_INIT_NORMAL;
    p.std = 0.02;
    float *h = xcalloc((size_t)p.count * 4), *d = xcalloc((size_t)p.count * 4);
    float *dm = dalloc((size_t)p.count * 4);
    exec_param_init(42, "L2.attn.wq", &p, PLAN_FP32, h, &E);
    int bad = !dm || exec_cuda_param_init(X, 42, "L2.attn.wq", &p, NULL, dm, &E) ||
              down32(d, dm, p.count);
    if (bad) {
        result(false, "exec_cuda_param_init: %s", E.msg);
        base_error_clear(&E);
    } else {
        int64_t same = 0;
        for (int64_t i = 0; i < p.count; i++) same += d[i] == h[i];
        compare("initialisation (normal, a shard's block)", d, h, p.count, 1e-6);
        result(same >= p.count * 99 / 100, "%-44s %lld of %lld identical", "initialisation bits",
               (long long)same, (long long)p.count);
    }
    exec_cuda_free(dm);
    free(h);
    free(d);
    return 0;
}

static exec_cfg base_cfg(bool gpt)
{
    exec_cfg c;
    memset(&c, 0, sizeof c);
    c.gpt = gpt;
    c.layers = 2;
    c.norm_eps = gpt ? 1e-5 : 1e-6;
    c.rope_theta = 10000.0;
    c.init_std = 0.2;
    c.aux_coef = 0.01;
    c.aux_weight = 1.0;
    c.learned_pos = gpt;
    c.seed = 1234;
    return c;
}

static void set_batch(exec_cfg *c, int64_t b, int64_t s, double cf)
{
    c->b = b;
    c->s = s;
    c->loss_scale = 1.0 / (double)(b * s);
    if (c->experts > 0) {
        double cap = cf * (double)(b * s * c->top_k) / (double)c->experts;
        c->capacity = (int64_t)ceil(cap - 1e-9 * cap);
    }
}

static int check_kernels_all(void)
{
    say("== (a) CUDA kernels against the fp32 CPU kernels\n");
    check_gemm();
    check_init();
    typedef struct {
        const char *name;
        exec_cfg cfg;
        bool moe;
    } shape;
    shape shapes[5];
    int ns = 0;
    /* GPT: head_dim 16 (a padded 32-wide tile), 37 tokens (a partial key tile), dropout,
     * tied embeddings, learned positions */
    exec_cfg c = base_cfg(true);
    c.h = 64, c.heads = 4, c.kv_heads = 4, c.head_dim = 16, c.ffn = 128, c.vocab = 96;
    c.tied = true, c.dropout = 0.1;
    set_batch(&c, 2, 37, 1);
    shapes[ns++] = (shape){"d16 s37 dropout tied", c, false};
    /* GPT: head_dim 64, 64 tokens, dropout */
    c = base_cfg(true);
    c.h = 128, c.heads = 2, c.kv_heads = 2, c.head_dim = 64, c.ffn = 256, c.vocab = 64;
    c.dropout = 0.1;
    set_batch(&c, 2, 64, 1);
    shapes[ns++] = (shape){"d64 s64 dropout", c, false};
    /* Llama MoE: GQA 2:1, QK-norm, RoPE, 4 experts top-2 at capacity factor 1 (tokens drop) */
    c = base_cfg(false);
    c.h = 128, c.heads = 4, c.kv_heads = 2, c.head_dim = 32, c.ffn = 192, c.vocab = 128;
    c.experts = 4, c.expert_ffn = 96, c.top_k = 2, c.qk_norm = true;
    set_batch(&c, 2, 70, 1.0);
    shapes[ns++] = (shape){"d32 s70 GQA qk-norm MoE", c, true};
    /* Llama: head_dim 128, GQA 4:1, tied, 130 tokens (5 key tiles) */
    c = base_cfg(false);
    c.h = 256, c.heads = 4, c.kv_heads = 1, c.head_dim = 128, c.ffn = 256, c.vocab = 64;
    c.tied = true;
    c.init_std = 0.1; /* at 0.2 the scores of 128-wide heads reach ~100: one-hot softmaxes whose
                       * bf16 gradients sit at the tolerance */
    set_batch(&c, 1, 130, 1);
    shapes[ns++] = (shape){"d128 s130 GQA4 tied", c, false};
    /* Llama: head_dim 256 */
    c = base_cfg(false);
    c.h = 128, c.heads = 2, c.kv_heads = 2, c.head_dim = 256, c.ffn = 128, c.vocab = 32;
    c.init_std = 0.1; /* as for head_dim 128 */
    set_batch(&c, 1, 40, 1);
    shapes[ns++] = (shape){"d256 s40", c, false};

    for (int i = 0; i < ns; i++) {
        const exec_cfg *cfg = &shapes[i].cfg;
        if (exec_cfg_validate(cfg, &E)) {
            result(false, "shape %s: %s", shapes[i].name, E.msg);
            base_error_clear(&E);
            continue;
        }
        say("-- %s %s\n", fam(cfg), shapes[i].name);
        exec_region_kind kinds[7];
        int nk = 0;
        kinds[nk++] = EXEC_EMBED;
        kinds[nk++] = EXEC_ATTN;
        kinds[nk++] = EXEC_MLP;
        if (shapes[i].moe) {
            kinds[nk++] = EXEC_MOE_GATE;
            kinds[nk++] = EXEC_MOE_EXPERTS;
            kinds[nk++] = EXEC_MOE_COMBINE;
        }
        kinds[nk++] = EXEC_HEAD;
        for (int j = 0; j < nk; j++) {
            check_region(cfg, shapes[i].name, 1, 0, 1, 0, kinds[j]);
            /* the non-first shard of a TP pair: partial sums, no replicated terms */
            if (kinds[j] != EXEC_HEAD) check_region(cfg, shapes[i].name, 2, 1, 1, 0, kinds[j]);
            if (kinds[j] == EXEC_MOE_EXPERTS) check_region(cfg, shapes[i].name, 1, 0, 2, 1, kinds[j]);
        }
        check_head_tp2(cfg, shapes[i].name);
    }
    /* aux.aux_loss: a sum of device scalars */
    double in[3] = {1.5, 2.25, -0.5}, out = 0;
    double *din = dalloc(sizeof in), *dout = dalloc(8);
    exec_cfg cfg = shapes[0].cfg;
    exec_shard sh;
    exec_shard_init(&cfg, 1, 0, 1, 0, &sh, &E);
    exec_cuda_call g;
    memset(&g, 0, sizeof g);
    g.c.cfg = &cfg;
    g.c.shard = &sh;
    g.c.nin = 3;
    g.c.scalars_in = din;
    g.c.out = dout;
    g.ctx = X;
    if (!din || !dout || exec_cuda_h2d(X, din, in, sizeof in, &E) ||
        exec_cuda_kernel_run_id("aux.aux_loss", &g, &E) || exec_cuda_d2h(X, &out, dout, 8, &E)) {
        result(false, "aux.aux_loss: %s", E.msg);
        base_error_clear(&E);
    } else {
        compare_scalar("aux.aux_loss", out, 3.25, 0);
    }
    exec_cuda_free(din);
    exec_cuda_free(dout);
    return 0;
}

/* ---------------------------------------------------------------- (b) kernel-chain training */

/* A whole model on one device, chained as a single-device executor would run it: embed | per
 * layer attn, then mlp or moe_gate, moe_experts, moe_combine | head; F in order, B in reverse,
 * the gradient norm, the clipping coefficient, AdamW on every region. */
typedef struct chain {
    exec_cfg cfg;
    exec_shard sh;
    int n;
    region r[24];
    double *g_norm, *g_coef;
    int embed_tok; /* offset of the token table in the embedding's block (tied head) */
} chain;

static void chain_free(chain *ch)
{
    for (int i = 0; i < ch->n; i++) {
        region *r = &ch->r[i];
        if (r->kind == EXEC_HEAD && ch->cfg.tied) {
            /* aliases of the embedding's blocks */
            r->c.lm_w = r->c.lm_grad = NULL;
            r->g.lm_w = NULL;
            r->g.lm_grad = NULL;
        }
        region_free(r);
    }
    exec_cuda_free(ch->g_norm);
    exec_cuda_free(ch->g_coef);
}

static int chain_new(chain *ch, const exec_cfg *cfg, unsigned moe_mask)
{
    memset(ch, 0, sizeof *ch);
    ch->cfg = *cfg;
    if (exec_shard_init(&ch->cfg, 1, 0, 1, 0, &ch->sh, &E)) {
        result(false, "shard: %s", E.msg);
        base_error_clear(&E);
        return -1;
    }
    exec_region_kind ks[24];
    int ls[24], n = 0;
    ks[n] = EXEC_EMBED, ls[n++] = -1;
    for (int l = 0; l < (int)cfg->layers; l++) {
        ks[n] = EXEC_ATTN, ls[n++] = l;
        if (moe_mask >> l & 1) {
            ks[n] = EXEC_MOE_GATE, ls[n++] = l;
            ks[n] = EXEC_MOE_EXPERTS, ls[n++] = l;
            ks[n] = EXEC_MOE_COMBINE, ls[n++] = l;
        } else {
            ks[n] = EXEC_MLP, ls[n++] = l;
        }
    }
    ks[n] = EXEC_HEAD, ls[n++] = -1;
    for (int i = 0; i < n; i++) {
        if (region_new(&ch->r[i], &ch->cfg, &ch->sh, ks[i], ls[i], true)) return -1;
        ch->n = i + 1;
        region *r = &ch->r[i];
        if (ks[i] == EXEC_HEAD && ch->cfg.tied) {
            /* the LM head reads the embedding's token table and adds to its gradient */
            const region *em = &ch->r[0];
            int64_t tok = -1;
            for (int j = 0; j < em->np; j++)
                if (!strcmp(em->p[j].name, "tok")) tok = em->p[j].offset;
            free(r->c.lm_w), free(r->c.lm_grad);
            exec_cuda_free(r->g.lm_w), exec_cuda_free(r->g.lm_grad);
            r->c.lm_w = em->c.param + tok;
            r->c.lm_grad = em->c.grad + tok;
            r->g.lm_w = em->g.param + tok;
            r->g.lm_grad = em->g.grad + tok;
            r->nlm = 0;
        }
        if (region_init_params(r, cfg->seed)) return -1;
    }
    if (!(ch->g_norm = dalloc(8)) || !(ch->g_coef = dalloc(8))) {
        result(false, "device allocation: %s", E.msg);
        base_error_clear(&E);
        return -1;
    }
    /* a fixed batch (memorised over the steps): tokens and next tokens */
    region *em = &ch->r[0], *hd = &ch->r[n - 1];
    for (int64_t t = 0; t < em->T; t++) {
        int64_t sample = t / cfg->s, pos = t % cfg->s;
        em->c.tokens[t] = exec_synthetic_token(cfg->seed, 0, sample, pos, cfg->vocab);
        hd->c.targets[t] = exec_synthetic_token(cfg->seed, 0, sample, pos + 1, cfg->vocab);
    }
    CK(exec_cuda_h2d(X, em->g.tokens, em->c.tokens, (size_t)em->T * 4, &E));
    CK(exec_cuda_h2d(X, hd->g.targets, hd->c.targets, (size_t)hd->T * 4, &E));
    return 0;
}

/* Copies region i's inputs (or upstream gradients) from its neighbours, on both sides. */
static int chain_link(chain *ch, int i, bool backward)
{
    region *r = &ch->r[i];
    if (!backward) {
        if (r->kind == EXEC_EMBED) return 0;
        region *p = &ch->r[i - 1];
        int64_t n = r->c.sz.x;
        memcpy(r->c.x, p->c.y, (size_t)n * 4);
        CK(exec_cuda_d2d(X, r->g.x, p->g.y, (size_t)n * 2, &E));
        if (r->kind == EXEC_MOE_COMBINE) {
            region *gate = &ch->r[i - 2];
            memcpy(r->c.x2, gate->c.y2, (size_t)r->c.sz.route_bytes);
            CK(exec_cuda_d2d(X, r->g.x2, gate->g.y2, (size_t)r->g.sz.route_bytes, &E));
        }
        return 0;
    }
    if (r->kind == EXEC_HEAD) return 0;
    region *nx = &ch->r[i + 1];
    int64_t n = r->c.sz.y;
    memcpy(r->c.dy, nx->c.dx, (size_t)n * 4);
    CK(exec_cuda_d2d(X, r->g.dy, nx->g.dx, (size_t)n * 2, &E));
    if (r->kind == EXEC_MOE_GATE) {
        region *comb = &ch->r[i + 2];
        memcpy(r->c.dy2, comb->c.dx2, (size_t)r->c.sz.route_bytes);
        CK(exec_cuda_d2d(X, r->g.dy2, comb->g.dx2, (size_t)r->g.sz.route_bytes, &E));
    }
    return 0;
}

/* One training step on both sides; the two losses of the step. */
static int chain_step(chain *ch, int step, double *loss_c, double *loss_g, double *norm_c,
                      double *norm_g)
{
    g_step = step;
    g_sample0 = 0;
    for (int i = 0; i < ch->n; i++) {
        region *r = &ch->r[i];
        memset(r->c.grad, 0, (size_t)r->c.sz.params * 4);
        CK(exec_cuda_memset0(X, r->g.grad, (size_t)r->c.sz.params * 4, &E));
    }
    *loss_c = *loss_g = 0;
    for (int i = 0; i < ch->n; i++) {
        region *r = &ch->r[i];
        if (chain_link(ch, i, false) || run_cpu(r, "F", NULL) || run_gpu(r, "F", NULL)) return -1;
        if (r->kind == EXEC_HEAD || r->kind == EXEC_MOE_GATE) {
            double g = 0, w = r->kind == EXEC_HEAD ? 1.0 : ch->cfg.aux_weight;
            CK(exec_cuda_d2h(X, &g, r->g.out, 8, &E));
            *loss_c += w * r->c.out;
            *loss_g += w * g;
        }
    }
    for (int i = ch->n - 1; i >= 0; i--) {
        region *r = &ch->r[i];
        if (chain_link(ch, i, true) || run_cpu(r, "B", NULL) || run_gpu(r, "B", NULL)) return -1;
    }
    /* global norm and clipping: on the device without a round trip */
    exec_grad_ref cref[24], gref[24];
    int nin = 0;
    for (int i = 0; i < ch->n; i++)
        if (ch->r[i].np > 0) {
            cref[nin] = (exec_grad_ref){ch->r[i].kind, ch->r[i].c.grad};
            gref[nin++] = (exec_grad_ref){ch->r[i].kind, ch->r[i].g.grad};
        }
    exec_call c = call_cpu(&ch->r[0], NULL);
    c.nin = nin;
    c.grads_in = cref;
    c.out = norm_c;
    if (exec_kernel_run_id("aux.grad_norm", &c, &E)) {
        result(false, "CPU aux.grad_norm: %s", E.msg);
        base_error_clear(&E);
        return -1;
    }
    exec_cuda_call g = call_gpu(&ch->r[0], NULL);
    g.c.nin = nin;
    g.c.grads_in = gref;
    g.c.out = ch->g_norm;
    CK(exec_cuda_kernel_run_id("aux.grad_norm", &g, &E));
    CK(exec_cuda_clip_coef(X, ch->g_norm, 1.0, ch->g_coef, &E));
    CK(exec_cuda_d2h(X, norm_g, ch->g_norm, 8, &E));
    *norm_c = sqrt(*norm_c);
    *norm_g = sqrt(*norm_g);
    exec_optim o;
    memset(&o, 0, sizeof o);
    o.kind = EXEC_ADAMW;
    o.lr = 3e-3;
    o.beta1 = 0.9;
    o.beta2 = 0.95;
    o.eps = 1e-8;
    o.weight_decay = 0.1;
    o.t = step + 1;
    o.grad_scale = exec_clip_coef(*norm_c, 1.0);
    for (int i = 0; i < ch->n; i++) {
        region *r = &ch->r[i];
        if (r->np == 0) continue;
        exec_call cu = call_cpu(r, &o);
        exec_cuda_call gu = call_gpu(r, &o);
        gu.grad_scale = ch->g_coef;
        char id[64];
        ident(id, sizeof id, r, "UPD");
        if (exec_kernel_run_id(id, &cu, &E)) {
            result(false, "CPU %s: %s", id, E.msg);
            base_error_clear(&E);
            return -1;
        }
        CK(exec_cuda_kernel_run_id(id, &gu, &E));
    }
    CK(exec_cuda_ctx_sync(X, &E));
    return 0;
}

static int train_one(const char *name, const exec_cfg *cfg, unsigned moe_mask)
{
    say("-- %s: %lld layers, hidden %lld, %lld heads of %lld, vocab %lld, %lld x %lld tokens%s\n",
        name, (long long)cfg->layers, (long long)cfg->h, (long long)cfg->heads,
        (long long)cfg->head_dim, (long long)cfg->vocab, (long long)cfg->b, (long long)cfg->s,
        moe_mask ? ", MoE layers" : "");
    chain ch;
    if (chain_new(&ch, cfg, moe_mask)) {
        chain_free(&ch);
        return -1;
    }
    say("   step   loss CPU fp32   loss GPU bf16   rel diff   |grad| CPU   |grad| GPU   s/step CPU  GPU\n");
    double first_c = 0, first_g = 0, last_c = 0, last_g = 0, worst = 0;
    int done = 0;
    for (int step = 0; step < 10; step++) {
        double lc, lg, nc, ng;
        double t0 = now();
        if (chain_step(&ch, step, &lc, &lg, &nc, &ng)) break;
        double t1 = now();
        double rel = fabs(lg - lc) / fabs(lc);
        if (rel > worst) worst = rel;
        say("   %4d   %13.6f   %13.6f   %8.2e   %10.4f   %10.4f   %.3f (both)\n", step, lc, lg, rel,
            nc, ng, t1 - t0);
        if (step == 0) first_c = lc, first_g = lg;
        last_c = lc, last_g = lg;
        done++;
    }
    char what[128];
    snprintf(what, sizeof what, "%s: 10 steps ran", name);
    result(done == 10, "%-44s %d", what, done);
    snprintf(what, sizeof what, "%s: loss trajectories agree", name);
    result(done == 10 && worst <= 2e-2, "%-44s worst rel diff %.2e (tol 2e-2)", what, worst);
    snprintf(what, sizeof what, "%s: loss goes down", name);
    result(done == 10 && last_c < first_c && last_g < first_g,
           "%-44s CPU %.4f -> %.4f, GPU %.4f -> %.4f", what, first_c, last_c, first_g, last_g);
    chain_free(&ch);
    return 0;
}

static int train_all(void)
{
    say("== (b) 10 training steps, CPU (fp32) vs GPU (bf16), regions chained by this program\n");
    say("   (the plan runtime on CUDA, piper-exec --backend cuda, is not available in this build;\n"
        "    this checks every kernel of a step together: F, B, the norm, clipping, AdamW)\n");
    exec_cfg c = base_cfg(true);
    c.h = 64, c.heads = 4, c.kv_heads = 4, c.head_dim = 16, c.ffn = 128, c.vocab = 64;
    c.tied = true, c.dropout = 0.1, c.init_std = 0.02;
    set_batch(&c, 2, 32, 1);
    train_one("tiny GPT (dropout, tied, learned positions)", &c, 0);
    c = base_cfg(false);
    c.h = 64, c.heads = 4, c.kv_heads = 2, c.head_dim = 16, c.ffn = 128, c.vocab = 64;
    c.experts = 4, c.expert_ffn = 64, c.top_k = 2, c.qk_norm = true, c.init_std = 0.02;
    set_batch(&c, 2, 32, 1.25);
    train_one("tiny MoE Llama (GQA, QK-norm, layer 1 MoE)", &c, 2u);
    return 0;
}

/* ---------------------------------------------------------------- (c) benchmark */

typedef struct pred_row {
    char id[64];
    int count;
    double flops, gemm_flops, bytes, seconds; /* one instruction, as the cost model sees it */
    double measured;                          /* seconds per call; < 0: not measured */
} pred_row;

typedef struct prediction {
    double step, tokens_per_s, mfu, model_flops, peak_bytes, peak_bf16, hbm_bw;
    char gpu[64];
    int n;
    pred_row row[64];
} prediction;

static int read_prediction(const char *path, prediction *p)
{
    memset(p, 0, sizeof *p);
    FILE *f = fopen(path, "r");
    if (!f) return result(false, "cannot open the prediction %s", path), -1;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char key[64], val[256];
        if (line[0] == '#') continue;
        if (!strncmp(line, "kernel\t", 7) && p->n < 64) {
            pred_row *r = &p->row[p->n];
            if (sscanf(line + 7, "%63s %d %lf %lf %lf %lf", r->id, &r->count, &r->flops,
                       &r->gemm_flops, &r->bytes, &r->seconds) == 6) {
                r->measured = -1;
                p->n++;
            }
            continue;
        }
        if (sscanf(line, "%63s %255s", key, val) != 2) continue;
        double v = atof(val);
        if (!strcmp(key, "step_seconds")) p->step = v;
        else if (!strcmp(key, "tokens_per_second")) p->tokens_per_s = v;
        else if (!strcmp(key, "mfu")) p->mfu = v;
        else if (!strcmp(key, "model_flops")) p->model_flops = v;
        else if (!strcmp(key, "peak_bytes")) p->peak_bytes = v;
        else if (!strcmp(key, "peak_bf16")) p->peak_bf16 = v;
        else if (!strcmp(key, "hbm_bw")) p->hbm_bw = v;
        else if (!strcmp(key, "gpu")) snprintf(p->gpu, sizeof p->gpu, "%.63s", val);
    }
    fclose(f);
    return 0;
}

static int kind_of_id(const char *id, exec_region_kind *k, char *pass, size_t npass)
{
    const char *a = strchr(id, '.'), *b = a ? strrchr(id, '.') : NULL;
    if (!a || b == a) return -1;
    for (int i = 0; i < EXEC_NREGION_KINDS; i++) {
        const char *name = exec_region_kind_name((exec_region_kind)i);
        if ((size_t)(b - a - 1) == strlen(name) && !strncmp(a + 1, name, strlen(name))) {
            *k = (exec_region_kind)i;
            snprintf(pass, npass, "%s", b + 1);
            return 0;
        }
    }
    return -1;
}

/* Seconds per call of an identity on a region: a warm-up call, then as many calls as fit in
 * about 0.25 s (3 to 50), the stream synchronised around them. */
static double time_id(region *r, const char *id, const exec_optim *o, const exec_grad_ref *refs,
                      int nrefs)
{
    exec_cuda_call g = call_gpu(r, o);
    g.c.nin = nrefs;
    g.c.grads_in = refs;
    if (exec_cuda_kernel_run_id(id, &g, &E) || exec_cuda_ctx_sync(X, &E)) goto fail;
    double t0 = now();
    if (exec_cuda_kernel_run_id(id, &g, &E) || exec_cuda_ctx_sync(X, &E)) goto fail;
    double one = now() - t0;
    int reps = one > 0 ? (int)(0.25 / one) : 50;
    if (reps < 3) reps = 3;
    if (reps > 50) reps = 50;
    t0 = now();
    for (int i = 0; i < reps; i++)
        if (exec_cuda_kernel_run_id(id, &g, &E)) goto fail;
    if (exec_cuda_ctx_sync(X, &E)) goto fail;
    return (now() - t0) / reps;
fail:
    result(false, "%s: %s", id, E.msg);
    base_error_clear(&E);
    return -1;
}

static int bench(const char *plan_path, const char *pred_path)
{
    say("== (c) benchmark of a training step's kernels, against piper-sim's prediction\n");
    plan_set plan;
    if (plan_read_file(&plan, plan_path, &E)) {
        result(false, "plan %s: %s", plan_path, E.msg);
        base_error_clear(&E);
        return -1;
    }
    prediction pr;
    if (read_prediction(pred_path, &pr)) {
        plan_free(&plan);
        return -1;
    }
    exec_cfg cfg;
    exec_shard sh;
    if (exec_cfg_from_plan(&plan.model, 1, &cfg, &E) ||
        exec_shard_init(&cfg, 1, 0, 1, 0, &sh, &E)) {
        result(false, "model of the plan: %s", E.msg);
        base_error_clear(&E);
        plan_free(&plan);
        return -1;
    }
    char dev[256] = "?";
    exec_cuda_device_describe(0, dev, sizeof dev, &E);
    base_error_clear(&E);
    double peak = pr.peak_bf16 > 0 ? pr.peak_bf16 : plan.gpu.peak_flops[PLAN_BF16];
    if (!(peak > 0)) peak = plan.gpu.peak_flops[PLAN_FP32] > 0 ? plan.gpu.peak_flops[PLAN_FP32] : 1;
    say("   model %s, micro-batch %lld x %lld tokens, on %s\n", plan.model.name,
        (long long)cfg.b, (long long)cfg.s, dev);
    say("   prediction for %s (peak bf16 %.0f TFLOP/s): step %.2f ms, %.0f tokens/s, MFU %.1f%%, "
        "peak memory %.2f GiB\n",
        pr.gpu, peak / 1e12, pr.step * 1e3, pr.tokens_per_s, 100 * pr.mfu,
        pr.peak_bytes / (1024.0 * 1024 * 1024));

    /* one region per kind the plan runs (one layer's buffers; every layer times the same) */
    region rs[EXEC_NREGION_KINDS];
    bool have[EXEC_NREGION_KINDS] = {false};
    memset(rs, 0, sizeof rs);
    for (int i = 0; i < pr.n; i++) {
        exec_region_kind k;
        char pass[16];
        if (kind_of_id(pr.row[i].id, &k, pass, sizeof pass) == 0) have[k] = true;
    }
    int rc = -1;
    const int64_t T = cfg.b * cfg.s;
    for (int k = 0; k < EXEC_NREGION_KINDS; k++) {
        if (!have[k]) continue;
        region *r = &rs[k];
        if (region_new(r, &cfg, &sh, (exec_region_kind)k, 0, false)) goto done;
        for (int i = 0; i < r->np; i++) {
            char name[96];
            snprintf(name, sizeof name, "%s%s", r->prefix, r->p[i].name);
            if (exec_cuda_param_init(X, cfg.seed, name, &r->p[i], r->g.param + r->p[i].offset,
                                     r->g.master + r->p[i].offset, &E))
                goto cuda_error;
        }
        if (r->g.x && exec_cuda_fill_uniform(X, r->g.x, NULL, r->g.sz.x_bytes / 2, 51, -1, 1, &E))
            goto cuda_error;
        if (r->g.dy && exec_cuda_fill_uniform(X, r->g.dy, NULL, r->g.sz.y_bytes / 2, 52, -1, 1, &E))
            goto cuda_error;
        if (r->g.dy2) {
            uint16_t *res;
            float *w;
            exec_cuda_route_view(&cfg, r->g.dy2, &res, &w, NULL);
            if (exec_cuda_fill_uniform(X, res, NULL, T * cfg.h, 53, -1, 1, &E) ||
                exec_cuda_fill_uniform(X, NULL, w, T * cfg.top_k, 54, -1, 1, &E))
                goto cuda_error;
        }
        if (r->g.lm_w && exec_cuda_fill_uniform(X, r->g.lm_w, NULL, r->nlm, 55, -0.02, 0.02, &E))
            goto cuda_error;
        int32_t *ids = NULL;
        if (r->g.tokens || r->g.targets) {
            ids = xcalloc((size_t)T * 4);
            for (int64_t t = 0; t < T; t++)
                ids[t] = (int32_t)(exec_rng_bits(56, (uint64_t)t) % (uint64_t)cfg.vocab);
            int bad = exec_cuda_h2d(X, r->g.tokens ? (void *)r->g.tokens : (void *)r->g.targets,
                                    ids, (size_t)T * 4, &E);
            free(ids);
            if (bad) goto cuda_error;
        }
    }

    exec_optim o;
    memset(&o, 0, sizeof o);
    o.kind = EXEC_ADAMW, o.lr = 1e-4, o.beta1 = 0.9, o.beta2 = 0.95, o.eps = 1e-8;
    o.weight_decay = 0.1, o.t = 1, o.grad_scale = 1;
    /* forward order, so that the combine's route comes from the gate's forward */
    say("   %-26s %5s %10s %8s %6s | %10s %8s | %s\n", "identity", "count", "measured", "TFLOP/s",
        "%peak", "predicted", "TFLOP/s", "measured/predicted");
    double step = 0, step_pred = 0;
    for (int k = 0; k < EXEC_NREGION_KINDS; k++) {
        if (!have[k]) continue;
        static const char *const passes[] = {"F", "R", "B", "BI", "BW", "UPD"};
        for (size_t p = 0; p < BASE_COUNT(passes); p++) {
            char id[64];
            ident(id, sizeof id, &rs[k], passes[p]);
            pred_row *row = NULL;
            for (int i = 0; i < pr.n; i++)
                if (!strcmp(pr.row[i].id, id)) row = &pr.row[i];
            if (!row) continue;
            if (k == EXEC_MOE_COMBINE && have[EXEC_MOE_GATE] &&
                exec_cuda_d2d(X, rs[k].g.x2, rs[EXEC_MOE_GATE].g.y2, (size_t)rs[k].g.sz.route_bytes, &E))
                goto cuda_error;
            double t = time_id(&rs[k], id, &o, NULL, 0);
            if (t < 0) continue;
            row->measured = t;
            step += t * row->count;
            step_pred += row->seconds * row->count;
            say("   %-26s %5d %8.3f ms %8.1f %5.1f%% | %8.3f ms %8.1f | %.2f\n", id, row->count,
                t * 1e3, row->flops / t / 1e12, 100 * row->flops / t / peak, row->seconds * 1e3,
                row->seconds > 0 ? row->flops / row->seconds / 1e12 : 0.0,
                row->seconds > 0 ? t / row->seconds : 0.0);
        }
    }
    /* the step's cross-region numerics: the norm over every layer's gradients (the same buffers
     * named once per layer: the same traffic), the aux-loss sum */
    for (int i = 0; i < pr.n; i++) {
        pred_row *row = &pr.row[i];
        if (strncmp(row->id, "aux.", 4)) continue;
        region *any = NULL;
        for (int k = 0; k < EXEC_NREGION_KINDS && !any; k++)
            if (have[k]) any = &rs[k];
        if (!any) break;
        exec_grad_ref refs[512];
        int nrefs = 0;
        for (int j = 0; j < plan.nregions && nrefs < 512; j++) {
            const char *dot = strrchr(plan.regions[j], '.');
            const char *kname = dot ? dot + 1 : plan.regions[j];
            for (int k = 0; k < EXEC_NREGION_KINDS; k++)
                if (have[k] && !strcmp(kname, exec_region_kind_name((exec_region_kind)k)) && rs[k].np)
                    refs[nrefs++] = (exec_grad_ref){(exec_region_kind)k, rs[k].g.grad};
        }
        double *scal = dalloc(8 * 16);
        double t;
        if (!strcmp(row->id, "aux.grad_norm")) {
            t = time_id(any, row->id, NULL, refs, nrefs);
        } else {
            /* aux.aux_loss reads device scalars: the gate's outputs */
            exec_cuda_call g = call_gpu(any, NULL);
            g.c.nin = 16;
            g.c.scalars_in = scal;
            double t0 = now();
            int bad = exec_cuda_kernel_run_id(row->id, &g, &E) || exec_cuda_ctx_sync(X, &E);
            t = bad ? -1 : now() - t0;
            if (bad) base_error_clear(&E);
        }
        exec_cuda_free(scal);
        if (t < 0) continue;
        row->measured = t;
        step += t * row->count;
        step_pred += row->seconds * row->count;
        say("   %-26s %5d %8.3f ms %8s %6s | %8.3f ms %8s | %.2f\n", row->id, row->count, t * 1e3,
            "-", "-", row->seconds * 1e3, "-", row->seconds > 0 ? t / row->seconds : 0.0);
    }
    int missing = 0;
    for (int i = 0; i < pr.n; i++) missing += pr.row[i].measured < 0;
    result(missing == 0, "%-44s %d of %d identities of the plan timed", "benchmark coverage",
           pr.n - missing, pr.n);
    const double tokens = (double)plan.model.global_batch * (double)plan.model.seq;
    say("   step as the sum of its kernels (no overlap, no communication; one GPU):\n");
    say("     measured  %9.2f ms   %10.0f tokens/s   MFU %5.1f%%\n", step * 1e3, tokens / step,
        100 * pr.model_flops / step / peak);
    say("     piper-sim %9.2f ms   %10.0f tokens/s   MFU %5.1f%%   (sum of its kernel costs %.2f ms)\n",
        pr.step * 1e3, pr.tokens_per_s, 100 * pr.mfu, step_pred * 1e3);
    /* memory: what this backend would hold for the whole step */
    double params = 0, acts = 0;
    for (int j = 0; j < plan.nregions; j++) {
        const char *dot = strrchr(plan.regions[j], '.');
        const char *kname = dot ? dot + 1 : plan.regions[j];
        for (int k = 0; k < EXEC_NREGION_KINDS; k++)
            if (have[k] && !strcmp(kname, exec_region_kind_name((exec_region_kind)k))) {
                params += (double)rs[k].g.sz.params;
                acts += (double)rs[k].g.sz.act_bytes;
            }
    }
    size_t fr = 0, tot = 0;
    exec_cuda_mem_info(&fr, &tot, &E);
    base_error_clear(&E);
    const double gib = 1024.0 * 1024 * 1024;
    say("   memory: %.3g parameters x 18 B (bf16 + fp32 master, grads, Adam) + every region's act "
        "buffer = %.2f GiB estimated for the step (piper-sim's peak: %.2f GiB); this benchmark "
        "holds %.2f GiB (one layer)\n",
        params, (params * 18 + acts) / gib, pr.peak_bytes / gib, (double)(tot - fr) / gib);
    rc = 0;
    goto done;
cuda_error:
    result(false, "benchmark: %s", E.msg);
    base_error_clear(&E);
done:
    for (int k = 0; k < EXEC_NREGION_KINDS; k++)
        if (have[k]) region_free(&rs[k]);
    plan_free(&plan);
    return rc;
}

/* ---------------------------------------------------------------- main */

static void usage(FILE *f)
{
    fprintf(f, "usage: check_kernels [--kernels] [--train] [--bench PLAN PREDICTION] [--out FILE]\n"
               "  --kernels  each CUDA kernel against the fp32 CPU kernels (random inputs)\n"
               "  --train    10 training steps chained on both backends; losses must agree\n"
               "  --bench    time the plan's kernel identities next to piper-sim's prediction\n"
               "  --out FILE append every result line to FILE as it is known\n"
               "  --list     the checks it would run, without touching a GPU\n");
}

int main(int argc, char **argv)
{
    bool kernels = false, train = false, list = false;
    const char *plan = NULL, *pred = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--kernels"))
            kernels = true;
        else if (!strcmp(argv[i], "--train"))
            train = true;
        else if (!strcmp(argv[i], "--list"))
            list = true;
        else if (!strcmp(argv[i], "--bench") && i + 2 < argc)
            plan = argv[++i], pred = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out = argv[++i];
        else {
            usage(argv[i][0] == '-' && argv[i][1] == 'h' ? stdout : stderr);
            return argv[i][0] == '-' && argv[i][1] == 'h' ? 0 : 2;
        }
    }
    if (!kernels && !train && !plan && !list) kernels = train = true;
    if (list) {
        printf("check_kernels would run:\n");
        printf("  (a) GEMM layouts, device initialisation, every region and pass of gpt and llama\n"
               "      (%d identities in the CUDA table) on 5 shapes and 3 shards, the\n"
               "      vocabulary-parallel head as a TP group of 2, AdamW/SGD, gradient norm,\n"
               "      clipping, aux loss\n",
               exec_cuda_kernel_count());
        printf("  (b) 10 AdamW steps of a tiny GPT and a tiny MoE Llama, CPU vs GPU\n");
        if (plan) printf("  (c) the kernel identities of %s against %s\n", plan, pred);
        return 0;
    }
    if (out && !(g_out = fopen(out, "a"))) {
        perror(out);
        return 2;
    }
    base_error_clear(&E);
    int ndev = 0;
    if (exec_cuda_device_count(&ndev, &E) || ndev < 1) {
        say("no CUDA device: %s\n", E.set ? E.msg : "none found");
        return 3;
    }
    char dev[256];
    if (exec_cuda_device_describe(0, dev, sizeof dev, &E) == 0) say("device 0: %s\n", dev);
    if (exec_cuda_ctx_new(&X, 0, NULL, &E)) {
        say("CUDA context: %s\n", E.msg);
        return 3;
    }
    double t0 = now();
    if (kernels) check_kernels_all();
    if (train) train_all();
    if (plan) bench(plan, pred);
    say("== %d checks passed, %d failed (%.1f s)\n", g_pass, g_fail, now() - t0);
    exec_cuda_ctx_free(X);
    if (g_out) fclose(g_out);
    return g_fail ? 1 : 0;
}
