/* emu.cpp — the CPU emulation of CUDA (see emu.h): the fiber scheduler behind kernel launches,
 * barriers and warp exchanges; the runtime API over host memory; cuBLAS's GEMMs as reference
 * loops with cuBLAS's argument checks. Fresh "device" memory is filled with 0xff bytes (NaN in
 * fp32 and bf16), so a kernel that reads what nothing wrote shows up in the comparisons. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <ucontext.h>

#include <vector>

#include "emu.h"

extern "C" {
emu_async_hooks emu_async;
}

namespace emu {

void sync_stream(cudaStream_t s)
{
    if (!emu_async.capture) return;
    void *t = emu_async.capture((void *)s);
    if (!t) return;
    emu_async.wait(t);
    emu_async.release(t);
}

dim3 g_block_idx, g_block_dim, g_grid_dim;
cudaError_t g_last_error = cudaSuccess;

enum { RUN, AT_BLOCK, AT_WARP, DONE };

/* A fiber starts on its own stack through makecontext/swapcontext, then every switch is a
 * _setjmp/_longjmp pair: swapcontext saves the signal mask with a system call, which made each
 * warp shuffle cost two of them. */
struct fiber {
    ucontext_t ctx;
    jmp_buf jb;
    unsigned tid;
    int state;
    bool started;
    char *stack;
};

static const size_t STACK_BYTES = 256 * 1024;
static std::vector<fiber> g_fibers;
static ucontext_t g_main;
static jmp_buf g_main_jb;
static fiber *g_cur;
static void (*g_body)(void *);
static void *g_arg;
static unsigned char g_slot[32][32][16]; /* [warp][lane][value] */

unsigned thread_x(void) { return g_cur->tid; }

static void yield_as(int state)
{
    g_cur->state = state;
    if (_setjmp(g_cur->jb) == 0) _longjmp(g_main_jb, 1);
}

void syncthreads(void) { yield_as(AT_BLOCK); }

void warp_exchange(const void *mine, void *out, size_t bytes, int src)
{
    const unsigned w = g_cur->tid / 32, l = g_cur->tid % 32;
    memcpy(g_slot[w][l], mine, bytes);
    yield_as(AT_WARP); /* every live lane has deposited */
    memcpy(out, g_slot[w][src], bytes);
    yield_as(AT_WARP); /* every live lane has read before anyone deposits again */
}

unsigned warp_ballot(bool pred)
{
    const unsigned w = g_cur->tid / 32, l = g_cur->tid % 32;
    unsigned v = pred ? 1u : 0u;
    memcpy(g_slot[w][l], &v, sizeof v);
    yield_as(AT_WARP);
    unsigned r = 0;
    for (unsigned i = 0; i < 32; i++) {
        unsigned t = w * 32 + i;
        if (t >= g_fibers.size() || t >= g_block_dim.x || g_fibers[t].state == DONE) continue;
        unsigned b;
        memcpy(&b, g_slot[w][i], sizeof b);
        if (b) r |= 1u << i;
    }
    yield_as(AT_WARP);
    return r;
}

static void entry(void)
{
    g_body(g_arg);
    g_cur->state = DONE;
    _longjmp(g_main_jb, 1);
}

/* Runs fiber f until it waits or finishes. */
static void resume(fiber *f)
{
    g_cur = f;
    if (_setjmp(g_main_jb) != 0) return;
    if (!f->started) {
        f->started = true;
        swapcontext(&g_main, &f->ctx);
    } else {
        _longjmp(f->jb, 1);
    }
}

