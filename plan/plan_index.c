/* plan_index.c — the index of one instruction list (plan.h, "index of a list"): stream queues,
 * wait targets, p2p runs, collective sequence numbers per group slot and the issuing host's
 * blocking points. The static check, the simulator and the interpreter all read it, so the rules
 * of what a list means (which record a wait waits for, which p2p operations are posted together,
 * where the host blocks) are written here once.
 *
 * Every pass is linear: a counting sort of launch indices by stream, first/last arrays per event,
 * one walk per stream for the runs (a hash of (stream, id) finds a group that reappears), one walk
 * in launch order for the blocking points. Errors that several instructions could raise name the
 * one a sort by (stream or event, launch index) would meet first, so that a broken plan always
 * gets the same message. */
#include "plan.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* The kernel identity of the gradient norm's compute: where the host reads the norm back. */
#define NORM_KERNEL_ID "aux.grad_norm"

static const char *name_or(const char *s, const char *dflt) { return s ? s : dflt; }

static bool is_p2p(const plan_instr *in) { return in->op == PLAN_SEND || in->op == PLAN_RECV; }

void plan_instr_describe(base_buf *b, const plan_set *p, int list, int dev, int i)
{
    const plan_list *L = &p->lists[list];
    const plan_instr *in = &L->ins[i];
    base_buf_printf(b, "#%d %s s=%s", i, plan_op_name((plan_op)in->op),
                    in->stream >= 0 && in->stream < L->nstreams ? name_or(L->streams[in->stream], "?") : "?");
    switch (in->op) {
    case PLAN_COMPUTE:
        base_buf_printf(b, " pass=%s", plan_pass_name((plan_pass)in->pass));
        if (in->region >= 0 && in->region < p->nregions) base_buf_printf(b, " region=%s", name_or(p->regions[in->region], "?"));
        break;
    case PLAN_SEND:
    case PLAN_RECV:
        /* not plan_dev_peer: messages may be about plans whose offsets are not checked yet */
        base_buf_printf(b, " peer=%" PRId64 " tag=%d", (int64_t)in->peer + (dev >= 0 ? p->devices[dev].peer_offset : 0),
                        in->tag);
        break;
    case PLAN_COLL: {
        const int32_t *slots = dev >= 0 ? p->devices[dev].group_slots : NULL;
        int g = slots && in->group >= 0 && in->group < L->ngroup_slots ? slots[in->group] : -1;
        base_buf_printf(b, " kind=%s group=%d (%s) bytes=%" PRId64, plan_coll_name((plan_coll)in->coll), g,
                        g >= 0 && g < p->ngroups ? name_or(p->groups[g].name, "?") : "?", in->bytes);
        break;
    }
    case PLAN_RECORD:
    case PLAN_WAIT: base_buf_printf(b, " event=%d", in->event); break;
    case PLAN_ALLOC:
    case PLAN_FREE:
        base_buf_printf(b, " buf=%d (%s)", in->buf,
                        in->buf >= 0 && in->buf < L->nbufs ? name_or(L->bufs[in->buf].name, "?") : "?");
        break;
    default: break;
    }
    if (in->mb >= 0) base_buf_printf(b, " mb=%d", in->mb);
    if (in->stage >= 0) base_buf_printf(b, " stage=%d", in->stage);
}

int plan_instr_errorv(base_error *e, const plan_set *p, int list, int dev, int i, const char *fmt, va_list ap)
{
    base_buf b = {0};
    if (dev >= 0) base_buf_printf(&b, "device %d (list %d) ", dev, list);
    else base_buf_printf(&b, "list %d ", list);
    plan_instr_describe(&b, p, list, dev, i);
    base_buf_puts(&b, ": ");
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    base_buf_puts(&b, msg);
    base_errorf(e, "%s", b.s);
    base_buf_free(&b);
    return -1;
}

/* An error about instruction i of list l, naming the first device that runs the list (the
 * static check's form), or only the list when none does. */
