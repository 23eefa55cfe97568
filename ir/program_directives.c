/* program_directives.c — the directives of a program (IR_DIRECTIVE_TABLE in program.h): their
 * names, their key schemas and the reader that walks them, the few readers of keys that are
 * genuinely special (replicate's ZeRO flags, split's dim, order's groups, recompute's mode,
 * schedule's name or file), filters and device lists, and the check of filters against what the
 * file says (annotations, model) once the whole program is read.
 *
 * The reader checks a directive's keys against its schema (Piper's ignored keys warn), then
 * walks the schema in order: a missing required key is an error that says what to write, a
 * FILTER, DEVICES, STRING, BOOL, COUNT or BYTES key is read into its field (or gets its
 * default), and the directive's own parser runs once, where its first SPECIAL key stands. So
 * errors come in the order the keys are listed, which is the order docs/programs.md gives. */
#include "program_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- filter vocabulary */

/* Each NULL-terminated, for lookups, "did you mean" and the lists in messages. */
static const char *const tag_names[IR_NTAGS + 1] = {
    [IR_TAG_PP] = "PP",       [IR_TAG_EP] = "EP",         [IR_TAG_TP] = "TP",
    [IR_TAG_MB] = "MB",       [IR_TAG_PASS] = "PASS",     [IR_TAG_LAYER] = "LAYER",
    [IR_TAG_REGION] = "REGION", [IR_TAG_CHUNK] = "CHUNK", [IR_NTAGS] = NULL,
};

static const char *const region_names[IR_NREGION_KINDS + 1] = {
    [IR_REGION_EMBED] = "embed",           [IR_REGION_ATTN] = "attn",
    [IR_REGION_MLP] = "mlp",               [IR_REGION_MOE_GATE] = "moe_gate",
    [IR_REGION_MOE_EXPERTS] = "moe_experts", [IR_REGION_MOE_COMBINE] = "moe_combine",
    [IR_REGION_HEAD] = "head",             [IR_NREGION_KINDS] = NULL,
};

/* The passes a filter names: the plan's names (plan.h's table) but AUX, which no filter
 * selects; PyTorch's I and W are read as BI and BW. */
#define PASS_FILTER_ROW(id, name) name,
static const char *const pass_names[PLAN_NPASS] = {PLAN_PASS_TABLE(PASS_FILTER_ROW)};
#undef PASS_FILTER_ROW
static const char *const *filter_pass_names(void)
{
    static const char *names[PLAN_NPASS + 1];
    int n = 0;
    for (int p = 0; p < PLAN_NPASS; p++)
        if (p != PLAN_PASS_AUX) names[n++] = pass_names[p];
    names[n] = NULL;
    return names;
}

/* "a, b, c or d" */
static const char *or_list(const char *const *names, char *buf, size_t n)
{
    size_t off = 0;
    buf[0] = 0;
    for (int i = 0; names[i] && off + 1 < n; i++) {
        const char *sep = i == 0 ? "" : names[i + 1] ? ", " : " or ";
        int w = snprintf(buf + off, n - off, "%s%s", sep, names[i]);
        if (w < 0) break;
        off += (size_t)w;
    }
    return buf;
}

const char *ir_tag_name(ir_tag t) { return (unsigned)t < IR_NTAGS ? tag_names[t] : "?"; }

const char *ir_region_kind_name(ir_region_kind k)
{
    return (unsigned)k < IR_NREGION_KINDS ? region_names[k] : "?";
}

const char *ir_pass_tag_name(plan_pass p) { return (unsigned)p < PLAN_NPASS ? pass_names[p] : "?"; }

/* ---------------------------------------------------------------- Piper's ignored keys */

#define PIPER_IGNORED_KEY(key) key,
const char *const ir_piper_ignored_keys[] = {IR_PIPER_IGNORED_TABLE(PIPER_IGNORED_KEY) NULL};
#undef PIPER_IGNORED_KEY

/* ---------------------------------------------------------------- filters */

