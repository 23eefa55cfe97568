/* lower.c — lowering: one instruction list per device class, in the class's launch order, with
 *   - streams (the DAG's logical streams the class uses),
 *   - record/wait pairs for every data dependency that crosses streams inside a device,
 *   - send/recv with peers and tags, paired into sendrecv groups where neighbours exchange,
 *   - collectives naming group slots (each device maps its slots to global groups),
 *   - alloc/free of every buffer with its category: parameters, gradients and optimizer state
 *     (ZeRO-sharded) for the whole step; saved and recomputed activations from their forward to
 *     their last backward; communication buffers around the transfers that fill or drain them;
 *     workspaces around the compute that uses them (a split backward's from BI to its BW), and
 *     the tensor a region hands the next one on the device from its maker to its last reader;
 *   - the role of every buffer and the purpose and piece rule of every collective (plan.h's
 *     tables), so that consumers bind them without reading the instructions' shapes back.
 * Devices of a class share the list when their peers differ from the representative's by one
 * constant offset (the usual TP x PP x DP numbering); otherwise they get a list of their own. */
#include "sched_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct group_tpl {
    int place, peer, cg, tp, ep;
} group_tpl;

typedef BASE_VEC(plan_instr) instr_vec;
typedef BASE_VEC(plan_buffer) buf_vec;
typedef BASE_VEC(int32_t) i32_vec;

typedef struct lowerer {
    sched_ctx *x;
    plan_set *plan;
    const sched_order *o;
    const sched_options *opt;
    BASE_VEC(plan_group) groups;  /* global groups, interned by member list */
    BASE_VEC(plan_list) lists;
    BASE_VEC(plan_device) devices;
    int *kid_of_entry;             /* cost entry -> plan kernel id */
    int *place_tp;                 /* placement -> its tensor-parallel degree */
    /* scratch of the list being lowered (sized by nodes / tensors) */
    int32_t *launch;               /* node -> launch index in this class, -1 not a member */
    int32_t *event_of;             /* node -> event recorded after it, -1 */
    int32_t *buf_of;               /* tensor -> buffer, -1 */
    int32_t *last_use;             /* tensor -> last consumer (launch order), -1 */
    int32_t *bucket_buf;           /* node (RS bucket) -> buffer */
    int32_t *stream_map;           /* DAG stream -> list stream, -1 */
    uint8_t *need_record;
    int32_t *world;                /* the world group: devices that run a world collective */
    int nworld;
} lowerer;

static int group_members(const lowerer *L, const group_tpl *t, int dev, int32_t *out)
{
    /* Not every device of the cluster: a program may leave some idle, and they issue nothing. */
    if (t->cg == IR_CG_WORLD) {
        memcpy(out, L->world, (size_t)L->nworld * sizeof *out);
        return L->nworld;
    }
    return sched_group_members(L->x->g, t->place, t->peer, (ir_coll_group)t->cg, t->tp, t->ep,
                               dev, out);
}

static const char *CG_NAME[] = {"-", "tp", "dp", "ep", "world", "pair", "edp"};

static int intern_group(lowerer *L, const int32_t *m, int n, int cg)
{
    for (size_t i = 0; i < L->groups.n; i++) {
        const plan_group *q = &L->groups.v[i];
        if (q->n == n && memcmp(q->devices, m, (size_t)n * sizeof *m) == 0) return (int)i;
    }
    plan_group q;
    q.n = n;
    q.devices = base_arena_calloc(&L->plan->arena, (size_t)n, sizeof *q.devices);
    memcpy(q.devices, m, (size_t)n * sizeof *m);
    q.name = base_arena_printf(&L->plan->arena, "%s:%d-%d", CG_NAME[cg], m[0], m[n - 1]);
    BASE_VEC_PUSH(L->groups, q);
    return (int)L->groups.n - 1;
}

/* Which tensors get a buffer, and in which category. -1: none (aliased into a neighbour's).
 * A region's output (or input gradient) that goes straight to the next region's compute is a
 * workspace-category buffer: it is real memory from the compute that makes it to the last one
 * that reads it, but it is nobody's saved activation. */
static int tensor_mem(const ir_dag *g, int32_t t)
{
    const ir_tensor *x = &g->tensors[t];
    switch ((ir_tensor_kind)x->kind) {
    case IR_T_SAVED:
    case IR_T_RECOMP: return PLAN_MEM_ACT;
    case IR_T_ACT:
    case IR_T_GRAD_ACT:
    case IR_T_COMM: {
        if (x->bytes <= 0) return -1;
        if (g->nodes[x->producer].op == IR_OP_SEND) return -1; /* in flight: the send's buffer */
        if (IR_OP_INFO[g->nodes[x->producer].op].kind != IR_KIND_COMPUTE) return PLAN_MEM_COMM;
        const ir_dag *gg = g;
        for (int32_t k = gg->out_off[x->producer]; k < gg->out_off[x->producer + 1]; k++) {
            const ir_edge *ed = &gg->edges[gg->out_edge[k]];
            if (ed->tensor == t && IR_OP_INFO[gg->nodes[ed->dst].op].kind != IR_KIND_COMPUTE)
                return PLAN_MEM_COMM;
        }
        return x->kind == IR_T_COMM ? -1 : PLAN_MEM_WORK;
    }
    default: return -1;
    }
}

typedef struct list_builder {
    instr_vec ins;
    buf_vec bufs;
    BASE_VEC(const char *) streams;
    BASE_VEC(group_tpl) tpls;
    int nevents;
} list_builder;

static int stream_of(lowerer *L, list_builder *B, int dag_stream)
{
    if (L->stream_map[dag_stream] < 0) {
        L->stream_map[dag_stream] = (int32_t)B->streams.n;
        BASE_VEC_PUSH(B->streams, L->x->g->streams[dag_stream]);
    }
    return L->stream_map[dag_stream];
}

/* The list stream of node v. With per-channel p2p (sched_options.p2p_per_channel) every send
 * and receive goes on a stream of its own peer, direction and flow (activations or gradients),
 * named by the peer's offset from the list's device ("p2p.send+1.F", "p2p.recv-3.B") so that
 * replicas sharing the list agree. */
static int node_stream(lowerer *L, list_builder *B, int32_t v, int rep, int peer)
{
    const ir_node *n = &L->x->g->nodes[v];
    if (!L->opt->p2p_per_channel || IR_OP_INFO[n->op].kind != IR_KIND_P2P)
        return stream_of(L, B, n->stream);
    /* activations and gradients travel on separate channels: in a V schedule the same pair of
     * ranks exchanges one stage's activations and another stage's gradients, in orders the two
     * ends need not interleave alike */
    char name[48];
    snprintf(name, sizeof name, "p2p.%s%+d.%s", n->op == IR_OP_SEND ? "send" : "recv", peer - rep,
             n->pass == PLAN_PASS_F ? "F" : "B");
    for (size_t i = 0; i < B->streams.n; i++)
        if (strcmp(B->streams.v[i], name) == 0) return (int)i;
    BASE_VEC_PUSH(B->streams, base_arena_strdup(&L->plan->arena, name));
    return (int)B->streams.n - 1;
}

static int slot_of(list_builder *B, group_tpl t)
{
    for (size_t i = 0; i < B->tpls.n; i++)
        if (memcmp(&B->tpls.v[i], &t, sizeof t) == 0) return (int)i;
    BASE_VEC_PUSH(B->tpls, t);
    return (int)B->tpls.n - 1;
}

static plan_instr blank(int stream)
{
    plan_instr in;
    memset(&in, 0, sizeof in);
    in.stream = stream;
    in.region = in.mb = in.stage = in.kernels = in.kid = in.peer = in.group = -1;
    in.event = in.buf = in.tp_group = in.ep_group = -1;
    return in;
}

