/* timeline.c — `piper-viz timeline`: a Chrome trace (piper-sim's, piper-exec's, or a profiler's:
 * Kineto, Nsight Systems) as a figure: one lane per (process, thread) — for piper a GPU and a
 * stream — as many rows high as its events nest, boxes at their times, a time axis with units
 * from the first event, communication lanes shaded apart from compute lanes, a transfer's waiting
 * drawn apart from its moving data, optionally a window of the trace. The same palette as the
 * schedule grid, so a forward is the same blue in both. */
#include "viz_internal.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* "2ms", "1500us", "0.5 s", "300" (microseconds) -> microseconds. */
static int parse_time(const char *s, size_t n, double *us)
{
    char buf[64];
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *end;
    double v = strtod(buf, &end);
    if (end == buf || !isfinite(v)) return -1;
    while (*end == ' ') end++;
    double f = !*end ? 1 : !strcmp(end, "ns") ? 1e-3 : !strcmp(end, "us") || !strcmp(end, "\xc2\xb5s") ? 1
                   : !strcmp(end, "ms") ? 1e3 : !strcmp(end, "s") ? 1e6 : -1;
    if (f < 0) return -1;
    *us = v * f;
    return 0;
}

int viz_window_parse(const char *s, double *t0_us, double *t1_us, base_error *e)
{
    const char *colon = s ? strchr(s, ':') : NULL;
    *t0_us = -INFINITY, *t1_us = INFINITY;
    if (!colon || (colon == s && !colon[1]))
        return base_errorf(e, "--window '%s': expected START:END such as 2ms:3.5ms or 1500:2500 (microseconds); either "
                           "side may be left out", s ? s : "");
    if (colon > s && parse_time(s, (size_t)(colon - s), t0_us))
        return base_errorf(e, "--window '%s': '%.*s' is not a time; write a number with ns, us, ms or s (a bare number "
                           "is microseconds)", s, (int)(colon - s), s);
    if (colon[1] && parse_time(colon + 1, strlen(colon + 1), t1_us))
        return base_errorf(e, "--window '%s': '%s' is not a time; write a number with ns, us, ms or s (a bare number is "
                           "microseconds)", s, colon + 1);
    if (!(*t1_us > *t0_us)) return base_errorf(e, "--window '%s': the end must come after the start", s);
    return 0;
}

/* ---------------------------------------------------------------- classifying events */

static bool has_word(const char *s, const char *const *words)
{
    if (!s) return false;
    for (; *words; words++) {
        size_t n = strlen(*words);
        for (const char *p = s; *p; p++)
            if (!strncasecmp(p, *words, n)) return true;
    }
    return false;
}

static const char *const P2P_WORDS[] = {"p2p", "send", "recv", NULL};
static const char *const COLL_WORDS[] = {"coll", "nccl", "all_reduce", "allreduce", "reduce_scatter", "all_gather",
                                         "allgather", "all_to_all", "alltoall", "broadcast", NULL};
static const char *const COMM_WORDS[] = {"comm", "dp_reduce", "network", NULL};

/* An event's style: communication by category (else by name), compute by the pass its name
 * starts with ("F L3.attn mb2", "BW L0.mlp"). */
static const viz_style *event_style(const viz_chrome_event *ev, bool *comm)
{
    *comm = false;
    if (ev->kind != VIZ_EV_PIPER) return viz_kind_style(ev->kind);
    *comm = true;
    const char *c = ev->cat;
    if (c && *c) {
        if (has_word(c, P2P_WORDS)) return viz_comm_style(VIZ_COMM_P2P);
        if (has_word(c, COLL_WORDS)) return viz_comm_style(VIZ_COMM_COLL);
        if (has_word(c, COMM_WORDS)) return viz_comm_style(VIZ_COMM_OTHER);
    } else if (ev->name) {
        if (has_word(ev->name, P2P_WORDS)) return viz_comm_style(VIZ_COMM_P2P);
        if (has_word(ev->name, COLL_WORDS)) return viz_comm_style(VIZ_COMM_COLL);
    }
    *comm = false;
    if (ev->name) {
        size_t n = strcspn(ev->name, " .:_-/0123456789");
        int pass = viz_pass_from_name(ev->name, n);
        if (pass >= 0) return viz_pass_style(pass);
    }
    return viz_other_style();
}

