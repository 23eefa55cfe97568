/* program.c — loading a training program (contract in program.h, format in docs/programs.md):
 * the file itself — its top-level keys, the model and cluster it refers to, a bare Piper array
 * and what it implies — and the reads every part of the loader shares (program_internal.h).
 *
 * A program is read in one pass over its document: model and cluster first (the directives'
 * device lists are checked against the cluster, their filters against the model and the
 * annotations), then batch, dtypes, optimizer, annotations (program_sections.c), and the
 * directives in order (program_directives.c). Only what the file alone can tell is checked
 * here; whatever needs the DAG (a filter that matches nothing, cycles, divisibility by group
 * sizes) is the compiler passes' job.
 *
 * Piper compatibility: a bare array of directives loads with the model and cluster given by the
 * caller; keys Piper's schema defines but piper does not use are accepted with a warning (one list,
 * ir_piper_ignored_keys); any other unknown key is an error with a "did you mean". */
#include "program_internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- suggestions */

bool ir_load_ci_eq(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
    return *a == *b;
}

/* Case-insensitive edit distance (insert, delete, substitute, swap of neighbours): typos of the
 * kind people make in keys ("filtr", "devcies", "num_microbatch"). */
static int edit_distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > 63 || m > 63) return 99;
    int d[64][64];
    for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            int best = d[i - 1][j - 1] + (ca != cb);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                cb == tolower((unsigned char)a[i - 2]) && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m];
}

/* The closest candidate, if close enough to be the likely intent; NULL otherwise. A prefix of a
 * longer key ("num_micro" for "num_microbatches") counts as close too. */
const char *ir_suggest(const char *word, const char *const *cands)
{
    const char *best = NULL;
    int bestd = 99;
    size_t wl = strlen(word);
    for (; *cands; cands++) {
        int dist = edit_distance(word, *cands);
        if (wl >= 4 && wl < strlen(*cands)) {
            size_t i = 0;
            while (i < wl && tolower((unsigned char)word[i]) == tolower((unsigned char)(*cands)[i])) i++;
            if (i == wl) dist = 1;
        }
        if (dist < bestd) {
            bestd = dist;
            best = *cands;
        }
    }
    int limit = wl <= 3 ? 1 : wl <= 8 ? 2 : 3;
    return bestd <= limit ? best : NULL;
}

static bool in_list(const char *s, const char *const *list)
{
    if (!list) return false;
    for (; *list; list++)
        if (!strcmp(s, *list)) return true;
    return false;
}

char *ir_join_names(char *buf, size_t n, const char *const *list)
{
    size_t off = 0;
    buf[0] = 0;
    for (int i = 0; list[i] && off + 1 < n; i++) {
        int w = snprintf(buf + off, n - off, "%s%s", i ? ", " : "", list[i]);
        if (w < 0) break;
        off += (size_t)w;
    }
    return buf;
}

int ir_load_lookup_ci(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (names[i] && ir_load_ci_eq(s, names[i])) return i;
    return -1;
}

/* ---------------------------------------------------------------- typed reads */

int ir_load_check_keys(ir_load_ctx *c, const ir_doc *map, const char *takes,
                       const char *const *known, const char *const *ignored, bool open)
{
    for (int i = 0; i < map->n; i++) {
        const ir_doc *k = map->keys[i];
        const char *key = k->str ? k->str : "";
        if (in_list(key, known)) continue;
        if (in_list(key, ignored)) {
            ir_doc_warn(k, c->e, "%s: key '%s' is part of Piper's schema but piper ignores it",
                        c->what, key);
            continue;
        }
        if (open) continue;
        char list[512];
        ir_join_names(list, sizeof list, known);
        const char *s = ir_suggest(key, known);
        if (s)
            return ir_doc_error(k, c->e, "%s: unknown key '%s'; did you mean '%s'? (%s takes %s)",
                                c->what, key, s, takes, list);
        return ir_doc_error(k, c->e, "%s: unknown key '%s'; remove it (%s takes %s)", c->what, key,
                            takes, list);
    }
    return 0;
}

const char *ir_load_resolve_path(base_arena *a, const char *dir, const char *path)
{
    if (!dir || !*dir || path[0] == '/') return base_arena_strdup(a, path);
    return base_arena_printf(a, "%s/%s", dir, path);
}

