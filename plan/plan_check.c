/* plan_check.c — the static checks of a plan (plan.h, docs/plan-format.md "The abstract run"):
 * before a plan is written or run, prove that it cannot deadlock, that every group's members issue
 * the same collectives in the same order, and that buffers are only used while live; and report
 * each device's peak memory with its breakdown, from an abstract run timed by the header's GPU.
 *
 * The run is event-driven so that a 1,024-device plan with ten thousand instructions per device
 * checks in about a second: a heap of completion times, per-stream cursors into instruction arrays
 * shared by the devices that share a list, small per-device lists of posted p2p operations, and
 * per-(group, sequence number) arrival counters for collectives. Nothing scans all devices per
 * step. Same plan, same result: ties are broken by the order events were scheduled. */
#include "plan.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define LISTED_DEVICES 8 /* a deadlock report names the stuck instructions of this many devices */
#define LISTED_STREAMS 3 /* ... and at most this many streams of each */

/* ST_HOLD: the head is not issued yet (the host model, plan_check_host) */
enum { ST_IDLE, ST_RUNNING, ST_WAIT, ST_P2P, ST_COLL, ST_HOLD, ST_DONE };

/* What the devices sharing a list share: the list's stream orders and static facts. */
typedef struct list_info {
    int first_dev;        /* a device using the list (for messages); -1 when unused */
    plan_index ix;        /* stream queues, wait targets, p2p runs, collective numbers */
    double *udur;         /* unit costs (plan_unit_makespan): seconds per instruction */
    uint8_t *slot_used;   /* per group slot: named by a collective or a compute's tp/ep group */
    int32_t *coll_off;    /* ngroup_slots + 1: slot s's collectives are coll_ins[coll_off[s] ..) */
    int32_t *coll_ins;    /* launch indices of the list's collectives by slot, in launch order */
    double busy;          /* compute seconds */
    int64_t count[PLAN_NOP + 1];
    int32_t peer_lo, peer_hi, peer_lo_at, peer_hi_at; /* extreme p2p peers, for peer_offset checks */
} list_info;

typedef struct posted {
    int32_t slot, ins, peer, tag;
    int64_t bytes;
    int send;
} posted;

typedef struct dev_state {
    int32_t slot0;        /* global index of the device's stream 0 */
    int32_t *buf;         /* per buffer: -1 when not live, else the number of running uses */
    int32_t *last;        /* per buffer: launch index of its last alloc or free, -1 */
    int32_t *coll_seq;    /* per instruction, only when two slots name one group (rare) */
    double cur[PLAN_NMEM], total;
    int nwaiting;         /* streams blocked on a WAIT */
    posted *post;         /* p2p operations posted and not yet matched, in posting order */
    int npost, cappost;
    /* the issuing host (plan_check_host): launch indices [0, issued) are issued; when blocked,
     * at sync point `blocked` until stream s has passed need[s] instructions */
    int32_t issued, blocked;
    int32_t *need;
} dev_state;

typedef struct stream_state {
    int32_t dev, s;
    int32_t cur;          /* position of the head in the stream's order */
    int32_t batch;        /* instructions the head occupies: a sendrecv group spans several */
    int32_t pending;      /* the head's p2p transfers not yet matched */
    int32_t next;         /* next stream waiting on the same collective instance */
    int state;
    double end;           /* when the head's transfers finish */
    double start;         /* when the head reached the stream's head (for the timing callback) */
} stream_state;

typedef struct heap_item {
    double t;
    uint64_t seq;
    int32_t slot;
} heap_item;

typedef struct checker {
    const plan_set *p;
    base_error *e;
    plan_device_stats *ds;
    list_info *li;
    dev_state *dv;
    stream_state *ss;
    int nslots;
    double *kl_dur;       /* per kernel list: seconds on the header's GPU */
    int32_t *gsorted;     /* group members, sorted, for membership tests */
    int32_t *gmoff;       /* ngroups + 1 offsets into gsorted */
    int32_t *goff;        /* ngroups + 1: group g's collective instances are goff[g] .. goff[g+1] */
    int32_t *gcount, *ghead;
    heap_item *heap;
    int nheap, capheap;
    uint64_t seq;
    int32_t *work;
    int nwork, capwork;
    double now;
    int failed;
    unsigned host;        /* PLAN_BLOCK_* kinds at which the modelled host blocks; 0: no host */
    bool unit;            /* unit costs and free communication instead of the header's GPU */
    bool all_devices;     /* run every device, not one per replica class */
    plan_fold fold;       /* the replicas the run leaves to replica 0 (replicas 1: none) */
    plan_stuck *stuck;    /* optional: the stuck instructions of a deadlock */
    plan_timing_fn timing; /* optional: told when each instruction ran */
    void *timing_ctx;
} checker;

/* ---------------------------------------------------------------- helpers */

static const plan_list *dev_list(const checker *c, int d) { return plan_dev_list(c->p, d); }

/* Whether the run runs device d itself: a copy of a replica-0 device does what its original does
 * at the same times (plan_fold.c), so its original stands for it. */
static bool runs_dev(const checker *c, int d) { return c->fold.replicas <= 1 || c->fold.index[d] == 0; }

static void heap_push(checker *c, double t, int32_t slot)
{
    if (c->nheap == c->capheap) {
        c->capheap = c->capheap ? 2 * c->capheap : 1024;
        c->heap = base_xrealloc(c->heap, (size_t)c->capheap * sizeof *c->heap);
    }
    heap_item it = {t, c->seq++, slot};
    int i = c->nheap++;
    while (i > 0) {
        int up = (i - 1) / 2;
        heap_item *q = &c->heap[up];
        if (q->t < it.t || (q->t == it.t && q->seq < it.seq)) break;
        c->heap[i] = *q;
        i = up;
    }
    c->heap[i] = it;
}

static heap_item heap_pop(checker *c)
{
    heap_item top = c->heap[0], last = c->heap[--c->nheap];
    int i = 0, n = c->nheap;
    for (;;) {
        int l = 2 * i + 1;
        if (l >= n) break;
        int r = l + 1;
        int best = (r < n && (c->heap[r].t < c->heap[l].t ||
                              (c->heap[r].t == c->heap[l].t && c->heap[r].seq < c->heap[l].seq))) ? r : l;
        if (last.t < c->heap[best].t || (last.t == c->heap[best].t && last.seq < c->heap[best].seq)) break;
        c->heap[i] = c->heap[best];
        i = best;
    }
    if (n) c->heap[i] = last;
    return top;
}

static void work_push(checker *c, int32_t slot)
{
    if (c->nwork == c->capwork) {
        c->capwork = c->capwork ? 2 * c->capwork : 1024;
        c->work = base_xrealloc(c->work, (size_t)c->capwork * sizeof *c->work);
    }
    c->work[c->nwork++] = slot;
}

static const char *name_or(const char *s, const char *dflt) { return s ? s : dflt; }

/* "#12 send s=pp peer=3 tag=17 mb=2 stage=0": enough to find the line in the plan file. */
static void describe(base_buf *b, const checker *c, int d, int i)
{
    plan_instr_describe(b, c->p, c->p->devices[d].list, d, i);
}

