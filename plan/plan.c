/* plan.c — names of the plan's enumerations (from plan.h's tables, with the roles' memory
 * categories and the purposes' collective kinds), the plan's lifetime and its instructions'
 * defaults. */
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
#define ROLE_MEM_ROW(e, name, mem) [e] = mem,
#define PURPOSE_COLLS_ROW(e, name, colls) [e] = colls,
static const char *const ROLE_NAMES[] = {PLAN_ROLE_TABLE(NAME_ROW)};
static const int ROLE_MEM[] = {PLAN_ROLE_TABLE(ROLE_MEM_ROW)};
static const char *const PURPOSE_NAMES[] = {PLAN_PURPOSE_TABLE(NAME_ROW)};
static const unsigned PURPOSE_COLLS[] = {PLAN_PURPOSE_TABLE(PURPOSE_COLLS_ROW)};
static const char *const PIECE_NAMES[] = {PLAN_PIECE_TABLE(NAME_ROW)};

const char *plan_op_name(plan_op op) { return (unsigned)op <= PLAN_NOP ? OP_NAMES[op] : "?"; }
const char *plan_coll_name(plan_coll c) { return (unsigned)c < PLAN_NCOLL ? COLL_NAMES[c] : "?"; }
const char *plan_mem_name(plan_mem m) { return (unsigned)m < PLAN_NMEM ? MEM_NAMES[m] : "?"; }
const char *plan_pass_name(plan_pass p) { return (unsigned)p < PLAN_NPASS ? PASS_NAMES[p] : "?"; }
const char *plan_dtype_name(plan_dtype d) { return (unsigned)d < PLAN_NDTYPE ? DTYPE_NAMES[d] : "?"; }
int plan_dtype_bytes(plan_dtype d) { return (unsigned)d < PLAN_NDTYPE ? DTYPE_BYTES[d] : 0; }
const char *plan_topology_name(plan_topology t) { return (unsigned)t < PLAN_NTOPO ? TOPOLOGY_NAMES[t] : "?"; }
const char *plan_role_name(plan_role r) { return (unsigned)r < PLAN_NROLE ? ROLE_NAMES[r] : "?"; }
const char *plan_purpose_name(plan_purpose p) { return (unsigned)p < PLAN_NPURPOSE ? PURPOSE_NAMES[p] : "?"; }
const char *plan_piece_name(plan_piece p) { return (unsigned)p < PLAN_NPIECE ? PIECE_NAMES[p] : "?"; }
int plan_role_mem(plan_role r) { return (unsigned)r < PLAN_NROLE ? ROLE_MEM[r] : -1; }
bool plan_purpose_allows(plan_purpose p, plan_coll c)
{
    return (unsigned)p < PLAN_NPURPOSE && (unsigned)c < PLAN_NCOLL && (PURPOSE_COLLS[p] >> c & 1u);
}

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
    in->purpose = PLAN_PURPOSE_NONE;
    in->piece = PLAN_PIECE_NONE;
}
