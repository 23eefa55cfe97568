/* model_zoo.h — runs a check over every model of configs/models/ (the zoo), for tests that must
 * hold for each model the compiler can be given: the CPU kernel table and the CUDA identity list
 * both cover every region identity of every model, and both backends' buffers are the cost
 * model's. With exec/cpu/kernels.h included first, also the executor's shape of a zoo model. */
#ifndef PIPER_TESTS_MODEL_ZOO_H
#define PIPER_TESTS_MODEL_ZOO_H

#include <dirent.h>

#include "ir/model.h"
#include "tests/testutil.h"

/* Loads every .yaml file of configs/models/ into `a` and calls visit(model, a, ctx) on each; a
 * model that does not load fails the test with its message. Returns the models visited. */
static inline int test_walk_zoo(base_arena *a, void (*visit)(const ir_model *, base_arena *, void *),
                                void *ctx)
{
    base_error e;
    base_error_clear(&e);
    int models = 0;
    DIR *dir = opendir(test_src_path("configs/models"));
    CU_ASSERT_FATAL(dir != NULL);
    struct dirent *de;
    while ((de = readdir(dir))) {
        size_t len = strlen(de->d_name);
        if (len < 6 || strcmp(de->d_name + len - 5, ".yaml")) continue;
        char path[512];
        snprintf(path, sizeof path, "configs/models/%s", de->d_name);
        ir_model m;
        if (ir_model_load(test_src_path(path), a, &m, &e)) {
            fprintf(stderr, "\n  %s\n", e.msg);
            CU_FAIL("model does not load");
            base_error_clear(&e);
            continue;
        }
        visit(&m, a, ctx);
        models++;
    }
    closedir(dir);
    return models;
}

typedef struct test_zoo_sum {
    int (*check)(const ir_model *, base_arena *);
    int sum;
} test_zoo_sum;

static inline void test_zoo_sum_visit(const ir_model *m, base_arena *a, void *ctx)
{
    test_zoo_sum *z = ctx;
    z->sum += z->check(m, a);
}

/* Adds check(model, a) over every zoo model to the returned sum; *models counts the models. */
static inline int test_for_each_zoo_model(base_arena *a, int (*check)(const ir_model *, base_arena *), int *models)
{
    test_zoo_sum z = {check, 0};
    *models = test_walk_zoo(a, test_zoo_sum_visit, &z);
    return z.sum;
}

#ifdef PIPER_EXEC_CPU_KERNELS_H
/* The executor's model shape of a zoo model, as a plan would carry it (micro-batch 2). */
static inline int test_exec_cfg_from_ir(const ir_model *m, exec_cfg *c, base_error *e)
{
    plan_model pm;
    memset(&pm, 0, sizeof pm);
    pm.name = m->name;
    pm.family = m->family == IR_FAMILY_GPT ? "gpt" : "llama";
    pm.layers = m->layers;
    pm.hidden = m->hidden;
    pm.heads = m->heads;
    pm.kv_heads = m->kv_heads;
    pm.head_dim = m->head_dim;
    pm.ffn = m->ffn;
    pm.experts = m->experts;
    pm.expert_ffn = m->expert_ffn;
    pm.top_k = m->top_k;
    pm.capacity_factor = m->capacity_factor;
    pm.vocab = m->vocab;
    pm.seq = m->seq;
    pm.tied_embeddings = m->tied_embeddings;
    pm.qk_norm = m->qk_norm;
    pm.dropout = m->dropout;
    pm.micro_batch = 2;
    if (exec_cfg_from_plan(&pm, 1, c, e)) return -1;
    c->learned_pos = m->learned_positions; /* not in the plan's model shape */
    return 0;
}

/* One case of the layout tests: a zoo model in one of its two variants (GPT with and without
 * dropout, Llama-family with and without QK-norm), its regions (each kind once: layers repeat),
 * and the last shard of one TP x EP split, with the cost model's shape of it. */
