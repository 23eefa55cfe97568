/* test_kernels.c — the CPU kernels one by one: every backward (input and weight gradients)
 * against central finite differences in fp64 (relative error <= 1e-6), for the building blocks
 * and for every region of both families (dropout on for GPT, QK-norm and GQA for Llama, the MoE
 * router with its routing held fixed and some tokens over capacity); tensor-parallel and
 * expert-parallel shards against the unsharded region (1e-12 in fp64); the router's top-k,
 * capacity and tie-breaking on hand-made logits; initialisation of shards against slices of
 * the whole; AdamW and SGD against hand-computed steps; clipping and the gradient norm. */
#include "harness.h"

#define FD_TOL 1e-6
#define TP_TOL 1e-12

/* ---------------------------------------------------------------- building blocks */

typedef struct bb_ctx {
    int which;               /* 0 LayerNorm, 1 RMSNorm, 2 GELU, 3 SwiGLU, 4 RoPE */
    int64_t rows, n;
    double *x, *x2, *g, *b, *y, *y2, *r, *r2, *mean, *rstd, *cs;
} bb_ctx;

static double bb_obj(void *p)
{
    bb_ctx *c = p;
    int64_t n = c->rows * c->n;
    switch (c->which) {
    case 0: exec_layernorm_f_f64(c->x, c->g, c->b, c->y, c->mean, c->rstd, c->rows, c->n, 1e-5); break;
    case 1: exec_rmsnorm_f_f64(c->x, c->g, c->y, c->rstd, c->rows, c->n, 1e-5); break;
    case 2: exec_gelu_f_f64(c->x, c->y, n); break;
    case 3: exec_swiglu_f_f64(c->x, c->x2, c->y, n); break;
    default:
        memcpy(c->y, c->x, (size_t)n * sizeof(double));
        exec_rope_apply_f64(c->y, c->rows, 2, c->n / 2, 3, c->cs, false);
        break;
    }
    double J = 0;
    for (int64_t i = 0; i < n; i++) J += c->y[i] * c->r[i];
    return J;
}

static void test_building_blocks(void)
{
    const int64_t rows = 6, n = 8, N = rows * n;
    double x[48], x2[48], g[8], b[8], y[48], y2[48], r[48], r2[48], mean[6], rstd[6], cs[3 * 2 * 2];
    double dx[48], dx2[48], dg[8], db[8];
    fill_uniform(x, N, PLAN_FP64, 1, -2, 2);
    fill_uniform(x2, N, PLAN_FP64, 2, -2, 2);
    fill_uniform(g, n, PLAN_FP64, 3, 0.5, 1.5);
    fill_uniform(b, n, PLAN_FP64, 4, -0.5, 0.5);
    fill_uniform(r, N, PLAN_FP64, 5, -1, 1);
    exec_rope_table_f64(cs, 3, 4, 10000.0);
    bb_ctx c = {0, rows, n, x, x2, g, b, y, y2, r, r2, mean, rstd, cs};

    /* LayerNorm */
    c.which = 0;
    bb_obj(&c);
    exec_layernorm_bi_f64(r, x, g, mean, rstd, dx, rows, n, false);
    memset(dg, 0, sizeof dg);
    memset(db, 0, sizeof db);
    exec_layernorm_bw_f64(r, x, mean, rstd, dg, db, rows, n);
    fd_check("layernorm dx", x, N, dx, bb_obj, &c, FD_TOL);
    fd_check("layernorm dg", g, n, dg, bb_obj, &c, FD_TOL);
    fd_check("layernorm db", b, n, db, bb_obj, &c, FD_TOL);
    /* accumulate adds to what is there */
    double acc[48];
    for (int64_t i = 0; i < N; i++) acc[i] = 1.0;
    exec_layernorm_bi_f64(r, x, g, mean, rstd, acc, rows, n, true);
    double worst = 0;
    for (int64_t i = 0; i < N; i++) worst = fmax(worst, fabs(acc[i] - 1.0 - dx[i]));
    CU_ASSERT(worst < 1e-15);

    /* RMSNorm */
    c.which = 1;
    bb_obj(&c);
    exec_rmsnorm_bi_f64(r, x, g, rstd, dx, rows, n, false);
    memset(dg, 0, sizeof dg);
    exec_rmsnorm_bw_f64(r, x, rstd, dg, rows, n);
    fd_check("rmsnorm dx", x, N, dx, bb_obj, &c, FD_TOL);
    fd_check("rmsnorm dg", g, n, dg, bb_obj, &c, FD_TOL);

    /* GELU and its closed-form values: gelu(0) = 0, gelu(x) -> x for large x */
    c.which = 2;
    exec_gelu_bi_f64(r, x, dx, N);
    fd_check("gelu dx", x, N, dx, bb_obj, &c, FD_TOL);
    double probe[3] = {0, 10, -10}, out[3];
    exec_gelu_f_f64(probe, out, 3);
    CU_ASSERT(out[0] == 0 && fabs(out[1] - 10) < 1e-12 && fabs(out[2]) < 1e-12);

    /* SwiGLU */
    c.which = 3;
    exec_swiglu_bi_f64(r, x, x2, dx, dx2, N);
    fd_check("swiglu dg", x, N, dx, bb_obj, &c, FD_TOL);
    fd_check("swiglu du", x2, N, dx2, bb_obj, &c, FD_TOL);

    /* RoPE: 6 tokens of 2 heads of 4, sequence 3. A rotation keeps norms, position 0 is the
     * identity, and the inverse is the backward. */
    c.which = 4;
    bb_obj(&c);
    double n0 = 0, n1 = 0;
    for (int64_t i = 0; i < N; i++) {
        n0 += x[i] * x[i];
        n1 += y[i] * y[i];
    }
    CU_ASSERT(fabs(n0 - n1) < 1e-12 * n0);
    for (int i = 0; i < 8; i++) CU_ASSERT(fabs(y[i] - x[i]) < 1e-15); /* token 0: position 0 */
    memcpy(dx, r, sizeof r);
    exec_rope_apply_f64(dx, rows, 2, 4, 3, cs, true);
    fd_check("rope dx", x, N, dx, bb_obj, &c, FD_TOL);
    (void)x2;
    (void)y2;
    (void)r2;
}

/* ---------------------------------------------------------------- regions */

typedef struct rctx {
    rinst *r;
    double *ry, *r_resid, *r_w;
} rctx;

static double region_obj(void *p)
{
    rctx *c = p;
    rinst *r = c->r;
    if (rinst_run(r, "F")) {
        CU_FAIL("forward failed");
        return 0;
    }
    if (r->kind == EXEC_HEAD) return r->out;
    double J = 0;
    const double *y = r->y;
    for (int64_t i = 0; i < r->sz.y; i++) J += y[i] * c->ry[i];
    if (r->kind == EXEC_MOE_GATE) {
        double *resid, *w;
        exec_route_view_f64(r->cfg, r->route, &resid, &w, NULL);
        int64_t T = r->cfg->b * r->cfg->s;
        for (int64_t i = 0; i < T * r->cfg->h; i++) J += resid[i] * c->r_resid[i];
        for (int64_t i = 0; i < T * r->cfg->top_k; i++) J += w[i] * c->r_w[i];
        J += r->cfg->aux_weight * r->out;
    }
    return J;
}

/* A valid route for a combine tested on its own: choice (t, k) takes slot t*k + k, except a few
 * dropped ones. */
static void make_route(const exec_cfg *cfg, void *route, uint64_t key)
{
    double *resid, *w;
    int32_t *slot;
    exec_route_view_f64(cfg, route, &resid, &w, &slot);
    int64_t T = cfg->b * cfg->s, k = cfg->top_k, nslots = cfg->experts * cfg->capacity;
    fill_uniform(resid, T * cfg->h, PLAN_FP64, key, -1, 1);
    fill_uniform(w, T * k, PLAN_FP64, key + 1, 0.05, 0.6);
    for (int64_t i = 0; i < T * k; i++) slot[i] = i < nslots && i % 7 != 3 ? (int32_t)i : -1;
}

/* F, BI and BW of one region against finite differences of J = sum(y * r) (+ the gate's route
 * and aux loss; the head's loss). */
