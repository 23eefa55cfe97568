/* emu.cpp — the CPU emulation of CUDA (see emu.h): the fiber scheduler behind kernel launches,
 * barriers and warp exchanges; streams as queues run on the host thread, events as points of
 * them; the runtime API over host memory; cuBLAS's GEMMs as reference loops with cuBLAS's
 * argument checks. Fresh "device" memory is filled with 0xff bytes (NaN in
 * fp32 and bf16), so a kernel that reads what nothing wrote shows up in the comparisons. */
#include <sched.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <ucontext.h>

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "emu.h"

namespace emu {

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

bool launch_ok(dim3 grid, dim3 block)
{
    if (block.x == 0 || block.x > 1024 || block.y != 1 || block.z != 1 || grid.x == 0 ||
        grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
        g_last_error = cudaErrorInvalidValue;
        return false;
    }
    return true;
}

void run_grid(dim3 grid, dim3 block, void (*body)(void *), void *arg)
{
    const unsigned nt = block.x;
    if (!launch_ok(grid, block)) return;
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

/* ---------------------------------------------------------------- streams */

/* A stream's queue holds three kinds of work: host work (a kernel, a copy, a GEMM, an event's
 * timestamp), another library's asynchronous work (started when it reaches the head, polled
 * until done) and a wait for a point of another stream's queue. Every piece has the stream's
 * next sequence number; `done` is the last one finished, so a record is (stream, sequence). */
enum { W_HOST, W_ASYNC, W_WAIT };

struct work {
    int kind;
    uint64_t seq;
    std::function<void()> fn;
    void (*start)(void *);
    int (*poll)(void *);
    void *arg;
    bool started;
    int wait_stream;
    uint64_t wait_seq;
};

struct emu_stream {
    int id;
    std::deque<work> q;
    uint64_t enq, done;
};

namespace emu {

/* every stream by id (destroyed ones NULL, their work done); id 0 is the legacy stream */
static std::vector<emu_stream *> g_streams;
static bool g_pumping;

static emu_stream *stream_of(cudaStream_t s)
{
    if (s) return s;
    if (g_streams.empty()) g_streams.push_back(new emu_stream{0, {}, 0, 0});
    return g_streams[0];
}

static emu_stream *new_stream(void)
{
    stream_of(nullptr);
    emu_stream *s = new emu_stream{(int)g_streams.size(), {}, 0, 0};
    g_streams.push_back(s);
    return s;
}

static bool passed(int stream, uint64_t seq)
{
    return stream < 0 || stream >= (int)g_streams.size() || !g_streams[stream] ||
           g_streams[stream]->done >= seq;
}

static bool drained(const emu_stream *s) { return s->done == s->enq; }

bool pump(void)
{
    if (g_pumping) return false; /* work does not enter the emulator, but be sure */
    g_pumping = true;
    bool any = false, again = true;
    while (again) {
        again = false;
        for (size_t k = 0; k < g_streams.size(); k++) {
            emu_stream *s = g_streams[k];
            while (s && !s->q.empty()) {
                work &w = s->q.front();
                if (w.kind == W_HOST) {
                    std::function<void()> fn = std::move(w.fn);
                    const uint64_t seq = w.seq;
                    s->q.pop_front();
                    fn();
                    s->done = seq;
                } else if (w.kind == W_ASYNC) {
                    if (!w.started) {
                        w.started = true;
                        w.start(w.arg);
                    }
                    if (!w.poll(w.arg)) break;
                    s->done = w.seq;
                    s->q.pop_front();
                } else {
                    if (!passed(w.wait_stream, w.wait_seq)) break;
                    s->done = w.seq;
                    s->q.pop_front();
                }
                any = again = true;
            }
        }
    }
    g_pumping = false;
    return any;
}

static uint64_t append(emu_stream *s, work w)
{
    const uint64_t seq = w.seq = ++s->enq;
    s->q.push_back(std::move(w));
    return seq;
}

void enqueue(cudaStream_t s, std::function<void()> fn)
{
    work w{};
    w.kind = W_HOST;
    w.fn = std::move(fn);
    append(stream_of(s), std::move(w));
    pump();
}

/* The host waits (as CUDA's blocking calls do) while every stream keeps running. */
template <typename P> static void block_until(P done)
{
    while (!done())
        if (!pump()) sched_yield();
}

static void sync_all(void)
{
    block_until([] {
        for (emu_stream *s : g_streams)
            if (s && !drained(s)) return false;
        return true;
    });
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

} // namespace emu

extern "C" void emu_stream_async(void *stream, void (*start)(void *), int (*poll)(void *),
                                 void *arg)
{
    work w{};
    w.kind = W_ASYNC;
    w.start = start;
    w.poll = poll;
    w.arg = arg;
    emu::append(emu::stream_of((cudaStream_t)stream), std::move(w));
    emu::pump();
}

/* ---------------------------------------------------------------- runtime API */

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

/* (every stream the runtime creates is non-blocking: the legacy stream does not wait for it) */
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags;
    *s = emu::new_stream();
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (!s) return cudaErrorInvalidValue;
    /* CUDA lets the queued work finish first */
    emu::block_until([s] { return emu::drained(s); });
    emu::g_streams[(size_t)s->id] = nullptr;
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    emu_stream *st = emu::stream_of(s);
    emu::block_until([st] { return emu::drained(st); });
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s)
{
    emu::pump();
    return emu::drained(emu::stream_of(s)) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaDeviceSynchronize(void)
{
    emu::sync_all();
    return cudaSuccess;
}

struct emu_event {
    bool timing, recorded;
    int stream;                    /* the last record: a point of this stream's queue */
    uint64_t seq;
    std::shared_ptr<double> t;     /* the host time at which the queue passed it */
};

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags)
{
    *ev = new emu_event{!(flags & cudaEventDisableTiming), false, -1, 0, nullptr};
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t ev)
{
    delete ev; /* a queued timestamp keeps its own cell */
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s)
{
    if (!ev) return cudaErrorInvalidValue;
    emu_stream *st = emu::stream_of(s);
    std::shared_ptr<double> t = std::make_shared<double>(0.0);
    work w{};
    w.kind = W_HOST;
    w.fn = [t] { *t = emu::now(); };
    ev->seq = emu::append(st, std::move(w));
    ev->stream = st->id;
    ev->t = t;
    ev->recorded = true;
    emu::pump();
    return cudaSuccess;
}

/* The stream's later work waits until the event's stream has passed the record as it stands
 * now (a later record of the same event does not move the wait); an event never recorded is
 * no wait. */
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned flags)
{
    (void)flags;
    if (!ev) return cudaErrorInvalidValue;
    if (!ev->recorded) return cudaSuccess;
    work w{};
    w.kind = W_WAIT;
    w.wait_stream = ev->stream;
    w.wait_seq = ev->seq;
    emu::append(emu::stream_of(s), std::move(w));
    emu::pump();
    return cudaSuccess;
}

static bool event_done(const emu_event *ev) { return !ev->recorded || emu::passed(ev->stream, ev->seq); }

cudaError_t cudaEventQuery(cudaEvent_t ev)
{
    if (!ev) return cudaErrorInvalidValue;
    emu::pump();
    return event_done(ev) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev)
{
    if (!ev) return cudaErrorInvalidValue;
    emu::block_until([ev] { return event_done(ev); });
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    /* as CUDA: both recorded, both with timing, both passed */
    if (!a || !b || !a->timing || !b->timing || !a->recorded || !b->recorded)
        return cudaErrorInvalidValue;
    emu::pump();
    if (!event_done(a) || !event_done(b)) return cudaErrorNotReady;
    *ms = (float)((*b->t - *a->t) * 1e3);
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    *p = malloc(bytes ? bytes : 1);
    if (!*p) return cudaErrorMemoryAllocation;
    memset(*p, 0xff, bytes);
    return cudaSuccess;
}

/* cudaFree waits for the device, as CUDA's does */
cudaError_t cudaFree(void *p)
{
    if (p) emu::sync_all();
    free(p);
    return cudaSuccess;
}

/* The legacy stream's synchronous calls: after the legacy stream's own work (the streams the
 * runtime creates are non-blocking, so not theirs), then at once. */
cudaError_t cudaMemset(void *p, int v, size_t bytes)
{
    cudaStreamSynchronize(nullptr);
    memset(p, v, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s)
{
    emu::enqueue(s, [p, v, bytes] { memset(p, v, bytes); });
    return cudaSuccess;
}

cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t width, size_t height,
                              cudaStream_t s)
{
    if (width > pitch) return cudaErrorInvalidValue;
    emu::enqueue(s, [=] {
        for (size_t r = 0; r < height; r++) memset((char *)p + r * pitch, v, width);
    });
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind k)
{
    (void)k;
    cudaStreamSynchronize(nullptr);
    memmove(dst, src, bytes);
    return cudaSuccess;
}

/* From pageable host memory CUDA stages the source at the call; to it, the call returns when
 * the copy is done. */
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind k,
                            cudaStream_t s)
{
    if (k == cudaMemcpyHostToDevice) {
        std::shared_ptr<std::vector<char>> stage =
            std::make_shared<std::vector<char>>((const char *)src, (const char *)src + bytes);
        emu::enqueue(s, [dst, stage] { memmove(dst, stage->data(), stage->size()); });
        return cudaSuccess;
    }
    emu::enqueue(s, [dst, src, bytes] { memmove(dst, src, bytes); });
    if (k == cudaMemcpyDeviceToHost || k == cudaMemcpyHostToHost) {
        emu_stream *st = emu::stream_of(s);
        const uint64_t seq = st->enq;
        const int id = st->id;
        emu::block_until([id, seq] { return emu::passed(id, seq); });
    }
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
    cublasStatus_t s = check(ta, tb, m, n, k, at, lda, bt, ldb, ct, ldc, compute);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    /* host pointer mode: alpha and beta are read at the call */
    const float al = *(const float *)alpha, be = *(const float *)beta;
    emu::enqueue(h->stream, [=] { gemm1(ta, tb, m, n, k, al, A, at, lda, B, bt, ldb, be, C, ct, ldc); });
    return CUBLAS_STATUS_SUCCESS;
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
    cublasStatus_t s = check(ta, tb, m, n, k, at, lda, bt, ldb, ct, ldc, compute);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    const size_t ea = 2, eb = 2, ec = ct == CUDA_R_32F ? 4 : 2;
    const float al = *(const float *)alpha, be = *(const float *)beta;
    emu::enqueue(h->stream, [=] {
        for (int i = 0; i < batch; i++)
            gemm1(ta, tb, m, n, k, al, (const char *)A + (size_t)(i * sa) * ea, at, lda,
                  (const char *)B + (size_t)(i * sb) * eb, bt, ldb, be,
                  (char *)C + (size_t)(i * sc) * ec, ct, ldc);
    });
    return CUBLAS_STATUS_SUCCESS;
}
