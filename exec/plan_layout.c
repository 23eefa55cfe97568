/* plan_layout.c — the plan-reading rules the CPU executor and the CUDA runtime share
 * (plan_layout.h): region names, region placement, who holds what, ZeRO pieces, kernel
 * identities, boundary slots, the data-parallel size. */
#include "plan_layout.h"

#include "exec.h"

#include <stdlib.h>
#include <string.h>

int exec_group_pos(const plan_set *p, int g, int dev)
{
    for (int i = 0; i < p->groups[g].n; i++)
        if (p->groups[g].devices[i] == dev) return i;
    return -1;
}

void exec_zero_piece(int64_t n, int k, int size, int64_t *lo, int64_t *hi)
{
    int64_t c = size > 0 ? (n + size - 1) / size : n;
    *lo = (int64_t)k * c;
    if (*lo > n) *lo = n;
    *hi = *lo + c > n ? n : *lo + c;
}

int exec_parse_region(const char *name, int *layer, exec_region_kind *kind)
{
    const char *k = name;
    *layer = -1;
    if (name[0] == 'L' && name[1] >= '0' && name[1] <= '9') {
        char *end;
        long l = strtol(name + 1, &end, 10);
        if (*end != '.') return -1;
        *layer = (int)l;
        k = end + 1;
    }
    for (int i = 0; i < EXEC_NREGION_KINDS; i++)
        if (strcmp(k, exec_region_kind_name((exec_region_kind)i)) == 0) {
            *kind = (exec_region_kind)i;
            return 0;
        }
    return -1;
}

int exec_region_places(const plan_set *p, int dev, int nreg, exec_region_place *pl,
                       base_error *e)
{
    for (int r = 0; r < nreg; r++)
        pl[r] = (exec_region_place){.tp_group = -1, .ep_group = -1, .tp = 1, .ep = 1};
    const plan_list *L = plan_dev_list(p, dev);
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        if (in->op != PLAN_COMPUTE || in->region < 0 || in->region >= nreg) continue;
        exec_region_place *P = &pl[in->region];
        P->here = true;
        if (in->pass == PLAN_PASS_UPD) P->upd = true;
        int tg = in->tp_group >= 0 ? p->devices[dev].group_slots[in->tp_group] : -1;
        int eg = in->ep_group >= 0 ? p->devices[dev].group_slots[in->ep_group] : -1;
        if (tg >= 0) {
            if (P->tp_group >= 0 && P->tp_group != tg)
                return base_errorf(e, "region %s runs on TP groups %d and %d on device %d; a "
                                      "region has one shard per device",
                                   p->regions[in->region], P->tp_group, tg, dev);
            P->tp_group = tg;
        }
        if (eg >= 0) P->ep_group = eg;
    }
    for (int r = 0; r < nreg; r++) {
        exec_region_place *P = &pl[r];
        if (P->tp_group >= 0) {
            P->tp = p->groups[P->tp_group].n;
            P->tpr = exec_group_pos(p, P->tp_group, dev);
        }
        if (P->ep_group >= 0) {
            P->ep = p->groups[P->ep_group].n;
            P->epr = exec_group_pos(p, P->ep_group, dev);
        }
        if (P->tpr < 0 || P->epr < 0)
            return base_errorf(e, "device %d runs region %s on a TP/EP group it is not a member "
                                  "of; the plan is inconsistent",
                               dev, p->regions[r]);
    }
    return 0;
}

bool **exec_holds_new(const plan_set *p, int nreg)
{
    bool **holds = base_xcalloc((size_t)p->ndevices, sizeof *holds);
    for (int d = 0; d < p->ndevices; d++) {
        holds[d] = base_xcalloc((size_t)(nreg > 0 ? nreg : 1), sizeof **holds);
        const plan_list *Ld = plan_dev_list(p, d);
        for (int i = 0; i < Ld->n; i++)
            if (Ld->ins[i].op == PLAN_COMPUTE && Ld->ins[i].region >= 0 && Ld->ins[i].region < nreg)
                holds[d][Ld->ins[i].region] = true;
    }
    return holds;
}

