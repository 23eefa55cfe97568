/* backend_mpi.c — the MPI side of the CPU executor: one communicator per (group, stream) and one
 * for point-to-point traffic, created in the same order on every rank; sends and receives with
 * the plan's tags (MPI_Isend / MPI_Irecv); collectives with MPI's non-blocking calls on the
 * communicator of their group and stream; MPI_Test progress; and the exec_backend that the
 * interpreter drives.
 *
 * Why one communicator per (group, stream): MPI matches collectives per communicator in issue
 * order, as NCCL does. Members issue a group's collectives in the same order on each stream (the
 * compiler's check proves it), but two streams' collectives on one group may interleave
 * differently on different members; on separate communicators they cannot be mismatched.
 * Point-to-point traffic needs no such care: every transfer has its own tag, so one communicator
 * serves all streams (a sender's and a receiver's streams may even have different names).
 *
 * A bucket's collectives run one call per tensor, where the tensor lives (requests tested
 * together): all-reduces in place, ZeRO all-gathers in place or into the plan's gathered buffer,
 * ZeRO reduce-scatters into a scratch of the rank's pieces, copied (ZeRO-2/3: added) into place
 * when MPI reports completion. No staging copy of a whole bucket, which the plan does not size.
 * A fused activation collective (fuse_collectives) runs the same way: one call per piece, the
 * pieces' requests tested together. */
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_exec.h"

#define REDUCE_STREAM "#reduce"

/* ---------------------------------------------------------------- communicators */

typedef struct comm_key {
    int group;
    const char *stream;
    bool *users;        /* [device] */
} comm_key;

static int key_cmp(const void *a, const void *b)
{
    const comm_key *x = a, *y = b;
    if (x->group != y->group) return x->group < y->group ? -1 : 1;
    return strcmp(x->stream, y->stream);
}

static int key_find(const comm_key *k, int n, int group, const char *stream)
{
    for (int i = 0; i < n; i++)
        if (k[i].group == group && strcmp(k[i].stream, stream) == 0) return i;
    return -1;
}

static int comm_find(const exec_cpu *c, int group, const char *stream)
{
    for (int i = 0; i < c->ncomm; i++)
        if (c->comm[i].group == group && strcmp(c->comm[i].stream, stream) == 0) return i;
    return -1;
}

/* Every (group, stream) any device uses, with its users; each must be used by exactly the
 * group's members, else some member would wait on a communicator others never use. */
static int collect_keys(const exec_cpu *c, comm_key **out, int *nout, base_error *e)
{
    const plan_set *p = c->p;
    BASE_VEC(comm_key) k = {0};
    for (int d = 0; d < p->ndevices; d++) {
        const plan_list *L = plan_dev_list(p, d);
        for (int i = 0; i < L->n; i++) {
            const plan_instr *in = &L->ins[i];
            int g = -1;
            const char *s = NULL;
            if (in->op == PLAN_COLL) {
                g = plan_dev_group(p, d, in);
                s = L->streams[in->stream] ? L->streams[in->stream] : "";
            } else if (in->op == PLAN_COMPUTE && in->tp_group >= 0 && in->region >= 0 &&
                       in->region == c->bd.head_region && in->pass == PLAN_PASS_F) {
                g = p->devices[d].group_slots[in->tp_group];
                s = REDUCE_STREAM;
            } else {
                continue;
            }
            int at = key_find(k.v, (int)k.n, g, s);
            if (at < 0) {
                comm_key nk = {g, s, base_xcalloc((size_t)p->ndevices, sizeof(bool))};
                BASE_VEC_PUSH(k, nk);
                at = (int)k.n - 1;
            }
            k.v[at].users[d] = true;
        }
    }
    if (k.n) qsort(k.v, k.n, sizeof *k.v, key_cmp);
    for (size_t i = 0; i < k.n; i++) {
        const plan_group *G = &p->groups[k.v[i].group];
        int members = 0;
        for (int m = 0; m < G->n; m++) {
            members += k.v[i].users[G->devices[m]];
            if (!k.v[i].users[G->devices[m]]) {
                base_errorf(e, "group %d (%s) has collectives on stream %s, but its member device %d "
                               "issues none there; the plan is inconsistent, compile it again",
                            k.v[i].group, G->name ? G->name : "?", k.v[i].stream, G->devices[m]);
                goto fail;
            }
        }
        int users = 0;
        for (int d = 0; d < p->ndevices; d++) users += k.v[i].users[d];
        if (users != members) {
            base_errorf(e, "group %d (%s) is used on stream %s by a device outside it", k.v[i].group,
                        G->name ? G->name : "?", k.v[i].stream);
            goto fail;
        }
    }
    *out = k.v;
    *nout = (int)k.n;
    return 0;
fail:
    for (size_t i = 0; i < k.n; i++) free(k.v[i].users);
    free(k.v);
    return -1;
}

