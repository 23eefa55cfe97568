/* test_plan.c — the plan file format (write/read, every reader error) and the static checks
 * (deadlocks, collective order, buffer lifetimes, exact memory peaks and timing) on plans built by
 * hand, whose answers are worked out in the comments. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_builder.h"
#include "tests/testutil.h"

/* ---------------------------------------------------------------- helpers */

static char *plan_text(const plan_set *p)
{
    char *s = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&s, &n);
    base_error e;
    base_error_clear(&e);
    int rc = plan_write(p, f, &e);
    fclose(f);
    if (rc) fprintf(stderr, "\n  write failed: %s\n", e.msg);
    CU_ASSERT_EQUAL(rc, 0);
    return s;
}

static int read_text(plan_set *p, const char *text, base_error *e)
{
    base_error_clear(e);
    return plan_read(p, "t.plan", text, strlen(text), e);
}

/* Reads `text`, expecting failure with a message containing `want`. */
static void expect_read_error(const char *text, const char *want)
{
    plan_set p;
    base_error e;
    int rc = read_text(&p, text, &e);
    CU_ASSERT_EQUAL(rc, -1);
    TEST_ASSERT_CONTAINS(e.msg, want);
    CU_ASSERT_EQUAL(p.nlists, 0); /* a failed read leaves the plan empty */
    plan_free(&p);
}

/* `text` with the first occurrence of `from` replaced by `to` (malloc'd). */
static char *edit(const char *text, const char *from, const char *to)
{
    const char *at = strstr(text, from);
    if (!at) {
        fprintf(stderr, "\n  edit: '%s' not in the text\n", from);
        CU_FAIL("edit target missing");
        return strdup(text);
    }
    size_t a = (size_t)(at - text), nf = strlen(from), nt = strlen(to), n = strlen(text);
    char *s = malloc(n - nf + nt + 1);
    memcpy(s, text, a);
    memcpy(s + a, to, nt);
    memcpy(s + a + nt, at + nf, n - a - nf + 1);
    return s;
}

static void expect_edit_error(const char *text, const char *from, const char *to, const char *want)
{
    char *t = edit(text, from, to);
    expect_read_error(t, want);
    free(t);
}

static int str_eq(const char *a, const char *b) { return a == b || (a && b && strcmp(a, b) == 0); }

