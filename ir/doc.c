/* doc.c — the document tree that YAML and JSON both load into (see doc.h): the builder the two
 * readers share, map lookup, typed reads of scalars (integers, numbers, booleans, strings, byte
 * sizes, rates, durations), the key schema check, and errors placed at a node's position.
 *
 * Every read is strict on purpose: a config value that piper half-understands (a unit it does not
 * know, an integer that overflowed, "24" in quotes where a number was meant) is reported at its
 * line and column rather than silently turned into something else. */
#include "doc_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- builder */

void doc_builder_init(doc_builder *b, base_arena *a, const char *file, base_error *e)
{
    memset(b, 0, sizeof *b);
    b->a = a;
    b->file = file;
    b->e = e;
}

void doc_builder_free(doc_builder *b)
{
    for (int i = 0; i < IR_DOC_MAX_DEPTH; i++) {
        free(b->stack[i].keys.v);
        free(b->stack[i].items.v);
        memset(&b->stack[i], 0, sizeof b->stack[i]);
    }
    b->depth = 0;
}

ir_doc *doc_builder_node(doc_builder *b, ir_doc_kind kind, int line, int col)
{
    ir_doc *n = base_arena_alloc(b->a, sizeof *n);
    n->kind = kind;
    n->file = b->file;
    n->line = line;
    n->col = col;
    return n;
}

static const char *kind_phrase(ir_doc_kind k)
{
    return k == IR_DOC_MAP ? "a map" : k == IR_DOC_SEQ ? "a list" : "a value";
}

static int builder_add(doc_builder *b, ir_doc *n)
{
    if (b->depth == 0) {
        if (b->root)
            return ir_doc_error(n, b->e, "a second value after the end of the document; "
                                         "a file holds one map or list");
        b->root = n;
        return 0;
    }
    doc_frame *f = &b->stack[b->depth - 1];
    if (f->node->kind == IR_DOC_SEQ) {
        BASE_VEC_PUSH(f->items, n);
        return 0;
    }
    if (!f->pending_key) {
        if (n->kind != IR_DOC_SCALAR)
            return ir_doc_error(n, b->e, "a map key must be a plain value, not %s; "
                                         "write a name followed by ':'", kind_phrase(n->kind));
        if (!n->quoted && n->str[0] == 0)
            return ir_doc_error(n, b->e, "a map key is empty; write a name before ':'");
        f->pending_key = n;
        return 0;
    }
    BASE_VEC_PUSH(f->keys, f->pending_key);
    BASE_VEC_PUSH(f->items, n);
    f->pending_key = NULL;
    return 0;
}

int doc_builder_scalar(doc_builder *b, ir_doc *scalar) { return builder_add(b, scalar); }

int doc_builder_open(doc_builder *b, ir_doc_kind kind, int line, int col)
{
    if (b->depth > 0) {
        doc_frame *top = &b->stack[b->depth - 1];
        if (top->node->kind == IR_DOC_MAP && !top->pending_key)
            return base_error_at(b->e, b->file, line, col,
                                 "a map key must be a plain value, not %s; "
                                 "write a name followed by ':'", kind_phrase(kind));
    }
    if (b->depth >= IR_DOC_MAX_DEPTH)
        return base_error_at(b->e, b->file, line, col,
                             "the document nests deeper than %d levels; flatten it",
                             IR_DOC_MAX_DEPTH);
    doc_frame *f = &b->stack[b->depth++];
    f->node = doc_builder_node(b, kind, line, col);
    f->keys.n = 0;
    f->items.n = 0;
    f->pending_key = NULL;
    return 0;
}

typedef struct key_ref {
    const char *s;
    int idx;
} key_ref;

