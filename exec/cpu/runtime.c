/* runtime.c — the CPU executor's side of the backend: its answers to the binding layer
 * (exec/bind.h: the kernels' layouts in the executor's dtype, storage sizes, the identity
 * table), plan buffers and the boundary slots between regions in memory, data, deterministic
 * parameters, the kernel calls of every compute (forward, backward, recompute, optimizer step,
 * the aux identities), gradient dumps and the memory figures. Communication is backend_mpi.c's.
 * cpu_exec.h says how the plan is read. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cpu_exec.h"

/* ---------------------------------------------------------------- small helpers */

/* A new peak: what makes it up (exec_cpu_print_accounting). */
static void note_peak(exec_cpu *c)
{
    if (c->live <= c->peak) return;
    c->peak = c->live;
    c->at_peak[0] = c->live - c->scratch_live - c->deferred_live;
    c->at_peak[1] = c->slot_live;
    c->at_peak[2] = c->work_live;
    c->at_peak[3] = c->scratch_live - c->slot_live - c->work_live;
    c->at_peak[4] = c->plan_live;
    c->at_peak[5] = c->deferred_live;
}

void *exec_cpu_scratch(exec_cpu *c, size_t bytes)
{
    void *p = calloc(bytes ? bytes : 1, 1);
    if (!p) {
        fprintf(stderr, "piper-exec: out of memory allocating %zu bytes\n", bytes);
        abort();
    }
    c->live += (double)bytes;
    c->scratch_live += (double)bytes;
    note_peak(c);
    return p;
}

void exec_cpu_scratch_free(exec_cpu *c, void *p, size_t bytes)
{
    if (!p) return;
    free(p);
    c->live -= (double)bytes;
    c->scratch_live -= (double)bytes;
}

static const char *buf_name(const exec_cpu *c, int b) { return exec_buf_name(c->L, b); }


static int instr_err(const exec_cpu *c, int i, base_error *e)
{
    return exec_instr_error(c->p, c->dev, i, e);
}

/* ---------------------------------------------------------------- open: reading the plan */

/* The binding's questions (exec/bind.h), answered with the CPU kernels' layouts in the
 * executor's dtype. */
static int cpu_layout(void *ctx, const exec_region *R, exec_layout *out, base_error *e)
{
    const exec_cpu *c = ctx;
    exec_region_sizes sz;
    if (exec_region_sizes_get(&c->cfg, &R->sh, R->kind, c->dt, &sz, e)) return -1;
    const int64_t es = (int64_t)c->es;
    *out = (exec_layout){(R->kind == EXEC_EMBED ? 4 : es) * sz.x, es * sz.y, sz.route_bytes,
                         sz.act_bytes, sz.work_bytes, sz.work_f_bytes, sz.params};
    return 0;
}

static int cpu_act_split(void *ctx, const exec_region *R, exec_act_mode mode, int64_t *kept,
                         int64_t *rebuilt, base_error *e)
{
    const exec_cpu *c = ctx;
    return exec_region_act_split(&c->cfg, &R->sh, R->kind, c->dt, mode, kept, rebuilt, e);
}

static const void *cpu_kernel_find(const char *kid, int *kind, int *family)
{
    const exec_kernel *k = exec_kernel_find(kid);
    if (k) *kind = k->kind, *family = k->family;
    return k;
}

