/* sim_predict.h — the simulator's prediction of a plan, for piper-exec's end-of-run comparison
 * (sim_predict.c): the one part of piper-exec that calls the simulator library. */
#ifndef PIPER_EXEC_SIM_PREDICT_H
#define PIPER_EXEC_SIM_PREDICT_H

#include "../base/base.h"
#include "../plan/plan.h"

typedef struct exec_sim_prediction {
    double step_seconds;
    int ndevices;
    double *peak;           /* bytes per device */
} exec_sim_prediction;

/* Simulates one step of the plan as piper-sim does by default and keeps the step time and the
 * peak memory of devices 0 .. ndevices - 1. Errors: the static check's or the simulation's. */
int exec_sim_predict(const plan_set *p, int ndevices, exec_sim_prediction *out, base_error *e);
void exec_sim_prediction_free(exec_sim_prediction *p);

#endif
