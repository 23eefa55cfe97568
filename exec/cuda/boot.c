/* boot.c — the ranks of piper-exec-cuda (boot.h): the launcher's environment, and MPI through
 * libpiper_boot_mpi.so loaded on demand. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "boot.h"

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    long x = strtol(v, &end, 10);
    return *end || x < 0 || x > INT_MAX ? dflt : (int)x;
}

int exec_boot_env_size(void)
{
    static const char *const names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE",
                                        "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int n = env_int(names[i], 0);
        if (n > 0) return n;
    }
    /* srun: a job step (not merely an allocation, where SLURM_NTASKS is set for the batch
     * script's single process too) */
    if (getenv("SLURM_STEP_ID") && getenv("SLURM_PROCID")) return env_int("SLURM_NTASKS", 1);
    return 1;
}

static int local_rank(int rank)
{
    static const char *const names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                                        "MPI_LOCALRANKID", "PMIX_LOCAL_RANK"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int n = env_int(names[i], -1);
        if (n >= 0) return n;
    }
    return rank;
}

#define SYM(field, name)                                                                       \
    do {                                                                                       \
        *(void **)&b->field = dlsym(b->lib, name);                                             \
        if (!b->field) return base_errorf(e, "%s lacks %s; rebuild piper", path, name);        \
    } while (0)

int exec_boot_init(exec_boot *b, int *argc, char ***argv, base_error *e)
{
    memset(b, 0, sizeof *b);
    b->size = 1;
    if (exec_boot_env_size() <= 1) return 0;
    /* the shim beside the executable, or where PIPER_BOOT_MPI says */
    char path[PATH_MAX + 32];
    const char *env = getenv("PIPER_BOOT_MPI");
    if (env && *env) {
        snprintf(path, sizeof path, "%s", env);
    } else {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) return base_errorf(e, "cannot find the executable's folder; set PIPER_BOOT_MPI");
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        snprintf(path, sizeof path, "%s/libpiper_boot_mpi.so", exe);
    }
    b->lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!b->lib)
        return base_errorf(e, "the launcher started %d ranks, which find each other through MPI, "
                              "but %s does not load: %s; install the MPI piper was built with, or "
                              "set PIPER_BOOT_MPI",
                           exec_boot_env_size(), path, dlerror());
    int (*init)(int *, char ***, int *, int *);
    *(void **)&init = dlsym(b->lib, "piper_boot_mpi_init");
    if (!init) return base_errorf(e, "%s lacks piper_boot_mpi_init; rebuild piper", path);
    SYM(bcast, "piper_boot_mpi_bcast");
    SYM(min_int, "piper_boot_mpi_min_int");
    SYM(gather, "piper_boot_mpi_gather_doubles");
    SYM(barrier, "piper_boot_mpi_barrier");
    SYM(notify, "piper_boot_mpi_notify");
    SYM(notified, "piper_boot_mpi_notified");
    SYM(abort_, "piper_boot_mpi_abort");
    SYM(finalize, "piper_boot_mpi_finalize");
    if (init(argc, argv, &b->rank, &b->size)) return base_errorf(e, "MPI_Init failed");
    b->mpi = true;
    b->local_rank = local_rank(b->rank);
    return 0;
}

void exec_boot_finalize(exec_boot *b)
{
    if (b->mpi) b->finalize();
    b->mpi = false;
}

int exec_boot_bcast(exec_boot *b, void *buf, size_t n, int root, base_error *e)
{
    if (!b->mpi) return 0;
    if (b->bcast(buf, (long)n, root)) return base_errorf(e, "MPI_Bcast of %zu bytes failed", n);
    return 0;
}

int exec_boot_agree(exec_boot *b, const base_error *e, char *msg, size_t n)
{
    int mine = e->set ? b->rank : b->size, first = mine;
    if (b->mpi && b->min_int(mine, &first)) first = mine;
    if (first >= b->size) return -1;
    if (b->rank == first) snprintf(msg, n, "%s", e->msg);
    if (b->mpi) b->bcast(msg, (long)n, first);
    return first;
}

int exec_boot_gather(exec_boot *b, const double *v, int n, double *all, base_error *e)
{
    if (!b->mpi) {
        memcpy(all, v, (size_t)n * sizeof *v);
        return 0;
    }
    if (b->gather(v, n, all)) return base_errorf(e, "MPI_Gather of the step's figures failed");
    return 0;
}

void exec_boot_barrier(exec_boot *b)
{
    if (b->mpi) b->barrier();
}

void exec_boot_notify_failure(exec_boot *b)
{
    if (b->mpi) b->notify();
}

int exec_boot_failed_peer(exec_boot *b) { return b->mpi ? b->notified() : -1; }

void exec_boot_abort(exec_boot *b, int code)
{
    if (b->mpi) b->abort_(code);
    exit(code);
}