static void region_fd(exec_cfg *cfg, exec_region_kind kind, const char *label)
{
    exec_shard sh;
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_FATAL(exec_shard_init(cfg, 1, 0, 1, 0, &sh, &e) == 0);
    rinst r;
    rinst_init(&r, cfg, &sh, kind, 1, PLAN_FP64);
    rinst_init_params(&r, 0.3);
    r.sample0 = 3;
    r.step = 2;
    const int64_t T = cfg->b * cfg->s;
    if (kind == EXEC_EMBED) {
        for (int64_t t = 0; t < T; t++) r.tokens[t] = (int32_t)((t * 7 + 3) % cfg->vocab);
    } else {
        fill_uniform(r.x, r.sz.x, PLAN_FP64, 11, -1.5, 1.5);
    }
    if (kind == EXEC_HEAD)
        for (int64_t t = 0; t < T; t++) r.targets[t] = (int32_t)((t * 5 + 1) % cfg->vocab);
    double *lm = NULL, *glm = NULL;
    if (kind == EXEC_HEAD && cfg->tied) {
        lm = xcalloc((size_t)(cfg->vocab * cfg->h) * 8);
        glm = xcalloc((size_t)(cfg->vocab * cfg->h) * 8);
        fill_uniform(lm, cfg->vocab * cfg->h, PLAN_FP64, 12, -0.5, 0.5);
        r.lm_w = lm;
        r.lm_grad = glm;
    }
    if (kind == EXEC_MOE_COMBINE) {
        r.route = xcalloc((size_t)r.sz.route_bytes);
        r.droute = xcalloc((size_t)r.sz.route_bytes);
        make_route(cfg, r.route, 13);
    }
    rctx c = {&r, xcalloc((size_t)(r.sz.y ? r.sz.y : 1) * 8), NULL, NULL};
    fill_uniform(c.ry, r.sz.y, PLAN_FP64, 14, -1, 1);
    memcpy(r.dy, c.ry, (size_t)r.sz.y * 8);
    if (kind == EXEC_MOE_GATE) {
        c.r_resid = xcalloc((size_t)(T * cfg->h) * 8);
        c.r_w = xcalloc((size_t)(T * cfg->top_k) * 8);
        fill_uniform(c.r_resid, T * cfg->h, PLAN_FP64, 15, -1, 1);
        fill_uniform(c.r_w, T * cfg->top_k, PLAN_FP64, 16, -1, 1);
        double *dres, *dw;
        exec_route_view_f64(cfg, r.droute, &dres, &dw, NULL);
        memcpy(dres, c.r_resid, (size_t)(T * cfg->h) * 8);
        memcpy(dw, c.r_w, (size_t)(T * cfg->top_k) * 8);
    }

    /* analytic: F (routing decided here), then B as BI and BW */
    CU_ASSERT_FATAL(rinst_run(&r, "F") == 0);
    r.keep_routing = true;
    if (kind == EXEC_MOE_GATE) {
        /* the checks below should see dropped tokens and kept ones */
        int32_t *slot;
        exec_route_view_f64(cfg, r.route, NULL, NULL, &slot);
        int dropped = 0;
        for (int64_t i = 0; i < T * cfg->top_k; i++) dropped += slot[i] < 0;
        if (!(dropped > 0 && dropped < T * cfg->top_k))
            fprintf(stderr, "\n  %s: %d of %lld choices dropped\n", label, dropped,
                    (long long)(T * cfg->top_k));
        CU_ASSERT(dropped > 0 && dropped < T * cfg->top_k);
    }
    CU_ASSERT_FATAL(rinst_run(&r, "B") == 0);
    double *gx = xcalloc((size_t)r.sz.x * 8), *gp = xcalloc((size_t)r.sz.params * 8);
    memcpy(gx, r.dx, (size_t)r.sz.x * 8);
    memcpy(gp, r.grad, (size_t)r.sz.params * 8);
    char what[128];
    if (kind != EXEC_EMBED) {
        snprintf(what, sizeof what, "%s dx", label);
        fd_check(what, r.x, r.sz.x, gx, region_obj, &c, FD_TOL);
    }
    if (kind == EXEC_MOE_COMBINE) {
        double *res, *w, *dres, *dw;
        exec_route_view_f64(cfg, r.route, &res, &w, NULL);
        exec_route_view_f64(cfg, r.droute, &dres, &dw, NULL);
        double *a1 = xcalloc((size_t)(T * cfg->h) * 8), *a2 = xcalloc((size_t)(T * cfg->top_k) * 8);
        memcpy(a1, dres, (size_t)(T * cfg->h) * 8);
        memcpy(a2, dw, (size_t)(T * cfg->top_k) * 8);
        snprintf(what, sizeof what, "%s d residual", label);
        fd_check(what, res, T * cfg->h, a1, region_obj, &c, FD_TOL);
        snprintf(what, sizeof what, "%s d weights", label);
        fd_check(what, w, T * cfg->top_k, a2, region_obj, &c, FD_TOL);
        free(a1);
        free(a2);
    }
    for (int i = 0; i < r.np; i++) {
        snprintf(what, sizeof what, "%s d%s", label, r.p[i].name);
        if (strcmp(r.p[i].name, "bk") == 0) {
            /* The key bias adds q.bk to every score of a row, which softmax ignores: its gradient
             * is zero (the rows of dS sum to 0), so there is nothing for differences to see. */
            double ss = 0, sq = 0;
            for (int64_t j = 0; j < r.p[i].count; j++) ss += gp[r.p[i].offset + j] * gp[r.p[i].offset + j];
            const exec_param *bq = &r.p[i - 2];
            for (int64_t j = 0; j < bq->count; j++) sq += gp[bq->offset + j] * gp[bq->offset + j];
            CU_ASSERT(strcmp(bq->name, "bq") == 0 && sqrt(ss) < 1e-12 * sqrt(sq));
            continue;
        }
        fd_check(what, (double *)r.param + r.p[i].offset, r.p[i].count, gp + r.p[i].offset,
                 region_obj, &c, FD_TOL);
    }
    if (lm) {
        double *a = xcalloc((size_t)(cfg->vocab * cfg->h) * 8);
        memcpy(a, glm, (size_t)(cfg->vocab * cfg->h) * 8);
        snprintf(what, sizeof what, "%s d(tied lm)", label);
        fd_check(what, lm, cfg->vocab * cfg->h, a, region_obj, &c, FD_TOL);
        free(a);
    }

    /* BW accumulates: a second BW doubles the gradient */
    CU_ASSERT(rinst_run(&r, "F") == 0);
    CU_ASSERT(rinst_run(&r, "BI") == 0);
    memset(r.grad, 0, (size_t)r.sz.params * 8);
    CU_ASSERT(rinst_run(&r, "BW") == 0);
    CU_ASSERT(rinst_run(&r, "BW") == 0);
    double worst = 0;
    for (int64_t i = 0; i < r.sz.params; i++)
        worst = fmax(worst, fabs(((double *)r.grad)[i] - 2 * gp[i]));
    CU_ASSERT(worst < 1e-12);

    if (kind == EXEC_MOE_COMBINE) r.shared_route = false;
    free(gx);
    free(gp);
    free(c.ry);
    free(c.r_resid);
    free(c.r_w);
    free(lm);
    free(glm);
    rinst_free(&r);
}

static void test_fd_gpt(void)
{
    exec_cfg c = small_cfg(true);
    region_fd(&c, EXEC_EMBED, "gpt embed (dropout)");
    region_fd(&c, EXEC_ATTN, "gpt attn (dropout)");
    region_fd(&c, EXEC_MLP, "gpt mlp (dropout)");
    region_fd(&c, EXEC_HEAD, "gpt head (tied)");
    c.dropout = 0;
    region_fd(&c, EXEC_EMBED, "gpt embed");
    region_fd(&c, EXEC_ATTN, "gpt attn");
    region_fd(&c, EXEC_MLP, "gpt mlp");
    c.tied = false;
    region_fd(&c, EXEC_HEAD, "gpt head (untied)");
}

