/* style.c — the palette and the dot-writing helpers every figure of viz/ uses, so that a forward
 * is the same blue in the DAG, the grid and the timeline, and every box is written one way. */
#include "viz_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Grey values (0.299 R + 0.587 G + 0.114 B) in the comments: far enough apart to survive a
 * greyscale print, with dark fills carrying white text. */
static const viz_style PASS_STYLES[PLAN_NPASS] = {
    [PLAN_PASS_F] = {"F", "#cfe3f7", "black", "", "forward"},                        /* 223 */
    [PLAN_PASS_B] = {"B", "#c0602a", "black", "", "backward"},                       /* 118 */
    [PLAN_PASS_BI] = {"BI", "#e49a50", "black", "", "backward, input gradient"},     /* 168 */
    [PLAN_PASS_BW] = {"BW", "#2f5d3a", "white", "", "backward, weight gradient"},    /*  75 */
    [PLAN_PASS_R] = {"R", "#e4e4e4", "black", "dashed", "recompute"},                /* 228 */
    [PLAN_PASS_UPD] = {"UPD", "#8c8c8c", "white", "", "optimizer step"},             /* 140 */
    [PLAN_PASS_AUX] = {"AUX", "#bdbdbd", "black", "dotted", "cross-group numerics"}, /* 189 */
};

static const viz_style NEUTRAL = {"other", "#b7c9e2", "black", "", "other"};

static const viz_style COMM_STYLES[] = {
    [VIZ_COMM_P2P] = {"p2p", "#e8c170", "black", "dashed", "send / receive"},      /* 195 */
    [VIZ_COMM_COLL] = {"coll", "#b9a2c8", "black", "dashed", "collective"},        /* 172 */
    [VIZ_COMM_OTHER] = {"comm", "#d9d0c1", "black", "dashed", "communication"},    /* 209 */
};

/* Piper's figures draw a transfer's waiting apart from its moving: the same hue as the transfer,
 * much lighter, with a dotted outline (greyscale: near white, dotted). */
static const viz_style WAIT_STYLES[] = {
    [VIZ_COMM_P2P] = {"wait_p2p", "#f8efdc", "black", "dotted", "waiting for the peer"},        /* 238 */
    [VIZ_COMM_COLL] = {"wait_coll", "#ece4f1", "black", "dotted", "waiting for the group"},      /* 231 */
    [VIZ_COMM_OTHER] = {"wait_comm", "#f1ede6", "black", "dotted", "waiting for partners"},      /* 237 */
};

/* Profiler traces (Kineto, Nsight): what runs on a GPU in blue-green, host work in greens and
 * greys, annotations light with dashed outlines; lightness apart as for the passes. */
static const viz_style KIND_STYLES[VIZ_EV_NKINDS] = {
    [VIZ_EV_PIPER] = {"other", "#b7c9e2", "black", "", "other"},
    [VIZ_EV_KERNEL] = {"kernel", "#4f86c6", "black", "", "GPU kernel"},                 /* 124 */
    [VIZ_EV_GPU_MEM] = {"gpu_mem", "#e8a75a", "black", "bold", "GPU copy / fill"},      /* 179 */
    [VIZ_EV_GPU_ANNOT] = {"gpu_annot", "#dcd6ec", "black", "dashed", "GPU annotation"}, /* 216 */
    [VIZ_EV_CPU] = {"cpu", "#9cc48a", "black", "", "CPU op"},                           /* 178 */
    [VIZ_EV_CPU_ANNOT] = {"cpu_annot", "#ececec", "black", "dashed", "CPU annotation"}, /* 236 */
};

const viz_style *viz_wait_style(viz_comm_kind k)
{
    return k >= VIZ_COMM_P2P && k <= VIZ_COMM_OTHER ? &WAIT_STYLES[k] : &WAIT_STYLES[VIZ_COMM_OTHER];
}

const viz_style *viz_kind_style(int kind)
{
    return kind > VIZ_EV_PIPER && kind < VIZ_EV_NKINDS ? &KIND_STYLES[kind] : &NEUTRAL;
}

/* sRGB relative luminance of "#rrggbb" (or "white", "black"); -1 when neither. */
static double luminance(const char *c)
{
    unsigned r, g, b;
    if (!c) return -1;
    if (!strcmp(c, "white")) return 1;
    if (!strcmp(c, "black")) return 0;
    if (strlen(c) != 7 || sscanf(c, "#%2x%2x%2x", &r, &g, &b) != 3) return -1;
    double v[3] = {r / 255.0, g / 255.0, b / 255.0};
    for (int i = 0; i < 3; i++) v[i] = v[i] <= 0.04045 ? v[i] / 12.92 : pow((v[i] + 0.055) / 1.055, 2.4);
    return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2];
}

