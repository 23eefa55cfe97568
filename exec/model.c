/* model.c — the model as every backend's kernels see it (model.h): exec_cfg from the plan's
 * model shape, what one device holds of it (exec_shard: Megatron's tensor-parallel split and the
 * expert-parallel split), each region's parameter tensors with the block a shard holds, their
 * deterministic initial values, and the clipping coefficient.
 *
 * The parameter lists must agree with ir_region_params_per_device (ir/model.c) element for
 * element, since the plan allocates parameter buffers from it; tests/exec_cpu checks this for
 * both families under several tp/ep degrees. */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "model.h"

static const char *const KIND_NAMES[EXEC_NREGION_KINDS] = {
    "embed", "attn", "mlp", "moe_gate", "moe_experts", "moe_combine", "head"};

const char *exec_region_kind_name(exec_region_kind k)
{
    return (unsigned)k < EXEC_NREGION_KINDS ? KIND_NAMES[k] : NULL;
}

/* ---------------------------------------------------------------- cfg */

int exec_cfg_validate(const exec_cfg *c, base_error *e)
{
    if (c->layers < 1 || c->b < 1 || c->s < 1 || c->h < 1 || c->heads < 1 || c->kv_heads < 1 ||
        c->head_dim < 1 || c->ffn < 1 || c->vocab < 1)
        return base_errorf(e,
                           "model shape has a non-positive size (layers %lld, micro-batch %lld, "
                           "seq %lld, hidden %lld, heads %lld, kv_heads %lld, head_dim %lld, "
                           "ffn %lld, vocab %lld); every size must be at least 1",
                           (long long)c->layers, (long long)c->b, (long long)c->s,
                           (long long)c->h, (long long)c->heads, (long long)c->kv_heads,
                           (long long)c->head_dim, (long long)c->ffn, (long long)c->vocab);
    if (c->heads % c->kv_heads)
        return base_errorf(e, "kv_heads (%lld) must divide heads (%lld) for grouped-query attention",
                           (long long)c->kv_heads, (long long)c->heads);
    if (!c->gpt && c->head_dim % 2)
        return base_errorf(e, "head_dim %lld is odd; RoPE rotates pairs of dimensions, so use an "
                              "even head_dim",
                           (long long)c->head_dim);
    if (c->experts < 0 || (c->experts > 0 && (c->top_k < 1 || c->top_k > c->experts ||
                                              c->expert_ffn < 1 || c->capacity < 1)))
        return base_errorf(e,
                           "MoE shape is invalid (experts %lld, top_k %lld, expert_ffn %lld, "
                           "capacity %lld); use 1 <= top_k <= experts, expert_ffn >= 1 and a "
                           "capacity of at least 1",
                           (long long)c->experts, (long long)c->top_k, (long long)c->expert_ffn,
                           (long long)c->capacity);
    if (c->experts > 0 && c->gpt)
        return base_errorf(e, "MoE layers exist for the llama family only");
    if (!(c->dropout >= 0 && c->dropout < 1))
        return base_errorf(e, "dropout probability %g is out of range; use 0 <= p < 1", c->dropout);
    if (c->dropout > 0 && !c->gpt)
        return base_errorf(e, "dropout is modelled for the gpt family only");
    if (!(c->norm_eps > 0))
        return base_errorf(e, "norm epsilon %g must be positive", c->norm_eps);
    /* BLAS dimensions and leading dimensions are int. */
    double T = (double)c->b * (double)c->s;
    double widest = (double)c->heads * (double)c->head_dim;
    double w[] = {(double)c->h, widest, (double)c->ffn, (double)c->vocab,
                  (double)c->expert_ffn, (double)c->experts * (double)c->capacity};
    for (size_t i = 0; i < BASE_COUNT(w); i++)
        if (w[i] > widest) widest = w[i];
    if (T > INT_MAX || widest > INT_MAX || T * widest > 9e15)
        return base_errorf(e, "micro-batch of %.0f tokens x width %.0f is too large for the CPU "
                              "kernels; use a smaller micro-batch",
                           T, widest);
    return 0;
}

