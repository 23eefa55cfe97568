/* enumerate.c — the candidates of a space and tier (a): every combination of TP (inside a node,
 * on a shape the model accepts), sequence parallelism, PP ranks, schedule with its stages per
 * rank, EP, micro-batch size (and the micro-batch count it implies: global = mbs x m x dp), ZeRO
 * stage and recompute mode, in that nesting order. A combination that fails at one level is
 * counted once there, for its reason, and not expanded further; one that passes every check and
 * the memory bound is kept. The order is fixed, so candidate indices are too. */
#include "search.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../sched/sched.h"

/* The values of key k: the space's, else the defaults from `dflt` (n of them). */
static int values_of(const search_space *s, search_key k, const int *dflt, int n, int *out)
{
    const search_values *sv = &s->key[k];
    if (sv->n > 0) {
        memcpy(out, sv->v, (size_t)sv->n * sizeof *out);
        return sv->n;
    }
    memcpy(out, dflt, (size_t)n * sizeof *out);
    return n;
}

/* Divisors of x up to max, ascending, at most SEARCH_MAX_VALUES. */
static int divisors(int64_t x, int64_t max, int *out)
{
    int n = 0;
    for (int64_t d = 1; d <= x && d <= max && n < SEARCH_MAX_VALUES; d++)
        if (x % d == 0) out[n++] = (int)d;
    return n;
}

static void reject(search_enum *en, search_reason r, const search_candidate *c, const char *fmt, ...)
    BASE_PRINTF(4, 5);
