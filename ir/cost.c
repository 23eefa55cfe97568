/* cost.c — the cost model of one region on one device: the kernels each pass runs (GEMMs with
 * m, n, k; memory-bound kernels with the HBM bytes they move), the activation bytes a micro-batch
 * keeps until its backward, the bytes that cross to the next region, and FLOPs.
 *
 * Conventions (see ../shared/reference/formulas.md):
 * - tokens: every GEMM sees all b*s tokens of the micro-batch (under sequence parallelism the
 *   all-gather in front of a column-parallel GEMM restores them); norms, dropout, residual adds
 *   and biases after a row-parallel GEMM run on the tokens a device holds outside the TP-split
 *   GEMMs: b*s/t under SP, all b*s (replicated on every TP rank) without.
 * - TP is Megatron's: QKV, fc1, gate/up column-parallel; attention heads split; out-projection,
 *   fc2, down row-parallel; LM head and embedding vocab-parallel. GEMM FLOPs are exactly 1/t of
 *   the unsplit ones. Communication is the DAG's, never a kernel here.
 * - GEMM FLOPs are 2*m*n*k*count; a GEMM's bytes are its operands and result once each.
 * - Full (non-causal) s x s attention FLOPs, as the published formulas count them. Flash
 *   attention runs the same GEMMs (their bytes leave out the s x s tensors) and keeps the
 *   log-sum-exp; its backward recomputation of QK^T is left to the kernel's efficiency, so that
 *   the GEMM FLOPs stay the model FLOPs.
 * - MoE (llama family): the gate and combine run on the device's tokens like a norm does; the
 *   dispatched buffer holds experts*C tokens on every device (with EP, experts/ep local experts
 *   each receive C tokens from each of the ep sources); experts are TP-split like a dense MLP. */
#include <string.h>

#include "model.h"
#include "model_internal.h"

/* ---------------------------------------------------------------- kernel lists */

typedef struct kbuild {
    base_arena *a;
    const ir_dims *d;
    plan_dtype dt;
    plan_kernel *k;
    size_t n, cap;
} kbuild;

static plan_kernel *kpush(kbuild *kb)
{
    kb->k = base_arena_grow(kb->a, kb->k, &kb->cap, kb->n + 1, sizeof *kb->k);
    plan_kernel *k = &kb->k[kb->n++];
    memset(k, 0, sizeof *k);
    k->dtype = (uint8_t)kb->dt;
    return k;
}

/* (m x k) . (k x n), `count` times; `bytes` < 0 means the plain operand + result traffic. */
static void gemm_b(kbuild *kb, const char *name, int64_t m, int64_t n, int64_t k, int64_t count,
                   double bytes)
{
    if (m <= 0 || n <= 0 || k <= 0 || count <= 0) return;
    plan_kernel *g = kpush(kb);
    g->kind = PLAN_KERNEL_GEMM;
    g->name = name;
    g->m = m;
    g->n = n;
    g->k = k;
    g->count = (int32_t)count;
    g->flops = 2.0 * (double)m * (double)n * (double)k * (double)count;
    g->bytes = bytes >= 0 ? bytes
                          : kb->d->e * ((double)m * (double)k + (double)k * (double)n +
                                        (double)m * (double)n) * (double)count;
}

static void gemm_n(kbuild *kb, const char *name, int64_t m, int64_t n, int64_t k, int64_t count)
{
    gemm_b(kb, name, m, n, k, count, -1);
}

static void gemm(kbuild *kb, const char *name, int64_t m, int64_t n, int64_t k)
{
    gemm_b(kb, name, m, n, k, 1, -1);
}

static void mem(kbuild *kb, const char *name, double bytes, double flops)
{
    if (bytes <= 0 && flops <= 0) return;
    plan_kernel *k = kpush(kb);
    k->kind = PLAN_KERNEL_MEM;
    k->name = name;
    k->count = 1;
    k->bytes = bytes;
    k->flops = flops;
}

/* ---------------------------------------------------------------- shared pieces */

