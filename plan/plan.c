/* plan.c — names of the plan's enumerations (from plan.h's tables), the plan's lifetime and
 * its instructions' defaults. */
#include "plan.h"

#include <string.h>

/* Each name function indexes an array generated from its table in plan.h. */
#define NAME_ROW(e, name, ...) [e] = name,
#define BYTES_ROW(e, name, bytes) [e] = bytes,
static const char *const OP_NAMES[] = {PLAN_OP_TABLE(NAME_ROW)};
static const char *const COLL_NAMES[] = {PLAN_COLL_TABLE(NAME_ROW)};
static const char *const MEM_NAMES[] = {PLAN_MEM_TABLE(NAME_ROW)};
static const char *const PASS_NAMES[] = {PLAN_PASS_TABLE(NAME_ROW)};
static const char *const DTYPE_NAMES[] = {PLAN_DTYPE_TABLE(NAME_ROW)};
static const int DTYPE_BYTES[] = {PLAN_DTYPE_TABLE(BYTES_ROW)};
static const char *const TOPOLOGY_NAMES[] = {PLAN_TOPOLOGY_TABLE(NAME_ROW)};

const char *plan_op_name(plan_op op) { return (unsigned)op <= PLAN_NOP ? OP_NAMES[op] : "?"; }
const char *plan_coll_name(plan_coll c) { return (unsigned)c < PLAN_NCOLL ? COLL_NAMES[c] : "?"; }
const char *plan_mem_name(plan_mem m) { return (unsigned)m < PLAN_NMEM ? MEM_NAMES[m] : "?"; }
const char *plan_pass_name(plan_pass p) { return (unsigned)p < PLAN_NPASS ? PASS_NAMES[p] : "?"; }
const char *plan_dtype_name(plan_dtype d) { return (unsigned)d < PLAN_NDTYPE ? DTYPE_NAMES[d] : "?"; }
int plan_dtype_bytes(plan_dtype d) { return (unsigned)d < PLAN_NDTYPE ? DTYPE_BYTES[d] : 0; }
const char *plan_topology_name(plan_topology t) { return (unsigned)t < PLAN_NTOPO ? TOPOLOGY_NAMES[t] : "?"; }

void plan_init(plan_set *p)
{
    memset(p, 0, sizeof *p);
    p->version = PLAN_VERSION;
    base_arena_init(&p->arena);
}

void plan_free(plan_set *p)
{
    base_arena_free(&p->arena);
    memset(p, 0, sizeof *p);
}

void plan_instr_init(plan_instr *in, plan_op op)
{
    memset(in, 0, sizeof *in);
    in->op = (uint8_t)op;
    in->region = in->kernels = in->kid = in->mb = in->stage = in->buf = in->tp_group = in->ep_group = -1;
    in->peer = in->group = in->event = -1;
}
