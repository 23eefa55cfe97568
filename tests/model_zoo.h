/* model_zoo.h — runs a check over every model of configs/models/ (the zoo), for tests that must
 * hold for each model the compiler can be given: the CPU kernel table and the CUDA identity list
 * both cover every region identity of every model, and both backends' buffers are the cost
 * model's. With exec/cpu/kernels.h included first, also the executor's shape of a zoo model. */
#ifndef PIPER_TESTS_MODEL_ZOO_H
#define PIPER_TESTS_MODEL_ZOO_H

#include <dirent.h>

#include "ir/model.h"
#include "tests/testutil.h"

/* Loads every .yaml file of configs/models/ into `a` and adds check(model, a) to the returned sum; a model
 * that does not load fails the test with its message. *models counts the models checked. */
static inline int test_for_each_zoo_model(base_arena *a, int (*check)(const ir_model *, base_arena *), int *models)
{
    base_error e;
    base_error_clear(&e);
    int sum = 0;
    *models = 0;
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
            continue;
        }
        sum += check(&m, a);
        (*models)++;
    }
    closedir(dir);
    return sum;
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
#endif

#endif
