/* test_viz.c — piper-viz's figures read back: programs are compiled through the real path
 * (sched_compile), drawn, rendered by Graphviz, and the SVG is parsed for the boxes the figure
 * promises (ids such as "r2-F-5", classes such as "box F"), so the tests check structure with
 * known answers — 64 boxes of a 4-rank, 8-micro-batch 1F1B in the 1F1B order, ZB-H1's BI and BW
 * boxes, overlapped pairs as half boxes, equal widths with --unit, widths proportional to the
 * roofline cost, one lane per (pid, tid) of a trace, DAG node counts per collapse mode — plus the
 * timing callback of the static check the grid is placed by, and the error paths. Fixtures are in
 * tests/fixtures/viz/ and tests/fixtures/sched/. */
#include <graphviz/cgraph.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir/doc.h"
#include "sim/sim.h"
#include "tests/testutil.h"
#include "viz/viz.h"
#include "viz/viz_internal.h"

/* ---------------------------------------------------------------- helpers */

typedef struct compiled {
    sched_compilation c;
    base_error e;
    int rc;
} compiled;

static compiled *compile_rel(const char *rel, const sched_options *o)
{
    compiled *r = calloc(1, sizeof *r);
    sched_compilation_init(&r->c);
    base_error_clear(&r->e);
    sched_options dflt = {0};
    r->rc = sched_compile(&r->c, test_src_path(rel), NULL, NULL, o ? o : &dflt, &r->e);
    if (r->rc) fprintf(stderr, "\n  compiling %s: %s\n", rel, r->e.msg);
    return r;
}

static void compiled_free(compiled *r)
{
    sched_compilation_free(&r->c);
    free(r);
}

/* One node of a rendered SVG: its id (entities undone), class, and polygon's bounding box. */
typedef struct svg_box {
    char id[64], cls[64];
    char fill[16], stroke[16];   /* of the first polygon or path */
    double x0, x1, y0, y1;
    bool has_poly, dashed;
} svg_box;

/* The value of attribute `attr` ("fill=\"") inside [from, to) into out. */
static void svg_attr(const char *from, const char *to, const char *attr, char *out, size_t cap)
{
    out[0] = 0;
    const char *a = strstr(from, attr);
    if (!a || a > to) return;
    a += strlen(attr);
    size_t n = strcspn(a, "\"");
    snprintf(out, cap, "%.*s", (int)n, a);
}

typedef struct svg {
    svg_box *b;
    int n;
} svg;

static void unescape(const char *s, size_t n, char *out, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < cap; i++) {
        if (!strncmp(s + i, "&#45;", 5)) out[k++] = '-', i += 4;
        else if (!strncmp(s + i, "&amp;", 5)) out[k++] = '&', i += 4;
        else out[k++] = s[i];
    }
    out[k] = 0;
}

/* Every <g id=".." class=".."> group (nodes, edges, clusters), with the first polygon or path in it. */
static svg svg_parse(const char *text)
{
    svg r = {0};
    int cap = 0;
    for (const char *p = strstr(text, "<g id=\""); p; p = strstr(p + 1, "<g id=\"")) {
        const char *id = p + 7, *idend = strchr(id, '"');
        if (!idend || strncmp(idend, "\" class=\"", 9)) continue;
        const char *cls = idend + 9, *clsend = strchr(cls, '"');
        if (!clsend) break;
        if (r.n == cap) {
            cap = cap ? 2 * cap : 256;
            r.b = realloc(r.b, (size_t)cap * sizeof *r.b);
        }
        svg_box *b = &r.b[r.n++];
        memset(b, 0, sizeof *b);
        unescape(id, (size_t)(idend - id), b->id, sizeof b->id);
        unescape(cls, (size_t)(clsend - cls), b->cls, sizeof b->cls);
        const char *end = strstr(clsend, "</g>");
        const char *poly = strstr(clsend, "<polygon");
        const char *path = strstr(clsend, "<path");
        const char *shape = poly && (!path || poly < path) ? poly : path;
        if (!shape || (end && shape > end)) continue;
        const char *close = strchr(shape, '>');
        const char *dash = strstr(shape, "stroke-dasharray");
        b->dashed = dash && dash < close;
        svg_attr(shape, close, "fill=\"", b->fill, sizeof b->fill);
        svg_attr(shape, close, "stroke=\"", b->stroke, sizeof b->stroke);
        const char *pts = strstr(shape, poly == shape ? "points=\"" : " d=\"");
        if (!pts || pts > close) continue;
        pts = strchr(pts, '"') + 1;
        b->x0 = b->y0 = INFINITY, b->x1 = b->y1 = -INFINITY;
        const char *q = pts;
        while (*q && *q != '"') {
            while (*q && *q != '"' && !(*q == '-' || *q == '.' || (*q >= '0' && *q <= '9'))) q++;
            char *e1;
            double x = strtod(q, &e1);
            if (e1 == q || *e1 != ',') break;
            double y = strtod(e1 + 1, (char **)&q);
            if (x < b->x0) b->x0 = x;
            if (x > b->x1) b->x1 = x;
            if (y < b->y0) b->y0 = y;
            if (y > b->y1) b->y1 = y;
            b->has_poly = true;
        }
    }
    return r;
}

static const svg_box *svg_find(const svg *s, const char *id)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->b[i].id, id)) return &s->b[i];
    return NULL;
}

/* Does the space-separated class list contain `word`? */
static bool has_class(const svg_box *b, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = b->cls; (p = strstr(p, word)); p += n)
        if ((p == b->cls || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return true;
    return false;
}

static int count_class(const svg *s, const char *word)
{
    int n = 0;
    for (int i = 0; i < s->n; i++) n += has_class(&s->b[i], word);
    return n;
}

/* dot text -> SVG text (caller frees) */
static char *render_svg(const base_buf *dot, const char *engine)
{
    base_buf out = {0};
    base_error e;
    base_error_clear(&e);
    int rc = viz_render_data(dot->s, engine, VIZ_FMT_SVG, &out, &e);
    if (rc) fprintf(stderr, "\n  render: %s\n", e.msg);
    CU_ASSERT_EQUAL(rc, 0);
    return out.s;
}

static svg schedule_svg(const plan_set *p, const viz_schedule_options *o, base_error *e)
{
    base_buf dot = {0};
    int rc = viz_schedule(p, o, &dot, e);
    if (rc) fprintf(stderr, "\n  schedule: %s\n", e->msg);
    CU_ASSERT_EQUAL(rc, 0);
    svg s = {0};
    if (!rc) {
        char *text = render_svg(&dot, "nop");
        if (text) s = svg_parse(text);
        free(text);
    }
    free(dot.s);
    return s;
}

/* Boxes of rank r (class "box"), sorted by their left edge. */
static int row_boxes(const svg *s, int r, const svg_box **out, int cap)
{
    char pre[24];
    int n = 0, len = snprintf(pre, sizeof pre, "r%d-", r);
    for (int i = 0; i < s->n && n < cap; i++)
        if (has_class(&s->b[i], "box") && !strncmp(s->b[i].id, pre, (size_t)len)) out[n++] = &s->b[i];
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && out[j - 1]->x0 > out[j]->x0; j--) {
            const svg_box *t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

/* ---------------------------------------------------------------- the schedule grid */

/* 1F1B (PipeDream-flush) on p ranks, m micro-batches: rank r runs min(p-r-1, m) warm-up
 * forwards, then alternates one forward and one backward, then drains the backwards. */
static void one_f_one_b(int p, int m, int r, char seq[][32])
{
    int warm = p - r - 1 < m ? p - r - 1 : m, f = 0, b = 0, k = 0;
    while (f < warm) snprintf(seq[k++], 32, "r%d-F-%d", r, f++);
    while (f < m) {
        snprintf(seq[k++], 32, "r%d-F-%d", r, f++);
        snprintf(seq[k++], 32, "r%d-B-%d", r, b++);
    }
    while (b < m) snprintf(seq[k++], 32, "r%d-B-%d", r, b++);
}

static void test_schedule_1f1b(void)
{
    compiled *c = compile_rel("configs/programs/pp4_1f1b.yaml", NULL);
    CU_ASSERT_EQUAL_FATAL(c->rc, 0);
    viz_schedule_options o = {0};
    svg s = schedule_svg(&c->c.plan, &o, &c->e);
    /* 4 ranks x (8 F + 8 B) */
    CU_ASSERT_EQUAL(count_class(&s, "box"), 64);
    CU_ASSERT_EQUAL(count_class(&s, "F"), 32 + 1); /* + the legend's sample */
    CU_ASSERT_EQUAL(count_class(&s, "overlap"), 0);
    for (int r = 0; r < 4; r++) {
        const svg_box *row[32];
        int n = row_boxes(&s, r, row, 32);
        CU_ASSERT_EQUAL(n, 16);
        char want[16][32];
        one_f_one_b(4, 8, r, want);
        for (int k = 0; k < n && k < 16; k++) {
            if (strcmp(row[k]->id, want[k]))
                fprintf(stderr, "\n  rank %d slot %d: %s, expected %s\n", r, k, row[k]->id, want[k]);
            CU_ASSERT_STRING_EQUAL(row[k]->id, want[k]);
            /* a rank runs one action at a time: no box starts before the previous one ends
             * (Graphviz rounds sizes to whole points) */
            if (k) CU_ASSERT(row[k]->x0 >= row[k - 1]->x1 - 1.0);
        }
        /* every row but the last idles in its warm-up / cool-down: a gap between some boxes */
        double gap = 0;
        for (int k = 1; k < n; k++) gap = fmax(gap, row[k]->x0 - row[k - 1]->x1);
        if (r == 0) CU_ASSERT(gap > 10);
    }
    /* the legend and the axis */
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "legend-F"));
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "legend-B"));
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "legend-idle"));
    CU_ASSERT_PTR_NULL(svg_find(&s, "legend-BI"));
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "axis"));
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "tick-1"));
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "lane-r3"));
    /* rank 0 is drawn above rank 3 (SVG y grows downwards) */
    const svg_box *a = svg_find(&s, "r0-F-0"), *b = svg_find(&s, "r3-F-0");
    CU_ASSERT_FATAL(a && b);
    CU_ASSERT(a->y1 < b->y0);
    /* each rank's F 0 starts after the previous rank's F 0 ends: the pipeline fills */
    for (int r = 1; r < 4; r++) {
        char x[16], y[16];
        snprintf(x, sizeof x, "r%d-F-0", r - 1);
        snprintf(y, sizeof y, "r%d-F-0", r);
        const svg_box *p = svg_find(&s, x), *q = svg_find(&s, y);
        CU_ASSERT_FATAL(p && q);
        CU_ASSERT(q->x0 >= p->x1 - 1.0);
    }
    free(s.b);
    compiled_free(c);
}

