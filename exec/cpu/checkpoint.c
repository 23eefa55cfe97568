/* checkpoint.c — piper-exec's sharded checkpoints (--save DIR, --resume DIR, --keep N; format in
 * exec/README.md). Every save goes to a new step directory, DIR/step-<K>.partial, whose files
 * are fsynced (base_out); rank 0 then moves it to DIR/step-<K> in one rename and only then
 * replaces DIR/latest, so a save killed at any point leaves the previous checkpoint, the one
 * latest names, whole. Every rank writes the elements its optimizer steps update (its ZeRO piece of
 * each region it updates; a data-parallel replica other than the first writes nothing) as runs of
 * consecutive global element indices of named tensors, with their AdamW moments; rank 0 then
 * writes the manifest, which names every shard with its size and checksum and so marks the
 * checkpoint complete. Because records are keyed by tensor name and global element index, not by
 * device, a checkpoint loads under any strategy of the same model: each rank reads every shard
 * and keeps the elements its own storage holds, and fails, naming the first one, when an element
 * it needs is missing. The training's other state is the step: data and dropout are pure
 * functions of (seed, step, ...), and AdamW's bias correction counts steps. */
#define _GNU_SOURCE /* renameat2's RENAME_EXCHANGE: a re-saved step replaces its directory atomically */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cpu_exec.h"

#define SHARD_MAGIC "PIPERCKS"
#define SHARD_VERSION 2u
#define MANIFEST "manifest.txt"
#define MANIFEST_HEAD "piper-checkpoint 2"
#define STEP_FMT "step-%06lld"
#define PARTIAL ".partial"
/* the fields a shard's header repeats from the manifest, so that an edited manifest is caught */
static const char *const HEADER_KEYS[] = {"step", "seed", "optimizer", "data", "model", "tensors"};

/* ---------------------------------------------------------------- small helpers */

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ULL;
    }
    return h;
}
#define FNV0 1469598103934665603ULL

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = base_xcalloc(n, 1);
    memcpy(d, s, n);
    return d;
}

/* The model line of the manifest: everything a parameter's shape or meaning depends on. */
static void model_line(const plan_model *m, char *buf, size_t n)
{
    snprintf(buf, n,
             "name=%s family=%s layers=%lld hidden=%lld heads=%lld kv_heads=%lld head_dim=%lld "
             "ffn=%lld experts=%lld expert_ffn=%lld top_k=%lld vocab=%lld seq=%lld "
             "tied_embeddings=%s qk_norm=%s",
             m->name ? m->name : "?", m->family ? m->family : "?", (long long)m->layers,
             (long long)m->hidden, (long long)m->heads, (long long)m->kv_heads,
             (long long)m->head_dim, (long long)m->ffn, (long long)m->experts,
             (long long)m->expert_ffn, (long long)m->top_k, (long long)m->vocab, (long long)m->seq,
             m->tied_embeddings ? "true" : "false", m->qk_norm ? "true" : "false");
}

/* The first key=value of `a` that differs from `b`, for a message. */
static void first_difference(const char *a, const char *b, char *out, size_t n)
{
    char ca[1024], cb[1024];
    snprintf(ca, sizeof ca, "%s", a);
    snprintf(cb, sizeof cb, "%s", b);
    char *sa = NULL, *sb = NULL;
    char *ta = strtok_r(ca, " ", &sa), *tb = strtok_r(cb, " ", &sb);
    while (ta && tb && strcmp(ta, tb) == 0) {
        ta = strtok_r(NULL, " ", &sa);
        tb = strtok_r(NULL, " ", &sb);
    }
    snprintf(out, n, "the checkpoint has %s where the plan has %s", ta ? ta : "(nothing)", tb ? tb : "(nothing)");
}

/* The model's tensors, whatever the strategy: every parameter of every region of the plan, whole
 * (tp = ep = 1), as "name d0 d1 d2" lines; their count and FNV-1a digest identify the list. */
static int tensor_list(const plan_set *p, int64_t *count, uint64_t *digest, base_error *e)
{
    exec_cfg cfg;
    exec_shard sh;
    if (exec_cfg_from_plan(&p->model, 0, &cfg, e) || exec_shard_init(&cfg, 1, 0, 1, 0, &sh, e)) return -1;
    *count = 0;
    *digest = FNV0;
    for (int r = 0; r < p->nregions; r++) {
        int layer;
        exec_region_kind kind;
        exec_param par[EXEC_MAX_REGION_PARAMS];
        int n;
        if (exec_parse_region(p->regions[r], &layer, &kind) || (n = exec_region_params(&cfg, &sh, kind, par, e)) < 0)
            return base_errorf(e, "region %s: cannot list its tensors for the checkpoint", p->regions[r]);
        for (int t = 0; t < n; t++) {
            char line[256];
            int L = snprintf(line, sizeof line, "%s.%s %lld %lld %lld\n", p->regions[r], par[t].name,
                             (long long)par[t].dim[0], (long long)par[t].dim[1], (long long)par[t].dim[2]);
            *digest = fnv1a(*digest, line, (size_t)L);
            ++*count;
        }
    }
    return 0;
}