int exec_cfg_from_plan(const plan_model *m, uint64_t seed, exec_cfg *c, base_error *e)
{
    memset(c, 0, sizeof *c);
    if (!m->family || (strcmp(m->family, "gpt") && strcmp(m->family, "llama")))
        return base_errorf(e, "plan model family '%s' is unknown; the CPU kernels know gpt and llama",
                           m->family ? m->family : "(none)");
    c->gpt = strcmp(m->family, "gpt") == 0;
    c->layers = m->layers;
    c->b = m->micro_batch;
    c->s = m->seq;
    c->h = m->hidden;
    c->heads = m->heads;
    c->kv_heads = m->kv_heads;
    c->head_dim = m->head_dim;
    c->ffn = m->ffn;
    c->vocab = m->vocab;
    c->experts = m->experts;
    c->expert_ffn = m->expert_ffn;
    c->top_k = m->top_k;
    if (c->experts > 0) {
        /* ir_moe_capacity's rule: ceil(cf * b*s*k / E), tolerant of 1.1*1000/11 = 100.000..01 */
        double cap = m->capacity_factor * (double)(c->b * c->s * c->top_k) / (double)c->experts;
        c->capacity = (int64_t)ceil(cap - 1e-9 * cap);
        if (c->capacity < 1) c->capacity = 1;
    }
    c->qk_norm = m->qk_norm;
    c->tied = m->tied_embeddings;
    c->learned_pos = c->gpt;
    c->dropout = m->dropout ? 0.1 : 0.0;
    c->norm_eps = c->gpt ? 1e-5 : 1e-6;
    c->rope_theta = 10000.0;
    c->init_std = 0.02;
    c->aux_coef = c->experts > 0 ? 0.01 : 0.0;
    c->aux_weight = 1.0;
    c->loss_scale = 1.0 / (double)(c->b * c->s > 0 ? c->b * c->s : 1);
    c->seed = seed;
    return exec_cfg_validate(c, e);
}

/* ---------------------------------------------------------------- shard */

int exec_shard_set_sp(const exec_cfg *c, exec_shard *s, bool sp, base_error *e)
{
    if (sp && (s->tp < 2 || (c->b * c->s) % s->tp))
        return base_errorf(e, "sequence parallelism needs a tensor-parallel degree > 1 (%d) that "
                              "divides the %lld tokens of a micro-batch",
                           s->tp, (long long)(c->b * c->s));
    s->sp = sp;
    return 0;
}

int exec_shard_init(const exec_cfg *c, int tp, int tp_rank, int ep, int ep_rank, exec_shard *s,
                    base_error *e)
{
    memset(s, 0, sizeof *s);
    if (tp < 1 || tp_rank < 0 || tp_rank >= tp || ep < 1 || ep_rank < 0 || ep_rank >= ep)
        return base_errorf(e, "shard tp %d rank %d, ep %d rank %d is out of range", tp, tp_rank,
                           ep, ep_rank);
    if (c->heads % tp || c->ffn % tp || c->vocab % tp || (c->experts > 0 && c->expert_ffn % tp))
        return base_errorf(e,
                           "tensor-parallel degree %d must divide heads (%lld), ffn (%lld), "
                           "vocab (%lld) and expert_ffn (%lld)",
                           tp, (long long)c->heads, (long long)c->ffn, (long long)c->vocab,
                           (long long)c->expert_ffn);
    if (c->kv_heads % tp && tp % c->kv_heads)
        return base_errorf(e, "tensor-parallel degree %d and kv_heads (%lld) must divide one another",
                           tp, (long long)c->kv_heads);
    if (c->experts > 0 ? c->experts % ep : ep != 1)
        return base_errorf(e, "expert-parallel degree %d must divide the %lld experts", ep,
                           (long long)c->experts);
    s->tp = tp;
    s->tp_rank = tp_rank;
    s->ep = ep;
    s->ep_rank = ep_rank;
    s->first = tp_rank == 0;
    s->nheads = c->heads / tp;
    s->head0 = s->nheads * tp_rank;
    int64_t group = c->heads / c->kv_heads; /* query heads per key/value head */
    s->kv0 = s->head0 / group;
    s->nkv = (s->head0 + s->nheads - 1) / group + 1 - s->kv0;
    s->nffn = c->ffn / tp;
    s->ffn0 = s->nffn * tp_rank;
    s->nvocab = c->vocab / tp;
    s->vocab0 = s->nvocab * tp_rank;
    if (c->experts > 0) {
        s->neffn = c->expert_ffn / tp;
        s->effn0 = s->neffn * tp_rank;
        s->nexperts = c->experts / ep;
        s->expert0 = s->nexperts * ep_rank;
    }
    return 0;
}

/* ---------------------------------------------------------------- parameter lists */

typedef struct plist {
    exec_param *p;
    int n;
    int64_t offset;
} plist;

