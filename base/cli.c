/* cli.c — the one command-line parser of every piper binary (base.h, "command lines"): a table
 * of options read with getopt_long, the messages for what is wrong with an argument, and --help
 * printed from the same table, so that an option's name, value, range and help live in one
 * row. */
#define _GNU_SOURCE /* getopt_long */
#include "base.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* getopt_long's value for row i of the table: its short letter, or past every char for a row
 * with only a long name. */
#define LONG_ONLY 256

static bool takes_value(const base_opt *o) { return o->kind != BASE_OPT_FLAG && o->kind != BASE_OPT_GROUP; }

/* "--name" or "-c", for messages */
static const char *opt_label(const base_opt *o, char *buf, size_t n)
{
    if (o->name)
        snprintf(buf, n, "--%s", o->name);
    else
        snprintf(buf, n, "-%c", o->short_name);
    return buf;
}

static int bad_value(base_error *e, const base_opt *o, const char *v, const char *why, const char *want)
{
    char lb[80];
    return base_errorf(e, "%s: '%s' %s; write %s", opt_label(o, lb, sizeof lb), v, why, want);
}

/* Stores one option's value (v is NULL for a flag). */
static int store(const base_opt *o, const char *v, base_error *e)
{
    char why[160], want[160];
    if (o->given) *o->given = true;
    switch (o->kind) {
    case BASE_OPT_GROUP:
        return 0;
    case BASE_OPT_FLAG:
        *(bool *)o->dst = true;
        return 0;
    case BASE_OPT_INT: {
        int64_t x;
        if (base_parse_i64(v, o->lo, o->hi, &x, why, sizeof why)) {
            int64_t any; /* "in [1, 9223372036854775807]" says less than "too small" */
            if ((o->lo == INT64_MIN || o->hi == INT64_MAX) && !base_parse_i64(v, INT64_MIN, INT64_MAX, &any, NULL, 0))
                snprintf(why, sizeof why, "is %s", any < o->lo ? "too small" : "too large");
            if (!o->want)
                snprintf(want, sizeof want, "a whole number from %" PRId64 " to %" PRId64, o->lo, o->hi);
            return bad_value(e, o, v, why, o->want ? o->want : want);
        }
        *(int64_t *)o->dst = x;
        return 0;
    }
    case BASE_OPT_U64: {
        uint64_t x;
        if (base_parse_u64(v, 0, UINT64_MAX, &x, why, sizeof why))
            return bad_value(e, o, v, why, o->want ? o->want : "a whole number from 0 to 18446744073709551615");
        *(uint64_t *)o->dst = x;
        return 0;
    }
    case BASE_OPT_DOUBLE: {
        double x;
        if (base_parse_double(v, o->range, &x, why, sizeof why)) {
            char rb[64];
            if (!o->want) snprintf(want, sizeof want, "a number %s", base_fmt_range(o->range, rb, sizeof rb));
            return bad_value(e, o, v, why, o->want ? o->want : want);
        }
        *(double *)o->dst = x;
        return 0;
    }
    case BASE_OPT_PATH:
        if (!*v) return bad_value(e, o, v, "is an empty file name", o->want ? o->want : "a path");
        /* fall through */
    case BASE_OPT_STRING:
        *(const char **)o->dst = v;
        return 0;
    case BASE_OPT_LIST: {
        base_cli_list *l = o->dst;
        if (l->n >= BASE_CLI_LIST_MAX) {
            char lb[80];
            return base_errorf(e, "%s: given more than %d times; join the values with commas",
                               opt_label(o, lb, sizeof lb), BASE_CLI_LIST_MAX);
        }
        l->v[l->n++] = v;
        return 0;
    }
    case BASE_OPT_CALL:
        why[0] = 0;
        if (o->parse(v, o->dst, why, sizeof why)) {
            char lb[80];
            if (!why[0]) snprintf(why, sizeof why, "'%s' is not valid; write %s", v, o->want ? o->want : "another value");
            opt_label(o, lb, sizeof lb);
            /* a reader that names the option itself ("--coll direct: ...") is not named twice */
            if (!strncmp(why, lb, strlen(lb))) return base_errorf(e, "%s", why);
            return base_errorf(e, "%s: %s", lb, why);
        }
        return 0;
    }
    return 0;
}

/* The rows getopt_long sees: the table's plus --help and --version, which every binary has. */
static const base_opt builtin[] = {
    {BASE_OPT_FLAG, "help", 'h', NULL, NULL, "print this help and exit", NULL, 0, 0, {0, 0, 0, 0}, NULL, NULL, NULL, NULL},
    {BASE_OPT_FLAG, "version", 0, NULL, NULL, "print the version and exit", NULL, 0, 0, {0, 0, 0, 0}, NULL, NULL, NULL, NULL},
};

static const base_opt *row(const base_cli *cli, size_t i)
{
    return i < cli->nopts ? &cli->opts[i] : &builtin[i - cli->nopts];
}