static void reject(search_enum *en, search_reason r, const search_candidate *c, const char *fmt, ...)
{
    en->considered++;
    en->count[r]++;
    if (en->example[r][0]) return; /* the first of each reason is its example */
    char cs[160], why[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    snprintf(en->example[r], sizeof en->example[r], "%s: %s", search_candidate_str(c, cs, sizeof cs), why);
}

static void keep(search_enum *en, const search_candidate *c)
{
    en->considered++;
    en->count[SEARCH_OK]++;
    if (en->n == en->cap) {
        en->cap = en->cap ? 2 * en->cap : 256;
        en->c = base_xrealloc(en->c, (size_t)en->cap * sizeof *en->c);
    }
    en->c[en->n++] = *c;
}

/* The innermost levels: ZeRO and recompute, then the memory bound. */
static void inner(const search_space *s, const search_problem *pb, search_candidate c, search_enum *en)
{
    static const int all_zero[] = {0, 1, 2, 3}, all_rec[] = {0, 1, 2};
    int zs[SEARCH_MAX_VALUES], rs[SEARCH_MAX_VALUES];
    int nz = c.dp == 1 ? 1 : values_of(s, SEARCH_KEY_ZERO, all_zero, 4, zs); /* ZeRO means nothing without DP */
    if (c.dp == 1) zs[0] = 0;
    int nr = values_of(s, SEARCH_KEY_RECOMPUTE, all_rec, 3, rs);
    double usable = search_usable_bytes(pb);
    for (int zi = 0; zi < nz; zi++)
        for (int ri = 0; ri < nr; ri++) {
            c.zero = zs[zi];
            c.recompute = rs[ri];
            char why[256];
            if (c.schedule >= 0 && sched_schedule_supports(c.schedule, c.tp, c.zero, pb->model.tied_embeddings, why, sizeof why)) {
                reject(en, SEARCH_PRECONDITION, &c, "%s", why);
                continue;
            }
            c.bound_bytes = search_memory_bound(pb, &c);
            if (c.bound_bytes > usable) {
                char a[32], b[32];
                double excess = c.bound_bytes - usable;
                if (excess > en->farthest_bound_excess) en->farthest_bound_excess = excess;
                if (en->nearest_bound_excess < 0 || excess < en->nearest_bound_excess) {
                    en->nearest_bound_excess = excess;
                    en->nearest_bound = c;
                }
                reject(en, SEARCH_BOUND, &c, "needs at least %s of %s usable", base_fmt_bytes(c.bound_bytes, a, sizeof a),
                       base_fmt_bytes(usable, b, sizeof b));
            } else {
                keep(en, &c);
            }
        }
}

/* Micro-batch sizes and the schedule's preconditions for the micro-batch count they imply. */
static void batch_level(const search_space *s, const search_problem *pb, search_candidate c, search_enum *en)
{
    int dflt[SEARCH_MAX_VALUES], mb[SEARCH_MAX_VALUES];
    int nd = divisors(pb->global_batch, pb->global_batch, dflt);
    int n = values_of(s, SEARCH_KEY_MBS, dflt, nd, mb);
    for (int i = 0; i < n; i++) {
        c.mbs = mb[i];
        if (pb->global_batch % ((int64_t)c.mbs * c.dp)) {
            c.m = 0;
            reject(en, SEARCH_INDIVISIBLE, &c, "mbs %d x dp %d does not divide the global batch %lld", c.mbs, c.dp,
                   (long long)pb->global_batch);
            continue;
        }
        c.m = pb->global_batch / ((int64_t)c.mbs * c.dp);
        if (c.schedule >= 0) {
            char why[256];
            if (c.m > 1 << 20 || sched_schedule_check(c.schedule, c.pp, (int)c.m, c.v, why, sizeof why)) {
                reject(en, SEARCH_PRECONDITION, &c, "%s", why);
                continue;
            }
        }
        inner(s, pb, c, en);
    }
}

static void expert_level(const search_space *s, const search_problem *pb, search_candidate c, search_enum *en)
{
    int dflt[SEARCH_MAX_VALUES], ep[SEARCH_MAX_VALUES];
    int n = 1;
    ep[0] = 1;
    if (pb->model.experts > 0) n = values_of(s, SEARCH_KEY_EP, dflt, divisors(pb->model.experts, pb->gpus, dflt), ep);
    for (int i = 0; i < n; i++) {
        c.ep = ep[i];
        if (c.dp % c.ep) {
            reject(en, SEARCH_INDIVISIBLE, &c, "ep %d does not divide dp %d", c.ep, c.dp);
            continue;
        }
        batch_level(s, pb, c, en);
    }
}

/* Schedules and their stages per rank. */
static void schedule_level(const search_space *s, const search_problem *pb, search_candidate c, search_enum *en)
{
    int ns = sched_schedule_count();
    int all[SEARCH_MAX_VALUES], sch[SEARCH_MAX_VALUES];
    for (int i = 0; i < ns && i < SEARCH_MAX_VALUES; i++) all[i] = i;
    int n = values_of(s, SEARCH_KEY_SCHEDULES, all, ns, sch);
    if (c.pp == 1) { /* no pipeline: no schedule, one stage */
        n = 1;
        sch[0] = -1;
    }
    int64_t layers = pb->model.layers;
    for (int i = 0; i < n; i++) {
        c.schedule = sch[i];
        int chunks = c.schedule >= 0 ? sched_schedule_chunks(c.schedule) : 1;
        int vd[SEARCH_MAX_VALUES], vs[SEARCH_MAX_VALUES], nv = 0;
        if (chunks == 0) { /* interleaved: default v >= 2 with balanced stages */
            for (int v = 2; (int64_t)v * c.pp <= layers && nv < SEARCH_MAX_VALUES; v++)
                if (layers % ((int64_t)v * c.pp) == 0) vd[nv++] = v;
            nv = values_of(s, SEARCH_KEY_V, vd, nv, vs);
            if (nv == 0) { /* counted, so that the schedule does not vanish from the counts unexplained */
                c.v = 0;
                reject(en, SEARCH_INDIVISIBLE, &c, "no v >= 2 makes v x %d stages that divide %lld layers", c.pp,
                       (long long)layers);
                continue;
            }
        } else {
            vs[0] = chunks;
            nv = 1;
        }
        for (int j = 0; j < nv; j++) {
            c.v = vs[j];
            c.stages = c.pp * c.v;
            if (c.stages > layers) {
                reject(en, SEARCH_INDIVISIBLE, &c, "%d stages for %lld layers", c.stages, (long long)layers);
                continue;
            }
            expert_level(s, pb, c, en);
        }
    }
}

void search_enumerate(const search_space *s, const search_problem *pb, search_enum *en)
{
    memset(en, 0, sizeof *en);
    en->nearest_bound_excess = -1;
    int64_t gpn = pb->gpus < pb->cluster.gpus_per_node ? pb->gpus : pb->cluster.gpus_per_node;
    int dtp[SEARCH_MAX_VALUES], tps[SEARCH_MAX_VALUES], dpp[SEARCH_MAX_VALUES], pps[SEARCH_MAX_VALUES];
    int ntp = values_of(s, SEARCH_KEY_TP, dtp, divisors(gpn, gpn, dtp), tps);
    int npp = values_of(s, SEARCH_KEY_PP, dpp, divisors(pb->gpus, pb->model.layers, dpp), pps);
    static const int both[] = {0, 1};
    int sps[SEARCH_MAX_VALUES];
    int nsp = values_of(s, SEARCH_KEY_SP, both, 2, sps);
    for (int ti = 0; ti < ntp; ti++)
        for (int si = 0; si < (tps[ti] == 1 ? 1 : nsp); si++) {
            search_candidate c;
            memset(&c, 0, sizeof c);
            c.tp = tps[ti];
            c.sp = tps[ti] > 1 && sps[si];
            c.ep = 1;
            c.schedule = -1;
            c.v = 1;
            ir_shape sh = ir_shape_default();
            sh.tp = c.tp;
            sh.sequence_parallel = c.sp;
            base_error e;
            base_error_clear(&e);
            if (gpn % c.tp || ir_shape_validate(&pb->model, &sh, &e)) {
                reject(en, SEARCH_INDIVISIBLE, &c, "%s", gpn % c.tp ? "TP larger than a node" : e.msg);
                continue;
            }
            for (int pi = 0; pi < npp; pi++) {
                c.pp = pps[pi];
                c.stages = c.pp;
                if (pb->gpus % ((int64_t)c.tp * c.pp)) {
                    c.dp = 0;
                    reject(en, SEARCH_INDIVISIBLE, &c, "tp %d x pp %d does not divide %lld GPUs", c.tp, c.pp,
                           (long long)pb->gpus);
                    continue;
                }
                c.dp = (int)(pb->gpus / ((int64_t)c.tp * c.pp));
                schedule_level(s, pb, c, en);
            }
        }
}

void search_enum_free(search_enum *en)
{
    free(en->c);
    memset(en, 0, sizeof *en);
}