/* A tensor of global shape d (leading dims 1 for fewer than 3) of which the shard holds
 * [o, o + l) in each dimension. */
static void padd(plist *L, const char *name, int ndim, const int64_t d[3], const int64_t o[3],
                 const int64_t l[3], exec_init_kind init, double std, bool repl)
{
    exec_param *p = &L->p[L->n++];
    memset(p, 0, sizeof *p);
    p->name = name;
    p->ndim = ndim;
    p->count = 1;
    for (int i = 0; i < 3; i++) {
        p->dim[i] = d[i];
        p->off[i] = o[i];
        p->len[i] = l[i];
        p->count *= l[i];
    }
    p->offset = L->offset;
    L->offset += p->count;
    p->init = init;
    p->std = std;
    p->replicated = repl;
}

/* A whole 1-D tensor of n elements (norm scales, replicated biases). */
static void p1(plist *L, const char *name, int64_t n, exec_init_kind init, bool repl)
{
    int64_t d[3] = {1, 1, n}, o[3] = {0, 0, 0};
    padd(L, name, 1, d, o, d, init, 0, repl);
}
/* A slice [o, o + l) of a 1-D tensor of n (column-parallel biases). */
static void p1s(plist *L, const char *name, int64_t n, int64_t o, int64_t l)
{
    int64_t d[3] = {1, 1, n}, oo[3] = {0, 0, o}, ll[3] = {1, 1, l};
    padd(L, name, 1, d, oo, ll, EXEC_INIT_ZEROS, 0, false);
}
/* Block [r0, r0 + nr) x [c0, c0 + nc) of an R x C matrix. */
static void p2(plist *L, const char *name, int64_t R, int64_t C, int64_t r0, int64_t nr,
               int64_t c0, int64_t nc, double std, bool repl)
{
    int64_t d[3] = {1, R, C}, o[3] = {0, r0, c0}, l[3] = {1, nr, nc};
    padd(L, name, 2, d, o, l, EXEC_INIT_NORMAL, std, repl);
}

