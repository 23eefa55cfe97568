/* test_model.c — whole models through the CPU kernels, chained as an executor chains regions:
 * a tiny GPT (tied embeddings, learned positions, dropout) and a tiny MoE Llama (GQA, QK-norm,
 * a dense and an MoE layer): the initial loss is log(vocab) (a model initialised with small
 * weights predicts uniformly), backward reaches every parameter, and the full-model gradient
 * matches finite differences of the loss (with the routing held fixed) on a sample of
 * parameters; fp32 agrees with fp64. Also: the kernel-identity table holds every identity the
 * compiler can emit for the model zoo's regions, and each region's parameter layout has exactly
 * the cost model's per-device parameter count under tensor and expert parallelism. */
#include <dirent.h>

#include "harness.h"
#include "ir/model.h"
#include "tests/model_zoo.h"

#define FD_TOL 1e-6

/* ---------------------------------------------------------------- the driver */

typedef struct model {
    exec_cfg cfg;
    exec_shard sh;
    plan_dtype dt;
    int n;
    rinst r[32];
    double loss, aux;
} model;

/* embed | per layer: attn, then mlp or moe_gate, moe_experts, moe_combine | head. Layer l is MoE
 * when bit l of moe_mask is set. */
static void model_build(model *M, const exec_cfg *cfg, plan_dtype dt, unsigned moe_mask,
                        double jitter)
{
    memset(M, 0, sizeof *M);
    M->cfg = *cfg;
    M->dt = dt;
    base_error e;
    base_error_clear(&e);
    if (exec_shard_init(&M->cfg, 1, 0, 1, 0, &M->sh, &e)) abort();
    int n = 0;
    rinst_init(&M->r[n++], &M->cfg, &M->sh, EXEC_EMBED, -1, dt);
    for (int l = 0; l < (int)cfg->layers; l++) {
        rinst_init(&M->r[n++], &M->cfg, &M->sh, EXEC_ATTN, l, dt);
        if (moe_mask >> l & 1) {
            rinst_init(&M->r[n++], &M->cfg, &M->sh, EXEC_MOE_GATE, l, dt);
            rinst_init(&M->r[n++], &M->cfg, &M->sh, EXEC_MOE_EXPERTS, l, dt);
            rinst_init(&M->r[n++], &M->cfg, &M->sh, EXEC_MOE_COMBINE, l, dt);
            M->r[n - 1].route = M->r[n - 3].route;
            M->r[n - 1].droute = M->r[n - 3].droute;
            M->r[n - 1].shared_route = true;
        } else {
            rinst_init(&M->r[n++], &M->cfg, &M->sh, EXEC_MLP, l, dt);
        }
    }
    rinst_init(&M->r[n++], &M->cfg, &M->sh, EXEC_HEAD, -1, dt);
    M->n = n;
    for (int i = 0; i < n; i++) {
        rinst_init_params(&M->r[i], jitter);
        M->r[i].step = 1;
        M->r[i].sample0 = 4;
    }
    rinst *emb = &M->r[0], *head = &M->r[n - 1];
    if (cfg->tied) {
        size_t es = dt_size(dt);
        head->lm_w = (char *)emb->param + (size_t)emb->p[0].offset * es;
        head->lm_grad = (char *)emb->grad + (size_t)emb->p[0].offset * es;
    }
    const int64_t T = cfg->b * cfg->s;
    for (int64_t t = 0; t < T; t++) {
        emb->tokens[t] = exec_synthetic_token(cfg->seed, 1, 4 + t / cfg->s, t % cfg->s, cfg->vocab);
        head->targets[t] =
            exec_synthetic_token(cfg->seed, 1, 4 + t / cfg->s, t % cfg->s + 1, cfg->vocab);
    }
}

static void model_free(model *M)
{
    for (int i = 0; i < M->n; i++) rinst_free(&M->r[i]);
}

/* The step's loss: cross-entropy plus the weighted aux losses. */
static double model_forward(void *ctx)
{
    model *M = ctx;
    size_t es = dt_size(M->dt);
    M->aux = 0;
    for (int i = 0; i < M->n; i++) {
        rinst *r = &M->r[i];
        if (i > 0 && r->kind != EXEC_EMBED) {
            if (M->r[i - 1].sz.y != r->sz.x) abort();
            memcpy(r->x, M->r[i - 1].y, (size_t)r->sz.x * es);
        }
        if (rinst_run(r, "F")) {
            CU_FAIL("forward failed");
            return 0;
        }
        if (r->kind == EXEC_MOE_GATE) M->aux += r->out;
    }
    M->loss = M->r[M->n - 1].out;
    return M->loss + M->cfg.aux_weight * M->aux;
}

