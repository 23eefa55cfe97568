/* nccl_dl.h — NCCL for the plan runtime, loaded with dlopen when a plan needs communication.
 *
 * Why dlopen: libnccl is over 200 MB and not every GPU machine has it where the toolkit is (the
 * bare machine tests/gpu/check.sh runs on has PyTorch's copy in a Python wheel, if any), while a
 * one-GPU plan communicates nothing. Loading NCCL on first use lets piper-exec-cuda run a
 * single-GPU plan with only the CUDA runtime (linked statically) and cuBLAS, and gives a
 * multi-GPU run a message naming the library and PIPER_NCCL_LIB when it is missing. The calls are
 * type-checked against nccl.h at compile time (function pointers of the declared types).
 *
 * Communicators and streams are opaque pointers (ncclComm_t, cudaStream_t). All functions return
 * 0, or -1 with a message naming the NCCL call and its error. */
#ifndef PIPER_EXEC_CUDA_NCCL_DL_H
#define PIPER_EXEC_CUDA_NCCL_DL_H

#include <stdbool.h>
#include <stddef.h>

#include "../../base/base.h"

#define EXEC_NCCL_ID_BYTES 128

typedef enum { EXEC_NCCL_U8, EXEC_NCCL_BF16, EXEC_NCCL_F32, EXEC_NCCL_F64 } exec_nccl_dtype;
typedef enum { EXEC_NCCL_SUM, EXEC_NCCL_MAX } exec_nccl_op;

/* Loads libnccl.so.2 (or $PIPER_NCCL_LIB) once; later calls return at once. */
int exec_nccl_load(base_error *e);
bool exec_nccl_loaded(void);
/* "2.28.3" of the loaded library. */
int exec_nccl_version(char *buf, size_t n, base_error *e);

int exec_nccl_unique_id(void *id, base_error *e); /* EXEC_NCCL_ID_BYTES */
int exec_nccl_init_rank(void **comm, int nranks, const void *id, int rank, base_error *e);
/* ncclCommSplit: color < 0 is NCCL_SPLIT_NOCOLOR (*comm becomes NULL). Collective over the
 * parent's ranks. */
int exec_nccl_split(void *parent, int color, int key, void **comm, base_error *e);
void exec_nccl_destroy(void *comm);
void exec_nccl_abort(void *comm);
/* A failure NCCL found asynchronously on the communicator (a peer went away, ...). */
int exec_nccl_check(void *comm, base_error *e);

int exec_nccl_group_start(base_error *e);
int exec_nccl_group_end(base_error *e);
int exec_nccl_send(const void *buf, size_t count, exec_nccl_dtype dt, int peer, void *comm,
                   void *stream, base_error *e);
int exec_nccl_recv(void *buf, size_t count, exec_nccl_dtype dt, int peer, void *comm,
                   void *stream, base_error *e);
int exec_nccl_all_reduce(const void *in, void *out, size_t count, exec_nccl_dtype dt,
                         exec_nccl_op op, void *comm, void *stream, base_error *e);
/* count: elements each rank receives */
int exec_nccl_reduce_scatter(const void *in, void *out, size_t count, exec_nccl_dtype dt,
                             void *comm, void *stream, base_error *e);
/* count: elements each rank sends */
int exec_nccl_all_gather(const void *in, void *out, size_t count, exec_nccl_dtype dt,
                         void *comm, void *stream, base_error *e);
/* The sum over the group of every rank's in, into root's out (other ranks' out is unused): a
 * ZeRO reduce-scatter of exact, uneven pieces is one of these per piece, grouped. */
int exec_nccl_reduce(const void *in, void *out, size_t count, exec_nccl_dtype dt, int root,
                     void *comm, void *stream, base_error *e);
/* root's in into every rank's out (root's out too; in == out at root is in place): a ZeRO
 * all-gather of exact pieces is one of these per piece, grouped. */
int exec_nccl_broadcast(const void *in, void *out, size_t count, exec_nccl_dtype dt, int root,
                        void *comm, void *stream, base_error *e);

#endif
