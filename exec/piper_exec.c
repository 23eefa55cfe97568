/* piper_exec.c — piper-exec: runs a compiled plan for real on CPUs, one MPI rank per device,
 *   mpirun -np N piper-exec PLAN [--steps K] [--seed S] ...   (or without mpirun: one device)
 * and prints per step the loss, step time, tokens/s and each rank's peak memory (rank 0 gathers
 * them; --log and --json write them to a file too). Failures: a rank that cannot start (bad plan file, unsupported plan) makes every rank
 * stop with a message naming it and its cause; a rank that fails during a step tells every other
 * rank (which print it) and aborts the job; a watchdog (--timeout) stops ranks whose
 * communication makes no progress. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cpu/cpu_exec.h"
#include "sim_predict.h"

typedef struct args {
    exec_cli_common c;      /* plan, steps, log, trace, -q, --memory, the optimizer, ... */
    const char *dump_params, *save, *resume, *data;
    const char *json;       /* --json: one JSON object per step (docs/cli.md) */
    int64_t save_every;     /* 0: only after the last step */
    int64_t keep;           /* 0: every checkpoint stays */
    bool no_sim;
    exec_cpu_options o;
} args;

static int parse_dtype(const char *v, void *dst, char *why, size_t n)
{
    if (strcmp(v, "fp32") == 0)
        *(int *)dst = PLAN_FP32;
    else if (strcmp(v, "fp64") == 0)
        *(int *)dst = PLAN_FP64;
    else {
        snprintf(why, n, "'%s' is not an element type; write fp32 or fp64", v);
        return -1;
    }
    return 0;
}

/* The options: the drivers' common rows (exec_cli_rows) and piper-exec's own, one row each
 * (base_opt, base.h). The table lives as long as main's args. */
static base_opt g_opts[EXEC_CLI_NROWS + 24];
static const base_cli *cli_of(args *a)
{
    static base_cli cli;
    size_t n = 0;
    exec_cli_rows(&a->c, g_opts, &n);
    const base_opt own[] = {
        {BASE_OPT_CALL, "dtype", 0, "fp32|fp64", &a->o.dtype, .parse = parse_dtype,
         .help = "element type of the kernels", .def = "the plan's activations"},
        {BASE_OPT_STRING, "data", 0, "SRC", &a->data,
         .help = "tokens: synthetic, corpus (the bundled text, byte-level tokens), uint16:PATH or uint32:PATH (a "
         "pre-tokenised file of little-endian tokens)", .def = "synthetic"},
        {BASE_OPT_FLAG, "no-sim", 0, NULL, &a->no_sim,
         .help = "do not print piper-sim's prediction of the plan next to the measurement at the end (rank 0 "
         "simulates the plan with the simulator built into piper-exec; never with -q)"},
        {.kind = BASE_OPT_GROUP, .help = "outputs"},
        {BASE_OPT_PATH, "log", 0, "FILE", &a->c.log, .help = "rank 0 writes one line per step: step loss ce aux "
         "grad_norm seconds tokens_per_s gflops_per_s"},
        {BASE_OPT_PATH, "json", 0, "FILE", &a->json, .help = "rank 0 writes one JSON object per step (JSON Lines, "
         "docs/cli.md); - for stdout instead of the per-step lines"},
        {BASE_OPT_PATH, "trace", 0, "FILE", &a->c.trace, .help = "write what every rank ran as a Chrome trace (the "
         "format of piper-sim --trace: a process per rank, a thread per stream)"},
        {BASE_OPT_PATH, "dump-grads", 0, "DIR", &a->o.dump_grads,
         .help = "each rank writes the gradients its optimizer steps see in step 1 (DIR/grads.devD.txt)"},
        {BASE_OPT_PATH, "dump-params", 0, "DIR", &a->dump_params,
         .help = "each rank writes its parameters after the last step"},
        {.kind = BASE_OPT_GROUP, .help = "checkpoints"},
        {BASE_OPT_PATH, "save", 0, "DIR", &a->save,
         .help = "after the last step, write a sharded checkpoint (parameters, optimizer state, step, seed, data "
         "source) to DIR/step-K, then switch DIR/latest to it; DIR is created and checked for writing before the "
         "first step"},
        {BASE_OPT_INT, "save-every", 0, "N", &a->save_every, .lo = 1, .hi = EXEC_CLI_MAX_STEPS,
         .help = "with --save: a checkpoint every N steps (and after the last)"},
        {BASE_OPT_INT, "keep", 0, "N", &a->keep, .lo = 1, .hi = 1000000,
         .want = "a number of checkpoints of at least 1",
         .help = "with --save: after each save keep only N checkpoints (the latest and the N - 1 of the highest "
         "other steps)"},
        {BASE_OPT_PATH, "resume", 0, "DIR", &a->resume,
         .help = "start from a checkpoint (written under any strategy of the same model): DIR's latest, or "
         "DIR/step-K itself; run --steps more steps after its step"},
    };
    for (size_t k = 0; k < BASE_COUNT(own); k++) g_opts[n++] = own[k];
    cli = (base_cli){
        .prog = "piper-exec",
        .usage = "[mpirun -np N] piper-exec PLAN [options]",
        .about = "Runs a plan written by piper-compile -o, one MPI rank per device (rank r runs device\n"
                 "r; a plan whose only device is 0 also runs without mpirun).",
        .opts = g_opts,
        .nopts = n,
        .epilogue = "Numbers are read whole and exactly (1.5 is not a step count, inf not a rate). A loss or\n"
                    "gradient norm that is not finite stops the run, naming the rank, the step and the first\n"
                    "tensor that is not finite, with exit status 1.\n"
                    "\n"
                    "exit status: 0 on success, 1 when the plan cannot run or a step fails, 2 on usage errors.\n",
    };
    return &cli;
}

