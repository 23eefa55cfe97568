/* test_sim.c — the simulator against facts with known answers: the cost model's constants, the
 * option parsers and their messages, routes (intra-node transfers take NVLink, inter-node ones the
 * NIC, shared NICs contend), the alpha-beta ring and double-binary-tree formulas for collectives,
 * record/wait and sendrecv semantics, memory by category in simulated time, and the closed forms of a 1F1B
 * pipeline with unit costs (formulas.md) through the real path: program -> piper-compile ->
 * plan -> piper-sim. Hand-built plans come from tests/plan/plan_builder.c. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ir/doc.h"
#include "sim/sim.h"
#include "tests/plan/plan_builder.h"
#include "tests/testutil.h"

#define NEAR(a, b, rel) (fabs((a) - (b)) <= (rel) * fabs(b) + 1e-12)
#define ASSERT_NEAR(a, b, rel)                                                                      \
    do {                                                                                           \
        double a_ = (a), b_ = (b);                                                                 \
        if (!NEAR(a_, b_, rel)) fprintf(stderr, "\n  %s = %.12g, expected %.12g\n", #a, a_, b_);   \
        CU_ASSERT(NEAR(a_, b_, rel));                                                              \
    } while (0)

static char workdir[1024];

/* Paths come from a ring of buffers, so that a few may be used in one expression. */
static char *next_buf(void)
{
    static char ring[8][2048];
    static int at;
    return ring[at++ % 8];
}

static const char *bin_path(const char *name)
{
    char *buf = next_buf();
    const char *b = getenv("PIPER_BINARY_DIR");
    snprintf(buf, 2048, "%.1000s/%.1000s", b ? b : ".", name);
    return buf;
}

static const char *tmp_path(const char *name)
{
    char *buf = next_buf();
    snprintf(buf, 2048, "%.1000s/%.1000s", workdir, name);
    return buf;
}

