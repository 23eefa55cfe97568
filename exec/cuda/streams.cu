/* streams.cu — the CUDA runtime calls of the plan runtime (rt_cuda.h): streams, events, copies
 * and device selection behind opaque pointers. */
#include "common.cuh"
#include "rt_cuda.h"

extern "C" int exec_cuda_set_device(int device, base_error *e)
{
    CUDA_OK(cudaSetDevice(device));
    return 0;
}

extern "C" int exec_cuda_device_sync(base_error *e)
{
    CUDA_OK(cudaDeviceSynchronize());
    return 0;
}

extern "C" int exec_cuda_stream_new(void **stream, base_error *e)
{
    cudaStream_t s = NULL;
    *stream = NULL;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *stream = (void *)s;
    return 0;
}

extern "C" void exec_cuda_stream_free(void *stream)
{
    if (stream) cudaStreamDestroy((cudaStream_t)stream);
}

extern "C" int exec_cuda_stream_sync(void *stream, base_error *e)
{
    CUDA_OK(cudaStreamSynchronize((cudaStream_t)stream));
    return 0;
}

extern "C" int exec_cuda_stream_query(void *stream, bool *done, base_error *e)
{
    cudaError_t err = cudaStreamQuery((cudaStream_t)stream);
    *done = err == cudaSuccess;
    if (err == cudaErrorNotReady) return 0;
    CUDA_OK(err);
    return 0;
}

extern "C" int exec_cuda_event_new(void **event, bool timing, base_error *e)
{
    cudaEvent_t ev = NULL;
    *event = NULL;
    CUDA_OK(cudaEventCreateWithFlags(&ev, timing ? cudaEventDefault : cudaEventDisableTiming));
    *event = (void *)ev;
    return 0;
}

extern "C" void exec_cuda_event_free(void *event)
{
    if (event) cudaEventDestroy((cudaEvent_t)event);
}

extern "C" int exec_cuda_event_record(void *event, void *stream, base_error *e)
{
    CUDA_OK(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream));
    return 0;
}

extern "C" int exec_cuda_stream_wait(void *stream, void *event, base_error *e)
{
    CUDA_OK(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0));
    return 0;
}

extern "C" int exec_cuda_event_query(void *event, bool *done, base_error *e)
{
    cudaError_t err = cudaEventQuery((cudaEvent_t)event);
    *done = err == cudaSuccess;
    if (err == cudaErrorNotReady) return 0;
    CUDA_OK(err);
    return 0;
}

extern "C" int exec_cuda_event_sync(void *event, base_error *e)
{
    CUDA_OK(cudaEventSynchronize((cudaEvent_t)event));
    return 0;
}

extern "C" int exec_cuda_event_elapsed(void *a, void *b, float *ms, base_error *e)
{
    *ms = 0;
    CUDA_OK(cudaEventElapsedTime(ms, (cudaEvent_t)a, (cudaEvent_t)b));
    return 0;
}

extern "C" int exec_cuda_copy_h2d(void *stream, void *dst, const void *src, size_t bytes,
                                  base_error *e)
{
    if (bytes == 0) return 0;
    CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)stream));
    return 0;
}

extern "C" int exec_cuda_copy_d2h(void *stream, void *dst, const void *src, size_t bytes,
                                  base_error *e)
{
    if (bytes == 0) return 0;
    CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)stream));
    return 0;
}

extern "C" int exec_cuda_copy_d2d(void *stream, void *dst, const void *src, size_t bytes,
                                  base_error *e)
{
    if (bytes == 0 || dst == src) return 0;
    CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream));
    return 0;
}

extern "C" int exec_cuda_zero(void *stream, void *dst, size_t bytes, base_error *e)
{
    if (bytes == 0) return 0;
    CUDA_OK(cudaMemsetAsync(dst, 0, bytes, (cudaStream_t)stream));
    return 0;
}

/* dst += src in fp32 on the stream: a ZeRO-2/3 micro-batch's reduced gradient piece added into
 * the kept gradient. */
__global__ void k_add_f32(float *dst, const float *src, int64_t n)
{
    GRID_STRIDE(i, n) dst[i] += src[i];
}

extern "C" int exec_cuda_add_f32(void *stream, float *dst, const float *src, int64_t n,
                                 base_error *e)
{
    if (n <= 0) return 0;
    k_add_f32<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(dst, src, n);
    LAUNCH_OK("k_add_f32");
    return 0;
}
