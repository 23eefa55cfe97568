/* sim_predict.h — the piper-sim prediction of a plan, for piper-exec's end-of-run comparison
 * (sim_predict.c). */
#ifndef PIPER_EXEC_SIM_PREDICT_H
#define PIPER_EXEC_SIM_PREDICT_H

#include <stdbool.h>

#include "../base/base.h"

typedef struct exec_sim_prediction {
    bool absent;            /* no piper-sim next to piper-exec */
    double step_seconds;
    int ndevices;
    double *peak;           /* bytes per device */
} exec_sim_prediction;

/* Runs the piper-sim next to this executable on plan_path and reads its prediction. */
int exec_sim_predict(const char *plan_path, int ndevices, exec_sim_prediction *out, base_error *e);
void exec_sim_prediction_free(exec_sim_prediction *p);

#endif