void exec_holds_free(bool **holds, int ndevices)
{
    if (!holds) return;
    for (int d = 0; d < ndevices; d++) free(holds[d]);
    free(holds);
}

bool exec_group_holds(const plan_set *p, bool *const *holds, int g, int r)
{
    bool all = true;
    for (int k = 0; k < p->groups[g].n; k++) all &= holds[p->groups[g].devices[k]][r];
    return all;
}

const char *exec_compute_kid(const plan_set *p, const plan_instr *in)
{
    return in->kid >= 0 && in->kid < p->nkernel_ids ? p->kernel_ids[in->kid] : NULL;
}

int exec_aux_kind(const char *kid)
{
    if (kid && strcmp(kid, "aux.grad_norm") == 0) return 1;
    if (kid && strcmp(kid, "aux.aux_loss") == 0) return 2;
    return 0;
}

int *exec_bind_boundary(exec_bind_slots *s, bool fwd, int side, bool route)
{
    if (fwd) return side == 0 ? (route ? &s->x2b : &s->xb) : (route ? &s->y2b : &s->yb);
    return side == 0 ? (route ? &s->dy2b : &s->dyb) : (route ? &s->dx2b : &s->dxb);
}

int exec_bind_slots_fill(const exec_region_kind *kinds, int nreg, int64_t nmb, int r, int mb,
                         plan_pass pass, const char *name, exec_bind_slots *s, base_error *e)
{
    const exec_region_kind k = kinds[r];
    bool fwd = pass == PLAN_PASS_F || pass == PLAN_PASS_R;
    if (fwd) {
        if (s->xb < 0 && k != EXEC_EMBED) s->xs = (int)exec_slot_index(nmb, r, mb, EXEC_SLOT_X);
        if (k == EXEC_MOE_COMBINE && s->x2b < 0) s->x2s = (int)exec_slot_index(nmb, r, mb, EXEC_SLOT_ROUTE);
        if (pass == PLAN_PASS_F) {
            if (s->yb < 0 && k != EXEC_HEAD) {
                if (r + 1 >= nreg)
                    return base_errorf(e, "region %s has no next region for its output", name);
                s->ys = (int)exec_slot_index(nmb, r + 1, mb, EXEC_SLOT_X);
            }
            if (k == EXEC_MOE_GATE && s->y2b < 0) {
                if (r + 2 >= nreg || kinds[r + 2] != EXEC_MOE_COMBINE)
                    return base_errorf(e, "gate %s is not followed by experts and combine", name);
                s->y2s = (int)exec_slot_index(nmb, r + 2, mb, EXEC_SLOT_ROUTE);
            }
        }
    } else if (pass == PLAN_PASS_BW) {
        /* the embedding's input gradient is nothing (its BI is empty), so its BW takes the
         * output gradient itself rather than from the act buffer */
        if (k == EXEC_EMBED && s->dyb < 0) s->dys = (int)exec_slot_index(nmb, r, mb, EXEC_SLOT_DY);
    } else {
        if (s->dyb < 0 && k != EXEC_HEAD) s->dys = (int)exec_slot_index(nmb, r, mb, EXEC_SLOT_DY);
        if (k == EXEC_MOE_GATE && s->dy2b < 0) s->dy2s = (int)exec_slot_index(nmb, r, mb, EXEC_SLOT_DROUTE);
        if (s->dxb < 0 && k != EXEC_EMBED) {
            if (r < 1)
                return base_errorf(e, "region %s has no previous region for its input gradient",
                                   name);
            s->dxs = (int)exec_slot_index(nmb, r - 1, mb, EXEC_SLOT_DY);
        }
        if (k == EXEC_MOE_COMBINE && s->dx2b < 0) {
            if (r < 2 || kinds[r - 2] != EXEC_MOE_GATE)
                return base_errorf(e, "combine %s does not follow a gate and experts", name);
            s->dx2s = (int)exec_slot_index(nmb, r - 2, mb, EXEC_SLOT_DROUTE);
        }
    }
    return 0;
}

