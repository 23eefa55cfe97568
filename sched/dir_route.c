/* dir_route.c — `route {mode}`: Piper's choice of how model inputs reach the stages that read
 * them: `thread` (the default) hands them along the pipeline, `consumers` loads them on every
 * stage that reads one directly. In piper's models the only input a stage reads is the token
 * batch, read by the embedding on the first stage (the labels go to the loss's stage in either
 * mode, as in Piper), so both modes make the same plan and the pass changes nothing. */
#include "sched_internal.h"

int sched_dir_route(sched_ctx *x, const ir_directive *d, base_error *e)
{
    (void)x, (void)d, (void)e;
    return 0;
}
