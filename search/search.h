/* search.h — the contract of search/, piper-search: the best strategy for a model on a cluster,
 * found by enumerating candidate programs and ranking them in three tiers (docs/search.md):
 *   (a) analytical: divisibility, the schedule builders' preconditions and a lower bound on
 *       each device's memory from the cost model's closed forms (never above the compiled peak);
 *   (b) compile + static check of the survivors: exact peak memory per device, deadlock proof,
 *       and the check's abstract-run makespan as a quick step-time estimate;
 *   (c) the full simulation of the best K by that estimate.
 * Every candidate is a program of the same form as configs/programs/ (search_program_text), so
 * the winner can be written out and compiled or simulated unchanged. */
#ifndef PIPER_SEARCH_H
#define PIPER_SEARCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../base/base.h"
#include "../ir/ir.h"
#include "../plan/plan.h"

/* ---------------------------------------------------------------- the space */

/* The keys of a search space, one row each: X(ID, key, what a value is, doc). The space file's
 * keys, the command-line flags (--KEY), the messages and docs/search.md's table come from it. */
#define SEARCH_KEY_TABLE(X)                                                                      \
    X(TP, "tp", INT, "tensor-parallel degrees (default: every one that fits a node and the model)") \
    X(SP, "sp", BOOL, "sequence parallelism with TP > 1 (default: both)")                       \
    X(PP, "pp", INT, "pipeline ranks (default: every divisor of the GPUs)")                      \
    X(V, "v", INT, "interleaved-1f1b stages per rank (default: every v >= 2 that splits the layers)") \
    X(EP, "ep", INT, "expert-parallel degrees of an MoE model (default: every divisor of DP and the experts)") \
    X(ZERO, "zero", INT, "ZeRO stages 0-3 (default: all; only 0 when DP = 1)")                  \
    X(RECOMPUTE, "recompute", RECOMPUTE, "none, selective, full (default: all)")                \
    X(MBS, "mbs", INT, "micro-batch sizes in sequences (default: every divisor of the global batch)") \
    X(SCHEDULES, "schedules", SCHEDULE, "pipeline schedules (default: every builder; none at PP = 1)")

typedef enum {
#define SEARCH_KEY_ENUM(id, key, kind, doc) SEARCH_KEY_##id,
    SEARCH_KEY_TABLE(SEARCH_KEY_ENUM)
#undef SEARCH_KEY_ENUM
    SEARCH_NKEYS
} search_key;

#define SEARCH_MAX_VALUES 64

/* One key's values: n == 0 means the default, everything piper supports. `file`, `line`, `col`
 * say where they were given (the space file's position, or file = "--tp" and line 0 for a flag),
 * so that an impossible value is reported there. */
typedef struct search_values {
    int n;
    int v[SEARCH_MAX_VALUES];
    const char *file;
    int line, col;
} search_values;

typedef struct search_space {
    search_values key[SEARCH_NKEYS];
} search_space;

const char *search_key_name(search_key k);
const char *search_key_doc(search_key k);
int search_key_of(const char *name);
/* The recompute names (none, selective, full: ir_recompute order) and their parse. */
const char *search_recompute_name(int r);

/* Reads a space file (YAML or JSON map of the keys above, each a value or a list) into *s. */
int search_space_load(search_space *s, const char *path, base_arena *a, base_error *e);
/* A flag's value ("1,2,4") for key k, replacing what the file said. `flag` names it in errors. */
int search_space_set(search_space *s, search_key k, const char *list, const char *flag, base_error *e);
/* --fix KEY=VALUE: one value for one key. */
int search_space_fix(search_space *s, const char *spec, base_error *e);

/* ---------------------------------------------------------------- the problem */

typedef struct search_problem {
    const char *model_path, *cluster_path;
    ir_model model;
    ir_cluster cluster;      /* with --gpus N: the first N devices (nodes or one node's GPUs) */
    const ir_doc *model_doc; /* to point at a model key in errors */
    int64_t gpus;
    int64_t global_batch;
} search_problem;

/* Loads model and cluster, applies --gpus (0: every GPU of the cluster). */
int search_problem_load(search_problem *pb, const char *model_path, const char *cluster_path, int64_t gpus,
                        int64_t global_batch, base_arena *a, base_error *e);
/* Every value the space gives explicitly must be possible on its own for this model and
 * cluster (tp divides the heads, ...); the first that is not is an error located where it was
 * given, or at the model key it contradicts, saying which values would do. */
int search_space_check(const search_space *s, const search_problem *pb, base_error *e);

/* ---------------------------------------------------------------- candidates */

typedef struct search_candidate {
    int tp, pp, dp, ep, zero, mbs;
    bool sp;
    int recompute;       /* ir_recompute */
    int schedule;        /* sched_schedule_* index, -1 without a pipeline */
    int v;               /* program stages per pipeline rank */
    int stages;          /* pp x v */
    int64_t m;           /* micro-batches: global = mbs x m x dp */
    double bound_bytes;  /* tier (a): lower bound of the fullest device's peak */
} search_candidate;

/* Why a candidate is out, one row each: X(ID, name, doc). */
#define SEARCH_REASON_TABLE(X)                                                                   \
    X(OK, "ok", "kept")                                                                          \
    X(INDIVISIBLE, "indivisible", "a degree does not divide the GPUs, layers or batch")          \
    X(PRECONDITION, "precondition", "the schedule's preconditions do not hold")                  \
    X(BOUND, "memory-bound", "tier (a): the memory lower bound exceeds the usable memory")       \
    X(COMPILE, "compile", "tier (b): the compiler refuses the program")                         \
    X(DEADLOCK, "deadlock", "tier (b): the static check finds a deadlock")                      \
    X(OOM, "memory", "tier (b): the compiled peak exceeds the usable memory")                   \
    X(PRUNED, "pruned", "tier (b): not compiled; its step-time lower bound is above the K-th best estimate") \
    X(SIM, "simulation", "tier (c): the simulation failed")

