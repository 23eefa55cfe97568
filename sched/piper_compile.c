/* piper_compile.c — `piper-compile`: compile a training program into verified per-device plans.
 * Prints a summary (devices, instructions per kind, static peak memory per device), and on
 * request the global DAG (--dump-dag text|dot), the IR after any pass (--dump-after, as QBE's
 * -d), the plan file (-o), the directives with every schedule expanded (--emit-directives) and
 * the per-rank order as CSV (--emit-order). */
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

static void usage(FILE *f)
{
    fprintf(f,
            "usage: piper-compile PROGRAM [options]\n"
            "\n"
            "Compiles a training program (YAML or JSON; or a bare JSON array of directives in\n"
            "Piper's schema, with --model and --cluster) into one execution plan per device,\n"
            "proves the plans cannot deadlock and fit in memory, and prints a summary.\n"
            "\n"
            "options:\n"
            "  -o FILE               write the plan file (text, versioned; read by piper-sim)\n"
            "  --model FILE          model to use instead of the program's own\n"
            "  --cluster FILE        cluster to use instead of the program's own\n"
            "  --micro-batch N       sequences per micro-batch instead of the program's (a bare\n"
            "                        array of directives has 1)\n"
            "  --global-batch N      sequences per step instead of the program's (a bare array\n"
            "                        has micro-batch x largest num_microbatches x largest\n"
            "                        replicate group)\n"
            "  --dump-dag[=text|dot] print the global DAG after all directives (to stdout)\n"
            "  --dump-after=PASS     print the IR after the pass PASS (to stdout) and go on\n"
            "                        compiling: the DAG as --dump-dag=text prints it, the\n"
            "                        launch order as node ids of that dump, or the plan file;\n"
            "                        --dump-after=list lists the passes\n"
            "  --emit-directives     print the directives as run, each schedule expanded into\n"
            "                        its order directives, as a JSON array (Piper's schema)\n"
            "  --emit-order FILE     write the per-rank order (PyTorch's CSV notation: 0F3, 2I1,\n"
            "                        (0F7;7B3)OVERLAP_F_B) of a pipelined program; - = stdout\n"
            "  --emit-chakra DIR     write DIR/NAME.<rank>.et: the plans as MLCommons Chakra\n"
            "                        execution traces, timed by the static check's run (ASTRA-sim;\n"
            "                        docs/chakra.md)\n"
            "  --chakra-prefix NAME  the traces' NAME (default: PROGRAM's name without extension)\n"
            "  --allow-oom           keep plans that exceed device memory (what-if analysis)\n"
            "  --no-sendrecv-groups  lower without pairing opposite sends and receives\n"
            "  --p2p-per-channel     one p2p stream per peer, direction and flow (asynchronous\n"
            "                        sends, as pipeline runtimes post them); default: one\n"
            "                        shared stream unless it deadlocks or the order runs\n"
            "                        faster on channels under unit costs\n"
            "  --no-check            skip the static deadlock and memory check (debugging)\n"
            "  --check-all-devices   run the check over every device instead of one per\n"
            "                        data-parallel replica class (same verdict and peaks)\n"
            "  -q, --quiet           no summary\n"
            "  -h, --help            this help\n"
            "\n"
            "exit status: 0 on success, 1 when the program is invalid or cannot run, 2 on usage\n"
            "errors.\n"
            "\n"
            "passes, in the order they run (the verifier runs after each):\n");
    list_passes(f);
}

int main(int argc, char **argv)
{
    const char *program = NULL, *out = NULL, *model = NULL, *cluster = NULL, *dump = NULL;
    const char *emit_order = NULL, *dump_after = NULL, *chakra_dir = NULL, *chakra_prefix = NULL;
    bool quiet = false, emit_directives = false;
    sched_options opt = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--model") || !strcmp(a, "--cluster") ||
                   !strcmp(a, "--emit-chakra") || !strcmp(a, "--chakra-prefix")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "piper-compile: %s needs a file name\n", a);
                return 2;
            }
            const char **dst = !strcmp(a, "-o")              ? &out
                               : !strcmp(a, "--model")       ? &model
                               : !strcmp(a, "--cluster")     ? &cluster
                               : !strcmp(a, "--emit-chakra") ? &chakra_dir
                                                             : &chakra_prefix;
            *dst = argv[++i];
        } else if (!strcmp(a, "--micro-batch") || !strcmp(a, "--global-batch")) {
            char *end = NULL;
            long long n = i + 1 < argc ? strtoll(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || *end || n < 1) {
                fprintf(stderr, "piper-compile: %s needs a whole number of sequences >= 1\n", a);
                return 2;
            }
            *(!strcmp(a, "--micro-batch") ? &opt.micro_batch : &opt.global_batch) = n;
            i++;
        } else if (!strcmp(a, "--emit-order")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "piper-compile: --emit-order needs a file name (or - for stdout)\n");
                return 2;
            }
            emit_order = argv[++i];
        } else if (!strcmp(a, "--emit-directives")) {
            emit_directives = true;
        } else if (!strcmp(a, "--dump-dag") || !strcmp(a, "--dump-dag=text")) {
            dump = "text";
        } else if (!strcmp(a, "--dump-dag=dot")) {
            dump = "dot";
        } else if (!strncmp(a, "--dump-after=", 13)) {
            dump_after = a + 13;
            if (!strcmp(dump_after, "list")) {
                list_passes(stdout);
                return 0;
            }
        } else if (!strcmp(a, "--allow-oom")) {
            opt.allow_oom = true;
        } else if (!strcmp(a, "--no-sendrecv-groups")) {
            opt.no_sendrecv_groups = true;
        } else if (!strcmp(a, "--p2p-per-channel")) {
            opt.p2p_per_channel = true;
        } else if (!strcmp(a, "--no-check")) {
            opt.no_check = true;
        } else if (!strcmp(a, "--check-all-devices")) {
            opt.check_all_devices = true;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = true;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "piper-compile: unknown option '%s'; see piper-compile --help\n", a);
            return 2;
        } else if (!program) {
            program = a;
        } else {
            fprintf(stderr, "piper-compile: one program at a time ('%s' and '%s')\n", program, a);
            return 2;
        }
    }
    if (!program) {
        usage(stderr);
        return 2;
    }

    sched_compilation c;
    sched_compilation_init(&c);
    base_error e;
    base_error_clear(&e);
    if (dump_after && sched_dump_after(&c, dump_after, stdout, &e)) {
        fprintf(stderr, "piper-compile: --dump-after: %s\n", e.msg);
        sched_compilation_free(&c);
        return 2;
    }
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
    if (!rc && !quiet && !text_out) sched_print_summary(&c, stdout);
    if (!rc && out && !quiet && !text_out) fprintf(stdout, "\nplan written to %s\n", out);
    sched_compilation_free(&c);
    return rc ? 1 : 0;
}
