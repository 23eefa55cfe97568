/* test_chakra.c — chakra/: the varint framing against hand-worked bytes, the default prefix, the
 * traces of a two-device plan written here by hand (read back with protobuf-c: node ids, types,
 * dependencies, attributes and the abstract run's times, each worked out by hand), and the error
 * paths: a directory that is a file or cannot be created, a bad prefix, a target that cannot be
 * replaced, a plan whose abstract run deadlocks. chakra_oracle.py checks every example with an
 * independent reader. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "chakra/chakra.h"
#include "et_def.pb-c.h"
#include "tests/testutil.h"

/* ---------------------------------------------------------------- framing */

static void test_varint_known_bytes(void)
{
    struct {
        uint64_t v;
        size_t n;
        uint8_t b[CHAKRA_VARINT_MAX];
    } rows[] = {
        {0, 1, {0x00}},
        {1, 1, {0x01}},
        {127, 1, {0x7f}},
        {128, 2, {0x80, 0x01}},
        {300, 2, {0xac, 0x02}},
        {16384, 3, {0x80, 0x80, 0x01}},
        {UINT64_MAX, 10, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        uint8_t out[CHAKRA_VARINT_MAX];
        size_t n = chakra_varint_put(out, rows[r].v);
        CU_ASSERT_EQUAL(n, rows[r].n);
        CU_ASSERT_EQUAL(memcmp(out, rows[r].b, rows[r].n), 0);
        uint64_t v = 12345;
        CU_ASSERT_EQUAL(chakra_varint_get(rows[r].b, rows[r].n, &v), rows[r].n);
        CU_ASSERT_EQUAL(v, rows[r].v);
    }
}

static void test_varint_round_trip_and_bad_bytes(void)
{
    uint64_t x = 1;
    for (int k = 0; k < 200; k++, x = x * 6364136223846793005u + 1442695040888963407u) {
        uint64_t v = x >> (k % 64);
        uint8_t out[CHAKRA_VARINT_MAX];
        size_t n = chakra_varint_put(out, v);
        uint64_t back = 0;
        CU_ASSERT_EQUAL(chakra_varint_get(out, n, &back), n);
        CU_ASSERT_EQUAL(back, v);
        /* one byte short is not a varint */
        CU_ASSERT_EQUAL(chakra_varint_get(out, n - 1, &back), 0);
    }
    uint64_t v;
    const uint8_t cont[1] = {0x80};
    CU_ASSERT_EQUAL(chakra_varint_get(cont, 1, &v), 0);
    CU_ASSERT_EQUAL(chakra_varint_get(cont, 0, &v), 0);
    /* eleven bytes, and a tenth byte with more than bit 63: past 64 bits */
    const uint8_t eleven[11] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00};
    CU_ASSERT_EQUAL(chakra_varint_get(eleven, 11, &v), 0);
    const uint8_t big[10] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
    CU_ASSERT_EQUAL(chakra_varint_get(big, 10, &v), 0);
}

static void test_default_prefix(void)
{
    char out[64];
    chakra_default_prefix("configs/programs/dp2.yaml", out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "dp2");
    chakra_default_prefix("a.b.plan", out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "a.b");
    chakra_default_prefix("noext", out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "noext");
    chakra_default_prefix("dir/.hidden", out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, ".hidden");
    chakra_default_prefix("dir/", out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "trace");
    chakra_default_prefix("a/very-long-name.yaml", out, 5);
    CU_ASSERT_STRING_EQUAL(out, "very");
}

/* ---------------------------------------------------------------- a plan by hand */

/* Device 0 computes (2e9 FLOPs at 1e12 FLOP/s: 2000 us), records, and on its pp stream waits and
 * sends 1024 bytes to device 1, then all-reduces 64 bytes on its compute stream; device 1
 * receives, then all-reduces. */
