/* viz.h — the contract of piper's figures (piper-viz): the global DAG, the per-rank schedule grid
 * of pipeline papers, and the timeline of a Chrome trace, rendered by Graphviz into SVG, PDF, PNG
 * or dot.
 *
 * Every figure is made in two steps that are separately testable: a builder turns piper's data (a
 * DAG, a plan, a trace) into Graphviz's dot language, and viz_render lays it out and renders it.
 * The DAG uses the `dot` layout; the grid and the timeline place every box themselves (pos="x,y!")
 * and use the `nop` layout, so that a box's x is its start time and its width its duration.
 *
 * Every box of a grid or timeline carries an SVG id and class (schedule: id "r2-F-5" = rank 2,
 * forward, micro-batch 5, class "box F"; timeline: id "ev-PID-TID-K", class "event"; lanes, legend
 * entries and axis ticks likewise), so that tests and scripts can read figures back.
 *
 * The Chrome-trace *writer* that sim/ and exec/ use is viz/trace.h, a separate library
 * (piper_trace) that needs neither the compiler nor Graphviz. */
#ifndef PIPER_VIZ_H
#define PIPER_VIZ_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/base.h"
#include "../sched/sched.h"

/* ---------------------------------------------------------------- rendering */

typedef enum { VIZ_FMT_SVG, VIZ_FMT_PDF, VIZ_FMT_PNG, VIZ_FMT_DOT, VIZ_NFMT } viz_format;

const char *viz_format_name(viz_format f);
/* "svg", "pdf", "png", "dot" (case-insensitive); -1 when none of these. */
int viz_format_parse(const char *name);
/* The format a file name's extension asks for; -1 when it names none. */
int viz_format_of_path(const char *path);

/* Lays out `dot` (a graph in Graphviz's language) with `engine` ("dot" or "nop") and renders it
 * as `fmt` into the file `path`. Graphviz's own complaints become the error message. */
int viz_render_file(const char *dot, const char *engine, viz_format fmt, const char *path, base_error *e);
/* The same into memory (out is appended to; binary formats included). */
int viz_render_data(const char *dot, const char *engine, viz_format fmt, base_buf *out, base_error *e);

/* ---------------------------------------------------------------- the DAG */

enum {
    VIZ_COLLAPSE_MB = 1 << 0,     /* one node per region and pass across micro-batches */
    VIZ_COLLAPSE_LAYERS = 1 << 1  /* the layers of a stage merged into one node per pass */
};

typedef struct viz_dag_options {
    int device;          /* draw only what this device runs; -1: everything */
    unsigned collapse;   /* VIZ_COLLAPSE_* */
    int max_nodes;       /* refuse figures with more nodes than this (0: 600), naming the options
                            that make them smaller: dot's layout time grows steeply with a
                            training DAG's long edges (F to B of a region spans the whole step),
                            from seconds at 300 nodes to many minutes at 1,000 */
    const char *title;   /* NULL: one that says what is drawn */
} viz_dag_options;

/* "mb", "layers", "mb,layers" -> VIZ_COLLAPSE_*; -1 with a message otherwise. */
int viz_collapse_parse(const char *s, unsigned *out, base_error *e);

/* The global DAG of a compiled program: compute nodes are boxes filled by pass, communication nodes
 * are ellipses (p2p) and hexagons (collectives) with dashed outlines, ORDER dummies points; data
 * edges solid, temporal edges dashed; one cluster per placement. Writes dot for the `dot` engine. */
int viz_dag_from_ir(const ir_dag *g, const viz_dag_options *o, base_buf *dot, base_error *e);
/* The instruction dependency graph of a plan: per device (one cluster each), its compute and
 * communication instructions; data edges from the last writer of a buffer to its readers and from
 * a send to its receive, temporal edges for stream order and record/wait pairs. In both, columns
 * come from data edges (and ORDER dummies); other temporal edges are drawn over the layout
 * without constraining it. */
int viz_dag_from_plan(const plan_set *p, const viz_dag_options *o, base_buf *dot, base_error *e);

/* ---------------------------------------------------------------- the schedule grid */

/* An overlapped F&B pair: two actions (stage, pass, micro-batch) a rank runs interleaved. */
typedef struct viz_action {
    int32_t stage, mb;
    uint8_t pass;        /* plan_pass */
} viz_action;
typedef struct viz_pair {
    viz_action a, b;
} viz_pair;

