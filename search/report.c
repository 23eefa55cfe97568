/* report.c — piper-search's output: the ranked table for people and --json for scripts
 * (docs/search.md has the schema). Both are functions of the results alone, never of timing or
 * of -j, so that the same search prints the same bytes. */
#include "search.h"

#include <string.h>

#include "../sched/sched.h"

static const struct {
    const char *name, *doc;
} reasons[SEARCH_NREASONS] = {
#define SEARCH_REASON_ROW(id, name, doc) [SEARCH_##id] = {name, doc},
    SEARCH_REASON_TABLE(SEARCH_REASON_ROW)
#undef SEARCH_REASON_ROW
};

const char *search_reason_name(search_reason r) { return (unsigned)r < SEARCH_NREASONS ? reasons[r].name : "?"; }
const char *search_reason_doc(search_reason r) { return (unsigned)r < SEARCH_NREASONS ? reasons[r].doc : "?"; }

static const char *const mem_names[PLAN_NMEM] = {
#define SEARCH_MEM_NAME(id, name) name,
    PLAN_MEM_TABLE(SEARCH_MEM_NAME)
#undef SEARCH_MEM_NAME
};

static int64_t valid(const search_result *r)
{
    return r->en->count[SEARCH_OK] + r->en->count[SEARCH_BOUND];
}

static void breakdown(const search_eval *ev, FILE *f)
{
    char b[32];
    for (int k = 0; k < PLAN_NMEM; k++)
        fprintf(f, "%s%s %s", k ? ", " : "", mem_names[k], base_fmt_bytes(ev->at_peak[k], b, sizeof b));
}

/* What would make the nearest miss fit: the levers it does not pull yet. */
static void advice(const search_candidate *c, FILE *f)
{
    fprintf(f, "  to make it fit:");
    if (c->zero < 3 && c->dp > 1) fprintf(f, " ZeRO-%d,", c->zero + 1);
    if (c->recompute != IR_RECOMPUTE_FULL) fprintf(f, " full recompute,");
    if (c->mbs > 1) fprintf(f, " a smaller micro-batch,");
    fprintf(f, " more tensor or pipeline parallelism, more GPUs (--gpus, a bigger cluster) or a GPU with more "
               "memory\n");
}

