/* exec_compare.c — compares what two piper-exec runs wrote, for the equivalence tests:
 *   exec_compare grads|params DIR_REF DIR_RUN [--tol X]
 *       reassembles every tensor from the dumps of all ranks (DIR/grads.devD.txt: "T name d0 d1 d2
 *       n", then n lines "global_index value") and checks, per tensor, that the run covers every
 *       element the reference has, that replicas within one run agree, and that
 *       ||run - ref|| / max(||ref||, 1e-4 ||all of ref||) <= tol (default 1e-5);
 *       --skip-zero-grads GDIR leaves out tensors whose gradient in GDIR is zero up to rounding
 *       (for parameters after AdamW steps, which turn rounding noise into full steps);
 *   exec_compare losses LOG_REF LOG_RUN [--tol X]
 *       checks the loss column (2nd) of two --log files step by step, relatively.
 * Prints the worst figures; exits 1 when a check fails. */
#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tensor {
    char name[128];
    int64_t n;
    double *v;
    unsigned char *set;
    double rep_diff2, norm2; /* replicas' disagreement */
} tensor;

typedef struct dump {
    tensor *t;
    int nt, cap;
} dump;

static tensor *find(dump *d, const char *name, int64_t n)
{
    for (int i = 0; i < d->nt; i++)
        if (strcmp(d->t[i].name, name) == 0) return &d->t[i];
    if (d->nt == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 64;
        d->t = realloc(d->t, (size_t)d->cap * sizeof *d->t);
        if (!d->t) abort();
    }
    tensor *t = &d->t[d->nt++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n = n;
    t->v = calloc((size_t)n, sizeof(double));
    t->set = calloc((size_t)n, 1);
    if (!t->v || !t->set) abort();
    return t;
}

static int load_file(dump *d, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "exec_compare: cannot read %s\n", path);
        return -1;
    }
    char line[512];
    tensor *cur = NULL;
    int64_t left = 0;
    int ln = 0;
    while (fgets(line, sizeof line, f)) {
        ln++;
        if (line[0] == '#') continue;
        if (line[0] == 'T') {
            char name[128];
            long long d0, d1, d2, n;
            if (sscanf(line, "T %127s %lld %lld %lld %lld", name, &d0, &d1, &d2, &n) != 5) goto bad;
            cur = find(d, name, d0 * d1 * d2);
            if (cur->n != d0 * d1 * d2) goto bad;
            left = n;
            continue;
        }
        long long g;
        double v;
        if (!cur || left <= 0 || sscanf(line, "%lld %lf", &g, &v) != 2 || g < 0 || g >= cur->n) goto bad;
        left--;
        if (cur->set[g]) {
            cur->rep_diff2 += (cur->v[g] - v) * (cur->v[g] - v);
            cur->norm2 += v * v;
        } else {
            cur->v[g] = v;
            cur->set[g] = 1;
        }
    }
    fclose(f);
    return 0;
bad:
    fprintf(stderr, "exec_compare: %s:%d: malformed line\n", path, ln);
    fclose(f);
    return -1;
}

static int load_dir(dump *d, const char *dir, const char *what)
{
    DIR *dd = opendir(dir);
    if (!dd) {
        fprintf(stderr, "exec_compare: cannot open directory %s\n", dir);
        return -1;
    }
    struct dirent *de;
    int files = 0, rc = 0;
    size_t wl = strlen(what);
    while ((de = readdir(dd)) && !rc) {
        if (strncmp(de->d_name, what, wl) || strncmp(de->d_name + wl, ".dev", 4)) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        rc = load_file(d, path);
        files++;
    }
    closedir(dd);
    if (!rc && !files) {
        fprintf(stderr, "exec_compare: no %s.dev*.txt in %s\n", what, dir);
        rc = -1;
    }
    return rc;
}

static double dump_norm(const dump *d)
{
    double s = 0;
    for (int i = 0; i < d->nt; i++)
        for (int64_t k = 0; k < d->t[i].n; k++) s += d->t[i].v[k] * d->t[i].v[k];
    return sqrt(s);
}

/* Tensors whose reference gradient is below `floor`: zero in exact arithmetic (the key bias:
 * softmax ignores a shift shared by all keys), so what a run has there is rounding noise, which
 * AdamW normalises into full-size steps. */
static bool zero_grad(const dump *g, const char *name, double floor)
{
    for (int i = 0; i < g->nt; i++) {
        if (strcmp(g->t[i].name, name)) continue;
        double s = 0;
        for (int64_t k = 0; k < g->t[i].n; k++) s += g->t[i].v[k] * g->t[i].v[k];
        return sqrt(s) <= floor;
    }
    return false;
}

