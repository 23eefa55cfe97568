/* ctx.cu — the CUDA context (device, stream, cuBLAS handle, workspaces, the kernels' error
 * flag), device memory and copies, the GEMM entry points over cuBLAS, conversions, fills and
 * deterministic parameter initialisation on the device, NVTX ranges. */
#include <limits.h>
#include <stdlib.h>
#include <nvtx3/nvToolsExt.h>

#include "common.cuh"

/* cuBLAS's recommended workspace on Hopper; set explicitly so that the handle does not allocate
 * one per stream behind our back (and so that graph capture works later). */
#define BLAS_WS_BYTES ((size_t)32 << 20)

extern "C" int exec_cuda_device_count(int *n, base_error *e)
{
    *n = 0;
    cudaError_t err = cudaGetDeviceCount(n);
    if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) {
        *n = 0;
        return base_errorf(e, "no usable CUDA device: %s", cudaGetErrorString(err));
    }
    CUDA_OK(err);
    return 0;
}

extern "C" int exec_cuda_device_describe(int device, char *buf, size_t n, base_error *e)
{
    cudaDeviceProp p;
    CUDA_OK(cudaGetDeviceProperties(&p, device));
    snprintf(buf, n, "%s, compute capability %d.%d, %d SMs, %.1f GiB", p.name, p.major, p.minor,
             p.multiProcessorCount, (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return 0;
}

static int ctx_init(exec_cuda_ctx *c, int device, void *stream, base_error *e)
{
    c->device = device;
    CUDA_OK(cudaSetDevice(device));
    if (stream) {
        c->stream = (cudaStream_t)stream;
    } else {
        CUDA_OK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
        c->own_stream = true;
    }
    BLAS_OK(cublasCreate(&c->blas));
    CUDA_OK(cudaMalloc(&c->blas_ws, BLAS_WS_BYTES));
    c->blas_ws_bytes = BLAS_WS_BYTES;
    BLAS_OK(cublasSetWorkspace(c->blas, c->blas_ws, c->blas_ws_bytes));
    BLAS_OK(cublasSetStream(c->blas, c->stream));
    CUDA_OK(cudaMalloc((void **)&c->flag, sizeof(int)));
    CUDA_OK(cudaMemset(c->flag, 0, sizeof(int)));
    CUDA_OK(cudaMalloc((void **)&c->partials, EXEC_CUDA_PARTIALS * sizeof(double)));
    return 0;
}

extern "C" int exec_cuda_ctx_new(exec_cuda_ctx **out, int device, void *stream, base_error *e)
{
    *out = NULL;
    exec_cuda_ctx *c = (exec_cuda_ctx *)base_xcalloc(1, sizeof *c);
    if (ctx_init(c, device, stream, e)) {
        exec_cuda_ctx_free(c);
        return -1;
    }
    *out = c;
    return 0;
}

extern "C" void exec_cuda_ctx_free(exec_cuda_ctx *c)
{
    if (!c) return;
    if (c->blas) cublasDestroy(c->blas);
    cudaFree(c->blas_ws);
    cudaFree(c->flag);
    cudaFree(c->partials);
    if (c->own_stream && c->stream) cudaStreamDestroy(c->stream);
    free(c);
}

extern "C" void *exec_cuda_ctx_stream(const exec_cuda_ctx *c) { return (void *)c->stream; }

extern "C" int exec_cuda_ctx_set_stream(exec_cuda_ctx *c, void *stream, base_error *e)
{
    if (!stream) return base_errorf(e, "exec_cuda_ctx_set_stream: no stream given");
    if (c->own_stream) {
        CUDA_OK(cudaStreamSynchronize(c->stream));
        CUDA_OK(cudaStreamDestroy(c->stream));
        c->own_stream = false;
    }
    c->stream = (cudaStream_t)stream;
    BLAS_OK(cublasSetStream(c->blas, c->stream));
    return 0;
}

extern "C" int exec_cuda_ctx_sync(exec_cuda_ctx *c, base_error *e)
{
    CUDA_OK(cudaStreamSynchronize(c->stream));
    int flag = 0;
    CUDA_OK(cudaMemcpy(&flag, c->flag, sizeof flag, cudaMemcpyDeviceToHost));
    if (!flag) return 0;
    CUDA_OK(cudaMemset(c->flag, 0, sizeof(int)));
    return base_errorf(e, "a kernel found bad data:%s%s%s; check the data against the model",
                       flag & EXEC_CUDA_BAD_TOKEN ? " a token outside the vocabulary" : "",
                       flag & EXEC_CUDA_BAD_TARGET ? " a target outside the vocabulary" : "",
                       flag & EXEC_CUDA_BAD_SLOT ? " an MoE slot outside the dispatched buffer "
                                                   "(corrupt route tensor)"
                                                 : "");
}

/* ---------------------------------------------------------------- memory */

extern "C" int exec_cuda_malloc(void **p, size_t bytes, base_error *e)
{
    *p = NULL;
    cudaError_t err = cudaMalloc(p, bytes ? bytes : 1);
    if (err != cudaSuccess) {
        *p = NULL;
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        char a[32], b[32];
        return base_errorf(e, "cudaMalloc of %s failed (%s) with %s free; use a smaller micro-batch",
                           base_fmt_bytes((double)bytes, a, sizeof a), cudaGetErrorString(err),
                           base_fmt_bytes((double)fr, b, sizeof b));
    }
    return 0;
}

extern "C" void exec_cuda_free(void *p)
{
    if (p) cudaFree(p);
}

extern "C" int exec_cuda_h2d(exec_cuda_ctx *c, void *dst, const void *src, size_t bytes,
                             base_error *e)
{
    CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    CUDA_OK(cudaStreamSynchronize(c->stream));
    return 0;
}

extern "C" int exec_cuda_d2h(exec_cuda_ctx *c, void *dst, const void *src, size_t bytes,
                             base_error *e)
{
    CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    CUDA_OK(cudaStreamSynchronize(c->stream));
    return 0;
}

extern "C" int exec_cuda_d2d(exec_cuda_ctx *c, void *dst, const void *src, size_t bytes,
                             base_error *e)
{
    if (bytes == 0 || dst == src) return 0;
    CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
    return 0;
}

extern "C" int exec_cuda_memset0(exec_cuda_ctx *c, void *dst, size_t bytes, base_error *e)
{
    if (bytes == 0) return 0;
    CUDA_OK(cudaMemsetAsync(dst, 0, bytes, c->stream));
    return 0;
}

extern "C" int exec_cuda_mem_info(size_t *free_bytes, size_t *total_bytes, base_error *e)
{
    CUDA_OK(cudaMemGetInfo(free_bytes, total_bytes));
    return 0;
}

/* ---------------------------------------------------------------- GEMM */

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets B first, with
 * the transposes as stored, and m and n swapped. */
static int dims_ok(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                   base_error *e)
{
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX ||
        ldc > INT_MAX)
        return base_errorf(e, "GEMM %lld x %lld x %lld (leading dimensions %lld, %lld, %lld) "
                              "exceeds cuBLAS's 32-bit sizes; use a smaller micro-batch",
                           (long long)m, (long long)n, (long long)k, (long long)lda,
                           (long long)ldb, (long long)ldc);
    return 0;
}

/* An empty product (k = 0): C = beta C. Only beta 0 and 1 occur in the kernels. */
static int gemm_empty(exec_cuda_ctx *x, int64_t m, int64_t n, float beta, float *c32, bf16 *c16,
                      int64_t ldc, int64_t batch, int64_t sc, base_error *e)
{
    if (beta == 1.0f) return 0;
    if (beta != 0.0f) return base_errorf(e, "GEMM with k = 0 and beta %g is not supported", beta);
    size_t el = c32 ? 4 : 2;
    char *base = c32 ? (char *)c32 : (char *)c16;
    for (int64_t i = 0; i < batch; i++)
        CUDA_OK(cudaMemset2DAsync(base + (size_t)(i * sc) * el, (size_t)ldc * el, 0,
                                  (size_t)n * el, (size_t)m, x->stream));
    return 0;
}

int gemm(exec_cuda_ctx *x, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
         const bf16 *a, int64_t lda, const bf16 *b, int64_t ldb, float beta, float *c32,
         bf16 *c16, int64_t ldc, base_error *e)
{
    if (m <= 0 || n <= 0) return 0;
    if (k <= 0) return gemm_empty(x, m, n, beta, c32, c16, ldc, 1, 0, e);
    TRY(dims_ok(m, n, k, lda, ldb, ldc, e));
    void *cp = c32 ? (void *)c32 : (void *)c16;
    cudaDataType_t ct = c32 ? CUDA_R_32F : CUDA_R_16BF;
    BLAS_OK(cublasGemmEx(x->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                         (int)n, (int)m, (int)k, &alpha, b, CUDA_R_16BF, (int)ldb, a, CUDA_R_16BF,
                         (int)lda, &beta, cp, ct, (int)ldc, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT));
    return 0;
}

int gemm_batched(exec_cuda_ctx *x, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                 float alpha, const bf16 *a, int64_t lda, int64_t sa, const bf16 *b, int64_t ldb,
                 int64_t sb, float beta, float *c32, bf16 *c16, int64_t ldc, int64_t sc,
                 int64_t batch, base_error *e)
{
    if (m <= 0 || n <= 0 || batch <= 0) return 0;
    if (k <= 0) return gemm_empty(x, m, n, beta, c32, c16, ldc, batch, sc, e);
    TRY(dims_ok(m, n, k, lda, ldb, ldc, e));
    if (batch > INT_MAX) return base_errorf(e, "GEMM batch of %lld is too large", (long long)batch);
    void *cp = c32 ? (void *)c32 : (void *)c16;
    cudaDataType_t ct = c32 ? CUDA_R_32F : CUDA_R_16BF;
    BLAS_OK(cublasGemmStridedBatchedEx(
        x->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m,
        (int)k, &alpha, b, CUDA_R_16BF, (int)ldb, (long long)sb, a, CUDA_R_16BF, (int)lda,
        (long long)sa, &beta, cp, ct, (int)ldc, (long long)sc, (int)batch, CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT));
    return 0;
}

extern "C" int exec_cuda_gemm(exec_cuda_ctx *c, bool ta, bool tb, int64_t m, int64_t n,
                              int64_t k, float alpha, const uint16_t *a, int64_t lda,
                              const uint16_t *b, int64_t ldb, float beta, float *c32,
                              uint16_t *c16, int64_t ldc, base_error *e)
{
    if (!c32 == !c16) return base_errorf(e, "exec_cuda_gemm: give exactly one of c32 and c16");
    return gemm(c, ta, tb, m, n, k, alpha, (const bf16 *)a, lda, (const bf16 *)b, ldb, beta, c32,
                (bf16 *)c16, ldc, e);
}

/* ---------------------------------------------------------------- conversions and fills */

__global__ void k_f32_to_bf16(const float *src, bf16 *dst, int64_t n)
{
    GRID_STRIDE(i, n) dst[i] = __float2bfloat16(src[i]);
}

__global__ void k_bf16_to_f32(const bf16 *src, float *dst, int64_t n)
{
    GRID_STRIDE(i, n) dst[i] = __bfloat162float(src[i]);
}

extern "C" int exec_cuda_f32_to_bf16(exec_cuda_ctx *c, const float *src, uint16_t *dst, int64_t n,
                                     base_error *e)
{
    if (n <= 0) return 0;
    k_f32_to_bf16<<<grid_for(n, 256), 256, 0, c->stream>>>(src, (bf16 *)dst, n);
    LAUNCH_OK("k_f32_to_bf16");
    return 0;
}

extern "C" int exec_cuda_bf16_to_f32(exec_cuda_ctx *c, const uint16_t *src, float *dst, int64_t n,
                                     base_error *e)
{
    if (n <= 0) return 0;
    k_bf16_to_f32<<<grid_for(n, 256), 256, 0, c->stream>>>((const bf16 *)src, dst, n);
    LAUNCH_OK("k_bf16_to_f32");
    return 0;
}

__global__ void k_fill_uniform(bf16 *d16, float *d32, int64_t n, uint64_t key, double lo,
                               double hi)
{
    GRID_STRIDE(i, n)
    {
        double u = lo + (hi - lo) * exec_cuda_rng_uniform(key, (uint64_t)i);
        if (d16) d16[i] = __float2bfloat16((float)u);
        if (d32) d32[i] = (float)u;
    }
}

extern "C" int exec_cuda_fill_uniform(exec_cuda_ctx *c, uint16_t *dst16, float *dst32, int64_t n,
                                      uint64_t key, double lo, double hi, base_error *e)
{
    if (n <= 0) return 0;
    k_fill_uniform<<<grid_for(n, 256), 256, 0, c->stream>>>((bf16 *)dst16, dst32, n, key, lo, hi);
    LAUNCH_OK("k_fill_uniform");
    return 0;
}

/* Element i of the shard's block is element (off + (a, b, c)) of the global tensor. */
__global__ void k_param_init(bf16 *dst, float *master, int64_t l1, int64_t l2, int64_t n,
                             int64_t o0, int64_t o1, int64_t o2, int64_t d1, int64_t d2, int kind,
                             double std, uint64_t key)
{
    GRID_STRIDE(i, n)
    {
        int64_t a = i / (l1 * l2), b = (i / l2) % l1, cc = i % l2;
        uint64_t g = (uint64_t)(((o0 + a) * d1 + o1 + b) * d2 + o2 + cc);
        double v = kind == EXEC_INIT_ONES    ? 1.0
                   : kind == EXEC_INIT_ZEROS ? 0.0
                                             : std * exec_cuda_rng_normal(key, g);
        float f = (float)v;
        if (dst) dst[i] = __float2bfloat16(f);
        if (master) master[i] = f;
    }
}

extern "C" int exec_cuda_param_init(exec_cuda_ctx *c, uint64_t seed, const char *full_name,
                                    const exec_param *p, uint16_t *dst, float *master,
                                    base_error *e)
{
    if (p->count <= 0) return 0;
    uint64_t key = exec_rng_key(seed, full_name);
    k_param_init<<<grid_for(p->count, 256), 256, 0, c->stream>>>(
        (bf16 *)dst, master, p->len[1], p->len[2], p->count, p->off[0], p->off[1], p->off[2],
        p->dim[1], p->dim[2], (int)p->init, p->std, key);
    LAUNCH_OK("k_param_init");
    return 0;
}

/* ---------------------------------------------------------------- NVTX */

extern "C" void exec_cuda_range_push(const char *name) { nvtxRangePushA(name); }
extern "C" void exec_cuda_range_pop(void) { nvtxRangePop(); }