static int key_ref_cmp(const void *pa, const void *pb)
{
    const key_ref *x = pa, *y = pb;
    int c = strcmp(x->s, y->s);
    if (c) return c;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* Sorting keeps huge maps (a fuzzer's favourite) at n log n; the reported pair is the one whose
 * repeat comes first in the file, which is what a reader scanning top-down expects. */
static int check_duplicates(doc_builder *b, ir_doc *const *keys, size_t n)
{
    if (n < 2) return 0;
    key_ref *refs = base_xmalloc(n * sizeof *refs);
    for (size_t i = 0; i < n; i++) {
        refs[i].s = keys[i]->str;
        refs[i].idx = (int)i;
    }
    qsort(refs, n, sizeof *refs, key_ref_cmp);
    int first = -1, second = -1;
    for (size_t i = 0; i + 1 < n;) {
        size_t j = i + 1;
        while (j < n && strcmp(refs[j].s, refs[i].s) == 0) j++;
        if (j - i >= 2 && (second < 0 || refs[i + 1].idx < second)) {
            first = refs[i].idx;
            second = refs[i + 1].idx;
        }
        i = j;
    }
    free(refs);
    if (second < 0) return 0;
    const ir_doc *k1 = keys[first], *k2 = keys[second];
    return ir_doc_error(k2, b->e, "duplicate key '%s': it is also at %d:%d; keep one of them",
                        k2->str, k1->line, k1->col);
}

int doc_builder_close(doc_builder *b)
{
    if (b->depth == 0) return base_errorf(b->e, "internal error: closing a container never opened");
    doc_frame *f = &b->stack[b->depth - 1];
    ir_doc *n = f->node;
    if (n->kind == IR_DOC_MAP) {
        if (f->pending_key)
            return ir_doc_error(f->pending_key, b->e, "key '%s' has no value; write one after ':'",
                                f->pending_key->str);
        if (check_duplicates(b, f->keys.v, f->keys.n)) return -1;
        n->keys = base_arena_calloc(b->a, f->keys.n, sizeof *n->keys);
        if (f->keys.n) memcpy(n->keys, f->keys.v, f->keys.n * sizeof *n->keys);
    }
    n->n = (int)f->items.n;
    n->items = base_arena_calloc(b->a, f->items.n, sizeof *n->items);
    if (f->items.n) memcpy(n->items, f->items.v, f->items.n * sizeof *n->items);
    f->node = NULL;
    f->keys.n = f->items.n = 0;
    b->depth--;
    return builder_add(b, n);
}

/* ---------------------------------------------------------------- parse / load */

int ir_doc_parse(base_arena *a, const char *name, const char *text, size_t len, ir_doc **out,
                 base_error *e)
{
    *out = NULL;
    if (!text) len = 0;
    size_t i = 0;
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) i = 3;
    while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n'))
        i++;
    if (i < len && (text[i] == '{' || text[i] == '['))
        return ir_doc_parse_json(a, name, text, len, out, e);
    return ir_doc_parse_yaml(a, name, text ? text : "", len, out, e);
}

int ir_doc_load(base_arena *a, const char *path, ir_doc **out, base_error *e)
{
    base_buf buf = {0};
    *out = NULL;
    if (base_read_file(path, &buf, e)) {
        base_buf_free(&buf);
        return -1;
    }
    int rc = ir_doc_parse(a, path, buf.s, buf.n, out, e);
    base_buf_free(&buf);
    return rc;
}

/* ---------------------------------------------------------------- lookup and errors */

ir_doc *ir_doc_get(const ir_doc *map, const char *key)
{
    if (!map || map->kind != IR_DOC_MAP || !key) return NULL;
    for (int i = 0; i < map->n; i++)
        if (strcmp(map->keys[i]->str, key) == 0) return map->items[i];
    return NULL;
}

int ir_doc_error(const ir_doc *d, base_error *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    base_error_vat(e, d ? d->file : NULL, d ? d->line : 0, d ? d->col : 0, fmt, ap);
    va_end(ap);
    return -1;
}

void ir_doc_warn(const ir_doc *d, base_error *e, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    base_warn_at(e, d ? d->file : NULL, d ? d->line : 0, d ? d->col : 0, "%s", msg);
}

/* ---------------------------------------------------------------- typed reads */

/* How a value appears in a message: short, one line, never cut inside a UTF-8 character.
 * buf must hold SHOW_MAX bytes: 48 characters, each at worst 4 bytes, plus quotes and "...". */
enum { SHOW_LIMIT = 48, SHOW_MAX = 256 };

static const char *show_value(const ir_doc *d, char *buf)
{
    if (!d) return "nothing";
    if (d->kind != IR_DOC_SCALAR) return kind_phrase(d->kind);
    if (d->null && !d->quoted && d->str[0] == 0) return "nothing";
    size_t o = 0, i = 0;
    const unsigned char *s = (const unsigned char *)d->str;
    buf[o++] = '\'';
    for (; s[i]; i++) {
        unsigned char c = s[i];
        if (i >= SHOW_LIMIT && ((c & 0xC0) != 0x80 || i >= SHOW_LIMIT + 3)) break;
        if (c == '\n') {
            buf[o++] = '\\';
            buf[o++] = 'n';
        } else if (c < 0x20 || c == 0x7F) {
            o += (size_t)snprintf(buf + o, SHOW_MAX - o, "\\x%02X", c);
        } else {
            buf[o++] = (char)c;
        }
    }
    if (s[i]) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o++] = '\'';
    buf[o] = 0;
    return buf;
}

