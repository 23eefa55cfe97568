/* bench_gemm.c — the CPU backend's GEMM speed against this machine's BLAS peak (issue 6 asks for
 * both in the report). Not a test: `exec_bench_gemm [threads]` times, through the kernels' own
 * entry point (exec_gemm_f32), a large square sgemm (the practical peak of OpenBLAS here) and
 * the products of a transformer layer of hidden h with sequence tokens T (QKV, output
 * projection, MLP up/down, their input and weight gradients), for a few h, and prints GFLOP/s of
 * each and the fraction of the peak. Each figure is the best of several runs (the machine is
 * shared). `exec_bench_gemm --quick` runs small sizes once (a smoke test for ctest). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cpu/kernels.h"
#include "exec/exec.h"

static double best_gflops(int64_t m, int64_t n, int64_t k, bool ta, bool tb, int reps)
{
    float *a = calloc((size_t)(m * k), sizeof *a), *b = calloc((size_t)(k * n), sizeof *b),
          *c = calloc((size_t)(m * n), sizeof *c);
    if (!a || !b || !c) abort();
    for (int64_t i = 0; i < m * k; i++) a[i] = (float)((i * 7 % 13) - 6) * 0.01f;
    for (int64_t i = 0; i < k * n; i++) b[i] = (float)((i * 5 % 11) - 5) * 0.01f;
    double best = 0;
    for (int r = 0; r < reps; r++) {
        /* enough calls for ~50 ms so that small products are timed above the clock's noise */
        int calls = 1;
        double t;
        for (;;) {
            double t0 = exec_now();
            for (int q = 0; q < calls; q++)
                exec_gemm_f32(ta, tb, m, n, k, 1.0f, a, ta ? m : k, b, tb ? k : n, 0.0f, c, n);
            t = exec_now() - t0;
            if (t > 0.05 || calls > 1 << 20) break;
            calls *= 4;
        }
        double g = 2.0 * (double)m * (double)n * (double)k * calls / t * 1e-9;
        if (g > best) best = g;
    }
    free(a);
    free(b);
    free(c);
    return best;
}

int main(int argc, char **argv)
{
    bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int reps = quick ? 1 : 5;
    int64_t big = quick ? 256 : 2048;
    double peak = best_gflops(big, big, big, false, false, reps);
    printf("sgemm %lldx%lldx%lld: %.1f GFLOP/s (the peak below)\n", (long long)big, (long long)big,
           (long long)big, peak);
    const int64_t hs[] = {64, 256, 1024};
    const int64_t T = quick ? 64 : 512; /* tokens of a micro-batch */
    for (int q = 0; q < (quick ? 1 : 3); q++) {
        int64_t h = hs[q], f = 4 * h;
        struct { const char *what; int64_t m, n, k; bool ta, tb; } g[] = {
            {"qkv F", T, 3 * h, h, false, false},   {"proj F", T, h, h, false, false},
            {"fc1 F", T, f, h, false, false},        {"fc2 F", T, h, f, false, false},
            {"fc1 dX", T, h, f, false, true},       {"fc1 dW", h, f, T, true, false},
        };
        double flops = 0, secs = 0;
        printf("h=%lld, %lld tokens:", (long long)h, (long long)T);
        for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
            double gf = best_gflops(g[i].m, g[i].n, g[i].k, g[i].ta, g[i].tb, reps);
            double fl = 2.0 * (double)g[i].m * (double)g[i].n * (double)g[i].k;
            flops += fl;
            secs += fl / (gf * 1e9);
            printf(" %s %.1f", g[i].what, gf);
        }
        printf(" GFLOP/s; together %.1f GFLOP/s = %.0f%% of the peak\n", flops / secs * 1e-9,
               100.0 * flops / secs * 1e-9 / peak);
    }
    return 0;
}