int exec_region_params(const exec_cfg *c, const exec_shard *s, exec_region_kind k,
                       exec_param out[EXEC_MAX_REGION_PARAMS], base_error *e)
{
    plist L = {out, 0, 0};
    const int64_t h = c->h, d = c->head_dim;
    const bool tp = s->tp > 1;
    const double std = c->init_std;
    /* GPT-2: residual projections scaled by 1/sqrt(2 * layers), one per residual add */
    const double rstd = c->init_std / sqrt(2.0 * (double)c->layers);
    const int64_t qd = c->heads * d, kvd = c->kv_heads * d;
    const bool kv_repl = tp && s->tp > c->kv_heads;
    switch (k) {
    case EXEC_EMBED:
        p2(&L, "tok", c->vocab, h, s->vocab0, s->nvocab, 0, h, std, false);
        if (c->learned_pos) p2(&L, "pos", c->s, h, 0, c->s, 0, h, std, tp);
        break;
    case EXEC_ATTN:
        p1(&L, c->gpt ? "ln.g" : "norm.g", h, EXEC_INIT_ONES, tp);
        if (c->gpt) p1(&L, "ln.b", h, EXEC_INIT_ZEROS, tp);
        p2(&L, "wq", h, qd, 0, h, s->head0 * d, s->nheads * d, std, false);
        if (c->gpt) p1s(&L, "bq", qd, s->head0 * d, s->nheads * d);
        p2(&L, "wk", h, kvd, 0, h, s->kv0 * d, s->nkv * d, std, kv_repl);
        if (c->gpt) p1s(&L, "bk", kvd, s->kv0 * d, s->nkv * d);
        p2(&L, "wv", h, kvd, 0, h, s->kv0 * d, s->nkv * d, std, kv_repl);
        if (c->gpt) p1s(&L, "bv", kvd, s->kv0 * d, s->nkv * d);
        if (kv_repl && c->gpt) L.p[L.n - 1].replicated = L.p[L.n - 3].replicated = true;
        if (c->qk_norm) {
            p1(&L, "q_norm.g", d, EXEC_INIT_ONES, tp);
            p1(&L, "k_norm.g", d, EXEC_INIT_ONES, tp);
        }
        p2(&L, "wo", qd, h, s->head0 * d, s->nheads * d, 0, h, rstd, false);
        if (c->gpt) p1(&L, "bo", h, EXEC_INIT_ZEROS, tp);
        break;
    case EXEC_MLP:
        if (c->gpt) {
            p1(&L, "ln.g", h, EXEC_INIT_ONES, tp);
            p1(&L, "ln.b", h, EXEC_INIT_ZEROS, tp);
            p2(&L, "w1", h, c->ffn, 0, h, s->ffn0, s->nffn, std, false);
            p1s(&L, "b1", c->ffn, s->ffn0, s->nffn);
            p2(&L, "w2", c->ffn, h, s->ffn0, s->nffn, 0, h, rstd, false);
            p1(&L, "b2", h, EXEC_INIT_ZEROS, tp);
        } else {
            p1(&L, "norm.g", h, EXEC_INIT_ONES, tp);
            p2(&L, "wg", h, c->ffn, 0, h, s->ffn0, s->nffn, std, false);
            p2(&L, "wu", h, c->ffn, 0, h, s->ffn0, s->nffn, std, false);
            p2(&L, "wd", c->ffn, h, s->ffn0, s->nffn, 0, h, rstd, false);
        }
        break;
    case EXEC_MOE_GATE:
        if (c->experts < 1) return base_errorf(e, "moe_gate region of a dense model");
        p1(&L, "norm.g", h, EXEC_INIT_ONES, tp);
        p2(&L, "router", h, c->experts, 0, h, 0, c->experts, std, tp);
        break;
    case EXEC_MOE_EXPERTS: {
        if (c->experts < 1) return base_errorf(e, "moe_experts region of a dense model");
        const int64_t E = c->experts, f = c->expert_ffn;
        int64_t dg[3] = {E, h, f}, og[3] = {s->expert0, 0, s->effn0},
                lg[3] = {s->nexperts, h, s->neffn};
        int64_t dd[3] = {E, f, h}, od[3] = {s->expert0, s->effn0, 0},
                ld[3] = {s->nexperts, s->neffn, h};
        padd(&L, "wg", 3, dg, og, lg, EXEC_INIT_NORMAL, std, false);
        padd(&L, "wu", 3, dg, og, lg, EXEC_INIT_NORMAL, std, false);
        padd(&L, "wd", 3, dd, od, ld, EXEC_INIT_NORMAL, rstd, false);
        break;
    }
    case EXEC_MOE_COMBINE:
        break;
    case EXEC_HEAD:
        p1(&L, c->gpt ? "ln.g" : "norm.g", h, EXEC_INIT_ONES, tp);
        if (c->gpt) p1(&L, "ln.b", h, EXEC_INIT_ZEROS, tp);
        if (!c->tied) p2(&L, "lm", c->vocab, h, s->vocab0, s->nvocab, 0, h, std, false);
        break;
    default:
        return base_errorf(e, "unknown region kind %d", (int)k);
    }
    return L.n;
}

/* ---------------------------------------------------------------- initialisation */

int exec_param_init(uint64_t seed, const char *full_name, const exec_param *p, plan_dtype dt,
                    void *dst, base_error *e)
{
    if (dt != PLAN_FP32 && dt != PLAN_FP64)
        return base_errorf(e, "initialising '%s': the CPU kernels hold fp32 or fp64, not %s",
                           full_name, plan_dtype_name(dt));
    uint64_t key = exec_rng_key(seed, full_name);
    int64_t i = 0;
    for (int64_t a = 0; a < p->len[0]; a++)
        for (int64_t b = 0; b < p->len[1]; b++)
            for (int64_t c = 0; c < p->len[2]; c++, i++) {
                /* the value is a function of the element's place in the *global* tensor */
                uint64_t g = (uint64_t)(((p->off[0] + a) * p->dim[1] + p->off[1] + b) * p->dim[2] +
                                        p->off[2] + c);
                double v = p->init == EXEC_INIT_ONES    ? 1.0
                           : p->init == EXEC_INIT_ZEROS ? 0.0
                                                        : p->std * exec_rng_normal(key, g);
                if (dt == PLAN_FP32)
                    ((float *)dst)[i] = (float)v;
                else
                    ((double *)dst)[i] = v;
            }
    return 0;
}

double exec_clip_coef(double global_norm, double max_norm)
{
    if (max_norm <= 0 || !(global_norm > max_norm)) return 1.0;
    return max_norm / (global_norm + 1e-6);
}

