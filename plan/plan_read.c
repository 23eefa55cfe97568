/* plan_read.c — reads a plan's file form (docs/plan-format.md) back into memory.
 *
 * The reader is the trust boundary for plans handed between tools and machines: it checks every
 * index that a consumer would follow, bounds every count by what the file can still hold before
 * allocating for it, and never crashes on any bytes (it is fuzzed). Fields an op does not
 * interpret are kept as they are, so that any in-memory plan round-trips exactly. */
#include "plan.h"
#include "plan_text.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- reader: lines and tokens */

typedef struct tok {
    const char *k, *v; /* k is NULL for a positional token */
    uint32_t klen, vlen;
    int quoted;
} tok;

typedef struct reader {
    const char *name, *s;
    size_t len, pos;
    long line, total_lines;
    tok *t;
    int nt, capt;
    base_buf scratch;
    base_error *e;
    plan_set *p;
} reader;

static int rd_err(reader *r, const char *fmt, ...) BASE_PRINTF(2, 3);
static int rd_err(reader *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    base_error_vat(r->e, r->name, r->line > INT_MAX ? INT_MAX : (int)r->line, 0, fmt, ap);
    va_end(ap);
    return -1;
}

static long rd_lines_left(const reader *r) { return r->total_lines - r->line; }

/* A token as it was written, for messages: at most 40 bytes, printable. */
static const char *tok_show(const tok *t, char *buf, size_t n)
{
    const char *from = t->quoted ? t->v - 1 : t->v;
    size_t len = (size_t)(t->v + t->vlen - from) + (t->quoted ? 1 : 0);
    size_t o = 0;
    for (size_t i = 0; i < len && o + 4 < n; i++) {
        if (i == 40) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        char c = from[i];
        buf[o++] = c >= 0x20 && c < 0x7f ? c : '?';
    }
    buf[o] = 0;
    return buf;
}

static int rd_tokenize(reader *r, size_t i, size_t end)
{
    const char *s = r->s;
    r->nt = 0;
    while (i < end) {
        unsigned char c = (unsigned char)s[i];
        if (c == ' ' || c == '\t') {
            i++;
            continue;
        }
        tok t = {0};
        size_t j = i;
        if (plan_text_is_key_start(c)) {
            size_t q = i + 1;
            while (q < end && plan_text_is_key_char((unsigned char)s[q])) q++;
            if (q < end && s[q] == '=') {
                t.k = s + i;
                t.klen = (uint32_t)(q - i);
                j = q + 1;
            }
        }
        if (j < end && s[j] == '"') {
            size_t q = j + 1;
            while (q < end && s[q] != '"') {
                unsigned char ch = (unsigned char)s[q];
                if (ch < 0x20 || ch > 0x7e)
                    return rd_err(r, "byte 0x%02x inside a quoted string; write it as \\x%02x", ch, ch);
                q += ch == '\\' ? 2 : 1;
            }
            if (q >= end) return rd_err(r, "a quoted string is not closed on its line; add the closing '\"'");
            t.v = s + j + 1;
            t.vlen = (uint32_t)(q - j - 1);
            t.quoted = 1;
            j = q + 1;
            if (j < end && s[j] != ' ' && s[j] != '\t')
                return rd_err(r, "text follows a closing quote without a space; separate fields with spaces");
        } else {
            size_t q = j;
            while (q < end && s[q] != ' ' && s[q] != '\t') {
                unsigned char ch = (unsigned char)s[q];
                if (ch == '"') return rd_err(r, "a quote inside a bare word; quote the whole value");
                if (ch < 0x20 || ch > 0x7e)
                    return rd_err(r, "unexpected byte 0x%02x; plan files are ASCII text (quote and escape "
                                     "other bytes as \\xHH)", ch);
                q++;
            }
            t.v = s + j;
            t.vlen = (uint32_t)(q - j);
            j = q;
        }
        if (r->nt == r->capt) {
            r->capt = r->capt ? 2 * r->capt : 32;
            r->t = base_xrealloc(r->t, (size_t)r->capt * sizeof *r->t);
        }
        r->t[r->nt++] = t;
        i = j;
    }
    return 0;
}

/* Moves to the next line that is not blank or a comment and tokenises it: 1, or 0 at the end of
 * the text, or -1 on a lexical error. */
static int rd_next(reader *r)
{
    for (;;) {
        if (r->pos >= r->len) {
            r->nt = 0;
            return 0;
        }
        size_t start = r->pos;
        const char *nl = memchr(r->s + start, '\n', r->len - start);
        size_t end = nl ? (size_t)(nl - r->s) : r->len;
        r->pos = nl ? end + 1 : r->len;
        r->line++;
        if (end > start && r->s[end - 1] == '\r') end--;
        size_t i = start;
        while (i < end && (r->s[i] == ' ' || r->s[i] == '\t')) i++;
        if (i == end || r->s[i] == '#') continue;
        if (rd_tokenize(r, i, end)) return -1;
        return 1;
    }
}

static int tok_is(const tok *t, const char *word)
{
    size_t n = strlen(word);
    return !t->k && !t->quoted && t->vlen == n && memcmp(t->v, word, n) == 0;
}

static int key_is(const tok *t, const char *key)
{
    size_t n = strlen(key);
    return t->k && t->klen == n && memcmp(t->k, key, n) == 0;
}

/* ---------------------------------------------------------------- reader: values */

/* A bare decimal integer ("-12"); 0, or -1 when the token is anything else or overflows. */
static int parse_int(const tok *t, int64_t *out)
{
    const char *v = t->v;
    uint32_t n = t->vlen, i = 0;
    int neg = 0;
    if (t->quoted) return -1;
    if (n > 0 && v[0] == '-') neg = 1, i = 1;
    if (i >= n) return -1;
    uint64_t u = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < n; i++) {
        if (v[i] < '0' || v[i] > '9' || u > (lim - (uint64_t)(v[i] - '0')) / 10) return -1;
        u = u * 10 + (uint64_t)(v[i] - '0');
    }
    *out = !neg ? (int64_t)u : u == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)u;
    return 0;
}

static int rd_i64(reader *r, const tok *t, const char *what, int64_t lo, int64_t hi, int64_t *out)
{
    char show[64];
    int64_t x = 0;
    int ok = parse_int(t, &x) == 0;
    if (!ok || x < lo || x > hi)
        return rd_err(r, "%s: '%s' is not an integer in [%" PRId64 ", %" PRId64 "]; write a whole number in range",
                      what, tok_show(t, show, sizeof show), lo, hi);
    *out = x;
    return 0;
}

static int rd_i32(reader *r, const tok *t, const char *what, int32_t lo, int32_t hi, int32_t *out)
{
    int64_t x;
    if (rd_i64(r, t, what, lo, hi, &x)) return -1;
    *out = (int32_t)x;
    return 0;
}