/* The lines a shard's header and the manifest share (HEADER_KEYS, in that order). */
static int header_text(const plan_set *p, const exec_ckpt_meta *meta, char *buf, size_t n, base_error *e)
{
    char ml[1024];
    int64_t nt;
    uint64_t dg;
    if (tensor_list(p, &nt, &dg, e)) return -1;
    model_line(&p->model, ml, sizeof ml);
    int L = snprintf(buf, n, "step %lld\nseed %llu\noptimizer %s\ndata %s\nmodel %s\ntensors %lld %016llx\n",
                     (long long)meta->step, (unsigned long long)meta->seed, meta->optimizer, meta->data, ml,
                     (long long)nt, (unsigned long long)dg);
    if (L < 0 || (size_t)L >= n) return base_errorf(e, "the checkpoint's header does not fit %zu bytes", n);
    return 0;
}

/* Global flat index of element i of a shard's block of tensor P. */
static int64_t global_index(const exec_param *P, int64_t i)
{
    int64_t i2 = i % P->len[2], i1 = i / P->len[2] % P->len[1], i0 = i / P->len[2] / P->len[1];
    return ((P->off[0] + i0) * P->dim[1] + P->off[1] + i1) * P->dim[2] + P->off[2] + i2;
}

/* The block element holding global index g, or -1 when it lies outside the block. */
static int64_t local_index(const exec_param *P, int64_t g)
{
    int64_t i2 = g % P->dim[2], i1 = g / P->dim[2] % P->dim[1], i0 = g / P->dim[2] / P->dim[1];
    i0 -= P->off[0], i1 -= P->off[1], i2 -= P->off[2];
    if (i0 < 0 || i0 >= P->len[0] || i1 < 0 || i1 >= P->len[1] || i2 < 0 || i2 >= P->len[2]) return -1;
    return (i0 * P->len[1] + i1) * P->len[2] + i2;
}

/* element k of a record's values (records are not aligned in the file: copied out) */
static double get(const char *p, size_t es, int64_t k)
{
    if (es == 4) {
        float f;
        memcpy(&f, p + (size_t)k * 4, 4);
        return (double)f;
    }
    double d;
    memcpy(&d, p + (size_t)k * 8, 8);
    return d;
}

static void put(char *p, size_t es, int64_t k, double v)
{
    if (es == 4)
        ((float *)p)[k] = (float)v;
    else
        ((double *)p)[k] = v;
}

/* ---------------------------------------------------------------- writing */

typedef struct out {
    FILE *f;
    uint64_t sum, bytes;
    bool bad;
} out;

static void emit(out *o, const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, o->f) != n) o->bad = true;
    o->sum = fnv1a(o->sum, p, n);
    o->bytes += n;
}

/* One record: tensor `name` (global shape dim), global elements [g0, g0 + n), the values of
 * parameters, first and second moments at storage elements k[0..n) (moments relative to lo). */
static void emit_run(out *o, const char *name, const exec_param *P, int64_t g0, int64_t n,
                     const char *par, const char *m, const char *v, const int64_t *k, int64_t lo,
                     size_t es)
{
    uint32_t len = (uint32_t)strlen(name);
    uint64_t hdr[5] = {(uint64_t)P->dim[0], (uint64_t)P->dim[1], (uint64_t)P->dim[2], (uint64_t)g0, (uint64_t)n};
    emit(o, &len, sizeof len);
    emit(o, name, len);
    emit(o, hdr, sizeof hdr);
    for (int which = 0; which < 3; which++)
        for (int64_t j = 0; j < n; j++) {
            const char *src = which == 0 ? par + k[j] * es : (which == 1 ? m : v) + (k[j] - lo) * es;
            emit(o, src, es);
        }
}

