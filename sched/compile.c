/* compile.c — the compiler driver. The compiler is the table PASSES below, read top to bottom:
 * each pass takes the IR its predecessor left (the global training DAG, then the launch order,
 * then one plan per device) and the driver runs them in order, verifying after each: ir's DAG
 * verifier while the DAG is the IR, and the plan check, which is itself the last pass, once plans
 * exist. `piper-compile --dump-after=PASS` prints the IR after any of them (sched_dump_after).
 *
 * The program's directives run as two passes, split at the first order or schedule directive:
 * everything before it shapes the DAG (place, replicate, shard, shard_tensor, split, recompute),
 * everything from it on orders it, and between the two the placements are final, so the sends
 * and receives are made there, once. Each directive is still a pass of its own inside its entry
 * (program order, the verifier after each, naming the directive), but the table has two entries
 * rather than one per directive: its rows are the compiler's fixed structure, the same for every
 * program, and the split point is where the p2p pass belongs.
 *
 * Each pass gets a scratch arena (sched_ctx.scratch) that the driver empties after it (and after
 * every directive), so passes allocate their temporary arrays there and return from any error
 * without freeing by hand. */
#include "sched_internal.h"
#include "schedule.h"

#include <stdlib.h>
#include <string.h>

void sched_compilation_init(sched_compilation *c)
{
    memset(c, 0, sizeof *c);
    base_arena_init(&c->arena);
    plan_init(&c->plan);
    c->dump_pass = -1;
}

void sched_compilation_free(sched_compilation *c)
{
    plan_stats_free(&c->stats);
    plan_free(&c->plan);
    base_arena_free(&c->arena);
    memset(c, 0, sizeof *c);
}

int sched_load(sched_compilation *c, const char *program_path, const char *model_path,
               const char *cluster_path, base_error *e)
{
    return ir_program_load(program_path, model_path, cluster_path, &c->arena, &c->prog, e);
}

/* Each directive's pass, named by its row of IR_DIRECTIVE_TABLE (ir/program.h). */
#define SCHED_PASS_DECL(id, name, pass, parse, open, doc, keys) \
    int pass(sched_ctx *x, const ir_directive *d, base_error *e);
IR_DIRECTIVE_TABLE(SCHED_PASS_DECL, )
#undef SCHED_PASS_DECL

static int (*const directive_passes[IR_NDIR])(sched_ctx *, const ir_directive *, base_error *) = {
#define SCHED_PASS_ROW(id, name, pass, parse, open, doc, keys) [IR_DIR_##id] = pass,
    IR_DIRECTIVE_TABLE(SCHED_PASS_ROW, )
#undef SCHED_PASS_ROW
};

static int run_directive(sched_ctx *x, const ir_directive *d, base_error *e)
{
    if ((unsigned)d->op >= IR_NDIR) return sched_dir_error(d, e, "unknown directive");
    return directive_passes[d->op](x, d, e);
}

/* ---------------------------------------------------------------- the compiler */

static int pass_build(sched_ctx *x, base_error *e);
static int pass_directives(sched_ctx *x, base_error *e);
static int pass_mirror(sched_ctx *x, base_error *e);
static int pass_p2p(sched_ctx *x, base_error *e);
static int pass_orders(sched_ctx *x, base_error *e);
static int pass_default_schedule(sched_ctx *x, base_error *e);
static int pass_batch(sched_ctx *x, base_error *e);
static int pass_launch(sched_ctx *x, base_error *e);
static int pass_lower(sched_ctx *x, base_error *e);
static int pass_check(sched_ctx *x, base_error *e);

/* What a pass leaves: the global DAG, the launch order of each device class, or the plans.
 * SCHED_IRS says how each is verified and dumped. */
typedef enum { SCHED_IR_DAG, SCHED_IR_ORDER, SCHED_IR_PLANS } sched_ir;

typedef struct sched_pass {
    const char *name;
    int (*run)(sched_ctx *x, base_error *e);
    sched_ir leaves;
    const char *what;
} sched_pass;