static void model_backward(model *M)
{
    size_t es = dt_size(M->dt);
    for (int i = 0; i < M->n; i++) memset(M->r[i].grad, 0, (size_t)M->r[i].sz.params * es);
    for (int i = M->n - 1; i >= 0; i--) {
        rinst *r = &M->r[i];
        if (i < M->n - 1) memcpy(r->dy, M->r[i + 1].dx, (size_t)r->sz.y * es);
        if (rinst_run(r, "B")) CU_FAIL("backward failed");
    }
}

static void hold_routing(model *M)
{
    for (int i = 0; i < M->n; i++) M->r[i].keep_routing = true;
}

/* ---------------------------------------------------------------- tests */

static exec_cfg tiny_cfg(bool gpt)
{
    exec_cfg c = small_cfg(gpt);
    c.init_std = 0.02;
    return c;
}

/* With weights of std 0.02 the logits are tiny: the loss is log(vocab) up to a few hundredths. */
static void test_initial_loss(void)
{
    for (int gpt = 1; gpt >= 0; gpt--) {
        exec_cfg c = tiny_cfg(gpt);
        model M;
        model_build(&M, &c, PLAN_FP64, gpt ? 0 : 2, 0);
        double J = model_forward(&M);
        CU_ASSERT(fabs(M.loss - log((double)c.vocab)) < 0.02);
        CU_ASSERT(gpt ? M.aux == 0 : M.aux > 0);
        CU_ASSERT(J == M.loss + c.aux_weight * M.aux);
        /* the MoE layer's aux loss with near-uniform routing is close to its minimum, coef */
        if (!gpt) CU_ASSERT(fabs(M.aux - c.aux_coef) < 0.5 * c.aux_coef);
        model_backward(&M);
        /* every tensor of every region receives a gradient */
        for (int i = 0; i < M.n; i++)
            for (int k = 0; k < M.r[i].np; k++) {
                const double *g = (const double *)M.r[i].grad + M.r[i].p[k].offset;
                double s = 0;
                for (int64_t j = 0; j < M.r[i].p[k].count; j++) s += g[j] * g[j];
                if (s == 0)
                    fprintf(stderr, "\n  %s: no gradient for %s of region %d\n",
                            gpt ? "gpt" : "moe", M.r[i].p[k].name, i);
                CU_ASSERT(s > 0);
            }
        model_free(&M);
    }
}

/* The whole model's gradient against finite differences of the loss on a sample of each
 * tensor's elements (4 per tensor, spread by a hash). */
static void model_fd(bool gpt, const char *label)
{
    exec_cfg c = small_cfg(gpt);
    model M;
    model_build(&M, &c, PLAN_FP64, gpt ? 0 : 2, 0.3);
    model_forward(&M);
    hold_routing(&M);
    model_backward(&M);
    double all_a[512], all_n[512];
    int ns = 0;
    double worst = 0;
    for (int i = 0; i < M.n; i++)
        for (int k = 0; k < M.r[i].np; k++) {
            const exec_param *p = &M.r[i].p[k];
            if (strcmp(p->name, "bk") == 0) continue; /* zero gradient: see test_exec_kernels */
            double a[4], num[4];
            int m = p->count < 4 ? (int)p->count : 4;
            for (int q = 0; q < m; q++) {
                int64_t j = (int64_t)(exec_rng_bits(77 + (uint64_t)i * 31 + (uint64_t)k, (uint64_t)q) %
                                      (uint64_t)p->count);
                double *v = (double *)M.r[i].param + p->offset + j;
                a[q] = ((double *)M.r[i].grad)[p->offset + j];
                double v0 = *v, h = 1e-5;
                *v = v0 + h;
                double fp = model_forward(&M);
                *v = v0 - h;
                double fm = model_forward(&M);
                *v = v0;
                num[q] = (fp - fm) / (2 * h);
                if (ns < 512) {
                    all_a[ns] = a[q];
                    all_n[ns++] = num[q];
                }
            }
            double err = rel_err(a, num, m);
            char what[128];
            snprintf(what, sizeof what, "%s region %d (%s) %s", label, i,
                     exec_region_kind_name(M.r[i].kind), p->name);
            fd_record(what, err);
            worst = fmax(worst, err);
            if (!(err <= FD_TOL)) fprintf(stderr, "\n  %s: relative error %.3g\n", what, err);
            CU_ASSERT(err <= FD_TOL);
        }
    double overall = rel_err(all_a, all_n, ns);
    fprintf(stderr, "\n  %s: %d sampled parameters, overall relative error %.3g, worst tensor %.3g\n",
            label, ns, overall, worst);
    CU_ASSERT(overall <= FD_TOL);
    model_free(&M);
}

