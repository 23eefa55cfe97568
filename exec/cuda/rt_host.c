/* rt_host.c — the CUDA runtime's host-side logic (rt_host.h): stream and event bookkeeping,
 * communicator keys, sendrecv spans and the caching allocator. No CUDA here: tests link it on
 * machines without a GPU. */
#include <stdlib.h>
#include <string.h>

#include "rt_host.h"

/* ---------------------------------------------------------------- streams and events */

int exec_cuda_streams_init(exec_cuda_streams *s, const plan_set *p, int list, base_error *e)
{
    memset(s, 0, sizeof *s);
    /* the list's index (plan.h) says which record each wait waits on and where sendrecv groups
     * are: the rule the interpreter, the simulator and the static check follow */
    if (plan_index_build(&s->ix, p, list, e)) return -1;
    const plan_list *L = &p->lists[list];
    const int n = L->n > 0 ? L->n : 1;
    s->nstreams = L->nstreams > 0 ? L->nstreams : 1;
    s->record_of = base_xcalloc((size_t)n, sizeof(int));
    s->wait_on = base_xcalloc((size_t)n, sizeof(int));
    s->recs = base_xcalloc((size_t)s->nstreams, sizeof(int *));
    s->waits = base_xcalloc((size_t)s->nstreams, sizeof(int *));
    s->nrecs = base_xcalloc((size_t)s->nstreams, sizeof(int));
    s->nwaits = base_xcalloc((size_t)s->nstreams, sizeof(int));
    s->rec_cur = base_xcalloc((size_t)s->nstreams, sizeof(int));
    s->wait_cur = base_xcalloc((size_t)s->nstreams, sizeof(int));
    for (int i = 0; i < L->n; i++) {
        s->record_of[i] = s->wait_on[i] = -1;
        const plan_instr *in = &L->ins[i];
        if (in->op == PLAN_RECORD) {
            s->record_of[i] = s->nrecords++;
            s->nrecs[in->stream]++;
        } else if (in->op == PLAN_WAIT) {
            s->nwaits[in->stream]++;
        }
    }
    for (int k = 0; k < s->nstreams; k++) {
        s->recs[k] = base_xcalloc((size_t)(s->nrecs[k] + 1), sizeof(int));
        s->waits[k] = base_xcalloc((size_t)(s->nwaits[k] + 1), sizeof(int));
        s->nrecs[k] = s->nwaits[k] = 0;
    }
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        if (in->op == PLAN_RECORD) s->recs[in->stream][s->nrecs[in->stream]++] = i;
        if (in->op != PLAN_WAIT) continue;
        s->waits[in->stream][s->nwaits[in->stream]++] = i;
        s->wait_on[i] = s->record_of[s->ix.wait[i]];
    }
    return 0;
}

void exec_cuda_streams_free(exec_cuda_streams *s)
{
    if (s->recs)
        for (int k = 0; k < s->nstreams; k++) free(s->recs[k]);
    if (s->waits)
        for (int k = 0; k < s->nstreams; k++) free(s->waits[k]);
    free(s->recs);
    free(s->waits);
    free(s->nrecs);
    free(s->nwaits);
    free(s->rec_cur);
    free(s->wait_cur);
    free(s->record_of);
    free(s->wait_on);
    plan_index_free(&s->ix);
    memset(s, 0, sizeof *s);
}

void exec_cuda_streams_reset(exec_cuda_streams *s)
{
    for (int k = 0; k < s->nstreams; k++) s->rec_cur[k] = s->wait_cur[k] = 0;
}

int exec_cuda_streams_next_record(exec_cuda_streams *s, const plan_list *L, int stream, int event,
                                  int *ev, base_error *e)
{
    if (stream < 0 || stream >= s->nstreams || s->rec_cur[stream] >= s->nrecs[stream])
        return base_errorf(e, "a record of event %d on stream %d that the plan does not have",
                           event, stream);
    int i = s->recs[stream][s->rec_cur[stream]++];
    if (L->ins[i].event != event)
        return base_errorf(e, "stream %d recorded event %d where the plan's next record (#%d) is "
                              "of event %d; the interpreter and the backend disagree",
                           stream, event, i, L->ins[i].event);
    *ev = s->record_of[i];
    return 0;
}

