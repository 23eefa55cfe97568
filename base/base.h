/* base.h — the few things every piper module needs and none owns: an arena that a compilation
 * allocates from (everything dies with it), an error object that carries a user-facing message
 * ("file:line:col: what is wrong; what to do") plus warnings, a growable string buffer and a
 * growable array, and the rules by which a number written by a user is read (base_parse_*).
 *
 * Library code never exits: it returns -1 (or NULL) and fills a base_error; main() decides.
 * Host out-of-memory is the one exception: it aborts with a message, as compilers do. */
#ifndef PIPER_BASE_H
#define PIPER_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#if defined(__GNUC__)
#define BASE_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define BASE_PRINTF(f, a)
#endif

/* ---------------------------------------------------------------- arena */

typedef struct base_arena_block base_arena_block;
typedef struct base_arena {
    base_arena_block *head;   /* newest block first */
    size_t bytes_reserved;    /* sum of block sizes, for RSS accounting in benchmarks */
} base_arena;

void base_arena_init(base_arena *a);
void base_arena_free(base_arena *a);
/* Zeroed, 16-byte aligned memory that lives until base_arena_free. */
void *base_arena_alloc(base_arena *a, size_t size);
void *base_arena_calloc(base_arena *a, size_t n, size_t size);
char *base_arena_strdup(base_arena *a, const char *s);
char *base_arena_strndup(base_arena *a, const char *s, size_t n);
char *base_arena_printf(base_arena *a, const char *fmt, ...) BASE_PRINTF(2, 3);
/* Grows an arena array to hold at least `need` elements; returns the (possibly moved) array.
 * The old storage stays in the arena; doubling keeps the waste under 2x. */
void *base_arena_grow(base_arena *a, void *ptr, size_t *cap, size_t need, size_t elem);

/* ---------------------------------------------------------------- errors */

#define BASE_ERROR_MAX 2048
#define BASE_WARN_MAX 8192

typedef struct base_error {
    int set;                        /* nonzero once an error was recorded */
    char msg[BASE_ERROR_MAX];       /* the first error wins: later ones are usually consequences */
    int nwarn;
    char warnings[BASE_WARN_MAX];   /* newline-separated, truncated if there are too many */
} base_error;

void base_error_clear(base_error *e);
/* Record an error; returns -1 so callers can `return base_errorf(...)`. */
int base_errorf(base_error *e, const char *fmt, ...) BASE_PRINTF(2, 3);
/* Record an error located in a file: "file:line:col: message". line/col <= 0 are omitted. */
int base_error_at(base_error *e, const char *file, int line, int col, const char *fmt, ...)
    BASE_PRINTF(5, 6);
int base_error_vat(base_error *e, const char *file, int line, int col, const char *fmt,
                   va_list ap);
/* Prefix an existing error with context ("in directive 3 (place) at prog.yaml:12:3: ..."). */
void base_error_prefix(base_error *e, const char *fmt, ...) BASE_PRINTF(2, 3);
void base_warn_at(base_error *e, const char *file, int line, int col, const char *fmt, ...)
    BASE_PRINTF(5, 6);
/* Print warnings (each line prefixed "warning: ") and the error ("error: ") to f. */
void base_error_print(const base_error *e, FILE *f);

/* ---------------------------------------------------------------- strings */

typedef struct base_buf {
    char *s;        /* always NUL-terminated once anything was appended */
    size_t n, cap;
} base_buf;

void base_buf_free(base_buf *b);
void base_buf_puts(base_buf *b, const char *s);
void base_buf_putn(base_buf *b, const char *s, size_t n);
void base_buf_printf(base_buf *b, const char *fmt, ...) BASE_PRINTF(2, 3);
/* The most bytes piper reads from one input file that people write (models, clusters,
 * programs, order CSVs, calibration tables, checkpoint manifests; docs/programs.md, "Inputs"): a
 * larger one is refused before it is read, so that a wrong path (/dev/zero, a data set) fails at
 * once instead of exhausting memory. Parsed documents take some twenty times their size. */
#define BASE_READ_MAX ((size_t)64 << 20)
/* The same for files piper writes itself and reads back: plans (a 1,024-GPU plan is some 80 MB)
 * and Chrome traces. */
#define BASE_READ_MAX_WRITTEN ((size_t)2 << 30)
/* Read a whole file of at most BASE_READ_MAX bytes (a regular file, a pipe or a device); returns
 * -1 with an error naming the path on failure: cannot open, a directory, too large, a read
 * error. */
int base_read_file(const char *path, base_buf *out, base_error *e);
/* The same with another limit (BASE_READ_MAX_WRITTEN). */
int base_read_file_max(const char *path, base_buf *out, size_t max, base_error *e);

/* Human-readable byte count with binary units ("1.50 GiB"); returns buf. */
const char *base_fmt_bytes(double bytes, char *buf, size_t n);

/* ---------------------------------------------------------------- numbers */

