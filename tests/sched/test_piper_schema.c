/* test_piper_schema.c — programs written to Piper's schema as its own tools write them
 * (tests/fixtures/piper_schema/, each described in its README.md), compiled with tiny_gpt on
 * cpu_8 and held to what the directives mean in Piper: one gradient collective per region
 * without bucket_size and buckets of bucket_size MiB with it, [tag, value] filters, `device`,
 * quoted integers and null, split's dim_name naming the micro-batch tag, the whole-group
 * shard_tensor and a mesh's tp axis, fuse_collectives merging one region's TP collectives of
 * every micro-batch into one (and leaving them when an order interleaves micro-batches), route,
 * the --micro-batch / --global-batch overrides, and the errors, each with its location. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sched/sched.h"
#include "tests/testutil.h"

/* ---------------------------------------------------------------- helpers */

static char model_path[4096], cluster_path[4096];

static const char *fixture(const char *name)
{
    static char buf[4096];
    char rel[512];
    snprintf(rel, sizeof rel, "tests/fixtures/piper_schema/%s", name);
    snprintf(buf, sizeof buf, "%s", test_src_path(rel));
    return buf;
}

typedef struct compiled {
    sched_compilation c;
    base_error e;
    int rc;
} compiled;

static compiled *compile_file(const char *path, const sched_options *o)
{
    if (!model_path[0]) {
        snprintf(model_path, sizeof model_path, "%s", test_src_path("tests/fixtures/programs/tiny_gpt.yaml"));
        snprintf(cluster_path, sizeof cluster_path, "%s", test_src_path("configs/clusters/cpu_8.yaml"));
    }
    compiled *r = calloc(1, sizeof *r);
    sched_compilation_init(&r->c);
    base_error_clear(&r->e);
    r->rc = sched_compile(&r->c, path, model_path, cluster_path, o, &r->e);
    return r;
}

static compiled *compile_fixture(const char *name, const sched_options *o)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", fixture(name));
    return compile_file(path, o);
}

static void compiled_free(compiled *r)
{
    sched_compilation_free(&r->c);
    free(r);
}

#define ASSERT_COMPILED(r)                                                      \
    do {                                                                        \
        if ((r)->rc) fprintf(stderr, "\n  compilation failed: %s\n", (r)->e.msg); \
        CU_ASSERT_EQUAL((r)->rc, 0);                                            \
        if ((r)->rc) {                                                          \
            compiled_free(r);                                                   \
            return;                                                             \
        }                                                                       \
    } while (0)

/* Collectives of purpose `purpose` in device d's list. */
static int count_purpose(const plan_set *p, int d, plan_purpose purpose)
{
    const plan_list *L = plan_dev_list(p, d);
    int n = 0;
    for (int i = 0; i < L->n; i++) n += L->ins[i].op == PLAN_COLL && L->ins[i].purpose == purpose;
    return n;
}

/* The group size of device d's first collective of purpose `purpose` (0: none). */
static int group_size_of(const plan_set *p, int d, plan_purpose purpose)
{
    const plan_list *L = plan_dev_list(p, d);
    for (int i = 0; i < L->n; i++)
        if (L->ins[i].op == PLAN_COLL && L->ins[i].purpose == purpose)
            return p->groups[plan_dev_group(p, d, &L->ins[i])].n;
    return 0;
}

static int count_op(const plan_set *p, int d, plan_op op)
{
    const plan_list *L = plan_dev_list(p, d);
    int n = 0;
    for (int i = 0; i < L->n; i++) n += L->ins[i].op == op;
    return n;
}

/* The plans of two compilations, byte for byte. */
static bool same_plan(const compiled *a, const compiled *b)
{
    char *pa = NULL, *pb = NULL;
    size_t la = 0, lb = 0;
    FILE *fa = open_memstream(&pa, &la), *fb = open_memstream(&pb, &lb);
    base_error e;
    base_error_clear(&e);
    plan_write(&a->c.plan, fa, &e);
    plan_write(&b->c.plan, fb, &e);
    fclose(fa);
    fclose(fb);
    bool same = la == lb && memcmp(pa, pb, la) == 0;
    free(pa);
    free(pb);
    return same;
}