int exec_dp_size(const plan_model *m, int64_t *dp_size, base_error *e)
{
    int64_t per = m->micro_batch * m->num_microbatches;
    if (per <= 0 || m->global_batch % per)
        return base_errorf(e, "the plan's global batch %lld is not a multiple of micro-batch "
                              "%lld x %lld micro-batches",
                           (long long)m->global_batch, (long long)m->micro_batch,
                           (long long)m->num_microbatches);
    *dp_size = m->global_batch / per;
    return 0;
}

int exec_first_forward_region(const plan_list *L)
{
    for (int i = 0; i < L->n; i++)
        if (L->ins[i].op == PLAN_COMPUTE && L->ins[i].pass == PLAN_PASS_F) return L->ins[i].region;
    return -1;
}

void exec_coll_sizes(const plan_set *p, int dev, exec_buf *buf)
{
    const plan_list *L = plan_dev_list(p, dev);
    for (int pass = 0; pass < 8; pass++) {
        bool changed = false;
        for (int i = 0; i < L->n; i++) {
            const plan_instr *in = &L->ins[i];
            if (in->op != PLAN_COLL) continue;
            int g = plan_dev_group(p, dev, in), n = p->groups[g].n;
            /* a fused collective's piece k reads reads[k] into writes[k] (bind.c refuses
             * other shapes) */
            for (int k = 0; k < (in->nreads > 0 ? in->nreads : 1); k++) {
                int ib = in->nreads > 0 ? in->reads[k] : in->buf;
                int ob = in->nwrites > k ? in->writes[k] : in->nwrites ? -1 : ib;
                if (ib < 0 || ob < 0 || L->bufs[ib].role != PLAN_ROLE_COMM || ob == ib) continue;
                exec_buf *I = &buf[ib], *O = &buf[ob];
                int64_t mul = in->coll == PLAN_ALL_GATHER ? n : 1;
                int64_t div = in->coll == PLAN_REDUCE_SCATTER ? n : 1;
                if (I->bytes && !O->bytes) {
                    O->bytes = I->bytes * mul / div;
                    O->role = EXEC_BUF_COMM;
                    O->region = L->bufs[ob].region;
                    changed = true;
                } else if (O->bytes && !I->bytes) {
                    I->bytes = O->bytes * div / mul;
                    I->role = EXEC_BUF_COMM;
                    I->region = L->bufs[ib].region;
                    changed = true;
                }
            }
        }
        if (!changed) break;
    }
}

int exec_mark_saved_gathers(const plan_set *p, int dev, exec_buf *buf, base_error *e)
{
    const plan_list *L = plan_dev_list(p, dev);
    int n = 0;
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        if (in->op != PLAN_COLL || in->purpose != PLAN_PURPOSE_SP_REGATHER) continue;
        const int rd = in->nreads == 1 ? L->bufs[in->reads[0]].role : PLAN_ROLE_NONE;
        if (in->nwrites != 1 || (rd != PLAN_ROLE_SAVED && rd != PLAN_ROLE_RECOMPUTED) ||
            L->bufs[in->writes[0]].role != PLAN_ROLE_REGATHERED) {
            base_errorf(e, "an sp_regather reads %d buffers and writes %d; it reads one saved or "
                           "recomputed buffer and writes one regathered buffer: the plan's "
                           "purpose or roles are wrong",
                        in->nreads, in->nwrites);
            return exec_instr_error(p, dev, i, e);
        }
        exec_buf *B = &buf[in->writes[0]];
        B->saved_gather = true;
        B->role = EXEC_BUF_COMM;
        B->region = in->region;
        n++;
    }
    return n;
}