typedef struct viz_schedule_options {
    bool unit;           /* every box one unit wide, positions from a replay with unit costs */
    const char *title;   /* drawn above the grid when not NULL */
    const char *schedule; /* the builder the program named ("zbv"; NULL: unknown, as for a plan
                             file, which does not record it): the default title names it */
    double width_pt;     /* > 0: the whole figure at most this wide (points), cells scaled to fit
                            (a paper column is 3.5 in = 252 pt); 0: sized by the boxes */
    int npairs;          /* overlapped pairs known from the program (order groups of two) */
    const viz_pair *pairs;
} viz_schedule_options;

/* The smallest type a figure sets (points): below it, printed numbers are unreadable. */
#define VIZ_MIN_TYPE_PT 5.0
/* A paper column: 3.5 inches. */
#define VIZ_COLUMN_IN 3.5

/* How a schedule builder's name is written in figure titles ("zbv" -> "ZB-V",
 * "interleaved-1f1b" -> "Interleaved 1F1B"); the name itself when it is none of the builders. */
const char *viz_schedule_title_name(const char *builder);
/* The schedule builder a compiled program named (its `schedule` directive's, or the one the
 * compiler chose); NULL when its order came from elsewhere. */
const char *viz_schedule_of_program(const sched_compilation *c);

/* The overlapped pairs a compiled program asked for: its order groups (schedules expanded) that
 * name exactly two compute actions. *pairs is malloc'd (free it); *n may be 0. */
void viz_pairs_from_program(const sched_compilation *c, viz_pair **pairs, int *n);

/* The per-rank schedule grid of a plan: one row per pipeline rank (devices with the same stages
 * are one rank; the row shows the lowest of them), one box per (stage, pass, micro-batch) of its
 * compute instructions, labelled with the micro-batch; F, B, BI, BW and R boxes coloured by pass
 * (and told apart in greyscale by lightness and outline), a legend wrapped to the grid's width,
 * idle time as gaps; the title names the schedule, p (ranks), v (model chunks per rank) and m
 * (micro-batches). A rank's second (fourth, ...) model chunk has a thick outline in the colour
 * that contrasts most with its fill (viz_mark_colour). Micro-batch numbers are set at 5 pt or
 * more (VIZ_MIN_TYPE_PT); a box too narrow for its number at that size carries none, and the
 * legend says so. With o->width_pt the figure fits that width. Boxes are
 * placed by the plan's static timing (plan_check_timed: the header's GPU roofline and the
 * check's nominal links), so widths are costs; with o->unit, by a replay in which every box takes
 * one unit. An overlapped pair (o->pairs, or two actions whose instructions interleave in the
 * launch order) is two half-height boxes in one slot. If the plan's static run fails (a deadlock),
 * boxes are placed by the replay with the roofline costs and a warning says so. */
int viz_schedule(const plan_set *p, const viz_schedule_options *o, base_buf *dot, base_error *e);

/* ---------------------------------------------------------------- Chrome traces and the timeline */

/* Chrome traces as piper (viz/trace.h), the PyTorch profiler (Kineto) and Nsight Systems' Chrome
 * export write them:
 *  - "X" (complete) events, ts and dur in microseconds as numbers (doubles; dur missing = 0), and
 *    "B"/"E" pairs (an E closes the latest open B of its thread);
 *  - pid and tid integers or strings (a string is a name: "Device 0", "Stream 7");
 *  - "M" metadata naming lanes (process_name, thread_name, process_sort_index, thread_sort_index;
 *    Kineto's process_labels, "GPU 0", join the process's name: "python3 (GPU 0)");
 *  - args.wait_us on a transfer or collective: the part of it, from its start, spent waiting for
 *    its partners (piper-sim writes it; docs/sim-json.md, "The Chrome trace");
 *  - "C" counter samples (piper-sim's memory per GPU).
 * Other phases (instants, flows) are counted and skipped. Either a bare array of events
 * or an object with "traceEvents". Times are rebased: t = 0 is the first event's start. */
typedef enum {
    VIZ_EV_PIPER,      /* piper's own: cat "compute", "p2p", "coll" (or anything unknown) */
    VIZ_EV_KERNEL,     /* a GPU kernel (Kineto cat "kernel", Nsight "cuda_kernel") */
    VIZ_EV_GPU_MEM,    /* a GPU copy or fill ("gpu_memcpy", "gpu_memset", "cuda_memcpy") */
    VIZ_EV_GPU_ANNOT,  /* an annotation on a GPU stream ("gpu_user_annotation") */
    VIZ_EV_CPU,        /* host work: "cpu_op", "python_function", "cuda_runtime", "cuda_api" */
    VIZ_EV_CPU_ANNOT,  /* a host annotation: "user_annotation", "nvtx" */
    VIZ_EV_NKINDS
} viz_event_kind;

