/* bench_plan_check.c — times sched_plan_write, _read and _check on a 1,024-device plan: 8
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

typedef struct gen {
    plan_builder *b;
    int l, P, s, M, L, base; /* list, stages, this stage, micro-batches, layers, device of stage 0 */
    int c, pp, dp;           /* streams */
    int kf, kb, ku;          /* kernel lists */
    int W, G, O, X, A, GI, GO; /* first buffer of each kind */
    int sr;                  /* next sendrecv id */
    int64_t act_bytes;
} gen;

enum { E_IN, E_OUT, E_GRAD, E_DP };

static int bufA(const gen *g, int mb, int layer) { return g->A + mb * g->L + layer; }
static int tag(int mb, int backward) { return 2 * mb + backward; }

static void recv_fwd(gen *g, int mb)
{
    if (g->s == 0) return;
    pb_alloc(g->b, g->l, g->pp, g->X + mb);
    pb_recv(g->b, g->l, g->pp, g->base + g->s - 1, tag(mb, 0), g->act_bytes, g->X + mb);
    pb_record(g->b, g->l, g->pp, E_IN);
    pb_wait(g->b, g->l, g->c, E_IN);
}

static void forward(gen *g, int mb)
{
    for (int k = 0; k < g->L; k++) {
        pb_alloc(g->b, g->l, g->c, bufA(g, mb, k));
        int i = pb_compute(g->b, g->l, g->c, PLAN_PASS_F, g->kf, mb, g->s);
        int32_t in = k ? bufA(g, mb, k - 1) : g->s ? g->X + mb : g->W + k;
        pb_reads(g->b, g->l, i, 2, (int32_t[]){g->W + k, in});
        pb_writes(g->b, g->l, i, 1, (int32_t[]){bufA(g, mb, k)});
    }
}

/* The last backward overlaps each layer's gradient all-reduce with the layers below it. */
static void backward(gen *g, int mb)
{
    int first = g->s == 0, last = g->s == g->P - 1;
    if (!first) pb_alloc(g->b, g->l, g->c, g->GO + mb);
    for (int k = g->L - 1; k >= 0; k--) {
        int i = pb_compute(g->b, g->l, g->c, PLAN_PASS_B, g->kb, mb, g->s);
        int32_t r[3] = {g->W + k, bufA(g, mb, k), 0};
        int nr = 2;
        if (k == g->L - 1 && !last) r[nr++] = g->GI + mb;
        if (k == 0 && !first) r[nr++] = g->X + mb;
        pb_reads(g->b, g->l, i, nr, r);
        pb_writes(g->b, g->l, i, k == 0 && !first ? 2 : 1, (int32_t[]){g->G + k, g->GO + mb});
        pb_free(g->b, g->l, g->c, bufA(g, mb, k));
        if (mb == g->M - 1) {
            pb_record(g->b, g->l, g->c, E_GRAD);
            pb_wait(g->b, g->l, g->dp, E_GRAD);
            pb_coll(g->b, g->l, g->dp, PLAN_ALL_REDUCE, 0, g->b->p->lists[g->l].bufs[g->G + k].bytes, g->G + k);
        }
    }
    if (!last) pb_free(g->b, g->l, g->c, g->GI + mb);
    if (!first) pb_free(g->b, g->l, g->c, g->X + mb);
}

static void handoff(gen *g) /* compute -> pp */
{
    pb_record(g->b, g->l, g->c, E_OUT);
    pb_wait(g->b, g->l, g->pp, E_OUT);
}

static void pp_done(gen *g) /* pp -> compute */
{
    pb_record(g->b, g->l, g->pp, E_IN);
    pb_wait(g->b, g->l, g->c, E_IN);
}

static void send_fwd(gen *g, int mb)
{
    if (g->s == g->P - 1) return;
    handoff(g);
    pb_send(g->b, g->l, g->pp, g->base + g->s + 1, tag(mb, 0), g->act_bytes, bufA(g, mb, g->L - 1));
}

static void send_bwd(gen *g, int mb)
{
    if (g->s == 0) return;
    handoff(g);
    pb_send(g->b, g->l, g->pp, g->base + g->s - 1, tag(mb, 1), g->act_bytes, g->GO + mb);
    pb_free(g->b, g->l, g->pp, g->GO + mb);
}

