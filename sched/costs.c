/* costs.c — what each node costs: its kernel list from the cost model (cached: every layer of a
 * kind has the same kernels under the same shape, so a 96-layer model needs a handful of
 * lists), the kernel identity the executor runs, and a static duration for ordering priorities
 * and the plan check (roofline for compute, latency + bytes/bandwidth for communication). */
#include "sched_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct cost_key {
    int32_t region;      /* region index for embed/head (unique), region kind otherwise */
    uint8_t pass, kind, sp, rc, from_prev;
    int16_t tp, ep;
    int32_t opt_shards;  /* the optimizer step's ZeRO sharding (its piece of the state) */
} cost_key;

typedef struct cost_entry {
    cost_key key;
    plan_kernel_list list;
    const char *kid;
    double seconds;
} cost_entry;

struct sched_costs {
    sched_ctx *x;
    BASE_VEC(cost_entry) entries;
    int32_t *entry_of_node;   /* -1: not yet computed */
    plan_kernel_list empty;
    bool *attn_full;
};

static const char *REGION_KIND_ID[] = {"embed", "attn", "mlp", "moe_gate", "moe_experts", "moe_combine", "head"};

sched_costs *sched_costs_new(sched_ctx *x)
{
    sched_costs *c = base_xcalloc(1, sizeof *c);
    c->x = x;
    c->entry_of_node = base_xmalloc((x->g->nnodes ? x->g->nnodes : 1) * sizeof(int32_t));
    for (size_t i = 0; i < x->g->nnodes; i++) c->entry_of_node[i] = -1;
    const ir_model *m = x->g->model;
    c->attn_full = base_xcalloc((size_t)(m->layers > 0 ? m->layers : 1), sizeof(bool));
    for (size_t v = 0; v < x->g->nnodes; v++) {
        const ir_node *n = &x->g->nodes[v];
        if (!n->dead && n->op == IR_OP_F && n->region >= 0 && n->layer >= 0 &&
            x->g->regions[n->region].kind == IR_REGION_ATTN && n->recompute == IR_RECOMPUTE_FULL)
            c->attn_full[n->layer] = true;
    }
    return c;
}

void sched_costs_free(sched_costs *c)
{
    if (!c) return;
    free(c->entries.v);
    free(c->entry_of_node);
    free(c->attn_full);
    free(c);
}

static double list_seconds(const plan_kernel_list *l, const plan_gpu *gpu)
{
    double t = 0;
    for (int i = 0; i < l->n; i++) {
        const plan_kernel *k = &l->k[i];
        double peak = gpu->peak_flops[k->dtype < PLAN_NDTYPE ? k->dtype : PLAN_BF16];
        double tc = peak > 0 ? k->flops / peak : 0;
        double tm = gpu->hbm_bw > 0 ? k->bytes / gpu->hbm_bw : 0;
        t += tc > tm ? tc : tm;
    }
    return t;
}

