/* startup.c — bounds piper-exec's start-up (MPI_Init and the start-up agreement) by --timeout.
 *
 * Why a thread and marks on disk: a rank that never arrives (stopped, or its host gone) leaves
 * the others blocked inside MPI_Init or a collective, where no MPI timeout reaches them. So a
 * watcher thread, started before MPI_Init, ends the process when start-up has not finished in
 * time, and it names the missing ranks from marks that every rank leaves in a job directory
 * (DIR/rank.R holding the phase it reached: 1 started, 2 MPI up, 3 in the start-up agreement
 * once its plan is read), since MPI itself cannot be asked
 * yet. The directory is keyed by the launcher's job id (PMIx namespace, Slurm job and step) in
 * $TMPDIR or /tmp; on several hosts without a shared TMPDIR only this host's ranks are seen, and
 * the message says so. Without a launcher's job id there are no marks and the message names no
 * rank. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cpu_exec.h"

struct exec_startup {
    double timeout_s;
    int rank, size;             /* from the launcher's environment; -1 when unknown */
    char dir[512], mark[600];   /* "" without a job id */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done, started;
};

static int env_int(const char *const *names, int dflt)
{
    for (int i = 0; names[i]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) return atoi(v);
    }
    return dflt;
}

static void put_mark(exec_startup *s, int phase)
{
    if (!s->mark[0]) return;
    FILE *f = fopen(s->mark, "w");
    if (!f) return;
    fprintf(f, "%d\n", phase);
    fclose(f);
}

/* The ranks whose mark is missing or behind the furthest phase, into out. */
static void laggards(const exec_startup *s, char *out, size_t n)
{
    out[0] = 0;
    if (!s->dir[0] || s->size <= 0) {
        snprintf(out, n, "a rank has not joined (the launcher gives no job id, so piper-exec cannot "
                         "tell which)");
        return;
    }
    int *phase = calloc((size_t)s->size, sizeof *phase);
    if (!phase) return;
    int best = 0;
    for (int r = 0; r < s->size; r++) {
        char p[700];
        snprintf(p, sizeof p, "%s/rank.%d", s->dir, r);
        FILE *f = fopen(p, "r");
        if (f) {
            if (fscanf(f, "%d", &phase[r]) != 1) phase[r] = 0;
            fclose(f);
        }
        if (phase[r] > best) best = phase[r];
    }
    size_t o = 0;
    int late = 0;
    for (int r = 0; r < s->size && o + 80 < n; r++) {
        if (phase[r] >= best) continue;
        o += (size_t)snprintf(out + o, n - o, "%srank %d %s", late++ ? ", " : "", r,
                              phase[r] == 0   ? "has not started"
                              : phase[r] == 1 ? "has not finished MPI_Init"
                                              : "has not reached the start-up agreement");
    }
    if (!late)
        snprintf(out, n, "every rank seen on this host reached the start-up agreement; a rank on "
                         "another host has not, or one stopped inside it");
    else if (o + 80 < n)
        snprintf(out + o, n - o, " (marks in %s; ranks on other hosts are not seen there)", s->dir);
    free(phase);
}

static void *watch(void *arg)
{
    exec_startup *s = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)s->timeout_s;
    until.tv_nsec += (long)((s->timeout_s - (double)(time_t)s->timeout_s) * 1e9);
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    while (!s->done && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&s->cv, &s->mu, &until);
    bool done = s->done;
    pthread_mutex_unlock(&s->mu);
    if (done) return NULL;
    char who[1024];
    laggards(s, who, sizeof who);
    fprintf(stderr, "piper-exec: rank %d: start-up did not finish within %.0f s (the watchdog's "
                    "timeout): %s; check that rank's process and host (was it stopped?), or raise "
                    "--timeout\n",
            s->rank, s->timeout_s, who);
    fflush(stderr);
    if (s->mark[0]) unlink(s->mark);
    /* the main thread is blocked inside MPI; only the process's end frees the job */
    _exit(1);
}

exec_startup *exec_startup_begin(double timeout_s)
{
    exec_startup *s = base_xcalloc(1, sizeof *s);
    s->timeout_s = timeout_s;
    static const char *const ranks[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", NULL};
    static const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", NULL};
    s->rank = env_int(ranks, -1);
    s->size = env_int(sizes, -1);
    const char *ns = getenv("PMIX_NAMESPACE");
    const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
    char key[256] = "";
    if (ns && *ns) snprintf(key, sizeof key, "%s", ns);
    else if (job && *job) snprintf(key, sizeof key, "slurm-%s.%s", job, step ? step : "0");
    for (char *c = key; *c; c++)
        if (*c == '/') *c = '_';
    if (key[0] && s->rank >= 0) {
        const char *tmp = getenv("TMPDIR");
        snprintf(s->dir, sizeof s->dir, "%s/piper-exec.%s", tmp && *tmp ? tmp : "/tmp", key);
        if (mkdir(s->dir, 0777) != 0 && errno != EEXIST) s->dir[0] = 0;
        if (s->dir[0]) snprintf(s->mark, sizeof s->mark, "%s/rank.%d", s->dir, s->rank);
    }
    put_mark(s, 1);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (timeout_s > 0) s->started = pthread_create(&s->thread, NULL, watch, s) == 0;
    return s;
}

void exec_startup_phase(exec_startup *s, int phase)
{
    if (s) put_mark(s, phase);
}

void exec_startup_end(exec_startup *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->done = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->started) pthread_join(s->thread, NULL);
    /* every rank is through the start-up agreement (a collective), so no one reads marks now */
    if (s->mark[0]) unlink(s->mark);
    if (s->dir[0]) rmdir(s->dir); /* fails until the last rank's mark is gone */
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
