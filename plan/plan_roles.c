/* plan_roles.c — the rules that tie the roles of a plan (plan.h's role, purpose and piece
 * tables) to the rest of it: what the reader checks line by line and plan_check checks of a plan
 * built in memory, written once here so the two cannot disagree. Only invariants that follow
 * from the tables themselves are checked; which role a buffer should have is the lowering's
 * business (sched/lower.c). */
#include "plan.h"

#include <stdio.h>

const char *plan_buffer_role_problem(const plan_buffer *b, char *msg, size_t n)
{
    if (b->role >= PLAN_NROLE) {
        snprintf(msg, n, "role %u is not a plan_role; use a row of PLAN_ROLE_TABLE", b->role);
        return msg;
    }
    int mem = plan_role_mem((plan_role)b->role);
    if (mem >= 0 && mem != b->mem) {
        snprintf(msg, n, "a buffer of role %s belongs to memory category %s, not %s; fix its mem= or "
                         "its role=",
                 plan_role_name((plan_role)b->role), plan_mem_name((plan_mem)mem),
                 plan_mem_name((plan_mem)b->mem));
        return msg;
    }
    return NULL;
}

const char *plan_instr_role_problem(const plan_instr *in, char *msg, size_t n)
{
    if (in->purpose >= PLAN_NPURPOSE || in->piece >= PLAN_NPIECE) {
        snprintf(msg, n, "purpose %u or piece %u is out of its table; use a row of "
                         "PLAN_PURPOSE_TABLE and PLAN_PIECE_TABLE", in->purpose, in->piece);
        return msg;
    }
    if (in->op != PLAN_COLL) return NULL; /* uninterpreted there: kept as it is */
    if (!plan_purpose_allows((plan_purpose)in->purpose, (plan_coll)in->coll)) {
        snprintf(msg, n, "a collective of kind %s cannot have purpose %s; give it a purpose of its kind "
                         "(docs/plan-format.md, Purposes)",
                 plan_coll_name((plan_coll)in->coll), plan_purpose_name((plan_purpose)in->purpose));
        return msg;
    }
    return NULL;
}

int plan_roles_check(const plan_set *p, base_error *e)
{
    char msg[256];
    for (int li = 0; li < p->nlists; li++) {
        const plan_list *L = &p->lists[li];
        for (int b = 0; b < L->nbufs; b++)
            if (plan_buffer_role_problem(&L->bufs[b], msg, sizeof msg))
                return base_errorf(e, "list %d buffer %d (%s): %s", li, b,
                                   L->bufs[b].name ? L->bufs[b].name : "?", msg);
        for (int i = 0; i < L->n; i++)
            if (plan_instr_role_problem(&L->ins[i], msg, sizeof msg))
                return base_errorf(e, "list %d instruction %d: %s", li, i, msg);
    }
    return 0;
}
