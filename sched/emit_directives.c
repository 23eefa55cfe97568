/* emit_directives.c — `piper-compile --emit-directives`: the program's directives as they ran,
 * with every `schedule` replaced by the order directives it expanded into, printed as a JSON
 * array in Piper's directive schema (one directive per line). Directives the user wrote are
 * printed from their document, so they read back exactly as written; generated orders from
 * their filters. Loading the array back (with --model and --cluster) compiles to the same plan
 * when the program's batch and annotations are those a bare array implies (docs/programs.md). */
#include "schedule.h"

#include <string.h>

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

/* JSON's number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static bool is_json_number(const char *s)
{
    const char *p = s;
    if (*p == '-') p++;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (*p >= '0' && *p <= '9') p++;
    } else {
        return false;
    }
    if (*p == '.') {
        p++;
        if (!(*p >= '0' && *p <= '9')) return false;
        while (*p >= '0' && *p <= '9') p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!(*p >= '0' && *p <= '9')) return false;
        while (*p >= '0' && *p <= '9') p++;
    }
    return *p == 0;
}

static void write_doc(FILE *f, const ir_doc *d)
{
    switch (d->kind) {
    case IR_DOC_MAP:
        fputc('{', f);
        for (int i = 0; i < d->n; i++) {
            if (i) fputs(", ", f);
            json_string(f, d->keys[i]->str ? d->keys[i]->str : "");
            fputs(": ", f);
            write_doc(f, d->items[i]);
        }
        fputc('}', f);
        break;
    case IR_DOC_SEQ:
        fputc('[', f);
        for (int i = 0; i < d->n; i++) {
            if (i) fputs(", ", f);
            write_doc(f, d->items[i]);
        }
        fputc(']', f);
        break;
    case IR_DOC_SCALAR:
        if (d->null) {
            fputs("null", f);
        } else if (!d->quoted && is_json_number(d->str)) {
            fputs(d->str, f);
        } else if (!d->quoted && (!strcmp(d->str, "true") || !strcmp(d->str, "false"))) {
            fputs(d->str, f);
        } else {
            json_string(f, d->str);
        }
        break;
    }
}

static void write_filter(FILE *f, const ir_filter *flt)
{
    fputc('{', f);
    for (int i = 0; i < flt->n; i++) {
        const ir_tag_match *m = &flt->m[i];
        if (i) fputs(", ", f);
        fprintf(f, "\"%s\": ", ir_tag_name(m->tag));
        if (m->any)
            fputs("\"*\"", f);
        else if (m->tag == IR_TAG_PASS)
            fprintf(f, "\"%s\"", ir_pass_tag_name((plan_pass)m->value));
        else if (m->tag == IR_TAG_REGION)
            fprintf(f, "\"%s\"", ir_region_kind_name((ir_region_kind)m->value));
        else
            fprintf(f, "%lld", (long long)m->value);
    }
    fputc('}', f);
}

static void write_order(FILE *f, const ir_directive *d)
{
    fputs(d->mirror ? "{\"op\": \"order\", \"mirror\": true, \"filters\": [" : "{\"op\": \"order\", \"filters\": [", f);
    for (int k = 0; k < d->ngroups; k++) {
        fputs(k ? ", [" : "[", f);
        for (int i = 0; i < d->group_nfilters[k]; i++) {
            if (i) fputs(", ", f);
            write_filter(f, &d->groups[k][i]);
        }
        fputc(']', f);
    }
    fputs("]}", f);
}

int sched_write_directives_json(const sched_compilation *c, FILE *f, base_error *e)
{
    (void)e;
    fputs("[\n", f);
    for (int i = 0; i < c->nexpanded; i++) {
        const ir_directive *d = &c->expanded[i];
        fputs("  ", f);
        if (d->doc)
            write_doc(f, d->doc);
        else
            write_order(f, d);
        fputs(i + 1 < c->nexpanded ? ",\n" : "\n", f);
    }
    fputs("]\n", f);
    return 0;
}