/* An error about one instruction of one device: "device 3 (list 1) #12 free ...: what; fix". */
static int fail_at(checker *c, int d, int i, const char *fmt, ...) BASE_PRINTF(4, 5);
static int fail_at(checker *c, int d, int i, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    plan_instr_errorv(c->e, c->p, c->p->devices[d].list, d, i, fmt, ap);
    va_end(ap);
    c->failed = 1;
    return -1;
}

static int fail(checker *c, const char *fmt, ...) BASE_PRINTF(2, 3);
static int fail(checker *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    base_error_vat(c->e, NULL, 0, 0, fmt, ap);
    va_end(ap);
    c->failed = 1;
    return -1;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* ---------------------------------------------------------------- static facts per list */

double plan_kernel_seconds(const plan_gpu *g, const plan_kernel *k)
{
    double fl = g->peak_flops[k->dtype] > 0 && k->flops > 0 ? k->flops / g->peak_flops[k->dtype] : 0;
    double by = g->hbm_bw > 0 && k->bytes > 0 ? k->bytes / g->hbm_bw : 0;
    double t = fl > by ? fl : by;
    return t >= 0 ? t : 0; /* inf/inf */
}

static int prepare_kernels(checker *c)
{
    const plan_set *p = c->p;
    c->kl_dur = base_xcalloc((size_t)p->nkernel_lists + 1, sizeof *c->kl_dur);
    for (int i = 0; i < p->nkernel_lists; i++) {
        const plan_kernel_list *kl = &p->kernel_lists[i];
        if (kl->n < 0 || (kl->n > 0 && !kl->k)) return fail(c, "kernel list %d has %d kernels but no array; the compiler built an invalid plan", i, kl->n);
        double t = 0;
        for (int j = 0; j < kl->n; j++) {
            if (kl->k[j].dtype >= PLAN_NDTYPE)
                return fail(c, "kernel list %d kernel %d has dtype %d; the compiler built an invalid plan", i, j, kl->k[j].dtype);
            t += plan_kernel_seconds(&p->gpu, &kl->k[j]);
        }
        c->kl_dur[i] = t;
    }
    return 0;
}

/* Checks one list's instructions in isolation and computes what its devices share. Messages name
 * the first device that uses the list, so that they read like the run's own errors. Lists that no
 * device uses are not checked: nothing runs them. */
static int prepare_list(checker *c, int l)
{
    const plan_set *p = c->p;
    const plan_list *L = &p->lists[l];
    list_info *li = &c->li[l];
    int d = li->first_dev;
    if (d < 0) return 0;
    if (L->n < 0 || L->nstreams < 0 || L->nbufs < 0 || L->ngroup_slots < 0 || L->nevents < 0 ||
        (L->n && !L->ins) || (L->nbufs && !L->bufs) || (L->nstreams && !L->streams))
        return fail(c, "list %d has a negative count or a missing array; the compiler built an invalid plan", l);
    for (int b = 0; b < L->nbufs; b++)
        if (L->bufs[b].mem >= PLAN_NMEM || L->bufs[b].bytes < 0)
            return fail(c, "list %d buffer %d (%s) has category %d and %" PRId64 " bytes; the compiler built an invalid plan",
                        l, b, name_or(L->bufs[b].name, "?"), L->bufs[b].mem, L->bufs[b].bytes);

    li->slot_used = base_xcalloc((size_t)L->ngroup_slots + 1, 1);
    li->peer_lo = INT32_MAX, li->peer_hi = INT32_MIN;

    /* the fields each op interprets must be in range before anything indexes with them */
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        if (in->op > PLAN_NOP) return fail(c, "list %d instruction %d has op %d; the compiler built an invalid plan", l, i, in->op);
        if (in->stream < 0 || in->stream >= L->nstreams)
            return fail(c, "list %d instruction %d runs on stream %d of %d; the compiler built an invalid plan", l, i,
                        in->stream, L->nstreams);
        li->count[in->op]++;
        const char *bad = NULL;
        switch (in->op) {
        case PLAN_COMPUTE:
            if (in->pass >= PLAN_NPASS) bad = "pass";
            else if (in->region < -1 || in->region >= p->nregions) bad = "region";
            else if (in->kid < -1 || in->kid >= p->nkernel_ids) bad = "kid";
            else if (in->kernels < -1 || in->kernels >= p->nkernel_lists) bad = "kernels";
            else if (in->tp_group < -1 || in->tp_group >= L->ngroup_slots) bad = "tp_group";
            else if (in->ep_group < -1 || in->ep_group >= L->ngroup_slots) bad = "ep_group";
            else if (in->nreads < 0 || in->nwrites < 0 || (in->nreads && !in->reads) || (in->nwrites && !in->writes)) bad = "reads/writes";
            for (int q = 0; !bad && q < in->nreads; q++)
                if (in->reads[q] < 0 || in->reads[q] >= L->nbufs) bad = "reads";
            for (int q = 0; !bad && q < in->nwrites; q++)
                if (in->writes[q] < 0 || in->writes[q] >= L->nbufs) bad = "writes";
            if (!bad) {
                if (in->kernels >= 0) li->busy += c->kl_dur[in->kernels];
                if (in->tp_group >= 0) li->slot_used[in->tp_group] = 1;
                if (in->ep_group >= 0) li->slot_used[in->ep_group] = 1;
            }
            break;
        case PLAN_SEND:
        case PLAN_RECV:
        case PLAN_COLL:
            if (in->bytes < 0) bad = "bytes";
            else if (in->buf < -1 || in->buf >= L->nbufs) bad = "buf";
            else if (in->op == PLAN_COLL) {
                if (in->coll >= PLAN_NCOLL) bad = "kind";
                else if (in->group < 0 || in->group >= L->ngroup_slots) bad = "group";
                else li->slot_used[in->group] = 1;
            } else {
                if (in->peer < li->peer_lo) li->peer_lo = in->peer, li->peer_lo_at = i;
                if (in->peer > li->peer_hi) li->peer_hi = in->peer, li->peer_hi_at = i;
            }
            break;
        case PLAN_RECORD:
        case PLAN_WAIT:
            if (in->event < 0 || in->event >= L->nevents) bad = "event";
            break;
        case PLAN_ALLOC:
        case PLAN_FREE:
            if (in->buf < 0 || in->buf >= L->nbufs) bad = "buf";
            else if (in->bytes != L->bufs[in->buf].bytes || in->mem != L->bufs[in->buf].mem) {
                return fail_at(c, d, i, "says %" PRId64 " bytes of %s but buffer %d is declared with %" PRId64
                               " bytes of %s; make the instruction agree with the buffer table", in->bytes,
                               plan_mem_name((plan_mem)(in->mem < PLAN_NMEM ? in->mem : PLAN_NMEM)), in->buf,
                               L->bufs[in->buf].bytes, plan_mem_name((plan_mem)L->bufs[in->buf].mem));
            }
            break;
        default: break;
        }
        if (bad)
            return fail(c, "list %d instruction %d (%s) has an invalid %s field; the compiler built an invalid plan", l, i,
                        plan_op_name((plan_op)in->op), bad);
    }

    /* stream orders, sendrecv groups, wait targets and collective numbers: the one index that
     * the simulator and the executor read too */
    if (plan_index_build(&li->ix, p, l, c->e)) {
        c->failed = 1;
        return -1;
    }
    li->coll_off = base_xcalloc((size_t)L->ngroup_slots + 1, sizeof *li->coll_off);
    for (int s = 0; s < L->ngroup_slots; s++) li->coll_off[s + 1] = li->coll_off[s] + li->ix.slot_ncoll[s];
    li->coll_ins = base_xmalloc(((size_t)li->coll_off[L->ngroup_slots] + 1) * sizeof *li->coll_ins);
    for (int i = 0; i < L->n; i++)
        if (L->ins[i].op == PLAN_COLL) li->coll_ins[li->coll_off[L->ins[i].group] + li->ix.coll_seq[i]] = i;
    if (c->unit) {
        static const double unit[PLAN_NPASS] = {[PLAN_PASS_F] = 1, [PLAN_PASS_B] = 2, [PLAN_PASS_BI] = 1,
                                                [PLAN_PASS_BW] = 1};
        li->udur = base_xcalloc((size_t)L->n + 1, sizeof *li->udur);
        plan_unit_durations(p, l, unit, li->udur);
    }
    if (li->ix.early_wait >= 0) {
        /* the run blocks there, waiting for the first record (plan_index's rule) */
        int i = li->ix.early_wait;
        base_buf b = {0};
        describe(&b, c, d, i);
        base_warn_at(c->e, NULL, 0, 0, "device %d (list %d) %s: waits for event %d before any record of it in launch "
                     "order; an executor waits for nothing there (CUDA semantics): launch the record first", d, l, b.s,
                     L->ins[i].event);
        base_buf_free(&b);
    }
    return 0;
}

