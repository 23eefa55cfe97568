/* schedule.c — `piper-viz schedule`: the per-rank grid of pipeline papers (GPipe, 1F1B, Zero
 * Bubble, DualPipe figures), drawn from the very plan piper runs rather than by hand.
 *
 * A row is a pipeline rank: the devices whose compute instructions belong to the same stages (data-
 * and tensor-parallel replicas run the same row; the row shows the lowest device). A box is one
 * action of the rank, (stage, pass, micro-batch): all its compute instructions together. Boxes are
 * placed by the plan's static timing, which plan_check_timed computes with the header's GPU
 * roofline and nominal links, so a box's width is its cost and gaps are idle time; `--unit`
 * replays the ranks' orders with every action one unit long instead (and so does a plan whose
 * static run fails, with its roofline costs and without communication, so the figure still shows
 * the order). An overlapped F&B pair is two half-height boxes sharing one slot. */
#include "viz_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cell {
    int32_t stage, mb;
    uint8_t pass;
    int32_t first, last; /* launch indices of its first and last compute instruction */
    double t0, t1;       /* static timing: first start, last end (seconds) */
    double cost;         /* roofline seconds of its instructions */
    int32_t partner;     /* the other cell of an overlapped pair, -1 */
    double x0, x1;       /* placed, in the figure's time unit (seconds or slots) */
} cell;

typedef struct row {
    int dev;             /* the device the row shows */
    int nstages;
    int32_t *stages;     /* sorted */
    int32_t c0, c1;      /* its cells: cells[c0 .. c1) in launch order of their first instruction */
    double *start, *end; /* static timing per instruction of dev's list (NAN: not run) */
} row;

typedef struct grid {
    const plan_set *p;
    row *rows;
    int nrows;
    BASE_VEC(cell) cells;
    double *kl_seconds;  /* per kernel list */
} grid;

static bool drawn_pass(int pass)
{
    return pass == PLAN_PASS_F || pass == PLAN_PASS_B || pass == PLAN_PASS_BI || pass == PLAN_PASS_BW ||
           pass == PLAN_PASS_R;
}

/* The same roofline as the static check (plan/plan_check.c): a kernel takes the longer of its
 * arithmetic at the dtype's peak and its memory traffic at HBM bandwidth. */
