/* testutil.h — helpers shared by piper's CUnit suites: registration, fixture paths, and
 * assertions on error messages. */
#ifndef PIPER_TESTUTIL_H
#define PIPER_TESTUTIL_H

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Defined by each suite executable: adds its suites; returns nonzero on failure. */
int piper_tests_register(void);

/* Path of a file in the source tree: PIPER_SOURCE_DIR/rel (static buffer, valid until next call). */
static inline const char *test_src_path(const char *rel)
{
    static char buf[4096];
    const char *root = getenv("PIPER_SOURCE_DIR");
    snprintf(buf, sizeof buf, "%s/%s", root ? root : ".", rel);
    return buf;
}

/* Register a suite from a NULL-terminated table of {name, fn}. */
typedef struct { const char *name; void (*fn)(void); } test_case;
static inline int test_add_suite(const char *name, const test_case *cases)
{
    CU_pSuite s = CU_add_suite(name, NULL, NULL);
    if (!s) return -1;
    for (; cases->name; cases++)
        if (!CU_add_test(s, cases->name, cases->fn)) return -1;
    return 0;
}

/* Assert that `haystack` contains `needle`, printing both when it does not. */
#define TEST_ASSERT_CONTAINS(haystack, needle)                                                  \
    do {                                                                                       \
        const char *h_ = (haystack), *n_ = (needle);                                           \
        int ok_ = h_ && strstr(h_, n_) != NULL;                                                \
        if (!ok_) fprintf(stderr, "\n  expected to find \"%s\" in \"%s\"\n", n_, h_ ? h_ : "(null)"); \
        CU_ASSERT(ok_);                                                                        \
    } while (0)

#endif