static const char *PLAN_TEXT =
    "piper-plan 2\n"
    "dtypes param=bf16 act=bf16 grad=fp32 opt=fp32\n"
    "gpu name=T peak_fp32=1000000000000 peak_bf16=1000000000000 peak_fp16=1000000000000 "
    "peak_fp64=1000000000000 peak_fp8=1000000000000 hbm_bw=1000000000000 mem_bytes=80000000000 reserve_bytes=0\n"
    "model name=m family=gpt layers=1 hidden=8 heads=1 kv_heads=1 head_dim=8 ffn=32 experts=0 expert_ffn=0 "
    "top_k=0 capacity_factor=1 vocab=16 seq=4 tied_embeddings=false qk_norm=false dropout=false micro_batch=1 "
    "num_microbatches=1 global_batch=1\n"
    "regions 1\n"
    "  0 L0\n"
    "kernel_ids 1\n"
    "  0 gpt.layer.F\n"
    "kernel_lists 1\n"
    "  0 kernels=1\n"
    "    gemm qkv dtype=bf16 count=1 m=1000 n=1000 k=1000 flops=2000000000 bytes=0\n"
    "groups 1\n"
    "  0 world devices=0,1\n"
    "lists 2\n"
    "list 0 streams=2 bufs=1 events=1 group_slots=1 instrs=7\n"
    "  stream 0 compute\n"
    "  stream 1 pp\n"
    "  buf 0 act.mb0 bytes=1024 mem=activations role=saved owner=L0\n"
    "  0 alloc s=compute bytes=1024 buf=0 mem=activations\n"
    "  1 compute s=compute pass=F region=L0 kid=gpt.layer.F kernels=0 mb=0 stage=0 writes=0\n"
    "  2 record s=compute event=0\n"
    "  3 wait s=pp event=0\n"
    "  4 send s=pp peer=1 tag=7 bytes=1024 buf=0 mem=activations mb=0 stage=0\n"
    "  5 coll s=compute kind=all_reduce purpose=grad_norm piece=whole group=0 bytes=64\n"
    "  6 free s=pp bytes=1024 buf=0 mem=activations\n"
    "list 1 streams=1 bufs=1 events=0 group_slots=1 instrs=4\n"
    "  stream 0 compute\n"
    "  buf 0 act.mb0 bytes=1024 mem=activations role=none\n"
    "  0 alloc s=compute bytes=1024 buf=0 mem=activations\n"
    "  1 recv s=compute peer=0 tag=%d bytes=1024 buf=0 mem=activations\n"
    "  2 coll s=compute kind=all_reduce purpose=grad_norm piece=whole group=0 bytes=64\n"
    "  3 free s=compute bytes=1024 buf=0 mem=activations\n"
    "devices 2\n"
    "  0 node=0 list=0 peer_offset=0 slots=0\n"
    "  1 node=0 list=1 peer_offset=0 slots=0\n"
    "end\n";

static int read_plan(plan_set *p, int recv_tag)
{
    char text[8192];
    snprintf(text, sizeof text, PLAN_TEXT, recv_tag);
    base_error e;
    base_error_clear(&e);
    int rc = plan_read(p, "hand.plan", text, strlen(text), &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    return rc;
}

static char dir[1024];

static void fresh_dir(const char *name)
{
    const char *b = getenv("PIPER_BINARY_DIR");
    snprintf(dir, sizeof dir, "%s/tests/chakra/out_%s", b ? b : ".", name);
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CU_ASSERT_EQUAL(system(cmd), 0);
}

typedef struct trace {
    ChakraProtoMsg__GlobalMetadata *meta;
    int n;
    ChakraProtoMsg__Node *node[16];
} trace;

static int read_trace(trace *t, const char *path)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    static uint8_t buf[1 << 16];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    size_t at = 0;
    for (int k = 0; at < len; k++) {
        uint64_t n;
        size_t h = chakra_varint_get(buf + at, len - at, &n);
        if (!h || n > len - at - h || t->n >= 16) return -1;
        at += h;
        if (k == 0) {
            t->meta = chakra_proto_msg__global_metadata__unpack(NULL, n, buf + at);
            if (!t->meta) return -1;
        } else {
            t->node[t->n] = chakra_proto_msg__node__unpack(NULL, n, buf + at);
            if (!t->node[t->n]) return -1;
            t->n++;
        }
        at += n;
    }
    return t->meta ? 0 : -1;
}

static void trace_free(trace *t)
{
    if (t->meta) chakra_proto_msg__global_metadata__free_unpacked(t->meta, NULL);
    for (int k = 0; k < t->n; k++) chakra_proto_msg__node__free_unpacked(t->node[k], NULL);
}

static const ChakraProtoMsg__AttributeProto *attr(const ChakraProtoMsg__Node *nd, const char *name)
{
    for (size_t k = 0; k < nd->n_attr; k++)
        if (!strcmp(nd->attr[k]->name, name)) return nd->attr[k];
    return NULL;
}