/* A buffer name from node v's label: PREFIX + the label with its spaces as dots + SUFFIX
 * ("work." + "B.L3.attn.mb2", "F.L0.mlp.mb0" + ".t17"). */
static void node_buffer_name(const ir_dag *g, int32_t v, const char *prefix, const char *suffix,
                             char *name, size_t size)
{
    char lbl[96];
    snprintf(name, size, "%s%s%s", prefix, ir_node_label(g, v, lbl, sizeof lbl), suffix);
    for (char *c = name; *c; c++)
        if (*c == ' ') *c = '.';
}

static int new_buffer(lowerer *L, list_builder *B, double bytes, int mem, plan_role role, int region,
                      const char *name)
{
    plan_buffer b = {.bytes = (int64_t)(bytes + 0.5), .mem = (uint8_t)mem, .role = (uint8_t)role,
                     .region = region, .name = base_arena_strdup(&L->plan->arena, name)};
    BASE_VEC_PUSH(B->bufs, b);
    return (int)B->bufs.n - 1;
}

static void emit_mem(list_builder *B, plan_op op, int stream, int buf, const plan_buffer *b)
{
    plan_instr in = blank(stream);
    in.op = (uint8_t)op;
    in.buf = buf;
    in.mem = b->mem;
    in.bytes = b->bytes;
    BASE_VEC_PUSH(B->ins, in);
}

static void emit_wait(list_builder *B, int stream, int event)
{
    plan_instr in = blank(stream);
    in.op = PLAN_WAIT;
    in.event = event;
    BASE_VEC_PUSH(B->ins, in);
}

static void sendrecv_groups(list_builder *B)
{
    /* Sends and receives that follow each other on one stream (only allocations and frees
     * between them) are posted together, as one NCCL group call: neighbours exchanging in both
     * directions (1F1B's steady state) and rings of ranks each sending on and receiving from the
     * previous one (interleaved and V schedules) would otherwise each block in a send. Posting
     * earlier never delays anything, so every such run becomes a group. Its allocations move
     * ahead of it and its frees behind it, so the group is consecutive on its stream. */
    int next_id = 1;
    size_t n = B->ins.n;
    plan_instr *tmp = base_xmalloc((n ? n : 1) * sizeof *tmp);
    size_t *run = base_xmalloc((n ? n : 1) * sizeof *run);
    for (size_t i = 0; i < n; i++) {
        plan_instr *a = &B->ins.v[i];
        if ((a->op != PLAN_SEND && a->op != PLAN_RECV) || a->sendrecv) continue;
        size_t nrun = 0, last = i;
        run[nrun++] = i;
        for (size_t j = i + 1; j < n; j++) {
            const plan_instr *c = &B->ins.v[j];
            if (c->stream != a->stream || c->op == PLAN_ALLOC || c->op == PLAN_FREE) continue;
            if ((c->op != PLAN_SEND && c->op != PLAN_RECV) || c->sendrecv) break;
            run[nrun++] = j;
            last = j;
        }
        if (nrun < 2) continue;
        /* rebuild [i, last]: allocations, the group, other streams' instructions, frees */
        size_t k = 0;
        for (size_t q = i; q <= last; q++)
            if (B->ins.v[q].stream == a->stream && B->ins.v[q].op == PLAN_ALLOC) tmp[k++] = B->ins.v[q];
        size_t first_at = i + k;
        for (size_t r = 0; r < nrun; r++) {
            tmp[k] = B->ins.v[run[r]];
            tmp[k++].sendrecv = next_id;
        }
        for (size_t q = i; q <= last; q++)
            if (B->ins.v[q].stream != a->stream) tmp[k++] = B->ins.v[q];
        for (size_t q = i; q <= last; q++)
            if (B->ins.v[q].stream == a->stream && B->ins.v[q].op == PLAN_FREE) tmp[k++] = B->ins.v[q];
        memcpy(&B->ins.v[i], tmp, k * sizeof *tmp);
        next_id++;
        i = first_at + nrun - 1;
    }
    free(tmp);
    free(run);
}

/* ---------------------------------------------------------------- roles */

/* What collective v is for (plan.h's PLAN_PURPOSE_TABLE), from the facts the passes that made it
 * leave on the node: its group, its flags (DP_SYNC: data-parallel synchronisation; JIT: issued
 * right before its consumer; TIED: the tied-embedding pair), its pass, and what it reads. The one
 * place that names collectives, so the buffers they fill (tensor_role) and the executors that
 * read them agree. PLAN_PURPOSE_NONE: a collective no pass is known to make (an error, below). */
static plan_purpose coll_purpose(const ir_dag *g, int32_t v)
{
    const ir_node *n = &g->nodes[v];
    plan_coll c = IR_OP_INFO[n->op].coll;
    bool dp_sync = (n->flags & IR_NODE_DP_SYNC) != 0;
    switch ((ir_coll_group)n->coll_group) {
    case IR_CG_WORLD: return PLAN_PURPOSE_GRAD_NORM; /* ir/dag_build.c: the global gradient norm */
    case IR_CG_PAIR: /* sched/tied.c, sched/dualpipe_mirror.c */
        return (n->flags & IR_NODE_TIED) ? PLAN_PURPOSE_TIED_SUM : PLAN_PURPOSE_PAIR_SUM;
    case IR_CG_EP: { /* sched/dir_shard.c: the all-to-all after the experts is the combine */
        for (int32_t k = g->in_off[v]; k < g->in_off[v + 1]; k++) {
            const ir_edge *ed = &g->edges[g->in_edge[k]];
            const ir_node *src = &g->nodes[ed->src];
            if (ed->kind == IR_EDGE_DATA && IR_OP_INFO[src->op].kind == IR_KIND_COMPUTE &&
                src->region == n->region && n->region >= 0)
                return PLAN_PURPOSE_EP_COMBINE;
        }
        return PLAN_PURPOSE_EP_DISPATCH;
    }
    case IR_CG_TP: {
        if (dp_sync) return PLAN_PURPOSE_TP_GRAD_SYNC; /* sched/tp_sync.c */
        /* sched/dir_shard.c's backward re-gather of the saved norm shards (sizes.c sizes it so) */
        for (int32_t k = g->in_off[v]; k < g->in_off[v + 1] && c == PLAN_ALL_GATHER; k++) {
            const ir_edge *ed = &g->edges[g->in_edge[k]];
            uint8_t tk = ed->kind == IR_EDGE_DATA ? g->tensors[ed->tensor].kind : IR_T_ACT;
            if ((tk == IR_T_SAVED || tk == IR_T_RECOMP) && n->pass != PLAN_PASS_R)
                return PLAN_PURPOSE_SP_REGATHER;
        }
        bool bwd = n->pass == PLAN_PASS_B || n->pass == PLAN_PASS_BI || n->pass == PLAN_PASS_BW;
        return bwd ? PLAN_PURPOSE_TP_BWD : PLAN_PURPOSE_TP_FWD;
    }
    case IR_CG_DP:
    case IR_CG_EDP: /* sched/dir_replicate.c */
        if (!dp_sync) break;
        if (c == PLAN_ALL_REDUCE) return PLAN_PURPOSE_DP_GRAD_SUM;
        if (c == PLAN_REDUCE_SCATTER) return PLAN_PURPOSE_ZERO_SCATTER;
        if (c == PLAN_ALL_GATHER)
            return (n->flags & IR_NODE_JIT) ? PLAN_PURPOSE_ZERO3_GATHER : PLAN_PURPOSE_ZERO_UPDATE_GATHER;
        break;
    default: break;
    }
    return PLAN_PURPOSE_NONE;
}

