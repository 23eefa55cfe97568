/* piper_viz.c — `piper-viz`: figures from piper's own data. `dag` draws a program's global DAG (or
 * a plan file's instruction graph), `schedule` the per-rank schedule grid of a program or plan, and
 * `timeline` a Chrome trace written by piper-sim; as SVG, PDF, PNG or dot, chosen by -o's extension
 * or --format. A thin command line over viz/viz.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "viz/viz.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: piper-viz COMMAND INPUT -o FILE [options]\n"
            "\n"
            "Draws piper's plans and traces as figures (Graphviz: svg, pdf, png or dot).\n"
            "\n"
            "commands:\n"
            "  dag PROGRAM|PLAN       the global DAG of a program (compute boxes, communication\n"
            "                         ellipses and hexagons, data edges solid, order edges dashed,\n"
            "                         one cluster per placement); for a plan file, each device's\n"
            "                         instructions and their dependencies\n"
            "  schedule PROGRAM|PLAN  the per-rank schedule grid: one row per pipeline rank, one\n"
            "                         box per forward/backward of a micro-batch, widths from the\n"
            "                         plan's static cost model, idle time as gaps\n"
            "  timeline TRACE.json    a Chrome trace (piper-sim --trace): one lane per GPU and\n"
            "                         stream, with a time axis\n"
            "\n"
            "PROGRAM is a program (YAML/JSON, compiled as piper-compile does); PLAN a plan file\n"
            "(piper-compile -o).\n"
            "\n"
            "options:\n"
            "  -o FILE              the figure (- = stdout); .svg .pdf .png .dot/.gv give the format\n"
            "  --format F           svg, pdf, png or dot (default: from -o, else svg)\n"
            "  --title TEXT         the figure's title\n"
            "  --model FILE         program: model to use instead of the program's own\n"
            "  --cluster FILE       program: cluster to use instead of the program's own\n"
            "  --device N           dag: only what device N runs\n"
            "  --collapse WHAT      dag: mb (one node per region and pass across micro-batches),\n"
            "                       layers (a stage's layers merged), or mb,layers\n"
            "  --max-nodes N        dag: refuse larger figures (default 600)\n"
            "  --unit               schedule: every box one unit wide (the order, not the time)\n"
            "  --width PX           schedule: the figure at most PX wide (pixels of a png at 150\n"
            "                       dpi, points of an svg or pdf), cells scaled to fit\n"
            "  --column             schedule: one paper column wide (3.5 in: --width 252 for svg\n"
            "                       and pdf, 525 for png)\n"
            "  --window START:END   timeline: only this span (2ms:3.5ms; bare numbers are\n"
            "                       microseconds; either side may be left out)\n"
            "  -h, --help           this help\n"
            "\n"
            "examples:\n"
            "  piper-viz schedule configs/programs/pp4_1f1b.yaml -o pp4.svg\n"
            "  piper-viz dag configs/programs/pp4_1f1b.yaml --collapse layers -o dag.pdf\n"
            "  piper-viz timeline trace.json --window 10ms:20ms -o step.png\n"
            "\n"
            "exit status: 0 on success, 1 when an input is invalid or a figure cannot be made,\n"
            "2 on usage errors.\n");
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "piper-viz: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "; see piper-viz --help\n");
    return 2;
}

/* A plan file starts with its format line; anything else is a program. */
static int is_plan_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char head[16] = {0};
    size_t n = fread(head, 1, sizeof head - 1, f);
    fclose(f);
    return n >= 10 && !strncmp(head, "piper-plan", 10);
}

