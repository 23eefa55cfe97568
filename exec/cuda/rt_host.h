/* rt_host.h — the host-side logic of the CUDA runtime (exec/cuda/runtime.c), in plain C with no
 * CUDA or NCCL types, so that tests/exec_cuda checks it on a machine without a GPU:
 *
 *  - streams and events: every plan stream is one CUDA stream; every RECORD instruction gets a
 *    CUDA event of its own, and a WAIT waits on the event of the record the list's index names
 *    (plan_index.wait: the latest record of its event before it in launch order, else the first).
 *    One event per record, not per plan event id, because cudaStreamWaitEvent waits for the most
 *    recent record *on the host*, and the host may already have run a later record of the same
 *    id on another stream. The exec_backend's record/wait callbacks are given (stream, event),
 *    not the instruction: a stream runs its instructions in order, so the k-th record (wait)
 *    call on stream s is the k-th RECORD (WAIT) instruction of s, which exec_cuda_streams keeps.
 *  - communicators: one NCCL communicator per (group, stream) any device of the plan uses for
 *    collectives (NCCL, like MPI, matches a communicator's operations in issue order, and two
 *    streams' collectives on one group may interleave differently on different members), plus
 *    one per (head TP group, "#reduce") for the vocabulary-parallel cross-entropy, plus one per
 *    p2p direction (sender, receiver, sender's stream, receiver's stream): a two-rank
 *    communicator that each member uses from one stream only. Keys are computed from the whole
 *    plan and sorted, so every rank calls ncclCommSplit for every key in the same order (members
 *    with their color, the others with NCCL_SPLIT_NOCOLOR).
 *  - sendrecv groups: the members of a sendrecv group, consecutive on their stream, are launched
 *    between one ncclGroupStart and ncclGroupEnd; exec_cuda_sendrecv_spans gives each p2p
 *    instruction the first and last member of its group (itself for a lone transfer), from the
 *    list's index.
 *  - the caching allocator: size classes over a raw allocator (cudaMalloc), free lists per class,
 *    blocks freed by a stream kept pending behind a fence (a CUDA event) until the device has
 *    passed the free, peaks reported.
 *
 * Functions return 0, or -1 with a message in the base_error. */
#ifndef PIPER_EXEC_CUDA_RT_HOST_H
#define PIPER_EXEC_CUDA_RT_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../base/base.h"
#include "../../plan/plan.h"

/* ---------------------------------------------------------------- streams and events */

typedef struct exec_cuda_streams {
    plan_index ix;       /* the list's index: wait targets, sendrecv groups (plan.h) */
    int nstreams;
    int nrecords;        /* RECORD instructions of the list: one CUDA event each */
    int *record_of;      /* [instr]: the event index of a RECORD instruction, -1 */
    int *wait_on;        /* [instr]: the event index a WAIT instruction waits on, -1 */
    /* per stream, its RECORD and WAIT instructions in order, and the run's cursors */
    int **recs, **waits;
    int *nrecs, *nwaits;
    int *rec_cur, *wait_cur;
} exec_cuda_streams;

/* Reads the streams and events of list `list` through its index (plan_index_build); fails as
 * the index does, e.g. on a wait whose event is never recorded. */
int exec_cuda_streams_init(exec_cuda_streams *s, const plan_set *p, int list, base_error *e);
void exec_cuda_streams_free(exec_cuda_streams *s);
/* Sets the cursors back for a new run of the list. */
void exec_cuda_streams_reset(exec_cuda_streams *s);
/* The event index for the next record call on `stream` of plan event `event` (checked against
 * the instruction it must be), advancing the cursor. */
int exec_cuda_streams_next_record(exec_cuda_streams *s, const plan_list *L, int stream, int event,
                                  int *ev, base_error *e);
/* The event index the next wait call on `stream` for `event` waits on. */
int exec_cuda_streams_next_wait(exec_cuda_streams *s, const plan_list *L, int stream, int event,
                                int *ev, base_error *e);

/* ---------------------------------------------------------------- communicators */

#define EXEC_CUDA_REDUCE_STREAM "#reduce"

typedef enum { EXEC_CUDA_COMM_GROUP, EXEC_CUDA_COMM_P2P } exec_cuda_comm_kind;

typedef struct exec_cuda_comm_key {
    exec_cuda_comm_kind kind;
    int group;           /* GROUP: the global group id */
    int src, dst;        /* P2P: sender and receiver devices */
    const char *stream;  /* GROUP: the stream; P2P: the sender's stream */
    const char *stream2; /* P2P: the receiver's stream */
    int nmembers;
    int *members;        /* devices in communicator rank order (the group's, or src, dst) */
} exec_cuda_comm_key;