int exec_cpu_open(exec_cpu **out, const plan_set *p, int device, int world,
                  const exec_cpu_options *o, base_error *e)
{
    *out = NULL;
    if (exec_bind_check_device(p, device, e)) return -1;
    exec_cpu *c = base_xcalloc(1, sizeof *c);
    c->p = p;
    c->dev = device;
    c->world = world;
    c->L = plan_dev_list(p, device);
    c->o = *o;
    c->head_comm = -1;
    c->p2p = c->fail = MPI_COMM_NULL;
    c->fail_req = MPI_REQUEST_NULL;
    c->ask = MPI_COMM_NULL;
    c->ask_req = MPI_REQUEST_NULL;
    c->dt = o->dtype >= 0 ? (plan_dtype)o->dtype : (plan_dtype)p->act_dtype;
    int rc = 0;
    if (c->dt != PLAN_FP32 && c->dt != PLAN_FP64) {
        rc = base_errorf(e, "the plan's activations are %s; the CPU executor runs fp32 or fp64: "
                            "compile the program with `dtype: fp32`, or pass --dtype fp32",
                         plan_dtype_name(c->dt));
        goto done;
    }
    c->es = c->dt == PLAN_FP32 ? 4 : 8;
    c->mdt = c->dt == PLAN_FP32 ? MPI_FLOAT : MPI_DOUBLE;
    /* the kernels keep gradients in their own dtype (a program's grad_dtype wider than its dtype
     * changes the plan's bytes, not what runs here): say so once, as the bytes will differ */
    if (device == 0 && p->grad_dtype != c->dt)
        fprintf(stderr, "piper-exec: note: the plan keeps gradients in %s; the CPU executor keeps them "
                        "in %s, its dtype, so its gradient bytes differ from the plan's\n",
                plan_dtype_name((plan_dtype)p->grad_dtype), plan_dtype_name(c->dt));
    if ((rc = exec_cfg_from_plan(&p->model, o->seed, &c->cfg, e))) goto done;
    c->T = c->cfg.b * c->cfg.s;
    const exec_bind_ops ops = {"CPU executor", "CPU kernels", "CPU backend", (int64_t)c->es,
                               (int64_t)c->es, 2 * (int64_t)c->es, cpu_layout, cpu_act_split,
                               cpu_kernel_find, c};
    if ((rc = exec_bind_open(&c->bd, p, device, &c->cfg, &ops, e))) goto done;
    c->nmb = c->bd.nmb;
    c->dp_size = c->bd.dp_size;
    c->dp_rank = c->bd.dp_rank;
    int64_t nslots = (int64_t)c->bd.nreg * c->nmb * EXEC_NSLOT;
    c->slot = base_xcalloc((size_t)nslots + 1, sizeof *c->slot);
    c->work = base_xcalloc((size_t)(c->bd.nreg * c->nmb) + 1, sizeof *c->work);
    c->hold_done = base_xcalloc((size_t)c->L->nbufs + 1, sizeof *c->hold_done);
    c->deferred = base_xcalloc((size_t)c->L->nbufs + 1, sizeof *c->deferred);
    /* the loss is the mean over every token of the step; each micro-batch's MoE aux loss counts
     * 1 / (micro-batches in the step) */
    c->cfg.loss_scale = 1.0 / (double)(p->model.global_batch * c->cfg.s);
    c->cfg.aux_weight = 1.0 / (double)(c->nmb * c->dp_size);
    /* MPI tags are bounded (at least 32767); checked here, before any rank starts the collective
     * set-up, so that a refusal stops every rank cleanly */
    int *ub = NULL, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    int tag_ub = flag && ub ? *ub : 32767;
    for (int i = 0; i < c->L->n; i++) {
        const plan_instr *in = &c->L->ins[i];
        if ((in->op == PLAN_SEND || in->op == PLAN_RECV) && (in->tag < 0 || in->tag > tag_ub)) {
            base_errorf(e, "tag %d is beyond this MPI's limit %d", in->tag, tag_ub);
            rc = instr_err(c, i, e);
            goto done;
        }
    }
    c->tokens = base_xcalloc((size_t)c->nmb, sizeof *c->tokens);
    c->targets = base_xcalloc((size_t)c->nmb, sizeof *c->targets);
    for (int64_t k = 0; k < c->nmb; k++) {
        c->tokens[k] = base_xcalloc((size_t)c->T, sizeof(int32_t));
        c->targets[k] = base_xcalloc((size_t)c->T, sizeof(int32_t));
    }
    c->gate_out = base_xcalloc((size_t)c->nmb, sizeof *c->gate_out);
done:
    if (rc) {
        exec_cpu_close(c);
        return -1;
    }
    *out = c;
    return 0;
}

void exec_cpu_close(exec_cpu *c)
{
    if (!c) return;
    exec_cpu_disconnect(c);
    if (c->bd.buf)
        for (int b = 0; b < c->L->nbufs; b++) free(c->bd.buf[b].p);
    if (c->slot)
        for (int64_t s = 0; s < (int64_t)c->bd.nreg * c->nmb * EXEC_NSLOT; s++) free(c->slot[s]);
    free(c->slot);
    if (c->work)
        for (int64_t k = 0; k < (int64_t)c->bd.nreg * c->nmb; k++) free(c->work[k]);
    free(c->work);
    free(c->hold_done);
    free(c->deferred);
    if (c->tokens)
        for (int64_t k = 0; k < c->nmb; k++) {
            free(c->tokens[k]);
            free(c->targets[k]);
        }
    free(c->tokens);
    free(c->targets);
    free(c->gate_out);
    exec_bind_close(&c->bd);
    if (c->dump) base_out_abort(&c->dump_out);
    free(c);
}

/* ---------------------------------------------------------------- buffers */

static int init_params(exec_cpu *c, exec_region *R, char *dst, base_error *e)
{
    char name[160];
    for (int t = 0; t < R->npar; t++) {
        snprintf(name, sizeof name, "%s.%s", R->name, R->par[t].name);
        if (exec_param_init(c->cfg.seed, name, &R->par[t], c->dt, dst + R->par[t].offset * c->es, e))
            return -1;
    }
    if (R->ncopy) {
        /* the same name as the embedding's own table, so both copies start equal */
        const char *en = c->bd.embed_region >= 0 ? c->bd.reg[c->bd.embed_region].name : "embed";
        snprintf(name, sizeof name, "%s.%s", en, R->copy.name);
        if (exec_param_init(c->cfg.seed, name, &R->copy, c->dt, dst + R->copy.offset * c->es, e))
            return -1;
    }
    return 0;
}

int exec_cpu_alloc(exec_cpu *c, int b, int64_t plan_bytes, base_error *e)
{
    exec_buf *B = &c->bd.buf[b];
    if (B->live) return base_errorf(e, "buffer %s is already live", buf_name(c, b));
    if (!B->p) B->p = calloc((size_t)(B->bytes ? B->bytes : 1), 1);
    if (!B->p) return base_errorf(e, "out of memory allocating %lld bytes for %s", (long long)B->bytes, buf_name(c, b));
    if (B->role == EXEC_BUF_GRAD) memset(B->p, 0, (size_t)B->bytes);
    if (B->role == EXEC_BUF_PARAM && !B->init) {
        /* initial values are a function of the global index: the whole block, then the piece */
        const exec_region *R = &c->bd.reg[B->region];
        char *all = R->param_lo || B->bytes < R->nstore * (int64_t)c->es
                        ? base_xcalloc((size_t)(R->nstore ? R->nstore : 1), c->es)
                        : B->p;
        int irc = init_params(c, &c->bd.reg[B->region], all, e);
        if (all != B->p) {
            if (!irc) memcpy(B->p, all + (size_t)R->param_lo * c->es, (size_t)B->bytes);
            free(all);
        }
        if (irc) return -1;
        B->init = true;
    }
    B->live = true;
    c->live += (double)B->bytes;
    c->plan_live += (double)plan_bytes;
    note_peak(c);
    if (c->plan_live > c->plan_peak) c->plan_peak = c->plan_live;
    return 0;
}