/* Box widths are the roofline cost: on a middle stage (no embedding, no head), B / F of the SVG
 * equals the ratio of the two actions' kernel-list times computed here from the plan. */
static void test_schedule_widths_are_costs(void)
{
    compiled *c = compile_rel("configs/programs/pp4_1f1b.yaml", NULL);
    CU_ASSERT_EQUAL_FATAL(c->rc, 0);
    const plan_set *p = &c->c.plan;
    double cost[2] = {0, 0};
    const plan_list *L = plan_dev_list(p, 1);
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        if (in->op != PLAN_COMPUTE || in->mb != 3 || in->kernels < 0) continue;
        if (in->pass != PLAN_PASS_F && in->pass != PLAN_PASS_B) continue;
        const plan_kernel_list *kl = &p->kernel_lists[in->kernels];
        for (int k = 0; k < kl->n; k++) {
            const plan_kernel *kn = &kl->k[k];
            double fl = kn->flops / p->gpu.peak_flops[kn->dtype], by = kn->bytes / p->gpu.hbm_bw;
            cost[in->pass == PLAN_PASS_B] += fl > by ? fl : by;
        }
    }
    CU_ASSERT_FATAL(cost[0] > 0 && cost[1] > 0);
    viz_schedule_options o = {0};
    svg s = schedule_svg(p, &o, &c->e);
    const svg_box *f = svg_find(&s, "r1-F-3"), *b = svg_find(&s, "r1-B-3");
    CU_ASSERT_FATAL(f && b);
    double wf = f->x1 - f->x0, wb = b->x1 - b->x0;
    double want = cost[1] / cost[0], got = wb / wf;
    if (fabs(got - want) > 0.1 * want) fprintf(stderr, "\n  B/F width %g, cost ratio %g\n", got, want);
    CU_ASSERT(fabs(got - want) <= 0.1 * want);
    free(s.b);
    compiled_free(c);
}

static void test_schedule_unit_widths(void)
{
    compiled *c = compile_rel("configs/programs/pp4_1f1b.yaml", NULL);
    CU_ASSERT_EQUAL_FATAL(c->rc, 0);
    viz_schedule_options o = {.unit = true};
    svg s = schedule_svg(&c->c.plan, &o, &c->e);
    CU_ASSERT_EQUAL(count_class(&s, "box"), 64);
    double w0 = -1;
    int unequal = 0;
    for (int i = 0; i < s.n; i++) {
        if (!has_class(&s.b[i], "box")) continue;
        double w = s.b[i].x1 - s.b[i].x0;
        if (w0 < 0) w0 = w;
        unequal += fabs(w - w0) > 0.01;
    }
    CU_ASSERT(w0 > 0);
    CU_ASSERT_EQUAL(unequal, 0);
    /* the 1F1B picture of the papers: with unit steps the last rank starts at slot p-1 = 3, and
     * the step takes m(F+B) + (p-1)(F+B) = 16 + 6 = 22 slots (formulas.md), rank 0 ending last */
    const svg_box *first = svg_find(&s, "r3-F-0"), *zero = svg_find(&s, "r0-F-0"), *last = svg_find(&s, "r0-B-7");
    CU_ASSERT_FATAL(first && zero && last);
    const svg_box *one = svg_find(&s, "r0-F-1");
    CU_ASSERT_FATAL(one != NULL);
    double unit = one->x0 - zero->x0;
    CU_ASSERT(fabs(unit - w0) < 0.01); /* boxes abut */
    CU_ASSERT(fabs((first->x0 - zero->x0) / unit - 3) < 0.01);
    CU_ASSERT(fabs((last->x1 - zero->x0) / unit - 22) < 0.01);
    CU_ASSERT_PTR_NULL(svg_find(&s, "axis")); /* units are not time */
    free(s.b);
    compiled_free(c);
}

static void test_schedule_zbh1(void)
{
    compiled *c = compile_rel("configs/programs/pp4_zbh1.yaml", NULL);
    CU_ASSERT_EQUAL_FATAL(c->rc, 0);
    viz_schedule_options o = {0};
    svg s = schedule_svg(&c->c.plan, &o, &c->e);
    /* every backward split: 8 F, 8 BI, 8 BW per rank */
    CU_ASSERT_EQUAL(count_class(&s, "box"), 96);
    int bi = 0, bw = 0, b = 0;
    for (int i = 0; i < s.n; i++) {
        if (!has_class(&s.b[i], "box")) continue;
        bi += has_class(&s.b[i], "BI");
        bw += has_class(&s.b[i], "BW");
        b += has_class(&s.b[i], "B");
    }
    CU_ASSERT_EQUAL(bi, 32);
    CU_ASSERT_EQUAL(bw, 32);
    CU_ASSERT_EQUAL(b, 0);
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "legend-BI"));
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "legend-BW"));
    CU_ASSERT_PTR_NULL(svg_find(&s, "legend-B"));
    /* a weight half never starts before its input half ends */
    for (int r = 0; r < 4; r++)
        for (int m = 0; m < 8; m++) {
            char x[16], y[16];
            snprintf(x, sizeof x, "r%d-BI-%d", r, m);
            snprintf(y, sizeof y, "r%d-BW-%d", r, m);
            const svg_box *i = svg_find(&s, x), *w = svg_find(&s, y);
            CU_ASSERT_FATAL(i && w);
            CU_ASSERT(w->x0 >= i->x1 - 1.0);
        }
    /* ZB-H1 defers weight halves into the cool-down, where 1F1B idles: rank 0 runs BW 0 right
     * after BI 0, the last rank holds its W's back and ends with four in a row (BW 4..7) */
    const svg_box *row[32];
    int n = row_boxes(&s, 0, row, 32);
    CU_ASSERT_EQUAL(n, 24);
    for (int k = 0; k + 1 < n; k++)
        if (!strcmp(row[k]->id, "r0-BI-0")) CU_ASSERT_STRING_EQUAL(row[k + 1]->id, "r0-BW-0");
    n = row_boxes(&s, 3, row, 32);
    CU_ASSERT_EQUAL(n, 24);
    if (n == 24)
        for (int k = 20; k < 24; k++) CU_ASSERT(has_class(row[k], "BW"));
    free(s.b);
    compiled_free(c);
}

static void test_schedule_overlapped_pair(void)
{
    compiled *c = compile_rel("tests/fixtures/viz/pp2_overlap.yaml", NULL);
    CU_ASSERT_EQUAL_FATAL(c->rc, 0);
    viz_pair *pairs = NULL;
    int np = 0;
    viz_pairs_from_program(&c->c, &pairs, &np);
    CU_ASSERT_EQUAL(np, 1);
    if (np == 1) {
        CU_ASSERT_EQUAL(pairs[0].a.stage, 1);
        CU_ASSERT_EQUAL(pairs[0].a.pass, PLAN_PASS_F);
        CU_ASSERT_EQUAL(pairs[0].a.mb, 1);
        CU_ASSERT_EQUAL(pairs[0].b.pass, PLAN_PASS_B);
        CU_ASSERT_EQUAL(pairs[0].b.mb, 0);
    }
    viz_schedule_options o = {.unit = true, .pairs = pairs, .npairs = np};
    svg s = schedule_svg(&c->c.plan, &o, &c->e);
    CU_ASSERT_EQUAL(count_class(&s, "box"), 16);
    CU_ASSERT_EQUAL(count_class(&s, "overlap"), 2);
    const svg_box *f = svg_find(&s, "r1-F-1"), *b = svg_find(&s, "r1-B-0"), *full = svg_find(&s, "r1-F-0");
    CU_ASSERT_FATAL(f && b && full);
    CU_ASSERT(has_class(f, "overlap") && has_class(b, "overlap"));
    /* one slot: same x extent; two halves: half the height, F above B */
    CU_ASSERT(fabs(f->x0 - b->x0) < 0.5 && fabs(f->x1 - b->x1) < 0.5);
    double h = full->y1 - full->y0;
    CU_ASSERT(fabs((f->y1 - f->y0) - h / 2) < 1.0);
    CU_ASSERT(fabs((b->y1 - b->y0) - h / 2) < 1.0);
    CU_ASSERT(f->y1 <= b->y0 + 0.5);
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "legend-overlap"));
    free(s.b);
    /* without the program's word, the plan alone runs B0 and F1 one after the other: no pair */
    viz_schedule_options plain = {.unit = true};
    s = schedule_svg(&c->c.plan, &plain, &c->e);
    CU_ASSERT_EQUAL(count_class(&s, "overlap"), 0);
    free(s.b);
    free(pairs);
    compiled_free(c);
}

/* DualPipe (p = 4, m = 8): its overlapped F&B pairs drawn as such. schedules.md's steps give each
 * rank (h = min(r, p-1-r), H = p/2) 2(m/2 - p + h + 1) pairs in step 4, less the first one on the
 * middle ranks (h = H-1), plus H-h-1 in step 5: 3 on every rank here, 12 pairs, 24 half boxes. */
static void test_schedule_dualpipe_pairs(void)
{
    compiled *c = compile_rel("tests/fixtures/schedules/dualpipe_p4_m8.yaml", NULL);
    CU_ASSERT_EQUAL_FATAL(c->rc, 0);
    viz_pair *pairs = NULL;
    int np = 0;
    viz_pairs_from_program(&c->c, &pairs, &np);
    const int p = 4, m = 8, H = p / 2;
    int want = 0;
    for (int r = 0; r < p; r++) {
        int h = r < p - 1 - r ? r : p - 1 - r;
        want += 2 * (m / 2 - p + h + 1) - (h == H - 1) + (H - h - 1);
    }
    CU_ASSERT_EQUAL(want, 12);
    CU_ASSERT_EQUAL(np, want);
    viz_schedule_options o = {.unit = true, .pairs = pairs, .npairs = np};
    svg s = schedule_svg(&c->c.plan, &o, &c->e);
    CU_ASSERT_EQUAL(count_class(&s, "overlap"), 2 * want);
    /* every rank runs 2 stages x m/2 micro-batches of F, and of B or BI + BW */
    CU_ASSERT(count_class(&s, "box") >= 2 * p * m);
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "legend-overlap"));
    free(s.b);
    free(pairs);
    compiled_free(c);
}