/* ---------------------------------------------------------------- requests */

static int req_new(exec_cpu *c, int instr)
{
    for (int i = 0; i < c->nreq; i++)
        if (!c->req[i].used) {
            memset(&c->req[i], 0, sizeof c->req[i]);
            c->req[i].used = true;
            c->req[i].instr = instr;
            return i;
        }
    if (c->nreq == c->capreq) {
        c->capreq = c->capreq ? 2 * c->capreq : 16;
        c->req = base_xrealloc(c->req, (size_t)c->capreq * sizeof *c->req);
    }
    memset(&c->req[c->nreq], 0, sizeof c->req[c->nreq]);
    c->req[c->nreq].used = true;
    c->req[c->nreq].instr = instr;
    return c->nreq++;
}

static void req_done(exec_cpu *c, int r)
{
    cpu_req *R = &c->req[r];
    if (R->staging && R->staging_owned) exec_cpu_scratch_free(c, R->staging, (size_t)R->staging_bytes);
    R->staging = NULL;
    free(R->counts);
    R->counts = NULL;
    free(R->more);
    R->more = NULL;
    R->nmore = 0;
    R->used = false;
}

static int int_count(int64_t n, const char *what, base_error *e)
{
    if (n < 0 || n > INT_MAX)
        return base_errorf(e, "%s of %lld elements is larger than one MPI call moves (INT_MAX); "
                              "use smaller micro-batches or buckets",
                           what, (long long)n);
    return 0;
}

/* ---------------------------------------------------------------- the backend */

static int be_alloc(void *ctx, int instr, int buf, int64_t plan_bytes, base_error *e)
{
    (void)instr;
    return exec_cpu_alloc(ctx, buf, plan_bytes, e);
}

static int be_release(void *ctx, int instr, int buf, base_error *e)
{
    (void)instr;
    return exec_cpu_release(ctx, buf, e);
}

static int be_compute(void *ctx, int instr, const plan_instr *in, base_error *e)
{
    return exec_cpu_compute(ctx, instr, in, e);
}

static int be_p2p(void *ctx, int instr, const plan_instr *in, int peer, int *req, base_error *e)
{
    exec_cpu *c = ctx;
    char *p = exec_cpu_buf(c, in->buf, in->op == PLAN_SEND ? "the data sent" : "the receive buffer", e);
    if (!p) return -1;
    int64_t bytes = c->bd.buf[in->buf].bytes;
    if (int_count(bytes, "a transfer", e)) return -1;
    if (peer < 0 || peer >= c->world)
        return base_errorf(e, "peer device %d has no rank: %d ranks run; start one rank per device",
                           peer, c->world);
    int r = req_new(c, instr);
    cpu_req *R = &c->req[r];
    c->comm_bytes += (double)bytes;
    c->plan_comm_bytes += (double)in->bytes;
    if (in->op == PLAN_SEND) {
        EXEC_MPI(MPI_Isend(p, (int)bytes, MPI_BYTE, peer, in->tag, c->p2p, &R->r), e);
    } else {
        R->expect = bytes;
        EXEC_MPI(MPI_Irecv(p, (int)bytes, MPI_BYTE, peer, in->tag, c->p2p, &R->r), e);
    }
    *req = r;
    return 0;
}

static char *seg_base(exec_cpu *c, const exec_seg *s, bool grads, base_error *e)
{
    /* ZeRO-3 gathers read the device's piece of the parameters; coll_finish writes the gathered
     * buffer itself */
    const exec_region *R = &c->bd.reg[s->region];
    if (grads) return exec_cpu_buf(c, s->buf >= 0 ? s->buf : R->grad_buf, "the gradients", e);
    return cpu_region_params(c, R, exec_cpu_buf(c, R->param_buf, "the parameters", e));
}