static void test_fd_llama(void)
{
    exec_cfg c = small_cfg(false);
    region_fd(&c, EXEC_EMBED, "llama embed");
    region_fd(&c, EXEC_ATTN, "llama attn (GQA, QK-norm, RoPE)");
    region_fd(&c, EXEC_MLP, "llama mlp");
    region_fd(&c, EXEC_HEAD, "llama head");
    c.qk_norm = false;
    c.kv_heads = 2;
    region_fd(&c, EXEC_ATTN, "llama attn (MHA, no QK-norm)");
    c.tied = true;
    region_fd(&c, EXEC_HEAD, "llama head (tied)");
}

static void test_fd_moe(void)
{
    exec_cfg c = small_cfg(false);
    region_fd(&c, EXEC_MOE_GATE, "moe_gate");
    region_fd(&c, EXEC_MOE_EXPERTS, "moe_experts");
    region_fd(&c, EXEC_MOE_COMBINE, "moe_combine");
    c.top_k = 1;
    c.capacity = 3;
    c.aux_coef = 0.5;
    region_fd(&c, EXEC_MOE_GATE, "moe_gate (top-1, strong aux)");
}

/* ---------------------------------------------------------------- the router by hand */

/* Logits are set through the router weights: with xn the normalised input and Wr chosen so
 * that logits[t] = given values, probabilities and choices are known in advance. */
/* Recompute splits (kernels.h, exec_act_mode): F keeping only its part of the act buffer (the
 * rest in a transient buffer, overwritten after F), then R rebuilding the other part, then B
 * reading both, gives exactly the input and weight gradients of F and B with everything kept;
 * under full recompute R reads its input from what F kept, as the executor passes it. */
static void split_check(exec_cfg *cfg, exec_region_kind kind, const char *label)
{
    exec_shard sh;
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_FATAL(exec_shard_init(cfg, 1, 0, 1, 0, &sh, &e) == 0);
    rinst r;
    rinst_init(&r, cfg, &sh, kind, 1, PLAN_FP64);
    rinst_init_params(&r, 0.3);
    r.sample0 = 3;
    r.step = 2;
    fill_uniform(r.x, r.sz.x, PLAN_FP64, 31, -1.5, 1.5);
    fill_uniform(r.dy, r.sz.y, PLAN_FP64, 32, -1, 1);
    if (kind == EXEC_MOE_COMBINE) {
        r.route = xcalloc((size_t)r.sz.route_bytes);
        r.droute = xcalloc((size_t)r.sz.route_bytes);
        make_route(cfg, r.route, 33);
    }
    if (kind == EXEC_MOE_GATE) fill_uniform(r.droute, (int64_t)(r.sz.route_bytes / 8), PLAN_FP64, 34, -1, 1);
    char id[64];
    const char *fam = cfg->gpt ? "gpt" : "llama", *kn = exec_region_kind_name(kind);
    /* the reference: everything kept */
    snprintf(id, sizeof id, "%s.%s.F", fam, kn);
    exec_call c0 = rinst_call(&r);
    CU_ASSERT_FATAL(exec_kernel_run_id(id, &c0, &e) == 0);
    snprintf(id, sizeof id, "%s.%s.B", fam, kn);
    CU_ASSERT_FATAL(exec_kernel_run_id(id, &c0, &e) == 0);
    double *dx0 = xcalloc((size_t)r.sz.x * 8), *g0 = xcalloc((size_t)r.sz.params * 8);
    memcpy(dx0, r.dx, (size_t)r.sz.x * 8);
    memcpy(g0, r.grad, (size_t)r.sz.params * 8);
    for (int mode = EXEC_ACT_SELECTIVE; mode < EXEC_NACT_MODES; mode++) {
        int64_t kept, rebuilt;
        CU_ASSERT_FATAL(exec_region_act_split(cfg, &sh, kind, PLAN_FP64, (exec_act_mode)mode, &kept,
                                              &rebuilt, &e) == 0);
        /* the combine keeps its residual too under full recompute (its whole input) */
        CU_ASSERT(kept + rebuilt == r.sz.act_bytes +
                                        (kind == EXEC_MOE_COMBINE && mode == EXEC_ACT_INPUT
                                             ? cfg->b * cfg->s * cfg->h * 8
                                             : 0));
        void *act = xcalloc((size_t)kept), *tmp = xcalloc((size_t)rebuilt), *act2 = xcalloc((size_t)rebuilt);
        memset(r.grad, 0, (size_t)r.sz.params * 8);
        memset(r.dx, 0, (size_t)r.sz.x * 8);
        exec_call c = rinst_call(&r);
        c.act_mode = mode;
        c.act = act;
        c.act2 = tmp;
        snprintf(id, sizeof id, "%s.%s.F", fam, kn);
        CU_ASSERT_FATAL(exec_kernel_run_id(id, &c, &e) == 0);
        memset(tmp, 0x5a, (size_t)rebuilt); /* F's transient part is gone */
        memset(act2, 0xa5, (size_t)rebuilt);
        c.act2 = act2;
        if (mode == EXEC_ACT_NONE) c.act = act2;
        if (mode == EXEC_ACT_INPUT) c.x = act;
        if (mode == EXEC_ACT_INPUT && kind == EXEC_MOE_COMBINE) c.x2 = (char *)act + (size_t)r.sz.x * 8;
        snprintf(id, sizeof id, "%s.%s.R", fam, kn);
        CU_ASSERT_FATAL(exec_kernel_run_id(id, &c, &e) == 0);
        c.x = r.x;
        c.x2 = kind == EXEC_MOE_COMBINE ? r.route : NULL;
        snprintf(id, sizeof id, "%s.%s.B", fam, kn);
        CU_ASSERT_FATAL(exec_kernel_run_id(id, &c, &e) == 0);
        bool same = memcmp(dx0, r.dx, (size_t)r.sz.x * 8) == 0 &&
                    memcmp(g0, r.grad, (size_t)r.sz.params * 8) == 0;
        if (!same) fprintf(stderr, "\n  %s, mode %d: gradients differ from keeping everything\n", label, mode);
        CU_ASSERT(same);
        free(act);
        free(tmp);
        free(act2);
    }
    free(dx0);
    free(g0);
    rinst_free(&r);
}

static void test_recompute_splits(void)
{
    exec_cfg g = small_cfg(true), l = small_cfg(false);
    split_check(&g, EXEC_ATTN, "gpt attn (dropout)");
    split_check(&g, EXEC_MLP, "gpt mlp (dropout)");
    split_check(&l, EXEC_ATTN, "llama attn (QK-norm, RoPE, GQA)");
    split_check(&l, EXEC_MLP, "llama mlp");
    split_check(&l, EXEC_MOE_GATE, "moe gate");
    split_check(&l, EXEC_MOE_EXPERTS, "moe experts");
    split_check(&l, EXEC_MOE_COMBINE, "moe combine");
}

