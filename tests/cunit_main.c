/* cunit_main.c — the main() every CUnit suite executable shares. The suite's own file defines
 * piper_tests_register(), which adds its suites and tests. We read CUnit's failure counts before
 * cleaning its registry (cleaning resets them), and exit nonzero on any failure so ctest sees it. */
#include <CUnit/Basic.h>
#include <stdio.h>

#include "testutil.h"

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS) {
        fprintf(stderr, "CUnit: cannot initialise the registry: %s\n", CU_get_error_msg());
        return 2;
    }
    if (piper_tests_register() != 0 || CU_get_error() != CUE_SUCCESS) {
        fprintf(stderr, "CUnit: cannot register tests: %s\n", CU_get_error_msg());
        CU_cleanup_registry();
        return 2;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed_asserts = CU_get_number_of_failures();
    unsigned failed_tests = CU_get_number_of_tests_failed();
    unsigned failed_suites = CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    if (failed_asserts || failed_tests || failed_suites) {
        fprintf(stderr, "FAILED: %u assertions in %u tests, %u suites failed\n", failed_asserts,
                failed_tests, failed_suites);
        return 1;
    }
    return 0;
}
