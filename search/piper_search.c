/* piper_search.c — `piper-search`: the best strategy for a model on a cluster. Enumerates the
 * space's candidates, filters them analytically (tier a), compiles and checks the survivors
 * (tier b), simulates the best K (tier c) and prints them ranked; the winner can be written as a
 * program (-o). The report and --json are deterministic (the same for any -j); CPU seconds per
 * tier go to stderr. */
#define _DEFAULT_SOURCE /* realpath */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "search/search.h"

typedef struct ctx {
    const search_problem *pb;
    const search_enum *en;
    const int *which; /* tier (c): candidate index of each job */
} ctx;

static void job_compile(void *p, int i, search_eval *out)
{
    const ctx *x = p;
    search_compile_eval(x->pb, &x->en->c[i], out);
}

static void job_simulate(void *p, int i, search_eval *out)
{
    const ctx *x = p;
    search_simulate_eval(x->pb, &x->en->c[x->which[i]], out);
}

static double cpu_seconds(void)
{
    struct rusage self, kids;
    getrusage(RUSAGE_SELF, &self);
    getrusage(RUSAGE_CHILDREN, &kids);
    return (double)(self.ru_utime.tv_sec + self.ru_stime.tv_sec + kids.ru_utime.tv_sec + kids.ru_stime.tv_sec) +
           1e-6 * (double)(self.ru_utime.tv_usec + self.ru_stime.tv_usec + kids.ru_utime.tv_usec + kids.ru_stime.tv_usec);
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

/* The path of `target` relative to the folder of `from` (both made absolute), for -o's model and
 * cluster references. */
static void relative_to(const char *from, const char *target, char *out, size_t n)
{
    char a[PATH_MAX], b[PATH_MAX], dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", from);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    if (!realpath(dir, a) || !realpath(target, b)) {
        snprintf(out, n, "%s", target);
        return;
    }
    size_t common = 0, i = 0;
    for (; a[i] && a[i] == b[i]; i++)
        if (a[i] == '/') common = i;
    if (!a[i] && b[i] == '/') common = i;
    int at = 0;
    for (const char *p = a + common; *p; p++)
        if (*p == '/') at += snprintf(out + at, n - (size_t)at, "../");
    snprintf(out + at, n - (size_t)at, "%s", b + common + 1);
}