/* What a category says an event is (table in chrome_read.c); VIZ_EV_PIPER when it says nothing. */
viz_event_kind viz_event_kind_of(const char *cat);
/* Kernels, copies and GPU annotations run on a device. */
bool viz_event_kind_on_device(viz_event_kind k);

typedef struct viz_chrome_event {
    double ts, dur;      /* microseconds; ts from the trace's first event */
    double wait;         /* microseconds of [ts, ts + dur) spent waiting for partners (args.wait_us) */
    int lane;            /* index into lanes */
    int depth;           /* 0: top level; k: inside k enclosing events of its lane */
    uint8_t kind;        /* viz_event_kind */
    const char *name, *cat;
} viz_chrome_event;

typedef struct viz_chrome_lane {
    int64_t pid, tid;             /* strings in the trace get ids of their own (names kept) */
    const char *process, *thread; /* names from metadata (or the string pid/tid); NULL when none */
    int64_t psort, tsort;         /* sort indices (default: pid, tid) */
    int nevents;
    int depth;                    /* rows of nesting: 1 + the deepest event's depth (0: empty) */
    bool device;                  /* most of its events run on a GPU (kernels, copies) */
} viz_chrome_lane;

/* A sample of a counter track ("C" events: piper-sim's "memory" per GPU): the track's value from ts
 * on. A "C" event's every numeric arg is a series: named after the event, plus the arg's key when
 * it has several. */
typedef struct viz_chrome_counter {
    int64_t pid;
    const char *name;
    double ts, value;    /* ts rebased as the events' */
    int32_t seq;         /* its place in the trace: samples at one instant keep their order */
} viz_chrome_counter;

typedef struct viz_chrome {
    int nlanes;
    viz_chrome_lane *lanes;        /* sorted: by process sort index, pid, thread sort index, tid */
    int nevents;
    viz_chrome_event *events;      /* grouped by lane, each lane's in time order (an enclosing
                                      event before what it encloses) */
    double origin_us;              /* the trace's own ts of the first event (what t = 0 is) */
    int ncounters;
    viz_chrome_counter *counters;  /* by pid, name, then time */
    int skipped;                  /* events of other phases */
    int nested;                   /* events inside another event of their lane (drawn a row lower) */
    int overlaps;                 /* events that start before the previous one of their lane ends
                                     and end after it: neither nested nor in sequence (piper's
                                     traces have none: a stream runs one thing at a time) */
    base_arena arena;             /* owns everything above */
} viz_chrome;

void viz_chrome_init(viz_chrome *t);
void viz_chrome_free(viz_chrome *t);
/* Parses a trace; errors name "file:line:col". On failure *t is left empty. */
int viz_chrome_read(viz_chrome *t, const char *name, const char *text, size_t len, base_error *e);
int viz_chrome_read_file(viz_chrome *t, const char *path, base_error *e);

typedef struct viz_timeline_options {
    bool window;         /* draw only [t0, t1] */
    double t0_us, t1_us;
    const char *title;
} viz_timeline_options;

/* "START:END" with units ("2ms:3.5ms", "1500us:2s"; a bare number is microseconds, the trace's
 * unit; either side may be empty: ":5ms"). */
int viz_window_parse(const char *s, double *t0_us, double *t1_us, base_error *e);

/* One lane per (pid, tid) in the trace's order, labelled with the process and thread names, as many
 * rows high as its events nest; a time axis with units from the first event; piper's compute
 * events filled by pass (from their names: "F", "B", "BI", "BW", "R"), communication (by category
 * or stream name) in the communication colours, on lanes shaded as communication lanes; a
 * transfer's waiting part (wait) drawn light with a dotted outline, class "wait", before its
 * solid moving part; profiler kernels, copies, CPU ops and annotations each in their own style;
 * a counter track (piper-sim's memory) as a lane of bars under its process's lanes, each track
 * scaled to its own peak, which its label gives. */
int viz_timeline(const viz_chrome *t, const viz_timeline_options *o, base_buf *dot, base_error *e);

#endif
