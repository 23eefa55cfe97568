/* doc_internal.h — what the three parts of the document loader share and nothing else includes
 * (except the fuzz target, which drives each reader on its own): the tree builder that both the
 * YAML and the JSON reader feed, so that depth limits, key rules and duplicate detection are one
 * piece of code, and the two readers' entry points. */
#ifndef PIPER_IR_DOC_INTERNAL_H
#define PIPER_IR_DOC_INTERNAL_H

#include "doc.h"

/* Deeper documents are refused: the builder's stack is fixed-size and every consumer that walks
 * the tree recursively stays far from the C stack's limit. No real config nests past ~6. */
#define IR_DOC_MAX_DEPTH 256

typedef struct doc_frame {
    ir_doc *node;              /* the open container */
    BASE_VEC(ir_doc *) keys;   /* MAP: keys so far */
    BASE_VEC(ir_doc *) items;  /* SEQ items, or MAP values */
    ir_doc *pending_key;       /* MAP: a key waiting for its value */
} doc_frame;

typedef struct doc_builder {
    base_arena *a;
    const char *file;          /* arena-owned, shared by every node */
    base_error *e;
    int depth;                 /* open containers */
    doc_frame stack[IR_DOC_MAX_DEPTH];
    ir_doc *root;
} doc_builder;

void doc_builder_init(doc_builder *b, base_arena *a, const char *file, base_error *e);
/* Releases the scratch vectors (the tree itself lives in the arena). */
void doc_builder_free(doc_builder *b);
ir_doc *doc_builder_node(doc_builder *b, ir_doc_kind kind, int line, int col);
/* Adds a finished scalar where the builder is: the root, a sequence item, a key or a value. */
int doc_builder_scalar(doc_builder *b, ir_doc *scalar);
/* Opens a map or sequence at the current place; fails past IR_DOC_MAX_DEPTH or as a map key. */
int doc_builder_open(doc_builder *b, ir_doc_kind kind, int line, int col);
/* Closes the innermost container (checks duplicate keys) and adds it to its parent. */
int doc_builder_close(doc_builder *b);

/* The two readers; ir_doc_parse picks one by the first significant character. */
int ir_doc_parse_yaml(base_arena *a, const char *name, const char *text, size_t len, ir_doc **out,
                      base_error *e);
int ir_doc_parse_json(base_arena *a, const char *name, const char *text, size_t len, ir_doc **out,
                      base_error *e);

#endif
