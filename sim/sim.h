/* sim.h — piper's simulator: the contract of sim/ (prefix sim_).
 *
 * sim/ replays the per-device plans of a plan_set on a SimGrid platform generated from the
 * plan's devices and a small link description, and predicts the step time, throughput, MFU/HFU,
 * where each device's time went (compute, exposed communication, idle) and each device's peak
 * memory with its breakdown. It reads plans only through plan/plan.h, never the compiler.
 *
 * The model, in short (docs/simulator.md has the long form):
 *  - one SimGrid host per GPU; NVLink up/down links into an NVSwitch per node; a NIC per
 *    `gpus_per_nic` GPUs into a leaf switch of a fat-tree; latency + size/bandwidth with max-min
 *    sharing (CM02, TCP-gamma 0, no cross-traffic);
 *  - one actor per (device, stream) running the stream's instructions in launch order;
 *  - a kernel takes max(FLOPs / (peak x efficiency), bytes / HBM bandwidth) on the GPU, where
 *    GEMM efficiency depends on m, n and k (sim_gemm_efficiency), and starts only once the
 *    device's host thread has issued it (launch overhead per kernel, running ahead of the GPU
 *    between synchronisation points);
 *  - collectives are rings (or all-to-all exchanges) of concurrent flows between the members,
 *    hierarchical across nodes (NVLink rings inside each node, NIC rings across nodes), or one
 *    of the other algorithms of SIM_COLL_ALGOS.
 *
 * SimGrid's engine can be initialised once per process and aborts on internal errors, so
 * sim_run() simulates in a forked child and reads the results back: any number of simulations
 * may run in one process, and a SimGrid abort becomes an error message. */
#ifndef PIPER_SIM_H
#define PIPER_SIM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../base/base.h"
#include "../plan/plan.h"

/* ---------------------------------------------------------------- options */

/* The network a plan runs on: the plan header's figures (the cluster file's, sim_links_from_plan),
 * else defaults per GPU type (sim_links_default), and the command line over both
 * (sim_links_parse). Bandwidths in bytes/s per direction, latencies in seconds, end to end (each
 * of the two hops of a route gets half). */
typedef struct sim_links {
    double nvlink_bw;        /* each GPU's NVLink into the node's NVSwitch */
    double nvlink_latency;   /* GPU to GPU through the NVSwitch */
    double nic_bw;           /* each NIC, into its leaf switch */
    double nic_latency;      /* GPU to GPU of another node, through the NICs and the fabric */
    double pcie_bw;          /* each GPU to its NIC (shared NICs contend on the NIC link) */
    int gpus_per_nic;        /* 1 = a NIC per GPU */
    int nodes_per_leaf;      /* fat-tree: nodes under one leaf switch */
    double oversubscription; /* fat-tree: leaf downlink / uplink capacity (1 = non-blocking) */
} sim_links;

/* The collective algorithms of --coll: one row each, X(ID, name, run, foldable, help). Each
 * algorithm is one file, sim/coll_<name>.c, that defines `run` and `foldable` (sim_internal.h)
 * with its closed form beside them; the enum, the names, piper-sim's --help and the validation of
 * --coll are generated from this table. */
#define SIM_COLL_ALGOS(X)                                                                            \
    X(AUTO, "auto", sim_coll_auto_run, sim_coll_auto_foldable,                                       \
      "rings; across nodes, rings inside each node and rings across nodes, as NCCL (the default)")   \
    X(RING, "ring", sim_coll_ring_run, sim_coll_ring_foldable, "one flat ring")                     \
    X(RING_STEPS, "ring-steps", sim_coll_ring_steps_run, sim_coll_ring_steps_foldable,               \
      "one flat ring in lock-step phases of bytes/n")                                                \
    X(TREE, "tree", sim_coll_tree_run, sim_coll_tree_foldable,                                       \
      "all-reduce over NCCL's double binary tree; other kinds: one flat ring")

typedef enum {
#define SIM_COLL_ENUM(id, name, run, foldable, help) SIM_COLL_##id,
    SIM_COLL_ALGOS(SIM_COLL_ENUM)
#undef SIM_COLL_ENUM
    SIM_NCOLL
} sim_coll_algo;