static const char *path_in(const char *name)
{
    static char p[2048];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

static void test_hand_plan_traces(void)
{
    plan_set p;
    CU_ASSERT_EQUAL_FATAL(read_plan(&p, 7), 0);
    fresh_dir("hand");
    char sub[2048];
    snprintf(sub, sizeof sub, "%s/a/b", dir); /* parents are created too */
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(chakra_write(&p, sub, "h", NULL, &e), 0);
    snprintf(dir, sizeof dir, "%.1000s", sub);

    trace t;
    CU_ASSERT_EQUAL_FATAL(read_trace(&t, path_in("h.0.et")), 0);
    CU_ASSERT_STRING_EQUAL(t.meta->version, "0.0.4");
    CU_ASSERT_EQUAL_FATAL(t.n, 3);
    /* ids are launch indices of compute, send and coll */
    CU_ASSERT_EQUAL(t.node[0]->id, 1);
    CU_ASSERT_EQUAL(t.node[1]->id, 4);
    CU_ASSERT_EQUAL(t.node[2]->id, 5);
    CU_ASSERT_EQUAL(t.node[0]->type, CHAKRA_PROTO_MSG__NODE_TYPE__COMP_NODE);
    CU_ASSERT_EQUAL(t.node[1]->type, CHAKRA_PROTO_MSG__NODE_TYPE__COMM_SEND_NODE);
    CU_ASSERT_EQUAL(t.node[2]->type, CHAKRA_PROTO_MSG__NODE_TYPE__COMM_COLL_NODE);
    /* the send waits (event 0) for the record after the compute; the coll follows it on its stream */
    CU_ASSERT_EQUAL(t.node[0]->n_data_deps, 0);
    CU_ASSERT_EQUAL_FATAL(t.node[1]->n_data_deps, 1);
    CU_ASSERT_EQUAL(t.node[1]->data_deps[0], 1);
    CU_ASSERT_EQUAL_FATAL(t.node[2]->n_data_deps, 1);
    CU_ASSERT_EQUAL(t.node[2]->data_deps[0], 1);
    /* control: launch order */
    CU_ASSERT_EQUAL(t.node[0]->n_ctrl_deps, 0);
    CU_ASSERT_EQUAL_FATAL(t.node[2]->n_ctrl_deps, 1);
    CU_ASSERT_EQUAL(t.node[2]->ctrl_deps[0], 4);
    /* 2e9 FLOPs at 1e12 FLOP/s */
    CU_ASSERT_EQUAL(t.node[0]->start_time_micros, 0);
    CU_ASSERT_EQUAL(t.node[0]->duration_micros, 2000);
    const ChakraProtoMsg__AttributeProto *a = attr(t.node[0], "num_ops");
    CU_ASSERT_FATAL(a != NULL);
    CU_ASSERT_EQUAL(a->int64_val, 2000000000);
    a = attr(t.node[0], "is_cpu_op");
    CU_ASSERT_FATAL(a != NULL);
    CU_ASSERT_EQUAL(a->value_case, CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_BOOL_VAL);
    CU_ASSERT_FALSE(a->bool_val);
    /* posted when the compute ends; 5 us + 1024 B / 50 GB/s (PLAN_CHECK_*) */
    CU_ASSERT_EQUAL(t.node[1]->start_time_micros, 2000);
    CU_ASSERT_EQUAL(t.node[1]->duration_micros, 5);
    a = attr(t.node[1], "comm_dst");
    CU_ASSERT_FATAL(a != NULL);
    CU_ASSERT_EQUAL(a->int32_val, 1);
    a = attr(t.node[1], "comm_tag");
    CU_ASSERT_FATAL(a != NULL);
    CU_ASSERT_EQUAL(a->int32_val, 7);
    a = attr(t.node[1], "comm_size");
    CU_ASSERT_FATAL(a != NULL);
    CU_ASSERT_EQUAL(a->int64_val, 1024);
    a = attr(t.node[2], "comm_type");
    CU_ASSERT_FATAL(a != NULL);
    CU_ASSERT_EQUAL(a->int64_val, CHAKRA_PROTO_MSG__COLLECTIVE_COMM_TYPE__ALL_REDUCE);
    a = attr(t.node[2], "pg_name");
    CU_ASSERT_FATAL(a != NULL);
    CU_ASSERT_STRING_EQUAL(a->string_val, "0");
    trace_free(&t);

    CU_ASSERT_EQUAL_FATAL(read_trace(&t, path_in("h.1.et")), 0);
    CU_ASSERT_EQUAL_FATAL(t.n, 2);
    CU_ASSERT_EQUAL(t.node[0]->type, CHAKRA_PROTO_MSG__NODE_TYPE__COMM_RECV_NODE);
    a = attr(t.node[0], "comm_src");
    CU_ASSERT_FATAL(a != NULL);
    CU_ASSERT_EQUAL(a->int32_val, 0);
    CU_ASSERT_EQUAL_FATAL(t.node[1]->n_data_deps, 1);
    CU_ASSERT_EQUAL(t.node[1]->data_deps[0], 1);
    /* both members leave the all-reduce together */
    CU_ASSERT_EQUAL(t.node[1]->start_time_micros + t.node[1]->duration_micros, 2010);
    trace_free(&t);

    base_buf js = {0};
    CU_ASSERT_EQUAL(base_read_file(path_in("h.comm_groups.json"), &js, &e), 0);
    CU_ASSERT_STRING_EQUAL(js.s, "{\n  \"0\": [0, 1]\n}\n");
    base_buf_free(&js);
    plan_free(&p);
}

static void test_given_times(void)
{
    plan_set p;
    CU_ASSERT_EQUAL_FATAL(read_plan(&p, 7), 0);
    double s0[7] = {0, 1.5e-6, 0, 0, 3.25e-3, 4e-3, 0}, e0[7] = {0, 2.5e-6, 0, 0, 3.5e-3, 5e-3, 0};
    double s1[4] = {0}, e1[4] = {0, 1e-6, 2e-6, 0};
    const double *st[2] = {s0, s1}, *en[2] = {e0, e1};
    chakra_times t = {"simulated", st, en};
    fresh_dir("given");
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(chakra_write(&p, dir, "g", &t, &e), 0);
    trace tr;
    CU_ASSERT_EQUAL_FATAL(read_trace(&tr, path_in("g.0.et")), 0);
    CU_ASSERT_EQUAL_FATAL(tr.n, 3);
    CU_ASSERT_EQUAL(tr.node[0]->start_time_micros, 2); /* 1.5 us rounds to 2 */
    CU_ASSERT_EQUAL(tr.node[0]->duration_micros, 1);   /* round(2.5) - round(1.5) = 3 - 2 */
    CU_ASSERT_EQUAL(tr.node[1]->start_time_micros, 3250);
    CU_ASSERT_EQUAL(tr.node[1]->duration_micros, 250);
    CU_ASSERT_EQUAL(tr.node[2]->duration_micros, 1000);
    int found = 0;
    for (size_t k = 0; k < tr.meta->n_attr; k++)
        if (!strcmp(tr.meta->attr[k]->name, "times")) found = !strcmp(tr.meta->attr[k]->string_val, "simulated");
    CU_ASSERT(found);
    trace_free(&tr);
    plan_free(&p);
}

/* ---------------------------------------------------------------- errors */

static void test_dir_errors(void)
{
    plan_set p;
    CU_ASSERT_EQUAL_FATAL(read_plan(&p, 7), 0);
    fresh_dir("errors");
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0777), 0);
    char file[2048], under[4096];
    snprintf(file, sizeof file, "%s/plain", dir);
    FILE *f = fopen(file, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("keep", f);
    fclose(f);
    base_error e;

    base_error_clear(&e);
    CU_ASSERT_EQUAL(chakra_write(&p, file, "x", NULL, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "is not a directory");
    base_buf b = {0};
    CU_ASSERT_EQUAL(base_read_file(file, &b, &e), 0);
    CU_ASSERT_STRING_EQUAL(b.s, "keep");
    base_buf_free(&b);

    snprintf(under, sizeof under, "%s/sub", file);
    base_error_clear(&e);
    CU_ASSERT_EQUAL(chakra_write(&p, under, "x", NULL, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "--emit-chakra");
    TEST_ASSERT_CONTAINS(e.msg, under);

    /* nobody, root included, creates directories in /proc */
    base_error_clear(&e);
    CU_ASSERT_EQUAL(chakra_write(&p, "/proc/piper-chakra-test/out", "x", NULL, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "cannot create /proc/piper-chakra-test");

    base_error_clear(&e);
    CU_ASSERT_EQUAL(chakra_write(&p, dir, "a/b", NULL, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "--chakra-prefix 'a/b'");
    base_error_clear(&e);
    CU_ASSERT_EQUAL(chakra_write(&p, dir, "", NULL, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "--chakra-prefix");

    /* a target that is a directory cannot be replaced: the error names it */
    snprintf(under, sizeof under, "%s/y.1.et", dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(under, 0777), 0);
    base_error_clear(&e);
    CU_ASSERT_EQUAL(chakra_write(&p, dir, "y", NULL, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "y.1.et");
    plan_free(&p);
}

static void test_deadlocked_plan(void)
{
    plan_set p;
    CU_ASSERT_EQUAL_FATAL(read_plan(&p, 99), 0); /* the receive's tag matches no send */
    fresh_dir("deadlock");
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(chakra_write(&p, dir, "d", NULL, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "abstract run");
    struct stat st;
    CU_ASSERT_NOT_EQUAL(stat(path_in("d.0.et"), &st), 0);
    plan_free(&p);
}

int piper_tests_register(void)
{
    static const test_case cases[] = {
        {"varint: known bytes", test_varint_known_bytes},
        {"varint: round trip, truncated and overlong", test_varint_round_trip_and_bad_bytes},
        {"default prefix", test_default_prefix},
        {"a hand-written plan's traces", test_hand_plan_traces},
        {"the caller's times", test_given_times},
        {"directory and prefix errors", test_dir_errors},
        {"a plan that deadlocks", test_deadlocked_plan},
        {NULL, NULL},
    };
    return test_add_suite("chakra", cases);
}