static int fail_at(base_error *e, const plan_set *p, int l, int i, const char *fmt, ...) BASE_PRINTF(5, 6);
static int fail_at(base_error *e, const plan_set *p, int l, int i, const char *fmt, ...)
{
    int d = -1;
    for (int k = 0; k < p->ndevices && d < 0; k++)
        if (p->devices[k].list == l) d = k;
    va_list ap;
    va_start(ap, fmt);
    plan_instr_errorv(e, p, l, d, i, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---------------------------------------------------------------- the passes */

/* Fields the index follows are in range; counts per stream and slot, first record per event. */
static int count(plan_index *ix, const plan_list *L, int32_t *first, base_error *e)
{
    int l = ix->list;
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        ix->wait[i] = ix->coll_seq[i] = -1;
        if (in->stream < 0 || in->stream >= L->nstreams)
            return base_errorf(e, "list %d instruction %d runs on stream %d of %d; the compiler built an invalid plan", l, i,
                               in->stream, L->nstreams);
        ix->soff[in->stream + 1]++;
        const char *bad = NULL;
        if (in->op == PLAN_RECORD || in->op == PLAN_WAIT) {
            if (in->event < 0 || in->event >= L->nevents) bad = "event";
            else if (in->op == PLAN_RECORD && first[in->event] < 0) first[in->event] = i;
        } else if (in->op == PLAN_COLL) {
            if (in->group < 0 || in->group >= L->ngroup_slots) bad = "group";
            else ix->coll_seq[i] = ix->slot_ncoll[in->group]++;
        }
        if (bad)
            return base_errorf(e, "list %d instruction %d (%s) has an invalid %s field; the compiler built an invalid plan",
                               l, i, plan_op_name((plan_op)in->op), bad);
    }
    return 0;
}

/* Stream queues: a counting sort of launch indices by stream keeps launch order inside each. */
static void queues(plan_index *ix, const plan_list *L)
{
    for (int s = 0; s < L->nstreams; s++) ix->soff[s + 1] += ix->soff[s];
    int32_t *fill = base_xmalloc(((size_t)L->nstreams + 1) * sizeof *fill);
    memcpy(fill, ix->soff, ((size_t)L->nstreams + 1) * sizeof *fill);
    for (int i = 0; i < L->n; i++) {
        int s = L->ins[i].stream;
        ix->spos[i] = fill[s] - ix->soff[s];
        ix->sidx[fill[s]++] = i;
    }
    free(fill);
}

typedef struct run_key {
    int32_t stream, id, at; /* at: launch index of the group's first run; -1: empty entry */
} run_key;

/* p2p runs, and sendrecv groups that reappear on their stream after other instructions. */
static int runs(plan_index *ix, const plan_set *p, const plan_list *L, base_error *e)
{
    int32_t *heads = base_xmalloc(((size_t)L->n + 1) * sizeof *heads); /* runs with an id, in stream order */
    size_t nheads = 0;
    for (int s = 0; s < L->nstreams; s++)
        for (int k = ix->soff[s]; k < ix->soff[s + 1]; k++) {
            const plan_instr *in = &L->ins[ix->sidx[k]];
            if (!is_p2p(in)) continue;
            int len = 1;
            if (in->sendrecv != 0) {
                while (k + len < ix->soff[s + 1]) {
                    const plan_instr *nx = &L->ins[ix->sidx[k + len]];
                    if (!is_p2p(nx) || nx->sendrecv != in->sendrecv) break;
                    len++;
                }
                heads[nheads++] = ix->sidx[k];
            }
            ix->run[ix->sidx[k]] = len;
            if (len > ix->max_run) ix->max_run = len;
            k += len - 1;
        }
    size_t cap = 16;
    while (cap < 2 * nheads) cap *= 2;
    run_key *tab = base_xmalloc(cap * sizeof *tab);
    for (size_t j = 0; j < cap; j++) tab[j].at = -1;
    int32_t bad = -1, bad_first = -1; /* the reappearing group of the smallest (stream, id) */
    for (size_t h = 0; h < nheads; h++) {
        const plan_instr *in = &L->ins[heads[h]];
        uint64_t x = (uint64_t)(uint32_t)in->stream * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uint32_t)in->sendrecv * 0xC2B2AE3D27D4EB4Full;
        size_t j = (size_t)(x ^ (x >> 31)) & (cap - 1);
        while (tab[j].at >= 0 && (tab[j].stream != in->stream || tab[j].id != in->sendrecv)) j = (j + 1) & (cap - 1);
        if (tab[j].at < 0) {
            tab[j] = (run_key){in->stream, in->sendrecv, heads[h]};
            continue;
        }
        const plan_instr *b = bad >= 0 ? &L->ins[bad] : NULL;
        if (!b || in->stream < b->stream || (in->stream == b->stream && in->sendrecv < b->sendrecv))
            bad = heads[h], bad_first = tab[j].at;
    }
    free(tab);
    free(heads);
    if (bad >= 0)
        return fail_at(e, p, ix->list, bad, "sendrecv group %d already appeared at #%d, with other instructions of the "
                       "stream in between; a group's sends and receives must be consecutive on their stream",
                       L->ins[bad].sendrecv, bad_first);
    return 0;
}