int exec_check_bucket_bytes(const plan_set *p, const plan_instr *in, int64_t total,
                            int64_t copies, const char *who, base_error *e)
{
    int gb = plan_dtype_bytes((plan_dtype)p->grad_dtype);
    if (in->bytes == total * gb || in->bytes == (total - copies) * gb) return 0;
    return base_errorf(e, "the %s sums %lld gradient elements (%lld bytes at the plan's %s) but "
                          "the plan moves %lld bytes; the %s's reading of this collective is "
                          "wrong",
                       who, (long long)total, (long long)(total * gb),
                       plan_dtype_name((plan_dtype)p->grad_dtype), (long long)in->bytes, who);
}

int exec_buf_set_role(exec_buf *B, exec_buf_role role, int region, int64_t bytes)
{
    if (B->role != EXEC_BUF_NONE &&
        (B->role != role || (role != EXEC_BUF_COMM && B->region != region)))
        return -1;
    B->role = role;
    B->region = region;
    if (bytes > B->bytes) B->bytes = bytes;
    return 0;
}

const char *exec_buf_name(const plan_list *L, int b)
{
    return b >= 0 && b < L->nbufs && L->bufs[b].name ? L->bufs[b].name : "?";
}

int exec_instr_error(const plan_set *p, int dev, int i, base_error *e)
{
    char d[256];
    exec_instr_describe(p, dev, i, d, sizeof d);
    base_error_prefix(e, "device %d, %s: ", dev, d);
    return -1;
}

int exec_coll_open(const plan_set *p, int dev, int i, exec_coll *C, base_error *e)
{
    const plan_instr *in = &plan_dev_list(p, dev)->ins[i];
    C->out = C->comm = -1;
    C->group = plan_dev_group(p, dev, in);
    C->gsize = p->groups[C->group].n;
    C->grank = exec_group_pos(p, C->group, dev);
    if (C->grank < 0)
        return base_errorf(e, "device %d is not a member of group %d (%s)", dev, C->group,
                           p->groups[C->group].name ? p->groups[C->group].name : "?");
    return 0;
}

int exec_grad_segs_bind(exec_coll *C, int seg0, const plan_list *L, const plan_instr *in, int bb,
                        const exec_buf *buf, int r, int kept)
{
    int piece = 0;
    for (int s = seg0; s < C->nseg; s++) {
        C->seg[s].buf = bb;
        if (in->purpose != PLAN_PURPOSE_ZERO_SCATTER || in->nwrites == 0) continue;
        for (int w = 0; w < in->nwrites; w++) {
            const int wb = in->writes[w];
            const plan_buffer *P = &L->bufs[wb];
            if (wb != bb && P->role == PLAN_ROLE_GRAD_PIECE && P->region == r &&
                buf[wb].role == EXEC_BUF_GRAD && buf[wb].region == r)
                C->seg[s].out = wb;
        }
        if (C->seg[s].out < 0 || C->seg[s].out != kept) return -1;
        piece = 1;
    }
    return piece;
}

int exec_dp_rank_find(const plan_set *p, const plan_list *L, const exec_coll *coll,
                      bool *const *holds, int r0, int tp_group, int ep_group, int grad_buf,
                      int64_t dp_size)
{
    for (int i = 0; i < L->n; i++) {
        const plan_instr *in = &L->ins[i];
        const exec_coll *C = &coll[i];
        if (in->op != PLAN_COLL || (in->purpose != PLAN_PURPOSE_DP_GRAD_SUM &&
                                    in->purpose != PLAN_PURPOSE_ZERO_SCATTER))
            continue;
        if (C->group == tp_group || C->group == ep_group || C->gsize != dp_size) continue;
        bool reads = false;
        for (int q = 0; q < in->nreads; q++) reads |= in->reads[q] == grad_buf;
        /* ZeRO-2/3: a micro-batch's reduce-scatter reads its whole gradient and adds the piece
         * into the kept gradient buffer */
        for (int q = 0; q < in->nwrites; q++) reads |= in->writes[q] == grad_buf;
        if (reads && exec_group_holds(p, holds, C->group, r0)) return C->grank;
    }
    return -1;
}