/* How a member's part of a collective of purpose p and kind c is cut (PLAN_PIECE_TABLE). */
static plan_piece coll_piece(plan_purpose p, plan_coll c)
{
    switch (p) {
    case PLAN_PURPOSE_ZERO_SCATTER:
    case PLAN_PURPOSE_ZERO_UPDATE_GATHER:
    case PLAN_PURPOSE_ZERO3_GATHER: return PLAN_PIECE_ZERO;
    case PLAN_PURPOSE_SP_REGATHER: return PLAN_PIECE_LEADING;
    case PLAN_PURPOSE_TP_GRAD_SYNC: return PLAN_PIECE_REPLICATED;
    case PLAN_PURPOSE_TIED_SUM: return PLAN_PIECE_TOKEN_TABLE;
    case PLAN_PURPOSE_NONE: return PLAN_PIECE_NONE;
    default: return c == PLAN_ALL_REDUCE || c == PLAN_BROADCAST || c == PLAN_REDUCE ? PLAN_PIECE_WHOLE
                                                                                     : PLAN_PIECE_EVEN;
    }
}

/* The role of the buffer of tensor t in category mem (tensor_mem): activations by what made
 * them; a workspace-category tensor is a boundary, or the route when it joins an MoE gate and its
 * combine; a comm tensor is what its collective says it is. */
static plan_role tensor_role(const ir_dag *g, int32_t t, int mem)
{
    const ir_tensor *x = &g->tensors[t];
    int32_t prod = x->producer;
    switch (mem) {
    case PLAN_MEM_ACT: return x->kind == IR_T_RECOMP ? PLAN_ROLE_RECOMPUTED : PLAN_ROLE_SAVED;
    case PLAN_MEM_WORK: {
        int pr = g->nodes[prod].region;
        ir_region_kind pk = pr >= 0 ? g->regions[pr].kind : IR_REGION_EMBED;
        for (int32_t k = g->out_off[prod]; k < g->out_off[prod + 1] && pr >= 0; k++) {
            const ir_edge *ed = &g->edges[g->out_edge[k]];
            int cr = ed->tensor == t ? g->nodes[ed->dst].region : -1;
            if (cr < 0) continue;
            ir_region_kind ck = g->regions[cr].kind;
            if ((pk == IR_REGION_MOE_GATE && ck == IR_REGION_MOE_COMBINE) ||
                (pk == IR_REGION_MOE_COMBINE && ck == IR_REGION_MOE_GATE))
                return PLAN_ROLE_ROUTE;
        }
        return PLAN_ROLE_BOUNDARY;
    }
    default: {
        plan_purpose p = IR_OP_INFO[g->nodes[prod].op].kind == IR_KIND_COLL ? coll_purpose(g, prod)
                                                                          : PLAN_PURPOSE_NONE;
        return p == PLAN_PURPOSE_ZERO3_GATHER ? PLAN_ROLE_GATHERED
             : p == PLAN_PURPOSE_SP_REGATHER  ? PLAN_ROLE_REGATHERED
                                              : PLAN_ROLE_COMM;
    }
    }
}

/* ---------------------------------------------------------------- one list */

/* Persistent per-region state for a region whose optimizer step runs on this device. */
typedef struct region_bufs {
    int param, grad, opt;
    bool sharded_grad;  /* ZeRO-2/3: `grad` is the device's piece, filled per micro-batch */
    double full_grad;   /* bytes of the whole gradient */
} region_bufs;

/* What lowering one class's list keeps while it walks the class's nodes in launch order. */
typedef struct list_state {
    lowerer *L;
    list_builder B;
    const int32_t *nodes;
    int nn, rep;
    int gb;               /* bytes of a gradient element */
    int64_t nmb;          /* micro-batches (at least 1) */
    region_bufs *rb;      /* per region */
    /* ZeRO-2/3: the whole gradient of (region, micro-batch) (mb_grad_buffer): mb_grad[r * nmb + k],
     * -1 none yet, -2 freed */
    int32_t *mb_grad;
    i32_vec mb_frees;     /* the whole gradients the current reduce-scatter consumed */
    /* a split backward's workspace, from its BI to its BW: bi_work[r * nmb + k], -1 none */
    int32_t *bi_work;
    i32_vec touched;      /* tensors whose last_use or buf_of this list set (reset after it) */
    int embed_region;
} list_state;

/* ZeRO-2/3: the whole gradient of (region, micro-batch), which that micro-batch's backward
 * passes fill and its reduce-scatter consumes (dir_replicate.c): allocated by the first writer,
 * freed after the reduce-scatter. */
static int mb_grad_buffer(list_state *S, int r, int32_t mb, int stream)
{
    if (mb < 0 || mb >= S->nmb) return S->rb[r].grad;
    int32_t *slot = &S->mb_grad[(int64_t)r * S->nmb + mb];
    if (*slot < 0) {
        char name[160];
        snprintf(name, sizeof name, "grad.%s.mb%d", S->L->x->g->regions[r].name, (int)mb);
        *slot = new_buffer(S->L, &S->B, S->rb[r].full_grad, PLAN_MEM_GRAD, PLAN_ROLE_MB_GRADS, r, name);
        emit_mem(&S->B, PLAN_ALLOC, stream, *slot, &S->B.bufs.v[*slot]);
    }
    return *slot;
}

/* Phase 1: each tensor's last use in launch order, and which nodes must record an event: those
 * whose outputs a node on another stream reads, the sources of direct temporal edges across
 * streams, and consumers on other streams than a buffer's last use (so that its free can wait). */
static void note_uses(list_state *S)
{
    lowerer *L = S->L;
    const ir_dag *g = L->x->g;
    for (int i = 0; i < S->nn; i++) {
        int32_t v = S->nodes[i];
        for (int32_t k = g->in_off[v]; k < g->in_off[v + 1]; k++) {
            const ir_edge *ed = &g->edges[g->in_edge[k]];
            if (ed->kind != IR_EDGE_DATA) continue;
            int32_t t = ed->tensor;
            if (L->launch[g->tensors[t].producer] < 0) continue; /* produced elsewhere (SEND->RECV) */
            if (L->last_use[t] < 0) BASE_VEC_PUSH(S->touched, t);
            if (L->last_use[t] < 0 || L->launch[L->last_use[t]] < i) L->last_use[t] = v;
            const ir_node *u = &g->nodes[ed->src];
            if (u->stream != g->nodes[v].stream) L->need_record[ed->src] = 1;
        }
    }
    /* direct temporal edges between two lowered nodes on different streams (an overlapped
     * order group's receive -> compute -> send barrier, dir_order.c) become record/wait like
     * data edges; order edges through ORDER dummies only shape the launch order */
    for (int i = 0; i < S->nn; i++) {
        int32_t v = S->nodes[i];
        for (int32_t k = g->in_off[v]; k < g->in_off[v + 1]; k++) {
            const ir_edge *ed = &g->edges[g->in_edge[k]];
            if (ed->kind == IR_EDGE_TEMPORAL && L->launch[ed->src] >= 0 &&
                g->nodes[ed->src].stream != g->nodes[v].stream)
                L->need_record[ed->src] = 1;
        }
    }
    /* consumers on other streams than the last use must be recorded so the free can wait */
    for (int i = 0; i < S->nn; i++) {
        int32_t v = S->nodes[i];
        for (int32_t k = g->in_off[v]; k < g->in_off[v + 1]; k++) {
            const ir_edge *ed = &g->edges[g->in_edge[k]];
            if (ed->kind != IR_EDGE_DATA) continue;
            int32_t t = ed->tensor, last = L->last_use[t];
            if (last >= 0 && last != v && g->nodes[last].stream != g->nodes[v].stream &&
                tensor_mem(g, t) >= 0)
                L->need_record[v] = 1;
        }
    }
}

/* Phase 2: the persistent state of the regions whose optimizer step runs here: parameters,
 * gradient and optimizer state, ZeRO-sharded, allocated at the start of the step. */
