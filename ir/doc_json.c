/* doc_json.c — piper's strict JSON reader (RFC 8259), feeding the same tree builder as YAML so
 * that a program written to Piper's JSON schema and one written in YAML load into the same tree.
 *
 * Why not let libyaml read JSON (it is nearly YAML)? Its errors talk about YAML, it accepts what
 * JSON forbids (single quotes, bare words, trailing text), and it tracks no JSON-specific
 * mistakes. Here every mistake (trailing comma, comment, unquoted key, lone surrogate) is named at
 * its line and column. The reader is a loop over an explicit stack (the builder's), so no input
 * can exhaust the C stack. Columns count characters, not bytes, as libyaml's do. */
#include "doc_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct json_reader {
    const unsigned char *s;
    size_t len, i;
    int line, col;
    doc_builder *b;
    base_error *e;
    base_buf scratch;   /* decoded string, reused */
} json_reader;

static int peek(const json_reader *r) { return r->i < r->len ? r->s[r->i] : -1; }

static void advance(json_reader *r)
{
    unsigned char c = r->s[r->i++];
    bool crlf = c == '\r' && r->i < r->len && r->s[r->i] == '\n';
    if (c == '\n' || (c == '\r' && !crlf)) {
        if (r->line < INT_MAX) r->line++;
        r->col = 1;
    } else if (!crlf && (c & 0xC0) != 0x80 && r->col < INT_MAX) {
        r->col++;
    }
}

static void skip_ws(json_reader *r)
{
    for (int c = peek(r); c == ' ' || c == '\t' || c == '\n' || c == '\r'; c = peek(r)) advance(r);
}

static int fail(json_reader *r, int line, int col, const char *fmt, ...) BASE_PRINTF(4, 5);
static int fail(json_reader *r, int line, int col, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    base_error_vat(r->e, r->b->file, line, col, fmt, ap);
    va_end(ap);
    return -1;
}

/* The character at the cursor as a message shows it. */
static const char *show_char(const json_reader *r, char *buf, size_t n)
{
    int c = peek(r);
    if (c < 0) return "the end of the text";
    if (c >= 0x20 && c < 0x7F) snprintf(buf, n, "'%c'", c);
    else snprintf(buf, n, "byte 0x%02X", (unsigned)c);
    return buf;
}

static int unexpected(json_reader *r, const char *wanted)
{
    char ch[32];
    int c = peek(r);
    const char *hint = "";
    if (c == '/') hint = "; comments are not allowed in JSON";
    else if (c == '\'') hint = "; JSON strings use double quotes";
    else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_')
        hint = "; JSON strings are written in double quotes (a file starting with '{' or '[' is "
               "read as JSON)";
    return fail(r, r->line, r->col, "expected %s, got %s%s", wanted, show_char(r, ch, sizeof ch),
                hint);
}

static int hex4(const json_reader *r, size_t at, unsigned *out)
{
    if (at + 4 > r->len) return -1;
    unsigned v = 0;
    for (size_t k = 0; k < 4; k++) {
        unsigned char c = r->s[at + k];
        unsigned d;
        if (c >= '0' && c <= '9') d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') d = (unsigned)(c - 'A' + 10);
        else return -1;
        v = v * 16 + d;
    }
    *out = v;
    return 0;
}

static void put_utf8(base_buf *b, unsigned cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    base_buf_putn(b, u, n);
}

/* Length of the well-formed UTF-8 sequence at s (shortest form, no surrogates, <= U+10FFFF),
 * or 0. */
static size_t utf8_len(const unsigned char *s, size_t avail)
{
    unsigned char c = s[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c == 0xE0) n = 3, lo = 0xA0;
    else if (c == 0xED) n = 3, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) n = 3;
    else if (c == 0xF0) n = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) n = 4;
    else if (c == 0xF4) n = 4, hi = 0x8F;
    else return 0;
    if (avail < n) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t k = 2; k < n; k++)
        if (s[k] < 0x80 || s[k] > 0xBF) return 0;
    return n;
}