/* A figure of the plan (a bandwidth, a peak, a kernel's FLOPs or bytes, a calibration constant):
 * finite and >= 0, or > 0 where `positive` (a bandwidth of 0 would make every transfer take
 * forever, and SimGrid aborts on it), by base/'s number rules, with the line and the key named. */
static int rd_f64(reader *r, const tok *t, const char *what, bool positive, double *out)
{
    char buf[64], show[64], why[96];
    const base_range range = {0, HUGE_VAL, positive, 0};
    if (t->quoted || t->vlen == 0 || t->vlen >= sizeof buf)
        return rd_err(r, "%s: '%s' is not a number; write a decimal number such as 1.5e12", what,
                      tok_show(t, show, sizeof show));
    memcpy(buf, t->v, t->vlen);
    buf[t->vlen] = 0;
    if (base_parse_double(buf, range, out, why, sizeof why))
        return rd_err(r, "%s: '%s' %s; write a %s decimal number such as 1.5e12", what, tok_show(t, show, sizeof show),
                      why, positive ? "positive" : "finite, non-negative");
    return 0;
}

/* Decodes a quoted token's escapes into r->scratch (NUL-terminated). */
static int rd_unescape(reader *r, const tok *t)
{
    r->scratch.n = 0;
    base_buf_putn(&r->scratch, "", 0);
    for (uint32_t i = 0; i < t->vlen; i++) {
        char c = t->v[i];
        if (c != '\\') {
            base_buf_putn(&r->scratch, &c, 1);
            continue;
        }
        if (++i >= t->vlen) return rd_err(r, "a string ends in a lone backslash; write \\\\ for a backslash");
        switch (t->v[i]) {
        case '"': c = '"'; break;
        case '\\': c = '\\'; break;
        case 'n': c = '\n'; break;
        case 't': c = '\t'; break;
        case 'r': c = '\r'; break;
        case 'x': {
            int val = 0;
            for (int h = 0; h < 2; h++) {
                char d = ++i < t->vlen ? t->v[i] : 0;
                int dv = d >= '0' && d <= '9' ? d - '0' : d >= 'a' && d <= 'f' ? d - 'a' + 10
                       : d >= 'A' && d <= 'F' ? d - 'A' + 10 : -1;
                if (dv < 0) return rd_err(r, "bad \\x escape in a string; write two hex digits, e.g. \\x7f");
                val = val * 16 + dv;
            }
            if (val == 0) return rd_err(r, "\\x00 in a string; names cannot contain NUL bytes");
            c = (char)val;
            break;
        }
        default:
            return rd_err(r, "unknown escape '\\%c' in a string; use \\\" \\\\ \\n \\t \\r or \\xHH",
                          t->v[i] >= 0x20 && t->v[i] < 0x7f ? t->v[i] : '?');
        }
        base_buf_putn(&r->scratch, &c, 1);
    }
    return 0;
}

/* A string field: `~` is NULL, quoted strings are unescaped; copied into the plan's arena. */
static int rd_str(reader *r, const tok *t, const char **out)
{
    if (!t->quoted) {
        *out = t->vlen == 1 && t->v[0] == '~' ? NULL : base_arena_strndup(&r->p->arena, t->v, t->vlen);
        return 0;
    }
    if (rd_unescape(r, t)) return -1;
    *out = base_arena_strndup(&r->p->arena, r->scratch.s, r->scratch.n);
    return 0;
}

/* A reference: `#n` is the index n (any int32: range is checked where the field is used), any
 * other token a name looked up in ix; -2 (with an error) when the name is unknown. */
static int rd_ref(reader *r, const tok *t, const char *what, const plan_text_name_index *ix, int32_t *out)
{
    char show[64];
    if (!t->quoted && t->vlen > 0 && t->v[0] == '#') {
        tok num = *t;
        num.v++, num.vlen--;
        num.k = NULL;
        return rd_i32(r, &num, what, INT32_MIN, INT32_MAX, out);
    }
    const char *nm = t->v;
    size_t n = t->vlen;
    if (t->quoted) {
        if (rd_unescape(r, t)) return -1;
        nm = r->scratch.s, n = r->scratch.n;
    }
    int i = plan_text_name_index_find(ix, nm, n);
    if (i < 0)
        return rd_err(r, "%s: no %s is named '%s'; use a name declared above or #index", what, what,
                      tok_show(t, show, sizeof show));
    *out = i;
    return 0;
}

/* The index of an enumeration's value named by t, -1 when none is. */
static int enum_find(const tok *t, const char *(*name_of)(int), int n)
{
    for (int i = 0; i < n && !t->quoted; i++) {
        const char *nm = name_of(i);
        size_t ln = strlen(nm);
        if (ln == t->vlen && memcmp(nm, t->v, ln) == 0) return i;
    }
    return -1;
}

/* Every name of an enumeration, comma-separated, for messages. */
static const char *enum_names(const char *(*name_of)(int), int n, char *names, size_t size)
{
    size_t o = 0;
    names[0] = 0;
    for (int i = 0; i < n && o + 1 < size; i++)
        o += (size_t)snprintf(names + o, size - o, "%s%s", i ? ", " : "", name_of(i));
    return names;
}

static int rd_enum(reader *r, const tok *t, const char *what, const char *(*name_of)(int), int n, int *out)
{
    char show[64], names[256];
    int i = enum_find(t, name_of, n);
    *out = i >= 0 ? i : 0;
    if (i >= 0) return 0;
    return rd_err(r, "%s: unknown value '%s'; use one of %s", what, tok_show(t, show, sizeof show),
                  enum_names(name_of, n, names, sizeof names));
}

static const char *dtype_of(int i) { return plan_dtype_name((plan_dtype)i); }
static const char *op_of(int i) { return plan_op_name((plan_op)i); }
static const char *pass_of(int i) { return plan_pass_name((plan_pass)i); }
static const char *coll_of(int i) { return plan_coll_name((plan_coll)i); }
static const char *mem_of(int i) { return plan_mem_name((plan_mem)i); }
static const char *bool_of(int i) { return i ? "true" : "false"; }
static const char *kind_of(int i) { return i ? "mem" : "gemm"; }
static const char *topology_of(int i) { return plan_topology_name((plan_topology)i); }
static const char *role_of(int i) { return plan_role_name((plan_role)i); }
static const char *purpose_of(int i) { return plan_purpose_name((plan_purpose)i); }
static const char *piece_of(int i) { return plan_piece_name((plan_piece)i); }

/* A role, purpose or piece rule by name: what (singular) and whats (plural) name it in the
 * message, whose list of known names comes from the table, so it cannot go stale. */
