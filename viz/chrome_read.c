/* chrome_read.c — reads the Chrome trace JSON that piper writes (viz/trace.h, used by piper-sim
 * and piper-exec) so that `piper-viz timeline` can draw it: complete events ("ph": "X", ts and dur
 * in microseconds, one pid per GPU, one tid per stream) and the metadata events that name
 * processes and threads. The JSON itself goes through ir/doc's strict reader, so a malformed
 * trace fails with file:line:col like every other input of piper. */
#include "viz_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    int64_t sort;
    bool has_sort;
} proc_meta;

typedef struct reader {
    viz_chrome *t;
    base_error *e;
    BASE_VEC(viz_chrome_lane) lanes;
    BASE_VEC(viz_chrome_event) events;
    BASE_VEC(proc_meta) procs;
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
    viz_chrome_lane l = {pid, tid, NULL, NULL, pid, tid, 0};
    r->slot[s] = (int32_t)r->lanes.n;
    BASE_VEC_PUSH(r->lanes, l);
    return r->slot[s];
}

static proc_meta *proc_of(reader *r, int64_t pid)
{
    for (size_t i = 0; i < r->procs.n; i++)
        if (r->procs.v[i].pid == pid) return &r->procs.v[i];
    BASE_VEC_PUSH(r->procs, ((proc_meta){pid, NULL, pid, false}));
    return &r->procs.v[r->procs.n - 1];
}

static int get_int(reader *r, const ir_doc *ev, const char *key, int64_t *out)
{
    const ir_doc *v = ir_doc_get(ev, key);
    if (!v) return ir_doc_error(ev, r->e, "this event has no '%s'; every event piper reads names its GPU (pid) and "
                                "stream (tid)", key);
    return ir_doc_int(v, key, out, r->e);
}

static int metadata(reader *r, const ir_doc *ev)
{
    const char *what = NULL;
    const ir_doc *name = ir_doc_get(ev, "name"), *args = ir_doc_get(ev, "args");
    if (!name || ir_doc_string(name, "name", &what, r->e)) return name ? -1 : 0;
    bool proc = !strcmp(what, "process_name") || !strcmp(what, "process_sort_index");
    bool thread = !strcmp(what, "thread_name") || !strcmp(what, "thread_sort_index");
    if (!proc && !thread) return 0; /* other metadata (process_labels, ...) says nothing about lanes */
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

static int complete_event(reader *r, const ir_doc *ev)
{
    int64_t pid, tid;
    double ts, dur = 0;
    const ir_doc *v;
    if (get_int(r, ev, "pid", &pid) || get_int(r, ev, "tid", &tid)) return -1;
    if (!(v = ir_doc_get(ev, "ts"))) return ir_doc_error(ev, r->e, "this X event has no 'ts'; give its start in microseconds");
    if (ir_doc_num(v, "ts", &ts, r->e)) return -1;
    if ((v = ir_doc_get(ev, "dur")) && ir_doc_num(v, "dur", &dur, r->e)) return -1;
    if (!(dur >= 0)) return ir_doc_error(v, r->e, "dur is %g; a complete event lasts zero or more microseconds", dur);
    viz_chrome_event x = {ts, dur, lane_of(r, pid, tid), NULL, NULL};
    if ((v = ir_doc_get(ev, "name")) && ir_doc_string(v, "name", &x.name, r->e)) return -1;
    if ((v = ir_doc_get(ev, "cat")) && ir_doc_string(v, "cat", &x.cat, r->e)) return -1;
    r->lanes.v[x.lane].nevents++;
    BASE_VEC_PUSH(r->events, x);
    return 0;
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

static int read_events(reader *r, const ir_doc *seq)
{
    for (int i = 0; i < seq->n; i++) {
        const ir_doc *ev = seq->items[i];
        if (ev->kind != IR_DOC_MAP)
            return ir_doc_error(ev, r->e, "a trace event must be an object like {\"ph\": \"X\", \"ts\": ..., \"dur\": ..., "
                                "\"pid\": ..., \"tid\": ...}");
        const ir_doc *ph = ir_doc_get(ev, "ph");
        const char *p = NULL;
        if (!ph) return ir_doc_error(ev, r->e, "this event has no 'ph' (phase); piper reads \"X\" and \"M\" events");
        if (ir_doc_string(ph, "ph", &p, r->e)) return -1;
        int rc = !strcmp(p, "X") ? complete_event(r, ev) : !strcmp(p, "M") ? metadata(r, ev) : (r->t->skipped++, 0);
        if (rc) return rc;
    }
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
                    ln->process = r.procs.v[q].name;
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
        for (size_t i = 0; i < r.events.n; i++) {
            t->events[i] = r.events.v[i];
            t->events[i].lane = where[r.events.v[i].lane];
            /* compared in whole nanoseconds, the resolution piper's writer prints (three decimals
             * of a microsecond): 12.015 + 44.395 is not 56.41 in binary floating point */
            const viz_chrome_event *a = &r.events.v[i - (i > 0)], *b = &r.events.v[i];
            if (i > 0 && a->lane == b->lane && llround(b->ts * 1e3) < llround(a->ts * 1e3) + llround(a->dur * 1e3))
                t->overlaps++;
        }
        free(where);
        free(perm);
    }
    free(r.lanes.v);
    free(r.events.v);
    free(r.procs.v);
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