/* ---------------------------------------------------------------- devices and groups */

static int is_member(const checker *c, int g, int d)
{
    const int32_t *lo = c->gsorted + c->gmoff[g];
    size_t n = (size_t)(c->gmoff[g + 1] - c->gmoff[g]);
    int32_t key = d;
    return bsearch(&key, lo, n, sizeof key, cmp_i32) != NULL;
}

static int prepare_groups(checker *c)
{
    const plan_set *p = c->p;
    c->gmoff = base_xcalloc((size_t)p->ngroups + 1, sizeof *c->gmoff);
    for (int g = 0; g < p->ngroups; g++) {
        const plan_group *gr = &p->groups[g];
        if (gr->n < 0 || (gr->n && !gr->devices)) return fail(c, "group %d has %d members but no array; the compiler built an invalid plan", g, gr->n);
        c->gmoff[g + 1] = c->gmoff[g] + gr->n;
    }
    c->gsorted = base_xmalloc((size_t)c->gmoff[p->ngroups] * sizeof *c->gsorted + 1);
    for (int g = 0; g < p->ngroups; g++) {
        const plan_group *gr = &p->groups[g];
        int32_t *m = c->gsorted + c->gmoff[g];
        if (gr->n == 0) continue;
        memcpy(m, gr->devices, (size_t)gr->n * sizeof *m);
        qsort(m, (size_t)gr->n, sizeof *m, cmp_i32);
        for (int j = 0; j < gr->n; j++) {
            if (m[j] < 0 || m[j] >= p->ndevices)
                return fail(c, "group %d (%s) names device %d, but the plan has devices 0..%d; fix its members", g,
                            name_or(gr->name, "?"), m[j], p->ndevices - 1);
            if (j && m[j] == m[j - 1])
                return fail(c, "group %d (%s) names device %d twice; list each member once", g, name_or(gr->name, "?"), m[j]);
        }
    }
    return 0;
}

/* Per device: its list and slots are valid, its peers exist, it belongs to every group it uses. */
static int prepare_device(checker *c, int d)
{
    const plan_set *p = c->p;
    const plan_device *dev = &p->devices[d];
    const plan_list *L = &p->lists[dev->list];
    const list_info *li = &c->li[dev->list];
    if (L->ngroup_slots && !dev->group_slots) return fail(c, "device %d has no group slots; the compiler built an invalid plan", d);
    for (int s = 0; s < L->ngroup_slots; s++)
        if (dev->group_slots[s] < 0 || dev->group_slots[s] >= p->ngroups)
            return fail(c, "device %d maps group slot %d to group %d, but the plan has groups 0..%d; fix the slot", d, s,
                        dev->group_slots[s], p->ngroups - 1);
    if (li->peer_lo <= li->peer_hi) {
        int64_t lo = (int64_t)li->peer_lo + dev->peer_offset, hi = (int64_t)li->peer_hi + dev->peer_offset;
        if (lo < 0 || hi >= p->ndevices) {
            int at = lo < 0 ? li->peer_lo_at : li->peer_hi_at;
            return fail(c, "device %d (list %d) #%d %s: peer %d + peer_offset %d = %" PRId64 " is not a device (0..%d); "
                        "fix peer_offset or the peer", d, dev->list, at, plan_op_name((plan_op)L->ins[at].op),
                        L->ins[at].peer, dev->peer_offset, (int64_t)L->ins[at].peer + dev->peer_offset, p->ndevices - 1);
        }
    }
    for (int s = 0; s < L->ngroup_slots; s++) {
        if (!li->slot_used[s]) continue;
        int g = dev->group_slots[s];
        if (!is_member(c, g, d)) {
            for (int i = 0; i < L->n; i++) {
                const plan_instr *in = &L->ins[i];
                if ((in->op == PLAN_COLL && in->group == s) || (in->op == PLAN_COMPUTE && (in->tp_group == s || in->ep_group == s)))
                    return fail_at(c, d, i, "uses group slot %d, which this device maps to group %d (%s), but the "
                                   "device is not a member of that group; fix the device's slots or the group", s, g,
                                   name_or(p->groups[g].name, "?"));
            }
        }
    }
    /* two slots name one group: number the group's collectives across both, in launch order */
    c->dv[d].coll_seq = plan_index_device_coll_seq(&li->ix, p, d);
    return 0;
}

/* Do devices d and r see the same collectives on g without walking? Yes when they share a list
 * and map exactly the same of its collective slots to g. */
static int same_pattern(const checker *c, int d, int r, int g)
{
    const plan_device *a = &c->p->devices[d], *b = &c->p->devices[r];
    if (a->list != b->list) return 0;
    const plan_list *L = &c->p->lists[a->list];
    const list_info *li = &c->li[a->list];
    for (int s = 0; s < L->ngroup_slots; s++)
        if (li->ix.slot_ncoll[s] && (a->group_slots[s] == g) != (b->group_slots[s] == g)) return 0;
    return 1;
}

