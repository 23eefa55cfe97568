/* nccl_dl.c — NCCL loaded on first use (nccl_dl.h says why). The function pointers have the
 * types nccl.h declares (__typeof__ of the declarations: no link-time reference to libnccl). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* nccl.h declares ncclGroupStart() and a few others without (void) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "nccl_dl.h"

_Static_assert(sizeof(ncclUniqueId) == EXEC_NCCL_ID_BYTES, "NCCL's unique id size");

static struct {
    void *lib;
    __typeof__(ncclGetVersion) *get_version;
    __typeof__(ncclGetErrorString) *error_string;
    __typeof__(ncclGetUniqueId) *get_unique_id;
    __typeof__(ncclCommInitRank) *init_rank;
    __typeof__(ncclCommSplit) *split;
    __typeof__(ncclCommDestroy) *destroy;
    __typeof__(ncclCommAbort) *abort_;
    __typeof__(ncclCommGetAsyncError) *async_error;
    __typeof__(ncclGroupStart) *group_start;
    __typeof__(ncclGroupEnd) *group_end;
    __typeof__(ncclSend) *send;
    __typeof__(ncclRecv) *recv;
    __typeof__(ncclAllReduce) *all_reduce;
    __typeof__(ncclReduceScatter) *reduce_scatter;
    __typeof__(ncclAllGather) *all_gather;
    __typeof__(ncclReduce) *reduce;
    __typeof__(ncclBroadcast) *broadcast;
} N;

bool exec_nccl_loaded(void) { return N.lib != NULL; }

#define SYM(field, name)                                                                       \
    do {                                                                                       \
        *(void **)&N.field = dlsym(lib, name);                                                 \
        if (!N.field) {                                                                        \
            memset(&N, 0, sizeof N);                                                           \
            dlclose(lib);                                                                      \
            return base_errorf(e, "%s has no %s: NCCL 2.18 or newer is needed", path, name);   \
        }                                                                                      \
    } while (0)

int exec_nccl_load(base_error *e)
{
    if (N.lib) return 0;
    const char *path = getenv("PIPER_NCCL_LIB");
    if (!path || !*path) path = "libnccl.so.2";
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return base_errorf(e, "cannot load NCCL (%s): %s; a plan with more than one device needs "
                              "it: put libnccl.so.2 on LD_LIBRARY_PATH or name it in PIPER_NCCL_LIB",
                           path, dlerror());
    SYM(get_version, "ncclGetVersion");
    SYM(error_string, "ncclGetErrorString");
    SYM(get_unique_id, "ncclGetUniqueId");
    SYM(init_rank, "ncclCommInitRank");
    SYM(split, "ncclCommSplit");
    SYM(destroy, "ncclCommDestroy");
    SYM(abort_, "ncclCommAbort");
    SYM(async_error, "ncclCommGetAsyncError");
    SYM(group_start, "ncclGroupStart");
    SYM(group_end, "ncclGroupEnd");
    SYM(send, "ncclSend");
    SYM(recv, "ncclRecv");
    SYM(all_reduce, "ncclAllReduce");
    SYM(reduce_scatter, "ncclReduceScatter");
    SYM(reduce, "ncclReduce");
    SYM(broadcast, "ncclBroadcast");
    SYM(all_gather, "ncclAllGather");
    N.lib = lib;
    return 0;
}

#define NEED_LIB                                                                               \
    do {                                                                                       \
        if (!N.lib && exec_nccl_load(e)) return -1;                                            \
    } while (0)

#define NCCL_OK(call)                                                                          \
    do {                                                                                       \
        ncclResult_t r_ = (call);                                                              \
        if (r_ != ncclSuccess)                                                                 \
            return base_errorf(e, "%s failed at %s:%d: %s", #call, __FILE__, __LINE__,         \
                               N.error_string(r_));                                            \
    } while (0)

static ncclDataType_t dtype(exec_nccl_dtype d)
{
    switch (d) {
    case EXEC_NCCL_U8: return ncclUint8;
    case EXEC_NCCL_BF16: return ncclBfloat16;
    case EXEC_NCCL_F32: return ncclFloat32;
    default: return ncclFloat64;
    }
}

int exec_nccl_version(char *buf, size_t n, base_error *e)
{
    NEED_LIB;
    int v = 0;
    NCCL_OK(N.get_version(&v));
    /* 2.9 and later: major * 10000 + minor * 100 + patch */
    snprintf(buf, n, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    return 0;
}