/* A norm over `tok` tokens: LayerNorm (scale, bias; ~8 flops/element) or RMSNorm (scale). */
static void norm_f(kbuild *kb, const ir_model *m, double tok)
{
    const ir_dims *d = kb->d;
    bool ln = d->gpt;
    mem(kb, ln ? "layernorm" : "rmsnorm",
        2.0 * tok * d->h * d->e + (double)ir_norm_params(m) * d->pe, (ln ? 8.0 : 4.0) * tok * d->h);
}
static void norm_bi(kbuild *kb, const ir_model *m, double tok)
{
    const ir_dims *d = kb->d;
    bool ln = d->gpt;
    mem(kb, ln ? "layernorm_dx" : "rmsnorm_dx",
        3.0 * tok * d->h * d->e + (double)ir_norm_params(m) * d->pe,
        (ln ? 12.0 : 8.0) * tok * d->h);
}
static void norm_bw(kbuild *kb, const ir_model *m, double tok)
{
    const ir_dims *d = kb->d;
    bool ln = d->gpt;
    mem(kb, ln ? "layernorm_dw" : "rmsnorm_dw",
        2.0 * tok * d->h * d->e + (double)ir_norm_params(m) * 4.0, (ln ? 4.0 : 3.0) * tok * d->h);
}
/* Elementwise dropout over n elements: read x, write y and the 1-byte mask; backward reads the
 * gradient and the mask and writes the input gradient. */
static void dropout_f(kbuild *kb, const char *name, double n)
{
    mem(kb, name, n * (2.0 * kb->d->e + 1.0), 2.0 * n);
}
static void dropout_b(kbuild *kb, const char *name, double n)
{
    mem(kb, name, n * (2.0 * kb->d->e + 1.0), n);
}
static void residual_f(kbuild *kb, double tok)
{
    mem(kb, "residual_add", 3.0 * tok * kb->d->h * kb->d->e, tok * kb->d->h);
}
/* Backward: the gradients of the residual branch and of the skip path meet at the block input. */
static void residual_bi(kbuild *kb, double tok)
{
    mem(kb, "residual_grad_add", 3.0 * tok * kb->d->h * kb->d->e, tok * kb->d->h);
}
/* Bias add over tok x n, and its gradient (a reduction over tokens into fp32). */
static void bias_f(kbuild *kb, const char *name, double tok, int64_t n)
{
    mem(kb, name, 2.0 * tok * (double)n * kb->d->e, tok * (double)n);
}
static void bias_bw(kbuild *kb, const char *name, double tok, int64_t n)
{
    mem(kb, name, tok * (double)n * kb->d->e + 4.0 * (double)n, tok * (double)n);
}

/* ---------------------------------------------------------------- attention */

/* The attention core: scores, softmax (scale, causal mask), dropout, attn.V — per query head. */
static void attn_core_f(kbuild *kb, const ir_model *m)
{
    const ir_dims *d = kb->d;
    int64_t heads = d->b * d->a_dev;
    double ss = (double)d->s * (double)d->s * (double)heads; /* score elements */
    if (m->flash_attention) {
        double qkv_bytes = (double)heads * (double)d->s * (double)d->d * d->e;
        gemm_b(kb, "flash_scores", d->s, d->s, d->d, heads, 2.0 * qkv_bytes);
        mem(kb, "flash_softmax", 4.0 * (double)heads * (double)d->s, 5.0 * ss);
        gemm_b(kb, "flash_attn_v", d->s, d->d, d->s, heads, 2.0 * qkv_bytes);
        return;
    }
    gemm_n(kb, "attn_scores", d->s, d->s, d->d, heads);
    mem(kb, "softmax", 2.0 * ss * d->e, 5.0 * ss);
    if (m->dropout) dropout_f(kb, "attn_dropout", ss);
    gemm_n(kb, "attn_v", d->s, d->d, d->s, heads);
}

static void attn_core_bi(kbuild *kb, const ir_model *m)
{
    const ir_dims *d = kb->d;
    int64_t heads = d->b * d->a_dev;
    double ss = (double)d->s * (double)d->s * (double)heads;
    if (m->flash_attention) {
        double qkv_bytes = (double)heads * (double)d->s * (double)d->d * d->e;
        /* rowwise dot(dO, O) and the lse: the statistics the fused backward starts from */
        mem(kb, "flash_softmax_grad", 2.0 * qkv_bytes + 4.0 * (double)heads * (double)d->s,
            5.0 * ss);
        gemm_b(kb, "flash_attn_v_dp", d->s, d->s, d->d, heads, 2.0 * qkv_bytes);
        gemm_b(kb, "flash_attn_v_dv", d->s, d->d, d->s, heads, 2.0 * qkv_bytes);
        gemm_b(kb, "flash_scores_dq", d->s, d->d, d->s, heads, 2.0 * qkv_bytes);
        gemm_b(kb, "flash_scores_dk", d->s, d->d, d->s, heads, 2.0 * qkv_bytes);
        return;
    }
    gemm_n(kb, "attn_v_dp", d->s, d->s, d->d, heads);  /* dP = dO V^T */
    gemm_n(kb, "attn_v_dv", d->s, d->d, d->s, heads);  /* dV = P^T dO */
    if (m->dropout) dropout_b(kb, "attn_dropout_grad", ss);
    mem(kb, "softmax_grad", 3.0 * ss * d->e, 4.0 * ss);
    gemm_n(kb, "attn_scores_dq", d->s, d->d, d->s, heads); /* dQ = dS K */
    gemm_n(kb, "attn_scores_dk", d->s, d->d, d->s, heads); /* dK = dS^T Q */
}

