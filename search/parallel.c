/* parallel.c — `-j N`: candidates evaluated by N forked workers, each writing its own slots of an
 * array in shared memory, so that the results (and every output made from them) are the same for
 * any N. A worker that dies leaves its unfinished slots marked, and those become errors. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "search.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

int search_parallel(int n, int jobs, search_job_fn fn, void *ctx, search_eval *out, base_error *e)
{
    if (n <= 0) return 0;
    if (jobs <= 1) { /* in this process: the same calls in the same order */
        for (int i = 0; i < n; i++) fn(ctx, i, &out[i]);
        return 0;
    }
    if (jobs > n) jobs = n;
    size_t bytes = (size_t)n * sizeof *out;
    search_eval *shared = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) return base_errorf(e, "cannot map %zu bytes of shared memory for -j %d; use -j 1", bytes, jobs);
    memcpy(shared, out, bytes);
    for (int i = 0; i < n; i++) shared[i].reason = SEARCH_NREASONS; /* not done yet */
    fflush(NULL); /* the children must not write the parent's buffered output again */
    pid_t *pids = base_xcalloc((size_t)jobs, sizeof *pids);
    for (int w = 0; w < jobs; w++) {
        pid_t pid = fork();
        if (pid == 0) {
            for (int i = w; i < n; i += jobs) fn(ctx, i, &shared[i]);
            _exit(0);
        }
        if (pid < 0) { /* fewer workers: this process takes the rest of that worker's share */
            for (int i = w; i < n; i += jobs) fn(ctx, i, &shared[i]);
        }
        pids[w] = pid;
    }
    for (int w = 0; w < jobs; w++)
        if (pids[w] > 0) waitpid(pids[w], NULL, 0);
    free(pids);
    for (int i = 0; i < n; i++) {
        out[i] = shared[i];
        if (out[i].reason == SEARCH_NREASONS) {
            out[i].reason = SEARCH_COMPILE;
            snprintf(out[i].msg, sizeof out[i].msg, "the worker evaluating this candidate died");
        }
    }
    munmap(shared, bytes);
    return 0;
}
