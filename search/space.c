/* space.c — the search space: its keys (SEARCH_KEY_TABLE), read from a space file with the
 * project's YAML/JSON reader or from command-line flags, and the values each key takes. A key
 * given twice (file, then flag) takes the flag's values: flags override the file. */
#include "search.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../sched/sched.h"

typedef enum { KIND_INT, KIND_BOOL, KIND_RECOMPUTE, KIND_SCHEDULE } value_kind;

static const struct {
    const char *name;
    value_kind kind;
    const char *doc;
} keys[SEARCH_NKEYS] = {
#define SEARCH_KEY_ROW(id, key, kind, doc) [SEARCH_KEY_##id] = {key, KIND_##kind, doc},
    SEARCH_KEY_TABLE(SEARCH_KEY_ROW)
#undef SEARCH_KEY_ROW
};

static const char *const recompute_names[] = {"none", "selective", "full", NULL};

const char *search_key_name(search_key k) { return (unsigned)k < SEARCH_NKEYS ? keys[k].name : "?"; }
const char *search_key_doc(search_key k) { return (unsigned)k < SEARCH_NKEYS ? keys[k].doc : "?"; }
const char *search_recompute_name(int r) { return r >= 0 && r < 3 ? recompute_names[r] : "?"; }

int search_key_of(const char *name)
{
    for (int k = 0; k < SEARCH_NKEYS; k++)
        if (!strcasecmp(name, keys[k].name)) return k;
    return -1;
}

/* One value of key k from its text into *out; otherwise what to write instead, in why[n]: one
 * reader per kind of value. */
