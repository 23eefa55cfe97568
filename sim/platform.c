/* platform.c — the SimGrid platform of a plan: its devices as hosts, grouped into nodes by the
 * plan's device table, wired by the link description (sim_links). Written as SimGrid XML (SimGrid
 * 3.32's C API cannot build platforms) and loaded by replay.c.
 *
 * Layout: one flat zone with Dijkstra routing and a route cache. Each GPU is a host with an NVLink
 * (SPLITDUPLEX: its own up and down capacity) into its node's NVSwitch router, and a PCIe link to
 * the router of its NIC (through the GPU's and the NIC's PCIe links: two links, so that two GPUs
 * sharing a NIC still prefer NVLink); each NIC has a SPLITDUPLEX link into a leaf switch, and with more than
 * one leaf each leaf has an aggregated uplink into one spine router, sized by the
 * oversubscription (a two-level fat-tree whose spine layer is folded into one router: the same
 * capacity cut under ECMP). Dijkstra picks the route with the fewest links, so intra-node traffic
 * takes NVLink (2 links) and inter-node traffic the NICs (6 or 8 links): the NVSwitch is not
 * connected to the NICs. Dijkstra rather than Floyd: Floyd's set-up is cubic in the number of
 * hosts and routers, Dijkstra computes one source's routes when first needed.
 *
 * Latencies are end to end: each NVLink hop gets half of nvlink_latency, each NIC link half of
 * nic_latency, PCIe and fabric links none. Host speed is 1e9 flop/s, so an execution of x "flops"
 * lasts x nanoseconds: replay.c turns the cost model's seconds into nanoseconds, which keeps
 * SimGrid's precision (1e-5 work units) far below what matters.
 *
 * Folded (fold.c), only the nodes that hold a simulated device are written, each whole, with the
 * leaves above them and the spine: nothing the replay runs goes elsewhere (p2p stays inside the
 * simulated replica, flows across replicas take loop routes), so the routes it takes and their
 * links are the full platform's, and Dijkstra searches a graph that grows with the simulated
 * devices, not the cluster. A leaf's uplink keeps the capacity of all the nodes below it. Whole
 * nodes keep every route inside a node as it is, and routes between nodes never pass through a
 * third node. */
#include "sim_internal.h"

#include <stdlib.h>

/* "%.17g" round-trips doubles, so the platform says exactly what the options said. */
static void put_link(base_buf *b, const char *id, double bw, double lat, bool split)
{
    base_buf_printf(b, "  <link id=\"%s\" bandwidth=\"%.17gBps\" latency=\"%.17gs\"%s/>\n", id, bw, lat,
                    split ? " sharing_policy=\"SPLITDUPLEX\"" : "");
}

/* A one-way route through one link, or two when link2 is set (same direction). */
static void put_hop2(base_buf *b, const char *src, const char *dst, const char *link, const char *link2, const char *dir)
{
    base_buf_printf(b, "  <route src=\"%s\" dst=\"%s\" symmetrical=\"NO\"><link_ctn id=\"%s\" direction=\"%s\"/>", src,
                    dst, link, dir);
    if (link2) base_buf_printf(b, "<link_ctn id=\"%s\" direction=\"%s\"/>", link2, dir);
    base_buf_puts(b, "</route>\n");
}

static void put_hop(base_buf *b, const char *src, const char *dst, const char *link, const char *dir)
{
    put_hop2(b, src, dst, link, NULL, dir);
}

int sim_platform_xml(const plan_set *p, const sim_links *l, bool nocomm, base_buf *out, base_error *e)
{
    return sim_platform_xml_loops(p, l, nocomm, NULL, false, out, e);
}

