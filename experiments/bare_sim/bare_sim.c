/* bare_sim.c — the yardstick of piper-sim's speed: a bare SimGrid program (SimGrid's C API only)
 * that runs a given number of executions and transfers on a given number of actors and hosts,
 * with nothing of piper around them, so that experiments/bench_sim.sh can set piper-sim's
 * activities per CPU second against SimGrid's own on the same shape.
 *
 *   usage: bare-sim HOSTS ACTORS EXECUTIONS TRANSFERS
 *
 * The platform is piper-sim's for one node (docs/simulator.md, "The platform"): each host has a
 * SPLITDUPLEX link into one router, in a zone with Dijkstra routing and a route cache, CM02 with
 * TCP-gamma 0 and no cross traffic, hosts at 1e9 flop/s. Actor a runs on host a % HOSTS and loops:
 * one execution of 1 ms, then one transfer of 1 MB to the next actor (a + 1, on another host when
 * there are several), posted asynchronously with the receive of the previous actor's and waited for
 * together, as piper's ring flows are, until it has done its share of each (the counts spread as
 * evenly as they go). Mailboxes are looked up once, before the run. It prints what it ran and the
 * simulated time; CPU time and memory are the caller's to measure (/usr/bin/time). */
#include <simgrid/actor.h>
#include <simgrid/comm.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <simgrid/mailbox.h>
#include <xbt/config.h>
#include <xbt/log.h>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct actor_job {
    long execs, transfers;
    sg_mailbox_t in, out;
} actor_job;

static char payload;

static void actor_main(int argc, char **argv)
{
    (void)argc, (void)argv;
    actor_job *j = sg_actor_self_get_data();
    long e = j->execs, t = j->transfers;
    void *got;
    while (e > 0 || t > 0) {
        if (e > 0) {
            sg_actor_execute(1e6); /* 1 ms at 1e9 flop/s */
            e--;
        }
        if (t > 0) {
            sg_comm_t c[2] = {sg_mailbox_put_async(j->out, &payload, 1000000), sg_mailbox_get_async(j->in, &got)};
            sg_comm_wait_all(c, 2);
            t--;
        }
    }
}

static long arg(const char *s, const char *what)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end || v < 0) {
        fprintf(stderr, "bare-sim: %s must be a count, not '%s'\n", what, s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: bare-sim HOSTS ACTORS EXECUTIONS TRANSFERS\n");
        return 2;
    }
    long hosts = arg(argv[1], "HOSTS"), actors = arg(argv[2], "ACTORS");
    long execs = arg(argv[3], "EXECUTIONS"), transfers = arg(argv[4], "TRANSFERS");
    if (hosts < 1 || actors < 2) {
        fprintf(stderr, "bare-sim: needs a host and two actors at least\n");
        return 2;
    }
    /* the platform, as piper-sim writes one node's */
    char path[] = "/tmp/bare-sim-XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        fprintf(stderr, "bare-sim: cannot write a temporary platform file in /tmp\n");
        return 1;
    }
    fputs("<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
          "<platform version=\"4.1\">\n<zone id=\"bare\" routing=\"DijkstraCache\">\n",
          f);
    for (long h = 0; h < hosts; h++) fprintf(f, "  <host id=\"h%ld\" speed=\"1e9f\"/>\n", h);
    fputs("  <router id=\"switch\"/>\n", f);
    for (long h = 0; h < hosts; h++)
        fprintf(f, "  <link id=\"l%ld\" bandwidth=\"50e9Bps\" latency=\"5e-7s\" sharing_policy=\"SPLITDUPLEX\"/>\n", h);
    for (long h = 0; h < hosts; h++)
        fprintf(f,
                "  <route src=\"h%ld\" dst=\"switch\" symmetrical=\"NO\"><link_ctn id=\"l%ld\" direction=\"UP\"/></route>\n"
                "  <route src=\"switch\" dst=\"h%ld\" symmetrical=\"NO\"><link_ctn id=\"l%ld\" direction=\"DOWN\"/></route>\n",
                h, h, h, h);
    fputs("</zone>\n</platform>\n", f);
    fclose(f);

    simgrid_init(&argc, argv);
    xbt_log_control_set("root.thresh:warning");
    sg_cfg_set_string("network/model", "CM02");
    sg_cfg_set_double("network/TCP-gamma", 0);
    sg_cfg_set_boolean("network/crosstraffic", "no");
    sg_cfg_set_int("contexts/stack-size", 256);
    simgrid_load_platform(path);
    unlink(path);

    actor_job *jobs = calloc((size_t)actors, sizeof *jobs);
    sg_mailbox_t *mb = calloc((size_t)actors, sizeof *mb);
    if (!jobs || !mb) return 1;
    char name[64];
    for (long a = 0; a < actors; a++) {
        snprintf(name, sizeof name, "m%ld", a);
        mb[a] = sg_mailbox_by_name(name);
    }
    for (long a = 0; a < actors; a++) {
        jobs[a].execs = execs / actors + (a < execs % actors);
        /* a ring: each actor's puts are its successor's gets, so every actor takes the same number */
        jobs[a].transfers = transfers / actors + (transfers % actors != 0);
        jobs[a].in = mb[a];
        jobs[a].out = mb[(a + 1) % actors];
        char host[32];
        snprintf(host, sizeof host, "h%ld", a % hosts);
        snprintf(name, sizeof name, "a%ld", a);
        sg_actor_t act = sg_actor_init(name, sg_host_by_name(host));
        sg_actor_set_data(act, &jobs[a]);
        sg_actor_start(act, actor_main, 0, NULL);
    }
    simgrid_run();
    long done_t = 0;
    for (long a = 0; a < actors; a++) done_t += jobs[a].transfers;
    printf("bare-sim: %ld activities (%ld executions, %ld transfers) on %ld actors and %ld hosts; %.6g s simulated\n",
           execs + done_t, execs, done_t, actors, hosts, simgrid_get_clock());
    free(jobs);
    free(mb);
    return 0;
}