static void test_fd_gpt(void) { model_fd(true, "tiny GPT"); }
static void test_fd_moe(void) { model_fd(false, "tiny MoE"); }

/* fp32 against fp64: the same initial values (fp32 holds them rounded), forward loss, the last
 * hidden state and the gradients. */
static void test_fp32_vs_fp64(void)
{
    for (int gpt = 1; gpt >= 0; gpt--) {
        exec_cfg c = tiny_cfg(gpt);
        c.init_std = 0.1;
        model A, B;
        model_build(&A, &c, PLAN_FP64, gpt ? 0 : 2, 0.3);
        model_build(&B, &c, PLAN_FP32, gpt ? 0 : 2, 0.3);
        double ja = model_forward(&A), jb = model_forward(&B);
        CU_ASSERT(fabs(ja - jb) <= 1e-5 * fabs(ja));
        const rinst *la = &A.r[A.n - 2], *lb = &B.r[B.n - 2];
        double d = 0, s = 0;
        for (int64_t i = 0; i < la->sz.y; i++) {
            d = fmax(d, fabs(((double *)la->y)[i] - ((float *)lb->y)[i]));
            s = fmax(s, fabs(((double *)la->y)[i]));
        }
        fprintf(stderr, "\n  %s: loss fp64 %.9f fp32 %.9f; last hidden state max rel diff %.3g",
                gpt ? "gpt" : "moe", ja, jb, d / s);
        CU_ASSERT(d <= 1e-5 * s);
        model_backward(&A);
        model_backward(&B);
        double worst = 0;
        for (int i = 0; i < A.n; i++) {
            int64_t n = A.r[i].sz.params;
            double *ga = A.r[i].grad, *gb = xcalloc((size_t)n * 8);
            for (int64_t j = 0; j < n; j++) gb[j] = ((float *)B.r[i].grad)[j];
            worst = fmax(worst, rel_err(gb, ga, n));
            free(gb);
        }
        fprintf(stderr, "; gradients max rel diff %.3g\n", worst);
        CU_ASSERT(worst < 1e-4);
        model_free(&A);
        model_free(&B);
    }
}

/* ---------------------------------------------------------------- the identity table */

/* What sched/costs.c forms: <family>.<region kind>.<pass>, the kind names of ir_region_kind in
 * order, the passes a compute node can have. */
static const char *const IR_KIND_ID[IR_NREGION_KINDS] = {"embed", "attn", "mlp", "moe_gate",
                                                         "moe_experts", "moe_combine", "head"};

static int check_model_ids(const ir_model *m, base_arena *a)
{
    int n = ir_model_nregions(m), found = 0;
    ir_region *rs = base_arena_calloc(a, (size_t)n, sizeof *rs);
    ir_model_regions(m, a, rs);
    const char *fam = m->family == IR_FAMILY_GPT ? "gpt" : "llama";
    static const plan_pass passes[] = {PLAN_PASS_F, PLAN_PASS_B, PLAN_PASS_BI, PLAN_PASS_BW,
                                       PLAN_PASS_R, PLAN_PASS_UPD};
    for (int i = 0; i < n; i++)
        for (size_t p = 0; p < BASE_COUNT(passes); p++) {
            if (passes[p] == PLAN_PASS_UPD && ir_region_params(m, &rs[i]) == 0) continue;
            char id[64];
            snprintf(id, sizeof id, "%s.%s.%s", fam, IR_KIND_ID[rs[i].kind],
                     plan_pass_name(passes[p]));
            const exec_kernel *k = exec_kernel_find(id);
            if (!k) fprintf(stderr, "\n  %s (%s) has no kernel\n", id, m->name);
            CU_ASSERT_FATAL(k != NULL);
            CU_ASSERT(k->f32[0] && k->f64[0]);
            CU_ASSERT(strcmp(exec_region_kind_name((exec_region_kind)k->kind), IR_KIND_ID[rs[i].kind]) == 0);
            CU_ASSERT(k->pass == passes[p]);
            found++;
        }
    return found;
}