static int coll_mismatch(checker *c, int g, int r, int d, int pos, int ri, int di)
{
    const plan_set *p = c->p;
    base_buf a = {0}, b = {0};
    if (ri >= 0) {
        const plan_instr *in = &dev_list(c, r)->ins[ri];
        base_buf_printf(&a, "#%d %s of %" PRId64 " bytes", ri, plan_coll_name((plan_coll)in->coll), in->bytes);
    } else {
        base_buf_puts(&a, "nothing more");
    }
    if (di >= 0) {
        const plan_instr *in = &dev_list(c, d)->ins[di];
        base_buf_printf(&b, "#%d %s of %" PRId64 " bytes", di, plan_coll_name((plan_coll)in->coll), in->bytes);
    } else {
        base_buf_puts(&b, "nothing more");
    }
    fail(c, "group %d (%s): members disagree on its collectives at position %d: device %d issues %s, device %d "
         "issues %s; every member must issue a group's collectives in the same order, with the same kind and bytes",
         g, name_or(p->groups[g].name, "?"), pos, r, a.s, d, b.s);
    base_buf_free(&a);
    base_buf_free(&b);
    return -1;
}

/* The launch indices of device d's collectives on group g, in launch order, into *out: the
 * list's per-slot arrays of the slots d maps to g, merged when there are several (rare). */
typedef BASE_VEC(int32_t) i32vec;
static void group_colls(const checker *c, int d, int g, i32vec *out)
{
    const plan_list *L = dev_list(c, d);
    const list_info *li = &c->li[c->p->devices[d].list];
    const int32_t *slots = c->p->devices[d].group_slots;
    out->n = 0;
    int nslots = 0;
    for (int s = 0; s < L->ngroup_slots; s++) {
        if (slots[s] != g || li->coll_off[s + 1] == li->coll_off[s]) continue;
        for (int k = li->coll_off[s]; k < li->coll_off[s + 1]; k++) BASE_VEC_PUSH(*out, li->coll_ins[k]);
        nslots++;
    }
    if (nslots > 1) qsort(out->v, out->n, sizeof *out->v, cmp_i32);
}

/* Every member of a group issues the same sequence of collectives (kind, bytes) on it; the k-th
 * of each member then meet as one instance, so the run can count arrivals per (group, k).
 * Members whose list and slots to the group equal a member already compared see the same
 * sequence (same_pattern) and are not walked again. */
static int check_sequences(checker *c)
{
    const plan_set *p = c->p;
    c->goff = base_xcalloc((size_t)p->ngroups + 1, sizeof *c->goff);
    i32vec ref = {0}, mine = {0}, seen = {0};
    int rc = 0;
    for (int g = 0; g < p->ngroups && !rc; g++) {
        const plan_group *gr = &p->groups[g];
        ref.n = 0;
        if (gr->n > 0) {
            int r = gr->devices[0];
            const plan_list *L = dev_list(c, r);
            group_colls(c, r, g, &ref);
            seen.n = 0;
            BASE_VEC_PUSH(seen, r);
            for (int m = 1; m < gr->n && !rc; m++) {
                int d = gr->devices[m], known = 0;
                for (size_t k = 0; k < seen.n && !known; k++) known = same_pattern(c, d, seen.v[k], g);
                if (known) continue;
                BASE_VEC_PUSH(seen, d);
                const plan_list *M = dev_list(c, d);
                group_colls(c, d, g, &mine);
                size_t pos = 0;
                for (; pos < mine.n && !rc; pos++) {
                    const plan_instr *in = &M->ins[mine.v[pos]];
                    if (pos >= ref.n) rc = coll_mismatch(c, g, r, d, (int)pos, -1, mine.v[pos]);
                    else if (L->ins[ref.v[pos]].coll != in->coll || L->ins[ref.v[pos]].bytes != in->bytes)
                        rc = coll_mismatch(c, g, r, d, (int)pos, ref.v[pos], mine.v[pos]);
                }
                if (!rc && pos < ref.n) rc = coll_mismatch(c, g, r, d, (int)pos, ref.v[pos], -1);
            }
        }
        c->goff[g + 1] = c->goff[g] + (int32_t)ref.n;
    }
    free(ref.v), free(mine.v), free(seen.v);
    if (rc) return rc;
    c->gcount = base_xcalloc((size_t)c->goff[p->ngroups] + 1, sizeof *c->gcount);
    c->ghead = base_xmalloc(((size_t)c->goff[p->ngroups] + 1) * sizeof *c->ghead);
    memset(c->ghead, 0xff, ((size_t)c->goff[p->ngroups] + 1) * sizeof *c->ghead);
    return 0;
}

/* ---------------------------------------------------------------- the run */

static double coll_seconds(int kind, int n, int64_t bytes)
{
    if (n <= 1) return 0;
    double f = kind == PLAN_ALL_REDUCE                           ? 2.0 * (n - 1) / n
               : kind == PLAN_BROADCAST || kind == PLAN_REDUCE ? 1.0
                                                                : (double)(n - 1) / n;
    return PLAN_CHECK_LATENCY + f * (double)bytes / PLAN_CHECK_BW;
}

static double p2p_seconds(int64_t bytes) { return PLAN_CHECK_LATENCY + (double)bytes / PLAN_CHECK_BW; }

/* Reports one finished instruction to the caller of plan_check_timed. */
static void timed(const checker *c, int d, int i, double start)
{
    if (c->timing) c->timing(c->timing_ctx, d, i, start, c->now);
}

static void host_poll(checker *c, int d);

/* A stream of device d moved past an instruction: the device's end, and maybe its host's sync. */
static void touch_end(checker *c, int d)
{
    if (c->now > c->ds[d].end_seconds) c->ds[d].end_seconds = c->now;
    if (c->dv[d].blocked >= 0) host_poll(c, d);
}

static int use_buf(checker *c, int d, int i, int b, const char *how)
{
    dev_state *dv = &c->dv[d];
    if (dv->buf[b] < 0) {
        const plan_list *L = dev_list(c, d);
        if (dv->last[b] < 0)
            return fail_at(c, d, i, "%s buffer %d (%s), which is not live: it was never allocated; allocate it before "
                           "its first use", how, b, name_or(L->bufs[b].name, "?"));
        return fail_at(c, d, i, "%s buffer %d (%s), which is not live: #%d freed it; free a buffer after its last use",
                       how, b, name_or(L->bufs[b].name, "?"), dv->last[b]);
    }
    dv->buf[b]++;
    return 0;
}

static void release_bufs(checker *c, int d, const plan_instr *in)
{
    dev_state *dv = &c->dv[d];
    if (in->op == PLAN_COMPUTE) {
        for (int q = 0; q < in->nreads; q++) dv->buf[in->reads[q]]--;
        for (int q = 0; q < in->nwrites; q++) dv->buf[in->writes[q]]--;
    } else if (in->buf >= 0) {
        dv->buf[in->buf]--;
    }
}

static int do_alloc(checker *c, int d, int i, const plan_instr *in)
{
    dev_state *dv = &c->dv[d];
    const plan_list *L = dev_list(c, d);
    int b = in->buf;
    if (dv->buf[b] >= 0)
        return fail_at(c, d, i, "allocates buffer %d (%s), which #%d allocated and nothing freed since; allocate a "
                       "buffer once per lifetime", b, name_or(L->bufs[b].name, "?"), dv->last[b]);
    dv->buf[b] = 0;
    dv->last[b] = i;
    double bytes = (double)L->bufs[b].bytes;
    int m = L->bufs[b].mem;
    plan_device_stats *ds = &c->ds[d];
    dv->cur[m] += bytes;
    dv->total += bytes;
    if (dv->cur[m] > ds->peak_by_mem[m]) ds->peak_by_mem[m] = dv->cur[m];
    if (dv->total > ds->peak_bytes) {
        ds->peak_bytes = dv->total;
        memcpy(ds->at_peak, dv->cur, sizeof ds->at_peak);
    }
    return 0;
}

