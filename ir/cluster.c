/* cluster.c — the built-in GPU table and the cluster-file loader (contract in cluster.h).
 *
 * Every figure in the table names its source. The loader turns a cluster map into an ir_cluster:
 * defaults come from the GPU type's usual system (DGX/HGX), and every number the file gives goes
 * through the doc unit parsers, so "450GB/s", "400Gb/s", "80GiB" and "2us" all mean what they say.
 * Errors point at the offending node: "file:line:col: what is wrong; what to do". */
#include "cluster.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define TFLOPS 1e12
#define GB_S 1e9            /* vendor bandwidths are decimal: 1 GB/s = 1e9 bytes/s */
#define GBIT_S (1e9 / 8.0)  /* NIC line rates are in bits */
#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * MIB)

typedef struct gpu_entry {
    const char *name;
    /* normalized spellings (lowercase, no '-', '_' or spaces) accepted for this type */
    const char *aliases[6];
    double bf16, fp16, fp8, fp32, fp64;  /* dense FLOP/s */
    double hbm_bw;                       /* bytes/s */
    double mem_bytes;                    /* as the device reports it (nvidia-smi total) */
    double reserve;                      /* default reserve: CUDA context, cuBLAS, NCCL buffers */
    double nvlink_bw;                    /* per direction per GPU */
    double nic_bw;                       /* per direction of the NIC one GPU usually has */
} gpu_entry;

/* Sources:
 *  [A100]  NVIDIA A100 Tensor Core GPU datasheet (SXM4): BF16/FP16 tensor 312 TF dense, FP32
 *          19.5 TF, FP64 tensor core 19.5 TF, HBM2e 1,555 GB/s (40 GB) and 2,039 GB/s (80 GB),
 *          NVLink 3 600 GB/s total = 300 GB/s per direction. Also ../shared/reference/hardware.md.
 *  [H100]  NVIDIA H100 Tensor Core GPU datasheet (SXM5): BF16 1,979 TF and FP8 3,958 TF *with
 *          sparsity*, so 989 / 1,979 dense; FP32 67 TF; FP64 tensor core 67 TF; HBM3 3.35 TB/s;
 *          NVLink 4 900 GB/s total = 450 per direction. hardware.md.
 *  [H200]  NVIDIA H200 datasheet (SXM): same compute as H100 SXM; HBM3e 4.8 TB/s; NVLink 900 GB/s
 *          total. hardware.md.
 *  [H800]  NVIDIA H800 SXM5 datasheet: H100 compute for BF16/FP8/FP32 but FP64 cut to 1 TF;
 *          3.35 TB/s; NVLink 400 GB/s total = 200 per direction. hardware.md.
 *  [MEM]   hardware.md: usable bytes as nvidia-smi reports them: H100 81,559 MiB, H200 143,771 MiB;
 *          A100 80 GB 81,920 MiB and 40 GB 40,960 MiB. H800 carries the H100's 80 GB HBM3 stack,
 *          so we take the H100 figure.
 *  [NIC]   DGX A100: 8 x 200 Gb/s HDR InfiniBand (one per GPU); DGX/HGX H100, H200 and the
 *          DeepSeek-V3 H800 nodes: 8 x 400 Gb/s NDR (one per GPU). hardware.md, DeepSeek-V3 report.
 *  [RES]   4 GiB reserve: our estimate of CUDA context + cuBLAS workspace + NCCL buffers
 *          ("a further few GiB", hardware.md); set memory_reserve to change it.
 *  [CPU]   Not a measurement: a modest stand-in for one MPI rank of the CPU executor (a few cores
 *          of a server: ~100 GFLOP/s fp32 with AVX2/AVX-512 BLAS, ~20 GB/s of DRAM bandwidth,
 *          16 GiB), so that the simulator gives sane numbers for CPU plans. No bf16/fp8 units:
 *          bf16/fp16 are given the fp32 rate because the CPU executor computes in fp32. */
