/* plan_builder.c — see plan_builder.h. */
#include "plan_builder.h"

#include <stdlib.h>
#include <string.h>

void pb_init(plan_builder *b, sched_plan *p, int ndevices, int nlists)
{
    memset(b, 0, sizeof *b);
    sched_plan_init(p);
    b->p = p;
    p->param_dtype = p->act_dtype = PLAN_BF16;
    p->grad_dtype = p->opt_dtype = PLAN_FP32;
    p->gpu.name = "test-gpu";
    p->gpu.peak_flops[PLAN_BF16] = 1e12;
    p->gpu.peak_flops[PLAN_FP32] = 1e12;
    p->model.name = "test";
    p->model.family = "gpt";
    p->ndevices = ndevices;
    p->devices = base_arena_calloc(&p->arena, (size_t)ndevices, sizeof *p->devices);
    for (int d = 0; d < ndevices; d++) p->devices[d].id = d;
    p->nlists = nlists;
    p->lists = base_arena_calloc(&p->arena, (size_t)nlists, sizeof *p->lists);
    b->cap_ins = base_xcalloc((size_t)nlists + 1, sizeof *b->cap_ins);
    b->cap_bufs = base_xcalloc((size_t)nlists + 1, sizeof *b->cap_bufs);
    b->cap_streams = base_xcalloc((size_t)nlists + 1, sizeof *b->cap_streams);
}

void pb_done(plan_builder *b)
{
    free(b->cap_ins);
    free(b->cap_bufs);
    free(b->cap_streams);
    memset(b, 0, sizeof *b);
}

static int push_name(plan_builder *b, const char ***arr, int *n, size_t *cap, const char *name)
{
    *arr = base_arena_grow(&b->p->arena, (void *)*arr, cap, (size_t)*n + 1, sizeof **arr);
    (*arr)[*n] = name ? base_arena_strdup(&b->p->arena, name) : NULL;
    return (*n)++;
}

int pb_region(plan_builder *b, const char *name)
{
    return push_name(b, &b->p->regions, &b->p->nregions, &b->cap_regions, name);
}

int pb_kernel_id(plan_builder *b, const char *name)
{
    return push_name(b, &b->p->kernel_ids, &b->p->nkernel_ids, &b->cap_kids, name);
}

int pb_kernels(plan_builder *b, double flops, double bytes)
{
    sched_plan *p = b->p;
    p->kernel_lists = base_arena_grow(&p->arena, p->kernel_lists, &b->cap_kl, (size_t)p->nkernel_lists + 1,
                                      sizeof *p->kernel_lists);
    plan_kernel_list *kl = &p->kernel_lists[p->nkernel_lists];
    kl->n = bytes > 0 ? 2 : 1;
    kl->k = base_arena_calloc(&p->arena, (size_t)kl->n, sizeof *kl->k);
    kl->k[0] = (plan_kernel){.kind = PLAN_KERNEL_GEMM, .dtype = PLAN_BF16, .count = 1, .flops = flops, .name = "gemm"};
    if (bytes > 0)
        kl->k[1] = (plan_kernel){.kind = PLAN_KERNEL_MEM, .dtype = PLAN_BF16, .count = 1, .bytes = bytes, .name = "mem"};
    return p->nkernel_lists++;
}

int pb_group(plan_builder *b, const char *name, int n, const int32_t *devices)
{
    sched_plan *p = b->p;
    p->groups = base_arena_grow(&p->arena, p->groups, &b->cap_groups, (size_t)p->ngroups + 1, sizeof *p->groups);
    plan_group *g = &p->groups[p->ngroups];
    g->n = n;
    g->devices = base_arena_calloc(&p->arena, (size_t)n, sizeof *g->devices);
    if (n) memcpy(g->devices, devices, (size_t)n * sizeof *devices);
    g->name = base_arena_strdup(&p->arena, name);
    return p->ngroups++;
}

int pb_stream(plan_builder *b, int l, const char *name)
{
    plan_list *L = &b->p->lists[l];
    return push_name(b, &L->streams, &L->nstreams, &b->cap_streams[l], name);
}

int pb_buf(plan_builder *b, int l, const char *name, int64_t bytes, plan_mem mem)
{
    plan_list *L = &b->p->lists[l];
    L->bufs = base_arena_grow(&b->p->arena, L->bufs, &b->cap_bufs[l], (size_t)L->nbufs + 1, sizeof *L->bufs);
    L->bufs[L->nbufs] = (plan_buffer){.bytes = bytes, .mem = (uint8_t)mem,
                                      .name = name ? base_arena_strdup(&b->p->arena, name) : NULL};
    return L->nbufs++;
}