int exec_cpu_save_shard(exec_cpu *c, const char *dir, const exec_ckpt_meta *meta, uint64_t *bytes,
                        uint64_t *sum, base_error *e)
{
    char path[4096], head[4096 + 1536];
    snprintf(path, sizeof path, "%s/shard.dev%d.bin", dir, c->dev);
    if (header_text(c->p, meta, head, sizeof head, e)) return -1;
    base_out file;
    if (base_out_open(&file, path, "the checkpoint shard", e)) return -1;
    out o = {file.f, FNV0, 0, false};
    const size_t es = c->es;
    uint32_t h32[4] = {SHARD_VERSION, (uint32_t)es, (uint32_t)c->dev, (uint32_t)strlen(head)};
    emit(&o, SHARD_MAGIC, 8);
    emit(&o, h32, sizeof h32);
    emit(&o, head, strlen(head));
    for (int r = 0; r < c->bd.nreg; r++) {
        const exec_region *R = &c->bd.reg[r];
        /* a replica other than the first holds the same values as the first */
        if (!R->upd || R->norm_skip || R->param_buf < 0 || R->opt_buf < 0) continue;
        const char *par = cpu_region_params(c, R, c->bd.buf[R->param_buf].p), *opt = c->bd.buf[R->opt_buf].p;
        if (!par || !opt) continue; /* never allocated: the plan has not run a step */
        const int64_t lo = R->upd_lo, hi = R->upd_hi;
        const char *m = opt, *v = opt + (size_t)(hi - lo) * es;
        /* the tied token table's copy (R->copy) is written by the embedding's side */
        for (int t = 0; t < R->npar; t++) {
            const exec_param *P = &R->par[t];
            int64_t a = P->offset > lo ? P->offset : lo;
            int64_t b = P->offset + P->count < hi ? P->offset + P->count : hi;
            if (a >= b) continue;
            char name[160];
            snprintf(name, sizeof name, "%s.%s", R->name, P->name);
            int64_t *k = base_xcalloc((size_t)(b - a), sizeof *k);
            int64_t n = 0, g0 = -1;
            for (int64_t s = a; s < b; s++) {
                int64_t g = global_index(P, s - P->offset);
                if (n && g != g0 + n) {
                    emit_run(&o, name, P, g0, n, par, m, v, k, lo, es);
                    n = 0;
                }
                if (!n) g0 = g;
                k[n++] = s;
            }
            if (n) emit_run(&o, name, P, g0, n, par, m, v, k, lo, es);
            free(k);
        }
    }
    if (base_out_commit(&file, e)) return -1; /* names the path and the errno of a failed write */
    *bytes = o.bytes;
    *sum = o.sum;
    return 0;
}

int exec_ckpt_write_manifest(const char *dir, const plan_set *p, plan_dtype dt,
                             const exec_ckpt_meta *meta, int nshards, const uint64_t *bytes,
                             const uint64_t *sums, base_error *e)
{
    char path[4096], head[4096 + 1536];
    snprintf(path, sizeof path, "%s/%s", dir, MANIFEST);
    if (header_text(p, meta, head, sizeof head, e)) return -1;
    base_out o;
    if (base_out_open(&o, path, "the checkpoint manifest", e)) return -1;
    fprintf(o.f, "%s\n%sdtype %s\nshards %d\n", MANIFEST_HEAD, head, plan_dtype_name(dt), nshards);
    for (int d = 0; d < nshards; d++)
        fprintf(o.f, "shard shard.dev%d.bin %llu %016llx\n", d, (unsigned long long)bytes[d],
                (unsigned long long)sums[d]);
    /* the manifest appears last and whole: a directory without one is incomplete */
    return base_out_commit(&o, e);
}

int exec_ckpt_probe_dir(const char *dir, int dev, base_error *e)
{
    if (mkdir(dir, 0777) && errno != EEXIST)
        return base_errorf(e, "--save %s: cannot create the directory: %s; give a directory that "
                              "can be created and written",
                           dir, strerror(errno));
    /* a temporary made and dropped as a shard's would be: a planted name is never opened */
    char path[4096];
    snprintf(path, sizeof path, "%s/write-test.dev%d", dir, dev);
    base_out o;
    base_error pe;
    base_error_clear(&pe);
    if (base_out_open(&o, path, "a test file", &pe))
        return base_errorf(e, "--save %s: cannot write there (%s); give a writable directory", dir, pe.msg);
    base_out_abort(&o);
    return 0;
}

void exec_ckpt_stage_name(const char *dir, int64_t step, char *buf, size_t n)
{
    snprintf(buf, n, "%s/" STEP_FMT PARTIAL, dir, (long long)step);
}

/* The K of a name "step-K" (digits only), or -1. */
static int64_t step_of(const char *name, bool partial)
{
    if (strncmp(name, "step-", 5) != 0) return -1;
    const char *d = name + 5, *end = d;
    while (*end >= '0' && *end <= '9') end++;
    if (end == d || end - d > 18 || strcmp(end, partial ? PARTIAL : "") != 0) return -1;
    return strtoll(d, NULL, 10);
}

/* Removes a step directory and the files in it (checkpoints hold no subdirectories). */
static int remove_step_dir(const char *path, base_error *e)
{
    DIR *d = opendir(path);
    if (!d) return errno == ENOENT ? 0 : base_errorf(e, "%s: cannot open to remove it (%s)", path, strerror(errno));
    int rc = 0;
    for (struct dirent *de; !rc && (de = readdir(d));) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char f[8192];
        snprintf(f, sizeof f, "%s/%s", path, de->d_name);
        if (unlink(f) != 0) rc = base_errorf(e, "%s: cannot remove (%s); remove it by hand", f, strerror(errno));
    }
    closedir(d);
    if (!rc && rmdir(path) != 0)
        rc = base_errorf(e, "%s: cannot remove (%s); remove it by hand", path, strerror(errno));
    return rc;
}

