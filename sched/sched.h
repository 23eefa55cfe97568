/* sched.h — the contract of sched/'s compiler: program -> global DAG -> directives as verified
 * passes -> ordering -> lowering -> one checked plan per device (plan/plan.h has the plan), one
 * table of passes (compile.c).
 * piper-compile is a thin command line over these functions. */
#ifndef PIPER_SCHED_H
#define PIPER_SCHED_H

#include <stdbool.h>
#include <stdio.h>

#include "../base/base.h"
#include "../ir/ir.h"
#include "../plan/plan.h"

typedef struct sched_options {
    bool allow_oom;            /* keep plans whose static peak exceeds usable memory (what-if) */
    bool no_sendrecv_groups;   /* lower without pairing opposite p2p (demonstrates deadlock) */
    bool no_check;             /* skip the static deadlock/memory check (benchmarks only) */
    bool check_all_devices;    /* run the check over every device, not one per replica class */
    bool p2p_per_channel;      /* one stream per peer and direction for sends and receives; the
                                  compiler falls back to it when the single p2p stream could
                                  deadlock (multi-chunk schedules) */
    int64_t micro_batch;       /* > 0: the micro-batch size instead of the program's (a bare
                                  array's is 1); sched_compile applies it after loading */
    int64_t global_batch;      /* > 0: the global batch instead of the program's (a bare array
                                  derives micro x micro-batches x data-parallel degree) */
} sched_options;

/* Everything one compilation makes; freed with sched_compilation_free. */
typedef struct sched_compilation {
    base_arena arena;          /* the DAG and the program live here */
    ir_program prog;
    ir_dag dag;
    plan_set plan;           /* has its own arena, so it can outlive the DAG */
    plan_stats stats;    /* from the static check */
    int64_t dp_degree;         /* data-parallel degree the batch is split over */
    const char *default_schedule; /* set when the compiler chose the pipeline schedule */
    bool p2p_per_channel;      /* the plan uses one p2p stream per peer, direction and flow
                                  (asked for, or derived from the order: compile.c, pass_check) */
    /* Members of overlapped order groups (several filters in one group: an F&B pair): node,
     * group (numbered in order of appearance) and member (the filter it matched, 0-based); the
     * launch order interleaves a group's members at their collectives (ordering.c). Arena-owned. */
    struct sched_overlap_member { int32_t node, group, member; } *overlap;
    size_t noverlap, cap_overlap;
    int32_t noverlap_groups;
    /* The directives as run, with every `schedule` replaced by the orders it expanded into
     * (arena-owned; filled by sched_build_dag). */
    int nexpanded;
    size_t cap_expanded;
    ir_directive *expanded;
    int dump_pass;             /* sched_dump_after: the pass after which to print the IR; -1 */
    FILE *dump_to;
    base_progress *progress;   /* non-NULL: each pass is named on it as it starts (piper-compile's
                                  progress line on a terminal) */
} sched_compilation;

void sched_compilation_init(sched_compilation *c);
void sched_compilation_free(sched_compilation *c);

/* The compiler's passes in the order they run (compile.c's table): their names and what each
 * does; NULL outside 0..sched_pass_count()-1. */
int sched_pass_count(void);
const char *sched_pass_name(int i);
const char *sched_pass_what(int i);
/* piper-compile --dump-after=PASS: once the pass named `pass` has run and been verified, print
 * what it left to f (the DAG as ir_dag_dump_text writes it, the launch order as node ids of that
 * dump, or the plan file) and go on compiling. An unknown name is an error listing the passes. */
int sched_dump_after(sched_compilation *c, const char *pass, FILE *f, base_error *e);

/* Load the program (model/cluster overrides may be NULL). */
int sched_load(sched_compilation *c, const char *program_path, const char *model_path,
               const char *cluster_path, base_error *e);
/* The passes that leave the DAG: build it and run every directive as a pass, verifying after
 * each. */
