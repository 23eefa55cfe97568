/* test_data.c — piper-exec's token sources (exec/data.h): synthetic tokens are the
 * generator's; the bundled corpus and token files give windows of consecutive tokens of the text,
 * so every token's target is the next token of the text; tokens are a pure function of (seed,
 * step, sample, position), whatever the order of the calls; uint16 and uint32 files with the same
 * tokens give the same data; a file of exactly seq + 1 tokens is read whole; and every bad input
 * is refused at open with a message naming it. */
#include <unistd.h>

#include "exec/data.h"
#include "harness.h"

#define SEQ 32

static char path_buf[256];
static const char *tmp_file(const char *name)
{
    snprintf(path_buf, sizeof path_buf, "/tmp/piper_test_data_%d_%s", (int)getpid(), name);
    return path_buf;
}

/* writes n tokens tok(i) as `width`-byte little-endian integers; returns the path */
static const char *write_tokens(const char *name, int width, int64_t n, uint32_t (*tok)(int64_t))
{
    const char *p = tmp_file(name);
    FILE *f = fopen(p, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    for (int64_t i = 0; i < n; i++) {
        uint32_t t = tok(i);
        unsigned char b[4] = {(unsigned char)t, (unsigned char)(t >> 8), (unsigned char)(t >> 16),
                              (unsigned char)(t >> 24)};
        fwrite(b, 1, (size_t)width, f);
    }
    fclose(f);
    return p;
}

static uint32_t mod251(int64_t i) { return (uint32_t)(i % 251); }
static uint32_t big(int64_t i) { return i == 777 ? 256u : (uint32_t)(i % 200); }

static void test_synthetic(void)
{
    exec_data d;
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(exec_data_open(&d, "synthetic", 1000, SEQ, &e), 0);
    for (int64_t s = 0; s < 20; s++)
        for (int64_t p = 0; p <= SEQ; p++)
            CU_ASSERT_EQUAL(exec_data_token(&d, 5, 3, s, p), exec_synthetic_token(5, 3, s, p, 1000));
    char desc[64];
    exec_data_describe(&d, desc, sizeof desc);
    CU_ASSERT_STRING_EQUAL(desc, "synthetic");
    exec_data_close(&d);
}

static void test_corpus(void)
{
    exec_data d;
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(exec_data_open(&d, "corpus", 256, SEQ, &e), 0);
    CU_ASSERT(exec_corpus_bytes > 2000);
    /* each sample is a window of the text: positions 0..SEQ are consecutive bytes */
    int distinct = 0, prev = -1;
    for (int64_t step = 1; step <= 4; step++)
        for (int64_t s = 0; s < 8; s++) {
            unsigned char w[SEQ + 1];
            for (int64_t p = 0; p <= SEQ; p++) w[p] = (unsigned char)exec_data_token(&d, 9, step, s, p);
            const unsigned char *hit = NULL;
            for (int64_t i = 0; i + SEQ + 1 <= exec_corpus_bytes && !hit; i++)
                if (memcmp(exec_corpus + i, w, SEQ + 1) == 0) hit = exec_corpus + i;
            CU_ASSERT_PTR_NOT_NULL(hit);
            distinct += w[0] * 31 + w[1] != prev;
            prev = w[0] * 31 + w[1];
            /* a pure function: asking again, in another order, gives the same */
            for (int64_t p = SEQ; p >= 0; p--) CU_ASSERT_EQUAL(exec_data_token(&d, 9, step, s, p), w[p]);
        }
    CU_ASSERT(distinct > 16); /* windows move with step and sample */
    /* another seed, other windows */
    int same = 0;
    for (int64_t s = 0; s < 8; s++) same += exec_data_token(&d, 9, 1, s, 0) == exec_data_token(&d, 10, 1, s, 0);
    CU_ASSERT(same < 8);
    exec_data_close(&d);
}

static void test_files(void)
{
    base_error e;
    base_error_clear(&e);
    const int64_t n = 3000;
    char p16[256], p32[256], spec[300];
    snprintf(p16, sizeof p16, "%s", write_tokens("a16.bin", 2, n, mod251));
    snprintf(p32, sizeof p32, "%s", write_tokens("a32.bin", 4, n, mod251));
    exec_data a, b;
    snprintf(spec, sizeof spec, "uint16:%s", p16);
    CU_ASSERT_EQUAL_FATAL(exec_data_open(&a, spec, 256, SEQ, &e), 0);
    snprintf(spec, sizeof spec, "uint32:%s", p32);
    CU_ASSERT_EQUAL_FATAL(exec_data_open(&b, spec, 256, SEQ, &e), 0);
    CU_ASSERT_EQUAL(a.n, n);
    CU_ASSERT_EQUAL(b.n, n);
    for (int64_t step = 1; step <= 3; step++)
        for (int64_t s = 0; s < 16; s++)
            for (int64_t p = 0; p <= SEQ; p++) {
                int32_t t = exec_data_token(&a, 4, step, s, p);
                CU_ASSERT(t >= 0 && t < 251);
                CU_ASSERT_EQUAL(exec_data_token(&b, 4, step, s, p), t);
                if (p < SEQ) CU_ASSERT_EQUAL(exec_data_token(&a, 4, step, s, p + 1), (t + 1) % 251);
            }
    char desc[400];
    exec_data_describe(&a, desc, sizeof desc);
    CU_ASSERT(strstr(desc, "tokens=3000") != NULL);
    exec_data_close(&a);
    exec_data_close(&b);
    /* exactly one window: the file, whole */
    snprintf(spec, sizeof spec, "uint16:%s", write_tokens("one.bin", 2, SEQ + 1, mod251));
    CU_ASSERT_EQUAL_FATAL(exec_data_open(&a, spec, 256, SEQ, &e), 0);
    for (int64_t s = 0; s < 5; s++)
        for (int64_t p = 0; p <= SEQ; p++) CU_ASSERT_EQUAL(exec_data_token(&a, 1, 2, s, p), p);
    exec_data_close(&a);
    unlink(p16);
    unlink(p32);
    unlink(tmp_file("one.bin"));
}

/* A token file cut short during a run: the tokens past its new end are -1, and the error names
 * the file and both sizes (before, reading a mapping past its end raised SIGBUS). */
static void test_truncated(void)
{
    base_error e;
    base_error_clear(&e);
    char spec[300];
    const char *p = write_tokens("cut.bin", 2, 3000, mod251);
    snprintf(spec, sizeof spec, "uint16:%s", p);
    exec_data d;
    CU_ASSERT_EQUAL_FATAL(exec_data_open(&d, spec, 256, SEQ, &e), 0);
    CU_ASSERT(exec_data_token(&d, 4, 1, 0, 0) >= 0);
    CU_ASSERT_EQUAL_FATAL(truncate(p, 40), 0);
    int lost = 0;
    for (int64_t s = 0; s < 16; s++) lost += exec_data_token(&d, 4, 1, s, SEQ) < 0;
    CU_ASSERT(lost > 0);
    CU_ASSERT_EQUAL(exec_data_lost(&d, 1, &e), -1);
    CU_ASSERT(strstr(e.msg, p) != NULL);
    CU_ASSERT(strstr(e.msg, "shrank from 6000 to 40 bytes") != NULL);
    CU_ASSERT(strstr(e.msg, "keep the token file unchanged") != NULL);
    exec_data_close(&d);
    unlink(p);
}

/* exec_data_open(spec) fails with a message containing `want` */
static void refused(const char *spec, int64_t vocab, const char *want)
{
    exec_data d;
    base_error e;
    base_error_clear(&e);
    int rc = exec_data_open(&d, spec, vocab, SEQ, &e);
    exec_data_close(&d);
    CU_ASSERT_NOT_EQUAL(rc, 0);
    if (rc == 0 || !strstr(e.msg, want))
        fprintf(stderr, "\n  %s: got \"%s\", wanted \"%s\"\n", spec, rc ? e.msg : "(success)", want);
    CU_ASSERT(rc != 0 && strstr(e.msg, want) != NULL);
}

static void test_errors(void)
{
    char spec[300];
    refused("words", 256, "expected synthetic, corpus, uint16:PATH or uint32:PATH");
    refused("uint16:", 256, "expected synthetic, corpus");
    refused("uint8:/tmp/x", 256, "expected synthetic, corpus");
    refused("corpus", 100, "byte-level tokens 0..255, but the model's vocabulary is 100");
    refused("uint16:/nonexistent/tokens.bin", 256, "cannot open /nonexistent/tokens.bin");
    refused("uint16:/tmp", 256, "is not a regular file");
    /* 3001 bytes: not whole uint16 tokens; 3000 bytes: not whole uint32 ones */
    const char *odd = tmp_file("odd.bin");
    FILE *f = fopen(odd, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    for (int i = 0; i < 3001; i++) fputc(1, f);
    fclose(f);
    snprintf(spec, sizeof spec, "uint16:%s", odd);
    refused(spec, 256, "3001 bytes, not a whole number of 2-byte tokens");
    snprintf(spec, sizeof spec, "uint32:%s", write_tokens("u16.bin", 2, 1501, mod251));
    refused(spec, 256, "not a whole number of 4-byte tokens (is it uint16?)");
    snprintf(spec, sizeof spec, "uint16:%s", write_tokens("short.bin", 2, SEQ, mod251));
    refused(spec, 256, "holds 32 tokens, fewer than a sequence of 32 plus its target");
    snprintf(spec, sizeof spec, "uint16:%s", write_tokens("big.bin", 2, 1000, big));
    refused(spec, 256, "token 256 at index 777 (byte 1554) is outside the model's vocabulary of 256");
    unlink(odd);
    unlink(tmp_file("u16.bin"));
    unlink(tmp_file("short.bin"));
    unlink(tmp_file("big.bin"));
}

int piper_tests_register(void)
{
    static const test_case cases[] = {{"synthetic tokens", test_synthetic},
                                      {"bundled corpus: windows of the text", test_corpus},
                                      {"uint16 and uint32 token files", test_files},
                                      {"bad sources are refused", test_errors},
                                      {"a file truncated during a run is named", test_truncated},
                                      {NULL, NULL}};
    return test_add_suite("data", cases);
}
