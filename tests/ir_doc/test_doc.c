/* test_doc.c — the YAML/JSON document loader (ir/doc.h): node positions, YAML and JSON giving
 * the same tree, every error path with its position and text, typed reads and units, the key
 * schema check, overflow and depth limits. */
#include <math.h>

#include "ir/doc.h"
#include "tests/testutil.h"

/* Exact string comparison that shows both sides when they differ. */
#define ASSERT_STREQ(got, want)                                                                  \
    do {                                                                                       \
        const char *g_ = (got), *w_ = (want);                                                  \
        int ok_ = g_ && strcmp(g_, w_) == 0;                                                   \
        if (!ok_) fprintf(stderr, "\n  got  \"%s\"\n  want \"%s\"\n", g_ ? g_ : "(null)", w_);  \
        CU_ASSERT(ok_);                                                                        \
    } while (0)

#define ASSERT_POS(d, l, c)                                                                     \
    do {                                                                                       \
        const ir_doc *d_ = (d);                                                                \
        CU_ASSERT_PTR_NOT_NULL_FATAL(d_);                                                      \
        if (d_->line != (l) || d_->col != (c))                                                 \
            fprintf(stderr, "\n  %s at %d:%d, want %d:%d\n", #d, d_->line, d_->col, (l), (c)); \
        CU_ASSERT(d_->line == (l) && d_->col == (c));                                          \
    } while (0)

static base_arena arena;
static base_error err;
static char last_msg[BASE_ERROR_MAX];

static void fresh(void)
{
    base_arena_free(&arena);
    base_arena_init(&arena);
    base_error_clear(&err);
}

static ir_doc *parse_n(const char *name, const char *text, size_t len)
{
    fresh();
    ir_doc *d = NULL;
    int rc = ir_doc_parse(&arena, name, text, len, &d, &err);
    if (rc) fprintf(stderr, "\n  unexpected parse error: %s\n", err.msg);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_FALSE(err.set);
    return d;
}

static ir_doc *parse(const char *text) { return parse_n("t.yaml", text, strlen(text)); }

/* Parses text that must fail; returns the message. */
static const char *parse_fail_n(const char *name, const char *text, size_t len)
{
    fresh();
    ir_doc *d = (ir_doc *)1;
    int rc = ir_doc_parse(&arena, name, text, len, &d, &err);
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_PTR_NULL(d);
    CU_ASSERT_TRUE(err.set);
    snprintf(last_msg, sizeof last_msg, "%s", err.msg);
    return last_msg;
}

static const char *parse_fail(const char *text) { return parse_fail_n("t.yaml", text, strlen(text)); }

static ir_doc *get(const ir_doc *m, const char *k)
{
    ir_doc *v = ir_doc_get(m, k);
    if (!v) fprintf(stderr, "\n  key '%s' missing\n", k);
    return v;
}

/* Structural equality, positions aside. */
static bool same_tree(const ir_doc *x, const ir_doc *y)
{
    if (x->kind != y->kind || x->n != y->n) return false;
    if (x->kind == IR_DOC_SCALAR)
        return strcmp(x->str, y->str) == 0 && x->null == y->null && x->quoted == y->quoted;
    for (int i = 0; i < x->n; i++) {
        if (x->kind == IR_DOC_MAP && strcmp(x->keys[i]->str, y->keys[i]->str) != 0) return false;
        if (!same_tree(x->items[i], y->items[i])) return false;
    }
    return true;
}

/* ---------------------------------------------------------------- positions */

static void test_yaml_positions(void)
{
    const char *text = "# header\n"
                       "name: gpt\n"
                       "layers:   24\n"
                       "shape:\n"
                       "  hidden: 768\n"
                       "  list:\n"
                       "    - a\n"
                       "    - \"b\"\n"
                       "flow: {x: 1, y: [2, 3]}\n"
                       "seq:\n"
                       "- 7\n"
                       "empty:\n"
                       "text: |\n"
                       "  two\n"
                       "  lines\n";
    ir_doc *d = parse(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_EQUAL(d->kind, IR_DOC_MAP);
    ASSERT_POS(d, 2, 1);
    CU_ASSERT_EQUAL(d->n, 7);
    ASSERT_STREQ(d->file, "t.yaml");
    ASSERT_POS(d->keys[0], 2, 1);
    ASSERT_POS(get(d, "name"), 2, 7);
    ASSERT_POS(d->keys[1], 3, 1);
    ASSERT_POS(get(d, "layers"), 3, 11);
    ASSERT_STREQ(get(d, "layers")->str, "24");
    ir_doc *shape = get(d, "shape");
    ASSERT_POS(shape, 5, 3);
    ASSERT_POS(get(shape, "hidden"), 5, 11);
    ir_doc *list = get(shape, "list");
    ASSERT_POS(list, 7, 5);
    CU_ASSERT_EQUAL_FATAL(list->n, 2);
    ASSERT_POS(list->items[0], 7, 7);
    ASSERT_POS(list->items[1], 8, 7); /* a quoted scalar starts at its quote */
    CU_ASSERT_TRUE(list->items[1]->quoted);
    CU_ASSERT_FALSE(list->items[0]->quoted);
    ir_doc *flow = get(d, "flow");
    ASSERT_POS(flow, 9, 7);
    ASSERT_POS(flow->keys[1], 9, 14);
    ir_doc *y = get(flow, "y");
    ASSERT_POS(y, 9, 17);
    CU_ASSERT_EQUAL_FATAL(y->n, 2);
    ASSERT_POS(y->items[1], 9, 21);
    ir_doc *seq = get(d, "seq");
    ASSERT_POS(seq, 11, 1);
    ASSERT_POS(seq->items[0], 11, 3);
    ir_doc *empty = get(d, "empty");
    CU_ASSERT_TRUE(empty->null);
    ASSERT_STREQ(empty->str, "");
    ir_doc *t = get(d, "text");
    ASSERT_POS(t, 13, 7);
    ASSERT_STREQ(t->str, "two\nlines\n");
    CU_ASSERT_TRUE(t->quoted); /* a block scalar is text, never a number */
    base_arena_free(&arena);
}

static void test_json_positions(void)
{
    const char *text = "{\n"
                       "  \"name\": \"gpt\",\n"
                       "  \"dims\": [768,\n"
                       "           -1.5e3],\n"
                       "  \"\xC3\xA9t\xC3\xA9\": true, \"n\": null\n"
                       "}\n";
    ir_doc *d = parse_n("t.json", text, strlen(text));
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    ASSERT_POS(d, 1, 1);
    ASSERT_STREQ(d->file, "t.json");
    CU_ASSERT_EQUAL(d->n, 4);
    ASSERT_POS(d->keys[0], 2, 3);
    ASSERT_POS(get(d, "name"), 2, 11);
    ir_doc *dims = get(d, "dims");
    ASSERT_POS(dims, 3, 11);
    CU_ASSERT_EQUAL_FATAL(dims->n, 2);
    ASSERT_POS(dims->items[0], 3, 12);
    ASSERT_POS(dims->items[1], 4, 12);
    ASSERT_STREQ(dims->items[1]->str, "-1.5e3");
    CU_ASSERT_FALSE(dims->items[1]->quoted);
    /* columns count characters: "été" is 3 characters but 5 bytes */
    ir_doc *ete = get(d, "\xC3\xA9t\xC3\xA9");
    ASSERT_POS(ete, 5, 10);
    ASSERT_STREQ(ete->str, "true");
    ir_doc *n = get(d, "n");
    ASSERT_POS(n, 5, 21);
    CU_ASSERT_TRUE(n->null);
    base_arena_free(&arena);
}

static void test_crlf_and_bom_positions(void)
{
    ir_doc *d = parse("\xEF\xBB\xBF" "a: 1\r\nb: 2\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    ASSERT_POS(get(d, "b"), 2, 4);
    d = parse_n("t.json", "\xEF\xBB\xBF{\"a\": 1,\r\n\"b\": 2}", 20);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    ASSERT_POS(get(d, "a"), 1, 7);
    ASSERT_POS(get(d, "b"), 2, 6);
    base_arena_free(&arena);
}

static void test_yaml_and_json_same_tree(void)
{
    base_arena a;
    base_arena_init(&a);
    base_error e;
    base_error_clear(&e);
    ir_doc *y = NULL, *j = NULL;
    CU_ASSERT_EQUAL(ir_doc_load(&a, test_src_path("tests/fixtures/doc/program.yaml"), &y, &e), 0);
    CU_ASSERT_EQUAL(ir_doc_load(&a, test_src_path("tests/fixtures/doc/program.json"), &j, &e), 0);
    if (e.set) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(y);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_TRUE(same_tree(y, j));
    /* the file name in every node is the path it was loaded from */
    TEST_ASSERT_CONTAINS(y->file, "tests/fixtures/doc/program.yaml");
    ir_doc *dirs = ir_doc_get(y, "directives");
    CU_ASSERT_PTR_NOT_NULL_FATAL(dirs);
    CU_ASSERT_EQUAL_FATAL(dirs->n, 2);
    ASSERT_POS(ir_doc_get(dirs->items[1], "bucket_size"), 14, 18);
    ASSERT_POS(ir_doc_get(ir_doc_get(j, "directives")->items[1], "bucket_size"), 8, 51);
    double bytes = 0;
    CU_ASSERT_EQUAL(ir_doc_bytes(ir_doc_get(dirs->items[1], "bucket_size"), "bucket_size", &bytes, &e), 0);
    CU_ASSERT_EQUAL(bytes, 25e6);
    /* and a tree that differs is told apart */
    ir_doc *other = NULL;
    CU_ASSERT_EQUAL(ir_doc_parse(&a, "o.json", "{\"model\": 1}", 12, &other, &e), 0);
    CU_ASSERT_FALSE(same_tree(y, other));
    base_arena_free(&a);
}

static void test_scalar_flags(void)
{
    ir_doc *d = parse("a: ~\nb: null\nc: NULL\nd: 'null'\ne: \"\"\nf:\ng: nul\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_TRUE(get(d, "a")->null);
    CU_ASSERT_TRUE(get(d, "b")->null);
    CU_ASSERT_TRUE(get(d, "c")->null);
    CU_ASSERT_FALSE(get(d, "d")->null);
    CU_ASSERT_TRUE(get(d, "d")->quoted);
    CU_ASSERT_FALSE(get(d, "e")->null);
    CU_ASSERT_TRUE(get(d, "f")->null);
    CU_ASSERT_FALSE(get(d, "g")->null);
    d = parse("[null, \"null\", true, \"a\\u00e9\\ud83d\\ude00\\n\\t\\\"\\\\\\/\"]");
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_EQUAL_FATAL(d->n, 4);
    CU_ASSERT_TRUE(d->items[0]->null);
    CU_ASSERT_FALSE(d->items[0]->quoted);
    CU_ASSERT_FALSE(d->items[1]->null);
    CU_ASSERT_TRUE(d->items[1]->quoted);
    CU_ASSERT_FALSE(d->items[2]->quoted);
    ASSERT_STREQ(d->items[3]->str, "a\xC3\xA9\xF0\x9F\x98\x80\n\t\"\\/");
    /* empty files and comment-only files are one null, like an empty YAML document */
    d = parse("");
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_TRUE(d->kind == IR_DOC_SCALAR && d->null);
    d = parse("# only a comment\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_TRUE(d->kind == IR_DOC_SCALAR && d->null);
    d = parse("{}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_TRUE(d->kind == IR_DOC_MAP && d->n == 0);
    d = parse(" [ ] ");
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_TRUE(d->kind == IR_DOC_SEQ && d->n == 0);
    base_arena_free(&arena);
}

static void test_get(void)
{
    ir_doc *d = parse("a: 1\nb: {c: 2}\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_PTR_NULL(ir_doc_get(d, "c"));
    CU_ASSERT_PTR_NULL(ir_doc_get(get(d, "a"), "a"));
    CU_ASSERT_PTR_NULL(ir_doc_get(NULL, "a"));
    ASSERT_STREQ(ir_doc_get(get(d, "b"), "c")->str, "2");
    base_arena_free(&arena);
}

/* JSON is chosen by the first significant character only, so a YAML flow map after a comment is
 * still YAML, and leading blank lines do not hide JSON. */
static void test_format_detection(void)
{
    ir_doc *d = parse("# flow style YAML\n{a: 1, b: [x]}\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_EQUAL(d->kind, IR_DOC_MAP);
    ASSERT_POS(d, 2, 1);
    CU_ASSERT_FALSE(get(d, "b")->items[0]->quoted);
    d = parse("\n\n  {\"a\": \"x\"}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    ASSERT_POS(d, 3, 3);
    ASSERT_POS(get(d, "a"), 3, 9);
    /* what JSON forbids and YAML allows is refused once the text is JSON */
    ASSERT_STREQ(parse_fail("  ['a']"), "t.yaml:1:4: expected a value (a string in double quotes, "
                                        "a number, true, false, null, '{' or '['), got '''; JSON "
                                        "strings use double quotes");
    base_arena_free(&arena);
}

/* ---------------------------------------------------------------- YAML errors */

static void test_yaml_errors(void)
{
    ASSERT_STREQ(parse_fail("layers: 1\nhidden: 2\nlayers: 3\n"),
                 "t.yaml:3:1: duplicate key 'layers': it is also at 1:1; keep one of them");
    ASSERT_STREQ(parse_fail("a: {x: 1, y: 2, x: 3}\n"),
                 "t.yaml:1:17: duplicate key 'x': it is also at 1:5; keep one of them");
    /* the first repeat in the file is the one reported */
    ASSERT_STREQ(parse_fail("b: 1\na: 1\nb: 2\na: 2\n"),
                 "t.yaml:3:1: duplicate key 'b': it is also at 1:1; keep one of them");
    ASSERT_STREQ(parse_fail("a: 1\n---\nb: 2\n"),
                 "t.yaml:2:1: a second document ('---') in one file; keep one document per file");
    ASSERT_STREQ(parse_fail("a: &x 1\nb: *x\n"),
                 "t.yaml:1:4: anchors (&x) are not supported; write the value out in full");
    ASSERT_STREQ(parse_fail("a: 1\nb: *x\n"),
                 "t.yaml:2:4: aliases (*x) are not supported; write the value out in full");
    ASSERT_STREQ(parse_fail("a: !!str 1\n"),
                 "t.yaml:1:4: tags (!!str) are not supported; remove the tag");
    ASSERT_STREQ(parse_fail("a: !mine {b: 1}\n"),
                 "t.yaml:1:4: tags (!mine) are not supported; remove the tag");
    ASSERT_STREQ(parse_fail("a: &m [1]\n"),
                 "t.yaml:1:4: anchors (&m) are not supported; write the value out in full");
    ASSERT_STREQ(parse_fail("? [a, b]\n: 1\n"),
                 "t.yaml:1:3: a map key must be a plain value, not a list; write a name followed by ':'");
    ASSERT_STREQ(parse_fail("{a: 1}: 2\n"),
                 "t.yaml:1:2: expected a key in double quotes, got 'a'; JSON strings are written "
                 "in double quotes (a file starting with '{' or '[' is read as JSON)");
    ASSERT_STREQ(parse_fail("x:\n  ? {a: 1}\n  : 2\n"),
                 "t.yaml:2:5: a map key must be a plain value, not a map; write a name followed by ':'");
    ASSERT_STREQ(parse_fail("? \n: 1\n"), "t.yaml:1:2: a map key is empty; write a name before ':'");
    ASSERT_STREQ(parse_fail("a: b: c\n"),
                 "t.yaml:1:5: YAML syntax error: mapping values are not allowed in this context; "
                 "check the indentation, the ':' after each key and that quotes and brackets are closed");
    ASSERT_STREQ(parse_fail("a: [1, 2\nb: 3\n"),
                 "t.yaml:2:2: YAML syntax error: did not find expected ',' or ']' (while parsing a "
                 "flow sequence at 1:4); check the indentation, the ':' after each key and that "
                 "quotes and brackets are closed");
    ASSERT_STREQ(parse_fail("a: \"open\n"),
                 "t.yaml:2:1: YAML syntax error: found unexpected end of stream (while scanning a "
                 "quoted scalar at 1:4); check the indentation, the ':' after each key and that "
                 "quotes and brackets are closed");
    ASSERT_STREQ(parse_fail("a: \"x\\0y\"\n"), "t.yaml:1:4: the text contains a NUL character; remove it");
    ASSERT_STREQ(parse_fail("a: 1\nb: \xFF\n"),
                 "t.yaml:2:4: the text is not valid UTF-8 YAML (invalid leading UTF-8 octet, 0xFF); "
                 "save the file as UTF-8 text without control characters");
    /* an embedded NUL byte in the file itself */
    ASSERT_STREQ(parse_fail_n("t.yaml", "a: 1\nb: x\0y\n", 11),
                 "t.yaml:2:5: the text is not valid UTF-8 YAML (control characters are not "
                 "allowed, 0x00); save the file as UTF-8 text without control characters");
    ASSERT_STREQ(parse_fail("a:\n  - 1\n  b: 2\n"),
                 "t.yaml:3:3: YAML syntax error: did not find expected '-' indicator (while parsing a "
                 "block collection at 2:3); check the indentation, the ':' after each key and that "
                 "quotes and brackets are closed");
    base_arena_free(&arena);
}

/* ---------------------------------------------------------------- JSON errors */

static void test_json_errors(void)
{
#define JFAIL(text) parse_fail_n("p.json", text, strlen(text))
    ASSERT_STREQ(JFAIL("[1, 2,]"), "p.json:1:6: a trailing comma before ']'; remove the comma");
    ASSERT_STREQ(JFAIL("{\"a\": 1,\n }"), "p.json:1:8: a trailing comma before '}'; remove the comma");
    ASSERT_STREQ(JFAIL("{\"a\": 1 // one\n}"),
                 "p.json:1:9: expected ',' or '}', got '/'; comments are not allowed in JSON");
    ASSERT_STREQ(JFAIL("[1 /* x */]"),
                 "p.json:1:4: expected ',' or ']', got '/'; comments are not allowed in JSON");
    ASSERT_STREQ(JFAIL("{'a': 1}"),
                 "p.json:1:2: expected a key in double quotes, got '''; JSON strings use double quotes");
    ASSERT_STREQ(JFAIL("{\"a\" 1}"), "p.json:1:6: expected ':' after the key, got '1'");
    ASSERT_STREQ(JFAIL("{\"a\": 1 \"b\": 2}"), "p.json:1:9: expected ',' or '}', got '\"'");
    ASSERT_STREQ(JFAIL("[1 2]"), "p.json:1:4: expected ',' or ']', got '2'");
    ASSERT_STREQ(JFAIL("{\"a\": 1, \"a\": 2}"),
                 "p.json:1:10: duplicate key 'a': it is also at 1:2; keep one of them");
    ASSERT_STREQ(JFAIL("[01]"), "p.json:1:2: a number with a leading zero; write it without the 0");
    ASSERT_STREQ(JFAIL("[1.]"), "p.json:1:4: expected a digit after '.', got ']'");
    ASSERT_STREQ(JFAIL("[1e+]"), "p.json:1:5: expected a digit in the exponent, got ']'");
    ASSERT_STREQ(JFAIL("[-]"), "p.json:1:3: expected a digit after '-', got ']'");
    ASSERT_STREQ(JFAIL("[+1]"),
                 "p.json:1:2: expected a value (a string in double quotes, a number, true, false, "
                 "null, '{' or '['), got '+'");
    ASSERT_STREQ(JFAIL("[NaN]"),
                 "p.json:1:2: expected a value (a string in double quotes, a number, true, false, "
                 "null, '{' or '['), got 'N'; JSON strings are written in double quotes (a file "
                 "starting with '{' or '[' is read as JSON)");
    ASSERT_STREQ(JFAIL("[tru]"),
                 "p.json:1:2: expected a value (a string in double quotes, a number, true, false, "
                 "null, '{' or '['), got 't'; JSON strings are written in double quotes (a file "
                 "starting with '{' or '[' is read as JSON)");
    ASSERT_STREQ(JFAIL("[truex]"), "p.json:1:6: expected ',' or ']', got 'x'; JSON strings are "
                                   "written in double quotes (a file starting with '{' or '[' is read as JSON)");
    ASSERT_STREQ(JFAIL("[1]\n[2]"), "p.json:2:1: expected the end of the text after the JSON value, got '['");
    ASSERT_STREQ(JFAIL("[\"abc"), "p.json:1:2: a string that is never closed; add the closing '\"'");
    ASSERT_STREQ(JFAIL("{\"a\": [1,"),
                 "p.json:1:10: expected a value (a string in double quotes, a number, true, false, "
                 "null, '{' or '['), got the end of the text");
    ASSERT_STREQ(JFAIL("{"), "p.json:1:2: expected a key in double quotes, got the end of the text");
    ASSERT_STREQ(JFAIL("[\"a\\qb\"]"),
                 "p.json:1:4: an invalid escape: '\\' followed by 'q'; use one of \\\" \\\\ \\/ \\b \\f "
                 "\\n \\r \\t \\uXXXX");
    ASSERT_STREQ(JFAIL("[\"\\u12G4\"]"), "p.json:1:3: \\u must be followed by four hex digits; write e.g. \\u00e9");
    ASSERT_STREQ(JFAIL("[\"\\ud83d\"]"),
                 "p.json:1:3: \\uD83D is half of a UTF-16 surrogate pair and the other half does not "
                 "follow; write the pair (\\uD83D\\uDE00) or the character itself");
    ASSERT_STREQ(JFAIL("[\"\\ud83d\\u0041\"]"),
                 "p.json:1:3: \\uD83D is half of a UTF-16 surrogate pair and the other half does not "
                 "follow; write the pair (\\uD83D\\uDE00) or the character itself");
    ASSERT_STREQ(JFAIL("[\"x\\uDE00\"]"),
                 "p.json:1:4: \\uDE00 is the second half of a UTF-16 surrogate pair without the "
                 "first; write the pair or the character itself");
    ASSERT_STREQ(JFAIL("[\"\\u0000\"]"), "p.json:1:3: the string contains a NUL character (\\u0000); remove it");
    ASSERT_STREQ(JFAIL("[\"a\tb\"]"),
                 "p.json:1:4: a control character (0x09) inside a string; write it as an escape such as \\n or \\t");
    ASSERT_STREQ(JFAIL("[\"a\xC3\"]"), "p.json:1:4: invalid UTF-8 (byte 0xC3) inside a string; save the file as UTF-8");
    ASSERT_STREQ(JFAIL("[\"\xED\xA0\x80\"]"), "p.json:1:3: invalid UTF-8 (byte 0xED) inside a string; save the file as UTF-8");
    ASSERT_STREQ(JFAIL("[\"\xC0\xAF\"]"), "p.json:1:3: invalid UTF-8 (byte 0xC0) inside a string; save the file as UTF-8");
    ASSERT_STREQ(JFAIL("[1, \xFF]"),
                 "p.json:1:5: expected a value (a string in double quotes, a number, true, false, "
                 "null, '{' or '['), got byte 0xFF");
    ASSERT_STREQ(parse_fail_n("p.json", "[1,\n 2\0]", 8), "p.json:2:3: expected ',' or ']', got byte 0x00");
    ASSERT_STREQ(JFAIL("{\"a\": 1}}"), "p.json:1:9: expected the end of the text after the JSON value, got '}'");
    ASSERT_STREQ(JFAIL("[{\"k\": [1]]"), "p.json:1:11: expected ',' or '}', got ']'");
#undef JFAIL
    base_arena_free(&arena);
}

static void test_depth_limit(void)
{
    enum { LIMIT = 256, BIG = 200000 };
    char *text = base_xmalloc(2 * BIG + 16);
    /* exactly the limit loads */
    memset(text, '[', LIMIT);
    memset(text + LIMIT, ']', LIMIT);
    ir_doc *d = parse_n("deep.json", text, 2 * LIMIT);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    int depth = 0;
    for (const ir_doc *x = d; x; x = x->n ? x->items[0] : NULL) depth++;
    CU_ASSERT_EQUAL(depth, LIMIT);
    /* one more is refused at the bracket that goes too deep */
    memset(text, '[', LIMIT + 1);
    memset(text + LIMIT + 1, ']', LIMIT + 1);
    ASSERT_STREQ(parse_fail_n("deep.json", text, 2 * (LIMIT + 1)),
                 "deep.json:1:257: the document nests deeper than 256 levels; flatten it");
    /* far deeper never reaches the C stack, in either reader */
    memset(text, '[', BIG);
    ASSERT_STREQ(parse_fail_n("deep.json", text, BIG),
                 "deep.json:1:257: the document nests deeper than 256 levels; flatten it");
    memcpy(text, "a: ", 3);
    ASSERT_STREQ(parse_fail_n("deep.yaml", text, BIG),
                 "deep.yaml:1:259: the document nests deeper than 256 levels; flatten it");
    /* block nesting in YAML too */
    base_buf b = {0};
    for (int i = 0; i < LIMIT + 1; i++) {
        for (int k = 0; k < i; k++) base_buf_puts(&b, " ");
        base_buf_puts(&b, "k:\n");
    }
    ASSERT_STREQ(parse_fail_n("deep.yaml", b.s, b.n),
                 "deep.yaml:257:257: the document nests deeper than 256 levels; flatten it");
    base_buf_free(&b);
    free(text);
    base_arena_free(&arena);
}

static void test_large_map_duplicates(void)
{
    base_buf b = {0};
    for (int i = 0; i < 20000; i++) base_buf_printf(&b, "key%d: %d\n", i, i);
    ir_doc *d = parse_n("big.yaml", b.s, b.n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_EQUAL(d->n, 20000);
    ASSERT_STREQ(ir_doc_get(d, "key19999")->str, "19999");
    base_buf_puts(&b, "key123: again\n");
    ASSERT_STREQ(parse_fail_n("big.yaml", b.s, b.n),
                 "big.yaml:20001:1: duplicate key 'key123': it is also at 124:1; keep one of them");
    base_buf_free(&b);
    base_arena_free(&arena);
}

static void test_load_missing_file(void)
{
    base_arena a;
    base_arena_init(&a);
    base_error e;
    base_error_clear(&e);
    ir_doc *d = (ir_doc *)1;
    CU_ASSERT_EQUAL(ir_doc_load(&a, "/nonexistent/x.yaml", &d, &e), -1);
    CU_ASSERT_PTR_NULL(d);
    TEST_ASSERT_CONTAINS(e.msg, "/nonexistent/x.yaml: cannot open file");
    base_arena_free(&a);
}

/* ---------------------------------------------------------------- typed reads */

/* A one-key document "v: <text>" (or JSON when text starts with '{'); returns the value. */
static ir_doc *value_of(const char *yaml)
{
    ir_doc *d = parse(yaml);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    ir_doc *v = ir_doc_get(d, "v");
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    return v;
}

static const char *int_fail(const char *yaml)
{
    int64_t x = 77;
    ir_doc *v = value_of(yaml);
    CU_ASSERT_EQUAL(ir_doc_int(v, "layers", &x, &err), -1);
    CU_ASSERT_EQUAL(x, 77);
    return err.msg;
}

static int64_t int_ok(const char *yaml)
{
    int64_t x = 0;
    CU_ASSERT_EQUAL(ir_doc_int(value_of(yaml), "layers", &x, &err), 0);
    if (err.set) fprintf(stderr, "\n  %s\n", err.msg);
    return x;
}

static void test_int(void)
{
    CU_ASSERT_EQUAL(int_ok("v: 24"), 24);
    CU_ASSERT_EQUAL(int_ok("v: -3"), -3);
    CU_ASSERT_EQUAL(int_ok("v: +5"), 5);
    CU_ASSERT_EQUAL(int_ok("v: 0"), 0);
    CU_ASSERT_EQUAL(int_ok("v: 9223372036854775807"), INT64_MAX);
    CU_ASSERT_EQUAL(int_ok("v: -9223372036854775808"), INT64_MIN);
    CU_ASSERT_EQUAL(int_ok("v: 1e6"), 1000000);
    CU_ASSERT_EQUAL(int_ok("v: 2.5e3"), 2500);
    CU_ASSERT_EQUAL(int_ok("v: 4.0"), 4);
    CU_ASSERT_EQUAL(int_ok("{\"v\": 8192}"), 8192);
    ASSERT_STREQ(int_fail("\nv: abc"),
                 "t.yaml:2:4: expected an integer for 'layers', got 'abc'; write a whole number like 24");
    ASSERT_STREQ(int_fail("v: 1.5"),
                 "t.yaml:1:4: expected an integer for 'layers', got '1.5'; write a whole number like 24");
    ASSERT_STREQ(int_fail("v: 12abc"),
                 "t.yaml:1:4: expected an integer for 'layers', got '12abc'; write a whole number like 24");
    ASSERT_STREQ(int_fail("v: 0x10"),
                 "t.yaml:1:4: expected an integer for 'layers', got '0x10'; write a whole number like 24");
    ASSERT_STREQ(int_fail("v: 9223372036854775808"),
                 "t.yaml:1:4: expected an integer for 'layers', got '9223372036854775808', which does "
                 "not fit in 64 bits; write a smaller whole number");
    ASSERT_STREQ(int_fail("v: -9223372036854775809"),
                 "t.yaml:1:4: expected an integer for 'layers', got '-9223372036854775809', which does "
                 "not fit in 64 bits; write a smaller whole number");
    ASSERT_STREQ(int_fail("v: 99999999999999999999999999"),
                 "t.yaml:1:4: expected an integer for 'layers', got '99999999999999999999999999', which "
                 "does not fit in 64 bits; write a smaller whole number");
    ASSERT_STREQ(int_fail("v: 1e19"),
                 "t.yaml:1:4: expected an integer for 'layers', got '1e19', which does not fit in 64 "
                 "bits; write a smaller whole number");
    ASSERT_STREQ(int_fail("v: 1e999"),
                 "t.yaml:1:4: expected an integer for 'layers', got '1e999', which does not fit in 64 "
                 "bits; write a smaller whole number");
    ASSERT_STREQ(int_fail("v: \"24\""),
                 "t.yaml:1:4: expected an integer for 'layers', got the quoted text '24'; write the "
                 "number without quotes");
    ASSERT_STREQ(int_fail("v:"),
                 "t.yaml:1:3: expected an integer for 'layers', got nothing; write a whole number like 24");
    ASSERT_STREQ(int_fail("v: ~"),
                 "t.yaml:1:4: expected an integer for 'layers', got '~'; write a whole number like 24");
    ASSERT_STREQ(int_fail("v: [1]"),
                 "t.yaml:1:4: expected an integer for 'layers', got a list; write a whole number like 24");
    ASSERT_STREQ(int_fail("v: {a: 1}"),
                 "t.yaml:1:4: expected an integer for 'layers', got a map; write a whole number like 24");
    /* long and multi-line values are shortened to one line in messages */
    ASSERT_STREQ(int_fail("v: \"0123456789012345678901234567890123456789012345678901234\\n\""),
                 "t.yaml:1:4: expected an integer for 'layers', got the quoted text "
                 "'012345678901234567890123456789012345678901234567...'; write the number without quotes");
    ASSERT_STREQ(int_fail("v: \"a\\nb\\tc\""),
                 "t.yaml:1:4: expected an integer for 'layers', got the quoted text 'a\\nb\\x09c'; "
                 "write the number without quotes");
    /* a missing node */
    base_error_clear(&err);
    int64_t x;
    CU_ASSERT_EQUAL(ir_doc_int(NULL, "layers", &x, &err), -1);
    ASSERT_STREQ(err.msg, "missing an integer for 'layers'; write a whole number like 24");
    base_arena_free(&arena);
}

static void test_num_bool_string(void)
{
    double v = 0;
    CU_ASSERT_EQUAL(ir_doc_num(value_of("v: 1.5e9"), "lr", &v, &err), 0);
    CU_ASSERT_EQUAL(v, 1.5e9);
    CU_ASSERT_EQUAL(ir_doc_num(value_of("v: -.5"), "lr", &v, &err), 0);
    CU_ASSERT_EQUAL(v, -0.5);
    CU_ASSERT_EQUAL(ir_doc_num(value_of("v: 3"), "lr", &v, &err), 0);
    CU_ASSERT_EQUAL(v, 3.0);
    CU_ASSERT_EQUAL(ir_doc_num(value_of("v: 1e-400"), "lr", &v, &err), 0);
    CU_ASSERT_EQUAL(v, 0.0);
    CU_ASSERT_EQUAL(ir_doc_num(value_of("v: 1e400"), "lr", &v, &err), -1);
    ASSERT_STREQ(err.msg, "t.yaml:1:4: expected a number for 'lr', got '1e400', which is too large; write a finite number");
    CU_ASSERT_EQUAL(ir_doc_num(value_of("v: .inf"), "lr", &v, &err), -1);
    ASSERT_STREQ(err.msg, "t.yaml:1:4: expected a number for 'lr', got '.inf'; write a number like 1.5 or 1e9");
    CU_ASSERT_EQUAL(ir_doc_num(value_of("v: nan"), "lr", &v, &err), -1);
    ASSERT_STREQ(err.msg, "t.yaml:1:4: expected a number for 'lr', got 'nan'; write a number like 1.5 or 1e9");
    CU_ASSERT_EQUAL(ir_doc_num(value_of("v: 1e"), "lr", &v, &err), -1);
    ASSERT_STREQ(err.msg, "t.yaml:1:4: expected a number for 'lr', got '1e'; write a number like 1.5 or 1e9");

    bool b = false;
    static const char *const yes[] = {"v: true", "v: True", "v: YES", "v: on", "{\"v\": true}"};
    static const char *const no[] = {"v: false", "v: FALSE", "v: no", "v: Off", "{\"v\": false}"};
    for (size_t i = 0; i < BASE_COUNT(yes); i++) {
        b = false;
        CU_ASSERT_EQUAL(ir_doc_bool(value_of(yes[i]), "tied", &b, &err), 0);
        CU_ASSERT_TRUE(b);
        CU_ASSERT_EQUAL(ir_doc_bool(value_of(no[i]), "tied", &b, &err), 0);
        CU_ASSERT_FALSE(b);
    }
    CU_ASSERT_EQUAL(ir_doc_bool(value_of("v: 1"), "tied", &b, &err), -1);
    ASSERT_STREQ(err.msg, "t.yaml:1:4: expected true or false for 'tied', got '1'; write true or false");
    CU_ASSERT_EQUAL(ir_doc_bool(value_of("v: 'yes'"), "tied", &b, &err), -1);
    ASSERT_STREQ(err.msg, "t.yaml:1:4: expected true or false for 'tied', got the quoted text 'yes'; "
                          "write true or false without quotes");

    const char *s = NULL;
    CU_ASSERT_EQUAL(ir_doc_string(value_of("v: hello"), "name", &s, &err), 0);
    ASSERT_STREQ(s, "hello");
    CU_ASSERT_EQUAL(ir_doc_string(value_of("v: 123"), "name", &s, &err), 0);
    ASSERT_STREQ(s, "123");
    CU_ASSERT_EQUAL(ir_doc_string(value_of("v: ''"), "name", &s, &err), 0);
    ASSERT_STREQ(s, "");
    CU_ASSERT_EQUAL(ir_doc_string(value_of("v: 'null'"), "name", &s, &err), 0);
    ASSERT_STREQ(s, "null");
    CU_ASSERT_EQUAL(ir_doc_string(value_of("v:"), "name", &s, &err), -1);
    ASSERT_STREQ(err.msg, "t.yaml:1:3: expected a string for 'name', got nothing; write some text after the key");
    CU_ASSERT_EQUAL(ir_doc_string(value_of("v: null"), "name", &s, &err), -1);
    ASSERT_STREQ(err.msg, "t.yaml:1:4: expected a string for 'name', got 'null'; write some text after the key");
    CU_ASSERT_EQUAL(ir_doc_string(value_of("v: [a]"), "name", &s, &err), -1);
    ASSERT_STREQ(err.msg, "t.yaml:1:4: expected a string for 'name', got a list; write some text after the key");
    base_arena_free(&arena);
}

/* ---------------------------------------------------------------- units */

typedef int (*quantity_reader)(const ir_doc *, const char *, double *, base_error *);

static double qty_ok(quantity_reader f, const char *yaml)
{
    double v = -1;
    int rc = f(value_of(yaml), "x", &v, &err);
    if (rc) fprintf(stderr, "\n  %s: %s\n", yaml, err.msg);
    CU_ASSERT_EQUAL(rc, 0);
    return v;
}

static const char *qty_fail(quantity_reader f, const char *yaml)
{
    double v = -1;
    CU_ASSERT_EQUAL(f(value_of(yaml), "x", &v, &err), -1);
    CU_ASSERT_EQUAL(v, -1);
    return err.msg;
}

static void test_bytes(void)
{
    CU_ASSERT_EQUAL(qty_ok(ir_doc_bytes, "v: 80GiB"), 85899345920.0);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_bytes, "v: 80 GiB"), 85899345920.0);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_bytes, "v: 80GB"), 80e9);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_bytes, "v: 25MB"), 25e6);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_bytes, "v: 1.5e9"), 1.5e9);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_bytes, "v: 4096"), 4096.0);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_bytes, "v: 1KiB"), 1024.0);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_bytes, "v: 1.5 KiB"), 1536.0);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_bytes, "v: 2MiB"), 2097152.0);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_bytes, "v: 1TiB"), 1099511627776.0);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_bytes, "v: 3TB"), 3e12);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_bytes, "v: 8KB"), 8e3);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_bytes, "v: 512B"), 512.0);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_bytes, "v: 0"), 0.0);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_bytes, "{\"v\": \"80GiB\"}"), 85899345920.0);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_bytes, "{\"v\": 1.5e9}"), 1.5e9);
    ASSERT_STREQ(qty_fail(ir_doc_bytes, "v: 80Gb"),
                 "t.yaml:1:4: expected a byte size for 'x', got '80Gb'; 'b' means bits, write B for "
                 "bytes (80GB, 80GiB)");
    ASSERT_STREQ(qty_fail(ir_doc_bytes, "v: 80XB"),
                 "t.yaml:1:4: expected a byte size for 'x', got '80XB', whose unit is not known; write "
                 "a number with an optional unit, like 80GB, 80 GiB or 1.5e9");
    ASSERT_STREQ(qty_fail(ir_doc_bytes, "v: GB"),
                 "t.yaml:1:4: expected a byte size for 'x', got 'GB'; write a number with an optional "
                 "unit, like 80GB, 80 GiB or 1.5e9");
    ASSERT_STREQ(qty_fail(ir_doc_bytes, "v: -1GB"),
                 "t.yaml:1:4: expected a byte size for 'x', got '-1GB', which is negative; write zero or more");
    ASSERT_STREQ(qty_fail(ir_doc_bytes, "v: 1e308TiB"),
                 "t.yaml:1:4: expected a byte size for 'x', got '1e308TiB', which is too large; write a "
                 "number with an optional unit, like 80GB, 80 GiB or 1.5e9");
    ASSERT_STREQ(qty_fail(ir_doc_bytes, "v: 1e999"),
                 "t.yaml:1:4: expected a byte size for 'x', got '1e999', which is too large; write a "
                 "number with an optional unit, like 80GB, 80 GiB or 1.5e9");
    ASSERT_STREQ(qty_fail(ir_doc_bytes, "v: 80GiBs"),
                 "t.yaml:1:4: expected a byte size for 'x', got '80GiBs', whose unit is not known; write "
                 "a number with an optional unit, like 80GB, 80 GiB or 1.5e9");
    ASSERT_STREQ(qty_fail(ir_doc_bytes, "v:"),
                 "t.yaml:1:3: expected a byte size for 'x', got nothing; write a number with an "
                 "optional unit, like 80GB, 80 GiB or 1.5e9");
    base_arena_free(&arena);
}

