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
#include <strings.h>

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

/* Builder names as papers write them; the builders themselves are sched/schedule.h's table. */
static const struct {
    const char *builder, *title;
} TITLE_NAMES[] = {
    {"gpipe", "GPipe"},   {"1f1b", "1F1B"},   {"interleaved-1f1b", "Interleaved 1F1B"},
    {"zb-h1", "ZB-H1"},   {"zb-h2", "ZB-H2"}, {"zbv", "ZB-V"},
    {"dualpipe", "DualPipe"}, {"dualpipev", "DualPipeV"},
};

const char *viz_schedule_title_name(const char *builder)
{
    if (!builder) return NULL;
    for (size_t i = 0; i < BASE_COUNT(TITLE_NAMES); i++)
        if (!strcasecmp(builder, TITLE_NAMES[i].builder)) return TITLE_NAMES[i].title;
    return builder;
}

const char *viz_schedule_of_program(const sched_compilation *c)
{
    for (int i = 0; i < c->prog.ndirectives; i++) {
        const ir_directive *d = &c->prog.directives[i];
        if (d->op == IR_DIR_SCHEDULE && d->schedule) return d->schedule;
    }
    return c->default_schedule;
}

/* The figure's measures, in points: the natural ones (boxes 24 pt wide at the median, rows 0.42
 * in apart), or those that fit a given width (a paper column: smaller rows and type). */
typedef struct dims {
    double scale;        /* points per time unit */
    double boxh, pitch;  /* a full box's height, the rows' spacing */
    double font;         /* micro-batch numbers (pairs: 7/9 of it) */
    double label_w;      /* the row labels' column */
    double label_font;
    bool short_labels;   /* "r3" instead of "rank 3 · GPU 12" */
    double legend_font, sw, sh, legend_line; /* legend samples and its lines' spacing */
    double title_font;
    double pad;          /* Graphviz's pad around the drawing (inches) */
} dims;