static void test_identity_table(void)
{
    base_arena a;
    base_arena_init(&a);
    base_error e;
    base_error_clear(&e);
    int models = 0;
    int ids = test_for_each_zoo_model(&a, check_model_ids, &models);
    CU_ASSERT(models >= 10);
    CU_ASSERT(ids > 0);
    CU_ASSERT(exec_kernel_find("aux.grad_norm") && exec_kernel_find("aux.aux_loss"));
    /* every entry: unique id spelled from its fields; B runs BI then BW */
    for (int i = 0; i < exec_kernel_count(); i++) {
        const exec_kernel *k = exec_kernel_at(i);
        for (int j = 0; j < i; j++) CU_ASSERT(strcmp(k->id, exec_kernel_at(j)->id) != 0);
        if (k->family < 0) {
            CU_ASSERT(strncmp(k->id, "aux.", 4) == 0 && k->pass == PLAN_PASS_AUX);
            continue;
        }
        char id[64];
        snprintf(id, sizeof id, "%s.%s.%s", k->family ? "llama" : "gpt",
                 exec_region_kind_name((exec_region_kind)k->kind), plan_pass_name(k->pass));
        CU_ASSERT(strcmp(id, k->id) == 0);
        CU_ASSERT((k->f32[1] != NULL) == (k->pass == PLAN_PASS_B));
        if (k->pass == PLAN_PASS_B) {
            char bi[64], bw[64];
            snprintf(bi, sizeof bi, "%.*s.BI", (int)(strlen(k->id) - 2), k->id);
            snprintf(bw, sizeof bw, "%.*s.BW", (int)(strlen(k->id) - 2), k->id);
            CU_ASSERT(k->f64[0] == exec_kernel_find(bi)->f64[0]);
            CU_ASSERT(k->f64[1] == exec_kernel_find(bw)->f64[0]);
        }
        if (k->family == 0)
            CU_ASSERT(k->kind != EXEC_MOE_GATE && k->kind != EXEC_MOE_EXPERTS &&
                      k->kind != EXEC_MOE_COMBINE);
    }
    CU_ASSERT(exec_kernel_count() == 4 * 6 + 7 * 6 + 2);
    /* errors name the problem */
    exec_cfg c = small_cfg(true);
    exec_shard sh;
    CU_ASSERT_FATAL(exec_shard_init(&c, 1, 0, 1, 0, &sh, &e) == 0);
    exec_call call;
    memset(&call, 0, sizeof call);
    call.cfg = &c;
    call.shard = &sh;
    call.dtype = PLAN_FP64;
    CU_ASSERT(exec_kernel_run_id("gpt.attn.Q", &call, &e) != 0);
    TEST_ASSERT_CONTAINS(e.msg, "'gpt.attn.Q' is unknown");
    base_error_clear(&e);
    CU_ASSERT(exec_kernel_run_id("llama.attn.F", &call, &e) != 0);
    TEST_ASSERT_CONTAINS(e.msg, "gpt family");
    base_error_clear(&e);
    call.dtype = PLAN_BF16;
    CU_ASSERT(exec_kernel_run_id("gpt.attn.F", &call, &e) != 0);
    TEST_ASSERT_CONTAINS(e.msg, "fp32 or fp64, not bf16");
    base_error_clear(&e);
    call.dtype = PLAN_FP64;
    CU_ASSERT(exec_kernel_run_id("gpt.attn.F", &call, &e) != 0);
    TEST_ASSERT_CONTAINS(e.msg, "gpt.attn.F (layer 0): exec_attn_f_f64: the input x is missing");
    base_arena_free(&a);
}

/* ---------------------------------------------------------------- parameters vs cost model */