static int parse_int(search_key k, const char *text, int *out, char *why, size_t n)
{
    char *end;
    bool zero = k == SEARCH_KEY_ZERO;
    long v = strtol(text, &end, 10);
    if (end == text || *end || v < (zero ? 0 : 1) || v > (zero ? 3 : 1 << 20)) {
        snprintf(why, n, "%s takes %s, not '%s'", keys[k].name, zero ? "ZeRO stages 0, 1, 2 or 3" : "positive integers",
                 text);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_bool(search_key k, const char *text, int *out, char *why, size_t n)
{
    static const char *const yes[] = {"true", "on", "1"}, *const no[] = {"false", "off", "0"};
    for (int i = 0; i < 3; i++) {
        if (!strcasecmp(text, yes[i])) return *out = 1, 0;
        if (!strcasecmp(text, no[i])) return *out = 0, 0;
    }
    snprintf(why, n, "%s takes true or false, not '%s'", keys[k].name, text);
    return -1;
}

static int parse_recompute(search_key k, const char *text, int *out, char *why, size_t n)
{
    for (int r = 0; recompute_names[r]; r++)
        if (!strcasecmp(text, recompute_names[r])) return *out = r, 0;
    snprintf(why, n, "unknown recompute mode '%s'; use none, selective or full", text);
    return -1;
}

/* A builder's name, as sched/sched.h lists them; "did you mean" from the same list. */
static int parse_schedule(search_key k, const char *text, int *out, char *why, size_t n)
{
    const char *names[32];
    int ns = sched_schedule_count() < 31 ? sched_schedule_count() : 31;
    for (int i = 0; i < ns; i++) {
        names[i] = sched_schedule_name(i);
        if (!strcasecmp(text, names[i])) return *out = i, 0;
    }
    names[ns] = NULL;
    char list[512];
    const char *close = ir_suggest(text, names);
    int at = snprintf(why, n, "unknown schedule '%s'", text);
    if (close && at > 0 && (size_t)at < n) at += snprintf(why + at, n - (size_t)at, "; did you mean '%s'?", close);
    if (at > 0 && (size_t)at < n) snprintf(why + at, n - (size_t)at, " (known: %s)", ir_join_names(list, sizeof list, names));
    return -1;
}

static int (*const parsers[])(search_key, const char *, int *, char *, size_t) = {
    [KIND_INT] = parse_int, [KIND_BOOL] = parse_bool, [KIND_RECOMPUTE] = parse_recompute,
    [KIND_SCHEDULE] = parse_schedule};

static int parse_value(search_key k, const char *text, int *out, char *why, size_t n)
{
    return parsers[keys[k].kind](k, text, out, why, n);
}

static int add_value(search_values *sv, search_key k, int v, char *why, size_t n)
{
    for (int i = 0; i < sv->n; i++)
        if (sv->v[i] == v) return 0; /* a value listed twice is the same candidate */
    if (sv->n >= SEARCH_MAX_VALUES) {
        snprintf(why, n, "%s lists more than %d values; give fewer", keys[k].name, SEARCH_MAX_VALUES);
        return -1;
    }
    sv->v[sv->n++] = v;
    return 0;
}

int search_space_load(search_space *s, const char *path, base_arena *a, base_error *e)
{
    ir_doc *d;
    if (ir_doc_load(a, path, &d, e)) return -1;
    if (d->kind != IR_DOC_MAP)
        return ir_doc_error(d, e, "a search space is a map of keys (tp, pp, zero, ...) to values or lists");
    const char *known[SEARCH_NKEYS + 1];
    for (int k = 0; k < SEARCH_NKEYS; k++) known[k] = keys[k].name;
    known[SEARCH_NKEYS] = NULL;
    if (ir_doc_check_keys(d, "search space", known, NULL, e)) return -1;
    for (int i = 0; i < d->n; i++) {
        search_key k = (search_key)search_key_of(d->keys[i]->str);
        const ir_doc *v = d->items[i];
        search_values *sv = &s->key[k];
        memset(sv, 0, sizeof *sv);
        sv->file = v->file;
        sv->line = v->line;
        sv->col = v->col;
        if (v->kind == IR_DOC_SCALAR && v->null) continue; /* `tp:` alone: the default */
        int nitems = v->kind == IR_DOC_SEQ ? v->n : 1;
        for (int j = 0; j < nitems; j++) {
            const ir_doc *item = v->kind == IR_DOC_SEQ ? v->items[j] : v;
            char why[640];
            int x;
            if (item->kind != IR_DOC_SCALAR)
                return ir_doc_error(item, e, "%s takes a value or a list of values", keys[k].name);
            if (parse_value(k, item->str, &x, why, sizeof why) || add_value(sv, k, x, why, sizeof why))
                return ir_doc_error(item, e, "%s", why);
        }
    }
    return 0;
}

int search_space_set(search_space *s, search_key k, const char *list, const char *flag, base_error *e)
{
    search_values *sv = &s->key[k];
    memset(sv, 0, sizeof *sv);
    sv->file = flag;
    const char *p = list;
    for (;;) {
        size_t len = strcspn(p, ",");
        char text[64], why[640];
        int x;
        if (len == 0 || len >= sizeof text)
            return base_errorf(e, "%s %s: give a comma-separated list of values, e.g. %s %s", flag, list, flag,
                               keys[k].kind == KIND_INT ? "1,2,4" : keys[k].kind == KIND_BOOL ? "true,false"
                                                                  : keys[k].kind == KIND_RECOMPUTE ? "none,full"
                                                                                                   : "1f1b,zbv");
        memcpy(text, p, len);
        text[len] = 0;
        if (parse_value(k, text, &x, why, sizeof why) || add_value(sv, k, x, why, sizeof why))
            return base_errorf(e, "%s %s: %s", flag, list, why);
        if (!p[len]) break;
        p += len + 1;
    }
    return 0;
}

int search_space_fix(search_space *s, const char *spec, base_error *e)
{
    const char *eq = strchr(spec, '=');
    char name[32];
    size_t len = eq ? (size_t)(eq - spec) : 0;
    if (!eq || len == 0 || len >= sizeof name || !eq[1] || strchr(eq + 1, ','))
        return base_errorf(e, "--fix %s: write KEY=VALUE with one value, e.g. --fix pp=8", spec);
    memcpy(name, spec, len);
    name[len] = 0;
    int k = search_key_of(name);
    if (k < 0) {
        const char *known[SEARCH_NKEYS + 1];
        for (int i = 0; i < SEARCH_NKEYS; i++) known[i] = keys[i].name;
        known[SEARCH_NKEYS] = NULL;
        char list[256];
        return base_errorf(e, "--fix %s: unknown key '%s'; use one of %s", spec, name,
                           ir_join_names(list, sizeof list, known));
    }
    return search_space_set(s, (search_key)k, eq + 1, "--fix", e);
}
