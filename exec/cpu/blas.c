/* blas.c — the one GEMM entry point of the CPU kernels (fp32: cblas_sgemm, fp64: cblas_dgemm),
 * row-major, so that every kernel states its products in the layout it stores. */
#include <cblas.h>

#include "real.h"

void FN(exec_gemm)(bool ta, bool tb, int64_t m, int64_t n, int64_t k, real alpha, const real *a,
                   int64_t lda, const real *b, int64_t ldb, real beta, real *c, int64_t ldc)
{
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        /* an empty product: C = beta C (BLAS would do the same, but some builds reject k = 0) */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c[i * ldc + j] = beta == 0 ? 0 : beta * c[i * ldc + j];
        return;
    }
#if EXEC_REAL_BITS == 64
    cblas_dgemm(
#else
    cblas_sgemm(
#endif
        CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m,
        (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}