static const gpu_entry gpu_table[] = {
    {"A100-40GB", {"a10040gb", "a100sxm440gb", "a100sxm40gb", "a100sxm4", NULL},
     312 * TFLOPS, 312 * TFLOPS, 0, 19.5 * TFLOPS, 19.5 * TFLOPS,  /* [A100] */
     1555 * GB_S, 40960 * MIB, 4 * GIB,                              /* [A100] [MEM] [RES] */
     300 * GB_S, 200 * GBIT_S},                                      /* [A100] [NIC] */
    {"A100-80GB", {"a10080gb", "a100sxm480gb", "a100sxm80gb", NULL},
     312 * TFLOPS, 312 * TFLOPS, 0, 19.5 * TFLOPS, 19.5 * TFLOPS,  /* [A100] */
     2039 * GB_S, 81920 * MIB, 4 * GIB,                              /* [A100] [MEM] [RES] */
     300 * GB_S, 200 * GBIT_S},                                      /* [A100] [NIC] */
    {"H100", {"h100", "h100sxm", "h100sxm5", "h10080gb", "h100sxm80gb", "h100sxm580gb"},
     989 * TFLOPS, 989 * TFLOPS, 1979 * TFLOPS, 67 * TFLOPS, 67 * TFLOPS,  /* [H100] */
     3350 * GB_S, 81559 * MIB, 4 * GIB,                                     /* [H100] [MEM] [RES] */
     450 * GB_S, 400 * GBIT_S},                                             /* [H100] [NIC] */
    {"H200", {"h200", "h200sxm", "h200141gb", "h200sxm141gb", NULL},
     989 * TFLOPS, 989 * TFLOPS, 1979 * TFLOPS, 67 * TFLOPS, 67 * TFLOPS,  /* [H200] */
     4800 * GB_S, 143771 * MIB, 4 * GIB,                                    /* [H200] [MEM] [RES] */
     450 * GB_S, 400 * GBIT_S},                                             /* [H200] [NIC] */
    {"H800", {"h800", "h800sxm", "h800sxm5", "h80080gb", "h800sxm80gb", NULL},
     989 * TFLOPS, 989 * TFLOPS, 1979 * TFLOPS, 67 * TFLOPS, 1 * TFLOPS,   /* [H800] */
     3350 * GB_S, 81559 * MIB, 4 * GIB,                                     /* [H800] [MEM] [RES] */
     200 * GB_S, 400 * GBIT_S},                                             /* [H800] [NIC] */
    {"cpu", {"cpu", NULL},
     100e9, 100e9, 0, 100e9, 50e9,      /* [CPU] */
     20 * GB_S, 16 * GIB, 1 * GIB,      /* [CPU] */
     10 * GB_S, 10 * GBIT_S},           /* [CPU]: shared-memory MPI; 10 GbE between hosts */
};

#define NGPU ((int)BASE_COUNT(gpu_table))

/* Lowercase, dropping the separators people put in product names, so "H100 SXM5" == "h100-sxm5". */
static void normalize_name(const char *in, char *out, size_t n)
{
    size_t j = 0;
    for (; *in && j + 1 < n; in++) {
        if (*in == '-' || *in == '_' || *in == ' ') continue;
        out[j++] = (char)tolower((unsigned char)*in);
    }
    out[j] = 0;
}

/* Index in gpu_table; -1 unknown, -2 ambiguous (a bare "A100"). */
static int gpu_find(const char *name)
{
    char key[64];
    if (!name) return -1;
    normalize_name(name, key, sizeof key);
    if (!strcmp(key, "a100") || !strcmp(key, "a100sxm")) return -2;
    for (int i = 0; i < NGPU; i++)
        for (int j = 0; j < 6 && gpu_table[i].aliases[j]; j++)
            if (!strcmp(key, gpu_table[i].aliases[j])) return i;
    return -1;
}