/* A plan file draws the same grid as the program it came from. */
static void test_schedule_from_plan_file(void)
{
    compiled *c = compile_rel("tests/fixtures/sched/pp4_1f1b_tiny.yaml", NULL);
    CU_ASSERT_EQUAL_FATAL(c->rc, 0);
    char path[] = "/tmp/piper_viz_planXXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    close(fd);
    CU_ASSERT_EQUAL_FATAL(plan_write_file(&c->c.plan, path, &c->e), 0);
    plan_set p;
    CU_ASSERT_EQUAL_FATAL(plan_read_file(&p, path, &c->e), 0);
    unlink(path);
    viz_schedule_options o = {0};
    base_buf a = {0}, b = {0};
    CU_ASSERT_EQUAL(viz_schedule(&c->c.plan, &o, &a, &c->e), 0);
    CU_ASSERT_EQUAL(viz_schedule(&p, &o, &b, &c->e), 0);
    CU_ASSERT_FATAL(a.s && b.s);
    CU_ASSERT_STRING_EQUAL(a.s, b.s);
    svg s = schedule_svg(&p, &o, &c->e);
    CU_ASSERT_EQUAL(count_class(&s, "box"), 64);
    free(s.b);
    free(a.s);
    free(b.s);
    plan_free(&p);
    compiled_free(c);
}

/* A plan whose static run deadlocks (1F1B without sendrecv groups) is still drawn, from a replay,
 * with a warning that says why. */
static void test_schedule_deadlocked_plan(void)
{
    sched_options so = {.no_sendrecv_groups = true, .no_check = true};
    compiled *c = compile_rel("tests/fixtures/sched/pp4_1f1b_tiny.yaml", &so);
    CU_ASSERT_EQUAL_FATAL(c->rc, 0);
    base_error e;
    base_error_clear(&e);
    viz_schedule_options o = {0};
    svg s = schedule_svg(&c->c.plan, &o, &e);
    CU_ASSERT_EQUAL(count_class(&s, "box"), 64);
    TEST_ASSERT_CONTAINS(e.warnings, "static run fails (deadlock");
    TEST_ASSERT_CONTAINS(e.warnings, "replay");
    free(s.b);
    compiled_free(c);
}

/* The SVG's own width and height in points (<svg width="250pt" height="148pt">). */
static void svg_size(const char *text, double *w, double *h)
{
    *w = *h = -1;
    const char *p = text ? strstr(text, "<svg width=\"") : NULL;
    if (!p) return;
    *w = strtod(p + 12, NULL);
    const char *q = strstr(p, "height=\"");
    if (q) *h = strtod(q + 8, NULL);
}

/* A schedule drawn and rendered: its SVG text (caller frees) and its laid-out dot read back with
 * cgraph (node positions and widths, for the text nodes the SVG gives no box). */
static char *schedule_text(const plan_set *p, const viz_schedule_options *o, Agraph_t **laid)
{
    base_buf dot = {0}, gv = {0};
    base_error e;
    base_error_clear(&e);
    int rc = viz_schedule(p, o, &dot, &e);
    if (rc) fprintf(stderr, "\n  schedule: %s\n", e.msg);
    CU_ASSERT_EQUAL(rc, 0);
    char *text = rc ? NULL : render_svg(&dot, "nop");
    if (laid) {
        *laid = NULL;
        if (!rc && viz_render_data(dot.s, "nop", VIZ_FMT_DOT, &gv, &e) == 0) *laid = agmemread(gv.s);
    }
    free(dot.s);
    free(gv.s);
    return text;
}

/* A node's horizontal extent in the laid-out graph (points). */
static bool node_extent(Agraph_t *g, const char *name, double *x0, double *x1)
{
    Agnode_t *n = agnode(g, (char *)name, 0);
    if (!n) return false;
    char *pos = agget(n, "pos"), *width = agget(n, "width");
    if (!pos || !width) return false;
    double x = strtod(pos, NULL), w = strtod(width, NULL) * 72;
    *x0 = x - w / 2, *x1 = x + w / 2;
    return true;
}

/* The title names the schedule, p, v and m: from the program's builder, else the model. */
static void test_schedule_title(void)
{
    compiled *c = compile_rel("configs/programs/pp4_interleaved.yaml", NULL);
    CU_ASSERT_EQUAL_FATAL(c->rc, 0);
    CU_ASSERT_STRING_EQUAL(viz_schedule_of_program(&c->c), "interleaved-1f1b");
    viz_schedule_options o = {.schedule = viz_schedule_of_program(&c->c)};
    char *text = schedule_text(&c->c.plan, &o, NULL);
    TEST_ASSERT_CONTAINS(text, ">Interleaved 1F1B \xe2\x80\x94 p = 4, v = 2, m = 8<");
    free(text);
    compiled_free(c);
    c = compile_rel("configs/programs/pp4_zbv.yaml", NULL);
    CU_ASSERT_EQUAL_FATAL(c->rc, 0);
    o.schedule = viz_schedule_of_program(&c->c);
    text = schedule_text(&c->c.plan, &o, NULL);
    TEST_ASSERT_CONTAINS(text, ">ZB&#45;V \xe2\x80\x94 p = 4, v = 2, m = 8<"); /* SVG escapes '-' */
    /* a plan file does not record its schedule: the model's name instead */
    o.schedule = NULL;
    free(text);
    text = schedule_text(&c->c.plan, &o, NULL);
    TEST_ASSERT_CONTAINS(text, "\xe2\x80\x94 p = 4, v = 2, m = 8<");
    CU_ASSERT(strstr(text, "ZB&#45;V") == NULL);
    free(text);
    compiled_free(c);
    /* a program without a schedule or order directive gets the compiler's default, 1F1B */
    c = compile_rel("configs/programs/pp2_dp2_ep2_qwen3.yaml", NULL);
    CU_ASSERT_EQUAL_FATAL(c->rc, 0);
    const char *b = viz_schedule_of_program(&c->c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_STRING_EQUAL(viz_schedule_title_name(b), "1F1B");
    compiled_free(c);
    /* one written with its own orders names no builder */
    c = compile_rel("tests/fixtures/sched/pp4_1f1b_tiny.yaml", NULL);
    CU_ASSERT_EQUAL_FATAL(c->rc, 0);
    CU_ASSERT_PTR_NULL(viz_schedule_of_program(&c->c));
    compiled_free(c);
    CU_ASSERT_STRING_EQUAL(viz_schedule_title_name("DUALPIPEV"), "DualPipeV");
    CU_ASSERT_STRING_EQUAL(viz_schedule_title_name("my-order"), "my-order");
}

/* --width: ZB-V and DualPipeV at p = 8 (16 micro-batches) in a paper column: the SVG is no wider
 * than asked, the legend wraps inside the grid's width, and the boxes that carry no number are
 * said to in the legend; the natural figure is many times wider. */
static void test_schedule_width(void)
{
    const char *progs[] = {"tests/fixtures/viz/pp8_zbv.yaml", "tests/fixtures/viz/pp8_dualpipev.yaml"};
    sched_options so = {.allow_oom = true};
    for (size_t k = 0; k < BASE_COUNT(progs); k++) {
        compiled *c = compile_rel(progs[k], &so);
        CU_ASSERT_EQUAL_FATAL(c->rc, 0);
        viz_schedule_options o = {.schedule = viz_schedule_of_program(&c->c)};
        double w, h;
        char *text = schedule_text(&c->c.plan, &o, NULL);
        svg_size(text, &w, &h);
        CU_ASSERT(w > 2000); /* the natural figure: 24 pt per median box */
        free(text);
        for (int pass = 0; pass < 2; pass++) {
            o.width_pt = pass ? 400 : VIZ_COLUMN_IN * 72;
            Agraph_t *g = NULL;
            text = schedule_text(&c->c.plan, &o, &g);
            svg_size(text, &w, &h);
            if (w > o.width_pt) fprintf(stderr, "\n  %s: %g pt wide for --width %g\n", progs[k], w, o.width_pt);
            CU_ASSERT(w > 0 && w <= o.width_pt);
            CU_ASSERT(w >= o.width_pt - 40); /* and uses it */
            TEST_ASSERT_CONTAINS(text, "p = 8, v = 2, m = 16");
            /* every rank's boxes: 16 micro-batches x 2 chunks of F, and of B or BI + BW */
            svg s = svg_parse(text);
            CU_ASSERT(count_class(&s, "box") >= 8 * 2 * 16 * 2);
            /* the legend: inside the grid's width (the lane's extent) */
            CU_ASSERT_FATAL(g != NULL);
            double gx0, gx1, x0, x1;
            CU_ASSERT_FATAL(node_extent(g, "lane0", &gx0, &gx1));
            int items = 0;
            for (Agnode_t *n = agfstnode(g); n; n = agnxtnode(g, n)) {
                if (strncmp(agnameof(n), "legend", 6)) continue;
                CU_ASSERT(node_extent(g, agnameof(n), &x0, &x1));
                if (x0 < gx0 - 0.5 || x1 > gx1 + 0.5)
                    fprintf(stderr, "\n  legend node %s spans %g..%g, the grid %g..%g\n", agnameof(n), x0, x1, gx0, gx1);
                CU_ASSERT(x0 >= gx0 - 0.5 && x1 <= gx1 + 0.5);
                items++;
            }
            CU_ASSERT(items >= 10);
            /* the legend wrapped: its samples are on more than one line */
            const svg_box *f = svg_find(&s, "legend-F"), *chunk = svg_find(&s, "legend-chunk");
            CU_ASSERT_FATAL(f && chunk);
            CU_ASSERT(chunk->y0 > f->y1);
            /* in a column most boxes are narrower than a number at 5 pt: the legend says so */
            if (pass == 0) TEST_ASSERT_CONTAINS(text, "too narrow for 5 pt numbers");
            free(s.b);
            free(text);
            agclose(g);
        }
        compiled_free(c);
    }
}

/* A rank's second model chunk is marked on every fill: its outline is the mark colour of its fill,
 * which contrasts with it at least 3:1 (WCAG's figure for graphics), for every style of the
 * palette; and in a V schedule's grid every chunk-2 box carries it, on each fill present. */
static void test_schedule_chunk_mark(void)
{
    for (int pass = 0; pass <= PLAN_NPASS; pass++) {
        const viz_style *st = viz_pass_style(pass);
        double c = viz_contrast(viz_mark_colour(st->fill), st->fill);
        if (c < 3) fprintf(stderr, "\n  %s (%s): mark %s contrasts %.2f\n", st->key, st->fill, viz_mark_colour(st->fill), c);
        CU_ASSERT(c >= 3);
    }
    CU_ASSERT_STRING_EQUAL(viz_mark_colour(viz_pass_style(PLAN_PASS_BW)->fill), "white"); /* the dark fill */
    CU_ASSERT_STRING_EQUAL(viz_mark_colour(viz_pass_style(PLAN_PASS_F)->fill), "black");
    CU_ASSERT(fabs(viz_contrast("black", "white") - 21) < 1e-9);
    CU_ASSERT(viz_contrast("red", "white") < 0);

    compiled *c = compile_rel("configs/programs/pp4_zbv.yaml", NULL);
    CU_ASSERT_EQUAL_FATAL(c->rc, 0);
    viz_schedule_options o = {0};
    svg s = schedule_svg(&c->c.plan, &o, &c->e);
    int marked[PLAN_NPASS] = {0}, plain = 0;
    for (int i = 0; i < s.n; i++) {
        const svg_box *b = &s.b[i];
        if (!has_class(b, "box")) continue;
        if (!has_class(b, "chunk2")) {
            plain++;
            continue;
        }
        for (int pass = 0; pass < PLAN_NPASS; pass++) {
            const viz_style *st = viz_pass_style(pass);
            if (!has_class(b, st->key)) continue;
            CU_ASSERT_STRING_EQUAL(b->fill, st->fill);
            CU_ASSERT_STRING_EQUAL(b->stroke, viz_mark_colour(st->fill));
            marked[pass]++;
        }
    }
    /* ZB-V: each rank's second chunk runs 8 F, 8 BI and 8 BW */
    CU_ASSERT_EQUAL(marked[PLAN_PASS_F], 32);
    CU_ASSERT_EQUAL(marked[PLAN_PASS_BI], 32);
    CU_ASSERT_EQUAL(marked[PLAN_PASS_BW], 32);
    CU_ASSERT_EQUAL(plain, 96);
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "legend-chunk"));
    free(s.b);
    compiled_free(c);
}

