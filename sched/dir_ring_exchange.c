/* dir_ring_exchange.c — `ring_exchange`: Piper's context parallelism (K/V chunks rotated one hop
 * around a group between consecutive ring steps). piper does not have it yet: the loader refuses
 * the directive where it is written, and so does this pass, for a directive built in memory. */
#include "sched_internal.h"

int sched_dir_ring_exchange(sched_ctx *x, const ir_directive *d, base_error *e)
{
    (void)x;
    return sched_dir_error(d, e, "context parallelism (ring_exchange) is not yet supported by "
                                 "piper; remove the directive");
}