static int do_free(checker *c, int d, int i, const plan_instr *in)
{
    dev_state *dv = &c->dv[d];
    const plan_list *L = dev_list(c, d);
    int b = in->buf;
    if (dv->buf[b] < 0) {
        if (dv->last[b] < 0)
            return fail_at(c, d, i, "frees buffer %d (%s), which was never allocated; allocate it first or drop the "
                           "free", b, name_or(L->bufs[b].name, "?"));
        return fail_at(c, d, i, "frees buffer %d (%s), which #%d already freed; free a buffer once", b,
                       name_or(L->bufs[b].name, "?"), dv->last[b]);
    }
    if (dv->buf[b] > 0) {
        /* find a running user to name: it is at the head of one of the device's streams */
        const list_info *li = &c->li[c->p->devices[d].list];
        int user = -1;
        for (int s = 0; s < L->nstreams && user < 0; s++) {
            const stream_state *ss = &c->ss[dv->slot0 + s];
            for (int k = 0; k < ss->batch && ss->state != ST_IDLE && ss->state != ST_DONE && user < 0; k++) {
                int j = li->ix.sidx[li->ix.soff[s] + ss->cur + k];
                const plan_instr *u = &L->ins[j];
                if (u->buf == b && u->op != PLAN_COMPUTE) user = j;
                for (int q = 0; q < u->nreads && u->op == PLAN_COMPUTE; q++) user = u->reads[q] == b ? j : user;
                for (int q = 0; q < u->nwrites && u->op == PLAN_COMPUTE; q++) user = u->writes[q] == b ? j : user;
            }
        }
        return fail_at(c, d, i, "frees buffer %d (%s) while #%d on another stream still uses it; make the free wait "
                       "for that stream (record/wait)", b, name_or(L->bufs[b].name, "?"), user);
    }
    dv->buf[b] = -1;
    dv->last[b] = i;
    double bytes = (double)L->bufs[b].bytes;
    dv->cur[L->bufs[b].mem] -= bytes;
    dv->total -= bytes;
    return 0;
}

static void p2p_matched(checker *c, int32_t slot, double t)
{
    stream_state *ss = &c->ss[slot];
    if (t > ss->end) ss->end = t;
    if (--ss->pending == 0) heap_push(c, ss->end, slot);
}

/* Posts the head's p2p operations (the whole sendrecv group) and matches each against what the
 * peer has posted: zero buffering, so a transfer starts only when both sides are posted. */
static int post_p2p(checker *c, int32_t slot, const int32_t *order)
{
    const plan_set *p = c->p;
    stream_state *ss = &c->ss[slot];
    int d = ss->dev;
    const plan_list *L = dev_list(c, d);
    int b = c->li[p->devices[d].list].ix.run[order[ss->cur]];
    ss->batch = b;
    ss->pending = b;
    ss->end = c->now;
    ss->state = ST_P2P;
    for (int k = 0; k < b; k++) {
        int i = order[ss->cur + k];
        const plan_instr *in = &L->ins[i];
        if (in->buf >= 0 && use_buf(c, d, i, in->buf, in->op == PLAN_SEND ? "sends from" : "receives into")) return -1;
        int peer = plan_dev_peer(p, d, in), send = in->op == PLAN_SEND;
        dev_state *pv = &c->dv[peer];
        int found = -1;
        for (int q = 0; q < pv->npost && found < 0; q++) {
            const posted *o = &pv->post[q];
            if (o->send != send && o->peer == d && o->tag == in->tag) found = q;
        }
        if (found < 0) {
            dev_state *dv = &c->dv[d];
            if (dv->npost == dv->cappost) {
                dv->cappost = dv->cappost ? 2 * dv->cappost : 8;
                dv->post = base_xrealloc(dv->post, (size_t)dv->cappost * sizeof *dv->post);
            }
            dv->post[dv->npost++] = (posted){slot, i, peer, in->tag, in->bytes, send};
            continue;
        }
        posted o = pv->post[found];
        memmove(pv->post + found, pv->post + found + 1, (size_t)(pv->npost - found - 1) * sizeof *pv->post);
        pv->npost--;
        if (o.bytes != in->bytes) {
            base_buf other = {0};
            describe(&other, c, peer, o.ins);
            fail_at(c, d, i, "carries %" PRId64 " bytes but its counterpart on device %d, %s, carries %" PRId64
                    " bytes; both sides of a transfer must agree on its size", in->bytes, peer, other.s, o.bytes);
            base_buf_free(&other);
            return -1;
        }
        double t = c->now + (c->unit ? 0 : p2p_seconds(in->bytes));
        p2p_matched(c, slot, t);
        p2p_matched(c, o.slot, t);
    }
    return 0;
}

static int post_coll(checker *c, int32_t slot, int i)
{
    const plan_set *p = c->p;
    stream_state *ss = &c->ss[slot];
    int d = ss->dev;
    const plan_instr *in = &dev_list(c, d)->ins[i];
    if (in->buf >= 0 && use_buf(c, d, i, in->buf, "communicates")) return -1;
    int g = plan_dev_group(p, d, in);
    int k = c->dv[d].coll_seq ? c->dv[d].coll_seq[i] : c->li[p->devices[d].list].ix.coll_seq[i];
    int inst = c->goff[g] + k;
    ss->state = ST_COLL;
    ss->batch = 1;
    ss->next = c->ghead[inst];
    c->ghead[inst] = slot;
    /* folded: the members of other replicas arrive when their originals do */
    int arrivals = c->fold.replicas > 1 ? c->fold.nsim[g] : p->groups[g].n;
    if (++c->gcount[inst] == arrivals) {
        double t = c->now + (c->unit ? 0 : coll_seconds(in->coll, p->groups[g].n, in->bytes));
        for (int32_t w = c->ghead[inst]; w >= 0; w = c->ss[w].next) heap_push(c, t, w);
    }
    return 0;
}

static void wake_waits(checker *c, int d)
{
    dev_state *dv = &c->dv[d];
    const plan_list *L = dev_list(c, d);
    const list_info *li = &c->li[c->p->devices[d].list];
    for (int s = 0; s < L->nstreams && dv->nwaiting; s++) {
        stream_state *ss = &c->ss[dv->slot0 + s];
        if (ss->state != ST_WAIT) continue;
        int w = li->ix.sidx[li->ix.soff[s] + ss->cur];
        int r = li->ix.wait[w];
        if (c->ss[dv->slot0 + L->ins[r].stream].cur > li->ix.spos[r]) {
            timed(c, d, w, ss->start);
            ss->state = ST_IDLE;
            ss->cur++;
            dv->nwaiting--;
            work_push(c, dv->slot0 + s);
            touch_end(c, d);
        }
    }
}

