/* test_cli.c — the command-line parser every binary uses (base_cli_parse, base.h): both spellings
 * of a value, short options and clusters, defaults left alone, every kind's range and message,
 * unknown and abbreviated options, missing and unwanted values, `--`, help and version, and the
 * generated --help; and the progress line, which stays silent off a terminal. */
#define _POSIX_C_SOURCE 200809L /* fmemopen */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "tests/testutil.h"

/* The options of a made-up binary, one of each kind. */
typedef struct vals {
    bool quiet, dry;
    int64_t steps;
    uint64_t seed;
    double lr;
    const char *out, *name, *dump;
    base_cli_list costs;
    int mode;
    bool steps_given;
} vals;

static int parse_mode(const char *v, void *dst, char *why, size_t n)
{
    if (!strcmp(v, "fast")) *(int *)dst = 1;
    else if (!strcmp(v, "slow")) *(int *)dst = 2;
    else {
        snprintf(why, n, "'%s' is not a mode; write fast or slow", v);
        return -1;
    }
    return 0;
}

static vals V;
static const base_opt opts[] = {
    {.kind = BASE_OPT_GROUP, .help = "runs"},
    {BASE_OPT_FLAG, "quiet", 'q', NULL, &V.quiet, .help = "say nothing"},
    {BASE_OPT_FLAG, "dry-run", 0, NULL, &V.dry, .help = "do nothing"},
    {BASE_OPT_INT, "steps", 's', "K", &V.steps, .lo = 1, .hi = 100, .help = "steps to run", .def = "5",
     .given = &V.steps_given},
    {BASE_OPT_U64, "seed", 0, "S", &V.seed, .help = "the seed"},
    {BASE_OPT_DOUBLE, "lr", 0, "X", &V.lr, .range = {0, HUGE_VAL, 1, 0}, .want = "a learning rate > 0",
     .help = "learning rate"},
    {.kind = BASE_OPT_GROUP, .help = "outputs"},
    {BASE_OPT_PATH, NULL, 'o', "FILE", &V.out, .help = "where it goes"},
    {BASE_OPT_STRING, "name", 0, "TEXT", &V.name, .help = "a name"},
    {BASE_OPT_LIST, "costs", 0, "LIST", &V.costs, .help = "costs, again and again"},
    {BASE_OPT_CALL, "mode", 0, "fast|slow", &V.mode, .parse = parse_mode, .help = "how"},
    {BASE_OPT_STRING, "dump", 0, "text|dot", &V.dump, .implicit = "text", .help = "dump it"},
};
static const base_cli cli = {.prog = "piper-test", .usage = "piper-test FILE [options]", .about = "Tests.",
                             .opts = opts, .nopts = BASE_COUNT(opts), .epilogue = "exit status: 0.\n"};

/* parse the words of `line` (space-separated) after a program name */
static const char *pos[64];
static int npos;
static base_error E;
static int parse(const char *line)
{
    static char buf[512];
    static char *argv[64];
    snprintf(buf, sizeof buf, "%s", line);
    int argc = 0;
    argv[argc++] = "piper-test";
    for (char *t = strtok(buf, " "); t && argc < 63; t = strtok(NULL, " ")) argv[argc++] = t;
    argv[argc] = NULL;
    memset(&V, 0, sizeof V);
    V.steps = 5;
    base_error_clear(&E);
    return base_cli_parse(&cli, argc, argv, pos, &npos, &E);
}

static void test_both_spellings(void)
{
    CU_ASSERT_EQUAL(parse("a.yaml --steps=7 --lr 0.5 -o out.txt --name=x b"), BASE_CLI_OK);
    CU_ASSERT_EQUAL(V.steps, 7);
    CU_ASSERT_TRUE(V.steps_given);
    CU_ASSERT_DOUBLE_EQUAL(V.lr, 0.5, 0);
    CU_ASSERT_STRING_EQUAL(V.out, "out.txt");
    CU_ASSERT_STRING_EQUAL(V.name, "x");
    /* the other arguments, in order */
    CU_ASSERT_EQUAL(npos, 2);
    CU_ASSERT_STRING_EQUAL(pos[0], "a.yaml");
    CU_ASSERT_STRING_EQUAL(pos[1], "b");
    CU_ASSERT_EQUAL(parse("--steps 7 --lr=0.5 -oout.txt --name x"), BASE_CLI_OK);
    CU_ASSERT_EQUAL(V.steps, 7);
    CU_ASSERT_DOUBLE_EQUAL(V.lr, 0.5, 0);
    CU_ASSERT_STRING_EQUAL(V.out, "out.txt");
    CU_ASSERT_EQUAL(npos, 0);
    /* short options cluster; a default stays when the option is absent */
    CU_ASSERT_EQUAL(parse("-qs3"), BASE_CLI_OK);
    CU_ASSERT_TRUE(V.quiet);
    CU_ASSERT_EQUAL(V.steps, 3);
    CU_ASSERT_EQUAL(parse("--quiet"), BASE_CLI_OK);
    CU_ASSERT_EQUAL(V.steps, 5);
    CU_ASSERT_FALSE(V.steps_given);
    CU_ASSERT_FALSE(V.dry);
}