typedef struct test_zoo_case {
    const ir_model *m;
    int variant;                 /* 1: dropout / QK-norm toggled */
    const exec_cfg *c;
    const exec_shard *sh;
    ir_shape s;                  /* micro-batch 2, no recompute or sequence parallelism */
    const ir_region *rs;         /* the regions of the first two layers, embed and head */
    int nregions;
} test_zoo_case;

/* The recompute modes of the layout tests: the cost model's shape and the executors' split. */
#define TEST_RECOMPUTE_MODES                                                                   \
    {                                                                                          \
        {IR_RECOMPUTE_SELECTIVE, false, EXEC_ACT_SELECTIVE},                                   \
            {IR_RECOMPUTE_FULL, false, EXEC_ACT_INPUT}, {IR_RECOMPUTE_FULL, true, EXEC_ACT_NONE} \
    }
typedef struct test_recompute_mode {
    ir_recompute rc;
    bool prev;          /* recompute_from_prev: the chained full recompute */
    exec_act_mode mode;
} test_recompute_mode;

typedef struct test_zoo_shards {
    bool flash;
    plan_dtype dt;
    void (*check)(const test_zoo_case *z, void *ctx);
    void *ctx;
    int cases;
} test_zoo_shards;

static inline void test_zoo_shards_visit(const ir_model *m0, base_arena *a, void *ctx)
{
    test_zoo_shards *w = ctx;
    base_error e;
    base_error_clear(&e);
    for (int variant = 0; variant < 2; variant++) {
        ir_model m = *m0;
        if (variant == 1 && m.family == IR_FAMILY_GPT) m.dropout = !m.dropout;
        if (variant == 1 && m.family != IR_FAMILY_GPT) m.qk_norm = !m.qk_norm;
        m.flash_attention = w->flash;
        exec_cfg c;
        CU_ASSERT_FATAL(test_exec_cfg_from_ir(&m, &c, &e) == 0);
        int n = ir_model_nregions(&m);
        ir_region *all = base_arena_calloc(a, (size_t)n, sizeof *all);
        ir_model_regions(&m, a, all);
        ir_region *rs = base_arena_calloc(a, (size_t)n, sizeof *rs);
        int nr = 0;
        for (int i = 0; i < n; i++)
            if (i == 0 || all[i].layer <= 1) rs[nr++] = all[i]; /* layers repeat */
        const int degrees[] = {1, 2, 4, 8};
        for (size_t ti = 0; ti < 4; ti++)
            for (size_t ei = 0; ei < 3; ei++) {
                ir_shape s = ir_shape_default();
                s.tp = degrees[ti];
                s.ep = degrees[ei];
                s.micro_batch = 2;
                s.act_dtype = w->dt;
                s.recompute = IR_RECOMPUTE_NONE;
                s.sequence_parallel = false;
                base_error ie;
                base_error_clear(&ie);
                if (ir_shape_validate(&m, &s, &ie)) continue;
                if (m.experts == 0 && s.ep > 1) continue;
                exec_shard sh;
                CU_ASSERT_FATAL(exec_shard_init(&c, (int)s.tp, (int)s.tp - 1, (int)s.ep,
                                                (int)s.ep - 1, &sh, &e) == 0);
                const test_zoo_case z = {&m, variant, &c, &sh, s, rs, nr};
                w->check(&z, w->ctx);
                w->cases++;
            }
    }
}

/* Calls check for every zoo model and variant with flash_attention set to flash, and every valid
 * split of TP 1, 2, 4, 8 by EP 1, 2, 4 (EP only for MoE models), at activation dtype dt. Returns
 * the number of cases. */
static inline int test_for_each_zoo_shard(bool flash, plan_dtype dt,
                                          void (*check)(const test_zoo_case *z, void *ctx), void *ctx)
{
    base_arena a;
    base_arena_init(&a);
    test_zoo_shards w = {flash, dt, check, ctx, 0};
    test_walk_zoo(&a, test_zoo_shards_visit, &w);
    base_arena_free(&a);
    return w.cases;
}
#endif

#endif