/* The issuing host (plan_check_host): it issues the device's launch order until it has issued a
 * blocking point of a kind it models (plan_index's PLAN_BLOCK_* bits, the rule the simulator's
 * host follows), then waits until every stream has finished what was issued up to it; issuing
 * takes no time here. Streams whose head it has just issued may start. */
static void host_go(checker *c, int d)
{
    dev_state *dv = &c->dv[d];
    const plan_list *L = dev_list(c, d);
    const plan_index *ix = &c->li[c->p->devices[d].list].ix;
    dv->blocked = -1;
    while (dv->issued < L->n) {
        int i = dv->issued++;
        if (ix->block[i] & c->host) {
            dv->blocked = i;
            break;
        }
    }
    for (int s = 0; s < L->nstreams && dv->blocked >= 0; s++) {
        int len, lo = 0, hi;
        const int32_t *q = plan_index_stream(ix, s, &len);
        for (hi = len; lo < hi;) { /* stream s's instructions launched up to the blocking point */
            int mid = (lo + hi) / 2;
            if (q[mid] <= dv->blocked) lo = mid + 1;
            else hi = mid;
        }
        dv->need[s] = lo;
    }
    for (int s = 0; s < L->nstreams; s++) {
        stream_state *ss = &c->ss[dv->slot0 + s];
        if (ss->state == ST_HOLD) {
            ss->state = ST_IDLE;
            work_push(c, dv->slot0 + s);
        }
    }
}

/* The blocked host of device d goes on once every stream has passed what it launched. */
static void host_poll(checker *c, int d)
{
    dev_state *dv = &c->dv[d];
    int ns = dev_list(c, d)->nstreams;
    for (int s = 0; s < ns; s++)
        if (c->ss[dv->slot0 + s].cur < dv->need[s]) return;
    host_go(c, d);
}

/* Starts what the stream's head allows: instantaneous instructions run on, the first one that
 * takes time or waits for someone else leaves the stream busy or blocked. */
static int advance(checker *c, int32_t slot)
{
    stream_state *ss = &c->ss[slot];
    int d = ss->dev;
    const plan_list *L = dev_list(c, d);
    const list_info *li = &c->li[c->p->devices[d].list];
    const int32_t *order = li->ix.sidx + li->ix.soff[ss->s];
    int len = li->ix.soff[ss->s + 1] - li->ix.soff[ss->s];
    dev_state *dv = &c->dv[d];
    while (ss->state == ST_IDLE) {
        if (ss->cur >= len) {
            ss->state = ST_DONE;
            break;
        }
        int i = order[ss->cur];
        const plan_instr *in = &L->ins[i];
        if (i >= dv->issued) { /* the host has not issued it: host_go wakes the stream */
            ss->state = ST_HOLD;
            break;
        }
        switch (in->op) {
        case PLAN_COMPUTE: {
            for (int q = 0; q < in->nreads; q++)
                if (use_buf(c, d, i, in->reads[q], "reads")) return -1;
            for (int q = 0; q < in->nwrites; q++)
                if (use_buf(c, d, i, in->writes[q], "writes")) return -1;
            double t = c->unit ? li->udur[i] : in->kernels >= 0 ? c->kl_dur[in->kernels] : 0;
            if (t > 0) {
                ss->state = ST_RUNNING;
                ss->batch = 1;
                ss->start = c->now;
                heap_push(c, c->now + t, slot);
            } else {
                timed(c, d, i, c->now);
                release_bufs(c, d, in);
                ss->cur++;
                touch_end(c, d);
            }
            break;
        }
        case PLAN_SEND:
        case PLAN_RECV:
            ss->start = c->now;
            if (post_p2p(c, slot, order)) return -1;
            break;
        case PLAN_COLL:
            ss->start = c->now;
            if (post_coll(c, slot, i)) return -1;
            break;
        case PLAN_WAIT: {
            int r = li->ix.wait[i];
            if (c->ss[dv->slot0 + L->ins[r].stream].cur > li->ix.spos[r]) {
                timed(c, d, i, c->now);
                ss->cur++;
                touch_end(c, d);
            } else {
                ss->state = ST_WAIT;
                ss->start = c->now;
                dv->nwaiting++;
            }
            break;
        }
        case PLAN_RECORD:
            timed(c, d, i, c->now);
            ss->cur++;
            touch_end(c, d);
            if (dv->nwaiting) wake_waits(c, d);
            break;
        case PLAN_ALLOC:
        case PLAN_FREE:
            if ((in->op == PLAN_ALLOC ? do_alloc : do_free)(c, d, i, in)) return -1;
            timed(c, d, i, c->now);
            ss->cur++;
            touch_end(c, d);
            break;
        default:
            timed(c, d, i, c->now);
            ss->cur++;
            touch_end(c, d);
            break;
        }
    }
    return 0;
}

static int drain(checker *c)
{
    while (c->nwork > 0)
        if (advance(c, c->work[--c->nwork])) return -1;
    return 0;
}

/* The head of a stream whose time has come: release what it used and move past it. */
static void complete(checker *c, int32_t slot)
{
    stream_state *ss = &c->ss[slot];
    int d = ss->dev;
    const plan_list *L = dev_list(c, d);
    const list_info *li = &c->li[c->p->devices[d].list];
    const int32_t *order = li->ix.sidx + li->ix.soff[ss->s];
    for (int k = 0; k < ss->batch; k++) {
        release_bufs(c, d, &L->ins[order[ss->cur + k]]);
        timed(c, d, order[ss->cur + k], ss->start);
    }
    ss->cur += ss->batch;
    ss->batch = 0;
    ss->state = ST_IDLE;
    touch_end(c, d);
    work_push(c, slot);
}

/* ---------------------------------------------------------------- deadlock report */

static void why_stuck(base_buf *b, checker *c, int32_t slot, uint8_t *mark)
{
    const plan_set *p = c->p;
    const stream_state *ss = &c->ss[slot];
    int d = ss->dev;
    const plan_list *L = dev_list(c, d);
    const list_info *li = &c->li[p->devices[d].list];
    const int32_t *order = li->ix.sidx + li->ix.soff[ss->s];
    int i = order[ss->cur];
    if (ss->state == ST_WAIT) {
        int r = li->ix.wait[i];
        base_buf_printf(b, " [waits for #%d record on stream %s]", r, name_or(L->streams[L->ins[r].stream], "?"));
    } else if (ss->state == ST_P2P) {
        const dev_state *dv = &c->dv[d];
        for (int q = 0; q < dv->npost; q++) {
            const posted *o = &dv->post[q];
            if (o->slot != slot) continue;
            if (o->ins != i) base_buf_printf(b, " [in its sendrecv group, #%d:", o->ins);
            else base_buf_puts(b, " [");
            base_buf_printf(b, "%sno %s with tag %d posted by device %d]", o->ins != i ? " " : "",
                            o->send ? "recv" : "send", o->tag, o->peer);
            break;
        }
    } else if (ss->state == ST_HOLD) {
        base_buf_printf(b, " [not issued: the host waits at #%d]", c->dv[d].blocked);
    } else if (ss->state == ST_COLL) {
        const plan_instr *in = &L->ins[i];
        int g = plan_dev_group(p, d, in);
        int k = c->dv[d].coll_seq ? c->dv[d].coll_seq[i] : li->ix.coll_seq[i];
        int inst = c->goff[g] + k;
        for (int32_t w = c->ghead[inst]; w >= 0; w = c->ss[w].next) mark[c->ss[w].dev] = 1;
        int missing = -1;
        for (int m = 0; m < p->groups[g].n && missing < 0; m++)
            if (!mark[p->groups[g].devices[m]]) missing = p->groups[g].devices[m];
        for (int32_t w = c->ghead[inst]; w >= 0; w = c->ss[w].next) mark[c->ss[w].dev] = 0;
        base_buf_printf(b, " [collective %d of the group: %d of %d members arrived; device %d has not]", k,
                        c->gcount[inst], p->groups[g].n, missing);
    }
}

