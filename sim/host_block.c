/* host_block.c — can every device's host block at its p2p transfers without deadlocking the step?
 *
 * The host model (host.c, docs/simulator.md "The host") lets the host wait after each p2p run
 * until the device is done (Megatron's batch_isend_irecv + torch.cuda.synchronize()). That is
 * sound for plans whose transfers come in the order a blocking host needs (Megatron's schedules:
 * every transfer's partner is posted by a host that is not itself waiting for a later one), but
 * not for plans that post receives ahead of the work that feeds the matching sends (DualPipe's
 * overlapped pairs, whose framework uses asynchronous p2p): a host blocked at such a receive
 * never issues the work its peer waits for. Such plans are simulated without the p2p and
 * micro-batch synchronisations (replay.c; the report says so).
 *
 * The check runs the hosts alone: each device walks its launch order; a p2p run (a sendrecv group,
 * or a lone send or receive) posts its operations and blocks until each has its partner posted
 * (channels (source, destination, tag) are FIFO: the k-th send meets the k-th receive); nothing
 * else blocks a host (kernels, collectives and stream waits are asynchronous for it). If the
 * hosts reach their ends, blocking is safe: the GPU streams only add concurrency. */
#include "sim_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct chan {
    int32_t src, dst, tag;
    int64_t sends, recvs; /* posted so far */
    uint8_t used;
} chan;

typedef struct chan_map {
    chan *v;
    size_t cap;
} chan_map;

static chan *chan_get(chan_map *m, int32_t src, int32_t dst, int32_t tag)
{
    uint64_t h = (uint64_t)(uint32_t)src * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uint32_t)dst * 0xC2B2AE3D27D4EB4Full ^
                 (uint64_t)(uint32_t)tag * 0x165667B19E3779F9ull;
    size_t j = (size_t)(h ^ (h >> 29)) & (m->cap - 1);
    for (; m->v[j].used; j = (j + 1) & (m->cap - 1))
        if (m->v[j].src == src && m->v[j].dst == dst && m->v[j].tag == tag) return &m->v[j];
    m->v[j] = (chan){src, dst, tag, 0, 0, 1};
    return &m->v[j];
}

static size_t pow2_at_least(size_t n)
{
    size_t c = 64;
    while (c < n) c *= 2;
    return c;
}

static bool is_p2p(const plan_instr *in) { return in->op == PLAN_SEND || in->op == PLAN_RECV; }

/* Per list (shared by the devices that run it): its p2p runs in launch order of their heads,
 * each run's members (in stream order), and each member's occurrence on its channel: the k-th
 * send to (or receive from) that list peer with that tag. */
typedef struct list_runs {
    int nruns;
    int32_t *off;    /* run r's members are memb[off[r] .. off[r+1]) */
    int32_t *memb;   /* launch indices */
    int64_t *occ;    /* per member */
} list_runs;

static void list_runs_init(const plan_list *L, list_runs *lr)
{
    size_t n = (size_t)L->n + 1;
    int32_t *soff = base_xcalloc((size_t)L->nstreams + 2, sizeof *soff);
    int32_t *sidx = base_xmalloc(n * sizeof *sidx), *spos = base_xmalloc(n * sizeof *spos);
    for (int i = 0; i < L->n; i++) soff[L->ins[i].stream + 1]++;
    for (int s = 0; s < L->nstreams; s++) soff[s + 1] += soff[s];
    for (int i = 0; i < L->n; i++) {
        int s = L->ins[i].stream;
        spos[i] = soff[s];
        sidx[soff[s]++] = i;
    }
    uint8_t *member = base_xcalloc(n, 1);
    lr->off = base_xcalloc(n + 1, sizeof *lr->off);
    lr->memb = base_xmalloc(n * sizeof *lr->memb);
    lr->occ = base_xmalloc(n * sizeof *lr->occ);
    chan_map occ = {NULL, pow2_at_least(2 * n)};
    occ.v = base_xcalloc(occ.cap, sizeof *occ.v);
    int nm = 0;
    lr->nruns = 0;
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        if (!is_p2p(in) || member[i]) continue;
        /* a sendrecv group: consecutive p2p instructions of one stream with one nonzero id (the
         * replay's rule), posted together at its first */
        int k = spos[i];
        do {
            const plan_instr *x = &L->ins[sidx[k]];
            member[sidx[k]] = 1;
            lr->memb[nm] = sidx[k];
            lr->occ[nm++] = chan_get(&occ, x->peer, x->op, x->tag)->sends++;
            k++;
        } while (in->sendrecv != 0 && k < L->n && L->ins[sidx[k]].stream == in->stream && is_p2p(&L->ins[sidx[k]]) &&
                 L->ins[sidx[k]].sendrecv == in->sendrecv);
        lr->off[++lr->nruns] = nm;
    }
    free(occ.v), free(member), free(soff), free(sidx), free(spos);
}