static void test_router_capacity(void)
{
    exec_cfg cfg = small_cfg(false);
    cfg.b = 1;
    cfg.s = 6;
    cfg.h = 4;
    cfg.experts = 3;
    cfg.top_k = 2;
    cfg.capacity = 3;
    cfg.aux_coef = 0.1;
    cfg.norm_eps = 1e-300; /* so that xn of a one-hot x is exactly 2 e_j */
    exec_shard sh;
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_FATAL(exec_shard_init(&cfg, 1, 0, 1, 0, &sh, &e) == 0);
    rinst r;
    rinst_init(&r, &cfg, &sh, EXEC_MOE_GATE, 0, PLAN_FP64);
    /* norm.g = 1 and x[t] one-hot on a dimension d(t): RMSNorm gives xn = sqrt(h) e_d = 2 e_d,
     * so the logits of token t are 2 Wr[d(t)][:] = L[d(t)]. */
    double *g = rinst_param(&r, "norm.g"), *wr = rinst_param(&r, "router");
    for (int j = 0; j < 4; j++) g[j] = 1;
    /* logits by dimension: d0 (0, 0, 0) a three-way tie; d1 (1, 3, 2); d2 (5, 1, 1); d3 (0, 2, 2) */
    const double L[4][3] = {{0, 0, 0}, {1, 3, 2}, {5, 1, 1}, {0, 2, 2}};
    for (int d = 0; d < 4; d++)
        for (int ex = 0; ex < 3; ex++) wr[d * 3 + ex] = L[d][ex] / 2.0;
    double *x = r.x;
    const int dim_of[6] = {0, 1, 2, 3, 1, 1};
    for (int t = 0; t < 6; t++)
        for (int j = 0; j < 4; j++) x[t * 4 + j] = j == dim_of[t] ? 1.0 : 0.0;
    CU_ASSERT_FATAL(rinst_run(&r, "F") == 0);
    int32_t *slot;
    double *w;
    exec_route_view_f64(&cfg, r.route, NULL, &w, &slot);
    /* top-2 choices, ties to the lower index:
     *   t0 (0,0,0): 0, 1   t1 (1,3,2): 1, 2   t2 (5,1,1): 0, 1   t3 (0,2,2): 1, 2
     *   t4, t5 like t1: 1, 2
     * slots by rank then token: first choices 0,1,0,1,1,1 -> expert 1 takes t1, t3, t4 and is
     * full, t5's first choice is dropped; second choices 1,2,1,2,2,2: expert 1 is full (t0, t2
     * dropped), expert 2 takes t1, t3, t4, and t5's second choice is dropped. */
    const int32_t want[6][2] = {{0 * 3 + 0, -1}, {1 * 3 + 0, 2 * 3 + 0}, {0 * 3 + 1, -1},
                                {1 * 3 + 1, 2 * 3 + 1}, {1 * 3 + 2, 2 * 3 + 2}, {-1, -1}};
    for (int t = 0; t < 6; t++)
        for (int k = 0; k < 2; k++) {
            if (slot[t * 2 + k] != want[t][k])
                fprintf(stderr, "\n  token %d choice %d: slot %d, want %d\n", t, k,
                        (int)slot[t * 2 + k], (int)want[t][k]);
            CU_ASSERT(slot[t * 2 + k] == want[t][k]);
        }
    /* weights are the softmax probabilities of the chosen experts */
    double p1[3] = {exp(1), exp(3), exp(2)}, s1 = p1[0] + p1[1] + p1[2];
    CU_ASSERT(fabs(w[1 * 2 + 0] - p1[1] / s1) < 1e-14);
    CU_ASSERT(fabs(w[1 * 2 + 1] - p1[2] / s1) < 1e-14);
    CU_ASSERT(fabs(w[0] - 1.0 / 3.0) < 1e-14);
    /* the dispatched buffer holds xn in used slots, zeros elsewhere: slot (2, 2) is empty... */
    const double *buf = r.y;
    CU_ASSERT(buf[(1 * 3 + 0) * 4 + 1] == 2.0); /* t1's xn = 2 e_1 in expert 1, slot 0 */
    double empty = 0;
    for (int j = 0; j < 4; j++) empty += fabs(buf[(0 * 3 + 2) * 4 + j]);
    CU_ASSERT(empty == 0); /* expert 0 got only two tokens */
    /* aux = coef * E * sum_e f_e P_e with f = choices / (T k) = (2, 6, 4) / 12 */
    double P[3] = {0, 0, 0};
    for (int t = 0; t < 6; t++) {
        const double *l = L[dim_of[t]];
        double z = exp(l[0]) + exp(l[1]) + exp(l[2]);
        for (int ex = 0; ex < 3; ex++) P[ex] += exp(l[ex]) / z / 6.0;
    }
    double f[3] = {2.0 / 12, 6.0 / 12, 4.0 / 12};
    double aux = 0.1 * 3 * (f[0] * P[0] + f[1] * P[1] + f[2] * P[2]);
    CU_ASSERT(fabs(r.out - aux) < 1e-14);
    rinst_free(&r);
}

/* ---------------------------------------------------------------- sharding */

static const exec_param *find_param(const exec_param *p, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(p[i].name, name) == 0) return &p[i];
    return NULL;
}

/* Copies (add = false) a shard's block out of a whole tensor, or adds (add = true) a shard's
 * block into it. The whole tensor's exec_param has off 0 and len = dim. */
static void block_xfer(const exec_param *whole, double *wblock, const exec_param *part,
                       double *pblock, bool add)
{
    double *W = wblock + whole->offset, *P = pblock + part->offset;
    int64_t i = 0;
    for (int64_t a = 0; a < part->len[0]; a++)
        for (int64_t b = 0; b < part->len[1]; b++)
            for (int64_t c = 0; c < part->len[2]; c++, i++) {
                int64_t g = ((part->off[0] + a) * part->dim[1] + part->off[1] + b) * part->dim[2] +
                            part->off[2] + c;
                if (add)
                    W[g] += P[i];
                else
                    P[i] = W[g];
            }
}

static double max_abs_diff(const double *a, const double *b, int64_t n, double *scale)
{
    double d = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs(a[i] - b[i]));
        s = fmax(s, fabs(b[i]));
    }
    if (scale) *scale = s;
    return d;
}

/* max |a - b| / max |b|, asserting that b is not all zeros (a comparison with nothing). */
static double rel_diff(const double *a, const double *b, int64_t n)
{
    double s, d = max_abs_diff(a, b, n, &s);
    CU_ASSERT(s > 0);
    return s > 0 ? d / s : d;
}

static void assert_close(const char *what, const double *a, const double *b, int64_t n, double tol)
{
    double s, d = max_abs_diff(a, b, n, &s);
    double rel = s > 0 ? d / s : d;
    if (!(rel <= tol)) fprintf(stderr, "\n  %s: max difference %.3g (scale %.3g)\n", what, d, s);
    CU_ASSERT(rel <= tol);
    CU_ASSERT(s > 0);
}

static double tp_worst = 0;

/* The region on tp shards against the whole: outputs and input gradients sum to the whole's,
 * gradients scatter-added into whole tensors equal the whole's. With sequence parallelism (sp)
 * each shard keeps the norm input and output (and the output dropout mask) of its b*s/tp tokens
 * only, at the front of its act buffer: its act buffer is smaller than the whole's by exactly
 * (b*s - b*s/tp) * (2h reals + h mask bytes) (ir/cost.c), and its backward reads the others'
 * from the all-gather of those fronts, built here as the plan's all-gather does. */
