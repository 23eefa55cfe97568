/* options.c — sim/'s options and cost model: link defaults per GPU type, the --links and --costs
 * parsers, GEMM efficiency and kernel durations. Kept apart from the SimGrid code so that the cost
 * model can be tested (and used) without starting a simulation. */
#include "sim.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Launch overhead per kernel entry: a CUDA launch plus the gaps between back-to-back kernels is a
 * few microseconds; 4 us is our estimate, a calibration constant. */
#define DEFAULT_LAUNCH 4e-6
/* Where the host waits for its GPU by default: after each p2p run, after the gradient-norm
 * all-reduce and before each micro-batch's input (sim.h, SIM_SYNC_*; docs/simulator.md, "The
 * host"): what Megatron-LM and Megatron-DeepSpeed do. */
#define DEFAULT_HOST_SYNC (SIM_SYNC_P2P | SIM_SYNC_NORM | SIM_SYNC_BATCH)
/* hardware.md: a 16384^3 fp16 GEMM on an A100 runs at 256 of 312 TFLOP/s. */
#define DEFAULT_GEMM_EFF_LARGE (256.0 / 312.0)
/* Our estimate: a dimension of 128 (one tensor-core tile row of a typical CUTLASS/cuBLAS tile)
 * halves that dimension's factor; skinny GEMMs (k = head_dim, small micro-batches) pay for it. */
#define DEFAULT_GEMM_HALF 128.0
#define GEMM_REF_DIM 16384.0

/* Per-direction link figures of the usual system for each GPU type (hardware.md; the NIC figures
 * are the DGX A100 HDR 200 Gb/s and the DGX/HGX H100-class NDR 400 Gb/s ports, one per GPU). The
 * `cpu` entry matches configs/clusters/cpu_8.yaml. Unknown types get A100 figures. */
static const struct {
    const char *prefix;
    double nvlink, nic;
} link_table[] = {
    {"A100", 300e9, 25e9}, {"H100", 450e9, 50e9}, {"H200", 450e9, 50e9},
    {"H800", 200e9, 50e9}, {"cpu", 10e9, 1.25e9},
};

void sim_links_default(sim_links *l, const char *gpu_name)
{
    memset(l, 0, sizeof *l);
    l->nvlink_bw = 300e9;
    l->nic_bw = 25e9;
    for (size_t i = 0; gpu_name && i < BASE_COUNT(link_table); i++)
        if (!strncasecmp(gpu_name, link_table[i].prefix, strlen(link_table[i].prefix))) {
            l->nvlink_bw = link_table[i].nvlink;
            l->nic_bw = link_table[i].nic;
            break;
        }
    l->nvlink_latency = 1e-6;
    l->nic_latency = 5e-6;
    l->pcie_bw = 1e15; /* not a bottleneck unless set: GPUDirect RDMA rarely is on these systems */
    l->gpus_per_nic = 1;
    l->nodes_per_leaf = 16;
    l->oversubscription = 1;
}

void sim_links_from_plan(sim_links *l, const plan_set *p)
{
    sim_links_default(l, p ? p->gpu.name : NULL);
    if (!p) return;
    const plan_links *pl = &p->links;
    /* a figure of 0 is one the cluster did not need (NVLink on one-GPU nodes, NICs on one node) */
    if (pl->nvlink_bw > 0) l->nvlink_bw = pl->nvlink_bw;
    if (pl->nic_bw > 0) l->nic_bw = pl->nic_bw;
    if (pl->nvlink_bw > 0 || pl->nic_bw > 0) {
        if (pl->nvlink_latency >= 0) l->nvlink_latency = pl->nvlink_latency;
        if (pl->nic_latency >= 0) l->nic_latency = pl->nic_latency;
    }
    if (pl->gpus_per_nic >= 1) l->gpus_per_nic = pl->gpus_per_nic;
    if (pl->oversubscription >= 1) l->oversubscription = pl->oversubscription;
}