int exec_cuda_streams_next_wait(exec_cuda_streams *s, const plan_list *L, int stream, int event,
                                int *ev, base_error *e)
{
    if (stream < 0 || stream >= s->nstreams || s->wait_cur[stream] >= s->nwaits[stream])
        return base_errorf(e, "a wait for event %d on stream %d that the plan does not have",
                           event, stream);
    int i = s->waits[stream][s->wait_cur[stream]++];
    if (L->ins[i].event != event)
        return base_errorf(e, "stream %d waits for event %d where the plan's next wait (#%d) is "
                              "for event %d; the interpreter and the backend disagree",
                           stream, event, i, L->ins[i].event);
    *ev = s->wait_on[i];
    return 0;
}

/* ---------------------------------------------------------------- communicators */

static const char *stream_name(const plan_list *L, int s)
{
    return s >= 0 && s < L->nstreams && L->streams[s] ? L->streams[s] : "";
}

static int key_cmp(const void *a, const void *b)
{
    const exec_cuda_comm_key *x = a, *y = b;
    if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
    if (x->kind == EXEC_CUDA_COMM_GROUP) {
        if (x->group != y->group) return x->group < y->group ? -1 : 1;
        return strcmp(x->stream, y->stream);
    }
    if (x->src != y->src) return x->src < y->src ? -1 : 1;
    if (x->dst != y->dst) return x->dst < y->dst ? -1 : 1;
    int c = strcmp(x->stream, y->stream);
    return c ? c : strcmp(x->stream2, y->stream2);
}

int exec_cuda_comm_find_group(const exec_cuda_comm_key *k, int n, int group, const char *stream)
{
    for (int i = 0; i < n; i++)
        if (k[i].kind == EXEC_CUDA_COMM_GROUP && k[i].group == group && !strcmp(k[i].stream, stream))
            return i;
    return -1;
}

int exec_cuda_comm_find_p2p(const exec_cuda_comm_key *k, int n, int src, int dst,
                            const char *ssend, const char *srecv)
{
    for (int i = 0; i < n; i++)
        if (k[i].kind == EXEC_CUDA_COMM_P2P && k[i].src == src && k[i].dst == dst &&
            !strcmp(k[i].stream, ssend) && !strcmp(k[i].stream2, srecv))
            return i;
    return -1;
}

int exec_cuda_comm_rank(const exec_cuda_comm_key *k, int device)
{
    for (int i = 0; i < k->nmembers; i++)
        if (k->members[i] == device) return i;
    return -1;
}

const char *exec_cuda_p2p_peer_stream(const plan_set *p, int device, int i)
{
    const plan_list *L = plan_dev_list(p, device);
    const plan_instr *in = &L->ins[i];
    if (in->op != PLAN_SEND && in->op != PLAN_RECV) return NULL;
    int peer = plan_dev_peer(p, device, in);
    if (peer < 0 || peer >= p->ndevices) return NULL;
    const plan_list *P = plan_dev_list(p, peer);
    const plan_op want = in->op == PLAN_SEND ? PLAN_RECV : PLAN_SEND;
    for (int j = 0; j < P->n; j++) {
        const plan_instr *m = &P->ins[j];
        if (m->op == want && m->tag == in->tag && plan_dev_peer(p, peer, m) == device)
            return stream_name(P, m->stream);
    }
    return NULL;
}

void exec_cuda_comm_keys_free(exec_cuda_comm_key *k, int n)
{
    if (!k) return;
    for (int i = 0; i < n; i++) free(k[i].members);
    free(k);
}

