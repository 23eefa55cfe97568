/* trace.c — the Chrome-trace JSON writer (viz/trace.h): one record per line, so that traces diff
 * and stream (a simulated step of a large cluster writes millions of events as they happen,
 * never holding them). */
#include "trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static void note_err(viz_trace *t, int rc)
{
    if (rc < 0 && !t->err) t->err = errno ? errno : EIO;
}

static void put_str(viz_trace *t, const char *s)
{
    FILE *f = t->f;
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
        if (*c == '"' || *c == '\\') fputc('\\', f), fputc(*c, f);
        else if (*c < 0x20) fprintf(f, "\\u%04x", *c);
        else fputc(*c, f);
    }
    note_err(t, fputc('"', f) == EOF ? -1 : 0);
}

/* Microseconds from integer nanoseconds, exactly: 1234567 -> 1234.567. */
static void put_us(viz_trace *t, int64_t ns)
{
    if (ns < 0) ns = 0;
    note_err(t, fprintf(t->f, "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000));
}

/* JSON has no inf or nan; -0 prints as 0. The shortest of 15, 16 and 17 digits that reads back
 * to the same double, so 12.345 is not 12.345000000000001. */
static void put_num(viz_trace *t, double v)
{
    if (v != v || v > 1.7e308 || v < -1.7e308) v = 0;
    if (v == 0) v = 0;
    char buf[40];
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) break;
    }
    note_err(t, fputs(buf, t->f));
}

static void begin_record(viz_trace *t)
{
    note_err(t, fputs(t->nrecords++ ? ",\n" : "\n", t->f));
}

int viz_trace_open(viz_trace *t, const char *path, base_error *e)
{
    memset(t, 0, sizeof *t);
    t->path = path;
    if (base_out_open(&t->out, path, "the trace", e)) return -1;
    t->f = t->out.f;
    note_err(t, fputs("{\"traceEvents\": [", t->f));
    return 0;
}

static void metadata(viz_trace *t, const char *what, int64_t pid, int64_t tid, const char *name, int64_t sort)
{
    for (int k = 0; k < 2; k++) {
        begin_record(t);
        fprintf(t->f, "{\"name\": \"%s_%s\", \"ph\": \"M\", \"pid\": %" PRId64, what, k ? "sort_index" : "name", pid);
        if (tid >= 0) fprintf(t->f, ", \"tid\": %" PRId64, tid);
        if (k) {
            note_err(t, fprintf(t->f, ", \"args\": {\"sort_index\": %" PRId64 "}}", sort));
        } else {
            fputs(", \"args\": {\"name\": ", t->f);
            put_str(t, name);
            note_err(t, fputs("}}", t->f));
        }
    }
}

void viz_trace_process(viz_trace *t, int64_t pid, const char *name)
{
    if (t->f) metadata(t, "process", pid, -1, name, pid);
}

void viz_trace_thread(viz_trace *t, int64_t pid, int64_t tid, const char *name)
{
    if (t->f) metadata(t, "thread", pid, tid < 0 ? 0 : tid, name, tid);
}

void viz_trace_complete(viz_trace *t, int64_t pid, int64_t tid, const char *name, const char *cat, int64_t ts_ns,
                        int64_t dur_ns, const viz_trace_arg *args, int nargs)
{
    if (!t->f) return;
    FILE *f = t->f;
    begin_record(t);
    fputs("{\"name\": ", f);
    put_str(t, name);
    fputs(", \"cat\": ", f);
    put_str(t, cat);
    fprintf(f, ", \"ph\": \"X\", \"pid\": %" PRId64 ", \"tid\": %" PRId64 ", \"ts\": ", pid, tid);
    put_us(t, ts_ns);
    fputs(", \"dur\": ", f);
    put_us(t, dur_ns);
    fputs(", \"args\": {", f);
    for (int i = 0; i < nargs; i++) {
        if (i) fputs(", ", f);
        put_str(t, args[i].key);
        fputs(": ", f);
        if (args[i].str) put_str(t, args[i].str);
        else put_num(t, args[i].num);
    }
    note_err(t, fputs("}}", f));
    t->nevents++;
}