static int same_double(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Deep comparison; returns NULL when equal, else what differs. */
static const char *plan_diff(const plan_set *a, const plan_set *b)
{
    if (a->version != b->version) return "version";
    if (a->param_dtype != b->param_dtype || a->act_dtype != b->act_dtype || a->grad_dtype != b->grad_dtype ||
        a->opt_dtype != b->opt_dtype)
        return "dtypes";
    if (!str_eq(a->gpu.name, b->gpu.name) || !same_double(a->gpu.hbm_bw, b->gpu.hbm_bw) ||
        !same_double(a->gpu.mem_bytes, b->gpu.mem_bytes) || !same_double(a->gpu.reserve_bytes, b->gpu.reserve_bytes))
        return "gpu";
    for (int d = 0; d < PLAN_NDTYPE; d++)
        if (!same_double(a->gpu.peak_flops[d], b->gpu.peak_flops[d])) return "gpu peak";
    const plan_links *la = &a->links, *lb = &b->links;
    if (!same_double(la->nvlink_bw, lb->nvlink_bw) || !same_double(la->nvlink_latency, lb->nvlink_latency) ||
        !same_double(la->nic_bw, lb->nic_bw) || !same_double(la->nic_latency, lb->nic_latency) ||
        la->gpus_per_nic != lb->gpus_per_nic || la->gpus_per_node != lb->gpus_per_node ||
        la->topology != lb->topology || !same_double(la->oversubscription, lb->oversubscription) ||
        !str_eq(la->platform, lb->platform))
        return "links";
    if (a->ncalib != b->ncalib) return "ncalib";
    for (int i = 0; i < a->ncalib; i++)
        if (!str_eq(a->calib[i].name, b->calib[i].name) || !same_double(a->calib[i].value, b->calib[i].value))
            return "calib";
    const plan_model *x = &a->model, *y = &b->model;
    if (!str_eq(x->name, y->name) || !str_eq(x->family, y->family) || x->layers != y->layers || x->hidden != y->hidden ||
        x->heads != y->heads || x->kv_heads != y->kv_heads || x->head_dim != y->head_dim || x->ffn != y->ffn ||
        x->experts != y->experts || x->expert_ffn != y->expert_ffn || x->top_k != y->top_k ||
        !same_double(x->capacity_factor, y->capacity_factor) || x->vocab != y->vocab || x->seq != y->seq ||
        x->tied_embeddings != y->tied_embeddings || x->qk_norm != y->qk_norm || x->dropout != y->dropout ||
        x->micro_batch != y->micro_batch || x->num_microbatches != y->num_microbatches ||
        x->global_batch != y->global_batch)
        return "model";
    if (a->nregions != b->nregions) return "nregions";
    for (int i = 0; i < a->nregions; i++)
        if (!str_eq(a->regions[i], b->regions[i])) return "region name";
    if (a->nkernel_ids != b->nkernel_ids) return "nkernel_ids";
    for (int i = 0; i < a->nkernel_ids; i++)
        if (!str_eq(a->kernel_ids[i], b->kernel_ids[i])) return "kernel id";
    if (a->nkernel_lists != b->nkernel_lists) return "nkernel_lists";
    for (int i = 0; i < a->nkernel_lists; i++) {
        const plan_kernel_list *p = &a->kernel_lists[i], *q = &b->kernel_lists[i];
        if (p->n != q->n) return "kernel list size";
        for (int j = 0; j < p->n; j++) {
            const plan_kernel *k = &p->k[j], *m = &q->k[j];
            if (k->kind != m->kind || k->dtype != m->dtype || k->count != m->count || k->m != m->m || k->n != m->n ||
                k->k != m->k || !same_double(k->bytes, m->bytes) || !same_double(k->flops, m->flops) ||
                !str_eq(k->name, m->name))
                return "kernel";
        }
    }
    if (a->ngroups != b->ngroups) return "ngroups";
    for (int g = 0; g < a->ngroups; g++) {
        if (a->groups[g].n != b->groups[g].n || !str_eq(a->groups[g].name, b->groups[g].name)) return "group";
        for (int j = 0; j < a->groups[g].n; j++)
            if (a->groups[g].devices[j] != b->groups[g].devices[j]) return "group member";
    }
    if (a->nlists != b->nlists) return "nlists";
    for (int l = 0; l < a->nlists; l++) {
        const plan_list *p = &a->lists[l], *q = &b->lists[l];
        if (p->n != q->n || p->nbufs != q->nbufs || p->nstreams != q->nstreams || p->nevents != q->nevents ||
            p->ngroup_slots != q->ngroup_slots)
            return "list counts";
        for (int s = 0; s < p->nstreams; s++)
            if (!str_eq(p->streams[s], q->streams[s])) return "stream name";
        for (int k = 0; k < p->nbufs; k++)
            if (p->bufs[k].bytes != q->bufs[k].bytes || p->bufs[k].mem != q->bufs[k].mem ||
                p->bufs[k].role != q->bufs[k].role || p->bufs[k].region != q->bufs[k].region ||
                !str_eq(p->bufs[k].name, q->bufs[k].name))
                return "buffer";
        for (int i = 0; i < p->n; i++) {
            const plan_instr *u = &p->ins[i], *v = &q->ins[i];
            if (u->op != v->op || u->pass != v->pass || u->coll != v->coll || u->mem != v->mem ||
                u->stream != v->stream || u->region != v->region || u->mb != v->mb || u->stage != v->stage ||
                u->kernels != v->kernels || u->kid != v->kid || u->peer != v->peer || u->group != v->group ||
                u->tag != v->tag || u->sendrecv != v->sendrecv || u->event != v->event || u->buf != v->buf ||
                u->tp_group != v->tp_group || u->ep_group != v->ep_group || u->bytes != v->bytes ||
                u->nreads != v->nreads || u->nwrites != v->nwrites || u->purpose != v->purpose ||
                u->piece != v->piece)
                return "instruction";
            for (int k = 0; k < u->nreads; k++)
                if (u->reads[k] != v->reads[k]) return "reads";
            for (int k = 0; k < u->nwrites; k++)
                if (u->writes[k] != v->writes[k]) return "writes";
        }
    }
    if (a->ndevices != b->ndevices) return "ndevices";
    for (int d = 0; d < a->ndevices; d++) {
        const plan_device *p = &a->devices[d], *q = &b->devices[d];
        if (p->id != q->id || p->node != q->node || p->list != q->list || p->peer_offset != q->peer_offset)
            return "device";
        for (int s = 0; s < a->lists[p->list].ngroup_slots; s++)
            if (p->group_slots[s] != q->group_slots[s]) return "group slots";
    }
    return NULL;
}

/* Write, read back, compare fields, write again: the two texts must be byte-identical. */
static void assert_round_trip(const plan_set *p)
{
    char *t1 = plan_text(p);
    plan_set q;
    base_error e;
    int rc = read_text(&q, t1, &e);
    if (rc) fprintf(stderr, "\n  read failed: %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    const char *diff = plan_diff(p, &q);
    if (diff) fprintf(stderr, "\n  round trip changed: %s\n", diff);
    CU_ASSERT_PTR_NULL(diff);
    char *t2 = plan_text(&q);
    CU_ASSERT_STRING_EQUAL(t1, t2);
    free(t1);
    free(t2);
    plan_free(&q);
}

/* ---------------------------------------------------------------- plans */

/* Every section, every op, names that need quoting, awkward doubles, uninterpreted fields away from
 * their defaults, and two lists each shared by two devices through peer_offset and group slots. */
static void build_rich(plan_builder *b, plan_set *p)
{
    pb_init(b, p, 4, 2);
    p->param_dtype = PLAN_FP8;
    p->opt_dtype = PLAN_FP64;
    p->gpu.name = "H100 \"SXM\"";
    p->links = (plan_links){.nvlink_bw = 450e9, .nvlink_latency = 1e-6, .nic_bw = 50e9, .nic_latency = 5.5e-6,
                            .gpus_per_nic = 2, .gpus_per_node = 8, .topology = PLAN_TOPO_RAIL,
                            .oversubscription = 1.5, .platform = "my platform.xml"};
    static plan_calib calib[] = {{"gemm_eff", 0.8}, {"launch", 4e-6}};
    p->calib = calib;
    p->ncalib = 2;
    p->gpu.peak_flops[PLAN_BF16] = 989.4e12;
    p->gpu.peak_flops[PLAN_FP16] = 0.1;
    p->gpu.peak_flops[PLAN_FP8] = 1.0 / 3.0;
    p->gpu.peak_flops[PLAN_FP64] = -0.0;
    p->gpu.hbm_bw = 3.35e12;
    p->gpu.mem_bytes = 85899345920.0;
    p->gpu.reserve_bytes = 5e-324;
    p->model = (plan_model){.name = NULL, .family = "llama", .layers = 80, .hidden = 8192, .heads = 64,
                            .kv_heads = 8, .head_dim = 128, .ffn = 28672, .experts = 8, .expert_ffn = 14336,
                            .top_k = 2, .capacity_factor = 1.25, .vocab = 128256, .seq = 8192,
                            .tied_embeddings = true, .qk_norm = false, .dropout = true, .micro_batch = 1,
                            .num_microbatches = 64, .global_batch = INT64_MAX};
    const char *regions[] = {"embed", "L0 attn", NULL, "", "x=y", "#hash", "~", "tab\there", "\xc3\xa9t\xc3\xa9",
                             "dup", "dup", "back\\slash"};
    for (size_t i = 0; i < BASE_COUNT(regions); i++) pb_region(b, regions[i]);
    pb_kernel_id(b, "gpt.attn.F");
    pb_kernel_id(b, "gpt.mlp.B");
    int k0 = pb_kernels(b, 1e12, 3e9);
    p->kernel_lists[k0].k[0].m = 4096, p->kernel_lists[k0].k[0].n = 12288, p->kernel_lists[k0].k[0].k = 8192;
    p->kernel_lists[k0].k[0].count = 3;
    p->kernel_lists[k0].k[1].m = 7; /* a memory-bound kernel with a shape keeps it */
    int k1 = pb_kernels(b, 1e300, 0);
    p->kernel_lists[k1].k[0].name = NULL;
    pb_group(b, "dp(pp=0)", 2, (int32_t[]){0, 2});
    pb_group(b, "dp(pp=1)", 2, (int32_t[]){1, 3});
    pb_group(b, "world \"all\" =x", 4, (int32_t[]){0, 1, 2, 3});
    pb_group(b, "", 0, NULL);

    /* list 0: stage 0 of two data-parallel replicas (devices 0 and 2) */
    int c = pb_stream(b, 0, "compute"), pp = pb_stream(b, 0, "pp"), dp = pb_stream(b, 0, "dp");
    int again = pb_stream(b, 0, "compute"); /* a duplicate name is written as #3 */
    pb_stream(b, 0, NULL);
    int w = pb_buf(b, 0, "w.L0", 1 << 20, PLAN_MEM_PARAM), a = pb_buf(b, 0, "act mb0", 4096, PLAN_MEM_ACT);
    int g = pb_buf(b, 0, NULL, 1 << 20, PLAN_MEM_GRAD);
    /* roles and owners: by name, by #index (the second "dup"), and none */
    p->lists[0].bufs[w].role = PLAN_ROLE_PARAMS, p->lists[0].bufs[w].region = 1;
    p->lists[0].bufs[a].role = PLAN_ROLE_SAVED, p->lists[0].bufs[a].region = 10;
    p->lists[0].bufs[g].role = PLAN_ROLE_GRAD_PIECE;
    pb_alloc(b, 0, c, w);
    pb_alloc(b, 0, c, a);
    pb_alloc(b, 0, c, g);
    int f = pb_compute(b, 0, c, PLAN_PASS_F, k0, 0, 0);
    pb_at(b, 0, f)->region = 1;
    pb_at(b, 0, f)->kid = 0;
    pb_at(b, 0, f)->tp_group = 1;
    pb_at(b, 0, f)->ep_group = 0;
    pb_reads(b, 0, f, 1, (int32_t[]){w});
    pb_writes(b, 0, f, 2, (int32_t[]){a, g});
    pb_record(b, 0, c, 2);
    pb_wait(b, 0, pp, 2);
    int s = pb_send(b, 0, pp, 1, 17, 4096, a);
    pb_at(b, 0, s)->mb = 0, pb_at(b, 0, s)->stage = 0, pb_at(b, 0, s)->sendrecv = 9;
    int r = pb_recv(b, 0, pp, 1, 18, 4096, -1);
    pb_at(b, 0, r)->sendrecv = 9, pb_at(b, 0, r)->region = 10; /* uninterpreted: kept; the second "dup" */
    int rs = pb_coll(b, 0, dp, PLAN_REDUCE_SCATTER, 0, 1 << 20, g);
    pb_at(b, 0, rs)->purpose = PLAN_PURPOSE_ZERO_SCATTER, pb_at(b, 0, rs)->piece = PLAN_PIECE_ZERO;
    int x = pb_coll(b, 0, dp, PLAN_ALL_TO_ALL, 1, 0, -1);
    pb_at(b, 0, x)->kid = 1, pb_at(b, 0, x)->pass = PLAN_PASS_BW;
    pb_at(b, 0, x)->purpose = PLAN_PURPOSE_EP_COMBINE, pb_at(b, 0, x)->piece = PLAN_PIECE_EVEN;
    int nop = pb_add(b, 0, PLAN_NOP, again);
    pb_at(b, 0, nop)->peer = -7, pb_at(b, 0, nop)->tag = INT32_MIN, pb_at(b, 0, nop)->kernels = 1;
    pb_at(b, 0, nop)->coll = PLAN_REDUCE, pb_at(b, 0, nop)->mem = PLAN_MEM_OPT, pb_at(b, 0, nop)->bytes = INT64_MIN;
    pb_at(b, 0, nop)->event = 3, pb_at(b, 0, nop)->group = 5, pb_at(b, 0, nop)->buf = 1;
    pb_at(b, 0, nop)->tp_group = 9, pb_at(b, 0, nop)->ep_group = -5;
    pb_at(b, 0, nop)->purpose = PLAN_PURPOSE_SP_REGATHER, pb_at(b, 0, nop)->piece = PLAN_PIECE_LEADING;
    int ci = pb_compute(b, 0, c, PLAN_PASS_AUX, -1, -1, -1);
    pb_at(b, 0, ci)->kid = -1;
    pb_at(b, 0, ci)->region = 9; /* the first "dup" */
    pb_free(b, 0, c, a);
    p->lists[0].nevents = 4;

    /* list 1: stage 1 of both replicas (devices 1 and 3) */
    int c1 = pb_stream(b, 1, "compute \"main\"");
    int b1 = pb_buf(b, 1, "act", 4096, PLAN_MEM_COMM);
    p->lists[1].bufs[b1].role = PLAN_ROLE_COMM, p->lists[1].bufs[b1].region = 0;
    pb_alloc(b, 1, c1, b1);
    pb_recv(b, 1, c1, 0, 17, 4096, b1);
    pb_send(b, 1, c1, 0, 18, 4096, b1);
    pb_coll(b, 1, c1, PLAN_ALL_REDUCE, 0, 8, -1);
    pb_free(b, 1, c1, b1);

    pb_device(b, 0, 0, 0, 2, (int32_t[]){0, 2});
    pb_device(b, 2, 0, 2, 2, (int32_t[]){0, 2});
    pb_device(b, 1, 1, 0, 1, (int32_t[]){1});
    pb_device(b, 3, 1, 2, 1, (int32_t[]){1});
    p->devices[3].node = 1;
    p->devices[2].id = 42;
}

/* PIPER_PLAN_CORPUS=DIR: the tests' plans are also written there, as seeds for fuzz_plan. */
static void dump_seed(const plan_set *p, const char *name)
{
    const char *dir = getenv("PIPER_PLAN_CORPUS");
    if (!dir) return;
    char path[1024];
    base_error e;
    base_error_clear(&e);
    snprintf(path, sizeof path, "%s/%s.plan", dir, name);
    if (plan_write_file(p, path, &e)) fprintf(stderr, "\n  %s\n", e.msg);
}

static void test_round_trip_rich(void)
{
    plan_builder b;
    plan_set p;
    build_rich(&b, &p);
    dump_seed(&p, "rich");
    assert_round_trip(&p);
    pb_done(&b);
    plan_free(&p);
}

/* A small two-stage pipeline whose text the reader-error tests edit. */
static void build_small(plan_builder *b, plan_set *p)
{
    pb_init(b, p, 2, 2);
    pb_region(b, "L0");
    pb_kernel_id(b, "gpt.layer.F");
    int k = pb_kernels(b, 1e12, 0);
    pb_group(b, "world", 2, (int32_t[]){0, 1});
    int c = pb_stream(b, 0, "compute"), pp = pb_stream(b, 0, "pp");
    int a = pb_buf(b, 0, "act.mb0", 1024, PLAN_MEM_ACT);
    p->lists[0].bufs[a].role = PLAN_ROLE_SAVED, p->lists[0].bufs[a].region = 0;
    pb_alloc(b, 0, c, a);
    int f = pb_compute(b, 0, c, PLAN_PASS_F, k, 0, 0);
    pb_at(b, 0, f)->region = 0, pb_at(b, 0, f)->kid = 0;
    pb_writes(b, 0, f, 1, (int32_t[]){a});
    pb_record(b, 0, c, 0);
    pb_wait(b, 0, pp, 0);
    int s = pb_send(b, 0, pp, 1, 7, 1024, a);
    pb_at(b, 0, s)->mb = 0, pb_at(b, 0, s)->stage = 0;
    int n0 = pb_coll(b, 0, c, PLAN_ALL_REDUCE, 0, 64, -1);
    pb_at(b, 0, n0)->purpose = PLAN_PURPOSE_GRAD_NORM, pb_at(b, 0, n0)->piece = PLAN_PIECE_WHOLE;
    pb_free(b, 0, pp, a);
    int c1 = pb_stream(b, 1, "compute");
    int a1 = pb_buf(b, 1, "act.mb0", 1024, PLAN_MEM_ACT);
    pb_alloc(b, 1, c1, a1);
    pb_recv(b, 1, c1, 0, 7, 1024, a1);
    int n1 = pb_coll(b, 1, c1, PLAN_ALL_REDUCE, 0, 64, -1);
    pb_at(b, 1, n1)->purpose = PLAN_PURPOSE_GRAD_NORM, pb_at(b, 1, n1)->piece = PLAN_PIECE_WHOLE;
    pb_free(b, 1, c1, a1);
    pb_device(b, 0, 0, 0, 1, (int32_t[]){0});
    pb_device(b, 1, 1, 0, 1, (int32_t[]){0});
}

static char *small_text(void)
{
    plan_builder b;
    plan_set p;
    build_small(&b, &p);
    dump_seed(&p, "small");
    char *t = plan_text(&p);
    pb_done(&b);
    plan_free(&p);
    return t;
}

static void test_format_is_readable(void)
{
    char *t = small_text();
    if (getenv("PIPER_SHOW_PLAN")) fputs(t, stderr);
    /* the first line, and instruction lines that say what they do */
    CU_ASSERT_EQUAL(strncmp(t, "piper-plan 2\n", 13), 0);
    TEST_ASSERT_CONTAINS(t, "\n  4 send s=pp peer=1 tag=7 bytes=1024 buf=0 mem=activations mb=0 stage=0\n");
    TEST_ASSERT_CONTAINS(t, "\n  1 compute s=compute pass=F region=L0 kid=gpt.layer.F kernels=0 mb=0 stage=0 writes=0\n");
    TEST_ASSERT_CONTAINS(t, "\n  5 coll s=compute kind=all_reduce purpose=grad_norm piece=whole group=0 bytes=64\n");
    TEST_ASSERT_CONTAINS(t, "\n  0 alloc s=compute bytes=1024 buf=0 mem=activations\n");
    TEST_ASSERT_CONTAINS(t, "\n  3 wait s=pp event=0\n");
    TEST_ASSERT_CONTAINS(t, "\nlist 0 streams=2 bufs=1 events=1 group_slots=1 instrs=7\n  stream 0 compute\n"
                            "  stream 1 pp\n  buf 0 act.mb0 bytes=1024 mem=activations role=saved owner=L0\n");
    TEST_ASSERT_CONTAINS(t, "\ngroups 1\n  0 world devices=0,1\n");
    TEST_ASSERT_CONTAINS(t, "\ndevices 2\n  0 node=0 list=0 peer_offset=0 slots=0\n  1 node=0 list=1 peer_offset=0 slots=0\nend\n");
    TEST_ASSERT_CONTAINS(t, "    gemm gemm dtype=bf16 count=1 m=0 n=0 k=0 flops=1000000000000 bytes=0\n");
    free(t);
}

static void test_round_trip_small_and_quoting(void)
{
    plan_builder b;
    plan_set p;
    build_rich(&b, &p);
    char *t = plan_text(&p);
    /* names that would read back as something else are quoted; doubles are exact yet short */
    TEST_ASSERT_CONTAINS(t, "\n  1 \"L0 attn\"\n  2 ~\n  3 \"\"\n  4 \"x=y\"\n  5 \"#hash\"\n  6 \"~\"\n"
                            "  7 \"tab\\there\"\n  8 \"\\xc3\\xa9t\\xc3\\xa9\"\n");
    TEST_ASSERT_CONTAINS(t, "gpu name=\"H100 \\\"SXM\\\"\" peak_fp32=1000000000000 peak_bf16=989400000000000 "
                            "peak_fp16=0.1 peak_fp64=-0 peak_fp8=0.3333333333333333 hbm_bw=3350000000000");
    TEST_ASSERT_CONTAINS(t, "reserve_bytes=4.94065645841247e-324");
    TEST_ASSERT_CONTAINS(t, " s=#3 ");             /* the second stream named "compute" */
    TEST_ASSERT_CONTAINS(t, " region=dup kid=#-1 "); /* the first region named "dup" ... */
    TEST_ASSERT_CONTAINS(t, " region=#10 ");          /* ... and the second */
    TEST_ASSERT_CONTAINS(t, "  2 id=42 node=0 list=0 peer_offset=2 slots=0,2\n");
    TEST_ASSERT_CONTAINS(t, "    mem mem dtype=bf16 count=1 m=7 n=0 k=0 flops=0 bytes=3000000000\n");
    free(t);
    pb_done(&b);
    plan_free(&p);
}

static void test_round_trip_files(void)
{
    plan_builder b;
    plan_set p, q;
    base_error e;
    build_small(&b, &p);
    char path[512];
    const char *dir = getenv("PIPER_BINARY_DIR");
    snprintf(path, sizeof path, "%s/test_plan_round_trip.plan", dir ? dir : ".");
    base_error_clear(&e);
    CU_ASSERT_EQUAL(plan_write_file(&p, path, &e), 0);
    CU_ASSERT_EQUAL(plan_read_file(&q, path, &e), 0);
    CU_ASSERT_PTR_NULL(plan_diff(&p, &q));
    plan_free(&q);
    remove(path);
    CU_ASSERT_EQUAL(plan_read_file(&q, path, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "test_plan_round_trip.plan: cannot open file");
    base_error_clear(&e);
    CU_ASSERT_EQUAL(plan_write_file(&p, "/nonexistent-dir/x.plan", &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "/nonexistent-dir/x.plan: cannot write the plan (No such file or directory)");
    pb_done(&b);
    plan_free(&p);
}

/* The cluster's links and calibration ride in the header: written when present, absent from plans
 * without them (which read back with every figure 0), and checked by the reader. */
static void test_links_and_calib(void)
{
    plan_builder b;
    plan_set p, q;
    base_error e;
    build_rich(&b, &p);
    char *t = plan_text(&p);
    TEST_ASSERT_CONTAINS(t, "\nlinks nvlink_bw=450000000000 nvlink_latency=1e-06 nic_bw=50000000000 nic_latency=5.5e-06 "
                            "gpus_per_nic=2 gpus_per_node=8 topology=rail oversubscription=1.5 "
                            "platform=\"my platform.xml\"\ncalib gemm_eff=0.8 launch=4e-06\nmodel ");
    expect_edit_error(t, "topology=rail", "topology=torus", "t.plan:5: topology: unknown value 'torus'; use one of fat-tree, rail");
    expect_edit_error(t, " gpus_per_node=8", "", "t.plan:5: links: key 'gpus_per_node' is missing");
    expect_edit_error(t, "launch=4e-06", "gemm_eff=1", "t.plan:6: calib: key 'gemm_eff' appears twice");
    expect_edit_error(t, "launch=4e-06", "fast", "t.plan:6: calib: unexpected 'fast'; write name=value fields");
    expect_edit_error(t, "calib gemm_eff=0.8", "calib gemm_eff=x", "t.plan:6: gemm_eff: 'x' is not a number");
    expect_edit_error(t, "\nlinks ", "\nlinkz ", "t.plan:5: expected 'model' here, found 'linkz'");
    /* a calib line alone (no links) reads too */
    char *t2 = edit(t, "gpus_per_nic=2 gpus_per_node=8 topology=rail oversubscription=1.5 platform=\"my platform.xml\"\n", "");
    char *t3 = edit(t2, "links nvlink_bw=450000000000 nvlink_latency=1e-06 nic_bw=50000000000 nic_latency=5.5e-06 ", "");
    CU_ASSERT_EQUAL(read_text(&q, t3, &e), 0);
    CU_ASSERT_EQUAL(q.ncalib, 2);
    CU_ASSERT_EQUAL(q.links.nvlink_bw, 0);
    plan_free(&q);
    free(t2), free(t3), free(t);
    pb_done(&b);
    plan_free(&p);

    /* a plan without links or calibration: no such lines, and zeros after reading */
    build_small(&b, &p);
    t = plan_text(&p);
    CU_ASSERT_PTR_NULL(strstr(t, "\nlinks"));
    CU_ASSERT_PTR_NULL(strstr(t, "\ncalib"));
    CU_ASSERT_EQUAL(read_text(&q, t, &e), 0);
    CU_ASSERT_PTR_NULL(plan_diff(&p, &q));
    CU_ASSERT_EQUAL(q.links.gpus_per_nic, 0);
    CU_ASSERT_PTR_NULL(q.links.platform);
    plan_free(&q);
    free(t);
    /* the writer refuses what it could not read back */
    p.links.topology = 9;
    base_error_clear(&e);
    FILE *f = fopen("/dev/null", "w");
    CU_ASSERT_EQUAL(plan_write(&p, f, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "links topology 9 is not a plan_topology");
    p.links.topology = 0;
    plan_calib bad[] = {{"Gemm", 1}};
    p.calib = bad, p.ncalib = 1;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(plan_write(&p, f, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "calibration name 'Gemm' is not a key");
    p.calib = NULL, p.ncalib = 0;
    fclose(f);
    pb_done(&b);
    plan_free(&p);
}

static void test_writer_rejects_invalid_enums(void)
{
    plan_builder b;
    plan_set p;
    base_error e;
    build_small(&b, &p);
    p.lists[0].ins[2].op = 77;
    base_error_clear(&e);
    FILE *f = fopen("/dev/null", "w");
    CU_ASSERT_EQUAL(plan_write(&p, f, &e), -1);
    fclose(f);
    TEST_ASSERT_CONTAINS(e.msg, "cannot write the plan: list 0 instruction 2 has op 77");
    pb_done(&b);
    plan_free(&p);
}

/* ---------------------------------------------------------------- reader errors */

static void test_read_version_and_garbage(void)
{
    char *t = small_text();
    /* a version-1 plan states no roles: it must be compiled again */
    expect_edit_error(t, "piper-plan 2", "piper-plan 1",
                      "t.plan:1: plan format version 1 is not supported: the plan was written by an older "
                      "piper-compile, and this piper reads version 2 only; compile the program again with this "
                      "piper's piper-compile");
    expect_edit_error(t, "piper-plan 2", "piper-plan 3",
                      "t.plan:1: plan format version 3 is not supported: the plan was written by a newer "
                      "piper-compile, and this piper reads version 2 only; use the piper that wrote it");
    expect_read_error("hello world\n", "t.plan:1: not a piper plan: the first line must be 'piper-plan 2'");
    expect_read_error("", "t.plan: not a piper plan");
    expect_read_error("piper-plan one\n", "t.plan:1: bad first line 'piper-plan ...'; it must be 'piper-plan 2'");
    expect_read_error("piper-plan 2\ndtypes \x01\x02\n", "t.plan:2: unexpected byte 0x01; plan files are ASCII text");
    expect_read_error("\x7f\x45LF\x02\x01\x01", "t.plan:1: unexpected byte 0x7f");
    expect_edit_error(t, "dtypes param=bf16", "dtypes param=bf17", "t.plan:3: param: unknown value 'bf17'; use one of fp32, bf16, fp16, fp64, fp8");
    expect_edit_error(t, " qk_norm=false", " qk_norm=maybe", "t.plan:5: qk_norm: unknown value 'maybe'; use one of false, true");
    expect_edit_error(t, " vocab=0", " vocab=12x", "t.plan:5: vocab: '12x' is not an integer");
    expect_edit_error(t, " hbm_bw=0", " hbm_bw=fast", "t.plan:4: hbm_bw: 'fast' is not a number");
    expect_edit_error(t, " seq=0", " seq=0 colour=blue", "t.plan:5: model: unknown key 'colour'; the keys are: name family");
    expect_edit_error(t, " seq=0", " seq=0 seq=1", "t.plan:5: model: key 'seq' appears twice");
    expect_edit_error(t, " seq=0", "", "t.plan:5: model: key 'seq' is missing; add seq=...");
    expect_edit_error(t, "name=test-gpu", "name=\"test-gpu", "t.plan:4: a quoted string is not closed on its line");
    expect_edit_error(t, "name=test-gpu", "name=\"a\\qb\"", "t.plan:4: unknown escape '\\q' in a string");
    expect_edit_error(t, "name=test-gpu", "name=\"a\\x00\"", "t.plan:4: \\x00 in a string");
    expect_edit_error(t, "name=test-gpu", "name=te\"st", "t.plan:4: a quote inside a bare word");
    expect_edit_error(t, "end\n", "end\nmore\n", "t.plan:38: text after 'end'");
    free(t);
}

static void test_read_missing_and_truncated(void)
{
    char *t = small_text();
    expect_edit_error(t, "kernel_ids 1\n  0 gpt.layer.F\n", "",
                      "t.plan:8: expected 'kernel_ids' here, found 'kernel_lists'; sections come in this order");
    expect_edit_error(t, "end\n", "", "t.plan:36: the file ends where 'end' was expected; it is truncated");
    /* cut inside the instructions of list 1: its counts ask for more lines than are left */
    char *cut = strdup(t);
    cut[strstr(cut, "  1 recv") - cut] = 0;
    expect_read_error(cut, "t.plan:27: list 1 says 1 streams, 1 buffers and 4 instructions but only 3 lines follow; "
                           "the file is truncated or a count is wrong");
    /* cut in the middle of the last lines */
    cut = strcpy(cut, t);
    cut[strlen(cut) - 2] = 0;
    expect_read_error(cut, "t.plan:37: expected 'end' here, found 'en'");
    cut = strcpy(cut, t);
    cut[strstr(cut, "peer_offset=0 slots=0\nend") - cut + 5] = 0;
    expect_read_error(cut, "t.plan:36: write '1 node=N list=L peer_offset=O slots=G0,G1,...'");
    expect_edit_error(t, "  1 recv s=compute peer=0 tag=7 bytes=1024 buf=0 mem=activations\n", "\n",
                      "t.plan:32: expected instruction entry 1 here, found entry 2");
    /* every prefix of the file fails cleanly, naming a line (all but the final newline is needed) */
    size_t n = strlen(t);
    for (size_t k = 0; k + 1 < n; k++) {
        char *pre = strndup(t, k);
        plan_set p;
        base_error e;
        int rc = read_text(&p, pre, &e);
        if (rc == 0) fprintf(stderr, "\n  prefix of %zu bytes was accepted\n", k);
        CU_ASSERT_EQUAL(rc, -1);
        CU_ASSERT_EQUAL(strncmp(e.msg, "t.plan", 6), 0);
        plan_free(&p);
        free(pre);
    }
    free(cut);
    free(t);
}

static void test_read_counts_and_indices(void)
{
    char *t = small_text();
    expect_edit_error(t, "regions 1", "regions 1000",
                      "t.plan:6: regions says 1000 entries but only 31 lines follow; the file is truncated or the count is wrong");
    expect_edit_error(t, "regions 1", "regions 2",
                      "t.plan:8: expected region entry 1 here, found 'kernel_ids'; the count says 2 entries, but fewer are given");
    expect_edit_error(t, "  0 L0\n", "  1 L0\n", "t.plan:7: expected region entry 0 here, found entry 1; entries are numbered from 0 in order");
    expect_edit_error(t, "instrs=7", "instrs=8", "t.plan:27: expected instruction entry 7 here, found 'list'");
    expect_edit_error(t, "instrs=7", "instrs=-1", "t.plan:16: list counts must be 0 or more");
    expect_edit_error(t, "  4 send s=pp", "  4 send s=#2", "t.plan:24: stream 2 is out of range (0..1); declare the stream");
    expect_edit_error(t, "  4 send s=pp", "  4 send s=dp", "t.plan:24: stream: no stream is named 'dp'; use a name declared above or #index");
    expect_edit_error(t, "region=L0", "region=#1", "t.plan:21: region 1 is out of range (-1 or 0..0)");
    expect_edit_error(t, "kernels=0", "kernels=3", "t.plan:21: kernels 3 is out of range (-1 or 0..0)");
    expect_edit_error(t, "writes=0", "writes=0,4", "t.plan:21: written buffer 4 is out of range (0..0)");
    expect_edit_error(t, "wait s=pp event=0", "wait s=pp event=1", "t.plan:23: event 1 is out of range (0..0); raise the list's events count");
    expect_edit_error(t, "piece=whole group=0", "piece=whole group=1", "t.plan:25: group slot 1 is out of range (0..0)");
    expect_edit_error(t, "kind=all_reduce", "kind=all_sum", "t.plan:25: kind: unknown value 'all_sum'; use one of all_reduce, reduce_scatter");
    expect_edit_error(t, "alloc s=compute bytes=1024 buf=0", "alloc s=compute bytes=1024 buf=1", "t.plan:20: buf 1 is out of range (0..0)");
    expect_edit_error(t, "  4 send s=pp peer=1 tag=7 bytes=1024", "  4 send s=pp tag=7 bytes=1024", "t.plan:24: send instruction needs peer=...; add it");
    expect_edit_error(t, "  4 send s=pp", "  4 sned s=pp", "t.plan:24: op: unknown value 'sned'; use one of compute, send, recv");
    expect_edit_error(t, "  4 send s=pp", "  4 send s=pp colour=red", "t.plan:24: unknown instruction key 'colour'");
    expect_edit_error(t, "  4 send s=pp", "  4 send s=pp s=pp", "t.plan:24: key 's' appears twice");
    expect_edit_error(t, "bytes=1024 buf=0 mem=activations mb=0", "bytes=-5 buf=0 mem=activations mb=0", "t.plan:24: bytes -5 is negative");
    expect_edit_error(t, "  0 world devices=0,1", "  0 world devices=0,5", "t.plan:14: group 0 names device 5, but the plan has devices 0..1");
    expect_edit_error(t, "  0 world devices=0,1", "  0 world devices=1,1", "t.plan:14: group 0 names device 1 twice");
    expect_edit_error(t, "  1 node=0 list=1", "  1 node=0 list=2", "t.plan:36: list: '2' is not an integer in [0, 1]");
    expect_edit_error(t, "  1 node=0 list=1 peer_offset=0 slots=0", "  1 node=0 list=1 peer_offset=0 slots=0,0",
                      "t.plan:36: device 1 gives 2 group slots but list 1 has group_slots=1");
    expect_edit_error(t, "  0 node=0 list=0 peer_offset=0 slots=0", "  0 node=0 list=0 peer_offset=0 slots=3",
                      "t.plan:35: group slot: '3' is not an integer in [0, 0]");
    expect_edit_error(t, "  0 node=0 list=0 peer_offset=0", "  0 node=0 list=0 peer_offset=1",
                      "t.plan:35: device 0: peer_offset 1 moves the peer of list 0 instruction 4 (send peer=1) to device 2, but the plan has devices 0..1");
    expect_edit_error(t, "peer_offset=0 slots=0\n  1", "peer_offset=0 slots=0 node=1\n  1", "t.plan:35: write '0 node=N list=L peer_offset=O slots=G0,G1,...'");
    free(t);
}

/* Random damage to a valid file: the reader must fail cleanly or read a plan that writes back to
 * a text it reads identically (under the sanitizers, any memory error fails the suite). */
static void test_read_survives_mutations(void)
{
    plan_builder b;
    plan_set p;
    build_rich(&b, &p);
    char *t = plan_text(&p);
    pb_done(&b);
    plan_free(&p);
    size_t n = strlen(t);
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    static const char pool[] = "0123456789-#~\"\\= \n\t,:/xazAZ\x01\x7f\xff";
    int accepted = 0;
    for (int it = 0; it < 3000; it++) {
        char *m = malloc(n + 64);
        memcpy(m, t, n);
        size_t len = n;
        int edits = 1 + it % 4;
        for (int k = 0; k < edits; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(rng >> 33) % len;
            int kind = (int)((rng >> 20) % 4);
            if (kind == 0) m[at] = pool[(rng >> 8) % (sizeof pool - 1)];
            else if (kind == 1 && len > 1) memmove(m + at, m + at + 1, len - at - 1), len--;
            else if (kind == 2) len = at + 1;
            else if (len + 1 < n + 64) memmove(m + at + 1, m + at, len - at), m[at] = pool[(rng >> 8) % (sizeof pool - 1)], len++;
        }
        base_error e;
        base_error_clear(&e);
        int rc = plan_read(&p, "m.plan", m, len, &e);
        if (rc == 0) {
            accepted++;
            char *t1 = plan_text(&p);
            plan_set q;
            CU_ASSERT_EQUAL_FATAL(read_text(&q, t1, &e), 0);
            char *t2 = plan_text(&q);
            CU_ASSERT_STRING_EQUAL(t1, t2);
            plan_stats st;
            plan_check(&q, &st, &e); /* any outcome, but no crash */
            plan_stats_free(&st);
            free(t1);
            free(t2);
            plan_free(&q);
        } else {
            CU_ASSERT_EQUAL(strncmp(e.msg, "m.plan:", 7), 0);
        }
        plan_free(&p);
        free(m);
    }
    CU_ASSERT(accepted > 0); /* some damage lands in names or numbers and still reads */
    free(t);
}

/* ---------------------------------------------------------------- static checks */

static int check(const plan_set *p, plan_stats *st, base_error *e)
{
    base_error_clear(e);
    memset(st, 0, sizeof *st);
    return plan_check(p, st, e);
}

static void expect_check_error(const plan_set *p, const char *want)
{
    plan_stats st;
    base_error e;
    int rc = check(p, &st, &e);
    CU_ASSERT_EQUAL(rc, -1);
    TEST_ASSERT_CONTAINS(e.msg, want);
    CU_ASSERT_PTR_NULL(st.dev);
    plan_stats_free(&st);
}

/* Roles, purposes and piece rules: names from the tables (an unknown one lists them all), a role
 * of its buffer's memory category, a purpose of its collective's kind, both required where they
 * are interpreted and kept where not; plan_check applies the same rules to a plan in memory. */
static void test_read_roles(void)
{
    char *t = small_text();
    expect_edit_error(t, "role=saved", "role=paramz",
                      "t.plan:19: unknown role \"paramz\"; known roles: none, params, param_piece, grads, "
                      "grad_piece, mb_grads, optimizer, opt_piece, saved, recomputed, workspace, boundary, route, "
                      "comm, gathered, regathered, pieces");
    expect_edit_error(t, "role=saved", "role=params",
                      "t.plan:19: a buffer of role params belongs to memory category params, not activations; "
                      "fix its mem= or its role=");
    expect_edit_error(t, " role=saved owner=L0", " owner=L0", "t.plan:19: buffer 0 needs bytes=N, mem=CATEGORY and role=ROLE");
    expect_edit_error(t, "owner=L0", "owner=L9", "t.plan:19: region: no region is named 'L9'");
    expect_edit_error(t, "owner=L0", "owner=#4", "t.plan:19: owner region 4 is out of range (-1 or 0..0)");
    expect_edit_error(t, "role=saved owner=L0", "role=saved role=saved",
                      "t.plan:19: a buffer line takes bytes=N mem=CATEGORY role=ROLE and optionally owner=REGION");
    expect_edit_error(t, "purpose=grad_norm", "purpose=norm",
                      "t.plan:25: unknown purpose \"norm\"; known purposes: none, dp_grad_sum, zero_scatter, "
                      "zero_update_gather, zero3_gather, tp_fwd, tp_bwd, sp_regather, tp_grad_sync, grad_norm, "
                      "tied_sum, pair_sum, ep_dispatch, ep_combine");
    expect_edit_error(t, "piece=whole", "piece=half",
                      "t.plan:25: unknown piece rule \"half\"; known piece rules: none, whole, even, zero, leading, "
                      "replicated, token_table");
    expect_edit_error(t, "purpose=grad_norm", "purpose=zero3_gather",
                      "t.plan:25: a collective of kind all_reduce cannot have purpose zero3_gather");
    expect_edit_error(t, "kind=all_reduce purpose=grad_norm", "kind=all_gather purpose=grad_norm",
                      "t.plan:25: a collective of kind all_gather cannot have purpose grad_norm");
    expect_edit_error(t, " purpose=grad_norm", "", "t.plan:25: coll instruction needs purpose=...; add it");
    expect_edit_error(t, " piece=whole", "", "t.plan:25: coll instruction needs piece=...; add it");
    /* other ops do not interpret them: kept, as any field */
    char *t2 = edit(t, "  3 wait s=pp event=0", "  3 wait s=pp purpose=tp_fwd piece=even event=0");
    plan_set q;
    base_error e;
    CU_ASSERT_EQUAL_FATAL(read_text(&q, t2, &e), 0);
    CU_ASSERT_EQUAL(q.lists[0].ins[3].purpose, PLAN_PURPOSE_TP_FWD);
    CU_ASSERT_EQUAL(q.lists[0].ins[3].piece, PLAN_PIECE_EVEN);
    CU_ASSERT_EQUAL(q.lists[0].bufs[0].role, PLAN_ROLE_SAVED);
    CU_ASSERT_EQUAL(q.lists[0].bufs[0].region, 0);
    CU_ASSERT_EQUAL(q.lists[1].bufs[0].region, -1); /* no owner= */
    CU_ASSERT_EQUAL(q.lists[1].bufs[0].role, PLAN_ROLE_NONE);
    plan_free(&q);
    free(t2);
    free(t);

    /* the tables' columns */
    CU_ASSERT_EQUAL(plan_role_mem(PLAN_ROLE_GATHERED), PLAN_MEM_COMM);
    CU_ASSERT_EQUAL(plan_role_mem(PLAN_ROLE_MB_GRADS), PLAN_MEM_GRAD);
    CU_ASSERT_EQUAL(plan_role_mem(PLAN_ROLE_NONE), -1);
    CU_ASSERT(plan_purpose_allows(PLAN_PURPOSE_TP_FWD, PLAN_REDUCE_SCATTER));
    CU_ASSERT(!plan_purpose_allows(PLAN_PURPOSE_TP_FWD, PLAN_ALL_TO_ALL));
    CU_ASSERT(!plan_purpose_allows(PLAN_PURPOSE_EP_DISPATCH, PLAN_ALL_REDUCE));
    CU_ASSERT(plan_purpose_allows(PLAN_PURPOSE_NONE, PLAN_REDUCE));
    CU_ASSERT(!plan_purpose_allows(PLAN_NPURPOSE, PLAN_ALL_REDUCE));
    CU_ASSERT_STRING_EQUAL(plan_purpose_name(PLAN_PURPOSE_ZERO3_GATHER), "zero3_gather");
    CU_ASSERT_STRING_EQUAL(plan_piece_name(PLAN_PIECE_TOKEN_TABLE), "token_table");
    CU_ASSERT_STRING_EQUAL(plan_role_name(PLAN_NROLE), "?");

    /* in memory: plan_check's rules, and the writer refuses values outside the tables */
    plan_builder b;
    plan_set p;
    build_small(&b, &p);
    p.lists[1].bufs[0].role = PLAN_ROLE_WORKSPACE;
    expect_check_error(&p, "list 1 buffer 0 (act.mb0): a buffer of role workspace belongs to memory category "
                           "workspace, not activations");
    p.lists[1].bufs[0].role = PLAN_ROLE_NONE;
    p.lists[0].ins[5].purpose = PLAN_PURPOSE_EP_DISPATCH;
    expect_check_error(&p, "list 0 instruction 5: a collective of kind all_reduce cannot have purpose ep_dispatch");
    p.lists[0].ins[5].purpose = PLAN_PURPOSE_GRAD_NORM;
    plan_stats st;
    CU_ASSERT_EQUAL(check(&p, &st, &e), 0);
    plan_stats_free(&st);
    FILE *f = fopen("/dev/null", "w");
    p.lists[0].bufs[0].role = PLAN_NROLE;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(plan_write(&p, f, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "list 0 buffer 0 has role 17 and owner region 0 (of 1)");
    p.lists[0].bufs[0].role = PLAN_ROLE_SAVED;
    p.lists[0].bufs[0].region = 1;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(plan_write(&p, f, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "list 0 buffer 0 has role 8 and owner region 1 (of 1)");
    p.lists[0].bufs[0].region = 0;
    p.lists[0].ins[5].piece = PLAN_NPIECE;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(plan_write(&p, f, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "list 0 instruction 5 has piece rule 7");
    fclose(f);
    pb_done(&b);
    plan_free(&p);
}

#define P2P_SECONDS(bytes) (PLAN_CHECK_LATENCY + (double)(bytes) / PLAN_CHECK_BW)

/* The 1F1B steady state of two neighbours: each sends to the other and then receives from it.
 * Both lists are one shared list: device 1 reaches device 0 through peer_offset -1. */
static void build_exchange(plan_builder *b, plan_set *p, int sendrecv)
{
    pb_init(b, p, 2, 1);
    int pp = pb_stream(b, 0, "pp");
    int s = pb_send(b, 0, pp, 1, 7, 1000000, -1);
    int r = pb_recv(b, 0, pp, 1, 7, 1000000, -1);
    pb_at(b, 0, s)->mb = 3, pb_at(b, 0, s)->stage = 0;
    pb_at(b, 0, s)->sendrecv = pb_at(b, 0, r)->sendrecv = sendrecv;
    pb_device(b, 0, 0, 0, 0, NULL);
    pb_device(b, 1, 0, -1, 0, NULL);
}

/* The issuing host (plan_check_host): device 1 launches a collective, then receives from device
 * 0; device 0 sends, receives device 1's reply, and only then reaches the collective. Without a
 * host (the executors) every stream starts at once and the step completes; a host that blocks
 * after each p2p transfer until its device is done waits on device 1 for the collective, so it
 * never issues the reply device 0 waits for. Launching device 1's collective after its
 * transfers removes the wait. */
static void host_plan(plan_set *p, plan_builder *b, int coll_first)
{
    pb_init(b, p, 2, 2);
    int32_t both[2] = {0, 1}, slot0 = 0;
    int g = pb_group(b, "pair", 2, both);
    (void)g;
    for (int d = 0; d < 2; d++) {
        pb_device(b, d, d, 0, 1, &slot0);
        int pp = pb_stream(b, d, "pp"), dp = pb_stream(b, d, "dp");
        if (d == 0) {
            pb_send(b, 0, pp, 1, 1, 4096, -1);
            pb_recv(b, 0, pp, 1, 2, 4096, -1);
            pb_coll(b, 0, dp, PLAN_ALL_REDUCE, 0, 4096, -1);
        } else {
            if (coll_first) pb_coll(b, 1, dp, PLAN_ALL_REDUCE, 0, 4096, -1);
            pb_recv(b, 1, pp, 0, 1, 4096, -1);
            pb_send(b, 1, pp, 0, 2, 4096, -1);
            if (!coll_first) pb_coll(b, 1, dp, PLAN_ALL_REDUCE, 0, 4096, -1);
        }
    }
}

static void test_check_host(void)
{
    plan_set p;
    plan_builder b;
    base_error e;
    base_error_clear(&e);
    host_plan(&p, &b, 1);
    CU_ASSERT_EQUAL(plan_check(&p, NULL, &e), 0);
    CU_ASSERT_EQUAL(plan_check_host(&p, PLAN_BLOCK_NORM | PLAN_BLOCK_BATCH, NULL, &e), 0);
    CU_ASSERT_EQUAL(plan_check_host(&p, PLAN_BLOCK_P2P, NULL, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "deadlock");
    TEST_ASSERT_CONTAINS(e.msg, "device 0 (list 0): #1 recv s=pp peer=1 tag=2 [no send with tag 2 posted by device 1]");
    TEST_ASSERT_CONTAINS(e.msg, "device 1 (list 1): #0 coll s=dp kind=all_reduce group=0 (pair)");
    TEST_ASSERT_CONTAINS(e.msg, "[collective 0 of the group: 1 of 2 members arrived; device 0 has not]");
    TEST_ASSERT_CONTAINS(e.msg, "its host blocks at #1 recv s=pp peer=0 tag=1 (p2p sync point)");
    TEST_ASSERT_CONTAINS(e.msg, "host_sync=norm");
    base_error why;
    CU_ASSERT_EQUAL(plan_host_blocks(&p, &why), PLAN_BLOCK_NORM | PLAN_BLOCK_BATCH);
    TEST_ASSERT_CONTAINS(why.msg, "its host blocks at #1 recv");
    pb_done(&b);
    plan_free(&p);

    host_plan(&p, &b, 0);
    CU_ASSERT_EQUAL(plan_check_host(&p, PLAN_BLOCK_ALL, NULL, &e), 0);
    CU_ASSERT_EQUAL(plan_host_blocks(&p, &why), PLAN_BLOCK_ALL);
    CU_ASSERT_EQUAL(why.msg[0], 0);
    pb_done(&b);
    plan_free(&p);

    /* Megatron's 1F1B pattern (sendrecv pairs, gradient all-reduces after the last backward)
     * is what a blocking host runs, with shared and with own lists */
    for (int shared = 0; shared < 2; shared++) {
        pb_pipeline_1f1b(&b, &p, 4, 2, 8, 2, shared);
        CU_ASSERT_EQUAL(plan_host_blocks(&p, NULL), PLAN_BLOCK_ALL);
        pb_done(&b);
        plan_free(&p);
    }
}

static void test_check_exchange_deadlocks_without_sendrecv(void)
{
    plan_builder b;
    plan_set p;
    build_exchange(&b, &p, 0);
    expect_check_error(&p, "deadlock: at t=0 s nothing can progress and 2 of 2 devices are not finished; stuck: "
                           "device 0 (list 0): #0 send s=pp peer=1 tag=7 mb=3 stage=0 [no recv with tag 7 posted by "
                           "device 1]; device 1 (list 0): #0 send s=pp peer=0 tag=7 mb=3 stage=0 [no recv with tag 7 "
                           "posted by device 0]. Post each send's receive");
    pb_done(&b);
    plan_free(&p);

    build_exchange(&b, &p, 1);
    dump_seed(&p, "exchange");
    plan_stats st;
    base_error e;
    CU_ASSERT_EQUAL_FATAL(check(&p, &st, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(st.makespan_seconds, P2P_SECONDS(1000000), 1e-15);
    CU_ASSERT_EQUAL(st.dev[1].count_by_op[PLAN_SEND], 1);
    plan_stats_free(&st);
    assert_round_trip(&p);
    pb_done(&b);
    plan_free(&p);
}

static void test_check_wait_cycle(void)
{
    plan_builder b;
    plan_set p;
    pb_init(&b, &p, 1, 1);
    int x = pb_stream(&b, 0, "x"), y = pb_stream(&b, 0, "y");
    pb_wait(&b, 0, x, 0);   /* #0: x waits for y's record of event 0 ... */
    pb_wait(&b, 0, y, 1);   /* #1: ... which comes after y waits for x's record of event 1 */
    pb_record(&b, 0, x, 1); /* #2 */
    pb_record(&b, 0, y, 0); /* #3 */
    pb_device(&b, 0, 0, 0, 0, NULL);
    plan_stats st;
    base_error e;
    CU_ASSERT_EQUAL(check(&p, &st, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "deadlock: at t=0 s nothing can progress and 1 of 1 devices are not finished; stuck: "
                                "device 0 (list 0): #0 wait s=x event=0 [waits for #3 record on stream y], "
                                "#1 wait s=y event=1 [waits for #2 record on stream x]");
    /* #0 waits before any record of event 0 in launch order: an executor would not wait at all */
    TEST_ASSERT_CONTAINS(e.warnings, "device 0 (list 0) #0 wait s=x event=0: waits for event 0 before any record of it in launch order");
    pb_done(&b);
    plan_free(&p);
}

/* Two groups over the same two devices; device 0 issues A then B, device 1 B then A. */
static void test_check_collective_order_across_groups(void)
{
    plan_builder b;
    plan_set p;
    pb_init(&b, &p, 2, 2);
    pb_group(&b, "A", 2, (int32_t[]){0, 1});
    pb_group(&b, "B", 2, (int32_t[]){0, 1});
    for (int l = 0; l < 2; l++) {
        int s = pb_stream(&b, l, "dp");
        pb_coll(&b, l, s, PLAN_ALL_REDUCE, l, 1 << 20, -1);
        pb_coll(&b, l, s, PLAN_ALL_REDUCE, 1 - l, 1 << 20, -1);
    }
    pb_device(&b, 0, 0, 0, 2, (int32_t[]){0, 1});
    pb_device(&b, 1, 1, 0, 2, (int32_t[]){0, 1});
    expect_check_error(&p, "stuck: device 0 (list 0): #0 coll s=dp kind=all_reduce group=0 (A) bytes=1048576 "
                           "[collective 0 of the group: 1 of 2 members arrived; device 1 has not]; device 1 (list 1): "
                           "#0 coll s=dp kind=all_reduce group=1 (B) bytes=1048576 [collective 0 of the group: 1 of 2 "
                           "members arrived; device 0 has not]");
    /* the same order on both devices runs, through shared slots or not */
    p.lists[1].ins[0].group = 0, p.lists[1].ins[1].group = 1;
    plan_stats st;
    base_error e;
    CU_ASSERT_EQUAL(check(&p, &st, &e), 0);
    /* each all-reduce of 1 MiB over 2 members moves 2(n-1)/n = 1 x its bytes */
    CU_ASSERT_DOUBLE_EQUAL(st.makespan_seconds, 2 * P2P_SECONDS(1 << 20), 1e-15);
    plan_stats_free(&st);
    pb_done(&b);
    plan_free(&p);
}

static void test_check_collective_sequences_differ(void)
{
    plan_builder b;
    plan_set p;
    pb_init(&b, &p, 3, 2);
    pb_group(&b, "dp", 3, (int32_t[]){0, 1, 2});
    int s = pb_stream(&b, 0, "dp");
    pb_coll(&b, 0, s, PLAN_ALL_REDUCE, 0, 1024, -1);
    pb_coll(&b, 0, s, PLAN_ALL_GATHER, 0, 512, -1);
    s = pb_stream(&b, 1, "dp");
    pb_coll(&b, 1, s, PLAN_ALL_REDUCE, 0, 1024, -1);
    pb_coll(&b, 1, s, PLAN_REDUCE_SCATTER, 0, 512, -1);
    pb_device(&b, 0, 0, 0, 1, (int32_t[]){0});
    pb_device(&b, 1, 0, 0, 1, (int32_t[]){0}); /* shares device 0's list: same sequence */
    pb_device(&b, 2, 1, 0, 1, (int32_t[]){0});
    expect_check_error(&p, "group 0 (dp): members disagree on its collectives at position 1: device 0 issues #1 "
                           "all_gather of 512 bytes, device 2 issues #1 reduce_scatter of 512 bytes; every member must "
                           "issue a group's collectives in the same order");
    p.lists[1].n = 1; /* device 2 stops after the first */
    expect_check_error(&p, "at position 1: device 0 issues #1 all_gather of 512 bytes, device 2 issues nothing more");
    pb_done(&b);
    plan_free(&p);
}

/* Memory, by hand. GPU: 1e12 FLOP/s, so kernel list k1 takes 1 s and k2 2 s.
 *   t=0  c: alloc A (act 100), start K1 [0,1]     x: alloc P (params 1000), wait e0
 *   t=1  c: record e0, alloc B (act 50), K2 [1,3]  x: alloc C (comm 30), K1 [1,2]
 *   t=2                                            x: free C, alloc D (grads 20)
 *   t=3  c: free A, free B
 * Live: 1100 from 0, 1180 from 1 (the peak: params 1000, act 150, comm 30), 1170 from 2, 1020 at 3.
 * Each category's own peak: params 1000, act 150, comm 30, grads 20 (after the total's peak). */
static void test_check_memory_peaks(void)
{
    plan_builder b;
    plan_set p;
    pb_init(&b, &p, 1, 1);
    int k1 = pb_kernels(&b, 1e12, 0), k2 = pb_kernels(&b, 2e12, 0);
    int c = pb_stream(&b, 0, "c"), x = pb_stream(&b, 0, "x");
    int A = pb_buf(&b, 0, "A", 100, PLAN_MEM_ACT), P = pb_buf(&b, 0, "P", 1000, PLAN_MEM_PARAM);
    int B = pb_buf(&b, 0, "B", 50, PLAN_MEM_ACT), C = pb_buf(&b, 0, "C", 30, PLAN_MEM_COMM);
    int D = pb_buf(&b, 0, "D", 20, PLAN_MEM_GRAD);
    pb_alloc(&b, 0, c, A);
    pb_alloc(&b, 0, x, P);
    int i = pb_compute(&b, 0, c, PLAN_PASS_F, k1, 0, 0);
    pb_reads(&b, 0, i, 1, (int32_t[]){A});
    pb_record(&b, 0, c, 0);
    pb_wait(&b, 0, x, 0);
    pb_alloc(&b, 0, x, C);
    pb_alloc(&b, 0, c, B);
    i = pb_compute(&b, 0, x, PLAN_PASS_AUX, k1, -1, -1);
    pb_reads(&b, 0, i, 1, (int32_t[]){C});
    i = pb_compute(&b, 0, c, PLAN_PASS_B, k2, 0, 0);
    pb_reads(&b, 0, i, 2, (int32_t[]){A, B});
    pb_writes(&b, 0, i, 1, (int32_t[]){B});
    pb_free(&b, 0, x, C);
    pb_alloc(&b, 0, x, D);
    pb_free(&b, 0, c, A);
    pb_free(&b, 0, c, B);
    pb_device(&b, 0, 0, 0, 0, NULL);
    dump_seed(&p, "memory");

    plan_stats st;
    base_error e;
    CU_ASSERT_EQUAL_FATAL(check(&p, &st, &e), 0);
    const plan_device_stats *d = &st.dev[0];
    CU_ASSERT_DOUBLE_EQUAL(d->peak_bytes, 1180, 0);
    CU_ASSERT_DOUBLE_EQUAL(d->at_peak[PLAN_MEM_PARAM], 1000, 0);
    CU_ASSERT_DOUBLE_EQUAL(d->at_peak[PLAN_MEM_ACT], 150, 0);
    CU_ASSERT_DOUBLE_EQUAL(d->at_peak[PLAN_MEM_COMM], 30, 0);
    CU_ASSERT_DOUBLE_EQUAL(d->at_peak[PLAN_MEM_GRAD], 0, 0);
    CU_ASSERT_DOUBLE_EQUAL(d->at_peak[PLAN_MEM_OPT], 0, 0);
    CU_ASSERT_DOUBLE_EQUAL(d->peak_by_mem[PLAN_MEM_PARAM], 1000, 0);
    CU_ASSERT_DOUBLE_EQUAL(d->peak_by_mem[PLAN_MEM_ACT], 150, 0);
    CU_ASSERT_DOUBLE_EQUAL(d->peak_by_mem[PLAN_MEM_COMM], 30, 0);
    CU_ASSERT_DOUBLE_EQUAL(d->peak_by_mem[PLAN_MEM_GRAD], 20, 0);
    CU_ASSERT_DOUBLE_EQUAL(d->busy_seconds, 4, 0);
    CU_ASSERT_DOUBLE_EQUAL(d->end_seconds, 3, 0);
    CU_ASSERT_DOUBLE_EQUAL(st.makespan_seconds, 3, 0);
    CU_ASSERT_EQUAL(d->count_by_op[PLAN_ALLOC], 5);
    CU_ASSERT_EQUAL(d->count_by_op[PLAN_FREE], 3);
    CU_ASSERT_EQUAL(d->count_by_op[PLAN_COMPUTE], 3);
    CU_ASSERT_EQUAL(d->count_by_op[PLAN_WAIT], 1);
    plan_stats_free(&st);

    /* a read plan checks the same */
    char *t = plan_text(&p);
    plan_set q;
    int rc = read_text(&q, t, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL_FATAL(check(&q, &st, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(st.dev[0].peak_bytes, 1180, 0);
    plan_stats_free(&st);
    plan_free(&q);
    free(t);
    pb_done(&b);
    plan_free(&p);
}

static void test_check_buffer_lifetimes(void)
{
    plan_builder b;
    plan_set p;
    pb_init(&b, &p, 1, 1);
    int k = pb_kernels(&b, 2e12, 0);
    int c = pb_stream(&b, 0, "c"), x = pb_stream(&b, 0, "x");
    int A = pb_buf(&b, 0, "act.A", 100, PLAN_MEM_ACT);
    pb_device(&b, 0, 0, 0, 0, NULL);
    pb_alloc(&b, 0, c, A);
    pb_free(&b, 0, c, A);
    int i = pb_compute(&b, 0, c, PLAN_PASS_F, k, 1, 0);
    pb_reads(&b, 0, i, 1, (int32_t[]){A});
    expect_check_error(&p, "device 0 (list 0) #2 compute s=c pass=F mb=1 stage=0: reads buffer 0 (act.A), which is "
                           "not live: #1 freed it; free a buffer after its last use");
    p.lists[0].n = 0;
    i = pb_compute(&b, 0, c, PLAN_PASS_F, k, 1, 0);
    pb_writes(&b, 0, i, 1, (int32_t[]){A});
    expect_check_error(&p, "#0 compute s=c pass=F mb=1 stage=0: writes buffer 0 (act.A), which is not live: it was "
                           "never allocated; allocate it before its first use");
    p.lists[0].n = 0;
    pb_alloc(&b, 0, c, A);
    pb_alloc(&b, 0, x, A);
    expect_check_error(&p, "device 0 (list 0) #1 alloc s=x buf=0 (act.A): allocates buffer 0 (act.A), which #0 "
                           "allocated and nothing freed since");
    p.lists[0].n = 0;
    pb_alloc(&b, 0, c, A);
    pb_free(&b, 0, c, A);
    pb_free(&b, 0, c, A);
    expect_check_error(&p, "#2 free s=c buf=0 (act.A): frees buffer 0 (act.A), which #1 already freed");
    p.lists[0].n = 0;
    pb_alloc(&b, 0, c, A);
    i = pb_compute(&b, 0, c, PLAN_PASS_F, k, 1, 0);
    pb_reads(&b, 0, i, 1, (int32_t[]){A});
    pb_free(&b, 0, x, A);
    expect_check_error(&p, "#2 free s=x buf=0 (act.A): frees buffer 0 (act.A) while #1 on another stream still uses it");
    p.lists[0].n = 0;
    pb_send(&b, 0, c, 0, 1, 100, A);
    expect_check_error(&p, "#0 send s=c peer=0 tag=1: sends from buffer 0 (act.A), which is not live");
    p.lists[0].n = 0;
    pb_alloc(&b, 0, c, A);
    p.lists[0].bufs[A].bytes = 64;
    expect_check_error(&p, "#0 alloc s=c buf=0 (act.A): says 100 bytes of activations but buffer 0 is declared with 64 bytes");
    pb_done(&b);
    plan_free(&p);
}

static void test_check_static_errors(void)
{
    plan_builder b;
    plan_set p;
    /* a sendrecv group split by another instruction */
    pb_init(&b, &p, 2, 1);
    int s = pb_stream(&b, 0, "pp");
    pb_at(&b, 0, pb_send(&b, 0, s, 1, 1, 8, -1))->sendrecv = 4;
    pb_add(&b, 0, PLAN_NOP, s);
    pb_at(&b, 0, pb_recv(&b, 0, s, 1, 1, 8, -1))->sendrecv = 4;
    pb_device(&b, 0, 0, 0, 0, NULL);
    pb_device(&b, 1, 0, -1, 0, NULL);
    expect_check_error(&p, "device 0 (list 0) #2 recv s=pp peer=1 tag=1: sendrecv group 4 already appeared at #0, "
                           "with other instructions of the stream in between");
    /* a transfer whose two sides disagree on its size */
    p.lists[0].ins[1] = p.lists[0].ins[2];
    p.lists[0].ins[1].bytes = 9;
    p.lists[0].n = 2;
    expect_check_error(&p, "device 1 (list 0) #0 send s=pp peer=0 tag=1: carries 8 bytes but its counterpart on "
                           "device 0, #1 recv s=pp peer=1 tag=1, carries 9 bytes; both sides of a transfer must agree");
    /* a peer outside the plan */
    p.devices[1].peer_offset = 5;
    expect_check_error(&p, "device 1 (list 0) #0 send: peer 1 + peer_offset 5 = 6 is not a device (0..1)");
    pb_done(&b);
    plan_free(&p);

    /* a wait nobody records; a collective on a group the device is not in */
    pb_init(&b, &p, 2, 1);
    s = pb_stream(&b, 0, "c");
    pb_wait(&b, 0, s, 0);
    pb_group(&b, "just0", 1, (int32_t[]){0});
    pb_device(&b, 0, 0, 0, 1, (int32_t[]){0});
    pb_device(&b, 1, 0, 0, 1, (int32_t[]){0});
    expect_check_error(&p, "device 0 (list 0) #0 wait s=c event=0: waits for event 0, which no instruction of the list records");
    p.lists[0].ins[0] = (plan_instr){0};
    plan_instr_init(&p.lists[0].ins[0], PLAN_COLL);
    p.lists[0].ins[0].group = 0, p.lists[0].ins[0].bytes = 4;
    expect_check_error(&p, "device 1 (list 0) #0 coll s=c kind=all_reduce group=0 (just0) bytes=4: uses group slot 0, "
                           "which this device maps to group 0 (just0), but the device is not a member");
    /* a broken in-memory plan is reported, not followed */
    p.lists[0].ins[0].stream = 3;
    expect_check_error(&p, "list 0 instruction 0 runs on stream 3 of 1; the compiler built an invalid plan");
    pb_done(&b);
    plan_free(&p);
}

/* Two stages, one stream each, GPipe over two micro-batches. F takes 1 s, B 2 s, and each
 * activation or gradient transfer T = 5 us + 50e6 B / 50e9 B/s = 1.005 ms.
 *   dev0: F0 [0,1]; send a0 -> [1,1+T]; F1 [1+T,2+T]; send a1 [2+T,2+2T]; recv g1 waits for dev1;
 *   dev1: recv a0 [0..1+T]; F0 [1+T,2+T]; recv a1 [..2+2T]; F1 [2+2T,3+2T]; B1 [3+2T,5+2T];
 *         send g1 [5+2T,5+3T]; B0 [5+3T,7+3T]; send g0 [7+3T,7+4T]
 *   dev0: B1 [5+3T,7+3T]; recv g0 [7+3T,7+4T]; B0 [7+4T,9+4T]
 * makespan 9 + 4T; dev1 ends at 7 + 4T; both are busy 6 s. */
static void test_check_pipeline_timing(void)
{
    plan_builder b;
    plan_set p;
    pb_init(&b, &p, 2, 2);
    int kf = pb_kernels(&b, 1e12, 0), kb = pb_kernels(&b, 2e12, 0);
    const int64_t bytes = 50000000;
    int s0 = pb_stream(&b, 0, "main"), s1 = pb_stream(&b, 1, "main");
    pb_compute(&b, 0, s0, PLAN_PASS_F, kf, 0, 0);
    pb_send(&b, 0, s0, 1, 0, bytes, -1);
    pb_compute(&b, 0, s0, PLAN_PASS_F, kf, 1, 0);
    pb_send(&b, 0, s0, 1, 1, bytes, -1);
    pb_recv(&b, 0, s0, 1, 11, bytes, -1);
    pb_compute(&b, 0, s0, PLAN_PASS_B, kb, 1, 0);
    pb_recv(&b, 0, s0, 1, 10, bytes, -1);
    pb_compute(&b, 0, s0, PLAN_PASS_B, kb, 0, 0);
    pb_recv(&b, 1, s1, 0, 0, bytes, -1);
    pb_compute(&b, 1, s1, PLAN_PASS_F, kf, 0, 1);
    pb_recv(&b, 1, s1, 0, 1, bytes, -1);
    pb_compute(&b, 1, s1, PLAN_PASS_F, kf, 1, 1);
    pb_compute(&b, 1, s1, PLAN_PASS_B, kb, 1, 1);
    pb_send(&b, 1, s1, 0, 11, bytes, -1);
    pb_compute(&b, 1, s1, PLAN_PASS_B, kb, 0, 1);
    pb_send(&b, 1, s1, 0, 10, bytes, -1);
    pb_device(&b, 0, 0, 0, 0, NULL);
    pb_device(&b, 1, 1, 0, 0, NULL);
    dump_seed(&p, "pipeline");
    const double T = P2P_SECONDS(bytes);
    CU_ASSERT_DOUBLE_EQUAL(T, 0.001005, 1e-15);
    plan_stats st;
    base_error e;
    CU_ASSERT_EQUAL_FATAL(check(&p, &st, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(st.makespan_seconds, 9 + 4 * T, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(st.dev[0].end_seconds, 9 + 4 * T, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(st.dev[1].end_seconds, 7 + 4 * T, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(st.dev[0].busy_seconds, 6, 0);
    CU_ASSERT_DOUBLE_EQUAL(st.dev[1].busy_seconds, 6, 0);
    CU_ASSERT_EQUAL(st.dev[0].count_by_op[PLAN_SEND], 2);
    CU_ASSERT_EQUAL(st.dev[0].count_by_op[PLAN_RECV], 2);
    plan_stats_free(&st);
    pb_done(&b);
    plan_free(&p);
}

/* Compute is a roofline per kernel; collectives cost a ring's volume. */
static void test_check_cost_figures(void)
{
    plan_builder b;
    plan_set p;
    pb_init(&b, &p, 4, 1);
    p.gpu.hbm_bw = 1e9;
    /* 1e12 FLOPs at 1e12 FLOP/s (1 s) then 2e9 bytes at 1e9 B/s (2 s) */
    int k = pb_kernels(&b, 1e12, 2e9);
    /* a kernel whose bytes dominate its FLOPs counts the bytes: 0.5e12 FLOPs vs 3e9 B */
    int k2 = pb_kernels(&b, 0.5e12, 0);
    p.kernel_lists[k2].k[0].bytes = 3e9;
    pb_group(&b, "dp", 4, (int32_t[]){0, 1, 2, 3});
    int c = pb_stream(&b, 0, "c");
    pb_compute(&b, 0, c, PLAN_PASS_F, k, 0, 0);
    pb_compute(&b, 0, c, PLAN_PASS_B, k2, 0, 0);
    pb_coll(&b, 0, c, PLAN_ALL_REDUCE, 0, 50000000000LL, -1);    /* 2*3/4 * 1 s */
    pb_coll(&b, 0, c, PLAN_ALL_GATHER, 0, 50000000000LL, -1);    /* 3/4 * 1 s */
    pb_coll(&b, 0, c, PLAN_BROADCAST, 0, 50000000000LL, -1);     /* 1 s */
    for (int d = 0; d < 4; d++) pb_device(&b, d, 0, 0, 1, (int32_t[]){0});
    plan_stats st;
    base_error e;
    CU_ASSERT_EQUAL_FATAL(check(&p, &st, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(st.dev[2].busy_seconds, 3 + 3, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(st.makespan_seconds, 6 + 1.5 + 0.75 + 1 + 3 * PLAN_CHECK_LATENCY, 1e-12);
    plan_stats_free(&st);
    /* no figures, no time */
    memset(p.gpu.peak_flops, 0, sizeof p.gpu.peak_flops);
    p.gpu.hbm_bw = 0;
    CU_ASSERT_EQUAL_FATAL(check(&p, &st, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(st.dev[0].busy_seconds, 0, 0);
    plan_stats_free(&st);
    CU_ASSERT_EQUAL(plan_check(&p, NULL, &e), 0); /* stats are optional */
    pb_done(&b);
    plan_free(&p);
}

/* A real schedule: 1F1B over 4 stages x 2 replicas, 6 micro-batches, 2 layers per stage. It must
 * check clean; stage s must peak at min(P - s, M) micro-batches of activations (the 1F1B memory
 * fact); and the plan with lists shared through peer_offset and slots must run exactly like the one
 * where every device has its own list, and like itself read back from its file. */
static void test_check_1f1b_pipeline(void)
{
    enum { P = 4, D = 2, M = 6, L = 2 };
    plan_builder b1, b2;
    plan_set shared, own;
    pb_pipeline_1f1b(&b1, &shared, P, D, M, L, 1);
    pb_pipeline_1f1b(&b2, &own, P, D, M, L, 0);
    CU_ASSERT_EQUAL(shared.nlists, P);
    CU_ASSERT_EQUAL(own.nlists, P * D);
    plan_stats a, c, r;
    base_error e;
    int rc = check(&shared, &a, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL_FATAL(check(&own, &c, &e), 0);
    char *t = plan_text(&shared);
    plan_set q;
    CU_ASSERT_EQUAL_FATAL(read_text(&q, t, &e), 0);
    CU_ASSERT_EQUAL_FATAL(check(&q, &r, &e), 0);
    const double act = 64.0 * (1 << 20) * L;
    for (int d = 0; d < P * D; d++) {
        int s = d % P;
        CU_ASSERT_DOUBLE_EQUAL(a.dev[d].peak_by_mem[PLAN_MEM_ACT], (P - s < M ? P - s : M) * act, 0);
        CU_ASSERT_EQUAL(memcmp(&a.dev[d], &c.dev[d], sizeof a.dev[d]), 0);
        CU_ASSERT_EQUAL(memcmp(&a.dev[d], &r.dev[d], sizeof a.dev[d]), 0);
        CU_ASSERT(a.dev[d].end_seconds > a.dev[d].busy_seconds); /* bubbles and communication */
    }
    CU_ASSERT_EQUAL(memcmp(&a.dev[0], &a.dev[P], sizeof a.dev[0]), 0); /* replicas agree */
    CU_ASSERT_DOUBLE_EQUAL(a.makespan_seconds, c.makespan_seconds, 0);
    /* (M + P - 1) slots of F + B per stage at least: 9 x 2 layers x (2.4 + 4.8) ms */
    CU_ASSERT(a.makespan_seconds > (M + P - 1) * L * 7.2e12 / 989e12);
    plan_stats_free(&a);
    plan_stats_free(&c);
    plan_stats_free(&r);
    plan_free(&q);
    free(t);
    /* swapping the sendrecv pairs for plain send-then-recv deadlocks the steady state */
    for (int l = 0; l < shared.nlists; l++)
        for (int i = 0; i < shared.lists[l].n; i++) shared.lists[l].ins[i].sendrecv = 0;
    expect_check_error(&shared, "deadlock: ");
    pb_done(&b1);
    pb_done(&b2);
    plan_free(&shared);
    plan_free(&own);
}

int piper_tests_register(void)
{
    static const test_case format[] = {
        {"format is readable", test_format_is_readable},
        {"round trip: every section, shared lists", test_round_trip_rich},
        {"round trip: quoting and doubles", test_round_trip_small_and_quoting},
        {"round trip through files", test_round_trip_files},
        {"links and calibration in the header", test_links_and_calib},
        {"writer rejects invalid enums", test_writer_rejects_invalid_enums},
        {"reader: version, garbage, values", test_read_version_and_garbage},
        {"reader: missing sections, truncation", test_read_missing_and_truncated},
        {"reader: counts and indices", test_read_counts_and_indices},
        {"reader: roles, purposes, piece rules", test_read_roles},
        {"reader: survives mutations", test_read_survives_mutations},
        {NULL, NULL}};
    static const test_case checks[] = {
        {"exchange deadlocks without sendrecv", test_check_exchange_deadlocks_without_sendrecv},
        {"a blocking host deadlocks where streams alone do not", test_check_host},
        {"cross-stream wait cycle", test_check_wait_cycle},
        {"collective order across groups", test_check_collective_order_across_groups},
        {"collective sequences differ", test_check_collective_sequences_differ},
        {"memory peaks by category", test_check_memory_peaks},
        {"buffer lifetimes", test_check_buffer_lifetimes},
        {"static errors", test_check_static_errors},
        {"pipeline timing", test_check_pipeline_timing},
        {"cost figures", test_check_cost_figures},
        {"1F1B pipeline, shared and own lists", test_check_1f1b_pipeline},
        {NULL, NULL}};
    if (test_add_suite("plan format", format)) return -1;
    return test_add_suite("plan check", checks);
}