static const sched_pass PASSES[] = {
    {"build", pass_build, SCHED_IR_DAG,
     "the training step's DAG from the model: forward, backward and optimizer step of every "
     "region for one micro-batch, the gradient norm when clipping"},
    {"directives", pass_directives, SCHED_IR_DAG,
     "the directives before the first order or schedule (place, replicate, shard, "
     "shard_tensor, split, recompute), in program order, each verified"},
    {"mirror", pass_mirror, SCHED_IR_DAG,
     "DualPipe (schedule dualpipe, or mirror: true on the first order): stages 0..p-1 copied as "
     "p..2p-1 for the second half of the micro-batches"},
    {"p2p", pass_p2p, SCHED_IR_DAG,
     "placements are final: sends and receives on every edge between placements; "
     "gradient-norm and balancing-loss nodes, tied-embedding sums, TP gradient all-reduces, "
     "expert gradient groups, recompute inputs and SP backward gathers"},
    {"orders", pass_orders, SCHED_IR_DAG,
     "the order and schedule directives, in program order, each verified (a schedule expands "
     "into orders)"},
    {"default-schedule", pass_default_schedule, SCHED_IR_DAG,
     "1F1B for a pipeline that orders nothing"},
    {"batch", pass_batch, SCHED_IR_DAG,
     "every stage has the same data-parallel degree, and micro-batch x micro-batches x "
     "data-parallel degree = the global batch"},
    {"launch", pass_launch, SCHED_IR_ORDER,
     "the launch order of each class of devices with the same placements (ordering.c)"},
    {"lower", pass_lower, SCHED_IR_PLANS,
     "one plan per device: streams, instructions, buffers and events (lower.c)"},
    {"check", pass_check, SCHED_IR_PLANS,
     "the static check: no deadlock, buffers live when used, each device's peak within its "
     "memory; picks the p2p streams (one shared, or one per channel where the shared one deadlocks "
     "or makes the order's unit-cost step longer)"},
};
enum { NPASSES = (int)BASE_COUNT(PASSES) };

int sched_pass_count(void) { return NPASSES; }
const char *sched_pass_name(int i) { return i >= 0 && i < NPASSES ? PASSES[i].name : NULL; }
const char *sched_pass_what(int i) { return i >= 0 && i < NPASSES ? PASSES[i].what : NULL; }

int sched_dump_after(sched_compilation *c, const char *pass, FILE *f, base_error *e)
{
    for (int i = 0; i < NPASSES; i++)
        if (!strcmp(PASSES[i].name, pass)) {
            c->dump_pass = i;
            c->dump_to = f;
            return 0;
        }
    base_buf names = {0};
    for (int i = 0; i < NPASSES; i++) base_buf_printf(&names, "%s%s", i ? ", " : "", PASSES[i].name);
    base_errorf(e, "no compiler pass is named '%s'; name one of %s", pass, names.s);
    base_buf_free(&names);
    return -1;
}

static int verify_dag(sched_ctx *x, const sched_pass *p, base_error *e)
{
    char where[64];
    snprintf(where, sizeof where, "after the %s pass", p->name);
    return ir_dag_verify(x->g, where, e);
}

static int dump_dag(const sched_ctx *x, FILE *f, base_error *e)
{
    (void)e;
    ir_dag_dump_text(x->g, f);
    return 0;
}

/* The launch order as node ids of the DAG's text dump, a block per class of devices. */
static int dump_launch_order(const sched_ctx *x, FILE *f, base_error *e)
{
    (void)e;
    const sched_order *o = &x->order;
    char lbl[96];
    fprintf(f, "# piper launch order: %d device classes\n", o->nclasses);
    for (int k = 0; k < o->nclasses; k++) {
        fprintf(f, "class %d devices", k);
        for (int d = 0, shown = 0; d < x->g->world; d++)
            if (o->class_of_device[d] == k && shown++ < 8) fprintf(f, "%s%d", shown > 1 ? "," : " ", d);
        fprintf(f, ": %d nodes\n", o->class_nnodes[k]);
        for (int i = 0; i < o->class_nnodes[k]; i++) {
            int32_t v = o->class_nodes[k][i];
            fprintf(f, "  n%d %s\n", v, ir_node_label(x->g, v, lbl, sizeof lbl));
        }
    }
    return 0;
}

static int dump_plans(const sched_ctx *x, FILE *f, base_error *e) { return plan_write(&x->c->plan, f, e); }

