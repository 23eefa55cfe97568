/* fuzz_sim_options.c — libFuzzer entry for piper-sim's --costs and --links option strings
 * (sim/options.c): the input up to its first newline is a --costs string, the rest a --links
 * string (each up to its first NUL, as a command line hands them over). A refused string says
 * what to do; an accepted one leaves finite, non-negative figures. Broken promises abort. Seeds:
 * tests/fuzz/corpus/sim_options. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_sim_options: broken promise: %s\n", what);
        abort();
    }
}

static int finite_nonneg(double x) { return isfinite(x) && x >= 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = 0;
    char *nl = memchr(s, '\n', size);
    char *links = nl ? nl + 1 : s + size;
    if (nl) *nl = 0;
    sim_options o;
    sim_options_init(&o, NULL);
    base_error e;
    base_error_clear(&e);
    int rc = sim_costs_parse(&o.costs, s, &e);
    require(rc == 0 || (rc == -1 && e.set && e.msg[0]), "a refused --costs says why");
    if (!rc) {
        require(finite_nonneg(o.costs.launch_overhead), "the launch overhead is a duration");
        require(finite_nonneg(o.costs.gemm_eff_large) && o.costs.gemm_eff_large <= 1, "GEMM efficiency is a fraction");
        for (int p = 0; p < PLAN_NPASS; p++) require(finite_nonneg(o.costs.unit_pass[p]), "unit costs are durations");
    }
    base_error_clear(&e);
    rc = sim_links_parse(&o.links, links, &e);
    require(rc == 0 || (rc == -1 && e.set && e.msg[0]), "a refused --links says why");
    if (!rc) {
        require(finite_nonneg(o.links.nvlink_bw) && finite_nonneg(o.links.nic_bw), "bandwidths are non-negative");
        require(finite_nonneg(o.links.nvlink_latency) && finite_nonneg(o.links.nic_latency), "latencies are durations");
        require(o.links.gpus_per_nic >= 1, "a NIC serves at least one GPU");
    }
    free(s);
    return 0;
}
