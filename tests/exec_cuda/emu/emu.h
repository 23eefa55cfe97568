/* emu.h — a CPU emulation of the part of CUDA that exec/cuda's kernels use, so that their logic
 * (indexing, tiling, reductions, the online softmax, the capacity scan, the row-major cuBLAS
 * mapping) is checked against the CPU kernels on a machine without a GPU. It is not CUDA: blocks
 * run one after another; the threads of a block are cooperative fibers (ucontext) on one OS
 * thread, switching only at __syncthreads and warp-synchronous calls (shuffles, ballots), which
 * is what CUDA guarantees to those kernels and no more; device memory is host memory; cuBLAS is
 * a plain column-major reference loop that follows cuBLAS's documented semantics, written
 * independently of exec/cuda's row-major mapping so that a wrong mapping shows. Not emulated:
 * timing, the memory model beyond what barriers give, launch limits beyond the configuration's.
 *
 * Streams are queues, as on a GPU: a launch, an asynchronous copy or memset, a GEMM, an event's
 * record, a cudaStreamWaitEvent and another library's asynchronous work (emu_stream_async: the
 * emulated NCCL) are appended to their stream and the call returns; the queues run in order, on
 * the host thread, whenever the emulator is entered (emu::pump), and a wait holds its stream
 * until the event's stream has passed the record. The host blocks only where CUDA blocks it
 * (cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize, a copy to pageable host
 * memory, cudaFree), and while it does, the other streams keep running. So a program that would
 * not hang on a GPU does not hang here because one stream's wait for a peer kept the host from
 * posting another stream's work, and one whose streams would wait on each other on a GPU hangs.
 *
 * The sources are compiled by the host C++ compiler with -I tests/exec_cuda/emu (this folder's
 * cuda_runtime.h, cuda_bf16.h, cublas_v2.h and nvtx3/ shadow the toolkit's) after
 * rewrite.cmake turns each `kernel<<<grid, block, smem, stream>>>(args)` into
 * `emu::launch(kernel, grid, block, smem, stream)(args)`. */
#ifndef PIPER_EMU_H
#define PIPER_EMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

/* ---------------------------------------------------------------- qualifiers */

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

/* ---------------------------------------------------------------- types */

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct float2 {
    float x, y;
};

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorNotReady = 600,
} cudaError_t;
typedef struct emu_stream *cudaStream_t;
/* Events: a record is a point in its stream's queue; it keeps the host time at which the queue
 * passed it, which is what elapsed times measure here. */
typedef struct emu_event *cudaEvent_t;
#define cudaEventDefault 0u
#define cudaEventDisableTiming 2u
enum cudaMemcpyKind {
    cudaMemcpyHostToHost,
    cudaMemcpyHostToDevice,
    cudaMemcpyDeviceToHost,
    cudaMemcpyDeviceToDevice
};
#define cudaStreamNonBlocking 1u
struct cudaDeviceProp {
    char name[256];
    int major, minor, multiProcessorCount;
    size_t totalGlobalMem;
};

/* ---------------------------------------------------------------- bf16 */

struct __nv_bfloat16 {
    uint16_t x;
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};