static int be_coll(void *ctx, int instr, const plan_instr *in, int group, int *req, base_error *e)
{
    exec_cpu *c = ctx;
    exec_coll *C = &c->bd.coll[instr];
    (void)group;
    if (C->comm < 0) return base_errorf(e, "collective without a communicator");
    MPI_Comm comm = c->comm[C->comm].comm;
    const size_t es = c->es;
    int r = req_new(c, instr);
    cpu_req *R = &c->req[r];
    *req = r;
    c->plan_comm_bytes += (double)in->bytes;
    switch (C->kind) {
    case EXEC_COLL_SCALAR:
        c->comm_bytes += (double)sizeof c->norm_sq;
        EXEC_MPI(MPI_Iallreduce(MPI_IN_PLACE, &c->norm_sq, 1, MPI_DOUBLE, MPI_SUM, comm, &R->r), e);
        return 0;
    case EXEC_COLL_ACT: {
        /* one MPI call per piece, all started here and completed together (be_test): a fused
         * collective's pieces are separate plan buffers, and packing them into one staging
         * buffer would take memory the plan does not size (sched/sizes.c counts the members'
         * buffers only) and change MPI's count, hence its algorithm and summation order. Per
         * piece, the call is the unfused member's call, so a fused run is the unfused run bit
         * for bit. The shapes are the binding's (bind.c); an all-to-all's blocks must be whole
         * elements here. */
        const int g = C->gsize;
        if (C->npiece > 1) R->more = base_xcalloc((size_t)(C->npiece - 1), sizeof *R->more);
        for (int k = 0; k < C->npiece; k++) {
            const exec_piece *P = &C->piece[k];
            char *ip = exec_cpu_buf(c, P->in, "the collective's input", e);
            char *op = ip ? exec_cpu_buf(c, P->out, "the collective's output", e) : NULL;
            if (!op) return -1;
            const int64_t n = P->in_bytes / (int64_t)es, no = P->out_bytes / (int64_t)es;
            if (int_count(n > no ? n : no, "a collective", e)) return -1;
            /* the plan's bytes of an activation collective: the larger side (an all-gather's
             * output, a reduce-scatter's input) */
            c->comm_bytes += (double)(n > no ? n : no) * (double)es;
            MPI_Request *q = k == 0 ? &R->r : &R->more[R->nmore++];
            switch ((plan_coll)in->coll) {
            case PLAN_ALL_REDUCE:
                EXEC_MPI(MPI_Iallreduce(ip == op ? MPI_IN_PLACE : ip, op, (int)n, c->mdt, MPI_SUM,
                                        comm, q), e);
                break;
            case PLAN_REDUCE_SCATTER:
                EXEC_MPI(MPI_Ireduce_scatter_block(ip, op, (int)no, c->mdt, MPI_SUM, comm, q), e);
                break;
            case PLAN_ALL_GATHER:
                EXEC_MPI(MPI_Iallgather(ip, (int)n, c->mdt, op, (int)n, c->mdt, comm, q), e);
                break;
            case PLAN_ALL_TO_ALL:
                if (n % g)
                    return base_errorf(e, "all-to-all of %lld elements over %d ranks",
                                       (long long)n, g);
                if (ip == op)
                    return base_errorf(e, "an all-to-all in place; the plan must give it an "
                                          "output buffer");
                EXEC_MPI(MPI_Ialltoall(ip, (int)(n / g), c->mdt, op, (int)(n / g), c->mdt, comm, q),
                         e);
                break;
            default:
                return base_errorf(e, "%s of activations is not supported by the CPU executor",
                                   plan_coll_name((plan_coll)in->coll));
            }
        }
        return 0;
    }
    case EXEC_COLL_GRAD_SUM: {
        /* each segment summed in place where it lives, as NCCL does a bucket's tensors in one
         * group: no staging copy of the bucket (which the plan does not size) */
        if (C->nseg > 1) R->more = base_xcalloc((size_t)(C->nseg - 1), sizeof *R->more);
        for (int s = 0; s < C->nseg; s++) {
            const exec_seg *S = &C->seg[s];
            if (int_count(S->n, "a gradient bucket's tensor", e)) return -1;
            char *b = seg_base(c, S, true, e);
            if (!b) return -1;
            c->comm_bytes += (double)S->n * (double)es;
            MPI_Request *q = s == 0 ? &R->r : &R->more[R->nmore++];
            EXEC_MPI(MPI_Iallreduce(MPI_IN_PLACE, b + S->off * es, (int)S->n, c->mdt, MPI_SUM, comm, q), e);
        }
        return 0;
    }
    case EXEC_COLL_GRAD_SCATTER:
    case EXEC_COLL_PARAM_GATHER: {
        /* one call per segment, on the tensor where it lives: a segment's elements are its
         * ranks' pieces one after the other (exec_seg_piece), so MPI_Ireduce_scatter and
         * MPI_Iallgatherv take it as it is, with each rank's count and no padding; what moves
         * is what the plan counts. A reduce-scatter receives this rank's pieces into a scratch
         * of their size (copied, or under ZeRO-2/3 added, into place when it completes); a
         * gather writes in place, or into the plan's gathered buffer (ZeRO-3) */
        const int g = C->gsize;
        const bool grads = C->kind == EXEC_COLL_GRAD_SCATTER;
        R->counts = base_xcalloc((size_t)2 * (size_t)g * (size_t)C->nseg + 1, sizeof *R->counts);
        if (C->nseg > 1) R->more = base_xcalloc((size_t)(C->nseg - 1), sizeof *R->more);
        int64_t mine = 0;
        for (int s = 0; s < C->nseg; s++) {
            int64_t lo, hi;
            exec_seg_piece(&c->bd.reg[C->seg[s].region], &C->seg[s], C->grank, g, &lo, &hi);
            mine += hi - lo;
        }
        if (grads && in->buf >= 0) { /* the plan's receive buffer */
            if (!(R->staging = exec_cpu_buf(c, in->buf, "the reduce-scatter's receive buffer", e)))
                return -1;
            R->staging_owned = false;
        } else if (grads) {
            R->staging_bytes = mine * (int64_t)es;
            R->staging = exec_cpu_scratch(c, (size_t)R->staging_bytes);
            R->staging_owned = true;
        }
        int64_t moff = 0, outoff = 0;
        for (int s = 0; s < C->nseg; s++) {
            const exec_seg *S = &C->seg[s];
            int *cnt = R->counts + (size_t)2 * (size_t)g * (size_t)s, *dsp = cnt + g;
            int64_t total = 0;
            for (int k = 0; k < g; k++) {
                int64_t lo, hi;
                exec_seg_piece(&c->bd.reg[S->region], S, k, g, &lo, &hi);
                if (int_count(total + (hi - lo), "a ZeRO bucket's tensor", e)) return -1;
                cnt[k] = (int)(hi - lo);
                dsp[k] = (int)(lo - S->off);
                total += hi - lo;
            }
            c->comm_bytes += (double)total * (double)es;
            MPI_Request *q = s == 0 ? &R->r : &R->more[R->nmore++];
            char *b = seg_base(c, S, grads, e);
            if (!b) return -1;
            if (grads) {
                EXEC_MPI(MPI_Ireduce_scatter(b + S->off * es, R->staging + moff * es, cnt, c->mdt, MPI_SUM,
                                             comm, q), e);
                moff += cnt[C->grank];
            } else if (C->out >= 0) {
                char *o = exec_cpu_buf(c, C->out, "the gathered parameters", e);
                if (!o) return -1;
                EXEC_MPI(MPI_Iallgatherv(b + (S->off + dsp[C->grank]) * es, cnt[C->grank], c->mdt,
                                         o + outoff * es, cnt, dsp, c->mdt, comm, q), e);
            } else {
                EXEC_MPI(MPI_Iallgatherv(MPI_IN_PLACE, 0, c->mdt, b + S->off * es, cnt, dsp, c->mdt,
                                         comm, q), e);
            }
            outoff += S->n;
        }
        return 0;
    }
    default: return base_errorf(e, "collective the executor did not resolve");
    }
}

