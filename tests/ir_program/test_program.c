/* test_program.c — clusters (the GPU table, every config in configs/clusters/, unit parsing,
 * errors) and programs (every directive kind with its fields, JSON and Piper's bare array,
 * and each error path with its message). Fixtures live in tests/fixtures/programs/. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/cluster.h"
#include "ir/program.h"
#include "tests/testutil.h"

#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * MIB)

static base_arena arena;

static const char *fixture(const char *name)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s", test_src_path("tests/fixtures/programs"));
    if (name) {
        size_t n = strlen(buf);
        snprintf(buf + n, sizeof buf - n, "/%s", name);
    }
    return buf;
}

static int load_cluster_file(const char *path, ir_cluster *c, base_error *e)
{
    ir_doc *d;
    if (ir_doc_load(&arena, path, &d, e)) return -1;
    return ir_cluster_from_doc(d, &arena, c, e);
}

static int parse_cluster(const char *text, ir_cluster *c, base_error *e)
{
    ir_doc *d;
    if (ir_doc_parse(&arena, "cluster.yaml", text, strlen(text), &d, e)) return -1;
    return ir_cluster_from_doc(d, &arena, c, e);
}

/* The model and cluster most inline programs are checked against. */
static ir_model moe, gpt;
static ir_cluster dgx;

static int suite_init(void)
{
    base_error e;
    base_error_clear(&e);
    base_arena_init(&arena);
    char path[4096];
    snprintf(path, sizeof path, "%s", fixture("tiny_moe.yaml"));
    ir_doc *d;
    if (ir_doc_load(&arena, path, &d, &e) || ir_model_from_doc(d, &arena, &moe, &e)) goto fail;
    snprintf(path, sizeof path, "%s", fixture("tiny_gpt.yaml"));
    if (ir_doc_load(&arena, path, &d, &e) || ir_model_from_doc(d, &arena, &gpt, &e)) goto fail;
    snprintf(path, sizeof path, "%s", test_src_path("configs/clusters/dgx_a100_8.yaml"));
    if (load_cluster_file(path, &dgx, &e)) goto fail;
    return 0;
fail:
    fprintf(stderr, "fixture setup failed: %s\n", e.msg);
    return -1;
}

static int suite_clean(void)
{
    base_arena_free(&arena);
    return 0;
}

/* ---------------------------------------------------------------- GPU table */

