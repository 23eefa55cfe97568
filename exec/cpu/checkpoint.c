/* checkpoint.c — piper-exec's sharded checkpoints (--save DIR, --resume DIR; format in
 * exec/README.md). Every rank writes the elements its optimizer steps update (its ZeRO piece of
 * each region it updates; a data-parallel replica other than the first writes nothing) as runs of
 * consecutive global element indices of named tensors, with their AdamW moments; rank 0 then
 * writes the manifest, which names every shard with its size and checksum and so marks the
 * checkpoint complete. Because records are keyed by tensor name and global element index, not by
 * device, a checkpoint loads under any strategy of the same model: each rank reads every shard
 * and keeps the elements its own storage holds, and fails, naming the first one, when an element
 * it needs is missing. The training's other state is the step: data and dropout are pure
 * functions of (seed, step, ...), and AdamW's bias correction counts steps. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cpu_exec.h"

#define SHARD_MAGIC "PIPERCKS"
#define SHARD_VERSION 1u
#define MANIFEST "manifest.txt"

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

int exec_cpu_save_shard(exec_cpu *c, const char *dir, uint64_t *bytes, uint64_t *sum, base_error *e)
{
    if (mkdir(dir, 0777) && errno != EEXIST)
        return base_errorf(e, "cannot create checkpoint directory %s: %s", dir, strerror(errno));
    char path[4096];
    snprintf(path, sizeof path, "%s/shard.dev%d.bin", dir, c->dev);
    out o = {fopen(path, "wb"), FNV0, 0, false};
    if (!o.f) return base_errorf(e, "cannot write %s: %s", path, strerror(errno));
    const size_t es = c->es;
    uint32_t h32[4] = {SHARD_VERSION, (uint32_t)es, (uint32_t)c->dev, 0};
    uint64_t step = (uint64_t)c->step;
    emit(&o, SHARD_MAGIC, 8);
    emit(&o, h32, sizeof h32);
    emit(&o, &step, sizeof step);
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
    if (fclose(o.f) || o.bad) return base_errorf(e, "writing %s failed", path);
    *bytes = o.bytes;
    *sum = o.sum;
    return 0;
}

int exec_ckpt_write_manifest(const char *dir, const plan_set *p, plan_dtype dt,
                             const exec_ckpt_meta *meta, int nshards, const uint64_t *bytes,
                             const uint64_t *sums, base_error *e)
{
    char tmp[4096], path[4096], ml[1024];
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, MANIFEST);
    snprintf(path, sizeof path, "%s/%s", dir, MANIFEST);
    FILE *f = fopen(tmp, "w");
    if (!f) return base_errorf(e, "cannot write %s: %s", tmp, strerror(errno));
    model_line(&p->model, ml, sizeof ml);
    fprintf(f, "piper-checkpoint 1\n");
    fprintf(f, "model %s\n", ml);
    fprintf(f, "dtype %s\n", plan_dtype_name(dt));
    fprintf(f, "step %lld\n", (long long)meta->step);
    fprintf(f, "seed %llu\n", (unsigned long long)meta->seed);
    fprintf(f, "optimizer %s\n", meta->optimizer);
    fprintf(f, "data %s\n", meta->data);
    fprintf(f, "shards %d\n", nshards);
    for (int d = 0; d < nshards; d++)
        fprintf(f, "shard shard.dev%d.bin %llu %016llx\n", d, (unsigned long long)bytes[d],
                (unsigned long long)sums[d]);
    if (fclose(f)) return base_errorf(e, "writing %s failed", tmp);
    /* the manifest appears last and whole: a checkpoint without one is incomplete */
    if (rename(tmp, path)) return base_errorf(e, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    return 0;
}

int exec_ckpt_probe_dir(const char *dir, int dev, base_error *e)
{
    if (mkdir(dir, 0777) && errno != EEXIST)
        return base_errorf(e, "--save %s: cannot create the directory: %s; give a directory that "
                              "can be created and written",
                           dir, strerror(errno));
    char path[4096];
    snprintf(path, sizeof path, "%s/.write-test.dev%d", dir, dev);
    FILE *f = fopen(path, "w");
    if (!f)
        return base_errorf(e, "--save %s: cannot write there: %s; give a writable directory",
                           dir, strerror(errno));
    fclose(f);
    remove(path);
    return 0;
}

int exec_ckpt_write_latest(const char *dir, const char *name, base_error *e)
{
    char tmp[4096], path[4096];
    snprintf(tmp, sizeof tmp, "%s/latest.tmp", dir);
    snprintf(path, sizeof path, "%s/latest", dir);
    FILE *f = fopen(tmp, "w");
    if (!f) return base_errorf(e, "cannot write %s: %s", tmp, strerror(errno));
    fprintf(f, "%s\n", name);
    if (fclose(f)) return base_errorf(e, "writing %s failed", tmp);
    if (rename(tmp, path)) return base_errorf(e, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    return 0;
}

const char *exec_ckpt_resolve(const char *dir, char *buf, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, MANIFEST);
    if (access(path, F_OK) == 0) return dir;
    snprintf(path, sizeof path, "%s/latest", dir);
    FILE *f = fopen(path, "r");
    if (!f) return dir;
    char name[256] = "";
    bool ok = fgets(name, sizeof name, f) != NULL;
    fclose(f);
    name[strcspn(name, "\r\n")] = 0;
    /* a name of the directory's own, never a path elsewhere */
    if (!ok || !name[0] || strchr(name, '/') || !strcmp(name, "..") || !strcmp(name, ".")) return dir;
    snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

/* ---------------------------------------------------------------- reading */

void exec_ckpt_free(exec_ckpt *ck)
{
    for (int d = 0; d < ck->nshards; d++) free(ck->shard[d].file);
    free(ck->shard);
    free(ck->model);
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
        if (ln == 1) {
            if (strcmp(line, "piper-checkpoint 1") != 0)
                rc = base_errorf(e, "%s:1:1: not a piper checkpoint manifest (expected \"piper-checkpoint 1\")", path);
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
    if (!rc && (have != 127 || nshard != ck->nshards))
        rc = base_errorf(e, "%s:%d:1: the manifest is truncated: it lacks %s", path, ln + 1,
                         !(have & 1) ? "the model" : !(have & 2) ? "the dtype" : !(have & 4) ? "the step"
                         : !(have & 8) ? "the seed" : !(have & 16) ? "the optimizer" : !(have & 32) ? "the data source"
                         : !(have & 64) ? "the shard count" : "shard lines");
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
    return 0;
}

int exec_ckpt_shard_header(const char *path, const char *buf, uint64_t n, size_t *es, base_error *e)
{
    if (n < 32 || memcmp(buf, SHARD_MAGIC, 8) != 0) return base_errorf(e, "%s: not a piper checkpoint shard", path);
    uint32_t h32[4];
    memcpy(h32, buf + 8, sizeof h32);
    if (h32[0] != SHARD_VERSION || (h32[1] != 4 && h32[1] != 8))
        return base_errorf(e, "%s: shard version %u with %u-byte elements; this piper-exec reads "
                              "version %u with 4- or 8-byte elements",
                           path, h32[0], h32[1], SHARD_VERSION);
    *es = h32[1];
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
    if (!rc) rc = exec_ckpt_shard_header(path, buf, n, &fes, e);
    const size_t es = c->es;
    uint64_t pos = 32;
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