int main(int argc, char **argv)
{
    const char *cmd = NULL, *input = NULL, *out = NULL, *format = NULL, *model = NULL, *cluster = NULL;
    const char *title = NULL;
    double width_px = 0; /* --width, in the output's units; -1: --column */
    viz_dag_options dopt = {.device = -1};
    viz_schedule_options sopt = {0};
    viz_timeline_options topt = {0};
    base_error e;
    base_error_clear(&e);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool takes = !strcmp(a, "-o") || !strcmp(a, "--format") || !strcmp(a, "--model") || !strcmp(a, "--cluster") ||
                     !strcmp(a, "--device") || !strcmp(a, "--collapse") || !strcmp(a, "--window") ||
                     !strcmp(a, "--title") || !strcmp(a, "--max-nodes") || !strcmp(a, "--width");
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (takes && i + 1 >= argc) return usage_error("%s needs a value", a);
        const char *v = takes ? argv[++i] : NULL;
        if (!strcmp(a, "-o")) out = v;
        else if (!strcmp(a, "--format")) format = v;
        else if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--cluster")) cluster = v;
        else if (!strcmp(a, "--title")) title = v;
        else if (!strcmp(a, "--device") || !strcmp(a, "--max-nodes")) {
            int64_t n;
            if (base_parse_i64(v, 0, 1 << 30, &n, NULL, 0)) return usage_error("'%s' is not a count or device number", v);
            if (!strcmp(a, "--device")) dopt.device = (int)n;
            else dopt.max_nodes = (int)n;
        } else if (!strcmp(a, "--collapse")) {
            if (viz_collapse_parse(v, &dopt.collapse, &e)) return usage_error("%s", e.msg);
        } else if (!strcmp(a, "--window")) {
            if (viz_window_parse(v, &topt.t0_us, &topt.t1_us, &e)) return usage_error("%s", e.msg);
            topt.window = true;
        } else if (!strcmp(a, "--width")) {
            int64_t n;
            if (base_parse_i64(v, 50, 100000, &n, NULL, 0))
                return usage_error("--width '%s': give the figure's width as a whole number of pixels, 50 to 100000", v);
            width_px = (double)n;
        } else if (!strcmp(a, "--column")) {
            width_px = -1;
        } else if (!strcmp(a, "--unit")) {
            sopt.unit = true;
        } else if (a[0] == '-' && a[1]) {
            return usage_error("unknown option '%s'", a);
        } else if (!cmd) {
            cmd = a;
        } else if (!input) {
            input = a;
        } else {
            return usage_error("one input at a time (got another: '%s')", a);
        }
    }
    if (!cmd) {
        usage(stderr);
        return 2;
    }
    bool is_dag = !strcmp(cmd, "dag"), is_sched = !strcmp(cmd, "schedule"), is_tl = !strcmp(cmd, "timeline");
    if (!is_dag && !is_sched && !is_tl) return usage_error("unknown command '%s' (dag, schedule or timeline)", cmd);
    if (!input) return usage_error("%s needs an input file", cmd);
    if (!out) return usage_error("%s", "say where the figure goes: -o FILE (.svg, .pdf, .png, .dot), or -o - for stdout");
    int fmt = format ? viz_format_parse(format) : strcmp(out, "-") ? viz_format_of_path(out) : VIZ_FMT_SVG;
    if (fmt < 0) {
        if (format) return usage_error("--format '%s': use svg, pdf, png or dot", format);
        return usage_error("cannot tell the format from '%s'; end it in .svg, .pdf, .png or .dot, or give --format", out);
    }
    if (!is_dag && (dopt.device >= 0 || dopt.collapse || dopt.max_nodes))
        return usage_error("--device, --collapse and --max-nodes are for 'dag', not '%s'", cmd);
    if (!is_sched && sopt.unit) return usage_error("--unit is for 'schedule', not '%s'", cmd);
    if (!is_sched && width_px) return usage_error("--width and --column are for 'schedule', not '%s'", cmd);
    /* a png is rendered at 150 dpi (render.c), the others in points */
    double px_per_pt = fmt == VIZ_FMT_PNG ? 150.0 / 72 : 1;
    if (width_px < 0) width_px = VIZ_COLUMN_IN * 72 * px_per_pt;
    sopt.width_pt = width_px / px_per_pt;
    if (!is_tl && topt.window) return usage_error("--window is for 'timeline', not '%s'", cmd);

    base_buf dot = {0};
    int rc = 0;
    const char *engine = is_dag ? "dot" : "nop";
    dopt.title = title;
    if (is_tl) {
        viz_chrome t;
        topt.title = title;
        rc = viz_chrome_read_file(&t, input, &e);
        if (!rc) rc = viz_timeline(&t, &topt, &dot, &e);
        viz_chrome_free(&t);
    } else if (is_plan_file(input)) {
        plan_set p;
        rc = plan_read_file(&p, input, &e);
        sopt.title = title;
        if (!rc) rc = is_dag ? viz_dag_from_plan(&p, &dopt, &dot, &e) : viz_schedule(&p, &sopt, &dot, &e);
        plan_free(&p);
    } else {
        sched_compilation c;
        sched_compilation_init(&c);
        rc = sched_load(&c, input, model, cluster, &e);
        if (!rc) rc = sched_build_dag(&c, &e);
        if (!rc && is_dag) rc = viz_dag_from_ir(&c.dag, &dopt, &dot, &e);
        if (!rc && is_sched) {
            /* A plan that would not fit is still a figure (allow_oom). So is one the static check
             * finds a deadlock in: compile it unchecked, and viz_schedule's own static run says,
             * as a warning, how the boxes were placed instead. */
            sched_options so = {.allow_oom = true};
            rc = sched_lower(&c, &so, &e);
            if (rc && strstr(e.msg, "deadlock")) {
                sched_compilation_free(&c);
                sched_compilation_init(&c);
                base_error_clear(&e);
                so.no_check = true;
                rc = sched_load(&c, input, model, cluster, &e);
                if (!rc) rc = sched_build_dag(&c, &e);
                if (!rc) rc = sched_lower(&c, &so, &e);
            }
        }
        if (!rc && is_sched) {
            viz_pair *pairs = NULL;
            viz_pairs_from_program(&c, &pairs, &sopt.npairs);
            sopt.pairs = pairs;
            sopt.title = title;
            sopt.schedule = viz_schedule_of_program(&c);
            rc = viz_schedule(&c.plan, &sopt, &dot, &e);
            free(pairs);
        }
        sched_compilation_free(&c);
    }
    if (!rc) {
        if (!strcmp(out, "-")) {
            base_buf data = {0};
            rc = viz_render_data(dot.s, engine, (viz_format)fmt, &data, &e);
            if (!rc && data.n && fwrite(data.s, 1, data.n, stdout) != data.n)
                rc = base_errorf(&e, "cannot write the figure to stdout");
            free(data.s);
        } else {
            rc = viz_render_file(dot.s, engine, (viz_format)fmt, out, &e);
        }
    }
    free(dot.s);
    base_error_print(&e, stderr);
    return rc ? 1 : 0;
}