static void recv_bwd(gen *g, int mb)
{
    if (g->s == g->P - 1) return;
    pb_alloc(g->b, g->l, g->pp, g->GI + mb);
    pb_recv(g->b, g->l, g->pp, g->base + g->s + 1, tag(mb, 1), g->act_bytes, g->GI + mb);
    pp_done(g);
}

static void send_fwd_recv_bwd(gen *g, int f, int bmb)
{
    if (g->s == g->P - 1) return;
    handoff(g);
    pb_alloc(g->b, g->l, g->pp, g->GI + bmb);
    int id = ++g->sr;
    pb_at(g->b, g->l, pb_send(g->b, g->l, g->pp, g->base + g->s + 1, tag(f, 0), g->act_bytes, bufA(g, f, g->L - 1)))->sendrecv = id;
    pb_at(g->b, g->l, pb_recv(g->b, g->l, g->pp, g->base + g->s + 1, tag(bmb, 1), g->act_bytes, g->GI + bmb))->sendrecv = id;
    pp_done(g);
}

static void send_bwd_recv_fwd(gen *g, int bmb, int f)
{
    if (g->s == 0) return;
    handoff(g);
    pb_alloc(g->b, g->l, g->pp, g->X + f);
    int id = ++g->sr;
    pb_at(g->b, g->l, pb_send(g->b, g->l, g->pp, g->base + g->s - 1, tag(bmb, 1), g->act_bytes, g->GO + bmb))->sendrecv = id;
    pb_at(g->b, g->l, pb_recv(g->b, g->l, g->pp, g->base + g->s - 1, tag(f, 0), g->act_bytes, g->X + f))->sendrecv = id;
    pb_free(g->b, g->l, g->pp, g->GO + bmb);
    pp_done(g);
}

