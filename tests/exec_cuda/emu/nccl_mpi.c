/* nccl_mpi.c — nccl_dl.h over MPI, for the emulator build of the CUDA runtime: with it,
 * piper-exec-cuda-emu runs multi-device plans under mpirun on the CPU, one emulated GPU per
 * rank, so that the runtime's communication (communicator keys and ncclCommSplit, p2p with its
 * peer ranks, sendrecv groups between ncclGroupStart and ncclGroupEnd, gradient buckets, the
 * norm's sum, activation collectives, the head's vocabulary-parallel reductions, the MPI boot
 * shim) is checked against the CPU executor without a GPU.
 *
 * As on a GPU, an operation is only enqueued: it goes on its stream's queue in the emulator
 * (emu.h, emu_stream_async), is started with MPI's non-blocking calls when the stream reaches it
 * (after the stream's earlier kernels and waits, so it sends what they wrote) and holds the
 * stream until MPI_Test says it is done; events recorded after it pass then, so cudaEventQuery
 * reports the operation's end, and the host never blocks on a peer. Between group start and end
 * the operations are queued and go on their streams at the end, as NCCL fuses a group. bf16 sums
 * round once per addition, as NCCL's reductions do. A communicator is an MPI communicator
 * (MPI_Comm_split for ncclCommSplit). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cuda/nccl_dl.h"
#include "exec/cuda/kernels.h"

#define MPI_CK(call)                                                                           \
    do {                                                                                       \
        if ((call) != MPI_SUCCESS) return base_errorf(e, "%s failed (emulated NCCL)", #call);  \
    } while (0)

typedef struct comm {
    MPI_Comm c;
} comm;

typedef enum { Q_SEND, Q_RECV, Q_ALLREDUCE, Q_REDUCE_SCATTER, Q_ALL_GATHER, Q_REDUCE, Q_BCAST } qkind;

typedef struct qop {
    qkind k;
    const void *in;
    void *out;
    size_t count;
    exec_nccl_dtype dt;
    exec_nccl_op op;
    int peer;
    comm *c;
    void *stream;
} qop;

static int g_depth;
static qop *g_q;
static int g_nq, g_capq;
static MPI_Op g_bf16_sum, g_bf16_max;

/* ---------------------------------------------------------------- work on a stream */

/* The operations one call (or one group, per stream) puts on a stream: started when the stream
 * reaches them, done when MPI says so. */
typedef struct batch {
    int n;
    qop *q;
    MPI_Request *r;
} batch;

/* the emulator's asynchronous work (emu.h), with C linkage */
void emu_stream_async(void *stream, void (*start)(void *arg), int (*poll)(void *arg), void *arg);

static void start_op(const qop *q, MPI_Request *r);

static void batch_start(void *arg)
{
    batch *b = arg;
    for (int i = 0; i < b->n; i++) start_op(&b->q[i], &b->r[i]);
}

static int batch_poll(void *arg)
{
    batch *b = arg;
    int flag = 0;
    MPI_Testall(b->n, b->r, &flag, MPI_STATUSES_IGNORE);
    if (!flag) return 0;
    free(b->q);
    free(b->r);
    free(b);
    return 1;
}

/* Puts ops q[0..n) (of one stream) on their stream. */
static void submit(const qop *q, int n)
{
    batch *b = base_xcalloc(1, sizeof *b);
    b->n = n;
    b->q = base_xcalloc((size_t)n, sizeof *b->q);
    b->r = base_xcalloc((size_t)n, sizeof *b->r);
    memcpy(b->q, q, (size_t)n * sizeof *q);
    for (int i = 0; i < n; i++) b->r[i] = MPI_REQUEST_NULL;
    emu_stream_async(q[0].stream, batch_start, batch_poll, b);
}

static void bf16_reduce(void *in, void *inout, int *len, MPI_Datatype *dt, bool max)
{
    (void)dt;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) {
        float x = exec_bf16_to_float(a[i]), y = exec_bf16_to_float(b[i]);
        b[i] = exec_bf16_from_float(max ? (x > y ? x : y) : x + y);
    }
}

static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *dt) { bf16_reduce(in, inout, len, dt, false); }
static void bf16_max(void *in, void *inout, int *len, MPI_Datatype *dt) { bf16_reduce(in, inout, len, dt, true); }

