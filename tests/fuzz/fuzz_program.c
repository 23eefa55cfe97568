/* fuzz_program.c — the fuzz target of the program loader: any bytes are parsed as a document
 * (YAML or JSON) and loaded with ir_program_from_doc against a fixed in-memory model (a small
 * MoE, so EP directives mean something) and cluster (2 nodes x 4 GPUs). The model and cluster
 * come from embedded YAML, so the run touches no file but the ones an input names (schedule
 * order files, resolved against a directory that does not exist).
 *
 * Besides crashes and sanitizer reports, it aborts when a load breaks the loader's promises:
 * status 0 or -1, an error message exactly when it fails, directives that are what they say.
 * The same file links into fuzz_replay_program (a plain ctest executable) with replay_main.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/program.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char MODEL_YAML[] = "name: fuzz_moe\n"
                                 "family: llama\n"
                                 "layers: 4\n"
                                 "hidden: 64\n"
                                 "heads: 4\n"
                                 "kv_heads: 2\n"
                                 "ffn: 128\n"
                                 "experts: 4\n"
                                 "expert_ffn: 64\n"
                                 "top_k: 2\n"
                                 "capacity_factor: 1.25\n"
                                 "moe_first: 1\n"
                                 "moe_every: 2\n"
                                 "vocab: 256\n"
                                 "seq: 32\n";

static const char CLUSTER_YAML[] = "name: fuzz_cluster\n"
                                   "gpu: H100\n"
                                   "nodes: 2\n"
                                   "gpus_per_node: 4\n"
                                   "nvlink: {bandwidth: 450GB/s, latency: 1us}\n"
                                   "network: {nic_bandwidth: 400Gb/s, gpus_per_nic: 1, latency: 5us}\n";

static void require(bool ok, const char *what, const base_error *e)
{
    if (!ok) {
        fprintf(stderr, "fuzz_program: broken promise: %s (%s)\n", what, e && e->set ? e->msg : "");
        abort();
    }
}

/* Built once; the arena lives as long as the process (still reachable, so no leak report). */
static base_arena fixed_arena;
static ir_model fixed_model;
static ir_cluster fixed_cluster;

static void load_fixed(void)
{
    static bool loaded;
    if (loaded) return;
    base_error e;
    base_error_clear(&e);
    base_arena_init(&fixed_arena);
    ir_doc *md = NULL, *cd = NULL;
    int rc = ir_doc_parse(&fixed_arena, "fuzz_model.yaml", MODEL_YAML, sizeof MODEL_YAML - 1, &md,
                          &e);
    rc = rc ? rc : ir_model_from_doc(md, &fixed_arena, &fixed_model, &e);
    rc = rc ? rc : ir_doc_parse(&fixed_arena, "fuzz_cluster.yaml", CLUSTER_YAML,
                                sizeof CLUSTER_YAML - 1, &cd, &e);
    rc = rc ? rc : ir_cluster_from_doc(cd, &fixed_arena, &fixed_cluster, &e);
    require(rc == 0, "the fixed model and cluster load", &e);
    loaded = true;
}

static void check_filter(const ir_filter *f, const base_error *e)
{
    require(f->n >= 0 && (f->n == 0 || f->m), "a filter's matches exist", e);
    for (int i = 0; i < f->n; i++)
        require((unsigned)f->m[i].tag < IR_NTAGS && ir_tag_name(f->m[i].tag), "filter tags are tags", e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    load_fixed();
    base_arena a;
    base_error e;
    base_arena_init(&a);
    base_error_clear(&e);
    ir_doc *d = NULL;
    if (ir_doc_parse(&a, "fuzz.in", (const char *)data, size, &d, &e) == 0) {
        require(!e.set, "a parsed document has no error", &e);
        ir_program p;
        int rc = ir_program_from_doc(d, "/nonexistent/piper-fuzz", &fixed_model, &fixed_cluster,
                                     &a, &p, &e);
        require(rc == 0 || rc == -1, "status is 0 or -1", &e);
        require((rc == 0) == !e.set, "an error is recorded exactly when the load fails", &e);
        require(!e.set || e.msg[0], "an error has a message", &e);
        if (rc == 0) {
            require(p.ndirectives >= 0 && (p.ndirectives == 0 || p.directives),
                    "directives exist", &e);
            require(p.global_batch > 0 && p.micro_batch > 0, "batch sizes are positive", &e);
            for (int i = 0; i < p.ndirectives; i++) {
                const ir_directive *dir = &p.directives[i];
                require((unsigned)dir->op < IR_NDIR && ir_directive_name(dir->op),
                        "directive ops are ops", &e);
                require(dir->index == i, "directives are numbered in order", &e);
                require(dir->ndevices >= 0 && (dir->ndevices == 0 || dir->devices),
                        "device lists exist", &e);
                check_filter(&dir->filter, &e);
                for (int g = 0; g < dir->ngroups; g++)
                    for (int k = 0; k < dir->group_nfilters[g]; k++)
                        check_filter(&dir->groups[g][k], &e);
            }
        }
    }
    base_arena_free(&a);
    return 0;
}