static int32_t entry_for(sched_costs *c, int32_t v)
{
    if (c->entry_of_node[v] >= 0) return c->entry_of_node[v];
    sched_ctx *x = c->x;
    ir_dag *g = x->g;
    const ir_node *n = &g->nodes[v];
    if (IR_OP_INFO[n->op].kind != IR_KIND_COMPUTE) return -1;
    cost_key k;
    memset(&k, 0, sizeof k);
    ir_shape s = sched_node_shape(x, v);
    k.pass = (uint8_t)IR_OP_INFO[n->op].pass;
    k.tp = n->tp;
    k.ep = n->ep;
    k.sp = n->sp;
    k.rc = n->recompute;
    k.opt_shards = (int32_t)s.opt_shards;
    if (n->region >= 0) {
        const ir_region *r = &g->regions[n->region];
        k.kind = (uint8_t)r->kind;
        k.region = (r->kind == IR_REGION_EMBED || r->kind == IR_REGION_HEAD) ? r->index : -1;
        if (s.recompute == IR_RECOMPUTE_FULL && r->layer >= 0 && r->kind != IR_REGION_ATTN)
            s.recompute_from_prev = c->attn_full[r->layer];
        k.from_prev = s.recompute_from_prev;
    } else {
        k.kind = 200 + n->op; /* auxiliary compute: no region */
        k.region = n->stage;
    }
    for (size_t i = 0; i < c->entries.n; i++)
        if (memcmp(&c->entries.v[i].key, &k, sizeof k) == 0) return c->entry_of_node[v] = (int32_t)i;

    cost_entry ent;
    memset(&ent, 0, sizeof ent);
    ent.key = k;
    const char *fam = g->model->family == IR_FAMILY_GPT ? "gpt" : "llama";
    if (n->region >= 0) {
        plan_pass pass = (plan_pass)IR_OP_INFO[n->op].pass;
        if (ir_region_kernels(g->model, &g->regions[n->region], pass, &s, g->arena, &ent.list) != 0)
            ent.list = c->empty;
        ent.kid = base_arena_printf(g->arena, "%s.%s.%s", fam, REGION_KIND_ID[g->regions[n->region].kind],
                                    plan_pass_name(pass));
    } else {
        /* Gradient norm: a read of the device's gradients; load-balancing loss: a few scalars. */
        ent.list.n = 1;
        ent.list.k = base_arena_calloc(g->arena, 1, sizeof *ent.list.k);
        ent.list.k[0].kind = PLAN_KERNEL_MEM;
        ent.list.k[0].dtype = (uint8_t)x->prog->grad_dtype;
        ent.list.k[0].count = 1;
        ent.list.k[0].name = n->op == IR_OP_GRAD_NORM ? "grad_norm" : "aux_loss";
        double bytes = 64;
        if (n->op == IR_OP_GRAD_NORM) {
            ir_dag_build_adjacency(g);
            bytes = 0;
            for (int32_t e = g->in_off[v]; e < g->in_off[v + 1]; e++) {
                const ir_edge *ed = &g->edges[g->in_edge[e]];
                if (ed->kind == IR_EDGE_DATA) bytes += g->tensors[ed->tensor].bytes;
            }
        }
        ent.list.k[0].bytes = bytes;
        ent.list.k[0].flops = bytes / 2;
        ent.kid = n->op == IR_OP_GRAD_NORM ? "aux.grad_norm" : "aux.aux_loss";
    }
    ent.seconds = list_seconds(&ent.list, &x->prog->cluster.gpu);
    BASE_VEC_PUSH(c->entries, ent);
    return c->entry_of_node[v] = (int32_t)(c->entries.n - 1);
}

const plan_kernel_list *sched_node_kernels(sched_costs *c, int32_t v)
{
    int32_t i = entry_for(c, v);
    return i >= 0 ? &c->entries.v[i].list : &c->empty;
}

const char *sched_node_kernel_id(sched_costs *c, int32_t v)
{
    int32_t i = entry_for(c, v);
    return i >= 0 ? c->entries.v[i].kid : "";
}

/* Does the node's communication stay inside one node of the cluster? */
static bool intra_node(const sched_ctx *x, const ir_node *n)
{
    const ir_cluster *cl = &x->prog->cluster;
    const ir_place *p = &x->g->places[n->place];
    int64_t gpn = cl->gpus_per_node > 0 ? cl->gpus_per_node : 1;
    if (n->coll_group == IR_CG_TP) return true; /* TP groups sit inside a node */
    if (n->coll_group == IR_CG_WORLD) return x->g->world <= gpn;
    int first = p->devs[0];
    if (IR_OP_INFO[n->op].kind == IR_KIND_P2P && n->peer_place >= 0) {
        const ir_place *q = &x->g->places[n->peer_place];
        return first / gpn == q->devs[0] / gpn;
    }
    for (int i = 1; i < p->ndev; i++)
        if (p->devs[i] / gpn != first / gpn) return false;
    return true;
}

double sched_node_seconds(sched_costs *c, int32_t v)
{
    const ir_node *n = &c->x->g->nodes[v];
    ir_op_kind kind = IR_OP_INFO[n->op].kind;
    if (kind == IR_KIND_COMPUTE) {
        int32_t i = entry_for(c, v);
        return i >= 0 ? c->entries.v[i].seconds : 0;
    }
    if (kind == IR_KIND_DUMMY) return 0;
    const ir_cluster *cl = &c->x->prog->cluster;
    bool intra = intra_node(c->x, n);
    double bw = intra ? cl->nvlink_bw : cl->nic_bw / (cl->gpus_per_nic > 0 ? (double)cl->gpus_per_nic : 1.0);
    double lat = intra ? cl->nvlink_latency : cl->nic_latency;
    if (bw <= 0) bw = 25e9;
    double factor = 1;
    if (n->op == IR_OP_ALL_REDUCE) factor = 2; /* ring: reduce-scatter + all-gather */
    return lat + factor * n->bytes / bw;
}

int sched_node_cost_entry(sched_costs *c, int32_t v) { return entry_for(c, v); }
int sched_costs_count(const sched_costs *c) { return (int)c->entries.n; }
const plan_kernel_list *sched_costs_list(const sched_costs *c, int i) { return &c->entries.v[i].list; }
const char *sched_costs_kid(const sched_costs *c, int i) { return c->entries.v[i].kid; }