static void shard_check_mode(exec_cfg *cfg, exec_region_kind kind, int tp, int ep, bool sp,
                             const char *label)
{
    base_error e;
    base_error_clear(&e);
    exec_shard whole;
    CU_ASSERT_FATAL(exec_shard_init(cfg, 1, 0, 1, 0, &whole, &e) == 0);
    rinst W;
    rinst_init(&W, cfg, &whole, kind, 0, PLAN_FP64);
    rinst_init_params(&W, 0.3);
    const int64_t T = cfg->b * cfg->s;
    if (kind == EXEC_EMBED)
        for (int64_t t = 0; t < T; t++) W.tokens[t] = (int32_t)((t * 7 + 3) % cfg->vocab);
    else
        fill_uniform(W.x, W.sz.x, PLAN_FP64, 21, -1.5, 1.5);
    if (kind == EXEC_HEAD)
        for (int64_t t = 0; t < T; t++) W.targets[t] = (int32_t)((t * 5 + 1) % cfg->vocab);
    fill_uniform(W.dy, W.sz.y, PLAN_FP64, 22, -1, 1);
    /* a tied head reads the token table (whole here, a vocabulary slice of it on a shard) */
    const bool tied_head = kind == EXEC_HEAD && cfg->tied;
    const int64_t VH = cfg->vocab * cfg->h;
    double *lm = NULL, *lm_g = NULL, *lm_gsum = NULL;
    if (tied_head) {
        lm = xcalloc((size_t)VH * 8);
        lm_g = xcalloc((size_t)VH * 8);
        lm_gsum = xcalloc((size_t)VH * 8);
        fill_uniform(lm, VH, PLAN_FP64, 23, -0.5, 0.5);
        W.lm_w = lm;
        W.lm_grad = lm_g;
    }
    CU_ASSERT_FATAL(rinst_run(&W, "F") == 0);
    CU_ASSERT_FATAL(rinst_run(&W, "B") == 0);

    int n = tp > 1 ? tp : ep;
    double *ysum = xcalloc((size_t)(W.sz.y + 1) * 8), *dxsum = xcalloc((size_t)(W.sz.x + 1) * 8);
    double *gsum = xcalloc((size_t)W.sz.params * 8), loss = 0;
    double stats_g[3 * 64];
    CU_ASSERT_FATAL(3 * T <= 3 * 64);
    rinst S[4];
    for (int k = 0; k < n; k++) {
        exec_shard sh;
        CU_ASSERT_FATAL(exec_shard_init(cfg, tp, tp > 1 ? k : 0, ep, ep > 1 ? k : 0, &sh, &e) == 0);
        CU_ASSERT_FATAL(exec_shard_set_sp(cfg, &sh, sp, &e) == 0);
        rinst_init(&S[k], cfg, &sh, kind, 0, PLAN_FP64);
        if (sp) {
            const int64_t tl = T / tp, h = cfg->h;
            const bool mask = cfg->dropout > 0 && kind != EXEC_HEAD;
            exec_shard nsp = sh;
            nsp.sp = false;
            exec_region_sizes full;
            CU_ASSERT_FATAL(exec_region_sizes_get(cfg, &nsp, kind, PLAN_FP64, &full, &e) == 0);
            int64_t kept = (kind == EXEC_EMBED ? 0 : 2 * h * 8) + (mask ? h : 0);
            CU_ASSERT_EQUAL(full.act_bytes - S[k].sz.act_bytes, (T - tl) * kept);
        }
        for (int i = 0; i < S[k].np; i++)
            block_xfer(find_param(W.p, W.np, S[k].p[i].name), W.param, &S[k].p[i], S[k].param,
                       false);
        if (kind == EXEC_EMBED)
            memcpy(S[k].tokens, W.tokens, (size_t)T * 4);
        else if (kind != EXEC_MOE_EXPERTS)
            memcpy(S[k].x, W.x, (size_t)W.sz.x * 8);
        if (kind == EXEC_HEAD) memcpy(S[k].targets, W.targets, (size_t)T * 4);
        if (kind != EXEC_MOE_EXPERTS) memcpy(S[k].dy, W.dy, (size_t)W.sz.y * 8);
        if (tied_head) {
            S[k].lm_w = lm + sh.vocab0 * cfg->h;
            S[k].lm_grad = lm_gsum + sh.vocab0 * cfg->h; /* disjoint rows: the slices tile it */
        }
    }
    if (kind == EXEC_MOE_EXPERTS) {
        for (int k = 0; k < n; k++) {
            memcpy(S[k].x, W.x, (size_t)W.sz.x * 8);
            memcpy(S[k].dy, W.dy, (size_t)W.sz.y * 8);
        }
    }
    if (kind == EXEC_HEAD) {
        /* the vocab-parallel loss by phases, reducing the statistics by hand */
        double st[4][3 * 64];
        for (int k = 0; k < n; k++) {
            exec_call c = rinst_call(&S[k]);
            CU_ASSERT_FATAL(exec_head_f_begin_f64(&c, st[k], &e) == 0);
        }
        for (int64_t t = 0; t < T; t++) {
            stats_g[t] = st[0][t];
            for (int k = 1; k < n; k++) stats_g[t] = fmax(stats_g[t], st[k][t]);
        }
        for (int k = 0; k < n; k++) {
            memcpy(st[k], stats_g, (size_t)T * 8);
            exec_call c = rinst_call(&S[k]);
            CU_ASSERT_FATAL(exec_head_f_sums_f64(&c, st[k], &e) == 0);
        }
        for (int64_t t = T; t < 3 * T; t++) {
            stats_g[t] = 0;
            for (int k = 0; k < n; k++) stats_g[t] += st[k][t];
        }
        for (int k = 0; k < n; k++) {
            exec_call c = rinst_call(&S[k]);
            CU_ASSERT_FATAL(exec_head_f_end_f64(&c, stats_g, &e) == 0);
            loss += S[k].out;
            CU_ASSERT(k == 0 || S[k].out == 0);
        }
    }
    for (int k = 0; k < n; k++)
        if (kind != EXEC_HEAD) CU_ASSERT_FATAL(rinst_run(&S[k], "F") == 0);
    double *xg = NULL;
    if (sp && kind != EXEC_EMBED) {
        /* the all-gather of the fronts of the act buffers: [x_k | xn_k] for k = 0..tp-1 */
        const int64_t blk = 2 * (T / tp) * cfg->h;
        xg = xcalloc((size_t)(n * blk) * 8);
        for (int k = 0; k < n; k++) {
            memcpy(xg + k * blk, S[k].act, (size_t)blk * 8);
            S[k].xg = xg;
        }
    }
    for (int k = 0; k < n; k++) {
        CU_ASSERT_FATAL(rinst_run(&S[k], "B") == 0);
        for (int64_t i = 0; i < W.sz.y; i++) ysum[i] += ((double *)S[k].y)[i];
        if (kind != EXEC_EMBED)
            for (int64_t i = 0; i < W.sz.x; i++) dxsum[i] += ((double *)S[k].dx)[i];
        for (int i = 0; i < S[k].np; i++)
            block_xfer(find_param(W.p, W.np, S[k].p[i].name), gsum, &S[k].p[i], S[k].grad, true);
    }
    char what[128];
    if (kind == EXEC_HEAD) {
        CU_ASSERT(fabs(loss - W.out) <= TP_TOL * fabs(W.out));
        tp_worst = fmax(tp_worst, fabs(loss - W.out) / fabs(W.out));
    } else {
        snprintf(what, sizeof what, "%s y", label);
        assert_close(what, ysum, W.y, W.sz.y, TP_TOL);
        tp_worst = fmax(tp_worst, rel_diff(ysum, W.y, W.sz.y));
    }
    if (kind != EXEC_EMBED) {
        snprintf(what, sizeof what, "%s dx", label);
        assert_close(what, dxsum, W.dx, W.sz.x, TP_TOL);
        tp_worst = fmax(tp_worst, rel_diff(dxsum, W.dx, W.sz.x));
    }
    /* the GPT key bias gradient is 0 but for rounding (softmax ignores a shift of a row's
     * scores): under sequence parallelism the blocked GEMMs round differently, so there each
     * tensor is compared on the scale of the whole gradient block */
    double gscale = 0;
    max_abs_diff(W.grad, W.grad, W.sz.params, &gscale);
    for (int i = 0; i < W.np; i++) {
        snprintf(what, sizeof what, "%s d%s", label, W.p[i].name);
        const double *a = gsum + W.p[i].offset, *b = (double *)W.grad + W.p[i].offset;
        double sc, d = max_abs_diff(a, b, W.p[i].count, &sc);
        if (sp && sc < gscale * 1e-6) {
            if (!(d <= TP_TOL * gscale))
                fprintf(stderr, "\n  %s: max difference %.3g (block scale %.3g)\n", what, d, gscale);
            CU_ASSERT(d <= TP_TOL * gscale);
            continue;
        }
        assert_close(what, a, b, W.p[i].count, TP_TOL);
        tp_worst = fmax(tp_worst, rel_diff(a, b, W.p[i].count));
    }
    if (tied_head) {
        snprintf(what, sizeof what, "%s d(tied lm)", label);
        assert_close(what, lm_gsum, lm_g, VH, TP_TOL);
        tp_worst = fmax(tp_worst, rel_diff(lm_gsum, lm_g, VH));
    }
    free(lm);
    free(lm_g);
    free(lm_gsum);
    /* the shards hold exactly their share of the parameters, replicated tensors aside */
    int64_t held = 0, repl = 0;
    for (int k = 0; k < n; k++)
        for (int i = 0; i < S[k].np; i++) {
            held += S[k].p[i].count;
            if (S[k].p[i].replicated) repl += S[k].p[i].count;
        }
    int64_t whole_repl = 0;
    for (int i = 0; i < W.np; i++)
        if (find_param(S[0].p, S[0].np, W.p[i].name)->replicated) whole_repl += W.p[i].count;
    CU_ASSERT(held - repl == W.sz.params - whole_repl);
    for (int k = 0; k < n; k++) rinst_free(&S[k]);
    rinst_free(&W);
    free(xg);
    free(ysum);
    free(dxsum);
    free(gsum);
}

static void shard_check(exec_cfg *cfg, exec_region_kind kind, int tp, int ep, const char *label)
{
    shard_check_mode(cfg, kind, tp, ep, false, label);
}

