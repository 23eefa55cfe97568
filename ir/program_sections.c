/* program_sections.c — the program-level sections of a program file (program_internal.h):
 * batch, dtype and grad_dtype, optimizer, annotations, and the stage each region gets under the
 * PP annotation (ir_program_stage_of_region, program.h). */
#include "program_internal.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

int ir_load_annotations(ir_load_ctx *c, const ir_doc *d)
{
    ir_annotations *ann = &c->p->ann;
    int64_t layers = c->p->model.layers;
    snprintf(c->what, sizeof c->what, "annotations");
    if (d->kind != IR_DOC_MAP)
        return ir_doc_error(d, c->e,
                            "annotations must be a map {pp: N or [[first, last], ...], ep: bool, "
                            "tp: bool}");
    static const char *const keys[] = {"pp", "ep", "tp", NULL};
    if (ir_load_check_keys(c, d, "annotations", keys, NULL, false)) return -1;
    const ir_doc *v;
    if ((v = ir_doc_get(d, "ep")) && ir_doc_bool(v, "ep", &ann->ep, c->e)) return -1;
    if (ann->ep && c->p->model.experts == 0)
        return ir_doc_error(v, c->e,
                            "annotations: ep: true but model '%s' has no experts; drop ep or use "
                            "an MoE model",
                            c->p->model.name ? c->p->model.name : "?");
    if ((v = ir_doc_get(d, "tp")) && ir_doc_bool(v, "tp", &ann->tp, c->e)) return -1;
    if (!(v = ir_doc_get(d, "pp"))) return 0;
    if (v->kind == IR_DOC_SCALAR) {
        if (ir_doc_int(v, "pp", &ann->pp_stages, c->e)) return -1;
        if (ann->pp_stages < 1)
            return ir_doc_error(v, c->e, "annotations: pp = %lld; give at least 1 stage",
                                (long long)ann->pp_stages);
        if (ann->pp_stages > layers)
            return ir_doc_error(v, c->e,
                                "annotations: pp = %lld stages but model '%s' has %lld layers; a "
                                "stage holds at least one layer, so use at most %lld",
                                (long long)ann->pp_stages, c->p->model.name ? c->p->model.name : "?",
                                (long long)layers, (long long)layers);
        return 0;
    }
    if (v->kind != IR_DOC_SEQ || v->n == 0)
        return ir_doc_error(v, c->e,
                            "annotations: pp must be a stage count or a list of [first, last] "
                            "layer ranges");
    ann->npp_ranges = v->n;
    ann->pp_ranges = base_arena_calloc(c->a, (size_t)v->n, sizeof *ann->pp_ranges);
    for (int i = 0; i < v->n; i++) {
        const ir_doc *r = v->items[i];
        if (r->kind != IR_DOC_SEQ || r->n != 2)
            return ir_doc_error(r, c->e,
                                "annotations: pp range %d must be [first, last] (layers, "
                                "inclusive)",
                                i);
        int64_t lo, hi;
        if (ir_doc_int(r->items[0], "first layer", &lo, c->e) ||
            ir_doc_int(r->items[1], "last layer", &hi, c->e))
            return -1;
        if (lo > hi)
            return ir_doc_error(r, c->e,
                                "annotations: pp range %d [%lld, %lld] is backwards; write "
                                "[first, last] with first <= last",
                                i, (long long)lo, (long long)hi);
        if (i == 0 && lo != 0)
            return ir_doc_error(r, c->e,
                                "annotations: pp range 0 starts at layer %lld; the first stage "
                                "must start at layer 0",
                                (long long)lo);
        if (i > 0 && lo != ann->pp_ranges[i - 1][1] + 1)
            return ir_doc_error(r, c->e,
                                "annotations: pp range %d starts at layer %lld but range %d ends "
                                "at layer %lld; ranges must be contiguous: start it at %lld",
                                i, (long long)lo, i - 1, (long long)ann->pp_ranges[i - 1][1],
                                (long long)ann->pp_ranges[i - 1][1] + 1);
        if (hi >= layers)
            return ir_doc_error(r, c->e,
                                "annotations: pp range %d ends at layer %lld but model '%s' has "
                                "%lld layers (0-%lld)",
                                i, (long long)hi, c->p->model.name ? c->p->model.name : "?",
                                (long long)layers, (long long)layers - 1);
        ann->pp_ranges[i][0] = lo;
        ann->pp_ranges[i][1] = hi;
    }
    if (ann->pp_ranges[v->n - 1][1] != layers - 1)
        return ir_doc_error(v->items[v->n - 1], c->e,
                            "annotations: pp ranges end at layer %lld but model '%s' has %lld "
                            "layers; the last range must end at layer %lld",
                            (long long)ann->pp_ranges[v->n - 1][1],
                            c->p->model.name ? c->p->model.name : "?", (long long)layers,
                            (long long)layers - 1);
    ann->pp_stages = ann->npp_ranges;
    return 0;
}

