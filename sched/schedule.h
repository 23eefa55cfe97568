/* schedule.h — the schedule library inside sched/ (not part of the compiler's contract): a
 * pipeline schedule as a table of per-rank action sequences, the builders that generate the
 * well-known schedules (../shared/reference/schedules.md; one row each of SCHED_BUILDER_TABLE,
 * below), the per-rank order file in PyTorch's
 * action notation (order_csv.c), and the `schedule` directive pass that turns a table into one
 * `order` directive per rank (schedule.c).
 *
 * The table is the one representation every producer and consumer shares: builders write it,
 * the CSV reader and writer convert it to and from text, the directive pass lowers it to orders,
 * and --emit-order rebuilds it from a compiled plan. So "a builder round-trips through the CSV"
 * and "the plan runs the builder's order" are both plain table comparisons. */
#ifndef PIPER_SCHED_SCHEDULE_H
#define PIPER_SCHED_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "sched_internal.h"

/* One unit of work of one stage: F, B (full backward), BI (PyTorch's I) or BW (W). */
typedef struct sched_action {
    int32_t stage;
    int32_t mb;
    uint8_t pass;   /* PLAN_PASS_F, PLAN_PASS_B, PLAN_PASS_BI or PLAN_PASS_BW */
} sched_action;

/* One slot of a rank's sequence: one action, or an overlapped pair (n = 2: an F&B pair whose
 * nodes may interleave, PyTorch's OVERLAP_F_B). `col` is the 1-based CSV column it was read
 * from (0 when a builder made it), so that validation errors can point at the cell. */
typedef struct sched_cell {
    int n;
    sched_action a[2];
    int col, text_col;  /* CSV: cell index and character column */
} sched_cell;

typedef struct sched_row {
    int n, cap;
    sched_cell *cells;
    int line;           /* CSV line of the row (0 when a builder made it) */
} sched_row;

typedef struct sched_table {
    int nranks;
    sched_row *rows;    /* rows[r]: rank r's launch order of compute work */
} sched_table;

void sched_table_init(sched_table *t, int nranks);
void sched_table_free(sched_table *t);
void sched_table_push(sched_table *t, int rank, int stage, plan_pass pass, int mb);
void sched_table_push_pair(sched_table *t, int rank, sched_action first, sched_action second);
/* Equal rank by rank, cell by cell (positions in a file are not compared). */
bool sched_table_equal(const sched_table *a, const sched_table *b);
/* "0F3", "2I1", "(0F7;7B3)OVERLAP_F_B" — PyTorch's spelling of a cell. Returns buf. */
const char *sched_cell_str(const sched_cell *c, char *buf, size_t n);

/* The checks every order must pass (schedules.md, "Per-rank order notation"): every stage has
 * m forwards, one per micro-batch; each micro-batch has either one B or one I and one W (so I and
 * W counts are equal and B + (I+W)/2 = m); a backward comes after its forward and W after its I;
 * a stage lives on one rank; no action twice. nstages / m <= 0 are inferred (the largest stage
 * and micro-batch named, plus one). Errors name the rank and column and, when `file` is given,
 * the position in it: "orders.csv:3:9: rank 2, column 4 ('2B1'): ...". */
int sched_table_validate(const sched_table *t, const char *file, int nstages, int m,
                         base_error *e);

/* ---------------------------------------------------------------- builders */

/* How a builder lays stages on ranks: one row per layout, X(ID, rule) where the rule is what a
 * placement error says the layout wants. */
#define SCHED_LAYOUT_TABLE(X)                                                                    \
    X(ONE, "one stage per rank")                     /* stage r on rank r (v = 1) */            \
    X(LOOP, "stage s lives on rank s mod p")         /* chunk s / p (interleaved) */            \
    X(V, "rank r holds stages r and 2p-1-r")         /* zbv, dualpipev */                       \
    X(MIRROR, "rank r holds stages r and 2p-1-r")    /* DualPipe: stage p+i, the mirror of    \
                                                        stage i, on rank p-1-i */

typedef enum {
#define SCHED_LAYOUT_ENUM(id, rule) SCHED_LAYOUT_##id,
    SCHED_LAYOUT_TABLE(SCHED_LAYOUT_ENUM)
#undef SCHED_LAYOUT_ENUM
    SCHED_NLAYOUTS
} sched_layout;

typedef struct sched_params {
    int p;            /* pipeline ranks */
    int m;            /* micro-batches (DualPipe: in all, m/2 per direction) */
    int v;            /* chunks (stages) per rank: interleaved only; others imply it */
    int group_size;   /* interleaved: micro-batches per group N (0 = p) */
} sched_params;

/* A builder: fill t (initialised here) or fail with "what is wrong; what to do" in why. Each
 * follows schedules.md exactly; the table passes sched_table_validate. */
typedef int (*sched_build_fn)(const sched_params *sp, sched_table *t, char *why, size_t n);

/* What a builder needs beyond the layout (row flags). */
enum {
    SCHED_NEEDS_MIRROR = 1,        /* DualPipe's second pipeline (dualpipe_mirror.c) is made
                                      before the sends and receives: stages p..2p-1 */
};

/* The schedule builders, one row each: the only list of them. A new schedule is its builder's
 * file (sched/schedule_<name>.c, with its build function), one row here, and its source line in
 * sched/CMakeLists.txt; the enum, the prototypes, the name lookup, the option parsing and every
 * list of names in messages come from the table.
 *
 *   X(ID, name, layout, build, flags, doc, OPTIONS)
 *
 * name: what `schedule {name: ...}` takes (case-insensitive) and what messages print; layout:
 * the placement the pass checks (SCHED_LAYOUT_*); doc: the builder in one line, with its
 * preconditions (the builder checks them and says why); OPTIONS: the directive keys the
 * builder reads, as O(key, sched_params field, doc) — none for most. */