static void test_values_and_kinds(void)
{
    /* a seed takes all 64 bits, exactly */
    CU_ASSERT_EQUAL(parse("--seed 18446744073709551615"), BASE_CLI_OK);
    CU_ASSERT_EQUAL(V.seed, UINT64_MAX);
    CU_ASSERT_EQUAL(parse("--costs a=1 --costs=b=2"), BASE_CLI_OK);
    CU_ASSERT_EQUAL(V.costs.n, 2);
    CU_ASSERT_STRING_EQUAL(V.costs.v[1], "b=2");
    CU_ASSERT_EQUAL(parse("--mode slow"), BASE_CLI_OK);
    CU_ASSERT_EQUAL(V.mode, 2);
    /* an optional value: bare means the implicit one; only --opt=VALUE gives another, and a word
     * after the bare option is an argument */
    CU_ASSERT_EQUAL(parse("--dump"), BASE_CLI_OK);
    CU_ASSERT_STRING_EQUAL(V.dump, "text");
    CU_ASSERT_EQUAL(parse("--dump=dot"), BASE_CLI_OK);
    CU_ASSERT_STRING_EQUAL(V.dump, "dot");
    CU_ASSERT_EQUAL(parse("--dump dot"), BASE_CLI_OK);
    CU_ASSERT_STRING_EQUAL(V.dump, "text");
    CU_ASSERT_EQUAL(npos, 1);
    /* a value that looks like an option is still the value; "-" is an argument */
    CU_ASSERT_EQUAL(parse("--name -q -"), BASE_CLI_OK);
    CU_ASSERT_STRING_EQUAL(V.name, "-q");
    CU_ASSERT_FALSE(V.quiet);
    CU_ASSERT_EQUAL(npos, 1);
    CU_ASSERT_STRING_EQUAL(pos[0], "-");
    /* after --, everything is an argument */
    CU_ASSERT_EQUAL(parse("a -- --steps -q"), BASE_CLI_OK);
    CU_ASSERT_EQUAL(npos, 3);
    CU_ASSERT_STRING_EQUAL(pos[1], "--steps");
    CU_ASSERT_FALSE(V.quiet);
    /* the same table parses again from the start */
    CU_ASSERT_EQUAL(parse("-q"), BASE_CLI_OK);
    CU_ASSERT_TRUE(V.quiet);
}

static void test_errors(void)
{
    CU_ASSERT_EQUAL(parse("--steps 0"), -1);
    CU_ASSERT_STRING_EQUAL(E.msg, "--steps: '0' is not a whole number in [1, 100]; write a whole number from 1 to 100");
    CU_ASSERT_EQUAL(parse("--steps=1.5"), -1);
    CU_ASSERT_STRING_EQUAL(E.msg, "--steps: '1.5' is not a whole number; write a whole number from 1 to 100");
    CU_ASSERT_EQUAL(parse("-s 101"), -1);
    CU_ASSERT_STRING_EQUAL(E.msg, "--steps: '101' is not a whole number in [1, 100]; write a whole number from 1 to 100");
    CU_ASSERT_EQUAL(parse("--lr inf"), -1);
    CU_ASSERT_STRING_EQUAL(E.msg, "--lr: 'inf' is not a finite number; write a learning rate > 0");
    CU_ASSERT_EQUAL(parse("--lr 0"), -1);
    CU_ASSERT_STRING_EQUAL(E.msg, "--lr: '0' is not > 0; write a learning rate > 0");
    CU_ASSERT_EQUAL(parse("--seed -1"), -1);
    TEST_ASSERT_CONTAINS(E.msg, "--seed: '-1' ");
    CU_ASSERT_EQUAL(parse("-o="), BASE_CLI_OK); /* a short option's value follows it as written */
    CU_ASSERT_STRING_EQUAL(V.out, "=");
    char *empty[] = {"piper-test", "-o", "", NULL};
    CU_ASSERT_EQUAL(base_cli_parse(&cli, 3, empty, pos, &npos, &E), -1);
    CU_ASSERT_STRING_EQUAL(E.msg, "-o: '' is an empty file name; write a path");
    CU_ASSERT_EQUAL(parse("--mode=medium"), -1);
    CU_ASSERT_STRING_EQUAL(E.msg, "--mode: 'medium' is not a mode; write fast or slow");
    CU_ASSERT_EQUAL(parse("--bogus=3"), -1);
    CU_ASSERT_STRING_EQUAL(E.msg, "--bogus: unknown option; see piper-test --help");
    CU_ASSERT_EQUAL(parse("-x"), -1);
    CU_ASSERT_STRING_EQUAL(E.msg, "-x: unknown option; see piper-test --help");
    /* a prefix is not a name: adding an option must never change what a command line means */
    CU_ASSERT_EQUAL(parse("--ste 3"), -1);
    CU_ASSERT_STRING_EQUAL(E.msg, "--ste: unknown option (did you mean --steps?); see piper-test --help");
    CU_ASSERT_EQUAL(parse("--steps"), -1);
    CU_ASSERT_STRING_EQUAL(E.msg, "--steps: needs a value (K); see piper-test --help");
    CU_ASSERT_EQUAL(parse("-o"), -1);
    CU_ASSERT_STRING_EQUAL(E.msg, "-o: needs a value (FILE); see piper-test --help");
    CU_ASSERT_EQUAL(parse("--quiet=yes"), -1);
    CU_ASSERT_STRING_EQUAL(E.msg, "--quiet: takes no value; write --quiet alone");
    CU_ASSERT_EQUAL(parse("--name="), BASE_CLI_OK); /* an empty string is a string */
    CU_ASSERT_EQUAL(parse("--costs 1 --costs 2 --costs 3 --costs 4 --costs 5 --costs 6 --costs 7 --costs 8 --costs 9 "
                          "--costs 10 --costs 11 --costs 12 --costs 13 --costs 14 --costs 15 --costs 16 --costs 17"),
                    -1);
    CU_ASSERT_STRING_EQUAL(E.msg, "--costs: given more than 16 times; join the values with commas");
}

