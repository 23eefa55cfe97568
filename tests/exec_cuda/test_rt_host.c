/* test_rt_host.c — the CUDA runtime's host-side logic (exec/cuda/rt_host.c) without a GPU:
 *  - streams and events: each WAIT waits on the event of the record the interpreter's rule names
 *    (latest before it, else first after), and the per-stream cursors map the backend's
 *    (stream, event) calls back to those instructions whatever order the streams run in;
 *  - communicator keys of compiled plans (PP x DP, TP, 1F1B with sendrecv groups): one per
 *    (group, stream) with the group's members in rank order, one per p2p direction and stream
 *    pair, sorted, and found for every collective and transfer of every device;
 *  - sendrecv spans: the NCCL group of each transfer is its consecutive sendrecv group;
 *  - the caching allocator: size classes, reuse of a freed block only once its fence has passed,
 *    waiting and trimming when the raw allocator runs out, peaks. */
#include <stdlib.h>

#include "exec/cuda/rt_host.h"
#include "sched/sched.h"
#include "tests/testutil.h"

/* ---------------------------------------------------------------- hand-built lists */

static plan_instr ins(plan_op op, int stream, int event)
{
    plan_instr in;
    plan_instr_init(&in, op);
    in.stream = stream;
    in.event = event;
    return in;
}

static void test_streams_events(void)
{
    /* #0 R e0 s0; #1 W e0 s1; #2 R e0 s0; #3 W e0 s1; #4 W e1 s1 (record comes after); #5 R e1 s0;
     * #6 W e0 s0 (its own stream's latest record: #2) */
    plan_instr v[7] = {ins(PLAN_RECORD, 0, 0), ins(PLAN_WAIT, 1, 0), ins(PLAN_RECORD, 0, 0),
                       ins(PLAN_WAIT, 1, 0),   ins(PLAN_WAIT, 1, 1), ins(PLAN_RECORD, 0, 1),
                       ins(PLAN_WAIT, 0, 0)};
    const char *names[2] = {"compute", "comm"};
    plan_list L = {.n = 7, .ins = v, .nstreams = 2, .streams = names, .nevents = 2};
    exec_cuda_streams s;
    base_error e;
    base_error_clear(&e);
    plan_set ps = {.nlists = 1, .lists = &L};
    CU_ASSERT_FATAL(exec_cuda_streams_init(&s, &ps, 0, &e) == 0);
    CU_ASSERT_EQUAL(s.nrecords, 3);
    CU_ASSERT_EQUAL(s.record_of[0], 0);
    CU_ASSERT_EQUAL(s.record_of[2], 1);
    CU_ASSERT_EQUAL(s.record_of[5], 2);
    CU_ASSERT_EQUAL(s.wait_on[1], 0);
    CU_ASSERT_EQUAL(s.wait_on[3], 1);
    CU_ASSERT_EQUAL(s.wait_on[4], 2);
    CU_ASSERT_EQUAL(s.wait_on[6], 1);
    /* a run where stream 1 is far behind stream 0: the host has recorded e0 twice before stream
     * 1's first wait, which must still wait on the first record's CUDA event */
    for (int round = 0; round < 2; round++) {
        exec_cuda_streams_reset(&s);
        int ev = -1;
        CU_ASSERT(exec_cuda_streams_next_record(&s, &L, 0, 0, &ev, &e) == 0 && ev == 0);
        CU_ASSERT(exec_cuda_streams_next_record(&s, &L, 0, 0, &ev, &e) == 0 && ev == 1);
        CU_ASSERT(exec_cuda_streams_next_record(&s, &L, 0, 1, &ev, &e) == 0 && ev == 2);
        CU_ASSERT(exec_cuda_streams_next_wait(&s, &L, 0, 0, &ev, &e) == 0 && ev == 1);
        CU_ASSERT(exec_cuda_streams_next_wait(&s, &L, 1, 0, &ev, &e) == 0 && ev == 0);
        CU_ASSERT(exec_cuda_streams_next_wait(&s, &L, 1, 0, &ev, &e) == 0 && ev == 1);
        CU_ASSERT(exec_cuda_streams_next_wait(&s, &L, 1, 1, &ev, &e) == 0 && ev == 2);
        /* one call too many, and a call for the wrong event, are errors */
        CU_ASSERT(exec_cuda_streams_next_wait(&s, &L, 1, 1, &ev, &e) == -1);
        base_error_clear(&e);
    }
    exec_cuda_streams_reset(&s);
    int ev;
    CU_ASSERT(exec_cuda_streams_next_record(&s, &L, 0, 1, &ev, &e) == -1);
    CU_ASSERT(strstr(e.msg, "disagree") != NULL);
    base_error_clear(&e);
    exec_cuda_streams_free(&s);

    /* a wait without any record is refused */
    plan_instr w[1] = {ins(PLAN_WAIT, 0, 3)};
    plan_list L2 = {.n = 1, .ins = w, .nstreams = 1, .streams = names, .nevents = 4};
    plan_set ps2 = {.nlists = 1, .lists = &L2};
    CU_ASSERT(exec_cuda_streams_init(&s, &ps2, 0, &e) == -1);
    CU_ASSERT(strstr(e.msg, "which no instruction of the list records") != NULL);
}

