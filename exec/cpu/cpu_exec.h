/* cpu_exec.h — the CPU executor: one MPI rank runs one device of a plan with the CPU kernels
 * (kernels.h). Internal to exec/: runtime.c answers the binding layer (exec/bind.h, which reads
 * what each plan buffer holds for the kernels) with the CPU kernels' layouts, and runs computes,
 * data, initialisation and the optimizer; backend_mpi.c owns the communicators, p2p, collectives
 * and the exec_backend the interpreter drives; piper_exec.c uses the API at the end of this file.
 *
 * How the plan is read (by exec/bind.c, for every backend; exec/README.md has the whole story):
 * - Regions are the plan's region names ("embed", "L3.attn", "L1.moe_gate", "head"), in model
 *   order; a compute's kernel identity must be of its region's kind.
 * - Buffers have the role and owner the plan states, checked against the instructions that use
 *   them (a plan that disagrees, or states none, is refused): a compute's params/grads/
 *   optimizer buffers are its region's; the activation buffer a forward writes is the region's
 *   `act` for that micro-batch; a comm buffer a forward writes is its output, one it reads its
 *   input (likewise dx/dy for a backward); a collective's output takes its size from its input.
 *   Sizes are the kernels' (exec_region_sizes_get), not the plan's.
 * - Tensors that cross between regions on one device are the plan's buffers of role boundary
 *   (route: between an MoE gate and its combine); one of role workspace is the pass's work
 *   buffer. Plans without them (hand-written) get slots keyed by (region, micro-batch), freed
 *   after their last reader, and per-pass work buffers of the executor's own.
 * - Parameters, gradients and optimizer state keep their storage across steps; parameters are
 *   initialised once, gradients zeroed when the plan allocates them.
 * - A collective that reads gradient (parameter) buffers works on regions, by its purpose: a
 *   tp_grad_sync sums the tensors every TP rank holds whole (exec_param.replicated); a tied_sum
 *   the token table; a dp_grad_sum or pair_sum the whole block. A zero_scatter is a ZeRO
 *   shard: each region's block is cut in group-size pieces of ceil(n / size), the device's piece
 *   being what its optimizer step updates and its parameter all-gather sends.
 * - The data-parallel rank (which global samples a device's micro-batches hold) is the device's
 *   position in the group of a dp_grad_sum or zero_scatter of its first region, over a group
 *   whose every member runs that region and that is neither its TP nor its EP group; the
 *   data-parallel size is global_batch / (micro_batch x num_microbatches). */
#ifndef PIPER_EXEC_CPU_EXEC_H
#define PIPER_EXEC_CPU_EXEC_H

#include <mpi.h>
#include <stdio.h>

#include "../bind.h"
#include "../data.h"
#include "../exec.h"
#include "kernels.h"

