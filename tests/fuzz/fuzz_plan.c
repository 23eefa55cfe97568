/* fuzz_plan.c — libFuzzer entry for the plan reader: any bytes go through plan_read; a plan
 * that reads must write back to a text that reads to the same text again, and must survive the
 * static check. A failed read must say where ("fuzz.plan:..."). Broken promises abort, so the
 * fuzzer hunts logic bugs as well as crashes. Seeds: tests/fuzz/corpus/plan (more from test_plan
 * run with PIPER_PLAN_CORPUS=DIR). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_plan: broken promise: %s\n", what);
        abort();
    }
}

static char *to_text(const plan_set *p)
{
    char *s = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&s, &n);
    base_error e;
    base_error_clear(&e);
    require(f && plan_write(p, f, &e) == 0, "a plan that was read can be written");
    fclose(f);
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    plan_set p;
    base_error e;
    base_error_clear(&e);
    int rc = plan_read(&p, "fuzz.plan", (const char *)data, size, &e);
    require(rc == 0 || rc == -1, "status is 0 or -1");
    if (rc) {
        require(e.set && strncmp(e.msg, "fuzz.plan", 9) == 0, "a read error names the file");
        require(p.nlists == 0 && p.ndevices == 0, "a failed read leaves the plan empty");
        return 0;
    }
    char *t1 = to_text(&p);
    plan_set q;
    require(plan_read(&q, "again.plan", t1, strlen(t1), &e) == 0, "written text reads back");
    char *t2 = to_text(&q);
    require(strcmp(t1, t2) == 0, "write, read, write gives the same text");
    plan_stats st;
    rc = plan_check(&q, &st, &e);
    require(rc == 0 || (rc == -1 && e.set && st.dev == NULL), "check returns 0 or -1 with an error");
    plan_stats_free(&st);
    free(t1);
    free(t2);
    plan_free(&q);
    plan_free(&p);
    return 0;
}