static MPI_Datatype mdt(exec_nccl_dtype d)
{
    switch (d) {
    case EXEC_NCCL_U8: return MPI_BYTE;
    case EXEC_NCCL_BF16: return MPI_UINT16_T;
    case EXEC_NCCL_F32: return MPI_FLOAT;
    default: return MPI_DOUBLE;
    }
}

static size_t dsize(exec_nccl_dtype d)
{
    return d == EXEC_NCCL_U8 ? 1 : d == EXEC_NCCL_BF16 ? 2 : d == EXEC_NCCL_F32 ? 4 : 8;
}

static MPI_Op mop(exec_nccl_dtype d, exec_nccl_op op)
{
    if (d == EXEC_NCCL_BF16) return op == EXEC_NCCL_MAX ? g_bf16_max : g_bf16_sum;
    return op == EXEC_NCCL_MAX ? MPI_MAX : MPI_SUM;
}

int exec_nccl_load(base_error *e)
{
    int init = 0;
    MPI_Initialized(&init);
    if (!init) return base_errorf(e, "emulated NCCL: MPI is not initialised (start under mpirun)");
    if (!g_bf16_sum) {
        MPI_Op_create(bf16_sum, 1, &g_bf16_sum);
        MPI_Op_create(bf16_max, 1, &g_bf16_max);
    }
    return 0;
}

bool exec_nccl_loaded(void) { return true; }

int exec_nccl_version(char *buf, size_t n, base_error *e)
{
    snprintf(buf, n, "emulated over MPI");
    return 0;
}

int exec_nccl_unique_id(void *id, base_error *e)
{
    memset(id, 0, EXEC_NCCL_ID_BYTES);
    return exec_nccl_load(e);
}

int exec_nccl_init_rank(void **out, int nranks, const void *id, int rank, base_error *e)
{
    if (exec_nccl_load(e)) return -1;
    int size = 0, me = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (size != nranks || me != rank)
        return base_errorf(e, "emulated NCCL: rank %d of %d, MPI says %d of %d", rank, nranks, me, size);
    comm *c = base_xcalloc(1, sizeof *c);
    MPI_CK(MPI_Comm_dup(MPI_COMM_WORLD, &c->c));
    *out = c;
    return 0;
}

int exec_nccl_split(void *parent, int color, int key, void **out, base_error *e)
{
    *out = NULL;
    MPI_Comm nc = MPI_COMM_NULL;
    MPI_CK(MPI_Comm_split(((comm *)parent)->c, color < 0 ? MPI_UNDEFINED : color, key, &nc));
    if (nc == MPI_COMM_NULL) return 0;
    comm *c = base_xcalloc(1, sizeof *c);
    c->c = nc;
    *out = c;
    return 0;
}

void exec_nccl_destroy(void *p)
{
    comm *c = p;
    if (!c) return;
    MPI_Comm_free(&c->c);
    free(c);
}

void exec_nccl_abort(void *p) { exec_nccl_destroy(p); }

int exec_nccl_check(void *c, base_error *e) { return 0; }

int exec_nccl_group_start(base_error *e)
{
    g_depth++;
    return 0;
}

/* Starts an operation (non-blocking) when its stream reaches it. A failure to start is the
 * emulator's own: the program stops. */
