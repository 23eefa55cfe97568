/* base.c — arena, error object, string buffer and checked allocation (see base.h). */
#include "base.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- allocation */

static void base_oom(size_t n)
{
    fprintf(stderr, "piper: out of host memory allocating %zu bytes\n", n);
    abort();
}

void *base_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) base_oom(n);
    return p;
}

void *base_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) base_oom(n * size);
    return p;
}

void *base_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) base_oom(n);
    return q;
}

/* ---------------------------------------------------------------- arena */

struct base_arena_block {
    base_arena_block *next;
    size_t used, size;
    _Alignas(16) unsigned char data[];
};

#define BASE_ARENA_BLOCK (1u << 20)

void base_arena_init(base_arena *a) { memset(a, 0, sizeof *a); }

void base_arena_free(base_arena *a)
{
    base_arena_block *b = a->head;
    while (b) {
        base_arena_block *next = b->next;
        free(b);
        b = next;
    }
    memset(a, 0, sizeof *a);
}

void *base_arena_alloc(base_arena *a, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    base_arena_block *b = a->head;
    if (!b || b->size - b->used < size) {
        /* Large requests get a block of their own so small ones keep filling the current one. */
        size_t bsize = size > BASE_ARENA_BLOCK / 4 ? size : BASE_ARENA_BLOCK;
        base_arena_block *nb = base_xmalloc(sizeof *nb + bsize);
        nb->used = 0;
        nb->size = bsize;
        a->bytes_reserved += bsize;
        if (b && bsize != BASE_ARENA_BLOCK) {
            nb->next = b->next; /* keep the partly used block on top */
            b->next = nb;
        } else {
            nb->next = b;
            a->head = nb;
        }
        b = nb;
    }
    void *p = b->data + b->used;
    b->used += size;
    memset(p, 0, size);
    return p;
}

void *base_arena_calloc(base_arena *a, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) base_oom(SIZE_MAX);
    return base_arena_alloc(a, n * size);
}

