/* data.c — the token sources of data.h: synthetic tokens, the bundled corpus and pre-tokenised
 * uint16/uint32 files (checked once against the vocabulary at open, then read token by token
 * with pread, so that a file changed under the run is detected, not a fault). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"
#include "model.h"

int exec_data_open(exec_data *d, const char *spec, int64_t vocab, int64_t seq, base_error *e)
{
    memset(d, 0, sizeof *d);
    d->fd = -1;
    snprintf(d->spec, sizeof d->spec, "%s", spec ? spec : "synthetic");
    d->vocab = vocab;
    d->seq = seq;
    if (strcmp(d->spec, "synthetic") == 0) {
        d->kind = EXEC_DATA_SYNTHETIC;
        return 0;
    }
    if (strcmp(d->spec, "corpus") == 0) {
        d->kind = EXEC_DATA_CORPUS;
        d->bytes = exec_corpus;
        d->n = exec_corpus_bytes;
        if (vocab < 256)
            return base_errorf(e, "--data corpus: the bundled text has byte-level tokens 0..255, "
                                  "but the model's vocabulary is %lld; use a model with vocab >= 256",
                               (long long)vocab);
        if (d->n < seq + 1)
            return base_errorf(e, "--data corpus: %lld bytes, fewer than a sequence of %lld plus its "
                                  "target", (long long)d->n, (long long)seq);
        return 0;
    }
    const char *path = NULL;
    if (strncmp(d->spec, "uint16:", 7) == 0) d->width = 2, path = d->spec + 7;
    if (strncmp(d->spec, "uint32:", 7) == 0) d->width = 4, path = d->spec + 7;
    if (!path || !*path)
        return base_errorf(e, "--data '%s': expected synthetic, corpus, uint16:PATH or uint32:PATH", d->spec);
    d->kind = EXEC_DATA_FILE;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return base_errorf(e, "--data %s: cannot open %s: %s", d->spec, path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return base_errorf(e, "--data %s: %s is not a regular file", d->spec, path);
    }
    if (st.st_size % d->width) {
        close(fd);
        return base_errorf(e, "--data %s: %s has %lld bytes, not a whole number of %d-byte tokens "
                              "(is it uint%s?)",
                           d->spec, path, (long long)st.st_size, d->width, d->width == 2 ? "32" : "16");
    }
    d->n = (int64_t)st.st_size / d->width;
    if (d->n < seq + 1) {
        close(fd);
        return base_errorf(e, "--data %s: %s holds %lld tokens, fewer than a sequence of %lld plus "
                              "its target", d->spec, path, (long long)d->n, (long long)seq);
    }
    d->fd = fd;
    d->file_bytes = (int64_t)st.st_size;
    /* every token must be a row of the embedding: check once, naming the first bad one */
    unsigned char chunk[65536];
    for (int64_t off = 0; off < d->file_bytes;) {
        ssize_t got = pread(fd, chunk, sizeof chunk, off);
        if (got <= 0) {
            exec_data_close(d);
            return base_errorf(e, "--data %s: reading %s at byte %lld failed (%s); check the file",
                               d->spec, path, (long long)off, got < 0 ? strerror(errno) : "it ended early");
        }
        for (ssize_t q = 0; q + d->width <= got; q += d->width) {
            const unsigned char *b = chunk + q;
            uint32_t t = d->width == 2 ? (uint32_t)b[0] | (uint32_t)b[1] << 8
                                       : (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                                             (uint32_t)b[3] << 24;
            if ((int64_t)t >= vocab) {
                int64_t i = (off + q) / d->width;
                exec_data_close(d);
                return base_errorf(e, "--data %s: token %u at index %lld (byte %lld) is outside the "
                                      "model's vocabulary of %lld",
                                   d->spec, t, (long long)i, (long long)(i * d->width), (long long)vocab);
            }
        }
        off += got - got % d->width; /* a chunk ends on a token (64 KiB is whole tokens) */
    }
    return 0;
}

void exec_data_close(exec_data *d)
{
    if (d->fd >= 0) close(d->fd);
    d->fd = -1;
    d->bytes = NULL;
}

int32_t exec_data_token(const exec_data *d, uint64_t seed, int64_t step, int64_t sample, int64_t pos)
{
    if (d->kind == EXEC_DATA_SYNTHETIC) return exec_synthetic_token(seed, step, sample, pos, d->vocab);
    /* the window of (seed, step, sample): starts in [0, n - seq), so start + seq is a token */
    uint64_t k = exec_rng_key4(seed, 0x77696e646f77ULL /* "window" */, (uint64_t)step, (uint64_t)sample);
    int64_t start = (int64_t)(exec_rng_bits(k, 0) % (uint64_t)(d->n - d->seq));
    int64_t i = start + pos;
    if (d->kind == EXEC_DATA_CORPUS) return d->bytes[i];
    unsigned char b[4];
    if (pread(d->fd, b, (size_t)d->width, (off_t)i * d->width) != d->width) return -1;
    uint32_t t = d->width == 2 ? (uint32_t)b[0] | (uint32_t)b[1] << 8
                               : (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return (int64_t)t < d->vocab ? (int32_t)t : -1;
}

int exec_data_lost(const exec_data *d, int64_t step, base_error *e)
{
    struct stat st;
    if (d->fd >= 0 && fstat(d->fd, &st) == 0 && (int64_t)st.st_size < d->file_bytes)
        return base_errorf(e, "--data %s: the file shrank from %lld to %lld bytes during the run "
                              "(step %lld reads past its end); keep the token file unchanged while "
                              "piper-exec runs, then resume from the last checkpoint",
                           d->spec, (long long)d->file_bytes, (long long)st.st_size, (long long)step);
    return base_errorf(e, "--data %s: a token of step %lld cannot be read or is outside the "
                          "vocabulary of %lld: the file changed during the run; keep the token "
                          "file unchanged while piper-exec runs, then resume from the last checkpoint",
                       d->spec, (long long)step, (long long)d->vocab);
}

void exec_data_describe(const exec_data *d, char *buf, size_t n)
{
    if (d->kind == EXEC_DATA_FILE)
        snprintf(buf, n, "%s tokens=%lld", d->spec, (long long)d->n);
    else if (d->kind == EXEC_DATA_CORPUS)
        snprintf(buf, n, "corpus bytes=%lld", (long long)d->n);
    else
        snprintf(buf, n, "synthetic");
}