static void release_now(exec_cpu *c, int b)
{
    exec_buf *B = &c->bd.buf[b];
    B->live = false;
    c->live -= (double)B->bytes;
    if (B->role != EXEC_BUF_PARAM && B->role != EXEC_BUF_GRAD && B->role != EXEC_BUF_OPT) {
        free(B->p);
        B->p = NULL;
    }
}

int exec_cpu_release(exec_cpu *c, int b, base_error *e)
{
    exec_buf *B = &c->bd.buf[b];
    if (!B->live || c->deferred[b]) return base_errorf(e, "buffer %s is not live", buf_name(c, b));
    if (c->bd.act_hold[b] >= 0 && !c->hold_done[b]) {
        /* a backward still reads what F kept (full recompute: the region input); the plan frees
         * it after the recomputation, the executor after that backward */
        c->deferred[b] = true;
        c->deferred_live += (double)B->bytes;
        c->plan_live -= (double)c->L->bufs[b].bytes;
        return 0;
    }
    B->live = false;
    c->live -= (double)B->bytes;
    c->plan_live -= (double)c->L->bufs[b].bytes;
    if (B->role != EXEC_BUF_PARAM && B->role != EXEC_BUF_GRAD && B->role != EXEC_BUF_OPT) {
        free(B->p);
        B->p = NULL;
    }
    return 0;
}

char *exec_cpu_buf(exec_cpu *c, int b, const char *what, base_error *e)
{
    if (b < 0 || b >= c->L->nbufs) {
        base_errorf(e, "%s: no buffer", what);
        return NULL;
    }
    if (!c->bd.buf[b].live || !c->bd.buf[b].p) {
        base_errorf(e, "%s: buffer %d (%s) is not live; the plan uses it outside its "
                       "alloc/free",
                    what, b, buf_name(c, b));
        return NULL;
    }
    return c->bd.buf[b].p;
}

static char *slot_get(exec_cpu *c, int s, bool create, const char *what, base_error *e)
{
    if (!c->slot[s] && create) {
        c->slot_live += (double)c->bd.slot_bytes[s];
        c->slot[s] = exec_cpu_scratch(c, (size_t)c->bd.slot_bytes[s]);
    }
    if (!c->slot[s]) {
        int r = (int)(s / EXEC_NSLOT / c->nmb), mb = (int)(s / EXEC_NSLOT % c->nmb);
        base_errorf(e, "%s of region %s, micro-batch %d, was never produced on this device: "
                       "its producer has not run (or runs elsewhere with no transfer)",
                    what, c->bd.reg[r].name, mb);
    }
    return c->slot[s];
}

static void slot_drop(exec_cpu *c, int s)
{
    if (c->slot[s]) c->slot_live -= (double)c->bd.slot_bytes[s];
    exec_cpu_scratch_free(c, c->slot[s], (size_t)c->bd.slot_bytes[s]);
    c->slot[s] = NULL;
}

void exec_cpu_print_memory(const exec_cpu *c, FILE *f)
{
    double plan[PLAN_NMEM] = {0}, mine[PLAN_NMEM] = {0};
    for (int b = 0; b < c->L->nbufs; b++) {
        int m = c->L->bufs[b].mem < PLAN_NMEM ? c->L->bufs[b].mem : PLAN_MEM_COMM;
        plan[m] += (double)c->L->bufs[b].bytes;
        mine[m] += (double)c->bd.buf[b].bytes;
    }
    fprintf(f, "device %d buffers, plan / executor:", c->dev);
    for (int m = 0; m < PLAN_NMEM; m++) {
        char a[32], b[32];
        fprintf(f, " %s %s / %s;", plan_mem_name((plan_mem)m), base_fmt_bytes(plan[m], a, sizeof a),
                base_fmt_bytes(mine[m], b, sizeof b));
    }
    fprintf(f, " plus boundary tensors between regions (%lld bytes per region and micro-batch)\n",
            (long long)(c->T * c->cfg.h * (int64_t)c->es));
    /* the kernels keep what the plan sizes: name any activation buffer that differs */
    for (int b = 0; b < c->L->nbufs; b++)
        if (c->L->bufs[b].mem == PLAN_MEM_ACT && c->bd.buf[b].role == EXEC_BUF_ACT &&
            c->bd.buf[b].bytes != c->L->bufs[b].bytes)
            fprintf(f, "device %d: activation buffer %s holds %lld bytes, the plan sizes %lld\n",
                    c->dev, buf_name(c, b), (long long)c->bd.buf[b].bytes,
                    (long long)c->L->bufs[b].bytes);
}