static void test_schedule_errors(void)
{
    plan_set p;
    plan_init(&p);
    base_error e;
    base_error_clear(&e);
    base_buf dot = {0};
    viz_schedule_options o = {0};
    CU_ASSERT_EQUAL(viz_schedule(&p, &o, &dot, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "no forward or backward compute instructions");
    free(dot.s);
    plan_free(&p);
}

/* ---------------------------------------------------------------- the static check's timing */

typedef struct timing_log {
    const plan_set *p;
    int **seen;        /* per device, per instruction: times reported */
    double max_end;
    int bad;           /* start > end, or a compute whose length is not its roofline */
    double *kl;        /* per kernel list: seconds */
} timing_log;

static void log_timing(void *ctx, int dev, int ins, double start, double end)
{
    timing_log *t = ctx;
    t->seen[dev][ins]++;
    if (end > t->max_end) t->max_end = end;
    if (!(start <= end)) t->bad++;
    const plan_instr *in = &plan_dev_list(t->p, dev)->ins[ins];
    if (in->op == PLAN_COMPUTE && in->kernels >= 0 && fabs((end - start) - t->kl[in->kernels]) > 1e-12) t->bad++;
}

static void test_check_timing_callback(void)
{
    compiled *c = compile_rel("tests/fixtures/sched/pp4_1f1b_tiny.yaml", NULL);
    CU_ASSERT_EQUAL_FATAL(c->rc, 0);
    const plan_set *p = &c->c.plan;
    timing_log t = {.p = p};
    t.seen = calloc((size_t)p->ndevices, sizeof *t.seen);
    for (int d = 0; d < p->ndevices; d++) t.seen[d] = calloc((size_t)plan_dev_list(p, d)->n + 1, sizeof **t.seen);
    t.kl = calloc((size_t)p->nkernel_lists + 1, sizeof *t.kl);
    for (int i = 0; i < p->nkernel_lists; i++)
        for (int k = 0; k < p->kernel_lists[i].n; k++) {
            const plan_kernel *kn = &p->kernel_lists[i].k[k];
            double fl = kn->flops > 0 ? kn->flops / p->gpu.peak_flops[kn->dtype] : 0;
            double by = kn->bytes > 0 ? kn->bytes / p->gpu.hbm_bw : 0;
            t.kl[i] += fl > by ? fl : by;
        }
    plan_stats a, b;
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(plan_check_timed(p, &a, log_timing, &t, &e), 0);
    CU_ASSERT_EQUAL_FATAL(plan_check(p, &b, &e), 0);
    /* every instruction of every device exactly once, in time, and the same statistics */
    int missing = 0, twice = 0;
    for (int d = 0; d < p->ndevices; d++)
        for (int i = 0; i < plan_dev_list(p, d)->n; i++) missing += t.seen[d][i] == 0, twice += t.seen[d][i] > 1;
    CU_ASSERT_EQUAL(missing, 0);
    CU_ASSERT_EQUAL(twice, 0);
    CU_ASSERT_EQUAL(t.bad, 0);
    CU_ASSERT_DOUBLE_EQUAL(t.max_end, a.makespan_seconds, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(a.makespan_seconds, b.makespan_seconds, 0);
    for (int d = 0; d < p->ndevices; d++) {
        CU_ASSERT_DOUBLE_EQUAL(a.dev[d].peak_bytes, b.dev[d].peak_bytes, 0);
        CU_ASSERT_DOUBLE_EQUAL(a.dev[d].end_seconds, b.dev[d].end_seconds, 0);
    }
    plan_stats_free(&a);
    plan_stats_free(&b);
    for (int d = 0; d < p->ndevices; d++) free(t.seen[d]);
    free(t.seen);
    free(t.kl);
    compiled_free(c);
}

/* ---------------------------------------------------------------- the DAG */

static svg dag_svg(const ir_dag *g, const plan_set *p, const viz_dag_options *o, char **dot_out)
{
    base_buf dot = {0};
    base_error e;
    base_error_clear(&e);
    int rc = g ? viz_dag_from_ir(g, o, &dot, &e) : viz_dag_from_plan(p, o, &dot, &e);
    if (rc) fprintf(stderr, "\n  dag: %s\n", e.msg);
    CU_ASSERT_EQUAL(rc, 0);
    svg s = {0};
    if (!rc) {
        char *text = render_svg(&dot, "dot");
        if (text) s = svg_parse(text);
        free(text);
    }
    if (dot_out) *dot_out = dot.s;
    else free(dot.s);
    return s;
}

/* Nodes of a kind, legend samples left out. */
static int count_nodes(const svg *s, const char *kind)
{
    int n = 0;
    for (int i = 0; i < s->n; i++)
        n += has_class(&s->b[i], "node") && has_class(&s->b[i], kind) && strncmp(s->b[i].id, "legend", 6) != 0;
    return n;
}

/* gpt_tiny (embed, L0.attn, L0.mlp, L1.attn, L1.mlp, head) in 2 stages of one layer each, 4
 * micro-batches: 6 regions x 4 = 24 F, 24 B, and 6 UPD. */
static void test_dag_collapse_counts(void)
{
    compiled *c = compile_rel("tests/fixtures/sched/pp2_m4.yaml", NULL);
    CU_ASSERT_EQUAL_FATAL(c->rc, 0);
    const ir_dag *g = &c->c.dag;
    struct {
        unsigned collapse;
        int device;
        int F, B, UPD, p2p;
    } cases[] = {
        {0, -1, 24, 24, 6, 16},                                       /* a send and a receive per crossing */
        {VIZ_COLLAPSE_MB, -1, 6, 6, 6, 4},                            /* one per region and pass */
        {VIZ_COLLAPSE_LAYERS, -1, 16, 16, 4, 16},                     /* per stage: embed|L0, L1|head */
        {VIZ_COLLAPSE_MB | VIZ_COLLAPSE_LAYERS, -1, 4, 4, 4, 4},
        {0, 1, 12, 12, 3, 8},                                         /* device 1: stage 1 */
    };
    for (size_t k = 0; k < BASE_COUNT(cases); k++) {
        viz_dag_options o = {.device = cases[k].device, .collapse = cases[k].collapse};
        svg s = dag_svg(g, NULL, &o, NULL);
        int nf = 0, nb = 0, nu = 0;
        for (int i = 0; i < s.n; i++) {
            const svg_box *b = &s.b[i];
            if (!has_class(b, "compute") || !strncmp(b->id, "legend", 6)) continue;
            nf += has_class(b, "F"), nb += has_class(b, "B"), nu += has_class(b, "UPD");
        }
        if (nf != cases[k].F || nb != cases[k].B || nu != cases[k].UPD || count_nodes(&s, "p2p") != cases[k].p2p)
            fprintf(stderr, "\n  case %zu: F %d B %d UPD %d p2p %d\n", k, nf, nb, nu, count_nodes(&s, "p2p"));
        CU_ASSERT_EQUAL(nf, cases[k].F);
        CU_ASSERT_EQUAL(nb, cases[k].B);
        CU_ASSERT_EQUAL(nu, cases[k].UPD);
        CU_ASSERT_EQUAL(count_nodes(&s, "p2p"), cases[k].p2p);
        /* compute boxes and communication ellipses differ in shape: a box is a polygon */
        CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "legend-F"));
        CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "legend-p2p"));
        free(s.b);
    }
    compiled_free(c);
}