/* The algorithm's name ("auto", "ring", ...) and its one-line description for --help. */
const char *sim_coll_name(sim_coll_algo a);
const char *sim_coll_help(sim_coll_algo a);
/* The algorithm named `name` into *a; otherwise "--coll NAME: unknown algorithm; use auto, ring,
 * ring-steps or tree" (the names from the table). */
int sim_coll_parse(const char *name, sim_coll_algo *a, base_error *e);

enum { SIM_LAUNCH_HOST, SIM_LAUNCH_LIST };
/* Host synchronisation points (--costs host_sync=p2p+norm+batch): after each p2p run (Megatron's
 * batch_isend_irecv is followed by torch.cuda.synchronize()), after the gradient-norm all-reduce
 * (clipping reads the norm with .item()), before each micro-batch's first forward compute
 * (Megatron's get_batch broadcasts the batch's sizes and copies them to the host). At such a
 * point the host waits until every instruction launched so far on the device has finished. */
#define SIM_SYNC_P2P 1u
#define SIM_SYNC_NORM 2u
#define SIM_SYNC_BATCH 4u
/* "none", "p2p", "norm", "p2p+norm", "batch", ... */
const char *sim_host_sync_name(unsigned bits);

/* What-if overrides (--costs). */
typedef struct sim_costs {
    bool unit;                        /* compute times from unit_pass instead of kernel lists */
    double unit_pass[PLAN_NPASS];     /* seconds per (stage, micro-batch) and pass; see sim_costs_parse */
    bool nocomm;                      /* communication is free: zero latency, infinite bandwidth */
    double launch_overhead;           /* seconds of host (CPU) time to issue one kernel entry or communication call */
    /* SIM_LAUNCH_HOST: host time per kernel entry of a backward compute (B, BI, BW), which the
     * autograd engine issues from C++ rather than the framework's Python forward; < 0: as
     * launch_overhead. (Recompute re-runs the Python forward: launch_overhead.) */
    double launch_bwd;
    double gemm_eff_large;            /* GEMM efficiency of a 16384^3 GEMM (sim_gemm_efficiency) */
    double gemm_half_dim;             /* dimension at which one factor of the efficiency is 1/2 */
    /* How launches cost (docs/simulator.md, "The host"). SIM_LAUNCH_HOST (the default): each
     * device has one host thread that issues its plan in launch order, `launch_overhead` per
     * kernel entry and per communication call; a stream starts a kernel only once the host has
     * issued it, and the host runs ahead of the GPU except at the synchronisation points of
     * `host_sync` (and the step's end). SIM_LAUNCH_LIST: the earlier per-list model, kept for
     * comparison: a list costs the smooth maximum (G^k + L^k)^(1/k), k = 1 / (1 - launch_overlap),
     * of its GPU time G and its launches L, and a communication call launch x (1 - overlap). */
    int launch_model;
    unsigned host_sync;               /* SIM_SYNC_* bits: where the host waits for its GPU */
    double launch_overlap;            /* SIM_LAUNCH_LIST only: 0 = G + L, 1 = max(G, L) */
    double hbm_eff;                   /* fraction of the HBM bandwidth memory-bound kernels reach */
    double net_eff;                   /* fraction of a link's bandwidth transfers reach (NCCL's busbw / line rate) */
    /* Compute slows by this fraction (0 .. 0.5) while a transfer of its device is in flight
     * (kernels share SMs and HBM with communication kernels); 0 = no interference. */
    double comm_slowdown;
} sim_costs;

/* When every instruction of a finished replay ran: start[d][i] .. end[d][i], in seconds since
 * the step began, for instruction i of device d's list (a folded replica's are its simulated
 * device's). Called in the process that simulated, before sim_run returns; an error it records
 * fails the run. */
typedef int (*sim_times_fn)(void *ctx, const plan_set *p, const double *const *start, const double *const *end,
                            base_error *e);