static const char *dir_of(base_arena *a, const char *path)
{
    const char *slash = path ? strrchr(path, '/') : NULL;
    if (!slash) return NULL;
    if (slash == path) return "/";
    return base_arena_strndup(a, path, (size_t)(slash - path));
}

static const char *stem_of(base_arena *a, const char *path)
{
    if (!path) return NULL;
    const char *s = strrchr(path, '/');
    s = s ? s + 1 : path;
    const char *dot = strrchr(s, '.');
    return base_arena_strndup(a, s, dot && dot != s ? (size_t)(dot - s) : strlen(s));
}

int ir_load_get_string(ir_load_ctx *c, const ir_doc *d, const char *key, const char **out)
{
    if (d->kind != IR_DOC_SCALAR || d->null)
        return ir_doc_error(d, c->e, "%s: '%s' must be a string", c->what, key);
    return ir_doc_string(d, key, out, c->e);
}

int ir_load_get_int_range(ir_load_ctx *c, const ir_doc *d, const char *key, int64_t lo,
                          int64_t hi, const char *hint, int64_t *out)
{
    if (ir_doc_int(d, key, out, c->e)) return -1;
    if (*out < lo || *out > hi)
        return ir_doc_error(d, c->e, "%s: %s = %lld is out of range; %s", c->what, key,
                            (long long)*out, hint);
    return 0;
}

/* Errors from the doc layer's typed reads ("expected an integer for 'zero'") do not know which
 * directive or section they are in: put c->what after their "file:line:col: " location. */
void ir_load_add_context(ir_load_ctx *c, const char *file)
{
    base_error *e = c->e;
    if (!e->set) return;
    size_t skip = 0, fl = file ? strlen(file) : 0;
    if (fl && !strncmp(e->msg, file, fl)) {
        const char *q = e->msg + fl;
        int line, col, n = 0;
        if (sscanf(q, ":%d:%d: %n", &line, &col, &n) == 2 && n > 0) skip = fl + (size_t)n;
    }
    size_t wl = strlen(c->what);
    if (!strncmp(e->msg + skip, c->what, wl)) return;
    char old[BASE_ERROR_MAX];
    memcpy(old, e->msg, sizeof old);
    snprintf(e->msg, sizeof e->msg, "%.*s%s: %s", (int)skip, old, c->what, old + skip);
}

/* ---------------------------------------------------------------- the file */

/* model: / cluster: — a path (relative to the program) or an inline map. */
static const ir_doc *load_ref(ir_load_ctx *c, const ir_doc *v, const char *key)
{
    if (v->kind == IR_DOC_MAP) return v;
    if (v->kind != IR_DOC_SCALAR || v->null) {
        ir_doc_error(v, c->e, "'%s' must be a file path or a map", key);
        return NULL;
    }
    if (!v->str[0]) {
        ir_doc_error(v, c->e, "'%s' is an empty path; give a file path or a map", key);
        return NULL;
    }
    ir_doc *d;
    if (ir_doc_load(c->a, ir_load_resolve_path(c->a, c->dir, v->str), &d, c->e)) {
        /* point at the reference too: the file's own message may not say who wanted it */
        base_error_prefix(c->e, "%s:%d:%d: %s '%s': ", v->file ? v->file : "", v->line, v->col,
                          key, v->str);
        return NULL;
    }
    return d;
}

/* The largest num_microbatches of any split and the largest replicate group of a bare array. */
static void array_batch_factors(const ir_program *p, int64_t *nmb, int64_t *dp)
{
    *nmb = 1, *dp = 1;
    /* a mesh with a tp axis: a replicate naming a whole stage group spans group / tp replicas */
    int64_t mesh = 0, tp = 1;
    for (int i = 0; i < p->ndirectives; i++) {
        const ir_directive *d = &p->directives[i];
        if (d->op != IR_DIR_MESH) continue;
        mesh = 1;
        for (int k = 0; k < d->naxes; k++) {
            mesh *= d->axis_sizes[k];
            if (ir_load_ci_eq(d->axis_names[k], "tp")) tp = d->axis_sizes[k];
        }
    }
    for (int i = 0; i < p->ndirectives; i++) {
        const ir_directive *d = &p->directives[i];
        if (d->op == IR_DIR_SPLIT && d->num_microbatches > *nmb) *nmb = d->num_microbatches;
        int64_t n = d->ndevices;
        if (d->op == IR_DIR_REPLICATE && mesh && n == mesh && tp > 1) n /= tp;
        if (d->op == IR_DIR_REPLICATE && n > *dp) *dp = n;
    }
}

