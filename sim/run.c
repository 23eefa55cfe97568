/* run.c — sim_run(): the simulation in a forked child, its results back through a pipe.
 *
 * Why a child: SimGrid's engine is a process-wide singleton that cannot be initialised twice, and
 * it aborts the process on internal errors. In a child, one process (a test suite, a parameter
 * sweep) can simulate any number of plans, and an abort becomes an error message instead of a
 * crash. The results are plain numbers, so they travel as raw structs; the child leaves with
 * _exit(), skipping SimGrid's exit-time teardown (and leak checks of memory it owns). */
#include "sim_internal.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static double peak_of_act(const plan_set *p)
{
    const plan_gpu *g = &p->gpu;
    int dt = p->act_dtype < PLAN_NDTYPE ? p->act_dtype : PLAN_BF16;
    if (g->peak_flops[dt] > 0) return g->peak_flops[dt];
    return g->peak_flops[PLAN_BF16] > 0 ? g->peak_flops[PLAN_BF16] : g->peak_flops[PLAN_FP32];
}

void sim_result_finish(const plan_set *p, sim_result *r)
{
    double step = 0;
    r->model_flops = r->hw_flops = 0;
    r->last_device = r->critical_device = 0;
    for (int d = 0; d < r->ndevices; d++) {
        const sim_device_result *x = &r->dev[d];
        if (x->end_seconds > step) step = x->end_seconds, r->last_device = d;
        r->model_flops += x->model_flops;
        r->hw_flops += x->hw_flops;
    }
    r->step_seconds = step;
    r->usable_bytes = p->gpu.mem_bytes - p->gpu.reserve_bytes;
    r->nover_memory = 0;
    double least_idle = INFINITY;
    for (int d = 0; d < r->ndevices; d++) {
        sim_device_result *x = &r->dev[d];
        x->idle_seconds = step - x->compute_seconds - x->exposed_comm_seconds;
        if (x->idle_seconds < 0) x->idle_seconds = 0; /* rounding */
        x->over_memory = p->gpu.mem_bytes > 0 && x->peak_bytes > r->usable_bytes;
        r->nover_memory += x->over_memory;
        /* ties (within rounding of the step) go to the lowest id, so equal devices report the same */
        if (x->idle_seconds < least_idle - 1e-9 * step) least_idle = x->idle_seconds, r->critical_device = d;
    }
    r->peak_flops = peak_of_act(p);
    double denom = step * r->peak_flops * r->ndevices;
    r->mfu = denom > 0 ? r->model_flops / denom : 0;
    r->hfu = denom > 0 ? r->hw_flops / denom : 0;
    double tokens = (double)p->model.global_batch * (double)p->model.seq;
    r->tokens_per_second = step > 0 ? tokens / step : 0;
}

void sim_result_free(sim_result *r)
{
    free(r->dev);
    memset(r, 0, sizeof *r);
}

static int write_all(int fd, const void *buf, size_t n)
{
    const char *s = buf;
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        s += w, n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *buf, size_t n)
{
    char *s = buf;
    while (n > 0) {
        ssize_t got = read(fd, s, n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        s += got, n -= (size_t)got;
    }
    return 0;
}

static void drain(int fd)
{
    char buf[4096];
    while (read(fd, buf, sizeof buf) > 0) {
    }
}

int sim_run(const plan_set *p, const sim_options *o, sim_result *r, base_error *e)
{
    memset(r, 0, sizeof *r);
    if (o->platform && sim_platform_check(o->platform, p->ndevices, e)) return -1;
    if (o->in_process) return sim_replay(p, o, r, e);

    int fds[2];
    if (pipe(fds)) return base_errorf(e, "cannot create a pipe for the simulation (%s); free some resources", strerror(errno));
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        return base_errorf(e, "cannot start the simulation process (%s); free some memory", strerror(errno));
    }
    if (pid == 0) {
        close(fds[0]);
        base_error ce;
        base_error_clear(&ce);
        sim_result cr;
        int32_t status = sim_replay(p, o, &cr, &ce) ? 1 : 0;
        int bad = write_all(fds[1], &status, sizeof status);
        if (!bad && status == 0) {
            bad = write_all(fds[1], &cr, sizeof cr);
            if (!bad) bad = write_all(fds[1], cr.dev, (size_t)cr.ndevices * sizeof *cr.dev);
        } else if (!bad) {
            bad = write_all(fds[1], &ce, sizeof ce);
        }
        fflush(stderr);
        _exit(bad ? 3 : 0);
    }
    close(fds[1]);
    int32_t status = -1;
    int rc = 0;
    if (read_all(fds[0], &status, sizeof status)) {
        rc = -1;
    } else if (status == 0) {
        sim_result got;
        if (read_all(fds[0], &got, sizeof got) || got.ndevices != p->ndevices) {
            rc = -1;
        } else {
            got.dev = base_xcalloc((size_t)got.ndevices + 1, sizeof *got.dev);
            if (read_all(fds[0], got.dev, (size_t)got.ndevices * sizeof *got.dev)) {
                free(got.dev);
                rc = -1;
            } else {
                *r = got;
            }
        }
    } else {
        base_error ce;
        if (read_all(fds[0], &ce, sizeof ce)) {
            rc = -1;
        } else {
            ce.msg[sizeof ce.msg - 1] = 0;
            base_errorf(e, "%s", ce.msg);
            rc = 1;
        }
    }
    drain(fds[0]);
    close(fds[0]);
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    if (rc == 1) return -1;
    if (rc != 0 || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        sim_result_free(r);
        if (WIFSIGNALED(ws))
            return base_errorf(e, "the simulation engine (SimGrid) died with signal %d (%s); its messages, above, say "
                               "why. Check the plan with piper-compile and the --links figures",
                               WTERMSIG(ws), strsignal(WTERMSIG(ws)));
        return base_errorf(e, "the simulation process failed (exit status %d) without reporting results; its "
                           "messages, above, say why", WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
    }
    return 0;
}
