/* platform_user.c — a user's own SimGrid platform XML (--platform, or the cluster file's
 * `platform`), checked before the simulation uses it.
 *
 * SimGrid reads platforms with a parser that aborts the process on the first error, so the file
 * is loaded first in a child process whose messages come back through a pipe: a malformed file
 * becomes "file:line: what SimGrid says; what to do" instead of a crash. The child then checks
 * piper's naming contract (docs/simulator.md, "A platform of your own"): a host "gpu<d>" for every
 * device d of the plan, each with one core (two streams computing at once share their GPU), and
 * figures the simulation can use: every such host's speed and every link's bandwidth finite and
 * > 0, every latency finite and >= 0 (SimGrid loads a speed or bandwidth of 0, then aborts in
 * the middle of the run). */
#include "sim_internal.h"

#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <simgrid/link.h>
#include <xbt/log.h>

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_REPORTED 4    /* hosts named in one message */
#define MAX_OUTPUT 65536  /* of the child's messages kept */

static void check_child(const char *path, int ndevices, int fd)
{
    /* SimGrid aborts on a malformed file, which is this child's expected way to fail: handlers
     * inherited from the parent (a fuzzer's, a sanitizer's) must not report it as the parent's
     * crash */
    static const int deadly[] = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL};
    for (size_t i = 0; i < sizeof deadly / sizeof *deadly; i++) signal(deadly[i], SIG_DFL);
    dup2(fd, STDERR_FILENO);
    close(fd);
    int argc = 1;
    char arg0[] = "piper-sim";
    char *argv[] = {arg0, NULL};
    simgrid_init(&argc, argv);
    xbt_log_control_set("root.thresh:error");
    simgrid_load_platform(path);
    int missing = 0, cores = 0;
    char name[32];
    for (int d = 0; d < ndevices; d++) {
        snprintf(name, sizeof name, "gpu%d", d);
        sg_host_t h = sg_host_by_name(name);
        if (!h) {
            if (missing++ < MAX_REPORTED) fprintf(stderr, "piper-missing %s\n", name);
        } else if (sg_host_core_count(h) != 1) {
            if (cores++ < MAX_REPORTED) fprintf(stderr, "piper-cores %s %d\n", name, sg_host_core_count(h));
        }
    }
    /* the first figure the simulation cannot use, as "piper-figure WHAT NAME VALUE" */
    int bad = 0;
    for (int d = 0; d < ndevices && !bad && !missing; d++) {
        snprintf(name, sizeof name, "gpu%d", d);
        double v = sg_host_get_speed(sg_host_by_name(name));
        if (!(isfinite(v) && v > 0)) bad = fprintf(stderr, "piper-figure speed host %s %g\n", name, v) > 0;
    }
    size_t nlinks = sg_link_count();
    sg_link_t *links = sg_link_list();
    for (size_t k = 0; k < nlinks && !bad; k++) {
        double bw = sg_link_get_bandwidth(links[k]), lat = sg_link_get_latency(links[k]);
        if (!(isfinite(bw) && bw > 0))
            bad = fprintf(stderr, "piper-figure bw link %s %g\n", sg_link_get_name(links[k]), bw) > 0;
        else if (!(isfinite(lat) && lat >= 0))
            bad = fprintf(stderr, "piper-figure lat link %s %g\n", sg_link_get_name(links[k]), lat) > 0;
    }
    free(links);
    fprintf(stderr, "piper-counts %d %d %zu\n", missing, cores, sg_host_count());
    fflush(stderr);
    _exit(missing || cores || bad ? 2 : 0);
}

/* The text after `key` up to the end of its line, plus continuation lines (those that do not
 * start a new log record with '['), joined by spaces, into buf. */
static void message_after(const char *at, char *buf, size_t n)
{
    size_t o = 0;
    for (const char *c = at; *c && o + 1 < n; c++) {
        if (*c == '\n') {
            if (c[1] == '[' || c[1] == 0) break;
            buf[o++] = ' ';
            continue;
        }
        buf[o++] = *c >= 0x20 && *c < 0x7f ? *c : '?';
    }
    while (o > 0 && (buf[o - 1] == '.' || buf[o - 1] == ' ')) o--; /* the caller goes on with "; ..." */
    buf[o] = 0;
}

