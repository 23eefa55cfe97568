/* chrome_read.c — reads Chrome trace JSON so that `piper-viz timeline` can draw it: piper's own
 * (viz/trace.h, written by piper-sim and piper-exec: one pid per GPU, one tid per stream) and the
 * profilers' (PyTorch's Kineto: CPU ops on process/thread ids, kernels and copies on device/stream
 * ids; Nsight Systems' Chrome export: string pids and tids). Complete events ("X") and B/E pairs
 * become events of a lane per (pid, tid), nested events get the depth of their nesting, "M"
 * metadata names lanes, and every time is rebased to the first event (profilers write the epoch's
 * microseconds). The JSON itself goes through ir/doc's strict reader, so a malformed trace fails
 * with file:line:col like every other input of piper. */
#include "viz_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------------- categories */

/* What an event's category says it is, first match wins (case-insensitive substrings): Kineto's
 * categories, then Nsight's export, then piper's own (which say nothing more than PIPER). */
static const struct {
    const char *word;
    viz_event_kind kind;
} CATEGORIES[] = {
    {"gpu_user_annotation", VIZ_EV_GPU_ANNOT},
    {"user_annotation", VIZ_EV_CPU_ANNOT},
    {"nvtx", VIZ_EV_CPU_ANNOT},
    {"kernel", VIZ_EV_KERNEL},
    {"memcpy", VIZ_EV_GPU_MEM},
    {"memset", VIZ_EV_GPU_MEM},
    {"cpu_op", VIZ_EV_CPU},
    {"python", VIZ_EV_CPU},
    {"cuda_runtime", VIZ_EV_CPU},
    {"cuda_driver", VIZ_EV_CPU},
    {"cuda_api", VIZ_EV_CPU},
};

viz_event_kind viz_event_kind_of(const char *cat)
{
    if (!cat) return VIZ_EV_PIPER;
    for (size_t i = 0; i < BASE_COUNT(CATEGORIES); i++) {
        size_t n = strlen(CATEGORIES[i].word);
        for (const char *p = cat; *p; p++)
            if (!strncasecmp(p, CATEGORIES[i].word, n)) return CATEGORIES[i].kind;
    }
    return VIZ_EV_PIPER;
}

bool viz_event_kind_on_device(viz_event_kind k)
{
    return k == VIZ_EV_KERNEL || k == VIZ_EV_GPU_MEM || k == VIZ_EV_GPU_ANNOT;
}

/* ---------------------------------------------------------------- reading */

void viz_chrome_init(viz_chrome *t)
{
    memset(t, 0, sizeof *t);
    base_arena_init(&t->arena);
}

void viz_chrome_free(viz_chrome *t)
{
    base_arena_free(&t->arena);
    memset(t, 0, sizeof *t);
}

typedef struct proc_meta {
    int64_t pid;
    const char *name;
    const char *labels;   /* process_labels (Kineto: "GPU 0", "CPU") */
    int64_t sort;
    bool has_sort;
} proc_meta;

/* A B event waiting for its E: the event it became, and where it was written (for the error
 * when nothing closes it). */
typedef struct open_b {
    int32_t event;
    const ir_doc *doc;
} open_b;

/* String pids and tids (Nsight's export: "Device 0", "Stream 7") get ids above every integer
 * a trace plausibly uses, in order of first appearance, and keep the string as the lane's name. */
#define STRING_ID_BASE ((int64_t)1 << 48)

typedef struct reader {
    viz_chrome *t;
    base_error *e;
    BASE_VEC(viz_chrome_lane) lanes;
    BASE_VEC(viz_chrome_event) events;
    BASE_VEC(proc_meta) procs;
    BASE_VEC(open_b) open;          /* B events not yet closed, in the order they began */
    BASE_VEC(const char *) strings; /* string ids: index + STRING_ID_BASE */
    BASE_VEC(viz_chrome_counter) counters;
    int32_t *slot;                  /* (pid, tid) -> lane: open addressing */
    size_t cap;
} reader;

static uint64_t mix(int64_t pid, int64_t tid)
{
    uint64_t h = (uint64_t)pid * 0x9e3779b97f4a7c15ull ^ ((uint64_t)tid + 0x632be59bd9b4e019ull);
    h ^= h >> 29;
    return h * 0xbf58476d1ce4e5b9ull;
}

