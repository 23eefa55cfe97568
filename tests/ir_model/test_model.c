/* test_model.c — the model zoo and its cost model against published closed forms
 * (../shared/reference/formulas.md): GPT parameter counts, per-layer and per-iteration FLOPs,
 * Korthikanti et al.'s activation table row by row, recompute kernels, MoE capacity arithmetic,
 * Llama-2 parameter counts, every config file, and the error messages of loading/validation. */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/model.h"
#include "tests/testutil.h"

/* ---------------------------------------------------------------- helpers */

static ir_model gpt(int64_t l, int64_t h, int64_t a, int64_t V, int64_t s)
{
    ir_model m;
    memset(&m, 0, sizeof m);
    m.name = "gpt";
    m.family = IR_FAMILY_GPT;
    m.layers = l;
    m.hidden = h;
    m.heads = a;
    m.kv_heads = a;
    m.head_dim = h / a;
    m.ffn = 4 * h;
    m.vocab = V;
    m.seq = s;
    m.tied_embeddings = true;
    m.learned_positions = true;
    m.dropout = true;
    return m;
}

static ir_model llama(int64_t l, int64_t h, int64_t a, int64_t kv, int64_t f, int64_t V, int64_t s)
{
    ir_model m;
    memset(&m, 0, sizeof m);
    m.name = "llama";
    m.family = IR_FAMILY_LLAMA;
    m.layers = l;
    m.hidden = h;
    m.heads = a;
    m.kv_heads = kv;
    m.head_dim = h / a;
    m.ffn = f;
    m.vocab = V;
    m.seq = s;
    return m;
}

/* The Megatron-LM Table 1 shapes: heads, hidden, layers. */
static const int64_t MEGATRON[][3] = {{24, 2304, 24}, {32, 3072, 30}, {32, 4096, 36},
                                      {48, 6144, 40}, {64, 8192, 48}, {80, 10240, 60},
                                      {96, 12288, 80}};

static ir_region reg(ir_region_kind k, int layer)
{
    ir_region r = {.kind = k, .index = 0, .layer = layer, .name = "r"};
    return r;
}

static ir_shape shape(int64_t b, int64_t t, bool sp, ir_recompute rc)
{
    ir_shape s = ir_shape_default();
    s.micro_batch = b;
    s.tp = t;
    s.sequence_parallel = sp;
    s.recompute = rc;
    return s;
}

static int rel_eq(double x, double y)
{
    double scale = fmax(fabs(x), fabs(y));
    int ok = fabs(x - y) <= 1e-9 * (scale > 0 ? scale : 1);
    if (!ok) fprintf(stderr, "\n  %.17g != %.17g (rel %.3g)\n", x, y, fabs(x - y) / scale);
    return ok;
}
#define ASSERT_REL(x, y) CU_ASSERT(rel_eq((x), (y)))

static int int_eq(int64_t x, int64_t y)
{
    if (x != y) fprintf(stderr, "\n  %lld != %lld\n", (long long)x, (long long)y);
    return x == y;
}
#define ASSERT_INT(x, y) CU_ASSERT(int_eq((x), (y)))

static const plan_kernel *find(const plan_kernel_list *l, const char *name)
{
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->k[i].name, name)) return &l->k[i];
    fprintf(stderr, "\n  kernel '%s' not in the list\n", name);
    return NULL;
}