int sim_platform_xml_loops(const plan_set *p, const sim_links *l, bool nocomm, const uint8_t *loop, bool reduce,
                           base_buf *out, base_error *e)
{
    if (p->ndevices <= 0) return base_errorf(e, "the plan has no devices; compile a program with at least one");
    if (l->nvlink_bw <= 0 || l->nic_bw <= 0 || l->pcie_bw <= 0 || l->gpus_per_nic < 1 || l->nodes_per_leaf < 1 ||
        l->oversubscription < 1)
        return base_errorf(e, "invalid link description (a bandwidth <= 0, gpus_per_nic or nodes_per_leaf < 1, or "
                           "oversubscription < 1); fix --links");
    int nnodes = 0;
    for (int d = 0; d < p->ndevices; d++) {
        if (p->devices[d].node < 0)
            return base_errorf(e, "device %d is on node %d; the plan's device table is invalid: recompile it", d,
                               p->devices[d].node);
        if (p->devices[d].node + 1 > nnodes) nnodes = p->devices[d].node + 1;
    }
    /* local index of each device in its node, and each node's size, in device order */
    int *local = base_xcalloc((size_t)p->ndevices, sizeof *local);
    int *size = base_xcalloc((size_t)nnodes, sizeof *size);
    for (int d = 0; d < p->ndevices; d++) local[d] = size[p->devices[d].node]++;
    int maxsize = 0;
    for (int n = 0; n < nnodes; n++) maxsize = size[n] > maxsize ? size[n] : maxsize;
    /* the nodes written: all, or (reduce) those holding a looped device, each one whole */
    uint8_t *keep = base_xcalloc((size_t)nnodes + 1, 1);
    for (int d = 0; d < p->ndevices; d++) keep[p->devices[d].node] |= !reduce || (loop && loop[d]);
    int nkept = 0;
    for (int n = 0; n < nnodes; n++) nkept += keep[n];

    double nvl_lat = nocomm ? 0 : l->nvlink_latency / 2, nic_lat = nocomm ? 0 : l->nic_latency / 2;
    int nleaves = (nnodes + l->nodes_per_leaf - 1) / l->nodes_per_leaf;
    int nics_per_node = (maxsize + l->gpus_per_nic - 1) / l->gpus_per_nic;
    uint8_t *keep_leaf = base_xcalloc((size_t)nleaves + 1, 1);
    for (int n = 0; n < nnodes; n++) keep_leaf[n / l->nodes_per_leaf] |= keep[n];

    base_buf_puts(out, "<?xml version='1.0'?>\n"
                       "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
                       "<platform version=\"4.1\">\n");
    base_buf_printf(out, "<!-- generated by piper-sim: %d GPUs on %d nodes; NVLink %.6g GB/s, NIC %.6g GB/s per %d "
                         "GPUs, %d leaves, oversubscription %.6g -->\n",
                    p->ndevices, nnodes, l->nvlink_bw / 1e9, l->nic_bw / 1e9, l->gpus_per_nic, nleaves,
                    l->oversubscription);
    if (nkept < nnodes)
        base_buf_printf(out, "<!-- folded: the %d nodes holding simulated devices of %d; the others' routes are never "
                             "taken -->\n", nkept, nnodes);
    base_buf_puts(out, "<zone id=\"piper\" routing=\"DijkstraCache\">\n");
    char a[64], b[64], c[64];
    base_buf rt = {0}; /* routes, after every declaration: SimGrid's DTD wants them last */
    for (int d = 0; d < p->ndevices; d++)
        if (keep[p->devices[d].node]) base_buf_printf(out, "  <host id=\"gpu%d\" speed=\"1e9f\"/>\n", d);
    /* folding (fold.c): hosts whose only route leads out over a device's own links and back */
    for (int d = 0; loop && d < p->ndevices; d++) {
        if (!loop[d]) continue;
        if (size[p->devices[d].node] > 1) base_buf_printf(out, "  <host id=\"gpu%d~nvl\" speed=\"1e9f\"/>\n", d);
        if (nnodes > 1) base_buf_printf(out, "  <host id=\"gpu%d~nic\" speed=\"1e9f\"/>\n", d);
    }
    for (int n = 0; n < nnodes; n++)
        if (size[n] > 1 && keep[n]) base_buf_printf(out, "  <router id=\"nvswitch%d\"/>\n", n);
    if (nnodes > 1) {
        for (int n = 0; n < nnodes; n++)
            for (int k = 0; keep[n] && k * l->gpus_per_nic < size[n]; k++)
                base_buf_printf(out, "  <router id=\"nic%d.%d\"/>\n", n, k);
        for (int f = 0; f < nleaves; f++)
            if (keep_leaf[f]) base_buf_printf(out, "  <router id=\"leaf%d\"/>\n", f);
        if (nleaves > 1) base_buf_puts(out, "  <router id=\"spine\"/>\n");
    }

    /* intra-node: GPU <-> NVSwitch */
    for (int d = 0; d < p->ndevices; d++) {
        int n = p->devices[d].node;
        if (size[n] < 2 || !keep[n]) continue;
        snprintf(a, sizeof a, "nvlink%d", d);
        snprintf(b, sizeof b, "gpu%d", d);
        snprintf(c, sizeof c, "nvswitch%d", n);
        put_link(out, a, l->nvlink_bw, nvl_lat, true);
        put_hop(&rt, b, c, a, "UP");
        put_hop(&rt, c, b, a, "DOWN");
    }
    /* inter-node: GPU <-> its NIC <-> leaf (<-> spine) */
    if (nnodes > 1) {
        char port[64];
        for (int n = 0; n < nnodes; n++)
            for (int k = 0; keep[n] && k * l->gpus_per_nic < size[n]; k++) {
                snprintf(port, sizeof port, "nicport%d.%d", n, k);
                put_link(out, port, l->pcie_bw, 0, true);
            }
        for (int d = 0; d < p->ndevices; d++) {
            int n = p->devices[d].node;
            if (!keep[n]) continue;
            snprintf(a, sizeof a, "pcie%d", d);
            snprintf(b, sizeof b, "gpu%d", d);
            snprintf(c, sizeof c, "nic%d.%d", n, local[d] / l->gpus_per_nic);
            snprintf(port, sizeof port, "nicport%d.%d", n, local[d] / l->gpus_per_nic);
            put_link(out, a, l->pcie_bw, 0, true);
            put_hop2(&rt, b, c, a, port, "UP");
            put_hop2(&rt, c, b, port, a, "DOWN");
        }
        for (int n = 0; n < nnodes; n++)
            for (int k = 0; keep[n] && k * l->gpus_per_nic < size[n]; k++) {
                snprintf(a, sizeof a, "niclink%d.%d", n, k);
                snprintf(b, sizeof b, "nic%d.%d", n, k);
                snprintf(c, sizeof c, "leaf%d", n / l->nodes_per_leaf);
                put_link(out, a, l->nic_bw, nic_lat, true);
                put_hop(&rt, b, c, a, "UP");
                put_hop(&rt, c, b, a, "DOWN");
            }
        if (nleaves > 1)
            for (int f = 0; f < nleaves; f++) {
                if (!keep_leaf[f]) continue;
                /* the capacity of every node below the leaf, written or not */
                int nodes = nnodes - f * l->nodes_per_leaf;
                if (nodes > l->nodes_per_leaf) nodes = l->nodes_per_leaf;
                snprintf(a, sizeof a, "leafup%d", f);
                snprintf(b, sizeof b, "leaf%d", f);
                put_link(out, a, (double)nodes * nics_per_node * l->nic_bw / l->oversubscription, 0, true);
                put_hop(&rt, b, "spine", a, "UP");
                put_hop(&rt, "spine", b, a, "DOWN");
            }
    }
    for (int d = 0; loop && d < p->ndevices; d++) {
        if (!loop[d]) continue;
        int n = p->devices[d].node;
        if (size[n] > 1)
            base_buf_printf(&rt, "  <route src=\"gpu%d\" dst=\"gpu%d~nvl\" symmetrical=\"NO\"><link_ctn id=\"nvlink%d\" "
                            "direction=\"UP\"/><link_ctn id=\"nvlink%d\" direction=\"DOWN\"/></route>\n", d, d, d, d);
        if (nnodes > 1) {
            int k = local[d] / l->gpus_per_nic;
            base_buf_printf(&rt, "  <route src=\"gpu%d\" dst=\"gpu%d~nic\" symmetrical=\"NO\">"
                            "<link_ctn id=\"pcie%d\" direction=\"UP\"/><link_ctn id=\"nicport%d.%d\" direction=\"UP\"/>"
                            "<link_ctn id=\"niclink%d.%d\" direction=\"UP\"/><link_ctn id=\"niclink%d.%d\" direction=\"DOWN\"/>"
                            "<link_ctn id=\"nicport%d.%d\" direction=\"DOWN\"/><link_ctn id=\"pcie%d\" direction=\"DOWN\"/>"
                            "</route>\n", d, d, d, n, k, n, k, n, k, n, k, d);
        }
    }
    base_buf_putn(out, rt.s ? rt.s : "", rt.n);
    base_buf_free(&rt);
    base_buf_puts(out, "</zone>\n</platform>\n");
    free(local);
    free(size);
    free(keep);
    free(keep_leaf);
    return 0;
}
