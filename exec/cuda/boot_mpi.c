/* boot_mpi.c — libpiper_boot_mpi.so: the MPI calls piper-exec-cuda makes, behind plain C
 * functions, so that the executable itself never links libmpi (boot.h says why). Loaded with
 * dlopen by boot.c. */
#include <mpi.h>
#include <string.h>

int piper_boot_mpi_init(int *argc, char ***argv, int *rank, int *size);
int piper_boot_mpi_bcast(void *buf, long n, int root);
int piper_boot_mpi_min_int(int v, int *out);
int piper_boot_mpi_gather_doubles(const double *v, int n, double *all);
int piper_boot_mpi_barrier(void);
void piper_boot_mpi_abort(int code);
void piper_boot_mpi_finalize(void);

int piper_boot_mpi_init(int *argc, char ***argv, int *rank, int *size)
{
    if (MPI_Init(argc, argv) != MPI_SUCCESS) return -1;
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return 0;
}

int piper_boot_mpi_bcast(void *buf, long n, int root)
{
    return MPI_Bcast(buf, (int)n, MPI_BYTE, root, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
}

int piper_boot_mpi_min_int(int v, int *out)
{
    return MPI_Allreduce(&v, out, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
}

int piper_boot_mpi_gather_doubles(const double *v, int n, double *all)
{
    return MPI_Gather(v, n, MPI_DOUBLE, all, n, MPI_DOUBLE, 0, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
}

int piper_boot_mpi_barrier(void) { return MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1; }

void piper_boot_mpi_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

void piper_boot_mpi_finalize(void) { MPI_Finalize(); }
