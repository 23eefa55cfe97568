/* data.c — the token sources of data.h: synthetic tokens, the bundled corpus and pre-tokenised
 * uint16/uint32 files (mapped read-only and checked once against the vocabulary at open). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"
#include "model.h"

int exec_data_open(exec_data *d, const char *spec, int64_t vocab, int64_t seq, base_error *e)
{
    memset(d, 0, sizeof *d);
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
    d->map_bytes = (size_t)st.st_size;
    d->map = mmap(NULL, d->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (d->map == MAP_FAILED) {
        d->map = NULL;
        return base_errorf(e, "--data %s: cannot map %s: %s", d->spec, path, strerror(errno));
    }
    d->bytes = d->map;
    /* every token must be a row of the embedding: check once, naming the first bad one */
    for (int64_t i = 0; i < d->n; i++) {
        uint32_t t;
        if (d->width == 2) {
            t = (uint32_t)d->bytes[2 * i] | (uint32_t)d->bytes[2 * i + 1] << 8;
        } else {
            const unsigned char *b = d->bytes + 4 * i;
            t = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        }
        if ((int64_t)t >= vocab)
            return base_errorf(e, "--data %s: token %u at index %lld (byte %lld) is outside the "
                                  "model's vocabulary of %lld",
                               d->spec, t, (long long)i, (long long)(i * d->width), (long long)vocab);
    }
    return 0;
}

void exec_data_close(exec_data *d)
{
    if (d->map) munmap(d->map, d->map_bytes);
    d->map = NULL;
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
    const unsigned char *b = d->bytes + (size_t)i * (size_t)d->width;
    if (d->width == 2) return (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8);
    return (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
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
