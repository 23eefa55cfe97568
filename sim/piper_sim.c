/* piper_sim.c — `piper-sim`: simulate one training step of a plan file, or of a program.
 *
 * The simulator library (piper_sim) reads plans only; this main program also links the compiler
 * (piper_sched, sched/sched.h), so that a program is compiled in this process into a checked plan
 * which is then simulated like a plan read from a file. Prints the report on stdout
 * (deterministic), and the simulation's wall time on stderr. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chakra/chakra.h"
#include "sched/sched.h"
#include "sim/sim.h"

/* --coll's algorithms, one entry per row of the table (SIM_COLL_ALGOS), its help wrapped under it */
static void list_colls(FILE *f)
{
    fprintf(f, "\ncollective algorithms (--coll ALGO; docs/simulator.md):\n");
    for (int a = 0; a < SIM_NCOLL; a++) {
        const char *h = sim_coll_help((sim_coll_algo)a);
        int col = fprintf(f, "  %-11s", sim_coll_name((sim_coll_algo)a));
        while (*h) {
            size_t n = strcspn(h, " ");
            if (col + 1 + (int)n > 80) col = fprintf(f, "\n%13s", "") - 1;
            col += fprintf(f, " %.*s", (int)n, h);
            h += n + (h[n] == ' ');
        }
        fputc('\n', f);
    }
}

static int parse_coll(const char *v, void *dst, char *why, size_t n)
{
    base_error ce;
    base_error_clear(&ce);
    if (sim_coll_parse(v, dst, &ce) == 0) return 0;
    snprintf(why, n, "%s", ce.msg);
    return -1;
}

/* Is the file a plan? Plans begin with "piper-plan ". */
static int is_plan_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char head[16] = {0};
    size_t n = fread(head, 1, 11, f);
    fclose(f);
    return n == 11 && !memcmp(head, "piper-plan ", 11);
}

/* Compiles the program in this process as `piper-compile --allow-oom` does (plans over memory are
 * simulated and flagged rather than refused) into *p. The compiler's warnings and errors go to
 * stderr as piper-compile prints them. The compiler runs the plan's static check. */
static int64_t batch_micro, batch_global; /* --micro-batch, --global-batch; 0: the program's */
static bool check_all;                     /* --check-all-devices */

static int compile_program(const char *program, plan_set *p)
{
    sched_compilation c;
    sched_compilation_init(&c);
    sched_options so = {.allow_oom = true, .micro_batch = batch_micro, .global_batch = batch_global,
                        .check_all_devices = check_all};
    base_error e;
    base_error_clear(&e);
    int rc = sched_compile(&c, program, NULL, NULL, &so, &e);
    base_error_print(&e, stderr);
    if (rc) {
        fprintf(stderr, "piper-sim: cannot compile %s (see the compiler's messages above)\n", program);
    } else {
        *p = c.plan; /* the plan has its own arena: it outlives the DAG, freed now */
        plan_init(&c.plan);
    }
    sched_compilation_free(&c);
    return rc;
}