int exec_ckpt_stage(const char *dir, int64_t step, base_error *e)
{
    /* what a killed save left: never named by latest, so never a checkpoint anyone resumes */
    DIR *d = opendir(dir);
    if (!d) return base_errorf(e, "--save %s: cannot open the directory (%s)", dir, strerror(errno));
    int rc = 0;
    for (struct dirent *de; !rc && (de = readdir(d));) {
        if (step_of(de->d_name, true) < 0) continue;
        char f[8192];
        snprintf(f, sizeof f, "%s/%s", dir, de->d_name);
        rc = remove_step_dir(f, e);
    }
    closedir(d);
    char stage[4200];
    exec_ckpt_stage_name(dir, step, stage, sizeof stage);
    if (!rc && mkdir(stage, 0777) != 0)
        rc = base_errorf(e, "%s: cannot create the checkpoint's directory (%s); check --save", stage, strerror(errno));
    return rc ? rc : base_fsync_dir(dir, e);
}

/* --keep: the checkpoint latest names and the keep - 1 others of the highest steps stay. */
static int retain(const char *dir, const char *latest, int keep, base_error *e)
{
    DIR *d = opendir(dir);
    if (!d) return base_errorf(e, "--save %s: cannot open the directory (%s)", dir, strerror(errno));
    BASE_VEC(int64_t) steps = {0};
    for (struct dirent *de; (de = readdir(d));) {
        int64_t k = step_of(de->d_name, false);
        if (k >= 0 && strcmp(de->d_name, latest) != 0) BASE_VEC_PUSH(steps, k);
    }
    closedir(d);
    int rc = 0;
    for (size_t i = 0; i < steps.n && !rc; i++) {
        size_t higher = 0;
        for (size_t j = 0; j < steps.n; j++) higher += steps.v[j] > steps.v[i];
        if ((int64_t)higher < keep - 1) continue;
        char f[4200];
        snprintf(f, sizeof f, "%s/" STEP_FMT, dir, (long long)steps.v[i]);
        rc = remove_step_dir(f, e);
    }
    free(steps.v);
    return rc;
}

int exec_ckpt_commit(const char *dir, int64_t step, int keep, char *final, size_t n, base_error *e)
{
    char stage[4200], name[64];
    exec_ckpt_stage_name(dir, step, stage, sizeof stage);
    snprintf(name, sizeof name, STEP_FMT, (long long)step);
    snprintf(final, n, "%s/%s", dir, name);
    struct stat st;
    if (lstat(final, &st) == 0) {
        /* a step saved again: the two directories swap in one step, so latest, which may name
         * this step, always names a whole checkpoint; the old one is then removed */
        if (renameat2(AT_FDCWD, stage, AT_FDCWD, final, RENAME_EXCHANGE) != 0)
            return base_errorf(e, "%s: cannot replace the checkpoint of step %lld atomically (%s); save "
                                  "into another --save directory or remove %s",
                               final, (long long)step, strerror(errno), final);
        if (remove_step_dir(stage, e)) return -1;
    } else if (rename(stage, final) != 0) {
        return base_errorf(e, "%s: cannot move the finished checkpoint into place (%s); check --save %s",
                           final, strerror(errno), dir);
    }
    if (base_fsync_dir(dir, e)) return -1;
    char path[4200], text[80];
    snprintf(path, sizeof path, "%s/latest", dir);
    int L = snprintf(text, sizeof text, "%s\n", name);
    /* the switch: before it latest names the previous checkpoint, after it this one */
    if (base_out_write_file(path, "the checkpoint's latest", text, (size_t)L, e)) return -1;
    return keep > 0 ? retain(dir, name, keep, e) : 0;
}

int exec_ckpt_resolve(const char *dir_given, char *buf, size_t n, base_error *e)
{
    char path[4200], dir[4096];
    struct stat st;
    snprintf(dir, sizeof dir, "%s", dir_given);
    for (size_t L = strlen(dir); L > 1 && dir[L - 1] == '/';) dir[--L] = 0; /* "ck/step-000002/" */
    snprintf(buf, n, "%s", dir);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return base_errorf(e, "%s: no such checkpoint directory; give a directory written by --save", dir);
    snprintf(path, sizeof path, "%s/%s", dir, MANIFEST);
    if (access(path, F_OK) == 0) return 0; /* a step directory itself */
    snprintf(path, sizeof path, "%s/latest", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        /* a step directory that lost its manifest reads as incomplete (exec_ckpt_read) */
        if (step_of(strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir, false) >= 0) return 0;
        return base_errorf(e, "%s: no checkpoint here: neither %s nor latest; give a --save directory or "
                              "one of its step-N directories", dir, MANIFEST);
    }
    char name[256] = "";
    bool ok = fgets(name, sizeof name, f) != NULL;
    fclose(f);
    name[strcspn(name, "\r\n")] = 0;
    /* a step directory of DIR's own, never a path elsewhere */
    if (!ok || step_of(name, false) < 0)
        return base_errorf(e, "%s:1:1: names '%s', not a step-N directory; this piper-exec reads checkpoints "
                              "saved by itself (step-N directories): save the checkpoint again", path, name);
    snprintf(buf, n, "%s/%s", dir, name);
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
        return base_errorf(e, "%s:1:1: names %s, which is not there; resume one of DIR's step-N directories "
                              "by its path", path, name);
    return 0;
}