static void alloc_region_state(list_state *S)
{
    lowerer *L = S->L;
    sched_ctx *x = L->x;
    ir_dag *g = x->g;
    const ir_program *prog = x->prog;
    const ir_model *m = g->model;
    int pb = plan_dtype_bytes((plan_dtype)prog->param_dtype);
    double opt_per_param = (prog->optimizer == IR_OPT_ADAMW ? 8.0 : 0.0) +
                           (prog->param_dtype != PLAN_FP32 ? 4.0 : 0.0);
    S->rb = base_xcalloc((size_t)g->nregions, sizeof *S->rb);
    for (int r = 0; r < g->nregions; r++) S->rb[r].param = S->rb[r].grad = S->rb[r].opt = -1;
    S->nmb = g->num_microbatches > 0 ? g->num_microbatches : 1;
    S->mb_grad = base_xmalloc((size_t)(g->nregions * S->nmb + 1) * sizeof *S->mb_grad);
    for (int64_t k = 0; k < g->nregions * S->nmb; k++) S->mb_grad[k] = -1;
    S->bi_work = base_xmalloc((size_t)(g->nregions * S->nmb + 1) * sizeof *S->bi_work);
    for (int64_t k = 0; k < g->nregions * S->nmb; k++) S->bi_work[k] = -1;
    S->embed_region = -1;
    for (int r = 0; r < g->nregions; r++)
        if (g->regions[r].kind == IR_REGION_EMBED) S->embed_region = r;
    for (int i = 0; i < S->nn; i++) {
        int32_t v = S->nodes[i];
        const ir_node *n = &g->nodes[v];
        if (n->op != IR_OP_UPD || n->region < 0) continue;
        ir_shape s = sched_node_shape(x, v);
        double params = (double)ir_region_params_per_device(m, &g->regions[n->region], &s);
        if (n->flags & IR_NODE_TIED) params += (double)ir_model_tied_copy_params_per_device(m, &s);
        int zero = n->dp ? n->dp - 1 : -1;
        double dp = n->dp ? (double)sched_upd_replicas(g, n) : 1.0;
        const char *rn = g->regions[n->region].name;
        region_bufs *R = &S->rb[n->region];
        char name[128];
        snprintf(name, sizeof name, "param.%s", rn);
        R->param = new_buffer(L, &S->B, params * pb / (zero >= 3 ? dp : 1), PLAN_MEM_PARAM,
                              zero >= 3 ? PLAN_ROLE_PARAM_PIECE : PLAN_ROLE_PARAMS, n->region, name);
        snprintf(name, sizeof name, "grad.%s", rn);
        R->grad = new_buffer(L, &S->B, params * S->gb / (zero >= 2 ? dp : 1), PLAN_MEM_GRAD,
                             zero >= 2 ? PLAN_ROLE_GRAD_PIECE : PLAN_ROLE_GRADS, n->region, name);
        R->sharded_grad = zero >= 2;
        R->full_grad = params * S->gb;
        snprintf(name, sizeof name, "opt.%s", rn);
        R->opt = new_buffer(L, &S->B, params * opt_per_param / (zero >= 1 ? dp : 1), PLAN_MEM_OPT,
                            zero >= 1 ? PLAN_ROLE_OPT_PIECE : PLAN_ROLE_OPT, n->region, name);
        for (int k = 0; k < 3; k++) {
            int b = k == 0 ? R->param : k == 1 ? R->grad : R->opt;
            emit_mem(&S->B, PLAN_ALLOC, 0, b, &S->B.bufs.v[b]);
        }
    }
}

/* Step 1 of a node: waits for its inputs made on other streams (one per producer). */
static void emit_input_waits(list_state *S, int32_t v, int s)
{
    const lowerer *L = S->L;
    const ir_dag *g = L->x->g;
    const ir_node *n = &g->nodes[v];
    for (int32_t k = g->in_off[v]; k < g->in_off[v + 1]; k++) {
        const ir_edge *ed = &g->edges[g->in_edge[k]];
        if (ed->kind != IR_EDGE_DATA && ed->kind != IR_EDGE_TEMPORAL) continue;
        int32_t u = ed->src;
        if (L->launch[u] < 0 || g->nodes[u].stream == n->stream || L->event_of[u] < 0) continue;
        bool dup = false;
        for (int32_t q = g->in_off[v]; q < k; q++)
            dup |= g->edges[g->in_edge[q]].src == u;
        if (!dup) emit_wait(&S->B, s, L->event_of[u]);
    }
}

/* Step 2 of a node: the buffers of the tensors it fills, allocated right before it; returns the
 * first (-1 none). */
static int32_t alloc_outputs(list_state *S, int32_t v, int s)
{
    lowerer *L = S->L;
    const ir_dag *g = L->x->g;
    int32_t out_buf = -1;
    for (int32_t k = g->out_off[v]; k < g->out_off[v + 1]; k++) {
        const ir_edge *ed = &g->edges[g->out_edge[k]];
        if (ed->kind != IR_EDGE_DATA || L->buf_of[ed->tensor] >= 0) continue;
        if (g->tensors[ed->tensor].producer != v) continue;
        int mem = tensor_mem(g, ed->tensor);
        if (mem < 0) continue;
        char name[160], suffix[24];
        snprintf(suffix, sizeof suffix, ".t%d", ed->tensor);
        node_buffer_name(g, v, "", suffix, name, sizeof name);
        int b = new_buffer(L, &S->B, g->tensors[ed->tensor].bytes, mem, tensor_role(g, ed->tensor, mem),
                           g->tensors[ed->tensor].region, name);
        L->buf_of[ed->tensor] = b;
        if (L->last_use[ed->tensor] < 0) BASE_VEC_PUSH(S->touched, ed->tensor);
        emit_mem(&S->B, PLAN_ALLOC, s, b, &S->B.bufs.v[b]);
        if (out_buf < 0) out_buf = b;
    }
    return out_buf;
}

/* The compute's workspace (sizes.c: n->bytes): allocated right before it and freed right after,
 * except that a BI's lives until its BW, which reads what BI left there (*inherited). -1 none. */
static int32_t alloc_workspace(list_state *S, int32_t v, int s, bool *inherited)
{
    const ir_dag *g = S->L->x->g;
    const ir_node *n = &g->nodes[v];
    int32_t ws = -1;
    *inherited = false;
    if (IR_OP_INFO[n->op].kind != IR_KIND_COMPUTE || n->region < 0) return -1;
    int64_t key = n->mb >= 0 && n->mb < S->nmb ? (int64_t)n->region * S->nmb + n->mb : -1;
    if (n->op == IR_OP_BW) {
        if (key >= 0 && S->bi_work[key] >= 0) ws = S->bi_work[key], *inherited = true;
        if (key >= 0) S->bi_work[key] = -1;
    } else if (n->bytes > 0) {
        char name[160];
        node_buffer_name(g, v, "work.", "", name, sizeof name);
        ws = new_buffer(S->L, &S->B, n->bytes, PLAN_MEM_WORK, PLAN_ROLE_WORKSPACE, n->region, name);
        emit_mem(&S->B, PLAN_ALLOC, s, ws, &S->B.bufs.v[ws]);
        if (n->op == IR_OP_BI && key >= 0) S->bi_work[key] = ws;
    }
    return ws;
}

/* The buffer of the first input of v made on this device (-1 none). */
static int32_t input_buffer(const list_state *S, int32_t v)
{
    const lowerer *L = S->L;
    const ir_dag *g = L->x->g;
    int32_t in_buf = -1;
    for (int32_t k = g->in_off[v]; k < g->in_off[v + 1] && in_buf < 0; k++) {
        const ir_edge *ed = &g->edges[g->in_edge[k]];
        if (ed->kind == IR_EDGE_DATA && L->launch[ed->src] >= 0) in_buf = L->buf_of[ed->tensor];
    }
    return in_buf;
}