static int expected(const ir_doc *d, const char *what, const char *kind, const char *hint,
                    base_error *e)
{
    char shown[SHOW_MAX];
    const char *w = what ? what : "value";
    if (!d)
        return base_errorf(e, "missing %s for '%s'; %s", kind, w, hint);
    if (d->kind == IR_DOC_SCALAR && d->quoted)
        return ir_doc_error(d, e, "expected %s for '%s', got the quoted text %s; %s", kind, w,
                            show_value(d, shown), hint);
    return ir_doc_error(d, e, "expected %s for '%s', got %s; %s", kind, w,
                        show_value(d, shown), hint);
}

/* A plain (unquoted, non-null) scalar, or NULL. */
static const char *plain_text(const ir_doc *d)
{
    if (!d || d->kind != IR_DOC_SCALAR || d->quoted || d->null) return NULL;
    return d->str;
}

/* Length of the longest prefix of s that is a decimal number: [+-]? (D+ (. D*)? | . D+)
 * ([eE] [+-]? D+)?; 0 when there is none. Hex, inf and nan are deliberately not numbers. */
static size_t scan_number(const char *s)
{
    size_t i = 0, digits = 0;
    if (s[i] == '+' || s[i] == '-') i++;
    while (s[i] >= '0' && s[i] <= '9') i++, digits++;
    if (s[i] == '.') {
        size_t j = i + 1, frac = 0;
        while (s[j] >= '0' && s[j] <= '9') j++, frac++;
        if (digits || frac) {
            i = j;
            digits += frac;
        }
    }
    if (!digits) return 0;
    if (s[i] == 'e' || s[i] == 'E') {
        size_t j = i + 1;
        if (s[j] == '+' || s[j] == '-') j++;
        if (s[j] >= '0' && s[j] <= '9') {
            while (s[j] >= '0' && s[j] <= '9') j++;
            i = j;
        }
    }
    return i;
}

/* Converts exactly the n characters scan_number accepted. */
static double number_value(const char *s, size_t n)
{
    char small[64];
    char *tmp = n < sizeof small ? small : base_xmalloc(n + 1);
    memcpy(tmp, s, n);
    tmp[n] = 0;
    double v = strtod(tmp, NULL);
    if (tmp != small) free(tmp);
    return v;
}

enum { PARSE_OK = 0, PARSE_SYNTAX = -1, PARSE_RANGE = -2 };