/* ---------------------------------------------------------------- reading */

void exec_ckpt_free(exec_ckpt *ck)
{
    for (int d = 0; d < ck->nshards; d++) free(ck->shard[d].file);
    free(ck->shard);
    free(ck->model);
    for (size_t k = 0; k < BASE_COUNT(ck->field); k++) free(ck->field[k]);
    memset(ck, 0, sizeof *ck);
}

int exec_ckpt_read(exec_ckpt *ck, const char *dir, base_error *e)
{
    memset(ck, 0, sizeof *ck);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, MANIFEST);
    struct stat st;
    if (stat(path, &st) != 0) {
        int err = errno;
        if (stat(dir, &st) || !S_ISDIR(st.st_mode))
            return base_errorf(e, "%s: no such checkpoint directory; give a directory written by --save", dir);
        return base_errorf(e, "%s: cannot read: %s; the checkpoint is incomplete (its manifest is "
                              "written last)", path, strerror(err));
    }
    base_buf b = {0};
    if (base_read_file(path, &b, e)) return -1;
    int rc = exec_ckpt_parse(ck, dir, path, b.s ? b.s : "", b.n, e);
    base_buf_free(&b);
    return rc;
}

/* The manifest's lines are short (the model line is the longest, under 1 KB). */
#define MANIFEST_LINE 2048

int exec_ckpt_parse(exec_ckpt *ck, const char *dir, const char *path, const char *text, size_t len,
                    base_error *e)
{
    memset(ck, 0, sizeof *ck);
    snprintf(ck->dir, sizeof ck->dir, "%s", dir);
    char line[MANIFEST_LINE];
    int ln = 0, have = 0, nshard = 0;
    int rc = 0;
    for (size_t at = 0; !rc && at < len;) {
        size_t end = at;
        while (end < len && text[end] != '\n') end++;
        ln++;
        size_t L = end - at;
        if (memchr(text + at, 0, L)) {
            rc = base_errorf(e, "%s:%d:%d: a NUL byte; the manifest is text, written by --save", path, ln,
                             (int)((const char *)memchr(text + at, 0, L) - (text + at)) + 1);
            break;
        }
        if (L >= sizeof line) {
            rc = base_errorf(e, "%s:%d:1: a line of %zu bytes; manifest lines are under %d bytes, so "
                                "this is not a manifest written by --save", path, ln, L, MANIFEST_LINE);
            break;
        }
        memcpy(line, text + at, L);
        line[L] = 0;
        at = end + 1;
        char key[32] = "", rest[2000] = "";
        if (sscanf(line, "%31s %1999[^\n]", key, rest) < 1) continue;
        char *endp = NULL;
        for (size_t k = 0; ln > 1 && k < BASE_COUNT(HEADER_KEYS); k++)
            if (!strcmp(key, HEADER_KEYS[k]) && !ck->field[k]) ck->field[k] = xstrdup(rest);
        if (ln == 1) {
            if (!strcmp(line, "piper-checkpoint 1"))
                rc = base_errorf(e, "%s:1:1: a checkpoint of format 1 (an older piper-exec's layout); this "
                                    "piper-exec reads format 2: save it again with this piper-exec", path);
            else if (strcmp(line, MANIFEST_HEAD) != 0)
                rc = base_errorf(e, "%s:1:1: not a piper checkpoint manifest (expected \"%s\")", path, MANIFEST_HEAD);
        } else if (!strcmp(key, "tensors")) {
            long long nt;
            unsigned long long dg;
            char extra;
            if (sscanf(rest, "%lld %16llx %c", &nt, &dg, &extra) != 2 || nt < 1)
                rc = base_errorf(e, "%s:%d:9: tensors '%s': expected a count and a 16-digit digest", path, ln, rest);
            have |= 128;
        } else if (!strcmp(key, "model")) {
            free(ck->model);
            ck->model = xstrdup(rest);
            have |= 1;
        } else if (!strcmp(key, "dtype")) {
            if (!strcmp(rest, "fp32")) ck->dtype = PLAN_FP32;
            else if (!strcmp(rest, "fp64")) ck->dtype = PLAN_FP64;
            else rc = base_errorf(e, "%s:%d:7: dtype %s; the CPU executor writes fp32 or fp64", path, ln, rest);
            have |= 2;
        } else if (!strcmp(key, "step")) {
            ck->step = strtoll(rest, &endp, 10);
            if (*endp || ck->step < 0) rc = base_errorf(e, "%s:%d:6: step '%s' is not a count of steps", path, ln, rest);
            have |= 4;
        } else if (!strcmp(key, "seed")) {
            ck->seed = strtoull(rest, &endp, 10);
            if (*endp) rc = base_errorf(e, "%s:%d:6: seed '%s' is not a number", path, ln, rest);
            have |= 8;
        } else if (!strcmp(key, "optimizer")) {
            snprintf(ck->optimizer, sizeof ck->optimizer, "%.31s", rest);
            have |= 16;
        } else if (!strcmp(key, "data")) {
            snprintf(ck->data, sizeof ck->data, "%s", rest);
            have |= 32;
        } else if (!strcmp(key, "shards")) {
            long n = strtol(rest, &endp, 10);
            if (*endp || n < 1 || n > 1 << 20 || ck->shard)
                rc = base_errorf(e, "%s:%d:8: shards '%s': expected one positive count", path, ln, rest);
            else {
                ck->nshards = (int)n;
                ck->shard = base_xcalloc((size_t)n, sizeof *ck->shard);
            }
            have |= 64;
        } else if (!strcmp(key, "shard")) {
            char file[256];
            unsigned long long b, s;
            if (!ck->shard || nshard >= ck->nshards)
                rc = base_errorf(e, "%s:%d:1: more shard lines than 'shards' says", path, ln);
            else if (sscanf(rest, "%255s %llu %llx", file, &b, &s) != 3 || strchr(file, '/'))
                rc = base_errorf(e, "%s:%d:7: expected 'shard FILE BYTES CHECKSUM'", path, ln);
            else {
                ck->shard[nshard].file = xstrdup(file);
                ck->shard[nshard].bytes = b;
                ck->shard[nshard].sum = s;
                nshard++;
            }
        } else {
            rc = base_errorf(e, "%s:%d:1: unknown key '%s'", path, ln, key);
        }
    }
    if (!rc && ln == 0) rc = base_errorf(e, "%s:1:1: empty manifest", path);
    if (!rc && (have != 255 || nshard != ck->nshards))
        rc = base_errorf(e, "%s:%d:1: the manifest is truncated: it lacks %s", path, ln + 1,
                         !(have & 1) ? "the model" : !(have & 128) ? "the tensor list" : !(have & 2) ? "the dtype"
                         : !(have & 4) ? "the step" : !(have & 8) ? "the seed" : !(have & 16) ? "the optimizer"
                         : !(have & 32) ? "the data source" : !(have & 64) ? "the shard count" : "shard lines");
    if (rc) exec_ckpt_free(ck);
    return rc;
}