static void test_rate(void)
{
    CU_ASSERT_EQUAL(qty_ok(ir_doc_rate, "v: 450GB/s"), 450e9);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_rate, "v: 400Gb/s"), 5e10);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_rate, "v: 400 Gbps"), 5e10);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_rate, "v: 312TFLOPS"), 312e12);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_rate, "v: 312 TFLOP/s"), 312e12);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_rate, "v: 989.5 TFLOPs"), 989.5e12);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_rate, "v: 1.5e12"), 1.5e12);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_rate, "v: 3.35TB/s"), 3.35e12);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_rate, "v: 1GiB/s"), 1073741824.0);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_rate, "v: 25 GB/s"), 25e9);
    ASSERT_STREQ(qty_fail(ir_doc_rate, "v: 450GB"),
                 "t.yaml:1:4: expected a rate for 'x', got '450GB', whose unit is not known; write a "
                 "number with a unit, like 450GB/s, 400Gb/s or 312TFLOPS");
    ASSERT_STREQ(qty_fail(ir_doc_rate, "v: fast"),
                 "t.yaml:1:4: expected a rate for 'x', got 'fast'; write a number with a unit, like "
                 "450GB/s, 400Gb/s or 312TFLOPS");
    ASSERT_STREQ(qty_fail(ir_doc_rate, "v: -5GB/s"),
                 "t.yaml:1:4: expected a rate for 'x', got '-5GB/s', which is negative; write zero or more");
    base_arena_free(&arena);
}