/* Calls MPI and turns a failure into a base_error naming the call, file and line. */
#define EXEC_MPI(call, e)                                                                     \
    do {                                                                                      \
        int rc_ = (call);                                                                     \
        if (rc_ != MPI_SUCCESS) {                                                             \
            char s_[MPI_MAX_ERROR_STRING];                                                    \
            int l_ = 0;                                                                       \
            MPI_Error_string(rc_, s_, &l_);                                                   \
            return base_errorf((e), "%s:%d: %s failed: %s", __FILE__, __LINE__, #call, s_);  \
        }                                                                                     \
    } while (0)

/* A plan buffer, region, compute and collective to the executor: exec/bind.h's records, which
 * the CUDA runtime reads too; buffer bytes are the executor's, in the CPU kernels' layouts.
 * exec_compute.kernel is an exec_kernel of the CPU table (cpu_kernel). */
static inline const exec_kernel *cpu_kernel(const exec_compute *b) { return b->kernel; }

typedef struct cpu_comm {
    int group;
    const char *stream;     /* "#reduce": the head's vocab-parallel reductions */
    MPI_Comm comm;
    bool member;
} cpu_comm;

typedef struct cpu_req {
    bool used;
    MPI_Request r;
    int instr;
    int64_t expect;         /* RECV: bytes */
    char *staging;          /* ZeRO reduce-scatters: where the device's pieces arrive (the plan's
                               receive buffer, or the executor's own for a plan without one) */
    bool staging_owned;     /* the executor's own: freed with the request */
    int64_t staging_bytes;
    MPI_Request *more;      /* a gradient bucket: one in-place all-reduce per segment, the
                               first in r, the others here (nmore) */
    int nmore;
    int *counts;            /* ZeRO collectives: per rank, elements and displacements (2 x size),
                               kept until MPI completes the call */
} cpu_req;

typedef struct exec_cpu_options {
    uint64_t seed;
    int dtype;              /* PLAN_FP32 / PLAN_FP64; -1: the plan's activation dtype */
    exec_optim optim;       /* kind, lr, beta1, beta2, eps, weight_decay */
    double grad_clip;       /* max global norm when the plan has aux.grad_norm; <= 0: off */
    double timeout_s;
    const char *dump_grads; /* directory: after step 1, the gradients each optimizer step sees */
    const exec_data *data;  /* the token source; NULL: synthetic */
} exec_cpu_options;

typedef struct exec_cpu {
    const plan_set *p;
    int dev, world;
    const plan_list *L;
    exec_cpu_options o;
    exec_cfg cfg;
    plan_dtype dt;
    size_t es;
    MPI_Datatype mdt;
    int64_t nmb, dp_size, dp_rank, T; /* the binding's micro-batches and data-parallel rank */
    exec_bind bd;           /* the plan as read for this device: regions, buffers, computes,
                               collectives, boundary slots (exec/bind.h) */
    /* slots' storage: [(region * nmb + mb) * EXEC_NSLOT + kind], bd.slot_bytes each */
    char **slot;
    /* work buffers of the kernels (exec_region_sizes.work_bytes): a pass's workspace, held from
     * a BI to its BW [(region * nmb + mb)]; executor memory the plan does not size */
    char **work;
    double work_live, work_peak;
    /* what the executor held at its peak: plan buffers (in its sizes), boundary slots, work
     * buffers, other scratch (MPI staging, recompute outputs), and the plan's live bytes then */
    double scratch_live, slot_live;
    double at_peak[6];
    /* act buffers a backward reads after the plan frees them (bd.act_hold): whether that
     * backward ran this step; whether the plan's free came first and is pending */
    bool *hold_done, *deferred;
    double deferred_live;   /* bytes held past the plan's free, now */
    int32_t **tokens, **targets; /* per micro-batch */
    /* the step */
    int64_t step;
    double loss, aux_loss, norm_sq;
    bool have_norm;
    double *gate_out;       /* per micro-batch: the gates' aux losses here */
    FILE *dump;             /* dump_out.f while step 1 writes its gradient dump */
    base_out dump_out;
    /* memory: the executor's bytes and the plan's, live and peak */
    double live, peak, plan_live, plan_peak;
    /* the step's communication: bytes this device sent or received in p2p plus its collectives'
     * bytes as the plan defines them (the unsharded tensor a ZeRO collective cuts or assembles,
     * the larger side of an activation collective), and the plan's figure of the same instructions */
    double comm_bytes, plan_comm_bytes;
    /* communication */
    int ncomm;
    cpu_comm *comm;
    MPI_Comm p2p;
    /* failure notices: a failing rank sends its message to every other; each keeps a receive
     * posted and stops when one arrives */
    MPI_Comm fail;
    MPI_Request fail_req;
    char fail_msg[BASE_ERROR_MAX];
    /* the watchdog's questions (exec_cpu_find_culprit): a rank whose wait times out asks every
     * other where it stands; each keeps a receive posted and answers from its idle loop */
    MPI_Comm ask;
    MPI_Request ask_req;
    int ask_in;
    char *answers;                  /* [world][EXEC_CPU_ANSWER]: the answers being sent */
    const struct exec_interp *it;   /* where this rank's streams stand, for its answers */
    const char *waiting;            /* what exec_cpu_wait waits for, or NULL */
    bool timed_out;                 /* exec_cpu_wait's watchdog fired */
    int head_comm;          /* the communicator of the head's vocab-parallel reductions */
    int nreq, capreq;
    cpu_req *req;
    exec_backend be;
} exec_cpu;

/* Parameter storage p of region R indexed by element of the region's whole block (only the
 * elements the buffer holds may be touched: see param_lo). */
static inline char *cpu_region_params(const exec_cpu *c, const exec_region *R, char *p)
{
    return p ? p - (ptrdiff_t)R->param_lo * (ptrdiff_t)c->es : NULL;
}

/* The same for the region's kept gradient buffer (grad_lo). */
static inline char *cpu_region_grads(const exec_cpu *c, const exec_region *R, char *p)
{
    return p ? p - (ptrdiff_t)R->grad_lo * (ptrdiff_t)c->es : NULL;
}

/* ---------------------------------------------------------------- runtime.c */

/* Reads the plan for `device` through the binding layer: regions, shards, buffer roles and sizes,
 * compute bindings, collectives, data-parallel rank. Local: no communication, so that every rank can report a bad
 * plan before the collective setup. */
int exec_cpu_open(exec_cpu **out, const plan_set *p, int device, int world,
                  const exec_cpu_options *o, base_error *e);
void exec_cpu_close(exec_cpu *c);
int exec_cpu_compute(exec_cpu *c, int instr, const plan_instr *in, base_error *e);
int exec_cpu_alloc(exec_cpu *c, int buf, int64_t plan_bytes, base_error *e);
int exec_cpu_release(exec_cpu *c, int buf, base_error *e);
/* Storage of a live plan buffer, or NULL with an error naming the instruction's need. */
char *exec_cpu_buf(exec_cpu *c, int buf, const char *what, base_error *e);
/* Memory the executor allocates outside plan buffers (slots, staging). */
void *exec_cpu_scratch(exec_cpu *c, size_t bytes);
void exec_cpu_scratch_free(exec_cpu *c, void *p, size_t bytes);

typedef struct exec_cpu_step_stats {
    double loss, aux_loss;  /* this device's share of the step's loss */
    double grad_norm;       /* when the plan computes it; else -1 */
    double seconds;
    double peak, plan_peak; /* bytes */
} exec_cpu_step_stats;

/* One training step: data, the interpreter over the list, the figures. */
int exec_cpu_step(exec_cpu *c, exec_interp *it, int64_t step, exec_cpu_step_stats *st,
                  base_error *e);
/* Prints, per memory category, the bytes of this device's buffers as the plan sizes them and as
 * the executor holds them (the kernels' fp32/fp64 layouts, full gradients under ZeRO-2). */
void exec_cpu_print_memory(const exec_cpu *c, FILE *f);
/* Prints, for the last step, what this device held and moved next to what its plan says, in bytes:
 * parameters, gradients, communicated bytes and peak memory (exec/README.md, "Accounting"). One
 * line that tests/exec_mpi/accounting.sh reads. */
void exec_cpu_print_accounting(const exec_cpu *c, FILE *f);
/* Writes every parameter tensor this device updates (its ZeRO shard) to dir/params.dev<d>.txt. */
int exec_cpu_dump_params(exec_cpu *c, const char *dir, base_error *e);

/* ---------------------------------------------------------------- startup.c */

/* The start-up watchdog (startup.c): begun before MPI_Init with --timeout (0: none), it ends the
 * process with a message naming the ranks that have not arrived when start-up has not ended in
 * time. Phases: 2 once MPI is up, 3 on entering the start-up agreement. */
typedef struct exec_startup exec_startup;
exec_startup *exec_startup_begin(double timeout_s);
void exec_startup_phase(exec_startup *s, int phase);
/* Start-up is over (or failed with a message): stops the watcher, removes this rank's mark. */
void exec_startup_end(exec_startup *s);

/* ---------------------------------------------------------------- checkpoint.c */

/* What a checkpoint records besides the tensors (exec/README.md, "Checkpoints"). */
typedef struct exec_ckpt_meta {
    int64_t step;           /* the last step it includes */
    uint64_t seed;          /* initialisation, data and dropout */
    const char *optimizer;  /* "adamw" | "sgd" */
    const char *data;       /* the token source (exec_data_describe) */
} exec_ckpt_meta;

/* A checkpoint's manifest, read. */
typedef struct exec_ckpt {
    char dir[4096];
    char *model;            /* the model line */
    plan_dtype dtype;
    int64_t step;
    uint64_t seed;
    char optimizer[32], data[4200];
    int nshards;
    struct { char *file; uint64_t bytes, sum; } *shard;
    char *field[6];         /* the manifest's step, seed, optimizer, data, model, tensors lines, as
                             * written: each shard's header must repeat them */
} exec_ckpt;

/* A save of step K (exec/README.md, "Checkpoints"): rank 0 stages DIR/step-K.partial
 * (exec_ckpt_stage, removing what killed saves left), every rank writes its shard there, rank 0
 * the manifest, then exec_ckpt_commit moves it to DIR/step-K and switches DIR/latest. */
void exec_ckpt_stage_name(const char *dir, int64_t step, char *buf, size_t n);
int exec_ckpt_stage(const char *dir, int64_t step, base_error *e);
/* Writes this device's shard (STAGE/shard.devD.bin, fsynced) after c->step, its header repeating
 * the manifest's fields; *bytes and *sum are what the manifest records of it. */
int exec_cpu_save_shard(exec_cpu *c, const char *stage, const exec_ckpt_meta *meta, uint64_t *bytes,
                        uint64_t *sum, base_error *e);
/* Rank 0, once every shard is written: STAGE/manifest.txt, which completes the checkpoint. */
int exec_ckpt_write_manifest(const char *dir, const plan_set *p, plan_dtype dt,
                             const exec_ckpt_meta *meta, int nshards, const uint64_t *bytes,
                             const uint64_t *sums, base_error *e);
/* Before the first step: creates DIR and checks that this rank can write there, so that a bad
 * --save path fails at the start, not after the run. */
int exec_ckpt_probe_dir(const char *dir, int dev, base_error *e);
/* Rank 0, once the manifest is written: STAGE becomes DIR/step-K (final), in one rename (an
 * exchange when step-K exists), fsynced; then DIR/latest names it; then, with keep > 0, only
 * the checkpoint latest names and the keep - 1 others of the highest steps are left. */
int exec_ckpt_commit(const char *dir, int64_t step, int keep, char *final, size_t n, base_error *e);
/* The checkpoint DIR means, into buf: DIR itself when it has a manifest (or is a step-N
 * directory, whose reading then reports it incomplete), else the step directory DIR/latest
 * names. Fails naming DIR or DIR/latest when neither leads to a checkpoint. */
int exec_ckpt_resolve(const char *dir, char *buf, size_t n, base_error *e);
/* Reads and checks DIR's manifest; exec_ckpt_free releases it. */
int exec_ckpt_read(exec_ckpt *ck, const char *dir, base_error *e);
/* The same from the manifest's text (PATH names it in errors): what exec_ckpt_read does once it
 * has read the file, apart so that the fuzzer (tests/fuzz/fuzz_ckpt.c) reaches it. */
int exec_ckpt_parse(exec_ckpt *ck, const char *dir, const char *path, const char *text, size_t len,
                    base_error *e);
/* A shard's record: a run of consecutive global elements of one tensor, then as many first and
 * second moments (3 * cnt values of the shard's element size). */
typedef struct exec_ckpt_record {
    char name[160];
    uint64_t dim[3], g0, cnt;
    const char *vals;
} exec_ckpt_record;
/* Checks a shard's header (24 bytes: magic, version, element size, device, the length of the
 * header text that follows, which repeats the manifest's checkpoint fields) and gives its
 * element size and where its first record starts. */
int exec_ckpt_shard_header(const char *path, const char *buf, uint64_t n, size_t *es, uint64_t *first,
                           base_error *e);
/* The record at *pos of the shard's N bytes (from *first, after the header), moving *pos past it:
 * 1 for a record, 0 at the end, -1 (with a message naming the byte) for one that does not fit. */
int exec_ckpt_shard_next(const char *path, const char *buf, uint64_t n, size_t es, uint64_t *pos,
                         exec_ckpt_record *r, base_error *e);
void exec_ckpt_free(exec_ckpt *ck);
/* Fails, naming the first difference, when the checkpoint's model is not the plan's. */
int exec_ckpt_check_plan(const exec_ckpt *ck, const plan_set *p, base_error *e);
/* Loads the parameters and optimizer state this device holds from every shard (any strategy's),
 * checking sizes, checksums, shapes and that every element it needs is present. Before step 1. */
int exec_cpu_resume(exec_cpu *c, const exec_ckpt *ck, base_error *e);

/* ---------------------------------------------------------------- trace.c */

/* piper-exec --trace: the events of every step, recorded by the interpreter's observer. */
typedef struct exec_cpu_trace {
    exec_cpu *c;
    double t0;              /* rank 0's start: the trace's time 0 */
    int64_t n, cap;
    double *ev;             /* per event: stream, instruction, members, step, start, end */
} exec_cpu_trace;

/* Collective (rank 0 broadcasts the start time). */
void exec_cpu_trace_init(exec_cpu_trace *t, exec_cpu *c);
/* The exec_interp_observer; ctx is the exec_cpu_trace. */
void exec_cpu_trace_observer(void *ctx, int stream, const int *instrs, int n, double t_start, double t_end);
/* Collective: rank 0 gathers every rank's events and writes the Chrome trace to path. */
int exec_cpu_trace_write(exec_cpu_trace *t, const char *path, base_error *e);
void exec_cpu_trace_free(exec_cpu_trace *t);

/* ---------------------------------------------------------------- backend_mpi.c */

/* Creates the communicators (collective over MPI_COMM_WORLD: every rank calls it, in step) and
 * fills c->be, the backend the interpreter drives. */
int exec_cpu_connect(exec_cpu *c, base_error *e);
void exec_cpu_disconnect(exec_cpu *c);
/* The reduce callback of the head's vocab-parallel cross-entropy (ctx: the exec_cpu; the
 * group is the head's TP group). */
int exec_cpu_head_reduce(void *ctx, void *buf, int64_t n, plan_dtype dt, exec_reduce_op op,
                         base_error *e);
/* Fails when another rank has reported a failure (its message becomes the error). */
int exec_cpu_check_peers(exec_cpu *c, base_error *e);
/* Tells every other rank that this one failed with `msg` (best effort, bounded wait). */
void exec_cpu_notify_failure(exec_cpu *c, const char *msg);
/* Waits for a request with the watchdog's timeout, naming `what` when it expires. */
int exec_cpu_wait(exec_cpu *c, MPI_Request *r, const char *what, base_error *e);
/* The longest answer a rank gives the watchdog's question. */
#define EXEC_CPU_ANSWER 480
/* The interpreter whose streams this rank's answers describe. */
void exec_cpu_attach(exec_cpu *c, const struct exec_interp *it);
/* After this rank's watchdog fired (e holds its message): asks every other rank where it stands,
 * waiting at most EXEC_CPU_ASK_S, and rewrites e to name the ranks that did not answer (stopped,
 * or stuck in one computation) and what the others wait for; or, when every rank answers, says
 * that none stopped and where each stands. When another rank's failure notice arrives meanwhile,
 * e becomes that notice ("stopping because ..."). */
void exec_cpu_find_culprit(exec_cpu *c, base_error *e);

#endif
