/* test_base.c — arena, error formatting, buffers and the number rules (base_parse_*);
 * output files are test_out.c's. */
#include <math.h>
#include <stdint.h>

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

static void test_parse_double(void)
{
    char why[96];
    double v = -7;
    const base_range pos = {0, HUGE_VAL, 1, 0}, unit = {0, 1, 0, 1};
    CU_ASSERT_EQUAL(base_parse_double("1e-3", pos, &v, why, sizeof why), 0);
    CU_ASSERT_DOUBLE_EQUAL(v, 1e-3, 1e-18);
    CU_ASSERT_EQUAL(base_parse_double("0.999", unit, &v, why, sizeof why), 0);
    CU_ASSERT_EQUAL(base_parse_double("1e-320", pos, &v, why, sizeof why), 0); /* subnormal: finite */
    /* each class of refusal, and the value untouched */
    v = -7;
    static const struct {
        const char *s, *why;
        base_range r;
    } bad[] = {
        {"inf", "is not a finite number", {0, HUGE_VAL, 1, 0}},
        {"-nan", "is not a finite number", {0, HUGE_VAL, 1, 0}},
        {"1e400", "is not a finite number", {0, HUGE_VAL, 1, 0}},
        {"0", "is not > 0", {0, HUGE_VAL, 1, 0}},
        {"-1", "is not >= 0", {0, HUGE_VAL, 0, 0}},
        {"1", "is not in [0, 1)", {0, 1, 0, 1}},
        {"1.5x", "is not a number", {0, HUGE_VAL, 0, 0}},
        {" 1", "is not a number", {0, HUGE_VAL, 0, 0}},
        {"", "is not a number", {0, HUGE_VAL, 0, 0}},
    };
    for (size_t k = 0; k < BASE_COUNT(bad); k++) {
        CU_ASSERT_EQUAL(base_parse_double(bad[k].s, bad[k].r, &v, why, sizeof why), -1);
        CU_ASSERT_STRING_EQUAL(why, bad[k].why);
    }
    CU_ASSERT_DOUBLE_EQUAL(v, -7, 0);
    CU_ASSERT_FALSE(base_in_range(NAN, (base_range){-HUGE_VAL, HUGE_VAL, 0, 0}));
}

static void test_parse_integers(void)
{
    char why[96];
    uint64_t u = 0;
    int64_t i = 0;
    /* exact above 2^53, where a double would round 2^53 + 1 to 2^53 */
    CU_ASSERT_EQUAL(base_parse_u64("9007199254740993", 0, UINT64_MAX, &u, why, sizeof why), 0);
    CU_ASSERT_EQUAL(u, UINT64_C(9007199254740993));
    CU_ASSERT_EQUAL(base_parse_u64("18446744073709551615", 0, UINT64_MAX, &u, why, sizeof why), 0);
    CU_ASSERT_EQUAL(u, UINT64_MAX);
    CU_ASSERT_EQUAL(base_parse_u64("18446744073709551616", 0, UINT64_MAX, &u, why, sizeof why), -1);
    CU_ASSERT_STRING_EQUAL(why, "does not fit in 64 bits");
    CU_ASSERT_EQUAL(base_parse_u64("-1", 0, UINT64_MAX, &u, why, sizeof why), -1);
    CU_ASSERT_EQUAL(base_parse_i64("-9223372036854775808", INT64_MIN, INT64_MAX, &i, why, sizeof why), 0);
    CU_ASSERT_EQUAL(i, INT64_MIN);
    CU_ASSERT_EQUAL(base_parse_i64("9223372036854775808", INT64_MIN, INT64_MAX, &i, why, sizeof why), -1);
    CU_ASSERT_EQUAL(base_parse_i64("1.5", 1, 10, &i, why, sizeof why), -1);
    CU_ASSERT_STRING_EQUAL(why, "is not a whole number");
    CU_ASSERT_EQUAL(base_parse_i64("1e3", 1, 10000, &i, why, sizeof why), -1);
    CU_ASSERT_EQUAL(base_parse_i64("11", 1, 10, &i, why, sizeof why), -1);
    CU_ASSERT_STRING_EQUAL(why, "is not a whole number in [1, 10]");
    CU_ASSERT_EQUAL(base_parse_i64("10", 1, 10, &i, why, sizeof why), 0);
    CU_ASSERT_EQUAL(i, 10);
}

int piper_tests_register_out(void); /* test_out.c */
int piper_tests_register_cli(void); /* test_cli.c */

int piper_tests_register(void)
{
    static const test_case cases[] = {
        {"error location format", test_error_location_format},
        {"warnings accumulate", test_warnings_accumulate},
        {"arena alignment and growth", test_arena_alignment_and_growth},
        {"byte formatting", test_bytes_format},
        {"missing file error", test_read_missing_file},
        {"numbers: finite, in range, whole", test_parse_double},
        {"integers: exact to 64 bits", test_parse_integers},
        {NULL, NULL}};
    return test_add_suite("base", cases) || piper_tests_register_out() || piper_tests_register_cli();
}
