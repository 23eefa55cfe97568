/* program.h — a training program: the model and cluster it refers to, the batch, dtypes,
 * annotations that tag regions (PP, EP, TP), and the ordered list of directives (part of ir/,
 * included by ir.h). Programs load from YAML or JSON; a bare JSON array of directives written to
 * Piper's schema loads too, with model and cluster given separately. See docs/programs.md. */
#ifndef PIPER_IR_PROGRAM_H
#define PIPER_IR_PROGRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"
#include "../plan/plan.h"
#include "cluster.h"
#include "doc.h"
#include "model.h"

/* The directives, one row each: the only list of them (program_directives.c parses them, the
 * compiler's driver runs them). A new directive is one row here, its pass in its own
 * sched/dir_<name>.c and its section in docs/programs.md; the enum, the name lookup, "did you
 * mean", the lists of ops and keys in messages, which directives have a filter and the pass
 * dispatch all come from the table.
 *
 *   X(ID, name, pass, parse, open, doc, KEYS)
 *
 * pass: the compiler pass (sched/) that runs it; parse: the directive's own reader for its
 * SPECIAL keys (program_directives.c), or NULL; open: other keys pass the loader too (a
 * schedule builder reads its own options); doc: the directive in one line. KEYS is its key
 * schema, besides `op`, in the order messages list them, as
 *
 *   K(key, type, field, default, required, hint)
 *
 * type: IR_KEY_* below, read into ir_directive.field (default when absent); required: NULL, or
 * what to do when it is missing ("%s has no '%s'; <required>"); hint: what a value out of
 * range should be (COUNT, BYTES). The generic reader walks the keys in order and calls `parse`
 * once, where the first SPECIAL key stands. Piper's spellings are keys of their own: split's
 * dim_name (the same key as dim) and replicate's shard_grads / shard_params (ZeRO 2 / 3). */
