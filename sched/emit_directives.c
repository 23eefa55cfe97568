/* emit_directives.c — `piper-compile --emit-directives`: the program's directives as they ran,
 * with every `schedule` replaced by the order directives it expanded into, printed as a JSON
 * array in Piper's directive schema (one directive per line), as Piper loads it: filters as maps
 * (the micro-batch tag under the name split gave it), device lists, split with its filter and
 * dim_name, bucket_size in MiB (Piper's unit) when it is a whole number of MiB, else with its
 * unit, and shard_tensor and replicate naming the whole group their place gives, with a mesh
 * (axes dp and tp) when a stage is both tensor- and data-parallel. Keys only piper reads (zero
 * 1, sequence_parallel, mirror, recompute) are written too. Loading the array back (with
 * --model and --cluster) compiles to the same plan when the program's batch and annotations are
 * those a bare array implies (docs/programs.md). */
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

static void write_filter(FILE *f, const ir_filter *flt, const char *mb_tag)
{
    fputc('{', f);
    for (int i = 0; i < flt->n; i++) {
        const ir_tag_match *m = &flt->m[i];
        if (i) fputs(", ", f);
        json_string(f, m->tag == IR_TAG_MB && mb_tag ? mb_tag : ir_tag_name(m->tag));
        fputs(": ", f);
        if (m->none)
            fputs("null", f);
        else if (m->any)
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

static void write_order(FILE *f, const ir_directive *d, const char *mb_tag)
{
    fputs(d->mirror ? "{\"op\": \"order\", \"mirror\": true, \"filters\": [" : "{\"op\": \"order\", \"filters\": [", f);
    for (int k = 0; k < d->ngroups; k++) {
        fputs(k ? ", [" : "[", f);
        for (int i = 0; i < d->group_nfilters[k]; i++) {
            if (i) fputs(", ", f);
            write_filter(f, &d->groups[k][i], mb_tag);
        }
        fputc(']', f);
    }
    fputs("]}", f);
}

static void write_devices(FILE *f, const int32_t *dv, int n)
{
    fputs(", \"devices\": [", f);
    for (int i = 0; i < n; i++) fprintf(f, i ? ", %d" : "%d", dv[i]);
    fputc(']', f);
}

static void write_key_string(FILE *f, const char *key, const char *v)
{
    if (!v) return;
    fprintf(f, ", \"%s\": ", key);
    json_string(f, v);
}

/* The place whose devices hold all of d's (the group a Piper directive names), or NULL. */
static const ir_directive *place_of(const sched_compilation *c, const ir_directive *d)
{
    for (int i = 0; i < c->nexpanded; i++) {
        const ir_directive *p = &c->expanded[i];
        if (p->op != IR_DIR_PLACE || p->ndevices < d->ndevices) continue;
        int in = 0;
        for (int k = 0; k < d->ndevices; k++)
            for (int j = 0; j < p->ndevices; j++) in += p->devices[j] == d->devices[k];
        if (in == d->ndevices) return p;
    }
    return NULL;
}

/* A stage both tensor- and data-parallel: the tensor-parallel degree a mesh must say (0: none). */
static int mesh_tp(const sched_compilation *c, int64_t *group)
{
    for (int i = 0; i < c->nexpanded; i++) {
        const ir_directive *d = &c->expanded[i];
        if (d->op == IR_DIR_MESH) return 0;
    }
    for (int i = 0; i < c->nexpanded; i++) {
        const ir_directive *d = &c->expanded[i];
        if (d->op != IR_DIR_SHARD_TENSOR) continue;
        const ir_directive *p = place_of(c, d);
        if (p && p->ndevices > d->ndevices) {
            *group = p->ndevices;
            return d->ndevices;
        }
    }
    return 0;
}

static void write_directive(FILE *f, const sched_compilation *c, const ir_directive *d)
{
    const char *mb = c->prog.mb_tag;
    fprintf(f, "{\"op\": \"%s\"", ir_directive_name(d->op));
    bool has_filter = ir_directive_takes(d->op, "filter");
    if (has_filter) {
        fputs(", \"filter\": ", f);
        write_filter(f, &d->filter, mb);
    }
    switch (d->op) {
    case IR_DIR_PLACE:
    case IR_DIR_SHARD:
        write_devices(f, d->devices, d->ndevices);
        write_key_string(f, "stream", d->stream);
        break;
    case IR_DIR_SHARD_TENSOR:
    case IR_DIR_REPLICATE: {
        /* Piper names the whole group the nodes are placed on */
        const ir_directive *p = c->prog.from_piper_array ? NULL : place_of(c, d);
        if (p)
            write_devices(f, p->devices, p->ndevices);
        else
            write_devices(f, d->devices, d->ndevices);
        if (d->op == IR_DIR_SHARD_TENSOR) {
            write_key_string(f, "stream", d->stream);
            if (d->sequence_parallel) fputs(", \"sequence_parallel\": true", f);
            break;
        }
        if (d->zero == 1) fputs(", \"zero\": 1", f);
        if (d->zero >= 2) fputs(", \"shard_grads\": true", f);
        if (d->zero == 3) fputs(", \"shard_params\": true", f);
        const double mib = 1024.0 * 1024.0;
        double q = d->bucket_bytes / mib;
        if (d->bucket_bytes > 0 && q == (double)(long long)q)
            fprintf(f, ", \"bucket_size\": %lld", (long long)q);
        else if (d->bucket_bytes > 0)
            fprintf(f, ", \"bucket_size\": \"%.0fB\"", d->bucket_bytes);
        write_key_string(f, "reduce_stream", d->reduce_stream);
        write_key_string(f, "gather_stream", d->gather_stream);
        break;
    }
    case IR_DIR_SPLIT:
        fputs(", \"dim_name\": ", f);
        json_string(f, mb ? mb : "MB");
        fprintf(f, ", \"num_microbatches\": %lld", (long long)d->num_microbatches);
        break;
    case IR_DIR_RECOMPUTE:
        fprintf(f, ", \"mode\": \"%s\"", d->recompute == IR_RECOMPUTE_SELECTIVE ? "selective" : "full");
        break;
    case IR_DIR_MESH:
        fputs(", \"axes\": [", f);
        for (int i = 0; i < d->naxes; i++) {
            fputs(i ? ", [" : "[", f);
            json_string(f, d->axis_names[i]);
            fprintf(f, ", %lld]", (long long)d->axis_sizes[i]);
        }
        fputc(']', f);
        break;
    case IR_DIR_ROUTE: write_key_string(f, "mode", d->route_mode); break;
    default: break;
    }
    fputc('}', f);
}

int sched_write_directives_json(const sched_compilation *c, FILE *f, base_error *e)
{
    (void)e;
    fputs("[\n", f);
    int64_t group = 0;
    int tp = c->prog.from_piper_array ? 0 : mesh_tp(c, &group);
    if (tp)
        fprintf(f, "  {\"op\": \"mesh\", \"axes\": [[\"dp\", %lld], [\"tp\", %d]]}%s\n",
                (long long)(group / tp), tp, c->nexpanded ? "," : "");
    for (int i = 0; i < c->nexpanded; i++) {
        const ir_directive *d = &c->expanded[i];
        fputs("  ", f);
        if (d->op == IR_DIR_ORDER)
            write_order(f, d, c->prog.mb_tag);
        else
            write_directive(f, c, d);
        fputs(i + 1 < c->nexpanded ? ",\n" : "\n", f);
    }
    fputs("]\n", f);
    return 0;
}