/* Runs a shell command built printf-style; returns its exit status (-1 when it did not exit). */
static int run_cmdf(const char *fmt, ...) BASE_PRINTF(1, 2);
static int run_cmdf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *cmd = malloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(cmd, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    free(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int suite_init(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(workdir, sizeof workdir, "%s/piper-test-sim-XXXXXX", t && *t ? t : "/tmp");
    return mkdtemp(workdir) ? 0 : -1;
}

static int suite_clean(void) { return run_cmdf("rm -rf '%s'", workdir) == 0 ? 0 : -1; }

/* Options for hand-built plans: exact kernel times (no launch overhead, GEMMs at peak). */
static void exact_options(sim_options *o, const plan_set *p)
{
    sim_options_init(o, p);
    o->costs.launch_overhead = 0;
    o->costs.gemm_eff_large = 1;
}

static int simulate(const plan_set *p, const sim_options *o, sim_result *r)
{
    base_error e;
    base_error_clear(&e);
    plan_stats st;
    if (plan_check(p, &st, &e)) {
        fprintf(stderr, "\n  plan check failed: %s\n", e.msg);
        return -1;
    }
    plan_stats_free(&st);
    int rc = sim_run(p, o, r, &e);
    if (rc) fprintf(stderr, "\n  simulation failed: %s\n", e.msg);
    return rc;
}

/* ---------------------------------------------------------------- cost model and options */

static void test_gemm_efficiency(void)
{
    sim_options o;
    sim_options_init(&o, NULL);
    /* hardware.md: 256 of 312 TFLOP/s for a 16384^3 GEMM */
    ASSERT_NEAR(sim_gemm_efficiency(&o.costs, 16384, 16384, 16384), 256.0 / 312.0, 1e-12);
    double big = sim_gemm_efficiency(&o.costs, 8192, 8192, 8192);
    double skinny = sim_gemm_efficiency(&o.costs, 2048, 2048, 96);
    double tiny = sim_gemm_efficiency(&o.costs, 64, 64, 64);
    CU_ASSERT(big < 256.0 / 312.0 && big > 0.75);
    CU_ASSERT(skinny < big && skinny > 0.2);
    CU_ASSERT(tiny < skinny);
    ASSERT_NEAR(sim_gemm_efficiency(&o.costs, 0, 0, 0), 256.0 / 312.0, 1e-12);
}

static void test_kernel_seconds(void)
{
    sim_options o;
    sim_options_init(&o, NULL);
    plan_gpu g = {.name = "g", .hbm_bw = 2e12};
    g.peak_flops[PLAN_BF16] = 300e12;
    plan_kernel gemm = {.kind = PLAN_KERNEL_GEMM, .dtype = PLAN_BF16, .count = 1, .m = 16384, .n = 16384,
                        .k = 16384, .flops = 2.0 * 16384 * 16384 * 16384, .bytes = 3.0 * 2 * 16384 * 16384};
    double eff = 256.0 / 312.0;
    ASSERT_NEAR(sim_kernel_seconds(&o.costs, &g, &gemm), gemm.flops / (300e12 * eff) + 4e-6, 1e-12);
    plan_kernel mem = {.kind = PLAN_KERNEL_MEM, .dtype = PLAN_BF16, .count = 1, .flops = 1e6, .bytes = 4e9};
    ASSERT_NEAR(sim_kernel_seconds(&o.costs, &g, &mem), 4e9 / 2e12 + 4e-6, 1e-12);
    /* fp8 on a GPU without fp8 units runs at the bf16 rate */
    gemm.dtype = PLAN_FP8;
    ASSERT_NEAR(sim_kernel_seconds(&o.costs, &g, &gemm), gemm.flops / (300e12 * eff) + 4e-6, 1e-12);

    /* a list: G = 2 ms of memory-bound kernels, L = 2 x 1.5 ms of launches; launch_overlap
     * combines them: 0 adds, 1 takes the larger, 0.5 the root of the sum of squares; hbm_eff
     * slows memory-bound kernels */
    plan_kernel two[2] = {{.kind = PLAN_KERNEL_MEM, .dtype = PLAN_BF16, .count = 1, .bytes = 2e9},
                          {.kind = PLAN_KERNEL_MEM, .dtype = PLAN_BF16, .count = 1, .bytes = 2e9}};
    plan_kernel_list kl = {2, two};
    o.costs.launch_overhead = 1.5e-3;
    /* the host model: kernel j is issued at j x launch and runs once issued and once the GPU is
     * free. Launch-bound (1 ms kernels, 1.5 ms launches): the last kernel is issued at 3 ms and
     * ends at 4 ms; the GPU may start at 2 ms without ever waiting again */
    double gpu, lead;
    sim_kernel_list_host(&o.costs, &g, &kl, 1.5e-3, &gpu, &lead);
    ASSERT_NEAR(gpu, 2e-3, 1e-12);
    ASSERT_NEAR(lead, 2e-3, 1e-12);
    ASSERT_NEAR(sim_kernel_list_seconds(&o.costs, &g, &kl), 2 * 1.5e-3 + 1e-3, 1e-12);
    /* GPU-bound (0.5 ms launches): the first launch, then the GPU time */
    o.costs.launch_overhead = 0.5e-3;
    ASSERT_NEAR(sim_kernel_list_seconds(&o.costs, &g, &kl), 0.5e-3 + 2e-3, 1e-12);
    sim_kernel_list_host(&o.costs, &g, &kl, 0, &gpu, &lead);
    ASSERT_NEAR(lead, 0, 0);
    /* backward computes pay launch_bwd when set */
    ASSERT_NEAR(sim_launch_seconds(&o.costs, PLAN_PASS_B), 0.5e-3, 0);
    o.costs.launch_bwd = 0.2e-3;
    ASSERT_NEAR(sim_launch_seconds(&o.costs, PLAN_PASS_BW), 0.2e-3, 0);
    ASSERT_NEAR(sim_launch_seconds(&o.costs, PLAN_PASS_R), 0.5e-3, 0);

    /* the per-list model (launch_model=list) */
    o.costs.launch_model = SIM_LAUNCH_LIST;
    o.costs.launch_overhead = 1.5e-3;
    ASSERT_NEAR(sim_kernel_list_seconds(&o.costs, &g, &kl), 2e-3 + 3e-3, 1e-12);
    o.costs.launch_overlap = 1;
    ASSERT_NEAR(sim_kernel_list_seconds(&o.costs, &g, &kl), 3e-3, 1e-12);
    o.costs.launch_overlap = 0.5;
    ASSERT_NEAR(sim_kernel_list_seconds(&o.costs, &g, &kl), sqrt(2e-3 * 2e-3 + 3e-3 * 3e-3), 1e-12);
    o.costs.launch_overlap = 0;
    o.costs.hbm_eff = 0.5;
    ASSERT_NEAR(sim_kernel_list_seconds(&o.costs, &g, &kl), 4e-3 + 3e-3, 1e-12);
}

/* The host model in the replay: one device, one stream of three 1 ms computes (one kernel each).
 * The host issues a kernel every `launch`; a compute starts once issued and once the GPU is free. */
static double host_queue_step(double launch, const char *sync, int p2p, double *wait)
{
    plan_set p;
    plan_builder b;
    pb_init(&b, &p, 2, 2);
    int k = pb_kernels(&b, 1e9, 0); /* 1 ms */
    pb_device(&b, 0, 0, 0, 0, NULL);
    pb_device(&b, 1, 1, 0, 0, NULL);
    int s0 = pb_stream(&b, 0, "c"), s1 = pb_stream(&b, 1, "r");
    pb_compute(&b, 0, s0, PLAN_PASS_F, k, 0, 0);
    if (p2p) pb_send(&b, 0, s0, 1, 7, 1000, -1);
    pb_compute(&b, 0, s0, PLAN_PASS_F, k, 0, 0);
    pb_compute(&b, 0, s0, PLAN_PASS_F, k, 0, 0);
    if (p2p) pb_recv(&b, 1, s1, 0, 7, 1000, -1);
    sim_options o;
    exact_options(&o, &p);
    o.costs.launch_overhead = launch;
    o.costs.nocomm = true; /* transfers take no time and communication calls no host time */
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sim_costs_parse(&o.costs, sync, &e), 0);
    sim_result r;
    double step = -1;
    if (simulate(&p, &o, &r) == 0) {
        step = r.step_seconds;
        *wait = r.dev[0].launch_wait_seconds;
        sim_result_free(&r);
    }
    pb_done(&b);
    plan_free(&p);
    return step;
}

static void test_host_queue(void)
{
    double wait;
    /* launch-bound: issued at 2, 4, 6 ms; the last ends at 7 ms; the stream waited 2 + 1 + 1 ms */
    ASSERT_NEAR(host_queue_step(2e-3, "host_sync=none", 0, &wait), 3 * 2e-3 + 1e-3, 1e-9);
    ASSERT_NEAR(wait, 4e-3, 1e-9);
    /* GPU-bound: the host runs ahead; only the first launch shows */
    ASSERT_NEAR(host_queue_step(0.5e-3, "host_sync=none", 0, &wait), 0.5e-3 + 3e-3, 1e-9);
    ASSERT_NEAR(wait, 0.5e-3, 1e-9);
    /* a send between the first and the second compute: without synchronisation the host still
     * runs ahead; when the host waits for the send (host_sync=p2p) it issues the second compute
     * only after the first has run: launch + 1 ms, then launch + 1 ms + 1 ms */
    ASSERT_NEAR(host_queue_step(0.5e-3, "host_sync=none", 1, &wait), 0.5e-3 + 3e-3, 1e-9);
    ASSERT_NEAR(host_queue_step(0.5e-3, "host_sync=p2p", 1, &wait), 2 * 0.5e-3 + 3e-3, 1e-9);
    /* launch 0: no host at all */
    ASSERT_NEAR(host_queue_step(0, "host_sync=p2p", 1, &wait), 3e-3, 1e-9);
    /* the per-list model: each list costs launch + GPU time (launch_overlap 0) */
    ASSERT_NEAR(host_queue_step(0.5e-3, "launch_model=list", 0, &wait), 3 * (0.5e-3 + 1e-3), 1e-9);
}

/* The host waits at p2p only where a blocking host cannot deadlock: both devices receive on one
 * stream and send on another; posting the receive first (asynchronous p2p, as DualPipe's plans
 * do) would stop both hosts at their receives, so the replay leaves those waits out and says so;
 * sending first on one device (a blocking order) keeps them. */
static void check_host_block(int ahead, int expect_note)
{
    plan_set p;
    plan_builder b;
    pb_init(&b, &p, 2, 2);
    int k = pb_kernels(&b, 1e9, 0);
    for (int d = 0; d < 2; d++) {
        pb_device(&b, d, d, 0, 0, NULL);
        int c = pb_stream(&b, d, "c"), r = pb_stream(&b, d, "r"), x = pb_stream(&b, d, "x");
        pb_compute(&b, d, c, PLAN_PASS_F, k, 0, 0);
        if (ahead || d == 1) pb_recv(&b, d, r, 1 - d, 1 - d, 1000, -1);
        pb_send(&b, d, x, 1 - d, d, 1000, -1);
        if (!ahead && d == 0) pb_recv(&b, d, r, 1, 1, 1000, -1);
    }
    sim_options o;
    exact_options(&o, &p);
    o.costs.launch_overhead = 1e-4;
    sim_result r;
    CU_ASSERT_EQUAL_FATAL(simulate(&p, &o, &r), 0);
    CU_ASSERT_EQUAL(r.host_note[0] != 0, expect_note);
    if (expect_note) TEST_ASSERT_CONTAINS(r.host_note, "deadlocks this plan");
    sim_result_free(&r);
    pb_done(&b);
    plan_free(&p);
}

static void test_host_block(void)
{
    check_host_block(1, 1);
    check_host_block(0, 0);
}

static void test_link_defaults(void)
{
    sim_links l;
    sim_links_default(&l, "A100-80GB");
    ASSERT_NEAR(l.nvlink_bw, 300e9, 0);
    ASSERT_NEAR(l.nic_bw, 25e9, 0);
    sim_links_default(&l, "H100");
    ASSERT_NEAR(l.nvlink_bw, 450e9, 0);
    ASSERT_NEAR(l.nic_bw, 50e9, 0);
    sim_links_default(&l, "H800");
    ASSERT_NEAR(l.nvlink_bw, 200e9, 0);
    ASSERT_NEAR(l.nvlink_latency, 1e-6, 0);
    ASSERT_NEAR(l.nic_latency, 5e-6, 0);
    CU_ASSERT_EQUAL(l.gpus_per_nic, 1);
}

static void test_links_parse(void)
{
    sim_links l;
    sim_links_default(&l, "H100");
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sim_links_parse(&l, "nvlink_bw=300GB/s, nic_bw=200Gb/s,nic_lat=4us,nvlink_lat=500ns,"
                                        "gpus_per_nic=2,nodes_per_leaf=4,oversubscription=2,pcie_bw=64e9",
                                    &e), 0);
    ASSERT_NEAR(l.nvlink_bw, 300e9, 1e-15);
    ASSERT_NEAR(l.nic_bw, 25e9, 1e-15);
    ASSERT_NEAR(l.nic_latency, 4e-6, 1e-15);
    ASSERT_NEAR(l.nvlink_latency, 5e-7, 1e-15);
    ASSERT_NEAR(l.pcie_bw, 64e9, 0);
    CU_ASSERT_EQUAL(l.gpus_per_nic, 2);
    CU_ASSERT_EQUAL(l.nodes_per_leaf, 4);
    ASSERT_NEAR(l.oversubscription, 2, 0);

    base_error_clear(&e);
    CU_ASSERT_EQUAL(sim_links_parse(&l, "nvlink_bw=fast", &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "--links: 'nvlink_bw=fast' is not a valid bandwidth");
    TEST_ASSERT_CONTAINS(e.msg, "nvlink_bw=300GB/s");
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sim_links_parse(&l, "nic_lat=5 parsecs", &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "latency");
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sim_links_parse(&l, "gpus_per_nic=0", &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "whole number >= 1");
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sim_links_parse(&l, "nvswitch_bw=1GB/s", &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "unknown key 'nvswitch_bw'");
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sim_links_parse(&l, "nic_bw=1GB/s,,", &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "empty item");
}

static void test_costs_parse(void)
{
    sim_options o;
    sim_options_init(&o, NULL);
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sim_costs_parse(&o.costs, "unit:F=1,B=2,BI=1,BW=500ms", &e), 0);
    CU_ASSERT(o.costs.unit);
    ASSERT_NEAR(o.costs.unit_pass[PLAN_PASS_F], 1, 0);
    ASSERT_NEAR(o.costs.unit_pass[PLAN_PASS_B], 2, 0);
    ASSERT_NEAR(o.costs.unit_pass[PLAN_PASS_BW], 0.5, 1e-15);
    ASSERT_NEAR(o.costs.unit_pass[PLAN_PASS_R], 0, 0);
    CU_ASSERT(!o.costs.nocomm);
    CU_ASSERT_EQUAL(sim_costs_parse(&o.costs, "nocomm,launch=2us,gemm_eff=0.5,gemm_half=64", &e), 0);
    CU_ASSERT(o.costs.nocomm);
    ASSERT_NEAR(o.costs.launch_overhead, 2e-6, 1e-15);
    ASSERT_NEAR(o.costs.gemm_eff_large, 0.5, 0);
    ASSERT_NEAR(o.costs.gemm_half_dim, 64, 0);

    base_error_clear(&e);
    CU_ASSERT_EQUAL(sim_costs_parse(&o.costs, "F=1", &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "outside a unit list; write unit:F=1");
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sim_costs_parse(&o.costs, "unit:F=x", &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "'F=x' is not a duration");
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sim_costs_parse(&o.costs, "gemm_eff=2", &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "gemm_eff=0.8");
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sim_costs_parse(&o.costs, "cheap", &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "unknown item 'cheap'");

    /* the launch model and the host's synchronisation points */
    CU_ASSERT_EQUAL(o.costs.launch_model, SIM_LAUNCH_HOST);
    CU_ASSERT_EQUAL(sim_costs_parse(&o.costs, "launch_model=list,host_sync=norm+p2p,launch_bwd=10us", &e), 0);
    CU_ASSERT_EQUAL(o.costs.launch_model, SIM_LAUNCH_LIST);
    CU_ASSERT_EQUAL(o.costs.host_sync, SIM_SYNC_P2P | SIM_SYNC_NORM);
    CU_ASSERT_STRING_EQUAL(sim_host_sync_name(o.costs.host_sync), "p2p+norm");
    ASSERT_NEAR(o.costs.launch_bwd, 10e-6, 1e-15);
    CU_ASSERT_EQUAL(sim_costs_parse(&o.costs, "host_sync=none", &e), 0);
    CU_ASSERT_EQUAL(o.costs.host_sync, 0u);
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sim_costs_parse(&o.costs, "host_sync=p2p+often", &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "'host_sync=p2p+often' is not a set of synchronisation points");
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sim_costs_parse(&o.costs, "launch_model=fast", &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "write launch_model=host");
}

/* Calibration files: the entry of the longest matching GPU type applies; errors name file:line;
 * the plan's calib keys (the cluster file's) apply over it, unknown ones are warnings. */
static void test_calibration(void)
{
    sim_options o;
    sim_options_init(&o, NULL);
    base_error e;
    base_error_clear(&e);
    char entry[32];
    const char *text = "# constants\n"
                       "A100 launch=50us gemm_eff=0.7   # a comment\n"
                       "\n"
                       "a100-80 hbm_eff=0.6, launch_overlap=0.5\n"
                       "H100 launch=9us\n";
    CU_ASSERT_EQUAL(sim_calibration_apply(&o.costs, "A100-80GB", "c.txt", text, entry, sizeof entry, &e), 0);
    CU_ASSERT_STRING_EQUAL(entry, "a100-80");
    ASSERT_NEAR(o.costs.hbm_eff, 0.6, 0);
    ASSERT_NEAR(o.costs.launch_overlap, 0.5, 0);
    ASSERT_NEAR(o.costs.launch_overhead, 4e-6, 0); /* the A100 line did not apply */
    sim_options_init(&o, NULL);
    CU_ASSERT_EQUAL(sim_calibration_apply(&o.costs, "A100-40GB", "c.txt", text, entry, sizeof entry, &e), 0);
    CU_ASSERT_STRING_EQUAL(entry, "A100");
    ASSERT_NEAR(o.costs.launch_overhead, 50e-6, 1e-15);
    ASSERT_NEAR(o.costs.gemm_eff_large, 0.7, 0);
    sim_options_init(&o, NULL);
    CU_ASSERT_EQUAL(sim_calibration_apply(&o.costs, "cpu", "c.txt", text, entry, sizeof entry, &e), 0);
    CU_ASSERT_STRING_EQUAL(entry, "");
    ASSERT_NEAR(o.costs.launch_overhead, 4e-6, 0);
    CU_ASSERT_EQUAL(sim_calibration_apply(&o.costs, "H100", "c.txt", "H100 launch=fast\n", entry, sizeof entry, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "c.txt:1: 'launch=fast' is not valid");
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sim_calibration_apply(&o.costs, "H100", "c.txt", "#\nlaunch=1us\n", entry, sizeof entry, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "c.txt:2: a line must start with a GPU type");
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sim_calibration_apply(&o.costs, "H100", "c.txt", "H100 nocomm\n", entry, sizeof entry, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "not constants");
    /* the built-in file has an A100 entry */
    base_error_clear(&e);
    sim_options_init(&o, NULL);
    CU_ASSERT_EQUAL(sim_calibration_apply(&o.costs, "A100-80GB", "built-in", sim_calibration_builtin, entry,
                                          sizeof entry, &e), 0);
    CU_ASSERT_STRING_EQUAL(entry, "A100");

    /* the plan's calib keys */
    plan_set p;
    plan_init(&p);
    plan_calib cal[] = {{"launch", 2e-5}, {"hbm_eff", 0.9}, {"gemm_efficiency", 0.5}};
    p.calib = cal;
    p.ncalib = 3;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sim_calibration_apply_plan(&o.costs, &p, &e), 0);
    ASSERT_NEAR(o.costs.launch_overhead, 2e-5, 0);
    ASSERT_NEAR(o.costs.hbm_eff, 0.9, 0);
    CU_ASSERT_EQUAL(e.nwarn, 1);
    TEST_ASSERT_CONTAINS(e.warnings, "calibration 'gemm_efficiency' = 0.5 is not a cost-model constant");
    p.calib = NULL;
    p.ncalib = 0;
    plan_free(&p);
}

static void test_platform_xml(void)
{
    plan_set p;
    plan_builder b;
    pb_init(&b, &p, 4, 1);
    pb_stream(&b, 0, "s");
    for (int d = 0; d < 4; d++) p.devices[d].node = d / 2;
    sim_links l;
    sim_links_default(&l, "A100");
    base_buf x = {0};
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sim_platform_xml(&p, &l, false, &x, &e), 0);
    TEST_ASSERT_CONTAINS(x.s, "routing=\"DijkstraCache\"");
    TEST_ASSERT_CONTAINS(x.s, "<host id=\"gpu3\" speed=\"1e9f\"/>");
    TEST_ASSERT_CONTAINS(x.s, "<link id=\"nvlink0\" bandwidth=\"300000000000Bps\" latency=\"4.9999999999999998e-07s\" "
                              "sharing_policy=\"SPLITDUPLEX\"/>");
    TEST_ASSERT_CONTAINS(x.s, "<route src=\"gpu0\" dst=\"nvswitch0\" symmetrical=\"NO\"><link_ctn id=\"nvlink0\" "
                              "direction=\"UP\"/></route>");
    TEST_ASSERT_CONTAINS(x.s, "<link id=\"niclink1.1\" bandwidth=\"25000000000Bps\"");
    CU_ASSERT(strstr(x.s, "spine") == NULL); /* two nodes fit one leaf */
    base_buf_free(&x);
    pb_done(&b);
    plan_free(&p);
}

/* ---------------------------------------------------------------- routes */

