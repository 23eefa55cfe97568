/* render.c — dot text in, a figure out: lays a graph out with Graphviz (libgvc) and renders it as
 * SVG, PDF, PNG or laid-out dot. Graphviz reports problems through a global callback; they are
 * collected here and become the message of a base_error, so that library code never prints. */
#include "viz_internal.h"

#include <errno.h>
#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const FORMAT_NAMES[VIZ_NFMT] = {"svg", "pdf", "png", "dot"};
/* The renderers behind each format: SVG from Graphviz's core (it keeps ids and classes), PDF and
 * PNG through cairo (anti-aliased, real font metrics). */
static const char *const RENDERERS[VIZ_NFMT] = {"svg", "pdf:cairo", "png:cairo", "dot"};

const char *viz_format_name(viz_format f) { return f >= 0 && f < VIZ_NFMT ? FORMAT_NAMES[f] : "?"; }

int viz_format_parse(const char *name)
{
    for (int f = 0; f < VIZ_NFMT; f++)
        if (name && !strcasecmp(name, FORMAT_NAMES[f])) return f;
    return -1;
}

int viz_format_of_path(const char *path)
{
    const char *dot = path ? strrchr(path, '.') : NULL;
    if (!dot || strchr(dot, '/')) return -1;
    if (!strcasecmp(dot + 1, "gv")) return VIZ_FMT_DOT;
    return viz_format_parse(dot + 1);
}

/* Graphviz's messages since the last reset (its error callback has no context pointer). */
static char gv_messages[2048];

static int collect(char *msg)
{
    size_t n = strlen(gv_messages);
    if (n + 1 < sizeof gv_messages) snprintf(gv_messages + n, sizeof gv_messages - n, "%s", msg);
    return 0;
}

static const char *messages(void)
{
    size_t n = strlen(gv_messages);
    while (n && (gv_messages[n - 1] == '\n' || gv_messages[n - 1] == ' ')) gv_messages[--n] = 0;
    return n ? gv_messages : "no message";
}

typedef struct render_out {
    const char *path; /* file, or NULL for memory */
    base_buf *mem;
} render_out;

/* Through base_out (base.h), so that a reader never sees half a figure, and every failure names
 * the path (Graphviz's own file output reports none). */
static int write_file(const char *path, const char *data, size_t len, base_error *e)
{
    return base_out_write_file(path, "the figure", data, len, e);
}

static int render(const char *dot, const char *engine, viz_format fmt, render_out out, base_error *e)
{
    if (fmt < 0 || fmt >= VIZ_NFMT) return base_errorf(e, "unknown figure format %d; use svg, pdf, png or dot", (int)fmt);
    gv_messages[0] = 0;
    agseterrf(collect);
    agseterr(AGERR); /* warnings about fonts and sizes are not failures */
    /* One context for the life of the process: Graphviz 2.42 keeps a cache of font names across
     * contexts and reads it after gvFreeContext has freed it (a use-after-free that AddressSanitizer
     * catches on the second figure of a process), so the context is made once and never freed. */
    static GVC_t *gvc;
    if (!gvc) gvc = gvContext();
    if (!gvc) return base_errorf(e, "Graphviz could not start (%s); reinstall libgvc6 (scripts/setup.sh)", messages());
    int rc = 0;
    Agraph_t *g = agmemread(dot);
    if (!g) {
        rc = base_errorf(e, "Graphviz rejected the figure piper wrote (%s); this is a bug in piper-viz, please report it",
                         messages());
        goto done;
    }
    if (fmt == VIZ_FMT_PNG) agsafeset(g, "dpi", "150", "");
    if (gvLayout(gvc, g, engine) != 0) {
        rc = base_errorf(e, "Graphviz could not lay the figure out with '%s' (%s); check that libgvc6's plugins are "
                         "installed and registered (dot -c, or reinstall libgvc6)", engine, messages());
        agclose(g);
        goto done;
    }
    char *data = NULL;
    unsigned int len = 0;
    if (gvRenderData(gvc, g, RENDERERS[fmt], &data, &len) != 0)
        rc = base_errorf(e, "Graphviz could not render the %s figure (%s); for pdf/png check that libgvc6's cairo "
                         "plugin is installed", FORMAT_NAMES[fmt], messages());
    else if (out.path)
        rc = write_file(out.path, data, len, e);
    else
        base_buf_putn(out.mem, data ? data : "", data ? len : 0);
    if (data) gvFreeRenderData(data);
    gvFreeLayout(gvc, g);
    agclose(g);
done:
    agseterrf(NULL);
    return rc;
}

int viz_render_file(const char *dot, const char *engine, viz_format fmt, const char *path, base_error *e)
{
    return render(dot, engine, fmt, (render_out){path, NULL}, e);
}

int viz_render_data(const char *dot, const char *engine, viz_format fmt, base_buf *out, base_error *e)
{
    return render(dot, engine, fmt, (render_out){NULL, out}, e);
}
