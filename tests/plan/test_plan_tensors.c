/* test_plan_tensors.c — plan/plan_tensors.h's table against closed forms: at 16 bits a GPT
 * layer's attention and MLP keep Korthikanti et al. 2022's per-layer activations (34 + 5as/h)
 * sbh with dropout, split as the project splits them (the attention with its pre-norm input,
 * 13 + 5as/h; the MLP with its own, 21), under tensor and sequence parallelism and selective
 * recompute (formulas.md); the workspaces' closed forms; and the CPU kernels' buffers, carved by
 * walking the table at 4-byte elements, against the same table's plain sum and closed forms. */
#include <stdint.h>
#include <string.h>

#include "exec/cpu/kernels.h"
#include "plan/plan.h"
#include "tests/testutil.h"

/* A GPT layer on a shard of t (sp: sequence parallelism): b sequences of s tokens, hidden h, a
 * heads, FFN 4h. */
static plan_tensor_dims gpt_dims(int64_t b, int64_t s, int64_t h, int64_t a, int64_t t, bool sp,
                                 unsigned flags)
{
    plan_tensor_dims d;
    memset(&d, 0, sizeof d);
    d.tokens = b * s;
    d.kept = sp ? b * s / t : b * s;
    d.batch = b;
    d.seq = s;
    d.hidden = h;
    d.head_dim = h / a;
    d.heads = a / t;
    d.kv_heads = a / t;
    d.ffn = 4 * h / t;
    d.flags = PLAN_TF_GPT | flags;
    return d;
}

/* The bytes of a region's uses in `uses` (one bit per plan_tuse), elements of e bytes (w =
 * max(e, 4)), packed (align 1) or each at a multiple of its size (align 0). */
static int64_t bytes_of(plan_tregion r, const plan_tensor_dims *d, int64_t e, unsigned uses,
                        int64_t align)
{
    plan_tensor_rule rule = {{e, e > 4 ? e : 4, 1, 4}, align, {0}};
    for (int u = 0; u < PLAN_NTUSES; u++) rule.part[u] = uses >> u & 1 ? 0 : -1;
    plan_tensor_layout L;
    plan_tensor_walk(r, d, &rule, &L);
    return L.bytes[0];
}

#define KEPT_ALL (1u << PLAN_TUSE_INPUT | 1u << PLAN_TUSE_CORE | 1u << PLAN_TUSE_KEPT)
#define SELECTIVE (1u << PLAN_TUSE_INPUT | 1u << PLAN_TUSE_KEPT)
#define WORK_F (1u << PLAN_TUSE_WORK_F)
#define WORK_ALL (1u << PLAN_TUSE_WORK_F | 1u << PLAN_TUSE_WORK_B)

static const int64_t shapes[][4] = {{1, 2048, 4096, 32}, {4, 1024, 2560, 20}, {2, 512, 768, 12}};