/* A lane is a communication lane when its stream says so or most of its events are communication. */
static bool comm_lane(const viz_chrome *t, int l, const int *ncomm)
{
    const viz_chrome_lane *ln = &t->lanes[l];
    if (ln->device) return false; /* a profiler's GPU stream: its kernels are the work */
    if (ln->thread && (has_word(ln->thread, P2P_WORDS) || has_word(ln->thread, COLL_WORDS) ||
                       has_word(ln->thread, COMM_WORDS) || !strncasecmp(ln->thread, "pp", 2) ||
                       !strncasecmp(ln->thread, "dp", 2) || !strncasecmp(ln->thread, "tp", 2) ||
                       !strncasecmp(ln->thread, "ep", 2)))
        return true;
    return ln->nevents > 0 && 2 * ncomm[l] > ln->nevents;
}

/* ---------------------------------------------------------------- drawing */

#define LANE_H 0.24
#define LANE_PITCH 0.30
#define NEST_PITCH 0.20  /* each further row of nesting in a lane */
#define PROC_GAP 0.10
#define LABEL_W 1.6

static double text_pt(const char *s, double size) { return 0.62 * size * (double)strlen(s); }

/* Microseconds in the unit that suits the span: "ms" with factor 1e-3, ... */
static void pick_unit(double span_us, const char **unit, double *per_us)
{
    if (span_us >= 2e6) *unit = "s", *per_us = 1e-6;
    else if (span_us >= 2e3) *unit = "ms", *per_us = 1e-3;
    else if (span_us >= 2) *unit = "us", *per_us = 1;
    else *unit = "ns", *per_us = 1e3;
}

/* "GPU 0 · compute", "python3 (GPU 0) · stream 7": the lane's process and thread. */
static void lane_label(const viz_chrome_lane *ln, char *label, size_t n)
{
    char pname[64], tname[64];
    if (ln->process) snprintf(pname, sizeof pname, "%s", ln->process);
    else snprintf(pname, sizeof pname, "GPU %lld", (long long)ln->pid);
    if (ln->thread) snprintf(tname, sizeof tname, "%s", ln->thread);
    else snprintf(tname, sizeof tname, "stream %lld", (long long)ln->tid);
    snprintf(label, n, "%s \xc2\xb7 %s", pname, tname);
}

