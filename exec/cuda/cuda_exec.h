/* cuda_exec.h — the CUDA plan runtime: one process runs one device of a plan on one GPU with the
 * bf16 kernels of exec/cuda (kernels.h), through the interpreter of exec/exec.h. It reads a plan
 * through the binding layer the CPU executor reads it through (exec/bind.h), so that the two
 * backends train the same model on the same data from the same initial parameters, and differs
 * where a GPU does:
 *
 *  - Streams: every plan stream is a CUDA stream; RECORD/WAIT are CUDA events (one per RECORD
 *    instruction, rt_host.h says why); a compute is enqueued on its stream and the interpreter
 *    moves on at once; p2p and collectives are NCCL operations enqueued on their stream, and
 *    `test` polls a CUDA event recorded after them (cudaEventQuery), so the interpreter's view of
 *    a communication's end is the device's.
 *  - Communicators: ncclCommSplit of a world communicator, one per (group, stream), per p2p
 *    direction and stream pair, and per head TP group for the vocabulary-parallel cross-entropy
 *    (rt_host.h); the members of a sendrecv group are launched between ncclGroupStart and
 *    ncclGroupEnd, in the plan's order. A plan with one device creates none and never loads NCCL.
 *  - Storage (kernels.h): parameters bf16 with an fp32 master copy in the same buffer, gradients
 *    and optimizer state fp32, activations and boundary tensors bf16; sizes are the CUDA kernels'
 *    (exec_cuda_region_sizes), not the plan's.
 *  - Memory: every buffer and boundary tensor comes from a caching allocator (rt_host.h) over
 *    cudaMalloc; a block freed by a stream is reused only once the device has passed the free
 *    (an event on that stream). Its peak is reported next to the plan's.
 *  - Losses, the gradient norm and the clipping coefficient stay on the device during the step
 *    (clipping needs no round trip); the step's figures are read back at its end.
 *  - NVTX ranges around every instruction, named as the plan's trace names them; --trace writes
 *    a step's instructions from CUDA events in piper-sim's Chrome format (viz/trace.h).
 *
 * A pipeline's last stage under tied embeddings keeps a copy of its vocabulary shard of the token
 * table after the head's parameters, as piper-exec does (summed with the embedding's over the
 * plan's tied pair, updated as the embedding's table).
 *
 * ZeRO-1/2: a reduce-scatter of gradient buffers cuts each region's block in group-size pieces of
 * ceil(n / size) (piper-exec's cut), staged rank by rank; the optimizer step updates the device's
 * piece (and keeps whole-size optimizer state, indexed by the piece); the parameter all-gather
 * sends the updated bf16 pieces back.
 *
 * Not yet (refused with a message at open): ZeRO-3 (parameters gathered into communication
 * buffers), clipping under ZeRO (the norm kernel sums whole regions), collectives of activations
 * other than all-reduce, reduce-scatter, all-gather and all-to-all. */
#ifndef PIPER_EXEC_CUDA_EXEC_H
#define PIPER_EXEC_CUDA_EXEC_H

#include <stdio.h>

#include "../../viz/trace.h"
#include "../exec.h"
#include "kernels.h"

struct exec_data; /* exec/data.h: the token source, shared with piper-exec */

typedef struct exec_cuda_options {
    uint64_t seed;
    const struct exec_data *data; /* tokens (--data); NULL: synthetic (exec_synthetic_token) */
    exec_optim optim;       /* kind, lr, beta1, beta2, eps, weight_decay */
    double grad_clip;       /* max global norm when the plan has aux.grad_norm; <= 0: off */
    double timeout_s;
    bool trace;             /* time every instruction with CUDA events */
    bool nvtx;              /* NVTX ranges named after the instructions */
} exec_cuda_options;

typedef struct exec_cuda_rt exec_cuda_rt;

/* Reads the plan for `device` (local: no communication), selects GPU `gpu`, creates the streams,
 * events, kernel contexts and the allocator. */
int exec_cuda_rt_open(exec_cuda_rt **out, const plan_set *p, int device, int world, int gpu,
                      const exec_cuda_options *o, base_error *e);
void exec_cuda_rt_close(exec_cuda_rt *r);
/* The communicators: collective over the world communicator `world_comm` (an NCCL communicator
 * of every rank, device = rank; NULL when the plan has one device). */
int exec_cuda_rt_connect(exec_cuda_rt *r, void *world_comm, base_error *e);
const exec_backend *exec_cuda_rt_backend(exec_cuda_rt *r);
/* The data-parallel size and rank the device's samples come from, the dtype name. */
int64_t exec_cuda_rt_dp_size(const exec_cuda_rt *r);

typedef struct exec_cuda_step_stats {
    double loss, aux_loss;  /* this device's share of the step's loss */
    double grad_norm;       /* the squared global norm when the plan computes it; else -1 */
    double seconds;
    double peak;            /* bytes the allocator handed out at most (size classes) */
    double requested;       /* bytes asked of the allocator at most (exact sizes): the plan's
                               peak when every byte is a plan buffer in its planned size */
    double reserved;        /* bytes it held from cudaMalloc at most */
    double plan_peak;       /* the plan's own peak of its buffers */
} exec_cuda_step_stats;

/* One training step: data, the interpreter over the list, the device's figures. */
int exec_cuda_rt_step(exec_cuda_rt *r, exec_interp *it, int64_t step, exec_cuda_step_stats *st,
                      base_error *e);
/* Writes the last step's instructions (needs options.trace) into t as process `device`. */
int exec_cuda_rt_trace(exec_cuda_rt *r, viz_trace *t, base_error *e);
/* Per memory category, the plan's bytes and the runtime's. */
void exec_cuda_rt_print_memory(const exec_cuda_rt *r, FILE *f);

#endif