int exec_ckpt_check_plan(const exec_ckpt *ck, const plan_set *p, base_error *e)
{
    char ml[1024], why[1200];
    model_line(&p->model, ml, sizeof ml);
    if (strcmp(ml, ck->model) != 0) {
        first_difference(ck->model, ml, why, sizeof why);
        return base_errorf(e, "%s/%s:2:7: the checkpoint was written for another model (%s); resume "
                              "with a plan of the same model",
                           ck->dir, MANIFEST, why);
    }
    int64_t nt;
    uint64_t dg;
    char mine[64];
    if (tensor_list(p, &nt, &dg, e)) return -1;
    snprintf(mine, sizeof mine, "%lld %016llx", (long long)nt, (unsigned long long)dg);
    if (strcmp(mine, ck->field[5]) != 0)
        return base_errorf(e, "%s/%s: the checkpoint's tensors are '%s' (count, digest) where the plan's model has "
                              "'%s'; resume with a plan of the model it was saved from",
                           ck->dir, MANIFEST, ck->field[5], mine);
    return 0;
}

int exec_ckpt_shard_header(const char *path, const char *buf, uint64_t n, size_t *es, uint64_t *first,
                           base_error *e)
{
    if (n < 24 || memcmp(buf, SHARD_MAGIC, 8) != 0) return base_errorf(e, "%s: not a piper checkpoint shard", path);
    uint32_t h32[4];
    memcpy(h32, buf + 8, sizeof h32);
    if (h32[0] != SHARD_VERSION || (h32[1] != 4 && h32[1] != 8))
        return base_errorf(e, "%s: shard version %u with %u-byte elements; this piper-exec reads "
                              "version %u with 4- or 8-byte elements",
                           path, h32[0], h32[1], SHARD_VERSION);
    if (h32[3] > n - 24)
        return base_errorf(e, "%s: a header of %u bytes in a shard of %llu", path, h32[3], (unsigned long long)n);
    *es = h32[1];
    *first = 24 + (uint64_t)h32[3];
    return 0;
}