static int parse_int(const char *s, int64_t *out)
{
    size_t n = scan_number(s);
    if (n == 0 || s[n] != 0) return PARSE_SYNTAX;
    bool neg = s[0] == '-';
    size_t i = (s[0] == '+' || s[0] == '-') ? 1 : 0;
    bool plain = true;
    for (size_t j = i; j < n; j++)
        if (s[j] < '0' || s[j] > '9') plain = false;
    if (plain) {
        uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, v = 0;
        for (; i < n; i++) {
            unsigned dgt = (unsigned)(s[i] - '0');
            if (v > (limit - dgt) / 10) return PARSE_RANGE;
            v = v * 10 + dgt;
        }
        *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
        return PARSE_OK;
    }
    /* 1e6, 2.5e3: accepted when the value is whole, as people write large counts that way */
    double v = number_value(s, n);
    if (!isfinite(v) || v >= 9223372036854775808.0 || v < -9223372036854775808.0)
        return PARSE_RANGE;
    if (v != floor(v)) return PARSE_SYNTAX;
    *out = (int64_t)v;
    return PARSE_OK;
}

int ir_doc_int(const ir_doc *d, const char *what, int64_t *out, base_error *e)
{
    const char *s = plain_text(d);
    int rc = s ? parse_int(s, out) : PARSE_SYNTAX;
    if (rc == PARSE_OK) return 0;
    if (rc == PARSE_RANGE) {
        char shown[SHOW_MAX];
        return ir_doc_error(d, e, "expected an integer for '%s', got %s, which does not fit in "
                                  "64 bits; write a smaller whole number",
                            what ? what : "value", show_value(d, shown));
    }
    return expected(d, what, "an integer", d && d->quoted ? "write the number without quotes"
                                                          : "write a whole number like 24", e);
}

int ir_doc_num(const ir_doc *d, const char *what, double *out, base_error *e)
{
    const char *s = plain_text(d);
    size_t n = s ? scan_number(s) : 0;
    if (n == 0 || s[n] != 0)
        return expected(d, what, "a number", d && d->quoted ? "write the number without quotes"
                                                            : "write a number like 1.5 or 1e9", e);
    double v = number_value(s, n);
    if (!isfinite(v)) {
        char shown[SHOW_MAX];
        return ir_doc_error(d, e, "expected a number for '%s', got %s, which is too large; "
                                  "write a finite number", what ? what : "value",
                            show_value(d, shown));
    }
    *out = v;
    return 0;
}

static bool ieq(const char *a, const char *b)
{
    for (; *a && *b; a++, b++) {
        char x = *a, y = *b;
        if (x >= 'A' && x <= 'Z') x = (char)(x - 'A' + 'a');
        if (y >= 'A' && y <= 'Z') y = (char)(y - 'A' + 'a');
        if (x != y) return false;
    }
    return *a == *b;
}

int ir_doc_bool(const ir_doc *d, const char *what, bool *out, base_error *e)
{
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
    const char *s = plain_text(d);
    for (size_t i = 0; s && i < BASE_COUNT(yes); i++) {
        if (ieq(s, yes[i])) return *out = true, 0;
        if (ieq(s, no[i])) return *out = false, 0;
    }
    return expected(d, what, "true or false", d && d->quoted ? "write true or false without quotes"
                                                             : "write true or false", e);
}

int ir_doc_string(const ir_doc *d, const char *what, const char **out, base_error *e)
{
    if (!d || d->kind != IR_DOC_SCALAR || (d->null && !d->quoted))
        return expected(d, what, "a string", "write some text after the key", e);
    *out = d->str;
    return 0;
}

/* A unit scales by mult / div: dividing by 1e9 rather than multiplying by 1e-9 keeps "500ns"
 * exactly the double nearest 5e-7. div 0 means 1. */
typedef struct unit {
    const char *name;
    double mult, div;
} unit;

