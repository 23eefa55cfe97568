/* dir_replicate.c — `replicate {filter, devices, zero, bucket_size, reduce_stream,
 * gather_stream}`: data parallelism with ZeRO stages 0-3 (Rajbhandari et al., arXiv 1910.02054).
 *   zero 0: gradients all-reduced per bucket before the optimizer;
 *   zero 1/2: gradients reduce-scattered per bucket, the optimizer updates a 1/N shard, and the
 *             updated parameters are all-gathered (2 also keeps only a gradient shard);
 *   zero 3: as 2, and parameters are sharded too: gathered before every forward and backward of
 *           every micro-batch, freed after use.
 * Under ZeRO-2 and 3 a device keeps only its piece of the gradient, so no buffer can accumulate
 * the whole gradient over micro-batches: each micro-batch's backward fills a transient full-size
 * gradient, and that micro-batch's own reduce-scatter adds its piece into the kept one (as
 * DeepSpeed's stage 2 reduces each micro-batch's gradient). Those reductions are per micro-batch
 * nodes (one per bucket and micro-batch); ZeRO-0/1 reduce the accumulated gradient once per step.
 * Buckets fill in backward order (the order gradients become ready) until they reach
 * bucket_size (default 25 MB, PyTorch DDP's default; 0 = one bucket per region), never spanning
 * placements. */
#include "sched_internal.h"

#include <string.h>


static int32_t tensor_of(const ir_dag *g, int32_t producer, ir_tensor_kind kind)
{
    for (size_t t = 0; t < g->ntensors; t++)
        if (g->tensors[t].producer == producer && g->tensors[t].kind == kind) return (int32_t)t;
    return -1;
}

static int32_t new_sync_node(ir_dag *g, ir_op op, int place, int32_t stage, int stream, int bucket,
                             int tp)
{
    int32_t c = ir_dag_add_node(g, op);
    ir_node *n = &g->nodes[c];
    n->place = place;
    n->stage = stage;
    n->stream = (int16_t)stream;
    n->coll_group = IR_CG_DP;
    n->flags = IR_NODE_DP_SYNC;
    n->bucket = bucket;
    n->pass = PLAN_PASS_AUX;
    n->tp = (int16_t)tp;
    return c;
}

/* ZeRO-3's prefetch limit: the pass a gather's consumer runs, 0 F, 1 R, 2 B; -1 not limited. */
/* The consumer of region r's pass pk (0 F, 1 R, 2 B) for micro-batch mb, -1 if none. */
static int32_t consumer_of(const int32_t *consumer, int64_t nmbs, int r, int pk, int32_t mb)
{
    return consumer[((size_t)r * 3 + (size_t)pk) * (size_t)nmbs + (size_t)mb];
}

/* Whether two recomputes belong to one layer that is recomputed as one (its attention fully). */
static bool same_recomputed_layer(const ir_dag *g, const bool *attn_full, const ir_node *a, const ir_node *b)
{
    return a->layer >= 0 && a->layer == b->layer && a->layer < (g->model->layers > 0 ? g->model->layers : 1) &&
           attn_full[a->layer];
}

static int prefetch_pass(int op)
{
    switch (op) {
    case IR_OP_F: return 0;
    case IR_OP_R: return 1;
    case IR_OP_B: return 2;
    default: return -1;
    }
}