static void attn_f(kbuild *kb, const ir_model *m)
{
    const ir_dims *d = kb->d;
    int64_t qkv = d->qd + 2 * d->kvd;
    norm_f(kb, m, d->tl);
    gemm(kb, "qkv", d->bs, qkv, d->h);
    if (d->gpt) bias_f(kb, "qkv_bias", (double)d->bs, qkv);
    double qk = (double)d->bs * (double)(d->qd + d->kvd);
    if (m->qk_norm) mem(kb, "qk_norm", 2.0 * qk * d->e, 4.0 * qk);
    if (!d->gpt) mem(kb, "rope", 2.0 * qk * d->e, 3.0 * qk);
    attn_core_f(kb, m);
    gemm(kb, "attn_out", d->bs, d->h, d->qd);
    if (d->gpt) bias_f(kb, "attn_out_bias", d->tl, d->h);
    if (m->dropout) dropout_f(kb, "hidden_dropout", d->tl * (double)d->h);
    residual_f(kb, d->tl);
}

static void attn_bi(kbuild *kb, const ir_model *m)
{
    const ir_dims *d = kb->d;
    int64_t qkv = d->qd + 2 * d->kvd;
    if (m->dropout) dropout_b(kb, "hidden_dropout_grad", d->tl * (double)d->h);
    gemm(kb, "attn_out_dx", d->bs, d->qd, d->h);
    attn_core_bi(kb, m);
    double qk = (double)d->bs * (double)(d->qd + d->kvd);
    if (!d->gpt) mem(kb, "rope_grad", 2.0 * qk * d->e, 3.0 * qk);
    if (m->qk_norm) mem(kb, "qk_norm_dx", 3.0 * qk * d->e, 6.0 * qk);
    gemm(kb, "qkv_dx", d->bs, d->h, qkv);
    norm_bi(kb, m, d->tl);
    residual_bi(kb, d->tl);
}

static void attn_bw(kbuild *kb, const ir_model *m)
{
    const ir_dims *d = kb->d;
    int64_t qkv = d->qd + 2 * d->kvd;
    gemm(kb, "qkv_dw", d->h, qkv, d->bs);
    if (d->gpt) bias_bw(kb, "qkv_bias_grad", (double)d->bs, qkv);
    if (m->qk_norm) {
        double qk = (double)d->bs * (double)(d->qd + d->kvd);
        mem(kb, "qk_norm_dw", 2.0 * qk * d->e + 8.0 * (double)d->d, 2.0 * qk);
    }
    gemm(kb, "attn_out_dw", d->qd, d->h, d->bs);
    if (d->gpt) bias_bw(kb, "attn_out_bias_grad", d->tl, d->h);
    norm_bw(kb, m, d->tl);
}

/* ---------------------------------------------------------------- MLP */

static void mlp_f(kbuild *kb, const ir_model *m)
{
    const ir_dims *d = kb->d;
    double bf = (double)d->bs * (double)d->f_dev;
    norm_f(kb, m, d->tl);
    if (d->gpt) {
        gemm(kb, "fc1", d->bs, d->f_dev, d->h);
        bias_f(kb, "fc1_bias", (double)d->bs, d->f_dev);
        mem(kb, "gelu", 2.0 * bf * d->e, 8.0 * bf);
        gemm(kb, "fc2", d->bs, d->h, d->f_dev);
        bias_f(kb, "fc2_bias", d->tl, d->h);
        if (m->dropout) dropout_f(kb, "hidden_dropout", d->tl * (double)d->h);
    } else {
        gemm(kb, "gate_up", d->bs, 2 * d->f_dev, d->h);
        mem(kb, "swiglu", 3.0 * bf * d->e, 6.0 * bf);
        gemm(kb, "down", d->bs, d->h, d->f_dev);
    }
    residual_f(kb, d->tl);
}