static void gpu_fill(const gpu_entry *t, plan_gpu *g)
{
    memset(g, 0, sizeof *g);
    g->name = t->name;
    g->peak_flops[PLAN_BF16] = t->bf16;
    g->peak_flops[PLAN_FP16] = t->fp16;
    g->peak_flops[PLAN_FP8] = t->fp8;
    g->peak_flops[PLAN_FP32] = t->fp32;
    g->peak_flops[PLAN_FP64] = t->fp64;
    g->hbm_bw = t->hbm_bw;
    g->mem_bytes = t->mem_bytes;
    g->reserve_bytes = t->reserve;
}

static const char *known_gpu_list(void)
{
    return "A100-40GB, A100-80GB, H100, H200, H800, cpu";
}

static int gpu_unknown_msg(int idx, char *buf, size_t n, const char *name)
{
    if (idx == -2)
        return snprintf(buf, n, "GPU type '%s' is ambiguous; say A100-40GB or A100-80GB", name);
    return snprintf(buf, n,
                    "unknown GPU type '%s'; use one of %s, or a gpu map with base/peak_bf16/"
                    "hbm_bandwidth/memory",
                    name, known_gpu_list());
}

int ir_gpu_lookup(const char *name, plan_gpu *g, base_error *e)
{
    int i = gpu_find(name);
    if (i < 0) {
        char msg[512];
        gpu_unknown_msg(i, msg, sizeof msg, name ? name : "(null)");
        return base_errorf(e, "%s", msg);
    }
    gpu_fill(&gpu_table[i], g);
    return 0;
}

double ir_gpu_nvlink_default(const char *name)
{
    int i = gpu_find(name);
    return i < 0 ? 0 : gpu_table[i].nvlink_bw;
}

double ir_gpu_nic_default(const char *name)
{
    int i = gpu_find(name);
    return i < 0 ? 0 : gpu_table[i].nic_bw;
}

int ir_gpu_count(void) { return NGPU; }

const char *ir_gpu_name(int i) { return i >= 0 && i < NGPU ? gpu_table[i].name : NULL; }

double ir_cluster_calib(const ir_cluster *c, const char *name, double fallback)
{
    for (int i = 0; i < c->ncalib; i++)
        if (!strcmp(c->calib_names[i], name)) return c->calib_values[i];
    return fallback;
}

/* ---------------------------------------------------------------- loader */

/* Default latencies. Not from a datasheet: NVLink/NVSwitch hops are sub-microsecond but a NCCL
 * kernel step costs about a microsecond; an InfiniBand message through a two-level fat-tree costs
 * a few microseconds end to end. Calibration constants refine what the simulator makes of them. */
#define DEFAULT_NVLINK_LATENCY 1e-6
#define DEFAULT_NIC_LATENCY 5e-6

static int get_positive(const ir_doc *d, const char *what, double v, base_error *e)
{
    if (!isfinite(v) || v <= 0)
        return ir_doc_error(d, e, "%s must be a positive number, got '%s'; give a value above 0",
                            what, d->str ? d->str : "?");
    return 0;
}

static int read_rate(const ir_doc *d, const char *what, double *out, base_error *e)
{
    if (ir_doc_rate(d, what, out, e)) return -1;
    return get_positive(d, what, *out, e);
}

static int read_count(const ir_doc *d, const char *what, int64_t lo, int64_t hi, int64_t *out,
                      base_error *e)
{
    if (ir_doc_int(d, what, out, e)) return -1;
    if (*out < lo || *out > hi)
        return ir_doc_error(d, e, "%s must be between %lld and %lld, got %lld; fix the value", what,
                            (long long)lo, (long long)hi, (long long)*out);
    return 0;
}