/* Data edges solid, temporal edges dashed; one cluster per placement; the dot output parses back. */
static void test_dag_edges_clusters_and_dot(void)
{
    compiled *c = compile_rel("tests/fixtures/viz/pp2_overlap.yaml", NULL);
    CU_ASSERT_EQUAL_FATAL(c->rc, 0);
    viz_dag_options o = {.device = -1};
    char *dot = NULL;
    svg s = dag_svg(&c->c.dag, NULL, &o, &dot);
    int data = 0, temporal = 0, dashed_data = 0, solid_temporal = 0;
    for (int i = 0; i < s.n; i++) {
        const svg_box *b = &s.b[i];
        if (!has_class(b, "edge")) continue;
        if (has_class(b, "data")) data++, dashed_data += b->dashed;
        if (has_class(b, "temporal")) temporal++, solid_temporal += !b->dashed;
    }
    CU_ASSERT(data > 0);
    CU_ASSERT(temporal > 0);
    CU_ASSERT_EQUAL(dashed_data, 0);
    CU_ASSERT_EQUAL(solid_temporal, 0);
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "cluster-0"));
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "cluster-1"));
    CU_ASSERT_PTR_NULL(svg_find(&s, "cluster-2"));
    /* the order groups' ORDER dummies are drawn as what they mean: temporal edges from one
     * group's last nodes to the next group's first */
    CU_ASSERT_EQUAL(count_nodes(&s, "order"), 0);
    free(s.b);
    /* the laid-out dot reads back with the same nodes and edges */
    base_buf out = {0};
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(viz_render_data(dot, "dot", VIZ_FMT_DOT, &out, &e), 0);
    Agraph_t *in = agmemread(dot), *back = agmemread(out.s);
    CU_ASSERT_FATAL(in && back);
    CU_ASSERT_EQUAL(agnnodes(back), agnnodes(in));
    CU_ASSERT_EQUAL(agnedges(back), agnedges(in));
    Agnode_t *n0 = agnode(back, "n0", 0);
    CU_ASSERT_PTR_NOT_NULL(n0);
    if (n0) CU_ASSERT_PTR_NOT_NULL(agget(n0, "pos")); /* laid out */
    /* rank 0 runs F0 F1 B0 F2 ...: F0 ends with its send, F1 starts with its embedding, B0 with
     * its receive; those hops are the temporal edges */
    int hops = 0;
    for (Agnode_t *n = agfstnode(in); n; n = agnxtnode(in, n))
        for (Agedge_t *ed = agfstout(in, n); ed; ed = agnxtout(in, ed)) {
            const char *k = agget(ed, "class"), *a = agget(agtail(ed), "label"), *b = agget(aghead(ed), "label");
            if (!k || strcmp(k, "temporal") || !a || !b) continue;
            hops += !strcmp(a, "SEND L0.mlp\\nmb0 to [1]") && !strcmp(b, "F embed\\nmb1");
            hops += !strcmp(a, "SEND L0.mlp\\nmb1 to [1]") && !strcmp(b, "RECV L0.mlp\\nmb0 from [1]");
            hops += !strcmp(a, "B embed\\nmb0") && !strcmp(b, "F embed\\nmb2");
        }
    CU_ASSERT_EQUAL(hops, 3);
    agclose(in);
    agclose(back);
    free(out.s);
    free(dot);
    compiled_free(c);
}

/* A plan's instruction graph: per device its computes and transfers; every send has an edge to
 * the receive it matches on the other device. */