static int parse_args(int argc, char **argv, args *a, const base_cli **cli, base_error *e)
{
    memset(a, 0, sizeof *a);
    exec_cli_defaults(&a->c);
    a->o.dtype = -1;
    *cli = cli_of(a);
    const char **pos = base_xcalloc((size_t)argc + 1, sizeof *pos);
    int npos = 0;
    int rc = base_cli_parse(*cli, argc, argv, pos, &npos, e);
    if (rc == BASE_CLI_OK && exec_cli_finish(&a->c, "piper-exec", npos, pos, e)) rc = -1;
    free(pos);
    if (rc) return rc;
    if (a->save_every && !a->save)
        return base_errorf(e, "--save-every needs --save DIR, the directory its checkpoints go to");
    if (a->keep && !a->save)
        return base_errorf(e, "--keep needs --save DIR, the directory whose checkpoints it keeps");
    a->o.seed = a->c.seed;
    a->o.optim = a->c.optim;
    a->o.grad_clip = a->c.grad_clip;
    a->o.timeout_s = a->c.timeout_s;
    return 0;
}

/* Every rank says whether it could start; when one could not, all learn which and why. Returns
 * the failing rank, or -1. */
static int agree(int rank, int size, const base_error *e, char *msg, size_t n)
{
    int mine = e->set ? rank : size, first = size;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == size) return -1;
    if (rank == first) snprintf(msg, n, "%s", e->msg);
    MPI_Bcast(msg, (int)n, MPI_CHAR, first, MPI_COMM_WORLD);
    return first;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The same plan's piper-sim prediction next to the measurement: the step time (the median of
 * the steps after the first, which warms caches and allocates) and each rank's peak memory,
 * measured both as the plan sizes its buffers (what the simulator replays) and as the executor
 * holds them (the CPU kernels' layouts). */
static void print_prediction(const args *a, const plan_set *plan, int size, const double *times, const double *peaks)
{
    exec_sim_prediction sp;
    base_error e;
    base_error_clear(&e);
    if (exec_sim_predict(plan, size, &sp, &e)) {
        printf("no piper-sim prediction: %s\n", e.msg);
        return;
    }
    int64_t n = a->c.steps > 1 ? a->c.steps - 1 : 1;
    double *t = base_xcalloc((size_t)n, sizeof *t);
    memcpy(t, times + (a->c.steps > 1 ? 1 : 0), (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    double med = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    free(t);
    printf("piper-sim's prediction of this plan next to the measurement:\n");
    printf("  step time: predicted %.2f ms, measured %.2f ms (median of %s); ratio %.2f\n",
           sp.step_seconds * 1e3, med * 1e3, a->c.steps > 1 ? "the steps after the first" : "one step",
           sp.step_seconds > 0 ? med / sp.step_seconds : 0.0);
    printf("  peak memory (MiB), predicted / measured as the plan sizes buffers / as the executor "
           "holds them:");
    for (int k = 0; k < size; k++)
        printf(" r%d %.2f/%.2f/%.2f", k, exec_cli_mib(sp.peak[k]), exec_cli_mib(peaks[2 * k + 1]), exec_cli_mib(peaks[2 * k]));
    printf("\n");
    exec_sim_prediction_free(&sp);
}

/* Rank 0: one step's line (and log line) from every rank's figures `all` (nv per rank); keeps
 * the step's time and the ranks' peaks for the prediction at the end. */
static void print_step(const double *all, int size, int nv, int64_t step, int64_t first_step,
                       int64_t tokens, double flops, double *times, double *peaks, FILE *log, FILE *json)
{
    double ce, aux, norm, t;
    exec_cli_step_reduce(all, size, nv, &ce, &aux, &norm, &t);
    double loss = ce + aux;
    times[step - first_step] = t;
    for (int k = 0; k < size; k++) {
        if (all[k * nv + 4] > peaks[2 * k]) peaks[2 * k] = all[k * nv + 4];
        if (all[k * nv + 5] > peaks[2 * k + 1]) peaks[2 * k + 1] = all[k * nv + 5];
    }
    char nbuf[32];
    exec_cli_norm_text(norm, nbuf, sizeof nbuf);
    if (json != stdout) {
        printf("%-5lld %-11.6f %-10s %7.1f ms %-10.0f %-8.2f", (long long)step, loss, nbuf, t * 1e3,
               (double)tokens / t, flops / t * 1e-9);
        for (int k = 0; k < size; k++)
            printf(" r%d %.2f/%.2f", k, exec_cli_mib(all[k * nv + 4]), exec_cli_mib(all[k * nv + 5]));
        printf("\n");
        fflush(stdout);
    }
    if (json) {
        /* one object per line (JSON Lines; docs/cli.md, "piper-exec --json") */
        fprintf(json, "{\"step\": %lld, \"loss\": %.17g, \"ce\": %.17g, \"aux\": %.17g, \"grad_norm\": ",
                (long long)step, loss, ce, aux);
        if (norm >= 0)
            fprintf(json, "%.17g", sqrt(norm));
        else
            fprintf(json, "null");
        fprintf(json, ", \"seconds\": %.9g, \"tokens_per_s\": %.9g, \"gflops_per_s\": %.9g, \"peak_bytes\": [",
                t, (double)tokens / t, flops / t * 1e-9);
        for (int k = 0; k < size; k++) fprintf(json, "%s%.17g", k ? ", " : "", all[k * nv + 4]);
        fprintf(json, "], \"plan_peak_bytes\": [");
        for (int k = 0; k < size; k++) fprintf(json, "%s%.17g", k ? ", " : "", all[k * nv + 5]);
        fprintf(json, "]}\n");
        fflush(json);
    }
    if (log) {
        fprintf(log, "%lld %.17g %.17g %.17g %.17g %.9g %.9g %.9g\n", (long long)step, loss, ce,
                aux, norm >= 0 ? sqrt(norm) : -1.0, t, (double)tokens / t, flops / t * 1e-9);
        fflush(log);
    }
}

/* A checkpoint after `step`: rank 0 stages DIR/step-K.partial, every rank writes its shard
 * there, rank 0 the manifest once all are, then moves it to DIR/step-K and switches DIR/latest
 * (exec/README.md, "Checkpoints"). */
static int save_checkpoint(exec_cpu *c, const plan_set *plan, const args *a, int rank, int size,
                           int64_t step, const char *data_name, const char *optim_name, base_error *e)
{
    char dir[4400];
    exec_ckpt_stage_name(a->save, step, dir, sizeof dir);
    exec_ckpt_meta meta = {step, a->o.seed, optim_name, data_name};
    if (rank == 0 && exec_ckpt_stage(a->save, step, e)) return -1;
    MPI_Request br;
    MPI_Ibarrier(MPI_COMM_WORLD, &br); /* the stage exists before any rank writes into it */
    if (exec_cpu_wait(c, &br, "waiting for the checkpoint's directory", e)) return -1;
    uint64_t mine[2] = {0, 0};
    if (exec_cpu_save_shard(c, dir, &meta, &mine[0], &mine[1], e)) return -1;
    uint64_t *sh = rank == 0 ? base_xcalloc((size_t)size * 2, sizeof *sh) : NULL;
    MPI_Request r;
    MPI_Igather(mine, 2, MPI_UINT64_T, sh, 2, MPI_UINT64_T, 0, MPI_COMM_WORLD, &r);
    if (exec_cpu_wait(c, &r, "gathering the checkpoint's shards", e)) {
        free(sh);
        return -1;
    }
    if (rank != 0) return 0;
    uint64_t *bytes = base_xcalloc((size_t)size, sizeof *bytes), *sums = base_xcalloc((size_t)size, sizeof *sums);
    for (int k = 0; k < size; k++) bytes[k] = sh[2 * k], sums[k] = sh[2 * k + 1];
    char final[4400];
    int rc = exec_ckpt_write_manifest(dir, plan, c->dt, &meta, size, bytes, sums, e);
    if (!rc) rc = exec_ckpt_commit(a->save, step, (int)a->keep, final, sizeof final, e);
    free(bytes);
    free(sums);
    free(sh);
    if (!rc && !a->c.quiet) printf("checkpoint after step %lld written to %s\n", (long long)step, final);
    return rc;
}

int main(int argc, char **argv)
{
    /* the options first (no MPI needed), so that --timeout bounds MPI_Init too: a rank that never
     * arrives would leave the others inside it forever */
    base_error e;
    base_error_clear(&e);
    args a;
    const base_cli *cli;
    int prc = parse_args(argc, argv, &a, &cli, &e);
    exec_startup *guard = exec_startup_begin(prc ? 0 : a.c.timeout_s);
    MPI_Init(&argc, &argv);
    exec_startup_phase(guard, 2);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (prc) {
        exec_startup_end(guard);
        int status = 0;
        if (rank == 0) status = base_cli_finish(cli, prc, &e);
        MPI_Finalize();
        return prc > 0 ? 0 : rank == 0 ? status : BASE_CLI_USAGE_EXIT;
    }

    /* start: every rank reads the plan and its device; any failure stops all, named */
    plan_set plan;
    plan_init(&plan);
    exec_cpu *c = NULL;
    exec_interp *it = NULL;
    exec_ckpt ck;
    memset(&ck, 0, sizeof ck);
    const char *optim_name = a.o.optim.kind == EXEC_SGD ? "sgd" : "adamw";
    exec_data data;
    memset(&data, 0, sizeof data);
    char data_name[4300] = "synthetic";
    /* a checkpoint gives the seed (data and dropout streams) and the step to continue from */
    char resume_dir[4400];
    if (a.resume && exec_ckpt_resolve(a.resume, resume_dir, sizeof resume_dir, &e) == 0) a.resume = resume_dir;
    if (a.save && !e.set) exec_ckpt_probe_dir(a.save, rank, &e);
    if (a.resume && !e.set && exec_ckpt_read(&ck, a.resume, &e) == 0) {
        if (a.c.seed_given && a.o.seed != ck.seed)
            base_errorf(&e, "--seed %llu, but the checkpoint %s was written with seed %llu; a resumed "
                            "run continues its data and dropout streams (leave --seed out)",
                        (unsigned long long)a.o.seed, a.resume, (unsigned long long)ck.seed);
        else if (strcmp(ck.optimizer, optim_name) != 0)
            base_errorf(&e, "--optimizer %s, but the checkpoint %s holds %s state; resume with "
                            "--optimizer %s",
                        optim_name, a.resume, ck.optimizer, ck.optimizer);
        a.o.seed = ck.seed;
    }
    if (!e.set && plan_read_file(&plan, a.c.plan, &e) == 0 &&
        exec_data_open(&data, a.data, plan.model.vocab, plan.model.seq, &e) == 0) {
        exec_data_describe(&data, data_name, sizeof data_name);
        a.o.data = &data;
        if (a.resume && strcmp(ck.data, data_name) != 0)
            base_errorf(&e, "the checkpoint %s was trained on data '%s', this run reads '%s'; resume "
                            "with the same --data",
                        a.resume, ck.data, data_name);
        if (!e.set) exec_cli_check_plan(&plan, &a.c, &e);
        if (!e.set) exec_cli_check_ranks(&plan, size, &e);
        if (!e.set) exec_cpu_open(&c, &plan, rank, size, &a.o, &e);
        if (!e.set && a.resume) exec_cpu_resume(c, &ck, &e);
    }
    const int64_t first_step = a.resume && !e.set ? ck.step + 1 : 1;
    char msg[BASE_ERROR_MAX];
    exec_startup_phase(guard, 3);
    int bad = agree(rank, size, &e, msg, sizeof msg);
    if (bad < 0) {
        if (exec_cpu_connect(c, &e) == 0 && exec_interp_new(&it, &plan, rank, &c->be, &e) == 0)
            exec_cpu_attach(c, it);
        bad = agree(rank, size, &e, msg, sizeof msg);
    }
    exec_startup_end(guard);
    if (bad >= 0) {
        if (rank == bad)
            fprintf(stderr, "piper-exec: rank %d (device %d) failed: %s\n", rank, rank, msg);
        else
            fprintf(stderr, "piper-exec: rank %d: stopping because rank %d (device %d) failed: %s\n",
                    rank, bad, bad, msg);
        exec_interp_free(it);
        exec_cpu_close(c);
        plan_free(&plan);
        exec_ckpt_free(&ck);
        exec_data_close(&data);
        MPI_Finalize();
        return 1;
    }
    exec_ckpt_free(&ck);

    const plan_model *m = &plan.model;
    const int64_t tokens = m->global_batch * m->seq;
    /* the arithmetic of a step, by the plan's kernel lists (GEMMs exact), for GFLOP/s */
    const double flops = exec_cli_plan_flops(&plan, size);
    FILE *log = NULL, *json = NULL;
    if (rank == 0 && a.c.log && !(log = fopen(a.c.log, "w"))) {
        base_errorf(&e, "cannot write %s: %s", a.c.log, strerror(errno));
        goto fail;
    }
    /* --json -: stdout carries the objects alone, as piper-sim --json - does */
    if (a.json && !strcmp(a.json, "-")) a.c.quiet = true;
    if (rank == 0 && a.json && !(json = strcmp(a.json, "-") ? fopen(a.json, "w") : stdout)) {
        base_errorf(&e, "cannot write %s: %s; check the path", a.json, strerror(errno));
        goto fail;
    }
    if (rank == 0 && !a.c.quiet) {
        int used = 0;
        for (int d = 0; d < plan.ndevices; d++) used += plan_dev_list(&plan, d)->n > 0;
        printf("piper-exec: %s (%s), %d rank%s for %d device%s with work, %s, %s lr %g, %lld "
               "steps of %lld sequences (micro-batch %lld x %lld x data-parallel %lld) = %lld "
               "tokens\n",
               m->name ? m->name : "?", a.c.plan, size, size == 1 ? "" : "s", used, used == 1 ? "" : "s",
               plan_dtype_name(c->dt), a.o.optim.kind == EXEC_SGD ? "SGD" : "AdamW",
               a.o.optim.lr, (long long)a.c.steps, (long long)m->global_batch,
               (long long)m->micro_batch, (long long)m->num_microbatches, (long long)c->dp_size,
               (long long)tokens);
        printf("%-5s %-11s %-10s %-10s %-10s %-8s %s\n", "step", "loss", "grad norm", "time",
               "tokens/s", "GFLOP/s", "peak memory per rank, executor / plan (MiB)");
    }
    if (rank == 0 && a.c.no_check)
        fprintf(stderr, "piper-exec: warning: --no-check: the plan's static check was skipped; transfers move "
                        "the sizes of this executor's layouts, and a receive that gets another size fails\n");
    if (log) fprintf(log, "# step loss ce aux grad_norm seconds tokens_per_s gflops_per_s\n");
    if (a.c.memory) {
        /* one rank after the other, so that lines do not interleave */
        for (int k = 0; k < size; k++) {
            if (k == rank) {
                exec_cpu_print_memory(c, stdout);
                fflush(stdout);
            }
            MPI_Barrier(MPI_COMM_WORLD);
        }
    }
    enum { NV = 6 };
    double *all = rank == 0 ? base_xcalloc((size_t)size * NV, sizeof(double)) : NULL;
    /* rank 0: each step's time and every rank's peaks over the run, for the prediction */
    double *times = rank == 0 ? base_xcalloc((size_t)a.c.steps, sizeof(double)) : NULL;
    double *peaks = rank == 0 ? base_xcalloc((size_t)size * 2, sizeof(double)) : NULL;
    exec_cpu_trace tr;
    memset(&tr, 0, sizeof tr);
    if (a.c.trace) {
        exec_cpu_trace_init(&tr, c);
        exec_interp_observe(it, exec_cpu_trace_observer, &tr);
    }
    if (rank == 0 && !a.c.quiet && a.resume)
        printf("resumed from %s after step %lld\n", a.resume, (long long)(first_step - 1));
    /* rank 0, on a terminal: the steps done and the time left (base_progress) */
    base_progress pg;
    base_progress_begin(&pg, "piper-exec", "training");
    if (rank != 0) pg.f = NULL;
    for (int64_t step = first_step; step < first_step + a.c.steps; step++) {
        exec_cpu_step_stats st;
        if (exec_cpu_step(c, it, step, &st, &e)) {
            base_error_prefix(&e, "step %lld: ", (long long)step);
            goto fail;
        }
        double v[NV] = {st.loss, st.aux_loss, st.grad_norm, st.seconds, st.peak, st.plan_peak};
        MPI_Request r;
        MPI_Igather(v, NV, MPI_DOUBLE, all, NV, MPI_DOUBLE, 0, MPI_COMM_WORLD, &r);
        if (exec_cpu_wait(c, &r, "gathering the step's figures", &e)) goto fail;
        if (rank == 0) {
            base_progress_clear(&pg);
            print_step(all, size, NV, step, first_step, tokens, flops, times, peaks, log, json);
            char what[64];
            snprintf(what, sizeof what, "step %lld of %lld", (long long)(step - first_step + 1), (long long)a.c.steps);
            base_progress_update(&pg, (double)(step - first_step + 1), (double)a.c.steps, what);
        }
        /* after the step's line, so that the output reads in order */
        if (a.save_every && step % a.save_every == 0 &&
            save_checkpoint(c, &plan, &a, rank, size, step, data_name, optim_name, &e))
            goto fail;
    }
    base_progress_end(&pg);
    if (a.dump_params && exec_cpu_dump_params(c, a.dump_params, &e)) goto fail;
    if (a.c.trace) {
        if (exec_cpu_trace_write(&tr, a.c.trace, &e)) goto fail;
        exec_cpu_trace_free(&tr);
        if (rank == 0 && !a.c.quiet) printf("trace written to %s\n", a.c.trace);
    }
    {
        const int64_t last = first_step + a.c.steps - 1;
        if (a.save && (!a.save_every || last % a.save_every != 0) &&
            save_checkpoint(c, &plan, &a, rank, size, last, data_name, optim_name, &e))
            goto fail;
    }
    if (a.c.memory) {
        /* the last step's figures next to the plan's, one rank after the other */
        for (int k = 0; k < size; k++) {
            if (k == rank) {
                exec_cpu_print_accounting(c, stdout);
                fflush(stdout);
            }
            MPI_Barrier(MPI_COMM_WORLD);
        }
    }
    {
        MPI_Request r;
        MPI_Ibarrier(MPI_COMM_WORLD, &r);
        if (exec_cpu_wait(c, &r, "the final barrier", &e)) goto fail;
    }
    if (rank == 0 && !a.c.quiet && !a.no_sim) print_prediction(&a, &plan, size, times, peaks);
    free(times);
    free(peaks);
    free(all);
    if (log) fclose(log);
    if (json && json != stdout && fclose(json)) {
        fprintf(stderr, "piper-exec: cannot write %s: %s\n", a.json, strerror(errno));
        exec_interp_free(it);
        exec_cpu_close(c);
        plan_free(&plan);
        exec_data_close(&data);
        MPI_Finalize();
        return 1;
    }
    exec_interp_free(it);
    exec_cpu_close(c);
    plan_free(&plan);
    exec_data_close(&data);
    MPI_Finalize();
    return 0;

fail:
    /* a peer's notice is already a "stopping because ..." message; our own failure is told to
     * every other rank before the job is aborted */
    /* a watchdog that fired asks the others where they stand, to name the rank that stopped */
    if (c && ((it && exec_interp_timed_out(it)) || c->timed_out)) exec_cpu_find_culprit(c, &e);
    const char *peer = strstr(e.msg, "stopping because rank ");
    if (peer) {
        /* and where this rank's streams stand, so that a stall shows on every rank */
        base_buf heads = {0};
        if (it) exec_interp_describe_heads(it, &heads);
        fprintf(stderr, "piper-exec: rank %d: %s%s%s\n", rank, peer,
                heads.n ? "; this rank's streams stand at" : "", heads.n ? heads.s : "");
        free(heads.s);
    } else {
        char note[BASE_ERROR_MAX + 64];
        snprintf(note, sizeof note, "rank %d (device %d) failed: %s", rank, rank, e.msg);
        fprintf(stderr, "piper-exec: %s\n", note);
        fflush(stderr);
        exec_cpu_notify_failure(c, note);
        /* give the others a moment to print before the job goes down */
        struct timespec ts = {0, 500000000};
        nanosleep(&ts, NULL);
    }
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
}
