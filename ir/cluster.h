/* cluster.h — the machine a program runs on (part of ir/, included by ir.h): the GPU type with
 * its peak FLOP/s, HBM bandwidth and usable memory, how many nodes of how many GPUs, the
 * intra-node (NVLink/NVSwitch) and inter-node (NICs into a fat-tree or rail network) links, and
 * calibration constants of the cost model. A built-in table knows A100, H100, H200 and H800
 * (figures from ../shared/reference/hardware.md, sources named in cluster.c); a cluster file may
 * override any figure. A user may instead name a SimGrid platform XML for sim/. */
#ifndef PIPER_IR_CLUSTER_H
#define PIPER_IR_CLUSTER_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/base.h"
#include "../plan/plan.h"
#include "doc.h"

typedef enum { IR_NET_FAT_TREE, IR_NET_RAIL } ir_net_topology;

typedef struct ir_cluster {
    const char *name;
    const char *file;
    plan_gpu gpu;              /* name, peak FLOP/s per dtype, HBM bandwidth, memory, reserve */
    int64_t nodes, gpus_per_node;
    /* intra-node: each GPU's NVLink into the NVSwitch, per direction */
    double nvlink_bw;          /* bytes/s per direction per GPU */
    double nvlink_latency;     /* seconds */
    /* inter-node */
    int64_t gpus_per_nic;      /* 1 = a NIC per GPU; 2 = two GPUs share one NIC; ... */
    double nic_bw;             /* bytes/s per direction per NIC */
    double nic_latency;        /* seconds */
    ir_net_topology topology;
    double oversubscription;   /* fat-tree: downlink/uplink ratio at the leaf (1 = non-blocking) */
    const char *platform_xml;  /* user's SimGrid platform instead of the generated one, or NULL */
    /* calibration constants for the cost model, name -> value (e.g. "gemm_efficiency") */
    int ncalib;
    const char **calib_names;
    double *calib_values;
} ir_cluster;

/* The most devices a cluster may have (docs/programs.md, "Cluster files"): every stage of the
 * compiler and the simulator keeps per-device state, so a cluster far beyond what is simulated
 * (the examples go to 2,048) is refused at load rather than exhausting memory later. */
#define IR_CLUSTER_MAX_DEVICES 65536

static inline int64_t ir_cluster_devices(const ir_cluster *c) { return c->nodes * c->gpus_per_node; }

/* Known GPU types: fills g from the built-in table; -1 (with the list of known names) if unknown.
 * Names match case-insensitively and ignore '-', '_' and spaces ("H100", "h100-sxm",
 * "A100-80GB", "a100_sxm4_40gb"); a bare "A100" is refused as ambiguous (40 or 80 GB). A figure
 * of 0 in peak_flops means the type has no such unit (fp8 on A100). */
int ir_gpu_lookup(const char *name, plan_gpu *g, base_error *e);
/* The usual system's links for a known type (DGX/HGX): NVLink per direction per GPU, and the
 * NIC bandwidth per direction of one GPU's NIC. 0 when the name is unknown. */
double ir_gpu_nvlink_default(const char *name);
double ir_gpu_nic_default(const char *name);
/* The built-in type names (canonical spelling), for listings and tests. */
int ir_gpu_count(void);
const char *ir_gpu_name(int i);
/* Loads a cluster from a parsed map: `gpu: H100` or a gpu map overriding figures, `nodes`,
 * `gpus_per_node`, `nvlink: {bandwidth, latency}`, `network: {nic_bandwidth, gpus_per_nic,
 * latency, topology, oversubscription}`, `memory_reserve`, `platform`, `calibration`. */
int ir_cluster_from_doc(const ir_doc *d, base_arena *a, ir_cluster *c, base_error *e);
/* A calibration constant by name, or `fallback` when the cluster does not set it. */
double ir_cluster_calib(const ir_cluster *c, const char *name, double fallback);

#endif