char *base_arena_strndup(base_arena *a, const char *s, size_t n)
{
    char *d = base_arena_alloc(a, n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

char *base_arena_strdup(base_arena *a, const char *s)
{
    return s ? base_arena_strndup(a, s, strlen(s)) : NULL;
}

char *base_arena_printf(base_arena *a, const char *fmt, ...)
{
    va_list ap, aq;
    va_start(ap, fmt);
    va_copy(aq, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *d = base_arena_alloc(a, (size_t)(n < 0 ? 0 : n) + 1);
    vsnprintf(d, (size_t)n + 1, fmt, aq);
    va_end(aq);
    return d;
}

void *base_arena_grow(base_arena *a, void *ptr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return ptr;
    size_t ncap = *cap ? *cap : 8;
    while (ncap < need) ncap *= 2;
    void *np = base_arena_calloc(a, ncap, elem);
    if (ptr && *cap) memcpy(np, ptr, *cap * elem);
    *cap = ncap;
    return np;
}

/* ---------------------------------------------------------------- errors */

void base_error_clear(base_error *e) { memset(e, 0, sizeof *e); }

int base_error_vat(base_error *e, const char *file, int line, int col, const char *fmt, va_list ap)
{
    if (e->set) return -1; /* keep the first, root-cause error */
    size_t off = 0;
    if (file && *file) {
        if (line > 0 && col > 0)
            off = (size_t)snprintf(e->msg, sizeof e->msg, "%s:%d:%d: ", file, line, col);
        else if (line > 0)
            off = (size_t)snprintf(e->msg, sizeof e->msg, "%s:%d: ", file, line);
        else
            off = (size_t)snprintf(e->msg, sizeof e->msg, "%s: ", file);
        if (off >= sizeof e->msg) off = sizeof e->msg - 1;
    }
    vsnprintf(e->msg + off, sizeof e->msg - off, fmt, ap);
    e->set = 1;
    return -1;
}

int base_error_at(base_error *e, const char *file, int line, int col, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    base_error_vat(e, file, line, col, fmt, ap);
    va_end(ap);
    return -1;
}

int base_errorf(base_error *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    base_error_vat(e, NULL, 0, 0, fmt, ap);
    va_end(ap);
    return -1;
}

void base_error_prefix(base_error *e, const char *fmt, ...)
{
    if (!e->set) return;
    char pre[512], old[BASE_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    size_t np = strlen(pre);
    if (np >= sizeof e->msg) np = sizeof e->msg - 1;
    memcpy(e->msg, pre, np);
    size_t rest = strlen(old);
    if (np + rest >= sizeof e->msg) rest = sizeof e->msg - 1 - np;
    memcpy(e->msg + np, old, rest);
    e->msg[np + rest] = 0;
}

void base_warn_at(base_error *e, const char *file, int line, int col, const char *fmt, ...)
{
    char line_buf[1024];
    size_t off = 0;
    if (file && *file) {
        if (line > 0)
            off = (size_t)snprintf(line_buf, sizeof line_buf, "%s:%d:%d: ", file, line, col);
        else
            off = (size_t)snprintf(line_buf, sizeof line_buf, "%s: ", file);
        if (off >= sizeof line_buf) off = sizeof line_buf - 1;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line_buf + off, sizeof line_buf - off, fmt, ap);
    va_end(ap);
    size_t have = strlen(e->warnings);
    size_t len = strlen(line_buf);
    if (have + len + 2 < sizeof e->warnings) {
        memcpy(e->warnings + have, line_buf, len);
        e->warnings[have + len] = '\n';
        e->warnings[have + len + 1] = 0;
    }
    e->nwarn++;
}

void base_error_print(const base_error *e, FILE *f)
{
    const char *w = e->warnings;
    while (*w) {
        const char *nl = strchr(w, '\n');
        size_t n = nl ? (size_t)(nl - w) : strlen(w);
        fprintf(f, "warning: %.*s\n", (int)n, w);
        w += n + (nl ? 1 : 0);
    }
    if (e->set) fprintf(f, "error: %s\n", e->msg);
}

/* ---------------------------------------------------------------- strings */

void base_buf_free(base_buf *b)
{
    free(b->s);
    memset(b, 0, sizeof *b);
}

void base_buf_putn(base_buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        b->s = base_xrealloc(b->s, cap);
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

void base_buf_puts(base_buf *b, const char *s) { base_buf_putn(b, s, strlen(s)); }

void base_buf_printf(base_buf *b, const char *fmt, ...)
{
    char small[512];
    va_list ap, aq;
    va_start(ap, fmt);
    va_copy(aq, ap);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        va_end(aq);
        return;
    }
    if ((size_t)n < sizeof small) {
        base_buf_putn(b, small, (size_t)n);
    } else {
        char *big = base_xmalloc((size_t)n + 1);
        vsnprintf(big, (size_t)n + 1, fmt, aq);
        base_buf_putn(b, big, (size_t)n);
        free(big);
    }
    va_end(aq);
}

int base_read_file(const char *path, base_buf *out, base_error *e)
{
    return base_read_file_max(path, out, BASE_READ_MAX, e);
}

int base_read_file_max(const char *path, base_buf *out, size_t max, base_error *e)
{
    char limit[32];
    base_fmt_bytes((double)max, limit, sizeof limit);
    FILE *f = fopen(path, "rb");
    if (!f)
        return base_error_at(e, path, 0, 0, "cannot open file (%s); check the path", strerror(errno));
    /* the size is checked before reading a regular file, so that a huge one costs nothing; pipes
     * and devices (/dev/zero) have no size and are cut off once they pass the limit */
    struct stat st;
    if (fstat(fileno(f), &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            fclose(f);
            return base_error_at(e, path, 0, 0, "is a directory; give a file");
        }
        if (S_ISREG(st.st_mode) && (uintmax_t)st.st_size > (uintmax_t)max) {
            fclose(f);
            char got[32];
            return base_error_at(e, path, 0, 0, "%s, more than piper reads from one input (%s); give a "
                                 "smaller file (docs/programs.md, \"Inputs\")",
                                 base_fmt_bytes((double)st.st_size, got, sizeof got), limit);
        }
    }
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (out->n + n > max) {
            fclose(f);
            base_buf_free(out);
            return base_error_at(e, path, 0, 0, "more than piper reads from one input (%s) and still "
                                 "going; give a regular file of at most that size (docs/programs.md, "
                                 "\"Inputs\")", limit);
        }
        base_buf_putn(out, chunk, n);
    }
    int bad = ferror(f);
    int err = errno;
    fclose(f);
    if (bad) return base_error_at(e, path, 0, 0, "read error (%s); check the file", strerror(err));
    if (!out->s) base_buf_putn(out, "", 0);
    return 0;
}

const char *base_fmt_bytes(double bytes, char *buf, size_t n)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    double v = bytes;
    while ((v >= 1024.0 || v <= -1024.0) && u < 5) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, n, "%.0f B", v);
    else
        snprintf(buf, n, "%.2f %s", v, units[u]);
    return buf;
}

/* ---------------------------------------------------------------- numbers */

static void why_set(char *why, size_t n, const char *fmt, ...) BASE_PRINTF(3, 4);
static void why_set(char *why, size_t n, const char *fmt, ...)
{
    if (!why || !n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
}

int base_in_range(double x, base_range r)
{
    if (!(x == x)) return 0;
    if (r.lo_open ? !(x > r.lo) : !(x >= r.lo)) return 0;
    if (r.hi_open ? !(x < r.hi) : !(x <= r.hi)) return 0;
    return 1;
}

const char *base_fmt_range(base_range r, char *buf, size_t n)
{
    if (isinf(r.hi) && r.hi > 0)
        snprintf(buf, n, "%s %g", r.lo_open ? ">" : ">=", r.lo);
    else
        snprintf(buf, n, "in %c%g, %g%c", r.lo_open ? '(' : '[', r.lo, r.hi, r.hi_open ? ')' : ']');
    return buf;
}

int base_parse_double(const char *s, base_range r, double *out, char *why, size_t n)
{
    char *end = NULL;
    errno = 0;
    double v = s && *s && !isspace((unsigned char)*s) ? strtod(s, &end) : 0;
    if (!end || end == s || *end) {
        why_set(why, n, "is not a number");
        return -1;
    }
    /* strtod reads "inf" and "nan" and sets ERANGE past DBL_MAX; underflow to a tiny value is
     * fine, overflow is not */
    if (!isfinite(v) || (errno == ERANGE && fabs(v) > 1)) {
        why_set(why, n, "is not a finite number");
        return -1;
    }
    if (!base_in_range(v, r)) {
        char rb[64];
        why_set(why, n, "is not %s", base_fmt_range(r, rb, sizeof rb));
        return -1;
    }
    *out = v;
    return 0;
}

/* The digits of s (an optional sign, then decimal digits only) as a magnitude; -1 if s is not
 * an integer or it does not fit 64 bits. */
static int parse_magnitude(const char *s, int *neg, uint64_t *mag, char *why, size_t n)
{
    const char *q = s ? s : "";
    *neg = 0;
    if (*q == '-' || *q == '+') *neg = *q++ == '-';
    if (!isdigit((unsigned char)*q)) {
        why_set(why, n, "is not a whole number");
        return -1;
    }
    uint64_t v = 0;
    for (; isdigit((unsigned char)*q); q++) {
        unsigned d = (unsigned)(*q - '0');
        if (v > (UINT64_MAX - d) / 10) {
            why_set(why, n, "does not fit in 64 bits");
            return -1;
        }
        v = v * 10 + d;
    }
    if (*q) {
        why_set(why, n, "is not a whole number");
        return -1;
    }
    *mag = v;
    return 0;
}

int base_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out, char *why, size_t n)
{
    int neg;
    uint64_t mag;
    if (parse_magnitude(s, &neg, &mag, why, n)) return -1;
    int ok = neg ? mag <= (uint64_t)INT64_MAX + 1 : mag <= (uint64_t)INT64_MAX;
    int64_t v = !ok ? 0 : neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
    if (!ok || v < lo || v > hi) {
        why_set(why, n, "is not a whole number in [%" PRId64 ", %" PRId64 "]", lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int base_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out, char *why, size_t n)
{
    int neg;
    uint64_t mag;
    if (parse_magnitude(s, &neg, &mag, why, n)) return -1;
    if ((neg && mag) || mag < lo || mag > hi) {
        why_set(why, n, "is not a whole number in [%" PRIu64 ", %" PRIu64 "]", lo, hi);
        return -1;
    }
    *out = mag;
    return 0;
}