static plan_instr p2p(plan_op op, int stream, int sendrecv)
{
    plan_instr in = ins(op, stream, -1);
    in.sendrecv = sendrecv;
    return in;
}

static void test_sendrecv_spans(void)
{
    /* stream 0: #0 S g1, #1 R g1 | #2 S (alone) | #3 S g2, (#4 record on stream 1), #5 R g2,
     * #6 R g2 | #7 compute | #8 R g3; stream 1: #9 S g3 (same id, other stream: its own span) */
    plan_instr v[10] = {p2p(PLAN_SEND, 0, 1), p2p(PLAN_RECV, 0, 1), p2p(PLAN_SEND, 0, 0),
                        p2p(PLAN_SEND, 0, 2), ins(PLAN_RECORD, 1, 0), p2p(PLAN_RECV, 0, 2),
                        p2p(PLAN_RECV, 0, 2), ins(PLAN_COMPUTE, 0, -1), p2p(PLAN_RECV, 0, 3),
                        p2p(PLAN_SEND, 1, 3)};
    const char *names[2] = {"pp", "other"};
    plan_list L = {.n = 10, .ins = v, .nstreams = 2, .streams = names, .nevents = 1};
    int first[10], last[10];
    plan_set ps = {.nlists = 1, .lists = &L};
    plan_index ix;
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_FATAL(plan_index_build(&ix, &ps, 0, &e) == 0);
    exec_cuda_sendrecv_spans(&ix, first, last);
    plan_index_free(&ix);
    const int wf[10] = {0, 0, 2, 3, -1, 3, 3, -1, 8, 9}, wl[10] = {1, 1, 2, 6, -1, 6, 6, -1, 8, 9};
    for (int i = 0; i < 10; i++) {
        CU_ASSERT_EQUAL(first[i], wf[i]);
        CU_ASSERT_EQUAL(last[i], wl[i]);
    }
}

/* ---------------------------------------------------------------- compiled plans */

static int compile(const char *rel, sched_compilation *c)
{
    sched_compilation_init(c);
    base_error e;
    base_error_clear(&e);
    sched_options o = {0};
    o.allow_oom = true;
    if (sched_compile(c, test_src_path(rel), NULL, NULL, &o, &e)) {
        fprintf(stderr, "\n  %s: %s\n", rel, e.msg);
        return -1;
    }
    return 0;
}

static int head_region_of(const plan_set *p)
{
    for (int r = 0; r < p->nregions; r++)
        if (p->regions[r] && strcmp(p->regions[r], "head") == 0) return r;
    return -1;
}

/* Every collective and transfer of every device has its key, the device is a member with the
 * rank the group gives it, and the keys are sorted and unique. Returns the number of keys. */