typedef enum {
#define SEARCH_REASON_ENUM(id, name, doc) SEARCH_##id,
    SEARCH_REASON_TABLE(SEARCH_REASON_ENUM)
#undef SEARCH_REASON_ENUM
    SEARCH_NREASONS
} search_reason;

const char *search_reason_name(search_reason r);
const char *search_reason_doc(search_reason r);

/* Tier (a)'s verdict over the whole space: the candidates kept (malloc'd, in enumeration order),
 * the count of every combination looked at per reason, and for each reason an example. */
typedef struct search_enum {
    search_candidate *c;
    int n, cap;
    int64_t considered;
    int64_t count[SEARCH_NREASONS];
    search_candidate nearest_bound;   /* BOUND: the smallest excess over usable memory */
    double nearest_bound_excess;      /* < 0 when none */
    double farthest_bound_excess;     /* the largest excess: how far the space reaches beyond memory */
    char example[SEARCH_NREASONS][256];
} search_enum;

/* Enumerates the space (search_space_check first) and applies tier (a). */
void search_enumerate(const search_space *s, const search_problem *pb, search_enum *out);
void search_enum_free(search_enum *en);

/* Tier (a)'s lower bound of the fullest device's peak memory, in bytes (see bound.c). */
double search_memory_bound(const search_problem *pb, const search_candidate *c);
/* A lower bound of the static check's makespan (the quick step-time estimate of tier b): the
 * busiest pipeline rank's forwards (and whole backwards) of m micro-batches, each kernel at the
 * check's roofline, one after another on the compute stream; 0 for DualPipe (see bound.c). */
double search_time_bound(const search_problem *pb, const search_candidate *c);
/* Usable bytes per device: capacity minus reserve. */
double search_usable_bytes(const search_problem *pb);

/* "TP4 SP PP8 v2 DP32 ZeRO-1 full-recompute mb=1 m=16 interleaved-1f1b" */
const char *search_candidate_str(const search_candidate *c, char *buf, size_t n);

/* The candidate as a program (YAML text, the form of configs/programs/), naming the model and
 * cluster by the paths given. */
void search_program_text(const search_problem *pb, const search_candidate *c, const char *model_ref,
                         const char *cluster_ref, base_buf *out);

/* ---------------------------------------------------------------- tiers (b) and (c) */

/* One candidate's evaluation; plain data so that worker processes can fill it in shared memory. */
typedef struct search_eval {
    search_reason reason;        /* OK, COMPILE, DEADLOCK, OOM or SIM */
    double peak_bytes;           /* tier (b): the fullest device's static peak */
    double at_peak[PLAN_NMEM];   /* its breakdown */
    int peak_device;
    double estimate_seconds;     /* tier (b): the static check's makespan */
    bool simulated;              /* tier (c) ran */
    double step_seconds, tokens_per_second, mfu;
    double sim_peak_bytes;
    char msg[320];               /* the compiler's or simulator's first error */
} search_eval;

/* Tier (b): compiles the candidate in this process and checks it. */
void search_compile_eval(const search_problem *pb, const search_candidate *c, search_eval *ev);
/* Tier (c): compiles and simulates one step (sim/sim.h, with the built-in calibration). */
void search_simulate_eval(const search_problem *pb, const search_candidate *c, search_eval *ev);

/* Runs fn(i) for i in 0..n-1 on `jobs` forked workers (1: in this process); each fills its own
 * slot of a shared array, so the results do not depend on jobs. */
typedef void (*search_job_fn)(void *ctx, int i, search_eval *out);
int search_parallel(int n, int jobs, search_job_fn fn, void *ctx, search_eval *out, base_error *e);

/* ---------------------------------------------------------------- the result */

typedef struct search_result {
    const search_problem *pb;
    const search_enum *en;
    search_eval *eval;           /* per candidate of en (tier b), then (c) for the top */
    int *rank;                   /* candidate indices ranked: simulated by step time, then the rest by estimate */
    int nrank;                   /* candidates that fit (reason OK after tier b) */
    int nsimulated;
    int64_t count[SEARCH_NREASONS]; /* tier (a)'s counts plus tiers (b) and (c) */
    int nearest_oom;             /* tier (b): the candidate that misses memory by least, -1 */
    int farthest_oom;            /* and by most */
    double seconds[3];           /* CPU seconds per tier (not part of deterministic output) */
    int nsim_run;                /* tier (c): simulations run (failed ones included) */
} search_result;

/* Tiers (b) and (c) over en's candidates (search/run.c): compiles and checks them on `jobs`
 * workers, ranks the fitting ones by the check's estimate, simulates the best `top` and ranks
 * those by simulated step time; fills r (free it with search_result_free). With `prune`, a
 * candidate whose step-time lower bound is above the top-th best estimate is not compiled
 * (reason PRUNED): the candidates simulated and their order are those of compiling all. */
int search_run(const search_problem *pb, const search_enum *en, int top, int jobs, bool prune, search_result *r,
               base_error *e);
void search_result_free(search_result *r);
/* CPU seconds of this process and its waited-for children. */
double search_cpu_seconds(void);

void search_report_write(const search_result *r, int top, FILE *f);
void search_json_write(const search_result *r, int top, FILE *f);

#endif