void sim_options_init(sim_options *o, const plan_set *p)
{
    memset(o, 0, sizeof *o);
    sim_links_from_plan(&o->links, p);
    o->platform = p ? p->links.platform : NULL;
    o->costs.launch_overhead = DEFAULT_LAUNCH;
    o->costs.launch_model = SIM_LAUNCH_HOST;
    o->costs.launch_bwd = -1;
    o->costs.host_sync = DEFAULT_HOST_SYNC;
    o->costs.gemm_eff_large = DEFAULT_GEMM_EFF_LARGE;
    o->costs.gemm_half_dim = DEFAULT_GEMM_HALF;
    o->costs.hbm_eff = 1;
    o->costs.net_eff = 1;
    o->coll = SIM_COLL_AUTO;
    o->fold = true;
}

const char *sim_host_sync_name(unsigned bits)
{
    static const char *const names[] = {"none",  "p2p",       "norm",       "p2p+norm",
                                        "batch", "p2p+batch", "norm+batch", "p2p+norm+batch"};
    return names[bits & 7u];
}

/* ---------------------------------------------------------------- value parsing */

typedef struct unit_entry {
    const char *suffix;
    double scale;
} unit_entry;

static const unit_entry bw_units[] = {
    {"B/s", 1},     {"KB/s", 1e3},    {"MB/s", 1e6},    {"GB/s", 1e9},    {"TB/s", 1e12},
    {"b/s", 0.125}, {"Kb/s", 125},    {"Mb/s", 125e3},  {"Gb/s", 125e6},  {"Tb/s", 125e9},
    {"Bps", 1},     {"KBps", 1e3},    {"MBps", 1e6},    {"GBps", 1e9},    {"TBps", 1e12},
    {NULL, 0},
};
static const unit_entry time_units[] = {
    {"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}, {NULL, 0},
};

/* A finite number >= 0 with an optional unit from `units`; 0 on success. */
static int parse_quantity(const char *s, const unit_entry *units, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v) || v < 0) return -1;
    if (*end == 0) {
        *out = v;
        return 0;
    }
    for (const unit_entry *u = units; u && u->suffix; u++)
        if (!strcmp(end, u->suffix)) {
            /* the scale may carry a finite number past DBL_MAX ("1e300TB/s") */
            if (!isfinite(v * u->scale)) return -1;
            *out = v * u->scale;
            return 0;
        }
    return -1;
}

static int parse_count(const char *s, int lo, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > 1 << 20) return -1;
    *out = (int)v;
    return 0;
}

/* Calls fn(key, value) for each "key=value" of a comma-separated list. A bare word has value
 * NULL. Words are copied so that fn may keep nothing. */
static int each_pair(const char *spec, const char *what, base_error *e,
                     int (*fn)(void *ctx, const char *key, const char *val, base_error *e), void *ctx)
{
    if (!spec || !*spec) return base_errorf(e, "%s: empty list; see piper-sim --help", what);
    char *copy = base_xmalloc(strlen(spec) + 1);
    strcpy(copy, spec);
    int rc = 0;
    for (char *tok = copy, *next; tok && !rc; tok = next) {
        next = strchr(tok, ',');
        if (next) *next++ = 0;
        while (isspace((unsigned char)*tok)) tok++;
        size_t n = strlen(tok);
        while (n && isspace((unsigned char)tok[n - 1])) tok[--n] = 0;
        if (!*tok) {
            rc = base_errorf(e, "%s: '%s' has an empty item; separate items with single commas", what, spec);
            break;
        }
        char *eq = strchr(tok, '=');
        if (eq) *eq++ = 0;
        rc = fn(ctx, tok, eq, e);
    }
    free(copy);
    return rc;
}