static void test_tp(void)
{
    exec_cfg g = small_cfg(true); /* dropout on: masks of global indices make partials exact */
    g.vocab = 12;                 /* tp divides the vocabulary */
    shard_check(&g, EXEC_EMBED, 2, 1, "gpt embed tp2");
    shard_check(&g, EXEC_ATTN, 2, 1, "gpt attn tp2");
    shard_check(&g, EXEC_MLP, 2, 1, "gpt mlp tp2");
    shard_check(&g, EXEC_HEAD, 2, 1, "gpt head tp2");
    g.tied = false;
    shard_check(&g, EXEC_HEAD, 2, 1, "gpt head tp2 untied");
    exec_cfg l = small_cfg(false); /* kv_heads 1 < tp 2: key/value heads replicated */
    l.vocab = 12;
    shard_check(&l, EXEC_ATTN, 2, 1, "llama attn tp2 (kv replicated)");
    shard_check(&l, EXEC_MLP, 2, 1, "llama mlp tp2");
    shard_check(&l, EXEC_EMBED, 2, 1, "llama embed tp2");
    shard_check(&l, EXEC_HEAD, 2, 1, "llama head tp2");
    shard_check(&l, EXEC_MOE_EXPERTS, 2, 1, "experts tp2");
    l.heads = 4;
    l.kv_heads = 2;
    l.h = 16;
    shard_check(&l, EXEC_ATTN, 2, 1, "llama attn tp2 (kv split)");
    shard_check(&l, EXEC_ATTN, 4, 1, "llama attn tp4");
    shard_check(&l, EXEC_HEAD, 4, 1, "llama head tp4");
    /* sequence parallelism: the same sums from the kept token shards and their all-gather */
    shard_check_mode(&g, EXEC_EMBED, 2, 1, true, "gpt embed tp2 sp");
    shard_check_mode(&g, EXEC_ATTN, 2, 1, true, "gpt attn tp2 sp");
    shard_check_mode(&g, EXEC_MLP, 2, 1, true, "gpt mlp tp2 sp");
    g.tied = true;
    shard_check_mode(&g, EXEC_HEAD, 2, 1, true, "gpt head tp2 sp");
    l.s = 6; /* b*s = 12 tokens: 2 and 4 divide them */
    shard_check_mode(&l, EXEC_ATTN, 2, 1, true, "llama attn tp2 sp");
    shard_check_mode(&l, EXEC_ATTN, 4, 1, true, "llama attn tp4 sp");
    shard_check_mode(&l, EXEC_MLP, 4, 1, true, "llama mlp tp4 sp");
    shard_check_mode(&l, EXEC_HEAD, 4, 1, true, "llama head tp4 sp");
    fprintf(stderr, "\n  worst tensor-parallel relative difference: %.3g\n", tp_worst);
}

/* Expert parallelism over 2 devices, each the source of its own dispatched buffer [E][C][h]: the
 * all-to-all hands device d the rows of its experts from both sources, [2][E/2][C][h]. Each
 * device's output rows, sent back, must equal the whole experts run on each source's buffer, and
 * its gradients the slices of the whole's summed over both sources. */
static void test_ep_experts(void)
{
    exec_cfg cfg = small_cfg(false);
    base_error e;
    base_error_clear(&e);
    exec_shard whole, sh[2];
    CU_ASSERT_FATAL(exec_shard_init(&cfg, 1, 0, 1, 0, &whole, &e) == 0);
    rinst W;
    rinst_init(&W, &cfg, &whole, EXEC_MOE_EXPERTS, 0, PLAN_FP64);
    rinst_init_params(&W, 0);
    const int64_t N = W.sz.x, C = cfg.capacity, h = cfg.h, half = cfg.experts / 2;
    double *src_x[2], *src_dy[2], *ref_y[2], *ref_dx[2];
    for (int s = 0; s < 2; s++) {
        src_x[s] = xcalloc((size_t)N * 8);
        src_dy[s] = xcalloc((size_t)N * 8);
        ref_y[s] = xcalloc((size_t)N * 8);
        ref_dx[s] = xcalloc((size_t)N * 8);
        fill_uniform(src_x[s], N, PLAN_FP64, 61 + (uint64_t)s, -1, 1);
        fill_uniform(src_dy[s], N, PLAN_FP64, 63 + (uint64_t)s, -1, 1);
        memcpy(W.x, src_x[s], (size_t)N * 8);
        memcpy(W.dy, src_dy[s], (size_t)N * 8);
        CU_ASSERT_FATAL(rinst_run(&W, "F") == 0);
        CU_ASSERT_FATAL(rinst_run(&W, "B") == 0); /* BW accumulates both sources */
        memcpy(ref_y[s], W.y, (size_t)N * 8);
        memcpy(ref_dx[s], W.dx, (size_t)N * 8);
    }
    const int64_t chunk = half * C * h; /* one source's rows for one device */
    double worst = 0;
    for (int d = 0; d < 2; d++) {
        CU_ASSERT_FATAL(exec_shard_init(&cfg, 1, 0, 2, d, &sh[d], &e) == 0);
        rinst S;
        rinst_init(&S, &cfg, &sh[d], EXEC_MOE_EXPERTS, 0, PLAN_FP64);
        CU_ASSERT_FATAL(S.sz.x == 2 * chunk);
        for (int i = 0; i < S.np; i++)
            block_xfer(find_param(W.p, W.np, S.p[i].name), W.param, &S.p[i], S.param, false);
        for (int s = 0; s < 2; s++) {
            memcpy((double *)S.x + s * chunk, src_x[s] + d * chunk, (size_t)chunk * 8);
            memcpy((double *)S.dy + s * chunk, src_dy[s] + d * chunk, (size_t)chunk * 8);
        }
        CU_ASSERT_FATAL(rinst_run(&S, "F") == 0);
        CU_ASSERT_FATAL(rinst_run(&S, "B") == 0);
        for (int s = 0; s < 2; s++) {
            worst = fmax(worst, rel_diff((double *)S.y + s * chunk, ref_y[s] + d * chunk, chunk));
            worst = fmax(worst, rel_diff((double *)S.dx + s * chunk, ref_dx[s] + d * chunk, chunk));
        }
        double *gw = xcalloc((size_t)W.sz.params * 8);
        for (int i = 0; i < S.np; i++) {
            const exec_param *wp = find_param(W.p, W.np, S.p[i].name);
            block_xfer(wp, W.grad, &S.p[i], gw, false); /* the whole's gradient, sliced */
            worst = fmax(worst, rel_diff((double *)S.grad + S.p[i].offset, gw + S.p[i].offset,
                                         S.p[i].count));
        }
        free(gw);
        rinst_free(&S);
    }
    fprintf(stderr, "\n  expert parallelism: worst relative difference %.3g\n", worst);
    CU_ASSERT(worst <= TP_TOL);
    tp_worst = fmax(tp_worst, worst);
    for (int s = 0; s < 2; s++) {
        free(src_x[s]);
        free(src_dy[s]);
        free(ref_y[s]);
        free(ref_dx[s]);
    }
    rinst_free(&W);
}

/* The composite head F with a reduce callback: a callback that hands back the statistics the
 * group would have reduced gives the same loss as the phased run. */
typedef struct replay {
    const double *global;
    int64_t T;
    int calls;
} replay;

static int replay_reduce(void *ctx, void *buf, int64_t n, plan_dtype dt, exec_reduce_op op,
                         base_error *e)
{
    replay *r = ctx;
    (void)e;
    CU_ASSERT(dt == PLAN_FP64);
    if (op == EXEC_REDUCE_MAX) {
        CU_ASSERT(n == r->T && r->calls == 0);
        memcpy(buf, r->global, (size_t)n * 8);
    } else {
        CU_ASSERT(n == 2 * r->T && r->calls == 1);
        memcpy(buf, r->global + r->T, (size_t)n * 8);
    }
    r->calls++;
    return 0;
}