int exec_cuda_comm_keys(const plan_set *p, int head_region, exec_cuda_comm_key **out, int *nout,
                        base_error *e)
{
    *out = NULL;
    *nout = 0;
    BASE_VEC(exec_cuda_comm_key) k = {0};
    /* users[key][device]: which devices issue operations on a group key */
    BASE_VEC(bool *) users = {0};
    for (int d = 0; d < p->ndevices; d++) {
        const plan_list *L = plan_dev_list(p, d);
        for (int i = 0; i < L->n; i++) {
            const plan_instr *in = &L->ins[i];
            if (in->op == PLAN_SEND) {
                int dst = plan_dev_peer(p, d, in);
                const char *rs = exec_cuda_p2p_peer_stream(p, d, i);
                if (!rs) {
                    base_errorf(e, "device %d's send #%d (tag %d) to device %d has no matching "
                                   "receive there; the plan is inconsistent, compile it again",
                                d, i, in->tag, dst);
                    goto fail;
                }
                const char *ss = stream_name(L, in->stream);
                if (exec_cuda_comm_find_p2p(k.v, (int)k.n, d, dst, ss, rs) >= 0) continue;
                exec_cuda_comm_key nk = {EXEC_CUDA_COMM_P2P, -1, d, dst, ss, rs, 2,
                                         base_xcalloc(2, sizeof(int))};
                nk.members[0] = d;
                nk.members[1] = dst;
                BASE_VEC_PUSH(k, nk);
                BASE_VEC_PUSH(users, NULL);
                continue;
            }
            int g;
            const char *s;
            if (in->op == PLAN_COLL) {
                g = plan_dev_group(p, d, in);
                s = stream_name(L, in->stream);
            } else if (in->op == PLAN_COMPUTE && in->tp_group >= 0 && head_region >= 0 &&
                       in->region == head_region && in->pass == PLAN_PASS_F) {
                g = p->devices[d].group_slots[in->tp_group];
                s = EXEC_CUDA_REDUCE_STREAM;
            } else {
                continue;
            }
            if (g < 0 || g >= p->ngroups) {
                base_errorf(e, "device %d's instruction #%d names group %d of %d; the plan is "
                               "corrupt",
                            d, i, g, p->ngroups);
                goto fail;
            }
            int at = exec_cuda_comm_find_group(k.v, (int)k.n, g, s);
            if (at < 0) {
                const plan_group *G = &p->groups[g];
                exec_cuda_comm_key nk = {EXEC_CUDA_COMM_GROUP, g, -1, -1, s, NULL, G->n,
                                         base_xcalloc((size_t)(G->n > 0 ? G->n : 1), sizeof(int))};
                memcpy(nk.members, G->devices, (size_t)G->n * sizeof(int));
                BASE_VEC_PUSH(k, nk);
                BASE_VEC_PUSH(users, base_xcalloc((size_t)p->ndevices, sizeof(bool)));
                at = (int)k.n - 1;
            }
            users.v[at][d] = true;
        }
    }
    /* a group's collectives on a stream must be issued by exactly its members */
    for (size_t i = 0; i < k.n; i++) {
        if (k.v[i].kind != EXEC_CUDA_COMM_GROUP) continue;
        const plan_group *G = &p->groups[k.v[i].group];
        int members = 0, n = 0;
        for (int m = 0; m < G->n; m++) {
            int dv = G->devices[m];
            if (dv < 0 || dv >= p->ndevices || !users.v[i][dv]) {
                base_errorf(e, "group %d (%s) has operations on stream %s, but its member device %d "
                               "issues none there; the plan is inconsistent, compile it again",
                            k.v[i].group, G->name ? G->name : "?", k.v[i].stream, dv);
                goto fail;
            }
            members++;
        }
        for (int d = 0; d < p->ndevices; d++) n += users.v[i][d];
        if (n != members) {
            base_errorf(e, "group %d (%s) is used on stream %s by a device outside it",
                        k.v[i].group, G->name ? G->name : "?", k.v[i].stream);
            goto fail;
        }
    }
    for (size_t i = 0; i < users.n; i++) free(users.v[i]);
    free(users.v);
    if (k.n) qsort(k.v, k.n, sizeof *k.v, key_cmp);
    *out = k.v;
    *nout = (int)k.n;
    return 0;
fail:
    for (size_t i = 0; i < users.n; i++) free(users.v[i]);
    free(users.v);
    exec_cuda_comm_keys_free(k.v, (int)k.n);
    return -1;
}