static const unit unit_prefixes[] = {
    {"Ki", 1024.0, 1}, {"Mi", 1048576.0, 1}, {"Gi", 1073741824.0, 1},
    {"Ti", 1099511627776.0, 1}, {"Pi", 1125899906842624.0, 1}, {"k", 1e3, 1}, {"K", 1e3, 1},
    {"M", 1e6, 1}, {"G", 1e9, 1}, {"T", 1e12, 1}, {"P", 1e15, 1}, {"E", 1e18, 1}, {"", 1, 1},
};

/* Matches prefix + one of `bases` exactly; the prefix table includes "" so bare bases match. */
static bool unit_lookup(const char *u, const unit *bases, size_t nbases, bool prefixes,
                        double *mult, double *div)
{
    size_t np = prefixes ? BASE_COUNT(unit_prefixes) : 1;
    for (size_t p = 0; p < np; p++) {
        const unit *pre = prefixes ? &unit_prefixes[p] : &unit_prefixes[BASE_COUNT(unit_prefixes) - 1];
        size_t lp = strlen(pre->name);
        if (strncmp(u, pre->name, lp) != 0) continue;
        for (size_t b = 0; b < nbases; b++)
            if (strcmp(u + lp, bases[b].name) == 0) {
                *mult = pre->mult * bases[b].mult;
                *div = bases[b].div ? bases[b].div : 1.0;
                return true;
            }
    }
    return false;
}

typedef enum { QTY_BYTES, QTY_RATE, QTY_SECONDS } quantity;

static int read_quantity(const ir_doc *d, const char *what, quantity q, double *out, base_error *e)
{
    static const unit bytes[] = {{"B", 1.0, 1.0}};
    static const unit rates[] = {{"B/s", 1, 1},   {"Bps", 1, 1},    {"b/s", 1, 8},
                                 {"bps", 1, 8},   {"FLOPS", 1, 1},  {"FLOP/s", 1, 1},
                                 {"FLOPs", 1, 1}, {"flops", 1, 1},  {"flop/s", 1, 1}};
    static const unit times[] = {{"ns", 1, 1e9},          {"us", 1, 1e6},
                                 {"\xC2\xB5s", 1, 1e6}, {"\xCE\xBCs", 1, 1e6},
                                 {"ms", 1, 1e3},          {"s", 1, 1}};
    static const char *const kinds[] = {"a byte size", "a rate", "a duration"};
    static const char *const hints[] = {
        "write a number with an optional unit, like 80GB, 80 GiB or 1.5e9",
        "write a number with a unit, like 450GB/s, 400Gb/s or 312TFLOPS",
        "write a number with a unit, like 2us, 1.5 ms or 500ns (a plain number is seconds)"};
    const char *w = what ? what : "value";
    char shown[SHOW_MAX];

    const char *s = (d && d->kind == IR_DOC_SCALAR && !(d->null && !d->quoted)) ? d->str : NULL;
    size_t n = s ? scan_number(s) : 0;
    if (n == 0) return expected(d, what, kinds[q], hints[q], e);
    const char *u = s + n;
    while (*u == ' ') u++;
    double mult = 1.0, div = 1.0;
    bool ok = true;
    if (*u) {
        if (q == QTY_BYTES) ok = unit_lookup(u, bytes, BASE_COUNT(bytes), true, &mult, &div);
        else if (q == QTY_RATE) ok = unit_lookup(u, rates, BASE_COUNT(rates), true, &mult, &div);
        else ok = unit_lookup(u, times, BASE_COUNT(times), false, &mult, &div);
    }
    if (!ok) {
        size_t ul = strlen(u);
        if (q == QTY_BYTES && ul && u[ul - 1] == 'b')
            return ir_doc_error(d, e, "expected a byte size for '%s', got %s; 'b' means bits, "
                                      "write B for bytes (80GB, 80GiB)", w,
                                show_value(d, shown));
        return ir_doc_error(d, e, "expected %s for '%s', got %s, whose unit is not known; %s",
                            kinds[q], w, show_value(d, shown), hints[q]);
    }
    double v = number_value(s, n) * mult / div;
    if (!isfinite(v))
        return ir_doc_error(d, e, "expected %s for '%s', got %s, which is too large; %s",
                            kinds[q], w, show_value(d, shown), hints[q]);
    if (v < 0)
        return ir_doc_error(d, e, "expected %s for '%s', got %s, which is negative; write zero "
                                  "or more", kinds[q], w, show_value(d, shown));
    *out = v + 0.0; /* no -0 */
    return 0;
}