static void test_head_reduce_callback(void)
{
    exec_cfg cfg = small_cfg(false);
    cfg.vocab = 12;
    base_error e;
    base_error_clear(&e);
    const int64_t T = cfg.b * cfg.s;
    exec_shard sh[2];
    rinst S[2];
    double st[2][3 * 10], g[3 * 10], loss_phased[2];
    for (int k = 0; k < 2; k++) {
        CU_ASSERT_FATAL(exec_shard_init(&cfg, 2, k, 1, 0, &sh[k], &e) == 0);
        rinst_init(&S[k], &cfg, &sh[k], EXEC_HEAD, 0, PLAN_FP64);
        rinst_init_params(&S[k], 0.3);
        fill_uniform(S[k].x, S[k].sz.x, PLAN_FP64, 31, -1, 1);
        for (int64_t t = 0; t < T; t++) S[k].targets[t] = (int32_t)((t * 3) % cfg.vocab);
        exec_call c = rinst_call(&S[k]);
        CU_ASSERT_FATAL(exec_head_f_begin_f64(&c, st[k], &e) == 0);
    }
    for (int64_t t = 0; t < T; t++) g[t] = fmax(st[0][t], st[1][t]);
    for (int k = 0; k < 2; k++) {
        memcpy(st[k], g, (size_t)T * 8);
        exec_call c = rinst_call(&S[k]);
        CU_ASSERT_FATAL(exec_head_f_sums_f64(&c, st[k], &e) == 0);
    }
    for (int64_t t = T; t < 3 * T; t++) g[t] = st[0][t] + st[1][t];
    for (int k = 0; k < 2; k++) {
        exec_call c = rinst_call(&S[k]);
        CU_ASSERT_FATAL(exec_head_f_end_f64(&c, g, &e) == 0);
        loss_phased[k] = S[k].out;
    }
    /* without a callback a vocabulary shard refuses to compute a wrong loss */
    CU_ASSERT(rinst_run(&S[0], "F") != 0);
    for (int k = 0; k < 2; k++) {
        replay rp = {g, T, 0};
        S[k].reduce = replay_reduce;
        S[k].reduce_ctx = &rp;
        CU_ASSERT_FATAL(rinst_run(&S[k], "F") == 0);
        CU_ASSERT(rp.calls == 2);
        CU_ASSERT(S[k].out == loss_phased[k]);
        rinst_free(&S[k]);
    }
}

/* ---------------------------------------------------------------- initialisation */

static void test_init_slices(void)
{
    exec_cfg cfg = small_cfg(false);
    cfg.init_std = 0.02;
    cfg.vocab = 12;
    base_error e;
    base_error_clear(&e);
    exec_shard whole, part;
    CU_ASSERT_FATAL(exec_shard_init(&cfg, 1, 0, 1, 0, &whole, &e) == 0);
    const exec_region_kind kinds[] = {EXEC_EMBED, EXEC_ATTN, EXEC_MLP, EXEC_MOE_GATE,
                                      EXEC_MOE_EXPERTS, EXEC_HEAD};
    int checked = 0;
    for (size_t ki = 0; ki < BASE_COUNT(kinds); ki++)
        for (int rank = 0; rank < 2; rank++) {
            bool experts = kinds[ki] == EXEC_MOE_EXPERTS;
            /* experts: tp 2 and ep 2 together, a 3-D block */
            CU_ASSERT_FATAL(exec_shard_init(&cfg, 2, rank, experts ? 2 : 1, experts ? 1 - rank : 0,
                                            &part, &e) == 0);
            exec_param wp[EXEC_MAX_REGION_PARAMS], pp[EXEC_MAX_REGION_PARAMS];
            int nw = exec_region_params(&cfg, &whole, kinds[ki], wp, &e);
            int np = exec_region_params(&cfg, &part, kinds[ki], pp, &e);
            CU_ASSERT_FATAL(nw > 0 && np == nw);
            for (int i = 0; i < np; i++) {
                char name[64];
                snprintf(name, sizeof name, "L0.%s.%s", exec_region_kind_name(kinds[ki]), pp[i].name);
                const exec_param *w = find_param(wp, nw, pp[i].name);
                double *full = xcalloc((size_t)(w->offset + w->count) * 8);
                double *blk = xcalloc((size_t)(pp[i].offset + pp[i].count) * 8);
                double *want = xcalloc((size_t)(pp[i].offset + pp[i].count) * 8);
                CU_ASSERT(exec_param_init(cfg.seed, name, w, PLAN_FP64, full + w->offset, &e) == 0);
                CU_ASSERT(exec_param_init(cfg.seed, name, &pp[i], PLAN_FP64, blk + pp[i].offset, &e) == 0);
                block_xfer(w, full, &pp[i], want, false);
                CU_ASSERT(memcmp(blk + pp[i].offset, want + pp[i].offset,
                                 (size_t)pp[i].count * 8) == 0);
                /* fp32 is the same values rounded */
                float *f32 = xcalloc((size_t)pp[i].count * 4);
                CU_ASSERT(exec_param_init(cfg.seed, name, &pp[i], PLAN_FP32, f32, &e) == 0);
                for (int64_t j = 0; j < pp[i].count; j++)
                    CU_ASSERT(f32[j] == (float)blk[pp[i].offset + j]);
                free(f32);
                if (w->init == EXEC_INIT_NORMAL) {
                    /* the whole tensor's spread is the requested standard deviation */
                    double ss = 0;
                    for (int64_t j = 0; j < w->count; j++) ss += full[w->offset + j] * full[w->offset + j];
                    double sd = sqrt(ss / (double)w->count);
                    CU_ASSERT(sd > 0.6 * w->std && sd < 1.4 * w->std);
                } else {
                    CU_ASSERT(full[w->offset] == (w->init == EXEC_INIT_ONES ? 1.0 : 0.0));
                }
                checked++;
                free(full);
                free(blk);
                free(want);
            }
        }
    CU_ASSERT(checked > 20);
    /* names and seeds select independent streams; the same ones repeat exactly */
    exec_param p[EXEC_MAX_REGION_PARAMS];
    int na = exec_region_params(&cfg, &whole, EXEC_ATTN, p, &e);
    const exec_param *wq = find_param(p, na, "wq");
    double a[64], b[64], c[64];
    exec_param_init(1, "L0.attn.wq", wq, PLAN_FP64, a, &e);
    exec_param_init(1, "L1.attn.wq", wq, PLAN_FP64, b, &e);
    exec_param_init(2, "L0.attn.wq", wq, PLAN_FP64, c, &e);
    CU_ASSERT(memcmp(a, b, sizeof a) != 0 && memcmp(a, c, sizeof a) != 0);
    exec_param_init(1, "L1.attn.wq", wq, PLAN_FP64, c, &e);
    CU_ASSERT(memcmp(b, c, sizeof b) == 0);
    CU_ASSERT(exec_param_init(1, "x", wq, PLAN_BF16, c, &e) != 0);
    TEST_ASSERT_CONTAINS(e.msg, "fp32 or fp64");
}

/* ---------------------------------------------------------------- optimizer */

static void test_adamw_by_hand(void)
{
    exec_optim o = {EXEC_ADAMW, 0.1, 0.9, 0.999, 1e-8, 0.01, 1, 1.0};
    double p = 1.0, g = 0.5, m = 0, v = 0;
    /* step 1: m = 0.05, v = 0.00025, m^ = 0.5, v^ = 0.25;
     * p = 1 - 0.1 * (0.5 / (0.5 + 1e-8) + 0.01 * 1) = 0.899000002 */
    exec_adamw_f64(&p, &g, &m, &v, 1, &o, true);
    CU_ASSERT(fabs(m - 0.05) < 1e-16 && fabs(v - 0.00025) < 1e-18);
    CU_ASSERT(fabs(p - 0.899000002) < 1e-15);
    /* step 2, g = -0.25: m = 0.02, v = 0.00031225, m^ = 0.02 / 0.19, v^ = 0.00031225 / 0.001999 */
    o.t = 2;
    g = -0.25;
    exec_adamw_f64(&p, &g, &m, &v, 1, &o, true);
    CU_ASSERT(fabs(m - 0.02) < 1e-16 && fabs(v - 0.00031225) < 1e-18);
    CU_ASSERT(fabs(p - 0.8714672987058464) < 1e-15);
    /* without decay, and with the clipping scale folded into the gradient */
    p = 1.0;
    g = 4.0;
    m = v = 0;
    o.t = 1;
    o.grad_scale = 0.125;
    exec_adamw_f64(&p, &g, &m, &v, 1, &o, false);
    CU_ASSERT(fabs(p - (1 - 0.1 * 0.5 / (0.5 + 1e-8))) < 1e-15);
    /* fp32 follows */
    float pf = 1.0f, gf = 0.5f, mf = 0, vf = 0;
    o.grad_scale = 1;
    exec_adamw_f32(&pf, &gf, &mf, &vf, 1, &o, true);
    CU_ASSERT(fabsf(pf - 0.899000002f) < 1e-7f);
    /* SGD: p -= lr (g * scale + wd p) */
    exec_optim s = {EXEC_SGD, 0.1, 0, 0, 0, 0.01, 1, 0.5};
    p = 2.0;
    g = 3.0;
    exec_sgd_f64(&p, &g, 1, &s, true);
    CU_ASSERT(fabs(p - (2.0 - 0.1 * (1.5 + 0.02))) < 1e-15);
    /* clipping coefficient */
    CU_ASSERT(exec_clip_coef(0.5, 1.0) == 1.0);
    CU_ASSERT(fabs(exec_clip_coef(4.0, 1.0) - 1.0 / (4.0 + 1e-6)) < 1e-16);
    CU_ASSERT(exec_clip_coef(4.0, 0) == 1.0);
}