static int rd_role_enum(reader *r, const tok *t, const char *what, const char *whats,
                        const char *(*name_of)(int), int n, uint8_t *out)
{
    char show[64], names[600];
    int i = enum_find(t, name_of, n);
    if (i >= 0) {
        *out = (uint8_t)i;
        return 0;
    }
    return rd_err(r, "unknown %s \"%s\"; known %s: %s", what, tok_show(t, show, sizeof show), whats,
                  enum_names(name_of, n, names, sizeof names));
}

static int rd_u8enum(reader *r, const tok *t, const char *what, const char *(*name_of)(int), int n, uint8_t *out)
{
    int v;
    if (rd_enum(r, t, what, name_of, n, &v)) return -1;
    *out = (uint8_t)v;
    return 0;
}

/* "1,2,3" (or empty) into an arena array. */
static int rd_ilist(reader *r, const tok *t, const char *what, int32_t lo, int32_t hi, int32_t **out, int *n)
{
    char show[64];
    *out = NULL;
    *n = 0;
    if (t->quoted) return rd_err(r, "%s: '%s' is not a list; write numbers separated by commas", what, tok_show(t, show, sizeof show));
    if (t->vlen == 0) return 0;
    size_t cnt = 1;
    for (uint32_t i = 0; i < t->vlen; i++) cnt += t->v[i] == ',';
    int32_t *v = base_arena_calloc(&r->p->arena, cnt, sizeof *v);
    uint32_t start = 0;
    for (size_t k = 0; k < cnt; k++) {
        uint32_t end = start;
        while (end < t->vlen && t->v[end] != ',') end++;
        tok one = {.v = t->v + start, .vlen = end - start};
        if (rd_i32(r, &one, what, lo, hi, &v[k])) return -1;
        start = end + 1;
    }
    *out = v;
    *n = (int)cnt;
    return 0;
}

/* ---------------------------------------------------------------- reader: key=value lines */

/* KV_F64: a figure >= 0; KV_POS: a figure > 0 (bandwidths, ratios) */
typedef enum { KV_I64, KV_I32, KV_F64, KV_POS, KV_STR, KV_BOOL, KV_DTYPE, KV_TOPO } kv_type;
typedef struct kv_spec {
    const char *key;
    kv_type type;
    void *dst;
} kv_spec;

/* Tokens from `from` on must be exactly the keys of spec (any order, each once). */
static int rd_kvs(reader *r, int from, const char *line_what, const kv_spec *spec, int n)
{
    char show[64];
    uint64_t seen = 0;
    for (int i = from; i < r->nt; i++) {
        const tok *t = &r->t[i];
        if (!t->k) return rd_err(r, "%s: unexpected '%s'; write key=value fields", line_what, tok_show(t, show, sizeof show));
        int j = 0;
        while (j < n && !(strlen(spec[j].key) == t->klen && memcmp(spec[j].key, t->k, t->klen) == 0)) j++;
        if (j == n) {
            char keys[600];
            size_t o = 0;
            for (int q = 0; q < n && o + 1 < sizeof keys; q++)
                o += (size_t)snprintf(keys + o, sizeof keys - o, "%s%s", q ? " " : "", spec[q].key);
            return rd_err(r, "%s: unknown key '%.*s'; the keys are: %s", line_what,
                          (int)(t->klen > 40 ? 40 : t->klen), t->k, keys);
        }
        if (seen & (1ull << j)) return rd_err(r, "%s: key '%s' appears twice; keep one", line_what, spec[j].key);
        seen |= 1ull << j;
        int rc = 0;
        int v;
        switch (spec[j].type) {
        case KV_I64: rc = rd_i64(r, t, spec[j].key, INT64_MIN, INT64_MAX, spec[j].dst); break;
        case KV_I32: rc = rd_i32(r, t, spec[j].key, INT32_MIN, INT32_MAX, spec[j].dst); break;
        case KV_F64: rc = rd_f64(r, t, spec[j].key, false, spec[j].dst); break;
        case KV_POS: rc = rd_f64(r, t, spec[j].key, true, spec[j].dst); break;
        case KV_STR: rc = rd_str(r, t, spec[j].dst); break;
        case KV_BOOL:
            rc = rd_enum(r, t, spec[j].key, bool_of, 2, &v);
            if (!rc) *(bool *)spec[j].dst = v != 0;
            break;
        case KV_DTYPE: rc = rd_u8enum(r, t, spec[j].key, dtype_of, PLAN_NDTYPE, spec[j].dst); break;
        case KV_TOPO: rc = rd_u8enum(r, t, spec[j].key, topology_of, PLAN_NTOPO, spec[j].dst); break;
        }
        if (rc) return -1;
    }
    for (int j = 0; j < n; j++)
        if (!(seen & (1ull << j))) return rd_err(r, "%s: key '%s' is missing; add %s=...", line_what, spec[j].key, spec[j].key);
    return 0;
}

static const char SECTION_ORDER[] =
    "sections come in this order: piper-plan, dtypes, gpu, links (optional), calib (optional), model, regions, "
    "kernel_ids, kernel_lists, "
    "groups, lists, devices, end";

/* The next line must start with `word` (a section or entry keyword). */
static int rd_expect(reader *r, const char *word)
{
    char show[64];
    int rc = rd_next(r);
    if (rc < 0) return -1;
    if (rc == 0)
        return rd_err(r, "the file ends where '%s' was expected; it is truncated, write it again", word);
    if (!tok_is(&r->t[0], word))
        return rd_err(r, "expected '%s' here, found '%s'; %s", word, tok_show(&r->t[0], show, sizeof show), SECTION_ORDER);
    return 0;
}

/* "<section> N": N entries follow, each on its own line, so N cannot exceed the lines left. */
static int rd_section(reader *r, const char *word, int *n)
{
    if (rd_expect(r, word)) return -1;
    if (r->nt != 2) return rd_err(r, "write '%s N' with the number of entries that follow", word);
    int64_t v;
    if (rd_i64(r, &r->t[1], word, 0, INT32_MAX, &v)) return -1;
    if (v > rd_lines_left(r))
        return rd_err(r, "%s says %" PRId64 " entries but only %ld lines follow; the file is truncated or the "
                         "count is wrong", word, v, rd_lines_left(r));
    *n = (int)v;
    return 0;
}

/* The next line must be entry `idx` of a section of `count`: "<idx> ...". */
static int rd_entry(reader *r, const char *what, int idx, int count)
{
    char show[64];
    int rc = rd_next(r);
    if (rc < 0) return -1;
    if (rc == 0)
        return rd_err(r, "the file ends after %d of %d %s; it is truncated, write it again", idx, count, what);
    int64_t v = -1;
    const tok *t = &r->t[0];
    int numeric = !t->k && parse_int(t, &v) == 0;
    if (!numeric || v != idx) {
        if (!numeric)
            return rd_err(r, "expected %s entry %d here, found '%s'; the count says %d entries, but fewer are "
                             "given: fix the count", what, idx, tok_show(t, show, sizeof show), count);
        return rd_err(r, "expected %s entry %d here, found entry %" PRId64 "; entries are numbered from 0 in "
                         "order", what, idx, v);
    }
    return 0;
}