static int links_item(void *ctx, const char *key, const char *val, base_error *e)
{
    sim_links *l = ctx;
    static const struct {
        const char *key;
        int kind; /* 0 bandwidth, 1 latency, 2 count, 3 ratio */
        size_t off;
    } keys[] = {
        {"nvlink_bw", 0, offsetof(sim_links, nvlink_bw)},
        {"nvlink_lat", 1, offsetof(sim_links, nvlink_latency)},
        {"nic_bw", 0, offsetof(sim_links, nic_bw)},
        {"nic_lat", 1, offsetof(sim_links, nic_latency)},
        {"pcie_bw", 0, offsetof(sim_links, pcie_bw)},
        {"gpus_per_nic", 2, offsetof(sim_links, gpus_per_nic)},
        {"nodes_per_leaf", 2, offsetof(sim_links, nodes_per_leaf)},
        {"oversubscription", 3, offsetof(sim_links, oversubscription)},
    };
    for (size_t i = 0; i < BASE_COUNT(keys); i++) {
        if (strcmp(key, keys[i].key)) continue;
        char *field = (char *)l + keys[i].off;
        static const char *const example[] = {"300GB/s", "1us", "2", "1"};
        int bad;
        if (!val) {
            bad = 1;
        } else if (keys[i].kind == 2) {
            bad = parse_count(val, 1, (int *)(void *)field);
        } else {
            double v;
            bad = parse_quantity(val, keys[i].kind == 0 ? bw_units : keys[i].kind == 1 ? time_units : NULL, &v);
            if (!bad && (keys[i].kind == 0 || keys[i].kind == 3) && v <= 0) bad = 1;
            if (!bad && keys[i].kind == 3 && v < 1) bad = 1;
            if (!bad) memcpy(field, &v, sizeof v);
        }
        if (bad)
            return base_errorf(e, "--links: '%s=%s' is not a valid %s; write e.g. %s=%s", key, val ? val : "",
                               keys[i].kind == 0   ? "bandwidth (a positive number with B/s, GB/s, Gb/s, ...)"
                               : keys[i].kind == 1 ? "latency (a number with s, ms, us or ns)"
                               : keys[i].kind == 2 ? "count (a whole number >= 1)"
                                                   : "ratio (a number >= 1)",
                               key, example[keys[i].kind]);
        return 0;
    }
    return base_errorf(e, "--links: unknown key '%s'; known keys: nvlink_bw, nvlink_lat, nic_bw, nic_lat, "
                       "pcie_bw, gpus_per_nic, nodes_per_leaf, oversubscription", key);
}

int sim_links_parse(sim_links *l, const char *spec, base_error *e)
{
    return each_pair(spec, "--links", e, links_item, l);
}

static int pass_by_name(const char *s)
{
    for (int p = 0; p < PLAN_NPASS; p++)
        if (!strcmp(s, plan_pass_name((plan_pass)p))) return p;
    return -1;
}

typedef struct costs_ctx {
    sim_costs *c;
    bool in_unit; /* after "unit:", bare PASS=value items belong to it */
} costs_ctx;