/* The verifier after a pass, and the dump, by what the pass leaves. The launch order has no
 * verifier of its own: the ordering fails on a cycle itself. The plans' verifier is the check
 * pass, run once: its verdict picks the p2p streams and its statistics are the summary's. */
static const struct {
    int (*verify)(sched_ctx *x, const sched_pass *p, base_error *e);
    int (*dump)(const sched_ctx *x, FILE *f, base_error *e);
} SCHED_IRS[] = {
    [SCHED_IR_DAG] = {verify_dag, dump_dag},
    [SCHED_IR_ORDER] = {NULL, dump_launch_order},
    [SCHED_IR_PLANS] = {NULL, dump_plans},
};

/* The pass scratch, emptied; base_arena_free leaves an arena as base_arena_init makes it. */
static void reset_scratch(sched_ctx *x) { base_arena_free(&x->scratch); }

/* Passes [from, to): each runs, its scratch is emptied, and what it left is verified and, when
 * asked, dumped. */
static int run_passes(sched_ctx *x, int from, int to, base_error *e)
{
    for (int i = from; i < to; i++) {
        const sched_pass *p = &PASSES[i];
        if (x->c->progress) { /* passes differ in length by orders: no percentage, no ETA */
            char what[96];
            snprintf(what, sizeof what, "pass %d of %d: %s", i + 1, NPASSES, p->name);
            base_progress_update(x->c->progress, 0, 0, what);
        }
        int rc = p->run(x, e);
        reset_scratch(x);
        if (rc) return -1;
        if (SCHED_IRS[p->leaves].verify && SCHED_IRS[p->leaves].verify(x, p, e)) return -1;
        if (x->c->dump_pass == i && SCHED_IRS[p->leaves].dump(x, x->c->dump_to, e)) return -1;
    }
    return 0;
}

/* sched_build_dag runs the passes that leave the DAG, sched_lower the rest. */
static int dag_passes(void)
{
    int n = 0;
    while (n < NPASSES && PASSES[n].leaves == SCHED_IR_DAG) n++;
    return n;
}

/* ---------------------------------------------------------------- the passes */

/* Every node that runs on several devices must say how it divides the work: the placement's
 * devices are its tensor-parallel degree (the largest of its nodes') times its replicas, and
 * replicas need a replicate directive. All placements must agree on the replica count, since
 * the global batch is split over it. */
static int pass_batch(sched_ctx *x, base_error *e)
{
    ir_dag *g = x->g;
    int *maxtp = base_xcalloc((size_t)g->nplaces, sizeof *maxtp);
    for (size_t v = 0; v < g->nnodes; v++) {
        const ir_node *n = &g->nodes[v];
        if (!n->dead && n->tp > maxtp[n->place]) maxtp[n->place] = n->tp;
    }
    int64_t dp = 0;
    int rc = 0;
    for (size_t v = 0; v < g->nnodes && !rc; v++) {
        const ir_node *n = &g->nodes[v];
        if (n->dead || IR_OP_INFO[n->op].kind != IR_KIND_COMPUTE || n->region < 0) continue;
        int ndev = g->places[n->place].ndev;
        int64_t reps = ndev / (maxtp[n->place] > 0 ? maxtp[n->place] : 1);
        char lbl[96];
        if (reps > 1 && !n->dp) {
            rc = base_error_at(e, x->prog->file, 0, 0,
                               "'%s' runs on %d devices but only %d of them split it by tensor "
                               "parallelism; add a replicate directive for it (data "
                               "parallelism over the %lld replicas) or a shard_tensor over all "
                               "%d devices",
                               ir_node_label(g, (int32_t)v, lbl, sizeof lbl), ndev, n->tp,
                               (long long)reps, ndev);
        } else if (n->dp && dp && reps != dp) {
            rc = base_error_at(e, x->prog->file, 0, 0,
                               "'%s' is replicated %lld ways while other regions are "
                               "replicated %lld ways; every stage needs the same data-parallel "
                               "degree so that they see the same batch",
                               ir_node_label(g, (int32_t)v, lbl, sizeof lbl), (long long)reps,
                               (long long)dp);
        } else if (n->dp && reps > dp) {
            dp = reps;
        }
    }
    free(maxtp);
    if (rc) return rc;
    x->c->dp_degree = dp > 0 ? dp : 1;
    const ir_program *p = x->prog;
    int64_t want = p->micro_batch * g->num_microbatches * x->c->dp_degree;
    if (p->global_batch != want)
        return base_error_at(e, p->file, p->batch_line, p->batch_col,
                             "the global batch is %lld sequences, but micro-batch %lld x %lld "
                             "micro-batches x data-parallel degree %lld = %lld; change "
                             "batch.global, batch.micro, split's num_microbatches or the replicas",
                             (long long)p->global_batch, (long long)p->micro_batch,
                             (long long)g->num_microbatches, (long long)x->c->dp_degree,
                             (long long)want);
    return 0;
}

