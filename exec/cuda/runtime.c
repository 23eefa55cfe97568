/* runtime.c — the CUDA plan runtime (cuda_exec.h): the CUDA kernels' answers to the binding layer
 * (exec/bind.h: regions, buffer roles, computes, collectives and the data-parallel rank, read
 * once for every backend; here the layouts, storage sizes and kernel table), what the runtime
 * refuses of that reading, and the exec_backend over CUDA streams, events, the caching allocator
 * and NCCL. Plain C: CUDA is
 * reached through rt_cuda.h and the kernels' C interface, NCCL through nccl_dl.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../bind.h"
#include "../data.h"
#include "cuda_exec.h"
#include "nccl_dl.h"
#include "rt_cuda.h"
#include "rt_host.h"

/* ---------------------------------------------------------------- the runtime's state */

/* A plan buffer, region, compute and collective: exec/bind.h's records, which the CPU executor
 * reads too; buffer bytes are the runtime's, in the CUDA kernels' layouts. exec_compute.kernel is
 * an exec_cuda_kernel of the CUDA table (cuda_kernel). */
static inline const exec_cuda_kernel *cuda_kernel(const exec_compute *b) { return b->kernel; }

/* A collective instruction: exec_coll (bind.h), comm the key index (-1 for a group of
 * one). */

typedef struct rt_req {
    bool used;
    int instr;              /* its completion is done_ev[last member] */
} rt_req;

/* Device scalars of a step (doubles): the head's loss per micro-batch, each gate's aux loss per
 * (micro-batch, region), the norm, a scratch output, one clipping coefficient per region. */
typedef struct rt_scalars {
    double *base;
    int64_t n;
    double *loss, *gate, *norm, *scratch, *coef;
} rt_scalars;

struct exec_cuda_rt {
    const plan_set *p;
    int dev, world, gpu;
    const plan_list *L;
    exec_cuda_options o;
    exec_cfg cfg;
    int64_t nmb, dp_size, dp_rank, T; /* the binding's micro-batches and data-parallel rank */
    exec_bind bd;           /* the plan as read for this device (exec/bind.h) */
    void **slot;            /* slots' storage (exec_slot_index), bd.slot_bytes each */
    /* CUDA */
    exec_cuda_streams sm;
    void **stream;          /* per plan stream */
    exec_cuda_ctx **ctx;    /* per plan stream with computes (ctx[0] always: initialisation) */
    void **rec_ev;          /* per RECORD instruction */
    void **done_ev;         /* per communication instruction (and, traced, every compute) */
    void **start_ev;        /* traced: per instruction with an end event */
    void *step_ev;          /* traced: the step's start, on stream 0 */
    int *sr_first, *sr_last;
    exec_cuda_pool pool;
    int32_t **tokens, **targets; /* device, per micro-batch */
    int32_t *htok, *htgt;   /* host staging */
    rt_scalars sc;
    /* communicators */
    exec_cuda_comm_key *keys;
    int nkeys;
    void **comm;            /* per key, NULL where not a member */
    int head_comm;
    rt_req *req;
    int nreq;
    /* figures */
    int64_t step;
    double plan_live, plan_peak;
    bool traced;            /* the last step was timed */
    exec_backend be;
};

static const char *buf_name(const exec_cuda_rt *r, int b) { return exec_buf_name(r->L, b); }

static const char *stream_name(const plan_list *L, int s)
{
    return s >= 0 && s < L->nstreams && L->streams[s] ? L->streams[s] : "";
}

/* ---------------------------------------------------------------- reading the plan */

/* The binding's questions (exec/bind.h), answered with the CUDA kernels' layouts. */
static int cuda_layout(void *ctx, const exec_region *R, exec_layout *out, base_error *e)
{
    const exec_cuda_rt *r = ctx;
    return exec_cuda_region_sizes(&r->cfg, &R->sh, R->kind, out, e);
}

static int cuda_act_split(void *ctx, const exec_region *R, exec_act_mode mode, int64_t *kept,
                          int64_t *rebuilt, base_error *e)
{
    const exec_cuda_rt *r = ctx;
    return exec_cuda_region_act_split(&r->cfg, &R->sh, R->kind, mode, kept, rebuilt, e);
}

static const void *cuda_kernel_find(const char *kid, int *kind, int *family)
{
    const exec_cuda_kernel *k = exec_cuda_kernel_find(kid);
    if (k) *kind = k->kind, *family = k->family;
    return k;
}

/* What the binding reads that the runtime does not run yet, or runs only from the plan's own
 * buffers (it keeps no memory of its own for them): refused here, naming the instruction. */
