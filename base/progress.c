/* progress.c — the progress line every binary shows on a terminal for a run of more than two
 * seconds (base.h, "progress"): one helper, so that compiling, simulating, searching and
 * executing report in one shape and only where a person watches. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, fileno */
#include "base.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double base_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void base_progress_begin(base_progress *p, const char *prog, const char *what)
{
    memset(p, 0, sizeof *p);
    p->f = isatty(fileno(stderr)) ? stderr : NULL;
    p->prog = prog;
    p->what = what;
    p->t0 = base_now();
    p->after = 2;
    /* PIPER_PROGRESS_AFTER=SECONDS moves the two seconds (tests show the line at once) */
    const char *env = getenv("PIPER_PROGRESS_AFTER");
    const base_range nonneg = {0, 1e9, 0, 0};
    double after;
    if (env && !base_parse_double(env, nonneg, &after, NULL, 0)) p->after = after;
}

/* "1m05s" or "42 s" */
static void fmt_secs(double s, char *buf, size_t n)
{
    if (s >= 60)
        snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else
        snprintf(buf, n, "%.0f s", s);
}

void base_progress_update(base_progress *p, double done, double total, const char *detail)
{
    if (!p->f) return;
    double now = base_now(), el = now - p->t0;
    if (el < p->after || (p->shown && now - p->last < 0.1)) return;
    p->last = now;
    char line[256], eta[32] = "";
    int n = snprintf(line, sizeof line, "%s: %s", p->prog, p->what);
    if (total > 0 && done >= 0) {
        double frac = done > total ? 1 : done / total;
        n += snprintf(line + n, sizeof line - (size_t)n, " %3.0f%%", 100 * frac);
        if (frac > 0) {
            fmt_secs(el * (1 - frac) / frac, eta, sizeof eta);
        }
    }
    if (detail && n < (int)sizeof line) n += snprintf(line + n, sizeof line - (size_t)n, " (%s)", detail);
    if (n < (int)sizeof line) {
        char e2[32];
        fmt_secs(el, e2, sizeof e2);
        n += snprintf(line + n, sizeof line - (size_t)n, ", %s elapsed%s%s%s", e2, eta[0] ? ", about " : "", eta,
                      eta[0] ? " left" : "");
    }
    /* \r and erase to the end of the line: a shorter line leaves nothing of the last */
    fprintf(p->f, "\r%s\033[K", line);
    fflush(p->f);
    p->shown = 1;
}

void base_progress_clear(base_progress *p)
{
    if (p->f && p->shown) {
        fprintf(p->f, "\r\033[K");
        fflush(p->f);
    }
    p->shown = 0;
}

void base_progress_end(base_progress *p)
{
    if (p->f && p->shown) {
        fprintf(p->f, "\r\033[K");
        fflush(p->f);
    }
    p->shown = 0;
    p->f = NULL;
}