/* Does this program have a plain pipeline to give the default schedule: more than one stage,
 * each stage's work on one placement of its own? (Several stages per rank, or stages sharing
 * devices, need a schedule that says how: interleaved, V shapes.) */
static bool default_pipeline(const sched_ctx *x)
{
    const ir_dag *g = x->g;
    int S = (int)(x->prog->ann.npp_ranges ? x->prog->ann.npp_ranges : x->prog->ann.pp_stages);
    if (S < 2) return false;
    int *place_of = base_xmalloc((size_t)S * sizeof *place_of);
    for (int s = 0; s < S; s++) place_of[s] = -1;
    bool ok = true;
    for (size_t v = 0; v < g->nnodes && ok; v++) {
        const ir_node *n = &g->nodes[v];
        if (n->dead || n->op != IR_OP_F || n->stage < 0 || n->stage >= S) continue;
        if (place_of[n->stage] < 0) place_of[n->stage] = n->place;
        ok = place_of[n->stage] == n->place;
    }
    for (int s = 0; s < S && ok; s++) {
        ok = place_of[s] >= 0;
        for (int t = 0; t < s && ok; t++) ok = place_of[t] != place_of[s];
    }
    free(place_of);
    return ok;
}

/* The directives before the first order or schedule directive shape the DAG; the ones from it
 * on order it (ndirectives when nothing is ordered). */
static int first_ordering_directive(const ir_program *p)
{
    for (int i = 0; i < p->ndirectives; i++)
        if (p->directives[i].op == IR_DIR_ORDER || p->directives[i].op == IR_DIR_SCHEDULE) return i;
    return p->ndirectives;
}

static int pass_build(sched_ctx *x, base_error *e)
{
    sched_compilation *c = x->c;
    ir_program *p = &c->prog;
    int world = (int)ir_cluster_devices(&p->cluster);
    if (world < 1) return base_error_at(e, p->file, 0, 0, "the cluster has no devices");
    ir_dag_init(x->g, &c->arena, &p->model, world);
    x->stage_of_region = base_arena_calloc(&c->arena, (size_t)x->g->nregions, sizeof(int32_t));
    ir_program_stage_of_region(p, &c->arena, x->stage_of_region);
    if (ir_dag_build_training_step(x->g, x->stage_of_region, p->ann.ep, p->ann.tp, p->grad_clip > 0, e))
        return -1;
    sched_update_sizes(x);
    return 0;
}

/* Directives [from, to) in program order, each a pass of its own: sizes recomputed, its scratch
 * emptied and the DAG verified after it, an error naming it. */
static int run_directives(sched_ctx *x, int from, int to, base_error *e)
{
    for (int i = from; i < to; i++) {
        const ir_directive *d = &x->prog->directives[i];
        if (d->op == IR_DIR_ORDER && d->mirror && i != x->first_order)
            return sched_dir_error(d, e, "mirror: true must be on the first order or schedule "
                                         "directive (DualPipe's second pipeline is made before "
                                         "any order); move it to the first order");
        int rc = run_directive(x, d, e);
        reset_scratch(x);
        if (rc) return -1;
        if (d->op != IR_DIR_SCHEDULE) sched_expanded_add(x->c, d); /* a schedule adds its orders */
        sched_update_sizes(x);
        char where[512];
        if (ir_dag_verify(x->g, sched_dir_where(d, where, sizeof where), e)) return -1;
    }
    return 0;
}

static int pass_directives(sched_ctx *x, base_error *e) { return run_directives(x, 0, x->first_order, e); }