static int costs_item(void *ctx, const char *key, const char *val, base_error *e)
{
    costs_ctx *cx = ctx;
    sim_costs *c = cx->c;
    char head[64];
    if (!strncmp(key, "unit:", 5)) {
        c->unit = true;
        cx->in_unit = true;
        for (int p = 0; p < PLAN_NPASS; p++) c->unit_pass[p] = 0;
        snprintf(head, sizeof head, "%s", key + 5);
        key = head;
    } else if (!strcmp(key, "unit")) {
        return base_errorf(e, "--costs: 'unit' needs pass costs; write e.g. unit:F=1,B=2");
    }
    if (!strcmp(key, "nocomm") && !val) {
        c->nocomm = true;
        return 0;
    }
    if (!strcmp(key, "launch_model")) {
        if (val && !strcmp(val, "host")) c->launch_model = SIM_LAUNCH_HOST;
        else if (val && !strcmp(val, "list")) c->launch_model = SIM_LAUNCH_LIST;
        else
            return base_errorf(e, "--costs: 'launch_model=%s' is not a launch model; write launch_model=host (a "
                               "host thread issuing the plan) or launch_model=list (per-list launch_overlap)",
                               val ? val : "");
        return 0;
    }
    if (!strcmp(key, "host_sync")) {
        unsigned bits = 0;
        int bad = !val || !*val;
        for (const char *s = val; !bad && *s;) {
            const char *plus = strchr(s, '+');
            size_t n = plus ? (size_t)(plus - s) : strlen(s);
            if (n == 0 || (plus && !plus[1])) bad = 1;
            else if (n == 3 && !strncmp(s, "p2p", 3)) bits |= SIM_SYNC_P2P;
            else if (n == 4 && !strncmp(s, "norm", 4)) bits |= SIM_SYNC_NORM;
            else if (n == 5 && !strncmp(s, "batch", 5)) bits |= SIM_SYNC_BATCH;
            else if (!(n == 4 && !strncmp(s, "none", 4))) bad = 1;
            s = plus ? plus + 1 : s + n;
        }
        if (bad)
            return base_errorf(e, "--costs: 'host_sync=%s' is not a set of synchronisation points; write "
                               "host_sync=p2p+norm+batch (any of p2p, norm, batch joined by +) or host_sync=none",
                               val ? val : "");
        c->host_sync = bits;
        return 0;
    }
    /* the cost model's constants: name, field, kind (0 a fraction in (0, 1], 1 a fraction in
     * [0, 1], 2 a positive number, 3 a duration, 4 a fraction in [0, 0.5]: the replay's
     * background load can take at most half of a device from one compute), an example */
    static const struct {
        const char *key;
        size_t off;
        int kind;
        const char *example;
    } consts[] = {
        {"launch", offsetof(sim_costs, launch_overhead), 3, "4us"},
        {"launch_bwd", offsetof(sim_costs, launch_bwd), 3, "4us"},
        {"gemm_eff", offsetof(sim_costs, gemm_eff_large), 0, "0.8"},
        {"gemm_half", offsetof(sim_costs, gemm_half_dim), 2, "128"},
        {"launch_overlap", offsetof(sim_costs, launch_overlap), 1, "0.5"},
        {"hbm_eff", offsetof(sim_costs, hbm_eff), 0, "0.8"},
        {"net_eff", offsetof(sim_costs, net_eff), 0, "0.8"},
        {"comm_slowdown", offsetof(sim_costs, comm_slowdown), 4, "0.1"},
    };
    for (size_t i = 0; i < BASE_COUNT(consts); i++) {
        if (strcmp(key, consts[i].key)) continue;
        double v;
        int kind = consts[i].kind;
        int bad = !val || parse_quantity(val, kind == 3 ? time_units : NULL, &v);
        if (!bad && kind == 0 && (v <= 0 || v > 1)) bad = 1;
        if (!bad && kind == 1 && v > 1) bad = 1;
        if (!bad && kind == 4 && v > 0.5) bad = 1;
        if (!bad && kind == 2 && v <= 0) bad = 1;
        if (bad)
            return base_errorf(e, "--costs: '%s=%s' is not valid; write %s=%s (%s)", key, val ? val : "", key,
                               consts[i].example,
                               kind == 0   ? "a fraction, 0 < x <= 1"
                               : kind == 1 ? "a fraction, 0 <= x <= 1"
                               : kind == 2 ? "a positive number"
                               : kind == 3 ? "a duration: s, ms, us or ns"
                                           : "a fraction, 0 <= x <= 0.5");
        memcpy((char *)c + consts[i].off, &v, sizeof v);
        return 0;
    }
    int p = pass_by_name(key);
    if (p >= 0 && cx->in_unit) {
        double v;
        if (!val || parse_quantity(val, time_units, &v))
            return base_errorf(e, "--costs: '%s=%s' is not a duration; write e.g. %s=1 (seconds) or %s=2ms", key,
                               val ? val : "", key, key);
        c->unit_pass[p] = v;
        return 0;
    }
    if (p >= 0)
        return base_errorf(e, "--costs: pass cost '%s' outside a unit list; write unit:%s=%s", key, key, val ? val : "1");
    return base_errorf(e, "--costs: unknown item '%s'; known: unit:PASS=seconds,... (passes F, B, BI, BW, R, UPD, "
                       "AUX), nocomm, launch=TIME, launch_bwd=TIME, launch_model=host|list, "
                       "host_sync=p2p+norm+batch, gemm_eff=FRACTION, gemm_half=DIM, launch_overlap=FRACTION, "
                       "hbm_eff=FRACTION, net_eff=FRACTION, comm_slowdown=FRACTION", key);
}

int sim_costs_parse(sim_costs *c, const char *spec, base_error *e)
{
    costs_ctx cx = {c, false};
    return each_pair(spec, "--costs", e, costs_item, &cx);
}