static void mlp_bi(kbuild *kb, const ir_model *m)
{
    const ir_dims *d = kb->d;
    double bf = (double)d->bs * (double)d->f_dev;
    if (d->gpt) {
        if (m->dropout) dropout_b(kb, "hidden_dropout_grad", d->tl * (double)d->h);
        gemm(kb, "fc2_dx", d->bs, d->f_dev, d->h);
        mem(kb, "gelu_grad", 3.0 * bf * d->e, 12.0 * bf);
        gemm(kb, "fc1_dx", d->bs, d->h, d->f_dev);
    } else {
        gemm(kb, "down_dx", d->bs, d->f_dev, d->h);
        mem(kb, "swiglu_grad", 5.0 * bf * d->e, 12.0 * bf);
        gemm(kb, "gate_up_dx", d->bs, d->h, 2 * d->f_dev);
    }
    norm_bi(kb, m, d->tl);
    residual_bi(kb, d->tl);
}

static void mlp_bw(kbuild *kb, const ir_model *m)
{
    const ir_dims *d = kb->d;
    if (d->gpt) {
        gemm(kb, "fc1_dw", d->h, d->f_dev, d->bs);
        bias_bw(kb, "fc1_bias_grad", (double)d->bs, d->f_dev);
        gemm(kb, "fc2_dw", d->f_dev, d->h, d->bs);
        bias_bw(kb, "fc2_bias_grad", d->tl, d->h);
    } else {
        gemm(kb, "gate_up_dw", d->h, 2 * d->f_dev, d->bs);
        gemm(kb, "down_dw", d->f_dev, d->h, d->bs);
    }
    norm_bw(kb, m, d->tl);
}

/* ---------------------------------------------------------------- MoE */

/* Router logits, softmax and top-k in fp32 (probabilities, top-k weights and expert indices). */
static void moe_gate_f(kbuild *kb, const ir_model *m)
{
    const ir_dims *d = kb->d;
    double tok = d->tl, te = d->tl * (double)m->experts, tk = d->tl * (double)m->top_k;
    norm_f(kb, m, tok);
    gemm(kb, "router", (int64_t)tok, m->experts, d->h);
    mem(kb, "router_softmax_topk", te * (d->e + 4.0) + 8.0 * tk, 6.0 * te);
    if (m->aux_loss_coef > 0) mem(kb, "aux_loss", 4.0 * te, 2.0 * te);
    mem(kb, "dispatch_permute",
        tk * (double)d->h * d->e + (double)d->moe_buf * (double)d->h * d->e, 0);
}

static void moe_gate_bi(kbuild *kb, const ir_model *m)
{
    const ir_dims *d = kb->d;
    double tok = d->tl, te = d->tl * (double)m->experts, tk = d->tl * (double)m->top_k;
    mem(kb, "dispatch_permute_grad",
        (double)d->moe_buf * (double)d->h * d->e + tok * (double)d->h * d->e, tk * (double)d->h);
    if (m->aux_loss_coef > 0) mem(kb, "aux_loss_grad", 8.0 * te, 2.0 * te);
    mem(kb, "router_softmax_grad", te * (8.0 + d->e) + 8.0 * tk, 4.0 * te);
    gemm(kb, "router_dx", (int64_t)tok, d->h, m->experts);
    norm_bi(kb, m, tok);
    residual_bi(kb, tok);
}

static void moe_gate_bw(kbuild *kb, const ir_model *m)
{
    const ir_dims *d = kb->d;
    gemm(kb, "router_dw", d->h, m->experts, (int64_t)d->tl);
    norm_bw(kb, m, d->tl);
}

/* Each local expert is a SwiGLU over the ep*C tokens it received. */
static void moe_experts_f(kbuild *kb, const ir_model *m)
{
    const ir_dims *d = kb->d;
    int64_t tok = d->ep * d->cap;
    double bf = (double)d->moe_buf * (double)d->ef_dev;
    gemm_n(kb, "expert_gate_up", tok, 2 * d->ef_dev, d->h, d->e_dev);
    mem(kb, "expert_swiglu", 3.0 * bf * d->e, 6.0 * bf);
    gemm_n(kb, "expert_down", tok, d->h, d->ef_dev, d->e_dev);
}