static void start_op(const qop *q, MPI_Request *r)
{
    const int n = (int)q->count;
    int rc = MPI_SUCCESS;
    switch (q->k) {
    case Q_SEND: rc = MPI_Isend(q->in, n, mdt(q->dt), q->peer, 0, q->c->c, r); break;
    case Q_RECV: rc = MPI_Irecv(q->out, n, mdt(q->dt), q->peer, 0, q->c->c, r); break;
    case Q_ALLREDUCE:
        rc = MPI_Iallreduce(q->in == q->out ? MPI_IN_PLACE : q->in, q->out, n, mdt(q->dt),
                            mop(q->dt, q->op), q->c->c, r);
        break;
    case Q_REDUCE_SCATTER:
        rc = MPI_Ireduce_scatter_block(q->in, q->out, n, mdt(q->dt), mop(q->dt, EXEC_NCCL_SUM),
                                       q->c->c, r);
        break;
    case Q_ALL_GATHER:
        rc = MPI_Iallgather(q->in, n, mdt(q->dt), q->out, n, mdt(q->dt), q->c->c, r);
        break;
    case Q_REDUCE: {
        int me;
        MPI_Comm_rank(q->c->c, &me);
        const bool in_place = me == q->peer && q->in == q->out;
        rc = MPI_Ireduce(in_place ? MPI_IN_PLACE : q->in, q->out, n, mdt(q->dt),
                         mop(q->dt, EXEC_NCCL_SUM), q->peer, q->c->c, r);
        break;
    }
    case Q_BCAST: {
        /* NCCL's root sends from in and receives into out as well; MPI's has one buffer */
        int me;
        MPI_Comm_rank(q->c->c, &me);
        if (me == q->peer && q->in != q->out) memmove(q->out, q->in, (size_t)n * dsize(q->dt));
        rc = MPI_Ibcast(q->out, n, mdt(q->dt), q->peer, q->c->c, r);
        break;
    }
    }
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "emulated NCCL: starting an MPI operation failed\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

/* A group's operations go on their streams at its end, each stream's together (NCCL fuses a
 * group; the runtime's groups are one stream's sends and receives). */
int exec_nccl_group_end(base_error *e)
{
    if (g_depth <= 0) return base_errorf(e, "emulated NCCL: group end without a start");
    if (--g_depth > 0) return 0;
    bool *taken = base_xcalloc((size_t)(g_nq > 0 ? g_nq : 1), sizeof *taken);
    qop *same = base_xcalloc((size_t)(g_nq > 0 ? g_nq : 1), sizeof *same);
    for (int i = 0; i < g_nq; i++) {
        if (taken[i]) continue;
        int n = 0;
        for (int j = i; j < g_nq; j++)
            if (!taken[j] && g_q[j].stream == g_q[i].stream) {
                taken[j] = true;
                same[n++] = g_q[j];
            }
        submit(same, n);
    }
    free(taken);
    free(same);
    g_nq = 0;
    return 0;
}

static int enqueue(qop q, base_error *e)
{
    if (!q.c) return base_errorf(e, "emulated NCCL: an operation on no communicator");
    if (g_depth > 0) {
        if (g_nq == g_capq) {
            g_capq = g_capq ? 2 * g_capq : 16;
            g_q = base_xrealloc(g_q, (size_t)g_capq * sizeof *g_q);
        }
        g_q[g_nq++] = q;
        return 0;
    }
    submit(&q, 1);
    return 0;
}

int exec_nccl_send(const void *buf, size_t count, exec_nccl_dtype dt, int peer, void *c,
                   void *stream, base_error *e)
{
    return enqueue((qop){Q_SEND, buf, NULL, count, dt, EXEC_NCCL_SUM, peer, c, stream}, e);
}

int exec_nccl_recv(void *buf, size_t count, exec_nccl_dtype dt, int peer, void *c, void *stream,
                   base_error *e)
{
    return enqueue((qop){Q_RECV, NULL, buf, count, dt, EXEC_NCCL_SUM, peer, c, stream}, e);
}

int exec_nccl_all_reduce(const void *in, void *out, size_t count, exec_nccl_dtype dt,
                         exec_nccl_op op, void *c, void *stream, base_error *e)
{
    return enqueue((qop){Q_ALLREDUCE, in, out, count, dt, op, -1, c, stream}, e);
}

int exec_nccl_reduce_scatter(const void *in, void *out, size_t count, exec_nccl_dtype dt,
                             void *c, void *stream, base_error *e)
{
    return enqueue((qop){Q_REDUCE_SCATTER, in, out, count, dt, EXEC_NCCL_SUM, -1, c, stream}, e);
}

int exec_nccl_all_gather(const void *in, void *out, size_t count, exec_nccl_dtype dt, void *c,
                         void *stream, base_error *e)
{
    return enqueue((qop){Q_ALL_GATHER, in, out, count, dt, EXEC_NCCL_SUM, -1, c, stream}, e);
}

int exec_nccl_reduce(const void *in, void *out, size_t count, exec_nccl_dtype dt, int root, void *c,
                     void *stream, base_error *e)
{
    return enqueue((qop){Q_REDUCE, in, out, count, dt, EXEC_NCCL_SUM, root, c, stream}, e);
}

int exec_nccl_broadcast(const void *in, void *out, size_t count, exec_nccl_dtype dt, int root,
                        void *c, void *stream, base_error *e)
{
    return enqueue((qop){Q_BCAST, in, out, count, dt, EXEC_NCCL_SUM, root, c, stream}, e);
}
