/* test_emu_streams.cpp — the CUDA emulator's streams and events (tests/exec_cuda/emu) behave as
 * CUDA's: work on a stream waits behind that stream's unfinished asynchronous work (an emulated
 * NCCL operation) without blocking the host, an event is a point of its stream, a stream that
 * waits on an event holds its later work until the event's stream has passed it, and the other
 * streams run meanwhile. The emulated NCCL over MPI relies on exactly this: a host blocked on one
 * stream's transfer can keep a peer from ever seeing another stream's, which on a GPU (where the
 * host only enqueues) cannot happen. The asynchronous work here is a flag the test sets, standing
 * for a peer that answers later. */
#include <stdio.h>
#include <stdlib.h>

#include "emu.h"

static int failures;

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);          \
            failures++;                                                                        \
        }                                                                                      \
    } while (0)

/* asynchronous work that finishes when the test says so */
struct peer {
    bool started, answered, finished;
};

static void peer_start(void *p) { ((peer *)p)->started = true; }

static int peer_poll(void *p)
{
    peer *q = (peer *)p;
    if (q->answered) q->finished = true;
    return q->answered ? 1 : 0;
}

static void set_value(float *x, float v)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) *x = v;
}

static void add_into(float *dst, const float *src)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) *dst += *src;
}

int main(void)
{
    cudaStream_t a, b, c;
    CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) == cudaSuccess);
    CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) == cudaSuccess);
    CHECK(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking) == cudaSuccess);
    float *x, *y, *z;
    CHECK(cudaMalloc(&x, sizeof(float)) == cudaSuccess);
    CHECK(cudaMalloc(&y, sizeof(float)) == cudaSuccess);
    CHECK(cudaMalloc(&z, sizeof(float)) == cudaSuccess);
    cudaEvent_t ev;
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess);

    /* stream a: a transfer still waiting for its peer, then a kernel and a record behind it */
    peer p1 = {false, false, false};
    emu_stream_async(a, peer_start, peer_poll, &p1);
    CHECK(p1.started); /* the stream was idle: it starts at once */
    emu::launch(set_value, 1, 32, 0, a)(x, 1.0f);
    CHECK(cudaEventRecord(ev, a) == cudaSuccess);
    /* the host has returned from both calls; neither ran */
    unsigned bits;
    memcpy(&bits, x, sizeof bits);
    CHECK(bits == 0xffffffffu); /* cudaMalloc's fill */
    CHECK(cudaEventQuery(ev) == cudaErrorNotReady);
    CHECK(cudaStreamQuery(a) == cudaErrorNotReady);

    /* stream b waits on the event, then adds x into y; its work before the wait runs now */
    emu::launch(set_value, 1, 32, 0, b)(y, 2.0f);
    CHECK(cudaStreamWaitEvent(b, ev, 0) == cudaSuccess);
    emu::launch(add_into, 1, 32, 0, b)(y, x);
    CHECK(*y == 2.0f);
    CHECK(cudaStreamQuery(b) == cudaErrorNotReady);

    /* stream c depends on nothing: it runs, and a blocking wait for it returns */
    emu::launch(set_value, 1, 32, 0, c)(z, 5.0f);
    CHECK(cudaStreamSynchronize(c) == cudaSuccess);
    CHECK(*z == 5.0f);

    /* a later record of the same event does not move b's wait */
    CHECK(cudaEventRecord(ev, c) == cudaSuccess);
    CHECK(cudaEventQuery(ev) == cudaSuccess);
    CHECK(cudaStreamQuery(b) == cudaErrorNotReady);

    /* the peer answers: a's kernel runs, then b's add */
    p1.answered = true;
    CHECK(cudaStreamSynchronize(b) == cudaSuccess);
    CHECK(p1.finished);
    CHECK(*x == 1.0f);
    CHECK(*y == 3.0f);
    CHECK(cudaStreamQuery(a) == cudaSuccess);

    /* a copy to the host returns when it is done; a copy from it reads the host memory at the call */
    float h = 7.0f, back = 0.0f;
    peer p2 = {false, false, false};
    emu_stream_async(a, peer_start, peer_poll, &p2);
    CHECK(cudaMemcpyAsync(x, &h, sizeof h, cudaMemcpyHostToDevice, a) == cudaSuccess);
    h = 8.0f;
    p2.answered = true;
    CHECK(cudaMemcpyAsync(&back, x, sizeof back, cudaMemcpyDeviceToHost, a) == cudaSuccess);
    CHECK(back == 7.0f);

    /* a bad launch configuration fails at the launch */
    emu::launch(set_value, 1, 2048, 0, a)(x, 0.0f);
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(*x == 7.0f);

    cudaEventDestroy(ev);
    cudaFree(x);
    cudaFree(y);
    cudaFree(z);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
    cudaStreamDestroy(c);
    if (failures) {
        fprintf(stderr, "test_emu_streams: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_emu_streams: ok\n");
    return 0;
}
