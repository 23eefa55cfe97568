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
#include <sys/stat.h>

#include "search/search.h"

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

/* Candidate c as a program at `path`, naming the model and cluster relative to it. */
static int write_program(const search_problem *pb, const search_candidate *c, const char *model, const char *cluster,
                         const char *path, base_error *e)
{
    char mref[PATH_MAX], cref[PATH_MAX];
    relative_to(path, model, mref, sizeof mref);
    relative_to(path, cluster, cref, sizeof cref);
    base_buf text = {0};
    search_program_text(pb, c, mref, cref, &text);
    int rc = base_out_write_file(path, "the program", text.s, text.n, e);
    base_buf_free(&text);
    return rc;
}

/* --emit-top K DIR: the best K ranked candidates as DIR/rank01.yaml, DIR/rank02.yaml, ... (the
 * simulated ones first, as the report ranks them); DIR is made if missing. */
static int emit_top(const search_problem *pb, const search_enum *en, const search_result *r, int k,
                    const char *model, const char *cluster, const char *dir, base_error *e)
{
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return base_errorf(e, "--emit-top: %s exists and is not a directory; give a directory (it is made if missing)",
                               dir);
    } else if (mkdir(dir, 0777) != 0) {
        return base_errorf(e, "--emit-top: cannot make the directory %s: %s; check the path", dir, strerror(errno));
    }
    int n = k < r->nrank ? k : r->nrank;
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/rank%02d.yaml", dir, i + 1) >= (int)sizeof path)
            return base_errorf(e, "--emit-top: the directory name %s is too long", dir);
        if (write_program(pb, &en->c[r->rank[i]], model, cluster, path, e)) return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *cluster = NULL, *space_file = NULL, *json = NULL, *outp = NULL;
    int64_t gpus = 0, batch = 0, top = 16, jobs = 1;
    bool quiet = false, dry_run = false, exhaustive = false;
    int64_t emit_k = 0;
    const char *emit_dir = NULL;
    const char *flags[SEARCH_NKEYS] = {0};
    base_cli_list fixes = {0};
    /* one row per option (base.h, base_opt), the space's keys from search/'s table; --help and
     * --version come with the parser */
    enum { NFIXED = 18 };
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
        {BASE_OPT_FLAG, "exhaustive", 0, NULL, &exhaustive, .help = "compile every candidate; by default a candidate "
         "whose step-time lower bound is above the K-th best estimate is not compiled (the K simulated are the "
         "same either way)"},
        {BASE_OPT_INT, NULL, 'j', "N", &jobs, .lo = 1, .hi = 4096, .want = "a positive integer",
         .help = "worker processes; the output does not depend on N", .def = "1"},
        {.kind = BASE_OPT_GROUP, .help = "outputs"},
        {BASE_OPT_PATH, "json", 0, "FILE", &json, .help = "also write the results as JSON (docs/search.md); - for "
         "stdout"},
        {BASE_OPT_PATH, NULL, 'o', "FILE", &outp, .help = "write the winner as a program (piper-compile and piper-sim "
         "take it)"},
        {BASE_OPT_INT, "emit-top", 0, "K DIR", &emit_k, .lo = 1, .hi = 1 << 20, .want = "a positive integer",
         .help = "write the best K as DIR/rank01.yaml, rank02.yaml, ... (DIR, the next argument, is made if "
         "missing)"},
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
    /* --emit-top K DIR: the one argument that is not an option is the directory */
    if (prc < 0 && emit_k > 0 && npos == 0) prc = base_cli_usage_error(&cli, "--emit-top needs K and a directory");
    if (prc < 0 && emit_k > 0 && npos >= 1) emit_dir = pos[0];
    if (prc < 0 && npos > (emit_k > 0)) prc = base_cli_usage_error(&cli, "unexpected argument '%s'", pos[emit_k > 0]);
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
    double t0 = search_cpu_seconds();
    search_enumerate(&space, &pb, &en);
    double t1 = search_cpu_seconds();
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
    /* a terminal sees that a long search is running (base_progress: nothing otherwise) */
    base_progress pg;
    base_progress_begin(&pg, "piper-search", "searching");
    pg.t0 -= t1 - t0; /* tier (a) counts */
    char what[96];
    snprintf(what, sizeof what, "tiers (b) and (c): %d candidates", en.n);
    base_progress_update(&pg, 1, 2, what);
    rc = search_run(&pb, &en, (int)top, (int)jobs, !exhaustive, &r, &e);
    base_progress_end(&pg);
    r.seconds[0] = t1 - t0;

    if (rc) base_error_print(&e, stderr);
    if (!rc && !quiet && !(json && !strcmp(json, "-"))) search_report_write(&r, (int)top, stdout);
    if (!rc && json) {
        if (!strcmp(json, "-")) {
            search_json_write(&r, (int)top, stdout);
        } else {
            base_out o;
            rc = base_out_open(&o, json, "the search's JSON", &e);
            if (!rc) {
                search_json_write(&r, (int)top, o.f);
                rc = base_out_commit(&o, &e);
            }
            if (rc) {
                base_error_print(&e, stderr);
                rc = 1;
            }
        }
    }
    if (!rc && outp && r.nrank > 0 && write_program(&pb, &en.c[r.rank[0]], model, cluster, outp, &e)) {
        base_error_print(&e, stderr);
        rc = 1;
    }
    if (!rc && emit_dir && r.nrank > 0) {
        if (emit_top(&pb, &en, &r, (int)emit_k, model, cluster, emit_dir, &e)) {
            base_error_print(&e, stderr);
            rc = 1;
        }
    }
    fprintf(stderr,
            "piper-search: CPU seconds: tier (a) %.3f for %lld combinations, tier (b) %.3f for %lld compilations "
            "(%lld pruned), tier (c) %.3f for %d simulations (-j %lld)\n",
            r.seconds[0], (long long)en.considered, r.seconds[1], (long long)(en.n - r.count[SEARCH_PRUNED]),
            (long long)r.count[SEARCH_PRUNED], r.seconds[2], r.nsim_run, (long long)jobs);
    if (!rc && r.nrank == 0) rc = 1; /* nothing fits: the report says why */
    search_result_free(&r);
    search_enum_free(&en);
    base_arena_free(&arena);
    return rc;
}
