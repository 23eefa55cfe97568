/* test_check_fold.c — the static check over one device per replica class (plan_fold.c) gives
 * what the check over every device gives: the same verdict and message, the same per-device
 * statistics (peaks with their breakdown, ends, counts), the same host verdict and unit makespan,
 * and so the same compiled plan, byte for byte. On every configs/programs example and on a sweep
 * of every schedule builder at p = 2 and 4 with two data-parallel replicas of the pipeline (and
 * ZeRO-1 on half of it), where the folded check runs half the devices. */
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../testutil.h"
#include "plan/plan.h"
#include "sched/sched.h"
#include "sched/schedule.h"

static char workdir[1024];

static const char *work_path(const char *name)
{
    static char buf[2][2048];
    static int at;
    if (!workdir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(workdir, sizeof workdir, "%s/piper-test-fold-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(workdir)) workdir[0] = 0;
    }
    char *b = buf[at++ % 2];
    snprintf(b, 2048, "%.1000s/%.1000s", workdir, name);
    return b;
}

static char *plan_bytes(const plan_set *p, size_t *n)
{
    char *s = NULL;
    FILE *f = open_memstream(&s, n);
    base_error e;
    base_error_clear(&e);
    plan_write(p, f, &e);
    fclose(f);
    return s;
}

static int cases, compiled, folded_cases;

/* The plan's own checks, folded and over every device: same answers. */
static void same_checks(const plan_set *p, const char *what)
{
    for (unsigned host = 0; host <= PLAN_BLOCK_ALL; host += PLAN_BLOCK_ALL) {
        plan_stats a, b;
        plan_stuck sa, sb;
        base_error ea, eb;
        base_error_clear(&ea);
        base_error_clear(&eb);
        plan_check_opts oa = {.host = host, .stuck = &sa}, ob = {.host = host, .all_devices = true, .stuck = &sb};
        int ra = plan_check_opt(p, &oa, &a, &ea), rb = plan_check_opt(p, &ob, &b, &eb);
        CU_ASSERT_EQUAL(ra, rb);
        CU_ASSERT_STRING_EQUAL(ea.msg, eb.msg);
        CU_ASSERT_EQUAL(sa.n, sb.n);
        CU_ASSERT(sa.n == sb.n && !memcmp(sa.at, sb.at, (size_t)sa.n * sizeof *sa.at));
        if (!ra && !rb) {
            CU_ASSERT_EQUAL(a.ndevices, b.ndevices);
            CU_ASSERT_EQUAL(a.makespan_seconds, b.makespan_seconds);
            bool same = a.ndevices == b.ndevices && !memcmp(a.dev, b.dev, (size_t)a.ndevices * sizeof *a.dev);
            if (!same) fprintf(stderr, "\n  %s (host %u): per-device statistics differ\n", what, host);
            CU_ASSERT(same);
            plan_stats_free(&a);
            plan_stats_free(&b);
        }
    }
    plan_check_opts all = {.all_devices = true};
    base_error wa, wb;
    base_error_clear(&wa);
    base_error_clear(&wb);
    CU_ASSERT_EQUAL(plan_host_blocks_opt(p, NULL, &wa), plan_host_blocks_opt(p, &all, &wb));
    CU_ASSERT_STRING_EQUAL(wa.msg, wb.msg);
    CU_ASSERT_EQUAL(plan_unit_makespan_opt(p, NULL), plan_unit_makespan_opt(p, &all));
}

/* Compiles `prog` with the folded check and with --check-all-devices: same outcome, same plan
 * bytes, same statistics; then the plan's checks as above. */
static void same_compile(const char *prog, const char *what)
{
    sched_compilation a, b;
    sched_compilation_init(&a);
    sched_compilation_init(&b);
    base_error ea, eb;
    base_error_clear(&ea);
    base_error_clear(&eb);
    sched_options oa = {.allow_oom = true}, ob = {.allow_oom = true, .check_all_devices = true};
    int ra = sched_compile(&a, prog, NULL, NULL, &oa, &ea), rb = sched_compile(&b, prog, NULL, NULL, &ob, &eb);
    cases++;
    if (ra) fprintf(stderr, "\n  %s does not compile: %.300s\n", what, ea.msg);
    compiled += !ra;
    CU_ASSERT_EQUAL(ra, rb);
    CU_ASSERT_STRING_EQUAL(ea.msg, eb.msg);
    CU_ASSERT_STRING_EQUAL(ea.warnings, eb.warnings);
    if (!ra && !rb) {
        size_t na, nb;
        char *pa = plan_bytes(&a.plan, &na), *pb = plan_bytes(&b.plan, &nb);
        bool same = na == nb && !memcmp(pa, pb, na);
        if (!same) fprintf(stderr, "\n  %s: the plans differ\n", what);
        CU_ASSERT(same);
        free(pa), free(pb);
        CU_ASSERT_EQUAL(a.stats.ndevices, b.stats.ndevices);
        CU_ASSERT(a.stats.ndevices == b.stats.ndevices &&
                  !memcmp(a.stats.dev, b.stats.dev, (size_t)a.stats.ndevices * sizeof *a.stats.dev));
        /* the compile ran the check, its unit makespans and (channels) both layouts; the host
         * verdicts and the with-host run on top, except at hundreds of devices (a full host run
         * there is seconds, and the GPT-3 programs fold like the sweep's) */
        if (a.plan.ndevices <= 256) same_checks(&a.plan, what);
        plan_fold f;
        plan_fold_find(&a.plan, NULL, &f);
        folded_cases += f.replicas > 1;
        plan_fold_free(&f);
    }
    sched_compilation_free(&a);
    sched_compilation_free(&b);
}

static void test_examples(void)
{
    const char *dir = test_src_path("configs/programs");
    char d[4096];
    snprintf(d, sizeof d, "%s", dir);
    DIR *D = opendir(d);
    CU_ASSERT_PTR_NOT_NULL_FATAL(D);
    struct dirent *ent;
    int n = 0, before = folded_cases;
    while ((ent = readdir(D))) {
        size_t len = strlen(ent->d_name);
        if (len < 6 || strcmp(ent->d_name + len - 5, ".yaml")) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", d, ent->d_name);
        same_compile(path, ent->d_name);
        n++;
    }
    closedir(D);
    fprintf(stderr, "\n  examples: %d programs, %d folded\n", n, folded_cases - before);
    CU_ASSERT(n >= 10);
    CU_ASSERT(folded_cases - before >= 3); /* dp2, the GPT-3 programs: the folded path runs */
}

/* S one-layer stages over p ranks placed by `layout`, each stage on ranks r and r + p (two
 * data-parallel replicas of the pipeline), m micro-batches per replica. */
static const char *write_program(int S, int p, sched_layout layout, int m, bool tied, bool zero, const char *schedule)
{
    char model[2048];
    snprintf(model, sizeof model, "%s", work_path("model.yaml"));
    FILE *f = fopen(model, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f, "name: gpt_tiny_fold\nfamily: gpt\nlayers: %d\nhidden: 64\nheads: 4\nvocab: 256\nseq: 32\n"
               "dropout: true\ntied_embeddings: %s\n", S, tied ? "true" : "false");
    fclose(f);
    const char *path = work_path("program.yaml");
    f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f, "model: %s\ncluster: %s\n", model, test_src_path(p > 2 ? "configs/clusters/dgx_a100_8.yaml"
                                                                        : "configs/clusters/a100_4.yaml"));
    fprintf(f, "batch: {global: %d, micro: 1}\nannotations: {pp: %d}\ndirectives:\n", 2 * m, S);
    fprintf(f, "  - {op: split, filter: {}, num_microbatches: %d}\n", m);
    int nstage_dirs = layout == SCHED_LAYOUT_MIRROR ? p : S;
    for (int s = 0; s < nstage_dirs; s++) {
        int r = layout == SCHED_LAYOUT_MIRROR ? s : sched_layout_rank(layout, p, s);
        fprintf(f, "  - {op: place, filter: {PP: %d}, devices: [%d, %d]}\n", s, r, r + p);
        fprintf(f, "  - {op: replicate, filter: {PP: %d}, devices: [%d, %d]%s}\n", s, r, r + p,
                zero ? ", zero: 1" : "");
    }
    fprintf(f, "  - %s\n", schedule);
    fclose(f);
    return path;
}

