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

static void usage(FILE *f)
{
    fprintf(f,
            "usage: piper-search --model MODEL.yaml --cluster CLUSTER.yaml --global-batch N [options]\n"
            "\n"
            "Finds the fastest strategy for the model on the cluster: enumerates candidate programs\n"
            "(TP, SP, PP with every schedule, DP, EP, ZeRO, recompute, micro-batch size), drops those\n"
            "that cannot fit by a memory lower bound (tier a), compiles and checks the rest (tier b:\n"
            "exact peak memory, deadlock proof, a quick step-time estimate), simulates the best K\n"
            "(tier c) and prints them ranked (docs/search.md).\n"
            "\n"
            "options:\n"
            "  --model FILE        the model (configs/models/)\n"
            "  --cluster FILE      the cluster (configs/clusters/)\n"
            "  --gpus N            use the cluster's first N GPUs (default: all)\n"
            "  --global-batch N    sequences per optimizer step\n"
            "  --space FILE        a search space (YAML; configs/search/default.yaml); each key it\n"
            "                      omits means everything piper supports\n");
    for (int k = 0; k < SEARCH_NKEYS; k++)
        fprintf(f, "  --%-17s %s\n", search_key_name((search_key)k), search_key_doc((search_key)k));
    fprintf(f,
            "                      (comma-separated lists; they replace the space file's values)\n"
            "  --fix KEY=VALUE     one value for one key, e.g. --fix pp=8\n"
            "  --top K             simulate the best K by the estimate (default 16)\n"
            "  --dry-run           tier (a) only: count the candidates and those within the memory\n"
            "                      bound, compile nothing (to size a space first)\n"
            "  --exhaustive        compile every candidate; by default a candidate whose step-time\n"
            "                      lower bound is above the K-th best estimate is not compiled\n"
            "                      (the K simulated are the same either way)\n"
            "  -j N                worker processes (default 1); the output does not depend on N\n"
            "  --json FILE         also write the results as JSON (docs/search.md); - for stdout\n"
            "  -o FILE             write the winner as a program (piper-compile and piper-sim take it)\n"
            "  --emit-top K DIR    write the best K as DIR/rank01.yaml, rank02.yaml, ... (DIR is made\n"
            "                      if missing)\n"
            "  -q, --quiet         no report\n"
            "  -h, --help          this help\n"
            "\n"
            "exit status: 0 when a strategy fits, 1 when none does or the input is invalid, 2 on usage\n"
            "errors.\n");
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

static int parse_count(const char *flag, const char *v, int64_t *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || errno || x < 1) {
        fprintf(stderr, "piper-search: %s %s: give a positive integer; see piper-search --help\n", flag, v);
        return -1;
    }
    *out = x;
    return 0;
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
    int quiet = 0, dry_run = 0, exhaustive = 0;
    const char *emit_dir = NULL;
    int64_t emit_k = 0;
    const char *flags[SEARCH_NKEYS] = {0}, *fixes[16];
    int nfix = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = 1;
            continue;
        }
        if (!strcmp(a, "--dry-run")) {
            dry_run = 1;
            continue;
        }
        if (!strcmp(a, "--exhaustive")) {
            exhaustive = 1;
            continue;
        }
        if (a[0] != '-') {
            fprintf(stderr, "piper-search: unexpected argument '%s'; see piper-search --help\n", a);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "piper-search: %s needs a value; see piper-search --help\n", a);
            return 2;
        }
        const char *v = argv[++i];
        int key = !strncmp(a, "--", 2) ? search_key_of(a + 2) : -1;
        if (key >= 0) flags[key] = v;
        else if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--cluster")) cluster = v;
        else if (!strcmp(a, "--space")) space_file = v;
        else if (!strcmp(a, "--json")) json = v;
        else if (!strcmp(a, "-o")) outp = v;
        else if (!strcmp(a, "--fix") && nfix < 16) fixes[nfix++] = v;
        else if (!strcmp(a, "--gpus")) {
            if (parse_count(a, v, &gpus)) return 2;
        } else if (!strcmp(a, "--global-batch")) {
            if (parse_count(a, v, &batch)) return 2;
        } else if (!strcmp(a, "--top")) {
            if (parse_count(a, v, &top)) return 2;
        } else if (!strcmp(a, "--emit-top")) {
            if (parse_count(a, v, &emit_k)) return 2;
            if (i + 1 >= argc) {
                fprintf(stderr, "piper-search: --emit-top needs K and a directory; see piper-search --help\n");
                return 2;
            }
            emit_dir = argv[++i];
        } else if (!strcmp(a, "-j")) {
            if (parse_count(a, v, &jobs)) return 2;
        } else {
            fprintf(stderr, "piper-search: unknown option '%s'; see piper-search --help\n", a);
            return 2;
        }
    }
    if (!model || !cluster || !batch) {
        fprintf(stderr, "piper-search: give --model, --cluster and --global-batch; see piper-search --help\n");
        return 2;
    }
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
    for (int k = 0; !rc && k < nfix; k++) rc = search_space_fix(&space, fixes[k], &e);
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
    rc = search_run(&pb, &en, (int)top, (int)jobs, !exhaustive, &r, &e);
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