static int read_latency(const ir_doc *d, const char *what, double *out, base_error *e)
{
    if (ir_doc_seconds(d, what, out, e)) return -1;
    if (!isfinite(*out) || *out < 0)
        return ir_doc_error(d, e, "%s must be zero or more, got '%s'; give a duration such as 2us",
                            what, d->str ? d->str : "?");
    return 0;
}

static int expect_map(const ir_doc *d, const char *what, const char *keys, base_error *e)
{
    if (d->kind != IR_DOC_MAP)
        return ir_doc_error(d, e, "'%s' must be a map (%s); write it as a map", what, keys);
    return 0;
}

/* The gpu key: a type name, or a map that starts from a base type (its `base`, or its `name` if
 * that is a known type) and overrides figures. A map with neither must give the figures the cost
 * model cannot do without. */
static int parse_gpu(const ir_doc *d, base_arena *a, plan_gpu *g, double *nvlink, double *nic,
                     base_error *e)
{
    if (d->kind == IR_DOC_SCALAR) {
        const char *name;
        if (ir_doc_string(d, "gpu", &name, e)) return -1;
        int i = gpu_find(name);
        if (i < 0) {
            char msg[512];
            gpu_unknown_msg(i, msg, sizeof msg, name);
            return ir_doc_error(d, e, "%s", msg);
        }
        gpu_fill(&gpu_table[i], g);
        *nvlink = gpu_table[i].nvlink_bw;
        *nic = gpu_table[i].nic_bw;
        return 0;
    }
    if (expect_map(d, "gpu", "a type name such as H100, or {name, base, peak_bf16, ...}", e))
        return -1;
    static const char *const keys[] = {"name", "base", "peak_bf16", "peak_fp16", "peak_fp8",
                                       "peak_fp32", "peak_fp64", "hbm_bandwidth", "memory",
                                       NULL};
    if (ir_doc_check_keys(d, "gpu", keys, NULL, e)) return -1;

    const char *name = NULL, *base = NULL;
    const ir_doc *n = ir_doc_get(d, "name"), *b = ir_doc_get(d, "base");
    if (n && ir_doc_string(n, "gpu name", &name, e)) return -1;
    if (b && ir_doc_string(b, "gpu base", &base, e)) return -1;
    memset(g, 0, sizeof *g);
    *nvlink = *nic = 0;
    int bi = -1;
    if (base) {
        bi = gpu_find(base);
        if (bi < 0) {
            char msg[512];
            gpu_unknown_msg(bi, msg, sizeof msg, base);
            return ir_doc_error(b, e, "%s", msg);
        }
    } else if (name) {
        bi = gpu_find(name); /* a known name with overrides; an unknown one is a custom type */
        if (bi < 0) bi = -1;
    }
    if (bi >= 0) {
        gpu_fill(&gpu_table[bi], g);
        *nvlink = gpu_table[bi].nvlink_bw;
        *nic = gpu_table[bi].nic_bw;
    } else {
        g->reserve_bytes = 4 * GIB; /* [RES] */
        static const char *const need[] = {"peak_bf16", "hbm_bandwidth", "memory"};
        for (size_t i = 0; i < BASE_COUNT(need); i++)
            if (!ir_doc_get(d, need[i]))
                return ir_doc_error(d, e,
                                    "custom gpu '%s' has no '%s'; give it, or name a known type "
                                    "with base: (one of %s)",
                                    name ? name : "(unnamed)", need[i], known_gpu_list());
    }
    if (name)
        g->name = base_arena_strdup(a, name);
    else if (!g->name)
        return ir_doc_error(d, e, "gpu map has neither 'name' nor 'base'; name the type");

    static const struct { const char *key; plan_dtype dt; } peaks[] = {
        {"peak_bf16", PLAN_BF16}, {"peak_fp16", PLAN_FP16}, {"peak_fp8", PLAN_FP8},
        {"peak_fp32", PLAN_FP32}, {"peak_fp64", PLAN_FP64}};
    bool fp16_given = false;
    for (size_t i = 0; i < BASE_COUNT(peaks); i++) {
        const ir_doc *v = ir_doc_get(d, peaks[i].key);
        if (!v) continue;
        if (read_rate(v, peaks[i].key, &g->peak_flops[peaks[i].dt], e)) return -1;
        if (peaks[i].dt == PLAN_FP16) fp16_given = true;
    }
    /* Tensor cores run fp16 and bf16 at the same rate on every type we know. */
    if (!fp16_given && ir_doc_get(d, "peak_bf16")) g->peak_flops[PLAN_FP16] = g->peak_flops[PLAN_BF16];
    const ir_doc *v;
    if ((v = ir_doc_get(d, "hbm_bandwidth")) && read_rate(v, "hbm_bandwidth", &g->hbm_bw, e))
        return -1;
    if ((v = ir_doc_get(d, "memory"))) {
        if (ir_doc_bytes(v, "memory", &g->mem_bytes, e)) return -1;
        if (get_positive(v, "memory", g->mem_bytes, e)) return -1;
    }
    return 0;
}

