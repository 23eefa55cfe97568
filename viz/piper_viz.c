/* piper_viz.c — `piper-viz`: figures from piper's own data. `dag` draws a program's global DAG (or
 * a plan file's instruction graph), `schedule` the per-rank schedule grid of a program or plan, and
 * `timeline` a Chrome trace written by piper-sim; as SVG, PDF, PNG or dot, chosen by -o's extension
 * or --format. A thin command line over viz/viz.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "viz/viz.h"

static int parse_collapse(const char *v, void *dst, char *why, size_t n)
{
    base_error e;
    base_error_clear(&e);
    if (viz_collapse_parse(v, dst, &e) == 0) return 0;
    snprintf(why, n, "%s", e.msg);
    return -1;
}

static int parse_window(const char *v, void *dst, char *why, size_t n)
{
    viz_timeline_options *t = dst;
    base_error e;
    base_error_clear(&e);
    if (viz_window_parse(v, &t->t0_us, &t->t1_us, &e) == 0) {
        t->window = true;
        return 0;
    }
    snprintf(why, n, "%s", e.msg);
    return -1;
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
    const char *out = NULL, *format = NULL, *model = NULL, *cluster = NULL;
    const char *title = NULL;
    viz_dag_options dopt = {.device = -1};
    viz_schedule_options sopt = {0};
    viz_timeline_options topt = {0};
    int64_t device = -1, max_nodes = 0, width_arg = 0; /* --width, in the output's units */
    bool column = false;
    /* one row per option (base.h, base_opt); --help and --version come with the parser */
    const base_opt opts[] = {
        {.kind = BASE_OPT_GROUP, .help = "every command"},
        {BASE_OPT_PATH, NULL, 'o', "FILE", &out, .help = "the figure (- = stdout); .svg .pdf .png .dot/.gv give the "
         "format"},
        {BASE_OPT_STRING, "format", 0, "F", &format, .help = "svg, pdf, png or dot", .def = "from -o, else svg"},
        {BASE_OPT_STRING, "title", 0, "TEXT", &title, .help = "the figure's title"},
        {BASE_OPT_PATH, "model", 0, "FILE", &model, .help = "program: model to use instead of the program's own"},
        {BASE_OPT_PATH, "cluster", 0, "FILE", &cluster, .help = "program: cluster to use instead of the program's own"},
        {.kind = BASE_OPT_GROUP, .help = "dag"},
        {BASE_OPT_INT, "device", 0, "N", &device, .lo = 0, .hi = 1 << 30, .want = "a device number >= 0",
         .help = "only what device N runs"},
        {BASE_OPT_CALL, "collapse", 0, "WHAT", &dopt.collapse, .parse = parse_collapse,
         .help = "mb (one node per region and pass across micro-batches), layers (a stage's layers merged), or "
         "mb,layers"},
        {BASE_OPT_INT, "max-nodes", 0, "N", &max_nodes, .lo = 0, .hi = 1 << 30, .want = "a count of nodes",
         .help = "refuse larger figures", .def = "600"},
        {.kind = BASE_OPT_GROUP, .help = "schedule"},
        {BASE_OPT_FLAG, "unit", 0, NULL, &sopt.unit, .help = "every box one unit wide (the order, not the time)"},
        {BASE_OPT_INT, "width", 0, "PX", &width_arg, .lo = 50, .hi = 100000,
         .want = "the figure's width as a whole number of pixels, 50 to 100000",
         .help = "the figure at most PX wide (pixels of a png at 150 dpi, points of an svg or pdf), cells scaled "
         "to fit"},
        {BASE_OPT_FLAG, "column", 0, NULL, &column,
         .help = "one paper column wide (3.5 in: --width 252 for svg and pdf, 525 for png)"},
        {.kind = BASE_OPT_GROUP, .help = "timeline"},
        {BASE_OPT_CALL, "window", 0, "START:END", &topt, .parse = parse_window,
         .help = "only this span (2ms:3.5ms; bare numbers are microseconds; either side may be left out)"},
    };
    const base_cli cli = {
        .prog = "piper-viz",
        .usage = "piper-viz COMMAND INPUT -o FILE [options]",
        .about = "Draws piper's plans and traces as figures (Graphviz: svg, pdf, png or dot).\n"
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
                 "(piper-compile -o). The options under a command's name are for that command.",
        .opts = opts,
        .nopts = BASE_COUNT(opts),
        .epilogue = "examples:\n"
                    "  piper-viz schedule configs/programs/pp4_1f1b.yaml -o pp4.svg\n"
                    "  piper-viz dag configs/programs/pp4_1f1b.yaml --collapse layers -o dag.pdf\n"
                    "  piper-viz timeline trace.json --window 10ms:20ms -o step.png\n"
                    "\n"
                    "exit status: 0 on success, 1 when an input is invalid or a figure cannot be made,\n"
                    "2 on usage errors.\n",
    };
    base_error e;
    base_error_clear(&e);
    const char **pos = base_xcalloc((size_t)argc + 1, sizeof *pos);
    int npos = 0;
    int prc = base_cli_finish(&cli, base_cli_parse(&cli, argc, argv, pos, &npos, &e), &e);
    const char *cmd = npos > 0 ? pos[0] : NULL, *input = npos > 1 ? pos[1] : NULL;
    if (prc < 0 && npos > 2) prc = base_cli_usage_error(&cli, "one input at a time (got another: '%s')", pos[2]);
    free(pos);
    if (prc >= 0) return prc;
    dopt.device = (int)device;
    dopt.max_nodes = (int)max_nodes;
    if (!cmd) {
        base_cli_help(&cli, stderr);
        return 2;
    }
    bool is_dag = !strcmp(cmd, "dag"), is_sched = !strcmp(cmd, "schedule"), is_tl = !strcmp(cmd, "timeline");
    if (!is_dag && !is_sched && !is_tl) return base_cli_usage_error(&cli, "unknown command '%s' (dag, schedule or timeline)", cmd);
    if (!input) return base_cli_usage_error(&cli, "%s needs an input file", cmd);
    if (!out) return base_cli_usage_error(&cli, "%s", "say where the figure goes: -o FILE (.svg, .pdf, .png, .dot), or -o - for stdout");
    int fmt = format ? viz_format_parse(format) : strcmp(out, "-") ? viz_format_of_path(out) : VIZ_FMT_SVG;
    if (fmt < 0) {
        if (format) return base_cli_usage_error(&cli, "--format '%s': use svg, pdf, png or dot", format);
        return base_cli_usage_error(&cli, "cannot tell the format from '%s'; end it in .svg, .pdf, .png or .dot, or give --format", out);
    }
    if (!is_dag && (dopt.device >= 0 || dopt.collapse || dopt.max_nodes))
        return base_cli_usage_error(&cli, "--device, --collapse and --max-nodes are for 'dag', not '%s'", cmd);
    if (!is_sched && sopt.unit) return base_cli_usage_error(&cli, "--unit is for 'schedule', not '%s'", cmd);
    double width_px = column ? -1 : (double)width_arg;
    if (!is_sched && width_px)
        return base_cli_usage_error(&cli, "--width and --column are for 'schedule', not '%s'", cmd);
    /* a png is rendered at 150 dpi (render.c), the others in points */
    double px_per_pt = fmt == VIZ_FMT_PNG ? 150.0 / 72 : 1;
    if (width_px < 0) width_px = VIZ_COLUMN_IN * 72 * px_per_pt;
    sopt.width_pt = width_px / px_per_pt;
    if (!is_tl && topt.window) return base_cli_usage_error(&cli, "--window is for 'timeline', not '%s'", cmd);

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