int viz_timeline(const viz_chrome *t, const viz_timeline_options *o, base_buf *dot, base_error *e)
{
    if (t->nlanes == 0)
        return base_errorf(e, "the trace has no complete (\"X\") events and names no threads, so there is nothing to "
                           "draw; write it with piper-sim --trace");
    if (t->overlaps)
        base_warn_at(e, NULL, 0, 0, "%d event%s start before the previous event of their stream ends; a stream runs one "
                     "thing at a time, and a profiler's nested events end inside what encloses them, so the trace's "
                     "writer is wrong (overlapping boxes are drawn on top of each other)", t->overlaps,
                     t->overlaps == 1 ? "" : "s");
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < t->nevents; i++) {
        if (t->events[i].ts < lo) lo = t->events[i].ts;
        if (t->events[i].ts + t->events[i].dur > hi) hi = t->events[i].ts + t->events[i].dur;
    }
    if (!(hi > lo)) lo = 0, hi = lo + 1;
    double t0 = lo, t1 = hi;
    if (o->window) {
        if (isfinite(o->t0_us)) t0 = o->t0_us;
        if (isfinite(o->t1_us)) t1 = o->t1_us;
        if (!(t1 > t0))
            return base_errorf(e, "--window: the window ends at %g us, before it starts (%g us); the trace spans %g to "
                               "%g us", t1, t0, lo, hi);
    }
    /* width: enough for the busiest lane's events in the window to be a few points wide each */
    int *nin = base_xcalloc((size_t)t->nlanes + 1, sizeof *nin), *ncomm = base_xcalloc((size_t)t->nlanes + 1, sizeof *ncomm);
    int busiest = 0;
    for (int i = 0; i < t->nevents; i++) {
        const viz_chrome_event *ev = &t->events[i];
        bool comm;
        event_style(ev, &comm);
        ncomm[ev->lane] += comm;
        if ((ev->dur > 0 && (ev->ts + ev->dur <= t0 || ev->ts >= t1)) || ev->ts + ev->dur < t0 || ev->ts > t1) continue;
        if (++nin[ev->lane] > busiest) busiest = nin[ev->lane];
    }
    double W = busiest * 0.12 * VIZ_PT;
    if (W < 8 * VIZ_PT) W = 8 * VIZ_PT;
    if (W > 60 * VIZ_PT) W = 60 * VIZ_PT;
    double scale = W / (t1 - t0); /* points per microsecond */
    /* the labels' column: wide enough for the longest (profilers' thread names are long), at
     * most 4 in */
    double label_w = LABEL_W;
    for (int l = 0; l < t->nlanes; l++) {
        char lb[160];
        lane_label(&t->lanes[l], lb, sizeof lb);
        double need = (text_pt(lb, 8) + 6) / VIZ_PT;
        if (need > label_w) label_w = need < 4 ? need : 4;
    }

    /* lanes from the top: y of each, with a gap between processes */
    /* ly: the centre of a lane's top row; lh: the lane's height (points) */
    double *ly = base_xmalloc(((size_t)t->nlanes + 1) * sizeof *ly), *lh = base_xmalloc(((size_t)t->nlanes + 1) * sizeof *lh);
    double y = 0, pitch = LANE_PITCH * VIZ_PT, nest = NEST_PITCH * VIZ_PT, bottom = 0;
    /* counter tracks (samples grouped by pid and name), each a lane under its process's last */
    typedef struct track {
        int64_t pid;
        const char *name, *process;
        int c0, c1;
        double peak, y;
        bool placed;
    } track;
    BASE_VEC(track) tracks = {0};
    for (int i = 0; i < t->ncounters; i++) {
        const viz_chrome_counter *c = &t->counters[i];
        if (!tracks.n || tracks.v[tracks.n - 1].pid != c->pid || strcmp(tracks.v[tracks.n - 1].name, c->name))
            BASE_VEC_PUSH(tracks, ((track){c->pid, c->name, NULL, i, i, 0, 0, false}));
        track *tr = &tracks.v[tracks.n - 1];
        tr->c1 = i + 1;
        if (c->value > tr->peak) tr->peak = c->value;
    }
    for (int l = 0; l < t->nlanes; l++) {
        int rows = t->lanes[l].depth > 1 ? t->lanes[l].depth : 1;
        if (l && t->lanes[l].pid != t->lanes[l - 1].pid) y -= PROC_GAP * VIZ_PT;
        ly[l] = y;
        lh[l] = LANE_H * VIZ_PT + (rows - 1) * nest;
        bottom = y - (rows - 1) * nest; /* the last lane's lowest row */
        y -= pitch + (rows - 1) * nest;
        if (l + 1 < t->nlanes && t->lanes[l + 1].pid == t->lanes[l].pid) continue;
        for (size_t q = 0; q < tracks.n; q++)
            if (tracks.v[q].pid == t->lanes[l].pid) {
                tracks.v[q].y = bottom = y, tracks.v[q].placed = true, tracks.v[q].process = t->lanes[l].process;
                y -= pitch;
            }
    }
    for (size_t q = 0; q < tracks.n; q++) /* processes with counters and no events */
        if (!tracks.v[q].placed) {
            if (!q || tracks.v[q - 1].pid != tracks.v[q].pid) y -= PROC_GAP * VIZ_PT;
            tracks.v[q].y = bottom = y;
            y -= pitch;
        }
    double top_y = 0.5 * VIZ_PT, axis_y = bottom - 0.35 * VIZ_PT, legend_y = axis_y - 0.62 * VIZ_PT;

    base_buf_puts(dot, "digraph timeline {\n");
    base_buf_printf(dot, "  graph [bgcolor=white, pad=0.2, fontname=\"%s\"];\n", VIZ_FONT);
    base_buf_printf(dot, "  node [fontname=\"%s\", fontsize=8];\n", VIZ_FONT);
    const char *unit;
    double per_us;
    pick_unit(t1 - t0, &unit, &per_us);
    char title[256], a[32], b[32];
    snprintf(a, sizeof a, "%.6g", t0 * per_us);
    snprintf(b, sizeof b, "%.6g", t1 * per_us);
    if (o->title) snprintf(title, sizeof title, "%s", o->title);
    else snprintf(title, sizeof title, "timeline: %d lanes, %s to %s %s", t->nlanes, a, b, unit);
    viz_dot_text(dot, "title", "title", W / 2, top_y, title, 11, 'c', 0, NULL);

    const viz_style *styles[16];
    int nstyles = 0;
    bool any_comm_lane = false;
    char name[64], id[96], label[160], tip[320];
    for (int l = 0, k = 0; l < t->nlanes; l++) {
        const viz_chrome_lane *ln = &t->lanes[l];
        bool cl = comm_lane(t, l, ncomm);
        any_comm_lane |= cl;
        lane_label(ln, label, sizeof label);
        snprintf(name, sizeof name, "lanelabel%d", l);
        snprintf(id, sizeof id, "label-%lld-%lld", (long long)ln->pid, (long long)ln->tid);
        viz_dot_text(dot, name, id, -6 - label_w * VIZ_PT / 2, ly[l], label, 8, 'r', label_w,
                     cl ? "fontcolor=\"#5a4a2a\"" : NULL);
        viz_style lane = {"lane", cl ? "#fdfaf2" : "#f2f2f2", "black", cl ? "dashed" : "", "lane"};
        snprintf(name, sizeof name, "lane%d", l);
        snprintf(id, sizeof id, "lane-%lld-%lld", (long long)ln->pid, (long long)ln->tid);
        viz_dot_box(dot, name, id, cl ? "lane comm" : "lane compute", W / 2, ly[l] - (lh[l] - LANE_H * VIZ_PT) / 2,
                    W / VIZ_PT, lh[l] / VIZ_PT, &lane, "", 8, "color=\"#c8c8c8\"");
        for (int j = 0; k < t->nevents && t->events[k].lane == l; k++, j++) {
            const viz_chrome_event *ev = &t->events[k];
            double s = ev->ts, f = ev->ts + ev->dur;
            if ((ev->dur > 0 && (f <= t0 || s >= t1)) || f < t0 || s > t1) continue;
            if (s < t0) s = t0;
            if (f > t1) f = t1;
            bool comm;
            const viz_style *st = event_style(ev, &comm);
            int si = 0;
            while (si < nstyles && styles[si] != st) si++;
            if (si == nstyles && nstyles < 16) styles[nstyles++] = st;
            /* a transfer's waiting for its partners first (light, dotted, class "wait"), then its
             * moving data (the event's box) */
            double moving = ev->ts + (ev->wait < ev->dur ? ev->wait : ev->dur), yr = ly[l] - ev->depth * nest;
            double h = ev->depth ? NEST_PITCH - 0.04 : LANE_H - 0.04;
            snprintf(tip, sizeof tip, "%s: %.6g us, %.6g us long", ev->name ? ev->name : "", ev->ts, ev->dur);
            if (ev->wait > 0 && comm) {
                double ws = s, wf = moving < f ? moving : f;
                if (wf > ws) {
                    const viz_style *wst = viz_wait_style(st == viz_comm_style(VIZ_COMM_COLL)  ? VIZ_COMM_COLL
                                                          : st == viz_comm_style(VIZ_COMM_P2P) ? VIZ_COMM_P2P
                                                                                               : VIZ_COMM_OTHER);
                    int wi = 0;
                    while (wi < nstyles && styles[wi] != wst) wi++;
                    if (wi == nstyles && nstyles < 16) styles[nstyles++] = wst;
                    double ww = (wf - ws) * scale;
                    if (ww < 0.5) ww = 0.5;
                    snprintf(name, sizeof name, "w%d", k);
                    snprintf(id, sizeof id, "wait-%lld-%lld-%d", (long long)ln->pid, (long long)ln->tid, j);
                    char wtip[400];
                    snprintf(wtip, sizeof wtip, "%s: waiting %.6g us for its partners, then moving data %.6g us",
                             ev->name ? ev->name : "", ev->wait, ev->dur - ev->wait);
                    base_buf tb = {0};
                    base_buf_puts(&tb, "tooltip=");
                    viz_dot_quote(&tb, wtip);
                    viz_dot_box(dot, name, id, "wait", (ws - t0) * scale + ww / 2, yr, ww / VIZ_PT, h, wst, "", 7, tb.s);
                    free(tb.s);
                    snprintf(tip, sizeof tip, "%s: moving data %.6g us (after waiting %.6g us)", ev->name ? ev->name : "",
                             ev->dur - ev->wait, ev->wait);
                }
                if (moving > s) s = moving < f ? moving : f;
            }
            double w = (f - s) * scale;
            if (w < 0.5) w = 0.5;
            const char *nm = ev->name ? ev->name : "";
            snprintf(label, sizeof label, "%s", text_pt(nm, 7) + 4 <= w ? nm : "");
            snprintf(name, sizeof name, "e%d", k);
            snprintf(id, sizeof id, "ev-%lld-%lld-%d", (long long)ln->pid, (long long)ln->tid, j);
            char cls[48];
            snprintf(cls, sizeof cls, "event %s", st->key);
            /* tooltip: the SVG <title> of the box, shown on hover */
            base_buf tb = {0};
            base_buf_puts(&tb, "tooltip=");
            viz_dot_quote(&tb, tip);
            viz_dot_box(dot, name, id, cls, (s - t0) * scale + w / 2, yr, w / VIZ_PT, h, st, label, 7, tb.s);
            free(tb.s);
        }
    }

    /* counter tracks: a bar per sample, from it to the next (the last to the trace's end), as
     * high as its value over the track's peak */
    viz_style sample = {"sample", "#8fa8c0", "black", "", "counter (each track to its own peak)"};
    for (size_t q = 0; q < tracks.n; q++) {
        const track *tr = &tracks.v[q];
        char peak[32], pname[64];
        base_fmt_bytes(tr->peak, peak, sizeof peak);
        if (tr->process) snprintf(pname, sizeof pname, "%s", tr->process);
        else snprintf(pname, sizeof pname, "GPU %lld", (long long)tr->pid);
        /* "GPU 0 · memory ≤ 22.47 GiB": the track's peak, which the bars' full height stands for */
        if (!strcmp(tr->name, "memory")) snprintf(label, sizeof label, "%s \xc2\xb7 %s \xe2\x89\xa4 %s", pname, tr->name, peak);
        else snprintf(label, sizeof label, "%s \xc2\xb7 %s \xe2\x89\xa4 %.4g", pname, tr->name, tr->peak);
        snprintf(name, sizeof name, "tracklabel%d", (int)q);
        snprintf(id, sizeof id, "tracklabel-%lld-%d", (long long)tr->pid, (int)q);
        viz_dot_text(dot, name, id, -6 - label_w * VIZ_PT / 2, tr->y, label, 7, 'r', label_w, NULL);
        viz_style lane = {"track", "#ffffff", "black", "", "track"};
        snprintf(name, sizeof name, "track%d", (int)q);
        snprintf(id, sizeof id, "track-%lld-%d", (long long)tr->pid, (int)q);
        viz_dot_box(dot, name, id, "track", W / 2, tr->y, W / VIZ_PT, LANE_H, &lane, "", 8, "color=\"#c8c8c8\"");
        double full = (LANE_H - 0.04) * VIZ_PT, base = tr->y - full / 2;
        for (int i = tr->c0; i < tr->c1; i++) {
            const viz_chrome_counter *c = &t->counters[i];
            double s = c->ts, f = i + 1 < tr->c1 ? t->counters[i + 1].ts : hi;
            if (s < t0) s = t0;
            if (f > t1) f = t1;
            double h = tr->peak > 0 ? c->value / tr->peak * full : 0;
            if (!(f > s) || !(h > 0.2)) continue;
            double w = (f - s) * scale;
            snprintf(name, sizeof name, "m%d_%d", (int)q, i);
            snprintf(tip, sizeof tip, "penwidth=0, tooltip=\"%s = %.6g from %.6g us\"", tr->name, c->value, c->ts);
            viz_dot_box(dot, name, NULL, "sample", (s - t0) * scale + w / 2, base + h / 2, w / VIZ_PT, h / VIZ_PT, &sample,
                        "", 7, tip);
        }
    }

    /* the axis: a rule, ticks at a 1-2-5 step in the span's unit */
    viz_style ink = {"axis", "black", "black", "", ""};
    viz_dot_box(dot, "axis", "axis", "axis", W / 2, axis_y, W / VIZ_PT, 0.6 / VIZ_PT, &ink, "", 8, "penwidth=0");
    double step = viz_nice_step((t1 - t0) * per_us, 8) / per_us; /* microseconds */
    int k = 0;
    for (double v = ceil(t0 / step - 1e-9) * step; v <= t1 + step * 1e-9; v += step, k++) {
        double x = (v - t0) * scale;
        snprintf(name, sizeof name, "tick%d", k);
        snprintf(id, sizeof id, "tick-%d", k);
        viz_dot_box(dot, name, id, "tick", x, axis_y - 2, 0.6 / VIZ_PT, 4 / VIZ_PT, &ink, "", 8, "penwidth=0");
        snprintf(label, sizeof label, "%.6g", fabs(v * per_us) < 1e-12 ? 0 : v * per_us);
        snprintf(name, sizeof name, "ticklabel%d", k);
        viz_dot_text(dot, name, NULL, x, axis_y - 10, label, 8, 'c', 0, NULL);
    }
    if (t->origin_us != 0) snprintf(label, sizeof label, "time (%s) from the trace's first event", unit);
    else snprintf(label, sizeof label, "time (%s)", unit);
    viz_dot_text(dot, "axislabel", "axis-caption", W / 2, axis_y - 22, label, 8, 'c', 0, NULL);

    /* legend: the kinds of box present in a fixed order (passes, then communication), and the
     * lane shading */
    const viz_style *canon[PLAN_NPASS + 4 + 3 + VIZ_EV_NKINDS];
    int ncanon = 0;
    for (int p = 0; p < PLAN_NPASS; p++) canon[ncanon++] = viz_pass_style(p);
    canon[ncanon++] = viz_other_style();
    for (int c = VIZ_COMM_P2P; c <= VIZ_COMM_OTHER; c++) {
        canon[ncanon++] = viz_comm_style((viz_comm_kind)c);
        canon[ncanon++] = viz_wait_style((viz_comm_kind)c);
    }
    for (int q = VIZ_EV_PIPER + 1; q < VIZ_EV_NKINDS; q++) canon[ncanon++] = viz_kind_style(q);
    double x = 0, sw = 0.3 * VIZ_PT, sh = 0.2 * VIZ_PT;
    for (int i = 0; i < ncanon; i++) {
        const viz_style *st = canon[i];
        bool present = false;
        for (int q = 0; q < nstyles && !present; q++) present = styles[q] == st;
        if (!present) continue;
        snprintf(name, sizeof name, "legend%d", i);
        snprintf(id, sizeof id, "legend-%s", st->key);
        viz_dot_box(dot, name, id, "legend", x + sw / 2, legend_y, sw / VIZ_PT, sh / VIZ_PT, st, "", 7, NULL);
        double tw = text_pt(st->what, 8) + 4;
        snprintf(name, sizeof name, "legendtext%d", i);
        viz_dot_text(dot, name, NULL, x + sw + 4 + tw / 2, legend_y, st->what, 8, 'l', tw / VIZ_PT, NULL);
        x += sw + 4 + tw + 12;
    }
    if (tracks.n) {
        snprintf(name, sizeof name, "legend%d", ncanon);
        viz_dot_box(dot, name, "legend-sample", "legend", x + sw / 2, legend_y, sw / VIZ_PT, sh / VIZ_PT, &sample, "", 7,
                    "penwidth=0");
        double tw = text_pt(sample.what, 8) + 4;
        viz_dot_text(dot, "legendtext_sample", NULL, x + sw + 4 + tw / 2, legend_y, sample.what, 8, 'l', tw / VIZ_PT, NULL);
        x += sw + 4 + tw + 12;
    }
    if (any_comm_lane) {
        viz_style lane = {"lane", "#fdfaf2", "black", "dashed", ""};
        viz_dot_box(dot, "legend_commlane", "legend-commlane", "legend", x + sw / 2, legend_y, sw / VIZ_PT, sh / VIZ_PT,
                    &lane, "", 7, "color=\"#c8c8c8\"");
        const char *txt = "communication lane";
        double tw = text_pt(txt, 8) + 4;
        viz_dot_text(dot, "legendtext_commlane", NULL, x + sw + 4 + tw / 2, legend_y, txt, 8, 'l', tw / VIZ_PT, NULL);
    }
    base_buf_puts(dot, "}\n");
    free(nin);
    free(ncomm);
    free(ly);
    free(lh);
    free(tracks.v);
    return 0;
}