typedef struct sim_options {
    sim_links links;
    sim_costs costs;
    sim_coll_algo coll;
    bool in_process;         /* simulate in this process (once per process; SimGrid aborts on errors) */
    bool fold;               /* simulate one of identical data-parallel replicas when exact (default on) */
    /* Folded: generate every node of the cluster rather than only those holding simulated
     * devices (the same routes, so the same figures; the tests compare the two). */
    bool full_platform;
    bool progress;           /* print the simulated time on stderr now and then */
    const char *platform_out; /* write the generated SimGrid platform XML here too (or NULL) */
    const char *trace_path;   /* write a Chrome trace of the step here (viz/trace.h), or NULL */
    const char *platform;     /* a user's SimGrid platform XML instead of the generated one, or NULL */
    sim_times_fn times_fn;    /* told when each instruction ran (piper-sim --emit-chakra), or NULL */
    void *times_ctx;
    char calibration[96];     /* where the cost constants came from, for the report ("" = built-in defaults) */
} sim_options;

/* Options for the plan: its links (sim_links_from_plan) and the cost model's defaults. Defaults
 * per GPU type: A100: NVLink 300 GB/s and HDR 25 GB/s NICs; H100/H200: 450 GB/s and NDR 50 GB/s;
 * H800: 200 GB/s and 50 GB/s; ~1 us NVLink, ~5 us NIC latency. */
void sim_options_init(sim_options *o, const plan_set *p);
void sim_links_default(sim_links *l, const char *gpu_name);
/* The plan's `links` figures over the defaults for its GPU (each figure the plan leaves at 0 keeps
 * its default); pcie_bw and nodes_per_leaf are not in plans and keep theirs. */
void sim_links_from_plan(sim_links *l, const plan_set *p);
/* "nvlink_bw=300GB/s,nic_bw=200Gb/s,nic_lat=5us,gpus_per_nic=2,..." onto *l (see --help). */
int sim_links_parse(sim_links *l, const char *spec, base_error *e);
/* "unit:F=1,B=2,BI=1,BW=1", "nocomm", "launch=4us", "gemm_eff=0.8", "gemm_half=128", comma
 * separated, onto *c. With unit costs, a compute instruction of pass P takes unit_pass[P] divided
 * by the number of compute instructions of pass P its device runs for the same (stage,
 * micro-batch), so one stage's F of one micro-batch costs F in all; passes not named cost 0. */
int sim_costs_parse(sim_costs *c, const char *spec, base_error *e);

/* ---------------------------------------------------------------- calibration */

/* configs/calibration.txt, compiled into piper-sim: the cost model's constants per GPU type,
 * fitted on measured step times (docs/calibration.md). */
extern const char sim_calibration_builtin[];

/* Applies a calibration file's entry for the plan's GPU to o->costs. A calibration file has one
 * line per GPU type: the type (matched case-insensitively as a prefix of the plan's GPU name; the
 * longest match wins) followed by --costs items (`A100 gemm_eff=0.7 launch=30us ...`); `#` starts
 * a comment. `name` is the file's name for messages. *entry receives the matched type ("" when
 * none matched: the built-in constants stay). Errors: "name:line: ...". */
int sim_calibration_apply(sim_costs *c, const char *gpu_name, const char *name, const char *text, char *entry,
                          size_t n, base_error *e);
/* The plan's `calib` keys (the cluster file's calibration map) onto o->costs; names that are not
 * cost-model constants are warnings. */
int sim_calibration_apply_plan(sim_costs *c, const plan_set *p, base_error *e);

/* ---------------------------------------------------------------- cost model */

/* Fraction of the dense peak a GEMM (m x k) . (k x n) reaches: eff_large at 16384^3 (~0.82 on an
 * A100: 256 of 312 TFLOP/s, hardware.md), falling as any dimension shrinks: each dimension x
 * contributes x / (x + half_dim), normalised so that 16384^3 gives eff_large. A GEMM without a
 * shape (a dimension <= 0) gets eff_large. */
double sim_gemm_efficiency(const sim_costs *c, int64_t m, int64_t n, int64_t k);
/* Seconds of one kernel entry (all its `count` launches) on the GPU, launch overhead included. */
double sim_kernel_seconds(const sim_costs *c, const plan_gpu *g, const plan_kernel *k);
/* Seconds of a kernel list on its own (host and GPU idle when it starts). SIM_LAUNCH_HOST: the
 * host issues kernel j (1-based) at j x launch and the GPU runs the kernels in order, each once
 * issued, so the list takes lead + G (sim_kernel_list_host); SIM_LAUNCH_LIST: G and L = launch x
 * its kernels combined by launch_overlap (above). */