int exec_nccl_unique_id(void *id, base_error *e)
{
    NEED_LIB;
    ncclUniqueId u;
    NCCL_OK(N.get_unique_id(&u));
    memcpy(id, &u, sizeof u);
    return 0;
}

int exec_nccl_init_rank(void **comm, int nranks, const void *id, int rank, base_error *e)
{
    NEED_LIB;
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclComm_t c = NULL;
    *comm = NULL;
    NCCL_OK(N.init_rank(&c, nranks, u, rank));
    *comm = c;
    return 0;
}

int exec_nccl_split(void *parent, int color, int key, void **comm, base_error *e)
{
    NEED_LIB;
    ncclComm_t c = NULL;
    *comm = NULL;
    NCCL_OK(N.split((ncclComm_t)parent, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &c, NULL));
    *comm = c;
    return 0;
}

void exec_nccl_destroy(void *comm)
{
    if (N.lib && comm) N.destroy((ncclComm_t)comm);
}

void exec_nccl_abort(void *comm)
{
    if (N.lib && comm) N.abort_((ncclComm_t)comm);
}

int exec_nccl_check(void *comm, base_error *e)
{
    if (!N.lib || !comm) return 0;
    ncclResult_t r = ncclSuccess;
    NCCL_OK(N.async_error((ncclComm_t)comm, &r));
    if (r != ncclSuccess && r != ncclInProgress)
        return base_errorf(e, "NCCL reports an asynchronous failure: %s", N.error_string(r));
    return 0;
}

int exec_nccl_group_start(base_error *e)
{
    NEED_LIB;
    NCCL_OK(N.group_start());
    return 0;
}

int exec_nccl_group_end(base_error *e)
{
    NEED_LIB;
    NCCL_OK(N.group_end());
    return 0;
}

int exec_nccl_send(const void *buf, size_t count, exec_nccl_dtype dt, int peer, void *comm,
                   void *stream, base_error *e)
{
    NEED_LIB;
    NCCL_OK(N.send(buf, count, dtype(dt), peer, (ncclComm_t)comm, (cudaStream_t)stream));
    return 0;
}

int exec_nccl_recv(void *buf, size_t count, exec_nccl_dtype dt, int peer, void *comm,
                   void *stream, base_error *e)
{
    NEED_LIB;
    NCCL_OK(N.recv(buf, count, dtype(dt), peer, (ncclComm_t)comm, (cudaStream_t)stream));
    return 0;
}

int exec_nccl_all_reduce(const void *in, void *out, size_t count, exec_nccl_dtype dt,
                         exec_nccl_op op, void *comm, void *stream, base_error *e)
{
    NEED_LIB;
    NCCL_OK(N.all_reduce(in, out, count, dtype(dt), op == EXEC_NCCL_MAX ? ncclMax : ncclSum,
                         (ncclComm_t)comm, (cudaStream_t)stream));
    return 0;
}

int exec_nccl_reduce_scatter(const void *in, void *out, size_t count, exec_nccl_dtype dt,
                             void *comm, void *stream, base_error *e)
{
    NEED_LIB;
    NCCL_OK(N.reduce_scatter(in, out, count, dtype(dt), ncclSum, (ncclComm_t)comm,
                             (cudaStream_t)stream));
    return 0;
}

int exec_nccl_all_gather(const void *in, void *out, size_t count, exec_nccl_dtype dt,
                         void *comm, void *stream, base_error *e)
{
    NEED_LIB;
    NCCL_OK(N.all_gather(in, out, count, dtype(dt), (ncclComm_t)comm, (cudaStream_t)stream));
    return 0;
}

int exec_nccl_reduce(const void *in, void *out, size_t count, exec_nccl_dtype dt, int root,
                     void *comm, void *stream, base_error *e)
{
    NEED_LIB;
    NCCL_OK(N.reduce(in, out, count, dtype(dt), ncclSum, root, (ncclComm_t)comm,
                     (cudaStream_t)stream));
    return 0;
}

int exec_nccl_broadcast(const void *in, void *out, size_t count, exec_nccl_dtype dt, int root,
                        void *comm, void *stream, base_error *e)
{
    NEED_LIB;
    NCCL_OK(N.broadcast(in, out, count, dtype(dt), root, (ncclComm_t)comm, (cudaStream_t)stream));
    return 0;
}