/* Per blocked device, the instructions that wait for another device (p2p, collectives) come
 * first; waits on this device's own stuck streams are consequences and only counted, unless they
 * are all there is (a cycle of waits). */
static int report_deadlock(checker *c)
{
    const plan_set *p = c->p;
    int blocked = 0;
    for (int d = 0; d < p->ndevices; d++) {
        const plan_list *L = dev_list(c, d);
        for (int s = 0; s < L->nstreams; s++)
            if (c->ss[c->dv[d].slot0 + s].state != ST_DONE) {
                blocked++;
                break;
            }
    }
    base_buf b = {0};
    base_buf_printf(&b, "deadlock: at t=%.6g s nothing can progress and %d of %d devices are not finished; stuck:",
                    c->now, blocked, p->ndevices);
    uint8_t *mark = base_xcalloc((size_t)p->ndevices, 1);
    int listed = 0, hosts = 0;
    for (int d = 0; d < p->ndevices && listed < LISTED_DEVICES; d++) {
        const plan_list *L = dev_list(c, d);
        const list_info *li = &c->li[p->devices[d].list];
        int primary = 0, waits = 0;
        for (int s = 0; s < L->nstreams; s++) {
            int st = c->ss[c->dv[d].slot0 + s].state;
            primary += st != ST_DONE && st != ST_WAIT && st != ST_HOLD;
            waits += st == ST_WAIT || st == ST_HOLD;
        }
        if (!primary && !waits) continue;
        base_buf_printf(&b, "%s device %d (list %d):", listed ? ";" : "", d, p->devices[d].list);
        int shown = 0;
        for (int s = 0; s < L->nstreams; s++) {
            int32_t slot = c->dv[d].slot0 + s;
            int st = c->ss[slot].state;
            if (st == ST_DONE || (primary && (st == ST_WAIT || st == ST_HOLD))) continue;
            if (shown == LISTED_STREAMS) {
                base_buf_puts(&b, ", ...");
                break;
            }
            base_buf_puts(&b, shown ? ", " : " ");
            int at = li->ix.sidx[li->ix.soff[s] + c->ss[slot].cur];
            if (!shown && c->stuck && c->stuck->n < PLAN_STUCK_MAX)
                c->stuck->at[c->stuck->n++] = (plan_stuck_instr){d, at};
            describe(&b, c, d, at);
            why_stuck(&b, c, slot, mark);
            shown++;
        }
        if (primary && waits) base_buf_printf(&b, " (and %d stream%s waiting for %s)", waits, waits > 1 ? "s" : "",
                                              primary > 1 ? "these" : "it");
        if (c->dv[d].blocked >= 0) {
            int k = c->dv[d].blocked;
            unsigned bits = li->ix.block[k] & c->host;
            base_buf_puts(&b, "; its host blocks at ");
            describe(&b, c, d, k);
            base_buf_printf(&b, " (%s sync point) until every instruction it launched so far has finished",
                            bits & PLAN_BLOCK_P2P ? "p2p" : bits & PLAN_BLOCK_NORM ? "gradient-norm" : "micro-batch");
            hosts++;
        }
        listed++;
    }
    free(mark);
    if (blocked > listed) base_buf_printf(&b, "; and %d more devices", blocked - listed);
    base_buf_puts(&b, ". Post each send's receive at the head of the peer's stream (exchanges in both directions "
                      "go in one sendrecv group), reach every group's collectives in one order on all members, and "
                      "record each event before the wait that needs it");
    if (hosts)
        base_buf_puts(&b, "; a host that blocks there never issues what the others wait for: launch that work, or "
                          "the collective the host waits for, on the other side of the sync point in the order, or "
                          "run with a host that posts p2p asynchronously (piper-sim --costs host_sync=norm)");
    fail(c, "%s", b.s);
    base_buf_free(&b);
    return -1;
}

/* ---------------------------------------------------------------- entry point */

static int check_with(const plan_set *p, const plan_check_opts *o, bool verdict_only, plan_stats *st,
                      plan_timing_fn timing, void *ctx, base_error *e);

static int run(checker *c)
{
    const plan_set *p = c->p;
    if (prepare_kernels(c)) return -1;
    for (int d = 0; d < p->ndevices; d++) {
        int l = p->devices[d].list;
        if (l < 0 || l >= p->nlists)
            return fail(c, "device %d uses list %d, but the plan has lists 0..%d; the compiler built an invalid plan", d, l,
                        p->nlists - 1);
        if (c->li[l].first_dev < 0) c->li[l].first_dev = d;
    }
    for (int l = 0; l < p->nlists; l++)
        if (prepare_list(c, l)) return -1;
    if (prepare_groups(c)) return -1;
    for (int d = 0; d < p->ndevices; d++) {
        c->dv[d].slot0 = c->nslots;
        c->nslots += dev_list(c, d)->nstreams;
        if (prepare_device(c, d)) return -1;
    }
    if (check_sequences(c)) return -1;
    if (!c->all_devices) plan_fold_find(p, NULL, &c->fold);

    c->ss = base_xcalloc((size_t)c->nslots + 1, sizeof *c->ss);
    for (int d = 0; d < p->ndevices; d++) {
        const plan_list *L = dev_list(c, d);
        dev_state *dv = &c->dv[d];
        dv->blocked = -1;
        if (!runs_dev(c, d)) { /* its original runs for it: no state per buffer */
            for (int s = 0; s < L->nstreams; s++)
                c->ss[dv->slot0 + s] = (stream_state){.dev = d, .s = s, .next = -1, .state = ST_DONE};
            continue;
        }
        dv->buf = base_xmalloc(2 * (size_t)L->nbufs * sizeof *dv->buf + 1);
        dv->last = dv->buf + L->nbufs;
        memset(dv->buf, 0xff, 2 * (size_t)L->nbufs * sizeof *dv->buf);
        for (int s = 0; s < L->nstreams; s++) {
            stream_state *ss = &c->ss[dv->slot0 + s];
            ss->dev = d, ss->s = s, ss->next = -1;
            work_push(c, dv->slot0 + s);
        }
        dv->issued = c->host ? 0 : L->n; /* without a host, everything is issued at the start */
        dv->need = base_xcalloc((size_t)L->nstreams + 1, sizeof *dv->need);
    }
    for (int d = 0; d < p->ndevices && c->host; d++)
        if (runs_dev(c, d)) host_go(c, d);
    /* stream 0 of device 0 first: the work list is a stack */
    for (int a = 0, b = c->nwork - 1; a < b; a++, b--) {
        int32_t t = c->work[a];
        c->work[a] = c->work[b], c->work[b] = t;
    }
    if (drain(c)) return -1;
    while (c->nheap > 0) {
        heap_item it = heap_pop(c);
        c->now = it.t;
        complete(c, it.slot);
        if (drain(c)) return -1;
    }
    for (int32_t s = 0; s < c->nslots; s++)
        if (c->ss[s].state != ST_DONE) return report_deadlock(c);
    return 0;
}

