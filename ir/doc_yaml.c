/* doc_yaml.c — the YAML reader: libyaml's event parser feeding the shared tree builder. Using
 * events (not libyaml's document API) lets us refuse what piper's configs never need — anchors,
 * aliases, tags, several documents per file — at the exact place it was written, and keeps
 * libyaml's positions (0-based marks, turned 1-based here) on every node. */
#include "doc_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

static int mark_int(size_t v)
{
    return v >= (size_t)INT_MAX ? INT_MAX : (int)v + 1;
}

/* libyaml reports input-level problems (bad UTF-8, control characters) as a byte offset. */
static void offset_position(const char *text, size_t len, size_t off, int *line, int *col)
{
    int l = 1, c = 1;
    if (off > len) off = len;
    for (size_t i = 0; i < off; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (ch == '\n') {
            l++;
            c = 1;
        } else if ((ch & 0xC0) != 0x80) {
            c++;
        }
        if (l == INT_MAX || c == INT_MAX) break;
    }
    *line = l;
    *col = c;
}

static int parser_error(const yaml_parser_t *p, const char *file, const char *text, size_t len,
                        base_error *e)
{
    const char *problem = p->problem ? p->problem : "cannot parse";
    switch (p->error) {
    case YAML_MEMORY_ERROR:
        return base_error_at(e, file, 0, 0, "out of memory while reading YAML");
    case YAML_READER_ERROR: {
        int line, col;
        offset_position(text, len, p->problem_offset, &line, &col);
        if (p->problem_value >= 0)
            return base_error_at(e, file, line, col,
                                 "the text is not valid UTF-8 YAML (%s, 0x%02X); save the file as "
                                 "UTF-8 text without control characters",
                                 problem, (unsigned)p->problem_value);
        return base_error_at(e, file, line, col,
                             "the text is not valid UTF-8 YAML (%s); save the file as UTF-8 text "
                             "without control characters", problem);
    }
    default:
        if (p->context)
            return base_error_at(e, file, mark_int(p->problem_mark.line),
                                 mark_int(p->problem_mark.column),
                                 "YAML syntax error: %s (%s at %d:%d); check the indentation, the "
                                 "':' after each key and that quotes and brackets are closed",
                                 problem, p->context, mark_int(p->context_mark.line),
                                 mark_int(p->context_mark.column));
        return base_error_at(e, file, mark_int(p->problem_mark.line),
                             mark_int(p->problem_mark.column),
                             "YAML syntax error: %s; check the indentation, the ':' after each key "
                             "and that quotes and brackets are closed", problem);
    }
}

/* Anchors, aliases and tags make one value mean different things in different places; piper's
 * error messages point at a single place, so the documents stay literal. */
static int refuse_extras(const char *file, const yaml_mark_t *m, const yaml_char_t *anchor,
                         const yaml_char_t *tag, base_error *e)
{
    if (anchor)
        return base_error_at(e, file, mark_int(m->line), mark_int(m->column),
                             "anchors (&%.40s) are not supported; write the value out in full",
                             (const char *)anchor);
    if (tag) {
        /* libyaml hands back "!!str" resolved; show it the way it was written */
        const char *t = (const char *)tag, *std = "tag:yaml.org,2002:";
        bool short_form = strncmp(t, std, strlen(std)) == 0;
        return base_error_at(e, file, mark_int(m->line), mark_int(m->column),
                             "tags (%s%.40s) are not supported; remove the tag",
                             short_form ? "!!" : "", short_form ? t + strlen(std) : t);
    }
    return 0;
}

static bool yaml_null(const yaml_char_t *v, size_t n)
{
    const char *s = (const char *)v;
    return n == 0 || (n == 1 && s[0] == '~') ||
           (n == 4 && (!memcmp(s, "null", 4) || !memcmp(s, "Null", 4) || !memcmp(s, "NULL", 4)));
}

static int handle_event(doc_builder *b, const yaml_event_t *ev, int *ndocs)
{
    const yaml_mark_t *m = &ev->start_mark;
    int line = mark_int(m->line), col = mark_int(m->column);
    switch (ev->type) {
    case YAML_DOCUMENT_START_EVENT:
        if (++*ndocs > 1)
            return base_error_at(b->e, b->file, line, col,
                                 "a second document ('---') in one file; keep one document per "
                                 "file");
        if (ev->data.document_start.tag_directives.start !=
            ev->data.document_start.tag_directives.end)
            return base_error_at(b->e, b->file, line, col,
                                 "%%TAG directives are not supported; remove them");
        return 0;
    case YAML_ALIAS_EVENT:
        return base_error_at(b->e, b->file, line, col,
                             "aliases (*%.40s) are not supported; write the value out in full",
                             (const char *)ev->data.alias.anchor);
    case YAML_SCALAR_EVENT: {
        const yaml_char_t *v = ev->data.scalar.value;
        size_t n = ev->data.scalar.length;
        if (refuse_extras(b->file, m, ev->data.scalar.anchor, ev->data.scalar.tag, b->e))
            return -1;
        if (memchr(v, 0, n))
            return base_error_at(b->e, b->file, line, col,
                                 "the text contains a NUL character; remove it");
        ir_doc *s = doc_builder_node(b, IR_DOC_SCALAR, line, col);
        s->str = base_arena_strndup(b->a, (const char *)v, n);
        s->quoted = ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
        s->null = !s->quoted && yaml_null(v, n);
        return doc_builder_scalar(b, s);
    }
    case YAML_SEQUENCE_START_EVENT:
        if (refuse_extras(b->file, m, ev->data.sequence_start.anchor, ev->data.sequence_start.tag,
                          b->e))
            return -1;
        return doc_builder_open(b, IR_DOC_SEQ, line, col);
    case YAML_MAPPING_START_EVENT:
        if (refuse_extras(b->file, m, ev->data.mapping_start.anchor, ev->data.mapping_start.tag,
                          b->e))
            return -1;
        return doc_builder_open(b, IR_DOC_MAP, line, col);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        return doc_builder_close(b);
    default:
        return 0;
    }
}

int ir_doc_parse_yaml(base_arena *a, const char *name, const char *text, size_t len, ir_doc **out,
                      base_error *e)
{
    *out = NULL;
    const char *file = base_arena_strdup(a, name ? name : "<input>");
    if (len > (size_t)INT_MAX)
        return base_error_at(e, file, 0, 0, "the file is larger than 2 GiB; split it");
    if (!text) text = "";
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) return base_error_at(e, file, 0, 0, "out of memory");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);

    doc_builder *b = base_xmalloc(sizeof *b);
    doc_builder_init(b, a, file, e);
    int ndocs = 0, rc = 0;
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            rc = parser_error(&p, file, text, len, e);
            break;
        }
        bool end = ev.type == YAML_STREAM_END_EVENT;
        rc = handle_event(b, &ev, &ndocs);
        yaml_event_delete(&ev);
        if (rc || end) break;
    }
    yaml_parser_delete(&p);
    if (rc == 0) {
        if (!b->root) {
            /* an empty file, or only comments: one null, as an empty YAML document is */
            b->root = doc_builder_node(b, IR_DOC_SCALAR, 1, 1);
            b->root->str = "";
            b->root->null = true;
        }
        *out = b->root;
    }
    doc_builder_free(b);
    free(b);
    return rc ? -1 : 0;
}