/* Moves the read and written buffer lists into the plan's arena as `in`'s reads and writes. */
static void set_reads_writes(lowerer *L, plan_instr *in, i32_vec *rd, i32_vec *wr)
{
    in->nreads = (int32_t)rd->n;
    in->nwrites = (int32_t)wr->n;
    in->reads = rd->n ? base_arena_calloc(&L->plan->arena, rd->n, sizeof(int32_t)) : NULL;
    in->writes = wr->n ? base_arena_calloc(&L->plan->arena, wr->n, sizeof(int32_t)) : NULL;
    if (rd->n) memcpy(in->reads, rd->v, rd->n * sizeof(int32_t));
    if (wr->n) memcpy(in->writes, wr->v, wr->n * sizeof(int32_t));
    free(rd->v);
    free(wr->v);
}

/* Step 3, a compute: its kernels, TP/EP group slots, and the buffers it reads and writes — its
 * tensors', its region's parameters (and gradient, optimizer state), and its workspace. */
static void lower_compute(list_state *S, int32_t v, plan_instr in, int32_t ws, bool ws_inherited)
{
    lowerer *L = S->L;
    sched_ctx *x = L->x;
    const ir_dag *g = x->g;
    const ir_model *m = g->model;
    const ir_node *n = &g->nodes[v];
    const region_bufs *rb = S->rb;
    int s = in.stream;
    in.op = PLAN_COMPUTE;
    in.pass = (uint8_t)IR_OP_INFO[n->op].pass;
    int ent = sched_node_cost_entry(x->costs, v);
    in.kernels = ent;
    in.kid = ent >= 0 ? L->kid_of_entry[ent] : -1;
    if (n->tp > 1) in.tp_group = slot_of(&S->B, (group_tpl){n->place, -1, IR_CG_TP, n->tp, 1});
    if (n->ep > 1)
        in.ep_group = slot_of(&S->B, (group_tpl){n->place, -1, IR_CG_EP, L->place_tp[n->place], n->ep});
    i32_vec rd = {0}, wr = {0};
    for (int32_t k = g->in_off[v]; k < g->in_off[v + 1]; k++) {
        const ir_edge *ed = &g->edges[g->in_edge[k]];
        if (ed->kind == IR_EDGE_DATA && L->buf_of[ed->tensor] >= 0) BASE_VEC_PUSH(rd, L->buf_of[ed->tensor]);
    }
    if (n->region >= 0 && rb[n->region].param >= 0) {
        BASE_VEC_PUSH(rd, rb[n->region].param);
        if (n->op == IR_OP_UPD)
            BASE_VEC_PUSH(rd, rb[n->region].grad);
        else if ((n->op == IR_OP_B || n->op == IR_OP_BW) && !rb[n->region].sharded_grad)
            BASE_VEC_PUSH(wr, rb[n->region].grad);
        else if (n->op == IR_OP_B || n->op == IR_OP_BW) {
            /* ZeRO-2/3: this micro-batch's whole gradient; with the embedding's token
             * table tied to the head on this device (no copy of its own), the head's
             * backward adds into the embedding's gradient too, so that one is named */
            int r = n->region;
            BASE_VEC_PUSH(wr, mb_grad_buffer(S, r, n->mb, s));
            if (m->tied_embeddings && g->regions[r].kind == IR_REGION_HEAD &&
                S->embed_region >= 0 && rb[S->embed_region].sharded_grad)
                BASE_VEC_PUSH(wr, mb_grad_buffer(S, S->embed_region, n->mb, s));
        }
        if (n->op == IR_OP_UPD) {
            BASE_VEC_PUSH(wr, rb[n->region].param);
            BASE_VEC_PUSH(wr, rb[n->region].opt);
        }
    }
    for (int32_t k = g->out_off[v]; k < g->out_off[v + 1]; k++) {
        const ir_edge *ed = &g->edges[g->out_edge[k]];
        if (ed->kind != IR_EDGE_DATA || L->buf_of[ed->tensor] < 0) continue;
        bool dup = false;
        for (size_t q = 0; q < wr.n; q++) dup |= wr.v[q] == L->buf_of[ed->tensor];
        if (!dup) BASE_VEC_PUSH(wr, L->buf_of[ed->tensor]);
    }
    /* the workspace comes last: a BW reads what its BI wrote there */
    if (ws >= 0 && ws_inherited) BASE_VEC_PUSH(rd, ws);
    else if (ws >= 0) BASE_VEC_PUSH(wr, ws);
    set_reads_writes(L, &in, &rd, &wr);
    BASE_VEC_PUSH(S->B.ins, in);
}

/* Step 3, a send or receive: its peer (position `pos` of the partner's placement), its tag (the
 * send's node) and its buffer. */
static void lower_p2p(list_state *S, int32_t v, plan_instr in, int pos, int32_t in_buf, int32_t out_buf)
{
    const ir_dag *g = S->L->x->g;
    const ir_node *n = &g->nodes[v];
    const ir_node *partner = &g->nodes[n->link];
    const ir_place *pp = &g->places[partner->place];
    in.op = n->op == IR_OP_SEND ? PLAN_SEND : PLAN_RECV;
    in.peer = pp->devs[pos];
    in.tag = n->op == IR_OP_SEND ? v : n->link;
    in.bytes = (int64_t)(n->bytes + 0.5);
    in.buf = n->op == IR_OP_SEND ? in_buf : out_buf;
    in.mem = PLAN_MEM_COMM;
    BASE_VEC_PUSH(S->B.ins, in);
}

/* Step 3, a collective: its group slot, purpose and piece rule, what it reads and writes, and a
 * gradient reduce-scatter's receive buffer, which it returns (-1 none) for the free after it. */
