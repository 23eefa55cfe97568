/* fuzz_ckpt.c — libFuzzer entry for the checkpoint readers (exec/cpu/checkpoint.c): the input is
 * read as a manifest (exec_ckpt_parse) and as a shard (exec_ckpt_shard_header, then every record
 * by exec_ckpt_shard_next). A failed read names the file; every record lies inside the input
 * and within its tensor. Broken promises abort. Seeds: tests/fuzz/corpus/ckpt. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cpu/cpu_exec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_ckpt: broken promise: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    exec_ckpt ck;
    base_error e;
    base_error_clear(&e);
    int rc = exec_ckpt_parse(&ck, "ck", "ck/manifest.txt", text, size, &e);
    require(rc == 0 || rc == -1, "status is 0 or -1");
    if (rc) {
        require(e.set && strncmp(e.msg, "ck/manifest.txt:", 16) == 0, "a manifest error names the file and line");
        require(ck.shard == NULL && ck.model == NULL, "a failed read leaves nothing to free");
    } else {
        require(ck.model && ck.nshards >= 1, "a manifest that reads has a model and shards");
        for (int d = 0; d < ck.nshards; d++) require(ck.shard[d].file && !strchr(ck.shard[d].file, '/'), "shard names are file names");
        exec_ckpt_free(&ck);
    }
    size_t es = 0;
    uint64_t pos = 0;
    base_error_clear(&e);
    if (exec_ckpt_shard_header("shard.bin", text, size, &es, &pos, &e)) {
        require(e.set && strncmp(e.msg, "shard.bin:", 10) == 0, "a shard error names the file");
        return 0;
    }
    require(es == 4 || es == 8, "elements are 4 or 8 bytes");
    require(pos >= 24 && pos <= size, "the records start inside the shard");
    exec_ckpt_record r;
    for (;;) {
        uint64_t before = pos;
        int k = exec_ckpt_shard_next("shard.bin", text, size, es, &pos, &r, &e);
        require(k >= -1 && k <= 1, "a record step returns -1, 0 or 1");
        if (k <= 0) {
            require(k == 0 || (e.set && strncmp(e.msg, "shard.bin:", 10) == 0), "a record error names the file");
            break;
        }
        require(pos > before && pos <= size, "a record lies inside the shard");
        require(r.vals >= text && r.vals + 3 * r.cnt * es == text + pos, "a record's values end where it ends");
        require(r.cnt >= 1 && r.g0 + r.cnt <= r.dim[0] * r.dim[1] * r.dim[2], "a record lies within its tensor");
        uint64_t x = 0;
        for (uint64_t j = 0; j < 3 * r.cnt * es; j++) x += (unsigned char)r.vals[j]; /* touches every value byte */
        (void)x;
    }
    return 0;
}
