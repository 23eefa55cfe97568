/* exec.h — piper's executor: the contract between the strategy-agnostic plan interpreter and
 * the backends that run instructions (exec/cpu: MPI + BLAS kernels; exec/cuda later).
 *
 * The interpreter walks one device's instruction list of a plan (plan/plan.h) in launch order.
 * It keeps one queue per logical stream and progresses all of them from a single thread:
 *   - an instruction starts when the previous one on its stream has finished;
 *   - `record e` finishes at once; `wait e` blocks its stream until the record it refers to
 *     (the latest one of e before it in launch order, as CUDA's rule; the first one after it when
 *     there is none before) has run;
 *   - the send/recv operations of one sendrecv group are posted together, so neighbours that
 *     exchange in both directions cannot deadlock; the stream moves on when all have finished;
 *   - communication is started with non-blocking calls and polled with `test`; compute runs when
 *     it reaches the head of its stream (synchronously on a CPU backend; a GPU backend would
 *     enqueue it), and the interpreter then returns to the other streams, so transfers are posted
 *     as soon as their data exists.
 * It knows nothing of strategies, models or data: what a buffer holds, which kernel a compute
 * runs and what a collective reduces are the backend's business, read from the instruction.
 *
 * exec/ includes only plan/plan.h and base/base.h of the rest of piper (tests/check_includes.sh).
 * Functions return 0, or -1 with a message in the base_error; none exits. */
#ifndef PIPER_EXEC_H
#define PIPER_EXEC_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/base.h"
#include "../plan/plan.h"

/* ---------------------------------------------------------------- the backend interface */

/* What a backend does for the interpreter. `instr` is the instruction's index in the device's
 * list and `in` the instruction itself; peers and groups are given resolved to global device and
 * group ids (plan_dev_peer / plan_dev_group). Requests are small integers the backend hands
 * out and understands; `test` forgets a request once it reports it done, after finishing any work
 * that completes it (e.g. unpacking a gradient bucket). */
typedef struct exec_backend {
    void *ctx;
    const char *name;
    /* buffers, by plan buffer id; plan_bytes is the plan's size, the backend may hold another
     * (the CPU kernels' fp32 layouts differ from the cost model's bf16 byte counts) */
    int (*alloc)(void *ctx, int instr, int buf, int64_t plan_bytes, base_error *e);
    int (*release)(void *ctx, int instr, int buf, base_error *e);
    /* a compute instruction: the kernel identity plan->kernel_ids[in->kid] on its region, pass,
     * micro-batch, reads/writes and tp/ep groups */
    int (*compute)(void *ctx, int instr, const plan_instr *in, base_error *e);
    /* starts a SEND or RECV with device `peer` */
    int (*p2p_start)(void *ctx, int instr, const plan_instr *in, int peer, int *req, base_error *e);
    /* starts a collective over global group `group` */
    int (*coll_start)(void *ctx, int instr, const plan_instr *in, int group, int *req,
                      base_error *e);
    /* *done = whether request `req` has finished */
    int (*test)(void *ctx, int req, bool *done, base_error *e);
    /* cross-stream events; NULL where the interpreter's own ordering is all there is (the CPU
     * backend: one thread runs every stream) */
    int (*record)(void *ctx, int stream, int event, base_error *e);
    int (*wait)(void *ctx, int stream, int event, base_error *e);
    /* nothing could progress for `idle_rounds` rounds: give the CPU away briefly (ranks may
     * share cores), and fail (-1) when the run must stop, e.g. another rank reported a failure;
     * may be NULL */
    int (*idle)(void *ctx, int idle_rounds, base_error *e);
} exec_backend;

/* ---------------------------------------------------------------- the interpreter */

typedef struct exec_interp exec_interp;

/* Prepares the interpreter of `device` (streams, event targets, sendrecv groups). Fails on a
 * list the interpreter cannot run (a wait whose event is never recorded, a sendrecv group whose
 * members are not consecutive on their stream). The plan and backend must outlive it. */
int exec_interp_new(exec_interp **out, const plan_set *p, int device, const exec_backend *b,
                    base_error *e);
void exec_interp_free(exec_interp *it);
/* Runs the device's list once (one training step) to its end. With timeout_s > 0 it fails when
 * nothing has progressed for that long, naming every unfinished stream's instruction: a watchdog
 * for communication that never completes. */
int exec_interp_run(exec_interp *it, double timeout_s, base_error *e);
/* Whether the last run ended because the watchdog fired (a backend may then ask its peers). */
bool exec_interp_timed_out(const exec_interp *it);
/* Where the last run stands: " [stream NAME: #i ...]" for every unfinished stream's head (with
 * " (posted, not finished)" for communication in flight), appended to msg; the watchdog's
 * message, and what a rank prints when a peer has failed. */
void exec_interp_describe_heads(const exec_interp *it, base_buf *msg);

/* Observing runs (piper-exec --trace): `fn` is called after each compute, collective, transfer or
 * sendrecv group finishes (n > 1: the group's members, consecutive on their stream; instrs
 * their indices), with the exec_now() times at which its stream started it and saw it finish.
 * A stream runs one at a time, so one stream's intervals never overlap. NULL stops observing. */
typedef void (*exec_interp_observer)(void *ctx, int stream, const int *instrs, int n, double t_start,
                                     double t_end);
void exec_interp_observe(exec_interp *it, exec_interp_observer fn, void *ctx);

/* Per-stream figures of the last run. */
typedef struct exec_stream_stats {
    const char *name;
    double busy_s;     /* time from an instruction's start to its end, summed */
    int64_t instrs;
} exec_stream_stats;
int exec_interp_nstreams(const exec_interp *it);
const exec_stream_stats *exec_interp_stream_stats(const exec_interp *it, int stream);

/* A one-line description of instruction i of `device`'s list, for messages:
 * "#18 send s=p2p peer=1 tag=54 mb=0 region=L0.mlp". */
void exec_instr_describe(const plan_set *p, int device, int i, char *buf, size_t n);

/* Monotonic seconds. */
double exec_now(void);

#endif