static int check_keys(const plan_set *p, int *ngroup_keys, int *np2p_keys, int *nsendrecv)
{
    exec_cuda_comm_key *k = NULL;
    int n = 0;
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_FATAL(exec_cuda_comm_keys(p, head_region_of(p), &k, &n, &e) == 0);
    *ngroup_keys = *np2p_keys = *nsendrecv = 0;
    for (int i = 0; i < n; i++) {
        if (k[i].kind == EXEC_CUDA_COMM_GROUP) {
            (*ngroup_keys)++;
            const plan_group *G = &p->groups[k[i].group];
            CU_ASSERT_EQUAL(k[i].nmembers, G->n);
            for (int m = 0; m < G->n; m++) CU_ASSERT_EQUAL(exec_cuda_comm_rank(&k[i], G->devices[m]), m);
        } else {
            (*np2p_keys)++;
            CU_ASSERT_EQUAL(k[i].nmembers, 2);
            CU_ASSERT_EQUAL(exec_cuda_comm_rank(&k[i], k[i].src), 0);
            CU_ASSERT_EQUAL(exec_cuda_comm_rank(&k[i], k[i].dst), 1);
            CU_ASSERT(k[i].src != k[i].dst);
        }
        for (int j = 0; j < i; j++) {
            /* sorted: groups first by (group, stream), then p2p by (src, dst, streams) */
            bool before = k[j].kind < k[i].kind ||
                          (k[j].kind == k[i].kind && k[j].kind == EXEC_CUDA_COMM_GROUP &&
                           (k[j].group < k[i].group ||
                            (k[j].group == k[i].group && strcmp(k[j].stream, k[i].stream) < 0))) ||
                          (k[j].kind == k[i].kind && k[j].kind == EXEC_CUDA_COMM_P2P &&
                           (k[j].src < k[i].src || (k[j].src == k[i].src && k[j].dst < k[i].dst) ||
                            (k[j].src == k[i].src && k[j].dst == k[i].dst &&
                             (strcmp(k[j].stream, k[i].stream) < 0 ||
                              (!strcmp(k[j].stream, k[i].stream) && strcmp(k[j].stream2, k[i].stream2) < 0)))));
            CU_ASSERT(before);
        }
    }
    for (int d = 0; d < p->ndevices; d++) {
        const plan_list *L = plan_dev_list(p, d);
        for (int i = 0; i < L->n; i++) {
            const plan_instr *in = &L->ins[i];
            const char *s = L->streams[in->stream] ? L->streams[in->stream] : "";
            if (in->op == PLAN_COLL) {
                int at = exec_cuda_comm_find_group(k, n, plan_dev_group(p, d, in), s);
                CU_ASSERT(at >= 0);
                if (at >= 0) CU_ASSERT(exec_cuda_comm_rank(&k[at], d) >= 0);
            } else if (in->op == PLAN_SEND || in->op == PLAN_RECV) {
                int peer = plan_dev_peer(p, d, in);
                const char *ps = exec_cuda_p2p_peer_stream(p, d, i);
                CU_ASSERT_FATAL(ps != NULL);
                int at = in->op == PLAN_SEND ? exec_cuda_comm_find_p2p(k, n, d, peer, s, ps)
                                             : exec_cuda_comm_find_p2p(k, n, peer, d, ps, s);
                CU_ASSERT(at >= 0);
                if (at >= 0) CU_ASSERT_EQUAL(exec_cuda_comm_rank(&k[at], d), in->op == PLAN_SEND ? 0 : 1);
                if (in->sendrecv) (*nsendrecv)++;
            }
        }
    }
    exec_cuda_comm_keys_free(k, n);
    return n;
}

