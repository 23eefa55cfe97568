/* run.c — tiers (b) and (c) over the candidates tier (a) kept: compile and check them, rank the
 * fitting ones by the check's step-time estimate, simulate the best K and rank those by simulated
 * step time.
 *
 * Pruning (the default): a candidate whose step-time lower bound (search_time_bound, below the
 * check's makespan on every candidate) exceeds the K-th best estimate found so far cannot be
 * among the K best by estimate, so it is not compiled. Candidates are compiled in the order of
 * their bound, in batches of a fixed size (so that the result does not depend on -j), and the
 * first batch whose bound is above the K-th estimate ends tier (b). The K simulated and their
 * order are then exactly those of compiling every candidate; what differs is only what the
 * report says of the candidates not compiled (their reason is `pruned`, and a nearest memory
 * miss among them is not known). */
#include "search.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* Candidates compiled between two looks at the K-th estimate. */
enum { PRUNE_BATCH = 48 };

double search_cpu_seconds(void)
{
    struct rusage self, kids;
    getrusage(RUSAGE_SELF, &self);
    getrusage(RUSAGE_CHILDREN, &kids);
    return (double)(self.ru_utime.tv_sec + self.ru_stime.tv_sec + kids.ru_utime.tv_sec + kids.ru_stime.tv_sec) +
           1e-6 * (double)(self.ru_utime.tv_usec + self.ru_stime.tv_usec + kids.ru_utime.tv_usec + kids.ru_stime.tv_usec);
}

typedef struct job_ctx {
    const search_problem *pb;
    const search_enum *en;
    const int *which; /* candidate index of each job */
} job_ctx;

static void job_compile(void *p, int i, search_eval *out)
{
    const job_ctx *x = p;
    search_compile_eval(x->pb, &x->en->c[x->which[i]], out);
}

static void job_simulate(void *p, int i, search_eval *out)
{
    const job_ctx *x = p;
    search_simulate_eval(x->pb, &x->en->c[x->which[i]], out);
}

/* Ranking order: simulated before not, then by step time (simulated) or estimate, then index. */
static const search_eval *sort_eval;
static int by_time(const void *a, const void *b)
{
    int i = *(const int *)a, j = *(const int *)b;
    const search_eval *x = &sort_eval[i], *y = &sort_eval[j];
    if (x->simulated != y->simulated) return x->simulated ? -1 : 1;
    double tx = x->simulated ? x->step_seconds : x->estimate_seconds;
    double ty = y->simulated ? y->step_seconds : y->estimate_seconds;
    if (tx != ty) return tx < ty ? -1 : 1;
    return i < j ? -1 : i > j;
}

static const double *sort_bound;
static int by_bound(const void *a, const void *b)
{
    int i = *(const int *)a, j = *(const int *)b;
    if (sort_bound[i] != sort_bound[j]) return sort_bound[i] < sort_bound[j] ? -1 : 1;
    return i < j ? -1 : i > j;
}

/* The K-th smallest estimate among the fitting candidates of `done`, or -1 with fewer than K. */
static double kth_estimate(const search_eval *ev, const int *done, int ndone, int k, double *scratch)
{
    int n = 0;
    for (int i = 0; i < ndone; i++)
        if (ev[done[i]].reason == SEARCH_OK) scratch[n++] = ev[done[i]].estimate_seconds;
    if (n < k || k <= 0) return -1;
    /* partial selection: small k, so k passes of a minimum suffice */
    for (int a = 0; a < k; a++)
        for (int b = a + 1; b < n; b++)
            if (scratch[b] < scratch[a]) {
                double t = scratch[a];
                scratch[a] = scratch[b];
                scratch[b] = t;
            }
    return scratch[k - 1];
}

