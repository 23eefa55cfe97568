/* test_compile.c — the compiler end to end: program file -> sched_compile -> per-device plans ->
 * the static check's statistics, held to facts with known answers: the ZeRO memory table of
 * formulas.md, exact counts of gradient buckets, pipeline sends and tensor-parallel collectives,
 * activation memory of 1F1B and GPipe, golden plan files, the DAG's own invariants, and every
 * error a program can make, with its message and location. Fixtures live in
 * tests/fixtures/sched/ (each says what it tests); golden plans in tests/golden/. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sched/sched.h"
#include "tests/testutil.h"

/* ---------------------------------------------------------------- helpers */

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    memcpy(d, s, n);
    return d;
}

static char *src_path(const char *rel) { return xstrdup(test_src_path(rel)); }

static char *fixture(const char *name)
{
    char rel[512];
    snprintf(rel, sizeof rel, "tests/fixtures/sched/%s", name);
    return src_path(rel);
}

typedef struct compiled {
    sched_compilation c;
    base_error e;
    int rc;
} compiled;

static compiled *compile_path(const char *path, const sched_options *o)
{
    compiled *r = calloc(1, sizeof *r);
    sched_compilation_init(&r->c);
    base_error_clear(&r->e);
    r->rc = sched_compile(&r->c, path, NULL, NULL, o, &r->e);
    return r;
}

static compiled *compile_fixture(const char *name, const sched_options *o)
{
    char *path = fixture(name);
    compiled *r = compile_path(path, o);
    free(path);
    return r;
}

static void compiled_free(compiled *r)
{
    if (!r) return;
    sched_compilation_free(&r->c);
    free(r);
}

/* Fails the test (and returns from it) when the compilation failed, printing why. */
#define ASSERT_COMPILED(r)                                                                       \
    do {                                                                                         \
        if ((r)->rc) fprintf(stderr, "\n  compilation failed: %s\n", (r)->e.msg);                \
        CU_ASSERT_EQUAL((r)->rc, 0);                                                             \
        if ((r)->rc) {                                                                           \
            compiled_free(r);                                                                    \
            return;                                                                              \
        }                                                                                        \
    } while (0)

/* A program in a temporary file: "model: <abs>\ncluster: <abs>\n" then `body`, so the body
 * starts at line 3. Returns the malloc'd path; unlink and free it. */
static char *temp_program(const char *model_rel, const char *cluster_rel, const char *body)
{
    char *path = xstrdup("/tmp/piper_test_compile_XXXXXX");
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    FILE *f = fdopen(fd, "w");
    CU_ASSERT_FATAL(f != NULL);
    fprintf(f, "model: %s\n", test_src_path(model_rel));
    fprintf(f, "cluster: %s\n", test_src_path(cluster_rel));
    fputs(body, f);
    fclose(f);
    return path;
}

static compiled *compile_text(const char *model_rel, const char *cluster_rel, const char *body,
                              const sched_options *o)
{
    char *path = temp_program(model_rel, cluster_rel, body);
    compiled *r = compile_path(path, o);
    unlink(path);
    free(path);
    return r;
}

/* `pattern` with every '@' replaced by `path`. */
static void expand_at(const char *pattern, const char *path, char *out, size_t n)
{
    size_t o = 0;
    for (const char *p = pattern; *p && o + 1 < n; p++) {
        if (*p == '@') {
            o += (size_t)snprintf(out + o, n - o, "%s", path);
            if (o >= n) o = n - 1;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = 0;
}

/* Compiles `body` (see temp_program) and expects it to fail with a message that starts with
 * `want`, in which '@' stands for the program's path ("@:6:5: directive 0 (place): ..."). */
static void expect_error(const char *what, const char *model_rel, const char *cluster_rel,
                         const char *body, const sched_options *o, const char *want)
{
    char *path = temp_program(model_rel, cluster_rel, body);
    compiled *r = compile_path(path, o);
    char exp[2048];
    expand_at(want, path, exp, sizeof exp);
    int ok = r->rc != 0 && strncmp(r->e.msg, exp, strlen(exp)) == 0;
    if (!ok)
        fprintf(stderr, "\n  %s: expected a message starting with\n    \"%s\"\n  got (rc %d)\n    \"%s\"\n",
                what, exp, r->rc, r->e.msg);
    CU_ASSERT(ok);
    compiled_free(r);
    unlink(path);
    free(path);
}

/* Instructions of device d's list with op `op` (and, for collectives, kind `coll`; -1: any). */
static int count_ops(const plan_set *p, int d, plan_op op, int coll)
{
    const plan_list *L = plan_dev_list(p, d);
    int n = 0;
    for (int i = 0; i < L->n; i++)
        n += L->ins[i].op == op && (coll < 0 || L->ins[i].coll == coll);
    return n;
}

/* SEND (or RECV) instructions of device d to (from) `peer`, of pipeline stage `stage` and
 * micro-batch `mb` (-1: any). */
static int count_p2p(const plan_set *p, int d, plan_op op, int peer, int stage, int mb)
{
    const plan_list *L = plan_dev_list(p, d);
    int n = 0;
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        if (in->op != op || plan_dev_peer(p, d, in) != peer) continue;
        n += (stage < 0 || in->stage == stage) && (mb < 0 || in->mb == mb);
    }
    return n;
}

/* Collectives of kind `coll` on device d about region `region` and micro-batch `mb`. */
static int count_coll_at(const plan_set *p, int d, plan_coll coll, int region, int mb)
{
    const plan_list *L = plan_dev_list(p, d);
    int n = 0;
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        n += in->op == PLAN_COLL && in->coll == coll && in->region == region && in->mb == mb;
    }
    return n;
}

/* Live DAG nodes with op `op`, pass `pass` (-1 any), region `region` (-1 any), mb (-2 any). */
static int count_nodes(const ir_dag *g, ir_op op, int pass, int region, int mb)
{
    int n = 0;
    for (size_t v = 0; v < g->nnodes; v++) {
        const ir_node *x = &g->nodes[v];
        if (x->dead || x->op != op) continue;
        n += (pass < 0 || x->pass == pass) && (region < 0 || x->region == region) &&
             (mb == -2 || x->mb == mb);
    }
    return n;
}

static int region_index(const ir_dag *g, const char *name)
{
    for (int r = 0; r < g->nregions; r++)
        if (strcmp(g->regions[r].name, name) == 0) return r;
    return -1;
}

static char *plan_text(const plan_set *p)
{
    char *s = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&s, &n);
    base_error e;
    base_error_clear(&e);
    int rc = plan_write(p, f, &e);
    fclose(f);
    if (rc) fprintf(stderr, "\n  plan write failed: %s\n", e.msg);
    CU_ASSERT_EQUAL(rc, 0);
    return s;
}

/* Saved activations of one micro-batch of pipeline stage `stage`, by the cost model. */
static double stage_activation_bytes(compiled *r, int stage)
{
    const ir_dag *g = &r->c.dag;
    int32_t *st = base_arena_calloc(&r->c.arena, (size_t)g->nregions, sizeof *st);
    ir_program_stage_of_region(&r->c.prog, &r->c.arena, st);
    ir_shape s = ir_shape_default();
    s.micro_batch = r->c.prog.micro_batch;
    s.act_dtype = r->c.prog.act_dtype;
    s.param_dtype = r->c.prog.param_dtype;
    double sum = 0;
    for (int k = 0; k < g->nregions; k++)
        if (st[k] == stage) sum += ir_region_activation_bytes(g->model, &g->regions[k], &s);
    return sum;
}

/* ---------------------------------------------------------------- 1. ZeRO table */

/* formulas.md: mixed-precision Adam keeps 2 + 2 + 12 bytes per parameter; over N = 64 replicas
 * ZeRO-1 shards the 12, ZeRO-2 also the gradients' 2, ZeRO-3 everything. For 7.5e9 parameters:
 * 120 / 31.40625 / 16.640625 / 1.875 GB per device of kept model states (the transient whole
 * gradients of ZeRO-2/3's per-micro-batch reductions are bounded separately). The plan's buffers are per region, each
 * rounded to a byte, so the sums may be off by a few bytes per region (74 regions). */
static const char ZERO_BODY[] =
    "batch: {global: 64, micro: 1}\n"
    "directives:\n"
    "  - {op: replicate, filter: {}, devices: \"0-63\", zero: %d}\n";

/* The table for gradients of `gb` bytes a parameter (`head` sets grad_dtype before ZERO_BODY):
 * parameters 2 bytes, gradients gb, optimizer 12, sharded as above. */
static void check_zero_table(const char *head, double gb, const double want[4])
{
    sched_options o = {.allow_oom = true};
    const double P = 7.5e9, grads = P * gb;
    for (int z = 0; z < 4; z++) {
        char body[256];
        int w = snprintf(body, sizeof body, "%s", head);
        snprintf(body + w, sizeof body - (size_t)w, ZERO_BODY, z);
        compiled *r = compile_text("tests/fixtures/sched/gpt_7p5e9.yaml",
                                   "tests/fixtures/sched/a100_64.yaml", body, &o);
        ASSERT_COMPILED(r);
        CU_ASSERT_EQUAL(ir_model_params(&r->c.prog.model), INT64_C(7500000000));
        CU_ASSERT_EQUAL(r->c.dp_degree, 64);
        CU_ASSERT_EQUAL(r->c.stats.ndevices, 64);
        for (int d = 0; d < r->c.stats.ndevices; d++) {
            const double *pk = r->c.stats.dev[d].peak_by_mem;
            /* the kept gradient: the region buffers the optimizer reads ("grad.<region>"); ZeRO-2/3
             * also hold micro-batches' whole gradients between their backward and reduce-scatter
             * (grad.<region>.mb<k>), checked below */
            const plan_list *L = plan_dev_list(&r->c.plan, d);
            double kept = 0, embed_whole = 0, largest = 0;
            for (int b = 0; b < L->nbufs; b++) {
                if (L->bufs[b].mem != PLAN_MEM_GRAD) continue;
                const char *mb = strstr(L->bufs[b].name, ".mb");
                if (!mb) kept += (double)L->bufs[b].bytes;
                else if (!strncmp(L->bufs[b].name, "grad.embed.", 11)) embed_whole = (double)L->bufs[b].bytes;
                else if ((double)L->bufs[b].bytes > largest) largest = (double)L->bufs[b].bytes;
            }
            CU_ASSERT_DOUBLE_EQUAL(kept, z >= 2 ? grads / 64 : grads, 4096);
            if (z >= 2) {
                /* one micro-batch: the tied token table's whole gradient lives through the whole
                 * backward (the head starts it), and at most two buckets' (one layer region
                 * each at these sizes) are in flight besides: the double-buffered reduction */
                CU_ASSERT_DOUBLE_EQUAL(embed_whole, (144482.0 + 2048) * 4000 * gb, 1); /* tokens + positions */
                CU_ASSERT(pk[PLAN_MEM_GRAD] >= kept + embed_whole);
                CU_ASSERT(pk[PLAN_MEM_GRAD] <= kept + embed_whole + 2 * largest + 4096);
            } else {
                CU_ASSERT_EQUAL(embed_whole + largest, 0);
            }
            double states = pk[PLAN_MEM_PARAM] + kept + pk[PLAN_MEM_OPT];
            if (fabs(states - want[z]) > 4096)
                fprintf(stderr, "\n  zero %d device %d: params %.0f + grads %.0f + opt %.0f = %.0f, want %.0f\n",
                        z, d, pk[PLAN_MEM_PARAM], pk[PLAN_MEM_GRAD], pk[PLAN_MEM_OPT], states, want[z]);
            CU_ASSERT_DOUBLE_EQUAL(states, want[z], 4096);
        }
        /* and category by category on device 0: 2, gb and 12 bytes per parameter, each sharded
         * from its own stage on */
        const double *pk = r->c.stats.dev[0].peak_by_mem;
        CU_ASSERT_EQUAL(r->c.plan.param_dtype, PLAN_BF16);
        CU_ASSERT_EQUAL(plan_dtype_bytes((plan_dtype)r->c.plan.grad_dtype), (int)gb);
        CU_ASSERT_DOUBLE_EQUAL(pk[PLAN_MEM_PARAM], z >= 3 ? 15e9 / 64 : 15e9, 4096);
        if (z < 2) CU_ASSERT_DOUBLE_EQUAL(pk[PLAN_MEM_GRAD], grads, 4096);
        CU_ASSERT_DOUBLE_EQUAL(pk[PLAN_MEM_OPT], z >= 1 ? 90e9 / 64 : 90e9, 4096);
        compiled_free(r);
    }
}

static void test_zero_table(void)
{
    static const double want[4] = {120e9, 31.40625e9, 16.640625e9, 1.875e9};
    check_zero_table("", 2, want);
}