static void moe_experts_bi(kbuild *kb, const ir_model *m)
{
    const ir_dims *d = kb->d;
    int64_t tok = d->ep * d->cap;
    double bf = (double)d->moe_buf * (double)d->ef_dev;
    gemm_n(kb, "expert_down_dx", tok, d->ef_dev, d->h, d->e_dev);
    mem(kb, "expert_swiglu_grad", 5.0 * bf * d->e, 12.0 * bf);
    gemm_n(kb, "expert_gate_up_dx", tok, d->h, 2 * d->ef_dev, d->e_dev);
}

static void moe_experts_bw(kbuild *kb, const ir_model *m)
{
    const ir_dims *d = kb->d;
    int64_t tok = d->ep * d->cap;
    gemm_n(kb, "expert_gate_up_dw", d->h, 2 * d->ef_dev, tok, d->e_dev);
    gemm_n(kb, "expert_down_dw", d->ef_dev, d->h, tok, d->e_dev);
}

static void moe_combine_f(kbuild *kb, const ir_model *m)
{
    const ir_dims *d = kb->d;
    double tok = d->tl, tk = d->tl * (double)m->top_k, buf = (double)d->moe_buf * (double)d->h;
    mem(kb, "combine_unpermute", buf * d->e + 4.0 * tk + tok * (double)d->h * d->e,
        2.0 * tk * (double)d->h);
    residual_f(kb, tok);
}

static void moe_combine_bi(kbuild *kb, const ir_model *m)
{
    const ir_dims *d = kb->d;
    double tok = d->tl, tk = d->tl * (double)m->top_k, buf = (double)d->moe_buf * (double)d->h;
    /* reads dy, the expert outputs and the weights; writes d(expert outputs) and d(weights) */
    mem(kb, "combine_grad", tok * (double)d->h * d->e + 2.0 * buf * d->e + 8.0 * tk,
        4.0 * tk * (double)d->h);
}

/* ---------------------------------------------------------------- embed, head */

static void embed_f(kbuild *kb, const ir_model *m)
{
    const ir_dims *d = kb->d;
    double bsh = (double)d->bs * (double)d->h;
    /* a vocab-parallel rank reads only the rows in its slice and writes zeros elsewhere */
    mem(kb, "embedding_gather", 4.0 * (double)d->bs + bsh * d->pe / (double)d->t + bsh * d->e, 0);
    if (m->learned_positions)
        mem(kb, "position_add", (double)m->seq * (double)d->h * d->pe + 2.0 * bsh * d->e, bsh);
    if (m->dropout) dropout_f(kb, "embed_dropout", d->tl * (double)d->h);
}

/* The embedding has no input gradient: its whole backward is the weight gradient. */
static void embed_bw(kbuild *kb, const ir_model *m)
{
    const ir_dims *d = kb->d;
    double bsh = (double)d->bs * (double)d->h;
    if (m->dropout) dropout_b(kb, "embed_dropout_grad", d->tl * (double)d->h);
    mem(kb, "embedding_grad",
        bsh * d->e + 4.0 * (double)d->bs + 2.0 * bsh * d->pe / (double)d->t, bsh / (double)d->t);
    if (m->learned_positions)
        mem(kb, "position_grad", bsh * d->e + (double)m->seq * (double)d->h * d->pe, bsh);
}

/* Cross-entropy keeps fp32 probabilities of the vocab slice (Megatron's vocab-parallel loss). Its
 * bytes are those of Megatron's loss as it runs, in separate fp32 passes over the logits slice:
 * cast to fp32 (2 + 4 bytes per element), max (4), subtract (4 + 4), exp (4 + 4), sum (4), divide
 * (4 + 4): e + 36 bytes; the backward scales the saved probabilities (4 + 4) and casts them back
 * (4 + e): e + 12. At GPT vocabularies this is the largest memory-bound kernel of a step (the
 * calibration's pipeline rows, whose last stage holds the head, showed it: docs/calibration.md). */
static void head_f(kbuild *kb, const ir_model *m)
{
    const ir_dims *d = kb->d;
    double bv = (double)d->bs * (double)d->v_dev;
    norm_f(kb, m, d->tl);
    gemm(kb, "lm_head", d->bs, d->v_dev, d->h);
    mem(kb, "cross_entropy", bv * (d->e + 36.0), 5.0 * bv);
}

