/* model.c — the model zoo's structure: loading a model from YAML/JSON, validating its shape,
 * cutting it into regions, and counting parameters (whole and per device). The kernels, activation
 * bytes and FLOPs of each region live in cost.c; both shard a region through ir_dims_init so that
 * the parameters a device holds and the GEMMs it runs always agree. */
#include <math.h>
#include <stdint.h>
#include <stdarg.h>
#include <string.h>

#include "model.h"
#include "model_internal.h"

/* Upper bounds that keep every count of the cost model far from int64 overflow (and the fuzzer's
 * UBSan quiet); they are orders of magnitude above any published model. */
#define MAX_LAYERS 100000
#define MAX_HIDDEN (1 << 20)
#define MAX_HEADS 65536
#define MAX_FFN (1 << 22)
#define MAX_VOCAB (1 << 24)
#define MAX_SEQ (1 << 24)
#define MAX_EXPERTS 65536
#define MAX_MICRO_BATCH (1 << 20)
#define MAX_PARAMS 1e16

/* ---------------------------------------------------------------- shapes */

ir_shape ir_shape_default(void)
{
    ir_shape s;
    memset(&s, 0, sizeof s);
    s.micro_batch = 1;
    s.tp = 1;
    s.ep = 1;
    s.recompute = IR_RECOMPUTE_NONE;
    s.act_dtype = PLAN_BF16;
    s.param_dtype = PLAN_BF16;
    s.grad_dtype = PLAN_BF16;
    s.opt_shards = 1;
    return s;
}

int64_t ir_moe_capacity(const ir_model *m, const ir_shape *s)
{
    if (m->experts <= 0) return 0;
    double routed = (double)(s->micro_batch * m->seq * m->top_k);
    double c = m->capacity_factor * routed / (double)m->experts;
    /* 1.1 * 1000 / 11 is 100.00000000000001 in doubles; the intended capacity is 100. */
    int64_t cap = (int64_t)ceil(c - 1e-9 * c);
    return cap < 1 ? 1 : cap;
}

void ir_dims_init(const ir_model *m, const ir_shape *s, ir_dims *d)
{
    memset(d, 0, sizeof *d);
    int64_t t = s->tp > 0 ? s->tp : 1;
    d->gpt = m->family == IR_FAMILY_GPT;
    d->e = plan_dtype_bytes(s->act_dtype);
    d->pe = plan_dtype_bytes(s->param_dtype);
    d->b = s->micro_batch;
    d->s = m->seq;
    d->h = m->hidden;
    d->t = t;
    d->bs = d->b * d->s;
    d->tl = s->sequence_parallel ? (double)d->bs / (double)t : (double)d->bs;
    d->d = m->head_dim;
    d->a_dev = m->heads / t;
    /* Megatron replicates key/value heads when the TP group is larger than their number. */
    d->kv_dev = m->kv_heads >= t ? m->kv_heads / t : 1;
    d->qd = d->a_dev * d->d;
    d->kvd = d->kv_dev * d->d;
    d->f_dev = m->ffn / t;
    d->v_dev = m->vocab / t;
    d->ep = s->ep > 0 ? s->ep : 1;
    if (m->experts > 0) {
        d->e_dev = m->experts / d->ep;
        d->ef_dev = m->expert_ffn / t;
        d->cap = ir_moe_capacity(m, s);
        d->moe_buf = m->experts * d->cap;
    }
}