double sim_kernel_list_seconds(const sim_costs *c, const plan_gpu *g, const plan_kernel_list *kl);
/* The host model's view of a kernel list: *gpu = G, the sum of its kernels' roofline times, and
 * *lead = max over k of (k x launch - the GPU time of kernels 1 .. k-1): how long after the host
 * begins issuing the list the GPU can start it and never wait for a launch again (launch: the
 * host time per kernel entry, sim_launch_seconds). */
void sim_kernel_list_host(const sim_costs *c, const plan_gpu *g, const plan_kernel_list *kl, double launch,
                          double *gpu, double *lead);
/* The host time per kernel entry of a compute of pass `pass` (launch_bwd for B, BI, BW). */
double sim_launch_seconds(const sim_costs *c, int pass);

/* ---------------------------------------------------------------- platform */

/* The SimGrid platform XML for the plan's devices and nodes (docs/simulator.md): host "gpu<d>"
 * per device. With nocomm every latency is 0. */
int sim_platform_xml(const plan_set *p, const sim_links *l, bool nocomm, base_buf *out, base_error *e);

/* Checks a user's platform XML for a plan of `ndevices` devices, loading it with SimGrid in a
 * child process (SimGrid aborts on malformed XML): errors are "file:line: what is wrong; what to
 * do". The contract: a host "gpu<d>" with one core for every device d (docs/simulator.md). */
int sim_platform_check(const char *path, int ndevices, base_error *e);

/* ---------------------------------------------------------------- results */

typedef struct sim_device_result {
    int id, node;
    double end_seconds;            /* when its last instruction finished */
    double compute_seconds;        /* time with at least one compute instruction running */
    double exposed_comm_seconds;   /* time with a transfer in flight and no compute running */
    double comm_seconds;           /* time with a transfer in flight (overlapped or not) */
    double idle_seconds;           /* step - compute - exposed communication */
    double launch_wait_seconds;    /* host model: time its streams waited for the host to issue, summed over streams */
    double peak_bytes;             /* peak of the live total, in simulated time */
    double at_peak[PLAN_NMEM];     /* breakdown at that moment */
    double peak_by_mem[PLAN_NMEM]; /* each category's own peak */
    double model_flops;            /* GEMM FLOPs of its F, B, BI and BW instructions */
    double hw_flops;               /* GEMM FLOPs of every compute instruction it ran (recompute too) */
    double bytes_sent;             /* p2p and collective flows it sent */
    int64_t instructions;
    bool over_memory;              /* peak above capacity - reserve */
} sim_device_result;

typedef struct sim_result {
    int ndevices;
    sim_device_result *dev;        /* malloc'd; sim_result_free */
    double step_seconds;           /* makespan of the step */
    double tokens_per_second;      /* global batch x sequence / step */
    double model_flops, hw_flops;  /* summed over devices */
    double peak_flops;             /* per device, of the activation dtype */
    double mfu, hfu;               /* flops / (step x peak x devices) */
    double usable_bytes;           /* capacity - reserve */
    int critical_device;           /* least idle (most compute + exposed communication) */
    int last_device;               /* finishes last */
    int nover_memory;
    int64_t activities;            /* simulated executions and transfers */
    int64_t executions;            /* of which executions (computes) */
    int actors;                    /* SimGrid actors: one per simulated device and stream */
    int folded_replicas;           /* data-parallel replicas folded into one (1: not folded) */
    int simulated_devices;         /* devices the replay ran (the others copy one of them) */
    char fold_note[200];           /* why the plan was not folded ("" when folded or folding is off) */
    char host_note[320];           /* why the host model left out a synchronisation ("" when none) */
    double wall_seconds;           /* of the simulation (not part of any deterministic output) */
} sim_result;

/* Simulates one step of the plan. The plan must have passed plan_check (piper-sim runs it
 * first). Errors: "what went wrong; what to do". */
int sim_run(const plan_set *p, const sim_options *o, sim_result *r, base_error *e);
void sim_result_free(sim_result *r);

/* The report for people (deterministic: no wall time), and --json (docs/sim-json.md). */
void sim_report_write(const plan_set *p, const sim_options *o, const sim_result *r, FILE *f);
void sim_json_write(const plan_set *p, const sim_options *o, const sim_result *r, FILE *f);

#endif