/* ---------------------------------------------------------------- reader: sections */

/* Is the next line a `word` line? Reads it if so (1); otherwise leaves the reader where it was (0). */
static int rd_optional(reader *r, const char *word)
{
    size_t pos = r->pos;
    long line = r->line;
    int rc = rd_next(r);
    if (rc <= 0) {
        r->pos = pos, r->line = line;
        return rc;
    }
    if (tok_is(&r->t[0], word)) return 1;
    r->pos = pos, r->line = line;
    return 0;
}

/* The optional `links` and `calib` lines after `gpu`. */
static int rd_links(reader *r)
{
    plan_set *p = r->p;
    int rc = rd_optional(r, "links");
    if (rc < 0) return -1;
    if (rc) {
        plan_links *l = &p->links;
        kv_spec ls[] = {{"nvlink_bw", KV_POS, &l->nvlink_bw},         {"nvlink_latency", KV_F64, &l->nvlink_latency},
                        {"nic_bw", KV_POS, &l->nic_bw},               {"nic_latency", KV_F64, &l->nic_latency},
                        {"gpus_per_nic", KV_I32, &l->gpus_per_nic},   {"gpus_per_node", KV_I32, &l->gpus_per_node},
                        {"topology", KV_TOPO, &l->topology},          {"oversubscription", KV_POS, &l->oversubscription},
                        {"platform", KV_STR, &l->platform}};
        if (rd_kvs(r, 1, "links", ls, (int)BASE_COUNT(ls))) return -1;
    }
    rc = rd_optional(r, "calib");
    if (rc < 0) return -1;
    if (rc) {
        char show[64];
        int n = r->nt - 1;
        p->calib = base_arena_calloc(&p->arena, (size_t)(n ? n : 1), sizeof *p->calib);
        for (int i = 0; i < n; i++) {
            const tok *t = &r->t[i + 1];
            if (!t->k) return rd_err(r, "calib: unexpected '%s'; write name=value fields", tok_show(t, show, sizeof show));
            const char *name = base_arena_strndup(&p->arena, t->k, t->klen);
            for (int j = 0; j < i; j++)
                if (!strcmp(p->calib[j].name, name)) return rd_err(r, "calib: key '%s' appears twice; keep one", name);
            p->calib[i].name = name;
            if (rd_f64(r, t, name, false, &p->calib[i].value)) return -1;
        }
        p->ncalib = n;
    }
    return 0;
}

static int rd_header(reader *r)
{
    char show[64];
    plan_set *p = r->p;
    int rc = rd_next(r);
    if (rc < 0) return -1;
    if (rc == 0 || !tok_is(&r->t[0], "piper-plan"))
        return rd_err(r, "not a piper plan: the first line must be 'piper-plan %d'; is this the right file?",
                      PLAN_VERSION);
    int64_t v;
    if (r->nt != 2 || parse_int(&r->t[1], &v) || v < 0 || v > INT32_MAX)
        return rd_err(r, "bad first line '%s ...'; it must be 'piper-plan %d'", tok_show(&r->t[0], show, sizeof show),
                      PLAN_VERSION);
    if (v < PLAN_VERSION)
        return rd_err(r, "plan format version %" PRId64 " is not supported: the plan was written by an older "
                         "piper-compile, and this piper reads version %d only; compile the program again with "
                         "this piper's piper-compile", v, PLAN_VERSION);
    if (v > PLAN_VERSION)
        return rd_err(r, "plan format version %" PRId64 " is not supported: the plan was written by a newer "
                         "piper-compile, and this piper reads version %d only; use the piper that wrote it, or "
                         "compile the program again with this piper's piper-compile", v, PLAN_VERSION);
    p->version = (int)v;

    if (rd_expect(r, "dtypes")) return -1;
    kv_spec dt[] = {{"param", KV_DTYPE, &p->param_dtype}, {"act", KV_DTYPE, &p->act_dtype},
                    {"grad", KV_DTYPE, &p->grad_dtype}, {"opt", KV_DTYPE, &p->opt_dtype}};
    if (rd_kvs(r, 1, "dtypes", dt, (int)BASE_COUNT(dt))) return -1;

    if (rd_expect(r, "gpu")) return -1;
    plan_gpu *g = &p->gpu;
    kv_spec gs[4 + PLAN_NDTYPE] = {{"name", KV_STR, &g->name}, {"hbm_bw", KV_F64, &g->hbm_bw},
                                   {"mem_bytes", KV_F64, &g->mem_bytes}, {"reserve_bytes", KV_F64, &g->reserve_bytes}};
    char keys[PLAN_NDTYPE][32];
    for (int d = 0; d < PLAN_NDTYPE; d++) {
        snprintf(keys[d], sizeof keys[d], "peak_%s", plan_dtype_name((plan_dtype)d));
        gs[4 + d] = (kv_spec){keys[d], KV_F64, &g->peak_flops[d]};
    }
    if (rd_kvs(r, 1, "gpu", gs, (int)BASE_COUNT(gs))) return -1;
    if (rd_links(r)) return -1;

    if (rd_expect(r, "model")) return -1;
    plan_model *m = &p->model;
    kv_spec ms[] = {{"name", KV_STR, &m->name},
                    {"family", KV_STR, &m->family},
                    {"layers", KV_I64, &m->layers},
                    {"hidden", KV_I64, &m->hidden},
                    {"heads", KV_I64, &m->heads},
                    {"kv_heads", KV_I64, &m->kv_heads},
                    {"head_dim", KV_I64, &m->head_dim},
                    {"ffn", KV_I64, &m->ffn},
                    {"experts", KV_I64, &m->experts},
                    {"expert_ffn", KV_I64, &m->expert_ffn},
                    {"top_k", KV_I64, &m->top_k},
                    {"capacity_factor", KV_F64, &m->capacity_factor},
                    {"vocab", KV_I64, &m->vocab},
                    {"seq", KV_I64, &m->seq},
                    {"tied_embeddings", KV_BOOL, &m->tied_embeddings},
                    {"qk_norm", KV_BOOL, &m->qk_norm},
                    {"dropout", KV_BOOL, &m->dropout},
                    {"micro_batch", KV_I64, &m->micro_batch},
                    {"num_microbatches", KV_I64, &m->num_microbatches},
                    {"global_batch", KV_I64, &m->global_batch}};
    return rd_kvs(r, 1, "model", ms, (int)BASE_COUNT(ms));
}

static int rd_names(reader *r, const char *section, const char *what, const char ***out, int *n)
{
    if (rd_section(r, section, n)) return -1;
    const char **names = base_arena_calloc(&r->p->arena, (size_t)*n, sizeof *names);
    for (int i = 0; i < *n; i++) {
        if (rd_entry(r, what, i, *n)) return -1;
        if (r->nt != 2) return rd_err(r, "write '%d NAME' (quote names with spaces)", i);
        if (rd_str(r, &r->t[1], &names[i])) return -1;
    }
    *out = names;
    return 0;
}