static int parse_pass(const char *s)
{
    /* PyTorch's pipelining schedules call the split backward I (input) and W (weight). */
    if (ir_load_ci_eq(s, "I")) return PLAN_PASS_BI;
    if (ir_load_ci_eq(s, "W")) return PLAN_PASS_BW;
    int p = ir_load_lookup_ci(s, pass_names, PLAN_NPASS);
    return p == PLAN_PASS_AUX ? -1 : p;
}

/* Piper's filters come as maps or as lists of [tag, value] pairs (its order builders write
 * [["PP", 0], ["MB", 1], ["PASS", "F"]]), as its _iter_filter_specs reads them. */
static bool is_pair_filter(const ir_doc *d)
{
    if (d->kind != IR_DOC_SEQ || d->n == 0) return false;
    for (int i = 0; i < d->n; i++) {
        const ir_doc *it = d->items[i];
        if (it->kind != IR_DOC_SEQ || it->n != 2 || it->items[0]->kind != IR_DOC_SCALAR ||
            it->items[0]->null)
            return false;
    }
    return true;
}

/* A tag name: piper's names, or the micro-batch tag as split's dim_name names it. */
static int lookup_tag(ir_load_ctx *c, const char *name)
{
    int t = ir_load_lookup_ci(name, tag_names, IR_NTAGS);
    if (t < 0 && c->p->mb_tag && ir_load_ci_eq(name, c->p->mb_tag)) t = IR_TAG_MB;
    return t;
}

/* Piper reads "3" as 3 (its _normalize_filter_spec tries int() on strings). */
static bool quoted_int(const ir_doc *v, int64_t *out)
{
    const char *s = v->str;
    if (!v->quoted || !*s) return false;
    const char *p = s + (*s == '-');
    if (!*p) return false;
    for (; *p; p++)
        if (*p < '0' || *p > '9') return false;
    errno = 0;
    long long x = strtoll(s, NULL, 10);
    if (errno) return false;
    *out = x;
    return true;
}