int sched_build_dag(sched_compilation *c, base_error *e);
/* The passes after them: order, lower to per-device plans and check them (deadlock, memory). */
int sched_lower(sched_compilation *c, const sched_options *o, base_error *e);
/* All three. */
int sched_compile(sched_compilation *c, const char *program_path, const char *model_path,
                  const char *cluster_path, const sched_options *o, base_error *e);

/* --emit-directives: the expanded directives as a JSON array in Piper's schema, one per line
 * (after sched_build_dag). */
int sched_write_directives_json(const sched_compilation *c, FILE *f, base_error *e);
/* --emit-order: the per-rank order of a compiled pipelined program as PyTorch-notation CSV, one
 * row per pipeline rank (after sched_lower). Fails for programs without PP. */
int sched_write_order_csv(const sched_compilation *c, FILE *f, base_error *e);

/* The pipeline schedule builders (schedule.h's SCHED_BUILDER_TABLE), for tools that write
 * programs (piper-search): index 0 .. sched_schedule_count()-1 in table order; the name a
 * `schedule` directive takes; the program's stages per pipeline rank (1; 2 for the V shapes; 0
 * for any v >= 2, interleaved-1f1b's `chunks`); the rank stage s of such a program is placed on
 * with p ranks. DualPipe's program has one stage per rank: the schedule adds its mirror. */
int sched_schedule_count(void);
const char *sched_schedule_name(int i);
int sched_schedule_chunks(int i);
int sched_schedule_rank(int i, int p, int s);
/* Whether the builder can order p ranks, m micro-batches and v stages per rank: runs it (its
 * preconditions are its own), 0 or -1 with why it cannot in why[n]. */
int sched_schedule_check(int i, int p, int m, int v, char *why, size_t n);
/* Whether the builder's program may use tensor parallelism of degree tp, ZeRO stage `zero` and
 * a model with tied embeddings: DualPipe's mirrored pipeline (dualpipe_mirror.c) copies only
 * pipeline, expert and ZeRO-0/1 data parallelism of an untied model, and refuses the rest when
 * it runs; this says so before compiling (piper-search counts it a precondition). 0 or -1 with
 * why in why[n]. */
int sched_schedule_supports(int i, int tp, int zero, bool tied_embeddings, char *why, size_t n);
/* Whether the builder's order for (p, m, v) splits some backward into BI and BW (1), runs only
 * whole backwards (0), or cannot order them (-1); and whether it mirrors the program's stages
 * (DualPipe: each stage also runs as a copy, for half the micro-batches). */
int sched_schedule_splits(int i, int p, int m, int v);
bool sched_schedule_mirrored(int i);
/* The builder's order for (p, m, v) run with per-stage compute times and free communication:
 * stage_seconds[s * PLAN_NPASS + pass] is one micro-batch of stage s's pass (F, B, BI, BW; a
 * recompute folded into B and BI), each rank runs its order one action after another, a
 * forward waits for the previous stage's, a backward for the next stage's and its own forward,
 * BW for its BI. The makespan goes to *out: a lower bound of any plan that follows the order
 * with those compute times on one compute stream. 0, or -1 with why (no builder order, or a
 * mirrored schedule, whose copies this does not model). */
int sched_schedule_makespan(int i, int p, int m, int v, const double *stage_seconds, double *out, char *why,
                            size_t n);
/* The activations the builder's order keeps live on each rank at its fullest: walking rank r's
 * order, a forward of stage s adds stage_bytes[s] (one micro-batch of the program's stage s) and
 * its B or BW removes them; rank_peak[r] is the largest sum on the way (p entries). DualPipe's
 * mirrored stage p+i counts as stage i. The plan allocates an activation when its F starts and
 * frees it when its B or BW ends, so this never exceeds what a compiled rank holds. */
int sched_schedule_live_peak(int i, int p, int m, int v, const double *stage_bytes, double *rank_peak, char *why,
                             size_t n);

/* The summary piper-compile prints: devices, instructions per kind, static peak memory. */
void sched_print_summary(const sched_compilation *c, FILE *f);

#endif
