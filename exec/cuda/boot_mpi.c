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
int piper_boot_mpi_notify(void);
int piper_boot_mpi_notified(void);
void piper_boot_mpi_abort(int code);
void piper_boot_mpi_finalize(void);

/* failure notices between ranks, on a communicator of their own (see piper_boot_mpi_notify) */
static MPI_Comm g_notice = MPI_COMM_NULL;

int piper_boot_mpi_init(int *argc, char ***argv, int *rank, int *size)
{
    if (MPI_Init(argc, argv) != MPI_SUCCESS) return -1;
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    if (MPI_Comm_dup(MPI_COMM_WORLD, &g_notice) != MPI_SUCCESS) return -1;
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

/* Tells every other rank that this one has failed, without waiting: the sends are never
 * completed, as the job is aborted after them. */
int piper_boot_mpi_notify(void)
{
    static int one = 1;
    int me = 0, n = 0;
    MPI_Comm_rank(g_notice, &me);
    MPI_Comm_size(g_notice, &n);
    for (int r = 0; r < n; r++) {
        MPI_Request req;
        if (r != me && MPI_Isend(&one, 1, MPI_INT, r, 0, g_notice, &req) != MPI_SUCCESS) return -1;
    }
    return 0;
}

/* The rank of a peer that has announced its failure, or -1. */
int piper_boot_mpi_notified(void)
{
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, 0, g_notice, &flag, &st) != MPI_SUCCESS || !flag) return -1;
    return st.MPI_SOURCE;
}

void piper_boot_mpi_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

void piper_boot_mpi_finalize(void)
{
    if (g_notice != MPI_COMM_NULL) MPI_Comm_free(&g_notice);
    MPI_Finalize();
}
