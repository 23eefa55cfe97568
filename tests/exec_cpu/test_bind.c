/* test_bind.c — the binding layer (exec/bind.h) with a backend of its own: a toy backend that is
 * only an exec_bind_ops (fixed layouts in 2-byte elements, a one-entry kernel table), which is
 * what a new backend supplies. On compiled plans of the executor's test programs:
 *  - DP2: the data-parallel rank is the device's position, the second replica leaves the
 *    gradient norm to the first, parameter/gradient/optimizer buffers are sized from the region's
 *    parameter count and the backend's element sizes, computes name the backend's kernel;
 *  - ZeRO-1 over DP2: each region's optimizer step updates the device's piece, ceil(n / 2)
 *    elements on device 0 and the rest on device 1, the optimizer state holds only that piece,
 *    every gradient reduce-scatter is a GRAD_SCATTER over two ranks whose staging chunk is
 *    ceil(n / 2) per region, and the parameter all-gathers are PARAM_GATHERs in place;
 *  - errors: a rank beyond the plan's devices, and an identity the backend's table lacks, named
 *    with the backend's name;
 *  - fuse_collectives: a fused activation collective binds as one piece per member, the pairs
 *    the unfused plan has, and one whose pieces disagree with its buffers is refused. */
#include <stdlib.h>
#include <string.h>

#include "exec/bind.h"
#include "sched/sched.h"
#include "tests/testutil.h"

/* ---------------------------------------------------------------- the toy backend */

static const char TOY_KERNEL[] = "toy"; /* what every identity the toy table knows resolves to */

static int toy_layout(void *ctx, const exec_region *R, exec_layout *out, base_error *e)
{
    const exec_cfg *c = ctx;
    exec_param par[EXEC_MAX_REGION_PARAMS];
    int n = exec_region_params(c, &R->sh, R->kind, par, e);
    if (n < 0) return -1;
    const int64_t T = c->b * c->s;
    memset(out, 0, sizeof *out);
    out->x_bytes = R->kind == EXEC_EMBED ? 4 * T : 2 * T * c->h;
    out->y_bytes = R->kind == EXEC_HEAD ? 0 : 2 * T * c->h;
    out->act_bytes = 1024;
    out->work_bytes = 512;
    out->work_f_bytes = 256;
    for (int i = 0; i < n; i++) out->params += par[i].count;
    return 0;
}

static int toy_act_split(void *ctx, const exec_region *R, exec_act_mode mode, int64_t *kept,
                         int64_t *rebuilt, base_error *e)
{
    (void)ctx, (void)mode, (void)e;
    *kept = R->sz.act_bytes;
    *rebuilt = 0;
    return 0;
}

/* Knows every gpt identity of a region kind (kind and family from the identity's name). */
static const void *toy_kernel_find(const char *kid, int *kind, int *family)
{
    if (strncmp(kid, "gpt.", 4) != 0) return NULL;
    for (int k = 0; k < EXEC_NREGION_KINDS; k++) {
        const char *n = exec_region_kind_name((exec_region_kind)k);
        size_t l = strlen(n);
        if (strncmp(kid + 4, n, l) == 0 && kid[4 + l] == '.') {
            *kind = k;
            *family = 0;
            return TOY_KERNEL;
        }
    }
    return NULL;
}

static const void *toy_kernel_none(const char *kid, int *kind, int *family)
{
    (void)kid, (void)kind, (void)family;
    return NULL;
}

static exec_bind_ops toy_ops(exec_cfg *cfg)
{
    return (exec_bind_ops){"toy runtime", "toy kernels", "toy backend", 2, 4, 12,
                           toy_layout, toy_act_split, toy_kernel_find, cfg};
}

/* ---------------------------------------------------------------- plans */

static int compile(const char *rel, sched_compilation *c)
{
    sched_compilation_init(c);
    base_error e;
    base_error_clear(&e);
    sched_options o = {0};
    o.allow_oom = true;
    if (sched_compile(c, test_src_path(rel), NULL, NULL, &o, &e)) {
        fprintf(stderr, "\n  %s: %s\n", rel, e.msg);
        return -1;
    }
    return 0;
}

