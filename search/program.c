/* program.c — a candidate as a program of the form of configs/programs/ (docs/programs.md):
 * stage-major devices (rank r of the pipeline on devices r·T·D .. (r+1)·T·D - 1, TP innermost,
 * so a TP group sits inside a node), one place / shard_tensor / replicate / shard per stage, the
 * split, the recompute and the schedule. The same text is what tier (b) compiles and what
 * `-o` writes, so the winner compiles unchanged with piper-compile and piper-sim. */
#include "search.h"

#include <string.h>

#include "../sched/sched.h"

const char *search_candidate_str(const search_candidate *c, char *buf, size_t n)
{
    static const char *const rec[] = {"", " selective-recompute", " full-recompute"};
    char ep[24] = "", v[24] = "", z[24] = "";
    if (c->ep > 1) snprintf(ep, sizeof ep, " EP%d", c->ep);
    if (c->schedule >= 0 && sched_schedule_chunks(c->schedule) == 0) snprintf(v, sizeof v, " v%d", c->v);
    if (c->zero > 0) snprintf(z, sizeof z, " ZeRO-%d", c->zero);
    char mb[48] = ""; /* a combination rejected before its micro-batch size was chosen has none */
    if (c->mbs > 0 && c->m > 0) snprintf(mb, sizeof mb, " mb=%d m=%lld", c->mbs, (long long)c->m);
    else if (c->mbs > 0) snprintf(mb, sizeof mb, " mb=%d", c->mbs);
    char dp[24] = ""; /* none when TP x PP does not divide the GPUs */
    if (c->dp > 0) snprintf(dp, sizeof dp, " DP%d", c->dp);
    snprintf(buf, n, "TP%d%s PP%d%s%s%s%s%s%s%s%s", c->tp, c->sp ? " SP" : "", c->pp, v, dp, ep, z,
             c->recompute >= 0 && c->recompute < 3 ? rec[c->recompute] : "", mb, c->schedule >= 0 ? " " : "",
             c->schedule >= 0 ? sched_schedule_name(c->schedule) : "");
    return buf;
}

/* "a-b" for a run of devices, or "[a, b, ...]" for a strided list. */
static void devices(base_buf *out, int first, int count, int stride)
{
    if (count == 1) base_buf_printf(out, "[%d]", first);
    else if (stride == 1) base_buf_printf(out, "\"%d-%d\"", first, first + count - 1);
    else {
        base_buf_puts(out, "[");
        for (int i = 0; i < count; i++) base_buf_printf(out, "%s%d", i ? ", " : "", first + i * stride);
        base_buf_puts(out, "]");
    }
}

/* Whether stage s of the even split holds an MoE layer (a stage of dense layers has no
 * EP-annotated node to shard: the compiler refuses the directive). */
static bool stage_has_moe(const ir_model *m, int stages, int s)
{
    for (int64_t l = 0; l < m->layers; l++)
        if (ir_even_stage_of_layer(m->layers, stages, l) == s && ir_model_layer_is_moe(m, l)) return true;
    return false;
}

void search_program_text(const search_problem *pb, const search_candidate *c, const char *model_ref,
                         const char *cluster_ref, base_buf *out)
{
    char cs[200];
    base_buf_printf(out, "# written by piper-search: %s\n", search_candidate_str(c, cs, sizeof cs));
    base_buf_printf(out, "name: search_%s_%lldgpus\n", pb->model.name ? pb->model.name : "model", (long long)pb->gpus);
    base_buf_printf(out, "model: \"%s\"\ncluster: \"%s\"\n", model_ref, cluster_ref);
    base_buf_printf(out, "batch: {global: %lld, micro: %d}\n", (long long)pb->global_batch, c->mbs);
    if (c->stages > 1 || c->tp > 1 || c->ep > 1) {
        base_buf_puts(out, "annotations: {");
        const char *sep = "";
        if (c->stages > 1) base_buf_printf(out, "pp: %d", c->stages), sep = ", ";
        if (c->tp > 1) base_buf_printf(out, "%stp: true", sep), sep = ", ";
        if (c->ep > 1) base_buf_printf(out, "%sep: true", sep);
        base_buf_puts(out, "}\n");
    }
    base_buf_puts(out, "directives:\n");
    base_buf_printf(out, "  - {op: split, filter: {}, num_microbatches: %lld}\n", (long long)c->m);
    if (c->recompute == IR_RECOMPUTE_FULL) base_buf_puts(out, "  - {op: recompute, filter: {}, mode: full}\n");
    if (c->recompute == IR_RECOMPUTE_SELECTIVE)
        base_buf_puts(out, "  - {op: recompute, filter: {REGION: attn}, mode: selective}\n");
    int per_rank = c->tp * c->dp;
    for (int s = 0; s < c->stages; s++) {
        int rank = c->schedule >= 0 ? sched_schedule_rank(c->schedule, c->pp, s) : 0;
        int base = rank * per_rank;
        /* every directive of stage s filters on it: {PP: s}, and {PP: s, TP: "*"} for TP */
        char filter[32], pfx[24] = "";
        if (c->stages > 1) snprintf(pfx, sizeof pfx, "PP: %d", s);
        snprintf(filter, sizeof filter, "{%s}", pfx);
        if (c->stages > 1) strcat(pfx, ", ");
        if (per_rank > 1 || c->stages > 1) {
            base_buf_printf(out, "  - {op: place, filter: %s, devices: ", filter);
            devices(out, base, per_rank, 1);
            base_buf_puts(out, "}\n");
        }
        if (c->tp > 1) {
            base_buf_printf(out, "  - {op: shard_tensor, filter: {%sTP: \"*\"}, devices: ", pfx);
            devices(out, base, c->tp, 1);
            base_buf_printf(out, ", sequence_parallel: %s}\n", c->sp ? "true" : "false");
        }
        if (c->dp > 1) { /* one data-parallel group: the same TP rank of every TP group */
            base_buf_printf(out, "  - {op: replicate, filter: %s, devices: ", filter);
            devices(out, base, c->dp, c->tp);
            base_buf_printf(out, ", zero: %d}\n", c->zero);
        }
        if (c->ep > 1 && stage_has_moe(&pb->model, c->stages, s)) {
            /* one expert-parallel group: ep consecutive data-parallel ranks */
            base_buf_printf(out, "  - {op: shard, filter: {%sEP: \"*\"}, devices: ", pfx);
            devices(out, base, c->ep, c->tp);
            base_buf_puts(out, ", stream: ep}\n");
        }
    }
    if (c->schedule >= 0) {
        base_buf_printf(out, "  - {op: schedule, name: %s", sched_schedule_name(c->schedule));
        if (sched_schedule_chunks(c->schedule) == 0) base_buf_printf(out, ", chunks: %d", c->v);
        base_buf_puts(out, "}\n");
    }
}