void run_grid(dim3 grid, dim3 block, void (*body)(void *), void *arg)
{
    const unsigned nt = block.x;
    if (nt == 0 || nt > 1024 || block.y != 1 || block.z != 1 || grid.x == 0 || grid.y == 0 ||
        grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
        g_last_error = cudaErrorInvalidValue;
        return;
    }
    if (g_fibers.size() < nt) {
        size_t old = g_fibers.size();
        g_fibers.resize(nt);
        for (size_t i = old; i < nt; i++) g_fibers[i].stack = (char *)malloc(STACK_BYTES);
    }
    g_grid_dim = grid;
    g_block_dim = block;
    g_body = body;
    g_arg = arg;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                g_block_idx = dim3(x, y, z);
                for (unsigned t = 0; t < nt; t++) {
                    fiber *f = &g_fibers[t];
                    getcontext(&f->ctx);
                    f->ctx.uc_stack.ss_sp = f->stack;
                    f->ctx.uc_stack.ss_size = STACK_BYTES;
                    f->ctx.uc_link = NULL;
                    makecontext(&f->ctx, entry, 0);
                    f->tid = t;
                    f->state = RUN;
                    f->started = false;
                }
                unsigned alive = nt;
                while (alive > 0) {
                    for (unsigned t = 0; t < nt; t++) {
                        fiber *f = &g_fibers[t];
                        if (f->state != RUN) continue;
                        resume(f);
                        if (f->state == DONE) alive--;
                    }
                    if (alive == 0) break;
                    /* every live fiber waits: release a warp whose live lanes all wait at a warp
                     * exchange, or the block when all wait at __syncthreads */
                    bool released = false, all_block = true;
                    for (unsigned w = 0; w * 32 < nt; w++) {
                        bool all_warp = true, any = false;
                        for (unsigned t = w * 32; t < nt && t < w * 32 + 32; t++) {
                            int s = g_fibers[t].state;
                            if (s == DONE) continue;
                            any = true;
                            if (s != AT_WARP) all_warp = false;
                        }
                        if (any && all_warp) {
                            for (unsigned t = w * 32; t < nt && t < w * 32 + 32; t++)
                                if (g_fibers[t].state == AT_WARP) g_fibers[t].state = RUN;
                            released = true;
                        }
                    }
                    if (released) continue;
                    for (unsigned t = 0; t < nt; t++)
                        if (g_fibers[t].state != DONE && g_fibers[t].state != AT_BLOCK)
                            all_block = false;
                    if (all_block) {
                        for (unsigned t = 0; t < nt; t++)
                            if (g_fibers[t].state == AT_BLOCK) g_fibers[t].state = RUN;
                        continue;
                    }
                    fprintf(stderr,
                            "emu: deadlock in block (%u,%u,%u) of a %u-thread launch: threads "
                            "wait at different barriers (a __syncthreads or warp operation not "
                            "reached by all)\n",
                            x, y, z, nt);
                    abort();
                }
            }
}

} // namespace emu

/* ---------------------------------------------------------------- runtime API */

struct emu_stream {
    int unused;
};

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int device)
{
    (void)device;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "piper's CUDA emulator on the CPU");
    p->major = 9;
    p->multiProcessorCount = 1;
    p->totalGlobalMem = (size_t)16 << 30;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidValue; }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags;
    *s = (cudaStream_t)calloc(1, sizeof(emu_stream));
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    free(s);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    emu::sync_stream(s);
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s)
{
    if (!emu_async.capture) return cudaSuccess;
    void *t = emu_async.capture((void *)s);
    if (!t) return cudaSuccess;
    int done = emu_async.done(t);
    emu_async.release(t);
    return done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaDeviceSynchronize(void)
{
    emu::sync_stream(nullptr);
    return cudaSuccess;
}

struct emu_event {
    bool timing, recorded;
    double t;
    void *token; /* the stream's asynchronous work when recorded */
};

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags)
{
    *ev = (cudaEvent_t)calloc(1, sizeof(emu_event));
    (*ev)->timing = !(flags & cudaEventDisableTiming);
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t ev)
{
    if (ev && ev->token) emu_async.release(ev->token);
    free(ev);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s)
{
    if (ev->token) emu_async.release(ev->token);
    ev->token = emu_async.capture ? emu_async.capture((void *)s) : nullptr;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ev->t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    ev->recorded = true;
    return cudaSuccess;
}

/* Streams are immediate: the work after the wait runs now, so the event's work must be done. */
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned flags)
{
    (void)s;
    (void)flags;
    if (!ev) return cudaErrorInvalidValue;
    if (ev->token) emu_async.wait(ev->token);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t ev)
{
    if (!ev) return cudaErrorInvalidValue;
    return !ev->token || emu_async.done(ev->token) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev)
{
    if (!ev) return cudaErrorInvalidValue;
    if (ev->token) emu_async.wait(ev->token);
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    /* as CUDA: both recorded, both with timing */
    if (!a || !b || !a->timing || !b->timing || !a->recorded || !b->recorded)
        return cudaErrorInvalidValue;
    *ms = (float)((b->t - a->t) * 1e3);
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    *p = malloc(bytes ? bytes : 1);
    if (!*p) return cudaErrorMemoryAllocation;
    memset(*p, 0xff, bytes);
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int v, size_t bytes)
{
    emu::sync_stream(nullptr);
    memset(p, v, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s)
{
    emu::sync_stream(s);
    memset(p, v, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t width, size_t height,
                              cudaStream_t s)
{
    emu::sync_stream(s);
    if (width > pitch) return cudaErrorInvalidValue;
    for (size_t r = 0; r < height; r++) memset((char *)p + r * pitch, v, width);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind k)
{
    (void)k;
    emu::sync_stream(nullptr);
    memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind k,
                            cudaStream_t s)
{
    (void)k;
    emu::sync_stream(s);
    memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    *free_bytes = (size_t)8 << 30;
    *total_bytes = (size_t)16 << 30;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = emu::g_last_error;
    emu::g_last_error = cudaSuccess;
    return e;
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument (emulator: bad launch configuration)";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInsufficientDriver: return "insufficient driver";
    case cudaErrorNoDevice: return "no device";
    case cudaErrorNotReady: return "not ready";
    }
    return "unknown error";
}

/* ---------------------------------------------------------------- cuBLAS */

struct emu_blas {
    cudaStream_t stream;
};

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    *h = (cublasHandle_t)calloc(1, sizeof(emu_blas));
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes)
{
    (void)h, (void)ws, (void)bytes;
    return CUBLAS_STATUS_SUCCESS;
}
const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_?";
}

