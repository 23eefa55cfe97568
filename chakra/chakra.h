/* chakra.h — MLCommons Chakra execution traces of a plan: the contract of chakra/ (prefix
 * chakra_).
 *
 * ASTRA-sim and the other tools of the Chakra ecosystem replay one execution trace per rank. A
 * trace file is a stream of protobuf messages (chakra/et_def.proto, version 0.0.4 of the format),
 * each preceded by its length as a varint: one GlobalMetadata, then one Node per operation.
 * chakra_write turns a compiled plan into `<prefix>.<rank>.et` for every device, plus
 * `<prefix>.comm_groups.json`, the communicator groups the collectives name (docs/chakra.md has
 * the mapping and what the format cannot say):
 *  - compute -> COMP_NODE (num_ops: FLOPs, tensor_size: HBM bytes), send -> COMM_SEND_NODE,
 *    recv -> COMM_RECV_NODE (comm_src, comm_dst, comm_tag, comm_size), coll -> COMM_COLL_NODE
 *    (comm_type, comm_size, pg_name); a node's id is its instruction's index in the device's list;
 *  - data_deps: what must finish before a node starts: the previous node of its stream and what
 *    the waits before it on that stream waited for (the nodes before the matching records);
 *  - ctrl_deps: the previous node in launch order, the order in which the host issues them;
 *  - record, wait, alloc, free and nop become no node.
 * Start times and durations come from the caller (the simulator's) or, without them, from the
 * plan's own abstract run (plan_check_timed). Reads plans only through plan/plan.h. */
#ifndef PIPER_CHAKRA_H
#define PIPER_CHAKRA_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"
#include "../plan/plan.h"

/* The version string the files' GlobalMetadata carries. */
#define CHAKRA_ET_VERSION "0.0.4"

/* When each instruction ran: start[d][i] and end[d][i], in seconds since the step began, for
 * instruction i of device d's list. A device whose start[d] is NULL gets no times (0). */
typedef struct chakra_times {
    const char *source;          /* what the times are, for the metadata: "simulated" */
    const double *const *start;  /* ndevices entries */
    const double *const *end;
} chakra_times;

/* Writes `dir`/`prefix`.<rank>.et for every device of `p` and `dir`/`prefix`.comm_groups.json.
 * `dir` is created (with its parents) when missing and refused when it is not a directory;
 * `prefix` must be a file name (no '/'). Every file goes through base_out: a failure leaves no
 * half-written file. times == NULL: the abstract run's (plan_check_timed), which fails on a plan
 * that does not pass the static check. Errors say what is wrong and what to do. */
int chakra_write(const plan_set *p, const char *dir, const char *prefix, const chakra_times *times,
                 base_error *e);

/* Where piper-sim --emit-chakra writes, and the writer in the shape of the simulator's
 * sim_times_fn (sim/sim.h): ctx is a chakra_target, the times are the simulation's. */
typedef struct chakra_target {
    const char *dir, *prefix;
} chakra_target;
int chakra_write_simulated(void *ctx, const plan_set *p, const double *const *start, const double *const *end,
                           base_error *e);

/* The default prefix for a program's traces: its file name without directories and without its
 * last extension ("configs/programs/dp2.yaml" -> "dp2"), into out[n]; "trace" when that is
 * empty. */
void chakra_default_prefix(const char *program, char *out, size_t n);

/* ---------------------------------------------------------------- framing (exposed for tests) */

/* The most bytes a varint of a uint64 takes. */
#define CHAKRA_VARINT_MAX 10
/* Writes v as a protobuf varint (7 bits a byte, least significant first, high bit = more) into
 * out (CHAKRA_VARINT_MAX bytes); returns the bytes written. */
size_t chakra_varint_put(uint8_t *out, uint64_t v);
/* Reads one varint from in[n] into *v; returns the bytes it took, or 0 when the bytes end
 * before it does or it runs past CHAKRA_VARINT_MAX bytes or 64 bits. */
size_t chakra_varint_get(const uint8_t *in, size_t n, uint64_t *v);

#endif /* PIPER_CHAKRA_H */
