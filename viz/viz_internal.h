/* viz_internal.h — what the figure builders of viz/ share and nobody else needs: the palette (one
 * style per pass and per kind of communication, so that the DAG, the grid and the timeline colour
 * the same things the same way), dot-language writing helpers, and the small graph the two DAG
 * builders fill and collapse. */
#ifndef PIPER_VIZ_INTERNAL_H
#define PIPER_VIZ_INTERNAL_H

#include "viz.h"

/* Present on a fresh Debian machine (fonts-dejavu-core), so figures look the same everywhere. */
#define VIZ_FONT "DejaVu Sans"

/* How one kind of box looks. Fills are chosen by lightness first (grey values far apart: F light,
 * BI medium, B medium-dark, BW dark), hue second, so that a greyscale print still tells them apart;
 * the outline style separates those that lightness alone would not (R, communication). */
typedef struct viz_style {
    const char *key;      /* "F", "B", ... : the SVG class and legend id */
    const char *fill;
    const char *font;     /* text colour readable on the fill */
    const char *outline;  /* Graphviz style added to "filled": "", "dashed", "bold" */
    const char *what;     /* legend text */
} viz_style;

/* plan_pass -> style; PLAN_NPASS and unknown passes get a neutral grey. */
const viz_style *viz_pass_style(int pass);
typedef enum { VIZ_COMM_P2P, VIZ_COMM_COLL, VIZ_COMM_OTHER } viz_comm_kind;
const viz_style *viz_comm_style(viz_comm_kind k);
/* The style of a timeline box whose kind is unknown (neither a pass nor communication). */
const viz_style *viz_other_style(void);
/* The waiting part of a transfer or collective of kind k: its hue, light, dotted. */
const viz_style *viz_wait_style(viz_comm_kind k);
/* A profiler event's style by viz_event_kind (VIZ_EV_PIPER: the neutral one). */
const viz_style *viz_kind_style(int kind);

/* WCAG contrast ratio (1 to 21) of two colours "#rrggbb", "white" or "black"; -1 if either is
 * neither. */
double viz_contrast(const char *a, const char *b);
/* The colour of marks drawn on a fill (a rank's second model chunk): black or white, whichever
 * contrasts more with it, so the mark shows on every fill of the palette. */
const char *viz_mark_colour(const char *fill);

/* "F" "B" "BI" "BW" "R" "UPD" "AUX" -> plan_pass; -1 otherwise. */
int viz_pass_from_name(const char *s, size_t n);

/* Appends s as a dot double-quoted string (quotes and backslashes escaped, newlines as \n). */
void viz_dot_quote(base_buf *b, const char *s);
/* Points per inch: Graphviz positions are points, sizes inches. */
#define VIZ_PT 72.0

/* Seconds as "12.3 ms" with a unit that keeps 1-3 digits before the point. Returns buf. */
const char *viz_fmt_seconds(double s, char *buf, size_t n);
/* A tick step of 1, 2 or 5 times a power of ten giving about `want` ticks over `span`. */
double viz_nice_step(double span, int want);

/* Writes a fixed-size box node (pos is its centre, in points; w and h in inches). `extra` is
 * appended inside the attribute list verbatim (may be NULL). */
void viz_dot_box(base_buf *b, const char *name, const char *id, const char *cls, double x, double y, double w,
                 double h, const viz_style *st, const char *label, double fontsize, const char *extra);
/* A plaintext node (labels, ticks) centred at (x, y). With width > 0 (inches) the node has that
 * width and `just` 'l' or 'r' justifies the text inside it; 'c' centres it. */
void viz_dot_text(base_buf *b, const char *name, const char *id, double x, double y, const char *label,
                  double fontsize, char just, double width, const char *extra);

/* ---------------------------------------------------------------- the DAG builders' graph */

typedef enum { VG_COMPUTE, VG_P2P, VG_COLL, VG_DUMMY } vg_kind;

typedef struct vg_node {
    int32_t cluster;      /* index into clusters */
    uint8_t kind;         /* vg_kind */
    uint8_t pass;         /* compute: plan_pass; communication: the pass it serves; PLAN_NPASS */
    const char *op;       /* "F", "SEND", "all_reduce", ... */
    const char *region;   /* region name or NULL */
    int32_t layer;        /* transformer layer of the region, -1 when none */
    int32_t mb;           /* micro-batch, -1 when none */
    int32_t stage;        /* -1 when none */
    int64_t ident;        /* anything else merged nodes must share (peer, group, stream, bucket) */
    const char *detail;   /* appended to the label ("to 2", "dp"), or NULL */
} vg_node;

typedef struct vg_edge {
    int32_t src, dst;
    uint8_t temporal;     /* 0: data (solid), 1: temporal (dashed) */
} vg_edge;

typedef struct vg_graph {
    BASE_VEC(vg_node) nodes;
    BASE_VEC(vg_edge) edges;
    BASE_VEC(const char *) clusters; /* cluster labels */
    base_arena arena;                /* strings */
} vg_graph;

void vg_init(vg_graph *g);
void vg_free(vg_graph *g);
/* Merges nodes as `collapse` asks (ORDER dummies are bypassed: their predecessors' groups get a
 * temporal edge to their successors' groups), drops self-loops and duplicate edges (a data edge
 * wins over a temporal one between the same groups). *out is initialised here. */
void vg_collapse(const vg_graph *in, unsigned collapse, vg_graph *out);
/* Replaces each ORDER dummy (every node of one order group -> dummy -> every node of the next)
 * by temporal edges from the first group's last nodes to the next group's first nodes: the same
 * order, without a point that the layout would have to place and k x k edges to route. */
void vg_bypass_dummies(vg_graph *g);
/* Drops self-loops and repeated edges (a data edge wins over a temporal one between two nodes). */
void vg_dedupe_edges(vg_graph *g);
/* The graph as dot for the `dot` engine. Fails when it has more than max_nodes nodes. */
int vg_write_dot(const vg_graph *g, const char *title, int max_nodes, base_buf *dot, base_error *e);

#endif