/* grad_dtype: fp32 (Megatron-LM's fp32 main_grad beside bf16 parameters): 2 + 4 + 12 = 18 bytes
 * per parameter; ZeRO-1 2 + 4 + 12/N, ZeRO-2 2 + (4 + 12)/N (each device keeps its 1/N piece of
 * the fp32 gradient), ZeRO-3 18/N. N = 64, 7.5e9 parameters: 135 / 46.40625 / 16.875 /
 * 2.109375 GB per device. */
static void test_zero_table_fp32_grads(void)
{
    static const double want[4] = {135e9, 46.40625e9, 16.875e9, 2.109375e9};
    check_zero_table("grad_dtype: fp32\n", 4, want);
}

/* ZeRO-3 on one NVLink node, 4 micro-batches: the gathers are fast next to the computation, so
 * without a prefetch limit the gather stream runs ahead and holds most of the step's gathered
 * copies (measured before the limit: 11.6 GiB at the peak of configs/programs/zero3.yaml). With
 * it (dir_replicate.c), a few copies: at worst the head's two (its forward's, and its backward's
 * gathered while the forward runs, each with the tied token table) and two layer regions'. The
 * sizes are the whole gradients' of the same regions (2 bytes a parameter, as the gathers). */
static void test_zero3_prefetch_limit(void)
{
    compiled *r = compile_text("configs/models/gpt_7.5b.yaml", "configs/clusters/dgx_a100_8.yaml",
                               "batch: {global: 32, micro: 1}\n"
                               "directives:\n"
                               "  - {op: split, num_microbatches: 4}\n"
                               "  - {op: replicate, filter: {}, devices: \"0-7\", zero: 3}\n",
                               NULL);
    ASSERT_COMPILED(r);
    const plan_list *L = plan_dev_list(&r->c.plan, 0);
    double table = 0, largest = 0;
    for (int b = 0; b < L->nbufs; b++) {
        if (L->bufs[b].mem != PLAN_MEM_GRAD || !strstr(L->bufs[b].name, ".mb0")) continue;
        if (!strncmp(L->bufs[b].name, "grad.embed.", 11)) table = (double)L->bufs[b].bytes;
        else if (!strstr(L->bufs[b].name, "head") && (double)L->bufs[b].bytes > largest)
            largest = (double)L->bufs[b].bytes;
    }
    CU_ASSERT(table > 0 && largest > 0);
    const double gathered = r->c.stats.dev[0].peak_by_mem[PLAN_MEM_COMM];
    if (gathered > 2 * table + 2 * largest)
        fprintf(stderr, "\n  gathered %.0f bytes at peak, bound %.0f\n", gathered, 2 * table + 2 * largest);
    CU_ASSERT(gathered <= 2 * table + 2 * largest);
    compiled_free(r);
}

/* ZeRO-3 with full recompute on an MoE model, the recompute written before the replicate (as
 * piper-search writes programs): a layer whose attention is fully recomputed is recomputed as
 * one, in the forward's order (attn, gate, experts, combine), so the prefetch limit of a
 * recompute's gather cannot be the recompute two regions later in the same layer (that one
 * needs this one's output: a cycle). Both directive orders compile and pass the check, and the
 * recomputes of each layer run in region order. */
static void test_zero3_full_recompute_moe(void)
{
    static const char *const bodies[2] = {
        "batch: {global: 8, micro: 1}\n"
        "directives:\n"
        "  - {op: split, filter: {}, num_microbatches: 2}\n"
        "  - {op: recompute, filter: {}, mode: full}\n"
        "  - {op: replicate, filter: {}, devices: [0, 1, 2, 3], zero: 3}\n",
        "batch: {global: 8, micro: 1}\n"
        "directives:\n"
        "  - {op: split, filter: {}, num_microbatches: 2}\n"
        "  - {op: replicate, filter: {}, devices: [0, 1, 2, 3], zero: 3}\n"
        "  - {op: recompute, filter: {}, mode: full}\n",
    };
    for (int k = 0; k < 2; k++) {
        compiled *r = compile_text("configs/models/moe_tiny.yaml", "configs/clusters/a100_4.yaml", bodies[k], NULL);
        ASSERT_COMPILED(r);
        const plan_set *p = &r->c.plan;
        const plan_list *L = plan_dev_list(p, 0);
        int nr = 0, last_region[2] = {-1, -1}, last_layer[2] = {-1, -1};
        for (int i = 0; i < L->n; i++) {
            const plan_instr *in = &L->ins[i];
            if (in->op != PLAN_COMPUTE || in->pass != PLAN_PASS_R || in->mb < 0 || in->mb > 1) continue;
            int layer = -1;
            CU_ASSERT_FATAL(in->region >= 0 && in->region < p->nregions);
            CU_ASSERT_EQUAL_FATAL(sscanf(p->regions[in->region], "L%d.", &layer), 1);
            if (layer == last_layer[in->mb]) CU_ASSERT(in->region > last_region[in->mb]);
            last_layer[in->mb] = layer;
            last_region[in->mb] = in->region;
            nr++;
        }
        CU_ASSERT(nr > 8); /* every region of 4 layers, two micro-batches */
        compiled_free(r);
    }
}

/* DualPipeV with TP and sequence parallelism: the received activation gradient of a split
 * backward reaches BI through the SP all-gather, two hops away. It is the input half's
 * communication as much as a direct one, so it is tagged BI and ordered with it; left at B it
 * was ready from the start and paired with the first forward send, which deadlocked. */
static void test_dualpipev_tp_sp(void)
{
    compiled *r = compile_text(
        "configs/models/gpt_1.7b.yaml", "configs/clusters/dgx_a100_8.yaml",
        "batch: {global: 8, micro: 1}\n"
        "annotations: {pp: 4, tp: true}\n"
        "directives:\n"
        "  - {op: split, filter: {}, num_microbatches: 8}\n"
        "  - {op: place, filter: {PP: 0}, devices: [0, 1]}\n"
        "  - {op: place, filter: {PP: 1}, devices: [2, 3]}\n"
        "  - {op: place, filter: {PP: 2}, devices: [2, 3]}\n"
        "  - {op: place, filter: {PP: 3}, devices: [0, 1]}\n"
        "  - {op: shard_tensor, filter: {PP: 0, TP: \"*\"}, devices: [0, 1], sequence_parallel: true}\n"
        "  - {op: shard_tensor, filter: {PP: 1, TP: \"*\"}, devices: [2, 3], sequence_parallel: true}\n"
        "  - {op: shard_tensor, filter: {PP: 2, TP: \"*\"}, devices: [2, 3], sequence_parallel: true}\n"
        "  - {op: shard_tensor, filter: {PP: 3, TP: \"*\"}, devices: [0, 1], sequence_parallel: true}\n"
        "  - {op: schedule, name: dualpipev}\n",
        NULL);
    ASSERT_COMPILED(r);
    /* stage 0's first receive is a gradient: it cannot come before the stage's forwards */
    const plan_list *L = plan_dev_list(&r->c.plan, 0);
    int first_recv_stage0 = -1, forwards_before = 0;
    for (int i = 0; i < L->n && first_recv_stage0 < 0; i++) {
        const plan_instr *in = &L->ins[i];
        if (in->op == PLAN_COMPUTE && in->pass == PLAN_PASS_F && in->stage == 0) forwards_before++;
        if (in->op == PLAN_RECV && in->stage == 0) first_recv_stage0 = in->mb;
    }
    CU_ASSERT_EQUAL(first_recv_stage0, 0);
    CU_ASSERT(forwards_before > 0);
    compiled_free(r);
}

/* ZeRO-2 double-buffers its per-micro-batch buckets: the backward that starts bucket j + 2
 * waits for bucket j's reduce-scatter. Under ZB-H1 the weight halves are deferred, so the
 * wait belongs to the weight half, which makes the gradient: on the input half it waited for
 * a reduction that needs weight halves scheduled after it (a cycle). moe_tiny's expert buckets
 * give each stage three buckets or more; ZeRO-3 with sequence parallelism and full recompute
 * (qwen3_1b) adds just-in-time gathers on the same chains. */
static void test_zb_zero_buckets(void)
{
    for (int z = 2; z <= 3; z++) {
        char body[1024];
        snprintf(body, sizeof body,
                 "batch: {global: 8, micro: 1}\n"
                 "annotations: {pp: 2}\n"
                 "directives:\n"
                 "  - {op: split, filter: {}, num_microbatches: 4}\n"
                 "  - {op: place, filter: {PP: 0}, devices: [0, 1]}\n"
                 "  - {op: replicate, filter: {PP: 0}, devices: [0, 1], zero: %d}\n"
                 "  - {op: place, filter: {PP: 1}, devices: [2, 3]}\n"
                 "  - {op: replicate, filter: {PP: 1}, devices: [2, 3], zero: %d}\n"
                 "  - {op: schedule, name: zb-h1}\n",
                 z, z);
        compiled *r = compile_text("configs/models/moe_tiny.yaml", "configs/clusters/a100_4.yaml", body, NULL);
        ASSERT_COMPILED(r);
        compiled_free(r);
    }
    compiled *r = compile_text(
        "configs/models/qwen3_1b.yaml", "configs/clusters/dgx_a100_8.yaml",
        "batch: {global: 16, micro: 1}\n"
        "annotations: {pp: 2, tp: true}\n"
        "directives:\n"
        "  - {op: split, filter: {}, num_microbatches: 8}\n"
        "  - {op: recompute, filter: {}, mode: full}\n"
        "  - {op: place, filter: {PP: 0}, devices: [0, 1, 2, 3]}\n"
        "  - {op: shard_tensor, filter: {PP: 0, TP: \"*\"}, devices: [0, 1], sequence_parallel: true}\n"
        "  - {op: replicate, filter: {PP: 0}, devices: [0, 2], zero: 3}\n"
        "  - {op: place, filter: {PP: 1}, devices: [4, 5, 6, 7]}\n"
        "  - {op: shard_tensor, filter: {PP: 1, TP: \"*\"}, devices: [4, 5], sequence_parallel: true}\n"
        "  - {op: replicate, filter: {PP: 1}, devices: [4, 6], zero: 3}\n"
        "  - {op: schedule, name: zb-h1}\n",
        NULL);
    ASSERT_COMPILED(r);
    compiled_free(r);
}

/* ZeRO-0 of 7.5e9 parameters needs 120 GB of model states alone: more than an A100-80GB's 76 GiB
 * usable. Rejected with the breakdown, kept with allow_oom (and a warning). */
static void test_oom_rejected_with_breakdown(void)
{
    char body[256];
    snprintf(body, sizeof body, ZERO_BODY, 0);
    expect_error("oom", "tests/fixtures/sched/gpt_7p5e9.yaml", "tests/fixtures/sched/a100_64.yaml",
                 body, NULL,
                 "@: device 0 needs 132.98 GiB at its peak but has 76.00 GiB usable (capacity "
                 "of the A100-80GB minus reserve): parameters 13.97 GiB, gradients 13.97 GiB, "
                 "optimizer 83.82 GiB, activations ");
    sched_options o = {.allow_oom = true};
    compiled *r = compile_text("tests/fixtures/sched/gpt_7p5e9.yaml",
                               "tests/fixtures/sched/a100_64.yaml", body, &o);
    ASSERT_COMPILED(r);
    TEST_ASSERT_CONTAINS(r->e.warnings, "device 0 needs 132.98 GiB at its peak");
    TEST_ASSERT_CONTAINS(r->e.warnings, "kept because of --allow-oom");
    compiled_free(r);
    /* ZeRO-3 fits: 1.875 GB of states plus the activations */
    snprintf(body, sizeof body, ZERO_BODY, 3);
    r = compile_text("tests/fixtures/sched/gpt_7p5e9.yaml", "tests/fixtures/sched/a100_64.yaml",
                     body, NULL);
    ASSERT_COMPILED(r);
    CU_ASSERT_EQUAL(r->e.nwarn, 0);
    compiled_free(r);
}

/* The optimizer steps on device d: each must update the device's piece of its region under
 * ZeRO >= 1, ceil(p / shards) of the region's p parameters (the pieces of the optimizer state
 * and of the executor's exec_zero_piece), with `per_param` bytes of traffic (gradient + parameter
 * + 24 of fp32 state) and 12 FLOPs each; shards = 1 is ZeRO-0's whole step. Returns the
 * device's step bytes; *flops gets its FLOPs and *steps counts the steps. */