static int rd_kernel_lists(reader *r)
{
    plan_set *p = r->p;
    if (rd_section(r, "kernel_lists", &p->nkernel_lists)) return -1;
    p->kernel_lists = base_arena_calloc(&p->arena, (size_t)p->nkernel_lists, sizeof *p->kernel_lists);
    for (int i = 0; i < p->nkernel_lists; i++) {
        plan_kernel_list *kl = &p->kernel_lists[i];
        if (rd_entry(r, "kernel list", i, p->nkernel_lists)) return -1;
        if (r->nt != 2 || !key_is(&r->t[1], "kernels")) return rd_err(r, "write '%d kernels=N'", i);
        int64_t n;
        if (rd_i64(r, &r->t[1], "kernels", 0, INT32_MAX, &n)) return -1;
        if (n > rd_lines_left(r))
            return rd_err(r, "kernel list %d says %" PRId64 " kernels but only %ld lines follow; the file is "
                             "truncated or the count is wrong", i, n, rd_lines_left(r));
        kl->n = (int)n;
        kl->k = base_arena_calloc(&p->arena, (size_t)n, sizeof *kl->k);
        for (int j = 0; j < kl->n; j++) {
            plan_kernel *k = &kl->k[j];
            int rc = rd_next(r);
            if (rc < 0) return -1;
            if (rc == 0)
                return rd_err(r, "the file ends after %d of %d kernels of kernel list %d; it is truncated", j, kl->n, i);
            if (r->nt < 2 || (!tok_is(&r->t[0], "gemm") && !tok_is(&r->t[0], "mem")))
                return rd_err(r, "expected kernel %d of kernel list %d: 'gemm NAME ...' or 'mem NAME ...'; the "
                                 "count says %d kernels", j, i, kl->n);
            k->kind = tok_is(&r->t[0], "gemm") ? PLAN_KERNEL_GEMM : PLAN_KERNEL_MEM;
            if (r->t[1].k) return rd_err(r, "the kernel's name must follow '%s'", kind_of(k->kind));
            if (rd_str(r, &r->t[1], &k->name)) return -1;
            kv_spec ks[] = {{"dtype", KV_DTYPE, &k->dtype}, {"count", KV_I32, &k->count}, {"flops", KV_F64, &k->flops},
                            {"bytes", KV_F64, &k->bytes},   {"m", KV_I64, &k->m},         {"n", KV_I64, &k->n},
                            {"k", KV_I64, &k->k}};
            /* m, n, k may be left out of memory-bound kernels (they are then 0) */
            int nspec = (int)BASE_COUNT(ks);
            if (k->kind == PLAN_KERNEL_MEM) {
                int has = 0;
                for (int q = 2; q < r->nt; q++) has |= key_is(&r->t[q], "m") || key_is(&r->t[q], "n") || key_is(&r->t[q], "k");
                if (!has) nspec = 4;
            }
            if (rd_kvs(r, 2, "kernel", ks, nspec)) return -1;
        }
    }
    return 0;
}

static int rd_groups(reader *r, long **group_lines)
{
    plan_set *p = r->p;
    if (rd_section(r, "groups", &p->ngroups)) return -1;
    p->groups = base_arena_calloc(&p->arena, (size_t)p->ngroups, sizeof *p->groups);
    *group_lines = base_xcalloc((size_t)p->ngroups, sizeof **group_lines);
    for (int i = 0; i < p->ngroups; i++) {
        plan_group *g = &p->groups[i];
        if (rd_entry(r, "group", i, p->ngroups)) return -1;
        (*group_lines)[i] = r->line;
        if (r->nt != 3 || r->t[1].k || !key_is(&r->t[2], "devices"))
            return rd_err(r, "write '%d NAME devices=D0,D1,...'", i);
        if (rd_str(r, &r->t[1], &g->name)) return -1;
        if (rd_ilist(r, &r->t[2], "group member", 0, INT32_MAX, &g->devices, &g->n)) return -1;
    }
    return 0;
}

/* Instruction keys, resolved with a switch on the length so that reading stays fast. */
enum {
    K_S, K_PASS, K_KIND, K_REGION, K_KID, K_KERNELS, K_PEER, K_TAG, K_SENDRECV, K_GROUP, K_EVENT, K_BYTES,
    K_BUF, K_MEM, K_MB, K_STAGE, K_TP_GROUP, K_EP_GROUP, K_READS, K_WRITES, K_PURPOSE, K_PIECE, K_NKEYS
};
static const char *const INSTR_KEYS[K_NKEYS] = {"s",     "pass", "kind",  "region", "kid",      "kernels", "peer",
                                                "tag",   "sendrecv", "group", "event",  "bytes", "buf", "mem",
                                                "mb",    "stage", "tp_group", "ep_group", "reads", "writes",
                                                "purpose", "piece"};

static int instr_key(const char *k, uint32_t n)
{
    static const int8_t by_len[9][7] = {
        {-1},
        {K_S, -1},
        {K_MB, -1},
        {K_KID, K_TAG, K_BUF, K_MEM, -1},
        {K_PASS, K_KIND, K_PEER, -1},
        {K_GROUP, K_EVENT, K_BYTES, K_STAGE, K_READS, K_PIECE, -1},
        {K_REGION, K_WRITES, -1},
        {K_KERNELS, K_PURPOSE, -1},
        {K_SENDRECV, K_TP_GROUP, K_EP_GROUP, -1}};
    if (n >= 9) return -1;
    for (const int8_t *c = by_len[n]; *c >= 0; c++)
        if (memcmp(INSTR_KEYS[*c], k, n) == 0) return *c;
    return -1;
}

static int range_err(reader *r, const char *what, int64_t v, int64_t lo, int64_t n, const char *fix)
{
    return rd_err(r, "%s %" PRId64 " is out of range (%s%" PRId64 "..%" PRId64 "); %s", what, v,
                  lo < 0 ? "-1 or " : "", (int64_t)0, n - 1, fix);
}

/* Per list, the extreme p2p peers: a device's peer_offset is valid when it keeps both in range. */
typedef struct peer_span {
    int32_t lo, hi, lo_at, hi_at;
} peer_span;

