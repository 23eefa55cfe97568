/* report.c — what piper-sim prints: the report for people and the --json document
 * (docs/sim-json.md). Both are deterministic functions of the plan, the options and the
 * simulated figures: the wall time of the simulation is left out on purpose. */
#include "sim.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#define SHOW_HEAD 16 /* the report lists this many devices, then the last SHOW_TAIL */
#define SHOW_TAIL 4

static int nodes_of(const plan_set *p)
{
    int n = 0;
    for (int d = 0; d < p->ndevices; d++)
        if (p->devices[d].node + 1 > n) n = p->devices[d].node + 1;
    return n;
}

static const char *nz(const char *s) { return s ? s : "?"; }

static void costs_text(const sim_options *o, char *buf, size_t n)
{
    const sim_costs *c = &o->costs;
    size_t at = 0;
    if (c->unit) {
        at += (size_t)snprintf(buf + at, n - at, "unit");
        for (int p = 0; p < PLAN_NPASS && at < n; p++)
            if (c->unit_pass[p] > 0)
                at += (size_t)snprintf(buf + at, n - at, " %s=%g", plan_pass_name((plan_pass)p), c->unit_pass[p]);
    } else {
        if (c->launch_model == SIM_LAUNCH_LIST)
            at += (size_t)snprintf(buf + at, n - at, "kernel model (launch %g us per list, %.3g hidden; ",
                                   c->launch_overhead * 1e6, c->launch_overlap);
        else
            at += (size_t)snprintf(buf + at, n - at, "kernel model (host issues at %g us per launch, %g us backward, "
                                   "waits at %s; ", c->launch_overhead * 1e6,
                                   sim_launch_seconds(c, PLAN_PASS_B) * 1e6, sim_host_sync_name(c->host_sync));
        if (at < n)
            at += (size_t)snprintf(buf + at, n - at, "GEMM efficiency %.3g at 16384^3, half at %g; HBM %.3g)",
                                   c->gemm_eff_large, c->gemm_half_dim, c->hbm_eff);
    }
    if (at < n && (c->net_eff != 1 || c->comm_slowdown > 0))
        at += (size_t)snprintf(buf + at, n - at, "; network efficiency %.3g, compute slowdown %.3g during transfers",
                               c->net_eff, c->comm_slowdown);
    if (at < n && o->calibration[0]) at += (size_t)snprintf(buf + at, n - at, "; calibration %s", o->calibration);
    if (at < n && c->nocomm) snprintf(buf + at, n - at, "; communication free");
}

static void device_row(const plan_set *p, const sim_result *r, int d, FILE *f)
{
    const sim_device_result *x = &r->dev[d];
    char b[PLAN_NMEM + 1][32];
    base_fmt_bytes(x->peak_bytes, b[PLAN_NMEM], sizeof b[0]);
    for (int m = 0; m < PLAN_NMEM; m++) base_fmt_bytes(x->at_peak[m], b[m], sizeof b[0]);
    fprintf(f, "  %-7d %4d %11.6f %11.6f %11.6f %11.6f  %11s%s  %s / %s / %s / %s / %s / %s\n", d, x->node,
            x->compute_seconds, x->exposed_comm_seconds, x->idle_seconds, x->end_seconds, b[PLAN_NMEM],
            x->over_memory ? "!" : " ", b[PLAN_MEM_PARAM], b[PLAN_MEM_GRAD], b[PLAN_MEM_OPT], b[PLAN_MEM_ACT],
            b[PLAN_MEM_COMM], b[PLAN_MEM_WORK]);
    (void)p;
}