static void test_seconds(void)
{
    CU_ASSERT_EQUAL(qty_ok(ir_doc_seconds, "v: 2us"), 2e-6);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_seconds, "v: 2\xC2\xB5s"), 2e-6);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_seconds, "v: 1.5 ms"), 1.5e-3);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_seconds, "v: 500ns"), 500e-9);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_seconds, "v: 1s"), 1.0);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_seconds, "v: 3"), 3.0);
    CU_ASSERT_EQUAL(qty_ok(ir_doc_seconds, "v: 2.5e-6"), 2.5e-6);
    ASSERT_STREQ(qty_fail(ir_doc_seconds, "v: 2 parsecs"),
                 "t.yaml:1:4: expected a duration for 'x', got '2 parsecs', whose unit is not known; "
                 "write a number with a unit, like 2us, 1.5 ms or 500ns (a plain number is seconds)");
    ASSERT_STREQ(qty_fail(ir_doc_seconds, "v: 2Ms"),
                 "t.yaml:1:4: expected a duration for 'x', got '2Ms', whose unit is not known; "
                 "write a number with a unit, like 2us, 1.5 ms or 500ns (a plain number is seconds)");
    ASSERT_STREQ(qty_fail(ir_doc_seconds, "v: -1us"),
                 "t.yaml:1:4: expected a duration for 'x', got '-1us', which is negative; write zero or more");
    ASSERT_STREQ(qty_fail(ir_doc_seconds, "v: {a: 1}"),
                 "t.yaml:1:4: expected a duration for 'x', got a map; write a number with a unit, like "
                 "2us, 1.5 ms or 500ns (a plain number is seconds)");
    base_arena_free(&arena);
}

