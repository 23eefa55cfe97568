/* plan_write.c — writes a plan in its file form (docs/plan-format.md): versioned, line-oriented
 * text that people can diff and that plan_read.c reads back to the identical plan. Names are
 * written only where they lead back to the same index, and every number in a form that reads
 * back exactly. */
#include "plan.h"
#include "plan_text.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- writer */

typedef struct writer {
    FILE *f;
    base_buf b;
    int io_failed;
    base_error *e;
    int failed;
} writer;

static void w_flush(writer *w)
{
    if (w->b.n && fwrite(w->b.s, 1, w->b.n, w->f) != w->b.n) w->io_failed = 1;
    w->b.n = 0;
}

static void w_putn(writer *w, const char *s, size_t n) { base_buf_putn(&w->b, s, n); }
static void w_puts(writer *w, const char *s) { base_buf_putn(&w->b, s, strlen(s)); }

static void w_nl(writer *w)
{
    base_buf_putn(&w->b, "\n", 1);
    if (w->b.n >= (1u << 16)) w_flush(w);
}

static void w_i64(writer *w, int64_t v)
{
    char tmp[24];
    int n = 0;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[sizeof tmp - 1 - n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) tmp[sizeof tmp - 1 - n++] = '-';
    w_putn(w, tmp + sizeof tmp - n, (size_t)n);
}

/* The shortest of %.15g..%.17g that reads back to the same bits: exact, yet 0.1 stays "0.1". */
static void w_f64(writer *w, double v)
{
    char tmp[40];
    if (isfinite(v)) {
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(tmp, sizeof tmp, "%.*g", prec, v);
            if (strtod(tmp, NULL) == v && (v != 0 || signbit(strtod(tmp, NULL)) == signbit(v))) break;
        }
    } else {
        snprintf(tmp, sizeof tmp, "%.17g", v);
    }
    w_puts(w, tmp);
}

static void w_str(writer *w, const char *s)
{
    if (!s) {
        w_putn(w, "~", 1);
        return;
    }
    if (plan_text_str_is_bare(s)) {
        w_puts(w, s);
        return;
    }
    w_putn(w, "\"", 1);
    for (const unsigned char *q = (const unsigned char *)s; *q; q++) {
        char esc[8];
        switch (*q) {
        case '"': w_putn(w, "\\\"", 2); break;
        case '\\': w_putn(w, "\\\\", 2); break;
        case '\n': w_putn(w, "\\n", 2); break;
        case '\t': w_putn(w, "\\t", 2); break;
        case '\r': w_putn(w, "\\r", 2); break;
        default:
            if (*q < 0x20 || *q > 0x7e) {
                snprintf(esc, sizeof esc, "\\x%02x", *q);
                w_putn(w, esc, 4);
            } else {
                w_putn(w, (const char *)q, 1);
            }
        }
    }
    w_putn(w, "\"", 1);
}

/* A reference into a name table: the name when it leads back to idx, else `#idx`. */
static void w_ref(writer *w, const plan_text_name_index *ix, int n, int32_t idx)
{
    if (idx >= 0 && idx < n && ix->names[idx]) {
        const char *nm = ix->names[idx];
        if (plan_text_name_index_find(ix, nm, strlen(nm)) == idx) {
            w_str(w, nm);
            return;
        }
    }
    w_putn(w, "#", 1);
    w_i64(w, idx);
}

static void w_ilist(writer *w, const int32_t *v, int n)
{
    for (int i = 0; i < n; i++) {
        if (i) w_putn(w, ",", 1);
        w_i64(w, v[i]);
    }
}

static void w_key_i64(writer *w, const char *key, int64_t v)
{
    w_putn(w, " ", 1);
    w_puts(w, key);
    w_putn(w, "=", 1);
    w_i64(w, v);
}

static void w_key_f64(writer *w, const char *key, double v)
{
    w_putn(w, " ", 1);
    w_puts(w, key);
    w_putn(w, "=", 1);
    w_f64(w, v);
}

static void w_key_str(writer *w, const char *key, const char *v)
{
    w_putn(w, " ", 1);
    w_puts(w, key);
    w_putn(w, "=", 1);
    w_str(w, v);
}

static int w_bad(writer *w, const char *fmt, ...) BASE_PRINTF(2, 3);
static int w_bad(writer *w, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    w->failed = 1;
    return base_errorf(w->e, "cannot write the plan: %s; the compiler built an invalid plan", msg);
}