/* Wait targets: the latest record before the wait, else the event's first record. */
static int waits(plan_index *ix, const plan_set *p, const plan_list *L, const int32_t *first, base_error *e)
{
    int32_t *last = base_xmalloc(((size_t)L->nevents + 1) * sizeof *last);
    memset(last, 0xff, ((size_t)L->nevents + 1) * sizeof *last);
    int32_t lost = -1; /* the unrecorded event's first wait, of the smallest such event */
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        int ev = in->event;
        if (in->op == PLAN_RECORD) {
            last[ev] = i;
        } else if (in->op == PLAN_WAIT) {
            if (first[ev] < 0) {
                if (lost < 0 || ev < L->ins[lost].event) lost = i;
            } else if (last[ev] >= 0) {
                ix->wait[i] = last[ev];
            } else {
                ix->wait[i] = first[ev];
                if (ix->early_wait < 0 || ev < L->ins[ix->early_wait].event) ix->early_wait = i;
            }
        }
    }
    free(last);
    if (lost >= 0)
        return fail_at(e, p, ix->list, lost, "waits for event %d, which no instruction of the list records; record it on "
                       "the stream that produces what this wait needs", L->ins[lost].event);
    return 0;
}

/* The issuing host's blocking points (plan.h, PLAN_BLOCK_*). */
static void blocks(plan_index *ix, const plan_set *p, const plan_list *L)
{
    int norm_kid = -1;
    for (int k = 0; k < p->nkernel_ids; k++)
        if (p->kernel_ids[k] && !strcmp(p->kernel_ids[k], NORM_KERNEL_ID)) norm_kid = k;
    int next_mb = 0;
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        if (in->op == PLAN_COMPUTE && in->pass == PLAN_PASS_F && in->mb >= next_mb) {
            next_mb = in->mb + 1;
            if (i > 0) ix->block[i - 1] |= PLAN_BLOCK_BATCH;
        }
        if (is_p2p(in) && ix->run[i] > 0) ix->block[i] |= PLAN_BLOCK_P2P;
        if (in->op == PLAN_COMPUTE && norm_kid >= 0 && in->kid == norm_kid) {
            /* each walk ends at its stream's next compute, so the walks of one stream are disjoint */
            int at = i, len;
            const int32_t *q = plan_index_stream(ix, in->stream, &len);
            for (int k = ix->spos[i] + 1; k < len; k++) {
                const plan_instr *nx = &L->ins[q[k]];
                if (nx->op == PLAN_COLL) at = q[k];
                if (nx->op == PLAN_COLL || nx->op == PLAN_COMPUTE) break;
            }
            ix->block[at] |= PLAN_BLOCK_NORM;
        }
    }
}

/* ---------------------------------------------------------------- entry points */