/* ---------------------------------------------------------------- cost model */

static double dim_factor(double x, double half) { return x > 0 ? x / (x + half) : 0; }

double sim_gemm_efficiency(const sim_costs *c, int64_t m, int64_t n, int64_t k)
{
    double large = c->gemm_eff_large > 0 ? c->gemm_eff_large : DEFAULT_GEMM_EFF_LARGE;
    if (m <= 0 || n <= 0 || k <= 0) return large; /* shape unknown: a large GEMM's */
    double h = c->gemm_half_dim > 0 ? c->gemm_half_dim : DEFAULT_GEMM_HALF;
    double ref = dim_factor(GEMM_REF_DIM, h);
    double f = dim_factor((double)m, h) * dim_factor((double)n, h) * dim_factor((double)k, h) / (ref * ref * ref);
    double eff = large * f;
    return eff > 1 ? 1 : eff;
}

/* The dtype's peak, or bf16's where the type has no such unit (fp8 on an A100), or fp32's. */
static double peak_of(const plan_gpu *g, int dtype)
{
    if (dtype >= 0 && dtype < PLAN_NDTYPE && g->peak_flops[dtype] > 0) return g->peak_flops[dtype];
    if (g->peak_flops[PLAN_BF16] > 0) return g->peak_flops[PLAN_BF16];
    return g->peak_flops[PLAN_FP32];
}

/* The roofline time of a kernel entry, without its launch. */
static double roofline_seconds(const sim_costs *c, const plan_gpu *g, const plan_kernel *k)
{
    double peak = peak_of(g, k->dtype);
    double eff = k->kind == PLAN_KERNEL_GEMM ? sim_gemm_efficiency(c, k->m, k->n, k->k) : 1;
    double bw = g->hbm_bw * (c->hbm_eff > 0 ? c->hbm_eff : 1);
    double tf = k->flops > 0 && peak > 0 && eff > 0 ? k->flops / (peak * eff) : 0;
    double tb = k->bytes > 0 && bw > 0 ? k->bytes / bw : 0;
    double t = tf > tb ? tf : tb;
    return isfinite(t) && t > 0 ? t : 0;
}

double sim_kernel_seconds(const sim_costs *c, const plan_gpu *g, const plan_kernel *k)
{
    return roofline_seconds(c, g, k) + (c->launch_overhead > 0 ? c->launch_overhead : 0);
}

double sim_launch_seconds(const sim_costs *c, int pass)
{
    double l = c->launch_overhead;
    if (c->launch_bwd >= 0 && (pass == PLAN_PASS_B || pass == PLAN_PASS_BI || pass == PLAN_PASS_BW)) l = c->launch_bwd;
    return l > 0 ? l : 0;
}

void sim_kernel_list_host(const sim_costs *c, const plan_gpu *g, const plan_kernel_list *kl, double launch,
                          double *gpu, double *lead)
{
    double before = 0, best = 0;
    if (launch < 0) launch = 0;
    for (int j = 0; j < kl->n; j++) {
        /* kernel j + 1 is issued at (j + 1) x launch; starting the list's GPU work later than
         * that minus the GPU time of the kernels before it never waits for a launch */
        double need = (j + 1) * launch - before;
        if (need > best) best = need;
        before += roofline_seconds(c, g, &kl->k[j]);
    }
    *gpu = before;
    *lead = best;
}

double sim_kernel_list_seconds(const sim_costs *c, const plan_gpu *g, const plan_kernel_list *kl)
{
    if (c->launch_model == SIM_LAUNCH_HOST) {
        double gpu, lead;
        sim_kernel_list_host(c, g, kl, c->launch_overhead, &gpu, &lead);
        return lead + gpu;
    }
    double gpu = 0;
    for (int j = 0; j < kl->n; j++) gpu += roofline_seconds(c, g, &kl->k[j]);
    double launch = (c->launch_overhead > 0 ? c->launch_overhead : 0) * kl->n;
    double o = c->launch_overlap > 0 ? c->launch_overlap : 0;
    double hi = gpu > launch ? gpu : launch, lo = gpu > launch ? launch : gpu;
    if (lo <= 0 || o <= 0) return gpu + launch;
    if (o >= 1) return hi;
    /* a smooth maximum, (G^k + L^k)^(1/k) with k = 1 / (1 - overlap), written to avoid overflow */
    double k = 1 / (1 - o);
    return hi * pow(1 + pow(lo / hi, k), 1 / k);
}