static void test_comm_keys_pp_dp(void)
{
    sched_compilation c;
    if (compile("tests/exec_mpi/programs/gpt_pp2_dp2.yaml", &c)) {
        CU_FAIL("gpt_pp2_dp2 does not compile");
        return;
    }
    int g, pp, sr;
    check_keys(&c.plan, &g, &pp, &sr);
    /* stages on {0, 2} and {1, 3}: the two data-parallel groups reduce gradients; activations go
     * 0 -> 1 and 2 -> 3, gradients back: four directions at least */
    CU_ASSERT(g >= 2);
    CU_ASSERT(pp >= 4);
    bool dir[4][4] = {{false}};
    exec_cuda_comm_key *k;
    int n;
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_FATAL(exec_cuda_comm_keys(&c.plan, head_region_of(&c.plan), &k, &n, &e) == 0);
    for (int i = 0; i < n; i++)
        if (k[i].kind == EXEC_CUDA_COMM_P2P && k[i].src < 4 && k[i].dst < 4) dir[k[i].src][k[i].dst] = true;
    CU_ASSERT(dir[0][1] && dir[1][0] && dir[2][3] && dir[3][2]);
    CU_ASSERT(!dir[0][2] && !dir[0][3] && !dir[1][3] && !dir[2][1]);
    exec_cuda_comm_keys_free(k, n);
    sched_compilation_free(&c);
}

static void test_comm_keys_tp_and_1f1b(void)
{
    sched_compilation c;
    int g, pp, sr;
    if (compile("tests/exec_mpi/programs/gpt_tp2.yaml", &c) == 0) {
        check_keys(&c.plan, &g, &pp, &sr);
        CU_ASSERT(g >= 1); /* the TP group's all-reduces */
        CU_ASSERT_EQUAL(pp, 0);
    } else {
        CU_FAIL("gpt_tp2 does not compile");
    }
    sched_compilation_free(&c);
    if (compile("tests/exec_mpi/programs/gpt4_pp4_1f1b.yaml", &c) == 0) {
        check_keys(&c.plan, &g, &pp, &sr);
        CU_ASSERT(pp >= 6); /* three stage boundaries, both directions */
        /* the sendrecv groups of every device: each a consecutive span on its stream */
        for (int d = 0; d < c.plan.ndevices; d++) {
            const plan_list *L = plan_dev_list(&c.plan, d);
            int *first = calloc((size_t)L->n + 1, sizeof(int)), *last = calloc((size_t)L->n + 1, sizeof(int));
            plan_index ix;
            base_error ie;
            base_error_clear(&ie);
            CU_ASSERT_FATAL(plan_index_build(&ix, &c.plan, c.plan.devices[d].list, &ie) == 0);
            exec_cuda_sendrecv_spans(&ix, first, last);
            plan_index_free(&ix);
            for (int i = 0; i < L->n; i++) {
                const plan_instr *in = &L->ins[i];
                if (in->op != PLAN_SEND && in->op != PLAN_RECV) {
                    CU_ASSERT_EQUAL(first[i], -1);
                    continue;
                }
                CU_ASSERT(first[i] <= i && i <= last[i]);
                for (int j = first[i]; j <= last[i]; j++)
                    if (L->ins[j].stream == in->stream) {
                        CU_ASSERT(L->ins[j].op == PLAN_SEND || L->ins[j].op == PLAN_RECV);
                        CU_ASSERT_EQUAL(L->ins[j].sendrecv, in->sendrecv);
                    }
            }
            free(first);
            free(last);
        }
    } else {
        CU_FAIL("gpt4_pp4_1f1b does not compile");
    }
    sched_compilation_free(&c);
}

/* ---------------------------------------------------------------- the allocator */

static void test_pool_classes(void)
{
    CU_ASSERT_EQUAL(exec_cuda_pool_class(0), 512);
    CU_ASSERT_EQUAL(exec_cuda_pool_class(1), 512);
    CU_ASSERT_EQUAL(exec_cuda_pool_class(512), 512);
    CU_ASSERT_EQUAL(exec_cuda_pool_class(513), 1024);
    CU_ASSERT_EQUAL(exec_cuda_pool_class(3000), 4096);
    CU_ASSERT_EQUAL(exec_cuda_pool_class((size_t)1 << 20), (size_t)1 << 20);
    CU_ASSERT_EQUAL(exec_cuda_pool_class(((size_t)1 << 20) + 1), (size_t)2 << 20);
    CU_ASSERT_EQUAL(exec_cuda_pool_class((size_t)3 << 20), (size_t)4 << 20);
    CU_ASSERT_EQUAL(exec_cuda_pool_class(((size_t)6 << 20) - 5), (size_t)6 << 20);
    for (size_t b = 1; b < ((size_t)9 << 20); b = b * 3 + 7) {
        size_t c = exec_cuda_pool_class(b);
        CU_ASSERT(c >= b);
        CU_ASSERT(c - b < (b <= ((size_t)1 << 20) ? b + 512 : (size_t)2 << 20));
    }
}