static double check_upd_pieces(const compiled *r, int d, int64_t shards, double per_param,
                               double *flops, int *steps)
{
    const plan_set *p = &r->c.plan;
    const plan_list *L = plan_dev_list(p, d);
    ir_shape sh = ir_shape_default(); /* no TP: the region's parameters are the device's */
    double bytes = 0;
    *flops = 0;
    *steps = 0;
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        if (in->op != PLAN_COMPUTE || in->pass != PLAN_PASS_UPD) continue;
        CU_ASSERT_FATAL(in->kernels >= 0 && in->region >= 0);
        int64_t n = ir_region_params_per_device(&r->c.prog.model, &r->c.dag.regions[in->region], &sh);
        double piece = (double)((n + shards - 1) / shards);
        const plan_kernel_list *kl = &p->kernel_lists[in->kernels];
        double b = 0, f = 0;
        for (int k = 0; k < kl->n; k++) {
            b += kl->k[k].bytes;
            f += kl->k[k].flops;
        }
        CU_ASSERT_EQUAL(b, per_param * piece);
        CU_ASSERT_EQUAL(f, 12.0 * piece);
        bytes += b;
        *flops += f;
        (*steps)++;
    }
    return bytes;
}


/* Experts under expert parallelism over the data-parallel devices themselves (moe_tiny, EP2 on
 * the same 2 devices as DP2) have no replica: ZeRO-1 cannot shard their optimizer state, which
 * each device keeps whole (12 bytes a parameter of its experts: fp32 master, m, v), while the
 * replicated regions' is halved. The plan used to halve the experts' too, predicting less memory
 * than any executor holds. The optimizer step's cost follows the same pieces. */
static void test_zero_expert_state_not_sharded_over_ep(void)
{
    compiled *r = compile_text("configs/models/moe_tiny.yaml", "configs/clusters/cpu_8.yaml",
                               "batch: {global: 2, micro: 1}\n"
                               "annotations: {ep: true}\n"
                               "directives:\n"
                               "  - {op: replicate, filter: {}, devices: [0, 1], zero: 1}\n"
                               "  - {op: shard, filter: {EP: \"*\"}, devices: [0, 1], stream: ep}\n",
                               NULL);
    ASSERT_COMPILED(r);
    int experts = 0, others = 0;
    for (int d = 0; d < 2; d++) {
        const plan_list *L = plan_dev_list(&r->c.plan, d);
        for (int b = 0; b < L->nbufs; b++) {
            if (L->bufs[b].mem != PLAN_MEM_OPT) continue;
            const char *region = L->bufs[b].name + 4; /* "opt.<region>" */
            char pname[128];
            snprintf(pname, sizeof pname, "param.%s", region);
            double params = -1;
            for (int q = 0; q < L->nbufs; q++)
                if (!strcmp(L->bufs[q].name, pname)) params = (double)L->bufs[q].bytes / 2; /* bf16 */
            CU_ASSERT_FATAL(params > 0);
            const bool is_experts = strstr(region, "moe_experts") != NULL;
            const double want = is_experts ? 12 * params : ceil(12 * params / 2);
            if (fabs((double)L->bufs[b].bytes - want) > 1)
                fprintf(stderr, "\n  device %d %s: %lld bytes, want %.0f\n", d, L->bufs[b].name,
                        (long long)L->bufs[b].bytes, want);
            CU_ASSERT_DOUBLE_EQUAL((double)L->bufs[b].bytes, want, 1);
            if (is_experts) experts++;
            else others++;
        }
    }
    CU_ASSERT_EQUAL(experts, 2 * 2); /* two MoE layers on each device */
    CU_ASSERT(others >= 2 * 6);
    compiled_free(r);
}

/* The ZeRO table's programs (7.5e9 parameters, 64 GPUs): ZeRO-0 steps every parameter on every
 * device, 28 bytes (bf16 gradient and parameter, fp32 master, m and v read and written) and 12
 * FLOPs each; ZeRO-1/2/3 shard the optimizer state 64 ways and each device steps its piece of each
 * region, ceil(p / 64): the ZeRO-0 step's bytes and FLOPs / 64, up to the rounding of a piece
 * per region. */
static void test_zero_optimizer_step_piece(void)
{
    sched_options o = {.allow_oom = true};
    const double P = 7.5e9;
    double whole_b = 0, whole_f = 0;
    for (int z = 0; z < 4; z++) {
        char body[256];
        snprintf(body, sizeof body, ZERO_BODY, z);
        compiled *r = compile_text("tests/fixtures/sched/gpt_7p5e9.yaml",
                                   "tests/fixtures/sched/a100_64.yaml", body, &o);
        ASSERT_COMPILED(r);
        CU_ASSERT_EQUAL_FATAL(r->c.dp_degree, 64);
        const int64_t shards = z >= 1 ? 64 : 1;
        const int nreg = r->c.dag.nregions;
        for (int d = 0; d < r->c.stats.ndevices; d += 63) { /* the first and last replicas */
            double f;
            int steps;
            double b = check_upd_pieces(r, d, shards, 28.0, &f, &steps);
            CU_ASSERT_EQUAL(steps, nreg); /* every region's step on every replica */
            if (z == 0) {
                CU_ASSERT_EQUAL(b, 28.0 * P);
                CU_ASSERT_EQUAL(f, 12.0 * P);
                whole_b = b;
                whole_f = f;
            } else {
                /* 1/64 of ZeRO-0's, each region's piece rounded up by less than one parameter */
                CU_ASSERT(b >= whole_b / 64 && b < whole_b / 64 + 28.0 * nreg);
                CU_ASSERT(f >= whole_f / 64 && f < whole_f / 64 + 12.0 * nreg);
            }
        }
        compiled_free(r);
    }
}

/* The cost cache keys on the optimizer's sharding: two pipeline stages of gpt_tiny hold regions
 * of the same kinds (attention, MLP), the first stage's DP pair under ZeRO-0 (each device steps
 * all p), the second's under ZeRO-1 (each steps ceil(p / 2)); neither takes the other's cost. */
static void test_zero_optimizer_step_cache_key(void)
{
    compiled *r = compile_text("configs/models/gpt_tiny.yaml", "configs/clusters/dgx_a100_8.yaml",
                               "batch: {global: 4, micro: 1}\n"
                               "annotations: {pp: 2}\n"
                               "directives:\n"
                               "  - {op: split, num_microbatches: 2}\n"
                               "  - {op: place, filter: {PP: 0}, devices: [0, 1]}\n"
                               "  - {op: replicate, filter: {PP: 0}, devices: [0, 1], zero: 0}\n"
                               "  - {op: place, filter: {PP: 1}, devices: [2, 3]}\n"
                               "  - {op: replicate, filter: {PP: 1}, devices: [2, 3], zero: 1}\n",
                               NULL);
    ASSERT_COMPILED(r);
    double f0, f1;
    int s0, s1;
    double b0 = check_upd_pieces(r, 0, 1, 28.0, &f0, &s0);
    double b1 = check_upd_pieces(r, 2, 2, 28.0, &f1, &s1);
    CU_ASSERT(s0 >= 2 && s1 >= 2 && b0 > 0 && b1 > 0);
    CU_ASSERT_EQUAL(s0 + s1, r->c.dag.nregions);
    compiled_free(r);
}

/* ---------------------------------------------------------------- 2. instruction counts */

/* dp2_buckets.yaml works out the buckets: 2 all-reduces per device, 100,224 and 136,832 bytes,
 * the bucket of the last layers first (gradients become ready in backward order). */
static void test_dp_bucket_count(void)
{
    compiled *r = compile_fixture("dp2_buckets.yaml", NULL);
    ASSERT_COMPILED(r);
    const plan_set *p = &r->c.plan;
    CU_ASSERT_EQUAL(p->ndevices, 2);
    for (int d = 0; d < 2; d++) {
        CU_ASSERT_EQUAL(count_ops(p, d, PLAN_COLL, -1), 2);
        CU_ASSERT_EQUAL(count_ops(p, d, PLAN_COLL, PLAN_ALL_REDUCE), 2);
        CU_ASSERT_EQUAL(r->c.stats.dev[d].count_by_op[PLAN_COLL], 2);
        const plan_list *L = plan_dev_list(p, d);
        int64_t bytes[2] = {0, 0};
        int k = 0;
        for (int i = 0; i < L->n; i++)
            if (L->ins[i].op == PLAN_COLL && k < 2) {
                bytes[k++] = L->ins[i].bytes;
                const plan_group *grp = &p->groups[plan_dev_group(p, d, &L->ins[i])];
                CU_ASSERT_EQUAL(grp->n, 2);
            }
        CU_ASSERT_EQUAL(bytes[0], 100224);
        CU_ASSERT_EQUAL(bytes[1], 136832);
    }
    compiled_free(r);
}

/* The same model and arithmetic with other bucket sizes (dp2_buckets.yaml has the per-region
 * sizes): 66,688 closes after head + L1.mlp, after L1.attn + L0.mlp (99,968) and at the end
 * (L0.attn + embed): 3 buckets; 0 means one bucket per region: 6; no bucket_size is 25 MB,
 * which holds the whole model: 1. Gradient clipping adds one 8-byte all-reduce of the norm. */
static void test_dp_bucket_sizes(void)
{
    static const struct {
        const char *bucket, *optimizer;
        int buckets, norm;
    } cases[] = {
        {"bucket_size: 66688", "adamw", 3, 0},
        {"bucket_size: 0", "adamw", 6, 0},
        {"zero: 0", "adamw", 1, 0},
        {"bucket_size: 100000", "{name: adamw, grad_clip: 1.0}", 2, 1},
    };
    for (size_t i = 0; i < BASE_COUNT(cases); i++) {
        char body[512];
        snprintf(body, sizeof body,
                 "batch: {global: 2, micro: 1}\n"
                 "optimizer: %s\n"
                 "directives:\n"
                 "  - {op: replicate, filter: {}, devices: [0, 1], %s}\n",
                 cases[i].optimizer, cases[i].bucket);
        compiled *r = compile_text("configs/models/gpt_tiny.yaml", "configs/clusters/a100_2.yaml",
                                   body, NULL);
        ASSERT_COMPILED(r);
        for (int d = 0; d < 2; d++) {
            const plan_list *L = plan_dev_list(&r->c.plan, d);
            int buckets = 0, norms = 0;
            int64_t total = 0;
            for (int k = 0; k < L->n; k++) {
                if (L->ins[k].op != PLAN_COLL || L->ins[k].coll != PLAN_ALL_REDUCE) continue;
                if (L->ins[k].bytes == 8) {
                    norms++;
                } else {
                    buckets++;
                    total += L->ins[k].bytes;
                }
            }
            if (buckets != cases[i].buckets)
                fprintf(stderr, "\n  %s: %d buckets, want %d\n", cases[i].bucket, buckets, cases[i].buckets);
            CU_ASSERT_EQUAL(buckets, cases[i].buckets);
            CU_ASSERT_EQUAL(norms, cases[i].norm);
            CU_ASSERT_EQUAL(total, 237056); /* every gradient once: 118,528 parameters x 2 bytes */
        }
        compiled_free(r);
    }
}

/* What a device's plan moves and keeps, by kind: collective bytes, buffer bytes by memory class,
 * the optimizer step's kernel bytes. */
typedef struct plan_volumes {
    double coll[PLAN_NCOLL];
    double mem[PLAN_NMEM];
    double upd;
} plan_volumes;

static plan_volumes volumes_of(const plan_set *p, int d)
{
    plan_volumes v;
    memset(&v, 0, sizeof v);
    const plan_list *L = plan_dev_list(p, d);
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        if (in->op == PLAN_COLL && in->coll < PLAN_NCOLL) v.coll[in->coll] += (double)in->bytes;
        if (in->op == PLAN_COMPUTE && in->pass == PLAN_PASS_UPD && in->kernels >= 0)
            for (int k = 0; k < p->kernel_lists[in->kernels].n; k++)
                v.upd += p->kernel_lists[in->kernels].k[k].bytes;
    }
    for (int b = 0; b < L->nbufs; b++)
        if (L->bufs[b].mem < PLAN_NMEM) v.mem[L->bufs[b].mem] += (double)L->bufs[b].bytes;
    return v;
}

/* grad_dtype: fp32 against the default bf16 gradients on gpt_tiny (118,528 parameters), DP2,
 * ZeRO 0-3: the gradient collectives (ZeRO-0/1's all-reduce, ZeRO-2/3's reduce-scatter) and the
 * gradient buffers carry twice the bytes; the parameter all-gathers (ZeRO-1/2's after the step,
 * ZeRO-3's before each pass), the parameters and the optimizer state do not change; the optimizer
 * step reads 4 rather than 2 bytes of gradient a parameter (30 bytes of traffic, not 28). The
 * plan says grad fp32 and reads back the same. */
