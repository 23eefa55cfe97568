/* program.c — loading a training program (contract in program.h, format in docs/programs.md).
 *
 * A program is read in one pass over its document: model and cluster first (the directives'
 * device lists are checked against the cluster, their filters against the model and the
 * annotations), then batch, dtypes, optimizer, annotations, and the directives in order. Only what
 * the file alone can tell is checked here; whatever needs the DAG (a filter that matches nothing,
 * cycles, divisibility by group sizes) is the compiler passes' job.
 *
 * Piper compatibility: a bare array of directives loads with the model and cluster given by the
 * caller; keys Piper's schema defines but piper does not use are accepted with a warning (one list,
 * ir_piper_ignored_keys); any other unknown key is an error with a "did you mean". */
#include "program.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- name tables */

static const char *const directive_names[IR_NDIR] = {
    [IR_DIR_PLACE] = "place",         [IR_DIR_REPLICATE] = "replicate",
    [IR_DIR_SHARD] = "shard",         [IR_DIR_SHARD_TENSOR] = "shard_tensor",
    [IR_DIR_SPLIT] = "split",         [IR_DIR_ORDER] = "order",
    [IR_DIR_RECOMPUTE] = "recompute", [IR_DIR_SCHEDULE] = "schedule",
};

static const char *const tag_names[IR_NTAGS] = {
    [IR_TAG_PP] = "PP",       [IR_TAG_EP] = "EP",         [IR_TAG_TP] = "TP",
    [IR_TAG_MB] = "MB",       [IR_TAG_PASS] = "PASS",     [IR_TAG_LAYER] = "LAYER",
    [IR_TAG_REGION] = "REGION", [IR_TAG_CHUNK] = "CHUNK",
};

static const char *const region_names[IR_NREGION_KINDS] = {
    [IR_REGION_EMBED] = "embed",           [IR_REGION_ATTN] = "attn",
    [IR_REGION_MLP] = "mlp",               [IR_REGION_MOE_GATE] = "moe_gate",
    [IR_REGION_MOE_EXPERTS] = "moe_experts", [IR_REGION_MOE_COMBINE] = "moe_combine",
    [IR_REGION_HEAD] = "head",
};

static const char *const pass_names[PLAN_NPASS] = {
    [PLAN_PASS_F] = "F",   [PLAN_PASS_B] = "B",     [PLAN_PASS_BI] = "BI", [PLAN_PASS_BW] = "BW",
    [PLAN_PASS_R] = "R",   [PLAN_PASS_UPD] = "UPD", [PLAN_PASS_AUX] = "AUX",
};

/* Our reading of Piper's directive schema: keys it defines for bookkeeping or for its own
 * runtime (free-text comments and names, a scheduling priority hint, its async-launch and debug
 * switches) that have no meaning in piper. Documented in docs/programs.md. */
const char *const ir_piper_ignored_keys[] = {"comment", "description", "name", "priority",
                                             "async", "debug", NULL};

const char *ir_directive_name(ir_directive_op op)
{
    return (unsigned)op < IR_NDIR ? directive_names[op] : "?";
}

const char *ir_tag_name(ir_tag t) { return (unsigned)t < IR_NTAGS ? tag_names[t] : "?"; }

const char *ir_region_kind_name(ir_region_kind k)
{
    return (unsigned)k < IR_NREGION_KINDS ? region_names[k] : "?";
}

const char *ir_pass_tag_name(plan_pass p) { return (unsigned)p < PLAN_NPASS ? pass_names[p] : "?"; }

/* ---------------------------------------------------------------- suggestions */

static int ci_eq(const char *a, const char *b)
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

/* ---------------------------------------------------------------- loading context */

typedef struct ctx {
    base_arena *a;
    base_error *e;
    ir_program *p;
    const char *dir;      /* resolves relative references; NULL = the working directory */
    char what[96];        /* "directive 3 (place)", "program", "annotations": message prefix */
    bool order_mirrored;  /* checking an order of a DualPipe program (an order has mirror:
                             true): its filters may name the mirrored stages p..2p-1 */
} ctx;

/* A map's keys against the ones piper reads. Keys in `ignored` (Piper's, unused by piper) only
 * warn; with `open` any other key passes too (schedule builders read their own options). */
static int check_keys(ctx *c, const ir_doc *map, const char *takes, const char *const *known,
                      const char *const *ignored, bool open)
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

static const char *resolve_path(base_arena *a, const char *dir, const char *path)
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

static int get_string(ctx *c, const ir_doc *d, const char *key, const char **out)
{
    if (d->kind != IR_DOC_SCALAR || d->null)
        return ir_doc_error(d, c->e, "%s: '%s' must be a string", c->what, key);
    return ir_doc_string(d, key, out, c->e);
}

static int get_int_range(ctx *c, const ir_doc *d, const char *key, int64_t lo, int64_t hi,
                         const char *hint, int64_t *out)
{
    if (ir_doc_int(d, key, out, c->e)) return -1;
    if (*out < lo || *out > hi)
        return ir_doc_error(d, c->e, "%s: %s = %lld is out of range; %s", c->what, key,
                            (long long)*out, hint);
    return 0;
}

/* Errors from the doc layer's typed reads ("expected an integer for 'zero'") do not know which
 * directive or section they are in: put c->what after their "file:line:col: " location. */
static void add_context(ctx *c, const char *file)
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

/* ---------------------------------------------------------------- filters */

static int lookup_ci(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (names[i] && ci_eq(s, names[i])) return i;
    return -1;
}

static int parse_pass(const char *s)
{
    /* PyTorch's pipelining schedules call the split backward I (input) and W (weight). */
    if (ci_eq(s, "I")) return PLAN_PASS_BI;
    if (ci_eq(s, "W")) return PLAN_PASS_BW;
    int p = lookup_ci(s, pass_names, PLAN_NPASS);
    return p == PLAN_PASS_AUX ? -1 : p;
}

