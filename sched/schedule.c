/* schedule.c — the machinery the schedule builders share (schedule.h): the per-rank table and
 * its validation, the builder table (SCHED_BUILDER_TABLE's rows, the lookups, the layouts), the
 * `schedule {name | file, ...}` directive pass, and the table of a compiled plan (--emit-order).
 *
 * The pass knows no builder by name: it looks the directive's name up in the table, reads the
 * options the row lists, checks the row's layout and runs the row's build; what a builder needs
 * beyond that (DualPipe's mirror, ZB-H2's p2p channels) is a flag of its row. An order file is
 * the other source of a table: its rows are the ranks, so it has no layout formula, no options
 * and no builder, and the pass reads and checks it on a branch of its own.
 *
 * The pass derives the pipeline from the program instead of asking for it twice: the PP
 * annotation gives the stages, the placements give the ranks (stages placed on the same devices
 * are one rank), split gives m. It checks that the placement is the one the schedule assumes
 * (stage s on rank s mod p for interleaving, stages r and 2p-1-r on rank r for V shapes), sets
 * every node's CHUNK tag, builds the table, and lowers it to one `order` directive per rank —
 * one group per cell, a cell's filters {PP, PASS, MB} — run through the ordinary order pass. So a
 * schedule is exactly the orders a user could have written, and --emit-directives prints them. */
#include "schedule.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the table */

void sched_table_init(sched_table *t, int nranks)
{
    t->nranks = nranks > 0 ? nranks : 0;
    t->rows = base_xcalloc((size_t)(nranks > 0 ? nranks : 1), sizeof *t->rows);
}

void sched_table_free(sched_table *t)
{
    for (int r = 0; r < t->nranks; r++) free(t->rows[r].cells);
    free(t->rows);
    memset(t, 0, sizeof *t);
}

static sched_cell *new_cell(sched_table *t, int rank)
{
    sched_row *row = &t->rows[rank];
    if (row->n == row->cap) {
        row->cap = row->cap ? 2 * row->cap : 32;
        row->cells = base_xrealloc(row->cells, (size_t)row->cap * sizeof *row->cells);
    }
    sched_cell *c = &row->cells[row->n++];
    memset(c, 0, sizeof *c);
    return c;
}

void sched_table_push(sched_table *t, int rank, int stage, plan_pass pass, int mb)
{
    sched_cell *c = new_cell(t, rank);
    c->n = 1;
    c->a[0] = (sched_action){stage, mb, (uint8_t)pass};
}

void sched_table_push_pair(sched_table *t, int rank, sched_action first, sched_action second)
{
    sched_cell *c = new_cell(t, rank);
    c->n = 2;
    c->a[0] = first;
    c->a[1] = second;
}

static bool action_eq(const sched_action *a, const sched_action *b)
{
    return a->stage == b->stage && a->mb == b->mb && a->pass == b->pass;
}

bool sched_table_equal(const sched_table *a, const sched_table *b)
{
    if (a->nranks != b->nranks) return false;
    for (int r = 0; r < a->nranks; r++) {
        const sched_row *x = &a->rows[r], *y = &b->rows[r];
        if (x->n != y->n) return false;
        for (int k = 0; k < x->n; k++) {
            if (x->cells[k].n != y->cells[k].n) return false;
            for (int i = 0; i < x->cells[k].n; i++)
                if (!action_eq(&x->cells[k].a[i], &y->cells[k].a[i])) return false;
        }
    }
    return true;
}

static char pass_letter(int pass)
{
    switch (pass) {
    case PLAN_PASS_F: return 'F';
    case PLAN_PASS_B: return 'B';
    case PLAN_PASS_BI: return 'I';
    case PLAN_PASS_BW: return 'W';
    default: return '?';
    }
}

const char *sched_cell_str(const sched_cell *c, char *buf, size_t n)
{
    if (c->n == 2)
        snprintf(buf, n, "(%d%c%d;%d%c%d)OVERLAP_F_B", c->a[0].stage, pass_letter(c->a[0].pass),
                 c->a[0].mb, c->a[1].stage, pass_letter(c->a[1].pass), c->a[1].mb);
    else
        snprintf(buf, n, "%d%c%d", c->a[0].stage, pass_letter(c->a[0].pass), c->a[0].mb);
    return buf;
}

/* ---------------------------------------------------------------- validation */

typedef struct vctx {
    const sched_table *t;
    const char *file;
    base_error *e;
} vctx;