static void test_grad_dtype_fp32_volumes(void)
{
    for (int z = 0; z < 4; z++) {
        plan_volumes v[2];
        for (int f = 0; f < 2; f++) {
            char body[512];
            snprintf(body, sizeof body,
                     "batch: {global: 2, micro: 1}\n"
                     "%s"
                     "directives:\n"
                     "  - {op: replicate, filter: {}, devices: [0, 1], zero: %d, bucket_size: 0}\n",
                     f ? "grad_dtype: fp32\n" : "", z);
            compiled *r = compile_text("configs/models/gpt_tiny.yaml",
                                       "configs/clusters/a100_2.yaml", body, NULL);
            ASSERT_COMPILED(r);
            CU_ASSERT_EQUAL(r->c.plan.grad_dtype, f ? PLAN_FP32 : PLAN_BF16);
            CU_ASSERT_EQUAL(r->c.plan.param_dtype, PLAN_BF16);
            CU_ASSERT_EQUAL(r->c.plan.act_dtype, PLAN_BF16);
            v[f] = volumes_of(&r->c.plan, 0);
            /* the optimizer step: ZeRO-1-3 each device its half of each region (ceil(p / 2)) */
            double upd_flops;
            int upd_steps;
            CU_ASSERT_EQUAL(check_upd_pieces(r, 0, z >= 1 ? 2 : 1, f ? 30.0 : 28.0, &upd_flops, &upd_steps),
                            v[f].upd);
            plan_volumes v1 = volumes_of(&r->c.plan, 1);
            CU_ASSERT_EQUAL(memcmp(&v[f], &v1, sizeof v1), 0); /* the replicas agree */
            if (f) {
                /* the plan file says so, and what reads back checks with the same peaks */
                char *text = plan_text(&r->c.plan);
                CU_ASSERT_PTR_NOT_NULL(strstr(text ? text : "", " grad=fp32"));
                plan_set q;
                base_error e;
                base_error_clear(&e);
                CU_ASSERT_EQUAL_FATAL(plan_read(&q, "fp32grad.plan", text, strlen(text), &e), 0);
                CU_ASSERT_EQUAL(q.grad_dtype, PLAN_FP32);
                plan_stats st;
                CU_ASSERT_EQUAL(plan_check(&q, &st, &e), 0);
                CU_ASSERT_DOUBLE_EQUAL(st.dev[0].peak_by_mem[PLAN_MEM_GRAD],
                                       r->c.stats.dev[0].peak_by_mem[PLAN_MEM_GRAD], 0.5);
                plan_stats_free(&st);
                plan_free(&q);
                free(text);
            }
            compiled_free(r);
        }
        const double P = 118528;
        /* ZeRO-0 all-reduces every gradient once, ZeRO-1-3 reduce-scatter it: 2 or 4 bytes a
         * parameter */
        plan_coll red = z == 0 ? PLAN_ALL_REDUCE : PLAN_REDUCE_SCATTER;
        CU_ASSERT_DOUBLE_EQUAL(v[0].coll[red], 2 * P, 0);
        CU_ASSERT_DOUBLE_EQUAL(v[1].coll[red], 4 * P, 0);
        CU_ASSERT_DOUBLE_EQUAL(v[1].coll[z == 0 ? PLAN_REDUCE_SCATTER : PLAN_ALL_REDUCE], 0, 0);
        /* the whole bf16 parameters gathered: once after the step (ZeRO-1/2), for each pass with
         * the tied table besides (ZeRO-3) */
        if (z == 1 || z == 2) CU_ASSERT_DOUBLE_EQUAL(v[0].coll[PLAN_ALL_GATHER], 2 * P, 0);
        CU_ASSERT_EQUAL(v[0].coll[PLAN_ALL_GATHER] > 0, z >= 1);
        CU_ASSERT_DOUBLE_EQUAL(v[1].coll[PLAN_ALL_GATHER], v[0].coll[PLAN_ALL_GATHER], 0);
        /* the kept gradients: whole (ZeRO-0/1) or the device's half (ZeRO-2/3) */
        CU_ASSERT(v[0].mem[PLAN_MEM_GRAD] >= (z >= 2 ? P : 2 * P) - 16);
        CU_ASSERT_DOUBLE_EQUAL(v[1].mem[PLAN_MEM_GRAD], 2 * v[0].mem[PLAN_MEM_GRAD], 8);
        CU_ASSERT_DOUBLE_EQUAL(v[1].mem[PLAN_MEM_PARAM], v[0].mem[PLAN_MEM_PARAM], 0);
        CU_ASSERT_DOUBLE_EQUAL(v[1].mem[PLAN_MEM_OPT], v[0].mem[PLAN_MEM_OPT], 0);
        CU_ASSERT_DOUBLE_EQUAL(v[1].mem[PLAN_MEM_ACT], v[0].mem[PLAN_MEM_ACT], 0);
        /* the step: 28 bytes a parameter it updates, all of them under ZeRO-0, half (each region's
         * piece rounded up) under ZeRO-1-3 */
        if (z == 0) CU_ASSERT_DOUBLE_EQUAL(v[0].upd, 28 * P, 1e-6 * P);
        if (z >= 1) CU_ASSERT(v[0].upd >= 14 * P && v[0].upd < 14 * P + 28 * 16);
        CU_ASSERT_DOUBLE_EQUAL(v[1].upd, v[0].upd * 30 / 28, 1e-9 * v[0].upd);
    }
}

/* Pipelines: for each neighbour pair (i, i+1), exactly m activation sends i -> i+1 (stage i,
 * one per micro-batch, PASS F in the DAG) and m gradient sends i+1 -> i (stage i+1, PASS B), and
 * no other p2p. gpt_tiny's boundary tensor is s·b·h·2 = 32·1·64·2 = 4096 bytes. */
static void check_pipeline_sends(compiled *r, int p, int m)
{
    const plan_set *plan = &r->c.plan;
    CU_ASSERT_EQUAL_FATAL(plan->ndevices, p);
    for (int d = 0; d < p; d++) {
        int want = (d > 0 ? m : 0) + (d + 1 < p ? m : 0);
        CU_ASSERT_EQUAL(count_ops(plan, d, PLAN_SEND, -1), want);
        CU_ASSERT_EQUAL(count_ops(plan, d, PLAN_RECV, -1), want);
        CU_ASSERT_EQUAL(r->c.stats.dev[d].count_by_op[PLAN_SEND], want);
        for (int q = 0; q < p; q++) {
            if (q == d + 1) {
                CU_ASSERT_EQUAL(count_p2p(plan, d, PLAN_SEND, q, d, -1), m);
                CU_ASSERT_EQUAL(count_p2p(plan, q, PLAN_RECV, d, -1, -1), m);
                for (int k = 0; k < m; k++) CU_ASSERT_EQUAL(count_p2p(plan, d, PLAN_SEND, q, d, k), 1);
            } else if (q == d - 1) {
                CU_ASSERT_EQUAL(count_p2p(plan, d, PLAN_SEND, q, d, -1), m);
                for (int k = 0; k < m; k++) CU_ASSERT_EQUAL(count_p2p(plan, d, PLAN_SEND, q, d, k), 1);
            } else {
                CU_ASSERT_EQUAL(count_p2p(plan, d, PLAN_SEND, q, -1, -1), 0);
            }
        }
        const plan_list *L = plan_dev_list(plan, d);
        for (int i = 0; i < L->n; i++)
            if (L->ins[i].op == PLAN_SEND || L->ins[i].op == PLAN_RECV) CU_ASSERT_EQUAL(L->ins[i].bytes, 4096);
    }
    /* in the DAG: stage i's sends are m forward (activations) and, but for stage 0, m backward */
    const ir_dag *g = &r->c.dag;
    for (int s = 0; s < p; s++) {
        int f = 0, b = 0;
        for (size_t v = 0; v < g->nnodes; v++) {
            const ir_node *x = &g->nodes[v];
            if (x->dead || x->op != IR_OP_SEND || x->stage != s) continue;
            f += x->pass == PLAN_PASS_F;
            b += x->pass == PLAN_PASS_B;
        }
        CU_ASSERT_EQUAL(f, s + 1 < p ? m : 0);
        CU_ASSERT_EQUAL(b, s > 0 ? m : 0);
    }
}

static void test_pp2_sends(void)
{
    compiled *r = compile_fixture("pp2_m4.yaml", NULL);
    ASSERT_COMPILED(r);
    check_pipeline_sends(r, 2, 4);
    compiled_free(r);
}

static void test_pp4_sends(void)
{
    compiled *r = compile_fixture("pp4_m8.yaml", NULL);
    ASSERT_COMPILED(r);
    check_pipeline_sends(r, 4, 8);
    compiled_free(r);
    /* an explicit 1F1B order moves instructions, never adds or drops them */
    r = compile_fixture("pp4_1f1b_tiny.yaml", NULL);
    ASSERT_COMPILED(r);
    check_pipeline_sends(r, 4, 8);
    compiled_free(r);
}

/* TP2 on gpt_tiny (2 layers), 2 micro-batches; tp2.yaml and tp2_sp.yaml work out the counts. */
static void check_tp(compiled *r, bool sp)
{
    const plan_set *p = &r->c.plan;
    const ir_dag *g = &r->c.dag;
    const int m = 2, layers = 2;
    CU_ASSERT_EQUAL_FATAL(p->ndevices, 2);
    int embed = region_index(g, "embed"), head = region_index(g, "head");
    CU_ASSERT_FATAL(embed >= 0 && head >= 0);
    /* Per step, one more all-reduce per TP region with parameters every rank holds whole
     * (tp_sync.c): embed (learned positions), each layer's attn and mlp (LayerNorm, output
     * bias), head (final LayerNorm): 2 * layers + 2 of them, of those parameters' gradients. */
    const int syncs = 2 * layers + 2;
    /* with SP, each backward of an attention, MLP and head also re-gathers the norm input and
     * output its forward kept for the device's tokens only (dir_shard.c): 2 * layers + 1 */
    const int regather = 2 * layers + 1;
    for (int d = 0; d < 2; d++) {
        CU_ASSERT_EQUAL(count_ops(p, d, PLAN_COLL, -1),
                        m * (sp ? 8 * layers + 4 + regather : 4 * layers + 2) + syncs);
        CU_ASSERT_EQUAL(count_ops(p, d, PLAN_COLL, PLAN_ALL_REDUCE),
                        (sp ? 0 : m * (4 * layers + 2)) + syncs);
        CU_ASSERT_EQUAL(count_ops(p, d, PLAN_COLL, PLAN_ALL_GATHER),
                        sp ? m * (4 * layers + 2 + regather) : 0);
        CU_ASSERT_EQUAL(count_ops(p, d, PLAN_COLL, PLAN_REDUCE_SCATTER), sp ? m * (4 * layers + 2) : 0);
        CU_ASSERT_EQUAL(count_ops(p, d, PLAN_SEND, -1), 0);
        for (int k = 0; k < m; k++) {
            for (int reg = 0; reg < g->nregions; reg++) {
                bool layer = reg != embed && reg != head;
                if (sp) {
                    CU_ASSERT_EQUAL(count_coll_at(p, d, PLAN_ALL_GATHER, reg, k),
                                    layer ? 3 : reg == head ? 2 : 1);
                    CU_ASSERT_EQUAL(count_coll_at(p, d, PLAN_REDUCE_SCATTER, reg, k), layer ? 2 : 1);
                } else {
                    CU_ASSERT_EQUAL(count_coll_at(p, d, PLAN_ALL_REDUCE, reg, k), layer ? 2 : 1);
                }
            }
        }
    }
    /* the per-step syncs: one per TP region; an attention region's holds its LayerNorm (2h) and
     * output-projection bias (h) gradients, h = 64, in bf16 */
    int nsync = 0, attn_sync = 0;
    for (size_t v = 0; v < g->nnodes; v++) {
        const ir_node *n = &g->nodes[v];
        if (n->dead || n->op != IR_OP_ALL_REDUCE || n->coll_group != IR_CG_TP || !(n->flags & IR_NODE_DP_SYNC))
            continue;
        nsync++;
        if (g->regions[n->region].kind == IR_REGION_ATTN) {
            attn_sync++;
            CU_ASSERT_DOUBLE_EQUAL(n->bytes, 3 * 64 * 2, 0);
        }
    }
    CU_ASSERT_EQUAL(nsync, syncs);
    CU_ASSERT_EQUAL(attn_sync, layers);
    /* in the DAG, by pass: per layer region and micro-batch one collective of each kind in the
     * forward and one in the backward; embed only forward-out / backward-in, head the reverse */
    for (int k = 0; k < m; k++) {
        for (int reg = 0; reg < g->nregions; reg++) {
            bool layer = reg != embed && reg != head;
            if (!sp) {
                CU_ASSERT_EQUAL(count_nodes(g, IR_OP_ALL_REDUCE, PLAN_PASS_F, reg, k), layer || reg == embed);
                CU_ASSERT_EQUAL(count_nodes(g, IR_OP_ALL_REDUCE, PLAN_PASS_B, reg, k), layer || reg == head);
            } else {
                CU_ASSERT_EQUAL(count_nodes(g, IR_OP_ALL_GATHER, PLAN_PASS_F, reg, k), layer || reg == head);
                CU_ASSERT_EQUAL(count_nodes(g, IR_OP_REDUCE_SCATTER, PLAN_PASS_F, reg, k), layer || reg == embed);
                CU_ASSERT_EQUAL(count_nodes(g, IR_OP_ALL_GATHER, PLAN_PASS_B, reg, k),
                                (layer || reg == embed) + (reg != embed));
                CU_ASSERT_EQUAL(count_nodes(g, IR_OP_REDUCE_SCATTER, PLAN_PASS_B, reg, k), layer || reg == head);
            }
        }
    }
    /* every TP collective spans the 2 devices */
    for (int d = 0; d < 2; d++) {
        const plan_list *L = plan_dev_list(p, d);
        for (int i = 0; i < L->n; i++)
            if (L->ins[i].op == PLAN_COLL) CU_ASSERT_EQUAL(p->groups[plan_dev_group(p, d, &L->ins[i])].n, 2);
    }
}