/* Finishes a completed collective: a reduce-scatter's pieces go into place (added into the kept
 * piece under ZeRO-2/3). */
static int coll_finish(exec_cpu *c, cpu_req *R, base_error *e)
{
    const exec_coll *C = &c->bd.coll[R->instr];
    const size_t es = c->es;
    if (C->kind != EXEC_COLL_GRAD_SCATTER) return 0;
    const int g = C->gsize;
    int64_t moff = 0;
    for (int s = 0; s < C->nseg; s++) {
        const exec_seg *S = &C->seg[s];
        const int *cnt = R->counts + (size_t)2 * (size_t)g * (size_t)s, *dsp = cnt + g;
        const int64_t lo = S->off + dsp[C->grank], n = cnt[C->grank];
        const char *src = R->staging + moff * es;
        moff += n;
        if (S->out >= 0) {
            const exec_region *G = &c->bd.reg[S->region];
            char *b = cpu_region_grads(c, G, exec_cpu_buf(c, S->out, "the gradient piece", e));
            if (!b) return -1;
            if (c->dt == PLAN_FP32)
                for (int64_t q = 0; q < n; q++) ((float *)b)[lo + q] += ((const float *)src)[q];
            else
                for (int64_t q = 0; q < n; q++) ((double *)b)[lo + q] += ((const double *)src)[q];
        } else {
            char *b = seg_base(c, S, true, e);
            if (!b) return -1;
            memcpy(b + lo * es, src, (size_t)n * es);
        }
    }
    return 0;
}