static int32_t lower_coll(list_state *S, int32_t v, plan_instr in, int32_t in_buf, int32_t out_buf)
{
    lowerer *L = S->L;
    const ir_dag *g = L->x->g;
    const ir_model *m = g->model;
    const ir_node *n = &g->nodes[v];
    region_bufs *rb = S->rb;
    const int64_t nmb = S->nmb;
    int s = in.stream;
    int32_t rs_buf = -1;
    in.op = PLAN_COLL;
    in.coll = (uint8_t)IR_OP_INFO[n->op].coll;
    in.purpose = (uint8_t)coll_purpose(g, v);
    in.piece = (uint8_t)coll_piece((plan_purpose)in.purpose, (plan_coll)in.coll);
    /* expert-parallel groups cut across TP: they are formed with the placement's TP */
    int gtp = n->coll_group == IR_CG_EP ? L->place_tp[n->place] : n->tp;
    in.group = slot_of(&S->B, (group_tpl){n->coll_group == IR_CG_WORLD ? -1 : n->place,
                                          n->coll_group == IR_CG_PAIR ? n->peer_place : -1,
                                          n->coll_group, gtp, n->ep});
    in.bytes = (int64_t)(n->bytes + 0.5);
    in.buf = in_buf >= 0 ? in_buf : out_buf;
    in.mem = PLAN_MEM_COMM;
    /* What it reduces or gathers (reads) and where the result goes (writes), so that an
     * executor need not guess: gradients and parameters have no buffers of their own but
     * live in their region's, so a bucket lists each region's gradient buffer, a region's
     * own sum (tied pair, TP sync) its region's. */
    i32_vec rd = {0}, wr = {0};
    for (int32_t k = g->in_off[v]; k < g->in_off[v + 1]; k++) {
        const ir_edge *ed = &g->edges[g->in_edge[k]];
        if (ed->kind != IR_EDGE_DATA) continue;
        int32_t b = L->buf_of[ed->tensor];
        uint8_t tk = g->tensors[ed->tensor].kind;
        int r = n->region >= 0 ? n->region : g->nodes[ed->src].region;
        /* ZeRO-2/3: a micro-batch's reduction reads that micro-batch's whole gradient;
         * its reduce-scatter adds the device's piece into the kept gradient (writes),
         * and that whole gradient is freed after it (emit_frees) */
        if (b < 0 && r >= 0 && tk == IR_T_GRAD && rb[r].sharded_grad && n->mb >= 0 && n->mb < nmb) {
            b = S->mb_grad[(int64_t)r * nmb + n->mb];
            if (b == -2) continue; /* a second tensor of it (BW after BI): listed */
            if (b < 0) b = rb[r].grad; /* cannot happen: the backward comes first */
            else if (in.coll == PLAN_REDUCE_SCATTER) {
                BASE_VEC_PUSH(wr, rb[r].grad);
                BASE_VEC_PUSH(S->mb_frees, b);
                S->mb_grad[(int64_t)r * nmb + n->mb] = -2; /* freed */
            }
        }
        if (b < 0 && r >= 0 && (tk == IR_T_GRAD || tk == IR_T_GRAD_SYNC)) b = rb[r].grad;
        if (b < 0 && r >= 0 && tk == IR_T_PARAM) b = rb[r].param;
        bool dup = b < 0;
        for (size_t q = 0; q < rd.n && !dup; q++) dup = rd.v[q] == b;
        if (!dup) BASE_VEC_PUSH(rd, b);
    }
    /* ZeRO-3's gathers read nothing in the DAG: they gather the region's shard */
    if (!rd.n && n->region >= 0 && rb[n->region].param >= 0 && in.coll == PLAN_ALL_GATHER) {
        BASE_VEC_PUSH(rd, rb[n->region].param);
        /* tied embeddings with the embedding's optimizer step on this device: the head
         * reads the embedding's token table, a ZeRO-3 shard too, so the head's gather
         * carries it after the head's own parameters (sizes.c counts its bytes) */
        if (m->tied_embeddings && (n->flags & IR_NODE_JIT) && g->regions[n->region].kind == IR_REGION_HEAD)
            for (int r = 0; r < g->nregions; r++)
                if (g->regions[r].kind == IR_REGION_EMBED && rb[r].param >= 0) BASE_VEC_PUSH(rd, rb[r].param);
    }
    for (int32_t k = g->out_off[v]; k < g->out_off[v + 1]; k++) {
        const ir_edge *ed = &g->edges[g->out_edge[k]];
        int32_t b = ed->kind == IR_EDGE_DATA ? L->buf_of[ed->tensor] : -1;
        bool dup = b < 0;
        for (size_t q = 0; q < wr.n && !dup; q++) dup = wr.v[q] == b;
        if (!dup) BASE_VEC_PUSH(wr, b);
    }
    /* A gradient reduce-scatter receives the device's piece of every tensor it cuts
     * (pieces of ceil(n / size) elements) into its `buf`, from where the piece is copied
     * into place, or under ZeRO-2/3 added into the kept piece: that receive buffer lives
     * around the collective. */
    if (in.coll == PLAN_REDUCE_SCATTER && (n->flags & IR_NODE_DP_SYNC) && rd.n && S->gb > 0) {
        int32_t *mm = base_xmalloc(((size_t)g->world + 1) * sizeof *mm);
        int size = group_members(L, &S->B.tpls.v[in.group], S->rep, mm);
        free(mm);
        double piece = 0;
        for (size_t q = 0; q < rd.n && size > 0; q++) {
            double el = (double)S->B.bufs.v[rd.v[q]].bytes / S->gb;
            piece += ceil(el / size) * S->gb;
        }
        char name[160];
        node_buffer_name(g, v, "rs.", "", name, sizeof name);
        rs_buf = new_buffer(L, &S->B, piece, PLAN_MEM_COMM, PLAN_ROLE_PIECES, n->region, name);
        emit_mem(&S->B, PLAN_ALLOC, s, rs_buf, &S->B.bufs.v[rs_buf]);
        in.buf = rs_buf;
    }
    set_reads_writes(L, &in, &rd, &wr);
    BASE_VEC_PUSH(S->B.ins, in);
    return rs_buf;
}

/* Steps 4 and 5 of a node: its record for consumers on other streams; then the frees of its
 * workspace, its receive buffer, the whole gradients a reduce-scatter consumed, and every buffer
 * whose last use it was (after waiting for its consumers on other streams). */
static void emit_record_and_frees(list_state *S, int32_t v, int s, int32_t ws, int32_t rs_buf)
{
    lowerer *L = S->L;
    const ir_dag *g = L->x->g;
    const ir_node *n = &g->nodes[v];
    list_builder *B = &S->B;
    if (L->need_record[v]) {
        plan_instr r = blank(s);
        r.op = PLAN_RECORD;
        r.event = B->nevents++;
        L->event_of[v] = r.event;
        BASE_VEC_PUSH(B->ins, r);
    }
    if (ws >= 0 && n->op != IR_OP_BI) emit_mem(B, PLAN_FREE, s, ws, &B->bufs.v[ws]);
    if (rs_buf >= 0) emit_mem(B, PLAN_FREE, s, rs_buf, &B->bufs.v[rs_buf]);
    /* ZeRO-2/3: the micro-batch's whole gradients the reduce-scatter consumed */
    for (size_t q = 0; q < S->mb_frees.n; q++)
        emit_mem(B, PLAN_FREE, s, S->mb_frees.v[q], &B->bufs.v[S->mb_frees.v[q]]);
    S->mb_frees.n = 0;
    for (int pass = 0; pass < 2; pass++) {
        int32_t lo = pass == 0 ? g->in_off[v] : g->out_off[v];
        int32_t hi = pass == 0 ? g->in_off[v + 1] : g->out_off[v + 1];
        for (int32_t k = lo; k < hi; k++) {
            const ir_edge *ed = &g->edges[pass == 0 ? g->in_edge[k] : g->out_edge[k]];
            if (ed->kind != IR_EDGE_DATA) continue;
            int32_t t = ed->tensor;
            int b = L->buf_of[t];
            if (b < 0) continue;
            bool last = pass == 0 ? L->last_use[t] == v
                                  : (g->tensors[t].producer == v && L->last_use[t] < 0);
            if (!last) continue;
            /* wait for consumers on other streams first */
            int32_t prod = g->tensors[t].producer;
            for (int32_t q = g->out_off[prod]; q < g->out_off[prod + 1] && pass == 0; q++) {
                const ir_edge *c2 = &g->edges[g->out_edge[q]];
                if (c2->tensor != t || c2->dst == v || L->launch[c2->dst] < 0) continue;
                if (g->nodes[c2->dst].stream != n->stream && L->event_of[c2->dst] >= 0)
                    emit_wait(B, s, L->event_of[c2->dst]);
            }
            emit_mem(B, PLAN_FREE, s, b, &B->bufs.v[b]);
            L->buf_of[t] = -2; /* freed */
        }
    }
}

/* Phase 3: one node in launch order, steps 1-5. */
static void lower_node(list_state *S, int32_t v)
{
    lowerer *L = S->L;
    const ir_dag *g = L->x->g;
    const ir_node *n = &g->nodes[v];
    ir_op_kind kind = IR_OP_INFO[n->op].kind;
    const ir_place *pl = &g->places[n->place];
    int pos = sched_place_pos(pl, S->rep);
    int peer = kind == IR_KIND_P2P ? g->places[g->nodes[n->link].place].devs[pos] : -1;
    int s = node_stream(L, &S->B, v, S->rep, peer);

    emit_input_waits(S, v, s);
    int32_t out_buf = alloc_outputs(S, v, s);
    bool ws_inherited;
    int32_t ws = alloc_workspace(S, v, s, &ws_inherited), rs_buf = -1;
    int32_t in_buf = input_buffer(S, v);

    plan_instr in = blank(s);
    in.region = n->region;
    in.mb = n->mb;
    in.stage = n->stage;
    if (kind == IR_KIND_COMPUTE) lower_compute(S, v, in, ws, ws_inherited);
    else if (kind == IR_KIND_P2P) lower_p2p(S, v, in, pos, in_buf, out_buf);
    else if (kind == IR_KIND_COLL) rs_buf = lower_coll(S, v, in, in_buf, out_buf);
    emit_record_and_frees(S, v, s, ws, rs_buf);
}

