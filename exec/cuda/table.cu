/* table.cu — the CUDA backend's kernel identities mapped to its region functions, expanded from
 * the same X-macro as the plain-C identity list (identities.h) that tests/exec_cuda checks
 * against every identity the compiler can emit; the dispatcher; the regions' buffer sizes.
 *
 * Every region kind has F; B (BI then BW); BI; BW; R (F again from the region's input: dropout
 * masks are pure functions of their indices, so a recomputation rebuilds exactly what F saved);
 * UPD. The embedding's BI and the combine's BW have nothing to compute. */
#include "common.cuh"
#include "identities.h"

extern "C" {
static int exec_cuda_noop(const exec_cuda_call *c, base_error *e)
{
    (void)c;
    (void)e;
    return 0;
}

/* the region functions (attention.cu, mlp.cu, moe.cu, embed_head.cu, optim.cu) */
#define DECLARE_(fam, famid, kname, kind, f, bi, bw)                                           \
    int exec_cuda_##f(const exec_cuda_call *c, base_error *e);                                 \
    int exec_cuda_##bi(const exec_cuda_call *c, base_error *e);                                \
    int exec_cuda_##bw(const exec_cuda_call *c, base_error *e);
#define DECLARE_AUX_(id, fn) int exec_cuda_##fn(const exec_cuda_call *c, base_error *e);
/* noop is defined above; a redeclaration of a static function as non-static is an error, so
 * keep it out of the list */
#define exec_cuda_noop exec_cuda_noop_decl_
EXEC_CUDA_REGIONS(DECLARE_)
#undef exec_cuda_noop
EXEC_CUDA_AUX(DECLARE_AUX_)
int exec_cuda_region_upd(const exec_cuda_call *c, base_error *e);
}

