/* test_cuda_host.c — what can be checked of the CUDA backend on a machine without a GPU (and
 * without CUDA at all):
 *  - every kernel identity the compiler can emit has a CUDA implementation: the identity list
 *    (exec/cuda/identities.h, the X-macro the CUDA table expands) holds every
 *    "<family>.<kind>.<pass>" of every region of every model in configs/models, and every
 *    identity of the plans compiled from the example programs (configs/programs and the
 *    executor's test programs), through the real compiler;
 *  - the CUDA list is exactly the CPU table's, so the two backends run the same plans;
 *  - the device's random numbers (exec/cuda/rng.h, compiled here for the host) are the CPU's,
 *    bit for bit, so dropout masks and initial values agree; bf16 rounding on the host;
 *  - when the backend is built (PIPER_HAVE_CUDA): the CUDA table itself (its ids, function
 *    pointers, B = BI then BW) and its buffer sizes against the CPU's parameter counts, for
 *    shards of real models. These run host code only. */
#include <dirent.h>
#include <math.h>

#include "exec/cpu/kernels.h"
#include "exec/cuda/identities.h"
#include "exec/cuda/rng.h"
#include "ir/model.h"
#include "tests/model_zoo.h"
#include "sched/sched.h"
#include "tests/testutil.h"
/* plain C: the bf16 helpers are inline; the rest is used only with PIPER_HAVE_CUDA */
#include "exec/cuda/kernels.h"

static bool in_cuda_list(const char *id)
{
    for (int i = 0; i < EXEC_CUDA_NIDENTITIES; i++)
        if (strcmp(EXEC_CUDA_IDENTITIES[i], id) == 0) return true;
    return false;
}

/* ---------------------------------------------------------------- coverage by enumeration */

/* What sched/costs.c forms: <family>.<region kind>.<pass> for the passes a compute node can
 * have (UPD only for regions with parameters). */
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
            if (!in_cuda_list(id)) fprintf(stderr, "\n  %s (%s) has no CUDA kernel\n", id, m->name);
            CU_ASSERT(in_cuda_list(id));
            found++;
        }
    return found;
}

static void test_enumeration_covered(void)
{
    base_arena a;
    base_arena_init(&a);
    int models = 0;
    int ids = test_for_each_zoo_model(&a, check_model_ids, &models);
    fprintf(stderr, "\n  %d models, %d region identities checked\n", models, ids);
    CU_ASSERT(models >= 10);
    CU_ASSERT(ids > 100);
    CU_ASSERT(in_cuda_list("aux.grad_norm") && in_cuda_list("aux.aux_loss"));
    base_arena_free(&a);
}

/* ---------------------------------------------------------------- coverage by compiled plans */

/* Compiles every program of a folder (skipping the ones that take long or that the compiler
 * refuses, which are not this test's business) and checks each identity its plans run. */
static void compile_folder(const char *rel, int *programs, int *ids, bool pass_seen[PLAN_NPASS])
{
    DIR *dir = opendir(test_src_path(rel));
    if (!dir) return;
    struct dirent *de;
    while ((de = readdir(dir))) {
        size_t len = strlen(de->d_name);
        if (len < 6 || strcmp(de->d_name + len - 5, ".yaml")) continue;
        /* 1,024 GPUs of GPT-3: seconds to compile, and its identities are gpt's like the rest */
        if (strstr(de->d_name, "1024")) continue;
        char path[4096 + 300];
        snprintf(path, sizeof path, "%s/%s", test_src_path(rel), de->d_name);
        sched_compilation c;
        sched_compilation_init(&c);
        base_error e;
        base_error_clear(&e);
        sched_options o = {0};
        o.allow_oom = true;
        if (sched_compile(&c, path, NULL, NULL, &o, &e) == 0) {
            (*programs)++;
            for (int i = 0; i < c.plan.nkernel_ids; i++) {
                const char *id = c.plan.kernel_ids[i];
                if (!id || !*id) continue;
                if (!in_cuda_list(id))
                    fprintf(stderr, "\n  %s (plan of %s) has no CUDA kernel\n", id, de->d_name);
                CU_ASSERT(in_cuda_list(id));
                (*ids)++;
            }
            /* which passes the plans ran, to show the test reaches them */
            for (int l = 0; l < c.plan.nlists; l++)
                for (int i = 0; i < c.plan.lists[l].n; i++) {
                    const plan_instr *in = &c.plan.lists[l].ins[i];
                    if (in->op == PLAN_COMPUTE && in->pass < PLAN_NPASS) pass_seen[in->pass] = true;
                }
        }
        sched_compilation_free(&c);
    }
    closedir(dir);
}