static void test_dag_from_plan(void)
{
    compiled *c = compile_rel("tests/fixtures/sched/pp2_m4.yaml", NULL);
    CU_ASSERT_EQUAL_FATAL(c->rc, 0);
    viz_dag_options o = {.device = -1};
    char *dot = NULL;
    svg s = dag_svg(NULL, &c->c.plan, &o, &dot);
    int nf = 0;
    for (int i = 0; i < s.n; i++) nf += has_class(&s.b[i], "compute") && has_class(&s.b[i], "F");
    CU_ASSERT_EQUAL(nf, 24 + 1); /* + legend */
    CU_ASSERT_EQUAL(count_nodes(&s, "p2p"), 16);
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "cluster-1"));
    free(s.b);
    Agraph_t *g = agmemread(dot);
    CU_ASSERT_FATAL(g != NULL);
    int matched = 0;
    for (Agnode_t *n = agfstnode(g); n; n = agnxtnode(g, n))
        for (Agedge_t *ed = agfstout(g, n); ed; ed = agnxtout(g, ed)) {
            /* a data edge from a send to a receive crosses devices: on one device, stream order
             * (temporal) is all that links them */
            const char *a = agget(agtail(ed), "label"), *b = agget(aghead(ed), "label"), *k = agget(ed, "class");
            matched += a && b && k && !strcmp(k, "data") && !strncmp(a, "send", 4) && !strncmp(b, "recv", 4);
        }
    CU_ASSERT_EQUAL(matched, 8);
    agclose(g);
    free(dot);
    /* one device */
    o.device = 0;
    s = dag_svg(NULL, &c->c.plan, &o, NULL);
    CU_ASSERT_EQUAL(count_nodes(&s, "p2p"), 8);
    CU_ASSERT_PTR_NULL(svg_find(&s, "cluster-1"));
    free(s.b);
    base_buf d = {0};
    base_error e;
    base_error_clear(&e);
    o.device = 7;
    CU_ASSERT_EQUAL(viz_dag_from_plan(&c->c.plan, &o, &d, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "--device 7: the plan has devices 0..1");
    base_error_clear(&e);
    o.device = -1;
    o.max_nodes = 10;
    CU_ASSERT_EQUAL(viz_dag_from_plan(&c->c.plan, &o, &d, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "--collapse");
    free(d.s);
    compiled_free(c);
}

/* ---------------------------------------------------------------- traces and the timeline */

static void test_trace_reader(void)
{
    viz_chrome t;
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(viz_chrome_read_file(&t, test_src_path("tests/fixtures/viz/trace_pp2.json"), &e), 0);
    CU_ASSERT_EQUAL(t.nlanes, 5);
    CU_ASSERT_EQUAL(t.nevents, 17);
    CU_ASSERT_EQUAL(t.skipped, 1); /* the instant event */
    CU_ASSERT_EQUAL(t.overlaps, 0);
    CU_ASSERT_EQUAL(t.lanes[0].pid, 0);
    CU_ASSERT_EQUAL(t.lanes[2].tid, 2);
    CU_ASSERT_STRING_EQUAL(t.lanes[2].thread, "dp_reduce");
    CU_ASSERT_STRING_EQUAL(t.lanes[3].process, "GPU 1");
    /* grouped by lane, in time order */
    for (int i = 1; i < t.nevents; i++) {
        CU_ASSERT(t.events[i].lane >= t.events[i - 1].lane);
        if (t.events[i].lane == t.events[i - 1].lane) CU_ASSERT(t.events[i].ts >= t.events[i - 1].ts);
    }
    viz_chrome_free(&t);

    /* a bare array works; errors point into the file */
    const char *bare = "[{\"ph\": \"X\", \"pid\": 3, \"tid\": 1, \"ts\": 5, \"dur\": 2, \"name\": \"F\"}]";
    CU_ASSERT_EQUAL(viz_chrome_read(&t, "bare.json", bare, strlen(bare), &e), 0);
    CU_ASSERT_EQUAL(t.nlanes, 1);
    CU_ASSERT_EQUAL(t.lanes[0].pid, 3);
    viz_chrome_free(&t);
    /* two events of one stream that overlap (the second starts at 6, inside the first, and ends
     * at 9, after it) are counted, and the timeline warns; one that ends inside is nested */
    const char *overlap = "[{\"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": 2, \"dur\": 5, \"name\": \"F\"},"
                          " {\"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": 6, \"dur\": 3, \"name\": \"B\"},"
                          " {\"ph\": \"X\", \"pid\": 0, \"tid\": 1, \"ts\": 3, \"dur\": 1, \"name\": \"B\"},"
                          " {\"ph\": \"X\", \"pid\": 0, \"tid\": 1, \"ts\": 3.5, \"dur\": 0.5, \"name\": \"k\"}]";
    CU_ASSERT_EQUAL(viz_chrome_read(&t, "o.json", overlap, strlen(overlap), &e), 0);
    CU_ASSERT_EQUAL(t.overlaps, 1);
    CU_ASSERT_EQUAL(t.nested, 1);
    CU_ASSERT_EQUAL(t.lanes[1].depth, 2);
    CU_ASSERT_DOUBLE_EQUAL(t.origin_us, 2, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(t.events[0].ts, 0, 1e-12); /* rebased */
    base_buf dot = {0};
    viz_timeline_options o = {0};
    CU_ASSERT_EQUAL(viz_timeline(&t, &o, &dot, &e), 0);
    TEST_ASSERT_CONTAINS(e.warnings, "1 event start before the previous event of their stream ends");
    free(dot.s);
    viz_chrome_free(&t);
    /* counters: every numeric arg a series, named with its key when there are several; times
     * rebased with the events' (the sample at 5 comes first) */
    const char *ctr = "[{\"ph\": \"X\", \"pid\": 1, \"tid\": 0, \"ts\": 10, \"dur\": 2, \"name\": \"F\"},"
                      " {\"ph\": \"C\", \"pid\": 1, \"name\": \"mem\", \"ts\": 7, \"args\": {\"a\": 3, \"b\": 4}},"
                      " {\"ph\": \"C\", \"pid\": 1, \"name\": \"mem\", \"ts\": 5, \"args\": {\"a\": 1, \"b\": 2}}]";
    CU_ASSERT_EQUAL(viz_chrome_read(&t, "c.json", ctr, strlen(ctr), &e), 0);
    CU_ASSERT_EQUAL(t.ncounters, 4);
    CU_ASSERT_DOUBLE_EQUAL(t.origin_us, 5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(t.events[0].ts, 5, 1e-12);
    if (t.ncounters == 4) {
        CU_ASSERT_STRING_EQUAL(t.counters[0].name, "mem a");
        CU_ASSERT_DOUBLE_EQUAL(t.counters[0].ts, 0, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(t.counters[0].value, 1, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(t.counters[1].value, 3, 1e-12);
        CU_ASSERT_STRING_EQUAL(t.counters[3].name, "mem b");
        CU_ASSERT_DOUBLE_EQUAL(t.counters[3].value, 4, 1e-12);
    }
    viz_chrome_free(&t);
    struct {
        const char *text, *msg;
    } bad[] = {
        {"{\"traceEvents\": [{\"ph\": \"X\", \"tid\": 1, \"ts\": 0}]}", "t.json:1:18: this event has no 'pid'"},
        {"[{\"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": 1, \"dur\": -3}]", "dur is -3"},
        {"[{\"ph\": \"X\", \"pid\": 0, \"tid\": 0}]", "has no 'ts'"},
        {"{\"events\": []}", "needs \"traceEvents\""},
        {"[1, 2]", "a trace event must be an object"},
        {"[{\"ph\": \"X\",", "t.json:1:"},
        {"[{\"ph\": \"E\", \"pid\": 0, \"tid\": 0, \"ts\": 1}]", "t.json:1:2: this E event closes nothing"},
        {"[{\"ph\": \"B\", \"pid\": 0, \"tid\": 0, \"ts\": 1, \"name\": \"a\"},\n {\"ph\": \"E\", \"pid\": 0, \"tid\": 1, "
         "\"ts\": 2}]", "t.json:2:2: this E event closes nothing"},
        {"[{\"ph\": \"B\", \"pid\": 0, \"tid\": 0, \"ts\": 1}, {\"ph\": \"B\", \"pid\": 0, \"tid\": 0, \"ts\": 2},"
         " {\"ph\": \"E\", \"pid\": 0, \"tid\": 0, \"ts\": 3}]", "t.json:1:2: this B event is never closed"},
        {"[{\"ph\": \"B\", \"pid\": 0, \"tid\": 0, \"ts\": 5}, {\"ph\": \"E\", \"pid\": 0, \"tid\": 0, \"ts\": 3}]",
         "ends before the B event it closes begins"},
        {"[{\"ph\": \"X\", \"pid\": [0], \"tid\": 0, \"ts\": 1}]", "t.json:1:21: 'pid' must be an integer or a string"},
        {"[{\"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": 1, \"dur\": 2, \"args\": {\"wait_us\": 3}}]",
         "it cannot wait longer than it lasts"},
        {"[{\"ph\": \"C\", \"pid\": 0, \"ts\": 1, \"name\": \"memory\"}]", "t.json:1:2: this C (counter) event has no args"},
        {"[{\"ph\": \"C\", \"pid\": 0, \"ts\": 1, \"args\": {\"bytes\": \"lots\"}}]", "expected a number for 'bytes'"},
        {"[{\"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": \"soon\"}]", "t.json:1:40: expected a number for 'ts'"},
    };
    for (size_t k = 0; k < BASE_COUNT(bad); k++) {
        base_error_clear(&e);
        CU_ASSERT_EQUAL(viz_chrome_read(&t, "t.json", bad[k].text, strlen(bad[k].text), &e), -1);
        TEST_ASSERT_CONTAINS(e.msg, bad[k].msg);
        CU_ASSERT_EQUAL(t.nlanes, 0);
        viz_chrome_free(&t);
    }
}

/* A Kineto (PyTorch profiler) trace, written by hand to the format (tests/fixtures/kineto/):
 * CPU ops nested four deep on the main thread, a B/E pair on the autograd thread, kernels,
 * a memset and a memcpy under a GPU annotation on stream 7, NCCL and zero-length kernels on
 * stream 20, flow and instant events, times in microseconds since boot (5.9e9). */
static void test_kineto_trace(void)
{
    viz_chrome t;
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(viz_chrome_read_file(&t, test_src_path("tests/fixtures/kineto/kineto_step.json"), &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(t.origin_us, 5926130000.5, 1e-6);
    CU_ASSERT_EQUAL(t.nlanes, 4);
    CU_ASSERT_EQUAL(t.nevents, 16);
    CU_ASSERT_EQUAL(t.skipped, 3); /* two flow events and an instant */
    CU_ASSERT_EQUAL(t.overlaps, 0);
    CU_ASSERT_EQUAL(t.nested, 5 + 1 + 4);
    /* lanes: the CPU process (pid 4123, sorted by pid) before the GPU (sort index 5000000), each
     * named with its process_labels */
    static const struct {
        int64_t pid, tid;
        const char *process, *thread;
        int depth, nevents;
        bool device;
    } lanes[] = {
        {4123, 4123, "python3 (CPU)", "thread 4123 (python3)", 4, 6, false},
        {4123, 4200, "python3 (CPU)", "thread 4200 (pt_autograd_0)", 2, 2, false},
        {0, 7, "python3 (GPU 0)", "stream 7", 2, 5, true},
        {0, 20, "python3 (GPU 0)", "stream 20", 1, 3, true},
    };
    for (int l = 0; l < t.nlanes && l < 4; l++) {
        CU_ASSERT_EQUAL(t.lanes[l].pid, lanes[l].pid);
        CU_ASSERT_EQUAL(t.lanes[l].tid, lanes[l].tid);
        CU_ASSERT_STRING_EQUAL(t.lanes[l].process, lanes[l].process);
        CU_ASSERT_STRING_EQUAL(t.lanes[l].thread, lanes[l].thread);
        CU_ASSERT_EQUAL(t.lanes[l].depth, lanes[l].depth);
        CU_ASSERT_EQUAL(t.lanes[l].nevents, lanes[l].nevents);
        CU_ASSERT_EQUAL(t.lanes[l].device, lanes[l].device);
    }
    /* events in lane order, each lane's by start, encloser first: names, rebased times, depths,
     * kinds */
    static const struct {
        const char *name;
        double ts, dur;
        int depth;
        viz_event_kind kind;
    } ev[] = {
        {"ProfilerStep#3", 0, 2000, 0, VIZ_EV_CPU_ANNOT},
        {"aten::linear", 10, 300, 1, VIZ_EV_CPU},
        {"aten::addmm", 20, 250, 2, VIZ_EV_CPU},
        {"cudaLaunchKernel", 30, 8, 3, VIZ_EV_CPU},
        {"aten::relu", 400, 50, 1, VIZ_EV_CPU},
        {"cudaMemcpyAsync", 500, 12, 1, VIZ_EV_CPU},
        {"autograd::engine::evaluate_function: AddmmBackward0", 900, 600, 0, VIZ_EV_CPU}, /* B/E */
        {"aten::mm", 1000, 200, 1, VIZ_EV_CPU},
        {"ProfilerStep#3", 40, 1700, 0, VIZ_EV_GPU_ANNOT},
        {"sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32", 45, 120.5, 1, VIZ_EV_KERNEL},
        {"Memset (Device)", 200, 3, 1, VIZ_EV_GPU_MEM},
        {"Memcpy HtoD (Pageable -> Device)", 520, 30, 1, VIZ_EV_GPU_MEM},
        {NULL, 560, 10, 1, VIZ_EV_KERNEL},
        {NULL, 600, 1100, 0, VIZ_EV_KERNEL},
        {"void at::native::zero_kernel()", 1800, 0, 0, VIZ_EV_KERNEL},   /* dur 0 */
        {"void at::native::marker_kernel()", 1900, 0, 0, VIZ_EV_KERNEL}, /* no dur */
    };
    for (int i = 0; i < t.nevents && i < 16; i++) {
        if (ev[i].name) CU_ASSERT_STRING_EQUAL(t.events[i].name, ev[i].name);
        CU_ASSERT_DOUBLE_EQUAL(t.events[i].ts, ev[i].ts, 1e-6);
        CU_ASSERT_DOUBLE_EQUAL(t.events[i].dur, ev[i].dur, 1e-6);
        CU_ASSERT_EQUAL(t.events[i].depth, ev[i].depth);
        CU_ASSERT_EQUAL(t.events[i].kind, ev[i].kind);
    }
    /* drawn: axis from 0 to 2 ms in 0.2 ms steps (not 5.92613e+09), lanes as high as their
     * nesting, a nested kernel below its annotation inside the stream's lane, no warning */
    base_buf dot = {0};
    viz_timeline_options o = {0};
    base_error_clear(&e);
    CU_ASSERT_EQUAL(viz_timeline(&t, &o, &dot, &e), 0);
    CU_ASSERT(e.warnings[0] == 0);
    TEST_ASSERT_CONTAINS(dot.s, "\"timeline: 4 lanes, 0 to 2 ms\"");
    TEST_ASSERT_CONTAINS(dot.s, "time (ms) from the trace's first event");
    TEST_ASSERT_CONTAINS(dot.s, "label=\"1.2\"");
    CU_ASSERT(strstr(dot.s, "e+09") == NULL);
    /* the labels' column widens for "python3 (CPU) · thread 4200 (pt_autograd_0)" (about 2.9 in
     * at 8 pt) instead of cutting it */
    const char *ll = strstr(dot.s, "lanelabel1 [");
    const char *lw = ll ? strstr(ll, "width=") : NULL;
    CU_ASSERT_FATAL(lw != NULL);
    CU_ASSERT(strtod(lw + 6, NULL) > 2.5 && strtod(lw + 6, NULL) <= 4);
    char *text = render_svg(&dot, "nop");
    svg s = svg_parse(text);
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "tick-10"));
    CU_ASSERT_PTR_NULL(svg_find(&s, "tick-11"));
    CU_ASSERT_EQUAL(count_class(&s, "event"), 16);
    const svg_box *l0 = svg_find(&s, "lane-4123-4123"), *l7 = svg_find(&s, "lane-0-7"), *l20 = svg_find(&s, "lane-0-20");
    const svg_box *annot = svg_find(&s, "ev-0-7-0"), *gemm = svg_find(&s, "ev-0-7-1"), *nccl = svg_find(&s, "ev-0-20-0");
    const svg_box *launch = svg_find(&s, "ev-4123-4123-3"), *step = svg_find(&s, "ev-4123-4123-0");
    CU_ASSERT_FATAL(l0 && l7 && l20 && annot && gemm && nccl && launch && step);
    double h20 = l20->y1 - l20->y0;
    CU_ASSERT((l7->y1 - l7->y0) > 1.5 * h20);  /* two rows */
    CU_ASSERT((l0->y1 - l0->y0) > 3.5 * h20);  /* four rows */
    CU_ASSERT(gemm->y0 >= annot->y1 - 0.5);    /* a row below what encloses it */
    CU_ASSERT(gemm->y0 >= l7->y0 && gemm->y1 <= l7->y1 + 0.5);
    CU_ASSERT(launch->y0 > step->y1);
    CU_ASSERT(has_class(gemm, "kernel") && has_class(nccl, "kernel"));
    CU_ASSERT(has_class(svg_find(&s, "ev-0-7-2"), "gpu_mem"));
    CU_ASSERT(has_class(svg_find(&s, "ev-4123-4123-1"), "cpu"));
    CU_ASSERT(has_class(step, "cpu_annot") && has_class(annot, "gpu_annot"));
    CU_ASSERT(has_class(l7, "compute")); /* an NCCL-free GPU stream is not a communication lane */
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "legend-kernel"));
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "legend-cpu"));
    free(s.b);
    free(text);
    free(dot.s);
    viz_chrome_free(&t);
}

/* Nsight Systems' Chrome export (hand-written to the form): a bare array, string pids and tids
 * naming processes, threads and streams, NVTX ranges as B/E pairs nesting the CUDA API calls. */
static void test_nsight_trace(void)
{
    viz_chrome t;
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(viz_chrome_read_file(&t, test_src_path("tests/fixtures/kineto/nsight_export.json"), &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(t.origin_us, 5926200000.25, 1e-6);
    CU_ASSERT_EQUAL(t.nlanes, 3);
    CU_ASSERT_EQUAL(t.nevents, 7);
    CU_ASSERT_EQUAL(t.overlaps, 0);
    CU_ASSERT_EQUAL(t.nested, 2);
    if (t.nlanes == 3) {
        CU_ASSERT_STRING_EQUAL(t.lanes[0].process, "train.py (7781)");
        CU_ASSERT_STRING_EQUAL(t.lanes[0].thread, "python main thread");
        CU_ASSERT_EQUAL(t.lanes[0].depth, 3);
        CU_ASSERT(!t.lanes[0].device);
        CU_ASSERT_STRING_EQUAL(t.lanes[1].process, "GPU 0 (NVIDIA H100 80GB HBM3)");
        CU_ASSERT_STRING_EQUAL(t.lanes[1].thread, "Stream 7");
        CU_ASSERT_STRING_EQUAL(t.lanes[2].thread, "Stream 24");
        CU_ASSERT(t.lanes[1].device && t.lanes[2].device);
        CU_ASSERT_EQUAL(t.lanes[1].pid, t.lanes[2].pid);
    }
    /* the main thread: an API call, then "forward" [10, 400) holding "layer 0" [20, 120) holding
     * a launch */
    CU_ASSERT_STRING_EQUAL(t.events[1].name, "forward");
    CU_ASSERT_DOUBLE_EQUAL(t.events[1].ts, 10, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(t.events[1].dur, 390, 1e-6);
    CU_ASSERT_EQUAL(t.events[2].depth, 1);
    CU_ASSERT_EQUAL(t.events[3].depth, 2);
    CU_ASSERT_EQUAL(t.events[1].kind, VIZ_EV_CPU_ANNOT);
    CU_ASSERT_EQUAL(t.events[3].kind, VIZ_EV_CPU);
    CU_ASSERT_EQUAL(t.events[4].kind, VIZ_EV_KERNEL);
    CU_ASSERT_EQUAL(t.events[5].kind, VIZ_EV_GPU_MEM);
    base_buf dot = {0};
    viz_timeline_options o = {0};
    CU_ASSERT_EQUAL(viz_timeline(&t, &o, &dot, &e), 0);
    TEST_ASSERT_CONTAINS(dot.s, "\"timeline: 3 lanes, 0 to 400 us\"");
    free(dot.s);
    viz_chrome_free(&t);
}

/* piper-sim's trace of a pipeline program has a flow per transfer and a memory track per GPU,
 * and says how long each transfer waited for its partner:
 * on 1F1B, GPU 1 posts its first receive at once and waits until GPU 0 has run its forward and
 * posts the matching send, which finds the receive waiting and moves at once. The timeline draws
 * the waiting apart (class "wait") from the moving (the event's box). */
static void test_sim_trace_waiting(void)
{
    compiled *c = compile_rel("configs/programs/pp4_1f1b.yaml", NULL);
    CU_ASSERT_EQUAL_FATAL(c->rc, 0);
    char path[] = "/tmp/piper_viz_traceXXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    close(fd);
    sim_options so;
    sim_options_init(&so, &c->c.plan);
    so.trace_path = path;
    sim_result r;
    base_error e;
    base_error_clear(&e);
    int rc = sim_run(&c->c.plan, &so, &r, &e);
    if (rc) fprintf(stderr, "\n  sim: %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    /* the records the reader skips: a flow from every send to the receive it met (one "s" on
     * the sender, one "f" on the peer, per transfer), and a memory counter per GPU whose highest
     * sample is the device's simulated peak */
    base_arena a;
    base_arena_init(&a);
    ir_doc *doc = NULL;
    CU_ASSERT_EQUAL_FATAL(ir_doc_load(&a, path, &doc, &e), 0);
    const ir_doc *evs = ir_doc_get(doc, "traceEvents");
    CU_ASSERT_FATAL(evs && evs->kind == IR_DOC_SEQ);
    int sends = 0;
    for (int d = 0; d < c->c.plan.ndevices; d++) {
        const plan_list *L = plan_dev_list(&c->c.plan, d);
        for (int i = 0; i < L->n; i++) sends += L->ins[i].op == PLAN_SEND;
    }
    CU_ASSERT(sends > 0);
    int64_t *from = calloc((size_t)sends + 1, sizeof *from), *to = calloc((size_t)sends + 1, sizeof *to);
    double *peak = calloc((size_t)c->c.plan.ndevices, sizeof *peak);
    int nstart = 0, nfinish = 0, bad = 0;
    for (int i = 0; i < evs->n; i++) {
        const ir_doc *x = evs->items[i];
        const char *ph = NULL;
        int64_t id = -1, pid = -1;
        ir_doc_string(ir_doc_get(x, "ph"), "ph", &ph, &e);
        if (!ph || (strcmp(ph, "s") && strcmp(ph, "f") && strcmp(ph, "C"))) continue;
        ir_doc_int(ir_doc_get(x, "pid"), "pid", &pid, &e);
        if (pid < 0 || pid >= c->c.plan.ndevices) {
            bad++;
            continue;
        }
        if (!strcmp(ph, "C")) {
            double v = -1;
            ir_doc_num(ir_doc_get(ir_doc_get(x, "args"), "bytes"), "bytes", &v, &e);
            if (v > peak[pid]) peak[pid] = v;
            continue;
        }
        ir_doc_int(ir_doc_get(x, "id"), "id", &id, &e);
        if (id < 0 || id >= sends) {
            bad++;
            continue;
        }
        int64_t *slot = !strcmp(ph, "s") ? &from[id] : &to[id];
        if (*slot) bad++; /* each end once */
        *slot = pid + 1;
        nstart += !strcmp(ph, "s");
        nfinish += !strcmp(ph, "f");
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(nstart, sends);
    CU_ASSERT_EQUAL(nfinish, sends);
    for (int k = 0; k < sends; k++) CU_ASSERT(from[k] && to[k] && from[k] != to[k]);
    for (int d = 0; d < r.ndevices && d < c->c.plan.ndevices; d++) {
        CU_ASSERT(peak[d] > 0);
        CU_ASSERT_DOUBLE_EQUAL(peak[d], r.dev[d].peak_bytes, 0.5);
    }
    free(from);
    free(to);
    free(peak);
    base_arena_free(&a);
    sim_result_free(&r);
    viz_chrome t;
    CU_ASSERT_EQUAL_FATAL(viz_chrome_read_file(&t, path, &e), 0);
    unlink(path);
    int comm = 0, waited = 0;
    const viz_chrome_event *recv = NULL, *send = NULL;
    for (int i = 0; i < t.nevents; i++) {
        const viz_chrome_event *x = &t.events[i];
        const viz_chrome_lane *ln = &t.lanes[x->lane];
        if (!x->cat || (strcmp(x->cat, "p2p") && strcmp(x->cat, "coll"))) {
            CU_ASSERT_EQUAL(x->wait, 0);
            continue;
        }
        comm++;
        waited += x->wait > 0;
        CU_ASSERT(x->wait >= 0 && x->wait <= x->dur);
        if (!recv && ln->pid == 1 && x->name && !strncmp(x->name, "recv mb0 from 0", 15)) recv = x;
        if (!send && ln->pid == 0 && x->name && !strncmp(x->name, "send mb0 to 1", 13)) send = x;
    }
    CU_ASSERT(comm > 0);
    CU_ASSERT(waited > 0);
    CU_ASSERT_FATAL(recv && send);
    CU_ASSERT(recv->wait > 0);
    CU_ASSERT_DOUBLE_EQUAL(recv->ts + recv->wait, send->ts, 1e-3); /* the send's post ends the wait */
    CU_ASSERT_DOUBLE_EQUAL(send->wait, 0, 1e-9);
    CU_ASSERT(recv->dur - recv->wait < 0.5 * recv->dur); /* it mostly waited */
    /* drawn: a wait box per event that waited, before the event's own box */
    base_buf dot = {0};
    viz_timeline_options o = {0};
    CU_ASSERT_EQUAL(viz_timeline(&t, &o, &dot, &e), 0);
    char *text = render_svg(&dot, "nop");
    svg s = svg_parse(text);
    CU_ASSERT_EQUAL(count_class(&s, "wait"), waited);
    /* and a memory track per GPU, under its streams */
    CU_ASSERT(t.ncounters > 0);
    CU_ASSERT_EQUAL(count_class(&s, "track"), c->c.plan.ndevices);
    CU_ASSERT(count_class(&s, "sample") > 0);
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "legend-sample"));
    TEST_ASSERT_CONTAINS(dot.s, "GPU 3 \xc2\xb7 memory \xe2\x89\xa4 ");
    const svg_box *track3 = svg_find(&s, "track-3-3"), *lane3 = svg_find(&s, "lane-3-0"), *lane2 = svg_find(&s, "lane-2-0");
    CU_ASSERT_FATAL(track3 && lane3 && lane2);
    CU_ASSERT(track3->y0 > lane3->y1 && lane2->y1 < lane3->y0);
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "legend-wait_p2p"));
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "legend-p2p"));
    for (int i = 0; i < s.n; i++) {
        const svg_box *w = &s.b[i];
        if (!has_class(w, "wait")) continue;
        char id[64];
        snprintf(id, sizeof id, "ev-%s", w->id + 5); /* wait-P-T-K -> ev-P-T-K */
        const svg_box *b = svg_find(&s, id);
        CU_ASSERT_FATAL(b != NULL);
        CU_ASSERT(w->x1 <= b->x0 + 1.0); /* waiting, then moving */
        CU_ASSERT(strcmp(w->fill, b->fill) != 0);
        CU_ASSERT(!strcmp(w->fill, viz_wait_style(VIZ_COMM_P2P)->fill) || !strcmp(w->fill, viz_wait_style(VIZ_COMM_COLL)->fill));
    }
    free(s.b);
    free(text);
    free(dot.s);
    viz_chrome_free(&t);
    compiled_free(c);
}