/* The one set of rules by which piper reads a number a user wrote (options, --costs, plan
 * figures): the whole string, decimal, finite, inside a stated range. Integers are exact:
 * "1.5", "1e3" and anything past the range's ends are refused rather than rounded or
 * truncated (a seed read through a double would merge 2^53 and 2^53 + 1). Each returns 0, or
 * -1 with `why` (when not NULL) saying what is wrong, e.g. "is not a finite number"; callers
 * name the option or key around it. */
typedef struct base_range {
    double lo, hi;
    unsigned char lo_open, hi_open; /* nonzero: the end itself is outside the range */
} base_range;

int base_parse_double(const char *s, base_range r, double *out, char *why, size_t n);
int base_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out, char *why, size_t n);
int base_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out, char *why, size_t n);
/* x in r (false for NaN), and r written for a message: "> 0", "in [0, 1)", "in [1, 1e+06]". */
int base_in_range(double x, base_range r);
const char *base_fmt_range(base_range r, char *buf, size_t n);

/* ---------------------------------------------------------------- output files (out.c) */

/* The one way piper writes a file it is told to write (-o, --trace, dumps, checkpoints), so that
 * an output is never half-written and nothing but the named file changes:
 * - a regular file (or a new name) is written to a temporary made with mkstemp in the target's
 *   directory, flushed, fsynced and renamed over the target, and the directory is fsynced; a
 *   new file gets mode 0666 & ~umask, a replaced one keeps its permission bits;
 * - a symbolic link is written through: the file at the end of the chain of links is replaced
 *   and the links stay (a dangling link creates the file it names);
 * - a character device or FIFO (/dev/null, /dev/stdout, a pipe) is written directly: it cannot
 *   be replaced, and a write error on it (/dev/full's ENOSPC) fails as any other;
 * - a directory, block device or socket is refused.
 * Replacing by rename gives the path a new file: another hard link to the old one keeps the old
 * contents.
 * On any failure the temporary is removed, the old file is untouched, and the error names the
 * path, the system's reason and what to do. `what` names the output in messages ("the plan"). */
typedef struct base_out {
    FILE *f;          /* write here; NULL once committed or aborted */
    struct base_out_sink *sink; /* the descriptor under f and its first write error (out.c) */
    char *path;       /* the file that ends up written (through any symlinks) */
    char *tmp;        /* the temporary; NULL when writing a device or FIFO directly */
    char what[64];    /* "the plan", for messages */
    int mode;         /* permission bits the file ends up with */
} base_out;

int base_out_open(base_out *o, const char *path, const char *what, base_error *e);
/* Flushes, fsyncs and closes, then renames into place; checks every step. On failure it aborts,
 * so after commit (success or not) the base_out holds nothing. */
int base_out_commit(base_out *o, base_error *e);
/* Closes and removes the temporary: the target stays as it was. Safe to call twice. */
void base_out_abort(base_out *o);
/* For a writer that failed: aborts, and when a write had failed records the error the commit
 * would have (path, errno, what to do); returns -1. */
int base_out_fail(base_out *o, base_error *e);
/* open + one write + commit. */
int base_out_write_file(const char *path, const char *what, const void *data, size_t n, base_error *e);
/* fsyncs a directory, so that renames and creations in it survive a crash. */
int base_fsync_dir(const char *dir, base_error *e);

/* ---------------------------------------------------------------- command lines (cli.c) */

/* The one command-line convention of every piper binary (docs/cli.md): each binary describes its
 * options in one table, one base_opt row per option, and base_cli_parse reads argv by that table
 * (getopt_long: `--opt=value` and `--opt value`, short options, `--` ends the options), reads
 * numbers by base_parse_* and states the range in the message, and base_cli_help prints --help
 * from the same rows (grouped, aligned, with defaults). --help and --version are in every table
 * without being written. The parser never prints and never exits: main decides (exit status 2
 * for a usage error, BASE_CLI_USAGE_EXIT). */

/* The project's version, printed by every binary's --version as "piper-X <version>". */
#define PIPER_VERSION "0.1.0"
#define BASE_CLI_USAGE_EXIT 2

typedef enum base_opt_kind {
    BASE_OPT_GROUP,  /* not an option: a heading in --help (`help` is the heading) */
    BASE_OPT_FLAG,   /* bool *dst = true */
    BASE_OPT_INT,    /* int64_t *dst, a whole number in [lo, hi] */
    BASE_OPT_U64,    /* uint64_t *dst, any whole number from 0 to 2^64 - 1 */
    BASE_OPT_DOUBLE, /* double *dst, a finite number in `range` */
    BASE_OPT_STRING, /* const char **dst = the value (argv's own storage) */
    BASE_OPT_PATH,   /* the same, a file name: an empty one is refused */
    BASE_OPT_LIST,   /* base_cli_list *dst: each use appends its value */
    BASE_OPT_CALL,   /* parse(value, dst, why, n) reads it; nonzero with `why` refuses it */
} base_opt_kind;

#define BASE_CLI_LIST_MAX 16
typedef struct base_cli_list {
    const char *v[BASE_CLI_LIST_MAX];
    int n;
} base_cli_list;