static int parse_filter(ctx *c, const ir_doc *d, ir_filter *f)
{
    memset(f, 0, sizeof *f);
    f->line = d->line;
    f->col = d->col;
    if (d->kind == IR_DOC_SCALAR && d->null) return 0; /* `filter:` with nothing: match all */
    if (d->kind != IR_DOC_MAP)
        return ir_doc_error(d, c->e,
                            "%s: a filter must be a map of tag: value, such as {PP: 0, PASS: F}; "
                            "write {} to match everything",
                            c->what);
    f->n = d->n;
    f->m = base_arena_calloc(c->a, (size_t)(d->n ? d->n : 1), sizeof *f->m);
    static const char *const tag_list[] = {"PP",    "EP",     "TP",    "MB", "PASS",
                                           "LAYER", "REGION", "CHUNK", NULL};
    static const char *const pass_list[] = {"F", "B", "BI", "BW", "R", "UPD", "I", "W", NULL};
    static const char *const region_list[] = {"embed",       "attn",        "mlp",  "moe_gate",
                                              "moe_experts", "moe_combine", "head", NULL};
    for (int i = 0; i < d->n; i++) {
        const ir_doc *k = d->keys[i], *v = d->items[i];
        int t = lookup_ci(k->str, tag_names, IR_NTAGS);
        if (t < 0) {
            const char *s = ir_suggest(k->str, tag_list);
            if (s)
                return ir_doc_error(k, c->e,
                                    "%s: unknown filter tag '%s'; did you mean '%s'? (tags: PP, "
                                    "EP, TP, MB, PASS, LAYER, REGION, CHUNK)",
                                    c->what, k->str, s);
            return ir_doc_error(k, c->e,
                                "%s: unknown filter tag '%s'; use PP, EP, TP, MB, PASS, LAYER, "
                                "REGION or CHUNK",
                                c->what, k->str);
        }
        for (int j = 0; j < i; j++)
            if (f->m[j].tag == (ir_tag)t)
                return ir_doc_error(k, c->e, "%s: filter names tag %s twice; keep one", c->what,
                                    tag_names[t]);
        ir_tag_match *m = &f->m[i];
        m->tag = (ir_tag)t;
        if (v->kind != IR_DOC_SCALAR || v->null)
            return ir_doc_error(v, c->e, "%s: the value of %s must be %s or \"*\"", c->what,
                                tag_names[t],
                                t == IR_TAG_PASS     ? "a pass (F, B, BI, BW, R, UPD)"
                                : t == IR_TAG_REGION ? "a region kind"
                                                     : "an integer");
        if (!strcmp(v->str, "*")) {
            m->any = true;
            continue;
        }
        if (t == IR_TAG_PASS) {
            int p = parse_pass(v->str);
            if (p < 0) {
                const char *s = ir_suggest(v->str, pass_list);
                return ir_doc_error(v, c->e,
                                    "%s: bad PASS value '%s'%s%s%s; use F, B, BI, BW, R, UPD or "
                                    "\"*\" (I and W mean BI and BW)",
                                    c->what, v->str, s ? " (did you mean '" : "", s ? s : "",
                                    s ? "'?)" : "");
            }
            m->value = p;
        } else if (t == IR_TAG_REGION) {
            int r = lookup_ci(v->str, region_names, IR_NREGION_KINDS);
            if (r < 0) {
                const char *s = ir_suggest(v->str, region_list);
                return ir_doc_error(v, c->e,
                                    "%s: unknown REGION '%s'%s%s%s; use embed, attn, mlp, "
                                    "moe_gate, moe_experts, moe_combine, head or \"*\"",
                                    c->what, v->str, s ? " (did you mean '" : "", s ? s : "",
                                    s ? "'?)" : "");
            }
            m->value = r;
        } else {
            if (ir_doc_int(v, tag_names[t], &m->value, c->e)) return -1;
            if (m->value < 0)
                return ir_doc_error(v, c->e, "%s: %s = %lld; tag values count from 0", c->what,
                                    tag_names[t], (long long)m->value);
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- devices */

typedef struct devlist {
    int32_t *v;
    int n;
    size_t cap;
} devlist;

static int device_out_of_range(ctx *c, const ir_doc *at, long long dev)
{
    long long nd = (long long)ir_cluster_devices(&c->p->cluster);
    return ir_doc_error(at, c->e,
                        "%s: device %lld does not exist: cluster '%s' has %lld devices (0-%lld); "
                        "use devices in that range or a bigger cluster",
                        c->what, dev, c->p->cluster.name ? c->p->cluster.name : "?", nd, nd - 1);
}

static int devlist_add_range(ctx *c, const ir_doc *at, long long lo, long long hi, devlist *l)
{
    int64_t nd = ir_cluster_devices(&c->p->cluster);
    if (lo < 0) return ir_doc_error(at, c->e, "%s: device %lld; devices count from 0", c->what, lo);
    if (hi < lo)
        return ir_doc_error(at, c->e, "%s: device range %lld-%lld is backwards; write %lld-%lld",
                            c->what, lo, hi, hi, lo);
    if (lo >= nd) return device_out_of_range(c, at, lo);
    if (hi >= nd) return device_out_of_range(c, at, hi);
    for (long long x = lo; x <= hi; x++) {
        l->v = base_arena_grow(c->a, l->v, &l->cap, (size_t)l->n + 1, sizeof *l->v);
        l->v[l->n++] = (int32_t)x;
    }
    return 0;
}

/* "5", "0-7", "0-3, 8-11" */
static int devlist_add_spec(ctx *c, const ir_doc *at, const char *s, devlist *l)
{
    const char *p = s;
    for (;;) {
        while (*p == ' ') p++;
        if (*p == '-' && isdigit((unsigned char)p[1]))
            return ir_doc_error(at, c->e, "%s: device %lld does not exist; devices count from 0",
                                c->what, strtoll(p, NULL, 10));
        if (!isdigit((unsigned char)*p)) break;
        errno = 0;
        char *end;
        long long lo = strtoll(p, &end, 10), hi = lo;
        p = end;
        while (*p == ' ') p++;
        if (*p == '-') {
            p++;
            while (*p == ' ') p++;
            if (!isdigit((unsigned char)*p)) break;
            hi = strtoll(p, &end, 10);
            p = end;
        }
        if (errno) break;
        if (devlist_add_range(c, at, lo, hi, l)) return -1;
        while (*p == ' ') p++;
        if (*p == 0) return 0;
        if (*p != ',') break;
        p++;
    }
    return ir_doc_error(at, c->e,
                        "%s: cannot read devices '%s'; write a list [0, 1, 2], a range \"0-7\", or "
                        "ranges \"0-3,8-11\"",
                        c->what, s);
}

static int cmp_i32(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

static int parse_devices(ctx *c, const ir_doc *d, ir_directive *dir)
{
    devlist l = {0};
    if (d->kind == IR_DOC_SCALAR && !d->null) {
        if (devlist_add_spec(c, d, d->str, &l)) return -1;
    } else if (d->kind == IR_DOC_SEQ) {
        for (int i = 0; i < d->n; i++) {
            const ir_doc *it = d->items[i];
            if (it->kind != IR_DOC_SCALAR || it->null)
                return ir_doc_error(it, c->e,
                                    "%s: each device must be an integer or a range \"a-b\"",
                                    c->what);
            if (devlist_add_spec(c, it, it->str, &l)) return -1;
        }
    } else {
        return ir_doc_error(d, c->e,
                            "%s: devices must be a list [0, 1, 2] or a range \"0-7\"", c->what);
    }
    if (l.n == 0) return ir_doc_error(d, c->e, "%s: the device list is empty; name at least one", c->what);
    int32_t *sorted = base_arena_calloc(c->a, (size_t)l.n, sizeof *sorted);
    memcpy(sorted, l.v, (size_t)l.n * sizeof *sorted);
    qsort(sorted, (size_t)l.n, sizeof *sorted, cmp_i32);
    for (int i = 1; i < l.n; i++)
        if (sorted[i] == sorted[i - 1])
            return ir_doc_error(d, c->e, "%s: device %d is listed twice; list each device once",
                                c->what, sorted[i]);
    dir->devices = l.v;
    dir->ndevices = l.n;
    return 0;
}

/* ---------------------------------------------------------------- directives */

static const char *const place_keys[] = {"op", "filter", "devices", "stream", NULL};
static const char *const replicate_keys[] = {"op",           "filter",        "devices",
                                             "zero",         "bucket_size",   "reduce_stream",
                                             "gather_stream", "shard_grads",  "shard_params",
                                             NULL};
static const char *const shard_keys[] = {"op", "filter", "devices", "stream", NULL};
static const char *const shard_tensor_keys[] = {"op",     "filter",            "devices",
                                                "stream", "sequence_parallel", NULL};
static const char *const split_keys[] = {"op", "filter", "dim", "dim_name", "num_microbatches",
                                         NULL};
static const char *const order_keys[] = {"op", "filters", "mirror", NULL};
static const char *const recompute_keys[] = {"op", "filter", "mode", NULL};
static const char *const schedule_keys[] = {"op", "name", "file", NULL};

static const char *const *const op_keys[IR_NDIR] = {
    [IR_DIR_PLACE] = place_keys,         [IR_DIR_REPLICATE] = replicate_keys,
    [IR_DIR_SHARD] = shard_keys,         [IR_DIR_SHARD_TENSOR] = shard_tensor_keys,
    [IR_DIR_SPLIT] = split_keys,         [IR_DIR_ORDER] = order_keys,
    [IR_DIR_RECOMPUTE] = recompute_keys, [IR_DIR_SCHEDULE] = schedule_keys,
};

static int parse_common(ctx *c, const ir_doc *d, ir_directive *dir, bool need_devices)
{
    const ir_doc *v = ir_doc_get(d, "filter");
    if (v) {
        if (parse_filter(c, v, &dir->filter)) return -1;
    } else {
        dir->filter.line = dir->line; /* no filter: every node, reported at the directive */
        dir->filter.col = dir->col;
    }
    if ((v = ir_doc_get(d, "devices"))) {
        if (parse_devices(c, v, dir)) return -1;
    } else if (need_devices) {
        return ir_doc_error(d, c->e,
                            "%s has no 'devices'; say which devices run it, e.g. devices: [0, 1] "
                            "or devices: \"0-7\"",
                            c->what);
    }
    if ((v = ir_doc_get(d, "stream")) && get_string(c, v, "stream", &dir->stream)) return -1;
    return 0;
}

static int get_flag(ctx *c, const ir_doc *d, const char *key, int *out)
{
    const ir_doc *v = ir_doc_get(d, key);
    *out = -1; /* not given */
    if (!v) return 0;
    bool b;
    if (ir_doc_bool(v, key, &b, c->e)) return -1;
    *out = b;
    return 0;
}

/* ZeRO stage from `zero` and Piper's flags. The flags describe what is sharded: shard_grads is
 * ZeRO-2 (ZeRO-3 shards gradients too), shard_params ZeRO-3; a flag that contradicts the stage
 * (or the other flag) is an error rather than a silent winner. */
static int parse_replicate(ctx *c, const ir_doc *d, ir_directive *dir)
{
    if (parse_common(c, d, dir, true)) return -1;
    const ir_doc *zv = ir_doc_get(d, "zero"), *v;
    int grads, params;
    if (get_flag(c, d, "shard_grads", &grads) || get_flag(c, d, "shard_params", &params)) return -1;
    if (zv) {
        int64_t z;
        if (ir_doc_int(zv, "zero", &z, c->e)) return -1;
        if (z < 0 || z > 3)
            return ir_doc_error(zv, c->e,
                                "%s: zero = %lld is out of range; ZeRO stages are 0 (all-reduce), "
                                "1, 2 and 3",
                                c->what, (long long)z);
        dir->zero = (int)z;
    } else {
        dir->zero = params == 1 ? 3 : grads == 1 ? 2 : 0;
    }
    if (params == 1 && grads == 0)
        return ir_doc_error(ir_doc_get(d, "shard_grads"), c->e,
                            "%s: shard_params: true with shard_grads: false; sharding parameters "
                            "(ZeRO-3) shards gradients too: drop shard_grads",
                            c->what);
    if ((grads >= 0 && grads != (dir->zero >= 2)) || (params >= 0 && params != (dir->zero >= 3)))
        return ir_doc_error(zv ? zv : d, c->e,
                            "%s: zero = %d conflicts with shard_grads/shard_params (shard_grads "
                            "means zero 2, shard_params zero 3); give only zero, or only the flags",
                            c->what, dir->zero);
    dir->bucket_bytes = IR_DEFAULT_BUCKET_BYTES;
    if ((v = ir_doc_get(d, "bucket_size"))) {
        if (ir_doc_bytes(v, "bucket_size", &dir->bucket_bytes, c->e)) return -1;
        if (!isfinite(dir->bucket_bytes) || dir->bucket_bytes < 0)
            return ir_doc_error(v, c->e,
                                "%s: bucket_size must be zero (one bucket per region) or a size "
                                "such as 25MB",
                                c->what);
    }
    if ((v = ir_doc_get(d, "reduce_stream")) && get_string(c, v, "reduce_stream", &dir->reduce_stream))
        return -1;
    if ((v = ir_doc_get(d, "gather_stream")) && get_string(c, v, "gather_stream", &dir->gather_stream))
        return -1;
    return 0;
}

static int parse_split(ctx *c, const ir_doc *d, ir_directive *dir)
{
    if (parse_common(c, d, dir, false)) return -1;
    const ir_doc *dim = ir_doc_get(d, "dim"), *dn = ir_doc_get(d, "dim_name");
    if (dim && dn)
        return ir_doc_error(dn, c->e, "%s: give 'dim' or 'dim_name', not both (they are one key)",
                            c->what);
    if (!dim) dim = dn;
    dir->dim_name = "batch";
    if (dim) {
        if (get_string(c, dim, "dim", &dir->dim_name)) return -1;
        if (strcmp(dir->dim_name, "batch"))
            return ir_doc_error(dim, c->e,
                                "%s: cannot split along '%s'; piper splits micro-batches along "
                                "'batch'",
                                c->what, dir->dim_name);
    }
    const ir_doc *v = ir_doc_get(d, "num_microbatches");
    if (!v)
        return ir_doc_error(d, c->e,
                            "%s has no 'num_microbatches'; say how many micro-batches, e.g. "
                            "num_microbatches: 8",
                            c->what);
    return get_int_range(c, v, "num_microbatches", 1, INT32_MAX,
                         "give at least 1 micro-batch", &dir->num_microbatches);
}

/* A group is a list of filters; a lone filter map is a one-filter group. */
static int parse_order(ctx *c, const ir_doc *d, ir_directive *dir)
{
    const ir_doc *mv = ir_doc_get(d, "mirror");
    if (mv && ir_doc_bool(mv, "mirror", &dir->mirror, c->e)) return -1;
    const ir_doc *fs = ir_doc_get(d, "filters");
    if (!fs)
        return ir_doc_error(d, c->e,
                            "%s has no 'filters'; list the groups to order, e.g. filters: "
                            "[[{PASS: F, MB: 0}], [{PASS: B, MB: 0}]]",
                            c->what);
    if (fs->kind != IR_DOC_SEQ || fs->n == 0)
        return ir_doc_error(fs, c->e,
                            "%s: filters must be a non-empty list of groups, each a list of "
                            "filters (or one filter)",
                            c->what);
    dir->ngroups = fs->n;
    dir->group_nfilters = base_arena_calloc(c->a, (size_t)fs->n, sizeof *dir->group_nfilters);
    dir->groups = base_arena_calloc(c->a, (size_t)fs->n, sizeof *dir->groups);
    for (int g = 0; g < fs->n; g++) {
        const ir_doc *grp = fs->items[g];
        if (grp->kind == IR_DOC_MAP) {
            dir->group_nfilters[g] = 1;
            dir->groups[g] = base_arena_calloc(c->a, 1, sizeof **dir->groups);
            if (parse_filter(c, grp, &dir->groups[g][0])) return -1;
            continue;
        }
        if (grp->kind != IR_DOC_SEQ || grp->n == 0)
            return ir_doc_error(grp, c->e,
                                "%s: order group %d must be a non-empty list of filters, or one "
                                "filter map",
                                c->what, g);
        dir->group_nfilters[g] = grp->n;
        dir->groups[g] = base_arena_calloc(c->a, (size_t)grp->n, sizeof **dir->groups);
        for (int i = 0; i < grp->n; i++)
            if (parse_filter(c, grp->items[i], &dir->groups[g][i])) return -1;
    }
    return 0;
}

static int parse_recompute(ctx *c, const ir_doc *d, ir_directive *dir)
{
    if (parse_common(c, d, dir, false)) return -1;
    dir->recompute = IR_RECOMPUTE_FULL;
    const ir_doc *v = ir_doc_get(d, "mode");
    if (!v) return 0;
    const char *m;
    if (get_string(c, v, "mode", &m)) return -1;
    if (ci_eq(m, "full"))
        dir->recompute = IR_RECOMPUTE_FULL;
    else if (ci_eq(m, "selective"))
        dir->recompute = IR_RECOMPUTE_SELECTIVE;
    else
        return ir_doc_error(v, c->e, "%s: unknown recompute mode '%s'; use full or selective",
                            c->what, m);
    return 0;
}

/* The builder name is kept as written: which builders exist is sched/'s table to say, and the
 * schedule pass checks it (and that there is a name or a file). */
static int parse_schedule(ctx *c, const ir_doc *d, ir_directive *dir)
{
    const ir_doc *n = ir_doc_get(d, "name"), *f = ir_doc_get(d, "file");
    if (n && f)
        return ir_doc_error(f, c->e,
                            "%s: give a builder 'name' or an order 'file', not both", c->what);
    if (n) return get_string(c, n, "name", &dir->schedule);
    if (!f) return 0;
    const char *path;
    if (get_string(c, f, "file", &path)) return -1;
    dir->schedule_file = resolve_path(c->a, c->dir, path);
    FILE *fp = fopen(dir->schedule_file, "rb");
    if (!fp)
        return ir_doc_error(f, c->e,
                            "%s: schedule file '%s' (resolved to '%s') cannot be opened; relative "
                            "paths are relative to the program",
                            c->what, path, dir->schedule_file);
    fclose(fp);
    return 0;
}

static int parse_directive(ctx *c, const ir_doc *d, int index, ir_directive *dir)
{
    memset(dir, 0, sizeof *dir);
    dir->index = index;
    dir->file = d->file;
    dir->line = d->line;
    dir->col = d->col;
    dir->doc = d;
    snprintf(c->what, sizeof c->what, "directive %d", index);
    if (d->kind != IR_DOC_MAP)
        return ir_doc_error(d, c->e,
                            "%s must be a map with an 'op' key, such as {op: place, filter: {PP: 0}, "
                            "devices: [0]}",
                            c->what);
    const ir_doc *opd = ir_doc_get(d, "op");
    if (!opd)
        return ir_doc_error(d, c->e,
                            "%s has no 'op'; add op: place (or replicate, shard, shard_tensor, "
                            "split, order, recompute, schedule)",
                            c->what);
    const char *op;
    if (get_string(c, opd, "op", &op)) return -1;
    int o = lookup_ci(op, directive_names, IR_NDIR);
    if (o < 0) {
        static const char *const ops[] = {"place", "replicate", "shard",     "shard_tensor",
                                          "split", "order",     "recompute", "schedule", NULL};
        const char *s = ir_suggest(op, ops);
        return ir_doc_error(opd, c->e,
                            "%s: unknown op '%s'; %s%s%suse place, replicate, shard, shard_tensor, "
                            "split, order, recompute or schedule",
                            c->what, op, s ? "did you mean '" : "", s ? s : "", s ? "'? " : "");
    }
    dir->op = (ir_directive_op)o;
    snprintf(c->what, sizeof c->what, "directive %d (%s)", index, directive_names[o]);
    if (check_keys(c, d, directive_names[o], op_keys[o], ir_piper_ignored_keys,
                   o == IR_DIR_SCHEDULE))
        return -1;
    switch (dir->op) {
    case IR_DIR_PLACE:
    case IR_DIR_SHARD: return parse_common(c, d, dir, true);
    case IR_DIR_SHARD_TENSOR: {
        if (parse_common(c, d, dir, true)) return -1;
        const ir_doc *v = ir_doc_get(d, "sequence_parallel");
        return v ? ir_doc_bool(v, "sequence_parallel", &dir->sequence_parallel, c->e) : 0;
    }
    case IR_DIR_REPLICATE: return parse_replicate(c, d, dir);
    case IR_DIR_SPLIT: return parse_split(c, d, dir);
    case IR_DIR_ORDER: return parse_order(c, d, dir);
    case IR_DIR_RECOMPUTE: return parse_recompute(c, d, dir);
    case IR_DIR_SCHEDULE: return parse_schedule(c, d, dir);
    case IR_NDIR: break;
    }
    return 0;
}

/* What the file alone says about a filter: tags the annotations never put on any node, layers
 * and regions the model does not have. Anything subtler waits for the DAG. */
static int check_filter(ctx *c, const ir_filter *f)
{
    const ir_program *p = c->p;
    const char *file = p->file;
    int64_t stages = p->ann.npp_ranges ? p->ann.npp_ranges : p->ann.pp_stages;
    if (c->order_mirrored) stages *= 2;
    for (int i = 0; i < f->n; i++) {
        const ir_tag_match *m = &f->m[i];
        switch (m->tag) {
        case IR_TAG_PP:
            if (stages == 0)
                return base_error_at(c->e, file, f->line, f->col,
                                     "%s: the filter names PP but the program annotates no "
                                     "pipeline stages; add annotations: {pp: N}",
                                     c->what);
            if (!m->any && m->value >= stages)
                return base_error_at(c->e, file, f->line, f->col,
                                     "%s: PP %lld does not exist: the annotations make %lld "
                                     "stages (0-%lld); use a stage in that range",
                                     c->what, (long long)m->value, (long long)stages,
                                     (long long)stages - 1);
            break;
        case IR_TAG_EP:
            if (!p->ann.ep)
                return base_error_at(c->e, file, f->line, f->col,
                                     "%s: the filter names EP but the program does not annotate "
                                     "expert blocks; add annotations: {ep: true}",
                                     c->what);
            break;
        case IR_TAG_TP:
            if (!p->ann.tp)
                return base_error_at(c->e, file, f->line, f->col,
                                     "%s: the filter names TP but the program does not annotate "
                                     "tensor-parallel blocks; add annotations: {tp: true}",
                                     c->what);
            break;
        case IR_TAG_LAYER:
            if (!m->any && m->value >= p->model.layers)
                return base_error_at(c->e, file, f->line, f->col,
                                     "%s: LAYER %lld does not exist: model '%s' has %lld layers "
                                     "(0-%lld)",
                                     c->what, (long long)m->value,
                                     p->model.name ? p->model.name : "?",
                                     (long long)p->model.layers, (long long)p->model.layers - 1);
            break;
        case IR_TAG_REGION:
            if (!m->any && p->model.experts == 0 &&
                (m->value == IR_REGION_MOE_GATE || m->value == IR_REGION_MOE_EXPERTS ||
                 m->value == IR_REGION_MOE_COMBINE))
                return base_error_at(c->e, file, f->line, f->col,
                                     "%s: REGION %s does not exist: model '%s' is dense (no "
                                     "experts); use attn or mlp",
                                     c->what, region_names[m->value],
                                     p->model.name ? p->model.name : "?");
            break;
        default: break;
        }
    }
    return 0;
}

static int check_directive_filters(ctx *c, const ir_directive *dir)
{
    snprintf(c->what, sizeof c->what, "directive %d (%s)", dir->index, directive_names[dir->op]);
    if (dir->op != IR_DIR_ORDER && dir->op != IR_DIR_SCHEDULE && check_filter(c, &dir->filter))
        return -1;
    for (int g = 0; g < dir->ngroups; g++)
        for (int i = 0; i < dir->group_nfilters[g]; i++)
            if (check_filter(c, &dir->groups[g][i])) return -1;
    return 0;
}

static int parse_directives(ctx *c, const ir_doc *d)
{
    if (d->kind != IR_DOC_SEQ)
        return ir_doc_error(d, c->e, "directives must be a list of maps, each with an 'op'");
    ir_program *p = c->p;
    p->ndirectives = d->n;
    p->directives = base_arena_calloc(c->a, (size_t)(d->n ? d->n : 1), sizeof *p->directives);
    for (int i = 0; i < d->n; i++)
        if (parse_directive(c, d->items[i], i, &p->directives[i])) {
            add_context(c, d->file);
            return -1;
        }
    return 0;
}

/* ---------------------------------------------------------------- program-level sections */

static int parse_annotations(ctx *c, const ir_doc *d)
{
    ir_annotations *ann = &c->p->ann;
    int64_t layers = c->p->model.layers;
    snprintf(c->what, sizeof c->what, "annotations");
    if (d->kind != IR_DOC_MAP)
        return ir_doc_error(d, c->e,
                            "annotations must be a map {pp: N or [[first, last], ...], ep: bool, "
                            "tp: bool}");
    static const char *const keys[] = {"pp", "ep", "tp", NULL};
    if (check_keys(c, d, "annotations", keys, NULL, false)) return -1;
    const ir_doc *v;
    if ((v = ir_doc_get(d, "ep")) && ir_doc_bool(v, "ep", &ann->ep, c->e)) return -1;
    if (ann->ep && c->p->model.experts == 0)
        return ir_doc_error(v, c->e,
                            "annotations: ep: true but model '%s' has no experts; drop ep or use "
                            "an MoE model",
                            c->p->model.name ? c->p->model.name : "?");
    if ((v = ir_doc_get(d, "tp")) && ir_doc_bool(v, "tp", &ann->tp, c->e)) return -1;
    if (!(v = ir_doc_get(d, "pp"))) return 0;
    if (v->kind == IR_DOC_SCALAR) {
        if (ir_doc_int(v, "pp", &ann->pp_stages, c->e)) return -1;
        if (ann->pp_stages < 1)
            return ir_doc_error(v, c->e, "annotations: pp = %lld; give at least 1 stage",
                                (long long)ann->pp_stages);
        if (ann->pp_stages > layers)
            return ir_doc_error(v, c->e,
                                "annotations: pp = %lld stages but model '%s' has %lld layers; a "
                                "stage holds at least one layer, so use at most %lld",
                                (long long)ann->pp_stages, c->p->model.name ? c->p->model.name : "?",
                                (long long)layers, (long long)layers);
        return 0;
    }
    if (v->kind != IR_DOC_SEQ || v->n == 0)
        return ir_doc_error(v, c->e,
                            "annotations: pp must be a stage count or a list of [first, last] "
                            "layer ranges");
    ann->npp_ranges = v->n;
    ann->pp_ranges = base_arena_calloc(c->a, (size_t)v->n, sizeof *ann->pp_ranges);
    for (int i = 0; i < v->n; i++) {
        const ir_doc *r = v->items[i];
        if (r->kind != IR_DOC_SEQ || r->n != 2)
            return ir_doc_error(r, c->e,
                                "annotations: pp range %d must be [first, last] (layers, "
                                "inclusive)",
                                i);
        int64_t lo, hi;
        if (ir_doc_int(r->items[0], "first layer", &lo, c->e) ||
            ir_doc_int(r->items[1], "last layer", &hi, c->e))
            return -1;
        if (lo > hi)
            return ir_doc_error(r, c->e,
                                "annotations: pp range %d [%lld, %lld] is backwards; write "
                                "[first, last] with first <= last",
                                i, (long long)lo, (long long)hi);
        if (i == 0 && lo != 0)
            return ir_doc_error(r, c->e,
                                "annotations: pp range 0 starts at layer %lld; the first stage "
                                "must start at layer 0",
                                (long long)lo);
        if (i > 0 && lo != ann->pp_ranges[i - 1][1] + 1)
            return ir_doc_error(r, c->e,
                                "annotations: pp range %d starts at layer %lld but range %d ends "
                                "at layer %lld; ranges must be contiguous: start it at %lld",
                                i, (long long)lo, i - 1, (long long)ann->pp_ranges[i - 1][1],
                                (long long)ann->pp_ranges[i - 1][1] + 1);
        if (hi >= layers)
            return ir_doc_error(r, c->e,
                                "annotations: pp range %d ends at layer %lld but model '%s' has "
                                "%lld layers (0-%lld)",
                                i, (long long)hi, c->p->model.name ? c->p->model.name : "?",
                                (long long)layers, (long long)layers - 1);
        ann->pp_ranges[i][0] = lo;
        ann->pp_ranges[i][1] = hi;
    }
    if (ann->pp_ranges[v->n - 1][1] != layers - 1)
        return ir_doc_error(v->items[v->n - 1], c->e,
                            "annotations: pp ranges end at layer %lld but model '%s' has %lld "
                            "layers; the last range must end at layer %lld",
                            (long long)ann->pp_ranges[v->n - 1][1],
                            c->p->model.name ? c->p->model.name : "?", (long long)layers,
                            (long long)layers - 1);
    ann->pp_stages = ann->npp_ranges;
    return 0;
}

static int parse_batch(ctx *c, const ir_doc *d)
{
    snprintf(c->what, sizeof c->what, "batch");
    c->p->batch_line = d->line;
    c->p->batch_col = d->col;
    if (d->kind != IR_DOC_MAP)
        return ir_doc_error(d, c->e, "batch must be a map {global: G, micro: b}");
    static const char *const keys[] = {"global", "micro", NULL};
    if (check_keys(c, d, "batch", keys, NULL, false)) return -1;
    const ir_doc *g = ir_doc_get(d, "global"), *m = ir_doc_get(d, "micro");
    if (!g)
        return ir_doc_error(d, c->e,
                            "batch has no 'global'; give the sequences per step, e.g. global: 512");
    if (get_int_range(c, g, "global", 1, INT64_MAX / 2, "give at least 1 sequence",
                      &c->p->global_batch))
        return -1;
    c->p->micro_batch = 1;
    if (m && get_int_range(c, m, "micro", 1, INT64_MAX / 2, "give at least 1 sequence",
                           &c->p->micro_batch))
        return -1;
    int64_t G = c->p->global_batch, b = c->p->micro_batch;
    if (G % b)
        return ir_doc_error(g, c->e,
                            "batch: global = %lld is not a multiple of micro = %lld; use global = "
                            "%lld or %lld",
                            (long long)G, (long long)b, (long long)(G / b * b),
                            (long long)((G / b + 1) * b));
    return 0;
}

/* A floating-point type by the names `dtype` and `grad_dtype` take; -1 for none of them. */
static int dtype_of_name(const char *s)
{
    if (ci_eq(s, "bf16") || ci_eq(s, "bfloat16")) return PLAN_BF16;
    if (ci_eq(s, "fp16") || ci_eq(s, "float16")) return PLAN_FP16;
    if (ci_eq(s, "fp32") || ci_eq(s, "float32")) return PLAN_FP32;
    if (ci_eq(s, "fp64") || ci_eq(s, "float64")) return PLAN_FP64;
    return -1;
}

static int parse_dtype(ctx *c, const ir_doc *d)
{
    const char *s;
    snprintf(c->what, sizeof c->what, "program");
    if (get_string(c, d, "dtype", &s)) return -1;
    int t = dtype_of_name(s);
    if (t < 0)
        return ir_doc_error(d, c->e,
                            "unknown dtype '%s'; use bf16 (mixed precision, the default), fp16, "
                            "fp32 (the CPU executor) or fp64",
                            s);
    ir_program *p = c->p;
    p->param_dtype = p->act_dtype = p->grad_dtype = (plan_dtype)t;
    /* Mixed precision keeps fp32 master weights and moments in the optimizer state. */
    p->opt_dtype = t == PLAN_FP64 ? PLAN_FP64 : PLAN_FP32;
    return 0;
}

/* grad_dtype: the gradients' type where it is not the dtype's. Megatron-LM's bf16 training
 * accumulates and all-reduces its gradients in fp32 (main_grad), which is 18 bytes of model state
 * a parameter rather than the ZeRO paper's 16; the buffers, the gradient collectives and the
 * optimizer step follow it. Read after dtype whatever their order in the file (it is checked
 * against it): never narrower than the dtype, nor the other 16-bit format, since a gradient is
 * summed from values of the dtype. */
static int parse_grad_dtype(ctx *c, const ir_doc *d)
{
    const char *s;
    snprintf(c->what, sizeof c->what, "program");
    if (get_string(c, d, "grad_dtype", &s)) return -1;
    plan_dtype t = c->p->param_dtype;
    int tb = plan_dtype_bytes(t);
    char ok[64];
    snprintf(ok, sizeof ok, "%s%s%s", plan_dtype_name(t),
             tb < 4 ? ", fp32" : "", tb < 8 ? " or fp64" : "");
    int g = dtype_of_name(s);
    if (g < 0)
        return ir_doc_error(d, c->e,
                            "unknown grad_dtype '%s'; use %s (not narrower than dtype %s), or "
                            "remove grad_dtype to keep the gradients in the dtype",
                            s, ok, plan_dtype_name(t));
    int gb = plan_dtype_bytes((plan_dtype)g);
    if (g != (int)t && gb <= tb)
        return ir_doc_error(d, c->e,
                            "grad_dtype %s is %s dtype %s; use grad_dtype %s, or remove it to "
                            "keep the gradients in the dtype",
                            plan_dtype_name((plan_dtype)g),
                            gb < tb ? "narrower than" : "a different 16-bit format from",
                            plan_dtype_name(t), ok);
    c->p->grad_dtype = (plan_dtype)g;
    return 0;
}

static int parse_optimizer(ctx *c, const ir_doc *d)
{
    ir_program *p = c->p;
    snprintf(c->what, sizeof c->what, "optimizer");
    const ir_doc *n = d;
    if (d->kind == IR_DOC_MAP) {
        static const char *const keys[] = {"name", "grad_clip", "lr",  "weight_decay",
                                           "beta1", "beta2",    "eps", "momentum", NULL};
        if (check_keys(c, d, "optimizer", keys, NULL, false)) return -1;
        n = ir_doc_get(d, "name");
    } else if (d->kind != IR_DOC_SCALAR) {
        return ir_doc_error(d, c->e, "optimizer must be a name (adamw, sgd) or a map {name, ...}");
    }
    if (n) {
        const char *s;
        if (get_string(c, n, "name", &s)) return -1;
        if (ci_eq(s, "adamw"))
            p->optimizer = IR_OPT_ADAMW;
        else if (ci_eq(s, "sgd"))
            p->optimizer = IR_OPT_SGD;
        else
            return ir_doc_error(n, c->e, "unknown optimizer '%s'; use adamw or sgd%s", s,
                                ci_eq(s, "adam") ? " (adamw with weight_decay: 0 is Adam)" : "");
    }
    if (d->kind != IR_DOC_MAP) return 0;
    static const struct { const char *key; double lo, hi; bool lo_open, hi_open; size_t off; } nums[] = {
        {"grad_clip", 0, INFINITY, false, true, offsetof(ir_program, grad_clip)},
        {"lr", 0, INFINITY, true, true, offsetof(ir_program, lr)},
        {"weight_decay", 0, INFINITY, false, true, offsetof(ir_program, weight_decay)},
        {"beta1", 0, 1, false, true, offsetof(ir_program, beta1)},
        {"beta2", 0, 1, false, true, offsetof(ir_program, beta2)},
        {"eps", 0, INFINITY, true, true, offsetof(ir_program, eps)},
        {"momentum", 0, 1, false, true, offsetof(ir_program, momentum)},
    };
    for (size_t i = 0; i < BASE_COUNT(nums); i++) {
        const ir_doc *v = ir_doc_get(d, nums[i].key);
        if (!v) continue;
        double x;
        if (ir_doc_num(v, nums[i].key, &x, c->e)) return -1;
        bool ok = isfinite(x) && (nums[i].lo_open ? x > nums[i].lo : x >= nums[i].lo) &&
                  (nums[i].hi_open ? x < nums[i].hi : x <= nums[i].hi);
        if (!ok)
            return ir_doc_error(v, c->e, "optimizer: %s = %s is out of range; it must be %s %g%s",
                                nums[i].key, v->str, nums[i].lo_open ? ">" : ">=", nums[i].lo,
                                isfinite(nums[i].hi) ? " and below 1" : "");
        *(double *)((char *)p + nums[i].off) = x;
    }
    return 0;
}

/* model: / cluster: — a path (relative to the program) or an inline map. */
static const ir_doc *load_ref(ctx *c, const ir_doc *v, const char *key)
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
    if (ir_doc_load(c->a, resolve_path(c->a, c->dir, v->str), &d, c->e)) {
        /* point at the reference too: the file's own message may not say who wanted it */
        base_error_prefix(c->e, "%s:%d:%d: %s '%s': ", v->file ? v->file : "", v->line, v->col,
                          key, v->str);
        return NULL;
    }
    return d;
}

/* For a bare array: what the directives say about the batch and the annotations. */
static void infer_from_directives(ir_program *p)
{
    int64_t nmb = 1, dp = 1, pp_max = -1;
    bool pp = false, mirror = false;
    /* DualPipe's orders (mirror: true) also name the mirrored stages p..2p-1, which the
     * program does not annotate: its stages are those the other directives name */
    for (int i = 0; i < p->ndirectives; i++) mirror |= p->directives[i].op == IR_DIR_ORDER && p->directives[i].mirror;
    for (int i = 0; i < p->ndirectives; i++) {
        const ir_directive *d = &p->directives[i];
        if (d->op == IR_DIR_SPLIT && d->num_microbatches > nmb) nmb = d->num_microbatches;
        if (d->op == IR_DIR_REPLICATE && d->ndevices > dp) dp = d->ndevices;
        int nf = d->op == IR_DIR_ORDER ? 0 : 1;
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

static int load_model_cluster(ctx *c, const ir_doc *d, const ir_model *model,
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

static int check_all_filters(ctx *c)
{
    bool mirror = false;
    for (int i = 0; i < c->p->ndirectives; i++)
        mirror |= c->p->directives[i].op == IR_DIR_ORDER && c->p->directives[i].mirror;
    for (int i = 0; i < c->p->ndirectives; i++) {
        c->order_mirrored = mirror && c->p->directives[i].op == IR_DIR_ORDER;
        int rc = check_directive_filters(c, &c->p->directives[i]);
        c->order_mirrored = false;
        if (rc) return -1;
    }
    return 0;
}

int ir_program_from_doc(const ir_doc *d, const char *dir, const ir_model *model,
                        const ir_cluster *cluster, base_arena *a, ir_program *p, base_error *e)
{
    memset(p, 0, sizeof *p);
    set_defaults(p);
    ctx c = {.a = a, .e = e, .p = p, .dir = dir};
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
        if (parse_directives(&c, d)) return -1;
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
        return check_all_filters(&c);
    }
    if (d->kind != IR_DOC_MAP)
        return ir_doc_error(d, e,
                            "a program must be a map (model, cluster, batch, directives, ...) or a "
                            "bare list of directives");
    static const char *const keys[] = {"name",      "description", "model", "cluster",
                                       "batch",     "dtype",       "grad_dtype", "optimizer",
                                       "annotations", "directives", NULL};
    if (check_keys(&c, d, "a program", keys, NULL, false)) return -1;
    const ir_doc *v;
    if ((v = ir_doc_get(d, "name")) && get_string(&c, v, "name", &p->name)) return -1;
    if (load_model_cluster(&c, d, model, cluster)) return -1;
    if (!(v = ir_doc_get(d, "batch")))
        return ir_doc_error(d, e,
                            "the program has no 'batch'; add batch: {global: G, micro: b} "
                            "(sequences per step and per micro-batch)");
    if (parse_batch(&c, v) ||
        ((v = ir_doc_get(d, "dtype")) && parse_dtype(&c, v)) ||
        ((v = ir_doc_get(d, "grad_dtype")) && parse_grad_dtype(&c, v)) ||
        ((v = ir_doc_get(d, "optimizer")) && parse_optimizer(&c, v)) ||
        ((v = ir_doc_get(d, "annotations")) && parse_annotations(&c, v))) {
        add_context(&c, d->file);
        return -1;
    }
    if ((v = ir_doc_get(d, "directives")) && parse_directives(&c, v)) return -1;
    return check_all_filters(&c);
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

int64_t ir_program_stage_of_region(const ir_program *p, base_arena *a, int32_t *out)
{
    const ir_annotations *ann = &p->ann;
    int64_t layers = p->model.layers;
    int64_t stages = ann->npp_ranges ? ann->npp_ranges : ann->pp_stages;
    if (stages < 1) stages = 1;
    int n = ir_model_nregions(&p->model);
    ir_region *regs = base_arena_calloc(a, (size_t)(n ? n : 1), sizeof *regs);
    ir_model_regions(&p->model, a, regs);
    /* Even split: the extra layers go to the early stages, because the last stage also carries
     * the LM head and the loss, usually the heaviest region. */
    int64_t base = layers / stages, extra = layers % stages;
    for (int i = 0; i < n; i++) {
        int64_t l = regs[i].layer, s;
        if (regs[i].kind == IR_REGION_EMBED) {
            s = 0;
        } else if (regs[i].kind == IR_REGION_HEAD || l < 0) {
            s = stages - 1;
        } else if (ann->npp_ranges) {
            s = 0;
            while (s < ann->npp_ranges - 1 && l > ann->pp_ranges[s][1]) s++;
        } else if (l < extra * (base + 1)) {
            s = l / (base + 1);
        } else {
            s = extra + (l - extra * (base + 1)) / (base ? base : 1);
        }
        out[i] = (int32_t)s;
    }
    return stages;
}
