/* piper_compile.c — `piper-compile`: compile a training program into verified per-device plans.
 * Prints a summary (devices, instructions per kind, static peak memory per device), and on
 * request the global DAG (--dump-dag text|dot), the IR after any pass (--dump-after, as QBE's
 * -d), the plan file (-o), the directives with every schedule expanded (--emit-directives) and
 * the per-rank order as CSV (--emit-order) and the summary as JSON (--json, docs/cli.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chakra/chakra.h"
#include "sched/sched.h"

/* The compiler's table of passes: each name, and what it does wrapped to 80 columns. */
static void list_passes(FILE *f)
{
    for (int i = 0; i < sched_pass_count(); i++) {
        fprintf(f, "  %-18s", sched_pass_name(i));
        int col = 20;
        for (const char *w = sched_pass_what(i); *w;) {
            int n = (int)strcspn(w, " ");
            if (col + 1 + n > 80) {
                fprintf(f, "\n%20s", "");
                col = 20;
            }
            fprintf(f, " %.*s", n, w);
            col += 1 + n;
            w += n;
            while (*w == ' ') w++;
        }
        fputc('\n', f);
    }
}

/* --dump-dag[=text|dot] */
static int parse_dump(const char *v, void *dst, char *why, size_t n)
{
    if (strcmp(v, "text") && strcmp(v, "dot")) {
        snprintf(why, n, "'%s' is not a DAG format; write --dump-dag=text or --dump-dag=dot", v);
        return -1;
    }
    *(const char **)dst = v;
    return 0;
}

static void epilogue(FILE *f)
{
    fprintf(f, "\npasses, in the order they run (the verifier runs after each):\n");
    list_passes(f);
}

/* A JSON string (the summary's names and paths) */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *u = (const unsigned char *)(s ? s : ""); *u; u++) {
        if (*u == '"' || *u == '\\')
            fprintf(f, "\\%c", *u);
        else if (*u < 0x20)
            fprintf(f, "\\u%04x", *u);
        else
            fputc(*u, f);
    }
    fputc('"', f);
}

/* What the static check proved, for the summary's last lines and --json: how many devices fit
 * in usable memory (all, unless --allow-oom kept a plan that does not). */
static int devices_over(const sched_compilation *c)
{
    double usable = c->plan.gpu.mem_bytes - c->plan.gpu.reserve_bytes;
    int over = 0;
    for (int d = 0; d < c->stats.ndevices; d++) over += c->stats.dev[d].peak_bytes > usable;
    return over;
}

static void print_checks(const sched_compilation *c, FILE *f)
{
    if (!c->stats.ndevices) {
        fprintf(f, "  checks: skipped (--no-check): neither freedom from deadlock nor memory is proved\n");
        return;
    }
    double usable = c->plan.gpu.mem_bytes - c->plan.gpu.reserve_bytes, peak = 0;
    for (int d = 0; d < c->stats.ndevices; d++)
        if (c->stats.dev[d].peak_bytes > peak) peak = c->stats.dev[d].peak_bytes;
    char pk[32], us[32];
    int over = devices_over(c);
    fprintf(f, "  deadlock-free: proved (%d devices, %d distinct instruction lists, run in launch order)\n",
            c->plan.ndevices, c->plan.nlists);
    if (over)
        fprintf(f, "  memory: %d device%s over the %s usable (largest peak %s; kept by --allow-oom)\n", over,
                over == 1 ? "" : "s", base_fmt_bytes(usable, us, sizeof us), base_fmt_bytes(peak, pk, sizeof pk));
    else
        fprintf(f, "  memory: fits: the largest static peak is %s of the %s usable\n",
                base_fmt_bytes(peak, pk, sizeof pk), base_fmt_bytes(usable, us, sizeof us));
}