static void test_tp2_collectives(void)
{
    compiled *r = compile_fixture("tp2.yaml", NULL);
    ASSERT_COMPILED(r);
    check_tp(r, false);
    compiled_free(r);
}

#define GPT_TINY_REL "configs/models/gpt_tiny.yaml"
#define A100_2_REL "configs/clusters/a100_2.yaml"

static void test_tp2_sp_collectives(void)
{
    compiled *r = compile_fixture("tp2_sp.yaml", NULL);
    ASSERT_COMPILED(r);
    check_tp(r, true);
    compiled_free(r);
}

/* Sequence parallelism keeps the norm input and output of the device's b*s/t tokens (ir/cost.c)
 * and re-gathers them for the backward, as Megatron does (Korthikanti et al. 2022): on tp2_sp
 * (gpt_tiny: b = 1, s = 32, h = 64, bf16; 2 micro-batches) each attention, MLP and head backward
 * of each micro-batch is preceded by one TP all-gather that reads its forward's act buffer and
 * moves 2 * b*s * h * e = 8192 bytes into a comm buffer the backward reads, issued right before
 * it on its stream; the embedding gets none. The activation peak stays one micro-batch's kept
 * activations (the gathered copy is communication memory). After an order that splits the
 * backwards, BI and BW both read it. */
static void check_sp_regathers(compiled *r, bool split)
{
    const plan_set *p = &r->c.plan;
    const ir_dag *g = &r->c.dag;
    const ir_model *mdl = g->model;
    const int m = 2;
    const int64_t want = 2 * (int64_t)r->c.prog.micro_batch * mdl->seq * mdl->hidden *
                         plan_dtype_bytes((plan_dtype)r->c.prog.act_dtype);
    CU_ASSERT_EQUAL(want, 8192);
    for (int d = 0; d < p->ndevices; d++) {
        const plan_list *L = plan_dev_list(p, d);
        int found = 0;
        for (int i = 0; i < L->n; i++) {
            const plan_instr *in = &L->ins[i];
            if (in->op != PLAN_COLL || in->coll != PLAN_ALL_GATHER || in->nreads != 1 ||
                L->bufs[in->reads[0]].mem != PLAN_MEM_ACT)
                continue;
            found++;
            CU_ASSERT_EQUAL(in->bytes, want);
            CU_ASSERT_EQUAL(p->groups[plan_dev_group(p, d, in)].n, 2);
            CU_ASSERT(g->regions[in->region].kind != IR_REGION_EMBED);
            CU_ASSERT_EQUAL_FATAL(in->nwrites, 1);
            CU_ASSERT_EQUAL(L->bufs[in->writes[0]].mem, PLAN_MEM_COMM);
            CU_ASSERT_EQUAL(L->bufs[in->writes[0]].bytes, want);
            /* the act buffer is the one the region's forward of that micro-batch wrote */
            bool fwrote = false;
            for (int j = 0; j < i && !fwrote; j++) {
                const plan_instr *f = &L->ins[j];
                if (f->op != PLAN_COMPUTE || f->pass != PLAN_PASS_F || f->region != in->region || f->mb != in->mb)
                    continue;
                for (int q = 0; q < f->nwrites; q++) fwrote |= f->writes[q] == in->reads[0];
            }
            CU_ASSERT(fwrote);
            /* the next compute is that region's backward (BI when split), on the same stream,
             * and the backwards of (region, mb) that read the gathered buffer are B, or BI and BW */
            int next = -1, readers = 0;
            for (int j = i + 1; j < L->n; j++) {
                const plan_instr *b = &L->ins[j];
                if (b->op != PLAN_COMPUTE) continue;
                if (next < 0) next = j;
                bool reads = false;
                for (int q = 0; q < b->nreads; q++) reads |= b->reads[q] == in->writes[0];
                if (!reads) continue;
                readers++;
                CU_ASSERT(b->region == in->region && b->mb == in->mb);
                CU_ASSERT(split ? b->pass == PLAN_PASS_BI || b->pass == PLAN_PASS_BW : b->pass == PLAN_PASS_B);
            }
            CU_ASSERT_EQUAL(readers, split ? 2 : 1);
            CU_ASSERT_FATAL(next >= 0);
            CU_ASSERT_EQUAL(L->ins[next].region, in->region);
            CU_ASSERT_EQUAL(L->ins[next].mb, in->mb);
            CU_ASSERT_EQUAL(L->ins[next].pass, split ? PLAN_PASS_BI : PLAN_PASS_B);
            CU_ASSERT_EQUAL(L->ins[next].stream, in->stream);
        }
        CU_ASSERT_EQUAL(found, m * (2 * (int)mdl->layers + 1));
        /* one micro-batch's kept activations at a time, each region at its SP size */
        ir_shape s = ir_shape_default();
        s.micro_batch = r->c.prog.micro_batch;
        s.act_dtype = r->c.prog.act_dtype;
        s.param_dtype = r->c.prog.param_dtype;
        s.tp = 2;
        s.sequence_parallel = true;
        double act = 0;
        for (int k = 0; k < g->nregions; k++) act += ir_region_activation_bytes(mdl, &g->regions[k], &s);
        CU_ASSERT_DOUBLE_EQUAL(r->c.stats.dev[d].peak_by_mem[PLAN_MEM_ACT], act, 0.5);
    }
}

static void test_tp2_sp_backward_regather(void)
{
    compiled *r = compile_fixture("tp2_sp.yaml", NULL);
    ASSERT_COMPILED(r);
    check_sp_regathers(r, false);
    compiled_free(r);
    /* the same with split backwards: BW reads the gathered copy too, which lives until BW */
    r = compile_text(GPT_TINY_REL, A100_2_REL,
                     "batch: {global: 2, micro: 1}\n"
                     "annotations: {tp: true}\n"
                     "directives:\n"
                     "  - {op: split, num_microbatches: 2}\n"
                     "  - {op: shard_tensor, filter: {TP: \"*\"}, devices: [0, 1], sequence_parallel: true}\n"
                     "  - op: order\n"
                     "    filters: [{PASS: F, MB: 0}, {PASS: BI, MB: 0}, {PASS: BW, MB: 0}, {PASS: F, MB: 1},\n"
                     "              {PASS: BI, MB: 1}, {PASS: BW, MB: 1}]\n",
                     NULL);
    ASSERT_COMPILED(r);
    check_sp_regathers(r, true);
    compiled_free(r);
    /* on a TP stream of its own, every re-gather goes there (the head's too, whose backward
     * gathers nothing else) */
    r = compile_text(GPT_TINY_REL, A100_2_REL,
                     "batch: {global: 2, micro: 1}\n"
                     "annotations: {tp: true}\n"
                     "directives:\n"
                     "  - {op: split, num_microbatches: 2}\n"
                     "  - {op: shard_tensor, filter: {TP: \"*\"}, devices: [0, 1], sequence_parallel: true, stream: tp}\n",
                     NULL);
    ASSERT_COMPILED(r);
    for (int d = 0; d < r->c.plan.ndevices; d++) {
        const plan_list *L = plan_dev_list(&r->c.plan, d);
        int found = 0;
        for (int i = 0; i < L->n; i++) {
            const plan_instr *in = &L->ins[i];
            if (in->op != PLAN_COLL || in->nreads != 1 || L->bufs[in->reads[0]].mem != PLAN_MEM_ACT) continue;
            found++;
            CU_ASSERT_STRING_EQUAL(L->streams[in->stream], "tp");
        }
        CU_ASSERT_EQUAL(found, 2 * 5);
    }
    compiled_free(r);
}

/* Full recompute of every layer under TP: the MLP keeps nothing, so its recompute reads the
 * attention's recompute through a copy of the all-reduce between them (Megatron re-runs the
 * layer's forward with its communication): per layer and micro-batch one more all-reduce of
 * b*s*h*e bytes than without recompute, each issued after R(attn) and before R(mlp), which both
 * come after the MLP's forward. Under SP the copy is a reduce-scatter and an all-gather, and the
 * attention's recompute first gathers its kept input shard (b*s/t tokens) again, just in time:
 * those gathers never pile up (the comm peak stays one micro-batch's). */
static void test_recompute_chains_communicate(void)
{
    const char *dirs[2] = {"", ", sequence_parallel: true"};
    for (int sp = 0; sp < 2; sp++) {
        char body[1024];
        snprintf(body, sizeof body,
                 "batch: {global: 4, micro: 1}\n"
                 "annotations: {tp: true}\n"
                 "directives:\n"
                 "  - {op: split, num_microbatches: 4}\n"
                 "  - {op: recompute, filter: {REGION: attn}, mode: full}\n"
                 "  - {op: recompute, filter: {REGION: mlp}, mode: full}\n"
                 "  - {op: shard_tensor, filter: {TP: \"*\"}, devices: [0, 1]%s}\n",
                 dirs[sp]);
        compiled *r = compile_text(GPT_TINY_REL, A100_2_REL, body, NULL);
        ASSERT_COMPILED(r);
        const ir_dag *g = &r->c.dag;
        const double bsh = 1.0 * 32 * 64 * 2; /* b*s*h*e, bf16 */
        int layers = 2, m = 4;
        int ar = 0, rs = 0, ag = 0;
        for (size_t v = 0; v < g->nnodes; v++) {
            const ir_node *n = &g->nodes[v];
            if (n->dead || n->pass != PLAN_PASS_R || IR_OP_INFO[n->op].kind != IR_KIND_COLL) continue;
            ar += n->op == IR_OP_ALL_REDUCE;
            rs += n->op == IR_OP_REDUCE_SCATTER;
            ag += n->op == IR_OP_ALL_GATHER;
            /* every copy moves one activation: the all-reduce and the gathers b*s*h*e, the
             * reduce-scatter the same (its input) */
            CU_ASSERT_DOUBLE_EQUAL(n->bytes, bsh, 0.5);
        }
        CU_ASSERT_EQUAL(ar, sp ? 0 : layers * m);
        CU_ASSERT_EQUAL(rs, sp ? layers * m : 0);
        CU_ASSERT_EQUAL(ag, sp ? 2 * layers * m : 0);
        /* in launch order: F(mlp) < R(attn) < the copies < R(mlp) < B(mlp), per micro-batch */
        const plan_set *p = &r->c.plan;
        int attn = -1, mlp = -1;
        for (int q = 0; q < p->nregions; q++) {
            if (strcmp(p->regions[q], "L1.attn") == 0) attn = q;
            if (strcmp(p->regions[q], "L1.mlp") == 0) mlp = q;
        }
        CU_ASSERT_FATAL(attn >= 0 && mlp >= 0);
        const plan_list *L = plan_dev_list(p, 0);
        for (int mb = 0; mb < m; mb++) {
            int f_mlp = -1, r_attn = -1, r_mlp = -1, b_mlp = -1, copies_between = 0;
            for (int i = 0; i < L->n; i++) {
                const plan_instr *in = &L->ins[i];
                if (in->mb != mb) continue;
                if (in->op == PLAN_COMPUTE && in->region == mlp && in->pass == PLAN_PASS_F) f_mlp = i;
                if (in->op == PLAN_COMPUTE && in->region == attn && in->pass == PLAN_PASS_R) r_attn = i;
                if (in->op == PLAN_COMPUTE && in->region == mlp && in->pass == PLAN_PASS_R) r_mlp = i;
                if (in->op == PLAN_COMPUTE && in->region == mlp && in->pass == PLAN_PASS_B) b_mlp = i;
                if (in->op == PLAN_COLL && r_attn >= 0 && r_mlp < 0 && (in->region == attn || in->region == mlp))
                    copies_between++;
            }
            CU_ASSERT(f_mlp < r_attn && r_attn < r_mlp && r_mlp < b_mlp);
            CU_ASSERT(copies_between >= (sp ? 2 : 1));
        }
        /* the copies do not pile up: the comm peak is that of the run without recompute plus at
         * most the one activation the recompute chain has in flight */
        snprintf(body, sizeof body,
                 "batch: {global: 4, micro: 1}\n"
                 "annotations: {tp: true}\n"
                 "directives:\n"
                 "  - {op: split, num_microbatches: 4}\n"
                 "  - {op: shard_tensor, filter: {TP: \"*\"}, devices: [0, 1]%s}\n",
                 dirs[sp]);
        compiled *plain = compile_text(GPT_TINY_REL, A100_2_REL, body, NULL);
        ASSERT_COMPILED(plain);
        if (r->c.stats.dev[0].peak_by_mem[PLAN_MEM_COMM] > plain->c.stats.dev[0].peak_by_mem[PLAN_MEM_COMM] + bsh + 0.5)
            fprintf(stderr, "\n  sp %d: comm peak %.0f with recompute, %.0f without\n", sp,
                    r->c.stats.dev[0].peak_by_mem[PLAN_MEM_COMM], plain->c.stats.dev[0].peak_by_mem[PLAN_MEM_COMM]);
        CU_ASSERT(r->c.stats.dev[0].peak_by_mem[PLAN_MEM_COMM] <=
                  plain->c.stats.dev[0].peak_by_mem[PLAN_MEM_COMM] + bsh + 0.5);
        compiled_free(plain);
        compiled_free(r);
    }
}

