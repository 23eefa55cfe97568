/* model_zoo.h — runs a check over every model of configs/models/ (the zoo), for tests that must
 * hold for each model the compiler can be given: the CPU kernel table and the CUDA identity list
 * both cover every region identity of every model. */
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

#endif
