/* eval.c — tiers (b) and (c) of one candidate: its program compiled in this process (the
 * compiler's contract, sched/sched.h) with the static check (deadlock proof, exact peak memory
 * per device, the abstract run's makespan as the quick estimate), then for the best K the
 * simulator (sim/sim.h) with the built-in calibration, as piper-sim runs it. */
#include "search.h"

#include <string.h>

#include "../sched/sched.h"
#include "../sim/sim.h"

/* The candidate's program, compiled (allowing plans over memory, so that their peak is known).
 * Fills ev->reason and ev->msg on failure. */
static int compile(const search_problem *pb, const search_candidate *c, sched_compilation *comp, search_eval *ev)
{
    base_buf text = {0};
    search_program_text(pb, c, pb->model_path, pb->cluster_path, &text);
    base_error e;
    base_error_clear(&e);
    ir_doc *d;
    sched_options so = {.allow_oom = true};
    int rc = ir_doc_parse(&comp->arena, "candidate.yaml", text.s, text.n, &d, &e);
    if (!rc) rc = ir_program_from_doc(d, ".", &pb->model, &pb->cluster, &comp->arena, &comp->prog, &e);
    if (!rc) rc = sched_build_dag(comp, &e);
    bool lowering = !rc;
    if (!rc) rc = sched_lower(comp, &so, &e);
    base_buf_free(&text);
    if (rc) {
        /* the static check names a deadlock as such; anything else is the compiler refusing */
        ev->reason = lowering && strstr(e.msg, "deadlock") ? SEARCH_DEADLOCK : SEARCH_COMPILE;
        snprintf(ev->msg, sizeof ev->msg, "%.319s", e.msg);
    }
    return rc;
}

void search_compile_eval(const search_problem *pb, const search_candidate *c, search_eval *ev)
{
    memset(ev, 0, sizeof *ev);
    ev->peak_device = -1;
    sched_compilation comp;
    sched_compilation_init(&comp);
    if (!compile(pb, c, &comp, ev)) {
        const plan_stats *st = &comp.stats;
        for (int dv = 0; dv < st->ndevices; dv++)
            if (ev->peak_device < 0 || st->dev[dv].peak_bytes > ev->peak_bytes) {
                ev->peak_device = dv;
                ev->peak_bytes = st->dev[dv].peak_bytes;
                memcpy(ev->at_peak, st->dev[dv].at_peak, sizeof ev->at_peak);
            }
        ev->estimate_seconds = st->makespan_seconds;
        ev->reason = ev->peak_bytes > search_usable_bytes(pb) ? SEARCH_OOM : SEARCH_OK;
    }
    sched_compilation_free(&comp);
}

/* The cost constants as piper-sim sets them by default: the built-in calibration, then the
 * cluster's own (sim/piper_sim.c). */
static int sim_setup(const plan_set *p, sim_options *o, base_error *e)
{
    sim_options_init(o, p);
    o->fold = true;
    char entry[32];
    if (sim_calibration_apply(&o->costs, p->gpu.name, "configs/calibration.txt (built in)", sim_calibration_builtin,
                              entry, sizeof entry, e))
        return -1;
    return sim_calibration_apply_plan(&o->costs, p, e);
}

void search_simulate_eval(const search_problem *pb, const search_candidate *c, search_eval *ev)
{
    sched_compilation comp;
    sched_compilation_init(&comp);
    if (compile(pb, c, &comp, ev)) {
        sched_compilation_free(&comp);
        return;
    }
    sim_options o;
    sim_result r;
    base_error e;
    base_error_clear(&e);
    int rc = sim_setup(&comp.plan, &o, &e);
    if (!rc) rc = sim_run(&comp.plan, &o, &r, &e);
    if (rc) {
        ev->reason = SEARCH_SIM;
        snprintf(ev->msg, sizeof ev->msg, "%.319s", e.msg);
    } else {
        ev->reason = SEARCH_OK;
        ev->simulated = true;
        ev->step_seconds = r.step_seconds;
        ev->tokens_per_second = r.tokens_per_second;
        /* MFU over the GPUs searched: with --gpus N the cluster's other devices idle */
        ev->mfu = r.step_seconds > 0 && r.peak_flops > 0
                      ? r.model_flops / (r.step_seconds * r.peak_flops * (double)pb->gpus)
                      : 0;
        for (int d = 0; d < r.ndevices; d++)
            if (r.dev[d].peak_bytes > ev->sim_peak_bytes) ev->sim_peak_bytes = r.dev[d].peak_bytes;
        sim_result_free(&r);
    }
    sched_compilation_free(&comp);
}
