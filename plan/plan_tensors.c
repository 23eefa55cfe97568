/* plan_tensors.c — the rows of plan_tensors.h's table (each count a function generated from its
 * expression) and the walk that lays a region's tensors out for a consumer. */
#include "plan.h"

#define COUNT_FN_(reg, id, use, elem, needs, excludes, count)                                  \
    static int64_t count_##reg##_##id(const plan_tensor_dims *d) { return (count); }
PLAN_TENSOR_TABLE(COUNT_FN_)
#undef COUNT_FN_

#define ROW_(reg, id, use, elem, needs, excludes, count)                                       \
    {PLAN_TR_##reg, #reg "." #id, PLAN_TUSE_##use, PLAN_TELEM_##elem, (needs), (excludes),       \
     count_##reg##_##id},
static const plan_tensor_row rows[PLAN_NTENSORS] = {PLAN_TENSOR_TABLE(ROW_)};
#undef ROW_

#define NAME_(en, name) name,
static const char *const tregion_names[PLAN_NTREGIONS] = {PLAN_TREGION_TABLE(NAME_)};
static const char *const telem_names[PLAN_NTELEMS] = {PLAN_TELEM_TABLE(NAME_)};
static const char *const tuse_names[PLAN_NTUSES] = {PLAN_TUSE_TABLE(NAME_)};
#undef NAME_

const plan_tensor_row *plan_tensor_row_of(plan_tensor t)
{
    return t >= 0 && t < PLAN_NTENSORS ? &rows[t] : NULL;
}

const char *plan_tregion_name(plan_tregion r)
{
    return r >= 0 && r < PLAN_NTREGIONS ? tregion_names[r] : NULL;
}
const char *plan_telem_name(plan_telem c)
{
    return c >= 0 && c < PLAN_NTELEMS ? telem_names[c] : NULL;
}
const char *plan_tuse_name(plan_tuse u)
{
    return u >= 0 && u < PLAN_NTUSES ? tuse_names[u] : NULL;
}

bool plan_tensor_present(plan_tensor t, const plan_tensor_dims *d)
{
    const plan_tensor_row *r = &rows[t];
    return (d->flags & r->needs) == r->needs && !(d->flags & r->excludes);
}

int64_t plan_tensor_elems(plan_tensor t, const plan_tensor_dims *d)
{
    return plan_tensor_present(t, d) ? rows[t].count(d) : 0;
}

void plan_tensor_walk(plan_tregion r, const plan_tensor_dims *d, const plan_tensor_rule *rule,
                      plan_tensor_layout *L)
{
    L->bytes[0] = L->bytes[1] = 0;
    for (int t = 0; t < PLAN_NTENSORS; t++) {
        L->part[t] = -1;
        L->off[t] = 0;
        const plan_tensor_row *row = &rows[t];
        int p = rule->part[row->use];
        if (row->region != r || p < 0 || !plan_tensor_present((plan_tensor)t, d)) continue;
        int64_t size = rule->elem[row->elem], a = rule->align ? rule->align : size;
        int64_t at = (L->bytes[p] + a - 1) / a * a;
        L->part[t] = (int8_t)p;
        L->off[t] = at;
        L->bytes[p] = at + row->count(d) * size;
    }
}
