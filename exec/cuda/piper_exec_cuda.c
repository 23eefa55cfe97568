/* piper_exec_cuda.c — piper-exec-cuda: runs a compiled plan on GPUs, one rank per device, with
 * the CUDA runtime (cuda_exec.h):
 *   piper-exec-cuda PLAN [options]                       a one-device plan: no MPI, no NCCL
 *   mpirun -np N piper-exec-cuda PLAN [options]          (or srun): rank r runs device r on GPU
 *                                                        local_rank % GPUs
 * and prints per step the loss, the gradient norm, the step time (the slowest rank's), tokens/s,
 * TFLOP/s and MFU (the plan's kernel lists' arithmetic over the step time, against the plan's GPU
 * peak) and every rank's peak memory, as the allocator held it and as the plan sizes it. The
 * losses are the CPU executor's (piper-exec) up to bf16 rounding: same data, same initial
 * parameters, same reading of the plan. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../cli.h"
#include "../data.h"
#include "boot.h"
#include "cuda_exec.h"
#include "nccl_dl.h"

typedef struct args {
    exec_cli_common c;      /* plan, steps, log, trace, -q, --memory, the optimizer, ... */
    int64_t gpu, device;
    bool check, no_nvtx;
    const char *data;       /* --data, NULL: synthetic */
    exec_cuda_options o;
} args;

/* The options: the drivers' common rows (exec_cli_rows) and piper-exec-cuda's own, one row each
 * (base_opt, base.h). */
static base_opt g_opts[EXEC_CLI_NROWS + 16];
static const base_cli *cli_of(args *a)
{
    static base_cli cli;
    size_t n = 0;
    exec_cli_rows(&a->c, g_opts, &n);
    const base_opt own[] = {
        {BASE_OPT_STRING, "data", 0, "SRC", &a->data,
         .help = "tokens, as piper-exec reads them: synthetic, corpus (the bundled text, byte-level tokens), "
         "uint16:PATH or uint32:PATH (a pre-tokenised file of little-endian tokens)", .def = "synthetic"},
        {.kind = BASE_OPT_GROUP, .help = "the GPU"},
        {BASE_OPT_INT, "gpu", 0, "G", &a->gpu, .lo = 0, .hi = 1 << 20, .help = "the GPU to use",
         .def = "local rank modulo the GPUs"},
        {BASE_OPT_FLAG, "no-nvtx", 0, NULL, &a->no_nvtx, .help = "no NVTX ranges", .def = "one per instruction"},
        {BASE_OPT_FLAG, "check", 0, NULL, &a->check,
         .help = "read the plan, set the device up and stop before the first step"},
        {BASE_OPT_INT, "device", 0, "D", &a->device, .lo = 0, .hi = 1 << 30,
         .help = "with --check, in one process: read device D of the plan (its buffers, bindings, collectives), "
         "without communicators"},
        {.kind = BASE_OPT_GROUP, .help = "outputs"},
        {BASE_OPT_PATH, "log", 0, "FILE", &a->c.log, .help = "rank 0 writes one line per step: step loss ce aux "
         "grad_norm seconds tokens_per_s tflops_per_s mfu peak_bytes reserved_bytes"},
        {BASE_OPT_PATH, "trace", 0, "FILE", &a->c.trace, .help = "the last step's instructions from CUDA events, "
         "Chrome format (rank r > 0 writes FILE.rank<r>)"},
    };
    for (size_t k = 0; k < BASE_COUNT(own); k++) g_opts[n++] = own[k];
    cli = (base_cli){
        .prog = "piper-exec-cuda",
        .usage = "[mpirun -np N] piper-exec-cuda PLAN [options]",
        .about = "Runs a plan written by piper-compile -o on GPUs, one rank per device (rank r runs\n"
                 "device r on GPU local-rank % GPUs; a one-device plan runs without mpirun).",
        .opts = g_opts,
        .nopts = n,
        .epilogue = "exit status: 0 on success, 1 when the plan cannot run or a step fails, 2 on usage errors.\n",
    };
    return &cli;
}

static int parse_args(int argc, char **argv, args *a, const base_cli **cli, base_error *e)
{
    memset(a, 0, sizeof *a);
    exec_cli_defaults(&a->c);
    a->gpu = -1;
    a->device = -1;
    *cli = cli_of(a);
    const char **pos = base_xcalloc((size_t)argc + 1, sizeof *pos);
    int npos = 0;
    int rc = base_cli_parse(*cli, argc, argv, pos, &npos, e);
    if (rc == BASE_CLI_OK && exec_cli_finish(&a->c, "piper-exec-cuda", npos, pos, e)) rc = -1;
    free(pos);
    if (rc) return rc;
    if (a->device >= 0 && !a->check)
        return base_errorf(e, "--device D reads one device of a plan in one process: it needs --check");
    a->o.nvtx = !a->no_nvtx;
    a->o.seed = a->c.seed;
    a->o.optim = a->c.optim;
    a->o.grad_clip = a->c.grad_clip;
    a->o.timeout_s = a->c.timeout_s;
    a->o.trace = a->c.trace != NULL;
    return 0;
}