static void test_compiled_plans_covered(void)
{
    int programs = 0, ids = 0;
    bool seen[PLAN_NPASS] = {false};
    compile_folder("configs/programs", &programs, &ids, seen);
    compile_folder("tests/exec_mpi/programs", &programs, &ids, seen);
    fprintf(stderr, "\n  %d programs compiled, %d plan identities checked; passes run:", programs,
            ids);
    for (int p = 0; p < PLAN_NPASS; p++)
        if (seen[p]) fprintf(stderr, " %s", plan_pass_name((plan_pass)p));
    fprintf(stderr, "\n");
    CU_ASSERT(programs >= 5);
    CU_ASSERT(ids > 0);
    CU_ASSERT(seen[PLAN_PASS_F] && seen[PLAN_PASS_B] && seen[PLAN_PASS_UPD] && seen[PLAN_PASS_AUX]);
}

/* ---------------------------------------------------------------- the list itself */

static void test_list_matches_cpu_table(void)
{
    /* unique, and exactly the CPU table's identities: the backends run the same plans */
    for (int i = 0; i < EXEC_CUDA_NIDENTITIES; i++) {
        for (int j = 0; j < i; j++) CU_ASSERT(strcmp(EXEC_CUDA_IDENTITIES[i], EXEC_CUDA_IDENTITIES[j]) != 0);
        const exec_kernel *k = exec_kernel_find(EXEC_CUDA_IDENTITIES[i]);
        if (!k) fprintf(stderr, "\n  %s is in the CUDA list, not the CPU table\n", EXEC_CUDA_IDENTITIES[i]);
        CU_ASSERT(k != NULL);
    }
    for (int i = 0; i < exec_kernel_count(); i++) {
        const char *id = exec_kernel_at(i)->id;
        if (!in_cuda_list(id)) fprintf(stderr, "\n  %s is in the CPU table, not the CUDA list\n", id);
        CU_ASSERT(in_cuda_list(id));
    }
    CU_ASSERT_EQUAL(EXEC_CUDA_NIDENTITIES, exec_kernel_count());
}

/* ---------------------------------------------------------------- random numbers, bf16 */

static void test_rng_matches_cpu(void)
{
    const uint64_t keys[] = {exec_rng_key(1234, "L3.attn.wq"), exec_rng_key4(7, 2, 5, EXEC_DROP_ATTN_PROBS),
                             0, ~0ULL};
    int checked = 0, kept = 0;
    for (size_t k = 0; k < BASE_COUNT(keys); k++)
        for (uint64_t i = 0; i < 20000; i += 7) {
            uint64_t ctr = i * 0x10001ULL + (i & 3) * (1ULL << 40);
            CU_ASSERT_EQUAL(exec_cuda_rng_mix(ctr), exec_rng_mix(ctr));
            CU_ASSERT_EQUAL(exec_cuda_rng_bits(keys[k], ctr), exec_rng_bits(keys[k], ctr));
            CU_ASSERT(exec_cuda_rng_uniform(keys[k], ctr) == exec_rng_uniform(keys[k], ctr));
            CU_ASSERT(exec_cuda_rng_normal(keys[k], ctr) == exec_rng_normal(keys[k], ctr));
            bool a = exec_cuda_dropout_keep(keys[k], ctr, 0.1), b = exec_dropout_keep(keys[k], ctr, 0.1);
            CU_ASSERT(a == b);
            kept += a;
            checked++;
        }
    /* a mask that keeps everything or nothing would agree trivially */
    CU_ASSERT(kept > checked * 85 / 100 && kept < checked * 95 / 100);
}