static int parse_filter(ir_load_ctx *c, const ir_doc *d, ir_filter *f)
{
    memset(f, 0, sizeof *f);
    f->line = d->line;
    f->col = d->col;
    if (d->kind == IR_DOC_SCALAR && d->null) return 0; /* `filter:` with nothing: match all */
    bool pairs = is_pair_filter(d);
    if (d->kind != IR_DOC_MAP && !pairs)
        return ir_doc_error(d, c->e,
                            "%s: a filter must be a map of tag: value, such as {PP: 0, PASS: F}, "
                            "or a list of [tag, value] pairs, such as [[\"PP\", 0], [\"PASS\", "
                            "\"F\"]]; write {} to match everything",
                            c->what);
    f->n = d->n;
    f->m = base_arena_calloc(c->a, (size_t)(d->n ? d->n : 1), sizeof *f->m);
    const char *const *passes = filter_pass_names();
    const char *pass_cands[PLAN_NPASS + 3];
    int np = 0;
    for (; passes[np]; np++) pass_cands[np] = passes[np];
    pass_cands[np] = "I", pass_cands[np + 1] = "W", pass_cands[np + 2] = NULL;
    char list[256];
    for (int i = 0; i < d->n; i++) {
        const ir_doc *k = pairs ? d->items[i]->items[0] : d->keys[i];
        const ir_doc *v = pairs ? d->items[i]->items[1] : d->items[i];
        int t = lookup_tag(c, k->str);
        if (t < 0) {
            const char *s = ir_suggest(k->str, tag_names);
            if (s)
                return ir_doc_error(k, c->e,
                                    "%s: unknown filter tag '%s'; did you mean '%s'? (tags: %s)",
                                    c->what, k->str, s, ir_join_names(list, sizeof list, tag_names));
            return ir_doc_error(k, c->e, "%s: unknown filter tag '%s'; use %s", c->what, k->str,
                                or_list(tag_names, list, sizeof list));
        }
        for (int j = 0; j < i; j++)
            if (f->m[j].tag == (ir_tag)t)
                return ir_doc_error(k, c->e, "%s: filter names tag %s twice; keep one", c->what,
                                    tag_names[t]);
        ir_tag_match *m = &f->m[i];
        m->tag = (ir_tag)t;
        if (v->kind == IR_DOC_SCALAR && v->null) {
            /* Piper's None: nodes that do not carry the tag */
            m->none = true;
            m->value = -1;
            continue;
        }
        if (v->kind != IR_DOC_SCALAR)
            return ir_doc_error(v, c->e, "%s: the value of %s must be %s%s%s, \"*\" or null",
                                c->what, tag_names[t],
                                t == IR_TAG_PASS     ? "a pass ("
                                : t == IR_TAG_REGION ? "a region kind"
                                                     : "an integer",
                                t == IR_TAG_PASS ? ir_join_names(list, sizeof list, passes) : "",
                                t == IR_TAG_PASS ? ")" : "");
        if (!strcmp(v->str, "*")) {
            m->any = true;
            continue;
        }
        if (t == IR_TAG_PASS) {
            int p = parse_pass(v->str);
            if (p < 0) {
                const char *s = ir_suggest(v->str, pass_cands);
                return ir_doc_error(v, c->e,
                                    "%s: bad PASS value '%s'%s%s%s; use %s or \"*\" (I and W mean "
                                    "BI and BW)",
                                    c->what, v->str, s ? " (did you mean '" : "", s ? s : "",
                                    s ? "'?)" : "", ir_join_names(list, sizeof list, passes));
            }
            m->value = p;
        } else if (t == IR_TAG_REGION) {
            int r = ir_load_lookup_ci(v->str, region_names, IR_NREGION_KINDS);
            if (r < 0) {
                const char *s = ir_suggest(v->str, region_names);
                return ir_doc_error(v, c->e,
                                    "%s: unknown REGION '%s'%s%s%s; use %s or \"*\"", c->what,
                                    v->str, s ? " (did you mean '" : "", s ? s : "",
                                    s ? "'?)" : "", ir_join_names(list, sizeof list, region_names));
            }
            m->value = r;
        } else {
            if (!quoted_int(v, &m->value) && ir_doc_int(v, tag_names[t], &m->value, c->e))
                return -1;
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

static int device_out_of_range(ir_load_ctx *c, const ir_doc *at, long long dev)
{
    long long nd = (long long)ir_cluster_devices(&c->p->cluster);
    return ir_doc_error(at, c->e,
                        "%s: device %lld does not exist: cluster '%s' has %lld devices (0-%lld); "
                        "use devices in that range or a bigger cluster",
                        c->what, dev, c->p->cluster.name ? c->p->cluster.name : "?", nd, nd - 1);
}

static int devlist_add_range(ir_load_ctx *c, const ir_doc *at, long long lo, long long hi, devlist *l)
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
static int devlist_add_spec(ir_load_ctx *c, const ir_doc *at, const char *s, devlist *l)
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

static int parse_devices(ir_load_ctx *c, const ir_doc *d, ir_directive *dir)
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

/* ---------------------------------------------------------------- SPECIAL keys */

static int get_flag(ir_load_ctx *c, const ir_doc *d, const char *key, int *out)
{
    const ir_doc *v = ir_doc_get(d, key);
    *out = -1; /* not given */
    if (!v) return 0;
    bool b;
    if (ir_doc_bool(v, key, &b, c->e)) return -1;
    *out = b;
    return 0;
}

/* replicate's SPECIAL keys: the ZeRO stage from `zero` and Piper's flags. The flags describe
 * what is sharded: shard_grads is ZeRO-2 (ZeRO-3 shards gradients too), shard_params ZeRO-3; a
 * flag that contradicts the stage (or the other flag) is an error rather than a silent winner. */
static int parse_replicate(ir_load_ctx *c, const ir_doc *d, ir_directive *dir)
{
    const ir_doc *zv = ir_doc_get(d, "zero");
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
    return 0;
}

/* split's SPECIAL keys: dim and Piper's dim_name, one key spelled two ways. Its value names the
 * micro-batch tag (Piper's tools write MB; piper's programs have written batch, the dimension):
 * any name that is not another tag's. The loader reads it before any filter (ir_load_directives),
 * so filters anywhere in the program may use it. */
static int parse_split(ir_load_ctx *c, const ir_doc *d, ir_directive *dir)
{
    const ir_doc *dim = ir_doc_get(d, "dim"), *dn = ir_doc_get(d, "dim_name");
    if (dim && dn)
        return ir_doc_error(dn, c->e, "%s: give 'dim' or 'dim_name', not both (they are one key)",
                            c->what);
    if (!dim) dim = dn;
    dir->dim_name = "MB";
    if (!dim) return 0;
    if (ir_load_get_string(c, dim, dn ? "dim_name" : "dim", &dir->dim_name)) return -1;
    const char *s = dir->dim_name;
    bool ident = *s != 0;
    for (const char *q = s; *q; q++)
        ident &= isalnum((unsigned char)*q) || *q == '_';
    if (!ident)
        return ir_doc_error(dim, c->e,
                            "%s: '%s' cannot name the micro-batch tag; use a name of letters, "
                            "digits and _, such as MB",
                            c->what, s);
    int t = ir_load_lookup_ci(s, tag_names, IR_NTAGS);
    if (t >= 0 && t != IR_TAG_MB)
        return ir_doc_error(dim, c->e,
                            "%s: '%s' is the %s tag already; name the micro-batch tag otherwise, "
                            "such as MB",
                            c->what, s, tag_names[t]);
    if (c->p->mb_tag && !ir_load_ci_eq(c->p->mb_tag, s))
        return ir_doc_error(dim, c->e,
                            "%s: this split names the micro-batch tag '%s' but another names it "
                            "'%s'; use one name",
                            c->what, s, c->p->mb_tag);
    return 0;
}

/* order's SPECIAL keys: mirror, and the groups; a group is a list of filters, and a lone filter
 * map is a one-filter group. */
static int parse_order(ir_load_ctx *c, const ir_doc *d, ir_directive *dir)
{
    const ir_doc *mv = ir_doc_get(d, "mirror");
    if (mv && ir_doc_bool(mv, "mirror", &dir->mirror, c->e)) return -1;
    const ir_doc *fs = ir_doc_get(d, "filters"); /* required: the reader checked it is there */
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
        if (grp->kind == IR_DOC_MAP || is_pair_filter(grp)) {
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

/* recompute's mode: full (the default) or selective. */
static int parse_recompute(ir_load_ctx *c, const ir_doc *d, ir_directive *dir)
{
    dir->recompute = IR_RECOMPUTE_FULL;
    const ir_doc *v = ir_doc_get(d, "mode");
    if (!v) return 0;
    const char *m;
    if (ir_load_get_string(c, v, "mode", &m)) return -1;
    if (ir_load_ci_eq(m, "full"))
        dir->recompute = IR_RECOMPUTE_FULL;
    else if (ir_load_ci_eq(m, "selective"))
        dir->recompute = IR_RECOMPUTE_SELECTIVE;
    else
        return ir_doc_error(v, c->e, "%s: unknown recompute mode '%s'; use full or selective",
                            c->what, m);
    return 0;
}

/* The builder name is kept as written: which builders exist is sched/'s table to say, and the
 * schedule pass checks it (and that there is a name or a file). */
static int parse_schedule(ir_load_ctx *c, const ir_doc *d, ir_directive *dir)
{
    const ir_doc *n = ir_doc_get(d, "name"), *f = ir_doc_get(d, "file");
    if (n && f)
        return ir_doc_error(f, c->e,
                            "%s: give a builder 'name' or an order 'file', not both", c->what);
    if (n) return ir_load_get_string(c, n, "name", &dir->schedule);
    if (!f) return 0;
    const char *path;
    if (ir_load_get_string(c, f, "file", &path)) return -1;
    dir->schedule_file = ir_load_resolve_path(c->a, c->dir, path);
    FILE *fp = fopen(dir->schedule_file, "rb");
    if (!fp)
        return ir_doc_error(f, c->e,
                            "%s: schedule file '%s' (resolved to '%s') cannot be opened; relative "
                            "paths are relative to the program",
                            c->what, path, dir->schedule_file);
    fclose(fp);
    return 0;
}

/* mesh's axes: [[name, size], ...], distinct names, sizes >= 1, as Piper's schedule loader
 * checks them; that their product is each stage's group size is the mesh pass's to check. */
static int parse_mesh(ir_load_ctx *c, const ir_doc *d, ir_directive *dir)
{
    const ir_doc *ax = ir_doc_get(d, "axes"); /* required: the reader checked it is there */
    if (ax->kind != IR_DOC_SEQ || ax->n == 0)
        return ir_doc_error(ax, c->e,
                            "%s: axes must be a non-empty list of [name, size] pairs, such as "
                            "[[\"dp\", 2], [\"tp\", 2]]",
                            c->what);
    dir->naxes = ax->n;
    dir->axis_names = base_arena_calloc(c->a, (size_t)ax->n, sizeof *dir->axis_names);
    dir->axis_sizes = base_arena_calloc(c->a, (size_t)ax->n, sizeof *dir->axis_sizes);
    for (int i = 0; i < ax->n; i++) {
        const ir_doc *it = ax->items[i];
        if (it->kind != IR_DOC_SEQ || it->n != 2 || it->items[0]->kind != IR_DOC_SCALAR ||
            it->items[0]->null)
            return ir_doc_error(it, c->e,
                                "%s: axis %d must be a [name, size] pair, such as [\"tp\", 2]",
                                c->what, i);
        dir->axis_names[i] = it->items[0]->str;
        if (ir_load_get_int_range(c, it->items[1], "axis size", 1, INT32_MAX,
                                  "give each axis at least 1 device", &dir->axis_sizes[i]))
            return -1;
        for (int j = 0; j < i; j++)
            if (!strcmp(dir->axis_names[j], dir->axis_names[i]))
                return ir_doc_error(it->items[0], c->e,
                                    "%s: axis '%s' is named twice; give each axis its own name",
                                    c->what, dir->axis_names[i]);
    }
    return 0;
}

/* route's mode, as Piper's schedule loader reads it: thread (the default) or consumers. */
static int parse_route(ir_load_ctx *c, const ir_doc *d, ir_directive *dir)
{
    dir->route_mode = "thread";
    const ir_doc *v = ir_doc_get(d, "mode");
    if (!v) return 0;
    if (ir_load_get_string(c, v, "mode", &dir->route_mode)) return -1;
    if (strcmp(dir->route_mode, "thread") && strcmp(dir->route_mode, "consumers"))
        return ir_doc_error(v, c->e, "%s: unknown route mode '%s'; use thread or consumers",
                            c->what, dir->route_mode);
    return 0;
}

/* Piper's context parallelism: not in piper yet, so refused where it is written. */
static int parse_ring_exchange(ir_load_ctx *c, const ir_doc *d, ir_directive *dir)
{
    (void)dir;
    return ir_doc_error(ir_doc_get(d, "op"), c->e,
                        "%s: context parallelism (Piper's ring exchange of K/V between the "
                        "ranks of a group) is not yet supported by piper; remove the directive, "
                        "or run the program with Piper itself",
                        c->what);
}

/* ---------------------------------------------------------------- the table */

#define KEY_ROW(key, type, field, dflt, required, hint) \
    {key, IR_KEY_##type, offsetof(ir_directive, field), dflt, required, hint},
#define KEY_LIST(id, name, pass, parse, open, doc, keys) \
    static const ir_directive_key keys_##id[] = {keys{NULL, IR_KEY_SPECIAL, 0, 0, NULL, NULL}};
IR_DIRECTIVE_TABLE(KEY_LIST, KEY_ROW)
#undef KEY_LIST
#undef KEY_ROW

#define KEY_NAME(key, type, field, dflt, required, hint) key,
#define KNOWN_LIST(id, name, pass, parse, open, doc, keys) \
    static const char *const known_##id[] = {"op", keys NULL};
IR_DIRECTIVE_TABLE(KNOWN_LIST, KEY_NAME)
#undef KNOWN_LIST
#undef KEY_NAME

static const ir_directive_info infos[IR_NDIR] = {
#define INFO_ROW(id, name, pass, parse, open, doc, keys) \
    [IR_DIR_##id] = {name, open, doc, keys_##id, known_##id},
    IR_DIRECTIVE_TABLE(INFO_ROW, )
#undef INFO_ROW
};

typedef int (*directive_parser)(ir_load_ctx *c, const ir_doc *d, ir_directive *dir);
static const directive_parser parsers[IR_NDIR] = {
#define PARSER_ROW(id, name, pass, parse, open, doc, keys) [IR_DIR_##id] = parse,
    IR_DIRECTIVE_TABLE(PARSER_ROW, )
#undef PARSER_ROW
};

/* The names, NULL-terminated, for lookups and messages. */
static const char *const directive_names[IR_NDIR + 1] = {
#define NAME_ROW(id, name, pass, parse, open, doc, keys) name,
    IR_DIRECTIVE_TABLE(NAME_ROW, ) NULL
#undef NAME_ROW
};

const char *ir_directive_name(ir_directive_op op)
{
    return (unsigned)op < IR_NDIR ? directive_names[op] : "?";
}

const ir_directive_info *ir_directive_info_of(ir_directive_op op)
{
    return (unsigned)op < IR_NDIR ? &infos[op] : NULL;
}

int ir_directive_of(const char *name) { return ir_load_lookup_ci(name, directive_names, IR_NDIR); }

bool ir_directive_takes(ir_directive_op op, const char *key)
{
    if ((unsigned)op >= IR_NDIR) return false;
    for (const char *const *k = infos[op].known; *k; k++)
        if (!strcmp(*k, key)) return true;
    return false;
}

/* ---------------------------------------------------------------- the generic reader */

/* A key of a directive's schema into its field; v is NULL when the key is absent (and not
 * required): then the field gets the key's default. */
typedef int (*key_reader)(ir_load_ctx *c, const ir_doc *v, const ir_directive_key *k,
                          ir_directive *dir, void *field);

static int read_filter(ir_load_ctx *c, const ir_doc *v, const ir_directive_key *k,
                       ir_directive *dir, void *field)
{
    (void)k;
    ir_filter *f = field;
    if (v) return parse_filter(c, v, f);
    f->line = dir->line; /* no filter: every node, reported at the directive */
    f->col = dir->col;
    return 0;
}

static int read_devices(ir_load_ctx *c, const ir_doc *v, const ir_directive_key *k,
                        ir_directive *dir, void *field)
{
    (void)k, (void)field;
    return v ? parse_devices(c, v, dir) : 0;
}

/* The alias was read with the key it spells (parse_directive). */
static int read_alias(ir_load_ctx *c, const ir_doc *v, const ir_directive_key *k,
                      ir_directive *dir, void *field)
{
    (void)c, (void)v, (void)k, (void)dir, (void)field;
    return 0;
}

/* A plain number: digits, maybe a fraction or exponent, no unit. */
static bool plain_number(const ir_doc *v)
{
    if (v->kind != IR_DOC_SCALAR || v->null || v->quoted || !*v->str) return false;
    char *end;
    errno = 0;
    (void)strtod(v->str, &end);
    return *end == 0 && !errno;
}

static int read_string(ir_load_ctx *c, const ir_doc *v, const ir_directive_key *k,
                       ir_directive *dir, void *field)
{
    (void)dir;
    return v ? ir_load_get_string(c, v, k->key, field) : 0;
}

static int read_bool(ir_load_ctx *c, const ir_doc *v, const ir_directive_key *k,
                     ir_directive *dir, void *field)
{
    (void)dir;
    *(bool *)field = k->dflt != 0;
    return v ? ir_doc_bool(v, k->key, field, c->e) : 0;
}

static int read_count(ir_load_ctx *c, const ir_doc *v, const ir_directive_key *k,
                      ir_directive *dir, void *field)
{
    (void)dir;
    *(int64_t *)field = (int64_t)k->dflt;
    return v ? ir_load_get_int_range(c, v, k->key, 1, INT32_MAX, k->hint, field) : 0;
}

static int read_bytes(ir_load_ctx *c, const ir_doc *v, const ir_directive_key *k,
                      ir_directive *dir, void *field)
{
    (void)dir;
    double *x = field;
    /* a Piper array without bucket_size: Piper's replicate does not bucket, one collective per
     * region (piper's 0) */
    *x = c->p->from_piper_array ? 0 : k->dflt;
    if (!v) return 0;
    if (ir_doc_bytes(v, k->key, x, c->e)) return -1;
    if (!isfinite(*x) || *x < 0)
        return ir_doc_error(v, c->e, "%s: %s must be %s", c->what, k->key, k->hint);
    if (!plain_number(v)) return 0;
    /* Piper's unit: its replicate multiplies bucket_size by 1024 * 1024 */
    const double mib = 1024.0 * 1024.0;
    if (c->p->from_piper_array) {
        if (*x == 0)
            return ir_doc_error(v, c->e,
                                "%s: %s = 0; in a Piper array bucket_size is in MiB and must be "
                                "> 0 (Piper refuses 0); leave it out for one bucket per region",
                                c->what, k->key);
        if (*x >= mib)
            return ir_doc_error(v, c->e,
                                "%s: %s = %s is ambiguous: a Piper array gives it in MiB (Piper "
                                "multiplies it by 1024*1024), which makes %.0f TiB per bucket; "
                                "give the MiB (e.g. 25) or a unit (\"25MiB\", \"26214400B\")",
                                c->what, k->key, v->str, *x / mib);
        *x *= mib;
        return 0;
    }
    if (*x > 0 && *x < mib)
        ir_doc_warn(v, c->e,
                    "%s: %s = %s is read as bytes (piper's unit; a Piper array reads a plain "
                    "number as MiB); write \"%sMiB\" for MiB or \"%sB\" to say bytes",
                    c->what, k->key, v->str, v->str, v->str);
    return 0;
}

static const key_reader readers[IR_NKEY_TYPES] = {
    [IR_KEY_FILTER] = read_filter, [IR_KEY_DEVICES] = read_devices,
    [IR_KEY_STRING] = read_string, [IR_KEY_BOOL] = read_bool,
    [IR_KEY_COUNT] = read_count,   [IR_KEY_BYTES] = read_bytes,
    [IR_KEY_ALIAS] = read_alias,
};

static int parse_directive(ir_load_ctx *c, const ir_doc *d, int index, ir_directive *dir)
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
    char list[512];
    if (!opd)
        return ir_doc_error(d, c->e, "%s has no 'op'; add op: %s (or %s)", c->what,
                            directive_names[0],
                            ir_join_names(list, sizeof list, directive_names + 1));
    const char *op;
    if (ir_load_get_string(c, opd, "op", &op)) return -1;
    int o = ir_directive_of(op);
    if (o < 0) {
        const char *s = ir_suggest(op, directive_names);
        return ir_doc_error(opd, c->e, "%s: unknown op '%s'; %s%s%suse %s", c->what, op,
                            s ? "did you mean '" : "", s ? s : "", s ? "'? " : "",
                            or_list(directive_names, list, sizeof list));
    }
    dir->op = (ir_directive_op)o;
    const ir_directive_info *info = &infos[o];
    snprintf(c->what, sizeof c->what, "directive %d (%s)", index, info->name);
    if (ir_load_check_keys(c, d, info->name, info->known, ir_piper_ignored_keys, info->open))
        return -1;
    bool parsed = false;
    for (const ir_directive_key *k = info->keys; k->key; k++) {
        const ir_doc *v = ir_doc_get(d, k->key);
        /* an alias (the next key, Piper's `device`) stands for the key it spells */
        if (k[1].key && k[1].type == IR_KEY_ALIAS) {
            const ir_doc *alias = ir_doc_get(d, k[1].key);
            if (v && alias)
                return ir_doc_error(alias, c->e, "%s: give '%s' or '%s', not both (they are one "
                                                 "key)",
                                    c->what, k->key, k[1].key);
            if (!v) v = alias;
        }
        if (!v && k->required)
            return ir_doc_error(d, c->e, "%s has no '%s'; %s", c->what, k->key, k->required);
        if (k->type == IR_KEY_SPECIAL) {
            if (!parsed && parsers[o] && parsers[o](c, d, dir)) return -1;
            parsed = true;
            continue;
        }
        if (readers[k->type](c, v, k, dir, (char *)dir + k->offset)) return -1;
    }
    return !parsed && parsers[o] ? parsers[o](c, d, dir) : 0;
}

/* ---------------------------------------------------------------- filters against the file */

/* What the file alone says about a filter: tags the annotations never put on any node, layers
 * and regions the model does not have. Anything subtler waits for the DAG. */
static int check_filter(ir_load_ctx *c, const ir_filter *f)
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

static int check_directive_filters(ir_load_ctx *c, const ir_directive *dir)
{
    snprintf(c->what, sizeof c->what, "directive %d (%s)", dir->index, directive_names[dir->op]);
    for (const ir_directive_key *k = infos[dir->op].keys; k->key; k++)
        if (k->type == IR_KEY_FILTER &&
            check_filter(c, (const ir_filter *)((const char *)dir + k->offset)))
            return -1;
    for (int g = 0; g < dir->ngroups; g++)
        for (int i = 0; i < dir->group_nfilters[g]; i++)
            if (check_filter(c, &dir->groups[g][i])) return -1;
    return 0;
}

/* Piper applies a directive array in phases whatever the order written (its
 * apply_schedule_directives): micro-batching, placements, the parallelisms, then the orders, and
 * fuse_collectives after the orders. piper runs directives in the order written and needs its
 * orders after the directives that shape the DAG: a bare array runs with its orders (and
 * schedules) moved after the rest and fuse_collectives last, the rest as written, each
 * directive keeping its index for messages. */
static int piper_phase(ir_directive_op op)
{
    switch (op) {
    case IR_DIR_ORDER: case IR_DIR_SCHEDULE: return 1;
    case IR_DIR_FUSE_COLLECTIVES: return 2;
    default: return 0;
    }
}

static void sort_piper_phases(ir_program *p)
{
    for (int i = 1; i < p->ndirectives; i++) { /* insertion sort: stable, and arrays are short */
        ir_directive d = p->directives[i];
        int j = i;
        while (j > 0 && piper_phase(p->directives[j - 1].op) > piper_phase(d.op)) {
            p->directives[j] = p->directives[j - 1];
            j--;
        }
        p->directives[j] = d;
    }
}

int ir_load_directives(ir_load_ctx *c, const ir_doc *d)
{
    if (d->kind != IR_DOC_SEQ)
        return ir_doc_error(d, c->e, "directives must be a list of maps, each with an 'op'");
    ir_program *p = c->p;
    /* split's dim_name names the micro-batch tag for every filter, before and after it */
    p->mb_tag = NULL;
    for (int i = 0; i < d->n && !p->mb_tag; i++) {
        const ir_doc *it = d->items[i], *op = ir_doc_get(it, "op");
        if (!op || op->kind != IR_DOC_SCALAR || op->null || !ir_load_ci_eq(op->str, "split"))
            continue;
        const ir_doc *dn = ir_doc_get(it, "dim_name");
        if (!dn) dn = ir_doc_get(it, "dim");
        if (dn && dn->kind == IR_DOC_SCALAR && !dn->null && *dn->str &&
            ir_load_lookup_ci(dn->str, tag_names, IR_NTAGS) < 0)
            p->mb_tag = dn->str;
    }
    p->ndirectives = d->n;
    p->directives = base_arena_calloc(c->a, (size_t)(d->n ? d->n : 1), sizeof *p->directives);
    for (int i = 0; i < d->n; i++)
        if (parse_directive(c, d->items[i], i, &p->directives[i])) {
            ir_load_add_context(c, d->file);
            return -1;
        }
    if (!p->mb_tag) p->mb_tag = "MB";
    if (p->from_piper_array) sort_piper_phases(p);
    return 0;
}

int ir_load_check_filters(ir_load_ctx *c)
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