/* Phase 4: the list into the plan's arena, and the representative device `rep` with its group
 * slots; the templates go to *tpls_out for the other devices of the class. Returns the list. */
static int finish_list(list_state *S, group_tpl **tpls_out)
{
    lowerer *L = S->L;
    const ir_dag *g = L->x->g;
    list_builder *B = &S->B;
    plan_list pl;
    memset(&pl, 0, sizeof pl);
    pl.n = (int)B->ins.n;
    pl.ins = base_arena_calloc(&L->plan->arena, B->ins.n ? B->ins.n : 1, sizeof *pl.ins);
    if (B->ins.n) memcpy(pl.ins, B->ins.v, B->ins.n * sizeof *pl.ins);
    pl.nbufs = (int)B->bufs.n;
    pl.bufs = base_arena_calloc(&L->plan->arena, B->bufs.n ? B->bufs.n : 1, sizeof *pl.bufs);
    if (B->bufs.n) memcpy(pl.bufs, B->bufs.v, B->bufs.n * sizeof *pl.bufs);
    pl.nstreams = (int)B->streams.n;
    pl.streams = base_arena_calloc(&L->plan->arena, B->streams.n, sizeof *pl.streams);
    for (size_t i = 0; i < B->streams.n; i++) pl.streams[i] = base_arena_strdup(&L->plan->arena, B->streams.v[i]);
    pl.nevents = B->nevents;
    pl.ngroup_slots = (int)B->tpls.n;
    BASE_VEC_PUSH(L->lists, pl);
    int list_id = (int)L->lists.n - 1;

    plan_device d;
    memset(&d, 0, sizeof d);
    d.id = S->rep;
    d.list = list_id;
    d.peer_offset = 0;
    d.group_slots = base_arena_calloc(&L->plan->arena, B->tpls.n ? B->tpls.n : 1, sizeof(int32_t));
    int32_t *mem = base_xmalloc((size_t)g->world * sizeof *mem);
    for (size_t k = 0; k < B->tpls.n; k++) {
        int nm = group_members(L, &B->tpls.v[k], S->rep, mem);
        d.group_slots[k] = intern_group(L, mem, nm, B->tpls.v[k].cg);
    }
    free(mem);
    /* the other devices of the class map the same templates to their own groups */
    *tpls_out = B->tpls.v;
    L->devices.v[S->rep] = d;
    free(B->ins.v);
    free(B->bufs.v);
    free(B->streams.v);
    return list_id;
}

/* Lower the class of `rep`; returns the list index. */
static int lower_list(lowerer *L, int cls, int rep, group_tpl **tpls_out)
{
    ir_dag *g = L->x->g;
    list_state S;
    memset(&S, 0, sizeof S);
    S.L = L;
    S.nodes = L->o->class_nodes[cls];
    S.nn = L->o->class_nnodes[cls];
    S.rep = rep;
    S.gb = plan_dtype_bytes((plan_dtype)L->x->prog->grad_dtype);
    for (int s = 0; s < g->nstreams; s++) L->stream_map[s] = -1;
    stream_of(L, &S.B, 0); /* compute is stream 0 */
    for (int i = 0; i < S.nn; i++) L->launch[S.nodes[i]] = i;

    note_uses(&S);
    alloc_region_state(&S);
    for (int i = 0; i < S.nn; i++) lower_node(&S, S.nodes[i]);
    free(S.rb);
    free(S.mb_grad);
    free(S.bi_work);
    free(S.mb_frees.v);
    if (!L->opt->no_sendrecv_groups) sendrecv_groups(&S.B);

    /* reset the scratch for the next class */
    for (int i = 0; i < S.nn; i++) {
        L->launch[S.nodes[i]] = -1;
        L->event_of[S.nodes[i]] = -1;
        L->need_record[S.nodes[i]] = 0;
    }
    for (size_t i = 0; i < S.touched.n; i++) {
        L->last_use[S.touched.v[i]] = -1;
        L->buf_of[S.touched.v[i]] = -1;
    }
    free(S.touched.v);
    return finish_list(&S, tpls_out);
}

/* Can `dev` share list `list_id` lowered for `rep` (peers shifted by one constant)? */
static bool can_share(lowerer *L, int cls, int rep, int dev)
{
    ir_dag *g = L->x->g;
    const int32_t *nodes = L->o->class_nodes[cls];
    int off = dev - rep;
    for (int i = 0; i < L->o->class_nnodes[cls]; i++) {
        const ir_node *n = &g->nodes[nodes[i]];
        if (IR_OP_INFO[n->op].kind != IR_KIND_P2P) continue;
        const ir_place *pl = &g->places[n->place], *pp = &g->places[g->nodes[n->link].place];
        int pr = sched_place_pos(pl, rep), pd = sched_place_pos(pl, dev);
        if (pr < 0 || pd < 0 || pp->devs[pd] != pp->devs[pr] + off) return false;
    }
    return true;
}

/* Every buffer and collective of a compiled plan states its role: consumers bind by the roles, so
 * a pass that makes a collective coll_purpose does not know must name it there. */
static int check_roles(const plan_set *plan, base_error *e)
{
    for (int li = 0; li < plan->nlists; li++) {
        const plan_list *pl = &plan->lists[li];
        for (int b = 0; b < pl->nbufs; b++)
            if (pl->bufs[b].role == PLAN_ROLE_NONE)
                return base_errorf(e, "internal error: the lowering gives buffer %s of list %d no role; "
                                      "sched/lower.c's tensor_role must name it", pl->bufs[b].name, li);
        for (int i = 0; i < pl->n; i++)
            if (pl->ins[i].op == PLAN_COLL && pl->ins[i].purpose == PLAN_PURPOSE_NONE)
                return base_errorf(e, "internal error: the lowering gives collective %d of list %d (a %s) "
                                      "no purpose; sched/lower.c's coll_purpose must name it", i, li,
                                   plan_coll_name((plan_coll)pl->ins[i].coll));
    }
    return 0;
}