static void test_bf16_rounding(void)
{
    CU_ASSERT_EQUAL(exec_bf16_from_float(1.0f), 0x3f80);
    CU_ASSERT_EQUAL(exec_bf16_from_float(-2.0f), 0xc000);
    /* 1 + 2^-8 is half way between 1 and 1 + 2^-7: ties go to even (1) */
    CU_ASSERT_EQUAL(exec_bf16_from_float(1.0f + 0x1.0p-8f), 0x3f80);
    /* 1 + 3 * 2^-8 is half way between 1 + 2^-7 and 1 + 2^-6: to even (1 + 2^-6) */
    CU_ASSERT_EQUAL(exec_bf16_from_float(1.0f + 3 * 0x1.0p-8f), 0x3f82);
    CU_ASSERT(exec_bf16_to_float(exec_bf16_from_float(3.140625f)) == 3.140625f);
    CU_ASSERT(isnan(exec_bf16_to_float(exec_bf16_from_float(NAN))));
    CU_ASSERT(isinf(exec_bf16_to_float(exec_bf16_from_float(INFINITY))));
    for (int i = 0; i < 1000; i++) {
        float f = (float)exec_rng_normal(99, (uint64_t)i);
        float r = exec_bf16_to_float(exec_bf16_from_float(f));
        CU_ASSERT(fabsf(r - f) <= fabsf(f) * 0x1.0p-8f);
    }
}

/* ---------------------------------------------------------------- the CUDA table */

#ifdef PIPER_HAVE_CUDA
static void test_cuda_table(void)
{
    CU_ASSERT_EQUAL(exec_cuda_kernel_count(), EXEC_CUDA_NIDENTITIES);
    for (int i = 0; i < exec_cuda_kernel_count(); i++) {
        const exec_cuda_kernel *k = exec_cuda_kernel_at(i);
        CU_ASSERT_FATAL(k != NULL);
        CU_ASSERT(strcmp(k->id, EXEC_CUDA_IDENTITIES[i]) == 0);
        CU_ASSERT(exec_cuda_kernel_find(k->id) == k);
        CU_ASSERT(k->fn[0] != NULL);
        CU_ASSERT((k->fn[1] != NULL) == (k->pass == PLAN_PASS_B));
        const exec_kernel *cpu = exec_kernel_find(k->id);
        CU_ASSERT_FATAL(cpu != NULL);
        CU_ASSERT(cpu->family == k->family && cpu->kind == k->kind && cpu->pass == k->pass);
    }
    CU_ASSERT(exec_cuda_kernel_find("gpt.attn.X") == NULL);
    base_error e;
    base_error_clear(&e);
    exec_cuda_call c;
    memset(&c, 0, sizeof c);
    CU_ASSERT(exec_cuda_kernel_run_id("llama.nope.F", &c, &e) == -1);
    TEST_ASSERT_CONTAINS(e.msg, "unknown to the CUDA backend");
}

/* Buffer sizes of the CUDA layouts for shards of compiled plans' models: parameter counts are
 * the CPU's, inputs and outputs are the CPU's element counts in bf16 (tokens int32), act buffers
 * exist. */
static void sizes_of_model(const plan_model *pm, int *checked)
{
    base_error e;
    base_error_clear(&e);
    exec_cfg cfg;
    if (exec_cfg_from_plan(pm, 1, &cfg, &e)) {
        fprintf(stderr, "\n  %s: %s\n", pm->name, e.msg);
        CU_FAIL("exec_cfg_from_plan");
        return;
    }
    for (int tp = 1; tp <= 2; tp++)
        for (int ep = 1; ep <= (cfg.experts > 0 ? 2 : 1); ep++)
            for (int r = 0; r < tp; r++) {
                exec_shard sh;
                if (exec_shard_init(&cfg, tp, r, ep, 0, &sh, &e)) {
                    base_error_clear(&e);
                    continue;
                }
                for (int k = 0; k < EXEC_NREGION_KINDS; k++) {
                    if (cfg.experts == 0 && (k == EXEC_MOE_GATE || k == EXEC_MOE_EXPERTS ||
                                             k == EXEC_MOE_COMBINE))
                        continue;
                    exec_cuda_sizes cs;
                    exec_region_sizes rs;
                    CU_ASSERT_FATAL(exec_cuda_region_sizes(&cfg, &sh, (exec_region_kind)k, &cs, &e) == 0);
                    CU_ASSERT_FATAL(exec_region_sizes_get(&cfg, &sh, (exec_region_kind)k, PLAN_FP32, &rs, &e) == 0);
                    CU_ASSERT_EQUAL(cs.params, rs.params);
                    CU_ASSERT_EQUAL(cs.x_bytes, k == EXEC_EMBED ? rs.x * 4 : rs.x * 2);
                    CU_ASSERT_EQUAL(cs.y_bytes, rs.y * 2);
                    CU_ASSERT(cs.act_bytes > 0);
                    CU_ASSERT((cs.route_bytes > 0) == (rs.route_bytes > 0));
                    (*checked)++;
                }
            }
}

