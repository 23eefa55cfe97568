/* rt_cuda.h — the few CUDA runtime calls the plan runtime (exec/cuda/runtime.c) makes besides
 * the kernels: streams, events, copies and device selection, as a C interface over opaque
 * pointers (implemented in streams.cu). Keeping the runtime itself plain C means it compiles
 * with the C compiler, links against the real kernels (piper_exec_cuda) or the CPU emulator of
 * them (tests/exec_cuda), and never sees a CUDA type.
 *
 * All functions return 0, or -1 with a message in the base_error naming the CUDA call. */
#ifndef PIPER_EXEC_CUDA_RT_CUDA_H
#define PIPER_EXEC_CUDA_RT_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "../../base/base.h"

#ifdef __cplusplus
extern "C" {
#endif

int exec_cuda_set_device(int device, base_error *e);
int exec_cuda_device_sync(base_error *e);

/* A non-blocking stream of the current device (it does not synchronise with the legacy default
 * stream). */
int exec_cuda_stream_new(void **stream, base_error *e);
void exec_cuda_stream_free(void *stream);
int exec_cuda_stream_sync(void *stream, base_error *e);
/* *done: every operation enqueued on the stream has finished. */
int exec_cuda_stream_query(void *stream, bool *done, base_error *e);

/* Events: timing ones for --trace, the others (cudaEventDisableTiming) are cheaper. */
int exec_cuda_event_new(void **event, bool timing, base_error *e);
void exec_cuda_event_free(void *event);
int exec_cuda_event_record(void *event, void *stream, base_error *e);
/* The stream's later work waits for the event's latest record. */
int exec_cuda_stream_wait(void *stream, void *event, base_error *e);
int exec_cuda_event_query(void *event, bool *done, base_error *e);
int exec_cuda_event_sync(void *event, base_error *e);
/* Milliseconds from a to b, both recorded with timing and finished. */
int exec_cuda_event_elapsed(void *a, void *b, float *ms, base_error *e);

/* Asynchronous copies on a stream (host memory is pageable: the copy of a host source is staged
 * by the driver before the call returns, so the source may be reused at once). */
int exec_cuda_copy_h2d(void *stream, void *dst, const void *src, size_t bytes, base_error *e);
int exec_cuda_copy_d2h(void *stream, void *dst, const void *src, size_t bytes, base_error *e);
int exec_cuda_copy_d2d(void *stream, void *dst, const void *src, size_t bytes, base_error *e);
int exec_cuda_zero(void *stream, void *dst, size_t bytes, base_error *e);
/* dst[i] += src[i] for n floats, on the stream (ZeRO-2/3 gradient pieces). */
int exec_cuda_add_f32(void *stream, float *dst, const float *src, int64_t n, base_error *e);

#ifdef __cplusplus
}
#endif

#endif
