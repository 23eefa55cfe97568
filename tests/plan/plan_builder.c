/* plan_builder.c — see plan_builder.h. */
#include "plan_builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pb_init(plan_builder *b, plan_set *p, int ndevices, int nlists)
{
    memset(b, 0, sizeof *b);
    plan_init(p);
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
    plan_set *p = b->p;
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
    plan_set *p = b->p;
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
    L->bufs[L->nbufs] = (plan_buffer){.bytes = bytes, .mem = (uint8_t)mem, .role = PLAN_ROLE_NONE, .region = -1,
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
    plan_instr_init(&L->ins[L->n], op);
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

/* ---------------------------------------------------------------- a 1F1B pipeline */

typedef struct gen {
    plan_builder *b;
    int l, P, s, M, L, base; /* list, stages, this stage, micro-batches, layers, device of stage 0 */
    int c, pp, dp;           /* streams */
    int kf, kb, ku;          /* kernel lists */
    int W, G, O, X, A, GI, GO; /* first buffer of each kind */
    int sr;                  /* next sendrecv id */
    int64_t act_bytes;
} gen;

enum { E_IN, E_OUT, E_GRAD, E_DP };

static int bufA(const gen *g, int mb, int layer) { return g->A + mb * g->L + layer; }
static int tag(int mb, int backward) { return 2 * mb + backward; }

static void recv_fwd(gen *g, int mb)
{
    if (g->s == 0) return;
    pb_alloc(g->b, g->l, g->pp, g->X + mb);
    pb_recv(g->b, g->l, g->pp, g->base + g->s - 1, tag(mb, 0), g->act_bytes, g->X + mb);
    pb_record(g->b, g->l, g->pp, E_IN);
    pb_wait(g->b, g->l, g->c, E_IN);
}

static void forward(gen *g, int mb)
{
    for (int k = 0; k < g->L; k++) {
        pb_alloc(g->b, g->l, g->c, bufA(g, mb, k));
        int i = pb_compute(g->b, g->l, g->c, PLAN_PASS_F, g->kf, mb, g->s);
        int32_t in = k ? bufA(g, mb, k - 1) : g->s ? g->X + mb : g->W + k;
        pb_reads(g->b, g->l, i, 2, (int32_t[]){g->W + k, in});
        pb_writes(g->b, g->l, i, 1, (int32_t[]){bufA(g, mb, k)});
    }
}

/* The last backward overlaps each layer's gradient all-reduce with the layers below it. */
static void backward(gen *g, int mb)
{
    int first = g->s == 0, last = g->s == g->P - 1;
    if (!first) pb_alloc(g->b, g->l, g->c, g->GO + mb);
    for (int k = g->L - 1; k >= 0; k--) {
        int i = pb_compute(g->b, g->l, g->c, PLAN_PASS_B, g->kb, mb, g->s);
        int32_t r[3] = {g->W + k, bufA(g, mb, k), 0};
        int nr = 2;
        if (k == g->L - 1 && !last) r[nr++] = g->GI + mb;
        if (k == 0 && !first) r[nr++] = g->X + mb;
        pb_reads(g->b, g->l, i, nr, r);
        pb_writes(g->b, g->l, i, k == 0 && !first ? 2 : 1, (int32_t[]){g->G + k, g->GO + mb});
        pb_free(g->b, g->l, g->c, bufA(g, mb, k));
        if (mb == g->M - 1) {
            pb_record(g->b, g->l, g->c, E_GRAD);
            pb_wait(g->b, g->l, g->dp, E_GRAD);
            pb_coll(g->b, g->l, g->dp, PLAN_ALL_REDUCE, 0, g->b->p->lists[g->l].bufs[g->G + k].bytes, g->G + k);
        }
    }
    if (!last) pb_free(g->b, g->l, g->c, g->GI + mb);
    if (!first) pb_free(g->b, g->l, g->c, g->X + mb);
}

static void handoff(gen *g) /* compute -> pp */
{
    pb_record(g->b, g->l, g->c, E_OUT);
    pb_wait(g->b, g->l, g->pp, E_OUT);
}

static void pp_done(gen *g) /* pp -> compute */
{
    pb_record(g->b, g->l, g->pp, E_IN);
    pb_wait(g->b, g->l, g->c, E_IN);
}

static void send_fwd(gen *g, int mb)
{
    if (g->s == g->P - 1) return;
    handoff(g);
    pb_send(g->b, g->l, g->pp, g->base + g->s + 1, tag(mb, 0), g->act_bytes, bufA(g, mb, g->L - 1));
}

static void send_bwd(gen *g, int mb)
{
    if (g->s == 0) return;
    handoff(g);
    pb_send(g->b, g->l, g->pp, g->base + g->s - 1, tag(mb, 1), g->act_bytes, g->GO + mb);
    pb_free(g->b, g->l, g->pp, g->GO + mb);
}

static void recv_bwd(gen *g, int mb)
{
    if (g->s == g->P - 1) return;
    pb_alloc(g->b, g->l, g->pp, g->GI + mb);
    pb_recv(g->b, g->l, g->pp, g->base + g->s + 1, tag(mb, 1), g->act_bytes, g->GI + mb);
    pp_done(g);
}

static void send_fwd_recv_bwd(gen *g, int f, int bmb)
{
    if (g->s == g->P - 1) return;
    handoff(g);
    pb_alloc(g->b, g->l, g->pp, g->GI + bmb);
    int id = ++g->sr;
    pb_at(g->b, g->l, pb_send(g->b, g->l, g->pp, g->base + g->s + 1, tag(f, 0), g->act_bytes, bufA(g, f, g->L - 1)))->sendrecv = id;
    pb_at(g->b, g->l, pb_recv(g->b, g->l, g->pp, g->base + g->s + 1, tag(bmb, 1), g->act_bytes, g->GI + bmb))->sendrecv = id;
    pp_done(g);
}

static void send_bwd_recv_fwd(gen *g, int bmb, int f)
{
    if (g->s == 0) return;
    handoff(g);
    pb_alloc(g->b, g->l, g->pp, g->X + f);
    int id = ++g->sr;
    pb_at(g->b, g->l, pb_send(g->b, g->l, g->pp, g->base + g->s - 1, tag(bmb, 1), g->act_bytes, g->GO + bmb))->sendrecv = id;
    pb_at(g->b, g->l, pb_recv(g->b, g->l, g->pp, g->base + g->s - 1, tag(f, 0), g->act_bytes, g->X + f))->sendrecv = id;
    pb_free(g->b, g->l, g->pp, g->GO + bmb);
    pp_done(g);
}

/* One stage's list; peers are devices of the replica that starts at `base`. */
static void gen_stage(plan_builder *b, int l, int P, int s, int M, int L, int base)
{
    gen g = {.b = b, .l = l, .P = P, .s = s, .M = M, .L = L, .base = base, .kf = 0, .kb = 1, .ku = 2,
             .act_bytes = 16 << 20};
    g.c = pb_stream(b, l, "compute");
    g.pp = pb_stream(b, l, "pp");
    g.dp = pb_stream(b, l, "dp");
    char name[64];
    g.W = b->p->lists[l].nbufs;
    for (int k = 0; k < L; k++) snprintf(name, sizeof name, "param.L%d", s * L + k), pb_buf(b, l, name, 400 << 20, PLAN_MEM_PARAM);
    g.G = b->p->lists[l].nbufs;
    for (int k = 0; k < L; k++) snprintf(name, sizeof name, "grad.L%d", s * L + k), pb_buf(b, l, name, 400 << 20, PLAN_MEM_GRAD);
    g.O = b->p->lists[l].nbufs;
    for (int k = 0; k < L; k++) snprintf(name, sizeof name, "opt.L%d", s * L + k), pb_buf(b, l, name, 1600 << 20, PLAN_MEM_OPT);
    g.A = b->p->lists[l].nbufs;
    for (int mb = 0; mb < M; mb++)
        for (int k = 0; k < L; k++) snprintf(name, sizeof name, "act.L%d.mb%d", s * L + k, mb), pb_buf(b, l, name, 64 << 20, PLAN_MEM_ACT);
    g.X = b->p->lists[l].nbufs;
    for (int mb = 0; mb < M; mb++) snprintf(name, sizeof name, "in.mb%d", mb), pb_buf(b, l, name, g.act_bytes, PLAN_MEM_COMM);
    g.GI = b->p->lists[l].nbufs;
    for (int mb = 0; mb < M; mb++) snprintf(name, sizeof name, "gin.mb%d", mb), pb_buf(b, l, name, g.act_bytes, PLAN_MEM_COMM);
    g.GO = b->p->lists[l].nbufs;
    for (int mb = 0; mb < M; mb++) snprintf(name, sizeof name, "gout.mb%d", mb), pb_buf(b, l, name, g.act_bytes, PLAN_MEM_COMM);
    b->p->lists[l].nevents = 4;

    for (int k = 0; k < L; k++) {
        pb_alloc(b, l, g.c, g.W + k);
        pb_alloc(b, l, g.c, g.G + k);
        pb_alloc(b, l, g.c, g.O + k);
    }
    int w = P - s - 1 < M ? P - s - 1 : M, rem = M - w;
    for (int i = 0; i < w; i++) {
        recv_fwd(&g, i);
        forward(&g, i);
        send_fwd(&g, i);
    }
    if (rem > 0) recv_fwd(&g, w);
    for (int i = 0; i < rem; i++) {
        int f = w + i;
        forward(&g, f);
        send_fwd_recv_bwd(&g, f, i);
        backward(&g, i);
        if (i == rem - 1) send_bwd(&g, i);
        else send_bwd_recv_fwd(&g, i, f + 1);
    }
    for (int i = rem; i < M; i++) {
        recv_bwd(&g, i);
        backward(&g, i);
        send_bwd(&g, i);
    }
    pb_record(b, l, g.dp, E_DP);
    pb_wait(b, l, g.c, E_DP);
    for (int k = 0; k < L; k++) {
        int i = pb_compute(b, l, g.c, PLAN_PASS_UPD, g.ku, -1, s);
        pb_reads(b, l, i, 3, (int32_t[]){g.G + k, g.W + k, g.O + k});
        pb_writes(b, l, i, 2, (int32_t[]){g.W + k, g.O + k});
    }
}


void pb_pipeline_1f1b(plan_builder *b, plan_set *p, int P, int D, int M, int L, int shared)
{
    int ndev = P * D;
    pb_init(b, p, ndev, shared ? P : ndev);
    p->gpu.name = "H100";
    p->gpu.peak_flops[PLAN_BF16] = 989e12;
    p->gpu.hbm_bw = 3.35e12;
    p->gpu.mem_bytes = 80e9;
    pb_kernels(b, 2.4e12, 0); /* a layer's forward: ~2.4 ms */
    pb_kernels(b, 4.8e12, 0); /* its backward */
    pb_kernels(b, 0, 8.4e9);  /* its optimizer step: memory-bound */
    int32_t *m = base_xmalloc((size_t)D * sizeof *m);
    for (int s = 0; s < P; s++) {
        for (int r = 0; r < D; r++) m[r] = r * P + s;
        char name[32];
        snprintf(name, sizeof name, "dp(pp=%d)", s);
        pb_group(b, name, D, m);
    }
    free(m);
    for (int d = 0; d < ndev; d++) {
        int r = d / P, s = d % P;
        if (!shared) gen_stage(b, d, P, s, M, L, r * P);
        else if (r == 0) gen_stage(b, s, P, s, M, L, 0);
        pb_device(b, d, shared ? s : d, shared ? r * P : 0, 1, (int32_t[]){s});
    }
}
