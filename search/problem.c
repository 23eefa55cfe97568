/* problem.c — what piper-search is asked: a model, a cluster (or its first N GPUs), a global
 * batch; and the check that every value a space gives explicitly is possible on its own, so that
 * `--tp 3` on a model with 32 heads is an error that says what to use, not an empty result. */
#include "search.h"

#include <string.h>

int search_problem_load(search_problem *pb, const char *model_path, const char *cluster_path, int64_t gpus,
                        int64_t global_batch, base_arena *a, base_error *e)
{
    memset(pb, 0, sizeof *pb);
    pb->model_path = model_path;
    pb->cluster_path = cluster_path;
    ir_doc *md, *cd;
    if (ir_doc_load(a, model_path, &md, e) || ir_model_from_doc(md, a, &pb->model, e)) return -1;
    pb->model_doc = md;
    if (ir_doc_load(a, cluster_path, &cd, e) || ir_cluster_from_doc(cd, a, &pb->cluster, e)) return -1;
    int64_t all = ir_cluster_devices(&pb->cluster);
    pb->gpus = gpus > 0 ? gpus : all;
    if (pb->gpus > all)
        return base_errorf(e, "--gpus %lld: cluster '%s' has only %lld GPUs (%s); use at most %lld", (long long)gpus,
                           pb->cluster.name, (long long)all, cluster_path, (long long)all);
    int64_t gpn = pb->cluster.gpus_per_node;
    if (pb->gpus > gpn && pb->gpus % gpn)
        return base_errorf(e, "--gpus %lld: beyond one node, use whole nodes of %lld GPUs (e.g. --gpus %lld)",
                           (long long)gpus, (long long)gpn, (long long)(pb->gpus / gpn * gpn));
    if (global_batch < 1) return base_errorf(e, "--global-batch must be at least 1 sequence");
    pb->global_batch = global_batch;
    return 0;
}

/* Where the model file writes `key`, for messages (the map itself when the key is defaulted). */
static const ir_doc *model_key(const search_problem *pb, const char *key)
{
    const ir_doc *v = ir_doc_get(pb->model_doc, key);
    return v ? v : pb->model_doc;
}

/* "1, 2, 4 or 8": the values of 1..max for which ok() holds. */
static const char *list_ok(const search_problem *pb, int max, bool (*ok)(const search_problem *, int), char *buf,
                           size_t n)
{
    int at = 0, cnt = 0, last = 0;
    buf[0] = 0;
    for (int v = 1; v <= max; v++)
        if (ok(pb, v)) cnt++;
    for (int v = 1; v <= max && at < (int)n - 16; v++) {
        if (!ok(pb, v)) continue;
        last++;
        at += snprintf(buf + at, n - (size_t)at, "%s%d", last == 1 ? "" : last == cnt ? " or " : ", ", v);
    }
    return buf;
}

/* TP within a node, on a shape the model accepts (ir_shape_validate holds the model's rules). */
static bool tp_ok(const search_problem *pb, int tp)
{
    int64_t gpn = pb->gpus < pb->cluster.gpus_per_node ? pb->gpus : pb->cluster.gpus_per_node;
    if (gpn % tp) return false;
    ir_shape s = ir_shape_default();
    s.tp = tp;
    base_error e;
    base_error_clear(&e);
    return ir_shape_validate(&pb->model, &s, &e) == 0;
}

static bool pp_ok(const search_problem *pb, int pp) { return pb->gpus % pp == 0 && pp <= pb->model.layers; }

static bool ep_ok(const search_problem *pb, int ep)
{
    return pb->model.experts > 0 && pb->model.experts % ep == 0 && pb->gpus % ep == 0;
}

static bool mbs_ok(const search_problem *pb, int mbs) { return pb->global_batch % mbs == 0; }

static int bad(const search_values *sv, const ir_doc *at, base_error *e, const char *fmt, const char *what,
               int value, const char *use)
{
    char msg[512];
    snprintf(msg, sizeof msg, fmt, what, value);
    if (sv->line > 0) return base_error_at(e, sv->file, sv->line, sv->col, "%s; use %s", msg, use);
    /* a flag has no position: point at what it contradicts */
    return base_error_at(e, at->file, at->line, at->col, "%s %d (%s): %s; use %s %s", sv->file, value,
                         "command line", msg, sv->file, use);
}

int search_space_check(const search_space *s, const search_problem *pb, base_error *e)
{
    const ir_model *m = &pb->model;
    char use[256];
    const search_values *sv = &s->key[SEARCH_KEY_TP];
    for (int i = 0; i < sv->n; i++) {
        int tp = sv->v[i];
        if (tp_ok(pb, tp)) continue;
        int64_t gpn = pb->gpus < pb->cluster.gpus_per_node ? pb->gpus : pb->cluster.gpus_per_node;
        const ir_doc *at = model_key(pb, gpn % tp ? "name" : "heads");
        char msg[300];
        if (gpn % tp)
            snprintf(msg, sizeof msg, "tensor parallelism stays inside a node of %lld GPUs, so %%s %%d is impossible",
                     (long long)gpn);
        else
            snprintf(msg, sizeof msg, "%%s %%d does not divide model '%s': %lld heads, %lld kv heads, ffn %lld, vocab %lld",
                     m->name, (long long)m->heads, (long long)m->kv_heads, (long long)m->ffn, (long long)m->vocab);
        return bad(sv, at, e, msg, "tp", tp, list_ok(pb, (int)gpn, tp_ok, use, sizeof use));
    }
    sv = &s->key[SEARCH_KEY_PP];
    for (int i = 0; i < sv->n; i++)
        if (!pp_ok(pb, sv->v[i])) {
            char msg[160];
            snprintf(msg, sizeof msg, "%%s %%d must divide the %lld GPUs and not exceed the %lld layers",
                     (long long)pb->gpus, (long long)m->layers);
            return bad(sv, model_key(pb, "layers"), e, msg, "pp", sv->v[i],
                       list_ok(pb, (int)(pb->gpus < m->layers ? pb->gpus : m->layers), pp_ok, use, sizeof use));
        }
    sv = &s->key[SEARCH_KEY_EP];
    for (int i = 0; i < sv->n; i++)
        if (!ep_ok(pb, sv->v[i])) {
            if (m->experts == 0)
                return bad(sv, model_key(pb, "name"), e, "%s %d needs an MoE model, and this one has no experts",
                           "ep", sv->v[i], "no ep");
            return bad(sv, model_key(pb, "experts"), e, "%s %d must divide the experts and the GPUs", "ep", sv->v[i],
                       list_ok(pb, (int)m->experts, ep_ok, use, sizeof use));
        }
    sv = &s->key[SEARCH_KEY_MBS];
    for (int i = 0; i < sv->n; i++)
        if (!mbs_ok(pb, sv->v[i])) {
            char msg[128];
            snprintf(msg, sizeof msg, "%%s %%d does not divide the global batch of %lld sequences",
                     (long long)pb->global_batch);
            int max = pb->global_batch < 64 ? (int)pb->global_batch : 64;
            return bad(sv, pb->model_doc, e, msg, "mbs", sv->v[i], list_ok(pb, max, mbs_ok, use, sizeof use));
        }
    sv = &s->key[SEARCH_KEY_V];
    for (int i = 0; i < sv->n; i++)
        if (sv->v[i] < 2 || 2 * sv->v[i] > m->layers)
            return bad(sv, model_key(pb, "layers"), e,
                       "%s %d: interleaving needs at least 2 stages per rank and a layer per stage", "v", sv->v[i],
                       "2 or more, at most half the layers");
    return 0;
}