/* Every communicator the plan needs, sorted (groups by id and stream, then p2p directions by
 * sender, receiver and streams). head_region: the region whose TP-sharded forward needs the
 * vocabulary-parallel reductions (-1: none). Fails when a group's collectives on a stream are not
 * issued by exactly its members, or when a send has no matching receive. */
int exec_cuda_comm_keys(const plan_set *p, int head_region, exec_cuda_comm_key **out, int *n,
                        base_error *e);
void exec_cuda_comm_keys_free(exec_cuda_comm_key *k, int n);
/* The key of a collective (or of the head's reductions with stream "#reduce"), or -1. */
int exec_cuda_comm_find_group(const exec_cuda_comm_key *k, int n, int group, const char *stream);
/* The key of a transfer from src on stream ssend to dst on stream srecv, or -1. */
int exec_cuda_comm_find_p2p(const exec_cuda_comm_key *k, int n, int src, int dst,
                            const char *ssend, const char *srecv);
/* The device's rank in key k's communicator (ncclCommSplit's key), or -1 when not a member (it
 * passes NCCL_SPLIT_NOCOLOR). */
int exec_cuda_comm_rank(const exec_cuda_comm_key *k, int device);
/* For SEND/RECV instruction i of `device`: the peer's matching instruction's stream name (the
 * receive for a send with the same tag, and the other way round), or NULL when none matches. */
const char *exec_cuda_p2p_peer_stream(const plan_set *p, int device, int i);

/* ---------------------------------------------------------------- sendrecv groups */

/* For every SEND/RECV of the indexed list: first[i] and last[i], the first and last members of
 * its p2p run (plan_index.run: its sendrecv group, or i itself for a lone transfer); -1
 * elsewhere. */
void exec_cuda_sendrecv_spans(const plan_index *ix, int *first, int *last);

/* ---------------------------------------------------------------- the caching allocator */

/* The size class of a request: a power of two from 512 bytes up to 1 MiB (small tensors, where
 * rounding up costs little), then multiples of 2 MiB (at most 2 MiB - 1 wasted per block).
 * Requests of 0 bytes get the smallest class. */
size_t exec_cuda_pool_class(size_t bytes);

typedef struct exec_cuda_pool_ops {
    void *ctx;
    /* the raw allocator (cudaMalloc / cudaFree) */
    int (*raw_alloc)(void *ctx, size_t bytes, void **p, base_error *e);
    void (*raw_free)(void *ctx, void *p);
    /* a fence on a stream (a CUDA event recorded there), its query, wait and release; NULL
     * fence_record: blocks are reusable as soon as they are freed (tests, one stream) */
    int (*fence_record)(void *ctx, int stream, void **fence, base_error *e);
    int (*fence_done)(void *ctx, void *fence, bool *done, base_error *e);
    int (*fence_wait)(void *ctx, void *fence, base_error *e);
    void (*fence_free)(void *ctx, void *fence);
} exec_cuda_pool_ops;

typedef struct exec_cuda_pool_block {
    void *p;
    size_t cls;
    void *fence;         /* pending: freed on a stream the device may not have passed yet */
} exec_cuda_pool_block;

typedef struct exec_cuda_pool {
    exec_cuda_pool_ops ops;
    /* blocks not in use: free (fence NULL) and pending */
    exec_cuda_pool_block *idle;
    size_t nidle, capidle;
    /* figures: bytes asked for, bytes in blocks handed out (their classes), bytes the raw
     * allocator holds; peaks of each */
    double requested, in_use, reserved;
    double peak_requested, peak_in_use, peak_reserved;
    int64_t raw_allocs, reuses;
} exec_cuda_pool;

void exec_cuda_pool_init(exec_cuda_pool *pl, const exec_cuda_pool_ops *ops);
/* Releases every idle block to the raw allocator (waiting for pending fences). Blocks still in
 * use are the caller's. */
void exec_cuda_pool_destroy(exec_cuda_pool *pl);
/* A block of at least `bytes`: an idle block of the class whose fence has passed, else a new raw
 * block; when the raw allocator fails, waits for the pending blocks, and then empties the cache,
 * before trying again. */
int exec_cuda_pool_alloc(exec_cuda_pool *pl, size_t bytes, void **p, base_error *e);
/* Gives a block back; stream >= 0 fences it on that stream. */
int exec_cuda_pool_free(exec_cuda_pool *pl, void *p, size_t bytes, int stream, base_error *e);
/* Releases the idle blocks (waiting for their fences) to the raw allocator. */
int exec_cuda_pool_trim(exec_cuda_pool *pl, base_error *e);
/* Peaks back to the current figures (a new step). */
void exec_cuda_pool_reset_peaks(exec_cuda_pool *pl);

#endif
