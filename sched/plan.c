/* plan.c — names of the plan's enumerations and the plan's lifetime (see plan.h). */
#include "plan.h"

#include <string.h>

static const char *const OP_NAMES[] = {"compute", "send", "recv",  "coll", "record",
                                       "wait",    "alloc", "free", "nop"};
static const char *const COLL_NAMES[] = {"all_reduce", "reduce_scatter", "all_gather",
                                         "all_to_all", "broadcast",      "reduce"};
static const char *const MEM_NAMES[] = {"params", "grads", "optimizer", "activations", "comm", "workspace"};
static const char *const PASS_NAMES[] = {"F", "B", "BI", "BW", "R", "UPD", "AUX"};
static const char *const DTYPE_NAMES[] = {"fp32", "bf16", "fp16", "fp64", "fp8"};
static const int DTYPE_BYTES[] = {4, 2, 2, 8, 1};
static const char *const TOPOLOGY_NAMES[] = {"fat-tree", "rail"};

const char *sched_plan_op_name(plan_op op) { return op <= PLAN_NOP ? OP_NAMES[op] : "?"; }
const char *sched_plan_coll_name(plan_coll c) { return c < PLAN_NCOLL ? COLL_NAMES[c] : "?"; }
const char *sched_plan_mem_name(plan_mem m) { return m < PLAN_NMEM ? MEM_NAMES[m] : "?"; }
const char *sched_plan_pass_name(plan_pass p) { return p < PLAN_NPASS ? PASS_NAMES[p] : "?"; }
const char *sched_plan_dtype_name(plan_dtype d) { return d < PLAN_NDTYPE ? DTYPE_NAMES[d] : "?"; }
int sched_plan_dtype_bytes(plan_dtype d) { return d < PLAN_NDTYPE ? DTYPE_BYTES[d] : 0; }
const char *sched_plan_topology_name(plan_topology t) { return t < PLAN_NTOPO ? TOPOLOGY_NAMES[t] : "?"; }

void sched_plan_init(sched_plan *p)
{
    memset(p, 0, sizeof *p);
    p->version = SCHED_PLAN_VERSION;
    base_arena_init(&p->arena);
}

void sched_plan_free(sched_plan *p)
{
    base_arena_free(&p->arena);
    memset(p, 0, sizeof *p);
}