void sim_report_write(const plan_set *p, const sim_options *o, const sim_result *r, FILE *f)
{
    int nodes = nodes_of(p);
    const sim_links *l = &o->links;
    char costs[512];
    costs_text(o, costs, sizeof costs);
    fprintf(f, "piper-sim: %s on %d x %s (%d node%s), one training step\n", nz(p->model.name), p->ndevices,
            nz(p->gpu.name), nodes, nodes == 1 ? "" : "s");
    if (o->platform)
        fprintf(f, "  platform: %s (SimGrid XML); collectives %s\n", o->platform, sim_coll_name(o->coll));
    else
        fprintf(f, "  links: NVLink %g GB/s, %g us; NIC %g GB/s per %d GPU%s, %g us; collectives %s\n", l->nvlink_bw / 1e9,
                l->nvlink_latency * 1e6, l->nic_bw / 1e9, l->gpus_per_nic, l->gpus_per_nic == 1 ? "" : "s",
                l->nic_latency * 1e6, sim_coll_name(o->coll));
    fprintf(f, "  costs: %s\n", costs);
    if (r->folded_replicas > 1)
        fprintf(f, "  folded: %d identical data-parallel replicas simulated once (%d of %d devices)\n",
                r->folded_replicas, r->simulated_devices, r->ndevices);
    else if (r->fold_note[0])
        fprintf(f, "  not folded: %s\n", r->fold_note);
    if (r->host_note[0]) fprintf(f, "  host: %s\n", r->host_note);
    fputc('\n', f);
    fprintf(f, "  step time        %.6f s\n", r->step_seconds);
    fprintf(f, "  tokens/s         %.6g  (%" PRId64 " sequences x %" PRId64 " tokens)\n", r->tokens_per_second,
            p->model.global_batch, p->model.seq);
    fprintf(f, "  MFU              %.2f %%  (model GEMM FLOPs %.6g; peak %.6g TFLOP/s x %d devices)\n", 100 * r->mfu,
            r->model_flops, r->peak_flops / 1e12, r->ndevices);
    fprintf(f, "  HFU              %.2f %%  (executed GEMM FLOPs %.6g, recompute included)\n", 100 * r->hfu, r->hw_flops);
    if (r->ndevices > 0) {
        const sim_device_result *c = &r->dev[r->critical_device];
        fprintf(f, "  critical device  %d (least idle: compute %.6f s + exposed communication %.6f s); last to "
                   "finish: %d\n",
                r->critical_device, c->compute_seconds, c->exposed_comm_seconds, r->last_device);
    }
    fprintf(f, "\n  device  node   compute s   exposed s      idle s       end s  peak memory   params / grads / "
               "optimizer / activations / comm / workspace\n");
    for (int d = 0; d < r->ndevices; d++) {
        if (r->ndevices > SHOW_HEAD + SHOW_TAIL && d == SHOW_HEAD) {
            fprintf(f, "  ... (%d more devices)\n", r->ndevices - SHOW_HEAD - SHOW_TAIL);
            d = r->ndevices - SHOW_TAIL;
        }
        device_row(p, r, d, f);
    }
    char u[32], m[32], res[32];
    base_fmt_bytes(r->usable_bytes, u, sizeof u);
    base_fmt_bytes(p->gpu.mem_bytes, m, sizeof m);
    base_fmt_bytes(p->gpu.reserve_bytes, res, sizeof res);
    fprintf(f, "\n  usable memory per %s: %s (%s capacity - %s reserve)", nz(p->gpu.name), u, m, res);
    if (r->nover_memory == 0) {
        fprintf(f, "; every device fits\n");
    } else {
        fprintf(f, "; %d device%s over it (marked !):", r->nover_memory, r->nover_memory == 1 ? "" : "s");
        int shown = 0;
        for (int d = 0; d < r->ndevices && shown < 16; d++)
            if (r->dev[d].over_memory) fprintf(f, " %d", d), shown++;
        fprintf(f, "%s\n", r->nover_memory > shown ? " ..." : "");
    }
}

/* ---------------------------------------------------------------- JSON */

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
        else if (*c < 0x20) fprintf(f, "\\u%04x", *c);
        else fputc(*c, f);
    }
    fputc('"', f);
}

/* %.12g: enough digits for any figure the report derives, and the same bytes on every run. */
static void json_num(FILE *f, double v)
{
    if (!isfinite(v)) v = 0;
    if (v == 0) v = 0; /* no "-0" */
    fprintf(f, "%.12g", v);
}

static void json_mem(FILE *f, const double *v)
{
    fputc('{', f);
    for (int m = 0; m < PLAN_NMEM; m++) {
        fprintf(f, "%s", m ? ", " : "");
        json_str(f, plan_mem_name((plan_mem)m));
        fputs(": ", f);
        json_num(f, v[m]);
    }
    fputc('}', f);
}

