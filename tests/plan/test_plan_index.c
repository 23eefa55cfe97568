/* test_plan_index.c — the index of a list (plan.h, plan_index): stream queues, wait targets,
 * p2p runs, collective sequence numbers and the host's blocking points of a list built by hand,
 * whose answers are written out below; every error it reports; and the invariants of the index of
 * every golden plan (the .plan files of tests/golden). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_builder.h"
#include "tests/testutil.h"

/* Streams c (0), pp (1), dp (2) of one list that devices 0 and 1 share:
 *   #0  c  F mb0            #7  c  record e0        #14 dp grad_norm compute
 *   #1  c  record e0        #8  dp wait e0          #15 c  record e2
 *   #2  pp wait e0          #9  dp coll slot 0      #16 dp coll slot 1
 *   #3  pp send  sr=7       #10 dp coll slot 1      #17 c  grad_norm compute
 *   #4  pp recv  sr=7       #11 c  wait e1          #18 c  F mb1 (not a new micro-batch)
 *   #5  pp send  (alone)    #12 pp record e1        #19 dp recv sr=7 (other stream: own run)
 *   #6  dp coll slot 0      #13 c  F mb1
 * queues: c = 0 1 7 11 13 15 17 18; pp = 2 3 4 5 12; dp = 6 8 9 10 14 16 19.
 * waits: #2 -> #1, #8 -> #7 (the latest record before it), #11 -> #12 (none before: the first).
 * runs: #3 (2), #5 (1), #19 (1). collectives: slot 0: #6 0, #9 1; slot 1: #10 0, #16 1.
 * blocking points: p2p at #3, #5, #19; batch at #12 (before mb1's first forward); norm at #16
 * (#14's next collective on dp, #15 on c in between) and #17 (its stream computes next). */
static void build_list(plan_builder *b, plan_set *p)
{
    pb_init(b, p, 2, 1);
    int c = pb_stream(b, 0, "c"), pp = pb_stream(b, 0, "pp"), dp = pb_stream(b, 0, "dp");
    int norm = pb_kernel_id(b, "aux.grad_norm");
    pb_compute(b, 0, c, PLAN_PASS_F, -1, 0, 0);
    pb_record(b, 0, c, 0);
    pb_wait(b, 0, pp, 0);
    pb_at(b, 0, pb_send(b, 0, pp, 1, 1, 8, -1))->sendrecv = 7;
    pb_at(b, 0, pb_recv(b, 0, pp, 1, 2, 8, -1))->sendrecv = 7;
    pb_send(b, 0, pp, 1, 3, 8, -1);
    pb_coll(b, 0, dp, PLAN_ALL_REDUCE, 0, 4, -1);
    pb_record(b, 0, c, 0);
    pb_wait(b, 0, dp, 0);
    pb_coll(b, 0, dp, PLAN_ALL_REDUCE, 0, 4, -1);
    pb_coll(b, 0, dp, PLAN_ALL_GATHER, 1, 4, -1);
    pb_wait(b, 0, c, 1);
    pb_record(b, 0, pp, 1);
    pb_compute(b, 0, c, PLAN_PASS_F, -1, 1, 0);
    pb_at(b, 0, pb_compute(b, 0, dp, PLAN_PASS_AUX, -1, -1, -1))->kid = norm;
    pb_record(b, 0, c, 2);
    pb_coll(b, 0, dp, PLAN_ALL_REDUCE, 1, 4, -1);
    pb_at(b, 0, pb_compute(b, 0, c, PLAN_PASS_AUX, -1, -1, -1))->kid = norm;
    pb_compute(b, 0, c, PLAN_PASS_F, -1, 1, 0);
    pb_at(b, 0, pb_recv(b, 0, dp, 1, 4, 8, -1))->sendrecv = 7;
    pb_group(b, "g0", 2, (int32_t[]){0, 1});
    pb_group(b, "g1", 2, (int32_t[]){0, 1});
    pb_device(b, 0, 0, 0, 2, (int32_t[]){0, 1});
    pb_device(b, 1, 0, 0, 2, (int32_t[]){0, 1});
}