/* DualPipe's second pipeline is made before the sends and receives that link it. */
static int pass_mirror(sched_ctx *x, base_error *e)
{
    if (x->first_order >= x->prog->ndirectives) return 0;
    const ir_directive *d = &x->prog->directives[x->first_order];
    bool dualpipe = d->op == IR_DIR_SCHEDULE ? d->schedule && sched_kind_of(d->schedule) == SCHED_DUALPIPE
                                             : d->mirror;
    return dualpipe ? sched_dualpipe_mirror(x, d, e) : 0;
}

/* Placements are final: what depends on where every node runs is made here, once. */
static int pass_p2p(sched_ctx *x, base_error *e)
{
    if (sched_settle_aux_nodes(x) || sched_fix_p2p(x, e) || sched_tie_embeddings(x, e) ||
        sched_tp_grad_sync(x, e) || sched_expert_grad_groups(x))
        return -1;
    sched_link_recomputes(x);
    sched_sp_backward_gathers(x);
    sched_update_sizes(x);
    return 0;
}

static int pass_orders(sched_ctx *x, base_error *e)
{
    return run_directives(x, x->first_order, x->prog->ndirectives, e);
}

/* A pipeline that orders nothing gets 1F1B, Megatron-LM's default: the generic list scheduler
 * keeps micro-batches in order, which serialises a pipeline. */
static int pass_default_schedule(sched_ctx *x, base_error *e)
{
    if (x->order_seen || !default_pipeline(x)) return 0;
    ir_directive d;
    memset(&d, 0, sizeof d);
    d.op = IR_DIR_SCHEDULE;
    d.index = x->prog->ndirectives;
    d.file = x->prog->file;
    d.schedule = "1f1b";
    if (sched_dir_schedule(x, &d, e)) {
        base_error_prefix(e, "the default 1F1B schedule for this pipeline failed (write "
                             "an order or schedule directive to choose another): ");
        return -1;
    }
    sched_update_sizes(x);
    x->c->default_schedule = "1f1b";
    return 0;
}

static int pass_launch(sched_ctx *x, base_error *e)
{
    x->costs = sched_costs_new(x); /* the shapes are final now; freed by sched_lower */
    return sched_order_nodes(x, &x->order, e);
}

static int pass_lower(sched_ctx *x, base_error *e) { return sched_lower_plan(x, &x->order, &x->opt, e); }

static int check_memory(sched_compilation *c, const sched_options *o, base_error *e)
{
    const plan_gpu *gpu = &c->plan.gpu;
    double usable = gpu->mem_bytes - gpu->reserve_bytes;
    if (gpu->mem_bytes <= 0) return 0;
    for (int d = 0; d < c->stats.ndevices; d++) {
        const plan_device_stats *s = &c->stats.dev[d];
        if (s->peak_bytes <= usable) continue;
        if (o && o->allow_oom) {
            char a[32], b[32];
            base_warn_at(e, c->prog.file, 0, 0,
                         "device %d needs %s at its peak, more than the %s usable on a %s "
                         "(kept because of --allow-oom)",
                         d, base_fmt_bytes(s->peak_bytes, a, sizeof a), base_fmt_bytes(usable, b, sizeof b),
                         gpu->name);
            return 0;
        }
        char pk[32], us[32], cat[PLAN_NMEM][32];
        for (int k = 0; k < PLAN_NMEM; k++) base_fmt_bytes(s->at_peak[k], cat[k], sizeof cat[k]);
        return base_error_at(e, c->prog.file, 0, 0,
                             "device %d needs %s at its peak but has %s usable (capacity of the "
                             "%s minus reserve): parameters %s, gradients %s, optimizer %s, "
                             "activations %s, communication %s, workspaces %s; shard more (ZeRO, "
                             "TP, PP), recompute activations, use smaller micro-batches, or pass "
                             "--allow-oom to keep the plan for what-if analysis",
                             d, base_fmt_bytes(s->peak_bytes, pk, sizeof pk),
                             base_fmt_bytes(usable, us, sizeof us), gpu->name, cat[PLAN_MEM_PARAM],
                             cat[PLAN_MEM_GRAD], cat[PLAN_MEM_OPT], cat[PLAN_MEM_ACT],
                             cat[PLAN_MEM_COMM], cat[PLAN_MEM_WORK]);
    }
    return 0;
}