/* ---------------------------------------------------------------- calibration */

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

int sim_calibration_apply(sim_costs *c, const char *gpu_name, const char *name, const char *text, char *entry,
                          size_t n, base_error *e)
{
    if (n) entry[0] = 0;
    const char *best = NULL, *best_items = NULL;
    size_t best_len = 0, best_items_len = 0;
    int best_line = 0, line = 0;
    for (const char *s = text; s && *s;) {
        const char *nl = strchr(s, '\n');
        const char *end = nl ? nl : s + strlen(s);
        line++;
        const char *h = s;
        while (h < end && is_space(*h)) h++;
        const char *stop = h;
        while (stop < end && *stop != '#') stop++;
        while (stop > h && is_space(stop[-1])) stop--;
        if (stop > h) {
            const char *t = h;
            while (t < stop && !is_space(*t)) t++;
            size_t tlen = (size_t)(t - h);
            int has_eq = 0;
            for (const char *q = h; q < t; q++) has_eq |= *q == '=';
            if (has_eq)
                return base_error_at(e, name, line, 0, "a line must start with a GPU type (A100, H100, ...), then "
                                     "key=value items; this one starts with '%.*s'", (int)tlen, h);
            while (t < stop && is_space(*t)) t++;
            if (gpu_name && tlen > best_len && strlen(gpu_name) >= tlen && !strncasecmp(gpu_name, h, tlen)) {
                best = h, best_len = tlen, best_items = t, best_items_len = (size_t)(stop - t), best_line = line;
            }
        }
        s = nl ? nl + 1 : NULL;
    }
    if (!best) return 0;
    /* items may be separated by spaces or commas: the --costs parser takes commas */
    char *items = base_xmalloc(best_items_len + 1);
    size_t o = 0;
    for (size_t i = 0; i < best_items_len; i++) {
        char ch = best_items[i];
        if (is_space(ch)) {
            if (o && items[o - 1] != ',') items[o++] = ',';
        } else {
            items[o++] = ch;
        }
    }
    while (o && items[o - 1] == ',') o--;
    items[o] = 0;
    int rc = 0;
    if (o) {
        base_error ie;
        base_error_clear(&ie);
        sim_costs tmp = *c;
        if (sim_costs_parse(&tmp, items, &ie) || tmp.unit || tmp.nocomm) {
            const char *msg = ie.set ? ie.msg + (strncmp(ie.msg, "--costs: ", 9) ? 0 : 9) : "unit costs and nocomm are what-if options, not constants";
            rc = base_error_at(e, name, best_line, 0, "%s", msg);
        } else {
            *c = tmp;
        }
    }
    free(items);
    if (!rc && n) snprintf(entry, n, "%.*s", (int)best_len, best);
    return rc;
}

int sim_calibration_apply_plan(sim_costs *c, const plan_set *p, base_error *e)
{
    for (int i = 0; i < p->ncalib; i++) {
        char item[160];
        snprintf(item, sizeof item, "%s=%.17g", p->calib[i].name, p->calib[i].value);
        if (!strcmp(p->calib[i].name, "launch") || !strcmp(p->calib[i].name, "launch_overhead"))
            snprintf(item, sizeof item, "launch=%.17g", p->calib[i].value); /* seconds */
        base_error ie;
        base_error_clear(&ie);
        sim_costs tmp = *c;
        if (sim_costs_parse(&tmp, item, &ie) || tmp.unit || tmp.nocomm) {
            base_warn_at(e, NULL, 0, 0, "the cluster's calibration '%s' = %g is not a cost-model constant piper-sim "
                         "uses (launch, launch_bwd, gemm_eff, gemm_half, launch_overlap, hbm_eff, net_eff, "
                         "comm_slowdown); ignored", p->calib[i].name, p->calib[i].value);
            continue;
        }
        *c = tmp;
    }
    return 0;
}
