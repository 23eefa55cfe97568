/* fuzz_doc.c — the fuzz target of the document loader: any bytes go through the YAML reader, the
 * JSON reader and the auto-detecting ir_doc_parse; every tree that loads is walked, every typed
 * read runs on every scalar and the schema check on every map. Besides crashes and sanitizer
 * reports, the walk aborts on broken promises of doc.h (positions, errors that carry their place,
 * lookups that find what the map holds), so the fuzzer hunts logic bugs too.
 *
 * The same file links into fuzz_replay_doc (a plain ctest executable) with replay_main.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/doc_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char NAME[] = "fuzz.in";

static void require(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_doc: broken promise: %s\n", what);
        abort();
    }
}

/* A failed call must have recorded an error placed in the input; a successful one none. */
static void check_outcome(int rc, const base_error *e, bool positioned)
{
    require(rc == 0 || rc == -1, "status is 0 or -1");
    require((rc == 0) == !e->set, "an error is recorded exactly when a call fails");
    if (rc && positioned)
        require(strncmp(e->msg, NAME, sizeof NAME - 1) == 0 && e->msg[sizeof NAME - 1] == ':',
                "an error names the file it is about");
}

static void read_scalar(const ir_doc *d)
{
    base_error e;
    int64_t i;
    double v;
    bool b;
    const char *s;
    base_error_clear(&e);
    check_outcome(ir_doc_int(d, "k", &i, &e), &e, true);
    base_error_clear(&e);
    int rc = ir_doc_num(d, "k", &v, &e);
    check_outcome(rc, &e, true);
    if (!rc) require(isfinite(v), "numbers are finite");
    base_error_clear(&e);
    check_outcome(ir_doc_bool(d, "k", &b, &e), &e, true);
    base_error_clear(&e);
    rc = ir_doc_string(d, "k", &s, &e);
    check_outcome(rc, &e, true);
    if (!rc) require(s == d->str, "a string read gives the scalar's text");
    int (*const quantities[])(const ir_doc *, const char *, double *, base_error *) = {
        ir_doc_bytes, ir_doc_rate, ir_doc_seconds};
    for (size_t q = 0; q < BASE_COUNT(quantities); q++) {
        base_error_clear(&e);
        rc = quantities[q](d, "k", &v, &e);
        check_outcome(rc, &e, true);
        if (!rc) require(isfinite(v) && v >= 0, "quantities are finite and non-negative");
    }
}

static void walk(const ir_doc *d, int depth)
{
    require(d != NULL, "no NULL nodes");
    require(depth <= IR_DOC_MAX_DEPTH, "depth stays within the limit");
    require(d->line >= 1 && d->col >= 1, "positions are 1-based");
    require(d->file && strcmp(d->file, NAME) == 0, "every node names the file");
    base_error e;
    switch (d->kind) {
    case IR_DOC_SCALAR:
        require(d->str != NULL, "scalars have text");
        require(d->n == 0, "scalars have no items");
        read_scalar(d);
        return;
    case IR_DOC_SEQ:
        require(d->n >= 0 && (d->n == 0 || d->items), "sequence items exist");
        break;
    case IR_DOC_MAP: {
        static const char *const known[] = {"layers", "hidden", "op", "devices", NULL};
        static const char *const ignored[] = {"name", NULL};
        require(d->n >= 0 && (d->n == 0 || (d->items && d->keys)), "map entries exist");
        for (int i = 0; i < d->n; i++) {
            const ir_doc *k = d->keys[i];
            require(k && k->kind == IR_DOC_SCALAR && k->str, "keys are scalars");
            /* lookups are linear: checking every key of a huge map would only slow the fuzzer */
            if (i < 256)
                require(ir_doc_get(d, k->str) == d->items[i], "keys are unique and found");
            require(k->line >= 1 && k->col >= 1, "keys have positions");
        }
        base_error_clear(&e);
        check_outcome(ir_doc_check_keys(d, "fuzz map", known, ignored, &e), &e, true);
        break;
    }
    default:
        require(false, "node kind is one of three");
    }
    for (int i = 0; i < d->n; i++) walk(d->items[i], depth + 1);
    base_error_clear(&e);
    require(ir_doc_error(d, &e, "at %d", d->n) == -1 && e.set, "ir_doc_error records");
    ir_doc_warn(d, &e, "warned");
    require(e.nwarn == 1, "ir_doc_warn records");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int (*const readers[])(base_arena *, const char *, const char *, size_t, ir_doc **,
                           base_error *) = {ir_doc_parse_yaml, ir_doc_parse_json, ir_doc_parse};
    for (size_t r = 0; r < BASE_COUNT(readers); r++) {
        base_arena a;
        base_error e;
        base_arena_init(&a);
        base_error_clear(&e);
        ir_doc *d = (ir_doc *)&a; /* anything but NULL: a failure must reset it */
        int rc = readers[r](&a, NAME, (const char *)data, size, &d, &e);
        check_outcome(rc, &e, true);
        if (rc == 0) walk(d, 1);
        else require(d == NULL, "a failed parse gives no tree");
        base_arena_free(&a);
    }
    return 0;
}