/* Two nodes of two GPUs; device 0 sends `bytes` to device 1 (same node) on one stream while
 * device 3 (other node) sends `bytes` to device 0: different links, no contention. */
static void build_routes(plan_set *p, plan_builder *b, int64_t bytes, int cross_only)
{
    pb_init(b, p, 4, 4);
    for (int d = 0; d < 4; d++) {
        p->devices[d].node = d / 2;
        pb_device(b, d, d, 0, 0, NULL);
        pb_stream(b, d, "a");
        pb_stream(b, d, "b");
    }
    if (!cross_only) {
        pb_send(b, 0, 0, 1, 1, bytes, -1);
        pb_recv(b, 1, 0, 0, 1, bytes, -1);
    }
    pb_send(b, 3, 0, 0, 2, bytes, -1);
    pb_recv(b, 0, 1, 3, 2, bytes, -1);
}

static void test_routes_nvlink_and_nic(void)
{
    plan_set p;
    plan_builder b;
    build_routes(&p, &b, 1000000000, 0);
    sim_options o;
    exact_options(&o, &p);
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(sim_links_parse(&o.links, "nvlink_bw=100GB/s,nvlink_lat=2us,nic_bw=10GB/s,nic_lat=6us", &e), 0);
    sim_result r;
    CU_ASSERT_EQUAL_FATAL(simulate(&p, &o, &r), 0);
    ASSERT_NEAR(r.dev[1].end_seconds, 2e-6 + 1e9 / 100e9, 1e-9);  /* NVLink */
    ASSERT_NEAR(r.dev[3].end_seconds, 6e-6 + 1e9 / 10e9, 1e-9);   /* NIC */
    ASSERT_NEAR(r.step_seconds, 6e-6 + 1e9 / 10e9, 1e-9);
    ASSERT_NEAR(r.dev[0].bytes_sent, 1e9, 0);
    /* the transfers are the only activity: all of it exposed communication */
    ASSERT_NEAR(r.dev[3].exposed_comm_seconds, 6e-6 + 1e9 / 10e9, 1e-9);
    ASSERT_NEAR(r.dev[3].idle_seconds, 0, 1e-9);
    ASSERT_NEAR(r.dev[1].idle_seconds, r.step_seconds - r.dev[1].end_seconds, 1e-6);
    sim_result_free(&r);
    pb_done(&b);
    plan_free(&p);
}

static void test_routes_shared_nic(void)
{
    /* devices 0 and 1 share node 0's one NIC (gpus_per_nic=2): their sends to node 1 split it */
    plan_set p;
    plan_builder b;
    pb_init(&b, &p, 4, 4);
    for (int d = 0; d < 4; d++) {
        p.devices[d].node = d / 2;
        pb_device(&b, d, d, 0, 0, NULL);
        pb_stream(&b, d, "a");
    }
    pb_send(&b, 0, 0, 2, 1, 1000000000, -1);
    pb_recv(&b, 2, 0, 0, 1, 1000000000, -1);
    pb_send(&b, 1, 0, 3, 1, 1000000000, -1);
    pb_recv(&b, 3, 0, 1, 1, 1000000000, -1);
    sim_options o;
    exact_options(&o, &p);
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(sim_links_parse(&o.links, "nic_bw=10GB/s,nic_lat=6us,gpus_per_nic=2", &e), 0);
    sim_result r;
    CU_ASSERT_EQUAL_FATAL(simulate(&p, &o, &r), 0);
    ASSERT_NEAR(r.dev[2].end_seconds, 6e-6 + 2 * 1e9 / 10e9, 1e-9);
    ASSERT_NEAR(r.dev[3].end_seconds, 6e-6 + 2 * 1e9 / 10e9, 1e-9);
    sim_result_free(&r);

    /* with a NIC each they do not contend */
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(sim_links_parse(&o.links, "gpus_per_nic=1", &e), 0);
    CU_ASSERT_EQUAL_FATAL(simulate(&p, &o, &r), 0);
    ASSERT_NEAR(r.dev[2].end_seconds, 6e-6 + 1e9 / 10e9, 1e-9);
    sim_result_free(&r);
    pb_done(&b);
    plan_free(&p);
}

static void test_routes_nvlink_when_nic_shared(void)
{
    /* a shared NIC is a path between the GPUs on it too: it must not win over NVLink */
    plan_set p;
    plan_builder b;
    build_routes(&p, &b, 1000000000, 0);
    sim_options o;
    exact_options(&o, &p);
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(sim_links_parse(&o.links, "nvlink_bw=100GB/s,nvlink_lat=2us,nic_bw=10GB/s,gpus_per_nic=2,"
                                                    "pcie_bw=1000GB/s", &e), 0);
    sim_result r;
    CU_ASSERT_EQUAL_FATAL(simulate(&p, &o, &r), 0);
    ASSERT_NEAR(r.dev[1].end_seconds, 2e-6 + 1e9 / 100e9, 1e-9);
    sim_result_free(&r);
    pb_done(&b);
    plan_free(&p);
}

static void test_nocomm(void)
{
    plan_set p;
    plan_builder b;
    build_routes(&p, &b, 1000000000, 0);
    sim_options o;
    exact_options(&o, &p);
    o.costs.nocomm = true;
    sim_result r;
    CU_ASSERT_EQUAL_FATAL(simulate(&p, &o, &r), 0);
    ASSERT_NEAR(r.step_seconds, 0, 0);
    sim_result_free(&r);
    pb_done(&b);
    plan_free(&p);
}

/* ---------------------------------------------------------------- p2p and streams */

static void test_sendrecv_exchange(void)
{
    /* both neighbours send and receive in one sendrecv group: full duplex, one transfer's time */
    plan_set p;
    plan_builder b;
    pb_init(&b, &p, 2, 2);
    for (int d = 0; d < 2; d++) {
        pb_device(&b, d, d, 0, 0, NULL);
        pb_stream(&b, d, "pp");
        int s = pb_send(&b, d, 0, 1 - d, 10 + d, 300000000, -1);
        int rcv = pb_recv(&b, d, 0, 1 - d, 11 - d, 300000000, -1);
        pb_at(&b, d, s)->sendrecv = 1;
        pb_at(&b, d, rcv)->sendrecv = 1;
    }
    sim_options o;
    exact_options(&o, &p);
    sim_result r;
    CU_ASSERT_EQUAL_FATAL(simulate(&p, &o, &r), 0);
    ASSERT_NEAR(r.step_seconds, 1e-6 + 3e8 / 300e9, 1e-9); /* A100 defaults: 300 GB/s, 1 us */
    sim_result_free(&r);
    pb_done(&b);
    plan_free(&p);
}

static void test_record_wait_and_sharing(void)
{
    /* device 0: stream c computes 1 s, records; stream x waits, then sends 3e8 bytes to device 1.
     * device 1: streams c and d each compute 1 s at the same time: they share the GPU (2 s). */
    plan_set p;
    plan_builder b;
    pb_init(&b, &p, 2, 2);
    int k = pb_kernels(&b, 1e12, 0); /* 1 s at the builder GPU's 1e12 FLOP/s */
    pb_device(&b, 0, 0, 0, 0, NULL);
    pb_device(&b, 1, 1, 0, 0, NULL);
    int c0 = pb_stream(&b, 0, "c"), x0 = pb_stream(&b, 0, "x");
    p.lists[0].nevents = 1;
    pb_compute(&b, 0, c0, PLAN_PASS_F, k, 0, 0);
    pb_record(&b, 0, c0, 0);
    pb_wait(&b, 0, x0, 0);
    pb_send(&b, 0, x0, 1, 5, 300000000, -1);
    int c1 = pb_stream(&b, 1, "c"), d1 = pb_stream(&b, 1, "d"), r1 = pb_stream(&b, 1, "r");
    pb_compute(&b, 1, c1, PLAN_PASS_F, k, 0, 1);
    pb_compute(&b, 1, d1, PLAN_PASS_B, k, 0, 1);
    pb_recv(&b, 1, r1, 0, 5, 300000000, -1);
    sim_options o;
    exact_options(&o, &p);
    sim_result r;
    CU_ASSERT_EQUAL_FATAL(simulate(&p, &o, &r), 0);
    double xfer = 1e-6 + 3e8 / 300e9;
    ASSERT_NEAR(r.dev[0].end_seconds, 1 + xfer, 1e-9);
    ASSERT_NEAR(r.dev[0].compute_seconds, 1, 1e-9);
    ASSERT_NEAR(r.dev[0].exposed_comm_seconds, xfer, 1e-6);
    ASSERT_NEAR(r.dev[1].compute_seconds, 2, 1e-9);
    /* device 1's receive overlaps its compute: nothing exposed */
    ASSERT_NEAR(r.dev[1].exposed_comm_seconds, 0, 1e-9);
    ASSERT_NEAR(r.dev[1].end_seconds, 2, 1e-9);
    ASSERT_NEAR(r.step_seconds, 2, 1e-9);
    ASSERT_NEAR(r.dev[0].idle_seconds, 2 - 1 - xfer, 1e-6);
    CU_ASSERT_EQUAL(r.critical_device, 1);
    CU_ASSERT_EQUAL(r.last_device, 1);
    /* 1e12 GEMM FLOPs of F on device 0; F and B on device 1 */
    ASSERT_NEAR(r.model_flops, 3e12, 0);
    ASSERT_NEAR(r.mfu, 3e12 / (2 * 1e12 * 2), 1e-9);
    sim_result_free(&r);
    pb_done(&b);
    plan_free(&p);
}

/* --costs comm_slowdown=s: compute runs at (1 - s) of its speed while a transfer of its device is
 * in flight. Device 0 computes 1 s while sending for x = 0.1 s: it ends at 1 + s x. */
static void test_comm_slowdown(void)
{
    plan_set p;
    plan_builder b;
    pb_init(&b, &p, 2, 2);
    int k = pb_kernels(&b, 1e12, 0); /* 1 s */
    pb_device(&b, 0, 0, 0, 0, NULL);
    pb_device(&b, 1, 1, 0, 0, NULL);
    int c0 = pb_stream(&b, 0, "c"), x0 = pb_stream(&b, 0, "x");
    pb_compute(&b, 0, c0, PLAN_PASS_F, k, 0, 0);
    pb_send(&b, 0, x0, 1, 5, 30000000000, -1);
    int r1 = pb_stream(&b, 1, "r");
    pb_recv(&b, 1, r1, 0, 5, 30000000000, -1);
    sim_options o;
    exact_options(&o, &p);
    double x = 1e-6 + 3e10 / 300e9;
    for (int i = 0; i < 2; i++) {
        double slow = i ? 0.25 : 0;
        o.costs.comm_slowdown = slow;
        sim_result r;
        CU_ASSERT_EQUAL_FATAL(simulate(&p, &o, &r), 0);
        ASSERT_NEAR(r.dev[0].end_seconds, 1 + slow * x, 1e-9);
        ASSERT_NEAR(r.dev[0].compute_seconds, 1 + slow * x, 1e-9);
        ASSERT_NEAR(r.dev[1].end_seconds, x, 1e-9); /* device 1 computes nothing: unaffected */
        sim_result_free(&r);
    }
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sim_costs_parse(&o.costs, "comm_slowdown=0.6", &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "comm_slowdown=0.1 (a fraction, 0 <= x <= 0.5)");
    pb_done(&b);
    plan_free(&p);
}

/* ---------------------------------------------------------------- collectives */

static void build_coll(plan_set *p, plan_builder *b, int n, plan_coll kind, int64_t bytes)
{
    pb_init(b, p, n, 1);
    int32_t members[64];
    for (int d = 0; d < n; d++) members[d] = d;
    pb_group(b, "dp", n, members);
    pb_stream(b, 0, "dp");
    for (int d = 0; d < n; d++) pb_device(b, d, 0, 0, 1, (int32_t[]){0});
    pb_coll(b, 0, 0, kind, 0, bytes, -1);
}