int main(int argc, char **argv)
{
    const char *model = NULL, *cluster = NULL, *space_file = NULL, *json = NULL, *outp = NULL;
    int64_t gpus = 0, batch = 0, top = 16, jobs = 1;
    bool quiet = false, dry_run = false;
    const char *flags[SEARCH_NKEYS] = {0};
    base_cli_list fixes = {0};
    /* one row per option (base.h, base_opt), the space's keys from search/'s table; --help and
     * --version come with the parser */
    enum { NFIXED = 16 };
    base_opt opts[NFIXED + SEARCH_NKEYS + 1];
    const base_opt fixed[NFIXED] = {
        {.kind = BASE_OPT_GROUP, .help = "the problem"},
        {BASE_OPT_PATH, "model", 0, "FILE", &model, .help = "the model (configs/models/)"},
        {BASE_OPT_PATH, "cluster", 0, "FILE", &cluster, .help = "the cluster (configs/clusters/)"},
        {BASE_OPT_INT, "gpus", 0, "N", &gpus, .lo = 1, .hi = INT64_MAX, .want = "a positive integer",
         .help = "use the cluster's first N GPUs", .def = "all"},
        {BASE_OPT_INT, "global-batch", 0, "N", &batch, .lo = 1, .hi = INT64_MAX, .want = "a positive integer",
         .help = "sequences per optimizer step"},
        {.kind = BASE_OPT_GROUP, .help = "the space"},
        {BASE_OPT_PATH, "space", 0, "FILE", &space_file, .help = "a search space (YAML; configs/search/default.yaml); "
         "each key it omits means everything piper supports"},
        {BASE_OPT_LIST, "fix", 0, "KEY=VALUE", &fixes, .help = "one value for one key, e.g. --fix pp=8"},
        {.kind = BASE_OPT_GROUP, .help = "the search"},
        {BASE_OPT_INT, "top", 0, "K", &top, .lo = 1, .hi = INT64_MAX, .want = "a positive integer",
         .help = "simulate the best K by the estimate", .def = "16"},
        {BASE_OPT_FLAG, "dry-run", 0, NULL, &dry_run, .help = "tier (a) only: count the candidates and those within "
         "the memory bound, compile nothing (to size a space first)"},
        {BASE_OPT_INT, NULL, 'j', "N", &jobs, .lo = 1, .hi = 4096, .want = "a positive integer",
         .help = "worker processes; the output does not depend on N", .def = "1"},
        {.kind = BASE_OPT_GROUP, .help = "outputs"},
        {BASE_OPT_PATH, "json", 0, "FILE", &json, .help = "also write the results as JSON (docs/search.md); - for "
         "stdout"},
        {BASE_OPT_PATH, NULL, 'o', "FILE", &outp, .help = "write the winner as a program (piper-compile and piper-sim "
         "take it)"},
        {BASE_OPT_FLAG, "quiet", 'q', NULL, &quiet, .help = "no report"},
    };
    size_t nopts = 0;
    for (size_t k = 0; k < NFIXED; k++) {
        opts[nopts++] = fixed[k];
        if (fixed[k].dst == &fixes) { /* the space's keys after --fix, under "the space" */
            for (int q = 0; q < SEARCH_NKEYS; q++)
                opts[nopts++] = (base_opt){BASE_OPT_STRING, search_key_name((search_key)q), 0, "LIST", &flags[q],
                                           .help = search_key_doc((search_key)q)};
        }
    }
    const base_cli cli = {
        .prog = "piper-search",
        .usage = "piper-search --model MODEL.yaml --cluster CLUSTER.yaml --global-batch N [options]",
        .about = "Finds the fastest strategy for the model on the cluster: enumerates candidate programs\n"
                 "(TP, SP, PP with every schedule, DP, EP, ZeRO, recompute, micro-batch size), drops those\n"
                 "that cannot fit by a memory lower bound (tier a), compiles and checks the rest (tier b:\n"
                 "exact peak memory, deadlock proof, a quick step-time estimate), simulates the best K\n"
                 "(tier c) and prints them ranked (docs/search.md). The space's keys take\n"
                 "comma-separated lists; they replace the space file's values.",
        .opts = opts,
        .nopts = nopts,
        .epilogue = "exit status: 0 when a strategy fits, 1 when none does or the input is invalid, 2 on usage\n"
                    "errors.\n",
    };
    base_error pe;
    base_error_clear(&pe);
    const char **pos = base_xcalloc((size_t)argc + 1, sizeof *pos);
    int npos = 0;
    int prc = base_cli_finish(&cli, base_cli_parse(&cli, argc, argv, pos, &npos, &pe), &pe);
    if (prc < 0 && npos > 0) prc = base_cli_usage_error(&cli, "unexpected argument '%s'", pos[0]);
    free(pos);
    if (prc >= 0) return prc;
    if (!model || !cluster || !batch)
        return base_cli_usage_error(&cli, "give --model, --cluster and --global-batch");
    base_arena arena;
    base_arena_init(&arena);
    base_error e;
    base_error_clear(&e);
    search_space space;
    memset(&space, 0, sizeof space);
    search_problem pb;
    int rc = search_problem_load(&pb, model, cluster, gpus, batch, &arena, &e);
    if (!rc && space_file) rc = search_space_load(&space, space_file, &arena, &e);
    for (int k = 0; !rc && k < SEARCH_NKEYS; k++) {
        char flag[32];
        snprintf(flag, sizeof flag, "--%s", search_key_name((search_key)k));
        if (flags[k]) rc = search_space_set(&space, (search_key)k, flags[k], base_arena_strdup(&arena, flag), &e);
    }
    for (int k = 0; !rc && k < fixes.n; k++) rc = search_space_fix(&space, fixes.v[k], &e);
    if (!rc) rc = search_space_check(&space, &pb, &e);
    if (rc) {
        base_error_print(&e, stderr);
        base_arena_free(&arena);
        return 1;
    }

    search_result r;
    memset(&r, 0, sizeof r);
    search_enum en;
    double t0 = cpu_seconds();
    search_enumerate(&space, &pb, &en);
    double t1 = cpu_seconds();
    if (dry_run) {
        printf("candidates: %lld combinations looked at, %lld valid (divisible, preconditions hold), %lld within "
               "the memory bound (tier a; nothing compiled)\n",
               (long long)en.considered, (long long)(en.count[SEARCH_OK] + en.count[SEARCH_BOUND]),
               (long long)en.count[SEARCH_OK]);
        fprintf(stderr, "piper-search: CPU seconds: tier (a) %.3f for %lld combinations\n", t1 - t0,
                (long long)en.considered);
        search_enum_free(&en);
        base_arena_free(&arena);
        return 0;
    }
    r.pb = &pb;
    r.en = &en;
    memcpy(r.count, en.count, sizeof r.count);
    r.count[SEARCH_OK] = 0;
    r.eval = base_xcalloc((size_t)(en.n ? en.n : 1), sizeof *r.eval);
    ctx x = {&pb, &en, NULL};
    /* a terminal sees the tier a long search is in (base_progress: nothing otherwise) */
    base_progress pg;
    base_progress_begin(&pg, "piper-search", "searching");
    pg.t0 -= t1 - t0; /* tier (a) counts */
    char what[96];
    snprintf(what, sizeof what, "tier (b): compiling %d candidates", en.n);
    base_progress_update(&pg, 1, 3, what);
    rc = search_parallel(en.n, (int)jobs, job_compile, &x, r.eval, &e);
    double t2 = cpu_seconds();
    r.rank = base_xcalloc((size_t)(en.n ? en.n : 1), sizeof *r.rank);
    r.nearest_oom = r.farthest_oom = -1;
    for (int i = 0; i < en.n; i++) {
        search_eval *ev = &r.eval[i];
        if (ev->reason == SEARCH_OK) r.rank[r.nrank++] = i;
        else r.count[ev->reason]++;
        if (ev->reason == SEARCH_OK) continue;
        if (ev->reason == SEARCH_OOM &&
            (r.nearest_oom < 0 || ev->peak_bytes < r.eval[r.nearest_oom].peak_bytes))
            r.nearest_oom = i;
        if (ev->reason == SEARCH_OOM && (r.farthest_oom < 0 || ev->peak_bytes > r.eval[r.farthest_oom].peak_bytes))
            r.farthest_oom = i;
    }
    sort_eval = r.eval;
    qsort(r.rank, (size_t)r.nrank, sizeof *r.rank, by_time);
    /* tier (c): the best K by the estimate */
    int nsim = r.nrank < top ? r.nrank : (int)top;
    search_eval *sim = base_xcalloc((size_t)(nsim ? nsim : 1), sizeof *sim);
    for (int k = 0; k < nsim; k++) sim[k] = r.eval[r.rank[k]];
    x.which = r.rank;
    snprintf(what, sizeof what, "tier (c): simulating %d candidates", nsim);
    base_progress_update(&pg, 2, 3, what);
    if (!rc) rc = search_parallel(nsim, (int)jobs, job_simulate, &x, sim, &e);
    base_progress_end(&pg);
    for (int k = 0; k < nsim; k++) {
        r.eval[r.rank[k]] = sim[k];
        if (sim[k].simulated) r.nsimulated++;
        else r.count[SEARCH_SIM]++;
    }
    free(sim);
    /* a failed simulation leaves the ranking */
    int kept = 0;
    for (int k = 0; k < r.nrank; k++)
        if (r.eval[r.rank[k]].reason == SEARCH_OK) r.rank[kept++] = r.rank[k];
    r.nrank = kept;
    qsort(r.rank, (size_t)r.nrank, sizeof *r.rank, by_time);
    double t3 = cpu_seconds();
    r.count[SEARCH_OK] = r.nrank;

    if (rc) base_error_print(&e, stderr);
    if (!rc && !quiet && !(json && !strcmp(json, "-"))) search_report_write(&r, (int)top, stdout);
    if (!rc && json) {
        FILE *f = strcmp(json, "-") ? fopen(json, "w") : stdout;
        if (!f) {
            fprintf(stderr, "error: cannot write %s: %s; check the path\n", json, strerror(errno));
            rc = 1;
        } else {
            search_json_write(&r, (int)top, f);
            if (f != stdout && fclose(f)) rc = 1;
        }
    }
    if (!rc && outp && r.nrank > 0) {
        char mref[PATH_MAX], cref[PATH_MAX];
        relative_to(outp, model, mref, sizeof mref);
        relative_to(outp, cluster, cref, sizeof cref);
        base_buf text = {0};
        search_program_text(&pb, &en.c[r.rank[0]], mref, cref, &text);
        FILE *f = fopen(outp, "w");
        if (!f || fwrite(text.s, 1, text.n, f) != text.n || fclose(f)) {
            fprintf(stderr, "error: cannot write %s: %s; check the path\n", outp, strerror(errno));
            rc = 1;
        }
        base_buf_free(&text);
    }
    fprintf(stderr,
            "piper-search: CPU seconds: tier (a) %.3f for %lld combinations, tier (b) %.3f for %d compilations, "
            "tier (c) %.3f for %d simulations (-j %lld)\n",
            t1 - t0, (long long)en.considered, t2 - t1, en.n, t3 - t2, nsim, (long long)jobs);
    if (!rc && r.nrank == 0) rc = 1; /* nothing fits: the report says why */
    free(r.eval);
    free(r.rank);
    search_enum_free(&en);
    base_arena_free(&arena);
    return rc;
}
