/* sim_internal.h — what sim/'s files share and nobody else sees: the SimGrid replay entry point
 * (replay.c), which run.c calls in a forked child, the static facts of a plan that the replay and
 * the report both need, the folding of data-parallel replicas (fold.c) and the platform with
 * loop routes for it (platform.c). */
#ifndef PIPER_SIM_INTERNAL_H
#define PIPER_SIM_INTERNAL_H

#include "sim.h"

/* Replays the plan in this process with SimGrid, filling r (r->dev malloc'd). SimGrid can run once
 * per process: run.c calls this in a child. */
int sim_replay(const plan_set *p, const sim_options *o, sim_result *r, base_error *e);

/* GEMM FLOPs of a kernel list (formulas.md counts GEMMs only). */
double sim_kernel_list_gemm_flops(const plan_set *p, int kl);
/* Is the pass counted in model FLOPs (F, B, BI, BW: not recompute, optimizer or aux)? */
bool sim_pass_is_model(int pass);

/* Fills the result's derived figures (step, tokens/s, MFU/HFU, idle, critical device, memory
 * flags) from the per-device facts the replay measured. */
void sim_result_finish(const plan_set *p, sim_result *r);

/* A group's hierarchical structure (replay.c runs all-reduce, reduce-scatter and all-gather of a
 * group with the same number k > 1 of members on each of several nodes as node rings and
 * cross-node rings): grid[node * k + local] is the rank of each member, nodes in order of their
 * first member; node_of/local_of per rank (NULL for groups under 4 members). */
typedef struct sim_group_grid {
    bool hier;
    int per_node;
    int32_t *grid, *node_of, *local_of;
} sim_group_grid;
void sim_group_grid_init(const plan_set *p, int g, sim_group_grid *gg);
void sim_group_grid_free(sim_group_grid *gg);

/* Can every device's host block at its p2p runs until they complete (host_sync=p2p) without the
 * step deadlocking (host_block.c)? False for plans that post receives ahead of the work feeding
 * the matching sends (DualPipe's overlapped pairs); the replay then leaves out those waits. */
bool sim_host_can_block_at_p2p(const plan_set *p);

/* Folding of data-parallel replicas (fold.c): which devices the replay simulates. */
typedef struct sim_fold {
    int replicas;        /* R >= 2 when folded, else 1 */
    int shift;           /* replica k is replica 0 shifted by k x shift devices */
    int nsimulated;      /* devices simulated (replica 0) */
    int32_t *rep;        /* per device: the simulated device it copies (itself when simulated) */
    int32_t *index;      /* per device: its replica */
    uint8_t *spanning;   /* per group: spans replicas (its collectives run with absent members) */
    int32_t *nsim;       /* per group: simulated members */
    int32_t *first_sim;  /* per group: its first simulated member in rank order (-1: none) */
    char reason[200];    /* when not folded: why */
} sim_fold;
/* Decides the folding of the plan under the options (o->fold off, a user's platform, or a plan
 * that does not fold exactly: replicas = 1 and the reason). Never fails. */
int sim_fold_plan(const plan_set *p, const sim_options *o, sim_fold *f);
void sim_fold_free(sim_fold *f);

/* The platform XML of sim_platform_xml, plus for each device with loop[d] set two hosts that
 * replay.c sends folded collective flows to: "gpu<d>~nvl" (out over d's NVLink and back in over
 * it) and, across nodes, "gpu<d>~nic" (out through d's PCIe, NIC and NIC link, back in the same
 * way). */
int sim_platform_xml_loops(const plan_set *p, const sim_links *l, bool nocomm, const uint8_t *loop, base_buf *out,
                           base_error *e);

#endif