static void check_ring(int n, plan_coll kind, sim_coll_algo algo, double factor, int steps)
{
    plan_set p;
    plan_builder b;
    int64_t bytes = 1 << 30;
    build_coll(&p, &b, n, kind, bytes);
    sim_options o;
    exact_options(&o, &p);
    o.coll = algo;
    sim_result r;
    CU_ASSERT_EQUAL_FATAL(simulate(&p, &o, &r), 0);
    /* formulas.md: a ring moves factor * S through each link, one latency per step */
    double alpha = 1e-6, beta = 300e9;
    double want = steps * alpha + factor * (double)bytes / beta;
    ASSERT_NEAR(r.step_seconds, want, 0.01);
    for (int d = 0; d < n; d++) ASSERT_NEAR(r.dev[d].end_seconds, r.step_seconds, 1e-9);
    ASSERT_NEAR(r.dev[0].exposed_comm_seconds, r.step_seconds, 1e-9);
    sim_result_free(&r);
    pb_done(&b);
    plan_free(&p);
}

static void test_ring_all_reduce(void)
{
    check_ring(4, PLAN_ALL_REDUCE, SIM_COLL_RING, 2.0 * 3 / 4, 6);
    check_ring(8, PLAN_ALL_REDUCE, SIM_COLL_RING, 2.0 * 7 / 8, 14);
    check_ring(4, PLAN_ALL_REDUCE, SIM_COLL_RING_STEPS, 2.0 * 3 / 4, 6);
}

static void test_ring_gather_scatter_a2a(void)
{
    check_ring(4, PLAN_ALL_GATHER, SIM_COLL_RING, 3.0 / 4, 3);
    check_ring(4, PLAN_REDUCE_SCATTER, SIM_COLL_RING_STEPS, 3.0 / 4, 3);
    /* all-to-all: each sends S/n to every other member at once; its NVLink carries (n-1)/n S */
    check_ring(4, PLAN_ALL_TO_ALL, SIM_COLL_RING, 3.0 / 4, 1);
    check_ring(4, PLAN_ALL_TO_ALL, SIM_COLL_RING_STEPS, 3.0 / 4, 3);
}

static double simulate_ar(int n, int per_node, sim_coll_algo algo, int64_t bytes)
{
    plan_set p;
    plan_builder b;
    build_coll(&p, &b, n, PLAN_ALL_REDUCE, bytes);
    for (int d = 0; d < n; d++) p.devices[d].node = d / per_node;
    sim_options o;
    exact_options(&o, &p);
    o.coll = algo;
    sim_result r;
    double t = -1;
    CU_ASSERT_EQUAL(simulate(&p, &o, &r), 0);
    if (r.dev) {
        t = r.step_seconds;
        for (int d = 0; d < n; d++) ASSERT_NEAR(r.dev[d].end_seconds, t, 1e-9);
    }
    sim_result_free(&r);
    pb_done(&b);
    plan_free(&p);
    return t;
}

static void test_ring_across_nodes(void)
{
    /* 2 nodes x 2 GPUs (A100 defaults: NVLink 300 GB/s 1 us, NIC 25 GB/s 5 us) */
    double S = (double)(1 << 30), anv = 1e-6, bnv = 300e9, anic = 5e-6, bnic = 25e9;
    /* one flat ring 0-1-2-3 crosses the NICs twice: the slowest hop sets the pace */
    ASSERT_NEAR(simulate_ar(4, 2, SIM_COLL_RING, 1 << 30), 6 * anic + 1.5 * S / bnic, 0.01);
    /* hierarchical: reduce-scatter in each node, all-reduce of S/2 across, all-gather in each node */
    ASSERT_NEAR(simulate_ar(4, 2, SIM_COLL_AUTO, 1 << 30),
                (anv + S / 2 / bnv) + (2 * anic + (S / 2) / bnic) + (anv + S / 2 / bnv), 0.01);
}

static void test_tree_all_reduce(void)
{
    /* NCCL's double binary tree on one NVSwitch (A100: 300 GB/s, 1 us): each tree carries S/2 up
     * and down at once; the busiest GPU (inner node with a parent and two children in one tree, a
     * leaf in the other) moves 4 halves each way, so T = 2 depth alpha + 2 S / beta */
    double S = (double)(1 << 30), a = 1e-6, b = 300e9;
    ASSERT_NEAR(simulate_ar(2, 8, SIM_COLL_TREE, 1 << 30), 2 * a + S / b, 0.01);     /* depth 1: as a ring */
    ASSERT_NEAR(simulate_ar(4, 8, SIM_COLL_TREE, 1 << 30), 4 * a + 2 * S / b, 0.01); /* depth 2 */
    ASSERT_NEAR(simulate_ar(8, 8, SIM_COLL_TREE, 1 << 30), 6 * a + 2 * S / b, 0.01); /* depth 3 */
    ASSERT_NEAR(simulate_ar(7, 8, SIM_COLL_TREE, 1 << 30), 4 * a + 2 * S / b, 0.01); /* odd: shifted */
    /* small buffers: latency-bound, the tree's log2 n steps beat the ring's 2 (n - 1) */
    double s = 64 * 1024;
    ASSERT_NEAR(simulate_ar(8, 8, SIM_COLL_TREE, 64 * 1024), 6 * a + 2 * s / b, 0.01);
    ASSERT_NEAR(simulate_ar(8, 8, SIM_COLL_RING, 64 * 1024), 14 * a + 1.75 * s / b, 0.01);
}

static void test_two_nodes_vs_one(void)
{
    /* the check: a two-node all-reduce (2 x 8 GPUs) is slower than a one-node one (8 GPUs)
     * by what the hierarchical algorithm predicts: the cross-node all-reduce of S/8 per NIC */
    double S = (double)(1 << 30), anv = 1e-6, bnv = 300e9, anic = 5e-6, bnic = 25e9;
    double one = simulate_ar(8, 8, SIM_COLL_AUTO, 1 << 30);
    double two = simulate_ar(16, 8, SIM_COLL_AUTO, 1 << 30);
    ASSERT_NEAR(one, 14 * anv + 1.75 * S / bnv, 0.01);
    ASSERT_NEAR(two, 14 * anv + 1.75 * S / bnv + 2 * anic + (S / 8) / bnic, 0.01);
    ASSERT_NEAR(two - one, 2 * anic + (S / 8) / bnic, 0.01);
}

/* ---------------------------------------------------------------- memory */

static void test_memory_in_time(void)
{
    /* stream a: alloc P(100) A(50), compute 1 s, free A; stream b waits for it, allocs C(70):
     * peak 170 = P + C at the end, while A and C never overlap */
    plan_set p;
    plan_builder b;
    pb_init(&b, &p, 1, 1);
    p.gpu.mem_bytes = 160, p.gpu.reserve_bytes = 0;
    int k = pb_kernels(&b, 1e12, 0);
    int a = pb_stream(&b, 0, "a"), s2 = pb_stream(&b, 0, "b");
    p.lists[0].nevents = 1;
    int bp = pb_buf(&b, 0, "P", 100, PLAN_MEM_PARAM), ba = pb_buf(&b, 0, "A", 50, PLAN_MEM_ACT);
    int bc = pb_buf(&b, 0, "C", 70, PLAN_MEM_ACT);
    pb_alloc(&b, 0, a, bp);
    pb_alloc(&b, 0, a, ba);
    int f = pb_compute(&b, 0, a, PLAN_PASS_F, k, 0, 0);
    pb_writes(&b, 0, f, 1, (int32_t[]){ba});
    pb_free(&b, 0, a, ba);
    pb_record(&b, 0, a, 0);
    pb_wait(&b, 0, s2, 0);
    pb_alloc(&b, 0, s2, bc);
    sim_options o;
    exact_options(&o, &p);
    sim_result r;
    CU_ASSERT_EQUAL_FATAL(simulate(&p, &o, &r), 0);
    ASSERT_NEAR(r.dev[0].peak_bytes, 170, 0);
    ASSERT_NEAR(r.dev[0].at_peak[PLAN_MEM_PARAM], 100, 0);
    ASSERT_NEAR(r.dev[0].at_peak[PLAN_MEM_ACT], 70, 0);
    ASSERT_NEAR(r.dev[0].peak_by_mem[PLAN_MEM_ACT], 70, 0);
    CU_ASSERT(r.dev[0].over_memory);
    CU_ASSERT_EQUAL(r.nover_memory, 1);
    sim_result_free(&r);
    pb_done(&b);
    plan_free(&p);
}

/* ---------------------------------------------------------------- program -> plan -> sim */

static int compile(const char *program, const char *out)
{
    return run_cmdf("'%s' -q '%s' -o '%s'", bin_path("piper-compile"), test_src_path(program), out);
}

/* Activation bytes of one micro-batch on a list: its activation buffers of micro-batch 0. */
static double act_per_mb(const plan_set *p, int dev)
{
    const plan_list *L = plan_dev_list(p, dev);
    double s = 0;
    for (int i = 0; i < L->nbufs; i++)
        if (L->bufs[i].mem == PLAN_MEM_ACT && L->bufs[i].name && strstr(L->bufs[i].name, ".mb0.")) s += (double)L->bufs[i].bytes;
    return s;
}

/* A 4-stage pipeline with unit costs F = 1, B = 2 and free communication (formulas.md): makespan
 * (m + p - 1)(F + B) and idle (p - 1)(F + B) on every rank for GPipe and 1F1B alike; rank r holds
 * p - r micro-batches' activations at its peak under 1F1B, m under GPipe. */
static void check_pipeline(const char *program, int m, int gpipe)
{
    const int pp = 4;
    const char *plan_path = tmp_path("pipeline.plan");
    CU_ASSERT_EQUAL_FATAL(compile(program, plan_path), 0);
    plan_set p;
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(plan_read_file(&p, plan_path, &e), 0);
    CU_ASSERT_EQUAL_FATAL(p.ndevices, pp);
    sim_options o;
    sim_options_init(&o, &p);
    CU_ASSERT_EQUAL_FATAL(sim_costs_parse(&o.costs, "unit:F=1,B=2,nocomm", &e), 0);
    sim_result r;
    CU_ASSERT_EQUAL_FATAL(simulate(&p, &o, &r), 0);
    double F = 1, B = 2;
    ASSERT_NEAR(r.step_seconds, m * (F + B) + (pp - 1) * (F + B), 1e-9);
    for (int d = 0; d < pp; d++) {
        ASSERT_NEAR(r.dev[d].compute_seconds, m * (F + B), 1e-9);
        ASSERT_NEAR(r.dev[d].idle_seconds, (pp - 1) * (F + B), 1e-9);
        ASSERT_NEAR(r.dev[d].exposed_comm_seconds, 0, 0);
        double per = act_per_mb(&p, d);
        CU_ASSERT(per > 0);
        ASSERT_NEAR(r.dev[d].peak_by_mem[PLAN_MEM_ACT], (gpipe ? m : pp - d) * per, 1e-12);
    }
    sim_result_free(&r);

    /* the same with the cost model: plausible, and MFU = model FLOPs / (step x peak x devices) */
    sim_options_init(&o, &p);
    CU_ASSERT_EQUAL_FATAL(simulate(&p, &o, &r), 0);
    CU_ASSERT(r.step_seconds > 0);
    CU_ASSERT(r.mfu > 0 && r.mfu < 0.82);
    ASSERT_NEAR(r.mfu, r.model_flops / (r.step_seconds * 312e12 * pp), 1e-12);
    ASSERT_NEAR(r.tokens_per_second, (double)p.model.global_batch * (double)p.model.seq / r.step_seconds, 1e-12);
    for (int d = 0; d < pp; d++)
        ASSERT_NEAR(r.dev[d].compute_seconds + r.dev[d].exposed_comm_seconds + r.dev[d].idle_seconds, r.step_seconds, 1e-9);
    sim_result_free(&r);
    plan_free(&p);
}

static void test_1f1b_tiny_closed_form(void) { check_pipeline("tests/fixtures/sim/pp4_1f1b_tiny.yaml", 6, 0); }

static void test_1f1b_bundled_closed_form(void) { check_pipeline("configs/programs/pp4_1f1b.yaml", 8, 0); }