static svg timeline_svg(const char *rel, const viz_timeline_options *o)
{
    viz_chrome t;
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(viz_chrome_read_file(&t, test_src_path(rel), &e), 0);
    base_buf dot = {0};
    int rc = viz_timeline(&t, o, &dot, &e);
    CU_ASSERT_EQUAL(rc, 0);
    svg s = {0};
    if (!rc) {
        char *text = render_svg(&dot, "nop");
        if (text) s = svg_parse(text);
        free(text);
    }
    free(dot.s);
    viz_chrome_free(&t);
    return s;
}

static void test_timeline(void)
{
    viz_timeline_options o = {0};
    svg s = timeline_svg("tests/fixtures/viz/trace_pp2.json", &o);
    /* one lane per (pid, tid), in order from the top; the p2p and dp lanes are communication */
    CU_ASSERT_EQUAL(count_class(&s, "lane"), 5);
    CU_ASSERT_EQUAL(count_class(&s, "comm"), 3);
    const char *lanes[] = {"lane-0-0", "lane-0-1", "lane-0-2", "lane-1-0", "lane-1-1"};
    double prev = -INFINITY;
    for (int k = 0; k < 5; k++) {
        const svg_box *l = svg_find(&s, lanes[k]);
        CU_ASSERT_FATAL(l != NULL);
        CU_ASSERT(l->y0 > prev);
        prev = l->y0;
    }
    CU_ASSERT(has_class(svg_find(&s, "lane-0-1"), "comm"));
    CU_ASSERT(has_class(svg_find(&s, "lane-1-0"), "compute"));
    CU_ASSERT_EQUAL(count_class(&s, "event"), 17);
    /* an event sits on its lane, at its time: F L0 mb1 (1000 us long) is as wide as F L0 mb0 and
     * starts where it ends; B L0 mb0 (2000 us) is twice as wide */
    const svg_box *f0 = svg_find(&s, "ev-0-0-0"), *f1 = svg_find(&s, "ev-0-0-1"), *b0 = svg_find(&s, "ev-0-0-2");
    const svg_box *lane = svg_find(&s, "lane-0-0");
    CU_ASSERT_FATAL(f0 && f1 && b0 && lane);
    CU_ASSERT(has_class(f0, "F") && has_class(b0, "B"));
    CU_ASSERT(fabs((f1->x1 - f1->x0) - (f0->x1 - f0->x0)) < 1.0);
    CU_ASSERT(fabs(f1->x0 - f0->x1) < 1.0);
    CU_ASSERT(fabs((b0->x1 - b0->x0) - 2 * (f0->x1 - f0->x0)) < 1.5);
    CU_ASSERT(f0->y0 >= lane->y0 && f0->y1 <= lane->y1);
    CU_ASSERT(has_class(svg_find(&s, "ev-0-1-0"), "p2p"));
    CU_ASSERT(has_class(svg_find(&s, "ev-0-2-0"), "coll"));
    /* the axis: 0 to 9.5 ms in 1 ms steps */
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "axis"));
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "tick-9"));
    CU_ASSERT_PTR_NULL(svg_find(&s, "tick-10"));
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "legend-p2p"));
    CU_ASSERT_PTR_NOT_NULL(svg_find(&s, "legend-commlane"));
    free(s.b);

    /* a window keeps the events that overlap it, clipped */
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(viz_window_parse("1ms:5ms", &o.t0_us, &o.t1_us, &e), 0);
    o.window = true;
    s = timeline_svg("tests/fixtures/viz/trace_pp2.json", &o);
    CU_ASSERT_EQUAL(count_class(&s, "lane"), 5);
    /* GPU 0: F1, B0 (from 4.4 ms); p2p: send0, send1, recv0; dp: none (8.6 ms).
     * GPU 1: F0, B0, F1; p2p: recv0, recv1, send0. F0 of GPU 0 ends at 1 ms: outside. */
    CU_ASSERT_EQUAL(count_class(&s, "event"), 2 + 3 + 0 + 3 + 3);
    free(s.b);
}

