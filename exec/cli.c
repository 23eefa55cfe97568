/* cli.c — the command-line options and step reporting piper-exec and piper-exec-cuda share
 * (cli.h). */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void exec_cli_defaults(exec_cli_common *c)
{
    memset(c, 0, sizeof *c);
    c->steps = 5;
    c->seed = 1;
    c->timeout_s = 300;
    c->grad_clip = 1.0;
    c->optim.kind = EXEC_ADAMW;
    c->optim.lr = -1;
    c->optim.beta1 = 0.9;
    c->optim.beta2 = 0.95;
    c->optim.eps = 1e-8;
    c->optim.weight_decay = 0.1;
}

static int parse_optimizer(const char *v, void *dst, char *why, size_t n)
{
    exec_optim *o = dst;
    if (strcmp(v, "adamw") == 0)
        o->kind = EXEC_ADAMW;
    else if (strcmp(v, "sgd") == 0)
        o->kind = EXEC_SGD;
    else {
        snprintf(why, n, "'%s' is not an optimizer; write adamw or sgd", v);
        return -1;
    }
    return 0;
}

/* The options both drivers take, one row each (base_opt, base.h): the ranges are what the
 * optimizer and the loop can use (a learning rate of 0 trains nothing, beta = 1 never forgets,
 * eps = 0 divides by zero). Integers are read exactly (base_parse_i64/u64), never through a
 * double; a seed takes all 64 bits. */
void exec_cli_rows(exec_cli_common *c, base_opt *rows, size_t *n)
{
    const base_opt common[] = {
        {.kind = BASE_OPT_GROUP, .help = "training"},
        {BASE_OPT_INT, "steps", 0, "K", &c->steps, .lo = 1, .hi = EXEC_CLI_MAX_STEPS,
         .want = "a whole number of steps from 1 to 1000000", .help = "training steps", .def = "5"},
        {BASE_OPT_U64, "seed", 0, "S", &c->seed, .given = &c->seed_given,
         .help = "initialisation, data and dropout seed, a whole number from 0 to 2^64-1, read exactly",
         .def = "1"},
        {BASE_OPT_CALL, "optimizer", 0, "adamw|sgd", &c->optim, .parse = parse_optimizer, .help = "the optimizer",
         .def = "adamw"},
        {BASE_OPT_DOUBLE, "lr", 0, "X", &c->optim.lr, .range = {0, HUGE_VAL, 1, 0}, .want = "a learning rate > 0",
         .help = "learning rate, finite and > 0", .def = "1e-3 for AdamW, 0.1 for SGD"},
        {BASE_OPT_DOUBLE, "weight-decay", 0, "X", &c->optim.weight_decay, .range = {0, HUGE_VAL, 0, 0},
         .want = "a number >= 0", .help = "decoupled weight decay of matrices, >= 0", .def = "0.1"},
        {BASE_OPT_DOUBLE, "beta1", 0, "X", &c->optim.beta1, .range = {0, 1, 0, 1},
         .want = "a number in [0, 1), e.g. 0.9", .help = "AdamW's first beta, in [0, 1)", .def = "0.9"},
        {BASE_OPT_DOUBLE, "beta2", 0, "X", &c->optim.beta2, .range = {0, 1, 0, 1},
         .want = "a number in [0, 1), e.g. 0.95", .help = "AdamW's second beta, in [0, 1)", .def = "0.95"},
        {BASE_OPT_DOUBLE, "eps", 0, "X", &c->optim.eps, .range = {0, HUGE_VAL, 1, 0},
         .want = "a number > 0, e.g. 1e-8", .help = "AdamW's epsilon, > 0", .def = "1e-8"},
        {BASE_OPT_DOUBLE, "grad-clip", 0, "X", &c->grad_clip, .range = {0, HUGE_VAL, 0, 0}, .want = "a norm >= 0",
         .help = "clip to this global norm when the plan computes it, >= 0", .def = "1"},
        {.kind = BASE_OPT_GROUP, .help = "the run"},
        {BASE_OPT_FLAG, "no-check", 0, NULL, &c->no_check,
         .help = "run a plan that fails the static check (plan_check: deadlock, transfers whose two sides "
         "disagree, buffers used when not live), which is otherwise refused before the first step"},
        {BASE_OPT_DOUBLE, "timeout", 0, "SEC", &c->timeout_s, .range = {0, HUGE_VAL, 0, 0},
         .want = "seconds, a number >= 0 (0 disables the watchdog)",
         .help = "watchdog: fail when communication makes no progress for SEC seconds; 0 disables",
         .def = "300"},
        {BASE_OPT_FLAG, "memory", 0, NULL, &c->memory,
         .help = "each rank prints its buffers' bytes by category, as the plan sizes them and as the executor "
         "holds them, and after the last step its peak next to the plan's"},
        {BASE_OPT_FLAG, "quiet", 'q', NULL, &c->quiet, .help = "print only the per-step lines"},
    };
    for (size_t k = 0; k < BASE_COUNT(common); k++) rows[(*n)++] = common[k];
}