#define IR_DIRECTIVE_TABLE(X, K)                                                                 \
    X(PLACE, "place", sched_dir_place, NULL, false,                                              \
      "runs the matching nodes on one device group (SPMD)",                                      \
      K("filter", FILTER, filter, 0, NULL, NULL)                                                 \
      K("devices", DEVICES, devices, 0, IR_DIRECTIVE_DEVICES_HINT, NULL)                         \
      K("device", ALIAS, devices, 0, NULL, NULL)                                                 \
      K("stream", STRING, stream, 0, NULL, NULL))                                                \
    X(REPLICATE, "replicate", sched_dir_replicate, parse_replicate, false,                       \
      "data parallelism over a device group, with ZeRO stages 0-3 and gradient buckets",         \
      K("filter", FILTER, filter, 0, NULL, NULL)                                                 \
      K("devices", DEVICES, devices, 0, IR_DIRECTIVE_DEVICES_HINT, NULL)                         \
      K("device", ALIAS, devices, 0, NULL, NULL)                                                 \
      K("zero", SPECIAL, zero, 0, NULL, NULL)                                                    \
      K("bucket_size", BYTES, bucket_bytes, IR_DEFAULT_BUCKET_BYTES, NULL,                       \
        "zero (one bucket per region) or a size such as 25MB")                                   \
      K("reduce_stream", STRING, reduce_stream, 0, NULL, NULL)                                   \
      K("gather_stream", STRING, gather_stream, 0, NULL, NULL)                                   \
      K("shard_grads", SPECIAL, zero, 0, NULL, NULL)                                             \
      K("shard_params", SPECIAL, zero, 0, NULL, NULL))                                           \
    X(SHARD, "shard", sched_dir_shard, NULL, false,                                              \
      "expert parallelism: the matching expert blocks split over a device group",                \
      K("filter", FILTER, filter, 0, NULL, NULL)                                                 \
      K("devices", DEVICES, devices, 0, IR_DIRECTIVE_DEVICES_HINT, NULL)                         \
      K("device", ALIAS, devices, 0, NULL, NULL)                                                 \
      K("stream", STRING, stream, 0, NULL, NULL))                                                \
    X(SHARD_TENSOR, "shard_tensor", sched_dir_shard_tensor, NULL, false,                         \
      "Megatron tensor parallelism over a device group, optionally sequence parallel",           \
      K("filter", FILTER, filter, 0, NULL, NULL)                                                 \
      K("devices", DEVICES, devices, 0, IR_DIRECTIVE_DEVICES_HINT, NULL)                         \
      K("device", ALIAS, devices, 0, NULL, NULL)                                                 \
      K("stream", STRING, stream, 0, NULL, NULL)                                                 \
      K("sequence_parallel", BOOL, sequence_parallel, 0, NULL, NULL))                            \
    X(SPLIT, "split", sched_dir_split, parse_split, false,                                       \
      "micro-batching: the matching sub-DAG copied once per micro-batch",                        \
      K("filter", FILTER, filter, 0, NULL, NULL)                                                 \
      K("dim", SPECIAL, dim_name, 0, NULL, NULL)                                                 \
      K("dim_name", SPECIAL, dim_name, 0, NULL, NULL)                                            \
      K("num_microbatches", COUNT, num_microbatches, 0,                                          \
        "say how many micro-batches, e.g. num_microbatches: 8", "give at least 1 micro-batch"))  \
    X(ORDER, "order", sched_dir_order, parse_order, false,                                       \
      "temporal edges from each group of nodes to the next",                                     \
      K("filters", SPECIAL, groups, 0,                                                           \
        "list the groups to order, e.g. filters: [[{PASS: F, MB: 0}], [{PASS: B, MB: 0}]]",     \
        NULL)                                                                                    \
      K("mirror", SPECIAL, mirror, 0, NULL, NULL))                                               \
    X(RECOMPUTE, "recompute", sched_dir_recompute, parse_recompute, false,                       \
      "activation checkpointing of the matching regions, full or selective",                     \
      K("filter", FILTER, filter, 0, NULL, NULL)                                                 \
      K("mode", SPECIAL, recompute, 0, NULL, NULL))                                              \
    X(SCHEDULE, "schedule", sched_dir_schedule, parse_schedule, true,                            \
      "a pipeline schedule builder or a per-rank order file, expanded into order directives",    \
      K("name", SPECIAL, schedule, 0, NULL, NULL)                                                \
      K("file", SPECIAL, schedule_file, 0, NULL, NULL))                                          \
    X(MESH, "mesh", sched_dir_mesh, parse_mesh, false,                                           \
      "named axes over each stage's device group, outermost first (Piper's mesh)",               \
      K("axes", SPECIAL, naxes, 0,                                                           \
        "name the axes and their sizes, e.g. axes: [[dp, 2], [tp, 2]]", NULL))                   \
    X(FUSE_COLLECTIVES, "fuse_collectives", sched_dir_fuse_collectives, NULL, false,             \
      "merges the matching same-kind collectives of a region and stream into one",               \
      K("filter", FILTER, filter, 0, NULL, NULL))                                                \
    X(ROUTE, "route", sched_dir_route, parse_route, false,                                       \
      "how model inputs reach the stages that read them (Piper's route)",                        \
      K("mode", SPECIAL, route_mode, 0, NULL, NULL))                                             \
    X(RING_EXCHANGE, "ring_exchange", sched_dir_ring_exchange, parse_ring_exchange, false,       \
      "context parallelism's ring exchange (Piper's; refused: not yet supported)",               \
      K("tensors", SPECIAL, stream, 0, NULL, NULL)                                               \
      K("filter", SPECIAL, stream, 0, NULL, NULL)                                                \
      K("devices", SPECIAL, stream, 0, NULL, NULL)                                               \
      K("device", SPECIAL, stream, 0, NULL, NULL)                                                \
      K("stream", SPECIAL, stream, 0, NULL, NULL)                                                \
      K("hoist", SPECIAL, stream, 0, NULL, NULL)                                                 \
      K("distance", SPECIAL, stream, 0, NULL, NULL))

/* Keys of Piper's directive schema that piper reads and does not act on, accepted with a warning
 * (where a directive of piper's reads the key itself, it is that directive's). Piper's
 * src/directives.py reads replicate's prefetch_distance (a temporal edge bounding how far ahead
 * a ZeRO-3 gather issues); piper's ZeRO-3 gathers prefetch two regions ahead, always. Why:
 * docs/programs.md. */
#define IR_PIPER_IGNORED_TABLE(X) X("prefetch_distance")

#define IR_DIRECTIVE_DEVICES_HINT "say which devices run it, e.g. devices: [0, 1] or devices: \"0-7\""

typedef enum {
#define IR_DIRECTIVE_ENUM(id, name, pass, parse, open, doc, keys) IR_DIR_##id,
    IR_DIRECTIVE_TABLE(IR_DIRECTIVE_ENUM, )
#undef IR_DIRECTIVE_ENUM
    IR_NDIR
} ir_directive_op;