void search_report_write(const search_result *r, int top, FILE *f)
{
    const search_problem *pb = r->pb;
    const search_enum *en = r->en;
    char a[32], b[32], cs[200];
    double usable = search_usable_bytes(pb);
    fprintf(f, "piper-search: %s on %lld x %s (%s), global batch %lld sequences, %s usable per GPU\n",
            pb->model.name, (long long)pb->gpus, pb->cluster.gpu.name, pb->cluster.name,
            (long long)pb->global_batch, base_fmt_bytes(usable, a, sizeof a));
    fprintf(f, "candidates: %lld combinations looked at, %lld valid (divisible, preconditions hold)\n",
            (long long)en->considered, (long long)valid(r));
    fprintf(f, "  tier (a) memory bound: %lld kept, %lld cannot fit\n", (long long)en->count[SEARCH_OK],
            (long long)en->count[SEARCH_BOUND]);
    fprintf(f, "  tier (b) compiled:     %lld fit; %lld over memory, %lld deadlock, %lld refused by the compiler",
            (long long)r->nrank, (long long)r->count[SEARCH_OOM], (long long)r->count[SEARCH_DEADLOCK],
            (long long)r->count[SEARCH_COMPILE]);
    if (r->count[SEARCH_PRUNED])
        fprintf(f, "; %lld not compiled (their step-time bound is above the best %d estimates)",
                (long long)r->count[SEARCH_PRUNED], r->nsim_run);
    fputc('\n', f);
    fprintf(f, "  tier (c) simulated:    %d (the best by the static estimate)%s\n", r->nsimulated,
            r->count[SEARCH_SIM] ? "; some failed, see below" : "");
    if (r->nrank == 0) {
        fprintf(f, "\nno candidate fits.\n");
        if (r->nearest_oom >= 0) {
            const search_eval *ev = &r->eval[r->nearest_oom];
            fprintf(f, "  nearest miss: %s needs %s at its peak (device %d), %s more than usable\n",
                    search_candidate_str(&en->c[r->nearest_oom], cs, sizeof cs),
                    base_fmt_bytes(ev->peak_bytes, a, sizeof a), ev->peak_device,
                    base_fmt_bytes(ev->peak_bytes - usable, b, sizeof b));
            fprintf(f, "  at its peak: ");
            breakdown(ev, f);
            fputc('\n', f);
            advice(&en->c[r->nearest_oom], f);
        } else if (en->nearest_bound_excess >= 0) {
            fprintf(f, "  nearest miss: %s needs at least %s, %s more than usable\n",
                    search_candidate_str(&en->nearest_bound, cs, sizeof cs),
                    base_fmt_bytes(en->nearest_bound.bound_bytes, a, sizeof a),
                    base_fmt_bytes(en->nearest_bound_excess, b, sizeof b));
            advice(&en->nearest_bound, f);
        } else { /* the commonest reason, with its example, says what to change */
            search_reason why = en->count[SEARCH_PRECONDITION] > en->count[SEARCH_INDIVISIBLE] ? SEARCH_PRECONDITION
                                                                                              : SEARCH_INDIVISIBLE;
            fprintf(f, "  nothing in the space is valid, e.g. %s; change the global batch or the GPUs, or widen the "
                       "space\n",
                    en->example[why][0] ? en->example[why] : "(nothing was enumerated)");
        }
    } else {
        fprintf(f, "\n%4s  %12s  %12s  %6s  %11s  %s\n", "rank", "step time", "tokens/s", "MFU", "peak memory",
                "strategy");
        for (int k = 0; k < r->nrank && k < top; k++) {
            const search_eval *ev = &r->eval[r->rank[k]];
            if (!ev->simulated) break;
            fprintf(f, "%4d  %10.4f s  %12.0f  %5.1f%%  %11s  %s\n", k + 1, ev->step_seconds, ev->tokens_per_second,
                    100 * ev->mfu, base_fmt_bytes(ev->peak_bytes, a, sizeof a),
                    search_candidate_str(&en->c[r->rank[k]], cs, sizeof cs));
        }
        const search_eval *w = &r->eval[r->rank[0]];
        fprintf(f, "\nthe winner's fullest device (%d): ", w->peak_device);
        breakdown(w, f);
        fputc('\n', f);
    }
    fprintf(f, "\nexcluded:\n");
    for (int k = SEARCH_OK + 1; k < SEARCH_NREASONS; k++) {
        int64_t n = k == SEARCH_INDIVISIBLE || k == SEARCH_PRECONDITION || k == SEARCH_BOUND ? en->count[k] : r->count[k];
        if (!n) continue;
        fprintf(f, "  %-13s %8lld  %s", reasons[k].name, (long long)n, reasons[k].doc);
        /* does not fit: by how much, from the nearest miss to the farthest */
        if (k == SEARCH_BOUND && en->nearest_bound_excess >= 0)
            fprintf(f, ", by %s to %s", base_fmt_bytes(en->nearest_bound_excess, a, sizeof a),
                    base_fmt_bytes(en->farthest_bound_excess, b, sizeof b));
        if (k == SEARCH_OOM && r->nearest_oom >= 0)
            fprintf(f, ", by %s to %s", base_fmt_bytes(r->eval[r->nearest_oom].peak_bytes - usable, a, sizeof a),
                    base_fmt_bytes(r->eval[r->farthest_oom].peak_bytes - usable, b, sizeof b));
        fputc('\n', f);
        if (k < SEARCH_COMPILE && en->example[k][0]) fprintf(f, "  %13s           e.g. %s\n", "", en->example[k]);
    }
    if (r->nrank > 0 && r->nearest_oom >= 0) {
        const search_eval *ev = &r->eval[r->nearest_oom];
        fprintf(f, "  nearest miss: %s needs %s, %s over\n", search_candidate_str(&en->c[r->nearest_oom], cs, sizeof cs),
                base_fmt_bytes(ev->peak_bytes, a, sizeof a), base_fmt_bytes(ev->peak_bytes - usable, b, sizeof b));
    }
    /* the first of each verdict of the compiler and the simulator, so that it can be acted on */
    static const search_reason verdicts[] = {SEARCH_COMPILE, SEARCH_DEADLOCK, SEARCH_SIM};
    for (size_t v = 0; v < sizeof verdicts / sizeof *verdicts; v++)
        for (int i = 0; i < en->n; i++)
            if (r->eval[i].reason == verdicts[v]) {
                fprintf(f, "  first %s: %s: %s\n", reasons[verdicts[v]].name,
                        search_candidate_str(&en->c[i], cs, sizeof cs), r->eval[i].msg);
                break;
            }
}