#define SCHED_BUILDER_TABLE(X, O)                                                                \
    X(GPIPE, "gpipe", ONE, sched_build_gpipe, 0,                                                 \
      "all m forwards, then all m backwards (GPipe)", )                                          \
    X(1F1B, "1f1b", ONE, sched_build_1f1b, 0,                                                    \
      "p-r-1 warm-up forwards, then one forward and one backward (PipeDream-flush)", )           \
    X(INTERLEAVED, "interleaved-1f1b", LOOP, sched_build_interleaved, 0,                         \
      "1F1B over v chunks per rank (Megatron-LM); p <= N <= m and not 0 < m mod N < p",          \
      O("group_size", group_size, "micro-batches per group, default p")                         \
      O("chunks", v, "v, checked against the placement"))                                        \
    X(ZBH1, "zb-h1", ONE, sched_build_zbh1, 0,                                                   \
      "Zero Bubble H1: backward split into I and W, W deferred into the bubbles", )              \
    X(ZBH2, "zb-h2", ONE, sched_build_zbh2, 0,                                                   \
      "Zero Bubble H2: twice H1's warm-up forwards, sent ahead", )                               \
    X(ZBV, "zbv", V, sched_build_zbv, 0,                                                         \
      "Zero Bubble V: two chunks per rank in a V, I and W", )                                    \
    X(DUALPIPE, "dualpipe", MIRROR, sched_build_dualpipe_bidir, SCHED_NEEDS_MIRROR,           \
      "DualPipe: two pipelines fed from both ends, overlapped F&B pairs; p even, m even, "       \
      "m >= 2p", )                                                                               \
    X(DUALPIPEV, "dualpipev", V, sched_build_dualpipev, 0,                                       \
      "DualPipeV: DualPipe folded into a V on p ranks; m >= 2p", )

typedef enum {
#define SCHED_KIND_ENUM(id, name, layout, build, flags, doc, options) SCHED_##id,
    SCHED_BUILDER_TABLE(SCHED_KIND_ENUM, )
#undef SCHED_KIND_ENUM
    SCHED_NKINDS
} sched_kind;

#define SCHED_BUILD_DECL(id, name, layout, build, flags, doc, options) \
    int build(const sched_params *sp, sched_table *t, char *why, size_t n);
SCHED_BUILDER_TABLE(SCHED_BUILD_DECL, )
#undef SCHED_BUILD_DECL

/* A builder option: a directive key stored, as a positive integer, in a sched_params field. */
typedef struct sched_option {
    const char *key;
    size_t offset;     /* of the int in sched_params */
    const char *doc;
} sched_option;

/* One row of the table. */
typedef struct sched_builder {
    const char *name;
    sched_layout layout;
    sched_build_fn build;
    unsigned flags;                /* SCHED_NEEDS_* */
    const char *doc;
    const sched_option *options;   /* ends with a NULL key */
} sched_builder;

/* The row of a kind (NULL for an invalid kind); the kind of a builder name ("1f1b", ...,
 * case-insensitive), -1 if unknown; its canonical name and layout. */
const sched_builder *sched_kind_info(sched_kind k);
int sched_kind_of(const char *name);
const char *sched_kind_name(sched_kind k);
sched_layout sched_kind_layout(sched_kind k);
/* The builder names, NULL-terminated, in table order (for "did you mean" and messages). */
extern const char *const sched_kind_names[];
/* What a placement error says a layout wants ("stage s lives on rank s mod p"). */
const char *sched_layout_rule(sched_layout l);
/* Rank and chunk of stage s under a layout with p ranks. */
int sched_layout_rank(sched_layout l, int p, int s);
int sched_layout_chunk(sched_layout l, int p, int s);

/* Runs the kind's builder (its row's build). */
int sched_build(sched_kind k, const sched_params *sp, sched_table *t, char *why, size_t n);
/* Zero Bubble with c = 1 (H1) or 2 (H2) warm-up forwards per later rank; DualPipe (v_shape
 * false) or DualPipeV (true): the rows' builders, and what the mirror pass calls for
 * DualPipe's preconditions. */
int sched_build_zbh(int c, const sched_params *sp, sched_table *t, char *why, size_t n);
int sched_build_dualpipe(bool v_shape, const sched_params *sp, sched_table *t, char *why, size_t n);

/* ---------------------------------------------------------------- order files (order_csv.c) */

/* Reads PyTorch's CSV (one row per rank, one action per cell, empty cell = idle). Lines whose
 * first character is '#' are comments; communication and FSDP actions (SEND_F, RECV_B, UNSHARD,
 * REDUCE_GRAD, ...) are skipped, since piper derives communication itself. Syntax errors only:
 * the caller validates. */
int sched_order_csv_read(const char *name, const char *text, size_t len, sched_table *t,
                         base_error *e);
int sched_order_csv_read_file(const char *path, sched_table *t, base_error *e);
void sched_order_csv_write(const sched_table *t, FILE *f);

/* ---------------------------------------------------------------- the directive pass */

int sched_dir_schedule(sched_ctx *x, const ir_directive *d, base_error *e);
/* The expanded program (sched_compilation.expanded): directives as run, with every schedule
 * replaced by its orders. */
void sched_expanded_add(sched_compilation *c, const ir_directive *d);
/* The launch order of a compiled pipelined program as a table: one row per pipeline rank
 * (ranks ordered by their lowest stage), from the compute instructions of the rank's first
 * device; two actions an order group named together become one overlapped cell. */
int sched_table_from_plan(const sched_compilation *c, sched_table *t, base_error *e);

#endif