static void test_korthikanti_16bit(void)
{
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t b = shapes[i][0], s = shapes[i][1], h = shapes[i][2], a = shapes[i][3];
        const int64_t sbh = s * b * h, as2b = a * s * s * b; /* 5as/h * sbh = 5 * as2b */
        plan_tensor_dims d = gpt_dims(b, s, h, a, 1, false, PLAN_TF_DROPOUT);
        int64_t attn = bytes_of(PLAN_TR_ATTN, &d, 2, KEPT_ALL, 1);
        int64_t mlp = bytes_of(PLAN_TR_MLP, &d, 2, KEPT_ALL, 1);
        CU_ASSERT_EQUAL(attn, 13 * sbh + 5 * as2b);
        CU_ASSERT_EQUAL(mlp, 21 * sbh);
        CU_ASSERT_EQUAL(attn + mlp, 34 * sbh + 5 * as2b);
        /* packed and element-aligned layouts agree: the rows come in an order that never pads */
        CU_ASSERT_EQUAL(bytes_of(PLAN_TR_ATTN, &d, 2, KEPT_ALL, 0), attn);
        /* selective recompute keeps 34 sbh (Korthikanti's table 2) */
        CU_ASSERT_EQUAL(bytes_of(PLAN_TR_ATTN, &d, 2, SELECTIVE, 1) + mlp, 34 * sbh);
        /* without dropout: no masks, no dropped probabilities: (32 + 2as/h) sbh */
        plan_tensor_dims nd = gpt_dims(b, s, h, a, 1, false, 0);
        CU_ASSERT_EQUAL(bytes_of(PLAN_TR_ATTN, &nd, 2, KEPT_ALL, 1) +
                            bytes_of(PLAN_TR_MLP, &nd, 2, KEPT_ALL, 1),
                        32 * sbh + 2 * as2b);
        /* flash attention keeps each row's fp32 log-sum-exp for the s x s core */
        plan_tensor_dims fd = gpt_dims(b, s, h, a, 1, false, PLAN_TF_DROPOUT | PLAN_TF_FLASH);
        CU_ASSERT_EQUAL(bytes_of(PLAN_TR_ATTN, &fd, 2, KEPT_ALL, 1), 13 * sbh + 4 * a * s * b);
        /* tensor parallelism t: (10 + 24/t + 5as/(ht)) sbh; with sequence parallelism all /t */
        for (int64_t t = 2; t <= 8; t *= 2) {
            if (a % t) continue; /* t divides the heads */
            plan_tensor_dims td = gpt_dims(b, s, h, a, t, false, PLAN_TF_DROPOUT);
            CU_ASSERT_EQUAL(bytes_of(PLAN_TR_ATTN, &td, 2, KEPT_ALL, 1) +
                                bytes_of(PLAN_TR_MLP, &td, 2, KEPT_ALL, 1),
                            10 * sbh + 24 * sbh / t + 5 * as2b / t);
            plan_tensor_dims sd = gpt_dims(b, s, h, a, t, true, PLAN_TF_DROPOUT);
            CU_ASSERT_EQUAL(bytes_of(PLAN_TR_ATTN, &sd, 2, KEPT_ALL, 1) +
                                bytes_of(PLAN_TR_MLP, &sd, 2, KEPT_ALL, 1),
                            34 * sbh / t + 5 * as2b / t);
        }
    }
}

/* Workspaces at bf16 (w = 4): attention F: mean and rstd, 2T*4; B adds one s x s block (or D,
 * T*a*4, with flash attention), dO, the dropped dy, dQ, dK, dV (5 T*h*2 at t = 1 without GQA)
 * and the norm-output gradient T*h*4. GPT's MLP: F 2T*4; B: dy T*h*2, dh1 T*4h*2, dxn T*h*4. */
static void test_workspaces(void)
{
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t b = shapes[i][0], s = shapes[i][1], h = shapes[i][2], a = shapes[i][3];
        const int64_t T = b * s;
        plan_tensor_dims d = gpt_dims(b, s, h, a, 1, false, PLAN_TF_DROPOUT);
        CU_ASSERT_EQUAL(bytes_of(PLAN_TR_ATTN, &d, 2, WORK_F, 0), 8 * T);
        CU_ASSERT_EQUAL(bytes_of(PLAN_TR_ATTN, &d, 2, WORK_ALL, 0),
                        8 * T + 2 * s * s + 5 * 2 * T * h + 4 * T * h);
        d.flags |= PLAN_TF_FLASH;
        CU_ASSERT_EQUAL(bytes_of(PLAN_TR_ATTN, &d, 2, WORK_ALL, 0),
                        8 * T + 4 * T * a + 5 * 2 * T * h + 4 * T * h);
        CU_ASSERT_EQUAL(bytes_of(PLAN_TR_MLP, &d, 2, WORK_F, 0), 8 * T);
        CU_ASSERT_EQUAL(bytes_of(PLAN_TR_MLP, &d, 2, WORK_ALL, 0),
                        8 * T + 2 * T * h + 2 * T * 4 * h + 4 * T * h);
    }
    /* a piece of odd size pads the next one: the gate's dz, 9 bf16 elements, ends at 54 and its
     * fp32 norm-output gradient starts at 56 */
    plan_tensor_dims d;
    memset(&d, 0, sizeof d);
    d.tokens = 3;
    d.experts = 3;
    d.top_k = 1;
    d.hidden = 1;
    CU_ASSERT_EQUAL(bytes_of(PLAN_TR_MOE_GATE, &d, 2, WORK_F, 0), 36);
    CU_ASSERT_EQUAL(bytes_of(PLAN_TR_MOE_GATE, &d, 2, WORK_ALL, 0), 56 + 12);
}

/* Every row names its region, a use and an element class, and each region's rows are
 * contiguous (a walk reads them in the table's order). */