static void test_dp2(void)
{
    sched_compilation sc;
    if (compile("tests/exec_mpi/programs/gpt_dp2.yaml", &sc)) {
        CU_FAIL("gpt_dp2 does not compile");
        return;
    }
    const plan_set *p = &sc.plan;
    base_error e;
    base_error_clear(&e);
    exec_cfg cfg;
    CU_ASSERT_FATAL(exec_cfg_from_plan(&p->model, 1, &cfg, &e) == 0);
    const exec_bind_ops ops = toy_ops(&cfg);
    for (int dev = 0; dev < 2; dev++) {
        exec_bind b;
        int rc = exec_bind_open(&b, p, dev, &cfg, &ops, &e);
        CU_ASSERT_EQUAL(rc, 0);
        if (rc) {
            fprintf(stderr, "\n  device %d: %s\n", dev, e.msg);
            exec_bind_close(&b);
            continue;
        }
        CU_ASSERT_EQUAL(b.dp_size, 2);
        CU_ASSERT_EQUAL(b.dp_rank, dev);
        int nupd = 0, nkernels = 0;
        for (int r = 0; r < b.nreg; r++) {
            const exec_region *R = &b.reg[r];
            CU_ASSERT(R->here);
            CU_ASSERT(R->nstore > 0 && R->nstore == R->sz.params);
            CU_ASSERT_EQUAL(R->norm_skip, dev == 1); /* the first replica counts the norm */
            if (R->param_buf < 0) continue;
            nupd++;
            CU_ASSERT_EQUAL(R->upd_lo, 0);
            CU_ASSERT_EQUAL(R->upd_hi, R->nstore);
            CU_ASSERT_EQUAL(b.buf[R->param_buf].bytes, 2 * R->nstore);
            CU_ASSERT_EQUAL(b.buf[R->grad_buf].bytes, 4 * R->nstore);
            CU_ASSERT_EQUAL(b.buf[R->opt_buf].bytes, 12 * R->nstore);
        }
        CU_ASSERT_EQUAL(nupd, b.nreg);
        for (int i = 0; i < b.L->n; i++)
            if (b.L->ins[i].op == PLAN_COMPUTE && !b.comp[i].aux) {
                nkernels++;
                CU_ASSERT(b.comp[i].kernel == TOY_KERNEL);
            }
        CU_ASSERT(nkernels > 0);
        exec_bind_close(&b);
    }
    sched_compilation_free(&sc);
}

static void test_zero1(void)
{
    sched_compilation sc;
    if (compile("tests/exec_mpi/programs/gpt_zero1.yaml", &sc)) {
        CU_FAIL("gpt_zero1 does not compile");
        return;
    }
    const plan_set *p = &sc.plan;
    base_error e;
    base_error_clear(&e);
    exec_cfg cfg;
    CU_ASSERT_FATAL(exec_cfg_from_plan(&p->model, 1, &cfg, &e) == 0);
    const exec_bind_ops ops = toy_ops(&cfg);
    for (int dev = 0; dev < 2; dev++) {
        exec_bind b;
        int rc = exec_bind_open(&b, p, dev, &cfg, &ops, &e);
        CU_ASSERT_EQUAL(rc, 0);
        if (rc) {
            fprintf(stderr, "\n  device %d: %s\n", dev, e.msg);
            exec_bind_close(&b);
            continue;
        }
        CU_ASSERT_EQUAL(b.dp_rank, dev);
        for (int r = 0; r < b.nreg; r++) {
            const exec_region *R = &b.reg[r];
            const int64_t half = (R->nstore + 1) / 2;
            CU_ASSERT_EQUAL(R->upd_lo, dev == 0 ? 0 : half);
            CU_ASSERT_EQUAL(R->upd_hi, dev == 0 ? half : R->nstore);
            CU_ASSERT(R->scatter_group >= 0);
            CU_ASSERT_EQUAL(R->param_lo, 0); /* ZeRO-1: parameters and gradients stay whole */
            CU_ASSERT_EQUAL(b.buf[R->param_buf].bytes, 2 * R->nstore);
            CU_ASSERT_EQUAL(b.buf[R->grad_buf].bytes, 4 * R->nstore);
            CU_ASSERT_EQUAL(b.buf[R->opt_buf].bytes, 12 * (R->upd_hi - R->upd_lo));
        }
        int nscatter = 0, ngather = 0;
        for (int i = 0; i < b.L->n; i++) {
            if (b.L->ins[i].op != PLAN_COLL) continue;
            const exec_coll *C = &b.coll[i];
            if (C->kind == EXEC_COLL_GRAD_SCATTER) {
                nscatter++;
                int64_t chunk = 0;
                for (int s = 0; s < C->nseg; s++) {
                    CU_ASSERT_EQUAL(C->seg[s].off, 0);
                    CU_ASSERT_EQUAL(C->seg[s].n, b.reg[C->seg[s].region].nstore);
                    chunk += (C->seg[s].n + 1) / 2;
                }
                CU_ASSERT_EQUAL(C->chunk, chunk);
            }
            if (C->kind == EXEC_COLL_PARAM_GATHER) {
                ngather++;
                CU_ASSERT_EQUAL(C->out, -1); /* in place */
            }
            if (C->kind == EXEC_COLL_GRAD_SCATTER || C->kind == EXEC_COLL_PARAM_GATHER) {
                CU_ASSERT_EQUAL(C->gsize, 2);
                CU_ASSERT_EQUAL(C->grank, dev);
            }
        }
        CU_ASSERT(nscatter > 0);
        CU_ASSERT(ngather > 0);
        exec_bind_close(&b);
    }
    sched_compilation_free(&sc);
}

