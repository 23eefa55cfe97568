/* trace.c — piper-exec --trace: what each rank's interpreter ran, as the Chrome trace piper-sim
 * writes (viz/trace.h): one process per rank (pid = device), one thread per stream (tid = the
 * stream's index in the device's list), an "X" event per compute, collective, transfer and
 * sendrecv group, named by viz_trace_instr_name as the simulator names them. Each rank records
 * its events in memory (the interpreter's observer) on a clock shared through rank 0's start
 * time; at the end rank 0 gathers them and writes the file. A stream runs one thing at a time and
 * times are rounded monotonically to nanoseconds, so events on one thread never overlap. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../viz/trace.h"
#include "cpu_exec.h"

enum { EV_FIELDS = 6 }; /* stream, first instruction, members, step, start, end (doubles) */

void exec_cpu_trace_init(exec_cpu_trace *t, exec_cpu *c)
{
    memset(t, 0, sizeof *t);
    t->c = c;
    t->t0 = exec_now();
    /* one clock: rank 0's start (the ranks share the host's monotonic clock) */
    MPI_Bcast(&t->t0, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
}

void exec_cpu_trace_observer(void *ctx, int stream, const int *instrs, int n, double a, double b)
{
    exec_cpu_trace *t = ctx;
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 1024;
        double *v = base_xcalloc((size_t)t->cap * EV_FIELDS, sizeof *v);
        if (t->n) memcpy(v, t->ev, (size_t)t->n * EV_FIELDS * sizeof *v);
        free(t->ev);
        t->ev = v;
    }
    double *v = t->ev + t->n++ * EV_FIELDS;
    v[0] = stream;
    v[1] = instrs[0];
    v[2] = n;
    v[3] = (double)t->c->step;
    v[4] = a - t->t0;
    v[5] = b - t->t0;
}

static int64_t to_ns(double s) { return (int64_t)llround(s * 1e9); }

/* one event of device d (its list L): the name of the first member, then " + " and the others
 * (the stream's next n - 1 instructions) */
static void write_event(viz_trace *tr, const plan_set *p, int d, const double *v)
{
    const plan_list *L = plan_dev_list(p, d);
    int s = (int)v[0], i = (int)v[1], n = (int)v[2];
    if (i < 0 || i >= L->n) return;
    const plan_instr *in = &L->ins[i];
    char name[512];
    int len = viz_trace_instr_name(p, d, in, name, sizeof name);
    viz_trace_arg args[4];
    int na = 0;
    args[na++] = (viz_trace_arg){"step", NULL, v[3]};
    if (in->op == PLAN_COMPUTE) {
        if (in->stage >= 0) args[na++] = (viz_trace_arg){"stage", NULL, in->stage};
        if (in->mb >= 0) args[na++] = (viz_trace_arg){"mb", NULL, in->mb};
    } else if (in->op == PLAN_COLL) {
        int g = plan_dev_group(p, d, in);
        args[na++] = (viz_trace_arg){"bytes", NULL, (double)in->bytes};
        args[na++] = (viz_trace_arg){"group", NULL, g};
    } else {
        double bytes = 0;
        for (int k = 0, j = i; k < n && j < L->n; j++) {
            if (L->ins[j].stream != s) continue;
            bytes += (double)L->ins[j].bytes;
            if (k++ == 0 || len < 0 || (size_t)len >= sizeof name - 4) continue;
            int more = viz_trace_instr_name(p, d, &L->ins[j], name + len + 3, sizeof name - (size_t)len - 3);
            memcpy(name + len, " + ", 3);
            len += 3 + more;
        }
        if (n > 1) args[na++] = (viz_trace_arg){"ops", NULL, n};
        args[na++] = (viz_trace_arg){"bytes", NULL, bytes};
    }
    int64_t a = to_ns(v[4]), b = to_ns(v[5]);
    viz_trace_complete(tr, d, s, name, viz_trace_instr_cat(in), a, b - a, args, na);
}

int exec_cpu_trace_write(exec_cpu_trace *t, const char *path, base_error *e)
{
    exec_cpu *c = t->c;
    const plan_set *p = c->p;
    int rank = c->dev, size = c->world;
    int mine = (int)(t->n * EV_FIELDS);
    int *counts = rank == 0 ? base_xcalloc((size_t)size, sizeof *counts) : NULL;
    int *displs = rank == 0 ? base_xcalloc((size_t)size, sizeof *displs) : NULL;
    MPI_Request r;
    MPI_Igather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD, &r);
    if (exec_cpu_wait(c, &r, "gathering the trace's sizes", e)) return -1;
    int64_t total = 0;
    if (rank == 0)
        for (int k = 0; k < size; k++) {
            displs[k] = (int)total;
            total += counts[k];
        }
    if (total > INT32_MAX) return base_errorf(e, "the trace has too many events to gather; trace fewer steps");
    double *all = rank == 0 ? base_xcalloc((size_t)(total ? total : 1), sizeof *all) : NULL;
    MPI_Igatherv(t->ev, mine, MPI_DOUBLE, all, counts, displs, MPI_DOUBLE, 0, MPI_COMM_WORLD, &r);
    int rc = exec_cpu_wait(c, &r, "gathering the trace", e);
    if (!rc && rank == 0) {
        viz_trace tr;
        rc = viz_trace_open(&tr, path, e);
        if (!rc) {
            char name[64];
            for (int d = 0; d < size; d++) {
                snprintf(name, sizeof name, "rank %d (device %d)", d, d);
                viz_trace_process(&tr, d, name);
                const plan_list *L = plan_dev_list(p, d);
                for (int s = 0; s < L->nstreams; s++)
                    viz_trace_thread(&tr, d, s, L->streams[s] ? L->streams[s] : "?");
            }
            for (int d = 0; d < size; d++)
                for (int k = 0; k < counts[d]; k += EV_FIELDS) write_event(&tr, p, d, all + displs[d] + k);
            rc = viz_trace_close(&tr, e);
        }
    }
    free(all);
    free(counts);
    free(displs);
    return rc;
}

void exec_cpu_trace_free(exec_cpu_trace *t)
{
    free(t->ev);
    t->ev = NULL;
    t->n = t->cap = 0;
}