int ir_load_batch(ir_load_ctx *c, const ir_doc *d)
{
    snprintf(c->what, sizeof c->what, "batch");
    c->p->batch_line = d->line;
    c->p->batch_col = d->col;
    if (d->kind != IR_DOC_MAP)
        return ir_doc_error(d, c->e, "batch must be a map {global: G, micro: b}");
    static const char *const keys[] = {"global", "micro", NULL};
    if (ir_load_check_keys(c, d, "batch", keys, NULL, false)) return -1;
    const ir_doc *g = ir_doc_get(d, "global"), *m = ir_doc_get(d, "micro");
    if (!g)
        return ir_doc_error(d, c->e,
                            "batch has no 'global'; give the sequences per step, e.g. global: 512");
    if (ir_load_get_int_range(c, g, "global", 1, INT64_MAX / 2, "give at least 1 sequence",
                      &c->p->global_batch))
        return -1;
    c->p->micro_batch = 1;
    if (m && ir_load_get_int_range(c, m, "micro", 1, INT64_MAX / 2, "give at least 1 sequence",
                           &c->p->micro_batch))
        return -1;
    int64_t G = c->p->global_batch, b = c->p->micro_batch;
    if (G % b)
        return ir_doc_error(g, c->e,
                            "batch: global = %lld is not a multiple of micro = %lld; use global = "
                            "%lld or %lld",
                            (long long)G, (long long)b, (long long)(G / b * b),
                            (long long)((G / b + 1) * b));
    return 0;
}

/* A floating-point type by the names `dtype` and `grad_dtype` take; -1 for none of them. */
static int dtype_of_name(const char *s)
{
    if (ir_load_ci_eq(s, "bf16") || ir_load_ci_eq(s, "bfloat16")) return PLAN_BF16;
    if (ir_load_ci_eq(s, "fp16") || ir_load_ci_eq(s, "float16")) return PLAN_FP16;
    if (ir_load_ci_eq(s, "fp32") || ir_load_ci_eq(s, "float32")) return PLAN_FP32;
    if (ir_load_ci_eq(s, "fp64") || ir_load_ci_eq(s, "float64")) return PLAN_FP64;
    return -1;
}

int ir_load_dtype(ir_load_ctx *c, const ir_doc *d)
{
    const char *s;
    snprintf(c->what, sizeof c->what, "program");
    if (ir_load_get_string(c, d, "dtype", &s)) return -1;
    int t = dtype_of_name(s);
    if (t < 0)
        return ir_doc_error(d, c->e,
                            "unknown dtype '%s'; use bf16 (mixed precision, the default), fp16, "
                            "fp32 (the CPU executor) or fp64",
                            s);
    ir_program *p = c->p;
    p->param_dtype = p->act_dtype = p->grad_dtype = (plan_dtype)t;
    /* Mixed precision keeps fp32 master weights and moments in the optimizer state. */
    p->opt_dtype = t == PLAN_FP64 ? PLAN_FP64 : PLAN_FP32;
    return 0;
}

/* grad_dtype: the gradients' type where it is not the dtype's. Megatron-LM's bf16 training
 * accumulates and all-reduces its gradients in fp32 (main_grad), which is 18 bytes of model state
 * a parameter rather than the ZeRO paper's 16; the buffers, the gradient collectives and the
 * optimizer step follow it. Read after dtype whatever their order in the file (it is checked
 * against it): never narrower than the dtype, nor the other 16-bit format, since a gradient is
 * summed from values of the dtype. */
int ir_load_grad_dtype(ir_load_ctx *c, const ir_doc *d)
{
    const char *s;
    snprintf(c->what, sizeof c->what, "program");
    if (ir_load_get_string(c, d, "grad_dtype", &s)) return -1;
    plan_dtype t = c->p->param_dtype;
    int tb = plan_dtype_bytes(t);
    char ok[64];
    snprintf(ok, sizeof ok, "%s%s%s", plan_dtype_name(t),
             tb < 4 ? ", fp32" : "", tb < 8 ? " or fp64" : "");
    int g = dtype_of_name(s);
    if (g < 0)
        return ir_doc_error(d, c->e,
                            "unknown grad_dtype '%s'; use %s (not narrower than dtype %s), or "
                            "remove grad_dtype to keep the gradients in the dtype",
                            s, ok, plan_dtype_name(t));
    int gb = plan_dtype_bytes((plan_dtype)g);
    if (g != (int)t && gb <= tb)
        return ir_doc_error(d, c->e,
                            "grad_dtype %s is %s dtype %s; use grad_dtype %s, or remove it to "
                            "keep the gradients in the dtype",
                            plan_dtype_name((plan_dtype)g),
                            gb < tb ? "narrower than" : "a different 16-bit format from",
                            plan_dtype_name(t), ok);
    c->p->grad_dtype = (plan_dtype)g;
    return 0;
}