static int be_test(void *ctx, int req, bool *done, base_error *e)
{
    exec_cpu *c = ctx;
    cpu_req *R = &c->req[req];
    int flag = 0;
    MPI_Status st;
    EXEC_MPI(MPI_Test(&R->r, &flag, &st), e);
    if (flag && R->nmore) EXEC_MPI(MPI_Testall(R->nmore, R->more, &flag, MPI_STATUSES_IGNORE), e);
    *done = flag != 0;
    if (!flag) return 0;
    int rc = 0;
    const plan_instr *in = &c->L->ins[R->instr];
    if (in->op == PLAN_RECV) {
        int got = 0;
        MPI_Get_count(&st, MPI_BYTE, &got);
        if (got != R->expect)
            rc = base_errorf(e, "received %d bytes where %lld were expected: the sender's buffer "
                                "differs from this one; the two devices read the plan differently",
                             got, (long long)R->expect);
    } else if (in->op == PLAN_COLL) {
        rc = coll_finish(c, R, e);
    }
    req_done(c, req);
    return rc;
}

int exec_cpu_check_peers(exec_cpu *c, base_error *e)
{
    if (c->fail == MPI_COMM_NULL || c->fail_req == MPI_REQUEST_NULL) return 0;
    int flag = 0;
    MPI_Status st;
    EXEC_MPI(MPI_Test(&c->fail_req, &flag, &st), e);
    if (!flag) return 0;
    c->fail_msg[sizeof c->fail_msg - 1] = 0;
    return base_errorf(e, "stopping because %s", c->fail_msg);
}