void exec_cpu_print_accounting(const exec_cpu *c, FILE *f)
{
    double plan[PLAN_NMEM] = {0}, mine[PLAN_NMEM] = {0};
    for (int b = 0; b < c->L->nbufs; b++) {
        int m = c->L->bufs[b].mem < PLAN_NMEM ? c->L->bufs[b].mem : PLAN_MEM_COMM;
        plan[m] += (double)c->L->bufs[b].bytes;
        mine[m] += (double)c->bd.buf[b].bytes;
    }
    fprintf(f,
            "device %d accounting, step %lld, executor / plan (bytes): params %.0f / %.0f; grads %.0f / %.0f; "
            "communicated %.0f / %.0f; peak %.0f / %.0f\n",
            c->dev, (long long)c->step, mine[PLAN_MEM_PARAM], plan[PLAN_MEM_PARAM], mine[PLAN_MEM_GRAD],
            plan[PLAN_MEM_GRAD], c->comm_bytes, c->plan_comm_bytes, c->peak, c->plan_peak);
    fprintf(f,
            "device %d peak composition (bytes): plan buffers %.0f, boundary slots %.0f, kernel work "
            "%.0f, other scratch %.0f, kept past the plan's free %.0f; the plan's live bytes then "
            "%.0f; work peak %.0f\n",
            c->dev, c->at_peak[0], c->at_peak[1], c->at_peak[2], c->at_peak[3], c->at_peak[5],
            c->at_peak[4], c->work_peak);
}

/* ---------------------------------------------------------------- dumps */

/* Writes the elements [lo, hi) of a region's storage, tensor by tensor, with their indices in the
 * global tensors: "T name ndims d0 d1 d2 n" then n lines "index value". */
static void dump_region(exec_cpu *c, FILE *f, const exec_region *R, const char *data, int64_t lo,
                        int64_t hi)
{
    for (int t = 0; t <= R->npar; t++) {
        const exec_param *P = t < R->npar ? &R->par[t] : (R->ncopy ? &R->copy : NULL);
        if (!P) break;
        int64_t a = P->offset > lo ? P->offset : lo, b = P->offset + P->count < hi ? P->offset + P->count : hi;
        if (a >= b) continue;
        const char *rn = t < R->npar ? R->name : (c->bd.embed_region >= 0 ? c->bd.reg[c->bd.embed_region].name : "embed");
        fprintf(f, "T %s.%s %lld %lld %lld %lld\n", rn, P->name, (long long)P->dim[0],
                (long long)P->dim[1], (long long)P->dim[2], (long long)(b - a));
        for (int64_t k = a; k < b; k++) {
            int64_t i = k - P->offset;
            int64_t i2 = i % P->len[2], i1 = i / P->len[2] % P->len[1], i0 = i / P->len[2] / P->len[1];
            int64_t g = ((P->off[0] + i0) * P->dim[1] + P->off[1] + i1) * P->dim[2] + P->off[2] + i2;
            double v = c->dt == PLAN_FP32 ? (double)((const float *)data)[k] : ((const double *)data)[k];
            fprintf(f, "%lld %.17g\n", (long long)g, v);
        }
    }
}

static int open_dump(exec_cpu *c, const char *dir, const char *what, base_out *o, base_error *e)
{
    if (mkdir(dir, 0777) && errno != EEXIST)
        return base_errorf(e, "%s: cannot create the directory (%s); give a directory that can be created",
                           dir, strerror(errno));
    char path[4096], name[64];
    snprintf(path, sizeof path, "%s/%s.dev%d.txt", dir, what, c->dev);
    snprintf(name, sizeof name, "the %s dump", what);
    if (base_out_open(o, path, name, e)) return -1;
    fprintf(o->f, "# piper-exec %s of device %d (%s), step %lld\n", what, c->dev,
            plan_dtype_name(c->dt), (long long)c->step);
    return 0;
}

int exec_cpu_dump_params(exec_cpu *c, const char *dir, base_error *e)
{
    base_out o;
    if (open_dump(c, dir, "params", &o, e)) return -1;
    for (int r = 0; r < c->bd.nreg; r++) {
        const exec_region *R = &c->bd.reg[r];
        if (!R->upd || R->param_buf < 0 || !c->bd.buf[R->param_buf].p) continue;
        dump_region(c, o.f, R, cpu_region_params(c, R, c->bd.buf[R->param_buf].p), R->upd_lo, R->upd_hi);
    }
    return base_out_commit(&o, e);
}

/* ---------------------------------------------------------------- computes */

