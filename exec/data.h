/* data.h — where piper-exec's tokens come from. Every source makes token (step, global sample,
 * position) a pure function of (seed, step, sample, position), as DESIGN.md asks, so that any
 * split of the batch over devices, and a run resumed from a checkpoint, reads the same tokens:
 *   synthetic        uniform tokens from the counter-based generator (exec_synthetic_token);
 *   corpus           the bundled text (exec/data/corpus.txt), byte-level tokens 0..255;
 *   uint16:PATH      a pre-tokenised file: little-endian uint16 tokens one after the other, the
 *   uint32:PATH      format of nanoGPT-style .bin files (or uint32 for vocabularies > 65535).
 * For text and files, sample s of step t is the window that starts at offset
 * hash(seed, t, s) mod (N - seq) of the N tokens; position p reads token start + p, and the
 * target is the next token, so targets are the text's own continuation. */
#ifndef PIPER_EXEC_DATA_H
#define PIPER_EXEC_DATA_H

#include <stdint.h>

#include "../base/base.h"

typedef enum { EXEC_DATA_SYNTHETIC, EXEC_DATA_CORPUS, EXEC_DATA_FILE } exec_data_kind;

typedef struct exec_data {
    exec_data_kind kind;
    char spec[4200];        /* as given: "synthetic", "corpus", "uint16:PATH" */
    int64_t vocab, seq;
    int64_t n;              /* tokens of the text or file */
    int width;              /* file: 2 or 4 bytes */
    const unsigned char *bytes; /* the corpus */
    int fd;                 /* file: open for the run, read with pread (-1 otherwise) */
    int64_t file_bytes;     /* file: its size at open */
} exec_data;

/* Opens a source for a model with this vocabulary and sequence length. Errors name the spec:
 * an unknown kind, a missing or unreadable file, a size that is not a whole number of tokens,
 * fewer than seq + 1 tokens, a token outside the vocabulary (with its index), a byte-level
 * corpus for a vocabulary under 256. */
int exec_data_open(exec_data *d, const char *spec, int64_t vocab, int64_t seq, base_error *e);
void exec_data_close(exec_data *d);
/* Token (position pos of global sample `sample` in step `step`); pos may be seq (the last
 * target). -1 when a file's token cannot be read any more or is no longer in the vocabulary
 * (the file was truncated or rewritten during the run): exec_data_lost says which. Files are
 * read with pread, not mapped, so that a file cut short under a running job is an error naming
 * it, not a SIGBUS. */
int32_t exec_data_token(const exec_data *d, uint64_t seed, int64_t step, int64_t sample, int64_t pos);
/* The error for a token exec_data_token could not give: names the file, its size now and at
 * open, and what to do. Returns -1. */
int exec_data_lost(const exec_data *d, int64_t step, base_error *e);
/* What a checkpoint records of the source, to refuse resuming on other data: the spec, and for
 * files their token count. */
void exec_data_describe(const exec_data *d, char *buf, size_t n);

/* The bundled corpus (generated from exec/data/corpus.txt at build time). */
extern const unsigned char exec_corpus[];
extern const int64_t exec_corpus_bytes;

#endif