/* `text` in a temporary file (the loader tells JSON from YAML by the first character); returns
 * the malloc'd path (unlink, free). */
static char *temp_file(const char *text)
{
    char *path = malloc(64);
    snprintf(path, 64, "/tmp/piper_schema_XXXXXX");
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

/* Compiles a bare array and expects an error whose message starts with `want` ('@' = the path). */
static void expect_error(const char *array, const char *want)
{
    char *path = temp_file(array);
    compiled *r = calloc(1, sizeof *r);
    sched_compilation_init(&r->c);
    base_error_clear(&r->e);
    if (!model_path[0]) compiled_free(compile_fixture("dp2.json", NULL));
    r->rc = sched_compile(&r->c, path, model_path, cluster_path, NULL, &r->e);
    char exp[2048];
    size_t o = 0;
    for (const char *p = want; *p && o + 1 < sizeof exp; p++)
        o += *p == '@' ? (size_t)snprintf(exp + o, sizeof exp - o, "%s", path) : (exp[o] = *p, 1);
    exp[o < sizeof exp ? o : sizeof exp - 1] = 0;
    bool ok = r->rc != 0 && strncmp(r->e.msg, exp, strlen(exp)) == 0;
    if (!ok) fprintf(stderr, "\n  expected \"%s\"\n  got (rc %d) \"%s\"\n", exp, r->rc, r->e.msg);
    CU_ASSERT_TRUE(ok);
    compiled_free(r);
    unlink(path);
    free(path);
}

/* tiny_gpt's regions with parameters: embed, 4 x (attn, mlp), head; the TP-annotated ones
 * whose boundary activations Megatron all-reduces: embed and the 8 blocks. */
enum { REGIONS = 10, TP_REGIONS = 9 };

/* ---------------------------------------------------------------- data parallelism */

/* Piper's examples/base-schedules/dp2.json: no bucket_size, so Piper's replicate makes one
 * REDUCE_COMM per region: 10 all-reduces over the 2 devices. */
static void test_dp2_one_collective_per_region(void)
{
    compiled *r = compile_fixture("dp2.json", NULL);
    ASSERT_COMPILED(r);
    CU_ASSERT_TRUE(r->c.prog.from_piper_array);
    CU_ASSERT_EQUAL(r->c.prog.global_batch, 2); /* micro 1 x 1 micro-batch x 2 replicas */
    for (int d = 0; d < 2; d++) {
        CU_ASSERT_EQUAL(count_purpose(&r->c.plan, d, PLAN_PURPOSE_DP_GRAD_SUM), REGIONS);
        CU_ASSERT_EQUAL(group_size_of(&r->c.plan, d, PLAN_PURPOSE_DP_GRAD_SUM), 2);
    }
    compiled_free(r);
}

/* bucket_size: 1 is 1 MiB in a Piper array: tiny_gpt's 410 KiB of gradients fill one bucket.
 * The same number in piper's YAML is 1 byte: every region closes its own bucket, and a warning
 * says which unit it was read in. */
static void test_bucket_size_is_mib(void)
{
    compiled *r = compile_fixture("dp2_bucket_mib.json", NULL);
    ASSERT_COMPILED(r);
    CU_ASSERT_DOUBLE_EQUAL(r->c.prog.directives[1].bucket_bytes, 1048576.0, 0);
    CU_ASSERT_EQUAL(count_purpose(&r->c.plan, 0, PLAN_PURPOSE_DP_GRAD_SUM), 1);
    CU_ASSERT_EQUAL(r->e.nwarn, 0);
    compiled_free(r);

    char *path = temp_file("batch: {global: 2}\n"
                           "directives:\n"
                           "  - {op: place, filter: {}, devices: [0, 1]}\n"
                           "  - {op: replicate, filter: {}, devices: [0, 1], bucket_size: 1}\n");
    r = compile_file(path, NULL);
    ASSERT_COMPILED(r);
    CU_ASSERT_DOUBLE_EQUAL(r->c.prog.directives[1].bucket_bytes, 1.0, 0);
    CU_ASSERT_EQUAL(count_purpose(&r->c.plan, 0, PLAN_PURPOSE_DP_GRAD_SUM), REGIONS);
    char want[512];
    snprintf(want, sizeof want,
             "%s:4:63: directive 1 (replicate): bucket_size = 1 is read as bytes (piper's unit; a "
             "Piper array reads a plain number as MiB); write \"1MiB\" for MiB or \"1B\" to say "
             "bytes",
             path);
    TEST_ASSERT_CONTAINS(r->e.warnings, want);
    compiled_free(r);
    unlink(path);
    free(path);
}

/* route: both of Piper's modes give the plan dp2.json gives (piper's models read their input on
 * the first stage only). */
static void test_route(void)
{
    compiled *a = compile_fixture("dp2.json", NULL), *b = compile_fixture("route_consumers.json", NULL);
    CU_ASSERT_EQUAL(a->rc, 0);
    CU_ASSERT_EQUAL(b->rc, 0);
    if (!a->rc && !b->rc) {
        CU_ASSERT_STRING_EQUAL(b->c.prog.directives[0].route_mode, "consumers");
        CU_ASSERT_TRUE(same_plan(a, b));
    }
    compiled_free(a);
    compiled_free(b);
}

/* ---------------------------------------------------------------- filters and tags */

/* Piper's test harness: the base schedule with `device`, then its appended split (dim_name MB)
 * and build_1f1b_schedule's orders, filters as [tag, value] pairs. 2 stages x 2 replicas, 4
 * micro-batches: each device sends 4 activations forward (or 4 gradients back). */
static void test_harness_1f1b(void)
{
    compiled *r = compile_fixture("harness_1f1b.json", NULL);
    ASSERT_COMPILED(r);
    const ir_program *p = &r->c.prog;
    CU_ASSERT_EQUAL(p->ann.pp_stages, 2);
    CU_ASSERT_EQUAL(p->global_batch, 8);
    CU_ASSERT_EQUAL(p->directives[0].ndevices, 2); /* `device` */
    CU_ASSERT_EQUAL(p->directives[5].groups[2][0].n, 3); /* [["PP", 0], ["MB", 0], ["PASS", "B"]] */
    CU_ASSERT_EQUAL(p->directives[5].groups[2][0].m[1].tag, IR_TAG_MB);
    CU_ASSERT_EQUAL(p->directives[5].groups[2][0].m[2].value, PLAN_PASS_B);
    CU_ASSERT_EQUAL(r->c.dag.num_microbatches, 4);
    for (int d = 0; d < 4; d++) {
        CU_ASSERT_EQUAL(count_op(&r->c.plan, d, PLAN_SEND), 4);
        CU_ASSERT_EQUAL(count_op(&r->c.plan, d, PLAN_RECV), 4);
    }
    compiled_free(r);
}

/* The same program with the micro-batch tag named mb_index by its split (written last, after the
 * orders that use it), quoted integers ("0" is 0) and a mix of pair and map filters: the same
 * plan, byte for byte. */
static void test_custom_tag_quoted_ints(void)
{
    compiled *a = compile_fixture("harness_1f1b.json", NULL), *b = compile_fixture("custom_tag_1f1b.json", NULL);
    CU_ASSERT_EQUAL(a->rc, 0);
    CU_ASSERT_EQUAL(b->rc, 0);
    if (!a->rc && !b->rc) {
        CU_ASSERT_STRING_EQUAL(b->c.prog.mb_tag, "mb_index");
        CU_ASSERT_TRUE(same_plan(a, b));
    }
    compiled_free(a);
    compiled_free(b);
}

/* {"LAYER": null} selects the nodes without a layer (Piper's None): embed and head move to
 * device 1 — their forward and backward for 2 micro-batches and their 2 optimizer steps. */
static void test_null_value(void)
{
    compiled *r = compile_fixture("null_filter.json", NULL);
    ASSERT_COMPILED(r);
    CU_ASSERT_TRUE(r->c.prog.directives[1].filter.m[0].none);
    CU_ASSERT_EQUAL(count_op(&r->c.plan, 1, PLAN_COMPUTE), 2 * 2 * 2 + 2);
    CU_ASSERT_EQUAL(count_op(&r->c.plan, 1, PLAN_SEND), 4);
    compiled_free(r);
}

/* A zero-bubble order as a Piper builder writes it (BI and BW in [tag, value] filters): every
 * backward splits, so each device runs as many BI as BW instructions, and no B. */
static void test_zerobubble_pairs(void)
{
    compiled *r = compile_fixture("zerobubble_p2.json", NULL);
    ASSERT_COMPILED(r);
    for (int d = 0; d < 2; d++) {
        const plan_list *L = plan_dev_list(&r->c.plan, d);
        int n[PLAN_NPASS] = {0};
        for (int i = 0; i < L->n; i++)
            if (L->ins[i].op == PLAN_COMPUTE) n[L->ins[i].pass]++;
        CU_ASSERT_EQUAL(n[PLAN_PASS_B], 0);
        CU_ASSERT_TRUE(n[PLAN_PASS_BI] > 0);
        CU_ASSERT_EQUAL(n[PLAN_PASS_BI], n[PLAN_PASS_BW]);
        CU_ASSERT_EQUAL(n[PLAN_PASS_F] % 4, 0); /* 4 micro-batches of each forward */
    }
    compiled_free(r);
}

/* Interleaved as Piper's builder lays it out: stage s on rank s mod 2. Device 0 computes stages 0
 * and 2 only, and its first backward is stage 2's (the order's B of r + 2 before r). */
static void test_interleaved_pairs(void)
{
    compiled *r = compile_fixture("interleaved_p2_v2.json", NULL);
    ASSERT_COMPILED(r);
    for (int d = 0; d < 2; d++) {
        const plan_list *L = plan_dev_list(&r->c.plan, d);
        int first_b = -1;
        bool other = false;
        for (int i = 0; i < L->n; i++) {
            const plan_instr *in = &L->ins[i];
            if (in->op != PLAN_COMPUTE || in->stage < 0) continue;
            other |= in->stage % 2 != d;
            if (first_b < 0 && in->pass == PLAN_PASS_B) first_b = in->stage;
        }
        CU_ASSERT_FALSE(other);
        CU_ASSERT_EQUAL(first_b, d + 2);
    }
    compiled_free(r);
}

/* ---------------------------------------------------------------- groups and the mesh */

/* shard_tensor names the stage's whole group, as in Piper: 4-way tensor parallelism. */
static void test_shard_tensor_whole_group(void)
{
    compiled *r = compile_fixture("tp_whole_group.json", NULL);
    ASSERT_COMPILED(r);
    CU_ASSERT_EQUAL(group_size_of(&r->c.plan, 0, PLAN_PURPOSE_TP_FWD), 4);
    CU_ASSERT_EQUAL(count_purpose(&r->c.plan, 0, PLAN_PURPOSE_TP_FWD), TP_REGIONS * 2);
    compiled_free(r);
}

/* mesh [[dp, 2], [tp, 2]] over a 4-device stage: shard_tensor and replicate name the whole
 * group; tensor parallelism runs over the tp axis (groups of 2), data parallelism over dp
 * (groups of 2, one 1-MiB bucket), and the batch is 1 x 2 micro-batches x 2 replicas. */
static void test_mesh_tp_dp(void)
{
    compiled *r = compile_fixture("mesh_tp_dp.json", NULL);
    ASSERT_COMPILED(r);
    CU_ASSERT_EQUAL(r->c.prog.global_batch, 4);
    CU_ASSERT_EQUAL(r->c.dp_degree, 2);
    for (int d = 0; d < 4; d++) {
        CU_ASSERT_EQUAL(group_size_of(&r->c.plan, d, PLAN_PURPOSE_TP_FWD), 2);
        CU_ASSERT_EQUAL(group_size_of(&r->c.plan, d, PLAN_PURPOSE_DP_GRAD_SUM), 2);
        CU_ASSERT_EQUAL(count_purpose(&r->c.plan, d, PLAN_PURPOSE_DP_GRAD_SUM), 1);
    }
    compiled_free(r);
}

/* ---------------------------------------------------------------- fuse_collectives */

/* tp_fuse.json: 2-way TP, 4 micro-batches, no order: each TP region's 4 forward all-reduces
 * become one (and so do the backward ones), carrying the 4 micro-batches' bytes. Without the
 * directive, 4 each. */
static void test_fuse_collectives(void)
{
    compiled *f = compile_fixture("tp_fuse.json", NULL);
    ASSERT_COMPILED(f);
    char *path = temp_file("[\n"
                           "  {\"op\": \"place\", \"filter\": {\"PP\": 0}, \"devices\": [0, 1]},\n"
                           "  {\"op\": \"shard_tensor\", \"filter\": {\"TP\": \"*\"}, \"devices\": [0, 1], \"stream\": \"tp_stream\"},\n"
                           "  {\"op\": \"split\", \"filter\": {}, \"dim_name\": \"MB\", \"num_microbatches\": 4}\n"
                           "]\n");
    compiled *u = compile_file(path, NULL);
    unlink(path);
    free(path);
    CU_ASSERT_EQUAL(u->rc, 0);
    for (int d = 0; d < 2 && !u->rc; d++) {
        CU_ASSERT_EQUAL(count_purpose(&u->c.plan, d, PLAN_PURPOSE_TP_FWD), TP_REGIONS * 4);
        CU_ASSERT_EQUAL(count_purpose(&u->c.plan, d, PLAN_PURPOSE_TP_BWD), TP_REGIONS * 4);
        CU_ASSERT_EQUAL(count_purpose(&f->c.plan, d, PLAN_PURPOSE_TP_FWD), TP_REGIONS);
        CU_ASSERT_EQUAL(count_purpose(&f->c.plan, d, PLAN_PURPOSE_TP_BWD), TP_REGIONS);
        /* the per-step gradient syncs are not the micro-batches' collectives: untouched */
        CU_ASSERT_EQUAL(count_purpose(&f->c.plan, d, PLAN_PURPOSE_TP_GRAD_SYNC),
                        count_purpose(&u->c.plan, d, PLAN_PURPOSE_TP_GRAD_SYNC));
        /* one call moves what the four did */
        int64_t fb = 0, ub = 0;
        const plan_list *L = plan_dev_list(&f->c.plan, d), *M = plan_dev_list(&u->c.plan, d);
        for (int i = 0; i < L->n; i++)
            if (L->ins[i].op == PLAN_COLL && L->ins[i].purpose == PLAN_PURPOSE_TP_FWD) fb += L->ins[i].bytes;
        for (int i = 0; i < M->n; i++)
            if (M->ins[i].op == PLAN_COLL && M->ins[i].purpose == PLAN_PURPOSE_TP_FWD) ub += M->ins[i].bytes;
        CU_ASSERT_EQUAL(fb, ub);
    }
    compiled_free(f);
    compiled_free(u);
}

/* Under sequence parallelism the collectives are all-gathers and reduce-scatters: each kind of
 * each region fuses across the 2 micro-batches (9 where there were 18), moving the same bytes;
 * the backward's re-gathers of the kept norm shards, made after the directives, stay per
 * micro-batch. */
static void test_fuse_sequence_parallel(void)
{
    compiled *r = compile_fixture("tp_sp_fuse.json", NULL);
    ASSERT_COMPILED(r);
    const plan_list *L = plan_dev_list(&r->c.plan, 0);
    int n[PLAN_NCOLL][PLAN_NPURPOSE] = {{0}};
    for (int i = 0; i < L->n; i++)
        if (L->ins[i].op == PLAN_COLL) n[L->ins[i].coll][L->ins[i].purpose]++;
    CU_ASSERT_EQUAL(n[PLAN_ALL_GATHER][PLAN_PURPOSE_TP_FWD], TP_REGIONS);
    CU_ASSERT_EQUAL(n[PLAN_REDUCE_SCATTER][PLAN_PURPOSE_TP_FWD], TP_REGIONS);
    CU_ASSERT_EQUAL(n[PLAN_ALL_GATHER][PLAN_PURPOSE_TP_BWD], TP_REGIONS);
    CU_ASSERT_EQUAL(n[PLAN_REDUCE_SCATTER][PLAN_PURPOSE_TP_BWD], TP_REGIONS);
    CU_ASSERT_EQUAL(n[PLAN_ALL_GATHER][PLAN_PURPOSE_SP_REGATHER], TP_REGIONS * 2);
    compiled_free(r);
}

/* Order wins: 1F1B's orders put micro-batch 0's forward before micro-batch 1's, so one region's
 * collectives of the two micro-batches depend on each other and stay apart (Piper leaves such a
 * group unfused too): 2 per region, as without the directive. */
static void test_fuse_order_wins(void)
{
    compiled *r = compile_fixture("tp_fuse_1f1b.json", NULL);
    ASSERT_COMPILED(r);
    int fwd = 0;
    for (int d = 0; d < 4; d += 2) fwd += count_purpose(&r->c.plan, d, PLAN_PURPOSE_TP_FWD);
    CU_ASSERT_EQUAL(fwd, TP_REGIONS * 2);
    compiled_free(r);
}

/* ---------------------------------------------------------------- batch flags */

static void test_batch_overrides(void)
{
    sched_options o = {.micro_batch = 2};
    compiled *r = compile_fixture("harness_1f1b.json", &o);
    ASSERT_COMPILED(r);
    CU_ASSERT_EQUAL(r->c.prog.micro_batch, 2);
    CU_ASSERT_EQUAL(r->c.prog.global_batch, 16); /* 2 x 4 micro-batches x 2 replicas */
    compiled_free(r);
    o = (sched_options){.micro_batch = 2, .global_batch = 7};
    r = compile_fixture("harness_1f1b.json", &o);
    CU_ASSERT_NOT_EQUAL(r->rc, 0);
    TEST_ASSERT_CONTAINS(r->e.msg, "global batch 7 is not a multiple of the micro-batch 2; use a "
                                   "global batch of 6 or 8");
    compiled_free(r);
    o = (sched_options){.global_batch = 12};
    r = compile_fixture("harness_1f1b.json", &o);
    CU_ASSERT_NOT_EQUAL(r->rc, 0); /* 12 != 1 x 4 x 2: the compiler says so */
    compiled_free(r);
}

/* ---------------------------------------------------------------- errors */

#define PLACE2 "[\n  {\"op\": \"place\", \"filter\": {\"PP\": 0}, \"devices\": [0, 1]},\n"

static void test_errors(void)
{
    /* ring_exchange: Piper's context parallelism, not in piper yet */
    char want[1024];
    snprintf(want, sizeof want,
             "%s:4:10: directive 2 (ring_exchange): context parallelism (Piper's ring exchange "
             "of K/V between the ranks of a group) is not yet supported by piper",
             fixture("ring_exchange.json"));
    compiled *r = compile_fixture("ring_exchange.json", NULL);
    CU_ASSERT_NOT_EQUAL(r->rc, 0);
    CU_ASSERT_EQUAL(strncmp(r->e.msg, want, strlen(want)), 0);
    if (strncmp(r->e.msg, want, strlen(want))) fprintf(stderr, "\n  got %s\n", r->e.msg);
    compiled_free(r);
    /* bucket_size: a byte count where Piper wants MiB, and 0, which Piper refuses */
    expect_error(PLACE2 "  {\"op\": \"replicate\", \"filter\": {\"PP\": 0}, \"devices\": [0, 1], \"bucket_size\": 26214400}\n]\n",
                 "@:3:78: directive 1 (replicate): bucket_size = 26214400 is ambiguous: a Piper "
                 "array gives it in MiB (Piper multiplies it by 1024*1024), which makes 25 TiB per "
                 "bucket; give the MiB (e.g. 25) or a unit (\"25MiB\", \"26214400B\")");
    expect_error(PLACE2 "  {\"op\": \"replicate\", \"filter\": {\"PP\": 0}, \"devices\": [0, 1], \"bucket_size\": 0}\n]\n",
                 "@:3:78: directive 1 (replicate): bucket_size = 0; in a Piper array bucket_size "
                 "is in MiB and must be > 0");
    /* pairs that are not [tag, value] */
    expect_error("[\n  {\"op\": \"place\", \"filter\": [[\"PP\", 0, 1]], \"devices\": [0]}\n]\n",
                 "@:2:29: directive 0 (place): a filter must be a map of tag: value, such as {PP: "
                 "0, PASS: F}, or a list of [tag, value] pairs");
    expect_error("[\n  {\"op\": \"place\", \"filter\": [[\"PQ\", 0]], \"devices\": [0]}\n]\n",
                 "@:2:31: directive 0 (place): unknown filter tag 'PQ'; did you mean 'PP'?");
    /* device and devices together */
    expect_error("[\n  {\"op\": \"place\", \"filter\": {}, \"devices\": [0], \"device\": [1]}\n]\n",
                 "@:2:59: directive 0 (place): give 'devices' or 'device', not both (they are one key)");
    /* a mesh that does not multiply to the stage's group */
    expect_error("[\n  {\"op\": \"mesh\", \"axes\": [[\"dp\", 2], [\"tp\", 2]]},\n"
                 "  {\"op\": \"place\", \"filter\": {\"PP\": 0}, \"devices\": [0, 1]}\n]\n",
                 "@:2:3: directive 0 (mesh): the mesh axes multiply to 4, but @:3:3: directive 1 "
                 "(place) places a stage on 2 devices");
    expect_error("[\n  {\"op\": \"mesh\", \"axes\": [[\"dp\", 2], [\"dp\", 2]]}\n]\n",
                 "@:2:39: directive 0 (mesh): axis 'dp' is named twice");
    /* a Piper array's shard_tensor names the whole group */
    expect_error("[\n  {\"op\": \"place\", \"filter\": {\"PP\": 0}, \"devices\": [0, 1, 2, 3]},\n"
                 "  {\"op\": \"shard_tensor\", \"filter\": {\"TP\": \"*\"}, \"devices\": [0, 1]}\n]\n",
                 "@:3:3: directive 1 (shard_tensor): 'F embed mb0' runs on 4 devices (from device "
                 "0), but this Piper array's shard_tensor names 2: in Piper's schema shard_tensor "
                 "names the whole group its nodes run on; name all 4 devices");
    /* route's modes, split's tag name, fuse_collectives in a pipeline without orders */
    expect_error("[\n  {\"op\": \"route\", \"mode\": \"broadcast\"}\n]\n",
                 "@:2:27: directive 0 (route): unknown route mode 'broadcast'; use thread or "
                 "consumers");
    expect_error(PLACE2 "  {\"op\": \"split\", \"filter\": {}, \"dim_name\": \"PP\", \"num_microbatches\": 2}\n]\n",
                 "@:3:45: directive 1 (split): 'PP' is the PP tag already; name the micro-batch tag "
                 "otherwise, such as MB");
    expect_error(PLACE2 "  {\"op\": \"place\", \"filter\": {\"PP\": 1}, \"devices\": [2, 3]},\n"
                 "  {\"op\": \"shard_tensor\", \"filter\": {\"PP\": 0, \"TP\": \"*\"}, \"devices\": [0, 1]},\n"
                 "  {\"op\": \"fuse_collectives\", \"filter\": {\"TP\": \"*\"}}\n]\n",
                 "@:5:3: directive 3 (fuse_collectives): fuse_collectives runs after the orders");
}

int piper_tests_register(void)
{
    static const test_case cases[] = {
        {"dp2.json: one gradient all-reduce per region", test_dp2_one_collective_per_region},
        {"bucket_size is MiB in a Piper array, bytes in YAML (warned)", test_bucket_size_is_mib},
        {"route: both modes, dp2's plan", test_route},
        {"the harness's 1F1B: pairs, device, dim_name MB", test_harness_1f1b},
        {"a split-named tag and quoted integers: the same plan", test_custom_tag_quoted_ints},
        {"null: the nodes without the tag", test_null_value},
        {"zero-bubble orders in pairs: BI and BW", test_zerobubble_pairs},
        {"interleaved orders in pairs: stage s on rank s mod 2", test_interleaved_pairs},
        {"shard_tensor names the whole group", test_shard_tensor_whole_group},
        {"mesh dp x tp: TP and DP groups of 2", test_mesh_tp_dp},
        {"fuse_collectives: one per region where there were 4", test_fuse_collectives},
        {"fuse_collectives under sequence parallelism", test_fuse_sequence_parallel},
        {"fuse_collectives: order wins", test_fuse_order_wins},
        {"--micro-batch and --global-batch", test_batch_overrides},
        {"errors, located", test_errors},
        {NULL, NULL},
    };
    return test_add_suite("Piper's schema", cases);
}