/* For a bare array: what the directives say about the batch and the annotations. */
static void infer_from_directives(ir_program *p)
{
    int64_t nmb, dp, pp_max = -1;
    bool pp = false, mirror = false;
    array_batch_factors(p, &nmb, &dp);
    /* DualPipe's orders (mirror: true) also name the mirrored stages p..2p-1, which the
     * program does not annotate: its stages are those the other directives name */
    for (int i = 0; i < p->ndirectives; i++) mirror |= p->directives[i].op == IR_DIR_ORDER && p->directives[i].mirror;
    for (int i = 0; i < p->ndirectives; i++) {
        const ir_directive *d = &p->directives[i];
        int nf = ir_directive_takes(d->op, "filter");
        for (int g = -1; g < d->ngroups; g++) {
            const ir_filter *fs = g < 0 ? &d->filter : d->groups[g];
            int n = g < 0 ? nf : d->group_nfilters[g];
            for (int k = 0; k < n; k++)
                for (int j = 0; j < fs[k].n; j++) {
                    const ir_tag_match *m = &fs[k].m[j];
                    if (m->tag == IR_TAG_PP) {
                        pp = true;
                        /* clamped: the stage-count check below reports it, without overflow */
                        if (!m->any && m->value > pp_max && !(mirror && d->op == IR_DIR_ORDER))
                            pp_max = m->value < INT32_MAX ? m->value : INT32_MAX;
                    }
                    if (m->tag == IR_TAG_EP) p->ann.ep = true;
                    if (m->tag == IR_TAG_TP) p->ann.tp = true;
                }
        }
    }
    p->micro_batch = 1;
    p->global_batch = nmb * dp;
    if (pp) p->ann.pp_stages = pp_max + 1 > 1 ? pp_max + 1 : 1;
}

static void set_defaults(ir_program *p)
{
    p->param_dtype = p->act_dtype = p->grad_dtype = PLAN_BF16;
    p->opt_dtype = PLAN_FP32;
    p->optimizer = IR_OPT_ADAMW;
    p->grad_clip = 0;
    p->lr = 1e-3;
    p->weight_decay = 0;
    p->beta1 = 0.9;
    p->beta2 = 0.95;
    p->eps = 1e-8;
    p->momentum = 0;
}

static int load_model_cluster(ir_load_ctx *c, const ir_doc *d, const ir_model *model,
                              const ir_cluster *cluster)
{
    ir_program *p = c->p;
    snprintf(c->what, sizeof c->what, "program");
    if (model) {
        p->model = *model;
    } else {
        const ir_doc *v = ir_doc_get(d, "model");
        if (!v)
            return ir_doc_error(d, c->e,
                                "the program has no 'model'; add model: <path or map> (or pass "
                                "--model)");
        const ir_doc *md = load_ref(c, v, "model");
        if (!md || ir_model_from_doc(md, c->a, &p->model, c->e)) return -1;
    }
    if (cluster) {
        p->cluster = *cluster;
    } else {
        const ir_doc *v = ir_doc_get(d, "cluster");
        if (!v)
            return ir_doc_error(d, c->e,
                                "the program has no 'cluster'; add cluster: <path or map> (or "
                                "pass --cluster)");
        const ir_doc *cd = load_ref(c, v, "cluster");
        if (!cd || ir_cluster_from_doc(cd, c->a, &p->cluster, c->e)) return -1;
    }
    return 0;
}