static int w_dtype(writer *w, const char *what, unsigned d)
{
    if (d >= PLAN_NDTYPE) return w_bad(w, "%s dtype %u is not a plan_dtype", what, d);
    w_puts(w, plan_dtype_name((plan_dtype)d));
    return 0;
}

/* Which fields an op interprets: those are always written; the rest only when they differ from
 * plan_instr_init's defaults, which is what keeps lines short and the round trip exact. */
static int op_is_p2p(int op) { return op == PLAN_SEND || op == PLAN_RECV; }
static int op_is_mem(int op) { return op == PLAN_ALLOC || op == PLAN_FREE; }

static int w_instr(writer *w, const plan_set *p, int li, int i, const plan_instr *in,
                   const plan_text_name_index *six, const plan_text_name_index *rix, const plan_text_name_index *kix)
{
    const plan_list *L = &p->lists[li];
    int op = in->op;
    if (op > PLAN_NOP) return w_bad(w, "list %d instruction %d has op %d", li, i, op);
    if (in->pass >= PLAN_NPASS) return w_bad(w, "list %d instruction %d has pass %d", li, i, in->pass);
    if (in->coll >= PLAN_NCOLL) return w_bad(w, "list %d instruction %d has collective kind %d", li, i, in->coll);
    if (in->mem >= PLAN_NMEM) return w_bad(w, "list %d instruction %d has memory category %d", li, i, in->mem);
    if (in->purpose >= PLAN_NPURPOSE) return w_bad(w, "list %d instruction %d has purpose %d", li, i, in->purpose);
    if (in->piece >= PLAN_NPIECE) return w_bad(w, "list %d instruction %d has piece rule %d", li, i, in->piece);
    if ((in->nreads > 0 && !in->reads) || (in->nwrites > 0 && !in->writes) || in->nreads < 0 || in->nwrites < 0)
        return w_bad(w, "list %d instruction %d has inconsistent read/write lists", li, i);
    plan_instr d;
    plan_instr_init(&d, (plan_op)op);
    int compute = op == PLAN_COMPUTE, p2p = op_is_p2p(op), coll = op == PLAN_COLL;
    int ev = op == PLAN_RECORD || op == PLAN_WAIT, mem = op_is_mem(op);

    w_putn(w, "  ", 2);
    w_i64(w, i);
    w_putn(w, " ", 1);
    w_puts(w, plan_op_name((plan_op)op));
    w_putn(w, " s=", 3);
    w_ref(w, six, L->nstreams, in->stream);
    if (compute || in->pass != d.pass) {
        w_putn(w, " pass=", 6);
        w_puts(w, plan_pass_name((plan_pass)in->pass));
    }
    if (coll || in->coll != d.coll) {
        w_putn(w, " kind=", 6);
        w_puts(w, plan_coll_name((plan_coll)in->coll));
    }
    if (coll || in->purpose != d.purpose) {
        w_putn(w, " purpose=", 9);
        w_puts(w, plan_purpose_name((plan_purpose)in->purpose));
    }
    if (coll || in->piece != d.piece) {
        w_putn(w, " piece=", 7);
        w_puts(w, plan_piece_name((plan_piece)in->piece));
    }
    if (in->region != d.region) {
        w_putn(w, " region=", 8);
        w_ref(w, rix, p->nregions, in->region);
    }
    if (compute || in->kid != d.kid) {
        w_putn(w, " kid=", 5);
        w_ref(w, kix, p->nkernel_ids, in->kid);
    }
    if (compute || in->kernels != d.kernels) w_key_i64(w, "kernels", in->kernels);
    if (p2p || in->peer != d.peer) w_key_i64(w, "peer", in->peer);
    if (p2p || in->tag != d.tag) w_key_i64(w, "tag", in->tag);
    if (in->sendrecv != d.sendrecv) w_key_i64(w, "sendrecv", in->sendrecv);
    if (coll || in->group != d.group) w_key_i64(w, "group", in->group);
    if (ev || in->event != d.event) w_key_i64(w, "event", in->event);
    if (p2p || coll || mem || in->bytes != d.bytes) w_key_i64(w, "bytes", in->bytes);
    if (mem || in->buf != d.buf) w_key_i64(w, "buf", in->buf);
    if (mem || in->mem != d.mem) {
        w_putn(w, " mem=", 5);
        w_puts(w, plan_mem_name((plan_mem)in->mem));
    }
    if (in->mb != d.mb) w_key_i64(w, "mb", in->mb);
    if (in->stage != d.stage) w_key_i64(w, "stage", in->stage);
    if (in->tp_group != d.tp_group) w_key_i64(w, "tp_group", in->tp_group);
    if (in->ep_group != d.ep_group) w_key_i64(w, "ep_group", in->ep_group);
    if (in->nreads > 0) {
        w_putn(w, " reads=", 7);
        w_ilist(w, in->reads, in->nreads);
    }
    if (in->nwrites > 0) {
        w_putn(w, " writes=", 8);
        w_ilist(w, in->writes, in->nwrites);
    }
    w_nl(w);
    return 0;
}