/* UPD of a region: weight decay only on matrices, and a ZeRO-style split into two ranges is the
 * same update as the whole. */
static void test_region_upd(void)
{
    exec_cfg cfg = small_cfg(false);
    base_error e;
    base_error_clear(&e);
    exec_shard sh;
    CU_ASSERT_FATAL(exec_shard_init(&cfg, 1, 0, 1, 0, &sh, &e) == 0);
    rinst r;
    rinst_init(&r, &cfg, &sh, EXEC_MLP, 0, PLAN_FP64);
    rinst_init_params(&r, 0.3);
    const int64_t n = r.sz.params;
    double *p0 = xcalloc((size_t)n * 8), *m = xcalloc((size_t)n * 8), *v = xcalloc((size_t)n * 8);
    memcpy(p0, r.param, (size_t)n * 8);
    /* zero gradient: AdamW moves only by decay, p *= 1 - lr wd on matrices */
    exec_optim o = {EXEC_ADAMW, 0.1, 0.9, 0.999, 1e-8, 0.5, 1, 1.0};
    exec_call c = rinst_call(&r);
    c.opt = &o;
    c.opt_m = m;
    c.opt_v = v;
    CU_ASSERT_FATAL(exec_kernel_run_id("llama.mlp.UPD", &c, &e) == 0);
    for (int i = 0; i < r.np; i++) {
        double f = r.p[i].ndim >= 2 ? 1 - 0.1 * 0.5 : 1.0;
        for (int64_t j = 0; j < r.p[i].count; j++) {
            int64_t k = r.p[i].offset + j;
            CU_ASSERT(fabs(((double *)r.param)[k] - f * p0[k]) < 1e-15);
        }
    }
    /* with a gradient: whole vs two ranges */
    fill_uniform(r.grad, n, PLAN_FP64, 41, -1, 1);
    memcpy(r.param, p0, (size_t)n * 8);
    memset(m, 0, (size_t)n * 8);
    memset(v, 0, (size_t)n * 8);
    c = rinst_call(&r);
    c.opt = &o;
    c.opt_m = m;
    c.opt_v = v;
    CU_ASSERT(exec_kernel_run_id("llama.mlp.UPD", &c, &e) == 0);
    double *whole = xcalloc((size_t)n * 8);
    memcpy(whole, r.param, (size_t)n * 8);
    memcpy(r.param, p0, (size_t)n * 8);
    memset(m, 0, (size_t)n * 8);
    memset(v, 0, (size_t)n * 8);
    int64_t half = n / 2 + 3; /* a cut inside a tensor */
    c.upd_off = 0;
    c.upd_n = half;
    CU_ASSERT(exec_kernel_run_id("llama.mlp.UPD", &c, &e) == 0);
    c.upd_off = half;
    c.upd_n = n - half;
    c.param = (double *)r.param + half;
    c.grad = (double *)r.grad + half;
    c.opt_m = m + half;
    c.opt_v = v + half;
    CU_ASSERT(exec_kernel_run_id("llama.mlp.UPD", &c, &e) == 0);
    CU_ASSERT(memcmp(whole, r.param, (size_t)n * 8) == 0);
    c.upd_n = n; /* out of range */
    CU_ASSERT(exec_kernel_run_id("llama.mlp.UPD", &c, &e) != 0);
    TEST_ASSERT_CONTAINS(e.msg, "outside the region");
    base_error_clear(&e);
    c = rinst_call(&r);
    c.opt = &o;
    CU_ASSERT(exec_kernel_run_id("llama.mlp.UPD", &c, &e) != 0);
    TEST_ASSERT_CONTAINS(e.msg, "first-moment state is missing");
    free(p0);
    free(m);
    free(v);
    free(whole);
    rinst_free(&r);
}

/* aux.grad_norm: per TP shard, replicated tensors counted by the first shard only, so the sum of
 * the shards' partial norms is the whole model's once the group has summed replicated grads. */
static void test_grad_norm(void)
{
    exec_cfg cfg = small_cfg(true);
    cfg.vocab = 12;
    base_error e;
    base_error_clear(&e);
    exec_shard whole, sh[2];
    CU_ASSERT_FATAL(exec_shard_init(&cfg, 1, 0, 1, 0, &whole, &e) == 0);
    rinst W;
    rinst_init(&W, &cfg, &whole, EXEC_ATTN, 0, PLAN_FP64);
    fill_uniform(W.grad, W.sz.params, PLAN_FP64, 51, -1, 1);
    double full = 0;
    for (int64_t i = 0; i < W.sz.params; i++) full += ((double *)W.grad)[i] * ((double *)W.grad)[i];
    double parts = 0;
    for (int k = 0; k < 2; k++) {
        CU_ASSERT_FATAL(exec_shard_init(&cfg, 2, k, 1, 0, &sh[k], &e) == 0);
        rinst S;
        rinst_init(&S, &cfg, &sh[k], EXEC_ATTN, 0, PLAN_FP64);
        for (int i = 0; i < S.np; i++)
            block_xfer(find_param(W.p, W.np, S.p[i].name), W.grad, &S.p[i], S.grad, false);
        exec_grad_ref g[2] = {{EXEC_ATTN, S.grad}, {EXEC_MOE_COMBINE, NULL}};
        exec_call c = rinst_call(&S);
        double out = -1;
        c.nin = 2;
        c.grads_in = g;
        c.out = &out;
        CU_ASSERT(exec_kernel_run_id("aux.grad_norm", &c, &e) == 0);
        parts += out;
        rinst_free(&S);
    }
    CU_ASSERT(fabs(parts - full) < 1e-12 * full);
    double l[3] = {0.5, 0.25, 2};
    exec_call c = rinst_call(&W);
    double out = 0;
    c.nin = 3;
    c.scalars_in = l;
    c.out = &out;
    CU_ASSERT(exec_kernel_run_id("aux.aux_loss", &c, &e) == 0);
    CU_ASSERT(out == 2.75);
    rinst_free(&W);
}

static void test_report(void)
{
    fprintf(stderr, "\n  worst finite-difference relative error: %.3g (%s)\n", fd_worst,
            fd_worst_what);
    CU_ASSERT(fd_worst <= FD_TOL);
}

int piper_tests_register(void)
{
    static const test_case fd[] = {{"building blocks", test_building_blocks},
                                   {"GPT regions", test_fd_gpt},
                                   {"Llama regions", test_fd_llama},
                                   {"MoE regions (routing held fixed)", test_fd_moe},
                                   {"report", test_report},
                                   {NULL, NULL}};
    static const test_case other[] = {{"router top-k, capacity, ties, aux loss", test_router_capacity},
                                      {"recompute splits give the gradients of keeping everything",
                                       test_recompute_splits},
                                      {"tensor and expert parallel shards", test_tp},
                                      {"expert parallel experts", test_ep_experts},
                                      {"vocab-parallel head through the reduce callback",
                                       test_head_reduce_callback},
                                      {"initialisation of shards", test_init_slices},
                                      {"AdamW and SGD by hand", test_adamw_by_hand},
                                      {"region UPD: decay mask, ZeRO ranges", test_region_upd},
                                      {"gradient norm and aux loss", test_grad_norm},
                                      {NULL, NULL}};
    return test_add_suite("finite differences", fd) || test_add_suite("kernels", other);
}
