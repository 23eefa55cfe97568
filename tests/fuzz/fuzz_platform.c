/* fuzz_platform.c — libFuzzer entry for the platform pre-check (sim/platform_user.c): the input
 * is written to a scratch file and handed to sim_platform_check for a plan of two devices, so
 * SimGrid's parser runs in the check's child process and its messages come back through the
 * parent's explanation. The check must not take the fuzzer down with it, must return 0 or -1,
 * and a refusal names the file. Slow by design (a process per input). Seeds:
 * tests/fuzz/corpus/platform. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_platform: broken promise: %s\n", what);
        abort();
    }
}

static char path[64];

static void remove_scratch(void) { unlink(path); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!path[0]) {
        snprintf(path, sizeof path, "/tmp/piper-fuzz-platform-%ld.xml", (long)getpid());
        atexit(remove_scratch);
    }
    FILE *f = fopen(path, "wb");
    require(f != NULL, "the scratch file opens");
    require(fwrite(data, 1, size, f) == size && fclose(f) == 0, "the scratch file is written");
    base_error e;
    base_error_clear(&e);
    int rc = sim_platform_check(path, 2, &e);
    require(rc == 0 || rc == -1, "status is 0 or -1");
    if (rc) require(e.set && strstr(e.msg, path) != NULL, "a refused platform names its file");
    return 0;
}