/* --json: the summary as one JSON object (docs/cli.md, "piper-compile --json"). */
static void write_json(const sched_compilation *c, const char *program, const char *plan_out, FILE *f)
{
    const plan_set *p = &c->plan;
    const ir_program *prog = &c->prog;
    bool checked = c->stats.ndevices > 0;
    fprintf(f, "{\n  \"format\": \"piper-compile-summary\",\n  \"version\": 1,\n  \"program\": ");
    json_str(f, program);
    fprintf(f, ",\n  \"model\": ");
    json_str(f, p->model.name);
    fprintf(f, ",\n  \"gpu\": ");
    json_str(f, p->gpu.name);
    fprintf(f, ",\n  \"devices\": %d,\n  \"nodes\": %lld,\n  \"gpus_per_node\": %lld,\n", p->ndevices,
            (long long)prog->cluster.nodes, (long long)prog->cluster.gpus_per_node);
    fprintf(f, "  \"batch\": {\"global\": %lld, \"micro\": %lld, \"microbatches\": %lld, \"data_parallel\": %lld},\n",
            (long long)prog->global_batch, (long long)prog->micro_batch, (long long)c->dag.num_microbatches,
            (long long)c->dp_degree);
    fprintf(f, "  \"dag_nodes\": %d,\n  \"instruction_lists\": %d,\n  \"communication_groups\": %d,\n",
            ir_dag_live_nodes(&c->dag), p->nlists, p->ngroups);
    fprintf(f, "  \"schedule\": ");
    if (c->default_schedule)
        json_str(f, c->default_schedule);
    else
        fprintf(f, "null");
    fprintf(f, ",\n  \"p2p_per_channel\": %s,\n", c->p2p_per_channel ? "true" : "false");
    fprintf(f, "  \"memory_capacity_bytes\": %.17g,\n  \"memory_reserve_bytes\": %.17g,\n", p->gpu.mem_bytes,
            p->gpu.reserve_bytes);
    int over = checked ? devices_over(c) : 0;
    fprintf(f, "  \"checks\": {\"deadlock_free\": %s, \"memory_fits\": %s, \"devices_over_memory\": %d},\n",
            checked ? "true" : "null", checked ? (over ? "false" : "true") : "null", over);
    fprintf(f, "  \"per_device\": [");
    for (int d = 0; d < p->ndevices; d++) {
        fprintf(f, "%s\n    {\"device\": %d", d ? "," : "", d);
        if (checked) {
            const plan_device_stats *s = &c->stats.dev[d];
            fprintf(f, ", \"instructions\": {");
            static const int ops[] = {PLAN_COMPUTE, PLAN_SEND, PLAN_RECV, PLAN_COLL, PLAN_WAIT, PLAN_ALLOC, PLAN_FREE};
            for (size_t k = 0; k < BASE_COUNT(ops); k++)
                fprintf(f, "%s\"%s\": %lld", k ? ", " : "", plan_op_name((plan_op)ops[k]),
                        (long long)s->count_by_op[ops[k]]);
            fprintf(f, "}, \"peak_bytes\": %.17g, \"at_peak_bytes\": {", s->peak_bytes);
            for (int k = 0; k < PLAN_NMEM; k++)
                fprintf(f, "%s\"%s\": %.17g", k ? ", " : "", plan_mem_name((plan_mem)k), s->at_peak[k]);
            fprintf(f, "}");
        }
        fprintf(f, "}");
    }
    fprintf(f, "\n  ],\n  \"plan\": ");
    if (plan_out)
        json_str(f, plan_out);
    else
        fprintf(f, "null");
    fprintf(f, "\n}\n");
}