/* ---------------------------------------------------------------- schema check and errors */

static void test_check_keys(void)
{
    static const char *const known[] = {"layers", "hidden", "heads", NULL};
    static const char *const ignored[] = {"dropout_p", NULL};
    ir_doc *d = parse("layers: 2\nhidden: 8\n");
    CU_ASSERT_EQUAL(ir_doc_check_keys(d, "model", known, ignored, &err), 0);
    CU_ASSERT_FALSE(err.set);
    CU_ASSERT_EQUAL(err.nwarn, 0);

    d = parse("layers: 2\n  \ndropout_p: 0.1\n");
    CU_ASSERT_EQUAL(ir_doc_check_keys(d, "model", known, ignored, &err), 0);
    CU_ASSERT_EQUAL(err.nwarn, 1);
    ASSERT_STREQ(err.warnings,
                 "t.yaml:3:1: key 'dropout_p' is part of Piper's schema but piper ignores it\n");

    d = parse("layers: 2\nlayres: 3\n");
    CU_ASSERT_EQUAL(ir_doc_check_keys(d, "model", known, ignored, &err), -1);
    ASSERT_STREQ(err.msg, "t.yaml:2:1: unknown key 'layres' in model; did you mean 'layers'? "
                          "(known keys: layers, hidden, heads)");
    d = parse("Hiden: 2\n");
    CU_ASSERT_EQUAL(ir_doc_check_keys(d, "model", known, ignored, &err), -1);
    ASSERT_STREQ(err.msg, "t.yaml:1:1: unknown key 'Hiden' in model; did you mean 'hidden'? "
                          "(known keys: layers, hidden, heads)");
    d = parse("{\"heads\": 1, \"colour\": 2}");
    CU_ASSERT_EQUAL(ir_doc_check_keys(d, "directive 'place'", known, NULL, &err), -1);
    ASSERT_STREQ(err.msg, "t.yaml:1:14: unknown key 'colour' in directive 'place'; known keys: "
                          "layers, hidden, heads");
    /* three edits away is not a suggestion */
    d = parse("hexxxn: 1\n");
    CU_ASSERT_EQUAL(ir_doc_check_keys(d, "model", known, NULL, &err), -1);
    ASSERT_STREQ(err.msg, "t.yaml:1:1: unknown key 'hexxxn' in model; known keys: layers, hidden, heads");
    /* an ignored key never gets past as a known one, and an unknown one is not merely warned */
    d = parse("dropout_p: 1\n");
    CU_ASSERT_EQUAL(ir_doc_check_keys(d, "model", known, NULL, &err), -1);
    ASSERT_STREQ(err.msg, "t.yaml:1:1: unknown key 'dropout_p' in model; known keys: layers, hidden, heads");
    d = parse("a: 1\n");
    CU_ASSERT_EQUAL(ir_doc_check_keys(d, "options", NULL, NULL, &err), -1);
    ASSERT_STREQ(err.msg, "t.yaml:1:1: unknown key 'a' in options; it takes no keys");
    d = parse("- a\n");
    CU_ASSERT_EQUAL(ir_doc_check_keys(d, "model", known, NULL, &err), -1);
    ASSERT_STREQ(err.msg, "t.yaml:1:1: expected a map for model, got a list; write 'key: value' lines");
    base_error_clear(&err);
    CU_ASSERT_EQUAL(ir_doc_check_keys(NULL, "model", known, NULL, &err), -1);
    ASSERT_STREQ(err.msg, "missing model; write a map of settings");
    base_arena_free(&arena);
}