static void test_help_and_version(void)
{
    CU_ASSERT_EQUAL(parse("a --help"), BASE_CLI_HELP);
    CU_ASSERT_EQUAL(parse("-h"), BASE_CLI_HELP);
    CU_ASSERT_EQUAL(parse("--version --steps 0"), BASE_CLI_VERSION);
    char buf[4096] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    base_cli_version(&cli, f);
    fclose(f);
    CU_ASSERT_STRING_EQUAL(buf, "piper-test " PIPER_VERSION "\n");
    memset(buf, 0, sizeof buf);
    f = fmemopen(buf, sizeof buf - 1, "w");
    base_cli_help(&cli, f);
    fclose(f);
    /* grouped, aligned in one column, with defaults and the built-in options */
    TEST_ASSERT_CONTAINS(buf, "usage: piper-test FILE [options]\n\nTests.\n\nruns:\n");
    TEST_ASSERT_CONTAINS(buf, "  -q, --quiet            say nothing\n");
    TEST_ASSERT_CONTAINS(buf, "  -s, --steps K          steps to run (default: 5)\n");
    TEST_ASSERT_CONTAINS(buf, "      --dump[=text|dot]  dump it\n");
    TEST_ASSERT_CONTAINS(buf, "\noutputs:\n  -o FILE                where it goes\n");
    TEST_ASSERT_CONTAINS(buf, "\nother:\n  -h, --help             print this help and exit\n");
    TEST_ASSERT_CONTAINS(buf, "      --version          print the version and exit\n\nexit status: 0.\n");
}

static void test_progress_silent_off_terminal(void)
{
    base_progress p;
    base_progress_begin(&p, "piper-test", "testing");
    /* ctest's stderr is a file or pipe: no line, however long the run */
    p.t0 -= 100;
    if (p.f == NULL) {
        base_progress_update(&p, 1, 2, NULL);
        CU_ASSERT_EQUAL(p.shown, 0);
    }
    /* on a "terminal" (a buffer standing in), nothing before two seconds, then the line */
    char buf[512] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    base_progress_begin(&p, "piper-test", "testing");
    p.f = f;
    base_progress_update(&p, 1, 4, "step 1");
    CU_ASSERT_EQUAL(p.shown, 0);
    p.t0 -= 3;
    base_progress_update(&p, 1, 4, "step 1");
    CU_ASSERT_EQUAL(p.shown, 1);
    fflush(f);
    TEST_ASSERT_CONTAINS(buf, "\rpiper-test: testing  25% (step 1), 3 s elapsed, about 9 s left");
    base_progress_end(&p);
    fclose(f);
}

int piper_tests_register_cli(void)
{
    static const test_case cases[] = {
        {"--opt=value and --opt value", test_both_spellings},
        {"every kind of value", test_values_and_kinds},
        {"errors name the option and what to write", test_errors},
        {"--help from the table, --version", test_help_and_version},
        {"progress only on a terminal, after two seconds", test_progress_silent_off_terminal},
        {NULL, NULL}};
    return test_add_suite("cli", cases);
}