int plan_check(const plan_set *p, plan_stats *st, base_error *e)
{
    return plan_check_timed(p, st, NULL, NULL, e);
}

int plan_check_timed(const plan_set *p, plan_stats *st, plan_timing_fn timing, void *ctx,
                     base_error *e)
{
    static const plan_check_opts none;
    return check_with(p, &none, false, st, timing, ctx, e);
}

int plan_check_opt(const plan_set *p, const plan_check_opts *o, plan_stats *st, base_error *e)
{
    plan_check_opts k = *o;
    k.host &= PLAN_BLOCK_ALL;
    return check_with(p, &k, false, st, NULL, NULL, e);
}

int plan_check_host(const plan_set *p, unsigned host, plan_stats *st, base_error *e)
{
    plan_check_opts o = {.host = host & PLAN_BLOCK_ALL};
    return check_with(p, &o, false, st, NULL, NULL, e);
}

unsigned plan_host_blocks_opt(const plan_set *p, const plan_check_opts *o, base_error *why)
{
    /* by monotonicity (plan.h) the first host that passes allows every host that blocks at less */
    static const unsigned tries[] = {PLAN_BLOCK_ALL, PLAN_BLOCK_NORM | PLAN_BLOCK_BATCH, PLAN_BLOCK_NORM,
                                     PLAN_BLOCK_BATCH};
    base_error e;
    base_error_clear(&e);
    if (why) base_error_clear(why);
    for (size_t k = 0; k < sizeof tries / sizeof *tries; k++) {
        plan_check_opts h = {.host = tries[k], .all_devices = o && o->all_devices};
        bool tell = k == 0 && why;
        if (check_with(p, &h, !tell, NULL, NULL, NULL, tell ? why : &e) == 0) return tries[k];
        base_error_clear(&e);
    }
    return 0;
}

unsigned plan_host_blocks(const plan_set *p, base_error *why) { return plan_host_blocks_opt(p, NULL, why); }

double plan_unit_makespan_opt(const plan_set *p, const plan_check_opts *o)
{
    base_error e;
    base_error_clear(&e);
    plan_stats st;
    plan_check_opts u = {.unit = true, .all_devices = o && o->all_devices};
    if (check_with(p, &u, true, &st, NULL, NULL, &e)) return -1;
    double t = st.makespan_seconds;
    plan_stats_free(&st);
    return t;
}

double plan_unit_makespan(const plan_set *p) { return plan_unit_makespan_opt(p, NULL); }

/* One run; *folded tells whether it left replicas to replica 0. */
static int check_once(const plan_set *p, const plan_check_opts *o, bool all, plan_stats *st, plan_timing_fn timing,
                      void *ctx, base_error *e, bool *folded)
{
    checker c = {.p = p, .e = e, .host = o->host, .unit = o->unit, .all_devices = all, .stuck = o->stuck,
                 .timing = timing, .timing_ctx = ctx};
    if (c.stuck) c.stuck->n = 0;
    c.ds = base_xcalloc((size_t)p->ndevices + 1, sizeof *c.ds);
    c.li = base_xcalloc((size_t)p->nlists + 1, sizeof *c.li);
    c.dv = base_xcalloc((size_t)p->ndevices + 1, sizeof *c.dv);
    for (int l = 0; l < p->nlists; l++) c.li[l].first_dev = -1;
    int rc = p->ndevices < 0 || p->nlists < 0 || p->ngroups < 0 || p->nkernel_lists < 0 || p->nregions < 0 ||
                     (p->ndevices && !p->devices) || (p->nlists && !p->lists) || (p->ngroups && !p->groups) ||
                     (p->nkernel_lists && !p->kernel_lists)
                 ? fail(&c, "the plan has a negative count or a missing array; the compiler built an invalid plan")
                 : run(&c);
    if (rc == 0) rc = plan_roles_check(p, e); /* roles agree with categories and kinds */
    double makespan = 0;
    *folded = c.fold.replicas > 1;
    if (rc == 0)
        for (int d = 0; d < p->ndevices; d++) {
            const list_info *li = &c.li[p->devices[d].list];
            if (!runs_dev(&c, d)) c.ds[d] = c.ds[c.fold.rep[d]]; /* its original's peaks and end */
            c.ds[d].busy_seconds = li->busy;
            memcpy(c.ds[d].count_by_op, li->count, sizeof li->count);
            if (c.ds[d].end_seconds > makespan) makespan = c.ds[d].end_seconds;
        }
    for (int l = 0; l < p->nlists && c.li; l++) {
        list_info *li = &c.li[l];
        plan_index_free(&li->ix), free(li->slot_used), free(li->udur), free(li->coll_off), free(li->coll_ins);
    }
    for (int d = 0; d < p->ndevices; d++) free(c.dv[d].buf), free(c.dv[d].coll_seq), free(c.dv[d].post), free(c.dv[d].need);
    free(c.li), free(c.dv), free(c.ss), free(c.kl_dur), free(c.gsorted), free(c.gmoff), free(c.goff);
    free(c.gcount), free(c.ghead), free(c.heap), free(c.work);
    plan_fold_free(&c.fold);
    if (st) {
        memset(st, 0, sizeof *st);
        if (rc == 0) {
            st->ndevices = p->ndevices;
            st->dev = c.ds;
            st->makespan_seconds = makespan;
            c.ds = NULL;
        }
    }
    free(c.ds);
    return rc;
}

/* The run over one device per replica class gives every device's verdict, peaks and times
 * (plan_fold.c); a failure is run again over every device, so that its message names the devices
 * and counts a full run names (verdict_only: the caller reads no message). A timed run tells
 * about every device's instructions and runs them all. */
static int check_with(const plan_set *p, const plan_check_opts *o, bool verdict_only, plan_stats *st,
                      plan_timing_fn timing, void *ctx, base_error *e)
{
    bool all = o->all_devices || timing, folded = false;
    base_error before = *e; /* the warnings the run adds are added once */
    int rc = check_once(p, o, all, st, timing, ctx, e, &folded);
    if (rc && folded && !verdict_only) {
        *e = before;
        rc = check_once(p, o, true, st, timing, ctx, e, &folded);
    }
    return rc;
}

void plan_stats_free(plan_stats *st)
{
    free(st->dev);
    memset(st, 0, sizeof *st);
}
