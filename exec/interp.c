/* interp.c — the plan interpreter of exec.h: one device's instruction list, one queue per stream,
 * progressed from a single thread with non-blocking communication. Streams are visited round
 * robin; a stream runs its instantaneous instructions (alloc, free, record, satisfied waits) in
 * one go, at most one compute per visit (so that the transfers another stream can post are posted
 * between kernels, not after a run of them), and posts or polls its communication. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec.h"

double exec_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A sendrecv group in flight holds up to this many requests; the lowering pairs one send with
 * one receive, a wider group is still accepted. */
#define MAX_GROUP 64

typedef struct stream_q {
    int n;            /* instructions on the stream */
    const int *idx;   /* their indices in launch order (the index's queue) */
    int cur;          /* position of the head */
    /* the head's communication in flight: requests and how many instructions they cover */
    int nreq, npending, span;
    int req[MAX_GROUP];
    bool done_req[MAX_GROUP];
    double started;
    exec_stream_stats st;
} stream_q;

struct exec_interp {
    const plan_set *p;
    int dev;
    const plan_list *L;
    const exec_backend *b;
    int nstreams;
    stream_q *sq;
    plan_index ix;      /* queues, wait targets and sendrecv groups (plan.h) */
    bool *ran;          /* instruction i has finished in this run */
    exec_interp_observer obs;
    void *obs_ctx;
    bool timed_out;     /* the last run ended by the watchdog */
};

void exec_interp_observe(exec_interp *it, exec_interp_observer fn, void *ctx)
{
    it->obs = fn;
    it->obs_ctx = ctx;
}

void exec_instr_describe(const plan_set *p, int device, int i, char *buf, size_t n)
{
    const plan_list *L = plan_dev_list(p, device);
    if (i < 0 || i >= L->n) {
        snprintf(buf, n, "#%d (no such instruction)", i);
        return;
    }
    const plan_instr *in = &L->ins[i];
    int k = snprintf(buf, n, "#%d %s s=%s", i, plan_op_name((plan_op)in->op),
                     in->stream >= 0 && in->stream < L->nstreams && L->streams[in->stream]
                         ? L->streams[in->stream]
                         : "?");
    if (k < 0 || (size_t)k >= n) return;
    size_t off = (size_t)k;
#define ADD(...)                                                                              \
    do {                                                                                      \
        if (off < n) {                                                                        \
            int w_ = snprintf(buf + off, n - off, __VA_ARGS__);                               \
            if (w_ > 0) off += (size_t)w_;                                                    \
        }                                                                                     \
    } while (0)
    switch (in->op) {
    case PLAN_COMPUTE:
        ADD(" %s pass=%s", in->kid >= 0 && in->kid < p->nkernel_ids ? p->kernel_ids[in->kid] : "?",
            plan_pass_name((plan_pass)in->pass));
        break;
    case PLAN_SEND:
    case PLAN_RECV:
        ADD(" peer=%d tag=%d bytes=%lld", plan_dev_peer(p, device, in), in->tag,
            (long long)in->bytes);
        if (in->sendrecv) ADD(" sendrecv=%d", in->sendrecv);
        break;
    case PLAN_COLL:
        ADD(" %s group=%d (%s) bytes=%lld", plan_coll_name((plan_coll)in->coll),
            plan_dev_group(p, device, in),
            p->groups[plan_dev_group(p, device, in)].name ? p->groups[plan_dev_group(p, device, in)].name : "?",
            (long long)in->bytes);
        break;
    case PLAN_RECORD:
    case PLAN_WAIT: ADD(" event=%d", in->event); break;
    case PLAN_ALLOC:
    case PLAN_FREE: ADD(" buf=%d", in->buf); break;
    default: break;
    }
    if (in->region >= 0 && in->region < p->nregions) ADD(" region=%s", p->regions[in->region]);
    if (in->mb >= 0) ADD(" mb=%d", in->mb);
#undef ADD
}