static void test_gpipe_closed_form(void) { check_pipeline("tests/fixtures/sim/pp4_gpipe_tiny.yaml", 6, 1); }

/* formulas.md: with one micro-batch, ZeRO-3 moves 3 parameter volumes per device (reduce-scatter
 * and two all-gathers) where ZeRO-0 moves 2 (one all-reduce): 1.5 times the bytes. With tied
 * embeddings the head's two gathers also carry the token table T it shares with the embedding
 * (which is gathered for the embedding's passes too): (3P + 2T) / 2P = 1.5 + T/P. */
static void test_zero3_bytes(void)
{
    double sent[2] = {0, 0};
    const char *programs[2] = {"tests/fixtures/sim/dp4_zero0.yaml", "tests/fixtures/sim/dp4_zero3.yaml"};
    for (int z = 0; z < 2; z++) {
        const char *plan_path = tmp_path("zero.plan");
        CU_ASSERT_EQUAL_FATAL(compile(programs[z], plan_path), 0);
        plan_set p;
        base_error e;
        base_error_clear(&e);
        CU_ASSERT_EQUAL_FATAL(plan_read_file(&p, plan_path, &e), 0);
        sim_options o;
        sim_options_init(&o, &p);
        sim_result r;
        CU_ASSERT_EQUAL_FATAL(simulate(&p, &o, &r), 0);
        sent[z] = r.dev[0].bytes_sent;
        for (int d = 1; d < r.ndevices; d++) ASSERT_NEAR(r.dev[d].bytes_sent, sent[z], 0);
        sim_result_free(&r);
        plan_free(&p);
    }
    CU_ASSERT(sent[0] > 0);
    /* gpt_tiny4: vocab V 256, sequence S 32, hidden h 64, ffn f 256, 4 layers of attention
     * (two norm vectors, QKV and output projections with biases: 4h^2 + 6h) and MLP (2hf + f +
     * 3h), the final norm (2h), the token table Vh and positions Sh */
    const double V = 256, S = 32, h = 64, f = 256;
    const double P = V * h + S * h + 4 * (4 * h * h + 6 * h + 2 * h * f + f + 3 * h) + 2 * h;
    ASSERT_NEAR(sent[1] / sent[0], 1.5 + V * h / P, 1e-12);
}

/* One dp4 program of tests/fixtures/sim (ZeRO `zero`, one micro-batch) with gradients of
 * `grad_dtype` (NULL: the default, bf16), compiled and simulated. */
static int simulate_dp4(int zero, const char *grad_dtype, sim_result *r)
{
    const char *prog = tmp_path("dp4_grad.yaml"), *plan_path = tmp_path("dp4_grad.plan");
    char model[4096], cluster[4096]; /* test_src_path reuses its buffer */
    snprintf(model, sizeof model, "%s", test_src_path("tests/fixtures/sim/gpt_tiny4.yaml"));
    snprintf(cluster, sizeof cluster, "%s", test_src_path("configs/clusters/a100_4.yaml"));
    FILE *f = fopen(prog, "w");
    if (!f) return -1;
    fprintf(f,
            "model: %s\ncluster: %s\nbatch: {global: 4, micro: 1}\n%s%s%s"
            "directives:\n"
            "  - {op: split, filter: {}, num_microbatches: 1}\n"
            "  - {op: replicate, filter: {}, devices: [0, 1, 2, 3], zero: %d}\n",
            model, cluster, grad_dtype ? "grad_dtype: " : "",
            grad_dtype ? grad_dtype : "", grad_dtype ? "\n" : "", zero);
    fclose(f);
    if (run_cmdf("'%s' -q '%s' -o '%s'", bin_path("piper-compile"), prog, plan_path)) return -1;
    plan_set p;
    base_error e;
    base_error_clear(&e);
    if (plan_read_file(&p, plan_path, &e)) return -1;
    sim_options o;
    sim_options_init(&o, &p);
    int rc = simulate(&p, &o, r);
    plan_free(&p);
    return rc;
}

/* grad_dtype: fp32 (Megatron-LM's main_grad) on the dp4 programs above: ZeRO-0's all-reduce
 * sends twice the bytes and takes longer, its gradients take twice the memory; ZeRO-3's
 * reduce-scatter doubles but its parameter gathers stay bf16, so it sends one bf16 gradient
 * volume more, half of ZeRO-0's bf16 all-reduce (2 volumes). The optimizer step reads the wider
 * gradient: more compute time. */
static void test_fp32_grads_bytes(void)
{
    sim_result r[2][2]; /* [zero 0 / 3][bf16 / fp32] */
    for (int z = 0; z < 2; z++)
        for (int f = 0; f < 2; f++)
            CU_ASSERT_EQUAL_FATAL(simulate_dp4(z ? 3 : 0, f ? "fp32" : NULL, &r[z][f]), 0);
    for (int d = 0; d < 4; d++) {
        const sim_device_result *a = &r[0][0].dev[d], *b = &r[0][1].dev[d];
        CU_ASSERT(a->bytes_sent > 0);
        ASSERT_NEAR(b->bytes_sent, 2 * a->bytes_sent, 1e-12);
        CU_ASSERT(b->comm_seconds > a->comm_seconds && b->comm_seconds <= 2 * a->comm_seconds);
        CU_ASSERT(b->compute_seconds > a->compute_seconds);
        ASSERT_NEAR(b->peak_by_mem[PLAN_MEM_GRAD], 2 * a->peak_by_mem[PLAN_MEM_GRAD], 1e-12);
        ASSERT_NEAR(b->peak_by_mem[PLAN_MEM_PARAM], a->peak_by_mem[PLAN_MEM_PARAM], 0);
        ASSERT_NEAR(b->peak_by_mem[PLAN_MEM_OPT], a->peak_by_mem[PLAN_MEM_OPT], 0);
        ASSERT_NEAR(r[1][1].dev[d].bytes_sent - r[1][0].dev[d].bytes_sent, a->bytes_sent / 2, 1e-12);
    }
    for (int z = 0; z < 2; z++)
        for (int f = 0; f < 2; f++) sim_result_free(&r[z][f]);
}

static char *slurp(const char *path)
{
    base_buf b = {0};
    base_error e;
    base_error_clear(&e);
    if (base_read_file(path, &b, &e)) return NULL;
    return b.s;
}