int exec_ckpt_shard_next(const char *path, const char *buf, uint64_t n, size_t es, uint64_t *pos,
                         exec_ckpt_record *r, base_error *e)
{
    uint64_t at = *pos;
    if (at >= n) return 0;
    uint32_t len = 0;
    uint64_t hdr[5];
    if (n - at < 4 || (memcpy(&len, buf + at, 4), len == 0 || len >= sizeof r->name) ||
        n - at - 4 < len + sizeof hdr)
        return base_errorf(e, "%s: bad record at byte %llu", path, (unsigned long long)at);
    memcpy(r->name, buf + at + 4, len);
    r->name[len] = 0;
    memcpy(hdr, buf + at + 4 + len, sizeof hdr);
    at += 4 + len + sizeof hdr;
    /* the tensor's element count, refused when it overflows: a wrapped product would let a
     * record's range pass the bounds check below */
    uint64_t total = hdr[0];
    if ((hdr[1] && total > UINT64_MAX / hdr[1]) || (hdr[1] && hdr[2] && total * hdr[1] > UINT64_MAX / hdr[2]))
        return base_errorf(e, "%s: record of %s at byte %llu: its shape %llux%llux%llu overflows", path, r->name,
                           (unsigned long long)at, (unsigned long long)hdr[0], (unsigned long long)hdr[1],
                           (unsigned long long)hdr[2]);
    total *= hdr[1];
    total *= hdr[2];
    const uint64_t g0 = hdr[3], cnt = hdr[4];
    if (cnt == 0 || g0 > total || cnt > total - g0 || cnt > (n - at) / (3 * es))
        return base_errorf(e, "%s: record of %s at byte %llu: elements [%llu, +%llu) of %llu do not "
                              "fit", path, r->name, (unsigned long long)at, (unsigned long long)g0,
                           (unsigned long long)cnt, (unsigned long long)total);
    r->dim[0] = hdr[0], r->dim[1] = hdr[1], r->dim[2] = hdr[2];
    r->g0 = g0;
    r->cnt = cnt;
    r->vals = buf + at;
    *pos = at + 3 * cnt * es;
    return 1;
}

/* A local tensor the checkpoint fills: storage element P->offset + i, i in the block. */
typedef struct want {
    char name[160];
    const exec_param *P;
    char *par, *m, *v;    /* m, v: the moments of storage elements [lo, hi) */
    int64_t lo, hi;
    int64_t plo, phi;     /* the storage elements the parameter buffer holds (exec_region.param_lo) */
    unsigned char *got;   /* per block element: 1 parameter, 2 moments */
} want;

static int load_shard(exec_cpu *c, const exec_ckpt *ck, int d, want *w, int nw, base_error *e)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%.250s", ck->dir, ck->shard[d].file);
    FILE *f = fopen(path, "rb");
    if (!f) return base_errorf(e, "%s: cannot read: %s; the checkpoint lacks a shard", path, strerror(errno));
    uint64_t n = ck->shard[d].bytes;
    char *buf = malloc(n + 1);
    size_t got = buf ? fread(buf, 1, n + 1, f) : 0;
    fclose(f);
    if (!buf) return base_errorf(e, "out of memory reading %s", path);
    int rc = 0;
    if (got != n) {
        rc = base_errorf(e, "%s: %zu bytes where the manifest says %llu; the shard is truncated or "
                            "does not belong to this checkpoint",
                         path, got, (unsigned long long)n);
    } else if (fnv1a(FNV0, buf, n) != ck->shard[d].sum) {
        rc = base_errorf(e, "%s: checksum mismatch (the manifest says %016llx); the shard is corrupt",
                         path, (unsigned long long)ck->shard[d].sum);
    }
    size_t fes = 0;
    uint64_t pos = 0;
    if (!rc) rc = exec_ckpt_shard_header(path, buf, n, &fes, &pos, e);
    /* the shard's own record of the checkpoint must be the manifest's, field by field: the
     * checksums vouch for the shards, this for the manifest's step, seed, model and tensors */
    for (size_t k = 0; !rc && k < BASE_COUNT(HEADER_KEYS); k++) {
        const char *h = buf + 24, *hend = buf + pos, *val = NULL;
        size_t klen = strlen(HEADER_KEYS[k]), vlen = 0;
        for (const char *l = h; l < hend;) {
            const char *nl = memchr(l, '\n', (size_t)(hend - l));
            if (!nl) nl = hend;
            if ((size_t)(nl - l) > klen && !memcmp(l, HEADER_KEYS[k], klen) && l[klen] == ' ') {
                val = l + klen + 1;
                vlen = (size_t)(nl - val);
                break;
            }
            l = nl + 1;
        }
        const char *says = ck->field[k] ? ck->field[k] : "";
        if (!val || vlen != strlen(says) || memcmp(val, says, vlen) != 0)
            rc = base_errorf(e, "%s: the shard records %s '%.*s' where %s/%s says '%s'; the manifest was edited or "
                                "the shard belongs to another checkpoint: resume an unedited checkpoint",
                             path, HEADER_KEYS[k], val ? (int)(vlen > 300 ? 300 : vlen) : 0, val ? val : "",
                             ck->dir, MANIFEST, says);
    }
    const size_t es = c->es;
    exec_ckpt_record rec;
    while (!rc) {
        int more = exec_ckpt_shard_next(path, buf, n, fes, &pos, &rec, e);
        if (more <= 0) {
            rc = more;
            break;
        }
        const char *name = rec.name;
        const uint64_t *hdr = rec.dim, g0 = rec.g0, cnt = rec.cnt;
        const char *vals = rec.vals;
        for (int k = 0; k < nw && !rc; k++) {
            want *W = &w[k];
            if (strcmp(W->name, name) != 0) continue;
            const exec_param *P = W->P;
            if ((uint64_t)P->dim[0] != hdr[0] || (uint64_t)P->dim[1] != hdr[1] || (uint64_t)P->dim[2] != hdr[2]) {
                rc = base_errorf(e, "%s: tensor %s is %llux%llux%llu in the checkpoint but %lldx%lldx%lld "
                                    "in the plan's model", path, name, (unsigned long long)hdr[0],
                                 (unsigned long long)hdr[1], (unsigned long long)hdr[2],
                                 (long long)P->dim[0], (long long)P->dim[1], (long long)P->dim[2]);
                break;
            }
            for (uint64_t j = 0; j < cnt; j++) {
                int64_t i = local_index(P, (int64_t)(g0 + j));
                if (i < 0) continue;
                int64_t s = P->offset + i;
                if (s >= W->plo && s < W->phi) put(W->par, es, s, get(vals, fes, (int64_t)j));
                W->got[i] |= 1;
                if (s >= W->lo && s < W->hi) {
                    put(W->m, es, s - W->lo, get(vals, fes, (int64_t)(cnt + j)));
                    put(W->v, es, s - W->lo, get(vals, fes, (int64_t)(2 * cnt + j)));
                    W->got[i] |= 2;
                }
            }
        }
    }
    free(buf);
    return rc;
}

