/* doc.h — a parsed YAML or JSON document as a tree of maps, sequences and scalars, each node
 * remembering the file, line and column it came from, so that every later check (schema, model
 * shapes, directives) can point the user at the exact place. Part of ir/ (included by ir.h).
 *
 * YAML is read with libyaml; JSON (a document whose first significant character is '{' or '[')
 * with piper's own strict JSON reader, so both give the same tree and the same kind of errors. */
#ifndef PIPER_IR_DOC_H
#define PIPER_IR_DOC_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/base.h"

typedef enum { IR_DOC_SCALAR, IR_DOC_SEQ, IR_DOC_MAP } ir_doc_kind;

typedef struct ir_doc ir_doc;
struct ir_doc {
    ir_doc_kind kind;
    const char *file;   /* the path the document was loaded from (shared, arena-owned) */
    int line, col;      /* 1-based position of the node's first character */
    const char *str;    /* SCALAR: its text (NUL-terminated, arena-owned) */
    bool quoted;        /* SCALAR: written with quotes, so a string even if it looks like 3 */
    bool null;          /* SCALAR: YAML null (~, null, empty) or JSON null */
    int n;              /* SEQ: items; MAP: key/value pairs */
    ir_doc **items;     /* SEQ items, or MAP values */
    ir_doc **keys;      /* MAP keys (scalars), parallel to items */
};

/* Parse text (YAML or JSON, detected from the first significant character). `name` is used in
 * error messages. Duplicate map keys, anchors/aliases and multi-document streams are errors. */
int ir_doc_parse(base_arena *a, const char *name, const char *text, size_t len, ir_doc **out,
                 base_error *e);
int ir_doc_load(base_arena *a, const char *path, ir_doc **out, base_error *e);

/* Map lookup; NULL when absent or when `map` is not a map. */
ir_doc *ir_doc_get(const ir_doc *map, const char *key);

/* Typed reads: each fails with "file:line:col: expected <what> for '<key>', got '<text>'; ..." */
int ir_doc_int(const ir_doc *d, const char *what, int64_t *out, base_error *e);
int ir_doc_num(const ir_doc *d, const char *what, double *out, base_error *e); /* 1e9, 1.5, 2 */
int ir_doc_bool(const ir_doc *d, const char *what, bool *out, base_error *e);
int ir_doc_string(const ir_doc *d, const char *what, const char **out, base_error *e);
/* Byte sizes: plain integers or numbers with a unit: 80GB, 80 GiB, 25MB, 1.5e9 (SI or binary). */
int ir_doc_bytes(const ir_doc *d, const char *what, double *out, base_error *e);
/* Rates: "450GB/s", "400Gb/s", "312TFLOPS", or a plain number (per second). */
int ir_doc_rate(const ir_doc *d, const char *what, double *out, base_error *e);
/* Durations: "2us", "1.5 ms", "500ns", or a plain number of seconds. */
int ir_doc_seconds(const ir_doc *d, const char *what, double *out, base_error *e);

/* Schema check of a map's keys. `known` are the keys piper uses; `ignored` are keys another
 * schema (Piper's) defines that piper accepts but does not use: each gets a warning naming it.
 * Any other key is an error that lists the known keys. Either list may be NULL; both end in NULL.
 * `what` names the map in messages ("model", "directive 'place'"). */
int ir_doc_check_keys(const ir_doc *map, const char *what, const char *const *known,
                      const char *const *ignored, base_error *e);

/* Error at a node's position: "file:line:col: <message>". Always returns -1. */
int ir_doc_error(const ir_doc *d, base_error *e, const char *fmt, ...) BASE_PRINTF(3, 4);
void ir_doc_warn(const ir_doc *d, base_error *e, const char *fmt, ...) BASE_PRINTF(3, 4);

#endif