/* Tier (b): fills r->eval for every candidate, compiled or pruned. */
static int compile_tier(const search_problem *pb, const search_enum *en, int top, int jobs, bool prune,
                        search_result *r, base_error *e)
{
    int n = en->n;
    int *order = base_xcalloc((size_t)(n ? n : 1), sizeof *order);
    for (int i = 0; i < n; i++) order[i] = i;
    double *bound = NULL;
    if (prune) {
        bound = base_xcalloc((size_t)(n ? n : 1), sizeof *bound);
        for (int i = 0; i < n; i++) bound[i] = search_time_bound(pb, &en->c[i]);
        sort_bound = bound;
        qsort(order, (size_t)n, sizeof *order, by_bound);
    }
    search_eval *batch = base_xcalloc(PRUNE_BATCH, sizeof *batch);
    double *scratch = base_xcalloc((size_t)(n ? n : 1), sizeof *scratch);
    job_ctx x = {pb, en, NULL};
    int rc = 0, done = 0;
    while (done < n && !rc) {
        if (prune && done > 0) {
            double kth = kth_estimate(r->eval, order, done, top, scratch);
            if (kth >= 0 && bound[order[done]] > kth) break; /* and so is every later bound */
        }
        int nb = prune ? (n - done < PRUNE_BATCH ? n - done : PRUNE_BATCH) : n;
        search_eval *out = prune ? batch : r->eval;
        memset(out, 0, (size_t)nb * sizeof *out);
        x.which = order + done;
        rc = search_parallel(nb, jobs, job_compile, &x, out, e);
        if (prune)
            for (int i = 0; i < nb; i++) r->eval[order[done + i]] = out[i];
        done += nb;
    }
    for (int i = done; i < n; i++) {
        search_eval *ev = &r->eval[order[i]];
        memset(ev, 0, sizeof *ev);
        ev->reason = SEARCH_PRUNED;
    }
    free(scratch);
    free(batch);
    free(bound);
    free(order);
    return rc;
}

int search_run(const search_problem *pb, const search_enum *en, int top, int jobs, bool prune, search_result *r,
               base_error *e)
{
    r->pb = pb;
    r->en = en;
    memcpy(r->count, en->count, sizeof r->count);
    r->count[SEARCH_OK] = 0;
    r->eval = base_xcalloc((size_t)(en->n ? en->n : 1), sizeof *r->eval);
    r->rank = base_xcalloc((size_t)(en->n ? en->n : 1), sizeof *r->rank);
    r->nearest_oom = r->farthest_oom = -1;
    double t0 = search_cpu_seconds();
    int rc = compile_tier(pb, en, top, jobs, prune, r, e);
    double t1 = search_cpu_seconds();
    for (int i = 0; i < en->n; i++) {
        search_eval *ev = &r->eval[i];
        if (ev->reason == SEARCH_OK) r->rank[r->nrank++] = i;
        else r->count[ev->reason]++;
        if (ev->reason != SEARCH_OOM) continue;
        if (r->nearest_oom < 0 || ev->peak_bytes < r->eval[r->nearest_oom].peak_bytes) r->nearest_oom = i;
        if (r->farthest_oom < 0 || ev->peak_bytes > r->eval[r->farthest_oom].peak_bytes) r->farthest_oom = i;
    }
    sort_eval = r->eval;
    qsort(r->rank, (size_t)r->nrank, sizeof *r->rank, by_time);
    /* tier (c): the best K by the estimate */
    int nsim = r->nrank < top ? r->nrank : top;
    search_eval *sim = base_xcalloc((size_t)(nsim ? nsim : 1), sizeof *sim);
    for (int k = 0; k < nsim; k++) sim[k] = r->eval[r->rank[k]];
    job_ctx x = {pb, en, r->rank};
    if (!rc) rc = search_parallel(nsim, jobs, job_simulate, &x, sim, e);
    for (int k = 0; k < nsim; k++) {
        r->eval[r->rank[k]] = sim[k];
        if (sim[k].simulated) r->nsimulated++;
        else r->count[SEARCH_SIM]++;
    }
    free(sim);
    /* a failed simulation leaves the ranking */
    int kept = 0;
    for (int k = 0; k < r->nrank; k++)
        if (r->eval[r->rank[k]].reason == SEARCH_OK) r->rank[kept++] = r->rank[k];
    r->nrank = kept;
    sort_eval = r->eval;
    qsort(r->rank, (size_t)r->nrank, sizeof *r->rank, by_time);
    r->count[SEARCH_OK] = r->nrank;
    r->nsim_run = nsim;
    r->seconds[1] = t1 - t0;
    r->seconds[2] = search_cpu_seconds() - t1;
    return rc;
}

void search_result_free(search_result *r)
{
    free(r->eval);
    free(r->rank);
    r->eval = NULL;
    r->rank = NULL;
}