void exec_cpu_notify_failure(exec_cpu *c, const char *msg)
{
    if (c->fail == MPI_COMM_NULL) return;
    static char out[BASE_ERROR_MAX];
    snprintf(out, sizeof out, "%s", msg);
    int n = (int)strlen(out) + 1;
    MPI_Request *r = base_xcalloc((size_t)c->world, sizeof *r);
    for (int d = 0; d < c->world; d++) {
        r[d] = MPI_REQUEST_NULL;
        if (d != c->dev) MPI_Isend(out, n, MPI_CHAR, d, 0, c->fail, &r[d]);
    }
    /* the receivers keep a receive posted, so this finishes at once unless one has died */
    double t0 = exec_now();
    int all = 0;
    while (!all && exec_now() - t0 < 2.0) {
        MPI_Testall(c->world, r, &all, MPI_STATUSES_IGNORE);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    free(r);
}

/* Ranks may share cores (mpirun --oversubscribe): spin briefly, then yield, then sleep; and
 * look out for other ranks' failures. */
static void answer_asks(exec_cpu *c);

static int be_idle(void *ctx, int rounds, base_error *e)
{
    exec_cpu *c = ctx;
    if ((rounds & 15) == 0) {
        answer_asks(c);
        if (exec_cpu_check_peers(c, e)) return -1;
    }
    if (rounds < 32) return 0;
    if (rounds < 512) {
        sched_yield();
        return 0;
    }
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
    return 0;
}

int exec_cpu_wait(exec_cpu *c, MPI_Request *r, const char *what, base_error *e)
{
    double t0 = exec_now();
    c->waiting = what;
    for (int rounds = 1;; rounds++) {
        int flag = 0;
        EXEC_MPI(MPI_Test(r, &flag, MPI_STATUS_IGNORE), e);
        if (flag) {
            c->waiting = NULL;
            return 0;
        }
        if (c->o.timeout_s > 0 && (rounds & 63) == 0 && exec_now() - t0 > c->o.timeout_s) {
            c->timed_out = true;
            return base_errorf(e, "device %d: %s did not finish within %.0f s (the watchdog's "
                                  "timeout)",
                               c->dev, what, c->o.timeout_s);
        }
        if (be_idle(c, rounds, e)) return -1;
    }
}

/* ---------------------------------------------------------------- naming the culprit */

#define TAG_ASK 1
#define TAG_ANSWER 2
#define EXEC_CPU_ASK_S 2.0 /* how long a rank whose watchdog fired waits for the others' answers */

void exec_cpu_attach(exec_cpu *c, const exec_interp *it) { c->it = it; }

/* Where this rank stands, in at most n bytes: its step and its streams' heads, or what it waits
 * for outside a step. */
static void describe_self(const exec_cpu *c, char *out, size_t n)
{
    base_buf b = {0};
    base_buf_printf(&b, "step %lld,", (long long)c->step);
    if (c->it) exec_interp_describe_heads(c->it, &b);
    if (c->waiting) base_buf_printf(&b, " waiting for %s", c->waiting);
    else if (b.s[b.n - 1] == ',') base_buf_puts(&b, " between instructions (progressing)");
    snprintf(out, n, "%s", b.s);
    if (b.n >= n && n > 4) memcpy(out + n - 4, "...", 4);
    base_buf_free(&b);
}

/* Answers every question that has arrived: where this rank stands, to the rank that asked. */
static void answer_asks(exec_cpu *c)
{
    while (c->ask != MPI_COMM_NULL && c->ask_req != MPI_REQUEST_NULL) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Test(&c->ask_req, &flag, &st) != MPI_SUCCESS || !flag) return;
        int from = st.MPI_SOURCE;
        char *out = c->answers + (size_t)from * EXEC_CPU_ANSWER;
        describe_self(c, out, EXEC_CPU_ANSWER);
        MPI_Request r;
        /* the buffer is the asker's own slot and each rank asks once (then the job ends) */
        if (MPI_Isend(out, (int)strlen(out) + 1, MPI_CHAR, from, TAG_ANSWER, c->ask, &r) == MPI_SUCCESS)
            MPI_Request_free(&r);
        if (MPI_Irecv(&c->ask_in, 1, MPI_INT, MPI_ANY_SOURCE, TAG_ASK, c->ask, &c->ask_req) != MPI_SUCCESS)
            c->ask_req = MPI_REQUEST_NULL;
    }
}