/* The world communicator: rank 0's unique id to every rank through MPI. */
static int world_comm(exec_boot *b, void **comm, base_error *e)
{
    *comm = NULL;
    if (b->size <= 1) return 0;
    char id[EXEC_NCCL_ID_BYTES];
    memset(id, 0, sizeof id);
    int ok = b->rank == 0 ? exec_nccl_unique_id(id, e) : exec_nccl_load(e);
    /* everyone learns whether rank 0 has an id (a zero first byte after the broadcast would be a
     * legal id, so a flag travels with it) */
    char buf[EXEC_NCCL_ID_BYTES + 1];
    memcpy(buf, id, sizeof id);
    buf[EXEC_NCCL_ID_BYTES] = (char)(b->rank == 0 && ok == 0);
    if (exec_boot_bcast(b, buf, sizeof buf, 0, e)) return -1;
    if (ok) return -1;
    if (!buf[EXEC_NCCL_ID_BYTES]) return base_errorf(e, "rank 0 could not create NCCL's unique id");
    return exec_nccl_init_rank(comm, b->size, buf, b->rank, e);
}

/* A failure during a step, on several ranks: the failing rank tells the others before the job is
 * aborted, and each of them, polling between rounds in which nothing progressed, prints where its
 * streams stand, so that a stall shows on every rank and not only on the first whose watchdog
 * fired. The interpreter's idle callback is the runtime's with this poll after it (one process,
 * one interpreter: file-scope state). */
static struct {
    exec_backend be;
    const exec_backend *inner;
    exec_boot *boot;
    const exec_interp *it;
    int peer; /* the failed peer this rank heard of, or -1 */
} g_watch = {.peer = -1};

static int watch_idle(void *ctx, int rounds, base_error *e)
{
    if (g_watch.inner->idle && g_watch.inner->idle(ctx, rounds, e)) return -1;
    if ((rounds & 255) != 0 || !g_watch.it) return 0;
    int k = exec_boot_failed_peer(g_watch.boot);
    if (k < 0) return 0;
    g_watch.peer = k;
    base_buf msg = {0};
    exec_interp_describe_heads(g_watch.it, &msg);
    base_errorf(e, "where this rank's streams stand:%s", msg.n ? msg.s : " (all finished)");
    base_buf_free(&msg);
    return -1;
}

static const exec_backend *watched(const exec_backend *inner, exec_boot *boot)
{
    g_watch.inner = inner;
    g_watch.boot = boot;
    g_watch.be = *inner;
    g_watch.be.idle = watch_idle;
    return &g_watch.be;
}