static void head_bi(kbuild *kb, const ir_model *m)
{
    const ir_dims *d = kb->d;
    double bv = (double)d->bs * (double)d->v_dev;
    mem(kb, "cross_entropy_grad", bv * (d->e + 12.0), 2.0 * bv);
    gemm(kb, "lm_head_dx", d->bs, d->h, d->v_dev);
    norm_bi(kb, m, d->tl);
}

static void head_bw(kbuild *kb, const ir_model *m)
{
    const ir_dims *d = kb->d;
    gemm(kb, "lm_head_dw", d->h, d->v_dev, d->bs);
    norm_bw(kb, m, d->tl);
}

/* ---------------------------------------------------------------- dispatch */

typedef void (*pass_fn)(kbuild *, const ir_model *);

static void region_pass(kbuild *kb, const ir_model *m, ir_region_kind kind, plan_pass pass)
{
    static const pass_fn F[IR_NREGION_KINDS] = {embed_f, attn_f, mlp_f, moe_gate_f,
                                                moe_experts_f, moe_combine_f, head_f};
    static const pass_fn BI[IR_NREGION_KINDS] = {NULL, attn_bi, mlp_bi, moe_gate_bi,
                                                 moe_experts_bi, moe_combine_bi, head_bi};
    static const pass_fn BW[IR_NREGION_KINDS] = {embed_bw, attn_bw, mlp_bw, moe_gate_bw,
                                                 moe_experts_bw, NULL, head_bw};
    const pass_fn *t = pass == PLAN_PASS_F ? F : pass == PLAN_PASS_BI ? BI : BW;
    if (t[kind]) t[kind](kb, m);
}

static bool is_layer_region(ir_region_kind k)
{
    return k != IR_REGION_EMBED && k != IR_REGION_HEAD;
}

int ir_region_kernels(const ir_model *m, const ir_region *r, plan_pass pass, const ir_shape *s,
                      base_arena *a, plan_kernel_list *out)
{
    ir_dims d;
    ir_dims_init(m, s, &d);
    kbuild kb = {.a = a, .d = &d, .dt = s->act_dtype};
    out->n = 0;
    out->k = NULL;
    if ((unsigned)r->kind >= IR_NREGION_KINDS) return -1;
    switch (pass) {
    case PLAN_PASS_F:
    case PLAN_PASS_BI:
    case PLAN_PASS_BW:
        region_pass(&kb, m, r->kind, pass);
        break;
    case PLAN_PASS_B:
        region_pass(&kb, m, r->kind, PLAN_PASS_BI);
        region_pass(&kb, m, r->kind, PLAN_PASS_BW);
        break;
    case PLAN_PASS_R:
        if (s->recompute == IR_RECOMPUTE_FULL && is_layer_region(r->kind))
            region_pass(&kb, m, r->kind, PLAN_PASS_F);
        else if (s->recompute == IR_RECOMPUTE_SELECTIVE && r->kind == IR_REGION_ATTN)
            attn_core_f(&kb, m);
        break;
    case PLAN_PASS_UPD: {
        /* under ZeRO >= 1 the device steps only its piece of the state: ceil(p / N) parameters,
         * the piece of the largest rank (the executor's pieces, exec_zero_piece) */
        int64_t pd = ir_region_params_per_device(m, r, s);
        if (s->opt_shards > 1) pd = (pd + s->opt_shards - 1) / s->opt_shards;
        double p = (double)pd;
        /* gradient read (fp32 where grad_dtype says so), parameter written, fp32 master, m and v
         * read and written */
        kb.dt = PLAN_FP32;
        double ge = plan_dtype_bytes(s->grad_dtype);
        mem(&kb, "optimizer_adamw", p * (ge + d.pe + 24.0), 12.0 * p);
        break;
    }
    case PLAN_PASS_AUX:
    case PLAN_NPASS:
        break;
    }
    out->n = (int)kb.n;
    out->k = kb.k;
    return 0;
}

double ir_kernels_gemm_flops(const plan_kernel_list *l)
{
    double f = 0;
    for (int i = 0; i < l->n; i++)
        if (l->k[i].kind == PLAN_KERNEL_GEMM) f += l->k[i].flops;
    return f;
}

static double region_flops(const ir_model *m, const ir_region *r, plan_pass pass,
                           const ir_shape *s, bool gemm_only)
{
    base_arena a;
    base_arena_init(&a);
    plan_kernel_list l;
    double f = 0;
    if (ir_region_kernels(m, r, pass, s, &a, &l) == 0)
        for (int i = 0; i < l.n; i++)
            if (!gemm_only || l.k[i].kind == PLAN_KERNEL_GEMM) f += l.k[i].flops;
    base_arena_free(&a);
    return f;
}