/* ---------------------------------------------------------------- 3. golden plans */

static char *read_all(const char *path, size_t *len)
{
    base_buf b = {0};
    base_error e;
    base_error_clear(&e);
    if (base_read_file(path, &b, &e)) {
        fprintf(stderr, "\n  %s\n", e.msg);
        return NULL;
    }
    *len = b.n;
    return b.s ? b.s : xstrdup("");
}

static void report_first_difference(const char *name, const char *got, const char *want)
{
    int line = 1;
    const char *g = got, *w = want, *gl = got, *wl = want;
    while (*g && *g == *w) {
        if (*g == '\n') line++, gl = g + 1, wl = w + 1;
        g++, w++;
    }
    g = gl, w = wl; /* show the whole line */
    const char *ge = strchr(g, '\n'), *we = strchr(w, '\n');
    fprintf(stderr,
            "\n  %s differs from tests/golden/%s.plan at line %d:\n    got:  %.*s\n    want: %.*s\n"
            "  if the change is intended, run tests/golden/regen.sh and review the diff\n",
            name, name, line, (int)(ge ? ge - g : (long)strlen(g)), g, (int)(we ? we - w : (long)strlen(w)), w);
}

static void test_golden_plans(void)
{
    DIR *dir = opendir(test_src_path("tests/fixtures/sched"));
    CU_ASSERT_FATAL(dir != NULL);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        size_t len = strlen(de->d_name);
        if (strncmp(de->d_name, "golden_", 7) != 0 || len < 6 || strcmp(de->d_name + len - 5, ".yaml") != 0)
            continue;
        char stem[256], rel[512];
        snprintf(stem, sizeof stem, "%.*s", (int)(len - 5), de->d_name);
        n++;
        compiled *r = compile_fixture(de->d_name, NULL);
        if (r->rc) fprintf(stderr, "\n  %s: %s\n", de->d_name, r->e.msg);
        CU_ASSERT_EQUAL(r->rc, 0);
        snprintf(rel, sizeof rel, "tests/golden/%s.plan", stem);
        size_t glen = 0;
        char *golden = read_all(test_src_path(rel), &glen);
        CU_ASSERT(golden != NULL);
        if (!r->rc && golden) {
            char *got = plan_text(&r->c.plan);
            bool same = got && strlen(got) == glen && memcmp(got, golden, glen) == 0;
            if (!same && got) report_first_difference(stem, got, golden);
            CU_ASSERT(same);
            free(got);
            /* write -> read -> write: the golden text reads back to a plan that writes the same */
            plan_set q;
            base_error e;
            base_error_clear(&e);
            int rc = plan_read(&q, rel, golden, glen, &e);
            if (rc) fprintf(stderr, "\n  reading %s: %s\n", rel, e.msg);
            CU_ASSERT_EQUAL(rc, 0);
            if (!rc) {
                char *again = plan_text(&q);
                CU_ASSERT(again && strlen(again) == glen && memcmp(again, golden, glen) == 0);
                /* and the plan read back passes the same check with the same peaks */
                plan_stats st;
                CU_ASSERT_EQUAL(plan_check(&q, &st, &e), 0);
                for (int d = 0; d < st.ndevices && d < r->c.stats.ndevices; d++)
                    CU_ASSERT_DOUBLE_EQUAL(st.dev[d].peak_bytes, r->c.stats.dev[d].peak_bytes, 0.5);
                plan_stats_free(&st);
                free(again);
                plan_free(&q);
            }
        }
        free(golden);
        compiled_free(r);
    }
    closedir(dir);
    CU_ASSERT_EQUAL(n, 3);
}

/* ---------------------------------------------------------------- 4. error paths */

#define GPT_TINY "configs/models/gpt_tiny.yaml"
#define MOE_TINY "configs/models/moe_tiny.yaml"
#define A100_2 "configs/clusters/a100_2.yaml"
#define A100_4 "configs/clusters/a100_4.yaml"
#define DGX "configs/clusters/dgx_a100_8.yaml"

/* Each body starts at line 3 of its file (after model and cluster); directives are on the lines
 * the expected locations name. */
static const struct error_case {
    const char *what, *model, *cluster, *body, *want;
} ERROR_CASES[] = {
    {"place filter matches nothing", GPT_TINY, A100_2,
     "batch: {global: 1, micro: 1}\n"
     "directives:\n"
     "  - {op: place, filter: {REGION: head, PASS: BW}, devices: [0]}\n",
     "@:5:5: directive 0 (place): the filter matches no node"},
    {"replicate filter matches nothing", GPT_TINY, A100_2,
     "batch: {global: 2, micro: 1}\n"
     "directives:\n"
     "  - {op: replicate, filter: {LAYER: 1, MB: 1}, devices: [0, 1]}\n",
     "@:5:5: directive 0 (replicate): the filter matches no node"},
    {"recompute filter matches nothing", GPT_TINY, A100_2,
     "batch: {global: 1, micro: 1}\n"
     "directives:\n"
     "  - {op: recompute, filter: {MB: 2}}\n",
     "@:5:5: directive 0 (recompute): the filter matches no forward node"},
    {"order group matches nothing", GPT_TINY, A100_2,
     "batch: {global: 1, micro: 1}\n"
     "directives:\n"
     "  - op: order\n"
     "    filters: [[{PASS: F, MB: 0}], [{PASS: B, MB: 5}]]\n",
     "@:6:36: directive 0 (order): group 2 matches no node"},
    {"order across devices", GPT_TINY, A100_2,
     "batch: {global: 2, micro: 1}\n"
     "annotations: {pp: 2}\n"
     "directives:\n"
     "  - {op: split, num_microbatches: 2}\n"
     "  - {op: place, filter: {PP: 0}, devices: [0]}\n"
     "  - {op: place, filter: {PP: 1}, devices: [1]}\n"
     "  - {op: order, filters: [[{PP: 0, PASS: F, MB: 0}], [{PP: 1, PASS: F, MB: 1}]]}\n",
     "@:9:5: directive 3 (order): group 2 selects 'F L1.attn mb1' on device 1 while earlier nodes "
     "run on device 0; an order applies to one device"},
    {"order makes a cycle", GPT_TINY, A100_2,
     "batch: {global: 1, micro: 1}\n"
     "directives:\n"
     "  - {op: order, filters: [[{PASS: B, MB: 0, REGION: head}], [{PASS: F, MB: 0, REGION: head}]]}\n",
     "@:5:5: directive 0 (order): the training DAG is invalid: it has a cycle 'B head mb0' -> "
     "'order of directive 0' -> 'F head mb0' -> 'B head mb0' ("},
    {"device outside the cluster", GPT_TINY, A100_4,
     "batch: {global: 1, micro: 1}\n"
     "directives:\n"
     "  - {op: place, filter: {}, devices: [0, 9]}\n",
     "@:5:42: directive 0 (place): device 9 does not exist: cluster 'a100_4' has 4 devices (0-3)"},
    {"tensor-parallel degree does not divide heads", GPT_TINY, A100_4,
     "batch: {global: 1, micro: 1}\n"
     "annotations: {tp: true}\n"
     "directives:\n"
     "  - {op: shard_tensor, filter: {TP: \"*\"}, devices: [0, 1, 2]}\n",
     "@:6:5: directive 0 (shard_tensor): tensor-parallel degree 3 must divide heads (4)"},
    {"expert-parallel degree does not divide experts", MOE_TINY, DGX,
     "batch: {global: 3, micro: 1}\n"
     "annotations: {ep: true}\n"
     "directives:\n"
     "  - {op: replicate, filter: {}, devices: [0, 1, 2]}\n"
     "  - {op: shard, filter: {EP: \"*\"}, devices: [0, 1, 2]}\n",
     "@:7:5: directive 1 (shard): expert-parallel degree 3 must divide the 4 experts"},
    {"expert-parallel degree does not divide the DP degree", MOE_TINY, DGX,
     "batch: {global: 2, micro: 1}\n"
     "annotations: {ep: true}\n"
     "directives:\n"
     "  - {op: replicate, filter: {}, devices: [0, 1]}\n"
     "  - {op: shard, filter: {EP: \"*\"}, devices: [0, 1, 2, 3]}\n",
     "@:7:5: directive 1 (shard): expert-parallel degree 4 must divide the data-parallel degree 2 "
     "of 'F L1.moe_experts mb0'"},
    {"ZeRO-2 with the tied embedding and head on two stages", GPT_TINY, DGX,
     "batch: {global: 4, micro: 1}\n"
     "annotations: {pp: 2}\n"
     "directives:\n"
     "  - {op: place, filter: {PP: 0}, devices: [0, 1]}\n"
     "  - {op: replicate, filter: {PP: 0}, devices: [0, 1], zero: 2}\n"
     "  - {op: place, filter: {PP: 1}, devices: [2, 3]}\n"
     "  - {op: replicate, filter: {PP: 1}, devices: [2, 3], zero: 1}\n",
     "@:7:5: directive 1 (replicate): the tied embedding and LM head run on different devices, so "
     "their gradients are summed between the two, but under ZeRO-2 each device keeps only its "
     "piece"},
    {"split after order", GPT_TINY, A100_2,
     "batch: {global: 2, micro: 1}\n"
     "directives:\n"
     "  - {op: order, filters: [[{PASS: F, REGION: embed}], [{PASS: F, REGION: head}]]}\n"
     "  - {op: split, num_microbatches: 2}\n",
     "@:6:5: directive 1 (split): split must come before order and schedule directives"},
    {"second split", GPT_TINY, A100_2,
     "batch: {global: 4, micro: 1}\n"
     "directives:\n"
     "  - {op: split, num_microbatches: 2}\n"
     "  - {op: split, num_microbatches: 2}\n",
     "@:6:5: directive 1 (split): the step is already split into 2 micro-batches; keep one split "
     "directive"},
    {"global batch mismatch", GPT_TINY, A100_2,
     "batch: {global: 6, micro: 1}\n"
     "directives:\n"
     "  - {op: split, num_microbatches: 2}\n"
     "  - {op: replicate, filter: {}, devices: [0, 1]}\n",
     "@:3:8: the global batch is 6 sequences, but micro-batch 1 x 2 micro-batches x data-parallel "
     "degree 2 = 4"},
    {"several devices, neither replicated nor tensor-parallel", GPT_TINY, A100_2,
     "batch: {global: 1, micro: 1}\n"
     "directives:\n"
     "  - {op: place, filter: {}, devices: [0, 1]}\n",
     "@: 'F embed mb0' runs on 2 devices but only 1 of them split it by tensor parallelism; add a "
     "replicate directive"},
    {"replicate devices not a DP group (TP x DP)", GPT_TINY, DGX,
     "batch: {global: 2, micro: 1}\n"
     "annotations: {tp: true}\n"
     "directives:\n"
     "  - {op: place, filter: {}, devices: [0, 1, 2, 3]}\n"
     "  - {op: shard_tensor, filter: {TP: \"*\"}, devices: [0, 1]}\n"
     "  - {op: replicate, filter: {}, devices: [0, 1]}\n",
     "@:8:5: directive 2 (replicate): 'F embed mb0' runs on 4 devices (from device 0); its "
     "data-parallel group through device 0 is [0, 2], not the 2 devices given"},
    {"replicate devices not a DP group (no TP)", GPT_TINY, DGX,
     "batch: {global: 2, micro: 1}\n"
     "directives:\n"
     "  - {op: place, filter: {}, devices: [0, 1, 2, 3]}\n"
     "  - {op: replicate, filter: {}, devices: [0, 1]}\n",
     "@:6:5: directive 1 (replicate): 'F embed mb0' runs on 4 devices whose tensor-parallel degree "
     "is 1, so they form 4 replicas, but 2 devices are given"},
    {"unknown schedule builder", GPT_TINY, A100_2,
     "batch: {global: 1, micro: 1}\n"
     "directives:\n"
     "  - {op: schedule, name: 1f1bb}\n",
     "@:5:26: directive 0 (schedule): unknown schedule '1f1bb'; did you mean '1f1b'?"},
};

