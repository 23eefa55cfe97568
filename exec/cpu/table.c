/* table.c — the kernel identities of a plan ("<family>.<region kind>.<pass>", plus
 * "aux.grad_norm" and "aux.aux_loss"; see sched/costs.c for how the compiler forms them) mapped
 * to the typed implementations, the dispatcher that runs an identity in the call's dtype, and
 * the buffer sizes of each region.
 *
 * Every region kind has an entry for every pass the compiler can emit: F; B (= BI then BW); BI;
 * BW; R, the recomputation before a backward, which re-runs F from the region's input (dropout
 * masks being pure functions of their indices, it rebuilds exactly what F saved; under a recompute
 * mode F keeps only its part of the act buffer and R writes the other, exec_act_mode); and UPD.
 * The embedding's BI and the combine's BW have nothing to compute. */
#include <string.h>

#include "kernels.h"

#define nothing_f32 NULL
#define nothing_f64 NULL

#define ROW(fam, famid, kname, kind, pass, a, b)                                               \
    {fam "." kname "." #pass, famid, kind, PLAN_PASS_##pass, {a##_f32, b##_f32},             \
     {a##_f64, b##_f64}}
#define REGION(fam, famid, kname, kind, f, bi, bw)                                            \
    ROW(fam, famid, kname, kind, F, f, nothing), ROW(fam, famid, kname, kind, B, bi, bw),      \
        ROW(fam, famid, kname, kind, BI, bi, nothing),                                         \
        ROW(fam, famid, kname, kind, BW, bw, nothing),                                         \
        ROW(fam, famid, kname, kind, R, f, nothing),                                           \
        ROW(fam, famid, kname, kind, UPD, exec_region_upd, nothing)

static const exec_kernel TABLE[] = {
    REGION("gpt", 0, "embed", EXEC_EMBED, exec_embed_f, exec_noop, exec_embed_bw),
    REGION("gpt", 0, "attn", EXEC_ATTN, exec_attn_f, exec_attn_bi, exec_attn_bw),
    REGION("gpt", 0, "mlp", EXEC_MLP, exec_mlp_f, exec_mlp_bi, exec_mlp_bw),
    REGION("gpt", 0, "head", EXEC_HEAD, exec_head_f, exec_head_bi, exec_head_bw),
    REGION("llama", 1, "embed", EXEC_EMBED, exec_embed_f, exec_noop, exec_embed_bw),
    REGION("llama", 1, "attn", EXEC_ATTN, exec_attn_f, exec_attn_bi, exec_attn_bw),
    REGION("llama", 1, "mlp", EXEC_MLP, exec_mlp_f, exec_mlp_bi, exec_mlp_bw),
    REGION("llama", 1, "moe_gate", EXEC_MOE_GATE, exec_moe_gate_f, exec_moe_gate_bi,
           exec_moe_gate_bw),
    REGION("llama", 1, "moe_experts", EXEC_MOE_EXPERTS, exec_moe_experts_f, exec_moe_experts_bi,
           exec_moe_experts_bw),
    REGION("llama", 1, "moe_combine", EXEC_MOE_COMBINE, exec_moe_combine_f, exec_moe_combine_bi,
           exec_noop),
    REGION("llama", 1, "head", EXEC_HEAD, exec_head_f, exec_head_bi, exec_head_bw),
    {"aux.grad_norm", -1, -1, PLAN_PASS_AUX, {exec_aux_grad_norm_f32, NULL},
     {exec_aux_grad_norm_f64, NULL}},
    {"aux.aux_loss", -1, -1, PLAN_PASS_AUX, {exec_aux_aux_loss_f32, NULL},
     {exec_aux_aux_loss_f64, NULL}},
};

int exec_kernel_count(void) { return (int)BASE_COUNT(TABLE); }

const exec_kernel *exec_kernel_at(int i)
{
    return i >= 0 && i < (int)BASE_COUNT(TABLE) ? &TABLE[i] : NULL;
}

const exec_kernel *exec_kernel_find(const char *id)
{
    if (!id) return NULL;
    for (size_t i = 0; i < BASE_COUNT(TABLE); i++)
        if (strcmp(TABLE[i].id, id) == 0) return &TABLE[i];
    return NULL;
}

int exec_kernel_run(const exec_kernel *k, const exec_call *c, base_error *e)
{
    if (!k || !c || !c->cfg || !c->shard)
        return base_errorf(e, "kernel call without %s", !k ? "a kernel" : !c ? "a call"
                                                            : !c->cfg ? "a model (cfg)"
                                                                      : "a shard");
    if (c->dtype != PLAN_FP32 && c->dtype != PLAN_FP64)
        return base_errorf(e, "%s: the CPU kernels run fp32 or fp64, not %s; set the program's "
                              "dtype to fp32",
                           k->id, plan_dtype_name(c->dtype));
    if (k->family >= 0 && (k->family == 0) != c->cfg->gpt)
        return base_errorf(e, "%s: the plan's model is of the %s family; the plan and the model "
                              "disagree",
                           k->id, c->cfg->gpt ? "gpt" : "llama");
    exec_call cc = *c;
    if (k->kind >= 0) cc.kind = (exec_region_kind)k->kind;
    for (int i = 0; i < 2; i++) {
        exec_kernel_fn fn = c->dtype == PLAN_FP32 ? k->f32[i] : k->f64[i];
        if (fn && fn(&cc, e)) {
            base_error_prefix(e, "%s (layer %d): ", k->id, c->layer);
            return -1;
        }
    }
    return 0;
}

int exec_kernel_run_id(const char *id, const exec_call *c, base_error *e)
{
    const exec_kernel *k = exec_kernel_find(id);
    if (!k)
        return base_errorf(e, "kernel identity '%s' is unknown to the CPU backend; the plan was "
                              "written by a newer compiler, or the table lacks it",
                           id ? id : "(null)");
    return exec_kernel_run(k, c, e);
}

/* ---------------------------------------------------------------- sizes */

int exec_region_act_split(const exec_cfg *c, const exec_shard *s, exec_region_kind k,
                          plan_dtype dt, exec_act_mode mode, int64_t *kept, int64_t *rebuilt,
                          base_error *e)
{
    *kept = *rebuilt = 0;
    if (dt != PLAN_FP32 && dt != PLAN_FP64)
        return base_errorf(e, "the CPU kernels run fp32 or fp64, not %s",
                           plan_dtype_name(dt));
    if (mode < EXEC_ACT_ALL || mode >= EXEC_NACT_MODES)
        return base_errorf(e, "unknown activation mode %d", (int)mode);
    const bool f32 = dt == PLAN_FP32;
#define SPLIT(name) (f32 ? name##_f32(c, s, (int)mode, rebuilt) : name##_f64(c, s, (int)mode, rebuilt))
    switch (k) {
    case EXEC_ATTN: *kept = SPLIT(exec_attn_act_split); break;
    case EXEC_MLP: *kept = SPLIT(exec_mlp_act_split); break;
    case EXEC_MOE_GATE: *kept = SPLIT(exec_moe_gate_act_split); break;
    case EXEC_MOE_EXPERTS: *kept = SPLIT(exec_moe_experts_act_split); break;
    case EXEC_MOE_COMBINE: *kept = SPLIT(exec_moe_combine_act_split); break;
    case EXEC_EMBED:
    case EXEC_HEAD: {
        /* never recomputed: everything is kept */
        exec_region_sizes sz;
        if (exec_region_sizes_get(c, s, k, dt, &sz, e)) return -1;
        *kept = sz.act_bytes;
        break;
    }
    default:
        return base_errorf(e, "unknown region kind %d", (int)k);
    }
#undef SPLIT
    return 0;
}

int exec_region_sizes_get(const exec_cfg *c, const exec_shard *s, exec_region_kind k,
                          plan_dtype dt, exec_region_sizes *out, base_error *e)
{
    memset(out, 0, sizeof *out);
    if (dt != PLAN_FP32 && dt != PLAN_FP64)
        return base_errorf(e, "the CPU kernels run fp32 or fp64, not %s",
                           plan_dtype_name(dt));
    const bool f32 = dt == PLAN_FP32;
    const int64_t T = c->b * c->s, h = c->h, slots = c->experts * c->capacity * h;
    switch (k) {
    case EXEC_EMBED:
        out->x = T;
        out->y = T * h;
        out->act_bytes = f32 ? exec_embed_act_bytes_f32(c, s) : exec_embed_act_bytes_f64(c, s);
        out->work_bytes = f32 ? exec_embed_work_bytes_f32(c, s, false) : exec_embed_work_bytes_f64(c, s, false);
        out->work_f_bytes = f32 ? exec_embed_work_bytes_f32(c, s, true) : exec_embed_work_bytes_f64(c, s, true);
        break;
    case EXEC_ATTN:
        out->x = out->y = T * h;
        out->act_bytes = f32 ? exec_attn_act_bytes_f32(c, s) : exec_attn_act_bytes_f64(c, s);
        out->work_bytes = f32 ? exec_attn_work_bytes_f32(c, s, false) : exec_attn_work_bytes_f64(c, s, false);
        out->work_f_bytes = f32 ? exec_attn_work_bytes_f32(c, s, true) : exec_attn_work_bytes_f64(c, s, true);
        break;
    case EXEC_MLP:
        out->x = out->y = T * h;
        out->act_bytes = f32 ? exec_mlp_act_bytes_f32(c, s) : exec_mlp_act_bytes_f64(c, s);
        out->work_bytes = f32 ? exec_mlp_work_bytes_f32(c, s, false) : exec_mlp_work_bytes_f64(c, s, false);
        out->work_f_bytes = f32 ? exec_mlp_work_bytes_f32(c, s, true) : exec_mlp_work_bytes_f64(c, s, true);
        break;
    case EXEC_MOE_GATE:
        out->x = T * h;
        out->y = slots;
        out->route_bytes = f32 ? exec_route_bytes_f32(c) : exec_route_bytes_f64(c);
        out->act_bytes = f32 ? exec_moe_gate_act_bytes_f32(c, s) : exec_moe_gate_act_bytes_f64(c, s);
        out->work_bytes = f32 ? exec_moe_gate_work_bytes_f32(c, s, false) : exec_moe_gate_work_bytes_f64(c, s, false);
        out->work_f_bytes = f32 ? exec_moe_gate_work_bytes_f32(c, s, true) : exec_moe_gate_work_bytes_f64(c, s, true);
        break;
    case EXEC_MOE_EXPERTS:
        out->x = out->y = (int64_t)s->ep * s->nexperts * c->capacity * h;
        out->act_bytes =
            f32 ? exec_moe_experts_act_bytes_f32(c, s) : exec_moe_experts_act_bytes_f64(c, s);
        out->work_bytes = f32 ? exec_moe_experts_work_bytes_f32(c, s, false) : exec_moe_experts_work_bytes_f64(c, s, false);
        out->work_f_bytes = f32 ? exec_moe_experts_work_bytes_f32(c, s, true) : exec_moe_experts_work_bytes_f64(c, s, true);
        break;
    case EXEC_MOE_COMBINE:
        out->x = slots;
        out->y = T * h;
        out->route_bytes = f32 ? exec_route_bytes_f32(c) : exec_route_bytes_f64(c);
        out->act_bytes =
            f32 ? exec_moe_combine_act_bytes_f32(c, s) : exec_moe_combine_act_bytes_f64(c, s);
        out->work_bytes = f32 ? exec_moe_combine_work_bytes_f32(c, s, false) : exec_moe_combine_work_bytes_f64(c, s, false);
        out->work_f_bytes = f32 ? exec_moe_combine_work_bytes_f32(c, s, true) : exec_moe_combine_work_bytes_f64(c, s, true);
        break;
    case EXEC_HEAD:
        out->x = T * h;
        out->y = 0; /* the loss is a double through exec_call.out */
        out->act_bytes = f32 ? exec_head_act_bytes_f32(c, s) : exec_head_act_bytes_f64(c, s);
        out->work_bytes = f32 ? exec_head_work_bytes_f32(c, s, false) : exec_head_work_bytes_f64(c, s, false);
        out->work_f_bytes = f32 ? exec_head_work_bytes_f32(c, s, true) : exec_head_work_bytes_f64(c, s, true);
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