static void test_errors(void)
{
    sched_compilation sc;
    if (compile("tests/exec_mpi/programs/gpt_dp2.yaml", &sc)) {
        CU_FAIL("gpt_dp2 does not compile");
        return;
    }
    const plan_set *p = &sc.plan;
    base_error e;
    base_error_clear(&e);
    exec_cfg cfg;
    CU_ASSERT_FATAL(exec_cfg_from_plan(&p->model, 1, &cfg, &e) == 0);
    exec_bind_ops ops = toy_ops(&cfg);
    exec_bind b;
    char want[128];
    snprintf(want, sizeof want, "rank %d has no device: the plan has %d devices", p->ndevices,
             p->ndevices);
    CU_ASSERT_EQUAL(exec_bind_open(&b, p, p->ndevices, &cfg, &ops, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, want);
    exec_bind_close(&b);
    base_error_clear(&e);
    ops.kernel_find = toy_kernel_none;
    CU_ASSERT_EQUAL(exec_bind_open(&b, p, 0, &cfg, &ops, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "is unknown to the toy backend");
    TEST_ASSERT_CONTAINS(e.msg, "device 0");
    exec_bind_close(&b);
    sched_compilation_free(&sc);
}

/* Counts device dev's activation collectives of plan p and their pieces (into *ncoll, *npiece),
 * checking each piece: a buffer in and a different one out of the toy layouts' y_bytes (the
 * all-reduces of gpt_tp2: one region output per micro-batch), every piece its own pair. */
static void act_pieces(const plan_set *p, int dev, const exec_cfg *cfg, int *ncoll, int *npiece,
                       int *widest)
{
    const exec_bind_ops ops = toy_ops((exec_cfg *)cfg);
    base_error e;
    base_error_clear(&e);
    exec_bind b;
    *ncoll = *npiece = *widest = 0;
    if (exec_bind_open(&b, p, dev, cfg, &ops, &e)) {
        fprintf(stderr, "\n  device %d: %s\n", dev, e.msg);
        CU_FAIL("the plan does not bind");
        exec_bind_close(&b);
        return;
    }
    const int64_t y = 2 * cfg->b * cfg->s * cfg->h;
    for (int i = 0; i < b.L->n; i++) {
        const exec_coll *C = &b.coll[i];
        if (b.L->ins[i].op != PLAN_COLL || C->kind != EXEC_COLL_ACT) continue;
        (*ncoll)++;
        *npiece += C->npiece;
        if (C->npiece > *widest) *widest = C->npiece;
        for (int k = 0; k < C->npiece; k++) {
            const exec_piece *P = &C->piece[k];
            CU_ASSERT(P->in != P->out);
            CU_ASSERT_EQUAL(P->in_bytes, y);
            CU_ASSERT_EQUAL(P->out_bytes, y);
            for (int q = 0; q < k; q++) CU_ASSERT(C->piece[q].in != P->in && C->piece[q].out != P->out);
        }
    }
    exec_bind_close(&b);
}

/* fuse_collectives: gpt_tp2's 40 activation all-reduces per device (5 TP regions x 2 directions
 * x 4 micro-batches) are 10 fused collectives of 4 pieces each, the same 40 (in, out) pairs. */
static void test_fused(void)
{
    sched_compilation plain, fused;
    if (compile("tests/exec_mpi/programs/gpt_tp2.yaml", &plain)) {
        CU_FAIL("gpt_tp2 does not compile");
        return;
    }
    if (compile("tests/exec_mpi/programs/gpt_tp2_fuse.yaml", &fused)) {
        CU_FAIL("gpt_tp2_fuse does not compile");
        sched_compilation_free(&plain);
        return;
    }
    base_error e;
    base_error_clear(&e);
    exec_cfg cfg;
    CU_ASSERT_FATAL(exec_cfg_from_plan(&plain.plan.model, 1, &cfg, &e) == 0);
    for (int dev = 0; dev < 2; dev++) {
        int nc, np, w;
        act_pieces(&plain.plan, dev, &cfg, &nc, &np, &w);
        CU_ASSERT_EQUAL(nc, 40);
        CU_ASSERT_EQUAL(np, 40);
        CU_ASSERT_EQUAL(w, 1);
        act_pieces(&fused.plan, dev, &cfg, &nc, &np, &w);
        CU_ASSERT_EQUAL(nc, 10);
        CU_ASSERT_EQUAL(np, 40);
        CU_ASSERT_EQUAL(w, 4);
    }
    sched_compilation_free(&plain);
    sched_compilation_free(&fused);
}

/* A fused collective whose pieces disagree with the buffers it names is refused at bind, naming
 * the instruction: a write missing, a piece of the wrong shape for its kind (an all-reduce's
 * pieces read as an all-gather's), bytes that are not the pieces'. */
static void test_fused_errors(void)
{
    static const struct {
        const char *what, *want;
    } cases[] = {
        {"a write missing", "reads 4 buffers and writes 3; each piece of a fused collective"},
        {"an all-gather", "piece 1 of 4 (F.embed.mb0"},
        {"bytes", "the collective moves 32769 bytes, but the plan buffers of its 4 pieces"},
    };
    for (size_t c = 0; c < BASE_COUNT(cases); c++) {
        sched_compilation sc;
        if (compile("tests/exec_mpi/programs/gpt_tp2_fuse.yaml", &sc)) {
            CU_FAIL("gpt_tp2_fuse does not compile");
            return;
        }
        plan_set *p = &sc.plan;
        base_error e;
        base_error_clear(&e);
        exec_cfg cfg;
        CU_ASSERT_FATAL(exec_cfg_from_plan(&p->model, 1, &cfg, &e) == 0);
        const exec_bind_ops ops = toy_ops(&cfg);
        plan_list *L = (plan_list *)plan_dev_list(p, 0);
        plan_instr *in = NULL;
        for (int i = 0; i < L->n && !in; i++)
            if (L->ins[i].op == PLAN_COLL && L->ins[i].purpose == PLAN_PURPOSE_TP_FWD &&
                L->ins[i].nreads == 4)
                in = &L->ins[i];
        CU_ASSERT_FATAL(in != NULL);
        CU_ASSERT_EQUAL(in->bytes, 32768);
        if (c == 0) in->nwrites--;
        if (c == 1) in->coll = PLAN_ALL_GATHER;
        if (c == 2) in->bytes++;
        exec_bind b;
        CU_ASSERT_EQUAL(exec_bind_open(&b, p, 0, &cfg, &ops, &e), -1);
        TEST_ASSERT_CONTAINS(e.msg, cases[c].want);
        TEST_ASSERT_CONTAINS(e.msg, "fused pieces disagree with the buffers it names");
        TEST_ASSERT_CONTAINS(e.msg, "device 0, #");
        if (!strstr(e.msg, cases[c].want)) fprintf(stderr, "\n  %s: %s\n", cases[c].what, e.msg);
        exec_bind_close(&b);
        sched_compilation_free(&sc);
    }
}

int piper_tests_register(void)
{
    static const test_case cases[] = {
        {"DP2: data-parallel rank, norm replicas, storage sizes, kernels", test_dp2},
        {"ZeRO-1: pieces, optimizer state, scatter chunks, gathers", test_zero1},
        {"errors: no such device, an identity the backend lacks", test_errors},
        {"fused collectives: one piece per member, the unfused pairs", test_fused},
        {"fused collectives whose pieces disagree with their buffers", test_fused_errors},
        {NULL, NULL},
    };
    return test_add_suite("exec binding layer", cases);
}