int sched_lower_plan(sched_ctx *x, const sched_order *o, const sched_options *opt, base_error *e)
{
    ir_dag *g = x->g;
    const ir_program *prog = x->prog;
    plan_set *plan = &x->c->plan;
    lowerer L;
    memset(&L, 0, sizeof L);
    L.x = x;
    L.plan = plan;
    L.o = o;
    L.opt = opt;
    size_t N = g->nnodes, T = g->ntensors;
    L.launch = base_xmalloc(N * sizeof(int32_t));
    L.event_of = base_xmalloc(N * sizeof(int32_t));
    L.need_record = base_xcalloc(N, 1);
    L.buf_of = base_xmalloc(T * sizeof(int32_t));
    L.last_use = base_xmalloc(T * sizeof(int32_t));
    L.stream_map = base_xmalloc((size_t)g->nstreams * sizeof(int32_t));
    uint8_t *in_world = base_xcalloc((size_t)g->world + 1, 1);
    for (size_t v = 0; v < N; v++) {
        const ir_node *n = &g->nodes[v];
        if (n->dead || IR_OP_INFO[n->op].kind != IR_KIND_COLL || n->coll_group != IR_CG_WORLD) continue;
        for (int i = 0; i < g->places[n->place].ndev; i++) in_world[g->places[n->place].devs[i]] = 1;
    }
    L.world = base_xmalloc(((size_t)g->world + 1) * sizeof *L.world);
    for (int d = 0; d < g->world; d++)
        if (in_world[d]) L.world[L.nworld++] = d;
    free(in_world);
    for (size_t i = 0; i < N; i++) L.launch[i] = L.event_of[i] = -1;
    L.place_tp = base_xmalloc((size_t)(g->nplaces ? g->nplaces : 1) * sizeof(int));
    for (int p = 0; p < g->nplaces; p++) L.place_tp[p] = 1;
    for (size_t v = 0; v < N; v++)
        if (!g->nodes[v].dead && g->nodes[v].tp > L.place_tp[g->nodes[v].place])
            L.place_tp[g->nodes[v].place] = g->nodes[v].tp;
    for (size_t i = 0; i < T; i++) L.buf_of[i] = L.last_use[i] = -1;

    /* header */
    plan->param_dtype = (uint8_t)prog->param_dtype;
    plan->act_dtype = (uint8_t)prog->act_dtype;
    plan->grad_dtype = (uint8_t)prog->grad_dtype;
    plan->opt_dtype = (uint8_t)prog->opt_dtype;
    plan->gpu = prog->cluster.gpu;
    plan->gpu.name = base_arena_strdup(&plan->arena, prog->cluster.gpu.name ? prog->cluster.gpu.name : "?");
    /* the network and calibration too, so that a plan is all a simulator needs */
    const ir_cluster *cl = &prog->cluster;
    plan->links = (plan_links){.nvlink_bw = cl->nvlink_bw, .nvlink_latency = cl->nvlink_latency,
                               .nic_bw = cl->nic_bw, .nic_latency = cl->nic_latency,
                               .gpus_per_nic = (int32_t)cl->gpus_per_nic, .gpus_per_node = (int32_t)cl->gpus_per_node,
                               .topology = cl->topology == IR_NET_RAIL ? PLAN_TOPO_RAIL : PLAN_TOPO_FAT_TREE,
                               .oversubscription = cl->oversubscription,
                               .platform = cl->platform_xml ? base_arena_strdup(&plan->arena, cl->platform_xml) : NULL};
    plan->ncalib = cl->ncalib;
    plan->calib = base_arena_calloc(&plan->arena, (size_t)(cl->ncalib ? cl->ncalib : 1), sizeof *plan->calib);
    for (int i = 0; i < cl->ncalib; i++)
        plan->calib[i] = (plan_calib){base_arena_strdup(&plan->arena, cl->calib_names[i]), cl->calib_values[i]};
    const ir_model *m = g->model;
    plan_model *pm = &plan->model;
    pm->name = base_arena_strdup(&plan->arena, m->name ? m->name : "model");
    pm->family = m->family == IR_FAMILY_GPT ? "gpt" : "llama";
    pm->layers = m->layers; pm->hidden = m->hidden; pm->heads = m->heads; pm->kv_heads = m->kv_heads;
    pm->head_dim = m->head_dim; pm->ffn = m->ffn; pm->experts = m->experts; pm->expert_ffn = m->expert_ffn;
    pm->top_k = m->top_k; pm->capacity_factor = m->capacity_factor; pm->vocab = m->vocab; pm->seq = m->seq;
    pm->tied_embeddings = m->tied_embeddings; pm->qk_norm = m->qk_norm; pm->dropout = m->dropout;
    pm->micro_batch = prog->micro_batch;
    pm->num_microbatches = g->num_microbatches;
    pm->global_batch = prog->global_batch;
    plan->nregions = g->nregions;
    plan->regions = base_arena_calloc(&plan->arena, (size_t)g->nregions, sizeof(char *));
    for (int r = 0; r < g->nregions; r++) plan->regions[r] = base_arena_strdup(&plan->arena, g->regions[r].name);

    /* kernel lists and identities from the cost cache */
    int ne = sched_costs_count(x->costs);
    plan->nkernel_lists = ne;
    plan->kernel_lists = base_arena_calloc(&plan->arena, (size_t)(ne ? ne : 1), sizeof *plan->kernel_lists);
    L.kid_of_entry = base_xcalloc((size_t)(ne ? ne : 1), sizeof(int));
    BASE_VEC(const char *) kids = {0};
    for (int i = 0; i < ne; i++) {
        const plan_kernel_list *src = sched_costs_list(x->costs, i);
        plan_kernel_list *dst = &plan->kernel_lists[i];
        dst->n = src->n;
        dst->k = base_arena_calloc(&plan->arena, (size_t)(src->n ? src->n : 1), sizeof *dst->k);
        for (int k = 0; k < src->n; k++) {
            dst->k[k] = src->k[k];
            dst->k[k].name = base_arena_strdup(&plan->arena, src->k[k].name ? src->k[k].name : "kernel");
        }
        const char *kid = sched_costs_kid(x->costs, i);
        int found = -1;
        for (size_t q = 0; q < kids.n && found < 0; q++)
            if (strcmp(kids.v[q], kid) == 0) found = (int)q;
        if (found < 0) {
            BASE_VEC_PUSH(kids, base_arena_strdup(&plan->arena, kid));
            found = (int)kids.n - 1;
        }
        L.kid_of_entry[i] = found;
    }
    plan->nkernel_ids = (int)kids.n;
    plan->kernel_ids = base_arena_calloc(&plan->arena, kids.n ? kids.n : 1, sizeof(char *));
    if (kids.n) memcpy(plan->kernel_ids, kids.v, kids.n * sizeof(char *));
    free(kids.v);

    /* devices */
    int W = g->world;
    L.devices.v = base_xcalloc((size_t)W, sizeof(plan_device));
    L.devices.n = L.devices.cap = (size_t)W;
    bool *done = base_xcalloc((size_t)W, sizeof *done);
    int64_t gpn = prog->cluster.gpus_per_node > 0 ? prog->cluster.gpus_per_node : 1;
    for (int c = 0; c < o->nclasses; c++) {
        for (int d = 0; d < W; d++) {
            if (o->class_of_device[d] != c || done[d]) continue;
            /* lower for d, then let every later device of the class share when it can */
            group_tpl *tp = NULL;
            int list = lower_list(&L, c, d, &tp);
            done[d] = true;
            int32_t *mem = base_xmalloc((size_t)W * sizeof *mem);
            for (int d2 = d + 1; d2 < W; d2++) {
                if (o->class_of_device[d2] != c || done[d2] || !can_share(&L, c, d, d2)) continue;
                plan_device pd;
                memset(&pd, 0, sizeof pd);
                pd.id = d2;
                pd.list = list;
                pd.peer_offset = d2 - d;
                int ns = L.lists.v[list].ngroup_slots;
                pd.group_slots = base_arena_calloc(&plan->arena, (size_t)(ns ? ns : 1), sizeof(int32_t));
                for (int k = 0; k < ns; k++) {
                    int nm = group_members(&L, &tp[k], d2, mem);
                    pd.group_slots[k] = intern_group(&L, mem, nm, tp[k].cg);
                }
                L.devices.v[d2] = pd;
                done[d2] = true;
            }
            free(mem);
            free(tp);
        }
    }
    for (int d = 0; d < W; d++) L.devices.v[d].node = (int)(d / gpn);
    free(done);

    plan->ndevices = W;
    plan->devices = base_arena_calloc(&plan->arena, (size_t)W, sizeof *plan->devices);
    memcpy(plan->devices, L.devices.v, (size_t)W * sizeof *plan->devices);
    plan->nlists = (int)L.lists.n;
    plan->lists = base_arena_calloc(&plan->arena, L.lists.n ? L.lists.n : 1, sizeof *plan->lists);
    if (L.lists.n) memcpy(plan->lists, L.lists.v, L.lists.n * sizeof *plan->lists);
    plan->ngroups = (int)L.groups.n;
    plan->groups = base_arena_calloc(&plan->arena, L.groups.n ? L.groups.n : 1, sizeof *plan->groups);
    if (L.groups.n) memcpy(plan->groups, L.groups.v, L.groups.n * sizeof *plan->groups);

    free(L.devices.v);
    free(L.lists.v);
    free(L.groups.v);
    free(L.launch);
    free(L.event_of);
    free(L.need_record);
    free(L.buf_of);
    free(L.last_use);
    free(L.stream_map);
    free(L.world);
    free(L.kid_of_entry);
    free(L.place_tp);
    return check_roles(plan, e);
}
