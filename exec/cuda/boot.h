/* boot.h — how piper-exec-cuda's ranks find each other: MPI (mpirun / srun) when the launcher
 * says there is more than one rank, nothing at all for one.
 *
 * The MPI calls live in a small shared library of their own (libpiper_boot_mpi.so, boot_mpi.c,
 * built next to piper-exec-cuda and linked against the build machine's MPI) that is loaded with
 * dlopen only when the environment names more than one rank (OMPI_COMM_WORLD_SIZE, PMI_SIZE,
 * PMIX_SIZE... or SLURM_NTASKS inside an srun step). So a one-GPU run needs no libmpi on the
 * machine (the bare GPU machine of tests/gpu has none), and a multi-GPU run on a cluster uses the
 * cluster's MPI, which only has to be the one the shim was built against (its soname). The rank
 * picks its GPU by its local rank (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID,
 * else the rank) modulo the GPUs it sees.
 *
 * Functions return 0, or -1 with a message in the base_error. */
#ifndef PIPER_EXEC_CUDA_BOOT_H
#define PIPER_EXEC_CUDA_BOOT_H

#include <stdbool.h>
#include <stddef.h>

#include "../../base/base.h"

typedef struct exec_boot {
    int rank, size, local_rank;
    bool mpi;               /* the shim is loaded and MPI initialised */
    void *lib;
    int (*bcast)(void *buf, long n, int root);
    int (*min_int)(int v, int *out);
    int (*gather)(const double *v, int n, double *all);
    int (*barrier)(void);
    int (*notify)(void);
    int (*notified)(void);
    void (*abort_)(int code);
    void (*finalize)(void);
} exec_boot;

/* The launcher's world size from the environment (1 without a launcher). */
int exec_boot_env_size(void);
/* Starts MPI through the shim when exec_boot_env_size() > 1; else rank 0 of 1. */
int exec_boot_init(exec_boot *b, int *argc, char ***argv, base_error *e);
void exec_boot_finalize(exec_boot *b);
int exec_boot_bcast(exec_boot *b, void *buf, size_t n, int root, base_error *e);
/* Every rank says whether it failed (e->set); returns the first failing rank with its message in
 * msg on every rank, or -1. */
int exec_boot_agree(exec_boot *b, const base_error *e, char *msg, size_t n);
/* n doubles of every rank into all (rank 0; size * n). */
int exec_boot_gather(exec_boot *b, const double *v, int n, double *all, base_error *e);
void exec_boot_barrier(exec_boot *b);
/* A failing rank tells the others (without waiting), so that each prints where it stands before
 * the job is aborted; exec_boot_failed_peer polls for such a notice: the failed rank, or -1. */
void exec_boot_notify_failure(exec_boot *b);
int exec_boot_failed_peer(exec_boot *b);
void exec_boot_abort(exec_boot *b, int code);

#endif