static void test_params_match_cost_model(void)
{
    base_arena a;
    base_arena_init(&a);
    base_error e;
    base_error_clear(&e);
    DIR *dir = opendir(test_src_path("configs/models"));
    CU_ASSERT_FATAL(dir != NULL);
    struct dirent *de;
    int compared = 0;
    while ((de = readdir(dir))) {
        size_t len = strlen(de->d_name);
        if (len < 6 || strcmp(de->d_name + len - 5, ".yaml")) continue;
        char path[512];
        snprintf(path, sizeof path, "configs/models/%s", de->d_name);
        ir_model m;
        if (ir_model_load(test_src_path(path), &a, &m, &e)) continue;
        exec_cfg c;
        if (test_exec_cfg_from_ir(&m, &c, &e)) {
            fprintf(stderr, "\n  %s: %s\n", de->d_name, e.msg);
            CU_FAIL("exec_cfg_from_plan rejects a zoo model");
            base_error_clear(&e);
            continue;
        }
        if (m.experts > 0) CU_ASSERT(c.capacity == ir_moe_capacity(&m, &(ir_shape){.micro_batch = 2, .tp = 1, .ep = 1}));
        int n = ir_model_nregions(&m);
        ir_region *rs = base_arena_calloc(&a, (size_t)n, sizeof *rs);
        ir_model_regions(&m, &a, rs);
        const int degrees[] = {1, 2, 4, 8};
        for (size_t ti = 0; ti < BASE_COUNT(degrees); ti++)
            for (size_t ei = 0; ei < 3; ei++) {
                ir_shape s = ir_shape_default();
                s.tp = degrees[ti];
                s.ep = degrees[ei];
                s.micro_batch = 2;
                base_error ie;
                base_error_clear(&ie);
                if (ir_shape_validate(&m, &s, &ie)) continue;
                if (m.experts == 0 && s.ep > 1) continue;
                exec_shard sh;
                int rank = (int)s.tp - 1, erank = (int)s.ep - 1; /* the last shard */
                CU_ASSERT_FATAL(exec_shard_init(&c, (int)s.tp, rank, (int)s.ep, erank, &sh, &e) == 0);
                for (int i = 0; i < n; i++) {
                    if (i > 0 && rs[i].layer > 1) continue; /* layers repeat */
                    exec_param p[EXEC_MAX_REGION_PARAMS];
                    exec_region_kind k = (exec_region_kind)rs[i].kind; /* same order */
                    int np = exec_region_params(&c, &sh, k, p, &e);
                    CU_ASSERT_FATAL(np >= 0);
                    int64_t held = 0;
                    for (int q = 0; q < np; q++) held += p[q].count;
                    int64_t want = ir_region_params_per_device(&m, &rs[i], &s);
                    if (held != want)
                        fprintf(stderr, "\n  %s %s tp %d ep %d: exec holds %lld, cost model %lld\n",
                                m.name, rs[i].name, (int)s.tp, (int)s.ep, (long long)held,
                                (long long)want);
                    CU_ASSERT(held == want);
                    compared++;
                }
            }
    }
    closedir(dir);
    CU_ASSERT(compared > 100);
    /* the region kinds are in the same order in both modules */
    for (int k = 0; k < IR_NREGION_KINDS; k++)
        CU_ASSERT(strcmp(exec_region_kind_name((exec_region_kind)k), IR_KIND_ID[k]) == 0);
    base_arena_free(&a);
}

