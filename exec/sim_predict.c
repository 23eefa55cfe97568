/* sim_predict.c — piper-exec's comparison with the simulator: at the end of a run, rank 0
 * simulates the plan it ran with the simulator library (sim/sim.h), as `piper-sim PLAN` does (the
 * built-in calibration, then the cluster's, the plan's static check, the simulation), and keeps
 * the predicted step time and every device's peak memory, which piper-exec prints next to what it
 * measured. SimGrid's engine runs once per process and aborts on its own errors, so sim_run
 * simulates in a forked child that only simulates and leaves with _exit(), never touching MPI
 * (sim/run.c). The prediction is information, not a check: when the simulation fails, the run
 * says so and succeeds. */
#include <stdlib.h>
#include <string.h>

#include "sim_predict.h"

#include "../sim/sim.h"

int exec_sim_predict(const plan_set *p, int ndevices, exec_sim_prediction *out, base_error *e)
{
    memset(out, 0, sizeof *out);
    if (ndevices > p->ndevices) return base_errorf(e, "the plan has %d devices, fewer than %d ranks", p->ndevices, ndevices);
    sim_options o;
    sim_options_init(&o, p);
    /* cost constants: built-in defaults < the built-in calibration file < the cluster's calibration */
    char entry[32];
    const char *name = "configs/calibration.txt (built in)";
    if (sim_calibration_apply(&o.costs, p->gpu.name, name, sim_calibration_builtin, entry, sizeof entry, e) ||
        sim_calibration_apply_plan(&o.costs, p, e))
        return -1;
    plan_stats st;
    if (plan_check(p, &st, e)) return -1;
    plan_stats_free(&st);
    sim_result r;
    if (sim_run(p, &o, &r, e)) return -1;
    out->step_seconds = r.step_seconds;
    out->ndevices = ndevices;
    out->peak = base_xcalloc((size_t)(ndevices > 0 ? ndevices : 1), sizeof *out->peak);
    for (int d = 0; d < ndevices; d++) out->peak[d] = r.dev[d].peak_bytes;
    sim_result_free(&r);
    return 0;
}

void exec_sim_prediction_free(exec_sim_prediction *p)
{
    free(p->peak);
    p->peak = NULL;
}