/* Keeps the warnings of *e and clears its error. */
static void clear_keeping_warnings(base_error *e)
{
    char warn[BASE_WARN_MAX];
    memcpy(warn, e->warnings, sizeof warn);
    int nwarn = e->nwarn;
    base_error_clear(e);
    memcpy(e->warnings, warn, sizeof warn);
    e->nwarn = nwarn;
}

/* A deadlock under an order file: names, at the file's cell, the action each stuck device cannot
 * get past (the compute its stuck transfer feeds or comes from, found in its list next to the
 * stuck instruction), and the schedule directive, so that the user knows which cells to move.
 * The stuck instructions are the check's (plan_stuck); when none maps to a cell the message is
 * only prefixed with the directive. */
static void locate_order_deadlock(const sched_ctx *x, const plan_stuck *stuck, base_error *e)
{
    const ir_directive *d = NULL;
    for (int i = 0; i < x->prog->ndirectives; i++)
        if (x->prog->directives[i].op == IR_DIR_SCHEDULE && x->prog->directives[i].schedule_file)
            d = &x->prog->directives[i];
    if (!d || !strstr(e->msg, "deadlock")) return;
    sched_table t;
    base_error ig;
    base_error_clear(&ig);
    if (sched_order_csv_read_file(d->schedule_file, &t, &ig)) return;
    const plan_set *p = &x->c->plan;
    char where[1024] = "";
    size_t o = 0;
    for (int j = 0; j < stuck->n && o + 200 < sizeof where; j++) {
        int dev = stuck->at[j].dev, idx = stuck->at[j].instr;
        if (dev < 0 || dev >= p->ndevices) continue;
        const plan_list *L = plan_dev_list(p, dev);
        if (idx < 0 || idx >= L->n) continue;
        const plan_instr *in = &L->ins[idx];
        /* a send comes from the compute before it, a receive feeds the one after it */
        int pass = -1, step = in->op == PLAN_SEND ? -1 : 1;
        for (int round = 0; round < 2 && pass < 0; round++, step = -step)
            for (int k = idx; k >= 0 && k < L->n && pass < 0; k += step)
                if (L->ins[k].op == PLAN_COMPUTE && L->ins[k].stage == in->stage && L->ins[k].mb == in->mb)
                    pass = L->ins[k].pass;
        for (int r = 0; r < t.nranks; r++)
            for (int c = 0; c < t.rows[r].n; c++)
                for (int a = 0; a < t.rows[r].cells[c].n; a++) {
                    const sched_action *A = &t.rows[r].cells[c].a[a];
                    if (A->stage != in->stage || A->mb != in->mb || A->pass != pass) continue;
                    char cs[64];
                    o += (size_t)snprintf(where + o, sizeof where - o, "%s%s:%d:%d: rank %d, column %d ('%s')",
                                          o ? "; " : "", d->schedule_file, t.rows[r].line,
                                          t.rows[r].cells[c].text_col, r, t.rows[r].cells[c].col,
                                          sched_cell_str(&t.rows[r].cells[c], cs, sizeof cs));
                }
    }
    sched_table_free(&t);
    char msg[BASE_ERROR_MAX];
    snprintf(msg, sizeof msg, "%s", e->msg);
    base_error_clear(e);
    if (o)
        sched_dir_error(d, e, "the order file %s deadlocks: the stuck actions are %s; reorder those "
                              "cells so that each rank receives in the order its neighbour sends. %s",
                        d->schedule_file, where, msg);
    else
        sched_dir_error(d, e, "the order file %s deadlocks; %s", d->schedule_file, msg);
}

/* The plans' verifier, as the last pass: it runs once, because its verdict picks the p2p streams
 * and its statistics (peak memory) are what the summary and the memory limit read.
 *
 * The p2p streams follow from the order by one rule: the plan is lowered with one shared p2p
 * stream per device (what a 1F1B runtime has: sendrecv pairs, which a blocking host can follow)
 * and with one stream per peer, direction and flow (activations vs gradients: "p2p.send+1.F"),
 * and the channels are kept when the shared stream deadlocks, or when they make the order's step
 * shorter under unit costs (plan_unit_makespan: what the order costs, whatever the model's sizes),
 * i.e. when a transfer whose partner is ready would queue behind one whose partner is not
 * (interleaved and ZB-V at m = p, ZB-H2's sends ahead). Ties keep the shared stream, whose
 * sendrecv pairs a blocking host can follow. `--p2p-per-channel` asks for the channels outright;
 * `--no-sendrecv-groups` keeps the shared stream (so that its 1F1B deadlock stays visible). */
