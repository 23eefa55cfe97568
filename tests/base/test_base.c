/* test_base.c — arena, error formatting and buffers; output files are test_out.c's. */
#include "base/base.h"
#include "tests/testutil.h"

static void test_error_location_format(void)
{
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(base_error_at(&e, "prog.yaml", 12, 3, "unknown op '%s'; use one of place", "plase"), -1);
    CU_ASSERT_STRING_EQUAL(e.msg, "prog.yaml:12:3: unknown op 'plase'; use one of place");
    /* the first error is kept: later ones are consequences */
    base_errorf(&e, "second");
    CU_ASSERT_STRING_EQUAL(e.msg, "prog.yaml:12:3: unknown op 'plase'; use one of place");
    base_error_prefix(&e, "in directive 2: ");
    CU_ASSERT_STRING_EQUAL(e.msg, "in directive 2: prog.yaml:12:3: unknown op 'plase'; use one of place");
}

static void test_warnings_accumulate(void)
{
    base_error e;
    base_error_clear(&e);
    base_warn_at(&e, "a.json", 1, 2, "key 'x' ignored");
    base_warn_at(&e, "a.json", 3, 4, "key 'y' ignored");
    CU_ASSERT_EQUAL(e.nwarn, 2);
    CU_ASSERT_STRING_EQUAL(e.warnings, "a.json:1:2: key 'x' ignored\na.json:3:4: key 'y' ignored\n");
    CU_ASSERT_FALSE(e.set);
}

static void test_arena_alignment_and_growth(void)
{
    base_arena a;
    base_arena_init(&a);
    for (int i = 1; i < 5000; i += 37) {
        unsigned char *p = base_arena_alloc(&a, (size_t)i);
        CU_ASSERT_EQUAL(((uintptr_t)p) % 16, 0);
        CU_ASSERT_EQUAL(p[i - 1], 0);
    }
    void *big = base_arena_alloc(&a, 3u << 20); /* larger than a block */
    CU_ASSERT_PTR_NOT_NULL(big);
    size_t cap = 0;
    int *arr = NULL;
    for (int i = 0; i < 1000; i++) {
        arr = base_arena_grow(&a, arr, &cap, (size_t)i + 1, sizeof *arr);
        arr[i] = i;
    }
    CU_ASSERT(cap >= 1000);
    CU_ASSERT_EQUAL(arr[999], 999);
    CU_ASSERT_EQUAL(arr[500], 500);
    CU_ASSERT_STRING_EQUAL(base_arena_printf(&a, "%d-%s", 7, "x"), "7-x");
    base_arena_free(&a);
}

static void test_bytes_format(void)
{
    char b[32];
    CU_ASSERT_STRING_EQUAL(base_fmt_bytes(512, b, sizeof b), "512 B");
    CU_ASSERT_STRING_EQUAL(base_fmt_bytes(1536.0 * 1024 * 1024, b, sizeof b), "1.50 GiB");
}

static void test_read_missing_file(void)
{
    base_error e;
    base_buf buf = {0};
    base_error_clear(&e);
    CU_ASSERT_EQUAL(base_read_file("/nonexistent/piper.yaml", &buf, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "/nonexistent/piper.yaml: cannot open file");
    base_buf_free(&buf);
}

int piper_tests_register_out(void); /* test_out.c */

int piper_tests_register(void)
{
    static const test_case cases[] = {
        {"error location format", test_error_location_format},
        {"warnings accumulate", test_warnings_accumulate},
        {"arena alignment and growth", test_arena_alignment_and_growth},
        {"byte formatting", test_bytes_format},
        {"missing file error", test_read_missing_file},
        {NULL, NULL}};
    return test_add_suite("base", cases) || piper_tests_register_out();
}