static int run_upd(exec_cpu *c, int i, const plan_instr *in, exec_region *R, base_error *e)
{
    char *param = cpu_region_params(c, R, exec_cpu_buf(c, R->param_buf, "the parameters", e));
    char *grad = param ? cpu_region_grads(c, R, exec_cpu_buf(c, R->grad_buf, "the gradients", e)) : NULL;
    char *opt = grad ? exec_cpu_buf(c, R->opt_buf, "the optimizer state", e) : NULL;
    if (!opt) return -1;
    const int64_t lo = R->upd_lo, hi = R->upd_hi, n = hi - lo;
    const size_t es = c->es;
    if (c->dump && c->step == 1) dump_region(c, c->dump, R, grad, lo, hi);
    exec_optim o = c->o.optim;
    o.t = c->step;
    o.grad_scale = 1.0;
    if (c->have_norm && c->o.grad_clip > 0) o.grad_scale = exec_clip_coef(sqrt(c->norm_sq), c->o.grad_clip);
    char *m = opt, *v = opt + (size_t)n * es;
    int64_t a = lo, b = hi < R->nkern ? hi : R->nkern;
    if (a < b) {
        exec_call call;
        memset(&call, 0, sizeof call);
        call.cfg = &c->cfg;
        call.shard = &R->sh;
        call.dtype = c->dt;
        call.layer = R->layer;
        call.step = c->step;
        call.opt = &o;
        call.param = param + (size_t)a * es;
        call.grad = grad + (size_t)a * es;
        call.opt_m = m;
        call.opt_v = v;
        call.upd_off = a;
        call.upd_n = b - a;
        if (exec_kernel_run(cpu_kernel(&c->bd.comp[i]), &call, e)) return -1;
    }
    /* the tied token table's copy: a matrix, so it decays like the embedding's own */
    a = lo > R->nkern ? lo : R->nkern;
    if (a < hi) {
        size_t k = (size_t)(a - lo);
        if (c->dt == PLAN_FP32) {
            if (o.kind == EXEC_ADAMW)
                exec_adamw_f32((float *)param + a, (float *)grad + a, (float *)m + k, (float *)v + k, hi - a, &o, true);
            else
                exec_sgd_f32((float *)param + a, (float *)grad + a, hi - a, &o, true);
        } else {
            if (o.kind == EXEC_ADAMW)
                exec_adamw_f64((double *)param + a, (double *)grad + a, (double *)m + k, (double *)v + k, hi - a, &o, true);
            else
                exec_sgd_f64((double *)param + a, (double *)grad + a, hi - a, &o, true);
        }
    }
    (void)in;
    return 0;
}

/* The local part of the squared global norm: each gradient element counted once in the world
 * (ZeRO: the device's piece; replicas: the first; TP-replicated tensors: the first TP rank; the
 * tied copy: on the embedding's side). */
static int run_grad_norm(exec_cpu *c, base_error *e)
{
    double s = 0;
    for (int r = 0; r < c->bd.nreg; r++) {
        const exec_region *R = &c->bd.reg[r];
        if (!R->upd || R->norm_skip || R->tp_copy) continue;
        const char *g = cpu_region_grads(c, R, exec_cpu_buf(c, R->grad_buf, "the gradients", e));
        if (!g) return -1;
        for (int t = 0; t < R->npar; t++) {
            const exec_param *P = &R->par[t];
            if (P->replicated && !R->sh.first) continue;
            int64_t a = P->offset > R->upd_lo ? P->offset : R->upd_lo;
            int64_t b = P->offset + P->count < R->upd_hi ? P->offset + P->count : R->upd_hi;
            if (a >= b) continue;
            s += c->dt == PLAN_FP32 ? exec_sumsq_f32((const float *)g + a, b - a)
                                    : exec_sumsq_f64((const double *)g + a, b - a);
        }
    }
    c->norm_sq = s;
    c->have_norm = true;
    return 0;
}