static void test_known_list(void)
{
    plan_builder b;
    plan_set p;
    build_list(&b, &p);
    plan_index ix;
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(plan_index_build(&ix, &p, 0, &e), 0);
    CU_ASSERT_EQUAL(ix.n, 20);
    CU_ASSERT_EQUAL(ix.nstreams, 3);
    static const int32_t qc[] = {0, 1, 7, 11, 13, 15, 17, 18}, qpp[] = {2, 3, 4, 5, 12}, qdp[] = {6, 8, 9, 10, 14, 16, 19};
    const int32_t *want[3] = {qc, qpp, qdp};
    const int wlen[3] = {8, 5, 7};
    for (int s = 0; s < 3; s++) {
        int len;
        const int32_t *q = plan_index_stream(&ix, s, &len);
        CU_ASSERT_EQUAL(len, wlen[s]);
        for (int k = 0; k < len && k < wlen[s]; k++) {
            CU_ASSERT_EQUAL(q[k], want[s][k]);
            CU_ASSERT_EQUAL(ix.spos[q[k]], k);
        }
    }
    static const int32_t wait[20] = {-1, -1, 1, -1, -1, -1, -1, -1, 7, -1, -1, 12, -1, -1, -1, -1, -1, -1, -1, -1};
    static const int32_t run[20] = {0, 0, 0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    static const int32_t seq[20] = {-1, -1, -1, -1, -1, -1, 0, -1, -1, 1, 0, -1, -1, -1, -1, -1, 1, -1, -1, -1};
    uint8_t block[20] = {0};
    block[3] = block[5] = block[19] = PLAN_BLOCK_P2P;
    block[12] = PLAN_BLOCK_BATCH;
    block[16] = block[17] = PLAN_BLOCK_NORM;
    for (int i = 0; i < 20; i++) {
        CU_ASSERT_EQUAL(ix.wait[i], wait[i]);
        CU_ASSERT_EQUAL(ix.run[i], run[i]);
        CU_ASSERT_EQUAL(ix.coll_seq[i], seq[i]);
        CU_ASSERT_EQUAL(ix.block[i], block[i]);
    }
    CU_ASSERT_EQUAL(ix.slot_ncoll[0], 2);
    CU_ASSERT_EQUAL(ix.slot_ncoll[1], 2);
    CU_ASSERT_EQUAL(ix.early_wait, 11);
    CU_ASSERT_EQUAL(ix.max_run, 2);

    /* distinct groups per slot: the list's numbering holds; one group in both slots: counted
     * across them in launch order (#6 0, #9 1, #10 2, #16 3) */
    CU_ASSERT_PTR_NULL(plan_index_device_coll_seq(&ix, &p, 0));
    p.devices[1].group_slots[1] = 0;
    int32_t *merged = plan_index_device_coll_seq(&ix, &p, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(merged);
    CU_ASSERT_EQUAL(merged[6], 0);
    CU_ASSERT_EQUAL(merged[9], 1);
    CU_ASSERT_EQUAL(merged[10], 2);
    CU_ASSERT_EQUAL(merged[16], 3);
    CU_ASSERT_EQUAL(merged[0], -1);
    free(merged);
    plan_index_free(&ix);
    CU_ASSERT_PTR_NULL(ix.sidx);
    plan_index_free(&ix); /* twice is harmless */

    /* the same list, its micro-batch 1 starting at #0 instead: no batch point before it */
    p.lists[0].ins[0].mb = 1;
    CU_ASSERT_EQUAL_FATAL(plan_index_build(&ix, &p, 0, &e), 0);
    CU_ASSERT_EQUAL(ix.block[12], 0);
    for (int i = 0; i < 20; i++) CU_ASSERT_EQUAL(ix.block[i] & PLAN_BLOCK_BATCH, 0);
    plan_index_free(&ix);
    pb_done(&b);
    plan_free(&p);
}

/* Builds the index of list l, expecting failure with a message containing `want`. */
static void expect_error(const plan_set *p, int l, const char *want)
{
    plan_index ix;
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(plan_index_build(&ix, p, l, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, want);
    CU_ASSERT_PTR_NULL(ix.soff);
    CU_ASSERT_PTR_NULL(ix.wait);
    plan_index_free(&ix);
}

static void test_errors(void)
{
    plan_builder b;
    plan_set p;
    pb_init(&b, &p, 2, 2);
    int s0 = pb_stream(&b, 0, "x"), s1 = pb_stream(&b, 0, "y");
    /* waits on events 2 and 1, neither recorded: the smaller event is named, at its first wait */
    pb_wait(&b, 0, s0, 2);
    pb_wait(&b, 0, s1, 1);
    pb_wait(&b, 0, s0, 1);
    pb_record(&b, 0, s1, 0);
    pb_device(&b, 0, 1, 0, 0, NULL);
    pb_device(&b, 1, 0, 0, 0, NULL);
    expect_error(&p, 0, "device 1 (list 0) #1 wait s=y event=1: waits for event 1, which no instruction of the list "
                        "records; record it on the stream that produces what this wait needs");
    /* no device runs the list: the message names the list alone */
    p.devices[1].list = 1;
    expect_error(&p, 0, "list 0 #1 wait s=y event=1: waits for event 1");
    p.devices[1].list = 0;
    /* fields out of range */
    p.lists[0].ins[3].event = 5;
    expect_error(&p, 0, "list 0 instruction 3 (record) has an invalid event field; the compiler built an invalid plan");
    p.lists[0].ins[3].stream = 2;
    expect_error(&p, 0, "list 0 instruction 3 runs on stream 2 of 2; the compiler built an invalid plan");
    p.lists[0].n = -1;
    expect_error(&p, 0, "list 0 has a negative count or a missing array");
    expect_error(&p, 2, "list 2 is not one of the plan's 2 lists");
    pb_done(&b);
    plan_free(&p);

    /* sendrecv groups that come back after other instructions: group 4 on y, groups 6 and 5 on x;
     * x's smaller id is named, at its second run */
    pb_init(&b, &p, 2, 1);
    s0 = pb_stream(&b, 0, "x"), s1 = pb_stream(&b, 0, "y");
    int sr[][2] = {{s1, 4}, {s0, 6}, {s0, 5}, {s1, -1}, {s0, -1}, {s1, 4}, {s0, 6}, {s0, 5}, {s0, 5}};
    for (size_t k = 0; k < BASE_COUNT(sr); k++) {
        if (sr[k][1] < 0) pb_add(&b, 0, PLAN_NOP, sr[k][0]);
        else pb_at(&b, 0, pb_send(&b, 0, sr[k][0], 1, (int)k, 8, -1))->sendrecv = sr[k][1];
    }
    pb_group(&b, "g", 2, (int32_t[]){0, 1});
    pb_device(&b, 0, 0, 0, 0, NULL);
    pb_device(&b, 1, 0, -1, 0, NULL);
    expect_error(&p, 0, "device 0 (list 0) #7 send s=x peer=1 tag=7: sendrecv group 5 already appeared at #2, with "
                        "other instructions of the stream in between; a group's sends and receives must be "
                        "consecutive on their stream");
    /* a collective on a slot the list does not have */
    p.lists[0].ins[3].op = PLAN_COLL;
    p.lists[0].ins[3].group = 0;
    expect_error(&p, 0, "list 0 instruction 3 (coll) has an invalid group field");
    pb_done(&b);
    plan_free(&p);
}

/* The invariants of one list's index, on a plan read from a file. */
static void check_invariants(const plan_set *p, int l, const char *name)
{
    const plan_list *L = &p->lists[l];
    plan_index ix;
    base_error e;
    base_error_clear(&e);
    int rc = plan_index_build(&ix, p, l, &e);
    if (rc) fprintf(stderr, "\n  %s list %d: %s\n", name, l, e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    /* the queues partition the list, each in launch order, and spos inverts them */
    uint8_t *seen = calloc((size_t)L->n + 1, 1);
    int total = 0, bad = 0;
    for (int s = 0; s < L->nstreams; s++) {
        int len;
        const int32_t *q = plan_index_stream(&ix, s, &len);
        for (int k = 0; k < len; k++) {
            bad += L->ins[q[k]].stream != s || ix.spos[q[k]] != k || seen[q[k]]++ || (k && q[k] <= q[k - 1]);
            total++;
        }
    }
    CU_ASSERT_EQUAL(total, L->n);
    /* waits: a record of the same event on another stream, earlier in launch order (no golden plan
     * waits ahead of its record) */
    int nwait = 0, nrun = 0, np2p = 0, ncoll = 0;
    int32_t *seq = calloc((size_t)L->ngroup_slots + 1, sizeof *seq);
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        if (in->op == PLAN_WAIT) {
            int r = ix.wait[i];
            bad += r < 0 || r >= i || L->ins[r].op != PLAN_RECORD || L->ins[r].event != in->event ||
                   L->ins[r].stream == in->stream;
            /* ... and the latest such record before the wait */
            for (int j = r + 1; r >= 0 && j < i; j++) bad += L->ins[j].op == PLAN_RECORD && L->ins[j].event == in->event;
            nwait++;
        } else {
            bad += ix.wait[i] != -1;
        }
        /* collectives: numbered 0, 1, ... per slot in launch order */
        if (in->op == PLAN_COLL) bad += ix.coll_seq[i] != seq[in->group]++, ncoll++;
        else bad += ix.coll_seq[i] != -1;
        /* runs: members consecutive on their stream, sharing their head's nonzero id; p2p blocking
         * points exactly at the heads */
        if (in->op == PLAN_SEND || in->op == PLAN_RECV) {
            np2p++;
            if (ix.run[i] > 0) {
                nrun += ix.run[i];
                const int32_t *q = ix.sidx + ix.soff[in->stream] + ix.spos[i];
                for (int k = 1; k < ix.run[i]; k++)
                    bad += (L->ins[q[k]].op != PLAN_SEND && L->ins[q[k]].op != PLAN_RECV) || !in->sendrecv ||
                           L->ins[q[k]].sendrecv != in->sendrecv || ix.run[q[k]] != 0;
            }
            bad += !(ix.block[i] & PLAN_BLOCK_P2P) != !ix.run[i];
        } else {
            bad += ix.run[i] != 0 || (ix.block[i] & PLAN_BLOCK_P2P);
        }
    }
    for (int s = 0; s < L->ngroup_slots; s++) bad += seq[s] != ix.slot_ncoll[s];
    if (bad) fprintf(stderr, "\n  %s list %d: %d violations\n", name, l, bad);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(nrun, np2p);
    CU_ASSERT_EQUAL(ix.early_wait, -1);
    CU_ASSERT(nwait > 0 || ncoll > 0 || np2p > 0); /* a plan of one stream would prove little */
    free(seen);
    free(seq);
    plan_index_free(&ix);
}

static void test_golden_plans(void)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", test_src_path("tests/golden"));
    DIR *dp = opendir(path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dp);
    int nplans = 0;
    for (struct dirent *de; (de = readdir(dp));) {
        size_t n = strlen(de->d_name);
        if (n < 6 || strcmp(de->d_name + n - 5, ".plan")) continue;
        char file[4400]; /* the directory and a file name of up to 255 bytes */
        snprintf(file, sizeof file, "%s/%s", path, de->d_name);
        plan_set p;
        base_error e;
        base_error_clear(&e);
        int rc = plan_read_file(&p, file, &e);
        if (rc) fprintf(stderr, "\n  %s: %s\n", file, e.msg);
        CU_ASSERT_EQUAL(rc, 0);
        if (rc == 0) {
            for (int l = 0; l < p.nlists; l++) check_invariants(&p, l, de->d_name);
            nplans++;
        }
        plan_free(&p);
    }
    closedir(dp);
    CU_ASSERT(nplans >= 3);
}

int piper_tests_register(void)
{
    static const test_case cases[] = {
        {"a list with known queues, targets, runs, numbers and blocking points", test_known_list},
        {"errors", test_errors},
        {"golden plans: invariants", test_golden_plans},
        {NULL, NULL}};
    return test_add_suite("plan index", cases);
}