/* A fake device: raw memory with a capacity, fences that pass when the "device clock" passes the
 * value it had when they were recorded. */
typedef struct fake {
    size_t cap, used;
    int nlive;
    long clock;         /* the device has done everything recorded before this tick */
    long ticks;         /* host ticks so far */
    int waits, fences;
} fake;

typedef struct fence {
    long at;
} fence;

static int f_alloc(void *ctx, size_t bytes, void **p, base_error *e)
{
    fake *f = ctx;
    if (f->used + bytes > f->cap) return base_errorf(e, "fake out of memory");
    f->used += bytes;
    f->nlive++;
    /* the size in front of the block, so that a free gives it back */
    size_t *q = malloc(bytes + sizeof(size_t) * 2);
    q[0] = bytes;
    *p = q + 2;
    return 0;
}

static void f_free(void *ctx, void *p)
{
    fake *f = ctx;
    size_t *q = (size_t *)p - 2;
    f->used -= q[0];
    f->nlive--;
    free(q);
}

static int f_record(void *ctx, int stream, void **out, base_error *e)
{
    fake *f = ctx;
    fence *x = malloc(sizeof *x);
    x->at = ++f->ticks;
    f->fences++;
    *out = x;
    return 0;
}

static int f_done(void *ctx, void *fe, bool *done, base_error *e)
{
    *done = ((fence *)fe)->at <= ((fake *)ctx)->clock;
    return 0;
}

static int f_wait(void *ctx, void *fe, base_error *e)
{
    fake *f = ctx;
    f->waits++;
    if (f->clock < ((fence *)fe)->at) f->clock = ((fence *)fe)->at;
    return 0;
}

static void f_fence_free(void *ctx, void *fe) { free(fe); }

static void test_pool_reuse_and_fences(void)
{
    fake f = {.cap = (size_t)16 << 20};
    exec_cuda_pool_ops ops = {&f, f_alloc, f_free, f_record, f_done, f_wait, f_fence_free};
    exec_cuda_pool pl;
    exec_cuda_pool_init(&pl, &ops);
    base_error e;
    base_error_clear(&e);
    void *a, *b, *c, *d;
    /* a freed block whose fence has not passed is not handed out again */
    CU_ASSERT_FATAL(exec_cuda_pool_alloc(&pl, 3000, &a, &e) == 0);
    CU_ASSERT(exec_cuda_pool_free(&pl, a, 3000, 0, &e) == 0);
    CU_ASSERT_FATAL(exec_cuda_pool_alloc(&pl, 4000, &b, &e) == 0);
    CU_ASSERT(b != a);
    CU_ASSERT_EQUAL(pl.raw_allocs, 2);
    /* once the device passes the free, it is */
    f.clock = f.ticks;
    CU_ASSERT_FATAL(exec_cuda_pool_alloc(&pl, 2049, &c, &e) == 0);
    CU_ASSERT(c == a);
    CU_ASSERT_EQUAL(pl.raw_allocs, 2);
    CU_ASSERT_EQUAL(pl.reuses, 1);
    /* a block of another class is never handed out for a request */
    CU_ASSERT(exec_cuda_pool_free(&pl, c, 2049, -1, &e) == 0); /* no fence: free at once */
    CU_ASSERT_FATAL(exec_cuda_pool_alloc(&pl, 100, &d, &e) == 0);
    CU_ASSERT(d != c);
    /* figures: in use b (4096) + d (512); requested 4000 + 100; reserved 3 blocks */
    CU_ASSERT_DOUBLE_EQUAL(pl.in_use, 4096 + 512, 0);
    CU_ASSERT_DOUBLE_EQUAL(pl.requested, 4100, 0);
    CU_ASSERT_DOUBLE_EQUAL(pl.reserved, 4096 + 4096 + 512, 0);
    CU_ASSERT_DOUBLE_EQUAL(pl.peak_in_use, 4096 + 4096, 0);
    CU_ASSERT_DOUBLE_EQUAL(pl.peak_requested, 4000 + 2049, 0); /* b and c */
    CU_ASSERT(exec_cuda_pool_free(&pl, b, 4000, 0, &e) == 0);
    CU_ASSERT(exec_cuda_pool_free(&pl, d, 100, 0, &e) == 0);
    exec_cuda_pool_reset_peaks(&pl);
    CU_ASSERT_DOUBLE_EQUAL(pl.peak_in_use, 0, 0);
    exec_cuda_pool_destroy(&pl);
    CU_ASSERT_EQUAL(f.nlive, 0);
    CU_ASSERT_EQUAL(f.used, 0);
}