int exec_cpu_compute(exec_cpu *c, int i, const plan_instr *in, base_error *e)
{
    const exec_compute *b = &c->bd.comp[i];
    if (b->aux == 1) return run_grad_norm(c, e);
    if (b->aux == 2) {
        /* the step's aux loss is summed from the gates' outputs; the identity checks the sum */
        exec_call call;
        memset(&call, 0, sizeof call);
        double out = 0;
        call.out = &out;
        call.nin = 1;
        call.scalars_in = &c->gate_out[b->mb];
        call.cfg = &c->cfg;
        exec_shard sh;
        memset(&sh, 0, sizeof sh);
        call.shard = &sh;
        call.dtype = c->dt;
        return exec_kernel_run_id("aux.aux_loss", &call, e);
    }
    exec_region *R = &c->bd.reg[b->region];
    if (in->pass == PLAN_PASS_UPD) return run_upd(c, i, in, R, e);
    const size_t es = c->es;
    exec_call call;
    memset(&call, 0, sizeof call);
    call.cfg = &c->cfg;
    call.shard = &R->sh;
    call.dtype = c->dt;
    call.layer = R->layer;
    call.step = c->step;
    call.sample0 = (c->dp_rank * c->nmb + b->mb) * c->cfg.b;
    double out = 0;
    call.out = &out;
    if (b->pb >= 0) {
        if (!(call.param = exec_cpu_buf(c, b->pb, "the gathered parameters", e))) return -1;
    } else if (R->param_buf >= 0 && !(call.param = exec_cpu_buf(c, R->param_buf, "the parameters", e))) {
        return -1;
    }
    bool bwd = in->pass == PLAN_PASS_B || in->pass == PLAN_PASS_BI || in->pass == PLAN_PASS_BW;
    const int gb = b->gb >= 0 ? b->gb : R->grad_buf;
    if (bwd && gb >= 0 && !(call.grad = exec_cpu_buf(c, gb, "the gradients", e))) return -1;
    /* F keeps nothing under EXEC_ACT_NONE: R and the backward read R's buffer only (F's, empty,
     * may be gone) */
    const bool act_in_act2 = R->act_mode == EXEC_ACT_NONE && in->pass != PLAN_PASS_F;
    if (!act_in_act2 && !(call.act = exec_cpu_buf(c, b->act, "the saved activations", e))) return -1;
    /* under recompute: R writes (and a backward reads) the rebuilt part; F computes it too, in a
     * transient buffer, since only what it keeps outlives it */
    call.act_mode = (int)R->act_mode;
    /* the kernels' work buffer: the plan's workspace of the pass (a BW's is its BI's), whose
     * second part holds what the pass computes and does not keep (pass_work_bytes) */
    const bool fwd_pass = in->pass == PLAN_PASS_F || in->pass == PLAN_PASS_R;
    const size_t wbytes = (size_t)(fwd_pass ? R->sz.work_f_bytes : R->sz.work_bytes);
    char *plan_work = NULL, *extra = NULL;
    if (b->work >= 0) {
        if (!(plan_work = exec_cpu_buf(c, b->work, "the workspace", e))) return -1;
        extra = plan_work + exec_work_extra_at((int64_t)wbytes);
    }
    char *act2_scratch = NULL;
    const size_t act2_bytes = R->act_mode != EXEC_ACT_ALL ? (size_t)R->act_rebuilt : 0;
    if (act2_bytes && b->act2 >= 0) {
        if (!(call.act2 = exec_cpu_buf(c, b->act2, "the rebuilt activations", e))) return -1;
    } else if (act2_bytes && in->pass == PLAN_PASS_F) {
        call.act2 = extra ? extra : (act2_scratch = exec_cpu_scratch(c, act2_bytes));
    }
    /* without a plan workspace (a plan written without them): the executor's own, for the pass
     * only, except that BI's lives until its BW */
    char **held = &c->work[b->region * c->nmb + b->mb];
    char *work = NULL;
    if (plan_work) {
        call.work = plan_work;
    } else if (wbytes && in->pass == PLAN_PASS_BW) {
        if (!*held)
            return base_errorf(e, "the BW pass of %s (micro-batch %d) runs without its BI before "
                                  "it on this device",
                               R->name, b->mb);
        work = *held;
    } else if (wbytes) {
        if (in->pass == PLAN_PASS_BI && *held)
            return base_errorf(e, "a second BI of %s (micro-batch %d) before its BW", R->name, b->mb);
        c->work_live += (double)wbytes;
        if (c->work_live > c->work_peak) c->work_peak = c->work_live;
        work = exec_cpu_scratch(c, wbytes);
        if (in->pass == PLAN_PASS_BI) *held = work;
    }
    if (!plan_work) call.work = work;
    if (R->kind == EXEC_HEAD && c->cfg.tied) {
        if (R->ncopy) {
            call.lm_w = (char *)call.param + (size_t)R->nkern * es;
            if (call.grad) call.lm_grad = (char *)call.grad + (size_t)R->nkern * es;
        } else {
            const exec_region *E = &c->bd.reg[c->bd.embed_region];
            if (b->pb >= 0 && c->bd.buf[b->pb].table) {
                /* ZeRO-3: the gathered table follows the head's gathered parameters */
                call.lm_w = (char *)call.param + (size_t)R->nkern * es;
            } else {
                char *ep = exec_cpu_buf(c, E->param_buf, "the embedding's token table", e);
                if (!ep) return -1;
                call.lm_w = ep + (size_t)E->par[0].offset * es;
            }
            if (bwd) {
                char *eg = exec_cpu_buf(c, b->egb >= 0 ? b->egb : E->grad_buf, "the embedding's gradients", e);
                if (!eg) return -1;
                call.lm_grad = eg + (size_t)E->par[0].offset * es;
            }
        }
    }
    if (R->kind == EXEC_HEAD && R->sh.tp > 1) {
        call.reduce = exec_cpu_head_reduce;
        call.reduce_ctx = c;
    }
    if (R->kind == EXEC_EMBED) call.tokens = c->tokens[b->mb];
    if (R->kind == EXEC_HEAD) call.targets = c->targets[b->mb];
    /* inputs and outputs: comm buffers, else slots */
    char *scratch_y = NULL, *scratch_y2 = NULL;
    if (b->sl.xb >= 0 && !(call.x = exec_cpu_buf(c, b->sl.xb, "the input", e))) return -1;
    if (b->sl.xs >= 0 && !(call.x = slot_get(c, b->sl.xs, false, "the input", e))) return -1;
    if (b->sl.x2s >= 0 && !(call.x2 = slot_get(c, b->sl.x2s, false, "the route", e))) return -1;
    if (b->sl.x2b >= 0 && !(call.x2 = exec_cpu_buf(c, b->sl.x2b, "the route", e))) return -1;
    if (b->sl.y2b >= 0 && !(call.y2 = exec_cpu_buf(c, b->sl.y2b, "the route", e))) return -1;
    if (b->sl.dy2b >= 0 && !(call.dy2 = exec_cpu_buf(c, b->sl.dy2b, "the route gradient", e))) return -1;
    if (b->sl.dx2b >= 0 && !(call.dx2 = exec_cpu_buf(c, b->sl.dx2b, "the route gradient", e))) return -1;
    if (b->sl.yb >= 0 && !(call.y = exec_cpu_buf(c, b->sl.yb, "the output", e))) return -1;
    if (b->sl.ys >= 0 && !(call.y = slot_get(c, b->sl.ys, true, "the output", e))) return -1;
    if (b->sl.y2s >= 0 && !(call.y2 = slot_get(c, b->sl.y2s, true, "the route", e))) return -1;
    if (in->pass == PLAN_PASS_R) {
        /* a recomputation rebuilds the saved tensors; its outputs were consumed already */
        if (R->kind != EXEC_HEAD && !call.y)
            call.y = extra ? extra : (scratch_y = exec_cpu_scratch(c, (size_t)R->sz.y_bytes));
        if (R->kind == EXEC_MOE_GATE && !call.y2)
            call.y2 = extra ? extra + (b->sl.yb < 0 ? (size_t)R->sz.y_bytes : 0)
                            : (scratch_y2 = exec_cpu_scratch(c, (size_t)R->sz.route_bytes));
    }
    if (b->sl.dyb >= 0 && !(call.dy = exec_cpu_buf(c, b->sl.dyb, "the output gradient", e))) return -1;
    if (b->xg >= 0 && !(call.xg = exec_cpu_buf(c, b->xg, "the gathered norm shards", e))) return -1;
    if (b->sl.dys >= 0 && !(call.dy = slot_get(c, b->sl.dys, false, "the output gradient", e))) return -1;
    if (b->sl.dy2s >= 0 && !(call.dy2 = slot_get(c, b->sl.dy2s, false, "the route gradient", e))) return -1;
    if (b->sl.dxb >= 0 && !(call.dx = exec_cpu_buf(c, b->sl.dxb, "the input gradient", e))) return -1;
    if (b->sl.dxs >= 0 && !(call.dx = slot_get(c, b->sl.dxs, true, "the input gradient", e))) return -1;
    if (b->sl.dx2s >= 0 && !(call.dx2 = slot_get(c, b->sl.dx2s, true, "the route gradient", e))) return -1;
    if (act_in_act2) call.act = call.act2;
    if (in->pass == PLAN_PASS_R &&
        (R->act_mode == EXEC_ACT_INPUT || R->act_mode == EXEC_ACT_SELECTIVE)) {
        /* the input F kept leads its act buffer (selective recompute keeps it with all but the
         * attention core); the combine's route follows its expert outputs */
        if (!call.x) call.x = call.act;
        if (R->kind == EXEC_MOE_COMBINE && !call.x2) call.x2 = (char *)call.act + (size_t)R->sz.x_bytes;
    }
    int rc = exec_kernel_run(cpu_kernel(b), &call, e);
    if (!act_in_act2 && b->act >= 0 && c->bd.act_hold[b->act] == i) {
        c->hold_done[b->act] = true;
        if (c->deferred[b->act]) {
            c->deferred[b->act] = false;
            c->deferred_live -= (double)c->bd.buf[b->act].bytes;
            release_now(c, b->act);
        }
    }
    if (act2_scratch) exec_cpu_scratch_free(c, act2_scratch, act2_bytes);
    if (work && in->pass != PLAN_PASS_BI) {
        exec_cpu_scratch_free(c, work, wbytes);
        c->work_live -= (double)wbytes;
        if (in->pass == PLAN_PASS_BW) *held = NULL;
    }
    if (scratch_y) exec_cpu_scratch_free(c, scratch_y, (size_t)R->sz.y_bytes);
    if (scratch_y2) exec_cpu_scratch_free(c, scratch_y2, (size_t)R->sz.route_bytes);
    if (rc) return -1;
    if (in->pass == PLAN_PASS_F) {
        if (R->kind == EXEC_HEAD && !R->tp_copy) c->loss += out;
        if (R->kind == EXEC_MOE_GATE && !R->tp_copy) {
            c->gate_out[b->mb] += out;
            c->aux_loss += c->cfg.aux_weight * out;
        }
    }
    const int reads[] = {b->sl.xs, b->sl.x2s, b->sl.dys, b->sl.dy2s};
    for (size_t q = 0; q < BASE_COUNT(reads); q++)
        if (reads[q] >= 0 && c->bd.slot_last[reads[q]] == i) slot_drop(c, reads[q]);
    return 0;
}