static int rd_instr(reader *r, int li, int i, const plan_text_name_index *six, const plan_text_name_index *rix,
                    const plan_text_name_index *kix, peer_span *span)
{
    char show[64];
    plan_set *p = r->p;
    plan_list *L = &p->lists[li];
    plan_instr *in = &L->ins[i];
    if (r->nt < 2) return rd_err(r, "instruction %d has no op; write '%d OP s=STREAM ...'", i, i);
    int op;
    if (rd_enum(r, &r->t[1], "op", op_of, PLAN_NOP + 1, &op)) return -1;
    plan_instr_init(in, (plan_op)op);
    uint32_t seen = 0;
    for (int ti = 2; ti < r->nt; ti++) {
        const tok *t = &r->t[ti];
        int k = t->k ? instr_key(t->k, t->klen) : -1;
        if (k < 0) {
            if (!t->k) return rd_err(r, "unexpected '%s'; instruction fields are key=value", tok_show(t, show, sizeof show));
            return rd_err(r, "unknown instruction key '%.*s'; see docs/plan-format.md for the keys",
                          (int)(t->klen > 40 ? 40 : t->klen), t->k);
        }
        if (seen & (1u << k)) return rd_err(r, "key '%s' appears twice; keep one", INSTR_KEYS[k]);
        seen |= 1u << k;
        int rc = 0;
        switch (k) {
        case K_S: rc = rd_ref(r, t, "stream", six, &in->stream); break;
        case K_PASS: rc = rd_u8enum(r, t, "pass", pass_of, PLAN_NPASS, &in->pass); break;
        case K_KIND: rc = rd_u8enum(r, t, "kind", coll_of, PLAN_NCOLL, &in->coll); break;
        case K_REGION: rc = rd_ref(r, t, "region", rix, &in->region); break;
        case K_KID: rc = rd_ref(r, t, "kernel id", kix, &in->kid); break;
        case K_KERNELS: rc = rd_i32(r, t, "kernels", INT32_MIN, INT32_MAX, &in->kernels); break;
        case K_PEER: rc = rd_i32(r, t, "peer", INT32_MIN, INT32_MAX, &in->peer); break;
        case K_TAG: rc = rd_i32(r, t, "tag", INT32_MIN, INT32_MAX, &in->tag); break;
        case K_SENDRECV: rc = rd_i32(r, t, "sendrecv", INT32_MIN, INT32_MAX, &in->sendrecv); break;
        case K_GROUP: rc = rd_i32(r, t, "group", INT32_MIN, INT32_MAX, &in->group); break;
        case K_EVENT: rc = rd_i32(r, t, "event", INT32_MIN, INT32_MAX, &in->event); break;
        case K_BYTES: rc = rd_i64(r, t, "bytes", INT64_MIN, INT64_MAX, &in->bytes); break;
        case K_BUF: rc = rd_i32(r, t, "buf", INT32_MIN, INT32_MAX, &in->buf); break;
        case K_MEM: rc = rd_u8enum(r, t, "mem", mem_of, PLAN_NMEM, &in->mem); break;
        case K_MB: rc = rd_i32(r, t, "mb", INT32_MIN, INT32_MAX, &in->mb); break;
        case K_STAGE: rc = rd_i32(r, t, "stage", INT32_MIN, INT32_MAX, &in->stage); break;
        case K_TP_GROUP: rc = rd_i32(r, t, "tp_group", INT32_MIN, INT32_MAX, &in->tp_group); break;
        case K_EP_GROUP: rc = rd_i32(r, t, "ep_group", INT32_MIN, INT32_MAX, &in->ep_group); break;
        case K_READS: rc = rd_ilist(r, t, "reads", INT32_MIN, INT32_MAX, &in->reads, &in->nreads); break;
        case K_WRITES: rc = rd_ilist(r, t, "writes", INT32_MIN, INT32_MAX, &in->writes, &in->nwrites); break;
        case K_PURPOSE: rc = rd_role_enum(r, t, "purpose", "purposes", purpose_of, PLAN_NPURPOSE, &in->purpose); break;
        case K_PIECE: rc = rd_role_enum(r, t, "piece rule", "piece rules", piece_of, PLAN_NPIECE, &in->piece); break;
        }
        if (rc) return -1;
    }

    /* What each op interprets must be present and in range; consumers index with it unchecked. */
    static const uint32_t need[PLAN_NOP + 1] = {
        [PLAN_COMPUTE] = 1u << K_PASS | 1u << K_KID | 1u << K_KERNELS,
        [PLAN_SEND] = 1u << K_PEER | 1u << K_TAG | 1u << K_BYTES,
        [PLAN_RECV] = 1u << K_PEER | 1u << K_TAG | 1u << K_BYTES,
        [PLAN_COLL] = 1u << K_KIND | 1u << K_GROUP | 1u << K_BYTES | 1u << K_PURPOSE | 1u << K_PIECE,
        [PLAN_RECORD] = 1u << K_EVENT,
        [PLAN_WAIT] = 1u << K_EVENT,
        [PLAN_ALLOC] = 1u << K_BUF | 1u << K_BYTES | 1u << K_MEM,
        [PLAN_FREE] = 1u << K_BUF | 1u << K_BYTES | 1u << K_MEM,
    };
    uint32_t missing = (need[op] | 1u << K_S) & ~seen;
    if (missing) {
        int k = 0;
        while (!(missing & (1u << k))) k++;
        return rd_err(r, "%s instruction needs %s=...; add it", plan_op_name((plan_op)op), INSTR_KEYS[k]);
    }
    char why[256];
    if (plan_instr_role_problem(in, why, sizeof why)) return rd_err(r, "%s", why);
    if (in->stream < 0 || in->stream >= L->nstreams)
        return range_err(r, "stream", in->stream, 0, L->nstreams, "declare the stream in the list's stream lines");
    switch (op) {
    case PLAN_COMPUTE:
        if (in->region < -1 || in->region >= p->nregions) return range_err(r, "region", in->region, -1, p->nregions, "use a declared region");
        if (in->kid < -1 || in->kid >= p->nkernel_ids) return range_err(r, "kid", in->kid, -1, p->nkernel_ids, "use a declared kernel id");
        if (in->kernels < -1 || in->kernels >= p->nkernel_lists)
            return range_err(r, "kernels", in->kernels, -1, p->nkernel_lists, "use a declared kernel list");
        if (in->tp_group < -1 || in->tp_group >= L->ngroup_slots)
            return range_err(r, "tp_group slot", in->tp_group, -1, L->ngroup_slots, "raise the list's group_slots or fix the slot");
        if (in->ep_group < -1 || in->ep_group >= L->ngroup_slots)
            return range_err(r, "ep_group slot", in->ep_group, -1, L->ngroup_slots, "raise the list's group_slots or fix the slot");
        for (int q = 0; q < in->nreads; q++)
            if (in->reads[q] < 0 || in->reads[q] >= L->nbufs) return range_err(r, "read buffer", in->reads[q], 0, L->nbufs, "use a declared buffer");
        for (int q = 0; q < in->nwrites; q++)
            if (in->writes[q] < 0 || in->writes[q] >= L->nbufs) return range_err(r, "written buffer", in->writes[q], 0, L->nbufs, "use a declared buffer");
        break;
    case PLAN_SEND:
    case PLAN_RECV:
    case PLAN_COLL:
        if (in->bytes < 0) return rd_err(r, "bytes %" PRId64 " is negative; a transfer moves 0 or more bytes", in->bytes);
        if (in->buf < -1 || in->buf >= L->nbufs) return range_err(r, "buf", in->buf, -1, L->nbufs, "use a declared buffer");
        if (op == PLAN_COLL) {
            if (in->group < 0 || in->group >= L->ngroup_slots)
                return range_err(r, "group slot", in->group, 0, L->ngroup_slots, "raise the list's group_slots or fix the slot");
        } else {
            if (in->peer < span->lo) span->lo = in->peer, span->lo_at = i;
            if (in->peer > span->hi) span->hi = in->peer, span->hi_at = i;
        }
        break;
    case PLAN_RECORD:
    case PLAN_WAIT:
        if (in->event < 0 || in->event >= L->nevents)
            return range_err(r, "event", in->event, 0, L->nevents, "raise the list's events count or fix the event");
        break;
    case PLAN_ALLOC:
    case PLAN_FREE:
        if (in->buf < 0 || in->buf >= L->nbufs) return range_err(r, "buf", in->buf, 0, L->nbufs, "use a declared buffer");
        if (in->bytes < 0) return rd_err(r, "bytes %" PRId64 " is negative; buffers have 0 or more bytes", in->bytes);
        break;
    default: break;
    }
    return 0;
}