/* Turns the child's messages into one error. */
static int explain(const char *path, const char *out, int ndevices, base_error *e)
{
    char msg[600];
    const char *at = strstr(out, "Parse error at ");
    if (at) {
        /* "Parse error at FILE:LINE: message": FILE is the path we gave; find the line after it */
        const char *p = at + strlen("Parse error at ");
        size_t plen = strlen(path);
        if (!strncmp(p, path, plen) && p[plen] == ':') {
            char *end;
            long line = strtol(p + plen + 1, &end, 10);
            if (end != p + plen + 1 && *end == ':') {
                message_after(end + 1 + (end[1] == ' '), msg, sizeof msg);
                return base_error_at(e, path, (int)line, 0, "%s; fix the platform file (SimGrid platform XML, "
                                     "version 4.1; docs/simulator.md, \"A platform of your own\")", msg);
            }
        }
        message_after(p, msg, sizeof msg);
        return base_error_at(e, path, 0, 0, "SimGrid cannot parse the platform: %s; fix the platform file", msg);
    }
    const char *fig = strstr(out, "piper-figure ");
    if (fig) {
        char what[8] = "", kind[8] = "", nm[128] = "", val[32] = "";
        sscanf(fig, "piper-figure %7s %7s %127s %31s", what, kind, nm, val);
        const int speed = !strcmp(what, "speed"), bw = !strcmp(what, "bw");
        return base_error_at(e, path, 0, 0, "%s %s has %s %s; give it %s", kind, nm,
                             speed ? "speed" : bw ? "bandwidth" : "latency", val,
                             speed ? "a finite speed > 0, e.g. speed=\"1e9f\""
                             : bw  ? "a finite bandwidth > 0, e.g. bw=\"100GBps\""
                                   : "a finite latency >= 0, e.g. lat=\"1us\"");
    }
    const char *counts = strstr(out, "piper-counts ");
    if (counts) {
        int missing = 0, cores = 0;
        size_t hosts = 0;
        sscanf(counts, "piper-counts %d %d %zu", &missing, &cores, &hosts);
        char names[256] = "";
        size_t o = 0;
        const char *key = missing ? "piper-missing " : "piper-cores ";
        for (const char *c = strstr(out, key); c && o + 40 < sizeof names; c = strstr(c + 1, key)) {
            char nm[32] = "";
            int k = 0;
            sscanf(c + strlen(key), "%31s %d", nm, &k);
            o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", o ? ", " : "", nm);
            if (!missing) o += (size_t)snprintf(names + o, sizeof names - o, " (%d cores)", k);
        }
        int n = missing ? missing : cores;
        if (missing)
            return base_error_at(e, path, 0, 0, "the plan has %d devices but the platform has no host named %s%s "
                                 "(%zu hosts in all); name the host of device d \"gpu<d>\" (gpu0 ... gpu%d)",
                                 ndevices, names, n > MAX_REPORTED ? ", ..." : "", hosts, ndevices - 1);
        return base_error_at(e, path, 0, 0, "host%s %s%s %s more than one core; a GPU is one core in piper's model "
                             "(streams computing at once share it): drop the core attribute", n > 1 ? "s" : "",
                             names, n > MAX_REPORTED ? ", ..." : "", n > 1 ? "have" : "has");
    }
    /* anything else: the last error line SimGrid printed */
    const char *last = NULL;
    for (const char *c = strstr(out, "/ERROR] "); c; c = strstr(c + 1, "/ERROR] "))
        if (strncmp(c + 8, "Exiting now", 11)) last = c + 8;
    if (last) message_after(last, msg, sizeof msg);
    else snprintf(msg, sizeof msg, "no message");
    return base_error_at(e, path, 0, 0, "SimGrid cannot load the platform (%s); check the file", msg);
}

int sim_platform_check(const char *path, int ndevices, base_error *e)
{
    FILE *f = fopen(path, "rb");
    if (!f) return base_error_at(e, path, 0, 0, "cannot open the platform file (%s); check the path", strerror(errno));
    struct stat st;
    bool dir = fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode);
    fclose(f);
    /* fopen opens a directory; SimGrid's parser would then fail with a message about XML */
    if (dir) return base_error_at(e, path, 0, 0, "is a directory; give a file");
    int fds[2];
    if (pipe(fds)) return base_errorf(e, "cannot create a pipe to check %s (%s); free some resources", path, strerror(errno));
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        return base_errorf(e, "cannot start a process to check %s (%s); free some memory", path, strerror(errno));
    }
    if (pid == 0) {
        close(fds[0]);
        check_child(path, ndevices, fds[1]);
    }
    close(fds[1]);
    char *out = base_xmalloc(MAX_OUTPUT + 1);
    size_t n = 0;
    for (;;) {
        char buf[4096];
        ssize_t got = read(fds[0], buf, sizeof buf);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        size_t take = (size_t)got < MAX_OUTPUT - n ? (size_t)got : MAX_OUTPUT - n;
        memcpy(out + n, buf, take);
        n += take;
    }
    out[n] = 0;
    close(fds[0]);
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    int rc = 0;
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) rc = explain(path, out, ndevices, e);
    free(out);
    return rc;
}