void pb_device(plan_builder *b, int d, int l, int32_t peer_offset, int n, const int32_t *slots)
{
    plan_device *dv = &b->p->devices[d];
    dv->list = l;
    dv->peer_offset = peer_offset;
    b->p->lists[l].ngroup_slots = n;
    dv->group_slots = base_arena_calloc(&b->p->arena, (size_t)n, sizeof *dv->group_slots);
    if (n) memcpy(dv->group_slots, slots, (size_t)n * sizeof *slots);
}

int pb_add(plan_builder *b, int l, plan_op op, int stream)
{
    plan_list *L = &b->p->lists[l];
    L->ins = base_arena_grow(&b->p->arena, L->ins, &b->cap_ins[l], (size_t)L->n + 1, sizeof *L->ins);
    sched_plan_instr_init(&L->ins[L->n], op);
    L->ins[L->n].stream = stream;
    return L->n++;
}

plan_instr *pb_at(plan_builder *b, int l, int i) { return &b->p->lists[l].ins[i]; }

int pb_compute(plan_builder *b, int l, int s, plan_pass pass, int kernels, int mb, int stage)
{
    int i = pb_add(b, l, PLAN_COMPUTE, s);
    plan_instr *in = pb_at(b, l, i);
    in->pass = (uint8_t)pass;
    in->kernels = kernels;
    in->mb = mb;
    in->stage = stage;
    return i;
}

static int32_t *copy_ids(plan_builder *b, int n, const int32_t *ids)
{
    int32_t *v = base_arena_calloc(&b->p->arena, (size_t)n, sizeof *v);
    if (n) memcpy(v, ids, (size_t)n * sizeof *v);
    return v;
}

void pb_reads(plan_builder *b, int l, int i, int n, const int32_t *bufs)
{
    plan_instr *in = pb_at(b, l, i);
    in->nreads = n;
    in->reads = copy_ids(b, n, bufs);
}

void pb_writes(plan_builder *b, int l, int i, int n, const int32_t *bufs)
{
    plan_instr *in = pb_at(b, l, i);
    in->nwrites = n;
    in->writes = copy_ids(b, n, bufs);
}

static int p2p(plan_builder *b, int l, plan_op op, int s, int peer, int tag, int64_t bytes, int buf)
{
    int i = pb_add(b, l, op, s);
    plan_instr *in = pb_at(b, l, i);
    in->peer = peer;
    in->tag = tag;
    in->bytes = bytes;
    in->buf = buf;
    if (buf >= 0) in->mem = b->p->lists[l].bufs[buf].mem;
    return i;
}

int pb_send(plan_builder *b, int l, int s, int peer, int tag, int64_t bytes, int buf)
{
    return p2p(b, l, PLAN_SEND, s, peer, tag, bytes, buf);
}

int pb_recv(plan_builder *b, int l, int s, int peer, int tag, int64_t bytes, int buf)
{
    return p2p(b, l, PLAN_RECV, s, peer, tag, bytes, buf);
}

int pb_coll(plan_builder *b, int l, int s, plan_coll kind, int slot, int64_t bytes, int buf)
{
    int i = pb_add(b, l, PLAN_COLL, s);
    plan_instr *in = pb_at(b, l, i);
    in->coll = (uint8_t)kind;
    in->group = slot;
    in->bytes = bytes;
    in->buf = buf;
    if (buf >= 0) in->mem = b->p->lists[l].bufs[buf].mem;
    return i;
}

static int event_op(plan_builder *b, int l, plan_op op, int s, int event)
{
    int i = pb_add(b, l, op, s);
    pb_at(b, l, i)->event = event;
    if (b->p->lists[l].nevents <= event) b->p->lists[l].nevents = event + 1;
    return i;
}

int pb_record(plan_builder *b, int l, int s, int event) { return event_op(b, l, PLAN_RECORD, s, event); }
int pb_wait(plan_builder *b, int l, int s, int event) { return event_op(b, l, PLAN_WAIT, s, event); }

static int mem_op(plan_builder *b, int l, plan_op op, int s, int buf)
{
    int i = pb_add(b, l, op, s);
    plan_instr *in = pb_at(b, l, i);
    in->buf = buf;
    in->bytes = b->p->lists[l].bufs[buf].bytes;
    in->mem = b->p->lists[l].bufs[buf].mem;
    return i;
}

int pb_alloc(plan_builder *b, int l, int s, int buf) { return mem_op(b, l, PLAN_ALLOC, s, buf); }
int pb_free(plan_builder *b, int l, int s, int buf) { return mem_op(b, l, PLAN_FREE, s, buf); }