/* ---------------------------------------------------------------- numbers that cannot be trusted */

/* The first element that is not finite of the parameters (grads false) or kept gradients (grads
 * true) this device updates, region by region in the plan's order, as "the gradient of
 * L0.attn.wq, element 17 of its block on this device, is nan"; false when all are finite. */
static bool first_nonfinite(const exec_cpu *c, bool grads, char *buf, size_t n)
{
    for (int r = 0; r < c->bd.nreg; r++) {
        const exec_region *R = &c->bd.reg[r];
        int b = grads ? R->grad_buf : R->param_buf;
        if (!R->upd || b < 0 || !c->bd.buf[b].p) continue;
        const char *data = grads ? cpu_region_grads(c, R, c->bd.buf[b].p) : cpu_region_params(c, R, c->bd.buf[b].p);
        for (int t = 0; t <= R->npar; t++) {
            const exec_param *P = t < R->npar ? &R->par[t] : (R->ncopy ? &R->copy : NULL);
            if (!P) break;
            int64_t lo = P->offset > R->upd_lo ? P->offset : R->upd_lo;
            int64_t hi = P->offset + P->count < R->upd_hi ? P->offset + P->count : R->upd_hi;
            for (int64_t k = lo; k < hi; k++) {
                double v = c->dt == PLAN_FP32 ? (double)((const float *)data)[k] : ((const double *)data)[k];
                if (isfinite(v)) continue;
                const char *rn = t < R->npar ? R->name : (c->bd.embed_region >= 0 ? c->bd.reg[c->bd.embed_region].name : "embed");
                snprintf(buf, n, "the %s of %s.%s, element %lld of its block on this device, is %g",
                         grads ? "gradient" : "parameter", rn, P->name, (long long)(k - P->offset), v);
                return true;
            }
        }
    }
    return false;
}