int plan_index_build(plan_index *ix, const plan_set *p, int l, base_error *e)
{
    memset(ix, 0, sizeof *ix);
    ix->list = l;
    ix->early_wait = -1;
    if (l < 0 || l >= p->nlists)
        return base_errorf(e, "list %d is not one of the plan's %d lists; the compiler built an invalid plan", l, p->nlists);
    const plan_list *L = &p->lists[l];
    if (L->n < 0 || L->nstreams < 0 || L->nevents < 0 || L->ngroup_slots < 0 || (L->n && !L->ins) ||
        (L->nstreams && !L->streams))
        return base_errorf(e, "list %d has a negative count or a missing array; the compiler built an invalid plan", l);
    size_t n = (size_t)L->n + 1;
    ix->n = L->n, ix->nstreams = L->nstreams, ix->ngroup_slots = L->ngroup_slots;
    ix->soff = base_xcalloc((size_t)L->nstreams + 1, sizeof *ix->soff);
    ix->sidx = base_xmalloc(n * sizeof *ix->sidx);
    ix->spos = base_xmalloc(n * sizeof *ix->spos);
    ix->wait = base_xmalloc(n * sizeof *ix->wait);
    ix->run = base_xcalloc(n, sizeof *ix->run);
    ix->coll_seq = base_xmalloc(n * sizeof *ix->coll_seq);
    ix->slot_ncoll = base_xcalloc((size_t)L->ngroup_slots + 1, sizeof *ix->slot_ncoll);
    ix->block = base_xcalloc(n, 1);
    int32_t *first = base_xmalloc(((size_t)L->nevents + 1) * sizeof *first);
    memset(first, 0xff, ((size_t)L->nevents + 1) * sizeof *first);
    int rc = count(ix, L, first, e);
    if (!rc) {
        queues(ix, L);
        rc = runs(ix, p, L, e);
    }
    if (!rc) rc = waits(ix, p, L, first, e);
    if (!rc) blocks(ix, p, L);
    free(first);
    if (rc) {
        plan_index_free(ix);
        ix->list = l;
    }
    return rc;
}

void plan_index_free(plan_index *ix)
{
    free(ix->soff), free(ix->sidx), free(ix->spos), free(ix->wait), free(ix->run), free(ix->coll_seq);
    free(ix->slot_ncoll), free(ix->block);
    memset(ix, 0, sizeof *ix);
    ix->early_wait = -1;
}

int32_t *plan_index_device_coll_seq(const plan_index *ix, const plan_set *p, int dev)
{
    const int32_t *slots = p->devices[dev].group_slots;
    int ns = ix->ngroup_slots, dup = 0;
    for (int s = 0; s < ns && !dup; s++)
        for (int t = 0; t < s && !dup; t++)
            dup = ix->slot_ncoll[s] && ix->slot_ncoll[t] && slots[t] == slots[s];
    if (!dup) return NULL;
    /* number per group: slots naming one group count on the first of them */
    int32_t *canon = base_xmalloc(((size_t)ns + 1) * sizeof *canon);
    int32_t *cnt = base_xcalloc((size_t)ns + 1, sizeof *cnt);
    for (int s = 0; s < ns; s++) {
        canon[s] = s;
        for (int t = 0; t < s; t++)
            if (slots[t] == slots[s]) {
                canon[s] = canon[t];
                break;
            }
    }
    const plan_list *L = &p->lists[ix->list];
    int32_t *seq = base_xmalloc(((size_t)L->n + 1) * sizeof *seq);
    for (int i = 0; i < L->n; i++) seq[i] = L->ins[i].op == PLAN_COLL ? cnt[canon[L->ins[i].group]]++ : -1;
    free(canon);
    free(cnt);
    return seq;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t unit_key(const plan_instr *in)
{
    return ((int64_t)in->pass << 56) | ((int64_t)(uint32_t)(in->stage + 1) << 28) | (int64_t)(uint32_t)(in->mb + 1);
}

void plan_unit_durations(const plan_set *p, int list, const double *unit, double *out)
{
    const plan_list *L = &p->lists[list];
    int64_t *keys = base_xmalloc(((size_t)L->n + 1) * sizeof *keys);
    size_t nkeys = 0;
    for (int i = 0; i < L->n; i++)
        if (L->ins[i].op == PLAN_COMPUTE) keys[nkeys++] = unit_key(&L->ins[i]);
    qsort(keys, nkeys, sizeof *keys, cmp_i64);
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        out[i] = 0;
        if (in->op != PLAN_COMPUTE || in->pass >= PLAN_NPASS) continue;
        int64_t key = unit_key(in);
        int64_t *at = bsearch(&key, keys, nkeys, sizeof *keys, cmp_i64);
        size_t lo = (size_t)(at - keys), hi = lo;
        while (lo > 0 && keys[lo - 1] == key) lo--;
        while (hi < nkeys && keys[hi] == key) hi++;
        out[i] = unit[in->pass] / (double)(hi - lo);
    }
    free(keys);
}