/* The micro-batch number drawn in a box w points wide at `fs`, or "" when it does not fit. */
static bool number_fits(const char *label, double fs, double w) { return text_pt(label, fs) + 2 <= w; }

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
    int R = gr->nrows, most = 1;
    for (int r = 0; r < R; r++) most = gr->rows[r].nstages > most ? gr->rows[r].nstages : most;

    /* the title: "ZB-V — p = 4, v = 2, m = 8" */
    char title[256];
    const char *sname = viz_schedule_title_name(o->schedule);
    int m = (int)p->model.num_microbatches;
    if (o->title) snprintf(title, sizeof title, "%s", o->title);
    else if (sname) snprintf(title, sizeof title, "%s \xe2\x80\x94 p = %d, v = %d, m = %d", sname, R, most, m);
    else snprintf(title, sizeof title, "%s \xe2\x80\x94 p = %d, v = %d, m = %d", p->model.name ? p->model.name : "plan",
                  R, most, m);

    dims D = {.boxh = BOX_H * VIZ_PT, .pitch = ROW_PITCH * VIZ_PT, .font = FONT, .label_w = LABEL_W * VIZ_PT,
              .label_font = FONT, .legend_font = 8, .sw = 0.32 * VIZ_PT, .sh = 0.22 * VIZ_PT,
              .legend_line = 0.30 * VIZ_PT, .title_font = 11, .pad = 0.2};
    double W;
    if (o->width_pt > 0) {
        /* a given width: compact rows and labels, the grid takes what the labels leave */
        D.boxh = 11, D.pitch = 14, D.label_font = 7, D.short_labels = true, D.legend_font = 7;
        D.sw = 14, D.sh = 9, D.legend_line = 12, D.pad = 0.04;
        char longest[32];
        snprintf(longest, sizeof longest, "r%d", R - 1);
        D.label_w = text_pt(longest, D.label_font) + 2;
        /* Graphviz rounds the drawing's size up to whole points: keep 2 in hand */
        W = o->width_pt - 2 * D.pad * VIZ_PT - D.label_w - 6 - 2;
        /* and half a tick label ("250 ms") past the grid's right edge */
        if (!o->unit) W -= text_pt("250 ms", 7) / 2;
        if (W < 24) W = 24;
        D.scale = W / T;
        /* numbers as large as the median box allows, up to 8 pt */
        D.font = (median * D.scale - 2) / (0.62 * 2);
        if (D.font > 8) D.font = 8;
        if (D.font < VIZ_MIN_TYPE_PT) D.font = VIZ_MIN_TYPE_PT;
        D.title_font = 9;
        double tw = text_pt(title, D.title_font), avail = o->width_pt - 2 * D.pad * VIZ_PT - 4;
        if (tw > avail) D.title_font = D.title_font * avail / tw;
        if (D.title_font < VIZ_MIN_TYPE_PT) D.title_font = VIZ_MIN_TYPE_PT;
    } else {
        /* points per time unit: the median box at least 24 pt wide, the grid at least 7.5 in, at
         * most 50 in (beyond that a figure is for zooming, not reading) */
        D.scale = 24.0 / median;
        if (T * D.scale < 7.5 * VIZ_PT) D.scale = 7.5 * VIZ_PT / T;
        if (T * D.scale > 50 * VIZ_PT) D.scale = 50 * VIZ_PT / T;
        /* Graphviz rounds node sizes to whole points: whole points per unit keep unit boxes abutting */
        if (o->unit) D.scale = ceil(D.scale);
        W = T * D.scale;
    }
    double scale = D.scale, pitch = D.pitch, boxh = D.boxh;
    bool seconds = !o->unit;

    /* the legend's items, laid out first: it wraps to the grid's width, and the rows sit above it */
    typedef struct item {
        const viz_style *st;  /* sample fill */
        const char *key, *cls, *text, *extra, *label;
        int kind;             /* 0 box, 1 overlapped pair, 2 text only */
        double x, y;
    } item;
    item items[16];
    int nitems = 0;
    bool seen[PLAN_NPASS] = {0}, pairs = false, chunks = false;
    for (size_t k = 0; k < gr->cells.n; k++) {
        seen[gr->cells.v[k].pass] = true;
        pairs |= gr->cells.v[k].partner >= 0;
    }
    for (int r = 0; r < R; r++) chunks |= gr->rows[r].nstages > 1;
    /* which boxes carry no number: counted before the legend is laid out, so it can say so */
    int unnumbered = 0;
    for (int r = 0; r < R; r++)
        for (int32_t k = gr->rows[r].c0; k < gr->rows[r].c1; k++) {
            const cell *c = &gr->cells.v[k];
            if (c->mb < 0) continue;
            double x0 = c->x0, x1 = c->x1;
            if (c->partner >= 0) {
                const cell *q = &gr->cells.v[c->partner];
                x0 = q->x0 < x0 ? q->x0 : x0, x1 = q->x1 > x1 ? q->x1 : x1;
            }
            char num[16];
            snprintf(num, sizeof num, "%d", c->mb);
            double fs = c->partner >= 0 ? D.font * 7 / 9 : D.font;
            if (fs < VIZ_MIN_TYPE_PT) fs = VIZ_MIN_TYPE_PT;
            unnumbered += !number_fits(num, fs, (x1 - x0) * scale);
        }
    static const int ORDER[] = {PLAN_PASS_F, PLAN_PASS_B, PLAN_PASS_BI, PLAN_PASS_BW, PLAN_PASS_R};
    for (size_t i = 0; i < BASE_COUNT(ORDER); i++)
        if (seen[ORDER[i]]) {
            const viz_style *st = viz_pass_style(ORDER[i]);
            items[nitems++] = (item){st, st->key, st->key, st->what, NULL, st->key, 0, 0, 0};
        }
    static const viz_style idle = {"idle", "#f2f2f2", "black", "", "idle"};
    items[nitems++] = (item){&idle, "idle", NULL, "idle", "color=\"#c8c8c8\"", "", 0, 0, 0};
    char chunk_extra[96];
    if (chunks) {
        const viz_style *f = viz_pass_style(PLAN_PASS_F);
        snprintf(chunk_extra, sizeof chunk_extra, "penwidth=2, color=\"%s\"", viz_mark_colour(f->fill));
        items[nitems++] = (item){f, "chunk", NULL, most > 2 ? "a rank's 2nd, 4th, ... model chunk" : "a rank's second model chunk",
                                 chunk_extra, "", 0, 0, 0};
    }
    if (pairs) items[nitems++] = (item){NULL, "overlap", NULL, "overlapped F&B pair", NULL, "", 1, 0, 0};
    char note[128];
    if (unnumbered) {
        snprintf(note, sizeof note, "%s: too narrow for %g pt numbers",
                 unnumbered == (int)gr->cells.n ? "no box numbered" : "unnumbered boxes", VIZ_MIN_TYPE_PT);
        items[nitems++] = (item){NULL, "numbers", NULL, note, NULL, "", 2, 0, 0};
    }
    /* wrap: an item goes on the next line when it would pass the grid's right edge */
    double lx = 0, ly = 0, lf = D.legend_font;
    int nlines = 1;
    for (int i = 0; i < nitems; i++) {
        double tw = text_pt(items[i].text, lf) + 4, iw = (items[i].kind == 2 ? 0 : D.sw + 4) + tw;
        if (lx > 0 && lx + iw > W) lx = 0, ly -= D.legend_line, nlines++;
        items[i].x = lx, items[i].y = ly;
        lx += iw + 12;
    }

    /* from the bottom: the legend's lines, the axis (rule, tick labels, caption), the rows */
    double legend_y = 0, rule_y = legend_y + (seconds ? 0.62 : 0.32) * VIZ_PT;
    if (o->width_pt > 0) rule_y = legend_y + (seconds ? 30 : 16);
    double row0_y = rule_y + (o->width_pt > 0 ? 0.5 * pitch + 4 : 0.36 * VIZ_PT) + (R - 1) * pitch;

    base_buf_puts(dot, "digraph schedule {\n");
    base_buf_printf(dot, "  graph [bgcolor=white, pad=%.2f, fontname=\"%s\"];\n", D.pad, VIZ_FONT);
    base_buf_printf(dot, "  node [fontname=\"%s\", fontsize=%.1f];\n", VIZ_FONT, FONT);

    /* the title, centred over the whole figure (labels and grid) */
    double title_x = o->width_pt > 0 ? (W - 6 - D.label_w) / 2 : W / 2;
    viz_dot_text(dot, "title", "title", title_x, row0_y + (o->width_pt > 0 ? 0.5 * boxh + 0.9 * D.title_font : 0.55 * VIZ_PT),
                 title, D.title_font, 'c', 0, NULL);

    char name[64], id[96], label[64];
    for (int r = 0; r < R; r++) {
        const row *rw = &gr->rows[r];
        double y = row0_y - r * pitch;
        if (D.short_labels) snprintf(label, sizeof label, "r%d", r);
        else snprintf(label, sizeof label, "rank %d \xc2\xb7 GPU %d", r, rw->dev);
        snprintf(name, sizeof name, "rowlabel%d", r);
        snprintf(id, sizeof id, "label-r%d", r);
        viz_dot_text(dot, name, id, -6 - D.label_w / 2, y, label, D.label_font, 'r', D.label_w / VIZ_PT, NULL);
        /* the lane behind the boxes: what shows through between them is idle time */
        snprintf(name, sizeof name, "lane%d", r);
        snprintf(id, sizeof id, "lane-r%d", r);
        viz_dot_box(dot, name, id, "lane", W / 2, y, W / VIZ_PT, (boxh + 3) / VIZ_PT, &idle, "", FONT,
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
            /* a rank's later model chunks (interleaved, V shapes) get a thick outline in the
             * colour that contrasts most with the fill: which of the rank's stages a box
             * belongs to then shows on every fill, survives greyscale and needs no extra hue */
            int chunk = 0;
            while (chunk < rw->nstages && rw->stages[chunk] != c->stage) chunk++;
            char cls[48];
            snprintf(cls, sizeof cls, "box %s%s%s", st->key, c->partner >= 0 ? " overlap" : "", chunk % 2 ? " chunk2" : "");
            if (c->mb >= 0) snprintf(label, sizeof label, "%d", c->mb);
            else label[0] = 0;
            double fs = c->partner >= 0 ? D.font * 7 / 9 : D.font;
            if (fs < VIZ_MIN_TYPE_PT) fs = VIZ_MIN_TYPE_PT;
            if (!number_fits(label, fs, w)) label[0] = 0; /* the legend says so; the id keeps it */
            char tip[160], extra[256];
            snprintf(tip, sizeof tip, "%s stage %d mb %d: %.4g to %.4g %s", st->key, c->stage, c->mb, c->x0, c->x1,
                     seconds ? "s" : "units");
            int ne = snprintf(extra, sizeof extra, "tooltip=\"%s\"", tip);
            if (chunk % 2) {
                double pw = w / 4 < 2 ? w / 4 : 2;
                if (pw < 0.8) pw = 0.8;
                snprintf(extra + ne, sizeof extra - (size_t)ne, ", penwidth=%.2f, color=\"%s\"", pw,
                         viz_mark_colour(st->fill));
            }
            snprintf(name, sizeof name, "c%d", k);
            viz_dot_box(dot, name, id, cls, (x0 * scale + w / 2), yc, w / VIZ_PT, h / VIZ_PT, st, label, fs, extra);
        }
    }

    /* time axis: a rule with ticks in the unit that suits the makespan */
    double cap_font = o->width_pt > 0 ? 7 : 8;
    if (seconds) {
        viz_style ink = {"axis", "black", "black", "", ""};
        viz_dot_box(dot, "axis", "axis", "axis", W / 2, rule_y, W / VIZ_PT, 0.6 / VIZ_PT, &ink, "", FONT, "penwidth=0");
        /* as many ticks as their labels leave room for */
        int want = o->width_pt > 0 ? (int)(W / 40) : 8;
        double step = viz_nice_step(T, want < 2 ? 2 : want);
        for (int k = 0; k * step <= T * (1 + 1e-9); k++) {
            double x = k * step * scale;
            char t[32];
            snprintf(name, sizeof name, "tick%d", k);
            snprintf(id, sizeof id, "tick-%d", k);
            viz_dot_box(dot, name, id, "tick", x, rule_y - 2, 0.6 / VIZ_PT, 4 / VIZ_PT, &ink, "", FONT, "penwidth=0");
            snprintf(name, sizeof name, "ticklabel%d", k);
            viz_dot_text(dot, name, NULL, x, rule_y - 10, viz_fmt_seconds(k * step, t, sizeof t), cap_font, 'c', 0, NULL);
        }
        char cap[160];
        if (timed) snprintf(cap, sizeof cap, "time (static cost model, %s)", p->gpu.name ? p->gpu.name : "GPU");
        else snprintf(cap, sizeof cap, "time (roofline on %s, no communication)", p->gpu.name ? p->gpu.name : "GPU");
        viz_dot_text(dot, "axislabel", "axis-caption", W / 2, rule_y - (o->width_pt > 0 ? 19 : 22), cap, cap_font, 'c', 0,
                     NULL);
    } else {
        viz_dot_text(dot, "axislabel", "axis-caption", W / 2, rule_y - 6, "one unit per action (--unit): the order, not "
                     "the time", cap_font, 'c', 0, NULL);
    }

    /* the legend, as laid out above */
    double sw = D.sw, sh = D.sh;
    for (int i = 0; i < nitems; i++) {
        const item *it = &items[i];
        double x = it->x, y = legend_y + it->y, tw = text_pt(it->text, lf) + 4;
        snprintf(name, sizeof name, "legend_%s", it->key);
        snprintf(id, sizeof id, "legend-%s", it->key);
        if (it->kind == 0) {
            char cls[32];
            snprintf(cls, sizeof cls, "legend%s%s", it->cls ? " " : "", it->cls ? it->cls : "");
            const char *sample = it->label && number_fits(it->label, lf, sw) ? it->label : "";
            viz_dot_box(dot, name, id, cls, x + sw / 2, y, sw / VIZ_PT, sh / VIZ_PT, it->st, sample, lf, it->extra);
        } else if (it->kind == 1) {
            const viz_style *f = viz_pass_style(PLAN_PASS_F), *b = viz_pass_style(PLAN_PASS_B);
            viz_dot_box(dot, "legend_pair_f", "legend-overlap", "legend", x + sw / 2, y + sh / 4, sw / VIZ_PT,
                        sh / 2 / VIZ_PT, f, "", 6, NULL);
            viz_dot_box(dot, "legend_pair_b", NULL, "legend", x + sw / 2, y - sh / 4, sw / VIZ_PT, sh / 2 / VIZ_PT, b, "",
                        6, NULL);
        }
        double tx = it->kind == 2 ? x : x + sw + 4;
        snprintf(name, sizeof name, "legendtext_%s", it->key);
        snprintf(id, sizeof id, "legendtext-%s", it->key);
        viz_dot_text(dot, name, id, tx + tw / 2, y, it->text, lf, 'l', tw / VIZ_PT, NULL);
    }
    (void)nlines;
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