/* Reads a string at the cursor (on its opening quote) into a new scalar. */
static int read_string(json_reader *r, ir_doc **out)
{
    int line = r->line, col = r->col;
    advance(r); /* the opening quote */
    r->scratch.n = 0;
    base_buf_putn(&r->scratch, "", 0);
    for (;;) {
        int c = peek(r);
        if (c < 0)
            return fail(r, line, col, "a string that is never closed; add the closing '\"'");
        if (c == '"') {
            advance(r);
            break;
        }
        if (c < 0x20)
            return fail(r, r->line, r->col, "a control character (0x%02X) inside a string; write "
                        "it as an escape such as \\n or \\t", (unsigned)c);
        if (c == '\\') {
            int eline = r->line, ecol = r->col;
            advance(r);
            int x = peek(r);
            const char *simple = NULL;
            switch (x) {
            case '"': simple = "\""; break;
            case '\\': simple = "\\"; break;
            case '/': simple = "/"; break;
            case 'b': simple = "\b"; break;
            case 'f': simple = "\f"; break;
            case 'n': simple = "\n"; break;
            case 'r': simple = "\r"; break;
            case 't': simple = "\t"; break;
            case 'u': break;
            default: {
                char ch[32];
                return fail(r, eline, ecol, "an invalid escape: '\\' followed by %s; use one of "
                            "\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX", show_char(r, ch, sizeof ch));
            }
            }
            if (simple) {
                base_buf_putn(&r->scratch, simple, 1);
                advance(r);
                continue;
            }
            unsigned cp, lo;
            if (hex4(r, r->i + 1, &cp))
                return fail(r, eline, ecol, "\\u must be followed by four hex digits; write e.g. "
                            "\\u00e9");
            size_t consumed = 5;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                /* UTF-16 surrogate pair: both halves or nothing */
                size_t j = r->i + 5;
                if (j + 1 < r->len && r->s[j] == '\\' && r->s[j + 1] == 'u' &&
                    hex4(r, j + 2, &lo) == 0 && lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    consumed = 11;
                } else {
                    return fail(r, eline, ecol, "\\u%04X is half of a UTF-16 surrogate pair and "
                                "the other half does not follow; write the pair (\\uD83D\\uDE00) "
                                "or the character itself", cp);
                }
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return fail(r, eline, ecol, "\\u%04X is the second half of a UTF-16 surrogate "
                            "pair without the first; write the pair or the character itself", cp);
            } else if (cp == 0) {
                return fail(r, eline, ecol, "the string contains a NUL character (\\u0000); "
                            "remove it");
            }
            for (size_t k = 0; k < consumed; k++) advance(r);
            put_utf8(&r->scratch, cp);
            continue;
        }
        if (c >= 0x80) {
            size_t n = utf8_len(r->s + r->i, r->len - r->i);
            if (!n)
                return fail(r, r->line, r->col, "invalid UTF-8 (byte 0x%02X) inside a string; "
                            "save the file as UTF-8", (unsigned)c);
            base_buf_putn(&r->scratch, (const char *)r->s + r->i, n);
            for (size_t k = 0; k < n; k++) advance(r);
            continue;
        }
        char ch = (char)c;
        base_buf_putn(&r->scratch, &ch, 1);
        advance(r);
    }
    ir_doc *d = doc_builder_node(r->b, IR_DOC_SCALAR, line, col);
    d->str = base_arena_strndup(r->b->a, r->scratch.s, r->scratch.n);
    d->quoted = true;
    *out = d;
    return 0;
}

static bool is_digit(int c) { return c >= '0' && c <= '9'; }

/* Numbers stay text: the typed reads decide what they may be (an int64, a double, a size). */
static int read_number(json_reader *r, ir_doc **out)
{
    int line = r->line, col = r->col;
    size_t start = r->i;
    if (peek(r) == '-') advance(r);
    if (peek(r) == '0') {
        advance(r);
        if (is_digit(peek(r)))
            return fail(r, line, col, "a number with a leading zero; write it without the 0");
    } else if (is_digit(peek(r))) {
        while (is_digit(peek(r))) advance(r);
    } else {
        return unexpected(r, "a digit after '-'");
    }
    if (peek(r) == '.') {
        advance(r);
        if (!is_digit(peek(r))) return unexpected(r, "a digit after '.'");
        while (is_digit(peek(r))) advance(r);
    }
    if (peek(r) == 'e' || peek(r) == 'E') {
        advance(r);
        if (peek(r) == '+' || peek(r) == '-') advance(r);
        if (!is_digit(peek(r))) return unexpected(r, "a digit in the exponent");
        while (is_digit(peek(r))) advance(r);
    }
    ir_doc *d = doc_builder_node(r->b, IR_DOC_SCALAR, line, col);
    d->str = base_arena_strndup(r->b->a, (const char *)r->s + start, r->i - start);
    *out = d;
    return 0;
}