int ir_shape_validate(const ir_model *m, const ir_shape *s, base_error *e)
{
    const char *n = m->name ? m->name : "model";
    if (s->micro_batch < 1 || s->micro_batch > MAX_MICRO_BATCH)
        return base_errorf(e, "micro-batch size %lld is out of range; use 1..%d sequences",
                           (long long)s->micro_batch, MAX_MICRO_BATCH);
    if (s->tp < 1)
        return base_errorf(e, "tensor-parallel degree %lld must be at least 1", (long long)s->tp);
    if (s->ep < 1)
        return base_errorf(e, "expert-parallel degree %lld must be at least 1", (long long)s->ep);
    if (s->act_dtype >= PLAN_NDTYPE || s->param_dtype >= PLAN_NDTYPE ||
        s->grad_dtype >= PLAN_NDTYPE)
        return base_errorf(e,
                           "unknown dtype in the region shape; use bf16, fp16, fp32, fp64 or fp8");
    int64_t t = s->tp;
    /* kernel launch counts (b * heads attention GEMMs) are 32-bit in the plan */
    if (s->micro_batch * m->heads > INT32_MAX)
        return base_errorf(e,
                           "%s: micro-batch %lld times %lld heads is too many attention "
                           "launches; use a smaller micro-batch",
                           n, (long long)s->micro_batch, (long long)m->heads);
    if (m->heads % t)
        return base_errorf(e,
                           "%s: tensor parallelism %lld does not divide heads (%lld); use a tp "
                           "that divides the number of attention heads",
                           n, (long long)t, (long long)m->heads);
    if (m->kv_heads % t && t % m->kv_heads)
        return base_errorf(e,
                           "%s: tensor parallelism %lld and kv_heads (%lld) must divide one "
                           "another (kv heads are split, or replicated when tp is larger)",
                           n, (long long)t, (long long)m->kv_heads);
    if (m->ffn % t)
        return base_errorf(e,
                           "%s: tensor parallelism %lld does not divide ffn (%lld); use a tp "
                           "that divides the MLP width",
                           n, (long long)t, (long long)m->ffn);
    if (m->vocab % t)
        return base_errorf(e,
                           "%s: tensor parallelism %lld does not divide vocab (%lld); pad the "
                           "vocabulary to a multiple of tp (Megatron pads to 128*tp)",
                           n, (long long)t, (long long)m->vocab);
    if (s->sequence_parallel && m->seq % t)
        return base_errorf(e,
                           "%s: sequence parallelism splits seq (%lld) over tp %lld, which "
                           "does not divide it; use a tp that divides seq",
                           n, (long long)m->seq, (long long)t);
    if (m->experts > 0) {
        if (m->expert_ffn % t)
            return base_errorf(e,
                               "%s: tensor parallelism %lld does not divide expert_ffn (%lld); "
                               "use a tp that divides the expert width",
                               n, (long long)t, (long long)m->expert_ffn);
        if (m->experts % s->ep)
            return base_errorf(e,
                               "%s: expert parallelism %lld does not divide experts (%lld); "
                               "use an ep that divides the number of experts",
                               n, (long long)s->ep, (long long)m->experts);
    }
    return 0;
}

/* ---------------------------------------------------------------- regions */

bool ir_model_layer_is_moe(const ir_model *m, int64_t layer)
{
    if (m->experts <= 0 || layer < m->moe_first || layer >= m->layers) return false;
    int64_t every = m->moe_every > 0 ? m->moe_every : 1;
    return (layer - m->moe_first) % every == 0;
}

int ir_model_nregions(const ir_model *m)
{
    int n = 2; /* embed, head */
    for (int64_t l = 0; l < m->layers; l++) n += ir_model_layer_is_moe(m, l) ? 4 : 2;
    return n;
}

static void region_set(ir_region *r, ir_region_kind k, int index, int layer, const char *name)
{
    r->kind = k;
    r->index = index;
    r->layer = layer;
    r->name = name;
}

void ir_model_regions(const ir_model *m, base_arena *a, ir_region *out)
{
    int i = 0;
    region_set(&out[i], IR_REGION_EMBED, i, -1, "embed");
    i++;
    for (int l = 0; l < (int)m->layers; l++) {
        region_set(&out[i], IR_REGION_ATTN, i, l, base_arena_printf(a, "L%d.attn", l));
        i++;
        if (ir_model_layer_is_moe(m, l)) {
            region_set(&out[i], IR_REGION_MOE_GATE, i, l, base_arena_printf(a, "L%d.moe_gate", l));
            i++;
            region_set(&out[i], IR_REGION_MOE_EXPERTS, i, l,
                       base_arena_printf(a, "L%d.moe_experts", l));
            i++;
            region_set(&out[i], IR_REGION_MOE_COMBINE, i, l,
                       base_arena_printf(a, "L%d.moe_combine", l));
            i++;
        } else {
            region_set(&out[i], IR_REGION_MLP, i, l, base_arena_printf(a, "L%d.mlp", l));
            i++;
        }
    }
    region_set(&out[i], IR_REGION_HEAD, i, -1, "head");
}