void exec_cpu_find_culprit(exec_cpu *c, base_error *e)
{
    if (c->ask == MPI_COMM_NULL || c->world < 2) return;
    const int w = c->world;
    char *ans = base_xcalloc((size_t)w, EXEC_CPU_ANSWER);
    MPI_Request *rr = base_xcalloc((size_t)w, sizeof *rr);
    int ask = c->dev;
    for (int d = 0; d < w; d++) {
        rr[d] = MPI_REQUEST_NULL;
        if (d == c->dev) continue;
        MPI_Request s;
        if (MPI_Isend(&ask, 1, MPI_INT, d, TAG_ASK, c->ask, &s) == MPI_SUCCESS) MPI_Request_free(&s);
        MPI_Irecv(ans + (size_t)d * EXEC_CPU_ANSWER, EXEC_CPU_ANSWER, MPI_CHAR, d, TAG_ANSWER, c->ask, &rr[d]);
    }
    /* answering others' questions meanwhile: their watchdogs fire too */
    double t0 = exec_now();
    int all = 0;
    base_error peer;
    base_error_clear(&peer);
    while (!all && exec_now() - t0 < EXEC_CPU_ASK_S) {
        MPI_Testall(w, rr, &all, MPI_STATUSES_IGNORE);
        answer_asks(c);
        if (exec_cpu_check_peers(c, &peer)) break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    if (peer.set) {
        /* another rank has already failed and named the cause: this rank reports that notice */
        base_error_clear(e);
        base_errorf(e, "%s", peer.msg);
    } else {
        int silent = 0;
        base_buf who = {0}, rest = {0};
        for (int d = 0; d < w; d++) {
            if (d == c->dev) continue;
            int done = rr[d] == MPI_REQUEST_NULL;
            if (!done) MPI_Test(&rr[d], &done, MPI_STATUS_IGNORE);
            if (!done) {
                base_buf_printf(&who, "%s%d", silent++ ? ", " : "", d);
                continue;
            }
            ans[(size_t)d * EXEC_CPU_ANSWER + EXEC_CPU_ANSWER - 1] = 0;
            base_buf_printf(&rest, "%srank %d: %s", rest.n ? "; " : "", d, ans + (size_t)d * EXEC_CPU_ANSWER);
        }
        char mine[BASE_ERROR_MAX];
        snprintf(mine, sizeof mine, "%s", e->msg);
        base_error_clear(e);
        if (silent)
            base_errorf(e, "rank%s %s (device%s %s) stopped: %s not answer within %.0f s (a stopped "
                           "process, or one stuck in a computation), and the others wait for %s: "
                           "%s%s%s; check that rank's process and host",
                        silent > 1 ? "s" : "", who.s, silent > 1 ? "s" : "", who.s,
                        silent > 1 ? "they do" : "it does", EXEC_CPU_ASK_S, silent > 1 ? "them" : "it",
                        mine, rest.n ? "; " : "", rest.n ? rest.s : "");
        else
            base_errorf(e, "%s; every rank answers, so none has stopped: the plans do not match, or "
                           "a step is slower than --timeout; where each stands: %s",
                        mine, rest.n ? rest.s : "");
        base_buf_free(&who);
        base_buf_free(&rest);
    }
    for (int d = 0; d < w; d++)
        if (rr[d] != MPI_REQUEST_NULL) {
            MPI_Cancel(&rr[d]);
            MPI_Request_free(&rr[d]);
        }
    free(rr);
    free(ans);
}

int exec_cpu_head_reduce(void *ctx, void *buf, int64_t n, plan_dtype dt, exec_reduce_op op,
                         base_error *e)
{
    exec_cpu *c = ctx;
    if (c->head_comm < 0) return base_errorf(e, "the head's TP group has no communicator");
    if (int_count(n, "the head's reduction", e)) return -1;
    MPI_Request r;
    EXEC_MPI(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, dt == PLAN_FP32 ? MPI_FLOAT : MPI_DOUBLE,
                            op == EXEC_REDUCE_MAX ? MPI_MAX : MPI_SUM, c->comm[c->head_comm].comm, &r),
             e);
    return exec_cpu_wait(c, &r, "the head's vocab-parallel reduction", e);
}