int base_cli_parse(const base_cli *cli, int argc, char **argv, const char **pos, int *npos, base_error *e)
{
    size_t nrows = cli->nopts + BASE_COUNT(builtin);
    struct option *lo = base_xcalloc(nrows + 1, sizeof *lo);
    /* "-": arguments stay in order (returned as 1), argv is not permuted; ":": a missing value
     * is told apart from an unknown option */
    char *shorts = base_xcalloc(3 * nrows + 3, 1);
    size_t nl = 0, ns = 0;
    shorts[ns++] = '-';
    shorts[ns++] = ':';
    for (size_t i = 0; i < nrows; i++) {
        const base_opt *o = row(cli, i);
        if (o->kind == BASE_OPT_GROUP) continue;
        int val = o->short_name ? (unsigned char)o->short_name : LONG_ONLY + (int)i;
        int has = !takes_value(o) ? no_argument : o->implicit ? optional_argument : required_argument;
        if (o->name) lo[nl++] = (struct option){o->name, has, NULL, val};
        if (o->short_name) {
            shorts[ns++] = o->short_name;
            if (has != no_argument) shorts[ns++] = ':';
            if (has == optional_argument) shorts[ns++] = ':';
        }
    }
    *npos = 0;
    int rc = BASE_CLI_OK;
    opterr = 0;
    optind = 0; /* glibc: start over, so that a process (a test) may parse several command lines */
    for (;;) {
        int at = optind < 1 ? 1 : optind, li = -1;
        int c = getopt_long(argc, argv, shorts, lo, &li);
        if (c == -1) break;
        if (c == 1) {
            pos[(*npos)++] = optarg;
            continue;
        }
        if (c == '?' || c == ':') {
            const char *text = at < argc ? argv[at] : "";
            char name[80];
            if (optopt >= LONG_ONLY || (optopt > 0 && text[0] == '-' && text[1] == '-')) {
                /* a known option: a long one given a value it does not take, or one missing its value */
                const base_opt *o = NULL;
                for (size_t i = 0; i < nrows && !o; i++) {
                    const base_opt *r = row(cli, i);
                    int val = r->short_name ? (unsigned char)r->short_name : LONG_ONLY + (int)i;
                    if (r->kind != BASE_OPT_GROUP && val == optopt) o = r;
                }
                if (o && c == ':')
                    rc = base_errorf(e, "%s: needs a value (%s); see %s --help", opt_label(o, name, sizeof name),
                                     o->arg ? o->arg : "VALUE", cli->prog);
                else if (o)
                    rc = base_errorf(e, "%s: takes no value; write %s alone", opt_label(o, name, sizeof name),
                                     opt_label(o, name, sizeof name));
                else
                    rc = base_errorf(e, "%s: unknown option; see %s --help", text, cli->prog);
            } else if (optopt > 0) {
                const base_opt *o = NULL;
                for (size_t i = 0; i < nrows && !o; i++)
                    if (row(cli, i)->short_name == optopt && row(cli, i)->kind != BASE_OPT_GROUP) o = row(cli, i);
                if (o && c == ':')
                    rc = base_errorf(e, "-%c: needs a value (%s); see %s --help", optopt, o->arg ? o->arg : "VALUE",
                                     cli->prog);
                else
                    rc = base_errorf(e, "-%c: unknown option; see %s --help", optopt, cli->prog);
            } else {
                size_t n = strcspn(text, "=");
                snprintf(name, sizeof name, "%.*s", (int)(n < 70 ? n : 70), text);
                rc = base_errorf(e, "%s: unknown option; see %s --help", name, cli->prog);
            }
            break;
        }
        size_t idx = nrows;
        if (c >= LONG_ONLY) {
            idx = (size_t)(c - LONG_ONLY);
        } else {
            for (size_t i = 0; i < nrows && idx == nrows; i++)
                if (row(cli, i)->short_name == c && row(cli, i)->kind != BASE_OPT_GROUP) idx = i;
        }
        if (idx >= nrows) continue; /* cannot happen: getopt returns only what it was given */
        const base_opt *o = row(cli, idx);
        if (li >= 0) {
            /* getopt_long takes a unique prefix of a name; piper's names are written whole, so
             * that adding an option never changes what an existing command line means */
            const char *text = argv[at];
            size_t n = strlen(o->name);
            if (strncmp(text + 2, o->name, n) != 0 || (text[2 + n] && text[2 + n] != '=')) {
                size_t m = strcspn(text, "=");
                rc = base_errorf(e, "%.*s: unknown option (did you mean --%s?); see %s --help", (int)(m < 70 ? m : 70),
                                 text, o->name, cli->prog);
                break;
            }
        }
        if (o == &builtin[0]) {
            rc = BASE_CLI_HELP;
            break;
        }
        if (o == &builtin[1]) {
            rc = BASE_CLI_VERSION;
            break;
        }
        const char *v = takes_value(o) ? (optarg ? optarg : o->implicit) : NULL;
        if (store(o, v, e)) {
            rc = -1;
            break;
        }
    }
    if (rc == BASE_CLI_OK)
        for (int i = optind; i < argc; i++) pos[(*npos)++] = argv[i]; /* after "--" */
    optind = 0;
    free(lo);
    free(shorts);
    return rc < 0 ? -1 : rc;
}