static const char *file_stem(base_arena *a, const char *path)
{
    if (!path) return NULL;
    const char *s = strrchr(path, '/');
    s = s ? s + 1 : path;
    const char *dot = strrchr(s, '.');
    size_t n = dot && dot != s ? (size_t)(dot - s) : strlen(s);
    return base_arena_strndup(a, s, n);
}

/* Relative platform paths are relative to the file that names them, like #include. */
static const char *resolve_near(base_arena *a, const char *file, const char *path)
{
    if (path[0] == '/' || !file) return base_arena_strdup(a, path);
    const char *slash = strrchr(file, '/');
    if (!slash) return base_arena_strdup(a, path);
    return base_arena_printf(a, "%.*s/%s", (int)(slash - file), file, path);
}

static int parse_nvlink(const ir_doc *d, ir_cluster *c, base_error *e)
{
    if (expect_map(d, "nvlink", "bandwidth, latency", e)) return -1;
    static const char *const keys[] = {"bandwidth", "latency", NULL};
    if (ir_doc_check_keys(d, "nvlink", keys, NULL, e)) return -1;
    const ir_doc *v;
    if ((v = ir_doc_get(d, "bandwidth")) && read_rate(v, "nvlink bandwidth", &c->nvlink_bw, e))
        return -1;
    if ((v = ir_doc_get(d, "latency")) && read_latency(v, "nvlink latency", &c->nvlink_latency, e))
        return -1;
    return 0;
}