double ir_region_flops(const ir_model *m, const ir_region *r, plan_pass pass, const ir_shape *s)
{
    return region_flops(m, r, pass, s, true);
}

double ir_region_total_flops(const ir_model *m, const ir_region *r, plan_pass pass,
                             const ir_shape *s)
{
    return region_flops(m, r, pass, s, false);
}

double ir_model_step_flops(const ir_model *m, const ir_shape *s, int64_t sequences)
{
    /* one device of a tp group runs 1/tp of the GEMM FLOPs, of an ep group 1/ep of the experts'
     * for ep times the tokens: the tp = ep = 1 shape is the whole model */
    ir_shape one = *s;
    one.tp = 1;
    one.ep = 1;
    one.sequence_parallel = false;
    double per_mb = 0;
    static const ir_region_kind kinds[] = {IR_REGION_EMBED, IR_REGION_ATTN, IR_REGION_MLP,
                                           IR_REGION_MOE_GATE, IR_REGION_MOE_EXPERTS,
                                           IR_REGION_MOE_COMBINE, IR_REGION_HEAD};
    double per_kind[IR_NREGION_KINDS];
    for (size_t i = 0; i < BASE_COUNT(kinds); i++) {
        ir_region r = {.kind = kinds[i], .index = 0, .layer = 0, .name = ""};
        per_kind[kinds[i]] = ir_region_flops(m, &r, PLAN_PASS_F, &one) +
                             ir_region_flops(m, &r, PLAN_PASS_B, &one) +
                             ir_region_flops(m, &r, PLAN_PASS_R, &one);
    }
    int64_t moe_layers = 0;
    for (int64_t l = 0; l < m->layers; l++) moe_layers += ir_model_layer_is_moe(m, l);
    int64_t dense_layers = m->layers - moe_layers;
    per_mb = per_kind[IR_REGION_EMBED] + per_kind[IR_REGION_HEAD] +
             (double)m->layers * per_kind[IR_REGION_ATTN] +
             (double)dense_layers * per_kind[IR_REGION_MLP] +
             (double)moe_layers * (per_kind[IR_REGION_MOE_GATE] + per_kind[IR_REGION_MOE_EXPERTS] +
                                   per_kind[IR_REGION_MOE_COMBINE]);
    return per_mb * (double)sequences / (double)(s->micro_batch > 0 ? s->micro_batch : 1);
}

/* ---------------------------------------------------------------- activations */

/* The tensors each region keeps and works in are plan/plan_tensors.h's table, which says what
 * each is and why; both backends carve their buffers from the same rows. Here the table's
 * dimensions are the cost model's: tokens T = b*s (every kernel of a region runs on the whole
 * micro-batch, SP gathers it first), kept rows tl = b*s/t under SP, per-device widths after TP,
 * and its element classes e (the activation dtype), w = max(e, 4), 1-byte masks and 4-byte ints. */
static const plan_tregion tregion_of[IR_NREGION_KINDS] = {
    [IR_REGION_EMBED] = PLAN_TR_EMBED,
    [IR_REGION_ATTN] = PLAN_TR_ATTN,
    [IR_REGION_MLP] = PLAN_TR_MLP,
    [IR_REGION_MOE_GATE] = PLAN_TR_MOE_GATE,
    [IR_REGION_MOE_EXPERTS] = PLAN_TR_MOE_EXPERTS,
    [IR_REGION_MOE_COMBINE] = PLAN_TR_MOE_COMBINE,
    [IR_REGION_HEAD] = PLAN_TR_HEAD,
};

static void tensor_dims(const ir_model *m, const ir_dims *d, plan_tensor_dims *td)
{
    *td = (plan_tensor_dims){
        .tokens = d->bs,
        .kept = (int64_t)d->tl,
        .batch = d->b,
        .seq = d->s,
        .hidden = d->h,
        .head_dim = d->d,
        .heads = d->a_dev,
        .kv_heads = d->kv_dev,
        .ffn = d->f_dev,
        .experts = m->experts,
        .top_k = m->top_k,
        .rows = d->moe_buf,
        .expert_ffn = d->ef_dev,
        .vocab = d->v_dev,
        .flags = (d->gpt ? PLAN_TF_GPT : 0u) | (m->dropout ? PLAN_TF_DROPOUT : 0u) |
                 (m->qk_norm ? PLAN_TF_QK_NORM : 0u) | (m->flash_attention ? PLAN_TF_FLASH : 0u),
    };
}