const char *exec_nonfinite_figure(double loss, double aux_loss, double norm_sq, double *v)
{
    const struct {
        const char *name;
        double x;
    } figs[] = {{"the loss", loss}, {"the load-balancing loss", aux_loss}, {"the gradient norm", norm_sq}};
    for (size_t k = 0; k < BASE_COUNT(figs); k++)
        if (!isfinite(figs[k].x)) {
            *v = figs[k].x;
            return figs[k].name;
        }
    return NULL;
}

/* ---------------------------------------------------------------- buffer layouts */

static const plan_tregion tregion_of[EXEC_NREGION_KINDS] = {
    [EXEC_EMBED] = PLAN_TR_EMBED,
    [EXEC_ATTN] = PLAN_TR_ATTN,
    [EXEC_MLP] = PLAN_TR_MLP,
    [EXEC_MOE_GATE] = PLAN_TR_MOE_GATE,
    [EXEC_MOE_EXPERTS] = PLAN_TR_MOE_EXPERTS,
    [EXEC_MOE_COMBINE] = PLAN_TR_MOE_COMBINE,
    [EXEC_HEAD] = PLAN_TR_HEAD,
};

/* The table's dimensions of region k on shard s. */
static void tensor_dims(const exec_cfg *c, const exec_shard *s, exec_region_kind k,
                        const exec_tensor_rule *r, plan_tensor_dims *d)
{
    const bool moe = k == EXEC_MOE_GATE || k == EXEC_MOE_EXPERTS || k == EXEC_MOE_COMBINE;
    const unsigned model = (c->gpt ? PLAN_TF_GPT : 0u) | (c->dropout > 0 ? PLAN_TF_DROPOUT : 0u) |
                           (c->qk_norm ? PLAN_TF_QK_NORM : 0u);
    memset(d, 0, sizeof *d);
    d->tokens = c->b * c->s;
    d->kept = moe ? d->tokens : exec_sp_rows(c, s);
    d->batch = c->b;
    d->seq = c->s;
    d->hidden = c->h;
    d->head_dim = c->head_dim;
    d->heads = s->nheads;
    d->kv_heads = s->nkv;
    d->ffn = s->nffn;
    d->experts = c->experts;
    d->top_k = c->top_k;
    d->rows = c->experts * c->capacity;
    d->expert_ffn = s->neffn;
    d->vocab = s->nvocab;
    d->flags = (model | r->set) & ~r->clear;
}

static void layout(const exec_cfg *c, const exec_shard *s, exec_region_kind k,
                   const exec_tensor_rule *r, const int parts[PLAN_NTUSES], plan_tensor_layout *L)
{
    plan_tensor_dims d;
    tensor_dims(c, s, k, r, &d);
    plan_tensor_rule rule;
    memcpy(rule.elem, r->elem, sizeof rule.elem);
    rule.align = r->align;
    memcpy(rule.part, parts, sizeof rule.part);
    plan_tensor_walk(tregion_of[k], &d, &rule, L);
}

void exec_act_layout(const exec_cfg *c, const exec_shard *s, exec_region_kind k,
                     const exec_tensor_rule *r, int mode, plan_tensor_layout *L)
{
    if (k == EXEC_EMBED || k == EXEC_HEAD) mode = EXEC_ACT_ALL;
    const int parts[PLAN_NTUSES] = {
        [PLAN_TUSE_INPUT] = exec_act_part(mode, EXEC_ACT_PIECE_INPUT),
        [PLAN_TUSE_CORE] = exec_act_part(mode, EXEC_ACT_PIECE_CORE),
        [PLAN_TUSE_KEPT] = exec_act_part(mode, EXEC_ACT_PIECE_OTHER),
        /* the rest of the input, kept only when F keeps nothing but the input */
        [PLAN_TUSE_RESTART] = mode == EXEC_ACT_INPUT ? 0 : -1,
        [PLAN_TUSE_WORK_F] = -1,
        [PLAN_TUSE_WORK_B] = -1,
    };
    layout(c, s, k, r, parts, L);
}

void exec_work_layout(const exec_cfg *c, const exec_shard *s, exec_region_kind k,
                      const exec_tensor_rule *r, bool pass_f, plan_tensor_layout *L)
{
    const int parts[PLAN_NTUSES] = {
        [PLAN_TUSE_INPUT] = -1, [PLAN_TUSE_CORE] = -1,     [PLAN_TUSE_KEPT] = -1,
        [PLAN_TUSE_RESTART] = -1, [PLAN_TUSE_WORK_F] = 0, [PLAN_TUSE_WORK_B] = pass_f ? -1 : 0,
    };
    layout(c, s, k, r, parts, L);
}