static int lane_of(reader *r, int64_t pid, int64_t tid)
{
    if (2 * (r->lanes.n + 1) > r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 64;
        int32_t *slot = base_xmalloc(cap * sizeof *slot);
        memset(slot, 0xff, cap * sizeof *slot);
        for (size_t i = 0; i < r->lanes.n; i++) {
            size_t s = (size_t)mix(r->lanes.v[i].pid, r->lanes.v[i].tid) & (cap - 1);
            while (slot[s] >= 0) s = (s + 1) & (cap - 1);
            slot[s] = (int32_t)i;
        }
        free(r->slot);
        r->slot = slot;
        r->cap = cap;
    }
    size_t s = (size_t)mix(pid, tid) & (r->cap - 1);
    while (r->slot[s] >= 0) {
        const viz_chrome_lane *l = &r->lanes.v[r->slot[s]];
        if (l->pid == pid && l->tid == tid) return r->slot[s];
        s = (s + 1) & (r->cap - 1);
    }
    viz_chrome_lane l = {pid, tid, NULL, NULL, pid, tid, 0, 0, false};
    r->slot[s] = (int32_t)r->lanes.n;
    BASE_VEC_PUSH(r->lanes, l);
    return r->slot[s];
}

static proc_meta *proc_of(reader *r, int64_t pid)
{
    for (size_t i = 0; i < r->procs.n; i++)
        if (r->procs.v[i].pid == pid) return &r->procs.v[i];
    BASE_VEC_PUSH(r->procs, ((proc_meta){pid, NULL, NULL, pid, false}));
    return &r->procs.v[r->procs.n - 1];
}

/* A pid or tid: an integer, or a string (a name) that gets an id of its own; *str is the string
 * (NULL for integers). */
static int get_id(reader *r, const ir_doc *ev, const char *key, int64_t *out, const char **str)
{
    const ir_doc *v = ir_doc_get(ev, key);
    *str = NULL;
    if (!v) return ir_doc_error(ev, r->e, "this event has no '%s'; every event piper reads names its process or GPU "
                                "(pid) and its thread or stream (tid)", key);
    if (v->kind == IR_DOC_SCALAR && v->quoted && v->str && *v->str) {
        char *end;
        long long n = strtoll(v->str, &end, 10);
        if (!*end) {
            *out = n;
            return 0;
        }
        for (size_t i = 0; i < r->strings.n; i++)
            if (!strcmp(r->strings.v[i], v->str)) {
                *out = STRING_ID_BASE + (int64_t)i, *str = v->str;
                return 0;
            }
        BASE_VEC_PUSH(r->strings, v->str);
        *out = STRING_ID_BASE + (int64_t)r->strings.n - 1, *str = v->str;
        return 0;
    }
    if (v->kind != IR_DOC_SCALAR || v->null)
        return ir_doc_error(v, r->e, "'%s' must be an integer or a string (a process or thread id)", key);
    return ir_doc_int(v, key, out, r->e);
}

static int get_int(reader *r, const ir_doc *ev, const char *key, int64_t *out)
{
    const char *str;
    return get_id(r, ev, key, out, &str);
}

/* The lane of an event, named after its string pid or tid until metadata names it. */
static int event_lane(reader *r, const ir_doc *ev, int *lane)
{
    int64_t pid, tid;
    const char *ps, *ts;
    if (get_id(r, ev, "pid", &pid, &ps) || get_id(r, ev, "tid", &tid, &ts)) return -1;
    *lane = lane_of(r, pid, tid);
    if (ts && !r->lanes.v[*lane].thread) r->lanes.v[*lane].thread = ts;
    if (ps) {
        proc_meta *m = proc_of(r, pid);
        if (!m->name) m->name = ps;
    }
    return 0;
}

