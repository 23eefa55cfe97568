/* order_csv.c — per-rank order files in PyTorch's action notation (torch.distributed.pipelining's
 * _dump_csv/_load_csv): one CSV row per rank, one action per cell — `0F3` (forward of stage 0,
 * micro-batch 3), `2I1` (input backward), `5W0` (weight backward), `1B2` (full backward),
 * `(0F7;7B3)OVERLAP_F_B` (an overlapped pair) — and an empty cell for an idle slot. So an order
 * PyTorch prints, or one written by hand in a spreadsheet, is a piper schedule, and every piper
 * schedule can be handed to PyTorch. Reading checks syntax only; sched_table_validate checks
 * the counts and dependencies. */
#include "schedule.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* Communication and FSDP actions of PyTorch's "compute_comms" format: piper derives its own
 * sends, receives and gradient reductions, so these cells are skipped. Longest first, so that
 * WAIT_SEND_F is not read as W. */
static const char *const skipped_types[] = {"WAIT_REDUCE_GRAD", "WAIT_SEND_F", "WAIT_SEND_B",
                                            "REDUCE_GRAD",      "UNSHARD",     "RESHARD",
                                            "SEND_F",           "RECV_F",      "SEND_B",
                                            "RECV_B",           NULL};

typedef struct reader {
    const char *name;
    int line, col;      /* of the cell being read */
    int rank, cell;     /* 0-based rank, 1-based column */
    base_error *e;
} reader;

static int bad(const reader *rd, const char *cell, const char *why)
{
    return base_error_at(rd->e, rd->name, rd->line, rd->col,
                         "rank %d, column %d: cannot read '%s': %s; an action is "
                         "{stage}{F|I|W|B}{micro-batch} such as 0F3 or 2I1, an overlapped pair "
                         "(0F7;7B3)OVERLAP_F_B, an idle slot an empty cell",
                         rd->rank, rd->cell, cell, why);
}

static bool read_int(const char **s, const char *end, int32_t *out)
{
    const char *p = *s;
    int64_t v = 0;
    if (p >= end || !isdigit((unsigned char)*p)) return false;
    while (p < end && isdigit((unsigned char)*p)) {
        v = v * 10 + (*p - '0');
        if (v > INT32_MAX) return false;
        p++;
    }
    *out = (int32_t)v;
    *s = p;
    return true;
}

/* One action "0F3" in [s, end). Returns 1 for a compute action, 0 for a skipped one, -1 on a
 * syntax error (reported). */
static int read_action(const reader *rd, const char *cell, const char *s, const char *end,
                       sched_action *a)
{
    if (!read_int(&s, end, &a->stage)) return bad(rd, cell, "it does not start with a stage number");
    for (int i = 0; skipped_types[i]; i++) {
        size_t n = strlen(skipped_types[i]);
        if ((size_t)(end - s) >= n && !strncmp(s, skipped_types[i], n)) {
            s += n;
            int32_t mb;
            if (s < end && !read_int(&s, end, &mb)) return bad(rd, cell, "junk after the action");
            if (s != end) return bad(rd, cell, "junk after the action");
            return 0;
        }
    }
    if (s >= end) return bad(rd, cell, "the action type is missing");
    switch (*s) {
    case 'F': a->pass = PLAN_PASS_F; break;
    case 'B': a->pass = PLAN_PASS_B; break;
    case 'I': a->pass = PLAN_PASS_BI; break;
    case 'W': a->pass = PLAN_PASS_BW; break;
    default: return bad(rd, cell, "unknown action type (F, I, W or B)");
    }
    s++;
    if (!read_int(&s, end, &a->mb)) return bad(rd, cell, "the micro-batch number is missing");
    if (s != end) return bad(rd, cell, "junk after the micro-batch number");
    return 1;
}

static int read_cell(const reader *rd, const char *cell, sched_table *t)
{
    const char *s = cell, *end = cell + strlen(cell);
    if (*s != '(') {
        sched_action a;
        int k = read_action(rd, cell, s, end, &a);
        if (k <= 0) return k;
        sched_table_push(t, rd->rank, a.stage, (plan_pass)a.pass, a.mb);
    } else {
        const char *close = strchr(s, ')');
        if (!close) return bad(rd, cell, "'(' without ')'");
        if (strcmp(close + 1, "OVERLAP_F_B") != 0)
            return bad(rd, cell, "a parenthesised group must end in OVERLAP_F_B");
        sched_action a[2];
        int n = 0;
        const char *p = s + 1;
        while (p <= close) {
            const char *q = p;
            while (q < close && *q != ';') q++;
            const char *b = p, *z = q;
            while (b < z && isspace((unsigned char)*b)) b++;
            while (z > b && isspace((unsigned char)z[-1])) z--;
            if (n == 2) return bad(rd, cell, "an overlapped pair holds exactly two actions");
            int k = read_action(rd, cell, b, z, &a[n]);
            if (k < 0) return -1;
            if (k == 0) return bad(rd, cell, "an overlapped pair holds compute actions only");
            n++;
            p = q + 1;
        }
        if (n != 2) return bad(rd, cell, "an overlapped pair holds exactly two actions");
        sched_table_push_pair(t, rd->rank, a[0], a[1]);
    }
    sched_row *row = &t->rows[rd->rank];
    row->cells[row->n - 1].col = rd->cell;
    row->cells[row->n - 1].text_col = rd->col;
    return 0;
}