/* ---------------------------------------------------------------- sendrecv groups */

void exec_cuda_sendrecv_spans(const plan_index *ix, int *first, int *last)
{
    for (int i = 0; i < ix->n; i++) first[i] = last[i] = -1;
    /* a run (plan_index: a sendrecv group, or a lone transfer) starts at its head in stream order */
    for (int s = 0; s < ix->nstreams; s++) {
        int len;
        const int32_t *q = plan_index_stream(ix, s, &len);
        for (int k = 0; k < len; k++) {
            int run = ix->run[q[k]];
            for (int j = 0; j < run; j++) first[q[k + j]] = q[k], last[q[k + j]] = q[k + run - 1];
        }
    }
}

/* ---------------------------------------------------------------- the caching allocator */

#define POOL_SMALL_MIN ((size_t)512)
#define POOL_SMALL_MAX ((size_t)1 << 20)
#define POOL_LARGE_STEP ((size_t)2 << 20)

size_t exec_cuda_pool_class(size_t bytes)
{
    if (bytes <= POOL_SMALL_MIN) return POOL_SMALL_MIN;
    if (bytes <= POOL_SMALL_MAX) {
        size_t c = POOL_SMALL_MIN;
        while (c < bytes) c <<= 1;
        return c;
    }
    return (bytes + POOL_LARGE_STEP - 1) / POOL_LARGE_STEP * POOL_LARGE_STEP;
}

void exec_cuda_pool_init(exec_cuda_pool *pl, const exec_cuda_pool_ops *ops)
{
    memset(pl, 0, sizeof *pl);
    pl->ops = *ops;
}

static void idle_remove(exec_cuda_pool *pl, size_t i)
{
    pl->idle[i] = pl->idle[--pl->nidle];
}

/* Waits for block i's fence and forgets it. */
static int settle(exec_cuda_pool *pl, size_t i, base_error *e)
{
    exec_cuda_pool_block *b = &pl->idle[i];
    if (!b->fence) return 0;
    if (pl->ops.fence_wait && pl->ops.fence_wait(pl->ops.ctx, b->fence, e)) return -1;
    if (pl->ops.fence_free) pl->ops.fence_free(pl->ops.ctx, b->fence);
    b->fence = NULL;
    return 0;
}

int exec_cuda_pool_trim(exec_cuda_pool *pl, base_error *e)
{
    int rc = 0;
    while (pl->nidle > 0) {
        size_t i = pl->nidle - 1;
        if (settle(pl, i, e)) rc = -1;
        pl->ops.raw_free(pl->ops.ctx, pl->idle[i].p);
        pl->reserved -= (double)pl->idle[i].cls;
        pl->nidle--;
    }
    return rc;
}

void exec_cuda_pool_destroy(exec_cuda_pool *pl)
{
    base_error e;
    base_error_clear(&e);
    exec_cuda_pool_trim(pl, &e);
    free(pl->idle);
    pl->idle = NULL;
    pl->nidle = pl->capidle = 0;
}

static void count_out(exec_cuda_pool *pl, size_t bytes, size_t cls)
{
    pl->requested += (double)bytes;
    pl->in_use += (double)cls;
    if (pl->requested > pl->peak_requested) pl->peak_requested = pl->requested;
    if (pl->in_use > pl->peak_in_use) pl->peak_in_use = pl->in_use;
}