int ir_load_optimizer(ir_load_ctx *c, const ir_doc *d)
{
    ir_program *p = c->p;
    snprintf(c->what, sizeof c->what, "optimizer");
    const ir_doc *n = d;
    if (d->kind == IR_DOC_MAP) {
        static const char *const keys[] = {"name", "grad_clip", "lr",  "weight_decay",
                                           "beta1", "beta2",    "eps", "momentum", NULL};
        if (ir_load_check_keys(c, d, "optimizer", keys, NULL, false)) return -1;
        n = ir_doc_get(d, "name");
    } else if (d->kind != IR_DOC_SCALAR) {
        return ir_doc_error(d, c->e, "optimizer must be a name (adamw, sgd) or a map {name, ...}");
    }
    if (n) {
        const char *s;
        if (ir_load_get_string(c, n, "name", &s)) return -1;
        if (ir_load_ci_eq(s, "adamw"))
            p->optimizer = IR_OPT_ADAMW;
        else if (ir_load_ci_eq(s, "sgd"))
            p->optimizer = IR_OPT_SGD;
        else
            return ir_doc_error(n, c->e, "unknown optimizer '%s'; use adamw or sgd%s", s,
                                ir_load_ci_eq(s, "adam") ? " (adamw with weight_decay: 0 is Adam)" : "");
    }
    if (d->kind != IR_DOC_MAP) return 0;
    static const struct { const char *key; double lo, hi; bool lo_open, hi_open; size_t off; } nums[] = {
        {"grad_clip", 0, INFINITY, false, true, offsetof(ir_program, grad_clip)},
        {"lr", 0, INFINITY, true, true, offsetof(ir_program, lr)},
        {"weight_decay", 0, INFINITY, false, true, offsetof(ir_program, weight_decay)},
        {"beta1", 0, 1, false, true, offsetof(ir_program, beta1)},
        {"beta2", 0, 1, false, true, offsetof(ir_program, beta2)},
        {"eps", 0, INFINITY, true, true, offsetof(ir_program, eps)},
        {"momentum", 0, 1, false, true, offsetof(ir_program, momentum)},
    };
    for (size_t i = 0; i < BASE_COUNT(nums); i++) {
        const ir_doc *v = ir_doc_get(d, nums[i].key);
        if (!v) continue;
        double x;
        if (ir_doc_num(v, nums[i].key, &x, c->e)) return -1;
        bool ok = isfinite(x) && (nums[i].lo_open ? x > nums[i].lo : x >= nums[i].lo) &&
                  (nums[i].hi_open ? x < nums[i].hi : x <= nums[i].hi);
        if (!ok)
            return ir_doc_error(v, c->e, "optimizer: %s = %s is out of range; it must be %s %g%s",
                                nums[i].key, v->str, nums[i].lo_open ? ">" : ">=", nums[i].lo,
                                isfinite(nums[i].hi) ? " and below 1" : "");
        *(double *)((char *)p + nums[i].off) = x;
    }
    return 0;
}

int64_t ir_even_stage_of_layer(int64_t layers, int64_t stages, int64_t layer)
{
    /* the extra layers go to the early stages, because the last stage also carries the LM head
     * and the loss, usually the heaviest region */
    if (stages < 1) stages = 1;
    int64_t base = layers / stages, extra = layers % stages;
    if (layer < extra * (base + 1)) return layer / (base + 1);
    return extra + (layer - extra * (base + 1)) / (base ? base : 1);
}

int64_t ir_program_stage_of_region(const ir_program *p, base_arena *a, int32_t *out)
{
    const ir_annotations *ann = &p->ann;
    int64_t layers = p->model.layers;
    int64_t stages = ann->npp_ranges ? ann->npp_ranges : ann->pp_stages;
    if (stages < 1) stages = 1;
    int n = ir_model_nregions(&p->model);
    ir_region *regs = base_arena_calloc(a, (size_t)(n ? n : 1), sizeof *regs);
    ir_model_regions(&p->model, a, regs);
    for (int i = 0; i < n; i++) {
        int64_t l = regs[i].layer, s;
        if (regs[i].kind == IR_REGION_EMBED) {
            s = 0;
        } else if (regs[i].kind == IR_REGION_HEAD || l < 0) {
            s = stages - 1;
        } else if (ann->npp_ranges) {
            s = 0;
            while (s < ann->npp_ranges - 1 && l > ann->pp_ranges[s][1]) s++;
        } else {
            s = ir_even_stage_of_layer(layers, stages, l);
        }
        out[i] = (int32_t)s;
    }
    return stages;
}