int exec_interp_new(exec_interp **out, const plan_set *p, int device, const exec_backend *b,
                    base_error *e)
{
    *out = NULL;
    if (device < 0 || device >= p->ndevices)
        return base_errorf(e, "device %d is not in the plan's %d devices", device, p->ndevices);
    exec_interp *it = base_xcalloc(1, sizeof *it);
    it->p = p;
    it->dev = device;
    it->L = plan_dev_list(p, device);
    it->b = b;
    const plan_list *L = it->L;
    it->nstreams = L->nstreams > 0 ? L->nstreams : 1;
    it->sq = base_xcalloc((size_t)it->nstreams, sizeof *it->sq);
    it->ran = base_xcalloc((size_t)(L->n > 0 ? L->n : 1), sizeof *it->ran);
    for (int s = 0; s < it->nstreams; s++)
        it->sq[s].st.name = s < L->nstreams && L->streams[s] ? L->streams[s] : "?";
    if (plan_index_build(&it->ix, p, p->devices[device].list, e)) {
        exec_interp_free(it);
        return -1;
    }
    for (int s = 0; s < L->nstreams; s++) it->sq[s].idx = plan_index_stream(&it->ix, s, &it->sq[s].n);
    if (it->ix.max_run > MAX_GROUP) {
        int i = 0;
        while (it->ix.run[i] <= MAX_GROUP) i++;
        base_errorf(e, "device %d: sendrecv group %d has %d members; the interpreter posts at most %d together",
                    device, L->ins[i].sendrecv, it->ix.run[i], MAX_GROUP);
        exec_interp_free(it);
        return -1;
    }
    *out = it;
    return 0;
}

void exec_interp_free(exec_interp *it)
{
    if (!it) return;
    plan_index_free(&it->ix);
    free(it->sq);
    free(it->ran);
    free(it);
}

int exec_interp_nstreams(const exec_interp *it) { return it->nstreams; }

const exec_stream_stats *exec_interp_stream_stats(const exec_interp *it, int stream)
{
    return stream >= 0 && stream < it->nstreams ? &it->sq[stream].st : NULL;
}

static int fail_at(exec_interp *it, int i, base_error *e)
{
    char d[256];
    exec_instr_describe(it->p, it->dev, i, d, sizeof d);
    base_error_prefix(e, "device %d, %s: ", it->dev, d);
    return -1;
}

/* Runs what stream q can run now; *progress is set when anything happened. */
static int advance(exec_interp *it, int s, bool *progress, base_error *e)
{
    stream_q *q = &it->sq[s];
    const plan_list *L = it->L;
    const exec_backend *b = it->b;
    while (q->cur < q->n) {
        int i = q->idx[q->cur];
        const plan_instr *in = &L->ins[i];
        if (q->nreq > 0) {
            /* communication in flight: poll what has not finished */
            for (int k = 0; k < q->nreq; k++) {
                if (q->done_req[k]) continue;
                bool done = false;
                if (b->test(b->ctx, q->req[k], &done, e)) return fail_at(it, q->idx[q->cur + k], e);
                if (done) {
                    q->done_req[k] = true;
                    q->npending--;
                    *progress = true;
                }
            }
            if (q->npending > 0) return 0;
            for (int k = 0; k < q->span; k++) it->ran[q->idx[q->cur + k]] = true;
            double t1 = exec_now();
            q->st.busy_s += t1 - q->started;
            if (it->obs) it->obs(it->obs_ctx, s, &q->idx[q->cur], q->span, q->started, t1);
            q->st.instrs += q->span;
            q->cur += q->span;
            q->nreq = q->span = 0;
            continue;
        }
        switch (in->op) {
        case PLAN_ALLOC:
            if (b->alloc(b->ctx, i, in->buf, in->bytes, e)) return fail_at(it, i, e);
            break;
        case PLAN_FREE:
            if (b->release(b->ctx, i, in->buf, e)) return fail_at(it, i, e);
            break;
        case PLAN_RECORD:
            if (b->record && b->record(b->ctx, in->stream, in->event, e)) return fail_at(it, i, e);
            break;
        case PLAN_WAIT:
            if (!it->ran[it->ix.wait[i]]) return 0;
            if (b->wait && b->wait(b->ctx, in->stream, in->event, e)) return fail_at(it, i, e);
            break;
        case PLAN_NOP: break;
        case PLAN_COMPUTE: {
            double t0 = exec_now();
            if (b->compute(b->ctx, i, in, e)) return fail_at(it, i, e);
            double t1 = exec_now();
            q->st.busy_s += t1 - t0;
            if (it->obs) it->obs(it->obs_ctx, s, &i, 1, t0, t1);
            q->st.instrs++;
            it->ran[i] = true;
            q->cur++;
            *progress = true;
            return 0; /* let the other streams post what this kernel made ready */
        }
        case PLAN_SEND:
        case PLAN_RECV:
        case PLAN_COLL: {
            int span = in->op == PLAN_COLL ? 1 : it->ix.run[i];
            q->started = exec_now();
            q->span = span;
            q->nreq = q->npending = 0;
            for (int k = 0; k < span; k++) {
                int j = q->idx[q->cur + k];
                const plan_instr *m = &L->ins[j];
                int req = -1;
                int rc = m->op == PLAN_COLL
                             ? b->coll_start(b->ctx, j, m, plan_dev_group(it->p, it->dev, m), &req, e)
                             : b->p2p_start(b->ctx, j, m, plan_dev_peer(it->p, it->dev, m), &req, e);
                if (rc) return fail_at(it, j, e);
                q->req[q->nreq] = req;
                q->done_req[q->nreq++] = false;
                q->npending++;
            }
            *progress = true;
            continue; /* poll at once: small transfers may be done already */
        }
        default:
            base_errorf(e, "unknown instruction op %d; the plan was written by a newer piper",
                        (int)in->op);
            return fail_at(it, i, e);
        }
        it->ran[i] = true;
        q->st.instrs++;
        q->cur++;
        *progress = true;
    }
    return 0;
}