int main(int argc, char **argv)
{
    const char *out = NULL, *model = NULL, *cluster = NULL, *dump = NULL;
    const char *emit_order = NULL, *dump_after = NULL, *json = NULL, *chakra_dir = NULL, *chakra_prefix = NULL;
    bool quiet = false, emit_directives = false;
    sched_options opt = {0};
    /* one row per option (base.h, base_opt); --help and --version come with the parser */
    const base_opt opts[] = {
        {.kind = BASE_OPT_GROUP, .help = "inputs"},
        {BASE_OPT_PATH, "model", 0, "FILE", &model, .help = "model to use instead of the program's own"},
        {BASE_OPT_PATH, "cluster", 0, "FILE", &cluster, .help = "cluster to use instead of the program's own"},
        {BASE_OPT_INT, "micro-batch", 0, "N", &opt.micro_batch, .lo = 1, .hi = INT64_MAX,
         .want = "a whole number of sequences >= 1",
         .help = "sequences per micro-batch instead of the program's", .def = "the program's; a bare array of "
         "directives has 1"},
        {BASE_OPT_INT, "global-batch", 0, "N", &opt.global_batch, .lo = 1, .hi = INT64_MAX,
         .want = "a whole number of sequences >= 1", .help = "sequences per step instead of the program's",
         .def = "the program's; a bare array has micro-batch x largest num_microbatches x largest replicate group"},
        {.kind = BASE_OPT_GROUP, .help = "outputs"},
        {BASE_OPT_PATH, NULL, 'o', "FILE", &out, .help = "write the plan file (text, versioned; read by piper-sim)"},
        {BASE_OPT_PATH, "json", 0, "FILE", &json, .help = "also write the summary as JSON (docs/cli.md); - for "
         "stdout instead of the summary"},
        {BASE_OPT_CALL, "dump-dag", 0, "text|dot", &dump, .parse = parse_dump, .implicit = "text",
         .help = "print the global DAG after all directives (to stdout)"},
        {BASE_OPT_STRING, "dump-after", 0, "PASS", &dump_after,
         .help = "print the IR after the pass PASS (to stdout) and go on compiling: the DAG as --dump-dag=text "
         "prints it, the launch order as node ids of that dump, or the plan file; --dump-after=list lists the "
         "passes"},
        {BASE_OPT_FLAG, "emit-directives", 0, NULL, &emit_directives,
         .help = "print the directives as run, each schedule expanded into its order directives, as a JSON array "
         "(Piper's schema)"},
        {BASE_OPT_PATH, "emit-order", 0, "FILE", &emit_order,
         .help = "write the per-rank order (PyTorch's CSV notation: 0F3, 2I1, (0F7;7B3)OVERLAP_F_B) of a "
         "pipelined program; - = stdout"},
        {BASE_OPT_PATH, "emit-chakra", 0, "DIR", &chakra_dir,
         .help = "write DIR/NAME.<rank>.et: the plans as MLCommons Chakra execution traces, timed by the static "
         "check's run (ASTRA-sim; docs/chakra.md)"},
        {BASE_OPT_STRING, "chakra-prefix", 0, "NAME", &chakra_prefix, .help = "the traces' NAME",
         .def = "PROGRAM's name without extension"},
        {BASE_OPT_FLAG, "quiet", 'q', NULL, &quiet, .help = "no summary"},
        {.kind = BASE_OPT_GROUP, .help = "compilation"},
        {BASE_OPT_FLAG, "allow-oom", 0, NULL, &opt.allow_oom, .help = "keep plans that exceed device memory "
         "(what-if analysis)"},
        {BASE_OPT_FLAG, "no-sendrecv-groups", 0, NULL, &opt.no_sendrecv_groups,
         .help = "lower without pairing opposite sends and receives"},
        {BASE_OPT_FLAG, "p2p-per-channel", 0, NULL, &opt.p2p_per_channel,
         .help = "one p2p stream per peer, direction and flow (asynchronous sends, as pipeline runtimes post "
         "them)", .def = "one shared stream unless it deadlocks or the order runs faster on channels under unit "
         "costs"},
        {BASE_OPT_FLAG, "no-check", 0, NULL, &opt.no_check, .help = "skip the static deadlock and memory check "
         "(debugging)"},
        {BASE_OPT_FLAG, "check-all-devices", 0, NULL, &opt.check_all_devices,
         .help = "run the check over every device instead of one per data-parallel replica class (same verdict "
         "and peaks)"},
    };
    const base_cli cli = {
        .prog = "piper-compile",
        .usage = "piper-compile PROGRAM [options]",
        .about = "Compiles a training program (YAML or JSON; or a bare JSON array of directives in\n"
                 "Piper's schema, with --model and --cluster) into one execution plan per device,\n"
                 "proves the plans cannot deadlock and fit in memory, and prints a summary.",
        .opts = opts,
        .nopts = BASE_COUNT(opts),
        .epilogue = "exit status: 0 on success, 1 when the program is invalid or cannot run, 2 on usage\n"
                    "errors.\n",
        .epilogue_fn = epilogue,
    };
    base_error e;
    base_error_clear(&e);
    const char **pos = base_xcalloc((size_t)argc + 1, sizeof *pos);
    int npos = 0;
    int prc = base_cli_finish(&cli, base_cli_parse(&cli, argc, argv, pos, &npos, &e), &e);
    const char *program = npos > 0 ? pos[0] : NULL;
    if (prc < 0 && npos > 1) prc = base_cli_usage_error(&cli, "one program at a time ('%s' and '%s')", pos[0], pos[1]);
    free(pos);
    if (prc >= 0) return prc;
    if (dump_after && !strcmp(dump_after, "list")) {
        list_passes(stdout);
        return 0;
    }
    if (!program) {
        base_cli_help(&cli, stderr);
        return 2;
    }
    if (json && !strcmp(json, "-") && (dump || dump_after || emit_directives || (emit_order && !strcmp(emit_order, "-"))))
        return base_cli_usage_error(&cli, "--json -: stdout already carries the requested text; write the JSON to a "
                                    "file (--json FILE)");

    sched_compilation c;
    sched_compilation_init(&c);
    if (dump_after && sched_dump_after(&c, dump_after, stdout, &e)) {
        fprintf(stderr, "piper-compile: --dump-after: %s\n", e.msg);
        sched_compilation_free(&c);
        return 2;
    }
    /* a terminal sees which pass a long compilation is in (base_progress: nothing otherwise) */
    base_progress pg;
    base_progress_begin(&pg, "piper-compile", "compiling");
    if (pg.f) c.progress = &pg;
    int rc = sched_load(&c, program, model, cluster, &e);
    if (!rc && (opt.micro_batch || opt.global_batch))
        rc = ir_program_set_batch(&c.prog, opt.micro_batch, opt.global_batch, &e);
    if (!rc) rc = sched_build_dag(&c, &e);
    if (!rc && dump) {
        if (!strcmp(dump, "dot"))
            ir_dag_dump_dot(&c.dag, stdout);
        else
            ir_dag_dump_text(&c.dag, stdout);
    }
    if (!rc && emit_directives) rc = sched_write_directives_json(&c, stdout, &e);
    if (!rc) rc = sched_lower(&c, &opt, &e);
    base_progress_end(&pg);
    if (!rc && out) rc = plan_write_file(&c.plan, out, &e);
    if (!rc && chakra_dir) {
        char stem[256];
        chakra_default_prefix(program, stem, sizeof stem);
        rc = chakra_write(&c.plan, chakra_dir, chakra_prefix ? chakra_prefix : stem, NULL, &e);
    }
    if (!rc && emit_order) {
        if (!strcmp(emit_order, "-")) {
            rc = sched_write_order_csv(&c, stdout, &e);
        } else {
            base_out o;
            rc = base_out_open(&o, emit_order, "the order file", &e);
            if (!rc && sched_write_order_csv(&c, o.f, &e) != 0) {
                rc = base_out_fail(&o, &e);
            } else if (!rc) {
                rc = base_out_commit(&o, &e);
            }
        }
    }
    base_error_print(&e, stderr);
    /* stdout carries the requested text alone, so it can be piped into a file and loaded */
    bool text_out = dump || dump_after || emit_directives || (emit_order && !strcmp(emit_order, "-"));
    bool json_stdout = json && !strcmp(json, "-");
    if (!rc && !quiet && !text_out && !json_stdout) {
        sched_print_summary(&c, stdout);
        print_checks(&c, stdout);
    }
    if (!rc && out && !quiet && !text_out && !json_stdout) fprintf(stdout, "\nplan written to %s\n", out);
    if (!rc && json_stdout) {
        write_json(&c, program, out, stdout);
    } else if (!rc && json) {
        base_out o;
        rc = base_out_open(&o, json, "the summary", &e);
        if (!rc) {
            write_json(&c, program, out, o.f);
            rc = base_out_commit(&o, &e);
        }
        if (rc) fprintf(stderr, "error: %s\n", e.msg);
    }
    sched_compilation_free(&c);
    return rc ? 1 : 0;
}
