/* cli.c — the command-line options and step reporting piper-exec and piper-exec-cuda share
 * (cli.h). */
#include "cli.h"

#include <errno.h>
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

int exec_cli_number(int argc, char **argv, int *i, double lo, double *v, base_error *e)
{
    const char *s = argv[*i];
    const char *t = exec_cli_value(argc, argv, i, e);
    if (!t) return -1;
    char *end;
    errno = 0;
    *v = strtod(t, &end);
    if (errno || end == t || *end || !(*v >= lo))
        return base_errorf(e, "%s takes a number >= %g, not '%s'", s, lo, t);
    return 0;
}

int exec_cli_option(int argc, char **argv, int *i, const char *prog, exec_cli_common *c,
                    base_error *e)
{
    const char *s = argv[*i];
    /* the numbers: option, lower bound, destination */
    static const struct {
        const char *name;
        double lo;
    } nums[] = {{"--steps", 1},        {"--seed", 0}, {"--timeout", 0}, {"--lr", 0},
                {"--weight-decay", 0}, {"--beta1", 0}, {"--beta2", 0},  {"--eps", 0},
                {"--grad-clip", 0}};
    double *dst[] = {NULL, NULL, &c->timeout_s, &c->optim.lr, &c->optim.weight_decay,
                     &c->optim.beta1, &c->optim.beta2, &c->optim.eps, &c->grad_clip};
    for (size_t k = 0; k < BASE_COUNT(nums); k++) {
        if (strcmp(s, nums[k].name) != 0) continue;
        double d;
        if (exec_cli_number(argc, argv, i, nums[k].lo, &d, e)) return -1;
        if (k == 0)
            c->steps = (int64_t)d;
        else if (k == 1)
            c->seed = (uint64_t)d, c->seed_given = true;
        else
            *dst[k] = d;
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