static void test_error_and_warn_at_node(void)
{
    ir_doc *d = parse("a:\n  b: 7\n");
    ir_doc *b = ir_doc_get(ir_doc_get(d, "a"), "b");
    CU_ASSERT_EQUAL(ir_doc_error(b, &err, "%s must be even; use %d", "b", 8), -1);
    ASSERT_STREQ(err.msg, "t.yaml:2:6: b must be even; use 8");
    ir_doc_warn(b, &err, "b is %s", "odd");
    ASSERT_STREQ(err.warnings, "t.yaml:2:6: b is odd\n");
    base_error_clear(&err);
    CU_ASSERT_EQUAL(ir_doc_error(NULL, &err, "no place"), -1);
    ASSERT_STREQ(err.msg, "no place");
    base_arena_free(&arena);
}

int piper_tests_register(void)
{
    static const test_case cases[] = {
        {"YAML node positions", test_yaml_positions},
        {"JSON node positions (characters, not bytes)", test_json_positions},
        {"CRLF line ends and BOM", test_crlf_and_bom_positions},
        {"YAML and JSON load the same tree", test_yaml_and_json_same_tree},
        {"null and quoted flags, escapes, empty documents", test_scalar_flags},
        {"map lookup", test_get},
        {"YAML or JSON by the first character", test_format_detection},
        {"YAML errors", test_yaml_errors},
        {"JSON errors", test_json_errors},
        {"nesting depth limit", test_depth_limit},
        {"duplicates in a large map", test_large_map_duplicates},
        {"missing file", test_load_missing_file},
        {"integers and overflow", test_int},
        {"numbers, booleans, strings", test_num_bool_string},
        {"byte sizes", test_bytes},
        {"rates", test_rate},
        {"durations", test_seconds},
        {"key schema check", test_check_keys},
        {"errors and warnings at a node", test_error_and_warn_at_node},
        {NULL, NULL}};
    return test_add_suite("ir_doc", cases);
}