void viz_trace_counter(viz_trace *t, int64_t pid, const char *name, const char *key, int64_t ts_ns, double value)
{
    if (!t->f) return;
    begin_record(t);
    fputs("{\"name\": ", t->f);
    put_str(t, name);
    fprintf(t->f, ", \"ph\": \"C\", \"pid\": %" PRId64 ", \"ts\": ", pid);
    put_us(t, ts_ns);
    fputs(", \"args\": {", t->f);
    put_str(t, key);
    fputs(": ", t->f);
    put_num(t, value);
    note_err(t, fputs("}}", t->f));
}

void viz_trace_flow(viz_trace *t, int64_t pid, int64_t tid, int64_t id, int finish, int64_t ts_ns)
{
    if (!t->f) return;
    begin_record(t);
    fprintf(t->f, "{\"name\": \"p2p\", \"cat\": \"p2p\", \"ph\": \"%s\", \"id\": %" PRId64 ", \"pid\": %" PRId64
                  ", \"tid\": %" PRId64 ", \"ts\": ", finish ? "f" : "s", id, pid, tid);
    put_us(t, ts_ns);
    note_err(t, fputs(finish ? ", \"bp\": \"e\"}" : "}", t->f));
}

int viz_trace_close(viz_trace *t, base_error *e)
{
    if (!t->f) return 0;
    note_err(t, fputs("\n],\n\"displayTimeUnit\": \"ms\"}\n", t->f));
    t->f = NULL;
    if (t->err) {
        base_out_abort(&t->out);
        return base_errorf(e, "%s: cannot write the trace (%s); free some disk space or choose another path",
                           t->path, strerror(t->err));
    }
    return base_out_commit(&t->out, e);
}

void viz_trace_abort(viz_trace *t)
{
    t->f = NULL;
    base_out_abort(&t->out);
}

/* ---------------------------------------------------------------- names of instructions */

const char *viz_trace_instr_cat(const plan_instr *in)
{
    switch (in->op) {
    case PLAN_COMPUTE: return "compute";
    case PLAN_SEND:
    case PLAN_RECV: return "p2p";
    case PLAN_COLL: return "coll";
    default: return NULL;
    }
}

int viz_trace_instr_name(const plan_set *p, int dev, const plan_instr *in, char *buf, size_t n)
{
    char mb[32] = "", bytes[32];
    if (in->mb >= 0) snprintf(mb, sizeof mb, " mb%d", in->mb);
    base_fmt_bytes((double)in->bytes, bytes, sizeof bytes);
    switch (in->op) {
    case PLAN_COMPUTE: {
        const char *region = in->region >= 0 && in->region < p->nregions ? p->regions[in->region] : NULL;
        return snprintf(buf, n, "%s%s%s%s", plan_pass_name((plan_pass)in->pass), region ? " " : "",
                        region ? region : "", mb);
    }
    case PLAN_SEND:
    case PLAN_RECV:
        return snprintf(buf, n, "%s%s %s %d, %s", in->op == PLAN_SEND ? "send" : "recv", mb,
                        in->op == PLAN_SEND ? "to" : "from", plan_dev_peer(p, dev, in), bytes);
    case PLAN_COLL: {
        int g = plan_dev_group(p, dev, in);
        const char *gname = g >= 0 && g < p->ngroups && p->groups[g].name ? p->groups[g].name : NULL;
        char gbuf[32];
        if (!gname) snprintf(gbuf, sizeof gbuf, "group %d", g), gname = gbuf;
        return snprintf(buf, n, "%s %s, %s", plan_coll_name((plan_coll)in->coll), gname, bytes);
    }
    default: return snprintf(buf, n, "%s", plan_op_name((plan_op)in->op));
    }
}