static int metadata(reader *r, const ir_doc *ev)
{
    const char *what = NULL;
    const ir_doc *name = ir_doc_get(ev, "name"), *args = ir_doc_get(ev, "args");
    if (!name || ir_doc_string(name, "name", &what, r->e)) return name ? -1 : 0;
    bool proc = !strcmp(what, "process_name") || !strcmp(what, "process_sort_index");
    bool thread = !strcmp(what, "thread_name") || !strcmp(what, "thread_sort_index");
    if (!strcmp(what, "process_labels")) {
        /* Kineto names every process after the program ("python3") and says in its labels which
         * is a GPU: "python3 (GPU 0)" */
        int64_t pid;
        const ir_doc *v = ir_doc_get(args, "labels");
        const char *s = NULL;
        if (!v || v->kind != IR_DOC_SCALAR) return 0;
        if (get_int(r, ev, "pid", &pid) || ir_doc_string(v, "labels", &s, r->e)) return -1;
        if (*s) proc_of(r, pid)->labels = s;
        return 0;
    }
    if (!proc && !thread) return 0; /* other metadata says nothing about lanes */
    int64_t pid, tid = 0;
    if (get_int(r, ev, "pid", &pid) || (thread && get_int(r, ev, "tid", &tid))) return -1;
    if (!args || args->kind != IR_DOC_MAP)
        return ir_doc_error(ev, r->e, "metadata event '%s' has no args map; write args: {name: ...} or {sort_index: ...}",
                            what);
    bool is_name = !strcmp(what, "process_name") || !strcmp(what, "thread_name");
    const ir_doc *v = ir_doc_get(args, is_name ? "name" : "sort_index");
    if (!v) return ir_doc_error(args, r->e, "metadata event '%s' needs args.%s", what, is_name ? "name" : "sort_index");
    const char *s = NULL;
    int64_t k = 0;
    if (is_name ? ir_doc_string(v, "name", &s, r->e) : ir_doc_int(v, "sort_index", &k, r->e)) return -1;
    if (proc) {
        proc_meta *m = proc_of(r, pid);
        if (is_name) m->name = s;
        else m->sort = k, m->has_sort = true;
    } else {
        int l = lane_of(r, pid, tid);
        if (is_name) r->lanes.v[l].thread = s;
        else r->lanes.v[l].tsort = k;
    }
    return 0;
}

/* The fields every drawn event has: name, category, wait. */
static int event_fields(reader *r, const ir_doc *ev, viz_chrome_event *x)
{
    const ir_doc *v;
    if ((v = ir_doc_get(ev, "name")) && ir_doc_string(v, "name", &x->name, r->e)) return -1;
    if ((v = ir_doc_get(ev, "cat")) && ir_doc_string(v, "cat", &x->cat, r->e)) return -1;
    x->kind = (uint8_t)viz_event_kind_of(x->cat);
    const ir_doc *args = ir_doc_get(ev, "args");
    if ((v = ir_doc_get(args, "wait_us"))) {
        if (ir_doc_num(v, "wait_us", &x->wait, r->e)) return -1;
        if (!(x->wait >= 0)) return ir_doc_error(v, r->e, "wait_us is %g; the time spent waiting is zero or more "
                                                 "microseconds", x->wait);
    }
    return 0;
}

static int get_ts(reader *r, const ir_doc *ev, const char *ph, double *ts)
{
    const ir_doc *v = ir_doc_get(ev, "ts");
    if (!v) return ir_doc_error(ev, r->e, "this %s event has no 'ts'; give its start in microseconds", ph);
    if (ir_doc_num(v, "ts", ts, r->e)) return -1;
    /* times are compared in whole nanoseconds (int64): 9e15 us is 285 years after the epoch */
    if (!isfinite(*ts) || fabs(*ts) > 9e15)
        return ir_doc_error(v, r->e, "ts is %g; give microseconds since the trace's clock started (at most 9e15)", *ts);
    return 0;
}

static int complete_event(reader *r, const ir_doc *ev)
{
    double ts, dur = 0;
    const ir_doc *v;
    viz_chrome_event x = {0};
    if (event_lane(r, ev, &x.lane) || get_ts(r, ev, "X", &ts)) return -1;
    /* a missing dur (or null, as some exporters write) is an instant drawn as a hairline */
    if ((v = ir_doc_get(ev, "dur")) && !(v->kind == IR_DOC_SCALAR && v->null) && ir_doc_num(v, "dur", &dur, r->e))
        return -1;
    if (!(dur >= 0) || !(dur <= 9e15))
        return ir_doc_error(v, r->e, "dur is %g; a complete event lasts zero or more microseconds", dur);
    x.ts = ts, x.dur = dur;
    if (event_fields(r, ev, &x)) return -1;
    if (x.wait > dur) return ir_doc_error(ir_doc_get(ir_doc_get(ev, "args"), "wait_us"), r->e, "wait_us is %g but the "
                                          "event lasts %g us; it cannot wait longer than it lasts", x.wait, dur);
    r->lanes.v[x.lane].nevents++;
    BASE_VEC_PUSH(r->events, x);
    return 0;
}

