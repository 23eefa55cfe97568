/* fuzz_order_csv.c — libFuzzer entry for the per-rank order reader (sched/order_csv.c): any
 * bytes go through sched_order_csv_read; a failed read names the file and a position
 * ("fuzz.csv:L:C: ..."); a table that reads passes or fails sched_table_validate with a located
 * message, and writes back (sched_order_csv_write) to a text that reads to the same table text
 * again. Broken promises abort. Seeds: tests/fuzz/corpus/order_csv. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/schedule.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_order_csv: broken promise: %s\n", what);
        abort();
    }
}

static char *to_text(const sched_table *t)
{
    char *s = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&s, &n);
    require(f != NULL, "a memory stream opens");
    sched_order_csv_write(t, f);
    fclose(f);
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sched_table t;
    base_error e;
    base_error_clear(&e);
    int rc = sched_order_csv_read("fuzz.csv", (const char *)data, size, &t, &e);
    require(rc == 0 || rc == -1, "status is 0 or -1");
    if (rc) {
        require(e.set && strncmp(e.msg, "fuzz.csv:", 9) == 0, "a read error names the file and line");
        return 0;
    }
    base_error_clear(&e);
    rc = sched_table_validate(&t, "fuzz.csv", 0, 0, &e);
    require(rc == 0 || (rc == -1 && e.set), "validation returns 0 or -1 with an error");
    char *t1 = to_text(&t);
    sched_table u;
    base_error_clear(&e);
    require(sched_order_csv_read("again.csv", t1, strlen(t1), &u, &e) == 0, "written text reads back");
    char *t2 = to_text(&u);
    require(strcmp(t1, t2) == 0, "write, read, write gives the same text");
    free(t1);
    free(t2);
    sched_table_free(&u);
    sched_table_free(&t);
    return 0;
}