static void test_rows(void)
{
    int last = -1;
    bool seen[PLAN_NTREGIONS] = {false};
    for (int t = 0; t < PLAN_NTENSORS; t++) {
        const plan_tensor_row *r = plan_tensor_row_of((plan_tensor)t);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        CU_ASSERT_PTR_NOT_NULL(plan_tregion_name(r->region));
        CU_ASSERT_PTR_NOT_NULL(plan_tuse_name(r->use));
        CU_ASSERT_PTR_NOT_NULL(plan_telem_name(r->elem));
        CU_ASSERT_EQUAL(r->needs & r->excludes, 0u);
        if ((int)r->region != last) {
            CU_ASSERT_FALSE(seen[r->region]);
            seen[r->region] = true;
            last = (int)r->region;
        }
    }
    CU_ASSERT_PTR_NULL(plan_tensor_row_of(PLAN_NTENSORS));
    CU_ASSERT_STRING_EQUAL(plan_tensor_row_of(PLAN_T_ATTN_PROBS)->name, "ATTN.PROBS");
}

/* The CPU kernels' act and work buffers at fp32: their size is the table's plain sum at 4-byte
 * elements, and, for a GPT layer with dropout, the closed forms (25 + 9as/h) sbh (attention:
 * 6 tensors of 4 bytes a hidden element, the output mask, probabilities and dropped
 * probabilities at 4 bytes and their 1-byte mask) and 41 sbh (MLP: norm input and output, fc1
 * and GELU outputs of 4h, the mask). */
static void test_cpu_carvers(void)
{
    exec_cfg c;
    memset(&c, 0, sizeof c);
    c.gpt = true;
    c.layers = 1;
    c.b = 2;
    c.s = 16;
    c.h = 64;
    c.heads = 4;
    c.kv_heads = 4;
    c.head_dim = 16;
    c.ffn = 256;
    c.vocab = 128;
    c.dropout = 0.1;
    c.learned_pos = true;
    base_error e = {0};
    for (int t = 1; t <= 2; t++) {
        exec_shard sh;
        CU_ASSERT_EQUAL_FATAL(exec_shard_init(&c, t, 0, 1, 0, &sh, &e), 0);
        for (int sp = 0; sp <= (t > 1); sp++) {
            CU_ASSERT_EQUAL_FATAL(exec_shard_set_sp(&c, &sh, sp, &e), 0);
            plan_tensor_dims d = gpt_dims(c.b, c.s, c.h, c.heads, t, sp, PLAN_TF_DROPOUT);
            static const struct {
                exec_region_kind k;
                plan_tregion r;
            } kinds[] = {{EXEC_EMBED, PLAN_TR_EMBED}, {EXEC_ATTN, PLAN_TR_ATTN},
                         {EXEC_MLP, PLAN_TR_MLP}, {EXEC_HEAD, PLAN_TR_HEAD}};
            d.vocab = c.vocab / t;
            for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
                exec_region_sizes sz;
                CU_ASSERT_EQUAL_FATAL(exec_region_sizes_get(&c, &sh, kinds[i].k, PLAN_FP32, &sz, &e), 0);
                CU_ASSERT_EQUAL(sz.act_bytes, bytes_of(kinds[i].r, &d, 4, KEPT_ALL, 1));
                CU_ASSERT_EQUAL(sz.work_bytes, bytes_of(kinds[i].r, &d, 4, WORK_ALL, 1));
                CU_ASSERT_EQUAL(sz.work_f_bytes, bytes_of(kinds[i].r, &d, 4, WORK_F, 1));
            }
            if (t == 1) {
                const int64_t sbh = c.s * c.b * c.h, as2b = c.heads * c.s * c.s * c.b;
                exec_region_sizes at, ml;
                exec_region_sizes_get(&c, &sh, EXEC_ATTN, PLAN_FP32, &at, &e);
                exec_region_sizes_get(&c, &sh, EXEC_MLP, PLAN_FP32, &ml, &e);
                CU_ASSERT_EQUAL(at.act_bytes, 25 * sbh + 9 * as2b);
                CU_ASSERT_EQUAL(ml.act_bytes, 41 * sbh);
            }
        }
    }
}

int piper_tests_register(void)
{
    static const test_case cases[] = {
        {"the table's rows", test_rows},
        {"GPT layer activations: Korthikanti et al.", test_korthikanti_16bit},
        {"workspaces and their alignment", test_workspaces},
        {"the CPU kernels carve the table", test_cpu_carvers},
        {NULL, NULL},
    };
    return test_add_suite("plan_tensors", cases);
}