static void pause_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    base_error e;
    base_error_clear(&e);
    exec_boot boot;
    if (exec_boot_init(&boot, &argc, &argv, &e)) {
        fprintf(stderr, "piper-exec-cuda: %s\n", e.msg);
        return 1;
    }
    int rank = boot.rank, size = boot.size;
    args a;
    const base_cli *cli;
    int prc = parse_args(argc, argv, &a, &cli, &e);
    if (prc) {
        int status = 0;
        if (rank == 0) status = base_cli_finish(cli, prc, &e);
        exec_boot_finalize(&boot);
        return prc > 0 ? 0 : rank == 0 ? status : BASE_CLI_USAGE_EXIT;
    }

    plan_set plan;
    plan_init(&plan);
    exec_data data;
    memset(&data, 0, sizeof data);
    exec_cuda_rt *r = NULL;
    exec_interp *it = NULL;
    void *world = NULL;
    char gpu_desc[256] = "?";
    int gpu = -1;
    if (plan_read_file(&plan, a.c.plan, &e) == 0) {
        if (a.device >= 0) {
            /* one device of a plan read on its own (--check): this process plays it */
            if (size > 1)
                base_errorf(&e, "--device reads one device in one process; start it without mpirun");
            else if (a.device >= plan.ndevices)
                base_errorf(&e, "--device %d, but the plan has %d devices", (int)a.device, plan.ndevices);
            rank = (int)a.device;
            size = plan.ndevices;
        }
        if (!e.set) exec_cli_check_plan(&plan, &a.c, &e);
        if (!e.set) exec_cli_check_ranks(&plan, size, &e);
        int ngpus = 0;
        if (!e.set && exec_cuda_device_count(&ngpus, &e) == 0) {
            if (ngpus < 1) base_errorf(&e, "no CUDA device is visible");
            gpu = a.gpu >= 0 ? (int)a.gpu : boot.local_rank % (ngpus > 0 ? ngpus : 1);
            if (!e.set && gpu >= ngpus)
                base_errorf(&e, "--gpu %d, but only %d GPUs are visible", gpu, ngpus);
            if (!e.set) exec_cuda_device_describe(gpu, gpu_desc, sizeof gpu_desc, &e);
        }
        if (!e.set && a.data && exec_data_open(&data, a.data, plan.model.vocab, plan.model.seq, &e) == 0)
            a.o.data = &data;
        if (!e.set) exec_cuda_rt_open(&r, &plan, rank, size, gpu, &a.o, &e);
    }
    char msg[BASE_ERROR_MAX];
    int bad = exec_boot_agree(&boot, &e, msg, sizeof msg);
    if (bad < 0 && a.device >= 0) {
        exec_interp_new(&it, &plan, rank, exec_cuda_rt_backend(r), &e);
        bad = e.set ? rank : -1;
        if (e.set) snprintf(msg, sizeof msg, "%s", e.msg);
    } else if (bad < 0) {
        if (world_comm(&boot, &world, &e) == 0 && exec_cuda_rt_connect(r, world, &e) == 0 &&
            exec_interp_new(&it, &plan, rank, watched(exec_cuda_rt_backend(r), &boot), &e) == 0)
            g_watch.it = it;
        bad = exec_boot_agree(&boot, &e, msg, sizeof msg);
    }
    if (bad >= 0) {
        if (boot.rank == bad)
            fprintf(stderr, "piper-exec-cuda: rank %d (device %d) failed: %s\n", rank, rank, msg);
        else
            fprintf(stderr, "piper-exec-cuda: rank %d: stopping because rank %d (device %d) failed: %s\n",
                    rank, bad, bad, msg);
        exec_interp_free(it);
        exec_cuda_rt_close(r);
        exec_nccl_destroy(world);
        exec_data_close(&data);
        plan_free(&plan);
        exec_boot_finalize(&boot);
        return 1;
    }

    const plan_model *m = &plan.model;
    const int64_t tokens = m->global_batch * m->seq;
    const double flops = exec_cli_plan_flops(&plan, plan.ndevices);
    const double peak = plan.gpu.peak_flops[PLAN_BF16] * (double)plan.ndevices;
    FILE *log = NULL;
    if (rank == 0 && a.c.log && !(log = fopen(a.c.log, "w"))) {
        base_errorf(&e, "cannot write %s: %s", a.c.log, strerror(errno));
        goto fail;
    }
    if (rank == 0 && !a.c.quiet) {
        printf("piper-exec-cuda: %s (%s), %d rank%s on %s (plan's GPU: %s), bf16 with fp32 "
               "master weights, %s lr %g, %lld steps of %lld sequences (micro-batch %lld x %lld x "
               "data-parallel %lld) = %lld tokens\n",
               m->name ? m->name : "?", a.c.plan, size, size == 1 ? "" : "s", gpu_desc,
               plan.gpu.name ? plan.gpu.name : "?", a.o.optim.kind == EXEC_SGD ? "SGD" : "AdamW",
               a.o.optim.lr, (long long)a.c.steps, (long long)m->global_batch,
               (long long)m->micro_batch, (long long)m->num_microbatches,
               (long long)exec_cuda_rt_dp_size(r), (long long)tokens);
        printf("%-5s %-11s %-10s %-10s %-10s %-8s %-6s %s\n", "step", "loss", "grad norm", "time",
               "tokens/s", "TFLOP/s", "MFU", "peak memory per rank, allocator / plan (MiB)");
    }
    if (rank == 0 && a.c.no_check)
        fprintf(stderr, "piper-exec-cuda: warning: --no-check: the plan's static check was skipped\n");
    if (log)
        fprintf(log, "# step loss ce aux grad_norm seconds tokens_per_s tflops_per_s mfu "
                     "peak_bytes reserved_bytes plan_peak_bytes requested_bytes\n");
    if (a.c.memory) {
        for (int k = 0; k < size; k++) {
            if (k == rank) {
                exec_cuda_rt_print_memory(r, stdout);
                fflush(stdout);
            }
            exec_boot_barrier(&boot);
        }
    }
    if (a.check) {
        if (rank == 0 && !a.c.quiet) printf("plan read and device set up; --check: no step run\n");
        a.c.steps = 0;
    }
    enum { NV = 8 };
    double *all = base_xcalloc((size_t)size * NV, sizeof(double));
    for (int64_t step = 1; step <= a.c.steps; step++) {
        exec_cuda_step_stats st;
        double bad_v = 0;
        const char *bad_fig = NULL;
        if (!exec_cuda_rt_step(r, it, step, &st, &e) &&
            (bad_fig = exec_nonfinite_figure(st.loss, st.aux_loss, st.grad_norm, &bad_v)))
            base_errorf(&e, "%s on device %d is %g, not a finite number; the run stops rather than train on "
                            "it: lower --lr, clip gradients (--grad-clip), or check the data",
                        bad_fig, rank, bad_v);
        if (e.set) {
            base_error_prefix(&e, "step %lld: ", (long long)step);
            goto fail;
        }
        double v[NV] = {st.loss, st.aux_loss, st.grad_norm, st.seconds, st.peak, st.plan_peak, st.reserved,
                        st.requested};
        if (exec_boot_gather(&boot, v, NV, all, &e)) goto fail;
        if (a.c.memory && rank == 0)
            for (int k = 0; k < size; k++)
                printf("device %d accounting, step %lld, CUDA runtime / plan (bytes): peak %.0f / %.0f "
                       "(allocator in use %.0f, reserved %.0f)\n",
                       k, (long long)step, all[k * NV + 7], all[k * NV + 5], all[k * NV + 4],
                       all[k * NV + 6]);
        if (rank != 0) continue;
        double ce, aux, norm, t, pk = 0, res = 0, ppk = 0, req = 0;
        exec_cli_step_reduce(all, size, NV, &ce, &aux, &norm, &t);
        for (int k = 0; k < size; k++) {
            if (all[k * NV + 4] > pk) pk = all[k * NV + 4];
            if (all[k * NV + 5] > ppk) ppk = all[k * NV + 5];
            if (all[k * NV + 6] > res) res = all[k * NV + 6];
            if (all[k * NV + 7] > req) req = all[k * NV + 7];
        }
        double loss = ce + aux, mfu = peak > 0 ? flops / t / peak : 0;
        char nbuf[32];
        exec_cli_norm_text(norm, nbuf, sizeof nbuf);
        printf("%-5lld %-11.6f %-10s %7.1f ms %-10.0f %-8.1f %5.1f%%", (long long)step, loss, nbuf,
               t * 1e3, (double)tokens / t, flops / t * 1e-12, 100 * mfu);
        for (int k = 0; k < size; k++)
            printf(" r%d %.1f/%.1f", k, exec_cli_mib(all[k * NV + 4]), exec_cli_mib(all[k * NV + 5]));
        printf("\n");
        fflush(stdout);
        if (log) {
            fprintf(log, "%lld %.17g %.17g %.17g %.17g %.9g %.9g %.9g %.9g %.9g %.9g %.9g %.9g\n",
                    (long long)step, loss, ce, aux, norm >= 0 ? sqrt(norm) : -1.0, t,
                    (double)tokens / t, flops / t * 1e-12, mfu, pk, res, ppk, req);
            fflush(log);
        }
    }
    if (a.c.trace) {
        char path[4096];
        if (rank == 0)
            snprintf(path, sizeof path, "%s", a.c.trace);
        else
            snprintf(path, sizeof path, "%s.rank%d", a.c.trace, rank);
        viz_trace t;
        if (viz_trace_open(&t, path, &e)) goto fail;
        int rc = exec_cuda_rt_trace(r, &t, &e);
        if (rc) {
            viz_trace_abort(&t);
            goto fail;
        }
        if (viz_trace_close(&t, &e)) goto fail;
        if (rank == 0 && !a.c.quiet) printf("trace of step %lld: %s\n", (long long)a.c.steps, path);
    }
    exec_boot_barrier(&boot);
    free(all);
    if (log) fclose(log);
    exec_interp_free(it);
    exec_cuda_rt_close(r);
    exec_nccl_destroy(world);
    exec_data_close(&data);
    plan_free(&plan);
    exec_boot_finalize(&boot);
    return 0;

fail:
    if (g_watch.peer >= 0) {
        fprintf(stderr, "piper-exec-cuda: rank %d: stopping because rank %d (device %d) failed; %s\n",
                rank, g_watch.peer, g_watch.peer, e.msg);
        fflush(stderr);
        pause_s(5); /* the failed rank aborts the job; this is only in case it cannot */
    } else {
        fprintf(stderr, "piper-exec-cuda: rank %d (device %d) failed: %s\n", rank, rank, e.msg);
        fflush(stderr);
        if (size > 1) {
            /* the others print where they stand before the abort takes them */
            exec_boot_notify_failure(&boot);
            pause_s(2);
        }
    }
    exec_boot_abort(&boot, 1);
    return 1;
}