static int links_known(const plan_links *l)
{
    return l->nvlink_bw != 0 || l->nvlink_latency != 0 || l->nic_bw != 0 || l->nic_latency != 0 ||
           l->gpus_per_nic != 0 || l->gpus_per_node != 0 || l->topology != 0 || l->oversubscription != 0 ||
           l->platform != NULL;
}

static int key_is_valid(const char *k)
{
    if (!k || !plan_text_is_key_start((unsigned char)k[0])) return 0;
    for (const char *c = k + 1; *c; c++)
        if (!plan_text_is_key_char((unsigned char)*c)) return 0;
    return 1;
}

/* The optional `links` and `calib` lines: written only when the plan has them, so that plans
 * without network figures (built in memory, or older files) round-trip unchanged. */
static int w_links(writer *w, const plan_set *p)
{
    const plan_links *l = &p->links;
    if (links_known(l)) {
        if (l->topology >= PLAN_NTOPO) return w_bad(w, "links topology %u is not a plan_topology", l->topology);
        w_puts(w, "links");
        w_key_f64(w, "nvlink_bw", l->nvlink_bw);
        w_key_f64(w, "nvlink_latency", l->nvlink_latency);
        w_key_f64(w, "nic_bw", l->nic_bw);
        w_key_f64(w, "nic_latency", l->nic_latency);
        w_key_i64(w, "gpus_per_nic", l->gpus_per_nic);
        w_key_i64(w, "gpus_per_node", l->gpus_per_node);
        w_putn(w, " topology=", 10);
        w_puts(w, plan_topology_name((plan_topology)l->topology));
        w_key_f64(w, "oversubscription", l->oversubscription);
        w_key_str(w, "platform", l->platform);
        w_nl(w);
    }
    if (p->ncalib > 0) {
        w_puts(w, "calib");
        for (int i = 0; i < p->ncalib; i++) {
            if (!key_is_valid(p->calib[i].name))
                return w_bad(w, "calibration name '%s' is not a key ([a-z_][a-z0-9_]*)",
                             p->calib[i].name ? p->calib[i].name : "(null)");
            for (int j = 0; j < i; j++)
                if (!strcmp(p->calib[j].name, p->calib[i].name))
                    return w_bad(w, "calibration name '%s' appears twice", p->calib[i].name);
            w_key_f64(w, p->calib[i].name, p->calib[i].value);
        }
        w_nl(w);
    }
    return 0;
}