static void test_error_paths(void)
{
    for (size_t i = 0; i < BASE_COUNT(ERROR_CASES); i++) {
        const struct error_case *c = &ERROR_CASES[i];
        expect_error(c->what, c->model, c->cluster, c->body, NULL, c->want);
    }
}

/* The same programs minus the mistake compile, so each error above is about that mistake. */
static void test_error_paths_fixed(void)
{
    static const struct {
        const char *model, *cluster, *body;
    } ok[] = {
        {GPT_TINY, DGX,
         "batch: {global: 2, micro: 1}\n"
         "annotations: {tp: true}\n"
         "directives:\n"
         "  - {op: place, filter: {}, devices: [0, 1, 2, 3]}\n"
         "  - {op: shard_tensor, filter: {TP: \"*\"}, devices: [0, 1]}\n"
         "  - {op: replicate, filter: {}, devices: [0, 2]}\n"},
        {GPT_TINY, DGX,
         "batch: {global: 4, micro: 1}\n"
         "directives:\n"
         "  - {op: place, filter: {}, devices: [0, 1, 2, 3]}\n"
         "  - {op: replicate, filter: {}, devices: [0, 1, 2, 3]}\n"},
        {MOE_TINY, DGX,
         "batch: {global: 4, micro: 1}\n"
         "annotations: {ep: true}\n"
         "directives:\n"
         "  - {op: replicate, filter: {}, devices: [0, 1, 2, 3]}\n"
         "  - {op: shard, filter: {EP: \"*\"}, devices: [0, 1, 2, 3]}\n"},
        {GPT_TINY, A100_2,
         "batch: {global: 2, micro: 1}\n"
         "directives:\n"
         "  - {op: split, num_microbatches: 2}\n"
         "  - {op: order, filters: [[{PASS: F, REGION: embed}], [{PASS: F, REGION: head}]]}\n"},
        {GPT_TINY, A100_2,
         "batch: {global: 2, micro: 1}\n"
         "directives:\n"
         "  - {op: place, filter: {}, devices: [0, 1]}\n"
         "  - {op: replicate, filter: {}, devices: [0, 1]}\n"},
    };
    for (size_t i = 0; i < BASE_COUNT(ok); i++) {
        compiled *r = compile_text(ok[i].model, ok[i].cluster, ok[i].body, NULL);
        if (r->rc) fprintf(stderr, "\n  case %zu: %s\n", i, r->e.msg);
        CU_ASSERT_EQUAL(r->rc, 0);
        compiled_free(r);
    }
}

/* ---------------------------------------------------------------- 5. deadlock */

/* deadlock_pp2.yaml: rank 0 sends mb 0's activation first while rank 1 waits for mb 1's. */
static void test_deadlock_bad_order(void)
{
    compiled *r = compile_fixture("deadlock_pp2.yaml", NULL);
    CU_ASSERT_NOT_EQUAL(r->rc, 0);
    const char *m = r->e.msg;
    CU_ASSERT(strncmp(m, "the plan cannot run: deadlock: ", 31) == 0);
    TEST_ASSERT_CONTAINS(m, "2 of 2 devices are not finished");
    /* device 0 is stuck in the send of micro-batch 0 ... */
    const char *d0 = strstr(m, "device 0 (list ");
    const char *d1 = strstr(m, "device 1 (list ");
    CU_ASSERT_FATAL(d0 != NULL && d1 != NULL && d0 < d1);
    char part0[1024];
    snprintf(part0, sizeof part0, "%.*s", (int)(d1 - d0), d0);
    TEST_ASSERT_CONTAINS(part0, "send s=p2p peer=1 tag=");
    TEST_ASSERT_CONTAINS(part0, "mb=0 stage=0 [no recv with tag");
    TEST_ASSERT_CONTAINS(part0, "posted by device 1]");
    /* ... and device 1 in the receive of micro-batch 1 */
    TEST_ASSERT_CONTAINS(d1, "recv s=p2p peer=0 tag=");
    TEST_ASSERT_CONTAINS(d1, "mb=1 stage=1 [no send with tag");
    TEST_ASSERT_CONTAINS(d1, "posted by device 0]");
    compiled_free(r);
}

/* 1F1B's steady state has neighbours sending to each other at once; with sendrecv groups the
 * exchange is posted together and the plan runs, without them every rank blocks in its send. */
static void check_needs_sendrecv_groups(const char *path, int p)
{
    compiled *r = compile_path(path, NULL);
    ASSERT_COMPILED(r);
    int grouped = 0;
    for (int d = 0; d < r->c.plan.ndevices; d++) {
        const plan_list *L = plan_dev_list(&r->c.plan, d);
        for (int i = 0; i < L->n; i++) grouped += L->ins[i].sendrecv != 0;
    }
    CU_ASSERT(grouped > 0);
    compiled_free(r);

    sched_options o = {.no_sendrecv_groups = true};
    r = compile_path(path, &o);
    CU_ASSERT_NOT_EQUAL(r->rc, 0);
    char want[64];
    snprintf(want, sizeof want, "%d of %d devices are not finished", p, p);
    CU_ASSERT(strncmp(r->e.msg, "the plan cannot run: deadlock: ", 31) == 0);
    TEST_ASSERT_CONTAINS(r->e.msg, want);
    for (int d = 0; d < p; d++) {
        char dev[64];
        snprintf(dev, sizeof dev, "device %d (list %d):", d, d);
        TEST_ASSERT_CONTAINS(r->e.msg, dev);
    }
    TEST_ASSERT_CONTAINS(r->e.msg, "send s=p2p");
    TEST_ASSERT_CONTAINS(r->e.msg, "[no recv with tag");
    CU_ASSERT(strstr(r->e.msg, "sendrecv") != NULL); /* the hint names the cure */
    compiled_free(r);
}

static void test_deadlock_without_sendrecv_groups(void)
{
    char *path = fixture("pp4_1f1b_tiny.yaml");
    check_needs_sendrecv_groups(path, 4);
    free(path);
    path = src_path("configs/programs/pp4_1f1b.yaml");
    check_needs_sendrecv_groups(path, 4);
    free(path);
}

/* ---------------------------------------------------------------- 6. memory facts */

/* 1F1B with p = 4, m = 8: rank r holds p - r micro-batches of its stage's saved activations at
 * its peak (formulas.md). Stages of gpt_tiny4: embed + L0, L1, L2, L3 + head. */
static void test_memory_1f1b(void)
{
    compiled *r = compile_fixture("pp4_1f1b_tiny.yaml", NULL);
    ASSERT_COMPILED(r);
    const int p = 4;
    CU_ASSERT_EQUAL_FATAL(r->c.stats.ndevices, p);
    for (int d = 0; d < p; d++) {
        double one = stage_activation_bytes(r, d);
        CU_ASSERT(one > 0);
        double got = r->c.stats.dev[d].peak_by_mem[PLAN_MEM_ACT];
        if (fabs(got - (p - d) * one) > 0.5)
            fprintf(stderr, "\n  rank %d: peak activations %.0f, want %d x %.0f\n", d, got, p - d, one);
        CU_ASSERT_DOUBLE_EQUAL(got, (p - d) * one, 0.5);
    }
    /* the ranks' stages differ (embed and head), but the middle ones are the same stage shape */
    CU_ASSERT_DOUBLE_EQUAL(stage_activation_bytes(r, 1), stage_activation_bytes(r, 2), 0.5);
    compiled_free(r);
}

/* GPipe (all forwards, then all backwards) holds all m micro-batches on every rank. */
static void test_memory_gpipe(void)
{
    compiled *r = compile_fixture("pp4_gpipe_tiny.yaml", NULL);
    ASSERT_COMPILED(r);
    const int p = 4, m = 8;
    CU_ASSERT_EQUAL_FATAL(r->c.stats.ndevices, p);
    for (int d = 0; d < p; d++)
        CU_ASSERT_DOUBLE_EQUAL(r->c.stats.dev[d].peak_by_mem[PLAN_MEM_ACT], m * stage_activation_bytes(r, d), 0.5);
    compiled_free(r);
}

/* ---------------------------------------------------------------- 7. the DAG */

/* A DAG built by hand: F -> B by data, then a temporal edge B -> F closes a cycle; a node fed
 * by the cycle is blocked too but is not part of it. */
static void test_dag_verify_cycle(void)
{
    base_arena a;
    base_arena_init(&a);
    ir_dag g;
    ir_dag_init(&g, &a, NULL, 1);
    int32_t dev0 = 0;
    ir_place p0 = {1, &dev0};
    CU_ASSERT_EQUAL(ir_dag_intern_place(&g, &p0), 0);
    int32_t after = ir_dag_add_node(&g, IR_OP_UPD); /* id 0: blocked, but off the cycle */
    int32_t f = ir_dag_add_node(&g, IR_OP_F), b = ir_dag_add_node(&g, IR_OP_B);
    int32_t r = ir_dag_add_node(&g, IR_OP_R);
    g.nodes[f].mb = g.nodes[b].mb = g.nodes[r].mb = 0;
    int32_t t_fr = ir_dag_add_tensor(&g, f, IR_T_SAVED, 64);
    int32_t t_rb = ir_dag_add_tensor(&g, r, IR_T_RECOMP, 64);
    int32_t t_bu = ir_dag_add_tensor(&g, b, IR_T_GRAD, 64);
    ir_dag_add_edge(&g, f, r, t_fr, IR_EDGE_DATA);
    ir_dag_add_edge(&g, r, b, t_rb, IR_EDGE_DATA);
    ir_dag_add_edge(&g, b, after, t_bu, IR_EDGE_DATA);
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(ir_dag_verify(&g, "by hand", &e), 0);
    ir_dag_add_edge(&g, b, f, -1, IR_EDGE_TEMPORAL);
    CU_ASSERT_NOT_EQUAL(ir_dag_verify(&g, "by hand", &e), 0);
    CU_ASSERT_STRING_EQUAL(e.msg,
                           "by hand: the training DAG is invalid: it has a cycle 'F mb0' -> 'R mb0' "
                           "-> 'B mb0' -> 'F mb0' (4 nodes can never run); an order directive "
                           "probably contradicts the data flow: reorder its groups");
    base_arena_free(&a);
}

/* Other invariants the verifier holds: one producer per tensor, data stays inside a placement. */
static void test_dag_verify_invariants(void)
{
    base_arena a;
    base_arena_init(&a);
    ir_dag g;
    ir_dag_init(&g, &a, NULL, 2);
    int32_t d0 = 0, d1 = 1;
    ir_place p0 = {1, &d0}, p1 = {1, &d1};
    ir_dag_intern_place(&g, &p0);
    int pl1 = ir_dag_intern_place(&g, &p1);
    int32_t u = ir_dag_add_node(&g, IR_OP_F), v = ir_dag_add_node(&g, IR_OP_F);
    int32_t t = ir_dag_add_tensor(&g, u, IR_T_ACT, 8);
    int32_t x = ir_dag_add_edge(&g, v, u, t, IR_EDGE_DATA); /* starts at v, produced by u */
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_NOT_EQUAL(ir_dag_verify(&g, "by hand", &e), 0);
    TEST_ASSERT_CONTAINS(e.msg, "every tensor has one producer");
    g.edges[x].src = u;
    g.edges[x].dst = v;
    g.adj_valid = false;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(ir_dag_verify(&g, "by hand", &e), 0);
    g.nodes[v].place = pl1;
    g.p2p_done = true;
    base_error_clear(&e);
    CU_ASSERT_NOT_EQUAL(ir_dag_verify(&g, "by hand", &e), 0);
    TEST_ASSERT_CONTAINS(e.msg, "'F' on device 0 feeds 'F' on device 1 without a send/receive");
    base_arena_free(&a);
}

/* ---------------------------------------------------------------- the table of passes */

/* What sched_dump_after writes for `pass` while pp2_m4 compiles (through sched_lower unless
 * dag_only); malloc'd, and *rc is the compilation's status. */