typedef struct base_opt {
    base_opt_kind kind;
    const char *name;       /* long name without "--"; NULL: a short option only */
    char short_name;        /* 0: none */
    const char *arg;        /* the value's name in --help ("FILE", "N"); NULL for a flag */
    void *dst;
    const char *help;       /* what it does; '\n' starts a new line of help */
    const char *def;        /* the default, shown as "(default: ...)"; NULL: none shown */
    int64_t lo, hi;         /* BASE_OPT_INT: the range */
    base_range range;       /* BASE_OPT_DOUBLE: the range */
    const char *want;       /* for messages, what to write ("a learning rate > 0"); NULL: from
                               the range */
    int (*parse)(const char *value, void *dst, char *why, size_t n); /* BASE_OPT_CALL */
    const char *implicit;   /* non-NULL: the value may be left out (only as --opt, never
                               --opt VALUE), and this is the value then */
    bool *given;            /* non-NULL: set when the option appears */
} base_opt;

typedef struct base_cli {
    const char *prog;       /* "piper-compile", in every message */
    const char *usage;      /* after "usage: ": "piper-compile PROGRAM [options]" */
    const char *about;      /* the paragraph after the usage line; may be NULL */
    const base_opt *opts;
    size_t nopts;
    const char *epilogue;   /* printed after the options (exit status, examples); may be NULL */
    void (*epilogue_fn)(FILE *f); /* then this, for tables only the binary knows */
} base_cli;

enum { BASE_CLI_OK = 0, BASE_CLI_HELP = 1, BASE_CLI_VERSION = 2 };

/* Reads argv[1..argc) by the table: options into their destinations, the other arguments, in
 * order, into pos (room for argc entries) and *npos. Returns BASE_CLI_OK, BASE_CLI_HELP or
 * BASE_CLI_VERSION when asked (main prints and exits 0), or -1 with e saying "--opt: what is
 * wrong; what to do" (main prints it after "prog: " and exits BASE_CLI_USAGE_EXIT). Abbreviated
 * long options are refused: a name is written whole. */
int base_cli_parse(const base_cli *cli, int argc, char **argv, const char **pos, int *npos, base_error *e);
void base_cli_help(const base_cli *cli, FILE *f);
void base_cli_version(const base_cli *cli, FILE *f);
/* The usual end of a parse in main: help or version printed on stdout (returns 0), an error
 * printed on stderr as "prog: message" (returns BASE_CLI_USAGE_EXIT); -1 when rc is BASE_CLI_OK
 * (go on). */
int base_cli_finish(const base_cli *cli, int rc, const base_error *e);
/* A usage error found after parsing (a missing input, options that do not go together): prints
 * "prog: message; see prog --help" on stderr and returns BASE_CLI_USAGE_EXIT. */
int base_cli_usage_error(const base_cli *cli, const char *fmt, ...) BASE_PRINTF(2, 3);

/* ---------------------------------------------------------------- progress (progress.c) */

/* A progress line on a terminal: "piper-X: what 40% (detail), 3 s left" rewritten in place on
 * stderr, at most ten times a second, and only once a run has taken two seconds, so that short
 * runs print nothing; never when stderr is not a terminal, so pipes, files and tests see no
 * change. base_progress_end erases the line. PIPER_PROGRESS_AFTER=SECONDS in the environment
 * moves the two seconds (tests). */
typedef struct base_progress {
    FILE *f;            /* NULL: off (stderr is no terminal) */
    const char *prog, *what;
    double t0, last;    /* monotonic seconds: the start, the last line */
    double after;       /* seconds before the first line (2) */
    int shown;          /* a line is on the screen */
} base_progress;

void base_progress_begin(base_progress *p, const char *prog, const char *what);
/* done of total units (total <= 0: unknown, no percentage or ETA); detail may be NULL. */
void base_progress_update(base_progress *p, double done, double total, const char *detail);
/* Erases the line for a moment (before other output on the terminal); the next update draws it
 * again. */
void base_progress_clear(base_progress *p);
void base_progress_end(base_progress *p);
double base_now(void);

/* ---------------------------------------------------------------- arrays */

/* A growable malloc-backed array: BASE_VEC(int) v = {0}; BASE_VEC_PUSH(v, 3); free(v.v). */
#define BASE_VEC(T) struct { T *v; size_t n, cap; }
#define BASE_VEC_PUSH(vec, x)                                                          \
    do {                                                                               \
        if ((vec).n == (vec).cap) {                                                    \
            (vec).cap = (vec).cap ? 2 * (vec).cap : 16;                                \
            (vec).v = base_xrealloc((vec).v, (vec).cap * sizeof *(vec).v);             \
        }                                                                              \
        (vec).v[(vec).n++] = (x);                                                      \
    } while (0)

void *base_xmalloc(size_t n);
void *base_xcalloc(size_t n, size_t size);
void *base_xrealloc(void *p, size_t n);

#define BASE_COUNT(a) (sizeof(a) / sizeof((a)[0]))

#endif