static void test_cli_program_json_deterministic(void)
{
    char j1[2048];
    snprintf(j1, sizeof j1, "%s", tmp_path("a.json"));
    CU_ASSERT_EQUAL_FATAL(run_cmdf("'%s' '%s' --costs unit:F=1,B=2 --costs nocomm --json '%s' > '%s' 2>/dev/null",
             bin_path("piper-sim"), test_src_path("tests/fixtures/sim/pp4_1f1b_tiny.yaml"), j1, tmp_path("a.txt")), 0);
    char j2[2048];
    snprintf(j2, sizeof j2, "%s", tmp_path("b.json"));
    CU_ASSERT_EQUAL_FATAL(run_cmdf("'%s' '%s' --costs unit:F=1,B=2,nocomm --json '%s' > '%s' 2>/dev/null",
             bin_path("piper-sim"), test_src_path("tests/fixtures/sim/pp4_1f1b_tiny.yaml"), j2, tmp_path("b.txt")), 0);
    char *a = slurp(tmp_path("a.json")), *b = slurp(j2);
    char *ta = slurp(tmp_path("a.txt")), *tb = slurp(tmp_path("b.txt"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_STRING_EQUAL(a, b);
    CU_ASSERT_STRING_EQUAL(ta, tb);
    TEST_ASSERT_CONTAINS(a, "\"step_seconds\": 27,");
    TEST_ASSERT_CONTAINS(a, "\"idle_seconds\": 9,");
    TEST_ASSERT_CONTAINS(a, "\"unit\": {\"F\": 1, \"B\": 2,");
    TEST_ASSERT_CONTAINS(ta, "step time        27.000000 s");
    TEST_ASSERT_CONTAINS(ta, "every device fits");
    free(a), free(b), free(ta), free(tb);
}

/* The plan header carries the cluster file's links; piper-sim uses them, and --links overrides
 * each figure it names, leaving the others as the plan says. */
static void test_links_from_plan(void)
{
    const char *plan_path = tmp_path("shared.plan");
    CU_ASSERT_EQUAL_FATAL(compile("tests/fixtures/sim/dp4_2x2_shared.yaml", plan_path), 0);
    plan_set p;
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(plan_read_file(&p, plan_path, &e), 0);
    ASSERT_NEAR(p.links.nvlink_bw, 150e9, 0);
    CU_ASSERT_EQUAL(p.links.gpus_per_node, 2);
    sim_options o;
    sim_options_init(&o, &p);
    ASSERT_NEAR(o.links.nvlink_bw, 150e9, 0);
    ASSERT_NEAR(o.links.nvlink_latency, 2e-6, 0);
    ASSERT_NEAR(o.links.nic_bw, 12.5e9, 0);
    ASSERT_NEAR(o.links.nic_latency, 7e-6, 0);
    CU_ASSERT_EQUAL(o.links.gpus_per_nic, 2);
    CU_ASSERT_EQUAL(sim_links_parse(&o.links, "nic_bw=50GB/s", &e), 0);
    ASSERT_NEAR(o.links.nic_bw, 50e9, 0);
    ASSERT_NEAR(o.links.nvlink_bw, 150e9, 0);
    /* a plan without links (zeros) gets the GPU type's defaults */
    p.links = (plan_links){0};
    sim_options_init(&o, &p);
    ASSERT_NEAR(o.links.nvlink_bw, 300e9, 0);
    ASSERT_NEAR(o.links.nic_latency, 5e-6, 0);
    CU_ASSERT_EQUAL(o.links.gpus_per_nic, 1);
    plan_free(&p);

    char j1[2048];
    snprintf(j1, sizeof j1, "%s", tmp_path("shared.json"));
    CU_ASSERT_EQUAL_FATAL(run_cmdf("'%s' '%s' -q --json '%s' 2>/dev/null", bin_path("piper-sim"), plan_path, j1), 0);
    char *a = slurp(j1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    TEST_ASSERT_CONTAINS(a, "\"links\": {\"nvlink_bw\": 150000000000, \"nvlink_latency\": 2e-06, \"nic_bw\": 12500000000, "
                            "\"nic_latency\": 7e-06, \"pcie_bw\": 1e+15, \"gpus_per_nic\": 2,");
    CU_ASSERT_EQUAL_FATAL(run_cmdf("'%s' '%s' -q --links nic_bw=50GB/s --json '%s' 2>/dev/null", bin_path("piper-sim"),
                                   plan_path, j1), 0);
    char *b = slurp(j1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    TEST_ASSERT_CONTAINS(b, "\"nvlink_bw\": 150000000000, \"nvlink_latency\": 2e-06, \"nic_bw\": 50000000000, ");
    free(a), free(b);
}

typedef struct trace_span {
    int64_t pid, tid, ts, end; /* nanoseconds */
} trace_span;

static int cmp_span(const void *a, const void *b)
{
    const trace_span *x = a, *y = b;
    if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* Events the trace should hold for a device: its computes, its collectives and its p2p runs
 * (a sendrecv group is one event). */
static int64_t expected_events(const plan_set *p, int d)
{
    const plan_list *L = plan_dev_list(p, d);
    int64_t n = 0;
    for (int s = 0; s < L->nstreams; s++) {
        int prev_sr = 0; /* sendrecv id of the previous instruction of stream s, if a p2p op */
        for (int i = 0; i < L->n; i++) {
            const plan_instr *in = &L->ins[i];
            if (in->stream != s) continue;
            int p2p = in->op == PLAN_SEND || in->op == PLAN_RECV;
            if (in->op == PLAN_COMPUTE || in->op == PLAN_COLL) n++;
            if (p2p && !(in->sendrecv != 0 && in->sendrecv == prev_sr)) n++;
            prev_sr = p2p ? in->sendrecv : 0;
        }
    }
    return n;
}

/* --trace: valid JSON (read with ir's doc loader), one named process per GPU and thread per
 * stream, events that never overlap on a thread, as many as the plan's computes, collectives and
 * p2p runs, and the same bytes on every run. */
static void check_trace(const char *program, const char *costs)
{
    const char *plan_path = tmp_path("trace.plan");
    CU_ASSERT_EQUAL_FATAL(compile(program, plan_path), 0);
    char t1[2048], t2[2048];
    snprintf(t1, sizeof t1, "%s", tmp_path("t1.json"));
    snprintf(t2, sizeof t2, "%s", tmp_path("t2.json"));
    for (int k = 0; k < 2; k++)
        CU_ASSERT_EQUAL_FATAL(run_cmdf("'%s' '%s' -q %s %s --trace '%s' 2>/dev/null", bin_path("piper-sim"), plan_path,
                                       costs ? "--costs" : "", costs ? costs : "", k ? t2 : t1), 0);
    char *a = slurp(t1), *b = slurp(t2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_STRING_EQUAL(a, b);

    plan_set p;
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(plan_read_file(&p, plan_path, &e), 0);
    base_arena ar;
    base_arena_init(&ar);
    ir_doc *doc = NULL;
    int rc = ir_doc_parse(&ar, t1, a, strlen(a), &doc, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    const ir_doc *evs = ir_doc_get(doc, "traceEvents");
    CU_ASSERT_PTR_NOT_NULL_FATAL(evs);
    CU_ASSERT_EQUAL_FATAL(evs->kind, IR_DOC_SEQ);
    trace_span *sp = calloc((size_t)evs->n + 1, sizeof *sp);
    int64_t *count = calloc((size_t)p.ndevices, sizeof *count);
    int nsp = 0, nproc = 0, nthread = 0, bad = 0;
    for (int i = 0; i < evs->n; i++) {
        const ir_doc *ev = evs->items[i];
        const char *ph = NULL, *name = NULL;
        int64_t pid = -1, tid = -1;
        bad |= ir_doc_string(ir_doc_get(ev, "ph"), "ph", &ph, &e) | ir_doc_string(ir_doc_get(ev, "name"), "name", &name, &e);
        bad |= ir_doc_int(ir_doc_get(ev, "pid"), "pid", &pid, &e);
        if (bad || pid < 0 || pid >= p.ndevices) {
            bad = 1;
            break;
        }
        if (ir_doc_get(ev, "tid")) bad |= ir_doc_int(ir_doc_get(ev, "tid"), "tid", &tid, &e);
        const plan_list *L = plan_dev_list(&p, (int)pid);
        if (!strcmp(ph, "M")) {
            const char *nm = NULL;
            const ir_doc *args = ir_doc_get(ev, "args");
            if (!strcmp(name, "process_name")) {
                char want[32];
                snprintf(want, sizeof want, "GPU %d", (int)pid);
                bad |= ir_doc_string(ir_doc_get(args, "name"), "name", &nm, &e) || strcmp(nm, want);
                nproc++;
            } else if (!strcmp(name, "thread_name")) {
                bad |= tid < 0 || tid >= L->nstreams || ir_doc_string(ir_doc_get(args, "name"), "name", &nm, &e) ||
                       strcmp(nm, L->streams[tid]);
                nthread++;
            }
            continue;
        }
        if (!strcmp(ph, "C") || !strcmp(ph, "s") || !strcmp(ph, "f")) continue; /* memory, flows: tests/viz */
        CU_ASSERT_STRING_EQUAL(ph, "X");
        double ts, dur;
        bad |= ir_doc_num(ir_doc_get(ev, "ts"), "ts", &ts, &e) | ir_doc_num(ir_doc_get(ev, "dur"), "dur", &dur, &e);
        bad |= tid < 0 || tid >= L->nstreams || dur < 0;
        const char *cat = NULL;
        bad |= ir_doc_string(ir_doc_get(ev, "cat"), "cat", &cat, &e);
        if (bad) break;
        CU_ASSERT(!strcmp(cat, "compute") || !strcmp(cat, "p2p") || !strcmp(cat, "coll"));
        int64_t t0 = llround(ts * 1000), d0 = llround(dur * 1000);
        sp[nsp++] = (trace_span){pid, tid, t0, t0 + d0};
        count[pid]++;
    }
    if (bad) fprintf(stderr, "\n  bad trace event: %s\n", e.msg);
    CU_ASSERT_FALSE(bad);
    CU_ASSERT_EQUAL(nproc, p.ndevices);
    int streams = 0;
    for (int d = 0; d < p.ndevices; d++) streams += plan_dev_list(&p, d)->nstreams;
    CU_ASSERT_EQUAL(nthread, streams);
    for (int d = 0; d < p.ndevices; d++) {
        if (count[d] != expected_events(&p, d))
            fprintf(stderr, "\n  device %d: %lld events, expected %lld\n", d, (long long)count[d], (long long)expected_events(&p, d));
        CU_ASSERT_EQUAL(count[d], expected_events(&p, d));
    }
    qsort(sp, (size_t)nsp, sizeof *sp, cmp_span);
    int overlaps = 0;
    for (int i = 1; i < nsp; i++)
        if (sp[i].pid == sp[i - 1].pid && sp[i].tid == sp[i - 1].tid && sp[i].ts < sp[i - 1].end) overlaps++;
    CU_ASSERT_EQUAL(overlaps, 0);
    CU_ASSERT(nsp > 0);
    free(sp), free(count), free(a), free(b);
    base_arena_free(&ar);
    plan_free(&p);
}

static void test_trace(void)
{
    check_trace("tests/fixtures/sim/pp4_1f1b_tiny.yaml", NULL);
    check_trace("tests/fixtures/sim/pp4_1f1b_tiny.yaml", "unit:F=1,B=2,nocomm");
    check_trace("tests/fixtures/sim/dp4_2x2_shared.yaml", NULL);
    check_trace("configs/programs/tp2_pp2.yaml", NULL);
    check_trace("tests/fixtures/sim/pp2_dp4_2nodes.yaml", NULL); /* folded: events of every replica */
}

/* A user's platform: a malformed one fails with file:line (SimGrid aborts on it: checked in a child
 * first), one without the hosts the plan needs says which are missing, and a valid one describing
 * the same network as a generated platform gives the same results, from --platform or from the
 * cluster file's `platform` carried in the plan. */
static void test_user_platform(void)
{
    base_error e;
    base_error_clear(&e);
    char bad[4096];
    snprintf(bad, sizeof bad, "%s", test_src_path("tests/fixtures/sim/platform_bad.xml"));
    CU_ASSERT_EQUAL(sim_platform_check(bad, 2, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "platform_bad.xml:9: Invalid XML");
    TEST_ASSERT_CONTAINS(e.msg, "; fix the platform file");
    base_error_clear(&e);
    char good[4096]; /* test_src_path's buffer is reused */
    snprintf(good, sizeof good, "%s", test_src_path("tests/fixtures/sim/platform_4gpu.xml"));
    CU_ASSERT_EQUAL(sim_platform_check(good, 4, &e), 0);
    CU_ASSERT_EQUAL(sim_platform_check(good, 6, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "the plan has 6 devices but the platform has no host named gpu4, gpu5 (4 hosts in all)");
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sim_platform_check(tmp_path("none.xml"), 4, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "none.xml: cannot open the platform file");
    base_error_clear(&e);
    CU_ASSERT_EQUAL(sim_platform_check(test_src_path("tests/fixtures/sim"), 4, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "tests/fixtures/sim: is a directory; give a file");

    /* through piper-sim: no crash, exit 1, the message */
    char err[2048];
    snprintf(err, sizeof err, "%s", tmp_path("perr.txt"));
    CU_ASSERT_EQUAL(run_cmdf("'%s' '%s' --platform '%s' > /dev/null 2> '%s'", bin_path("piper-sim"),
                             test_src_path("tests/fixtures/sim/pp4_1f1b_tiny.yaml"), bad, err), 1);
    char *t = slurp(err);
    TEST_ASSERT_CONTAINS(t, "error: ");
    TEST_ASSERT_CONTAINS(t, "platform_bad.xml:9: Invalid XML");
    free(t);

    /* the same network three ways */
    double step[3];
    const char *how[3] = {"--links nvlink_bw=100GB/s,nvlink_lat=1us", "--platform", ""};
    for (int k = 0; k < 3; k++) {
        char j[2048];
        snprintf(j, sizeof j, "%s", tmp_path("plat.json"));
        CU_ASSERT_EQUAL_FATAL(run_cmdf("'%s' '%s' -q %s %s --json '%s' 2>/dev/null", bin_path("piper-sim"),
                                       test_src_path(k < 2 ? "tests/fixtures/sim/pp4_1f1b_tiny.yaml"
                                                           : "tests/fixtures/sim/pp4_platform.yaml"),
                                       how[k], k == 1 ? good : "", j), 0);
        char *js = slurp(j);
        CU_ASSERT_PTR_NOT_NULL_FATAL(js);
        const char *at = strstr(js, "\"step_seconds\": ");
        CU_ASSERT_PTR_NOT_NULL_FATAL(at);
        step[k] = atof(at + 16);
        if (k == 0) TEST_ASSERT_CONTAINS(js, "\"platform\": null");
        else TEST_ASSERT_CONTAINS(js, "platform_4gpu.xml\"");
        free(js);
    }
    CU_ASSERT(step[0] > 0);
    ASSERT_NEAR(step[1], step[0], 1e-12);
    ASSERT_NEAR(step[2], step[0], 1e-12);
}

/* Folding: identical data-parallel replicas simulated once give the full simulation's figures
 * (docs/simulator.md, "Folding"), and plans where that would not be exact are not folded. */
static void check_fold(const char *program, const char *links, int replicas, const char *note)
{
    const char *plan_path = tmp_path("fold.plan");
    CU_ASSERT_EQUAL_FATAL(compile(program, plan_path), 0);
    plan_set p;
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(plan_read_file(&p, plan_path, &e), 0);
    sim_options o;
    sim_options_init(&o, &p);
    if (links) CU_ASSERT_EQUAL_FATAL(sim_links_parse(&o.links, links, &e), 0);
    sim_result a, b, c;
    CU_ASSERT_EQUAL_FATAL(simulate(&p, &o, &a), 0);
    /* folded on every node's hosts rather than only the simulated devices' nodes: the same
     * routes, so the very same figures, bit for bit */
    o.full_platform = true;
    CU_ASSERT_EQUAL_FATAL(simulate(&p, &o, &c), 0);
    o.full_platform = false;
    CU_ASSERT_EQUAL(c.folded_replicas, a.folded_replicas);
    CU_ASSERT_EQUAL(c.activities, a.activities);
    CU_ASSERT(c.step_seconds == a.step_seconds);
    for (int d = 0; d < p.ndevices; d++) {
        const sim_device_result *x = &a.dev[d], *y = &c.dev[d];
        CU_ASSERT(x->end_seconds == y->end_seconds && x->compute_seconds == y->compute_seconds &&
                  x->exposed_comm_seconds == y->exposed_comm_seconds && x->comm_seconds == y->comm_seconds &&
                  x->launch_wait_seconds == y->launch_wait_seconds && x->peak_bytes == y->peak_bytes &&
                  x->bytes_sent == y->bytes_sent);
    }
    sim_result_free(&c);
    o.fold = false;
    CU_ASSERT_EQUAL_FATAL(simulate(&p, &o, &b), 0);
    CU_ASSERT_EQUAL(a.folded_replicas, replicas);
    if (note) TEST_ASSERT_CONTAINS(a.fold_note, note);
    CU_ASSERT_EQUAL(b.folded_replicas, 1);
    CU_ASSERT_EQUAL(a.simulated_devices * replicas, p.ndevices);
    if (replicas > 1) CU_ASSERT(a.activities * replicas <= b.activities);
    ASSERT_NEAR(a.step_seconds, b.step_seconds, 1e-9);
    CU_ASSERT(a.step_seconds > 0);
    ASSERT_NEAR(a.mfu, b.mfu, 1e-9);
    CU_ASSERT_EQUAL(a.critical_device, b.critical_device);
    CU_ASSERT_EQUAL(a.last_device, b.last_device);
    for (int d = 0; d < p.ndevices; d++) {
        const sim_device_result *x = &a.dev[d], *y = &b.dev[d];
        CU_ASSERT_EQUAL(x->id, d);
        CU_ASSERT_EQUAL(x->node, y->node);
        ASSERT_NEAR(x->end_seconds, y->end_seconds, 1e-9);
        ASSERT_NEAR(x->compute_seconds, y->compute_seconds, 1e-9);
        ASSERT_NEAR(x->exposed_comm_seconds, y->exposed_comm_seconds, 1e-9);
        ASSERT_NEAR(x->comm_seconds, y->comm_seconds, 1e-9);
        ASSERT_NEAR(x->idle_seconds, y->idle_seconds, 1e-9);
        ASSERT_NEAR(x->peak_bytes, y->peak_bytes, 1e-12);
        ASSERT_NEAR(x->bytes_sent, y->bytes_sent, 1e-12);
        CU_ASSERT_EQUAL(x->instructions, y->instructions);
    }
    sim_result_free(&a);
    sim_result_free(&b);
    plan_free(&p);
}

static void test_fold(void)
{
    /* PP2 x DP4 on one node: data-parallel groups inside the stages, a world all-reduce (clipping) */
    check_fold("tests/fixtures/sim/pp2_dp4.yaml", NULL, 4, NULL);
    /* ... on two nodes: the pipeline crosses them over the NICs */
    check_fold("tests/fixtures/sim/pp2_dp4_2nodes.yaml", NULL, 4, NULL);
    check_fold("tests/fixtures/sim/pp2_dp4_2nodes.yaml", "nic_bw=1GB/s,nic_lat=20us", 4, NULL);
    /* TP2 x DP4 on two nodes: hierarchical data-parallel collectives, tensor pairs sharing a NIC */
    check_fold("tests/fixtures/sim/tp2_dp4_2nodes.yaml", NULL, 4, NULL);
    check_fold("tests/fixtures/sim/tp2_dp4_2nodes.yaml", "gpus_per_nic=2,nvlink_bw=20GB/s", 4, NULL);
    /* TP2 x PP2 x DP4 on eight nodes: the folded platform holds two of them (one or two leaves) */
    check_fold("tests/fixtures/sim/tp2_pp2_dp4_8nodes.yaml", NULL, 4, NULL);
    check_fold("tests/fixtures/sim/tp2_pp2_dp4_8nodes.yaml", "nodes_per_leaf=2,nic_lat=7us", 4, NULL);
    check_fold("tests/fixtures/sim/tp2_pp2_dp4_8nodes.yaml", "nodes_per_leaf=4,nic_bw=2GB/s", 4, NULL);
    /* not exact, so not folded: a NIC shared by two replicas; a blocking fabric */
    check_fold("tests/fixtures/sim/tp2_dp4_2nodes.yaml", "gpus_per_nic=4", 1, "share a NIC");
    check_fold("tests/fixtures/sim/tp2_dp4_2nodes.yaml", "nodes_per_leaf=1,oversubscription=2", 1, "oversubscribed");
    /* all-to-all across replicas (expert parallelism) does not fold */
    check_fold("configs/programs/pp2_dp2_ep2_qwen3.yaml", NULL, 1, "all_to_all spans replicas");
}

static void test_cli_errors(void)
{
    char err[2048]; /* a copy: tmp_path's buffers are reused */
    snprintf(err, sizeof err, "%s", tmp_path("err.txt"));
    CU_ASSERT_EQUAL(run_cmdf("'%s' '%s' > /dev/null 2> '%s'", bin_path("piper-sim"), tmp_path("missing.plan"), err), 1);
    char *t = slurp(err);
    TEST_ASSERT_CONTAINS(t, "cannot open");
    free(t);

    /* a malformed plan: the reader's file:line */
    FILE *f = fopen(tmp_path("bad.plan"), "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("piper-plan 2\ndtypes param=bf16 act=bf16 grad=bf16 opt=fp32\ngpu nonsense\n", f);
    fclose(f);
    CU_ASSERT_EQUAL(run_cmdf("'%s' '%s' > /dev/null 2> '%s'", bin_path("piper-sim"), tmp_path("bad.plan"), err), 1);
    t = slurp(err);
    TEST_ASSERT_CONTAINS(t, "bad.plan:3");
    free(t);

    /* a plan that deadlocks: the static check says where; with --no-check the replay notices */
    f = fopen(tmp_path("dead.plan"), "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("piper-plan 2\ndtypes param=bf16 act=bf16 grad=fp32 opt=fp32\n"
          "gpu name=H100 peak_fp32=1e12 peak_bf16=1e12 peak_fp16=1e12 peak_fp64=1e12 peak_fp8=0 hbm_bw=1e12 "
          "mem_bytes=1e10 reserve_bytes=0\n"
          "model name=m family=gpt layers=1 hidden=8 heads=1 kv_heads=1 head_dim=8 ffn=8 experts=0 expert_ffn=0 "
          "top_k=0 capacity_factor=0 vocab=8 seq=8 tied_embeddings=false qk_norm=false dropout=false "
          "micro_batch=1 num_microbatches=1 global_batch=1\n"
          "regions 0\nkernel_ids 0\nkernel_lists 0\ngroups 0\nlists 1\n"
          "list 0 streams=1 bufs=0 events=0 group_slots=0 instrs=2\n  stream 0 pp\n"
          "  0 send s=pp peer=1 tag=7 bytes=1024\n  1 recv s=pp peer=1 tag=7 bytes=1024\n"
          "devices 2\n  0 node=0 list=0 peer_offset=0 slots=\n  1 node=0 list=0 peer_offset=-1 slots=\nend\n", f);
    fclose(f);
    CU_ASSERT_EQUAL(run_cmdf("'%s' '%s' > /dev/null 2> '%s'", bin_path("piper-sim"), tmp_path("dead.plan"), err), 1);
    t = slurp(err);
    TEST_ASSERT_CONTAINS(t, "deadlock: at t=0 s nothing can progress");
    free(t);
    CU_ASSERT_EQUAL(run_cmdf("'%s' --no-check '%s' > /dev/null 2> '%s'", bin_path("piper-sim"), tmp_path("dead.plan"), err), 1);
    t = slurp(err);
    TEST_ASSERT_CONTAINS(t, "the simulation stopped with device 0 unfinished: the plan deadlocks");
    free(t);

    /* a program that does not compile: the compiler's message, as piper-compile prints it, exit 1 */
    CU_ASSERT_EQUAL(run_cmdf("'%s' '%s' > /dev/null 2> '%s'", bin_path("piper-sim"),
             test_src_path("tests/fixtures/programs/missing_model.yaml"), err), 1);
    t = slurp(err);
    TEST_ASSERT_CONTAINS(t, "missing_model.yaml:2:1: the program has no 'model'; add model: <path or map>");
    TEST_ASSERT_CONTAINS(t, "piper-sim: cannot compile ");
    free(t);

    /* piper-sim compiles in its own process: alone in a folder, with nothing on PATH, it still
     * simulates a program (the 1F1B closed form, 27 s) */
    CU_ASSERT_EQUAL(run_cmdf("mkdir -p '%s' && cp '%s' '%s'", tmp_path("alone"), bin_path("piper-sim"),
                             tmp_path("alone")), 0);
    CU_ASSERT_EQUAL(run_cmdf("cd '%s' && PATH=/nonexistent ./piper-sim '%s' --costs unit:F=1,B=2,nocomm > '%s' 2>&1",
                             tmp_path("alone"), test_src_path("tests/fixtures/sim/pp4_1f1b_tiny.yaml"), err), 0);
    t = slurp(err);
    TEST_ASSERT_CONTAINS(t, "step time        27.000000 s");
    free(t);

    /* --coll: the algorithms' names come from one table, in --help and in the error */
    CU_ASSERT_EQUAL(run_cmdf("'%s' x.plan --coll direct > /dev/null 2> '%s'", bin_path("piper-sim"), err), 2);
    t = slurp(err);
    TEST_ASSERT_CONTAINS(t, "piper-sim: --coll direct: unknown algorithm; use auto, ring, ring-steps or tree\n");
    free(t);

    CU_ASSERT_EQUAL(run_cmdf("'%s' '%s' --links nic_bw=slow > /dev/null 2> '%s'", bin_path("piper-sim"),
             test_src_path("tests/fixtures/sim/pp4_1f1b_tiny.yaml"), err), 2);
    t = slurp(err);
    TEST_ASSERT_CONTAINS(t, "--links: 'nic_bw=slow'");
    free(t);

    /* --calib: a bad file is invalid input (exit 1, file:line); none leaves the defaults */
    f = fopen(tmp_path("bad.calib"), "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("# x\nA100 gemm_eff=2\n", f);
    fclose(f);
    char calib[2048];
    snprintf(calib, sizeof calib, "%s", tmp_path("bad.calib"));
    CU_ASSERT_EQUAL(run_cmdf("'%s' '%s' --calib '%s' > /dev/null 2> '%s'", bin_path("piper-sim"),
                             test_src_path("tests/fixtures/sim/pp4_1f1b_tiny.yaml"), calib, err), 1);
    t = slurp(err);
    TEST_ASSERT_CONTAINS(t, "bad.calib:2: 'gemm_eff=2' is not valid");
    free(t);
    CU_ASSERT_EQUAL(run_cmdf("'%s' '%s' -q --calib none --json - > '%s' 2>/dev/null", bin_path("piper-sim"),
                             test_src_path("tests/fixtures/sim/pp4_1f1b_tiny.yaml"), err), 0);
    t = slurp(err);
    TEST_ASSERT_CONTAINS(t, "\"launch_overhead\": 4e-06, \"gemm_eff_large\": 0.820512820513, \"gemm_half_dim\": 128, "
                            "\"launch_bwd\": 4e-06, \"launch_model\": \"host\", \"host_sync\": \"p2p+norm+batch\", "
                            "\"launch_overlap\": 0, \"hbm_eff\": 1, \"net_eff\": 1, \"comm_slowdown\": 0, \"calibration\": null");
    free(t);
    CU_ASSERT_EQUAL(run_cmdf("'%s' '%s' -q --json - > '%s' 2>/dev/null", bin_path("piper-sim"),
                             test_src_path("tests/fixtures/sim/pp4_1f1b_tiny.yaml"), err), 0);
    t = slurp(err);
    TEST_ASSERT_CONTAINS(t, "\"calibration\": \"A100 from configs/calibration.txt (built in)\"");
    free(t);

    CU_ASSERT_EQUAL(run_cmdf("'%s' --frobnicate > /dev/null 2> '%s'", bin_path("piper-sim"), err), 2);
    CU_ASSERT_EQUAL(run_cmdf("'%s' --help > '%s'", bin_path("piper-sim"), err), 0);
    t = slurp(err);
    TEST_ASSERT_CONTAINS(t, "usage: piper-sim FILE");
    TEST_ASSERT_CONTAINS(t, "\n  auto        rings; across nodes,");
    TEST_ASSERT_CONTAINS(t, "\n  ring-steps  one flat ring in lock-step phases of bytes/n\n");
    TEST_ASSERT_CONTAINS(t, "\n  tree        all-reduce over NCCL's double binary tree;");
    free(t);
}

/* The table of collective algorithms: every row's name parses back to its row, names are distinct,
 * every row has a help line, and an unknown name lists the table's names. */
static void test_coll_table(void)
{
    CU_ASSERT_EQUAL(SIM_NCOLL, 4);
    for (int a = 0; a < SIM_NCOLL; a++) {
        base_error e;
        base_error_clear(&e);
        sim_coll_algo got = SIM_NCOLL;
        CU_ASSERT_EQUAL(sim_coll_parse(sim_coll_name((sim_coll_algo)a), &got, &e), 0);
        CU_ASSERT_EQUAL(got, a);
        CU_ASSERT(strlen(sim_coll_help((sim_coll_algo)a)) > 8);
        for (int b = 0; b < a; b++) CU_ASSERT(strcmp(sim_coll_name((sim_coll_algo)a), sim_coll_name((sim_coll_algo)b)));
    }
    CU_ASSERT_STRING_EQUAL(sim_coll_name(SIM_COLL_AUTO), "auto");
    CU_ASSERT_STRING_EQUAL(sim_coll_name(SIM_COLL_RING_STEPS), "ring-steps");
    CU_ASSERT_STRING_EQUAL(sim_coll_name(SIM_COLL_TREE), "tree");
    base_error e;
    base_error_clear(&e);
    sim_coll_algo got = SIM_COLL_TREE;
    CU_ASSERT_EQUAL(sim_coll_parse("Ring", &got, &e), -1);
    CU_ASSERT_EQUAL(got, SIM_COLL_TREE); /* untouched on error */
    CU_ASSERT_STRING_EQUAL(e.msg, "--coll Ring: unknown algorithm; use auto, ring, ring-steps or tree");
}

/* Writes `text` with the value of the first " key=" replaced by `val` to `out`; returns the
 * 1-based line of the edit, or 0 when the key is not there. */
static int write_edited(const char *text, const char *key, const char *val, const char *out)
{
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *at = strstr(text, pat);
    if (!at) return 0;
    const char *v = at + strlen(pat), *end = v + strcspn(v, " \n");
    FILE *f = fopen(out, "w");
    if (!f) return 0;
    fprintf(f, "%.*s%s%s", (int)(v - text), text, val, end);
    fclose(f);
    int line = 1;
    for (const char *c = text; c < at; c++) line += *c == '\n';
    return line;
}

/* Figures the simulation cannot use are refused, named, before SimGrid sees them (it aborts on a
 * speed or bandwidth of 0): in a plan (file:line and key), in a platform (the host or link), in
 * --costs. Huge but finite costs give the closed form scaled (27 units of 1e30 s); costs whose
 * sum overflows a double say so instead of "the plan deadlocks"; --no-check with a wait whose
 * event nothing records is an error, not a read before the instruction array (build-asan). */
static void test_untrusted_figures(void)
{
    char plan_path[2048], edited[2048], err[2048], xml_path[2048], norec[2048]; /* tmp_path reuses its buffer */
    snprintf(plan_path, sizeof plan_path, "%s", tmp_path("fig.plan"));
    snprintf(edited, sizeof edited, "%s", tmp_path("fig_edit.plan"));
    snprintf(err, sizeof err, "%s", tmp_path("fig.err"));
    snprintf(xml_path, sizeof xml_path, "%s", tmp_path("fig.xml"));
    snprintf(norec, sizeof norec, "%s", tmp_path("norec.plan"));
    CU_ASSERT_EQUAL_FATAL(compile("tests/fixtures/sim/pp4_1f1b_tiny.yaml", plan_path), 0);
    char *good = slurp(plan_path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(good);
    static const struct {
        const char *key, *val, *want;
    } figs[] = {
        {"nvlink_bw", "0", "nvlink_bw: '0' is not > 0; write a positive decimal number such as 1.5e12"},
        {"nic_bw", "nan", "nic_bw: 'nan' is not a finite number; write a positive decimal number"},
        {"peak_bf16", "inf", "peak_bf16: 'inf' is not a finite number; write a finite, non-negative decimal number"},
        {"mem_bytes", "-1", "mem_bytes: '-1' is not >= 0; write a finite, non-negative decimal number"},
        {"flops", "1e999", "flops: '1e999' is not a finite number"},
    };
    for (size_t k = 0; k < BASE_COUNT(figs); k++) {
        int line = write_edited(good, figs[k].key, figs[k].val, edited);
        CU_ASSERT_FATAL(line > 0);
        CU_ASSERT_EQUAL(run_cmdf("'%s' '%s' -q 2> '%s'", bin_path("piper-sim"), edited, err), 1);
        char *t = slurp(err), want[256];
        snprintf(want, sizeof want, "fig_edit.plan:%d: %s", line, figs[k].want);
        TEST_ASSERT_CONTAINS(t, want);
        free(t);
    }
    free(good);

    /* a platform whose GPU computes at speed 0, or whose links carry nothing */
    base_error e;
    static const struct {
        const char *from, *to, *want;
    } plats[] = {
        {"speed=\"1e9f\"", "speed=\"0f\"", "host gpu0 has speed 0; give it a finite speed > 0"},
        {"bw=\"100GBps\"", "bw=\"0GBps\"", "has bandwidth 0; give it a finite bandwidth > 0"},
    };
    char *xml = slurp(test_src_path("tests/fixtures/sim/platform_4gpu.xml"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(xml);
    for (size_t k = 0; k < BASE_COUNT(plats); k++) {
        const char *at = strstr(xml, plats[k].from);
        CU_ASSERT_PTR_NOT_NULL_FATAL(at);
        FILE *f = fopen(xml_path, "w");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        fprintf(f, "%.*s%s%s", (int)(at - xml), xml, plats[k].to, at + strlen(plats[k].from));
        fclose(f);
        base_error_clear(&e);
        CU_ASSERT_EQUAL(sim_platform_check(xml_path, 4, &e), -1);
        TEST_ASSERT_CONTAINS(e.msg, plats[k].want);
    }
    free(xml);

    /* --costs with a negative duration: refused before anything runs, exit 2 */
    CU_ASSERT_EQUAL(run_cmdf("'%s' '%s' -q --costs unit:F=-1 2> '%s'", bin_path("piper-sim"), plan_path, err), 2);
    char *t = slurp(err);
    TEST_ASSERT_CONTAINS(t, "--costs: 'F=-1' is not a duration; write e.g. F=1 (seconds) or F=2ms");
    free(t);

    /* 1F1B p = 4, m = 6 with F = 1e30 s, B = 2e30 s: 27e30 s, the closed form scaled */
    plan_set p;
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(plan_read_file(&p, plan_path, &e), 0);
    sim_options o;
    sim_options_init(&o, &p);
    CU_ASSERT_EQUAL_FATAL(sim_costs_parse(&o.costs, "unit:F=1e30,B=2e30,nocomm", &e), 0);
    sim_result r;
    CU_ASSERT_EQUAL_FATAL(simulate(&p, &o, &r), 0);
    ASSERT_NEAR(r.step_seconds, 27e30, 1e-12);
    sim_result_free(&r);
    sim_options_init(&o, &p);
    CU_ASSERT_EQUAL_FATAL(sim_costs_parse(&o.costs, "unit:F=1e307,B=1e308,nocomm", &e), 0);
    CU_ASSERT_EQUAL(sim_run(&p, &o, &r, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "the simulated clock overflowed (it reached inf s): the plan's costs add up to more");
    CU_ASSERT_PTR_NULL(strstr(e.msg, "deadlock"));
    plan_free(&p);

    /* a wait for an event that no instruction records, with and without the static check */
    FILE *f = fopen(norec, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("piper-plan 2\ndtypes param=bf16 act=bf16 grad=fp32 opt=fp32\n"
          "gpu name=H100 peak_fp32=1e12 peak_bf16=1e12 peak_fp16=1e12 peak_fp64=1e12 peak_fp8=0 hbm_bw=1e12 "
          "mem_bytes=1e10 reserve_bytes=0\n"
          "model name=m family=gpt layers=1 hidden=8 heads=1 kv_heads=1 head_dim=8 ffn=8 experts=0 expert_ffn=0 "
          "top_k=0 capacity_factor=0 vocab=8 seq=8 tied_embeddings=false qk_norm=false dropout=false "
          "micro_batch=1 num_microbatches=1 global_batch=1\n"
          "regions 0\nkernel_ids 0\nkernel_lists 0\ngroups 0\nlists 1\n"
          "list 0 streams=2 bufs=0 events=1 group_slots=0 instrs=2\n  stream 0 a\n  stream 1 b\n"
          "  0 wait s=a event=0\n  1 nop s=b\n"
          "devices 1\n  0 node=0 list=0 peer_offset=0 slots=\nend\n", f);
    fclose(f);
    for (int nc = 0; nc < 2; nc++) {
        CU_ASSERT_EQUAL(run_cmdf("'%s' %s '%s' -q 2> '%s'", bin_path("piper-sim"), nc ? "--no-check" : "",
                                 norec, err), 1);
        t = slurp(err);
        TEST_ASSERT_CONTAINS(t, "device 0 (list 0) #0 wait s=a event=0: waits for event 0, which no instruction of the list records");
        free(t);
    }
}

int piper_tests_register(void)
{
    static const test_case model[] = {
        {"GEMM efficiency: 256/312 at 16384^3, less when small or skinny", test_gemm_efficiency},
        {"kernel time: roofline with GEMM efficiency and launch overhead", test_kernel_seconds},
        {"host model: launch-bound, GPU-bound, synchronisation at p2p", test_host_queue},
        {"host model: no p2p waits where a blocking host would deadlock", test_host_block},
        {"link defaults per GPU type", test_link_defaults},
        {"--links values, units and errors", test_links_parse},
        {"--costs values and errors", test_costs_parse},
        {"calibration files and the cluster's calibration keys", test_calibration},
        {"platform XML: hosts, NVLink, NICs", test_platform_xml},
        {"collective algorithms: one table of names, help and lookup", test_coll_table},
        {NULL, NULL},
    };
    static const test_case sim[] = {
        {"intra-node transfers take NVLink, inter-node ones the NIC", test_routes_nvlink_and_nic},
        {"GPUs sharing a NIC share its bandwidth", test_routes_shared_nic},
        {"a shared NIC does not replace NVLink inside a node", test_routes_nvlink_when_nic_shared},
        {"nocomm: transfers are free", test_nocomm},
        {"sendrecv groups exchange in both directions at once", test_sendrecv_exchange},
        {"record/wait across streams; streams share the GPU", test_record_wait_and_sharing},
        {"compute slows while transfers run (comm_slowdown)", test_comm_slowdown},
        {"ring all-reduce matches the alpha-beta formula", test_ring_all_reduce},
        {"tree all-reduce matches the double-binary-tree alpha-beta formula", test_tree_all_reduce},
        {"all-gather, reduce-scatter, all-to-all", test_ring_gather_scatter_a2a},
        {"across nodes: a flat ring at the NIC's pace, or hierarchical", test_ring_across_nodes},
        {"two-node all-reduce = one-node + the hierarchical cross-node term", test_two_nodes_vs_one},
        {"memory by category in simulated time; over-capacity flag", test_memory_in_time},
        {"1F1B closed forms on a tiny program (m=6)", test_1f1b_tiny_closed_form},
        {"1F1B closed forms on configs/programs/pp4_1f1b.yaml (m=8)", test_1f1b_bundled_closed_form},
        {"GPipe closed forms on a tiny program (m=6)", test_gpipe_closed_form},
        {"ZeRO-3 moves 1.5x the bytes of ZeRO-0 (one micro-batch)", test_zero3_bytes},
        {"fp32 gradients: ZeRO-0 sends twice, ZeRO-3 one bf16 volume more", test_fp32_grads_bytes},
        {"piper-sim program.yaml: deterministic report and --json", test_cli_program_json_deterministic},
        {"links come from the plan; --links overrides them", test_links_from_plan},
        {"--trace: valid Chrome trace JSON, no overlaps, one event per instruction", test_trace},
        {"a user's platform XML: checked first, file:line errors, same results", test_user_platform},
        {"folding data-parallel replicas: the full run's figures, or not folded", test_fold},
        {"piper-sim errors and exit codes", test_cli_errors},
        {"figures it cannot use are refused, named; huge costs are not a deadlock", test_untrusted_figures},
        {NULL, NULL},
    };
    if (test_add_suite("sim cost model and options", model)) return -1;
    CU_pSuite s = CU_add_suite("sim replay", suite_init, suite_clean);
    if (!s) return -1;
    for (const test_case *c = sim; c->name; c++)
        if (!CU_add_test(s, c->name, c->fn)) return -1;
    return 0;
}
