/* bench_plan_check.c — times plan_write, _read and _check on a 1,024-device plan: 8
 * pipeline stages (1F1B, Megatron's p2p pattern with sendrecv pairs) x 128 data-parallel
 * replicas, compute, p2p and data-parallel streams tied by events, per-layer gradient all-reduces
 * overlapping the last backward, and about 10k instructions per device. Replicas share their
 * stage's list (peer_offset); --unshared gives every device its own list, the worst case for
 * the file and the reader. Prints wall time and peak RSS (getrusage) after each phase.
 *
 *   bench_plan_check [--stages P] [--replicas D] [--microbatches M] [--layers L] [--unshared]
 *                    [--keep FILE] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "plan_builder.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double rss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* Linux: KiB */
}

static void phase(const char *what, double t0)
{
    printf("%-6s %8.3f s   peak RSS %8.1f MiB\n", what, now() - t0, rss_mib());
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int P = 8, D = 128, M = 128, L = 16, unshared = 0;
    const char *keep = NULL;
    for (int i = 1; i < argc; i++) {
        int *dst = !strcmp(argv[i], "--stages") ? &P : !strcmp(argv[i], "--replicas") ? &D
                 : !strcmp(argv[i], "--microbatches") ? &M : !strcmp(argv[i], "--layers") ? &L : NULL;
        if (dst && i + 1 < argc) *dst = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--unshared")) unshared = 1;
        else if (!strcmp(argv[i], "--keep") && i + 1 < argc) keep = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--stages P] [--replicas D] [--microbatches M] [--layers L] [--unshared] "
                            "[--keep FILE]\n", argv[0]);
            return 2;
        }
    }
    if (P < 1 || D < 1 || M < 1 || L < 1) {
        fprintf(stderr, "bench_plan_check: sizes must be positive\n");
        return 2;
    }
    int ndev = P * D;
    double t0 = now();
    plan_set p;
    plan_builder b;
    pb_pipeline_1f1b(&b, &p, P, D, M, L, !unshared);
    int64_t total = 0;
    for (int d = 0; d < ndev; d++) total += plan_dev_list(&p, d)->n;
    printf("plan: %d devices (%d stages x %d replicas), %d lists, %d micro-batches, %d layers per stage, "
           "%.0f instructions per device, %.2fM in all\n",
           ndev, P, D, p.nlists, M, L, (double)total / ndev, (double)total / 1e6);
    phase("build", t0);

    char tmp[512];
    const char *dir = getenv("TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/bench_plan_check.%d.plan", dir ? dir : "/tmp", (int)getpid());
    const char *path = keep ? keep : tmp;
    base_error e;
    base_error_clear(&e);
    t0 = now();
    if (plan_write_file(&p, path, &e)) {
        base_error_print(&e, stderr);
        return 1;
    }
    struct stat sb;
    stat(path, &sb);
    phase("write", t0);
    printf("       %.1f MiB in %s\n", (double)sb.st_size / (1 << 20), path);

    plan_set q;
    t0 = now();
    if (plan_read_file(&q, path, &e)) {
        base_error_print(&e, stderr);
        return 1;
    }
    phase("read", t0);
    if (!keep) remove(path);

    plan_stats st;
    t0 = now();
    if (plan_check(&q, &st, &e)) {
        base_error_print(&e, stderr);
        return 1;
    }
    phase("check", t0);
    char b1[32], b2[32], b3[32];
    const plan_device_stats *d0 = &st.dev[0], *dl = &st.dev[P - 1];
    printf("result: makespan %.4f s; stage 0 busy %.4f s, peak %s (activations %s at the peak); "
           "last stage peak %s\n", st.makespan_seconds, d0->busy_seconds, base_fmt_bytes(d0->peak_bytes, b1, sizeof b1),
           base_fmt_bytes(d0->at_peak[PLAN_MEM_ACT], b2, sizeof b2), base_fmt_bytes(dl->peak_bytes, b3, sizeof b3));
    plan_stats_free(&st);
    plan_free(&q);
    pb_done(&b);
    plan_free(&p);
    return 0;
}