/* ---------------------------------------------------------------- parameters */

int64_t ir_region_params_per_device(const ir_model *m, const ir_region *r, const ir_shape *s)
{
    ir_dims d;
    ir_dims_init(m, s, &d);
    const int64_t h = d.h;
    const bool gpt = d.gpt;
    switch (r->kind) {
    case IR_REGION_EMBED:
        /* vocab-parallel token table; Megatron keeps the position table whole on every rank */
        return d.v_dev * h + (m->learned_positions ? m->seq * h : 0);
    case IR_REGION_ATTN: {
        int64_t qkv = d.qd + 2 * d.kvd; /* column-parallel output width */
        int64_t p = ir_norm_params(m) + h * qkv + d.qd * h;
        if (gpt) p += qkv + h; /* QKV bias split with its columns; the out-proj bias is whole */
        if (m->qk_norm) p += 2 * d.d;
        return p;
    }
    case IR_REGION_MLP:
        if (gpt) return ir_norm_params(m) + h * d.f_dev + d.f_dev + d.f_dev * h + h;
        return ir_norm_params(m) + 3 * h * d.f_dev; /* gate and up (column), down (row) */
    case IR_REGION_MOE_GATE:
        return ir_norm_params(m) + h * m->experts; /* the router is replicated */
    case IR_REGION_MOE_EXPERTS:
        return d.e_dev * 3 * h * d.ef_dev;
    case IR_REGION_MOE_COMBINE:
        return 0;
    case IR_REGION_HEAD:
        return ir_norm_params(m) + (m->tied_embeddings ? 0 : d.v_dev * h);
    case IR_NREGION_KINDS:
        break;
    }
    return 0;
}

int64_t ir_region_params(const ir_model *m, const ir_region *r)
{
    ir_shape s = ir_shape_default();
    return ir_region_params_per_device(m, r, &s);
}

int64_t ir_model_params(const ir_model *m)
{
    int64_t total = 0;
    ir_region r;
    region_set(&r, IR_REGION_EMBED, 0, -1, "embed");
    total += ir_region_params(m, &r);
    region_set(&r, IR_REGION_HEAD, 0, -1, "head");
    total += ir_region_params(m, &r);
    for (int64_t l = 0; l < m->layers; l++) {
        static const ir_region_kind dense[] = {IR_REGION_ATTN, IR_REGION_MLP};
        static const ir_region_kind moe[] = {IR_REGION_ATTN, IR_REGION_MOE_GATE,
                                             IR_REGION_MOE_EXPERTS, IR_REGION_MOE_COMBINE};
        bool is_moe = ir_model_layer_is_moe(m, l);
        const ir_region_kind *k = is_moe ? moe : dense;
        int nk = is_moe ? 4 : 2;
        for (int i = 0; i < nk; i++) {
            region_set(&r, k[i], 0, (int)l, "");
            total += ir_region_params(m, &r);
        }
    }
    return total;
}

int64_t ir_model_tied_copy_params_per_device(const ir_model *m, const ir_shape *s)
{
    if (!m->tied_embeddings) return 0;
    ir_dims d;
    ir_dims_init(m, s, &d);
    return d.v_dev * d.h;
}

/* ---------------------------------------------------------------- validation */

/* Reports a shape error at the key that holds the bad value when the model came from a document
 * (at the map itself when the value was a default), else naming the model and its file. */