/* How the generic reader reads a key into its ir_directive field. */
typedef enum {
    IR_KEY_FILTER,   /* ir_filter; absent: every node, located at the directive */
    IR_KEY_DEVICES,  /* the device group: devices and ndevices */
    IR_KEY_STRING,   /* const char * */
    IR_KEY_BOOL,     /* bool */
    IR_KEY_COUNT,    /* int64_t, 1 .. INT32_MAX */
    IR_KEY_BYTES,    /* double, >= 0, with units (25MB) */
    IR_KEY_SPECIAL,  /* read by the directive's own parser */
    IR_KEY_ALIAS,    /* another spelling of the key before it (Piper's `device` for
                        `devices`), read there; giving both is an error */
    IR_NKEY_TYPES
} ir_key_type;

/* One key of a directive's schema (a K(...) of the table). */
typedef struct ir_directive_key {
    const char *key;
    ir_key_type type;
    size_t offset;         /* of its field in ir_directive */
    double dflt;
    const char *required;  /* NULL: optional */
    const char *hint;
} ir_directive_key;

/* One row of the table. */
typedef struct ir_directive_info {
    const char *name;
    bool open;
    const char *doc;
    const ir_directive_key *keys;  /* ends with a NULL key */
    const char *const *known;      /* "op" and the keys, NULL-terminated: what messages list */
} ir_directive_info;

/* Tags that filters match. PASS values are plan_pass; REGION values are ir_region_kind. */
typedef enum {
    IR_TAG_PP,      /* pipeline stage */
    IR_TAG_EP,      /* expert block (value: stage-local index; "*" for any) */
    IR_TAG_TP,      /* tensor-parallel block */
    IR_TAG_MB,      /* micro-batch */
    IR_TAG_PASS,    /* F, B, BI, BW, R, UPD */
    IR_TAG_LAYER,   /* transformer layer */
    IR_TAG_REGION,  /* region kind: embed, attn, mlp, moe_gate, moe_experts, moe_combine, head */
    IR_TAG_CHUNK,   /* model chunk on a rank (interleaved / V schedules) */
    IR_NTAGS
} ir_tag;

typedef struct ir_tag_match {
    ir_tag tag;
    bool any;       /* "*": the node carries the tag, with any value */
    int64_t value;  /* stage, layer, mb, chunk; or the enum value of PASS / REGION */
    bool none;      /* null (Piper's None): the node does not carry the tag (value is -1) */
} ir_tag_match;

/* A conjunction of tag matches; the empty filter `{}` matches every node. */
typedef struct ir_filter {
    int n;
    ir_tag_match *m;
    int line, col;  /* where the filter was written */
} ir_filter;

/* replicate's bucket_size when the program gives none: PyTorch DDP's default. */
#define IR_DEFAULT_BUCKET_BYTES 25e6

typedef struct ir_directive {
    ir_directive_op op;
    int index;             /* 0-based position in the program */
    const char *file;
    int line, col;
    const ir_doc *doc;     /* the directive as written (builders read their own options) */

    ir_filter filter;      /* place, replicate, shard, shard_tensor, split, recompute */
    int ndevices;
    int32_t *devices;      /* place/replicate/shard/shard_tensor: the device group */
    const char *stream;    /* logical stream, NULL for the default */

    /* replicate */
    int zero;              /* 0..3 (Piper's shard_grads => 2, shard_params => 3) */
    double bucket_bytes;   /* gradient bucket size; 0 = one bucket per region; default
                              IR_DEFAULT_BUCKET_BYTES */
    const char *reduce_stream, *gather_stream;

    /* shard_tensor */
    bool sequence_parallel;

    /* split: dim_name is the name of the micro-batch tag (Piper's tools write MB); filters may
       name the tag by it as well as by MB */
    const char *dim_name;
    int64_t num_microbatches;

    /* order: groups[g] is a list of filters; filters of one group may interleave */
    int ngroups;
    int *group_nfilters;
    ir_filter **groups;
    bool mirror;           /* `mirror: true`: DualPipe's second pipeline is made first (stages
                              p..2p-1 copies of 0..p-1 for micro-batches m/2..m-1); written by
                              --emit-directives on the first order of a dualpipe schedule */

    /* recompute */
    ir_recompute recompute;

    /* mesh: axes[i] = {name, size}, outermost first; their product is each stage's group size */
    int naxes;
    const char **axis_names;
    int64_t *axis_sizes;

    /* route: "thread" (the default) or "consumers" */
    const char *route_mode;

    /* schedule */
    const char *schedule;  /* builder name as written (the schedule pass looks it up), or NULL */
    const char *schedule_file;  /* or the order file, resolved against the program */
} ir_directive;

typedef struct ir_annotations {
    int64_t pp_stages;         /* PP: the number of stages (0 = no PP tags); an even split of
                                  the layers unless pp_ranges says which layers each holds */
    int npp_ranges;            /* explicit [first, last] layer ranges, one per stage (then
                                  pp_stages == npp_ranges), or 0 */
    int64_t (*pp_ranges)[2];
    bool ep;                   /* tag the expert blocks EP */
    bool tp;                   /* tag attention and MLP blocks TP */
} ir_annotations;