static int rd_lists(reader *r, peer_span **spans)
{
    plan_set *p = r->p;
    if (rd_section(r, "lists", &p->nlists)) return -1;
    p->lists = base_arena_calloc(&p->arena, (size_t)p->nlists, sizeof *p->lists);
    *spans = base_xcalloc((size_t)p->nlists, sizeof **spans);
    plan_text_name_index rix, kix;
    plan_text_name_index_build(&rix, p->regions, p->nregions);
    plan_text_name_index_build(&kix, p->kernel_ids, p->nkernel_ids);
    int rc = 0;
    for (int li = 0; li < p->nlists && rc == 0; li++) {
        plan_list *L = &p->lists[li];
        peer_span *span = &(*spans)[li];
        span->lo = INT32_MAX, span->hi = INT32_MIN;
        if ((rc = rd_expect(r, "list"))) break;
        int64_t idx = -1;
        int32_t nstreams = -1, nbufs = -1, nevents = -1, nslots = -1, n = -1;
        kv_spec ls[] = {{"streams", KV_I32, &nstreams}, {"bufs", KV_I32, &nbufs}, {"events", KV_I32, &nevents},
                        {"group_slots", KV_I32, &nslots}, {"instrs", KV_I32, &n}};
        if (r->nt < 2 || r->t[1].k || parse_int(&r->t[1], &idx)) {
            rc = rd_err(r, "write 'list %d streams=S bufs=B events=E group_slots=G instrs=N'", li);
            break;
        }
        if (idx != li) {
            rc = rd_err(r, "expected list %d here, found list %" PRId64 "; lists are numbered from 0 in order", li, idx);
            break;
        }
        if ((rc = rd_kvs(r, 2, "list", ls, (int)BASE_COUNT(ls)))) break;
        if (nstreams < 0 || nbufs < 0 || nevents < 0 || nslots < 0 || n < 0) {
            rc = rd_err(r, "list counts must be 0 or more");
            break;
        }
        if ((int64_t)nstreams + nbufs + n > rd_lines_left(r)) {
            rc = rd_err(r, "list %d says %d streams, %d buffers and %d instructions but only %ld lines follow; the "
                           "file is truncated or a count is wrong", li, nstreams, nbufs, n, rd_lines_left(r));
            break;
        }
        L->nstreams = nstreams, L->nbufs = nbufs, L->nevents = nevents, L->ngroup_slots = nslots, L->n = n;
        L->streams = base_arena_calloc(&p->arena, (size_t)nstreams, sizeof *L->streams);
        L->bufs = base_arena_calloc(&p->arena, (size_t)nbufs, sizeof *L->bufs);
        L->ins = base_arena_calloc(&p->arena, (size_t)n, sizeof *L->ins);
        for (int s = 0; s < nstreams && rc == 0; s++) {
            if ((rc = rd_expect(r, "stream"))) break;
            int64_t si;
            if (r->nt != 3 || r->t[1].k || r->t[2].k || parse_int(&r->t[1], &si)) {
                rc = rd_err(r, "write 'stream %d NAME'; list %d declares %d streams", s, li, nstreams);
                break;
            }
            if (si != s) {
                rc = rd_err(r, "expected stream %d here, found stream %" PRId64 "; streams are numbered from 0 in order", s, si);
                break;
            }
            rc = rd_str(r, &r->t[2], &L->streams[s]);
        }
        for (int b = 0; b < nbufs && rc == 0; b++) {
            if ((rc = rd_expect(r, "buf"))) break;
            int64_t bi;
            plan_buffer *bf = &L->bufs[b];
            if (r->nt < 3 || r->t[1].k || r->t[2].k || parse_int(&r->t[1], &bi)) {
                rc = rd_err(r, "write 'buf %d NAME bytes=N mem=CATEGORY role=ROLE'; list %d declares %d buffers", b, li, nbufs);
                break;
            }
            if (bi != b) {
                rc = rd_err(r, "expected buffer %d here, found buffer %" PRId64 "; buffers are numbered from 0 in order", b, bi);
                break;
            }
            if ((rc = rd_str(r, &r->t[2], &bf->name))) break;
            int64_t bytes = 0;
            int mem = 0;
            int have = 0;
            bf->region = -1;
            for (int ti = 3; ti < r->nt && rc == 0; ti++) {
                const tok *t = &r->t[ti];
                if (key_is(t, "bytes") && !(have & 1)) have |= 1, rc = rd_i64(r, t, "bytes", 0, INT64_MAX, &bytes);
                else if (key_is(t, "mem") && !(have & 2)) have |= 2, rc = rd_enum(r, t, "mem", mem_of, PLAN_NMEM, &mem);
                else if (key_is(t, "role") && !(have & 4))
                    have |= 4, rc = rd_role_enum(r, t, "role", "roles", role_of, PLAN_NROLE, &bf->role);
                else if (key_is(t, "owner") && !(have & 8)) {
                    have |= 8;
                    rc = rd_ref(r, t, "region", &rix, &bf->region);
                    if (!rc && (bf->region < -1 || bf->region >= p->nregions))
                        rc = range_err(r, "owner region", bf->region, -1, p->nregions, "use a declared region");
                } else
                    rc = rd_err(r, "a buffer line takes bytes=N mem=CATEGORY role=ROLE and optionally "
                                   "owner=REGION, once each");
            }
            if (rc) break;
            if ((have & 7) != 7) {
                rc = rd_err(r, "buffer %d needs bytes=N, mem=CATEGORY and role=ROLE", b);
                break;
            }
            bf->bytes = bytes;
            bf->mem = (uint8_t)mem;
            char why[256];
            if (plan_buffer_role_problem(bf, why, sizeof why)) {
                rc = rd_err(r, "%s", why);
                break;
            }
        }
        if (rc) break;
        plan_text_name_index six;
        plan_text_name_index_build(&six, L->streams, L->nstreams);
        for (int i = 0; i < n && rc == 0; i++) {
            if ((rc = rd_entry(r, "instruction", i, n))) break;
            rc = rd_instr(r, li, i, &six, &rix, &kix, span);
        }
        plan_text_name_index_free(&six);
    }
    plan_text_name_index_free(&rix);
    plan_text_name_index_free(&kix);
    return rc;
}