static void assert_gemm(const plan_kernel_list *l, const char *name, int64_t m, int64_t n,
                        int64_t k, int64_t count)
{
    const plan_kernel *g = find(l, name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_EQUAL(g->kind, PLAN_KERNEL_GEMM);
    ASSERT_INT(g->m, m);
    ASSERT_INT(g->n, n);
    ASSERT_INT(g->k, k);
    ASSERT_INT(g->count, count);
    CU_ASSERT_EQUAL(g->flops, 2.0 * (double)m * (double)n * (double)k * (double)count);
}

static double layer_flops(const ir_model *m, plan_pass p, const ir_shape *s)
{
    ir_region a = reg(IR_REGION_ATTN, 0), f = reg(IR_REGION_MLP, 0);
    return ir_region_flops(m, &a, p, s) + ir_region_flops(m, &f, p, s);
}

/* attn + mlp of one GPT layer, the mlp marked as recomputed from the attn under FULL */
static double layer_act(const ir_model *m, ir_shape s)
{
    ir_region a = reg(IR_REGION_ATTN, 0), f = reg(IR_REGION_MLP, 0);
    double x = ir_region_activation_bytes(m, &a, &s);
    s.recompute_from_prev = true;
    return x + ir_region_activation_bytes(m, &f, &s);
}

/* ---------------------------------------------------------------- regions */

static void test_regions(void)
{
    base_arena a;
    base_arena_init(&a);
    ir_model g = gpt(2, 64, 4, 256, 32);
    CU_ASSERT_EQUAL(ir_model_nregions(&g), 6);
    ir_region r[6];
    ir_model_regions(&g, &a, r);
    CU_ASSERT_STRING_EQUAL(r[0].name, "embed");
    CU_ASSERT_STRING_EQUAL(r[1].name, "L0.attn");
    CU_ASSERT_STRING_EQUAL(r[2].name, "L0.mlp");
    CU_ASSERT_STRING_EQUAL(r[4].name, "L1.mlp");
    CU_ASSERT_STRING_EQUAL(r[5].name, "head");
    CU_ASSERT_EQUAL(r[4].layer, 1);
    CU_ASSERT_EQUAL(r[5].layer, -1);
    CU_ASSERT_EQUAL(r[3].index, 3);
    CU_ASSERT_EQUAL(r[3].kind, IR_REGION_ATTN);

    ir_model m = llama(4, 64, 4, 2, 128, 256, 32);
    m.experts = 4;
    m.top_k = 2;
    m.expert_ffn = 64;
    m.capacity_factor = 1.25;
    m.moe_first = 1;
    m.moe_every = 2;
    CU_ASSERT_FALSE(ir_model_layer_is_moe(&m, 0));
    CU_ASSERT_TRUE(ir_model_layer_is_moe(&m, 1));
    CU_ASSERT_FALSE(ir_model_layer_is_moe(&m, 2));
    CU_ASSERT_TRUE(ir_model_layer_is_moe(&m, 3));
    CU_ASSERT_EQUAL(ir_model_nregions(&m), 14);
    ir_region q[14];
    ir_model_regions(&m, &a, q);
    static const char *const names[] = {
        "embed",          "L0.attn",        "L0.mlp",         "L1.attn", "L1.moe_gate",
        "L1.moe_experts", "L1.moe_combine", "L2.attn",        "L2.mlp",  "L3.attn",
        "L3.moe_gate",    "L3.moe_experts", "L3.moe_combine", "head"};
    for (int i = 0; i < 14; i++) {
        CU_ASSERT_STRING_EQUAL(q[i].name, names[i]);
        CU_ASSERT_EQUAL(q[i].index, i);
    }
    CU_ASSERT_EQUAL(q[5].kind, IR_REGION_MOE_EXPERTS);
    CU_ASSERT_EQUAL(q[5].layer, 1);
    base_arena_free(&a);
}

/* ---------------------------------------------------------------- parameters */

static void test_gpt_params_megatron(void)
{
    for (size_t i = 0; i < BASE_COUNT(MEGATRON); i++) {
        int64_t a = MEGATRON[i][0], h = MEGATRON[i][1], l = MEGATRON[i][2], V = 51200, s = 2048;
        ir_model m = gpt(l, h, a, V, s);
        /* formulas.md omits the final LayerNorm's 2h parameters (scale and bias of the head) */
        int64_t p = ir_model_params(&m) - 2 * h;
        ASSERT_INT(p, 12 * l * h * h + 13 * l * h + (V + s) * h);
        double hd = (double)h, ld = (double)l;
        ASSERT_REL((double)p,
                   12 * ld * hd * hd * (1 + 13 / (12 * hd) + (double)(V + s) / (12 * ld * hd)));
        ir_region at = reg(IR_REGION_ATTN, 0), ml = reg(IR_REGION_MLP, 0);
        ir_region em = reg(IR_REGION_EMBED, -1), hd_r = reg(IR_REGION_HEAD, -1);
        ASSERT_INT(ir_region_params(&m, &at), 4 * h * h + 6 * h); /* QKV, out proj, LN1 */
        ASSERT_INT(ir_region_params(&m, &ml), 8 * h * h + 7 * h); /* fc1, fc2, LN2 */
        ASSERT_INT(ir_region_params(&m, &em), (V + s) * h);
        ASSERT_INT(ir_region_params(&m, &hd_r), 2 * h); /* tied: final LN only */
    }
}

static void test_gpt_params_tp(void)
{
    int64_t h = 4096, V = 51200, s = 2048;
    ir_model m = gpt(36, h, 32, V, s);
    for (int64_t t = 1; t <= 8; t *= 2) {
        ir_shape sh = shape(1, t, false, IR_RECOMPUTE_NONE);
        ir_region at = reg(IR_REGION_ATTN, 0), ml = reg(IR_REGION_MLP, 0);
        ir_region em = reg(IR_REGION_EMBED, -1), hd = reg(IR_REGION_HEAD, -1);
        /* split: QKV weight and bias, out-proj weight; whole: LN1, out-proj bias */
        ASSERT_INT(ir_region_params_per_device(&m, &at, &sh),
                   (3 * h * h + 3 * h + h * h) / t + 3 * h);
        ASSERT_INT(ir_region_params_per_device(&m, &ml, &sh), (8 * h * h + 4 * h) / t + 3 * h);
        ASSERT_INT(ir_region_params_per_device(&m, &em, &sh), V * h / t + s * h);
        ASSERT_INT(ir_region_params_per_device(&m, &hd, &sh), 2 * h);
        ASSERT_INT(ir_model_tied_copy_params_per_device(&m, &sh), V * h / t);
    }
    m.tied_embeddings = false;
    ir_shape sh = shape(1, 4, false, IR_RECOMPUTE_NONE);
    ir_region hd = reg(IR_REGION_HEAD, -1);
    ASSERT_INT(ir_region_params_per_device(&m, &hd, &sh), 2 * h + V * h / 4);
    ASSERT_INT(ir_model_tied_copy_params_per_device(&m, &sh), 0);
}

static void test_llama_params(void)
{
    ir_model m7 = llama(32, 4096, 32, 32, 11008, 32000, 4096);
    ASSERT_INT(ir_model_params(&m7), 6738415616LL);
    ir_model m70 = llama(80, 8192, 64, 8, 28672, 32000, 4096);
    ASSERT_INT(ir_model_params(&m70), 68976648192LL);
    /* per region: RMSNorm h; q, k, v, o; SwiGLU */
    ir_region at = reg(IR_REGION_ATTN, 0), ml = reg(IR_REGION_MLP, 0);
    ASSERT_INT(ir_region_params(&m70, &at), 8192 + 8192LL * 8192 * 2 + 2LL * 8192 * 1024);
    ASSERT_INT(ir_region_params(&m70, &ml), 8192 + 3LL * 8192 * 28672);
    /* GQA under TP: 8 kv heads split over 8 devices, replicated over 16 */
    ir_shape s8 = shape(1, 8, false, IR_RECOMPUTE_NONE),
             s16 = shape(1, 16, false, IR_RECOMPUTE_NONE);
    ASSERT_INT(ir_region_params_per_device(&m70, &at, &s8),
               8192 + 8192LL * (1024 + 2 * 128) + 1024LL * 8192);
    ASSERT_INT(ir_region_params_per_device(&m70, &at, &s16),
               8192 + 8192LL * (512 + 2 * 128) + 512LL * 8192);
    /* qk_norm adds a scale of head_dim for q and for k; tying drops the LM head */
    m7.qk_norm = true;
    m7.tied_embeddings = true;
    ASSERT_INT(ir_model_params(&m7), 6738415616LL + 32 * 2 * 128 - 32000LL * 4096);
}

/* ---------------------------------------------------------------- FLOPs */

static void test_gpt_layer_flops(void)
{
    for (size_t i = 0; i < BASE_COUNT(MEGATRON); i++) {
        int64_t a = MEGATRON[i][0], h = MEGATRON[i][1], l = MEGATRON[i][2], s = 2048;
        ir_model m = gpt(l, h, a, 51200, s);
        for (int64_t b = 1; b <= 4; b *= 2)
            for (int64_t t = 1; t <= 8; t *= 2)
                for (int sp = 0; sp < 2; sp++) {
                    ir_shape sh = shape(b, t, sp, IR_RECOMPUTE_NONE);
                    double sbh = (double)(s * b * h);
                    double F = sbh * (double)(24 * h + 4 * s) / (double)t;
                    double BI = sbh * (double)(24 * h + 8 * s) / (double)t;
                    double BW = sbh * (double)(24 * h) / (double)t;
                    /* integers well below 2^53: exact */
                    CU_ASSERT_EQUAL(layer_flops(&m, PLAN_PASS_F, &sh), F);
                    CU_ASSERT_EQUAL(layer_flops(&m, PLAN_PASS_BI, &sh), BI);
                    CU_ASSERT_EQUAL(layer_flops(&m, PLAN_PASS_BW, &sh), BW);
                    CU_ASSERT_EQUAL(layer_flops(&m, PLAN_PASS_B, &sh), BI + BW);
                    ir_region hd = reg(IR_REGION_HEAD, -1), em = reg(IR_REGION_EMBED, -1);
                    double lm = 2.0 * (double)(b * s * h) * 51200.0 / (double)t;
                    CU_ASSERT_EQUAL(ir_region_flops(&m, &hd, PLAN_PASS_F, &sh), lm);
                    CU_ASSERT_EQUAL(ir_region_flops(&m, &hd, PLAN_PASS_BI, &sh), lm);
                    CU_ASSERT_EQUAL(ir_region_flops(&m, &hd, PLAN_PASS_BW, &sh), lm);
                    CU_ASSERT_EQUAL(ir_region_flops(&m, &em, PLAN_PASS_F, &sh), 0.0);
                    CU_ASSERT_EQUAL(ir_region_flops(&m, &em, PLAN_PASS_B, &sh), 0.0);
                }
    }
}

/* Sum over every region of the region list, every pass and every micro-batch. */
static double iteration_flops(const ir_model *m, const ir_shape *sh, int64_t G)
{
    base_arena a;
    base_arena_init(&a);
    int n = ir_model_nregions(m);
    ir_region *r = base_arena_calloc(&a, (size_t)n, sizeof *r);
    ir_model_regions(m, &a, r);
    double f = 0;
    for (int i = 0; i < n; i++)
        f += ir_region_flops(m, &r[i], PLAN_PASS_F, sh) +
             ir_region_flops(m, &r[i], PLAN_PASS_B, sh) +
             ir_region_flops(m, &r[i], PLAN_PASS_R, sh) +
             ir_region_flops(m, &r[i], PLAN_PASS_UPD, sh);
    base_arena_free(&a);
    return f * (double)(G / sh->micro_batch) * (double)sh->tp;
}

static void test_iteration_flops(void)
{
    const int64_t G = 512, V = 51200, s = 2048;
    for (size_t i = 0; i < BASE_COUNT(MEGATRON); i++) {
        int64_t a = MEGATRON[i][0], h = MEGATRON[i][1], l = MEGATRON[i][2];
        ir_model m = gpt(l, h, a, V, s);
        double Gd = (double)G, sd = (double)s, ld = (double)l, hd = (double)h, Vd = (double)V;
        double plain = 72 * Gd * sd * ld * hd * hd * (1 + sd / (6 * hd) + Vd / (12 * ld * hd));
        double full = 96 * Gd * sd * ld * hd * hd * (1 + sd / (6 * hd) + Vd / (16 * ld * hd));
        for (int64_t t = 1; t <= 8; t *= 4) {
            ir_shape none = shape(2, t, t > 1, IR_RECOMPUTE_NONE);
            ir_shape rec = shape(2, t, t > 1, IR_RECOMPUTE_FULL);
            ASSERT_REL(iteration_flops(&m, &none, G), plain);
            ASSERT_REL(iteration_flops(&m, &rec, G), full);
            ASSERT_REL(ir_model_step_flops(&m, &none, G), plain);
            ASSERT_REL(ir_model_step_flops(&m, &rec, G), full);
        }
        /* selective recompute adds the attention core only: 4*s^2*h per sequence and layer */
        ir_shape sel = shape(1, 1, false, IR_RECOMPUTE_SELECTIVE);
        ASSERT_REL(ir_model_step_flops(&m, &sel, G), plain + Gd * ld * 4 * sd * sd * hd);
    }
}

static void test_gemm_only_flops(void)
{
    ir_model m = gpt(2, 64, 4, 256, 32);
    ir_shape sh = shape(1, 1, false, IR_RECOMPUTE_NONE);
    ir_region at = reg(IR_REGION_ATTN, 0);
    base_arena a;
    base_arena_init(&a);
    plan_kernel_list l;
    CU_ASSERT_EQUAL(ir_region_kernels(&m, &at, PLAN_PASS_F, &sh, &a, &l), 0);
    double gemm = 0, all = 0;
    int nmem = 0;
    for (int i = 0; i < l.n; i++) {
        all += l.k[i].flops;
        if (l.k[i].kind == PLAN_KERNEL_GEMM)
            gemm += l.k[i].flops;
        else
            nmem++;
    }
    CU_ASSERT(nmem > 0);
    CU_ASSERT(all > gemm);
    CU_ASSERT_EQUAL(ir_region_flops(&m, &at, PLAN_PASS_F, &sh), gemm);
    CU_ASSERT_EQUAL(ir_kernels_gemm_flops(&l), gemm);
    CU_ASSERT_EQUAL(ir_region_total_flops(&m, &at, PLAN_PASS_F, &sh), all);
    base_arena_free(&a);
}

/* ---------------------------------------------------------------- kernel lists */

static void test_gpt_kernel_shapes(void)
{
    const int64_t h = 2304, a = 24, s = 2048, b = 2, t = 2, d = h / a;
    ir_model m = gpt(24, h, a, 51200, s);
    ir_shape sh = shape(b, t, false, IR_RECOMPUTE_NONE);
    ir_region at = reg(IR_REGION_ATTN, 0), ml = reg(IR_REGION_MLP, 0), hd = reg(IR_REGION_HEAD, -1);
    base_arena ar;
    base_arena_init(&ar);
    plan_kernel_list F, BI, BW, B, MF, MBI, MBW, HF;
    CU_ASSERT_EQUAL(ir_region_kernels(&m, &at, PLAN_PASS_F, &sh, &ar, &F), 0);
    CU_ASSERT_EQUAL(ir_region_kernels(&m, &at, PLAN_PASS_BI, &sh, &ar, &BI), 0);
    CU_ASSERT_EQUAL(ir_region_kernels(&m, &at, PLAN_PASS_BW, &sh, &ar, &BW), 0);
    CU_ASSERT_EQUAL(ir_region_kernels(&m, &at, PLAN_PASS_B, &sh, &ar, &B), 0);
    ir_region_kernels(&m, &ml, PLAN_PASS_F, &sh, &ar, &MF);
    ir_region_kernels(&m, &ml, PLAN_PASS_BI, &sh, &ar, &MBI);
    ir_region_kernels(&m, &ml, PLAN_PASS_BW, &sh, &ar, &MBW);
    ir_region_kernels(&m, &hd, PLAN_PASS_F, &sh, &ar, &HF);

    assert_gemm(&F, "qkv", b * s, 3 * h / t, h, 1);
    assert_gemm(&F, "attn_scores", s, s, d, b * a / t);
    assert_gemm(&F, "attn_v", s, d, s, b * a / t);
    assert_gemm(&F, "attn_out", b * s, h, h / t, 1);
    assert_gemm(&MF, "fc1", b * s, 4 * h / t, h, 1);
    assert_gemm(&MF, "fc2", b * s, h, 4 * h / t, 1);
    assert_gemm(&HF, "lm_head", b * s, 51200 / t, h, 1);

    assert_gemm(&BI, "attn_out_dx", b * s, h / t, h, 1);
    assert_gemm(&BI, "attn_v_dp", s, s, d, b * a / t);
    assert_gemm(&BI, "attn_v_dv", s, d, s, b * a / t);
    assert_gemm(&BI, "attn_scores_dq", s, d, s, b * a / t);
    assert_gemm(&BI, "attn_scores_dk", s, d, s, b * a / t);
    assert_gemm(&BI, "qkv_dx", b * s, h, 3 * h / t, 1);
    assert_gemm(&MBI, "fc2_dx", b * s, 4 * h / t, h, 1);
    assert_gemm(&MBI, "fc1_dx", b * s, h, 4 * h / t, 1);

    assert_gemm(&BW, "qkv_dw", h, 3 * h / t, b * s, 1);
    assert_gemm(&BW, "attn_out_dw", h / t, h, b * s, 1);
    assert_gemm(&MBW, "fc1_dw", h, 4 * h / t, b * s, 1);
    assert_gemm(&MBW, "fc2_dw", 4 * h / t, h, b * s, 1);

    /* the memory-bound kernels, with their bytes (bf16 activations, 1-byte masks) */
    double scores = (double)(b * a / t) * (double)(s * s);
    const plan_kernel *k = find(&F, "softmax");
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    CU_ASSERT_EQUAL(k->kind, PLAN_KERNEL_MEM);
    CU_ASSERT_EQUAL(k->bytes, 2 * 2 * scores);
    k = find(&F, "attn_dropout");
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    CU_ASSERT_EQUAL(k->bytes, 5 * scores);
    k = find(&F, "residual_add");
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    CU_ASSERT_EQUAL(k->bytes, 3.0 * 2 * (double)(b * s * h));
    k = find(&F, "layernorm");
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    CU_ASSERT_EQUAL(k->bytes, 2.0 * 2 * (double)(b * s * h) + 2.0 * 2 * (double)h);
    CU_ASSERT_PTR_NOT_NULL(find(&F, "qkv_bias"));
    CU_ASSERT_PTR_NOT_NULL(find(&F, "hidden_dropout"));
    CU_ASSERT_PTR_NOT_NULL(find(&MF, "gelu"));
    CU_ASSERT_PTR_NOT_NULL(find(&BI, "softmax_grad"));
    CU_ASSERT_PTR_NOT_NULL(find(&HF, "cross_entropy"));
    const plan_kernel *g = find(&F, "qkv");
    CU_ASSERT_EQUAL(g->dtype, PLAN_BF16);
    /* GEMM bytes: operands and result once each */
    CU_ASSERT_EQUAL(g->bytes, 2.0 * (double)(b * s * h + h * 3 * h / t + b * s * 3 * h / t));

    /* B is BI followed by BW */
    CU_ASSERT_EQUAL_FATAL(B.n, BI.n + BW.n);
    for (int i = 0; i < B.n; i++)
        CU_ASSERT_STRING_EQUAL(B.k[i].name, i < BI.n ? BI.k[i].name : BW.k[i - BI.n].name);

    /* with SP the norms, dropout and residual run on s/t tokens, GEMMs still see all b*s */
    ir_shape sp = shape(b, t, true, IR_RECOMPUTE_NONE);
    plan_kernel_list FS;
    ir_region_kernels(&m, &at, PLAN_PASS_F, &sp, &ar, &FS);
    assert_gemm(&FS, "qkv", b * s, 3 * h / t, h, 1);
    k = find(&FS, "residual_add");
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    CU_ASSERT_EQUAL(k->bytes, 3.0 * 2 * (double)(b * s * h) / (double)t);

    /* the embedding: a gather, no GEMM, no input gradient */
    ir_region em = reg(IR_REGION_EMBED, -1);
    plan_kernel_list EF, EBI, EBW;
    ir_region_kernels(&m, &em, PLAN_PASS_F, &sh, &ar, &EF);
    ir_region_kernels(&m, &em, PLAN_PASS_BI, &sh, &ar, &EBI);
    ir_region_kernels(&m, &em, PLAN_PASS_BW, &sh, &ar, &EBW);
    CU_ASSERT_PTR_NOT_NULL(find(&EF, "embedding_gather"));
    CU_ASSERT_EQUAL(EBI.n, 0);
    CU_ASSERT_PTR_NOT_NULL(find(&EBW, "embedding_grad"));
    base_arena_free(&ar);
}

static void names_equal(const plan_kernel_list *x, const char *const *names, int n)
{
    CU_ASSERT_EQUAL_FATAL(x->n, n);
    for (int i = 0; i < n; i++) CU_ASSERT_STRING_EQUAL(x->k[i].name, names[i]);
}

static void test_recompute_kernels(void)
{
    ir_model m = gpt(2, 64, 4, 256, 32);
    base_arena ar;
    base_arena_init(&ar);
    ir_region at = reg(IR_REGION_ATTN, 0), ml = reg(IR_REGION_MLP, 0);
    ir_region em = reg(IR_REGION_EMBED, -1), hd = reg(IR_REGION_HEAD, -1);
    plan_kernel_list l, f;

    ir_shape none = shape(2, 2, false, IR_RECOMPUTE_NONE);
    ir_region_kernels(&m, &at, PLAN_PASS_R, &none, &ar, &l);
    CU_ASSERT_EQUAL(l.n, 0);

    ir_shape full = shape(2, 2, false, IR_RECOMPUTE_FULL);
    const ir_region *layer[] = {&at, &ml};
    for (int i = 0; i < 2; i++) {
        ir_region_kernels(&m, layer[i], PLAN_PASS_R, &full, &ar, &l);
        ir_region_kernels(&m, layer[i], PLAN_PASS_F, &full, &ar, &f);
        CU_ASSERT(l.n > 0);
        CU_ASSERT_EQUAL_FATAL(l.n, f.n);
        for (int k = 0; k < l.n; k++) {
            CU_ASSERT_STRING_EQUAL(l.k[k].name, f.k[k].name);
            CU_ASSERT_EQUAL(l.k[k].flops, f.k[k].flops);
            CU_ASSERT_EQUAL(l.k[k].bytes, f.k[k].bytes);
        }
    }
    /* embed and head are never recomputed */
    ir_region_kernels(&m, &em, PLAN_PASS_R, &full, &ar, &l);
    CU_ASSERT_EQUAL(l.n, 0);
    ir_region_kernels(&m, &hd, PLAN_PASS_R, &full, &ar, &l);
    CU_ASSERT_EQUAL(l.n, 0);

    ir_shape sel = shape(2, 2, false, IR_RECOMPUTE_SELECTIVE);
    ir_region_kernels(&m, &at, PLAN_PASS_R, &sel, &ar, &l);
    static const char *const core[] = {"attn_scores", "softmax", "attn_dropout", "attn_v"};
    names_equal(&l, core, 4);
    ir_region_kernels(&m, &ml, PLAN_PASS_R, &sel, &ar, &l);
    CU_ASSERT_EQUAL(l.n, 0);
    m.dropout = false;
    m.flash_attention = true;
    ir_region_kernels(&m, &at, PLAN_PASS_R, &sel, &ar, &l);
    static const char *const flash[] = {"flash_scores", "flash_softmax", "flash_attn_v"};
    names_equal(&l, flash, 3);
    /* flash runs the same GEMM FLOPs */
    CU_ASSERT_EQUAL(ir_kernels_gemm_flops(&l), 2 * (2.0 * 32 * 32 * 16 * (2 * 4 / 2)));
    /* AUX is the DAG's */
    ir_region_kernels(&m, &at, PLAN_PASS_AUX, &sel, &ar, &l);
    CU_ASSERT_EQUAL(l.n, 0);
    base_arena_free(&ar);
}

static void test_optimizer_kernel(void)
{
    ir_model m = gpt(2, 64, 4, 256, 32);
    base_arena ar;
    base_arena_init(&ar);
    ir_shape sh = shape(1, 2, false, IR_RECOMPUTE_NONE);
    ir_region at = reg(IR_REGION_ATTN, 0), hd = reg(IR_REGION_HEAD, -1);
    plan_kernel_list l;
    ir_region_kernels(&m, &at, PLAN_PASS_UPD, &sh, &ar, &l);
    CU_ASSERT_EQUAL_FATAL(l.n, 1);
    CU_ASSERT_EQUAL(l.k[0].kind, PLAN_KERNEL_MEM);
    /* bf16 grad read + bf16 param write + fp32 master/m/v read and written = 28 bytes each */
    double p = (double)ir_region_params_per_device(&m, &at, &sh);
    CU_ASSERT_EQUAL(p, (3.0 * 64 * 64 + 3 * 64 + 64 * 64) / 2 + 3 * 64);
    CU_ASSERT_EQUAL(l.k[0].bytes, 28.0 * p);
    CU_ASSERT_EQUAL(ir_region_flops(&m, &at, PLAN_PASS_UPD, &sh), 0.0); /* not a GEMM */
    ir_region_kernels(&m, &hd, PLAN_PASS_UPD, &sh, &ar, &l);
    CU_ASSERT_EQUAL_FATAL(l.n, 1);
    CU_ASSERT_EQUAL(l.k[0].bytes, 28.0 * 2 * 64); /* tied head: its LayerNorm only */
    /* fp32 gradients (grad_dtype: fp32, Megatron's main_grad): a 4-byte read, 30 bytes each */
    sh.grad_dtype = PLAN_FP32;
    ir_region_kernels(&m, &at, PLAN_PASS_UPD, &sh, &ar, &l);
    CU_ASSERT_EQUAL_FATAL(l.n, 1);
    CU_ASSERT_EQUAL(l.k[0].bytes, 30.0 * p);
    CU_ASSERT_EQUAL(l.k[0].flops, 12.0 * p);
    /* ZeRO >= 1 over 3 devices: the device steps its piece, ceil(8480 / 3) = 2827 parameters */
    CU_ASSERT_EQUAL(p, 8480);
    sh.opt_shards = 3;
    ir_region_kernels(&m, &at, PLAN_PASS_UPD, &sh, &ar, &l);
    CU_ASSERT_EQUAL_FATAL(l.n, 1);
    CU_ASSERT_EQUAL(l.k[0].bytes, 30.0 * 2827);
    CU_ASSERT_EQUAL(l.k[0].flops, 12.0 * 2827);
    sh.opt_shards = 1; /* 1 and 0 (a shape without the field set): the whole step */
    ir_region_kernels(&m, &at, PLAN_PASS_UPD, &sh, &ar, &l);
    CU_ASSERT_EQUAL(l.k[0].bytes, 30.0 * p);
    sh.opt_shards = 0;
    ir_region_kernels(&m, &at, PLAN_PASS_UPD, &sh, &ar, &l);
    CU_ASSERT_EQUAL(l.k[0].bytes, 30.0 * p);
    base_arena_free(&ar);
}

/* ---------------------------------------------------------------- activations */

static void test_activation_table(void)
{
    for (size_t i = 0; i < BASE_COUNT(MEGATRON); i++) {
        int64_t a = MEGATRON[i][0], h = MEGATRON[i][1], s = 2048;
        ir_model m = gpt(MEGATRON[i][2], h, a, 51200, s);
        for (int64_t b = 1; b <= 2; b++) {
            double sbh = (double)(s * b * h), as_h = (double)(a * s) / (double)h;
            ASSERT_REL(layer_act(&m, shape(b, 1, false, IR_RECOMPUTE_NONE)), sbh * (34 + 5 * as_h));
            /* the split per region */
            ir_shape one = shape(b, 1, false, IR_RECOMPUTE_NONE);
            ir_region at = reg(IR_REGION_ATTN, 0), ml = reg(IR_REGION_MLP, 0);
            ASSERT_REL(ir_region_activation_bytes(&m, &at, &one), sbh * (13 + 5 * as_h));
            ASSERT_REL(ir_region_activation_bytes(&m, &ml, &one), sbh * 21);
            for (int64_t t = 2; t <= 8; t *= 2) {
                double td = (double)t;
                ASSERT_REL(layer_act(&m, shape(b, t, false, IR_RECOMPUTE_NONE)),
                           sbh * (10 + 24 / td + 5 * as_h / td));
                ASSERT_REL(layer_act(&m, shape(b, t, true, IR_RECOMPUTE_NONE)),
                           sbh * (34 / td + 5 * as_h / td));
                ASSERT_REL(layer_act(&m, shape(b, t, false, IR_RECOMPUTE_SELECTIVE)),
                           sbh * (10 + 24 / td));
                ASSERT_REL(layer_act(&m, shape(b, t, true, IR_RECOMPUTE_SELECTIVE)), sbh * 34 / td);
                ASSERT_REL(layer_act(&m, shape(b, t, false, IR_RECOMPUTE_FULL)), 2 * sbh);
                ASSERT_REL(layer_act(&m, shape(b, t, true, IR_RECOMPUTE_FULL)), 2 * sbh / td);
            }
            ASSERT_REL(layer_act(&m, shape(b, 1, false, IR_RECOMPUTE_FULL)), 2 * sbh);
            /* under FULL a region that is not recomputed from the previous one keeps its input */
            ir_shape full = shape(b, 1, false, IR_RECOMPUTE_FULL);
            ASSERT_REL(ir_region_activation_bytes(&m, &ml, &full), 2 * sbh);
            full.recompute_from_prev = true;
            CU_ASSERT_EQUAL(ir_region_activation_bytes(&m, &ml, &full), 0.0);

            ir_model nd = m;
            nd.dropout = false;
            ASSERT_REL(layer_act(&nd, shape(b, 1, false, IR_RECOMPUTE_NONE)),
                       sbh * (32 + 2 * as_h));
            /* flash attention: the a*s^2 terms become the fp32 log-sum-exp, 4*a*s*b bytes */
            ir_model fl = m;
            fl.flash_attention = true;
            ASSERT_REL(layer_act(&fl, shape(b, 1, false, IR_RECOMPUTE_NONE)),
                       sbh * 34 + 4.0 * (double)(a * s * b));
            ASSERT_REL(layer_act(&fl, shape(b, 4, true, IR_RECOMPUTE_NONE)),
                       sbh * 34 / 4 + 4.0 * (double)(a * s * b) / 4);
        }
    }
}

static void test_llama_activations(void)
{
    /* Llama-2-70B layer, t = 8: 64/8 query heads, 8/8 kv heads of 128 */
    ir_model m = llama(80, 8192, 64, 8, 28672, 32000, 4096);
    const double s = 4096, b = 1, h = 8192, e = 2, qd = 1024, kvd = 128, f = 28672.0 / 8;
    ir_shape sh = shape(1, 8, false, IR_RECOMPUTE_NONE);
    ir_region at = reg(IR_REGION_ATTN, 0), ml = reg(IR_REGION_MLP, 0);
    /* norm input, QKV input (whole); Q, K, V, out-proj input (split); softmax output */
    ASSERT_REL(ir_region_activation_bytes(&m, &at, &sh),
               s * b * (2 * h * e + e * (2 * qd + 2 * kvd)) + b * 8 * s * s * e);
    /* norm input, gate/up input (whole); gate, up, down input (split) */
    ASSERT_REL(ir_region_activation_bytes(&m, &ml, &sh), s * b * (2 * h * e + 3 * f * e));
    sh.sequence_parallel = true;
    ASSERT_REL(ir_region_activation_bytes(&m, &ml, &sh), s * b * (2 * h * e / 8 + 3 * f * e));
    /* QK-norm keeps the normalised tensors' inputs too; flash keeps the lse */
    m.qk_norm = true;
    m.flash_attention = true;
    sh.sequence_parallel = false;
    ASSERT_REL(ir_region_activation_bytes(&m, &at, &sh),
               s * b * (2 * h * e + e * (3 * qd + 3 * kvd)) + 4 * b * 8 * s);
    /* GEMM FLOPs with GQA, one device of 8, times 8, are the whole layer's */
    ir_shape one = shape(1, 1, false, IR_RECOMPUTE_NONE),
             t8 = shape(1, 8, false, IR_RECOMPUTE_NONE);
    double F1 = layer_flops(&m, PLAN_PASS_F, &one);
    CU_ASSERT_EQUAL(layer_flops(&m, PLAN_PASS_F, &t8) * 8, F1);
    double Fexp = 2 * s * h * (h + 2 * 1024) + 4 * 64 * s * s * 128 + 2 * s * h * h +
                  2 * s * h * 2 * 28672 + 2 * s * 28672 * h;
    CU_ASSERT_EQUAL(F1, Fexp);
    CU_ASSERT_EQUAL(layer_flops(&m, PLAN_PASS_BW, &one),
                    2 * s * h * (h + 2 * 1024) + 2 * s * h * h + 6 * s * h * 28672);
}

static void test_output_bytes(void)
{
    ir_model m = gpt(2, 64, 4, 256, 32);
    ir_shape sh = shape(3, 4, false, IR_RECOMPUTE_NONE);
    ir_region at = reg(IR_REGION_ATTN, 0), ml = reg(IR_REGION_MLP, 0);
    ir_region em = reg(IR_REGION_EMBED, -1), hd = reg(IR_REGION_HEAD, -1);
    CU_ASSERT_EQUAL(ir_region_output_bytes(&m, &at, &sh), 3.0 * 32 * 64 * 2);
    CU_ASSERT_EQUAL(ir_region_output_bytes(&m, &em, &sh), 3.0 * 32 * 64 * 2);
    sh.sequence_parallel = true;
    CU_ASSERT_EQUAL(ir_region_output_bytes(&m, &ml, &sh), 3.0 * 32 * 64 * 2 / 4);
    CU_ASSERT_EQUAL(ir_region_output_bytes(&m, &hd, &sh), 4.0);
    sh.act_dtype = PLAN_FP32;
    CU_ASSERT_EQUAL(ir_region_output_bytes(&m, &ml, &sh), 3.0 * 32 * 64 * 4 / 4);
}

static void test_embed_head_activations(void)
{
    ir_model m = gpt(2, 64, 4, 256, 32);
    ir_region em = reg(IR_REGION_EMBED, -1), hd = reg(IR_REGION_HEAD, -1);
    for (int rc = IR_RECOMPUTE_NONE; rc <= IR_RECOMPUTE_FULL; rc++) {
        /* never recomputed: the same under every recompute mode */
        ir_shape sh = shape(2, 4, true, (ir_recompute)rc);
        /* token ids (int32) and the embedding dropout mask of the device's s/t tokens */
        CU_ASSERT_EQUAL(ir_region_activation_bytes(&m, &em, &sh), 4.0 * 64 + 64.0 / 4 * 64);
        /* final-norm and LM-head inputs (s/t tokens under SP), fp32 probabilities of V/t */
        CU_ASSERT_EQUAL(ir_region_activation_bytes(&m, &hd, &sh),
                        64.0 / 4 * 2 * 64 * 2 + 64.0 * 64 * 4);
    }
}

/* ---------------------------------------------------------------- MoE */

static ir_model moe_tiny(void)
{
    ir_model m = llama(4, 64, 4, 2, 128, 256, 32);
    m.experts = 4;
    m.top_k = 2;
    m.expert_ffn = 64;
    m.capacity_factor = 1.25;
    m.moe_first = 1;
    m.moe_every = 2;
    m.aux_loss_coef = 0.01;
    m.qk_norm = true;
    return m;
}

static void test_moe_capacity(void)
{
    ir_model m = moe_tiny();
    ir_shape sh = shape(2, 1, false, IR_RECOMPUTE_NONE);
    /* 1.25 * 2 sequences * 32 tokens * top-2 / 4 experts = 40 */
    ASSERT_INT(ir_moe_capacity(&m, &sh), 40);
    /* 1.1 * 100 * 2 / 8 = 27.5 -> 28; 1.1 * 1000 / 11 = 100 (100.00000000000001 in doubles) */
    ir_model x = moe_tiny();
    x.seq = 100;
    x.experts = 8;
    x.capacity_factor = 1.1;
    sh.micro_batch = 1;
    ASSERT_INT(ir_moe_capacity(&x, &sh), 28);
    x.seq = 1000;
    x.experts = 11;
    x.top_k = 1;
    ASSERT_INT(ir_moe_capacity(&x, &sh), 100);
    ir_model dense = llama(2, 64, 4, 4, 128, 256, 32);
    ASSERT_INT(ir_moe_capacity(&dense, &sh), 0);
}

static void test_moe_costs(void)
{
    ir_model m = moe_tiny();
    base_arena ar;
    base_arena_init(&ar);
    /* b = 2, ep = 2: C = 40; each device holds 2 experts, each receiving 40 tokens from each of
     * the 2 sources; the dispatched buffer is 4 * 40 = 160 tokens of 64 */
    ir_shape sh = shape(2, 1, false, IR_RECOMPUTE_NONE);
    sh.ep = 2;
    ir_region g = reg(IR_REGION_MOE_GATE, 1), x = reg(IR_REGION_MOE_EXPERTS, 1);
    ir_region c = reg(IR_REGION_MOE_COMBINE, 1);
    plan_kernel_list l;
    ir_region_kernels(&m, &x, PLAN_PASS_F, &sh, &ar, &l);
    assert_gemm(&l, "expert_gate_up", 80, 128, 64, 2);
    assert_gemm(&l, "expert_down", 80, 64, 64, 2);
    CU_ASSERT_EQUAL(ir_region_flops(&m, &x, PLAN_PASS_F, &sh),
                    2.0 * (2 * 80 * 128 * 64 + 2 * 80 * 64 * 64));
    ir_region_kernels(&m, &x, PLAN_PASS_BW, &sh, &ar, &l);
    assert_gemm(&l, "expert_gate_up_dw", 64, 128, 80, 2);
    assert_gemm(&l, "expert_down_dw", 64, 64, 80, 2);
    ir_region_kernels(&m, &g, PLAN_PASS_F, &sh, &ar, &l);
    assert_gemm(&l, "router", 64, 4, 64, 1); /* b*s tokens x E experts, k = hidden */
    CU_ASSERT_PTR_NOT_NULL(find(&l, "dispatch_permute"));
    CU_ASSERT_PTR_NOT_NULL(find(&l, "aux_loss"));
    ir_region_kernels(&m, &c, PLAN_PASS_F, &sh, &ar, &l);
    CU_ASSERT_EQUAL(ir_kernels_gemm_flops(&l), 0.0);
    CU_ASSERT_PTR_NOT_NULL(find(&l, "combine_unpermute"));

    /* the tensors crossing gate -> experts -> combine: E * C * h * 2 bytes */
    CU_ASSERT_EQUAL(ir_region_output_bytes(&m, &g, &sh), 160.0 * 64 * 2);
    CU_ASSERT_EQUAL(ir_region_output_bytes(&m, &x, &sh), 160.0 * 64 * 2);
    CU_ASSERT_EQUAL(ir_region_output_bytes(&m, &c, &sh), 64.0 * 64 * 2);

    /* parameters: router h*E (+ RMSNorm h); experts E*3*h*ef, E/ep per device */
    ASSERT_INT(ir_region_params(&m, &g), 64 * 4 + 64);
    ASSERT_INT(ir_region_params(&m, &x), 4 * 3 * 64 * 64);
    ASSERT_INT(ir_region_params_per_device(&m, &x, &sh), 2 * 3 * 64 * 64);
    ASSERT_INT(ir_region_params(&m, &c), 0);

    /* activations: experts keep input + gate, up, down input for 160 tokens */
    CU_ASSERT_EQUAL(ir_region_activation_bytes(&m, &x, &sh), 160.0 * 2 * (64 + 3 * 64));
    /* gate: norm and router input (bf16), fp32 probabilities over 4 experts, top-2 indices */
    CU_ASSERT_EQUAL(ir_region_activation_bytes(&m, &g, &sh), 64.0 * (2 * 64 * 2 + 4 * 4 + 2 * 4));
    /* combine: the expert outputs, the fp32 routing weights and the int32 slot of each of the
     * 64 tokens' 2 choices (the unpermute's index map) */
    CU_ASSERT_EQUAL(ir_region_activation_bytes(&m, &c, &sh), 160.0 * 64 * 2 + 64.0 * 2 * (4 + 4));
    /* probabilities and weights stay fp32 over bf16 activations and follow fp64 ones */
    ir_shape wide = sh;
    wide.act_dtype = PLAN_FP64;
    CU_ASSERT_EQUAL(ir_region_activation_bytes(&m, &c, &wide), 160.0 * 64 * 8 + 64.0 * 2 * (8 + 4));
    CU_ASSERT_EQUAL(ir_region_activation_bytes(&m, &g, &wide), 64.0 * (2 * 64 * 8 + 4 * 8 + 2 * 4));
    /* a fully recomputed MoE layer keeps its input only */
    ir_shape full = sh;
    full.recompute = IR_RECOMPUTE_FULL;
    ir_region at = reg(IR_REGION_ATTN, 1);
    double kept = ir_region_activation_bytes(&m, &at, &full);
    full.recompute_from_prev = true;
    kept += ir_region_activation_bytes(&m, &g, &full) + ir_region_activation_bytes(&m, &x, &full) +
            ir_region_activation_bytes(&m, &c, &full);
    CU_ASSERT_EQUAL(kept, 2.0 * 32 * 64 * 2);

    /* whole-model parameters: 2 dense + 2 MoE layers, untied embeddings */
    int64_t attn = 64 + 64 * 64 + 2 * 64 * 32 + 64 * 64 + 2 * 16;
    int64_t dense = 64 + 3 * 64 * 128, moe = 64 + 64 * 4 + 4 * 3 * 64 * 64;
    ASSERT_INT(ir_model_params(&m), 256 * 64 + 4 * attn + 2 * dense + 2 * moe + 64 + 256 * 64);

    /* step FLOPs: experts see E*C tokens, so they count capacity (padding) FLOPs */
    ir_shape one = shape(2, 1, false, IR_RECOMPUTE_NONE);
    double step = ir_model_step_flops(&m, &one, 8);
    double per_mb = 0;
    int n = ir_model_nregions(&m);
    ir_region *r = base_arena_calloc(&ar, (size_t)n, sizeof *r);
    ir_model_regions(&m, &ar, r);
    for (int i = 0; i < n; i++)
        per_mb += ir_region_flops(&m, &r[i], PLAN_PASS_F, &one) +
                  ir_region_flops(&m, &r[i], PLAN_PASS_B, &one);
    ASSERT_REL(step, 4 * per_mb);
    base_arena_free(&ar);
}

/* ---------------------------------------------------------------- loading */

static int load_text(const char *text, base_arena *a, ir_model *m, base_error *e)
{
    ir_doc *d;
    base_error_clear(e);
    if (ir_doc_parse(a, "m.yaml", text, strlen(text), &d, e)) return -1;
    return ir_model_from_doc(d, a, m, e);
}

static void test_load_defaults(void)
{
    base_arena a;
    base_arena_init(&a);
    base_error e;
    ir_model m;
    int rc = load_text("family: gpt\nlayers: 2\nhidden: 64\nheads: 4\nvocab: 256\nseq: 32\n", &a,
                       &m, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_STRING_EQUAL(m.name, "m");
    CU_ASSERT_STRING_EQUAL(m.file, "m.yaml");
    CU_ASSERT_EQUAL(m.kv_heads, 4);
    CU_ASSERT_EQUAL(m.head_dim, 16);
    CU_ASSERT_EQUAL(m.ffn, 256);
    CU_ASSERT_TRUE(m.tied_embeddings);
    CU_ASSERT_TRUE(m.learned_positions);
    CU_ASSERT_FALSE(m.dropout);
    CU_ASSERT_EQUAL(m.experts, 0);

    rc = load_text("name: q\nfamily: qwen3\nlayers: 2\nhidden: 64\nheads: 4\nkv_heads: 2\nffn: 96\n"
                   "vocab: 256\nseq: 32\nexperts: 4\ntop_k: 2\nqk_norm: true\n",
                   &a, &m, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_STRING_EQUAL(m.name, "q");
    CU_ASSERT_EQUAL(m.family, IR_FAMILY_LLAMA);
    CU_ASSERT_FALSE(m.tied_embeddings);
    CU_ASSERT_FALSE(m.learned_positions);
    CU_ASSERT_EQUAL(m.expert_ffn, 96);
    CU_ASSERT_EQUAL(m.capacity_factor, 1.0);
    CU_ASSERT_EQUAL(m.moe_every, 1);
    CU_ASSERT_EQUAL(m.moe_first, 0);
    CU_ASSERT_TRUE(m.qk_norm);

    /* JSON loads the same way */
    rc = load_text(
        "{\"family\": \"llama\", \"layers\": 1, \"hidden\": 32, \"heads\": 2, \"ffn\": 64, "
        "\"vocab\": 100, \"seq\": 8, \"tied_embeddings\": true}",
        &a, &m, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_TRUE(m.tied_embeddings);
    base_arena_free(&a);
}

static void expect_error(const char *text, const char *where, const char *what)
{
    base_arena a;
    base_arena_init(&a);
    base_error e;
    ir_model m;
    CU_ASSERT_EQUAL(load_text(text, &a, &m, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, where);
    TEST_ASSERT_CONTAINS(e.msg, what);
    base_arena_free(&a);
}

#define GPT_BASE "family: gpt\nlayers: 2\nhidden: 64\nheads: 4\nvocab: 256\nseq: 32\n"
#define LLAMA_BASE "family: llama\nlayers: 2\nhidden: 64\nheads: 4\nffn: 128\nvocab: 256\nseq: 32\n"

static void test_load_errors(void)
{
    expect_error(GPT_BASE "layer: 3\n",
                 "m.yaml:7:1:", "unknown key 'layer' in model; did you mean 'layers'?");
    expect_error("family: bert\nlayers: 2\n",
                 "m.yaml:1:9:", "unknown model family 'bert'; use gpt, llama or qwen3");
    expect_error("layers: 2\n", "m.yaml:1:1:", "model is missing 'family'; add family: gpt");
    expect_error("family: gpt\nhidden: 64\nheads: 4\nvocab: 256\nseq: 32\n", "m.yaml:1:1:",
                 "model is missing 'layers'; add layers: <number of transformer layers>");
    expect_error("family: gpt\nlayers: 0\nhidden: 64\nheads: 4\nvocab: 256\nseq: 32\n",
                 "m.yaml:2:9:",
                 "'layers' is 0, out of range; use 1..100000 (the number of transformer layers)");
    expect_error("family: gpt\nlayers: two\nhidden: 64\nheads: 4\nvocab: 256\nseq: 32\n",
                 "m.yaml:2:9:", "expected an integer for 'layers'");
    expect_error(GPT_BASE "kv_heads: 3\n",
                 "m.yaml:7:11:", "kv_heads (3) does not divide heads (4)");
    expect_error("family: gpt\nlayers: 2\nhidden: 60\nheads: 8\nvocab: 256\nseq: 32\n",
                 "m.yaml:4:8:",
                 "hidden (60) is not divisible by heads (8); choose heads that divide hidden, or "
                 "set head_dim");
    expect_error("family: llama\nlayers: 2\nhidden: 64\nheads: 4\nvocab: 256\nseq: 32\n",
                 "m.yaml:1:1:", "llama-family model is missing 'ffn'");
    expect_error(LLAMA_BASE "dropout: true\n",
                 "m.yaml:8:10:", "dropout is modelled for family gpt only");
    expect_error(LLAMA_BASE "learned_positions: true\n",
                 "m.yaml:8:", "llama-family models use rotary positions; remove learned_positions");
    expect_error(GPT_BASE "qk_norm: true\n", "m.yaml:7:", "qk_norm is a llama/qwen3 option");
    expect_error(GPT_BASE "experts: 4\ntop_k: 1\n",
                 "m.yaml:7:10:", "MoE layers are modelled for family llama/qwen3");
    expect_error(LLAMA_BASE "experts: 4\n",
                 "m.yaml:1:1:", "MoE model (experts: 4) is missing 'top_k'");
    expect_error(LLAMA_BASE "experts: 4\ntop_k: 5\n", "m.yaml:9:8:",
                 "'top_k' is 5, out of range; use 1..4 (the experts each token is routed to)");
    expect_error(LLAMA_BASE "experts: 4\ntop_k: 2\ncapacity_factor: 0\n",
                 "m.yaml:10:18:", "capacity_factor 0 is out of range");
    expect_error(LLAMA_BASE "experts: 4\ntop_k: 2\nmoe_first: 2\n", "m.yaml:10:12:",
                 "'moe_first' is 2, out of range; use 0..1 (the first MoE layer, 0-based)");
    expect_error(LLAMA_BASE "experts: -1\n", "m.yaml:8:10:", "'experts' is -1, out of range");
    expect_error(GPT_BASE "dropout: maybe\n",
                 "m.yaml:7:10:", "expected true or false for 'dropout'");
    expect_error("- 1\n- 2\n", "m.yaml:1:1:", "a model must be a map of keys");
    expect_error(GPT_BASE "hidden: 64\n",
                 "m.yaml:7:1:", "duplicate key 'hidden'"); /* the doc's error */

    /* a file that is not there */
    {
        base_arena a0;
        base_arena_init(&a0);
        base_error e0;
        base_error_clear(&e0);
        ir_model m0;
        CU_ASSERT_EQUAL(ir_model_load("/nonexistent/model.yaml", &a0, &m0, &e0), -1);
        TEST_ASSERT_CONTAINS(e0.msg, "/nonexistent/model.yaml");
        base_arena_free(&a0);
    }

    /* a dense model with MoE keys loads, with a warning for each */
    base_arena a;
    base_arena_init(&a);
    base_error e;
    ir_model m;
    CU_ASSERT_EQUAL(load_text(GPT_BASE "top_k: 2\n", &a, &m, &e), 0);
    CU_ASSERT_EQUAL(e.nwarn, 1);
    TEST_ASSERT_CONTAINS(e.warnings, "m.yaml:7:8: 'top_k' has no effect on a dense model");
    base_arena_free(&a);
}

static void test_validate_errors(void)
{
    base_error e;
    ir_model m = gpt(2, 64, 4, 256, 32);
    m.name = "x";
    m.file = "x.yaml";
    base_error_clear(&e);
    CU_ASSERT_EQUAL(ir_model_validate(&m, &e), 0);
    m.kv_heads = 3;
    CU_ASSERT_EQUAL(ir_model_validate(&m, &e), -1);
    CU_ASSERT_STRING_EQUAL(e.msg,
                           "x.yaml: model 'x': kv_heads (3) does not divide heads (4); use a "
                           "divisor of heads (grouped-query attention shares each key/value "
                           "head among equally many query heads)");
    m.kv_heads = 4;
    m.seq = 0;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(ir_model_validate(&m, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "'seq' is 0, out of range; use 1..16777216 (the sequence length)");
    m.seq = 32;
    m.layers = 1000;
    m.hidden = 1 << 20;
    m.heads = 1024;
    m.kv_heads = 1024;
    m.head_dim = 1024;
    m.ffn = 1 << 22;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(ir_model_validate(&m, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "parameters, more than piper models");

    /* shapes */
    m = gpt(2, 64, 4, 256, 32);
    ir_shape s = shape(1, 3, false, IR_RECOMPUTE_NONE);
    base_error_clear(&e);
    CU_ASSERT_EQUAL(ir_shape_validate(&m, &s, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "tensor parallelism 3 does not divide heads (4)");
    s.tp = 4;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(ir_shape_validate(&m, &s, &e), 0);
    m.vocab = 250;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(ir_shape_validate(&m, &s, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "does not divide vocab (250); pad the vocabulary");
    m.vocab = 256;
    m.seq = 30;
    s.tp = 4;
    s.sequence_parallel = true;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(ir_shape_validate(&m, &s, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "sequence parallelism splits seq (30) over tp 4");
    s = shape(1 << 30, 1, false, IR_RECOMPUTE_NONE);
    base_error_clear(&e);
    CU_ASSERT_EQUAL(ir_shape_validate(&m, &s, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "micro-batch size 1073741824 is out of range");
    m.heads = 65536;
    m.kv_heads = 65536;
    s = shape(1 << 16, 1, false, IR_RECOMPUTE_NONE);
    base_error_clear(&e);
    CU_ASSERT_EQUAL(ir_shape_validate(&m, &s, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "too many attention launches; use a smaller micro-batch");
    m = gpt(2, 64, 4, 256, 32);
    ir_model x = moe_tiny();
    s = shape(1, 1, false, IR_RECOMPUTE_NONE);
    s.ep = 3;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(ir_shape_validate(&x, &s, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "expert parallelism 3 does not divide experts (4)");
    /* kv heads and tp must divide one another */
    ir_model l = llama(2, 96, 12, 6, 96, 96, 8);
    s = shape(1, 4, false, IR_RECOMPUTE_NONE);
    base_error_clear(&e);
    CU_ASSERT_EQUAL(ir_shape_validate(&l, &s, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "kv_heads (6) must divide one another");
}

/* ---------------------------------------------------------------- the zoo */

static void test_config_files(void)
{
    static const char *const expected[] = {
        "gpt_1.7b",  "gpt_3.6b", "gpt_7.5b",  "gpt_18.4b", "gpt_39.1b", "gpt_76.1b", "gpt_145.6b",
        "gpt3_175b", "llama_7b", "llama_70b", "qwen3_1b",  "qwen3_9b",  "gpt_tiny",  "moe_tiny"};
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", test_src_path("configs/models"));
    DIR *dp = opendir(dir);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dp);
    int found = 0, loaded = 0;
    struct dirent *de;
    while ((de = readdir(dp))) {
        size_t n = strlen(de->d_name);
        if (n < 6 || strcmp(de->d_name + n - 5, ".yaml")) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        base_arena a;
        base_arena_init(&a);
        base_error e;
        base_error_clear(&e);
        ir_model m;
        int rc = ir_model_load(path, &a, &m, &e);
        if (rc) fprintf(stderr, "\n  %s\n", e.msg);
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT_EQUAL(e.nwarn, 0);
        if (rc == 0) {
            loaded++;
            CU_ASSERT_EQUAL(ir_model_validate(&m, &e), 0);
            ir_shape s = ir_shape_default();
            CU_ASSERT_EQUAL(ir_shape_validate(&m, &s, &e), 0);
            /* the file's name is the model's name */
            CU_ASSERT(strncmp(de->d_name, m.name, strlen(m.name)) == 0 &&
                      de->d_name[strlen(m.name)] == '.');
            for (size_t i = 0; i < BASE_COUNT(expected); i++)
                if (!strcmp(m.name, expected[i])) found++;
            /* gpt_<billions>b and gpt3_<billions>b: the count rounds to the name's digits */
            const char *us = strrchr(m.name, '_');
            double billions = us ? strtod(us + 1, NULL) : 0;
            double p = (double)ir_model_params(&m) / 1e9;
            if (!strncmp(m.name, "gpt", 3) && billions > 0) {
                const char *dot = strchr(us, '.');
                double half = dot ? 0.05 : 0.5;
                if (fabs(p - billions) > half) fprintf(stderr, "\n  %s: %.3f billion\n", m.name, p);
                CU_ASSERT(fabs(p - billions) <= half);
            }
            if (!strcmp(m.name, "llama_7b")) ASSERT_INT(ir_model_params(&m), 6738415616LL);
            if (!strcmp(m.name, "llama_70b")) ASSERT_INT(ir_model_params(&m), 68976648192LL);
            if (!strcmp(m.name, "gpt_1.7b")) {
                CU_ASSERT_EQUAL(m.heads, 24);
                CU_ASSERT_EQUAL(m.hidden, 2304);
                CU_ASSERT_EQUAL(m.layers, 24);
                CU_ASSERT_TRUE(m.dropout);
                CU_ASSERT_EQUAL(m.ffn, 4 * 2304);
            }
            if (!strcmp(m.name, "qwen3_1b")) {
                CU_ASSERT_EQUAL(m.experts, 4);
                CU_ASSERT_EQUAL(m.kv_heads, 8);
                CU_ASSERT_EQUAL(ir_model_nregions(&m), 2 + 16 * 4);
                CU_ASSERT(fabs(p - 1.0) < 0.1);
            }
            if (!strcmp(m.name, "qwen3_9b")) CU_ASSERT(fabs(p - 9.0) < 0.5);
            if (!strcmp(m.name, "moe_tiny")) {
                CU_ASSERT_EQUAL(ir_model_nregions(&m), 14);
                ir_model t = moe_tiny();
                ASSERT_INT(ir_model_params(&m), ir_model_params(&t));
            }
        }
        base_arena_free(&a);
    }
    closedir(dp);
    CU_ASSERT_EQUAL(found, (int)BASE_COUNT(expected));
    CU_ASSERT(loaded >= (int)BASE_COUNT(expected));
}

int piper_tests_register(void)
{
    static const test_case cases[] = {
        {"regions", test_regions},
        {"GPT parameters, Megatron shapes", test_gpt_params_megatron},
        {"GPT parameters per device under TP", test_gpt_params_tp},
        {"Llama-2 parameters", test_llama_params},
        {"GPT per-layer F/BI/BW FLOPs and LM head", test_gpt_layer_flops},
        {"per-iteration FLOPs, with and without recompute", test_iteration_flops},
        {"region FLOPs count GEMMs only", test_gemm_only_flops},
        {"GPT kernel shapes", test_gpt_kernel_shapes},
        {"recompute kernels", test_recompute_kernels},
        {"optimizer kernel", test_optimizer_kernel},
        {"activation table (Korthikanti et al.)", test_activation_table},
        {"Llama activations and GQA FLOPs", test_llama_activations},
        {"boundary tensor bytes", test_output_bytes},
        {"embed and head activations", test_embed_head_activations},
        {"MoE capacity", test_moe_capacity},
        {"MoE costs", test_moe_costs},
        {"loading: defaults", test_load_defaults},
        {"loading: errors", test_load_errors},
        {"validation errors", test_validate_errors},
        {"config files", test_config_files},
        {NULL, NULL}};
    return test_add_suite("model", cases);
}