static int parse_network(const ir_doc *d, ir_cluster *c, base_error *e)
{
    if (expect_map(d, "network",
                   "nic_bandwidth, gpus_per_nic or nics_per_node, latency, topology, "
                   "oversubscription",
                   e))
        return -1;
    static const char *const keys[] = {"nic_bandwidth", "gpus_per_nic", "nics_per_node",
                                       "latency", "topology", "oversubscription", NULL};
    if (ir_doc_check_keys(d, "network", keys, NULL, e)) return -1;
    const ir_doc *v;
    if ((v = ir_doc_get(d, "nic_bandwidth")) && read_rate(v, "nic_bandwidth", &c->nic_bw, e))
        return -1;
    if ((v = ir_doc_get(d, "latency")) && read_latency(v, "network latency", &c->nic_latency, e))
        return -1;
    const ir_doc *gpn = ir_doc_get(d, "gpus_per_nic"), *npn = ir_doc_get(d, "nics_per_node");
    if (gpn && read_count(gpn, "gpus_per_nic", 1, c->gpus_per_node, &c->gpus_per_nic, e)) return -1;
    if (gpn && c->gpus_per_node % c->gpus_per_nic)
        return ir_doc_error(gpn, e,
                            "gpus_per_nic = %lld does not divide gpus_per_node = %lld; every NIC "
                            "must serve the same number of GPUs",
                            (long long)c->gpus_per_nic, (long long)c->gpus_per_node);
    if (npn) {
        int64_t nics;
        if (read_count(npn, "nics_per_node", 1, c->gpus_per_node, &nics, e)) return -1;
        if (c->gpus_per_node % nics)
            return ir_doc_error(npn, e,
                                "nics_per_node = %lld does not divide gpus_per_node = %lld; every "
                                "NIC must serve the same number of GPUs",
                                (long long)nics, (long long)c->gpus_per_node);
        int64_t per = c->gpus_per_node / nics;
        if (gpn && per != c->gpus_per_nic)
            return ir_doc_error(npn, e,
                                "nics_per_node = %lld means %lld GPUs per NIC, but gpus_per_nic "
                                "says %lld; give only one of them",
                                (long long)nics, (long long)per, (long long)c->gpus_per_nic);
        c->gpus_per_nic = per;
    }
    if ((v = ir_doc_get(d, "topology"))) {
        const char *t;
        if (ir_doc_string(v, "topology", &t, e)) return -1;
        char key[32];
        normalize_name(t, key, sizeof key);
        if (!strcmp(key, "fattree"))
            c->topology = IR_NET_FAT_TREE;
        else if (!strcmp(key, "rail") || !strcmp(key, "railoptimized"))
            c->topology = IR_NET_RAIL;
        else
            return ir_doc_error(v, e, "unknown network topology '%s'; use fat-tree or rail", t);
    }
    if ((v = ir_doc_get(d, "oversubscription"))) {
        if (ir_doc_num(v, "oversubscription", &c->oversubscription, e)) return -1;
        if (!isfinite(c->oversubscription) || c->oversubscription < 1)
            return ir_doc_error(v, e,
                                "oversubscription must be 1 (non-blocking) or more, got '%s'; it "
                                "is the leaf's downlink:uplink ratio",
                                v->str);
    }
    return 0;
}

static int parse_calibration(const ir_doc *d, base_arena *a, ir_cluster *c, base_error *e)
{
    if (expect_map(d, "calibration", "name: number", e)) return -1;
    c->ncalib = d->n;
    c->calib_names = base_arena_calloc(a, (size_t)d->n, sizeof *c->calib_names);
    c->calib_values = base_arena_calloc(a, (size_t)d->n, sizeof *c->calib_values);
    for (int i = 0; i < d->n; i++) {
        c->calib_names[i] = base_arena_strdup(a, d->keys[i]->str);
        if (ir_doc_num(d->items[i], c->calib_names[i], &c->calib_values[i], e)) return -1;
        if (!isfinite(c->calib_values[i]))
            return ir_doc_error(d->items[i], e, "calibration '%s' must be a finite number",
                                c->calib_names[i]);
    }
    return 0;
}