/* "C": one sample per numeric arg. */
static int counter_event(reader *r, const ir_doc *ev)
{
    int64_t pid;
    const char *ps, *name = "counter";
    double ts;
    const ir_doc *v, *args = ir_doc_get(ev, "args");
    if (get_id(r, ev, "pid", &pid, &ps) || get_ts(r, ev, "C", &ts)) return -1;
    if ((v = ir_doc_get(ev, "name")) && ir_doc_string(v, "name", &name, r->e)) return -1;
    if (!args || args->kind != IR_DOC_MAP)
        return ir_doc_error(ev, r->e, "this C (counter) event has no args map; write args: {\"bytes\": ...}");
    for (int k = 0; k < args->n; k++) {
        viz_chrome_counter c = {pid, name, ts, 0, (int32_t)r->counters.n};
        if (ir_doc_num(args->items[k], args->keys[k]->str, &c.value, r->e)) return -1;
        if (args->n > 1) {
            size_t n = strlen(name) + strlen(args->keys[k]->str) + 2;
            char *both = base_arena_alloc(&r->t->arena, n);
            snprintf(both, n, "%s %s", name, args->keys[k]->str);
            c.name = both;
        }
        BASE_VEC_PUSH(r->counters, c);
    }
    return 0;
}

/* "B" opens an event of its thread; "E" closes the latest open one of the same thread. */
static int begin_end_event(reader *r, const ir_doc *ev, bool begin)
{
    double ts;
    int lane;
    if (event_lane(r, ev, &lane) || get_ts(r, ev, begin ? "B" : "E", &ts)) return -1;
    if (begin) {
        viz_chrome_event x = {0};
        x.ts = ts, x.lane = lane;
        if (event_fields(r, ev, &x)) return -1;
        r->lanes.v[lane].nevents++;
        BASE_VEC_PUSH(r->events, x);
        BASE_VEC_PUSH(r->open, ((open_b){(int32_t)r->events.n - 1, ev}));
        return 0;
    }
    for (size_t k = r->open.n; k-- > 0;) {
        viz_chrome_event *x = &r->events.v[r->open.v[k].event];
        if (x->lane != lane) continue;
        if (ts < x->ts)
            return ir_doc_error(ev, r->e, "this E event (ts %.17g) ends before the B event it closes begins (ts %.17g, "
                                "line %d); an E closes the latest open B of its pid and tid", ts, x->ts,
                                r->open.v[k].doc->line);
        x->dur = ts - x->ts;
        memmove(&r->open.v[k], &r->open.v[k + 1], (r->open.n - k - 1) * sizeof *r->open.v);
        r->open.n--;
        return 0;
    }
    return ir_doc_error(ev, r->e, "this E event closes nothing: no B event is open on its pid and tid; every E "
                        "ends the latest B of its thread");
}

static int cmp_lane(const void *a, const void *b)
{
    const viz_chrome_lane *x = a, *y = b;
#define BY(f) if (x->f != y->f) return (x->f > y->f) - (x->f < y->f)
    BY(psort);
    BY(pid);
    BY(tsort);
    BY(tid);
#undef BY
    return 0;
}

static const viz_chrome_lane *sort_lanes; /* qsort has no context argument */
static int cmp_event(const void *a, const void *b)
{
    const viz_chrome_event *x = a, *y = b;
    if (x->lane != y->lane) {
        int c = cmp_lane(&sort_lanes[x->lane], &sort_lanes[y->lane]);
        if (c) return c;
    }
    if (x->ts != y->ts) return (x->ts > y->ts) - (x->ts < y->ts);
    return (x->dur < y->dur) - (x->dur > y->dur); /* an enclosing event before what it encloses */
}

