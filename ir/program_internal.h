/* program_internal.h — what the program loader's files share (not part of ir/'s contract): the
 * loading context that carries the message prefix, and the typed reads and key checks every
 * section uses. program.c reads the file and its top-level keys, program_sections.c the batch,
 * dtypes, optimizer and annotations, program_directives.c the directives (their table-driven
 * reader, filters and device lists). */
#ifndef PIPER_IR_PROGRAM_INTERNAL_H
#define PIPER_IR_PROGRAM_INTERNAL_H

#include "program.h"

typedef struct ir_load_ctx {
    base_arena *a;
    base_error *e;
    ir_program *p;
    const char *dir;      /* resolves relative references; NULL = the working directory */
    char what[96];        /* "directive 3 (place)", "program", "annotations": message prefix */
    bool order_mirrored;  /* checking an order of a DualPipe program (an order has mirror:
                             true): its filters may name the mirrored stages p..2p-1 */
} ir_load_ctx;

/* Case-insensitive equality; the index of s among n names ignoring case, -1 if none. */
bool ir_load_ci_eq(const char *a, const char *b);
int ir_load_lookup_ci(const char *s, const char *const *names, int n);

/* A map's keys against the ones piper reads (NULL-terminated `known`, listed in the message as
 * what `takes` takes). Keys in `ignored` (Piper's, unused by piper) only warn; with `open` any
 * other key passes too (schedule builders read their own options). */
int ir_load_check_keys(ir_load_ctx *c, const ir_doc *map, const char *takes,
                       const char *const *known, const char *const *ignored, bool open);

/* Typed reads whose messages start with c->what. */
int ir_load_get_string(ir_load_ctx *c, const ir_doc *d, const char *key, const char **out);
int ir_load_get_int_range(ir_load_ctx *c, const ir_doc *d, const char *key, int64_t lo,
                          int64_t hi, const char *hint, int64_t *out);
/* Puts c->what after the "file:line:col: " of an error from the doc layer, which does not know
 * which directive or section it is in. */
void ir_load_add_context(ir_load_ctx *c, const char *file);

/* A reference relative to the program's directory (absolute paths as they are). */
const char *ir_load_resolve_path(base_arena *a, const char *dir, const char *path);

/* The sections (program_sections.c). */
int ir_load_annotations(ir_load_ctx *c, const ir_doc *d);
int ir_load_batch(ir_load_ctx *c, const ir_doc *d);
int ir_load_dtype(ir_load_ctx *c, const ir_doc *d);
int ir_load_grad_dtype(ir_load_ctx *c, const ir_doc *d);
int ir_load_optimizer(ir_load_ctx *c, const ir_doc *d);

/* The directives (program_directives.c): the list, then every filter against what the file
 * says (annotations, model) once the whole program is read. */
int ir_load_directives(ir_load_ctx *c, const ir_doc *d);
int ir_load_check_filters(ir_load_ctx *c);

#endif