/* ---------------------------------------------------------------- --help */

/* The width of the option column: the longest "-c, --name ARG", up to a limit past which a
 * row's help starts on the next line. */
#define HELP_COL_MAX 26
#define HELP_WIDTH 80

static int opt_text(const base_opt *o, char *buf, size_t n)
{
    char arg[64] = "";
    if (takes_value(o)) {
        const char *a = o->arg ? o->arg : "VALUE";
        if (o->implicit)
            snprintf(arg, sizeof arg, "[=%s]", a);
        else
            snprintf(arg, sizeof arg, o->name ? " %s" : " %s", a);
    }
    if (o->name && o->short_name)
        return snprintf(buf, n, "-%c, --%s%s", o->short_name, o->name, arg);
    if (o->name) return snprintf(buf, n, "    --%s%s", o->name, arg);
    return snprintf(buf, n, "-%c%s", o->short_name, arg);
}

/* Prints text wrapped to HELP_WIDTH, its lines after the first indented to `indent`; the first
 * starts at column `col`. A '\n' in the text starts a new line; a line that starts with spaces
 * is printed as written. */
static void wrap(FILE *f, const char *text, int col, int indent)
{
    const char *w = text;
    bool line_start = true;
    while (*w) {
        if (*w == '\n') {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
            line_start = true;
            w++;
            continue;
        }
        /* spaces are kept as written (help may align a small table), except where a line breaks */
        int gap = (int)strspn(w, " ");
        if (line_start && gap > 0 && w > text && w[-1] == '\n') {
            /* a line that starts indented is a table row: printed as written, never wrapped */
            int n = (int)strcspn(w, "\n");
            col += fprintf(f, "%.*s", n, w);
            w += n;
            line_start = false;
            continue;
        }
        w += gap;
        if (!*w) break;
        if (*w == '\n') continue;
        int n = (int)strcspn(w, " \n");
        if (!line_start && col + gap + n > HELP_WIDTH) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
            gap = 0;
        } else if (!line_start && gap == 0) {
            gap = 1;
        }
        col += fprintf(f, "%*s%.*s", gap, "", n, w);
        line_start = false;
        w += n;
    }
}

void base_cli_help(const base_cli *cli, FILE *f)
{
    fprintf(f, "usage: %s\n", cli->usage);
    if (cli->about) fprintf(f, "\n%s\n", cli->about);
    size_t nrows = cli->nopts + BASE_COUNT(builtin);
    int colw = 0;
    for (size_t i = 0; i < nrows; i++) {
        char t[128];
        if (row(cli, i)->kind == BASE_OPT_GROUP) continue;
        int n = opt_text(row(cli, i), t, sizeof t);
        if (n <= HELP_COL_MAX && n > colw) colw = n;
    }
    int indent = 2 + colw + 2;
    bool heading = cli->nopts > 0 && cli->opts[0].kind == BASE_OPT_GROUP;
    if (!heading) fprintf(f, "\noptions:\n");
    for (size_t i = 0; i < nrows; i++) {
        const base_opt *o = row(cli, i);
        if (o->kind == BASE_OPT_GROUP) {
            fprintf(f, "\n%s:\n", o->help);
            continue;
        }
        if (i == cli->nopts && heading) fprintf(f, "\nother:\n");
        char t[128];
        int n = opt_text(o, t, sizeof t);
        fprintf(f, "  %s", t);
        int col = 2 + n;
        if (n > colw) {
            fprintf(f, "\n%*s", indent, "");
        } else {
            fprintf(f, "%*s", indent - col, "");
        }
        col = indent;
        char buf[1024];
        snprintf(buf, sizeof buf, "%s%s%s%s", o->help ? o->help : "", o->def ? " (default: " : "", o->def ? o->def : "",
                 o->def ? ")" : "");
        wrap(f, buf, col, indent);
        fputc('\n', f);
    }
    if (cli->epilogue) fprintf(f, "\n%s", cli->epilogue);
    if (cli->epilogue_fn) cli->epilogue_fn(f);
}

void base_cli_version(const base_cli *cli, FILE *f) { fprintf(f, "%s %s\n", cli->prog, PIPER_VERSION); }

int base_cli_finish(const base_cli *cli, int rc, const base_error *e)
{
    if (rc == BASE_CLI_HELP) {
        base_cli_help(cli, stdout);
        return 0;
    }
    if (rc == BASE_CLI_VERSION) {
        base_cli_version(cli, stdout);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "%s: %s\n", cli->prog, e->msg);
        return BASE_CLI_USAGE_EXIT;
    }
    return -1;
}

int base_cli_usage_error(const base_cli *cli, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", cli->prog);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "; see %s --help\n", cli->prog);
    va_end(ap);
    return BASE_CLI_USAGE_EXIT;
}