/* A JSON string (the messages may hold quotes and backslashes). */
static void json_str(const char *s, FILE *f)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
        else fputc(*s, f);
    }
    fputc('"', f);
}

static void json_candidate(const search_candidate *c, FILE *f)
{
    char cs[200];
    fprintf(f, "\"strategy\": ");
    json_str(search_candidate_str(c, cs, sizeof cs), f);
    fprintf(f, ", \"tp\": %d, \"sp\": %s, \"pp\": %d, \"v\": %d, \"dp\": %d, \"ep\": %d, \"zero\": %d, "
               "\"recompute\": \"%s\", \"mbs\": %d, \"m\": %lld, \"schedule\": ",
            c->tp, c->sp ? "true" : "false", c->pp, c->v, c->dp, c->ep, c->zero, search_recompute_name(c->recompute),
            c->mbs, (long long)c->m);
    if (c->schedule >= 0) fprintf(f, "\"%s\"", sched_schedule_name(c->schedule));
    else fprintf(f, "null");
    fprintf(f, ", \"bound_bytes\": %.0f", c->bound_bytes);
}

void search_json_write(const search_result *r, int top, FILE *f)
{
    const search_problem *pb = r->pb;
    const search_enum *en = r->en;
    fprintf(f, "{\n  \"model\": ");
    json_str(pb->model.name ? pb->model.name : "", f);
    fprintf(f, ",\n  \"cluster\": ");
    json_str(pb->cluster.name ? pb->cluster.name : "", f);
    fprintf(f, ",\n  \"gpu\": ");
    json_str(pb->cluster.gpu.name, f);
    fprintf(f, ",\n  \"gpus\": %lld,\n  \"global_batch\": %lld,\n  \"usable_bytes\": %.0f,\n", (long long)pb->gpus,
            (long long)pb->global_batch, search_usable_bytes(pb));
    fprintf(f, "  \"tiers\": {\"considered\": %lld, \"valid\": %lld, \"a_kept\": %lld, \"b_fit\": %d, "
               "\"c_simulated\": %d},\n",
            (long long)en->considered, (long long)valid(r), (long long)en->count[SEARCH_OK], r->nrank, r->nsimulated);
    fprintf(f, "  \"excluded\": {");
    for (int k = SEARCH_OK + 1; k < SEARCH_NREASONS; k++)
        fprintf(f, "%s\"%s\": %lld", k > 1 ? ", " : "", reasons[k].name, (long long)r->count[k]);
    fprintf(f, "},\n  \"nearest_miss\": ");
    if (r->nearest_oom >= 0) {
        fprintf(f, "{\"tier\": \"b\", ");
        json_candidate(&en->c[r->nearest_oom], f);
        fprintf(f, ", \"peak_bytes\": %.0f, \"excess_bytes\": %.0f}", r->eval[r->nearest_oom].peak_bytes,
                r->eval[r->nearest_oom].peak_bytes - search_usable_bytes(pb));
    } else if (en->nearest_bound_excess >= 0) {
        fprintf(f, "{\"tier\": \"a\", ");
        json_candidate(&en->nearest_bound, f);
        fprintf(f, ", \"excess_bytes\": %.0f}", en->nearest_bound_excess);
    } else {
        fprintf(f, "null");
    }
    fprintf(f, ",\n  \"ranked\": [");
    int shown = 0;
    for (int k = 0; k < r->nrank && k < top; k++) {
        const search_eval *ev = &r->eval[r->rank[k]];
        if (!ev->simulated) break;
        fprintf(f, "%s\n    {\"rank\": %d, ", shown++ ? "," : "", k + 1);
        json_candidate(&en->c[r->rank[k]], f);
        fprintf(f, ", \"step_seconds\": %.9g, \"tokens_per_second\": %.9g, \"mfu\": %.6g, \"estimate_seconds\": %.9g, "
                   "\"peak_bytes\": %.0f, \"peak_device\": %d, \"at_peak\": {",
                ev->step_seconds, ev->tokens_per_second, ev->mfu, ev->estimate_seconds, ev->peak_bytes,
                ev->peak_device);
        for (int m = 0; m < PLAN_NMEM; m++) fprintf(f, "%s\"%s\": %.0f", m ? ", " : "", mem_names[m], ev->at_peak[m]);
        fprintf(f, "}}");
    }
    fprintf(f, "%s]\n}\n", shown ? "\n  " : "");
}