static int w_plan(writer *w, const plan_set *p)
{
    w_puts(w, "piper-plan ");
    w_i64(w, PLAN_VERSION);
    w_nl(w);
    w_puts(w, "# piper execution plan; the format is described in docs/plan-format.md");
    w_nl(w);

    w_puts(w, "dtypes param=");
    if (w_dtype(w, "param", p->param_dtype)) return -1;
    w_puts(w, " act=");
    if (w_dtype(w, "act", p->act_dtype)) return -1;
    w_puts(w, " grad=");
    if (w_dtype(w, "grad", p->grad_dtype)) return -1;
    w_puts(w, " opt=");
    if (w_dtype(w, "opt", p->opt_dtype)) return -1;
    w_nl(w);

    const plan_gpu *g = &p->gpu;
    w_puts(w, "gpu");
    w_key_str(w, "name", g->name);
    for (int d = 0; d < PLAN_NDTYPE; d++) {
        char key[32];
        snprintf(key, sizeof key, "peak_%s", plan_dtype_name((plan_dtype)d));
        w_key_f64(w, key, g->peak_flops[d]);
    }
    w_key_f64(w, "hbm_bw", g->hbm_bw);
    w_key_f64(w, "mem_bytes", g->mem_bytes);
    w_key_f64(w, "reserve_bytes", g->reserve_bytes);
    w_nl(w);
    if (w_links(w, p)) return -1;

    const plan_model *m = &p->model;
    w_puts(w, "model");
    w_key_str(w, "name", m->name);
    w_key_str(w, "family", m->family);
    w_key_i64(w, "layers", m->layers);
    w_key_i64(w, "hidden", m->hidden);
    w_key_i64(w, "heads", m->heads);
    w_key_i64(w, "kv_heads", m->kv_heads);
    w_key_i64(w, "head_dim", m->head_dim);
    w_key_i64(w, "ffn", m->ffn);
    w_key_i64(w, "experts", m->experts);
    w_key_i64(w, "expert_ffn", m->expert_ffn);
    w_key_i64(w, "top_k", m->top_k);
    w_key_f64(w, "capacity_factor", m->capacity_factor);
    w_key_i64(w, "vocab", m->vocab);
    w_key_i64(w, "seq", m->seq);
    w_key_str(w, "tied_embeddings", m->tied_embeddings ? "true" : "false");
    w_key_str(w, "qk_norm", m->qk_norm ? "true" : "false");
    w_key_str(w, "dropout", m->dropout ? "true" : "false");
    w_key_i64(w, "micro_batch", m->micro_batch);
    w_key_i64(w, "num_microbatches", m->num_microbatches);
    w_key_i64(w, "global_batch", m->global_batch);
    w_nl(w);

    w_puts(w, "regions ");
    w_i64(w, p->nregions);
    w_nl(w);
    for (int i = 0; i < p->nregions; i++) {
        w_putn(w, "  ", 2);
        w_i64(w, i);
        w_putn(w, " ", 1);
        w_str(w, p->regions[i]);
        w_nl(w);
    }
    w_puts(w, "kernel_ids ");
    w_i64(w, p->nkernel_ids);
    w_nl(w);
    for (int i = 0; i < p->nkernel_ids; i++) {
        w_putn(w, "  ", 2);
        w_i64(w, i);
        w_putn(w, " ", 1);
        w_str(w, p->kernel_ids[i]);
        w_nl(w);
    }

    w_puts(w, "kernel_lists ");
    w_i64(w, p->nkernel_lists);
    w_nl(w);
    for (int i = 0; i < p->nkernel_lists; i++) {
        const plan_kernel_list *kl = &p->kernel_lists[i];
        if (kl->n < 0 || (kl->n > 0 && !kl->k)) return w_bad(w, "kernel list %d has %d kernels", i, kl->n);
        w_putn(w, "  ", 2);
        w_i64(w, i);
        w_key_i64(w, "kernels", kl->n);
        w_nl(w);
        for (int j = 0; j < kl->n; j++) {
            const plan_kernel *k = &kl->k[j];
            if (k->kind > PLAN_KERNEL_MEM) return w_bad(w, "kernel list %d kernel %d has kind %d", i, j, k->kind);
            w_puts(w, k->kind == PLAN_KERNEL_GEMM ? "    gemm " : "    mem ");
            w_str(w, k->name);
            w_puts(w, " dtype=");
            if (w_dtype(w, "kernel", k->dtype)) return -1;
            w_key_i64(w, "count", k->count);
            if (k->kind == PLAN_KERNEL_GEMM || k->m || k->n || k->k) {
                w_key_i64(w, "m", k->m);
                w_key_i64(w, "n", k->n);
                w_key_i64(w, "k", k->k);
            }
            w_key_f64(w, "flops", k->flops);
            w_key_f64(w, "bytes", k->bytes);
            w_nl(w);
        }
    }

    w_puts(w, "groups ");
    w_i64(w, p->ngroups);
    w_nl(w);
    for (int i = 0; i < p->ngroups; i++) {
        const plan_group *gr = &p->groups[i];
        if (gr->n < 0 || (gr->n > 0 && !gr->devices)) return w_bad(w, "group %d has %d devices", i, gr->n);
        w_putn(w, "  ", 2);
        w_i64(w, i);
        w_putn(w, " ", 1);
        w_str(w, gr->name);
        w_puts(w, " devices=");
        w_ilist(w, gr->devices, gr->n);
        w_nl(w);
    }

    w_puts(w, "lists ");
    w_i64(w, p->nlists);
    w_nl(w);
    plan_text_name_index rix, kix;
    plan_text_name_index_build(&rix, p->regions, p->nregions);
    plan_text_name_index_build(&kix, p->kernel_ids, p->nkernel_ids);
    int rc = 0;
    for (int li = 0; li < p->nlists && rc == 0; li++) {
        const plan_list *L = &p->lists[li];
        if (L->n < 0 || L->nbufs < 0 || L->nstreams < 0 || L->nevents < 0 || L->ngroup_slots < 0 ||
            (L->n > 0 && !L->ins) || (L->nbufs > 0 && !L->bufs) || (L->nstreams > 0 && !L->streams)) {
            rc = w_bad(w, "list %d has a negative count or a missing array", li);
            break;
        }
        w_puts(w, "list ");
        w_i64(w, li);
        w_key_i64(w, "streams", L->nstreams);
        w_key_i64(w, "bufs", L->nbufs);
        w_key_i64(w, "events", L->nevents);
        w_key_i64(w, "group_slots", L->ngroup_slots);
        w_key_i64(w, "instrs", L->n);
        w_nl(w);
        for (int s = 0; s < L->nstreams; s++) {
            w_puts(w, "  stream ");
            w_i64(w, s);
            w_putn(w, " ", 1);
            w_str(w, L->streams[s]);
            w_nl(w);
        }
        for (int b = 0; b < L->nbufs && rc == 0; b++) {
            const plan_buffer *bf = &L->bufs[b];
            if (bf->mem >= PLAN_NMEM) {
                rc = w_bad(w, "list %d buffer %d has memory category %d", li, b, bf->mem);
                break;
            }
            if (bf->role >= PLAN_NROLE || bf->region < -1 || bf->region >= p->nregions) {
                rc = w_bad(w, "list %d buffer %d has role %d and owner region %d (of %d)", li, b, bf->role,
                           bf->region, p->nregions);
                break;
            }
            w_puts(w, "  buf ");
            w_i64(w, b);
            w_putn(w, " ", 1);
            w_str(w, bf->name);
            w_key_i64(w, "bytes", bf->bytes);
            w_puts(w, " mem=");
            w_puts(w, plan_mem_name((plan_mem)bf->mem));
            w_puts(w, " role=");
            w_puts(w, plan_role_name((plan_role)bf->role));
            if (bf->region != -1) {
                w_putn(w, " owner=", 7);
                w_ref(w, &rix, p->nregions, bf->region);
            }
            w_nl(w);
        }
        plan_text_name_index six;
        plan_text_name_index_build(&six, L->streams, L->nstreams);
        for (int i = 0; i < L->n && rc == 0; i++) rc = w_instr(w, p, li, i, &L->ins[i], &six, &rix, &kix);
        plan_text_name_index_free(&six);
    }
    plan_text_name_index_free(&rix);
    plan_text_name_index_free(&kix);
    if (rc) return rc;

    w_puts(w, "devices ");
    w_i64(w, p->ndevices);
    w_nl(w);
    for (int i = 0; i < p->ndevices; i++) {
        const plan_device *dv = &p->devices[i];
        if (dv->list < 0 || dv->list >= p->nlists) return w_bad(w, "device %d uses list %d of %d", i, dv->list, p->nlists);
        int ns = p->lists[dv->list].ngroup_slots;
        if (ns > 0 && !dv->group_slots) return w_bad(w, "device %d has no group slots", i);
        w_putn(w, "  ", 2);
        w_i64(w, i);
        if (dv->id != i) w_key_i64(w, "id", dv->id);
        w_key_i64(w, "node", dv->node);
        w_key_i64(w, "list", dv->list);
        w_key_i64(w, "peer_offset", dv->peer_offset);
        w_puts(w, " slots=");
        w_ilist(w, dv->group_slots, ns);
        w_nl(w);
    }
    w_puts(w, "end");
    w_nl(w);
    return 0;
}

int plan_write(const plan_set *p, FILE *f, base_error *e)
{
    writer w = {.f = f, .e = e};
    int rc = w_plan(&w, p);
    w_flush(&w);
    base_buf_free(&w.b);
    if (rc) return -1;
    if (w.io_failed || fflush(f) != 0 || ferror(f))
        return base_errorf(e, "cannot write the plan: output error; check free disk space and permissions");
    return 0;
}

int plan_write_file(const plan_set *p, const char *path, base_error *e)
{
    base_out o;
    if (base_out_open(&o, path, "the plan", e)) return -1;
    base_error werr;
    base_error_clear(&werr);
    if (plan_write(p, o.f, &werr) != 0) {
        /* an output error is named with the path and the system's reason; any other as it is */
        base_out_fail(&o, e);
        return base_errorf(e, "%s: %s", path, werr.msg);
    }
    return base_out_commit(&o, e);
}