BASE_PRINTF(5, 6)
static int bad(const ir_model *m, const ir_doc *doc, const char *key, base_error *e,
               const char *fmt, ...)
{
    char msg[BASE_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (doc) {
        const ir_doc *at = ir_doc_get(doc, key);
        if (!at) at = doc;
        return base_error_at(e, at->file, at->line, at->col, "%s", msg);
    }
    return base_error_at(e, m->file, 0, 0, "model '%s': %s", m->name ? m->name : "?", msg);
}

static int check_range(const ir_model *m, const ir_doc *doc, const char *key, int64_t v, int64_t lo,
                       int64_t hi, const char *meaning, base_error *e)
{
    if (v >= lo && v <= hi) return 0;
    return bad(m, doc, key, e, "'%s' is %lld, out of range; use %lld..%lld (%s)", key, (long long)v,
               (long long)lo, (long long)hi, meaning);
}

static int model_check(const ir_model *m, const ir_doc *doc, base_error *e)
{
    if (check_range(m, doc, "layers", m->layers, 1, MAX_LAYERS, "the number of transformer layers",
                    e) ||
        check_range(m, doc, "hidden", m->hidden, 1, MAX_HIDDEN, "the model width", e) ||
        check_range(m, doc, "heads", m->heads, 1, MAX_HEADS, "the number of attention heads", e) ||
        check_range(m, doc, "kv_heads", m->kv_heads, 1, MAX_HEADS, "the number of key/value heads",
                    e) ||
        check_range(m, doc, "head_dim", m->head_dim, 1, MAX_HIDDEN, "the width of one head", e) ||
        check_range(m, doc, "ffn", m->ffn, 1, MAX_FFN, "the MLP width", e) ||
        check_range(m, doc, "vocab", m->vocab, 1, MAX_VOCAB, "the vocabulary size", e) ||
        check_range(m, doc, "seq", m->seq, 1, MAX_SEQ, "the sequence length", e))
        return -1;
    if (m->heads % m->kv_heads)
        return bad(m, doc, "kv_heads", e,
                   "kv_heads (%lld) does not divide heads (%lld); use a divisor of heads "
                   "(grouped-query attention shares each key/value head among equally many "
                   "query heads)",
                   (long long)m->kv_heads, (long long)m->heads);
    bool gpt = m->family == IR_FAMILY_GPT;
    if (gpt && m->qk_norm)
        return bad(m, doc, "qk_norm", e,
                   "qk_norm is a llama/qwen3 option; remove it or use family: qwen3");
    if (!gpt && m->dropout)
        return bad(m, doc, "dropout", e, "dropout is modelled for family gpt only; remove it");
    if (!gpt && m->learned_positions)
        return bad(m, doc, "learned_positions", e,
                   "llama-family models use rotary positions; remove learned_positions");
    if (m->experts < 0 || m->experts > MAX_EXPERTS)
        return check_range(m, doc, "experts", m->experts, 0, MAX_EXPERTS,
                           "the number of experts (0 for a dense model)", e);
    if (m->experts > 0) {
        if (gpt)
            return bad(m, doc, "experts", e,
                       "MoE layers are modelled for family llama/qwen3 (SwiGLU experts); use "
                       "family: llama or set experts: 0");
        if (check_range(m, doc, "top_k", m->top_k, 1, m->experts,
                        "the experts each token is routed to", e) ||
            check_range(m, doc, "expert_ffn", m->expert_ffn, 1, MAX_FFN, "the expert FFN width",
                        e) ||
            check_range(m, doc, "moe_first", m->moe_first, 0, m->layers - 1,
                        "the first MoE layer, 0-based", e) ||
            check_range(m, doc, "moe_every", m->moe_every, 1, m->layers,
                        "the stride of MoE layers (1 = every layer)", e))
            return -1;
        if (!(m->capacity_factor > 0 && m->capacity_factor <= (double)m->experts))
            return bad(m, doc, "capacity_factor", e,
                       "capacity_factor %g is out of range; use a value in (0, experts], "
                       "typically 1.0-2.0",
                       m->capacity_factor);
        if (!(m->aux_loss_coef >= 0 && m->aux_loss_coef < 1e6))
            return bad(m, doc, "aux_loss_coef", e,
                       "aux_loss_coef %g must be a non-negative number; use e.g. 0.01",
                       m->aux_loss_coef);
    }
    /* Total size in doubles: beyond this the int64 counts of the cost model could overflow. */
    double per_layer =
        4.0 * (double)m->hidden * (double)(m->heads + m->kv_heads) * (double)m->head_dim +
        3.0 * (double)m->hidden * (double)m->ffn +
        3.0 * (double)m->hidden * (double)m->expert_ffn * (double)m->experts;
    double total = per_layer * (double)m->layers + 2.0 * (double)m->vocab * (double)m->hidden +
                   (double)m->seq * (double)m->hidden;
    if (total > MAX_PARAMS)
        return bad(m, doc, "layers", e,
                   "the model has about %.3g parameters, more than piper "
                   "models (%.0e); check the shape",
                   total, MAX_PARAMS);
    return 0;
}

int ir_model_validate(const ir_model *m, base_error *e)
{
    return model_check(m, NULL, e);
}

/* ---------------------------------------------------------------- loading */

static const char *const MODEL_KEYS[] = {"name",
                                         "family",
                                         "layers",
                                         "hidden",
                                         "heads",
                                         "kv_heads",
                                         "head_dim",
                                         "ffn",
                                         "vocab",
                                         "seq",
                                         "experts",
                                         "expert_ffn",
                                         "top_k",
                                         "capacity_factor",
                                         "moe_first",
                                         "moe_every",
                                         "aux_loss_coef",
                                         "tied_embeddings",
                                         "qk_norm",
                                         "dropout",
                                         "flash_attention",
                                         "learned_positions",
                                         NULL};

/* Optional integer: leaves *out alone when the key is absent. */
static int opt_int(const ir_doc *d, const char *key, int64_t *out, bool *present, base_error *e)
{
    const ir_doc *v = ir_doc_get(d, key);
    if (present) *present = v != NULL;
    if (!v) return 0;
    return ir_doc_int(v, key, out, e);
}

static int req_int(const ir_doc *d, const char *key, const char *meaning, int64_t *out,
                   base_error *e)
{
    const ir_doc *v = ir_doc_get(d, key);
    if (!v)
        return base_error_at(e, d->file, d->line, d->col, "model is missing '%s'; add %s: <%s>",
                             key, key, meaning);
    return ir_doc_int(v, key, out, e);
}

static int opt_num(const ir_doc *d, const char *key, double *out, base_error *e)
{
    const ir_doc *v = ir_doc_get(d, key);
    return v ? ir_doc_num(v, key, out, e) : 0;
}

static int opt_bool(const ir_doc *d, const char *key, bool *out, base_error *e)
{
    const ir_doc *v = ir_doc_get(d, key);
    return v ? ir_doc_bool(v, key, out, e) : 0;
}

/* "configs/models/gpt_1.7b.yaml" -> "gpt_1.7b" */
static const char *name_from_path(base_arena *a, const char *path)
{
    if (!path || !*path) return "model";
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    size_t n = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    return base_arena_strndup(a, base, n);
}

int ir_model_from_doc(const ir_doc *d, base_arena *a, ir_model *m, base_error *e)
{
    memset(m, 0, sizeof *m);
    if (!d || d->kind != IR_DOC_MAP) {
        if (!d) return base_errorf(e, "model: empty document; write a map of model keys");
        return base_error_at(e, d->file, d->line, d->col,
                             "a model must be a map of keys (family, layers, hidden, ...); "
                             "see configs/models/ for examples");
    }
    if (ir_doc_check_keys(d, "model", MODEL_KEYS, NULL, e)) return -1;
    m->file = d->file;

    const ir_doc *fam = ir_doc_get(d, "family");
    if (!fam)
        return base_error_at(e, d->file, d->line, d->col,
                             "model is missing 'family'; add family: gpt (LayerNorm, GELU) or "
                             "family: llama (RMSNorm, SwiGLU; qwen3 is the same)");
    const char *fs;
    if (ir_doc_string(fam, "family", &fs, e)) return -1;
    if (!strcmp(fs, "gpt"))
        m->family = IR_FAMILY_GPT;
    else if (!strcmp(fs, "llama") || !strcmp(fs, "qwen3"))
        m->family = IR_FAMILY_LLAMA;
    else
        return ir_doc_error(fam, e, "unknown model family '%s'; use gpt, llama or qwen3", fs);
    bool gpt = m->family == IR_FAMILY_GPT;

    const ir_doc *nm = ir_doc_get(d, "name");
    if (nm) {
        if (ir_doc_string(nm, "name", &m->name, e)) return -1;
    } else {
        m->name = name_from_path(a, d->file);
    }

    if (req_int(d, "layers", "number of transformer layers", &m->layers, e) ||
        req_int(d, "hidden", "model width", &m->hidden, e) ||
        req_int(d, "heads", "number of attention heads", &m->heads, e) ||
        req_int(d, "vocab", "vocabulary size", &m->vocab, e) ||
        req_int(d, "seq", "sequence length", &m->seq, e))
        return -1;
    if (check_range(m, d, "hidden", m->hidden, 1, MAX_HIDDEN, "the model width", e) ||
        check_range(m, d, "heads", m->heads, 1, MAX_HEADS, "the number of attention heads", e))
        return -1;

    m->kv_heads = m->heads;
    if (opt_int(d, "kv_heads", &m->kv_heads, NULL, e)) return -1;
    bool has_head_dim;
    if (opt_int(d, "head_dim", &m->head_dim, &has_head_dim, e)) return -1;
    if (!has_head_dim) {
        if (m->hidden % m->heads)
            return ir_doc_error(ir_doc_get(d, "heads"), e,
                                "hidden (%lld) is not divisible by heads (%lld); choose heads "
                                "that divide hidden, or set head_dim",
                                (long long)m->hidden, (long long)m->heads);
        m->head_dim = m->hidden / m->heads;
    }
    bool has_ffn;
    if (opt_int(d, "ffn", &m->ffn, &has_ffn, e)) return -1;
    if (!has_ffn) {
        if (!gpt)
            return base_error_at(e, d->file, d->line, d->col,
                                 "llama-family model is missing 'ffn'; add ffn: <SwiGLU width> "
                                 "(11008 for Llama-2-7B)");
        m->ffn = 4 * m->hidden;
    }

    if (opt_int(d, "experts", &m->experts, NULL, e)) return -1;
    bool has_top_k, has_expert_ffn;
    if (opt_int(d, "top_k", &m->top_k, &has_top_k, e) ||
        opt_int(d, "expert_ffn", &m->expert_ffn, &has_expert_ffn, e))
        return -1;
    m->moe_every = 1;
    if (opt_int(d, "moe_first", &m->moe_first, NULL, e) ||
        opt_int(d, "moe_every", &m->moe_every, NULL, e))
        return -1;
    if (m->experts > 0) {
        if (!has_top_k)
            return base_error_at(
                e, d->file, d->line, d->col,
                "MoE model (experts: %lld) is missing 'top_k'; add top_k: <experts "
                "per token>, e.g. top_k: 2",
                (long long)m->experts);
        if (!has_expert_ffn) m->expert_ffn = m->ffn;
        m->capacity_factor = 1.0;
        /* Switch Transformer's load-balancing coefficient */
        m->aux_loss_coef = 0.01;
    } else {
        static const char *const moe_only[] = {"top_k",     "expert_ffn", "capacity_factor",
                                               "moe_first", "moe_every",  "aux_loss_coef"};
        for (size_t i = 0; i < BASE_COUNT(moe_only); i++) {
            const ir_doc *v = ir_doc_get(d, moe_only[i]);
            if (v)
                ir_doc_warn(v, e,
                            "'%s' has no effect on a dense model (experts is 0); remove it "
                            "or set experts",
                            moe_only[i]);
        }
    }
    if (opt_num(d, "capacity_factor", &m->capacity_factor, e) ||
        opt_num(d, "aux_loss_coef", &m->aux_loss_coef, e))
        return -1;

    m->tied_embeddings = gpt;
    m->learned_positions = gpt;
    if (opt_bool(d, "tied_embeddings", &m->tied_embeddings, e) ||
        opt_bool(d, "qk_norm", &m->qk_norm, e) || opt_bool(d, "dropout", &m->dropout, e) ||
        opt_bool(d, "flash_attention", &m->flash_attention, e) ||
        opt_bool(d, "learned_positions", &m->learned_positions, e))
        return -1;

    return model_check(m, d, e);
}

int ir_model_load(const char *path, base_arena *a, ir_model *m, base_error *e)
{
    ir_doc *d;
    if (ir_doc_load(a, path, &d, e)) return -1;
    return ir_model_from_doc(d, a, m, e);
}