static void test_sweep(void)
{
    int n = 0, before = folded_cases, ok_before = compiled;
    for (int k = 0; k < SCHED_NKINDS; k++)
        for (int p = 2; p <= 4; p += 2)
            for (int v = 2; v <= 3; v++) {
                if (v == 3 && sched_kind_layout((sched_kind)k) == SCHED_LAYOUT_ONE) continue;
                for (int m = p; m <= 2 * p; m++) {
                    sched_params sp = {.p = p, .m = m, .v = sched_kind_layout((sched_kind)k) == SCHED_LAYOUT_ONE ? 1 : v};
                    sched_table t;
                    memset(&t, 0, sizeof t);
                    char why[512];
                    if (sched_build((sched_kind)k, &sp, &t, why, sizeof why)) continue; /* m not valid */
                    sched_table_free(&t);
                    const sched_builder *b = sched_kind_info((sched_kind)k);
                    int S = b->layout == SCHED_LAYOUT_ONE || b->layout == SCHED_LAYOUT_MIRROR ? p : v * p;
                    char sched[128], what[160];
                    snprintf(sched, sizeof sched, "{op: schedule, name: %s}", b->name);
                    snprintf(what, sizeof what, "%s p=%d v=%d m=%d dp=2", b->name, p, sp.v, m);
                    same_compile(write_program(S, p, b->layout, m, k != SCHED_DUALPIPE, m % 2, sched), what);
                    n++;
                }
            }
    fprintf(stderr, "\n  sweep: %d programs, %d compiled, %d folded\n", n, compiled - ok_before, folded_cases - before);
    CU_ASSERT(n >= 40);
    CU_ASSERT(compiled - ok_before >= n / 2);
    CU_ASSERT(folded_cases - before >= n / 2); /* the replicas fold: the folded path is what is tested */
}