inline __nv_bfloat16 __float2bfloat16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 b;
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) {
        b.x = (uint16_t)((u >> 16) | 0x40);
        return b;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    b.x = (uint16_t)(u >> 16);
    return b;
}
inline float __bfloat162float(__nv_bfloat16 b)
{
    uint32_t u = (uint32_t)b.x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline float2 __bfloat1622float2(__nv_bfloat162 v)
{
    return float2{__bfloat162float(v.x), __bfloat162float(v.y)};
}

/* ---------------------------------------------------------------- asynchronous work */

/* Work another library runs asynchronously on a stream (the emulated NCCL of emu/nccl_mpi.c:
 * MPI's non-blocking operations): appended to the stream like a kernel; when the stream reaches
 * it, start(arg) is called, then poll(arg) whenever the emulator runs the queues, until it
 * returns 1 (arg is then the library's to free); the stream's later work waits for that. */
extern "C" {
void emu_stream_async(void *stream, void (*start)(void *arg), int (*poll)(void *arg), void *arg);
}

namespace emu {

/* Appends fn to stream s (NULL: the legacy stream) and runs what the queues can run. */
void enqueue(cudaStream_t s, std::function<void()> fn);
/* Runs the queued work of every stream as far as it can go; true when anything ran. */
bool pump(void);
/* A launch configuration CUDA accepts (else the launch fails with cudaErrorInvalidValue). */
bool launch_ok(dim3 grid, dim3 block);

/* The running fiber's indices (one OS thread runs one block's fibers at a time). */
extern dim3 g_block_idx, g_block_dim, g_grid_dim;
unsigned thread_x(void);

void syncthreads(void);
/* Warp-synchronous exchange: every live lane of the warp deposits `bytes` of its value, then
 * reads lane `src`'s. */
void warp_exchange(const void *mine, void *out, size_t bytes, int src);
unsigned warp_ballot(bool pred);

/* Runs `body` for every thread of every block of the grid. */
void run_grid(dim3 grid, dim3 block, void (*body)(void *), void *arg);
/* The next kernel launch's failure, for cudaGetLastError (bad configurations). */
extern cudaError_t g_last_error;

template <typename F, typename Tup> struct launch_ctx {
    F f;
    Tup args;
};

template <typename F, typename Tup, size_t... I>
void call_with(F f, Tup &t, std::index_sequence<I...>)
{
    f(std::get<I>(t)...);
}

template <typename F, typename Tup> void body_of(void *p)
{
    auto *c = static_cast<launch_ctx<F, Tup> *>(p);
    call_with(c->f, c->args, std::make_index_sequence<std::tuple_size<Tup>::value>{});
}

template <typename F> struct launcher {
    F f;
    dim3 grid, block;
    cudaStream_t stream;
    template <typename... A> void operator()(A &&...a)
    {
        typedef std::tuple<typename std::decay<A>::type...> Tup;
        if (!launch_ok(grid, block)) return;
        /* the arguments are copied at the launch, as CUDA copies them */
        enqueue(stream, [f = f, grid = grid, block = block, args = Tup(std::forward<A>(a)...)]() {
            launch_ctx<F, Tup> c{f, args};
            run_grid(grid, block, &body_of<F, Tup>, &c);
        });
    }
};

inline dim3 as_dim3(dim3 d) { return d; }
inline dim3 as_dim3(unsigned v) { return dim3(v); }
inline dim3 as_dim3(int v) { return dim3((unsigned)v); }
inline dim3 as_dim3(long v) { return dim3((unsigned)v); }
inline dim3 as_dim3(long long v) { return dim3((unsigned)v); }

template <typename F, typename G, typename B>
launcher<F> launch(F f, G grid, B block, size_t smem = 0, cudaStream_t s = nullptr)
{
    (void)smem;
    return launcher<F>{f, as_dim3(grid), as_dim3(block), s};
}

} // namespace emu

#define threadIdx (dim3(emu::thread_x(), 0, 0))
#define blockIdx (emu::g_block_idx)
#define blockDim (emu::g_block_dim)
#define gridDim (emu::g_grid_dim)

inline void __syncthreads(void) { emu::syncthreads(); }

template <typename T> inline T __shfl_sync(unsigned mask, T v, int src)
{
    (void)mask;
    T out;
    emu::warp_exchange(&v, &out, sizeof(T), src & 31);
    return out;
}
template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int lanemask)
{
    (void)mask;
    T out;
    emu::warp_exchange(&v, &out, sizeof(T), (int)((emu::thread_x() & 31) ^ (unsigned)lanemask));
    return out;
}
inline unsigned __ballot_sync(unsigned mask, bool pred)
{
    (void)mask;
    return emu::warp_ballot(pred);
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }

/* Fibers switch only at barriers, so read-modify-write is atomic here. */
inline float atomicAdd(float *p, float v)
{
    float o = *p;
    *p = o + v;
    return o;
}
inline double atomicAdd(double *p, double v)
{
    double o = *p;
    *p = o + v;
    return o;
}
inline int atomicOr(int *p, int v)
{
    int o = *p;
    *p = o | v;
    return o;
}
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }

/* ---------------------------------------------------------------- runtime API */

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t ev);
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned flags);
cudaError_t cudaEventQuery(cudaEvent_t ev);
cudaError_t cudaEventSynchronize(cudaEvent_t ev);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaMalloc(void **p, size_t bytes);
template <typename T> cudaError_t cudaMalloc(T **p, size_t bytes)
{
    return cudaMalloc((void **)p, bytes);
}
cudaError_t cudaFree(void *p);
cudaError_t cudaMemset(void *p, int v, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s);
cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t width, size_t height,
                              cudaStream_t s);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind k,
                            cudaStream_t s);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);

/* ---------------------------------------------------------------- cuBLAS */

typedef struct emu_blas *cublasHandle_t;
typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;

cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes);
const char *cublasGetStatusString(cublasStatus_t s);
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType_t at,
                            int lda, const void *B, cudaDataType_t bt, int ldb, const void *beta,
                            void *C, cudaDataType_t ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType_t at,
                                          int lda, long long sa, const void *B, cudaDataType_t bt,
                                          int ldb, long long sb, const void *beta, void *C,
                                          cudaDataType_t ct, int ldc, long long sc, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t algo);

#endif