/* "file:line:col: rank r, column c ('0B3'): <msg>" (no file: without the location) */
static int cell_error(const vctx *v, int r, int k, const char *fmt, ...) BASE_PRINTF(4, 5);
static int cell_error(const vctx *v, int r, int k, const char *fmt, ...)
{
    const sched_row *row = &v->t->rows[r];
    const sched_cell *c = &row->cells[k];
    char msg[1024], cs[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int col = c->col > 0 ? c->col : k + 1;
    if (v->file)
        return base_error_at(v->e, v->file, row->line, c->text_col, "rank %d, column %d ('%s'): %s",
                             r, col, sched_cell_str(c, cs, sizeof cs), msg);
    return base_errorf(v->e, "rank %d, column %d ('%s'): %s", r, col, sched_cell_str(c, cs, sizeof cs), msg);
}

static int row_error(const vctx *v, int r, const char *fmt, ...) BASE_PRINTF(3, 4);
static int row_error(const vctx *v, int r, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (v->file && r >= 0)
        return base_error_at(v->e, v->file, v->t->rows[r].line, 1, "rank %d: %s", r, msg);
    if (v->file) return base_error_at(v->e, v->file, 0, 0, "%s", msg);
    if (r >= 0) return base_errorf(v->e, "rank %d: %s", r, msg);
    return base_errorf(v->e, "%s", msg);
}

int sched_table_validate(const sched_table *t, const char *file, int nstages, int m, base_error *e)
{
    vctx v = {t, file, e};
    if (t->nranks < 1) return row_error(&v, -1, "the order has no ranks; write one row per rank");
    int S = nstages, M = m;
    bool infer_s = S <= 0, infer_m = M <= 0;
    if (infer_s || infer_m) {
        /* in 64 bits: a stage or micro-batch number may be INT32_MAX */
        int64_t s64 = infer_s ? 0 : S, m64 = infer_m ? 0 : M, actions = 0;
        for (int r = 0; r < t->nranks; r++)
            for (int k = 0; k < t->rows[r].n; k++)
                for (int i = 0; i < t->rows[r].cells[k].n; i++) {
                    const sched_action *a = &t->rows[r].cells[k].a[i];
                    if (infer_s && (int64_t)a->stage + 1 > s64) s64 = (int64_t)a->stage + 1;
                    if (infer_m && (int64_t)a->mb + 1 > m64) m64 = (int64_t)a->mb + 1;
                    actions++;
                }
        /* every (stage, micro-batch) needs its forward, so an order naming more of them than it
         * has actions is refused before tables of that size are made */
        if (s64 > 0 && m64 > 0 && s64 > actions / m64) {
            return row_error(&v, -1, "the order names stage %lld and micro-batch %lld, so it needs "
                                     "%lld x %lld forwards, but it has %lld actions in all; number "
                                     "stages and micro-batches from 0 without gaps",
                             (long long)(s64 - 1), (long long)(m64 - 1), (long long)s64,
                             (long long)m64, (long long)actions);
        }
        S = (int)s64;
        M = (int)m64;
    }
    for (int r = 0; r < t->nranks; r++)
        if (t->rows[r].n == 0)
            return row_error(&v, r, "the rank has no actions; every rank runs at least one "
                                    "stage (an empty line is a rank, not a separator)");
    if (S < 1 || M < 1) return row_error(&v, -1, "the order names no stage or micro-batch");
    size_t nk = (size_t)S * (size_t)M;
    /* position (row-local cell index) of each action of (stage, mb); -1 when absent */
    int *pos[4];
    for (int q = 0; q < 4; q++) {
        pos[q] = base_xmalloc(nk * sizeof(int));
        for (size_t i = 0; i < nk; i++) pos[q][i] = -1;
    }
    int *rank_of = base_xmalloc((size_t)S * sizeof(int));
    int *first_col = base_xmalloc((size_t)S * sizeof(int));
    for (int s = 0; s < S; s++) rank_of[s] = -1;
    int rc = 0;
    static const char *const what[4] = {"forward", "full backward (B)", "input backward (I)",
                                        "weight backward (W)"};
    for (int r = 0; r < t->nranks && !rc; r++) {
        const sched_row *row = &t->rows[r];
        for (int k = 0; k < row->n && !rc; k++) {
            const sched_cell *c = &row->cells[k];
            if (c->n == 2 && action_eq(&c->a[0], &c->a[1])) {
                rc = cell_error(&v, r, k, "an overlapped pair names the same action twice; pair "
                                          "two different actions");
                break;
            }
            for (int i = 0; i < c->n && !rc; i++) {
                const sched_action *a = &c->a[i];
                int q = a->pass == PLAN_PASS_F ? 0 : a->pass == PLAN_PASS_B ? 1 : a->pass == PLAN_PASS_BI ? 2 : 3;
                if (a->stage < 0 || a->stage >= S) {
                    rc = cell_error(&v, r, k, "stage %d does not exist: the pipeline has %d "
                                              "stages (0-%d); use one of those",
                                    a->stage, S, S - 1);
                    break;
                }
                if (a->mb < 0 || a->mb >= M) {
                    rc = cell_error(&v, r, k, "micro-batch %d does not exist: there are %d "
                                              "(0-%d); use one of those, or split into more",
                                    a->mb, M, M - 1);
                    break;
                }
                if (rank_of[a->stage] >= 0 && rank_of[a->stage] != r) {
                    rc = cell_error(&v, r, k, "stage %d also runs on rank %d (column %d); a "
                                              "stage lives on one rank: move all its actions to "
                                              "one row",
                                    a->stage, rank_of[a->stage], first_col[a->stage]);
                    break;
                }
                if (rank_of[a->stage] < 0) {
                    rank_of[a->stage] = r;
                    first_col[a->stage] = c->col > 0 ? c->col : k + 1;
                }
                size_t key = (size_t)a->stage * (size_t)M + (size_t)a->mb;
                if (pos[q][key] >= 0) {
                    rc = cell_error(&v, r, k, "the %s of stage %d micro-batch %d appears twice "
                                              "(also column %d); keep one",
                                    what[q], a->stage, a->mb,
                                    row->cells[pos[q][key]].col > 0 ? row->cells[pos[q][key]].col : pos[q][key] + 1);
                    break;
                }
                pos[q][key] = k;
            }
        }
    }
    /* dependencies, in row order so that the first offending cell is named */
    for (int r = 0; r < t->nranks && !rc; r++) {
        const sched_row *row = &t->rows[r];
        for (int k = 0; k < row->n && !rc; k++) {
            const sched_cell *c = &row->cells[k];
            for (int i = 0; i < c->n && !rc; i++) {
                const sched_action *a = &c->a[i];
                size_t key = (size_t)a->stage * (size_t)M + (size_t)a->mb;
                int f = pos[0][key], b = pos[1][key], bi = pos[2][key], bw = pos[3][key];
                if (a->pass == PLAN_PASS_F) continue;
                if (a->pass == PLAN_PASS_B && (bi >= 0 || bw >= 0)) {
                    rc = cell_error(&v, r, k, "micro-batch %d of stage %d has a full backward "
                                              "and also a split one (I/W); use B, or I and W",
                                    a->mb, a->stage);
                } else if ((a->pass == PLAN_PASS_B || a->pass == PLAN_PASS_BI) && (f < 0 || f >= k)) {
                    rc = cell_error(&v, r, k, f < 0 ? "the backward has no forward (%dF%d); add it "
                                                      "before the backward"
                                                    : "the backward comes before its forward "
                                                      "(%dF%d); move it after",
                                    a->stage, a->mb);
                } else if (a->pass == PLAN_PASS_BW && (bi < 0 || bi >= k)) {
                    rc = cell_error(&v, r, k, bi < 0 ? "the weight backward has no input backward "
                                                       "(%dI%d); add it before the W, or use B"
                                                     : "the weight backward comes before its "
                                                       "input backward (%dI%d); move it after",
                                    a->stage, a->mb);
                } else if (a->pass == PLAN_PASS_BI && bw < 0) {
                    rc = cell_error(&v, r, k, "the input backward has no weight backward; add "
                                              "%dW%d after it, or write a full %dB%d",
                                    a->stage, a->mb, a->stage, a->mb);
                }
                (void)b;
            }
        }
    }
    /* completeness: every stage on some rank, m forwards and m backwards each */
    for (int s = 0; s < S && !rc; s++) {
        if (rank_of[s] < 0) {
            rc = row_error(&v, -1, "stage %d appears on no rank; every stage 0-%d needs its "
                                   "forwards and backwards on one row",
                           s, S - 1);
            break;
        }
        int nf = 0, nb = 0, ni = 0, nw = 0;
        for (int mb = 0; mb < M; mb++) {
            size_t key = (size_t)s * (size_t)M + (size_t)mb;
            nf += pos[0][key] >= 0;
            nb += pos[1][key] >= 0;
            ni += pos[2][key] >= 0;
            nw += pos[3][key] >= 0;
        }
        for (int mb = 0; mb < M && !rc; mb++) {
            size_t key = (size_t)s * (size_t)M + (size_t)mb;
            if (pos[0][key] < 0)
                rc = row_error(&v, rank_of[s], "stage %d has %d forwards but there are %d "
                                               "micro-batches: micro-batch %d has none; add %dF%d",
                               s, nf, M, mb, s, mb);
            else if (pos[1][key] < 0 && pos[2][key] < 0)
                rc = row_error(&v, rank_of[s], "stage %d has %d backwards (B + (I+W)/2 = %d + "
                                               "%d/2) but needs one per micro-batch (%d): "
                                               "micro-batch %d has none; add %dB%d, or %dI%d "
                                               "and %dW%d",
                               s, nb + (ni + nw) / 2, nb, ni + nw, M, mb, s, mb, s, mb, s, mb);
        }
    }
    for (int q = 0; q < 4; q++) free(pos[q]);
    free(rank_of);
    free(first_col);
    return rc;
}

/* ---------------------------------------------------------------- the builder table */

#define SCHED_OPTION_ROW(key, field, doc) {key, offsetof(sched_params, field), doc},
#define SCHED_OPTIONS(id, name, layout, build, flags, doc, options) \
    static const sched_option options_##id[] = {options{NULL, 0, NULL}};
SCHED_BUILDER_TABLE(SCHED_OPTIONS, SCHED_OPTION_ROW)
#undef SCHED_OPTIONS

static const sched_builder builders[SCHED_NKINDS] = {
#define SCHED_ROW(id, name, layout, build, flags, doc, options) \
    [SCHED_##id] = {name, SCHED_LAYOUT_##layout, build, flags, doc, options_##id},
    SCHED_BUILDER_TABLE(SCHED_ROW, )
#undef SCHED_ROW
};

const char *const sched_kind_names[SCHED_NKINDS + 1] = {
#define SCHED_NAME(id, name, layout, build, flags, doc, options) name,
    SCHED_BUILDER_TABLE(SCHED_NAME, ) NULL
#undef SCHED_NAME
};

const sched_builder *sched_kind_info(sched_kind k)
{
    return (unsigned)k < SCHED_NKINDS ? &builders[k] : NULL;
}

int sched_kind_of(const char *name)
{
    if (!name) return -1;
    for (int k = 0; k < SCHED_NKINDS; k++) {
        const char *a = name, *b = builders[k].name;
        while (*a && *b && (*a | 0x20) == (*b | 0x20)) a++, b++;
        if (!*a && !*b) return k;
    }
    return -1;
}

const char *sched_kind_name(sched_kind k) { return (unsigned)k < SCHED_NKINDS ? builders[k].name : "?"; }

sched_layout sched_kind_layout(sched_kind k)
{
    return (unsigned)k < SCHED_NKINDS ? builders[k].layout : SCHED_LAYOUT_ONE;
}

int sched_build(sched_kind k, const sched_params *sp, sched_table *t, char *why, size_t n)
{
    memset(t, 0, sizeof *t);
    if ((unsigned)k >= SCHED_NKINDS) {
        snprintf(why, n, "unknown schedule kind %d", (int)k);
        return -1;
    }
    return builders[k].build(sp, t, why, n);
}

/* ---------------------------------------------------------------- layouts */

static const char *const layout_rules[SCHED_NLAYOUTS] = {
#define SCHED_LAYOUT_RULE(id, rule) [SCHED_LAYOUT_##id] = rule,
    SCHED_LAYOUT_TABLE(SCHED_LAYOUT_RULE)
#undef SCHED_LAYOUT_RULE
};

const char *sched_layout_rule(sched_layout l) { return (unsigned)l < SCHED_NLAYOUTS ? layout_rules[l] : "?"; }

/* The formulas themselves: rank r of p holds stage s. */
int sched_layout_rank(sched_layout l, int p, int s)
{
    switch (l) {
    case SCHED_LAYOUT_LOOP: return s % p;
    case SCHED_LAYOUT_V:
    case SCHED_LAYOUT_MIRROR: return s < p ? s : 2 * p - 1 - s;
    default: return s;
    }
}

int sched_layout_chunk(sched_layout l, int p, int s)
{
    switch (l) {
    case SCHED_LAYOUT_LOOP: return s / p;
    case SCHED_LAYOUT_V:
    case SCHED_LAYOUT_MIRROR: return s < p ? 0 : 1;
    default: return 0;
    }
}

/* ---------------------------------------------------------------- stages and ranks */

static int program_stages(const ir_program *p)
{
    return (int)(p->ann.npp_ranges ? p->ann.npp_ranges : p->ann.pp_stages);
}

static bool is_stage_work(const ir_node *n)
{
    return !n->dead && n->stage >= 0 && n->mb >= 0 &&
           (n->op == IR_OP_F || n->op == IR_OP_B || n->op == IR_OP_BI || n->op == IR_OP_BW);
}

/* "[0]", "[0, 1]", "[0-7]" */
static const char *devs_str(const ir_dag *g, int place, char *buf, size_t n)
{
    const ir_place *p = &g->places[place];
    bool run = p->ndev > 2;
    for (int i = 1; i < p->ndev && run; i++) run = p->devs[i] == p->devs[i - 1] + 1;
    if (run) {
        snprintf(buf, n, "[%d-%d]", p->devs[0], p->devs[p->ndev - 1]);
        return buf;
    }
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < p->ndev && o + 16 < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%d", i ? ", " : "", p->devs[i]);
    snprintf(buf + o, n - o, "%s]", o + 16 >= n ? ", ..." : "");
    return buf;
}

/* The placement of every stage's forward/backward work (one per stage, or an error). */
static int stage_places(const ir_dag *g, int S, const char *file, int line, int col,
                        const char *what, int *place_of, base_error *e)
{
    for (int s = 0; s < S; s++) place_of[s] = -1;
    for (size_t v = 0; v < g->nnodes; v++) {
        const ir_node *n = &g->nodes[v];
        if (!is_stage_work(n) || n->stage >= S) continue;
        if (place_of[n->stage] < 0) {
            place_of[n->stage] = n->place;
        } else if (place_of[n->stage] != n->place) {
            char a[96], b[96], lbl[96];
            return base_error_at(e, file, line, col,
                                 "%s: stage %d runs on devices %s but '%s' runs on %s; a pipeline "
                                 "stage must run on one device group: place it whole with "
                                 "{op: place, filter: {PP: %d}, ...}",
                                 what, n->stage, devs_str(g, place_of[n->stage], a, sizeof a),
                                 ir_node_label(g, (int32_t)v, lbl, sizeof lbl), devs_str(g, n->place, b, sizeof b),
                                 n->stage);
        }
    }
    for (int s = 0; s < S; s++)
        if (place_of[s] < 0)
            return base_error_at(e, file, line, col, "%s: stage %d has no forward or backward "
                                                     "work; check the PP annotation",
                                 what, s);
    return 0;
}

/* ---------------------------------------------------------------- the directive pass */

/* "group_size (micro-batches per group, default p) and chunks (v, ...)" */
static const char *options_list(const sched_option *o, char *buf, size_t n)
{
    size_t off = 0;
    buf[0] = 0;
    for (int i = 0; o[i].key && off + 1 < n; i++) {
        const char *sep = i == 0 ? "" : o[i + 1].key ? ", " : " and ";
        int w = snprintf(buf + off, n - off, "%s%s (%s)", sep, o[i].key, o[i].doc);
        if (w < 0) break;
        off += (size_t)w;
    }
    return buf;
}

/* The builder's options (its row's O(...) list) from the directive's document; b is NULL for
 * an order file, which takes none. */
static int read_options(const ir_directive *d, const sched_builder *b, sched_params *sp,
                        base_error *e)
{
    if (!d->doc || d->doc->kind != IR_DOC_MAP) return 0;
    for (int i = 0; i < d->doc->n; i++) {
        const ir_doc *key = d->doc->keys[i], *val = d->doc->items[i];
        const char *s = key->str ? key->str : "";
        if (ir_directive_takes(IR_DIR_SCHEDULE, s)) continue; /* op, name, file */
        bool ignored = false;
        for (int j = 0; ir_piper_ignored_keys[j]; j++) ignored |= !strcmp(s, ir_piper_ignored_keys[j]);
        if (ignored) continue; /* the loader warned already */
        const sched_option *o = b ? b->options : NULL;
        while (o && o->key && strcmp(o->key, s)) o++;
        if (o && o->key) {
            int64_t x;
            if (ir_doc_int(val, s, &x, e)) return -1;
            if (x < 1 || x > 1 << 20)
                return ir_doc_error(val, e, "directive %d (schedule): %s = %lld is out of range; "
                                            "give a positive number",
                                    d->index, s, (long long)x);
            *(int *)((char *)sp + o->offset) = (int)x;
            continue;
        }
        if (!b)
            return ir_doc_error(key, e, "directive %d (schedule): unknown option '%s'; a schedule "
                                        "file takes no options (the order is in the file)",
                                d->index, s);
        if (b->options[0].key) {
            char list[512];
            return ir_doc_error(key, e, "directive %d (schedule): unknown option '%s' for %s; it "
                                        "takes %s",
                                d->index, s, b->name, options_list(b->options, list, sizeof list));
        }
        return ir_doc_error(key, e, "directive %d (schedule): unknown option '%s'; %s takes no "
                                    "options (ranks, stages and micro-batches come from the "
                                    "placement, the PP annotation and split)",
                            d->index, s, b->name);
    }
    return 0;
}

/* Ranks of a builder schedule: p from the layout, and every stage on the devices the layout
 * says. rank_place[r] gets each rank's placement. */
static int check_layout(sched_ctx *x, const ir_directive *d, const sched_builder *b, int S,
                        const int *place_of, int *p_out, int **rank_place_out, base_error *e)
{
    const ir_dag *g = x->g;
    sched_layout l = b->layout;
    const char *name = b->name;
    int p;
    if (l == SCHED_LAYOUT_ONE) {
        p = S;
    } else if (l == SCHED_LAYOUT_V || l == SCHED_LAYOUT_MIRROR) {
        if (S % 2)
            return sched_dir_error(d, e, "%s puts two stages on every rank, in a V (rank r holds "
                                         "stages r and 2p-1-r), so it needs an even number of "
                                         "stages, but the PP annotation makes %d; annotate pp: "
                                         "2p for p ranks",
                                   name, S);
        p = S / 2;
    } else {
        /* interleaved: p is the number of device groups the stages run on */
        p = 0;
        for (int s = 0; s < S; s++) {
            bool seen = false;
            for (int q = 0; q < s && !seen; q++) seen = place_of[q] == place_of[s];
            p += !seen;
        }
        if (S % p)
            return sched_dir_error(d, e, "%s needs v chunks on each of the p ranks (S = v·p "
                                         "stages), but the %d stages run on %d device groups; "
                                         "place stage s on the devices of stage s mod p",
                                   name, S, p);
    }
    int *rank_place = base_arena_calloc(x->a, (size_t)p, sizeof *rank_place);
    for (int r = 0; r < p; r++) rank_place[r] = -1;
    for (int s = 0; s < S; s++) {
        int r = sched_layout_rank(l, p, s);
        if (rank_place[r] < 0) {
            rank_place[r] = place_of[s];
            continue;
        }
        if (rank_place[r] == place_of[s]) continue;
        int s0 = 0;
        while (sched_layout_rank(l, p, s0) != r) s0++;
        char a[96], bb[96];
        return sched_dir_error(d, e, "stage %d runs on devices %s, but %s over %d ranks puts it "
                                     "on rank %d with stage %d, which runs on %s; place stage %d "
                                     "on %s (%s)",
                               s, devs_str(g, place_of[s], a, sizeof a), name, p, r, s0,
                               devs_str(g, rank_place[r], bb, sizeof bb), s, bb,
                               sched_layout_rule(l));
    }
    for (int r = 0; r < p; r++)
        for (int q = 0; q < r; q++)
            if (rank_place[q] == rank_place[r]) {
                char a[96], several[128];
                snprintf(several, sizeof several, ", or use %s for several stages per rank",
                         sched_kind_name(SCHED_INTERLEAVED));
                int sq = 0, sr = 0;
                while (sched_layout_rank(l, p, sq) != q) sq++;
                while (sched_layout_rank(l, p, sr) != r) sr++;
                return sched_dir_error(d, e, "stages %d and %d both run on devices %s, but %s "
                                             "puts them on different ranks (%d and %d); give "
                                             "each rank its own devices%s",
                                       sq, sr, devs_str(g, rank_place[r], a, sizeof a), name, q, r,
                                       l == SCHED_LAYOUT_ONE ? several : "");
            }
    *p_out = p;
    *rank_place_out = rank_place;
    return 0;
}

/* One order directive per rank: one group per cell, each filter {PP, PASS, MB}. */
static ir_directive order_of_row(sched_ctx *x, const ir_directive *d, const sched_row *row)
{
    ir_directive od;
    memset(&od, 0, sizeof od);
    od.op = IR_DIR_ORDER;
    od.index = d->index;
    od.file = d->file;
    od.line = d->line;
    od.col = d->col;
    od.ngroups = row->n;
    od.group_nfilters = base_arena_calloc(x->a, (size_t)row->n, sizeof *od.group_nfilters);
    od.groups = base_arena_calloc(x->a, (size_t)row->n, sizeof *od.groups);
    for (int k = 0; k < row->n; k++) {
        const sched_cell *c = &row->cells[k];
        od.group_nfilters[k] = c->n;
        od.groups[k] = base_arena_calloc(x->a, (size_t)c->n, sizeof **od.groups);
        for (int i = 0; i < c->n; i++) {
            ir_filter *f = &od.groups[k][i];
            f->n = 3;
            f->m = base_arena_calloc(x->a, 3, sizeof *f->m);
            f->m[0] = (ir_tag_match){.tag = IR_TAG_PP, .value = c->a[i].stage};
            f->m[1] = (ir_tag_match){.tag = IR_TAG_PASS, .value = c->a[i].pass};
            f->m[2] = (ir_tag_match){.tag = IR_TAG_MB, .value = c->a[i].mb};
            f->line = d->line;
            f->col = d->col;
        }
    }
    return od;
}

void sched_expanded_add(sched_compilation *c, const ir_directive *d)
{
    size_t cap = c->cap_expanded;
    c->expanded = base_arena_grow(&c->arena, c->expanded, &cap, (size_t)c->nexpanded + 1,
                                  sizeof *c->expanded);
    c->cap_expanded = cap;
    c->expanded[c->nexpanded++] = *d;
}

/* The builder a schedule directive names; NULL for an order file. The loader keeps the name as
 * written: which names exist is this table's to say. */
static int resolve_builder(const ir_directive *d, const sched_builder **out, base_error *e)
{
    *out = NULL;
    if (d->schedule_file && !d->schedule) return 0;
    if (!d->schedule) {
        const char *others[SCHED_NKINDS];
        int n = 0;
        for (int k = 0; k < SCHED_NKINDS; k++)
            if (k != SCHED_1F1B) others[n++] = builders[k].name;
        others[n] = NULL;
        char list[512];
        return base_error_at(e, d->file, d->line, d->col,
                             "directive %d (schedule) has neither 'name' nor 'file'; add name: %s "
                             "(or %s) or file: <per-rank order file>",
                             d->index, builders[SCHED_1F1B].name, ir_join_names(list, sizeof list, others));
    }
    int k = sched_kind_of(d->schedule);
    if (k >= 0) {
        *out = &builders[k];
        return 0;
    }
    char list[512], msg[1024];
    ir_join_names(list, sizeof list, sched_kind_names);
    const char *sg = ir_suggest(d->schedule, sched_kind_names);
    if (sg)
        snprintf(msg, sizeof msg, "unknown schedule '%s'; did you mean '%s'? (known: %s, or file: "
                                  "<order file>)",
                 d->schedule, sg, list);
    else
        snprintf(msg, sizeof msg, "unknown schedule '%s'; use one of %s, or file: <order file>",
                 d->schedule, list);
    const ir_doc *at = d->doc && d->doc->kind == IR_DOC_MAP ? ir_doc_get(d->doc, "name") : NULL;
    if (at) return ir_doc_error(at, e, "directive %d (schedule): %s", d->index, msg);
    return sched_dir_error(d, e, "%s", msg);
}

int sched_dir_schedule(sched_ctx *x, const ir_directive *d, base_error *e)
{
    ir_dag *g = x->g;
    x->order_seen = true;
    const sched_builder *b;
    if (resolve_builder(d, &b, e)) return -1;
    int S = program_stages(x->prog);
    const char *what = b ? b->name : "the schedule file";
    if (S < 1)
        return sched_dir_error(d, e, "a pipeline schedule needs pipeline stages, but the program "
                                     "annotates none; add annotations: {pp: N} and place each "
                                     "stage");
    int m = g->num_microbatches > 0 ? (int)g->num_microbatches : 1;
    char where[512], dname[64];
    sched_dir_where(d, where, sizeof where);
    snprintf(dname, sizeof dname, "directive %d (schedule)", d->index);
    sched_params sp = {0};
    if (read_options(d, b, &sp, e)) return -1;
    /* DualPipe: the mirror pass (dualpipe_mirror.c) made stages p..2p-1 for micro-batches
     * m/2..m-1; the builder numbers each direction's micro-batches from 0 */
    int mb_per_stage = m, mirror_shift = 0;
    if (b && (b->flags & SCHED_NEEDS_MIRROR)) {
        if (!x->mirror_p)
            return sched_dir_error(d, e, "%s must be the first order or schedule directive (its "
                                         "second pipeline is made before any order); move it up",
                                   b->name);
        S = 2 * x->mirror_p;
        mb_per_stage = m / 2;
        mirror_shift = m / 2;
    }
    int *place_of = base_arena_calloc(x->a, (size_t)S, sizeof *place_of);
    if (stage_places(g, S, d->file, d->line, d->col, dname, place_of, e)) return -1;

    sched_table t;
    memset(&t, 0, sizeof t);
    int rc = 0;
    int *chunk_of = base_arena_calloc(x->a, (size_t)S, sizeof *chunk_of);
    if (b) {
        int p = 0, *rank_place = NULL;
        if (check_layout(x, d, b, S, place_of, &p, &rank_place, e)) return -1;
        if (sp.v && sp.v * p != S)
            return sched_dir_error(d, e, "chunks = %d, but the %d stages on %d ranks make %d "
                                         "chunks per rank; drop chunks or change the PP "
                                         "annotation to pp: %d",
                                   sp.v, S, p, S / p, sp.v * p);
        sp.p = p;
        sp.m = m;
        sp.v = S / p;
        char why[1024];
        memset(&t, 0, sizeof t);
        if (b->build(&sp, &t, why, sizeof why))
            return sched_dir_error(d, e, "%s", why);
        for (int s = 0; s < S; s++) chunk_of[s] = sched_layout_chunk(b->layout, p, s);
        if (sched_table_validate(&t, NULL, S, mb_per_stage, e)) {
            base_error_prefix(e, "%s: the %s builder made an invalid order (a bug in piper): ",
                              where, what);
            rc = -1;
        }
        for (int r = 0; r < t.nranks && mirror_shift; r++)
            for (int c = 0; c < t.rows[r].n; c++)
                for (int i = 0; i < t.rows[r].cells[c].n; i++)
                    if (t.rows[r].cells[c].a[i].stage >= p) t.rows[r].cells[c].a[i].mb += mirror_shift;
    } else {
        if (sched_order_csv_read_file(d->schedule_file, &t, e)) return -1;
        if (sched_table_validate(&t, d->schedule_file, S, m, e)) {
            base_error_prefix(e, "%s: ", where);
            rc = -1;
        }
        /* every row on one device group, and different rows on different groups */
        int *row_place = base_xmalloc((size_t)t.nranks * sizeof *row_place);
        for (int r = 0; r < t.nranks && !rc; r++) {
            row_place[r] = -1;
            int lowest = -1;
            for (int c = 0; c < t.rows[r].n && !rc; c++)
                for (int i = 0; i < t.rows[r].cells[c].n && !rc; i++) {
                    int s = t.rows[r].cells[c].a[i].stage;
                    if (row_place[r] < 0) {
                        row_place[r] = place_of[s];
                        lowest = s;
                    } else if (place_of[s] != row_place[r]) {
                        char a[96], bb[96];
                        rc = base_error_at(e, d->schedule_file, t.rows[r].line, t.rows[r].cells[c].text_col,
                                           "rank %d, column %d: stage %d runs on devices %s but "
                                           "stage %d of the same row runs on %s; a row is one "
                                           "rank: put each stage's actions on the row of its "
                                           "devices",
                                           r, t.rows[r].cells[c].col, s, devs_str(g, place_of[s], a, sizeof a),
                                           lowest, devs_str(g, row_place[r], bb, sizeof bb));
                    }
                }
            for (int q = 0; q < r && !rc; q++)
                if (row_place[q] == row_place[r]) {
                    char a[96];
                    rc = base_error_at(e, d->schedule_file, t.rows[r].line, 1,
                                       "rank %d: its stages run on devices %s, like those of "
                                       "rank %d; one row per device group (merge the two rows)",
                                       r, devs_str(g, row_place[r], a, sizeof a), q);
                }
        }
        free(row_place);
        /* chunk: the stage's position among its rank's stages */
        for (int s = 0; s < S; s++) {
            chunk_of[s] = 0;
            for (int q = 0; q < s; q++) chunk_of[s] += place_of[q] == place_of[s];
        }
    }
    bool mirror_marked = false;
    if (!rc) {
        for (size_t v = 0; v < g->nnodes; v++) {
            ir_node *n = &g->nodes[v];
            if (!n->dead && n->stage >= 0 && n->stage < S) n->chunk = chunk_of[n->stage];
        }
        for (int r = 0; r < t.nranks && !rc; r++) {
            if (t.rows[r].n < 2) continue; /* a single action needs no order */
            ir_directive od = order_of_row(x, d, &t.rows[r]);
            /* the expanded program's first order makes DualPipe's mirror, as the schedule did */
            od.mirror = b && (b->flags & SCHED_NEEDS_MIRROR) && !mirror_marked;
            mirror_marked |= od.mirror;
            if (sched_dir_order(x, &od, e)) {
                base_error_prefix(e, "%s: the order %s gives rank %d failed: ", where, what, r);
                rc = -1;
                break;
            }
            sched_expanded_add(x->c, &od);
        }
    }
    sched_table_free(&t);
    return rc;
}

/* ---------------------------------------------------------------- the table of a plan */

typedef struct pair_rec {
    sched_action a, b;
} pair_rec;

/* A concrete action named by an order filter: PP, PASS (F/B/BI/BW) and MB all given. */
static bool filter_action(const ir_filter *f, sched_action *out)
{
    int have = 0;
    for (int i = 0; i < f->n; i++) {
        const ir_tag_match *m = &f->m[i];
        if (m->any || m->none) return false;
        if (m->tag == IR_TAG_PP) out->stage = (int32_t)m->value, have |= 1;
        else if (m->tag == IR_TAG_MB) out->mb = (int32_t)m->value, have |= 2;
        else if (m->tag == IR_TAG_PASS) {
            if (m->value != PLAN_PASS_F && m->value != PLAN_PASS_B && m->value != PLAN_PASS_BI &&
                m->value != PLAN_PASS_BW)
                return false;
            out->pass = (uint8_t)m->value;
            have |= 4;
        } else if (m->tag != IR_TAG_CHUNK) {
            return false;
        }
    }
    return have == 7;
}

int sched_table_from_plan(const sched_compilation *c, sched_table *t, base_error *e)
{
    memset(t, 0, sizeof *t);
    const ir_program *prog = &c->prog;
    const ir_dag *g = &c->dag;
    int S = program_stages(prog);
    if (S < 1)
        return base_error_at(e, prog->file, 0, 0,
                             "the program has no pipeline stages (annotations.pp), so there is "
                             "no per-rank order to write; --emit-order is for pipelined programs");
    if (c->plan.ndevices < 1)
        return base_errorf(e, "no plan: compile the program before writing its order");
    int M = g->num_microbatches > 0 ? (int)g->num_microbatches : 1;
    /* DualPipe's mirror (dualpipe_mirror.c) doubled the stages, micro-batches m/2..m-1 on the
     * copies; the order numbers each direction's micro-batches from 0, as the builder does */
    int S_dag = S, shift = 0;
    for (size_t v = 0; v < g->nnodes; v++)
        if (is_stage_work(&g->nodes[v]) && g->nodes[v].stage + 1 > S_dag) S_dag = g->nodes[v].stage + 1;
    if (S_dag == 2 * S) {
        shift = M / 2;
        S = S_dag;
    }
    int *place_of = base_xmalloc((size_t)S * sizeof *place_of);
    if (stage_places(g, S, prog->file, 0, 0, "--emit-order", place_of, e)) {
        free(place_of);
        return -1;
    }
    /* ranks: distinct device groups, numbered by their lowest stage */
    int *rank_of = base_xmalloc((size_t)S * sizeof *rank_of);
    int *rank_place = base_xmalloc((size_t)S * sizeof *rank_place);
    int p = 0;
    for (int s = 0; s < S; s++) {
        rank_of[s] = -1;
        for (int q = 0; q < s && rank_of[s] < 0; q++)
            if (place_of[q] == place_of[s]) rank_of[s] = rank_of[q];
        if (rank_of[s] < 0) {
            rank_place[p] = place_of[s];
            rank_of[s] = p++;
        }
    }
    /* overlapped pairs: order groups that named exactly two actions */
    BASE_VEC(pair_rec) pairs = {0};
    for (int i = 0; i < c->nexpanded; i++) {
        const ir_directive *d = &c->expanded[i];
        if (d->op != IR_DIR_ORDER) continue;
        for (int k = 0; k < d->ngroups; k++) {
            pair_rec pr;
            if (d->group_nfilters[k] == 2 && filter_action(&d->groups[k][0], &pr.a) &&
                filter_action(&d->groups[k][1], &pr.b))
                BASE_VEC_PUSH(pairs, pr);
        }
    }
    size_t nkeys = (size_t)S * (size_t)M * 4;
    uint8_t *seen = base_xcalloc(nkeys, 1);
    sched_table_init(t, p);
    BASE_VEC(sched_action) seq = {0};
    for (int r = 0; r < p; r++) {
        const ir_place *pl = &g->places[rank_place[r]];
        const plan_list *L = plan_dev_list(&c->plan, pl->devs[0]);
        seq.n = 0;
        for (int i = 0; i < L->n; i++) {
            const plan_instr *in = &L->ins[i];
            if (in->op != PLAN_COMPUTE || in->stage < 0 || in->stage >= S || in->mb < 0 || in->mb >= M)
                continue;
            if (in->pass != PLAN_PASS_F && in->pass != PLAN_PASS_B && in->pass != PLAN_PASS_BI &&
                in->pass != PLAN_PASS_BW)
                continue;
            int q = in->pass == PLAN_PASS_F ? 0 : in->pass == PLAN_PASS_B ? 1 : in->pass == PLAN_PASS_BI ? 2 : 3;
            size_t key = ((size_t)in->stage * (size_t)M + (size_t)in->mb) * 4 + (size_t)q;
            if (seen[key]) continue;
            seen[key] = 1;
            BASE_VEC_PUSH(seq, ((sched_action){in->stage, in->mb, in->pass}));
        }
        uint8_t *used = base_xcalloc(seq.n ? seq.n : 1, 1);
        for (size_t i = 0; i < seq.n; i++) {
            if (used[i]) continue;
            used[i] = 1;
            const pair_rec *pr = NULL;
            for (size_t q = 0; q < pairs.n && !pr; q++)
                if (action_eq(&pairs.v[q].a, &seq.v[i]) || action_eq(&pairs.v[q].b, &seq.v[i])) pr = &pairs.v[q];
            if (!pr) {
                sched_table_push(t, r, seq.v[i].stage, (plan_pass)seq.v[i].pass,
                                 seq.v[i].mb - (seq.v[i].stage >= S / 2 ? shift : 0));
                continue;
            }
            const sched_action *other = action_eq(&pr->a, &seq.v[i]) ? &pr->b : &pr->a;
            for (size_t j = i + 1; j < seq.n; j++)
                if (!used[j] && action_eq(&seq.v[j], other)) used[j] = 1;
            sched_action a = pr->a, b = pr->b;
            if (a.stage >= S / 2) a.mb -= shift;
            if (b.stage >= S / 2) b.mb -= shift;
            sched_table_push_pair(t, r, a, b);
        }
        free(used);
    }
    free(seq.v);
    free(pairs.v);
    free(seen);
    free(place_of);
    free(rank_of);
    free(rank_place);
    return 0;
}

int sched_write_order_csv(const sched_compilation *c, FILE *f, base_error *e)
{
    sched_table t;
    if (sched_table_from_plan(c, &t, e)) return -1;
    sched_order_csv_write(&t, f);
    sched_table_free(&t);
    return 0;
}