/* A fold that would be wrong is refused: replicas whose lists differ are run in full. */
static void test_refuses(void)
{
    sched_compilation c;
    sched_compilation_init(&c);
    base_error e;
    base_error_clear(&e);
    sched_options o = {.no_check = true};
    CU_ASSERT_EQUAL_FATAL(sched_compile(&c, test_src_path("configs/programs/dp2.yaml"), NULL, NULL, &o, &e), 0);
    plan_fold f;
    plan_fold_find(&c.plan, NULL, &f);
    CU_ASSERT_EQUAL(f.replicas, 2);
    CU_ASSERT_EQUAL(f.nsimulated, 1);
    plan_fold_free(&f);
    /* a peer offset that is not the shifted one: not a copy */
    c.plan.devices[1].peer_offset += 1;
    plan_fold_find(&c.plan, NULL, &f);
    CU_ASSERT_EQUAL(f.replicas, 1);
    CU_ASSERT(strstr(f.reason, "no device shifted") != NULL);
    plan_fold_free(&f);
    sched_compilation_free(&c);
}

int piper_tests_register(void)
{
    static const test_case fold[] = {
        {"every example: folded check = check over every device", test_examples},
        {"every builder x p x m with two replicas: folded = every device", test_sweep},
        {"a plan whose replicas differ is not folded", test_refuses},
        {NULL, NULL},
    };
    return test_add_suite("static check over replica classes", fold);
}