/* Sums region r's tensors of the uses in `parts` (part 0; -1 leaves a use out). align 1 packs
 * them (the published activation accounting is a plain sum); 0 starts each at a multiple of its
 * element size, as a workspace carved by the kernels is laid out. */
static double table_bytes(const ir_model *m, const ir_region *r, const ir_shape *s,
                          const int parts[PLAN_NTUSES], int64_t align)
{
    ir_dims d;
    ir_dims_init(m, s, &d);
    plan_tensor_dims td;
    tensor_dims(m, &d, &td);
    const int64_t e = (int64_t)d.e;
    plan_tensor_rule rule = {{[PLAN_TELEM_E] = e, [PLAN_TELEM_W] = e > 4 ? e : 4,
                              [PLAN_TELEM_MASK] = 1, [PLAN_TELEM_4] = 4},
                             align, {0}};
    memcpy(rule.part, parts, sizeof rule.part);
    plan_tensor_layout L;
    plan_tensor_walk(tregion_of[r->kind], &td, &rule, &L);
    return (double)L.bytes[0];
}

/* Bytes kept for backward: the table's act tensors. Selective recompute drops the attention
 * core; full recompute keeps the region's input (and nothing when the region is recomputed from
 * the previous one's recomputation). Norm statistics are not kept, as in the published
 * accounting: a backward recomputes them from the kept norm input. */
double ir_region_activation_bytes(const ir_model *m, const ir_region *r, const ir_shape *s)
{
    enum { NO = -1 };
    int parts[PLAN_NTUSES] = {[PLAN_TUSE_INPUT] = 0, [PLAN_TUSE_CORE] = 0, [PLAN_TUSE_KEPT] = 0,
                              [PLAN_TUSE_RESTART] = NO, [PLAN_TUSE_WORK_F] = NO,
                              [PLAN_TUSE_WORK_B] = NO};
    if (is_layer_region(r->kind) && s->recompute == IR_RECOMPUTE_FULL) {
        if (s->recompute_from_prev) return 0.0;
        parts[PLAN_TUSE_CORE] = parts[PLAN_TUSE_KEPT] = NO;
        parts[PLAN_TUSE_RESTART] = 0;
    } else if (s->recompute == IR_RECOMPUTE_SELECTIVE) {
        parts[PLAN_TUSE_CORE] = NO;
    }
    return table_bytes(m, r, s, parts, 1);
}

/* A pass's workspace: the table's work tensors, F's part for F and R, all of them for B and BI
 * (what BI leaves there is what BW reads). */
double ir_region_work_bytes(const ir_model *m, const ir_region *r, const ir_shape *s, plan_pass pass)
{
    if (pass != PLAN_PASS_F && pass != PLAN_PASS_R && pass != PLAN_PASS_B && pass != PLAN_PASS_BI)
        return 0.0;
    bool fwd = pass == PLAN_PASS_F || pass == PLAN_PASS_R;
    const int parts[PLAN_NTUSES] = {[PLAN_TUSE_INPUT] = -1, [PLAN_TUSE_CORE] = -1,
                                    [PLAN_TUSE_KEPT] = -1, [PLAN_TUSE_RESTART] = -1,
                                    [PLAN_TUSE_WORK_F] = 0, [PLAN_TUSE_WORK_B] = fwd ? -1 : 0};
    return table_bytes(m, r, s, parts, 0);
}

double ir_region_route_bytes(const ir_model *m, const ir_shape *s)
{
    ir_dims d;
    ir_dims_init(m, s, &d);
    double w = d.e > 4.0 ? d.e : 4.0;
    return d.tl * (double)d.h * d.e + d.tl * (double)m->top_k * (w + 4.0);
}

double ir_region_output_bytes(const ir_model *m, const ir_region *r, const ir_shape *s)
{
    ir_dims d;
    ir_dims_init(m, s, &d);
    switch (r->kind) {
    case IR_REGION_MOE_GATE:
    case IR_REGION_MOE_EXPERTS:
        return (double)d.moe_buf * (double)d.h * d.e;
    case IR_REGION_HEAD:
        return 4.0; /* the fp32 loss of the micro-batch */
    default:
        return d.tl * (double)d.h * d.e;
    }
}