static int pass_check(sched_ctx *x, base_error *e)
{
    sched_compilation *c = x->c;
    const sched_options *o = &x->opt;
    if (o->no_check) return 0;
    plan_stuck stuck;
    plan_check_opts co = {.all_devices = o->check_all_devices, .stuck = &stuck};
    int rc = plan_check_opt(&c->plan, &co, &c->stats, e);
    co.stuck = NULL; /* the shared stream's deadlock is the one reported */
    if (o->p2p_per_channel || o->no_sendrecv_groups || (rc && !strstr(e->msg, "deadlock"))) {
        if (rc) {
            base_error_prefix(e, "the plan cannot run: ");
            locate_order_deadlock(x, &stuck, e);
        }
        return rc ? -1 : check_memory(c, o, e);
    }
    bool p2p = false; /* without transfers there is no stream to choose */
    for (int l = 0; l < c->plan.nlists && !p2p; l++)
        for (int i = 0; i < c->plan.lists[l].n && !p2p; i++)
            p2p = c->plan.lists[l].ins[i].op == PLAN_SEND || c->plan.lists[l].ins[i].op == PLAN_RECV;
    if (!p2p) return rc ? -1 : check_memory(c, o, e);
    plan_set shared = c->plan;
    plan_stats shared_st = c->stats;
    plan_init(&c->plan);
    memset(&c->stats, 0, sizeof c->stats);
    base_error again;
    base_error_clear(&again);
    sched_options o2 = *o;
    o2.p2p_per_channel = true;
    /* the channels' unit makespan first: it is a run of the check too, and fails when they
     * deadlock, so the full check (for the statistics) runs only on channels that are kept */
    bool channels = sched_lower_plan(x, &x->order, &o2, &again) == 0;
    if (channels && !rc) {
        double ch = plan_unit_makespan_opt(&c->plan, &co);
        channels = ch >= 0 && ch < plan_unit_makespan_opt(&shared, &co) - 1e-9;
    }
    if (channels) channels = plan_check_opt(&c->plan, &co, &c->stats, &again) == 0;
    if (channels) {
        plan_free(&shared);
        plan_stats_free(&shared_st);
        clear_keeping_warnings(e);
        c->p2p_per_channel = true;
        return check_memory(c, o, e);
    }
    plan_stats_free(&c->stats);
    plan_free(&c->plan);
    c->plan = shared;
    c->stats = shared_st;
    if (rc) {
        base_error_prefix(e, "the plan cannot run: ");
        locate_order_deadlock(x, &stuck, e);
        return -1;
    }
    return check_memory(c, o, e);
}

static void ctx_init(sched_ctx *x, sched_compilation *c)
{
    memset(x, 0, sizeof *x);
    x->c = c;
    x->prog = &c->prog;
    x->g = &c->dag;
    x->a = &c->arena;
    base_arena_init(&x->scratch);
}

int sched_build_dag(sched_compilation *c, base_error *e)
{
    sched_ctx x;
    ctx_init(&x, c);
    x.first_order = first_ordering_directive(&c->prog);
    return run_passes(&x, 0, dag_passes(), e);
}

int sched_lower(sched_compilation *c, const sched_options *o, base_error *e)
{
    static const sched_options defaults;
    sched_ctx x;
    ctx_init(&x, c);
    x.opt = o ? *o : defaults;
    if (x.opt.p2p_per_channel) c->p2p_per_channel = true;
    int rc = run_passes(&x, dag_passes(), NPASSES, e);
    sched_costs_free(x.costs);
    return rc;
}

int sched_compile(sched_compilation *c, const char *program_path, const char *model_path,
                  const char *cluster_path, const sched_options *o, base_error *e)
{
    if (sched_load(c, program_path, model_path, cluster_path, e)) return -1;
    if (o && (o->micro_batch || o->global_batch) &&
        ir_program_set_batch(&c->prog, o->micro_batch, o->global_batch, e))
        return -1;
    if (sched_build_dag(c, e)) return -1;
    return sched_lower(c, o, e);
}

