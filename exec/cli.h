/* cli.h — what piper-exec (exec/piper_exec.c, the CPU executor) and piper-exec-cuda
 * (exec/cuda/piper_exec_cuda.c) share on their command lines and in their reports: the training
 * options both take (steps, seed, optimizer, watchdog, log, trace, ...) with the same defaults
 * and messages, the check that the ranks started fit the plan's devices, the arithmetic of a
 * step by the plan's kernel lists, and the reduction of every rank's step figures. Kept in one
 * place so that the two drivers read a command line and a plan the same way; what only one
 * backend has (--dtype, --data, checkpoints; --gpu, --check) stays in its driver. */
#ifndef PIPER_EXEC_CLI_H
#define PIPER_EXEC_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/base.h"
#include "../plan/plan.h"
#include "model.h"

typedef struct exec_cli_common {
    const char *plan, *log, *trace;
    int64_t steps;
    uint64_t seed;
    bool seed_given, quiet, memory;
    bool no_check;          /* --no-check: run a plan that fails the static check */
    double timeout_s, grad_clip;
    exec_optim optim;
} exec_cli_common;

/* The defaults: 5 steps, seed 1, AdamW (0.9, 0.95, 1e-8, weight decay 0.1; lr by
 * exec_cli_finish), clipping at 1, a 300 s watchdog. */
void exec_cli_defaults(exec_cli_common *c);

/* The most --steps one run takes: rank 0 keeps each step's time for the report. */
#define EXEC_CLI_MAX_STEPS 1000000

/* The rows of the options both drivers take (base_opt, base.h; docs/cli.md), appended to a
 * driver's table at rows[*n] (room for EXEC_CLI_NROWS more); each writes into c. A driver adds
 * its own rows (--log and --trace, whose files differ, and what only it has). */
#define EXEC_CLI_NROWS 16
void exec_cli_rows(exec_cli_common *c, base_opt *rows, size_t *n);
/* After base_cli_parse: exactly one plan among the arguments; the learning rate defaults by
 * optimizer. */
int exec_cli_finish(exec_cli_common *c, const char *prog, int npos, const char **pos, base_error *e);

/* The static check (plan_check) of the plan read from c->plan, unless --no-check: a plan that
 * could deadlock, whose two sides of a transfer disagree, or whose buffers are used when not
 * live is refused before anything runs, naming the file and the instruction. */
int exec_cli_check_plan(const plan_set *p, const exec_cli_common *c, base_error *e);

/* `size` ranks for the plan: at most one per device, and every device with work has one. */
int exec_cli_check_ranks(const plan_set *p, int size, base_error *e);

/* The arithmetic of a step on devices [0, ndevices) by the plan's kernel lists (GEMMs exact). */
double exec_cli_plan_flops(const plan_set *p, int ndevices);

/* Every rank's step figures, `nv` doubles a rank starting with (loss, aux loss, squared gradient
 * norm or -1, seconds): the summed cross-entropy and aux loss, the largest norm, the slowest
 * rank's time. */
void exec_cli_step_reduce(const double *all, int size, int nv, double *ce, double *aux,
                          double *norm, double *t);

/* The gradient norm for the per-step line ("-" when the plan computes none). */
void exec_cli_norm_text(double norm, char *buf, size_t n);

static inline double exec_cli_mib(double bytes) { return bytes / (1024.0 * 1024.0); }

#endif