static void activations_of_case(const test_zoo_case *z, void *ctx)
{
    int *compared = ctx;
    const ir_model *m = z->m;
    base_error e;
    base_error_clear(&e);
    const char *dts = z->s.act_dtype == PLAN_FP64 ? "fp64" : "fp32";
    for (int i = 0; i < z->nregions; i++) {
        const ir_region *r = &z->rs[i];
        exec_region_sizes sz;
        CU_ASSERT_FATAL(exec_region_sizes_get(z->c, z->sh, (exec_region_kind)r->kind,
                                              z->s.act_dtype, &sz, &e) == 0);
        double want = ir_region_activation_bytes(m, r, &z->s);
        if ((double)sz.act_bytes != want)
            fprintf(stderr, "\n  %s%s %s %s tp %d ep %d: act %lld, cost model %.0f\n", m->name,
                    z->variant ? " (variant)" : "", r->name, dts, (int)z->s.tp, (int)z->s.ep,
                    (long long)sz.act_bytes, want);
        CU_ASSERT((double)sz.act_bytes == want);
        (*compared)++;
        /* the workspace of F (and R) and of the backward (B, BI), and the route tensor an MoE
         * gate hands its combine, are the plan's too */
        double wf = ir_region_work_bytes(m, r, &z->s, PLAN_PASS_F);
        double wb = ir_region_work_bytes(m, r, &z->s, PLAN_PASS_BI);
        if ((double)sz.work_f_bytes != wf || (double)sz.work_bytes != wb)
            fprintf(stderr, "\n  %s %s %s tp %d ep %d: work F %lld B %lld, cost model %.0f %.0f\n",
                    m->name, r->name, dts, (int)z->s.tp, (int)z->s.ep, (long long)sz.work_f_bytes,
                    (long long)sz.work_bytes, wf, wb);
        CU_ASSERT((double)sz.work_f_bytes == wf && (double)sz.work_bytes == wb);
        CU_ASSERT(ir_region_work_bytes(m, r, &z->s, PLAN_PASS_R) == wf);
        CU_ASSERT(ir_region_work_bytes(m, r, &z->s, PLAN_PASS_B) == wb);
        CU_ASSERT(ir_region_work_bytes(m, r, &z->s, PLAN_PASS_BW) == 0.0);
        if (r->kind == IR_REGION_MOE_GATE)
            CU_ASSERT((double)sz.route_bytes == ir_region_route_bytes(m, &z->s));
        /* recompute: what F keeps and what R rebuilds (IR_T_SAVED, IR_T_RECOMP) */
        if (r->kind == IR_REGION_EMBED || r->kind == IR_REGION_HEAD) continue;
        const test_recompute_mode modes[] = TEST_RECOMPUTE_MODES;
        for (size_t q = 0; q < BASE_COUNT(modes); q++) {
            ir_shape rsh = z->s;
            rsh.recompute = modes[q].rc;
            rsh.recompute_from_prev = modes[q].prev;
            double saved = ir_region_activation_bytes(m, r, &rsh);
            double recomp = want - saved > 0 ? want - saved : 0;
            int64_t kept, rebuilt;
            CU_ASSERT_FATAL(exec_region_act_split(z->c, z->sh, (exec_region_kind)r->kind,
                                                  z->s.act_dtype, modes[q].mode, &kept, &rebuilt,
                                                  &e) == 0);
            /* selective recompute rebuilds nothing outside attention */
            if ((double)kept != saved || (double)rebuilt != recomp)
                fprintf(stderr, "\n  %s %s mode %d: kept %lld rebuilt %lld, cost model %.0f %.0f\n",
                        m->name, r->name, (int)modes[q].mode, (long long)kept, (long long)rebuilt,
                        saved, recomp);
            CU_ASSERT((double)kept == saved && (double)rebuilt == recomp);
        }
    }
}

/* The act buffer of every region kind is, byte for byte, what ir_region_activation_bytes says,
 * its work buffers what ir_region_work_bytes says (F, and the backward's), the MoE route what
 * ir_region_route_bytes says (no sequence parallelism): every zoo model, GPT with and without
 * dropout, Llama with and without QK-norm, fp32 and fp64, the last shard of each TP x EP split
 * (the CPU kernels keep the s x s probabilities: no flash attention); and under selective, full
 * and chained full recompute, F's part is IR_T_SAVED and R's IR_T_RECOMP. */
static void test_activations_match_cost_model(void)
{
    int compared = 0;
    test_for_each_zoo_shard(false, PLAN_FP32, activations_of_case, &compared);
    test_for_each_zoo_shard(false, PLAN_FP64, activations_of_case, &compared);
    CU_ASSERT(compared > 400);
}

static void test_report(void)
{
    fprintf(stderr, "\n  worst whole-model finite-difference relative error: %.3g (%s)\n", fd_worst,
            fd_worst_what);
}

int piper_tests_register(void)
{
    static const test_case cases[] = {{"initial loss is log(vocab), every tensor gets a gradient",
                                       test_initial_loss},
                                      {"tiny GPT gradient vs finite differences", test_fd_gpt},
                                      {"tiny MoE gradient vs finite differences", test_fd_moe},
                                      {"fp32 agrees with fp64", test_fp32_vs_fp64},
                                      {"identity table covers the compiler's identities",
                                       test_identity_table},
                                      {"saved activations, workspaces and the MoE route match the cost model",
                                       test_activations_match_cost_model},
                                      {"parameter layout matches the cost model",
                                       test_params_match_cost_model},
                                      {"report", test_report},
                                      {NULL, NULL}};
    return test_add_suite("exec models", cases);
}