void sim_json_write(const plan_set *p, const sim_options *o, const sim_result *r, FILE *f)
{
    const sim_links *l = &o->links;
    const sim_costs *c = &o->costs;
    fputs("{\n  \"piper_sim\": 1,\n  \"model\": ", f);
    json_str(f, p->model.name);
    fputs(",\n  \"gpu\": ", f);
    json_str(f, p->gpu.name);
    fprintf(f, ",\n  \"devices\": %d,\n  \"nodes\": %d,\n  \"global_batch\": %" PRId64 ",\n  \"seq\": %" PRId64 ",\n",
            p->ndevices, nodes_of(p), p->model.global_batch, p->model.seq);
    fputs("  \"links\": {\"nvlink_bw\": ", f);
    json_num(f, l->nvlink_bw);
    fputs(", \"nvlink_latency\": ", f);
    json_num(f, l->nvlink_latency);
    fputs(", \"nic_bw\": ", f);
    json_num(f, l->nic_bw);
    fputs(", \"nic_latency\": ", f);
    json_num(f, l->nic_latency);
    fputs(", \"pcie_bw\": ", f);
    json_num(f, l->pcie_bw);
    fprintf(f, ", \"gpus_per_nic\": %d, \"nodes_per_leaf\": %d, \"oversubscription\": ", l->gpus_per_nic, l->nodes_per_leaf);
    json_num(f, l->oversubscription);
    fputs("},\n  \"platform\": ", f);
    if (o->platform) json_str(f, o->platform);
    else fputs("null", f);
    fputs(",\n  \"costs\": {\"unit\": ", f);
    if (c->unit) {
        fputc('{', f);
        for (int q = 0; q < PLAN_NPASS; q++) {
            fprintf(f, "%s", q ? ", " : "");
            json_str(f, plan_pass_name((plan_pass)q));
            fputs(": ", f);
            json_num(f, c->unit_pass[q]);
        }
        fputc('}', f);
    } else {
        fputs("null", f);
    }
    fprintf(f, ", \"nocomm\": %s, \"launch_overhead\": ", c->nocomm ? "true" : "false");
    json_num(f, c->launch_overhead);
    fputs(", \"gemm_eff_large\": ", f);
    json_num(f, c->gemm_eff_large);
    fputs(", \"gemm_half_dim\": ", f);
    json_num(f, c->gemm_half_dim);
    fputs(", \"launch_bwd\": ", f);
    json_num(f, sim_launch_seconds(c, PLAN_PASS_B));
    fprintf(f, ", \"launch_model\": \"%s\", \"host_sync\": \"%s\", \"launch_overlap\": ",
            c->launch_model == SIM_LAUNCH_LIST ? "list" : "host", sim_host_sync_name(c->host_sync));
    json_num(f, c->launch_overlap);
    fputs(", \"hbm_eff\": ", f);
    json_num(f, c->hbm_eff);
    fputs(", \"net_eff\": ", f);
    json_num(f, c->net_eff);
    fputs(", \"comm_slowdown\": ", f);
    json_num(f, c->comm_slowdown);
    fputs(", \"calibration\": ", f);
    if (o->calibration[0]) json_str(f, o->calibration);
    else fputs("null", f);
    fprintf(f, ", \"collectives\": \"%s\"},\n", sim_coll_name(o->coll));

    static const struct {
        const char *key;
        size_t off;
    } top[] = {
        {"step_seconds", offsetof(sim_result, step_seconds)},
        {"tokens_per_second", offsetof(sim_result, tokens_per_second)},
        {"model_flops", offsetof(sim_result, model_flops)},
        {"hardware_flops", offsetof(sim_result, hw_flops)},
        {"peak_flops", offsetof(sim_result, peak_flops)},
        {"mfu", offsetof(sim_result, mfu)},
        {"hfu", offsetof(sim_result, hfu)},
        {"usable_bytes", offsetof(sim_result, usable_bytes)},
    };
    for (size_t k = 0; k < BASE_COUNT(top); k++) {
        fprintf(f, "  \"%s\": ", top[k].key);
        double v;
        memcpy(&v, (const char *)r + top[k].off, sizeof v);
        json_num(f, v);
        fputs(",\n", f);
    }
    fprintf(f, "  \"critical_device\": %d,\n  \"last_device\": %d,\n  \"activities\": %" PRId64 ",\n",
            r->critical_device, r->last_device, r->activities);
    fprintf(f, "  \"fold\": {\"replicas\": %d, \"simulated_devices\": %d, \"note\": ", r->folded_replicas,
            r->simulated_devices);
    if (r->fold_note[0]) json_str(f, r->fold_note);
    else fputs("null", f);
    fputs("},\n", f);
    fputs("  \"host_note\": ", f);
    if (r->host_note[0]) json_str(f, r->host_note);
    else fputs("null", f);
    fputs(",\n", f);
    fputs("  \"over_memory\": [", f);
    for (int d = 0, k = 0; d < r->ndevices; d++)
        if (r->dev[d].over_memory) fprintf(f, "%s%d", k++ ? ", " : "", d);
    fputs("],\n  \"per_device\": [\n", f);
    for (int d = 0; d < r->ndevices; d++) {
        const sim_device_result *x = &r->dev[d];
        fprintf(f, "    {\"device\": %d, \"node\": %d, \"compute_seconds\": ", x->id, x->node);
        json_num(f, x->compute_seconds);
        fputs(", \"exposed_comm_seconds\": ", f);
        json_num(f, x->exposed_comm_seconds);
        fputs(", \"comm_seconds\": ", f);
        json_num(f, x->comm_seconds);
        fputs(", \"idle_seconds\": ", f);
        json_num(f, x->idle_seconds);
        fputs(", \"launch_wait_seconds\": ", f);
        json_num(f, x->launch_wait_seconds);
        fputs(", \"end_seconds\": ", f);
        json_num(f, x->end_seconds);
        fputs(", \"model_flops\": ", f);
        json_num(f, x->model_flops);
        fputs(", \"hardware_flops\": ", f);
        json_num(f, x->hw_flops);
        fputs(", \"bytes_sent\": ", f);
        json_num(f, x->bytes_sent);
        fprintf(f, ", \"instructions\": %" PRId64 ", \"peak_bytes\": ", x->instructions);
        json_num(f, x->peak_bytes);
        fputs(", \"at_peak\": ", f);
        json_mem(f, x->at_peak);
        fputs(", \"peak_by_category\": ", f);
        json_mem(f, x->peak_by_mem);
        fprintf(f, ", \"over_memory\": %s}%s\n", x->over_memory ? "true" : "false", d + 1 < r->ndevices ? "," : "");
    }
    fputs("  ]\n}\n", f);
}