void sched_print_summary(const sched_compilation *c, FILE *f)
{
    const plan_set *p = &c->plan;
    const ir_program *prog = &c->prog;
    fprintf(f, "piper plan: %s on %d x %s (%lld nodes x %lld GPUs)\n",
            p->model.name, p->ndevices, p->gpu.name, (long long)prog->cluster.nodes,
            (long long)prog->cluster.gpus_per_node);
    fprintf(f, "  batch %lld sequences = micro-batch %lld x %lld micro-batches x data-parallel %lld\n",
            (long long)prog->global_batch, (long long)prog->micro_batch,
            (long long)c->dag.num_microbatches, (long long)c->dp_degree);
    fprintf(f, "  DAG %d nodes; %d distinct instruction lists; %d communication groups\n",
            ir_dag_live_nodes(&c->dag), p->nlists, p->ngroups);
    if (c->p2p_per_channel)
        fprintf(f, "  p2p: one stream per peer, direction and flow (asked for, or the order runs faster "
                   "or only so than on one shared p2p stream)\n");
    base_error why;
    base_error_clear(&why);
    /* the host's verdict is a run of the check: not for a plan compiled with --no-check */
    unsigned host = c->stats.ndevices ? plan_host_blocks(p, &why) : PLAN_BLOCK_ALL;
    if (host != PLAN_BLOCK_ALL)
        fprintf(f, "  host: a host that blocks at every sync point (p2p, norm, batch) cannot run this plan, so "
                   "runtimes keep only%s%s%s%s: %s\n", host & PLAN_BLOCK_NORM ? " norm" : "",
                host & PLAN_BLOCK_BATCH ? " batch" : "", host ? "" : " none", host ? "" : " (asynchronous p2p)",
                why.msg);
    if (c->default_schedule)
        fprintf(f, "  schedule: %s (the default for a pipeline without order directives)\n",
                c->default_schedule);
    /* the columns' groups: instruction counts by kind, then the static check's peak and what
     * made it up at that moment */
    fprintf(f, "\n  %-6s %-50s  %11s  %s\n", "", "instructions in the plan, by kind", "static",
            "memory at the peak, by category");
    fprintf(f, "  %-6s %8s %6s %6s %6s %6s %6s %6s  %11s  %s\n", "device", "compute", "send",
            "recv", "coll", "wait", "alloc", "free", "peak memory",
            "params / grads / optimizer / activations / comm / workspace");
    for (int d = 0; d < p->ndevices; d++) {
        if (d >= 16 && d < p->ndevices - 4) {
            if (d == 16) fprintf(f, "  ... (%d more devices)\n", p->ndevices - 20);
            continue;
        }
        const plan_device_stats *s = c->stats.ndevices ? &c->stats.dev[d] : NULL;
        if (!s) {
            fprintf(f, "  %-6d (not checked)\n", d);
            continue;
        }
        char pk[32], cat[PLAN_NMEM][32];
        for (int k = 0; k < PLAN_NMEM; k++) base_fmt_bytes(s->at_peak[k], cat[k], sizeof cat[k]);
        fprintf(f, "  %-6d %8lld %6lld %6lld %6lld %6lld %6lld %6lld  %11s  %s / %s / %s / %s / %s / %s\n", d,
                (long long)s->count_by_op[PLAN_COMPUTE], (long long)s->count_by_op[PLAN_SEND],
                (long long)s->count_by_op[PLAN_RECV], (long long)s->count_by_op[PLAN_COLL],
                (long long)s->count_by_op[PLAN_WAIT], (long long)s->count_by_op[PLAN_ALLOC],
                (long long)s->count_by_op[PLAN_FREE], base_fmt_bytes(s->peak_bytes, pk, sizeof pk),
                cat[PLAN_MEM_PARAM], cat[PLAN_MEM_GRAD], cat[PLAN_MEM_OPT], cat[PLAN_MEM_ACT],
                cat[PLAN_MEM_COMM], cat[PLAN_MEM_WORK]);
    }
    char cap[32], res[32];
    fprintf(f, "\n  usable memory per %s: %s (capacity) - %s (reserve)\n", p->gpu.name,
            base_fmt_bytes(p->gpu.mem_bytes, cap, sizeof cap),
            base_fmt_bytes(p->gpu.reserve_bytes, res, sizeof res));
}
