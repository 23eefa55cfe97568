/* sim_predict.c — piper-exec's comparison with the simulator: at the end of a run, rank 0 runs
 * the piper-sim found next to piper-exec on the same plan (`piper-sim PLAN --json FILE -q`,
 * spawned without fork so that MPI is undisturbed) and reads back the predicted step time and
 * every device's peak memory (docs/sim-json.md), which piper-exec prints next to what it
 * measured. The prediction is information, not a check: when piper-sim is absent or fails, the
 * run says so and succeeds. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim_predict.h"

extern char **environ;

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    base_buf b = {0};
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) base_buf_putn(&b, chunk, n);
    fclose(f);
    return b.s;
}

/* the number after "key": at or after p, or NULL */
static const char *number_after(const char *p, const char *key, double *v)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\": ", key);
    const char *q = p ? strstr(p, k) : NULL;
    if (!q) return NULL;
    char *end;
    *v = strtod(q + strlen(k), &end);
    return end == q + strlen(k) ? NULL : end;
}

int exec_sim_predict(const char *plan_path, int ndevices, exec_sim_prediction *out, base_error *e)
{
    memset(out, 0, sizeof *out);
    char self[PATH_MAX], sim[PATH_MAX + 16];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return base_errorf(e, "cannot find piper-exec's own path");
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (slash) *slash = 0;
    snprintf(sim, sizeof sim, "%s/piper-sim", self);
    struct stat st;
    if (stat(sim, &st) || !(st.st_mode & S_IXUSR)) {
        out->absent = true;
        return base_errorf(e, "no piper-sim next to piper-exec (%s)", sim);
    }
    char json[64], log[64];
    snprintf(json, sizeof json, "/tmp/piper-exec-sim.%d.json", (int)getpid());
    snprintf(log, sizeof log, "/tmp/piper-exec-sim.%d.log", (int)getpid());
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    char *argv[] = {sim, (char *)plan_path, "--json", json, "-q", NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, sim, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc) return base_errorf(e, "cannot run %s: %s", sim, strerror(rc));
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    char *text = slurp(json);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !text) {
        char *why = slurp(log);
        char *nl = why ? strchr(why, '\n') : NULL;
        if (nl) *nl = 0;
        base_errorf(e, "%s failed on the plan: %s", sim, why && *why ? why : "no output");
        free(why);
        free(text);
        unlink(json);
        unlink(log);
        return -1;
    }
    unlink(json);
    unlink(log);
    const char *p = number_after(text, "step_seconds", &out->step_seconds);
    out->peak = base_xcalloc((size_t)(ndevices > 0 ? ndevices : 1), sizeof *out->peak);
    out->ndevices = ndevices;
    p = p ? strstr(p, "\"per_device\"") : NULL;
    for (int d = 0; d < ndevices && p; d++) {
        double dev = -1;
        p = number_after(p, "device", &dev);
        if (p && (int)dev == d) p = number_after(p, "peak_bytes", &out->peak[d]);
    }
    free(text);
    if (!p) {
        exec_sim_prediction_free(out);
        return base_errorf(e, "cannot read %s's JSON (no step_seconds or per_device peak_bytes)", sim);
    }
    return 0;
}

void exec_sim_prediction_free(exec_sim_prediction *p)
{
    free(p->peak);
    p->peak = NULL;
}