int sched_order_csv_read(const char *name, const char *text, size_t len, sched_table *t,
                         base_error *e)
{
    memset(t, 0, sizeof *t);
    /* a NUL byte would end a cell early and hide the rest of it from the checks, as in every
     * other reader it is refused where it stands */
    const char *nul = len ? memchr(text, 0, len) : NULL;
    if (nul) {
        int ln = 1, col = 1;
        for (const char *c = text; c < nul; c++) {
            if (*c == '\n') ln++, col = 1;
            else col++;
        }
        return base_error_at(e, name, ln, col, "the text contains a NUL character; remove it (an "
                                               "order file is text: one CSV row per rank)");
    }
    /* rows: every line that is not a comment; trailing empty lines are not ranks */
    BASE_VEC(size_t) starts = {0};
    BASE_VEC(int) lines = {0};
    size_t i = 0;
    int line = 1;
    while (i < len) {
        size_t j = i;
        while (j < len && text[j] != '\n') j++;
        if (text[i] != '#') {
            BASE_VEC_PUSH(starts, i);
            BASE_VEC_PUSH(lines, line);
        }
        i = j + 1;
        line++;
    }
    size_t nrows = starts.n;
    while (nrows > 0) {
        size_t a = starts.v[nrows - 1], b = a;
        while (b < len && text[b] != '\n') b++;
        bool blank = true;
        for (size_t q = a; q < b; q++) blank &= isspace((unsigned char)text[q]) != 0;
        if (!blank) break;
        nrows--;
    }
    if (nrows == 0) {
        free(starts.v);
        free(lines.v);
        return base_error_at(e, name, 1, 1, "the order file has no rows; write one CSV row per "
                                            "rank, such as 0F0,0F1,,0B0,,0B1");
    }
    sched_table_init(t, (int)nrows);
    int rc = 0;
    char *cell = NULL;
    size_t cell_cap = 0;
    for (size_t r = 0; r < nrows && !rc; r++) {
        t->rows[r].line = lines.v[r];
        size_t p = starts.v[r], end = p;
        while (end < len && text[end] != '\n') end++;
        if (end > p && text[end - 1] == '\r') end--;
        reader rd = {name, lines.v[r], 1, (int)r, 0, e};
        while (p <= end && !rc) {
            rd.cell++;
            rd.col = (int)(p - starts.v[r]) + 1;
            /* one cell: quoted ("..." with "" for a quote) or up to the next comma */
            size_t n = 0;
            size_t q = p;
            while (q < end && (text[q] == ' ' || text[q] == '\t')) q++;
            if (q < end && text[q] == '"') {
                q++;
                for (;;) {
                    if (q >= end) {
                        rc = base_error_at(e, name, rd.line, rd.col,
                                           "rank %d, column %d: a quoted cell is not closed; add "
                                           "the closing \"",
                                           rd.rank, rd.cell);
                        break;
                    }
                    if (text[q] == '"' && q + 1 < end && text[q + 1] == '"') q++;
                    else if (text[q] == '"') break;
                    if (n + 2 > cell_cap) cell = base_xrealloc(cell, cell_cap = 2 * (n + 2) + 32);
                    cell[n++] = text[q++];
                }
                if (rc) break;
                q++;
                while (q < end && text[q] != ',') {
                    if (!isspace((unsigned char)text[q])) {
                        rc = base_error_at(e, name, rd.line, rd.col,
                                           "rank %d, column %d: text after a quoted cell; put "
                                           "a comma after the closing quote",
                                           rd.rank, rd.cell);
                        break;
                    }
                    q++;
                }
            } else {
                while (q < end && text[q] != ',') {
                    if (n + 2 > cell_cap) cell = base_xrealloc(cell, cell_cap = 2 * (n + 2) + 32);
                    cell[n++] = text[q++];
                }
            }
            if (rc) break;
            while (n > 0 && isspace((unsigned char)cell[n - 1])) n--;
            if (n) {
                cell[n] = 0;
                if (read_cell(&rd, cell, t)) rc = -1;
            }
            p = q + 1;
        }
    }
    free(cell);
    free(starts.v);
    free(lines.v);
    if (rc) sched_table_free(t);
    return rc;
}

int sched_order_csv_read_file(const char *path, sched_table *t, base_error *e)
{
    base_buf b = {0};
    if (base_read_file(path, &b, e)) return -1;
    int rc = sched_order_csv_read(path, b.s ? b.s : "", b.n, t, e);
    base_buf_free(&b);
    return rc;
}

void sched_order_csv_write(const sched_table *t, FILE *f)
{
    for (int r = 0; r < t->nranks; r++) {
        for (int k = 0; k < t->rows[r].n; k++) {
            char buf[64];
            fprintf(f, "%s%s", k ? "," : "", sched_cell_str(&t->rows[r].cells[k], buf, sizeof buf));
        }
        /* a rank without actions is one empty quoted cell: a blank line at the end of a file is
         * not a rank, so the rank would be lost when the text is read back */
        if (t->rows[r].n == 0) fputs("\"\"", f);
        fputc('\n', f);
    }
}