static int cmp_counter(const void *a, const void *b)
{
    const viz_chrome_counter *x = a, *y = b;
    if (x->pid != y->pid) return (x->pid > y->pid) - (x->pid < y->pid);
    int c = strcmp(x->name, y->name);
    if (c) return c;
    if (x->ts != y->ts) return (x->ts > y->ts) - (x->ts < y->ts);
    return (x->seq > y->seq) - (x->seq < y->seq);
}

static int read_events(reader *r, const ir_doc *seq)
{
    for (int i = 0; i < seq->n; i++) {
        const ir_doc *ev = seq->items[i];
        if (ev->kind != IR_DOC_MAP)
            return ir_doc_error(ev, r->e, "a trace event must be an object like {\"ph\": \"X\", \"ts\": ..., \"dur\": ..., "
                                "\"pid\": ..., \"tid\": ...}");
        const ir_doc *ph = ir_doc_get(ev, "ph");
        const char *p = NULL;
        if (!ph) return ir_doc_error(ev, r->e, "this event has no 'ph' (phase); piper reads \"X\", \"B\"/\"E\" and "
                                     "\"M\" events");
        if (ir_doc_string(ph, "ph", &p, r->e)) return -1;
        int rc = !strcmp(p, "X")   ? complete_event(r, ev)
                 : !strcmp(p, "B") ? begin_end_event(r, ev, true)
                 : !strcmp(p, "E") ? begin_end_event(r, ev, false)
                 : !strcmp(p, "M") ? metadata(r, ev)
                 : !strcmp(p, "C") ? counter_event(r, ev)
                                   : (r->t->skipped++, 0);
        if (rc) return rc;
    }
    if (r->open.n)
        return ir_doc_error(r->open.v[0].doc, r->e, "this B event is never closed: no E event follows it on its pid "
                            "and tid; end it with an E, or write one complete X event with a dur");
    return 0;
}