void exec_interp_describe_heads(const exec_interp *it, base_buf *msg)
{
    for (int s = 0; s < it->nstreams; s++) {
        const stream_q *q = &it->sq[s];
        if (q->cur >= q->n) continue;
        char d[256];
        exec_instr_describe(it->p, it->dev, q->idx[q->cur], d, sizeof d);
        base_buf_printf(msg, " [stream %s: %s%s]", q->st.name, d,
                        q->nreq ? " (posted, not finished)" : "");
    }
}

bool exec_interp_timed_out(const exec_interp *it) { return it->timed_out; }

int exec_interp_run(exec_interp *it, double timeout_s, base_error *e)
{
    memset(it->ran, 0, (size_t)(it->L->n > 0 ? it->L->n : 1) * sizeof *it->ran);
    for (int s = 0; s < it->nstreams; s++) {
        stream_q *q = &it->sq[s];
        q->cur = q->nreq = q->npending = q->span = 0;
        q->st.busy_s = 0;
        q->st.instrs = 0;
    }
    it->timed_out = false;
    double last = exec_now();
    int idle_rounds = 0;
    for (;;) {
        bool progress = false, left = false;
        for (int s = 0; s < it->nstreams; s++) {
            if (advance(it, s, &progress, e)) return -1;
            left |= it->sq[s].cur < it->sq[s].n;
        }
        if (!left) return 0;
        if (progress) {
            last = exec_now();
            idle_rounds = 0;
            continue;
        }
        idle_rounds++;
        if (timeout_s > 0 && (idle_rounds & 63) == 0 && exec_now() - last > timeout_s) {
            base_buf msg = {0};
            base_buf_printf(&msg, "device %d: nothing progressed for %.0f s (the watchdog's "
                                  "timeout); stuck:",
                            it->dev, timeout_s);
            exec_interp_describe_heads(it, &msg);
            base_buf_puts(&msg, "; a peer has stopped or the plans do not match; check the other "
                                "ranks' messages, or raise --timeout for slow steps");
            base_errorf(e, "%s", msg.s);
            base_buf_free(&msg);
            it->timed_out = true;
            return -1;
        }
        if (it->b->idle && it->b->idle(it->b->ctx, idle_rounds, e)) return -1;
    }
}
