/* trace.h — piper's Chrome-trace writer (viz/, prefix viz_trace_): the JSON that Perfetto and
 * chrome://tracing open, written by piper-sim (--trace) and piper-exec as they run a plan.
 *
 * A library of its own (piper_trace), on the plan library only, so that the plan's consumers
 * (sim/, exec/) may include this header and link it without the compiler or Graphviz. The
 * layout is the one viz_chrome_read() reads back (viz/viz.h):
 *  - one process per GPU (pid = device id, named "GPU n"), one thread per stream (tid = the
 *    stream's index in the device's list, named after the stream), both with sort indices so
 *    that viewers keep the plan's order;
 *  - "X" (complete) events with ts and dur in microseconds. Times are given in integer
 *    nanoseconds and printed exactly (three decimals), so that an event that ends when the next
 *    one on its thread starts never appears to overlap it after rounding;
 *  - events named alike by every writer (viz_trace_instr_name): compute by pass, region and
 *    micro-batch ("F L3.attn mb2"), communication by operation, peer or group, and bytes
 *    ("send mb2 to 5, 4.00 MiB", "all_reduce dp(pp=1,tp=0), 256.00 MiB"); categories "compute",
 *    "p2p" and "coll";
 *  - "C" counter events ("memory", args {"bytes": N}): a track per GPU of its live memory;
 *  - "s"/"f" flow events from each send to the receive it meets (Perfetto draws an arrow).
 * The output is a function of the calls alone: the same calls give the same bytes. */
#ifndef PIPER_VIZ_TRACE_H
#define PIPER_VIZ_TRACE_H

#include <stdint.h>
#include <stdio.h>

#include "../base/base.h"
#include "../plan/plan.h"

typedef struct viz_trace {
    FILE *f;           /* out.f while open */
    base_out out;      /* the file, replaced only when the trace is closed whole */
    const char *path;
    int64_t nrecords;  /* records written (events and metadata) */
    int64_t nevents;   /* "X" events written */
    int err;           /* errno of the first failed write, 0 when none */
} viz_trace;

/* An event argument: a string when str is not NULL, else the number num. */
typedef struct viz_trace_arg {
    const char *key;
    const char *str;
    double num;
} viz_trace_arg;

/* Starts the file through base_out (base.h: the old file stays until viz_trace_close) and writes
 * the head of the document. */
int viz_trace_open(viz_trace *t, const char *path, base_error *e);
/* Names a process (with sort index = pid) and a thread of it (sort index = tid). */
void viz_trace_process(viz_trace *t, int64_t pid, const char *name);
void viz_trace_thread(viz_trace *t, int64_t pid, int64_t tid, const char *name);
/* A complete event from ts_ns lasting dur_ns (negative values count as 0). */
void viz_trace_complete(viz_trace *t, int64_t pid, int64_t tid, const char *name, const char *cat, int64_t ts_ns,
                        int64_t dur_ns, const viz_trace_arg *args, int nargs);
/* A counter sample of process pid: its track `name` reads `value` (args key `key`) from ts_ns on. */
void viz_trace_counter(viz_trace *t, int64_t pid, const char *name, const char *key, int64_t ts_ns, double value);
/* One end of flow `id` (cat "p2p"): the start (a send, "s") or the finish (its receive, "f", bound
 * to the enclosing event); ts_ns must fall inside an "X" event of the thread. */
void viz_trace_flow(viz_trace *t, int64_t pid, int64_t tid, int64_t id, int finish, int64_t ts_ns);
/* Writes the tail and puts the file in place; fails (naming the file) if any write failed, and
 * then leaves the old file as it was. */
int viz_trace_close(viz_trace *t, base_error *e);
/* Drops the trace of a run that failed: the old file stays as it was. */
void viz_trace_abort(viz_trace *t);

/* The event name of instruction `in` of device `dev` (see above) into buf (always terminated);
 * returns the length it wanted, as snprintf. */
int viz_trace_instr_name(const plan_set *p, int dev, const plan_instr *in, char *buf, size_t n);
/* "compute", "p2p" or "coll"; NULL for instructions that are not events (record, wait, alloc,
 * free, nop). */
const char *viz_trace_instr_cat(const plan_instr *in);

#endif