int ir_doc_bytes(const ir_doc *d, const char *what, double *out, base_error *e)
{
    return read_quantity(d, what, QTY_BYTES, out, e);
}

int ir_doc_rate(const ir_doc *d, const char *what, double *out, base_error *e)
{
    return read_quantity(d, what, QTY_RATE, out, e);
}

int ir_doc_seconds(const ir_doc *d, const char *what, double *out, base_error *e)
{
    return read_quantity(d, what, QTY_SECONDS, out, e);
}

/* ---------------------------------------------------------------- schema check */

/* Edit distance with adjacent transpositions counted as one edit ("layres" -> "layers"),
 * ignoring case; gives up (returns limit + 1) on long strings, which never are typos of a key. */
static int edit_distance(const char *a, const char *b, int limit)
{
    enum { MAXLEN = 64 };
    size_t la = strlen(a), lb = strlen(b);
    if (la > MAXLEN || lb > MAXLEN) return limit + 1;
    if ((la > lb ? la - lb : lb - la) > (size_t)limit) return limit + 1;
    int d[MAXLEN + 1][MAXLEN + 1];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            char x = a[i - 1], y = b[j - 1];
            if (x >= 'A' && x <= 'Z') x = (char)(x - 'A' + 'a');
            if (y >= 'A' && y <= 'Z') y = (char)(y - 'A' + 'a');
            int best = d[i - 1][j - 1] + (x != y);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb];
}

static bool in_list(const char *const *list, const char *s)
{
    for (; list && *list; list++)
        if (strcmp(*list, s) == 0) return true;
    return false;
}

int ir_doc_check_keys(const ir_doc *map, const char *what, const char *const *known,
                      const char *const *ignored, base_error *e)
{
    const char *w = what ? what : "this map";
    if (!map || map->kind != IR_DOC_MAP) {
        char shown[SHOW_MAX];
        if (!map) return base_errorf(e, "missing %s; write a map of settings", w);
        return ir_doc_error(map, e, "expected a map for %s, got %s; write 'key: value' lines",
                            w, show_value(map, shown));
    }
    for (int i = 0; i < map->n; i++) {
        const ir_doc *k = map->keys[i];
        if (in_list(known, k->str)) continue;
        if (in_list(ignored, k->str)) {
            ir_doc_warn(k, e, "key '%s' is part of Piper's schema but piper ignores it", k->str);
            continue;
        }
        const char *close = NULL;
        int best = 3;
        for (const char *const *q = known; q && *q; q++) {
            int dist = edit_distance(k->str, *q, 2);
            if (dist < best) {
                best = dist;
                close = *q;
            }
        }
        base_buf list = {0};
        for (const char *const *q = known; q && *q; q++)
            base_buf_printf(&list, "%s%s", q == known ? "" : ", ", *q);
        char shown[SHOW_MAX];
        ir_doc tmp = *k;
        tmp.null = false;
        tmp.quoted = false;
        show_value(&tmp, shown);
        if (!list.s)
            ir_doc_error(k, e, "unknown key %s in %s; it takes no keys", shown, w);
        else if (close)
            ir_doc_error(k, e, "unknown key %s in %s; did you mean '%s'? (known keys: %s)", shown,
                         w, close, list.s);
        else
            ir_doc_error(k, e, "unknown key %s in %s; known keys: %s", shown, w, list.s);
        base_buf_free(&list);
        return -1;
    }
    return 0;
}