static const char VALUE_WANTED[] =
    "a value (a string in double quotes, a number, true, false, null, '{' or '[')";

static int read_literal(json_reader *r, ir_doc **out)
{
    static const char *const words[] = {"true", "false", "null"};
    for (size_t w = 0; w < BASE_COUNT(words); w++) {
        size_t n = strlen(words[w]);
        if (r->len - r->i >= n && memcmp(r->s + r->i, words[w], n) == 0) {
            ir_doc *d = doc_builder_node(r->b, IR_DOC_SCALAR, r->line, r->col);
            d->str = words[w];
            d->null = w == 2;
            for (size_t k = 0; k < n; k++) advance(r);
            *out = d;
            return 0;
        }
    }
    return unexpected(r, VALUE_WANTED);
}

typedef enum { WANT_VALUE, WANT_KEY, AFTER_VALUE, DONE } json_state;

static int json_run(json_reader *r)
{
    json_state st = WANT_VALUE;
    if (r->len >= 3 && memcmp(r->s, "\xEF\xBB\xBF", 3) == 0) r->i = 3;
    skip_ws(r);
    while (st != DONE) {
        int c = peek(r);
        switch (st) {
        case WANT_VALUE: {
            ir_doc *d = NULL;
            if (c == '{' || c == '[') {
                bool map = c == '{';
                if (doc_builder_open(r->b, map ? IR_DOC_MAP : IR_DOC_SEQ, r->line, r->col))
                    return -1;
                advance(r);
                skip_ws(r);
                if (peek(r) == (map ? '}' : ']')) {
                    advance(r);
                    if (doc_builder_close(r->b)) return -1;
                    st = AFTER_VALUE;
                    break;
                }
                st = map ? WANT_KEY : WANT_VALUE;
                continue;
            }
            int rc;
            if (c == '"') rc = read_string(r, &d);
            else if (c == '-' || is_digit(c)) rc = read_number(r, &d);
            else if (c == 't' || c == 'f' || c == 'n') rc = read_literal(r, &d);
            else rc = unexpected(r, VALUE_WANTED);
            if (rc || doc_builder_scalar(r->b, d)) return -1;
            st = AFTER_VALUE;
            break;
        }
        case WANT_KEY: {
            if (c != '"') return unexpected(r, "a key in double quotes");
            ir_doc *k = NULL;
            if (read_string(r, &k) || doc_builder_scalar(r->b, k)) return -1;
            skip_ws(r);
            if (peek(r) != ':') return unexpected(r, "':' after the key");
            advance(r);
            st = WANT_VALUE;
            break;
        }
        case AFTER_VALUE: {
            if (r->b->depth == 0) {
                if (c >= 0) return unexpected(r, "the end of the text after the JSON value");
                st = DONE;
                break;
            }
            bool map = r->b->stack[r->b->depth - 1].node->kind == IR_DOC_MAP;
            int close = map ? '}' : ']';
            if (c == close) {
                advance(r);
                if (doc_builder_close(r->b)) return -1;
                break;
            }
            if (c != ',') return unexpected(r, map ? "',' or '}'" : "',' or ']'");
            int cline = r->line, ccol = r->col;
            advance(r);
            skip_ws(r);
            if (peek(r) == close)
                return fail(r, cline, ccol, "a trailing comma before '%c'; remove the comma",
                            close);
            st = map ? WANT_KEY : WANT_VALUE;
            continue;
        }
        case DONE:
            break;
        }
        skip_ws(r);
    }
    return 0;
}

int ir_doc_parse_json(base_arena *a, const char *name, const char *text, size_t len, ir_doc **out,
                      base_error *e)
{
    *out = NULL;
    const char *file = base_arena_strdup(a, name ? name : "<input>");
    if (len > (size_t)INT_MAX)
        return base_error_at(e, file, 0, 0, "the file is larger than 2 GiB; split it");
    json_reader r = {.s = (const unsigned char *)(text ? text : ""), .len = text ? len : 0,
                     .line = 1, .col = 1, .e = e};
    r.b = base_xmalloc(sizeof *r.b);
    doc_builder_init(r.b, a, file, e);
    int rc = json_run(&r);
    if (rc == 0) *out = r.b->root;
    doc_builder_free(r.b);
    free(r.b);
    base_buf_free(&r.scratch);
    return rc;
}