int main(int argc, char **argv)
{
    const char *json = NULL, *links = NULL, *platform_out = NULL, *trace = NULL, *platform = NULL,
               *calib = NULL, *chakra_dir = NULL, *chakra_prefix = NULL;
    base_cli_list costs = {0};
    bool quiet = false, no_check = false, in_process = false, no_fold = false;
    sim_coll_algo coll_algo = SIM_COLL_AUTO;
    /* one row per option (base.h, base_opt); --help and --version come with the parser */
    const base_opt opts[] = {
        {.kind = BASE_OPT_GROUP, .help = "outputs"},
        {BASE_OPT_PATH, "json", 0, "FILE", &json,
         .help = "also write the results as JSON (docs/sim-json.md); - for stdout instead of the report"},
        {BASE_OPT_PATH, "trace", 0, "FILE", &trace, .help = "write a Chrome trace of the step (Perfetto, "
         "chrome://tracing): one process per GPU, one thread per stream"},
        {BASE_OPT_PATH, "platform-out", 0, "FILE", &platform_out, .help = "write the generated SimGrid platform XML"},
        {BASE_OPT_PATH, "emit-chakra", 0, "DIR", &chakra_dir, .help = "write DIR/NAME.<rank>.et, the step as "
         "MLCommons Chakra execution traces with the simulated times (ASTRA-sim; docs/chakra.md)"},
        {BASE_OPT_STRING, "chakra-prefix", 0, "NAME", &chakra_prefix, .help = "the traces' NAME",
         .def = "FILE's name without extension"},
        {BASE_OPT_FLAG, "quiet", 'q', NULL, &quiet, .help = "no report (use with --json)"},
        {.kind = BASE_OPT_GROUP, .help = "the machine"},
        {BASE_OPT_STRING, "links", 0, "LIST", &links,
         .help = "network figures, comma-separated key=value (defaults per GPU type):\n"
                 "  nvlink_bw=300GB/s  nvlink_lat=1us   (per GPU, per direction)\n"
                 "  nic_bw=25GB/s      nic_lat=5us      gpus_per_nic=1\n"
                 "  pcie_bw=...        nodes_per_leaf=16  oversubscription=1\n"
                 "bandwidths take B/s, KB/s, MB/s, GB/s, TB/s or Gb/s; latencies s, ms, us or ns"},
        {BASE_OPT_LIST, "costs", 0, "LIST", &costs,
         .help = "what-if overrides, comma-separated (may be given again):\n"
                 "  unit:F=1,B=2,BI=1,BW=1  unit costs per pass (seconds for one\n"
                 "                          stage and micro-batch; others cost 0)\n"
                 "  nocomm                  communication is free\n"
                 "  launch=4us gemm_eff=0.82 gemm_half=128  cost-model constants\n"
                 "  hbm_eff=0.8 net_eff=0.8 comm_slowdown=0.1  (docs/simulator.md)\n"
                 "  launch_bwd=4us          host time per backward kernel entry\n"
                 "  host_sync=p2p+norm+batch  where the host waits for its GPU\n"
                 "                          (any of p2p, batch, norm; or none)\n"
                 "  launch_model=host|list  host: a host thread per GPU issues the\n"
                 "                          plan, launch per kernel (default);\n"
                 "                          list: per-list launch_overlap=0.5"},
        {BASE_OPT_PATH, "calib", 0, "FILE|none", &calib,
         .help = "the cost model's constants per GPU type (none: uncalibrated defaults); the cluster file's "
         "calibration and --costs apply over it", .def = "the built-in configs/calibration.txt"},
        {BASE_OPT_CALL, "coll", 0, "ALGO", &coll_algo, .parse = parse_coll,
         .help = "the collective algorithm (listed below)", .def = "auto"},
        {BASE_OPT_PATH, "platform", 0, "FILE", &platform,
         .help = "simulate on this SimGrid platform XML instead of the generated one; it needs a host gpu<d> "
         "for each device d (docs/simulator.md)", .def = "the cluster file's `platform`, if any"},
        {.kind = BASE_OPT_GROUP, .help = "a program's batch"},
        {BASE_OPT_INT, "micro-batch", 0, "N", &batch_micro, .lo = 1, .hi = INT64_MAX,
         .want = "a whole number of sequences >= 1", .help = "a program's micro-batch size instead of its own",
         .def = "the program's; a bare directive array has 1"},
        {BASE_OPT_INT, "global-batch", 0, "N", &batch_global, .lo = 1, .hi = INT64_MAX,
         .want = "a whole number of sequences >= 1", .help = "a program's global batch instead of its own",
         .def = "the program's; a bare array has micro x micro-batches x replicas"},
        {.kind = BASE_OPT_GROUP, .help = "the run"},
        {BASE_OPT_FLAG, "no-fold", 0, NULL, &no_fold,
         .help = "simulate every data-parallel replica (by default, replicas that do exactly what another "
         "does are simulated once, where that is exact)"},
        {BASE_OPT_FLAG, "no-check", 0, NULL, &no_check, .help = "skip the static check of a plan file "
         "(deadlock, memory; a program's plan is checked by the compiler)"},
        {BASE_OPT_FLAG, "check-all-devices", 0, NULL, &check_all,
         .help = "run that check over every device instead of one per replica class"},
        {BASE_OPT_FLAG, "in-process", 0, NULL, &in_process,
         .help = "simulate in this process (profiling; SimGrid errors abort)"},
    };
    const base_cli cli = {
        .prog = "piper-sim",
        .usage = "piper-sim FILE [options]",
        .about = "Simulates one training step with SimGrid and reports the step time, tokens/s, MFU and\n"
                 "HFU, each device's compute / exposed communication / idle time and its peak memory\n"
                 "with the breakdown. FILE is a plan (written by piper-compile -o) or a program (YAML or\n"
                 "JSON), which piper-sim first compiles as piper-compile --allow-oom does.",
        .opts = opts,
        .nopts = BASE_COUNT(opts),
        .epilogue = "Figures must be finite: a plan's peaks, sizes and kernel figures >= 0 and its bandwidths\n"
                    "> 0; --costs durations >= 0; --links bandwidths > 0, latencies >= 0, counts whole; a\n"
                    "platform's gpu<d> speeds and link bandwidths > 0. Anything else is refused, named.\n"
                    "\n"
                    "exit status: 0 on success, 1 when the input is invalid or the simulation fails, 2 on\n"
                    "usage errors.\n",
        .epilogue_fn = list_colls,
    };
    base_error pe;
    base_error_clear(&pe);
    const char **pos = base_xcalloc((size_t)argc + 1, sizeof *pos);
    int npos = 0;
    int prc = base_cli_finish(&cli, base_cli_parse(&cli, argc, argv, pos, &npos, &pe), &pe);
    const char *input = npos > 0 ? pos[0] : NULL;
    if (prc < 0 && npos > 1) prc = base_cli_usage_error(&cli, "one file at a time ('%s' and '%s')", pos[0], pos[1]);
    free(pos);
    if (prc >= 0) return prc;
    if (!input) {
        base_cli_help(&cli, stderr);
        return 2;
    }

    int kind = is_plan_file(input);
    if (kind < 0) {
        fprintf(stderr, "error: cannot open %s: %s; check the path\n", input, strerror(errno));
        return 1;
    }
    base_error e;
    base_error_clear(&e);
    plan_set p;
    int rc = 0;
    if (kind) {
        rc = plan_read_file(&p, input, &e);
        if (rc) {
            base_error_print(&e, stderr);
            return 1;
        }
    } else if (compile_program(input, &p)) {
        return 1;
    }
    sim_options o;
    sim_options_init(&o, &p);
    o.in_process = in_process;
    o.fold = !no_fold;
    o.platform_out = platform_out;
    o.trace_path = trace;
    char stem[256];
    chakra_default_prefix(input, stem, sizeof stem);
    chakra_target chakra = {chakra_dir, chakra_prefix ? chakra_prefix : stem};
    if (chakra_dir) o.times_fn = chakra_write_simulated, o.times_ctx = &chakra;
    if (platform) o.platform = platform;
    o.progress = isatty(STDERR_FILENO);
    o.coll = coll_algo;
    /* cost constants: built-in defaults < calibration file < the cluster's calibration < --costs */
    if (!calib || strcmp(calib, "none")) {
        base_buf text = {0};
        const char *name = "configs/calibration.txt (built in)";
        if (calib && base_read_file(calib, &text, &e)) rc = 1;
        char entry[32];
        if (!rc)
            rc = sim_calibration_apply(&o.costs, p.gpu.name, calib ? calib : name,
                                       calib ? (text.s ? text.s : "") : sim_calibration_builtin, entry, sizeof entry, &e);
        if (!rc && entry[0]) snprintf(o.calibration, sizeof o.calibration, "%s from %s", entry, calib ? calib : name);
        base_buf_free(&text);
    }
    if (!rc) rc = sim_calibration_apply_plan(&o.costs, &p, &e);
    if (!rc && p.ncalib > 0) {
        size_t at = strlen(o.calibration);
        snprintf(o.calibration + at, sizeof o.calibration - at, "%sthe cluster's calibration", at ? ", " : "");
    }
    if (rc) { /* an invalid calibration file is invalid input */
        base_error_print(&e, stderr);
        plan_free(&p);
        return 1;
    }
    if (links) rc = sim_links_parse(&o.links, links, &e);
    for (int k = 0; !rc && k < costs.n; k++) rc = sim_costs_parse(&o.costs, costs.v[k], &e);
    if (rc) {
        base_error_print(&e, stderr);
        plan_free(&p);
        return 2;
    }
    if (kind && !no_check) { /* a compiled program's plan passed the compiler's check */
        plan_stats st;
        plan_check_opts co = {.all_devices = check_all};
        rc = plan_check_opt(&p, &co, &st, &e);
        if (!rc) plan_stats_free(&st);
    }
    sim_result r;
    if (!rc) rc = sim_run(&p, &o, &r, &e);
    base_error_print(&e, stderr);
    if (rc) {
        plan_free(&p);
        return 1;
    }
    if (!quiet && !(json && !strcmp(json, "-"))) sim_report_write(&p, &o, &r, stdout); /* JSON alone on stdout */
    if (json) {
        if (!strcmp(json, "-")) {
            sim_json_write(&p, &o, &r, stdout);
        } else {
            base_out out;
            base_error je;
            base_error_clear(&je);
            if (base_out_open(&out, json, "the report", &je) == 0) {
                sim_json_write(&p, &o, &r, out.f);
                base_out_commit(&out, &je);
            }
            if (je.set) {
                base_error_print(&je, stderr);
                rc = 1;
            }
        }
    }
    fprintf(stderr, "piper-sim: %lld simulated activities in %.3f s (%.0f per second)", (long long)r.activities,
            r.wall_seconds, r.wall_seconds > 0 ? (double)r.activities / r.wall_seconds : 0.0);
    if (r.folded_replicas > 1)
        fprintf(stderr, "; %d data-parallel replicas folded: %d of %d devices simulated", r.folded_replicas,
                r.simulated_devices, r.ndevices);
    /* the shape experiments/bench_sim.sh gives bare-sim, its yardstick */
    fprintf(stderr, "; %lld executions, %lld transfers, %d actors", (long long)r.executions,
            (long long)(r.activities - r.executions), r.actors);
    fputc('\n', stderr);
    sim_result_free(&r);
    plan_free(&p);
    return rc;
}