bool sim_host_can_block_at_p2p(const plan_set *p)
{
    int D = p->ndevices;
    list_runs *lr = base_xcalloc((size_t)p->nlists + 1, sizeof *lr);
    size_t nops = 0;
    for (int l = 0; l < p->nlists; l++) list_runs_init(&p->lists[l], &lr[l]);
    for (int d = 0; d < D; d++) nops += (size_t)lr[p->devices[d].list].off[lr[p->devices[d].list].nruns];
    chan_map m = {NULL, pow2_at_least(2 * nops + 4)};
    m.v = base_xcalloc(m.cap, sizeof *m.v);
    int32_t *at = base_xcalloc((size_t)D + 1, sizeof *at);       /* per device: its current run */
    uint8_t *posted = base_xcalloc((size_t)D + 1, 1);             /* its current run is posted */
    uint8_t *queued = base_xcalloc((size_t)D + 1, 1);
    int32_t *queue = base_xmalloc(((size_t)D + 1) * sizeof *queue); /* a ring of devices to advance */
    size_t head = 0, tail = 0;
    for (int d = 0; d < D; d++) queue[tail++] = d, queued[d] = 1;
    while (head != tail) {
        int d = queue[head];
        head = (head + 1) % ((size_t)D + 1);
        queued[d] = 0;
        const plan_list *L = plan_dev_list(p, d);
        const list_runs *r = &lr[p->devices[d].list];
        while (at[d] < r->nruns) {
            int a = r->off[at[d]], b = r->off[at[d] + 1];
            if (!posted[d]) {
                for (int k = a; k < b; k++) {
                    const plan_instr *in = &L->ins[r->memb[k]];
                    int peer = plan_dev_peer(p, d, in);
                    if (in->op == PLAN_SEND) chan_get(&m, d, peer, in->tag)->sends++;
                    else chan_get(&m, peer, d, in->tag)->recvs++;
                    if (peer >= 0 && peer < D && !queued[peer]) { /* the post may free the peer */
                        queue[tail] = peer, queued[peer] = 1;
                        tail = (tail + 1) % ((size_t)D + 1);
                    }
                }
                posted[d] = 1;
            }
            bool done = true;
            for (int k = a; k < b && done; k++) {
                const plan_instr *in = &L->ins[r->memb[k]];
                int peer = plan_dev_peer(p, d, in);
                done = in->op == PLAN_SEND ? chan_get(&m, d, peer, in->tag)->recvs > r->occ[k]
                                           : chan_get(&m, peer, d, in->tag)->sends > r->occ[k];
            }
            if (!done) break;
            at[d]++;
            posted[d] = 0;
        }
    }
    bool ok = true;
    for (int d = 0; d < D; d++) ok = ok && at[d] == lr[p->devices[d].list].nruns;
    for (int l = 0; l < p->nlists; l++) free(lr[l].off), free(lr[l].memb), free(lr[l].occ);
    free(lr), free(m.v), free(at), free(posted), free(queued), free(queue);
    return ok;
}
