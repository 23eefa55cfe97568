/* sim_internal.h — what sim/'s files share and nobody else sees: the SimGrid replay entry point
 * (replay.c), which run.c calls in a forked child, and the static facts of a plan that the replay
 * and the report both need (stats.c). */
#ifndef PIPER_SIM_INTERNAL_H
#define PIPER_SIM_INTERNAL_H

#include "sim.h"

/* Replays the plan in this process with SimGrid, filling r (r->dev malloc'd). SimGrid can run once
 * per process: run.c calls this in a child. */
int sim_replay(const sched_plan *p, const sim_options *o, sim_result *r, base_error *e);

/* GEMM FLOPs of a kernel list (formulas.md counts GEMMs only). */
double sim_kernel_list_gemm_flops(const sched_plan *p, int kl);
/* Is the pass counted in model FLOPs (F, B, BI, BW: not recompute, optimizer or aux)? */
bool sim_pass_is_model(int pass);

/* Fills the result's derived figures (step, tokens/s, MFU/HFU, idle, critical device, memory
 * flags) from the per-device facts the replay measured. */
void sim_result_finish(const sched_plan *p, sim_result *r);

#endif