int sched_dir_replicate(sched_ctx *x, const ir_directive *d, base_error *e)
{
    ir_dag *g = x->g;
    ir_directive piper_group;
    d = sched_piper_group(x, d, IR_CG_DP, &piper_group); /* a Piper array's whole group */
    if (x->order_seen)
        return sched_dir_error(d, e, "replicate must come before order and schedule directives; "
                                     "move it up");
    if (d->zero < 0 || d->zero > 3)
        return sched_dir_error(d, e, "zero must be 0, 1, 2 or 3, not %d", d->zero);
    if (d->ndevices < 1)
        return sched_dir_error(d, e, "give devices: one data-parallel group, e.g. [0, 1]");
    for (int i = 0; i < d->ndevices; i++)
        if (d->devices[i] < 0 || d->devices[i] >= g->world)
            return sched_dir_error(d, e, "device %d is outside the cluster's %d devices",
                                   d->devices[i], g->world);
    ir_place own_p = {d->ndevices, d->devices};
    int own = ir_dag_intern_place(g, &own_p);
    bool moved = false;
    int reduce_stream = ir_dag_intern_stream(g, d->reduce_stream ? d->reduce_stream : "dp");
    /* ZeRO-3's gathers feed the computation and must not queue behind the reduce-scatters of
     * the previous micro-batch: a stream of their own by default (FSDP's unshard stream). The
     * parameter all-gather of ZeRO-1/2 follows the optimizer step and shares the "dp" stream. */
    int gather_stream = ir_dag_intern_stream(g, d->gather_stream ? d->gather_stream
                                                : d->zero == 3 ? "gather" : "dp");
    double bucket_cap = d->bucket_bytes; /* 0: every region closes its own bucket */

    /* Mark the nodes; the optimizer steps name the regions whose gradients we synchronise. */
    int matched = 0, cached_place = -1, cached_tp = 1;
    bool *region_upd = base_arena_calloc(&x->scratch, (size_t)g->nregions, sizeof *region_upd);
    int32_t *upd_of = base_arena_calloc(&x->scratch, (size_t)g->nregions, sizeof *upd_of);
    for (size_t v = 0; v < g->nnodes; v++) {
        if (!sched_filter_match(g, (int32_t)v, &d->filter)) continue;
        ir_node *n = &g->nodes[v];
        if (n->op == IR_OP_SEND || n->op == IR_OP_RECV) continue;
        if (n->dp) {
            char lbl[96];
            return sched_dir_error(d, e, "'%s' is already replicated by an earlier directive",
                                   ir_node_label(g, (int32_t)v, lbl, sizeof lbl));
        }
        /* A node on one device is replicated over the group; a node on several devices (after
         * place, with tensor parallelism inside) must be given one of its DP groups. */
        const ir_place *p = &g->places[n->place];
        if (p->ndev == n->tp && n->tp == 1) {
            if (n->place != own) moved = true;
            n->place = own;
        } else if (p->ndev == n->tp) {
            char lbl[96];
            return sched_dir_error(d, e,
                                   "'%s' runs on its tensor-parallel group only; place it on all "
                                   "its devices (TP x DP) before replicating",
                                   ir_node_label(g, (int32_t)v, lbl, sizeof lbl));
        } else if (n->tp == 1 && !(n->flags & IR_NODE_TP)) {
            /* not tensor-parallel, on a TP x DP placement: every TP rank repeats it, and its
             * gradients (if any) are reduced over the whole placement; the devices must still
             * be one DP group of the placement under its TP degree (1 without TP: all of it) */
            if (n->place != cached_place) {
                cached_place = n->place;
                cached_tp = sched_placement_tp(g, n->place);
            }
            if (p->ndev != cached_tp * d->ndevices ||
                sched_check_subgroup(x, d, (int32_t)v, IR_CG_DP, cached_tp, 1, e)) {
                if (!e->set) {
                    char lbl[96];
                    sched_dir_error(d, e,
                                    "'%s' runs on %d devices whose tensor-parallel degree is %d, "
                                    "so they form %d replicas, but %d devices are given; list one "
                                    "device per replica",
                                    ir_node_label(g, (int32_t)v, lbl, sizeof lbl), p->ndev,
                                    cached_tp, p->ndev / cached_tp, d->ndevices);
                }
                return -1;
            }
        } else if (p->ndev != n->tp * d->ndevices ||
                   sched_check_subgroup(x, d, (int32_t)v, IR_CG_DP, n->tp, 1, e)) {
            if (!e->set) {
                char lbl[96];
                sched_dir_error(d, e,
                                "'%s' runs on %d devices with tensor-parallel degree %d, so it "
                                "has %d replicas, but %d devices are given; list one device per "
                                "replica",
                                ir_node_label(g, (int32_t)v, lbl, sizeof lbl), p->ndev, n->tp,
                                p->ndev / n->tp, d->ndevices);
            }
            return -1;
        }
        matched++;
        n->dp = (uint8_t)(d->zero + 1);
        if (n->op == IR_OP_UPD) {
            region_upd[n->region] = true;
            upd_of[n->region] = (int32_t)v;
        }
    }
    if (!matched) {
        return sched_dir_error(d, e, "the filter matches no node; check its tags");
    }
    int nupd = 0;
    for (int r = 0; r < g->nregions; r++) nupd += region_upd[r];
    if (!nupd) {
        return sched_dir_error(d, e, "the filter selects no optimizer step, so there is no "
                                     "gradient to synchronise; filter by PP, LAYER or REGION "
                                     "rather than PASS");
    }
    (void)moved;

    /* Buckets per placement, regions in backward order. A bucket has one reduction per step
     * (ZeRO-0/1), or one per micro-batch (ZeRO-2/3: sync[k] for the micro-batch k; before a
     * split there is only micro-batch 0, and split copies the per-micro-batch reduction). */
    const bool per_mb = d->zero >= 2;
    const int64_t nmb = per_mb && g->num_microbatches > 0 ? g->num_microbatches : 1;
    int32_t *sync = base_arena_calloc(&x->scratch, (size_t)nmb, sizeof *sync);
    int32_t *sync_out = base_arena_calloc(&x->scratch, (size_t)nmb, sizeof *sync_out);
    /* ZeRO-2/3 hold at most two buckets' whole gradients per micro-batch, as DeepSpeed's
     * double-buffered reduction does: the backward that starts bucket j + 2 waits for bucket j's
     * reduce-scatter (a temporal edge), so a network slower than the backward stalls the
     * backward instead of piling up whole gradients. prev1/prev2: the syncs of the last two
     * buckets. Only B passes wait: split weight-gradient passes (BW) follow their schedule. */
    int32_t *prev1 = base_arena_calloc(&x->scratch, (size_t)nmb, sizeof *prev1);
    int32_t *prev2 = base_arena_calloc(&x->scratch, (size_t)nmb, sizeof *prev2);
    BASE_VEC(int32_t) bounded = {0}; /* B nodes of the open bucket already given their wait */
    int nbuckets = 0;
    for (int pl = 0; pl < g->nplaces; pl++) {
        bool open = false;
        for (int64_t k = 0; k < nmb; k++) prev1[k] = prev2[k] = sync[k] = -1;
        int32_t gather = -1;
        double fill = 0;
        bool bucket_experts = false;
        for (int r = g->nregions - 1; r >= 0; r--) {
            if (!region_upd[r] || g->nodes[upd_of[r]].place != pl) continue;
            const int32_t upd_stage = g->nodes[upd_of[r]].stage;
            const int upd_tp = g->nodes[upd_of[r]].tp; /* copied: adding nodes moves g->nodes */
            /* Expert gradients get buckets of their own: under expert parallelism they are
             * reduced only over the ranks holding the same experts (sched_expert_grad_groups). */
            bool experts = g->regions[r].kind == IR_REGION_MOE_EXPERTS;
            if (open && experts != bucket_experts) open = false;
            bucket_experts = experts;
            if (!open) {
                for (int64_t k = 0; k < nmb; k++) {
                    prev2[k] = prev1[k];
                    prev1[k] = sync[k];
                    sync[k] = sync_out[k] = -1;
                }
                bounded.n = 0;
                gather = -1;
                if (d->zero == 1 || d->zero == 2) {
                    gather = new_sync_node(g, IR_OP_ALL_GATHER, pl, upd_stage, gather_stream,
                                           nbuckets, upd_tp);
                    g->nodes[gather].directive = d->index;
                    ir_dag_add_tensor(g, gather, IR_T_PARAM, 0);
                }
                open = true;
                nbuckets++;
                fill = 0;
            }
            /* Gradients flow into the bucket's reduction (of their micro-batch under ZeRO-2/3);
             * its consumers (optimizer, gradient norm) read the reduced gradient instead. */
            size_t ne = g->nedges;
            for (size_t i = 0; i < ne; i++) {
                ir_edge *ed = &g->edges[i];
                if (ed->dead || ed->kind != IR_EDGE_DATA) continue;
                const ir_tensor *t = &g->tensors[ed->tensor];
                if (t->kind != IR_T_GRAD || g->nodes[ed->src].region != r) continue;
                int32_t src = ed->src, tensor = ed->tensor;
                int64_t k = per_mb ? g->nodes[src].mb : 0;
                if (k < 0 || k >= nmb) {
                    char lbl[96];
                    return sched_dir_error(d, e, "'%s' produces a gradient outside the step's "
                                                 "micro-batches; this is a compiler fault",
                                           ir_node_label(g, src, lbl, sizeof lbl));
                }
                if (sync[k] < 0) {
                    sync[k] = new_sync_node(g, d->zero == 0 ? IR_OP_ALL_REDUCE : IR_OP_REDUCE_SCATTER,
                                            pl, upd_stage, reduce_stream, nbuckets - 1, upd_tp);
                    g->nodes[sync[k]].directive = d->index;
                    if (per_mb) {
                        g->nodes[sync[k]].mb = (int32_t)k;
                        g->nodes[sync[k]].flags |= IR_NODE_PER_MB;
                    }
                    sync_out[k] = ir_dag_add_tensor(g, sync[k], IR_T_GRAD_SYNC, 0);
                    ed = &g->edges[i];
                }
                bool linked = false;
                for (size_t j = ne; j < g->nedges; j++)
                    if (g->edges[j].tensor == tensor && g->edges[j].dst == sync[k]) linked = true;
                ed->src = sync[k];
                ed->tensor = sync_out[k];
                if (!linked) ir_dag_add_edge(g, src, sync[k], tensor, IR_EDGE_DATA);
                bool waits = per_mb && prev2[k] >= 0 && g->nodes[src].op == IR_OP_B;
                for (size_t q = 0; q < bounded.n && waits; q++) waits = bounded.v[q] != src;
                if (waits) {
                    SCHED_PUSH(&x->scratch, bounded, src);
                    ir_dag_add_edge(g, prev2[k], src, -1, IR_EDGE_TEMPORAL);
                }
            }
            if (gather >= 0) {
                int32_t param = tensor_of(g, upd_of[r], IR_T_PARAM);
                ir_dag_add_edge(g, upd_of[r], gather, param, IR_EDGE_DATA);
            }
            ir_shape s = sched_node_shape(x, upd_of[r]);
            fill += (double)ir_region_params_per_device(g->model, &g->regions[r], &s) *
                    plan_dtype_bytes((plan_dtype)x->prog->grad_dtype);
            if (fill >= bucket_cap) open = false;
        }
    }

    /* ZeRO-3: gather a region's parameters before each of its forward, recompute and backward
     * passes, per micro-batch; ordering issues each gather just before its consumer. The gather
     * stream would still run ahead of the computation, holding every gathered copy it had made,
     * so prefetching is limited as FSDP's limit_all_gathers and DeepSpeed's prefetch bucket do:
     * the gather for region r's pass waits until the same pass of the region two before it on
     * the chain (r - 2 forward; r + 2 for recomputes and backward passes, which run backwards;
     * same micro-batch and devices) has run, leaving at most the copies of three regions alive.
     * Split weight-gradient passes (BI, BW) follow their schedule and are not limited. */
    if (d->zero == 3) {
        size_t n0 = g->nnodes;
        /* consumer of a gather by (region, pass F/R/B, micro-batch), -1; every micro-batch here,
         * where nmb above counts only those with a reduction of their own */
        const int64_t nmbs = g->num_microbatches > 0 ? g->num_microbatches : 1;
        const size_t nkey = (size_t)g->nregions * 3 * (size_t)nmbs;
        int32_t *consumer = base_arena_calloc(&x->scratch, nkey ? nkey : 1, sizeof *consumer);
        for (size_t k = 0; k < nkey; k++) consumer[k] = -1;
        BASE_VEC(int32_t) gathers = {0};
        for (size_t v = 0; v < n0; v++) {
            ir_node *n = &g->nodes[v];
            if (n->dead || n->region < 0 || !region_upd[n->region]) continue;
            if (IR_OP_INFO[n->op].kind != IR_KIND_COMPUTE || n->op == IR_OP_UPD) continue;
            int32_t c = ir_dag_add_node(g, IR_OP_ALL_GATHER);
            ir_node *cn = &g->nodes[c];
            n = &g->nodes[v];
            *cn = *n;
            cn->op = IR_OP_ALL_GATHER;
            cn->coll_group = IR_CG_DP;
            cn->stream = (int16_t)gather_stream;
            cn->flags = (uint16_t)((n->flags & IR_NODE_PER_MB) | IR_NODE_DP_SYNC | IR_NODE_JIT);
            cn->link = (int32_t)v;
            cn->directive = d->index;
            int32_t t = ir_dag_add_tensor(g, c, IR_T_COMM, 0);
            ir_dag_add_edge(g, c, (int32_t)v, t, IR_EDGE_DATA);
            SCHED_PUSH(&x->scratch, gathers, c);
            int pk = prefetch_pass(g->nodes[v].op);
            int32_t mb = g->nodes[v].mb;
            if (pk >= 0 && mb >= 0 && mb < nmbs)
                consumer[((size_t)g->nodes[v].region * 3 + (size_t)pk) * (size_t)nmbs + (size_t)mb] = (int32_t)v;
        }
        const int nlayers = g->model->layers > 0 ? g->model->layers : 1;
        bool *attn_full = base_arena_calloc(&x->scratch, (size_t)nlayers, sizeof *attn_full);
        for (size_t v = 0; v < n0; v++) {
            const ir_node *n = &g->nodes[v];
            if (!n->dead && n->op == IR_OP_R && n->recompute == IR_RECOMPUTE_FULL && n->layer >= 0 &&
                n->layer < nlayers && g->regions[n->region].kind == IR_REGION_ATTN)
                attn_full[n->layer] = true;
        }
        for (size_t i = 0; i < gathers.n; i++) {
            const ir_node *cn = &g->nodes[gathers.v[i]];
            const ir_node *un = &g->nodes[cn->link];
            int pk = prefetch_pass(un->op);
            if (pk < 0 || un->mb < 0 || un->mb >= nmbs) continue;
            int before = pk == 0 ? un->region - 2 : un->region + 2; /* R and B run backwards */
            int32_t prev = before >= 0 && before < g->nregions ? consumer_of(consumer, nmbs, before, pk, un->mb) : -1;
            /* ...but a layer whose attention is fully recomputed is recomputed as one, its
             * recomputes in the forward's order (dir_recompute.c): inside it the limiter is the
             * recompute two regions back, and a lower layer's recomputes run later, never first */
            if (pk == 1 && prev >= 0 && same_recomputed_layer(g, attn_full, un, &g->nodes[prev])) {
                before = un->region - 2;
                prev = before >= 0 ? consumer_of(consumer, nmbs, before, pk, un->mb) : -1;
                if (prev >= 0 && !same_recomputed_layer(g, attn_full, un, &g->nodes[prev])) prev = -1;
            }
            if (prev < 0 || g->nodes[prev].place != un->place) continue;
            ir_dag_add_edge(g, prev, gathers.v[i], -1, IR_EDGE_TEMPORAL);
        }
    }
    return 0;
}