static int rd_devices(reader *r, const peer_span *spans)
{
    plan_set *p = r->p;
    if (rd_section(r, "devices", &p->ndevices)) return -1;
    p->devices = base_arena_calloc(&p->arena, (size_t)p->ndevices, sizeof *p->devices);
    for (int i = 0; i < p->ndevices; i++) {
        plan_device *d = &p->devices[i];
        if (rd_entry(r, "device", i, p->ndevices)) return -1;
        int32_t id = i, node = 0, list = 0, off = 0;
        int32_t *slots = NULL;
        int nslots = 0;
        uint32_t seen = 0;
        for (int ti = 1; ti < r->nt; ti++) {
            const tok *t = &r->t[ti];
            int rc;
            const char *keys[] = {"id", "node", "list", "peer_offset", "slots"};
            int k = 0;
            while (k < 5 && !key_is(t, keys[k])) k++;
            if (k == 5 || (seen & (1u << k)))
                return rd_err(r, "write '%d node=N list=L peer_offset=O slots=G0,G1,...' (and id=ID when it is not "
                                 "%d), each key once", i, i);
            seen |= 1u << k;
            switch (k) {
            case 0: rc = rd_i32(r, t, "id", INT32_MIN, INT32_MAX, &id); break;
            case 1: rc = rd_i32(r, t, "node", INT32_MIN, INT32_MAX, &node); break;
            case 2: rc = rd_i32(r, t, "list", 0, p->nlists - 1, &list); break;
            case 3: rc = rd_i32(r, t, "peer_offset", INT32_MIN, INT32_MAX, &off); break;
            default: rc = rd_ilist(r, t, "group slot", 0, p->ngroups - 1, &slots, &nslots); break;
            }
            if (rc) return -1;
        }
        if ((seen & 0x1e) != 0x1e)
            return rd_err(r, "device %d needs node=, list=, peer_offset= and slots=; add the missing ones", i);
        const plan_list *L = &p->lists[list];
        if (nslots != L->ngroup_slots)
            return rd_err(r, "device %d gives %d group slots but list %d has group_slots=%d; give one global group "
                             "per slot", i, nslots, list, L->ngroup_slots);
        const peer_span *sp = &spans[list];
        if (sp->lo <= sp->hi) {
            int64_t lo = (int64_t)sp->lo + off, hi = (int64_t)sp->hi + off;
            if (lo < 0 || hi >= p->ndevices) {
                int at = lo < 0 ? sp->lo_at : sp->hi_at;
                const plan_instr *in = &L->ins[at];
                return rd_err(r, "device %d: peer_offset %d moves the peer of list %d instruction %d (%s peer=%d) to "
                                 "device %" PRId64 ", but the plan has devices 0..%d; fix peer_offset or the peer",
                              i, off, list, at, plan_op_name((plan_op)in->op), in->peer,
                              (int64_t)in->peer + off, p->ndevices - 1);
            }
        }
        d->id = id, d->node = node, d->list = list, d->peer_offset = off, d->group_slots = slots;
    }
    return 0;
}

/* Group members are only known to be devices once the devices section has been read. */
static int rd_check_groups(reader *r, const long *group_lines)
{
    plan_set *p = r->p;
    uint32_t *mark = base_xcalloc((size_t)p->ndevices + 1, sizeof *mark);
    int rc = 0;
    for (int g = 0; g < p->ngroups && rc == 0; g++) {
        const plan_group *gr = &p->groups[g];
        for (int j = 0; j < gr->n; j++) {
            int32_t d = gr->devices[j];
            if (d >= p->ndevices || mark[d] == (uint32_t)g + 1) {
                r->line = group_lines[g];
                rc = d >= p->ndevices
                         ? rd_err(r, "group %d names device %d, but the plan has devices 0..%d; fix the member list",
                                  g, d, p->ndevices - 1)
                         : rd_err(r, "group %d names device %d twice; list each member once", g, d);
                break;
            }
            mark[d] = (uint32_t)g + 1;
        }
    }
    free(mark);
    return rc;
}

int plan_read(plan_set *p, const char *name, const char *text, size_t len, base_error *e)
{
    plan_init(p);
    reader r = {.name = name ? name : "<plan>", .s = text ? text : "", .len = text ? len : 0, .e = e, .p = p};
    for (const char *q = r.s, *end = r.s + r.len; q < end;) {
        const char *nl = memchr(q, '\n', (size_t)(end - q));
        r.total_lines++;
        q = nl ? nl + 1 : end;
    }
    long *group_lines = NULL;
    peer_span *spans = NULL;
    int rc = rd_header(&r);
    if (!rc) rc = rd_names(&r, "regions", "region", &p->regions, &p->nregions);
    if (!rc) rc = rd_names(&r, "kernel_ids", "kernel id", &p->kernel_ids, &p->nkernel_ids);
    if (!rc) rc = rd_kernel_lists(&r);
    if (!rc) rc = rd_groups(&r, &group_lines);
    if (!rc) rc = rd_lists(&r, &spans);
    if (!rc) rc = rd_devices(&r, spans);
    if (!rc) rc = rd_expect(&r, "end");
    if (!rc && r.nt != 1) rc = rd_err(&r, "'end' stands alone on its line");
    if (!rc) {
        int more = rd_next(&r);
        if (more < 0) rc = -1;
        else if (more > 0) rc = rd_err(&r, "text after 'end'; a plan file ends with its 'end' line");
    }
    if (!rc) rc = rd_check_groups(&r, group_lines);
    free(group_lines);
    free(spans);
    free(r.t);
    base_buf_free(&r.scratch);
    if (rc) {
        plan_free(p);
        return -1;
    }
    return 0;
}

int plan_read_file(plan_set *p, const char *path, base_error *e)
{
    base_buf b = {0};
    if (base_read_file_max(path, &b, BASE_READ_MAX_WRITTEN, e)) {
        plan_init(p);
        return -1;
    }
    int rc = plan_read(p, path, b.s, b.n, e);
    base_buf_free(&b);
    return rc;
}