static char *dump_after(const char *pass, bool dag_only, int *rc)
{
    char *path = fixture("pp2_m4.yaml");
    sched_compilation c;
    sched_compilation_init(&c);
    base_error e;
    base_error_clear(&e);
    FILE *f = tmpfile();
    CU_ASSERT_FATAL(f != NULL);
    *rc = sched_dump_after(&c, pass, f, &e);
    if (!*rc) *rc = sched_load(&c, path, NULL, NULL, &e);
    if (!*rc) *rc = sched_build_dag(&c, &e);
    if (!*rc && !dag_only) *rc = sched_lower(&c, NULL, &e);
    if (*rc) fprintf(stderr, "\n  %s\n", e.msg);
    long n = ftell(f);
    char *text = calloc((size_t)(n > 0 ? n : 0) + 1, 1);
    rewind(f);
    if (n > 0) CU_ASSERT_EQUAL(fread(text, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    sched_compilation_free(&c);
    free(path);
    return text;
}

static int count_lines_with(const char *text, const char *needle)
{
    int n = 0;
    for (const char *l = text; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
        const char *end = strchr(l, '\n');
        const char *hit = strstr(l, needle);
        n += hit && (!end || hit < end);
    }
    return n;
}

/* Every pass dumps what it leaves (the DAG, the launch order, the plan file), once; the p2p
 * pass is the one that makes pp2_m4's 8 sends; sched_build_dag stops before the plan passes. */
static void test_dump_after_each_pass(void)
{
    int npasses = sched_pass_count();
    CU_ASSERT_EQUAL(npasses, 10);
    CU_ASSERT_PTR_NULL(sched_pass_name(-1));
    CU_ASSERT_PTR_NULL(sched_pass_name(npasses));
    int launch = -1;
    for (int i = 0; i < npasses; i++) {
        const char *name = sched_pass_name(i);
        CU_ASSERT_PTR_NOT_NULL_FATAL(name);
        CU_ASSERT(strlen(sched_pass_what(i)) > 10);
        for (int j = 0; j < i; j++) CU_ASSERT_STRING_NOT_EQUAL(sched_pass_name(j), name);
        if (!strcmp(name, "launch")) launch = i;
        int rc;
        char *text = dump_after(name, false, &rc);
        CU_ASSERT_EQUAL(rc, 0);
        char plan_head[32];
        snprintf(plan_head, sizeof plan_head, "piper-plan %d\n", PLAN_VERSION);
        const char *head = launch < 0 ? "# piper DAG: " : i == launch ? "# piper launch order: " : plan_head;
        if (strncmp(text, head, strlen(head)) != 0)
            fprintf(stderr, "\n  after %s: '%.40s', want '%s'\n", name, text, head);
        CU_ASSERT_EQUAL(strncmp(text, head, strlen(head)), 0);
        CU_ASSERT_EQUAL(count_lines_with(text, head), 1); /* one dump, after that pass only */
        int sends = count_lines_with(text, " SEND ");
        if (!strcmp(name, "directives")) CU_ASSERT_EQUAL(sends, 0);
        if (!strcmp(name, "p2p")) CU_ASSERT_EQUAL(sends, 8);
        free(text);
    }
    CU_ASSERT(launch > 0);
    int rc;
    char *text = dump_after("lower", true, &rc);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_STRING_EQUAL(text, "");
    free(text);
}

/* An unknown pass name is an error that lists every pass, from the table. */
static void test_dump_after_unknown_pass(void)
{
    char want[512] = "no compiler pass is named 'nosuch'; name one of ";
    for (int i = 0; i < sched_pass_count(); i++) {
        if (i) strcat(want, ", ");
        strcat(want, sched_pass_name(i));
    }
    sched_compilation c;
    sched_compilation_init(&c);
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sched_dump_after(&c, "nosuch", stdout, &e), -1);
    CU_ASSERT_STRING_EQUAL(e.msg, want);
    CU_ASSERT(strstr(want, ", p2p, ") != NULL);
    CU_ASSERT_EQUAL(c.dump_pass, -1);
    sched_compilation_free(&c);
}

/* dag_tiny.yaml: gpt_tiny's 6 regions, 3 micro-batches, gradient clipping. */
static void test_dag_node_counts(void)
{
    char *path = fixture("dag_tiny.yaml");
    sched_compilation c;
    sched_compilation_init(&c);
    base_error e;
    base_error_clear(&e);
    int rc = sched_load(&c, path, NULL, NULL, &e);
    if (!rc) rc = sched_build_dag(&c, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    const ir_dag *g = &c.dag;
    CU_ASSERT_EQUAL(g->nregions, 6);
    CU_ASSERT_EQUAL(g->num_microbatches, 3);
    for (int reg = 0; reg < g->nregions; reg++) {
        for (int k = 0; k < 3; k++) {
            CU_ASSERT_EQUAL(count_nodes(g, IR_OP_F, -1, reg, k), 1);
            CU_ASSERT_EQUAL(count_nodes(g, IR_OP_B, -1, reg, k), 1);
        }
        CU_ASSERT_EQUAL(count_nodes(g, IR_OP_UPD, -1, reg, -1), 1);
        CU_ASSERT_EQUAL(count_nodes(g, IR_OP_UPD, -1, reg, -2), 1);
    }
    CU_ASSERT_EQUAL(count_nodes(g, IR_OP_F, -1, -1, -2), 18);
    CU_ASSERT_EQUAL(count_nodes(g, IR_OP_B, -1, -1, -2), 18);
    CU_ASSERT_EQUAL(count_nodes(g, IR_OP_UPD, -1, -1, -2), 6);
    CU_ASSERT_EQUAL(count_nodes(g, IR_OP_GRAD_NORM, -1, -1, -2), 1);
    CU_ASSERT_EQUAL(count_nodes(g, IR_OP_ALL_REDUCE, -1, -1, -2), 1);
    CU_ASSERT_EQUAL(count_nodes(g, IR_OP_SEND, -1, -1, -2), 0);
    CU_ASSERT_EQUAL(ir_dag_live_nodes(g), 18 + 18 + 6 + 2);
    CU_ASSERT_EQUAL(ir_dag_verify(&c.dag, "test", &e), 0);
    /* the world all-reduce of the norm spans the devices that hold parameters: only device 0,
     * the cluster's device 1 runs nothing */
    CU_ASSERT_EQUAL(sched_lower(&c, NULL, &e), 0);
    CU_ASSERT_EQUAL(plan_dev_list(&c.plan, 1)->n, 0);
    CU_ASSERT_EQUAL(count_ops(&c.plan, 0, PLAN_COLL, PLAN_ALL_REDUCE), 1);
    for (int i = 0; i < c.plan.ngroups; i++) CU_ASSERT_EQUAL(c.plan.groups[i].n, 1);
    sched_compilation_free(&c);
    free(path);
}

/* split copies exactly the per-micro-batch nodes, m times: the whole DAG of a pipelined,
 * replicated, tensor-parallel program with m micro-batches has m x the per-micro-batch nodes of
 * the same program with 1, and the same per-step nodes. */
static void test_split_copies(void)
{
    static const char BODY[] =
        "batch: {global: %d, micro: 1}\n"
        "annotations: {pp: 2, tp: true}\n"
        "directives:\n"
        "  - {op: split, num_microbatches: %d}\n"
        "  - {op: place, filter: {PP: 0}, devices: [0, 1, 2, 3]}\n"
        "  - {op: place, filter: {PP: 1}, devices: [4, 5, 6, 7]}\n"
        "  - {op: shard_tensor, filter: {PP: 0, TP: \"*\"}, devices: [0, 1], sequence_parallel: true}\n"
        "  - {op: shard_tensor, filter: {PP: 1, TP: \"*\"}, devices: [4, 5], sequence_parallel: true}\n"
        "  - {op: replicate, filter: {PP: 0}, devices: [0, 2], zero: 1}\n"
        "  - {op: replicate, filter: {PP: 1}, devices: [4, 6], zero: 1}\n";
    int per_mb[2] = {0, 0}, per_step[2] = {0, 0}, mbs[2] = {1, 5};
    for (int i = 0; i < 2; i++) {
        char body[1024];
        snprintf(body, sizeof body, BODY, 2 * mbs[i], mbs[i]);
        compiled *r = compile_text(GPT_TINY, DGX, body, NULL);
        ASSERT_COMPILED(r);
        const ir_dag *g = &r->c.dag;
        CU_ASSERT_EQUAL(g->num_microbatches, mbs[i]);
        int *seen = calloc((size_t)mbs[i], sizeof *seen);
        for (size_t v = 0; v < g->nnodes; v++) {
            const ir_node *x = &g->nodes[v];
            if (x->dead || x->op == IR_OP_ORDER) continue;
            if (x->flags & IR_NODE_PER_MB) {
                per_mb[i]++;
                CU_ASSERT(x->mb >= 0 && x->mb < mbs[i]);
                if (x->mb >= 0 && x->mb < mbs[i]) seen[x->mb]++;
            } else {
                per_step[i]++;
                CU_ASSERT_EQUAL(x->mb, -1);
            }
        }
        for (int k = 1; k < mbs[i]; k++) CU_ASSERT_EQUAL(seen[k], seen[0]);
        free(seen);
        compiled_free(r);
    }
    CU_ASSERT(per_mb[0] > 0);
    CU_ASSERT_EQUAL(per_mb[1], 5 * per_mb[0]);
    CU_ASSERT_EQUAL(per_step[1], per_step[0]);
}

/* ---------------------------------------------------------------- registration */

int piper_tests_register(void)
{
    static const test_case zero[] = {
        {"ZeRO 0-3 model-state memory of 7.5e9 parameters on 64 GPUs", test_zero_table},
        {"the same with fp32 gradients (grad_dtype): 18 bytes a parameter", test_zero_table_fp32_grads},
        {"ZeRO-3 gathers: a few copies alive, not the step's", test_zero3_prefetch_limit},
        {"ZeRO-3 with full recompute of MoE layers has no cycle", test_zero3_full_recompute_moe},
        {"DualPipeV with TP and SP: gradients received through the SP gather", test_dualpipev_tp_sp},
        {"ZB-H1 with ZeRO-2/3 buckets: the weight half waits", test_zb_zero_buckets},
        {"a plan that does not fit is rejected with its breakdown", test_oom_rejected_with_breakdown},
        {"ZeRO 1-3: each device steps its 1/64 piece of the optimizer state", test_zero_optimizer_step_piece},
        {"the cost cache keys on the optimizer step's ZeRO sharding", test_zero_optimizer_step_cache_key},
        {"ZeRO does not shard experts over their own EP group", test_zero_expert_state_not_sharded_over_ep},
        {NULL, NULL},
    };
    static const test_case counts[] = {
        {"DP2 ZeRO-0: 2 buckets, 2 all-reduces", test_dp_bucket_count},
        {"DP2 bucket sizes 66688 / 0 / default and grad-norm", test_dp_bucket_sizes},
        {"DP2 ZeRO 0-3, fp32 gradients: gradient bytes twice, parameter gathers not",
         test_grad_dtype_fp32_volumes},
        {"PP2 m=4: 4 sends each way", test_pp2_sends},
        {"PP4 m=8: 8 sends each way per pair", test_pp4_sends},
        {"TP2: all-reduces per layer and micro-batch", test_tp2_collectives},
        {"TP2+SP: all-gathers and reduce-scatters", test_tp2_sp_collectives},
        {"TP2+SP: the backward re-gathers the kept norm shards", test_tp2_sp_backward_regather},
        {"TP2 (+SP) full recompute: the recompute chain communicates as the forward",
         test_recompute_chains_communicate},
        {NULL, NULL},
    };
    static const test_case golden[] = {
        {"golden plans, byte for byte, and round trip", test_golden_plans},
        {NULL, NULL},
    };
    static const test_case errors[] = {
        {"every error path: message and location", test_error_paths},
        {"the same programs without the mistake compile", test_error_paths_fixed},
        {"deadlock: the two ends of a link disagree", test_deadlock_bad_order},
        {"deadlock: 1F1B without sendrecv groups", test_deadlock_without_sendrecv_groups},
        {NULL, NULL},
    };
    static const test_case memory[] = {
        {"1F1B: rank r holds p - r micro-batches", test_memory_1f1b},
        {"GPipe: every rank holds m micro-batches", test_memory_gpipe},
        {NULL, NULL},
    };
    static const test_case dag[] = {
        {"ir_dag_verify names a hand-built cycle", test_dag_verify_cycle},
        {"ir_dag_verify: producers and placements", test_dag_verify_invariants},
        {"node counts of gpt_tiny's DAG", test_dag_node_counts},
        {"--dump-after: every pass dumps what it leaves", test_dump_after_each_pass},
        {"--dump-after: an unknown pass lists the passes", test_dump_after_unknown_pass},
        {"split copies per-micro-batch nodes m times", test_split_copies},
        {NULL, NULL},
    };
    if (test_add_suite("compile: ZeRO memory", zero) || test_add_suite("compile: instruction counts", counts) ||
        test_add_suite("compile: golden plans", golden) || test_add_suite("compile: errors", errors) ||
        test_add_suite("compile: memory", memory) || test_add_suite("compile: DAG", dag))
        return -1;
    return 0;
}
