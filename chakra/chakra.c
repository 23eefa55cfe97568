/* chakra.c — a plan as MLCommons Chakra execution traces (chakra.h): the dependencies of each
 * instruction list, the nodes of each device, the varint framing and the files.
 *
 * Devices that share a list share its dependencies, so they are worked out once per list; names,
 * peers, groups and times are the device's own. The messages are packed with protobuf-c from
 * et_def.proto (generated at build time). */
#include "chakra.h"

#include "et_def.pb-c.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---------------------------------------------------------------- framing */

size_t chakra_varint_put(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

size_t chakra_varint_get(const uint8_t *in, size_t n, uint64_t *v)
{
    uint64_t x = 0;
    for (size_t i = 0; i < n && i < CHAKRA_VARINT_MAX; i++) {
        uint64_t b = in[i] & 0x7f;
        /* the tenth byte holds bit 63 alone */
        if (i == CHAKRA_VARINT_MAX - 1 && b > 1) return 0;
        x |= b << (7 * i);
        if (!(in[i] & 0x80)) {
            *v = x;
            return i + 1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- dependencies of a list */

static bool is_node_op(int op)
{
    return op == PLAN_COMPUTE || op == PLAN_SEND || op == PLAN_RECV || op == PLAN_COLL;
}

/* The data dependencies of every node of one list, as launch indices. */
typedef struct list_deps {
    int n, maxdeps;
    int32_t *ndeps;     /* per instruction */
    int32_t *deps;      /* n x maxdeps: instruction i's are deps[i * maxdeps ...] */
    int32_t *prev_node; /* the previous node in launch order, -1 none */
} list_deps;

static void list_deps_free(list_deps *d)
{
    free(d->ndeps), free(d->deps), free(d->prev_node);
    memset(d, 0, sizeof *d);
}

static int list_error(base_error *e, const plan_set *p, int list, int i, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int dev = -1;
    for (int d = 0; d < p->ndevices && dev < 0; d++)
        if (p->devices[d].list == list) dev = d;
    plan_instr_errorv(e, p, list, dev, i, fmt, ap);
    va_end(ap);
    return -1;
}

/* Runs the list's streams as far as their waits allow, keeping for every instruction what is
 * known finished once it is: per stream, the queue position of the latest node of that stream
 * (-1: none), which stands for every node before it (a stream runs its nodes in order). An
 * instruction inherits it from its stream's previous instruction, a wait adds what its record
 * had, a node adds itself. A node depends on its stream's previous node and on each other
 * stream's latest node that the previous node did not already imply. A sendrecv group is posted
 * and finishes as one: its members share the dependencies of its first, none depends on another,
 * and a node that depends on one of them depends on all. */
static int list_deps_build(list_deps *d, const plan_set *p, int list, base_error *e)
{
    memset(d, 0, sizeof *d);
    plan_index ix;
    if (plan_index_build(&ix, p, list, e)) return -1;
    const plan_list *L = &p->lists[list];
    int n = L->n, S = L->nstreams > 0 ? L->nstreams : 1, R = ix.max_run > 1 ? ix.max_run : 1;
    d->n = n, d->maxdeps = S * R;
    d->ndeps = base_xcalloc((size_t)n + 1, sizeof *d->ndeps);
    d->deps = base_xcalloc((size_t)n * (size_t)d->maxdeps + 1, sizeof *d->deps);
    d->prev_node = base_xcalloc((size_t)n + 1, sizeof *d->prev_node);
    int32_t *known = base_xcalloc((size_t)n * (size_t)S + 1, sizeof *known);
    int32_t *rfirst = base_xcalloc((size_t)n + 1, sizeof *rfirst); /* queue position of its run's first */
    int32_t *head = base_xcalloc((size_t)S, sizeof *head);
    uint8_t *done = base_xcalloc((size_t)n + 1, 1);
    int last = -1;
    for (int i = 0; i < n; i++) {
        d->prev_node[i] = is_node_op(L->ins[i].op) ? last : -1;
        if (is_node_op(L->ins[i].op)) last = i;
    }
    for (int s = 0; s < L->nstreams; s++) {
        int len;
        const int32_t *q = plan_index_stream(&ix, s, &len);
        for (int k = 0; k < len;) {
            int r = ix.run[q[k]] > 1 ? ix.run[q[k]] : 1;
            for (int j = 0; j < r && k + j < len; j++) rfirst[q[k + j]] = k;
            k += r;
        }
    }
    int left = n, rc = 0;
    while (left > 0) {
        int progress = 0;
        for (int s = 0; s < L->nstreams; s++) {
            int len;
            const int32_t *q = plan_index_stream(&ix, s, &len);
            while (head[s] < len) {
                int i = q[head[s]];
                int rec = L->ins[i].op == PLAN_WAIT ? ix.wait[i] : -1;
                if (rec >= 0 && !done[rec]) break;
                int r = is_node_op(L->ins[i].op) && ix.run[i] > 1 ? ix.run[i] : 1;
                if (head[s] + r > len) r = len - head[s];
                /* what is known finished before the instruction (a run: before its first) */
                int32_t *k = known + (size_t)i * S;
                if (head[s] > 0)
                    memcpy(k, known + (size_t)q[head[s] - 1] * S, (size_t)S * sizeof *k);
                else
                    for (int t = 0; t < S; t++) k[t] = -1;
                if (rec >= 0)
                    for (int t = 0; t < S; t++)
                        if (known[(size_t)rec * S + t] > k[t]) k[t] = known[(size_t)rec * S + t];
                if (is_node_op(L->ins[i].op)) {
                    int32_t *dep = d->deps + (size_t)i * d->maxdeps;
                    int nd = 0, pp = k[s];
                    const int32_t *pk = pp >= 0 ? known + (size_t)q[pp] * S : NULL;
                    for (int t = 0; t < L->nstreams; t++) {
                        if (k[t] < 0 || (t != s && pk && k[t] <= pk[t])) continue;
                        int tl;
                        const int32_t *qt = plan_index_stream(&ix, t, &tl);
                        for (int m = rfirst[qt[k[t]]]; m <= k[t]; m++) dep[nd++] = qt[m];
                    }
                    d->ndeps[i] = nd;
                    for (int j = 1; j < r; j++) {
                        int im = q[head[s] + j];
                        memcpy(d->deps + (size_t)im * d->maxdeps, dep, (size_t)nd * sizeof *dep);
                        d->ndeps[im] = nd;
                    }
                    for (int j = r - 1; j >= 0; j--) {
                        int32_t *km = known + (size_t)q[head[s] + j] * S;
                        if (j) memcpy(km, k, (size_t)S * sizeof *k);
                        km[s] = head[s] + j;
                    }
                }
                for (int j = 0; j < r; j++) done[q[head[s] + j]] = 1;
                head[s] += r;
                left -= r;
                progress = 1;
            }
        }
        if (!progress) {
            int stuck = -1;
            for (int s = 0; s < L->nstreams && stuck < 0; s++) {
                int len;
                const int32_t *q = plan_index_stream(&ix, s, &len);
                if (head[s] < len) stuck = q[head[s]];
            }
            rc = list_error(e, p, list, stuck,
                            "its waits form a cycle with records that come after them, so no order runs the "
                            "list; check the plan with piper-compile");
            break;
        }
    }
    free(known), free(rfirst), free(head), free(done);
    plan_index_free(&ix);
    if (rc) list_deps_free(d);
    return rc;
}

/* ---------------------------------------------------------------- messages */

typedef ChakraProtoMsg__AttributeProto attr_t;

/* A node's attributes, built in a fixed array (the most any node has). */
#define MAX_ATTRS 16
typedef struct attrs {
    attr_t a[MAX_ATTRS];
    attr_t *ptr[MAX_ATTRS];
    int n;
} attrs;

static attr_t *attr_add(attrs *as, const char *name)
{
    attr_t *a = &as->a[as->n];
    chakra_proto_msg__attribute_proto__init(a);
    a->name = (char *)name;
    as->ptr[as->n] = a;
    as->n++;
    return a;
}
static void attr_bool(attrs *as, const char *name, bool v)
{
    attr_t *a = attr_add(as, name);
    a->value_case = CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_BOOL_VAL;
    a->bool_val = v;
}
static void attr_i32(attrs *as, const char *name, int32_t v)
{
    attr_t *a = attr_add(as, name);
    a->value_case = CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_INT32_VAL;
    a->int32_val = v;
}
static void attr_i64(attrs *as, const char *name, int64_t v)
{
    attr_t *a = attr_add(as, name);
    a->value_case = CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_INT64_VAL;
    a->int64_val = v;
}
static void attr_u64(attrs *as, const char *name, uint64_t v)
{
    attr_t *a = attr_add(as, name);
    a->value_case = CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_UINT64_VAL;
    a->uint64_val = v;
}
static void attr_str(attrs *as, const char *name, const char *v)
{
    attr_t *a = attr_add(as, name);
    a->value_case = CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_STRING_VAL;
    a->string_val = (char *)(v ? v : "");
}

/* plan_coll -> Chakra's CollectiveCommType: X(plan, chakra). */
#define CHAKRA_COLL_TABLE(X)                                              \
    X(PLAN_ALL_REDUCE, CHAKRA_PROTO_MSG__COLLECTIVE_COMM_TYPE__ALL_REDUCE)         \
    X(PLAN_REDUCE_SCATTER, CHAKRA_PROTO_MSG__COLLECTIVE_COMM_TYPE__REDUCE_SCATTER) \
    X(PLAN_ALL_GATHER, CHAKRA_PROTO_MSG__COLLECTIVE_COMM_TYPE__ALL_GATHER)         \
    X(PLAN_ALL_TO_ALL, CHAKRA_PROTO_MSG__COLLECTIVE_COMM_TYPE__ALL_TO_ALL)         \
    X(PLAN_BROADCAST, CHAKRA_PROTO_MSG__COLLECTIVE_COMM_TYPE__BROADCAST)           \
    X(PLAN_REDUCE, CHAKRA_PROTO_MSG__COLLECTIVE_COMM_TYPE__REDUCE)

static int chakra_coll_type(int c)
{
    switch (c) {
#define CHAKRA_COLL_CASE(pc, cc) \
    case pc: return cc;
        CHAKRA_COLL_TABLE(CHAKRA_COLL_CASE)
#undef CHAKRA_COLL_CASE
    default: return -1;
    }
}

/* Writes one message with its varint length in front. */
static void put_framed(FILE *f, const ProtobufCMessage *m, uint8_t **buf, size_t *cap)
{
    size_t len = protobuf_c_message_get_packed_size(m);
    if (len > *cap) {
        free(*buf);
        *cap = len * 2 + 64;
        *buf = base_xmalloc(*cap);
    }
    protobuf_c_message_pack(m, *buf);
    uint8_t pre[CHAKRA_VARINT_MAX];
    size_t np = chakra_varint_put(pre, len);
    fwrite(pre, 1, np, f);
    fwrite(*buf, 1, len, f);
}

static uint64_t to_us(double s) { return s > 0 && isfinite(s) ? (uint64_t)llround(s * 1e6) : 0; }

static uint64_t clamp_u64(double x) { return x > 0 && isfinite(x) ? (x >= 1.8e19 ? UINT64_MAX : (uint64_t)llround(x)) : 0; }
static int64_t clamp_i64(double x) { return x > 0 && isfinite(x) ? (x >= 9.2e18 ? INT64_MAX : (int64_t)llround(x)) : 0; }

typedef struct writer {
    const plan_set *p;
    const chakra_times *t;
    const char *source;
    uint8_t *buf;
    size_t cap;
    base_buf name;
    uint64_t *deps; /* a node's data dependencies */
    int ndeps_cap;
} writer;

static void write_device(writer *w, int dev, const list_deps *ld, FILE *f)
{
    const plan_set *p = w->p;
    const plan_list *L = plan_dev_list(p, dev);
    int list = p->devices[dev].list;
    const double *ts = w->t && w->t->start ? w->t->start[dev] : NULL;
    const double *te = w->t && w->t->end ? w->t->end[dev] : NULL;

    attrs ma;
    ma.n = 0;
    ChakraProtoMsg__GlobalMetadata meta = CHAKRA_PROTO_MSG__GLOBAL_METADATA__INIT;
    meta.version = (char *)CHAKRA_ET_VERSION;
    attr_str(&ma, "schema", "piper plan");
    attr_i64(&ma, "plan_version", p->version);
    attr_i64(&ma, "rank", dev);
    attr_i64(&ma, "world_size", p->ndevices);
    attr_str(&ma, "gpu", p->gpu.name);
    attr_str(&ma, "model", p->model.name);
    attr_str(&ma, "times", w->source);
    meta.n_attr = (size_t)ma.n;
    meta.attr = ma.ptr;
    put_framed(f, &meta.base, &w->buf, &w->cap);

    uint64_t ctrl[1];
    char pg[16]; /* a collective's pg_name, alive until its node is packed */
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        if (!is_node_op(in->op)) continue;
        ChakraProtoMsg__Node nd = CHAKRA_PROTO_MSG__NODE__INIT;
        nd.id = (uint64_t)i;
        w->name.n = 0;
        if (w->name.s) w->name.s[0] = 0;
        plan_instr_describe(&w->name, p, list, dev, i);
        /* without its "#i ": that is the id */
        const char *sp = strchr(w->name.s, ' ');
        nd.name = sp ? (char *)sp + 1 : w->name.s;
        int ndep = ld->ndeps[i];
        for (int k = 0; k < ndep; k++) w->deps[k] = (uint64_t)ld->deps[(size_t)i * ld->maxdeps + k];
        nd.n_data_deps = (size_t)ndep;
        nd.data_deps = w->deps;
        if (ld->prev_node[i] >= 0) {
            ctrl[0] = (uint64_t)ld->prev_node[i];
            nd.n_ctrl_deps = 1;
            nd.ctrl_deps = ctrl;
        }
        if (ts && te) {
            uint64_t a = to_us(ts[i]), b = to_us(te[i]);
            nd.start_time_micros = a;
            nd.duration_micros = b > a ? b - a : 0;
        }
        attrs as;
        as.n = 0;
        attr_bool(&as, "is_cpu_op", false);
        switch (in->op) {
        case PLAN_COMPUTE: {
            nd.type = CHAKRA_PROTO_MSG__NODE_TYPE__COMP_NODE;
            double flops = 0, bytes = 0;
            if (in->kernels >= 0 && in->kernels < p->nkernel_lists) {
                const plan_kernel_list *kl = &p->kernel_lists[in->kernels];
                for (int k = 0; k < kl->n; k++) flops += kl->k[k].flops, bytes += kl->k[k].bytes;
            }
            attr_i64(&as, "num_ops", clamp_i64(flops));
            attr_u64(&as, "tensor_size", clamp_u64(bytes));
            attr_str(&as, "pass", plan_pass_name((plan_pass)in->pass));
            if (in->region >= 0 && in->region < p->nregions) attr_str(&as, "region", p->regions[in->region]);
            break;
        }
        case PLAN_SEND:
        case PLAN_RECV: {
            bool send = in->op == PLAN_SEND;
            int peer = plan_dev_peer(p, dev, in);
            nd.type = send ? CHAKRA_PROTO_MSG__NODE_TYPE__COMM_SEND_NODE : CHAKRA_PROTO_MSG__NODE_TYPE__COMM_RECV_NODE;
            attr_i32(&as, "comm_src", send ? dev : peer);
            attr_i32(&as, "comm_dst", send ? peer : dev);
            attr_i32(&as, "comm_tag", in->tag);
            attr_i64(&as, "comm_size", in->bytes);
            break;
        }
        case PLAN_COLL: {
            int g = plan_dev_group(p, dev, in);
            snprintf(pg, sizeof pg, "%d", g);
            nd.type = CHAKRA_PROTO_MSG__NODE_TYPE__COMM_COLL_NODE;
            attr_i64(&as, "comm_type", chakra_coll_type(in->coll));
            attr_i64(&as, "comm_size", in->bytes);
            attr_str(&as, "pg_name", pg);
            attr_str(&as, "pg_desc", p->groups[g].name);
            attr_str(&as, "purpose", plan_purpose_name((plan_purpose)in->purpose));
            break;
        }
        }
        attr_str(&as, "stream", L->streams[in->stream]);
        if (in->mb >= 0) attr_i32(&as, "mb", in->mb);
        if (in->stage >= 0) attr_i32(&as, "stage", in->stage);
        nd.n_attr = (size_t)as.n;
        nd.attr = as.ptr;
        put_framed(f, &nd.base, &w->buf, &w->cap);
    }
}

/* ---------------------------------------------------------------- files */

/* mkdir -p: each missing component of `dir` in turn. */
static int make_dir(const char *dir, base_error *e)
{
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return 0;
        return base_errorf(e, "--emit-chakra %s: is not a directory; name a directory (it is created when missing)",
                           dir);
    }
    size_t n = strlen(dir);
    char *path = base_xmalloc(n + 1);
    memcpy(path, dir, n + 1);
    int rc = 0;
    for (size_t i = 1; i <= n && !rc; i++) {
        if (path[i] != '/' && path[i] != 0) continue;
        char c = path[i];
        path[i] = 0;
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            rc = base_errorf(e, "--emit-chakra %s: cannot create %s (%s); name a directory you may write", dir, path,
                             strerror(errno));
        else if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            rc = base_errorf(e, "--emit-chakra %s: %s is not a directory; name a directory (it is created when missing)",
                             dir, path);
        path[i] = c;
    }
    free(path);
    return rc;
}

static void times_cb(void *ctx, int dev, int instr, double start, double end)
{
    double **t = ctx;
    t[2 * dev][instr] = start;
    t[2 * dev + 1][instr] = end;
}

static int write_groups(const plan_set *p, const char *dir, const char *prefix, base_error *e)
{
    base_buf path = {0}, js = {0};
    base_buf_printf(&path, "%s/%s.comm_groups.json", dir, prefix);
    base_buf_puts(&js, "{");
    for (int g = 0; g < p->ngroups; g++) {
        base_buf_printf(&js, "%s\n  \"%d\": [", g ? "," : "", g);
        for (int k = 0; k < p->groups[g].n; k++) base_buf_printf(&js, "%s%d", k ? ", " : "", p->groups[g].devices[k]);
        base_buf_puts(&js, "]");
    }
    base_buf_puts(&js, "\n}\n");
    int rc = base_out_write_file(path.s, "the Chakra communicator groups", js.s, js.n, e);
    base_buf_free(&path), base_buf_free(&js);
    return rc;
}

int chakra_write(const plan_set *p, const char *dir, const char *prefix, const chakra_times *times, base_error *e)
{
    if (!dir || !dir[0]) return base_errorf(e, "--emit-chakra needs a directory");
    if (!prefix || !prefix[0] || strchr(prefix, '/'))
        return base_errorf(e, "--chakra-prefix '%s': not a file name; give a name without '/'", prefix ? prefix : "");
    if (make_dir(dir, e)) return -1;

    /* without the caller's times, the abstract run's */
    double **own = NULL;
    chakra_times abstract = {0};
    if (!times) {
        own = base_xcalloc((size_t)p->ndevices * 2 + 1, sizeof *own);
        for (int d = 0; d < p->ndevices; d++) {
            size_t n = (size_t)plan_dev_list(p, d)->n + 1;
            own[2 * d] = base_xcalloc(n, sizeof **own);
            own[2 * d + 1] = base_xcalloc(n, sizeof **own);
        }
        plan_stats st;
        int rc = plan_check_timed(p, &st, times_cb, own, e);
        if (!rc) plan_stats_free(&st);
        double **starts = base_xcalloc((size_t)p->ndevices + 1, sizeof *starts);
        double **ends = base_xcalloc((size_t)p->ndevices + 1, sizeof *ends);
        for (int d = 0; d < p->ndevices; d++) starts[d] = own[2 * d], ends[d] = own[2 * d + 1];
        abstract.source = "abstract";
        abstract.start = (const double *const *)starts;
        abstract.end = (const double *const *)ends;
        times = &abstract;
        if (rc) {
            base_error_prefix(e, "--emit-chakra: the plan's abstract run, which gives the traces their times, failed");
            goto out;
        }
    }

    writer w = {.p = p, .t = times, .source = times->source ? times->source : "given"};
    list_deps *ld = base_xcalloc((size_t)p->nlists + 1, sizeof *ld);
    uint8_t *built = base_xcalloc((size_t)p->nlists + 1, 1);
    int rc = write_groups(p, dir, prefix, e);
    base_buf path = {0};
    for (int d = 0; d < p->ndevices && !rc; d++) {
        int l = p->devices[d].list;
        if (!built[l]) {
            if (list_deps_build(&ld[l], p, l, e)) {
                rc = -1;
                break;
            }
            built[l] = 1;
            if (ld[l].maxdeps > w.ndeps_cap) {
                free(w.deps);
                w.ndeps_cap = ld[l].maxdeps;
                w.deps = base_xcalloc((size_t)w.ndeps_cap, sizeof *w.deps);
            }
        }
        path.n = 0;
        base_buf_printf(&path, "%s/%s.%d.et", dir, prefix, d);
        base_out o;
        if (base_out_open(&o, path.s, "the Chakra trace", e)) {
            rc = -1;
            break;
        }
        write_device(&w, d, &ld[l], o.f);
        rc = ferror(o.f) ? base_out_fail(&o, e) : base_out_commit(&o, e);
    }
    for (int l = 0; l < p->nlists; l++) list_deps_free(&ld[l]);
    free(ld), free(built), free(w.buf), free(w.deps);
    base_buf_free(&w.name), base_buf_free(&path);
    if (own) {
        free((void *)abstract.start), free((void *)abstract.end);
        for (int d = 0; d < 2 * p->ndevices; d++) free(own[d]);
        free(own);
    }
    return rc;
out:
    free((void *)abstract.start), free((void *)abstract.end);
    for (int d = 0; d < 2 * p->ndevices; d++) free(own[d]);
    free(own);
    return -1;
}

int chakra_write_simulated(void *ctx, const plan_set *p, const double *const *start, const double *const *end,
                           base_error *e)
{
    const chakra_target *t = ctx;
    chakra_times times = {.source = "simulated", .start = start, .end = end};
    return chakra_write(p, t->dir, t->prefix, &times, e);
}

void chakra_default_prefix(const char *program, char *out, size_t n)
{
    if (!n) return;
    const char *base = program ? strrchr(program, '/') : NULL;
    base = base ? base + 1 : (program ? program : "");
    const char *dot = strrchr(base, '.');
    size_t len = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    if (len == 0) {
        snprintf(out, n, "trace");
        return;
    }
    if (len >= n) len = n - 1;
    memcpy(out, base, len);
    out[len] = 0;
}
