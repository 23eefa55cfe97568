/* replay_trace.c — the replay's Chrome trace (--trace; viz/trace.h writes the format): one
 * process per GPU, one thread per stream, one event per compute, collective and p2p run, in
 * simulated nanoseconds; a transfer's or collective's args say how long of it was spent waiting
 * for its partners (wait_us) before data moved; a flow from each send to its receive; a memory
 * counter per GPU. Folded replicas get copies of their simulated device's events. */
#include "sim_internal.h"

#include "../viz/trace.h"

#include <simgrid/engine.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NS_PER_S 1e9

static int64_t to_ns(double seconds) { return seconds > 0 ? llround(seconds * NS_PER_S) : 0; }

/* One event per compute, collective and p2p run (a sendrecv group is posted and finishes as one,
 * so it is one event named after its members), from when the stream reached it to when it
 * finished: a stream runs one at a time, so a thread's events never overlap. */
void sim_trace_event(int d, int s, const plan_list *L, const int32_t *at, int n, double t0, double moving_at)
{
    const plan_set *p = sim_replay_state->p;
    const plan_instr *in = &L->ins[at[0]];
    char name[512];
    int len = viz_trace_instr_name(p, d, in, name, sizeof name);
    viz_trace_arg args[5];
    int na = 0;
    if (in->op == PLAN_COMPUTE) {
        if (in->stage >= 0) args[na++] = (viz_trace_arg){"stage", NULL, in->stage};
        if (in->mb >= 0) args[na++] = (viz_trace_arg){"mb", NULL, in->mb};
        args[na++] = (viz_trace_arg){"gemm_flops", NULL, sim_kernel_list_gemm_flops(p, in->kernels)};
    } else if (in->op == PLAN_COLL) {
        int g = plan_dev_group(p, d, in);
        args[na++] = (viz_trace_arg){"bytes", NULL, (double)in->bytes};
        args[na++] = (viz_trace_arg){"group", NULL, g};
        args[na++] = (viz_trace_arg){"members", NULL, p->groups[g].n};
    } else {
        double bytes = 0;
        for (int k = 0; k < n; k++) {
            bytes += (double)L->ins[at[k]].bytes;
            if (k == 0) continue;
            if (len >= 0 && (size_t)len < sizeof name - 4) {
                int more = viz_trace_instr_name(p, d, &L->ins[at[k]], name + len + 3, sizeof name - (size_t)len - 3);
                memcpy(name + len, " + ", 3);
                len += 3 + more;
            }
        }
        if (n > 1) args[na++] = (viz_trace_arg){"ops", NULL, n};
        args[na++] = (viz_trace_arg){"bytes", NULL, bytes};
        if (n == 1) args[na++] = (viz_trace_arg){"peer", NULL, plan_dev_peer(p, d, in)};
    }
    int64_t a = to_ns(t0), b = to_ns(simgrid_get_clock());
    if (in->op != PLAN_COMPUTE) {
        /* in the trace's own resolution, so that wait_us never exceeds dur after rounding */
        int64_t m = to_ns(moving_at);
        m = m < a ? a : m > b ? b : m;
        args[na++] = (viz_trace_arg){"wait_us", NULL, (double)(m - a) / 1e3};
    }
    viz_trace_complete(sim_replay_state->trace, d, s, name, viz_trace_instr_cat(in), a, b - a, args, na);
    /* folded replicas did the same at the same time, with their own peers and groups */
    for (int k = 1; k < sim_replay_state->fold.replicas; k++) {
        int dk = d + k * sim_replay_state->fold.shift;
        len = viz_trace_instr_name(p, dk, in, name, sizeof name);
        for (int j = 1; j < n && len >= 0 && (size_t)len < sizeof name - 4; j++) {
            int more = viz_trace_instr_name(p, dk, &L->ins[at[j]], name + len + 3, sizeof name - (size_t)len - 3);
            memcpy(name + len, " + ", 3);
            len += 3 + more;
        }
        for (int q = 0; q < na; q++) {
            if (!strcmp(args[q].key, "peer")) args[q].num = plan_dev_peer(p, dk, in);
            if (!strcmp(args[q].key, "group")) args[q].num = plan_dev_group(p, dk, in);
        }
        viz_trace_complete(sim_replay_state->trace, dk, s, name, viz_trace_instr_cat(in), a, b - a, args, na);
    }
}

/* Folded replicas: replica k of device d is d + k * shift, and its transfers are numbered apart
 * (flow x replicas + k), so every flow id names one transfer. */
void sim_trace_flow(int d, int s, int64_t flow, int finish, double at)
{
    if (flow < 0) return;
    int R = sim_replay_state->fold.replicas > 1 ? sim_replay_state->fold.replicas : 1;
    for (int k = 0; k < R; k++)
        viz_trace_flow(sim_replay_state->trace, d + k * sim_replay_state->fold.shift, s, flow * R + k, finish, to_ns(at));
}

static void write_memory(int d)
{
    int R = sim_replay_state->fold.replicas > 1 ? sim_replay_state->fold.replicas : 1;
    for (int k = 0; k < R; k++)
        viz_trace_counter(sim_replay_state->trace, d + k * sim_replay_state->fold.shift, "memory", "bytes",
                          sim_replay_state->mem_ts[d], sim_replay_state->mem_bytes[d]);
    sim_replay_state->mem_ts[d] = -1;
}

/* Allocations come in bursts at one instant (a step's start allocates every parameter): only the
 * instant's last value is a sample worth a record. */
void sim_trace_memory(int d, double bytes)
{
    sim_state *st = sim_replay_state;
    if (!st->mem_ts) return;
    int64_t now = to_ns(simgrid_get_clock());
    if (st->mem_ts[d] >= 0 && st->mem_ts[d] != now) write_memory(d);
    st->mem_ts[d] = now;
    st->mem_bytes[d] = bytes;
}

void sim_trace_finish(const plan_set *p)
{
    sim_state *st = sim_replay_state;
    if (!st->mem_ts) return;
    for (int d = 0; d < p->ndevices; d++)
        if (st->mem_ts[d] >= 0) write_memory(d);
    free(st->mem_ts);
    free(st->mem_bytes);
    st->mem_ts = NULL;
    st->mem_bytes = NULL;
}

void sim_trace_names(const plan_set *p)
{
    char name[32];
    sim_replay_state->mem_ts = base_xmalloc(((size_t)p->ndevices + 1) * sizeof *sim_replay_state->mem_ts);
    sim_replay_state->mem_bytes = base_xcalloc((size_t)p->ndevices + 1, sizeof *sim_replay_state->mem_bytes);
    for (int d = 0; d < p->ndevices; d++) sim_replay_state->mem_ts[d] = -1;
    for (int d = 0; d < p->ndevices; d++) {
        snprintf(name, sizeof name, "GPU %d", d);
        viz_trace_process(sim_replay_state->trace, d, name);
        const plan_list *L = plan_dev_list(p, d);
        for (int s = 0; s < L->nstreams; s++) viz_trace_thread(sim_replay_state->trace, d, s, L->streams[s] ? L->streams[s] : "?");
    }
}
