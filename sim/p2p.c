/* p2p.c — the replay's sends and receives: mailbox puts and gets keyed by (source, destination,
 * tag), posted together for a sendrecv group, and the matching of posts that tells when a transfer
 * starts (from then on both devices count it as communication). SimGrid's rendezvous gives the
 * plan's zero-buffering semantics: a transfer starts when both sides are posted. */
#include "sim_internal.h"

#include <simgrid/comm.h>
#include <simgrid/mailbox.h>

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- p2p matching */

static uint64_t xhash(int32_t a, int32_t b, int32_t c)
{
    uint64_t h = (uint64_t)(uint32_t)a * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t)(uint32_t)b * 0xC2B2AE3D27D4EB4Full + (h << 6) + (h >> 2);
    h ^= (uint64_t)(uint32_t)c * 0x165667B19E3779F9ull + (h << 6) + (h >> 2);
    return h ^ (h >> 29);
}

/* Rehashes without the tombstones, doubling only when live entries fill a quarter or more. */
static void xf_grow(void)
{
    size_t ocap = sim_replay_state->xcap, live = 0;
    xfer_slot *old = sim_replay_state->xf;
    for (size_t i = 0; i < ocap; i++) live += old[i].used && (old[i].nsend || old[i].nrecv);
    sim_replay_state->xcap = !ocap ? 1024 : 4 * (live + 1) > ocap ? 2 * ocap : ocap;
    sim_replay_state->xf = base_xcalloc(sim_replay_state->xcap, sizeof *sim_replay_state->xf);
    sim_replay_state->xused = 0;
    for (size_t i = 0; i < ocap; i++) {
        const xfer_slot *o = &old[i];
        if (!o->used || (o->nsend == 0 && o->nrecv == 0)) continue;
        size_t j = xhash(o->src, o->dst, o->tag) & (sim_replay_state->xcap - 1);
        while (sim_replay_state->xf[j].used) j = (j + 1) & (sim_replay_state->xcap - 1);
        sim_replay_state->xf[j] = *o;
        sim_replay_state->xused++;
    }
    free(old);
}

/* Records a post; returns 1 when it matches the other side's (the transfer starts now). */
static int xf_post(int32_t src, int32_t dst, int32_t tag, int send)
{
    if (2 * (sim_replay_state->xused + 1) > sim_replay_state->xcap) xf_grow();
    size_t mask = sim_replay_state->xcap - 1, j = xhash(src, dst, tag) & mask;
    xfer_slot *free_slot = NULL;
    for (; sim_replay_state->xf[j].used; j = (j + 1) & mask) {
        xfer_slot *x = &sim_replay_state->xf[j];
        if (x->src == src && x->dst == dst && x->tag == tag) {
            int32_t *other = send ? &x->nrecv : &x->nsend;
            if (*other > 0) {
                (*other)--;
                return 1;
            }
            if (send) x->nsend++;
            else x->nrecv++;
            return 0;
        }
        /* a tombstone (both counts 0): another key may take it once the probe shows that key absent */
        if (!free_slot && x->nsend == 0 && x->nrecv == 0) free_slot = x;
    }
    xfer_slot *x = free_slot ? free_slot : &sim_replay_state->xf[j];
    if (!free_slot) sim_replay_state->xused++;
    *x = (xfer_slot){src, dst, tag, send ? 1 : 0, send ? 0 : 1, 1};
    return 0;
}

/* ---------------------------------------------------------------- transfers */

static sg_mailbox_t p2p_mailbox(int src, int dst, int tag)
{
    char name[64];
    snprintf(name, sizeof name, "p%d>%d#%d", src, dst, tag);
    return sg_mailbox_by_name(name);
}

static void wait_all_counted(dev_rt *dv, sg_comm_t *comms, int n, const int *counted)
{
    /* counted[k]: comm k was started by a matched post (it counts as communication until done) */
    if (n <= 0 || n > MAX_BATCH) return; /* callers post 1..MAX_BATCH at a time */
    int left = n;
    int cnt[MAX_BATCH];
    memcpy(cnt, counted, (size_t)n * sizeof *cnt);
    while (left > 0) {
        ssize_t k = sg_comm_wait_any(comms, (size_t)left);
        if (k < 0) break;
        if (cnt[k]) sim_acct(dv, 0, -1);
        comms[k] = comms[left - 1];
        cnt[k] = cnt[left - 1];
        left--;
    }
}

/* A run of `n` p2p instructions starting at stream position `pos`, posted together. */
void sim_do_p2p(stream_ctx *sc, const int32_t *order, int pos, int n)
{
    const plan_set *p = sim_replay_state->p;
    int d = sc->dev;
    dev_rt *dv = &sim_replay_state->dv[d];
    const plan_list *L = plan_dev_list(p, d);
    for (int base = 0; base < n; base += MAX_BATCH) {
        int m = n - base < MAX_BATCH ? n - base : MAX_BATCH;
        sg_comm_t comms[MAX_BATCH];
        int counted[MAX_BATCH];
        for (int k = 0; k < m; k++) {
            const plan_instr *in = &L->ins[order[pos + base + k]];
            int peer = plan_dev_peer(p, d, in), send = in->op == PLAN_SEND;
            int src = send ? d : peer, dst = send ? peer : d;
            sg_mailbox_t mb = p2p_mailbox(src, dst, in->tag);
            long size = sim_replay_state->o->costs.nocomm ? 0 : sim_wire_bytes((double)in->bytes);
            if (send) {
                comms[k] = sg_mailbox_put_async(mb, &sim_replay_state->dummy, size);
                dv->bytes_sent += (double)in->bytes;
                sim_replay_state->activities++;
            } else {
                comms[k] = sg_mailbox_get_async(mb, &sc->slot[k]);
            }
            counted[k] = 1;
            if (xf_post(src, dst, in->tag, send)) {
                sim_acct(&sim_replay_state->dv[src], 0, 1);
                sim_acct(&sim_replay_state->dv[dst], 0, 1);
            }
        }
        wait_all_counted(dv, comms, m, counted);
    }
}