static void test_pool_out_of_memory(void)
{
    /* 10 MiB of device memory: two 4 MiB blocks fit, a third does not */
    fake f = {.cap = (size_t)10 << 20};
    exec_cuda_pool_ops ops = {&f, f_alloc, f_free, f_record, f_done, f_wait, f_fence_free};
    exec_cuda_pool pl;
    exec_cuda_pool_init(&pl, &ops);
    base_error e;
    base_error_clear(&e);
    const size_t M = (size_t)1 << 20;
    void *a, *b, *c;
    CU_ASSERT_FATAL(exec_cuda_pool_alloc(&pl, 3 * M + 1, &a, &e) == 0);
    CU_ASSERT_FATAL(exec_cuda_pool_alloc(&pl, 4 * M, &b, &e) == 0);
    CU_ASSERT(exec_cuda_pool_free(&pl, a, 3 * M + 1, 0, &e) == 0);
    /* the same class, pending: memory is short, so the pool waits for the fence and reuses */
    CU_ASSERT_FATAL(exec_cuda_pool_alloc(&pl, 4 * M, &c, &e) == 0);
    CU_ASSERT(c == a);
    CU_ASSERT_EQUAL(f.waits, 1);
    /* another class, with an idle 4 MiB block: the cache is emptied to make room for 6 MiB */
    CU_ASSERT(exec_cuda_pool_free(&pl, c, 4 * M, 0, &e) == 0);
    void *d;
    CU_ASSERT_FATAL(exec_cuda_pool_alloc(&pl, 5 * M, &d, &e) == 0);
    CU_ASSERT_EQUAL(pl.nidle, 0);
    CU_ASSERT_DOUBLE_EQUAL(pl.reserved, (double)(4 * M + 6 * M), 0);
    /* and when nothing can be given back, the error says how much was asked */
    void *x;
    CU_ASSERT(exec_cuda_pool_alloc(&pl, 2 * M, &x, &e) == -1);
    CU_ASSERT(strstr(e.msg, "fake out of memory") != NULL && strstr(e.msg, "2.00 MiB") != NULL);
    base_error_clear(&e);
    CU_ASSERT(exec_cuda_pool_free(&pl, b, 4 * M, -1, &e) == 0);
    CU_ASSERT(exec_cuda_pool_free(&pl, d, 5 * M, -1, &e) == 0);
    exec_cuda_pool_destroy(&pl);
    CU_ASSERT_EQUAL(f.nlive, 0);
}

int piper_tests_register(void)
{
    static const test_case cases[] = {
        {"record/wait map to one CUDA event per record", test_streams_events},
        {"sendrecv groups are consecutive spans", test_sendrecv_spans},
        {"communicator keys of PP x DP", test_comm_keys_pp_dp},
        {"communicator keys of TP and 1F1B", test_comm_keys_tp_and_1f1b},
        {"allocator size classes", test_pool_classes},
        {"allocator reuses blocks once their fence passed", test_pool_reuse_and_fences},
        {"allocator waits and trims when memory runs out", test_pool_out_of_memory},
        {NULL, NULL},
    };
    return test_add_suite("exec cuda runtime (host side)", cases);
}