/* One stage's list; peers are devices of the replica that starts at `base`. */
static void gen_stage(plan_builder *b, int l, int P, int s, int M, int L, int base)
{
    gen g = {.b = b, .l = l, .P = P, .s = s, .M = M, .L = L, .base = base, .kf = 0, .kb = 1, .ku = 2,
             .act_bytes = 16 << 20};
    g.c = pb_stream(b, l, "compute");
    g.pp = pb_stream(b, l, "pp");
    g.dp = pb_stream(b, l, "dp");
    char name[64];
    g.W = b->p->lists[l].nbufs;
    for (int k = 0; k < L; k++) snprintf(name, sizeof name, "param.L%d", s * L + k), pb_buf(b, l, name, 400 << 20, PLAN_MEM_PARAM);
    g.G = b->p->lists[l].nbufs;
    for (int k = 0; k < L; k++) snprintf(name, sizeof name, "grad.L%d", s * L + k), pb_buf(b, l, name, 400 << 20, PLAN_MEM_GRAD);
    g.O = b->p->lists[l].nbufs;
    for (int k = 0; k < L; k++) snprintf(name, sizeof name, "opt.L%d", s * L + k), pb_buf(b, l, name, 1600 << 20, PLAN_MEM_OPT);
    g.A = b->p->lists[l].nbufs;
    for (int mb = 0; mb < M; mb++)
        for (int k = 0; k < L; k++) snprintf(name, sizeof name, "act.L%d.mb%d", s * L + k, mb), pb_buf(b, l, name, 64 << 20, PLAN_MEM_ACT);
    g.X = b->p->lists[l].nbufs;
    for (int mb = 0; mb < M; mb++) snprintf(name, sizeof name, "in.mb%d", mb), pb_buf(b, l, name, g.act_bytes, PLAN_MEM_COMM);
    g.GI = b->p->lists[l].nbufs;
    for (int mb = 0; mb < M; mb++) snprintf(name, sizeof name, "gin.mb%d", mb), pb_buf(b, l, name, g.act_bytes, PLAN_MEM_COMM);
    g.GO = b->p->lists[l].nbufs;
    for (int mb = 0; mb < M; mb++) snprintf(name, sizeof name, "gout.mb%d", mb), pb_buf(b, l, name, g.act_bytes, PLAN_MEM_COMM);
    b->p->lists[l].nevents = 4;

    for (int k = 0; k < L; k++) {
        pb_alloc(b, l, g.c, g.W + k);
        pb_alloc(b, l, g.c, g.G + k);
        pb_alloc(b, l, g.c, g.O + k);
    }
    int w = P - s - 1 < M ? P - s - 1 : M, rem = M - w;
    for (int i = 0; i < w; i++) {
        recv_fwd(&g, i);
        forward(&g, i);
        send_fwd(&g, i);
    }
    if (rem > 0) recv_fwd(&g, w);
    for (int i = 0; i < rem; i++) {
        int f = w + i;
        forward(&g, f);
        send_fwd_recv_bwd(&g, f, i);
        backward(&g, i);
        if (i == rem - 1) send_bwd(&g, i);
        else send_bwd_recv_fwd(&g, i, f + 1);
    }
    for (int i = rem; i < M; i++) {
        recv_bwd(&g, i);
        backward(&g, i);
        send_bwd(&g, i);
    }
    pb_record(b, l, g.dp, E_DP);
    pb_wait(b, l, g.c, E_DP);
    for (int k = 0; k < L; k++) {
        int i = pb_compute(b, l, g.c, PLAN_PASS_UPD, g.ku, -1, s);
        pb_reads(b, l, i, 3, (int32_t[]){g.G + k, g.W + k, g.O + k});
        pb_writes(b, l, i, 2, (int32_t[]){g.W + k, g.O + k});
    }
}

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
    sched_plan p;
    plan_builder b;
    pb_init(&b, &p, ndev, unshared ? ndev : P);
    p.gpu.name = "H100";
    p.gpu.peak_flops[PLAN_BF16] = 989e12;
    p.gpu.hbm_bw = 3.35e12;
    p.gpu.mem_bytes = 80e9;
    pb_kernels(&b, 2.4e12, 0);       /* a layer's forward: ~2.4 ms */
    pb_kernels(&b, 4.8e12, 0);       /* its backward */
    pb_kernels(&b, 0, 8.4e9);        /* its optimizer step: memory-bound */
    for (int s = 0; s < P; s++) {
        int32_t *m = malloc((size_t)D * sizeof *m);
        for (int r = 0; r < D; r++) m[r] = r * P + s;
        char name[32];
        snprintf(name, sizeof name, "dp(pp=%d)", s);
        pb_group(&b, name, D, m);
        free(m);
    }
    for (int d = 0; d < ndev; d++) {
        int r = d / P, s = d % P;
        if (unshared) gen_stage(&b, d, P, s, M, L, r * P);
        else if (r == 0) gen_stage(&b, s, P, s, M, L, 0);
        pb_device(&b, d, unshared ? d : s, unshared ? 0 : r * P, 1, (int32_t[]){s});
    }
    int64_t total = 0;
    for (int d = 0; d < ndev; d++) total += sched_plan_list(&p, d)->n;
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
    if (sched_plan_write_file(&p, path, &e)) {
        base_error_print(&e, stderr);
        return 1;
    }
    struct stat sb;
    stat(path, &sb);
    phase("write", t0);
    printf("       %.1f MiB in %s\n", (double)sb.st_size / (1 << 20), path);

    sched_plan q;
    t0 = now();
    if (sched_plan_read_file(&q, path, &e)) {
        base_error_print(&e, stderr);
        return 1;
    }
    phase("read", t0);
    if (!keep) remove(path);

    sched_plan_stats st;
    t0 = now();
    if (sched_plan_check(&q, &st, &e)) {
        base_error_print(&e, stderr);
        return 1;
    }
    phase("check", t0);
    char b1[32], b2[32], b3[32];
    const sched_plan_device_stats *d0 = &st.dev[0], *dl = &st.dev[P - 1];
    printf("result: makespan %.4f s; stage 0 busy %.4f s, peak %s (activations %s at the peak); "
           "last stage peak %s\n", st.makespan_seconds, d0->busy_seconds, base_fmt_bytes(d0->peak_bytes, b1, sizeof b1),
           base_fmt_bytes(d0->at_peak[PLAN_MEM_ACT], b2, sizeof b2), base_fmt_bytes(dl->peak_bytes, b3, sizeof b3));
    sched_plan_stats_free(&st);
    sched_plan_free(&q);
    pb_done(&b);
    sched_plan_free(&p);
    return 0;
}