int exec_cpu_connect(exec_cpu *c, base_error *e)
{
    const plan_set *p = c->p;
    comm_key *keys = NULL;
    int nkeys = 0;
    if (collect_keys(c, &keys, &nkeys, e)) return -1;
    int rc = 0;
    MPI_Group world_group = MPI_GROUP_NULL;
    if (!rc && MPI_Comm_dup(MPI_COMM_WORLD, &c->p2p) != MPI_SUCCESS)
        rc = base_errorf(e, "%s:%d: MPI_Comm_dup of MPI_COMM_WORLD failed", __FILE__, __LINE__);
    if (!rc && MPI_Comm_dup(MPI_COMM_WORLD, &c->fail) != MPI_SUCCESS)
        rc = base_errorf(e, "%s:%d: MPI_Comm_dup of MPI_COMM_WORLD failed", __FILE__, __LINE__);
    if (!rc && MPI_Irecv(c->fail_msg, (int)sizeof c->fail_msg, MPI_CHAR, MPI_ANY_SOURCE, 0, c->fail,
                         &c->fail_req) != MPI_SUCCESS)
        rc = base_errorf(e, "%s:%d: MPI_Irecv of failure notices failed", __FILE__, __LINE__);
    if (!rc && MPI_Comm_dup(MPI_COMM_WORLD, &c->ask) != MPI_SUCCESS)
        rc = base_errorf(e, "%s:%d: MPI_Comm_dup of MPI_COMM_WORLD failed", __FILE__, __LINE__);
    if (!rc && MPI_Irecv(&c->ask_in, 1, MPI_INT, MPI_ANY_SOURCE, TAG_ASK, c->ask, &c->ask_req) != MPI_SUCCESS)
        rc = base_errorf(e, "%s:%d: MPI_Irecv of the watchdog's questions failed", __FILE__, __LINE__);
    if (!rc) c->answers = base_xcalloc((size_t)c->world, EXEC_CPU_ANSWER);
    if (!rc && MPI_Comm_group(MPI_COMM_WORLD, &world_group) != MPI_SUCCESS)
        rc = base_errorf(e, "%s:%d: MPI_Comm_group failed", __FILE__, __LINE__);
    c->comm = base_xcalloc((size_t)(nkeys + 1), sizeof *c->comm);
    /* in the same sorted order on every rank, each rank taking part in its groups' creations:
     * MPI_Comm_create_group is collective over the group only */
    for (int k = 0; k < nkeys && !rc; k++) {
        const plan_group *G = &p->groups[keys[k].group];
        cpu_comm *cc = &c->comm[c->ncomm++];
        cc->group = keys[k].group;
        cc->stream = keys[k].stream;
        cc->comm = MPI_COMM_NULL;
        for (int m = 0; m < G->n; m++) cc->member |= G->devices[m] == c->dev;
        if (!cc->member) continue;
        for (int m = 0; m < G->n && !rc; m++)
            if (G->devices[m] >= c->world)
                rc = base_errorf(e, "group %s has device %d, but only %d ranks run; start one rank "
                                    "per device",
                                 G->name ? G->name : "?", G->devices[m], c->world);
        if (rc) break;
        MPI_Group g;
        if (MPI_Group_incl(world_group, G->n, G->devices, &g) != MPI_SUCCESS ||
            MPI_Comm_create_group(MPI_COMM_WORLD, g, k, &cc->comm) != MPI_SUCCESS)
            rc = base_errorf(e, "%s:%d: MPI_Comm_create_group for group %s, stream %s failed",
                             __FILE__, __LINE__, G->name ? G->name : "?", cc->stream);
        MPI_Group_free(&g);
    }
    if (world_group != MPI_GROUP_NULL) MPI_Group_free(&world_group);
    for (int k = 0; k < nkeys; k++) free(keys[k].users);
    free(keys);
    if (rc) return -1;
    for (int i = 0; i < c->L->n; i++) {
        const plan_instr *in = &c->L->ins[i];
        if (in->op == PLAN_COLL) {
            const char *s = c->L->streams[in->stream] ? c->L->streams[in->stream] : "";
            c->bd.coll[i].comm = comm_find(c, c->bd.coll[i].group, s);
        }
    }
    if (c->bd.head_region >= 0 && c->bd.reg[c->bd.head_region].tp_group >= 0)
        c->head_comm = comm_find(c, c->bd.reg[c->bd.head_region].tp_group, REDUCE_STREAM);
    exec_backend *b = &c->be;
    b->ctx = c;
    b->name = "cpu-mpi";
    b->alloc = be_alloc;
    b->release = be_release;
    b->compute = be_compute;
    b->p2p_start = be_p2p;
    b->coll_start = be_coll;
    b->test = be_test;
    b->record = NULL;
    b->wait = NULL;
    b->idle = be_idle;
    return 0;
}

void exec_cpu_disconnect(exec_cpu *c)
{
    int fin = 0;
    MPI_Finalized(&fin);
    for (int i = 0; i < c->nreq; i++)
        if (c->req[i].used) {
            if (!fin && c->req[i].r != MPI_REQUEST_NULL) {
                MPI_Cancel(&c->req[i].r);
                MPI_Request_free(&c->req[i].r);
            }
            for (int k = 0; k < c->req[i].nmore && !fin; k++)
                if (c->req[i].more[k] != MPI_REQUEST_NULL) MPI_Request_free(&c->req[i].more[k]);
            req_done(c, i);
        }
    free(c->req);
    c->req = NULL;
    c->nreq = c->capreq = 0;
    for (int i = 0; i < c->ncomm; i++)
        if (!fin && c->comm[i].comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm[i].comm);
    free(c->comm);
    c->comm = NULL;
    c->ncomm = 0;
    if (!fin && c->p2p != MPI_COMM_NULL) MPI_Comm_free(&c->p2p);
    c->p2p = MPI_COMM_NULL;
    if (!fin && c->fail_req != MPI_REQUEST_NULL) {
        MPI_Cancel(&c->fail_req);
        MPI_Wait(&c->fail_req, MPI_STATUS_IGNORE);
    }
    if (!fin && c->fail != MPI_COMM_NULL) MPI_Comm_free(&c->fail);
    c->fail = MPI_COMM_NULL;
    if (!fin && c->ask_req != MPI_REQUEST_NULL) {
        MPI_Cancel(&c->ask_req);
        MPI_Wait(&c->ask_req, MPI_STATUS_IGNORE);
    }
    if (!fin && c->ask != MPI_COMM_NULL) MPI_Comm_free(&c->ask);
    c->ask = MPI_COMM_NULL;
    free(c->answers);
    c->answers = NULL;
}