int viz_chrome_read(viz_chrome *t, const char *name, const char *text, size_t len, base_error *e)
{
    viz_chrome_init(t);
    ir_doc *doc = NULL;
    reader r = {.t = t, .e = e};
    int rc = ir_doc_parse(&t->arena, name, text, len, &doc, e);
    if (!rc) {
        const ir_doc *seq = doc;
        if (doc->kind == IR_DOC_MAP) {
            seq = ir_doc_get(doc, "traceEvents");
            if (!seq) rc = ir_doc_error(doc, e, "a trace object needs \"traceEvents\": [...]; or write a bare array of events");
        }
        if (!rc && seq->kind != IR_DOC_SEQ)
            rc = ir_doc_error(seq, e, "expected an array of trace events (the Chrome trace format's JSON array form)");
        if (!rc) rc = read_events(&r, seq);
    }
    if (!rc) {
        for (size_t l = 0; l < r.lanes.n; l++) {
            viz_chrome_lane *ln = &r.lanes.v[l];
            for (size_t q = 0; q < r.procs.n; q++)
                if (r.procs.v[q].pid == ln->pid) {
                    const proc_meta *m = &r.procs.v[q];
                    ln->process = m->name;
                    if (m->labels && (!m->name || strcmp(m->name, m->labels))) {
                        size_t n = (m->name ? strlen(m->name) : 0) + strlen(m->labels) + 4;
                        char *both = base_arena_alloc(&t->arena, n);
                        if (m->name) snprintf(both, n, "%s (%s)", m->name, m->labels);
                        else snprintf(both, n, "%s", m->labels);
                        ln->process = both;
                    }
                    if (r.procs.v[q].has_sort) ln->psort = r.procs.v[q].sort;
                }
        }
        /* sort events by their lane's final order, then lanes, then renumber the events' lanes */
        sort_lanes = r.lanes.v;
        if (r.events.n) qsort(r.events.v, r.events.n, sizeof *r.events.v, cmp_event);
        int32_t *where = base_xmalloc((r.lanes.n + 1) * sizeof *where);
        size_t *perm = base_xmalloc((r.lanes.n + 1) * sizeof *perm);
        for (size_t l = 0; l < r.lanes.n; l++) perm[l] = l;
        for (size_t i = 1; i < r.lanes.n; i++) /* insertion sort: stable, lanes are few */
            for (size_t j = i; j > 0 && cmp_lane(&r.lanes.v[perm[j - 1]], &r.lanes.v[perm[j]]) > 0; j--) {
                size_t x = perm[j];
                perm[j] = perm[j - 1];
                perm[j - 1] = x;
            }
        t->nlanes = (int)r.lanes.n;
        t->lanes = base_arena_alloc(&t->arena, (r.lanes.n + 1) * sizeof *t->lanes);
        for (size_t l = 0; l < r.lanes.n; l++) {
            t->lanes[l] = r.lanes.v[perm[l]];
            where[perm[l]] = (int32_t)l;
        }
        t->nevents = (int)r.events.n;
        t->events = base_arena_alloc(&t->arena, (r.events.n + 1) * sizeof *t->events);
        /* t = 0 at the first event or counter sample: profilers write microseconds since boot or
         * the epoch (5.9e9 and up), which no axis can label */
        double origin = INFINITY;
        for (size_t i = 0; i < r.events.n; i++)
            if (r.events.v[i].ts < origin) origin = r.events.v[i].ts;
        for (size_t i = 0; i < r.counters.n; i++)
            if (r.counters.v[i].ts < origin) origin = r.counters.v[i].ts;
        t->origin_us = r.events.n || r.counters.n ? origin : 0;
        /* Nesting per lane: the events that enclose the current one, as a stack of end times.
         * Compared in whole nanoseconds, the resolution piper's writer prints (three decimals of
         * a microsecond): 12.015 + 44.395 is not 56.41 in binary floating point. */
        int64_t *ends = base_xmalloc((r.events.n + 1) * sizeof *ends);
        int *ndev = base_xcalloc(r.lanes.n + 1, sizeof *ndev);
        int top = 0;
        for (size_t i = 0; i < r.events.n; i++) {
            viz_chrome_event *x = &t->events[i];
            *x = r.events.v[i];
            x->lane = where[r.events.v[i].lane];
            if (i == 0 || x->lane != t->events[i - 1].lane) top = 0;
            int64_t a = llround(x->ts * 1e3), b = a + llround(x->dur * 1e3);
            while (top > 0 && ends[top - 1] <= a) top--;
            if (top > 0 && b > ends[top - 1]) {
                /* starts inside the previous event and ends after it: neither nested nor after it;
                 * it takes that event's row */
                t->overlaps++;
                top--;
            }
            if (top > 0) t->nested++;
            x->depth = top;
            ends[top++] = b;
            viz_chrome_lane *ln = &t->lanes[x->lane];
            if (x->depth + 1 > ln->depth) ln->depth = x->depth + 1;
            ndev[x->lane] += viz_event_kind_on_device((viz_event_kind)x->kind);
            x->ts -= t->origin_us;
        }
        for (size_t l = 0; l < r.lanes.n; l++) t->lanes[l].device = 2 * ndev[l] > t->lanes[l].nevents;
        /* counters: rebased like the events, then by track and time */
        t->ncounters = (int)r.counters.n;
        t->counters = base_arena_alloc(&t->arena, (r.counters.n + 1) * sizeof *t->counters);
        for (size_t i = 0; i < r.counters.n; i++) {
            t->counters[i] = r.counters.v[i];
            t->counters[i].ts -= t->origin_us;
        }
        if (r.counters.n) qsort(t->counters, r.counters.n, sizeof *t->counters, cmp_counter);
        free(ends);
        free(ndev);
        free(where);
        free(perm);
    }
    free(r.lanes.v);
    free(r.events.v);
    free(r.procs.v);
    free(r.open.v);
    free(r.counters.v);
    free(r.strings.v);
    free(r.slot);
    if (rc) {
        viz_chrome_free(t);
        viz_chrome_init(t);
    }
    return rc;
}

int viz_chrome_read_file(viz_chrome *t, const char *path, base_error *e)
{
    base_buf b = {0};
    if (base_read_file_max(path, &b, BASE_READ_MAX_WRITTEN, e)) {
        viz_chrome_init(t);
        return -1;
    }
    int rc = viz_chrome_read(t, path, b.s ? b.s : "", b.n, e);
    free(b.s);
    return rc;
}
