/* cli.c — the command-line options and step reporting piper-exec and piper-exec-cuda share
 * (cli.h). */
#include "cli.h"

#include <errno.h>
#include <stddef.h>
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

const char *exec_cli_value(int argc, char **argv, int *i, base_error *e)
{
    if (*i + 1 >= argc) {
        base_errorf(e, "%s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

/* One option's value through base/'s number rules, as "--lr: 'inf' is not a finite number;
 * write ..." when it breaks them. */
static int bad_value(base_error *e, const char *opt, const char *v, const char *why, const char *want)
{
    return base_errorf(e, "%s: '%s' %s; write %s", opt, v, why, want);
}

int exec_cli_int(int argc, char **argv, int *i, int64_t lo, int64_t hi, int64_t *v, base_error *e)
{
    const char *s = argv[*i];
    const char *t = exec_cli_value(argc, argv, i, e);
    if (!t) return -1;
    char why[128], want[96];
    if (base_parse_i64(t, lo, hi, v, why, sizeof why)) {
        snprintf(want, sizeof want, "a whole number from %lld to %lld", (long long)lo, (long long)hi);
        return bad_value(e, s, t, why, want);
    }
    return 0;
}

/* The numeric options, one row each: its range (what the optimizer and the loop can use: a
 * learning rate of 0 trains nothing, beta = 1 never forgets, eps = 0 divides by zero) and where
 * it goes. Integers are read exactly (base_parse_i64/u64), never through a double; a seed takes
 * all 64 bits, so its row states no range. */
enum { NUM_REAL, NUM_STEPS, NUM_SEED };
static const struct {
    const char *name, *what;
    int kind;
    base_range r;
    size_t off;
} cli_nums[] = {
    {"--steps", "a whole number of steps", NUM_STEPS, {1, EXEC_CLI_MAX_STEPS, 0, 0}, offsetof(exec_cli_common, steps)},
    {"--seed", "a whole number from 0 to 18446744073709551615", NUM_SEED, {0, 0, 0, 0}, offsetof(exec_cli_common, seed)},
    {"--timeout", "seconds, a number >= 0 (0 disables the watchdog)", NUM_REAL, {0, HUGE_VAL, 0, 0}, offsetof(exec_cli_common, timeout_s)},
    {"--lr", "a learning rate > 0", NUM_REAL, {0, HUGE_VAL, 1, 0}, offsetof(exec_cli_common, optim.lr)},
    {"--weight-decay", "a number >= 0", NUM_REAL, {0, HUGE_VAL, 0, 0}, offsetof(exec_cli_common, optim.weight_decay)},
    {"--beta1", "a number in [0, 1), e.g. 0.9", NUM_REAL, {0, 1, 0, 1}, offsetof(exec_cli_common, optim.beta1)},
    {"--beta2", "a number in [0, 1), e.g. 0.95", NUM_REAL, {0, 1, 0, 1}, offsetof(exec_cli_common, optim.beta2)},
    {"--eps", "a number > 0, e.g. 1e-8", NUM_REAL, {0, HUGE_VAL, 1, 0}, offsetof(exec_cli_common, optim.eps)},
    {"--grad-clip", "a norm >= 0", NUM_REAL, {0, HUGE_VAL, 0, 0}, offsetof(exec_cli_common, grad_clip)},
};

int exec_cli_option(int argc, char **argv, int *i, const char *prog, exec_cli_common *c,
                    base_error *e)
{
    const char *s = argv[*i];
    for (size_t k = 0; k < BASE_COUNT(cli_nums); k++) {
        if (strcmp(s, cli_nums[k].name) != 0) continue;
        const char *t = exec_cli_value(argc, argv, i, e);
        if (!t) return -1;
        char why[128], want[160];
        char *dst = (char *)c + cli_nums[k].off;
        int bad;
        if (cli_nums[k].kind == NUM_STEPS) {
            int64_t n = 0;
            bad = base_parse_i64(t, (int64_t)cli_nums[k].r.lo, (int64_t)cli_nums[k].r.hi, &n, why, sizeof why);
            if (!bad) memcpy(dst, &n, sizeof n);
        } else if (cli_nums[k].kind == NUM_SEED) {
            uint64_t n = 0;
            bad = base_parse_u64(t, 0, UINT64_MAX, &n, why, sizeof why);
            if (!bad) memcpy(dst, &n, sizeof n), c->seed_given = true;
        } else {
            double d = 0;
            bad = base_parse_double(t, cli_nums[k].r, &d, why, sizeof why);
            if (!bad) memcpy(dst, &d, sizeof d);
        }
        if (bad) {
            if (cli_nums[k].kind == NUM_STEPS)
                snprintf(want, sizeof want, "%s from %.0f to %.0f", cli_nums[k].what, cli_nums[k].r.lo, cli_nums[k].r.hi);
            else
                snprintf(want, sizeof want, "%s", cli_nums[k].what);
            return bad_value(e, s, t, why, want);
        }
        return 0;
    }
    const char *v;
    if (strcmp(s, "--optimizer") == 0) {
        if (!(v = exec_cli_value(argc, argv, i, e))) return -1;
        if (strcmp(v, "adamw") == 0)
            c->optim.kind = EXEC_ADAMW;
        else if (strcmp(v, "sgd") == 0)
            c->optim.kind = EXEC_SGD;
        else
            return base_errorf(e, "--optimizer takes adamw or sgd, not '%s'", v);
    } else if (strcmp(s, "--log") == 0) {
        if (!(c->log = exec_cli_value(argc, argv, i, e))) return -1;
    } else if (strcmp(s, "--trace") == 0) {
        if (!(c->trace = exec_cli_value(argc, argv, i, e))) return -1;
    } else if (strcmp(s, "--memory") == 0) {
        c->memory = true;
    } else if (strcmp(s, "--no-check") == 0) {
        c->no_check = true;
    } else if (strcmp(s, "-q") == 0) {
        c->quiet = true;
    } else if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
        return 1;
    } else if (s[0] == '-') {
        return base_errorf(e, "unknown option %s; see %s --help", s, prog);
    } else if (c->plan) {
        return base_errorf(e, "two plans given (%s and %s); %s runs one", c->plan, s, prog);
    } else {
        c->plan = s;
    }
    return 0;
}

int exec_cli_finish(exec_cli_common *c, const char *prog, base_error *e)
{
    if (!c->plan) return base_errorf(e, "no plan given; see %s --help", prog);
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