void exec_slots_note_reads(const exec_bind_slots *s, int i, exec_slot_sizes sz, int *slot_last,
                           int64_t *slot_bytes)
{
    const int reads[] = {s->xs, s->x2s, s->dys, s->dy2s};
    const int64_t bytes[] = {sz.x, sz.route, sz.y, sz.route};
    for (size_t q = 0; q < BASE_COUNT(reads); q++)
        if (reads[q] >= 0) {
            slot_last[reads[q]] = i;
            slot_bytes[reads[q]] = bytes[q];
        }
}

int exec_slots_check_writes(const plan_set *p, int64_t nmb, int region, const exec_bind_slots *s,
                            exec_slot_sizes sz, const int *slot_last, const int64_t *slot_bytes,
                            base_error *e)
{
    const char *name = p->regions[region];
    const int w[] = {s->ys, s->y2s, s->dxs, s->dx2s};
    const int64_t bytes[] = {sz.y, sz.route, sz.x, sz.route};
    for (size_t q = 0; q < BASE_COUNT(w); q++) {
        if (w[q] < 0) continue;
        if (slot_last[w[q]] < 0) {
            int tr = (int)(w[q] / EXEC_NSLOT / nmb);
            return base_errorf(e, "%s of %s has no reader on this device (region %s runs elsewhere "
                                  "and no send carries it); the plan lacks a transfer",
                               q % 2 == 0 ? "the output" : "the route", name, p->regions[tr]);
        }
        if (slot_bytes[w[q]] != bytes[q])
            return base_errorf(e, "%s writes %lld bytes into a boundary tensor its reader takes as "
                                  "%lld",
                               name, (long long)bytes[q], (long long)slot_bytes[w[q]]);
    }
    return 0;
}

bool exec_sequence_parallel(const plan_set *p, int dev, int r, int tp_group)
{
    const plan_list *L = plan_dev_list(p, dev);
    for (int i = 0; i < L->n && tp_group >= 0; i++) {
        const plan_instr *in = &L->ins[i];
        const bool tp = in->purpose == PLAN_PURPOSE_TP_FWD || in->purpose == PLAN_PURPOSE_TP_BWD;
        if (in->op == PLAN_COLL && tp && in->region == r &&
            plan_dev_group(p, dev, in) == tp_group &&
            (in->coll == PLAN_REDUCE_SCATTER || in->coll == PLAN_ALL_GATHER))
            return true;
    }
    return false;
}

void exec_plan_act_bytes(const plan_list *L, int r, int64_t *fb, int64_t *rb)
{
    *fb = *rb = -1;
    for (int i = 0; i < L->n && (*fb < 0 || *rb < 0); i++) {
        const plan_instr *in = &L->ins[i];
        if (in->op != PLAN_COMPUTE || in->region != r ||
            (in->pass != PLAN_PASS_F && in->pass != PLAN_PASS_R))
            continue;
        const plan_role kept = in->pass == PLAN_PASS_F ? PLAN_ROLE_SAVED : PLAN_ROLE_RECOMPUTED;
        for (int q = 0; q < in->nwrites; q++)
            if (L->bufs[in->writes[q]].role == kept) {
                int64_t *dst = in->pass == PLAN_PASS_F ? fb : rb;
                if (*dst < 0) *dst = L->bufs[in->writes[q]].bytes;
            }
    }
}

int exec_match_act_mode(int64_t fb, int64_t rb, exec_act_split_fn split, const void *ctx,
                        exec_act_mode *mode, int64_t *kept, int64_t *rebuilt, base_error *e)
{
    *mode = EXEC_ACT_ALL;
    for (int m = EXEC_ACT_SELECTIVE; m < EXEC_NACT_MODES; m++) {
        int64_t k, r;
        if (split(ctx, (exec_act_mode)m, &k, &r, e)) return -1;
        if (k == fb && r == rb) {
            *mode = (exec_act_mode)m;
            *kept = k;
            *rebuilt = r;
            return 0;
        }
    }
    return 0;
}