int ir_program_from_doc(const ir_doc *d, const char *dir, const ir_model *model,
                        const ir_cluster *cluster, base_arena *a, ir_program *p, base_error *e)
{
    memset(p, 0, sizeof *p);
    set_defaults(p);
    ir_load_ctx c = {.a = a, .e = e, .p = p, .dir = dir};
    snprintf(c.what, sizeof c.what, "program");
    if (!d) return base_errorf(e, "no program given");
    p->file = d->file;
    p->name = stem_of(a, d->file);

    if (d->kind == IR_DOC_SEQ) {
        /* Piper's schema: the directives alone. */
        p->from_piper_array = true;
        if (!model || !cluster)
            return ir_doc_error(d, e,
                                "a bare directive array (Piper's schema) names no %s; pass "
                                "--model and --cluster, or write a program map with model, "
                                "cluster and directives",
                                !model && !cluster ? "model or cluster"
                                : !model           ? "model"
                                                   : "cluster");
        if (load_model_cluster(&c, d, model, cluster)) return -1;
        if (ir_load_directives(&c, d)) return -1;
        infer_from_directives(p);
        if (p->ann.pp_stages > p->model.layers)
            return ir_doc_error(d, e,
                                "the directives name PP stages up to %lld but model '%s' has %lld "
                                "layers; a stage holds at least one layer",
                                (long long)p->ann.pp_stages - 1,
                                p->model.name ? p->model.name : "?", (long long)p->model.layers);
        if (p->ann.ep && p->model.experts == 0)
            return ir_doc_error(d, e,
                                "the directives name EP but model '%s' has no experts; use an MoE "
                                "model",
                                p->model.name ? p->model.name : "?");
        return ir_load_check_filters(&c);
    }
    if (d->kind != IR_DOC_MAP)
        return ir_doc_error(d, e,
                            "a program must be a map (model, cluster, batch, directives, ...) or a "
                            "bare list of directives");
    static const char *const keys[] = {"name",      "description", "model", "cluster",
                                       "batch",     "dtype",       "grad_dtype", "optimizer",
                                       "annotations", "directives", NULL};
    if (ir_load_check_keys(&c, d, "a program", keys, NULL, false)) return -1;
    const ir_doc *v;
    if ((v = ir_doc_get(d, "name")) && ir_load_get_string(&c, v, "name", &p->name)) return -1;
    if (load_model_cluster(&c, d, model, cluster)) return -1;
    if (!(v = ir_doc_get(d, "batch")))
        return ir_doc_error(d, e,
                            "the program has no 'batch'; add batch: {global: G, micro: b} "
                            "(sequences per step and per micro-batch)");
    if (ir_load_batch(&c, v) ||
        ((v = ir_doc_get(d, "dtype")) && ir_load_dtype(&c, v)) ||
        ((v = ir_doc_get(d, "grad_dtype")) && ir_load_grad_dtype(&c, v)) ||
        ((v = ir_doc_get(d, "optimizer")) && ir_load_optimizer(&c, v)) ||
        ((v = ir_doc_get(d, "annotations")) && ir_load_annotations(&c, v))) {
        ir_load_add_context(&c, d->file);
        return -1;
    }
    if ((v = ir_doc_get(d, "directives")) && ir_load_directives(&c, v)) return -1;
    return ir_load_check_filters(&c);
}

int ir_program_set_batch(ir_program *p, int64_t micro, int64_t global, base_error *e)
{
    if (micro < 0 || global < 0)
        return base_errorf(e, "the batch sizes must be positive (micro-batch %lld, global %lld)",
                           (long long)micro, (long long)global);
    if (micro > 0) p->micro_batch = micro;
    if (global > 0) {
        p->global_batch = global;
    } else if (p->from_piper_array) {
        int64_t nmb, dp;
        array_batch_factors(p, &nmb, &dp);
        p->global_batch = p->micro_batch * nmb * dp;
    }
    if (p->global_batch % p->micro_batch)
        return base_errorf(e,
                           "global batch %lld is not a multiple of the micro-batch %lld; use a "
                           "global batch of %lld or %lld",
                           (long long)p->global_batch, (long long)p->micro_batch,
                           (long long)(p->global_batch / p->micro_batch * p->micro_batch),
                           (long long)((p->global_batch / p->micro_batch + 1) * p->micro_batch));
    return 0;
}

int ir_program_load(const char *path, const char *model_path, const char *cluster_path,
                    base_arena *a, ir_program *p, base_error *e)
{
    ir_doc *d, *md, *cd;
    ir_model m;
    ir_cluster cl;
    memset(p, 0, sizeof *p);
    if (model_path && (ir_doc_load(a, model_path, &md, e) || ir_model_from_doc(md, a, &m, e)))
        return -1;
    if (cluster_path && (ir_doc_load(a, cluster_path, &cd, e) || ir_cluster_from_doc(cd, a, &cl, e)))
        return -1;
    if (ir_doc_load(a, path, &d, e)) return -1;
    return ir_program_from_doc(d, dir_of(a, path), model_path ? &m : NULL,
                               cluster_path ? &cl : NULL, a, p, e);
}