int exec_cuda_pool_alloc(exec_cuda_pool *pl, size_t bytes, void **p, base_error *e)
{
    *p = NULL;
    const size_t cls = exec_cuda_pool_class(bytes);
    /* an idle block of the class: a free one first, then a pending one whose fence has passed */
    ptrdiff_t pending = -1;
    for (size_t i = 0; i < pl->nidle; i++) {
        exec_cuda_pool_block *b = &pl->idle[i];
        if (b->cls != cls) continue;
        if (!b->fence) {
            *p = b->p;
            idle_remove(pl, i);
            pl->reuses++;
            count_out(pl, bytes, cls);
            return 0;
        }
        if (pending < 0) pending = (ptrdiff_t)i;
    }
    for (size_t i = (size_t)(pending < 0 ? (ptrdiff_t)pl->nidle : pending); i < pl->nidle; i++) {
        exec_cuda_pool_block *b = &pl->idle[i];
        if (b->cls != cls || !b->fence) continue;
        bool done = false;
        if (pl->ops.fence_done(pl->ops.ctx, b->fence, &done, e)) return -1;
        if (!done) continue;
        if (pl->ops.fence_free) pl->ops.fence_free(pl->ops.ctx, b->fence);
        *p = b->p;
        idle_remove(pl, i);
        pl->reuses++;
        count_out(pl, bytes, cls);
        return 0;
    }
    /* a new block; when memory runs out, wait for the pending blocks of the class, then give
     * every idle block back and try once more */
    base_error raw;
    base_error_clear(&raw);
    if (pl->ops.raw_alloc(pl->ops.ctx, cls, p, &raw) == 0) {
        pl->raw_allocs++;
        pl->reserved += (double)cls;
        if (pl->reserved > pl->peak_reserved) pl->peak_reserved = pl->reserved;
        count_out(pl, bytes, cls);
        return 0;
    }
    for (size_t i = 0; i < pl->nidle; i++) {
        if (pl->idle[i].cls != cls) continue;
        if (settle(pl, i, e)) return -1;
        *p = pl->idle[i].p;
        idle_remove(pl, i);
        pl->reuses++;
        count_out(pl, bytes, cls);
        return 0;
    }
    if (exec_cuda_pool_trim(pl, e)) return -1;
    base_error_clear(&raw);
    if (pl->ops.raw_alloc(pl->ops.ctx, cls, p, &raw) == 0) {
        pl->raw_allocs++;
        pl->reserved += (double)cls;
        if (pl->reserved > pl->peak_reserved) pl->peak_reserved = pl->reserved;
        count_out(pl, bytes, cls);
        return 0;
    }
    char a[32], b[32];
    return base_errorf(e, "%s (a block of %s; %s held by the pool at its peak)", raw.msg,
                       base_fmt_bytes((double)cls, a, sizeof a),
                       base_fmt_bytes(pl->peak_reserved, b, sizeof b));
}

int exec_cuda_pool_free(exec_cuda_pool *pl, void *p, size_t bytes, int stream, base_error *e)
{
    if (!p) return 0;
    const size_t cls = exec_cuda_pool_class(bytes);
    void *fence = NULL;
    if (stream >= 0 && pl->ops.fence_record && pl->ops.fence_record(pl->ops.ctx, stream, &fence, e))
        return -1;
    if (pl->nidle == pl->capidle) {
        pl->capidle = pl->capidle ? 2 * pl->capidle : 64;
        pl->idle = base_xrealloc(pl->idle, pl->capidle * sizeof *pl->idle);
    }
    pl->idle[pl->nidle++] = (exec_cuda_pool_block){p, cls, fence};
    pl->requested -= (double)bytes;
    pl->in_use -= (double)cls;
    return 0;
}

void exec_cuda_pool_reset_peaks(exec_cuda_pool *pl)
{
    pl->peak_requested = pl->requested;
    pl->peak_in_use = pl->in_use;
    pl->peak_reserved = pl->reserved;
}