int exec_cpu_resume(exec_cpu *c, const exec_ckpt *ck, base_error *e)
{
    if (exec_ckpt_check_plan(ck, c->p, e)) return -1;
    /* every tensor (and the tied table's copy) of every region whose state lives here */
    want *w = base_xcalloc((size_t)c->bd.nreg * (EXEC_MAX_REGION_PARAMS + 1) + 1, sizeof *w);
    int nw = 0;
    for (int r = 0; r < c->bd.nreg; r++) {
        exec_region *R = &c->bd.reg[r];
        if (R->param_buf < 0 || R->opt_buf < 0) continue;
        exec_buf *PB = &c->bd.buf[R->param_buf], *OB = &c->bd.buf[R->opt_buf];
        if (!PB->p) PB->p = calloc((size_t)(PB->bytes ? PB->bytes : 1), 1);
        if (!OB->p) OB->p = calloc((size_t)(OB->bytes ? OB->bytes : 1), 1);
        if (!PB->p || !OB->p) {
            free(w);
            return base_errorf(e, "out of memory for the parameters of %s", R->name);
        }
        PB->init = true; /* the checkpoint's values, not the initialisation */
        for (int t = 0; t <= R->npar; t++) {
            const exec_param *P = t < R->npar ? &R->par[t] : (R->ncopy ? &R->copy : NULL);
            if (!P) break;
            want *W = &w[nw++];
            const char *rn = t < R->npar ? R->name : c->bd.reg[c->bd.embed_region >= 0 ? c->bd.embed_region : r].name;
            snprintf(W->name, sizeof W->name, "%s.%s", rn, P->name);
            W->P = P;
            W->par = cpu_region_params(c, R, PB->p);
            W->plo = R->param_lo;
            W->phi = R->param_lo + PB->bytes / (int64_t)c->es;
            W->lo = R->upd_lo;
            W->hi = R->upd_hi;
            W->m = OB->p;
            W->v = OB->p + (size_t)(R->upd_hi - R->upd_lo) * c->es;
            W->got = base_xcalloc((size_t)(P->count ? P->count : 1), 1);
        }
    }
    int rc = 0;
    for (int d = 0; d < ck->nshards && !rc; d++) rc = load_shard(c, ck, d, w, nw, e);
    /* every element this device holds must have come from the checkpoint */
    for (int k = 0; k < nw && !rc; k++) {
        const want *W = &w[k];
        for (int64_t i = 0; i < W->P->count && !rc; i++) {
            int64_t s = W->P->offset + i;
            int need = 1 | (s >= W->lo && s < W->hi ? 2 : 0);
            if ((W->got[i] & need) != need)
                rc = base_errorf(e, "%s holds no %s for element %lld of %s (device %d needs it); the "
                                    "checkpoint is incomplete",
                                 ck->dir, W->got[i] & 1 ? "optimizer state" : "value",
                                 (long long)global_index(W->P, i), W->name, c->dev);
        }
    }
    for (int k = 0; k < nw; k++) free(w[k].got);
    free(w);
    return rc;
}