typedef enum { IR_OPT_ADAMW, IR_OPT_SGD } ir_optimizer;

typedef struct ir_program {
    const char *file;
    const char *name;          /* the program's `name`, else the file's stem */
    ir_model model;
    ir_cluster cluster;
    int64_t global_batch;      /* sequences per step, all replicas together */
    int64_t micro_batch;       /* sequences per micro-batch on one replica */
    int batch_line, batch_col; /* where `batch` was written (0 when defaulted) */
    plan_dtype param_dtype, act_dtype, grad_dtype, opt_dtype;
    ir_optimizer optimizer;
    double grad_clip;          /* 0 = no clipping */
    /* optimizer hyper-parameters (the executor's; the simulator ignores them) */
    double lr, weight_decay, beta1, beta2, eps, momentum;
    ir_annotations ann;
    int ndirectives;
    ir_directive *directives;
    bool from_piper_array;     /* loaded from a bare JSON array of directives */
    const char *mb_tag;        /* the micro-batch tag's name as split's dim_name gives it ("MB"
                                  when no split names one); filters may use it or MB */
} ir_program;

/* Loads a program file. model_path / cluster_path override the program's own references (and
 * are required for a bare directive array). Relative references resolve against the program's
 * directory. Warnings (keys Piper defines that piper ignores) go into e->warnings. */
int ir_program_load(const char *path, const char *model_path, const char *cluster_path,
                    base_arena *a, ir_program *p, base_error *e);

/* The same from a parsed document. `dir` resolves relative references; a non-NULL model or
 * cluster is used instead of the program's own reference (the fuzz target and tests use this
 * to load programs from memory). */
int ir_program_from_doc(const ir_doc *d, const char *dir, const ir_model *model,
                        const ir_cluster *cluster, base_arena *a, ir_program *p, base_error *e);

/* Sets the batch of a loaded program (piper-compile/piper-sim --micro-batch, --global-batch):
 * micro > 0 replaces the micro-batch; global > 0 replaces the global batch, and global == 0 keeps
 * it, except for a bare array, whose global batch is derived again as micro x M x D (M the largest
 * num_microbatches, D the largest replicate group). The global batch must be a multiple of the
 * micro-batch; the compiler checks the rest (micro x micro-batches x data-parallel degree). */
int ir_program_set_batch(ir_program *p, int64_t micro, int64_t global, base_error *e);

/* The pipeline stage of every region under the program's PP annotation (what its PP tag is):
 * layers by pp_ranges, or an even split in which the first (layers mod N) stages hold one layer
 * more than the others; embed goes with stage 0 and head with the last stage. Fills
 * out[ir_model_nregions(&p->model)]; every region is stage 0 when the program annotates no PP.
 * Returns the number of stages (1 without PP). */
int64_t ir_program_stage_of_region(const ir_program *p, base_arena *a, int32_t *out);
/* The stage of a transformer layer under the even split of `layers` over `stages`: the extra
 * layers go to the early stages (the last stage also carries the LM head and the loss). */
int64_t ir_even_stage_of_layer(int64_t layers, int64_t stages, int64_t layer);

const char *ir_directive_name(ir_directive_op op);
/* The row of a directive (NULL for an invalid op); the op of a name (case-insensitive), -1 if
 * none; whether the directive reads the given key (`op` included). */
const ir_directive_info *ir_directive_info_of(ir_directive_op op);
int ir_directive_of(const char *name);
bool ir_directive_takes(ir_directive_op op, const char *key);
const char *ir_tag_name(ir_tag t);
const char *ir_region_kind_name(ir_region_kind k);
/* Pass names as filters write them: F, B, BI, BW, R, UPD (AUX has no filter spelling: "AUX"). */
const char *ir_pass_tag_name(plan_pass p);

/* The keys Piper's directive schema defines that piper accepts and ignores (with a warning),
 * NULL-terminated, from IR_PIPER_IGNORED_TABLE. Any other unknown key is an error. */
extern const char *const ir_piper_ignored_keys[];

/* The closest of the NULL-terminated candidates to a mistyped word (case-insensitive edit
 * distance, or a prefix of four characters or more), NULL when none is close enough: the
 * "did you mean" of every message. */
const char *ir_suggest(const char *word, const char *const *cands);
/* "a, b, c": the NULL-terminated names joined for a message. Returns buf. */
char *ir_join_names(char *buf, size_t n, const char *const *names);

#endif