#define ROW_(fam, famid, kname, kind, pass, a, b)                                              \
    {fam "." kname "." #pass, famid, kind, PLAN_PASS_##pass, {a, b}}
#define REGION_(fam, famid, kname, kind, f, bi, bw)                                            \
    ROW_(fam, famid, kname, kind, F, exec_cuda_##f, NULL),                                     \
        ROW_(fam, famid, kname, kind, B, exec_cuda_##bi, exec_cuda_##bw),                      \
        ROW_(fam, famid, kname, kind, BI, exec_cuda_##bi, NULL),                               \
        ROW_(fam, famid, kname, kind, BW, exec_cuda_##bw, NULL),                               \
        ROW_(fam, famid, kname, kind, R, exec_cuda_##f, NULL),                                 \
        ROW_(fam, famid, kname, kind, UPD, exec_cuda_region_upd, NULL),
#define AUX_(id, fn) {id, -1, -1, PLAN_PASS_AUX, {exec_cuda_##fn, NULL}},

static const exec_cuda_kernel TABLE[] = {EXEC_CUDA_REGIONS(REGION_) EXEC_CUDA_AUX(AUX_)};

static_assert(sizeof TABLE / sizeof TABLE[0] == sizeof EXEC_CUDA_IDENTITIES /
                                                     sizeof EXEC_CUDA_IDENTITIES[0],
              "the table and the identity list expand the same X-macro");

extern "C" int exec_cuda_kernel_count(void) { return (int)(sizeof TABLE / sizeof TABLE[0]); }

extern "C" const exec_cuda_kernel *exec_cuda_kernel_at(int i)
{
    return i >= 0 && i < exec_cuda_kernel_count() ? &TABLE[i] : NULL;
}

extern "C" const exec_cuda_kernel *exec_cuda_kernel_find(const char *id)
{
    if (!id) return NULL;
    for (int i = 0; i < exec_cuda_kernel_count(); i++)
        if (strcmp(TABLE[i].id, id) == 0) return &TABLE[i];
    return NULL;
}

extern "C" int exec_cuda_kernel_run(const exec_cuda_kernel *k, const exec_cuda_call *c,
                                    base_error *e)
{
    if (!k || !c || !c->ctx || !c->c.cfg || !c->c.shard)
        return base_errorf(e, "CUDA kernel call without %s",
                           !k          ? "a kernel"
                           : !c        ? "a call"
                           : !c->ctx   ? "a CUDA context"
                           : !c->c.cfg ? "a model (cfg)"
                                       : "a shard");
    if (k->family >= 0 && (k->family == 0) != c->c.cfg->gpt)
        return base_errorf(e, "%s: the plan's model is of the %s family; the plan and the model "
                              "disagree",
                           k->id, c->c.cfg->gpt ? "gpt" : "llama");
    exec_cuda_call cc = *c;
    if (k->kind >= 0) cc.c.kind = (exec_region_kind)k->kind;
    for (int i = 0; i < 2; i++)
        if (k->fn[i] && k->fn[i](&cc, e)) {
            base_error_prefix(e, "%s (layer %d): ", k->id, c->c.layer);
            return -1;
        }
    return 0;
}

extern "C" int exec_cuda_kernel_run_id(const char *id, const exec_cuda_call *c, base_error *e)
{
    const exec_cuda_kernel *k = exec_cuda_kernel_find(id);
    if (!k)
        return base_errorf(e, "kernel identity '%s' is unknown to the CUDA backend; the plan was "
                              "written by a newer compiler, or the table lacks it",
                           id ? id : "(null)");
    return exec_cuda_kernel_run(k, c, e);
}

/* ---------------------------------------------------------------- sizes */

extern "C" int exec_cuda_region_sizes(const exec_cfg *c, const exec_shard *s, exec_region_kind k,
                                      exec_cuda_sizes *out, base_error *e)
{
    memset(out, 0, sizeof *out);
    const int64_t T = c->b * c->s, h = c->h, slots = c->experts * c->capacity * h;
    switch (k) {
    case EXEC_EMBED:
        out->x_bytes = T * 4;
        out->y_bytes = T * h * 2;
        out->act_bytes = embed_act_bytes(c, s);
        out->work_bytes = embed_work_bytes(c, s, false);
        out->work_f_bytes = embed_work_bytes(c, s, true);
        break;
    case EXEC_ATTN:
        out->x_bytes = out->y_bytes = T * h * 2;
        out->act_bytes = attn_act_bytes(c, s);
        out->work_bytes = attn_work_bytes(c, s, false);
        out->work_f_bytes = attn_work_bytes(c, s, true);
        break;
    case EXEC_MLP:
        out->x_bytes = out->y_bytes = T * h * 2;
        out->act_bytes = mlp_act_bytes(c, s);
        out->work_bytes = mlp_work_bytes(c, s, false);
        out->work_f_bytes = mlp_work_bytes(c, s, true);
        break;
    case EXEC_MOE_GATE:
        out->x_bytes = T * h * 2;
        out->y_bytes = slots * 2;
        out->route_bytes = exec_cuda_route_bytes(c);
        out->act_bytes = moe_gate_act_bytes(c, s);
        out->work_bytes = moe_gate_work_bytes(c, s, false);
        out->work_f_bytes = moe_gate_work_bytes(c, s, true);
        break;
    case EXEC_MOE_EXPERTS:
        out->x_bytes = out->y_bytes = (int64_t)s->ep * s->nexperts * c->capacity * h * 2;
        out->act_bytes = moe_experts_act_bytes(c, s);
        out->work_bytes = moe_experts_work_bytes(c, s, false);
        out->work_f_bytes = moe_experts_work_bytes(c, s, true);
        break;
    case EXEC_MOE_COMBINE:
        out->x_bytes = slots * 2;
        out->y_bytes = T * h * 2;
        out->route_bytes = exec_cuda_route_bytes(c);
        out->act_bytes = moe_combine_act_bytes(c, s);
        out->work_bytes = moe_combine_work_bytes(c, s, false);
        out->work_f_bytes = moe_combine_work_bytes(c, s, true);
        break;
    case EXEC_HEAD:
        out->x_bytes = T * h * 2;
        out->y_bytes = 0; /* the loss is a device double through exec_call.out */
        out->act_bytes = head_act_bytes(c, s);
        out->work_bytes = head_work_bytes(c, s, false);
        out->work_f_bytes = head_work_bytes(c, s, true);
        break;
    default:
        return base_errorf(e, "unknown region kind %d", (int)k);
    }
    exec_param p[EXEC_MAX_REGION_PARAMS];
    int n = exec_region_params(c, s, k, p, e);
    if (n < 0) return -1;
    for (int i = 0; i < n; i++) out->params += p[i].count;
    return 0;
}

extern "C" int exec_cuda_region_act_split(const exec_cfg *c, const exec_shard *s,
                                          exec_region_kind k, exec_act_mode mode, int64_t *kept,
                                          int64_t *rebuilt, base_error *e)
{
    typedef int64_t (*split_fn)(const exec_cfg *, const exec_shard *, int, int64_t *);
    static const split_fn SPLIT[EXEC_NREGION_KINDS] = {
        embed_act_split,       attn_act_split,         mlp_act_split, moe_gate_act_split,
        moe_experts_act_split, moe_combine_act_split, head_act_split};
    if ((int)k < 0 || (int)k >= EXEC_NREGION_KINDS)
        return base_errorf(e, "unknown region kind %d", (int)k);
    if ((int)mode < 0 || (int)mode >= EXEC_NACT_MODES)
        return base_errorf(e, "unknown recompute mode %d", (int)mode);
    int64_t r = 0;
    *kept = SPLIT[k](c, s, (int)mode, &r);
    *rebuilt = r;
    return 0;
}
