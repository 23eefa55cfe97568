/* dir_mesh.c — `mesh {axes}`: Piper's named axes over each stage's device group, outermost
 * first, read row-major (position i of a group has, on axis k, coordinate
 * (i / product of the sizes after k) mod size_k). That is piper's layout of a placement already
 * (tensor-parallel rank i mod t, data-parallel rank i / t) when the tp axis is the innermost, so
 * the mesh checks that its axes multiply to every stage's group size, as Piper's schedule loader
 * does, and records the tp axis: a Piper array's shard_tensor and replicate, which name a
 * stage's whole group, take their groups from it (sched_piper_group). */
#include "sched_internal.h"

#include <string.h>

static bool ci_eq(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if ((*a | 32) != (*b | 32)) return false;
    return *a == *b;
}

int sched_dir_mesh(sched_ctx *x, const ir_directive *d, base_error *e)
{
    if (x->mesh_size)
        return sched_dir_error(d, e, "the program has a mesh already; keep one mesh directive");
    int64_t size = 1, tp = 0;
    for (int i = 0; i < d->naxes; i++) {
        size *= d->axis_sizes[i];
        if (size > x->g->world)
            return sched_dir_error(d, e, "the mesh axes multiply to more than the cluster's %d "
                                         "devices; use smaller axes",
                                   x->g->world);
        if (ci_eq(d->axis_names[i], "tp")) {
            if (i != d->naxes - 1 && d->axis_sizes[i] > 1)
                return sched_dir_error(d, e,
                                       "axis tp is axis %d of %d; piper's tensor-parallel groups "
                                       "are consecutive devices, so tp must be the last "
                                       "(innermost) axis",
                                       i, d->naxes);
            tp = d->axis_sizes[i];
        }
    }
    /* Piper's loader: the axes multiply to each stage's device group */
    const ir_program *p = x->prog;
    for (int i = 0; i < p->ndirectives; i++) {
        const ir_directive *pl = &p->directives[i];
        if (pl->op != IR_DIR_PLACE || pl->ndevices == size) continue;
        char where[160];
        return sched_dir_error(d, e,
                               "the mesh axes multiply to %lld, but %s places a stage on %d "
                               "devices; the axes must multiply to each stage's group size",
                               (long long)size, sched_dir_where(pl, where, sizeof where),
                               pl->ndevices);
    }
    x->mesh_size = size;
    x->mesh_tp = tp;
    return 0;
}

const ir_directive *sched_piper_group(const sched_ctx *x, const ir_directive *d,
                                      ir_coll_group cg, ir_directive *tmp)
{
    if (!x->prog->from_piper_array || x->mesh_tp <= 1 || d->ndevices != x->mesh_size ||
        x->mesh_tp >= d->ndevices)
        return d;
    *tmp = *d;
    int t = (int)x->mesh_tp;
    if (cg == IR_CG_TP) {
        tmp->ndevices = t;
        return tmp;
    }
    int32_t *dv = base_arena_calloc(x->a, (size_t)(d->ndevices / t), sizeof *dv);
    int n = 0;
    for (int i = 0; i < d->ndevices; i += t) dv[n++] = d->devices[i];
    tmp->devices = dv;
    tmp->ndevices = n;
    return tmp;
}