static void test_cuda_sizes(void)
{
    const char *programs[] = {"tests/exec_mpi/programs/gpt_single.yaml",
                              "tests/exec_mpi/programs/moe_single.yaml",
                              "configs/programs/pp2_dp2_ep2_qwen3.yaml", "configs/programs/dp2.yaml"};
    int checked = 0, compiled = 0;
    for (size_t i = 0; i < BASE_COUNT(programs); i++) {
        FILE *f = fopen(test_src_path(programs[i]), "r");
        if (!f) continue; /* the executor's test programs may not exist yet */
        fclose(f);
        sched_compilation c;
        sched_compilation_init(&c);
        base_error e;
        base_error_clear(&e);
        sched_options o = {0};
        o.allow_oom = true;
        if (sched_compile(&c, test_src_path(programs[i]), NULL, NULL, &o, &e) == 0) {
            sizes_of_model(&c.plan.model, &checked);
            compiled++;
        } else {
            fprintf(stderr, "\n  %s: %s\n", programs[i], e.msg);
        }
        sched_compilation_free(&c);
    }
    fprintf(stderr, "\n  %d region sizes of %d models checked\n", checked, compiled);
    CU_ASSERT(compiled >= 2);
    CU_ASSERT(checked > 20);
}

/* The CUDA layouts are ir/cost.c's closed forms at bf16, so that a GPU holds what piper-sim
 * predicts: for every zoo model (GPT with and without dropout, Llama-family with and without
 * QK-norm) with flash attention (the CUDA attention keeps the log-sum-exp, not the s x s
 * probabilities), the last shard of each TP x EP split, every region kind: the act buffer is
 * ir_region_activation_bytes less the dropout masks (the CUDA kernels regenerate them from their
 * counters: one byte per hidden element of the embedding's, attention's and MLP's outputs), the
 * work buffers are ir_region_work_bytes of F and of the backward, the MoE route is
 * ir_region_route_bytes. */
typedef struct cuda_layout_counts {
    int compared, splits; /* splits: the recompute check's */
} cuda_layout_counts;

