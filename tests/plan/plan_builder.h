/* plan_builder.h — builds plan_set values by hand for the plan tests and the benchmark: lists,
 * streams, buffers and instructions are appended one call at a time, and every array grows in the
 * plan's arena, exactly as a compiler would leave it. */
#ifndef PIPER_TESTS_PLAN_BUILDER_H
#define PIPER_TESTS_PLAN_BUILDER_H

#include "plan/plan.h"

typedef struct plan_builder {
    plan_set *p;
    size_t *cap_ins, *cap_bufs, *cap_streams; /* per list */
    size_t cap_groups, cap_kl, cap_regions, cap_kids;
} plan_builder;

/* Starts *p with `ndevices` devices (device i: id i, node 0, list 0, offset 0) and `nlists` empty
 * lists; a GPU with peak bf16/fp32 1e12 FLOP/s and no HBM figure, so a kernel of F FLOPs takes
 * F/1e12 seconds. */
void pb_init(plan_builder *b, plan_set *p, int ndevices, int nlists);
void pb_done(plan_builder *b); /* frees the builder, not the plan */

int pb_region(plan_builder *b, const char *name);
int pb_kernel_id(plan_builder *b, const char *name);
/* A kernel list of one GEMM-like kernel with `flops` (bf16) and, if bytes > 0, a memory-bound one. */
int pb_kernels(plan_builder *b, double flops, double bytes);
int pb_group(plan_builder *b, const char *name, int n, const int32_t *devices);

int pb_stream(plan_builder *b, int l, const char *name);
int pb_buf(plan_builder *b, int l, const char *name, int64_t bytes, plan_mem mem);
/* Sets a device's list, peer offset and group slots (the list's ngroup_slots becomes n). */
void pb_device(plan_builder *b, int d, int l, int32_t peer_offset, int n, const int32_t *slots);

/* Appends an instruction (from plan_instr_init) and returns its index in the list. */
int pb_add(plan_builder *b, int l, plan_op op, int stream);
plan_instr *pb_at(plan_builder *b, int l, int i);
int pb_compute(plan_builder *b, int l, int s, plan_pass pass, int kernels, int mb, int stage);
void pb_reads(plan_builder *b, int l, int i, int n, const int32_t *bufs);
void pb_writes(plan_builder *b, int l, int i, int n, const int32_t *bufs);
int pb_send(plan_builder *b, int l, int s, int peer, int tag, int64_t bytes, int buf);
int pb_recv(plan_builder *b, int l, int s, int peer, int tag, int64_t bytes, int buf);
int pb_coll(plan_builder *b, int l, int s, plan_coll kind, int slot, int64_t bytes, int buf);
int pb_record(plan_builder *b, int l, int s, int event);
int pb_wait(plan_builder *b, int l, int s, int event);
int pb_alloc(plan_builder *b, int l, int s, int buf); /* bytes and category from the buffer table */
int pb_free(plan_builder *b, int l, int s, int buf);

/* A 1F1B pipeline (Megatron's p2p pattern: sendrecv pairs in the steady state) of P stages x D
 * data-parallel replicas (device r*P + s), M micro-batches and L layers per stage; streams
 * compute, pp and dp tied by events; each layer's gradient all-reduce overlaps the last backward,
 * then the optimizer steps. Activations are 64 MiB per layer and micro-batch, so stage s holds
 * min(P - s, M) micro-batches' worth at its peak. With `shared`, the replicas of a stage share its
 * list through peer_offset; otherwise every device has its own. GPU: H100 figures. */
void pb_pipeline_1f1b(plan_builder *b, plan_set *p, int P, int D, int M, int L, int shared);

#endif