static int compare_dumps(const char *what, const char *ref, const char *run, double tol,
                         const char *zero_dir)
{
    dump a = {0}, b = {0}, z = {0};
    if (load_dir(&a, ref, what) || load_dir(&b, run, what)) return 1;
    if (zero_dir && load_dir(&z, zero_dir, "grads")) return 1;
    /* a tensor below 1e-4 of the whole set's norm is measured against that floor: one whose
     * true value is zero (the key bias's gradient) has a norm of rounding size, relative to which
     * two runs' rounding differs completely; a real error in a small tensor is still caught, as it
     * is of the tensor's own size, far above tol x 1e-4 of the whole */
    const double floor = 1e-4 * dump_norm(&a), zfloor = 1e-6 * dump_norm(&z);
    int fails = 0, skipped = 0;
    double worst = 0, worst_rep = 0;
    const char *worst_name = "-";
    int64_t elements = 0;
    for (int i = 0; i < a.nt; i++) {
        tensor *x = &a.t[i], *y = NULL;
        if (zero_dir && zero_grad(&z, x->name, zfloor)) {
            printf("  %s: skipped (its gradient is zero in exact arithmetic)\n", x->name);
            skipped++;
            continue;
        }
        for (int j = 0; j < b.nt; j++)
            if (strcmp(b.t[j].name, x->name) == 0) y = &b.t[j];
        if (!y) {
            fprintf(stderr, "exec_compare: %s: tensor %s is missing from %s\n", what, x->name, run);
            fails++;
            continue;
        }
        double d2 = 0, n2 = 0, m2 = 0;
        int64_t missing = 0;
        for (int64_t k = 0; k < x->n; k++) {
            if (!x->set[k]) continue;
            if (!y->set[k]) {
                missing++;
                continue;
            }
            d2 += (x->v[k] - y->v[k]) * (x->v[k] - y->v[k]);
            n2 += x->v[k] * x->v[k];
            m2 += y->v[k] * y->v[k];
            elements++;
        }
        if (missing) {
            fprintf(stderr, "exec_compare: %s: %s misses %lld of its elements in %s\n", what, x->name,
                    (long long)missing, run);
            fails++;
        }
        double den = sqrt(n2 > m2 ? n2 : m2);
        if (den < floor) den = floor;
        double rel = den > 0 ? sqrt(d2) / den : sqrt(d2);
        double rep = y->norm2 > 0 ? sqrt(y->rep_diff2 / y->norm2) : sqrt(y->rep_diff2);
        if (rel > worst) {
            worst = rel;
            worst_name = x->name;
        }
        if (rep > worst_rep) worst_rep = rep;
        if (!(rel <= tol) || !(rep <= tol)) {
            fprintf(stderr, "exec_compare: %s: %s differs: relative %.3g (replicas within the run "
                            "%.3g), tolerance %.3g\n",
                    what, x->name, rel, rep, tol);
            fails++;
        }
    }
    for (int j = 0; j < b.nt; j++) {
        bool found = false;
        for (int i = 0; i < a.nt; i++) found |= strcmp(a.t[i].name, b.t[j].name) == 0;
        if (!found && !(zero_dir && zero_grad(&z, b.t[j].name, zfloor))) {
            fprintf(stderr, "exec_compare: %s: %s has tensor %s that %s lacks\n", what, run,
                    b.t[j].name, ref);
            fails++;
        }
    }
    printf("%s: %d tensors (%d skipped), %lld elements compared; worst relative difference %.3g (%s); replicas "
           "agree to %.3g; tolerance %.3g: %s\n",
           what, a.nt, skipped, (long long)elements, worst, worst_name, worst_rep, tol, fails ? "FAIL" : "ok");
    for (int i = 0; i < a.nt; i++) free(a.t[i].v), free(a.t[i].set);
    for (int i = 0; i < b.nt; i++) free(b.t[i].v), free(b.t[i].set);
    for (int i = 0; i < z.nt; i++) free(z.t[i].v), free(z.t[i].set);
    free(a.t);
    free(b.t);
    free(z.t);
    return fails ? 1 : 0;
}

static int read_losses(const char *path, double *v, int max)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "exec_compare: cannot read %s\n", path);
        return -1;
    }
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < max) {
        if (line[0] == '#') continue;
        long long step;
        if (sscanf(line, "%lld %lf", &step, &v[n]) == 2) n++;
    }
    fclose(f);
    return n;
}

static int compare_losses(const char *ref, const char *run, double tol)
{
    double a[1024], b[1024];
    int na = read_losses(ref, a, 1024), nb = read_losses(run, b, 1024);
    if (na < 0 || nb < 0) return 1;
    if (na != nb || na == 0) {
        fprintf(stderr, "exec_compare: %s has %d steps, %s %d\n", ref, na, run, nb);
        return 1;
    }
    double worst = 0;
    int fails = 0;
    for (int i = 0; i < na; i++) {
        double rel = fabs(a[i] - b[i]) / fabs(a[i]);
        printf("  step %d: %.9f %.9f (relative %.2g)\n", i + 1, a[i], b[i], rel);
        if (rel > worst) worst = rel;
        if (!(rel <= tol)) fails++;
    }
    printf("losses: %d steps; worst relative difference %.3g; tolerance %.3g: %s\n", na, worst, tol,
           fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
    double tol = 1e-5;
    const char *zero_dir = NULL;
    int bad = argc < 4;
    for (int i = 4; i < argc && !bad; i += 2) {
        if (i + 1 >= argc)
            bad = 1;
        else if (strcmp(argv[i], "--tol") == 0)
            tol = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--skip-zero-grads") == 0)
            zero_dir = argv[i + 1];
        else
            bad = 1;
    }
    if (bad) {
        fprintf(stderr, "usage: exec_compare grads|params DIR_REF DIR_RUN [--tol X] "
                        "[--skip-zero-grads GRAD_DIR_REF]\n"
                        "       exec_compare losses LOG_REF LOG_RUN [--tol X]\n");
        return 2;
    }
    if (strcmp(argv[1], "losses") == 0) return compare_losses(argv[2], argv[3], tol);
    if (strcmp(argv[1], "grads") == 0 || strcmp(argv[1], "params") == 0)
        return compare_dumps(argv[1], argv[2], argv[3], tol, zero_dir);
    fprintf(stderr, "exec_compare: unknown mode %s\n", argv[1]);
    return 2;
}