static void test_gpu_table_figures(void)
{
    base_error e;
    base_error_clear(&e);
    plan_gpu g;

    CU_ASSERT_EQUAL_FATAL(ir_gpu_lookup("H100", &g, &e), 0);
    CU_ASSERT_STRING_EQUAL(g.name, "H100");
    CU_ASSERT_DOUBLE_EQUAL(g.peak_flops[PLAN_BF16], 989e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(g.peak_flops[PLAN_FP16], 989e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(g.peak_flops[PLAN_FP8], 1979e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(g.peak_flops[PLAN_FP32], 67e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(g.peak_flops[PLAN_FP64], 67e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(g.hbm_bw, 3.35e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(g.mem_bytes, 81559.0 * MIB, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(g.reserve_bytes, 4 * GIB, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(ir_gpu_nvlink_default("H100"), 450e9, 1);
    CU_ASSERT_DOUBLE_EQUAL(ir_gpu_nic_default("H100"), 50e9, 1);

    CU_ASSERT_EQUAL_FATAL(ir_gpu_lookup("H200", &g, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(g.peak_flops[PLAN_BF16], 989e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(g.peak_flops[PLAN_FP8], 1979e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(g.hbm_bw, 4.8e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(g.mem_bytes, 143771.0 * MIB, 0.5);
    CU_ASSERT(fabs(g.mem_bytes - 150.8e9) < 0.05e9); /* hardware.md: "(150.8e9 bytes)" */
    CU_ASSERT_DOUBLE_EQUAL(ir_gpu_nvlink_default("H200"), 450e9, 1);

    CU_ASSERT_EQUAL_FATAL(ir_gpu_lookup("H800", &g, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(g.peak_flops[PLAN_BF16], 989e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(g.peak_flops[PLAN_FP32], 67e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(g.peak_flops[PLAN_FP64], 1e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(g.hbm_bw, 3.35e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(g.mem_bytes, 81559.0 * MIB, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(ir_gpu_nvlink_default("H800"), 200e9, 1);

    CU_ASSERT_EQUAL_FATAL(ir_gpu_lookup("A100-80GB", &g, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(g.peak_flops[PLAN_BF16], 312e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(g.peak_flops[PLAN_FP8], 0, 0); /* no fp8 units on Ampere */
    CU_ASSERT_DOUBLE_EQUAL(g.peak_flops[PLAN_FP32], 19.5e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(g.peak_flops[PLAN_FP64], 19.5e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(g.hbm_bw, 2.039e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(g.mem_bytes, 81920.0 * MIB, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(ir_gpu_nvlink_default("A100-80GB"), 300e9, 1);
    CU_ASSERT_DOUBLE_EQUAL(ir_gpu_nic_default("A100-80GB"), 25e9, 1);

    CU_ASSERT_EQUAL_FATAL(ir_gpu_lookup("A100-40GB", &g, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(g.hbm_bw, 1.555e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(g.mem_bytes, 40960.0 * MIB, 0.5);

    CU_ASSERT_EQUAL_FATAL(ir_gpu_lookup("cpu", &g, &e), 0);
    CU_ASSERT(g.peak_flops[PLAN_FP32] > 0 && g.peak_flops[PLAN_FP32] < 1e13);
    CU_ASSERT(g.mem_bytes > g.reserve_bytes);
    CU_ASSERT_FALSE(e.set);

    /* every type has positive figures for what a bf16 or fp32 plan needs */
    CU_ASSERT_EQUAL(ir_gpu_count(), 6);
    for (int i = 0; i < ir_gpu_count(); i++) {
        CU_ASSERT_EQUAL_FATAL(ir_gpu_lookup(ir_gpu_name(i), &g, &e), 0);
        CU_ASSERT(g.peak_flops[PLAN_BF16] > 0 && g.peak_flops[PLAN_FP32] > 0);
        CU_ASSERT(g.peak_flops[PLAN_FP64] > 0 && g.hbm_bw > 0);
        CU_ASSERT(g.mem_bytes > g.reserve_bytes && g.reserve_bytes > 0);
        CU_ASSERT(ir_gpu_nvlink_default(ir_gpu_name(i)) > 0);
    }
    CU_ASSERT_PTR_NULL(ir_gpu_name(6));
}

static void test_gpu_names(void)
{
    base_error e;
    plan_gpu g;
    static const char *const h100[] = {"h100", "H100-SXM", "H100 SXM5", "h100_sxm5_80gb"};
    for (size_t i = 0; i < BASE_COUNT(h100); i++) {
        base_error_clear(&e);
        CU_ASSERT_EQUAL(ir_gpu_lookup(h100[i], &g, &e), 0);
        CU_ASSERT_STRING_EQUAL(g.name, "H100");
    }
    base_error_clear(&e);
    CU_ASSERT_EQUAL(ir_gpu_lookup("A100_SXM4_40GB", &g, &e), 0);
    CU_ASSERT_STRING_EQUAL(g.name, "A100-40GB");

    base_error_clear(&e);
    CU_ASSERT_EQUAL(ir_gpu_lookup("A100", &g, &e), -1);
    CU_ASSERT_STRING_EQUAL(e.msg, "GPU type 'A100' is ambiguous; say A100-40GB or A100-80GB");
    base_error_clear(&e);
    CU_ASSERT_EQUAL(ir_gpu_lookup("V100", &g, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "unknown GPU type 'V100'; use one of A100-40GB, A100-80GB, H100, "
                                "H200, H800, cpu");
    CU_ASSERT_DOUBLE_EQUAL(ir_gpu_nvlink_default("V100"), 0, 0);
}

/* ---------------------------------------------------------------- cluster files */

static void test_every_cluster_config_loads(void)
{
    const char *dir = test_src_path("configs/clusters");
    char dirpath[4096];
    snprintf(dirpath, sizeof dirpath, "%s", dir);
    DIR *dp = opendir(dirpath);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dp);
    static const char *const required[] = {"dgx_a100_8.yaml", "a100_vtrain.yaml", "h100_1024.yaml",
                                           "h200_8.yaml",     "h800_2048.yaml",   "cpu_8.yaml"};
    int n = 0, found = 0;
    struct dirent *de;
    while ((de = readdir(dp))) {
        size_t len = strlen(de->d_name);
        if (len < 6 || strcmp(de->d_name + len - 5, ".yaml")) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dirpath, de->d_name);
        base_error e;
        base_error_clear(&e);
        ir_cluster c;
        int rc = load_cluster_file(path, &c, &e);
        if (rc) fprintf(stderr, "\n  %s: %s\n", de->d_name, e.msg);
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT_EQUAL(e.nwarn, 0);
        if (rc) continue;
        n++;
        /* the name inside matches the file name, so reports name the config users picked */
        CU_ASSERT_EQUAL(strncmp(c.name, de->d_name, len - 5), 0);
        CU_ASSERT(ir_cluster_devices(&c) >= 1);
        for (size_t i = 0; i < BASE_COUNT(required); i++) found += !strcmp(de->d_name, required[i]);
        CU_ASSERT(c.nvlink_bw > 0 && c.nic_bw > 0 && c.gpus_per_nic >= 1);
        CU_ASSERT(c.gpu.mem_bytes > c.gpu.reserve_bytes);
    }
    closedir(dp);
    /* others may add configs; every one must load, and the shipped six must be there */
    CU_ASSERT(n >= 6);
    CU_ASSERT_EQUAL(found, 6);
}

static void test_cluster_configs_shapes(void)
{
    base_error e;
    base_error_clear(&e);
    ir_cluster c;
    CU_ASSERT_EQUAL_FATAL(load_cluster_file(test_src_path("configs/clusters/a100_vtrain.yaml"), &c, &e), 0);
    CU_ASSERT_EQUAL(ir_cluster_devices(&c), 256);
    CU_ASSERT_EQUAL(c.gpus_per_node, 8);
    CU_ASSERT_EQUAL(c.gpus_per_nic, 2);
    CU_ASSERT_DOUBLE_EQUAL(c.nvlink_bw, 150e9, 1);
    CU_ASSERT_DOUBLE_EQUAL(c.nic_bw, 25e9, 1); /* 200 Gb/s */
    /* 800 Gb/s per node: 4 NICs of 200 Gb/s */
    CU_ASSERT_DOUBLE_EQUAL(c.nic_bw * c.gpus_per_node / c.gpus_per_nic * 8, 800e9, 1);
    CU_ASSERT_STRING_EQUAL(c.gpu.name, "A100-80GB");

    CU_ASSERT_EQUAL_FATAL(load_cluster_file(test_src_path("configs/clusters/h100_1024.yaml"), &c, &e), 0);
    CU_ASSERT_EQUAL(ir_cluster_devices(&c), 1024);
    CU_ASSERT_EQUAL(c.nodes, 128);
    CU_ASSERT_DOUBLE_EQUAL(c.nic_bw, 50e9, 1);
    CU_ASSERT_EQUAL(c.gpus_per_nic, 1);
    CU_ASSERT_EQUAL(c.topology, IR_NET_FAT_TREE);
    CU_ASSERT_DOUBLE_EQUAL(c.oversubscription, 1, 0);
    CU_ASSERT_DOUBLE_EQUAL(c.nvlink_bw, 450e9, 1);
    CU_ASSERT_DOUBLE_EQUAL(c.nvlink_latency, 1e-6, 1e-12);

    CU_ASSERT_EQUAL_FATAL(load_cluster_file(test_src_path("configs/clusters/h800_2048.yaml"), &c, &e), 0);
    CU_ASSERT_EQUAL(ir_cluster_devices(&c), 2048);
    CU_ASSERT_DOUBLE_EQUAL(c.nvlink_bw, 200e9, 1);
    CU_ASSERT_EQUAL(c.topology, IR_NET_RAIL);

    CU_ASSERT_EQUAL_FATAL(load_cluster_file(test_src_path("configs/clusters/h200_8.yaml"), &c, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(c.gpu.mem_bytes, 143771.0 * MIB, 0.5);

    CU_ASSERT_EQUAL_FATAL(load_cluster_file(test_src_path("configs/clusters/cpu_8.yaml"), &c, &e), 0);
    CU_ASSERT_STRING_EQUAL(c.gpu.name, "cpu");
    CU_ASSERT_DOUBLE_EQUAL(c.gpu.reserve_bytes, 1 * GIB, 0.5);
    CU_ASSERT_EQUAL(ir_cluster_devices(&c), 8);

    CU_ASSERT_STRING_EQUAL(dgx.name, "dgx_a100_8");
    CU_ASSERT_EQUAL(ir_cluster_devices(&dgx), 8);
    CU_ASSERT_DOUBLE_EQUAL(dgx.gpu.mem_bytes, 81920.0 * MIB, 0.5);
    CU_ASSERT_PTR_NULL(dgx.platform_xml);
    CU_ASSERT_FALSE(e.set);
}

static void test_cluster_units(void)
{
    base_error e;
    base_error_clear(&e);
    ir_cluster c;
    int rc = load_cluster_file(fixture("cluster_units.yaml"), &c, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_STRING_EQUAL(c.name, "units_test");
    CU_ASSERT_STRING_EQUAL(c.gpu.name, "H100-derated");
    CU_ASSERT_DOUBLE_EQUAL(c.gpu.peak_flops[PLAN_BF16], 800e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(c.gpu.peak_flops[PLAN_FP16], 800e12, 1); /* follows bf16 */
    CU_ASSERT_DOUBLE_EQUAL(c.gpu.peak_flops[PLAN_FP8], 1.6e15, 1);
    CU_ASSERT_DOUBLE_EQUAL(c.gpu.peak_flops[PLAN_FP32], 67e12, 1);  /* from the base */
    CU_ASSERT_DOUBLE_EQUAL(c.gpu.hbm_bw, 3e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(c.gpu.mem_bytes, 80 * GIB, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(c.gpu.reserve_bytes, 2.5 * GIB, 0.5);
    CU_ASSERT_EQUAL(ir_cluster_devices(&c), 8);
    CU_ASSERT_DOUBLE_EQUAL(c.nvlink_bw, 400e9, 1);
    CU_ASSERT_DOUBLE_EQUAL(c.nvlink_latency, 700e-9, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(c.nic_bw, 25e9, 1);
    CU_ASSERT_EQUAL(c.gpus_per_nic, 2);
    CU_ASSERT_DOUBLE_EQUAL(c.nic_latency, 4e-6, 1e-15);
    CU_ASSERT_EQUAL(c.topology, IR_NET_RAIL);
    CU_ASSERT_DOUBLE_EQUAL(c.oversubscription, 2, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c.platform_xml);
    CU_ASSERT_STRING_EQUAL(c.platform_xml, fixture("platform_2.xml"));
    CU_ASSERT_EQUAL(c.ncalib, 2);
    CU_ASSERT_DOUBLE_EQUAL(ir_cluster_calib(&c, "gemm_efficiency", 1), 0.8, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(ir_cluster_calib(&c, "nccl_overhead", 1), 2e-6, 1e-18);
    CU_ASSERT_DOUBLE_EQUAL(ir_cluster_calib(&c, "absent", 0.5), 0.5, 0);

    /* plain numbers are bytes, bytes/s and seconds; a custom type needs its core figures */
    base_error_clear(&e);
    rc = parse_cluster("gpu: {name: X1, peak_bf16: 1e15, hbm_bandwidth: 2e12, memory: 68719476736}\n"
                       "nodes: 1\ngpus_per_node: 2\nnvlink: {bandwidth: 1e11, latency: 0.000002}\n",
                       &c, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_STRING_EQUAL(c.gpu.name, "X1");
    CU_ASSERT_DOUBLE_EQUAL(c.gpu.peak_flops[PLAN_BF16], 1e15, 1);
    CU_ASSERT_DOUBLE_EQUAL(c.gpu.mem_bytes, 64 * GIB, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(c.gpu.reserve_bytes, 4 * GIB, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(c.nvlink_bw, 1e11, 1);
    CU_ASSERT_DOUBLE_EQUAL(c.nvlink_latency, 2e-6, 1e-15);
    CU_ASSERT_STRING_EQUAL(c.name, "cluster"); /* the document's stem */
}

typedef struct { const char *text, *msg; } err_case;

static void test_cluster_errors(void)
{
    static const err_case cases[] = {
        {"gpu: H100\nnodez: 2\n", "cluster.yaml:2:1: unknown key 'nodez' in cluster; did you mean 'nodes'?"},
        {"nodes: 2\n", "cluster.yaml:1:1: cluster has no 'gpu'; add gpu: H100"},
        {"gpu: A100\n", "cluster.yaml:1:6: GPU type 'A100' is ambiguous; say A100-40GB or A100-80GB"},
        {"gpu: B300\n", "cluster.yaml:1:6: unknown GPU type 'B300'; use one of A100-40GB, A100-80GB"},
        {"gpu: {name: X1, peak_bf16: 1e15, memory: 80GB}\n",
         "cluster.yaml:1:6: custom gpu 'X1' has no 'hbm_bandwidth'; give it, or name a known type with base:"},
        {"gpu: {base: H100, peak_bf16: -5}\n",
         "cluster.yaml:1:30: expected a rate for 'peak_bf16'"},
        {"gpu: {base: H100, peak_bf16: 0}\n",
         "cluster.yaml:1:30: peak_bf16 must be a positive number, got '0'; give a value above 0"},
        {"gpu: H100\nmemory_reserve: 90GiB\n",
         "cluster.yaml:2:17: memory_reserve (90.00 GiB) leaves nothing of the GPU's 79.65 GiB; reserve less"},
        {"gpu: H100\nnetwork: {topology: torus}\n",
         "cluster.yaml:2:21: unknown network topology 'torus'; use fat-tree or rail"},
        {"gpu: H100\ngpus_per_node: 8\nnetwork: {gpus_per_nic: 3}\n",
         "cluster.yaml:3:25: gpus_per_nic = 3 does not divide gpus_per_node = 8"},
        {"gpu: H100\nnetwork: {gpus_per_nic: 4, nics_per_node: 4}\n",
         "nics_per_node = 4 means 2 GPUs per NIC, but gpus_per_nic says 4; give only one of them"},
        {"gpu: H100\nnetwork: {oversubscription: 0.5}\n",
         "cluster.yaml:2:29: oversubscription must be 1 (non-blocking) or more"},
        {"gpu: H100\nnodes: 0\n", "cluster.yaml:2:8: nodes must be between 1 and"},
        {"gpu: H100\nplatform: no_such_platform.xml\n",
         "cluster.yaml:2:11: platform file 'no_such_platform.xml' (resolved to 'no_such_platform.xml') cannot be opened"},
        {"gpu: {name: X1, peak_bf16: 1e15, hbm_bandwidth: 1e12, memory: 8GB}\n",
         "cluster.yaml:1:1: no NVLink bandwidth is known for GPU 'X1'; set nvlink: {bandwidth: ...}"},
        {"gpu: H100\nnvlink: {bandwidth: fast}\n", "cluster.yaml:2:21:"},
        {"gpu: H100\ncalibration: {gemm_efficiency: high}\n", "cluster.yaml:2:32:"},
        {"- gpu: H100\n", "cluster.yaml:1:1: 'cluster' must be a map"},
    };
    for (size_t i = 0; i < BASE_COUNT(cases); i++) {
        base_error e;
        base_error_clear(&e);
        ir_cluster c;
        CU_ASSERT_EQUAL(parse_cluster(cases[i].text, &c, &e), -1);
        TEST_ASSERT_CONTAINS(e.msg, cases[i].msg);
    }
}

/* ---------------------------------------------------------------- programs */

static int load_program(const char *name, ir_program *p, base_error *e)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", fixture(name));
    return ir_program_load(path, NULL, NULL, &arena, p, e);
}

static void assert_devices(const ir_directive *d, const int32_t *want, int n)
{
    CU_ASSERT_EQUAL_FATAL(d->ndevices, n);
    for (int i = 0; i < n; i++) CU_ASSERT_EQUAL(d->devices[i], want[i]);
}

static const ir_tag_match *find_tag(const ir_filter *f, ir_tag t)
{
    for (int i = 0; i < f->n; i++)
        if (f->m[i].tag == t) return &f->m[i];
    return NULL;
}

static void test_every_directive(void)
{
    base_error e;
    base_error_clear(&e);
    ir_program p;
    int rc = load_program("every_directive.yaml", &p, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(e.nwarn, 0);
    CU_ASSERT_STRING_EQUAL(p.name, "every_directive");
    CU_ASSERT_STRING_EQUAL(p.model.name, "tiny_moe");
    CU_ASSERT_EQUAL(p.model.experts, 4);
    CU_ASSERT_STRING_EQUAL(p.cluster.name, "dgx_a100_8");
    CU_ASSERT_FALSE(p.from_piper_array);
    CU_ASSERT_EQUAL(p.global_batch, 32);
    CU_ASSERT_EQUAL(p.micro_batch, 2);
    CU_ASSERT_EQUAL(p.param_dtype, PLAN_BF16);
    CU_ASSERT_EQUAL(p.act_dtype, PLAN_BF16);
    CU_ASSERT_EQUAL(p.grad_dtype, PLAN_BF16);
    CU_ASSERT_EQUAL(p.opt_dtype, PLAN_FP32);
    CU_ASSERT_EQUAL(p.optimizer, IR_OPT_ADAMW);
    CU_ASSERT_DOUBLE_EQUAL(p.grad_clip, 1.0, 0);
    CU_ASSERT_DOUBLE_EQUAL(p.lr, 3e-4, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(p.weight_decay, 0.1, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(p.beta1, 0.9, 0);
    CU_ASSERT_DOUBLE_EQUAL(p.beta2, 0.95, 0);
    CU_ASSERT_EQUAL(p.ann.pp_stages, 2);
    CU_ASSERT_EQUAL_FATAL(p.ann.npp_ranges, 2);
    CU_ASSERT_EQUAL(p.ann.pp_ranges[0][0], 0);
    CU_ASSERT_EQUAL(p.ann.pp_ranges[0][1], 1);
    CU_ASSERT_EQUAL(p.ann.pp_ranges[1][0], 2);
    CU_ASSERT_EQUAL(p.ann.pp_ranges[1][1], 3);
    CU_ASSERT(p.ann.ep && p.ann.tp);
    CU_ASSERT_EQUAL_FATAL(p.ndirectives, 11);

    const ir_directive *d = p.directives;
    for (int i = 0; i < p.ndirectives; i++) {
        CU_ASSERT_EQUAL(d[i].index, i);
        CU_ASSERT_PTR_NOT_NULL(d[i].doc);
        CU_ASSERT_STRING_EQUAL(d[i].file, p.file);
    }
    /* 0: place {PP: 0} on 0-3, stream compute; line of the "- op:" item */
    CU_ASSERT_EQUAL(d[0].op, IR_DIR_PLACE);
    CU_ASSERT_EQUAL(d[0].line, 20);
    CU_ASSERT_EQUAL(d[0].col, 5);
    CU_ASSERT_EQUAL_FATAL(d[0].filter.n, 1);
    CU_ASSERT_EQUAL(d[0].filter.m[0].tag, IR_TAG_PP);
    CU_ASSERT_EQUAL(d[0].filter.m[0].value, 0);
    CU_ASSERT_FALSE(d[0].filter.m[0].any);
    CU_ASSERT_EQUAL(d[0].filter.line, 21);
    assert_devices(&d[0], (const int32_t[]){0, 1, 2, 3}, 4);
    CU_ASSERT_STRING_EQUAL(d[0].stream, "compute");
    /* 1: lowercase tag, device range string, default stream */
    CU_ASSERT_EQUAL(d[1].filter.m[0].tag, IR_TAG_PP);
    CU_ASSERT_EQUAL(d[1].filter.m[0].value, 1);
    assert_devices(&d[1], (const int32_t[]){4, 5, 6, 7}, 4);
    CU_ASSERT_PTR_NULL(d[1].stream);
    /* 2: replicate, Piper's shard_grads = ZeRO-2, bucket with units, streams */
    CU_ASSERT_EQUAL(d[2].op, IR_DIR_REPLICATE);
    CU_ASSERT_TRUE(d[2].filter.m[0].any);
    assert_devices(&d[2], (const int32_t[]){0, 1, 4, 5}, 4);
    CU_ASSERT_EQUAL(d[2].zero, 2);
    CU_ASSERT_DOUBLE_EQUAL(d[2].bucket_bytes, 25e6, 0.5);
    CU_ASSERT_STRING_EQUAL(d[2].reduce_stream, "dp_reduce");
    CU_ASSERT_STRING_EQUAL(d[2].gather_stream, "dp_gather");
    /* 3: shard (EP) */
    CU_ASSERT_EQUAL(d[3].op, IR_DIR_SHARD);
    CU_ASSERT_EQUAL(d[3].filter.n, 2);
    CU_ASSERT_TRUE(find_tag(&d[3].filter, IR_TAG_EP)->any);
    CU_ASSERT_EQUAL(find_tag(&d[3].filter, IR_TAG_REGION)->value, IR_REGION_MOE_EXPERTS);
    assert_devices(&d[3], (const int32_t[]){0, 1}, 2);
    CU_ASSERT_STRING_EQUAL(d[3].stream, "a2a");
    /* 4: shard_tensor */
    CU_ASSERT_EQUAL(d[4].op, IR_DIR_SHARD_TENSOR);
    CU_ASSERT_TRUE(d[4].sequence_parallel);
    CU_ASSERT_EQUAL(find_tag(&d[4].filter, IR_TAG_LAYER)->value, 3);
    assert_devices(&d[4], (const int32_t[]){6, 7}, 2);
    /* 5: split */
    CU_ASSERT_EQUAL(d[5].op, IR_DIR_SPLIT);
    CU_ASSERT_EQUAL(d[5].filter.n, 0);
    CU_ASSERT_STRING_EQUAL(d[5].dim_name, "batch");
    CU_ASSERT_EQUAL(d[5].num_microbatches, 8);
    /* 6: order: a two-filter group, a bare filter as a group, a one-filter group; I/W spellings */
    CU_ASSERT_EQUAL(d[6].op, IR_DIR_ORDER);
    CU_ASSERT_EQUAL_FATAL(d[6].ngroups, 3);
    CU_ASSERT_EQUAL(d[6].group_nfilters[0], 2);
    CU_ASSERT_EQUAL(d[6].group_nfilters[1], 1);
    CU_ASSERT_EQUAL(d[6].group_nfilters[2], 1);
    CU_ASSERT_EQUAL(find_tag(&d[6].groups[0][0], IR_TAG_PASS)->value, PLAN_PASS_F);
    CU_ASSERT_EQUAL(find_tag(&d[6].groups[0][1], IR_TAG_PASS)->value, PLAN_PASS_BW);
    CU_ASSERT_EQUAL(find_tag(&d[6].groups[0][1], IR_TAG_MB)->value, 1);
    CU_ASSERT_EQUAL(find_tag(&d[6].groups[1][0], IR_TAG_PASS)->value, PLAN_PASS_BI);
    CU_ASSERT_EQUAL(find_tag(&d[6].groups[2][0], IR_TAG_PASS)->value, PLAN_PASS_UPD);
    /* 7: recompute */
    CU_ASSERT_EQUAL(d[7].op, IR_DIR_RECOMPUTE);
    CU_ASSERT_EQUAL(d[7].recompute, IR_RECOMPUTE_SELECTIVE);
    CU_ASSERT_EQUAL(find_tag(&d[7].filter, IR_TAG_REGION)->value, IR_REGION_ATTN);
    CU_ASSERT_EQUAL(find_tag(&d[7].filter, IR_TAG_PASS)->value, PLAN_PASS_R);
    /* 8: schedule by name, as written (the schedule pass looks it up), builder option kept in doc */
    CU_ASSERT_EQUAL(d[8].op, IR_DIR_SCHEDULE);
    CU_ASSERT_STRING_EQUAL(d[8].schedule, "1F1B");
    CU_ASSERT_PTR_NULL(d[8].schedule_file);
    CU_ASSERT_PTR_NOT_NULL(ir_doc_get(d[8].doc, "num_microbatches"));
    /* 9: schedule from a file, resolved next to the program */
    CU_ASSERT_PTR_NULL(d[9].schedule);
    CU_ASSERT_STRING_EQUAL(d[9].schedule_file, fixture("order_2ranks.txt"));
    /* 10: zero 3 with the consistent Piper flag; CHUNK tag */
    CU_ASSERT_EQUAL(d[10].zero, 3);
    CU_ASSERT_EQUAL(find_tag(&d[10].filter, IR_TAG_CHUNK)->value, 0);
}

static void test_json_program(void)
{
    base_error e;
    base_error_clear(&e);
    ir_program p;
    int rc = load_program("small.json", &p, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_STRING_EQUAL(p.name, "small_json");
    CU_ASSERT_STRING_EQUAL(p.model.name, "tiny_gpt");
    CU_ASSERT_STRING_EQUAL(p.cluster.name, "two_a100");
    CU_ASSERT_EQUAL(ir_cluster_devices(&p.cluster), 2);
    CU_ASSERT_EQUAL(p.global_batch, 8);
    CU_ASSERT_EQUAL(p.micro_batch, 4);
    CU_ASSERT_EQUAL(p.param_dtype, PLAN_FP32);
    CU_ASSERT_EQUAL(p.grad_dtype, PLAN_FP32);
    CU_ASSERT_EQUAL(p.opt_dtype, PLAN_FP32);
    CU_ASSERT_EQUAL(p.optimizer, IR_OPT_SGD);
    CU_ASSERT_DOUBLE_EQUAL(p.grad_clip, 0, 0);
    CU_ASSERT_EQUAL(p.ann.pp_stages, 2);
    CU_ASSERT_EQUAL(p.ann.npp_ranges, 0);
    CU_ASSERT_FALSE(p.ann.ep);
    CU_ASSERT_EQUAL_FATAL(p.ndirectives, 5);
    CU_ASSERT_EQUAL(p.directives[2].num_microbatches, 2);
    CU_ASSERT_EQUAL(p.directives[3].recompute, IR_RECOMPUTE_FULL);
    CU_ASSERT_STRING_EQUAL(p.directives[4].schedule, "gpipe");
    CU_ASSERT_EQUAL(p.directives[1].line, 11);
}

static void test_piper_array(void)
{
    base_error e;
    base_error_clear(&e);
    ir_program p;
    char path[4096];
    snprintf(path, sizeof path, "%s", fixture("piper_array.json"));
    char mpath[4096];
    snprintf(mpath, sizeof mpath, "%s", fixture("tiny_gpt.yaml"));
    int rc = ir_program_load(path, mpath, test_src_path("configs/clusters/cpu_8.yaml"), &arena, &p, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_TRUE(p.from_piper_array);
    CU_ASSERT_STRING_EQUAL(p.name, "piper_array");
    CU_ASSERT_STRING_EQUAL(p.cluster.name, "cpu_8");
    CU_ASSERT_EQUAL(p.ndirectives, 6);
    /* Piper's replicate key that piper does not act on, warned about with its place */
    CU_ASSERT_EQUAL(e.nwarn, 1);
    TEST_ASSERT_CONTAINS(e.warnings, "piper_array.json:4:85: directive 2 (replicate): key "
                                     "'prefetch_distance' is part of Piper's schema but piper "
                                     "ignores it");
    /* inferred: batch = micro 1 x 4 micro-batches x 2 replicas; PP 0..1 => 2 stages */
    CU_ASSERT_EQUAL(p.micro_batch, 1);
    CU_ASSERT_EQUAL(p.global_batch, 8);
    CU_ASSERT_EQUAL(p.ann.pp_stages, 2);
    CU_ASSERT_FALSE(p.ann.ep);
    CU_ASSERT_EQUAL(p.directives[2].zero, 3);
    CU_ASSERT_EQUAL(p.param_dtype, PLAN_BF16);

    /* the same array without model/cluster cannot load */
    base_error_clear(&e);
    CU_ASSERT_EQUAL(ir_program_load(path, NULL, NULL, &arena, &p, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "piper_array.json:1:1: a bare directive array (Piper's schema) "
                                "names no model or cluster; pass --model and --cluster");
}

/* Parse an inline program against the tiny MoE model and the 8-GPU DGX, unless it brings its
 * own model/cluster keys (then pass use_own). */
static int parse_program(const char *text, bool use_own, ir_program *p, base_error *e)
{
    ir_doc *d;
    if (ir_doc_parse(&arena, "prog.yaml", text, strlen(text), &d, e)) return -1;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", fixture(NULL));
    return ir_program_from_doc(d, dir, use_own ? NULL : &moe, use_own ? NULL : &dgx, &arena, p, e);
}

#define HEAD "batch: {global: 8, micro: 1}\nannotations: {pp: 2, ep: true}\ndirectives:\n"

static void test_program_errors(void)
{
    static const err_case cases[] = {
        /* unknown keys with suggestions, at every level */
        {HEAD "  - op: place\n    filtr: {PP: 0}\n    devices: [0]\n",
         "prog.yaml:5:5: directive 0 (place): unknown key 'filtr'; did you mean 'filter'? (place "
         "takes op, filter, devices, device, stream)"},
        {HEAD "  - {op: split, num_microbatch: 4}\n",
         "prog.yaml:4:17: directive 0 (split): unknown key 'num_microbatch'; did you mean "
         "'num_microbatches'?"},
        {HEAD "  - {op: place, devices: [0], colour: red}\n",
         "prog.yaml:4:31: directive 0 (place): unknown key 'colour'; remove it (place takes op, "
         "filter, devices, device, stream)"},
        {"batch: {global: 8}\ndirectivs: []\n",
         "prog.yaml:2:1: program: unknown key 'directivs'; did you mean 'directives'?"},
        {"batch: {global: 8, mikro: 1}\n",
         "prog.yaml:1:20: batch: unknown key 'mikro'; did you mean 'micro'?"},
        {"batch: {global: 8}\nannotations: {ppp: 2}\n",
         "prog.yaml:2:15: annotations: unknown key 'ppp'; did you mean 'pp'?"},
        {HEAD "  - {op: plase, devices: [0]}\n",
         "prog.yaml:4:10: directive 0: unknown op 'plase'; did you mean 'place'?"},
        {HEAD "  - {devices: [0]}\n",
         "prog.yaml:4:5: directive 0 has no 'op'; add op: place (or replicate, shard, "
         "shard_tensor, split, order, recompute, schedule, mesh, fuse_collectives, route, ring_exchange)"},
        {HEAD "  - {op: repliate, devices: [0]}\n",
         "prog.yaml:4:10: directive 0: unknown op 'repliate'; did you mean 'replicate'? use "
         "place, replicate, shard, shard_tensor, split, order, recompute, schedule, mesh, fuse_collectives, route or ring_exchange"},
        {HEAD "  - {op: pipeline, devices: [0]}\n",
         "prog.yaml:4:10: directive 0: unknown op 'pipeline'; use place, replicate, shard, "
         "shard_tensor, split, order, recompute, schedule, mesh, fuse_collectives, route or ring_exchange"},
        {HEAD "  - {op: replicate, devices: [0, 1], zeros: 1}\n",
         "prog.yaml:4:38: directive 0 (replicate): unknown key 'zeros'; did you mean 'zero'? "
         "(replicate takes op, filter, devices, device, zero, bucket_size, reduce_stream, gather_stream, "
         "shard_grads, shard_params)"},
        {HEAD "  - {op: order, filters: [{PP: 0}], mirorr: true}\n",
         "prog.yaml:4:37: directive 0 (order): unknown key 'mirorr'; did you mean 'mirror'? "
         "(order takes op, filters, mirror)"},
        {HEAD "  - place\n", "prog.yaml:4:5: directive 0 must be a map with an 'op' key"},
        /* filters */
        {HEAD "  - {op: place, filter: {STAGE: 0}, devices: [0]}\n",
         "prog.yaml:4:26: directive 0 (place): unknown filter tag 'STAGE'; use PP, EP, TP, MB, "
         "PASS, LAYER, REGION or CHUNK"},
        {HEAD "  - {op: place, filter: {LAYR: 0}, devices: [0]}\n",
         "prog.yaml:4:26: directive 0 (place): unknown filter tag 'LAYR'; did you mean 'LAYER'? "
         "(tags: PP, EP, TP, MB, PASS, LAYER, REGION, CHUNK)"},
        {HEAD "  - {op: place, filter: {PASS: [F]}, devices: [0]}\n",
         "prog.yaml:4:32: directive 0 (place): the value of PASS must be a pass (F, B, BI, BW, R, "
         "UPD), \"*\" or null"},
        {HEAD "  - {op: place, filter: {REGION: atn}, devices: [0]}\n",
         "prog.yaml:4:34: directive 0 (place): unknown REGION 'atn' (did you mean 'attn'?); use "
         "embed, attn, mlp, moe_gate, moe_experts, moe_combine, head or \"*\""},
        {HEAD "  - {op: place, filter: {PASS: w0}, devices: [0]}\n",
         "prog.yaml:4:32: directive 0 (place): bad PASS value 'w0' (did you mean 'W'?); use F, B, "
         "BI, BW, R, UPD or \"*\" (I and W mean BI and BW)"},
        {HEAD "  - {op: place, filter: {PASS: FWD}, devices: [0]}\n",
         "prog.yaml:4:32: directive 0 (place): bad PASS value 'FWD'; use F, B, BI, BW, R, UPD or "
         "\"*\" (I and W mean BI and BW)"},
        {HEAD "  - {op: place, filter: {PASS: BX}, devices: [0]}\n",
         "bad PASS value 'BX' (did you mean 'B'?)"},
        {HEAD "  - {op: place, filter: {REGION: attention}, devices: [0]}\n",
         "prog.yaml:4:34: directive 0 (place): unknown REGION 'attention'"},
        {HEAD "  - {op: place, filter: {PP: -1}, devices: [0]}\n",
         "prog.yaml:4:30: directive 0 (place): PP = -1; tag values count from 0"},
        {HEAD "  - {op: place, filter: {PP: [0, 1]}, devices: [0]}\n",
         "prog.yaml:4:30: directive 0 (place): the value of PP must be an integer, \"*\" or null"},
        {HEAD "  - {op: place, filter: {PP: 0, pp: 1}, devices: [0]}\n",
         "directive 0 (place): filter names tag PP twice; keep one"},
        {HEAD "  - {op: place, filter: [PP, 0], devices: [0]}\n",
         "prog.yaml:4:25: directive 0 (place): a filter must be a map of tag: value"},
        {HEAD "  - {op: place, filter: {PP: 2}, devices: [0]}\n",
         "prog.yaml:4:25: directive 0 (place): PP 2 does not exist: the annotations make 2 stages "
         "(0-1)"},
        {HEAD "  - {op: place, filter: {TP: 0}, devices: [0]}\n",
         "prog.yaml:4:25: directive 0 (place): the filter names TP but the program does not "
         "annotate tensor-parallel blocks; add annotations: {tp: true}"},
        {HEAD "  - {op: place, filter: {LAYER: 4}, devices: [0]}\n",
         "directive 0 (place): LAYER 4 does not exist: model 'tiny_moe' has 4 layers (0-3)"},
        {"batch: {global: 8}\ndirectives:\n  - {op: place, filter: {PP: 0}, devices: [0]}\n",
         "prog.yaml:3:25: directive 0 (place): the filter names PP but the program annotates no "
         "pipeline stages; add annotations: {pp: N}"},
        /* devices */
        {HEAD "  - {op: place, filter: {PP: 0}, devices: [0, 8]}\n",
         "prog.yaml:4:47: directive 0 (place): device 8 does not exist: cluster 'dgx_a100_8' has 8 "
         "devices (0-7)"},
        {HEAD "  - {op: place, filter: {PP: 0}, devices: \"4-11\"}\n",
         "prog.yaml:4:43: directive 0 (place): device 11 does not exist: cluster 'dgx_a100_8' has 8 "
         "devices (0-7)"},
        {HEAD "  - {op: place, filter: {PP: 0}, devices: \"3-1\"}\n",
         "directive 0 (place): device range 3-1 is backwards; write 1-3"},
        {HEAD "  - {op: place, filter: {PP: 0}, devices: [0, 1, 0]}\n",
         "prog.yaml:4:43: directive 0 (place): device 0 is listed twice"},
        {HEAD "  - {op: place, filter: {PP: 0}, devices: \"zero\"}\n",
         "directive 0 (place): cannot read devices 'zero'; write a list [0, 1, 2], a range \"0-7\""},
        {HEAD "  - {op: place, filter: {PP: 0}, devices: []}\n",
         "directive 0 (place): the device list is empty"},
        {HEAD "  - {op: place, filter: {PP: 0}}\n",
         "prog.yaml:4:5: directive 0 (place) has no 'devices'"},
        /* replicate */
        {HEAD "  - {op: replicate, devices: [0, 1], zero: 4}\n",
         "prog.yaml:4:44: directive 0 (replicate): zero = 4 is out of range; ZeRO stages are 0 "
         "(all-reduce), 1, 2 and 3"},
        {HEAD "  - {op: replicate, devices: [0, 1], zero: 1, shard_grads: true}\n",
         "prog.yaml:4:44: directive 0 (replicate): zero = 1 conflicts with shard_grads/shard_params"},
        {HEAD "  - {op: replicate, devices: [0, 1], zero: 2, shard_params: true}\n",
         "directive 0 (replicate): zero = 2 conflicts with shard_grads/shard_params"},
        {HEAD "  - {op: replicate, devices: [0, 1], shard_params: true, shard_grads: false}\n",
         "directive 0 (replicate): shard_params: true with shard_grads: false"},
        {HEAD "  - {op: replicate, bucket_size: lots}\n",
         "prog.yaml:4:5: directive 0 (replicate) has no 'devices'; say which devices run it, e.g. "
         "devices: [0, 1] or devices: \"0-7\""},
        {HEAD "  - {op: shard, devices: [0, 1], stream: [ep]}\n",
         "prog.yaml:4:42: directive 0 (shard): 'stream' must be a string"},
        {HEAD "  - {op: replicate, devices: [0, 1], bucket_size: lots}\n",
         "prog.yaml:4:51: directive 0 (replicate): expected a byte size for 'bucket_size'"},
        {HEAD "  - {op: replicate, devices: [0, 1], zero: [2]}\n",
         "prog.yaml:4:44: directive 0 (replicate): expected an integer for 'zero'"},
        {HEAD "  - {op: shard_tensor, devices: [0, 1], sequence_parallel: yes please}\n",
         "prog.yaml:4:60: directive 0 (shard_tensor): expected true or false for 'sequence_parallel'"},
        {HEAD "  - {op: place, filter: {PP: 0}, devices: [-1]}\n",
         "prog.yaml:4:44: directive 0 (place): device -1 does not exist; devices count from 0"},
        /* split, recompute, order, schedule */
        {HEAD "  - {op: split, num_microbatches: 0}\n",
         "prog.yaml:4:35: directive 0 (split): num_microbatches = 0 is out of range; give at least "
         "1 micro-batch"},
        {HEAD "  - {op: split}\n", "directive 0 (split) has no 'num_microbatches'"},
        {HEAD "  - {op: split, dim: PP, num_microbatches: 2}\n",
         "prog.yaml:4:22: directive 0 (split): 'PP' is the PP tag already; name the micro-batch "
         "tag otherwise, such as MB"},
        {HEAD "  - {op: split, dim: batch, dim_name: batch, num_microbatches: 2}\n",
         "directive 0 (split): give 'dim' or 'dim_name', not both"},
        {HEAD "  - {op: recompute, mode: partial}\n",
         "prog.yaml:4:27: directive 0 (recompute): unknown recompute mode 'partial'; use full or "
         "selective"},
        {HEAD "  - {op: order, filters: []}\n",
         "directive 0 (order): filters must be a non-empty list of groups"},
        {HEAD "  - {op: order, filters: [[{PP: 0}], []]}\n",
         "directive 0 (order): order group 1 must be a non-empty list of filters"},
        {HEAD "  - {op: order}\n",
         "prog.yaml:4:5: directive 0 (order) has no 'filters'; list the groups to order, e.g. "
         "filters: [[{PASS: F, MB: 0}], [{PASS: B, MB: 0}]]"},
        {HEAD "  - {op: split}\n",
         "prog.yaml:4:5: directive 0 (split) has no 'num_microbatches'; say how many "
         "micro-batches, e.g. num_microbatches: 8"},
        {HEAD "  - {op: schedule, name: [1f1b]}\n",
         "prog.yaml:4:26: directive 0 (schedule): 'name' must be a string"},
        {HEAD "  - {op: schedule, name: 1f1b, file: x.txt}\n",
         "directive 0 (schedule): give a builder 'name' or an order 'file', not both"},
        {HEAD "  - {op: schedule, file: no_such_order.txt}\n",
         "directive 0 (schedule): schedule file 'no_such_order.txt' (resolved to"},
        /* program-level */
        {"directives: []\n", "prog.yaml:1:1: the program has no 'batch'; add batch:"},
        {"batch: {global: 10, micro: 4}\n",
         "prog.yaml:1:17: batch: global = 10 is not a multiple of micro = 4; use global = 8 or 12"},
        {"batch: {micro: 4}\n", "prog.yaml:1:8: batch has no 'global'"},
        {"batch: {global: many}\n", "prog.yaml:1:17: batch: expected an integer for 'global'"},
        {"batch: {global: 8}\nannotations: {tp: 2}\n",
         "prog.yaml:2:19: annotations: expected true or false for 'tp'"},
        {"batch: {global: 8}\ndtype: fp8\n", "prog.yaml:2:8: program: unknown dtype 'fp8'; use bf16"},
        /* grad_dtype: a known type, never narrower than dtype, whichever key comes first */
        {"batch: {global: 8}\ngrad_dtype: fp8\n",
         "prog.yaml:2:13: program: unknown grad_dtype 'fp8'; use bf16, fp32 or fp64 (not narrower "
         "than dtype bf16), or remove grad_dtype to keep the gradients in the dtype"},
        {"batch: {global: 8}\ndtype: fp32\ngrad_dtype: bf16\n",
         "prog.yaml:3:13: program: grad_dtype bf16 is narrower than dtype fp32; use grad_dtype "
         "fp32 or fp64, or remove it to keep the gradients in the dtype"},
        {"batch: {global: 8}\ngrad_dtype: float32\ndtype: fp64\n",
         "prog.yaml:2:13: program: grad_dtype fp32 is narrower than dtype fp64; use grad_dtype fp64"},
        {"batch: {global: 8}\ngrad_dtype: fp16\n",
         "prog.yaml:2:13: program: grad_dtype fp16 is a different 16-bit format from dtype bf16; use "
         "grad_dtype bf16, fp32 or fp64"},
        {"batch: {global: 8}\ngrad_dtype: [fp32]\n", "prog.yaml:2:13: program: 'grad_dtype' must be a string"},
        {"batch: {global: 8}\ngrad_dtpye: fp32\n",
         "prog.yaml:2:1: program: unknown key 'grad_dtpye'; did you mean 'grad_dtype'?"},
        {"batch: {global: 8}\noptimizer: adam\n",
         "prog.yaml:2:12: optimizer: unknown optimizer 'adam'; use adamw or sgd (adamw with weight_decay: 0 is "
         "Adam)"},
        {"batch: {global: 8}\noptimizer: {name: adamw, lr: 0}\n",
         "prog.yaml:2:30: optimizer: lr = 0 is out of range"},
        {"batch: {global: 8}\noptimizer: {name: adamw, grad_clip: -1}\n",
         "optimizer: grad_clip = -1 is out of range"},
        {"batch: {global: 8}\nannotations: {pp: 5}\n",
         "prog.yaml:2:19: annotations: pp = 5 stages but model 'tiny_moe' has 4 layers"},
        {"batch: {global: 8}\nannotations: {pp: 0}\n",
         "prog.yaml:2:19: annotations: pp = 0; give at least 1 stage"},
        {"batch: {global: 8}\nannotations: {pp: [[1, 3]]}\n",
         "prog.yaml:2:20: annotations: pp range 0 starts at layer 1; the first stage must start at "
         "layer 0"},
        {"batch: {global: 8}\nannotations: {pp: [[0, 1], [1, 3]]}\n",
         "prog.yaml:2:28: annotations: pp range 1 starts at layer 1 but range 0 ends at layer 1; "
         "ranges must be contiguous: start it at 2"},
        {"batch: {global: 8}\nannotations: {pp: [[0, 1], [3, 2]]}\n",
         "annotations: pp range 1 [3, 2] is backwards"},
        {"batch: {global: 8}\nannotations: {pp: [[0, 1], [2, 2]]}\n",
         "prog.yaml:2:28: annotations: pp ranges end at layer 2 but model 'tiny_moe' has 4 layers; "
         "the last range must end at layer 3"},
        {"batch: {global: 8}\nannotations: {pp: [[0, 1], [2, 5]]}\n",
         "annotations: pp range 1 ends at layer 5 but model 'tiny_moe' has 4 layers (0-3)"},
        {"batch: {global: 8}\nannotations: {pp: [[0, 1, 2]]}\n",
         "annotations: pp range 0 must be [first, last]"},
        {"batch: {global: 8}\ndirectives: {op: place}\n",
         "prog.yaml:2:13: directives must be a list of maps"},
    };
    for (size_t i = 0; i < BASE_COUNT(cases); i++) {
        base_error e;
        base_error_clear(&e);
        ir_program p;
        int rc = parse_program(cases[i].text, false, &p, &e);
        if (rc != -1) fprintf(stderr, "\n  case %zu loaded but should not have\n", i);
        CU_ASSERT_EQUAL(rc, -1);
        TEST_ASSERT_CONTAINS(e.msg, cases[i].msg);
    }
}

/* grad_dtype: absent, the dtype's (ZeRO's 16-bit gradients); given, fp32 gradients beside bf16
 * parameters and activations (Megatron-LM's main_grad), before or after dtype in the file; the
 * optimizer state stays fp32. */
static void test_grad_dtype(void)
{
    static const struct {
        const char *text;
        plan_dtype param, grad, opt;
    } cases[] = {
        {"batch: {global: 8}\n", PLAN_BF16, PLAN_BF16, PLAN_FP32},
        {"batch: {global: 8}\ndtype: fp16\n", PLAN_FP16, PLAN_FP16, PLAN_FP32},
        {"batch: {global: 8}\ngrad_dtype: fp32\n", PLAN_BF16, PLAN_FP32, PLAN_FP32},
        {"batch: {global: 8}\ndtype: bf16\ngrad_dtype: float32\n", PLAN_BF16, PLAN_FP32, PLAN_FP32},
        {"batch: {global: 8}\ngrad_dtype: FP32\ndtype: fp16\n", PLAN_FP16, PLAN_FP32, PLAN_FP32},
        {"batch: {global: 8}\ngrad_dtype: bf16\ndtype: bfloat16\n", PLAN_BF16, PLAN_BF16, PLAN_FP32},
        {"batch: {global: 8}\ndtype: fp32\ngrad_dtype: fp64\n", PLAN_FP32, PLAN_FP64, PLAN_FP32},
        {"batch: {global: 8}\ngrad_dtype: fp64\ndtype: fp64\n", PLAN_FP64, PLAN_FP64, PLAN_FP64},
    };
    for (size_t i = 0; i < BASE_COUNT(cases); i++) {
        base_error e;
        base_error_clear(&e);
        ir_program p;
        int rc = parse_program(cases[i].text, false, &p, &e);
        if (rc) fprintf(stderr, "\n  case %zu: %s\n", i, e.msg);
        CU_ASSERT_EQUAL_FATAL(rc, 0);
        CU_ASSERT_EQUAL(e.nwarn, 0);
        CU_ASSERT_EQUAL(p.param_dtype, cases[i].param);
        CU_ASSERT_EQUAL(p.act_dtype, cases[i].param);
        CU_ASSERT_EQUAL(p.grad_dtype, cases[i].grad);
        CU_ASSERT_EQUAL(p.opt_dtype, cases[i].opt);
    }
}

static void test_model_specific_errors(void)
{
    base_error e;
    ir_program p;
    /* a dense model has no experts to tag or to name */
    base_error_clear(&e);
    const char *text = "batch: {global: 8}\nannotations: {ep: true}\n";
    ir_doc *d;
    CU_ASSERT_EQUAL_FATAL(ir_doc_parse(&arena, "prog.yaml", text, strlen(text), &d, &e), 0);
    CU_ASSERT_EQUAL(ir_program_from_doc(d, NULL, &gpt, &dgx, &arena, &p, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "prog.yaml:2:19: annotations: ep: true but model 'tiny_gpt' has no "
                                "experts");
    base_error_clear(&e);
    text = "batch: {global: 8}\ndirectives:\n  - {op: place, filter: {REGION: moe_gate}, devices: [0]}\n";
    CU_ASSERT_EQUAL_FATAL(ir_doc_parse(&arena, "prog.yaml", text, strlen(text), &d, &e), 0);
    CU_ASSERT_EQUAL(ir_program_from_doc(d, NULL, &gpt, &dgx, &arena, &p, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "directive 0 (place): REGION moe_gate does not exist: model "
                                "'tiny_gpt' is dense");
}

static void test_error_fixtures(void)
{
    base_error e;
    ir_program p;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(load_program("missing_model.yaml", &p, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "missing_model.yaml:2:1: the program has no 'model'; add "
                                "model: <path or map> (or pass --model)");
    base_error_clear(&e);
    CU_ASSERT_EQUAL(load_program("bad_pp_ranges.yaml", &p, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "bad_pp_ranges.yaml:6:16: annotations: pp range 1 starts at layer 3 "
                                "but range 0 ends at layer 1; ranges must be contiguous: start it "
                                "at 2");
    /* a missing referenced model names the resolved path */
    base_error_clear(&e);
    const char *text = "model: no_such_model.yaml\ncluster: ../../../configs/clusters/cpu_8.yaml\n"
                       "batch: {global: 1}\n";
    CU_ASSERT_EQUAL(parse_program(text, true, &p, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "prog.yaml:1:8: model 'no_such_model.yaml': ");
    TEST_ASSERT_CONTAINS(e.msg, "tests/fixtures/programs/no_such_model.yaml: cannot open file");
    /* the inline form of model and cluster loads */
    base_error_clear(&e);
    text = "model: {family: gpt, layers: 2, hidden: 32, heads: 2, vocab: 64, seq: 16}\n"
           "cluster: {gpu: cpu, gpus_per_node: 4}\nbatch: {global: 4, micro: 2}\ndtype: fp32\n"
           "directives:\n  - {op: replicate, devices: \"0-3\"}\n";
    int rc = parse_program(text, true, &p, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(p.model.layers, 2);
    CU_ASSERT_EQUAL(ir_cluster_devices(&p.cluster), 4);
    assert_devices(&p.directives[0], (const int32_t[]){0, 1, 2, 3}, 4);
    CU_ASSERT_EQUAL(p.directives[0].zero, 0);
}

static void test_stage_of_region(void)
{
    base_error e;
    base_error_clear(&e);
    ir_program p;
    /* 4 layers in 3 stages: 2 + 1 + 1, embed first, head last */
    const char *text = "batch: {global: 8}\nannotations: {pp: 3}\n";
    ir_doc *d;
    CU_ASSERT_EQUAL_FATAL(ir_doc_parse(&arena, "prog.yaml", text, strlen(text), &d, &e), 0);
    CU_ASSERT_EQUAL_FATAL(ir_program_from_doc(d, NULL, &gpt, &dgx, &arena, &p, &e), 0);
    int n = ir_model_nregions(&gpt);
    CU_ASSERT_EQUAL_FATAL(n, 10); /* embed, 4 x (attn, mlp), head */
    int32_t st[10];
    ir_region regs[10];
    ir_model_regions(&gpt, &arena, regs);
    CU_ASSERT_EQUAL(ir_program_stage_of_region(&p, &arena, st), 3);
    for (int i = 0; i < n; i++) {
        int want = regs[i].kind == IR_REGION_EMBED  ? 0
                   : regs[i].kind == IR_REGION_HEAD ? 2
                   : regs[i].layer < 2              ? 0
                                                    : regs[i].layer - 1;
        CU_ASSERT_EQUAL(st[i], want);
    }
    /* explicit ranges: [0,0] [1,3] */
    text = "batch: {global: 8}\nannotations: {pp: [[0, 0], [1, 3]]}\n";
    CU_ASSERT_EQUAL_FATAL(ir_doc_parse(&arena, "prog.yaml", text, strlen(text), &d, &e), 0);
    CU_ASSERT_EQUAL_FATAL(ir_program_from_doc(d, NULL, &gpt, &dgx, &arena, &p, &e), 0);
    CU_ASSERT_EQUAL(ir_program_stage_of_region(&p, &arena, st), 2);
    for (int i = 0; i < n; i++) {
        int want = regs[i].kind == IR_REGION_EMBED  ? 0
                   : regs[i].kind == IR_REGION_HEAD ? 1
                                                    : regs[i].layer >= 1;
        CU_ASSERT_EQUAL(st[i], want);
    }
    /* no PP: everything on stage 0 */
    text = "batch: {global: 8}\n";
    CU_ASSERT_EQUAL_FATAL(ir_doc_parse(&arena, "prog.yaml", text, strlen(text), &d, &e), 0);
    CU_ASSERT_EQUAL_FATAL(ir_program_from_doc(d, NULL, &gpt, &dgx, &arena, &p, &e), 0);
    CU_ASSERT_EQUAL(ir_program_stage_of_region(&p, &arena, st), 1);
    for (int i = 0; i < n; i++) CU_ASSERT_EQUAL(st[i], 0);
}

/* The directive table: every row named, documented and found ignoring case, its key list
 * starting with op, filters checked only where a directive has one, and every directive with
 * its section in docs/programs.md naming each of its keys. */
static void test_directive_table(void)
{
    FILE *f = fopen(test_src_path("docs/programs.md"), "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    static char doc[1 << 17];
    size_t len = fread(doc, 1, sizeof doc - 1, f);
    doc[len] = 0;
    fclose(f);
    for (int i = 0; i < IR_NDIR; i++) {
        const ir_directive_info *info = ir_directive_info_of((ir_directive_op)i);
        CU_ASSERT_PTR_NOT_NULL_FATAL(info);
        CU_ASSERT_STRING_EQUAL(info->name, ir_directive_name((ir_directive_op)i));
        CU_ASSERT(info->doc && strlen(info->doc) > 10);
        CU_ASSERT_EQUAL(ir_directive_of(info->name), i);
        CU_ASSERT_STRING_EQUAL(info->known[0], "op");
        CU_ASSERT_TRUE(ir_directive_takes((ir_directive_op)i, "op"));
        CU_ASSERT_FALSE(ir_directive_takes((ir_directive_op)i, "comment"));
        int n = 0;
        for (; info->keys[n].key; n++) {
            CU_ASSERT_STRING_EQUAL(info->known[n + 1], info->keys[n].key);
            CU_ASSERT_TRUE(ir_directive_takes((ir_directive_op)i, info->keys[n].key));
            CU_ASSERT((unsigned)info->keys[n].type < IR_NKEY_TYPES);
        }
        CU_ASSERT_PTR_NULL(info->known[n + 1]);
        CU_ASSERT(n >= 1);
        /* its section: "### `name {" up to the next heading, naming every key */
        char head[96];
        snprintf(head, sizeof head, "### `%s {", info->name);
        const char *sec = strstr(doc, head);
        if (!sec) fprintf(stderr, "\n  docs/programs.md has no section '%s'\n", head);
        CU_ASSERT_PTR_NOT_NULL_FATAL(sec);
        const char *end = strstr(sec + 4, "\n#");
        size_t sl = end ? (size_t)(end - sec) : strlen(sec);
        char *text = strndup(sec, sl);
        for (int k = 0; k < n; k++) {
            if (!strstr(text, info->keys[k].key))
                fprintf(stderr, "\n  docs/programs.md: %s does not mention '%s'\n", head, info->keys[k].key);
            CU_ASSERT_PTR_NOT_NULL(strstr(text, info->keys[k].key));
        }
        free(text);
    }
    /* Piper's ignored keys: each in docs/programs.md's table, none a key piper reads but
     * schedule's name (read there, ignored elsewhere) */
    for (int i = 0; ir_piper_ignored_keys[i]; i++) {
        char cell[64];
        snprintf(cell, sizeof cell, "| `%s`", ir_piper_ignored_keys[i]);
        const char *at = strstr(doc, cell);
        if (!at) {
            snprintf(cell, sizeof cell, ", `%s` |", ir_piper_ignored_keys[i]);
            at = strstr(doc, cell);
        }
        if (!at) fprintf(stderr, "\n  docs/programs.md's table lacks '%s'\n", ir_piper_ignored_keys[i]);
        CU_ASSERT_PTR_NOT_NULL(at);
        for (int d = 0; d < IR_NDIR; d++)
            if (d != IR_DIR_SCHEDULE) CU_ASSERT_FALSE(ir_directive_takes((ir_directive_op)d, ir_piper_ignored_keys[i]));
    }
    CU_ASSERT_EQUAL(ir_directive_of("Shard_Tensor"), IR_DIR_SHARD_TENSOR);
    CU_ASSERT_EQUAL(ir_directive_of("shard-tensor"), -1);
    CU_ASSERT_PTR_NULL(ir_directive_info_of(IR_NDIR));
    CU_ASSERT_FALSE(ir_directive_takes(IR_NDIR, "op"));
    /* the schema itself: required keys, defaults, the open schedule */
    const ir_directive_info *rep = ir_directive_info_of(IR_DIR_REPLICATE);
    CU_ASSERT_STRING_EQUAL(rep->keys[1].key, "devices");
    CU_ASSERT_EQUAL(rep->keys[1].type, IR_KEY_DEVICES);
    CU_ASSERT_PTR_NOT_NULL(rep->keys[1].required);
    CU_ASSERT_EQUAL(rep->keys[4].type, IR_KEY_BYTES);
    CU_ASSERT_DOUBLE_EQUAL(rep->keys[4].dflt, IR_DEFAULT_BUCKET_BYTES, 0);
    CU_ASSERT_TRUE(ir_directive_info_of(IR_DIR_SCHEDULE)->open);
    CU_ASSERT_FALSE(ir_directive_info_of(IR_DIR_ORDER)->open);
    CU_ASSERT_FALSE(ir_directive_takes(IR_DIR_ORDER, "filter"));
    CU_ASSERT_TRUE(ir_directive_takes(IR_DIR_SPLIT, "dim_name"));
    /* did you mean, and the joined list of messages */
    static const char *const cands[] = {"filter", "devices", "num_microbatches", NULL};
    CU_ASSERT_STRING_EQUAL(ir_suggest("devcies", cands), "devices");
    CU_ASSERT_STRING_EQUAL(ir_suggest("num_micro", cands), "num_microbatches");
    CU_ASSERT_PTR_NULL(ir_suggest("colour", cands));
    char buf[64];
    CU_ASSERT_STRING_EQUAL(ir_join_names(buf, sizeof buf, cands), "filter, devices, num_microbatches");
}

static void test_name_tables(void)
{
    static const char *const dirs[] = {"place", "replicate", "shard", "shard_tensor",
                                       "split", "order",     "recompute", "schedule"};
    /* Piper's eight, in the order of the table (a new directive is a row after them) */
    CU_ASSERT_TRUE_FATAL(IR_NDIR >= (int)BASE_COUNT(dirs));
    for (int i = 0; i < (int)BASE_COUNT(dirs); i++) CU_ASSERT_STRING_EQUAL(ir_directive_name(i), dirs[i]);
    static const char *const tags[] = {"PP", "EP", "TP", "MB", "PASS", "LAYER", "REGION", "CHUNK"};
    for (int i = 0; i < IR_NTAGS; i++) CU_ASSERT_STRING_EQUAL(ir_tag_name(i), tags[i]);
    static const char *const regs[] = {"embed", "attn", "mlp", "moe_gate", "moe_experts",
                                       "moe_combine", "head"};
    for (int i = 0; i < IR_NREGION_KINDS; i++)
        CU_ASSERT_STRING_EQUAL(ir_region_kind_name(i), regs[i]);
    CU_ASSERT_STRING_EQUAL(ir_directive_name(IR_NDIR), "?");
    CU_ASSERT_STRING_EQUAL(ir_pass_tag_name(PLAN_PASS_BW), "BW");
    CU_ASSERT_STRING_EQUAL(ir_piper_ignored_keys[0], "prefetch_distance");
}

int piper_tests_register(void)
{
    static const test_case cases[] = {
        {"GPU table figures", test_gpu_table_figures},
        {"GPU names and aliases", test_gpu_names},
        {"every cluster config loads", test_every_cluster_config_loads},
        {"cluster config shapes", test_cluster_configs_shapes},
        {"cluster units and overrides", test_cluster_units},
        {"cluster errors", test_cluster_errors},
        {"program with every directive", test_every_directive},
        {"JSON program", test_json_program},
        {"Piper bare array", test_piper_array},
        {"program errors", test_program_errors},
        {"grad_dtype: default, key order, wider types", test_grad_dtype},
        {"model-specific errors", test_model_specific_errors},
        {"error fixtures and inline refs", test_error_fixtures},
        {"stage of region", test_stage_of_region},
        {"name tables", test_name_tables},
        {"directive table", test_directive_table},
        {NULL, NULL}};
    CU_pSuite s = CU_add_suite("ir_program", suite_init, suite_clean);
    if (!s) return -1;
    for (const test_case *c = cases; c->name; c++)
        if (!CU_add_test(s, c->name, c->fn)) return -1;
    return 0;
}