static void cuda_layouts_of_case(const test_zoo_case *z, void *ctx)
{
    cuda_layout_counts *n = ctx;
    const ir_model *m = z->m;
    const exec_cfg *c = z->c;
    base_error e;
    base_error_clear(&e);
    for (int i = 0; i < z->nregions; i++) {
        const ir_region *r = &z->rs[i];
        exec_cuda_sizes sz;
        CU_ASSERT_FATAL(exec_cuda_region_sizes(c, z->sh, (exec_region_kind)r->kind, &sz, &e) == 0);
        double want = ir_region_activation_bytes(m, r, &z->s);
        const bool masked = r->kind == IR_REGION_EMBED || r->kind == IR_REGION_ATTN ||
                            r->kind == IR_REGION_MLP;
        const double mask = (double)(c->b * c->s * c->h);
        if (m->dropout && masked) want -= mask;
        double wf = ir_region_work_bytes(m, r, &z->s, PLAN_PASS_F);
        double wb = ir_region_work_bytes(m, r, &z->s, PLAN_PASS_BI);
        bool ok = (double)sz.act_bytes == want && (double)sz.work_f_bytes == wf &&
                  (double)sz.work_bytes == wb;
        if (r->kind == IR_REGION_MOE_GATE || r->kind == IR_REGION_MOE_COMBINE)
            ok = ok && (double)sz.route_bytes == ir_region_route_bytes(m, &z->s);
        if (!ok)
            fprintf(stderr, "\n  %s%s %s tp %d ep %d: act %lld work F %lld B %lld route %lld; cost "
                            "model %.0f, %.0f, %.0f, %.0f",
                    m->name, z->variant ? " (variant)" : "", r->name, (int)z->s.tp, (int)z->s.ep,
                    (long long)sz.act_bytes, (long long)sz.work_f_bytes, (long long)sz.work_bytes,
                    (long long)sz.route_bytes, want, wf, wb, ir_region_route_bytes(m, &z->s));
        CU_ASSERT(ok);
        n->compared++;
        /* recompute: what F keeps (act) and what R rebuilds (act2) under each mode are
         * ir/cost.c's IR_T_SAVED and IR_T_RECOMP, as the CPU's (tests/exec_cpu/test_model.c).
         * The embedding and the head are never recomputed: they keep everything under every
         * mode. */
        const test_recompute_mode modes[] = TEST_RECOMPUTE_MODES;
        for (size_t q = 0; q < BASE_COUNT(modes); q++) {
            ir_shape rsh = z->s;
            rsh.recompute = modes[q].rc;
            rsh.recompute_from_prev = modes[q].prev;
            double saved = ir_region_activation_bytes(m, r, &rsh);
            /* the dropout mask, regenerated here, where the cost model keeps it: the
             * embedding's always, a layer's under selective recompute (full recompute keeps the
             * input only) */
            if (m->dropout && masked &&
                (r->kind == IR_REGION_EMBED || modes[q].mode == EXEC_ACT_SELECTIVE))
                saved -= mask;
            /* the combine under full recompute keeps its input, residual included: more than
             * without recompute, and rebuilds nothing */
            double recomp = want - saved > 0 ? want - saved : 0;
            int64_t kept = -1, rebuilt = -1;
            CU_ASSERT_FATAL(exec_cuda_region_act_split(c, z->sh, (exec_region_kind)r->kind,
                                                       modes[q].mode, &kept, &rebuilt, &e) == 0);
            if ((double)kept != saved || (double)rebuilt != recomp)
                fprintf(stderr, "\n  %s%s %s tp %d ep %d mode %d: kept %lld rebuilt %lld; cost "
                                "model %.0f, %.0f",
                        m->name, z->variant ? " (variant)" : "", r->name, (int)z->s.tp,
                        (int)z->s.ep, (int)modes[q].mode, (long long)kept, (long long)rebuilt,
                        saved, recomp);
            CU_ASSERT((double)kept == saved && (double)rebuilt == recomp);
            n->splits++;
        }
    }
}

static void test_cuda_layouts_match_cost_model(void)
{
    cuda_layout_counts n = {0, 0};
    test_for_each_zoo_shard(true, PLAN_BF16, cuda_layouts_of_case, &n);
    fprintf(stderr, "\n  %d CUDA region layouts compared with the cost model, %d recompute splits\n",
            n.compared, n.splits);
    CU_ASSERT(n.splits == 3 * n.compared);
    CU_ASSERT(n.compared > 100);
}
#endif

int piper_tests_register(void)
{
    static const test_case cases[] = {
        {"every enumerated identity has a CUDA kernel", test_enumeration_covered},
        {"every identity of compiled plans has a CUDA kernel", test_compiled_plans_covered},
        {"the CUDA list is the CPU table's", test_list_matches_cpu_table},
        {"device random numbers are the CPU's", test_rng_matches_cpu},
        {"bf16 rounding", test_bf16_rounding},
#ifdef PIPER_HAVE_CUDA
        {"the CUDA table", test_cuda_table},
        {"CUDA buffer sizes against the CPU's", test_cuda_sizes},
        {"CUDA layouts are the cost model's at bf16", test_cuda_layouts_match_cost_model},
#endif
        {NULL, NULL}};
    return test_add_suite("exec cuda (host side)", cases);
}