static int check_supported(const exec_cuda_rt *r, base_error *e)
{
    const exec_bind *d = &r->bd;
    const plan_list *L = r->L;
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        if (in->op == PLAN_COMPUTE) {
            const exec_compute *b = &d->comp[i];
            if (b->aux || !b->kernel || in->pass == PLAN_PASS_UPD) continue;
            const exec_region *R = &d->reg[b->region];
            const bool fwd = in->pass == PLAN_PASS_F || in->pass == PLAN_PASS_R;
            if ((fwd ? R->sz.work_f_bytes : R->sz.work_bytes) > 0 && b->work < 0) {
                base_errorf(e, "the %s pass of %s has no workspace in the plan; the CUDA kernels "
                               "keep their statistics and intermediate gradients there: recompile "
                               "the plan with this version of piper-compile",
                            plan_pass_name((plan_pass)in->pass), R->name);
                return exec_bind_instr_error(d, i, e);
            }
            continue;
        }
        if (in->op != PLAN_COLL) continue;
        const exec_coll *C = &d->coll[i];
        if (C->kind == EXEC_COLL_ACT && in->coll > PLAN_ALL_TO_ALL) {
            base_errorf(e, "a %s of an activation buffer; the CUDA runtime moves activations with "
                           "all-reduce, reduce-scatter, all-gather or all-to-all",
                        plan_coll_name((plan_coll)in->coll));
            return exec_bind_instr_error(d, i, e);
        }
        if (C->kind == EXEC_COLL_PARAM_GATHER && C->out < 0 && in->nwrites > 0) {
            base_errorf(e, "an all-gather of parameters into %s, which is no gathered copy; the "
                           "CUDA runtime gathers parameters in place or into a ZeRO-3 copy",
                        exec_buf_name(L, in->writes[0]));
            return exec_bind_instr_error(d, i, e);
        }
        if (C->kind == EXEC_COLL_PARAM_GATHER && C->out >= 0 && !d->reg[in->region].here) {
            base_errorf(e, "an all-gather of parameters into %s for a region this device does not "
                           "compute",
                        exec_buf_name(L, C->out));
            return exec_bind_instr_error(d, i, e);
        }
        if (C->kind != EXEC_COLL_GRAD_SCATTER && C->kind != EXEC_COLL_PARAM_GATHER) continue;
        for (int s = 0; s < C->nseg; s++) {
            const exec_region *R = &d->reg[C->seg[s].region];
            if (!exec_group_holds(r->p, d->holds, C->group, C->seg[s].region) || R->ncopy) {
                base_errorf(e, "%s of region %s over group %s: the CUDA runtime supports ZeRO over "
                               "data-parallel groups of regions without a tied copy only",
                            plan_coll_name((plan_coll)in->coll), R->name,
                            r->p->groups[C->group].name ? r->p->groups[C->group].name : "?");
                return exec_bind_instr_error(d, i, e);
            }
        }
        /* the device's pieces arrive in the plan's receive buffer (fp32 here) */
        if (C->kind == EXEC_COLL_GRAD_SCATTER && (in->buf < 0 || L->bufs[in->buf].mem != PLAN_MEM_COMM)) {
            base_errorf(e, "a gradient reduce-scatter without a receive buffer; recompile the plan "
                           "with this version of piper-compile");
            return exec_bind_instr_error(d, i, e);
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- the allocator's device side */

static int pool_raw_alloc(void *ctx, size_t bytes, void **p, base_error *e)
{
    (void)ctx;
    return exec_cuda_malloc(p, bytes, e);
}

static void pool_raw_free(void *ctx, void *p)
{
    (void)ctx;
    exec_cuda_free(p);
}

static int pool_fence_record(void *ctx, int stream, void **fence, base_error *e)
{
    exec_cuda_rt *r = ctx;
    if (exec_cuda_event_new(fence, false, e)) return -1;
    if (exec_cuda_event_record(*fence, r->stream[stream], e)) {
        exec_cuda_event_free(*fence);
        *fence = NULL;
        return -1;
    }
    return 0;
}

static int pool_fence_done(void *ctx, void *fence, bool *done, base_error *e)
{
    (void)ctx;
    return exec_cuda_event_query(fence, done, e);
}

static int pool_fence_wait(void *ctx, void *fence, base_error *e)
{
    (void)ctx;
    return exec_cuda_event_sync(fence, e);
}

static void pool_fence_free(void *ctx, void *fence)
{
    (void)ctx;
    exec_cuda_event_free(fence);
}

/* ---------------------------------------------------------------- open and close */

static int create_cuda(exec_cuda_rt *r, base_error *e)
{
    const plan_list *L = r->L;
    const int ns = r->sm.nstreams;
    if (exec_cuda_set_device(r->gpu, e)) return -1;
    r->stream = base_xcalloc((size_t)ns, sizeof *r->stream);
    r->ctx = base_xcalloc((size_t)ns, sizeof *r->ctx);
    for (int s = 0; s < ns; s++)
        if (exec_cuda_stream_new(&r->stream[s], e)) return -1;
    bool *has = base_xcalloc((size_t)ns, sizeof *has);
    has[0] = true;
    for (int i = 0; i < L->n; i++)
        if (L->ins[i].op == PLAN_COMPUTE) has[L->ins[i].stream] = true;
    int rc = 0;
    for (int s = 0; s < ns && !rc; s++)
        if (has[s]) rc = exec_cuda_ctx_new(&r->ctx[s], r->gpu, r->stream[s], e);
    free(has);
    if (rc) return -1;
    r->rec_ev = base_xcalloc((size_t)(r->sm.nrecords + 1), sizeof *r->rec_ev);
    for (int k = 0; k < r->sm.nrecords; k++)
        if (exec_cuda_event_new(&r->rec_ev[k], false, e)) return -1;
    const int n = L->n > 0 ? L->n : 1;
    r->done_ev = base_xcalloc((size_t)n, sizeof *r->done_ev);
    if (r->o.trace) r->start_ev = base_xcalloc((size_t)n, sizeof *r->start_ev);
    for (int i = 0; i < L->n; i++) {
        plan_op op = (plan_op)L->ins[i].op;
        bool comm = op == PLAN_SEND || op == PLAN_RECV || op == PLAN_COLL;
        if (!comm && !(r->o.trace && op == PLAN_COMPUTE)) continue;
        if (exec_cuda_event_new(&r->done_ev[i], r->o.trace, e)) return -1;
        if (r->o.trace && exec_cuda_event_new(&r->start_ev[i], true, e)) return -1;
    }
    if (r->o.trace && exec_cuda_event_new(&r->step_ev, true, e)) return -1;
    exec_cuda_pool_ops ops = {r, pool_raw_alloc, pool_raw_free, pool_fence_record,
                              pool_fence_done, pool_fence_wait, pool_fence_free};
    exec_cuda_pool_init(&r->pool, &ops);
    /* data and scalars */
    r->tokens = base_xcalloc((size_t)r->nmb, sizeof *r->tokens);
    r->targets = base_xcalloc((size_t)r->nmb, sizeof *r->targets);
    for (int64_t k = 0; k < r->nmb; k++)
        if (exec_cuda_malloc((void **)&r->tokens[k], (size_t)r->T * 4, e) ||
            exec_cuda_malloc((void **)&r->targets[k], (size_t)r->T * 4, e))
            return -1;
    r->htok = base_xcalloc((size_t)r->T, sizeof *r->htok);
    r->htgt = base_xcalloc((size_t)r->T, sizeof *r->htgt);
    rt_scalars *sc = &r->sc;
    sc->n = r->nmb + r->nmb * r->bd.nreg + 2 + r->bd.nreg;
    if (exec_cuda_malloc((void **)&sc->base, (size_t)sc->n * sizeof(double), e)) return -1;
    sc->loss = sc->base;
    sc->gate = sc->loss + r->nmb;
    sc->norm = sc->gate + r->nmb * r->bd.nreg;
    sc->scratch = sc->norm + 1;
    sc->coef = sc->scratch + 1;
    return 0;
}

int exec_cuda_rt_open(exec_cuda_rt **out, const plan_set *p, int device, int world, int gpu,
                      const exec_cuda_options *o, base_error *e)
{
    *out = NULL;
    if (exec_bind_check_device(p, device, e)) return -1;
    exec_cuda_rt *r = base_xcalloc(1, sizeof *r);
    r->p = p;
    r->dev = device;
    r->world = world;
    r->gpu = gpu;
    r->L = plan_dev_list(p, device);
    r->o = *o;
    r->head_comm = -1;
    int rc = 0;
    const plan_list *L = r->L;
    if ((rc = exec_cfg_from_plan(&p->model, o->seed, &r->cfg, e))) goto done;
    r->T = r->cfg.b * r->cfg.s;
    const exec_bind_ops ops = {"CUDA runtime", "CUDA kernels", "CUDA backend", 2, 4,
                               o->optim.kind == EXEC_ADAMW ? 12 : 4, cuda_layout, cuda_act_split,
                               cuda_kernel_find, r};
    if ((rc = exec_bind_open(&r->bd, p, device, &r->cfg, &ops, e)) || (rc = check_supported(r, e)))
        goto done;
    r->nmb = r->bd.nmb;
    r->dp_size = r->bd.dp_size;
    r->dp_rank = r->bd.dp_rank;
    r->slot = base_xcalloc((size_t)((int64_t)r->bd.nreg * r->nmb * EXEC_NSLOT) + 1, sizeof *r->slot);
    r->cfg.loss_scale = 1.0 / (double)(p->model.global_batch * r->cfg.s);
    r->cfg.aux_weight = 1.0 / (double)(r->nmb * r->dp_size);
    if ((rc = exec_cuda_streams_init(&r->sm, p, p->devices[device].list, e))) goto done;
    r->sr_first = base_xcalloc((size_t)(L->n + 1), sizeof(int));
    r->sr_last = base_xcalloc((size_t)(L->n + 1), sizeof(int));
    exec_cuda_sendrecv_spans(&r->sm.ix, r->sr_first, r->sr_last);
    if ((rc = exec_cuda_comm_keys(p, r->bd.head_region, &r->keys, &r->nkeys, e))) goto done;
    rc = create_cuda(r, e);
done:
    if (rc) {
        exec_cuda_rt_close(r);
        return -1;
    }
    *out = r;
    return 0;
}

void exec_cuda_rt_close(exec_cuda_rt *r)
{
    if (!r) return;
    base_error e;
    base_error_clear(&e);
    if (r->stream)
        for (int s = 0; s < r->sm.nstreams; s++)
            if (r->stream[s]) exec_cuda_stream_sync(r->stream[s], &e);
    if (r->comm)
        for (int k = 0; k < r->nkeys; k++) exec_nccl_destroy(r->comm[k]);
    free(r->comm);
    exec_cuda_comm_keys_free(r->keys, r->nkeys);
    if (r->bd.buf) {
        for (int b = 0; b < r->L->nbufs; b++)
            if (r->bd.buf[b].p)
                exec_cuda_pool_free(&r->pool, r->bd.buf[b].p, (size_t)r->bd.buf[b].bytes, -1, &e);
    }
    if (r->slot)
        for (int64_t s = 0; s < (int64_t)r->bd.nreg * r->nmb * EXEC_NSLOT; s++)
            if (r->slot[s])
                exec_cuda_pool_free(&r->pool, r->slot[s], (size_t)r->bd.slot_bytes[s], -1, &e);
    if (r->stream) exec_cuda_pool_destroy(&r->pool);
    free(r->slot);
    if (r->tokens)
        for (int64_t k = 0; k < r->nmb; k++) exec_cuda_free(r->tokens[k]), exec_cuda_free(r->targets[k]);
    free(r->tokens);
    free(r->targets);
    free(r->htok);
    free(r->htgt);
    exec_cuda_free(r->sc.base);
    if (r->rec_ev)
        for (int k = 0; k < r->sm.nrecords; k++) exec_cuda_event_free(r->rec_ev[k]);
    free(r->rec_ev);
    for (int i = 0; i < r->L->n; i++) {
        if (r->done_ev) exec_cuda_event_free(r->done_ev[i]);
        if (r->start_ev) exec_cuda_event_free(r->start_ev[i]);
    }
    free(r->done_ev);
    free(r->start_ev);
    exec_cuda_event_free(r->step_ev);
    if (r->ctx)
        for (int s = 0; s < r->sm.nstreams; s++) exec_cuda_ctx_free(r->ctx[s]);
    free(r->ctx);
    if (r->stream)
        for (int s = 0; s < r->sm.nstreams; s++) exec_cuda_stream_free(r->stream[s]);
    free(r->stream);
    exec_cuda_streams_free(&r->sm);
    free(r->sr_first);
    free(r->sr_last);
    free(r->req);
    exec_bind_close(&r->bd);
    free(r);
}

int64_t exec_cuda_rt_dp_size(const exec_cuda_rt *r) { return r->dp_size; }

/* ---------------------------------------------------------------- communicators */

int exec_cuda_rt_connect(exec_cuda_rt *r, void *world_comm, base_error *e)
{
    r->comm = base_xcalloc((size_t)(r->nkeys + 1), sizeof *r->comm);
    if (r->nkeys == 0) return 0;
    /* a group of one needs no communicator (its collectives are copies); every other key is
     * split from the world communicator by every rank, in the keys' order */
    bool need = false;
    for (int k = 0; k < r->nkeys; k++) need |= r->keys[k].nmembers > 1;
    if (need && !world_comm)
        return base_errorf(e, "the plan communicates between devices but this run has no world "
                              "communicator; start one rank per device (mpirun -np %d)",
                           r->p->ndevices);
    for (int k = 0; k < r->nkeys; k++) {
        if (r->keys[k].nmembers <= 1) continue;
        int rank = exec_cuda_comm_rank(&r->keys[k], r->dev);
        if (exec_nccl_split(world_comm, rank >= 0 ? k : -1, rank >= 0 ? rank : 0, &r->comm[k], e)) {
            base_error_prefix(e, "creating the communicator of %s: ",
                              r->keys[k].kind == EXEC_CUDA_COMM_GROUP ? "a group" : "a transfer");
            return -1;
        }
    }
    for (int i = 0; i < r->L->n; i++) {
        const plan_instr *in = &r->L->ins[i];
        if (in->op == PLAN_COLL) {
            exec_coll *C = &r->bd.coll[i];
            if (C->gsize > 1) C->comm = exec_cuda_comm_find_group(r->keys, r->nkeys, C->group, stream_name(r->L, in->stream));
        }
    }
    if (r->bd.head_region >= 0 && r->bd.reg[r->bd.head_region].tp_group >= 0 &&
        r->p->groups[r->bd.reg[r->bd.head_region].tp_group].n > 1)
        r->head_comm = exec_cuda_comm_find_group(r->keys, r->nkeys, r->bd.reg[r->bd.head_region].tp_group,
                                                 EXEC_CUDA_REDUCE_STREAM);
    return 0;
}

/* ---------------------------------------------------------------- buffers */

/* The region's whole block: bf16 values at w, and their fp32 copy at master when not NULL. */
static int init_block(exec_cuda_rt *r, exec_region *R, uint16_t *w, float *master, base_error *e)
{
    char name[160];
    for (int t = 0; t < R->npar; t++) {
        snprintf(name, sizeof name, "%s.%s", R->name, R->par[t].name);
        if (exec_cuda_param_init(r->ctx[0], r->cfg.seed, name, &R->par[t], w + R->par[t].offset,
                                 master ? master + R->par[t].offset : NULL, e))
            return -1;
    }
    if (R->ncopy) {
        /* the same name as the embedding's own table, so both copies start equal */
        const char *en = r->bd.embed_region >= 0 ? r->bd.reg[r->bd.embed_region].name : "embed";
        snprintf(name, sizeof name, "%s.%s", en, R->copy.name);
        if (exec_cuda_param_init(r->ctx[0], r->cfg.seed, name, &R->copy, w + R->copy.offset,
                                 master ? master + R->copy.offset : NULL, e))
            return -1;
    }
    /* once, before any stream reads them */
    return exec_cuda_stream_sync(r->stream[0], e);
}

/* The initial values of [lo, lo + n) of a region's block, bf16 into w or fp32 into master:
 * they are a function of the global index, so a piece (ZeRO) is cut from the whole block
 * initialised in a scratch allocation. */
static int init_piece(exec_cuda_rt *r, exec_region *R, int64_t lo, int64_t n, uint16_t *w,
                      float *master, base_error *e)
{
    if (w && lo == 0 && n == R->nstore) return init_block(r, R, w, NULL, e);
    void *all = NULL;
    if (exec_cuda_malloc(&all, (size_t)(6 * R->nstore), e)) return -1;
    uint16_t *w_all = all;
    float *m_all = (float *)((char *)all + 2 * R->nstore);
    int rc = init_block(r, R, w_all, master ? m_all : NULL, e);
    void *s = r->stream[0];
    if (!rc && w) rc = exec_cuda_copy_d2d(s, w, w_all + lo, (size_t)n * 2, e);
    if (!rc && master) rc = exec_cuda_copy_d2d(s, master, m_all + lo, (size_t)n * 4, e);
    if (!rc) rc = exec_cuda_stream_sync(s, e);
    exec_cuda_free(all);
    return rc;
}

static int rt_alloc(void *ctx, int instr, int b, int64_t plan_bytes, base_error *e)
{
    exec_cuda_rt *r = ctx;
    exec_buf *B = &r->bd.buf[b];
    if (B->live) return base_errorf(e, "buffer %s is already live", buf_name(r, b));
    if (!B->p) {
        void *q = NULL;
        if (exec_cuda_pool_alloc(&r->pool, (size_t)B->bytes, &q, e)) {
            base_error_prefix(e, "buffer %s: ", buf_name(r, b));
            return -1;
        }
        B->p = q;
    }
    void *s = r->stream[r->L->ins[instr].stream];
    if (B->role == EXEC_BUF_GRAD && exec_cuda_zero(s, B->p, (size_t)B->bytes, e)) return -1;
    if (B->role == EXEC_BUF_OPT && !B->init) {
        /* the master copy of the piece the update steps, then zero moments */
        exec_region *R = &r->bd.reg[B->region];
        const int64_t n = R->upd_hi - R->upd_lo;
        if (exec_cuda_zero(s, B->p, (size_t)B->bytes, e) ||
            exec_cuda_stream_sync(s, e) ||
            init_piece(r, R, R->upd_lo, n, NULL, (float *)B->p, e))
            return -1;
        B->init = true;
    }
    if (B->role == EXEC_BUF_PARAM && !B->init) {
        exec_region *R = &r->bd.reg[B->region];
        if (init_piece(r, R, R->param_lo, R->param_n, (uint16_t *)B->p, NULL, e)) return -1;
        B->init = true;
    }
    B->live = true;
    r->plan_live += (double)plan_bytes;
    if (r->plan_live > r->plan_peak) r->plan_peak = r->plan_live;
    return 0;
}

/* Buffers kept across steps: parameters, optimizer state and the kept gradients (a ZeRO-2/3
 * micro-batch's whole gradient goes back to the pool when the plan frees it). */
static bool persistent(const exec_cuda_rt *r, int b)
{
    const exec_buf *B = &r->bd.buf[b];
    if (B->role == EXEC_BUF_GRAD) return B->region >= 0 && r->bd.reg[B->region].grad_buf == b;
    return B->role == EXEC_BUF_PARAM || B->role == EXEC_BUF_OPT;
}

static int rt_release(void *ctx, int instr, int b, base_error *e)
{
    exec_cuda_rt *r = ctx;
    exec_buf *B = &r->bd.buf[b];
    if (!B->live) return base_errorf(e, "buffer %s is not live", buf_name(r, b));
    B->live = false;
    r->plan_live -= (double)r->L->bufs[b].bytes;
    if (!persistent(r, b)) {
        if (exec_cuda_pool_free(&r->pool, B->p, (size_t)B->bytes, r->L->ins[instr].stream, e)) return -1;
        B->p = NULL;
    }
    return 0;
}

static void *buf_ptr(exec_cuda_rt *r, int b, const char *what, base_error *e)
{
    if (b < 0 || b >= r->L->nbufs) {
        base_errorf(e, "%s: no buffer", what);
        return NULL;
    }
    if (!r->bd.buf[b].live || !r->bd.buf[b].p) {
        base_errorf(e, "%s: buffer %d (%s) is not live; the plan uses it outside its alloc/free",
                    what, b, buf_name(r, b));
        return NULL;
    }
    return r->bd.buf[b].p;
}

static void *slot_get(exec_cuda_rt *r, int s, bool create, const char *what, base_error *e)
{
    if (!r->slot[s] && create &&
        exec_cuda_pool_alloc(&r->pool, (size_t)r->bd.slot_bytes[s], &r->slot[s], e))
        return NULL;
    if (!r->slot[s]) {
        int g = (int)(s / EXEC_NSLOT / r->nmb), mb = (int)(s / EXEC_NSLOT % r->nmb);
        base_errorf(e, "%s of region %s, micro-batch %d, was never produced on this device", what,
                    r->bd.reg[g].name, mb);
    }
    return r->slot[s];
}

static int slot_drop(exec_cuda_rt *r, int s, int stream, base_error *e)
{
    int rc = exec_cuda_pool_free(&r->pool, r->slot[s], (size_t)r->bd.slot_bytes[s], stream, e);
    r->slot[s] = NULL;
    return rc;
}

/* ---------------------------------------------------------------- computes */

/* The head's vocabulary-parallel reductions: NCCL all-reduces on the head's TP communicator, on
 * the stream the head's kernels run on (device memory, fp32). */
typedef struct head_reduce_ctx {
    exec_cuda_rt *r;
    void *stream;
} head_reduce_ctx;

static int head_reduce(void *ctx, void *buf, int64_t n, plan_dtype dt, exec_reduce_op op,
                       base_error *e)
{
    head_reduce_ctx *h = ctx;
    if (h->r->head_comm < 0 || !h->r->comm[h->r->head_comm])
        return base_errorf(e, "the head's vocabulary-parallel reduction has no communicator");
    return exec_nccl_all_reduce(buf, buf, (size_t)n, dt == PLAN_FP64 ? EXEC_NCCL_F64 : EXEC_NCCL_F32,
                                op == EXEC_REDUCE_MAX ? EXEC_NCCL_MAX : EXEC_NCCL_SUM,
                                h->r->comm[h->r->head_comm], h->stream, e);
}

static int run_upd(exec_cuda_rt *r, exec_cuda_ctx *x, exec_region *R, const exec_compute *b, base_error *e)
{
    char *param = buf_ptr(r, R->param_buf, "the parameters", e);
    char *grad = param ? buf_ptr(r, R->grad_buf, "the gradients", e) : NULL;
    char *opt = grad ? buf_ptr(r, R->opt_buf, "the optimizer state", e) : NULL;
    if (!opt) return -1;
    /* the update steps [lo, lo + n) of the region's block: the whole block, or a ZeRO piece (never
     * with a tied copy: refused at open); each buffer holds it from its own first element */
    const int64_t lo = R->upd_lo, n = R->upd_hi - R->upd_lo;
    if (n <= 0) return 0; /* an empty piece updates nothing (upd_n 0 would mean the whole block) */
    exec_optim o = r->o.optim;
    o.t = r->step;
    o.grad_scale = 1.0;
    exec_cuda_call call;
    memset(&call, 0, sizeof call);
    call.c.cfg = &r->cfg;
    call.c.shard = &R->sh;
    call.c.dtype = PLAN_BF16;
    call.c.layer = R->layer;
    call.c.step = r->step;
    call.c.opt = &o;
    call.c.param = param + (size_t)(lo - R->param_lo) * 2;
    call.c.grad = grad + (size_t)(lo - R->grad_lo) * 4;
    call.master = (float *)opt;
    call.c.opt_m = opt + (size_t)n * 4;
    call.c.opt_v = opt + (size_t)n * 8;
    call.ctx = x;
    call.c.upd_off = lo;
    call.c.upd_n = lo == 0 && n == R->nstore ? R->nkern : n;
    if (r->bd.has_norm && r->o.grad_clip > 0) {
        /* the coefficient on this stream, after the norm's all-reduce the plan orders before */
        double *coef = r->sc.coef + (R - r->bd.reg);
        if (exec_cuda_clip_coef(x, r->sc.norm, r->o.grad_clip, coef, e)) return -1;
        call.grad_scale = coef;
    }
    if (call.c.upd_n > 0 && exec_cuda_kernel_run(cuda_kernel(b), &call, e)) return -1;
    if (!R->ncopy) return 0;
    /* the tied token table's copy: the embedding's update of its token table (a matrix, so it
     * decays), on the head's vocabulary shard */
    char id[64];
    snprintf(id, sizeof id, "%s.embed.UPD", r->cfg.gpt ? "gpt" : "llama");
    const size_t k = (size_t)R->nkern;
    call.c.param = param + k * 2;
    call.c.grad = grad + k * 4;
    call.c.opt_m = opt + ((size_t)n + k) * 4;
    call.c.opt_v = opt + ((size_t)2 * n + k) * 4;
    call.master += k;
    call.c.upd_off = 0;
    call.c.upd_n = R->ncopy;
    return exec_cuda_kernel_run_id(id, &call, e);
}

/* The local part of the squared global norm, as piper-exec's run_grad_norm: each gradient
 * element counted once in the world (ZeRO: the device's piece; data-parallel replicas: the
 * first; TP-replicated tensors: the first TP shard; the tied copy: on the embedding's side), one
 * sum of squares per tensor's part, accumulated on the device. */
static int run_grad_norm(exec_cuda_rt *r, exec_cuda_ctx *x, base_error *e)
{
    bool acc = false;
    for (int k = 0; k < r->bd.nreg; k++) {
        const exec_region *R = &r->bd.reg[k];
        if (!R->upd || R->norm_skip || R->tp_copy || R->nstore == 0) continue;
        const float *g = buf_ptr(r, R->grad_buf, "the gradients", e);
        if (!g) return -1;
        for (int t = 0; t < R->npar; t++) {
            const exec_param *P = &R->par[t];
            if (P->replicated && !R->sh.first) continue;
            const int64_t a = P->offset > R->upd_lo ? P->offset : R->upd_lo;
            const int64_t z = P->offset + P->count < R->upd_hi ? P->offset + P->count : R->upd_hi;
            if (a >= z) continue;
            if (exec_cuda_sumsq_f32(x, g + (a - R->grad_lo), z - a, r->sc.norm, acc, e)) return -1;
            acc = true;
        }
    }
    return acc ? 0 : exec_cuda_sumsq_f32(x, NULL, 0, r->sc.norm, false, e);
}

static void range_name(const exec_cuda_rt *r, int i, char *buf, size_t n)
{
    viz_trace_instr_name(r->p, r->dev, &r->L->ins[i], buf, n);
}

static int compute(exec_cuda_rt *r, int i, const plan_instr *in, exec_cuda_ctx *x, base_error *e)
{
    const exec_compute *b = &r->bd.comp[i];
    if (b->aux == 1) return run_grad_norm(r, x, e);
    if (b->aux == 2) {
        exec_cuda_call call;
        memset(&call, 0, sizeof call);
        exec_shard sh;
        memset(&sh, 0, sizeof sh);
        call.c.cfg = &r->cfg;
        call.c.shard = &sh;
        call.c.layer = -1;
        call.c.nin = r->bd.nreg;
        call.c.scalars_in = r->sc.gate + (int64_t)b->mb * r->bd.nreg;
        call.c.out = r->sc.scratch;
        call.ctx = x;
        return exec_cuda_kernel_run_id("aux.aux_loss", &call, e);
    }
    exec_region *R = &r->bd.reg[b->region];
    if (in->pass == PLAN_PASS_UPD) return run_upd(r, x, R, b, e);
    exec_cuda_call call;
    memset(&call, 0, sizeof call);
    exec_call *c = &call.c;
    call.ctx = x;
    c->cfg = &r->cfg;
    c->shard = &R->sh;
    c->dtype = PLAN_BF16;
    c->layer = R->layer;
    c->step = r->step;
    c->sample0 = (r->dp_rank * r->nmb + b->mb) * r->cfg.b;
    c->out = r->sc.scratch;
    if (in->pass == PLAN_PASS_F && R->kind == EXEC_HEAD && !R->tp_copy) c->out = r->sc.loss + b->mb;
    if (in->pass == PLAN_PASS_F && R->kind == EXEC_MOE_GATE && !R->tp_copy)
        c->out = r->sc.gate + (int64_t)b->mb * r->bd.nreg + b->region;
    if (b->pb >= 0) {
        if (!(c->param = buf_ptr(r, b->pb, "the gathered parameters", e))) return -1;
    } else if (R->param_buf >= 0 && !(c->param = buf_ptr(r, R->param_buf, "the parameters", e))) {
        return -1;
    }
    bool bwd = in->pass == PLAN_PASS_B || in->pass == PLAN_PASS_BI || in->pass == PLAN_PASS_BW;
    const int gb = b->gb >= 0 ? b->gb : R->grad_buf;
    if (bwd && gb >= 0 && !(c->grad = buf_ptr(r, gb, "the gradients", e))) return -1;
    /* F keeps nothing under EXEC_ACT_NONE: R and the backward read R's buffer only */
    const bool act_in_act2 = R->act_mode == EXEC_ACT_NONE && in->pass != PLAN_PASS_F;
    if (!act_in_act2 && !(c->act = buf_ptr(r, b->act, "the saved activations", e))) return -1;
    c->act_mode = (int)R->act_mode;
    /* the pass's workspace; its second part (from exec_work_extra_at) holds what the pass computes
     * and does not keep: F's rebuilt part under recompute, R's outputs */
    const bool fwd = in->pass == PLAN_PASS_F || in->pass == PLAN_PASS_R;
    char *extra = NULL;
    if (b->work >= 0 && r->bd.buf[b->work].bytes > 0) {
        if (!(c->work = buf_ptr(r, b->work, "the workspace", e))) return -1;
        extra = (char *)c->work +
                exec_work_extra_at(fwd ? R->sz.work_f_bytes : R->sz.work_bytes);
    }
    if (R->act_mode != EXEC_ACT_ALL && b->act2 >= 0) {
        if (!(c->act2 = buf_ptr(r, b->act2, "the rebuilt activations", e))) return -1;
    } else if (R->act_mode != EXEC_ACT_ALL && in->pass == PLAN_PASS_F) {
        if (!extra)
            return base_errorf(e, "the forward of %s under recompute has no workspace for the "
                                  "part R rebuilds",
                               R->name);
        c->act2 = extra;
    }
    if (act_in_act2) c->act = c->act2;
    if (b->xg >= 0 && !(c->xg = buf_ptr(r, b->xg, "the gathered norm shards", e))) return -1;
    if (R->kind == EXEC_HEAD && r->cfg.tied && R->ncopy) {
        c->lm_w = (char *)c->param + (size_t)R->nkern * 2;
        if (bwd) c->lm_grad = (char *)c->grad + (size_t)R->nkern * 4;
    } else if (R->kind == EXEC_HEAD && r->cfg.tied) {
        const exec_region *E = &r->bd.reg[r->bd.embed_region];
        if (b->pb >= 0 && r->bd.buf[b->pb].table) {
            /* ZeRO-3: the gathered table follows the head's gathered parameters */
            c->lm_w = (char *)c->param + (size_t)R->nkern * 2;
        } else {
            char *ep = buf_ptr(r, E->param_buf, "the embedding's token table", e);
            if (!ep) return -1;
            c->lm_w = ep + (size_t)E->par[0].offset * 2;
        }
        if (bwd) {
            char *eg = buf_ptr(r, b->egb >= 0 ? b->egb : E->grad_buf, "the embedding's gradients", e);
            if (!eg) return -1;
            c->lm_grad = eg + (size_t)E->par[0].offset * 4;
        }
    }
    head_reduce_ctx hr = {r, r->stream[in->stream]};
    if (R->kind == EXEC_HEAD && R->sh.tp > 1) {
        c->reduce = head_reduce;
        c->reduce_ctx = &hr;
    }
    if (R->kind == EXEC_EMBED) c->tokens = r->tokens[b->mb];
    if (R->kind == EXEC_HEAD) c->targets = r->targets[b->mb];
    void *scratch_y = NULL, *scratch_y2 = NULL;
    if (b->sl.xb >= 0 && !(c->x = buf_ptr(r, b->sl.xb, "the input", e))) return -1;
    if (b->sl.xs >= 0 && !(c->x = slot_get(r, b->sl.xs, false, "the input", e))) return -1;
    if (b->sl.x2s >= 0 && !(c->x2 = slot_get(r, b->sl.x2s, false, "the route", e))) return -1;
    if (b->sl.yb >= 0 && !(c->y = buf_ptr(r, b->sl.yb, "the output", e))) return -1;
    if (b->sl.ys >= 0 && !(c->y = slot_get(r, b->sl.ys, true, "the output", e))) return -1;
    if (b->sl.y2s >= 0 && !(c->y2 = slot_get(r, b->sl.y2s, true, "the route", e))) return -1;
    if (b->sl.x2b >= 0 && !(c->x2 = buf_ptr(r, b->sl.x2b, "the route", e))) return -1;
    if (b->sl.y2b >= 0 && !(c->y2 = buf_ptr(r, b->sl.y2b, "the route", e))) return -1;
    int rc = 0;
    if (in->pass == PLAN_PASS_R) {
        /* a recomputation rebuilds the saved tensors; its outputs were consumed already and go
         * to the workspace's second part (a plan without one: the pool) */
        if (R->kind != EXEC_HEAD && !c->y && extra) {
            c->y = extra;
        } else if (R->kind != EXEC_HEAD && !c->y) {
            rc = exec_cuda_pool_alloc(&r->pool, (size_t)R->sz.y_bytes, &scratch_y, e);
            c->y = scratch_y;
        }
        if (!rc && R->kind == EXEC_MOE_GATE && !c->y2 && extra) {
            c->y2 = extra + (b->sl.yb < 0 ? (size_t)R->sz.y_bytes : 0);
        } else if (!rc && R->kind == EXEC_MOE_GATE && !c->y2) {
            rc = exec_cuda_pool_alloc(&r->pool, (size_t)R->sz.route_bytes, &scratch_y2, e);
            c->y2 = scratch_y2;
        }
        if (R->act_mode == EXEC_ACT_INPUT || R->act_mode == EXEC_ACT_SELECTIVE) {
            /* the input F kept leads its act buffer; the combine's route follows its expert
             * outputs */
            if (!c->x) c->x = c->act;
            if (R->kind == EXEC_MOE_COMBINE && !c->x2)
                c->x2 = (char *)c->act + (R->sz.x_bytes + 15) / 16 * 16; /* 16-byte pieces */
        }
    }
    if (!rc && b->sl.dyb >= 0 && !(c->dy = buf_ptr(r, b->sl.dyb, "the output gradient", e))) rc = -1;
    if (!rc && b->sl.dys >= 0 && !(c->dy = slot_get(r, b->sl.dys, false, "the output gradient", e))) rc = -1;
    if (!rc && b->sl.dy2s >= 0 && !(c->dy2 = slot_get(r, b->sl.dy2s, false, "the route gradient", e))) rc = -1;
    if (!rc && b->sl.dxb >= 0 && !(c->dx = buf_ptr(r, b->sl.dxb, "the input gradient", e))) rc = -1;
    if (!rc && b->sl.dxs >= 0 && !(c->dx = slot_get(r, b->sl.dxs, true, "the input gradient", e))) rc = -1;
    if (!rc && b->sl.dx2s >= 0 && !(c->dx2 = slot_get(r, b->sl.dx2s, true, "the route gradient", e))) rc = -1;
    if (!rc && b->sl.dy2b >= 0 && !(c->dy2 = buf_ptr(r, b->sl.dy2b, "the route gradient", e))) rc = -1;
    if (!rc && b->sl.dx2b >= 0 && !(c->dx2 = buf_ptr(r, b->sl.dx2b, "the route gradient", e))) rc = -1;
    if (!rc) rc = exec_cuda_kernel_run(cuda_kernel(b), &call, e);
    base_error e2;
    base_error_clear(&e2);
    if (scratch_y) exec_cuda_pool_free(&r->pool, scratch_y, (size_t)R->sz.y_bytes, in->stream, &e2);
    if (scratch_y2) exec_cuda_pool_free(&r->pool, scratch_y2, (size_t)R->sz.route_bytes, in->stream, &e2);
    if (rc) return -1;
    const int reads[] = {b->sl.xs, b->sl.x2s, b->sl.dys, b->sl.dy2s};
    for (size_t q = 0; q < BASE_COUNT(reads); q++)
        if (reads[q] >= 0 && r->bd.slot_last[reads[q]] == i && slot_drop(r, reads[q], in->stream, e)) return -1;
    return 0;
}

static int rt_compute(void *ctx, int i, const plan_instr *in, base_error *e)
{
    exec_cuda_rt *r = ctx;
    exec_cuda_ctx *x = r->ctx[in->stream];
    void *s = r->stream[in->stream];
    char name[160];
    if (r->o.nvtx) {
        range_name(r, i, name, sizeof name);
        exec_cuda_range_push(name);
    }
    int rc = 0;
    if (r->o.trace) rc = exec_cuda_event_record(r->start_ev[i], s, e);
    if (!rc) rc = compute(r, i, in, x, e);
    if (!rc && r->o.trace) rc = exec_cuda_event_record(r->done_ev[i], s, e);
    if (r->o.nvtx) exec_cuda_range_pop();
    return rc;
}

/* ---------------------------------------------------------------- communication */

static int req_new(exec_cuda_rt *r, int instr)
{
    for (int k = 0; k < r->nreq; k++)
        if (!r->req[k].used) {
            r->req[k] = (rt_req){true, instr};
            return k;
        }
    r->req = base_xrealloc(r->req, (size_t)(r->nreq + 1) * sizeof *r->req);
    r->req[r->nreq] = (rt_req){true, instr};
    return r->nreq++;
}

static exec_nccl_dtype bytes_dtype(int64_t bytes, int64_t *count)
{
    /* bf16 where the size allows (the reductions sum bf16), else bytes */
    if (bytes % 2 == 0) {
        *count = bytes / 2;
        return EXEC_NCCL_BF16;
    }
    *count = bytes;
    return EXEC_NCCL_U8;
}

static int rt_p2p_start(void *ctx, int i, const plan_instr *in, int peer, int *req, base_error *e)
{
    exec_cuda_rt *r = ctx;
    void *s = r->stream[in->stream];
    const bool send = in->op == PLAN_SEND;
    const char *mine = stream_name(r->L, in->stream);
    const char *theirs = exec_cuda_p2p_peer_stream(r->p, r->dev, i);
    if (!theirs) return base_errorf(e, "no matching %s on device %d", send ? "receive" : "send", peer);
    int k = send ? exec_cuda_comm_find_p2p(r->keys, r->nkeys, r->dev, peer, mine, theirs)
                 : exec_cuda_comm_find_p2p(r->keys, r->nkeys, peer, r->dev, theirs, mine);
    if (k < 0 || !r->comm || !r->comm[k])
        return base_errorf(e, "no communicator for the transfer with device %d", peer);
    void *buf = buf_ptr(r, in->buf, send ? "the data to send" : "the receive buffer", e);
    if (!buf) return -1;
    int64_t count;
    exec_nccl_dtype dt = bytes_dtype(r->bd.buf[in->buf].bytes, &count);
    const bool first = r->sr_first[i] == i, last = r->sr_last[i] == i, grouped = !(first && last);
    char name[160];
    if (r->o.nvtx) {
        range_name(r, i, name, sizeof name);
        exec_cuda_range_push(name);
    }
    int rc = 0;
    if (first && r->o.trace) rc = exec_cuda_event_record(r->start_ev[i], s, e);
    if (!rc && first && grouped) rc = exec_nccl_group_start(e);
    if (!rc) {
        /* the peer's rank in the two-rank communicator: the sender is 0 */
        rc = send ? exec_nccl_send(buf, (size_t)count, dt, 1, r->comm[k], s, e)
                  : exec_nccl_recv(buf, (size_t)count, dt, 0, r->comm[k], s, e);
    }
    if (last && grouped) {
        base_error e2;
        base_error_clear(&e2);
        /* close the group even after a failure, or NCCL stays in group mode */
        if (exec_nccl_group_end(rc ? &e2 : e)) rc = -1;
    }
    if (!rc && last) rc = exec_cuda_event_record(r->done_ev[i], s, e);
    if (r->o.nvtx) exec_cuda_range_pop();
    if (rc) return -1;
    *req = req_new(r, i);
    return 0;
}

/* One piece of an activation collective (exec_piece: its shape is the binding's), issued on
 * stream s; the caller groups it. */
static int piece_act(exec_cuda_rt *r, const plan_instr *in, const exec_coll *C, const exec_piece *P,
                     void *s, base_error *e)
{
    void *ib = buf_ptr(r, P->in, "the collective's input", e);
    void *ob = ib ? buf_ptr(r, P->out, "the collective's output", e) : NULL;
    if (!ob) return -1;
    const int64_t inb = P->in_bytes, outb = P->out_bytes;
    if (C->gsize == 1) return exec_cuda_copy_d2d(s, ob, ib, (size_t)(inb < outb ? inb : outb), e);
    void *comm = r->comm[C->comm];
    int64_t count;
    switch ((plan_coll)in->coll) {
    case PLAN_ALL_REDUCE:
        if (bytes_dtype(inb, &count) != EXEC_NCCL_BF16)
            return base_errorf(e, "an all-reduce of %lld bytes: not bf16 data", (long long)inb);
        return exec_nccl_all_reduce(ib, ob, (size_t)count, EXEC_NCCL_BF16, EXEC_NCCL_SUM, comm, s, e);
    case PLAN_REDUCE_SCATTER:
        if (bytes_dtype(outb, &count) != EXEC_NCCL_BF16)
            return base_errorf(e, "a reduce-scatter into %lld bytes: not bf16 data", (long long)outb);
        return exec_nccl_reduce_scatter(ib, ob, (size_t)count, EXEC_NCCL_BF16, comm, s, e);
    case PLAN_ALL_GATHER: {
        /* SP's backward re-gather sends the leading share of an act buffer (P->in_bytes) */
        exec_nccl_dtype dt = bytes_dtype(inb, &count);
        return exec_nccl_all_gather(ib, ob, (size_t)count, dt, comm, s, e);
    }
    case PLAN_ALL_TO_ALL: {
        /* block k of the input goes to rank k, block k of the output comes from it */
        const int64_t blk = inb / C->gsize;
        exec_nccl_dtype dt = bytes_dtype(blk, &count);
        int rc = 0;
        for (int k = 0; k < C->gsize && !rc; k++) {
            rc = exec_nccl_send((char *)ib + k * blk, (size_t)count, dt, k, comm, s, e);
            if (!rc) rc = exec_nccl_recv((char *)ob + k * blk, (size_t)count, dt, k, comm, s, e);
        }
        return rc;
    }
    default:
        return base_errorf(e, "a %s of activations is not supported by the CUDA runtime",
                           plan_coll_name((plan_coll)in->coll));
    }
}

/* An activation collective: its pieces inside one NCCL group, so that a collective
 * fuse_collectives merged is one launch on the stream over every member's buffers, with each
 * piece the unfused member's operation (the same counts, so the same result). One piece of a
 * kind with one NCCL call needs no group; an all-to-all's sends and receives always do. */
static int coll_act(exec_cuda_rt *r, const plan_instr *in, const exec_coll *C, void *s, base_error *e)
{
    const bool grouped = C->gsize > 1 && (C->npiece > 1 || in->coll == PLAN_ALL_TO_ALL);
    if (grouped && exec_nccl_group_start(e)) return -1;
    int rc = 0;
    for (int k = 0; k < C->npiece && !rc; k++) rc = piece_act(r, in, C, &C->piece[k], s, e);
    if (grouped) {
        base_error e2;
        base_error_clear(&e2);
        /* close the group even after a failure, or NCCL stays in group mode */
        if (exec_nccl_group_end(rc ? &e2 : e)) rc = -1;
    }
    return rc;
}

static int coll_grads(exec_cuda_rt *r, const exec_coll *C, void *s, base_error *e)
{
    if (C->gsize == 1) return 0;
    if (exec_nccl_group_start(e)) return -1;
    int rc = 0;
    for (int k = 0; k < C->nseg && !rc; k++) {
        const exec_seg *g = &C->seg[k];
        float *gr = buf_ptr(r, g->buf >= 0 ? g->buf : r->bd.reg[g->region].grad_buf, "the gradients", e);
        if (!gr) {
            rc = -1;
            break;
        }
        rc = exec_nccl_all_reduce(gr + g->off, gr + g->off, (size_t)g->n, EXEC_NCCL_F32, EXEC_NCCL_SUM,
                                  r->comm[C->comm], s, e);
    }
    base_error e2;
    base_error_clear(&e2);
    if (exec_nccl_group_end(rc ? &e2 : e)) rc = -1;
    return rc;
}

/* ZeRO: the segments of the bucket (whole region blocks; the head's gather of the tied token
 * table: the table's part of the embedding) cut in pieces (seg_piece), each moved with its exact
 * count, with no staging: every byte is a plan buffer.
 *  - A gradient reduce-scatter is one NCCL reduce per non-empty piece, to the piece's rank, into
 *    the plan's receive buffer (the instruction's buf: this device's piece of each segment,
 *    ceil(n / size) elements apart), grouped; then each piece is copied into place (ZeRO-1) or
 *    added into the kept piece (ZeRO-2/3: a micro-batch's gradient).
 *  - A parameter all-gather is one broadcast per piece from its rank into the whole buffer (in
 *    place, ZeRO-1/2) or the gathered copy (ZeRO-3), grouped.
 * NCCL runs a group's operations together, so a bucket's pieces move like one reduce-scatter or
 * all-gather of the same bytes; the copies and additions follow in stream order, so the host
 * does not wait. Each buffer holds its elements from its own first one: a piece buffer (param_lo,
 * grad_lo), a whole one, a micro-batch's whole gradient, or the gathered copy (the segments one
 * after the other). */
static int coll_zero(exec_cuda_rt *r, const plan_instr *in, const exec_coll *C, void *s,
                     base_error *e)
{
    bool moves = C->out >= 0; /* into another buffer: even a group of one copies or adds */
    for (int q = 0; q < C->nseg; q++) moves |= C->seg[q].out >= 0;
    if (C->gsize == 1 && !moves) return 0;
    const bool scatter = C->kind == EXEC_COLL_GRAD_SCATTER, nccl = C->gsize > 1;
    const size_t es = scatter ? 4 : 2;
    void *comm = nccl ? r->comm[C->comm] : NULL;
    char *recv = scatter ? buf_ptr(r, in->buf, "the reduce-scatter's receive buffer", e) : NULL;
    if (scatter && !recv) return -1;
    if (nccl && exec_nccl_group_start(e)) return -1;
    int rc = 0;
    size_t off = 0;
    int64_t outoff = 0; /* the segment's place in a gathered copy */
    for (int q = 0; q < C->nseg && !rc; q++) {
        const exec_seg *S = &C->seg[q];
        const exec_region *R = &r->bd.reg[S->region];
        int sb, db;
        int64_t sbase, dbase;
        if (scatter) {
            sb = S->buf >= 0 ? S->buf : R->grad_buf;
            sbase = sb == R->grad_buf ? R->grad_lo : 0;
            db = -1, dbase = 0;
        } else {
            sb = R->param_buf, sbase = R->param_lo;
            db = C->out >= 0 ? C->out : R->param_buf;
            dbase = C->out >= 0 ? S->off - outoff : R->param_lo;
        }
        char *src = buf_ptr(r, sb, scatter ? "the gradients" : "the parameters", e);
        char *dst = db >= 0 ? buf_ptr(r, db, "the gathered parameters", e) : NULL;
        if (!src || (db >= 0 && !dst)) {
            rc = -1;
            break;
        }
        for (int k = 0; k < C->gsize && !rc; k++) {
            int64_t lo, hi;
            exec_seg_piece(R, S, k, C->gsize, &lo, &hi);
            if (hi <= lo) continue;
            const size_t n = (size_t)(hi - lo);
            if (scatter) {
                char *from = src + (size_t)(lo - sbase) * es, *to = recv + off * es;
                rc = nccl ? exec_nccl_reduce(from, to, n, EXEC_NCCL_F32, k, comm, s, e)
                          : exec_cuda_copy_d2d(s, to, from, n * es, e);
            } else {
                /* the root sends its own piece; the others' send buffer is not read */
                char *to = dst + (size_t)(lo - dbase) * es;
                char *from = k == C->grank ? src + (size_t)(lo - sbase) * es : to;
                if (nccl)
                    rc = exec_nccl_broadcast(from, to, n, EXEC_NCCL_BF16, k, comm, s, e);
                else if (from != to)
                    rc = exec_cuda_copy_d2d(s, to, from, n * es, e);
            }
        }
        off += (size_t)exec_seg_chunk(R, S, C->gsize);
        outoff += S->n;
    }
    base_error e2;
    base_error_clear(&e2);
    if (nccl && exec_nccl_group_end(rc ? &e2 : e)) rc = -1;
    if (rc || !scatter) return rc;
    /* this rank's summed pieces into place */
    off = 0;
    for (int q = 0; q < C->nseg && !rc; q++) {
        const exec_seg *S = &C->seg[q];
        const exec_region *R = &r->bd.reg[S->region];
        int64_t lo, hi;
        exec_seg_piece(R, S, C->grank, C->gsize, &lo, &hi);
        const int db = S->out >= 0 ? S->out : S->buf >= 0 ? S->buf : R->grad_buf;
        const int64_t base = db == R->grad_buf ? R->grad_lo : 0;
        char *dst = buf_ptr(r, db, "the collective's region", e);
        if (!dst) return -1;
        const char *from = recv + off * es;
        char *to = dst + (size_t)(lo - base) * es;
        if (hi > lo && S->out >= 0) /* ZeRO-2/3: the micro-batch's piece adds into the kept one */
            rc = exec_cuda_add_f32(s, (float *)to, (const float *)from, hi - lo, e);
        else if (hi > lo)
            rc = exec_cuda_copy_d2d(s, to, from, (size_t)(hi - lo) * es, e);
        off += (size_t)exec_seg_chunk(R, S, C->gsize);
    }
    return rc;
}

static int rt_coll_start(void *ctx, int i, const plan_instr *in, int group, int *req, base_error *e)
{
    exec_cuda_rt *r = ctx;
    const exec_coll *C = &r->bd.coll[i];
    void *s = r->stream[in->stream];
    if (C->gsize > 1 && (C->comm < 0 || !r->comm || !r->comm[C->comm]))
        return base_errorf(e, "no communicator for group %d on stream %s", group,
                           stream_name(r->L, in->stream));
    char name[160];
    if (r->o.nvtx) {
        range_name(r, i, name, sizeof name);
        exec_cuda_range_push(name);
    }
    int rc = 0;
    if (r->o.trace) rc = exec_cuda_event_record(r->start_ev[i], s, e);
    if (!rc) {
        switch (C->kind) {
        case EXEC_COLL_ACT: rc = coll_act(r, in, C, s, e); break;
        case EXEC_COLL_GRAD_SUM: rc = coll_grads(r, C, s, e); break;
        case EXEC_COLL_GRAD_SCATTER:
        case EXEC_COLL_PARAM_GATHER: rc = coll_zero(r, in, C, s, e); break;
        case EXEC_COLL_SCALAR:
            rc = C->gsize == 1 ? 0
                               : exec_nccl_all_reduce(r->sc.norm, r->sc.norm, 1, EXEC_NCCL_F64,
                                                      EXEC_NCCL_SUM, r->comm[C->comm], s, e);
            break;
        default: rc = base_errorf(e, "a collective the runtime did not read");
        }
    }
    if (!rc) rc = exec_cuda_event_record(r->done_ev[i], s, e);
    if (r->o.nvtx) exec_cuda_range_pop();
    if (rc) return -1;
    *req = req_new(r, i);
    return 0;
}

static int rt_test(void *ctx, int k, bool *done, base_error *e)
{
    exec_cuda_rt *r = ctx;
    if (k < 0 || k >= r->nreq || !r->req[k].used) return base_errorf(e, "unknown request %d", k);
    int i = r->req[k].instr;
    const plan_instr *in = &r->L->ins[i];
    int last = in->op == PLAN_COLL ? i : r->sr_last[i];
    if (exec_cuda_event_query(r->done_ev[last], done, e)) return -1;
    if (*done) r->req[k].used = false;
    return 0;
}

static int rt_record(void *ctx, int stream, int event, base_error *e)
{
    exec_cuda_rt *r = ctx;
    int ev;
    if (exec_cuda_streams_next_record(&r->sm, r->L, stream, event, &ev, e)) return -1;
    return exec_cuda_event_record(r->rec_ev[ev], r->stream[stream], e);
}

static int rt_wait(void *ctx, int stream, int event, base_error *e)
{
    exec_cuda_rt *r = ctx;
    int ev;
    if (exec_cuda_streams_next_wait(&r->sm, r->L, stream, event, &ev, e)) return -1;
    return exec_cuda_stream_wait(r->stream[stream], r->rec_ev[ev], e);
}

static int rt_idle(void *ctx, int rounds, base_error *e)
{
    exec_cuda_rt *r = ctx;
    /* communication that never completes: NCCL's asynchronous errors name a failed peer */
    if ((rounds & 1023) == 0 && r->comm)
        for (int k = 0; k < r->nkeys; k++)
            if (r->comm[k] && exec_nccl_check(r->comm[k], e)) return -1;
    return 0;
}

const exec_backend *exec_cuda_rt_backend(exec_cuda_rt *r)
{
    r->be = (exec_backend){.ctx = r,
                           .name = "cuda",
                           .alloc = rt_alloc,
                           .release = rt_release,
                           .compute = rt_compute,
                           .p2p_start = rt_p2p_start,
                           .coll_start = rt_coll_start,
                           .test = rt_test,
                           .record = rt_record,
                           .wait = rt_wait,
                           .idle = rt_idle};
    return &r->be;
}

/* ---------------------------------------------------------------- the step */

int exec_cuda_rt_step(exec_cuda_rt *r, exec_interp *it, int64_t step, exec_cuda_step_stats *st,
                      base_error *e)
{
    memset(st, 0, sizeof *st);
    r->step = step;
    r->plan_live = r->plan_peak = 0;
    exec_cuda_pool_reset_peaks(&r->pool);
    void *s0 = r->stream[0];
    /* the data of the step: every device of a replica draws the same samples, from piper-exec's
     * token sources (a pure function of seed, step, global sample and position) */
    const exec_data *D = r->o.data;
    for (int64_t k = 0; k < r->nmb; k++) {
        for (int64_t t = 0; t < r->T; t++) {
            int64_t sample = (r->dp_rank * r->nmb + k) * r->cfg.b + t / r->cfg.s, pos = t % r->cfg.s;
            if (D) {
                r->htok[t] = exec_data_token(D, r->cfg.seed, step, sample, pos);
                r->htgt[t] = exec_data_token(D, r->cfg.seed, step, sample, pos + 1);
                if (r->htok[t] < 0 || r->htgt[t] < 0) return exec_data_lost(D, step, e);
            } else {
                r->htok[t] = exec_synthetic_token(r->cfg.seed, step, sample, pos, r->cfg.vocab);
                r->htgt[t] = exec_synthetic_token(r->cfg.seed, step, sample, pos + 1, r->cfg.vocab);
            }
        }
        if (exec_cuda_copy_h2d(s0, r->tokens[k], r->htok, (size_t)r->T * 4, e) ||
            exec_cuda_copy_h2d(s0, r->targets[k], r->htgt, (size_t)r->T * 4, e) ||
            exec_cuda_stream_sync(s0, e))
            return -1;
    }
    if (exec_cuda_zero(s0, r->sc.base, (size_t)r->sc.n * sizeof(double), e) ||
        exec_cuda_stream_sync(s0, e))
        return -1;
    exec_cuda_streams_reset(&r->sm);
    if (r->o.trace && exec_cuda_event_record(r->step_ev, s0, e)) return -1;
    double t0 = exec_now();
    if (exec_interp_run(it, r->o.timeout_s, e)) return -1;
    /* the step ends when every stream has drained; kernels' data errors surface here */
    for (int s = 0; s < r->sm.nstreams; s++) {
        if (exec_cuda_stream_sync(r->stream[s], e)) return -1;
        if (r->ctx[s] && exec_cuda_ctx_sync(r->ctx[s], e)) return -1;
    }
    st->seconds = exec_now() - t0;
    r->traced = r->o.trace;
    for (int b = 0; b < r->L->nbufs; b++) {
        exec_buf *B = &r->bd.buf[b];
        if (!B->live) continue;
        B->live = false;
        if (!persistent(r, b)) {
            if (exec_cuda_pool_free(&r->pool, B->p, (size_t)B->bytes, -1, e)) return -1;
            B->p = NULL;
        }
    }
    for (int64_t s = 0; s < (int64_t)r->bd.nreg * r->nmb * EXEC_NSLOT; s++)
        if (r->slot[s] && slot_drop(r, (int)s, -1, e)) return -1;
    double *h = base_xcalloc((size_t)r->sc.n, sizeof *h);
    int rc = exec_cuda_copy_d2h(s0, h, r->sc.base, (size_t)r->sc.n * sizeof(double), e) ||
             exec_cuda_stream_sync(s0, e);
    if (!rc) {
        for (int64_t k = 0; k < r->nmb; k++) st->loss += h[k];
        for (int64_t k = 0; k < r->nmb * r->bd.nreg; k++) st->aux_loss += r->cfg.aux_weight * h[r->nmb + k];
        st->grad_norm = r->bd.has_norm ? h[r->nmb + r->nmb * r->bd.nreg] : -1;
    }
    free(h);
    st->peak = r->pool.peak_in_use;
    st->requested = r->pool.peak_requested;
    st->reserved = r->pool.peak_reserved;
    st->plan_peak = r->plan_peak;
    return rc ? -1 : 0;
}

/* ---------------------------------------------------------------- trace and memory */

int exec_cuda_rt_trace(exec_cuda_rt *r, viz_trace *t, base_error *e)
{
    if (!r->traced) return base_errorf(e, "no timed step to trace: open the runtime with trace on");
    char name[256];
    snprintf(name, sizeof name, "GPU %d", r->dev);
    viz_trace_process(t, r->dev, name);
    for (int s = 0; s < r->sm.nstreams; s++) viz_trace_thread(t, r->dev, s, stream_name(r->L, s));
    for (int i = 0; i < r->L->n; i++) {
        const plan_instr *in = &r->L->ins[i];
        if (!r->start_ev[i] || !r->done_ev[i]) continue;
        /* a sendrecv group is timed from its first member's start to its last member's end */
        int a = i, b = i;
        if (in->op == PLAN_SEND || in->op == PLAN_RECV) a = r->sr_first[i], b = r->sr_last[i];
        float ms0 = 0, ms1 = 0;
        if (exec_cuda_event_elapsed(r->step_ev, r->start_ev[a], &ms0, e) ||
            exec_cuda_event_elapsed(r->step_ev, r->done_ev[b], &ms1, e))
            return -1;
        viz_trace_instr_name(r->p, r->dev, in, name, sizeof name);
        viz_trace_arg arg = {"instr", NULL, (double)i};
        viz_trace_complete(t, r->dev, in->stream, name, viz_trace_instr_cat(in),
                           (int64_t)llround((double)ms0 * 1e6), (int64_t)llround((double)(ms1 - ms0) * 1e6),
                           &arg, 1);
    }
    return 0;
}

void exec_cuda_rt_print_memory(const exec_cuda_rt *r, FILE *f)
{
    double plan[PLAN_NMEM] = {0}, mine[PLAN_NMEM] = {0};
    for (int b = 0; b < r->L->nbufs; b++) {
        int m = r->L->bufs[b].mem < PLAN_NMEM ? r->L->bufs[b].mem : PLAN_MEM_COMM;
        plan[m] += (double)r->L->bufs[b].bytes;
        mine[m] += (double)r->bd.buf[b].bytes;
    }
    fprintf(f, "device %d buffers, plan / CUDA runtime (bytes):", r->dev);
    for (int m = 0; m < PLAN_NMEM; m++)
        fprintf(f, " %s %.0f / %.0f;", plan_mem_name((plan_mem)m), plan[m], mine[m]);
    fprintf(f, " (parameters bf16; gradients fp32; optimizer state: fp32 master copy and "
               "moments)\n");
    /* why the two differ, in the plan's terms, so that a user can make the prediction exact */
    if (r->p->grad_dtype != PLAN_FP32)
        fprintf(f, "device %d: the plan sizes gradients in %s, this runtime accumulates them in "
                   "fp32: compile the program with `grad_dtype: fp32` for the plan to count them\n",
                r->dev, plan_dtype_name((plan_dtype)r->p->grad_dtype));
    if (r->p->act_dtype != PLAN_BF16)
        fprintf(f, "device %d: the plan sizes activations and workspaces in %s, this runtime holds "
                   "them in bf16: compile the program with `dtype: bf16` for the plan to count "
                   "them\n",
                r->dev, plan_dtype_name((plan_dtype)r->p->act_dtype));
    else if (plan[PLAN_MEM_ACT] > mine[PLAN_MEM_ACT])
        fprintf(f, "device %d: the plan keeps %.0f activation bytes more than this runtime: its "
                   "attention keeps each row's log-sum-exp, not the s x s probabilities, and it "
                   "regenerates dropout masks; a model with `flash_attention: true` and no "
                   "dropout is counted exactly\n",
                r->dev, plan[PLAN_MEM_ACT] - mine[PLAN_MEM_ACT]);
}
