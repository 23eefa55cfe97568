/* coll_tree.c — `--coll tree`: all-reduce over NCCL's double binary tree of the group's members
 * in rank order (other kinds run the flat ring of coll_ring.c).
 *
 * The closed form: each of the two trees carries half of the buffer, reduced up and broadcast
 * down, all of a tree's flows at once (NCCL pipelines both directions in chunks); on one
 * non-blocking switch the busiest member moves four halves each way, so an all-reduce of `bytes`
 * takes 2·depth·α + 2·bytes/β, against the ring's 2(n-1)·α + 2(n-1)/n·bytes/β: the tree wins on
 * small buffers (latency), the ring on large ones. The tree is flat, not NCCL's chain inside each
 * node plus tree across nodes. Groups that run tree all-reduces are never folded: a tree's members
 * do not all send alike (leaves, inner nodes, roots). */
#include "sim_internal.h"

#include <simgrid/actor.h>
#include <simgrid/comm.h>
#include <simgrid/mailbox.h>

/* NCCL's double binary tree over n ranks. Tree 0 is the in-order binary tree over positions
 * 1..n (rank r at position r + 1): a position's parent is the "rounder" of its neighbours (more
 * trailing zero bits), so odd positions are leaves and even ones inner nodes. Tree 1 mirrors it
 * (position n - r) when n is even and shifts it by one (position (r + 1) mod n + 1) when n is odd,
 * so that a rank is an inner node in at most one of the two trees and no link carries more than
 * two of the four half-buffer streams of a tree in each direction. */
static int tree_rank(int t, int n, int pos) { return t == 0 ? pos - 1 : n % 2 == 0 ? n - pos : (pos - 2 + n) % n; }

static void prepare_tree(group_rt *gr, int n)
{
    gr->tree = base_xmalloc(6 * (size_t)n * sizeof *gr->tree);
    for (int k = 0; k < 6 * n; k++) gr->tree[k] = -1;
    for (int t = 0; t < 2; t++)
        for (int x = 2; x <= n; x += 2) {
            /* children: x - j/2, and the roundest position in (x, x + j) that exists */
            int j = x & -x, kids[2] = {x - j / 2, -1}, nc = 0;
            for (int step = j / 2; step >= 1 && kids[1] < 0; step /= 2)
                if (x + step <= n) kids[1] = x + step;
            int px = tree_rank(t, n, x);
            for (int c = 0; c < 2; c++) {
                if (kids[c] < 1) continue;
                int pc = tree_rank(t, n, kids[c]);
                gr->tree[6 * px + 3 * t + 1 + nc++] = pc;
                gr->tree[6 * pc + 3 * t] = px;
            }
        }
    gr->tree_depth = 0; /* the same in both trees: positions' chains to the root */
    for (int r = 0; r < n; r++) {
        int dd = 0;
        for (int q = r; gr->tree[6 * q] >= 0; q = gr->tree[6 * q]) dd++;
        if (dd > gr->tree_depth) gr->tree_depth = dd;
    }
}

/* A tree all-reduce (NCCL's "tree" algorithm): each tree carries half of the buffer, reduced up
 * to its root and broadcast back down. NCCL pipelines both directions in small chunks, so all of
 * a tree's streams run at once: each member sends its half to its parent and to each child, and
 * receives from each; the flows carry one latency and the member then waits the remaining
 * 2 * depth - 1 hop latencies of the round trip. On a non-blocking switch the busiest links (an
 * inner node with a parent and two children in one tree, a leaf in the other) carry 4 halves, so
 * the time is 2 * depth * alpha + 2 * bytes / beta (ring: 2 (n - 1) alpha + 2 (n - 1) / n bytes / beta). */
static void run_tree(stream_ctx *sc, int g, int skey, int slot, int rank, double bytes)
{
    int d = sc->dev;
    dev_rt *dv = &sim_replay_state->dv[d];
    group_rt *gr = &sim_replay_state->gr[g];
    const plan_group *grp = &sim_replay_state->p->groups[g];
    int n = grp->n;
    if (!gr->tree) prepare_tree(gr, n);
    double half = bytes / 2;
    sg_comm_t comms[12];
    int nc = 0, first = -1;
    sg_mailbox_t in_mb = sim_coll_mailbox(g, skey, FLAT_PHASE, rank);
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 3; k++) {
            int peer = gr->tree[6 * rank + 3 * t + k];
            if (peer < 0) continue;
            if (first < 0) first = peer;
            comms[nc++] = sg_mailbox_put_async(sim_coll_mailbox(g, skey, FLAT_PHASE, peer), &sim_replay_state->dummy, sim_wire_bytes(half));
            comms[nc++] = sg_mailbox_get_async(in_mb, &sc->slot[0]);
            dv->bytes_sent += half;
            sim_replay_state->activities++;
        }
    sg_comm_wait_all(comms, (size_t)nc);
    if (first >= 0 && gr->tree_depth > 0) sg_actor_sleep_for((2 * gr->tree_depth - 1) * sim_hop_alpha(d, slot, 0, grp->devices[first]));
}

void sim_coll_tree_run(const sim_coll_call *c)
{
    if (c->kind == PLAN_ALL_REDUCE) {
        run_tree(c->sc, c->g, c->skey, c->slot, c->rank, c->bytes);
        return;
    }
    sim_coll_ring_run(c);
}

bool sim_coll_tree_foldable(const plan_set *p, int g, const char **why)
{
    *why = "tree all-reduces";
    return p->groups[g].n <= 1;
}
