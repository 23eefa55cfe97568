/* base.h — the few things every piper module needs and none owns: an arena that a compilation
 * allocates from (everything dies with it), an error object that carries a user-facing message
 * ("file:line:col: what is wrong; what to do") plus warnings, a growable string buffer and a
 * growable array.
 *
 * Library code never exits: it returns -1 (or NULL) and fills a base_error; main() decides.
 * Host out-of-memory is the one exception: it aborts with a message, as compilers do. */
#ifndef PIPER_BASE_H
#define PIPER_BASE_H

#include <stdarg.h>
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