static float ld(const void *p, cudaDataType_t t, long long i)
{
    return t == CUDA_R_32F ? ((const float *)p)[i]
                           : __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

/* Column-major C (m x n) = alpha op(A) op(B) + beta C, op(A) m x k, op(B) k x n, fp32
 * accumulation; beta 0 does not read C. */
static cublasStatus_t gemm1(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            float alpha, const void *A, cudaDataType_t at, int lda, const void *B,
                            cudaDataType_t bt, int ldb, float beta, void *C, cudaDataType_t ct,
                            int ldc)
{
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float acc = 0.f;
            for (int l = 0; l < k; l++) {
                float a = ta == CUBLAS_OP_N ? ld(A, at, i + (long long)l * lda)
                                            : ld(A, at, l + (long long)i * lda);
                float b = tb == CUBLAS_OP_N ? ld(B, bt, l + (long long)j * ldb)
                                            : ld(B, bt, j + (long long)l * ldb);
                acc += a * b;
            }
            const long long ci = i + (long long)j * ldc;
            float v = alpha * acc + (beta != 0.f ? beta * ld(C, ct, ci) : 0.f);
            if (ct == CUDA_R_32F)
                ((float *)C)[ci] = v;
            else
                ((__nv_bfloat16 *)C)[ci] = __float2bfloat16(v);
        }
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t check(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            cudaDataType_t at, int lda, cudaDataType_t bt, int ldb,
                            cudaDataType_t ct, int ldc, cublasComputeType_t compute)
{
    if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
    /* cuBLAS: lda >= max(1, rows of A as stored), likewise ldb and ldc */
    if (lda < (ta == CUBLAS_OP_N ? (m > 1 ? m : 1) : (k > 1 ? k : 1)) ||
        ldb < (tb == CUBLAS_OP_N ? (k > 1 ? k : 1) : (n > 1 ? n : 1)) || ldc < (m > 1 ? m : 1)) {
        fprintf(stderr, "emu cuBLAS: leading dimensions %d %d %d too small for %c%c %d x %d x %d\n",
                lda, ldb, ldc, ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (at != CUDA_R_16BF || bt != CUDA_R_16BF || (ct != CUDA_R_16BF && ct != CUDA_R_32F) ||
        compute != CUBLAS_COMPUTE_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType_t at,
                            int lda, const void *B, cudaDataType_t bt, int ldb, const void *beta,
                            void *C, cudaDataType_t ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo)
{
    (void)algo;
    emu::sync_stream(h->stream);
    cublasStatus_t s = check(ta, tb, m, n, k, at, lda, bt, ldb, ct, ldc, compute);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    return gemm1(ta, tb, m, n, k, *(const float *)alpha, A, at, lda, B, bt, ldb,
                 *(const float *)beta, C, ct, ldc);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType_t at,
                                          int lda, long long sa, const void *B, cudaDataType_t bt,
                                          int ldb, long long sb, const void *beta, void *C,
                                          cudaDataType_t ct, int ldc, long long sc, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    (void)algo;
    emu::sync_stream(h->stream);
    cublasStatus_t s = check(ta, tb, m, n, k, at, lda, bt, ldb, ct, ldc, compute);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    const size_t ea = 2, eb = 2, ec = ct == CUDA_R_32F ? 4 : 2;
    for (int i = 0; i < batch; i++) {
        s = gemm1(ta, tb, m, n, k, *(const float *)alpha, (const char *)A + (size_t)(i * sa) * ea,
                  at, lda, (const char *)B + (size_t)(i * sb) * eb, bt, ldb,
                  *(const float *)beta, (char *)C + (size_t)(i * sc) * ec, ct, ldc);
        if (s != CUBLAS_STATUS_SUCCESS) return s;
    }
    return CUBLAS_STATUS_SUCCESS;
}