double viz_contrast(const char *a, const char *b)
{
    double x = luminance(a), y = luminance(b);
    if (x < 0 || y < 0) return -1;
    return x > y ? (x + 0.05) / (y + 0.05) : (y + 0.05) / (x + 0.05);
}

const char *viz_mark_colour(const char *fill)
{
    return viz_contrast("black", fill) >= viz_contrast("white", fill) ? "black" : "white";
}

const viz_style *viz_pass_style(int pass)
{
    return pass >= 0 && pass < PLAN_NPASS ? &PASS_STYLES[pass] : &NEUTRAL;
}

const viz_style *viz_comm_style(viz_comm_kind k)
{
    return k >= VIZ_COMM_P2P && k <= VIZ_COMM_OTHER ? &COMM_STYLES[k] : &COMM_STYLES[VIZ_COMM_OTHER];
}

const viz_style *viz_other_style(void) { return &NEUTRAL; }

int viz_pass_from_name(const char *s, size_t n)
{
    for (int p = 0; p < PLAN_NPASS; p++)
        if (strlen(PASS_STYLES[p].key) == n && !strncmp(PASS_STYLES[p].key, s, n)) return p;
    if (n == 1 && s[0] == 'I') return PLAN_PASS_BI; /* Zero Bubble's and PyTorch's spelling */
    if (n == 1 && s[0] == 'W') return PLAN_PASS_BW;
    return -1;
}

void viz_dot_quote(base_buf *b, const char *s)
{
    base_buf_puts(b, "\"");
    for (const char *c = s ? s : ""; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char esc[3] = {'\\', *c, 0};
            base_buf_puts(b, esc);
        } else if (*c == '\n') {
            base_buf_puts(b, "\\n");
        } else {
            base_buf_putn(b, c, 1);
        }
    }
    base_buf_puts(b, "\"");
}

const char *viz_fmt_seconds(double s, char *buf, size_t n)
{
    double a = fabs(s);
    if (a == 0) snprintf(buf, n, "0");
    else if (a < 1e-6) snprintf(buf, n, "%.3g ns", s * 1e9);
    else if (a < 1e-3) snprintf(buf, n, "%.3g us", s * 1e6);
    else if (a < 1) snprintf(buf, n, "%.3g ms", s * 1e3);
    else snprintf(buf, n, "%.3g s", s);
    return buf;
}

double viz_nice_step(double span, int want)
{
    if (!(span > 0) || want < 1) return 1;
    double raw = span / want, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

void viz_dot_box(base_buf *b, const char *name, const char *id, const char *cls, double x, double y, double w,
                 double h, const viz_style *st, const char *label, double fontsize, const char *extra)
{
    base_buf_printf(b, "  %s [shape=box, fixedsize=true, pos=\"%.2f,%.2f!\", width=%.4f, height=%.4f, style=\"filled%s%s\", "
                       "fillcolor=\"%s\", fontcolor=\"%s\", fontsize=%.1f, penwidth=0.6",
                    name, x, y, w, h, *st->outline ? "," : "", st->outline, st->fill, st->font, fontsize);
    if (id) {
        base_buf_puts(b, ", id=");
        viz_dot_quote(b, id);
    }
    if (cls) {
        base_buf_puts(b, ", class=");
        viz_dot_quote(b, cls);
    }
    base_buf_puts(b, ", label=");
    viz_dot_quote(b, label ? label : "");
    if (extra) base_buf_printf(b, ", %s", extra);
    base_buf_puts(b, "];\n");
}

void viz_dot_text(base_buf *b, const char *name, const char *id, double x, double y, const char *label,
                  double fontsize, char just, double width, const char *extra)
{
    base_buf_printf(b, "  %s [shape=plaintext, pos=\"%.2f,%.2f!\", fontsize=%.1f, margin=0", name, x, y, fontsize);
    /* one line of text is about 1.3 em high: a fixed node that holds it keeps Graphviz quiet */
    if (width > 0) base_buf_printf(b, ", fixedsize=true, width=%.4f, height=%.4f", width, 1.3 * fontsize / VIZ_PT);
    else base_buf_puts(b, ", width=0, height=0");
    if (id) {
        base_buf_puts(b, ", id=");
        viz_dot_quote(b, id);
    }
    base_buf_puts(b, ", label=");
    viz_dot_quote(b, label);
    if (just == 'l' || just == 'r') {
        /* \l and \r end a line justified left or right inside the node's width */
        b->n--;
        b->s[b->n] = 0;
        base_buf_printf(b, "\\%c\"", just);
    }
    if (extra) base_buf_printf(b, ", %s", extra);
    base_buf_puts(b, "];\n");
}
