/* p2p.c — the replay's sends and receives: mailbox puts and gets keyed by (source, destination,
 * tag), posted together for a sendrecv group, and the matching of posts that tells when a transfer
 * starts (from then on both devices count it as communication). SimGrid's rendezvous gives the
 * plan's zero-buffering semantics: a transfer starts when both sides are posted.
 *
 * A key's posts meet in a mailbox of their own, as if it were named after the key, but most keys
 * are used by one transfer only, so naming and looking up one per key cost as much as the
 * transfer's own bookkeeping in SimGrid: a key takes a mailbox from a pool at its first post and
 * gives it back once every post of it is matched (SimGrid has paired them by then, so the mailbox
 * is empty). The pool holds as many mailboxes as keys are ever pending at once. */
#include "sim_internal.h"

#include <simgrid/engine.h>

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

static bool xf_live(const xfer_slot *x) { return x->used && (x->nsend || x->nrecv || x->npend); }

/* Rehashes without the tombstones, doubling only when live entries fill a quarter or more. */
static void xf_grow(void)
{
    sim_state *st = sim_replay_state;
    size_t ocap = st->xcap, live = 0;
    xfer_slot *old = st->xf;
    for (size_t i = 0; i < ocap; i++) live += xf_live(&old[i]);
    st->xcap = !ocap ? 1024 : 4 * (live + 1) > ocap ? 2 * ocap : ocap;
    st->xf = base_xcalloc(st->xcap, sizeof *st->xf);
    st->xused = 0;
    for (size_t i = 0; i < ocap; i++) {
        const xfer_slot *o = &old[i];
        if (!xf_live(o)) continue;
        size_t j = xhash(o->src, o->dst, o->tag) & (st->xcap - 1);
        while (st->xf[j].used) j = (j + 1) & (st->xcap - 1);
        st->xf[j] = *o;
        st->xused++;
    }
    free(old);
}

/* The key's slot, added (on a tombstone the probe passed, or a free slot) when absent. */
static xfer_slot *xf_slot(int32_t src, int32_t dst, int32_t tag)
{
    sim_state *st = sim_replay_state;
    if (2 * (st->xused + 1) > st->xcap) xf_grow();
    size_t mask = st->xcap - 1, j = xhash(src, dst, tag) & mask;
    xfer_slot *free_slot = NULL;
    for (; st->xf[j].used; j = (j + 1) & mask) {
        xfer_slot *x = &st->xf[j];
        if (x->src == src && x->dst == dst && x->tag == tag) return x;
        /* a tombstone: another key may take it once the probe shows that key absent */
        if (!free_slot && !xf_live(x)) free_slot = x;
    }
    xfer_slot *x = free_slot ? free_slot : &st->xf[j];
    if (!free_slot) st->xused++;
    *x = (xfer_slot){src, dst, tag, 0, 0, 0, 1, NULL, NULL, NULL};
    return x;
}

/* Puts a mailbox in the pool. */
static void xf_give(sg_mailbox_t mb)
{
    sim_state *st = sim_replay_state;
    if (st->nmb_free == st->mb_free_cap) {
        st->mb_free_cap = st->mb_free_cap ? 2 * st->mb_free_cap : 64;
        st->mb_free = base_xrealloc(st->mb_free, (size_t)st->mb_free_cap * sizeof *st->mb_free);
    }
    st->mb_free[st->nmb_free++] = mb;
}

/* A post's mailbox: the key's, taken from the pool at its first post. The post counts as pending
 * until xf_post, so that the key keeps its mailbox while the post is handed to SimGrid. */
static sg_mailbox_t xf_take(int32_t src, int32_t dst, int32_t tag)
{
    sim_state *st = sim_replay_state;
    /* a spare mailbox first: SimGrid's lookup may switch to other actors, which may post too */
    while (st->nmb_free == 0) {
        char name[32];
        snprintf(name, sizeof name, "p2p#%d", st->nmb++);
        sg_mailbox_t mb = sg_mailbox_by_name(name);
        xf_give(mb);
    }
    xfer_slot *x = xf_slot(src, dst, tag);
    if (!x->mb) x->mb = st->mb_free[--st->nmb_free];
    x->npend++;
    return x->mb;
}

/* Records a post handed to SimGrid; returns 1 when it matches the other side's (the transfer
 * starts now: both posts' matched_at become now). A key whose posts are all matched gives its
 * mailbox back. */
static int xf_post(int32_t src, int32_t dst, int32_t tag, int send, sim_post *me)
{
    xfer_slot *x = xf_slot(src, dst, tag);
    int32_t *other = send ? &x->nrecv : &x->nsend, matched = 0;
    x->npend--;
    me->next = NULL;
    if (*other > 0) {
        (*other)--;
        matched = 1;
        me->matched_at = simgrid_get_clock();
        me->flow = sim_replay_state->nflows++;
        sim_post *w = x->head; /* the oldest unmatched post of the other side: SimGrid pairs it */
        if (w) {
            w->matched_at = me->matched_at;
            w->flow = me->flow;
            x->head = w->next;
            if (!x->head) x->tail = NULL;
        }
    } else {
        if (send) x->nsend++;
        else x->nrecv++;
        if (x->tail) x->tail->next = me;
        else x->head = me;
        x->tail = me;
    }
    if (!xf_live(x) && x->mb) {
        xf_give(x->mb);
        x->mb = NULL;
    }
    return matched;
}

/* ---------------------------------------------------------------- transfers */

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
        sim_post posts[MAX_BATCH];
        for (int k = 0; k < m; k++) {
            const plan_instr *in = &L->ins[order[pos + base + k]];
            int peer = plan_dev_peer(p, d, in), send = in->op == PLAN_SEND;
            int src = send ? d : peer, dst = send ? peer : d;
            sg_mailbox_t mb = xf_take(src, dst, in->tag);
            long size = sim_replay_state->o->costs.nocomm ? 0 : sim_wire_bytes((double)in->bytes);
            if (send) {
                comms[k] = sg_mailbox_put_async(mb, &sim_replay_state->dummy, size);
                dv->bytes_sent += (double)in->bytes;
                sim_replay_state->activities++;
            } else {
                comms[k] = sg_mailbox_get_async(mb, &sc->slot[k]);
            }
            counted[k] = 1;
            posts[k].matched_at = 0;
            posts[k].flow = -1;
            if (xf_post(src, dst, in->tag, send, &posts[k])) {
                sim_acct(&sim_replay_state->dv[src], 0, 1);
                sim_acct(&sim_replay_state->dv[dst], 0, 1);
            }
        }
        wait_all_counted(dv, comms, m, counted);
        for (int k = 0; k < m; k++) {
            if (posts[k].matched_at > sc->moving_at) sc->moving_at = posts[k].matched_at;
            if (sim_replay_state->trace)
                sim_trace_flow(d, sc->s, posts[k].flow, L->ins[order[pos + base + k]].op == PLAN_RECV,
                               posts[k].matched_at);
        }
    }
}