/* A loss, load-balancing loss or gradient norm that is not finite stops the run: every later step
 * would train on it (an infinite learning rate trains to nan and would report success). The
 * message names the figure and the first tensor held here that is not finite: the gradients
 * first when the norm is the figure, since the norm is made from them; else the parameters,
 * which a bad update poisons before the next forward. */
static int check_finite(const exec_cpu *c, const exec_cpu_step_stats *st, base_error *e)
{
    double v = 0;
    const char *what = exec_nonfinite_figure(st->loss, st->aux_loss, st->grad_norm, &v);
    if (!what) return 0;
    bool norm = !strcmp(what, "the gradient norm");
    char first[512] = "";
    if (!first_nonfinite(c, norm, first, sizeof first) && !first_nonfinite(c, !norm, first, sizeof first))
        snprintf(first, sizeof first, "every parameter and gradient this device updates is finite, so the "
                                      "value came from an activation or from another device");
    return base_errorf(e, "%s on device %d is %g, not a finite number; %s; the run stops rather than train on "
                          "it: lower --lr, clip gradients (--grad-clip), or check the data",
                       what, c->dev, v, first);
}

/* ---------------------------------------------------------------- the step */

int exec_cpu_step(exec_cpu *c, exec_interp *it, int64_t step, exec_cpu_step_stats *st,
                  base_error *e)
{
    memset(st, 0, sizeof *st);
    c->step = step;
    c->loss = c->aux_loss = c->norm_sq = 0;
    c->have_norm = false;
    c->live = c->peak = c->plan_live = c->plan_peak = c->work_live = c->work_peak = 0;
    c->scratch_live = c->slot_live = c->deferred_live = 0;
    memset(c->hold_done, 0, (size_t)c->L->nbufs * sizeof *c->hold_done);
    memset(c->deferred, 0, (size_t)c->L->nbufs * sizeof *c->deferred);
    memset(c->at_peak, 0, sizeof c->at_peak);
    c->comm_bytes = c->plan_comm_bytes = 0;
    for (int64_t k = 0; k < c->nmb; k++) c->gate_out[k] = 0;
    /* every device of a replica draws the same samples: sample = (dp rank x m + mb) x b + row */
    for (int64_t k = 0; k < c->nmb; k++)
        for (int64_t t = 0; t < c->T; t++) {
            int64_t sample = (c->dp_rank * c->nmb + k) * c->cfg.b + t / c->cfg.s, pos = t % c->cfg.s;
            if (c->o.data) {
                c->tokens[k][t] = exec_data_token(c->o.data, c->cfg.seed, step, sample, pos);
                c->targets[k][t] = exec_data_token(c->o.data, c->cfg.seed, step, sample, pos + 1);
                if (c->tokens[k][t] < 0 || c->targets[k][t] < 0) return exec_data_lost(c->o.data, step, e);
            } else {
                c->tokens[k][t] = exec_synthetic_token(c->cfg.seed, step, sample, pos, c->cfg.vocab);
                c->targets[k][t] = exec_synthetic_token(c->cfg.seed, step, sample, pos + 1, c->cfg.vocab);
            }
        }
    if (c->o.dump_grads && step == 1) {
        if (open_dump(c, c->o.dump_grads, "grads", &c->dump_out, e)) return -1;
        c->dump = c->dump_out.f;
    }
    double t0 = exec_now();
    int rc = exec_interp_run(it, c->o.timeout_s, e);
    st->seconds = exec_now() - t0;
    if (c->dump) {
        /* a failed step's dump is dropped: the old file stays */
        if (rc) base_out_abort(&c->dump_out);
        else rc = base_out_commit(&c->dump_out, e);
        c->dump = NULL;
    }
    if (rc) return -1;
    /* what the plan left live (parameters, gradients, optimizer state) is live again next step;
     * transient buffers it did not free are dropped */
    for (int b = 0; b < c->L->nbufs; b++) {
        exec_buf *B = &c->bd.buf[b];
        if (!B->live) continue;
        B->live = false;
        if (B->role != EXEC_BUF_PARAM && B->role != EXEC_BUF_GRAD && B->role != EXEC_BUF_OPT) {
            free(B->p);
            B->p = NULL;
        }
    }
    for (int64_t s = 0; s < (int64_t)c->bd.nreg * c->nmb * EXEC_NSLOT; s++)
        if (c->slot[s]) slot_drop(c, (int)s);
    for (int64_t k = 0; k < (int64_t)c->bd.nreg * c->nmb; k++)
        if (c->work[k]) { /* a BI whose BW the plan never ran */
            exec_cpu_scratch_free(c, c->work[k], (size_t)c->bd.reg[k / c->nmb].sz.work_bytes);
            c->work_live -= (double)c->bd.reg[k / c->nmb].sz.work_bytes;
            c->work[k] = NULL;
        }
    st->loss = c->loss;
    st->aux_loss = c->aux_loss;
    st->grad_norm = c->have_norm ? c->norm_sq : -1;
    st->peak = c->peak;
    st->plan_peak = c->plan_peak;
    return check_finite(c, st, e);
}