static double kernel_seconds(const plan_gpu *g, const plan_kernel *k)
{
    double fl = k->dtype < PLAN_NDTYPE && g->peak_flops[k->dtype] > 0 && k->flops > 0 ? k->flops / g->peak_flops[k->dtype] : 0;
    double by = g->hbm_bw > 0 && k->bytes > 0 ? k->bytes / g->hbm_bw : 0;
    double t = fl > by ? fl : by;
    return t >= 0 ? t : 0;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int cmp_row(const void *a, const void *b)
{
    const row *x = a, *y = b;
    if (x->stages[0] != y->stages[0]) return (x->stages[0] > y->stages[0]) - (x->stages[0] < y->stages[0]);
    return (x->dev > y->dev) - (x->dev < y->dev);
}

/* Ranks: distinct sets of stages, each shown by its lowest device, ordered by lowest stage. */
static void find_rows(grid *gr)
{
    const plan_set *p = gr->p;
    BASE_VEC(row) rows = {0};
    BASE_VEC(int32_t) st = {0};
    for (int d = 0; d < p->ndevices; d++) {
        const plan_list *L = plan_dev_list(p, d);
        st.n = 0;
        for (int i = 0; i < L->n; i++) {
            const plan_instr *in = &L->ins[i];
            if (in->op != PLAN_COMPUTE || !drawn_pass(in->pass)) continue;
            bool have = false;
            for (size_t k = 0; k < st.n && !have; k++) have = st.v[k] == in->stage;
            if (!have) BASE_VEC_PUSH(st, in->stage);
        }
        if (!st.n) continue;
        qsort(st.v, st.n, sizeof *st.v, cmp_i32);
        bool seen = false;
        for (size_t r = 0; r < rows.n && !seen; r++)
            seen = rows.v[r].nstages == (int)st.n && !memcmp(rows.v[r].stages, st.v, st.n * sizeof *st.v);
        if (seen) continue;
        row rw = {.dev = d, .nstages = (int)st.n};
        rw.stages = base_xmalloc(st.n * sizeof *rw.stages);
        memcpy(rw.stages, st.v, st.n * sizeof *rw.stages);
        BASE_VEC_PUSH(rows, rw);
    }
    free(st.v);
    if (rows.n) qsort(rows.v, rows.n, sizeof *rows.v, cmp_row);
    gr->rows = rows.v;
    gr->nrows = (int)rows.n;
}

typedef struct timing_ctx {
    const grid *gr;
    const int32_t *row_of_dev;
} timing_ctx;

static void on_timing(void *ctx, int dev, int ins, double start, double end)
{
    const timing_ctx *t = ctx;
    int r = t->row_of_dev[dev];
    if (r < 0) return;
    t->gr->rows[r].start[ins] = start;
    t->gr->rows[r].end[ins] = end;
}

/* The plan's static run, keeping the timing of the rows' devices. Returns 0 when every compute
 * of every row got a time. */
static int static_timing(grid *gr, base_error *e)
{
    const plan_set *p = gr->p;
    int32_t *row_of_dev = base_xmalloc(((size_t)p->ndevices + 1) * sizeof *row_of_dev);
    for (int d = 0; d < p->ndevices; d++) row_of_dev[d] = -1;
    for (int r = 0; r < gr->nrows; r++) {
        row *rw = &gr->rows[r];
        const plan_list *L = plan_dev_list(p, rw->dev);
        rw->start = base_xmalloc(((size_t)L->n + 1) * sizeof *rw->start);
        rw->end = base_xmalloc(((size_t)L->n + 1) * sizeof *rw->end);
        for (int i = 0; i < L->n; i++) rw->start[i] = rw->end[i] = NAN;
        row_of_dev[rw->dev] = r;
    }
    timing_ctx t = {gr, row_of_dev};
    base_error quiet = {0};
    int rc = plan_check_timed(p, NULL, on_timing, &t, &quiet);
    free(row_of_dev);
    if (rc) {
        /* keep only the first sentence: a deadlock report lists every stuck device */
        char first[300];
        snprintf(first, sizeof first, "%.299s", quiet.msg);
        char *dot = strstr(first, "; stuck:");
        if (dot) *dot = 0;
        base_warn_at(e, NULL, 0, 0, "the plan's static run fails (%s), so the boxes are placed by a replay of the ranks' "
                     "orders with roofline costs and no communication time", first);
    }
    return rc;
}

static void find_cells(grid *gr)
{
    const plan_set *p = gr->p;
    for (int r = 0; r < gr->nrows; r++) {
        row *rw = &gr->rows[r];
        const plan_list *L = plan_dev_list(p, rw->dev);
        rw->c0 = (int32_t)gr->cells.n;
        for (int i = 0; i < L->n; i++) {
            const plan_instr *in = &L->ins[i];
            if (in->op != PLAN_COMPUTE || !drawn_pass(in->pass)) continue;
            double cost = in->kernels >= 0 && in->kernels < p->nkernel_lists ? gr->kl_seconds[in->kernels] : 0;
            /* a cell's instructions are (nearly always) consecutive: search from the newest */
            cell *c = NULL;
            for (size_t k = gr->cells.n; k-- > (size_t)rw->c0 && !c;) {
                cell *q = &gr->cells.v[k];
                if (q->stage == in->stage && q->mb == in->mb && q->pass == in->pass) c = q;
            }
            double s = rw->start ? rw->start[i] : NAN, t = rw->end ? rw->end[i] : NAN;
            if (!c) {
                cell n = {in->stage, in->mb, in->pass, i, i, s, t, 0, -1, 0, 0};
                BASE_VEC_PUSH(gr->cells, n);
                c = &gr->cells.v[gr->cells.n - 1];
            }
            c->last = i;
            c->cost += cost;
            if (!(c->t0 <= s)) c->t0 = s;
            if (!(c->t1 >= t)) c->t1 = t;
        }
        rw->c1 = (int32_t)gr->cells.n;
    }
}

static bool same_action(const cell *c, const viz_action *a)
{
    return c->stage == a->stage && c->mb == a->mb && c->pass == a->pass;
}

/* Overlapped pairs: those the program named, and any two consecutive actions of a rank whose
 * instructions interleave in the launch order (what an overlapped pair becomes in a plan file). */
static void find_pairs(grid *gr, const viz_schedule_options *o)
{
    for (int r = 0; r < gr->nrows; r++) {
        const row *rw = &gr->rows[r];
        for (int q = 0; q < o->npairs; q++) {
            int32_t a = -1, b = -1;
            for (int32_t k = rw->c0; k < rw->c1; k++) {
                if (same_action(&gr->cells.v[k], &o->pairs[q].a)) a = k;
                if (same_action(&gr->cells.v[k], &o->pairs[q].b)) b = k;
            }
            if (a >= 0 && b >= 0 && a != b && gr->cells.v[a].partner < 0 && gr->cells.v[b].partner < 0)
                gr->cells.v[a].partner = b, gr->cells.v[b].partner = a;
        }
        for (int32_t k = rw->c0; k + 1 < rw->c1; k++) {
            cell *x = &gr->cells.v[k], *y = &gr->cells.v[k + 1];
            if (x->partner < 0 && y->partner < 0 && y->first < x->last) x->partner = k + 1, y->partner = k;
        }
    }
}

/* The cell of (stage, pass, mb) anywhere in the grid, or -1. */
static int32_t find_cell(const grid *gr, int32_t stage, int pass, int32_t mb)
{
    for (size_t k = 0; k < gr->cells.n; k++) {
        const cell *c = &gr->cells.v[k];
        if (c->stage == stage && c->pass == pass && c->mb == mb) return (int32_t)k;
    }
    return -1;
}

/* What an action waits for on other ranks: a forward for the previous stage's forward of its
 * micro-batch, a backward (or its input half) for the next stage's, a weight half for its own
 * input half. The rest is the rank's own order. */
static void cell_deps(const grid *gr, const cell *c, int32_t dep[2])
{
    dep[0] = dep[1] = -1;
    if (c->pass == PLAN_PASS_F) {
        dep[0] = find_cell(gr, c->stage - 1, PLAN_PASS_F, c->mb);
    } else if (c->pass == PLAN_PASS_B || c->pass == PLAN_PASS_BI) {
        dep[0] = find_cell(gr, c->stage + 1, PLAN_PASS_B, c->mb);
        if (dep[0] < 0) dep[0] = find_cell(gr, c->stage + 1, PLAN_PASS_BI, c->mb);
    } else if (c->pass == PLAN_PASS_BW) {
        dep[0] = find_cell(gr, c->stage, PLAN_PASS_BI, c->mb);
    }
    if (c->pass != PLAN_PASS_F) dep[1] = find_cell(gr, c->stage, PLAN_PASS_F, c->mb);
}

/* Places every cell by replaying the ranks' orders: a slot (an action, or a pair) starts when its
 * rank is free and what it waits for has ended, and lasts one unit or its roofline cost. */
static int replay(grid *gr, bool unit, base_error *e)
{
    size_t n = gr->cells.n;
    int32_t (*deps)[2] = base_xmalloc((n + 1) * sizeof *deps);
    uint8_t *done = base_xcalloc(n + 1, 1);
    int32_t *next = base_xmalloc(((size_t)gr->nrows + 1) * sizeof *next);
    double *free_at = base_xcalloc((size_t)gr->nrows + 1, sizeof *free_at);
    for (size_t k = 0; k < n; k++) cell_deps(gr, &gr->cells.v[k], deps[k]);
    for (int r = 0; r < gr->nrows; r++) next[r] = gr->rows[r].c0;
    size_t placed = 0;
    for (bool progress = true; progress;) {
        progress = false;
        for (int r = 0; r < gr->nrows; r++) {
            const row *rw = &gr->rows[r];
            while (next[r] < rw->c1) {
                int32_t k = next[r];
                cell *c = &gr->cells.v[k];
                if (done[k]) { /* the second half of a pair placed with the first */
                    next[r]++;
                    continue;
                }
                int32_t m[2] = {k, c->partner};
                double start = free_at[r], dur = 0;
                bool ready = true;
                for (int h = 0; h < 2 && ready; h++) {
                    if (m[h] < 0) continue;
                    for (int q = 0; q < 2; q++) {
                        int32_t dq = deps[m[h]][q];
                        if (dq < 0 || dq == m[0] || dq == m[1]) continue;
                        if (!done[dq]) ready = false;
                        else if (gr->cells.v[dq].x1 > start) start = gr->cells.v[dq].x1;
                    }
                    dur += unit ? 0 : gr->cells.v[m[h]].cost;
                }
                if (!ready) break;
                if (unit) dur = 1;
                for (int h = 0; h < 2; h++) {
                    if (m[h] < 0) continue;
                    gr->cells.v[m[h]].x0 = start;
                    gr->cells.v[m[h]].x1 = start + dur;
                    done[m[h]] = 1;
                    placed++;
                }
                free_at[r] = start + dur;
                next[r]++;
                progress = true;
            }
        }
    }
    int rc = 0;
    if (placed < n) {
        for (int r = 0; r < gr->nrows && !rc; r++)
            if (next[r] < gr->rows[r].c1) {
                const cell *c = &gr->cells.v[next[r]];
                rc = base_errorf(e, "the ranks' orders wait for each other in a cycle: rank %d (device %d) cannot start "
                                 "%s of stage %d, micro-batch %d; the plan's order is not a pipeline schedule this "
                                 "figure can draw", r, gr->rows[r].dev, plan_pass_name((plan_pass)c->pass),
                                 c->stage, c->mb);
            }
    }
    free(deps);
    free(done);
    free(next);
    free(free_at);
    return rc;
}

/* ---------------------------------------------------------------- drawing */

#define BOX_H 0.32       /* inches: a full box */
#define ROW_PITCH 0.42
#define LABEL_W 1.25     /* the row labels' column */
#define FONT 9.0

/* Roughly how wide DejaVu Sans sets s at `size` points (average advance ~0.6 em). */
static double text_pt(const char *s, double size) { return 0.62 * size * (double)strlen(s); }

/* `timed`: positions are the static run's; otherwise a replay's, in seconds unless o->unit. */
static void draw(const grid *gr, const viz_schedule_options *o, bool timed, base_buf *dot)
{
    const plan_set *p = gr->p;
    double T = 0;
    BASE_VEC(double) widths = {0};
    for (size_t k = 0; k < gr->cells.n; k++) {
        const cell *c = &gr->cells.v[k];
        if (c->x1 > T) T = c->x1;
        if (c->x1 > c->x0) BASE_VEC_PUSH(widths, c->x1 - c->x0);
    }
    if (!(T > 0)) T = 1;
    /* points per time unit: the median box at least 24 pt wide, the grid at least 7.5 in, at most
     * 50 in (beyond that a figure is for zooming, not reading) */
    double median = 1;
    if (widths.n) {
        for (size_t i = 1; i < widths.n; i++) /* insertion sort: a few hundred boxes */
            for (size_t j = i; j > 0 && widths.v[j - 1] > widths.v[j]; j--) {
                double t = widths.v[j];
                widths.v[j] = widths.v[j - 1];
                widths.v[j - 1] = t;
            }
        median = widths.v[widths.n / 2];
    }
    free(widths.v);
    double scale = 24.0 / median;
    if (T * scale < 7.5 * VIZ_PT) scale = 7.5 * VIZ_PT / T;
    if (T * scale > 50 * VIZ_PT) scale = 50 * VIZ_PT / T;
    /* Graphviz rounds node sizes to whole points: whole points per unit keep unit boxes abutting */
    if (o->unit) scale = ceil(scale);
    double W = T * scale, pitch = ROW_PITCH * VIZ_PT, boxh = BOX_H * VIZ_PT;
    int R = gr->nrows;
    /* y grows upwards in Graphviz: rank 0 on top */
    bool seconds = !o->unit;
    /* from the bottom: the legend, the axis (rule, tick labels, caption), the rows */
    double legend_y = 0, rule_y = legend_y + (seconds ? 0.62 : 0.32) * VIZ_PT;
    double row0_y = rule_y + 0.36 * VIZ_PT + (R - 1) * pitch;

    base_buf_puts(dot, "digraph schedule {\n");
    base_buf_printf(dot, "  graph [bgcolor=white, pad=0.2, fontname=\"%s\"];\n", VIZ_FONT);
    base_buf_printf(dot, "  node [fontname=\"%s\", fontsize=%.1f];\n", VIZ_FONT, FONT);

    /* title */
    char title[256];
    if (o->title) snprintf(title, sizeof title, "%s", o->title);
    else snprintf(title, sizeof title, "%s: %d rank%s, %d micro-batch%s", p->model.name ? p->model.name : "plan", R,
                  R == 1 ? "" : "s", (int)p->model.num_microbatches, p->model.num_microbatches == 1 ? "" : "es");
    viz_dot_text(dot, "title", "title", W / 2, row0_y + 0.55 * VIZ_PT, title, 11, 'c', 0, NULL);

    char name[64], id[96], label[64];
    bool chunks = false;
    for (int r = 0; r < R; r++) {
        const row *rw = &gr->rows[r];
        double y = row0_y - r * pitch;
        snprintf(label, sizeof label, "rank %d \xc2\xb7 GPU %d", r, rw->dev);
        snprintf(name, sizeof name, "rowlabel%d", r);
        snprintf(id, sizeof id, "label-r%d", r);
        viz_dot_text(dot, name, id, -6 - LABEL_W * VIZ_PT / 2, y, label, FONT, 'r', LABEL_W, NULL);
        /* the lane behind the boxes: what shows through between them is idle time */
        snprintf(name, sizeof name, "lane%d", r);
        snprintf(id, sizeof id, "lane-r%d", r);
        viz_style lane = {"lane", "#f2f2f2", "black", "", "idle"};
        viz_dot_box(dot, name, id, "lane", W / 2, y, W / VIZ_PT, (boxh + 3) / VIZ_PT, &lane, "", FONT,
                    "color=\"#c8c8c8\"");
        for (int32_t k = rw->c0; k < rw->c1; k++) {
            const cell *c = &gr->cells.v[k];
            const viz_style *st = viz_pass_style(c->pass);
            double x0 = c->x0, x1 = c->x1, h = boxh, yc = y;
            if (c->partner >= 0) {
                /* One slot from the pair's first instruction to its last, as pipeline papers draw
                 * it; the forward (or the earlier action) on top. */
                const cell *q = &gr->cells.v[c->partner];
                if (q->x0 < x0) x0 = q->x0;
                if (q->x1 > x1) x1 = q->x1;
                bool cf = c->pass == PLAN_PASS_F, qf = q->pass == PLAN_PASS_F;
                bool top = cf != qf ? cf : k < c->partner;
                h = boxh / 2;
                yc = y + (top ? boxh / 4 : -boxh / 4);
            }
            double w = (x1 - x0) * scale;
            if (w < 1) w = 1;
            int n = snprintf(id, sizeof id, "r%d-%s", r, st->key);
            if (c->mb >= 0) n += snprintf(id + n, sizeof id - (size_t)n, "-%d", c->mb);
            if (rw->nstages > 1) snprintf(id + n, sizeof id - (size_t)n, "-s%d", c->stage);
            char cls[48];
            snprintf(cls, sizeof cls, "box %s%s", st->key, c->partner >= 0 ? " overlap" : "");
            if (c->mb >= 0) snprintf(label, sizeof label, "%d", c->mb);
            else label[0] = 0;
            double fs = c->partner >= 0 ? 7 : FONT;
            if (text_pt(label, fs) + 2 > w) label[0] = 0; /* too narrow for its number: the id keeps it */
            char tip[160], extra[200];
            snprintf(tip, sizeof tip, "%s stage %d mb %d: %.4g to %.4g %s", st->key, c->stage, c->mb, c->x0, c->x1,
                     seconds ? "s" : "units");
            /* a rank's later model chunks (interleaved, V shapes) get a bold outline: which of the
             * rank's stages a box belongs to then survives greyscale and needs no extra hue */
            int chunk = 0;
            while (chunk < rw->nstages && rw->stages[chunk] != c->stage) chunk++;
            snprintf(extra, sizeof extra, "tooltip=\"%s\"%s", tip, chunk % 2 ? ", penwidth=1.8" : "");
            if (chunk % 2) chunks = true;
            snprintf(name, sizeof name, "c%d", k);
            viz_dot_box(dot, name, id, cls, (x0 * scale + w / 2), yc, w / VIZ_PT, h / VIZ_PT, st, label, fs, extra);
        }
    }

    /* time axis: a rule with ticks in the unit that suits the makespan */
    if (seconds) {
        viz_style ink = {"axis", "black", "black", "", ""};
        viz_dot_box(dot, "axis", "axis", "axis", W / 2, rule_y, W / VIZ_PT, 0.6 / VIZ_PT, &ink, "", FONT, "penwidth=0");
        double step = viz_nice_step(T, 8);
        for (int k = 0; k * step <= T * (1 + 1e-9); k++) {
            double x = k * step * scale;
            char t[32];
            snprintf(name, sizeof name, "tick%d", k);
            snprintf(id, sizeof id, "tick-%d", k);
            viz_dot_box(dot, name, id, "tick", x, rule_y - 2, 0.6 / VIZ_PT, 4 / VIZ_PT, &ink, "", FONT, "penwidth=0");
            snprintf(name, sizeof name, "ticklabel%d", k);
            viz_dot_text(dot, name, NULL, x, rule_y - 10, viz_fmt_seconds(k * step, t, sizeof t), 8, 'c', 0, NULL);
        }
        char cap[160];
        if (timed) snprintf(cap, sizeof cap, "time (static cost model, %s)", p->gpu.name ? p->gpu.name : "GPU");
        else snprintf(cap, sizeof cap, "time (roofline on %s, no communication)", p->gpu.name ? p->gpu.name : "GPU");
        viz_dot_text(dot, "axislabel", "axis-caption", W / 2, rule_y - 22, cap, 8, 'c', 0, NULL);
    } else {
        viz_dot_text(dot, "axislabel", "axis-caption", W / 2, rule_y - 6, "one unit per action (--unit): the order, not "
                     "the time", 8, 'c', 0, NULL);
    }

    /* legend: one sample per pass present, idle, and the overlapped pair when there is one */
    bool seen[PLAN_NPASS] = {0}, pairs = false;
    for (size_t k = 0; k < gr->cells.n; k++) {
        seen[gr->cells.v[k].pass] = true;
        pairs |= gr->cells.v[k].partner >= 0;
    }
    double x = 0, sw = 0.32 * VIZ_PT, sh = 0.22 * VIZ_PT;
    static const int ORDER[] = {PLAN_PASS_F, PLAN_PASS_B, PLAN_PASS_BI, PLAN_PASS_BW, PLAN_PASS_R};
    for (size_t i = 0; i < BASE_COUNT(ORDER); i++) {
        if (!seen[ORDER[i]]) continue;
        const viz_style *st = viz_pass_style(ORDER[i]);
        snprintf(name, sizeof name, "legend_%s", st->key);
        snprintf(id, sizeof id, "legend-%s", st->key);
        char cls[32];
        snprintf(cls, sizeof cls, "legend %s", st->key);
        viz_dot_box(dot, name, id, cls, x + sw / 2, legend_y, sw / VIZ_PT, sh / VIZ_PT, st, st->key, 8, NULL);
        double tw = text_pt(st->what, 8) + 4;
        snprintf(name, sizeof name, "legendtext_%s", st->key);
        viz_dot_text(dot, name, NULL, x + sw + 4 + tw / 2, legend_y, st->what, 8, 'l', tw / VIZ_PT, NULL);
        x += sw + 4 + tw + 12;
    }
    viz_style idle = {"idle", "#f2f2f2", "black", "", "idle"};
    viz_dot_box(dot, "legend_idle", "legend-idle", "legend", x + sw / 2, legend_y, sw / VIZ_PT, sh / VIZ_PT, &idle, "", 8,
                "color=\"#c8c8c8\"");
    viz_dot_text(dot, "legendtext_idle", NULL, x + sw + 4 + 14, legend_y, "idle", 8, 'l', 28 / VIZ_PT, NULL);
    x += sw + 4 + 28 + 12;
    if (chunks) {
        viz_style plain = {"chunk", "white", "black", "", ""};
        viz_dot_box(dot, "legend_chunk", "legend-chunk", "legend", x + sw / 2, legend_y, sw / VIZ_PT, sh / VIZ_PT, &plain,
                    "", 8, "penwidth=1.8");
        int most = 0;
        for (int r = 0; r < R; r++) most = gr->rows[r].nstages > most ? gr->rows[r].nstages : most;
        const char *t = most > 2 ? "a rank's 2nd, 4th, ... model chunk" : "a rank's second model chunk";
        double tw = text_pt(t, 8) + 4;
        viz_dot_text(dot, "legendtext_chunk", NULL, x + sw + 4 + tw / 2, legend_y, t, 8, 'l', tw / VIZ_PT, NULL);
        x += sw + 4 + tw + 12;
    }
    if (pairs) {
        const viz_style *f = viz_pass_style(PLAN_PASS_F), *b = viz_pass_style(PLAN_PASS_B);
        viz_dot_box(dot, "legend_pair_f", "legend-overlap", "legend", x + sw / 2, legend_y + sh / 4, sw / VIZ_PT,
                    sh / 2 / VIZ_PT, f, "", 6, NULL);
        viz_dot_box(dot, "legend_pair_b", NULL, "legend", x + sw / 2, legend_y - sh / 4, sw / VIZ_PT, sh / 2 / VIZ_PT, b, "",
                    6, NULL);
        const char *t = "overlapped F&B pair";
        double tw = text_pt(t, 8) + 4;
        viz_dot_text(dot, "legendtext_pair", NULL, x + sw + 4 + tw / 2, legend_y, t, 8, 'l', tw / VIZ_PT, NULL);
    }
    base_buf_puts(dot, "}\n");
}

void viz_pairs_from_program(const sched_compilation *c, viz_pair **pairs, int *n)
{
    BASE_VEC(viz_pair) v = {0};
    for (int i = 0; i < c->nexpanded; i++) {
        const ir_directive *d = &c->expanded[i];
        if (d->op != IR_DIR_ORDER) continue;
        for (int k = 0; k < d->ngroups; k++) {
            if (d->group_nfilters[k] != 2) continue;
            viz_action act[2];
            int ok = 0;
            for (int f = 0; f < 2; f++) {
                const ir_filter *flt = &d->groups[k][f];
                int have = 0;
                act[f] = (viz_action){-1, -1, PLAN_NPASS};
                for (int m = 0; m < flt->n; m++) {
                    const ir_tag_match *t = &flt->m[m];
                    if (t->any || t->none) continue;
                    if (t->tag == IR_TAG_PP) act[f].stage = (int32_t)t->value, have |= 1;
                    else if (t->tag == IR_TAG_MB) act[f].mb = (int32_t)t->value, have |= 2;
                    else if (t->tag == IR_TAG_PASS) act[f].pass = (uint8_t)t->value, have |= 4;
                }
                ok += have == 7 && drawn_pass(act[f].pass);
            }
            if (ok == 2) BASE_VEC_PUSH(v, ((viz_pair){act[0], act[1]}));
        }
    }
    *pairs = v.v;
    *n = (int)v.n;
}

int viz_schedule(const plan_set *p, const viz_schedule_options *o, base_buf *dot, base_error *e)
{
    grid gr = {.p = p};
    find_rows(&gr);
    if (!gr.nrows) return base_errorf(e, "the plan has no forward or backward compute instructions, so there is no "
                                         "schedule to draw; compile a program that trains (F and B passes)");
    gr.kl_seconds = base_xcalloc((size_t)p->nkernel_lists + 1, sizeof *gr.kl_seconds);
    for (int i = 0; i < p->nkernel_lists; i++)
        for (int j = 0; j < p->kernel_lists[i].n; j++)
            gr.kl_seconds[i] += kernel_seconds(&p->gpu, &p->kernel_lists[i].k[j]);
    bool timed = !o->unit && static_timing(&gr, e) == 0;
    find_cells(&gr);
    find_pairs(&gr, o);
    int rc = 0;
    if (timed) {
        for (size_t k = 0; k < gr.cells.n && timed; k++) timed = !isnan(gr.cells.v[k].t0) && !isnan(gr.cells.v[k].t1);
        for (size_t k = 0; k < gr.cells.n; k++) gr.cells.v[k].x0 = gr.cells.v[k].t0, gr.cells.v[k].x1 = gr.cells.v[k].t1;
    }
    if (!timed) rc = replay(&gr, o->unit, e);
    if (!rc) draw(&gr, o, timed, dot);
    for (int r = 0; r < gr.nrows; r++) free(gr.rows[r].stages), free(gr.rows[r].start), free(gr.rows[r].end);
    free(gr.rows);
    free(gr.cells.v);
    free(gr.kl_seconds);
    return rc;
}