static void test_parsers(void)
{
    CU_ASSERT_EQUAL(viz_format_of_path("a/b.svg"), VIZ_FMT_SVG);
    CU_ASSERT_EQUAL(viz_format_of_path("x.PDF"), VIZ_FMT_PDF);
    CU_ASSERT_EQUAL(viz_format_of_path("x.png"), VIZ_FMT_PNG);
    CU_ASSERT_EQUAL(viz_format_of_path("x.gv"), VIZ_FMT_DOT);
    CU_ASSERT_EQUAL(viz_format_of_path("x.dot"), VIZ_FMT_DOT);
    CU_ASSERT_EQUAL(viz_format_of_path("dir.v/noext"), -1);
    CU_ASSERT_EQUAL(viz_format_of_path("x.jpg"), -1);
    CU_ASSERT_EQUAL(viz_format_parse("SVG"), VIZ_FMT_SVG);

    base_error e;
    base_error_clear(&e);
    double a, b;
    CU_ASSERT_EQUAL(viz_window_parse("2ms:3.5ms", &a, &b, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(a, 2000, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(b, 3500, 1e-9);
    CU_ASSERT_EQUAL(viz_window_parse("1500:2s", &a, &b, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(a, 1500, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(b, 2e6, 1e-9);
    CU_ASSERT_EQUAL(viz_window_parse(":5ms", &a, &b, &e), 0);
    CU_ASSERT(isinf(a) && a < 0);
    CU_ASSERT_EQUAL(viz_window_parse("5ms", &a, &b, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "expected START:END");
    base_error_clear(&e);
    CU_ASSERT_EQUAL(viz_window_parse("5 parsecs:6ms", &a, &b, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "'5 parsecs' is not a time");
    base_error_clear(&e);
    CU_ASSERT_EQUAL(viz_window_parse("6ms:5ms", &a, &b, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "the end must come after the start");

    unsigned c;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(viz_collapse_parse("mb,layers", &c, &e), 0);
    CU_ASSERT_EQUAL(c, VIZ_COLLAPSE_MB | VIZ_COLLAPSE_LAYERS);
    CU_ASSERT_EQUAL(viz_collapse_parse("layers", &c, &e), 0);
    CU_ASSERT_EQUAL(c, VIZ_COLLAPSE_LAYERS);
    CU_ASSERT_EQUAL(viz_collapse_parse("mbs", &c, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "unknown part 'mbs'");
}

/* PDF and PNG come out of cairo; a broken figure is Graphviz's complaint, not a crash. */
static void test_render_formats(void)
{
    const char *dot = "digraph g { a [shape=box, pos=\"10,10!\", width=0.5, height=0.3, label=\"1\"]; }";
    base_error e;
    base_error_clear(&e);
    base_buf png = {0}, pdf = {0}, gv = {0};
    CU_ASSERT_EQUAL(viz_render_data(dot, "nop", VIZ_FMT_PNG, &png, &e), 0);
    CU_ASSERT_EQUAL(viz_render_data(dot, "nop", VIZ_FMT_PDF, &pdf, &e), 0);
    CU_ASSERT_EQUAL(viz_render_data(dot, "nop", VIZ_FMT_DOT, &gv, &e), 0);
    CU_ASSERT(png.n > 8 && !memcmp(png.s, "\x89PNG", 4));
    CU_ASSERT(pdf.n > 8 && !memcmp(pdf.s, "%PDF", 4));
    CU_ASSERT(gv.s && strstr(gv.s, "pos=") != NULL);
    free(png.s), free(pdf.s), free(gv.s);
    base_buf out = {0};
    CU_ASSERT_EQUAL(viz_render_data("digraph { a -> ; }", "dot", VIZ_FMT_SVG, &out, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "syntax error");
    free(out.s);
    base_error_clear(&e);
    CU_ASSERT_EQUAL(viz_render_file(dot, "nop", VIZ_FMT_SVG, "/nonexistent/dir/x.svg", &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "/nonexistent/dir/x.svg: cannot write the figure");
}

int piper_tests_register(void)
{
    static const test_case schedule[] = {
        {"1F1B: 64 boxes in the 1F1B order per rank, legend, axis", test_schedule_1f1b},
        {"box widths are roofline costs", test_schedule_widths_are_costs},
        {"--unit: equal widths, the papers' 1F1B slots", test_schedule_unit_widths},
        {"ZB-H1: BI and BW boxes", test_schedule_zbh1},
        {"an overlapped F&B pair is two half boxes in one slot", test_schedule_overlapped_pair},
        {"DualPipe: its overlapped pairs, as many as its steps give", test_schedule_dualpipe_pairs},
        {"a plan file draws the same grid", test_schedule_from_plan_file},
        {"a deadlocking plan is drawn from a replay, with a warning", test_schedule_deadlocked_plan},
        {"the title names the schedule, p, v and m", test_schedule_title},
        {"--width: p = 8 V schedules in a column, the legend wrapped inside", test_schedule_width},
        {"the second chunk's mark contrasts with every fill", test_schedule_chunk_mark},
        {"errors", test_schedule_errors},
        {"plan_check_timed reports every instruction once", test_check_timing_callback},
        {NULL, NULL},
    };
    static const test_case dag[] = {
        {"node counts per collapse mode and device", test_dag_collapse_counts},
        {"edges, clusters, dot reads back", test_dag_edges_clusters_and_dot},
        {"a plan's instruction graph", test_dag_from_plan},
        {NULL, NULL},
    };
    static const test_case timeline[] = {
        {"the trace reader", test_trace_reader},
        {"a Kineto trace: rebased axis, lanes, nesting, kinds, B/E", test_kineto_trace},
        {"an Nsight export: string ids, NVTX B/E nesting", test_nsight_trace},
        {"piper-sim's trace: waiting apart from moving", test_sim_trace_waiting},
        {"one lane per (pid, tid), axis, window", test_timeline},
        {"formats, windows, collapse options", test_parsers},
        {"rendering to png, pdf, dot; errors", test_render_formats},
        {NULL, NULL},
    };
    return test_add_suite("viz_schedule", schedule) || test_add_suite("viz_dag", dag) ||
           test_add_suite("viz_timeline", timeline);
}