int exec_cli_finish(exec_cli_common *c, const char *prog, int npos, const char **pos, base_error *e)
{
    if (npos > 1) return base_errorf(e, "two plans given (%s and %s); %s runs one", pos[0], pos[1], prog);
    if (npos < 1) return base_errorf(e, "no plan given; see %s --help", prog);
    c->plan = pos[0];
    if (c->optim.lr < 0) c->optim.lr = c->optim.kind == EXEC_SGD ? 0.1 : 1e-3;
    return 0;
}

int exec_cli_check_plan(const plan_set *p, const exec_cli_common *c, base_error *e)
{
    if (c->no_check) return 0;
    plan_stats st;
    if (plan_check(p, &st, e) == 0) {
        plan_stats_free(&st);
        return 0;
    }
    base_error_prefix(e, "%s: the plan fails the static check: ", c->plan);
    size_t n = strlen(e->msg);
    snprintf(e->msg + n, sizeof e->msg - n, "%s",
             " (recompile the program with piper-compile, which checks what it writes, or pass "
             "--no-check to run the plan as it is)");
    return -1;
}

int exec_cli_check_ranks(const plan_set *p, int size, base_error *e)
{
    if (size > p->ndevices)
        return base_errorf(e, "%d ranks run but the plan has %d devices; start at most %d ranks",
                           size, p->ndevices, p->ndevices);
    for (int d = size; d < p->ndevices; d++)
        if (plan_dev_list(p, d)->n > 0)
            return base_errorf(e, "device %d of the plan has work but only %d ranks run; start "
                                  "one rank per device (mpirun -np %d)",
                               d, size, d + 1);
    return 0;
}

double exec_cli_plan_flops(const plan_set *p, int ndevices)
{
    double flops = 0;
    for (int d = 0; d < ndevices; d++) {
        const plan_list *L = plan_dev_list(p, d);
        for (int i = 0; i < L->n; i++)
            if (L->ins[i].op == PLAN_COMPUTE && L->ins[i].kernels >= 0) {
                const plan_kernel_list *kl = &p->kernel_lists[L->ins[i].kernels];
                for (int k = 0; k < kl->n; k++) flops += kl->k[k].flops;
            }
    }
    return flops;
}

void exec_cli_step_reduce(const double *all, int size, int nv, double *ce, double *aux,
                          double *norm, double *t)
{
    *ce = *aux = *t = 0;
    *norm = -1;
    for (int k = 0; k < size; k++) {
        *ce += all[k * nv + 0];
        *aux += all[k * nv + 1];
        if (all[k * nv + 2] > *norm) *norm = all[k * nv + 2];
        if (all[k * nv + 3] > *t) *t = all[k * nv + 3];
    }
}

void exec_cli_norm_text(double norm, char *buf, size_t n)
{
    if (norm >= 0)
        snprintf(buf, n, "%.6f", sqrt(norm));
    else
        snprintf(buf, n, "-");
}