int ir_cluster_from_doc(const ir_doc *d, base_arena *a, ir_cluster *c, base_error *e)
{
    memset(c, 0, sizeof *c);
    if (!d) return base_errorf(e, "no cluster given; name a cluster file or write a cluster map");
    c->file = d->file;
    if (expect_map(d, "cluster", "name, gpu, nodes, gpus_per_node, nvlink, network, ...", e))
        return -1;
    static const char *const keys[] = {"name", "description", "gpu", "nodes", "gpus_per_node",
                                       "nvlink", "network", "memory_reserve", "platform",
                                       "calibration", NULL};
    if (ir_doc_check_keys(d, "cluster", keys, NULL, e)) return -1;

    const ir_doc *v = ir_doc_get(d, "gpu");
    if (!v)
        return ir_doc_error(d, e, "cluster has no 'gpu'; add gpu: H100 (or one of %s, or a map)",
                            known_gpu_list());
    double nvlink_default, nic_default;
    if (parse_gpu(v, a, &c->gpu, &nvlink_default, &nic_default, e)) return -1;

    c->nodes = 1;
    c->gpus_per_node = 8;
    if ((v = ir_doc_get(d, "nodes")) && read_count(v, "nodes", 1, 1 << 20, &c->nodes, e)) return -1;
    if ((v = ir_doc_get(d, "gpus_per_node")) &&
        read_count(v, "gpus_per_node", 1, 1024, &c->gpus_per_node, e))
        return -1;
    if (c->nodes * c->gpus_per_node > IR_CLUSTER_MAX_DEVICES) {
        const ir_doc *at = ir_doc_get(d, "nodes") ? ir_doc_get(d, "nodes") : ir_doc_get(d, "gpus_per_node");
        return ir_doc_error(at ? at : d, e,
                            "nodes x gpus_per_node = %lld x %lld = %lld devices, more than piper "
                            "handles (%d); use fewer nodes (a strategy's behaviour shows on a "
                            "slice of the cluster)",
                            (long long)c->nodes, (long long)c->gpus_per_node,
                            (long long)(c->nodes * c->gpus_per_node), IR_CLUSTER_MAX_DEVICES);
    }

    c->nvlink_bw = nvlink_default;
    c->nvlink_latency = DEFAULT_NVLINK_LATENCY;
    c->nic_bw = nic_default;
    c->nic_latency = DEFAULT_NIC_LATENCY;
    c->gpus_per_nic = 1;
    c->topology = IR_NET_FAT_TREE;
    c->oversubscription = 1;
    if ((v = ir_doc_get(d, "nvlink")) && parse_nvlink(v, c, e)) return -1;
    if ((v = ir_doc_get(d, "network")) && parse_network(v, c, e)) return -1;
    if (c->nvlink_bw <= 0 && c->gpus_per_node > 1)
        return ir_doc_error(d, e,
                            "no NVLink bandwidth is known for GPU '%s'; set nvlink: {bandwidth: "
                            "...}",
                            c->gpu.name);
    if (c->nic_bw <= 0 && c->nodes > 1)
        return ir_doc_error(d, e,
                            "no NIC bandwidth is known for GPU '%s'; set network: {nic_bandwidth: "
                            "...}",
                            c->gpu.name);

    if ((v = ir_doc_get(d, "memory_reserve"))) {
        if (ir_doc_bytes(v, "memory_reserve", &c->gpu.reserve_bytes, e)) return -1;
        if (!isfinite(c->gpu.reserve_bytes) || c->gpu.reserve_bytes < 0)
            return ir_doc_error(v, e, "memory_reserve must be zero or more bytes");
    }
    if (c->gpu.reserve_bytes >= c->gpu.mem_bytes) {
        char r[32], m[32];
        return ir_doc_error(v ? v : d, e,
                            "memory_reserve (%s) leaves nothing of the GPU's %s; reserve less",
                            base_fmt_bytes(c->gpu.reserve_bytes, r, sizeof r),
                            base_fmt_bytes(c->gpu.mem_bytes, m, sizeof m));
    }

    if ((v = ir_doc_get(d, "platform"))) {
        const char *path;
        if (ir_doc_string(v, "platform", &path, e)) return -1;
        c->platform_xml = resolve_near(a, d->file, path);
        FILE *f = fopen(c->platform_xml, "rb");
        if (!f)
            return ir_doc_error(v, e,
                                "platform file '%s' (resolved to '%s') cannot be opened; relative "
                                "paths are relative to the cluster file",
                                path, c->platform_xml);
        fclose(f);
    }
    if ((v = ir_doc_get(d, "calibration")) && parse_calibration(v, a, c, e)) return -1;

    if ((v = ir_doc_get(d, "name"))) {
        if (ir_doc_string(v, "name", &c->name, e)) return -1;
    } else {
        c->name = file_stem(a, d->file);
        if (!c->name)
            c->name = base_arena_printf(a, "%lldx%lld-%s", (long long)c->nodes,
                                        (long long)c->gpus_per_node, c->gpu.name);
    }
    return 0;
}
